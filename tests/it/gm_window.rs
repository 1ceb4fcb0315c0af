//! What a game master playing in the window only ran into, session 18: controls that
//! move under the pointer (a cast member's Remove where the Add was, a mute row that
//! rewraps), red errors that outlive their problem, a Ctrl+Enter that was missed, a
//! budget table with no word for a share outgrown, a keyring error on every profile, and
//! small wording (escaped queries, "1 entries").

use crate::workbench::{harness, run_until, start_engine, step_until_shown};
use egui::accesskit::Role;
use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT, Queryable};
use lorekeeper::config::Config;
use lorekeeper::engine::Command;
use lorekeeper::llm::{ProviderKind, ProviderProfile};
use lorekeeper::ui::WorkbenchApp;
use std::path::Path;
use std::time::{Duration, Instant};

fn nav(harness: &Harness<'_, WorkbenchApp>, title: &str) {
    harness.get_all_by_label(title).next().expect("navigation entry").click();
}

fn text_field<'h>(harness: &'h Harness<'_, WorkbenchApp>, label: &'h str) -> egui_kittest::Node<'h> {
    harness
        .query_by_role_and_label(Role::TextInput, label)
        .or_else(|| harness.query_by_role_and_label(Role::MultilineTextInput, label))
        .unwrap_or_else(|| panic!("no text field labelled {label:?}"))
}

fn type_into(harness: &mut Harness<'_, WorkbenchApp>, label: &str, text: &str) {
    text_field(harness, label).click();
    harness.run();
    text_field(harness, label).type_text(text);
    harness.run();
}

/// A click where the pointer is, whatever is there now (as a person's second click).
fn click_at(harness: &mut Harness<'_, WorkbenchApp>, pos: egui::Pos2) {
    harness.event(egui::Event::PointerMoved(pos));
    for pressed in [true, false] {
        harness.event(egui::Event::PointerButton { pos, button: egui::PointerButton::Primary, pressed, modifiers: egui::Modifiers::NONE });
    }
    harness.run();
}

/// Step for `time`, letting the engine answer whatever was sent.
fn settle(harness: &mut Harness<'_, WorkbenchApp>, time: Duration) {
    let start = Instant::now();
    while start.elapsed() < time {
        std::thread::sleep(Duration::from_millis(10));
        harness.step();
    }
    harness.run();
}

/// The demo scene and the demo companion (Ilse Marrow, in no campaign's cast).
fn demo_library(dir: &Path, height: f32) -> (Harness<'static, WorkbenchApp>, String) {
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let engine = start_engine(dir, &config);
    let scene = lorekeeper::scene::demo::ensure(&engine.context().store).expect("demo").expect("a new library gets the demo");
    lorekeeper::companion::demo::ensure(&engine.context().store).expect("demo companion");
    (harness(engine, height), scene)
}

fn campaign_cast(app: &WorkbenchApp) -> Vec<String> {
    app.campaigns().tree().worlds.iter().flat_map(|w| &w.campaigns).flat_map(|c| c.cast.iter().map(|(_, name)| name.clone())).collect()
}

/// After "Add Ilse Marrow" the add controls stay where they were (she is listed below
/// them), so a second click on the same spot removes nobody; Remove asks first; and the
/// status and the event log say added and removed (they said "updated cast" for both).
#[test]
fn a_cast_member_added_is_not_removed_by_the_next_click_and_removal_asks_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut harness, _) = demo_library(dir.path(), 1000.0);
    harness.run();
    nav(&harness, "Campaigns");
    run_until(&mut harness, Duration::from_secs(20), |app| !app.campaigns().tree().worlds.is_empty());
    harness.run();
    harness.get_by_label("Settings of The Unlit Night").click();
    harness.run();
    step_until_shown(&mut harness, "Add Ilse Marrow");
    let find = text_field(&harness, "Find character").rect();
    let spot = harness.get_by_label("Add Ilse Marrow").rect().center();
    click_at(&mut harness, spot);
    run_until(&mut harness, Duration::from_secs(20), |app| campaign_cast(app).contains(&"Ilse Marrow".to_string()));
    harness.run();
    assert_eq!(text_field(&harness, "Find character").rect(), find, "the add controls stay where they were");
    let remove = harness.get_by_label("Remove Ilse Marrow").rect();
    assert!(!remove.contains(spot), "Remove is not where Add was: {remove:?} holds {spot:?}");
    assert_eq!(harness.state().campaigns().status(), Some(&Ok("Added Ilse Marrow to the cast".to_string())));

    // The second click of a double click.
    click_at(&mut harness, spot);
    settle(&mut harness, Duration::from_millis(300));
    assert!(campaign_cast(harness.state()).contains(&"Ilse Marrow".to_string()), "a second click removes nobody");

    // Remove asks; Keep keeps; Yes removes.
    harness.get_by_label("Remove Ilse Marrow").click();
    harness.run();
    assert!(harness.query_by_label("Take Ilse Marrow out of the cast?").is_some());
    settle(&mut harness, Duration::from_millis(200));
    assert!(campaign_cast(harness.state()).contains(&"Ilse Marrow".to_string()), "Remove only asks");
    harness.get_by_label("Keep Ilse Marrow").click();
    harness.run();
    assert!(harness.query_by_label("Take Ilse Marrow out of the cast?").is_none());
    harness.get_by_label("Remove Ilse Marrow").click();
    harness.run();
    harness.get_by_label("Yes, remove Ilse Marrow").click();
    run_until(&mut harness, Duration::from_secs(20), |app| !campaign_cast(app).contains(&"Ilse Marrow".to_string()));
    harness.run();
    assert_eq!(harness.state().campaigns().status(), Some(&Ok("Removed Ilse Marrow from the cast".to_string())));
    let log: Vec<&str> = harness.state().log_lines().collect();
    assert!(log.iter().any(|l| l.contains("added Ilse Marrow to the cast")), "{log:#?}");
    assert!(log.iter().any(|l| l.contains("removed Ilse Marrow from the cast")), "{log:#?}");
    assert!(!log.iter().any(|l| l.contains("updated cast")), "{log:#?}");
}

/// The rects of each cast member's "acts" box and Mute/Unmute button, by name.
fn cast_controls(harness: &Harness<'_, WorkbenchApp>, names: &[&str]) -> Vec<(egui::Rect, egui::Rect)> {
    names
        .iter()
        .map(|name| {
            let short = lorekeeper::ui::short(name);
            let acts = harness.get_by_label(&format!("{short} acts")).rect();
            let (mute, unmute) = (format!("Mute {short}"), format!("Unmute {short}"));
            let mute = harness.query_by_label(&mute).or_else(|| harness.query_by_label(&unmute)).unwrap_or_else(|| panic!("no mute button of {name}")).rect();
            (acts, mute)
        })
        .collect()
}

/// The Scene panel's cast controls are a grid, one row per member: muting one (its
/// button grows to "Unmute") or a fourth member joining moves no other control. A
/// refused cast change's error goes once a later one goes through.
#[test]
fn the_scene_panels_cast_controls_stay_put_and_a_cast_error_goes_when_a_change_succeeds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut harness, scene) = demo_library(dir.path(), 1000.0);
    harness.run();
    nav(&harness, "Scene");
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().snapshot().is_some());
    harness.run();
    let members = ["Wren Talloway", "Ossian Vale", "Marguerite Siltborne"];
    let before = cast_controls(&harness, &members);

    harness.get_by_label(&format!("Mute {}", lorekeeper::ui::short("Ossian Vale"))).click();
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.scene().snapshot().is_some_and(|s| s.view.cast.iter().any(|c| c.name == "Ossian Vale" && c.muted))
    });
    harness.run();
    assert!(harness.query_by_label("Unmute Ossian Vale").is_some());
    let muted = cast_controls(&harness, &members);
    assert_eq!((muted[0], muted[2]), (before[0], before[2]), "muting Ossian moved no other member's controls");
    assert_eq!(muted[1].1.min, before[1].1.min, "Unmute starts where Mute did");
    let acts = harness.get_by_label("Ossian Vale acts");
    assert!(acts.accesskit_node().is_disabled(), "a muted member's acts box is greyed, not gone");

    // A name nobody has: refused, in red.
    type_into(&mut harness, "Cast change", "Nobody Atall");
    harness.get_by_label("Add to cast").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().last_error().is_some());
    assert!(harness.state().scene().last_error().is_some_and(|e| e.contains("Nobody Atall")), "{:?}", harness.state().scene().last_error());

    // A fourth member joins: the error goes, and nobody else's controls move.
    type_into(&mut harness, "Cast change", "Ilse Marrow");
    harness.get_by_label("Add to cast").click();
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.scene().snapshot().is_some_and(|s| s.view.id == scene && s.view.cast.iter().any(|c| c.name == "Ilse Marrow"))
    });
    harness.run();
    assert_eq!(harness.state().scene().last_error(), None, "the refusal is behind us");
    let joined = cast_controls(&harness, &members);
    assert_eq!(joined, muted, "a member joining moved no other member's controls");
    assert!(harness.query_by_label("Ilse Marrow acts").is_some());
}

/// The Waves panel's "Character development failed: …" goes once the failed checkpoint
/// is asked again and ready; it stayed after the run had completed.
#[test]
fn a_failed_checkpoints_error_goes_once_its_rerun_is_ready() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/identity/script.json");
    let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(shipped).unwrap()).unwrap();
    // The Personality agent is refused (a permanent error: not retried) until it is
    // asked again with the game master's feedback (the script's revision rule, first).
    script["rules"].as_array_mut().unwrap().insert(
        1,
        serde_json::json!({ "when": { "system_contains": "Personality specialist" }, "reply": {
            "fail": { "kind": "http", "status": 400, "message": "the model refused" }
        } }),
    );
    let path = dir.path().join("failing.json");
    std::fs::write(&path, script.to_string()).unwrap();
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile { name: "script".into(), kind: ProviderKind::Scripted, model: "identity-script".into(), path: Some(path), ..Default::default() });
    config.default_profile = "script".into();
    let mut harness = harness(start_engine(dir.path(), &config), 1600.0);
    harness.run();
    nav(&harness, "Waves");
    harness.run();
    for (field, text) in [("Name", "Mira Voss"), ("Role", "lighthouse keeper"), ("Concept", "A keeper who guards the sea she fears.")] {
        type_into(&mut harness, field, text);
    }
    harness.get_by_label("Start development").click();
    run_until(&mut harness, Duration::from_secs(30), |app| app.identity().last_error().is_some());
    assert!(harness.state().identity().last_error().is_some_and(|e| e.starts_with("Character development failed")), "{:?}", harness.state().identity().last_error());
    run_until(&mut harness, Duration::from_secs(30), |app| {
        app.identity().view().is_some_and(|v| v.checkpoints[0].record.status.as_str() == "failed" && !v.checkpoints.iter().any(|c| c.record.status.is_working()))
    });
    let run = harness.state().identity().selected().unwrap().to_string();
    let feedback = "Again, please.".to_string();
    harness.state().engine().send(Command::Identity(lorekeeper::identity::IdentityCommand::Reject { character_id: run, checkpoint: 1, feedback })).unwrap();
    run_until(&mut harness, Duration::from_secs(30), |app| {
        app.identity().view().is_some_and(|v| v.checkpoints[0].record.status.as_str() == "awaiting_approval")
    });
    harness.run();
    assert_eq!(harness.state().identity().last_error(), None, "the failure is behind the run");
}

/// Ctrl+Enter sends the first message of a new chat when Ctrl goes down and up within
/// the one frame the Enter is in (a busy window, a quick hand): the frame's modifiers
/// say "no Ctrl" by its end, and the shortcut was read from them.
#[test]
fn ctrl_enter_sends_the_first_message_when_the_whole_chord_lands_in_one_frame() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let mut harness = harness(start_engine(dir.path(), &config), 900.0);
    harness.run();
    nav(&harness, "Chat");
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().selected().is_some());
    harness.run();
    assert!(harness.state().chat().turns().is_empty(), "a new chat");
    type_into(&mut harness, "Message", "Evening, Ilse.");
    let command = egui::Modifiers::COMMAND;
    let enter = |pressed| egui::Event::Key { key: egui::Key::Enter, physical_key: None, pressed, repeat: false, modifiers: command };
    harness.input_mut().events.extend([egui::Event::ModifiersChanged(command), enter(true), enter(false), egui::Event::ModifiersChanged(egui::Modifiers::NONE)]);
    harness.step();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().turns().len() == 1 || app.chat().error().is_some());
    assert_eq!(harness.state().chat().error(), None);
    assert_eq!(harness.state().chat().turns()[0].user_text, "Evening, Ilse.");
}

/// A section handed more than its share (room other sections left unused) says so in the
/// Budgets table: Character guidance at 1 % showed its sheets' tokens with no word.
#[test]
fn a_section_over_its_share_says_it_takes_unused_room() {
    use lorekeeper::prompting::Section;
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut harness, _) = demo_library(dir.path(), 1400.0);
    harness.run();
    nav(&harness, "Budgets");
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().budgets().prompt().is_some());
    harness.run();
    assert!(harness.query_by_label_contains("takes unused room from other sections").is_none(), "every section within its share");
    harness.get_by_role_and_label(Role::Slider, "Character guidance %").set_value_accesskit(1.0);
    harness.run();
    let ledger = harness.state().scene().budgets().ledger().expect("ledger").clone();
    let guidance = ledger.section(Section::CharacterGuidance).expect("character guidance");
    let share = (ledger.max_context_tokens as f64 * 0.01).floor() as u32;
    assert!(guidance.allocated > share + 1, "the sheets take more than 1 %: {} of {share}", guidance.allocated);
    let note = format!("its share ≈ {share}; takes unused room from other sections");
    assert!(harness.query_by_label(&note).is_some(), "{note:?} is not shown");
}

/// Without a keyring the Providers panel says so in one calm line, naming the variable,
/// only for a profile that needs a key; Store and Clear are off; and the embedded model's
/// profile shows no HTTP options.
#[test]
fn no_keyring_is_one_calm_line_and_the_embedded_profile_has_no_http_options() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    config.upsert_profile(ProviderProfile {
        name: "remote".into(),
        kind: ProviderKind::Openai,
        model: "m".into(),
        base_url: Some("https://api.example.invalid/v1".into()),
        api_key_env: Some("LOREKEEPER_TEST_NO_SUCH_KEY".into()),
        ..Default::default()
    });
    config.upsert_profile(ProviderProfile {
        name: "llama".into(),
        kind: ProviderKind::Openai,
        model: "m".into(),
        base_url: Some("http://127.0.0.1:9/v1".into()),
        ..Default::default()
    });
    let mut harness = harness(start_engine(dir.path(), &config), 900.0);
    harness.run();
    nav(&harness, "Providers");
    harness.run();
    let no_keyring = |profile: &str| lorekeeper::engine::LlmEvent::KeyStatus {
        profile: profile.into(),
        source: lorekeeper::llm::keyring::KeySource::None,
        action: lorekeeper::engine::KeyAction::Checked,
        problem: Some("no keyring available (zbus error: org.freedesktop.DBus.Error.ServiceUnknown); keys come from environment variables only".into()),
        keyring: false,
    };
    for profile in ["remote", "llama"] {
        harness.get_by_label(profile).click();
        run_until(&mut harness, Duration::from_secs(20), |app| app.providers().key_status(profile).is_some());
        // What the OS keyring answers on a machine with no Secret Service.
        harness.state().engine().context().emit(no_keyring(profile));
        run_until(&mut harness, Duration::from_secs(20), |app| app.providers().key_status(profile).is_some_and(|(_, p)| p.is_some()));
        harness.run();
        assert!(harness.query_by_label_contains("zbus").is_none(), "no raw keyring error on {profile}");
        assert!(harness.get_by_label("Store in keyring").accesskit_node().is_disabled());
        assert!(harness.get_by_label("Clear from keyring").accesskit_node().is_disabled());
    }
    // The keyless local server needs no key: no notice.
    assert!(harness.query_by_label_contains("No keyring on this machine").is_none());
    harness.get_by_label("remote").click();
    harness.run();
    assert!(harness.query_by_label("No keyring on this machine: set $LOREKEEPER_TEST_NO_SUCH_KEY to give this profile its key.").is_some());

    harness.get_by_label("local").click();
    harness.run();
    for http in ["Server enforces JSON schema", "Send the key over plain http", "Timeouts (s): connect / idle / total"] {
        assert!(harness.query_by_label(http).is_none(), "{http} is shown for the embedded model");
    }
    assert!(harness.query_all_by_label("Timeouts (s): idle / total").next().is_some());
    assert!(harness.query_by_label("Cache identical requests").is_some());
}

/// The Injected memories header shows the query as written, on one line (it showed
/// `"\"Keep…\n…"` escapes), and counts in the singular for one.
#[test]
fn the_injected_memories_header_shows_the_query_plainly_on_one_line() {
    use lorekeeper::memory::{MemoryKind, RetrievalHit, Scope, injections};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let mut harness = harness(start_engine(dir.path(), &config), 900.0);
    let hit = RetrievalHit {
        id: "t1".into(),
        text: "The lamp was lit at dusk.".into(),
        speaker: Some("user".into()),
        score: 0.8,
        keyword_score: Some(1.0),
        vector_score: None,
        rank: 1,
        keyword_rank: Some(1),
        vector_rank: None,
        kind: MemoryKind::Turn,
        scope: Scope::world(),
        session: None,
        time: None,
        pinned: false,
        edited: false,
    };
    let query = "\"Keep the lamp lit,\" she said.\n\nAnd the door?\n";
    let store = harness.state().engine().context().store.clone();
    store.with(|c| injections::record(c, "companion:Mira", query, &[hit])).expect("an injection");
    harness.run();
    nav(&harness, "Memory");
    harness.run();
    harness.get_by_label_contains("Injected into prompts").click();
    run_until(&mut harness, Duration::from_secs(10), |app| !app.memory().injections().is_empty());
    harness.run();
    let header = "1 memory for “\"Keep the lamp lit,\" she said. And the door?” at ";
    assert!(harness.query_by_label_contains(header).is_some(), "no header {header:?}");
    assert!(harness.query_by_label_contains("\\n").is_none(), "no escapes");
}

/// "Find character" says why a character whose identity run is still going offers no
/// Add: they are not in the library until the run completes.
#[test]
fn find_character_says_a_character_still_in_development_is_not_castable_yet() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/identity/script.json");
    let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(shipped).unwrap()).unwrap();
    script["rules"].as_array_mut().unwrap().insert(
        0,
        serde_json::json!({ "when": { "system_contains": "Personality specialist" }, "reply": { "text": "{}", "delay_ms": 60000 } }),
    );
    let slow = dir.path().join("slow.json");
    std::fs::write(&slow, script.to_string()).unwrap();
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile { name: "script".into(), kind: ProviderKind::Scripted, model: "identity-script".into(), path: Some(slow), ..Default::default() });
    config.default_profile = "script".into();
    let engine = start_engine(dir.path(), &config);
    lorekeeper::scene::demo::ensure(&engine.context().store).expect("demo");
    let mut harness = harness(engine, 1200.0);
    harness.run();
    nav(&harness, "Waves");
    harness.run();
    for (field, text) in [("Name", "Mira Voss"), ("Role", "lighthouse keeper"), ("Concept", "A keeper who guards the sea she fears.")] {
        type_into(&mut harness, field, text);
    }
    harness.get_by_label("Start development").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.identity().view().is_some_and(|v| v.checkpoints[0].record.status.is_working()));
    nav(&harness, "Campaigns");
    run_until(&mut harness, Duration::from_secs(20), |app| !app.campaigns().tree().worlds.is_empty());
    harness.run();
    harness.get_by_label("Settings of The Unlit Night").click();
    harness.run();
    let hint = "Mira Voss is still being developed: castable once their run in the Waves panel completes.";
    assert!(harness.query_by_label(hint).is_none(), "said only when their name is typed");
    type_into(&mut harness, "Find character", "mira");
    assert!(harness.query_by_label(hint).is_some(), "no word on why Mira Voss cannot be added");
    assert!(harness.query_by_label("Add Mira Voss").is_none());
    // Stop the slow agent before the test ends.
    let run = harness.state().identity().selected().unwrap().to_string();
    harness.state().engine().send(Command::Identity(lorekeeper::identity::IdentityCommand::Cancel { character_id: run, checkpoint: None })).unwrap();
}
