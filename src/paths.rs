//! Where things live: the library, the config and the logs (per user), and the shipped
//! resource folders (assets, models, prompts, lore).
//!
//! The floor of the crate: it imports nothing of Lorekeeper, so every module may use it.

use std::path::{Path, PathBuf};

/// Why no path could be resolved.
#[derive(Debug, thiserror::Error)]
pub enum PathsError {
    #[error("no home directory could be found; pass --library and --config")]
    NoHome,
}

/// Where the config, the library and the logs live (the logs beside a library named on
/// the command line, else under the XDG data dir).
#[derive(Debug, Clone, PartialEq)]
pub struct Paths {
    pub config_file: PathBuf,
    pub library_file: PathBuf,
    pub log_dir: PathBuf,
}

impl Paths {
    /// XDG defaults, each overridable (the CLI's `--library` and `--config`).
    pub fn resolve(library: Option<PathBuf>, config: Option<PathBuf>) -> Result<Self, PathsError> {
        let dirs = directories::ProjectDirs::from("", "", "lorekeeper");
        let data_dir = || dirs.as_ref().map(|d| d.data_dir().to_path_buf()).ok_or(PathsError::NoHome);
        // A library named on the command line keeps its logs beside it, so a library in a
        // folder of its own (a test, a portable copy) writes nothing anywhere else.
        let own_logs = library.as_ref().map(|p| p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).join("logs"));
        let library_file = match library {
            Some(p) => p,
            None => data_dir()?.join("library.sqlite"),
        };
        let config_file = match config {
            Some(p) => p,
            None => dirs.as_ref().map(|d| d.config_dir().join("config.toml")).ok_or(PathsError::NoHome)?,
        };
        let log_dir = match (own_logs, &dirs) {
            (Some(beside), _) => beside,
            (None, Some(d)) => d.data_local_dir().join("logs"),
            (None, None) => library_file.parent().unwrap_or(Path::new(".")).join("logs"),
        };
        Ok(Self { config_file, library_file, log_dir })
    }
}

/// The folder of shipped assets (demo script, demo lore, icons).
pub fn assets_dir() -> PathBuf {
    resource_dir("LOREKEEPER_ASSETS_DIR", "assets")
}

/// The folder the set-up command fills with the ONNX runtime and model files.
pub fn models_dir() -> PathBuf {
    resource_dir("LOREKEEPER_MODELS_DIR", "models")
}

/// The folder of prompt templates.
pub fn prompts_dir() -> PathBuf {
    resource_dir("LOREKEEPER_PROMPTS_DIR", "prompts")
}

/// The folder of shipped lore.
pub fn lore_dir() -> PathBuf {
    resource_dir("LOREKEEPER_LORE_DIR", "lore")
}

/// An environment override, else `./NAME` when run from a checkout, else the folder in
/// the source tree this binary was built from.
fn resource_dir(env: &str, name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os(env) {
        return PathBuf::from(dir);
    }
    let local = PathBuf::from(name);
    if local.is_dir() {
        return local;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}


/// Why [`read_bounded`] read nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a regular file")]
    NotAFile { path: PathBuf },
    #[error("{path} is larger than {limit} bytes")]
    TooLarge { path: PathBuf, limit: u64 },
}

/// Read a whole file the user named, refusing what is not a regular file (`/dev/zero`,
/// a FIFO, a directory) and stopping at `limit` bytes whatever the file claims to be:
/// a hostile or mistaken path ends at once with a clear error instead of filling memory
/// or waiting for ever.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    use std::io::Read;
    let io = |source| ReadError::Io { path: path.to_path_buf(), source };
    // `metadata` follows symlinks, so a link to a device is refused like the device.
    if !std::fs::metadata(path).map_err(io)?.is_file() {
        return Err(ReadError::NotAFile { path: path.to_path_buf() });
    }
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { path: path.to_path_buf(), limit });
    }
    Ok(bytes)
}

/// [`read_bounded`] as UTF-8 text.
pub fn read_text_bounded(path: &Path, limit: u64) -> Result<String, ReadError> {
    let bytes = read_bounded(path, limit)?;
    String::from_utf8(bytes).map_err(|e| ReadError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_fifos_directories_and_big_files_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let started = std::time::Instant::now();
        assert!(matches!(read_bounded(Path::new("/dev/zero"), 1024), Err(ReadError::NotAFile { .. })));
        assert!(matches!(read_bounded(dir.path(), 1024), Err(ReadError::NotAFile { .. })));
        let fifo = dir.path().join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            assert!(matches!(read_bounded(&fifo, 1024), Err(ReadError::NotAFile { .. })), "a FIFO is not opened (it would block)");
        }
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 4096]).unwrap();
        assert!(matches!(read_bounded(&big, 4095), Err(ReadError::TooLarge { limit: 4095, .. })));
        assert_eq!(read_bounded(&big, 4096).unwrap().len(), 4096);
        assert!(matches!(read_bounded(&dir.path().join("missing"), 10), Err(ReadError::Io { .. })));
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn a_library_named_on_the_command_line_keeps_its_logs_beside_it() {
        let named = Paths::resolve(Some(PathBuf::from("/srv/campaigns/lib.sqlite")), Some(PathBuf::from("/etc/lk.toml"))).unwrap();
        assert_eq!(named.log_dir, PathBuf::from("/srv/campaigns/logs"));
        let bare = Paths::resolve(Some(PathBuf::from("lib.sqlite")), None).unwrap();
        assert_eq!(bare.log_dir, PathBuf::from("./logs"));
    }
}
