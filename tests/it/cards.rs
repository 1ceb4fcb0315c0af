//! A user's own card in one-to-one chat, through the real binary: its embedded
//! lorebook fires on a key in the user's message, with the card's macros resolved in
//! the packet as sent.

use crate::support::mock_http::{Action, After, MockServer};
use crate::support::wire::{Dialect, OpenAi};
use lorekeeper::config::{Config, Paths};
use lorekeeper::llm::{ProviderKind, ProviderProfile};
use serde_json::{Value, json};

fn run(paths: &Paths, args: &[&str]) -> Vec<Value> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap(), "--json"])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn a_cards_own_book_fires_in_chat_with_its_macros_resolved() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths { config_file: dir.path().join("config.toml"), library_file: dir.path().join("library.sqlite"), log_dir: dir.path().join("logs") };
    let script = dir.path().join("script.json");
    std::fs::write(&script, json!({ "default": "[Maren Vosk]: The lamp is lit, as always." }).to_string()).unwrap();
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile {
        name: "script".into(),
        kind: ProviderKind::Scripted,
        model: "card-script".into(),
        path: Some(script),
        ..Default::default()
    });
    config.default_profile = "script".into();
    config.memory.embedding.model_dir = Some(dir.path().join("no-model"));
    config.save(&paths.config_file).unwrap();

    let card = json!({
        "spec": "chara_card_v2", "spec_version": "2.0",
        "data": {
            "name": "Maren Vosk",
            "description": "{{char}} keeps the lamp of a river lock; she distrusts {{user}} at first.",
            "personality": "terse", "scenario": "", "first_mes": "*{{char}} looks up.* Lock's closed.",
            "mes_example": "", "creator_notes": "Made by someone else.", "system_prompt": "Answer as the lock-keeper. {{original}}",
            "post_history_instructions": "Never mention the weir.",
            "alternate_greetings": [], "tags": ["river"], "creator": "someone else", "character_version": "3", "extensions": {},
            "character_book": { "name": "River lock", "entries": [
                { "keys": ["toll"], "content": "The toll at {{char}}'s lock is one silver fish-coin per hull.", "enabled": true,
                  "insertion_order": 100, "id": 1, "comment": "The toll", "extensions": {} },
                { "keys": ["flood"], "content": "The spring flood drowned the old weir.", "enabled": true,
                  "insertion_order": 90, "id": 2, "comment": "The flood", "extensions": {} }
            ] }
        }
    });
    let file = dir.path().join("maren.json");
    std::fs::write(&file, card.to_string()).unwrap();
    run(&paths, &["import", file.to_str().unwrap()]);

    let events = run(&paths, &["chat", "send", "--character", "Maren Vosk", "What is the toll tonight?", "--json"]);
    let turn = &events.last().unwrap()["turn"];
    let sent: String = turn["packet"]["messages"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap()).collect::<Vec<_>>().join("\n");
    assert!(sent.contains("The toll at Maren Vosk's lock is one silver fish-coin per hull."), "the entry, macros resolved:\n{sent}");
    assert!(!sent.contains("spring flood"), "an entry whose key was not said stays out");
    assert!(sent.contains("Maren Vosk keeps the lamp of a river lock; she distrusts User at first."), "{sent}");
    assert!(!sent.contains("{{"), "{sent}");
    assert!(!sent.contains("Made by someone else"), "creator notes are never sent");
    let notes: Vec<&str> = turn["packet"]["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert!(notes.iter().any(|n| n.contains("The toll") && n.contains("key \"toll\"")), "the packet says why it fired: {notes:?}");
    assert_eq!(turn["reply"], "The lamp is lit, as always.");
    // The greeting opens the chat: the packet's history starts with it.
    assert!(sent.contains("[Maren Vosk]: *Maren Vosk looks up.* Lock's closed."), "{sent}");
    assert!(sent.contains("Answer as the lock-keeper. Roleplay as Maren Vosk"), "the card's system prompt wraps ours:\n{sent}");
    assert!(sent.contains("Never mention the weir."), "post-history instructions: {sent}");
    // The call as it was sent, from the command line too.
    let logged = run(&paths, &["providers", "calls", "--limit", "1", "--agent", "companion"]);
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0]["agent"], "companion");
    assert!(logged[0]["request"]["messages"].to_string().contains("one silver fish-coin per hull"), "{}", logged[0]);
    assert_eq!(logged[0]["reply"], "[Maren Vosk]: The lamp is lit, as always.");
    // Nothing of ours joined the user's library: no demo companion, and neither her
    // lore nor the lore folder's README among the memories.
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    let count = |sql: &str| -> i64 { store.with(|c| Ok(c.query_row(sql, [], |r| r.get(0))?)).unwrap() };
    assert_eq!(count("SELECT count(*) FROM characters WHERE origin = 'demo'"), 0, "no demo character");
    assert_eq!(count("SELECT count(*) FROM worlds"), 0, "no demo world");
    assert_eq!(count("SELECT count(*) FROM memories WHERE kind = 'lore'"), 0, "no lore of a character the library lacks");
}

#[test]
fn every_message_of_a_chat_can_be_redrawn_chosen_edited_and_deleted_and_memory_follows() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths { config_file: dir.path().join("config.toml"), library_file: dir.path().join("library.sqlite"), log_dir: dir.path().join("logs") };
    // A server on this machine that answers each request in turn (a new process per
    // command, so the replies must come from outside it), and stalls the fifth mid-stream.
    let server = MockServer::start(|request, index| {
        if !OpenAi::is_endpoint(&request.target) {
            return Action::json(404, &OpenAi::error("no route"));
        }
        let text = match index {
            0 => "The heron nests by the sluice gate.",
            1 => "Rain by noon.",
            2 => "Herons? Only one, and it steals my eels.",
            3 => "That heron is older than the lock.",
            _ => {
                // The reply begins, then nothing more comes: the client waits mid-stream.
                let events = OpenAi::stream(&["[Maren Vosk]: ", "Let me think ", "about the heron."]);
                // A keep-alive, the role, the label and the first words: then silence.
                let begun: String = events.iter().take(4).map(|(e, _)| e.as_str()).collect();
                return Action::event_stream(begun.as_bytes(), 1, true, After::Stall);
            }
        };
        let events = OpenAi::stream(&["[Maren Vosk]: ", text]);
        let bytes: Vec<u8> = events.iter().map(|(e, _)| e.as_str()).collect::<String>().into_bytes();
        Action::event_stream(&bytes, index as u64, true, After::End)
    });
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile {
        name: "http".into(),
        kind: ProviderKind::Openai,
        base_url: Some(OpenAi::base_url(&server.url())),
        model: "card-model".into(),
        ..Default::default()
    });
    config.default_profile = "http".into();
    config.memory.embedding.model_dir = Some(dir.path().join("no-model"));
    config.save(&paths.config_file).unwrap();
    let card = json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": {
        "name": "Maren Vosk", "description": "{{char}} keeps a river lock.", "personality": "", "scenario": "",
        "first_mes": "Lock's closed, {{user}}.", "mes_example": "", "creator_notes": "", "system_prompt": "", "post_history_instructions": "",
        "alternate_greetings": [], "tags": [], "creator": "", "character_version": "1", "extensions": {} } });
    let file = dir.path().join("maren.json");
    std::fs::write(&file, card.to_string()).unwrap();
    run(&paths, &["import", file.to_str().unwrap()]);
    // The exchanges of the chat (after the card's greeting, which opens it).
    let history = |paths: &Paths| -> Vec<Value> {
        let out = run(paths, &["chat", "history", "--character", "Maren", "--json"]);
        let all = out.last().unwrap().as_array().unwrap().clone();
        assert_eq!(all[0]["id"], "greeting", "{all:?}");
        assert_eq!(all[0]["text"], "Lock's closed, User.");
        all[1..].to_vec()
    };

    run(&paths, &["chat", "send", "--character", "Maren", "Have you seen the grey heron?", "--json"]);
    run(&paths, &["chat", "send", "--character", "Maren", "And the weather?", "--json"]);
    // Redraw the last reply twice: three swipes, the newest chosen.
    let first = history(&paths);
    assert_eq!(first.len(), 4);
    let (heron_user, heron_reply) = (first[0]["id"].as_str().unwrap().to_string(), first[1]["id"].as_str().unwrap().to_string());
    run(&paths, &["chat", "delete", "--character", "Maren", "--message", first[2]["id"].as_str().unwrap()]);
    assert_eq!(history(&paths).len(), 2, "deleting a user message deletes its exchange");
    run(&paths, &["chat", "regenerate", "--character", "Maren", "--json"]);
    run(&paths, &["chat", "regenerate", "--character", "Maren", "--json"]);
    let messages = history(&paths);
    let reply = &messages[1];
    assert_eq!(reply["swipes"].as_array().unwrap().len(), 3, "{reply}");
    assert_eq!(reply["swipe"], 2);
    assert_eq!(reply["text"], "That heron is older than the lock.");
    // Choose the second, then edit it.
    run(&paths, &["chat", "swipe", "--character", "Maren", "1"]);
    assert_eq!(history(&paths)[1]["text"], "Herons? Only one, and it steals my eels.");
    run(&paths, &["chat", "edit", "--character", "Maren", "--message", &heron_reply, "Herons? Only one, and it steals my carp."]);
    let messages = history(&paths);
    assert_eq!(messages[1]["text"], "Herons? Only one, and it steals my carp.");
    assert_eq!(messages[1]["swipes"][1], "Herons? Only one, and it steals my carp.");
    let search = |query: &str| -> String {
        let out = run(&paths, &["memory", "search", query, "--mode", "keyword", "--json"]);
        out.last().unwrap().to_string()
    };
    assert!(search("carp").contains("steals my carp"), "the edited reply is found by its new words");
    assert!(!search("eels").contains("eels"), "and never in its old form");

    // Killed mid-regenerate: nothing half-written.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
        .args(["chat", "regenerate", "--character", "Maren"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Read;
        let mut first = [0u8; 4];
        if child.stdout.as_mut().unwrap().read_exact(&mut first).is_err() {
            let mut err = String::new();
            child.stderr.as_mut().unwrap().read_to_string(&mut err).unwrap();
            panic!("the regenerate ended before streaming: {err}");
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let after = history(&paths);
    assert_eq!(after, messages, "a regenerate killed while streaming changes nothing");

    // Delete the user's message and everything after it: its words are gone from memory.
    run(&paths, &["chat", "delete", "--character", "Maren", "--message", &heron_user, "--and-after"]);
    assert!(history(&paths).is_empty(), "only the greeting is left");
    assert!(!search("heron").contains("heron"), "no memory keeps the deleted words");
}

#[test]
fn a_cards_sheet_is_edited_and_the_chat_and_the_export_follow() {
    let dir = tempfile::tempdir().unwrap();
    let paths = crate::support::library::scripted(dir.path(), json!({ "default": "[Maren Vosk]: Hm." }));
    // As SillyTavern writes a V2 card: the V1 fields at the top too, and its own extensions.
    let card = json!({ "spec": "chara_card_v2", "spec_version": "2.0",
        "name": "Maren Vosk", "description": "Keeps a lock.", "personality": "terse", "first_mes": "Closed.",
        "data": {
            "name": "Maren Vosk", "description": "Keeps a lock.", "personality": "terse", "scenario": "", "first_mes": "Closed.",
            "mes_example": "", "creator_notes": "", "system_prompt": "", "post_history_instructions": "", "alternate_greetings": [],
            "tags": ["river"], "creator": "someone else", "character_version": "3",
            "extensions": { "talkativeness": "0.4", "depth_prompt": { "prompt": "Stay wary.", "depth": 4 } }
        } });
    let file = dir.path().join("maren.json");
    std::fs::write(&file, card.to_string()).unwrap();
    run(&paths, &["import", file.to_str().unwrap()]);
    run(&paths, &[
        "character", "edit", "Maren Vosk",
        "--description", "{{char}} keeps the lamp of a river lock and owes the ferryman a debt.",
        "--alternate-greeting", "Back again?", "--alternate-greeting", "You're late.", "--tags", "river, lock",
    ]);
    let shown = run(&paths, &["character", "show", "Maren"]);
    let sheet = &shown.last().unwrap()["sheet"];
    assert!(sheet["description"].as_str().unwrap().contains("owes the ferryman"), "{sheet}");
    assert_eq!(sheet["card"]["alternate_greetings"], json!(["Back again?", "You're late."]));
    assert_eq!(sheet["card"]["tags"], json!(["river", "lock"]));
    // The chat is played with the new sheet.
    let sent = run(&paths, &["chat", "send", "--character", "Maren", "Evening.", "--json"]);
    let packet = sent.last().unwrap()["turn"]["packet"].to_string();
    assert!(packet.contains("Maren Vosk keeps the lamp of a river lock and owes the ferryman a debt."), "{packet}");
    // The export carries the edit at both levels and everything else as it came.
    let out = dir.path().join("out.json");
    run(&paths, &["export", "character", "Maren Vosk", "--format", "card-v2", "--out", out.to_str().unwrap()]);
    let exported: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(exported["data"]["description"].as_str().unwrap().contains("owes the ferryman"), "{exported}");
    assert!(exported["description"].as_str().unwrap().contains("owes the ferryman"), "the V1 copy follows");
    assert_eq!(exported["data"]["extensions"]["depth_prompt"]["prompt"], "Stay wary.");
    assert_eq!(exported["data"]["creator"], "someone else");
    // A sheet without a name is refused, and nothing changes.
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
        .args(["character", "edit", "Maren", "--name", " "])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("name"), "{}", String::from_utf8_lossy(&refused.stderr));
    // The chat, once begun, keeps the greeting it opened with: a later edit of the card's
    // greetings (here, clearing the alternates) is for the next chat.
    run(&paths, &["character", "edit", "Maren", "--greeting", "Go away.", "--alternate-greeting", ""]);
    let shown = run(&paths, &["character", "show", "Maren"]);
    assert_eq!(shown.last().unwrap()["sheet"]["card"]["alternate_greetings"], json!([]), "\"\" alone clears the list");
    let history = run(&paths, &["chat", "history", "--character", "Maren", "--json"]);
    let greeting = &history.last().unwrap()[0];
    assert_eq!((greeting["id"].as_str(), greeting["text"].as_str()), (Some("greeting"), Some("Closed.")), "{history:?}");
    assert_eq!(greeting["swipes"], json!(["Closed.", "Back again?", "You're late."]));
    // The chat's own greeting edited: this chat opens with the new words, the card keeps its own.
    run(&paths, &["chat", "edit", "--character", "Maren", "--message", "greeting", "Closed. Come back at dawn."]);
    let history = run(&paths, &["chat", "history", "--character", "Maren", "--json"]);
    assert_eq!(history.last().unwrap()[0]["text"], "Closed. Come back at dawn.");
    let shown = run(&paths, &["character", "show", "Maren"]);
    assert_eq!(shown.last().unwrap()["sheet"]["card"]["first_mes"], "Go away.");
    let sent = run(&paths, &["chat", "send", "--character", "Maren", "Morning.", "--json"]);
    let packet = sent.last().unwrap()["turn"]["packet"].to_string();
    assert!(packet.contains("Closed. Come back at dawn."), "the edited greeting opens the history sent: {packet}");
    let history = run(&paths, &["chat", "history", "--character", "Maren", "--json"]);
    // Deleting every exchange starts the chat again; choosing a greeting then reads the card.
    let first = history.last().unwrap()[1]["id"].as_str().unwrap().to_string();
    run(&paths, &["chat", "delete", "--character", "Maren", "--message", &first, "--and-after"]);
    run(&paths, &["chat", "swipe", "--character", "Maren", "0"]);
    let history = run(&paths, &["chat", "history", "--character", "Maren", "--json"]);
    assert_eq!(history.last().unwrap()[0]["text"], "Go away.", "{history:?}");
}

/// The same card imported twice (here a second copy with one field changed) makes two
/// characters of one name: a name then picks neither silently, and the error gives the
/// ids to tell them apart.
#[test]
fn two_characters_of_one_name_are_told_apart_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths { config_file: dir.path().join("config.toml"), library_file: dir.path().join("library.sqlite"), log_dir: dir.path().join("logs") };
    let mut config = Config::default();
    config.memory.embedding.model_dir = Some(dir.path().join("no-model"));
    config.save(&paths.config_file).unwrap();
    for (i, personality) in ["terse", "kind"].iter().enumerate() {
        let card = json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": { "name": "Sera Vantablack", "description": "A diver.", "personality": personality } });
        let file = dir.path().join(format!("sera-{i}.json"));
        std::fs::write(&file, card.to_string()).unwrap();
        run(&paths, &["import", file.to_str().unwrap()]);
    }
    let attempt = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
            .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    for key in ["Sera Vantablack", "sera"] {
        let refused = attempt(&["character", "delete", key, "--yes"]);
        assert!(!refused.status.success());
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(!said.contains("not found"), "two match: that is not \"not found\": {said}");
        assert!(said.contains("more than one name matches") && said.contains("(id ") && said.contains("give the id"), "{said}");
    }
    let store = lorekeeper::store::Store::open(&paths.library_file).unwrap();
    let ids: Vec<String> = store.with(|c| Ok(lorekeeper::character::list(c)?.into_iter().map(|r| r.id).collect())).unwrap();
    assert_eq!(ids.len(), 2, "nothing was deleted");
    run(&paths, &["character", "delete", &ids[1], "--yes"]);
    let left: Vec<String> = store.with(|c| Ok(lorekeeper::character::list(c)?.into_iter().map(|r| r.id).collect())).unwrap();
    assert_eq!(left, [ids[0].clone()]);
    // One left: the name finds it again.
    run(&paths, &["character", "show", "Sera Vantablack"]);
}

/// A card that keeps score with chat variables, as SillyTavern cards do: `{{incvar}}` in
/// its post-history instructions counts the user's messages, `{{setvar}}` in its lore
/// entry remembers a mood, and `{{getvar}}` reads both back. A redrawn reply counts
/// once, an undo takes its count back, and the chat file carries the values.
#[test]
fn a_cards_chat_variables_count_messages_once_and_travel_with_the_chat_file() {
    let dir = tempfile::tempdir().unwrap();
    let paths = crate::support::library::scripted(dir.path(), json!({ "default": "[Odile Brask]: Mm." }));
    let card = json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": {
        "name": "Odile Brask", "description": "{{setvar::trade::ferrying}}{{char}} runs a night ferry ({{getvar::visits}} crossings so far).", "personality": "dry",
        "system_prompt": "{{original}} Trade: {{getvar::trade}}.",
        "first_mes": "{{setvar::visits::10}}Fare's two coppers.",
        "post_history_instructions": "Visit {{incvar::visits}}. {{char}} is {{getvar::mood}}{{getglobalvar::weather}}.",
        "character_book": { "entries": [
            { "keys": ["storm"], "content": "{{setvar::mood::uneasy}}{{setglobalvar::weather:: in the rain}}The river rises in storms.", "enabled": true, "insertion_order": 10 }
        ] }
    } });
    let file = dir.path().join("odile.json");
    std::fs::write(&file, card.to_string()).unwrap();
    run(&paths, &["import", file.to_str().unwrap()]);
    let packet_of = |out: &[Value]| out.last().unwrap()["turn"]["packet"].to_string();
    let first = packet_of(&run(&paths, &["chat", "send", "--character", "Odile", "Evening.", "--json"]));
    // The greeting set the count before anything else read it; the description reads it
    // before the post-history instructions count this message.
    assert!(first.contains("Visit 11. Odile Brask is ."), "{first}");
    assert!(first.contains("(10 crossings so far)") && first.contains("Fare's two coppers.") && !first.contains("setvar"), "{first}");
    // The card's system prompt is read after its description, as SillyTavern reads them.
    assert!(first.contains("Trade: ferrying."), "{first}");
    let second = packet_of(&run(&paths, &["chat", "send", "--character", "Odile", "A storm is coming.", "--json"]));
    assert!(second.contains("Visit 12. Odile Brask is uneasy in the rain."), "the lore's setvar is read by the instructions after it: {second}");
    assert!(second.contains("The river rises in storms.") && !second.contains("setvar"), "{second}");
    // Drawn again twice: the same message, counted once.
    run(&paths, &["chat", "regenerate", "--character", "Odile"]);
    run(&paths, &["chat", "regenerate", "--character", "Odile"]);
    let vars = run(&paths, &["chat", "variables", "--character", "Odile"]);
    assert_eq!(vars.last().unwrap(), &json!({ "variables": { "visits": "12", "mood": "uneasy", "trade": "ferrying" }, "global": { "weather": " in the rain" } }));
    // The user's own macros are filled as the message is sent, as SillyTavern fills them.
    let sent = run(&paths, &["chat", "send", "--character", "Odile", "{{setvar::coin::silver}}{{setglobalvar::tide::high}}Here, {{char}}. Calm now.", "--json"]);
    let third = packet_of(&sent);
    assert_eq!(sent.last().unwrap()["turn"]["user_text"], "Here, Odile Brask. Calm now.");
    assert!(!third.contains("setvar::coin"), "{third}");
    let vars = run(&paths, &["chat", "variables", "--character", "Odile"]);
    assert_eq!((&vars.last().unwrap()["variables"]["coin"], &vars.last().unwrap()["global"]["tide"]), (&json!("silver"), &json!("high")));
    assert!(third.contains("Visit 13. Odile Brask is uneasy in the rain."), "{third}");
    // Taken back: its count goes with it, and the next message is visit 13 again.
    run(&paths, &["chat", "undo", "--character", "Odile"]);
    let vars = run(&paths, &["chat", "variables", "--character", "Odile"]);
    assert_eq!(vars.last().unwrap()["variables"]["visits"], "12");
    // The chat file keeps them where SillyTavern does, a count as a number.
    let out = dir.path().join("odile.jsonl");
    run(&paths, &["chat", "export", "--character", "Odile", "--out", out.to_str().unwrap()]);
    let exported = std::fs::read_to_string(&out).unwrap();
    let header: Value = serde_json::from_str(exported.lines().next().unwrap()).unwrap();
    assert_eq!(header["chat_metadata"]["variables"], json!({ "visits": 12, "mood": "uneasy", "trade": "ferrying" }), "{header}");
    // A file's variables come in with it: the imported chat goes on counting from them.
    let edited = exported.replacen("\"visits\":12", "\"visits\":40", 1);
    std::fs::write(&out, edited).unwrap();
    run(&paths, &["chat", "import", out.to_str().unwrap(), "--character", "Odile"]);
    let next = packet_of(&run(&paths, &["chat", "send", "--character", "Odile", "Back again.", "--json"]));
    assert!(next.contains("Visit 41."), "{next}");
}

/// A `{{random}}` in a card's greeting is rolled once for the chat: the greeting the
/// user is shown, the one the model is sent and the one exported say the same, however
/// often the chat is read (it was rolled again at every read).
#[test]
fn a_random_greeting_reads_the_same_shown_sent_and_exported() {
    let dir = tempfile::tempdir().unwrap();
    let paths = crate::support::library::scripted(dir.path(), json!({ "default": "[Mara Vell]: Aye." }));
    let moods = ["foul", "grim", "wretched", "sour", "bleak", "dire", "black", "rotten"];
    let card = json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": {
        "name": "Mara Vell", "description": "A smuggler.", "personality": "", "scenario": "",
        "first_mes": format!("The weather is {{{{random::{}}}}} tonight.", moods.join("::")),
        "mes_example": "", "creator_notes": "", "system_prompt": "", "post_history_instructions": "",
        "alternate_greetings": [], "tags": [], "creator": "", "character_version": "1", "extensions": {} } });
    let file = dir.path().join("mara.json");
    std::fs::write(&file, card.to_string()).unwrap();
    run(&paths, &["import", file.to_str().unwrap()]);
    let shown = |paths: &Paths| -> String {
        let out = run(paths, &["chat", "history", "--character", "Mara Vell"]);
        let first = &out.last().unwrap().as_array().unwrap()[0];
        first["text"].as_str().unwrap().to_string()
    };
    let before: Vec<String> = (0..4).map(|_| shown(&paths)).collect();
    assert!(moods.iter().any(|m| before[0] == format!("The weather is {m} tonight.")), "{before:?}");
    assert!(before.iter().all(|g| g == &before[0]), "read four times: {before:?}");
    let events = run(&paths, &["chat", "send", "--character", "Mara Vell", "Evening."]);
    let sent = events.last().unwrap()["turn"]["packet"]["messages"].to_string();
    assert!(sent.contains(&before[0]), "{sent}");
    assert_eq!(shown(&paths), before[0]);
    let export = dir.path().join("chat.jsonl");
    run(&paths, &["chat", "export", "--character", "Mara Vell", "--out", export.to_str().unwrap()]);
    assert!(std::fs::read_to_string(&export).unwrap().contains(&before[0]));
}
