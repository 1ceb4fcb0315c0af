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

/// Where the config, the library and the logs live.
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
        let library_file = match library {
            Some(p) => p,
            None => data_dir()?.join("library.sqlite"),
        };
        let config_file = match config {
            Some(p) => p,
            None => dirs.as_ref().map(|d| d.config_dir().join("config.toml")).ok_or(PathsError::NoHome)?,
        };
        let log_dir = match &dirs {
            Some(d) => d.data_local_dir().join("logs"),
            None => library_file.parent().unwrap_or(Path::new(".")).join("logs"),
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

