//! `lorekeeper serve` as the identity predecessor's scripts drive it: real HTTP, a real
//! WebSocket client, a real library, scripted agents. The messages are compared field
//! by field with the predecessor's shapes.

use lorekeeper::config::{Config, Paths};
use lorekeeper::engine;
use lorekeeper::llm::{ProviderKind, ProviderProfile};
use lorekeeper::serve::{ServeOptions, ServerHandle};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn paths(dir: &Path, script: &Path) -> Paths {
    let paths = Paths { config_file: dir.join("config.toml"), library_file: dir.join("library.sqlite"), log_dir: dir.join("logs") };
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile {
        name: "script".into(),
        kind: ProviderKind::Scripted,
        model: "serve-script".into(),
        path: Some(script.to_path_buf()),
        ..Default::default()
    });
    config.default_profile = "script".into();
    config.save(&paths.config_file).unwrap();
    paths
}

fn data(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(path)
}

fn serve(paths: &Paths, token: Option<&str>) -> ServerHandle {
    let engine = engine::start(paths.clone()).unwrap();
    lorekeeper::serve::start(engine, ServeOptions { addr: "127.0.0.1:0".parse().unwrap(), token: token.map(str::to_string), cors: None }).unwrap()
}

/// An HTTP client that returns every status as a response.
fn http() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

fn call(agent: &ureq::Agent, method: &str, url: &str, body: Option<&str>, token: Option<&str>) -> (u16, Value) {
    let response = match (method, body) {
        ("GET", _) => {
            let mut request = agent.get(url);
            if let Some(t) = token {
                request = request.header("Authorization", &format!("Bearer {t}"));
            }
            request.call()
        }
        (_, body) => {
            let mut request = agent.post(url).header("Content-Type", "application/json");
            if let Some(t) = token {
                request = request.header("Authorization", &format!("Bearer {t}"));
            }
            request.send(body.unwrap_or(""))
        }
    }
    .expect("the server answers");
    let status = response.status().as_u16();
    let text = response.into_body().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// Every message of a WebSocket, as it arrives, on a channel.
fn listen(url: &str) -> mpsc::Receiver<Value> {
    let (mut socket, _) = tungstenite::connect(url).expect("the WebSocket opens");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        while let Ok(message) = socket.read() {
            if let tungstenite::Message::Text(text) = message {
                let Ok(value) = serde_json::from_str::<Value>(&text) else { continue };
                if tx.send(value).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// Messages until `stop`, all of them kept in `seen`.
fn until(rx: &mpsc::Receiver<Value>, seen: &mut Vec<Value>, mut stop: impl FnMut(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = rx.recv_timeout(left).unwrap_or_else(|e| {
            panic!("no message in time ({e}); seen: {}", seen.iter().map(|m| m["type"].to_string()).collect::<Vec<_>>().join(", "))
        });
        seen.push(message.clone());
        if stop(&message) {
            return message;
        }
    }
}

fn ready(n: u64) -> impl FnMut(&Value) -> bool {
    move |m| m["type"] == "checkpoint_ready" && m["checkpoint_number"] == n
}

/// The predecessor's five message types, with exactly its fields.
fn seed_fields(kind: &str) -> Option<BTreeSet<&'static str>> {
    let fields: &[&'static str] = match kind {
        "wave_started" => &["type", "wave", "agents"],
        "checkpoint_ready" => &["type", "checkpoint_number", "agent", "message"],
        "wave_complete" => &["type", "wave", "agents_completed", "next_wave"],
        "character_complete" => &["type", "character_id", "message"],
        "error" => &["type", "message"],
        _ => return None,
    };
    Some(fields.iter().copied().collect())
}

#[test]
fn the_identity_flow_over_http_and_a_websocket_as_the_predecessor_drove_it() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path(), &data("identity/script.json"));
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();

    // Malformed and unknown first: clear errors.
    let (status, body) = call(&agent, "POST", &format!("{base}/api/character/start"), Some(r#"{"storyline": {}}"#), None);
    assert_eq!(status, 400, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("characters"), "the field is named: {body}");
    let (status, _) = call(&agent, "GET", &format!("{base}/api/character/no-such-id/status"), None, None);
    assert_eq!(status, 404);

    let start = json!({
        "characters": [
            { "name": "Mira Voss", "role": "lighthouse keeper", "concept": "A keeper who guards the sea she fears, hiding what happened the night the logbook burned.", "quirk": "hums shanties off-key" },
            { "name": "Tobin Hale", "role": "harbour master", "concept": "Ambitious, suspects the keeper." }
        ],
        "storyline": { "premise": "A shipwreck on Greyhollow's reef brings an heir ashore and an inquiry to the harbour." },
        "mode": "fast"
    });
    let (status, started) = call(&agent, "POST", &format!("{base}/api/character/start"), Some(&start.to_string()), None);
    assert_eq!(status, 200, "{started}");
    let id = started["character_id"].as_str().expect("a character_id").to_string();

    // Connected after the start: the state first, so checkpoints 1 and 2 are not missed.
    let ws = listen(&format!("ws://{}/ws/character/{id}", server.addr));
    let mut seen = Vec::new();
    until(&ws, &mut seen, ready(1));
    if !seen.iter().any(ready(2)) {
        until(&ws, &mut seen, ready(2));
    }
    let (status, meta) = call(&agent, "GET", &format!("{base}/api/character/{id}/status"), None, None);
    assert_eq!(status, 200);
    let keys: BTreeSet<&str> = meta.as_object().unwrap().keys().map(String::as_str).collect();
    let expected: BTreeSet<&str> = ["character_id", "created_at", "status", "mode", "current_wave", "current_checkpoint", "completed_checkpoints", "total_checkpoints", "regenerations"].into();
    assert_eq!(keys, expected, "the predecessor's metadata: {meta}");
    assert_eq!((meta["status"].as_str(), meta["mode"].as_str(), meta["total_checkpoints"].as_u64()), (Some("in_progress"), Some("fast"), Some(7)));

    let (status, cp) = call(&agent, "GET", &format!("{base}/api/character/{id}/checkpoint/1"), None, None);
    assert_eq!(status, 200);
    assert_eq!((cp["checkpoint_number"].as_u64(), cp["agent"].as_str(), cp["status"].as_str()), (Some(1), Some("personality"), Some("awaiting_approval")));
    assert!(cp["output"]["narrative"].as_str().is_some_and(|n| !n.is_empty()) && cp["output"]["structured"].is_object());
    for field in ["wave", "timestamp", "tokens_used", "agent_time_seconds"] {
        assert!(cp["metadata"].get(field).is_some(), "checkpoint metadata has {field}: {cp}");
    }
    let (status, body) = call(&agent, "POST", &format!("{base}/api/character/{id}/approve"), Some(r#"{"checkpont": 1}"#), None);
    assert_eq!(status, 400);
    assert!(body["detail"].as_str().unwrap().contains("checkpoint"), "{body}");
    let (status, _) = call(&agent, "POST", &format!("{base}/api/character/{id}/approve"), Some(r#"{"checkpoint": 5}"#), None);
    assert_eq!(status, 409, "checkpoint 5 is not awaiting approval yet");

    // Wave 1, approved out of order.
    for n in [2, 1] {
        let (status, body) = call(&agent, "POST", &format!("{base}/api/character/{id}/approve"), Some(&json!({ "checkpoint": n }).to_string()), None);
        assert_eq!(status, 200, "{body}");
    }
    let (status, _) = call(&agent, "POST", &format!("{base}/api/character/{id}/approve"), Some(r#"{"checkpoint": 1}"#), None);
    assert_eq!(status, 409, "an approved checkpoint is not approved twice");
    until(&ws, &mut seen, |m| m["type"] == "wave_complete" && m["wave"] == 1);
    // Wave 2: 4 is sent back with feedback and comes back as a new version.
    for n in [3, 4, 5] {
        if !seen.iter().any(ready(n)) {
            until(&ws, &mut seen, ready(n));
        }
    }
    let feedback = json!({ "checkpoint": 4, "feedback": "Give her a scar from the night of the fire." });
    let (status, body) = call(&agent, "POST", &format!("{base}/api/character/{id}/feedback"), Some(&feedback.to_string()), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "regenerating");
    until(&ws, &mut seen, |m| m["type"] == "checkpoint_version" && m["checkpoint_number"] == 4 && m["version"] == 2);
    let (_, cp4) = call(&agent, "GET", &format!("{base}/api/character/{id}/checkpoint/4"), None, None);
    assert_eq!(cp4["metadata"]["version"], 2, "the regenerated version is current");
    // The version replaced is read by asking for it; the versions are listed.
    let (status, first) = call(&agent, "GET", &format!("{base}/api/character/{id}/checkpoint/4?version=1"), None, None);
    assert_eq!((status, first["metadata"]["version"].as_u64()), (200, Some(1)), "{first}");
    let (status, versions) = call(&agent, "GET", &format!("{base}/api/character/{id}/checkpoint/4/versions"), None, None);
    assert_eq!(status, 200, "{versions}");
    let listed: Vec<(u64, bool)> = versions.as_array().unwrap().iter().map(|v| (v["version"].as_u64().unwrap(), v["current"].as_bool().unwrap())).collect();
    assert_eq!(listed, [(1, false), (2, true)], "{versions}");
    assert_eq!(versions[1]["feedback"], "Give her a scar from the night of the fire.", "{versions}");
    let (status, missing) = call(&agent, "GET", &format!("{base}/api/character/{id}/checkpoint/4?version=9"), None, None);
    assert!(status == 404 && missing["detail"].as_str().unwrap().contains("1, 2"), "{missing}");
    let (status, typo) = call(&agent, "GET", &format!("{base}/api/character/{id}/checkpoint/4?verison=1"), None, None);
    assert!(status == 400 && typo["detail"].as_str().unwrap().contains("verison"), "{typo}");
    for n in [5, 3, 4] {
        let (status, body) = call(&agent, "POST", &format!("{base}/api/character/{id}/approve"), Some(&json!({ "checkpoint": n }).to_string()), None);
        assert_eq!(status, 200, "{body}");
    }
    for n in [6, 7] {
        until(&ws, &mut seen, ready(n));
        let (status, body) = call(&agent, "POST", &format!("{base}/api/character/{id}/approve"), Some(&json!({ "checkpoint": n }).to_string()), None);
        assert_eq!(status, 200, "{body}");
    }
    let complete = until(&ws, &mut seen, |m| m["type"] == "character_complete");
    assert_eq!(complete["character_id"], id);

    // Every message of the predecessor's types has exactly its fields.
    for message in &seen {
        let kind = message["type"].as_str().unwrap();
        if let Some(fields) = seed_fields(kind) {
            let got: BTreeSet<&str> = message.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(got, fields, "{kind}: {message}");
        }
    }
    let waves: Vec<(u64, Value)> = seen.iter().filter(|m| m["type"] == "wave_complete").map(|m| (m["wave"].as_u64().unwrap(), m["next_wave"].clone())).collect();
    assert_eq!(waves, [(1, json!(2)), (2, json!(3)), (3, json!("final"))]);
    let started_waves: Vec<u64> = seen.iter().filter(|m| m["type"] == "wave_started").map(|m| m["wave"].as_u64().unwrap()).collect();
    assert!(started_waves.contains(&2) && started_waves.contains(&3), "{started_waves:?}");
    // The message names the agent by its key, as the predecessor's `_create_checkpoint(agent_name=…)` did.
    let second = seen.iter().find(|m| m["type"] == "checkpoint_ready" && m["checkpoint_number"] == 2).unwrap();
    assert_eq!(second["message"], "backstory_motivation analysis complete. Awaiting approval.", "{second}");
    let readies = seen.iter().filter(|m| m["type"] == "checkpoint_ready").count();
    assert!(readies >= 8, "seven checkpoints and one regenerated: {readies}");

    let (status, profile) = call(&agent, "GET", &format!("{base}/api/character/{id}/final"), None, None);
    assert_eq!(status, 200, "{profile}");
    assert!(profile.to_string().contains("Mira Voss"), "the final profile is Mira's");
    let (_, meta) = call(&agent, "GET", &format!("{base}/api/character/{id}/status"), None, None);
    assert_eq!((meta["status"].as_str(), meta["completed_checkpoints"].as_u64(), meta["regenerations"].as_u64()), (Some("completed"), Some(7), Some(1)));

    // The exported folder's input is what was POSTed to /start, every field of it, not our seed.
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    let view = lorekeeper::identity::load_view(&store, &id).unwrap();
    let folder = lorekeeper::identity::export::write_seed_folder(&view, None, dir.path()).unwrap();
    let input: Value = serde_json::from_str(&std::fs::read_to_string(folder.join("input.json")).unwrap()).unwrap();
    let mut sent = start.clone();
    sent.as_object_mut().unwrap().remove("mode");
    assert_eq!(input, sent, "input.json is the entry agent's input");
    let kb: Value = serde_json::from_str(&std::fs::read_to_string(folder.join("knowledge_base.json")).unwrap()).unwrap();
    assert_eq!(kb["input_data"]["characters"][0]["quirk"], "hums shanties off-key", "{kb}");
    assert_eq!(kb["input_data"]["characters"][1]["name"], "Tobin Hale");

    // A client that connects now is told the character is complete.
    let late = listen(&format!("ws://{}/ws/character/{id}", server.addr));
    let mut late_seen = Vec::new();
    until(&late, &mut late_seen, |m| m["type"] == "character_complete");

    let (status, doc) = call(&agent, "GET", &format!("{base}/api/openapi.json"), None, None);
    assert_eq!(status, 200);
    for path in ["/api/character/start", "/api/character/{character_id}/approve", "/api/scene/{scene}/round", "/api/memory/search", "/api/memory/model"] {
        assert!(doc["paths"].get(path).is_some(), "the OpenAPI document describes {path}");
    }
    assert!(doc["components"]["schemas"].get("SeedMetadata").is_some(), "schemas come from the types");
}

#[test]
fn a_token_guards_every_request_and_a_public_address_needs_one() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path(), &data("identity/script.json"));
    let refused = lorekeeper::serve::start(
        engine::start(paths.clone()).unwrap(),
        ServeOptions { addr: "0.0.0.0:0".parse().unwrap(), token: None, cors: None },
    );
    assert!(matches!(refused, Err(lorekeeper::serve::ServeError::NoToken(_))), "a non-loopback address without a token is refused");

    let server = serve(&paths, Some("s3cret-token"));
    let base = format!("http://{}", server.addr);
    let agent = http();
    let start = json!({ "characters": [{ "name": "Mira Voss", "role": "keeper", "concept": "Guards the sea she fears." }], "storyline": {}, "mode": "fast" });
    let (status, _) = call(&agent, "POST", &format!("{base}/api/character/start"), Some(&start.to_string()), None);
    assert_eq!(status, 401, "no token");
    let (status, _) = call(&agent, "POST", &format!("{base}/api/character/start"), Some(&start.to_string()), Some("wrong"));
    assert_eq!(status, 401, "a wrong token");
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    let runs: i64 = store.with(|c| Ok(c.query_row("SELECT count(*) FROM identity_runs", [], |r| r.get(0))?)).unwrap();
    assert_eq!(runs, 0, "a refused request changed nothing");
    let (status, body) = call(&agent, "POST", &format!("{base}/api/character/start"), Some(&start.to_string()), Some("s3cret-token"));
    assert_eq!(status, 200, "{body}");
    let ws = tungstenite::connect(format!("ws://{}/ws/character/{}", server.addr, body["character_id"].as_str().unwrap()));
    assert!(ws.is_err(), "the WebSocket needs the token too");

    // CORS is off unless an origin is named; then that origin, and only it, is allowed.
    let plain = agent.get(&format!("{base}/api/openapi.json")).header("Authorization", "Bearer s3cret-token").call().unwrap();
    assert!(plain.headers().get("access-control-allow-origin").is_none());
    let cors = lorekeeper::serve::start(
        engine::start(paths.clone()).unwrap(),
        ServeOptions { addr: "127.0.0.1:0".parse().unwrap(), token: None, cors: Some("https://gm.example".into()) },
    )
    .unwrap();
    let answer = agent.get(&format!("http://{}/api/openapi.json", cors.addr)).header("Origin", "https://gm.example").call().unwrap();
    assert_eq!(answer.headers().get("access-control-allow-origin").and_then(|v| v.to_str().ok()), Some("https://gm.example"));
}

#[test]
fn a_scene_round_and_a_chat_over_http_with_their_live_events() {
    let dir = tempfile::tempdir().unwrap();
    let mut script: Value = serde_json::from_str(&std::fs::read_to_string(data("scene/script.json")).unwrap()).unwrap();
    script["rules"].as_array_mut().unwrap().push(json!({
        "when": { "system_contains": "Roleplay as" },
        "reply": { "text": "[Ilse Marrow]: The kettle's on, and the fog is thick tonight.", "chunk_chars": 6 }
    }));
    script["default"] = json!("They talked over tea.");
    // The Director's call waits as one queued behind an identity run on the embedded model.
    let director = script["rules"].as_array_mut().unwrap().iter_mut().find(|r| r["name"] == "director pass 1").unwrap();
    director["reply"]["wait_behind"] = json!("Mira Voss, checkpoint 1");
    let script_file = dir.path().join("script.json");
    std::fs::write(&script_file, script.to_string()).unwrap();
    let paths = paths(dir.path(), &script_file);
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    let scene = lorekeeper::scene::demo::ensure(&store).unwrap().unwrap();
    lorekeeper::companion::demo::ensure(&store).unwrap();
    drop(store);
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();

    let (status, scenes) = call(&agent, "GET", &format!("{base}/api/scenes"), None, None);
    assert_eq!(status, 200);
    assert!(scenes.as_array().unwrap().iter().any(|s| s["id"] == scene));
    let ws = listen(&format!("ws://{}/ws/scene/{scene}", server.addr));
    std::thread::sleep(Duration::from_millis(200)); // the socket subscribes before the round starts
    let (status, body) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/round"), Some(r#"{"input": "I hand the keeper the sealed letter."}"#), None);
    assert_eq!(status, 202, "{body}");
    let mut seen = Vec::new();
    let done = until(&ws, &mut seen, |m| m["type"] == "roundCompleted");
    assert_eq!(done["round"], 1);
    let (status, lore) = call(&agent, "GET", &format!("{base}/api/scene/{scene}/lore"), None, None);
    assert_eq!(status, 200, "{lore}");
    assert_eq!(lore["round"], 1);
    assert!(lore["fired"].is_array() && lore["held_back"].is_array(), "{lore}");
    // A transcript message edited, then taken out, over HTTP.
    let (status, edited) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/message/1/edit"), Some(r#"{"text": "I hand over the letter, dripping."}"#), None);
    assert_eq!(status, 200, "{edited}");
    let (status, deleted) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/message/1/delete"), None, None);
    assert_eq!((status, deleted["action"].as_str()), (200, Some("delete")), "{deleted}");
    let (status, gone) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/message/1/delete"), None, None);
    assert_eq!(status, 404, "{gone}");
    let (status, _) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/message/2/shout"), None, None);
    assert_eq!(status, 404);
    let (status, missing) = call(&agent, "GET", &format!("{base}/api/scene/{scene}/lore?round=9"), None, None);
    assert_eq!(status, 400);
    assert!(missing["detail"].as_str().unwrap().contains("no round 9"), "{missing}");
    assert!(seen.iter().any(|m| m["type"] == "agentStatus" && m["agent"] == "director"));
    // The wait is heard, and its end, before the Director's plan.
    let waits: Vec<&Value> = seen.iter().take_while(|m| m["type"] != "agentStatus").filter(|m| m["type"] == "waiting").collect();
    assert_eq!(waits.len(), 2, "{seen:?}");
    assert_eq!((waits[0]["agent"].as_str(), waits[0]["holder"].as_str()), (Some("the Director"), Some("Mira Voss, checkpoint 1")));
    assert!(waits[1]["holder"].is_null(), "{:?}", waits[1]);
    assert!(seen.iter().any(|m| m["type"] == "agentStatus" && m["agent"] == "character" && m["status"] == "complete"));
    assert!(seen.iter().any(|m| m["type"] == "stateUpdated"));
    assert!(seen.iter().any(|m| m["type"] == "token"));
    let (_, state) = call(&agent, "GET", &format!("{base}/api/scene/{scene}"), None, None);
    assert_eq!(state["rounds"], 1);
    let (status, _) = call(&agent, "GET", &format!("{base}/api/scene/no-such-scene"), None, None);
    assert_eq!(status, 404);
    // The transcript as it now reads: message 1 was taken out above.
    let (status, messages) = call(&agent, "GET", &format!("{base}/api/scene/{scene}/messages"), None, None);
    assert_eq!(status, 200, "{messages}");
    let messages = messages.as_array().unwrap().clone();
    assert!(!messages.is_empty() && messages.iter().all(|m| m["round"] == 1 && m["number"].as_u64() > Some(1)), "{messages:?}");
    assert!(messages.iter().any(|m| m["kind"] == "character" && m["speaker"] == "Wren Talloway" && m["content"].is_string()), "{messages:?}");
    let last = messages.last().unwrap()["number"].as_u64().unwrap();
    let (_, newer) = call(&agent, "GET", &format!("{base}/api/scene/{scene}/messages?after={}", last - 1), None, None);
    assert_eq!(newer.as_array().map(Vec::len), Some(1), "{newer}");
    // Someone joins the cast, absent, and leaves it again.
    let (status, joined) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/cast/add"), Some(r#"{"character": "Ilse Marrow"}"#), None);
    assert_eq!((status, joined["name"].as_str()), (200, Some("Ilse Marrow")), "{joined}");
    let (_, state) = call(&agent, "GET", &format!("{base}/api/scene/{scene}"), None, None);
    assert!(state["cast"].as_array().unwrap().iter().any(|c| c["name"] == "Ilse Marrow" && c["active"] == false), "{state}");
    let (status, twice) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/cast/add"), Some(r#"{"character": "Ilse Marrow"}"#), None);
    assert_eq!(status, 400, "{twice}");
    let (status, _) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/cast/remove"), Some(r#"{"character": "Ilse"}"#), None);
    assert_eq!(status, 200);
    let (status, _) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/cast/add"), Some(r#"{"character": "Nobody At All"}"#), None);
    assert_eq!(status, 404);
    // The round taken back over HTTP; a second undo has nothing to take.
    let (status, undone) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/undo"), None, None);
    assert_eq!((status, undone["round"].as_u64()), (200, Some(1)), "{undone}");
    let (status, _) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/undo"), None, None);
    assert_eq!(status, 400);
    let (status, idle) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/cancel"), None, None);
    assert_eq!((status, idle["status"].as_str()), (200, Some("idle")), "{idle}");
    let document = lorekeeper::serve::openapi::document();
    let paths: Vec<&String> = document.paths.paths.keys().collect();
    for path in ["/api/scene/{scene}/messages", "/api/scene/{scene}/cast/{action}", "/api/scene/{scene}/undo"] {
        assert!(document.paths.paths.contains_key(path), "{path} is documented: {paths:?}");
    }

    let chat = listen(&format!("ws://{}/ws/chat/ilse", server.addr));
    std::thread::sleep(Duration::from_millis(200));
    let (status, turn) = call(&agent, "POST", &format!("{base}/api/chat/ilse/send"), Some(r#"{"text": "Is the kettle on?"}"#), None);
    assert_eq!(status, 200, "{turn}");
    assert_eq!(turn["reply"], "The kettle's on, and the fog is thick tonight.");
    let mut chat_seen = Vec::new();
    until(&chat, &mut chat_seen, |m| m["type"] == "turn_committed");
    let streamed: String = chat_seen.iter().filter(|m| m["type"] == "token").filter_map(|m| m["text"].as_str()).collect();
    assert!(streamed.contains("kettle"), "the reply streamed: {streamed}");
    let (status, history) = call(&agent, "GET", &format!("{base}/api/chat/ilse/history"), None, None);
    assert_eq!(status, 200);
    assert_eq!(history["turns"].as_array().unwrap().len(), 1);
    // The prompt packet (tens of KB per exchange in a long chat) only when asked for.
    assert!(history["turns"][0].get("packet").is_none(), "{history}");
    let (status, with_packets) = call(&agent, "GET", &format!("{base}/api/chat/ilse/history?packets=true"), None, None);
    assert_eq!(status, 200);
    assert!(with_packets["turns"][0]["packet"]["messages"][1]["content"].as_str().unwrap().contains("Is the kettle on?"), "{with_packets}");
    // Message control: redraw, pick the first draw again, edit the reply.
    let (status, changed) = call(&agent, "POST", &format!("{base}/api/chat/ilse/regenerate"), None, None);
    assert_eq!(status, 200, "{changed}");
    assert_eq!(changed["action"], "regenerated", "{changed}");
    // The socket hears the new draw stream and how it ended, as it heard the send.
    let mut redraw_seen = Vec::new();
    let done = until(&chat, &mut redraw_seen, |m| m["type"] == "changed");
    assert_eq!((done["action"].as_str(), done["turn"]["id"].as_str()), (Some("regenerated"), changed["turn"]["id"].as_str()), "{done}");
    assert!(redraw_seen.iter().any(|m| m["type"] == "token"), "{redraw_seen:?}");
    let (status, _) = call(&agent, "POST", &format!("{base}/api/chat/ilse/swipe"), Some(r#"{"index": 0}"#), None);
    assert_eq!(status, 200);
    let turn_id = changed["turn"]["id"].as_str().unwrap();
    let edit = json!({ "message": format!("{turn_id}-r"), "text": "The kettle's on. Sit." });
    let (status, edited) = call(&agent, "POST", &format!("{base}/api/chat/ilse/edit"), Some(&edit.to_string()), None);
    assert_eq!(status, 200, "{edited}");
    let (_, history) = call(&agent, "GET", &format!("{base}/api/chat/ilse/history"), None, None);
    assert_eq!(history["turns"][0]["reply"], "The kettle's on. Sit.");
    let (status, body) = call(&agent, "POST", &format!("{base}/api/chat/ilse/swipe"), Some("{}"), None);
    assert_eq!(status, 400, "the missing field is named: {body}");
    assert!(body["detail"].as_str().unwrap().contains("index"));
    let (status, card) = call(&agent, "GET", &format!("{base}/api/library/character/ilse/card?format=v3"), None, None);
    assert_eq!(status, 200, "{card}");
    assert_eq!(card["spec"], "chara_card_v3");
    assert_eq!(card["data"]["name"], "Ilse Marrow");
    let (status, _) = call(&agent, "GET", &format!("{base}/api/library/character/nobody/card"), None, None);
    assert_eq!(status, 404);

    let (status, results) = call(&agent, "GET", &format!("{base}/api/memory/search?q=kettle&k=5"), None, None);
    assert_eq!(status, 200, "{results}");
    let hits = results["hits"].as_array().unwrap();
    assert!(hits.iter().any(|h| h["text"].as_str().is_some_and(|t| t.contains("kettle"))), "{results}");
    for hit in hits {
        for field in ["score", "keyword_score", "vector_score", "rank"] {
            assert!(hit.get(field).is_some(), "every hit says why: {field} in {hit}");
        }
    }

    // Curation, as in the memory browser: pin, edit (found by its new words, not its
    // old), delete; a memory or session that is not there is a 404, a typo a 400.
    let id = hits.iter().find(|h| h["text"].as_str().is_some_and(|t| t.contains("kettle"))).unwrap()["id"].as_str().unwrap().to_string();
    let (status, pinned) = call(&agent, "POST", &format!("{base}/api/memory/{id}/pin"), None, None);
    assert_eq!((status, pinned["action"].as_str()), (200, Some("pinned")), "{pinned}");
    let (status, typo) = call(&agent, "POST", &format!("{base}/api/memory/{id}/edit"), Some(r#"{"txt": "x"}"#), None);
    assert_eq!(status, 400, "{typo}");
    let (status, edited) = call(&agent, "POST", &format!("{base}/api/memory/{id}/edit"), Some(r#"{"text": "The samovar hissed all night."}"#), None);
    assert_eq!((status, edited["action"].as_str()), (200, Some("edited")), "{edited}");
    let (_, found) = call(&agent, "GET", &format!("{base}/api/memory/search?q=samovar&k=5"), None, None);
    let hit = found["hits"].as_array().unwrap().iter().find(|h| h["id"] == id.as_str()).cloned().unwrap_or_else(|| panic!("{found}"));
    assert_eq!((hit["pinned"].as_bool(), hit["edited"].as_bool()), (Some(true), Some(true)), "{hit}");
    // The memories go out as curated, one line each, in the format an import reads.
    let (status, exported) = call(&agent, "GET", &format!("{base}/api/memory/export"), None, None);
    assert_eq!(status, 200);
    let exported = exported.as_str().unwrap_or_default().to_string();
    let line = exported.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|l| l["id"] == id.as_str()).unwrap_or_else(|| panic!("{exported}"));
    assert_eq!((line["text"].as_str(), line["pinned"].as_bool()), (Some("The samovar hissed all night."), Some(true)), "{line}");
    let (status, _) = call(&agent, "GET", &format!("{base}/api/memory/export?scope=nowhere"), None, None);
    assert_eq!(status, 400);
    let (_, old) = call(&agent, "GET", &format!("{base}/api/memory/search?q=kettle&k=20"), None, None);
    assert!(!old["hits"].as_array().unwrap().iter().any(|h| h["id"] == id.as_str() && h["text"].as_str().is_some_and(|t| t.contains("kettle"))), "{old}");
    let deleted = agent.delete(&format!("{base}/api/memory/{id}")).call().unwrap();
    assert_eq!(deleted.status().as_u16(), 200);
    let (_, gone) = call(&agent, "GET", &format!("{base}/api/memory/search?q=samovar&k=5"), None, None);
    assert!(!gone["hits"].as_array().unwrap().iter().any(|h| h["id"] == id.as_str()), "{gone}");
    let again = agent.delete(&format!("{base}/api/memory/{id}")).call().unwrap();
    assert_eq!(again.status().as_u16(), 404);
    let (status, missing) = call(&agent, "POST", &format!("{base}/api/memory/forget"), Some(r#"{"session": "no-such-session"}"#), None);
    assert_eq!(status, 404, "{missing}");

    let (status, models) = call(&agent, "GET", &format!("{base}/api/memory/model"), None, None);
    assert_eq!(status, 200, "{models}");
    assert_eq!(models["in_use"], "all-MiniLM-L6-v2/model.onnx");
    assert_eq!(models["models"].as_array().map(Vec::len), Some(2), "{models}");
    let (status, wrong) = call(&agent, "POST", &format!("{base}/api/memory/model"), Some(r#"{"name": "nope"}"#), None);
    assert_eq!(status, 400);
    assert!(wrong["detail"].as_str().unwrap().contains("all-mpnet-base-v2"), "the models are named: {wrong}");
    let (status, switched) = call(&agent, "POST", &format!("{base}/api/memory/model"), Some(r#"{"name": "all-mpnet-base-v2"}"#), None);
    assert_eq!(status, 200, "{switched}");
    assert!(switched["embedded"].as_u64().unwrap() > 0, "{switched}");
    let (_, models) = call(&agent, "GET", &format!("{base}/api/memory/model"), None, None);
    assert_eq!(models["in_use"], "all-mpnet-base-v2/model.onnx");
    let (status, results) = call(&agent, "GET", &format!("{base}/api/memory/search?q=kettle&k=5"), None, None);
    assert_eq!(status, 200, "{results}");
    assert!(results["hits"].as_array().unwrap().iter().any(|h| h["vector_score"].is_number()), "searched with the new model's vectors: {results}");

    let card = json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": { "name": "Petra Quill", "description": "A cartographer of drowned coasts.", "first_mes": "Mind the chart." } });
    let imported = agent.post(&format!("{base}/api/library/import?name=petra.json")).send(card.to_string()).unwrap();
    assert_eq!(imported.status().as_u16(), 200);
    let report: Value = serde_json::from_str(&imported.into_body().read_to_string().unwrap()).unwrap();
    assert!(report.to_string().contains("Petra Quill"), "{report}");
}

/// What `lorekeeper scene` does beside playing, over HTTP: redo the last round (its new
/// round reported on the scene's socket), list the kept rounds and play one instead,
/// mute and unmute a cast member, export the transcript as Markdown or JSON.
#[test]
fn a_scene_is_redone_muted_and_exported_over_http_as_the_cli_does() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path(), &data("scene/script.json"));
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    let scene = lorekeeper::scene::demo::ensure(&store).unwrap().unwrap();
    drop(store);
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();
    let ws = listen(&format!("ws://{}/ws/scene/{scene}", server.addr));
    std::thread::sleep(Duration::from_millis(200));
    let mut seen = Vec::new();
    // Nothing to redo yet: the request's fault, said so.
    let (status, nothing) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/redo"), None, None);
    assert_eq!(status, 400, "{nothing}");
    let (status, _) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/round"), Some(r#"{"input": "I hand the keeper the sealed letter."}"#), None);
    assert_eq!(status, 202);
    until(&ws, &mut seen, |m| m["type"] == "roundCompleted");

    let (status, redo) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/redo"), None, None);
    assert_eq!((status, redo["round"].as_u64(), redo["status"].as_str()), (202, Some(1), Some("started")), "{redo}");
    let done = until(&ws, &mut seen, |m| m["type"] == "roundCompleted");
    assert_eq!(done["round"], 1);
    let (status, typo) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/redo"), Some(r#"{"rounds": 2}"#), None);
    assert!(status == 400 && typo["detail"].as_str().unwrap().contains("`rounds`"), "{typo}");
    let (status, _) = call(&agent, "POST", &format!("{base}/api/scene/no-such-scene/redo"), None, None);
    assert_eq!(status, 404);

    let (status, kept) = call(&agent, "GET", &format!("{base}/api/scene/{scene}/alternatives"), None, None);
    assert_eq!(status, 200, "{kept}");
    let kept = kept["alternatives"].as_array().unwrap().clone();
    assert_eq!((kept.len(), kept[0]["round"].as_u64()), (1, Some(1)), "{kept:?}");
    let id = kept[0]["id"].as_str().unwrap();
    let (status, chosen) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/alternative/{id}/use"), None, None);
    assert_eq!((status, chosen["round"].as_u64()), (200, Some(1)), "{chosen}");
    assert!(chosen["kept"].is_string(), "the round it replaced is kept in turn: {chosen}");
    let (_, after) = call(&agent, "GET", &format!("{base}/api/scene/{scene}/alternatives"), None, None);
    assert_eq!(after["alternatives"][0]["id"], chosen["kept"], "{after}");
    let (status, _) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/alternative/no-such-round/use"), None, None);
    assert_eq!(status, 404);

    let (status, muted) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/mute"), Some(r#"{"character": "Ossian Vale"}"#), None);
    assert_eq!((status, muted["name"].as_str(), muted["muted"].as_bool()), (200, Some("Ossian Vale"), Some(true)), "{muted}");
    let (_, state) = call(&agent, "GET", &format!("{base}/api/scene/{scene}"), None, None);
    assert!(state["cast"].as_array().unwrap().iter().any(|c| c["name"] == "Ossian Vale" && c["muted"] == true), "{state}");
    let (status, unmuted) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/unmute"), Some(r#"{"character": "Ossian Vale"}"#), None);
    assert_eq!((status, unmuted["muted"].as_bool()), (200, Some(false)), "{unmuted}");
    let (status, _) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/mute"), Some(r#"{"character": "Nobody At All"}"#), None);
    assert_eq!(status, 404);
    let (status, typo) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/mute"), Some(r#"{"who": "Ossian Vale"}"#), None);
    assert!(status == 400 && typo["detail"].as_str().unwrap().contains("who"), "{typo}");

    let markdown = agent.get(&format!("{base}/api/scene/{scene}/export")).call().unwrap();
    assert_eq!(markdown.status().as_u16(), 200);
    assert!(markdown.headers().get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("text/markdown")));
    let text = markdown.into_body().read_to_string().unwrap();
    assert!(text.contains("Wren Talloway") && text.contains("sealed letter"), "{text}");
    let (status, transcript) = call(&agent, "GET", &format!("{base}/api/scene/{scene}/export?format=json"), None, None);
    assert_eq!((status, transcript["scene"]["id"].as_str()), (200, Some(scene.as_str())), "{transcript}");
    assert!(!transcript["messages"].as_array().unwrap().is_empty(), "{transcript}");
    let (status, wrong) = call(&agent, "GET", &format!("{base}/api/scene/{scene}/export?format=pdf"), None, None);
    assert!(status == 400 && wrong["detail"].as_str().unwrap().contains("format"), "{wrong}");
    let (status, _) = call(&agent, "GET", &format!("{base}/api/scene/no-such-scene/export"), None, None);
    assert_eq!(status, 404);
}

/// `GET /api/memory/search` takes the filters `lorekeeper memory search` takes, by the
/// same names: mode, scope, speaker, witness, session, from, to.
#[test]
fn memory_search_over_http_takes_the_clis_filters() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path(), &data("scene/script.json"));
    let turns = dir.path().join("turns.jsonl");
    std::fs::write(
        &turns,
        [
            r#"{"id":"1","speaker":"user","text":"I adopted a three-legged cat called Pilot.","time":"2024-05-01","session":"a","witnesses":["user"]}"#,
            r#"{"id":"2","speaker":"Mira","text":"Pilot! What a name for a cat.","time":"2024-05-01","session":"a","witnesses":["Mira","user"]}"#,
            r#"{"id":"3","speaker":"user","text":"Pilot chased the plums round the orchard.","time":"2024-06-11","session":"b","scope":"character:mira"}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    let engine = engine::start(paths.clone()).unwrap();
    engine.send(engine::Command::Memory(lorekeeper::memory::MemoryCommand::Import { path: turns })).unwrap();
    loop {
        match engine.events().recv_timeout(Duration::from_secs(120)).expect("the import ends") {
            engine::Event::Memory(lorekeeper::memory::MemoryEvent::Imported { .. }) => break,
            engine::Event::Core(engine::CoreEvent::Error { message, .. }) => panic!("{message}"),
            _ => {}
        }
    }
    let server = lorekeeper::serve::start(engine, ServeOptions { addr: "127.0.0.1:0".parse().unwrap(), token: None, cors: None }).unwrap();
    let base = format!("http://{}", server.addr);
    let agent = http();
    let ids = |query: &str| -> BTreeSet<String> {
        let (status, found) = call(&agent, "GET", &format!("{base}/api/memory/search?q=Pilot&mode=keyword&{query}"), None, None);
        assert_eq!(status, 200, "{query}: {found}");
        assert_eq!(found["mode"], "keyword", "{found}");
        let hits = found["hits"].as_array().unwrap();
        assert!(hits.iter().all(|h| h["vector_score"].is_null()), "keyword only: {found}");
        hits.iter().map(|h| h["id"].as_str().unwrap().to_string()).collect()
    };
    let set = |ids: &[&str]| ids.iter().map(|i| i.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(ids("k=10"), set(&["1", "2", "3"]));
    assert_eq!(ids("from=2024-06-01"), set(&["3"]));
    assert_eq!(ids("to=2024-05-31"), set(&["1", "2"]));
    assert_eq!(ids("session=a&speaker=Mira"), set(&["2"]));
    assert_eq!(ids("scope=character"), set(&["3"]));
    assert_eq!(ids("scope=world"), set(&["1", "2"]));
    let witnessed = ids("witness=Mira");
    assert!(witnessed.contains("2") && !witnessed.contains("1"), "{witnessed:?}");
    for (query, field) in [("mode=fuzzy", "`mode`"), ("scope=galaxy", "`scope`"), ("colour=red", "colour")] {
        let (status, refused) = call(&agent, "GET", &format!("{base}/api/memory/search?q=Pilot&{query}"), None, None);
        assert!(status == 400 && refused["detail"].as_str().unwrap().contains(field), "{query}: {status} {refused}");
    }
}

/// What a client gets wrong is answered as JSON with a status that says whose fault it
/// is: a bad query, a path or method no route takes, a file that imports nothing, a
/// message too long for the model's context.
#[test]
fn bad_requests_are_answered_with_json_and_the_right_status() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(&script, json!({ "default": "[Ilse Marrow]: Hm." }).to_string()).unwrap();
    let paths = paths(dir.path(), &script);
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    lorekeeper::companion::demo::ensure(&store).unwrap();
    drop(store);
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();
    let detail = |v: &Value| v["detail"].as_str().unwrap_or_else(|| panic!("not a JSON error: {v}")).to_string();

    for query in ["k=2", "q=tide&k=abc", "q=tide&k=-1"] {
        let (status, body) = call(&agent, "GET", &format!("{base}/api/memory/search?{query}"), None, None);
        assert_eq!(status, 400, "{query}: {body}");
        assert!(detail(&body).starts_with("invalid query"), "{body}");
    }
    let (status, body) = call(&agent, "GET", &format!("{base}/api/nonexistent"), None, None);
    assert_eq!(status, 404);
    assert!(detail(&body).contains("/api/openapi.json"), "{body}");
    let (status, body) = call(&agent, "POST", &format!("{base}/api/scenes"), Some("{}"), None);
    assert_eq!(status, 405);
    assert!(detail(&body).contains("does not take POST"), "{body}");
    let (status, body) = call(&agent, "POST", &format!("{base}/api/library/import?name=junk.json"), Some("not a card at all"), None);
    assert_eq!(status, 400, "{body}");
    assert!(detail(&body).starts_with("nothing imported"), "{body}");

    // A field the body does not take is refused by name, not ignored (a round played
    // without the game master's message), and so is a query parameter.
    for (url, sent, field) in [
        ("/api/scene/anything/round", r#"{"text": "I knock."}"#, "`text`"),
        ("/api/scene/anything/round", r#"{"input": "I knock.", "forse": ["Wren"]}"#, "`forse`"),
        ("/api/scene/anything/message/1/edit", r#"{"txt": "Fixed."}"#, "`txt`"),
        ("/api/chat/ilse/send", r#"{"text": "Hello.", "now": "tomorrow"}"#, "`now`"),
        ("/api/chat/ilse/swipe", r#"{"index": 0, "idx": 1}"#, "`idx`"),
    ] {
        let (status, body) = call(&agent, "POST", &format!("{base}{url}"), Some(sent), None);
        assert_eq!(status, 400, "{url} {sent}: {body}");
        assert!(detail(&body).contains("unknown field") && detail(&body).contains(field), "{body}");
    }
    let (status, body) = call(&agent, "GET", &format!("{base}/api/memory/search?q=tide&kk=2"), None, None);
    assert_eq!(status, 400, "{body}");
    assert!(detail(&body).contains("kk"), "{body}");
    // A path parameter of the wrong kind, and a socket asked without its handshake.
    let (status, body) = call(&agent, "POST", &format!("{base}/api/scene/anything/message/abc/edit"), Some(r#"{"text": "x"}"#), None);
    assert_eq!(status, 400, "{body}");
    assert!(detail(&body).starts_with("invalid path"), "{body}");
    for socket in ["/ws/scene/anything", "/ws/chat/ilse", "/ws/character/anyone"] {
        let (status, body) = call(&agent, "GET", &format!("{base}{socket}"), None, None);
        assert!((400..500).contains(&status), "{socket}: {status} {body}");
        assert!(detail(&body).contains("WebSocket"), "{socket}: {body}");
    }

    let long = json!({ "text": "The tide came in. ".repeat(12_000) }).to_string();
    let (status, body) = call(&agent, "POST", &format!("{base}/api/chat/ilse/send"), Some(&long), None);
    assert_eq!(status, 413, "{body}");
    assert!(detail(&body).contains("the message is too long"), "{body}");
    // Nothing of it was kept: the chat has no exchange.
    let (status, history) = call(&agent, "GET", &format!("{base}/api/chat/ilse/history"), None, None);
    assert_eq!(status, 200);
    assert_eq!(history["turns"].as_array().map(Vec::len), Some(0), "{history}");
}

/// The CLI approves the run a WebSocket client follows on the server: that process's
/// events never reach the server, yet the client hears the approvals and the next
/// wave's checkpoints, in the predecessor's messages.
#[test]
fn a_websocket_hears_what_another_process_does_to_its_run() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path(), &data("identity/script.json"));
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();
    let start = json!({
        "characters": [{ "name": "Mira Voss", "role": "lighthouse keeper", "concept": "A keeper who guards the sea she fears." }],
        "storyline": { "premise": "A shipwreck on the reef." },
        "mode": "fast"
    });
    let (status, started) = call(&agent, "POST", &format!("{base}/api/character/start"), Some(&start.to_string()), None);
    assert_eq!(status, 200, "{started}");
    let id = started["character_id"].as_str().unwrap().to_string();
    let ws = listen(&format!("ws://{}/ws/character/{id}", server.addr));
    let mut seen = Vec::new();
    for n in [1, 2] {
        if !seen.iter().any(ready(n)) {
            until(&ws, &mut seen, ready(n));
        }
    }
    for n in ["1", "2"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
            .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap(), "identity", "approve", &id, n])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    until(&ws, &mut seen, |m| m["type"] == "checkpoint_approved" && m["checkpoint_number"] == 1);
    for n in [3, 4, 5] {
        if !seen.iter().any(ready(n)) {
            until(&ws, &mut seen, ready(n));
        }
    }
    let ready_fields: BTreeSet<&str> = seen.iter().find(|m| ready(3)(m)).unwrap().as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(ready_fields, seed_fields("checkpoint_ready").unwrap());
}

/// A start body whose character has no concept is refused with the field named (as the
/// CLI refuses a seed without one), and nothing is started.
#[test]
fn a_start_without_a_concept_is_refused_with_the_field_named() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path(), &data("identity/script.json"));
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();
    for character in [json!({ "name": "Mira Voss", "role": "keeper" }), json!({ "name": "Mira Voss", "role": "keeper", "concept": "  " })] {
        let start = json!({ "characters": [character], "storyline": {}, "mode": "fast" });
        let (status, body) = call(&agent, "POST", &format!("{base}/api/character/start"), Some(&start.to_string()), None);
        assert_eq!(status, 400, "{body}");
        assert!(body["detail"].as_str().unwrap().contains("characters[0].concept"), "{body}");
    }
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    let runs: i64 = store.with(|c| Ok(c.query_row("SELECT count(*) FROM identity_runs", [], |r| r.get(0))?)).unwrap();
    assert_eq!(runs, 0, "nothing was started");
    // An entry agent's `description` is read as the concept.
    let start = json!({ "characters": [{ "name": "Mira Voss", "description": "Guards the sea she fears." }], "mode": "fast" });
    let (status, body) = call(&agent, "POST", &format!("{base}/api/character/start"), Some(&start.to_string()), None);
    assert_eq!(status, 200, "{body}");
}

/// A client that connects right after the start, while wave 1's agents still run, is told
/// what the predecessor's connection flow promises: wave 1 started (once), and which
/// agents are running, before the first checkpoint.
#[test]
fn a_websocket_opened_after_the_start_hears_wave_one_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut script: Value = serde_json::from_str(&std::fs::read_to_string(data("identity/script.json")).unwrap()).unwrap();
    for rule in script["rules"].as_array_mut().unwrap() {
        let system = rule["when"]["system_contains"].as_str().unwrap_or_default();
        if system == "Personality specialist" || system == "Backstory & Motivation specialist" {
            for key in ["reply", "replies"] {
                match rule.get_mut(key) {
                    Some(Value::Array(replies)) => replies.iter_mut().for_each(|r| r["delay_ms"] = json!(1500)),
                    Some(reply @ Value::Object(_)) => reply["delay_ms"] = json!(1500),
                    _ => {}
                }
            }
        }
    }
    let slow = dir.path().join("slow.json");
    std::fs::write(&slow, script.to_string()).unwrap();
    let paths = paths(dir.path(), &slow);
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let start = json!({ "characters": [{ "name": "Mira Voss", "role": "keeper", "concept": "A keeper who guards the sea she fears." }], "mode": "fast" });
    let (status, started) = call(&http(), "POST", &format!("{base}/api/character/start"), Some(&start.to_string()), None);
    assert_eq!(status, 200, "{started}");
    let id = started["character_id"].as_str().unwrap().to_string();
    // Connected once the agents run (they take 1.5 s): their start was before this client.
    std::thread::sleep(Duration::from_millis(400));
    let ws = listen(&format!("ws://{}/ws/character/{id}", server.addr));
    let mut seen = Vec::new();
    until(&ws, &mut seen, |m| m["type"] == "checkpoint_ready");
    let kinds: Vec<&str> = seen.iter().map(|m| m["type"].as_str().unwrap()).collect();
    let waves: Vec<&Value> = seen.iter().filter(|m| m["type"] == "wave_started").collect();
    assert_eq!(waves.len(), 1, "wave 1 is announced once: {kinds:?}");
    assert_eq!(*waves[0], json!({ "type": "wave_started", "wave": 1, "agents": ["personality", "backstory_motivation"] }));
    let running: BTreeSet<u64> = seen.iter().filter(|m| m["type"] == "agent_started").map(|m| m["checkpoint_number"].as_u64().unwrap()).collect();
    assert_eq!(running, [1, 2].into(), "{kinds:?}");
    let first = seen.iter().find(|m| m["type"] == "agent_started").unwrap();
    assert_eq!(first.as_object().unwrap().keys().map(String::as_str).collect::<BTreeSet<_>>(), ["agent", "checkpoint_number", "type", "version"].into());
    assert_eq!(first["version"], 1);
    assert!(kinds.iter().position(|k| *k == "wave_started") < kinds.iter().position(|k| *k == "checkpoint_ready"), "{kinds:?}");
}

/// A library with the demo scene and the demo chat, played by `script` (the scene's
/// script with Ilse's reply), each model call taking `delay_ms`.
fn slow_play(dir: &Path, delay_ms: u64) -> (Paths, String) {
    let mut script: Value = serde_json::from_str(&std::fs::read_to_string(data("scene/script.json")).unwrap()).unwrap();
    script["rules"].as_array_mut().unwrap().push(json!({
        "when": { "system_contains": "Roleplay as" },
        "reply": { "text": "[Ilse Marrow]: The kettle's on, and the fog is thick tonight.", "chunk_chars": 6 }
    }));
    for rule in script["rules"].as_array_mut().unwrap() {
        rule["reply"]["delay_ms"] = json!(delay_ms);
    }
    script["default"] = json!("They talked over tea.");
    let script_file = dir.join("script.json");
    std::fs::write(&script_file, script.to_string()).unwrap();
    let paths = paths(dir, &script_file);
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    let scene = lorekeeper::scene::demo::ensure(&store).unwrap().unwrap();
    lorekeeper::companion::demo::ensure(&store).unwrap();
    (paths, scene)
}

/// The same POSTs at once, from as many threads: each answer, in the order sent.
fn at_once(base: &str, requests: &[(&str, String)]) -> Vec<(u16, Value)> {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(requests.len()));
    let threads: Vec<_> = requests
        .iter()
        .map(|(path, body)| {
            let (url, body, barrier) = (format!("{base}{path}"), body.clone(), barrier.clone());
            std::thread::spawn(move || {
                let agent = http();
                barrier.wait();
                call(&agent, "POST", &url, Some(&body), None)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// Two players act in one scene at once, two messages go to one chat at once: one is
/// taken and one is refused as busy, and what each client is told is what was stored
/// (the answers used to be matched to requests by scene and character, so both rounds
/// were "started" while one input was dropped, and both messages "busy" while one was
/// kept).
#[test]
fn requests_at_once_on_one_scene_or_chat_each_hear_their_own_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = slow_play(dir.path(), 700);
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();

    let ws = listen(&format!("ws://{}/ws/scene/{scene}", server.addr));
    std::thread::sleep(Duration::from_millis(200));
    let inputs = ["INPUT-ONE: a gull lands on the rail.", "INPUT-TWO: a dog barks below."];
    let path = format!("/api/scene/{scene}/round");
    let answers = at_once(&base, &inputs.map(|i| (path.as_str(), json!({ "input": i }).to_string())));
    let statuses: BTreeSet<u16> = answers.iter().map(|(s, _)| *s).collect();
    assert_eq!(statuses, [202, 409].into(), "one round starts, one is refused: {answers:?}");
    let taken = inputs[answers.iter().position(|(s, _)| *s == 202).unwrap()];
    let mut seen = Vec::new();
    until(&ws, &mut seen, |m| m["type"] == "roundCompleted");
    // The refusal was the refused request's answer alone: the scene's watchers heard no
    // error while the round that was taken went on (it used to reach them as
    // `{"type":"error","fault":"busy"}`, as if the running round had failed).
    assert!(!seen.iter().any(|m| m["type"] == "error"), "{seen:?}");
    let (_, messages) = call(&agent, "GET", &format!("{base}/api/scene/{scene}/messages"), None, None);
    let said: Vec<&str> = messages.as_array().unwrap().iter().filter(|m| m["kind"] == "user").filter_map(|m| m["content"].as_str()).collect();
    assert_eq!(said, [taken], "the started round is the one that was played");

    let chat = listen(&format!("ws://{}/ws/chat/ilse", server.addr));
    std::thread::sleep(Duration::from_millis(200));
    let texts = ["FIRST: is the kettle on?", "SECOND: did the ferry come?"];
    let answers = at_once(&base, &texts.map(|t| ("/api/chat/ilse/send", json!({ "text": t }).to_string())));
    let statuses: BTreeSet<u16> = answers.iter().map(|(s, _)| *s).collect();
    assert_eq!(statuses, [200, 409].into(), "one message is answered, one refused: {answers:?}");
    let (_, turn) = answers.iter().find(|(s, _)| *s == 200).unwrap();
    let taken = texts[answers.iter().position(|(s, _)| *s == 200).unwrap()];
    assert_eq!(turn["user_text"], taken, "the answer is the exchange of the message sent: {turn}");
    let mut heard = Vec::new();
    until(&chat, &mut heard, |m| m["type"] == "turn_committed");
    assert!(!heard.iter().any(|m| m["type"] == "failed"), "the chat's watchers heard no failure: {heard:?}");
    let (_, history) = call(&agent, "GET", &format!("{base}/api/chat/ilse/history"), None, None);
    let stored: Vec<&str> = history["turns"].as_array().unwrap().iter().filter_map(|t| t["user_text"].as_str()).collect();
    assert_eq!(stored, [taken], "only the answered message is stored");

    // A redraw and a new message at once: the one taken answers as itself.
    let answers = at_once(&base, &[("/api/chat/ilse/regenerate", String::new()), ("/api/chat/ilse/send", json!({ "text": "THIRD: goodnight." }).to_string())]);
    let statuses: BTreeSet<u16> = answers.iter().map(|(s, _)| *s).collect();
    assert_eq!(statuses, [200, 409].into(), "{answers:?}");
    let (_, history) = call(&agent, "GET", &format!("{base}/api/chat/ilse/history"), None, None);
    let turns = history["turns"].as_array().unwrap();
    if answers[0].0 == 200 {
        assert_eq!(answers[0].1["action"], "regenerated", "{answers:?}");
        assert_eq!(turns.len(), 1, "{history}");
    } else {
        assert_eq!(answers[1].1["user_text"], "THIRD: goodnight.", "{answers:?}");
        assert_eq!(turns.len(), 2, "{history}");
    }

    // Two uploads at once: each report is its own file's.
    let card = std::fs::read_to_string(data("interop/card_v2_full.json")).unwrap();
    let book = std::fs::read_to_string(data("interop/world_info_full.json")).unwrap();
    let answers = at_once(&base, &[("/api/library/import?name=card.json", card), ("/api/library/import?name=book.json", book)]);
    for ((status, report), name) in answers.iter().zip(["card.json", "book.json"]) {
        assert_eq!(*status, 200, "{report}");
        let paths: Vec<&str> = report["created"].as_array().unwrap().iter().filter_map(|c| c["path"].as_str()).collect();
        assert!(!paths.is_empty() && paths.iter().all(|p| p.ends_with(name)), "{name}: {report}");
    }

    // Two searches at once for the same words, one for more hits: each gets its own.
    let searches: Vec<_> = [1, 5]
        .into_iter()
        .map(|k| {
            let url = format!("{base}/api/memory/search?q=kettle&k={k}");
            std::thread::spawn(move || call(&http(), "GET", &url, None, None))
        })
        .collect();
    let hits: Vec<usize> = searches.into_iter().map(|t| t.join().unwrap()).map(|(status, found)| {
        assert_eq!(status, 200, "{found}");
        found["hits"].as_array().unwrap().len()
    }).collect();
    assert!(hits[0] == 1 && hits[1] > 1, "k=1 and k=5 each answered as asked: {hits:?}");
}

/// The chat history over HTTP gives every message the id that `edit` and `delete` take
/// (it listed only each exchange's id, which edit refused, and a client had to guess
/// the `-u`/`-r` suffix); an exchange's id sent as a message is answered with the two
/// message ids it holds, and any other id with what a message id is.
#[test]
fn the_chat_history_gives_each_message_the_id_edit_and_delete_take() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, _) = slow_play(dir.path(), 0);
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();
    for text in ["Is the kettle on?", "Did the ferry come?"] {
        let (status, turn) = call(&agent, "POST", &format!("{base}/api/chat/ilse/send"), Some(&json!({ "text": text }).to_string()), None);
        assert_eq!(status, 200, "{turn}");
    }
    let (status, history) = call(&agent, "GET", &format!("{base}/api/chat/ilse/history"), None, None);
    assert_eq!(status, 200, "{history}");
    let turns = history["turns"].as_array().unwrap();
    let exchange = turns[0]["id"].as_str().unwrap().to_string();
    assert!(turns[0]["user_memory_id"].is_string(), "the fields clients read are kept: {}", turns[0]);
    // Each exchange lists its two messages' ids, and `messages` every message in order.
    let messages = history["messages"].as_array().unwrap();
    let of: Vec<(&str, &str)> =
        messages.iter().filter(|m| m["id"] != "greeting").map(|m| (m["id"].as_str().unwrap(), m["role"].as_str().unwrap())).collect();
    let ids = |t: &Value| (t["user_message_id"].as_str().unwrap().to_string(), t["reply_message_id"].as_str().unwrap().to_string());
    let ((u0, r0), (u1, r1)) = (ids(&turns[0]), ids(&turns[1]));
    assert_eq!(of, [(u0.as_str(), "user"), (r0.as_str(), "character"), (u1.as_str(), "user"), (r1.as_str(), "character")], "{history}");
    assert_eq!(messages.iter().find(|m| m["id"] == r0.as_str()).unwrap()["text"], turns[0]["reply"]);

    // Those ids are what edit and delete take.
    let edit = |message: &str, text: &str| {
        call(&agent, "POST", &format!("{base}/api/chat/ilse/edit"), Some(&json!({ "message": message, "text": text }).to_string()), None)
    };
    let (status, edited) = edit(&u0, "Is the kettle on yet?");
    assert_eq!(status, 200, "{edited}");
    let (status, edited) = edit(&r0, "It is. Sit down.");
    assert_eq!(status, 200, "{edited}");
    let (_, history) = call(&agent, "GET", &format!("{base}/api/chat/ilse/history"), None, None);
    assert_eq!((history["turns"][0]["user_text"].as_str(), history["turns"][0]["reply"].as_str()), (Some("Is the kettle on yet?"), Some("It is. Sit down.")));
    let (status, deleted) = call(&agent, "POST", &format!("{base}/api/chat/ilse/delete"), Some(&json!({ "message": r1 }).to_string()), None);
    assert_eq!(status, 200, "{deleted}");

    // An exchange's id is answered with its two message ids; anything else with what a
    // message id is.
    let (status, refused) = edit(&exchange, "x");
    assert_eq!(status, 400, "{refused}");
    let detail = refused["detail"].as_str().unwrap();
    assert!(detail.contains(&u0) && detail.contains(&r0), "{detail}");
    let (status, refused) = edit("kettle", "x");
    assert_eq!(status, 400, "{refused}");
    let detail = refused["detail"].as_str().unwrap();
    assert!(detail.contains("-u") && detail.contains("-r") && detail.contains("messages[].id") && detail.contains("reply_message_id"), "{detail}");
}

/// A game master's input longer than the models' context is refused before the round
/// starts — 413 over HTTP, a clear error from the CLI — and nothing of it is stored (it
/// used to be sent whole to the Director and kept in the transcript).
#[test]
fn a_round_input_too_long_for_the_models_is_refused_before_anything_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = slow_play(dir.path(), 0);
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();
    for repeat in [2_000, 12_000] {
        let long = json!({ "input": "The tide came in over the sea wall. ".repeat(repeat) }).to_string();
        let (status, body) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/round"), Some(&long), None);
        assert_eq!(status, 413, "{body}");
        assert!(body["detail"].as_str().unwrap().starts_with("the message is too long"), "{body}");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap(), "scene", "round", &scene])
        .arg("The tide came in over the sea wall. ".repeat(2_000))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "the CLI refuses it too");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the message is too long") && stderr.contains("shorten or split it"), "{stderr}");
    let (status, messages) = call(&agent, "GET", &format!("{base}/api/scene/{scene}/messages"), None, None);
    assert_eq!(status, 200);
    assert_eq!(messages, json!([]), "nothing was stored");
    // A message that fits still plays.
    let (status, body) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/round"), Some(r#"{"input": "I light the lamp."}"#), None);
    assert_eq!(status, 202, "{body}");
}

/// A provider that fails is the provider's fault whichever chat route met it: send,
/// regenerate and continue all answer 502 (the redraws used to answer 400, as if the
/// client had asked wrongly), while asking for what cannot be done stays a 400.
#[test]
fn a_provider_failure_is_a_502_on_every_chat_route() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    let script_with = |reply: Value| {
        let rules = json!([{ "when": { "system_contains": "Roleplay as" }, "reply": reply }]);
        std::fs::write(&script, json!({ "rules": rules, "default": "They talked over tea." }).to_string()).unwrap();
    };
    script_with(json!("[Ilse Marrow]: The kettle's on."));
    let paths = paths(dir.path(), &script);
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    lorekeeper::companion::demo::ensure(&store).unwrap();
    drop(store);
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();

    let (status, body) = call(&agent, "POST", &format!("{base}/api/chat/ilse/regenerate"), None, None);
    assert_eq!(status, 400, "nothing to regenerate yet is the request's fault: {body}");
    let (status, body) = call(&agent, "POST", &format!("{base}/api/chat/ilse/send"), Some(r#"{"text": "Is the kettle on?"}"#), None);
    assert_eq!(status, 200, "{body}");
    // Each call reads the script afresh: from now on the provider refuses.
    script_with(json!({ "fail": { "kind": "http", "status": 401, "message": "the key was revoked" } }));
    for action in ["regenerate", "continue"] {
        let (status, body) = call(&agent, "POST", &format!("{base}/api/chat/ilse/{action}"), None, None);
        assert_eq!(status, 502, "{action}: {body}");
        assert!(body["detail"].as_str().unwrap().contains("the key was revoked"), "{action}: {body}");
    }
    let (status, body) = call(&agent, "POST", &format!("{base}/api/chat/ilse/send"), Some(r#"{"text": "Hello?"}"#), None);
    assert_eq!(status, 502, "{body}");
    let (status, body) = call(&agent, "POST", &format!("{base}/api/chat/ilse/edit"), Some(r#"{"message": "no-such-turn-r", "text": "x"}"#), None);
    assert_eq!(status, 400, "{body}");
}

/// A body over a route's limit is answered 413 with `{"detail"}` like every other error
/// — on the predecessor's routes, on memory curation, on a round — and a client that
/// sends all of a large upload before reading gets that answer, not a reset connection.
#[test]
fn an_oversized_body_is_a_json_413_on_every_route() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path(), &data("identity/script.json"));
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();
    let three_mb = json!({ "text": "x".repeat(3 << 20) }).to_string();
    let ten_mb = json!({ "input": "x".repeat(10 << 20) }).to_string();
    for (path, body) in [("/api/character/start", &three_mb), ("/api/memory/some-id/edit", &three_mb), ("/api/scene/anything/round", &ten_mb)] {
        let (status, answer) = call(&agent, "POST", &format!("{base}{path}"), Some(body), None);
        assert_eq!(status, 413, "{path}: {answer}");
        let detail = answer["detail"].as_str().unwrap_or_else(|| panic!("{path}: not a JSON error: {answer}"));
        assert!(detail.contains("larger than") && detail.contains(path), "{path}: {detail}");
    }
    // The server still answers on, and an import may be larger than a JSON body.
    let (status, body) = call(&agent, "POST", &format!("{base}/api/library/import?name=big.json"), Some(&three_mb), None);
    assert_eq!(status, 400, "refused for what it is, not for its size: {body}");
    let (status, _) = call(&agent, "GET", &format!("{base}/api/scenes"), None, None);
    assert_eq!(status, 200);
}

/// A field a route does not take is refused by name, not ignored: on routes that take
/// no body, on a chat action that takes other fields, on a message delete. The start
/// body is the predecessor's entry agent's output and may carry more than we read, as
/// it did there; a near miss of one of its fields is still named.
#[test]
fn a_field_a_route_does_not_take_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = slow_play(dir.path(), 0);
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();
    let (status, turn) = call(&agent, "POST", &format!("{base}/api/chat/ilse/send"), Some(r#"{"text": "Is the kettle on?"}"#), None);
    assert_eq!(status, 200, "{turn}");
    let turn_id = turn["id"].as_str().unwrap();
    for (path, sent, named) in [
        (format!("/api/scene/{scene}/undo"), r#"{"rounds": 3}"#.to_string(), "`rounds`"),
        (format!("/api/scene/{scene}/cancel"), r#"{"bogus": true}"#.to_string(), "`bogus`"),
        (format!("/api/scene/{scene}/message/1/delete"), r#"{"text": "gone"}"#.to_string(), "`text`"),
        ("/api/chat/ilse/undo".to_string(), r#"{"index": 9}"#.to_string(), "`index`"),
        ("/api/chat/ilse/regenerate".to_string(), r#"{"text": "again"}"#.to_string(), "`text`"),
        ("/api/chat/ilse/swipe".to_string(), r#"{"index": 0, "message": "x"}"#.to_string(), "`message`"),
        ("/api/chat/ilse/delete".to_string(), json!({ "message": format!("{turn_id}-u"), "text": "x" }).to_string(), "`text`"),
        ("/api/character/start".to_string(), json!({ "characters": [{ "name": "Mira", "concept": "A keeper." }], "mode": "fast", "auto_aprove": true }).to_string(), "`auto_approve`"),
    ] {
        let (status, body) = call(&agent, "POST", &format!("{base}{path}"), Some(&sent), None);
        assert_eq!(status, 400, "{path} {sent}: {body}");
        assert!(body["detail"].as_str().unwrap().contains(named), "{path} {sent}: {body}");
    }
    // Nothing was done: the exchange is still there, and no run was started.
    let (_, history) = call(&agent, "GET", &format!("{base}/api/chat/ilse/history"), None, None);
    assert_eq!(history["turns"].as_array().unwrap().len(), 1, "{history}");
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    let runs: i64 = store.with(|c| Ok(c.query_row("SELECT count(*) FROM identity_runs", [], |r| r.get(0))?)).unwrap();
    assert_eq!(runs, 0);
    // Empty bodies and `{}` are still fine, and the entry agent's own extra fields too.
    let (status, body) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/cancel"), Some("{}"), None);
    assert_eq!(status, 200, "{body}");
    let (status, body) = call(&agent, "POST", &format!("{base}/api/chat/ilse/undo"), None, None);
    assert_eq!(status, 200, "{body}");
    let start = json!({ "characters": [{ "name": "Mira", "concept": "A keeper." }], "storyline": {}, "mode": "fast", "model": "entry-v2", "world": { "name": "Greyhollow" } });
    let (status, body) = call(&agent, "POST", &format!("{base}/api/character/start"), Some(&start.to_string()), None);
    assert_eq!(status, 200, "{body}");
}

/// A method and a path with its parameters filled in, sent as the server would be.
fn send_as(agent: &ureq::Agent, method: &str, url: &str, body: Option<&str>) -> (u16, Value) {
    let response = match method {
        "get" => agent.get(url).call(),
        "delete" => agent.delete(url).call(),
        "put" => agent.put(url).header("Content-Type", "application/json").send(body.unwrap_or("{}")),
        _ => agent.post(url).header("Content-Type", "application/json").send(body.unwrap_or("")),
    }
    .expect("the server answers");
    let status = response.status().as_u16();
    let text = response.into_body().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// The OpenAPI document is checked against the real routes: every documented operation
/// is served (no 404 "no endpoint", no 405); every JSON body is an object whose every
/// documented field the handler takes, and (beyond the predecessor's routes, which take
/// what its entry agent sends) a field it does not document is refused; an upload is
/// binary. The memory routes' bodies used to be documented as strings and the import
/// as an array of integers.
#[test]
fn the_openapi_document_matches_the_real_routes() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path(), &data("identity/script.json"));
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();
    let (status, doc) = call(&agent, "GET", &format!("{base}/api/openapi.json"), None, None);
    assert_eq!(status, 200);
    let resolve = |schema: &Value| -> Value {
        match schema["$ref"].as_str() {
            Some(r) => doc["components"]["schemas"][r.rsplit('/').next().unwrap()].clone(),
            None => schema.clone(),
        }
    };
    let dummy = |property: &Value| -> Value {
        let kind = match &property["type"] {
            Value::String(t) => t.clone(),
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).find(|t| *t != "null").unwrap_or("object").to_string(),
            _ => "object".into(),
        };
        match kind.as_str() {
            "string" => json!("x"),
            "integer" | "number" => json!(0),
            "boolean" => json!(true),
            "array" => json!([]),
            _ => json!({}),
        }
    };
    let mut bodies = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let action = match path.as_str() {
            p if p.contains("/cast/") => "add",
            _ => "edit",
        };
        let url = format!("{base}{path}").replace("{number}", "1").replace("{n}", "1").replace("{action}", action);
        let url = fill_parameters(&url);
        for (method, operation) in item.as_object().unwrap() {
            let (status, answer) = send_as(&agent, method, &url, Some("{}"));
            let detail = answer["detail"].as_str().unwrap_or_default();
            assert!(status != 405 && !detail.starts_with("no endpoint"), "{method} {path} is documented but not served: {status} {answer}");
            let Some(content) = operation["requestBody"]["content"].as_object() else { continue };
            if let Some(upload) = content.get("application/octet-stream") {
                let schema = resolve(&upload["schema"]);
                assert_eq!((schema["type"].as_str(), schema["format"].as_str()), (Some("string"), Some("binary")), "{path}: {schema}");
                continue;
            }
            let schema = resolve(&content["application/json"]["schema"]);
            assert_eq!(schema["type"], "object", "{method} {path}: the body is an object: {schema}");
            let properties = schema["properties"].as_object().unwrap_or_else(|| panic!("{path}: no fields documented: {schema}"));
            assert!(!properties.is_empty(), "{path}");
            bodies += 1;
            for (field, property) in properties {
                let sent = json!({ field.clone(): dummy(property) }).to_string();
                let (status, answer) = send_as(&agent, method, &url, Some(&sent));
                let detail = answer["detail"].as_str().unwrap_or_default();
                assert!(!detail.contains("unknown field"), "{method} {path} documents `{field}` but refuses it: {status} {answer}");
            }
            if !path.starts_with("/api/character/") {
                let (status, answer) = send_as(&agent, method, &url, Some(r#"{"zz_undocumented": 1}"#));
                assert_eq!(status, 400, "{method} {path}: {answer}");
                assert!(answer["detail"].as_str().unwrap_or_default().contains("zz_undocumented"), "{method} {path}: {answer}");
            }
        }
    }
    assert!(bodies >= 12, "every JSON body was checked: {bodies}");
    for (path, fields) in [("/api/memory/{id}/pin", &["pinned"][..]), ("/api/memory/{id}/edit", &["text"]), ("/api/memory/forget", &["session"]), ("/api/memory/model", &["name"])] {
        let schema = resolve(&doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]);
        let documented: BTreeSet<&str> = schema["properties"].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(documented, fields.iter().copied().collect(), "{path}");
    }
    let send = &doc["paths"]["/api/chat/{character}/send"]["post"]["responses"];
    for status in ["200", "400", "404", "409", "413", "502"] {
        assert!(send.get(status).is_some(), "send documents {status}: {send}");
    }
}

/// `{anything}` in a URL as a name that is not there.
fn fill_parameters(url: &str) -> String {
    let mut out = String::new();
    let mut rest = url;
    while let Some(open) = rest.find('{') {
        let close = rest[open..].find('}').map_or(rest.len(), |c| open + c + 1);
        out.push_str(&rest[..open]);
        out.push_str("no-such-thing");
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

/// A browser front end with `--token` and `--cors`: its WebSocket carries the token as a
/// subprotocol or as `access_token` (a browser cannot set `Authorization` on one), and
/// its preflight allows DELETE, so a memory can be deleted from the page.
#[test]
fn a_browser_front_end_authenticates_its_websocket_and_may_delete() {
    use tungstenite::client::IntoClientRequest;
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = slow_play(dir.path(), 0);
    let token = "br0wser-Token_42";
    let server = lorekeeper::serve::start(
        engine::start(paths.clone()).unwrap(),
        ServeOptions { addr: "127.0.0.1:0".parse().unwrap(), token: Some(token.into()), cors: Some("https://gm.example".into()) },
    )
    .unwrap();
    let socket = format!("ws://{}/ws/scene/{scene}", server.addr);
    let with_protocols = |protocols: &str| {
        let mut request = socket.as_str().into_client_request().unwrap();
        request.headers_mut().insert("Sec-WebSocket-Protocol", protocols.parse().unwrap());
        request.headers_mut().insert("Origin", "https://gm.example".parse().unwrap());
        tungstenite::connect(request)
    };
    let (_, response) = with_protocols(&format!("lorekeeper, bearer.{token}")).expect("the token as a subprotocol is taken");
    let chosen = response.headers().get("sec-websocket-protocol").and_then(|v| v.to_str().ok());
    assert_eq!(chosen, Some("lorekeeper"), "the server names the protocol back, never the token");
    assert!(with_protocols("lorekeeper, bearer.wrong").is_err(), "a wrong token is refused");
    assert!(tungstenite::connect(socket.as_str()).is_err(), "no token is refused");
    assert!(tungstenite::connect(format!("{socket}?access_token={token}")).is_ok(), "the token as access_token is taken");
    assert!(tungstenite::connect(format!("{socket}?access_token=wrong")).is_err());
    // `access_token` is for a handshake only: a plain request still needs the header.
    let (status, _) = call(&http(), "GET", &format!("http://{}/api/scenes?access_token={token}", server.addr), None, None);
    assert_eq!(status, 401);

    // The preflight of a DELETE, then the DELETE itself.
    let agent = http();
    let url = format!("http://{}/api/memory/no-such-memory", server.addr);
    let preflight = agent
        .run(
            ureq::http::Request::builder()
                .method("OPTIONS")
                .uri(&url)
                .header("Origin", "https://gm.example")
                .header("Access-Control-Request-Method", "DELETE")
                .header("Access-Control-Request-Headers", "authorization")
                .body(())
                .unwrap(),
        )
        .unwrap();
    let allowed = preflight.headers().get("access-control-allow-methods").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    assert!(allowed.split(',').any(|m| m.trim() == "DELETE"), "{allowed}");
    let deleted = agent.delete(&url).header("Origin", "https://gm.example").header("Authorization", &format!("Bearer {token}")).call().unwrap();
    assert_eq!(deleted.status().as_u16(), 404, "the route was reached: the memory is not there");
    assert_eq!(deleted.headers().get("access-control-allow-origin").and_then(|v| v.to_str().ok()), Some("https://gm.example"));
}

/// The CLI plays a round and sends a chat message on the library a server serves: its
/// events never reach the server, yet the scene and chat sockets hear them (as the
/// identity socket hears another process's approvals), marked `elsewhere`, and what the
/// server did itself is not said twice.
#[test]
fn scene_and_chat_sockets_hear_what_another_process_plays() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = slow_play(dir.path(), 0);
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();
    let scene_ws = listen(&format!("ws://{}/ws/scene/{scene}", server.addr));
    let chat_ws = listen(&format!("ws://{}/ws/chat/ilse", server.addr));
    std::thread::sleep(Duration::from_millis(300));
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
            .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };

    // A round of the server's own first, then one the CLI plays.
    let (status, body) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/round"), Some(r#"{"input": "I light the lamp."}"#), None);
    assert_eq!(status, 202, "{body}");
    let mut seen = Vec::new();
    until(&scene_ws, &mut seen, |m| m["type"] == "roundCompleted");
    cli(&["scene", "round", &scene, "CLI-ROUND: the door bangs open."]);
    let elsewhere = until(&scene_ws, &mut seen, |m| m["type"] == "roundCompleted" && m["elsewhere"] == true);
    assert_eq!(elsewhere["round"], 2, "{elsewhere}");
    let said: Vec<&str> = elsewhere["messages"].as_array().unwrap().iter().filter_map(|m| m["content"].as_str()).collect();
    assert!(said.iter().any(|c| c.contains("CLI-ROUND")), "the CLI's round, as stored: {said:?}");
    let completed: Vec<(u64, bool)> =
        seen.iter().filter(|m| m["type"] == "roundCompleted").map(|m| (m["round"].as_u64().unwrap(), m["elsewhere"] == true)).collect();
    assert_eq!(completed, [(1, false), (2, true)], "each round is said once");

    cli(&["chat", "send", "--character", "ilse", "CLI-CHAT: is anyone there?"]);
    let mut chat_seen = Vec::new();
    let committed = until(&chat_ws, &mut chat_seen, |m| m["type"] == "turn_committed");
    assert_eq!((committed["elsewhere"].as_bool(), committed["turn"]["user_text"].as_str()), (Some(true), Some("CLI-CHAT: is anyone there?")), "{committed}");
    assert!(committed["turn"]["reply"].as_str().is_some_and(|r| !r.is_empty()), "{committed}");
}

/// A round refused because its models cannot be reached is the provider's fault, not the
/// request's: 502, as a chat answers (scene refusals now carry their fault as chat
/// failures do, where the status was guessed from the message and this was a 400).
#[test]
fn a_round_whose_provider_cannot_start_is_a_502() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = slow_play(dir.path(), 0);
    let mut config = Config::load(&paths.config_file).unwrap();
    config.upsert_profile(ProviderProfile {
        name: "script".into(),
        kind: ProviderKind::Scripted,
        model: "serve-script".into(),
        path: Some(dir.path().join("no-such-script.json")),
        ..Default::default()
    });
    config.save(&paths.config_file).unwrap();
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let (status, body) = call(&http(), "POST", &format!("{base}/api/scene/{scene}/round"), Some(r#"{"input": "I light the lamp."}"#), None);
    assert_eq!(status, 502, "{body}");
    let (_, messages) = call(&http(), "GET", &format!("{base}/api/scene/{scene}/messages"), None, None);
    assert_eq!(messages, json!([]));
}

/// A library with the demo world, a lorebook and an identity run, served.
fn authoring_library(dir: &Path) -> (ServerHandle, String, ureq::Agent) {
    let paths = paths(dir, &data("identity/script.json"));
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    lorekeeper::scene::demo::ensure(&store).unwrap().unwrap();
    drop(store);
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();
    let book = std::fs::read_to_string(data("interop/lorebook_v3_full.json")).unwrap();
    let imported = agent.post(&format!("{base}/api/library/import?name=book.json")).send(book).unwrap();
    assert_eq!(imported.status().as_u16(), 200);
    (server, base, agent)
}

/// What a front end reads to build its authoring screens: the tree of worlds, the
/// characters to cast, the lorebooks to attach, the personas to play, the identity runs.
#[test]
fn a_front_end_reads_the_authoring_tree_characters_lorebooks_personas_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, base, agent) = authoring_library(dir.path());
    let start = json!({ "characters": [{ "name": "Mira Voss", "concept": "A keeper." }], "storyline": {}, "mode": "fast" });
    let (status, started) = call(&agent, "POST", &format!("{base}/api/character/start"), Some(&start.to_string()), None);
    assert_eq!(status, 200, "{started}");
    let run = started["character_id"].as_str().unwrap_or_else(|| panic!("{started}")).to_string();

    let (status, tree) = call(&agent, "GET", &format!("{base}/api/worlds"), None, None);
    assert_eq!(status, 200, "{tree}");
    let world = &tree["worlds"][0];
    assert!(world["id"].is_string() && world["name"].is_string(), "{tree}");
    let campaign = &world["campaigns"][0];
    assert_eq!(campaign["persona"]["name"], "Juno", "{campaign}");
    assert!(campaign["arcs"][0]["scenes"][0]["id"].is_string(), "{campaign}");

    let (status, characters) = call(&agent, "GET", &format!("{base}/api/characters"), None, None);
    assert_eq!(status, 200);
    let names: BTreeSet<&str> = characters.as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
    assert!(names.is_superset(&BTreeSet::from(["Wren Talloway", "Ossian Vale", "Marguerite Siltborne"])), "{characters}");

    let (status, books) = call(&agent, "GET", &format!("{base}/api/lorebooks"), None, None);
    assert_eq!(status, 200);
    assert_eq!(books.as_array().unwrap().len(), 2, "the demo's and the imported one: {books}");
    assert!(books.as_array().unwrap().iter().all(|b| b["entries"].as_u64().unwrap() > 0), "{books}");
    let attached = campaign["lorebooks"][0][0].as_str().unwrap();
    assert!(books.as_array().unwrap().iter().any(|b| b["id"] == attached), "the tree's lorebook ids are the list's: {books}");

    let (status, personas) = call(&agent, "GET", &format!("{base}/api/personas"), None, None);
    assert_eq!(status, 200);
    assert_eq!(personas.as_array().unwrap().iter().filter_map(|p| p["name"].as_str()).collect::<Vec<_>>(), ["Juno"], "{personas}");

    let (status, runs) = call(&agent, "GET", &format!("{base}/api/identity/runs"), None, None);
    assert_eq!(status, 200);
    let found = runs.as_array().unwrap().iter().find(|r| r["character_id"] == run.as_str()).unwrap_or_else(|| panic!("{runs}"));
    assert_eq!(found["mode"], "fast", "{found}");
    assert!(found["status"].is_string() && found["name"] == "Mira Voss", "{found}");
    // The predecessor's own route still answers for the id the list gives.
    let (status, _) = call(&agent, "GET", &format!("{base}/api/character/{run}/status"), None, None);
    assert_eq!(status, 200);
}

/// A front end writes a character and a lorebook from scratch, as `character new` and
/// `lorebook new` do; a name already taken, or none, is a 400.
#[test]
fn a_front_end_writes_a_character_and_a_lorebook_from_scratch() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, base, agent) = authoring_library(dir.path());
    let body = json!({ "name": "Odalys Fenwright", "description": "A reed-cutter of the fen.", "first_mes": "Mind the soft ground.", "tags": ["fen"] });
    let (status, made) = author_call(&agent, "post", &format!("{base}/api/characters"), Some(body));
    assert_eq!(status, 200, "{made}");
    assert_eq!((made["action"].as_str(), made["kind"].as_str(), made["name"].as_str()), (Some("created"), Some("character"), Some("Odalys Fenwright")));
    let (_, characters) = call(&agent, "GET", &format!("{base}/api/characters"), None, None);
    let listed = characters.as_array().unwrap().iter().find(|c| c["id"] == made["id"]).unwrap_or_else(|| panic!("{characters}"));
    assert_eq!((listed["origin"].as_str(), listed["has_card"].as_bool()), (Some("manual"), Some(true)), "{listed}");
    let (status, again) = author_call(&agent, "post", &format!("{base}/api/characters"), Some(json!({ "name": "odalys fenwright" })));
    assert_eq!(status, 400, "{again}");
    let (status, _) = author_call(&agent, "post", &format!("{base}/api/characters"), Some(json!({ "name": " " })));
    assert_eq!(status, 400);

    let (status, book) = author_call(&agent, "post", &format!("{base}/api/lorebooks"), Some(json!({ "name": "Fen Lore" })));
    assert_eq!(status, 200, "{book}");
    assert_eq!((book["kind"].as_str(), book["name"].as_str()), (Some("lorebook"), Some("Fen Lore")));
    let (_, books) = call(&agent, "GET", &format!("{base}/api/lorebooks"), None, None);
    assert!(books.as_array().unwrap().iter().any(|b| b["id"] == book["id"] && b["entries"] == 0), "{books}");
    let (status, again) = author_call(&agent, "post", &format!("{base}/api/lorebooks"), Some(json!({ "name": "Fen Lore" })));
    assert_eq!(status, 400, "{again}");
}

/// POST `body` to `url` and the answer; `DELETE` when `body` is `None`.
fn author_call(agent: &ureq::Agent, method: &str, url: &str, body: Option<Value>) -> (u16, Value) {
    send_as(agent, method, url, body.map(|b| b.to_string()).as_deref())
}

/// A front end builds a world down to a scene, renames it, and deletes it again with
/// the CLI's confirmation rule; each answer is its own thing's id and name, with the tree.
#[test]
fn a_front_end_creates_edits_and_deletes_worlds_campaigns_arcs_scenes_and_personas() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, base, agent) = authoring_library(dir.path());
    let (_, characters) = call(&agent, "GET", &format!("{base}/api/characters"), None, None);
    let id_of = |name: &str| characters.as_array().unwrap().iter().find(|c| c["name"] == name).unwrap()["id"].as_str().unwrap().to_string();

    let (status, world) = author_call(&agent, "post", &format!("{base}/api/worlds"), Some(json!({ "name": "Emberfall", "description": "Ash and cinder." })));
    assert_eq!(status, 200, "{world}");
    assert_eq!((world["action"].as_str(), world["kind"].as_str(), world["name"].as_str()), (Some("created"), Some("world"), Some("Emberfall")));
    let world_id = world["id"].as_str().unwrap().to_string();
    assert!(world["tree"]["worlds"].as_array().unwrap().iter().any(|w| w["id"] == world_id.as_str()), "{world}");

    // A name another world goes by is refused; a name two worlds start with is the
    // request's to make precise: a 400 naming them.
    let (_, twin) = author_call(&agent, "post", &format!("{base}/api/worlds"), Some(json!({ "name": "Umbra" })));
    let (status, taken) = author_call(&agent, "post", &format!("{base}/api/worlds"), Some(json!({ "name": "umbra" })));
    assert_eq!(status, 400, "{taken}");
    let (_, twin2) = author_call(&agent, "post", &format!("{base}/api/worlds"), Some(json!({ "name": "Umbral Reach" })));
    let (status, ambiguous) = author_call(&agent, "delete", &format!("{base}/api/world/Umb?confirm=true"), None);
    assert_eq!(status, 400, "{ambiguous}");
    assert!(ambiguous.to_string().contains("more than one name matches") && ambiguous.to_string().contains("Umbral Reach"), "{ambiguous}");
    assert_eq!(twin["name"], "Umbra", "{twin}");
    for id in [&twin["id"], &twin2["id"]] {
        let (status, _) = author_call(&agent, "delete", &format!("{base}/api/world/{}?confirm=true", id.as_str().unwrap()), None);
        assert_eq!(status, 200);
    }

    // By name, as the CLI takes it.
    let (status, campaign) = author_call(&agent, "post", &format!("{base}/api/world/Emberfall/campaigns"), Some(json!({ "name": "The Long Ember" })));
    assert_eq!(status, 200, "{campaign}");
    let campaign_id = campaign["id"].as_str().unwrap().to_string();
    let (status, arc) = author_call(&agent, "post", &format!("{base}/api/campaign/{campaign_id}/arcs"), Some(json!({ "name": "Kindling", "notes": "slow start" })));
    assert_eq!(status, 200, "{arc}");
    let arc_id = arc["id"].as_str().unwrap().to_string();
    let scene_body = json!({ "name": "The Forge", "description": "Hammers.", "cast": ["Wren Talloway", "Ossian Vale"], "active": ["Wren Talloway"] });
    let (status, scene) = author_call(&agent, "post", &format!("{base}/api/arc/{arc_id}/scenes"), Some(scene_body));
    assert_eq!(status, 200, "{scene}");
    assert_eq!((scene["kind"].as_str(), scene["name"].as_str()), (Some("scene"), Some("The Forge")));
    let scene_id = scene["id"].as_str().unwrap().to_string();
    let (_, view) = call(&agent, "GET", &format!("{base}/api/scene/{scene_id}"), None, None);
    let cast: BTreeSet<&str> = view["cast"].as_array().unwrap().iter().filter_map(|c| c["id"].as_str()).collect();
    let (wren, ossian) = (id_of("Wren Talloway"), id_of("Ossian Vale"));
    assert_eq!(cast, BTreeSet::from([wren.as_str(), ossian.as_str()]), "{view}");
    let active: Vec<&str> = view["cast"].as_array().unwrap().iter().filter(|c| c["active"] == true).filter_map(|c| c["id"].as_str()).collect();
    assert_eq!(active, [wren.as_str()], "{view}");
    let leaf = &scene["tree"]["worlds"].as_array().unwrap().iter().find(|w| w["id"] == world_id.as_str()).unwrap()["campaigns"][0]["arcs"][0]["scenes"][0];
    assert_eq!(leaf["id"], scene_id.as_str(), "{leaf}");

    // Edits: a rename answers with the new name; an arc has no description.
    let (status, renamed) = author_call(&agent, "post", &format!("{base}/api/campaign/{campaign_id}/edit"), Some(json!({ "name": "The Longer Ember", "notes": "n" })));
    assert_eq!(status, 200, "{renamed}");
    assert_eq!((renamed["id"].as_str(), renamed["name"].as_str(), renamed["action"].as_str()), (Some(campaign_id.as_str()), Some("The Longer Ember"), Some("updated")));
    let (status, refused) = author_call(&agent, "post", &format!("{base}/api/arc/{arc_id}/edit"), Some(json!({ "description": "no" })));
    assert_eq!(status, 400, "{refused}");
    let (status, _) = author_call(&agent, "post", &format!("{base}/api/scene/{scene_id}/edit"), Some(json!({ "notes": "Sparks fly." })));
    assert_eq!(status, 200);
    let (status, refused) = author_call(&agent, "post", &format!("{base}/api/world/{world_id}/edit"), Some(json!({ "nmae": "typo" })));
    assert_eq!(status, 400);
    assert!(refused["detail"].as_str().unwrap().contains("nmae"), "{refused}");

    // Bad fields and unknown ids.
    let (status, refused) = author_call(&agent, "post", &format!("{base}/api/worlds"), Some(json!({ "description": "no name" })));
    assert_eq!(status, 400);
    assert!(refused["detail"].as_str().unwrap().contains("name"), "{refused}");
    let (status, refused) = author_call(&agent, "post", &format!("{base}/api/worlds"), Some(json!({ "name": "  " })));
    assert_eq!(status, 400, "{refused}");
    for url in [format!("{base}/api/world/nowhere/campaigns"), format!("{base}/api/campaign/nowhere/arcs"), format!("{base}/api/arc/nowhere/scenes")] {
        let (status, refused) = author_call(&agent, "post", &url, Some(json!({ "name": "x" })));
        assert_eq!(status, 404, "{url}: {refused}");
    }
    let (status, refused) = author_call(&agent, "post", &format!("{base}/api/arc/{arc_id}/scenes"), Some(json!({ "name": "x", "cast": ["Nobody At All"] })));
    assert_eq!(status, 404, "{refused}");
    let (status, _) = author_call(&agent, "delete", &format!("{base}/api/world/nowhere"), None);
    assert_eq!(status, 404);

    // Requests at once each hear their own answer.
    let names = ["Ashen Reach", "Brass Hollow", "Cinder Vale", "Dusk Mere"];
    let requests: Vec<(&str, String)> = names.iter().map(|n| ("/api/worlds", json!({ "name": n }).to_string())).collect();
    let answers = at_once(&base, &requests);
    for (name, (status, answer)) in names.iter().zip(&answers) {
        assert_eq!((*status, answer["name"].as_str()), (200, Some(*name)), "{answer}");
    }
    let ids: BTreeSet<&str> = answers.iter().filter_map(|(_, a)| a["id"].as_str()).collect();
    assert_eq!(ids.len(), names.len(), "{answers:?}");

    // Personas.
    let (status, persona) = author_call(&agent, "post", &format!("{base}/api/personas"), Some(json!({ "name": "Ash", "description": "a smith's apprentice" })));
    assert_eq!(status, 200, "{persona}");
    let persona_id = persona["id"].as_str().unwrap().to_string();
    let (status, edited) = author_call(&agent, "post", &format!("{base}/api/persona/Ash/edit"), Some(json!({ "description": "a journeyman now" })));
    assert_eq!((status, edited["id"].as_str()), (200, Some(persona_id.as_str())), "{edited}");
    let (_, personas) = call(&agent, "GET", &format!("{base}/api/personas"), None, None);
    assert!(personas.as_array().unwrap().iter().any(|p| p["id"] == persona_id.as_str() && p["description"] == "a journeyman now"), "{personas}");
    let (status, gone) = author_call(&agent, "delete", &format!("{base}/api/persona/{persona_id}"), None);
    assert_eq!((status, gone["action"].as_str()), (200, Some("deleted")), "{gone}");
    let (status, _) = author_call(&agent, "delete", &format!("{base}/api/persona/{persona_id}"), None);
    assert_eq!(status, 404);

    // Deleting what holds something needs confirming, and the refusal says what would go.
    let (status, refused) = author_call(&agent, "delete", &format!("{base}/api/world/{world_id}"), None);
    assert_eq!(status, 409, "{refused}");
    let detail = refused["detail"].as_str().unwrap();
    assert!(detail.contains("1 campaign") && detail.contains("1 arc") && detail.contains("1 scene") && detail.contains("confirm"), "{detail}");
    let (_, tree) = call(&agent, "GET", &format!("{base}/api/worlds"), None, None);
    assert!(tree["worlds"].as_array().unwrap().iter().any(|w| w["id"] == world_id.as_str()), "nothing went: {tree}");
    // An empty scene goes without confirming.
    let (status, gone) = author_call(&agent, "delete", &format!("{base}/api/scene/{scene_id}"), None);
    assert_eq!(status, 200, "{gone}");
    assert_eq!((gone["kind"].as_str(), gone["id"].as_str()), (Some("scene"), Some(scene_id.as_str())));
    let (status, gone) = author_call(&agent, "delete", &format!("{base}/api/world/{world_id}?confirm=true"), None);
    assert_eq!(status, 200, "{gone}");
    assert_eq!((gone["impact"]["campaigns"].as_u64(), gone["impact"]["arcs"].as_u64()), (Some(1), Some(1)), "{gone}");
    assert!(!gone["tree"]["worlds"].as_array().unwrap().iter().any(|w| w["id"] == world_id.as_str()), "{gone}");
    let (status, refused) = author_call(&agent, "delete", &format!("{base}/api/world/{world_id}?confirm=yes"), None);
    assert_eq!(status, 400, "{refused}");
}

/// A front end sets a campaign up: its cast, the persona the user plays, its world's and
/// its own lorebooks, its trackers, facts and time, and a character's state in a scene.
#[test]
fn a_front_end_sets_up_a_campaign_cast_persona_lorebooks_state_and_a_characters_state() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, base, agent) = authoring_library(dir.path());
    let (_, tree) = call(&agent, "GET", &format!("{base}/api/worlds"), None, None);
    let world_id = tree["worlds"][0]["id"].as_str().unwrap().to_string();
    let campaign_id = tree["worlds"][0]["campaigns"][0]["id"].as_str().unwrap().to_string();
    let campaign_of = |answer: &Value| -> Value {
        answer["tree"]["worlds"][0]["campaigns"].as_array().unwrap().iter().find(|c| c["id"] == campaign_id.as_str()).unwrap().clone()
    };
    let (_, characters) = call(&agent, "GET", &format!("{base}/api/characters"), None, None);
    let wren = characters.as_array().unwrap().iter().find(|c| c["name"] == "Wren Talloway").unwrap()["id"].as_str().unwrap().to_string();

    // Cast, by the campaign's name and the character's.
    let (status, cast) = author_call(&agent, "post", &format!("{base}/api/campaign/The%20Unlit%20Night/cast/add"), Some(json!({ "character": "Wren Talloway" })));
    assert_eq!(status, 200, "{cast}");
    assert_eq!((cast["kind"].as_str(), cast["id"].as_str(), cast["name"].as_str()), (Some("cast"), Some(campaign_id.as_str()), Some("Wren Talloway")));
    assert_eq!(campaign_of(&cast)["cast"], json!([[wren, "Wren Talloway"]]), "{cast}");
    let (status, _) = author_call(&agent, "post", &format!("{base}/api/campaign/{campaign_id}/cast/add"), Some(json!({ "character": "Nobody At All" })));
    assert_eq!(status, 404);
    let (status, _) = author_call(&agent, "post", &format!("{base}/api/campaign/{campaign_id}/cast/juggle"), Some(json!({ "character": "Wren Talloway" })));
    assert_eq!(status, 404);
    let (status, cast) = author_call(&agent, "post", &format!("{base}/api/campaign/{campaign_id}/cast/remove"), Some(json!({ "character": wren })));
    assert_eq!(status, 200, "{cast}");
    assert_eq!(campaign_of(&cast)["cast"], json!([]), "{cast}");

    // The persona played: one, then nobody; a body without the field is not taken for nobody.
    let (status, _) = author_call(&agent, "post", &format!("{base}/api/personas"), Some(json!({ "name": "Ash" })));
    assert_eq!(status, 200);
    let (status, chosen) = author_call(&agent, "post", &format!("{base}/api/campaign/{campaign_id}/persona"), Some(json!({ "persona": "Ash" })));
    assert_eq!(status, 200, "{chosen}");
    assert_eq!(campaign_of(&chosen)["persona"]["name"], "Ash", "{chosen}");
    let (status, refused) = author_call(&agent, "post", &format!("{base}/api/campaign/{campaign_id}/persona"), Some(json!({})));
    assert_eq!(status, 400);
    assert!(refused["detail"].as_str().unwrap().contains("persona"), "{refused}");
    let (status, _) = author_call(&agent, "post", &format!("{base}/api/campaign/{campaign_id}/persona"), Some(json!({ "persona": "Nobody At All" })));
    assert_eq!(status, 404);
    let (status, chosen) = author_call(&agent, "post", &format!("{base}/api/campaign/{campaign_id}/persona"), Some(json!({ "persona": null })));
    assert_eq!(status, 200, "{chosen}");
    assert_eq!(campaign_of(&chosen)["persona"], Value::Null, "{chosen}");

    // Lorebooks: the imported one on the world, the demo's off the campaign.
    let (_, books) = call(&agent, "GET", &format!("{base}/api/lorebooks"), None, None);
    let imported = books.as_array().unwrap().iter().find(|b| b["name"] != "Saltmarsh Lore").unwrap()["id"].as_str().unwrap().to_string();
    let (status, attached) = author_call(&agent, "post", &format!("{base}/api/world/{world_id}/lorebook/attach"), Some(json!({ "lorebook": imported })));
    assert_eq!(status, 200, "{attached}");
    assert_eq!((attached["action"].as_str(), attached["id"].as_str()), (Some("attached"), Some(imported.as_str())));
    assert!(attached["tree"]["worlds"][0]["lorebooks"].as_array().unwrap().iter().any(|b| b[0] == imported.as_str()), "{attached}");
    let (status, detached) = author_call(&agent, "post", &format!("{base}/api/campaign/{campaign_id}/lorebook/detach"), Some(json!({ "lorebook": "Saltmarsh Lore" })));
    assert_eq!(status, 200, "{detached}");
    assert_eq!(campaign_of(&detached)["lorebooks"], json!([]), "{detached}");
    let (status, refused) = author_call(&agent, "post", &format!("{base}/api/campaign/{campaign_id}/lorebook/detach"), Some(json!({ "lorebook": "Saltmarsh Lore" })));
    assert_eq!(status, 400, "not attached there any more: {refused}");
    let (status, refused) = author_call(&agent, "post", &format!("{base}/api/world/{world_id}/lorebook/attach"), Some(json!({ "lorebook": "No Such Book" })));
    assert_eq!(status, 404, "{refused}");

    // Trackers, facts, time: one edit a request.
    let state = |edit: Value| author_call(&agent, "post", &format!("{base}/api/campaign/{campaign_id}/state"), Some(edit));
    let (status, changed) = state(json!({ "tracker": "fog", "value": "thin" }));
    assert_eq!(status, 200, "{changed}");
    assert_eq!(campaign_of(&changed)["trackers"]["fog"], "thin");
    let (status, changed) = state(json!({ "tracker": "lamp_oil_hours" }));
    assert_eq!(status, 200);
    assert!(campaign_of(&changed)["trackers"].get("lamp_oil_hours").is_none(), "{changed}");
    let (status, changed) = state(json!({ "add_fact": "The bell rang twice." }));
    assert_eq!(status, 200);
    assert!(campaign_of(&changed)["facts"].as_array().unwrap().contains(&json!("The bell rang twice.")), "{changed}");
    let (status, changed) = state(json!({ "remove_fact": "The relief ship is two days late." }));
    assert_eq!(status, 200);
    assert_eq!(campaign_of(&changed)["facts"], json!(["The bell rang twice."]), "{changed}");
    let (status, changed) = state(json!({ "elapsed_minutes": 90 }));
    assert_eq!(status, 200);
    assert_eq!(campaign_of(&changed)["elapsed_minutes"], 90);
    for bad in [json!({}), json!({ "add_fact": "a", "elapsed_minutes": 1 }), json!({ "value": 3 })] {
        let (status, refused) = state(bad.clone());
        assert_eq!(status, 400, "{bad}: {refused}");
    }

    // A character's state in a scene, the fields given only.
    let scene = tree["worlds"][0]["campaigns"][0]["arcs"][0]["scenes"][0]["id"].as_str().unwrap().to_string();
    let url = format!("{base}/api/scene/{scene}/character/Wren%20Talloway/state");
    let (status, changed) = author_call(&agent, "post", &url, Some(json!({ "mood": "wary", "location": "the lamp room" })));
    assert_eq!(status, 200, "{changed}");
    assert_eq!((changed["kind"].as_str(), changed["id"].as_str(), changed["name"].as_str()), (Some("character state"), Some(scene.as_str()), Some("Wren Talloway")));
    let (_, view) = call(&agent, "GET", &format!("{base}/api/scene/{scene}"), None, None);
    let member = view["cast"].as_array().unwrap().iter().find(|c| c["id"] == wren.as_str()).unwrap();
    assert_eq!((member["state"]["mood"].as_str(), member["state"]["location"].as_str()), (Some("wary"), Some("the lamp room")), "{member}");
    let (status, _) = author_call(&agent, "post", &url, Some(json!({})));
    assert_eq!(status, 400);
    let (status, refused) = author_call(&agent, "post", &url, Some(json!({ "mod": "x" })));
    assert_eq!(status, 400);
    assert!(refused["detail"].as_str().unwrap().contains("mod"), "{refused}");
    let (status, _) = author_call(&agent, "post", &format!("{base}/api/scene/nowhere/character/Wren%20Talloway/state"), Some(json!({ "mood": "x" })));
    assert_eq!(status, 404);
}

/// A chat's Author's Note over HTTP: written whole with `PUT`, read back, sent with the
/// next message where it says, refused with the field named when wrong, removed with
/// `DELETE` — the command `chat note` sends.
#[test]
fn a_chats_authors_note_is_written_read_and_removed_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, _) = slow_play(dir.path(), 0);
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();
    let url = format!("{base}/api/chat/ilse/note");
    let (status, none) = send_as(&agent, "get", &url, None);
    assert_eq!((status, &none["author_note"], &none["sent_with_next_message"]), (200, &Value::Null, &json!(true)), "{none}");
    let note = json!({ "text": "{{char}} hums while she works.", "depth": 0, "every": 2, "role": "system" });
    let (status, kept) = send_as(&agent, "put", &url, Some(&note.to_string()));
    assert_eq!(status, 200, "{kept}");
    assert_eq!(kept["author_note"], json!({ "text": "{{char}} hums while she works.", "depth": 0, "every": 2, "role": "system", "position": "in_chat" }));
    assert_eq!((&kept["user_messages"], &kept["sent_with_next_message"]), (&json!(0), &json!(false)), "every 2: not the first message");
    let send = |text: &str| {
        let (status, turn) = call(&agent, "POST", &format!("{base}/api/chat/ilse/send"), Some(&json!({ "text": text }).to_string()), None);
        assert_eq!(status, 200, "{turn}");
        turn["packet"]["messages"][1]["content"].as_str().unwrap_or_else(|| panic!("{turn}")).to_string()
    };
    assert!(!send("Is the kettle on?").contains("hums"));
    // Depth 0: after the user's new message (SillyTavern's depth 0, the chat's end).
    assert!(send("Did the ferry come?").contains("<after_input>\n[system note] Ilse Marrow hums while she works.\n</after_input>"));
    for (bad, field) in [(json!({ "text": "x", "role": "narrator" }), "role"), (json!({ "text": "x", "positon": "before" }), "positon"), (json!({ "depth": 2 }), "text")] {
        let (status, refused) = send_as(&agent, "put", &url, Some(&bad.to_string()));
        assert_eq!(status, 400, "{refused}");
        assert!(refused["detail"].as_str().unwrap().contains(field), "{refused}");
    }
    let (status, gone) = send_as(&agent, "delete", &url, None);
    assert_eq!((status, &gone["author_note"]), (200, &Value::Null), "{gone}");
    assert!(!send("And now?").contains("hums"));
    let (status, missing) = send_as(&agent, "get", &format!("{base}/api/chat/nobody/note"), None);
    assert_eq!(status, 404, "{missing}");
}

/// A SillyTavern user's whole chat over HTTP, as `lorekeeper chat` and `persona use
/// --chat` do it (the door had only send, history and message controls): a persona
/// chosen and put down, a branch, a new chat, the saved chats listed, renamed, opened
/// and deleted, the chat exported in three formats and a chat file imported; and each
/// message of the history names its speaker.
#[test]
fn a_chat_is_branched_renewed_saved_exported_and_imported_over_http_as_the_cli_does() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, _) = slow_play(dir.path(), 0);
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    store.with(|c| lorekeeper::character::insert_persona(c, "Tamsin", "A courier.").map(|_| ())).unwrap();
    drop(store);
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();
    let chat = |method: &str, path: &str, body: Option<Value>| {
        let body = body.map(|b| b.to_string());
        send_as(&agent, method, &format!("{base}/api/chat/ilse{path}"), body.as_deref())
    };
    // The persona played in this chat, and none.
    let (status, changed) = chat("post", "/persona", Some(json!({ "persona": "Tamsin" })));
    assert_eq!((status, changed["action"].as_str()), (200, Some("persona Tamsin")), "{changed}");
    for text in ["Is the kettle on?", "Did the ferry come?"] {
        let (status, turn) = chat("post", "/send", Some(json!({ "text": text })));
        assert_eq!(status, 200, "{turn}");
    }
    let (status, changed) = chat("post", "/persona", Some(json!({ "persona": null })));
    assert_eq!((status, changed["action"].as_str()), (200, Some("persona none")), "{changed}");
    for (bad, named) in [(json!({}), "persona"), (json!({ "persona": "Tamsin", "chat": true }), "chat")] {
        let (status, refused) = chat("post", "/persona", Some(bad));
        assert_eq!(status, 400, "{refused}");
        assert!(refused["detail"].as_str().unwrap().contains(named), "{refused}");
    }
    // Every message names its speaker: the persona the user played then, the character.
    let (_, history) = chat("get", "/history", None);
    assert_eq!(history["user"]["name"], "User", "{history}");
    let names: Vec<&str> = history["messages"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap_or("?")).collect();
    assert_eq!(names, ["Ilse Marrow", "Tamsin", "Ilse Marrow", "Tamsin", "Ilse Marrow"], "{history}");
    let first_reply = history["turns"][0]["reply_message_id"].as_str().unwrap().to_string();

    // Branch at the first reply: the original is saved whole.
    let (status, changed) = chat("post", "/branch", Some(json!({ "message": first_reply })));
    assert_eq!(status, 200, "{changed}");
    assert!(changed["action"].as_str().unwrap().starts_with("branched"), "{changed}");
    let (status, refused) = chat("post", "/branch", Some(json!({ "message": "no-such-message-r" })));
    assert_eq!(status, 400, "{refused}");
    let (_, history) = chat("get", "/history", None);
    assert_eq!(history["turns"].as_array().unwrap().len(), 1);
    // A new chat: the one played is saved, the new one holds the greeting alone.
    let (status, changed) = chat("post", "/new", None);
    assert_eq!(status, 200, "{changed}");
    assert!(changed["action"].as_str().unwrap().starts_with("new chat (the chat before is saved chat"), "{changed}");
    let (_, history) = chat("get", "/history", None);
    assert_eq!(history["turns"].as_array().unwrap().len(), 0, "{history}");
    assert!(history["greeting"].as_str().is_some_and(|g| !g.is_empty()), "the greeting opens the new chat: {history}");
    let (status, listed) = chat("get", "/chats", None);
    assert_eq!(status, 200, "{listed}");
    let saved = listed["saved"].as_array().unwrap().clone();
    let titles: Vec<(&str, u64)> = saved.iter().map(|c| (c["title"].as_str().unwrap(), c["turns"].as_u64().unwrap())).collect();
    assert_eq!(titles, [("put aside for a new chat", 1), (format!("before the branch at {first_reply}").as_str(), 2)], "{listed}");
    let (original, put_aside) = (saved[1]["id"].as_str().unwrap().to_string(), saved[0]["id"].as_str().unwrap().to_string());

    // Renamed, opened, deleted.
    let (status, renamed) = chat("post", &format!("/chats/{original}/rename"), Some(json!({ "title": "Kettle and ferry" })));
    assert_eq!(status, 200, "{renamed}");
    assert_eq!(renamed["saved"][1]["title"], "Kettle and ferry", "{renamed}");
    let (status, refused) = chat("post", &format!("/chats/{original}/rename"), Some(json!({ "title": "  " })));
    assert_eq!(status, 400, "{refused}");
    let (status, refused) = chat("post", "/chats/no-such-chat/rename", Some(json!({ "title": "x" })));
    assert_eq!(status, 404, "{refused}");
    let (status, changed) = chat("post", &format!("/chats/{original}/open"), None);
    assert_eq!((status, changed["action"].as_str()), (200, Some("opened")), "the empty new chat is not worth saving: {changed}");
    let (_, history) = chat("get", "/history", None);
    assert_eq!(history["turns"].as_array().unwrap().len(), 2);
    let (status, left) = chat("delete", &format!("/chats/{put_aside}"), None);
    assert_eq!((status, left["saved"].as_array().map(Vec::len)), (200, Some(0)), "{left}");
    let (status, refused) = chat("delete", &format!("/chats/{put_aside}"), None);
    assert_eq!(status, 404, "{refused}");
    let (status, refused) = chat("post", &format!("/chats/{put_aside}/open"), None);
    assert_eq!(status, 404, "{refused}");

    // Exported as SillyTavern's chat file, Markdown and JSON.
    let export = |format: &str| {
        let response = agent.get(&format!("{base}/api/chat/ilse/export?format={format}")).call().expect("the server answers");
        let status = response.status().as_u16();
        let kind = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        (status, kind, response.into_body().read_to_string().unwrap_or_default())
    };
    let (status, kind, jsonl) = export("jsonl");
    assert_eq!(status, 200, "{jsonl}");
    assert!(kind.starts_with("application/jsonl"), "{kind}");
    let lines: Vec<Value> = jsonl.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 6, "a header, the greeting, two exchanges: {jsonl}");
    assert_eq!(lines[2]["mes"], "Is the kettle on?");
    let (status, kind, markdown) = export("markdown");
    assert_eq!(status, 200);
    assert!(kind.starts_with("text/markdown"), "{kind}");
    assert!(markdown.contains("**Tamsin**: Is the kettle on?") && markdown.contains("**Ilse Marrow**:"), "{markdown}");
    let (status, _, json_text) = export("json");
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&json_text).unwrap();
    assert_eq!(doc["messages"].as_array().unwrap().len(), 5, "{doc}");
    let (status, _, refused) = export("docx");
    assert_eq!(status, 400, "{refused}");

    // A SillyTavern chat file comes in as the body; the chat it replaces is saved.
    let file = concat!(
        r#"{"user_name":"Ash","character_name":"Ilse Marrow","create_date":"2026-10-02@21h15m40s","chat_metadata":{}}"#, "\n",
        r#"{"name":"Ash","is_user":true,"is_system":false,"send_date":"","mes":"I bring eel traps.","extra":{}}"#, "\n",
        r#"{"name":"Ilse Marrow","is_user":false,"is_system":false,"send_date":"","mes":"Leave them by the door.","extra":{}}"#, "\n",
    );
    let upload = |body: &str| {
        let response = agent.post(&format!("{base}/api/chat/ilse/import?name=theirs.jsonl")).send(body).expect("the server answers");
        let status = response.status().as_u16();
        (status, serde_json::from_str::<Value>(&response.into_body().read_to_string().unwrap_or_default()).unwrap_or_default())
    };
    let (status, imported) = upload(file);
    assert_eq!(status, 200, "{imported}");
    assert_eq!(imported["imported"]["exchanges"], 1, "{imported}");
    assert!(imported["imported"]["saved"].is_string(), "the chat it replaced is saved: {imported}");
    let (_, history) = chat("get", "/history", None);
    let names: Vec<&str> = history["messages"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap_or("?")).collect();
    assert_eq!(names, ["Ash", "Ilse Marrow"], "the file's user names its messages: {history}");
    let (_, listed) = chat("get", "/chats", None);
    assert_eq!(listed["saved"][0]["title"], "before the import of theirs.jsonl", "{listed}");
    let (status, refused) = upload("{\"not\": \"a chat\"}\nnonsense\n");
    assert_eq!(status, 400, "{refused}");
    let (status, refused) = upload("");
    assert_eq!(status, 400, "{refused}");
    let (status, missing) = send_as(&agent, "get", &format!("{base}/api/chat/nobody/chats"), None);
    assert_eq!(status, 404, "{missing}");
}

/// A reply being written is stopped over HTTP, and from the CLI of another process, as a
/// scene's round is: nothing of it is stored; with nothing running the answer says so.
/// (There was no `chat cancel`, and `POST …/cancel` was "no chat action".)
#[test]
fn a_chat_reply_is_cancelled_over_http_and_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, _) = slow_play(dir.path(), 6000);
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();
    let (status, idle) = call(&agent, "POST", &format!("{base}/api/chat/ilse/cancel"), None, None);
    assert_eq!((status, idle["status"].as_str()), (200, Some("idle")), "{idle}");
    let cli_cancel = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
            .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
            .args(["chat", "cancel", "--character", "ilse"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    for (how, cancel) in [("http", 0), ("cli", 1)] {
        let url = format!("{base}/api/chat/ilse/send");
        let sending = std::thread::spawn(move || call(&http(), "POST", &url, Some(&json!({ "text": "Is the kettle on?" }).to_string()), None));
        std::thread::sleep(Duration::from_millis(1500));
        if cancel == 0 {
            let (status, answer) = call(&agent, "POST", &format!("{base}/api/chat/ilse/cancel"), None, None);
            assert_eq!((status, answer["status"].as_str()), (200, Some("cancelling")), "{answer}");
        } else {
            let out = cli_cancel();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            assert!(String::from_utf8_lossy(&out.stdout).contains("cancelling"), "{}", String::from_utf8_lossy(&out.stdout));
        }
        let (status, refused) = sending.join().unwrap();
        assert_eq!(status, 409, "{how}: {refused}");
        let (_, history) = call(&agent, "GET", &format!("{base}/api/chat/ilse/history"), None, None);
        assert_eq!(history["turns"].as_array().map(Vec::len), Some(0), "{how}: nothing stored");
    }
}

/// A client names the exchange it shows as the last when it undoes or regenerates: a
/// chat that has moved on since is refused as a conflict (409, saying it changed; it was
/// a 400, as if the request were malformed), to that request alone — the chat's socket
/// hears no failure, as with a busy refusal — and nothing changes.
#[test]
fn an_undo_or_regenerate_naming_a_stale_last_exchange_is_refused_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, _) = slow_play(dir.path(), 0);
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();
    let mut ids = Vec::new();
    for text in ["Is the kettle on?", "Did the ferry come?"] {
        let (status, turn) = call(&agent, "POST", &format!("{base}/api/chat/ilse/send"), Some(&json!({ "text": text }).to_string()), None);
        assert_eq!(status, 200, "{turn}");
        ids.push(turn["id"].as_str().unwrap().to_string());
    }
    let chat = listen(&format!("ws://{}/ws/chat/ilse", server.addr));
    std::thread::sleep(Duration::from_millis(200));
    for action in ["undo", "regenerate"] {
        let (status, refused) = call(&agent, "POST", &format!("{base}/api/chat/ilse/{action}"), Some(&json!({ "expect": ids[0] }).to_string()), None);
        assert_eq!(status, 409, "{action}: {refused}");
        assert!(refused["detail"].as_str().unwrap_or_default().contains("changed since you looked"), "{refused}");
    }
    let (_, history) = call(&agent, "GET", &format!("{base}/api/chat/ilse/history"), None, None);
    assert_eq!(history["turns"].as_array().map(Vec::len), Some(2), "nothing was taken back");
    let (status, undone) = call(&agent, "POST", &format!("{base}/api/chat/ilse/undo"), Some(&json!({ "expect": ids[1] }).to_string()), None);
    assert_eq!(status, 200, "{undone}");
    let mut heard = Vec::new();
    until(&chat, &mut heard, |m| m["type"] == "undone");
    assert!(!heard.iter().any(|m| m["type"] == "failed"), "the refusals went to their requests alone: {heard:?}");
}

/// A chat's socket hears the saved chats change — a new chat, a branch, a rename, an
/// open, a delete, an import that put the chat played aside — as `chats` with the list
/// as it now stands, and a chat file read in as `imported` (neither reached the socket,
/// so a front end showing the saved chats went stale when another client changed them).
/// Reading the list is no change: it is its request's answer alone.
#[test]
fn a_chat_socket_hears_the_saved_chats_change_and_a_chat_file_imported() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, _) = slow_play(dir.path(), 0);
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();
    let chat = |method: &str, path: &str, body: Option<Value>| {
        let body = body.map(|b| b.to_string());
        send_as(&agent, method, &format!("{base}/api/chat/ilse{path}"), body.as_deref())
    };
    for text in ["Is the kettle on?", "Did the ferry come?"] {
        let (status, turn) = chat("post", "/send", Some(json!({ "text": text })));
        assert_eq!(status, 200, "{turn}");
    }
    let socket = listen(&format!("ws://{}/ws/chat/ilse", server.addr));
    std::thread::sleep(Duration::from_millis(200));
    let mut heard = Vec::new();
    let next_chats = |heard: &mut Vec<Value>| until(&socket, heard, |m| m["type"] == "chats" || m["type"] == "imported");
    let titles = |m: &Value| -> Vec<String> { m["saved"].as_array().into_iter().flatten().filter_map(|c| c["title"].as_str().map(str::to_string)).collect() };

    let (_, history) = chat("get", "/history", None);
    let first_reply = history["turns"][0]["reply_message_id"].as_str().unwrap().to_string();
    let (status, changed) = chat("post", "/branch", Some(json!({ "message": first_reply })));
    assert_eq!(status, 200, "{changed}");
    let branched = next_chats(&mut heard);
    assert_eq!(branched["type"], "chats", "{branched}");
    assert_eq!(branched["character_id"], history["character_id"], "{branched}");
    assert_eq!(titles(&branched), [format!("before the branch at {first_reply}")], "{branched}");
    let original = branched["saved"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(branched["saved"][0]["turns"], 2, "{branched}");

    let (status, _) = chat("post", "/new", None);
    assert_eq!(status, 200);
    let renewed = next_chats(&mut heard);
    assert_eq!(titles(&renewed).len(), 2, "the branch put aside for the new chat: {renewed}");
    let put_aside = renewed["saved"][0]["id"].as_str().unwrap().to_string();

    // Reading the list is no change: no socket hears it.
    let (status, listed) = chat("get", "/chats", None);
    assert_eq!((status, listed["saved"].as_array().map(Vec::len)), (200, Some(2)), "{listed}");

    let (status, _) = chat("post", &format!("/chats/{original}/rename"), Some(json!({ "title": "Kettle and ferry" })));
    assert_eq!(status, 200);
    let renamed = next_chats(&mut heard);
    assert!(titles(&renamed).contains(&"Kettle and ferry".to_string()), "{renamed}");

    let (status, _) = chat("post", &format!("/chats/{original}/open"), None);
    assert_eq!(status, 200);
    let opened = next_chats(&mut heard);
    assert_eq!(titles(&opened).len(), 1, "the chat opened left the list (the empty new chat was not kept): {opened}");

    let (status, _) = chat("delete", &format!("/chats/{put_aside}"), None);
    assert_eq!(status, 200);
    let deleted = next_chats(&mut heard);
    assert_eq!(deleted["saved"], json!([]), "{deleted}");

    let file = concat!(
        r#"{"user_name":"Ash","character_name":"Ilse Marrow","create_date":"2026-10-02@21h15m40s","chat_metadata":{}}"#, "\n",
        r#"{"name":"Ash","is_user":true,"is_system":false,"send_date":"","mes":"I bring eel traps.","extra":{}}"#, "\n",
        r#"{"name":"Ilse Marrow","is_user":false,"is_system":false,"send_date":"","mes":"Leave them by the door.","extra":{}}"#, "\n",
    );
    let response = agent.post(&format!("{base}/api/chat/ilse/import?name=theirs.jsonl")).send(file).expect("the server answers");
    assert_eq!(response.status().as_u16(), 200);
    let imported = next_chats(&mut heard);
    assert_eq!(imported["type"], "imported", "{imported}");
    assert_eq!(imported["imported"]["exchanges"], 1, "{imported}");
    let put_aside = imported["imported"]["saved"].as_str().expect("the chat it replaced is saved").to_string();
    let after_import = next_chats(&mut heard);
    assert_eq!(after_import["type"], "chats", "{after_import}");
    assert_eq!(after_import["saved"][0]["id"], put_aside.as_str(), "{after_import}");
    assert_eq!(titles(&after_import)[0], "before the import of theirs.jsonl", "{after_import}");
    let kinds: Vec<&str> = heard.iter().filter_map(|m| m["type"].as_str()).filter(|t| *t == "chats" || *t == "imported").collect();
    assert_eq!(kinds, ["chats", "chats", "chats", "chats", "chats", "imported", "chats"], "one per change, none for the read: {heard:?}");
}

/// The status of checkpoint `n` of run `id`, once `want` takes it (or the last one read).
fn checkpoint_status(agent: &ureq::Agent, base: &str, id: &str, n: u8, want: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, cp) = call(agent, "GET", &format!("{base}/api/character/{id}/checkpoint/{n}"), None, None);
        let status = cp["status"].as_str().unwrap_or_default().to_string();
        if want(&status) || Instant::now() > deadline {
            assert!(want(&status), "checkpoint {n} never got there: {cp}");
            return status;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A script recovers an identity run over HTTP as the CLI and the workbench do: re-open
/// an approved checkpoint (those that read it go stale), keep one stale checkpoint and
/// re-run another, put its own version of a checkpoint up for approval (one that breaks
/// the schema is refused with the field named), and is told when nothing is running to
/// cancel. Before, each of these was a 404 and a failed run was a dead end over HTTP.
#[test]
fn an_identity_run_is_reopened_kept_rerun_edited_and_cancelled_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path(), &data("identity/script.json"));
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();
    let start = json!({ "characters": [{ "name": "Mira Voss", "concept": "A keeper who guards the sea she fears." }], "mode": "fast" });
    let (status, started) = call(&agent, "POST", &format!("{base}/api/character/start"), Some(&start.to_string()), None);
    assert_eq!(status, 200, "{started}");
    let id = started["character_id"].as_str().unwrap().to_string();
    let post = |route: &str, body: Value| call(&agent, "POST", &format!("{base}/api/character/{id}/{route}"), Some(&body.to_string()), None);

    for n in [1, 2] {
        assert_eq!(checkpoint_status(&agent, &base, &id, n, |s| s == "awaiting_approval"), "awaiting_approval");
    }
    // Your own version of checkpoint 2: its narrative kept, its structured output yours.
    let (_, cp2) = call(&agent, "GET", &format!("{base}/api/character/{id}/checkpoint/2"), None, None);
    let mut mine = cp2["output"]["structured"].clone();
    let field = "timeline";
    mine[field][0]["event"] = json!("owed the river three lives, and has paid two");
    let text = mine[field].clone();
    let (status, edited) = post("checkpoint/2/edit", json!({ "structured": mine }));
    assert_eq!(status, 200, "{edited}");
    assert_eq!((edited["version"].as_u64(), edited["status"].as_str()), (Some(2), Some("awaiting_approval")), "{edited}");
    let (_, now) = call(&agent, "GET", &format!("{base}/api/character/{id}/checkpoint/2"), None, None);
    assert_eq!(now["output"]["structured"][field], text, "{now}");
    let mut broken = mine.clone();
    broken[field][0]["age"] = json!("young");
    let (status, refused) = post("checkpoint/2/edit", json!({ "structured": broken }));
    assert!(status == 409 && refused["detail"].as_str().unwrap().contains("timeline.0.age"), "the field is named: {refused}");

    for n in [1, 2] {
        assert_eq!(post("approve", json!({ "checkpoint": n })).0, 200);
    }
    for n in [3, 4] {
        assert_eq!(checkpoint_status(&agent, &base, &id, n, |s| s == "awaiting_approval"), "awaiting_approval");
    }
    let (status, reopened) = post("reopen", json!({ "checkpoint": 1 }));
    assert_eq!((status, reopened["status"].as_str()), (200, Some("awaiting_approval")), "{reopened}");
    for n in [3, 4] {
        assert_eq!(checkpoint_status(&agent, &base, &id, n, |s| s == "stale"), "stale", "checkpoint {n} read checkpoint 1");
    }
    let (status, kept) = post("keep", json!({ "checkpoint": 3 }));
    assert_eq!((status, kept["status"].as_str()), (200, Some("awaiting_approval")), "{kept}");
    let (status, again) = post("keep", json!({ "checkpoint": 3 }));
    assert!(status == 409 && again["detail"].as_str().unwrap().contains("not stale"), "{again}");
    let (status, rerun) = post("rerun", json!({ "checkpoint": 4 }));
    assert_eq!(status, 200, "{rerun}");
    assert_ne!(rerun["status"], "stale", "{rerun}");
    let (status, wrong) = post("rerun", json!({ "checkpoint": 3 }));
    assert!(status == 409 && wrong["detail"].as_str().unwrap().contains("stale or failed"), "{wrong}");

    let (status, idle) = call(&agent, "POST", &format!("{base}/api/character/{id}/cancel"), None, None);
    assert!(status == 409 && idle["detail"].as_str().unwrap().contains("running"), "nothing runs once 4 is done: {idle}");
    let (status, _) = call(&agent, "POST", &format!("{base}/api/character/no-such-run/rerun"), Some(r#"{"checkpoint": 1}"#), None);
    assert_eq!(status, 404);
}

/// A front end reads, edits and deletes a library character as `character show|edit|
/// delete` do, under `/api/characters/{id or name}`; a delete that would take chats or
/// runs with it is refused with a 409 saying what, until confirmed. Before, all three
/// were 404s and a typo in a character made over HTTP could not be fixed there.
#[test]
fn a_front_end_shows_edits_and_deletes_a_character() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, base, agent) = authoring_library(dir.path());
    let body = json!({ "name": "Odalys Fenwrigt", "description": "A reed-cutter of the fen.", "first_mes": "Mind the soft ground." });
    let (status, made) = author_call(&agent, "post", &format!("{base}/api/characters"), Some(body));
    assert_eq!(status, 200, "{made}");
    let id = made["id"].as_str().unwrap().to_string();

    let (status, sheet) = call(&agent, "GET", &format!("{base}/api/characters/Odalys%20Fenwrigt"), None, None);
    assert_eq!(status, 200, "{sheet}");
    assert_eq!((sheet["id"].as_str(), sheet["description"].as_str()), (Some(id.as_str()), Some("A reed-cutter of the fen.")), "{sheet}");
    assert_eq!(sheet["card"]["first_mes"], "Mind the soft ground.", "{sheet}");

    let (status, saved) = author_call(&agent, "post", &format!("{base}/api/characters/{id}/edit"), Some(json!({ "name": "Odalys Fenwright", "scenario": "Flood season." })));
    assert_eq!(status, 200, "{saved}");
    assert_eq!((saved["name"].as_str(), saved["scenario"].as_str(), saved["description"].as_str()), (Some("Odalys Fenwright"), Some("Flood season."), Some("A reed-cutter of the fen.")), "what was not sent is kept: {saved}");
    let (status, _) = author_call(&agent, "post", &format!("{base}/api/characters/{id}/edit"), Some(json!({})));
    assert_eq!(status, 400, "an edit of nothing");
    let (status, typo) = author_call(&agent, "post", &format!("{base}/api/characters/{id}/edit"), Some(json!({ "descripton": "x" })));
    assert!(status == 400 && typo["detail"].as_str().unwrap().contains("descripton"), "{typo}");
    let (status, nameless) = author_call(&agent, "post", &format!("{base}/api/characters/{id}/edit"), Some(json!({ "name": " " })));
    assert_eq!(status, 400, "{nameless}");
    let (status, _) = call(&agent, "GET", &format!("{base}/api/characters/Nobody%20Here"), None, None);
    assert_eq!(status, 404);

    // Cast in a campaign: the delete says so and waits for confirmation.
    let (_, tree) = call(&agent, "GET", &format!("{base}/api/worlds"), None, None);
    let campaign = tree["worlds"][0]["campaigns"][0]["id"].as_str().unwrap().to_string();
    let (status, cast) = author_call(&agent, "post", &format!("{base}/api/campaign/{campaign}/cast/add"), Some(json!({ "character": id })));
    assert_eq!(status, 200, "{cast}");
    let (status, refused) = author_call(&agent, "delete", &format!("{base}/api/characters/{id}"), None);
    assert_eq!(status, 409, "{refused}");
    assert!(refused["detail"].as_str().unwrap().contains("confirm=true"), "{refused}");
    let (_, still) = call(&agent, "GET", &format!("{base}/api/characters/{id}"), None, None);
    assert_eq!(still["name"], "Odalys Fenwright", "nothing was deleted: {still}");
    let (status, deleted) = author_call(&agent, "delete", &format!("{base}/api/characters/{id}?confirm=true"), None);
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted["name"], "Odalys Fenwright");
    assert!(!deleted["deleted_with_it"].as_array().unwrap().is_empty(), "{deleted}");
    let (status, _) = call(&agent, "GET", &format!("{base}/api/characters/{id}"), None, None);
    assert_eq!(status, 404);
    let (_, characters) = call(&agent, "GET", &format!("{base}/api/characters"), None, None);
    assert!(characters.as_array().unwrap().iter().all(|c| c["id"] != id.as_str()), "{characters}");
}

/// The memory's counts, what each agent was last given from memory, and a reindex, over
/// HTTP as `memory stats|injections|reindex`: `GET /api/memory/stats` was a 405 (read as
/// a memory id).
#[test]
fn memory_stats_injections_and_reindex_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, base, agent) = authoring_library(dir.path());
    let (status, stats) = call(&agent, "GET", &format!("{base}/api/memory/stats"), None, None);
    assert_eq!(status, 200, "{stats}");
    assert!(stats["memories"].as_u64().is_some() && stats["model"].as_str().unwrap().contains("MiniLM"), "{stats}");
    let (status, injections) = call(&agent, "GET", &format!("{base}/api/memory/injections"), None, None);
    assert_eq!(status, 200, "{injections}");
    assert!(injections["injections"].is_array(), "{injections}");
    let (status, reindexed) = call(&agent, "POST", &format!("{base}/api/memory/reindex"), Some(r#"{"force": true}"#), None);
    assert_eq!(status, 200, "{reindexed}");
    assert_eq!(reindexed["embedded"].as_u64(), stats["memories"].as_u64(), "{reindexed}");
}

/// A client names the round it shows as the last when it undoes one, as the workbench
/// does: a scene that has moved on since is refused as a conflict (409) and nothing is
/// taken back (the route took no `expect_round`, so a stale view undid a round its user
/// had not seen); without it, the last round goes as before.
#[test]
fn a_scene_undo_naming_a_stale_round_is_refused_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path(), &data("scene/script.json"));
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    let scene = lorekeeper::scene::demo::ensure(&store).unwrap().unwrap();
    drop(store);
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();
    let ws = listen(&format!("ws://{}/ws/scene/{scene}", server.addr));
    std::thread::sleep(Duration::from_millis(200));
    let mut seen = Vec::new();
    for input in ["I hand the keeper the sealed letter.", "I wait by the lamp."] {
        let (status, body) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/round"), Some(&json!({ "input": input }).to_string()), None);
        assert_eq!(status, 202, "{body}");
        until(&ws, &mut seen, |m| m["type"] == "roundCompleted");
    }
    // The client saw round 1 only: round 2 was played by someone else since.
    let (status, refused) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/undo"), Some(r#"{"expect_round": 1}"#), None);
    assert_eq!(status, 409, "{refused}");
    assert!(refused["detail"].as_str().unwrap_or_default().contains("changed since you looked"), "{refused}");
    let (_, state) = call(&agent, "GET", &format!("{base}/api/scene/{scene}"), None, None);
    assert_eq!(state["rounds"], 2, "nothing was taken back: {state}");
    let (status, undone) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/undo"), Some(r#"{"expect_round": 2}"#), None);
    assert_eq!((status, undone["round"].as_u64()), (200, Some(2)), "{undone}");
    // An old client sends nothing, or `{}`, and undoes the last round.
    let (status, undone) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/undo"), Some("{}"), None);
    assert_eq!((status, undone["round"].as_u64()), (200, Some(1)), "{undone}");
    let (status, typo) = call(&agent, "POST", &format!("{base}/api/scene/{scene}/undo"), Some(r#"{"expect_rounds": 1}"#), None);
    assert!(status == 400 && typo["detail"].as_str().unwrap_or_default().contains("`expect_rounds`"), "{typo}");
    let document = serde_json::to_value(lorekeeper::serve::openapi::document()).unwrap();
    let body = &document["paths"]["/api/scene/{scene}/undo"]["post"]["requestBody"];
    assert!(body.to_string().contains("SceneUndoBody"), "the undo's body is documented: {body}");
}

/// A front end lists the provider profiles and sees which one is selected (there was no
/// route for it), and previews the next call's prompt of a scene as the Budgets panel
/// does: sections with their tokens, the reply's cap and the prompt's text. Both are in
/// the OpenAPI document.
#[test]
fn a_front_end_lists_the_profiles_and_previews_the_next_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path(), &data("scene/script.json"));
    let mut config = Config::load(&paths.config_file).unwrap();
    config.upsert_profile(ProviderProfile {
        name: "remote".into(),
        kind: ProviderKind::Openai,
        base_url: Some("http://127.0.0.1:5001/v1?key=not-for-the-list".into()),
        model: "remote-model".into(),
        api_key_env: Some("LOREKEEPER_SERVE_TEST_KEY".into()),
        max_context_tokens: 16384,
        ..Default::default()
    });
    config.roles.insert("narrator".into(), "remote".into());
    config.save(&paths.config_file).unwrap();
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    let scene = lorekeeper::scene::demo::ensure(&store).unwrap().unwrap();
    drop(store);
    let server = serve(&paths, None);
    let base = format!("http://{}", server.addr);
    let agent = http();

    let (status, list) = call(&agent, "GET", &format!("{base}/api/providers"), None, None);
    assert_eq!(status, 200, "{list}");
    assert_eq!((list["default_profile"].as_str(), list["roles"]["narrator"].as_str()), (Some("script"), Some("remote")), "{list}");
    let profiles = list["profiles"].as_array().unwrap();
    let script = profiles.iter().find(|p| p["name"] == "script").expect("listed");
    assert_eq!(script["default"], true, "{list}");
    let remote = profiles.iter().find(|p| p["name"] == "remote").expect("listed");
    assert_eq!((remote["kind"].as_str(), remote["model"].as_str(), remote["max_context_tokens"].as_u64()), (Some("openai"), Some("remote-model"), Some(16384)));
    assert_eq!((remote["base_url"].as_str(), remote["key_env"].as_str(), remote["default"].as_bool()), (Some("http://127.0.0.1:5001"), Some("LOREKEEPER_SERVE_TEST_KEY"), Some(false)));
    assert_eq!(remote["roles"], json!(["narrator"]));
    assert!(!list.to_string().contains("not-for-the-list"), "an endpoint is shown as scheme, host and port: {list}");

    let (status, next) = call(&agent, "GET", &format!("{base}/api/scene/{scene}/preview"), None, None);
    assert_eq!(status, 200, "{next}");
    assert_eq!((next["agent"].as_str(), next["scene_id"].as_str()), (Some("director"), Some(scene.as_str())), "{next}");
    assert!(next["sections"].as_array().is_some_and(|s| s.len() == 8 && s.iter().all(|s| s["allocated"].is_u64() && s["used"].is_u64())), "{next}");
    assert!(next["schema_tokens"].as_u64() > Some(0) && next["system"].as_str().is_some_and(|s| !s.is_empty()), "{next}");
    let (status, next) = call(&agent, "GET", &format!("{base}/api/scene/{scene}/preview?character=Wren"), None, None);
    assert_eq!((status, next["character"].as_str()), (200, Some("Wren Talloway")), "{next}");
    let (status, next) = call(&agent, "GET", &format!("{base}/api/scene/{scene}/preview?agent=narrator"), None, None);
    assert_eq!((status, next["max_context_tokens"].as_u64()), (200, Some(16384)), "the narrator's profile: {next}");
    let (status, bad) = call(&agent, "GET", &format!("{base}/api/scene/{scene}/preview?agent=bard"), None, None);
    assert_eq!(status, 400, "{bad}");
    let (status, bad) = call(&agent, "GET", &format!("{base}/api/scene/{scene}/preview?character=Nobody%20At%20All"), None, None);
    assert_eq!(status, 400, "{bad}");
    let (status, _) = call(&agent, "GET", &format!("{base}/api/scene/no-such-scene/preview"), None, None);
    assert_eq!(status, 404);

    let document = lorekeeper::serve::openapi::document();
    for path in ["/api/providers", "/api/scene/{scene}/preview"] {
        assert!(document.paths.paths.contains_key(path), "{path} is documented");
    }
}
