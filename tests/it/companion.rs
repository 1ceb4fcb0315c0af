//! The companion end to end, through the engine: hold–wait–commit, the packet's
//! conditional blocks, the summarisation cycle feeding a later "do you remember", the
//! response cache over real HTTP, cancellation, and a process killed mid-stream.
//!
//! These run the real embedding model (installed by `.ci/setup.sh`) and a real SQLite
//! library file; the replies come from scripted providers or a local HTTP server.

use crate::support;

use lorekeeper::companion::records::{self, ChatTurn};
use lorekeeper::companion::{CompanionCommand, CompanionEvent, demo};
use lorekeeper::config::{Config, Paths};
use lorekeeper::engine::{self, Command, EngineHandle, Event};
use lorekeeper::llm::{ProviderKind, ProviderProfile, RetryPolicy, Timeouts};
use lorekeeper::store::Store;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use support::mock_http::{Action, After, MockServer};
use support::wire::{Dialect, MODEL, OpenAi};

const ILSE: &str = "Ilse Marrow";

fn paths(dir: &Path) -> Paths {
    Paths { config_file: dir.join("config.toml"), library_file: dir.join("library.sqlite"), log_dir: dir.join("logs") }
}

/// A library with the demo companion and a config whose `companion` and `summariser`
/// roles answer from `script` (a scripted provider's JSON).
fn setup(dir: &Path, script: serde_json::Value, change: impl FnOnce(&mut Config)) -> Paths {
    let paths = paths(dir);
    let script_file = dir.join("script.json");
    std::fs::write(&script_file, script.to_string()).unwrap();
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile {
        name: "script".into(),
        kind: ProviderKind::Scripted,
        model: "chat-script".into(),
        path: Some(script_file),
        ..Default::default()
    });
    config.default_profile = "script".into();
    change(&mut config);
    config.save(&paths.config_file).unwrap();
    demo::ensure(&Store::open(&paths.library_file).unwrap()).unwrap();
    paths
}

/// A script whose reply to Ilse is `words` words, streamed 5 characters every `delay_ms`.
fn slow_reply(words: usize, delay_ms: u64) -> serde_json::Value {
    let long = "word ".repeat(words);
    json!({ "rules": [ { "when": { "system_contains": "Roleplay as" },
        "reply": { "text": format!("[Ilse Marrow]: {long}"), "chunk_chars": 5, "chunk_delay_ms": delay_ms } } ] })
}

/// The real binary on this test's library, reading nothing from standard input.
fn cli(paths: &Paths, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(args)
        .env("LOREKEEPER_LIBRARY", &paths.library_file)
        .env("LOREKEEPER_CONFIG", &paths.config_file)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// Companion events until `stop` (inclusive). Panics on timeout.
fn until(engine: &EngineHandle, mut stop: impl FnMut(&CompanionEvent) -> bool) -> Vec<CompanionEvent> {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match engine.events().recv_timeout(left) {
            Ok(Event::Companion(e)) => {
                let done = stop(&e);
                seen.push(e);
                if done {
                    return seen;
                }
            }
            Ok(_) => {}
            Err(e) => panic!("no companion event in time ({e}); seen {seen:#?}"),
        }
    }
}

fn ends_turn(e: &CompanionEvent) -> bool {
    matches!(e, CompanionEvent::TurnCommitted { .. } | CompanionEvent::Failed { .. } | CompanionEvent::Cancelled { .. })
}

fn send(engine: &EngineHandle, text: &str, now: Option<&str>) -> Vec<CompanionEvent> {
    engine
        .send(Command::Companion(CompanionCommand::Send { character: ILSE.into(), text: text.into(), now: now.map(str::to_string) }))
        .unwrap();
    until(engine, ends_turn)
}

fn committed(events: &[CompanionEvent]) -> ChatTurn {
    match events.last() {
        Some(CompanionEvent::TurnCommitted { turn }) => (**turn).clone(),
        other => panic!("expected a committed turn, got {other:#?}"),
    }
}

/// Exchanges, memory turns and chat rows of the library.
fn counts(paths: &Paths) -> (i64, i64, i64) {
    let store = Store::open(&paths.library_file).unwrap();
    store
        .with(|c| {
            let n = |sql: &str| c.query_row(sql, [], |r| r.get::<_, i64>(0));
            Ok((
                n("SELECT count(*) FROM companion_turns")?,
                n("SELECT count(*) FROM memories WHERE kind = 'turn'")?,
                n("SELECT count(*) FROM companion_chats")?,
            ))
        })
        .unwrap()
}

fn reply(text: &str) -> serde_json::Value {
    json!({ "text": text, "chunk_chars": 5 })
}

#[test]
fn invalid_replies_are_discarded_and_never_committed() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({
        "rules": [
            // The packet's user message holds the history too: the newer message's rule comes first.
            { "when": { "user_contains": "second" }, "reply": { "text": "[Ilse Marrow]:\nUser: yes, I was." } },
            { "when": { "user_contains": "first" }, "replies": [
                reply("[User]: I'll answer for myself, thanks."),
                reply("[Ilse Marrow]:   "),
                reply("[Ilse Marrow]: *smiles* A bookbinder in Gullhaven, a small harbour town on a grey northern sea."),
                { "text": "[Ilse Marrow]: It was a long story, and then", "finish_reason": "length" },
                reply("[Ilse Marrow]: Mind the paste pot.")
            ], "then": "repeat_last" },
            { "when": { "system_contains": "compress" }, "reply": "unused" }
        ]
    });
    let paths = setup(dir.path(), script, |c| c.companion.max_attempts = 5);
    let engine = engine::start(paths.clone()).unwrap();

    let events = send(&engine, "The first message", None);
    let reasons: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            CompanionEvent::Discarded { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(reasons.len(), 4, "{reasons:?}");
    assert!(reasons[0].contains("spoke for User"));
    assert!(reasons[1].contains("empty"));
    // The card's own description, recited: a copy of its packet, drawn again.
    assert!(reasons[2].contains("copied 13 words from its prompt (\"a bookbinder in gullhaven"), "{reasons:?}");
    assert!(reasons[3].contains("cut off"));
    let turn = committed(&events);
    assert_eq!(turn.reply, "Mind the paste pot.");
    assert_eq!(turn.attempts, 5);
    // The retry told the model why its draw was thrown away.
    assert!(turn.packet.block("trigger").unwrap().text.contains("discarded because it was cut off"));
    assert_eq!(counts(&paths), (1, 2, 1));

    // Every draw of the second message speaks for the user: the user is told, nothing is stored.
    let events = send(&engine, "The second message", None);
    match events.last() {
        Some(CompanionEvent::Failed { message, .. }) => {
            assert!(message.contains("no valid reply after 5 attempts"), "{message}");
            assert!(message.contains("nothing was saved"), "{message}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(counts(&paths), (1, 2, 1));
}

/// The embedded model's usual draft: a good line, then the packet's markup or more
/// lines of the conversation. The line is kept; what streamed is what is stored, and the
/// drift reaches neither the history nor the memory bank.
#[test]
fn a_good_line_before_markup_or_another_speaker_is_kept_and_the_rest_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let odile = "*She taps her nose.* Oh, I'm so glad you're here. *She holds up a chart of the Hollow Reef.*";
    let script = json!({
        "rules": [
            // The packet's user message holds the history too: the newer message's rule comes first.
            { "when": { "user_contains": "third" }, "reply": reply(
                "[Ilse Marrow]: Morning, dear.\n</assistant_user_input>\n</assistant_user_users>\n[Ilse Marrow]: The kettle's on.\n[Ilse Marrow]: Sugar?") },
            { "when": { "user_contains": "second" }, "reply": reply("[Ilse Marrow]: Do you mean the reef?\n<context>\n</context>") },
            { "when": { "user_contains": "first" }, "reply": reply(&format!("[Ilse Marrow]: {odile}\n</assistant_persona>")) },
            { "when": { "system_contains": "compress" }, "reply": "unused" }
        ]
    });
    let paths = setup(dir.path(), script, |_| {});
    let engine = engine::start(paths.clone()).unwrap();
    for (message, kept) in [("The first message", odile), ("The second message", "Do you mean the reef?"), ("The third message", "Morning, dear.")] {
        let events = send(&engine, message, None);
        let streamed: String = events
            .iter()
            .filter_map(|e| match e {
                CompanionEvent::Token { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert!(!events.iter().any(|e| matches!(e, CompanionEvent::Discarded { .. })), "{events:#?}");
        let turn = committed(&events);
        assert_eq!(turn.reply, kept);
        assert_eq!(streamed, kept, "the stream shows what is stored");
    }
    let store = Store::open(&paths.library_file).unwrap();
    let memories: Vec<String> = store
        .with(|c| {
            let mut q = c.prepare("SELECT text FROM memories WHERE kind = 'turn' AND speaker = 'Ilse Marrow'")?;
            let rows = q.query_map([], |r| r.get::<_, String>(0))?.collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .unwrap();
    assert_eq!(memories.len(), 3);
    assert!(memories.iter().all(|m| !m.contains('<') && !m.contains("[Ilse")), "{memories:?}");
}

#[test]
fn a_summary_of_earlier_turns_is_recalled_by_do_you_remember() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({
        "rules": [
            { "when": { "system_contains": "compress a stretch of conversation" },
              "reply": "Ilse and the user climbed the old Gullhaven lighthouse and counted eleven grey seals on the rocks." },
            { "when": { "system_contains": "Roleplay as Ilse Marrow" }, "reply": reply("[Ilse Marrow]: Mm-hm.") }
        ]
    });
    let paths = setup(dir.path(), script, |c| c.memory.summary_every = 2);
    let engine = engine::start(paths.clone()).unwrap();
    let _ = committed(&send(&engine, "We should climb the lighthouse tomorrow.", Some("2026-11-01T10:00:00Z")));
    let _ = committed(&send(&engine, "Look at those seals on the rocks!", Some("2026-11-02T10:00:00Z")));
    // Two exchanges (four memory turns) are due: the cycle compresses them after the commit.
    let summary = until(&engine, |e| matches!(e, CompanionEvent::Summarised { .. }));
    let CompanionEvent::Summarised { memory_id, .. } = summary.last().unwrap() else { unreachable!() };
    assert_eq!(counts(&paths).1, 4, "the turns stay, marked as summarised");

    let store = Store::open(&paths.library_file).unwrap();
    let events = send(&engine, "Do you remember the seals we counted?", Some("2026-11-10T10:00:00Z"));
    let turn = committed(&events);
    let bank = turn.packet.block("memory_bank").expect("a recall question gets a memory bank");
    assert!(bank.text.contains("eleven grey seals"), "{}", bank.text);
    assert!(turn.hits.iter().any(|h| &h.id == memory_id), "the summary is among the hits: {:?}", turn.hits);
    // Hits carry their scores, and the memory browser sees what went out.
    let summary_hit = turn.hits.iter().find(|h| &h.id == memory_id).unwrap();
    assert!(summary_hit.keyword_score.is_some() || summary_hit.vector_score.is_some());
    let injections = store.with(lorekeeper::memory::injections::latest).unwrap();
    let mine = injections.iter().find(|i| i.agent == "companion:Ilse Marrow").unwrap();
    assert!(mine.hits.iter().any(|h| &h.id == memory_id));
}

#[test]
fn the_memory_bank_is_absent_when_nothing_relevant_exists() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({ "rules": [ { "when": { "system_contains": "Roleplay as" }, "reply": reply("[Ilse Marrow]: Hm?") } ] });
    // No history block, so every stored turn is a memory candidate.
    let paths = setup(dir.path(), script, |c| c.companion.history_turns = 0);
    let engine = engine::start(paths).unwrap();
    // A recall question with nothing stored yet.
    let turn = committed(&send(&engine, "Do you remember my sister's name?", None));
    assert!(turn.packet.block("memory_bank").is_none());
    assert!(turn.hits.is_empty());
    assert!(turn.packet.notes.iter().any(|n| n.contains("no stored memory matched")), "{:?}", turn.packet.notes);
    // Lore is retrieved into the persona all the same.
    assert!(turn.packet.block("lore").is_some_and(|b| b.text.contains("- ")));
    // Small talk with only unrelated memories stored: no recall asked, nothing similar enough.
    let turn = committed(&send(&engine, "Could you pass me the glue brush?", None));
    assert!(turn.packet.block("memory_bank").is_none(), "{:?}", turn.packet.notes);
    assert!(turn.packet.notes.iter().any(|n| n.contains("memory bank left out")), "{:?}", turn.packet.notes);
    // Asked to remember, the same memories are sent.
    let turn = committed(&send(&engine, "Do you remember what I asked about my sister?", None));
    assert!(turn.packet.block("memory_bank").is_some_and(|b| b.text.contains("sister")), "{:?}", turn.packet.notes);
}

#[test]
fn the_distance_block_appears_only_when_proximity_changes_and_the_state_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({ "rules": [ { "when": { "system_contains": "Roleplay as" }, "reply": reply("[Ilse Marrow]: Mm.") } ] });
    let paths = setup(dir.path(), script, |_| {});
    let has_distance = |t: &ChatTurn| t.packet.block("distance_context").map(|b| b.text.clone());
    {
        let engine = engine::start(paths.clone()).unwrap();
        // A chat starts REMOTE: texting from afar changes nothing.
        let t = committed(&send(&engine, "I'm texting you from the train, we're far apart tonight.", Some("2026-11-20T18:00:00Z")));
        assert_eq!(has_distance(&t), None);
        let t = committed(&send(&engine, "I just walked into your workshop and sat down right next to you.", Some("2026-11-20T21:00:00Z")));
        assert!(has_distance(&t).expect("arriving is a change").contains("physically here"));
        let t = committed(&send(&engine, "We're sitting together in the same room by the press.", Some("2026-11-20T21:05:00Z")));
        assert_eq!(has_distance(&t), None, "staying is not a change");
    }
    // A new process: the state and the clock come from the library.
    let engine = engine::start(paths.clone()).unwrap();
    let t = committed(&send(&engine, "We're sitting together in the same room, side by side.", Some("2026-11-21T00:17:00Z")));
    assert_eq!(has_distance(&t), None, "still together after a restart");
    assert!(t.packet.block("temporal_data").unwrap().text.contains("3.2 hours"), "{}", t.packet.block("temporal_data").unwrap().text);
    let t = committed(&send(&engine, "I'm far away now, texting you from my phone in another city.", Some("2026-11-21T09:00:00Z")));
    assert!(has_distance(&t).expect("leaving is a change").contains("from a distance"));
    let store = Store::open(&paths.library_file).unwrap();
    let id = store.with(|c| records::resolve_character(c, ILSE)).unwrap().id;
    let state = store.with(|c| records::load_state(c, &id)).unwrap();
    assert_eq!(state.last_chat_at.as_deref(), Some("2026-11-21T09:00:00Z"));
    assert_eq!(state.turns, 5);
}

/// An OpenAI-compatible server on this machine that streams one reply per request.
fn openai_server() -> MockServer {
    MockServer::start(|request, index| {
        if !OpenAi::is_endpoint(&request.target) {
            return Action::json(404, &OpenAi::error("no route"));
        }
        let text = format!("call {index}");
        let events = OpenAi::stream(&["[Ilse Marrow]: ", "Good to ", "see you — ", &text]);
        let bytes: Vec<u8> = events.iter().map(|(e, _)| e.as_str()).collect::<String>().into_bytes();
        Action::event_stream(&bytes, index as u64, true, After::End)
    })
}

#[test]
fn an_identical_request_is_served_from_the_cache_without_reaching_the_provider() {
    let dir = tempfile::tempdir().unwrap();
    let server = openai_server();
    let paths = setup(dir.path(), json!({ "rules": [] }), |c| {
        c.upsert_profile(ProviderProfile {
            name: "http".into(),
            kind: ProviderKind::Openai,
            base_url: Some(OpenAi::base_url(&server.url())),
            model: MODEL.into(),
            cache: true,
            timeouts: Timeouts { connect_secs: 2.0, read_secs: 5.0, total_secs: 20.0 },
            retry: RetryPolicy { max_retries: 1, base_delay_ms: 10, max_delay_ms: 100 },
            ..Default::default()
        });
        c.roles.insert("companion".into(), "http".into());
    });
    let engine = engine::start(paths.clone()).unwrap();
    let now = Some("2026-11-21T12:00:00Z");
    let first = committed(&send(&engine, "Hello there!", now));
    assert_eq!(server.hits(), 1);
    assert!(!first.from_cache);
    assert_eq!(first.reply, "Good to see you — call 0");

    // Take the exchange back and send the same words at the same moment: the packet is
    // identical, so the reply comes from the cache and the server hears nothing.
    engine.send(Command::Companion(CompanionCommand::Undo { character: ILSE.into(), expect: None })).unwrap();
    until(&engine, |e| matches!(e, CompanionEvent::Undone { turn_id: Some(_), .. }));
    assert_eq!(counts(&paths), (0, 0, 1));
    let again = committed(&send(&engine, "Hello there!", now));
    assert_eq!(server.hits(), 1, "served from the cache");
    assert!(again.from_cache);
    assert_eq!(again.reply, first.reply);
    assert_eq!(again.packet.messages, first.packet.messages);

    // A different moment is a different request.
    let third = committed(&send(&engine, "Hello there!", Some("2026-11-21T12:05:00Z")));
    assert_eq!(server.hits(), 2);
    assert!(!third.from_cache);
}

#[test]
fn cancelling_a_streaming_reply_commits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let paths = setup(dir.path(), slow_reply(400, 20), |_| {});
    let engine = engine::start(paths.clone()).unwrap();
    engine.send(Command::Companion(CompanionCommand::Send { character: ILSE.into(), text: "Tell me a long story".into(), now: None })).unwrap();
    until(&engine, |e| matches!(e, CompanionEvent::Token { .. }));
    engine.send(Command::Companion(CompanionCommand::Cancel { character: ILSE.into() })).unwrap();
    let events = until(&engine, ends_turn);
    assert!(matches!(events.last(), Some(CompanionEvent::Cancelled { .. })), "{:?}", events.last());
    assert_eq!(counts(&paths), (0, 0, 0));
}

#[test]
fn a_process_killed_mid_stream_leaves_no_trace_of_the_turn() {
    let dir = tempfile::tempdir().unwrap();
    let paths = setup(dir.path(), slow_reply(400, 25), |_| {});
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["chat", "send", "--character", "ilse", "Tell me everything"])
        .env("LOREKEEPER_LIBRARY", &paths.library_file)
        .env("LOREKEEPER_CONFIG", &paths.config_file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the reply is visibly streaming, then kill the process outright.
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !String::from_utf8_lossy(&seen).contains("word word word") {
        assert!(Instant::now() < deadline, "no streamed reply: {:?}", String::from_utf8_lossy(&seen));
        let mut buf = [0u8; 256];
        let n = std::io::Read::read(&mut stdout, &mut buf).unwrap();
        assert!(n > 0, "the process ended before streaming: {:?}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    child.kill().unwrap();
    child.wait().unwrap();

    assert_eq!(counts(&paths), (0, 0, 0));
    // And the chat goes on from a clean state.
    let engine = engine::start(paths.clone()).unwrap();
    engine.send(Command::Companion(CompanionCommand::History { character: ILSE.into(), limit: 100 })).unwrap();
    let events = until(&engine, |e| matches!(e, CompanionEvent::History { .. }));
    assert!(matches!(events.last(), Some(CompanionEvent::History { turns, .. }) if turns.is_empty()));
}

/// While one process (here the engine, as the GUI runs it) is replying, a second
/// process on the same library is refused the same character's turn before anything
/// streams, and afterwards the chat holds exactly the one exchange.
#[test]
fn a_second_process_is_refused_a_turn_the_first_is_running() {
    let dir = tempfile::tempdir().unwrap();
    let paths = setup(dir.path(), slow_reply(200, 20), |_| {});
    let engine = engine::start(paths.clone()).unwrap();
    engine.send(Command::Companion(CompanionCommand::Send { character: ILSE.into(), text: "Tell me a long story".into(), now: None })).unwrap();
    until(&engine, |e| matches!(e, CompanionEvent::Token { .. }));
    let second = cli(&paths, &["chat", "send", "--character", "ilse", "Me too"]);
    assert!(!second.status.success(), "the second process must be refused");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("already answering"), "{stderr}");
    assert!(second.stdout.is_empty(), "nothing streamed: {}", String::from_utf8_lossy(&second.stdout));
    let events = until(&engine, ends_turn);
    assert!(matches!(events.last(), Some(CompanionEvent::TurnCommitted { .. })), "{:?}", events.last());
    assert_eq!(counts(&paths).0, 1, "one exchange: the first process's");
    // Released with the turn: the next send from another process goes through.
    drop(engine);
    let third = cli(&paths, &["chat", "send", "--character", "ilse", "And now?"]);
    assert!(third.status.success(), "{}", String::from_utf8_lossy(&third.stderr));
    assert_eq!(counts(&paths).0, 2);
}

#[test]
fn chat_send_json_prints_the_committed_turn_and_its_hits() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({ "rules": [ { "when": { "system_contains": "Roleplay as" }, "reply": reply("[Ilse Marrow]: Tea's on.") } ] });
    let paths = setup(dir.path(), script, |_| {});
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["chat", "send", "--character", "Ilse Marrow", "Morning!", "--json"])
        .env("LOREKEEPER_LIBRARY", &paths.library_file)
        .env("LOREKEEPER_CONFIG", &paths.config_file)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let value: serde_json::Value = serde_json::from_slice(&output.stdout).expect("one JSON object");
    assert_eq!(value["turn"]["reply"], "Tea's on.");
    assert_eq!(value["turn"]["user_text"], "Morning!");
    assert!(value["hits"].is_array());
    assert!(value["turn"]["packet"]["blocks"].as_array().unwrap().iter().any(|b| b["tag"] == "user_input"));

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["chat", "history", "--character", "ilse", "--json"])
        .env("LOREKEEPER_LIBRARY", &paths.library_file)
        .env("LOREKEEPER_CONFIG", &paths.config_file)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success());
    let messages: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let messages = messages.as_array().unwrap();
    assert_eq!(messages.len(), 3, "the card's greeting, the user's message and the reply");
    assert_eq!((messages[0]["id"].as_str(), messages[0]["role"].as_str()), (Some("greeting"), Some("character")));
    assert!(messages[0]["text"].as_str().unwrap().starts_with("Oh — it's you."));
    assert_eq!((messages[1]["role"].as_str(), messages[1]["text"].as_str()), (Some("user"), Some("Morning!")));
    assert_eq!((messages[2]["role"].as_str(), messages[2]["text"].as_str()), (Some("character"), Some("Tea's on.")));
    assert_eq!(messages[2]["swipes"], serde_json::json!(["Tea's on."]));
    assert_eq!(messages[2]["swipe"], 0);
}

#[test]
fn a_summary_covers_whole_exchanges() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({
        "rules": [
            { "when": { "system_contains": "compress a stretch of conversation" }, "reply": "The user said hello and Ilse answered." },
            { "when": { "system_contains": "Roleplay as Ilse Marrow" }, "reply": reply("[Ilse Marrow]: Morning.") }
        ]
    });
    // One exchange per summary: the message and its reply go together.
    let paths = setup(dir.path(), script, |c| c.memory.summary_every = 1);
    let engine = engine::start(paths.clone()).unwrap();
    let _ = committed(&send(&engine, "Hello!", Some("2026-11-01T10:00:00Z")));
    until(&engine, |e| matches!(e, CompanionEvent::Summarised { .. }));
    let store = Store::open(&paths.library_file).unwrap();
    let (summarised, open): (i64, i64) = store
        .with(|c| {
            Ok(c.query_row(
                "SELECT sum(summarised = 1), sum(summarised = 0) FROM memories WHERE kind = 'turn'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?)
        })
        .unwrap();
    assert_eq!((summarised, open), (2, 0), "both halves of the exchange are in the summary");
}

/// Undo of an exchange a summary already covers does what deleting it does: the exchange
/// goes and the summary over it is reopened (undo used to refuse: "cannot be taken
/// back", while `chat delete` of the same exchange worked).
#[test]
fn undo_takes_back_an_exchange_a_summary_covers_as_delete_does() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({
        "rules": [
            { "when": { "system_contains": "compress a stretch of conversation" }, "reply": "The user said hello and Ilse answered." },
            { "when": { "system_contains": "Roleplay as Ilse Marrow" }, "reply": reply("[Ilse Marrow]: Morning.") }
        ]
    });
    let paths = setup(dir.path(), script, |c| c.memory.summary_every = 1);
    let engine = engine::start(paths.clone()).unwrap();
    let turn = committed(&send(&engine, "Hello!", Some("2026-11-01T10:00:00Z")));
    until(&engine, |e| matches!(e, CompanionEvent::Summarised { .. }));
    until(&engine, |e| matches!(e, CompanionEvent::Idle { .. }));
    engine.send(Command::Companion(CompanionCommand::Undo { character: ILSE.into(), expect: None })).unwrap();
    let events = until(&engine, |e| matches!(e, CompanionEvent::Undone { .. } | CompanionEvent::Failed { .. }));
    match events.last() {
        Some(CompanionEvent::Undone { turn_id, .. }) => assert_eq!(turn_id.as_deref(), Some(turn.id.as_str())),
        other => panic!("undo refused: {other:#?}"),
    }
    assert_eq!(counts(&paths).0, 0, "the exchange is taken back");
    let store = Store::open(&paths.library_file).unwrap();
    let memories: i64 = store.with(|c| Ok(c.query_row("SELECT count(*) FROM memories WHERE kind IN ('turn', 'summary')", [], |r| r.get(0))?)).unwrap();
    assert_eq!(memories, 0, "its memory turns go, and the summary over them");
}

/// A pinned memory is given to its character in every prompt, whatever the message
/// asks; unpinned, it goes back to being recalled only when relevant.
#[test]
fn a_pinned_memory_is_in_every_packet_of_its_character() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({ "rules": [ { "when": { "system_contains": "Roleplay as" }, "reply": reply("[Ilse Marrow]: Morning to you too.") } ] });
    let paths = setup(dir.path(), script, |_| {});
    let store = Store::open(&paths.library_file).unwrap();
    let id = store.with(|c| records::resolve_character(c, ILSE)).unwrap().id;
    drop(store);
    let file = dir.path().join("pin.jsonl");
    let line = json!({ "id": "pin-1", "speaker": "Ilse Marrow", "text": "Ilse promised her brother to keep the green lamp lit until he sails home.", "scope": format!("character:{id}") });
    std::fs::write(&file, line.to_string()).unwrap();
    let engine = engine::start(paths.clone()).unwrap();
    let memory = |command| {
        engine.send(Command::Memory(command)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match engine.events().recv_timeout(deadline.saturating_duration_since(Instant::now())).expect("a memory event") {
                Event::Memory(lorekeeper::memory::MemoryEvent::Imported { .. } | lorekeeper::memory::MemoryEvent::Curated { .. }) => return,
                Event::Core(lorekeeper::engine::CoreEvent::Error { message, .. }) => panic!("{message}"),
                _ => {}
            }
        }
    };
    memory(lorekeeper::memory::MemoryCommand::Import { path: file });
    let bank = |t: &ChatTurn| t.packet.block("memory_bank").map(|b| b.text.clone()).unwrap_or_default();
    let before = committed(&send(&engine, "Good morning!", None));
    assert!(!bank(&before).contains("green lamp"), "not relevant, not pinned: left out");
    memory(lorekeeper::memory::MemoryCommand::Pin { id: "pin-1".into(), pinned: true });
    let pinned = committed(&send(&engine, "What a grey morning.", None));
    assert!(bank(&pinned).contains("green lamp"), "pinned: in the packet whatever the message: {:?}", pinned.packet.block("memory_bank"));
    memory(lorekeeper::memory::MemoryCommand::Pin { id: "pin-1".into(), pinned: false });
    let after = committed(&send(&engine, "The gulls are loud today.", None));
    assert!(!bank(&after).contains("green lamp"), "unpinned: left out again");
    // A recent message, still in the history: pinned alone it is read there; pinned with
    // its memory edited, the edited words are sent too.
    let recent = format!("{}-u", after.id);
    memory(lorekeeper::memory::MemoryCommand::Pin { id: recent.clone(), pinned: true });
    let plain = committed(&send(&engine, "Tea?", None));
    assert!(!bank(&plain).contains("gulls"), "read in the history, not twice: {:?}", plain.packet.block("memory_bank"));
    assert!(plain.packet.notes.iter().any(|n| n.contains("still in the chat history")), "{:?}", plain.packet.notes);
    memory(lorekeeper::memory::MemoryCommand::Edit { id: recent, text: "The gulls were loud the day the user's sister left.".into() });
    let edited = committed(&send(&engine, "More tea?", None));
    assert!(bank(&edited).contains("the day the user's sister left"), "{:?}", edited.packet.block("memory_bank"));
}

/// A World Info entry flagged `vectorized` fires in chat when the message is close to it
/// in meaning, with no key in the message, and the packet says how close it was.
#[test]
fn a_vectorized_lore_entry_fires_on_meaning_in_chat() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({ "rules": [ { "when": { "system_contains": "Roleplay as" }, "reply": reply("[Ilse Marrow]: Listen.") } ] });
    let paths = setup(dir.path(), script, |_| {});
    let book = json!({ "entries": {
        "0": { "uid": 0, "key": [], "content": "Church bells sunk with the old village ring beneath the bay whenever the tide goes out.", "comment": "Drowned bells", "vectorized": true },
        "1": { "uid": 1, "key": ["zeppelin"], "content": "Airships never fly over the harbour.", "comment": "Airships" }
    } });
    let store = Store::open(&paths.library_file).unwrap();
    lorekeeper::interop::library::import_bytes(&store, book.to_string().as_bytes(), "harbour-lore").unwrap();
    drop(store);
    let engine = engine::start(paths.clone()).unwrap();
    engine
        .send(Command::Companion(CompanionCommand::ChatLorebook { character: ILSE.into(), lorebook: "harbour-lore".into(), attach: true, to_character: false }))
        .unwrap();
    until(&engine, |e| matches!(e, CompanionEvent::Changed { .. } | CompanionEvent::Failed { .. }));
    let turn = committed(&send(&engine, "Do you hear those bells ringing from under the water?", None));
    let fired: Vec<&String> = turn.packet.notes.iter().filter(|n| n.starts_with("lore fired")).collect();
    assert!(fired.iter().any(|n| n.contains("Drowned bells") && n.contains("vector similarity")), "{:?}", turn.packet.notes);
    assert!(!fired.iter().any(|n| n.contains("Airships")), "a keyed entry without its key stays out");
    let unrelated = committed(&send(&engine, "Shall we bake bread this afternoon?", None));
    assert!(!unrelated.packet.notes.iter().any(|n| n.contains("Drowned bells")), "far in meaning: out: {:?}", unrelated.packet.notes);
}

/// Deleting an exchange from the middle of a chat re-embeds the messages after it, whose
/// vectors mixed in its words: afterwards every stored vector is the one a full reindex
/// of the chat as it now reads writes.
#[test]
fn deleting_an_exchange_keeps_the_next_messages_vectors_true() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({ "rules": [
        { "when": { "user_contains": "lighthouse" }, "reply": reply("[Ilse Marrow]: The keeper rowed out to it every night before the storm.") },
        { "when": { "user_contains": "otter" }, "reply": reply("[Ilse Marrow]: An otter stole a whole herring from my basket by the quay.") },
        { "when": { "user_contains": "bread" }, "reply": reply("[Ilse Marrow]: Rye bread, with caraway, from the bakery on Tar Street.") },
        { "when": { "system_contains": "compress" }, "reply": "unused" }
    ] });
    let paths = setup(dir.path(), script, |_| {});
    let engine = engine::start(paths.clone()).unwrap();
    committed(&send(&engine, "Tell me about the lighthouse.", None));
    let otter = committed(&send(&engine, "Have you seen the otter again?", None));
    committed(&send(&engine, "What bread do you buy?", None));
    let bank = lorekeeper::memory::bank_for(engine.context()).unwrap();
    let vectors = |bank: &lorekeeper::memory::MemoryBank| -> Vec<(String, Vec<f32>)> {
        let ids: Vec<String> = bank
            .store()
            .with(|c| c.prepare("SELECT id FROM memories WHERE kind = 'turn' ORDER BY seq")?.query_map([], |r| r.get(0))?.collect::<Result<_, _>>().map_err(Into::into))
            .unwrap();
        ids.into_iter().map(|id| (id.clone(), bank.stored_vector(&id).unwrap().expect("every message has a vector"))).collect()
    };
    let before = vectors(&bank);
    assert_eq!(before.len(), 6);

    engine
        .send(Command::Companion(CompanionCommand::Delete { character: ILSE.into(), message: format!("{}-u", otter.id), and_after: false }))
        .unwrap();
    until(&engine, |e| matches!(e, CompanionEvent::Changed { .. }));
    let after = vectors(&bank);
    assert_eq!(after.len(), 4, "the exchange's two messages are gone");
    let cosine = |a: &[f32], b: &[f32]| -> f32 { a.iter().zip(b).map(|(x, y)| x * y).sum() };
    let was = |id: &str| before.iter().find(|(i, _)| i == id).map(|(_, v)| v.clone()).unwrap();
    assert!(cosine(&was(&after[2].0), &after[2].1) < 0.9999, "the next message's vector changed");
    bank.reindex(true, |_, _| {}).unwrap();
    for ((id, got), (_, want)) in after.iter().zip(vectors(&bank)) {
        assert!(cosine(got, &want) > 0.9999, "{id}: cosine {} to the vector of the chat as it now reads", cosine(got, &want));
    }
}

/// A memory search scoped to a character takes the character's name (or a word of it),
/// as every other verb does; a name that is no character is an error, not an empty list.
#[test]
fn a_memory_search_is_scoped_to_a_character_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({ "rules": [
        { "when": { "user_contains": "otter" }, "reply": reply("[Ilse Marrow]: An otter stole a whole herring from my basket by the quay.") },
        { "when": { "system_contains": "compress" }, "reply": "unused" }
    ] });
    let paths = setup(dir.path(), script, |_| {});
    let engine = engine::start(paths.clone()).unwrap();
    committed(&send(&engine, "Have you seen the otter again?", None));
    drop(engine);
    for scope in ["character:Ilse Marrow", "character:marrow"] {
        let out = cli(&paths, &["--json", "memory", "search", "otter herring", "--scope", scope]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let hits: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        assert!(hits.iter().any(|h| h["text"].as_str().unwrap_or("").contains("stole a whole herring")), "{scope}: {hits:?}");
    }
    let out = cli(&paths, &["memory", "search", "otter", "--scope", "character:Nobody"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found: character \"Nobody\""), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A card's own lorebook keeps its `token_budget` for export, but the budget caps nothing
/// in the chat (SillyTavern ignores it): every entry that fires is sent.
#[test]
fn a_card_books_token_budget_caps_no_lore_in_the_chat() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({ "rules": [ { "when": { "system_contains": "Roleplay as" }, "reply": reply("[Tam Reed]: Aye.") } ] });
    let paths = setup(dir.path(), script, |_| {});
    let long = "The quay is old and its stones are worn by a century of carts and boots. ".repeat(3);
    let card = json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": {
        "name": "Tam Reed", "description": "A ferryman.", "first_mes": "Evening.",
        "character_book": { "token_budget": 10, "entries": [
            { "keys": ["quay"], "content": format!("QUAY-ONE {long}"), "enabled": true, "insertion_order": 10, "comment": "One" },
            { "keys": ["quay"], "content": format!("QUAY-TWO {long}"), "enabled": true, "insertion_order": 20, "comment": "Two" }
        ] } } });
    let store = Store::open(&paths.library_file).unwrap();
    lorekeeper::interop::library::import_bytes(&store, card.to_string().as_bytes(), "tam.json").unwrap();
    drop(store);
    let engine = engine::start(paths.clone()).unwrap();
    engine
        .send(Command::Companion(CompanionCommand::Send { character: "Tam Reed".into(), text: "Meet me at the quay.".into(), now: None }))
        .unwrap();
    let turn = committed(&until(&engine, ends_turn));
    let text = turn.packet.text();
    assert!(text.contains("QUAY-ONE") && text.contains("QUAY-TWO"), "{:?}", turn.packet.notes);
    assert!(!turn.packet.notes.iter().any(|n| n.starts_with("lore held back")), "{:?}", turn.packet.notes);
}

/// A card's own lorebook keeps its `recursive_scanning` and `scan_depth` for export, but
/// they change nothing in the chat: SillyTavern copies only a card book's entries, so
/// recursion and scan depth stay the global ones (recursion on, two messages scanned).
#[test]
fn a_card_books_recursion_and_scan_depth_are_the_global_ones() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({ "rules": [ { "when": { "system_contains": "Roleplay as" }, "reply": reply("[Tam Reed]: Aye.") } ] });
    let paths = setup(dir.path(), script, |_| {});
    let card = json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": {
        "name": "Tam Reed", "description": "A ferryman.", "first_mes": "Evening, traveller.",
        "character_book": { "recursive_scanning": false, "scan_depth": 1, "entries": [
            { "keys": ["quay"], "content": "QUAY-LORE The lantern hangs by the quay.", "enabled": true, "insertion_order": 10, "comment": "Quay" },
            { "keys": ["lantern"], "content": "LANTERN-LORE It burns whale oil.", "enabled": true, "insertion_order": 20, "comment": "Lantern" },
            { "keys": ["traveller"], "content": "GREETING-LORE Travellers pay double.", "enabled": true, "insertion_order": 30, "comment": "Greeting" }
        ] } } });
    let store = Store::open(&paths.library_file).unwrap();
    lorekeeper::interop::library::import_bytes(&store, card.to_string().as_bytes(), "tam.json").unwrap();
    drop(store);
    let engine = engine::start(paths.clone()).unwrap();
    engine
        .send(Command::Companion(CompanionCommand::Send { character: "Tam Reed".into(), text: "Meet me at the quay.".into(), now: None }))
        .unwrap();
    let turn = committed(&until(&engine, ends_turn));
    let text = turn.packet.text();
    assert!(text.contains("QUAY-LORE"), "{:?}", turn.packet.notes);
    assert!(text.contains("LANTERN-LORE"), "fires by recursion from the quay entry: {:?}", turn.packet.notes);
    assert!(text.contains("GREETING-LORE"), "the greeting is within the global depth of 2: {:?}", turn.packet.notes);
    drop(engine);
    let store = Store::open(&paths.library_file).unwrap();
    let exported = lorekeeper::interop::library::export_character(&store.reader().unwrap(), "Tam Reed", lorekeeper::interop::library::CardFormat::CardV2, false).unwrap();
    let exported: serde_json::Value = serde_json::from_slice(&exported.bytes).unwrap();
    assert_eq!(exported["data"]["character_book"]["recursive_scanning"], json!(false));
    assert_eq!(exported["data"]["character_book"]["scan_depth"], json!(1));
}

/// World Info timers carry across a chat's messages as in SillyTavern: a sticky entry
/// stays in for its messages after the one that fired it, a cooling-down entry is held
/// back though its key is there, and a redrawn reply is the same message again — the
/// timers its first draw set are set anew, not advanced twice nor left behind.
#[test]
fn sticky_and_cooldown_lore_carry_across_chat_messages_but_not_across_a_redraw() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({ "rules": [ { "when": { "system_contains": "Roleplay as" }, "reply": reply("[Ilse Marrow]: Listen.") } ] });
    let paths = setup(dir.path(), script, |_| {});
    let book = json!({ "entries": {
        "0": { "uid": 0, "key": ["bell"], "content": "The harbour bell warns of storms.", "comment": "Bell", "sticky": 3 },
        "1": { "uid": 1, "key": ["horn"], "content": "The horn calls the boats home.", "comment": "Horn", "cooldown": 4 }
    } });
    let store = Store::open(&paths.library_file).unwrap();
    lorekeeper::interop::library::import_bytes(&store, book.to_string().as_bytes(), "harbour-timers").unwrap();
    drop(store);
    let engine = engine::start(paths.clone()).unwrap();
    engine
        .send(Command::Companion(CompanionCommand::ChatLorebook { character: ILSE.into(), lorebook: "harbour-timers".into(), attach: true, to_character: false }))
        .unwrap();
    until(&engine, |e| matches!(e, CompanionEvent::Changed { .. } | CompanionEvent::Failed { .. }));
    let fired = |turn: &ChatTurn| -> Vec<String> { turn.packet.notes.iter().filter(|n| n.starts_with("lore fired")).cloned().collect() };
    let changed = |engine: &EngineHandle| -> ChatTurn {
        match until(engine, |e| matches!(e, CompanionEvent::Changed { .. } | CompanionEvent::Failed { .. })).pop() {
            Some(CompanionEvent::Changed { turn: Some(turn), .. }) => *turn,
            other => panic!("expected a changed turn, got {other:#?}"),
        }
    };

    // Message 2 (the greeting is message 1): both fire by their keys.
    let first = fired(&committed(&send(&engine, "Do you hear the bell and the horn?", None)));
    assert_eq!(first.len(), 2, "{first:?}");
    // Message 4: the bell sticks without its key; the horn cools down though named. As
    // in SillyTavern, sticky 3 set at length 2 ends at 5 and cooldown 4 at 6.
    let second = committed(&send(&engine, "Only the horn now.", None));
    assert_eq!(fired(&second), ["lore fired: Bell (sticky since message 2, until 4)"], "{:?}", second.packet.notes);
    // The same message drawn again: the same lore, the timers where they were.
    engine.send(Command::Companion(CompanionCommand::Regenerate { character: ILSE.into(), expect: None })).unwrap();
    let redrawn = changed(&engine);
    assert_eq!(fired(&redrawn), ["lore fired: Bell (sticky since message 2, until 4)"], "{:?}", redrawn.packet.notes);
    // Message 6: the bell's stickiness is over, the horn's cooldown too: it fires again.
    let third = committed(&send(&engine, "The horn again.", None));
    assert_eq!(fired(&third).len(), 1, "{:?}", third.packet.notes);
    assert!(fired(&third)[0].contains("Horn"));
    // Message 8: the horn cools down again (until 9).
    let fourth = committed(&send(&engine, "And the horn once more.", None));
    assert!(fired(&fourth).is_empty(), "{:?}", fourth.packet.notes);

    // Message 10 fires the bell; the message is edited to leave it out and its reply
    // drawn again: the bell set by the thrown-away draw does not stick at message 12.
    let fifth = committed(&send(&engine, "The bell!", None));
    assert!(fired(&fifth)[0].contains("Bell"), "{:?}", fifth.packet.notes);
    engine
        .send(Command::Companion(CompanionCommand::Edit { character: ILSE.into(), message: format!("{}-u", fifth.id), text: "A calm night.".into() }))
        .unwrap();
    changed(&engine);
    engine.send(Command::Companion(CompanionCommand::Regenerate { character: ILSE.into(), expect: None })).unwrap();
    assert!(fired(&changed(&engine)).is_empty());
    let sixth = committed(&send(&engine, "Still calm.", None));
    assert!(fired(&sixth).is_empty(), "{:?}", sixth.packet.notes);
}

/// A reply drawn again is asked as its message was first sent: the time since the last
/// chat is from the exchange before it. A redrawn first message said "Time since last
/// chat: moments ago" (measured from itself) instead of "this is your first conversation".
#[test]
fn a_redrawn_reply_counts_the_time_since_the_chat_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({ "rules": [ { "when": { "system_contains": "Roleplay as" }, "reply": reply("[Ilse Marrow]: Sit down.") } ] });
    let paths = setup(dir.path(), script, |_| {});
    let engine = engine::start(paths).unwrap();
    let since = |turn: &ChatTurn| -> String {
        let text = serde_json::to_string(&turn.packet).unwrap();
        let at = text.find("Time since last chat: ").expect("the temporal block");
        text[at..].split("\\n").next().unwrap_or_default().to_string()
    };
    let redraw = |engine: &EngineHandle| -> ChatTurn {
        engine.send(Command::Companion(CompanionCommand::Regenerate { character: ILSE.into(), expect: None })).unwrap();
        match until(engine, |e| matches!(e, CompanionEvent::Changed { .. } | CompanionEvent::Failed { .. })).pop() {
            Some(CompanionEvent::Changed { turn: Some(turn), .. }) => *turn,
            other => panic!("expected a changed turn, got {other:#?}"),
        }
    };
    let first = committed(&send(&engine, "Evening, Ilse.", Some("2026-11-21T08:00:00Z")));
    assert_eq!(since(&first), "Time since last chat: this is your first conversation");
    assert_eq!(since(&redraw(&engine)), "Time since last chat: this is your first conversation");
    let second = committed(&send(&engine, "Back again.", Some("2026-11-21T11:00:00Z")));
    assert_eq!(since(&second), "Time since last chat: 3.0 hours");
    assert_eq!(since(&redraw(&engine)), "Time since last chat: 3.0 hours");
}

/// What a character said long ago comes back to it as a memory, with who said it; when
/// asked to remember, it may say it again in the same words, as people do. (Its reply
/// was thrown away as "copied from its prompt" three times, and the turn failed.)
#[test]
fn a_character_may_say_again_what_it_remembers_saying_and_the_memory_names_who_said_it() {
    let dir = tempfile::tempdir().unwrap();
    let keeper = "Old Bram kept the Gullhaven lighthouse for forty years and never once let the lamp go out.";
    let script = json!({
        "rules": [
            { "when": { "user_contains": "Do you remember what you told me" }, "reply": reply(&format!("[Ilse Marrow]: Of course I do. {keeper}")) },
            { "when": { "user_contains": "bread" }, "reply": reply("[Ilse Marrow]: Rye, always rye.") },
            { "when": { "user_contains": "weather" }, "reply": reply("[Ilse Marrow]: Grey again, and the gulls are loud.") },
            { "when": { "user_contains": "Tell me about" }, "reply": reply(&format!("[Ilse Marrow]: {keeper}")) },
            { "when": { "system_contains": "compress" }, "reply": "unused" }
        ]
    });
    let paths = setup(dir.path(), script, |c| {
        c.companion.history_turns = 1;
        c.memory.summary_every = 100;
    });
    let engine = engine::start(paths.clone()).unwrap();
    let _ = committed(&send(&engine, "Tell me about the lighthouse keeper of Gullhaven.", Some("2026-11-01T10:00:00Z")));
    let _ = committed(&send(&engine, "How is the weather at the harbour?", Some("2026-11-01T10:05:00Z")));
    let _ = committed(&send(&engine, "What bread do you bake?", Some("2026-11-01T10:10:00Z")));
    let events = send(&engine, "Do you remember what you told me about the lighthouse keeper?", Some("2026-11-01T10:15:00Z"));
    let discarded: Vec<&CompanionEvent> = events.iter().filter(|e| matches!(e, CompanionEvent::Discarded { .. })).collect();
    assert!(discarded.is_empty(), "{discarded:?}");
    let turn = committed(&events);
    assert!(turn.reply.contains(keeper), "{}", turn.reply);
    let bank = turn.packet.block("memory_bank").expect("a recall question gets a memory bank");
    assert!(bank.text.contains(&format!("Ilse Marrow: {keeper}")), "the memory says who said it: {}", bank.text);
    assert_eq!(turn.attempts, 1);
}

/// Memories a file brought in for a character are not its conversation: the chat's
/// summaries are told from the chat's own turns only. (Each message used to set off one
/// more summary over five imported lines, mixed with the chat's: after a 3,000-line
/// import, some 600 extra calls.)
#[test]
fn the_chat_summary_is_told_from_the_chat_not_from_imported_memories() {
    use lorekeeper::memory::records::{MemoryKind, NewMemory, Scope};
    let dir = tempfile::tempdir().unwrap();
    let script = json!({
        "rules": [
            { "when": { "system_contains": "compress a stretch of conversation" }, "reply": "Ilse and the user talked about the harbour." },
            { "when": { "system_contains": "Roleplay as Ilse Marrow" }, "reply": reply("[Ilse Marrow]: Mm-hm.") }
        ]
    });
    let paths = setup(dir.path(), script, |c| c.memory.summary_every = 2);
    let engine = engine::start(paths.clone()).unwrap();
    let first = committed(&send(&engine, "The harbour is busy today.", Some("2026-11-01T10:00:00Z")));
    let bank = lorekeeper::memory::bank_for(engine.context()).unwrap();
    let imported: Vec<NewMemory> = (0..10)
        .map(|i| NewMemory {
            id: Some(format!("bulk-{i}")),
            kind: MemoryKind::Turn,
            scope: Scope::character(first.character_id.clone()),
            speaker: Some("user".into()),
            text: format!("Bulk line {i} about an old trip inland."),
            source: Some("old-notes.jsonl".into()),
            ..Default::default()
        })
        .collect();
    bank.add(imported).unwrap();
    let second = committed(&send(&engine, "The ferry is late again.", Some("2026-11-01T10:05:00Z")));
    let summarised = until(&engine, |e| matches!(e, CompanionEvent::Summarised { .. }));
    let CompanionEvent::Summarised { memory_id, .. } = summarised.last().unwrap() else { unreachable!() };
    let summary = bank.context(memory_id, 0, 0).unwrap();
    assert_eq!(summary[0].source.as_deref(), Some(format!("turns {}-u..{}-r", first.id, second.id).as_str()));
    let waiting = lorekeeper::memory::summarise::buffer(&bank, &Scope::character(first.character_id.clone()), None).unwrap();
    assert_eq!(waiting.len(), 10, "the imported lines are left as they came");
}

/// A key is looked for in the last two messages when neither book nor entry says how
/// far, as in SillyTavern: the user's new message and the reply before it. (Four were
/// scanned, so a migrated book's entries fired a whole exchange longer.)
#[test]
fn a_key_is_looked_for_in_the_last_two_messages_as_in_sillytavern() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({ "rules": [ { "when": { "system_contains": "Roleplay as" }, "reply": reply("[Ilse Marrow]: Mm.") } ] });
    let paths = setup(dir.path(), script, |_| {});
    let book = json!({ "entries": { "0": { "uid": 0, "key": ["cat"], "content": "The harbour cat is called Soot.", "comment": "Harbour cat" } } });
    let store = Store::open(&paths.library_file).unwrap();
    lorekeeper::interop::library::import_bytes(&store, book.to_string().as_bytes(), "harbour-cats").unwrap();
    drop(store);
    let engine = engine::start(paths.clone()).unwrap();
    engine
        .send(Command::Companion(CompanionCommand::ChatLorebook { character: ILSE.into(), lorebook: "harbour-cats".into(), attach: true, to_character: false }))
        .unwrap();
    until(&engine, |e| matches!(e, CompanionEvent::Changed { .. } | CompanionEvent::Failed { .. }));
    let fired = |turn: &ChatTurn| turn.packet.notes.iter().any(|n| n.starts_with("lore fired") && n.contains("Harbour cat"));
    assert!(fired(&committed(&send(&engine, "The cat sat on the rope.", None))));
    // Three messages back now: the user's "cat", the reply, and this one.
    assert!(!fired(&committed(&send(&engine, "Ok.", None))), "the key is two messages further back than the scan");
}

/// `lorebook test` says what a chat would do with the text: a `vectorized` entry close in
/// meaning fires with its similarity, and a `{{user}}` key stands for the user's name.
/// (It said "no keys and not constant" of the one and "no key found" of the other.)
#[test]
fn testing_a_lorebook_weighs_meaning_and_fills_the_users_name_as_a_chat_does() {
    use lorekeeper::interop::{InteropCommand, InteropEvent};
    let dir = tempfile::tempdir().unwrap();
    let paths = setup(dir.path(), json!({ "default": "unused" }), |c| c.companion.user_name = "Corin".into());
    let book = json!({ "entries": {
        "0": { "uid": 0, "key": [], "content": "Chamomile and lemon balm tea helps a restless sleeper drift off.", "comment": "Tea blends", "vectorized": true },
        "1": { "uid": 1, "key": ["{{user}}"], "content": "The archive keeps a file on every visitor.", "comment": "Visitor file" }
    } });
    let store = Store::open(&paths.library_file).unwrap();
    lorekeeper::interop::library::import_bytes(&store, book.to_string().as_bytes(), "archive-lore").unwrap();
    drop(store);
    let engine = engine::start(paths.clone()).unwrap();
    let test = |text: &str| {
        engine.send(Command::Interop(InteropCommand::TestLore { lorebook: "archive-lore".into(), text: text.into() })).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match engine.events().recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Event::Interop(InteropEvent::LoreTest { verdicts, .. })) => return verdicts,
                Ok(_) => {}
                Err(e) => panic!("no lore test: {e}"),
            }
        }
    };
    let verdicts = test("I can't sleep lately; maybe something calming to drink before bed. Corin walks by.");
    let tea = verdicts.iter().find(|v| v.label.contains("Tea blends")).unwrap();
    assert!(tea.fired && tea.reason.contains("vector similarity"), "{tea:?}");
    let visitor = verdicts.iter().find(|v| v.label.contains("Visitor file")).unwrap();
    assert!(visitor.fired, "{{{{user}}}} is Corin: {visitor:?}");
    let verdicts = test("The price of salt went up again.");
    assert!(verdicts.iter().all(|v| !v.fired), "{verdicts:?}");
}

/// Entries alike in label and key (no comment, one key) each keep their own place: three
/// entries at one depth with three roles are said as three notes of their roles. (They
/// shared one id, and all took the last one's role.)
#[test]
fn entries_alike_in_label_and_key_keep_their_own_roles() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({ "rules": [ { "when": { "system_contains": "Roleplay as" }, "reply": reply("[Ilse Marrow]: Mm.") } ] });
    let paths = setup(dir.path(), script, |_| {});
    let entry = |uid: u32, role: u32, text: &str| json!({ "uid": uid, "key": ["lantern"], "content": text, "position": 4, "depth": 1, "role": role });
    let book = json!({ "entries": {
        "0": entry(0, 0, "SYSTEM-LANTERN"), "1": entry(1, 1, "USER-LANTERN"), "2": entry(2, 2, "ASSISTANT-LANTERN")
    } });
    let store = Store::open(&paths.library_file).unwrap();
    lorekeeper::interop::library::import_bytes(&store, book.to_string().as_bytes(), "lanterns").unwrap();
    drop(store);
    let engine = engine::start(paths.clone()).unwrap();
    engine
        .send(Command::Companion(CompanionCommand::ChatLorebook { character: ILSE.into(), lorebook: "lanterns".into(), attach: true, to_character: false }))
        .unwrap();
    until(&engine, |e| matches!(e, CompanionEvent::Changed { .. } | CompanionEvent::Failed { .. }));
    let turn = committed(&send(&engine, "Tell me about the lantern, please.", None));
    let text = turn.packet.text();
    for note in ["[system note] SYSTEM-LANTERN", "[user note] USER-LANTERN", "[assistant note] ASSISTANT-LANTERN"] {
        assert!(text.contains(note), "{note} missing:\n{text}");
    }
}

/// The chat's Author's Note, set with `chat note`, reaches the model where and as often as
/// it says (checked in the packet as sent), goes out in the chat file as SillyTavern's
/// `note_*` keys, comes back in with a SillyTavern chat, and is gone once removed.
#[test]
fn the_authors_note_is_sent_where_and_as_often_as_it_says_and_travels_with_the_chat_file() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({ "rules": [ { "when": { "system_contains": "Roleplay as" }, "reply": reply("[Ilse Marrow]: Mm, the weather.") } ] });
    let paths = setup(dir.path(), script, |c| c.companion.user_name = "Tamsin".into());
    let ok = |args: &[&str]| {
        let out = cli(&paths, args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let sent = |text: &str| -> (String, String, Vec<String>) {
        let out = ok(&["--json", "chat", "send", "--character", ILSE, text]);
        let line: serde_json::Value = out.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap();
        let packet = &line["turn"]["packet"];
        let content = |i: usize| packet["messages"][i]["content"].as_str().unwrap().to_string();
        let notes = packet["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect();
        (content(0), content(1), notes)
    };
    assert!(ok(&["chat", "note", "--character", ILSE]).contains("no author's note"));
    ok(&["chat", "note", "--character", ILSE, "--text", "Keep {{char}} wary of {{user}}; it is raining.", "--depth", "1", "--role", "user", "--every", "2"]);
    let shown: serde_json::Value = serde_json::from_str(ok(&["--json", "chat", "note", "--character", ILSE]).trim()).unwrap();
    assert_eq!(
        shown["author_note"],
        json!({ "text": "Keep {{char}} wary of {{user}}; it is raining.", "depth": 1, "every": 2, "role": "user", "position": "in_chat" })
    );
    // Every second user message: not the first, the second, not the third.
    let (system, user, notes) = sent("Good evening.");
    assert!(!system.contains("raining") && !user.contains("raining"), "{user}");
    assert!(notes.iter().any(|n| n.contains("author's note not sent")), "{notes:?}");
    let (_, user, _) = sent("Is the roof holding?");
    assert!(user.contains("[user note] Keep Ilse Marrow wary of Tamsin; it is raining.\n</chat_history>"), "depth 1, as the user, macros filled:\n{user}");
    assert!(!sent("And the cellar?").1.contains("raining"));
    // Before the character, every message: in the system prompt.
    ok(&["chat", "note", "--character", ILSE, "--position", "before", "--every", "1"]);
    let (system, user, _) = sent("Still raining?");
    assert!(system.contains("<authors_note>\nKeep Ilse Marrow wary of Tamsin; it is raining.\n</authors_note>\n<assistant_persona>"), "{system}");
    assert!(!user.contains("it is raining."), "{user}");

    // Out in the chat file as SillyTavern keeps it, and back in with a chat of theirs.
    let file = dir.path().join("chat.jsonl");
    ok(&["chat", "export", "--character", ILSE, "--out", file.to_str().unwrap()]);
    let header: serde_json::Value = serde_json::from_str(std::fs::read_to_string(&file).unwrap().lines().next().unwrap()).unwrap();
    let metadata = &header["chat_metadata"];
    assert_eq!(
        (&metadata["note_prompt"], &metadata["note_interval"], &metadata["note_depth"], &metadata["note_position"], &metadata["note_role"]),
        (&json!("Keep {{char}} wary of {{user}}; it is raining."), &json!(1), &json!(1), &json!(2), &json!(1)),
        "{header}"
    );
    let theirs = dir.path().join("theirs.jsonl");
    std::fs::write(
        &theirs,
        [
            json!({ "user_name": "Tamsin", "character_name": ILSE, "create_date": "2026-10-02@21h15m40s",
                "chat_metadata": { "note_prompt": "Speak softly.", "note_interval": 1, "note_depth": 0, "note_position": 1, "note_role": 2 } }),
            json!({ "name": ILSE, "is_user": false, "is_system": false, "send_date": "October 2, 2026 9:15pm", "mes": "Evening.", "extra": {} }),
            json!({ "name": "Tamsin", "is_user": true, "is_system": false, "send_date": "October 2, 2026 9:16pm", "mes": "Hello.", "extra": {} }),
            json!({ "name": ILSE, "is_user": false, "is_system": false, "send_date": "October 2, 2026 9:16pm", "mes": "Hush now.", "extra": {} }),
        ]
        .map(|l| l.to_string())
        .join("\n"),
    )
    .unwrap();
    let imported = ok(&["chat", "import", theirs.to_str().unwrap(), "--character", ILSE]);
    assert!(imported.contains("Author's Note is this chat's"), "{imported}");
    let (_, user, _) = sent("Why whisper?");
    // Depth 0: after the user's new message, the chat's very end (SillyTavern).
    let at = |needle: &str| user.find(needle).unwrap_or_else(|| panic!("{needle} missing:\n{user}"));
    assert!(at("</user_input>") < at("<after_input>\n[assistant note] Speak softly.\n</after_input>"), "depth 0, as the assistant:\n{user}");
    // Removed: not sent, and not in the next export either.
    ok(&["chat", "note", "--character", ILSE, "--clear"]);
    assert!(!sent("Can I speak up?").1.contains("Speak softly"));
    ok(&["chat", "export", "--character", ILSE, "--out", file.to_str().unwrap()]);
    let header: serde_json::Value = serde_json::from_str(std::fs::read_to_string(&file).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!(header["chat_metadata"]["note_prompt"], "", "{header}");
    // A bad value is refused and changes nothing.
    let refused = cli(&paths, &["chat", "note", "--character", ILSE, "--text", "x", "--depth", "99999"]);
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("depth may be at most"), "{refused:?}");
    assert!(ok(&["chat", "note", "--character", ILSE]).contains("no author's note"));
}

/// A reply may quote the user's own question back, as characters do; only a reply that
/// does nothing but repeat it is drawn again. (Quoting eight words of it threw the reply
/// away as "copied from its prompt", three draws in a row, and the turn was lost.)
#[test]
fn a_reply_may_quote_the_users_question_but_not_only_parrot_it() {
    let dir = tempfile::tempdir().unwrap();
    let question = "Do you think the storm will reach the ship before dawn tomorrow?";
    let script = json!({ "rules": [
        { "when": { "user_contains": "before dawn tomorrow?\n</user_input>" },
          "reply": reply(&format!("[Ilse Marrow]: *She blinks.* \"{question}\" Is that really what you came up three flights of stairs to ask me? Sit, the kettle is on.")) },
        { "when": { "user_contains": "the harbour wall hold through the whole winter?\n</user_input>" },
          "reply": reply("[Ilse Marrow]: Will the harbour wall hold through the whole winter?") }
    ] });
    let paths = setup(dir.path(), script, |_| {});
    let engine = engine::start(paths.clone()).unwrap();
    let turn = committed(&send(&engine, question, None));
    assert!(turn.reply.contains("Is that really what you came up"), "{}", turn.reply);
    let parrot = send(&engine, "Will the harbour wall hold through the whole winter?", None);
    let discarded: Vec<&String> = parrot.iter().filter_map(|e| if let CompanionEvent::Discarded { reason, .. } = e { Some(reason) } else { None }).collect();
    assert!(!discarded.is_empty() && discarded.iter().all(|r| r.contains("only repeated")), "{parrot:#?}");
    assert!(matches!(parrot.last(), Some(CompanionEvent::Failed { .. })), "{parrot:#?}");
}

/// A reply that goes silent mid-stream is not asked for again: the server may still be
/// writing (and billing) it. The turn fails, says so, and stores nothing — one request,
/// as a scene's stalled speaker. (It was drawn three times.)
#[test]
fn a_reply_that_stalls_mid_stream_is_not_asked_for_again() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(|request, _| {
        if !OpenAi::is_endpoint(&request.target) {
            return Action::json(404, &OpenAi::error("no route"));
        }
        // The fragments, then silence: no stop, no [DONE].
        let events = OpenAi::stream(&["[Ilse Marrow]: ", "Well, ", "let me think"]);
        let bytes: Vec<u8> = events.iter().filter(|(_, fragment)| fragment.is_some()).map(|(e, _)| e.as_str()).collect::<String>().into_bytes();
        Action::event_stream(&bytes, 2, false, After::Stall)
    });
    let paths = setup(dir.path(), json!({ "rules": [] }), |c| {
        c.upsert_profile(ProviderProfile {
            name: "http".into(),
            kind: ProviderKind::Openai,
            base_url: Some(OpenAi::base_url(&server.url())),
            model: MODEL.into(),
            timeouts: Timeouts { connect_secs: 2.0, read_secs: 0.5, total_secs: 20.0 },
            retry: RetryPolicy { max_retries: 2, base_delay_ms: 10, max_delay_ms: 100 },
            ..Default::default()
        });
        c.roles.insert("companion".into(), "http".into());
    });
    let engine = engine::start(paths.clone()).unwrap();
    let events = send(&engine, "Hello there!", None);
    match events.last() {
        Some(CompanionEvent::Failed { message, .. }) => assert!(message.contains("did not answer within"), "{message}"),
        other => panic!("expected the turn to fail, got {other:#?}"),
    }
    assert_eq!(server.hits(), 1, "asked once");
    assert_eq!(counts(&paths).0, 0, "nothing stored");
}

/// A watched chat: what another process commits is said as `changed_elsewhere`, what this
/// engine does itself is not (its own events said it); an undo or a regenerate naming an
/// exchange that is no longer the last is refused and changes nothing, and the CLI's
/// `--expect` does the same.
#[test]
fn a_watched_chat_hears_another_process_and_a_stale_undo_or_regenerate_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let paths = setup(dir.path(), json!({ "default": "[Ilse Marrow]: Sit, then." }), |_| {});
    let engine = engine::start(paths.clone()).unwrap();
    engine.send(Command::Companion(CompanionCommand::Watch { character: Some(ILSE.into()) })).unwrap();
    let mine = committed(&send(&engine, "Evening, Ilse.", None));
    // Our own exchange is not news (the watch reads every two seconds).
    let quiet = Instant::now() + Duration::from_secs(5);
    while let Ok(event) = engine.events().recv_deadline(quiet) {
        assert!(!matches!(event, Event::Companion(CompanionEvent::ChangedElsewhere { .. })), "our own turn was reported as another process's");
    }
    let out = cli(&paths, &["chat", "send", "--character", ILSE, "From the terminal."]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let heard = until(&engine, |e| matches!(e, CompanionEvent::ChangedElsewhere { .. }));
    let id = match heard.last() {
        Some(CompanionEvent::ChangedElsewhere { character_id }) => character_id.clone(),
        other => panic!("{other:?}"),
    };
    assert!(id.is_some(), "the watched chat is named");
    assert_eq!(counts(&paths).0, 2);

    for command in [
        CompanionCommand::Undo { character: ILSE.into(), expect: Some(mine.id.clone()) },
        CompanionCommand::Regenerate { character: ILSE.into(), expect: Some(mine.id.clone()) },
    ] {
        engine.send(Command::Companion(command)).unwrap();
        let events = until(&engine, |e| matches!(e, CompanionEvent::Failed { .. } | CompanionEvent::Undone { .. } | CompanionEvent::Changed { .. }));
        match events.last() {
            Some(CompanionEvent::Failed { message, fault, .. }) => {
                assert!(message.contains("changed since you looked") && message.contains("reloaded"), "{message}");
                assert_eq!(*fault, lorekeeper::context::Fault::Conflict, "a conflict, not a bad request");
            }
            other => panic!("a stale command must be refused: {other:?}"),
        }
        until(&engine, |e| matches!(e, CompanionEvent::ChangedElsewhere { character_id: Some(_) }));
    }
    assert_eq!(counts(&paths).0, 2, "nothing was taken back");
    let out = cli(&paths, &["chat", "undo", "--character", ILSE, "--expect", &mine.id]);
    assert!(!out.status.success(), "the CLI's --expect refuses too");
    assert!(String::from_utf8_lossy(&out.stderr).contains("changed since you looked"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(counts(&paths).0, 2);
}

/// An Author's Note or a new chat written by another process reaches a watched chat, so
/// an open editor does not save its old copy over it.
#[test]
fn a_watched_chat_hears_a_note_and_a_new_chat_written_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let paths = setup(dir.path(), json!({ "default": "[Ilse Marrow]: Sit, then." }), |_| {});
    let engine = engine::start(paths.clone()).unwrap();
    engine.send(Command::Companion(CompanionCommand::Watch { character: Some(ILSE.into()) })).unwrap();
    committed(&send(&engine, "Evening, Ilse.", None));
    for args in [&["chat", "note", "--character", ILSE, "--text", "It is raining."][..], &["chat", "new", "--character", ILSE][..]] {
        let out = cli(&paths, args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let heard = until(&engine, |e| matches!(e, CompanionEvent::ChangedElsewhere { .. }));
        assert!(matches!(heard.last(), Some(CompanionEvent::ChangedElsewhere { character_id: Some(_) })), "{args:?}: {heard:?}");
    }
}

/// Session 18: every exchange stored its packet with its prompt two to three times over
/// (the messages, then each block cut from them, the outer blocks holding the inner ones
/// again) — ~69 KB per exchange on a tester's library. Now each block is kept as a span
/// of its message, the chats put aside keep them so too, and migration 0035 rewrites what
/// older versions stored; every reader gets the packet as it was sent.
#[test]
fn a_stored_exchange_keeps_its_prompt_once_and_reads_it_back_as_sent() {
    let dir = tempfile::tempdir().unwrap();
    let paths = setup(dir.path(), json!({ "rules": [], "default": "[Ilse Marrow]: The bells ring at noon, and the gulls answer." }), |_| {});
    let engine = engine::start(paths.clone()).unwrap();
    let sent = [
        committed(&send(&engine, "Tell me about the harbour bells.", Some("2026-11-21T12:00:00Z"))),
        committed(&send(&engine, "And who rings them in winter?", Some("2026-11-21T12:05:00Z"))),
    ];
    let character = sent[0].character_id.clone();
    let read_back = || {
        let store = Store::open(&paths.library_file).unwrap();
        let turns = store.with(|c| records::recent_turns(c, &character, 10, true)).unwrap();
        let raw: Vec<String> =
            store.with(|c| Ok(c.prepare("SELECT packet_json FROM companion_turns ORDER BY seq")?.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?)).unwrap();
        (turns.into_iter().map(|t| t.packet).collect::<Vec<_>>(), raw)
    };
    let stored_once = |raw: &[String]| {
        for (raw, turn) in raw.iter().zip(&sent) {
            let whole = serde_json::to_string(&turn.packet).unwrap();
            assert!(raw.len() * 10 < whole.len() * 6, "stored {} bytes of a {}-byte packet", raw.len(), whole.len());
            // The card's description is in the directive block, itself in the system message: once.
            let described = "A bookbinder";
            assert_eq!((whole.matches(described).count(), raw.matches(described).count()), (2, 1), "{raw}");
        }
    };
    let (packets, raw) = read_back();
    assert_eq!(packets, [sent[0].packet.clone(), sent[1].packet.clone()], "the packets read back are those sent");
    stored_once(&raw);

    // Put aside (a new chat) and played again: the same packets, kept once meanwhile too.
    engine.send(Command::Companion(CompanionCommand::NewChat { character: ILSE.into() })).unwrap();
    engine.send(Command::Companion(CompanionCommand::Chats { character: ILSE.into() })).unwrap();
    let saved = match until(&engine, |e| matches!(e, CompanionEvent::Chats { saved, .. } if !saved.is_empty())).pop() {
        Some(CompanionEvent::Chats { saved, .. }) => saved[0].id.clone(),
        other => panic!("{other:?}"),
    };
    let chat_json = || -> String {
        let store = Store::open(&paths.library_file).unwrap();
        store.with(|c| Ok(c.query_row("SELECT chat_json FROM companion_saved_chats WHERE id = ?1", [&saved], |r| r.get(0))?)).unwrap()
    };
    assert_eq!(chat_json().matches("A bookbinder").count(), 2, "one per exchange");
    engine.send(Command::Companion(CompanionCommand::Open { character: ILSE.into(), chat: saved.clone() })).unwrap();
    let opened = |e: &CompanionEvent| matches!(e, CompanionEvent::Changed { action, .. } if action.starts_with("opened")) || matches!(e, CompanionEvent::Failed { .. });
    assert!(matches!(until(&engine, opened).pop(), Some(CompanionEvent::Changed { .. })));
    assert_eq!(read_back().0, [sent[0].packet.clone(), sent[1].packet.clone()], "played again as sent");
    // A branch at the last message: the chat goes on with both exchanges, a copy is put aside.
    let message = format!("{}-r", sent[1].id);
    engine.send(Command::Companion(CompanionCommand::Branch { character: ILSE.into(), message })).unwrap();
    engine.send(Command::Companion(CompanionCommand::Chats { character: ILSE.into() })).unwrap();
    let saved = match until(&engine, |e| matches!(e, CompanionEvent::Chats { saved, .. } if !saved.is_empty())).pop() {
        Some(CompanionEvent::Chats { saved, .. }) => saved,
        other => panic!("{other:?}"),
    };
    drop(engine);

    // A library of an older version: whole packets, in the exchanges and in every chat
    // put aside. Migration 0035 keeps them once; they read back the same.
    let conn = rusqlite::Connection::open(&paths.library_file).unwrap();
    for turn in &sent {
        conn.execute("UPDATE companion_turns SET packet_json = ?2 WHERE id = ?1", [&turn.id, &serde_json::to_string(&turn.packet).unwrap()]).unwrap();
    }
    for chat in &saved {
        let text: String = conn.query_row("SELECT chat_json FROM companion_saved_chats WHERE id = ?1", [&chat.id], |r| r.get(0)).unwrap();
        let mut whole: serde_json::Value = serde_json::from_str(&text).unwrap();
        for stored in whole["turns"].as_array_mut().unwrap() {
            if let Some(turn) = sent.iter().find(|t| stored["id"] == t.id.as_str()) {
                stored["packet"] = serde_json::to_value(&turn.packet).unwrap();
            }
        }
        conn.execute("UPDATE companion_saved_chats SET chat_json = ?2 WHERE id = ?1", [&chat.id, &whole.to_string()]).unwrap();
    }
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    conn.pragma_update(None, "user_version", version - 1).unwrap();
    assert_eq!(read_back_old(&conn).iter().map(|r| r.matches("A bookbinder").count()).collect::<Vec<_>>(), [2, 2], "whole, as before");
    drop(conn);
    let (packets, raw) = read_back();
    assert_eq!(packets, [sent[0].packet.clone(), sent[1].packet.clone()]);
    stored_once(&raw);
    let conn = rusqlite::Connection::open(&paths.library_file).unwrap();
    for chat in &saved {
        let text: String = conn.query_row("SELECT chat_json FROM companion_saved_chats WHERE id = ?1", [&chat.id], |r| r.get(0)).unwrap();
        assert!(text.matches("A bookbinder").count() <= 2, "a saved chat's packets are kept once too: {text}");
    }
    drop(conn);
    // The saved chat played from its migrated shape: the same packets again.
    let engine = engine::start(paths.clone()).unwrap();
    engine.send(Command::Companion(CompanionCommand::Open { character: ILSE.into(), chat: saved[0].id.clone() })).unwrap();
    let events = until(&engine, opened);
    assert!(matches!(events.last(), Some(CompanionEvent::Changed { .. })), "{events:?}");
    let (packets, _) = read_back();
    assert!(packets.iter().all(|p| sent.iter().any(|t| &t.packet == p)), "played from the migrated saved chat as sent");
}

fn read_back_old(conn: &rusqlite::Connection) -> Vec<String> {
    conn.prepare("SELECT packet_json FROM companion_turns ORDER BY seq").unwrap().query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
}
