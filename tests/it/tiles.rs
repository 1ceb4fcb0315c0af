//! The workbench's tiles as a game master uses them: a named layout picked from the
//! Layouts menu, a panel moved by dragging its tab, an arrangement saved by name and put
//! back, and all of it — with the scene that was open — kept across a restart.

use crate::workbench::{harness, run_until, start_engine};
use eframe::App as _;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use lorekeeper::config::Config;
use lorekeeper::ui::layout::NamedLayout;
use lorekeeper::ui::{PanelKind, WorkbenchApp};
use std::collections::HashMap;
use std::time::Duration;

/// eframe's storage as a map, as its file storage keeps it between runs.
#[derive(Default)]
struct MemoryStorage(HashMap<String, String>);

impl eframe::Storage for MemoryStorage {
    fn get_string(&self, key: &str) -> Option<String> {
        self.0.get(key).cloned()
    }
    fn set_string(&mut self, key: &str, value: String) {
        self.0.insert(key.to_string(), value);
    }
    fn remove_string(&mut self, key: &str) {
        self.0.remove(key);
    }
    fn flush(&mut self) {}
}

fn click(harness: &mut Harness<'_, WorkbenchApp>, label: &str) {
    harness.get_by_label(label).click();
    harness.run();
}

/// A panel's tab (the navigation bar has an entry of the same name above it).
fn tab<'h>(harness: &'h Harness<'_, WorkbenchApp>, title: &'h str) -> egui::Rect {
    let nav = harness.get_all_by_label(title).next().expect("navigation entry").rect();
    harness
        .get_all_by_label(title)
        .map(|n| n.rect())
        .find(|r| r.top() > nav.bottom() + 2.0 && r.height() < 30.0)
        .unwrap_or_else(|| panic!("no tab titled {title:?}"))
}

/// Press on `from`, move in steps (egui needs a few frames to see a drag), release on `to`.
fn drag(harness: &mut Harness<'_, WorkbenchApp>, from: egui::Pos2, to: egui::Pos2) {
    harness.hover_at(from);
    harness.run();
    harness.drag_at(from);
    harness.run();
    for step in 1..=8 {
        harness.hover_at(from + (to - from) * (step as f32 / 8.0));
        harness.step();
    }
    harness.drop_at(to);
    harness.run();
}

fn open_demo(dir: &std::path::Path) -> (Harness<'static, WorkbenchApp>, String) {
    let mut config = Config::default();
    config.default_profile = "demo".into();
    let engine = start_engine(dir, &config);
    let scene = lorekeeper::scene::demo::ensure(&engine.context().store).expect("demo").expect("a new library gets the demo");
    (harness(engine, 800.0), scene)
}

#[test]
fn a_panel_is_moved_by_its_tab_and_a_saved_layout_is_put_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut harness, _scene) = open_demo(dir.path());
    harness.run();
    assert_eq!(harness.state().layout_name(), "All panels");
    assert!(harness.state().is_shown(PanelKind::Waves) && !harness.state().is_shown(PanelKind::Scene), "one panel at a time");

    // Pick "Play a scene" from the Layouts menu: the transcript, the budgets, the injected
    // memories and the prompt are all on screen at once.
    click(&mut harness, "Layouts");
    click(&mut harness, "Play a scene");
    for kind in [PanelKind::Scene, PanelKind::Budgets, PanelKind::Injections, PanelKind::Prompt, PanelKind::Events] {
        assert!(harness.state().is_shown(kind), "{kind:?} in {}", harness.state().arrangement());
    }
    let before = harness.state().arrangement();
    assert_eq!(
        before,
        "vertical[horizontal[tabs[*Scene], vertical[tabs[*Budgets], tabs[*Injected memories]], tabs[*Prompt]], tabs[*Event log]]"
    );

    // Drag the Prompt tab onto the left part of the Scene tile: it moves there, left of
    // the transcript, and the budgets and injected memories keep their column.
    let from = tab(&harness, "Prompt").center();
    let scene_tab = tab(&harness, "Scene");
    let into_scene = egui::pos2(scene_tab.left() + 60.0, scene_tab.bottom() + 250.0);
    drag(&mut harness, from, into_scene);
    let after = harness.state().arrangement();
    assert_eq!(after, "vertical[horizontal[tabs[*Prompt], tabs[*Scene], vertical[tabs[*Budgets], tabs[*Injected memories]]], tabs[*Event log]]");

    // Dropped on the Scene tile's tab bar, Budgets becomes a tab beside Scene.
    let from = tab(&harness, "Budgets").center();
    let scene_tab = tab(&harness, "Scene");
    drag(&mut harness, from, egui::pos2(scene_tab.right() + 40.0, scene_tab.center().y));
    let after = harness.state().arrangement();
    assert_eq!(after, "vertical[horizontal[tabs[*Prompt], tabs[Scene, *Budgets], tabs[*Injected memories]], tabs[*Event log]]");
    assert!(!harness.state().is_shown(PanelKind::Scene) && harness.state().is_shown(PanelKind::Budgets));

    // Save the arrangement by name, switch away, and put it back from the menu.
    click(&mut harness, "Layouts");
    let name_field = harness.get_by_role_and_label(egui::accesskit::Role::TextInput, "Layout name");
    name_field.click();
    harness.run();
    harness.get_by_role_and_label(egui::accesskit::Role::TextInput, "Layout name").type_text("My table");
    harness.run();
    click(&mut harness, "Save layout");
    assert_eq!(harness.state().layout_name(), "My table");

    click(&mut harness, "Layouts");
    click(&mut harness, "Chat with a character");
    assert!(harness.state().is_shown(PanelKind::Chat) && harness.state().is_shown(PanelKind::Packet));
    assert!(!harness.state().is_shown(PanelKind::Scene));
    // The packet has a tile of its own, so the chat does not draw it a second time.
    assert_eq!(harness.get_all_by_label_contains("The packet of the last turn appears here").count(), 1);

    click(&mut harness, "Layouts");
    click(&mut harness, "My table");
    assert_eq!(harness.state().arrangement(), after, "the saved arrangement is back");

    // A panel outside the layout joins it from the navigation bar, beside the panel in use.
    harness.get_all_by_label("Library").next().expect("navigation entry").click();
    harness.run();
    assert!(harness.state().is_shown(PanelKind::Library), "{}", harness.state().arrangement());
    assert_eq!(harness.state().panel(), PanelKind::Library);
}

#[test]
fn the_layout_and_the_open_scene_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut harness, demo) = open_demo(dir.path());
    // A second scene is what was open when the workbench closed.
    let second = harness
        .state()
        .engine()
        .context()
        .store
        .with(|conn| {
            let world = lorekeeper::scene::authoring::create_world(conn, "Vael", "", "")?;
            let campaign = lorekeeper::scene::authoring::create_campaign(conn, &world, "Ashfall", "", "")?;
            let arc = lorekeeper::scene::authoring::create_arc(conn, &campaign, "The Cellar Job", "")?;
            lorekeeper::scene::records::create_scene(conn, &arc, "Under the Tavern", "", &[], &[])
        })
        .expect("a second scene");
    harness.run();
    harness.state_mut().use_layout(NamedLayout::PlayScene);
    harness.state_mut().open_scene(second.clone());
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().selected() == Some(second.as_str()));
    harness.run();
    let arrangement = harness.state().arrangement();

    let mut storage = MemoryStorage::default();
    harness.state_mut().save(&mut storage);
    drop(harness);

    // The next launch, on the same library and the same storage.
    let engine = start_engine(dir.path(), &{
        let mut config = Config::default();
        config.default_profile = "demo".into();
        config
    });
    let mut harness = egui_kittest::Harness::builder()
        .with_max_steps(64)
        .with_size([1280.0, 800.0])
        .build_eframe(move |cc| WorkbenchApp::restore(&cc.egui_ctx, engine, Some(&storage)));
    harness.run();
    run_until(&mut harness, Duration::from_secs(20), |app| app.scene().selected().is_some());
    assert_eq!(harness.state().arrangement(), arrangement);
    assert_eq!(harness.state().layout_name(), "Play a scene");
    assert_eq!(harness.state().scene().selected(), Some(second.as_str()), "the scene that was open, not the first ({demo})");

    // A first launch (nothing stored) opens on the Play a scene layout; a damaged store
    // opens the same way rather than failing.
    let mut damaged = MemoryStorage::default();
    eframe::Storage::set_string(&mut damaged, lorekeeper::ui::layout::STORAGE_KEY, "(tree: ((".into());
    let engine = start_engine(dir.path(), &Config::default());
    let mut harness = egui_kittest::Harness::builder()
        .with_max_steps(64)
        .with_size([1280.0, 800.0])
        .build_eframe(move |cc| WorkbenchApp::restore(&cc.egui_ctx, engine, Some(&damaged)));
    harness.run();
    assert_eq!(harness.state().layout_name(), "Play a scene");
    assert!(harness.state().is_shown(PanelKind::Scene));
}
