//! A chat as a SillyTavern user keeps one, through the real binary: the card's
//! greetings are the first message's swipes, the user plays a persona of their own in
//! this chat, a reply is continued, the chat branches and switches back with its
//! memories following, and SillyTavern chat files go out and come back unchanged.

use lorekeeper::config::{Config, Paths};
use lorekeeper::llm::{ProviderKind, ProviderProfile};
use serde_json::{Value, json};

fn command(paths: &Paths, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap(), "--json"])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

fn run(paths: &Paths, args: &[&str]) -> Vec<Value> {
    let out = command(paths, args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn history(paths: &Paths) -> Vec<Value> {
    run(paths, &["chat", "history", "--character", "Maren", "--json"]).last().unwrap().as_array().unwrap().clone()
}

fn texts(messages: &[Value]) -> Vec<String> {
    messages.iter().map(|m| m["text"].as_str().unwrap().to_string()).collect()
}

fn search(paths: &Paths, query: &str) -> String {
    run(paths, &["memory", "search", query, "--mode", "keyword", "--json"]).last().unwrap().to_string()
}

/// A chat written by SillyTavern (not by us): a header with metadata, a greeting, two
/// exchanges with swipes and extras, a narrator's system line.
const ST_FILE: &str = r#"{"user_name":"Ash","character_name":"Maren Vosk","create_date":"2026-10-02@21h15m40s","chat_metadata":{"note_prompt":"Rain.","note_interval":1,"tainted":true}}
{"name":"Maren Vosk","is_user":false,"is_system":false,"send_date":"October 2, 2026 9:15pm","mes":"Lock's closed.","extra":{}}
{"name":"Ash","is_user":true,"is_system":false,"send_date":"October 2, 2026 9:16pm","mes":"I bring eel traps to mend.","extra":{"isSmallSys":false}}
{"name":"Maren Vosk","is_user":false,"is_system":false,"send_date":"October 2, 2026 9:16pm","mes":"Leave the traps by the capstan.","swipes":["Go away.","Leave the traps by the capstan."],"swipe_id":1,"swipe_info":[{"send_date":"October 2, 2026 9:16pm","extra":{}},{"send_date":"October 2, 2026 9:17pm","extra":{}}],"extra":{"api":"openai","model":"someone-elses-model","token_count":9},"force_avatar":"User Avatars/maren.png"}
{"name":"Narrator","is_user":false,"is_system":true,"send_date":"October 2, 2026 9:18pm","mes":"The rain thickens.","extra":{"type":"narrator"}}
{"name":"Ash","is_user":true,"is_system":false,"send_date":"October 2, 2026 9:20pm","mes":"Will the capstan rust?","extra":{}}
{"name":"Maren Vosk","is_user":false,"is_system":false,"send_date":"October 2, 2026 9:20pm","mes":"Everything here rusts, Ash. Even patience.","extra":{}}
"#;

/// A 2×2 RGB PNG.
pub fn tiny_png() -> Vec<u8> {
    let mut bytes = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut bytes, 2, 2);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().unwrap();
        writer.write_image_data(&[200, 120, 40, 10, 20, 30, 90, 90, 90, 255, 255, 255]).unwrap();
    }
    bytes
}

#[test]
fn greetings_personas_continue_branches_and_sillytavern_chat_files() {
    let dir = tempfile::tempdir().unwrap();
    let paths = crate::support::library::scripted(dir.path(), json!({
        "rules": [
            { "when": { "user_contains": "stopped here" }, "reply": "[Maren Vosk]: and it stays shut till dawn." },
            { "when": { "user_contains": "cormorant" }, "reply": "[Maren Vosk]: The cormorant fishes below the weir." },
            { "when": { "user_contains": "gate" }, "reply": "[Maren Vosk]: The gate is shut" }
        ],
        "default": "[Maren Vosk]: Hm."
    }));
    let card = json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": {
        "name": "Maren Vosk", "description": "{{char}} keeps a river lock.", "personality": "", "scenario": "",
        "first_mes": "Lock's closed, {{user}}.", "alternate_greetings": ["Who goes there, {{user}}?"], "mes_example": "",
        "creator_notes": "", "system_prompt": "", "post_history_instructions": "", "tags": [], "creator": "",
        "character_version": "1", "extensions": {} } });
    let file = dir.path().join("maren.json");
    std::fs::write(&file, card.to_string()).unwrap();
    run(&paths, &["import", file.to_str().unwrap()]);

    // The user plays their own persona in this chat; the greeting speaks to it.
    run(&paths, &["persona", "new", "Tamsin", "--description", "{{user}} is a courier on the river road."]);
    run(&paths, &["persona", "use", "Tamsin", "--chat", "Maren"]);
    // A picture for the persona: a PNG is kept, anything else refused with the reason.
    let picture = dir.path().join("tamsin.png");
    std::fs::write(&picture, tiny_png()).unwrap();
    run(&paths, &["persona", "image", "Tamsin", picture.to_str().unwrap()]);
    let not_png = dir.path().join("tamsin.txt");
    std::fs::write(&not_png, "a picture, honestly").unwrap();
    let refused = command(&paths, &["persona", "image", "Tamsin", not_png.to_str().unwrap()]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("not a PNG"), "{}", String::from_utf8_lossy(&refused.stderr));
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    let kept = store
        .with(|c| {
            let id = lorekeeper::character::resolve_persona(c, "Tamsin")?.id;
            lorekeeper::character::persona_image(c, &id)
        })
        .unwrap();
    assert_eq!(kept.as_deref(), Some(tiny_png().as_slice()), "the PNG kept, the refused file not stored");
    drop(store);
    let opening = history(&paths);
    assert_eq!(opening.len(), 1, "a new chat opens with the greeting: {opening:?}");
    assert_eq!(opening[0]["id"], "greeting");
    assert_eq!(opening[0]["text"], "Lock's closed, Tamsin.");
    assert_eq!(opening[0]["swipes"], json!(["Lock's closed, Tamsin.", "Who goes there, Tamsin?"]));
    // The alternate greeting is the greeting's second swipe.
    run(&paths, &["chat", "swipe", "--character", "Maren", "1"]);
    assert_eq!(history(&paths)[0]["text"], "Who goes there, Tamsin?");

    let sent = run(&paths, &["chat", "send", "--character", "Maren", "Open the gate, please.", "--json"]);
    let turn = &sent.last().unwrap()["turn"];
    let packet: String = turn["packet"]["messages"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap()).collect::<Vec<_>>().join("\n");
    assert!(packet.contains("[Maren Vosk]: Who goes there, Tamsin?"), "the chosen greeting opens the history:\n{packet}");
    assert!(packet.contains("<user_persona>\nName: Tamsin\nTamsin is a courier on the river road.\n</user_persona>"), "{packet}");
    assert!(packet.contains("conversation with Tamsin"), "{packet}");

    // Continue: the reply goes on from where it stopped, and its memory with it.
    run(&paths, &["chat", "continue", "--character", "Maren", "--json"]);
    let messages = history(&paths);
    assert_eq!(messages[2]["text"], "The gate is shut and it stays shut till dawn.", "{messages:?}");
    assert!(search(&paths, "dawn").contains("stays shut till dawn"));

    run(&paths, &["chat", "send", "--character", "Maren", "Have you seen the cormorant?", "--json"]);
    let before_branch = history(&paths);
    assert_eq!(before_branch.len(), 5);
    assert!(search(&paths, "cormorant").contains("cormorant"));

    // A memory of the first message pinned and edited by hand.
    let first = before_branch[1]["id"].as_str().unwrap().to_string();
    run(&paths, &["memory", "pin", &first]);
    run(&paths, &["memory", "edit", &first, "Open the gate, please, before the tide turns."]);
    let curated = |paths: &Paths| -> (bool, String, bool) {
        let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
        store
            .with(|c| Ok(c.query_row("SELECT pinned, text, edited_at IS NOT NULL FROM memories WHERE id = ?1", [&first], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?))
            .unwrap()
    };
    let expected = (true, "Open the gate, please, before the tide turns.".to_string(), true);
    assert_eq!(curated(&paths), expected);
    // Branch at the first reply: the chat goes on from there, the original is kept.
    let at = before_branch[2]["id"].as_str().unwrap();
    run(&paths, &["chat", "branch", "--character", "Maren", "--message", at]);
    assert_eq!(texts(&history(&paths)), texts(&before_branch[..3]));
    assert!(!search(&paths, "cormorant").contains("cormorant"), "the branch does not remember what it never lived");
    let saved = run(&paths, &["chat", "chats", "--character", "Maren", "--json"]).last().unwrap().as_array().unwrap().clone();
    assert_eq!(saved.len(), 1);
    assert_eq!(saved[0]["turns"], 2);
    // Switch back: the original whole, its memories again; the branch is saved instead.
    assert_eq!(curated(&paths), expected, "the branch keeps the pin and the edit");
    run(&paths, &["chat", "open", "--character", "Maren", saved[0]["id"].as_str().unwrap()]);
    assert_eq!(texts(&history(&paths)), texts(&before_branch));
    assert_eq!(curated(&paths), expected, "switched back, the original has its pin and edit again");
    assert!(search(&paths, "tide turns").contains("before the tide turns"), "found by its edited words");
    assert!(search(&paths, "cormorant").contains("cormorant"));
    let saved = run(&paths, &["chat", "chats", "--character", "Maren", "--json"]).last().unwrap().as_array().unwrap().clone();
    assert_eq!(saved.iter().map(|s| s["turns"].as_u64().unwrap()).collect::<Vec<_>>(), [1]);

    // Every prompt's injection is kept, not only the last: two sends and a continue.
    let log = run(&paths, &["memory", "injections", "--agent", "companion:Maren Vosk"]);
    let log = log.last().unwrap().as_array().unwrap().clone();
    assert_eq!(log.len(), 3, "{log:?}");
    assert!(log[0]["query"].as_str().unwrap().contains("cormorant"), "newest first: {log:?}");

    // Export as a SillyTavern chat: a header, the greeting with its swipes, four messages.
    let out = dir.path().join("maren.jsonl");
    run(&paths, &["chat", "export", "--character", "Maren", "--out", out.to_str().unwrap()]);
    let lines: Vec<Value> = std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 6, "{lines:?}");
    assert_eq!((lines[0]["user_name"].as_str(), lines[0]["character_name"].as_str()), (Some("Tamsin"), Some("Maren Vosk")));
    assert_eq!((lines[1]["mes"].as_str(), lines[1]["swipe_id"].as_u64()), (Some("Who goes there, Tamsin?"), Some(1)));
    assert_eq!(lines[2]["is_user"], true);
    assert_eq!(lines[3]["mes"], "The gate is shut and it stays shut till dawn.");
    assert_eq!(lines[5]["mes"], "The cormorant fishes below the weir.");

    // To read, and for scripts: the same chat as Markdown and as JSON.
    let md = dir.path().join("maren.md");
    run(&paths, &["chat", "export", "--character", "Maren", "--out", md.to_str().unwrap(), "--format", "markdown"]);
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.starts_with("# Maren Vosk and Tamsin"), "{text}");
    assert!(text.contains("**Maren Vosk**: Who goes there, Tamsin?") && text.contains("**Tamsin**: Have you seen the cormorant?"), "{text}");
    let js = dir.path().join("maren.json");
    run(&paths, &["chat", "export", "--character", "Maren", "--out", js.to_str().unwrap(), "--format", "json"]);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&js).unwrap()).unwrap();
    assert_eq!(doc["messages"].as_array().unwrap().len(), 5);
    assert_eq!(doc["messages"][4]["text"], "The cormorant fishes below the weir.");
    // Our own chat file back in: the chat is played as the persona its header names.
    run(&paths, &["persona", "use", "--none", "--chat", "Maren"]);
    run(&paths, &["chat", "import", out.to_str().unwrap(), "--character", "Maren"]);
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    let plays: Option<String> = store
        .with(|c| {
            Ok(c.query_row(
                "SELECT p.name FROM companion_chats h JOIN characters m ON m.id = h.character_id LEFT JOIN personas p ON p.id = h.persona_id WHERE m.name = 'Maren Vosk'",
                [],
                |r| r.get(0),
            )?)
        })
        .unwrap();
    assert_eq!(plays.as_deref(), Some("Tamsin"), "the file's user_name is the library's persona");
    drop(store);

    // A malformed file changes nothing and says which line is wrong.
    let broken = dir.path().join("broken.jsonl");
    std::fs::write(&broken, ST_FILE.replace(r#""mes":"Will the capstan rust?","#, r#""mes":"Will the capstan rust?,"#)).unwrap();
    let failed = command(&paths, &["chat", "import", broken.to_str().unwrap(), "--character", "Maren"]);
    assert!(!failed.status.success());
    assert!(String::from_utf8_lossy(&failed.stderr).contains("line 6"), "{}", String::from_utf8_lossy(&failed.stderr));
    assert_eq!(texts(&history(&paths)), texts(&before_branch));

    // Someone else's chat file comes in (the chat it replaces is saved), is remembered,
    // and goes out again exactly as it came.
    let theirs = dir.path().join("theirs.jsonl");
    std::fs::write(&theirs, ST_FILE).unwrap();
    let imported = run(&paths, &["chat", "import", theirs.to_str().unwrap(), "--character", "Maren"]);
    let imported = imported.last().unwrap();
    assert_eq!(imported["exchanges"], 2);
    assert!(imported["saved"].is_string());
    let notes = imported["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 3, "the narrator's line is carried, and said: {imported}");
    assert!(notes.iter().any(|n| n.as_str().unwrap().contains("Author's Note is this chat's: sent in the chat at depth 4")), "{imported}");
    assert!(notes.iter().any(|n| n.as_str().unwrap().contains("Ash, is no persona")), "{imported}");
    let messages = history(&paths);
    assert_eq!(
        texts(&messages),
        ["Lock's closed.", "I bring eel traps to mend.", "Leave the traps by the capstan.", "Will the capstan rust?", "Everything here rusts, Ash. Even patience."],
        "the file's own greeting opens it"
    );
    assert_eq!(messages[2]["swipes"].as_array().unwrap().len(), 2);
    assert!(search(&paths, "patience").contains("Even patience"), "an imported chat is remembered");
    assert!(!search(&paths, "cormorant").contains("cormorant"), "and the chat it replaced is not");
    let again = dir.path().join("again.jsonl");
    run(&paths, &["chat", "export", "--character", "Maren", "--out", again.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(&again).unwrap(), ST_FILE, "a SillyTavern chat round-trips unchanged");
    // An edit shows in the next export, the rest stays as it was.
    let reply = messages[4]["id"].as_str().unwrap();
    run(&paths, &["chat", "edit", "--character", "Maren", "--message", reply, "Everything here rusts, Ash."]);
    run(&paths, &["chat", "export", "--character", "Maren", "--out", again.to_str().unwrap()]);
    let edited = std::fs::read_to_string(&again).unwrap();
    assert_eq!(edited, ST_FILE.replace("Everything here rusts, Ash. Even patience.", "Everything here rusts, Ash."));
}

/// What the user did to a chat's memories by hand stays done when the chat is put aside
/// and played again: a deleted memory is not written back, a summary (pinned and edited)
/// comes back with the turns it covers, and a message whose memory is deleted can still
/// be edited and swiped.
#[test]
fn a_chat_played_again_keeps_its_deleted_memories_deleted_and_its_summaries() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths { config_file: dir.path().join("config.toml"), library_file: dir.path().join("library.sqlite"), log_dir: dir.path().join("logs") };
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        json!({
            "rules": [
                { "when": { "user_contains": "And the eels?\n</user_input>" }, "reply": "[Maren Vosk]: Eels run thick after rain." },
                { "when": { "user_contains": "heron nest?\n</user_input>" }, "reply": "[Maren Vosk]: The heron nests past the second weir." }
            ],
            "default": "[Maren Vosk]: Summary: Tamsin asked about the river birds and the eels."
        })
        .to_string(),
    )
    .unwrap();
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile { name: "script".into(), kind: ProviderKind::Scripted, model: "s".into(), path: Some(script), ..Default::default() });
    config.default_profile = "script".into();
    config.memory.embedding.model_dir = Some(dir.path().join("no-model"));
    config.memory.summary_every = 1;
    config.save(&paths.config_file).unwrap();
    let card = json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": {
        "name": "Maren Vosk", "description": "{{char}} keeps a river lock.", "personality": "", "scenario": "",
        "first_mes": "Lock's closed.", "mes_example": "", "creator_notes": "", "system_prompt": "", "post_history_instructions": "",
        "tags": [], "creator": "", "character_version": "1", "extensions": {} } });
    let file = dir.path().join("maren.json");
    std::fs::write(&file, card.to_string()).unwrap();
    run(&paths, &["import", file.to_str().unwrap()]);
    run(&paths, &["chat", "send", "--character", "Maren", "Where does the heron nest?"]);
    run(&paths, &["chat", "send", "--character", "Maren", "And the eels?"]);
    let messages = history(&paths);
    let (heron_reply, eel_reply) = (messages[2]["id"].as_str().unwrap().to_string(), messages[4]["id"].as_str().unwrap().to_string());

    let memories = |paths: &Paths| -> Vec<(String, String, bool, bool, bool)> {
        let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
        store
            .with(|c| {
                let mut stmt = c.prepare("SELECT id, kind, pinned, edited_at IS NOT NULL, summarised FROM memories ORDER BY seq")?;
                let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })
            .unwrap()
    };
    let summary = memories(&paths).into_iter().find(|m| m.1 == "summary").unwrap_or_else(|| {
        let out = command(&paths, &["chat", "send", "--character", "Maren", "x"]);
        panic!("a summary: {:?} {} {}", memories(&paths), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    }).0;
    run(&paths, &["memory", "edit", &summary, "Tamsin asked where the heron nests; Maren said past the second weir."]);
    run(&paths, &["memory", "pin", &summary]);
    run(&paths, &["memory", "delete", &eel_reply]);
    let before = memories(&paths);
    assert!(!before.iter().any(|m| m.0 == eel_reply));

    // Branch at the first reply, then play the original again.
    run(&paths, &["chat", "branch", "--character", "Maren", "--message", &heron_reply]);
    let saved = run(&paths, &["chat", "chats", "--character", "Maren", "--json"]).last().unwrap().as_array().unwrap().clone();
    run(&paths, &["chat", "open", "--character", "Maren", saved[0]["id"].as_str().unwrap()]);
    let after = memories(&paths);
    assert!(!after.iter().any(|m| m.0 == eel_reply), "the deleted memory stays deleted: {after:?}");
    assert!(!search(&paths, "thick after rain").contains("thick after rain"));
    let kept = after.iter().find(|m| m.0 == summary).unwrap_or_else(|| panic!("the summary came back: {after:?}"));
    assert!(kept.2 && kept.3, "pinned and edited: {kept:?}");
    assert!(search(&paths, "second weir").contains("Maren said past the second weir"), "its edited text");
    let covered: Vec<_> = after.iter().filter(|m| m.1 == "turn" && m.4).map(|m| m.0.clone()).collect();
    let before_covered: Vec<_> = before.iter().filter(|m| m.1 == "turn" && m.4).map(|m| m.0.clone()).collect();
    assert_eq!(covered, before_covered, "the turns it covers are summarised again, and no others");

    // The message whose memory was deleted is still the chat's to edit and swipe.
    run(&paths, &["chat", "edit", "--character", "Maren", "--message", &eel_reply, "Eels, and plenty."]);
    assert_eq!(history(&paths)[4]["text"], "Eels, and plenty.");
    assert!(!memories(&paths).iter().any(|m| m.0 == eel_reply), "editing the message does not bring its memory back");
    run(&paths, &["chat", "regenerate", "--character", "Maren"]);
    assert_eq!(history(&paths)[4]["text"], "Eels run thick after rain.");
}

/// A persona switched mid-chat names the messages written after it; the ones before
/// keep the name they were written under, in the prompt, in memory and in the export.
#[test]
fn switching_persona_does_not_rename_what_was_already_said() {
    let dir = tempfile::tempdir().unwrap();
    let paths = crate::support::library::scripted(dir.path(), json!({ "rules": [], "default": "[Maren Vosk]: Hm." }));
    let card = json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": {
        "name": "Maren Vosk", "description": "{{char}} keeps a river lock.", "personality": "", "scenario": "",
        "first_mes": "", "mes_example": "", "creator_notes": "", "system_prompt": "", "post_history_instructions": "",
        "tags": [], "creator": "", "character_version": "1", "extensions": {} } });
    let file = dir.path().join("maren.json");
    std::fs::write(&file, card.to_string()).unwrap();
    run(&paths, &["import", file.to_str().unwrap()]);
    run(&paths, &["persona", "new", "Tamsin"]);
    run(&paths, &["persona", "use", "Tamsin", "--chat", "Maren"]);
    run(&paths, &["chat", "send", "--character", "Maren", "First, as Tamsin."]);
    run(&paths, &["persona", "new", "Pat"]);
    run(&paths, &["persona", "use", "Pat", "--chat", "Maren"]);
    let sent = run(&paths, &["chat", "send", "--character", "Maren", "Then, as Pat.", "--json"]);
    let packet = sent.last().unwrap()["turn"]["packet"]["messages"][1]["content"].as_str().unwrap().to_string();
    assert!(packet.contains("[Tamsin]: First, as Tamsin."), "{packet}");
    let out = dir.path().join("maren.jsonl");
    run(&paths, &["chat", "export", "--character", "Maren", "--out", out.to_str().unwrap()]);
    let lines: Vec<Value> = std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let users: Vec<&str> = lines.iter().filter(|l| l["is_user"] == true).map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(users, ["Tamsin", "Pat"], "{lines:?}");
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    let speakers: Vec<String> = store
        .with(|c| {
            let mut stmt = c.prepare("SELECT speaker FROM memories WHERE kind = 'turn' AND speaker != 'Maren Vosk' ORDER BY seq")?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            Ok(rows.collect::<Result<Vec<String>, _>>()?)
        })
        .unwrap();
    assert_eq!(speakers, ["Tamsin", "Pat"]);
}

/// A SillyTavern chat bound to a lorebook (`chat_metadata.world_info`) comes in bound to
/// it when the library has a book of that name, and says so; when it has none, says how
/// to bind it. (The binding was dropped without a word.)
#[test]
fn a_chat_file_bound_to_a_lorebook_comes_in_bound_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let paths = crate::support::library::scripted(dir.path(), json!({ "default": "[Maren Vosk]: Hm." }));
    let card = json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": {
        "name": "Maren Vosk", "description": "A lock-keeper.", "personality": "", "scenario": "", "first_mes": "Lock's closed.",
        "mes_example": "", "creator_notes": "", "system_prompt": "", "post_history_instructions": "", "tags": [], "creator": "",
        "character_version": "1", "extensions": {} } });
    std::fs::write(dir.path().join("maren.json"), card.to_string()).unwrap();
    let book = json!({ "name": "Saltmarrow", "entries": { "0": { "uid": 0, "key": ["kraken"], "keysecondary": [],
        "content": "A kraken sleeps under the Saltmarrow pier.", "comment": "Kraken", "constant": false, "disable": false, "order": 100, "position": 0 } } });
    std::fs::write(dir.path().join("saltmarrow.json"), book.to_string()).unwrap();
    run(&paths, &["import", dir.path().join("maren.json").to_str().unwrap(), dir.path().join("saltmarrow.json").to_str().unwrap()]);
    let file = |book: &str| {
        format!(
            "{}\n{}\n",
            json!({ "user_name": "User", "character_name": "Maren Vosk", "create_date": "2026-10-02@21h15m40s", "chat_metadata": { "world_info": book } }),
            json!({ "name": "Maren Vosk", "is_user": false, "is_system": false, "send_date": "October 2, 2026 9:15pm", "mes": "Lock's closed.", "extra": {} })
        )
    };
    let theirs = dir.path().join("theirs.jsonl");
    std::fs::write(&theirs, file("Saltmarrow")).unwrap();
    let imported = run(&paths, &["chat", "import", theirs.to_str().unwrap(), "--character", "Maren"]);
    let notes = imported.last().unwrap()["notes"].to_string();
    assert!(notes.contains("chat lorebook \\\"Saltmarrow\\\" is attached"), "{notes}");
    let sent = run(&paths, &["chat", "send", "--character", "Maren", "Is there a kraken here?"]);
    assert!(sent.last().unwrap()["turn"]["packet"]["messages"].to_string().contains("A kraken sleeps under the Saltmarrow pier."));

    std::fs::write(&theirs, file("Not In This Library")).unwrap();
    let imported = run(&paths, &["chat", "import", theirs.to_str().unwrap(), "--character", "Maren"]);
    let notes = imported.last().unwrap()["notes"].to_string();
    assert!(notes.contains("is not attached") && notes.contains("lorebook attach"), "{notes}");
    assert!(!notes.contains("is a chat with"), "Maren's own file is not called another's: {notes}");

    // Another character's chat file, brought in by mistake: said.
    std::fs::write(&theirs, file("Saltmarrow").replace("Maren Vosk", "Ilse Marrow")).unwrap();
    let imported = run(&paths, &["chat", "import", theirs.to_str().unwrap(), "--character", "Maren"]);
    let notes = imported.last().unwrap()["notes"].to_string();
    assert!(notes.contains("the file is a chat with Ilse Marrow, not Maren Vosk"), "{notes}");
}

/// A SillyTavern chat where messages come in a row (two from the user, two from the
/// character, a last message with no reply) is read whole: those messages are part of
/// what the model reads, in order, and shown in the history; a hidden (system) message
/// is not sent, as SillyTavern hides it; the file goes out again unchanged. (Every
/// message in a row was dropped from the conversation, "kept for export" only.)
#[test]
fn messages_in_a_row_in_a_sillytavern_chat_are_read_as_part_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let paths = crate::support::library::scripted(dir.path(), json!({ "default": "[Maren Vosk]: Hm." }));
    let card = json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": {
        "name": "Maren Vosk", "description": "A lock-keeper.", "personality": "", "scenario": "", "first_mes": "Lock's closed.",
        "mes_example": "", "creator_notes": "", "system_prompt": "", "post_history_instructions": "", "tags": [], "creator": "",
        "character_version": "1", "extensions": {} } });
    std::fs::write(dir.path().join("maren.json"), card.to_string()).unwrap();
    run(&paths, &["import", dir.path().join("maren.json").to_str().unwrap()]);
    let message = |name: &str, user: bool, system: bool, mes: &str| {
        json!({ "name": name, "is_user": user, "is_system": system, "send_date": "October 2, 2026 9:15pm", "mes": mes, "extra": {} }).to_string()
    };
    let lines = [
        json!({ "user_name": "Ash", "character_name": "Maren Vosk", "create_date": "2026-10-02@21h15m40s", "chat_metadata": {} }).to_string(),
        message("Maren Vosk", false, false, "Lock's closed."),
        message("Ash", true, false, "ROW-USER-ONE: I bring eel traps."),
        message("Ash", true, false, "ROW-USER-TWO: And a letter for you."),
        message("Maren Vosk", false, false, "ROW-REPLY-ONE: Leave them by the capstan."),
        message("Maren Vosk", false, false, "ROW-REPLY-TWO: Who is the letter from?"),
        message("Narrator", false, true, "HIDDEN-NOTE: the rain thickens."),
        message("Ash", true, false, "ROW-LAST: From your sister."),
    ];
    let text = lines.join("\n") + "\n";
    let theirs = dir.path().join("theirs.jsonl");
    std::fs::write(&theirs, &text).unwrap();
    run(&paths, &["chat", "import", theirs.to_str().unwrap(), "--character", "Maren"]);
    let shown = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
        .args(["chat", "history", "--character", "Maren"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout).replace('\n', " ");
    let sent = run(&paths, &["chat", "send", "--character", "Maren", "What does she write?"]);
    let history = sent.last().unwrap()["turn"]["packet"]["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["tag"] == "chat_history")
        .unwrap()["text"]
        .as_str()
        .unwrap()
        .to_string();
    let at = |needle: &str| history.find(needle).unwrap_or_else(|| panic!("{needle} not sent:\n{history}"));
    assert!(at("ROW-USER-ONE") < at("ROW-USER-TWO") && at("ROW-USER-TWO") < at("ROW-REPLY-ONE"), "{history}");
    assert!(at("ROW-REPLY-ONE") < at("[Maren Vosk]: ROW-REPLY-TWO") && at("ROW-REPLY-TWO") < at("[Ash]: ROW-LAST"), "{history}");
    assert!(!history.contains("HIDDEN-NOTE"), "a hidden message is not sent:\n{history}");
    for needle in ["ROW-USER-ONE", "ROW-USER-TWO", "ROW-REPLY-ONE", "ROW-REPLY-TWO", "ROW-LAST"] {
        assert!(shown.contains(needle), "{needle} not in the history shown: {shown}");
    }
    // And in the history a script reads, in order, marked as the file's.
    let listed = self::history(&paths);
    let order: Vec<String> = texts(&listed).iter().map(|t| t.split(':').next().unwrap_or_default().to_string()).collect();
    assert_eq!(&order[..6], ["Lock's closed.", "ROW-USER-ONE", "ROW-USER-TWO", "ROW-REPLY-ONE", "ROW-REPLY-TWO", "ROW-LAST"], "{listed:?}");
    assert_eq!(listed[1]["from_file"], true);
    assert_eq!(listed[1]["role"], "user");
    // The file goes out again as it came (with the new exchange after it).
    let again = dir.path().join("again.jsonl");
    run(&paths, &["chat", "export", "--character", "Maren", "--out", again.to_str().unwrap()]);
    assert!(std::fs::read_to_string(&again).unwrap().starts_with(&text), "the file's own lines come back unchanged");
    // A branch at the first reply ends there: the file's messages after it go with what follows.
    let reply = listed.iter().find(|m| m["text"].as_str().is_some_and(|t| t.starts_with("ROW-REPLY-ONE"))).unwrap()["id"].as_str().unwrap().to_string();
    run(&paths, &["chat", "branch", "--character", "Maren", "--message", &reply]);
    let order: Vec<String> = texts(&self::history(&paths)).iter().map(|t| t.split(':').next().unwrap_or_default().to_string()).collect();
    assert_eq!(order, ["Lock's closed.", "ROW-USER-ONE", "ROW-USER-TWO", "ROW-REPLY-ONE"]);
}

/// Each message of an imported SillyTavern chat keeps its own time, in every form
/// SillyTavern writes `send_date` (it used to show its exchange's, the user message's,
/// for the reply and for messages carried in a row): in `chat history` as text and JSON,
/// and written back as the file had it.
#[test]
fn an_imported_chat_keeps_each_messages_own_time() {
    let dir = tempfile::tempdir().unwrap();
    let paths = maren_library(dir.path(), json!({ "default": "[Maren Vosk]: Hm." }));
    let message = |name: &str, user: bool, at: Value, mes: &str| {
        json!({ "name": name, "is_user": user, "is_system": false, "send_date": at, "mes": mes, "extra": {} }).to_string()
    };
    let lines = [
        json!({ "user_name": "Ash", "character_name": "Maren Vosk", "create_date": "2026-11-24@19h00m00s", "chat_metadata": {} }).to_string(),
        message("Maren Vosk", false, json!("November 24, 2026 7:00pm"), "Lock's closed."),
        message("Ash", true, json!("November 24, 2026 7:03pm"), "TIME-USER-ONE"),
        message("Maren Vosk", false, json!("2026-11-24T19:05:30.000Z"), "TIME-REPLY-ONE"),
        message("Maren Vosk", false, json!(1795547400000_i64), "TIME-CARRIED"),
        message("Ash", true, json!("2026-11-24 @19h 12m 07s 250ms"), "TIME-USER-TWO"),
        message("Maren Vosk", false, json!("1795547580000"), "TIME-REPLY-TWO"),
    ];
    let text = lines.join("\n") + "\n";
    let theirs = dir.path().join("theirs.jsonl");
    std::fs::write(&theirs, &text).unwrap();
    run(&paths, &["chat", "import", theirs.to_str().unwrap(), "--character", "Maren"]);

    let listed = history(&paths);
    let at: Vec<(String, String)> = listed
        .iter()
        .filter(|m| m["text"].as_str().is_some_and(|t| t.starts_with("TIME-")))
        .map(|m| (m["text"].as_str().unwrap().to_string(), m["at"].as_str().unwrap_or("none").to_string()))
        .collect();
    let expected = [
        ("TIME-USER-ONE", "2026-11-24T19:03:00Z"),
        ("TIME-REPLY-ONE", "2026-11-24T19:05:30Z"),
        ("TIME-CARRIED", "2026-11-24T19:10:00Z"),
        ("TIME-USER-TWO", "2026-11-24T19:12:07Z"),
        ("TIME-REPLY-TWO", "2026-11-24T19:13:00Z"),
    ];
    assert_eq!(at, expected.map(|(t, a)| (t.to_string(), a.to_string())), "{listed:?}");
    let shown = by_hand(&paths, &["chat", "history", "--character", "Maren"], "");
    let shown = String::from_utf8_lossy(&shown.stdout).to_string();
    for (text, at) in expected {
        assert!(shown.lines().any(|l| l.starts_with(&format!("[{at}]")) && l.contains(text)), "{text} at {at}:\n{shown}");
    }
    // Written back as the file had it: the same send_date text, message for message.
    let again = dir.path().join("again.jsonl");
    run(&paths, &["chat", "export", "--character", "Maren", "--out", again.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(&again).unwrap(), text, "the file comes back as it went in");
}

/// An Author's Note sent every N user messages counts the user messages of an imported
/// chat that made no exchange of their own (two in a row), as SillyTavern counts every
/// user message; they used to count only through their exchange, so the note went with
/// the wrong message.
#[test]
fn the_authors_note_counts_every_user_message_of_an_imported_chat() {
    let dir = tempfile::tempdir().unwrap();
    let paths = maren_library(dir.path(), json!({ "default": "[Maren Vosk]: Hm." }));
    let message = |user: bool, mes: &str| {
        let name = if user { "Ash" } else { "Maren Vosk" };
        json!({ "name": name, "is_user": user, "is_system": false, "send_date": "November 24, 2026 7:00pm", "mes": mes, "extra": {} }).to_string()
    };
    let metadata = json!({ "note_prompt": "NOTE-EVERY-FIFTH", "note_interval": 5, "note_depth": 4, "note_position": 1, "note_role": 0 });
    let lines = [
        json!({ "user_name": "Ash", "character_name": "Maren Vosk", "create_date": "2026-11-24@19h00m00s", "chat_metadata": metadata }).to_string(),
        message(false, "Lock's closed."),
        // Four user messages, two exchanges: one user message before the first, one after it.
        message(true, "One."),
        message(true, "Two."),
        message(false, "Hm."),
        message(true, "Three."),
        message(true, "Four."),
        message(false, "Hm again."),
    ];
    let theirs = dir.path().join("theirs.jsonl");
    std::fs::write(&theirs, lines.join("\n") + "\n").unwrap();
    run(&paths, &["chat", "import", theirs.to_str().unwrap(), "--character", "Maren"]);
    let note = run(&paths, &["chat", "note", "--character", "Maren"]);
    assert_eq!(note.last().unwrap()["user_messages"], 4, "{note:?}");
    // The fifth user message carries the note; the sixth does not.
    let sent = |text: &str| run(&paths, &["chat", "send", "--character", "Maren", text]).last().unwrap()["turn"]["packet"].to_string();
    assert!(sent("Five.").contains("NOTE-EVERY-FIFTH"), "the fifth user message carries the note");
    assert!(!sent("Six.").contains("NOTE-EVERY-FIFTH"), "the sixth does not");
}

/// Maren's card (a greeting and an alternate) imported into a scripted library.
fn maren_library(dir: &std::path::Path, script: Value) -> Paths {
    let paths = crate::support::library::scripted(dir, script);
    let card = json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": {
        "name": "Maren Vosk", "description": "{{char}} keeps a river lock.", "personality": "", "scenario": "",
        "first_mes": "Lock's closed, {{user}}.", "alternate_greetings": ["Who goes there, {{user}}?"], "mes_example": "",
        "creator_notes": "", "system_prompt": "", "post_history_instructions": "", "tags": [], "creator": "",
        "character_version": "1", "extensions": {} } });
    let file = dir.join("maren.json");
    std::fs::write(&file, card.to_string()).unwrap();
    run(&paths, &["import", file.to_str().unwrap()]);
    paths
}

/// The real binary as a person runs it: no `--json`, `stdin` given.
fn by_hand(paths: &Paths, args: &[&str], stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// SillyTavern's "Start new chat": the chat played is saved whole and the new one opens
/// with the greeting; a saved chat is retitled and deleted; a chat switched away from is
/// saved under a title that says which chat took its place (it read "switched away from").
#[test]
fn a_new_chat_starts_from_the_greeting_and_saved_chats_are_renamed_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let paths = maren_library(dir.path(), json!({ "rules": [], "default": "[Maren Vosk]: Hm." }));
    run(&paths, &["chat", "send", "--character", "Maren", "Morning."]);
    let changed = run(&paths, &["chat", "new", "--character", "Maren"]);
    let action = changed.last().unwrap()["action"].as_str().unwrap().to_string();
    assert!(action.starts_with("new chat (the chat before is saved chat "), "{action}");
    assert_eq!(texts(&history(&paths)), ["Lock's closed, User."], "the new chat holds the greeting alone");
    let saved = run(&paths, &["chat", "chats", "--character", "Maren"]).last().unwrap().as_array().unwrap().clone();
    assert_eq!((saved.len(), saved[0]["title"].as_str(), saved[0]["turns"].as_u64()), (1, Some("put aside for a new chat"), Some(1)), "{saved:?}");
    let first = saved[0]["id"].as_str().unwrap().to_string();

    // Switched back: the chat left is saved under a title naming the chat opened.
    run(&paths, &["chat", "send", "--character", "Maren", "Evening."]);
    run(&paths, &["chat", "open", "--character", "Maren", &first]);
    assert_eq!(texts(&history(&paths))[1], "Morning.");
    let saved = run(&paths, &["chat", "chats", "--character", "Maren"]).last().unwrap().as_array().unwrap().clone();
    assert_eq!(saved[0]["title"], "put aside to open “put aside for a new chat”", "{saved:?}");
    let evening = saved[0]["id"].as_str().unwrap().to_string();

    let renamed = run(&paths, &["chat", "rename-chat", "--character", "Maren", &evening, "Evening at the lock"]);
    assert_eq!(renamed.last().unwrap()["renamed"]["title"], "Evening at the lock", "{renamed:?}");
    let out = by_hand(&paths, &["chat", "chats", "--character", "Maren"], "");
    assert!(String::from_utf8_lossy(&out.stdout).contains("Evening at the lock  (1 exchanges"), "{}", String::from_utf8_lossy(&out.stdout));
    let left = run(&paths, &["chat", "delete-chat", "--character", "Maren", &evening]);
    assert_eq!(left.last().unwrap()["saved"], json!([]), "{left:?}");
    let again = command(&paths, &["chat", "delete-chat", "--character", "Maren", &evening]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("saved chat"), "{}", String::from_utf8_lossy(&again.stderr));
}

/// `chat regenerate` by hand prints each draw on its own line with the speaker's name,
/// as `chat send` does (a discarded draw used to run straight into the next one); a
/// swipe that is not there is refused in good English ("has 1 swipes").
#[test]
fn a_regenerated_reply_prints_each_draw_on_its_own_line_and_swipes_are_counted_right() {
    let dir = tempfile::tempdir().unwrap();
    let paths = maren_library(dir.path(), json!({ "rules": [
        { "when": { "user_contains": "kettle" }, "replies": ["[User]: I'll answer for myself.", "[Maren Vosk]: Tea's on."], "then": "repeat_last" }
    ], "default": "[Maren Vosk]: Hm." }));
    let out = by_hand(&paths, &["chat", "send", "--character", "Maren", "Is the kettle on?"], "");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let refused = by_hand(&paths, &["chat", "swipe", "--character", "Maren", "3"], "");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("the last reply has 1 swipe (number 0); there is no swipe 3"), "{said}");
    let out = by_hand(&paths, &["chat", "regenerate", "--character", "Maren"], "");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("(reply 1 discarded"), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.contains(&"Maren Vosk: Tea's on."), "the kept draw on a line of its own, named: {stdout:?}");
    assert_eq!(lines.last(), Some(&"regenerated (swipe 2 of 2)"), "{stdout:?}");
    let refused = by_hand(&paths, &["chat", "swipe", "--character", "Maren", "2"], "");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("has 2 swipes (numbered from 0)"), "{}", String::from_utf8_lossy(&refused.stderr));
}

/// `chat repl` answers a slash command it does not know with the ones it does, and sends
/// nothing (`/regenerate` and a typo of `/history` used to go to the character as
/// messages); `/regenerate`, `/swipe N` and `/continue` work the chat as their verbs do.
#[test]
fn the_repl_refuses_an_unknown_slash_command_and_regenerates_and_swipes() {
    let dir = tempfile::tempdir().unwrap();
    let paths = maren_library(dir.path(), json!({ "rules": [], "default": "[Maren Vosk]: Hm." }));
    let out = by_hand(&paths, &["chat", "repl", "--character", "Maren"], "Morning.\n/hisotry\n/help\n/regenerate\n/swipe 0\n//slash\n/quit\n");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("unknown command /hisotry; commands: /undo, /regenerate, /swipe N, /continue, /history, /help, /quit"), "{stderr}");
    assert!(stdout.contains("regenerated (swipe 2 of 2)") && stdout.contains("swiped: Hm. (swipe 1 of 2)"), "{stdout}");
    let messages = history(&paths);
    assert_eq!(texts(&messages), ["Lock's closed, User.", "Morning.", "Hm.", "/slash", "Hm."], "only the messages were sent");
    assert_eq!(messages[2]["swipes"].as_array().map(Vec::len), Some(2));
}
