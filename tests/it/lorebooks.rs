//! A lorebook's whole life through every front door: imported (a name already taken is
//! imported as "Name (2)", and said), filled entry by entry, tested, attached to a world,
//! a campaign, a character and a chat, renamed, and deleted — asked first, and detached
//! from everything in the same transaction — with the command line, over HTTP, and in
//! the workbench's Library panel.

use crate::support;
use crate::workbench::{harness, run_until, start_engine, step_until_shown};
use egui_kittest::kittest::Queryable;
use lorekeeper::config::{Config, Paths};
use lorekeeper::store::Store;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

fn script() -> Value {
    json!({ "rules": [], "default": "The harbour is quiet tonight." })
}

/// The binary on `paths`: whether it succeeded, what it printed, what it said on stderr.
fn cli(paths: &Paths, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[track_caller]
fn ok(paths: &Paths, args: &[&str]) -> String {
    let (success, out, err) = cli(paths, args);
    assert!(success, "{args:?} failed: {err}");
    out
}

#[track_caller]
fn refused(paths: &Paths, args: &[&str]) -> String {
    let (success, out, err) = cli(paths, args);
    assert!(!success, "{args:?} should be refused: {out}");
    err
}

fn write(dir: &Path, name: &str, value: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, value.to_string()).unwrap();
    path.to_str().unwrap().to_string()
}

fn book(name: &str, key: &str, content: &str) -> Value {
    json!({ "name": name, "entries": { "0": { "uid": 0, "key": [key], "keysecondary": [], "comment": key, "content": content,
        "constant": false, "selective": false, "order": 100, "position": 0, "disable": false, "probability": 100 } } })
}

fn card(name: &str) -> Value {
    json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": {
        "name": name, "description": "A harbour pilot.", "personality": "", "scenario": "", "first_mes": "Ahoy.", "mes_example": "",
        "creator_notes": "", "system_prompt": "", "post_history_instructions": "", "alternate_greetings": [], "tags": [], "creator": "",
        "character_version": "1", "extensions": {} } })
}

/// How many attachments of lorebooks the library holds, whatever they are attached to.
fn attachments(paths: &Paths) -> i64 {
    let store = Store::open(&paths.library_file).unwrap();
    store
        .with(|c| {
            Ok(c.query_row(
                "SELECT (SELECT count(*) FROM world_lorebooks) + (SELECT count(*) FROM campaign_lorebooks)
                      + (SELECT count(*) FROM character_lorebooks) + (SELECT count(*) FROM companion_chat_lorebooks)",
                [],
                |r| r.get(0),
            )?)
        })
        .unwrap()
}

#[test]
fn a_lorebook_is_renamed_and_deleted_from_the_command_line_detached_from_everything() {
    let dir = tempfile::tempdir().unwrap();
    let paths = support::library::scripted(dir.path(), script());
    let first = write(dir.path(), "fen.json", &book("Fen Lore", "bog", "The bog swallows carts."));
    let second = write(dir.path(), "fen-again.json", &book("Fen Lore", "mire", "The mire is older than the road."));
    let mira = write(dir.path(), "mira.json", &card("Mira"));
    // A second book of a name already taken is imported under a free one, and said.
    let imported = ok(&paths, &["import", &first, &second, &mira]);
    assert!(imported.contains("created lorebook \"Fen Lore (2)\""), "{imported}");
    assert!(imported.contains("a lorebook is already named \"Fen Lore\": this one was imported as \"Fen Lore (2)\""), "{imported}");
    let listed = ok(&paths, &["lorebook", "entry", "list", "Fen Lore"]);
    assert!(listed.contains("bog"), "the name is one book's again: {listed}");

    ok(&paths, &["world", "new", "Eldoria"]);
    ok(&paths, &["campaign", "new", "The Siege", "--world", "Eldoria"]);
    ok(&paths, &["lorebook", "attach", "Fen Lore", "--world", "Eldoria"]);
    ok(&paths, &["lorebook", "attach", "Fen Lore", "--campaign", "The Siege"]);
    ok(&paths, &["lorebook", "attach", "Fen Lore", "--character", "Mira"]);
    ok(&paths, &["lorebook", "attach", "Fen Lore", "--chat", "Mira"]);
    assert_eq!(attachments(&paths), 4);

    // Names stay unique, case aside, as `lorebook new` keeps them.
    let taken = refused(&paths, &["lorebook", "rename", "Fen Lore (2)", "fen lore"]);
    assert!(taken.contains("already named"), "{taken}");
    let renamed = ok(&paths, &["lorebook", "rename", "Fen Lore (2)", "Mire Lore"]);
    assert!(renamed.contains("renamed lorebook Mire Lore"), "{renamed}");
    // The export carries the new name.
    let out = dir.path().join("mire-out.json");
    ok(&paths, &["export", "lorebook", "Mire Lore", "--format", "world-info", "--out", out.to_str().unwrap()]);
    let exported: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(exported["name"], "Mire Lore");

    // Deleting a book in use is refused until it is meant, with everything it would touch named.
    let asked = refused(&paths, &["lorebook", "delete", "Fen Lore"]);
    for bound in ["world \"Eldoria\"", "campaign \"The Siege\"", "character \"Mira\"", "the chat with \"Mira\"", "its one entry"] {
        assert!(asked.contains(bound), "{bound} named: {asked}");
    }
    assert_eq!(attachments(&paths), 4, "nothing was deleted");
    let deleted = ok(&paths, &["lorebook", "delete", "Fen Lore", "--yes"]);
    assert!(deleted.contains("deleted lorebook Fen Lore") && deleted.contains("detached from world \"Eldoria\""), "{deleted}");
    assert_eq!(attachments(&paths), 0, "detached from everything with it");
    let gone = refused(&paths, &["lorebook", "entry", "list", "Fen Lore"]);
    assert!(gone.contains("no lorebook"), "{gone}");
    // A book with nothing in it and attached nowhere goes at once.
    ok(&paths, &["lorebook", "new", "Empty"]);
    ok(&paths, &["lorebook", "delete", "Empty"]);
    assert!(ok(&paths, &["lorebook", "entry", "list", "Mire Lore"]).contains("mire"), "the other book is untouched");
}

fn http() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

fn call(agent: &ureq::Agent, method: &str, url: &str, body: Option<Value>) -> (u16, Value) {
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

#[test]
fn a_lorebook_is_filled_tested_attached_renamed_and_deleted_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let paths = support::library::scripted(dir.path(), script());
    let engine = lorekeeper::engine::start(paths.clone()).unwrap();
    let options = lorekeeper::serve::ServeOptions { addr: "127.0.0.1:0".parse().unwrap(), token: None, cors: None };
    let server = lorekeeper::serve::start(engine, options).unwrap();
    let base = format!("http://{}/api", server.addr);
    let agent = http();
    let post = |path: &str, body: Value| call(&agent, "POST", &format!("{base}{path}"), Some(body));
    let get = |path: &str| call(&agent, "GET", &format!("{base}{path}"), None);
    let delete = |path: &str| call(&agent, "DELETE", &format!("{base}{path}"), None);

    assert_eq!(post("/characters", json!({ "name": "Mira", "first_mes": "Ahoy." })).0, 200);
    assert_eq!(post("/lorebooks", json!({ "name": "Harbour" })).0, 200);
    // Entries: the fields `lorebook entry add|edit` takes, keys as a line or a list.
    let (status, added) = post("/lorebook/Harbour/entries", json!({ "comment": "Kraken", "keys": ["kraken"], "content": "A kraken sleeps under the pier." }));
    assert_eq!(status, 200, "{added}");
    assert_eq!((added["entries"].as_array().unwrap().len(), &added["changed"]), (1, &json!({ "action": "added", "index": 0 })));
    // Checked as the entry editor checks: the field is named, nothing changes.
    let (status, bad) = post("/lorebook/Harbour/entries", json!({ "keys": "/gate(/" }));
    assert_eq!(status, 400, "{bad}");
    assert!(bad["detail"].as_str().unwrap().contains("regular expression"), "{bad}");
    let (status, bad) = post("/lorebook/Harbour/entry/0/edit", json!({ "probability": 150 }));
    assert!(status == 400 && bad["detail"].as_str().unwrap().contains("probability"), "{status} {bad}");
    let (status, bad) = post("/lorebook/Harbour/entry/0/edit", json!({ "position": "middle" }));
    assert!(status == 400 && bad["detail"].as_str().unwrap().contains("position"), "{status} {bad}");
    assert_eq!(post("/lorebook/Harbour/entry/0/edit", json!({})).0, 400, "nothing to change");
    assert_eq!(post("/lorebook/Harbour/entry/5/edit", json!({ "content": "x" })).0, 404);
    assert_eq!(post("/lorebook/Harbour/entry/first/edit", json!({ "content": "x" })).0, 400);
    assert_eq!(post("/lorebook/Nowhere/entries", json!({ "content": "x" })).0, 404);
    let (status, edited) = post("/lorebook/Harbour/entry/0/edit", json!({ "keys": "kraken, /tentacles?/i", "position": "at-depth", "depth": 2 }));
    assert_eq!(status, 200, "{edited}");
    let kraken = &edited["entries"][0];
    assert_eq!((kraken["position"].as_u64(), kraken["depth"].as_u64()), (Some(4), Some(2)), "{kraken}");
    assert_eq!(kraken["keys"], json!(["kraken", "/tentacles?/i"]));
    assert_eq!(kraken["content"], "A kraken sleeps under the pier.", "what was not given stays");
    let (_, duplicated) = post("/lorebook/Harbour/entry/0/duplicate", json!({}));
    assert_eq!(duplicated["entries"][1]["comment"], "Kraken (copy)", "{duplicated}");
    let (_, moved) = post("/lorebook/Harbour/entry/1/move", json!({ "to": 0 }));
    assert_eq!(moved["entries"][0]["comment"], "Kraken (copy)", "{moved}");
    let (status, left) = delete("/lorebook/Harbour/entry/0");
    assert_eq!((status, left["entries"].as_array().unwrap().len()), (200, 1), "{left}");
    let (status, listed) = get("/lorebook/Harbour/entries");
    assert_eq!((status, listed["entries"][0]["comment"].as_str()), (200, Some("Kraken")), "{listed}");
    // Why does it fire?
    let (status, tested) = post("/lorebook/Harbour/test", json!({ "text": "Tentacles rose by the pier." }));
    assert_eq!(status, 200, "{tested}");
    assert_eq!(tested["verdicts"][0]["fired"], true, "{tested}");
    assert!(tested["verdicts"][0]["reason"].as_str().unwrap().contains("/tentacles?/i"), "{tested}");

    // Attached to the character and to its chat alone, as `lorebook attach --character|--chat`.
    let (status, attached) = post("/character/Mira/lorebook/attach", json!({ "lorebook": "Harbour" }));
    assert_eq!((status, attached["action"].as_str()), (200, Some("attached")), "{attached}");
    let (status, attached) = post("/chat/Mira/lorebook/attach", json!({ "lorebook": "Harbour" }));
    assert_eq!(status, 200, "{attached}");
    assert!(attached["action"].as_str().unwrap().contains("attached to the chat"), "{attached}");
    assert_eq!(post("/chat/Mira/lorebook/attach", json!({ "lorebook": "Nowhere" })).0, 404);
    assert_eq!(post("/chat/Mira/lorebook/hang", json!({ "lorebook": "Harbour" })).0, 404);
    let (status, used) = get("/lorebook/Harbour");
    assert_eq!(status, 200, "{used}");
    assert_eq!(used["bound"], json!(["character \"Mira\"", "the chat with \"Mira\""]), "{used}");
    // It fires in her chat.
    let (status, turn) = post("/chat/Mira/send", json!({ "text": "Any kraken about?" }));
    assert_eq!(status, 200, "{turn}");
    assert!(turn["packet"].to_string().contains("A kraken sleeps under the pier."), "{turn}");
    assert_eq!(post("/chat/Mira/lorebook/detach", json!({ "lorebook": "Harbour" })).0, 200);
    assert_eq!(post("/chat/Mira/lorebook/detach", json!({ "lorebook": "Harbour" })).0, 400, "not attached there any more");

    // Renamed: names stay unique, case aside.
    assert_eq!(post("/lorebooks", json!({ "name": "Other" })).0, 200);
    let (status, taken) = post("/lorebook/Other/rename", json!({ "name": "harbour" }));
    assert!(status == 400 && taken["detail"].as_str().unwrap().contains("already named"), "{status} {taken}");
    let (status, renamed) = post("/lorebook/Other/rename", json!({ "name": "Deep Harbour" }));
    assert_eq!((status, renamed["action"].as_str(), renamed["name"].as_str()), (200, Some("renamed"), Some("Deep Harbour")), "{renamed}");

    // Deleted: asked first while it holds entries or is attached, then detached with it.
    let (status, asked) = delete("/lorebook/Harbour");
    assert_eq!(status, 409, "{asked}");
    assert!(asked["detail"].as_str().unwrap().contains("character \"Mira\""), "{asked}");
    assert_eq!(get("/lorebook/Harbour").0, 200, "nothing was deleted");
    let (status, deleted) = delete("/lorebook/Harbour?confirm=true");
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted["impact"]["detached"], json!(["character \"Mira\""]), "{deleted}");
    assert_eq!(deleted["impact"]["lore_entries"], 1, "{deleted}");
    assert_eq!(get(&format!("/lorebook/{}", deleted["id"].as_str().unwrap())).0, 404);
    assert_eq!(attachments(&paths), 0);
    assert_eq!(delete("/lorebook/Deep%20Harbour").0, 200, "an empty book attached nowhere goes at once");

    // An upload of a book whose name is taken comes in as "Name (2)", and says so.
    assert_eq!(post("/lorebooks", json!({ "name": "Fen Lore" })).0, 200);
    let upload = agent
        .post(format!("{base}/library/import?name=fen.json"))
        .send(book("Fen Lore", "bog", "The bog swallows carts.").to_string())
        .unwrap()
        .into_body()
        .read_json::<Value>()
        .unwrap();
    assert_eq!(upload["created"][0]["name"], "Fen Lore (2)", "{upload}");
    assert!(upload["warnings"][0]["message"].as_str().unwrap().contains("already named \"Fen Lore\""), "{upload}");

    let (_, doc) = get("/openapi.json");
    for path in ["/api/lorebook/{lorebook}", "/api/lorebook/{lorebook}/entries", "/api/lorebook/{lorebook}/entry/{index}/edit", "/api/lorebook/{lorebook}/test",
        "/api/character/{character_id}/lorebook/{action}", "/api/chat/{character}/lorebook/{action}"]
    {
        assert!(doc["paths"].get(path).is_some(), "{path} is documented");
    }
    server.stop();
}

#[test]
fn a_lorebook_is_renamed_and_deleted_in_the_library_panel_after_confirmation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let engine = start_engine(dir.path(), &config);
    let store = engine.context().store.clone();
    lorekeeper::interop::library::import_bytes(&store, book("river-lore", "weir", "The weir drowned.").to_string().as_bytes(), "river").expect("import");
    store
        .transaction(|tx| {
            let world = lorekeeper::scene::authoring::create_world(tx, "Eldoria", "", "")?;
            let (book, _) = lorekeeper::interop::library::resolve_lorebook(tx, "river-lore").map_err(|e| lorekeeper::store::StoreError::Invalid(e.to_string()))?;
            lorekeeper::scene::authoring::attach(tx, lorekeeper::scene::authoring::LoreLevel::World, &world, &book)
        })
        .expect("attach");
    let mut harness = harness(engine, 900.0);
    harness.run();
    harness.get_all_by_label("Library").next().expect("navigation entry").click();
    run_until(&mut harness, Duration::from_secs(20), |app| !app.library().lorebooks().is_empty());
    harness.run();

    harness.get_by_label("river-lore (1 entry)").click_secondary();
    harness.run();
    harness.get_by_label("Rename lorebook…").click();
    harness.run();
    let field = harness.query_by_role_and_label(egui::accesskit::Role::TextInput, "New name").expect("the new name's field");
    field.click();
    harness.run();
    harness.query_by_role_and_label(egui::accesskit::Role::TextInput, "New name").unwrap().type_text(" (old)");
    harness.run();
    harness.get_by_label("Rename").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.library().lorebooks().iter().any(|b| b.name == "river-lore (old)"));
    harness.run();

    harness.get_by_label("river-lore (old) (1 entry)").click_secondary();
    harness.run();
    harness.get_by_label("Delete lorebook…").click();
    // Asked first, with what goes and what it is detached from.
    run_until(&mut harness, Duration::from_secs(20), |app| app.library().confirming_book_delete().is_some_and(|(_, _, known)| known.is_some()));
    step_until_shown(&mut harness, "Delete lorebook river-lore (old)");
    assert!(harness.query_all_by_label_contains("detached from world \"Eldoria\"").next().is_some());
    assert!(harness.query_all_by_label_contains("Its one entry goes with it").next().is_some());
    harness.get_by_label("Delete lorebook river-lore (old)").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.library().lorebooks().is_empty());
    let left: i64 = store.with(|c| Ok(c.query_row("SELECT count(*) FROM world_lorebooks", [], |r| r.get(0))?)).unwrap();
    assert_eq!(left, 0, "detached from the world in the same transaction");
}

/// SillyTavern's position "outlet": an entry chosen to go to an outlet through the command
/// line or HTTP fires as any other, but goes only where `{{outlet::Name}}` is written — the
/// card's description and the chat's Author's Note here — never into the lore block; an
/// outlet without its name is refused with the field named, and the export keeps both.
/// (Before, such an entry went with the lore before the character and the macro was sent
/// as written.)
#[test]
fn an_outlet_entry_goes_only_where_its_macro_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let paths = support::library::scripted(dir.path(), script());
    let mut pilot = card("Mira");
    pilot["data"]["description"] = json!("A harbour pilot. Tonight: {{outlet::weather}}");
    let mira = write(dir.path(), "mira.json", &pilot);
    ok(&paths, &["import", &mira]);
    ok(&paths, &["lorebook", "new", "Harbour"]);
    let nameless = refused(&paths, &["lorebook", "entry", "add", "Harbour", "--keys", "fog", "--content", "x", "--position", "outlet"]);
    assert!(nameless.contains("outlet_name"), "{nameless}");
    ok(&paths, &[
        "lorebook", "entry", "add", "Harbour", "--keys", "fog", "--content", "Fog rolls over the quay.", "--position", "outlet", "--outlet-name", "weather",
    ]);
    ok(&paths, &["lorebook", "attach", "Harbour", "--character", "Mira"]);

    let engine = lorekeeper::engine::start(paths.clone()).unwrap();
    let options = lorekeeper::serve::ServeOptions { addr: "127.0.0.1:0".parse().unwrap(), token: None, cors: None };
    let server = lorekeeper::serve::start(engine, options).unwrap();
    let base = format!("http://{}/api", server.addr);
    let agent = http();
    let post = |path: &str, body: Value| call(&agent, "POST", &format!("{base}{path}"), Some(body));
    let entry = json!({ "keys": "fog", "content": "The foghorn sounds twice.", "position": "outlet", "outlet_name": "weather", "order": 200 });
    let (status, added) = post("/lorebook/Harbour/entries", entry);
    assert_eq!(status, 200, "{added}");
    let horn = &added["entries"][1];
    assert_eq!((horn["position"].as_u64(), horn["outlet_name"].as_str()), (Some(7), Some("weather")), "{horn}");
    let note = agent
        .put(format!("{base}/chat/Mira/note"))
        .header("Content-Type", "application/json")
        .send(json!({ "text": "Keep the weather in mind: {{outlet::weather}}", "depth": 1 }).to_string())
        .unwrap();
    assert_eq!(note.status().as_u16(), 200);

    let (status, turn) = post("/chat/Mira/send", json!({ "text": "Is there fog on the water?" }));
    assert_eq!(status, 200, "{turn}");
    let packet: String =
        turn["packet"]["messages"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap_or_default()).collect::<Vec<_>>().join("\n");
    // Highest order first, one per line, as SillyTavern fills an outlet.
    let filled = "The foghorn sounds twice.\nFog rolls over the quay.";
    assert!(packet.contains(&format!("Tonight: {filled}")), "the description's outlet: {packet}");
    assert!(packet.contains(&format!("Keep the weather in mind: {filled}")), "the note's outlet: {packet}");
    assert_eq!(packet.matches("Fog rolls over the quay.").count(), 2, "nowhere else: {packet}");
    assert!(!packet.contains("{{outlet"), "{packet}");
    assert!(turn["packet"]["notes"].to_string().contains("lore fired"), "it fired as any entry: {turn}");

    // Exported, the entries keep their position and outlet name.
    let out = dir.path().join("harbour-out.json");
    server.stop();
    ok(&paths, &["export", "lorebook", "Harbour", "--format", "world-info", "--out", out.to_str().unwrap()]);
    let exported: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    for entry in exported["entries"].as_object().unwrap().values() {
        assert_eq!((entry["position"].as_u64(), entry["outletName"].as_str()), (Some(7), Some("weather")), "{entry}");
    }
}
