//! What `lorekeeper serve` refuses, and how it says so, as a script meets it: a name
//! another thing already goes by, a delete under a running round, a client's bad
//! request (its answer alone, not every watcher's), a round's state read without a
//! socket.

use lorekeeper::config::{Config, Paths};
use lorekeeper::engine;
use lorekeeper::llm::{ProviderKind, ProviderProfile};
use lorekeeper::serve::{ServeOptions, ServerHandle};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn data(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(path)
}

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

fn serve(paths: &Paths) -> (ServerHandle, String) {
    let engine = engine::start(paths.clone()).unwrap();
    let server = lorekeeper::serve::start(engine, ServeOptions { addr: "127.0.0.1:0".parse().unwrap(), token: None, cors: None }).unwrap();
    let base = format!("http://{}", server.addr);
    (server, base)
}

/// `method` on `url` with a JSON `body`: the status and the JSON answer.
fn call(method: &str, url: &str, body: Option<Value>) -> (u16, Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let url = &url.replace(' ', "%20");
    let response = match method {
        "GET" => agent.get(url).call(),
        "DELETE" => agent.delete(url).call(),
        _ => agent.post(url).header("Content-Type", "application/json").send(body.map(|b| b.to_string()).unwrap_or_default()),
    }
    .expect("the server answers");
    let status = response.status().as_u16();
    let text = response.into_body().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn detail(body: &Value) -> &str {
    body["detail"].as_str().unwrap_or_else(|| panic!("an error body: {body}"))
}

/// Every message of a WebSocket, as it arrives, on a channel.
fn listen(url: &str) -> mpsc::Receiver<Value> {
    let (mut socket, _) = tungstenite::connect(url).expect("the WebSocket opens");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        while let Ok(message) = socket.read() {
            if let tungstenite::Message::Text(text) = message
                && let Ok(value) = serde_json::from_str::<Value>(&text)
                && tx.send(value).is_err()
            {
                return;
            }
        }
    });
    rx
}

/// Messages until `stop`, all kept in `seen`.
fn until(rx: &mpsc::Receiver<Value>, seen: &mut Vec<Value>, mut stop: impl FnMut(&Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = rx.recv_timeout(left).unwrap_or_else(|e| panic!("no message in time ({e}); seen: {seen:?}"));
        seen.push(message.clone());
        if stop(&message) {
            return;
        }
    }
}

/// Poll `url` until `done` holds of its answer.
fn poll(url: &str, mut done: impl FnMut(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, value) = call("GET", url, None);
        if done(&value) {
            return value;
        }
        assert!(Instant::now() < deadline, "never came to pass: {value}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The demo library (its world, scene, cast and persona Juno) played by the scene's
/// script, each model call taking `delay_ms`.
fn library(dir: &Path, delay_ms: u64) -> (Paths, String) {
    let mut script: Value = serde_json::from_str(&std::fs::read_to_string(data("scene/script.json")).unwrap()).unwrap();
    for rule in script["rules"].as_array_mut().unwrap() {
        rule["reply"]["delay_ms"] = json!(delay_ms);
    }
    script["default"] = json!("They talked over tea.");
    let script_file = dir.join("script.json");
    std::fs::write(&script_file, script.to_string()).unwrap();
    let paths = paths(dir, &script_file);
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    let scene = lorekeeper::scene::demo::ensure(&store).unwrap().unwrap();
    (paths, scene)
}

/// Two characters, worlds or personas of one name could be found by neither name
/// afterwards ("more than one name matches" on every route): a rename to a taken name
/// is refused as a create is (case ignored), an identity run asking for a taken name is
/// refused at its start, and one whose name was taken while it ran is saved as
/// "Name (2)" and says so. A name several things start with is a 400 on every route.
#[test]
fn a_taken_name_is_refused_on_rename_and_identity_and_a_shared_prefix_is_a_400() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path(), &data("identity/script.json"));
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    lorekeeper::scene::demo::ensure(&store).unwrap().unwrap();
    drop(store);
    let (_server, base) = serve(&paths);

    // Characters: a rename to another's name, in any case, is refused; its own is kept.
    let (status, body) = call("POST", &format!("{base}/api/characters/Wren Talloway/edit"), Some(json!({ "name": "ossian VALE" })));
    assert_eq!(status, 400, "{body}");
    assert!(detail(&body).contains("already goes by"), "{body}");
    let (status, body) = call("POST", &format!("{base}/api/characters/Wren Talloway/edit"), Some(json!({ "name": "WREN TALLOWAY" })));
    assert_eq!(status, 200, "a character may change the case of its own name: {body}");
    let (_, list) = call("GET", &format!("{base}/api/characters"), None);
    let names: Vec<&str> = list.as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names.iter().filter(|n| n.eq_ignore_ascii_case("ossian vale")).count(), 1, "{names:?}");
    let (status, body) = call("GET", &format!("{base}/api/characters/Ossian Vale"), None);
    assert_eq!(status, 200, "the name still finds one character: {body}");

    // An identity run for a taken name is refused before it starts.
    let start = |name: &str| json!({ "characters": [{ "name": name, "concept": "A keeper who guards the sea she fears." }], "storyline": {}, "mode": "fast" });
    let (status, body) = call("POST", &format!("{base}/api/character/start"), Some(start("ossian vale")));
    assert_eq!(status, 400, "{body}");
    assert!(detail(&body).contains("already goes by"), "{body}");

    // A name taken while the run goes on: the character is saved as "Mira Voss (2)".
    let (status, started) = call("POST", &format!("{base}/api/character/start"), Some(start("Mira Voss")));
    assert_eq!(status, 200, "{started}");
    let run = started["character_id"].as_str().unwrap().to_string();
    let (status, body) = call("POST", &format!("{base}/api/characters"), Some(json!({ "name": "Mira Voss" })));
    assert_eq!(status, 200, "nobody goes by the name yet: {body}");
    for n in 1..=7 {
        poll(&format!("{base}/api/character/{run}/checkpoint/{n}"), |cp| cp["status"] == "awaiting_approval");
        let (status, body) = call("POST", &format!("{base}/api/character/{run}/approve"), Some(json!({ "checkpoint": n })));
        assert_eq!(status, 200, "{body}");
    }
    poll(&format!("{base}/api/character/{run}/status"), |meta| meta["status"] == "completed");
    let (_, list) = call("GET", &format!("{base}/api/characters"), None);
    let mira: Vec<(&str, &str)> = list
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"].as_str().is_some_and(|n| n.starts_with("Mira Voss")))
        .map(|c| (c["name"].as_str().unwrap(), c["id"].as_str().unwrap()))
        .collect();
    assert!(mira.contains(&("Mira Voss (2)", run.as_str())), "the run's character took a free name: {mira:?}");
    assert_eq!(mira.len(), 2, "{mira:?}");
    let (status, body) = call("GET", &format!("{base}/api/characters/Mira Voss"), None);
    assert_eq!(status, 200, "the name finds the one that goes by it: {body}");

    // Worlds: a second world of a name, or a rename to one, is refused.
    let (_, tree) = call("GET", &format!("{base}/api/worlds"), None);
    let world = tree["worlds"][0]["name"].as_str().unwrap().to_string();
    let (status, body) = call("POST", &format!("{base}/api/worlds"), Some(json!({ "name": world.to_uppercase() })));
    assert_eq!(status, 400, "{body}");
    assert!(detail(&body).contains("already goes by"), "{body}");
    let (status, body) = call("POST", &format!("{base}/api/worlds"), Some(json!({ "name": "Saltmarsh" })));
    assert_eq!(status, 200, "{body}");
    let (status, body) = call("POST", &format!("{base}/api/world/Saltmarsh/edit"), Some(json!({ "name": world })));
    assert_eq!(status, 400, "{body}");
    let (status, body) = call("POST", &format!("{base}/api/world/{world}/edit"), Some(json!({ "notes": "still one" })));
    assert_eq!(status, 200, "{body}");

    // Personas: the same.
    let (status, body) = call("POST", &format!("{base}/api/personas"), Some(json!({ "name": "juno" })));
    assert_eq!(status, 400, "{body}");
    let (status, body) = call("POST", &format!("{base}/api/personas"), Some(json!({ "name": "Junebug" })));
    assert_eq!(status, 200, "{body}");
    let (status, body) = call("POST", &format!("{base}/api/persona/Junebug/edit"), Some(json!({ "name": "JUNO" })));
    assert_eq!(status, 400, "{body}");
    // Two that a name starts: the request is to be made precise, a 400 on every route
    // (personas and lorebooks answered 404, characters and worlds 400).
    let (status, body) = call("POST", &format!("{base}/api/persona/ju/edit"), Some(json!({ "description": "x" })));
    assert_eq!(status, 400, "{body}");
    assert!(detail(&body).contains("more than one name matches"), "{body}");
    let (status, body) = call("POST", &format!("{base}/api/lorebooks"), Some(json!({ "name": "Greyhollow Tides" })));
    assert_eq!(status, 200, "{body}");
    let (status, body) = call("POST", &format!("{base}/api/lorebooks"), Some(json!({ "name": "Greyhollow Rocks" })));
    assert_eq!(status, 200, "{body}");
    let (status, body) = call("GET", &format!("{base}/api/lorebook/greyhollow/entries"), None);
    assert_eq!(status, 400, "{body}");
}

/// A confirmed delete of a scene, or of the arc, campaign or world holding it, while a
/// round plays there is refused as busy (409), as every other change to a busy scene:
/// it used to go through, and the round went on calling its provider for a scene that was
/// gone, then failed with "Query returned no rows". Once the round is done it goes.
#[test]
fn a_scene_with_a_round_running_is_not_deleted_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = library(dir.path(), 400);
    let (_server, base) = serve(&paths);
    let (_, tree) = call("GET", &format!("{base}/api/worlds"), None);
    let world = tree["worlds"][0]["id"].as_str().unwrap().to_string();
    let campaign = tree["worlds"][0]["campaigns"][0]["id"].as_str().unwrap().to_string();
    let arc = tree["worlds"][0]["campaigns"][0]["arcs"][0]["id"].as_str().unwrap().to_string();

    let (status, body) = call("POST", &format!("{base}/api/scene/{scene}/round"), Some(json!({ "input": "I light the lamp." })));
    assert_eq!(status, 202, "{body}");
    for path in [format!("scene/{scene}"), format!("arc/{arc}"), format!("campaign/{campaign}"), format!("world/{world}")] {
        let (status, body) = call("DELETE", &format!("{base}/api/{path}?confirm=true"), None);
        assert_eq!(status, 409, "{path}: {body}");
        assert!(detail(&body).contains("a round is already running"), "{path}: {body}");
    }
    let state = poll(&format!("{base}/api/scene/{scene}"), |s| s["round_state"]["running"] == false);
    assert_eq!(state["round_state"]["last_failure"], Value::Null, "the round completed: {state}");
    let (status, messages) = call("GET", &format!("{base}/api/scene/{scene}/messages"), None);
    assert!(status == 200 && messages.as_array().is_some_and(|m| !m.is_empty()), "{messages}");
    let (status, body) = call("DELETE", &format!("{base}/api/arc/{arc}?confirm=true"), None);
    assert_eq!(status, 200, "free now: {body}");
}

/// A client's bad request on a scene route is answered to it alone: the scene's sockets
/// used to hear each one as `{"type":"error"}`, the event a failed round sends.
#[test]
fn a_bad_request_on_a_scene_is_not_broadcast_to_its_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = library(dir.path(), 0);
    let (server, base) = serve(&paths);
    let ws = listen(&format!("ws://{}/ws/scene/{scene}", server.addr));
    std::thread::sleep(Duration::from_millis(200));
    let refused = [
        ("POST", format!("{base}/api/scene/{scene}/message/99/edit"), Some(json!({ "text": "x" }))),
        ("POST", format!("{base}/api/scene/{scene}/undo"), None),
        ("POST", format!("{base}/api/scene/{scene}/alternative/nope/use"), None),
        ("POST", format!("{base}/api/scene/{scene}/mute"), Some(json!({ "character": "Nobody Here" }))),
    ];
    for (method, url, body) in refused {
        let (status, answer) = call(method, &url, body);
        assert!((400..500).contains(&status), "{url}: {status} {answer}");
    }
    // A round after them: everything the socket heard until it completed has no error.
    let (status, body) = call("POST", &format!("{base}/api/scene/{scene}/round"), Some(json!({ "input": "I light the lamp." })));
    assert_eq!(status, 202, "{body}");
    let mut seen = Vec::new();
    until(&ws, &mut seen, |m| m["type"] == "roundCompleted");
    assert!(!seen.iter().any(|m| m["type"] == "error"), "{seen:?}");
}

/// A script without a socket reads whether a round runs and how the last one ended from
/// `GET /api/scene/{id}`: `round_state.running`, and `last_failure` while the last round
/// failed, cleared by the next round.
#[test]
fn a_scenes_state_says_whether_a_round_runs_and_how_the_last_one_failed() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = library(dir.path(), 300);
    let (_server, base) = serve(&paths);
    let (_, state) = call("GET", &format!("{base}/api/scene/{scene}"), None);
    assert_eq!(state["round_state"], json!({ "running": false, "last_failure": null }), "{state}");

    let (status, body) = call("POST", &format!("{base}/api/scene/{scene}/round"), Some(json!({ "input": "I light the lamp." })));
    assert_eq!(status, 202, "{body}");
    let (_, state) = call("GET", &format!("{base}/api/scene/{scene}"), None);
    assert_eq!(state["round_state"]["running"], true, "{state}");
    let (status, body) = call("POST", &format!("{base}/api/scene/{scene}/cancel"), None);
    assert_eq!(status, 200, "{body}");
    let state = poll(&format!("{base}/api/scene/{scene}"), |s| s["round_state"]["running"] == false);
    let failure = &state["round_state"]["last_failure"];
    assert_eq!((failure["round"].as_u64(), failure["fault"].as_str()), (Some(1), Some("cancelled")), "{state}");

    // The next round clears it, and completes.
    let (status, body) = call("POST", &format!("{base}/api/scene/{scene}/round"), Some(json!({ "input": "I light the lamp." })));
    assert_eq!(status, 202, "{body}");
    let (_, state) = call("GET", &format!("{base}/api/scene/{scene}"), None);
    assert_eq!(state["round_state"]["last_failure"], Value::Null, "{state}");
    let state = poll(&format!("{base}/api/scene/{scene}"), |s| s["round_state"]["running"] == false);
    assert_eq!(state["round_state"]["last_failure"], Value::Null, "{state}");
}

/// Every error body says whose fault it is in the words the socket events use, so a bot
/// tells "busy, retry" from "stale, read again" from "confirm" from "cancelled"; the
/// OpenAPI document says so too.
#[test]
fn every_error_body_carries_a_fault() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = library(dir.path(), 300);
    let (_server, base) = serve(&paths);
    let fault = |(status, body): (u16, Value)| (status, body["fault"].as_str().unwrap_or_else(|| panic!("{body}")).to_string());
    assert_eq!(fault(call("GET", &format!("{base}/api/scene/no-such-scene"), None)), (404, "not_found".into()));
    assert_eq!(fault(call("GET", &format!("{base}/api/no/such/route"), None)), (404, "not_found".into()));
    assert_eq!(fault(call("POST", &format!("{base}/api/scene/{scene}/round"), Some(json!({ "inptu": "x" })))), (400, "request".into()));
    assert_eq!(fault(call("POST", &format!("{base}/api/scene/{scene}/undo"), None)), (400, "request".into()));
    let (_, tree) = call("GET", &format!("{base}/api/worlds"), None);
    let arc = tree["worlds"][0]["campaigns"][0]["arcs"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(fault(call("DELETE", &format!("{base}/api/arc/{arc}"), None)), (409, "confirm".into()));
    let (status, body) = call("POST", &format!("{base}/api/scene/{scene}/round"), Some(json!({ "input": "I light the lamp." })));
    assert_eq!(status, 202, "{body}");
    assert_eq!(fault(call("POST", &format!("{base}/api/scene/{scene}/round"), Some(json!({ "input": "Again." })))), (409, "busy".into()));
    assert_eq!(fault(call("DELETE", &format!("{base}/api/scene/{scene}?confirm=true"), None)), (409, "busy".into()));
    call("POST", &format!("{base}/api/scene/{scene}/cancel"), None);

    let (_, openapi) = call("GET", &format!("{base}/api/openapi.json"), None);
    let schema = &openapi["components"]["schemas"]["ErrorBody"];
    let required: Vec<&str> = schema["required"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(required.contains(&"fault") && schema["properties"]["fault"]["description"].as_str().is_some_and(|d| d.contains("busy")), "{schema}");
}

/// A body names a field it does not take (the predecessor's approve and feedback bodies
/// ignored one); a lorebook entry moved past the last is a 400, not "last"; a state set for
/// a character not in the scene is refused, not kept where no prompt reads it.
#[test]
fn unknown_fields_a_move_past_the_end_and_a_state_outside_the_cast_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = library(dir.path(), 0);
    let (_server, base) = serve(&paths);
    let start = json!({ "characters": [{ "name": "Mira Voss", "concept": "A keeper." }], "storyline": {}, "mode": "fast" });
    let (status, started) = call("POST", &format!("{base}/api/character/start"), Some(start));
    assert_eq!(status, 200, "{started}");
    let run = started["character_id"].as_str().unwrap();
    for route in ["approve", "reopen", "feedback"] {
        let mut sent = json!({ "checkpoint": 1, "pleaseignore": true });
        if route == "feedback" {
            sent["feedback"] = json!("x");
        }
        let (status, body) = call("POST", &format!("{base}/api/character/{run}/{route}"), Some(sent));
        assert_eq!(status, 400, "{route}: {body}");
        assert!(detail(&body).contains("pleaseignore"), "{route}: {body}");
    }

    let (status, book) = call("POST", &format!("{base}/api/lorebooks"), Some(json!({ "name": "Tides" })));
    assert_eq!(status, 200, "{book}");
    for key in ["fog", "tide"] {
        let (status, body) = call("POST", &format!("{base}/api/lorebook/Tides/entries"), Some(json!({ "keys": key, "content": key })));
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = call("POST", &format!("{base}/api/lorebook/Tides/entry/0/move"), Some(json!({ "to": 9999 })));
    assert_eq!(status, 400, "{body}");
    let (status, body) = call("POST", &format!("{base}/api/lorebook/Tides/entry/0/move"), Some(json!({ "to": 1 })));
    assert_eq!(status, 200, "{body}");

    let (status, body) = call("POST", &format!("{base}/api/characters"), Some(json!({ "name": "Odalys Fenwright" })));
    assert_eq!(status, 200, "{body}");
    let (status, body) = call("POST", &format!("{base}/api/scene/{scene}/character/Odalys Fenwright/state"), Some(json!({ "mood": "wary" })));
    assert_eq!(status, 400, "{body}");
    assert!(detail(&body).contains("not in this scene's cast"), "{body}");
    let (status, body) = call("POST", &format!("{base}/api/scene/{scene}/character/Wren Talloway/state"), Some(json!({ "mood": "wary" })));
    assert_eq!(status, 200, "{body}");
}
