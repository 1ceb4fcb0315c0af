//! Logs go to a daily file under the data dir (and to stderr with `RUST_LOG`), never
//! to stdout, which belongs to `--json` output.

use std::path::Path;
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Keeps the background log writer alive; drop it last.
pub struct LogGuard(#[allow(dead_code)] Option<tracing_appender::non_blocking::WorkerGuard>);

/// The HTTP library's own trace output is a dump of every request on the wire,
/// `Authorization` header included: it is held to warnings whatever level is asked for,
/// so no log level ever writes a key.
fn quiet_wire(filter: EnvFilter) -> EnvFilter {
    ["ureq=warn", "ureq_proto=warn", "rustls=warn"]
        .into_iter()
        .filter_map(|d| d.parse().ok())
        .fold(filter, |f, directive| f.add_directive(directive))
}

/// Start logging into `dir/lorekeeper.log.YYYY-MM-DD`. Failing to create the folder
/// is not fatal: the app runs without a log file and says so on stderr.
pub fn init(dir: &Path) -> LogGuard {
    let filter = || quiet_wire(EnvFilter::try_from_env("LOREKEEPER_LOG").unwrap_or_else(|_| EnvFilter::new("info")));
    let stderr_layer = std::env::var_os("RUST_LOG").map(|_| {
        fmt::layer().with_writer(std::io::stderr).with_filter(quiet_wire(EnvFilter::from_default_env()))
    });
    let (file_layer, guard) = match std::fs::create_dir_all(dir) {
        Ok(()) => {
            let appender = tracing_appender::rolling::daily(dir, "lorekeeper.log");
            let (writer, guard) = tracing_appender::non_blocking(appender);
            (Some(fmt::layer().with_ansi(false).with_writer(writer).with_filter(filter())), Some(guard))
        }
        Err(e) => {
            eprintln!("lorekeeper: cannot create the log folder {}: {e}", dir.display());
            (None, None)
        }
    };
    let _ = tracing_subscriber::registry().with(file_layer).with(stderr_layer).try_init();
    LogGuard(guard)
}
