//! The scene engine end to end, through the engine, on the scripted provider and the
//! demo world.

use lorekeeper::config::{Config, Paths};
use lorekeeper::engine::{self, Command, EngineHandle, Event};
use lorekeeper::llm::{ProviderKind, ProviderProfile};
use lorekeeper::scene::model::SceneView;
use lorekeeper::scene::records;
use lorekeeper::scene::{SceneCommand, SceneEvent, demo};
use lorekeeper::store::Store;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scene").join(name)
}

fn write_config(paths: &Paths, script: &str) {
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile {
        name: "script".into(),
        kind: ProviderKind::Scripted,
        model: "scene-script".into(),
        path: Some(data(script)),
        ..Default::default()
    });
    config.default_profile = "script".into();
    // No embedding model in tests, whatever `models/` holds: memories by keyword.
    config.memory.embedding.model_dir = Some(paths.library_file.with_file_name("no-model"));
    config.save(&paths.config_file).unwrap();
}

/// A library with the demo scene and a log of every row write to the round's tables.
fn setup(dir: &Path, script: &str) -> (Paths, String) {
    let paths = Paths { config_file: dir.join("config.toml"), library_file: dir.join("library.sqlite"), log_dir: dir.join("logs") };
    write_config(&paths, script);
    let store = Store::open(&paths.library_file).unwrap();
    let scene = demo::ensure(&store).unwrap().unwrap();
    store
        .with(|c| {
            c.execute_batch(
                "CREATE TABLE write_log (tbl TEXT NOT NULL, row_key TEXT NOT NULL);
                 CREATE TRIGGER log_state_i AFTER INSERT ON scene_character_states BEGIN INSERT INTO write_log VALUES ('state', NEW.character_id); END;
                 CREATE TRIGGER log_state_u AFTER UPDATE ON scene_character_states BEGIN INSERT INTO write_log VALUES ('state', NEW.character_id); END;
                 CREATE TRIGGER log_campaign_i AFTER INSERT ON campaign_state BEGIN INSERT INTO write_log VALUES ('campaign', NEW.campaign_id); END;
                 CREATE TRIGGER log_campaign_u AFTER UPDATE ON campaign_state BEGIN INSERT INTO write_log VALUES ('campaign', NEW.campaign_id); END;
                 CREATE TRIGGER log_scene_u AFTER UPDATE ON scenes BEGIN INSERT INTO write_log VALUES ('scene', NEW.id); END;",
            )?;
            Ok(())
        })
        .unwrap();
    (paths, scene)
}

/// [`setup`] with a script of the test's own (written into `dir`).
fn setup_with_script(dir: &Path, script: &serde_json::Value) -> (Paths, String) {
    let script_file = dir.join("test-script.json");
    std::fs::write(&script_file, script.to_string()).unwrap();
    let (paths, scene) = setup(dir, "script.json");
    let mut config = Config::load(&paths.config_file).unwrap();
    config.upsert_profile(ProviderProfile { name: "script".into(), kind: ProviderKind::Scripted, model: "scene-script".into(), path: Some(script_file), ..Default::default() });
    config.save(&paths.config_file).unwrap();
    (paths, scene)
}

fn writes(store: &Store) -> Vec<(String, String)> {
    store
        .with(|c| {
            let mut stmt = c.prepare("SELECT tbl, row_key FROM write_log ORDER BY rowid")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
            Ok(rows)
        })
        .unwrap()
}

/// Events until `stop`; panics on a scene error or a timeout.
fn collect(engine: &EngineHandle, mut stop: impl FnMut(&SceneEvent) -> bool) -> Vec<SceneEvent> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match engine.events().recv_timeout(left) {
            Ok(Event::Scene(SceneEvent::Error { message, .. })) => panic!("scene error: {message}"),
            Ok(Event::Scene(e)) => {
                let done = stop(&e);
                seen.push(e);
                if done {
                    return seen;
                }
            }
            Ok(_) => {}
            Err(e) => panic!("no scene event in time ({e}); seen {} events", seen.len()),
        }
    }
}

fn round(engine: &EngineHandle, scene: &str, input: Option<&str>) -> Vec<SceneEvent> {
    engine.send(Command::Scene(SceneCommand::Round { scene: scene.into(), input: input.map(str::to_string), force: Vec::new(), review: false })).unwrap();
    collect(engine, |e| matches!(e, SceneEvent::RoundCompleted { .. }))
}

fn view(store: &Store, scene: &str) -> SceneView {
    store.with(|c| records::load_view(c, scene)).unwrap()
}

#[test]
fn a_round_activates_one_character_deactivates_another_and_plays_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    // The Harbour Seal stays for two messages once fired: its timer must be stored.
    Store::open(&paths.library_file)
        .unwrap()
        .with(|c| {
            c.execute("UPDATE lore_entries SET entry_json = json_set(entry_json, '$.sticky', 2) WHERE label = 'The Harbour Seal'", [])?;
            Ok(())
        })
        .unwrap();
    let engine = engine::start(paths).unwrap();
    let events = round(&engine, &scene, Some("I hand the keeper the sealed letter."));

    let order: Vec<&str> =
        events.iter().filter_map(|e| if let SceneEvent::CharacterStarted { name, .. } = e { Some(name.as_str()) } else { None }).collect();
    // Priority 5 first, then priority 1 by name.
    assert_eq!(order, ["Marguerite Siltborne", "Ossian Vale", "Wren Talloway"]);
    assert!(events.iter().any(|e| matches!(e, SceneEvent::Token { .. })), "characters stream");
    let passes: Vec<u8> =
        events.iter().filter_map(|e| if let SceneEvent::DirectorDecided { pass, .. } = e { Some(*pass) } else { None }).collect();
    assert_eq!(passes, [1, 2]);

    let store = &engine.context().store;
    let after = view(store, &scene);
    let active: Vec<&str> = after.active().map(|c| c.name.as_str()).collect();
    assert_eq!(active, ["Marguerite Siltborne", "Wren Talloway"], "Marguerite entered, Ossian left");
    assert_eq!(after.rounds, 1);
    let messages = store.with(|c| records::recent_messages(c, &scene, 100)).unwrap();
    let lines: Vec<(u32, u32, &str)> = messages.iter().map(|m| (m.number, m.round, m.speaker.as_str())).collect();
    assert_eq!(lines, [(1, 1, "Juno"), (2, 1, "Marguerite Siltborne"), (3, 1, "Ossian Vale"), (4, 1, "Wren Talloway"), (5, 1, "Narrator")]);
    assert_eq!(messages[4].kind, lorekeeper::scene::model::MessageKind::Narrator);
    let narrated: String =
        events.iter().filter_map(|e| if let SceneEvent::Token { character_id, text, .. } = e { (character_id == "narrator").then_some(text.as_str()) } else { None }).collect();
    assert_eq!(narrated, messages[4].content, "the narration streamed, after the characters");
    let narrator_at = events.iter().position(|e| matches!(e, SceneEvent::NarratorStarted { .. })).unwrap();
    let last_character = events.iter().rposition(|e| matches!(e, SceneEvent::CharacterFinished { .. })).unwrap();
    let pass_two = events.iter().position(|e| matches!(e, SceneEvent::DirectorDecided { pass: 2, .. })).unwrap();
    assert!(last_character < narrator_at && narrator_at < pass_two);
    assert!(!messages[3].content.contains("[location"), "state lines are not prose");

    let marguerite = after.member_by_name("Marguerite Siltborne").unwrap();
    assert_eq!(marguerite.state.location.as_deref(), Some("the lamp room door"), "pass 1 state");
    assert_eq!(marguerite.state.mood.as_deref(), Some("amused"), "her own delta, unchallenged");
    assert_eq!(marguerite.state.clothing.as_deref(), Some("without dripping oilskin coat"), "what her reply narrates, untagged");
    assert_eq!(after.member_by_name("Ossian Vale").unwrap().state.location.as_deref(), Some("the jetty"));
    assert_eq!(after.trackers["fog"], "lifting");
    assert_eq!(after.trackers["lamp_oil_hours"], 6, "trackers not named keep their value");
    assert_eq!(after.facts.len(), 2);
    assert_eq!(after.elapsed_minutes, 10);

    // Every call kept its ledger, and no section went over its allocation.
    let record = store.with(|c| records::load_round(c, &scene, 1)).unwrap().unwrap();
    let ledgers = record.ledgers.as_array().unwrap();
    let agents: Vec<&str> = ledgers.iter().map(|l| l["agent"].as_str().unwrap()).collect();
    assert_eq!(agents, ["director", "character", "character", "character", "narrator", "director (reconcile)"]);
    for call in ledgers {
        for section in call["ledger"]["sections"].as_array().unwrap() {
            assert!(section["used"].as_u64().unwrap() <= section["allocated"].as_u64().unwrap());
        }
    }
    let lore_kept = ledgers[0]["ledger"]["sections"].as_array().unwrap().iter().find(|s| s["section"] == "lore").unwrap()["kept"].clone();
    assert!(lore_kept.to_string().contains("The Harbour Seal (key \\\"letter\\\")"), "the user's 'letter' fired lore: {lore_kept}");
    let timers: String =
        store.with(|c| Ok(c.query_row("SELECT state_json FROM scene_lore_state WHERE scene_id = ?1 AND round = 1", [&scene], |r| r.get(0))?)).unwrap();
    let timers: serde_json::Value = serde_json::from_str(&timers).unwrap();
    let timer = timers["timers"].as_object().unwrap().values().next().expect("the sticky entry's timer is stored");
    assert_eq!(timer["sticky"]["end"].as_u64().unwrap(), timer["sticky"]["start"].as_u64().unwrap() + 2);
    assert_eq!(record.input.as_deref(), Some("I hand the keeper the sealed letter."));
}

#[test]
fn state_is_written_once_per_round() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    let engine = engine::start(paths).unwrap();
    let store = engine.context().store.clone();
    assert!(writes(&store).is_empty());
    round(&engine, &scene, Some("Hello?"));
    let first = writes(&store);
    let count = |w: &[(String, String)], table: &str| w.iter().filter(|(t, _)| t == table).count();
    assert_eq!(count(&first, "campaign"), 1);
    assert_eq!(count(&first, "scene"), 1);
    // Wren, Ossian and Marguerite all changed; each row written exactly once.
    let mut states: Vec<&str> = first.iter().filter(|(t, _)| t == "state").map(|(_, k)| k.as_str()).collect();
    assert_eq!(states.len(), 3);
    states.dedup();
    assert_eq!(states.len(), 3);

    round(&engine, &scene, None);
    let both = writes(&store);
    assert_eq!(count(&both, "campaign"), 2);
    assert_eq!(count(&both, "scene"), 2);
    assert_eq!(view(&store, &scene).rounds, 2);
}

#[test]
fn pass_two_overrides_a_conflicting_character_delta() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    let engine = engine::start(paths).unwrap();
    let events = round(&engine, &scene, Some("Will you put out the light?"));
    // Wren said she went out to the gallery; the Director says she is in the lamp room.
    let delta = events
        .iter()
        .find_map(|e| match e {
            SceneEvent::CharacterFinished { name, delta, .. } if name == "Wren Talloway" => Some(delta.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(delta.location.as_deref(), Some("the gallery"));
    let Some(SceneEvent::RoundCompleted { conflicts, .. }) = events.last() else { panic!("no round_completed") };
    assert_eq!(conflicts.len(), 1);
    assert_eq!((conflicts[0].field.as_str(), conflicts[0].character_value.as_str()), ("location", "the gallery"));
    let wren = view(&engine.context().store, &scene).member_by_name("Wren Talloway").unwrap().state.clone();
    assert_eq!(wren.location.as_deref(), Some("the lamp room"), "the Director wins");
    assert_eq!(wren.mood.as_deref(), Some("defiant"), "fields the Director left alone keep the character's delta");
    assert_eq!(wren.intentions.as_deref(), Some("keep the light burning"));
}

#[test]
fn one_director_pass_and_no_narrator_skip_reconciliation_and_narration() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    let mut config = Config::load(&paths.config_file).unwrap();
    config.scene.max_director_passes = 1;
    config.scene.narrator = false;
    config.save(&paths.config_file).unwrap();
    let engine = engine::start(paths).unwrap();
    let events = round(&engine, &scene, Some("Hello?"));
    assert_eq!(events.iter().filter(|e| matches!(e, SceneEvent::DirectorDecided { .. })).count(), 1);
    assert!(!events.iter().any(|e| matches!(e, SceneEvent::NarratorStarted { .. })));
    let messages = engine.context().store.with(|c| records::recent_messages(c, &scene, 100)).unwrap();
    assert!(messages.iter().all(|m| m.speaker != "Narrator"), "no narration when it is off");
    let wren = view(&engine.context().store, &scene).member_by_name("Wren Talloway").unwrap().state.clone();
    assert_eq!(wren.location.as_deref(), Some("the gallery"), "no pass 2: the character's delta stands");
}

#[test]
fn a_process_killed_mid_round_leaves_no_partial_round() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "slow-script.json");
    let before = {
        let store = Store::open(&paths.library_file).unwrap();
        view(&store, &scene)
    };
    let bin = env!("CARGO_BIN_EXE_lorekeeper");
    let mut child = std::process::Command::new(bin)
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap(), "--json"])
        .args(["scene", "round", &scene, "I hand the keeper the sealed letter."])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let stdout = child.stdout.take().unwrap();
    let mut streamed = false;
    for line in std::io::BufReader::new(stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        if v["event"] == "token" {
            streamed = true;
            break;
        }
        assert_ne!(v["event"], "round_completed", "the slow character should still be streaming");
    }
    child.kill().unwrap();
    let _ = child.wait();
    assert!(streamed, "killed before any character streamed");

    let store = Store::open(&paths.library_file).unwrap();
    assert_eq!(view(&store, &scene), before, "scene, states, trackers and facts untouched");
    assert!(store.with(|c| records::recent_messages(c, &scene, 100)).unwrap().is_empty());
    assert!(store.with(|c| records::load_round(c, &scene, 1)).unwrap().is_none());
    assert!(writes(&store).is_empty());
    let timers: i64 = store.with(|c| Ok(c.query_row("SELECT count(*) FROM scene_lore_state", [], |r| r.get(0))?)).unwrap();
    assert_eq!(timers, 0, "no lore timers of a killed round");
    let memories: i64 = store.with(|c| Ok(c.query_row("SELECT count(*) FROM memories", [], |r| r.get(0))?)).unwrap();
    assert_eq!(memories, 0, "no memories of a killed round");
    drop(store);

    // The next round is round 1 again, numbered from message 1.
    write_config(&paths, "script.json");
    let engine = engine::start(paths).unwrap();
    let events = round(&engine, &scene, Some("Sorry, where was I?"));
    let Some(SceneEvent::RoundCompleted { round, messages, .. }) = events.last() else { panic!() };
    assert_eq!((*round, messages[0].number), (1, 1));
}

/// A redo whose process is killed while the new round plays loses nothing: the next
/// engine on the library puts the round it had set aside back, messages, memories and all.
#[test]
fn a_process_killed_mid_redo_gets_its_round_back() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    {
        let engine = engine::start(paths.clone()).unwrap();
        round(&engine, &scene, Some("I hand the keeper the sealed letter."));
    }
    let (before, messages_before) = {
        let store = Store::open(&paths.library_file).unwrap();
        (view(&store, &scene), store.with(|c| records::recent_messages(c, &scene, 100)).unwrap())
    };
    assert_eq!(before.rounds, 1);
    write_config(&paths, "slow-script.json");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap(), "--json"])
        .args(["scene", "redo", &scene])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let stdout = child.stdout.take().unwrap();
    let mut streamed = false;
    for line in std::io::BufReader::new(stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        if v["event"] == "token" {
            streamed = true;
            break;
        }
    }
    child.kill().unwrap();
    let _ = child.wait();
    assert!(streamed, "killed while the redo's round streamed");
    assert_eq!(view(&Store::open(&paths.library_file).unwrap(), &scene).rounds, 0, "the dead redo had taken the round back");
    // The next process to open the library finds the round back in place.
    write_config(&paths, "script.json");
    let engine = engine::start(paths.clone()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let message = loop {
        match engine.events().recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Event::Scene(SceneEvent::RedoFailed { message, .. })) => break message,
            Ok(_) => {}
            Err(e) => panic!("no word of the redo: {e}"),
        }
    };
    assert!(message.contains("stopped before it finished"), "{message}");
    let store = &engine.context().store;
    assert_eq!(view(store, &scene), before);
    assert_eq!(store.with(|c| records::recent_messages(c, &scene, 100)).unwrap(), messages_before);
    // And the scene plays on from it.
    let events = round(&engine, &scene, Some("And then?"));
    assert!(matches!(events.last(), Some(SceneEvent::RoundCompleted { round: 2, .. })), "{:?}", events.last());
}

#[test]
fn the_cli_creates_a_scene_and_reports_state_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, _) = setup(dir.path(), "script.json");
    let bin = env!("CARGO_BIN_EXE_lorekeeper");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(bin)
            .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap(), "--json"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).collect::<Vec<_>>()
    };
    let created = run(&["scene", "new", "The Jetty", "--arc", "The Letter", "--cast", "Ossian Vale,Wren Talloway", "--active", "Ossian Vale"]);
    let id = created.last().unwrap()["scene_id"].as_str().unwrap().to_string();
    let state = run(&["scene", "state", &id]);
    let view = &state.last().unwrap()["view"];
    assert_eq!(view["name"], "The Jetty");
    let cast: Vec<(String, bool)> =
        view["cast"].as_array().unwrap().iter().map(|c| (c["name"].as_str().unwrap().to_string(), c["active"].as_bool().unwrap())).collect();
    assert_eq!(cast, [("Ossian Vale".to_string(), true), ("Wren Talloway".to_string(), false)]);
    assert_eq!(view["trackers"]["fog"], "thick");
    let listed = run(&["scene", "list"]);
    assert_eq!(listed.last().unwrap()["scenes"].as_array().unwrap().len(), 2);
}

#[test]
fn the_preview_refits_like_the_round_and_its_telemetry_sums_the_stored_ledgers() {
    use lorekeeper::prompting::Section;
    use lorekeeper::scene::envelope::AgentKind;
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    let engine = engine::start(paths).unwrap();
    round(&engine, &scene, Some("I hand the keeper the sealed letter."));

    engine.send(Command::Scene(SceneCommand::Snapshot { scene: scene.clone() })).unwrap();
    let events = collect(&engine, |e| matches!(e, SceneEvent::Snapshot { .. }));
    let Some(SceneEvent::Snapshot { snapshot }) = events.last() else { unreachable!() };
    let last = snapshot.last_round.as_ref().expect("the round is stored");
    assert_eq!(last.round, 1);
    assert!(!last.director.plan.acting_characters.is_empty());
    assert_eq!(snapshot.messages.iter().filter(|m| m.round == 1).count(), snapshot.messages.len());
    assert!(snapshot.messages.iter().any(|m| m.content == "I hand the keeper the sealed letter."));

    engine
        .send(Command::Scene(SceneCommand::Preview { scene: scene.clone(), agent: AgentKind::Character, character: Some("Wren Talloway".into()) }))
        .unwrap();
    let events = collect(&engine, |e| matches!(e, SceneEvent::Preview { .. }));
    let Some(SceneEvent::Preview { preview }) = events.last() else { unreachable!() };
    assert_eq!(preview.character.as_ref().map(|c| c.name.as_str()), Some("Wren Talloway"));
    assert!(preview.turn.contains("Wren Talloway"));
    assert!(!preview.candidates[&Section::History].is_empty(), "the round's messages are history now");

    // Re-fitting the candidates is what the round would do; a smaller context drops items.
    let full = preview.fit(&preview.plan, preview.max_context_tokens);
    let tight = preview.fit(&preview.plan, 256);
    assert!(tight.ledger.used() < full.ledger.used());
    assert!(tight.ledger.sections.iter().any(|s| !s.dropped.is_empty()));
    for s in &tight.ledger.sections {
        assert!(s.used <= s.allocated, "{:?}", s.section);
    }
    let prompt = preview.render(&full).expect("templates render");
    assert!(prompt.system.contains("I hand the keeper the sealed letter."));
    assert_eq!(prompt.user, preview.turn);

    // Telemetry: one point for the one round, equal to the sum of its calls' ledgers.
    assert_eq!(preview.telemetry.len(), 1);
    assert_eq!(preview.telemetry_messages as usize, snapshot.messages.len());
    let point = &preview.telemetry[0];
    for section in Section::ALL {
        let stored: u32 = last.ledgers.iter().filter_map(|c| c.ledger.section(section)).map(|s| s.used).sum();
        assert_eq!(point.used[&section], stored, "{section:?}");
    }
    assert!(point.used[&Section::CharacterGuidance] > 0);
}

#[test]
fn the_telemetry_window_counts_rounds_by_their_messages() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    let engine = engine::start(paths).unwrap();
    round(&engine, &scene, Some("I hand the keeper the sealed letter."));
    let conn = engine.context().store.reader().unwrap();
    let messages: u32 = conn.query_row("SELECT COUNT(*) FROM scene_messages WHERE scene_id = ?1", [&scene], |r| r.get(0)).unwrap();
    assert!(messages > 1);
    let (points, covered) = lorekeeper::scene::preview::telemetry(&conn, &scene, 1).unwrap();
    assert_eq!((points.len(), covered), (1, 1), "the newest message is in round 1");
    let (points, covered) = lorekeeper::scene::preview::telemetry(&conn, &scene, 500).unwrap();
    assert_eq!((points.len(), covered), (1, messages));
    // A stored round older than the window's first message is left out.
    let store = &engine.context().store;
    store
        .with(|c| {
            c.execute(
                "INSERT INTO scene_rounds(scene_id, round, input, director_json, ledgers_json, tokens, created_at)
                 VALUES (?1, 0, NULL, '{}', '[]', 0, '')",
                [&scene],
            )?;
            Ok(())
        })
        .unwrap();
    let (points, _) = lorekeeper::scene::preview::telemetry(&conn, &scene, 1).unwrap();
    assert_eq!(points.iter().map(|p| p.round).collect::<Vec<_>>(), [1]);
    let (points, _) = lorekeeper::scene::preview::telemetry(&conn, &scene, 500).unwrap();
    assert_eq!(points.iter().map(|p| p.round).collect::<Vec<_>>(), [0, 1], "a window wider than the scene takes every round");
}

#[test]
fn a_character_recalls_only_the_rounds_it_witnessed() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "memory-script.json");
    // Round 1 is still in round 2's recent messages: recalled here only because skipping
    // the newest is turned off (the next test has it on).
    let mut config = Config::load(&paths.config_file).unwrap();
    config.scene.recall_skips_newest = 0;
    config.save(&paths.config_file).unwrap();
    let engine = engine::start(paths).unwrap();
    round(&engine, &scene, Some("I lost the brass key somewhere in the lighthouse."));
    let store = &engine.context().store;
    // Round 1 is remembered by the two characters present, not by Marguerite.
    let witnesses: Vec<(String, String)> = store
        .with(|c| {
            let mut stmt = c.prepare(
                "SELECT m.id, group_concat(w.witness, ',') FROM memories m JOIN memory_witnesses w ON w.memory_rowid = m.rowid
                 GROUP BY m.rowid ORDER BY m.seq",
            )?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
            Ok(rows)
        })
        .unwrap();
    assert_eq!(witnesses.len(), 3, "the user's line, Wren's and the narration: {witnesses:?}");
    for (id, names) in &witnesses {
        assert!(id.starts_with(&format!("scene:{scene}:")), "{id}");
        let mut names: Vec<&str> = names.split(',').collect();
        names.sort();
        assert_eq!(names, ["Ossian Vale", "Wren Talloway"]);
    }

    let events = round(&engine, &scene, Some("Where did you say the brass key was?"));
    assert!(matches!(events.last(), Some(SceneEvent::RoundCompleted { round: 2, .. })));
    let injected = |agent: &str| -> Vec<String> {
        let hits: String = store
            .with(|c| Ok(c.query_row("SELECT hits FROM memory_injections WHERE agent = ?1", [agent], |r| r.get(0))?))
            .unwrap();
        let hits: serde_json::Value = serde_json::from_str(&hits).unwrap();
        hits.as_array().unwrap().iter().map(|h| h["text"].as_str().unwrap().to_string()).collect()
    };
    let wren = injected("scene:character:Wren Talloway");
    assert!(wren.iter().any(|t| t.contains("third step")), "Wren was there: {wren:?}");
    assert!(wren.iter().any(|t| t.contains("I lost the brass key")), "{wren:?}");
    assert_eq!(injected("scene:character:Marguerite Siltborne"), Vec::<String>::new(), "Marguerite was not there in round 1");

    // Wren's call in round 2 carried the memories in its envelope, and says how they were found.
    let record = store.with(|c| records::load_round(c, &scene, 2)).unwrap().unwrap();
    let calls = record.ledgers.as_array().unwrap();
    let wren_call = calls.iter().find(|l| l["character"] == "Wren Talloway").unwrap();
    let memories = wren_call["ledger"]["sections"].as_array().unwrap().iter().find(|s| s["section"] == "memories").unwrap();
    assert!(!memories["kept"].as_array().unwrap().is_empty(), "{memories}");
    assert!(wren_call["notes"].to_string().contains("keyword only"), "the fallback is in the ledger: {}", wren_call["notes"]);
    // Round 2's lines are remembered by all three now present.
    let round_two: i64 = store
        .with(|c| {
            Ok(c.query_row(
                "SELECT count(*) FROM memories m WHERE m.id LIKE ?1 AND (SELECT count(*) FROM memory_witnesses w WHERE w.memory_rowid = m.rowid) = 3",
                [format!("scene:{scene}:%")],
                |r| r.get(0),
            )?)
        })
        .unwrap();
    assert_eq!(round_two, 4, "user, Wren, Marguerite and the narration of round 2");
}

/// The lines the prompt's recent messages already show are not spent again as memories.
#[test]
fn lines_the_prompt_already_shows_are_not_recalled_as_memories() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "memory-script.json");
    let engine = engine::start(paths).unwrap();
    round(&engine, &scene, Some("I lost the brass key somewhere in the lighthouse."));
    round(&engine, &scene, Some("Where did you say the brass key was?"));
    let store = &engine.context().store;
    let hits: String = store
        .with(|c| Ok(c.query_row("SELECT hits FROM memory_injections WHERE agent = 'scene:character:Wren Talloway'", [], |r| r.get(0))?))
        .unwrap();
    let hits: serde_json::Value = serde_json::from_str(&hits).unwrap();
    assert_eq!(hits.as_array().map(Vec::len), Some(0), "round 1 is in the recent messages, not recalled again: {hits}");
    // And Wren's prompt has round 1 all the same.
    let calls = store.with(|c| lorekeeper::llm::calls::recent(c, 50)).unwrap();
    let wren = calls.iter().rev().filter(|c| c.request.messages.iter().any(|m| m.content.contains("You are playing Wren Talloway"))).last().unwrap();
    let sent: String = wren.request.messages.iter().map(|m| m.content.as_str()).collect();
    assert!(sent.contains("under the third step"), "{sent}");
}

/// A backlog longer than the summariser's context is folded in chunks, oldest first,
/// each prompt with its reply's cap within the context, the summary carried along.
#[test]
fn the_summariser_folds_a_long_backlog_in_chunks_that_fit_its_context() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    let mut config = Config::load(&paths.config_file).unwrap();
    let mut profile = config.profiles.iter().find(|p| p.name == "script").unwrap().clone();
    profile.max_context_tokens = 1500;
    config.upsert_profile(profile);
    config.save(&paths.config_file).unwrap();
    let store = Store::open(&paths.library_file).unwrap();
    // Twelve rounds of three long lines: about 3,000 tokens of transcript.
    store
        .transaction(|tx| {
            let mut number = 0;
            for round in 1..=12u32 {
                for speaker in ["Juno", "Wren Talloway", "Narrator"] {
                    number += 1;
                    let content = format!("BACKLOG-{round} {}", "the lamp turns and the fog presses at the glass ".repeat(6));
                    tx.execute(
                        "INSERT INTO scene_messages(id, scene_id, number, round, kind, character_id, speaker, content, created_at)
                         VALUES (?1, ?2, ?3, ?4, 'character', NULL, ?5, ?6, '2026-11-01T00:00:00Z')",
                        rusqlite::params![format!("m{number}"), scene, number, round, speaker, content],
                    )?;
                }
            }
            tx.execute("UPDATE scenes SET rounds = 12 WHERE id = ?1", [&scene])?;
            Ok(())
        })
        .unwrap();
    let engine = engine::start(paths).unwrap();
    let covered = lorekeeper::scene::summary::summarise(engine.context(), &scene, 11, &lorekeeper::llm::CancelToken::new()).unwrap();
    assert_eq!(covered, Some(11));
    let store = &engine.context().store;
    assert_eq!(store.with(|c| Ok(lorekeeper::scene::summary::current(c, &scene).unwrap())).unwrap().1, 11);
    let calls = store.with(|c| lorekeeper::llm::calls::recent(c, 100)).unwrap();
    let mut summariser: Vec<_> = calls.iter().filter(|c| c.agent == "summariser").collect();
    summariser.reverse();
    assert!(summariser.len() >= 2, "a backlog this long takes more than one call: {}", summariser.len());
    let profile = engine.context().config().profile_for_role("summariser").unwrap().clone();
    let cap = lorekeeper::llm::client::planned_reply_cap(&profile, &lorekeeper::llm::ResponseFormat::Text);
    for call in &summariser {
        let prompt = lorekeeper::llm::tokens::estimate_messages(&call.request.messages);
        assert!(prompt + cap <= 1500, "prompt {prompt} + reply {cap} passes the context");
    }
    // Oldest first, each round once, the summary carried into the next chunk.
    let sent: Vec<String> = summariser.iter().map(|c| c.request.messages[0].content.clone()).collect();
    assert!(sent[0].contains("BACKLOG-1 ") && !sent[0].contains("Previous summary"), "{}", sent[0]);
    assert!(sent[1].contains("Previous summary") && !sent[1].contains("BACKLOG-1 "), "{}", sent[1]);
    for round in 1..=11 {
        assert_eq!(sent.iter().filter(|s| s.contains(&format!("BACKLOG-{round} "))).count(), 1, "round {round}");
    }
    assert!(!sent.iter().any(|s| s.contains("BACKLOG-12 ")), "the last round stays verbatim");
}

#[test]
fn the_summariser_folds_older_rounds_and_history_starts_after_them() {
    use lorekeeper::prompting::Section;
    use lorekeeper::scene::envelope::AgentKind;
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    let mut config = Config::load(&paths.config_file).unwrap();
    config.scene.summarise_every = 2;
    config.save(&paths.config_file).unwrap();
    let engine = engine::start(paths).unwrap();
    let first = round(&engine, &scene, Some("I hand the keeper the sealed letter."));
    assert!(!first.iter().any(|e| matches!(e, SceneEvent::SummaryUpdated { .. })));
    round(&engine, &scene, Some("What does it say?"));
    let after = collect(&engine, |e| matches!(e, SceneEvent::SummaryUpdated { .. } | SceneEvent::SummaryFailed { .. }));
    assert!(matches!(after.last(), Some(SceneEvent::SummaryUpdated { through_round: 1, .. })), "{after:?}");

    let store = &engine.context().store;
    let (summary, through) = store.with(|c| Ok(lorekeeper::scene::summary::current(c, &scene).unwrap())).unwrap();
    assert_eq!(through, 1, "everything but the last round");
    assert!(summary.contains("sealed letter"), "{summary}");
    // Idempotent: the same rounds are not summarised twice.
    let again = lorekeeper::scene::summary::summarise(engine.context(), &scene, 1, &lorekeeper::llm::CancelToken::new()).unwrap();
    assert_eq!(again, None);

    let conn = store.reader().unwrap();
    let recall = lorekeeper::scene::recall::Recall::none();
    let preview =
        lorekeeper::scene::preview::preview(&conn, &engine.context().config(), &scene, AgentKind::Director, None, &recall).unwrap();
    let history: Vec<&str> = preview.candidates[&Section::History].iter().map(|i| i.id.as_str()).collect();
    let round_two: Vec<String> = store
        .with(|c| records::recent_messages(c, &scene, 100))
        .unwrap()
        .iter()
        .filter(|m| m.round == 2)
        .map(|m| format!("message {}", m.number))
        .collect();
    assert_eq!(history, round_two, "round 1 is told by the summary only");
    let summaries = &preview.candidates[&Section::Summaries];
    assert!(summaries.iter().any(|i| i.text.contains("through round 1") && i.text.contains("sealed letter")), "{summaries:?}");
}

#[test]
fn a_cancelled_round_commits_nothing_and_the_next_round_plays() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "slow-script.json");
    let before = view(&Store::open(&paths.library_file).unwrap(), &scene);
    let engine = engine::start(paths.clone()).unwrap();
    engine.send(Command::Scene(SceneCommand::Round { scene: scene.clone(), input: Some("I hand over the letter.".into()), force: Vec::new(), review: false })).unwrap();
    collect(&engine, |e| matches!(e, SceneEvent::Token { .. }));
    // By name, as the CLI and tests may say it.
    engine.send(Command::Scene(SceneCommand::Cancel { scene: "The Lamp Room".into() })).unwrap();
    let events = collect(&engine, |e| matches!(e, SceneEvent::RoundCancelled { .. } | SceneEvent::RoundCompleted { .. }));
    assert!(matches!(events.last(), Some(SceneEvent::RoundCancelled { scene_id }) if *scene_id == scene), "{:?}", events.last());

    let store = &engine.context().store;
    assert_eq!(view(store, &scene), before, "scene, states, trackers and facts untouched");
    assert!(store.with(|c| records::recent_messages(c, &scene, 100)).unwrap().is_empty());
    assert!(writes(store).is_empty());
    let count = |table: &str| -> i64 { store.with(|c| Ok(c.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))?)).unwrap() };
    assert_eq!((count("memories"), count("memory_injections"), count("scene_lore_state"), count("scene_rounds")), (0, 0, 0, 0));

    // The scene is free again: the next round plays and is round 1.
    drop(engine);
    write_config(&paths, "script.json");
    let engine = engine::start(paths).unwrap();
    let events = round(&engine, &scene, Some("Sorry, where was I?"));
    assert!(matches!(events.last(), Some(SceneEvent::RoundCompleted { round: 1, .. })));
}

#[test]
fn the_world_agent_owns_trackers_and_time_when_on() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    let mut config = Config::load(&paths.config_file).unwrap();
    config.scene.world_agent = true;
    config.save(&paths.config_file).unwrap();
    let before = view(&Store::open(&paths.library_file).unwrap(), &scene);
    let engine = engine::start(paths).unwrap();
    let events = round(&engine, &scene, Some("I hand the keeper the sealed letter."));
    let world_at = events.iter().position(|e| matches!(e, SceneEvent::WorldDecided { .. })).expect("the world agent ran");
    let pass_two = events.iter().position(|e| matches!(e, SceneEvent::DirectorDecided { pass: 2, .. })).unwrap();
    assert!(world_at < pass_two, "pass 2 sees the world's trackers");

    let store = &engine.context().store;
    let after = view(store, &scene);
    assert_eq!(after.trackers["tide"], "high");
    assert_eq!(after.trackers["lamp_oil_hours"], 5);
    assert_eq!(after.trackers.get("fog"), before.trackers.get("fog"), "pass 2's tracker change is not applied");
    assert!(!after.trackers.contains_key("tension"));
    assert_eq!(after.elapsed_minutes, before.elapsed_minutes + 30, "the world's minutes, not pass 2's");
    assert_eq!(after.facts.len(), 2, "pass 2 still records facts");
    assert_eq!(after.member_by_name("Ossian Vale").unwrap().state.location.as_deref(), Some("the jetty"), "and states");
    let record = store.with(|c| records::load_round(c, &scene, 1)).unwrap().unwrap();
    assert_eq!(record.director["world"]["elapsedMinutes"], 30);
    let reconcile = record.ledgers.as_array().unwrap().iter().find(|l| l["agent"] == "director (reconcile)").unwrap();
    assert!(reconcile["notes"].to_string().contains("World agent owns them"), "{reconcile}");
}

#[test]
fn undo_puts_the_scene_back_exactly_and_mute_and_force_overrule_the_director() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    let bin = env!("CARGO_BIN_EXE_lorekeeper");
    let run = |args: &[&str]| -> Vec<serde_json::Value> {
        let out = std::process::Command::new(bin)
            .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap(), "--json"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let store = Store::open(&paths.library_file).unwrap();
    let lore_state = |store: &Store| -> Option<String> {
        store.with(|c| Ok(c.query_row("SELECT state_json FROM scene_lore_state WHERE scene_id = ?1", [&scene], |r| r.get(0)).ok())).unwrap()
    };
    let memories = |store: &Store| -> i64 { store.with(|c| Ok(c.query_row("SELECT count(*) FROM memories", [], |r| r.get(0))?)).unwrap() };
    let before = view(&store, &scene);
    let (lore_before, memories_before) = (lore_state(&store), memories(&store));

    let played = run(&["scene", "round", &scene, "I hand the keeper the sealed letter."]);
    assert!(played.iter().any(|e| e["event"] == "round_completed"));
    let after = view(&store, &scene);
    assert_ne!(after, before, "the round changed the scene");
    assert!(memories(&store) > memories_before);

    run(&["scene", "undo", &scene]);
    assert_eq!(view(&store, &scene), before, "states, active set, trackers, facts and time as before the round");
    assert_eq!(lore_state(&store), lore_before, "lore timers as before");
    assert_eq!(memories(&store), memories_before, "the round's memories are gone");
    let messages = store.with(|c| records::recent_messages(c, &scene, 100)).unwrap();
    assert!(messages.is_empty(), "{messages:?}");
    assert!(
        std::process::Command::new(bin)
            .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap(), "scene", "undo", &scene])
            .output()
            .unwrap()
            .status
            .code()
            != Some(0),
        "nothing left to undo"
    );

    // Muted, Marguerite is not picked though the Director names her; forced, she acts.
    run(&["scene", "mute", &scene, "Marguerite Siltborne"]);
    let state = std::process::Command::new(bin)
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap(), "scene", "state", &scene])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&state.stdout).contains("Marguerite Siltborne (muted)"), "scene state says who is muted");
    let muted = run(&["scene", "round", &scene, "Who is at the door?"]);
    let speakers = |events: &[serde_json::Value]| -> Vec<String> {
        let done = events.iter().find(|e| e["event"] == "round_completed").unwrap();
        done["messages"].as_array().unwrap().iter().map(|m| m["speaker"].as_str().unwrap().to_string()).collect()
    };
    assert!(!speakers(&muted).contains(&"Marguerite Siltborne".to_string()), "{:?}", speakers(&muted));
    // Forced by a word of her name; someone not in the cast stops the round before it starts.
    let nobody = std::process::Command::new(bin)
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
        .args(["scene", "round", &scene, "Let her speak.", "--force", "Nobody Here"])
        .output()
        .unwrap();
    assert_ne!(nobody.status.code(), Some(0));
    let said = String::from_utf8_lossy(&nobody.stderr);
    assert!(said.contains("\"Nobody Here\" is not in this scene's cast") && said.contains("Marguerite Siltborne"), "{said}");
    let rounds = view(&store, &scene).rounds;
    let forced = run(&["scene", "round", &scene, "Let her speak.", "--force", "Marguerite"]);
    assert_eq!(view(&store, &scene).rounds, rounds + 1, "only the round with a known name played");
    assert!(speakers(&forced).contains(&"Marguerite Siltborne".to_string()), "{:?}", speakers(&forced));
    run(&["scene", "unmute", &scene, "Marguerite Siltborne"]);
    assert!(!view(&store, &scene).cast.iter().any(|c| c.muted));
    // Someone in the library but not in this scene cannot be muted in it.
    store
        .with(|c| {
            c.execute(
                "INSERT INTO characters(id, name, origin, created_at, updated_at) VALUES ('outsider', 'Pell Outsider', 'manual', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')",
                [],
            )?;
            Ok(())
        })
        .unwrap();
    let refused = std::process::Command::new(bin)
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap(), "scene", "mute", &scene, "Pell Outsider"])
        .output()
        .unwrap();
    assert_ne!(refused.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("not in the scene's cast"), "{}", String::from_utf8_lossy(&refused.stderr));

    // A transcript message edited by hand, and the memory it became with it.
    let first = store.with(|c| records::recent_messages(c, &scene, 100)).unwrap()[0].clone();
    run(&["scene", "edit", &scene, "--message", &first.number.to_string(), "I knock twice and wait."]);
    let edited = store.with(|c| records::recent_messages(c, &scene, 100)).unwrap()[0].clone();
    assert_eq!(edited.content, "I knock twice and wait.");
    let memory = store.with(|c| lorekeeper::memory::records::get(c, &format!("scene:{scene}:{}", first.number))).unwrap();
    assert_eq!(memory.map(|m| m.text), Some("I knock twice and wait.".to_string()));
    // A message taken out: gone from the transcript and from memory; the rest keep their numbers.
    let before: Vec<u32> = store.with(|c| records::recent_messages(c, &scene, 100)).unwrap().iter().map(|m| m.number).collect();
    run(&["scene", "delete-message", &scene, &first.number.to_string()]);
    let after: Vec<u32> = store.with(|c| records::recent_messages(c, &scene, 100)).unwrap().iter().map(|m| m.number).collect();
    assert_eq!(after, before[1..].to_vec());
    assert!(store.with(|c| lorekeeper::memory::records::get(c, &format!("scene:{scene}:{}", first.number))).unwrap().is_none(), "its memory went");
    let again = std::process::Command::new(bin)
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
        .args(["scene", "delete-message", &scene, &first.number.to_string()])
        .output()
        .unwrap();
    assert_ne!(again.status.code(), Some(0), "a message already gone");
    assert!(String::from_utf8_lossy(&again.stderr).contains("not found"), "{}", String::from_utf8_lossy(&again.stderr));
}

#[test]
fn the_director_reconciles_until_a_pass_changes_nothing_or_n_passes_were_made() {
    let reconcile_calls = |passes: u32| -> usize {
        let dir = tempfile::tempdir().unwrap();
        let (paths, scene) = setup(dir.path(), "script.json");
        let mut config = Config::load(&paths.config_file).unwrap();
        config.scene.max_director_passes = passes;
        config.save(&paths.config_file).unwrap();
        let engine = engine::start(paths.clone()).unwrap();
        let events = round(&engine, &scene, Some("I hand over the letter."));
        let passes_seen = events.iter().filter(|e| matches!(e, SceneEvent::DirectorDecided { pass, .. } if *pass >= 2)).count();
        let store = Store::open(&paths.library_file).unwrap();
        let stored = store.with(|c| records::load_round(c, &scene, 1)).unwrap().expect("round 1");
        let ledgers = serde_json::to_value(&stored).unwrap()["ledgers"].clone();
        let calls = ledgers.as_array().unwrap().iter().filter(|l| l["agent"] == "director (reconcile)").count();
        assert_eq!(calls, passes_seen, "every pass is in the ledger and was announced");
        calls
    };
    // The script's reconciliation is the same every time: pass 2 changes trackers and
    // facts, pass 3 finds nothing left to change, so no pass 4 is asked for.
    assert_eq!(reconcile_calls(0), 0);
    assert_eq!(reconcile_calls(1), 0);
    assert_eq!(reconcile_calls(2), 1);
    assert_eq!(reconcile_calls(3), 2);
    assert_eq!(reconcile_calls(6), 2);
}

#[test]
fn redo_keeps_the_old_round_to_switch_back_to_and_a_failed_redo_puts_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    // Wren's line is whatever the script says when her round is played (a client reads
    // the script when a round starts): the test changes it between rounds.
    let script_file = dir.path().join("redo-script.json");
    let wren_says = |reply: serde_json::Value| {
        let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data("script.json")).unwrap()).unwrap();
        let wren = script["rules"].as_array_mut().unwrap().iter_mut().find(|r| r["name"] == "Wren").unwrap();
        wren["reply"] = reply;
        std::fs::write(&script_file, script.to_string()).unwrap();
    };
    wren_says(serde_json::json!({ "text": "Wren reads the letter twice. \"The light stays lit.\"\n[mood: defiant]" }));
    let mut config = Config::load(&paths.config_file).unwrap();
    config.upsert_profile(ProviderProfile { name: "script".into(), kind: ProviderKind::Scripted, model: "redo".into(), path: Some(script_file.clone()), ..Default::default() });
    config.save(&paths.config_file).unwrap();

    let engine = engine::start(paths.clone()).unwrap();
    let store = engine.context().store.clone();
    let wren_said = |store: &Store| -> Vec<String> {
        store.with(|c| records::recent_messages(c, &scene, 100)).unwrap().into_iter().filter(|m| m.speaker == "Wren Talloway").map(|m| m.content).collect()
    };
    let memory_of = |store: &Store, words: &str| -> i64 {
        store.with(|c| Ok(c.query_row("SELECT count(*) FROM memories WHERE text LIKE ?1", [format!("%{words}%")], |r| r.get(0))?)).unwrap()
    };
    round(&engine, &scene, Some("I hand the keeper the sealed letter."));
    let first_view = view(&store, &scene);
    assert_eq!(wren_said(&store), ["Wren reads the letter twice. \"The light stays lit.\""]);

    // The redo's draw fails: the round is back exactly as it was, memories and all.
    wren_says(serde_json::json!({ "fail": { "kind": "http", "status": 400, "message": "the model refused" } }));
    engine.send(Command::Scene(SceneCommand::Redo { scene: scene.clone() })).unwrap();
    let events = collect(&engine, |e| matches!(e, SceneEvent::Alternatives { .. }));
    assert!(events.iter().any(|e| matches!(e, SceneEvent::RedoFailed { round: 1, .. })), "{events:?}");
    assert_eq!(view(&store, &scene), first_view);
    assert_eq!(wren_said(&store), ["Wren reads the letter twice. \"The light stays lit.\""]);
    assert_eq!(memory_of(&store, "light stays lit"), 1);
    assert!(matches!(events.last(), Some(SceneEvent::Alternatives { alternatives, .. }) if alternatives.is_empty()));

    // Redo again: a new version of round 1 from the same input; the old one is kept.
    wren_says(serde_json::json!({ "text": "Wren tears the letter in half without a word.\n[mood: furious]" }));
    engine.send(Command::Scene(SceneCommand::Redo { scene: scene.clone() })).unwrap();
    let events = collect(&engine, |e| matches!(e, SceneEvent::Alternatives { .. }));
    assert!(events.iter().any(|e| matches!(e, SceneEvent::RoundCompleted { round: 1, .. })), "{events:?}");
    assert_eq!(wren_said(&store), ["Wren tears the letter in half without a word."]);
    assert_eq!(view(&store, &scene).cast.iter().find(|c| c.name == "Wren Talloway").unwrap().state.mood.as_deref(), Some("furious"));
    assert_eq!((memory_of(&store, "light stays lit"), memory_of(&store, "tears the letter")), (0, 1), "only the round being played is remembered");
    let Some(SceneEvent::Alternatives { alternatives, .. }) = events.last() else { panic!() };
    assert_eq!(alternatives.len(), 1);
    assert!(alternatives[0].preview.contains("The light stays lit"), "{:?}", alternatives[0]);
    let old = alternatives[0].id.clone();
    drop(engine);

    // Switch back from the command line: the first version whole, the second kept.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap(), "--json"])
        .args(["scene", "use-alternative", &scene, &old])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let store = Store::open(&paths.library_file).unwrap();
    assert_eq!(view(&store, &scene), first_view, "states, trackers, facts and time as the first version left them");
    assert_eq!(wren_said(&store), ["Wren reads the letter twice. \"The light stays lit.\""]);
    assert_eq!((memory_of(&store, "light stays lit"), memory_of(&store, "tears the letter")), (1, 0));
    let kept = store.with(|c| lorekeeper::scene::alternatives::list(c, &scene)).unwrap();
    assert_eq!(kept.len(), 1);
    assert!(kept[0].preview.contains("tears the letter"));
    // And the swapped-in round undoes like any other.
    let undo = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap(), "scene", "undo", &scene])
        .output()
        .unwrap();
    assert!(undo.status.success(), "{}", String::from_utf8_lossy(&undo.stderr));
    assert_eq!(view(&store, &scene).rounds, 0);
}

#[test]
fn the_game_master_edits_the_directors_plan_before_anyone_acts() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap(), "--json"])
        .args(["scene", "round", &scene, "I hand the keeper the sealed letter.", "--review"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read events until the plan is shown; answer with an edited plan: only Wren acts.
    use std::io::{BufRead, Write};
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut events = Vec::new();
    let plan = loop {
        let line = lines.next().expect("the round shows its plan").unwrap();
        let event: serde_json::Value = serde_json::from_str(&line).unwrap();
        events.push(event.clone());
        if event["event"] == "plan_review" {
            break event["plan"].clone();
        }
        assert_ne!(event["event"], "character_started", "nobody acts before the plan is back");
    };
    assert_eq!(plan["actingCharacters"].as_array().unwrap().len(), 3, "{plan}");
    let mut edited = plan.clone();
    edited["actingCharacters"] = serde_json::json!([{ "name": "Wren Talloway", "guidance": "Say nothing about the letter yet.", "priority": 1 }]);
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{edited}").unwrap();
    drop(stdin);
    for line in lines {
        events.push(serde_json::from_str(&line.unwrap()).unwrap());
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "{:?}", events.last());
    let done = events.iter().find(|e| e["event"] == "round_completed").expect("the round completed");
    let speakers: Vec<&str> = done["messages"].as_array().unwrap().iter().map(|m| m["speaker"].as_str().unwrap()).collect();
    assert!(speakers.contains(&"Wren Talloway"), "{speakers:?}");
    assert!(!speakers.contains(&"Ossian Vale") && !speakers.contains(&"Marguerite Siltborne"), "only whom the game master kept acts: {speakers:?}");
    // The round's record keeps both: the plan played and the Director's own.
    let store = Store::open(&paths.library_file).unwrap();
    let record = store.with(|c| records::load_round(c, &scene, 1)).unwrap().unwrap();
    assert_eq!(record.director["plan"]["actingCharacters"][0]["guidance"], "Say nothing about the letter yet.");
    assert_eq!(record.director["proposed"]["actingCharacters"].as_array().unwrap().len(), 3);
    // Who acted, entered and left, under the predecessor's names.
    let flags = &record.director["flags"];
    assert_eq!(flags["Wren Talloway"]["hasActedThisRound"], true, "{flags}");
    assert_eq!((flags["Marguerite Siltborne"]["enteredThisRound"].as_bool(), flags["Marguerite Siltborne"]["hasActedThisRound"].as_bool()), (Some(true), Some(false)));
    assert_eq!(flags["Ossian Vale"]["exitedThisRound"], true, "{flags}");
}

/// A character the game master forces shows in the plan under review as `forced`, with
/// no priority of the Director's (it read as -2147483648), in the predecessor's field
/// names; the round record says the same, and a round stored with the old sentinel is
/// read as forced.
#[test]
fn a_forced_speaker_is_marked_forced_not_ranked_at_the_lowest_number() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    let args = ["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap(), "--json"];
    let muted = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper")).args(args).args(["scene", "mute", &scene, "Marguerite Siltborne"]).output().unwrap();
    assert!(muted.status.success(), "{}", String::from_utf8_lossy(&muted.stderr));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(args)
        .args(["scene", "round", &scene, "Let her speak.", "--force", "Marguerite", "--review"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::{BufRead, Write};
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut said = String::new();
    let plan = loop {
        let line = lines.next().expect("the round shows its plan").unwrap();
        said.push_str(&line);
        let event: serde_json::Value = serde_json::from_str(&line).unwrap();
        if event["event"] == "plan_review" {
            break event["plan"].clone();
        }
    };
    let acting = plan["actingCharacters"].as_array().unwrap();
    let her = acting.iter().find(|a| a["name"] == "Marguerite Siltborne").unwrap_or_else(|| panic!("forced in: {plan}"));
    assert_eq!((her["forced"].as_bool(), her["priority"].as_i64()), (Some(true), Some(0)), "{her}");
    assert!(acting.iter().filter(|a| a["name"] != "Marguerite Siltborne").all(|a| a.get("forced").is_none()), "only she was forced: {plan}");
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin).unwrap();
    drop(stdin);
    for line in lines {
        said.push_str(&line.unwrap());
    }
    assert!(child.wait().unwrap().success(), "{said}");
    assert!(!said.contains("-2147483648"), "no sentinel number anywhere: {said}");
    let store = Store::open(&paths.library_file).unwrap();
    let record = store.with(|c| records::load_round(c, &scene, 1)).unwrap().unwrap();
    let stored = record.director["plan"]["actingCharacters"].as_array().unwrap().iter().find(|a| a["name"] == "Marguerite Siltborne").cloned().unwrap();
    assert_eq!((stored["forced"].as_bool(), stored["priority"].as_i64()), (Some(true), Some(0)), "{stored}");

    // A round an older version stored: the sentinel priority, no flag.
    store
        .with(|c| {
            let json: String = c.query_row("SELECT director_json FROM scene_rounds WHERE scene_id = ?1 AND round = 1", [&scene], |r| r.get(0))?;
            let old = json.replace(r#""priority":0,"order":null,"forced":true"#, r#""priority":-2147483648,"order":null"#);
            assert_ne!(old, json, "the record as an older version wrote it");
            c.execute("UPDATE scene_rounds SET director_json = ?2 WHERE scene_id = ?1 AND round = 1", rusqlite::params![scene, old])?;
            Ok(())
        })
        .unwrap();
    let record = store.with(|c| records::load_round(c, &scene, 1)).unwrap().unwrap();
    let stored = record.director["plan"]["actingCharacters"].as_array().unwrap().iter().find(|a| a["name"] == "Marguerite Siltborne").cloned().unwrap();
    assert_eq!((stored["forced"].as_bool(), stored["priority"].as_i64()), (Some(true), Some(0)), "{stored}");
}

/// The Director plan contract names characters `{id|name}`: a plan sent back with
/// `--review` may name a cast member by id, in its lists and its `stateUpdates` keys;
/// the round plays and records it under the member's name.
#[test]
fn a_reviewed_plan_may_name_characters_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    let wren = view(&Store::open(&paths.library_file).unwrap(), &scene).cast.iter().find(|m| m.name == "Wren Talloway").unwrap().id.clone();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap(), "--json"])
        .args(["scene", "round", &scene, "I hand the keeper the sealed letter.", "--review"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::{BufRead, Write};
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let line = lines.next().expect("the round shows its plan").unwrap();
        let event: serde_json::Value = serde_json::from_str(&line).unwrap();
        if event["event"] == "plan_review" {
            break;
        }
    }
    let plan = serde_json::json!({
        "actingCharacters": [{ "id": wren, "guidance": "Say nothing about the letter yet.", "priority": 1 }],
        "stateUpdates": { wren.clone(): { "mood": "guarded" } },
    });
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{plan}").unwrap();
    drop(stdin);
    let events: Vec<serde_json::Value> = lines.map(|l| serde_json::from_str(&l.unwrap()).unwrap()).collect();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{} {:?}", String::from_utf8_lossy(&out.stderr), events.last());
    let done = events.iter().find(|e| e["event"] == "round_completed").expect("the round completed");
    let speakers: Vec<&str> = done["messages"].as_array().unwrap().iter().map(|m| m["speaker"].as_str().unwrap()).collect();
    assert!(speakers.contains(&"Wren Talloway") && !speakers.contains(&"Ossian Vale"), "{speakers:?}");
    let store = Store::open(&paths.library_file).unwrap();
    let record = store.with(|c| records::load_round(c, &scene, 1)).unwrap().unwrap();
    assert_eq!(record.director["plan"]["actingCharacters"][0]["name"], "Wren Talloway", "{}", record.director["plan"]);
    assert!(record.director["plan"]["stateUpdates"].get("Wren Talloway").is_some(), "{}", record.director["plan"]);
}

/// A `vectorized` World Info entry of the campaign fires in a round when the recent
/// messages are close to it in meaning (no key in them), measured with the real
/// embedding model; the ledger says how close.
#[test]
fn a_vectorized_lore_entry_fires_on_meaning_in_a_round() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    // The real model this time (setup's config searches by keyword only).
    let mut config = Config::load(&paths.config_file).unwrap();
    config.memory.embedding = Default::default();
    config.save(&paths.config_file).unwrap();
    let book = serde_json::json!({ "entries": {
        "0": { "uid": 0, "key": [], "content": "A letter sealed in green wax comes only from the harbour council, and always brings bad news.", "comment": "Council letters", "vectorized": true },
        "1": { "uid": 1, "key": [], "content": "Honey cakes are baked on the first day of spring.", "comment": "Spring cakes", "vectorized": true }
    } });
    let store = Store::open(&paths.library_file).unwrap();
    lorekeeper::interop::library::import_bytes(&store, book.to_string().as_bytes(), "harbour-vectors").unwrap();
    drop(store);
    let attached = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
        .args(["lorebook", "attach", "harbour-vectors", "--campaign", "The Unlit Night"])
        .env("LOREKEEPER_MODELS_DIR", Path::new(env!("CARGO_MANIFEST_DIR")).join("models"))
        .output()
        .unwrap();
    assert!(attached.status.success(), "{}", String::from_utf8_lossy(&attached.stderr));
    let engine = engine::start(paths).unwrap();
    round(&engine, &scene, Some("I hand the keeper a letter sealed with green wax from the council."));
    let store = &engine.context().store;
    let record = store.with(|c| records::load_round(c, &scene, 1)).unwrap().unwrap();
    let kept: String = record.ledgers.as_array().unwrap()[0]["ledger"]["sections"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["section"] == "lore")
        .map(|s| s["kept"].to_string())
        .collect();
    assert!(kept.contains("Council letters") && kept.contains("vector similarity"), "the Director's lore: {kept}");
    assert!(!kept.contains("Spring cakes"), "far in meaning: out: {kept}");
}

/// What the embedded model really did in a demo round (issue 18): a Director plan that
/// named `state_update` as its characters, a character that recited its own card, a
/// Narrator that repeated its instruction. The plan is refused and re-asked with the
/// cast's names; each copying draw is thrown away (the front doors are told) and drawn
/// again; the round that is saved has real characters speaking.
#[test]
fn a_plan_naming_nobody_real_is_re_asked_and_copied_prose_is_drawn_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data("script.json")).unwrap()).unwrap();
    let rules = script["rules"].as_array_mut().unwrap();
    let junk_plan = serde_json::json!({
        "actingCharacters": [
            {"name": "state_update", "guidance": "guidance", "priority": 1},
            {"name": "state_update", "guidance": "guidance", "priority": 1}
        ],
        "stateUpdates": {"state_update": {"mood": "mood"}}
    });
    for rule in rules.iter_mut() {
        let name = rule["name"].as_str().unwrap_or_default().to_string();
        let original = rule["reply"].take();
        let first = match name.as_str() {
            "director pass 1" => serde_json::json!({"json": junk_plan}),
            "Wren" => serde_json::json!({"text": "Keeper of the Saltmarsh lighthouse, fifties, weathered hands, a brass spyglass always on a cord."}),
            "narrator" => serde_json::json!({"text": "In two to four sentences, tell what the scene around them looks, sounds and feels like now."}),
            _ => {
                rule["reply"] = original;
                continue;
            }
        };
        rule["replies"] = serde_json::json!([first, original]);
        rule.as_object_mut().unwrap().remove("reply");
    }
    let (paths, scene) = setup_with_script(dir.path(), &script);
    let engine = engine::start(paths).unwrap();
    let events = round(&engine, &scene, Some("I hand the keeper the sealed letter."));
    let plans: Vec<&lorekeeper::scene::model::DirectorPlan> = events
        .iter()
        .filter_map(|e| match e {
            SceneEvent::DirectorDecided { pass: 1, decision: lorekeeper::scene::DirectorDecision::Plan(p), .. } => Some(&**p),
            _ => None,
        })
        .collect();
    assert_eq!(plans.len(), 1);
    assert!(plans[0].acting_characters.iter().any(|a| a.name == "Wren Talloway"), "{:?}", plans[0]);
    let redrawn: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match e {
            SceneEvent::Redrawn { character_id, reason, .. } => Some((character_id.clone(), reason.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(redrawn.len(), 2, "{redrawn:?}");
    assert!(redrawn[0].1.contains("copied") && redrawn[0].1.contains("keeper of the saltmarsh lighthouse"), "{redrawn:?}");
    assert_eq!(redrawn[1].0, "narrator");
    assert!(redrawn[1].1.contains("copied"), "{redrawn:?}");

    let messages = engine.context().store.with(|c| records::recent_messages(c, &scene, 100)).unwrap();
    let wren = messages.iter().find(|m| m.speaker == "Wren Talloway").unwrap();
    assert!(wren.content.contains("The light stays lit."), "{}", wren.content);
    let narrator = messages.iter().find(|m| m.speaker == "Narrator").unwrap();
    assert!(narrator.content.starts_with("Rain needles the lamp-room glass"), "{}", narrator.content);
    assert!(messages.iter().all(|m| !m.speaker.contains("state_update")));
}

/// The embedded model's Director wrote its schema's field names as guidance
/// ("openguidance 1 = stateUpdates"), and a character wrote a good turn followed by the
/// prompt's markup and another's line: the plan is re-asked, and the turn is kept up to
/// its drift (not drawn again), its state lines with it.
#[test]
fn field_name_guidance_is_re_asked_and_a_turn_is_kept_up_to_its_drift() {
    let dir = tempfile::tempdir().unwrap();
    let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data("script.json")).unwrap()).unwrap();
    for rule in script["rules"].as_array_mut().unwrap() {
        let name = rule["name"].as_str().unwrap_or_default().to_string();
        match name.as_str() {
            "director pass 1" => {
                let original = rule["reply"].take();
                let mut junk = original.clone();
                junk["json"]["actingCharacters"][0]["guidance"] = serde_json::json!("openguidance 1 = stateUpdates");
                junk["json"]["actingCharacters"][1]["guidance"] = serde_json::json!("stateupdate 1 = openGuidance 1 = ");
                rule["replies"] = serde_json::json!([junk, original]);
                rule.as_object_mut().unwrap().remove("reply");
            }
            "Wren" => {
                let text = rule["reply"]["text"].as_str().unwrap().to_string();
                rule["reply"]["text"] = serde_json::json!(format!("{text}\n</assistant_persona>\nOssian Vale: I'll see to the boat."));
            }
            _ => {}
        }
    }
    let (paths, scene) = setup_with_script(dir.path(), &script);
    let engine = engine::start(paths).unwrap();
    let events = round(&engine, &scene, Some("I hand the keeper the sealed letter."));
    let plans: Vec<&lorekeeper::scene::model::DirectorPlan> = events
        .iter()
        .filter_map(|e| match e {
            SceneEvent::DirectorDecided { pass: 1, decision: lorekeeper::scene::DirectorDecision::Plan(p), .. } => Some(&**p),
            _ => None,
        })
        .collect();
    assert_eq!(plans.len(), 1);
    let guidance: Vec<&str> = plans[0].acting_characters.iter().map(|a| a.guidance.as_str()).collect();
    assert!(guidance.contains(&"Read the letter aloud and refuse its request."), "{guidance:?}");
    assert!(guidance.iter().all(|g| !g.to_lowercase().contains("guidance")), "{guidance:?}");
    assert!(!events.iter().any(|e| matches!(e, SceneEvent::Redrawn { .. })), "a good turn is kept, not drawn again");
    let streamed: String = events
        .iter()
        .filter_map(|e| match e {
            SceneEvent::Token { character_id, text, .. } if character_id != "narrator" => Some((character_id, text)),
            _ => None,
        })
        .filter(|(id, _)| events.iter().any(|e| matches!(e, SceneEvent::CharacterStarted { character_id, name, .. } if character_id == *id && name == "Wren Talloway")))
        .map(|(_, t)| t.as_str())
        .collect();
    assert!(!streamed.contains('<') && !streamed.contains("Ossian Vale:"), "{streamed:?}");
    let store = engine.context().store.clone();
    let messages = store.with(|c| records::recent_messages(c, &scene, 100)).unwrap();
    let wren = messages.iter().find(|m| m.speaker == "Wren Talloway").unwrap();
    assert!(wren.content.contains("The light stays lit.") && !wren.content.contains('<') && !wren.content.contains("Ossian"), "{}", wren.content);
    let after = view(&store, &scene);
    let wren = after.cast.iter().find(|m| m.name == "Wren Talloway").unwrap();
    assert_eq!(wren.state.mood.as_deref(), Some("defiant"), "her state lines before the drift stand");
}

/// Director pass 2 that never gives a usable reply does not cost the round: the
/// characters spoke, their own state lines stand, and the ledger says pass 2 was not
/// applied and why.
#[test]
fn a_reconciliation_that_never_works_leaves_the_round_standing() {
    let dir = tempfile::tempdir().unwrap();
    let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data("script.json")).unwrap()).unwrap();
    for rule in script["rules"].as_array_mut().unwrap() {
        if rule["name"] == "director pass 2" {
            rule["reply"] = serde_json::json!({"json": {"stateUpdates": {"Wren Talloway": {"mood": "n/a", "location": "..."}}}});
        }
    }
    let (paths, scene) = setup_with_script(dir.path(), &script);
    let engine = engine::start(paths.clone()).unwrap();
    let events = round(&engine, &scene, Some("I hand the keeper the sealed letter."));
    // The user hears that pass 2 was dropped, not only the round's ledger.
    let Some(SceneEvent::RoundCompleted { notices, .. }) = events.last() else { panic!("no round_completed") };
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(notices[0].starts_with("Director pass 2 (reconciliation) was dropped") && notices[0].contains("no valid Reconciliation"), "{notices:?}");
    let after = view(&engine.context().store, &scene);
    assert_eq!(after.rounds, 1);
    let wren = after.cast.iter().find(|m| m.name == "Wren Talloway").unwrap();
    assert_eq!(wren.state.location.as_deref(), Some("the gallery"), "her own [location: ...] line stands");
    let record = engine.context().store.with(|c| records::load_round(c, &scene, 1)).unwrap().unwrap();
    let notes: Vec<String> = record
        .ledgers
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["agent"] == "director (reconcile)")
        .flat_map(|l| l["notes"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect();
    assert!(notes.iter().any(|n| n.starts_with("not applied: no valid Reconciliation after 3 attempt(s)")), "{notes:?}");
    // And so does the command line.
    drop(engine);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
        .args(["scene", "round", &scene, "I knock."])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("warning: Director pass 2 (reconciliation) was dropped"), "{stdout}");
}

/// A Director that names the cast by first name ("Wren", "ossian") is understood, as a
/// person typing the start of a name is: pass 1's plan plays (and is recorded under the
/// full names), and pass 2's state updates, time, trackers and facts are applied — not
/// refused three times as "not characters in this scene".
#[test]
fn a_director_naming_the_cast_by_first_name_is_understood() {
    let dir = tempfile::tempdir().unwrap();
    let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data("script.json")).unwrap()).unwrap();
    for rule in script["rules"].as_array_mut().unwrap() {
        if rule["name"] == "director pass 1" {
            rule["reply"] = serde_json::json!({"json": {
                "actingCharacters": [
                    {"name": "Wren", "guidance": "Read the letter aloud and refuse its request.", "priority": 1},
                    {"name": "ossian", "guidance": "Make an excuse and go down to check the boat.", "priority": 1},
                    {"name": "Marguerite", "guidance": "Enter soaked and amused; ask for the keeper.", "priority": 5}
                ],
                "activations": [{"name": "Marguerite", "entryGuidance": "She climbs the stair unannounced."}],
                "deactivations": [{"name": "Ossian", "exitGuidance": "He leaves down the stair to the jetty."}],
                "stateUpdates": {"Marguerite": {"location": "the lamp room door"}}
            }});
        }
        if rule["name"] == "director pass 2" {
            rule["reply"] = serde_json::json!({"json": {
                "stateUpdates": {"wren": {"location": "the lamp room"}, "Ossian": {"location": "the jetty"}},
                "trackers": {"fog": "lifting"},
                "newFacts": ["The letter bears the harbour council's green seal."],
                "elapsedMinutes": 10
            }});
        }
    }
    let (paths, scene) = setup_with_script(dir.path(), &script);
    let engine = engine::start(paths).unwrap();
    let events = round(&engine, &scene, Some("I hand the keeper the sealed letter."));
    let order: Vec<&str> =
        events.iter().filter_map(|e| if let SceneEvent::CharacterStarted { name, .. } = e { Some(name.as_str()) } else { None }).collect();
    assert_eq!(order, ["Marguerite Siltborne", "Ossian Vale", "Wren Talloway"]);
    let Some(SceneEvent::RoundCompleted { notices, .. }) = events.last() else { panic!("no round_completed") };
    assert!(notices.is_empty(), "{notices:?}");
    let after = view(&engine.context().store, &scene);
    let active: Vec<&str> = after.active().map(|c| c.name.as_str()).collect();
    assert_eq!(active, ["Marguerite Siltborne", "Wren Talloway"], "Marguerite entered, Ossian left");
    assert_eq!(after.member_by_name("Marguerite Siltborne").unwrap().state.location.as_deref(), Some("the lamp room door"));
    assert_eq!(after.member_by_name("Wren Talloway").unwrap().state.location.as_deref(), Some("the lamp room"), "pass 2 applied");
    assert_eq!(after.member_by_name("Ossian Vale").unwrap().state.location.as_deref(), Some("the jetty"));
    assert_eq!(after.trackers["fog"], "lifting");
    assert_eq!(after.elapsed_minutes, 10);
    let record = engine.context().store.with(|c| records::load_round(c, &scene, 1)).unwrap().unwrap();
    let acting: Vec<&str> = record.director["plan"]["actingCharacters"].as_array().unwrap().iter().filter_map(|a| a["name"].as_str()).collect();
    assert_eq!(acting, ["Wren Talloway", "Ossian Vale", "Marguerite Siltborne"], "recorded under the full names");
    assert_eq!(record.director["ignored"], serde_json::json!([]), "{}", record.director);
    let notes = record.ledgers.to_string();
    assert!(!notes.contains("not applied"), "{notes}");
}

/// A Director that has someone already in the scene enter it again is not followed: the
/// plan shown and kept has no "Enters:" for her (round 3 said "Enters: Odile Marchetti"
/// of a character there all along), and the record says why it was left out.
#[test]
fn a_director_bringing_in_someone_already_present_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data("script.json")).unwrap()).unwrap();
    for rule in script["rules"].as_array_mut().unwrap() {
        if rule["name"] == "director pass 1" {
            rule["reply"] = serde_json::json!({"json": {
                "actingCharacters": [{"name": "Wren Talloway", "guidance": "Read the letter aloud.", "priority": 1}],
                "activations": [{"name": "Wren Talloway", "entryGuidance": "She comes in from the gallery."}]
            }});
        }
    }
    let (paths, scene) = setup_with_script(dir.path(), &script);
    let engine = engine::start(paths).unwrap();
    let events = round(&engine, &scene, Some("I hand the keeper the sealed letter."));
    let shown = events.iter().find_map(|e| match e {
        SceneEvent::DirectorDecided { decision: lorekeeper::scene::DirectorDecision::Plan(plan), .. } => Some(plan.clone()),
        _ => None,
    });
    assert!(shown.expect("the plan is shown").activations.is_empty(), "no Enters: for someone present");
    assert!(matches!(events.last(), Some(SceneEvent::RoundCompleted { .. })), "{:?}", events.last());
    let record = engine.context().store.with(|c| records::load_round(c, &scene, 1)).unwrap().unwrap();
    assert_eq!(record.director["plan"]["activations"], serde_json::json!([]), "{}", record.director);
    assert_eq!(record.director["ignored"], serde_json::json!(["Wren Talloway (entering, but already in the scene)"]), "{}", record.director);
}

/// A small model's nonsense minutes (two thousand years in one round) do not move the
/// campaign's clock; the round's ledger says why.
#[test]
fn a_round_reporting_more_than_a_year_leaves_the_clock_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data("script.json")).unwrap()).unwrap();
    let rules = script["rules"].as_array_mut().unwrap();
    let reconcile = rules.iter_mut().find(|r| r["name"] == "director pass 2").unwrap();
    reconcile["reply"]["json"]["elapsedMinutes"] = 1_200_000_004u32.into();
    let (paths, scene) = setup_with_script(dir.path(), &script);
    let before = view(&Store::open(&paths.library_file).unwrap(), &scene);
    let engine = engine::start(paths).unwrap();
    let events = round(&engine, &scene, Some("I hand the keeper the sealed letter."));
    assert!(matches!(events.last(), Some(SceneEvent::RoundCompleted { .. })), "{:?}", events.last());
    let store = &engine.context().store;
    let after = view(store, &scene);
    assert_eq!(after.elapsed_minutes, before.elapsed_minutes, "the clock stands");
    assert_eq!(after.trackers["fog"], "lifting", "the rest of the reconciliation applies");
    let record = store.with(|c| records::load_round(c, &scene, 1)).unwrap().unwrap();
    let reconcile = record.ledgers.as_array().unwrap().iter().find(|l| l["agent"] == "director (reconcile)").unwrap();
    assert!(reconcile["notes"].to_string().contains("1200000004 in-fiction minutes not applied"), "{reconcile}");
}

/// A reviewed plan in which nobody of the cast acts is refused as the Director's own
/// would be, naming the cast; nothing of the round is kept.
#[test]
fn a_reviewed_plan_naming_nobody_of_the_cast_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
        .args(["scene", "round", &scene, "Knock knock.", "--review"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{}", serde_json::json!({ "actingCharacters": [{ "name": "Nobody Real" }] })).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("the plan was not taken") && said.contains("Nobody Real") && said.contains("Wren Talloway"), "{said}");
    assert_eq!(view(&Store::open(&paths.library_file).unwrap(), &scene).rounds, 0, "nothing of the round was kept");
}

/// A message the scene's summary told, edited or taken out, is not told again: the
/// summary is written again from the transcript as it now reads before anything else
/// runs on the scene, and the arc's later scenes carry that one.
#[test]
fn an_edited_or_deleted_message_leaves_the_scene_summary() {
    use lorekeeper::prompting::Section;
    use lorekeeper::scene::envelope::AgentKind;
    let dir = tempfile::tempdir().unwrap();
    let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data("script.json")).unwrap()).unwrap();
    let rules = script["rules"].as_array_mut().unwrap();
    let summariser = "You keep the running summary of a roleplay scene";
    rules.insert(0, serde_json::json!({ "when": { "system_contains": summariser, "any_contains": "OLDSECRET" }, "reply": "Juno said the password is OLDSECRET." }));
    rules.insert(1, serde_json::json!({ "when": { "system_contains": summariser }, "reply": "Juno spoke of a password." }));
    let (paths, scene) = setup_with_script(dir.path(), &script);
    let mut config = Config::load(&paths.config_file).unwrap();
    config.scene.summarise_every = 2;
    config.save(&paths.config_file).unwrap();
    let engine = engine::start(paths).unwrap();
    round(&engine, &scene, Some("The password is OLDSECRET."));
    round(&engine, &scene, Some("Say it back to me."));
    collect(&engine, |e| matches!(e, SceneEvent::SummaryUpdated { .. }));
    let store = &engine.context().store;
    let summary = || store.with(|c| Ok(lorekeeper::scene::summary::current(c, &scene).unwrap())).unwrap();
    assert_eq!(summary(), ("Juno said the password is OLDSECRET.".to_string(), 1));
    let number = store.with(|c| records::recent_messages(c, &scene, 100)).unwrap().iter().find(|m| m.content.contains("OLDSECRET")).unwrap().number;

    engine
        .send(Command::Scene(SceneCommand::EditMessage { scene: scene.clone(), number, text: "The password is NEWSECRET.".into() }))
        .unwrap();
    let events = collect(&engine, |e| matches!(e, SceneEvent::MessageEdited { .. }));
    assert!(events.iter().any(|e| matches!(e, SceneEvent::SummaryUpdated { through_round: 1, .. })), "{events:?}");
    assert_eq!(summary(), ("Juno spoke of a password.".to_string(), 1), "written again from the edited transcript");
    let conn = store.reader().unwrap();
    let preview = lorekeeper::scene::preview::preview(&conn, &engine.context().config(), &scene, AgentKind::Director, None, &lorekeeper::scene::recall::Recall::none()).unwrap();
    let told: Vec<&str> = preview.candidates[&Section::Summaries].iter().map(|i| i.text.as_str()).collect();
    assert!(told.iter().all(|t| !t.contains("OLDSECRET")) && told.iter().any(|t| t.contains("spoke of a password")), "{told:?}");

    // Put the secret back (the summary follows), then take the message out.
    engine.send(Command::Scene(SceneCommand::EditMessage { scene: scene.clone(), number, text: "The password is OLDSECRET.".into() })).unwrap();
    collect(&engine, |e| matches!(e, SceneEvent::MessageEdited { .. }));
    assert!(summary().0.contains("OLDSECRET"));
    engine.send(Command::Scene(SceneCommand::DeleteMessage { scene: scene.clone(), number })).unwrap();
    let events = collect(&engine, |e| matches!(e, SceneEvent::MessageDeleted { .. }));
    assert!(events.iter().any(|e| matches!(e, SceneEvent::SummaryUpdated { through_round: 1, .. })), "{events:?}");
    assert_eq!(summary(), ("Juno spoke of a password.".to_string(), 1));

    // A later scene of the arc is told the earlier scene's summary as it now reads.
    let arc: String = store.with(|c| Ok(c.query_row("SELECT arc_id FROM scenes WHERE id = ?1", [&scene], |r| r.get(0))?)).unwrap();
    engine
        .send(Command::Scene(SceneCommand::New { arc, name: "The Jetty".into(), description: String::new(), notes: String::new(), cast: Vec::new(), active: None }))
        .unwrap();
    let created = collect(&engine, |e| matches!(e, SceneEvent::SceneCreated { .. }));
    let Some(SceneEvent::SceneCreated { scene_id: later, .. }) = created.last() else { unreachable!() };
    let notes = store.with(|c| records::load_notes(c, later)).unwrap();
    assert_eq!(notes.earlier_scenes.iter().map(|e| e.summary.as_str()).collect::<Vec<_>>(), ["Juno spoke of a password."]);
}

/// A reviewed plan that names someone who is not in the cast beside a real actor is
/// refused, naming them, rather than played with them silently left out.
#[test]
fn a_reviewed_plan_naming_a_stranger_beside_the_cast_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
        .args(["scene", "round", &scene, "Knock knock.", "--review"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{}", serde_json::json!({ "actingCharacters": [{ "name": "Wren Talloway" }, { "name": "Ghost Person" }] })).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("the plan was not taken") && said.contains("\"Ghost Person\"") && said.contains("not in this scene's cast"), "{said}");
    assert_eq!(view(&Store::open(&paths.library_file).unwrap(), &scene).rounds, 0, "nothing of the round was kept");
}

/// A character renamed (its sheet, or an override in its campaign) keeps the scene
/// memories it witnessed, and nobody later given the old name inherits them.
#[test]
fn a_renamed_character_keeps_what_it_witnessed() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "memory-script.json");
    let engine = engine::start(paths.clone()).unwrap();
    round(&engine, &scene, Some("I lost the brass key somewhere in the lighthouse."));
    let campaign = view(&engine.context().store, &scene).campaign_id;
    drop(engine);
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
            .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    cli(&["character", "edit", "Wren Talloway", "--name", "Wren Halloway"]);
    cli(&["campaign", "override", &campaign, "Ossian Vale", "--name", "Old Ossian"]);
    // Someone new takes the old name.
    let card = dir.path().join("impostor.json");
    std::fs::write(&card, serde_json::json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": { "name": "Wren Talloway", "description": "Someone else." } }).to_string()).unwrap();
    cli(&["import", card.to_str().unwrap()]);

    let engine = engine::start(paths).unwrap();
    let recall = lorekeeper::scene::recall::Recall::open(engine.context());
    let recalled = |witness: &str| -> Vec<String> {
        let guidance = ["Where is the brass key?".to_string()];
        recall.for_character(&campaign, &scene, witness, &[], &guidance, 10, 0).hits.into_iter().map(|h| h.text).collect()
    };
    assert!(recalled("Wren Halloway").iter().any(|t| t.contains("brass key")), "{:?}", recalled("Wren Halloway"));
    assert!(recalled("Old Ossian").iter().any(|t| t.contains("brass key")), "the override's name: {:?}", recalled("Old Ossian"));
    assert_eq!(recalled("Wren Talloway"), Vec::<String>::new(), "the new Wren Talloway was never there");
    assert_eq!(recalled("Ossian Vale"), Vec::<String>::new());
    // The transcript the agents, the summariser and the export read calls each of them by
    // the name they go by now: one prompt never names one person twice.
    let transcript = engine.context().store.with(|c| lorekeeper::scene::records::recent_messages(c, &scene, u32::MAX)).unwrap();
    let speakers: Vec<&str> = transcript.iter().filter(|m| m.character_id.is_some()).map(|m| m.speaker.as_str()).collect();
    assert!(!speakers.is_empty());
    assert!(speakers.iter().all(|s| *s != "Wren Talloway" && *s != "Ossian Vale"), "{speakers:?}");
    assert!(speakers.iter().any(|s| *s == "Wren Halloway" || *s == "Old Ossian"), "{speakers:?}");
}

/// A character joins a running scene's cast (absent, for the Director to bring in) and
/// leaves it again, from the command line.
#[test]
fn a_character_joins_and_leaves_a_running_scenes_cast() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
            .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
            .args(args)
            .output()
            .unwrap()
    };
    let card = dir.path().join("petra.json");
    std::fs::write(&card, serde_json::json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": { "name": "Petra Quill", "description": "A cartographer of drowned coasts." } }).to_string()).unwrap();
    assert!(cli(&["import", card.to_str().unwrap()]).status.success());
    let out = cli(&["scene", "cast", "add", &scene, "Petra"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Petra Quill joined"), "{}", String::from_utf8_lossy(&out.stdout));
    let store = Store::open(&paths.library_file).unwrap();
    let petra = view(&store, &scene).cast.into_iter().find(|c| c.name == "Petra Quill").expect("in the cast");
    assert!(!petra.active, "absent until the Director brings her in");
    let again = cli(&["scene", "cast", "add", &scene, "Petra"]);
    assert!(!again.status.success() && String::from_utf8_lossy(&again.stderr).contains("already in the scene's cast"));

    // The Director is told of her as one of the cast it may bring in.
    let engine = engine::start(paths.clone()).unwrap();
    round(&engine, &scene, Some("Someone knocks below."));
    let calls = engine.context().store.with(|c| lorekeeper::llm::calls::recent(c, 50)).unwrap();
    let director = calls.iter().find(|c| c.request.messages.iter().any(|m| m.content.contains("which characters act, in what order"))).unwrap();
    assert!(director.request.messages.iter().any(|m| m.content.contains("Petra Quill")), "the Director knows of her");
    drop(engine);

    let out = cli(&["scene", "cast", "remove", &scene, "Petra Quill"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(view(&store, &scene).cast.iter().all(|c| c.name != "Petra Quill"));
    let gone = cli(&["scene", "cast", "remove", &scene, "Petra Quill"]);
    assert!(!gone.status.success() && String::from_utf8_lossy(&gone.stderr).contains("not in the scene's cast"));
}

/// `scene cancel` stops a round another process is playing; nothing of it is saved.
#[test]
fn scene_cancel_stops_a_round_running_in_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data("script.json")).unwrap()).unwrap();
    script["rules"].as_array_mut().unwrap().insert(
        0,
        serde_json::json!({ "when": { "system_contains": "You are playing" }, "reply": { "text": "I take my time answering, word by slow word, as the fog rolls in.", "chunk_chars": 4, "chunk_delay_ms": 400 } }),
    );
    let (paths, scene) = setup_with_script(dir.path(), &script);
    let args = ["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()];
    let player = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(args)
        .args(["scene", "round", &scene, "Tell me slowly."])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The round holds its lease in the library while it plays.
    let store = Store::open(&paths.library_file).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while store.with(|c| Ok(c.query_row("SELECT count(*) FROM job_leases WHERE kind = 'round'", [], |r| r.get::<_, i64>(0))?)).unwrap() == 0 {
        assert!(Instant::now() < deadline, "the round never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let cancel = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper")).args(args).args(["scene", "cancel", &scene]).output().unwrap();
    assert!(cancel.status.success(), "{}", String::from_utf8_lossy(&cancel.stderr));
    assert!(String::from_utf8_lossy(&cancel.stdout).contains("asked to stop"), "{}", String::from_utf8_lossy(&cancel.stdout));
    let out = player.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("cancelled"), "{said}");
    assert_eq!(view(&store, &scene).rounds, 0, "nothing of the round was kept");
    let idle = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper")).args(args).args(["scene", "cancel", &scene]).output().unwrap();
    assert!(String::from_utf8_lossy(&idle.stdout).contains("no round is running"), "{}", String::from_utf8_lossy(&idle.stdout));
}

/// A character's provider failing mid-round is reported with who failed (it used to be
/// only "the provider answered HTTP 400", as if the Director had), and the round keeps
/// nothing.
#[test]
fn a_character_whose_call_fails_is_named_and_the_round_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data("script.json")).unwrap()).unwrap();
    for rule in script["rules"].as_array_mut().unwrap() {
        if ["Marguerite", "Ossian", "Wren"].contains(&rule["name"].as_str().unwrap_or("")) {
            rule["reply"] = serde_json::json!({ "fail": { "kind": "http", "status": 400, "message": "internal boom" } });
        }
    }
    let (paths, scene) = setup_with_script(dir.path(), &script);
    let engine = engine::start(paths).unwrap();
    engine.send(Command::Scene(SceneCommand::Round { scene: scene.clone(), input: Some("I knock.".into()), force: Vec::new(), review: false })).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let message = loop {
        match engine.events().recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Event::Scene(SceneEvent::Error { message, .. })) => break message,
            Ok(Event::Scene(SceneEvent::RoundCompleted { .. })) => panic!("the round completed"),
            Ok(_) => {}
            Err(e) => panic!("no error in time: {e}"),
        }
    };
    let named = ["Marguerite Siltborne", "Ossian Vale", "Wren Talloway"].iter().any(|n| message.starts_with(&format!("the character {n} failed: ")));
    assert!(named && message.contains("internal boom"), "{message}");
    assert_eq!(view(&engine.context().store, &scene).rounds, 0);
}

/// `scene round` waits for the summary its round sets off and says how it went: a failed
/// summary used to go unsaid (the command stopped listening at the round's end).
#[test]
fn scene_round_on_the_command_line_says_when_the_summary_failed() {
    let dir = tempfile::tempdir().unwrap();
    let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data("script.json")).unwrap()).unwrap();
    for rule in script["rules"].as_array_mut().unwrap() {
        if rule["name"] == "summariser" {
            rule["reply"] = serde_json::json!({ "fail": { "kind": "http", "status": 400, "message": "the summariser is down" } });
        }
    }
    let (paths, scene) = setup_with_script(dir.path(), &script);
    let mut config = Config::load(&paths.config_file).unwrap();
    config.scene.summarise_every = 2;
    config.save(&paths.config_file).unwrap();
    let round = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
            .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
            .args(["scene", "round", &scene, "I knock."])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let first = round();
    assert!(!first.contains("summar"), "no summary after round 1: {first}");
    let second = round();
    assert!(second.contains("scene summary not updated") && second.contains("the summariser is down"), "{second}");
}

/// With a small context and no `max_tokens` on the profile, every call of a round (the
/// Director's plan with its JSON Schema in the prompt, its re-ask, the characters, the
/// Narrator, the World agent, the reconciliation) asks for a prompt plus a reply cap
/// that fit the context: a vLLM-style server refuses anything more. The ledger counts
/// the whole prompt, schema included.
#[test]
fn every_call_of_a_round_fits_prompt_and_reply_in_the_context() {
    let dir = tempfile::tempdir().unwrap();
    let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data("script.json")).unwrap()).unwrap();
    // The first plan names nobody real: its re-ask carries the reply and the errors too.
    for rule in script["rules"].as_array_mut().unwrap() {
        if rule["name"] == "director pass 1" {
            let original = rule["reply"].take();
            rule["replies"] = serde_json::json!([{"json": {"actingCharacters": [{"name": "state_update"}]}}, original]);
            rule.as_object_mut().unwrap().remove("reply");
        }
    }
    let (paths, scene) = setup_with_script(dir.path(), &script);
    let max = 2048u32;
    let mut config = Config::load(&paths.config_file).unwrap();
    config.profiles.iter_mut().for_each(|p| p.max_context_tokens = max);
    config.scene.world_agent = true;
    config.save(&paths.config_file).unwrap();
    // Plenty of everything the sections can hold: the budget, not the material, decides.
    let facts: Vec<String> = (0..300).map(|i| format!("Fact {i}: the harbour bell number {i} rang at dusk and nobody answered it.")).collect();
    Store::open(&paths.library_file)
        .unwrap()
        .with(|c| {
            c.execute("UPDATE campaign_state SET facts_json = ?1", [serde_json::to_string(&facts).unwrap()])?;
            Ok(())
        })
        .unwrap();
    let engine = engine::start(paths).unwrap();
    round(&engine, &scene, Some("I hand the keeper the sealed letter."));
    let store = &engine.context().store;
    let calls = store.with(|c| lorekeeper::llm::calls::recent(c, 100)).unwrap();
    let agents: Vec<&str> = calls.iter().map(|c| c.agent.as_str()).collect();
    assert!(agents.iter().filter(|a| **a == "director").count() >= 3, "plan, its re-ask, reconcile: {agents:?}");
    assert!(agents.contains(&"world") && agents.contains(&"character"), "{agents:?}");
    for call in &calls {
        let prompt = lorekeeper::llm::tokens::estimate_messages(&call.request.messages);
        let reply = call.request.sampler.max_tokens.expect("every call carries a reply cap");
        assert!(prompt + reply <= max, "{}: {prompt} prompt + {reply} reply > {max}", call.agent);
        // The mock server of the long campaign counted a quarter of the characters.
        let chars: usize = call.request.messages.iter().map(|m| m.content.len()).sum();
        assert!(chars as u32 / 4 + reply <= max, "{}: {chars} characters + {reply}", call.agent);
    }
    // The Director's ledger counts the prompt as sent, its JSON Schema included.
    let director = calls.iter().rev().find(|c| c.agent == "director").unwrap();
    assert!(director.request.messages[0].content.contains("<json_schema>"));
    let record = store.with(|c| records::load_round(c, &scene, 1)).unwrap().unwrap();
    let ledger = &record.ledgers.as_array().unwrap()[0]["ledger"];
    let sent = lorekeeper::llm::tokens::estimate_messages(&director.request.messages) as u64;
    let counted = ledger["prompt_tokens"].as_u64().unwrap();
    assert!(counted + 4 >= sent && counted <= sent + 4, "counted {counted}, sent {sent}");
    assert_eq!(ledger["context_tokens"].as_u64(), Some(u64::from(max)));
    assert_eq!(ledger["reply_tokens"].as_u64(), director.request.sampler.max_tokens.map(u64::from));
}

/// A muted character is marked so in the Director's prompt, and when the Director names
/// only them, the correction offers only those who can act; the round then plays.
#[test]
fn the_director_is_told_who_is_muted_and_corrected_toward_who_can_act() {
    let dir = tempfile::tempdir().unwrap();
    let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data("script.json")).unwrap()).unwrap();
    for rule in script["rules"].as_array_mut().unwrap() {
        if rule["name"] == "director pass 1" {
            rule.as_object_mut().unwrap().remove("reply");
            rule["replies"] = serde_json::json!([
                {"json": {"actingCharacters": [{"name": "Ossian Vale", "guidance": "Check the boat."}]}},
                {"json": {"actingCharacters": [{"name": "Wren Talloway", "guidance": "Read the letter."}]}}
            ]);
        }
    }
    let (paths, scene) = setup_with_script(dir.path(), &script);
    let engine = engine::start(paths).unwrap();
    engine.send(Command::Scene(SceneCommand::Mute { scene: scene.clone(), character: "Ossian Vale".into(), muted: true })).unwrap();
    collect(&engine, |e| matches!(e, SceneEvent::Muted { .. }));
    let events = round(&engine, &scene, Some("Someone should check the boat."));
    let acted: Vec<&str> = events.iter().filter_map(|e| if let SceneEvent::CharacterStarted { name, .. } = e { Some(name.as_str()) } else { None }).collect();
    assert_eq!(acted, ["Wren Talloway"]);
    let calls = engine.context().store.with(|c| lorekeeper::llm::calls::recent(c, 100)).unwrap();
    let plans: Vec<_> = calls.iter().rev().filter(|c| c.agent == "director" && c.request.messages[0].content.contains("which characters act")).collect();
    assert_eq!(plans.len(), 2, "the plan and its re-ask");
    let system = &plans[0].request.messages[0].content;
    assert!(system.contains("Ossian Vale (in the scene; muted by the game master: cannot act)"), "{system}");
    assert!(system.contains("Wren Talloway (in the scene)\n"), "{system}");
    let correction = &plans[1].request.messages.last().unwrap().content;
    let line = correction.lines().find(|l| l.contains("/actingCharacters")).expect("the cast error");
    assert!(line.contains("who can act: Wren Talloway (or bring in one of Marguerite Siltborne with activations)"), "{line}");
    assert!(!line.contains("Ossian"), "a muted character is not offered: {line}");
}

/// The campaign's clock reaches every agent of a round, in words: the Director, the
/// characters, the Narrator, the World agent (asked how many minutes passed) and the
/// reconciliation.
#[test]
fn every_agent_is_told_the_in_fiction_time() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    let mut config = Config::load(&paths.config_file).unwrap();
    config.scene.world_agent = true;
    config.save(&paths.config_file).unwrap();
    // As `campaign time <campaign> 2000` leaves it.
    Store::open(&paths.library_file)
        .unwrap()
        .with(|c| {
            c.execute("UPDATE campaign_state SET elapsed_minutes = 2000", [])?;
            Ok(())
        })
        .unwrap();
    let engine = engine::start(paths).unwrap();
    round(&engine, &scene, Some("How long have we been here?"));
    let calls = engine.context().store.with(|c| lorekeeper::llm::calls::recent(c, 100)).unwrap();
    let mut agents: Vec<&str> = calls.iter().map(|c| c.agent.as_str()).collect();
    agents.sort_unstable();
    agents.dedup();
    assert_eq!(agents, ["character", "director", "narrator", "world"]);
    for call in &calls {
        let system = &call.request.messages[0].content;
        assert!(system.contains("Time in the story: 1 day, 9 hours and 20 minutes since the campaign began"), "{}: {system}", call.agent);
    }
}

/// A character reads its own intentions but never another's; what others can see
/// (location, mood, clothing, activity) is told to everyone present. The Director reads
/// every intention; the Narrator, whose words everyone witnesses, none.
#[test]
fn a_character_never_reads_another_characters_intentions() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    let mut config = Config::load(&paths.config_file).unwrap();
    config.scene.max_director_passes = 1;
    config.save(&paths.config_file).unwrap();
    let store = Store::open(&paths.library_file).unwrap();
    let before = view(&store, &scene);
    for (name, state) in [
        ("Wren Talloway", r#"{"intentions": "INTENT-WREN keep the light", "mood": "MOOD-WREN"}"#),
        ("Ossian Vale", r#"{"intentions": "INTENT-OSSIAN betray the keeper", "location": "LOC-OSSIAN"}"#),
    ] {
        let id = before.member_by_name(name).unwrap().id.clone();
        store
            .with(|c| {
                c.execute("INSERT OR REPLACE INTO scene_character_states(scene_id, character_id, state_json, round) VALUES (?1, ?2, ?3, 0)", [&scene, &id, &state.to_string()])?;
                Ok(())
            })
            .unwrap();
    }
    let engine = engine::start(paths).unwrap();
    round(&engine, &scene, Some("I hand the keeper the sealed letter."));
    let calls = engine.context().store.with(|c| lorekeeper::llm::calls::recent(c, 100)).unwrap();
    let prompt_of = |needle: &str| -> &str {
        &calls.iter().find(|c| c.request.messages[0].content.contains(needle)).unwrap_or_else(|| panic!("no call with {needle}")).request.messages[0].content
    };
    let wren = prompt_of("You are playing Wren Talloway");
    assert!(wren.contains("INTENT-WREN") && wren.contains("MOOD-WREN"), "its own state: {wren}");
    assert!(!wren.contains("INTENT-OSSIAN"), "another's intentions: {wren}");
    assert!(wren.contains("LOC-OSSIAN"), "what others can see stays: {wren}");
    let ossian = prompt_of("You are playing Ossian Vale");
    assert!(ossian.contains("INTENT-OSSIAN") && !ossian.contains("INTENT-WREN"), "{ossian}");
    assert!(ossian.contains("MOOD-WREN"), "{ossian}");
    let director = prompt_of("which characters act");
    assert!(director.contains("INTENT-WREN") && director.contains("INTENT-OSSIAN"), "{director}");
    let narrator = prompt_of("You are the narrator of");
    assert!(!narrator.contains("INTENT-") && narrator.contains("LOC-OSSIAN"), "{narrator}");
}

/// The story carries across arcs, to the end of each scene: a scene played for fewer
/// rounds than the summary interval is summarised through its last round when a later
/// scene (here the first of a new arc) plays, and that scene's Director is told it;
/// the earlier scene, played again, still reads its last round verbatim.
#[test]
fn a_new_arc_is_told_how_the_earlier_scenes_ended() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, first) = setup(dir.path(), "script.json");
    let store = Store::open(&paths.library_file).unwrap();
    let before = view(&store, &first);
    let cast: Vec<String> = before.cast.iter().map(|m| m.id.clone()).collect();
    let active: Vec<String> = before.active().map(|m| m.id.clone()).collect();
    let later = store
        .transaction(|tx| {
            let arc = lorekeeper::scene::authoring::create_arc(tx, &before.campaign_id, "The Second Tide", "")?;
            records::create_scene(tx, &arc, "The Reef", "", &cast, &active)
        })
        .unwrap();
    let engine = engine::start(paths).unwrap();
    round(&engine, &first, Some("MARK-R1 I hand the keeper the sealed letter."));
    round(&engine, &first, Some("MARK-R2 The bell rings twice."));
    let store = &engine.context().store;
    assert_eq!(store.with(|c| Ok(lorekeeper::scene::summary::current(c, &first).unwrap())).unwrap().1, 0, "five rounds per summary: none yet");

    let events = round(&engine, &later, Some("Where were we?"));
    assert!(
        events.iter().any(|e| matches!(e, SceneEvent::SummaryUpdated { scene_id, scene, through_round: 2 } if *scene_id == first && *scene == before.name)),
        "the first scene was summarised through its last round, and the event names it: {events:?}"
    );
    let calls = store.with(|c| lorekeeper::llm::calls::recent(c, 100)).unwrap();
    let summariser = calls.iter().find(|c| c.agent == "summariser").expect("the summariser ran");
    assert!(summariser.request.messages[0].content.contains("MARK-R2"), "the last round is folded in");
    let director = &calls.iter().find(|c| c.agent == "director" && c.request.messages.last().unwrap().content.contains("Where were we?")).unwrap().request.messages[0].content;
    let told = director.split("## Story so far\n").nth(1).expect("a story so far").split("\n## ").next().unwrap();
    assert!(told.contains("Earlier, in arc \"") && told.contains("Juno brought a sealed letter"), "{told}");

    // Played again, the first scene still shows its last round's words.
    round(&engine, &first, Some("MARK-R3 Back at the lamp room."));
    let calls = store.with(|c| lorekeeper::llm::calls::recent(c, 100)).unwrap();
    let director = &calls.iter().find(|c| c.agent == "director" && c.request.messages.last().unwrap().content.contains("MARK-R3")).unwrap().request.messages[0].content;
    assert!(director.contains("MARK-R2 The bell rings twice."), "{director}");
}

/// An earlier scene's summary is told to the characters of its cast, not to one who was
/// never in it or was taken out of it; the Director hears it all.
#[test]
fn an_earlier_scenes_summary_reaches_only_its_cast() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, first) = setup(dir.path(), "script.json");
    let store = Store::open(&paths.library_file).unwrap();
    let before = view(&store, &first);
    let cast: Vec<String> = before.cast.iter().map(|m| m.id.clone()).collect();
    let active: Vec<String> = before.active().map(|m| m.id.clone()).collect();
    let ossian = before.member_by_name("Ossian Vale").unwrap().id.clone();
    let arc: String = store.with(|c| Ok(c.query_row("SELECT arc_id FROM scenes WHERE id = ?1", [&first], |r| r.get(0))?)).unwrap();
    let later = store
        .transaction(|tx| {
            tx.execute("UPDATE scenes SET summary = 'SUMMARY-FIRST: the letter was read aloud.' WHERE id = ?1", [&first])?;
            records::remove_from_cast(tx, &first, &ossian)?;
            records::create_scene(tx, &arc, "The Jetty", "", &cast, &active)
        })
        .unwrap();
    let engine = engine::start(paths).unwrap();
    round(&engine, &later, Some("I hand the keeper the sealed letter."));
    let calls = engine.context().store.with(|c| lorekeeper::llm::calls::recent(c, 100)).unwrap();
    let prompt_of = |needle: &str| -> &str {
        &calls.iter().find(|c| c.request.messages[0].content.contains(needle)).unwrap_or_else(|| panic!("no call with {needle}")).request.messages[0].content
    };
    assert!(prompt_of("You are playing Wren Talloway").contains("SUMMARY-FIRST"), "Wren was in the first scene's cast");
    assert!(!prompt_of("You are playing Ossian Vale").contains("SUMMARY-FIRST"), "Ossian was taken out of it");
    assert!(prompt_of("which characters act").contains("SUMMARY-FIRST"), "the Director hears every scene");
}

/// A scene's JSON export carries the hand edits made in it: its characters' states in
/// that scene, and the campaign's state edited before one of its rounds; not another
/// scene's.
#[test]
fn a_scene_export_carries_only_the_state_edits_made_in_it() {
    use lorekeeper::scene::authoring::{StateEdit, edit_state};
    use lorekeeper::scene::transcript::{TranscriptFormat, render};
    let dir = tempfile::tempdir().unwrap();
    let (paths, first) = setup(dir.path(), "script.json");
    let engine = engine::start(paths).unwrap();
    let store = &engine.context().store;
    let before = view(store, &first);
    let (campaign, wren) = (before.campaign_id.clone(), before.member_by_name("Wren Talloway").unwrap().id.clone());
    let cast: Vec<String> = before.cast.iter().map(|m| m.id.clone()).collect();
    let edit = |edit: StateEdit| store.transaction(|tx| edit_state(tx, &campaign, &edit)).unwrap();
    let pause = || std::thread::sleep(Duration::from_millis(5));

    round(&engine, &first, Some("I hand the keeper the sealed letter."));
    pause();
    edit(StateEdit::Tracker { name: "EDIT-DURING-FIRST".into(), value: Some(serde_json::json!(1)) });
    pause();
    round(&engine, &first, Some("The bell rings."));
    pause();
    edit(StateEdit::Elapsed { minutes: 600 });
    let arc: String = store.with(|c| Ok(c.query_row("SELECT arc_id FROM scenes WHERE id = ?1", [&first], |r| r.get(0))?)).unwrap();
    let later = store.transaction(|tx| records::create_scene(tx, &arc, "The Jetty", "", &cast, &cast)).unwrap();
    let mood = serde_json::from_value(serde_json::json!({"mood": "EDIT-IN-LATER"})).unwrap();
    edit(StateEdit::Character { scene_id: later.clone(), character_id: wren, state: mood });
    pause();
    round(&engine, &later, Some("At the jetty."));

    let exported = |scene: &str| -> String {
        let (text, _) = store.with(|c| render(c, scene, TranscriptFormat::Json)).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        value["state_edits"].to_string()
    };
    let (first_edits, later_edits) = (exported(&first), exported(&later));
    assert!(first_edits.contains("EDIT-DURING-FIRST"), "{first_edits}");
    assert!(!first_edits.contains("EDIT-IN-LATER") && !first_edits.contains("\"minutes\":600"), "{first_edits}");
    // The time skip made between the scenes came before the later scene's round.
    assert!(later_edits.contains("EDIT-IN-LATER") && later_edits.contains("\"minutes\":600"), "{later_edits}");
    assert!(!later_edits.contains("EDIT-DURING-FIRST"), "{later_edits}");
}

/// A deleted character's scene memories do not pass to a character made later under its
/// name: what it witnessed stays marked as the deleted one's.
#[test]
fn a_new_character_with_a_deleted_ones_name_inherits_none_of_its_memories() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    {
        let engine = engine::start(paths.clone()).unwrap();
        round(&engine, &scene, Some("I hand the keeper the sealed letter."));
    }
    let witnessed = |name: &str| -> i64 {
        let store = Store::open(&paths.library_file).unwrap();
        store.with(|c| Ok(c.query_row("SELECT count(*) FROM memory_witnesses WHERE witness = ?1", [name], |r| r.get(0))?)).unwrap()
    };
    let before = witnessed("Wren Talloway");
    assert!(before > 0, "Wren witnessed the round");
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
            .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    cli(&["character", "delete", "Wren Talloway", "--yes"]);
    let card = dir.path().join("wren.json");
    std::fs::write(&card, serde_json::json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": { "name": "Wren Talloway", "description": "Someone else entirely." } }).to_string()).unwrap();
    cli(&["import", card.to_str().unwrap()]);
    assert_eq!(witnessed("Wren Talloway"), 0, "the new Wren remembers nothing of the old one's round");
    let store = Store::open(&paths.library_file).unwrap();
    let kept: i64 =
        store.with(|c| Ok(c.query_row("SELECT count(*) FROM memory_witnesses WHERE witness LIKE 'Wren Talloway (deleted %'", [], |r| r.get(0))?)).unwrap();
    assert_eq!(kept, before, "the old one's stay marked as its");
}

/// A round the scene's summary tells can still be taken back: the summary is forgotten
/// with it and written again over the rounds left (it used to refuse the undo, and after
/// the round that wrote the summary was undone, the one before it could never be).
#[test]
fn a_summarised_round_can_be_taken_back_and_the_summary_follows() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, scene) = setup(dir.path(), "script.json");
    let mut config = Config::load(&paths.config_file).unwrap();
    config.scene.summarise_every = 2;
    config.save(&paths.config_file).unwrap();
    let engine = engine::start(paths).unwrap();
    for input in ["I knock.", "I wait.", "I knock again."] {
        round(&engine, &scene, Some(input));
    }
    let summary_round = |engine: &EngineHandle| -> u32 {
        engine.context().store.with(|c| Ok(c.query_row("SELECT summary_round FROM scenes WHERE id = ?1", [&scene], |r| r.get(0))?)).unwrap()
    };
    let covered = summary_round(&engine);
    assert!(covered >= 1, "rounds were summarised");
    // Back to round 0, one undo at a time, every one allowed.
    let mut rounds = view(&engine.context().store, &scene).rounds;
    while rounds > 0 {
        engine.send(Command::Scene(SceneCommand::Undo { scene: scene.clone(), expect_round: None })).unwrap();
        collect(&engine, |e| matches!(e, SceneEvent::RoundUndone { .. }));
        rounds -= 1;
        assert_eq!(view(&engine.context().store, &scene).rounds, rounds);
        assert!(summary_round(&engine) <= rounds, "the summary never tells a round taken back");
    }
    assert_eq!(summary_round(&engine), 0);
}

/// [`setup_with_script`] whose Director names `acting` to act in pass 1, with no
/// activations (Wren and Ossian are in the scene, Marguerite is of the cast but absent).
fn setup_with_plan(dir: &Path, acting: serde_json::Value) -> (Paths, String) {
    let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data("script.json")).unwrap()).unwrap();
    for rule in script["rules"].as_array_mut().unwrap() {
        if rule["name"] == "director pass 1" {
            rule["reply"] = serde_json::json!({"json": {
                "actingCharacters": acting, "activations": [], "deactivations": [], "stateUpdates": {}, "openGuidance": ""
            }});
        }
    }
    setup_with_script(dir, &script)
}

fn cli_round(paths: &Paths, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["--library", paths.library_file.to_str().unwrap(), "--config", paths.config_file.to_str().unwrap()])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The game master forces an absent cast member whom the Director also named to act
/// (without bringing them in): they enter and act, as a forced speaker always does.
#[test]
fn a_forced_speaker_the_director_also_named_while_absent_enters_and_acts() {
    let dir = tempfile::tempdir().unwrap();
    let acting = serde_json::json!([
        {"name": "Marguerite Siltborne", "guidance": "x", "priority": 10, "order": 1},
        {"name": "Wren Talloway", "guidance": "y", "priority": 9, "order": 2}
    ]);
    let (paths, scene) = setup_with_plan(dir.path(), acting);
    let out = cli_round(&paths, &["scene", "round", &scene, "Marguerite, answer me", "--force", "Marguerite Siltborne"]);
    assert!(out.contains("Marguerite Siltborne: "), "{out}");
    let store = Store::open(&paths.library_file).unwrap();
    let messages = store.with(|c| records::recent_messages(c, &scene, 100)).unwrap();
    assert!(messages.iter().any(|m| m.speaker == "Marguerite Siltborne"), "{messages:?}");
    assert!(view(&store, &scene).member_by_name("Marguerite Siltborne").unwrap().active, "she entered");
}

/// A cast member the Director names to act without an activation enters and acts; a
/// name no one of the cast answers to is said as a warning on the command line and in
/// the round's notices, and the Director's decision as reported names only who acts.
#[test]
fn an_absent_cast_member_named_to_act_enters_and_a_stranger_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let acting = serde_json::json!([
        {"name": "Marguerite Siltborne", "guidance": "Ask for the keeper.", "priority": 5},
        {"name": "Wren Talloway", "guidance": "Read the letter.", "priority": 1},
        {"name": "Ysolde Stranger", "guidance": "Speak.", "priority": 1}
    ]);
    let (paths, scene) = setup_with_plan(dir.path(), acting);
    let out = cli_round(&paths, &["scene", "round", &scene, "Who is there?"]);
    assert!(out.contains("warning:") && out.contains("Ysolde Stranger"), "{out}");
    let store = Store::open(&paths.library_file).unwrap();
    let messages = store.with(|c| records::recent_messages(c, &scene, 100)).unwrap();
    let speakers: Vec<&str> = messages.iter().map(|m| m.speaker.as_str()).collect();
    assert!(speakers.contains(&"Marguerite Siltborne") && speakers.contains(&"Wren Talloway"), "{speakers:?}");
    assert!(view(&store, &scene).member_by_name("Marguerite Siltborne").unwrap().active);

    // Through the engine: the decision it reports is the plan as played.
    let engine = engine::start(paths).unwrap();
    let events = round(&engine, &scene, Some("And now?"));
    let plan = events
        .iter()
        .find_map(|e| match e {
            SceneEvent::DirectorDecided { pass: 1, decision: lorekeeper::scene::DirectorDecision::Plan(p), .. } => Some(p.clone()),
            _ => None,
        })
        .unwrap();
    let acting: Vec<&str> = plan.acting_characters.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(acting, ["Marguerite Siltborne", "Wren Talloway"]);
    let Some(SceneEvent::RoundCompleted { notices, .. }) = events.last() else { panic!("no round_completed") };
    assert!(notices.iter().any(|n| n.contains("Ysolde Stranger") && n.contains("not in the scene's cast")), "{notices:?}");
}

/// A character asked in a one-to-one chat about a scene it played remembers it: its chat
/// recalls what it said, saw or was told in the campaign's scenes, not what happened
/// where it was not, and the packet says where those memories came from. Before, a
/// chat's memory was its own chat only, so a character that had played three scenes
/// knew nothing of them.
#[test]
fn a_character_remembers_in_a_chat_the_scenes_it_played() {
    let dir = tempfile::tempdir().unwrap();
    let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data("memory-script.json")).unwrap()).unwrap();
    script["default"] = serde_json::json!("I remember it well.");
    let (paths, scene) = setup_with_script(dir.path(), &script);
    let engine = engine::start(paths).unwrap();
    round(&engine, &scene, Some("I lost the brass key somewhere in the lighthouse."));

    let chat = |character: &str, text: &str| -> String {
        let command = lorekeeper::companion::CompanionCommand::Send { character: character.into(), text: text.into(), now: None };
        engine.send(Command::Companion(command)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match engine.events().recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Event::Companion(lorekeeper::companion::CompanionEvent::TurnCommitted { turn })) => {
                    return serde_json::to_string(&turn.packet).unwrap();
                }
                Ok(Event::Companion(lorekeeper::companion::CompanionEvent::Failed { message, .. })) => panic!("{message}"),
                Ok(_) => {}
                Err(e) => panic!("no reply in time: {e}"),
            }
        }
    };
    let wren = chat("Wren Talloway", "Do you remember where the brass key was lost?");
    assert!(wren.contains("I lost the brass key somewhere in the lighthouse"), "Wren was there: {wren}");
    assert!(wren.contains("from scenes Wren Talloway played"), "the packet says where the memory came from: {wren}");
    let marguerite = chat("Marguerite Siltborne", "Do you remember where the brass key was lost?");
    assert!(!marguerite.contains("I lost the brass key"), "Marguerite was not in the scene: {marguerite}");
}
