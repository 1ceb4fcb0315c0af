//! The workbench as a person uses it: the real app, the real engine, clicks and typing
//! through egui_kittest, and a local OpenAI-compatible server for the provider test.

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use lorekeeper::config::{Config, Paths};
use lorekeeper::engine;
use lorekeeper::ui::WorkbenchApp;
use std::path::Path;
use std::time::{Duration, Instant};

fn open_app(dir: &Path, config: &Config) -> Harness<'static, WorkbenchApp> {
    let paths = Paths {
        config_file: dir.join("config.toml"),
        library_file: dir.join("library.sqlite"),
        log_dir: dir.join("logs"),
    };
    config.save(&paths.config_file).expect("save config");
    let engine = engine::start(paths).expect("engine starts");
    Harness::builder().with_size([1280.0, 800.0]).build_eframe(move |cc| WorkbenchApp::new(&cc.egui_ctx, engine))
}

/// Step the app until `done` holds, failing the test after `limit`.
fn run_until(harness: &mut Harness<'_, WorkbenchApp>, limit: Duration, mut done: impl FnMut(&WorkbenchApp) -> bool) {
    let start = Instant::now();
    while !done(harness.state()) {
        assert!(start.elapsed() < limit, "condition not reached within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
        harness.step();
    }
}

#[test]
fn editing_and_saving_a_profile_persists_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = open_app(dir.path(), &Config::default());
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
