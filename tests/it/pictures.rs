//! Charts and portraits in the workbench, as a person meets them: a scripted round
//! played in the real app is charted per agent (Prompt) and per section (Budgets), and a
//! PNG card's picture is the character's portrait in the chat, the scene cast and the
//! library, with the initial for a character that has none.

use base64::Engine;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use lorekeeper::config::{Config, Paths};
use lorekeeper::engine::{self, EngineHandle};
use lorekeeper::ui::{PanelKind, WorkbenchApp};
use std::collections::BTreeMap;
use std::path::Path;
use crate::workbench::{run_until, step_until_shown};
use std::time::Duration;

fn start_engine(dir: &Path) -> EngineHandle {
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let paths = Paths { config_file: dir.join("config.toml"), library_file: dir.join("library.sqlite"), log_dir: dir.join("logs") };
    config.save(&paths.config_file).expect("save config");
    engine::start(paths).expect("engine starts")
}

fn harness(engine: EngineHandle, height: f32) -> Harness<'static, WorkbenchApp> {
    Harness::builder().with_max_steps(64).with_size([1280.0, height]).build_eframe(move |cc| WorkbenchApp::new(&cc.egui_ctx, engine))
}

/// Show a panel as its entry in the navigation does, and let it settle. A panel waiting
/// on the engine draws a spinner, which repaints until the answer comes: on a loaded
/// machine that is past the step budget, so this does not insist on settling (every
/// caller then waits for what it checks).
fn show(harness: &mut Harness<'_, WorkbenchApp>, kind: PanelKind) {
    harness.state_mut().show_panel(kind);
    harness.run_ok();
}

#[test]
fn a_played_round_is_charted_per_agent_in_the_prompt_panel_and_per_section_in_the_budgets_panel() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = start_engine(dir.path());
    lorekeeper::scene::demo::ensure(&engine.context().store).expect("demo").expect("a new library gets the demo");
    let mut harness = harness(engine, 1400.0);
    harness.run();

    // Play the demo scene's first round with the scripted provider.
    show(&mut harness, PanelKind::Scene);
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().snapshot().is_some());
    harness.run();
    let field = harness.query_by_role_and_label(egui::accesskit::Role::MultilineTextInput, "Your message").expect("message field");
    field.click();
    harness.run();
    harness.query_by_role_and_label(egui::accesskit::Role::MultilineTextInput, "Your message").expect("field").type_text("I knock on the lighthouse door.");
    harness.run();
    harness.get_by_label("Play round").click();
    run_until(&mut harness, Duration::from_secs(30), |app| {
        app.scene().last_error().is_some() || (app.scene().live().is_none() && app.scene().snapshot().is_some_and(|s| s.view.rounds == 1))
    });
    assert_eq!(harness.state().scene().last_error(), None);
    harness.run();
    // The cast has no pictures: each member is drawn as an initial.
    step_until_shown(&mut harness, "Initial of Wren Talloway");

    // Prompt: a latency and a tokens series per agent, a point per logged call.
    show(&mut harness, PanelKind::Prompt);
    run_until(&mut harness, Duration::from_secs(20), |app| app.prompt().calls().len() >= 3);
    harness.run();
    let app = harness.state();
    let mut expected: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for call in app.prompt().calls().iter().rev() {
        expected.entry(call.agent.clone()).or_default().push((call.elapsed_ms as f64, f64::from(call.prompt_tokens + call.completion_tokens)));
    }
    assert!(expected.contains_key("director") && expected.contains_key("character"), "every call names its agent: {:?}", expected.keys());
    assert!(!expected.contains_key(""), "no call is unnamed");
    let series = app.prompt().series();
    let names: Vec<&str> = series.agents.iter().map(|a| a.agent.as_str()).collect();
    assert_eq!(names, expected.keys().map(String::as_str).collect::<Vec<_>>(), "one series per agent");
    for agent in &series.agents {
        let want = &expected[&agent.agent];
        let got: Vec<(f64, f64)> = agent.latency_ms.iter().zip(&agent.tokens).map(|(l, t)| (l[1], t[1])).collect();
        assert_eq!(&got, want, "{}: a point per call, oldest first", agent.agent);
        assert!(agent.latency_ms.windows(2).all(|w| w[0][0] <= w[1][0]), "time runs left to right");
    }
    assert!(series.agents.iter().flat_map(|a| &a.tokens).all(|p| p[1] > 0.0), "every call has tokens");
    step_until_shown(&mut harness, "Latency per call chart");
    step_until_shown(&mut harness, "Tokens per call chart");

    // Budgets: allocated and used per section, for the next call and then for a call of
    // the round just played, chosen in the list.
    show(&mut harness, PanelKind::Budgets);
    run_until(&mut harness, Duration::from_secs(20), |app| {
        app.scene().budgets().preview().is_some_and(|p| p.last_round.is_some()) && app.scene().budgets().section_chart().is_some()
    });
    harness.run();
    let budgets = harness.state().scene().budgets();
    let chart = budgets.section_chart().expect("chart");
    assert_eq!(chart.call, "Next call");
    let ledger = budgets.ledger().expect("ledger");
    assert_eq!(chart.bars.len(), ledger.sections.len(), "a pair of bars per section");
    assert!(chart.bars.iter().zip(&ledger.sections).all(|(b, s)| b.allocated == s.allocated && b.used == s.used));
    assert!(chart.bars.iter().any(|b| b.used > 0));
    step_until_shown(&mut harness, "Sections of Next call chart");

    let calls = harness.state().scene().budgets().chart_calls();
    assert!(calls.len() >= 3, "the next call and the round's calls: {calls:?}");
    let wanted = calls[1].clone();
    assert!(wanted.starts_with("Round 1 call 1: "), "{wanted}");
    harness.get_by_label("Call").click();
    harness.run();
    harness.get_by_label(&wanted).click();
    harness.run();
    let budgets = harness.state().scene().budgets();
    let chart = budgets.section_chart().expect("chart");
    assert_eq!(chart.call, wanted);
    let played = &budgets.preview().and_then(|p| p.last_round.as_ref()).expect("last round").ledgers[0].ledger;
    let bars: Vec<(u32, u32)> = chart.bars.iter().map(|b| (b.allocated, b.used)).collect();
    assert_eq!(bars, played.sections.iter().map(|s| (s.allocated, s.used)).collect::<Vec<_>>(), "the chosen call's ledger is charted");
    step_until_shown(&mut harness, &format!("Sections of {wanted} chart"));
}

/// A real PNG card: a 48×72 picture (the top square red, the rest blue) carrying a V2
/// card for Aster Quell in a `chara` tEXt chunk, written by the png crate.
fn aster_card_png() -> Vec<u8> {
    let card = serde_json::json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": {
        "name": "Aster Quell", "description": "{{char}} reads the tides.", "personality": "", "scenario": "",
        "first_mes": "The tide is out, {{user}}.", "mes_example": "", "creator_notes": "", "system_prompt": "",
        "post_history_instructions": "", "alternate_greetings": [], "tags": [], "creator": "", "character_version": "1",
        "extensions": {} } });
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, 48, 72);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Eight);
    encoder
        .add_text_chunk("chara".into(), base64::engine::general_purpose::STANDARD.encode(card.to_string()))
        .expect("text chunk");
    let mut writer = encoder.write_header().expect("header");
    let pixels: Vec<u8> = (0..72).flat_map(|y| (0..48).flat_map(move |_| if y < 48 { [210, 40, 40, 255] } else { [40, 40, 210, 255] })).collect();
    writer.write_image_data(&pixels).expect("pixels");
    writer.finish().expect("finish");
    out
}

#[test]
fn an_imported_cards_picture_is_its_portrait_in_the_chat_the_scene_cast_and_the_library() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = start_engine(dir.path());
    let store = engine.context().store.clone();
    let file = dir.path().join("aster.png");
    std::fs::write(&file, aster_card_png()).unwrap();
    match lorekeeper::interop::import_paths(&store, std::slice::from_ref(&file)) {
        lorekeeper::interop::InteropEvent::ImportReport { created, skipped, .. } => {
            assert_eq!((created.len(), skipped.len()), (1, 0), "{created:?} {skipped:?}")
        }
        other => panic!("{other:?}"),
    }
    // A second card, without a picture.
    let odo = serde_json::json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": { "name": "Odo Brack", "description": "A ferryman." } });
    lorekeeper::interop::library::import_bytes(&store, odo.to_string().as_bytes(), "odo").expect("import Odo");
    // A scene with Aster in its cast.
    let aster = store.with(|c| lorekeeper::character::resolve(c, "Aster Quell")).expect("imported").id;
    store
        .transaction(|tx| {
            use lorekeeper::scene::authoring::{create_arc, create_campaign, create_world};
            let world = create_world(tx, "Saltmarsh", "", "")?;
            let campaign = create_campaign(tx, &world, "Low water", "", "")?;
            let arc = create_arc(tx, &campaign, "Ebb", "")?;
            lorekeeper::scene::records::create_scene(tx, &arc, "The flats", "Mud to the horizon.", &[aster.clone()], &[aster.clone()])
        })
        .expect("scene");

    let mut harness = harness(engine, 900.0);
    harness.run();
    // Chat: Aster is the first character (nobody chatted yet; by name), her greeting
    // beside her portrait.
    show(&mut harness, PanelKind::Chat);
    run_until(&mut harness, Duration::from_secs(20), |app| app.chat().selected() == Some(aster.as_str()) && app.chat().greeting().is_some());
    harness.run();
    step_until_shown(&mut harness, "Portrait of Aster Quell");
    let portrait = harness.get_by_label("Portrait of Aster Quell").rect();
    assert!((portrait.width() - 40.0).abs() < 0.5 && (portrait.height() - 40.0).abs() < 0.5, "drawn 40 points square: {portrait:?}");
    assert!(harness.query_by_label("Initial of Aster Quell").is_none());

    // Scene: Aster in the cast.
    show(&mut harness, PanelKind::Scene);
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().snapshot().is_some());
    harness.run();
    step_until_shown(&mut harness, "Portrait of Aster Quell");

    // Library: Aster's portrait, and Odo (no picture) as an initial that stays one once
    // the engine has answered.
    show(&mut harness, PanelKind::Library);
    run_until(&mut harness, Duration::from_secs(20), |app| app.library().characters().iter().any(|c| c.name == "Odo Brack"));
    harness.run();
    step_until_shown(&mut harness, "Portrait of Aster Quell");
    step_until_shown(&mut harness, "Initial of Odo Brack");
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(10));
        harness.step();
    }
    assert!(harness.query_by_label("Portrait of Odo Brack").is_none(), "a character without a picture keeps its initial");
    assert!(harness.query_by_label("Initial of Odo Brack").is_some());
    assert!(harness.state().library().characters().iter().all(|c| c.name != "Ilse Marrow"), "a library of the user's gets no demo companion");
}
