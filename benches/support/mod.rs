//! What the memory and companion benchmarks share: paths to the shipped model and
//! evaluation data, realistic text, clustered synthetic vectors and percentiles.

#![allow(dead_code)] // each bench uses a different part of it

use lorekeeper::memory::{EmbeddingConfig, GraphConfig, MemoryConfig};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const DIM: usize = 384;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// The fp32 MiniLM and the ONNX Runtime library that `.ci/setup.sh` installs.
pub fn embedding_config() -> EmbeddingConfig {
    EmbeddingConfig {
        model_dir: Some(root().join("models/all-MiniLM-L6-v2")),
        runtime_library: Some(root().join("models/onnxruntime/libonnxruntime.so")),
        ..Default::default()
    }
}

/// Memory settings for bench libraries: they are filled in bulk and their graph built
/// once, explicitly, so no background rebuild runs while they fill or while we measure.
pub fn bench_memory_config() -> MemoryConfig {
    MemoryConfig {
        embedding: embedding_config(),
        graph: GraphConfig { auto_rebuild: false, ..Default::default() },
        ..Default::default()
    }
}

/// One string field of every line of a JSON-lines file under the repository.
pub fn jsonl(path: &str, field: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(path)).expect("evaluation set");
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v[field].as_str().map(str::to_string))
        .collect()
}

/// Turns of the evaluation conversation, the raw material for synthetic text.
pub fn corpus() -> Vec<String> {
    jsonl("tests/data/memory/conversation.jsonl", "text")
}

/// Clustered unit vectors: real sentence embeddings are far from uniform, and a graph
/// index behaves differently on clustered data than on uniform noise.
pub struct VectorSource {
    centroids: Vec<Vec<f32>>,
}

impl VectorSource {
    pub fn new(rng: &mut fastrand::Rng) -> Self {
        let centroids = (0..256).map(|_| unit((0..DIM).map(|_| gauss(rng)).collect())).collect();
        Self { centroids }
    }
    pub fn next(&self, rng: &mut fastrand::Rng) -> Vec<f32> {
        let c = &self.centroids[rng.usize(..self.centroids.len())];
        unit(c.iter().map(|x| x + 0.08 * gauss(rng)).collect())
    }
}

pub fn gauss(rng: &mut fastrand::Rng) -> f32 {
    // Box–Muller.
    let (u, v) = (rng.f32().max(1e-9), rng.f32());
    (-2.0 * u.ln()).sqrt() * (2.0 * std::f32::consts::PI * v).cos()
}

pub fn unit(v: Vec<f32>) -> Vec<f32> {
    lorekeeper::memory::embedder::normalise(v)
}

/// p50 and p99 in milliseconds.
pub fn percentiles(mut times: Vec<Duration>) -> (f64, f64) {
    times.sort();
    let at = |p: f64| times[((times.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1000.0;
    (at(0.5), at(0.99))
}

/// Add synthetic turns to `bank` until it holds `n` memories, in batches of 5,000 with
/// their vectors from `source` (ids `m0`, `m1`, …, a session every 12 turns, `user` and
/// `Mira` taking turns). Returns how many were added.
pub fn fill_memories(
    bank: &lorekeeper::memory::MemoryBank,
    n: usize,
    rng: &mut fastrand::Rng,
    source: &VectorSource,
    mut text: impl FnMut(&mut fastrand::Rng) -> String,
) -> usize {
    use lorekeeper::memory::{MemoryKind, NewMemory, Scope};
    let start = bank.stats().expect("stats").memories;
    let mut done = start;
    while done < n {
        let batch = (n - done).min(5000);
        let items: Vec<NewMemory> = (0..batch)
            .map(|i| NewMemory {
                id: Some(format!("m{}", done + i)),
                kind: MemoryKind::Turn,
                scope: Scope::world(),
                speaker: Some(if i % 2 == 0 { "user".into() } else { "Mira".into() }),
                text: text(rng),
                session: Some(format!("s{}", (done + i) / 12)),
                time: Some("2024-05-01T12:00:00Z".into()),
                ..Default::default()
            })
            .collect();
        let vectors = (0..batch).map(|_| source.next(rng)).collect();
        bank.add_with_vectors(items, vectors).expect("insert");
        done += batch;
    }
    done - start
}
