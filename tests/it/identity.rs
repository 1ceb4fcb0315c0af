//! The identity pipeline end to end, through the engine, on the scripted provider.

use lorekeeper::config::{Config, Paths};
use lorekeeper::engine::{self, Command, EngineHandle, Event};
use lorekeeper::identity::records::CheckpointStatus;
use lorekeeper::identity::schema::{CharacterSeed, Mode};
use lorekeeper::identity::{IdentityCommand, IdentityEvent, load_view};
use lorekeeper::llm::{ProviderKind, ProviderProfile};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/identity").join(name)
}

fn paths(dir: &Path, script: &str) -> Paths {
    let paths = Paths {
        config_file: dir.join("config.toml"),
        library_file: dir.join("library.sqlite"),
        log_dir: dir.join("logs"),
    };
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile {
        name: "script".into(),
        kind: ProviderKind::Scripted,
        model: "identity-script".into(),
        path: Some(data(script)),
        ..Default::default()
    });
    config.default_profile = "script".into();
    config.save(&paths.config_file).unwrap();
    paths
}

/// The shipped script with `rule` tried first, as the profile's script.
fn paths_with_first_rule(dir: &Path, rule: serde_json::Value) -> Paths {
    paths_with_first_rules(dir, vec![rule])
}

/// The shipped script with `rules` tried before its own.
fn paths_with_first_rules(dir: &Path, rules: Vec<serde_json::Value>) -> Paths {
    let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data("script.json")).unwrap()).unwrap();
    for (i, rule) in rules.into_iter().enumerate() {
        script["rules"].as_array_mut().unwrap().insert(i, rule);
    }
    let script_file = dir.join("first-rule.json");
    std::fs::write(&script_file, script.to_string()).unwrap();
    let paths = paths(dir, "script.json");
    let mut config = Config::load(&paths.config_file).unwrap();
    config.upsert_profile(ProviderProfile {
        name: "script".into(),
        kind: ProviderKind::Scripted,
        model: "identity-script".into(),
        path: Some(script_file),
        ..Default::default()
    });
    config.save(&paths.config_file).unwrap();
    paths
}

fn seed() -> CharacterSeed {
    CharacterSeed::parse(&std::fs::read_to_string(data("seed.json")).unwrap()).unwrap()
}

/// Collect events until `stop` says so; panics on timeout.
fn wait_for(engine: &EngineHandle, seen: &mut Vec<IdentityEvent>, mut stop: impl FnMut(&IdentityEvent) -> bool) -> IdentityEvent {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match engine.events().recv_timeout(left) {
            Ok(Event::Identity(e)) => {
                seen.push(e.clone());
                if let IdentityEvent::Error { checkpoint: None, message, .. } = &e {
                    panic!("pipeline error: {message}");
                }
                if stop(&e) {
                    return e;
                }
            }
            Ok(_) => {}
            Err(e) => panic!("no event in time: {e}; seen: {:?}", seen.iter().map(short).collect::<Vec<_>>()),
        }
    }
}

fn short(e: &IdentityEvent) -> String {
    serde_json::to_value(e).map(|v| v["event"].to_string()).unwrap_or_default()
}

fn start(engine: &EngineHandle, auto_approve: bool) -> String {
    engine
        .send(Command::Identity(IdentityCommand::Start { seed: seed(), entry_input: None, mode: Mode::Balanced, profile: None, auto_approve }))
        .unwrap();
    let mut seen = Vec::new();
    match wait_for(engine, &mut seen, |e| matches!(e, IdentityEvent::RunStarted { .. })) {
        IdentityEvent::RunStarted { character_id, .. } => character_id,
        _ => unreachable!(),
    }
}

fn idle(engine: &EngineHandle, id: &str) -> (Vec<u8>, Vec<u8>) {
    let mut seen = Vec::new();
    match wait_for(engine, &mut seen, |e| matches!(e, IdentityEvent::Idle { character_id, .. } if character_id == id)) {
        IdentityEvent::Idle { awaiting_approval, stale, failed, .. } => {
            assert!(failed.is_empty(), "failed checkpoints: {failed:?}");
            (awaiting_approval, stale)
        }
        _ => unreachable!(),
    }
}

/// Idle reports until one says `want` awaits approval (two agents that finish together
/// may both report the same idle state, so one report can be from just before the last
/// command); the stale ones at most a few.
fn idle_awaiting(engine: &EngineHandle, id: &str, want: &[u8]) -> Vec<u8> {
    let mut stale = Vec::new();
    for _ in 0..5 {
        let (awaiting, stale_now) = idle(engine, id);
        if awaiting == want {
            return stale_now;
        }
        stale.push(awaiting);
    }
    panic!("no idle report with {want:?} awaiting approval; saw {stale:?}");
}

fn send(engine: &EngineHandle, command: IdentityCommand) {
    engine.send(Command::Identity(command)).unwrap();
}

#[test]
fn a_full_run_reaches_character_complete_with_every_checkpoint_valid() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine::start(paths(dir.path(), "script.json")).unwrap();
    let id = start(&engine, true);
    let mut seen = Vec::new();
    wait_for(&engine, &mut seen, |e| matches!(e, IdentityEvent::CharacterComplete { .. }));
    let kinds: Vec<String> = seen.iter().map(short).collect();
    for wave in 1..=4u8 {
        assert!(seen.iter().any(|e| matches!(e, IdentityEvent::WaveStarted { wave: w, .. } if *w == wave)), "{kinds:?}");
    }
    // The predecessor's contract: three wave_complete, the last with next_wave "final".
    let completes: Vec<(u8, serde_json::Value)> = seen
        .iter()
        .filter_map(|e| match e {
            IdentityEvent::WaveComplete { wave, next_wave, .. } => Some((*wave, next_wave.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(completes, vec![(1, serde_json::json!(2)), (2, serde_json::json!(3)), (3, serde_json::json!("final"))], "{kinds:?}");
    assert_eq!(seen.iter().filter(|e| matches!(e, IdentityEvent::CheckpointReady { .. })).count(), 7);
    assert!(seen.iter().any(|e| matches!(e, IdentityEvent::Token { .. })), "agents stream tokens");

    let view = load_view(&engine.context().store, &id).unwrap();
    // The run's tokens are every version's, as billed.
    let billed: u64 = view.checkpoints.iter().flat_map(|cp| cp.versions.iter()).map(|v| u64::from(v.usage.prompt_tokens) + u64::from(v.usage.completion_tokens)).sum();
    let reported = seen.iter().find_map(|e| match e {
        IdentityEvent::CharacterComplete { total_tokens, .. } => Some(*total_tokens),
        _ => None,
    });
    assert_eq!(reported, Some(billed));
    for cp in &view.checkpoints {
        assert_eq!(cp.record.status, CheckpointStatus::Approved, "checkpoint {}", cp.record.number);
        let v = cp.versions.last().unwrap();
        let schema = cp.record.agent.output_schema();
        let doc = serde_json::json!({"narrative": v.narrative, "structured": v.structured});
        if cp.record.number < 7 {
            assert!(lorekeeper::llm::structured::validate(&schema, &doc).is_empty(), "checkpoint {} valid", cp.record.number);
        }
    }
    // The fenced reply with a trailing comma was repaired in one attempt...
    let personality = &view.checkpoints[0].versions[0];
    assert_eq!(personality.attempts.as_array().unwrap().len(), 1);
    assert!(!personality.attempts[0]["repairs"].as_array().unwrap().is_empty(), "{}", personality.attempts);
    // ...and the backstory that broke the schema was re-asked with the errors.
    let backstory = &view.checkpoints[1].versions[0];
    let attempts = backstory.attempts.as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert!(attempts[0]["errors"].to_string().contains("timeline"), "{}", attempts[0]);
    // Wave 2 agents read the approved wave 1.
    let voice = &view.checkpoints[2].versions[0];
    assert_eq!(voice.based_on.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
    assert!(voice.prompt.to_string().contains("guards the sea she dreads"));

    // The final profile is stored with the character, and the folder export matches the predecessor's.
    let profile = lorekeeper::identity::export::stored_profile(&engine.context().store, &id).unwrap().unwrap();
    assert_eq!(profile["overview"]["one_line"], "A keeper who guards the sea she fears.");
    assert_eq!(profile["psychology"]["fears"][1], "open water at night");
    assert_eq!(profile["metadata"]["total_checkpoints"], 7);
    let out = lorekeeper::identity::export::write_seed_folder(&view, Some(&profile), dir.path()).unwrap();
    for f in ["input.json", "metadata.json", "knowledge_base.json", "final_profile.json", "checkpoints/01_personality.json", "checkpoints/07_final_consolidation.json"] {
        assert!(out.join(f).is_file(), "{f}");
    }
    let cp1: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("checkpoints/01_personality.json")).unwrap()).unwrap();
    assert_eq!(cp1["checkpoint_number"], 1);
    assert_eq!(cp1["metadata"]["wave"], 1);
    assert!(cp1["output"]["structured"]["core_traits"].is_array());
    let meta: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("metadata.json")).unwrap()).unwrap();
    assert_eq!(meta["status"], "completed");
    assert_eq!(meta["completed_checkpoints"], 7);
    // The predecessor's words for where each agent is (approval is the checkpoint's).
    let kb: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("knowledge_base.json")).unwrap()).unwrap();
    let statuses = kb["agent_statuses"].as_object().unwrap();
    assert_eq!(statuses.len(), 7, "{kb}");
    assert!(statuses.values().all(|s| s["status"] == "completed"), "{kb}");
    assert_eq!(statuses["backstory_motivation"]["wave"], 1);
}

/// What the embedded model really returned (issue 18): schema-valid replies made of the
/// schema's own field names, placeholders, repeats, a one-line narrative that never
/// names the character, traits that are not traits, a profile under the name "role". Each is refused and re-asked,
/// and the refused replies stay in the checkpoint as attempts that say what was wrong.
#[test]
fn replies_of_field_names_and_placeholders_are_re_asked_and_kept_as_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let junk_personality = serde_json::json!({
        "narrative": "...",
        "structured": {
            "core_traits": ["fear", "secrets", "emotional_baseline", "triggers"],
            "fears": ["string", "string"],
            "secrets": ["<secret>", "one sentence summary"],
            "emotional_baseline": "emotional baseline",
            "triggers": ["triggers", "fears", "..."]
        }
    });
    let unnamed = serde_json::json!({
        "narrative": "She is a person with traits.",
        "structured": {
            "core_traits": ["stubborn", "she's a keeper", "Mira's logbook", "keeps the light burning every night", "Stubborn"],
            "fears": ["being forgotten", "open water at night"],
            "secrets": ["she let the last keeper's logbook burn", "she cannot swim"],
            "emotional_baseline": "watchful calm",
            "triggers": ["being pitied", "ships' bells", "lies about the sea"]
        }
    });
    let junk_overview = serde_json::json!({
        "narrative": "Character development complete. All aspects consolidated into a comprehensive profile.",
        "structured": {"overview": {"name": "role", "role": "role", "importance": 4, "one_line": "one sentence summary"}, "style_notes": "..."}
    });
    let script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data("script.json")).unwrap()).unwrap();
    let good = |system: &str| {
        script["rules"].as_array().unwrap().iter().find(|r| r["when"]["system_contains"] == system && r["when"].get("user_contains").is_none()).unwrap()["reply"]["text"].clone()
    };
    let paths = paths_with_first_rules(
        dir.path(),
        vec![
            serde_json::json!({ "when": { "system_contains": "Personality specialist" },
                "replies": [{"text": junk_personality.to_string()}, {"text": unnamed.to_string()}, {"text": good("Personality specialist")}] }),
            serde_json::json!({ "when": { "system_contains": "Final Consolidation specialist" },
                "replies": [{"text": junk_overview.to_string()}, {"text": good("Final Consolidation specialist")}] }),
        ],
    );
    let engine = engine::start(paths).unwrap();
    let id = start(&engine, true);
    let mut seen = Vec::new();
    wait_for(&engine, &mut seen, |e| matches!(e, IdentityEvent::CharacterComplete { .. }));
    let view = load_view(&engine.context().store, &id).unwrap();

    let personality = view.checkpoints[0].versions.last().unwrap();
    let attempts = personality.attempts.as_array().unwrap();
    assert_eq!(attempts.len(), 3, "{}", personality.attempts);
    let problems = |a: &serde_json::Value| -> Vec<String> {
        a["errors"].as_array().unwrap().iter().map(|e| format!("{} {}", e["path"].as_str().unwrap(), e["message"].as_str().unwrap())).collect()
    };
    assert_eq!(attempts[0]["failure"]["kind"], "content");
    let first = problems(&attempts[0]).join("\n");
    for expected in [
        "/narrative \"...\" is a placeholder",
        "/structured/core_traits/0 \"fear\" is the name of the field",
        "/structured/core_traits/2 \"emotional_baseline\" is the name of the field",
        "/structured/fears has 2 items that are all the same",
        "/structured/secrets/0 \"<secret>\" is a placeholder",
        "/structured/secrets/1 \"one sentence summary\" is a placeholder",
        "/narrative never names \"Mira Voss\"",
        "/narrative is 3 characters long",
    ] {
        assert!(first.contains(expected), "missing {expected:?} in:\n{first}");
    }
    let second = problems(&attempts[1]).join("\n");
    assert!(second.contains("/narrative never names \"Mira Voss\"") && second.contains("characters long"), "{second}");
    // Traits that are not traits: a sentence about her, her name, a ramble, a repeat.
    for expected in [
        "/structured/core_traits/1 \"she's a keeper\" is a sentence about someone, not a trait",
        "/structured/core_traits/2 \"Mira's logbook\" names the character",
        "/structured/core_traits/3 \"keeps the light burning every night\" is 6 words long",
        "/structured/core_traits/4 \"Stubborn\" is listed twice",
    ] {
        assert!(second.contains(expected), "missing {expected:?} in:\n{second}");
    }
    assert!(!second.contains("/structured/core_traits/0"), "{second}");
    assert!(attempts[2]["failure"].is_null());
    assert!(personality.narrative.contains("Mira Voss") && personality.narrative.len() >= 300, "{}", personality.narrative);

    let consolidation = view.checkpoints[6].versions.last().unwrap();
    let attempts = consolidation.attempts.as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{}", consolidation.attempts);
    let first = problems(&attempts[0]).join("\n");
    assert!(first.contains("/structured/overview/name is \"role\", but the character is \"Mira Voss\""), "{first}");
    assert!(first.contains("/structured/style_notes \"...\" is a placeholder"), "{first}");
    assert_eq!(consolidation.structured["overview"]["name"], "Mira Voss");
}

#[test]
fn rejection_regenerates_with_the_feedback_and_keeps_every_version() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine::start(paths(dir.path(), "script.json")).unwrap();
    let id = start(&engine, false);
    idle_awaiting(&engine, &id, &[1, 2]);
    // Approve in reverse order: any order is fine within a wave.
    send(&engine, IdentityCommand::Approve { character_id: id.clone(), checkpoint: 2 });
    idle_awaiting(&engine, &id, &[1]);
    let feedback = "She should be afraid of deep water, and it should show.";
    send(&engine, IdentityCommand::Reject { character_id: id.clone(), checkpoint: 1, feedback: feedback.into() });
    let mut seen = Vec::new();
    wait_for(&engine, &mut seen, |e| matches!(e, IdentityEvent::CheckpointReady { checkpoint_number: 1, version: 2, .. }));
    assert!(seen.iter().any(|e| matches!(e, IdentityEvent::CheckpointRejected { checkpoint_number: 1, .. })));
    let view = load_view(&engine.context().store, &id).unwrap();
    let versions = &view.checkpoints[0].versions;
    assert_eq!(versions.len(), 2);
    let prompt = versions[1].prompt.to_string();
    assert!(prompt.contains("afraid of deep water"), "the regenerated prompt carries the feedback");
    assert!(prompt.contains("keeps the lighthouse the way other people keep promises"), "and the rejected version");
    assert_eq!(versions[1].feedback.as_deref(), Some(feedback));
    assert_eq!(versions[1].structured["fears"][0], "deep water");
    assert_eq!(view.run.regenerations, 1);
    assert_eq!(view.checkpoints[0].record.status, CheckpointStatus::AwaitingApproval);
    // Wave 2 waits until checkpoint 1 is approved.
    assert!(view.checkpoints[2].versions.is_empty());
    send(&engine, IdentityCommand::Approve { character_id: id.clone(), checkpoint: 1 });
    let mut seen = Vec::new();
    wait_for(&engine, &mut seen, |e| matches!(e, IdentityEvent::WaveStarted { wave: 2, .. }));
}

#[test]
fn reopening_marks_later_checkpoints_that_used_it_stale() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine::start(paths(dir.path(), "script.json")).unwrap();
    let id = start(&engine, false);
    idle(&engine, &id);
    for n in [1, 2] {
        send(&engine, IdentityCommand::Approve { character_id: id.clone(), checkpoint: n });
    }
    let mut awaiting = idle(&engine, &id).0;
    while awaiting != vec![3, 4, 5] {
        awaiting = idle(&engine, &id).0;
    }
    send(&engine, IdentityCommand::Approve { character_id: id.clone(), checkpoint: 4 });
    idle_awaiting(&engine, &id, &[3, 5]);
    send(&engine, IdentityCommand::Reopen { character_id: id.clone(), checkpoint: 1 });
    let stale = idle_awaiting(&engine, &id, &[1]);
    assert_eq!(stale, vec![3, 4, 5]);
    // Keep one, re-run another once wave 1 is approved again.
    send(&engine, IdentityCommand::Approve { character_id: id.clone(), checkpoint: 1 });
    idle_awaiting(&engine, &id, &[]);
    send(&engine, IdentityCommand::Keep { character_id: id.clone(), checkpoint: 4 });
    idle_awaiting(&engine, &id, &[4]);
    send(&engine, IdentityCommand::Rerun { character_id: id.clone(), checkpoint: 3 });
    let mut seen = Vec::new();
    wait_for(&engine, &mut seen, |e| matches!(e, IdentityEvent::CheckpointReady { checkpoint_number: 3, version: 2, .. }));
    let view = load_view(&engine.context().store, &id).unwrap();
    assert_eq!(view.checkpoints[2].record.status, CheckpointStatus::AwaitingApproval);
    assert_eq!(view.checkpoints[3].record.status, CheckpointStatus::AwaitingApproval);
    assert_eq!(view.checkpoints[3].versions.len(), 1, "kept, not re-run");
    assert_eq!(view.checkpoints[4].record.status, CheckpointStatus::Stale);
}

/// Start a run in a child process with the slow script and kill it while wave 2's
/// agents run; returns the run's id.
fn killed_run(p: &Paths) -> String {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["--library", p.library_file.to_str().unwrap(), "--config", p.config_file.to_str().unwrap(), "--json"])
        .args(["identity", "start", "--seed", data("seed.json").to_str().unwrap(), "--auto-approve"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let stdout = child.stdout.take().unwrap();
    let mut id = String::new();
    for line in std::io::BufReader::new(stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        if v["event"] == "run_started" {
            id = v["character_id"].as_str().unwrap().to_string();
        }
        if v["event"] == "agent_started" && v["checkpoint"] == 3 {
            break;
        }
    }
    child.kill().unwrap();
    let _ = child.wait();
    id
}

/// The screenshot command's workbench never resumes an interrupted run (a picture must
/// not spend model calls); the workbench a person opens does.
#[test]
fn a_capture_leaves_an_interrupted_run_alone_and_the_workbench_resumes_it() {
    use lorekeeper::ui::WorkbenchApp;
    let dir = tempfile::tempdir().unwrap();
    let p = paths(dir.path(), "slow-script.json");
    let id = killed_run(&p);
    let working = |store: &lorekeeper::store::Store| load_view(store, &id).unwrap().checkpoints[2].record.status;
    let engine = engine::start(p.clone()).unwrap();
    let store = engine.context().store.clone();
    let mut harness = egui_kittest::Harness::builder()
        .with_max_steps(64)
        .with_size([1000.0, 700.0])
        .build_eframe(move |cc| WorkbenchApp::for_capture(&cc.egui_ctx, engine));
    for _ in 0..30 {
        harness.step();
        std::thread::sleep(Duration::from_millis(20));
    }
    let lines: Vec<String> = harness.state().log_lines().map(str::to_string).collect();
    assert!(!lines.iter().any(|l| l.contains("writing checkpoint")), "no agent was started: {lines:?}");
    assert_eq!(working(&store), CheckpointStatus::Running, "still as the dead process left it");
    assert_eq!(load_view(&store, &id).unwrap().checkpoints[2].versions.len(), 0);
    drop(harness);
    let engine = engine::start(p).unwrap();
    let store = engine.context().store.clone();
    let mut harness = egui_kittest::Harness::builder()
        .with_max_steps(64)
        .with_size([1000.0, 700.0])
        .build_eframe(move |cc| WorkbenchApp::new(&cc.egui_ctx, engine));
    let start = Instant::now();
    while load_view(&store, &id).unwrap().checkpoints[2].versions.is_empty() {
        assert!(start.elapsed() < Duration::from_secs(30), "the workbench resumes the run");
        harness.step();
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_killed_process_resumes_without_losing_approved_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let p = paths(dir.path(), "slow-script.json");
    let bin = env!("CARGO_BIN_EXE_lorekeeper");
    // Killed while wave 2's slow agents are running.
    let id = killed_run(&p);
    assert!(!id.is_empty());

    let store = lorekeeper::store::Store::open(&p.library_file).unwrap();
    let before = load_view(&store, &id).unwrap();
    assert_eq!(before.checkpoints[0].record.status, CheckpointStatus::Approved);
    assert_eq!(before.checkpoints[1].record.status, CheckpointStatus::Approved);
    assert!(before.checkpoints[2].record.status.is_working());
    drop(store);
    // Before the resume, the run says what happened and what to do, and approving the
    // checkpoint its dead process was running says the same.
    let cli = |args: &[&str]| {
        std::process::Command::new(bin)
            .args(["--library", p.library_file.to_str().unwrap(), "--config", p.config_file.to_str().unwrap()])
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let status = cli(&["identity", "status", &id]);
    let said = String::from_utf8_lossy(&status.stdout);
    assert!(said.contains("interrupted (running)") && said.contains(&format!("`identity resume {id}`")), "{said}");
    let refused = cli(&["identity", "approve", &id, "3"]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("checkpoint 3 was interrupted") && err.contains("identity resume"), "{err}");

    let out = std::process::Command::new(bin)
        .args(["--library", p.library_file.to_str().unwrap(), "--config", p.config_file.to_str().unwrap(), "--json"])
        .args(["identity", "resume", &id])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("character_complete"), "resume did not finish the run:\n{printed}");
    let store = lorekeeper::store::Store::open(&p.library_file).unwrap();
    let after = load_view(&store, &id).unwrap();
    assert!(after.checkpoints.iter().all(|c| c.record.status == CheckpointStatus::Approved));
    // What was approved before the kill is untouched: same single version.
    assert_eq!(after.checkpoints[0].versions, before.checkpoints[0].versions);
    assert_eq!(after.checkpoints[1].versions, before.checkpoints[1].versions);
}

#[test]
fn a_failed_agent_fails_the_run_with_the_predecessors_message_until_it_is_re_run() {
    let dir = tempfile::tempdir().unwrap();
    // The shipped script, with the personality agent refused by its server (a 400 is not
    // retried); the profile is pointed back at the shipped script before the re-run.
    let paths = paths_with_first_rule(
        dir.path(),
        serde_json::json!({ "when": { "system_contains": "Personality specialist" },
            "reply": { "fail": { "kind": "http", "status": 400, "message": "the model is overloaded" } } }),
    );
    let engine = engine::start(paths).unwrap();
    let id = start(&engine, false);
    let mut seen = Vec::new();
    let error = wait_for(&engine, &mut seen, |e| matches!(e, IdentityEvent::Error { checkpoint: Some(1), .. }));
    let IdentityEvent::Error { message, .. } = error else { unreachable!() };
    assert!(message.starts_with("Character development failed: "), "{message}");
    // The run says failed (what an export or `identity status` reports) and still idles.
    wait_for(&engine, &mut seen, |e| matches!(e, IdentityEvent::Idle { failed, .. } if failed.contains(&1)));
    let view = load_view(&engine.context().store, &id).unwrap();
    assert_eq!(view.run.status, lorekeeper::identity::records::RunStatus::Failed);
    // Re-run, the server fixed: in progress again, and the checkpoint comes back.
    let fixed = ProviderProfile {
        name: "script".into(),
        kind: ProviderKind::Scripted,
        model: "identity-script".into(),
        path: Some(data("script.json")),
        ..Default::default()
    };
    engine
        .send(Command::Llm(lorekeeper::engine::LlmCommand::SaveProfile { profile: fixed, previous_name: Some("script".into()) }))
        .unwrap();
    send(&engine, IdentityCommand::Rerun { character_id: id.clone(), checkpoint: 1 });
    let ready = wait_for(&engine, &mut seen, |e| {
        matches!(e, IdentityEvent::CheckpointReady { checkpoint_number: 1, .. } | IdentityEvent::Error { checkpoint: Some(1), .. })
    });
    assert!(matches!(ready, IdentityEvent::CheckpointReady { .. }), "{ready:?}");
    let view = load_view(&engine.context().store, &id).unwrap();
    assert_eq!(view.run.status, lorekeeper::identity::records::RunStatus::InProgress);
}

/// An agent the game master no longer wants is stopped mid-generation, from another
/// process (the CLI while the GUI runs it): the checkpoint waits for a re-run, the run
/// is not failed, and asking again when nothing runs says so.
#[test]
fn a_running_agent_is_cancelled_from_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths_with_first_rule(
        dir.path(),
        serde_json::json!({ "when": { "system_contains": "Personality specialist" }, "reply": { "text": "{}", "delay_ms": 60000 } }),
    );
    let engine = engine::start(paths.clone()).unwrap();
    let id = start(&engine, false);
    let mut seen = Vec::new();
    wait_for(&engine, &mut seen, |e| matches!(e, IdentityEvent::AgentStarted { checkpoint: 1, .. }));
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
            .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let started = Instant::now();
    let out = cli(&["identity", "cancel", &id, "--checkpoint", "1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("asked checkpoint(s) 1 to stop"));
    wait_for(&engine, &mut seen, |e| matches!(e, IdentityEvent::Cancelled { checkpoint: 1, .. }));
    assert!(started.elapsed() < Duration::from_secs(20), "stopped long before the 60 s reply: {:?}", started.elapsed());
    let view = load_view(&engine.context().store, &id).unwrap();
    assert_eq!(view.checkpoints[0].record.status, CheckpointStatus::Failed);
    assert!(view.checkpoints[0].record.error.as_deref().is_some_and(|e| e.contains("cancelled")), "{:?}", view.checkpoints[0].record.error);
    assert!(view.checkpoints[0].versions.is_empty(), "nothing of the cancelled draw is kept");
    assert_eq!(view.run.status, lorekeeper::identity::records::RunStatus::InProgress, "a cancel is not a failed run");
    assert!(!seen.iter().any(|e| matches!(e, IdentityEvent::Error { checkpoint: Some(1), .. })), "no failure reported");
    // Nothing runs any more: a second cancel says so.
    let again = cli(&["identity", "cancel", &id, "--checkpoint", "1"]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("checkpoint 1 is not running"), "{}", String::from_utf8_lossy(&again.stderr));
}

/// A checkpoint reads as running only once its agent can be cancelled: a Cancel sent the
/// moment the store (and so the workbench's inspector) says it runs stops it. The agent's job
/// used to be registered after its status was stored, so a Cancel in between was told
/// "checkpoint 1 is not running" and the agent ran on (the workbench's Cancel test failed so
/// on a loaded machine). The waker runs in the thread that emits, so it asks at the first
/// event after the status is stored, with that thread held until the answer comes.
#[test]
fn a_checkpoint_is_cancellable_from_the_moment_it_reads_as_running() {
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let paths = paths_with_first_rule(
        dir.path(),
        serde_json::json!({ "when": { "system_contains": "Personality specialist" }, "reply": { "text": "{}", "delay_ms": 60000 } }),
    );
    let engine = engine::start(paths).unwrap();
    let ctx = engine.context().clone();
    let reader = Mutex::new(ctx.store.reader().unwrap());
    let answer: Arc<Mutex<Option<Result<Vec<u8>, String>>>> = Arc::default();
    let told = answer.clone();
    engine.set_waker(move || {
        let mut told = told.lock().unwrap_or_else(|p| p.into_inner());
        if told.is_some() {
            return;
        }
        let running = {
            let conn = reader.lock().unwrap();
            let runs = lorekeeper::identity::records::list_runs(&conn).unwrap_or_default();
            runs.into_iter().find(|run| {
                lorekeeper::identity::records::checkpoints(&conn, &run.id)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.number == 1 && c.status.is_working())
            })
        };
        let Some(run) = running else { return };
        // Asked from another thread, so a store lock this thread held could not hang the test.
        let (tx, rx) = std::sync::mpsc::channel();
        let ctx = ctx.clone();
        std::thread::spawn(move || {
            let _ = tx.send(lorekeeper::identity::pipeline::cancel(&ctx, &run.id, Some(1)).map_err(|e| e.to_string()));
        });
        *told = Some(rx.recv_timeout(Duration::from_secs(10)).unwrap_or_else(|_| Err("no answer within 10 s".into())));
    });
    let id = start(&engine, false);
    let mut seen = Vec::new();
    wait_for(&engine, &mut seen, |e| matches!(e, IdentityEvent::AgentStarted { checkpoint: 1, .. }));
    assert_eq!(answer.lock().unwrap().clone(), Some(Ok(vec![1])), "the cancel found checkpoint 1's agent");
    wait_for(&engine, &mut seen, |e| matches!(e, IdentityEvent::Cancelled { checkpoint: 1, .. }));
    let view = load_view(&engine.context().store, &id).unwrap();
    assert_eq!(view.checkpoints[0].record.status, CheckpointStatus::Failed);
    assert!(view.checkpoints[0].versions.is_empty(), "nothing of the cancelled draw is kept");
    // The waker holds the context: let it go before the engine stops.
    engine.set_waker(|| {});
}

/// A run that has not finished has no character yet, and it is deleted all the same,
/// from the workbench (Waves → Delete run…, which deletes "the character") and from the
/// CLI while another process runs its agents: the agents are stopped and the run, its
/// checkpoints and versions are gone. Before, both said "not found: character …" and
/// the dead run stayed in every run list.
#[test]
fn an_unfinished_run_is_deleted_with_its_agents_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths_with_first_rule(
        dir.path(),
        serde_json::json!({ "when": { "system_contains": "Personality specialist" }, "reply": { "text": "{}", "delay_ms": 60000 } }),
    );
    let engine = engine::start(paths.clone()).unwrap();
    let runs = |engine: &EngineHandle| engine.context().store.with(lorekeeper::identity::records::list_runs).unwrap();

    // In the workbench's process, as its Delete button sends it.
    let first = start(&engine, false);
    let mut seen = Vec::new();
    wait_for(&engine, &mut seen, |e| matches!(e, IdentityEvent::AgentStarted { character_id, checkpoint: 1, .. } if *character_id == first));
    let started = Instant::now();
    engine
        .send(Command::Interop(lorekeeper::interop::InteropCommand::DeleteCharacter { character: first.clone(), confirmed: true }))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut deleted, mut cancelled) = (false, false);
    while !(deleted && cancelled) {
        match engine.events().recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Event::Interop(lorekeeper::interop::InteropEvent::CharacterDeleted { id, name, impact })) => {
                assert_eq!((id.as_str(), name.as_str()), (first.as_str(), seed().name.as_str()));
                assert_eq!(impact, vec!["its unfinished identity run".to_string()]);
                deleted = true;
            }
            Ok(Event::Identity(IdentityEvent::Cancelled { character_id, .. })) if character_id == first => cancelled = true,
            Ok(Event::Identity(IdentityEvent::Error { message, .. })) => panic!("the deletion reported an error: {message}"),
            Ok(Event::Core(lorekeeper::context::CoreEvent::Error { context, message })) => panic!("{context}: {message}"),
            Ok(_) => {}
            Err(e) => panic!("not deleted and stopped in time ({deleted}, {cancelled}): {e}"),
        }
    }
    assert!(started.elapsed() < Duration::from_secs(20), "the agent stopped long before its 60 s reply: {:?}", started.elapsed());
    assert!(runs(&engine).iter().all(|r| r.id != first), "the run is gone");
    assert!(load_view(&engine.context().store, &first).is_err());

    // From the CLI, while this process runs the agents: asked first, then deleted.
    let second = start(&engine, false);
    wait_for(&engine, &mut seen, |e| matches!(e, IdentityEvent::AgentStarted { character_id, checkpoint: 1, .. } if *character_id == second));
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
            .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let asked = cli(&["identity", "delete", &second]);
    assert!(!asked.status.success());
    assert_eq!(runs(&engine).len(), 1, "nothing is deleted without --yes");
    let out = cli(&["identity", "delete", &second, "--yes"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(runs(&engine).is_empty(), "the run is gone");
    wait_for(&engine, &mut seen, |e| matches!(e, IdentityEvent::Cancelled { character_id, checkpoint: 1 } if *character_id == second));
}

#[test]
fn the_game_master_edits_a_checkpoint_before_approving_it_and_a_broken_edit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = paths(dir.path(), "script.json");
    let bin = env!("CARGO_BIN_EXE_lorekeeper");
    let cli = |args: &[&str]| {
        std::process::Command::new(bin)
            .args(["--library", p.library_file.to_str().unwrap(), "--config", p.config_file.to_str().unwrap(), "--json"])
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    // Wave 1 runs and waits for approval.
    let started = cli(&["identity", "start", "--seed", data("seed.json").to_str().unwrap()]);
    assert!(started.status.success(), "{}", String::from_utf8_lossy(&started.stderr));
    let id = String::from_utf8_lossy(&started.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "run_started")
        .and_then(|v| v["character_id"].as_str().map(str::to_string))
        .expect("the run started");
    let edited = serde_json::json!({
        "core_traits": ["stubborn", "dry-humoured", "protective", "secretive"],
        "fears": ["being forgotten", "open water at night"],
        "secrets": ["she let the last keeper's logbook burn", "she cannot swim"],
        "emotional_baseline": "brittle cheer",
        "triggers": ["being pitied", "ships' bells", "lies about the sea"]
    });
    // Two traits are fewer than the schema's four: refused, with the field named.
    let mut broken = edited.clone();
    broken["core_traits"] = serde_json::json!(["stubborn", "kind"]);
    let refused = cli(&["identity", "edit", &id, "1", "--structured", &broken.to_string()]);
    assert!(!refused.status.success());
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(message.contains("structured.core_traits"), "{message}");
    let store = lorekeeper::store::Store::open(&p.library_file).unwrap();
    assert_eq!(load_view(&store, &id).unwrap().checkpoints[0].versions.len(), 1, "nothing was stored");

    let file = dir.path().join("edit.json");
    std::fs::write(&file, edited.to_string()).unwrap();
    let saved = cli(&["identity", "edit", &id, "1", "--structured", &format!("@{}", file.display()), "--narrative", "Mira hides fear under cheer."]);
    assert!(saved.status.success(), "{}", String::from_utf8_lossy(&saved.stderr));
    let view = load_view(&store, &id).unwrap();
    let cp = &view.checkpoints[0];
    assert_eq!((cp.record.current_version, cp.record.status), (2, CheckpointStatus::AwaitingApproval));
    // What the edit changed, line by line: the current version against the one before.
    let diff = cli(&["identity", "diff", &id, "1"]);
    assert!(diff.status.success(), "{}", String::from_utf8_lossy(&diff.stderr));
    let diff: serde_json::Value = serde_json::from_slice(&diff.stdout).unwrap();
    assert_eq!((diff["from"].as_u64(), diff["to"].as_u64()), (Some(1), Some(2)));
    let changed = |tag: &str| -> Vec<String> {
        diff["changes"].as_array().unwrap().iter().filter(|c| c["tag"] == tag).map(|c| c["line"].as_str().unwrap().to_string()).collect()
    };
    assert!(changed("insert").iter().any(|l| l.contains("Mira hides fear under cheer.")), "{diff}");
    assert!(changed("insert").iter().any(|l| l.contains("brittle cheer")), "{diff}");
    assert!(!changed("delete").is_empty(), "{diff}");
    let missing = cli(&["identity", "diff", &id, "1", "--from", "7"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no version 7 (it has 1, 2)"), "{}", String::from_utf8_lossy(&missing.stderr));
    let mine = &cp.versions[1];
    assert_eq!(mine.structured["emotional_baseline"], "brittle cheer");
    assert_eq!(mine.narrative, "Mira hides fear under cheer.");
    assert_eq!(mine.prompt["edited_by"], "game master");
    assert_eq!(cp.versions[0].structured["emotional_baseline"], "watchful calm", "the agent's version is kept");
    // Approved, the edit is what the character is made of.
    let approved = cli(&["identity", "approve", &id, "1"]);
    assert!(approved.status.success(), "{}", String::from_utf8_lossy(&approved.stderr));
    assert_eq!(load_view(&store, &id).unwrap().checkpoints[0].record.status, CheckpointStatus::Approved);
}

/// Point the "script" profile back at the shipped script (the server fixed).
fn fix_script(engine: &EngineHandle) {
    let fixed = ProviderProfile {
        name: "script".into(),
        kind: ProviderKind::Scripted,
        model: "identity-script".into(),
        path: Some(data("script.json")),
        ..Default::default()
    };
    engine
        .send(Command::Llm(lorekeeper::engine::LlmCommand::SaveProfile { profile: fixed, previous_name: Some("script".into()) }))
        .unwrap();
}

/// A failed checkpoint sent back with feedback is tried again like a re-run: the run is
/// in progress again (not failed through every later wave), and the retry is no
/// regeneration (there was no output to send back).
#[test]
fn a_failed_checkpoint_retried_with_feedback_puts_the_run_back_in_progress() {
    let dir = tempfile::tempdir().unwrap();
    let failing = paths_with_first_rule(
        dir.path(),
        serde_json::json!({ "when": { "system_contains": "Personality specialist" },
            "reply": { "fail": { "kind": "http", "status": 400, "message": "the model is overloaded" } } }),
    );
    let engine = engine::start(failing).unwrap();
    let id = start(&engine, false);
    let mut seen = Vec::new();
    wait_for(&engine, &mut seen, |e| matches!(e, IdentityEvent::Idle { failed, .. } if failed.contains(&1)));
    assert_eq!(load_view(&engine.context().store, &id).unwrap().run.status, lorekeeper::identity::records::RunStatus::Failed);
    fix_script(&engine);
    send(&engine, IdentityCommand::Reject { character_id: id.clone(), checkpoint: 1, feedback: "Try again, and make her afraid of deep water.".into() });
    let ready = wait_for(&engine, &mut seen, |e| {
        matches!(e, IdentityEvent::CheckpointReady { checkpoint_number: 1, .. } | IdentityEvent::Error { checkpoint: Some(1), .. })
    });
    assert!(matches!(ready, IdentityEvent::CheckpointReady { .. }), "{ready:?}");
    let view = load_view(&engine.context().store, &id).unwrap();
    assert_eq!(view.run.status, lorekeeper::identity::records::RunStatus::InProgress);
    assert_eq!(view.run.error, None);
    assert_eq!(view.run.regenerations, 0, "retrying a failed checkpoint is not a regeneration");
    assert_eq!(lorekeeper::identity::export::metadata(&view).status, "in_progress");
    // A real regeneration (an output sent back) still counts.
    send(&engine, IdentityCommand::Reject { character_id: id.clone(), checkpoint: 1, feedback: "Less brooding.".into() });
    wait_for(&engine, &mut seen, |e| matches!(e, IdentityEvent::CheckpointReady { checkpoint_number: 1, version: 2, .. }));
    assert_eq!(load_view(&engine.context().store, &id).unwrap().run.regenerations, 1);
    // The command line says so too, in words.
    let p = paths(dir.path(), "script.json");
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
            .args(["--library", p.library_file.to_str().unwrap(), "--config", p.config_file.to_str().unwrap()])
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let list = cli(&["identity", "list"]);
    assert!(list.contains(&id) && list.contains(" in progress ") && !list.contains("InProgress"), "{list}");
    assert!(cli(&["identity", "status", &id]).contains("in progress"));
}

/// An agent whose every attempt is refused fails its checkpoint, but the draw is kept: its
/// raw replies for the inspector, and its tokens in the run's total.
#[test]
fn a_failed_draw_keeps_its_refused_replies_and_its_tokens_count() {
    let dir = tempfile::tempdir().unwrap();
    let refused = serde_json::json!({ "narrative": "...", "structured": { "core_traits": ["string"] } });
    let paths = paths_with_first_rule(
        dir.path(),
        serde_json::json!({ "when": { "system_contains": "Personality specialist" }, "reply": { "text": refused.to_string() } }),
    );
    let engine = engine::start(paths).unwrap();
    let id = start(&engine, true);
    let mut seen = Vec::new();
    wait_for(&engine, &mut seen, |e| matches!(e, IdentityEvent::Idle { failed, .. } if failed.contains(&1)));
    let view = load_view(&engine.context().store, &id).unwrap();
    let personality = &view.checkpoints[0];
    assert_eq!(personality.record.status, CheckpointStatus::Failed);
    assert_eq!(personality.record.current_version, 0, "a failed draw is never put up for approval");
    assert_eq!(personality.versions.len(), 1, "the failed draw is kept");
    let failed = &personality.versions[0];
    assert!(failed.is_failed());
    let attempts = failed.attempts.as_array().unwrap();
    assert_eq!(attempts.len(), 3, "{}", failed.attempts);
    assert!(attempts.iter().all(|a| a["raw"].as_str().unwrap().contains("core_traits") && !a["failure"].is_null()));
    let failed_tokens = u64::from(failed.usage.total());
    assert!(failed_tokens > 0);
    // Fixed and re-run: the run completes, and its total counts the failed draw too.
    fix_script(&engine);
    send(&engine, IdentityCommand::Rerun { character_id: id.clone(), checkpoint: 1 });
    let done = wait_for(&engine, &mut seen, |e| matches!(e, IdentityEvent::CharacterComplete { .. }));
    let IdentityEvent::CharacterComplete { total_tokens, .. } = done else { unreachable!() };
    let view = load_view(&engine.context().store, &id).unwrap();
    let personality = &view.checkpoints[0];
    assert_eq!(personality.record.current_version, 2);
    assert!(!personality.versions[1].is_failed());
    let kept: u64 = view.checkpoints.iter().flat_map(|c| &c.versions).filter(|v| !v.is_failed()).map(|v| u64::from(v.usage.total())).sum();
    assert_eq!(total_tokens, kept + failed_tokens);
    let profile = lorekeeper::identity::export::stored_profile(&engine.context().store, &id).unwrap().unwrap();
    assert_eq!(profile["metadata"]["total_tokens"], total_tokens);
}

/// A developed character exported as a card is one a SillyTavern user can play: a
/// greeting of its own, the agents' narratives as its prose, every section with its own
/// separators; the seed's final profile stays exactly the seed's; the card imports back
/// and exports the same.
#[test]
fn a_developed_character_exports_as_a_card_with_its_narratives_and_a_greeting() {
    use lorekeeper::interop::library::{self, CardFormat, ImportOutcome};
    let dir = tempfile::tempdir().unwrap();
    let engine = engine::start(paths(dir.path(), "script.json")).unwrap();
    let id = start(&engine, true);
    let mut seen = Vec::new();
    wait_for(&engine, &mut seen, |e| matches!(e, IdentityEvent::CharacterComplete { .. }));
    let view = load_view(&engine.context().store, &id).unwrap();
    let narrative = |n: usize| view.checkpoints[n - 1].versions.last().unwrap().narrative.clone();
    let store = &engine.context().store;
    let exported = library::export_character(&store.reader().unwrap(), &id, CardFormat::CardV2, false).unwrap();
    let card: serde_json::Value = serde_json::from_slice(&exported.bytes).unwrap();
    let data = &card["data"];
    let description = data["description"].as_str().unwrap();
    let scenario = data["scenario"].as_str().unwrap();
    let first_mes = data["first_mes"].as_str().unwrap();
    assert!(description.contains(narrative(1).trim()), "the personality narrative: {description}");
    assert!(description.contains(narrative(2).trim()) && description.contains(narrative(4).trim()), "{description}");
    assert!(data["personality"].as_str().unwrap().contains(narrative(3).trim()));
    assert!(scenario.contains(narrative(5).trim()) && scenario.contains(narrative(6).trim()), "{scenario}");
    let profile = &data["extensions"]["lorekeeper"]["profile"];
    let scene = profile["narrative_arc"]["scene_presence"][0].as_str().unwrap();
    assert!(scenario.contains(&format!("Appears in: {scene}")), "{scenario}");
    let evolution = profile["relationships"][0]["evolution"].as_str().unwrap();
    assert!(scenario.contains(&format!("over the story, {evolution}")), "{scenario}");
    // The greeting: set in a scene of theirs, a habit of theirs, a line in their voice.
    let mut scene_words = scene.chars();
    let scene_opening: String = scene_words.next().unwrap().to_uppercase().chain(scene_words).collect();
    assert!(first_mes.starts_with(&format!("*{scene_opening}.")), "{first_mes}");
    let habit = profile["physical_presence"]["mannerisms"][0].as_str().unwrap();
    assert!(first_mes.contains(habit.trim_end_matches('.')), "{first_mes}");
    let line = profile["voice"]["sample_dialogue"]["confident"].as_str().unwrap();
    assert!(first_mes.ends_with(&format!("\"{}\"", line.trim().trim_matches('"'))), "{first_mes}");
    // The seed's final profile has no field of ours.
    let seed_profile = lorekeeper::identity::export::stored_profile(store, &id).unwrap().unwrap();
    assert!(seed_profile.get("narratives").is_none());
    assert_eq!(profile["narratives"]["personality"], narrative(1));
    // Imported back, it is a card character that exports the same card.
    let ImportOutcome::Created { items, .. } = library::import_bytes(store, &exported.bytes, "card").unwrap() else { panic!("not imported") };
    let again = library::export_character(&store.reader().unwrap(), &items[0].id, CardFormat::CardV2, false).unwrap();
    let again: serde_json::Value = serde_json::from_slice(&again.bytes).unwrap();
    assert_eq!(again, card);
}

/// A run started over HTTP whose server died mid-wave goes on when a server opens the
/// library again: an HTTP client has no resume of its own. (Its status said
/// `in_progress` for ever and approve answered 409.)
#[test]
fn a_server_resumes_a_run_its_dead_process_left_running() {
    let dir = tempfile::tempdir().unwrap();
    let p = paths(dir.path(), "slow-script.json");
    let id = killed_run(&p);
    let engine = engine::start(p).unwrap();
    let store = engine.context().store.clone();
    let server = lorekeeper::serve::start(
        engine,
        lorekeeper::serve::ServeOptions { addr: "127.0.0.1:0".parse().unwrap(), token: None, cors: None },
    )
    .unwrap();
    let start = Instant::now();
    while load_view(&store, &id).unwrap().checkpoints[2].versions.is_empty() {
        assert!(start.elapsed() < Duration::from_secs(60), "the server resumed the run");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(server);
}
