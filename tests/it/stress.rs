//! One library, several processes at once, as a game master really uses it: the CLI
//! sending chat messages and playing scene rounds while an importer loads a 15,000-entry
//! World Info file and a memory file, again and again, for a bounded time. Every command
//! either succeeds — and then what it did is in the library afterwards — or fails with a
//! clear error before anything streamed.

use lorekeeper::config::{Config, Paths};
use lorekeeper::llm::{ProviderKind, ProviderProfile};
use lorekeeper::store::Store;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long each process keeps issuing commands.
const RUN_FOR: Duration = Duration::from_secs(10);

fn lorekeeper(paths: &Paths) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lorekeeper"));
    cmd.env("LOREKEEPER_LIBRARY", &paths.library_file).env("LOREKEEPER_CONFIG", &paths.config_file).stdin(Stdio::null());
    cmd
}

/// The scene script's rules, a chat reply for Ilse, and a summary for anything else.
fn write_script(dir: &Path) -> std::path::PathBuf {
    let scene = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scene/script.json");
    let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(scene).unwrap()).unwrap();
    script["rules"].as_array_mut().unwrap().push(serde_json::json!({
        "when": { "system_contains": "Roleplay as" },
        "reply": { "text": "[Ilse Marrow]: The kettle's on, and the fog is thick tonight.", "chunk_chars": 6, "chunk_delay_ms": 5 }
    }));
    script["default"] = serde_json::json!("They talked over tea about the fog and the harbour.");
    let file = dir.join("script.json");
    std::fs::write(&file, script.to_string()).unwrap();
    file
}

fn world_info(entries: usize) -> String {
    let entries: serde_json::Map<String, serde_json::Value> = (0..entries)
        .map(|i| {
            (i.to_string(), serde_json::json!({ "uid": i, "key": [format!("marker{i}")], "content": format!("Entry {i}: a harbour fact about buoy {i}."), "comment": format!("entry {i}") }))
        })
        .collect();
    serde_json::json!({ "entries": entries }).to_string()
}

/// What one command did.
struct Outcome {
    what: String,
    ok: bool,
    output: Output,
}

fn check_failure(o: &Outcome) {
    let stderr = String::from_utf8_lossy(&o.output.stderr);
    assert!(!stderr.contains("panicked"), "{}: a panic is not a clear error:\n{stderr}", o.what);
    assert!(
        stderr.contains("lorekeeper: "),
        "{}: no clear error ({}):\nstderr: {stderr}\nstdout: {}",
        o.what,
        o.output.status,
        String::from_utf8_lossy(&o.output.stdout)
    );
}

#[test]
fn chat_scene_and_imports_from_three_processes_on_one_library() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths { config_file: dir.path().join("config.toml"), library_file: dir.path().join("library.sqlite"), log_dir: dir.path().join("logs") };
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile {
        name: "script".into(),
        kind: ProviderKind::Scripted,
        model: "stress-script".into(),
        path: Some(write_script(dir.path())),
        ..Default::default()
    });
    config.default_profile = "script".into();
    config.save(&paths.config_file).unwrap();
    let store = Store::open(&paths.library_file).unwrap();
    let scene = lorekeeper::scene::demo::ensure(&store).unwrap().expect("the demo scene");
    lorekeeper::companion::demo::ensure(&store).unwrap();
    let rounds_before: i64 = store.with(|c| Ok(c.query_row("SELECT count(*) FROM scene_rounds", [], |r| r.get(0))?)).unwrap();
    drop(store);
    let book = world_info(15_000);

    let (chats, rounds, imports) = std::thread::scope(|s| {
        let chat = s.spawn(|| {
            let started = Instant::now();
            let mut done = Vec::new();
            for i in 0.. {
                if started.elapsed() > RUN_FOR {
                    break;
                }
                let text = format!("stress message {i}");
                let output = lorekeeper(&paths).args(["chat", "send", "--character", "ilse", &text]).output().unwrap();
                done.push((text.clone(), Outcome { what: format!("chat send {i}"), ok: output.status.success(), output }));
            }
            done
        });
        let rounds = s.spawn(|| {
            let started = Instant::now();
            let mut done = Vec::new();
            for i in 0.. {
                if started.elapsed() > RUN_FOR {
                    break;
                }
                let output = lorekeeper(&paths).args(["scene", "round", &scene, &format!("The keeper counts the buoys ({i}).")]).output().unwrap();
                done.push(Outcome { what: format!("scene round {i}"), ok: output.status.success(), output });
            }
            done
        });
        let imports = s.spawn(|| {
            let started = Instant::now();
            let mut done = Vec::new();
            for i in 0.. {
                if started.elapsed() > RUN_FOR {
                    break;
                }
                // A file the library already holds is skipped, so each batch differs.
                let file = dir.path().join(format!("harbour-world-info-{i}.json"));
                std::fs::write(&file, book.replacen("Entry 0:", &format!("Entry 0 (batch {i}):"), 1)).unwrap();
                let output = lorekeeper(&paths).arg("import").arg(&file).output().unwrap();
                done.push(("lorebook".to_string(), Outcome { what: format!("import {i}"), ok: output.status.success(), output }));
                let turns = dir.path().join(format!("turns-{i}.jsonl"));
                let lines: Vec<String> = (0..300)
                    .map(|n| serde_json::json!({ "id": format!("stress-{i}-{n}"), "speaker": "Juno", "text": format!("Juno logged buoy {n} in batch {i}.") }).to_string())
                    .collect();
                std::fs::write(&turns, lines.join("\n")).unwrap();
                let output = lorekeeper(&paths).arg("memory").arg("import").arg(&turns).output().unwrap();
                done.push((format!("stress-{i}-"), Outcome { what: format!("memory import {i}"), ok: output.status.success(), output }));
            }
            done
        });
        (chat.join().unwrap(), rounds.join().unwrap(), imports.join().unwrap())
    });

    let store = Store::open(&paths.library_file).unwrap();
    let count = |sql: &str, arg: &str| -> i64 { store.with(|c| Ok(c.query_row(sql, [arg], |r| r.get(0))?)).unwrap() };

    // Chat: every success is an exchange; a failure streamed nothing.
    assert!(chats.iter().any(|(_, o)| o.ok), "at least one chat send succeeded");
    for (text, outcome) in &chats {
        let stored = count("SELECT count(*) FROM companion_turns WHERE user_text = ?1", text);
        if outcome.ok {
            assert_eq!(stored, 1, "{} succeeded but is not in the library", outcome.what);
        } else {
            check_failure(outcome);
            assert_eq!(stored, 0, "{} failed but left an exchange", outcome.what);
            assert!(outcome.output.stdout.is_empty(), "{} failed after streaming", outcome.what);
        }
    }
    // Scene: one stored round per success.
    let succeeded = rounds.iter().filter(|o| o.ok).count() as i64;
    assert!(succeeded > 0, "at least one round was played");
    for outcome in rounds.iter().filter(|o| !o.ok) {
        check_failure(outcome);
        assert!(outcome.output.stdout.is_empty(), "{} failed after streaming:\n{}", outcome.what, String::from_utf8_lossy(&outcome.output.stdout));
    }
    let stored_rounds = count("SELECT count(*) - ?1 FROM scene_rounds", &rounds_before.to_string());
    assert_eq!(stored_rounds, succeeded, "every played round is stored, and only those");
    // Imports: each successful import is a whole book; each memory import all its turns.
    let books = imports.iter().filter(|(k, o)| k == "lorebook" && o.ok).count() as i64;
    assert!(books > 0, "at least one World Info import succeeded");
    let stored_books = count("SELECT count(*) FROM lorebooks WHERE name LIKE ?1", "harbour-world-info%");
    assert_eq!(stored_books, books, "every imported book is stored, and only those");
    let entries = count("SELECT count(*) FROM lore_entries e JOIN lorebooks b ON b.id = e.lorebook_id WHERE b.name LIKE ?1", "harbour-world-info%");
    assert_eq!(entries, books * 15_000, "every stored book is whole");
    for (prefix, outcome) in imports.iter().filter(|(k, _)| k != "lorebook") {
        let stored = count("SELECT count(*) FROM memories WHERE id LIKE ?1 || '%'", prefix);
        if outcome.ok {
            assert_eq!(stored, 300, "{} succeeded with {stored} of 300 turns", outcome.what);
        } else {
            check_failure(outcome);
            assert_eq!(stored, 0, "{} failed but left turns", outcome.what);
        }
    }
    for (_, outcome) in imports.iter().filter(|(_, o)| !o.ok) {
        check_failure(outcome);
    }
    eprintln!(
        "stress: {} chat sends ({} ok), {} rounds ({} ok), {} imports ({} ok)",
        chats.len(),
        chats.iter().filter(|(_, o)| o.ok).count(),
        rounds.len(),
        succeeded,
        imports.len(),
        imports.iter().filter(|(_, o)| o.ok).count()
    );
}
