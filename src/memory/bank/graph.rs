//! The bank's vectors in memory: the HNSW graph that publish inserts into and removes
//! from, saving it beside the library in the background, loading it on open (and
//! catching up on the changes after it from the library's vector journal), building it
//! from scratch when no saved one fits, and re-embedding (`memory reindex`).
//!
//! The saved graph is two files beside the library: `<library>.graph` (usearch's own
//! format: links and vectors) and `<library>.graph.json` (which model, and up to which
//! entry of `memory_vector_changes` the graph holds). Both are written under temporary
//! names and renamed, the graph first; a reopen that finds them inconsistent (another
//! model, a count that does not match, an unreadable file, a journal trimmed past the
//! graph) builds anew in the background while the exact scan serves searches.

use super::{GraphProgress, MemoryBank};
use crate::memory::MemoryError;
use crate::memory::records::{self};
use crate::memory::retrieval::Candidate;
use crate::memory::vectors::{Graph, build_graph};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The `meta` key holding the last journal entry removed (see [`MemoryBank::save_graph`]).
const TRIMMED_KEY: &str = "memory.vector_journal_trimmed";

/// What `<library>.graph.json` says about the graph beside it.
#[derive(Debug, Serialize, Deserialize)]
struct SavedGraph {
    model: String,
    dim: usize,
    /// The last `memory_vector_changes.seq` the graph holds.
    journal: i64,
    /// Live vectors in the graph file.
    count: usize,
    saved_at: String,
    /// Nodes the graph's walk does not reach, scanned exactly (see `vectors::Graph`).
    /// A file saved before session 17 has none listed: its next build finds them.
    #[serde(default)]
    unreachable: Vec<i64>,
}

impl MemoryBank {
    /// `<library>.graph` and `<library>.graph.json`.
    pub fn graph_paths(&self) -> (PathBuf, PathBuf) {
        let base = self.store.path().as_os_str().to_owned();
        let with = |ext: &str| {
            let mut p = base.clone();
            p.push(ext);
            PathBuf::from(p)
        };
        (with(".graph"), with(".graph.json"))
    }

    /// Start a background build when the graph is missing (and the library big enough
    /// for one) or mostly deleted nodes; returns whether one was started.
    pub fn maybe_rebuild(&self) -> bool {
        let config = self.config().graph;
        if !config.auto_rebuild || self.rebuilding.load(Ordering::SeqCst) || self.index.is_busy() {
            return false;
        }
        let live = self.index.live();
        let wanted = if self.index.has_graph() {
            // Compaction: deleted nodes are waypoints that slow the walk; once they
            // outnumber the live ones a fresh graph is worth its build.
            let vacant = self.index.vacant();
            vacant > live.max(config.min_vectors / 2)
        } else {
            live >= config.min_vectors
        };
        if !wanted {
            return false;
        }
        self.spawn_background(true)
    }

    /// Save the graph in the background once `save_after` changes were published.
    pub(super) fn maybe_save(&self) -> bool {
        let config = self.config().graph;
        if self.changes.load(Ordering::SeqCst) < config.save_after.max(1) || !self.index.has_graph() {
            return false;
        }
        if self.rebuilding.load(Ordering::SeqCst) || self.index.is_busy() {
            return false;
        }
        self.spawn_background(false)
    }

    /// How many changes not in the saved file make it worth saving as the process closes:
    /// every later process replays them on open (one graph insertion each, 1–6 ms at
    /// 22k under load), while a save writes ~1.7 KB per vector (~0.1 s at 22k). Left to
    /// `save_after` (5,000) alone, short processes (a `chat send`, a search) never
    /// saved, and each replayed everything before it since the last long one.
    pub fn close_save_threshold(&self) -> usize {
        (self.index.live() / 256).max(32)
    }

    /// A process closing: save the graph when it holds enough changes the saved file
    /// lacks (its own writes and those it replayed from others), so the next process
    /// opens without replaying them. Like every save it holds no write transaction while
    /// the file is written (writers go on); it gives way to a build or save under way.
    /// Returns whether it saved.
    pub fn save_on_close(&self) -> bool {
        let pending = self.changes.load(Ordering::SeqCst);
        if pending < self.close_save_threshold() || !self.index.has_graph() {
            return false;
        }
        if self.rebuilding.swap(true, Ordering::SeqCst) {
            return false;
        }
        let outcome = self.save_graph_inner();
        self.rebuilding.store(false, Ordering::SeqCst);
        match outcome {
            Ok(saved) => saved.is_some(),
            Err(e) => {
                tracing::warn!(error = %e, "saving the vector graph on close failed; the next open replays the changes");
                false
            }
        }
    }

    /// Run a build (`build`) or a save on a thread of its own.
    fn spawn_background(&self, build: bool) -> bool {
        let Some(bank) = self.me.upgrade() else { return false };
        // Claimed here, not on the new thread, so `is_rebuilding` is true from now on.
        if self.rebuilding.swap(true, Ordering::SeqCst) {
            return false;
        }
        let started = std::thread::Builder::new().name("memory-graph".into()).spawn(move || {
            lower_this_threads_priority();
            let outcome = if build { bank.run_build().map(|_| ()) } else { bank.save_graph_claimed() };
            if let Err(e) = outcome {
                tracing::warn!(error = %e, build, "background work on the vector graph failed; searching exactly what it lacks");
            }
        });
        match started {
            Ok(_) => true,
            Err(e) => {
                self.rebuilding.store(false, Ordering::SeqCst);
                tracing::warn!(error = %e, "cannot start a thread for the vector graph");
                false
            }
        }
    }

    /// The last journal entry, or the last one trimmed when none is left.
    ///
    /// This and the other reads of a load go through the bank's reader, never the
    /// store's writer: a search may load the vectors anew ([`Self::sync_with_library`]),
    /// and its caller may be holding the writer.
    fn journal_head(&self) -> Result<i64, MemoryError> {
        let last: i64 = self.with_reader(|c| Ok(c.query_row("SELECT coalesce(max(seq), 0) FROM memory_vector_changes", [], |r| r.get(0))?))?;
        Ok(last.max(self.journal_trimmed()))
    }

    fn journal_trimmed(&self) -> i64 {
        use rusqlite::OptionalExtension;
        self.with_reader(|c| Ok(c.query_row("SELECT value FROM meta WHERE key = ?1", [TRIMMED_KEY], |r| r.get::<_, String>(0)).optional()?))
            .ok()
            .flatten()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// Open: load the saved graph if it fits the library and catch it up with the
    /// journal; otherwise read every vector for an exact scan and build in the background.
    pub(super) fn load_vectors(&self) -> Result<(), MemoryError> {
        self.load_vectors_from(true, true)
    }

    /// Load the vectors: from the saved graph when `use_saved` and it fits, else every
    /// vector read for the exact scan, the journal read so far trimmed when `trim`.
    fn load_vectors_from(&self, use_saved: bool, trim: bool) -> Result<(), MemoryError> {
        let started = Instant::now();
        if use_saved {
            match self.load_saved_graph() {
                Ok(true) => {
                    self.loaded_saved.store(true, Ordering::SeqCst);
                    tracing::info!(vectors = self.index.live(), ms = started.elapsed().as_millis() as u64, "vector graph loaded");
                    self.maybe_rebuild();
                    return Ok(());
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "the saved vector graph does not fit the library; building anew in the background"),
            }
        }
        self.loaded_saved.store(false, Ordering::SeqCst);
        let model = self.model_id();
        let dim = self.config().embedding.dimension;
        let mut journal = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        // Whatever is written after this point is replayed (idempotently) later.
        *journal = self.journal_head()?;
        self.index.drop_graph();
        self.index.clear_tail();
        self.with_reader(|c| {
            let mut stmt =
                c.prepare("SELECT memory_rowid, vector FROM memory_vectors WHERE model = ?1 AND dim = ?2 ORDER BY memory_rowid")?;
            let mut rows = stmt.query(rusqlite::params![model, dim as i64])?;
            while let Some(row) = rows.next()? {
                let blob: Vec<u8> = row.get(1)?;
                if let Some(v) = records::blob_to_vector(&blob) {
                    self.index.push(row.get(0)?, &v);
                }
            }
            Ok(())
        })?;
        let head = *journal;
        drop(journal);
        if trim && head > 0 {
            // Without a saved graph nothing needs the entries read already (and a small
            // library that never saves one would otherwise keep them all).
            self.store.with(|c| Ok(c.execute("DELETE FROM memory_vector_changes WHERE seq <= ?1", [head])?))?;
            self.store.meta_set(TRIMMED_KEY, &head.to_string())?;
        }
        self.maybe_rebuild();
        Ok(())
    }

    /// Load `<library>.graph` if its description fits: `Ok(false)` when there is none.
    fn load_saved_graph(&self) -> Result<bool, MemoryError> {
        let (graph_path, meta_path) = self.graph_paths();
        let Ok(text) = std::fs::read_to_string(&meta_path) else { return Ok(false) };
        if !graph_path.exists() {
            return Ok(false);
        }
        let saved: SavedGraph = serde_json::from_str(&text).map_err(|e| MemoryError::Invalid(format!("{}: {e}", meta_path.display())))?;
        let (model, dim) = (self.model_id(), self.config().embedding.dimension);
        if saved.model != model || saved.dim != dim {
            return Err(MemoryError::Invalid(format!("the saved graph is of {} ({}), not {model} ({dim})", saved.model, saved.dim)));
        }
        let trimmed = self.journal_trimmed();
        if trimmed > saved.journal {
            return Err(MemoryError::Invalid(format!("the journal was trimmed to {trimmed}, past the graph's {}", saved.journal)));
        }
        let graph = Graph::load(&graph_path, dim).map_err(|e| MemoryError::Invalid(e.to_string()))?;
        if graph.len() != saved.count {
            return Err(MemoryError::Invalid(format!("the graph file holds {} vectors, its description {}", graph.len(), saved.count)));
        }
        graph.restore_hidden(&saved.unreachable);
        let mut journal = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        self.index.clear_tail();
        self.index.set_graph(graph);
        *journal = saved.journal;
        drop(journal);
        let replayed = self.catch_up()?;
        if replayed > 0 {
            self.changes.fetch_add(replayed, Ordering::SeqCst);
        }
        Ok(true)
    }

    /// Apply the journal entries after the last one this index holds: the library's
    /// current vector (or its absence) for each rowid they name. Idempotent: a vector the
    /// index already holds as it is in the library is left alone. Returns how many rows
    /// changed.
    pub fn catch_up(&self) -> Result<usize, MemoryError> {
        Ok(self.replay_journal()?.1)
    }

    /// [`Self::catch_up`]: `(journal entries read, rows changed)`.
    fn replay_journal(&self) -> Result<(usize, usize), MemoryError> {
        let (model, dim) = (self.model_id(), self.config().embedding.dimension);
        // Held throughout, so a publish cannot slip in between reading a row and applying
        // it (it would be overwritten by the older value).
        let mut journal = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        let after = *journal;
        let rows: Vec<(i64, i64, Option<Vec<u8>>)> = self.with_reader(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT j.seq, j.memory_rowid, v.vector FROM memory_vector_changes j \
                 LEFT JOIN memory_vectors v ON v.memory_rowid = j.memory_rowid AND v.model = ?1 AND v.dim = ?2 \
                 WHERE j.seq > ?3 ORDER BY j.seq",
            )?;
            let rows = stmt.query_map(rusqlite::params![model, dim as i64, after], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })?;
        let Some(last) = rows.last().map(|r| r.0) else { return Ok((0, 0)) };
        let entries = rows.len();
        let mut latest: HashMap<i64, Option<Vec<u8>>> = HashMap::new();
        for (_, rowid, blob) in rows {
            latest.insert(rowid, blob);
        }
        let mut changed = 0;
        let (mut gone, mut added) = (Vec::new(), Vec::new());
        for (rowid, blob) in latest {
            match blob.and_then(|b| records::blob_to_vector(&b)) {
                Some(v) if v.len() == dim => {
                    if !self.index.holds(rowid, &v) {
                        added.push((rowid, v));
                    }
                }
                _ => {
                    if self.index.contains(rowid) {
                        gone.push(rowid);
                    }
                }
            }
        }
        changed += gone.len() + added.len();
        if changed > 0 {
            self.index.apply(&gone, &added);
        }
        *journal = last;
        Ok((entries, changed))
    }

    /// See what other processes committed since this bank last looked: every search (and
    /// `stats`) calls this first. Cheap when nothing changed — one lookup of the journal's
    /// last entry and of the trim marker, compared with the watermark (this process's own
    /// writes move the watermark in publish, so they cost nothing here). Behind, it replays
    /// the entries after the watermark ([`Self::catch_up`]); when another process trimmed
    /// entries this bank had not seen (it saved a graph, or opened the library without
    /// one), it loads the vectors anew, from that process's saved graph when it fits.
    /// Either way the speakers' names are read again at the next search.
    pub fn sync_with_library(&self) -> Result<(), MemoryError> {
        let (head, trimmed) = self.with_reader(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT coalesce((SELECT max(seq) FROM memory_vector_changes), 0), (SELECT value FROM meta WHERE key = ?1)",
            )?;
            Ok(stmt.query_row([TRIMMED_KEY], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?)))?)
        })?;
        let trimmed = trimmed.and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
        let synced = *self.journal.lock().unwrap_or_else(|p| p.into_inner());
        if head.max(trimmed) <= synced {
            return Ok(());
        }
        if trimmed > synced {
            // Entries this index needs are gone. A build or save of this bank's own reads
            // the library (or gives way to the other's file) itself; the next search
            // looks again once it is over.
            if self.rebuilding.swap(true, Ordering::SeqCst) {
                return Ok(());
            }
            let outcome = self.load_vectors_from(true, false);
            self.rebuilding.store(false, Ordering::SeqCst);
            outcome?;
            self.reloads.fetch_add(1, Ordering::SeqCst);
            self.maybe_rebuild();
        } else {
            let (entries, changed) = self.replay_journal()?;
            self.replayed.fetch_add(entries, Ordering::SeqCst);
            if changed > 0 {
                self.changes.fetch_add(changed, Ordering::SeqCst);
            }
        }
        *self.speakers.write().unwrap_or_else(|p| p.into_inner()) = None;
        Ok(())
    }

    /// [`Self::sync_with_library`] for a search: a failure is logged and the search
    /// goes on with what the index holds.
    pub(super) fn sync_before_search(&self) {
        if let Err(e) = self.sync_with_library() {
            tracing::warn!(error = %e, "could not catch up with the library's vector changes; searching what this process has seen");
        }
    }

    /// Save the graph now (waiting for a background build or save to finish first).
    /// Returns the vectors saved, or `None` without a graph.
    pub fn save_graph(&self) -> Result<Option<usize>, MemoryError> {
        loop {
            if !self.rebuilding.swap(true, Ordering::SeqCst) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let outcome = self.save_graph_inner();
        self.rebuilding.store(false, Ordering::SeqCst);
        outcome
    }

    /// A background save, `rebuilding` already claimed; releases it.
    pub(super) fn save_graph_claimed(&self) -> Result<(), MemoryError> {
        let outcome = self.save_graph_inner();
        self.rebuilding.store(false, Ordering::SeqCst);
        // Compaction may be due, or more changes came in while saving.
        self.maybe_rebuild();
        outcome.map(|_| ())
    }

    /// The save: catch up with the journal, mark the graph busy (writes go to the tail
    /// meanwhile), write both files under temporary names and rename them, free the
    /// graph (applying the tail), then trim the journal up to what the file holds. No
    /// write transaction is open while the file is written; the trim is one short one.
    fn save_graph_inner(&self) -> Result<Option<usize>, MemoryError> {
        if !self.index.has_graph() {
            return Ok(None);
        }
        let started = Instant::now();
        let at_start = self.changes.load(Ordering::SeqCst);
        let synced = *self.journal.lock().unwrap_or_else(|p| p.into_inner());
        if self.journal_trimmed() > synced {
            // Another process saved a graph past what this one has seen: keep its file.
            return Ok(None);
        }
        self.catch_up()?;
        let watermark = *self.journal.lock().unwrap_or_else(|p| p.into_inner());
        if !self.index.begin_busy() {
            return Ok(None);
        }
        let (graph_path, meta_path) = self.graph_paths();
        let tmp = |p: &PathBuf| {
            let mut s = p.as_os_str().to_owned();
            s.push(".tmp");
            PathBuf::from(s)
        };
        let (graph_tmp, meta_tmp) = (tmp(&graph_path), tmp(&meta_path));
        let written = (|| -> Result<Option<usize>, MemoryError> {
            let Some((count, unreachable)) = self.index.save_graph(&graph_tmp).map_err(|e| MemoryError::Invalid(e.to_string()))? else {
                return Ok(None);
            };
            let saved = SavedGraph {
                model: self.model_id(),
                dim: self.index.dim,
                journal: watermark,
                count,
                saved_at: crate::store::now_rfc3339(),
                unreachable,
            };
            let text = serde_json::to_string(&saved).map_err(|e| MemoryError::Invalid(e.to_string()))?;
            let io = |e: std::io::Error| MemoryError::Invalid(format!("saving the vector graph: {e}"));
            std::fs::write(&meta_tmp, text).map_err(io)?;
            std::fs::rename(&graph_tmp, &graph_path).map_err(io)?;
            std::fs::rename(&meta_tmp, &meta_path).map_err(io)?;
            Ok(Some(count))
        })();
        self.index.end_busy(None);
        let count = match written {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_file(&graph_tmp);
                let _ = std::fs::remove_file(&meta_tmp);
                return Err(e);
            }
        };
        if count.is_some() {
            // The marker second: a crash between the two leaves it lower, which is safe.
            self.store.transaction(|tx| {
                tx.execute("DELETE FROM memory_vector_changes WHERE seq <= ?1", [watermark])?;
                Ok(())
            })?;
            self.store.meta_set(TRIMMED_KEY, &watermark.to_string())?;
            let _ = self.changes.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| Some(c.saturating_sub(at_start)));
            self.saves.fetch_add(1, Ordering::SeqCst);
            tracing::info!(vectors = count, ms = started.elapsed().as_millis() as u64, "vector graph saved");
        }
        Ok(count)
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
        if !todo.is_empty() {
            // Fail before any work when the model cannot be loaded.
            self.embedder()?;
        }
        let total = todo.len();
        progress(0, total);
        for (done, chunk) in todo.chunks(256).enumerate() {
            let texts = self.reindex_texts(chunk)?;
            let vectors = self.embed_in_context(&texts)?;
            self.store.transaction(|tx| {
                let pairs: Vec<(i64, &[f32])> = chunk.iter().map(|(r, _)| *r).zip(vectors.iter().map(|v| v.as_slice())).collect();
                records::store_vectors(tx, &model, &pairs)
            })?;
            progress((done * 256 + chunk.len()).min(total), total);
        }
        if total > 0 {
            // Re-embedded wholesale: a fresh build beats replaying every change.
            self.wait_for_rebuild();
            self.load_vectors_from(false, true)?;
        }
        Ok(total)
    }

    /// The embedding texts of stored memories, with the same context as [`Self::add`].
    fn reindex_texts(&self, rows: &[(i64, String)]) -> Result<Vec<super::write::InContext>, MemoryError> {
        use super::write::InContext;
        let window = self.config().retrieval.context_turns as i64;
        if window == 0 {
            return Ok(rows.iter().map(|(_, t)| InContext { text: t.clone(), earlier: Vec::new() }).collect());
        }
        let texts = self.store.with(|c| {
            rows.iter()
                .map(|(rowid, text)| Ok(InContext { text: text.clone(), earlier: super::write::earlier_turns(c, *rowid, window)? }))
                .collect()
        })?;
        Ok(texts)
    }

    /// Build the graph from every vector in the library now, swap it in and save it
    /// (`memory reindex`, benchmarks). Searches go on meanwhile (the old graph or the
    /// exact scan, plus the tail). Returns the vectors the graph holds, or `None` when
    /// a build or save was already running (see [`Self::rebuild_ann_waiting`]).
    pub fn rebuild_ann(&self) -> Result<Option<usize>, MemoryError> {
        if self.rebuilding.swap(true, Ordering::SeqCst) {
            return Ok(None);
        }
        self.run_build().map(Some)
    }

    /// The build, once `rebuilding` is claimed; releases it, then saves.
    fn run_build(&self) -> Result<usize, MemoryError> {
        let outcome = self.build_now();
        self.build_total.store(0, Ordering::SeqCst);
        match &outcome {
            Ok((vectors, elapsed)) => {
                self.notify(GraphProgress::Finished { vectors: *vectors, elapsed_ms: elapsed.as_millis() as u64 });
                if let Err(e) = self.save_graph_inner() {
                    tracing::warn!(error = %e, "saving the new vector graph failed; the next open builds it again");
                }
            }
            Err(e) => self.notify(GraphProgress::Failed { message: e.to_string() }),
        }
        self.rebuilding.store(false, Ordering::SeqCst);
        outcome.map(|(vectors, _)| vectors)
    }

    /// The `ef` the library's graph searches with (`[memory.graph] ef_search`), or `None`
    /// without a graph.
    pub fn graph_ef_search(&self) -> Option<usize> {
        self.index.graph_ef_search()
    }

    /// Whether a graph build or save is running.
    pub fn is_rebuilding(&self) -> bool {
        self.rebuilding.load(Ordering::SeqCst)
    }

    /// Block until no graph build or save is running (a headless command that started
    /// one waits for it before its process ends).
    pub fn wait_for_rebuild(&self) {
        while self.is_rebuilding() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Build now, first waiting for a background build or save that is already running.
    pub fn rebuild_ann_waiting(&self) -> Result<usize, MemoryError> {
        loop {
            if let Some(vectors) = self.rebuild_ann()? {
                return Ok(vectors);
            }
            self.wait_for_rebuild();
        }
    }

    /// The build itself: `(vectors, time taken)`. The graph is marked busy first, so
    /// every write from then on goes to the tail and is applied after the swap; the
    /// vectors are read after that, so nothing committed falls between the two.
    fn build_now(&self) -> Result<(usize, Duration), MemoryError> {
        let started = Instant::now();
        if !self.index.begin_busy() {
            return Err(MemoryError::Invalid("the vector graph is busy".into()));
        }
        let built = (|| -> Result<Graph, MemoryError> {
            let (model, dim) = (self.model_id(), self.index.dim);
            let head = self.journal_head()?;
            let reader = self.store.reader()?;
            let mut rows: Vec<(i64, Vec<f32>)> = Vec::with_capacity(self.index.live());
            {
                let mut stmt = reader.prepare("SELECT memory_rowid, vector FROM memory_vectors WHERE model = ?1 AND dim = ?2")?;
                let mut found = stmt.query(rusqlite::params![model, dim as i64])?;
                while let Some(row) = found.next()? {
                    let blob: Vec<u8> = row.get(1)?;
                    if let Some(v) = records::blob_to_vector(&blob).filter(|v| v.len() == dim) {
                        rows.push((row.get(0)?, v));
                    }
                }
            }
            // The rows read hold the journal at least up to `head`.
            {
                let mut journal = self.journal.lock().unwrap_or_else(|p| p.into_inner());
                *journal = (*journal).max(head);
            }
            let total = rows.len();
            self.notify(GraphProgress::Started { vectors: total });
            self.build_done.store(0, Ordering::SeqCst);
            self.build_total.store(total, Ordering::SeqCst);
            let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
            std::thread::scope(|scope| {
                let building = scope.spawn(|| build_graph(dim, &rows, threads, &self.build_done));
                let mut told = Instant::now();
                while !building.is_finished() {
                    std::thread::sleep(Duration::from_millis(20));
                    if told.elapsed() >= Duration::from_millis(250) {
                        told = Instant::now();
                        self.notify(GraphProgress::Building { done: self.build_done.load(Ordering::Relaxed), total });
                    }
                }
                building
                    .join()
                    .map_err(|_| MemoryError::Invalid("building the vector graph panicked".into()))?
                    .map_err(|e| MemoryError::Invalid(e.to_string()))
            })
        })();
        match built {
            Ok(graph) => {
                let vectors = graph.len();
                self.index.end_busy(Some(graph));
                self.builds.fetch_add(1, Ordering::SeqCst);
                Ok((vectors, started.elapsed()))
            }
            Err(e) => {
                self.index.end_busy(None);
                Err(e)
            }
        }
    }

    /// Exact vector search (the ground truth for the graph's recall).
    pub fn vector_exact(&self, query: &[f32], n: usize) -> Vec<Candidate> {
        self.index.search_exact(query, n)
    }
}

/// Background graph work yields the CPU to searches and writes: on two cores a save or
/// build at normal priority doubles the slowest searches while it runs (a 1.7 GB graph
/// at a million memories takes seconds to write). Linux gives each thread its own nice
/// value; elsewhere this does nothing.
pub(super) fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid and setpriority take plain integers and touch no memory of ours.
        let result = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10) };
        if result != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "could not lower the graph thread's priority");
        }
    }
}
