//! Companion packet assembly for a character with 100k memories and 1,000 exchanges of
//! history (SPEC goal: p50 under 10 ms, the LLM excluded).
//!
//!     cargo bench --bench companion -- --quick
//!     LOREKEEPER_BENCH_MEMORIES=10000 cargo bench --bench companion -- --quick
//!
//! Measured: everything between the user's message and the request to the model —
//! chat state and history from the library, lore and memory retrieval (hybrid, 100k
//! memories in the character's scope), proximity from the message vector, budgets and
//! template rendering. The message's embedding is timed on its own (real model), since
//! it depends on the embedder rather than on the library's size. Vectors of the 100k
//! memories are synthetic (clustered unit vectors); their text is realistic. The library
//! is built once into cargo's target `tmp/companion-bench/` and reused.

mod support;

use criterion::{Criterion, criterion_group, criterion_main};
use support::{VectorSource, bench_memory_config, corpus, embedding_config, percentiles};
use lorekeeper::companion::packet::{self, PacketInput};
use lorekeeper::companion::records::{self, ChatTurn};
use lorekeeper::companion::turn;
use lorekeeper::companion::{CompanionConfig, demo};
use lorekeeper::memory::detect::{Proximity, ProximityDetector};
use lorekeeper::memory::{Embedder, MemoryBank, MemoryKind, NewMemory, Scope, SearchFilter, SearchMode, SearchRequest};
use lorekeeper::prompting::PromptTemplates;
use lorekeeper::store::Store;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TURNS: u32 = 1000;

fn memories() -> usize {
    std::env::var("LOREKEEPER_BENCH_MEMORIES").ok().and_then(|s| s.parse().ok()).unwrap_or(100_000)
}

struct Library {
    store: Store,
    bank: Arc<MemoryBank>,
    character: records::CharacterInfo,
    queries: Vec<(String, Vec<f32>)>,
}

/// The demo companion with `n` memories, 40 lore chunks and 1,000 exchanges.
fn library(n: usize) -> Library {
    let mut rng = fastrand::Rng::with_seed(7);
    let source = VectorSource::new(&mut rng);
    let vector = |rng: &mut fastrand::Rng| source.next(rng);
    let corpus = corpus();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("companion-bench");
    std::fs::create_dir_all(&dir).expect("bench dir");
    let path = dir.join(format!("library-{n}.sqlite"));
    let store = Store::open(&path).expect("store");
    demo::ensure(&store).expect("demo");
    let character = store.with(|c| records::resolve_character(c, demo::DEMO_NAME)).expect("character");
    let bank = MemoryBank::open(store.clone(), bench_memory_config()).expect("bank");
    let have = bank.stats().expect("stats").memories;
    if have < n + 40 {
        let started = Instant::now();
        let lore: Vec<NewMemory> = (0..40)
            .map(|i| NewMemory {
                id: Some(format!("lore{i}")),
                kind: MemoryKind::Lore,
                scope: Scope::character(character.lore_slug()),
                text: corpus[i * 7 % corpus.len()].clone(),
                source: Some(format!("lore/characters/ilse-marrow/self.md#{i}")),
                ..Default::default()
            })
            .collect();
        let vectors = (0..lore.len()).map(|_| vector(&mut rng)).collect();
        bank.add_with_vectors(lore, vectors).expect("lore");
        let mut done = 0;
        while done < n {
            let batch = (n - done).min(5000);
            let items: Vec<NewMemory> = (0..batch)
                .map(|i| {
                    let k = done + i;
                    NewMemory {
                        id: Some(format!("m{k}")),
                        kind: if k % 10 == 9 { MemoryKind::Summary } else { MemoryKind::Turn },
                        scope: Scope::character(character.id.clone()),
                        speaker: Some(if k % 2 == 0 { "User".into() } else { character.name.clone() }),
                        text: corpus[rng.usize(..corpus.len())].clone(),
                        session: Some(format!("s{}", k / 40)),
                        time: Some("2026-05-01T12:00:00Z".into()),
                        witnesses: vec![character.name.clone(), "User".into()],
                        ..Default::default()
                    }
                })
                .collect();
            let vectors = (0..batch).map(|_| vector(&mut rng)).collect();
            bank.add_with_vectors(items, vectors).expect("insert");
            done += batch;
        }
        store
            .transaction(|tx| {
                for seq in 1..=TURNS {
                    let at = format!("2026-05-{:02}T{:02}:{:02}:00Z", 1 + seq / 100, (seq / 10) % 24, seq % 60);
                    records::insert_turn(
                        tx,
                        &ChatTurn {
                            id: format!("t{seq}"),
                            character_id: character.id.clone(),
                            seq,
                            session: format!("s{}", seq / 20),
                            user_text: corpus[(seq as usize * 3) % corpus.len()].clone(),
                            reply: corpus[(seq as usize * 3 + 1) % corpus.len()].clone(),
                            at,
                            user_memory_id: Some(format!("m{}", 2 * seq)),
                            reply_memory_id: Some(format!("m{}", 2 * seq + 1)),
                            proximity: Proximity::Remote,
                            packet: Default::default(),
                            hits: Vec::new(),
                            attempts: 1,
                            prompt_tokens: 0,
                            completion_tokens: 0,
                            from_cache: false,
                            elapsed_ms: 0,
                            swipes: Vec::new(),
                            swipe: 0,
                            file: None,
                            user_name: None,
                        },
                    )?;
                }
                Ok(())
            })
            .expect("turns");
        println!("companion-bench: built {n} memories and {TURNS} exchanges in {:.1} s", started.elapsed().as_secs_f64());
    }
    if bank.stats().expect("stats").ann_pending > 0 {
        let started = Instant::now();
        bank.rebuild_ann_waiting().expect("graph");
        println!("companion-bench: HNSW graph over {n} vectors in {:.1} s", started.elapsed().as_secs_f64());
    }
    let queries = (0..200)
        .map(|i| {
            let text = if i % 4 == 0 { format!("Do you remember {}", corpus[rng.usize(..corpus.len())]) } else { corpus[rng.usize(..corpus.len())].clone() };
            (text, vector(&mut rng))
        })
        .collect();
    Library { store, bank, character, queries }
}

fn packet_benches(c: &mut Criterion) {
    let n = memories();
    let lib = library(n);
    let config = CompanionConfig::default();
    let templates = PromptTemplates::shipped().expect("templates");
    let embedder = Embedder::shared(&embedding_config()).ok();
    // Anchors from the real model when it is installed; the message vectors stay synthetic.
    let detector = embedder.as_ref().and_then(|e| ProximityDetector::new(e, 0.45, Proximity::Remote).ok());

    let assemble = |text: &str, vector: &[f32]| {
        let (state, history) = lib
            .store
            .with(|c| Ok((records::load_state(c, &lib.character.id)?, records::recent_turns(c, &lib.character.id, config.history_turns, false)?)))
            .expect("state");
        let mut notes = Vec::new();
        let (lore, memories) = turn::retrieve(&lib.bank, &lib.character, &config, text, Some(vector), &history, &mut notes).expect("retrieve");
        let distance = detector.as_ref().map(|d| d.with_state(state.proximity).observe_vector(vector)).filter(|u| u.changed).map(|u| u.state);
        packet::assemble(
            &templates,
            &config,
            PacketInput {
                character: &lib.character,
                user_name: &config.user_name,
                persona: "",
                greeting: None,
                input: text,
                now: chrono::Utc::now(),
                last_chat_at: state.last_chat_at.as_deref(),
                distance,
                history: &history,
                lore: &lore,
                lore_places: &Default::default(),
                memories: &memories,
                max_context_tokens: 8192,
                reply_tokens: 512,
                retry_note: None,
                notes,
                variables: None,
                author_note: None,
                user_messages: 1,
            },
        )
        .expect("packet")
    };

    let mut times = Vec::new();
    let mut with_bank = 0;
    for (text, vector) in &lib.queries {
        let started = Instant::now();
        let packet = assemble(text, vector);
        times.push(started.elapsed());
        with_bank += usize::from(packet.block("memory_bank").is_some());
    }
    let (p50, p99) = percentiles(times);
    println!(
        "companion-bench: packet assembly at {n} memories / {TURNS} exchanges: p50 {p50:.2} ms, p99 {p99:.2} ms ({} of {} packets with a memory bank)",
        with_bank,
        lib.queries.len()
    );
    // Where the time goes: each retrieval list on its own, for the two searches a
    // packet makes (the character's lore, the character's memories).
    let lore_filter = SearchFilter { scope: Some(Scope::character(lib.character.lore_slug())), kinds: vec![MemoryKind::Lore], ..Default::default() };
    let memory_filter =
        SearchFilter { scope: Some(Scope::character(lib.character.id.clone())), kinds: vec![MemoryKind::Turn, MemoryKind::Summary], ..Default::default() };
    for (name, filter) in [("lore", &lore_filter), ("memories", &memory_filter)] {
        let (mut keyword, mut vector, mut whole) = (Vec::new(), Vec::new(), Vec::new());
        for (text, v) in &lib.queries {
            let started = Instant::now();
            lib.bank.keyword_candidates(text, filter, 100).expect("keyword");
            keyword.push(started.elapsed());
            let started = Instant::now();
            lib.bank.vector_candidates(v, filter, 100).expect("vector");
            vector.push(started.elapsed());
            let request = SearchRequest { query: text.clone(), k: 10, mode: SearchMode::Hybrid, filter: filter.clone() };
            let started = Instant::now();
            lib.bank.search_with_vector(&request, Some(v)).expect("search");
            whole.push(started.elapsed());
        }
        let (k50, _) = percentiles(keyword);
        let (v50, _) = percentiles(vector);
        let (w50, _) = percentiles(whole);
        println!("companion-bench: {name} search p50: keyword list {k50:.2} ms, vector list {v50:.2} ms, whole hybrid search {w50:.2} ms");
    }
    if let Some(e) = &embedder {
        let mut embed = Vec::new();
        for (text, _) in lib.queries.iter().take(100) {
            let started = Instant::now();
            e.embed_query(text).expect("embed");
            embed.push(started.elapsed());
        }
        let (p50, p99) = percentiles(embed);
        println!("companion-bench: message embedding (MiniLM, one query): p50 {p50:.2} ms, p99 {p99:.2} ms");
    }

    let mut group = c.benchmark_group("companion");
    group.sample_size(20).measurement_time(Duration::from_secs(4));
    let mut i = 0;
    group.bench_function(format!("packet_{n}"), |b| {
        b.iter(|| {
            i = (i + 1) % lib.queries.len();
            let (text, vector) = &lib.queries[i];
            assemble(text, vector)
        })
    });
    group.finish();
}

criterion_group!(benches, packet_benches);
criterion_main!(benches);
