//! [`MemoryBank`]: the memories of one library, their keyword index (FTS5, in SQLite),
//! their vectors (in SQLite, mirrored in a [`VectorIndex`]) and hybrid search over both.

use super::embedder::{EmbedError, Embedder};
use super::records::{self, Memory, MemoryKind};
use super::vectors::VectorIndex;
use super::MemoryConfig;

mod graph;
mod rerank;
mod save_clock;
mod search;
mod write;

pub use write::{FollowerVectors, MemoryWrite, PreparedEdit, PreparedMemories, remove_campaign, remove_character, remove_ids, remove_scene, remove_source, remove_with_followers};
use crate::store::{Store, StoreError};
use rusqlite::{Connection, OptionalExtension};
use serde::Serialize;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
    /// Vectors served by the HNSW graph, and those scanned exactly (all of them without
    /// a graph; those written while it was being saved or built, until it is free).
    pub ann_indexed: usize,
    pub ann_pending: usize,
    /// Deleted nodes the graph keeps as waypoints until insertions reuse their slots.
    pub ann_removed: usize,
    /// Nodes of the graph its walk does not reach from their own vector, so every
    /// search scans them exactly (memories unlike the rest of the library).
    pub ann_unreachable: usize,
    /// A build or a save of the graph is running.
    pub rebuilding: bool,
    /// Points inserted so far by the running build, of `rebuild_total`.
    pub rebuild_done: usize,
    pub rebuild_total: usize,
    /// Whether this bank's graph came from the saved file (no build on open).
    pub graph_loaded: bool,
    /// Full builds and saves of the graph this bank has done since it opened.
    pub graph_builds: usize,
    pub graph_saves: usize,
    /// Entries of the library's vector journal (other processes' vector changes) this
    /// bank replayed before its searches since it opened — its own writes need none —
    /// and the times it loaded every vector anew because another process had trimmed
    /// entries it had not seen.
    pub synced_changes: usize,
    pub synced_reloads: usize,
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
    index: VectorIndex,
    reader: Mutex<Option<Connection>>,
    /// A build or save of the graph is running (one at a time).
    rebuilding: AtomicBool,
    /// The running build's progress: points inserted, of `build_total` (0: none).
    build_done: AtomicUsize,
    build_total: AtomicUsize,
    /// The last `memory_vector_changes` entry the index holds. Locked by every publish
    /// and by a journal replay, so the two never interleave.
    journal: Mutex<i64>,
    /// Vectors written or removed since the graph was last saved.
    changes: AtomicUsize,
    loaded_saved: AtomicBool,
    builds: AtomicUsize,
    saves: AtomicUsize,
    /// What [`MemoryStats::synced_changes`] and `synced_reloads` count.
    replayed: AtomicUsize,
    reloads: AtomicUsize,
    observer: RwLock<Option<GraphObserver>>,
    /// This bank, for starting a background rebuild from `&self`.
    me: Weak<MemoryBank>,
    /// Lower-cased names of everyone who has spoken, for stripping names from queries:
    /// reading them is a scan of every memory, too slow to repeat per search at 100k.
    speakers: RwLock<Option<HashSet<String>>>,
    /// Vectors of lore entries' contents, for vector-activated World Info: embedded once
    /// per content (keyed by its hash), never stored.
    pub(in crate::memory) entry_vectors: Mutex<std::collections::HashMap<u64, Arc<Vec<f32>>>>,
    /// Dropped with the bank, which stops its save clock (see `save_clock`).
    save_clock: Mutex<Option<save_clock::ClockStop>>,
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
            index: VectorIndex::new(config.embedding.dimension),
            store,
            config: RwLock::new(config),
            embedder: Mutex::new(None),
            reader: Mutex::new(None),
            rebuilding: AtomicBool::new(false),
            build_done: AtomicUsize::new(0),
            build_total: AtomicUsize::new(0),
            journal: Mutex::new(0),
            changes: AtomicUsize::new(0),
            loaded_saved: AtomicBool::new(false),
            builds: AtomicUsize::new(0),
            saves: AtomicUsize::new(0),
            replayed: AtomicUsize::new(0),
            reloads: AtomicUsize::new(0),
            observer: RwLock::new(observer),
            me: me.clone(),
            speakers: RwLock::new(None),
            entry_vectors: Mutex::new(std::collections::HashMap::new()),
            save_clock: Mutex::new(None),
        });
        bank.index.set_ef_search(bank.config().graph.ef_search);
        bank.load_vectors()?;
        *bank.save_clock.lock().unwrap_or_else(|p| p.into_inner()) = save_clock::start(&bank);
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
        self.index.set_ef_search(config.graph.ef_search);
        let interval = config.graph.save_after_secs;
        let old = std::mem::replace(&mut *self.config.write().unwrap_or_else(|p| p.into_inner()), config);
        if old.graph.save_after_secs != interval {
            self.poke_save_clock();
        }
    }

    /// Names the embedding model in stored vectors, so vectors of another model are
    /// recognised as stale.
    pub fn model_id(&self) -> String {
        let e = &self.config().embedding;
        format!("{}/{}", e.model_name(), e.model_file)
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
        self.sync_before_search();
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
        stats.model = model;
        stats.dimension = self.index.dim;
        stats.ann_pending = self.index.pending();
        stats.ann_removed = self.index.vacant();
        stats.ann_unreachable = self.index.unreachable();
        stats.ann_indexed = self.index.in_graph();
        stats.rebuilding = self.rebuilding.load(Ordering::SeqCst);
        stats.rebuild_total = self.build_total.load(Ordering::SeqCst);
        if stats.rebuild_total > 0 {
            stats.rebuild_done = self.build_done.load(Ordering::SeqCst);
        }
        stats.graph_loaded = self.loaded_saved.load(Ordering::SeqCst);
        stats.graph_builds = self.builds.load(Ordering::SeqCst);
        stats.graph_saves = self.saves.load(Ordering::SeqCst);
        stats.synced_changes = self.replayed.load(Ordering::SeqCst);
        stats.synced_reloads = self.reloads.load(Ordering::SeqCst);
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

    /// The stored vector of memory `id` under the current model (none when it has none).
    pub fn stored_vector(&self, id: &str) -> Result<Option<Vec<f32>>, MemoryError> {
        use rusqlite::OptionalExtension;
        let model = self.model_id();
        self.with_reader(|c| {
            let blob: Option<Vec<u8>> = c
                .query_row(
                    "SELECT v.vector FROM memories m JOIN memory_vectors v ON v.memory_rowid = m.rowid WHERE m.id = ?1 AND v.model = ?2",
                    rusqlite::params![id, model],
                    |r| r.get(0),
                )
                .optional()?;
            Ok(blob.and_then(|b| records::blob_to_vector(&b)))
        })
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
