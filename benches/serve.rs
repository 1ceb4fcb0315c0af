//! `lorekeeper serve` under load, over real loopback HTTP and WebSocket:
//!
//! 1. `GET /api/character/{id}/status` from 8 client threads for 5 s: requests per
//!    second and latency p50 / p99 (each request reads the run from the library).
//! 2. Fan-out: 50 WebSocket clients follow one run while it develops with every agent's
//!    reply streamed in small fragments (scripted, auto-approved); every client gets every
//!    message. Reported: messages delivered per second over all clients, and per message
//!    the spread between the first and the last client receiving it (p50 / p99).
//!
//!     cargo bench --bench serve

mod support;

use lorekeeper::config::{Config, Paths};
use lorekeeper::llm::{ProviderKind, ProviderProfile};
use lorekeeper::serve::ServeOptions;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use support::percentiles;

const CLIENTS: usize = 50;
const THREADS: usize = 8;
const RUN_FOR: Duration = Duration::from_secs(5);

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/identity/script.json");
    let mut script: Value = serde_json::from_str(&std::fs::read_to_string(shipped).expect("script")).expect("json");
    // Stream every agent's reply in 16-character fragments: many small messages.
    for rule in script["rules"].as_array_mut().expect("rules") {
        if let Some(reply) = rule.get_mut("reply").and_then(Value::as_object_mut)
            && reply.contains_key("json")
        {
            reply.insert("chunk_chars".into(), json!(16));
        }
    }
    let script_file = dir.path().join("script.json");
    std::fs::write(&script_file, script.to_string()).expect("write script");
    let paths = Paths { config_file: dir.path().join("config.toml"), library_file: dir.path().join("library.sqlite"), log_dir: dir.path().join("logs") };
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile { name: "script".into(), kind: ProviderKind::Scripted, model: "bench".into(), path: Some(script_file), ..Default::default() });
    config.default_profile = "script".into();
    config.save(&paths.config_file).expect("config");
    let engine = lorekeeper::engine::start(paths).expect("engine");
    let server = lorekeeper::serve::start(engine, ServeOptions { addr: "127.0.0.1:0".parse().expect("addr"), token: None, cors: None }).expect("serve");
    let base = format!("http://{}", server.addr);
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();

    let start = |auto: bool| -> String {
        let body = json!({ "characters": [{ "name": "Mira Voss", "role": "lighthouse keeper", "concept": "A keeper who guards the sea she fears." }], "storyline": {}, "mode": "fast", "auto_approve": auto });
        let mut response = agent.post(&format!("{base}/api/character/start")).send(body.to_string()).expect("start");
        let value: Value = serde_json::from_str(&response.body_mut().read_to_string().expect("body")).expect("json");
        value["character_id"].as_str().expect("id").to_string()
    };

    // 1. Status requests.
    let id = start(false);
    let url = format!("{base}/api/character/{id}/status");
    let barrier = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (url, barrier) = (url.clone(), barrier.clone());
            std::thread::spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
                barrier.wait();
                let started = Instant::now();
                let mut times = Vec::new();
                while started.elapsed() < RUN_FOR {
                    let t = Instant::now();
                    let mut response = agent.get(&url).call().expect("status");
                    assert_eq!(response.status().as_u16(), 200);
                    let _ = response.body_mut().read_to_string();
                    times.push(t.elapsed());
                }
                times
            })
        })
        .collect();
    let times: Vec<Duration> = threads.into_iter().flat_map(|t| t.join().expect("thread")).collect();
    let count = times.len();
    let (p50, p99) = percentiles(times);
    println!("GET status: {count} requests in {:.0} s from {THREADS} threads = {:.0} req/s; p50 {p50:.2} ms, p99 {p99:.2} ms", RUN_FOR.as_secs_f64(), count as f64 / RUN_FOR.as_secs_f64());

    // 2. Fan-out: 50 clients follow one auto-approved run to its end.
    let (tx, rx) = std::sync::mpsc::channel::<Vec<(String, Instant)>>();
    let ready = Arc::new(Barrier::new(CLIENTS + 1));
    // Clients connect to a run that waits for its first approvals (so every client is
    // told the same state), then the run is approved through to its end.
    let id = start(false);
    let waiting = |n: u8| -> bool {
        let mut cp = agent.get(&format!("{base}/api/character/{id}/checkpoint/{n}")).call().expect("checkpoint");
        cp.status().as_u16() == 200 && cp.body_mut().read_to_string().is_ok_and(|t| t.contains("awaiting_approval"))
    };
    while !(waiting(1) && waiting(2)) {
        std::thread::sleep(Duration::from_millis(10));
    }
    for _ in 0..CLIENTS {
        let (tx, ready, url) = (tx.clone(), ready.clone(), format!("ws://{}/ws/character/{id}", server.addr));
        std::thread::spawn(move || {
            let (mut socket, _) = tungstenite::connect(url).expect("ws");
            ready.wait();
            let mut got = Vec::new();
            while let Ok(message) = socket.read() {
                if let tungstenite::Message::Text(text) = message {
                    let done = text.contains("\"character_complete\"");
                    got.push((text.to_string(), Instant::now()));
                    if done {
                        break;
                    }
                }
            }
            let _ = tx.send(got);
        });
    }
    drop(tx);
    ready.wait();
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    // Approve each checkpoint as it becomes ready, as a user clicking at once would.
    let mut approved = std::collections::BTreeSet::new();
    while approved.len() < 7 {
        let mut response = agent.get(&format!("{base}/api/character/{id}/status")).call().expect("status");
        let _: Value = serde_json::from_str(&response.body_mut().read_to_string().expect("body")).expect("json");
        for n in 1..=7u8 {
            if approved.contains(&n) {
                continue;
            }
            let mut cp = agent.get(&format!("{base}/api/character/{id}/checkpoint/{n}")).call().expect("checkpoint");
            if cp.status().as_u16() != 200 {
                continue;
            }
            let cp: Value = serde_json::from_str(&cp.body_mut().read_to_string().expect("body")).expect("json");
            if cp["status"] == "awaiting_approval" {
                let r = agent.post(&format!("{base}/api/character/{id}/approve")).send(json!({ "checkpoint": n }).to_string()).expect("approve");
                if r.status().as_u16() == 200 {
                    approved.insert(n);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // What arrived after the clients were all connected: the same messages for everyone.
    let received: Vec<Vec<(String, Instant)>> = rx.iter().map(|c| c.into_iter().filter(|(_, at)| *at >= started).collect()).collect();
    let elapsed = started.elapsed();
    let total: usize = received.iter().map(Vec::len).sum();
    let per_client = received.iter().map(Vec::len).min().unwrap_or(0);
    let mut spreads = Vec::new();
    for i in 0..per_client {
        let at: Vec<Instant> = received.iter().map(|c| c[i].1).collect();
        let (first, last) = (at.iter().min().expect("one"), at.iter().max().expect("one"));
        spreads.push(*last - *first);
    }
    let same = received.iter().all(|c| c.iter().map(|(t, _)| t).eq(received[0].iter().map(|(t, _)| t)));
    let (s50, s99) = percentiles(spreads);
    println!(
        "fan-out: {} clients x {per_client} messages = {total} in {:.2} s = {:.0} messages/s; same sequence everywhere: {same}; first-to-last client spread p50 {s50:.2} ms, p99 {s99:.2} ms",
        received.len(),
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64()
    );
}
