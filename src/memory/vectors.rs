//! The in-memory vector index: every stored vector for an exact scan, plus (once built)
//! an HNSW graph over the bulk.
//!
//! Why both: `instant-distance` builds its graph in one batch and cannot insert, so a
//! memory written a moment ago is not in the graph. The graph covers the first
//! `covers` rows (the bulk); everything after them (the tail) is scanned exactly, so a
//! new memory is searchable at once while the graph is rebuilt in the background.
//!
//! The bulk's vectors are one buffer shared by the index and the graph's points: at 1M
//! memories a second copy would be another 1.5 GB.

use instant_distance::{Builder, HnswMap, Search};
use std::cmp::Ordering;
use std::sync::Arc;

/// A vector in the HNSW graph: row `index` of a shared buffer. Distance is `1 - cosine`
/// (vectors are unit length).
///
/// It serialises as its position only: the vectors themselves are stored in
/// `memory_vectors`, so the persisted graph holds just its links, and loading points
/// each one at the buffer of the index being restored (see [`decode_ann`]).
#[derive(Clone, Debug)]
pub struct AnnPoint {
    pub index: u32,
    dim: u32,
    data: Arc<[f32]>,
}

impl AnnPoint {
    /// A query: its own one-row buffer.
    pub fn query(vector: &[f32]) -> Self {
        AnnPoint { index: 0, dim: vector.len() as u32, data: Arc::from(vector) }
    }

    pub fn vector(&self) -> &[f32] {
        let dim = self.dim as usize;
        let start = self.index as usize * dim;
        &self.data[start..start + dim]
    }
}

impl instant_distance::Point for AnnPoint {
    fn distance(&self, other: &Self) -> f32 {
        1.0 - dot(self.vector(), other.vector())
    }
}

impl serde::Serialize for AnnPoint {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(self.index)
    }
}

thread_local! {
    /// Scratch space of graph searches on this thread.
    static SEARCH: std::cell::RefCell<Search> = std::cell::RefCell::new(Search::default());
    /// The buffer a graph being decoded on this thread refers to, and its width.
    static DECODING: std::cell::RefCell<Option<(Arc<[f32]>, usize)>> = const { std::cell::RefCell::new(None) };
}

impl<'de> serde::Deserialize<'de> for AnnPoint {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let index = <u32 as serde::Deserialize>::deserialize(d)?;
        DECODING.with(|slot| {
            let slot = slot.borrow();
            let (data, dim) = slot.as_ref().ok_or_else(|| serde::de::Error::custom("no vectors to decode against"))?;
            if (index as usize + 1) * dim > data.len() {
                return Err(serde::de::Error::custom("graph refers to a missing vector"));
            }
            Ok(AnnPoint { index, dim: *dim as u32, data: data.clone() })
        })
    }
}

/// The graph as bytes (CBOR), without the vectors.
pub fn encode_ann(ann: &Ann) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    ciborium::into_writer(&ann.map, &mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// Restore a graph saved by [`encode_ann`] over `data`, the `covers` rows it was built on.
pub fn decode_ann(bytes: &[u8], data: Arc<[f32]>, dim: usize, covers: usize) -> Result<Ann, String> {
    if dim == 0 || data.len() != covers * dim {
        return Err(format!("the graph covers {covers} vectors but {} were given", data.len() / dim.max(1)));
    }
    DECODING.with(|slot| *slot.borrow_mut() = Some((data.clone(), dim)));
    let map: Result<HnswMap<AnnPoint, u32>, _> = ciborium::from_reader(bytes);
    DECODING.with(|slot| *slot.borrow_mut() = None);
    let map = map.map_err(|e| e.to_string())?;
    Ok(Ann { map, covers, data })
}

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

/// An HNSW graph over the `covers` rows of `data`.
pub struct Ann {
    pub map: HnswMap<AnnPoint, u32>,
    pub covers: usize,
    /// The vectors of the covered rows, shared with the index's bulk.
    pub data: Arc<[f32]>,
}

/// Build a graph over `vectors` (row-major, `dim` wide). Slow: seconds for 10k vectors.
pub fn build_ann(vectors: &[f32], dim: usize, seed: u64) -> Ann {
    build_ann_reporting(Arc::from(vectors), dim, seed, None)
}

/// [`build_ann`] over a buffer it keeps, counting inserted points on `progress` (a
/// hidden bar works: its position is read by whoever reports the progress).
pub fn build_ann_reporting(data: Arc<[f32]>, dim: usize, seed: u64, progress: Option<indicatif::ProgressBar>) -> Ann {
    let n = if dim == 0 { 0 } else { data.len() / dim };
    let points: Vec<AnnPoint> = (0..n).map(|i| AnnPoint { index: i as u32, dim: dim as u32, data: data.clone() }).collect();
    let values: Vec<u32> = (0..n as u32).collect();
    let mut builder = Builder::default().ef_construction(100).ef_search(64).seed(seed);
    if let Some(bar) = progress {
        builder = builder.progress(bar);
    }
    let map = builder.build(points, values);
    Ann { map, covers: n, data }
}

/// The rowid of a deleted row the graph still refers to (see [`VectorIndex::retain`]).
pub const GONE: i64 = i64::MIN;

#[derive(Default)]
pub struct VectorIndex {
    pub dim: usize,
    /// One per row; [`GONE`] for a row deleted under the graph.
    pub rowids: Vec<i64>,
    /// The rows under the graph (its `data`; empty without a graph).
    bulk: Arc<[f32]>,
    /// The rows after them, row-major, each unit length.
    tail: Vec<f32>,
    ann: Option<Arc<Ann>>,
    /// Rows marked [`GONE`].
    pub gone: usize,
    /// Bumped by every delete, so a graph built from an older snapshot is not swapped in.
    pub generation: u64,
}

impl VectorIndex {
    pub fn new(dim: usize) -> Self {
        Self { dim, bulk: Arc::from(Vec::new()), ..Default::default() }
    }

    /// An index over `rowids` whose first rows are `ann`'s buffer and the rest `tail`.
    pub fn with_graph(dim: usize, rowids: Vec<i64>, ann: Ann, tail: Vec<f32>) -> Self {
        let gone = rowids.iter().filter(|&&r| r == GONE).count();
        Self { dim, rowids, bulk: ann.data.clone(), tail, ann: Some(Arc::new(ann)), gone, generation: 0 }
    }

    pub fn len(&self) -> usize {
        self.rowids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rowids.is_empty()
    }

    /// Rows that are live (not [`GONE`]).
    pub fn live(&self) -> usize {
        self.len() - self.gone
    }

    fn covers(&self) -> usize {
        self.ann.as_ref().map(|a| a.covers.min(self.len())).unwrap_or(0)
    }

    /// How many vectors the graph does not cover yet.
    pub fn pending(&self) -> usize {
        self.len() - self.covers()
    }

    pub fn push(&mut self, rowid: i64, vector: &[f32]) {
        if vector.len() != self.dim {
            return;
        }
        self.rowids.push(rowid);
        self.tail.extend_from_slice(vector);
    }

    /// Put a graph over the first `ann.covers` rows, whose vectors must be `ann.data`
    /// (it was built from them, or decoded against them). Returns false, changing
    /// nothing, if the index has fewer rows.
    pub fn set_graph(&mut self, ann: Ann) -> bool {
        let (dim, covers) = (self.dim, ann.covers);
        if covers > self.len() || ann.data.len() != covers * dim {
            return false;
        }
        let tail = self.flat(covers..self.len());
        self.bulk = ann.data.clone();
        self.tail = tail;
        self.ann = Some(Arc::new(ann));
        true
    }

    /// Row `i`'s vector.
    pub fn row(&self, i: usize) -> &[f32] {
        self.row_at(i, self.bulk_rows())
    }

    fn bulk_rows(&self) -> usize {
        self.bulk.len() / self.dim.max(1)
    }

    /// Row `i` given [`Self::bulk_rows`], computed once per scan rather than per row.
    #[inline]
    fn row_at(&self, i: usize, bulk_rows: usize) -> &[f32] {
        let dim = self.dim;
        if i < bulk_rows {
            &self.bulk[i * dim..(i + 1) * dim]
        } else {
            let j = i - bulk_rows;
            &self.tail[j * dim..(j + 1) * dim]
        }
    }

    /// The vectors of `rows`, row-major (a copy).
    pub fn flat(&self, rows: std::ops::Range<usize>) -> Vec<f32> {
        (rows.start..rows.end.min(self.len())).flat_map(|i| self.row(i).iter().copied()).collect()
    }

    /// The `n` most similar rows among `range`, by exact scan: `(rowid, cosine)`, best first.
    /// Exact search over the rows `keep` accepts, testing `keep` before the dot
    /// product: for a selective filter (a character's lore among 100k memories) this
    /// costs a lookup per row instead of a 384-wide product per row.
    pub fn search_subset(&self, query: &[f32], n: usize, keep: &dyn Fn(i64) -> bool) -> Vec<(i64, f32)> {
        if n == 0 || query.len() != self.dim {
            return Vec::new();
        }
        let mut scored: Vec<(i64, f32)> =
            (0..self.len()).filter(|&i| self.rowids[i] != GONE && keep(self.rowids[i])).map(|i| (self.rowids[i], dot(query, self.row(i)))).collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1));
        scored.truncate(n);
        scored
    }

    fn scan(&self, query: &[f32], range: std::ops::Range<usize>, n: usize, keep: &dyn Fn(i64) -> bool) -> Vec<(i64, f32)> {
        let mut best: Vec<(i64, f32)> = Vec::with_capacity(n + 1);
        let mut floor = f32::NEG_INFINITY;
        let bulk_rows = self.bulk_rows();
        for i in range {
            let score = dot(query, self.row_at(i, bulk_rows));
            if best.len() == n && score <= floor {
                continue;
            }
            let rowid = self.rowids[i];
            if rowid == GONE || !keep(rowid) {
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

    /// Exact search over everything (the reference the graph is measured against).
    pub fn search_exact(&self, query: &[f32], n: usize, keep: &dyn Fn(i64) -> bool) -> Vec<(i64, f32)> {
        if n == 0 || query.len() != self.dim {
            return Vec::new();
        }
        self.scan(query, 0..self.len(), n, keep)
    }

    /// The `n` nearest rows that pass `keep`: graph for the covered bulk, exact scan for
    /// the tail. A filter that rejects most rows falls back to the exact scan, because the
    /// graph only yields its `ef` nearest candidates.
    pub fn search(&self, query: &[f32], n: usize, keep: &dyn Fn(i64) -> bool) -> Vec<(i64, f32)> {
        if n == 0 || query.len() != self.dim {
            return Vec::new();
        }
        let Some(ann) = self.ann.as_ref().filter(|a| a.covers > 0 && a.covers <= self.len()) else {
            return self.scan(query, 0..self.len(), n, keep);
        };
        let point = AnnPoint::query(query);
        let mut hits: Vec<(i64, f32)> = Vec::with_capacity(n * 2);
        let mut seen = 0;
        let mut walk = |search: &mut Search| {
            for item in ann.map.search(&point, search) {
                seen += 1;
                let rowid = self.rowids[*item.value as usize];
                if rowid != GONE && keep(rowid) {
                    hits.push((rowid, 1.0 - item.distance));
                    if hits.len() == n {
                        break;
                    }
                }
            }
        };
        // A search's scratch space holds a visited mark per vector: reuse it per thread
        // instead of allocating and zeroing `len()` bytes for every query.
        SEARCH.with(|scratch| match scratch.try_borrow_mut() {
            Ok(mut search) => walk(&mut search),
            Err(_) => walk(&mut Search::default()),
        });
        if hits.len() < n && seen > hits.len() * 2 {
            // The filter is selective: the graph's candidates are not enough.
            return self.scan(query, 0..self.len(), n, keep);
        }
        hits.extend(self.scan(query, ann.covers..self.len(), n, keep));
        hits.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(Ordering::Equal));
        hits.truncate(n);
        hits
    }

    /// Drop rows (after deletes). Rows under the graph are only marked [`GONE`], so the
    /// graph keeps serving the rest (a companion's undo must not turn a 1 ms graph search
    /// into a 70 ms scan until the next rebuild); tail rows are removed.
    pub fn retain(&mut self, keep: impl Fn(i64) -> bool) {
        let (dim, covers) = (self.dim, self.covers());
        let mut rowids = Vec::with_capacity(self.rowids.len());
        let mut tail = Vec::with_capacity(self.tail.len());
        let mut changed = false;
        for (i, &r) in self.rowids.iter().enumerate() {
            let live = r != GONE && keep(r);
            changed |= r != GONE && !live;
            if i < covers {
                if !live && r != GONE {
                    self.gone += 1;
                }
                rowids.push(if live { r } else { GONE });
            } else if live {
                rowids.push(r);
                let j = i - covers;
                tail.extend_from_slice(&self.tail[j * dim..(j + 1) * dim]);
            }
        }
        if changed {
            self.generation += 1;
        }
        self.rowids = rowids;
        self.tail = tail;
    }

    /// The live rows, without a graph: `(rowids, vectors row-major)`.
    pub fn compacted(&self) -> (Vec<i64>, Vec<f32>) {
        let mut rowids = Vec::with_capacity(self.live());
        let mut data = Vec::with_capacity(self.live() * self.dim);
        for (i, &r) in self.rowids.iter().enumerate() {
            if r != GONE {
                rowids.push(r);
                data.extend_from_slice(self.row(i));
            }
        }
        (rowids, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: Vec<f32>) -> Vec<f32> {
        super::super::embedder::normalise(v)
    }

    fn random_index(n: usize, dim: usize) -> VectorIndex {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut index = VectorIndex::new(dim);
        for i in 0..n {
            let v = unit((0..dim).map(|_| rng.f32() - 0.5).collect());
            index.push(i as i64 + 1, &v);
        }
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
    fn exact_search_finds_the_vector_itself_first_and_honours_the_filter() {
        let index = random_index(300, 16);
        let q = index.row(41).to_vec();
        let hits = index.search(&q, 5, &|_| true);
        assert_eq!(hits[0].0, 42);
        assert!((hits[0].1 - 1.0).abs() < 1e-5);
        assert!(hits.windows(2).all(|w| w[0].1 >= w[1].1));
        let odd = index.search(&q, 5, &|r| r % 2 == 1);
        assert!(odd.iter().all(|(r, _)| r % 2 == 1));
        assert_eq!(odd.len(), 5);
    }

    #[test]
    fn graph_plus_tail_finds_new_rows_at_once() {
        let mut index = random_index(400, 16);
        assert!(index.set_graph(build_ann(&index.flat(0..400), 16, 1)));
        let mut rng = fastrand::Rng::with_seed(99);
        let fresh = unit((0..16).map(|_| rng.f32() - 0.5).collect());
        index.push(10_000, &fresh);
        assert_eq!(index.pending(), 1);
        let hits = index.search(&fresh, 3, &|_| true);
        assert_eq!(hits[0].0, 10_000);
        // The graph agrees with the exact scan on most of the top 10.
        let mut agree = 0;
        for i in 0..50 {
            let q = index.row(i).to_vec();
            let exact: Vec<i64> = index.search_exact(&q, 10, &|_| true).iter().map(|h| h.0).collect();
            let approx: Vec<i64> = index.search(&q, 10, &|_| true).iter().map(|h| h.0).collect();
            agree += approx.iter().filter(|r| exact.contains(r)).count();
        }
        assert!(agree as f32 / 500.0 > 0.9, "recall {}", agree as f32 / 500.0);
    }

    #[test]
    fn deleting_under_the_graph_keeps_the_graph_and_skips_the_rows() {
        let mut index = random_index(300, 16);
        assert!(index.set_graph(build_ann(&index.flat(0..300), 16, 2)));
        let fresh = index.row(5).to_vec();
        index.push(9_000, &fresh);
        let q = index.row(10).to_vec();
        // Rows 11 (under the graph) and 9 000 (in the tail) go.
        index.retain(|r| r != 11 && r != 9_000);
        assert!(index.ann.is_some());
        assert_eq!((index.len(), index.live(), index.gone, index.pending(), index.generation), (300, 299, 1, 0, 1));
        let hits = index.search(&q, 10, &|_| true);
        assert_eq!(hits.len(), 10);
        assert!(hits.iter().all(|(r, _)| *r != 11 && *r != 9_000));
        assert!(index.search_exact(&q, 300, &|_| true).iter().all(|(r, _)| *r != 11));
        let (rowids, data) = index.compacted();
        assert_eq!((rowids.len(), data.len()), (299, 299 * 16));
        assert!(!rowids.contains(&11));
    }

    #[test]
    fn a_saved_graph_loads_and_answers_like_the_original() {
        let index = random_index(300, 16);
        let ann = build_ann(&index.flat(0..300), 16, 3);
        let bytes = encode_ann(&ann).unwrap();
        // The graph alone, without its vectors: links only (~150 bytes a point), a tenth
        // of what one 384-dimensional vector takes.
        assert!(bytes.len() < 300 * 200, "{} bytes", bytes.len());
        let loaded = decode_ann(&bytes, Arc::from(index.flat(0..300)), 16, 300).unwrap();
        let mut a = random_index(300, 16);
        assert!(a.set_graph(ann));
        let mut b = random_index(300, 16);
        assert!(b.set_graph(loaded));
        for i in 0..20 {
            let q = a.row(i).to_vec();
            assert_eq!(a.search(&q, 10, &|_| true), b.search(&q, 10, &|_| true));
        }
        // Decoding against fewer vectors than the graph covers is an error, not a panic.
        assert!(decode_ann(&bytes, Arc::from(index.flat(0..10)), 16, 10).is_err());
        assert!(decode_ann(&bytes, Arc::from(index.flat(0..10)), 16, 300).is_err());
    }
}
