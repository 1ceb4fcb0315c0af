//! [`MemoryBank`]: the memories of one library, their keyword index (FTS5, in SQLite),
//! their vectors (in SQLite, mirrored in a [`VectorIndex`]) and hybrid search over both.

use super::embedder::{EmbedError, Embedder};
use super::keyword;
use super::records::{self, Memory, MemoryKind, NewMemory};
use super::retrieval::{Candidate, RetrievalHit, SearchFilter, SearchMode, SearchRequest, fuse};
use super::vectors::{VectorIndex, build_ann_reporting};
use super::MemoryConfig;

mod rerank;
use crate::store::{Store, StoreError};
use rusqlite::{Connection, OptionalExtension, params_from_iter};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

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

/// `WITH wanted(r) AS (VALUES ...)` over `rowids`, or `None` when there are none. Join
/// it first, with CROSS JOIN, to look each row up by rowid: with a plain
/// `rowid IN (...)` beside a filter SQLite preferred the (kind, scope, scope_id) index
/// and walked every row of the character's scope (13 ms at 100k instead of ~0.1 ms).
/// Rowids are integers from the library or the index, so they can be written into SQL.
fn wanted_rows(rowids: impl Iterator<Item = i64>) -> Option<String> {
    let values: Vec<String> = rowids.map(|r| format!("({r})")).collect();
    (!values.is_empty()).then(|| format!("WITH wanted(r) AS (VALUES {})", values.join(",")))
}

/// A filter that keeps at most this many memories is searched by reading their vectors
/// from the library (a few hundred µs) instead of testing every row of the index.
const SMALL_SUBSET: usize = 2048;

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

    /// Start a background rebuild when the graph is missing or stale enough (see
    /// [`super::GraphConfig`]); returns whether one was started.
    pub fn maybe_rebuild(&self) -> bool {
        let config = self.config().graph;
        if !config.auto_rebuild || self.rebuilding.load(Ordering::SeqCst) {
            return false;
        }
        let (live, outside, covered) = {
            let index = self.index.read().unwrap_or_else(|p| p.into_inner());
            (index.live(), index.pending() + index.gone, index.len() - index.pending())
        };
        if live < config.min_vectors || (covered > 0 && outside < config.rebuild_after.max(covered / 20)) {
            return false;
        }
        let Some(bank) = self.me.upgrade() else { return false };
        // Claimed here, not on the new thread, so `is_rebuilding` is true from now on.
        if self.rebuilding.swap(true, Ordering::SeqCst) {
            return false;
        }
        let started = std::thread::Builder::new().name("memory-graph".into()).spawn(move || {
            if let Err(e) = bank.run_rebuild() {
                tracing::warn!(error = %e, "background rebuild of the vector graph failed; searching exactly meanwhile");
            }
        });
        match started {
            Ok(_) => true,
            Err(e) => {
                self.rebuilding.store(false, Ordering::SeqCst);
                tracing::warn!(error = %e, "cannot start a thread to rebuild the vector graph");
                false
            }
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

    fn load_vectors(&self) -> Result<(), MemoryError> {
        let model = self.model_id();
        let dim = self.config().embedding.dimension;
        let mut index = VectorIndex::new(dim);
        self.store.with(|c| {
            let mut stmt =
                c.prepare("SELECT memory_rowid, vector FROM memory_vectors WHERE model = ?1 AND dim = ?2 ORDER BY memory_rowid")?;
            let mut rows = stmt.query(rusqlite::params![model, dim as i64])?;
            while let Some(row) = rows.next()? {
                let blob: Vec<u8> = row.get(1)?;
                if let Some(v) = records::blob_to_vector(&blob) {
                    index.push(row.get(0)?, &v);
                }
            }
            Ok(())
        })?;
        self.attach_saved_ann(&mut index, &model)?;
        {
            let mut current = self.index.write().unwrap_or_else(|p| p.into_inner());
            // A rebuild from the old index must not be swapped into this one.
            index.generation = current.generation + 1;
            *current = index;
        }
        self.maybe_rebuild();
        Ok(())
    }

    /// Use the persisted graph if it was built for this model over exactly the first
    /// rows of the index (no deletes since); otherwise search exactly until a rebuild.
    fn attach_saved_ann(&self, index: &mut VectorIndex, model: &str) -> Result<(), MemoryError> {
        let saved: Option<(i64, i64, Vec<u8>)> = self.store.with(|c| {
            Ok(c.query_row("SELECT max_rowid, count, graph FROM memory_ann WHERE id = 1 AND model = ?1", [model], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()?)
        })?;
        let Some((max_rowid, count, graph)) = saved else { return Ok(()) };
        let count = count as usize;
        if count == 0 || count > index.len() || index.rowids[count - 1] != max_rowid {
            return Ok(());
        }
        match super::vectors::decode_ann(&graph, Arc::from(index.flat(0..count)), index.dim, count) {
            Ok(ann) => {
                index.set_graph(ann);
            }
            Err(e) => tracing::warn!(error = %e, "the saved vector graph is unreadable; searching exactly until a rebuild"),
        }
        Ok(())
    }

    /// Store memories with their vectors (one transaction); they are searchable at once.
    pub fn add(&self, items: Vec<NewMemory>) -> Result<Vec<String>, MemoryError> {
        self.add_then(items, |_| Ok(()))
    }

    /// [`Self::add`], running `also` in the same transaction (the summariser marks the
    /// turns a summary covers, so both happen or neither does).
    pub fn add_then(
        &self,
        items: Vec<NewMemory>,
        also: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<(), StoreError>,
    ) -> Result<Vec<String>, MemoryError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let embedder = self.embedder()?;
        let texts = self.embedding_texts(&items)?;
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let vectors = embedder.embed_documents(&texts)?;
        self.insert(items, vectors, also)
    }

    /// [`Self::add_then`] without vectors, for when the embedding model cannot run: the
    /// memories are found by keyword search at once, and `memory reindex` gives them
    /// vectors later (they count as `without_vectors` until then).
    pub fn add_keyword_only_then(
        &self,
        items: Vec<NewMemory>,
        also: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<(), StoreError>,
    ) -> Result<Vec<String>, MemoryError> {
        if let Some(empty) = items.iter().find(|i| i.text.trim().is_empty()) {
            return Err(MemoryError::Invalid(format!("memory {:?} has no text", empty.id.as_deref().unwrap_or("(new)"))));
        }
        let rowids = self.store.transaction(|tx| {
            let rowids = self.write_in(tx, &items, None)?;
            also(tx)?;
            Ok(rowids)
        })?;
        self.store
            .with(|c| {
                let mut stmt = c.prepare_cached("SELECT id FROM memories WHERE rowid = ?1")?;
                rowids.iter().map(|r| Ok(stmt.query_row([r], |row| row.get(0))?)).collect()
            })
            .map_err(Into::into)
    }

    /// What gets embedded for each new memory: a turn is preceded by up to
    /// `context_turns` earlier turns of its session (from the batch or the store).
    fn embedding_texts(&self, items: &[NewMemory]) -> Result<Vec<String>, MemoryError> {
        let window = self.config().retrieval.context_turns;
        let mut recent: HashMap<String, std::collections::VecDeque<String>> = HashMap::new();
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let session = match (&item.session, item.kind) {
                (Some(s), MemoryKind::Turn) if window > 0 => s.clone(),
                _ => {
                    out.push(item.text.clone());
                    continue;
                }
            };
            if !recent.contains_key(&session) {
                let earlier = self.store.with(|c| {
                    let mut stmt = c.prepare_cached(
                        "SELECT text FROM memories WHERE session = ?1 AND kind = 'turn' ORDER BY seq DESC LIMIT ?2",
                    )?;
                    let rows = stmt.query_map(rusqlite::params![session, window as i64], |r| r.get::<_, String>(0))?;
                    Ok(rows.collect::<Result<Vec<_>, _>>()?)
                })?;
                recent.insert(session.clone(), earlier.into_iter().rev().collect());
            }
            let window_texts = recent.entry(session).or_default();
            let mut text = String::new();
            for t in window_texts.iter() {
                text.push_str(t);
                text.push('\n');
            }
            text.push_str(&item.text);
            out.push(text);
            window_texts.push_back(item.text.clone());
            while window_texts.len() > window {
                window_texts.pop_front();
            }
        }
        Ok(out)
    }

    /// Store memories whose vectors are already known (benchmarks, re-imports).
    pub fn add_with_vectors(&self, items: Vec<NewMemory>, vectors: Vec<Vec<f32>>) -> Result<Vec<String>, MemoryError> {
        self.insert(items, vectors, |_| Ok(()))
    }

    fn insert(
        &self,
        items: Vec<NewMemory>,
        vectors: Vec<Vec<f32>>,
        also: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<(), StoreError>,
    ) -> Result<Vec<String>, MemoryError> {
        if items.len() != vectors.len() {
            return Err(MemoryError::Invalid(format!("{} memories but {} vectors", items.len(), vectors.len())));
        }
        for item in &items {
            if item.text.trim().is_empty() {
                return Err(MemoryError::Invalid(format!("memory {:?} has no text", item.id.as_deref().unwrap_or("(new)"))));
            }
        }
        let (rowids, replaced) = self.store.transaction(|tx| {
            let written = self.write_in_replacing(tx, &items, Some(&vectors))?;
            also(tx)?;
            Ok(written)
        })?;
        if !replaced.is_empty() {
            // Re-imported ids replaced older rows: drop their stale vectors.
            let stale: HashSet<i64> = replaced.into_iter().collect();
            self.index.write().unwrap_or_else(|p| p.into_inner()).retain(|r| !stale.contains(&r));
        }
        self.publish(&rowids, &vectors);
        self.store.with(|c| {
            let mut stmt = c.prepare_cached("SELECT id FROM memories WHERE rowid = ?1")?;
            rowids.iter().map(|r| Ok(stmt.query_row([r], |row| row.get(0))?)).collect()
        }).map_err(Into::into)
    }

    /// Vectors for memories a caller will store in its own transaction (see
    /// [`Self::write_in`]); embedding happens before that transaction so it never holds
    /// the write lock while the model runs.
    pub fn embed_new(&self, items: &[NewMemory]) -> Result<Vec<Vec<f32>>, MemoryError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let embedder = self.embedder()?;
        let texts = self.embedding_texts(items)?;
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        Ok(embedder.embed_documents(&texts)?)
    }

    /// Store memories inside the caller's transaction (a scene's round close writes its
    /// turns with the round, so a discarded round leaves no memory behind). `vectors`,
    /// when given, pair with `items`; without them a later `memory reindex` embeds the
    /// rows and keyword search finds them meanwhile. Call [`Self::publish`] with the
    /// returned rowids once the transaction has committed.
    /// The ids of rounds and chat turns are always new, so nothing is replaced there; a
    /// write that may reuse ids (an import) goes through [`Self::add`].
    pub fn write_in(&self, tx: &Connection, items: &[NewMemory], vectors: Option<&[Vec<f32>]>) -> Result<Vec<i64>, StoreError> {
        Ok(self.write_in_replacing(tx, items, vectors)?.0)
    }

    /// [`Self::write_in`], also returning the rowids its items replaced (same id).
    fn write_in_replacing(
        &self,
        tx: &Connection,
        items: &[NewMemory],
        vectors: Option<&[Vec<f32>]>,
    ) -> Result<(Vec<i64>, Vec<i64>), StoreError> {
        if let Some(v) = vectors
            && v.len() != items.len()
        {
            return Err(StoreError::Corrupt(format!("{} memories but {} vectors", items.len(), v.len())));
        }
        let (rowids, replaced) = records::insert_replacing(tx, items)?;
        if let Some(vectors) = vectors {
            let pairs: Vec<(i64, &[f32])> = rowids.iter().copied().zip(vectors.iter().map(|v| v.as_slice())).collect();
            records::store_vectors(tx, &self.model_id(), &pairs)?;
        }
        // The cache of speaker names only strips names from queries: a name from a
        // transaction that is then rolled back does no harm there.
        if let Some(known) = self.speakers.write().unwrap_or_else(|p| p.into_inner()).as_mut() {
            known.extend(items.iter().filter_map(|m| m.speaker.as_deref()).map(str::to_lowercase));
        }
        Ok((rowids, replaced))
    }

    /// Make committed vectors searchable (the other half of [`Self::write_in`]).
    pub fn publish(&self, rowids: &[i64], vectors: &[Vec<f32>]) {
        {
            let mut index = self.index.write().unwrap_or_else(|p| p.into_inner());
            for (rowid, v) in rowids.iter().zip(vectors) {
                index.push(*rowid, v);
            }
        }
        self.maybe_rebuild();
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

    /// Keyword candidates: `(rowid, -bm25)`, best first.
    pub fn keyword_candidates(&self, query: &str, filter: &SearchFilter, n: usize) -> Result<Vec<Candidate>, MemoryError> {
        let terms = self.keyword_terms(query)?;
        let Some(fts) = keyword::fts_expression(&terms) else { return Ok(Vec::new()) };
        let (cond, mut params) = filter.sql();
        params.push(rusqlite::types::Value::Text(fts));
        params.push(rusqlite::types::Value::Integer(n as i64));
        let q = params.len() - 1;
        let sql = if filter.is_empty() {
            // No filter, no join: each matching row would otherwise be looked up in
            // `memories` before the ranking.
            format!(
                "SELECT rowid, -bm25(memory_fts) FROM memory_fts WHERE memory_fts MATCH ?{q} \
                 ORDER BY bm25(memory_fts) LIMIT ?{}",
                q + 1
            )
        } else {
            format!(
                "SELECT m.rowid, -bm25(memory_fts) FROM memory_fts JOIN memories m ON m.rowid = memory_fts.rowid \
                 WHERE memory_fts MATCH ?{q} AND {cond} ORDER BY bm25(memory_fts) LIMIT ?{}",
                q + 1
            )
        };
        self.with_reader(|c| {
            let mut stmt = c.prepare_cached(&sql)?;
            let rows = stmt.query_map(params_from_iter(params.iter()), |r| Ok((r.get::<_, i64>(0)?, r.get::<_, f64>(1)? as f32)))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// The terms of `query` a keyword search uses: with more than one, each is counted
    /// (an FTS count reads its doclist without ranking it, ~0.05 ms per thousand rows)
    /// and they are chosen by [`keyword::choose_terms`] within `keyword_max_rows`.
    pub fn keyword_terms(&self, query: &str) -> Result<Vec<String>, MemoryError> {
        let terms = keyword::query_terms(query);
        let budget = self.config().retrieval.keyword_max_rows;
        if terms.len() < 2 || budget == 0 {
            return Ok(terms);
        }
        let counted = self.with_reader(|c| {
            let mut stmt = c.prepare_cached("SELECT count(*) FROM memory_fts WHERE memory_fts MATCH ?1")?;
            terms
                .iter()
                .map(|t| Ok((t.clone(), stmt.query_row([format!("\"{t}\"")], |r| r.get::<_, i64>(0))? as usize)))
                .collect::<Result<Vec<_>, MemoryError>>()
        })?;
        let (kept, left_out) = keyword::choose_terms(&counted, budget);
        if !left_out.is_empty() {
            tracing::debug!(?kept, ?left_out, budget, "keyword search left out its most common terms");
        }
        Ok(kept)
    }

    /// The rowids passing `filter`, or `None` when it passes everything.
    fn allowed(&self, filter: &SearchFilter) -> Result<Option<HashSet<i64>>, MemoryError> {
        if filter.is_empty() {
            return Ok(None);
        }
        let (cond, params) = filter.sql();
        self.with_reader(|c| {
            let mut stmt = c.prepare_cached(&format!("SELECT m.rowid FROM memories m WHERE {cond}"))?;
            let rows = stmt.query_map(params_from_iter(params.iter()), |r| r.get::<_, i64>(0))?;
            Ok(Some(rows.collect::<Result<HashSet<_>, _>>()?))
        })
    }

    /// Vector candidates for an embedded query: `(rowid, cosine)`, best first.
    ///
    /// A filter is applied in the cheapest order for its selectivity. First the graph is
    /// searched unfiltered for a few times `n` and the filter checked on just those rows
    /// (one query): a broad filter (the memories of the character most of the library is
    /// about) is done there, without listing its 100k rows. Otherwise the filter is
    /// listed and, when it keeps few rows, only those are scored exactly.
    pub fn vector_candidates(&self, query: &[f32], filter: &SearchFilter, n: usize) -> Result<Vec<Candidate>, MemoryError> {
        let index = self.index.read().unwrap_or_else(|p| p.into_inner());
        if filter.is_empty() {
            return Ok(index.search(query, n, &|_| true));
        }
        let wide = index.search(query, n.saturating_mul(4), &|_| true);
        let passing = self.passing(filter, wide.iter().map(|c| c.0))?;
        let offered = wide.len().min(n);
        let hits: Vec<Candidate> = wide.into_iter().filter(|c| passing.contains(&c.0)).take(n).collect();
        // The graph offers at most its `ef_search` candidates, filtered or not: when most
        // of them pass, they are what a filtered graph search would have returned.
        if hits.len() == n || (!hits.is_empty() && hits.len() * 2 >= offered) {
            return Ok(hits);
        }
        let allowed = self.allowed(filter)?.unwrap_or_default();
        if allowed.len() <= SMALL_SUBSET {
            // A character's lore among 100k memories: read those few vectors from the
            // library and score them, rather than test every row of the index.
            drop(index);
            return self.score_rows(query, n, &allowed);
        }
        let keep = |r: i64| allowed.contains(&r);
        if allowed.len() <= index.len() / 8 {
            return Ok(index.search_subset(query, n, &keep));
        }
        Ok(index.search(query, n, &keep))
    }

    /// Exact scores of `rowids`' stored vectors (of the current model): `(rowid,
    /// cosine)`, best `n` first.
    fn score_rows(&self, query: &[f32], n: usize, rowids: &HashSet<i64>) -> Result<Vec<Candidate>, MemoryError> {
        let Some(wanted) = wanted_rows(rowids.iter().copied()) else { return Ok(Vec::new()) };
        let sql = format!(
            "{wanted} SELECT v.memory_rowid, v.vector FROM wanted \
             CROSS JOIN memory_vectors v ON v.memory_rowid = wanted.r WHERE v.model = ?1 AND v.dim = ?2"
        );
        let model = self.model_id();
        let mut scored: Vec<Candidate> = self.with_reader(|c| {
            let mut stmt = c.prepare(&sql)?;
            let mut rows = stmt.query(rusqlite::params![model, query.len() as i64])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                let blob: Vec<u8> = row.get(1)?;
                if let Some(v) = records::blob_to_vector(&blob) {
                    out.push((row.get::<_, i64>(0)?, super::vectors::dot(query, &v)));
                }
            }
            Ok(out)
        })?;
        scored.sort_by(|a, b| b.1.total_cmp(&a.1));
        scored.truncate(n);
        Ok(scored)
    }

    /// Which of `rowids` pass `filter` (one query, however many rows the filter keeps).
    fn passing(&self, filter: &SearchFilter, rowids: impl Iterator<Item = i64>) -> Result<HashSet<i64>, MemoryError> {
        let Some(wanted) = wanted_rows(rowids) else { return Ok(HashSet::new()) };
        let (cond, params) = filter.sql();
        let sql = format!("{wanted} SELECT m.rowid FROM wanted CROSS JOIN memories m ON m.rowid = wanted.r WHERE {cond}");
        self.with_reader(|c| {
            let mut stmt = c.prepare(&sql)?;
            let rows = stmt.query_map(params_from_iter(params.iter()), |r| r.get::<_, i64>(0))?;
            Ok(rows.collect::<Result<HashSet<_>, _>>()?)
        })
    }

    /// Hybrid (or single-list) search. Any query text is valid.
    pub fn search(&self, request: &SearchRequest) -> Result<Vec<RetrievalHit>, MemoryError> {
        let vector = match request.mode {
            SearchMode::Keyword => None,
            _ if request.query.trim().is_empty() => None,
            _ => Some(self.embedder()?.embed_query(&self.vector_query(&request.query)?)?),
        };
        self.search_with_vector(request, vector.as_deref())
    }

    /// Search with a query vector computed by the caller (benchmarks with synthetic
    /// vectors; callers that embed once and search several scopes).
    pub fn search_with_vector(&self, request: &SearchRequest, query_vector: Option<&[f32]>) -> Result<Vec<RetrievalHit>, MemoryError> {
        let config = self.config().retrieval;
        let n = config.candidates.max(request.k);
        let keyword = match request.mode {
            SearchMode::Vector => Vec::new(),
            _ => self.keyword_candidates(&request.query, &request.filter, n)?,
        };
        let vector = match (request.mode, query_vector) {
            (SearchMode::Keyword, _) | (_, None) => Vec::new(),
            (_, Some(q)) => self.vector_candidates(q, &request.filter, n)?,
        };
        let mut fused = fuse(&keyword, &vector, &config);
        if config.short_turn_words > 0 && request.mode == SearchMode::Hybrid {
            self.damp_short_turns(&mut fused, config.short_turn_words)?;
        }
        if config.time_boost > 0.0 && request.mode == SearchMode::Hybrid {
            let months = super::temporal::query_months(&request.query);
            if !months.is_empty() {
                self.boost_months(&mut fused, &months, config.time_boost)?;
            }
        }
        if config.neighbour_weight > 0.0 && request.mode == SearchMode::Hybrid {
            fused = self.spread_to_neighbours(fused, config.neighbour_weight, request.k, &request.filter)?;
        }
        fused.truncate(request.k);
        let rowids: Vec<i64> = fused.iter().map(|f| f.0).collect();
        let memories = self.with_reader(|c| Ok(records::load(c, &rowids)?))?;
        let by_row: HashMap<i64, Memory> = memories.into_iter().map(|m| (m.rowid, m)).collect();
        Ok(fused
            .into_iter()
            .filter_map(|(rowid, f)| by_row.get(&rowid).map(|m| (m, f)))
            .enumerate()
            .map(|(i, (m, f))| RetrievalHit {
                id: m.id.clone(),
                text: m.text.clone(),
                speaker: m.speaker.clone(),
                score: f.score,
                keyword_score: f.keyword.map(|k| k.1),
                vector_score: f.vector.map(|v| v.1),
                rank: i + 1,
                keyword_rank: f.keyword.map(|k| k.0),
                vector_rank: f.vector.map(|v| v.0),
                kind: m.kind,
                scope: m.scope.clone(),
                session: m.session.clone(),
                time: m.time.clone(),
            })
            .collect())
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

    /// Embed every memory that has no vector of the current model (all of them with
    /// `force`), in batches, reporting `(done, total)`; then reload the index.
    pub fn reindex(&self, force: bool, mut progress: impl FnMut(usize, usize)) -> Result<usize, MemoryError> {
        let model = self.model_id();
        let todo: Vec<(i64, String)> = self.store.with(|c| {
            let sql = if force {
                "SELECT rowid, text FROM memories ORDER BY rowid"
            } else {
                "SELECT m.rowid, m.text FROM memories m LEFT JOIN memory_vectors v ON v.memory_rowid = m.rowid AND v.model = ?1 \
                 WHERE v.memory_rowid IS NULL ORDER BY m.rowid"
            };
            let mut stmt = c.prepare(sql)?;
            let rows = if force {
                stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<Vec<_>, _>>()?
            } else {
                stmt.query_map([&model], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<Vec<_>, _>>()?
            };
            Ok(rows)
        })?;
        let embedder = if todo.is_empty() { None } else { Some(self.embedder()?) };
        let total = todo.len();
        progress(0, total);
        for (done, chunk) in todo.chunks(256).enumerate() {
            let Some(embedder) = embedder.as_ref() else { break };
            let texts = self.reindex_texts(chunk)?;
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            let vectors = embedder.embed_documents(&texts)?;
            self.store.transaction(|tx| {
                let pairs: Vec<(i64, &[f32])> = chunk.iter().map(|(r, _)| *r).zip(vectors.iter().map(|v| v.as_slice())).collect();
                records::store_vectors(tx, &model, &pairs)
            })?;
            progress((done * 256 + chunk.len()).min(total), total);
        }
        self.load_vectors()?;
        Ok(total)
    }

    /// The embedding texts of stored memories, with the same context as [`Self::add`].
    fn reindex_texts(&self, rows: &[(i64, String)]) -> Result<Vec<String>, MemoryError> {
        let window = self.config().retrieval.context_turns as i64;
        if window == 0 {
            return Ok(rows.iter().map(|(_, t)| t.clone()).collect());
        }
        let texts = self.store.with(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT p.text FROM memories m JOIN memories p ON p.session = m.session AND p.kind = 'turn' AND p.seq < m.seq \
                 WHERE m.rowid = ?1 AND m.kind = 'turn' ORDER BY p.seq DESC LIMIT ?2",
            )?;
            rows.iter()
                .map(|(rowid, text)| {
                    let mut earlier: Vec<String> =
                        stmt.query_map(rusqlite::params![rowid, window], |r| r.get(0))?.collect::<Result<_, _>>()?;
                    earlier.reverse();
                    earlier.push(text.clone());
                    Ok(earlier.join("\n"))
                })
                .collect()
        })?;
        Ok(texts)
    }

    /// Build the HNSW graph over every live vector now in the index, save it, and swap it
    /// in; slow (minutes at 100k), so the engine runs it on a worker and
    /// [`Self::maybe_rebuild`] on its own thread. Searches go on meanwhile: memories
    /// added during the build stay in the exactly scanned tail. Returns the vectors the
    /// graph covers, or `None` when another rebuild was already running (see
    /// [`Self::rebuild_ann_waiting`]).
    pub fn rebuild_ann(&self) -> Result<Option<usize>, MemoryError> {
        if self.rebuilding.swap(true, Ordering::SeqCst) {
            return Ok(None);
        }
        self.run_rebuild().map(Some)
    }

    /// The rebuild, once `rebuilding` is claimed; releases it.
    fn run_rebuild(&self) -> Result<usize, MemoryError> {
        let outcome = self.rebuild_now();
        *self.progress.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.rebuilding.store(false, Ordering::SeqCst);
        match &outcome {
            Ok((vectors, elapsed, _swapped)) => {
                self.notify(GraphProgress::Finished { vectors: *vectors, elapsed_ms: elapsed.as_millis() as u64 });
                // What was written during the build may call for the next one already;
                // so does a delete during it, which left the new graph unused.
                self.maybe_rebuild();
            }
            Err(e) => self.notify(GraphProgress::Failed { message: e.to_string() }),
        }
        outcome.map(|(vectors, _, _)| vectors)
    }

    /// Whether a graph rebuild is running.
    pub fn is_rebuilding(&self) -> bool {
        self.rebuilding.load(Ordering::SeqCst)
    }

    /// Block until no graph rebuild is running (a headless command that started one
    /// waits for it before its process ends).
    pub fn wait_for_rebuild(&self) {
        while self.is_rebuilding() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Rebuild now, first waiting for a background rebuild that is already running (its
    /// snapshot may predate what the caller just wrote).
    pub fn rebuild_ann_waiting(&self) -> Result<usize, MemoryError> {
        loop {
            if let Some(vectors) = self.rebuild_ann()? {
                return Ok(vectors);
            }
            self.wait_for_rebuild();
        }
    }

    /// The rebuild itself: `(vectors, time taken, whether the graph was swapped in)`.
    fn rebuild_now(&self) -> Result<(usize, Duration, bool), MemoryError> {
        let started = Instant::now();
        let (rowids, data, dim, snapshot_len, generation) = {
            let index = self.index.read().unwrap_or_else(|p| p.into_inner());
            let (rowids, data) = index.compacted();
            (rowids, data, index.dim, index.len(), index.generation)
        };
        let count = rowids.len();
        self.notify(GraphProgress::Started { vectors: count });
        let bar = indicatif::ProgressBar::hidden();
        bar.set_length(count as u64);
        *self.progress.lock().unwrap_or_else(|p| p.into_inner()) = Some(bar.clone());
        // The graph keeps this buffer as the index's bulk: no second copy of the vectors.
        let data: Arc<[f32]> = Arc::from(data);
        let ann = std::thread::scope(|scope| {
            let building = scope.spawn(|| build_ann_reporting(data.clone(), dim, 0x10e_4ee9, Some(bar.clone())));
            let mut told = Instant::now();
            while !building.is_finished() {
                std::thread::sleep(Duration::from_millis(20));
                if told.elapsed() >= Duration::from_millis(250) {
                    told = Instant::now();
                    let total = bar.length().unwrap_or(count as u64) as usize;
                    self.notify(GraphProgress::Building { done: bar.position() as usize, total });
                }
            }
            building.join().map_err(|_| MemoryError::Invalid("building the vector graph panicked".into()))
        })?;
        let bytes = super::vectors::encode_ann(&ann).map_err(MemoryError::Invalid)?;
        let model = self.model_id();
        let last_rowid = rowids.last().copied().unwrap_or(0);
        self.store.with(|c| {
            c.execute(
                "INSERT INTO memory_ann(id, model, max_rowid, count, built_at, graph) VALUES (1, ?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT(id) DO UPDATE SET model = excluded.model, max_rowid = excluded.max_rowid,
                 count = excluded.count, built_at = excluded.built_at, graph = excluded.graph",
                rusqlite::params![model, last_rowid, count as i64, crate::store::now_rfc3339(), bytes],
            )?;
            Ok(())
        })?;
        let mut index = self.index.write().unwrap_or_else(|p| p.into_inner());
        // Only appends happened since the snapshot unless the generation moved (a delete
        // or a reload): then the graph's positions no longer match and it is dropped.
        if index.generation != generation || index.len() < snapshot_len {
            return Ok((count, started.elapsed(), false));
        }
        drop(data);
        let mut rowids = rowids;
        rowids.extend_from_slice(&index.rowids[snapshot_len..]);
        let tail = index.flat(snapshot_len..index.len());
        let mut next = VectorIndex::with_graph(dim, rowids, ann, tail);
        next.generation = index.generation;
        *index = next;
        Ok((count, started.elapsed(), true))
    }

    /// Exact vector search (the ground truth for the graph's recall).
    pub fn vector_exact(&self, query: &[f32], n: usize) -> Vec<Candidate> {
        self.index.read().unwrap_or_else(|p| p.into_inner()).search_exact(query, n, &|_| true)
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

    /// Delete the memories of `source` (their FTS rows and vectors go with them).
    pub fn remove_source(&self, source: &str) -> Result<usize, MemoryError> {
        self.remove_source_then(source, |_| Ok(()))
    }

    /// [`Self::remove_source`], running `also` in the same transaction (the companion
    /// takes back an exchange and its memory turns together).
    pub fn remove_source_then(
        &self,
        source: &str,
        also: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<(), StoreError>,
    ) -> Result<usize, MemoryError> {
        let removed: Vec<i64> = self.store.transaction(|tx| {
            let rowids: Vec<i64> = tx
                .prepare("SELECT rowid FROM memories WHERE source = ?1")?
                .query_map([source], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            tx.execute("DELETE FROM memories WHERE source = ?1", [source])?;
            also(tx)?;
            Ok(rowids)
        })?;
        if !removed.is_empty() {
            *self.speakers.write().unwrap_or_else(|p| p.into_inner()) = None;
            let gone: HashSet<i64> = removed.iter().copied().collect();
            self.index.write().unwrap_or_else(|p| p.into_inner()).retain(|r| !gone.contains(&r));
            self.maybe_rebuild();
        }
        Ok(removed.len())
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
