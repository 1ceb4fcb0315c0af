//! The in-memory vector index: an HNSW graph (`usearch`) that takes each new vector as
//! it is published and drops each removed one, plus an exactly scanned tail for the
//! moments the graph cannot be changed (while it is saved to disk or built anew).
//!
//! Why a tail at all: saving a 1M graph takes seconds and must not hold up a chat turn's
//! publish, and a graph built in the background (when no saved one fits the library)
//! is not searchable until it is done. Meanwhile writes land in the tail (searched
//! exactly, so a new memory is found at once) and removals in `stale` (filtered out of
//! the graph's answers); both are applied to the graph when it is free again.
//!
//! The graph keys its vectors by memory rowid. A removal in `usearch` marks the node
//! deleted and keeps it as a waypoint; the next insertion reuses its slot. So deletes
//! never call for a rebuild; [`VectorIndex::vacant`] reports the deleted slots, and a
//! background compaction (a rebuild off the write path) runs only when they outnumber
//! the live vectors.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Links per node (layer 0 has twice as many). 16 keeps a 1M graph at ~200 MB of links.
pub const CONNECTIVITY: usize = 16;
/// Candidates kept while inserting: higher builds a better graph, slower.
pub const EXPANSION_ADD: usize = 128;
/// Candidates kept while searching (at least the `n` asked for).
pub const EXPANSION_SEARCH: usize = 64;
/// Threads that may use the graph at once (searches and inserts); more wait.
const GRAPH_THREADS: usize = 32;
/// A node counts as reachable when a search for its own vector lists it in this many.
const REACH_CHECK: usize = 10;

/// Dot product written so the compiler vectorises it (8 independent accumulators).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = a.len() / 8;
    for i in 0..chunks {
        let (x, y) = (&a[i * 8..i * 8 + 8], &b[i * 8..i * 8 + 8]);
        for j in 0..8 {
            acc[j] += x[j] * y[j];
        }
    }
    let mut sum: f32 = acc.iter().sum();
    for i in chunks * 8..a.len().min(b.len()) {
        sum += a[i] * b[i];
    }
    sum
}

#[derive(Debug, thiserror::Error)]
#[error("vector graph: {0}")]
pub struct GraphError(pub String);

/// usearch's errors (C++ exceptions carried over) as ours.
fn err(e: impl std::fmt::Display) -> GraphError {
    GraphError(e.to_string())
}

/// An HNSW graph over unit vectors keyed by rowid; distance `1 - dot`.
///
/// Nodes the graph's own walk cannot find are also kept in `hidden` and scanned exactly
/// by every search. HNSW links a new node to its nearest neighbours, but each of those
/// keeps the link back only if the node beats its other neighbours; a memory unlike the
/// rest of the library (an edited turn on a new topic among thousands alike) loses those
/// contests, so no walk reaches it and a query that matches it at 0.9 came back with
/// unrelated memories at 0.2 (session 17, BENCHMARKS.md). usearch offers no way to add
/// the missing links, so each node is checked once as it goes in (a search for its own
/// vector, ~1 ms) and, when not found, scanned exactly instead.
pub struct Graph {
    index: usearch::Index,
    dim: usize,
    /// Nodes a search for their own vector does not find, with their vectors.
    hidden: RwLock<std::collections::HashMap<i64, Vec<f32>>>,
    /// Deleted nodes whose slots no insertion has reused yet.
    vacant: AtomicUsize,
    /// Serialises growing the reserved capacity (inserts themselves run in parallel).
    grow: std::sync::Mutex<()>,
}

impl Graph {
    pub fn new(dim: usize, capacity: usize) -> Result<Self, GraphError> {
        let options = usearch::IndexOptions {
            dimensions: dim,
            metric: usearch::MetricKind::IP,
            quantization: usearch::ScalarKind::F32,
            connectivity: CONNECTIVITY,
            expansion_add: EXPANSION_ADD,
            expansion_search: EXPANSION_SEARCH,
            multi: false,
        };
        let index = usearch::Index::new(&options).map_err(err)?;
        index.reserve_capacity_and_threads(capacity.max(1024), GRAPH_THREADS).map_err(err)?;
        Ok(Self { index, dim, hidden: RwLock::default(), vacant: AtomicUsize::new(0), grow: std::sync::Mutex::new(()) })
    }

    /// A graph saved by [`Self::save`]; an error (never a crash) when the file is not one
    /// or holds vectors of another width.
    pub fn load(path: &std::path::Path, dim: usize) -> Result<Self, GraphError> {
        let path = path.to_str().ok_or_else(|| GraphError("the graph's path is not UTF-8".into()))?;
        let meta = usearch::Index::metadata(path).map_err(err)?;
        if meta.dimensions as usize != dim || meta.multi || meta.quantization != usearch::ScalarKind::F32 {
            return Err(GraphError(format!("the saved graph holds {}-wide vectors, not {dim}", meta.dimensions)));
        }
        let graph = Self::new(dim, 0)?;
        graph.index.load(path).map_err(err)?;
        if graph.index.dimensions() != dim {
            return Err(GraphError("the saved graph changed width while loading".into()));
        }
        graph.index.change_expansion_search(EXPANSION_SEARCH);
        graph.index.change_expansion_add(EXPANSION_ADD);
        let capacity = graph.index.capacity().max(graph.index.size() + 1024);
        graph.index.reserve_capacity_and_threads(capacity, GRAPH_THREADS).map_err(err)?;
        graph.vacant.store(meta.count_deleted as usize, Ordering::SeqCst);
        Ok(graph)
    }

    /// Write the graph (links and vectors) to `path`. Reading only: searches go on.
    pub fn save(&self, path: &std::path::Path) -> Result<(), GraphError> {
        let path = path.to_str().ok_or_else(|| GraphError("the graph's path is not UTF-8".into()))?;
        self.index.save(path).map_err(err)
    }

    /// Live vectors.
    pub fn len(&self) -> usize {
        self.index.size()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Deleted nodes still in the graph (waypoints until an insertion reuses them).
    pub fn vacant(&self) -> usize {
        self.vacant.load(Ordering::SeqCst)
    }

    pub fn contains(&self, rowid: i64) -> bool {
        self.index.contains(rowid as u64)
    }

    /// Insert (or replace) `rowid`'s vector. Safe to call from several threads.
    pub fn insert(&self, rowid: i64, vector: &[f32]) -> Result<(), GraphError> {
        if vector.len() != self.dim {
            return Err(GraphError(format!("a {}-wide vector for a {}-wide graph", vector.len(), self.dim)));
        }
        if self.index.contains(rowid as u64) {
            self.remove(rowid)?;
        }
        {
            let _grow = self.grow.lock().unwrap_or_else(|p| p.into_inner());
            let used = self.index.size() + self.vacant();
            if used + 1 > self.index.capacity() {
                let next = (self.index.capacity() * 3 / 2).max(used + 1024);
                self.index.reserve_capacity_and_threads(next, GRAPH_THREADS).map_err(err)?;
            }
        }
        self.index.add(rowid as u64, vector).map_err(err)?;
        // The insertion took a deleted node's slot if there was one.
        let _ = self.vacant.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1));
        Ok(())
    }

    /// Make room for `extra` more vectors now. Growing reallocates the graph, which must
    /// not happen while other threads insert: a parallel batch reserves first.
    pub fn reserve_for(&self, extra: usize) -> Result<(), GraphError> {
        let _grow = self.grow.lock().unwrap_or_else(|p| p.into_inner());
        let used = self.index.size() + self.vacant();
        if used + extra > self.index.capacity() {
            self.index.reserve_capacity_and_threads(used + extra + 1024, GRAPH_THREADS).map_err(err)?;
        }
        Ok(())
    }

    /// Whether a search for `rowid`'s own vector finds it; if not, it is kept in the
    /// exactly scanned `hidden` set (see [`Graph`]). Returns whether it was found.
    pub fn check_reachable(&self, rowid: i64, vector: &[f32]) -> bool {
        let found = match self.index.search(vector, REACH_CHECK) {
            Ok(m) => m.keys.contains(&(rowid as u64)),
            Err(_) => false,
        };
        let mut hidden = self.hidden.write().unwrap_or_else(|p| p.into_inner());
        if found {
            hidden.remove(&rowid);
        } else if self.index.contains(rowid as u64) {
            hidden.insert(rowid, vector.to_vec());
        }
        found
    }

    /// [`Self::check_reachable`] for each of `rows`, on `threads` threads (after a build).
    pub fn check_all(&self, rows: &[(i64, Vec<f32>)], threads: usize) {
        let chunk = rows.len().div_ceil(threads.max(1)).max(1);
        std::thread::scope(|scope| {
            for part in rows.chunks(chunk) {
                scope.spawn(move || {
                    for (r, v) in part {
                        self.check_reachable(*r, v);
                    }
                });
            }
        });
    }

    /// The nodes kept in the exactly scanned set, sorted (saved with the graph).
    pub fn hidden(&self) -> Vec<i64> {
        let mut rowids: Vec<i64> = self.hidden.read().unwrap_or_else(|p| p.into_inner()).keys().copied().collect();
        rowids.sort_unstable();
        rowids
    }

    /// Put the saved graph's hidden nodes back in the exactly scanned set.
    pub fn restore_hidden(&self, rowids: &[i64]) {
        let mut hidden = self.hidden.write().unwrap_or_else(|p| p.into_inner());
        for &r in rowids {
            if let Some(v) = self.get(r) {
                hidden.insert(r, v);
            }
        }
    }

    /// Remove `rowid` if present.
    pub fn remove(&self, rowid: i64) -> Result<(), GraphError> {
        self.hidden.write().unwrap_or_else(|p| p.into_inner()).remove(&rowid);
        if self.index.remove(rowid as u64).map_err(err)? > 0 {
            self.vacant.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }

    /// `rowid`'s vector, if the graph holds it.
    pub fn get(&self, rowid: i64) -> Option<Vec<f32>> {
        let mut out = vec![0f32; self.dim];
        match self.index.get(rowid as u64, &mut out) {
            Ok(n) if n > 0 => Some(out),
            _ => None,
        }
    }

    /// The `n` nearest vectors `keep` accepts: `(rowid, cosine)`, best first. The
    /// search keeps at least `n` candidates (ef = max(n, EXPANSION_SEARCH)); the nodes
    /// the walk cannot reach are scored exactly and merged in.
    pub fn search(&self, query: &[f32], n: usize, keep: &dyn Fn(i64) -> bool) -> Vec<(i64, f32)> {
        if n == 0 || query.len() != self.dim || self.index.size() == 0 {
            return Vec::new();
        }
        let found = self.index.filtered_search(query, n, |key: u64| keep(key as i64));
        let mut hits: Vec<(i64, f32)> = match found {
            Ok(m) => m.keys.iter().zip(&m.distances).map(|(&k, &d)| (k as i64, 1.0 - d)).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "vector graph search failed");
                Vec::new()
            }
        };
        let hidden = self.hidden.read().unwrap_or_else(|p| p.into_inner());
        if !hidden.is_empty() {
            let floor = if hits.len() >= n { hits.last().map_or(f32::NEG_INFINITY, |h| h.1) } else { f32::NEG_INFINITY };
            let mut extra = false;
            for (&r, v) in hidden.iter() {
                let score = dot(query, v);
                if score > floor && keep(r) && !hits.iter().any(|h| h.0 == r) {
                    hits.push((r, score));
                    extra = true;
                }
            }
            if extra {
                hits.sort_by(|a, b| b.1.total_cmp(&a.1));
                hits.truncate(n);
            }
        }
        hits
    }

    /// How many candidates a search keeps (HNSW's ef): more finds more of the exact
    /// neighbours and costs time (benches/memory.rs `real` measures the trade).
    pub fn set_expansion_search(&self, ef: usize) {
        self.index.change_expansion_search(ef.max(1));
    }

    /// Exact top `n` over every live vector (the graph's own brute-force scan).
    pub fn exact(&self, query: &[f32], n: usize) -> Vec<(i64, f32)> {
        if n == 0 || query.len() != self.dim || self.index.size() == 0 {
            return Vec::new();
        }
        match self.index.exact_search(query, n) {
            Ok(m) => m.keys.iter().zip(&m.distances).map(|(&k, &d)| (k as i64, 1.0 - d)).collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// What is outside the graph: the exact tail and the removals not yet applied.
#[derive(Default)]
struct Outside {
    /// Rowids of the tail, one per row of `tail`.
    rowids: Vec<i64>,
    /// The tail's vectors, row-major, each unit length.
    tail: Vec<f32>,
    /// Rowids the graph holds but the library no longer does (or holds with another
    /// vector): skipped in the graph's answers, removed from it when it is free.
    stale: HashSet<i64>,
    /// Rowids put in the tail while the graph was busy, to insert once it is free.
    added: HashSet<i64>,
    /// The graph is being saved or built: leave it alone, use the tail.
    busy: bool,
}

impl Outside {
    fn remove_from_tail(&mut self, gone: &HashSet<i64>, dim: usize) {
        if gone.is_empty() || self.rowids.is_empty() {
            return;
        }
        let mut w = 0;
        for r in 0..self.rowids.len() {
            if gone.contains(&self.rowids[r]) {
                continue;
            }
            if w != r {
                self.rowids[w] = self.rowids[r];
                self.tail.copy_within(r * dim..(r + 1) * dim, w * dim);
            }
            w += 1;
        }
        self.rowids.truncate(w);
        self.tail.truncate(w * dim);
    }

    fn row(&self, i: usize, dim: usize) -> &[f32] {
        &self.tail[i * dim..(i + 1) * dim]
    }
}

/// The graph and the tail, each behind its own lock so a save (reading the graph for
/// seconds) never holds up a publish (which then writes only the tail).
///
/// Lock order, everywhere: `outside` before `graph`.
pub struct VectorIndex {
    pub dim: usize,
    outside: RwLock<Outside>,
    graph: RwLock<Option<Graph>>,
    /// The library's `[memory.graph] ef_search`, given to every graph it installs.
    ef_search: AtomicUsize,
}

impl VectorIndex {
    pub fn new(dim: usize) -> Self {
        Self { dim, outside: RwLock::new(Outside::default()), graph: RwLock::new(None), ef_search: AtomicUsize::new(EXPANSION_SEARCH) }
    }

    fn outside(&self) -> RwLockReadGuard<'_, Outside> {
        self.outside.read().unwrap_or_else(|p| p.into_inner())
    }

    fn outside_mut(&self) -> RwLockWriteGuard<'_, Outside> {
        self.outside.write().unwrap_or_else(|p| p.into_inner())
    }

    fn graph(&self) -> RwLockReadGuard<'_, Option<Graph>> {
        self.graph.read().unwrap_or_else(|p| p.into_inner())
    }

    fn graph_mut(&self) -> RwLockWriteGuard<'_, Option<Graph>> {
        self.graph.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Live vectors searched through the graph.
    pub fn in_graph(&self) -> usize {
        let stale = self.outside().stale.len();
        self.graph().as_ref().map(|g| g.len().saturating_sub(stale)).unwrap_or(0)
    }

    /// Vectors scanned exactly (new while the graph was busy, or all of them without one).
    pub fn pending(&self) -> usize {
        self.outside().rowids.len()
    }

    /// Deleted nodes the graph keeps as waypoints, plus removals not yet applied.
    pub fn vacant(&self) -> usize {
        let stale = self.outside().stale.len();
        self.graph().as_ref().map(|g| g.vacant()).unwrap_or(0) + stale
    }

    /// Live vectors in all.
    pub fn live(&self) -> usize {
        self.in_graph() + self.pending()
    }

    pub fn has_graph(&self) -> bool {
        self.graph().is_some()
    }

    pub fn is_busy(&self) -> bool {
        self.outside().busy
    }

    /// Apply a committed change: `gone` rows are removed (an edit's old vector too), then
    /// `added` rows inserted. Into the graph when it is free, else into the tail.
    pub fn apply(&self, gone: &[i64], added: &[(i64, Vec<f32>)]) {
        let mut outside = self.outside_mut();
        let gone: HashSet<i64> = gone.iter().copied().chain(added.iter().map(|(r, _)| *r)).collect();
        outside.remove_from_tail(&gone, self.dim);
        if !outside.busy && !added.is_empty() {
            // Growing reallocates the graph: done here, under the write lock, never
            // while a search (or another insert) walks it.
            if let Some(g) = self.graph_mut().as_ref()
                && let Err(e) = g.reserve_for(added.len())
            {
                tracing::warn!(error = %e, "cannot grow the vector graph");
            }
        }
        let graph = if outside.busy { None } else { Some(self.graph()) };
        match graph.as_ref().and_then(|g| g.as_ref()) {
            Some(g) => {
                for &r in &gone {
                    if let Err(e) = g.remove(r) {
                        tracing::warn!(error = %e, "removing from the vector graph failed; filtering it instead");
                        outside.stale.insert(r);
                    }
                }
                for (r, v) in insert_all(g, added) {
                    push_tail(&mut outside, r, v, self.dim);
                }
            }
            None => {
                let busy = outside.busy;
                if busy {
                    outside.stale.extend(gone.iter().copied());
                }
                for (r, v) in added {
                    push_tail(&mut outside, *r, v, self.dim);
                    if busy {
                        outside.added.insert(*r);
                    }
                }
            }
        }
    }

    /// Put `rowid` in the tail without touching the graph (loading a library whose graph
    /// is being built).
    pub fn push(&self, rowid: i64, vector: &[f32]) {
        let mut outside = self.outside_mut();
        push_tail(&mut outside, rowid, vector, self.dim);
    }

    /// Mark the graph busy (a save or a build is about to read it or replace it): from
    /// now on writes go to the tail. Returns false if it already was.
    pub fn begin_busy(&self) -> bool {
        let mut outside = self.outside_mut();
        if outside.busy {
            return false;
        }
        outside.busy = true;
        outside.added.clear();
        // Removals noted without a graph (none exist then) need no replay.
        if self.graph().is_none() {
            outside.stale.clear();
        }
        true
    }

    /// The graph is free again: put `replacement` in (a finished build) if given, then
    /// apply what was written meanwhile. Without a replacement and without a graph
    /// (a failed build), the tail simply goes on being scanned.
    pub fn end_busy(&self, replacement: Option<Graph>) {
        let mut outside = self.outside_mut();
        let mut graph = self.graph_mut();
        if let Some(g) = replacement {
            g.set_expansion_search(self.ef_search());
            *graph = Some(g);
        }
        if let Some(g) = graph.as_ref() {
            for r in std::mem::take(&mut outside.stale) {
                let _ = g.remove(r);
            }
            let added = std::mem::take(&mut outside.added);
            let (rowids, tail) = (std::mem::take(&mut outside.rowids), std::mem::take(&mut outside.tail));
            for (i, &r) in rowids.iter().enumerate() {
                // Without `added` (a build from the library), every tail row was read
                // into the new graph unless it came after the build began.
                if !added.contains(&r) && g.contains(r) {
                    continue;
                }
                let v = &tail[i * self.dim..(i + 1) * self.dim];
                if let Err(e) = g.insert(r, v) {
                    tracing::warn!(error = %e, "inserting into the vector graph failed; scanning it exactly");
                    push_tail(&mut outside, r, v, self.dim);
                } else {
                    g.check_reachable(r, v);
                }
            }
        }
        outside.busy = false;
    }

    /// Empty the tail (before reading every vector into it again).
    pub fn clear_tail(&self) {
        let mut outside = self.outside_mut();
        outside.rowids.clear();
        outside.tail.clear();
        outside.stale.clear();
        outside.added.clear();
    }

    /// Drop the graph (its file did not fit): everything must then be in the tail.
    pub fn drop_graph(&self) {
        let _outside = self.outside_mut();
        *self.graph_mut() = None;
    }

    /// Install a loaded graph directly (opening a library; nothing is in the tail yet).
    pub fn set_graph(&self, graph: Graph) {
        let _outside = self.outside_mut();
        graph.set_expansion_search(self.ef_search());
        *self.graph_mut() = Some(graph);
    }

    /// How many candidates graph searches keep, now and in any graph installed later.
    /// Taken under the graph's write lock, so no search is walking it meanwhile — and
    /// only when it changes: settings are applied on every use of the bank, and the
    /// write lock waits for a background save of the graph.
    pub fn set_ef_search(&self, ef: usize) {
        let ef = ef.max(1);
        if self.ef_search.swap(ef, Ordering::SeqCst) == ef {
            return;
        }
        if let Some(g) = self.graph_mut().as_ref() {
            g.set_expansion_search(ef);
        }
    }

    pub fn ef_search(&self) -> usize {
        self.ef_search.load(Ordering::SeqCst)
    }

    /// The `ef` the installed graph searches with, if there is one.
    pub fn graph_ef_search(&self) -> Option<usize> {
        self.graph().as_ref().map(|g| g.index.expansion_search())
    }

    /// Save the graph to `path` while holding only a read lock on it (searches go on;
    /// writes go to the tail because the caller marked it busy). Returns the live count
    /// and the nodes its walk cannot reach (kept beside it, see [`Graph`]).
    pub fn save_graph(&self, path: &std::path::Path) -> Result<Option<(usize, Vec<i64>)>, GraphError> {
        let graph = self.graph();
        match graph.as_ref() {
            Some(g) => g.save(path).map(|_| Some((g.len(), g.hidden()))),
            None => Ok(None),
        }
    }

    /// Nodes of the graph scanned exactly because its walk cannot reach them.
    pub fn unreachable(&self) -> usize {
        self.graph().as_ref().map_or(0, |g| g.hidden.read().unwrap_or_else(|p| p.into_inner()).len())
    }

    /// Whether the graph's vector for `rowid` is exactly `vector` (a journal replay
    /// skips what this index already holds).
    pub fn holds(&self, rowid: i64, vector: &[f32]) -> bool {
        let outside = self.outside();
        if let Some(i) = outside.rowids.iter().rposition(|&r| r == rowid) {
            return outside.row(i, self.dim) == vector;
        }
        if outside.stale.contains(&rowid) {
            return false;
        }
        self.graph().as_ref().and_then(|g| g.get(rowid)).is_some_and(|v| v == vector)
    }

    /// Whether the index holds `rowid` at all.
    pub fn contains(&self, rowid: i64) -> bool {
        let outside = self.outside();
        outside.rowids.contains(&rowid) || (!outside.stale.contains(&rowid) && self.graph().as_ref().is_some_and(|g| g.contains(rowid)))
    }

    /// `rowid`'s vector, from the tail or the graph.
    pub fn vector(&self, rowid: i64) -> Option<Vec<f32>> {
        let outside = self.outside();
        if let Some(i) = outside.rowids.iter().rposition(|&r| r == rowid) {
            return Some(outside.row(i, self.dim).to_vec());
        }
        if outside.stale.contains(&rowid) {
            return None;
        }
        self.graph().as_ref().and_then(|g| g.get(rowid))
    }

    fn scan(&self, outside: &Outside, query: &[f32], n: usize, keep: &dyn Fn(i64) -> bool) -> Vec<(i64, f32)> {
        let mut best: Vec<(i64, f32)> = Vec::with_capacity(n + 1);
        let mut floor = f32::NEG_INFINITY;
        for (i, &rowid) in outside.rowids.iter().enumerate() {
            let score = dot(query, outside.row(i, self.dim));
            if best.len() == n && score <= floor {
                continue;
            }
            if !keep(rowid) {
                continue;
            }
            let at = best.partition_point(|&(_, s)| s >= score);
            best.insert(at, (rowid, score));
            if best.len() > n {
                best.pop();
            }
            if best.len() == n {
                floor = best[n - 1].1;
            }
        }
        best
    }

    /// The `n` nearest rows that pass `keep`: the graph (skipping stale rows) and an
    /// exact scan of the tail, merged.
    pub fn search(&self, query: &[f32], n: usize, keep: &dyn Fn(i64) -> bool) -> Vec<(i64, f32)> {
        if n == 0 || query.len() != self.dim {
            return Vec::new();
        }
        let outside = self.outside();
        let mut hits = self.scan(&outside, query, n, keep);
        if let Some(g) = self.graph().as_ref() {
            let stale = &outside.stale;
            if stale.is_empty() {
                hits.extend(g.search(query, n, keep));
            } else {
                hits.extend(g.search(query, n, &|r: i64| !stale.contains(&r) && keep(r)));
            }
        }
        hits.sort_by(|a, b| b.1.total_cmp(&a.1));
        hits.truncate(n);
        hits
    }

    /// Exact scores of the rows in `rowids` (a selective filter's few thousand): each
    /// vector is looked up, not every row tested.
    pub fn search_subset(&self, query: &[f32], n: usize, rowids: &HashSet<i64>) -> Vec<(i64, f32)> {
        if n == 0 || query.len() != self.dim {
            return Vec::new();
        }
        let outside = self.outside();
        let mut scored = self.scan(&outside, query, n, &|r: i64| rowids.contains(&r));
        if let Some(g) = self.graph().as_ref() {
            for &r in rowids {
                if outside.stale.contains(&r) {
                    continue;
                }
                if let Some(v) = g.get(r) {
                    scored.push((r, dot(query, &v)));
                }
            }
        }
        scored.sort_by(|a, b| b.1.total_cmp(&a.1));
        scored.dedup_by_key(|h| h.0);
        scored.truncate(n);
        scored
    }

    /// Exact search over everything (the reference the graph is measured against).
    pub fn search_exact(&self, query: &[f32], n: usize) -> Vec<(i64, f32)> {
        if n == 0 || query.len() != self.dim {
            return Vec::new();
        }
        let outside = self.outside();
        let mut hits = self.scan(&outside, query, n, &|_| true);
        if let Some(g) = self.graph().as_ref() {
            let extra = outside.stale.len();
            hits.extend(g.exact(query, n + extra).into_iter().filter(|(r, _)| !outside.stale.contains(r)));
        }
        hits.sort_by(|a, b| b.1.total_cmp(&a.1));
        hits.truncate(n);
        hits
    }
}

/// Insert `rows` into `graph`, on every core for a batch (an import publishes thousands
/// at once; one insertion takes ~0.1–1 ms). Returns the rows that failed, for the tail.
fn insert_all<'a>(graph: &Graph, rows: &'a [(i64, Vec<f32>)]) -> Vec<(i64, &'a [f32])> {
    let mut threads = if rows.len() < 64 { 1 } else { std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) };
    if threads > 1 && graph.reserve_for(rows.len()).is_err() {
        threads = 1;
    }
    let failed = std::sync::Mutex::new(Vec::new());
    let insert = |part: &'a [(i64, Vec<f32>)]| {
        for (r, v) in part {
            if let Err(e) = graph.insert(*r, v) {
                tracing::warn!(error = %e, "inserting into the vector graph failed; scanning it exactly");
                failed.lock().unwrap_or_else(|p| p.into_inner()).push((*r, v.as_slice()));
            }
        }
    };
    // Checked once the whole batch is in: the batch's rows link to each other.
    let check = |part: &'a [(i64, Vec<f32>)]| {
        for (r, v) in part {
            if graph.contains(*r) {
                graph.check_reachable(*r, v);
            }
        }
    };
    if threads <= 1 {
        insert(rows);
        check(rows);
    } else {
        std::thread::scope(|scope| {
            for part in rows.chunks(rows.len().div_ceil(threads)) {
                scope.spawn(move || insert(part));
            }
        });
        std::thread::scope(|scope| {
            for part in rows.chunks(rows.len().div_ceil(threads)) {
                scope.spawn(move || check(part));
            }
        });
    }
    failed.into_inner().unwrap_or_else(|p| p.into_inner())
}

fn push_tail(outside: &mut Outside, rowid: i64, vector: &[f32], dim: usize) {
    if vector.len() != dim {
        return;
    }
    outside.rowids.push(rowid);
    outside.tail.extend_from_slice(vector);
}

/// Build a graph over `rows` using `threads` threads, counting inserted rows on `done`.
pub fn build_graph(dim: usize, rows: &[(i64, Vec<f32>)], threads: usize, done: &AtomicUsize) -> Result<Graph, GraphError> {
    let graph = Graph::new(dim, rows.len() + 1024)?;
    let threads = threads.max(1);
    let chunk = rows.len().div_ceil(threads).max(1);
    let failed: std::sync::Mutex<Option<GraphError>> = std::sync::Mutex::new(None);
    std::thread::scope(|scope| {
        for part in rows.chunks(chunk) {
            let (graph, failed) = (&graph, &failed);
            scope.spawn(move || {
                for (r, v) in part {
                    if let Err(e) = graph.insert(*r, v) {
                        *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                        return;
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => {
            graph.check_all(rows, threads);
            Ok(graph)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: Vec<f32>) -> Vec<f32> {
        super::super::embedder::normalise(v)
    }

    fn random_rows(n: usize, dim: usize, seed: u64) -> Vec<(i64, Vec<f32>)> {
        let mut rng = fastrand::Rng::with_seed(seed);
        (0..n).map(|i| (i as i64 + 1, unit((0..dim).map(|_| rng.f32() - 0.5).collect()))).collect()
    }

    fn graph_index(rows: &[(i64, Vec<f32>)], dim: usize) -> VectorIndex {
        let index = VectorIndex::new(dim);
        index.set_graph(build_graph(dim, rows, 2, &AtomicUsize::new(0)).unwrap());
        index
    }

    #[test]
    fn dot_matches_the_naive_sum() {
        let a: Vec<f32> = (0..19).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..19).map(|i| 1.0 - i as f32).collect();
        let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - naive).abs() < 1e-3);
    }

    #[test]
    fn exact_tail_search_finds_the_vector_itself_first_and_honours_the_filter() {
        let rows = random_rows(300, 16, 7);
        let index = VectorIndex::new(16);
        for (r, v) in &rows {
            index.push(*r, v);
        }
        let hits = index.search(&rows[41].1, 5, &|_| true);
        assert_eq!(hits[0].0, 42);
        assert!((hits[0].1 - 1.0).abs() < 1e-5);
        assert!(hits.windows(2).all(|w| w[0].1 >= w[1].1));
        let odd = index.search(&rows[41].1, 5, &|r| r % 2 == 1);
        assert!(odd.iter().all(|(r, _)| r % 2 == 1));
        assert_eq!(odd.len(), 5);
    }

    #[test]
    fn inserts_are_found_at_once_and_the_graph_agrees_with_the_exact_scan() {
        let rows = random_rows(2000, 16, 1);
        let index = graph_index(&rows, 16);
        let fresh = unit((0..16).map(|i| (i as f32).sin()).collect());
        index.apply(&[], &[(10_000, fresh.clone())]);
        assert_eq!((index.pending(), index.in_graph()), (0, 2001), "inserted into the graph, not a tail");
        assert_eq!(index.search(&fresh, 3, &|_| true)[0].0, 10_000);
        let mut agree = 0;
        for (_, q) in rows.iter().take(50) {
            let exact: Vec<i64> = index.search_exact(q, 10).iter().map(|h| h.0).collect();
            let approx: Vec<i64> = index.search(q, 10, &|_| true).iter().map(|h| h.0).collect();
            agree += approx.iter().filter(|r| exact.contains(r)).count();
        }
        assert!(agree as f32 / 500.0 > 0.95, "recall {}", agree as f32 / 500.0);
    }

    #[test]
    fn removed_and_replaced_vectors_are_never_returned() {
        let rows = random_rows(500, 16, 2);
        let index = graph_index(&rows, 16);
        // Row 11 goes; row 12 is edited (same rowid, new vector).
        let edited = unit((0..16).map(|i| (i as f32 * 0.7).cos()).collect());
        index.apply(&[11, 12], &[(12, edited.clone())]);
        assert_eq!(index.vacant(), 1, "the edit reused the deleted slot");
        for q in [&rows[10].1, &rows[11].1] {
            let hits = index.search(q, 20, &|_| true);
            assert!(hits.iter().all(|(r, s)| *r != 11 && !(*r == 12 && (*s - 1.0).abs() < 1e-4)), "{hits:?}");
        }
        assert_eq!(index.search(&edited, 1, &|_| true)[0].0, 12);
        assert!((index.search(&edited, 1, &|_| true)[0].1 - 1.0).abs() < 1e-4);
        assert!(!index.contains(11));
        assert_eq!(index.live(), 499);
    }

    #[test]
    fn while_busy_writes_go_to_the_tail_and_are_applied_after() {
        let rows = random_rows(400, 16, 3);
        let index = graph_index(&rows, 16);
        assert!(index.begin_busy());
        assert!(!index.begin_busy());
        let fresh = unit((0..16).map(|i| (i as f32 * 1.3).sin()).collect());
        let edited = unit((0..16).map(|i| (i as f32 * 0.3).cos()).collect());
        index.apply(&[5], &[(9_000, fresh.clone())]);
        index.apply(&[6], &[(6, edited.clone())]);
        assert_eq!(index.pending(), 2);
        // Meanwhile: the old rows are filtered out, the new ones scanned exactly.
        let hits = index.search(&rows[4].1, 10, &|_| true);
        assert!(hits.iter().all(|(r, _)| *r != 5));
        assert_eq!(index.search(&fresh, 1, &|_| true)[0].0, 9_000);
        assert!(index.search(&rows[5].1, 10, &|_| true).iter().all(|(r, s)| !(*r == 6 && *s > 0.999)));
        index.end_busy(None);
        assert_eq!((index.pending(), index.vacant()), (0, 0), "both applied to the graph, slots reused");
        assert_eq!(index.search(&fresh, 1, &|_| true)[0].0, 9_000);
        assert_eq!(index.search(&edited, 1, &|_| true)[0].0, 6);
        assert!(!index.contains(5));
    }

    #[test]
    fn a_saved_graph_loads_and_answers_like_the_original() {
        let dir = tempfile::tempdir().unwrap();
        let rows = random_rows(300, 16, 4);
        let index = graph_index(&rows, 16);
        index.apply(&[7], &[]);
        let path = dir.path().join("g.usearch");
        assert_eq!(index.save_graph(&path).unwrap().map(|s| s.0), Some(299));
        let loaded = VectorIndex::new(16);
        loaded.set_graph(Graph::load(&path, 16).unwrap());
        assert_eq!((loaded.in_graph(), loaded.vacant()), (299, 1));
        for (_, q) in rows.iter().take(20) {
            assert_eq!(index.search(q, 10, &|_| true), loaded.search(q, 10, &|_| true));
        }
        // Another width, garbage, or a cut-off file is an error, not a crash.
        assert!(Graph::load(&path, 32).is_err());
        std::fs::write(dir.path().join("junk"), b"not a graph at all, just bytes").unwrap();
        assert!(Graph::load(&dir.path().join("junk"), 16).is_err());
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(dir.path().join("cut"), &bytes[..bytes.len() / 2]).unwrap();
        assert!(Graph::load(&dir.path().join("cut"), 16).is_err());
    }
}
