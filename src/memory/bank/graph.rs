//! The bank's vectors in memory: loading them, the HNSW graph over them, rebuilding it
//! on a background thread as memories come and go, and re-embedding (`memory reindex`).

use super::{GraphProgress, MemoryBank};
use crate::memory::MemoryError;
use crate::memory::records::{self};
use crate::memory::retrieval::Candidate;
use crate::memory::vectors::{VectorIndex, build_ann_reporting};
use rusqlite::OptionalExtension;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl MemoryBank {
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

    pub(super) fn load_vectors(&self) -> Result<(), MemoryError> {
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
        match crate::memory::vectors::decode_ann(&graph, Arc::from(index.flat(0..count)), index.dim, count) {
            Ok(ann) => {
                index.set_graph(ann);
            }
            Err(e) => tracing::warn!(error = %e, "the saved vector graph is unreadable; searching exactly until a rebuild"),
        }
        Ok(())
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
        let bytes = crate::memory::vectors::encode_ann(&ann).map_err(MemoryError::Invalid)?;
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
}
