//! The headless command line as a script uses it: the real binary, a real library file,
//! a local server speaking OpenAI's wire format.

use crate::support;

use lorekeeper::config::Config;
use lorekeeper::llm::{ProviderKind, ProviderProfile};
use std::path::Path;
use std::process::Command;
use support::mock_http::{Action, MockServer};
use support::wire::{Dialect, OpenAi};

const KEY: &str = "sk-lorekeeper-test-3f9c2a7b1e8d4c6a";
const KEY_VAR: &str = "LOREKEEPER_CLI_TEST_KEY";

fn lorekeeper(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lorekeeper"));
    cmd.arg("--library").arg(dir.join("library.sqlite")).arg("--config").arg(dir.join("config.toml"));
    // Logs go beside the library named here; the data dir points into the test folder too,
    // so a log written there by mistake would be found by the key checks.
    cmd.env("XDG_DATA_HOME", dir.join("data")).env("LOREKEEPER_LOG", "trace").env(KEY_VAR, KEY);
    cmd
}

fn write_config(dir: &Path, base_url: String) {
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile {
        name: "remote".into(),
        kind: ProviderKind::Openai,
        base_url: Some(base_url.clone()),
        model: "test-model-001".into(),
        api_key_env: Some(KEY_VAR.into()),
        cache: true,
        ..Default::default()
    });
    config.upsert_profile(ProviderProfile {
        name: "remote-uncached".into(),
        kind: ProviderKind::Openai,
        base_url: Some(base_url),
        model: "test-model-001".into(),
        api_key_env: Some(KEY_VAR.into()),
        ..Default::default()
    });
    config.save(&dir.join("config.toml")).unwrap();
}

/// Every file under `dir`, as bytes (the SQLite file, its WAL, the logs, the config).
fn every_file(dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            every_file(&path, out);
        } else {
            out.push((path.display().to_string(), std::fs::read(&path).unwrap()));
        }
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn a_key_from_the_environment_is_used_and_never_written_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    // Succeeds for the right key; a wrong key gets a 401 that echoes what it was given.
    let server = MockServer::start(|request, _| match OpenAi::presented_key(request) {
        Some(k) if k == KEY => Action::json(200, &OpenAi::reply("The lamp is lit.")),
        Some(k) => Action::json(401, &OpenAi::error(&format!("invalid key {k}"))),
        None => Action::json(401, &OpenAi::error("no key")),
    });
    write_config(dir.path(), OpenAi::base_url(&server.url()));

    let ok = lorekeeper(dir.path()).args(["--json", "providers", "test", "--profile", "remote"]).output().unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(stdout.contains("The lamp is lit."), "{stdout}");
    assert!(stdout.contains("\"prompt_tokens\":11"), "real usage reported: {stdout}");
    assert_eq!(server.requests().len(), 1);

    // The same request again is served from the response cache in the library.
    let cached = lorekeeper(dir.path()).args(["--json", "providers", "test", "--profile", "remote"]).output().unwrap();
    assert!(cached.status.success());
    assert_eq!(server.requests().len(), 1, "the cached request did not reach the server");

    // A server that echoes a wrong key back: the error is clear and carries no key.
    let wrong = lorekeeper(dir.path()).env(KEY_VAR, "sk-wrong-key-that-must-not-leak-42").args(["providers", "test", "--profile", "remote-uncached"]).output().unwrap();
    assert!(!wrong.status.success());
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(stderr.contains("401"), "{stderr}");
    assert!(!stderr.contains("sk-wrong-key-that-must-not-leak-42"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line on stderr: {stderr}");

    let mut files = Vec::new();
    every_file(dir.path(), &mut files);
    assert!(files.iter().any(|(p, _)| p.ends_with("library.sqlite")));
    assert!(files.iter().any(|(p, _)| p.contains("lorekeeper.log")), "a log file was written: {:?}", files.iter().map(|f| &f.0).collect::<Vec<_>>());
    let logs = dir.path().join("logs");
    assert!(files.iter().filter(|(p, _)| p.contains("lorekeeper.log")).all(|(p, _)| Path::new(p).starts_with(&logs)), "logs beside the library only");
    // At trace level too, and in the forms a wire dump writes: 16-byte rows of spaced
    // hex beside their text, and base64.
    for (path, bytes) in &files {
        for secret in [KEY, "sk-wrong-key-that-must-not-leak-42"] {
            assert!(!contains(bytes, secret), "the key leaked into {path}");
            if let Some(form) = leaked(bytes, &secret[secret.len() - 16..]) {
                assert!(false, "the key leaked into {path} as {form:?}");
            }
        }
    }
    for out in [&ok.stdout, &ok.stderr, &cached.stdout, &wrong.stdout] {
        assert!(!contains(out, KEY));
    }
}

/// Whether any 8-character piece of `secret` (a distinctive, random part of a key) is
/// in `bytes` as text, as hex with or without the spaces of a dump's byte groups, or as
/// base64: a wire dump cuts a header into 16-byte rows, so whole-key searches miss it.
pub(crate) fn leaked(bytes: &[u8], secret: &str) -> Option<String> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let unspaced: Vec<u8> = bytes.iter().copied().filter(|b| *b != b' ').collect();
    for start in 0..=secret.len() - 8 {
        let piece = &secret[start..start + 8];
        if contains(bytes, piece) {
            return Some(piece.to_string());
        }
        for form in [hex::encode(piece), hex::encode_upper(piece)] {
            if contains(&unspaced, &form) {
                return Some(form);
            }
        }
    }
    for pad in 0..3 {
        let encoded = b64.encode(format!("{}{secret}", "x".repeat(pad)));
        // Skip the characters that also encode the padding bytes.
        let skip = (pad * 4).div_ceil(3);
        let form = &encoded[skip..encoded.len().saturating_sub(4)];
        if contains(bytes, form) {
            return Some(form.to_string());
        }
    }
    None
}

#[test]
fn credentials_in_a_base_url_are_never_shown_or_stored() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start(|_, _| Action::json(200, &OpenAi::reply("The lamp is lit.")));
    let url = OpenAi::base_url(&server.url()).replacen("http://", "http://alice:sk-url-secret-7d1e@", 1) + "?api_key=sk-query-secret-9a2b";
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile {
        name: "pasted".into(),
        kind: ProviderKind::Openai,
        base_url: Some(url),
        model: "test-model-001".into(),
        ..Default::default()
    });
    config.save(&dir.path().join("config.toml")).unwrap();
    let tested = lorekeeper(dir.path()).args(["--json", "providers", "test", "--profile", "pasted"]).output().unwrap();
    let listed = lorekeeper(dir.path()).args(["providers", "list"]).output().unwrap();
    let mut files = Vec::new();
    every_file(&dir.path().join("logs"), &mut files);
    files.push(("library".into(), std::fs::read(dir.path().join("library.sqlite")).unwrap()));
    if let Ok(wal) = std::fs::read(dir.path().join("library.sqlite-wal")) {
        files.push(("library WAL".into(), wal));
    }
    files.extend([("test stdout".to_string(), tested.stdout), ("test stderr".into(), tested.stderr), ("list stdout".into(), listed.stdout)]);
    let listed = String::from_utf8_lossy(&files.last().unwrap().1).into_owned();
    assert!(listed.contains("pasted") && listed.contains("http://127.0.0.1:"), "{listed}");
    for (what, bytes) in &files {
        for secret in ["sk-url-secret-7d1e", "sk-query-secret-9a2b", "alice:"] {
            assert!(!contains(bytes, secret), "{secret:?} in {what}");
        }
    }
}

#[test]
fn a_device_or_a_pipe_given_as_a_file_ends_at_once_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe");
    let has_fifo = Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success());
    let mut paths = vec!["/dev/zero".to_string()];
    if has_fifo {
        paths.push(fifo.display().to_string());
    }
    for path in &paths {
        for args in [vec!["import", path.as_str()], vec!["memory", "import", path.as_str()], vec!["identity", "start", "--seed", path.as_str()]] {
            let started = std::time::Instant::now();
            let out = lorekeeper(dir.path()).args(&args).stdin(std::process::Stdio::null()).output().unwrap();
            assert!(!out.status.success(), "{args:?}");
            assert!(started.elapsed() < std::time::Duration::from_secs(20), "{args:?} took {:?}", started.elapsed());
            let said = String::from_utf8_lossy(&out.stderr) + String::from_utf8_lossy(&out.stdout);
            assert!(said.contains("not a regular file"), "{args:?}: {said}");
        }
    }
}

#[test]
fn failures_exit_non_zero_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = lorekeeper(dir.path()).args(["providers", "test", "--profile", "nope"]).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("lorekeeper: "), "{stderr}");
    assert!(stderr.contains("nope"));

    std::fs::write(dir.path().join("config.toml"), "default_profile = [").unwrap();
    let out = lorekeeper(dir.path()).args(["providers", "list"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not valid TOML"));

    let out = lorekeeper(dir.path()).args(["identity", "start", "--seed", "/nonexistent/seed.json"]).output().unwrap();
    assert!(!out.status.success());
}

/// A misspelt setting is named on stderr; the verb still runs on the rest of the file and
/// its stdout stays clean for a script.
#[test]
fn a_setting_nothing_reads_is_named_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "http://127.0.0.1:9/v1".into());
    let path = dir.path().join("config.toml");
    let text = std::fs::read_to_string(&path).unwrap() + "\n[memory.retreival]\nkeyword_weight = 0.9\n";
    std::fs::write(&path, text).unwrap();
    let out = lorekeeper(dir.path()).args(["--json", "providers", "list"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("lorekeeper: warning: ") && stderr.contains("unknown setting `memory.retreival` ignored"), "{stderr}");
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        serde_json::from_str::<serde_json::Value>(line).expect("stdout holds only the verb's JSON");
    }
}

#[test]
fn providers_list_prints_profiles_as_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "http://127.0.0.1:9/v1".into());
    let out = lorekeeper(dir.path()).args(["--json", "providers", "list"]).output().unwrap();
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let remote = lines.iter().find(|l| l["name"] == "remote").expect("remote profile listed");
    assert_eq!(remote["key_env"], KEY_VAR);
    assert_eq!(remote["kind"], "openai");
}

/// `lorekeeper screenshot` opens the workbench on a panel (here under Xvfb, which the
/// set-up script installs) and writes what the window shows as a PNG of the asked size.
#[test]
fn the_screenshot_command_writes_the_window_as_a_png() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("scene.png");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "default_profile = \"demo\"\n").unwrap();
    let status = std::process::Command::new("xvfb-run")
        .args(["-a", "-s", "-screen 0 1280x800x24"])
        .arg(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["screenshot", "--panel", "scene", "--width", "900", "--height", "600", "--out"])
        .arg(&out)
        .env("LOREKEEPER_LIBRARY", dir.path().join("library.sqlite"))
        .env("LOREKEEPER_CONFIG", &config)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("xvfb-run is installed by .ci/setup.sh");
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&out).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!((info.width, info.height), (900, 600));
    let distinct: std::collections::HashSet<&[u8]> = pixels[..info.buffer_size()].chunks(4).collect();
    assert!(distinct.len() > 20, "a drawn window, not a blank one: {} colours", distinct.len());

    // A named layout over a new demo library after one scripted round: the user's own
    // library is not touched (it gets no round).
    let play = dir.path().join("play.png");
    let status = std::process::Command::new("xvfb-run")
        .args(["-a", "-s", "-screen 0 1280x800x24"])
        .arg(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["screenshot", "--layout", "play", "--demo-round", "--width", "1000", "--height", "700", "--out"])
        .arg(&play)
        .env("LOREKEEPER_LIBRARY", dir.path().join("library.sqlite"))
        .env("LOREKEEPER_CONFIG", &config)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("xvfb-run");
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&play).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!((info.width, info.height), (1000, 700));
    let rounds = lorekeeper::store::Store::open(dir.path().join("library.sqlite"))
        .and_then(|s| s.with(|c| Ok(c.query_row("SELECT COUNT(*) FROM scene_messages", [], |r| r.get::<_, i64>(0))?)))
        .expect("the user's library reads");
    assert_eq!(rounds, 0, "the demo round was played in a library of its own");
    let wrong_layout = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["screenshot", "--layout", "Kitchen", "--out"])
        .arg(dir.path().join("no.png"))
        .env("LOREKEEPER_LIBRARY", dir.path().join("library.sqlite"))
        .env("LOREKEEPER_CONFIG", &config)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&wrong_layout.stderr).contains("no layout named \"Kitchen\""));

    let wrong = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
        .args(["screenshot", "--panel", "Kitchen", "--out"])
        .arg(dir.path().join("no.png"))
        .env("LOREKEEPER_LIBRARY", dir.path().join("library.sqlite"))
        .env("LOREKEEPER_CONFIG", &config)
        .output()
        .unwrap();
    assert!(!wrong.status.success());
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("no panel named \"Kitchen\""));
}

/// `lorekeeper … | head -1`: the reader goes away before everything is printed. Every
/// verb ends quietly with success, where `println!` used to panic (exit 101).
#[test]
fn a_reader_that_goes_away_ends_the_output_quietly() {
    let dir = tempfile::tempdir().unwrap();
    for args in [&["providers", "list"][..], &["--json", "world", "list"], &["persona", "list"]] {
        for _ in 0..3 {
            let mut child = lorekeeper(dir.path()).args(args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
            // Close the reading end at once: the first line written meets a closed pipe.
            drop(child.stdout.take());
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
            assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        }
    }
}

/// A verb that only reads, pointed at a library that is not there (a typo in
/// `--library`), says so and creates nothing: no folders, no empty library.
#[test]
fn a_read_only_verb_on_a_missing_library_says_so_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let library = dir.path().join("typo").join("lib.sqlite");
    for verb in [&["world", "list"][..], &["scene", "list"], &["identity", "list"], &["memory", "stats"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
            .arg("--library")
            .arg(&library)
            .arg("--config")
            .arg(dir.path().join("config.toml"))
            .args(verb)
            .env("XDG_DATA_HOME", dir.path().join("data"))
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && said.contains("no library at") && said.contains("typo"), "{verb:?}: {said}");
        assert!(!dir.path().join("typo").exists(), "{verb:?} made the library's folder");
    }
    // A verb that writes still creates the library where it is told.
    let out = lorekeeper(dir.path()).args(["world", "new", "Greyhollow"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = lorekeeper(dir.path()).args(["world", "list"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Approving a checkpoint of a run that does not exist says the run does not exist, not
/// that the checkpoint number is out of range.
#[test]
fn approving_in_an_unknown_run_names_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = lorekeeper(dir.path()).args(["identity", "approve", "doesnotexist", "3"]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("identity run \"doesnotexist\"") && !said.contains("checkpoints are 1"), "{said}");
}

/// Every verb at every depth says in `lorekeeper help` what it does: a bare name in a
/// `Commands:` list (19 of `world`, `campaign`, `arc`, `persona`, `lorebook detach` and
/// `lorebook entry delete` had one) leaves the user guessing. Walks the real binary's help.
#[test]
fn every_verb_in_help_says_what_it_does() {
    fn commands(path: &[String]) -> Vec<(String, bool)> {
        let output = Command::new(env!("CARGO_BIN_EXE_lorekeeper")).args(path).arg("--help").output().unwrap();
        assert!(output.status.success(), "{path:?}: {}", String::from_utf8_lossy(&output.stderr));
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let Some(list) = text.split("\nCommands:\n").nth(1) else { return Vec::new() };
        list.lines()
            .take_while(|l| !l.trim().is_empty())
            // A command's own line is indented two spaces; a wrapped description more.
            .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
            .map(|l| {
                let mut words = l.split_whitespace();
                let name = words.next().unwrap_or_default().to_string();
                (name, words.next().is_some())
            })
            .filter(|(name, _)| name != "help")
            .collect()
    }
    let mut missing = Vec::new();
    let mut seen = 0;
    let mut queue: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(path) = queue.pop() {
        for (name, described) in commands(&path) {
            let mut sub = path.clone();
            sub.push(name);
            seen += 1;
            if !described {
                missing.push(sub.join(" "));
            }
            queue.push(sub);
        }
    }
    assert!(seen > 80, "the walk reached the verbs: {seen}");
    assert!(missing.is_empty(), "verbs with no description in --help: {missing:?}");
}

/// Provider profiles managed from the command line as the Providers panel manages them:
/// added, listed, shown, edited (renamed, settings changed and put back to the default),
/// selected and deleted, each saved to the config file the workbench reads. The panel's
/// own refusals hold (a taken name, the selected profile deleted, a context too small),
/// and no key passes through: there is no flag for one, only its variable's name.
#[test]
fn provider_profiles_are_added_edited_selected_and_deleted_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = lorekeeper(dir.path())
            .args(args)
            // No keyring service here: a rename or delete still ends promptly.
            .env("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/lorekeeper-cli-test/bus")
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let config = || Config::load(&dir.path().join("config.toml")).unwrap();

    let (ok, out, err) = run(&[
        "providers", "add", "tavern", "--base-url", "http://127.0.0.1:5001/v1", "--model", "mistral-small", "--key-env", KEY_VAR,
        "--max-context-tokens", "16384", "--temperature", "0.8", "--max-tokens", "300",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("tavern") && out.contains("mistral-small"), "{out}");
    let saved = config();
    let tavern = saved.profile("tavern").expect("saved to the config file");
    assert_eq!((tavern.kind, tavern.base_url.as_deref(), tavern.max_context_tokens), (ProviderKind::Openai, Some("http://127.0.0.1:5001/v1"), 16384));
    assert_eq!((tavern.sampler.temperature, tavern.sampler.max_tokens, tavern.api_key_env.as_deref()), (Some(0.8), Some(300), Some(KEY_VAR)));
    assert_ne!(saved.default_profile, "tavern", "added, not selected");

    // A taken name is refused, and nothing changes.
    let (ok, _, err) = run(&["providers", "add", "tavern", "--model", "other"]);
    assert!(!ok && err.contains("already exists"), "{err}");
    assert_eq!(config().profile("tavern").map(|p| p.model.as_str()), Some("mistral-small"));
    // No key on the command line, where the shell history keeps it.
    let (ok, _, err) = run(&["providers", "add", "leaky", "--key", KEY]);
    assert!(!ok && !err.contains(KEY), "{err}");

    // Edited: renamed, a setting changed, one put back to the server's default.
    let (ok, _, err) = run(&["providers", "edit", "tavern", "--name", "inn", "--model", "mistral-large", "--temperature", "", "--cache", "true"]);
    assert!(ok, "{err}");
    let saved = config();
    assert!(saved.profile("tavern").is_none(), "renamed");
    let inn = saved.profile("inn").expect("renamed");
    assert_eq!((inn.model.as_str(), inn.sampler.temperature, inn.sampler.max_tokens, inn.cache), ("mistral-large", None, Some(300), true));
    let (ok, _, err) = run(&["providers", "edit", "inn", "--max-context-tokens", "100"]);
    assert!(!ok && err.contains("at least 256"), "{err}");
    let (ok, _, err) = run(&["providers", "edit", "inn", "--name", "demo"]);
    assert!(!ok && err.contains("a profile has that name"), "{err}");
    assert!(config().profile("inn").is_some() && config().profile("demo").is_some_and(|p| p.kind == ProviderKind::Scripted), "nothing overwritten");

    // Selected: the listing says so, as text and as JSON.
    let (ok, _, err) = run(&["providers", "select", "inn"]);
    assert!(ok, "{err}");
    assert_eq!(config().default_profile, "inn");
    let (_, list, _) = run(&["providers", "list"]);
    assert!(list.lines().any(|l| l.starts_with("inn (default)")), "{list}");
    let (_, list, _) = run(&["--json", "providers", "list"]);
    let rows: Vec<serde_json::Value> = list.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let row = rows.iter().find(|r| r["name"] == "inn").expect("listed");
    assert_eq!((row["default"].as_bool(), row["key_env"].as_str(), row["base_url"].as_str()), (Some(true), Some(KEY_VAR), Some("http://127.0.0.1:5001")));
    let (ok, shown, err) = run(&["--json", "providers", "show", "inn"]);
    assert!(ok, "{err}");
    let shown: serde_json::Value = serde_json::from_str(shown.trim()).unwrap();
    assert_eq!((shown["model"].as_str(), shown["sampler"]["max_tokens"].as_u64(), shown["cache"].as_bool()), (Some("mistral-large"), Some(300), Some(true)));

    // The selected profile is not deleted; another is, then this one once it is not selected.
    let (ok, _, err) = run(&["providers", "delete", "inn"]);
    assert!(!ok && err.contains("select another"), "{err}");
    assert!(config().profile("inn").is_some());
    let (ok, _, err) = run(&["providers", "select", "local"]);
    assert!(ok, "{err}");
    let (ok, out, err) = run(&["providers", "delete", "inn"]);
    assert!(ok && out.contains("deleted"), "{err}");
    assert!(config().profile("inn").is_none());
    let (ok, _, err) = run(&["providers", "delete", "inn"]);
    assert!(!ok && err.contains("no profile named"), "{err}");

    // The key was in the environment all along and is nowhere on disk.
    let mut files = Vec::new();
    every_file(dir.path(), &mut files);
    for (path, bytes) in &files {
        assert!(!contains(bytes, KEY), "the key leaked into {path}");
    }
}

/// The next call's prompt shown from the command line, as the Budgets panel shows it: the
/// sections with their share, allocated and used tokens, the reply's cap and the prompt's
/// text; `--json` for a script. It was in the window only.
#[test]
fn the_next_calls_prompt_is_previewed_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.toml"), "default_profile = \"demo\"\n").unwrap();
    let demo = lorekeeper(dir.path()).args(["scene", "demo"]).output().unwrap();
    assert!(demo.status.success(), "{}", String::from_utf8_lossy(&demo.stderr));

    let out = lorekeeper(dir.path()).args(["scene", "preview", "The Lamp Room"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("Next call of the Director"), "{text}");
    assert!(text.contains("history") && text.contains("allocated") && text.contains("reply's JSON Schema"), "{text}");
    assert!(text.contains("--- system\n") && text.contains("--- user\n"), "{text}");

    let out = lorekeeper(dir.path()).args(["--json", "scene", "preview", "The Lamp Room", "--character", "Wren", "--no-prompt"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let call: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!((call["agent"].as_str(), call["character"].as_str()), (Some("character"), Some("Wren Talloway")), "{call}");
    let sections = call["sections"].as_array().unwrap();
    assert!(sections.iter().any(|s| s["section"] == "setting" && s["used"].as_u64() > Some(0)), "{call}");
    let used: u64 = sections.iter().map(|s| s["used"].as_u64().unwrap()).sum();
    assert_eq!(call["section_tokens"].as_u64(), Some(used), "{call}");
    assert!(call["prompt_tokens"].as_u64() > Some(used) && call.get("system").is_none(), "{call}");

    let out = lorekeeper(dir.path()).args(["scene", "preview", "The Lamp Room", "--character", "Nobody At All"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no character"), "{}", String::from_utf8_lossy(&out.stderr));
}
