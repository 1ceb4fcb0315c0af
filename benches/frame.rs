//! Frame time of the real workbench while a round streams, on a library with 100,000
//! memories (issue #17 item 8: "never waits"; goal p99 < 8 ms).
//!
//! The real `WorkbenchApp` runs headless in egui_kittest on the *Play a scene* layout
//! (Scene, Budgets, Injected memories, Prompt, Event log all drawn every frame) over a
//! library filled with 100k memories (real SQLite + FTS5 + vectors, as the memory
//! benchmark fills it). Rounds of the demo scene are played one after another by the
//! shipped demo script, streamed at a steady rate (4 characters every 15 ms), and every
//! frame is timed: the app's own work (events, layout, drawing commands) and egui's
//! tessellation of what it drew. The thread's CPU time is reported beside the wall time,
//! since the engine's threads share the machine's two cores with the frame.
//!
//! `cargo bench --bench frame` (LOREKEEPER_FRAME_SECONDS, default 30; LOREKEEPER_FRAME_MEMORIES,
//! default 100000).

mod support;

use egui_kittest::Harness;
use lorekeeper::config::{Config, Paths};
use lorekeeper::memory::MemoryBank;
use lorekeeper::scene::SceneCommand;
use lorekeeper::store::Store;
use lorekeeper::ui::WorkbenchApp;
use lorekeeper::ui::layout::NamedLayout;
use std::time::{Duration, Instant};
use support::{VectorSource, bench_memory_config, corpus, fill_memories, percentiles, root};

/// The demo script with every streamed reply paced: 4 characters every 15 ms.
fn paced_script(dir: &std::path::Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(root().join("assets/demo-script.json")).expect("demo script");
    let mut script: serde_json::Value = serde_json::from_str(&text).expect("demo script is JSON");
    fn pace(reply: &mut serde_json::Value) {
        match reply {
            serde_json::Value::String(s) => {
                *reply = serde_json::json!({ "text": s.clone(), "chunk_chars": 4, "chunk_delay_ms": 15 });
            }
            serde_json::Value::Object(o) if o.contains_key("text") => {
                o.insert("chunk_chars".into(), 4.into());
                o.insert("chunk_delay_ms".into(), 15.into());
            }
            _ => {}
        }
    }
    if let Some(rules) = script["rules"].as_array_mut() {
        for rule in rules {
            if let Some(reply) = rule.get_mut("reply") {
                pace(reply);
            }
            if let Some(replies) = rule.get_mut("replies").and_then(|r| r.as_array_mut()) {
                replies.iter_mut().for_each(pace);
            }
        }
    }
    if let Some(default) = script.get_mut("default") {
        pace(default);
    }
    let path = dir.join("paced-demo-script.json");
    std::fs::write(&path, serde_json::to_string(&script).expect("script")).expect("write script");
    path
}

/// A library holding `n` memories (kept between runs under target/, like the memory
/// benchmark's), with its graph built.
fn library(n: usize) -> std::path::PathBuf {
    let dir = root().join("target/frame-bench");
    std::fs::create_dir_all(&dir).expect("bench dir");
    let path = dir.join(format!("library-{n}.sqlite"));
    let store = Store::open(&path).expect("store");
    let bank = MemoryBank::open(store, bench_memory_config()).expect("bank");
    let mut rng = fastrand::Rng::with_seed(7);
    let source = VectorSource::new(&mut rng);
    let corpus = corpus();
    if bank.stats().expect("stats").memories < n {
        let started = Instant::now();
        fill_memories(&bank, n, &mut rng, &source, |rng| {
            (0..3).map(|_| corpus[rng.usize(..corpus.len())].as_str()).collect::<Vec<_>>().join(" ")
        });
        println!("frame-bench: stored {n} memories in {:.1} s", started.elapsed().as_secs_f64());
    }
    let stats = bank.stats().expect("stats");
    if stats.ann_indexed == 0 || stats.ann_pending > n / 100 {
        let started = Instant::now();
        bank.rebuild_ann_waiting().expect("graph");
        println!("frame-bench: graph over {n} vectors built in {:.1} s", started.elapsed().as_secs_f64());
    }
    path
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the timespec we hand it.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn main() {
    let seconds: u64 = std::env::var("LOREKEEPER_FRAME_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    let memories: usize = std::env::var("LOREKEEPER_FRAME_MEMORIES").ok().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let work = tempfile::tempdir().expect("tempdir");
    let library_file = work.path().join("library.sqlite");
    std::fs::copy(library(memories), &library_file).expect("copy the library");
    let mut config = Config::default();
    let mut demo = lorekeeper::config::demo_profile();
    demo.path = Some(paced_script(work.path()));
    config.upsert_profile(demo);
    config.default_profile = "demo".into();
    config.memory = bench_memory_config();
    let paths = Paths { config_file: work.path().join("config.toml"), library_file, log_dir: work.path().join("logs") };
    config.save(&paths.config_file).expect("config");
    let engine = lorekeeper::engine::start(paths).expect("engine");
    let scene = lorekeeper::scene::demo::ensure(&engine.context().store).expect("demo").expect("the demo scene");
    let mut harness = Harness::builder().with_size([1600.0, 1000.0]).build_eframe(move |cc| WorkbenchApp::new(&cc.egui_ctx, engine));
    harness.state_mut().use_layout(NamedLayout::PlayScene);
    harness.state_mut().open_scene(scene.clone());
    // Settle: the first frames load fonts and the panels' first answers.
    for _ in 0..60 {
        harness.step();
        std::thread::sleep(Duration::from_millis(5));
    }

    let play = |app: &WorkbenchApp, n: u32| {
        app.engine()
            .send(lorekeeper::engine::Command::Scene(SceneCommand::Round {
                scene: scene.clone(),
                input: Some(format!("I light lamp number {n} and listen.")),
                force: Vec::new(),
                review: false,
            }))
            .expect("send");
    };
    let mut rounds = 0u32;
    play(harness.state(), rounds);
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    let mut streaming_frames = 0usize;
    let started = Instant::now();
    let mut was_live = false;
    while started.elapsed() < Duration::from_secs(seconds) {
        let (t0, c0) = (Instant::now(), thread_cpu());
        harness.step();
        let shapes = harness.output().shapes.clone();
        let ppp = harness.ctx.pixels_per_point();
        let _meshes = harness.ctx.tessellate(shapes, ppp);
        wall.push(t0.elapsed());
        cpu.push(thread_cpu().saturating_sub(c0));
        let live = harness.state().scene().live().is_some();
        streaming_frames += usize::from(live);
        if was_live && !live {
            rounds += 1;
            play(harness.state(), rounds);
        }
        was_live = live;
        // A window repaints on each event; 4 ms between frames is a 250 Hz ceiling.
        std::thread::sleep(Duration::from_millis(4));
    }
    let frames = wall.len();
    let (w50, w99) = percentiles(wall);
    let (c50, c99) = percentiles(cpu);
    println!(
        "frame-bench: {frames} frames in {seconds} s ({streaming_frames} while a round streamed), {rounds} rounds completed, {memories} memories"
    );
    println!("frame-bench: frame CPU time p50 {c50:.2} ms, p99 {c99:.2} ms (goal p99 < 8 ms); wall p50 {w50:.2} ms, p99 {w99:.2} ms");
}
