//! The workbench as a person uses it: the real app, the real engine, clicks and typing
//! through egui_kittest, and a local OpenAI-compatible server for the provider test.

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use lorekeeper::config::{Config, Paths};
use lorekeeper::engine::{self, Command, EngineHandle, Event};
use lorekeeper::llm::{ProviderKind, ProviderProfile};
use lorekeeper::ui::{PanelKind, WorkbenchApp};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A one-purpose OpenAI-compatible server: answers every chat completion with a short
/// SSE stream and usage, as llama.cpp's server does.
fn spawn_openai_stub() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let lower = line.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0u8; length];
                let _ = reader.read_exact(&mut body);
                let mut stream = reader.into_inner();
                let chunk = |text: &str| {
                    format!(
                        "data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"stub-model\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}},\"finish_reason\":null}}]}}\n\n"
                    )
                };
                let mut sse = String::new();
                sse.push_str(&chunk("Greetings, "));
                sse.push_str(&chunk("game master."));
                sse.push_str("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"stub-model\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n");
                sse.push_str("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"stub-model\",\"choices\":[],\"usage\":{\"prompt_tokens\":21,\"completion_tokens\":5,\"total_tokens\":26}}\n\n");
                sse.push_str("data: [DONE]\n\n");
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    sse.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(sse.as_bytes());
                let _ = stream.flush();
            });
        }
    });
    format!("http://{addr}/v1")
}

/// Frames `run()` may take to settle. Engine events arrive on their own threads and each
/// asks for a repaint, so a panel that loads something (Prompt, Memory) can need a few
/// more frames than kittest's default of 4 before it is still.
const MAX_STEPS: u64 = 64;

/// The engine on a new library in `dir` with `config` saved as its config file.
pub(crate) fn start_engine(dir: &Path, config: &Config) -> EngineHandle {
    let paths = Paths {
        config_file: dir.join("config.toml"),
        library_file: dir.join("library.sqlite"),
        log_dir: dir.join("logs"),
    };
    config.save(&paths.config_file).expect("save config");
    engine::start(paths).expect("engine starts")
}

pub(crate) fn harness(engine: EngineHandle, height: f32) -> Harness<'static, WorkbenchApp> {
    Harness::builder().with_max_steps(MAX_STEPS).with_size([1280.0, height]).build_eframe(move |cc| WorkbenchApp::new(&cc.egui_ctx, engine))
}

fn open_app(dir: &Path, config: &Config) -> Harness<'static, WorkbenchApp> {
    harness(start_engine(dir, config), 800.0)
}

/// The navigation bar's entry for a panel (the panel's own heading repeats the name).
fn nav<'h>(harness: &'h Harness<'_, WorkbenchApp>, title: &'h str) -> egui_kittest::Node<'h> {
    harness.get_all_by_label(title).next().expect("navigation entry")
}

/// A single- or multi-line text field by its label.
fn text_field<'h>(harness: &'h Harness<'_, WorkbenchApp>, label: &'h str) -> egui_kittest::Node<'h> {
    use egui::accesskit::Role;
    harness
        .query_by_role_and_label(Role::TextInput, label)
        .or_else(|| harness.query_by_role_and_label(Role::MultilineTextInput, label))
        .unwrap_or_else(|| panic!("no text field labelled {label:?}"))
}

/// The app on a new library holding the demo scene, answered by the shipped demo script
/// (the default profile is the embedded model when it is installed). Returns the scene id.
fn open_demo_scene(dir: &Path, height: f32) -> (Harness<'static, WorkbenchApp>, String) {
    let mut config = Config::default();
    config.default_profile = "demo".into();
    open_demo_scene_with(dir, &config, height)
}

/// [`open_demo_scene`] with another config.
fn open_demo_scene_with(dir: &Path, config: &Config, height: f32) -> (Harness<'static, WorkbenchApp>, String) {
    let engine = start_engine(dir, config);
    let scene = lorekeeper::scene::demo::ensure(&engine.context().store).expect("demo").expect("a new library gets the demo");
    (harness(engine, height), scene)
}

/// Open the Scene panel, say "I knock on the lighthouse door." and play the round.
fn play_first_round(harness: &mut Harness<'_, WorkbenchApp>) {
    write_first_message(harness);
    harness.get_by_label("Play round").click();
    wait_for_first_round(harness);
}

/// Open the Scene panel and type "I knock on the lighthouse door." into the message field.
fn write_first_message(harness: &mut Harness<'_, WorkbenchApp>) {
    harness.run();
    nav(harness, "Scene").click();
    run_until(harness, Duration::from_secs(20), |app| app.scene().snapshot().is_some());
    harness.run();
    text_field(harness, "Your message").click();
    harness.run();
    text_field(harness, "Your message").type_text("I knock on the lighthouse door.");
    harness.run();
}

fn wait_for_first_round(harness: &mut Harness<'_, WorkbenchApp>) {
    run_until(harness, Duration::from_secs(30), |app| app.scene().live().is_none() && app.scene().snapshot().is_some_and(|s| s.view.rounds == 1));
    harness.run();
}

/// The Scene panel brings a character of the library into the open scene's cast
/// (absent) and takes them out again.
#[test]
fn the_scene_panel_adds_a_character_to_the_cast_and_takes_them_out() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let engine = start_engine(dir.path(), &config);
    let scene = lorekeeper::scene::demo::ensure(&engine.context().store).expect("demo").expect("a new library gets the demo");
    lorekeeper::companion::demo::ensure(&engine.context().store).expect("demo companion");
    let mut harness = harness(engine, 1000.0);
    harness.run();
    nav(&harness, "Scene").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().snapshot().is_some());
    harness.run();
    let has_ilse = |app: &WorkbenchApp| app.scene().snapshot().and_then(|s| s.view.cast.iter().find(|c| c.name == "Ilse Marrow").map(|c| c.active));
    assert_eq!(has_ilse(harness.state()), None);
    text_field(&harness, "Cast change").click();
    harness.run();
    text_field(&harness, "Cast change").type_text("Ilse");
    harness.run();
    harness.get_by_label("Add to cast").click();
    run_until(&mut harness, Duration::from_secs(20), |app| has_ilse(app).is_some());
    assert_eq!(has_ilse(harness.state()), Some(false), "in the cast, absent until the Director brings her in");
    assert_eq!(harness.state().scene().last_error(), None);
    harness.run();
    text_field(&harness, "Cast change").click();
    harness.run();
    text_field(&harness, "Cast change").type_text("Ilse Marrow");
    harness.run();
    harness.get_by_label("Remove from cast").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().snapshot().is_some_and(|s| s.view.id == scene && s.view.cast.iter().all(|c| c.name != "Ilse Marrow")));
}

/// In a narrow window the Campaigns panel puts the tree above the settings, so the
/// settings' buttons stay on screen, and a name typed into "New campaign" is made with
/// Enter as with the button.
#[test]
fn a_campaign_is_made_in_a_narrow_window_with_enter() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let engine = start_engine(dir.path(), &config);
    lorekeeper::scene::demo::ensure(&engine.context().store).expect("demo");
    let width = 560.0;
    let mut harness =
        Harness::builder().with_max_steps(MAX_STEPS).with_size([width, 900.0]).build_eframe(move |cc| WorkbenchApp::new(&cc.egui_ctx, engine));
    harness.run();
    nav(&harness, "Campaigns").click();
    run_until(&mut harness, Duration::from_secs(20), |app| !app.campaigns().tree().worlds.is_empty());
    harness.run();
    harness.get_by_label("Settings of world The Saltmarsh Coast").click();
    harness.run();
    let button = harness.get_by_label("Create campaign").rect();
    assert!(button.max.x <= width, "the button is on screen: {button:?}");
    text_field(&harness, "New campaign").click();
    harness.run();
    text_field(&harness, "New campaign").type_text("Harbour Nights");
    harness.run();
    harness.key_press(egui::Key::Enter);
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.campaigns().tree().worlds.iter().flat_map(|w| &w.campaigns).any(|c| c.name == "Harbour Nights")
    });
}

/// The memory browser follows what a round writes and an undo takes back: its count and
/// its list of the newest memories update without a Refresh.
#[test]
fn the_memory_browser_follows_a_round_and_its_undo() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut harness, _scene) = open_demo_scene(dir.path(), 1000.0);
    harness.run();
    nav(&harness, "Memory").click();
    let turns = |app: &WorkbenchApp| app.memory().hits().iter().filter(|h| h.kind == lorekeeper::memory::MemoryKind::Turn).count();
    run_until(&mut harness, Duration::from_secs(20), |app| app.memory().stats().is_some());
    let before = harness.state().memory().stats().map(|s| s.turns).unwrap_or(0);
    play_first_round(&mut harness);
    run_until(&mut harness, Duration::from_secs(20), |app| app.memory().stats().is_some_and(|s| s.turns > before) && turns(app) > 0);
    harness.run();
    harness.get_by_label("Undo last round").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.memory().stats().is_some_and(|s| s.turns == before) && turns(app) == 0);
}

/// What another panel (or another process) changes is shown where it matters without a
/// Refresh: a tracker set on the campaign reaches the open scene's state, and a deleted
/// world leaves the Campaigns editor instead of staying there to be saved into nothing.
#[test]
fn a_campaign_change_reaches_the_scene_panel_and_a_deleted_world_leaves_the_editor() {
    use lorekeeper::scene::author::AuthorCommand;
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut harness, _scene) = open_demo_scene(dir.path(), 1000.0);
    harness.run();
    nav(&harness, "Scene").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().snapshot().is_some());
    let campaign = harness.state().scene().snapshot().unwrap().view.campaign_id.clone();
    let edit = lorekeeper::scene::authoring::StateEdit::Tracker { name: "rain".into(), value: Some("heavy".into()) };
    harness.state().engine().send(Command::Scene(lorekeeper::scene::SceneCommand::Author(AuthorCommand::EditState { campaign, edit }))).unwrap();
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.scene().snapshot().is_some_and(|s| s.view.trackers.get("rain") == Some(&serde_json::json!("heavy")))
    });

    nav(&harness, "Campaigns").click();
    run_until(&mut harness, Duration::from_secs(20), |app| !app.campaigns().tree().worlds.is_empty());
    harness.run();
    harness.get_by_label("Settings of world The Saltmarsh Coast").click();
    harness.run();
    assert!(harness.query_by_label("World The Saltmarsh Coast").is_some());
    let world = harness.state().campaigns().tree().worlds[0].id.clone();
    let delete = AuthorCommand::Delete { level: lorekeeper::scene::authoring::Level::World, key: world, confirmed: true };
    harness.state().engine().send(Command::Scene(lorekeeper::scene::SceneCommand::Author(delete))).unwrap();
    run_until(&mut harness, Duration::from_secs(20), |app| app.campaigns().tree().worlds.is_empty());
    harness.run();
    assert!(harness.query_by_label("World The Saltmarsh Coast").is_none(), "the deleted world's settings are gone");
    assert!(harness.query_by_label("Select a world, campaign, arc or scene.").is_some());
}

/// A plain V2 card for Maren Vosk, a lock-keeper.
fn maren_card() -> serde_json::Value {
    serde_json::json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": {
        "name": "Maren Vosk", "description": "A lock-keeper.", "personality": "", "scenario": "", "first_mes": "", "mes_example": "",
        "creator_notes": "", "system_prompt": "", "post_history_instructions": "", "alternate_greetings": [], "tags": [], "creator": "",
        "character_version": "1", "extensions": {} } })
}

/// Open the Library panel once Maren Vosk is listed. A library with a card of the
/// user's gets no demo characters, so no row joins later to move under the pointer.
fn open_library_with_maren(harness: &mut Harness<'_, WorkbenchApp>) {
    harness.run();
    nav(harness, "Library").click();
    run_until(harness, Duration::from_secs(20), |app| app.library().characters().iter().any(|c| c.name == "Maren Vosk"));
    harness.run();
}

/// Step the app until `done` holds, failing the test after `limit`.
#[track_caller]
pub(crate) fn run_until(harness: &mut Harness<'_, WorkbenchApp>, limit: Duration, mut done: impl FnMut(&WorkbenchApp) -> bool) {
    let start = Instant::now();
    while !done(harness.state()) {
        assert!(start.elapsed() < limit, "condition not reached within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
        harness.step();
    }
}

/// Step the app until a widget labelled `label` is on screen (a busy machine may need
/// more frames than `run()` takes before an event's result is drawn).
#[track_caller]
pub(crate) fn step_until_shown(harness: &mut Harness<'_, WorkbenchApp>, label: &str) {
    let start = Instant::now();
    while harness.query_by_label(label).is_none() {
        assert!(start.elapsed() < Duration::from_secs(20), "{label:?} not shown within 20 s");
        std::thread::sleep(Duration::from_millis(10));
        harness.step();
    }
}

#[test]
fn panels_switch_and_a_profile_tests_against_a_local_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base_url = spawn_openai_stub();
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile {
        name: "stub".into(),
        kind: ProviderKind::Openai,
        base_url: Some(base_url),
        model: "stub-model".into(),
        ..Default::default()
    });
    config.default_profile = "stub".into();
    let mut harness = open_app(dir.path(), &config);
    harness.run();

    // Every panel of the layout can be opened from the navigation bar.
    for kind in PanelKind::ALL {
        nav(&harness, kind.title()).click();
        harness.run();
        assert_eq!(harness.state().panel(), kind);
    }

    // Providers: the default profile is selected; test it against the local server.
    nav(&harness, "Providers").click();
    harness.run();
    harness.get_by_label("Test profile").click();
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.provider_test("stub").is_some_and(|t| t.outcome.is_some())
    });
    let outcome = harness.state().provider_test("stub").and_then(|t| t.outcome.clone()).expect("outcome");
    let text = outcome.expect("the profile test passes");
    assert!(text.contains("Greetings, game master."), "{text}");
    assert!(text.contains("21 + 5 tokens"), "real usage is shown: {text}");
    harness.run();
    assert!(harness.query_by_label_contains("Test passed").is_some());
}

#[test]
fn editing_and_saving_a_profile_persists_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = open_app(dir.path(), &Config::default());
    harness.run();
    nav(&harness, "Providers").click();
    harness.run();
    harness.get_by_label("New profile").click();
    harness.run();
    harness.get_by_role_and_label(egui::accesskit::Role::TextInput, "Model").click();
    harness.run();
    harness.get_by_role_and_label(egui::accesskit::Role::TextInput, "Model").type_text("-large");
    harness.run();
    harness.get_by_label("Save profile").click();
    let config_file = dir.path().join("config.toml");
    run_until(&mut harness, Duration::from_secs(10), |app| app.engine().context().config().profile("profile-1").is_some());
    let saved = Config::load(&config_file).expect("config reloads");
    assert_eq!(saved.profile("profile-1").map(|p| p.model.as_str()), Some("model-name-large"));
}

#[test]
fn approving_one_checkpoint_and_rejecting_another_regenerates_it_in_the_inspector() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/identity/script.json");
    config.upsert_profile(ProviderProfile {
        name: "script".into(),
        kind: ProviderKind::Scripted,
        model: "identity-script".into(),
        path: Some(script),
        ..Default::default()
    });
    config.default_profile = "script".into();
    let mut harness = open_app(dir.path(), &config);
    harness.run();
    assert_eq!(harness.state().panel(), PanelKind::Waves);

    // Fill the seed form and start.
    for (field, text) in [("Name", "Mira Voss"), ("Role", "lighthouse keeper"), ("Concept", "A keeper who guards the sea she fears.")] {
        text_field(&harness, field).click();
        harness.run();
        text_field(&harness, field).type_text(text);
        harness.run();
    }
    harness.get_by_label("Start development").click();
    let awaiting = |app: &WorkbenchApp, n: usize, status: &str| {
        app.identity().view().is_some_and(|v| {
            v.checkpoints.iter().filter(|c| c.record.status.as_str() == status).count() == n
        })
    };
    run_until(&mut harness, Duration::from_secs(20), |app| awaiting(app, 2, "awaiting_approval"));
    // The form is ready for the next character.
    assert_eq!(text_field(&harness, "Name").value().as_deref(), Some(""));

    // Approve checkpoint 1 in the inspector.
    nav(&harness, "Checkpoints").click();
    harness.run();
    harness.get_by_label_contains("1 Personality").click();
    harness.run();
    harness.get_by_label("Approve").click();
    run_until(&mut harness, Duration::from_secs(20), |app| awaiting(app, 1, "approved"));

    // Reject checkpoint 2 with feedback and watch version 2 arrive.
    harness.get_by_label_contains("2 Backstory").click();
    harness.run();
    harness.get_by_role_and_label(egui::accesskit::Role::TextInput, "Feedback").click();
    harness.run();
    harness.get_by_role_and_label(egui::accesskit::Role::TextInput, "Feedback").type_text("Give her a sister.");
    harness.run();
    harness.get_by_label("Reject with feedback").click();
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.identity().view().is_some_and(|v| {
            let cp = &v.checkpoints[1];
            cp.record.current_version == 2 && cp.record.status.as_str() == "awaiting_approval"
        })
    });
    harness.run();
    assert_eq!(harness.state().identity().inspecting(), 2);
    assert!(harness.query_by_label_contains("Version 2 of 2").is_some(), "the inspector shows the regenerated version");
    assert!(harness.query_by_label_contains("Answers feedback: Give her a sister.").is_some());
    let view = harness.state().identity().view().expect("view");
    assert!(view.checkpoints[1].versions[1].prompt.to_string().contains("Give her a sister."));
}

#[test]
fn a_budget_slider_changes_the_sections_tokens_and_the_prompt_preview() {
    use lorekeeper::prompting::Section;
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut harness, scene) = open_demo_scene(dir.path(), 1400.0);
    harness.run();
    nav(&harness, "Budgets").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().budgets().prompt().is_some());
    assert_eq!(harness.state().scene().selected(), Some(scene.as_str()));
    harness.run();

    let section = |app: &WorkbenchApp| {
        let ledger = app.scene().budgets().ledger().expect("ledger");
        let s = ledger.section(Section::CharacterGuidance).expect("section");
        (s.allocated, s.kept.len())
    };
    let (allocated_before, kept_before) = section(harness.state());
    let prompt_before = harness.state().scene().budgets().prompt().expect("prompt").to_string();
    assert!(kept_before > 0, "the demo cast is in the character guidance");
    assert!(prompt_before.contains("Wren Talloway"), "{prompt_before}");
    assert!(harness.query_all_by_label(&allocated_before.to_string()).next().is_some(), "the allocation is shown");
    // The whole prompt as sent is counted, the JSON Schema the Director's call appends
    // included, beside the reply's cap.
    let appended = harness.state().scene().budgets().preview().expect("preview").reply.appended;
    assert!(appended > 300, "the Director's schema is counted: {appended}");
    assert!(harness.query_by_label_contains(&format!("({appended} of them the reply's JSON Schema)")).is_some(), "the reserve names the schema");
    assert!(harness.query_by_label_contains("Next call — prompt ").is_some(), "the whole prompt and the reply are shown");

    // Move the slider to nothing: the character sheets no longer fit.
    harness.get_by_role_and_label(egui::accesskit::Role::Slider, "Character guidance %").set_value_accesskit(0.0);
    harness.run();
    let (allocated_after, kept_after) = section(harness.state());
    assert!(allocated_after < allocated_before, "{allocated_after} < {allocated_before}");
    assert!(kept_after < kept_before, "some sheets no longer fit: {kept_after} < {kept_before}");
    let prompt_after = harness.state().scene().budgets().prompt().expect("prompt").to_string();
    assert_ne!(prompt_after, prompt_before, "the prompt preview follows the slider");
    assert!(prompt_after.len() < prompt_before.len());
    assert!(harness.query_all_by_label(&allocated_after.to_string()).next().is_some(), "the new allocation is shown");

    // Saved for the campaign, the shares are what its rounds use.
    assert!(harness.query_by_label_contains("tokens for the instructions and the turn").is_some(), "the reserve is shown");
    harness.get_by_label("Save for this campaign").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().budgets().preview().is_some_and(|p| p.campaign_plan));
    let store = lorekeeper::store::Store::open(dir.path().join("library.sqlite")).unwrap();
    let plan = store.with(|c| lorekeeper::scene::authoring::campaign_budgets_of_scene(c, &scene)).unwrap().expect("saved");
    assert_eq!(plan.percent(Section::CharacterGuidance), 0.0);
    harness.run();
    harness.get_by_label("Use the configuration's shares").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().budgets().preview().is_some_and(|p| !p.campaign_plan));
}

/// The Budgets panel previews a character's next call; when that character leaves the
/// scene, the preview moves to one who is there instead of waiting for ever (and the
/// Scene panel shows no error about the character that left).
#[test]
fn the_budget_preview_of_a_character_who_left_the_scene_moves_to_one_who_is_there() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut harness, scene) = open_demo_scene(dir.path(), 1400.0);
    harness.run();
    nav(&harness, "Budgets").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().budgets().prompt().is_some());
    harness.run();
    harness.get_by_label("a character").click();
    let previewed = |app: &WorkbenchApp| app.scene().budgets().preview().and_then(|p| p.character.as_ref().map(|c| c.name.clone()));
    run_until(&mut harness, Duration::from_secs(20), |app| previewed(app).is_some());
    harness.run();
    let active: Vec<String> =
        harness.state().scene().snapshot().expect("snapshot").view.active().map(|c| c.name.clone()).collect();
    let chosen = active.last().expect("someone is present").clone();
    harness.get_by_role_and_label(egui::accesskit::Role::ComboBox, "Character").click();
    harness.run();
    harness.get_by_label(&chosen).click();
    run_until(&mut harness, Duration::from_secs(20), |app| previewed(app).as_deref() == Some(chosen.as_str()));
    // The character leaves the scene.
    nav(&harness, "Scene").click();
    harness.run();
    text_field(&harness, "Cast change").click();
    harness.run();
    text_field(&harness, "Cast change").type_text(&chosen);
    harness.run();
    harness.get_by_label("Remove from cast").click();
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.scene().snapshot().is_some_and(|s| s.view.id == scene && s.view.cast.iter().all(|c| c.name != chosen))
    });
    nav(&harness, "Budgets").click();
    run_until(&mut harness, Duration::from_secs(20), |app| previewed(app).is_some_and(|name| name != chosen));
    harness.run();
    assert_eq!(harness.state().scene().last_error(), None);
}

#[test]
fn playing_a_round_in_the_scene_panel_shows_the_reply_and_the_directors_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut harness, _scene) = open_demo_scene(dir.path(), 1000.0);
    harness.run();
    nav(&harness, "Scene").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().snapshot().is_some());
    harness.run();
    text_field(&harness, "Your message").click();
    harness.run();
    text_field(&harness, "Your message").type_text("I knock on the lighthouse door.");
    harness.run();
    harness.get_by_label("Play round").click();
    run_until(&mut harness, Duration::from_secs(30), |app| {
        app.scene().last_error().is_some()
            || (app.scene().live().is_none() && app.scene().snapshot().is_some_and(|s| s.view.rounds == 1))
    });
    harness.run();
    assert_eq!(harness.state().scene().last_error(), None);
    let snapshot = harness.state().scene().snapshot().expect("snapshot");
    assert!(snapshot.messages.iter().any(|m| m.content == "I knock on the lighthouse door."));
    let reply = snapshot.messages.iter().find(|m| m.character_id.is_some()).expect("a character replied");
    assert!(harness.query_all_by_label(&reply.content).next().is_some(), "the reply is in the transcript");
    assert!(harness.query_by_label_contains("Director — round 1").is_some());
    assert!(harness.query_by_label_contains("1. ").is_some(), "the acting order is listed");
    // The round's ledgers feed the Budgets panel.
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.scene().budgets().preview().is_some_and(|p| p.telemetry.len() == 1 && p.last_round.is_some())
    });
}

#[test]
fn the_cancel_button_stops_a_running_round_and_saves_nothing() {
    a_running_round_is_stopped_by(|harness| harness.get_by_label("Cancel round").click());
}

#[test]
fn escape_stops_a_running_round_as_the_button_does() {
    a_running_round_is_stopped_by(|harness| harness.key_press(egui::Key::Escape));
}

/// Play a slow round, stop it with `cancel` while it streams, and check nothing of it
/// was saved and the typed message is given back.
fn a_running_round_is_stopped_by(cancel: impl FnOnce(&mut Harness<'static, WorkbenchApp>)) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut harness, scene) = slow_round_streaming(dir.path());
    let context = harness.state().engine().context().clone();
    cancel(&mut harness);
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().was_cancelled() || app.scene().last_error().is_some());
    harness.run();
    assert_eq!(harness.state().scene().last_error(), None);
    assert!(harness.state().scene().live().is_none());
    assert!(harness.query_by_label_contains("nothing of it was saved").is_some());
    assert!(harness.query_by_label("Cancel round").is_none());
    // `round_cancelled` is sent after the round gave up: the store is final now.
    let stored = context.store.with(|c| lorekeeper::scene::records::load_view(c, &scene)).expect("view");
    assert_eq!(stored.rounds, 0);
    let messages = context.store.with(|c| lorekeeper::scene::records::recent_messages(c, &scene, 10)).expect("messages");
    assert!(messages.is_empty(), "nothing of the cancelled round is stored");
    assert_eq!(harness.state().scene().input(), "I hand the keeper the sealed letter.", "the typed message is given back");
}

/// Closing the window while a round streams asks first; "Keep working" keeps it open
/// and the round going. With nothing running, a close is not held up.
#[test]
fn closing_while_a_round_runs_asks_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut harness, _scene) = slow_round_streaming(dir.path());
    // While the round plays, the user's line is under the campaign persona's name, as stored.
    assert!(harness.query_by_label("Juno:").is_some(), "the persona names the user's line");
    assert!(harness.query_by_label("You:").is_none());
    let close = |harness: &mut Harness<'static, WorkbenchApp>| {
        harness.input_mut().viewports.entry(egui::ViewportId::ROOT).or_default().events.push(egui::ViewportEvent::Close);
        harness.step();
        harness.step();
    };
    close(&mut harness);
    assert!(harness.state().close_guard().is_some_and(|w| w.contains("a scene round")), "{:?}", harness.state().close_guard());
    assert!(harness.query_by_label_contains("Still running: a scene round").is_some());
    harness.get_by_label("Keep working").click();
    harness.step();
    harness.step();
    assert!(harness.state().close_guard().is_none());
    assert!(harness.state().scene().live().is_some(), "the round goes on");
    harness.get_by_label("Cancel round").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().live().is_none());
    close(&mut harness);
    assert!(harness.state().close_guard().is_none(), "nothing runs: nothing to ask");
}

/// The demo scene with a round streaming slowly (Marguerite writes 250 ms a fragment),
/// started from the Scene panel as a user would.
fn slow_round_streaming(dir: &Path) -> (Harness<'static, WorkbenchApp>, String) {
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile {
        name: "slow".into(),
        kind: ProviderKind::Scripted,
        model: "scene-script".into(),
        path: Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scene/slow-script.json")),
        ..Default::default()
    });
    config.default_profile = "slow".into();
    let (mut harness, scene) = open_demo_scene_with(dir, &config, 1000.0);
    harness.run();
    nav(&harness, "Scene").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().snapshot().is_some());
    harness.run();
    assert!(harness.query_by_label("Cancel round").is_none(), "no round, no cancel button");
    text_field(&harness, "Your message").click();
    harness.run();
    text_field(&harness, "Your message").type_text("I hand the keeper the sealed letter.");
    harness.run();
    harness.get_by_label("Play round").click();
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.scene().live().is_some_and(|l| l.turns.iter().any(|t| t.name == "Marguerite Siltborne" && !t.text.is_empty()))
    });
    harness.step(); // spinners repaint forever while the round streams: step, not run
    (harness, scene)
}

#[test]
fn sending_a_chat_message_streams_the_reply_and_updates_the_packet_view() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let mut harness = open_app(dir.path(), &config);
    harness.run();
    nav(&harness, "Chat").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().selected().is_some());
    harness.run();
    let chat = harness.state().chat();
    let ilse = chat.characters().iter().find(|c| c.name == "Ilse Marrow").expect("the demo companion is in the list");
    assert_eq!(chat.selected(), Some(ilse.id.as_str()), "and selected");
    assert!(harness.query_by_label_contains("no chat yet").is_some());
    text_field(&harness, "Message").click();
    harness.run();
    text_field(&harness, "Message").type_text("Hello Ilse, I'm back in town!");
    harness.run();
    harness.get_by_label("Send").click();
    // The reply streams in: partial text shows while the turn runs, with a Cancel button.
    run_until(&mut harness, Duration::from_secs(30), |app| app.chat().live().is_some_and(|l| l.text.len() > 10));
    // A spinner keeps repainting while the reply streams: step, do not wait to settle.
    harness.step();
    assert!(harness.query_by_label("Cancel").is_some(), "a streaming reply can be cancelled");
    let partial = harness.state().chat().live().expect("live").text.clone();
    assert!(harness.query_all_by_label_contains(&partial).next().is_some(), "the partial reply is on screen: {partial:?}");
    run_until(&mut harness, Duration::from_secs(30), |app| app.chat().turns().len() == 1 || app.chat().error().is_some());
    harness.run();
    assert_eq!(harness.state().chat().error(), None);
    let turn = harness.state().chat().turns()[0].clone();
    assert!(turn.reply.starts_with("Back from the city already?"), "{}", turn.reply);
    // Shown as prose: the action in italics, its asterisks gone.
    assert!(turn.reply.contains("*pulls a second stool to the table*"), "{}", turn.reply);
    let shown = format!("Ilse Marrow: {}", lorekeeper::ui::prose::plain(&turn.reply));
    assert!(shown.contains("already? pulls a second stool to the table Sit."), "{shown}");
    assert!(harness.query_all_by_label_contains(&shown).next().is_some(), "{shown}");
    // The "Raw text" switch shows it as written, asterisks and all.
    harness.get_by_label("Raw text").click();
    harness.run();
    assert!(harness.query_all_by_label_contains(&format!("Ilse Marrow: {}", turn.reply)).next().is_some(), "raw: {}", turn.reply);
    harness.get_by_label("Raw text").click();
    harness.run();
    assert!(harness.query_all_by_label_contains(&shown).next().is_some(), "prose again: {shown}");
    // Beside it, the packet as sent: its blocks with their token counts.
    let view = harness.state().chat().packet().expect("packet view");
    assert!(view.committed);
    let input = view.packet.block("user_input").expect("user input block");
    assert!(input.text.contains("I'm back in town"));
    assert!(harness.query_all_by_label_contains(&format!("<user_input>  {}", input.tokens)).next().is_some());
    assert!(harness.query_all_by_label_contains("<system_directive>").next().is_some());

    // The Prompt panel lists the call with its messages exactly as sent.
    nav(&harness, "Prompt").click();
    run_until(&mut harness, Duration::from_secs(20), |app| !app.prompt().calls().is_empty());
    harness.run();
    let call = harness.state().prompt().calls()[0].clone();
    assert_eq!(call.request.messages, view_messages(&harness));
    assert!(harness.query_all_by_label_contains("Reply (stop)").next().is_some());
    assert!(harness.query_all_by_label_contains("I'm back in town").next().is_some());
}

/// A regenerate that fails leaves the message box as it was (it used to fill it with the
/// last message the user had already sent, one Send from a duplicate), and the packet
/// beside the chat says no reply was kept instead of "sending" for ever.
#[test]
fn a_failed_regenerate_leaves_the_message_box_empty_and_the_packet_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("script.json");
    let fail = serde_json::json!({ "fail": { "kind": "http", "status": 400, "message": "the model is overloaded" } });
    std::fs::write(&script, serde_json::json!({ "default": "[Ilse Marrow]: Sit, then." }).to_string()).unwrap();
    let mut config = Config::default();
    config.upsert_profile(lorekeeper::llm::ProviderProfile {
        name: "script".into(),
        kind: lorekeeper::llm::ProviderKind::Scripted,
        model: "s".into(),
        path: Some(script.clone()),
        ..Default::default()
    });
    config.default_profile = "script".into();
    let mut harness = open_app(dir.path(), &config);
    harness.run();
    nav(&harness, "Chat").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().selected().is_some());
    harness.run();
    text_field(&harness, "Message").click();
    harness.run();
    text_field(&harness, "Message").type_text("Evening, Ilse.");
    harness.run();
    harness.get_by_label("Send").click();
    run_until(&mut harness, Duration::from_secs(30), |app| app.chat().turns().len() == 1 || app.chat().error().is_some());
    harness.run();
    assert_eq!(harness.state().chat().error(), None);
    // The provider breaks down (the script is read again for each turn).
    std::fs::write(&script, serde_json::json!({ "default": fail }).to_string()).unwrap();
    harness.get_by_label("Regenerate").click();
    run_until(&mut harness, Duration::from_secs(30), |app| app.chat().error().is_some());
    harness.run();
    assert!(harness.state().chat().error().is_some_and(|e| e.contains("overloaded")), "{:?}", harness.state().chat().error());
    assert_eq!(text_field(&harness, "Message").value().as_deref(), Some(""), "the box is left as it was");
    let view = harness.state().chat().packet().expect("packet view");
    assert!(!view.committed && view.abandoned);
    assert!(harness.query_by_label_contains("no reply was kept").is_some());
}

/// Pick `name` in the Chat panel's Character list.
fn pick_chat_character(harness: &mut Harness<'_, WorkbenchApp>, name: &str) {
    harness.get_by_label("Character").click();
    harness.run();
    harness.get_by_label_contains(&format!("{name} —")).click();
    harness.run();
    let id = harness.state().chat().characters().iter().find(|c| c.name == name).map(|c| c.id.clone());
    assert_eq!(harness.state().chat().selected(), id.as_deref(), "{name} is open");
}

/// A failed send's error and the words given back belong to that chat: picking another
/// character shows that one's own (none), and coming back brings them again. They stayed
/// on screen, one Send from posting Odile's message to Bastien.
#[test]
fn a_failed_sends_error_and_draft_stay_with_their_own_chat() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("script.json");
    let fail = serde_json::json!({ "fail": { "kind": "http", "status": 400, "message": "the model is overloaded" } });
    std::fs::write(&script, serde_json::json!({ "default": fail }).to_string()).unwrap();
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile { name: "script".into(), kind: ProviderKind::Scripted, model: "s".into(), path: Some(script), ..Default::default() });
    config.default_profile = "script".into();
    let engine = start_engine(dir.path(), &config);
    // The demo companion first: a library with a card of the user's gets none.
    lorekeeper::companion::demo::ensure(&engine.context().store).expect("demo");
    lorekeeper::interop::library::import_bytes(&engine.context().store, maren_card().to_string().as_bytes(), "maren").expect("import");
    let mut harness = harness(engine, 900.0);
    harness.run();
    nav(&harness, "Chat").click();
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.chat().selected().is_some() && ["Ilse Marrow", "Maren Vosk"].iter().all(|n| app.chat().characters().iter().any(|c| c.name == *n))
    });
    harness.run();
    pick_chat_character(&mut harness, "Ilse Marrow");
    text_field(&harness, "Message").click();
    harness.run();
    text_field(&harness, "Message").type_text("For Ilse only.");
    harness.run();
    harness.get_by_label("Send").click();
    run_until(&mut harness, Duration::from_secs(30), |app| app.chat().error().is_some());
    harness.run();
    assert_eq!(harness.state().chat().draft(), "For Ilse only.", "the words come back to send again");
    // Under the chat (and in the event log, which keeps it).
    let shown = harness.query_all_by_label_contains("overloaded").count();
    assert!(shown >= 1);

    pick_chat_character(&mut harness, "Maren Vosk");
    assert_eq!(harness.state().chat().error(), None, "Ilse's error is not Maren's");
    assert_eq!(harness.query_all_by_label_contains("overloaded").count(), shown - 1, "gone from under the chat");
    assert_eq!(text_field(&harness, "Message").value().as_deref(), Some(""), "Ilse's words are not sent to Maren");
    text_field(&harness, "Message").click();
    harness.run();
    text_field(&harness, "Message").type_text("For Maren.");
    harness.run();

    pick_chat_character(&mut harness, "Ilse Marrow");
    assert!(harness.state().chat().error().is_some_and(|e| e.contains("overloaded")), "{:?}", harness.state().chat().error());
    assert_eq!(harness.state().chat().draft(), "For Ilse only.");
    pick_chat_character(&mut harness, "Maren Vosk");
    assert_eq!(harness.state().chat().draft(), "For Maren.");
    assert_eq!(harness.state().chat().error(), None);
}

/// The Character list keeps the order it opened with while it is open: a list sorted by
/// the latest chat moved its rows under the pointer as chats were written, and a click
/// went to the wrong character. Closed and opened again, it is in the new order.
#[test]
fn the_chat_character_list_holds_its_order_while_open() {
    use lorekeeper::companion::CompanionEvent;
    use lorekeeper::companion::model::ChatCharacter;
    use lorekeeper::ui::chat::ChatPanel;
    let character = |id: &str, name: &str, last: Option<&str>| ChatCharacter {
        id: id.into(),
        name: name.into(),
        origin: "card".into(),
        turns: 0,
        last_chat_at: last.map(str::to_string),
    };
    let mut panel = ChatPanel::default();
    let mut outbox = Vec::new();
    let first = vec![character("a", "Ada", None), character("b", "Bastien", None)];
    panel.apply(&CompanionEvent::Characters { characters: first }, &mut outbox);
    let mut harness = Harness::builder().with_max_steps(MAX_STEPS).with_size([900.0, 700.0]).build_ui_state(
        |ui, panel: &mut ChatPanel| {
            let mut outbox = Vec::new();
            panel.show(ui, &mut outbox);
        },
        panel,
    );
    harness.run();
    let rows = |harness: &Harness<'_, ChatPanel>| -> Vec<String> {
        let mut rows: Vec<(f32, String)> =
            harness.query_all_by_label_contains(" exchanges").map(|n| (n.rect().top(), egui_kittest::kittest::NodeT::accesskit_node(&n).label().unwrap_or_default())).collect();
        rows.sort_by(|a, b| a.0.total_cmp(&b.0));
        rows.into_iter().map(|(_, label)| label).collect()
    };
    harness.get_by_label("Character").click();
    harness.run();
    assert_eq!(rows(&harness), ["Ada — 0 exchanges", "Bastien — 0 exchanges"]);
    // Bastien's chat is written to while the list is open: the engine lists him first.
    let moved = vec![character("b", "Bastien", Some("2026-11-25T11:00:00Z")), character("a", "Ada", None), character("c", "Cleo", None)];
    harness.state_mut().apply(&CompanionEvent::Characters { characters: moved }, &mut outbox);
    harness.run();
    assert_eq!(rows(&harness), ["Ada — 0 exchanges", "Bastien — 0 exchanges", "Cleo — 0 exchanges"], "held; the new one last");
    harness.key_press(egui::Key::Escape);
    harness.run();
    harness.get_by_label("Character").click();
    harness.run();
    assert_eq!(rows(&harness), ["Bastien — 0 exchanges", "Ada — 0 exchanges", "Cleo — 0 exchanges"], "opened again: the new order");
}

fn view_messages(harness: &Harness<'_, WorkbenchApp>) -> Vec<lorekeeper::llm::ChatMessage> {
    harness.state().chat().packet().expect("packet").packet.messages.clone()
}

#[test]
fn the_memory_panel_shows_the_memories_injected_into_each_agents_last_prompt() {
    use lorekeeper::memory::{MemoryKind, NewMemory, PreparedMemories, RetrievalHit, Scope, injections};
    let dir = tempfile::tempdir().expect("tempdir");
    let turn = |id: &str, speaker: &str, text: &str| NewMemory {
        id: Some(id.into()),
        kind: MemoryKind::Turn,
        scope: Scope::world(),
        speaker: Some(speaker.into()),
        text: text.into(),
        session: Some("s1".into()),
        time: Some("2024-05-01T12:00:00Z".into()),
        ..Default::default()
    };
    let hit = |id: &str, text: &str, score: f32, keyword: Option<f32>, vector: Option<f32>| RetrievalHit {
        id: id.into(),
        text: text.into(),
        speaker: Some("user".into()),
        score,
        keyword_score: keyword,
        vector_score: vector,
        rank: 1,
        keyword_rank: keyword.map(|_| 1),
        vector_rank: vector.map(|_| 1),
        kind: MemoryKind::Turn,
        scope: Scope::world(),
        session: Some("s1".into()),
        time: None,
        pinned: false,
        edited: false,
    };
    let mut harness = open_app(dir.path(), &Config::default());
    let store = harness.state().engine().context().store.clone();
    store
        .transaction(|tx| {
            let memories = PreparedMemories::without_vectors(vec![
                turn("t1", "Mira", "Where did you find that?"),
                turn("t2", "user", "We found a brass compass in the sand below the lighthouse."),
                turn("t3", "Mira", "Keep it dry, the needle rusts."),
            ])
            .map_err(|e| lorekeeper::store::StoreError::Corrupt(e.to_string()))?;
            // Nothing to publish: these memories have no vectors.
            let _ = memories.write(tx)?;
            injections::record(
                tx,
                "companion:Mira",
                "what did we dig up?",
                &[hit("t2", "We found a brass compass in the sand below the lighthouse.", 0.912, Some(3.25), Some(0.634))],
            )
        })
        .expect("write an injection");
    harness.run();
    nav(&harness, "Memory").click();
    harness.run();
    harness.get_by_label_contains("Injected into prompts").click();
    run_until(&mut harness, Duration::from_secs(10), |app| !app.memory().injections().is_empty());
    harness.run();
    assert_eq!(harness.state().memory().selected_agent(), Some("companion:Mira"));
    harness.get_by_label("companion:Mira (1)");
    assert!(harness.query_all_by_label_contains("brass compass").next().is_some(), "the injected hit is listed");
    for score in ["0.912", "3.250", "0.634"] {
        assert!(harness.query_all_by_label_contains(score).next().is_some(), "score {score} shown as a bar");
    }

    // A later prompt of another agent shows after a refresh, and is selectable.
    store
        .with(|c| injections::record(c, "scene:character:Tobin", "the lighthouse", &[hit("t3", "Keep it dry, the needle rusts.", 0.5, None, Some(0.5))]))
        .expect("second injection");
    harness.get_by_label("Refresh injections").click();
    run_until(&mut harness, Duration::from_secs(10), |app| app.memory().injections().len() == 2);
    harness.run();
    harness.get_by_label("scene:character:Tobin (1)").click();
    harness.run();
    assert_eq!(harness.state().memory().selected_agent(), Some("scene:character:Tobin"));
    assert!(harness.query_all_by_label_contains("needle rusts").next().is_some());

    // Its context button shows the turn among its neighbours, as for a search hit.
    harness.get_by_label("Context").click();
    let started = Instant::now();
    while harness.query_all_by_label_contains("Where did you find that?").next().is_none() {
        assert!(started.elapsed() < Duration::from_secs(10), "context not shown");
        std::thread::sleep(Duration::from_millis(10));
        harness.step();
    }
}

#[test]
fn a_cards_greetings_a_persona_chat_files_and_branches_in_the_chat_panel() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let engine = start_engine(dir.path(), &config);
    let store = engine.context().store.clone();
    let card = serde_json::json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": {
        "name": "Maren Vosk", "description": "{{char}} keeps a river lock.", "personality": "", "scenario": "",
        "first_mes": "Lock's closed, {{user}}.", "alternate_greetings": ["Who goes there, {{user}}?"], "mes_example": "",
        "creator_notes": "", "system_prompt": "", "post_history_instructions": "", "tags": [], "creator": "",
        "character_version": "1", "extensions": {} } });
    lorekeeper::interop::library::import_bytes(&store, card.to_string().as_bytes(), "maren").expect("import");
    store
        .with(|c| {
            let id = lorekeeper::character::insert_persona(c, "Tamsin", "A courier.")?;
            lorekeeper::character::set_persona_image(c, &id, Some(&crate::chat_files::tiny_png()))
        })
        .expect("persona");
    let book = serde_json::json!({ "entries": { "0": { "uid": 0, "key": ["weir"], "keysecondary": [], "comment": "The weir",
        "content": "The old weir drowned in the spring flood.", "constant": false, "selective": false, "order": 100, "position": 0,
        "disable": false, "probability": 100 } } });
    lorekeeper::interop::library::import_bytes(&store, book.to_string().as_bytes(), "river-lore").expect("import the book");
    let file = dir.path().join("theirs.jsonl");
    std::fs::write(
        &file,
        concat!(
            r#"{"user_name":"Ash","character_name":"Maren Vosk","create_date":"2026-10-02@21h15m40s","chat_metadata":{}}"#, "\n",
            r#"{"name":"Maren Vosk","is_user":false,"is_system":false,"send_date":"","mes":"Lock's closed.","extra":{}}"#, "\n",
            r#"{"name":"Ash","is_user":true,"is_system":false,"send_date":"","mes":"I bring eel traps.","extra":{}}"#, "\n",
            r#"{"name":"Maren Vosk","is_user":false,"is_system":false,"send_date":"","mes":"Leave them by the capstan.","extra":{}}"#, "\n",
            r#"{"name":"Ash","is_user":true,"is_system":false,"send_date":"","mes":"Will it rain?","extra":{}}"#, "\n",
            r#"{"name":"Maren Vosk","is_user":false,"is_system":false,"send_date":"","mes":"It always rains.","extra":{}}"#, "\n",
        ),
    )
    .unwrap();
    let mut harness = harness(engine, 900.0);
    harness.run();
    nav(&harness, "Chat").click();
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.chat().selected().is_some() && app.chat().characters().iter().any(|c| c.name == "Maren Vosk")
    });
    harness.run();
    // Choose Maren in the character list (again if a refresh of the list moved the row
    // under the click, as it can on a loaded machine).
    let start = Instant::now();
    loop {
        harness.get_by_label("Character").click();
        harness.run();
        harness.get_by_label_contains("Maren Vosk —").click();
        harness.run();
        let chosen = Instant::now();
        while harness.state().chat().greeting() != Some("Lock's closed, User.") && chosen.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
            harness.step();
        }
        if harness.state().chat().greeting() == Some("Lock's closed, User.") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "Maren's greeting never showed: {:?}", harness.state().chat().greeting());
        if harness.query_by_label_contains("Maren Vosk —").is_some() {
            harness.key_press(egui::Key::Escape);
            harness.run();
        }
    }
    harness.run();
    // The alternate greeting is the greeting's next swipe.
    step_until_shown(&mut harness, "Next greeting");
    harness.get_by_label("Next greeting").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().greeting() == Some("Who goes there, User?"));
    // Play Tamsin in this chat: the greeting speaks to her.
    harness.run();
    step_until_shown(&mut harness, "You play");
    harness.get_by_label("You play").click();
    harness.run();
    step_until_shown(&mut harness, "Tamsin");
    harness.get_by_label("Tamsin").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().user_name() == Some("Tamsin"));
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().greeting() == Some("Who goes there, Tamsin?"));
    harness.run();
    step_until_shown(&mut harness, "Tamsin's picture");
    // This chat's greeting edited (the card keeps its own).
    harness.get_by_label("Edit greeting").click();
    harness.run();
    text_field(&harness, "Edit Maren Vosk's greeting").focus();
    harness.run();
    text_field(&harness, "Edit Maren Vosk's greeting").set_text_value_accesskit("Who goes there at this hour, Tamsin?");
    harness.run();
    harness.get_by_label("Save edit").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().greeting() == Some("Who goes there at this hour, Tamsin?"));
    harness.run();

    // A lorebook of the library is attached to this chat.
    harness.get_by_label_contains("Lorebooks (0 attached)").click();
    harness.run();
    step_until_shown(&mut harness, "Attach river-lore to this chat");
    harness.get_by_label("Attach river-lore to this chat").click();
    let start = Instant::now();
    while harness.query_by_label_contains("Lorebooks (1 attached)").is_none() {
        assert!(start.elapsed() < Duration::from_secs(20), "the book was not attached");
        std::thread::sleep(Duration::from_millis(10));
        harness.step();
    }
    harness.run();
    assert!(harness.query_by_label_contains("river-lore — attached to this chat").is_some());

    // Someone else's SillyTavern chat comes in through the chat-file field.
    harness.get_by_label_contains("Chats and chat files").click();
    harness.run();
    text_field(&harness, "Chat file").click();
    harness.run();
    text_field(&harness, "Chat file").type_text(file.to_str().unwrap());
    harness.run();
    step_until_shown(&mut harness, "Import chat");
    harness.get_by_label("Import chat").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().turns().len() == 2);
    harness.run();
    assert!(harness.query_all_by_label_contains("It always rains.").next().is_some());
    // Branch at the first reply: the chat goes on from there, the original is kept.
    harness.get_all_by_label("Branch here").next().expect("a branch button per reply").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().turns().len() == 1 && app.chat().saved_chats().len() == 1);
    harness.run();
    assert!(harness.query_all_by_label_contains("It always rains.").next().is_none());
    step_until_shown(&mut harness, "Open");
    harness.get_by_label("Open").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().turns().len() == 2);
    harness.run();
    // And out again as a chat file (over the file it came from).
    std::fs::remove_file(&file).unwrap();
    step_until_shown(&mut harness, "Export chat");
    harness.get_by_label("Export chat").click();
    run_until(&mut harness, Duration::from_secs(20), |_| file.exists());
    let written = std::fs::read_to_string(&file).unwrap();
    assert_eq!(written.lines().count(), 6, "{written}");
    assert!(written.contains("It always rains."));
    // One exchange deleted from the middle: the later one stays.
    harness.get_all_by_label("Delete").next().expect("a delete button per exchange").click();
    harness.run();
    harness.get_by_label("Yes, delete").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().turns().len() == 1);
    harness.run();
    assert_eq!(harness.state().chat().turns()[0].reply, "It always rains.");
    assert!(harness.query_all_by_label_contains("capstan").next().is_none(), "the deleted reply is gone");

    // A new chat: this one is saved whole, the new one opens with the greeting alone.
    step_until_shown(&mut harness, "New chat");
    harness.get_by_label("New chat").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().turns().is_empty() && app.chat().saved_chats().len() == 2);
    harness.run();
    assert!(harness.query_by_label_contains("put aside for a new chat — 1 exchange").is_some(), "the saved chat says what it was");
    assert!(harness.query_by_label_contains("put aside to open “before the branch at").is_some(), "a chat switched away from names the chat opened");
    // A saved chat retitled, and one deleted (asked first).
    harness.get_all_by_label("Rename chat").next().expect("a rename button per saved chat").click();
    harness.run();
    text_field(&harness, "New title").focus();
    harness.run();
    text_field(&harness, "New title").set_text_value_accesskit("Eel traps");
    harness.run();
    harness.get_by_label("Save title").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().saved_chats().iter().any(|c| c.title == "Eel traps"));
    harness.run();
    harness.get_all_by_label("Delete chat").next().expect("a delete button per saved chat").click();
    harness.run();
    assert_eq!(harness.state().chat().saved_chats().len(), 2, "nothing deleted before it is confirmed");
    harness.get_by_label("Delete for good").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().saved_chats().len() == 1);
}

#[test]
fn redo_in_the_scene_panel_keeps_the_old_round_to_switch_back_to() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut harness, _scene) = open_demo_scene(dir.path(), 1000.0);
    play_first_round(&mut harness);
    harness.get_by_label("Redo last round").click();
    run_until(&mut harness, Duration::from_secs(30), |app| {
        app.scene().last_error().is_some() || (!app.scene().alternatives().is_empty() && app.scene().live().is_none() && app.scene().snapshot().is_some_and(|s| s.view.rounds == 1))
    });
    harness.run();
    assert_eq!(harness.state().scene().last_error(), None);
    let snapshot = harness.state().scene().snapshot().expect("snapshot");
    assert!(snapshot.messages.iter().any(|m| m.content == "I knock on the lighthouse door."), "the redo replays the same input");
    let kept = harness.state().scene().alternatives()[0].id.clone();
    harness.get_by_label_contains("Kept versions of the last round").click();
    harness.run();
    harness.get_by_label("Use this version").click();
    run_until(&mut harness, Duration::from_secs(30), |app| app.scene().alternatives().iter().all(|a| a.id != kept) && !app.scene().alternatives().is_empty());
    harness.run();
    assert_eq!(harness.state().scene().snapshot().expect("snapshot").view.rounds, 1);
}

#[test]
fn the_directors_plan_is_reviewed_in_the_scene_panel_before_anyone_acts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut harness, _scene) = open_demo_scene(dir.path(), 1000.0);
    harness.run();
    nav(&harness, "Scene").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().snapshot().is_some());
    harness.run();
    harness.get_by_label("Review the Director's plan").click();
    harness.run();
    text_field(&harness, "Your message").click();
    harness.run();
    text_field(&harness, "Your message").type_text("I knock on the lighthouse door.");
    harness.run();
    harness.get_by_label("Play round").click();
    run_until(&mut harness, Duration::from_secs(30), |app| app.scene().pending_plan().is_some() || app.scene().last_error().is_some());
    harness.step();
    let plan = harness.state().scene().pending_plan().expect("the plan waits").clone();
    assert!(plan.acting_characters.len() >= 2, "{plan:?}");
    let kept = plan.acting_characters[0].name.clone();
    let skipped = plan.acting_characters[1].name.clone();
    let acting = |app: &WorkbenchApp| app.scene().pending_plan().map(|p| p.acting_characters.iter().map(|a| a.name.clone()).collect::<Vec<_>>());
    // Both skipped; then the game master changes their mind about the first.
    for name in [&kept, &skipped] {
        step_until_shown(&mut harness, &format!("Skip {name}"));
        harness.get_by_label(&format!("Skip {name}")).click();
        // The row goes in the frame that sees the click; the next frames lay out without it
        // (a spinner repaints while the round waits: step, do not wait to settle).
        run_until(&mut harness, Duration::from_secs(10), |app| acting(app).is_some_and(|a| !a.contains(name)));
        harness.step();
        harness.step();
    }
    step_until_shown(&mut harness, &format!("Restore {kept}"));
    harness.get_by_label(&format!("Restore {kept}")).click();
    run_until(&mut harness, Duration::from_secs(10), |app| acting(app).is_some_and(|a| a.contains(&kept)));
    harness.step();
    harness.step();
    let now = acting(harness.state()).expect("the plan waits");
    assert_eq!(now.len() + 1, plan.acting_characters.len(), "{now:?}");
    assert_eq!(now[0], kept, "back in the place it had: {now:?}");
    assert!(!now.contains(&skipped), "{now:?}");
    harness.get_by_label("Play with this plan").click();
    run_until(&mut harness, Duration::from_secs(30), |app| {
        app.scene().last_error().is_some() || (app.scene().live().is_none() && app.scene().snapshot().is_some_and(|s| s.view.rounds == 1))
    });
    harness.run();
    assert_eq!(harness.state().scene().last_error(), None);
    let snapshot = harness.state().scene().snapshot().expect("snapshot");
    assert!(snapshot.messages.iter().all(|m| m.speaker != skipped), "{skipped} was taken out of the round: {:?}", snapshot.messages);
    assert!(snapshot.messages.iter().any(|m| m.speaker == kept), "{kept} was restored and acted: {:?}", snapshot.messages);
}

#[test]
fn a_lorebook_entry_is_edited_and_tested_in_the_library_panel() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let engine = start_engine(dir.path(), &config);
    let book = serde_json::json!({ "entries": { "0": { "uid": 0, "key": ["weir"], "keysecondary": [], "comment": "The weir",
        "content": "The old weir drowned in the spring flood.", "constant": false, "selective": false, "order": 100, "position": 0,
        "disable": false, "probability": 100 } } });
    lorekeeper::interop::library::import_bytes(&engine.context().store, book.to_string().as_bytes(), "river-lore").expect("import");
    // Tall enough for the entry form with its "More settings" open.
    let mut harness = harness(engine, 1600.0);
    harness.run();
    nav(&harness, "Library").click();
    run_until(&mut harness, Duration::from_secs(20), |app| !app.library().lorebooks().is_empty());
    harness.run();
    harness.get_by_label("Edit entries of river-lore").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.library().lore_editor().entries().len() == 1);
    harness.run();
    // Open the entry, give it a second key, save.
    harness.get_by_label("0. The weir").click();
    harness.run();
    text_field(&harness, "Keys").click();
    harness.run();
    text_field(&harness, "Keys").type_text(", sluice");
    harness.run();
    harness.get_by_label("Save entry").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.library().lore_editor().entries()[0].keys == ["weir", "sluice"]);
    harness.run();
    // SillyTavern's other settings are under "More settings": ignore the budget, fire only on a swipe.
    harness.get_by_label("More settings").click();
    harness.run();
    harness.get_by_label("Ignore budget").click();
    harness.run();
    harness.get_by_label("swipe").click();
    harness.run();
    harness.get_by_label("Save entry").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.library().lore_editor().entries()[0].ignore_budget);
    harness.run();
    assert_eq!(harness.state().library().lore_editor().entries()[0].triggers, ["swipe"]);
    // Back to firing on every generation, for the test below.
    harness.get_by_label("swipe").click();
    harness.run();
    harness.get_by_label("Save entry").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.library().lore_editor().entries()[0].triggers.is_empty());
    harness.run();
    // Add a second entry, then ask why each fires on a text.
    harness.get_by_label("Add entry").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.library().lore_editor().entries().len() == 2);
    harness.run();
    text_field(&harness, "Test text").click();
    harness.run();
    text_field(&harness, "Test text").type_text("Open the sluice!");
    harness.run();
    harness.get_by_label("Test activation").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.library().lore_editor().verdicts().len() == 2);
    harness.run();
    assert!(harness.query_by_label_contains("fires: 0. The weir — key \"sluice\"").is_some());
    assert!(harness.query_by_label_contains("stays out: 1. New entry — no keys and not constant").is_some());
}

/// "~/bastien.png" typed in the Library's Import file field is read from the home folder
/// ("cannot read ~/bastien.png" before: nothing expanded it).
#[test]
fn a_path_typed_with_a_tilde_is_under_the_home_folder() {
    use lorekeeper::engine::Command;
    use lorekeeper::interop::InteropCommand;
    use lorekeeper::ui::library::LibraryPanel;
    let mut harness = Harness::builder().with_max_steps(MAX_STEPS).with_size([1000.0, 700.0]).build_ui_state(
        |ui, (panel, outbox): &mut (LibraryPanel, Vec<Command>)| panel.show(ui, outbox),
        (LibraryPanel::default(), Vec::new()),
    );
    harness.run();
    text_field_of(&harness, "Import file").click();
    harness.run();
    text_field_of(&harness, "Import file").type_text("~/bastien.png");
    harness.run();
    harness.get_by_label("Import").click();
    harness.run();
    let home = directories::BaseDirs::new().expect("a home folder").home_dir().to_path_buf();
    let imports: Vec<&Command> = harness.state().1.iter().filter(|c| matches!(c, Command::Interop(InteropCommand::Import { .. }))).collect();
    match imports.as_slice() {
        [Command::Interop(InteropCommand::Import { paths })] => assert_eq!(paths, &vec![home.join("bastien.png")]),
        other => panic!("one import of the expanded path, got {other:?}"),
    }
}

/// The Prompt panel reads the call log again when calls may have been logged: at once
/// after an agent's result, and every few seconds while replies stream (it said "The
/// newest 0 LLM calls" after two were logged, until Refresh: a piece of work makes several
/// calls before it reports).
#[test]
fn the_prompt_panel_reads_the_log_again_while_calls_are_made() {
    use lorekeeper::engine::{Command, LlmCommand};
    use lorekeeper::ui::PromptPanel;
    let mut harness = Harness::builder().with_max_steps(MAX_STEPS).with_size([1000.0, 700.0]).build_ui_state(
        |ui, (panel, outbox): &mut (PromptPanel, Vec<Command>)| panel.show(ui, outbox),
        (PromptPanel::default(), Vec::new()),
    );
    let reads = |harness: &mut Harness<'_, (PromptPanel, Vec<Command>)>| -> usize {
        harness.run();
        let (_, outbox) = harness.state_mut();
        let n = outbox.iter().filter(|c| matches!(c, Command::Llm(LlmCommand::Calls { .. }))).count();
        outbox.clear();
        n
    };
    assert_eq!(reads(&mut harness), 1, "read when first shown");
    harness.state_mut().0.apply(&[]);
    assert_eq!(reads(&mut harness), 0);
    assert!(harness.query_by_label_contains("No LLM call logged yet").is_some());
    // A reply streams: read again, then not more than once per few seconds.
    harness.state_mut().0.mark_calling();
    assert_eq!(reads(&mut harness), 0, "the last read was just now");
    std::thread::sleep(Duration::from_millis(3100));
    assert_eq!(reads(&mut harness), 1, "read again while calls are made");
    harness.state_mut().0.apply(&[]);
    harness.state_mut().0.mark_calling();
    assert_eq!(reads(&mut harness), 0);
    // An agent's result: read at once.
    harness.state_mut().0.mark_stale();
    assert_eq!(reads(&mut harness), 1);
}

/// [`text_field`] for a harness of any state.
fn text_field_of<'h, S>(harness: &'h Harness<'_, S>, label: &'h str) -> egui_kittest::Node<'h> {
    use egui::accesskit::Role;
    harness
        .query_by_role_and_label(Role::TextInput, label)
        .or_else(|| harness.query_by_role_and_label(Role::MultilineTextInput, label))
        .unwrap_or_else(|| panic!("no text field labelled {label:?}"))
}

#[test]
fn a_character_is_deleted_from_the_library_panel_after_confirmation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let engine = start_engine(dir.path(), &config);
    let store = engine.context().store.clone();
    let mut card = maren_card();
    card["data"]["character_book"] = serde_json::json!({ "name": "Lock lore", "entries": [ { "keys": ["lock"], "content": "The lock is old.",
        "enabled": true, "insertion_order": 100, "id": 1, "extensions": {} } ] });
    lorekeeper::interop::library::import_bytes(&store, card.to_string().as_bytes(), "maren").expect("import");
    let mut harness = harness(engine, 900.0);
    open_library_with_maren(&mut harness);
    harness.get_by_label("Maren Vosk").click_secondary();
    harness.run();
    harness.get_by_label("Delete…").click();
    // Her card's book goes with her: the panel asks first.
    run_until(&mut harness, Duration::from_secs(20), |app| {
        assert_eq!(app.library().status(), None, "the deletion was refused");
        app.library().confirming_delete().is_some()
    });
    step_until_shown(&mut harness, "Delete Maren Vosk and all of it");
    assert!(harness.query_all_by_label_contains("1 lorebook of its card").next().is_some());
    harness.get_by_label("Delete Maren Vosk and all of it").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.library().characters().iter().all(|c| c.name != "Maren Vosk"));
    run_until(&mut harness, Duration::from_secs(20), |app| app.library().lorebooks().is_empty());
}

#[test]
fn a_scene_message_is_edited_and_the_transcript_searched_in_the_scene_panel() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut harness, _scene) = open_demo_scene(dir.path(), 1000.0);
    play_first_round(&mut harness);
    harness.get_by_label("Edit message 1").click();
    harness.run();
    text_field(&harness, "New text of message 1").focus();
    harness.run();
    text_field(&harness, "New text of message 1").set_text_value_accesskit("I knock on the lighthouse door. Twice.");
    harness.run();
    harness.get_by_label("Save edit").click();
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.scene().snapshot().is_some_and(|s| s.messages[0].content == "I knock on the lighthouse door. Twice.")
    });
    harness.run();
    // Search: the recent messages at once, the whole transcript once loaded.
    text_field(&harness, "Search transcript").click();
    harness.run();
    text_field(&harness, "Search transcript").type_text("twice");
    harness.run();
    assert!(harness.query_by_label_contains("1 of ").is_some());
    harness.get_by_label("Whole transcript").click();
    step_until_shown(&mut harness, "Reload whole transcript");
    assert!(harness.query_by_label_contains("in the whole transcript").is_some());
    assert!(harness.query_by_label_contains("#1 · round 1").is_some());
    // Back to the recent messages, and one of them taken out of the transcript.
    harness.get_by_label("Recent messages").click();
    harness.run();
    step_until_shown(&mut harness, "Delete message 2");
    let count = harness.state().scene().snapshot().map(|s| s.messages.len()).unwrap_or(0);
    // Delete asks first, as the chat does; "No" keeps the message.
    harness.get_by_label("Delete message 2").click();
    harness.run();
    assert!(harness.query_by_label("Really delete message 2?").is_some(), "one click only asks");
    harness.get_by_label("No, keep it").click();
    harness.run();
    assert!(harness.query_by_label("Really delete message 2?").is_none());
    assert_eq!(harness.state().scene().snapshot().map(|s| s.messages.len()), Some(count), "nothing deleted");
    harness.get_by_label("Delete message 2").click();
    harness.run();
    harness.get_by_label("Yes, delete").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().snapshot().is_some_and(|s| s.messages.len() + 1 == count && s.messages.iter().all(|m| m.number != 2)));
}

fn identity_app(dir: &Path) -> Harness<'static, WorkbenchApp> {
    identity_app_with(dir, Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/identity/script.json"))
}

fn identity_app_with(dir: &Path, script: PathBuf) -> Harness<'static, WorkbenchApp> {
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile { name: "script".into(), kind: ProviderKind::Scripted, model: "identity-script".into(), path: Some(script), ..Default::default() });
    config.default_profile = "script".into();
    // Tall enough that the editor and the run's controls are on screen.
    harness(start_engine(dir, &config), 1600.0)
}

fn start_identity(harness: &mut Harness<'_, WorkbenchApp>, auto_approve: bool) {
    harness.run();
    for (field, text) in [("Name", "Mira Voss"), ("Role", "lighthouse keeper"), ("Concept", "A keeper who guards the sea she fears.")] {
        text_field(harness, field).click();
        harness.run();
        text_field(harness, field).type_text(text);
        harness.run();
    }
    if auto_approve {
        harness.get_by_label("Auto-approve (skip my review)").click();
        harness.run();
    }
    harness.get_by_label("Start development").click();
}

#[test]
fn a_checkpoints_fields_are_edited_in_the_inspector_as_a_new_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = identity_app(dir.path());
    start_identity(&mut harness, false);
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.identity().view().is_some_and(|v| v.checkpoints[0].record.status.as_str() == "awaiting_approval")
    });
    nav(&harness, "Checkpoints").click();
    harness.run();
    harness.get_by_label_contains("1 Personality").click();
    harness.run();
    harness.get_by_label("Edit fields").click();
    harness.run();
    let mut structured = harness.state().identity().view().unwrap().checkpoints[0].versions[0].structured.clone();
    structured["emotional_baseline"] = serde_json::json!("brittle cheer");
    text_field(&harness, "Structured fields (JSON)").focus();
    harness.run();
    text_field(&harness, "Structured fields (JSON)").set_text_value_accesskit(&structured.to_string());
    harness.run();
    harness.get_by_label("Save as a new version").click();
    run_until(&mut harness, Duration::from_secs(20), |app| {
        assert_eq!(app.identity().last_error(), None);
        app.identity().view().is_some_and(|v| v.checkpoints[0].record.current_version == 2)
    });
    harness.run();
    let cp = &harness.state().identity().view().unwrap().checkpoints[0];
    assert_eq!(cp.versions[1].structured["emotional_baseline"], "brittle cheer");
    assert!(harness.query_by_label_contains("Version 2 of 2").is_some());
}

/// A checkpoint whose agent takes too long is cancelled from the inspector: it stops,
/// says so, and waits for a re-run.
#[test]
fn a_running_checkpoint_is_cancelled_from_the_inspector() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/identity/script.json");
    let mut script: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(shipped).unwrap()).unwrap();
    script["rules"].as_array_mut().unwrap().insert(
        0,
        serde_json::json!({ "when": { "system_contains": "Personality specialist" }, "reply": { "text": "{}", "delay_ms": 60000 } }),
    );
    let slow = dir.path().join("slow.json");
    std::fs::write(&slow, script.to_string()).unwrap();
    let mut harness = identity_app_with(dir.path(), slow);
    start_identity(&mut harness, false);
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.identity().view().is_some_and(|v| v.checkpoints[0].record.status.is_working())
    });
    nav(&harness, "Checkpoints").click();
    harness.run();
    harness.get_by_label_contains("1 Personality").click();
    harness.run();
    harness.get_by_label("Cancel").click();
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.identity().view().is_some_and(|v| v.checkpoints[0].record.status.as_str() == "failed")
    });
    harness.run();
    assert!(harness.query_by_label_contains("was cancelled; re-run it").is_some(), "the inspector says why");
}

/// The "Create a character" layout at 1600×1000, as a first-run tester had it: the
/// approval checkbox says plainly what it does and fits its tile (cut to "Approve each
/// chec" it was ticked as "I'll approve each one"), the seed-folder and delete buttons
/// are within the Waves tile (they were off its right edge), and a run still working
/// is deleted (it was "not found: character …" until its character existed).
#[test]
fn a_running_run_is_deleted_from_the_create_a_character_layout_whose_controls_fit() {
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
    let mut harness =
        Harness::builder().with_max_steps(MAX_STEPS).with_size([1600.0, 1000.0]).build_eframe(move |cc| WorkbenchApp::new(&cc.egui_ctx, engine));
    harness.run();
    harness.get_by_label("Layouts").click();
    harness.run();
    harness.get_by_label("Create a character").click();
    harness.run();
    // The Waves tile ends where the Checkpoints tile's tab begins.
    let nav = harness.get_all_by_label("Checkpoints").next().expect("navigation entry").rect();
    let edge = harness
        .get_all_by_label("Checkpoints")
        .map(|n| n.rect())
        .find(|r| r.top() > nav.bottom() + 2.0 && r.height() < 30.0)
        .expect("the Checkpoints tab")
        .left();
    let fits = |harness: &Harness<'_, WorkbenchApp>, label: &str| {
        let rect = harness.get_by_label(label).rect();
        assert!(rect.right() <= edge, "{label:?} reaches {} past the Waves tile's edge at {edge}", rect.right());
    };
    fits(&harness, "Auto-approve (skip my review)");
    start_identity(&mut harness, false);
    run_until(&mut harness, Duration::from_secs(20), |app| app.identity().view().is_some_and(|v| v.checkpoints[0].record.status.is_working()));
    step_until_shown(&mut harness, "Delete run…");
    fits(&harness, "Export seed folder");
    // Below the timeline, out of view until the tile is scrolled.
    harness.get_by_label("Delete run…").click_accesskit();
    harness.run();
    fits(&harness, "Delete Mira Voss");
    fits(&harness, "Keep it");
    harness.get_by_label("Delete Mira Voss").click_accesskit();
    run_until(&mut harness, Duration::from_secs(20), |app| {
        assert_eq!(app.identity().last_error(), None);
        app.identity().runs().is_empty() && app.identity().selected().is_none()
    });
    harness.run();
    assert!(harness.query_all_by_label_contains("not found").next().is_none(), "no error in the event log");
}

#[test]
fn a_finished_run_is_exported_as_a_seed_folder_and_deleted_from_the_waves_panel() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = identity_app(dir.path());
    start_identity(&mut harness, true);
    run_until(&mut harness, Duration::from_secs(30), |app| app.identity().view().is_some_and(|v| v.run.status == lorekeeper::identity::records::RunStatus::Completed));
    harness.run();
    let out = dir.path().join("seed-out");
    text_field(&harness, "Seed folder").click();
    harness.run();
    text_field(&harness, "Seed folder").type_text(out.to_str().unwrap());
    harness.run();
    harness.get_by_label("Export seed folder").click();
    step_until_shown(&mut harness, "Delete run…");
    let start = Instant::now();
    while harness.query_by_label_contains("Wrote the seed folder").is_none() {
        assert!(start.elapsed() < Duration::from_secs(20), "no seed folder written: {:?}", harness.state().identity().last_error());
        std::thread::sleep(Duration::from_millis(10));
        harness.step();
    }
    assert!(std::fs::read_dir(&out).expect("the folder exists").next().is_some(), "the seed folder has files");
    harness.get_by_label("Delete run…").click();
    harness.run();
    harness.get_by_label("Delete Mira Voss").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.identity().view().is_none() && app.identity().selected().is_none());
}

#[test]
fn a_character_sheet_is_edited_in_the_library_panel() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let engine = start_engine(dir.path(), &config);
    let store = engine.context().store.clone();
    let card = maren_card();
    lorekeeper::interop::library::import_bytes(&store, card.to_string().as_bytes(), "maren").expect("import");
    let mut harness = harness(engine, 1400.0);
    open_library_with_maren(&mut harness);
    harness.get_by_label("Edit sheet of Maren Vosk").click();
    step_until_shown(&mut harness, "Save sheet");
    let new = "A lock-keeper who owes the ferryman a debt.";
    let start = Instant::now();
    while harness.state().library().sheet_value("description") != Some(new) {
        assert!(start.elapsed() < Duration::from_secs(20), "the description field did not take the text");
        text_field(&harness, "Description").focus();
        harness.run();
        text_field(&harness, "Description").set_text_value_accesskit(new);
        harness.run();
    }
    harness.get_by_label("Save sheet").click();
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.library().status().is_some_and(|s| s.as_ref().is_ok_and(|t| t.contains("Saved the sheet")))
    });
    let id = harness.state().library().characters().iter().find(|c| c.name == "Maren Vosk").unwrap().id.clone();
    let record = store.with(|c| lorekeeper::character::resolve(c, &id)).unwrap();
    assert_eq!(
        lorekeeper::character::sheet(&record).description,
        "A lock-keeper who owes the ferryman a debt.",
        "status {:?}, form {:?}",
        harness.state().library().status(),
        harness.state().library().sheet_value("description")
    );
}

/// The Providers panel hosts the HTTP front door on this window's library: started on a
/// free port, it answers; stopped, it is gone.
#[test]
fn the_server_is_started_and_stopped_from_the_providers_panel() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = harness(start_engine(dir.path(), &Config::default()), 1400.0);
    harness.run();
    nav(&harness, "Providers").click();
    harness.run();
    text_field(&harness, "Address").focus();
    harness.run();
    text_field(&harness, "Address").set_text_value_accesskit("127.0.0.1:0");
    harness.run();
    harness.get_by_label("Start server").click();
    harness.run();
    let addr = harness.state().providers().server_addr().expect("the server runs");
    assert!(harness.query_by_label_contains(&format!("Listening on http://{addr}")).is_some(), "the panel shows where");
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let response = agent.get(&format!("http://{addr}/api/scenes")).call().expect("the server answers");
    assert_eq!(response.status().as_u16(), 200);
    harness.get_by_label("Stop server").click();
    harness.run();
    assert!(harness.state().providers().server_addr().is_none());
    assert!(agent.get(&format!("http://{addr}/api/scenes")).call().is_err(), "stopped: nothing listens");
}

/// The memory browser curates: a memory is pinned, its text changed, then deleted, and
/// the list shows each change.
#[test]
fn a_memory_is_pinned_edited_and_deleted_in_the_memory_browser() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = start_engine(dir.path(), &Config::default());
    let file = dir.path().join("turns.jsonl");
    std::fs::write(&file, r#"{"id":"m1","speaker":"Juno","text":"Juno hid the brass key under the third floorboard.","session":"s1"}"#).unwrap();
    engine.send(Command::Memory(lorekeeper::memory::MemoryCommand::Import { path: file })).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !matches!(engine.events().recv_timeout(deadline.saturating_duration_since(Instant::now())), Ok(Event::Memory(lorekeeper::memory::MemoryEvent::Imported { .. }))) {
        assert!(Instant::now() < deadline, "imported");
    }
    let mut harness = harness(engine, 900.0);
    harness.run();
    nav(&harness, "Memory").click();
    harness.run();
    text_field(&harness, "Search memories").click();
    harness.run();
    text_field(&harness, "Search memories").type_text("brass key");
    harness.run();
    harness.get_by_label("Search").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.memory().hits().iter().any(|h| h.id == "m1"));
    harness.get_by_label("Context").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.memory().selected_memory().is_some());
    harness.get_by_label("Pin").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.memory().hits().iter().any(|h| h.id == "m1" && h.pinned));
    run_until(&mut harness, Duration::from_secs(20), |app| app.memory().selected_memory().is_some_and(|m| m.pinned));
    let new = "Juno moved the brass key to the boathouse.";
    text_field(&harness, "Memory text").focus();
    harness.run();
    text_field(&harness, "Memory text").set_text_value_accesskit(new);
    harness.run();
    harness.get_by_label("Save text").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.memory().hits().iter().any(|h| h.id == "m1" && h.edited && h.text == new));
    run_until(&mut harness, Duration::from_secs(20), |app| app.memory().selected_memory().is_some_and(|m| m.text == new));
    harness.run();
    assert!(harness.query_by_label_contains("(edited)").is_some(), "the list marks the edit");
    // The field keeps the new words: a second Save would not write the old ones back.
    assert_eq!(text_field(&harness, "Memory text").value().as_deref(), Some(new));
    harness.get_by_label("Delete memory").click();
    run_until(&mut harness, Duration::from_secs(20), |app| !app.memory().hits().iter().any(|h| h.id == "m1") && app.memory().selected_memory().is_none());
}

/// Text pasted from the clipboard lands in the focused field (a concept, a key, a card's
/// description): the window takes the platform's paste.
#[test]
fn pasted_text_lands_in_the_focused_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = harness(start_engine(dir.path(), &Config::default()), 900.0);
    harness.run();
    nav(&harness, "Memory").click();
    harness.run();
    text_field(&harness, "Search memories").click();
    harness.run();
    harness.event(egui::Event::Paste("where did Juno hide the brass key?".into()));
    harness.run();
    harness.get_by_label("Search").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.memory().last_query() == Some("where did Juno hide the brass key?"));
}

/// Ctrl+number shows a panel; `?` (or F1) lists every shortcut and Esc closes the list;
/// a `?` typed into a field is text, not a shortcut.
#[test]
fn keyboard_shortcuts_switch_panels_and_the_question_mark_lists_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let mut harness = open_app(dir.path(), &config);
    harness.run();
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Num4);
    harness.run();
    assert_eq!(harness.state().panel(), lorekeeper::ui::PanelKind::Scene);
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Num0);
    harness.run();
    assert_eq!(harness.state().panel(), lorekeeper::ui::PanelKind::Providers);

    harness.event(egui::Event::Text("?".into()));
    harness.run();
    assert!(harness.state().shortcuts_shown());
    assert!(harness.query_by_label("Keyboard shortcuts").is_some(), "the list is on screen");
    for (keys, what) in lorekeeper::ui::SHORTCUTS {
        assert!(harness.query_by_label(keys).is_some() && harness.query_by_label(what).is_some(), "{keys}: {what}");
    }
    harness.key_press(egui::Key::Escape);
    harness.run();
    assert!(!harness.state().shortcuts_shown());
    assert!(harness.query_by_label("Keyboard shortcuts").is_none());

    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Num5);
    harness.run();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().selected().is_some());
    harness.run();
    text_field(&harness, "Message").click();
    harness.run();
    text_field(&harness, "Message").type_text("Who? Me?");
    harness.run();
    assert!(!harness.state().shortcuts_shown(), "a question mark typed in a field is text");
    assert_eq!(harness.state().chat().draft(), "Who? Me?");
    harness.key_press(egui::Key::F1);
    harness.run();
    assert!(harness.state().shortcuts_shown(), "F1 works anywhere");
}

/// Ctrl+Enter in the scene's message field plays the round, as the button does.
#[test]
fn ctrl_enter_plays_the_round() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut harness, _scene) = open_demo_scene(dir.path(), 900.0);
    write_first_message(&mut harness);
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Enter);
    wait_for_first_round(&mut harness);
}

/// A card written in Chinese or Japanese is drawn, not shown as boxes: the set-up
/// script's CJK font sits behind egui's own, and a reply in it renders in the chat.
#[test]
fn cjk_text_has_glyphs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let mut harness = open_app(dir.path(), &config);
    harness.run();
    let installed = lorekeeper::ui::FALLBACK_FONTS.iter().find(|p| Path::new(p).is_file());
    assert!(installed.is_some(), "no CJK font installed: run `bash .ci/setup.sh`");
    let body = egui::FontId::proportional(14.0);
    let (cjk, mono) = harness.ctx.fonts_mut(|f| (f.has_glyphs(&body, "灯台守の夜。灯塔看守人"), f.has_glyphs(&egui::FontId::monospace(12.0), "灯台")));
    assert!(cjk && mono, "the fallback font draws CJK in both families");
    assert!(harness.ctx.fonts_mut(|f| f.has_glyphs(&body, "Ilse Marrow")), "Latin still comes first, from egui's own font");
}

/// Arabic, Hebrew and emoji in a user's card are drawn, and English after Arabic on one
/// line still reads left to right. Without an Arabic font the letters fell into the Latin
/// font's run and egui shaped the whole run right to left ("hsilgnE ni sksa").
#[test]
fn arabic_hebrew_and_emoji_have_glyphs_and_english_beside_them_reads_left_to_right() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let mut harness = open_app(dir.path(), &config);
    harness.run();
    assert!(lorekeeper::ui::RTL_FONTS.iter().any(|p| Path::new(p).is_file()), "no Arabic font installed: run `bash .ci/setup.sh`");
    let body = egui::FontId::proportional(14.0);
    for text in ["مرحبا بالعالم", "שלום", "🌸🌊🔔", "桜井 ユキ 🌸"] {
        assert!(harness.ctx.fonts_mut(|f| f.has_glyphs(&body, text)), "{text} has glyphs");
    }
    let line = "ليلى تقول: مرحبا — and then she asks in English about the bells 🔔";
    let galley = harness.ctx.fonts_mut(|f| f.layout_no_wrap(line.into(), body.clone(), egui::Color32::WHITE));
    let glyphs: Vec<_> = galley.rows.iter().flat_map(|r| r.row.glyphs.iter()).collect();
    let x_of = |c: char| glyphs.iter().find(|g| g.chr == c).map(|g| g.pos.x).unwrap_or_else(|| panic!("{c} laid out"));
    let drawn: String = {
        let mut g = glyphs.clone();
        g.sort_by(|a, b| a.pos.x.total_cmp(&b.pos.x));
        g.iter().map(|g| g.chr).collect()
    };
    assert!(drawn.contains("and then she asks in English about the bells"), "English reads left to right: {drawn}");
    assert!(x_of('🔔') > x_of('E'), "the bell comes after the English: {drawn}");
    assert!(x_of('م') > x_of('ا'), "an Arabic word is drawn right to left: {drawn}");
}

/// A setting in the config file that nothing reads (here one that was retired) is named
/// in the event log when the workbench opens, and the rest of the file applies.
#[test]
fn a_setting_nothing_reads_is_named_in_the_event_log() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths { config_file: dir.path().join("config.toml"), library_file: dir.path().join("library.sqlite"), log_dir: dir.path().join("logs") };
    let mut config = Config::default();
    config.default_profile = "demo".into();
    config.save(&paths.config_file).unwrap();
    let text = std::fs::read_to_string(&paths.config_file).unwrap() + "\n[memory.graph]\nrebuild_after = 5000\n";
    std::fs::write(&paths.config_file, text).unwrap();
    let engine = engine::start(paths).expect("engine starts");
    assert_eq!(engine.context().config().default_profile, "demo");
    let mut harness = harness(engine, 800.0);
    harness.run();
    let wanted = "unknown setting `memory.graph.rebuild_after` ignored";
    assert!(harness.state().log_lines().any(|l| l.contains(wanted)), "{:?}", harness.state().log_lines().collect::<Vec<_>>());
    assert!(harness.query_by_label_contains(wanted).is_some(), "the warning is shown in the event log");
}


/// A card's very long name is cut short in the Library's rows and buttons (whole on
/// hover), so it does not run under the lorebooks beside it.
#[test]
fn a_long_name_stays_in_its_column_of_the_library() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let engine = start_engine(dir.path(), &config);
    let long = "Bartholomew Aloysius Fitzwilliam-Montgomery-Ravensworth the Thirty-Seventh, Lord Protector of the Sunken Reaches";
    let mut card = maren_card();
    card["data"]["name"] = long.into();
    lorekeeper::interop::library::import_bytes(&engine.context().store, card.to_string().as_bytes(), "long").expect("import");
    let mut harness = harness(engine, 800.0);
    harness.run();
    nav(&harness, "Library").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.library().characters().iter().any(|c| c.name == long));
    harness.run();
    let shown = lorekeeper::ui::short(long).into_owned();
    assert!(shown.ends_with('…') && shown.chars().count() == lorekeeper::ui::SHORT_NAME, "{shown}");
    let row = harness.get_by_label(&shown).rect();
    let button = harness.get_by_label(&format!("Edit sheet of {shown}")).rect();
    let books = harness.get_by_label_contains("Lorebooks (").rect();
    assert!(row.right() < books.left() && button.right() <= books.left(), "{row:?} {button:?} reach the lorebooks at {books:?}");
}

/// Another process (the CLI, a server) works on the run the Waves panel shows: its
/// events never reach this window, so the panel reads the run again while it works, and
/// quitting does not claim to stop work that is not this window's.
#[test]
fn a_run_another_process_works_on_is_followed_and_does_not_hold_the_window_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = identity_app(dir.path());
    start_identity(&mut harness, false);
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.identity().view().is_some_and(|v| v.checkpoints[0].record.status.as_str() == "awaiting_approval")
    });
    // This window's own agents done (their last events drained).
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.running_work().is_none() && app.identity().view().is_some_and(|v| v.checkpoints.iter().all(|c| !c.record.status.is_working()))
    });
    let run = harness.state().identity().view().unwrap().run.id.clone();
    // As another process leaves it: checkpoint 1 regenerating, written to the library.
    let store = lorekeeper::store::Store::open(&dir.path().join("library.sqlite")).unwrap();
    let set = |status: &str| {
        store
            .with(|c| Ok(c.execute("UPDATE identity_checkpoints SET status = ?1 WHERE run_id = ?2 AND number = 1", rusqlite::params![status, run])?))
            .unwrap();
    };
    set("running");
    // Something in this window asks for the run again (here: opening the checkpoint).
    harness.state().engine().send(lorekeeper::engine::Command::Identity(lorekeeper::identity::IdentityCommand::Snapshot { character_id: run.clone() })).unwrap();
    run_until(&mut harness, Duration::from_secs(20), |app| app.identity().view().is_some_and(|v| v.checkpoints[0].record.status.is_working()));
    assert_eq!(harness.state().running_work(), None, "another process's agent is not this window's to stop");
    // The other process finishes: no event arrives, the panel reads it anyway.
    set("awaiting_approval");
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.identity().view().is_some_and(|v| v.checkpoints[0].record.status.as_str() == "awaiting_approval")
    });
}

/// The real binary on the app's library (`dir`), as a second process would change it.
fn cli_on(dir: &Path, args: &[&str]) -> std::process::Output {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(args)
        .env("LOREKEEPER_LIBRARY", dir.join("library.sqlite"))
        .env("LOREKEEPER_CONFIG", dir.join("config.toml"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the binary runs");
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    output
}

/// A message the command line sends to the chat open in the window shows there without
/// a click (it used to stay hidden until the character was opened again), and "Undo
/// last" clicked on a view that has not caught up yet is refused rather than taking back
/// the exchange the user never saw.
#[test]
fn a_message_another_process_sends_shows_in_the_chat_and_a_stale_undo_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let mut harness = open_app(dir.path(), &config);
    harness.run();
    nav(&harness, "Chat").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().selected().is_some() && app.chat().greeting().is_some());
    harness.run();
    cli_on(dir.path(), &["chat", "send", "--character", "Ilse Marrow", "Hello from the terminal."]);
    // No click, no event of this window's engine: the watch reads it.
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().turns().len() == 1);
    harness.run();
    assert_eq!(harness.state().chat().turns()[0].user_text, "Hello from the terminal.");
    assert!(harness.query_all_by_label_contains("Hello from the terminal.").next().is_some(), "on screen");

    // Another exchange from the terminal; the window is clicked before it has looked again.
    cli_on(dir.path(), &["chat", "send", "--character", "Ilse Marrow", "One more thing, Ilse."]);
    // By the widget, not its place: a reload landing in the same frame moves the layout.
    harness.get_by_label("Undo last").click_accesskit();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().error().is_some());
    let error = harness.state().chat().error().unwrap_or_default().to_string();
    assert!(error.contains("changed since you looked") && error.contains("reloaded"), "{error}");
    // Nothing was taken back, and the chat on screen is the library's.
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().turns().len() == 2);
    harness.run();
    assert_eq!(harness.state().chat().turns()[1].user_text, "One more thing, Ilse.");
    let history = cli_on(dir.path(), &["chat", "history", "--character", "Ilse Marrow"]);
    assert!(String::from_utf8_lossy(&history.stdout).contains("One more thing, Ilse."));
    // Looked at, it can be taken back.
    harness.get_by_label("Undo last").click_accesskit();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().turns().len() == 1 || app.chat().error() != Some(error.as_str()));
    assert_eq!(harness.state().chat().turns().len(), 1, "{:?}", harness.state().chat().error());
}

/// Delete and "Delete from here" ask first: one click only asks (a double click on a
/// list that shifts under it used to delete two exchanges), "No" keeps the exchange,
/// "Yes" deletes it.
#[test]
fn deleting_a_chat_message_asks_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let mut harness = open_app(dir.path(), &config);
    harness.run();
    nav(&harness, "Chat").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().selected().is_some() && app.chat().greeting().is_some());
    cli_on(dir.path(), &["chat", "send", "--character", "Ilse Marrow", "First of all."]);
    cli_on(dir.path(), &["chat", "send", "--character", "Ilse Marrow", "And second."]);
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().turns().len() == 2);
    harness.run();
    // A double click where the first exchange's Delete is.
    harness.get_all_by_label("Delete").next().expect("a Delete per exchange").click();
    harness.run();
    assert!(harness.query_by_label("Really delete this exchange?").is_some(), "the click asks");
    if let Some(next) = harness.get_all_by_label("Delete").next() {
        next.click();
    }
    harness.run();
    std::thread::sleep(Duration::from_millis(500));
    harness.run();
    assert_eq!(harness.state().chat().turns().len(), 2, "a click only asks; nothing is deleted");
    harness.get_by_label("No, keep it").click();
    harness.run();
    assert!(harness.query_by_label("Really delete this exchange?").is_none());
    assert_eq!(harness.state().chat().turns().len(), 2);
    harness.get_all_by_label("Delete from here").next().expect("a Delete from here per exchange").click();
    harness.run();
    assert!(harness.query_by_label("Really delete this exchange and everything after it?").is_some());
    harness.get_by_label("Yes, delete").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().turns().is_empty());
}

/// After Ctrl+Enter sends a message, the message box keeps the keyboard while the reply
/// is written and after it lands: the next keys typed are text (a `?` used to open the
/// shortcuts overlay, the box having lost the focus).
#[test]
fn the_message_box_keeps_the_keyboard_after_sending() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let mut harness = open_app(dir.path(), &config);
    harness.run();
    nav(&harness, "Chat").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().selected().is_some());
    harness.run();
    text_field(&harness, "Message").click();
    harness.run();
    text_field(&harness, "Message").type_text("Evening, Ilse.");
    harness.run();
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Enter);
    run_until(&mut harness, Duration::from_secs(30), |app| app.chat().turns().len() == 1 || app.chat().error().is_some());
    harness.run();
    assert_eq!(harness.state().chat().error(), None);
    harness.event(egui::Event::Text("Why?".into()));
    harness.run();
    assert!(!harness.state().shortcuts_shown(), "the question mark is text in the box");
    assert_eq!(harness.state().chat().draft(), "Why?");
}

/// The chat-file path typed for one character is cleared when another is opened, so an
/// import meant for the first cannot land in the second's chat.
#[test]
fn the_chat_file_path_is_cleared_when_another_character_is_opened() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let engine = start_engine(dir.path(), &config);
    lorekeeper::interop::library::import_bytes(&engine.context().store, maren_card().to_string().as_bytes(), "maren").expect("import");
    let tobin = maren_card().to_string().replace("Maren Vosk", "Tobin Reed");
    lorekeeper::interop::library::import_bytes(&engine.context().store, tobin.as_bytes(), "tobin").expect("import");
    let mut harness = harness(engine, 900.0);
    harness.run();
    nav(&harness, "Chat").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().selected().is_some() && app.chat().characters().len() == 2);
    harness.run();
    harness.get_by_label_contains("Chats and chat files").click();
    harness.run();
    text_field(&harness, "Chat file").click();
    harness.run();
    text_field(&harness, "Chat file").type_text("/tmp/someone-elses-chat.jsonl");
    harness.run();
    let before = harness.state().chat().selected().map(str::to_string);
    let other = harness.state().chat().characters().iter().find(|c| Some(c.id.as_str()) != before.as_deref()).expect("two characters").clone();
    let start = Instant::now();
    while harness.state().chat().selected() != Some(other.id.as_str()) {
        assert!(start.elapsed() < Duration::from_secs(30), "the other character was never opened");
        harness.get_by_label("Character").click();
        harness.run();
        if let Some(row) = harness.query_by_label_contains(&format!("{} —", other.name)) {
            row.click();
        }
        harness.run();
    }
    assert_eq!(text_field(&harness, "Chat file").value().as_deref(), Some(""), "the path is not carried to another character");
}

/// A round the command line plays in the scene open in the window shows there without a
/// click, and "Undo last round" clicked on a view that has not caught up yet is refused
/// rather than taking back the round the user never saw.
#[test]
fn a_round_another_process_plays_shows_in_the_scene_and_a_stale_undo_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut harness, scene) = open_demo_scene(dir.path(), 1000.0);
    play_first_round(&mut harness);
    cli_on(dir.path(), &["scene", "round", &scene, "I ask the keeper about the lamp."]);
    // No click, no event of this window's engine: the watch reads it.
    run_until(&mut harness, Duration::from_secs(30), |app| app.scene().snapshot().is_some_and(|s| s.view.rounds == 2));
    harness.run();
    assert!(harness.query_all_by_label_contains("I ask the keeper about the lamp.").next().is_some(), "on screen");

    cli_on(dir.path(), &["scene", "round", &scene, "I climb the stairs to the lamp room."]);
    // By the widget, not its place: a reload landing in the same frame moves the layout.
    harness.get_by_label("Undo last round").click_accesskit();
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().last_error().is_some());
    let error = harness.state().scene().last_error().unwrap_or_default().to_string();
    assert!(error.contains("changed since you looked") && error.contains("reloaded"), "{error}");
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().snapshot().is_some_and(|s| s.view.rounds == 3));
    harness.run();
    assert!(harness.query_all_by_label_contains("I climb the stairs to the lamp room.").next().is_some(), "the round is kept and shown");
    harness.get_by_label("Undo last round").click_accesskit();
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().snapshot().is_some_and(|s| s.view.rounds == 2));
}

/// Worlds another process makes, renames and deletes show in the Campaigns tree without
/// a click (they used to wait for a restart when no scene was open), a character it
/// imports shows in the Library and the chat's list, and what the user was typing in the
/// tree's editor stays as typed.
#[test]
fn the_campaign_tree_and_the_character_lists_follow_another_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let engine = start_engine(dir.path(), &config);
    lorekeeper::scene::demo::ensure(&engine.context().store).expect("demo");
    let mut harness = harness(engine, 900.0);
    harness.run();
    nav(&harness, "Campaigns").click();
    run_until(&mut harness, Duration::from_secs(20), |app| !app.campaigns().tree().worlds.is_empty());
    harness.run();
    harness.get_by_label("Settings of world The Saltmarsh Coast").click();
    harness.run();
    text_field(&harness, "Description").click();
    harness.run();
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
    text_field(&harness, "Description").type_text("Half a thought, not saved yet");
    harness.run();
    let worlds = |app: &WorkbenchApp| app.campaigns().tree().worlds.iter().map(|w| w.name.clone()).collect::<Vec<_>>();

    cli_on(dir.path(), &["world", "new", "Ashfall"]);
    // No click, no event of this window's engine: the watch reads it.
    run_until(&mut harness, Duration::from_secs(20), |app| worlds(app).iter().any(|w| w == "Ashfall"));
    harness.run();
    assert!(harness.query_by_label("Settings of world Ashfall").is_some(), "on screen");
    cli_on(dir.path(), &["world", "edit", "Ashfall", "--name", "Ashfall Reach"]);
    run_until(&mut harness, Duration::from_secs(20), |app| worlds(app).iter().any(|w| w == "Ashfall Reach"));
    cli_on(dir.path(), &["world", "delete", "Ashfall Reach", "--yes"]);
    run_until(&mut harness, Duration::from_secs(20), |app| worlds(app).len() == 1);
    harness.run();
    assert_eq!(text_field(&harness, "Description").value().as_deref(), Some("Half a thought, not saved yet"), "the typing is kept");

    let card = dir.path().join("maren.json");
    std::fs::write(&card, maren_card().to_string()).expect("write the card");
    cli_on(dir.path(), &["import", card.to_str().expect("a UTF-8 path")]);
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.library().characters().iter().any(|c| c.name == "Maren Vosk") && app.chat().characters().iter().any(|c| c.name == "Maren Vosk")
    });
    assert_eq!(text_field(&harness, "Description").value().as_deref(), Some("Half a thought, not saved yet"), "the typing is kept");
}

/// The chat's Author's Note is written, saved and removed in the chat panel, and the
/// section's title says where and how often it goes.
#[test]
fn an_authors_note_is_written_and_removed_in_the_chat_panel() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let engine = start_engine(dir.path(), &config);
    let store = engine.context().store.clone();
    let stored = move || -> Option<String> {
        store
            .with(|c| Ok(c.query_row("SELECT author_note_json FROM companion_chats LIMIT 1", [], |r| r.get::<_, Option<String>>(0)).ok().flatten()))
            .expect("read the note")
    };
    let mut harness = harness(engine, 900.0);
    harness.run();
    nav(&harness, "Chat").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().selected().is_some());
    harness.run();
    step_until_shown(&mut harness, "Author's Note (none)");
    harness.get_by_label("Author's Note (none)").click();
    harness.run();
    text_field(&harness, "Note text").click();
    harness.run();
    text_field(&harness, "Note text").type_text("Keep {{char}} wary; it is raining.");
    harness.run();
    step_until_shown(&mut harness, "Save note");
    harness.get_by_label("Save note").click();
    let start = Instant::now();
    while harness.query_by_label_contains("Author's Note (in the chat at depth 4, as the system, every user message)").is_none() {
        assert!(start.elapsed() < Duration::from_secs(20), "the note's title never said where it goes");
        std::thread::sleep(Duration::from_millis(10));
        harness.step();
    }
    let kept: serde_json::Value = serde_json::from_str(&stored().expect("a note is stored")).unwrap();
    assert_eq!(kept["text"], "Keep {{char}} wary; it is raining.");
    harness.run();
    assert!(harness.query_by_label_contains("Goes with your next message").is_some());
    step_until_shown(&mut harness, "Remove note");
    harness.get_by_label("Remove note").click();
    let start = Instant::now();
    while harness.query_by_label("Author's Note (none)").is_none() {
        assert!(start.elapsed() < Duration::from_secs(20), "the note was not removed");
        std::thread::sleep(Duration::from_millis(10));
        harness.step();
    }
    assert_eq!(stored(), None);
}

/// A scene message and a chat message typed and not sent are there again when the
/// window is closed and opened (each with its own scene or character), not lost.
#[test]
fn unsent_scene_and_chat_messages_survive_closing_the_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let (mut harness, scene) = open_demo_scene_with(dir.path(), &config, 1000.0);
    write_first_message(&mut harness);
    nav(&harness, "Chat").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().selected().is_some());
    harness.run();
    let character = harness.state().chat().selected().map(str::to_string).expect("a chat is open");
    text_field(&harness, "Message").click();
    harness.run();
    text_field(&harness, "Message").type_text("Evening, Ilse.");
    harness.run();
    let state = harness.state().state();
    assert_eq!(state.scene_drafts.get(&scene).map(String::as_str), Some("I knock on the lighthouse door."));
    assert_eq!(state.chat_drafts.get(&character).map(String::as_str), Some("Evening, Ilse."));
    drop(harness);

    // Opened again from what the window saved (through its JSON, as eframe keeps it).
    let state: lorekeeper::ui::layout::WorkbenchState = serde_json::from_str(&serde_json::to_string(&state).expect("saves")).expect("reads");
    let engine = start_engine(dir.path(), &config);
    let mut harness = Harness::builder()
        .with_max_steps(MAX_STEPS)
        .with_size([1280.0, 1000.0])
        .build_eframe(move |cc| WorkbenchApp::with_state(&cc.egui_ctx, engine, state));
    harness.run();
    nav(&harness, "Scene").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().snapshot().is_some());
    harness.run();
    assert_eq!(harness.state().scene().input(), "I knock on the lighthouse door.");
    nav(&harness, "Chat").click();
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().selected() == Some(character.as_str()));
    harness.run();
    assert_eq!(harness.state().chat().draft(), "Evening, Ilse.");
}

/// A round the command line plays in the open scene reaches the Budgets, Injected
/// memories and Prompt panels without a click (they used to keep showing the round
/// before), and the Prompt panel's detail moves on to the newest call.
#[test]
fn a_round_another_process_plays_reaches_budgets_injections_and_prompt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut harness, scene) = open_demo_scene(dir.path(), 1000.0);
    play_first_round(&mut harness);
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.scene().budgets().preview().is_some_and(|p| p.telemetry.iter().any(|t| t.round == 1)) && !app.memory().injections().is_empty()
    });
    nav(&harness, "Prompt").click();
    run_until(&mut harness, Duration::from_secs(20), |app| !app.prompt().calls().is_empty());
    harness.run();
    let newest = harness.state().prompt().calls()[0].id;
    assert_eq!(harness.state().prompt().selected_call(), Some(newest), "the newest call is shown");
    let injections = harness.state().memory().injections().to_vec();

    cli_on(dir.path(), &["scene", "round", &scene, "I ask the keeper about the lamp."]);
    run_until(&mut harness, Duration::from_secs(30), |app| {
        app.scene().budgets().preview().is_some_and(|p| p.telemetry.iter().any(|t| t.round == 2))
            && app.memory().injections() != injections.as_slice()
            && app.prompt().calls().first().is_some_and(|c| c.id != newest)
    });
    let prompt = harness.state().prompt();
    assert_eq!(prompt.selected_call(), prompt.calls().first().map(|c| c.id), "the detail follows to the newest call");
}
