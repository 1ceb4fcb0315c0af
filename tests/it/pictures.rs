//! Charts in the workbench, as a person meets them: a scripted round played in the real
//! app is charted per agent (Prompt) and per section (Budgets).

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use lorekeeper::config::{Config, Paths};
use lorekeeper::engine::{self, EngineHandle};
use lorekeeper::ui::{PanelKind, WorkbenchApp};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

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

/// Show a panel as its entry in the navigation does, and let it settle.
fn show(harness: &mut Harness<'_, WorkbenchApp>, kind: PanelKind) {
    harness.state_mut().show_panel(kind);
    harness.run();
}

#[track_caller]
fn run_until(harness: &mut Harness<'_, WorkbenchApp>, limit: Duration, mut done: impl FnMut(&WorkbenchApp) -> bool) {
    let start = Instant::now();
    while !done(harness.state()) {
        assert!(start.elapsed() < limit, "condition not reached within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
        harness.step();
    }
}

#[track_caller]
fn step_until_shown(harness: &mut Harness<'_, WorkbenchApp>, label: &str) {
    let start = Instant::now();
    while harness.query_by_label(label).is_none() {
        assert!(start.elapsed() < Duration::from_secs(20), "{label:?} not shown within 20 s");
        std::thread::sleep(Duration::from_millis(10));
        harness.step();
    }
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
