//! [`MemoryBank`]: the memories of one library, their keyword index (FTS5, in SQLite),
//! their vectors (in SQLite, mirrored in a [`VectorIndex`]) and hybrid search over both.

use super::embedder::{EmbedError, Embedder};
use super::records::{self, Memory, MemoryKind};
use super::vectors::VectorIndex;
use super::MemoryConfig;

mod graph;
mod rerank;
mod search;
mod write;

pub use write::{MemoryWrite, PreparedEdit, PreparedMemories, remove_campaign, remove_character, remove_ids, remove_scene, remove_source};
use crate::store::{Store, StoreError};
use rusqlite::{Connection, OptionalExtension};
use serde::Serialize;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Embed(#[from] EmbedError),
    #[error("cannot read {path}: {message}")]
    Read { path: String, message: String },
    #[error("{path} line {line}: {message}")]
    BadLine { path: String, line: usize, message: String },
    #[error("{0}")]
    Invalid(String),
}

impl From<rusqlite::Error> for MemoryError {
    fn from(e: rusqlite::Error) -> Self {
        MemoryError::Store(StoreError::Sql(e))
    }
}

/// Counts for `memory stats` and the browser's index status.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct MemoryStats {
    pub memories: usize,
    pub turns: usize,
    pub summaries: usize,
    pub lore_chunks: usize,
    pub sessions: usize,
    pub with_vectors: usize,
    /// Memories with no vector of the current model (a `memory reindex` fills them).
    pub without_vectors: usize,
    pub unsummarised_turns: usize,
    pub model: String,
    pub dimension: usize,
    /// Vectors served by the HNSW graph, and those scanned exactly until it is rebuilt.
    pub ann_indexed: usize,
    pub ann_pending: usize,
    /// Deleted memories the graph still holds (skipped in results until a rebuild).
    pub ann_removed: usize,
    pub rebuilding: bool,
    /// Points inserted so far by the running rebuild, of `rebuild_total`.
    pub rebuild_done: usize,
    pub rebuild_total: usize,
}

/// What a graph rebuild reports while it runs (the engine turns these into events).
#[derive(Debug, Clone, PartialEq)]
pub enum GraphProgress {
    Started { vectors: usize },
    Building { done: usize, total: usize },
    Finished { vectors: usize, elapsed_ms: u64 },
    Failed { message: String },
}

type GraphObserver = Arc<dyn Fn(GraphProgress) + Send + Sync>;



pub struct MemoryBank {
    store: Store,
    config: RwLock<MemoryConfig>,
    embedder: Mutex<Option<Embedder>>,
    index: RwLock<VectorIndex>,
    reader: Mutex<Option<Connection>>,
    rebuilding: AtomicBool,
    /// The running rebuild's progress bar (hidden: only its position is read).
    progress: Mutex<Option<indicatif::ProgressBar>>,
    observer: RwLock<Option<GraphObserver>>,
    /// This bank, for starting a background rebuild from `&self`.
    me: Weak<MemoryBank>,
    /// Lower-cased names of everyone who has spoken, for stripping names from queries:
    /// reading them is a scan of every memory, too slow to repeat per search at 100k.
    speakers: RwLock<Option<HashSet<String>>>,
    /// Vectors of lore entries' contents, for vector-activated World Info: embedded once
    /// per content (keyed by its hash), never stored.
    pub(in crate::memory) entry_vectors: Mutex<std::collections::HashMap<u64, Arc<Vec<f32>>>>,
}

impl MemoryBank {
    /// Open the memories of `store` and load their vectors. The embedder starts on first
    /// use, so keyword search works (and a missing model is reported) without it.
    pub fn open(store: Store, config: MemoryConfig) -> Result<Arc<MemoryBank>, MemoryError> {
        Self::open_observed(store, config, None)
    }

    /// [`Self::open`], telling `observer` how background graph rebuilds go (the engine
    /// emits them as events), including one that opening a stale library starts.
    pub fn open_observed(
        store: Store,
        config: MemoryConfig,
        observer: Option<Arc<dyn Fn(GraphProgress) + Send + Sync>>,
    ) -> Result<Arc<MemoryBank>, MemoryError> {
        let bank = Arc::new_cyclic(|me| MemoryBank {
            index: RwLock::new(VectorIndex::new(config.embedding.dimension)),
            store,
            config: RwLock::new(config),
            embedder: Mutex::new(None),
            reader: Mutex::new(None),
            rebuilding: AtomicBool::new(false),
            progress: Mutex::new(None),
            observer: RwLock::new(observer),
            me: me.clone(),
            speakers: RwLock::new(None),
            entry_vectors: Mutex::new(std::collections::HashMap::new()),
        });
        bank.load_vectors()?;
        Ok(bank)
    }

    fn notify(&self, progress: GraphProgress) {
        let observer = self.observer.read().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(observer) = observer {
            observer(progress);
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn config(&self) -> MemoryConfig {
        self.config.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Change retrieval settings (the embedding model needs a reopen and a reindex).
    pub fn set_config(&self, config: MemoryConfig) {
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = config;
    }

    /// Names the embedding model in stored vectors, so vectors of another model are
    /// recognised as stale.
    pub fn model_id(&self) -> String {
        let e = &self.config().embedding;
        let dir = e.model_dir();
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        format!("{name}/{}", e.model_file)
    }

    pub fn embedder(&self) -> Result<Embedder, MemoryError> {
        let mut slot = self.embedder.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = slot.as_ref() {
            return Ok(e.clone());
        }
        let e = Embedder::shared(&self.config().embedding)?;
        *slot = Some(e.clone());
        Ok(e)
    }

    /// Use this embedder (tests, benches, a panel that already started one).
    pub fn set_embedder(&self, embedder: Embedder) {
        *self.embedder.lock().unwrap_or_else(|p| p.into_inner()) = Some(embedder);
    }

    fn with_reader<T>(&self, f: impl FnOnce(&Connection) -> Result<T, MemoryError>) -> Result<T, MemoryError> {
        let mut slot = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(self.store.reader()?);
        }
        match slot.as_ref() {
            Some(conn) => f(conn),
            None => Err(MemoryError::Invalid("no reader connection".into())),
        }
    }

    pub fn stats(&self) -> Result<MemoryStats, MemoryError> {
        let model = self.model_id();
        let mut stats = self.store.with(|c| {
            let count = |sql: &str| -> Result<usize, StoreError> { Ok(c.query_row(sql, [], |r| r.get::<_, i64>(0))? as usize) };
            Ok(MemoryStats {
                memories: count("SELECT count(*) FROM memories")?,
                turns: count("SELECT count(*) FROM memories WHERE kind = 'turn'")?,
                summaries: count("SELECT count(*) FROM memories WHERE kind = 'summary'")?,
                lore_chunks: count("SELECT count(*) FROM memories WHERE kind = 'lore'")?,
                sessions: count("SELECT count(DISTINCT session) FROM memories WHERE session IS NOT NULL")?,
                unsummarised_turns: count("SELECT count(*) FROM memories WHERE kind = 'turn' AND summarised = 0")?,
                with_vectors: c.query_row("SELECT count(*) FROM memory_vectors WHERE model = ?1", [&model], |r| r.get::<_, i64>(0))?
                    as usize,
                ..Default::default()
            })
        })?;
        stats.without_vectors = stats.memories.saturating_sub(stats.with_vectors);
        let index = self.index.read().unwrap_or_else(|p| p.into_inner());
        stats.model = model;
        stats.dimension = index.dim;
        stats.ann_pending = index.pending();
        stats.ann_removed = index.gone;
        stats.ann_indexed = index.len() - stats.ann_pending - index.gone;
        stats.rebuilding = self.rebuilding.load(Ordering::SeqCst);
        if let Some(bar) = self.progress.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            stats.rebuild_done = bar.position() as usize;
            stats.rebuild_total = bar.length().unwrap_or(0) as usize;
        }
        Ok(stats)
    }

    /// The content hash stored with the memories of `source`, if any.
    pub fn source_hash(&self, source: &str) -> Result<Option<String>, MemoryError> {
        Ok(self.store.with(|c| {
            Ok(c.query_row("SELECT content_hash FROM memories WHERE source = ?1 LIMIT 1", [source], |r| r.get(0))
                .optional()?
                .flatten())
        })?)
    }

    /// Every lore source currently indexed.
    pub fn lore_sources(&self) -> Result<Vec<String>, MemoryError> {
        Ok(self.store.with(|c| {
            let mut stmt = c.prepare("SELECT DISTINCT source FROM memories WHERE kind = 'lore' AND source IS NOT NULL")?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            Ok(rows.collect::<Result<Vec<String>, _>>()?)
        })?)
    }

    /// A memory and the turns around it (the browser's "source turn in context").
    pub fn context(&self, id: &str, before: usize, after: usize) -> Result<Vec<Memory>, MemoryError> {
        self.with_reader(|c| match records::get(c, id)? {
            Some(m) if m.kind == MemoryKind::Turn => Ok(records::context(c, &m, before, after)?),
            Some(m) => Ok(vec![m]),
            None => Err(MemoryError::Store(StoreError::NotFound(format!("memory {id}")))),
        })
    }
}
