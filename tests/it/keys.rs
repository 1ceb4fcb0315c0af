//! API keys in the keyring, and the desktop's file dialogs, as a person meets them: a key
//! typed into the Providers panel is kept by the keyring (an in-memory `keyring-core`
//! store here, the Secret Service in the app) and authenticates calls to a local server,
//! without ever reaching the config, the library or the screen; the command line keeps a
//! key read from stdin; a machine without a keyring or a file dialog says so and goes on.

use crate::support::mock_http::{Action, MockServer};
use crate::support::wire::{Dialect, OpenAi};
use egui::accesskit::Role;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use lorekeeper::config::{Config, Paths};
use lorekeeper::engine::{self, EngineHandle};
use lorekeeper::llm::keyring::{self, CoreKeyStore, KeyStore};
use lorekeeper::llm::{ProviderKind, ProviderProfile};
use lorekeeper::ui::WorkbenchApp;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

const KEY: &str = "sk-typed-into-the-panel-8e41c07d2b9a";

/// One in-memory keyring for the whole test binary (the keyring is per process), with
/// entries under names no other test uses.
fn mock_keyring() -> Arc<dyn KeyStore> {
    static STORE: OnceLock<Arc<dyn KeyStore>> = OnceLock::new();
    let store = STORE.get_or_init(|| Arc::new(CoreKeyStore::in_memory())).clone();
    keyring::install(store.clone());
    store
}

fn start_engine(dir: &Path, config: &Config) -> EngineHandle {
    let paths = Paths { config_file: dir.join("config.toml"), library_file: dir.join("library.sqlite"), log_dir: dir.join("logs") };
    config.save(&paths.config_file).expect("save config");
    engine::start(paths).expect("engine starts")
}

fn open_app(dir: &Path, config: &Config) -> Harness<'static, WorkbenchApp> {
    let engine = start_engine(dir, config);
    Harness::builder().with_max_steps(64).with_size([1280.0, 900.0]).build_eframe(move |cc| WorkbenchApp::new(&cc.egui_ctx, engine))
}

fn open_panel(harness: &mut Harness<'static, WorkbenchApp>, title: &str) {
    harness.run();
    harness.get_all_by_label(title).next().expect("navigation entry").click();
    harness.run();
}

#[track_caller]
fn step_until(harness: &mut Harness<'_, WorkbenchApp>, limit: Duration, mut done: impl FnMut(&Harness<'_, WorkbenchApp>) -> bool) {
    let start = Instant::now();
    while !done(harness) {
        assert!(start.elapsed() < limit, "condition not reached within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
        harness.step();
    }
    harness.run();
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn a_key_typed_into_the_providers_panel_is_kept_by_the_keyring_and_authenticates_calls() {
    let keys = mock_keyring();
    let profile = "keyring-panel-remote";
    let server = MockServer::start(|request, _| match OpenAi::presented_key(request) {
        Some(k) if k == KEY => Action::json(200, &OpenAi::reply("The key fits the lock.")),
        _ => Action::json(401, &OpenAi::error("no valid key")),
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile {
        name: profile.into(),
        kind: ProviderKind::Openai,
        base_url: Some(OpenAi::base_url(&server.url())),
        model: "test-model-001".into(),
        ..Default::default()
    });
    config.default_profile = profile.into();
    let mut harness = open_app(dir.path(), &config);
    open_panel(&mut harness, "Providers");
    step_until(&mut harness, Duration::from_secs(20), |h| h.query_by_label("no key set").is_some());

    // Without a key the local server refuses the test.
    harness.get_by_label("Test profile").click();
    step_until(&mut harness, Duration::from_secs(20), |h| h.state().provider_test(profile).is_some_and(|t| t.outcome.is_some()));
    assert!(harness.state().provider_test(profile).and_then(|t| t.outcome.clone()).is_some_and(|o| o.is_err()));

    // Type the key into the password field and store it.
    harness.get_by_role_and_label(Role::PasswordInput, "API key").click();
    harness.run();
    harness.get_by_role_and_label(Role::PasswordInput, "API key").type_text(KEY);
    harness.run();
    harness.get_by_label("Store in keyring").click();
    step_until(&mut harness, Duration::from_secs(20), |h| h.query_by_label("key stored in the keyring").is_some());
    let stored = keys.get(profile).expect("the keyring answers").expect("a key is stored");
    assert_eq!(stored.expose(), KEY);
    // The field is empty again and nothing on screen shows the key.
    let field = harness.get_by_role_and_label(Role::PasswordInput, "API key");
    assert!(field.value().is_none_or(|v| v.is_empty()), "the field still holds {:?}", field.value());
    assert!(harness.query_by_label_contains(&KEY[KEY.len() - 12..]).is_none());

    // A provider call now carries it.
    harness.get_by_label("Test profile").click();
    step_until(&mut harness, Duration::from_secs(20), |h| {
        h.state().provider_test(profile).is_some_and(|t| !t.running && t.outcome.as_ref().is_some_and(|o| o.is_ok()))
    });
    let text = harness.state().provider_test(profile).and_then(|t| t.outcome.clone()).expect("outcome").expect("the test passes");
    assert!(text.contains("The key fits the lock."), "{text}");
    assert_eq!(server.requests().last().and_then(OpenAi::presented_key).as_deref(), Some(KEY));

    // The key never reached the config, the library or its write-ahead log.
    for file in ["config.toml", "library.sqlite", "library.sqlite-wal"] {
        if let Ok(bytes) = std::fs::read(dir.path().join(file)) {
            assert!(!contains(&bytes, KEY), "the key leaked into {file}");
            if let Some(form) = crate::cli::leaked(&bytes, &KEY[KEY.len() - 16..]) {
                panic!("the key leaked into {file} as {form:?}");
            }
        }
    }
    // Nor what the engine logs of a command, or says in an event.
    let command = lorekeeper::engine::LlmCommand::SetKey { profile: profile.into(), key: lorekeeper::llm::Secret::new(KEY) };
    assert!(!format!("{command:?}").contains(&KEY[KEY.len() - 8..]));

    // Clearing takes it out of the keyring.
    harness.get_by_label("Clear from keyring").click();
    step_until(&mut harness, Duration::from_secs(20), |h| h.query_by_label("no key set").is_some());
    assert_eq!(keys.get(profile).expect("the keyring answers"), None);
}

#[test]
fn the_command_line_reads_the_key_from_stdin_and_a_missing_keyring_is_a_clear_error() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().expect("tempdir");
    let server = MockServer::start(|_, _| Action::json(200, &OpenAi::reply("Lit.")));
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile {
        name: "remote".into(),
        kind: ProviderKind::Openai,
        base_url: Some(OpenAi::base_url(&server.url())),
        model: "test-model-001".into(),
        api_key_env: Some("LOREKEEPER_KEYS_TEST_KEY".into()),
        ..Default::default()
    });
    config.save(&dir.path().join("config.toml")).expect("save");
    let run = |args: &[&str], stdin: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
            .arg("--library")
            .arg(dir.path().join("library.sqlite"))
            .arg("--config")
            .arg(dir.path().join("config.toml"))
            .args(args)
            // No keyring service: a session bus that is not there.
            .env("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/lorekeeper-keys-test/bus")
            .env("XDG_DATA_HOME", dir.path().join("data"))
            .env("LOREKEEPER_LOG", "trace")
            .env("LOREKEEPER_KEYS_TEST_KEY", "sk-from-the-environment-0d9f")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary runs");
        child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("write the key");
        let started = Instant::now();
        let out = child.wait_with_output().expect("the binary ends");
        (out, started.elapsed())
    };

    let (set, took) = run(&["providers", "key", "set", "--profile", "remote"], &format!("{KEY}\n"));
    assert!(!set.status.success(), "no keyring, no store");
    let stderr = String::from_utf8_lossy(&set.stderr);
    assert!(stderr.contains("no keyring available") && stderr.contains("environment variables"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(took < Duration::from_secs(30), "the missing keyring took {took:?}");

    // A profile that does not exist takes no key (a typo would store it under a name no profile reads).
    let (typo, _) = run(&["providers", "key", "set", "--profile", "remtoe"], &format!("{KEY}\n"));
    assert!(!typo.status.success());
    assert!(String::from_utf8_lossy(&typo.stderr).contains("no profile named \"remtoe\""), "{}", String::from_utf8_lossy(&typo.stderr));

    let (empty, _) = run(&["providers", "key", "set", "--profile", "remote"], "");
    assert!(!empty.status.success());
    assert!(String::from_utf8_lossy(&empty.stderr).contains("no key on standard input"));

    // The environment keeps working without a keyring.
    let (tested, _) = run(&["providers", "test", "--profile", "remote"], "");
    assert!(tested.status.success(), "{}", String::from_utf8_lossy(&tested.stderr));
    assert_eq!(server.requests().last().and_then(OpenAi::presented_key).as_deref(), Some("sk-from-the-environment-0d9f"));

    // The key read from stdin is nowhere: not in the output, the logs, the library or the config.
    let mut files = vec![("set stdout".to_string(), set.stdout), ("set stderr".into(), set.stderr)];
    let mut stack = vec![dir.path().to_path_buf()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).expect("read dir").flatten() {
            if entry.path().is_dir() {
                stack.push(entry.path());
            } else {
                files.push((entry.path().display().to_string(), std::fs::read(entry.path()).expect("read")));
            }
        }
    }
    assert!(files.iter().any(|(p, _)| p.contains("lorekeeper.log")), "a log was written");
    for (what, bytes) in &files {
        assert!(!contains(bytes, KEY), "the key leaked into {what}");
        if let Some(form) = crate::cli::leaked(bytes, &KEY[KEY.len() - 16..]) {
            panic!("the key leaked into {what} as {form:?}");
        }
    }
}

#[test]
fn without_a_file_dialog_the_browse_button_says_so_and_the_typed_path_still_imports() {
    let dir = tempfile::tempdir().expect("tempdir");
    let card = dir.path().join("maren.json");
    let maren = serde_json::json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": {
        "name": "Maren Vosk", "description": "A lock-keeper.", "personality": "", "scenario": "", "first_mes": "", "mes_example": "",
        "creator_notes": "", "system_prompt": "", "post_history_instructions": "", "alternate_greetings": [], "tags": [], "creator": "",
        "character_version": "1", "extensions": {} } });
    std::fs::write(&card, serde_json::to_vec(&maren).expect("json")).expect("write the card");
    let mut harness = open_app(dir.path(), &Config::default());
    open_panel(&mut harness, "Library");

    match lorekeeper::ui::platform::file_dialog_available() {
        // A desktop with a portal would open a real dialog: leave it alone.
        Ok(()) => eprintln!("a file dialog is available here; the no-dialog half is skipped"),
        Err(_) => {
            // The window's first frames can still move the row (the engine's first
            // reports arrive): a click that met nothing is repeated, an answer must come
            // within 5 s of a click that opened a dialog.
            let start = Instant::now();
            'answered: loop {
                harness.get_all_by_label("Browse…").next().expect("a Browse button").click();
                let clicked = Instant::now();
                while clicked.elapsed() < Duration::from_secs(5) {
                    harness.step();
                    if harness.query_by_label_contains("type the path instead").is_some() {
                        break 'answered;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                assert!(harness.query_by_label("waiting for the file dialog…").is_none(), "a dialog was opened and never answered");
                assert!(start.elapsed() < Duration::from_secs(30), "the Browse button never answered");
            }
            harness.run();
        }
    }

    let field = || Role::TextInput;
    harness.get_by_role_and_label(field(), "Import file").click();
    harness.run();
    harness.get_by_role_and_label(field(), "Import file").type_text(&card.display().to_string());
    harness.run();
    harness.get_by_label("Import").click();
    step_until(&mut harness, Duration::from_secs(20), |h| h.state().library().characters().iter().any(|c| c.name == "Maren Vosk"));
}

/// Keys live in the keyring under the profile's name: renaming a profile moves its key,
/// deleting it removes the key, so no key is left behind under a name nothing uses.
#[test]
fn a_renamed_profile_takes_its_key_along_and_a_deleted_one_leaves_none_behind() {
    use lorekeeper::engine::{Command, LlmCommand};
    let keys = mock_keyring();
    let (old, new) = ("keyring-follow-old", "keyring-follow-new");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    let profile = ProviderProfile {
        name: old.into(),
        kind: ProviderKind::Openai,
        base_url: Some("http://127.0.0.1:9/v1".into()),
        model: "test-model-001".into(),
        ..Default::default()
    };
    config.upsert_profile(profile.clone());
    keys.set(old, &lorekeeper::llm::Secret::new(KEY)).expect("mock keyring");
    let engine = start_engine(dir.path(), &config);
    let wait = |what: &str, done: &dyn Fn() -> bool| {
        let start = Instant::now();
        while !done() {
            assert!(start.elapsed() < Duration::from_secs(10), "{what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };

    let renamed = ProviderProfile { name: new.into(), ..profile };
    engine.send(Command::Llm(LlmCommand::SaveProfile { profile: renamed, previous_name: Some(old.into()) })).expect("engine");
    // The key is stored under the new name first, then removed from the old one.
    wait("the key did not follow the rename", &|| {
        keys.get(new).ok().flatten().is_some() && keys.get(old).ok().flatten().is_none()
    });
    assert_eq!(keys.get(new).expect("mock keyring").expect("moved").expose(), KEY);

    engine.send(Command::Llm(LlmCommand::DeleteProfile { name: new.into() })).expect("engine");
    wait("the deleted profile's key is still in the keyring", &|| keys.get(new).ok().flatten().is_none());
}
