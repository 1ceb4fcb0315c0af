//! The library: one SQLite file holding everything durable.
//!
//! Invariant: every write that an event reports has been committed before the event is
//! sent, and every multi-row change (a chat turn, a round, a checkpoint) is one
//! transaction. WAL mode lets readers on other connections proceed while a writer works.

mod migrations;

use rusqlite::{Connection, OpenFlags, Transaction};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use migrations::MIGRATIONS;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    // Said whole here, and not chained as a source: SQLite's message would be said again.
    #[error("cannot open the library at {path}: {}", describe(error))]
    Open { path: PathBuf, error: rusqlite::Error },
    #[error("cannot create the library folder {path}: {source}")]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("the library at {path} was written by a newer Lorekeeper (schema {found}, this build knows {known})")]
    TooNew { path: PathBuf, found: u32, known: u32 },
    #[error("{path} is not a Lorekeeper library: it is another program's SQLite database (tables of its own: {tables}; its schema is not Lorekeeper's); nothing was changed — give --library a new file or a Lorekeeper library")]
    Foreign { path: PathBuf, tables: u32 },
    #[error("migration {name} failed: {}", describe(error))]
    Migration { name: &'static str, error: rusqlite::Error },
    #[error("database error: {}", describe(.0))]
    Sql(rusqlite::Error),
    #[error("stored data is damaged: {0}")]
    Corrupt(String),
    #[error("not found: {0}")]
    NotFound(String),
    /// A change refused as it stands (an empty name, a delete not confirmed).
    #[error("{0}")]
    Invalid(String),
    /// A change refused because what it would act on changed after the sender's view of
    /// it (a round's campaign state edited since, an alternative of a round since passed).
    #[error("{0}")]
    Conflict(String),
}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        StoreError::Sql(error)
    }
}

/// SQLite's error said once (rusqlite repeats the message with its code), with what
/// to do where there is something to do.
fn describe(e: &rusqlite::Error) -> String {
    use rusqlite::ffi::ErrorCode;
    match e {
        rusqlite::Error::SqliteFailure(failure, message) => {
            let said = message.clone().unwrap_or_else(|| failure.to_string());
            let said = said.split(": Error code").next().unwrap_or(&said).to_string();
            match failure.code {
                ErrorCode::DatabaseCorrupt => format!("{said}: the file is damaged; restore it from a backup, or move it away to start a new library"),
                ErrorCode::NotADatabase => format!("{said}: this is not a Lorekeeper library (nor any SQLite file); check --library"),
                ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => {
                    format!("{said}: another program has held the library for over 10 s (another Lorekeeper, or a tool with the file open); close it and try again")
                }
                ErrorCode::ReadOnly | ErrorCode::CannotOpen | ErrorCode::PermissionDenied => format!("{said}: check the file's and its folder's permissions"),
                ErrorCode::DiskFull => format!("{said}: the disk is full; nothing was written"),
                _ => said,
            }
        }
        other => other.to_string(),
    }
}

/// Handle to the library database. Cheap to clone; all clones share one writer
/// connection, serialised by a mutex, so writes never contend inside SQLite.
#[derive(Clone)]
pub struct Store {
    path: PathBuf,
    writer: Arc<Mutex<Connection>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Open (creating if needed) the library at `path` and bring its schema up to date.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir { path: dir.to_path_buf(), source })?;
        }
        // Looked at read-only first: opening for writing switches the file to WAL.
        if std::fs::metadata(&path).is_ok_and(|m| m.len() > 0) {
            migrations::refuse_foreign(&open_connection(&path, true)?, &path)?;
        }
        let mut conn = open_connection(&path, false)?;
        migrations::migrate(&mut conn, &path)?;
        Ok(Self { path, writer: Arc::new(Mutex::new(conn)) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Run `f` on the writer connection.
    pub fn with<T>(&self, f: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let conn = self.lock();
        f(&conn)
    }

    /// Run `f` inside one transaction: committed if `f` returns `Ok`, rolled back
    /// otherwise (and if the process dies before the commit).
    ///
    /// The transaction begins IMMEDIATE: it takes the library's write lock at once, so
    /// when another process holds it the busy timeout waits for it. A deferred
    /// transaction that reads and then writes would instead fail with "database is
    /// locked" the moment it tries to write — throwing away a finished, paid-for reply.
    pub fn transaction<T>(&self, f: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    /// A separate read-only connection, for long reads (search, exports) that must not
    /// hold the writer.
    pub fn reader(&self) -> Result<Connection, StoreError> {
        open_connection(&self.path, true)
    }

    /// A separate writable connection that gives up after `busy` instead of waiting
    /// long for the writer: for best-effort records (the LLM call log) written from
    /// threads that may run while another holds a write transaction.
    pub fn side_connection(&self, busy: Duration) -> Result<Connection, StoreError> {
        let conn = open_connection(&self.path, false)?;
        conn.busy_timeout(busy).map_err(|error| StoreError::Open { path: self.path.clone(), error })?;
        Ok(conn)
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave a half-applied write behind:
        // SQLite rolls back the open transaction when it is dropped.
        self.writer.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Read a value from the `meta` key-value table.
    pub fn meta_get(&self, key: &str) -> Result<Option<String>, StoreError> {
        use rusqlite::OptionalExtension;
        self.with(|c| Ok(c.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0)).optional()?))
    }

    pub fn meta_set(&self, key: &str, value: &str) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute(
                "INSERT INTO meta(key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                [key, value],
            )?;
            Ok(())
        })
    }
}

fn open_connection(path: &Path, read_only: bool) -> Result<Connection, StoreError> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI
    };
    let open_err = |error| StoreError::Open { path: path.to_path_buf(), error };
    let conn = Connection::open_with_flags(path, flags).map_err(open_err)?;
    conn.busy_timeout(Duration::from_secs(10)).map_err(open_err)?;
    conn.pragma_update(None, "foreign_keys", "ON").map_err(open_err)?;
    // Read pages through a memory map instead of a read() copy each: a search over a
    // large library touches many pages, and the copies were a fifth of its time.
    conn.pragma_update(None, "mmap_size", 1i64 << 30).map_err(open_err)?;
    if !read_only {
        conn.pragma_update(None, "journal_mode", "WAL").map_err(open_err)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(open_err)?;
    }
    Ok(conn)
}

/// The rows that point at row `id` of `table` through a foreign key, per table (those
/// with none left out): what deleting the row takes with it (`ON DELETE CASCADE`) or
/// unlinks. Read from the schema, so a new table that refers to `table` counts without
/// anyone listing it here.
pub fn dependents(conn: &Connection, table: &str, id: &str) -> Result<Vec<(String, u64)>, StoreError> {
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let mut out = Vec::new();
    for other in tables {
        let keys: Vec<(String, String)> = conn
            .prepare(&format!("SELECT \"table\", \"from\" FROM pragma_foreign_key_list('{}')", other.replace('\'', "''")))?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        let mut count = 0u64;
        for (_, column) in keys.into_iter().filter(|(target, _)| target == table) {
            let n: i64 = conn.query_row(
                &format!("SELECT count(*) FROM \"{}\" WHERE \"{}\" = ?1", other.replace('"', "\"\""), column.replace('"', "\"\"")),
                [id],
                |r| r.get(0),
            )?;
            count += n.max(0) as u64;
        }
        if count > 0 {
            out.push((other, count));
        }
    }
    Ok(out)
}

/// A new identifier: milliseconds since the epoch then random bits, in hex, so ids sort
/// by creation time and never collide in practice.
pub fn new_id() -> String {
    let millis = chrono::Utc::now().timestamp_millis().max(0) as u64;
    format!("{millis:012x}{:016x}", fastrand::u64(..))
}

/// Now, as the RFC 3339 UTC text every table stores.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_a_real_file_with_wal_and_foreign_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/lib.sqlite");
        let store = Store::open(&path).unwrap();
        assert!(path.exists());
        let (mode, fk): (String, i64) = store
            .with(|c| Ok((c.query_row("PRAGMA journal_mode", [], |r| r.get(0))?, c.query_row("PRAGMA foreign_keys", [], |r| r.get(0))?)))
            .unwrap();
        assert_eq!(mode, "wal");
        assert_eq!(fk, 1);
        let version: u32 = store.with(|c| Ok(c.query_row("PRAGMA user_version", [], |r| r.get(0))?)).unwrap();
        assert_eq!(version as usize, MIGRATIONS.len());
    }

    #[test]
    fn reopening_is_idempotent_and_keeps_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lib.sqlite");
        Store::open(&path).unwrap().meta_set("k", "v").unwrap();
        let store = Store::open(&path).unwrap();
        assert_eq!(store.meta_get("k").unwrap().as_deref(), Some("v"));
    }

    #[test]
    fn a_failed_transaction_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("lib.sqlite")).unwrap();
        let result: Result<(), StoreError> = store.transaction(|tx| {
            tx.execute("INSERT INTO meta(key, value) VALUES ('a', '1')", [])?;
            Err(StoreError::Corrupt("boom".into()))
        });
        assert!(result.is_err());
        assert_eq!(store.meta_get("a").unwrap(), None);
    }

    /// Another program's SQLite file is left as it was, not given our tables.
    #[test]
    fn refuses_another_programs_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("other.sqlite");
        rusqlite::Connection::open(&path).unwrap().execute_batch("CREATE TABLE foo(x); INSERT INTO foo VALUES (1);").unwrap();
        assert!(matches!(Store::open(&path), Err(StoreError::Foreign { tables: 1, .. })));
        let tables: i64 = rusqlite::Connection::open(&path)
            .unwrap()
            .query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(tables, 1, "nothing was added");
        let mode: String = rusqlite::Connection::open(&path).unwrap().query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
        assert_eq!(mode, "delete", "not even switched to WAL");
        // A version number of another program's on an empty file is not ours either.
        let numbered = dir.path().join("numbered.sqlite");
        rusqlite::Connection::open(&numbered).unwrap().execute_batch("PRAGMA user_version = 3;").unwrap();
        assert!(matches!(Store::open(&numbered), Err(StoreError::Foreign { tables: 0, .. })));
        // An empty SQLite file is a new library.
        let empty = dir.path().join("empty.sqlite");
        rusqlite::Connection::open(&empty).unwrap().execute_batch("PRAGMA user_version = 0;").unwrap();
        Store::open(&empty).unwrap();
    }

    #[test]
    fn refuses_a_newer_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lib.sqlite");
        Store::open(&path).unwrap().with(|c| Ok(c.pragma_update(None, "user_version", 9999)?)).unwrap();
        assert!(matches!(Store::open(&path), Err(StoreError::TooNew { .. })));
    }

    #[test]
    fn ids_are_unique_and_time_ordered() {
        let a = new_id();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = new_id();
        assert!(a < b);
        assert_eq!(a.len(), 28);
    }
}
