//! Identity pipeline orchestration: real waves through the engine on the scripted
//! provider.
//!
//! - `wave2_three_agents_500ms`: the three wave-2 agents each take 500 ms; run in
//!   parallel the wave takes a little over 500 ms, sequentially it would take 1.5 s.
//! - `full_run_seven_instant_agents`: every agent answers at once, so the time is pure
//!   orchestration (prompt rendering, structured validation, store writes, events);
//!   divide by 7 for the overhead per agent.
//!
//! Run: `cargo bench --bench identity`

use criterion::{Criterion, criterion_group, criterion_main};
use lorekeeper::config::{Config, Paths};
use lorekeeper::engine::{self, Command, EngineHandle, Event};
use lorekeeper::identity::schema::{CharacterSeed, Mode};
use lorekeeper::identity::{IdentityCommand, IdentityEvent};
use lorekeeper::llm::{ProviderKind, ProviderProfile};
use std::path::Path;
use std::time::{Duration, Instant};

fn engine_with(script: &str, dir: &Path) -> EngineHandle {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/identity");
    let paths = Paths { config_file: dir.join("config.toml"), library_file: dir.join("lib.sqlite"), log_dir: dir.join("logs") };
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile {
        name: "script".into(),
        kind: ProviderKind::Scripted,
        model: "bench".into(),
        path: Some(data.join(script)),
        ..Default::default()
    });
    config.default_profile = "script".into();
    config.save(&paths.config_file).expect("config");
    engine::start(paths).expect("engine")
}

fn seed() -> CharacterSeed {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/identity/seed.json");
    CharacterSeed::parse(&std::fs::read_to_string(path).expect("seed")).expect("seed parses")
}

/// Run one character to completion; returns (whole run, wave 2 alone).
fn one_run(engine: &EngineHandle) -> (Duration, Duration) {
    let started = Instant::now();
    engine
        .send(Command::Identity(IdentityCommand::Start { seed: seed(), mode: Mode::Fast, profile: None, auto_approve: true, entry_input: None }))
        .expect("send");
    let mut wave2_start = None;
    let mut wave2 = Duration::ZERO;
    loop {
        match engine.events().recv_timeout(Duration::from_secs(30)).expect("event") {
            Event::Identity(IdentityEvent::WaveStarted { wave: 2, .. }) => wave2_start = Some(Instant::now()),
            Event::Identity(IdentityEvent::WaveComplete { wave: 2, .. }) => {
                wave2 = wave2_start.map(|s| s.elapsed()).unwrap_or_default()
            }
            Event::Identity(IdentityEvent::CharacterComplete { .. }) => return (started.elapsed(), wave2),
            Event::Identity(IdentityEvent::Error { message, .. }) => panic!("{message}"),
            _ => {}
        }
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("identity");
    group.sample_size(10).measurement_time(Duration::from_secs(12)).warm_up_time(Duration::from_secs(1));

    let dir = tempfile::tempdir().expect("tempdir");
    let slow = engine_with("slow-script.json", dir.path());
    group.bench_function("wave2_three_agents_500ms", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| one_run(&slow).1).sum())
    });

    let dir = tempfile::tempdir().expect("tempdir");
    let fast = engine_with("script.json", dir.path());
    group.bench_function("full_run_seven_instant_agents", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| one_run(&fast).0).sum())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
