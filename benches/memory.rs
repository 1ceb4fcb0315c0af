//! Memory benchmarks: hybrid search latency (query embedding and search apart) at 10k
//! and 100k memories, the HNSW graph against an exact scan and against `hnsw_rs` (build
//! time, query time, recall@10), insert-to-searchable latency, import throughput and
//! embedding throughput (compare with `benches/embed_python.py`).
//!
//!     cargo bench --bench memory                                   # everything
//!     LOREKEEPER_BENCH_GROUPS=ann cargo bench --bench memory       # ann, search, model
//!     LOREKEEPER_BENCH_SIZES=10000 cargo bench --bench memory      # smaller corpus only
//!
//! Text is realistic (recombined turns of the evaluation conversation; queries are the
//! evaluation questions); vectors at 10k/100k are synthetic (clustered unit vectors),
//! because embedding 100k texts would take ~40 minutes on this machine and measures the
//! model, not the index. Libraries are built once into `$CARGO_TARGET_DIR/memory-bench/`
//! (with their HNSW graph persisted) and reused by later runs. The numbers that matter
//! here (p50/p99 over many different queries, recall, one-shot build times) are printed
//! as `memory-bench:` lines; criterion adds steady-state timings of the same calls.

mod support;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use support::{DIM, VectorSource, bench_memory_config, corpus, embedding_config, fill_memories, jsonl, percentiles, root};
use lorekeeper::memory::vectors::{Graph, VectorIndex};
use lorekeeper::memory::{
    Embedder, MemoryBank, MemoryConfig, MemoryKind, NewMemory, Scope, SearchRequest,
};
use lorekeeper::store::Store;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Graph parameters shared by both HNSW libraries, so they are compared like for like:
/// `instant-distance` fixes M = 32 (64 links on layer 0) and we build it with
/// ef_construction 100 (see `vectors::build_ann`).
const HNSW_M: usize = 32;
const EF_CONSTRUCTION: usize = 100;

fn bench_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"));
    target.join("memory-bench")
}

fn sizes() -> Vec<usize> {
    std::env::var("LOREKEEPER_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 100_000])
}

/// Whether a group runs (`LOREKEEPER_BENCH_GROUPS=ann,search,model`; default all).
fn enabled(group: &str) -> bool {
    std::env::var("LOREKEEPER_BENCH_GROUPS").map(|g| g.split(',').any(|x| x.trim() == group)).unwrap_or(true)
}

/// Realistic queries: the evaluation questions.
fn questions() -> Vec<String> {
    jsonl("tests/data/memory/questions.jsonl", "question")
}

/// A plausible turn: halves of two real turns joined.
fn synthetic_text(corpus: &[String], rng: &mut fastrand::Rng) -> String {
    let a = &corpus[rng.usize(..corpus.len())];
    let b = &corpus[rng.usize(..corpus.len())];
    let cut_a = a.char_indices().nth(a.chars().count() / 2).map(|(i, _)| i).unwrap_or(a.len());
    let cut_b = b.char_indices().nth(b.chars().count() / 2).map(|(i, _)| i).unwrap_or(0);
    format!("{}{}", &a[..cut_a], &b[cut_b..])
}

fn time<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let out = f();
    (out, started.elapsed())
}

/// A library of `n` synthetic memories with a persisted HNSW graph (built once).
fn library(n: usize) -> (Arc<MemoryBank>, VectorSource) {
    let mut rng = fastrand::Rng::with_seed(n as u64);
    let source = VectorSource::new(&mut rng);
    let corpus = corpus();
    let dir = bench_dir();
    std::fs::create_dir_all(&dir).expect("bench dir");
    let path = dir.join(format!("library-{n}.sqlite"));
    let store = Store::open(&path).expect("store");
    // Filled the way a library grows: every batch inserted into the graph as it is
    // published (the first build happens at once, over the first batch), saved at the end.
    let mut config = bench_memory_config();
    config.graph = lorekeeper::memory::GraphConfig { auto_rebuild: true, min_vectors: 0, save_after: usize::MAX, ..Default::default() };
    let bank = MemoryBank::open(store, config).expect("bank");
    if bank.stats().expect("stats").memories < n {
        let started = Instant::now();
        fill_memories(&bank, n, &mut rng, &source, |rng| synthetic_text(&corpus, rng));
        bank.wait_for_rebuild();
        let took = started.elapsed().as_secs_f64();
        println!(
            "memory-bench: stored {n} memories (SQLite + FTS5 + vectors + inserted into the graph) in {took:.1} s ({:.0}/s)",
            n as f64 / took
        );
        let (_, saving) = time(|| bank.save_graph().expect("save"));
        println!("memory-bench: library graph over {n} vectors saved in {:.1} s", saving.as_secs_f64());
    }
    let stats = bank.stats().expect("stats");
    if stats.ann_indexed == 0 || stats.ann_pending > n / 100 {
        let (_, took) = time(|| bank.rebuild_ann_waiting().expect("graph"));
        println!("memory-bench: library graph over {n} vectors built and saved in {:.1} s", took.as_secs_f64());
    }
    drop(bank);
    let bank = MemoryBank::open(Store::open(&path).expect("store"), bench_memory_config()).expect("bank");
    (bank, source)
}

/// Hybrid search through the library (SQLite FTS5 + the vector index + re-ranking).
fn search_benches(c: &mut Criterion) {
    if !enabled("search") {
        return;
    }
    let embedder = Embedder::start(&embedding_config()).ok();
    let questions = questions();
    let mut group = c.benchmark_group("search");
    group.sample_size(20).measurement_time(Duration::from_secs(4));
    for n in sizes() {
        let (bank, source) = library(n);
        if let Some(e) = &embedder {
            bank.set_embedder(e.clone());
        }
        let mut rng = fastrand::Rng::with_seed(99);
        // Each question five times, each time with another synthetic vector.
        let runs: Vec<(String, Vec<f32>)> =
            (0..5).flat_map(|_| questions.iter().cloned()).map(|q| (q, source.next(&mut rng))).collect();

        let mut times = Vec::new();
        let mut parts = [Vec::new(), Vec::new()];
        for (q, v) in &runs {
            let (hits, took) = time(|| bank.search_with_vector(&SearchRequest::new(q.clone(), 10), Some(v)).expect("search"));
            times.push(took);
            assert!(!hits.is_empty());
            let ((), kw) = time(|| {
                bank.keyword_candidates(q, &Default::default(), 100).expect("fts");
            });
            let ((), vec) = time(|| {
                bank.vector_candidates(v, &Default::default(), 100).expect("ann");
            });
            parts[0].push(kw);
            parts[1].push(vec);
        }
        let (p50, p99) = percentiles(times);
        let (kw50, kw99) = percentiles(parts[0].clone());
        let (v50, v99) = percentiles(parts[1].clone());
        println!(
            "memory-bench: hybrid search at {n} (query vector given): p50 {p50:.2} ms, p99 {p99:.2} ms over {} queries \
             (k=10, 100 candidates per list); its keyword list alone p50 {kw50:.2} / p99 {kw99:.2} ms, \
             vector list alone p50 {v50:.3} / p99 {v99:.3} ms",
            runs.len()
        );

        if embedder.is_some() {
            // End to end as the companion calls it: strip names, embed the query, search.
            let mut total = Vec::new();
            let mut parts = [Vec::new(), Vec::new(), Vec::new()];
            let e = embedder.as_ref().expect("embedder");
            for q in &questions {
                let (hits, took) = time(|| bank.search(&SearchRequest::new(q.clone(), 10)).expect("search"));
                assert!(!hits.is_empty());
                total.push(took);
                // The same call in parts: embedding, the vector list for a real query
                // vector (far from the synthetic clusters), and the search given it.
                let (v, embed) = time(|| e.embed_query(&bank.vector_query(q).expect("names")).expect("embed"));
                let ((), list) = time(|| {
                    bank.vector_candidates(&v, &Default::default(), 100).expect("ann");
                });
                let ((), given) = time(|| {
                    bank.search_with_vector(&SearchRequest::new(q.clone(), 10), Some(&v)).expect("search");
                });
                parts[0].push(embed);
                parts[1].push(list);
                parts[2].push(given);
            }
            let (p50, p99) = percentiles(total);
            let [embed, list, given] = parts.map(|p| percentiles(p).0);
            println!(
                "memory-bench: hybrid search at {n} end to end (real query embedding + search): p50 {p50:.2} ms, p99 {p99:.2} ms; \
                 in parts (p50): embedding {embed:.2} ms, vector list for the real vector {list:.3} ms, search given it {given:.2} ms"
            );
        }

        let mut i = 0;
        group.bench_with_input(BenchmarkId::new("hybrid", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % runs.len();
                bank.search_with_vector(&SearchRequest::new(runs[i].0.clone(), 10), Some(&runs[i].1)).expect("search")
            })
        });
        group.bench_with_input(BenchmarkId::new("keyword_list", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % runs.len();
                bank.keyword_candidates(&runs[i].0, &Default::default(), 100).expect("fts")
            })
        });
        group.bench_with_input(BenchmarkId::new("vector_list", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % runs.len();
                bank.vector_candidates(&runs[i].1, &Default::default(), 100).expect("ann")
            })
        });

        insert_to_searchable(&bank, &source, n, embedder.is_some());
    }
    group.finish();
}

/// Store one memory, then find it by search: the time until a new memory can be
/// recalled. The fresh memories are removed afterwards so the saved graph still fits.
fn insert_to_searchable(bank: &MemoryBank, source: &VectorSource, n: usize, with_model: bool) {
    let mut rng = fastrand::Rng::with_seed(7);
    let source_name = "bench:fresh";
    let fresh = |id: String, text: &str| NewMemory {
        id: Some(id),
        text: text.into(),
        speaker: Some("Mira".into()),
        source: Some(source_name.into()),
        ..Default::default()
    };
    let mut latencies = Vec::new();
    for j in 0..50 {
        let v = source.next(&mut rng);
        let id = format!("fresh-{n}-{j}");
        let started = Instant::now();
        bank.add_with_vectors(vec![fresh(id.clone(), "a brand new memory")], vec![v.clone()]).expect("insert");
        let hits = bank.vector_candidates(&v, &Default::default(), 1).expect("search");
        latencies.push(started.elapsed());
        assert_eq!(hits.len(), 1);
    }
    let (p50, p99) = percentiles(latencies);
    println!("memory-bench: insert-to-searchable at {n} (vector given; store, then vector search finds it): p50 {p50:.2} ms, p99 {p99:.2} ms");

    if with_model {
        // Distinct sentences (each names its own object), so that "found" means this
        // memory and not one of the other fresh ones.
        const OBJECTS: [&str; 20] = [
            "lantern", "compass", "harpoon", "locket", "spyglass", "anchor", "kettle", "violin", "ledger", "sextant",
            "trowel", "bellows", "thimble", "inkwell", "sickle", "tinderbox", "hourglass", "abacus", "quill", "bugle",
        ];
        let mut latencies = Vec::new();
        let mut found = 0;
        for (j, object) in OBJECTS.iter().enumerate() {
            let text = format!("Mira hid the tarnished {object} under the loose stair by the harbour gate.");
            let id = format!("fresh-model-{n}-{j}");
            let started = Instant::now();
            bank.add(vec![fresh(id.clone(), &text)]).expect("insert");
            let hits = bank.search(&SearchRequest::new(format!("where is the {object}?"), 5)).expect("search");
            latencies.push(started.elapsed());
            found += hits.iter().any(|h| h.id == id) as usize;
        }
        let (p50, p99) = percentiles(latencies);
        println!(
            "memory-bench: insert-to-searchable at {n} with the model (embed + store, then a hybrid search for it): \
             p50 {p50:.2} ms, p99 {p99:.2} ms; found in the top 5 {found}/{}",
            OBJECTS.len()
        );
    }
    bank.remove_source(source_name).expect("clean up");
}

/// The vector index alone, without SQLite: exact scan, our `usearch` graph (inserted one
/// vector at a time, as publish does) and `hnsw_rs` with the same parameters, on the same
/// clustered vectors and queries; then deletes, and the same queries again.
fn ann_benches(c: &mut Criterion) {
    if !enabled("ann") {
        return;
    }
    let mut group = c.benchmark_group("ann");
    group.sample_size(20).measurement_time(Duration::from_secs(3));
    for n in sizes() {
        let mut rng = fastrand::Rng::with_seed(5);
        let source = VectorSource::new(&mut rng);
        let rows: Vec<(i64, Vec<f32>)> = (0..n).map(|i| (i as i64 + 1, source.next(&mut rng))).collect();
        let exact = VectorIndex::new(DIM);
        for (r, v) in &rows {
            exact.push(*r, v);
        }
        let queries: Vec<Vec<f32>> = (0..200).map(|_| source.next(&mut rng)).collect();
        let truth = |index: &VectorIndex| -> Vec<Vec<i64>> {
            queries.iter().map(|q| index.search_exact(q, 10).iter().map(|h| h.0).collect()).collect()
        };
        let recall = |found: &[Vec<i64>], truth: &[Vec<i64>]| {
            let agree: usize = found.iter().zip(truth).map(|(f, t)| f.iter().filter(|r| t.contains(r)).count()).sum();
            agree as f64 / (10 * truth.len()) as f64
        };
        let truth_all = truth(&exact);
        let exact_times: Vec<Duration> = queries.iter().map(|q| time(|| exact.search_exact(q, 10)).1).collect();
        let (e50, e99) = percentiles(exact_times);
        println!("memory-bench: ann at {n}: exact scan top-10 p50 {e50:.3} ms, p99 {e99:.3} ms (recall 1 by definition)");

        // usearch, as publish uses it: inserted in batches on both cores.
        let index = VectorIndex::new(DIM);
        index.set_graph(Graph::new(DIM, 1024).expect("graph"));
        let (_, build) = time(|| {
            for batch in rows.chunks(5000) {
                index.apply(&[], batch);
            }
        });
        let measure = |index: &VectorIndex, truth: &[Vec<i64>]| {
            let mut found = Vec::new();
            let mut times = Vec::new();
            for q in &queries {
                let (hits, took) = time(|| index.search(q, 10, &|_| true));
                times.push(took);
                found.push(hits.iter().map(|h| h.0).collect::<Vec<_>>());
            }
            let (p50, p99) = percentiles(times);
            (p50, p99, recall(&found, truth))
        };
        let (p50, p99, r) = measure(&index, &truth_all);
        println!(
            "memory-bench: ann at {n}: usearch 2.26 (M {}, ef_add {}, ef_search {}) inserted in {:.1} s ({:.0} vectors/s on all cores), \
             query p50 {p50:.3} ms, p99 {p99:.3} ms, recall@10 {r:.3}",
            lorekeeper::memory::vectors::CONNECTIVITY,
            lorekeeper::memory::vectors::EXPANSION_ADD,
            lorekeeper::memory::vectors::EXPANSION_SEARCH,
            build.as_secs_f64(),
            n as f64 / build.as_secs_f64()
        );
        // One at a time on one thread (a chat turn's publish).
        let single: Vec<(i64, Vec<f32>)> = (0..500).map(|i| (n as i64 + 10 + i, source.next(&mut rng))).collect();
        let (_, one) = time(|| {
            for row in &single {
                index.apply(&[], std::slice::from_ref(row));
            }
        });
        // Delete a tenth (every tenth row) and the 500: no rebuild, the same queries.
        let gone: Vec<i64> = rows.iter().step_by(10).map(|r| r.0).chain(single.iter().map(|r| r.0)).collect();
        let (_, deleting) = time(|| index.apply(&gone, &[]));
        for r in &gone {
            exact.apply(std::slice::from_ref(r), &[]);
        }
        let (p50d, p99d, rd) = measure(&index, &truth(&exact));
        println!(
            "memory-bench: ann at {n}: usearch single inserts {:.3} ms each (500, one thread); deleted {} in {:.1} ms; \
             after the deletes query p50 {p50d:.3} ms, p99 {p99d:.3} ms, recall@10 {rd:.3} (vacant nodes {})",
            one.as_secs_f64() * 1000.0 / single.len() as f64,
            gone.len(),
            deleting.as_secs_f64() * 1000.0,
            index.vacant()
        );

        // hnsw_rs with the same M, ef_construction and ef_search (no deletes: not measured).
        use hnsw_rs::prelude::{DistDot, Hnsw};
        let (hnsw, build) = time(|| {
            let hnsw = Hnsw::<f32, DistDot>::new(HNSW_M, n, 16, EF_CONSTRUCTION, DistDot {});
            let refs: Vec<(&[f32], usize)> = rows.iter().map(|(r, v)| (v.as_slice(), *r as usize)).collect();
            hnsw.parallel_insert_slice(&refs);
            hnsw
        });
        let mut hnsw = hnsw;
        hnsw.set_searching_mode(true);
        let mut found = Vec::new();
        let mut times = Vec::new();
        for q in &queries {
            let (hits, took) = time(|| hnsw.search(q, 10, 64));
            times.push(took);
            found.push(hits.iter().map(|h| h.d_id as i64).collect::<Vec<_>>());
        }
        let (p50, p99) = percentiles(times);
        println!(
            "memory-bench: ann at {n}: hnsw_rs 0.3.5 (M {HNSW_M}, ef_construction {EF_CONSTRUCTION}, ef_search 64) built in {:.1} s \
             ({:.0} vectors/s on all cores), query p50 {p50:.3} ms, p99 {p99:.3} ms, recall@10 {:.3}",
            build.as_secs_f64(),
            n as f64 / build.as_secs_f64(),
            recall(&found, &truth_all)
        );

        let mut i = 0;
        group.bench_with_input(BenchmarkId::new("usearch_top10", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % queries.len();
                index.search(&queries[i], 10, &|_| true)
            })
        });
        group.bench_with_input(BenchmarkId::new("hnsw_rs_top10", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % queries.len();
                hnsw.search(&queries[i], 10, 64)
            })
        });
    }
    group.finish();
}

/// Scale without rebuilds, through the bank: open a saved library (its graph loaded, not
/// built), insert N new memories and delete M, search, save. Asserts that no full build
/// happened. `LOREKEEPER_BENCH_SIZES=1000000 LOREKEEPER_BENCH_GROUPS=scale`.
fn scale_benches(_c: &mut Criterion) {
    if !enabled("scale") {
        return;
    }
    let questions = questions();
    for n in sizes() {
        drop(library(n));
        let path = bench_dir().join(format!("library-{n}.sqlite"));
        let (bank, open) = time(|| MemoryBank::open(Store::open(&path).expect("store"), bench_memory_config()).expect("bank"));
        let stats = bank.stats().expect("stats");
        println!(
            "memory-bench: scale at {n}: opened in {:.2} s, graph loaded from its file: {}, builds {}, {} in the graph, {} scanned exactly",
            open.as_secs_f64(),
            stats.graph_loaded,
            stats.graph_builds,
            stats.ann_indexed,
            stats.ann_pending
        );
        assert!(stats.graph_loaded && stats.graph_builds == 0, "the saved graph was not used");
        let mut rng = fastrand::Rng::with_seed(n as u64 ^ 0x5ca1e);
        let source = VectorSource::new(&mut fastrand::Rng::with_seed(n as u64));
        let corpus = corpus();
        let inserts = 10_000.min(n / 10).max(100);
        let mut one = Vec::new();
        let (_, inserting) = time(|| {
            for start in (0..inserts).step_by(100) {
                let items: Vec<NewMemory> = (start..(start + 100).min(inserts))
                    .map(|i| NewMemory {
                        id: Some(format!("scale-{i}")),
                        kind: MemoryKind::Turn,
                        scope: Scope::world(),
                        speaker: Some("Mira".into()),
                        text: synthetic_text(&corpus, &mut rng),
                        source: Some("bench:scale".into()),
                        session: Some(format!("scale{}", i / 12)),
                        ..Default::default()
                    })
                    .collect();
                let vectors = items.iter().map(|_| source.next(&mut rng)).collect();
                let (_, took) = time(|| bank.add_with_vectors(items, vectors).expect("insert"));
                one.push(took);
            }
        });
        let (b50, b99) = percentiles(one);
        // Delete as many old memories (the first `inserts` of the library).
        let ids: Vec<String> = (0..inserts).map(|i| format!("m{i}")).collect();
        let (removed, deleting) = time(|| {
            let write = bank.store().transaction(|tx| lorekeeper::memory::remove_ids(tx, &ids)).expect("delete");
            let removed = write.removed();
            bank.publish(write);
            removed
        });
        let stats = bank.stats().expect("stats");
        println!(
            "memory-bench: scale at {n}: inserted {inserts} memories in {:.2} s ({:.0}/s; batch of 100 p50 {b50:.1} ms, p99 {b99:.1} ms, \
             SQLite + FTS5 + graph), deleted {removed} in {:.2} s; full builds {}, a build running: {}, {} in the graph, {} scanned \
             exactly, {} vacant nodes",
            inserting.as_secs_f64(),
            inserts as f64 / inserting.as_secs_f64(),
            deleting.as_secs_f64(),
            stats.graph_builds,
            stats.rebuilding,
            stats.ann_indexed,
            stats.ann_pending,
            stats.ann_removed
        );
        assert_eq!(stats.graph_builds, 0, "a full build ran");
        // Search after the changes, and the vector list's recall against an exact scan.
        let runs: Vec<(String, Vec<f32>)> =
            (0..5).flat_map(|_| questions.iter().cloned()).map(|q| (q, source.next(&mut rng))).collect();
        let mut times = Vec::new();
        // The same query with the two lists built one after the other, in alternating
        // order, so the comparison sees the same machine and the same background save.
        let mut in_turn = Vec::new();
        let (parallel, sequential) = {
            let mut c = bank.config();
            c.retrieval.parallel_lists_from = 0;
            let mut s = c.clone();
            s.retrieval.parallel_lists_from = usize::MAX;
            (c, s)
        };
        let mut parts = [Vec::new(), Vec::new()];
        let mut agree = 0;
        for (k, (q, v)) in runs.iter().enumerate() {
            let request = SearchRequest::new(q.clone(), 10);
            let measure = |config: &MemoryConfig| {
                bank.set_config(config.clone());
                time(|| bank.search_with_vector(&request, Some(v)).expect("search"))
            };
            let ((hits, took), (alone, took_in_turn)) = if k % 2 == 0 {
                let a = measure(&parallel);
                (a, measure(&sequential))
            } else {
                let b = measure(&sequential);
                (measure(&parallel), b)
            };
            assert!(!hits.is_empty());
            assert_eq!(hits.iter().map(|h| &h.id).collect::<Vec<_>>(), alone.iter().map(|h| &h.id).collect::<Vec<_>>());
            times.push(took);
            in_turn.push(took_in_turn);
            parts[0].push(time(|| bank.keyword_candidates(q, &Default::default(), 100).expect("fts")).1);
            let (found, took) = time(|| bank.vector_candidates(v, &Default::default(), 10).expect("ann"));
            parts[1].push(took);
            if k < 100 {
                let truth: Vec<i64> = bank.vector_exact(v, 10).iter().map(|h| h.0).collect();
                agree += found.iter().filter(|h| truth.contains(&h.0)).count();
            }
        }
        bank.set_config(parallel);
        let (p50, p99) = percentiles(times);
        let (t50, t99) = percentiles(in_turn);
        let (kw50, kw99) = percentiles(parts[0].clone());
        let (v50, v99) = percentiles(parts[1].clone());
        println!(
            "memory-bench: scale at {n}: after the changes hybrid search p50 {p50:.2} ms, p99 {p99:.2} ms over {} queries \
             (keyword list p50 {kw50:.2} / p99 {kw99:.2} ms, vector list p50 {v50:.3} / p99 {v99:.3} ms, vector recall@10 {:.3}); \
             the same searches with the two lists in turn p50 {t50:.2} ms, p99 {t99:.2} ms ({:.2}× / {:.2}×)",
            runs.len(),
            agree as f64 / 1000.0,
            t50 / p50,
            t99 / p99
        );
        let (saved, saving) = time(|| bank.save_graph().expect("save"));
        println!("memory-bench: scale at {n}: graph of {} vectors saved in {:.2} s", saved.unwrap_or(0), saving.as_secs_f64());
        // Put the library back as it was for the next run: the fresh memories go, the
        // deleted ones come back (vectors given, as when it was filled).
        bank.remove_source("bench:scale").expect("clean up");
        for start in (0..inserts).step_by(1000) {
            let items: Vec<NewMemory> = (start..(start + 1000).min(inserts))
                .map(|i| NewMemory {
                    id: Some(format!("m{i}")),
                    kind: MemoryKind::Turn,
                    scope: Scope::world(),
                    speaker: Some(if i % 2 == 0 { "user".into() } else { "Mira".into() }),
                    text: synthetic_text(&corpus, &mut rng),
                    session: Some(format!("s{}", i / 12)),
                    time: Some("2024-05-01T12:00:00Z".into()),
                    ..Default::default()
                })
                .collect();
            let vectors = items.iter().map(|_| source.next(&mut rng)).collect();
            bank.add_with_vectors(items, vectors).expect("restore");
        }
        bank.save_graph().expect("save");
    }
}

/// The model for a group that needs one, or `None` (said why) when the group is not
/// enabled or the model is not installed.
fn group_embedder(group: &str) -> Option<Embedder> {
    if !enabled(group) {
        return None;
    }
    let started = Embedder::start(&embedding_config());
    if started.is_err() {
        println!("memory-bench: model not installed (bash .ci/setup.sh); skipping the {group} benches");
    }
    started.ok()
}

/// The vector graph on real sentence embeddings, not the synthetic clusters the other
/// groups use: `n` turns made of halves of two real turns (all five evaluation
/// conversations) embedded with MiniLM, the evaluation questions as queries, recall@10
/// against the exact scan and latency for several ef_search values. The embeddings are
/// kept in target/memory-bench/real-N.f32, so only the first run pays for them.
/// `LOREKEEPER_BENCH_GROUPS=real LOREKEEPER_BENCH_SIZES=100000`.
fn real_benches(_c: &mut Criterion) {
    let Some(embedder) = group_embedder("real") else { return };
    let data = root().join("tests/data/memory");
    let mut folders = vec![data.clone()];
    folders.extend(["friends", "ranger", "companion", "station"].iter().map(|s| data.join("sets").join(s)));
    let read = |file: &str, field: &str| -> Vec<String> {
        folders
            .iter()
            .flat_map(|f| {
                let text = std::fs::read_to_string(f.join(file)).expect("evaluation set");
                text.lines()
                    .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                    .filter_map(|v| v[field].as_str().map(str::to_string))
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let turns = read("conversation.jsonl", "text");
    let questions: Vec<Vec<f32>> = read("questions.jsonl", "question").iter().map(|q| embedder.embed_query(q).expect("embed")).collect();
    for n in sizes() {
        let cache = bench_dir().join(format!("real-{n}.f32"));
        let vectors: Vec<Vec<f32>> = match std::fs::read(&cache) {
            Ok(bytes) if bytes.len() == n * DIM * 4 => bytes
                .chunks_exact(DIM * 4)
                .map(|c| c.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
                .collect(),
            _ => {
                let mut rng = fastrand::Rng::with_seed(21);
                let texts: Vec<String> = (0..n).map(|_| synthetic_text(&turns, &mut rng)).collect();
                let (vectors, took) = time(|| {
                    texts.chunks(4096).flat_map(|chunk| embedder.embed(chunk.to_vec()).expect("embed")).collect::<Vec<_>>()
                });
                println!("memory-bench: real at {n}: embedded {n} turns in {:.1} s", took.as_secs_f64());
                let bytes: Vec<u8> = vectors.iter().flatten().flat_map(|x| x.to_le_bytes()).collect();
                std::fs::create_dir_all(bench_dir()).expect("bench dir");
                std::fs::write(&cache, bytes).expect("cache");
                vectors
            }
        };
        let rows: Vec<(i64, Vec<f32>)> = vectors.into_iter().enumerate().map(|(i, v)| (i as i64 + 1, v)).collect();
        let exact = VectorIndex::new(DIM);
        for (r, v) in &rows {
            exact.push(*r, v);
        }
        let exact_hits: Vec<Vec<(i64, f32)>> = questions.iter().map(|q| exact.search_exact(q, 10)).collect();
        let truth: Vec<Vec<i64>> = exact_hits.iter().map(|h| h.iter().map(|x| x.0).collect()).collect();
        // Turns made of shared halves come in near-twins: a hit as close as the exact
        // 10th (within 0.001) is as good an answer, and is counted apart.
        let tenth: Vec<f32> = exact_hits.iter().map(|h| h.last().map(|x| x.1).unwrap_or(0.0)).collect();
        let done = std::sync::atomic::AtomicUsize::new(0);
        let (graph, build) = time(|| lorekeeper::memory::vectors::build_graph(DIM, &rows, 2, &done).expect("graph"));
        println!(
            "memory-bench: real at {n}: graph built in {:.1} s on 2 threads (M {}, ef_add {})",
            build.as_secs_f64(),
            lorekeeper::memory::vectors::CONNECTIVITY,
            lorekeeper::memory::vectors::EXPANSION_ADD
        );
        for ef in [16, 32, 64, 128, 256] {
            graph.set_expansion_search(ef);
            let mut times = Vec::new();
            let (mut agree, mut as_close) = (0, 0);
            for _ in 0..3 {
                for ((q, t), floor) in questions.iter().zip(&truth).zip(&tenth) {
                    let (hits, took) = time(|| graph.search(q, 10, &|_| true));
                    times.push(took);
                    agree += hits.iter().filter(|h| t.contains(&h.0)).count();
                    as_close += hits.iter().filter(|h| t.contains(&h.0) || h.1 >= floor - 0.001).count();
                }
            }
            let (p50, p99) = percentiles(times);
            println!(
                "memory-bench: real at {n}: ef_search {ef}: recall@10 {:.3} (counting hits as close as the 10th: {:.3}), \
                 query p50 {p50:.3} ms, p99 {p99:.3} ms ({} queries x 3)",
                agree as f64 / (30 * questions.len()) as f64,
                as_close as f64 / (30 * questions.len()) as f64,
                questions.len()
            );
        }
        graph.set_expansion_search(lorekeeper::memory::vectors::EXPANSION_SEARCH);
    }
}

/// Real model: query embedding latency, embedding throughput at batch 32 and import
/// throughput of real turns.
fn model_benches(c: &mut Criterion) {
    let Some(embedder) = group_embedder("model") else { return };
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
        "memory-bench: embedding throughput (fp32 MiniLM, batch 32, one batch a call, {} threads): {per_second:.1} sentences/s",
        embedding_config().threads
    );

    // One query at a time, as a search embeds it.
    let times: Vec<Duration> = questions().iter().map(|q| time(|| embedder.embed_query(q).expect("embed")).1).collect();
    let (p50, p99) = percentiles(times);
    println!("memory-bench: query embedding (one question, fp32 MiniLM): p50 {p50:.2} ms, p99 {p99:.2} ms");

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

criterion_group!(benches, ann_benches, search_benches, scale_benches, real_benches, model_benches);
criterion_main!(benches);
