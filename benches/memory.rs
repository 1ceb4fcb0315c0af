//! Memory benchmarks: hybrid search latency at 10k and 100k memories, HNSW against an
//! exact scan (speed and recall@10), insert-to-searchable latency, import throughput
//! and embedding throughput (compare with `benches/embed_python.py`).
//!
//!     cargo bench --bench memory -- --quick            # everything
//!     cargo bench --bench memory -- --quick search     # one group
//!     LOREKEEPER_BENCH_SIZES=10000 cargo bench ...     # smaller corpus only
//!
//! Text is realistic (recombined turns of the evaluation conversation); vectors at
//! 10k/100k are synthetic (clustered unit vectors), because embedding 100k texts would
//! take ~15 minutes on this machine and measures the model, not the index. Libraries
//! are built once into `target/memory-bench/` (with their HNSW graph persisted) and
//! reused by later runs. Numbers that criterion does not give (p50/p99 over many
//! queries, ANN recall) are printed as `memory-bench:` lines.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use lorekeeper::memory::vectors::VectorIndex;
use lorekeeper::memory::{
    Embedder, EmbeddingConfig, MemoryBank, MemoryConfig, MemoryKind, NewMemory, Scope, SearchRequest,
};
use lorekeeper::store::Store;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DIM: usize = 384;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn embedding_config() -> EmbeddingConfig {
    EmbeddingConfig {
        model_dir: Some(root().join("models/all-MiniLM-L6-v2")),
        runtime_library: Some(root().join("models/onnxruntime/libonnxruntime.so")),
        ..Default::default()
    }
}

fn sizes() -> Vec<usize> {
    std::env::var("LOREKEEPER_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 100_000])
}

/// Sentences of the evaluation conversation, the raw material for synthetic text.
fn corpus() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("tests/data/memory/conversation.jsonl")).expect("evaluation set");
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["text"].as_str().map(str::to_string))
        .collect()
}

/// A plausible turn: halves of two real turns joined.
fn synthetic_text(corpus: &[String], rng: &mut fastrand::Rng) -> String {
    let a = &corpus[rng.usize(..corpus.len())];
    let b = &corpus[rng.usize(..corpus.len())];
    let cut_a = a.char_indices().nth(a.chars().count() / 2).map(|(i, _)| i).unwrap_or(a.len());
    let cut_b = b.char_indices().nth(b.chars().count() / 2).map(|(i, _)| i).unwrap_or(0);
    format!("{}{}", &a[..cut_a], &b[cut_b..])
}

/// Clustered unit vectors: real sentence embeddings are far from uniform, and a graph
/// index behaves differently on clustered data than on uniform noise.
struct VectorSource {
    centroids: Vec<Vec<f32>>,
}

impl VectorSource {
    fn new(rng: &mut fastrand::Rng) -> Self {
        let centroids = (0..256).map(|_| unit((0..DIM).map(|_| gauss(rng)).collect())).collect();
        Self { centroids }
    }
    fn next(&self, rng: &mut fastrand::Rng) -> Vec<f32> {
        let c = &self.centroids[rng.usize(..self.centroids.len())];
        unit(c.iter().map(|x| x + 0.08 * gauss(rng)).collect())
    }
}

fn gauss(rng: &mut fastrand::Rng) -> f32 {
    // Box–Muller.
    let (u, v) = (rng.f32().max(1e-9), rng.f32());
    (-2.0 * u.ln()).sqrt() * (2.0 * std::f32::consts::PI * v).cos()
}

fn unit(v: Vec<f32>) -> Vec<f32> {
    lorekeeper::memory::embedder::normalise(v)
}

/// A library of `n` synthetic memories with a persisted HNSW graph (built once).
fn library(n: usize) -> (Arc<MemoryBank>, VectorSource, Vec<String>) {
    let mut rng = fastrand::Rng::with_seed(n as u64);
    let source = VectorSource::new(&mut rng);
    let corpus = corpus();
    let dir = root().join("target/memory-bench");
    std::fs::create_dir_all(&dir).expect("bench dir");
    let path = dir.join(format!("library-{n}.sqlite"));
    let fresh = !path.exists();
    let store = Store::open(&path).expect("store");
    let bank = MemoryBank::open(store, MemoryConfig { embedding: embedding_config(), ..Default::default() }).expect("bank");
    if fresh || bank.stats().expect("stats").memories < n {
        let started = Instant::now();
        let mut done = bank.stats().expect("stats").memories;
        while done < n {
            let batch = (n - done).min(5000);
            let items: Vec<NewMemory> = (0..batch)
                .map(|i| NewMemory {
                    id: Some(format!("m{}", done + i)),
                    kind: MemoryKind::Turn,
                    scope: Scope::world(),
                    speaker: Some(if i % 2 == 0 { "user".into() } else { "Mira".into() }),
                    text: synthetic_text(&corpus, &mut rng),
                    session: Some(format!("s{}", (done + i) / 12)),
                    time: Some("2024-05-01T12:00:00Z".into()),
                    ..Default::default()
                })
                .collect();
            let vectors = (0..batch).map(|_| source.next(&mut rng)).collect();
            bank.add_with_vectors(items, vectors).expect("insert");
            done += batch;
        }
        println!("memory-bench: built {n} memories in {:.1} s", started.elapsed().as_secs_f64());
    }
    if bank.stats().expect("stats").ann_pending > 0 {
        let started = Instant::now();
        bank.rebuild_ann().expect("graph");
        println!("memory-bench: HNSW graph over {n} vectors built in {:.1} s", started.elapsed().as_secs_f64());
    }
    let queries: Vec<String> = (0..200).map(|_| synthetic_text(&corpus, &mut rng)).collect();
    (bank, source, queries)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

fn search_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("search");
    group.sample_size(20).measurement_time(Duration::from_secs(4));
    for n in sizes() {
        let (bank, source, queries) = library(n);
        let mut rng = fastrand::Rng::with_seed(99);
        let qvecs: Vec<Vec<f32>> = queries.iter().map(|_| source.next(&mut rng)).collect();

        // p50 / p99 of hybrid search over 200 different queries.
        let mut times = Vec::new();
        for (q, v) in queries.iter().zip(&qvecs) {
            let started = Instant::now();
            let hits = bank.search_with_vector(&SearchRequest::new(q.clone(), 10), Some(v)).expect("search");
            times.push(started.elapsed());
            assert!(!hits.is_empty());
        }
        times.sort();
        println!(
            "memory-bench: hybrid search at {n}: p50 {:.2} ms, p99 {:.2} ms (k=10, 100 candidates per list)",
            percentile(&times, 0.5),
            percentile(&times, 0.99)
        );

        // ANN recall@10 against the exact scan.
        let mut agree = 0;
        for v in &qvecs {
            let exact: Vec<i64> = bank.vector_exact(v, 10).iter().map(|h| h.0).collect();
            let ann = bank.vector_candidates(v, &Default::default(), 10).expect("ann");
            agree += ann.iter().filter(|h| exact.contains(&h.0)).count();
        }
        println!("memory-bench: HNSW recall@10 vs exact at {n}: {:.3}", agree as f64 / (10.0 * qvecs.len() as f64));

        let mut i = 0;
        group.bench_with_input(BenchmarkId::new("hybrid", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % queries.len();
                bank.search_with_vector(&SearchRequest::new(queries[i].clone(), 10), Some(&qvecs[i])).expect("search")
            })
        });
        group.bench_with_input(BenchmarkId::new("vector_hnsw", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % qvecs.len();
                bank.vector_candidates(&qvecs[i], &Default::default(), 10).expect("ann")
            })
        });
        group.bench_with_input(BenchmarkId::new("vector_exact", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % qvecs.len();
                bank.vector_exact(&qvecs[i], 10)
            })
        });
        group.bench_with_input(BenchmarkId::new("keyword", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % queries.len();
                bank.keyword_candidates(&queries[i], &Default::default(), 100).expect("fts")
            })
        });

        // Insert-to-searchable: store one memory, then find it by vector search.
        let mut latencies = Vec::new();
        for j in 0..50 {
            let v = source.next(&mut rng);
            let id = format!("fresh-{n}-{j}-{}", fastrand::u64(..));
            let started = Instant::now();
            bank.add_with_vectors(
                vec![NewMemory { id: Some(id.clone()), text: "a brand new memory".into(), ..Default::default() }],
                vec![v.clone()],
            )
            .expect("insert");
            let hits = bank.vector_candidates(&v, &Default::default(), 1).expect("search");
            latencies.push(started.elapsed());
            assert_eq!(hits.len(), 1);
        }
        latencies.sort();
        println!(
            "memory-bench: insert-to-searchable at {n}: p50 {:.2} ms, p99 {:.2} ms",
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99)
        );
    }
    group.finish();
}

/// Exact scan over an in-memory index alone (no SQLite), the SIMD baseline.
fn scan_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("scan");
    group.sample_size(20).measurement_time(Duration::from_secs(3));
    let mut rng = fastrand::Rng::with_seed(5);
    let source = VectorSource::new(&mut rng);
    for n in [10_000usize, 100_000] {
        let mut index = VectorIndex::new(DIM);
        for i in 0..n {
            index.push(i as i64, &source.next(&mut rng));
        }
        let q = source.next(&mut rng);
        group.bench_with_input(BenchmarkId::new("exact_top10", n), &n, |b, _| b.iter(|| index.search_exact(&q, 10, &|_| true)));
    }
    group.finish();
}

/// Real model: embedding throughput at batch 32 and import throughput of real turns.
fn model_benches(c: &mut Criterion) {
    let Ok(embedder) = Embedder::start(&embedding_config()) else {
        println!("memory-bench: model not installed (bash .ci/setup.sh); skipping model benches");
        return;
    };
    let corpus = corpus();
    let texts: Vec<String> = corpus.iter().take(256).cloned().collect();
    // Warm up, then time whole passes over 256 sentences in batches of 32.
    embedder.embed(texts[..32].to_vec()).expect("embed");
    let started = Instant::now();
    let passes = 3;
    for _ in 0..passes {
        for chunk in texts.chunks(32) {
            embedder.embed(chunk.to_vec()).expect("embed");
        }
    }
    let per_second = (passes * texts.len()) as f64 / started.elapsed().as_secs_f64();
    println!(
        "memory-bench: embedding throughput (fp32 MiniLM, batch 32, {} threads): {per_second:.1} sentences/s",
        embedding_config().threads
    );

    let mut group = c.benchmark_group("model");
    group.sample_size(10).measurement_time(Duration::from_secs(5));
    group.bench_function("embed_batch32", |b| b.iter(|| embedder.embed(texts[..32].to_vec()).expect("embed")));
    group.finish();

    // Import throughput: the evaluation conversation through the whole write path
    // (context windows, embedding, SQLite + FTS5 + vectors, one transaction per batch).
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path().join("lib.sqlite")).expect("store");
    let bank = MemoryBank::open(store, MemoryConfig { embedding: embedding_config(), ..Default::default() }).expect("bank");
    bank.set_embedder(embedder);
    let started = Instant::now();
    let summary = lorekeeper::memory::import_file(&bank, &root().join("tests/data/memory/conversation.jsonl"), |_, _| {});
    let summary = summary.expect("import");
    println!(
        "memory-bench: import of {} real turns: {:.1} turns/s ({:.1} s)",
        summary.imported,
        summary.imported as f64 / started.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

criterion_group!(benches, scan_benches, search_benches, model_benches);
criterion_main!(benches);
