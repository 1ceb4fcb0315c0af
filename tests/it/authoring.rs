//! A game master's own campaign from nothing, through the real binary only: a world
//! with notes, a persona, a campaign with two characters imported from cards, an arc,
//! a scene, an imported World Info book attached to the campaign, a round in which an
//! entry of that book fires, a tracker edited by hand, and the transcript exported. The
//! library also holds the demo world, and nothing of it may reach this campaign.

use lorekeeper::config::{Config, Paths};
use lorekeeper::llm::{ProviderKind, ProviderProfile};
use lorekeeper::store::Store;
use serde_json::{Value, json};
use std::path::Path;

struct Cli {
    paths: Paths,
}

impl Cli {
    fn run(&self, args: &[&str]) -> Result<Vec<Value>, String> {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
            .args(["--library", self.paths.library_file.to_str().unwrap(), "--config", self.paths.config_file.to_str().unwrap()])
            .arg("--json")
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect())
    }

    fn ok(&self, args: &[&str]) -> Vec<Value> {
        self.run(args).unwrap_or_else(|e| panic!("{args:?} failed: {e}"))
    }

    /// What a person reads: the command's text output (no `--json`).
    fn text(&self, args: &[&str]) -> String {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lorekeeper"))
            .args(["--library", self.paths.library_file.to_str().unwrap(), "--config", self.paths.config_file.to_str().unwrap()])
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }
}

fn card(name: &str, description: &str, personality: &str) -> Value {
    json!({
        "spec": "chara_card_v2", "spec_version": "2.0",
        "data": {
            "name": name, "description": description, "personality": personality,
            "scenario": "", "first_mes": "", "mes_example": "", "creator_notes": "",
            "system_prompt": "", "post_history_instructions": "", "alternate_greetings": [],
            "tags": [], "creator": "someone else", "character_version": "1", "extensions": {}
        }
    })
}

fn write(dir: &Path, name: &str, value: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
    path.to_str().unwrap().to_string()
}

/// Director plans name this campaign's characters; every reply is distinct text.
fn script() -> Value {
    json!({
        "rules": [
            { "when": { "system_contains": "which characters act, in what order" }, "reply": { "json": {
                "actingCharacters": [
                    { "name": "Bram Holloway", "guidance": "Recognise the seal and go pale.", "priority": 2 },
                    { "name": "Tessa Quill", "guidance": "Ask who gave it to Kit.", "priority": 1 }
                ],
                "activations": [], "deactivations": [],
                "stateUpdates": { "Bram Holloway": { "mood": "uneasy" } },
                "openGuidance": "The cellar lamp gutters."
            } } },
            { "when": { "system_contains": "reconciling the round" }, "reply": { "json": {
                "stateUpdates": {}, "trackers": { "suspicion": 1 }, "newFacts": [], "elapsedMinutes": 5
            } } },
            { "when": { "system_contains": "You are playing Bram Holloway" }, "reply": "Bram sets down the cask. \"Where did you get that?\"" },
            { "when": { "system_contains": "You are playing Tessa Quill" }, "reply": "Tessa leans in. \"Who gave you this, Kit?\"" },
            { "when": { "system_contains": "You are the narrator of" }, "reply": "Wax drips from the cellar lamp." }
        ],
        "default": "Nothing happens."
    })
}

fn setup(dir: &Path) -> Cli {
    let paths = Paths { config_file: dir.join("config.toml"), library_file: dir.join("library.sqlite"), log_dir: dir.join("logs") };
    let mut config = Config::default();
    let script = write(dir, "script.json", &script());
    config.upsert_profile(ProviderProfile {
        name: "script".into(),
        kind: ProviderKind::Scripted,
        model: "authoring-script".into(),
        path: Some(script.into()),
        ..Default::default()
    });
    config.default_profile = "script".into();
    // No embedding model in tests, whatever `models/` holds: memories by keyword.
    config.memory.embedding.model_dir = Some(dir.join("no-model"));
    config.save(&paths.config_file).unwrap();
    Cli { paths }
}

fn last_event<'a>(events: &'a [Value], name: &str) -> &'a Value {
    events.iter().rev().find(|e| e["event"] == name).unwrap_or_else(|| panic!("no {name} in {events:?}"))
}

#[test]
fn a_campaign_built_from_nothing_plays_with_its_own_lore_and_nothing_of_the_demo() {
    let dir = tempfile::tempdir().unwrap();
    let cli = setup(dir.path());
    cli.ok(&["scene", "demo"]);

    cli.ok(&["world", "new", "Vael", "--notes", "Ash falls from the mountain every autumn."]);
    cli.ok(&["persona", "new", "Kit", "--description", "a courier who asks too many questions"]);
    cli.ok(&["campaign", "new", "Ashfall", "--world", "Vael", "--persona", "Kit", "--notes", "Smugglers rule the lower town."]);
    let bram = write(dir.path(), "bram.json", &card("Bram Holloway", "A cellar-keeper; {{char}} owes {{user}} a favour.", "Wary, loyal."));
    let tessa = write(dir.path(), "tessa.json", &card("Tessa Quill", "A clerk who forges permits.", "Sharp, curious."));
    let book = write(
        dir.path(),
        "ashfall-lore.json",
        &json!({ "entries": { "0": {
            "uid": 0, "key": ["seal"], "keysecondary": [], "comment": "The Black Seal",
            "content": "The black wax seal marks cargo of the Cinder Guild; carrying one uninvited is a death sentence, even for {{user}}.",
            "constant": false, "selective": false, "order": 100, "position": 0, "disable": false, "probability": 100
        } } }),
    );
    let imported = cli.ok(&["import", &bram, &tessa, &book]);
    assert_eq!(last_event(&imported, "import_report")["created"].as_array().unwrap().len(), 3, "{imported:?}");
    cli.ok(&["campaign", "cast", "add", "Ashfall", "Bram Holloway", "Tessa Quill"]);
    cli.ok(&["arc", "new", "The Cellar Job", "--campaign", "Ashfall"]);
    let created = cli.ok(&["scene", "new", "Under the Tavern", "--arc", "The Cellar Job", "--notes", "A single lamp; casks everywhere."]);
    let scene = last_event(&created, "scene_created")["scene_id"].as_str().unwrap().to_string();
    cli.ok(&["lorebook", "attach", "ashfall-lore", "--campaign", "Ashfall"]);
    // Attaching twice attaches once.
    cli.ok(&["lorebook", "attach", "ashfall-lore", "--campaign", "Ashfall"]);

    // A scene needs its arc named: there is no default to someone else's.
    assert!(cli.run(&["scene", "new", "Nowhere"]).is_err());
    // Deleting a world that has campaigns says what would go, and changes nothing.
    let refused = cli.run(&["world", "delete", "Vael"]).unwrap_err();
    assert!(refused.contains("1 campaign") && refused.contains("1 scene") && refused.contains("--yes"), "{refused}");

    let tree = last_event(&cli.ok(&["world", "list"]), "tree")["tree"].clone();
    let vael = tree["worlds"].as_array().unwrap().iter().find(|w| w["name"] == "Vael").unwrap().clone();
    let ashfall = &vael["campaigns"][0];
    assert_eq!(ashfall["persona"]["name"], "Kit");
    assert_eq!(ashfall["cast"].as_array().unwrap().len(), 2);
    assert_eq!(ashfall["lorebooks"].as_array().unwrap().len(), 1);
    assert_eq!(ashfall["arcs"][0]["scenes"][0]["name"], "Under the Tavern");

    let played = cli.ok(&["scene", "round", &scene, "I put the black seal on the table."]);
    let completed = last_event(&played, "round_completed");
    let speakers: Vec<&str> = completed["messages"].as_array().unwrap().iter().map(|m| m["speaker"].as_str().unwrap()).collect();
    assert_eq!(speakers, ["Kit", "Bram Holloway", "Tessa Quill", "Narrator"], "the persona speaks for the user");

    // The prompts as sent: the entry fired for the Director and both characters, with
    // the campaign's own notes, and nothing of the demo world.
    let store = Store::open(&cli.paths.library_file).unwrap();
    let calls = store.with(|c| lorekeeper::llm::calls::recent(c, 50)).unwrap();
    let prompts: Vec<String> = calls
        .iter()
        .filter(|c| c.model == "authoring-script")
        .map(|c| c.request.messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n"))
        .collect();
    let lore = "carrying one uninvited is a death sentence";
    let director = prompts.iter().find(|p| p.contains("which characters act, in what order")).expect("director call");
    assert!(director.contains(lore), "the Director was given the entry");
    // The cards' and the book's macros are resolved: the persona plays {{user}}.
    assert!(director.contains("Bram Holloway owes Kit a favour.") && director.contains("even for Kit."), "{director}");
    assert!(prompts.iter().all(|p| !p.contains("{{char}}") && !p.contains("{{user}}")));
    for name in ["Bram Holloway", "Tessa Quill"] {
        let prompt = prompts.iter().find(|p| p.contains(&format!("You are playing {name}"))).expect("character call");
        assert!(prompt.contains(lore), "{name} was given the entry");
        assert!(prompt.contains("Smugglers rule the lower town.") && prompt.contains("Ash falls from the mountain"), "{name}'s notes");
        assert!(prompt.contains("Kit: a courier who asks too many questions"), "{name} knows the persona");
    }
    for prompt in &prompts {
        for demo in ["Saltmarsh", "Juno", "lamp_oil_hours", "Ossian", "Wren Talloway", "relief ship"] {
            assert!(!prompt.contains(demo), "the demo's {demo:?} leaked into the campaign's prompt:\n{prompt}");
        }
    }
    // The ledger says which key fired it.
    let snapshot = lorekeeper::scene::preview::snapshot(&store.reader().unwrap(), &scene).unwrap();
    let last = snapshot.last_round.expect("the round is stored");
    let ledgers = serde_json::to_value(&last.ledgers).unwrap();
    let kept: Vec<String> = ledgers
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|l| l["ledger"]["sections"].as_array().unwrap().iter().filter(|s| s["section"] == "lore").flat_map(|s| s["kept"].as_array().unwrap().clone()))
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    assert!(kept.iter().any(|k| k.contains("The Black Seal") && k.contains("key \"seal\"")), "{kept:?}");
    // And `scene lore` says it entry by entry: why it fired and whose prompt it went into.
    let lore = last_event(&cli.ok(&["scene", "lore", &scene]), "lore").clone();
    assert_eq!(lore["round"], 1);
    let fired = lore["lore"]["fired"].as_array().unwrap();
    let seal = fired.iter().find(|f| f["entry"] == "The Black Seal (key \"seal\")").unwrap_or_else(|| panic!("{lore}"));
    let given: Vec<&str> = seal["given_to"].as_array().unwrap().iter().map(|g| g.as_str().unwrap()).collect();
    assert!(given.contains(&"director") && given.contains(&"character Bram Holloway") && given.contains(&"character Tessa Quill"), "{given:?}");
    let text = cli.text(&["scene", "lore", &scene, "--round", "1"]);
    assert!(text.contains("The Black Seal (key \"seal\") — given to director"), "{text}");
    assert!(cli.run(&["scene", "lore", &scene, "--round", "7"]).unwrap_err().contains("no round 7"));

    // A tracker edited by hand, then the whole transcript.
    cli.ok(&["campaign", "tracker", "Ashfall", "guild_alert", "raised"]);
    let state = last_event(&cli.ok(&["scene", "state", &scene]), "state")["view"].clone();
    assert_eq!(state["trackers"]["guild_alert"], "raised");
    assert_eq!(state["trackers"]["suspicion"], 1, "the round's own tracker is kept");
    let out = dir.path().join("transcript.md");
    let exported = cli.ok(&["scene", "export", &scene, "--format", "markdown", "--out", out.to_str().unwrap()]);
    assert_eq!(last_event(&exported, "transcript_exported")["messages"], 4);
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("# Under the Tavern") && text.contains("**Kit**: I put the black seal on the table."), "{text}");
    assert!(text.contains("**Bram Holloway**: Bram sets down the cask."), "{text}");

    // Confirmed, the world goes with everything under it, its scenes' memories too; the demo stays.
    let scene_memories = |store: &Store| -> i64 {
        store
            .with(|c| Ok(c.query_row("SELECT count(*) FROM memories WHERE id LIKE ?1", [format!("scene:{scene}:%")], |r| r.get(0))?))
            .unwrap()
    };
    assert!(scene_memories(&store) > 0, "the round left memories");
    let deleted = cli.ok(&["world", "delete", "Vael", "--yes"]);
    assert_eq!(last_event(&deleted, "authored")["impact"]["scenes"], 1);
    assert_eq!(scene_memories(&store), 0, "no memory of a deleted scene is left to be retrieved");
    let tree = last_event(&cli.ok(&["world", "list"]), "tree")["tree"].clone();
    let names: Vec<&str> = tree["worlds"].as_array().unwrap().iter().map(|w| w["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["The Saltmarsh Coast"]);
}

/// What the game master wrote the world, the campaign and the scene to be reaches every
/// agent of a round under "Setting", and each character is told who the others present
/// are (an excerpt of their description) beside its own whole card; the ledger of every
/// call names the setting section and what it kept.
#[test]
fn the_world_campaign_and_scene_descriptions_and_the_other_characters_reach_the_agents() {
    let dir = tempfile::tempdir().unwrap();
    let cli = setup(dir.path());
    let world = "A drowned archipelago where iron is sacred and every blade is blessed by the tide-priests.";
    let premise = "The players are smugglers running stolen iron past the priests' lanterns.";
    cli.ok(&["world", "new", "Vael", "--description", world]);
    cli.ok(&["campaign", "new", "Ashfall", "--world", "Vael", "--description", premise]);
    let bram_card = "A cellar-keeper with a hook for a left hand. He keeps the smugglers' ledger in his head. \
                     Nobody has seen him sleep, and he owes the harbourmaster a debt he will not name. "
        .repeat(3);
    let bram = write(dir.path(), "bram.json", &card("Bram Holloway", &bram_card, "Wary, loyal."));
    let tessa = write(dir.path(), "tessa.json", &card("Tessa Quill", "A clerk who forges permits in violet ink.", "Sharp, curious."));
    cli.ok(&["import", &bram, &tessa]);
    cli.ok(&["campaign", "cast", "add", "Ashfall", "Bram Holloway", "Tessa Quill"]);
    cli.ok(&["arc", "new", "The Cellar Job", "--campaign", "Ashfall"]);
    let created = cli.ok(&["scene", "new", "Under the Tavern", "--arc", "The Cellar Job", "--description", "A cellar of casks below the Drowned Bell."]);
    let scene = last_event(&created, "scene_created")["scene_id"].as_str().unwrap().to_string();
    cli.ok(&["scene", "round", &scene, "I put the black seal on the table."]);

    let store = Store::open(&cli.paths.library_file).unwrap();
    let calls = store.with(|c| lorekeeper::llm::calls::recent(c, 50)).unwrap();
    let system_of = |needle: &str| -> String {
        calls
            .iter()
            .find(|c| c.request.messages[0].content.contains(needle))
            .unwrap_or_else(|| panic!("no call with {needle}"))
            .request
            .messages[0]
            .content
            .clone()
    };
    let setting = [
        format!("World \"Vael\": {world}"),
        format!("Campaign \"Ashfall\": {premise}"),
        "Scene \"Under the Tavern\": A cellar of casks below the Drowned Bell.".to_string(),
    ];
    for needle in ["which characters act, in what order", "You are playing Bram Holloway", "You are playing Tessa Quill", "You are the narrator of"] {
        let system = system_of(needle);
        for line in &setting {
            assert!(system.contains(line.as_str()), "{needle} was not told {line:?}:\n{system}");
        }
        assert!(system.contains("## Setting\n"), "{needle}: {system}");
    }
    // Each character is told who the other is, and its own card whole.
    let tessa_prompt = system_of("You are playing Tessa Quill");
    assert!(tessa_prompt.contains("description: A cellar-keeper with a hook for a left hand."), "{tessa_prompt}");
    assert!(tessa_prompt.contains("A clerk who forges permits in violet ink."), "{tessa_prompt}");
    assert!(tessa_prompt.matches("owes the harbourmaster").count() < 3, "only an excerpt of Bram: {tessa_prompt}");
    let bram_prompt = system_of("You are playing Bram Holloway");
    assert!(bram_prompt.contains("description: A clerk who forges permits in violet ink."), "{bram_prompt}");
    assert_eq!(bram_prompt.matches("owes the harbourmaster").count(), 3, "its own card whole: {bram_prompt}");

    // The ledger of every call names the setting and what it kept; a character's names
    // the other character's sheet it was given.
    let record = store.with(|c| lorekeeper::scene::records::load_round(c, &scene, 1)).unwrap().unwrap();
    let ledgers = record.ledgers.as_array().unwrap();
    assert!(ledgers.len() >= 4, "{ledgers:?}");
    for call in ledgers {
        let sections = call["ledger"]["sections"].as_array().unwrap();
        let section = |name: &str| sections.iter().find(|s| s["section"] == name).unwrap_or_else(|| panic!("no {name} in {call}"));
        let kept: Vec<&str> = section("setting")["kept"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
        assert_eq!(kept, ["world description", "campaign description", "scene description"], "{call}");
        assert!(section("setting")["used"].as_u64().unwrap() > 30, "{call}");
    }
    let tessa_call = ledgers.iter().find(|l| l["agent"] == "character" && l["character"] == "Tessa Quill").unwrap_or_else(|| panic!("{ledgers:?}"));
    let guidance = tessa_call["ledger"]["sections"].as_array().unwrap().iter().find(|s| s["section"] == "character_guidance").unwrap();
    assert!(guidance["kept"].as_array().unwrap().iter().any(|k| k == "character Bram Holloway"), "{guidance}");
}

/// Undo after edits by hand: what the round changed is taken back, what was edited since
/// stays (and an edit put back as it was blocks nothing); the round then plays again.
#[test]
fn undoing_a_round_after_edits_by_hand_keeps_the_edits() {
    let dir = tempfile::tempdir().unwrap();
    let cli = setup(dir.path());
    cli.ok(&["world", "new", "Vael"]);
    cli.ok(&["campaign", "new", "Ashfall", "--world", "Vael"]);
    let bram = write(dir.path(), "bram.json", &card("Bram Holloway", "A cellar-keeper.", "Wary."));
    let tessa = write(dir.path(), "tessa.json", &card("Tessa Quill", "A clerk who forges permits.", "Sharp."));
    cli.ok(&["import", &bram, &tessa]);
    cli.ok(&["campaign", "cast", "add", "Ashfall", "Bram Holloway", "Tessa Quill"]);
    cli.ok(&["arc", "new", "The Cellar Job", "--campaign", "Ashfall"]);
    let created = cli.ok(&["scene", "new", "Under the Tavern", "--arc", "The Cellar Job"]);
    let scene = last_event(&created, "scene_created")["scene_id"].as_str().unwrap().to_string();
    cli.ok(&["campaign", "time", "Ashfall", "60"]);
    cli.ok(&["campaign", "fact", "Ashfall", "add", "The bridge is out."]);
    cli.ok(&["scene", "round", &scene, "I put the black seal on the table."]);
    let view = || last_event(&cli.ok(&["scene", "state", &scene]), "state")["view"].clone();
    let mood = |view: &Value, name: &str| view["cast"].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap()["state"]["mood"].clone();
    let played = view();
    assert_eq!((played["trackers"]["suspicion"].clone(), played["elapsed_minutes"].clone()), (json!(1), json!(65)));
    assert_eq!(mood(&played, "Bram Holloway"), "uneasy");

    // By hand: a tracker set and taken away again, a new tracker, Tessa's mood, a fact.
    cli.ok(&["campaign", "tracker", "Ashfall", "torch", "lit"]);
    cli.ok(&["campaign", "tracker", "Ashfall", "torch", "--remove"]);
    cli.ok(&["campaign", "tracker", "Ashfall", "guild_alert", "raised"]);
    cli.ok(&["scene", "set-state", &scene, "Tessa Quill", "--mood", "wary"]);
    cli.ok(&["campaign", "fact", "Ashfall", "add", "Kit owes Bram a favour."]);
    cli.ok(&["scene", "undo", &scene]);
    let undone = view();
    assert_eq!(undone["rounds"], 0);
    assert!(undone["trackers"].get("suspicion").is_none(), "the round's tracker is taken back: {undone}");
    assert!(undone["trackers"].get("torch").is_none());
    assert_eq!(undone["trackers"]["guild_alert"], "raised", "the edit by hand stays");
    assert_eq!(undone["elapsed_minutes"], 60, "the round's five minutes come off the clock");
    assert_eq!(undone["facts"], json!(["The bridge is out.", "Kit owes Bram a favour."]));
    assert!(mood(&undone, "Bram Holloway").is_null(), "the round's mood for Bram is taken back: {undone}");
    assert_eq!(mood(&undone, "Tessa Quill"), "wary", "the mood set by hand stays");
    // The scene plays on from there.
    let again = cli.ok(&["scene", "round", &scene, "I put the black seal on the table."]);
    assert_eq!(last_event(&again, "round_completed")["round"], 1);
}

#[test]
fn hand_edits_of_state_are_checked_and_kept_in_the_campaigns_history() {
    let dir = tempfile::tempdir().unwrap();
    let cli = setup(dir.path());
    cli.ok(&["world", "new", "Vael"]);
    cli.ok(&["campaign", "new", "Ashfall", "--world", "Vael"]);
    cli.ok(&["campaign", "fact", "Ashfall", "add", "The bridge is out."]);
    cli.ok(&["campaign", "fact", "Ashfall", "add", "The bridge is out."]);
    cli.ok(&["campaign", "time", "Ashfall", "90"]);
    assert!(cli.run(&["campaign", "fact", "Ashfall", "remove", "No such fact."]).is_err());
    assert!(cli.run(&["campaign", "tracker", "Ashfall", "fog", "--remove"]).is_err(), "removing a tracker that is not there");
    assert!(cli.run(&["campaign", "new", "  ", "--world", "Vael"]).is_err(), "a campaign needs a name");
    // A second world of a name would make the name find neither (it used to be taken,
    // and every name route then answered "ambiguous").
    let taken = cli.run(&["world", "new", "vael"]).unwrap_err();
    assert!(taken.contains("already goes by"), "{taken}");
    cli.ok(&["world", "new", "Vaelmoor"]);
    let ambiguous = cli.run(&["campaign", "new", "Other", "--world", "Vae"]).unwrap_err();
    assert!(ambiguous.contains("more than one name matches"), "{ambiguous}");

    let store = Store::open(&cli.paths.library_file).unwrap();
    let (facts, minutes, edits): (String, i64, i64) = store
        .with(|c| {
            Ok(c.query_row(
                "SELECT s.facts_json, s.elapsed_minutes, (SELECT count(*) FROM state_edits) FROM campaign_state s",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?)
        })
        .unwrap();
    assert_eq!(facts, r#"["The bridge is out."]"#, "a fact is added once");
    assert_eq!(minutes, 90);
    assert_eq!(edits, 3, "each accepted edit is in the history, refused ones are not");
}

/// A character and a lorebook written from scratch on the command line: the character
/// is a card of its own holding the fields given (shown, cast and exported like an
/// imported one), the book takes entries and is attached; a name already taken is refused.
#[test]
fn a_character_and_a_lorebook_are_written_from_scratch() {
    let dir = tempfile::tempdir().unwrap();
    let cli = setup(dir.path());
    let made = cli.ok(&[
        "character", "new", "Odalys Fenwright",
        "--description", "A reed-cutter of the fen.",
        "--personality", "Patient, dry.",
        "--scenario", "The fen at dusk.",
        "--first-mes", "Mind the soft ground.",
    ]);
    let created = last_event(&made, "authored");
    assert_eq!((created["action"].as_str(), created["kind"].as_str(), created["name"].as_str()), (Some("created"), Some("character"), Some("Odalys Fenwright")));
    let sheet = cli.text(&["character", "show", "Odalys"]);
    for text in ["A reed-cutter of the fen.", "Patient, dry.", "The fen at dusk.", "Mind the soft ground."] {
        assert!(sheet.contains(text), "{text:?} in {sheet}");
    }
    let taken = cli.run(&["character", "new", "odalys fenwright"]).unwrap_err();
    assert!(taken.contains("already goes by"), "{taken}");
    assert!(cli.run(&["character", "new", "  "]).is_err(), "a character needs a name");

    let said = cli.text(&["lorebook", "new", "Fen Lore", "--description", "What the fen remembers."]);
    assert!(said.starts_with("created lorebook Fen Lore ("), "{said}");
    cli.ok(&["lorebook", "entry", "add", "Fen Lore", "--comment", "Soft ground", "--keys", "bog, mire", "--content", "The mire swallows carts whole."]);
    let taken = cli.run(&["lorebook", "new", "fen lore"]).unwrap_err();
    assert!(taken.contains("already named"), "{taken}");
    cli.ok(&["world", "new", "Vael"]);
    cli.ok(&["campaign", "new", "Ashfall", "--world", "Vael"]);
    cli.ok(&["campaign", "cast", "add", "Ashfall", "Odalys"]);
    cli.ok(&["lorebook", "attach", "Fen Lore", "--campaign", "Ashfall"]);
    let listed = cli.text(&["campaign", "list"]);
    assert!(listed.contains("cast: Odalys Fenwright") && listed.contains("lore: Fen Lore"), "{listed}");

    let out = dir.path().join("odalys.json");
    cli.ok(&["export", "character", "Odalys", "--format", "card-v2", "--out", out.to_str().unwrap()]);
    let card: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(card["data"]["name"], "Odalys Fenwright");
    assert_eq!(card["data"]["first_mes"], "Mind the soft ground.");
    let book = dir.path().join("fen.json");
    cli.ok(&["export", "lorebook", "Fen Lore", "--format", "world-info", "--out", book.to_str().unwrap()]);
    assert!(std::fs::read_to_string(&book).unwrap().contains("The mire swallows carts whole."));
}

/// The same campaign built in the workbench, by clicking and typing.
mod gui {
    use super::*;
    use egui_kittest::Harness;
    use egui_kittest::kittest::Queryable;
    use lorekeeper::ui::WorkbenchApp;
    use std::time::{Duration, Instant};

    fn run_until(harness: &mut Harness<'_, WorkbenchApp>, what: &str, mut done: impl FnMut(&WorkbenchApp) -> bool) {
        let start = Instant::now();
        while !done(harness.state()) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "not reached within 30 s: {what}; campaign: {:?}; status: {:?}; books: {:?}",
                campaign(harness.state()),
                harness.state().campaigns().status(),
                harness.state().library().lorebooks()
            );
            std::thread::sleep(Duration::from_millis(10));
            harness.step();
        }
        settle(harness);
    }

    /// Run frames until the app is still. Engine events repaint on their own threads, so
    /// a busy moment (startup, a round) can take more frames than one `run` allows.
    fn settle(harness: &mut Harness<'_, WorkbenchApp>) {
        let start = Instant::now();
        while harness.try_run().is_err() {
            assert!(start.elapsed() < Duration::from_secs(30), "the workbench never settled");
        }
    }

    fn field<'h>(harness: &'h Harness<'_, WorkbenchApp>, label: &'h str) -> egui_kittest::Node<'h> {
        use egui::accesskit::Role;
        harness
            .query_by_role_and_label(Role::TextInput, label)
            .or_else(|| harness.query_by_role_and_label(Role::MultilineTextInput, label))
            .unwrap_or_else(|| panic!("no text field labelled {label:?}"))
    }

    fn type_into(harness: &mut Harness<'_, WorkbenchApp>, label: &str, text: &str) {
        field(harness, label).click();
        settle(harness);
        field(harness, label).type_text(text);
        settle(harness);
    }

    /// Replace what a field holds (typing would add to it).
    fn replace_text(harness: &mut Harness<'_, WorkbenchApp>, label: &str, text: &str) {
        let start = Instant::now();
        while field(harness, label).value().as_deref() != Some(text) {
            assert!(start.elapsed() < Duration::from_secs(20), "{label:?} did not take {text:?}");
            field(harness, label).focus();
            settle(harness);
            field(harness, label).set_text_value_accesskit(text);
            settle(harness);
        }
    }

    /// Click `label` once it is on screen (a loaded machine may draw it some frames late).
    fn click(harness: &mut Harness<'_, WorkbenchApp>, label: &str) {
        let start = Instant::now();
        while harness.query_by_label(label).is_none() {
            assert!(start.elapsed() < Duration::from_secs(20), "{label:?} not shown within 20 s");
            std::thread::sleep(Duration::from_millis(10));
            harness.step();
        }
        harness.get_by_label(label).click();
        settle(harness);
    }

    fn campaign(app: &WorkbenchApp) -> Option<&lorekeeper::scene::authoring::CampaignNode> {
        app.campaigns().tree().worlds.iter().flat_map(|w| &w.campaigns).find(|c| c.name == "Ashfall")
    }

    /// An override set on the command line (which `campaign list` shows, with the
    /// world's) is what the workbench's editor opens with; a scenario typed beside it is
    /// saved and the personality kept. In a window 900 wide the editor's buttons are on
    /// screen.
    #[test]
    fn the_override_editor_opens_with_the_override_in_effect_and_saves_only_what_changed() {
        let dir = tempfile::tempdir().unwrap();
        let cli = setup(dir.path());
        let bram = write(dir.path(), "bram.json", &card("Bram Holloway", "A cellar-keeper.", "Wary, loyal."));
        cli.ok(&["import", &bram]);
        cli.ok(&["world", "new", "Vael"]);
        cli.ok(&["campaign", "new", "Ashfall", "--world", "Vael"]);
        cli.ok(&["campaign", "cast", "add", "Ashfall", "Bram"]);
        cli.ok(&["world", "override", "Vael", "Bram", "--description", "The ash-town's cellar-keeper."]);

        let engine = lorekeeper::engine::start(cli.paths.clone()).unwrap();
        let width = 900.0;
        let mut harness =
            Harness::builder().with_max_steps(64).with_size([width, 900.0]).build_eframe(move |cc| WorkbenchApp::new(&cc.egui_ctx, engine));
        settle(&mut harness);
        harness.get_all_by_label("Campaigns").next().unwrap().click();
        run_until(&mut harness, "the campaign", |app| campaign(app).is_some());
        // Set by another process while the window is open.
        cli.ok(&["campaign", "override", "Ashfall", "Bram", "--personality", "Bitter since the fire."]);
        let listed = cli.text(&["campaign", "list"]);
        assert!(listed.contains("  override Bram Holloway: description \"The ash-town's cellar-keeper.\""), "{listed}");
        assert!(listed.contains("    override Bram Holloway: personality \"Bitter since the fire.\""), "{listed}");
        click(&mut harness, "Settings of Ashfall");
        click(&mut harness, "Override Bram Holloway here");
        run_until(&mut harness, "the editor filled with the override in effect", |app| {
            campaign(app).is_some_and(|c| !c.overrides.is_empty())
        });
        assert_eq!(field(&harness, "Personality here").value().as_deref(), Some("Bitter since the fire."), "the editor opens filled");
        assert!(harness.query_by_label("Overridden in this campaign: personality: Bitter since the fire.").is_some(), "what is in effect here");
        assert!(harness.query_by_label("Overridden in the world: description: The ash-town's cellar-keeper.").is_some(), "and in the world");
        assert_eq!(field(&harness, "Description here").value().as_deref(), Some(""), "the world's own override is not the campaign's");
        type_into(&mut harness, "Scenario here", "The cellar floods at every tide.");
        let button = harness.get_by_label("Save override").rect();
        assert!(button.right() <= width, "the button is on screen: {button:?}");
        click(&mut harness, "Save override");
        run_until(&mut harness, "the scenario saved beside the personality", |app| {
            campaign(app).is_some_and(|c| c.overrides.iter().any(|o| o.fields.get("scenario").is_some_and(|s| s == "The cellar floods at every tide.")))
        });
        let fields = &campaign(harness.state()).unwrap().overrides[0].fields;
        assert_eq!(fields.get("personality").map(String::as_str), Some("Bitter since the fire."), "{fields:?}");
        assert_eq!(fields.len(), 2, "{fields:?}");
    }

    /// Notes typed in one node and not saved are still there after another node was
    /// opened, marked as not saved; saved, they are clean; reverted, they are as saved.
    #[test]
    fn unsaved_notes_survive_opening_another_node() {
        let dir = tempfile::tempdir().unwrap();
        let cli = setup(dir.path());
        cli.ok(&["world", "new", "Vael"]);
        cli.ok(&["campaign", "new", "Ashfall", "--world", "Vael"]);
        let engine = lorekeeper::engine::start(cli.paths.clone()).unwrap();
        let mut harness =
            Harness::builder().with_max_steps(64).with_size([1280.0, 1000.0]).build_eframe(move |cc| WorkbenchApp::new(&cc.egui_ctx, engine));
        settle(&mut harness);
        harness.get_all_by_label("Campaigns").next().unwrap().click();
        run_until(&mut harness, "the campaign", |app| campaign(app).is_some());
        click(&mut harness, "Settings of world Vael");
        assert!(harness.query_by_label("Not saved yet").is_none());
        type_into(&mut harness, "Notes", "Ash falls every autumn.");
        assert!(harness.query_by_label("Not saved yet").is_some());
        click(&mut harness, "Settings of Ashfall");
        assert_eq!(field(&harness, "Notes").value().as_deref(), Some(""), "the campaign's own notes");
        assert!(harness.query_by_label("Not saved yet").is_none());
        click(&mut harness, "Settings of world Vael");
        assert_eq!(field(&harness, "Notes").value().as_deref(), Some("Ash falls every autumn."), "kept, not discarded");
        assert!(harness.query_by_label("Not saved yet").is_some());
        click(&mut harness, "Save");
        run_until(&mut harness, "the notes saved", |app| app.campaigns().tree().worlds.iter().any(|w| w.notes == "Ash falls every autumn."));
        assert!(harness.query_by_label("Not saved yet").is_none());
        type_into(&mut harness, "Notes", " And winter.");
        click(&mut harness, "Revert changes");
        assert_eq!(field(&harness, "Notes").value().as_deref(), Some("Ash falls every autumn."));
        assert!(harness.query_by_label("Not saved yet").is_none());
    }

    /// What `persona edit`, `persona delete` and `campaign time` do, done in the
    /// Campaigns panel: a persona renamed and re-described (the campaign that plays it
    /// follows), the in-fiction clock set, the persona deleted after a second click.
    #[test]
    fn a_persona_is_edited_and_deleted_and_the_campaigns_time_set_in_the_workbench() {
        let dir = tempfile::tempdir().unwrap();
        let cli = setup(dir.path());
        cli.ok(&["persona", "new", "Kit", "--description", "a courier"]);
        cli.ok(&["world", "new", "Vael"]);
        cli.ok(&["campaign", "new", "Ashfall", "--world", "Vael", "--persona", "Kit"]);
        let engine = lorekeeper::engine::start(cli.paths.clone()).unwrap();
        let mut harness =
            Harness::builder().with_max_steps(64).with_size([1280.0, 1000.0]).build_eframe(move |cc| WorkbenchApp::new(&cc.egui_ctx, engine));
        settle(&mut harness);
        harness.get_all_by_label("Campaigns").next().unwrap().click();
        run_until(&mut harness, "the campaign", |app| campaign(app).is_some_and(|c| c.persona.is_some()));
        click(&mut harness, "Settings of Ashfall");
        click(&mut harness, "Personas (1)");
        click(&mut harness, "Edit persona Kit");
        assert_eq!(field(&harness, "Persona's description").value().as_deref(), Some("a courier"), "the editor opens filled");
        replace_text(&mut harness, "Persona's name", "Kit Marlowe");
        replace_text(&mut harness, "Persona's description", "a courier who asks too many questions");
        click(&mut harness, "Save persona");
        run_until(&mut harness, "the persona edited", |app| {
            campaign(app).and_then(|c| c.persona.as_ref()).is_some_and(|p| p.name == "Kit Marlowe" && p.description == "a courier who asks too many questions")
        });

        type_into(&mut harness, "In-fiction minutes", "1500");
        click(&mut harness, "Set time");
        run_until(&mut harness, "the clock set", |app| campaign(app).is_some_and(|c| c.elapsed_minutes == 1500));
        assert!(harness.query_by_label_contains("1500 minutes in: 1 day").is_some(), "the time in words");

        click(&mut harness, "Delete persona Kit Marlowe");
        assert!(campaign(harness.state()).is_some_and(|c| c.persona.is_some()), "not at the first click");
        click(&mut harness, "Confirm delete of persona Kit Marlowe");
        run_until(&mut harness, "the persona deleted", |app| campaign(app).is_some_and(|c| c.persona.is_none()));
        let listed = cli.text(&["persona", "list"]);
        assert!(!listed.contains("Kit"), "{listed}");
    }

    /// What `persona image` does, done in the persona editor (the GUI had no way to): a
    /// file that is no PNG image is refused and the status line says why, a PNG is kept,
    /// and "Remove picture" takes it away.
    #[test]
    fn a_personas_picture_is_set_and_removed_in_the_persona_editor() {
        let dir = tempfile::tempdir().unwrap();
        let cli = setup(dir.path());
        cli.ok(&["persona", "new", "Kit", "--description", "a courier"]);
        cli.ok(&["world", "new", "Vael"]);
        cli.ok(&["campaign", "new", "Ashfall", "--world", "Vael", "--persona", "Kit"]);
        let not_png = dir.path().join("kit.txt");
        std::fs::write(&not_png, "a picture, honestly").unwrap();
        let picture = dir.path().join("kit.png");
        std::fs::write(&picture, crate::chat_files::tiny_png()).unwrap();
        let engine = lorekeeper::engine::start(cli.paths.clone()).unwrap();
        let store = engine.context().store.clone();
        let image = move || {
            store
                .with(|c| {
                    let id = lorekeeper::character::resolve_persona(c, "Kit")?.id;
                    lorekeeper::character::persona_image(c, &id)
                })
                .unwrap()
        };
        let mut harness =
            Harness::builder().with_max_steps(64).with_size([1280.0, 1000.0]).build_eframe(move |cc| WorkbenchApp::new(&cc.egui_ctx, engine));
        settle(&mut harness);
        harness.get_all_by_label("Campaigns").next().unwrap().click();
        run_until(&mut harness, "the campaign", |app| campaign(app).is_some_and(|c| c.persona.is_some()));
        click(&mut harness, "Settings of Ashfall");
        click(&mut harness, "Personas (1)");
        click(&mut harness, "Edit persona Kit");
        type_into(&mut harness, "Persona's picture (PNG)", not_png.to_str().unwrap());
        click(&mut harness, "Set picture");
        run_until(&mut harness, "the refusal", |app| app.campaigns().status().is_some_and(|s| s.is_err()));
        let said = harness.state().campaigns().status().cloned();
        assert!(said.as_ref().is_some_and(|s| s.as_ref().is_err_and(|e| e.contains("not a PNG"))), "{said:?}");
        assert!(harness.query_all_by_label_contains("not a PNG").next().is_some(), "the status line says why");
        assert_eq!(image(), None, "nothing stored");
        // The refused path stays to correct.
        assert_eq!(field(&harness, "Persona's picture (PNG)").value().as_deref(), Some(not_png.to_str().unwrap()));
        replace_text(&mut harness, "Persona's picture (PNG)", picture.to_str().unwrap());
        click(&mut harness, "Set picture");
        run_until(&mut harness, "the picture kept", |app| app.campaigns().status().is_some_and(|s| s.as_ref().is_ok_and(|t| t.contains("Pictured persona Kit"))));
        assert_eq!(image().as_deref(), Some(crate::chat_files::tiny_png().as_slice()));
        click(&mut harness, "Remove picture");
        run_until(&mut harness, "the picture gone", |app| app.campaigns().status().is_some_and(|s| s.as_ref().is_ok_and(|t| t.contains("Unpictured persona Kit"))));
        assert_eq!(image(), None);
    }

    /// "New character" in the Library panel makes a character and opens its sheet to
    /// write; "New lorebook" makes an empty book and opens its entry editor; a name
    /// already taken is refused in the status line.
    #[test]
    fn a_character_and_a_lorebook_are_written_from_scratch_in_the_library_panel() {
        let dir = tempfile::tempdir().unwrap();
        let cli = setup(dir.path());
        let engine = lorekeeper::engine::start(cli.paths.clone()).unwrap();
        let store = engine.context().store.clone();
        let mut harness =
            Harness::builder().with_max_steps(64).with_size([1280.0, 1400.0]).build_eframe(move |cc| WorkbenchApp::new(&cc.egui_ctx, engine));
        settle(&mut harness);
        harness.get_all_by_label("Library").next().unwrap().click();
        settle(&mut harness);
        type_into(&mut harness, "New character", "Odalys Fenwright");
        click(&mut harness, "Create character");
        run_until(&mut harness, "the new character's sheet", |app| {
            app.library().characters().iter().any(|c| c.name == "Odalys Fenwright") && app.library().sheet_value("name") == Some("Odalys Fenwright")
        });
        let description = "A reed-cutter of the fen.";
        let start = Instant::now();
        while harness.state().library().sheet_value("description") != Some(description) {
            assert!(start.elapsed() < Duration::from_secs(20), "the description field did not take the text");
            field(&harness, "Description").focus();
            settle(&mut harness);
            field(&harness, "Description").set_text_value_accesskit(description);
            settle(&mut harness);
        }
        click(&mut harness, "Save sheet");
        run_until(&mut harness, "the sheet saved", |app| app.library().status().is_some_and(|s| s.as_ref().is_ok_and(|t| t.contains("Saved the sheet"))));
        let record = store.with(|c| lorekeeper::character::resolve(c, "Odalys Fenwright")).unwrap();
        assert_eq!(lorekeeper::character::sheet(&record).description, description);
        assert_eq!(record.origin, "manual");
        click(&mut harness, "Close sheet");

        type_into(&mut harness, "New lorebook", "Fen Lore");
        click(&mut harness, "Create lorebook");
        run_until(&mut harness, "the new book in its entry editor", |app| {
            app.library().lorebooks().iter().any(|b| b.name == "Fen Lore") && app.library().lore_editor().is_open()
        });

        type_into(&mut harness, "New character", "odalys fenwright");
        click(&mut harness, "Create character");
        run_until(&mut harness, "the name refused", |app| {
            app.library().status().is_some_and(|s| s.as_ref().is_err_and(|t| t.contains("already goes by")))
        });
        let named = harness.state().library().characters().iter().filter(|c| c.name.eq_ignore_ascii_case("Odalys Fenwright")).count();
        assert_eq!(named, 1);
    }

    #[test]
    fn a_campaign_built_in_the_workbench_plays_with_its_own_lore() {
        let dir = tempfile::tempdir().unwrap();
        let cli = setup(dir.path());
        let bram = write(dir.path(), "bram.json", &card("Bram Holloway", "A cellar-keeper with burn-scarred hands.", "Wary, loyal."));
        let tessa = write(dir.path(), "tessa.json", &card("Tessa Quill", "A clerk who forges permits.", "Sharp, curious."));
        let book = write(
            dir.path(),
            "ashfall-lore.json",
            &json!({ "entries": { "0": {
                "uid": 0, "key": ["seal"], "comment": "The Black Seal",
                "content": "The black wax seal marks cargo of the Cinder Guild; carrying one uninvited is a death sentence.",
                "order": 100, "position": 0, "disable": false, "probability": 100
            } } }),
        );
        let engine = lorekeeper::engine::start(cli.paths.clone()).unwrap();
        lorekeeper::scene::demo::ensure(&engine.context().store).unwrap();
        let mut harness = Harness::builder()
            .with_max_steps(64)
            .with_size([1400.0, 1100.0])
            .build_eframe(move |cc| WorkbenchApp::new(&cc.egui_ctx, engine));
        settle(&mut harness);

        // The user's own files, imported in the Library panel.
        harness.get_all_by_label("Library").next().unwrap().click();
        settle(&mut harness);
        for file in [&bram, &tessa, &book] {
            type_into(&mut harness, "Import file", file);
            click(&mut harness, "Import");
        }
        run_until(&mut harness, "three items imported", |app| app.library().characters().len() >= 4 && !app.library().lorebooks().is_empty());

        harness.get_all_by_label("Campaigns").next().unwrap().click();
        settle(&mut harness);
        type_into(&mut harness, "New world", "Vael");
        click(&mut harness, "Create world");
        run_until(&mut harness, "the world", |app| app.campaigns().tree().worlds.iter().any(|w| w.name == "Vael"));
        click(&mut harness, "Settings of world Vael");
        type_into(&mut harness, "Notes", "Ash falls from the mountain every autumn.");
        click(&mut harness, "Save");
        run_until(&mut harness, "the notes", |app| app.campaigns().tree().worlds.iter().any(|w| w.name == "Vael" && !w.notes.is_empty()));
        type_into(&mut harness, "New campaign", "Ashfall");
        click(&mut harness, "Create campaign");
        run_until(&mut harness, "the campaign", |app| campaign(app).is_some());

        click(&mut harness, "Settings of Ashfall");
        type_into(&mut harness, "Persona name", "Kit");
        type_into(&mut harness, "Persona description", "a courier who asks too many questions");
        click(&mut harness, "Create persona");
        let start = Instant::now();
        while harness.query_by_label("Play as Kit").is_none() {
            assert!(start.elapsed() < Duration::from_secs(20), "the new persona is offered");
            std::thread::sleep(Duration::from_millis(10));
            harness.step();
        }
        // Each click waits for the engine's answer: the panel's rows move when it comes.
        click(&mut harness, "Play as Kit");
        run_until(&mut harness, "the persona", |app| campaign(app).is_some_and(|c| c.persona.is_some()));
        click(&mut harness, "Add Bram Holloway");
        run_until(&mut harness, "Bram in the cast", |app| campaign(app).is_some_and(|c| c.cast.len() == 1));
        click(&mut harness, "Add Tessa Quill");
        run_until(&mut harness, "Tessa in the cast", |app| campaign(app).is_some_and(|c| c.cast.len() == 2));
        click(&mut harness, "Attach ashfall-lore");
        run_until(&mut harness, "cast, persona and lore", |app| {
            campaign(app).is_some_and(|c| c.cast.len() == 2 && c.persona.is_some() && c.lorebooks.len() == 1)
        });
        type_into(&mut harness, "New arc", "The Cellar Job");
        click(&mut harness, "Create arc");
        run_until(&mut harness, "the arc", |app| campaign(app).is_some_and(|c| c.arcs.len() == 1));
        click(&mut harness, "Arc The Cellar Job");
        type_into(&mut harness, "New scene", "Under the Tavern");
        click(&mut harness, "Create scene");
        run_until(&mut harness, "the scene", |app| campaign(app).is_some_and(|c| c.arcs[0].scenes.len() == 1));

        // Play it.
        harness.get_by_label_contains("Scene Under the Tavern").click();
        settle(&mut harness);
        click(&mut harness, "Play in the Scene panel");
        run_until(&mut harness, "the scene is open", |app| app.scene().snapshot().is_some_and(|s| s.view.name == "Under the Tavern"));
        type_into(&mut harness, "Your message", "I put the black seal on the table.");
        click(&mut harness, "Play round");
        run_until(&mut harness, "the round", |app| {
            app.scene().last_error().is_some() || app.scene().snapshot().is_some_and(|s| s.view.rounds == 1 && s.view.name == "Under the Tavern")
        });
        assert_eq!(harness.state().scene().last_error(), None);
        // The Scene panel says which lore fired, why, and for whom.
        settle(&mut harness);
        assert!(harness.query_by_label_contains("Lore — round 1 (1 fired").is_some(), "the round's lore is listed");
        assert!(harness.query_by_label_contains("The Black Seal (key \"seal\") — given to director").is_some(), "with why and for whom");

        // A tracker by hand, then the transcript.
        harness.get_all_by_label("Campaigns").next().unwrap().click();
        settle(&mut harness);
        click(&mut harness, "Settings of Ashfall");
        type_into(&mut harness, "Tracker", "guild_alert");
        type_into(&mut harness, "Value", "raised");
        click(&mut harness, "Set tracker");
        run_until(&mut harness, "the tracker", |app| campaign(app).is_some_and(|c| c.trackers.get("guild_alert") == Some(&json!("raised"))));
        harness.get_by_label_contains("Scene Under the Tavern").click();
        settle(&mut harness);
        let out = dir.path().join("tavern.md");
        type_into(&mut harness, "Transcript file", out.to_str().unwrap());
        click(&mut harness, "Export Markdown");
        run_until(&mut harness, "the export", |_| out.exists());
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.contains("**Kit**: I put the black seal on the table.") && text.contains("**Tessa Quill**:"), "{text}");

        let store = Store::open(&cli.paths.library_file).unwrap();
        let calls = store.with(|c| lorekeeper::llm::calls::recent(c, 50)).unwrap();
        let prompts: Vec<String> = calls
            .iter()
            .filter(|c| c.model == "authoring-script")
            .map(|c| c.request.messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n"))
            .collect();
        assert!(prompts.len() >= 3, "the Director and both characters were called");
        let fired = prompts.iter().filter(|p| p.contains("carrying one uninvited is a death sentence")).count();
        assert!(fired >= 3, "the entry reached the Director and both characters ({fired} prompts)");
        for prompt in &prompts {
            assert!(prompt.contains("Ash falls from the mountain"), "the world's notes, saved in the panel");
            for demo in ["Saltmarsh", "Juno", "lamp_oil_hours", "Ossian"] {
                assert!(!prompt.contains(demo), "the demo's {demo:?} leaked:\n{prompt}");
            }
        }
    }
}

#[test]
fn a_book_attached_to_a_character_fires_in_its_scenes_and_chat_and_one_attached_to_the_chat_only_there() {
    let dir = tempfile::tempdir().unwrap();
    let cli = setup(dir.path());
    let bram = write(dir.path(), "bram.json", &card("Bram Holloway", "A cellar-keeper.", "Wary, loyal."));
    let book = |name: &str, key: &str, content: &str| {
        write(
            dir.path(),
            &format!("{name}.json"),
            &json!({ "entries": { "0": {
                "uid": 0, "key": [key], "keysecondary": [], "comment": name, "content": content,
                "constant": false, "selective": false, "order": 100, "position": 0, "disable": false, "probability": 100
            } } }),
        )
    };
    let secrets = book("bram-secrets", "cask", "The third cask from the left hides the Guild's ledger.");
    let chat_only = book("chat-only", "heron", "A heron nests on the cellar chimney.");
    cli.ok(&["import", &bram, &secrets, &chat_only]);
    cli.ok(&["world", "new", "Vael"]);
    cli.ok(&["campaign", "new", "Ashfall", "--world", "Vael"]);
    cli.ok(&["campaign", "cast", "add", "Ashfall", "Bram Holloway"]);
    cli.ok(&["arc", "new", "The Cellar Job", "--campaign", "Ashfall"]);
    let created = cli.ok(&["scene", "new", "Under the Tavern", "--arc", "The Cellar Job"]);
    let scene = last_event(&created, "scene_created")["scene_id"].as_str().unwrap().to_string();
    cli.ok(&["lorebook", "attach", "bram-secrets", "--character", "Bram Holloway"]);
    cli.ok(&["lorebook", "attach", "bram-secrets", "--character", "Bram Holloway"]);
    cli.ok(&["lorebook", "attach", "chat-only", "--chat", "Bram Holloway"]);

    // In the campaign's scene the character's book fires; the chat's does not.
    cli.ok(&["scene", "round", &scene, "I tap the cask and point at the heron."]);
    let store = Store::open(&cli.paths.library_file).unwrap();
    let prompts = |store: &Store| -> Vec<String> {
        store
            .with(|c| lorekeeper::llm::calls::recent(c, 50))
            .unwrap()
            .iter()
            .map(|c| c.request.messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n"))
            .collect()
    };
    let scene_prompts = prompts(&store);
    let bram_call = scene_prompts.iter().find(|p| p.contains("You are playing Bram Holloway")).expect("Bram acted");
    assert!(bram_call.contains("hides the Guild's ledger"), "the character's book fires in its scene");
    assert!(scene_prompts.iter().all(|p| !p.contains("heron nests")), "the chat's book stays in the chat");

    // In the chat both fire, each with its key.
    let sent = cli.ok(&["chat", "send", "--character", "Bram Holloway", "Is the heron back? And the cask?", "--json"]);
    let turn = &sent.last().unwrap()["turn"];
    let packet: String = turn["packet"]["messages"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap()).collect::<Vec<_>>().join("\n");
    assert!(packet.contains("hides the Guild's ledger") && packet.contains("heron nests on the cellar chimney"), "{packet}");
    let notes = turn["packet"]["notes"].to_string();
    assert!(notes.contains("key \\\"heron\\\"") && notes.contains("key \\\"cask\\\""), "{notes}");
    // Detached from the chat, it no longer fires there.
    cli.ok(&["lorebook", "detach", "chat-only", "--chat", "Bram Holloway"]);
    let sent = cli.ok(&["chat", "send", "--character", "Bram Holloway", "The heron again?", "--json"]);
    let packet = sent.last().unwrap()["turn"]["packet"].to_string();
    assert!(!packet.contains("heron nests"), "{packet}");
    assert!(cli.run(&["lorebook", "detach", "chat-only", "--chat", "Bram Holloway"]).is_err(), "it is not attached any more");
}

#[test]
fn a_lorebook_is_edited_entry_by_entry_and_says_why_an_entry_fires() {
    let dir = tempfile::tempdir().unwrap();
    let cli = setup(dir.path());
    let book = write(
        dir.path(),
        "river.json",
        &json!({ "entries": { "0": {
            "uid": 0, "key": ["seal"], "keysecondary": [], "comment": "The Black Seal", "content": "Guild wax.",
            "constant": false, "selective": false, "order": 100, "position": 0, "disable": false, "probability": 100,
            "someone_elses_field": "kept"
        } } }),
    );
    cli.ok(&["import", &book]);
    let entries = |events: &[Value]| last_event(events, "entries")["entries"].as_array().unwrap().clone();
    let added = cli.ok(&["lorebook", "entry", "add", "river", "--comment", "The Gate", "--keys", "gate, sluice", "--content", "The gate opens at dawn."]);
    assert_eq!(entries(&added).len(), 2);
    // Out-of-range and broken settings are refused with the field named; nothing changes.
    let refused = cli.run(&["lorebook", "entry", "edit", "river", "1", "--probability", "150"]).unwrap_err();
    assert!(refused.contains("probability"), "{refused}");
    let refused = cli.run(&["lorebook", "entry", "edit", "river", "1", "--keys", "/gate(/"]).unwrap_err();
    assert!(refused.contains("keys") && refused.contains("regular expression"), "{refused}");
    let edited = cli.ok(&["lorebook", "entry", "edit", "river", "1", "--position", "at-depth", "--depth", "2", "--role", "user", "--sticky", "3"]);
    assert_eq!(edited.iter().filter(|e| e["event"] == "entries").count(), 1, "only the book as saved: {edited:?}");
    let gate = &entries(&edited)[1];
    let said = cli.text(&["lorebook", "entry", "edit", "river", "1", "--sticky", "3"]);
    assert!(!said.contains("{\"event\""), "a person reads words, not the book as JSON: {said}");
    // SillyTavern's codes: position 4 is "at depth", role 1 is "user".
    assert_eq!((gate["position"].as_u64(), gate["depth"].as_u64(), gate["role"].as_u64(), gate["sticky"].as_u64()), (Some(4), Some(2), Some(1), Some(3)), "{gate}");
    assert_eq!(gate["content"], "The gate opens at dawn.", "settings not given are kept");
    // Every SillyTavern setting can be set from the command line.
    let all = cli.ok(&[
        "lorebook", "entry", "add", "river", "--keys", "probe", "--content", "x", "--case-sensitive", "true", "--whole-words", "false", "--use-probability", "false",
        "--exclude-recursion", "true", "--prevent-recursion", "true", "--delay-until-recursion", "2", "--group", "gates", "--group-weight", "30",
        "--group-override", "true", "--group-scoring", "true", "--vectorized", "true", "--ignore-budget", "true", "--characters", "Tessa, Bram",
        "--character-tags", "smuggler", "--exclude-characters", "true", "--triggers", "normal,swipe", "--match", "persona,creator-notes",
    ]);
    let set = &entries(&all)[2];
    for (field, value) in [
        ("case_sensitive", json!(true)), ("match_whole_words", json!(false)), ("use_probability", json!(false)), ("exclude_recursion", json!(true)),
        ("prevent_recursion", json!(true)), ("delay_until_recursion", json!(2)), ("group_weight", json!(30)), ("group_override", json!(true)),
        ("use_group_scoring", json!(true)), ("vectorized", json!(true)), ("ignore_budget", json!(true)), ("triggers", json!(["normal", "swipe"])),
        ("character_filter", json!({"is_exclude": true, "names": ["Tessa", "Bram"], "tags": ["smuggler"]})),
    ] {
        assert_eq!(set[field], value, "{field}: {set}");
    }
    assert_eq!((set["match_sources"]["persona_description"].as_bool(), set["match_sources"]["creator_notes"].as_bool()), (Some(true), Some(true)));
    let refused = cli.run(&["lorebook", "entry", "edit", "river", "2", "--triggers", "sometimes"]).unwrap_err();
    assert!(refused.contains("triggers") && refused.contains("sometimes"), "{refused}");
    cli.ok(&["lorebook", "entry", "delete", "river", "2"]);
    let duplicated = cli.ok(&["lorebook", "entry", "duplicate", "river", "1"]);
    assert_eq!(entries(&duplicated)[2]["comment"], "The Gate (copy)");
    let moved = cli.ok(&["lorebook", "entry", "move", "river", "2", "--to", "0"]);
    let labels: Vec<String> = entries(&moved).iter().map(|e| e["comment"].as_str().unwrap().to_string()).collect();
    assert_eq!(labels, ["The Gate (copy)", "The Black Seal", "The Gate"]);
    // The order reaches SillyTavern's editor as displayIndex; the words name the entry moved.
    let shown: Vec<Option<i64>> = entries(&moved).iter().map(|e| e["display_index"].as_i64()).collect();
    assert_eq!(shown, [Some(0), Some(1), Some(2)]);
    // A place past the last is a mistake said, not taken as "last".
    let past = cli.run(&["lorebook", "entry", "move", "river", "2", "--to", "9"]).unwrap_err();
    assert!(past.contains("past the last entry"), "{past}");
    let said = cli.text(&["lorebook", "entry", "move", "river", "2", "--to", "2"]);
    assert!(said.contains("moved entry 2 to 2 of"), "{said}");
    let deleted = cli.ok(&["lorebook", "entry", "delete", "river", "0"]);
    assert_eq!(entries(&deleted).len(), 2);

    // Why does an entry fire, or not?
    let tested = cli.ok(&["lorebook", "test", "river", "Someone broke the seal on the crate."]);
    let verdicts = last_event(&tested, "lore_test")["verdicts"].as_array().unwrap().clone();
    assert_eq!(verdicts[0]["fired"], true);
    assert_eq!(verdicts[0]["reason"], "key \"seal\"");
    assert_eq!(verdicts[1]["fired"], false);
    assert_eq!(verdicts[1]["reason"], "no key found in the scanned text");
    // A regular expression typed as a key keeps its commas.
    cli.ok(&["lorebook", "entry", "edit", "river", "1", "--keys", "/wyr{1,2}m/i, sluice"]);
    let tested = cli.ok(&["lorebook", "test", "river", "A WYRM sleeps under the gate."]);
    let verdicts = last_event(&tested, "lore_test")["verdicts"].as_array().unwrap().clone();
    assert_eq!(verdicts[1]["fired"], true, "{verdicts:?}");
    assert!(verdicts[1]["reason"].as_str().unwrap().contains("/wyr{1,2}m/i"), "{verdicts:?}");

    // The export carries the new entry, and the untouched one exactly as it came.
    let out = dir.path().join("river-out.json");
    cli.ok(&["export", "lorebook", "river", "--format", "world-info", "--out", out.to_str().unwrap()]);
    let exported: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let all = exported["entries"].as_object().unwrap();
    assert_eq!(all.len(), 2);
    assert!(all.values().any(|e| e["content"] == "The gate opens at dawn." && e["position"] == 4 && e["depth"] == 2));
    assert!(all.values().any(|e| e["comment"] == "The Black Seal" && e["someone_elses_field"] == "kept"), "{exported}");
}

#[test]
fn a_character_is_deleted_with_everything_of_it_once_confirmed() {
    let dir = tempfile::tempdir().unwrap();
    let cli = setup(dir.path());
    let mut with_book = card("Bram Holloway", "A cellar-keeper.", "Wary.");
    with_book["data"]["character_book"] = json!({ "name": "Bram's cellar", "entries": [
        { "keys": ["cask"], "content": "The casks are empty.", "enabled": true, "insertion_order": 100, "id": 1, "extensions": {} } ] });
    let bram = write(dir.path(), "bram.json", &with_book);
    let tessa = write(dir.path(), "tessa.json", &card("Tessa Quill", "A clerk.", "Sharp."));
    cli.ok(&["import", &bram, &tessa]);
    cli.ok(&["world", "new", "Vael"]);
    cli.ok(&["campaign", "new", "Ashfall", "--world", "Vael"]);
    cli.ok(&["campaign", "cast", "add", "Ashfall", "Bram Holloway", "Tessa Quill"]);
    cli.ok(&["chat", "send", "--character", "Bram Holloway", "Where are the marrowfat peas?", "--json"]);
    let store = Store::open(&cli.paths.library_file).unwrap();
    let bram_id: String = store.with(|c| Ok(c.query_row("SELECT id FROM characters WHERE name = 'Bram Holloway'", [], |r| r.get(0))?)).unwrap();
    // As if an identity run had developed him: the run is his character's.
    store
        .with(|c| {
            c.execute(
                "INSERT INTO identity_runs(id, name, mode, input_json, status, created_at) VALUES (?1, 'Bram Holloway', 'fast', '{}', 'completed', 'now')",
                [&bram_id],
            )?;
            Ok(())
        })
        .unwrap();
    let search = |query: &str| cli.ok(&["memory", "search", query, "--mode", "keyword", "--json"]).last().unwrap().to_string();
    assert!(search("marrowfat").contains("marrowfat"));

    // Unconfirmed, nothing goes, and the user is told what would.
    let refused = cli.run(&["character", "delete", "Bram Holloway"]).unwrap_err();
    assert!(refused.contains("1 chat exchange") && refused.contains("1 place in a campaign's cast") && refused.contains("1 lorebook of its card"), "{refused}");
    assert!(refused.contains("--yes"), "{refused}");
    let count = |sql: &str| -> i64 { store.with(|c| Ok(c.query_row(sql, [&bram_id], |r| r.get(0))?)).unwrap() };
    assert_eq!(count("SELECT count(*) FROM characters WHERE id = ?1"), 1);

    let deleted = cli.ok(&["character", "delete", "Bram Holloway", "--yes"]);
    assert_eq!(last_event(&deleted, "character_deleted")["name"], "Bram Holloway");
    for sql in [
        "SELECT count(*) FROM characters WHERE id = ?1",
        "SELECT count(*) FROM companion_turns WHERE character_id = ?1",
        "SELECT count(*) FROM lorebooks WHERE character_id = ?1",
        "SELECT count(*) FROM campaign_cast WHERE character_id = ?1",
        "SELECT count(*) FROM identity_runs WHERE id = ?1",
    ] {
        assert_eq!(count(sql), 0, "{sql}");
    }
    assert!(!search("marrowfat").contains("marrowfat"), "no memory of his chat is left");
    // The rest of the library is as it was; a character with nothing attached goes at once.
    let tree = last_event(&cli.ok(&["world", "list"]), "tree")["tree"].clone();
    assert_eq!(tree["worlds"][0]["campaigns"][0]["cast"].as_array().unwrap().len(), 1);
    cli.ok(&["campaign", "cast", "remove", "Ashfall", "Tessa Quill"]);
    cli.ok(&["character", "delete", "Tessa Quill"]);
    assert!(cli.run(&["identity", "delete", "nobody"]).is_err(), "a run is deleted only with --yes");
}

#[test]
fn a_campaigns_saved_budgets_are_what_its_rounds_use() {
    let dir = tempfile::tempdir().unwrap();
    let cli = setup(dir.path());
    let bram = write(dir.path(), "bram.json", &card("Bram Holloway", "A cellar-keeper.", "Wary."));
    let tessa = write(dir.path(), "tessa.json", &card("Tessa Quill", "A clerk.", "Sharp."));
    cli.ok(&["import", &bram, &tessa]);
    cli.ok(&["world", "new", "Vael"]);
    cli.ok(&["campaign", "new", "Ashfall", "--world", "Vael"]);
    cli.ok(&["campaign", "cast", "add", "Ashfall", "Bram Holloway", "Tessa Quill"]);
    cli.ok(&["arc", "new", "The Cellar Job", "--campaign", "Ashfall"]);
    let created = cli.ok(&["scene", "new", "Under the Tavern", "--arc", "The Cellar Job"]);
    let scene = last_event(&created, "scene_created")["scene_id"].as_str().unwrap().to_string();
    let refused = cli.run(&["campaign", "budgets", "Ashfall", "--history", "150"]).unwrap_err();
    assert!(refused.contains("budgets.history"), "{refused}");
    // Shares not given keep theirs, so these would add up to 125%: refused, saying so.
    let over = cli.run(&["campaign", "budgets", "Ashfall", "--history", "45", "--lore", "20", "--memories", "20", "--notes", "10"]).unwrap_err();
    assert!(over.contains("add up to 125%") && over.contains("director guidance 5") && over.contains("setting 5"), "{over}");
    cli.ok(&["campaign", "budgets", "Ashfall", "--summaries", "0", "--director-guidance", "0", "--character-guidance", "0"]);
    cli.ok(&["campaign", "budgets", "Ashfall", "--history", "45", "--lore", "20", "--memories", "20", "--notes", "10"]);
    cli.ok(&["scene", "round", &scene, "I put the black seal on the table."]);

    let store = Store::open(&cli.paths.library_file).unwrap();
    let record = store.with(|c| lorekeeper::scene::records::load_round(c, &scene, 1)).unwrap().unwrap();
    let calls = record.ledgers.as_array().unwrap();
    assert!(!calls.is_empty());
    for call in calls {
        let sections = call["ledger"]["sections"].as_array().unwrap();
        let percent = |name: &str| sections.iter().find(|s| s["section"] == name).unwrap()["percent"].as_f64().unwrap();
        assert_eq!((percent("history"), percent("lore"), percent("director_guidance"), percent("setting")), (45.0, 20.0, 0.0, 5.0), "{call}");
        // The shares applied to what was left once instructions, turn and reply were kept.
        let shared = call["ledger"]["max_context_tokens"].as_u64().unwrap();
        assert!(shared < 8192, "{call}");
        assert!(call["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().starts_with("context: 8192 tokens")), "{call}");
    }
    // Asked with nothing to change, it says what the shares are.
    let shown = last_event(&cli.ok(&["campaign", "budgets", "Ashfall"]), "budgets").clone();
    assert_eq!(shown["own"], true);
    assert!(shown["shares"].as_array().unwrap().iter().any(|s| s[0] == "history" && s[1] == 45.0), "{shown}");
    assert!(cli.text(&["campaign", "budgets", "Ashfall"]).contains("the campaign's own shares"));
    // Reset: the config file's shares again.
    cli.ok(&["campaign", "budgets", "Ashfall", "--reset"]);
    assert!(cli.text(&["campaign", "budgets", "Ashfall"]).contains("the config file's shares"));
    cli.ok(&["scene", "round", &scene, "I wait."]);
    let record = store.with(|c| lorekeeper::scene::records::load_round(c, &scene, 2)).unwrap().unwrap();
    let sections = record.ledgers[0]["ledger"]["sections"].as_array().unwrap().clone();
    assert_eq!(sections.iter().find(|s| s["section"] == "history").unwrap()["percent"], 25.0);

    // A plan saved before the setting had a share reads with its default 5: 105 in all,
    // scaled down when allocated, and a change that lowers it is taken.
    let old = r#"{"percent":{"history":30,"summaries":10,"lore":15,"memories":20,"notes":10,"director_guidance":5,"character_guidance":10}}"#;
    store.with(|c| Ok(c.execute("UPDATE campaigns SET budgets_json = ?1 WHERE name = 'Ashfall'", [old])?)).unwrap();
    let raised = cli.run(&["campaign", "budgets", "Ashfall", "--lore", "20"]).unwrap_err();
    assert!(raised.contains("add up to 110%"), "{raised}");
    cli.ok(&["campaign", "budgets", "Ashfall", "--history", "25"]);
    let shown = last_event(&cli.ok(&["campaign", "budgets", "Ashfall"]), "budgets").clone();
    assert!(shown["shares"].as_array().unwrap().iter().any(|s| s[0] == "setting" && s[1] == 5.0), "{shown}");
}

#[test]
fn an_imported_entrys_position_and_depth_place_it_in_the_prompt_as_sent() {
    let dir = tempfile::tempdir().unwrap();
    let cli = setup(dir.path());
    let bram = write(dir.path(), "bram.json", &card("Bram Holloway", "A cellar-keeper.", "Wary."));
    let book = write(
        dir.path(),
        "placed.json",
        &json!({ "entries": {
            "0": { "uid": 0, "key": ["seal"], "keysecondary": [], "comment": "After", "content": "PLACED-AFTER the characters.",
                   "constant": false, "selective": false, "order": 100, "position": 1, "disable": false, "probability": 100 },
            "1": { "uid": 1, "key": ["seal"], "keysecondary": [], "comment": "Deep", "content": "PLACED-AT-DEPTH in the chat.",
                   "constant": false, "selective": false, "order": 100, "position": 4, "depth": 0, "role": 0, "disable": false, "probability": 100 }
        } }),
    );
    cli.ok(&["import", &bram, &book]);
    cli.ok(&["world", "new", "Vael"]);
    cli.ok(&["campaign", "new", "Ashfall", "--world", "Vael"]);
    cli.ok(&["campaign", "cast", "add", "Ashfall", "Bram Holloway"]);
    cli.ok(&["lorebook", "attach", "placed", "--campaign", "Ashfall"]);
    cli.ok(&["arc", "new", "The Cellar Job", "--campaign", "Ashfall"]);
    let created = cli.ok(&["scene", "new", "Under the Tavern", "--arc", "The Cellar Job"]);
    let scene = last_event(&created, "scene_created")["scene_id"].as_str().unwrap().to_string();
    cli.ok(&["scene", "round", &scene, "I put the black seal on the table."]);
    let store = Store::open(&cli.paths.library_file).unwrap();
    let calls = store.with(|c| lorekeeper::llm::calls::recent(c, 50)).unwrap();
    let director = calls
        .iter()
        .map(|c| c.request.messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n"))
        .find(|p| p.contains("which characters act, in what order"))
        .expect("the Director's call");
    let at = |needle: &str| director.find(needle).unwrap_or_else(|| panic!("{needle} missing:\n{director}"));
    assert!(at("## Characters") < at("PLACED-AFTER"), "after the characters:\n{director}");
    // Depth 0: after the last message, as a system note.
    assert!(at("I put the black seal on the table.") < at("[system note] PLACED-AT-DEPTH"), "{director}");
}

#[test]
fn a_character_is_overridden_for_a_world_and_a_campaign() {
    let dir = tempfile::tempdir().unwrap();
    let cli = setup(dir.path());
    let bram = write(dir.path(), "bram.json", &card("Bram Holloway", "A cellar-keeper.", "Wary, loyal."));
    cli.ok(&["import", &bram]);
    cli.ok(&["world", "new", "Vael"]);
    cli.ok(&["campaign", "new", "Ashfall", "--world", "Vael"]);
    cli.ok(&["campaign", "cast", "add", "Ashfall", "Bram Holloway"]);
    cli.ok(&["arc", "new", "The Cellar Job", "--campaign", "Ashfall"]);
    let created = cli.ok(&["scene", "new", "Under the Tavern", "--arc", "The Cellar Job"]);
    let scene = last_event(&created, "scene_created")["scene_id"].as_str().unwrap().to_string();
    cli.ok(&["world", "override", "Vael", "Bram Holloway", "--description", "A cellar-keeper of Vael, ash in his beard."]);
    cli.ok(&["campaign", "override", "Ashfall", "Bram Holloway", "--personality", "Drunk and loud."]);
    assert!(cli.run(&["campaign", "override", "Ashfall", "Bram Holloway"]).is_err(), "nothing to override");
    cli.ok(&["scene", "round", &scene, "I put the black seal on the table."]);
    let store = Store::open(&cli.paths.library_file).unwrap();
    let bram_prompt = |store: &Store| -> String {
        store
            .with(|c| lorekeeper::llm::calls::recent(c, 100))
            .unwrap()
            .iter()
            .map(|c| c.request.messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n"))
            .find(|p| p.contains("You are playing Bram Holloway"))
            .expect("Bram acted")
    };
    let prompt = bram_prompt(&store);
    assert!(prompt.contains("ash in his beard") && prompt.contains("Drunk and loud."), "{prompt}");
    assert!(!prompt.contains("Wary, loyal."), "the campaign's personality wins over the card's:\n{prompt}");
    // An empty field takes the campaign's override away: the card's personality again.
    cli.ok(&["campaign", "override", "Ashfall", "Bram Holloway", "--personality", ""]);
    let view = last_event(&cli.ok(&["scene", "state", &scene]), "state")["view"].clone();
    let bram = view["cast"].as_array().unwrap().iter().find(|c| c["name"] == "Bram Holloway").unwrap().clone();
    assert_eq!(bram["sheet"]["personality"], "Wary, loyal.", "{bram}");
    assert!(bram["sheet"]["description"].as_str().unwrap().contains("ash in his beard"), "the world's stays");
}

/// Names as a person types them: a word of a campaign's, an arc's, a character's, a
/// persona's or a lorebook's name finds it when only one has such a word; when several
/// do, the error names them.
#[test]
fn names_are_found_by_a_word_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let cli = setup(dir.path());
    cli.ok(&["world", "new", "Skyreach"]);
    cli.ok(&["persona", "new", "Ensign Pell Varro"]);
    cli.ok(&["campaign", "new", "The Northern Run", "--world", "sky", "--persona", "varro"]);
    let odile = write(dir.path(), "odile.json", &card("Captain Odile Rask", "Commands the airship Heron.", "Blunt."));
    let odette = write(dir.path(), "odette.json", &card("Odette Lune", "A navigator.", "Quiet."));
    let book = write(
        dir.path(),
        "heron-ship-lore.json",
        &json!({ "entries": { "0": { "uid": 0, "key": ["heron"], "content": "The Heron is an airship.", "comment": "", "order": 100, "position": 0 } } }),
    );
    cli.ok(&["import", &odile, &odette, &book]);
    cli.ok(&["campaign", "cast", "add", "northern", "Rask"]);
    cli.ok(&["arc", "new", "Into the Squall", "--campaign", "Northern"]);
    let created = cli.ok(&["scene", "new", "The Gondola", "--arc", "squall"]);
    assert!(last_event(&created, "scene_created")["scene_id"].is_string());
    cli.ok(&["lorebook", "attach", "ship", "--campaign", "run"]);
    let tree = cli.ok(&["world", "list"]);
    let text = serde_json::to_string(&tree).unwrap();
    assert!(text.contains("The Gondola") && text.contains("Into the Squall"), "{text}");
    let store = Store::open(&dir.path().join("library.sqlite")).unwrap();
    let cast: Vec<String> = store
        .with(|c| Ok(c.prepare("SELECT ch.name FROM campaign_cast cc JOIN characters ch ON ch.id = cc.character_id")?.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?))
        .unwrap();
    assert_eq!(cast, ["Captain Odile Rask"]);
    // A name that starts so comes before a word that does: "od" is Odette.
    let added = cli.ok(&["campaign", "cast", "add", "northern", "od"]);
    assert_eq!(last_event(&added, "authored")["name"], "Odette Lune");
    // "Odile" is a word of two names: refused, with both named.
    let sister = write(dir.path(), "sister.json", &card("Sister Odile", "A chaplain.", "Kind."));
    cli.ok(&["import", &sister]);
    let refused = cli.run(&["campaign", "cast", "add", "northern", "odile"]).unwrap_err();
    assert!(refused.contains("more than one name matches (Captain Odile Rask, Sister Odile)"), "{refused}");
}
