//! A user's own card in one-to-one chat, through the real binary: its embedded
//! lorebook fires on a key in the user's message, with the card's macros resolved in
//! the packet as sent.

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
}
