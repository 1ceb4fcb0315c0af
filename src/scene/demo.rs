//! The demo world: a small campaign written for Lorekeeper, so a first launch has a
//! scene ready to play (with the demo profile, no model is needed).
//!
//! Added once per library: the `scene.demo` meta key remembers it, so deleting the
//! demo does not bring it back.

use super::records;
use crate::character::{self, NewCharacter, Origin};
use crate::lorebook::{LoreEntry, Lorebook};
use crate::store::{Store, StoreError, new_id, now_rfc3339};
use rusqlite::{Connection, params};

const META_KEY: &str = "scene.demo";

struct DemoCharacter {
    name: &'static str,
    description: &'static str,
    personality: &'static str,
    active: bool,
    location: &'static str,
    mood: &'static str,
}

const CHARACTERS: [DemoCharacter; 3] = [
    DemoCharacter {
        name: "Wren Talloway",
        description: "Keeper of the Saltmarsh lighthouse, fifties, weathered hands, a brass spyglass always on a cord.",
        personality: "Patient, dry-humoured, stubborn about the light; distrusts anyone who arrives by night.",
        active: true,
        location: "the lamp room",
        mood: "watchful",
    },
    DemoCharacter {
        name: "Ossian Vale",
        description: "A young cartographer from the inland college, ink on his cuffs, maps rolled under one arm.",
        personality: "Eager, talkative, brave in theory and nervous in practice; notices patterns others miss.",
        active: true,
        location: "the stair below the lamp room",
        mood: "curious",
    },
    DemoCharacter {
        name: "Marguerite Siltborne",
        description: "A smuggler captain with a silver-streaked braid and an oilskin coat that has seen three wars.",
        personality: "Charming, calculating, loyal only to her crew; keeps her promises to the letter, never the spirit.",
        active: false,
        location: "a skiff in the fog below the rocks",
        mood: "impatient",
    },
];

/// Add the demo if this library has never had it and holds nothing of the user's: no
/// world, no character of theirs, no lorebook, no identity run (a character being
/// developed has no character row until it completes, yet the library is the user's).
/// Returns the demo scene's id when it was added now.
pub fn ensure(store: &Store) -> Result<Option<String>, StoreError> {
    if store.meta_get(META_KEY)?.is_some() {
        return Ok(None);
    }
    store.transaction(|tx| {
        let worlds: i64 = tx.query_row("SELECT COUNT(*) FROM worlds", [], |r| r.get(0))?;
        if worlds > 0
            || character::any_of_the_users(tx)?
            || crate::interop::library::any_lorebook(tx)?
            || crate::identity::records::any_run(tx)?
        {
            tx.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?1, 'skipped')", [META_KEY])?;
            return Ok(None);
        }
        let scene = insert(tx)?;
        tx.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)", params![META_KEY, scene])?;
        Ok(Some(scene))
    })
}

fn insert(conn: &Connection) -> Result<String, StoreError> {
    let now = now_rfc3339();
    let persona =
        character::insert_persona(conn, "Juno", "a courier carrying a sealed letter for the lighthouse keeper, soaked from the crossing")?;
    let world = new_id();
    conn.execute(
        "INSERT INTO worlds(id, name, description, notes, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            world,
            "The Saltmarsh Coast",
            "A foggy coast of tidal flats, drowned villages and one working lighthouse.",
            "Low magic: the fog sometimes carries voices of the drowned. Technology is oil lamps and sailing ships.",
            now
        ],
    )?;
    let campaign = new_id();
    conn.execute(
        "INSERT INTO campaigns(id, world_id, name, description, notes, persona_id, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            campaign,
            world,
            "The Unlit Night",
            "Someone wants the Saltmarsh light dark for one night.",
            "Tone: quiet suspense, warm moments between tense ones. Keep replies short.",
            persona,
            now
        ],
    )?;
    conn.execute(
        "INSERT INTO campaign_state(campaign_id, trackers_json, facts_json, elapsed_minutes, updated_at) VALUES (?1, ?2, ?3, 0, ?4)",
        params![campaign, r#"{"fog": "thick", "lamp_oil_hours": 6}"#, r#"["The relief ship is two days late."]"#, now],
    )?;
    let arc = new_id();
    conn.execute(
        "INSERT INTO arcs(id, campaign_id, ordinal, name, notes, created_at) VALUES (?1, ?2, 1, ?3, ?4, ?5)",
        params![arc, campaign, "The Letter", "The letter asks Wren to put out the light at midnight. Who sent it?", now],
    )?;
    let mut cast = Vec::new();
    let mut active = Vec::new();
    for character in &CHARACTERS {
        let id = new_id();
        let card = serde_json::json!({
            "spec": "chara_card_v2",
            "spec_version": "2.0",
            "data": {
                "name": character.name,
                "description": character.description,
                "personality": character.personality,
                "scenario": "The Saltmarsh lighthouse on a foggy night.",
                "first_mes": "",
                "mes_example": "",
                "creator_notes": "Lorekeeper demo character.",
                "system_prompt": "",
                "post_history_instructions": "",
                "alternate_greetings": [],
                "tags": ["demo"],
                "creator": "Lorekeeper",
                "character_version": "1",
                "extensions": {}
            }
        });
        let card = card.to_string();
        let new = NewCharacter { id: Some(&id), name: character.name, origin: Origin::Demo, card_json: Some(&card), profile_json: None };
        character::insert(conn, new)?;
        if character.active {
            active.push(id.clone());
        }
        cast.push((id, character));
    }
    let cast_ids: Vec<String> = cast.iter().map(|(id, _)| id.clone()).collect();
    let scene = records::create_scene(
        conn,
        &arc,
        "The Lamp Room",
        "Midnight approaches at the top of the lighthouse. Rain on the glass, the great lamp turning.",
        &cast_ids,
        &active,
    )?;
    conn.execute(
        "UPDATE scenes SET notes = ?2 WHERE id = ?1",
        params![scene, "Marguerite is waiting for the light to go out; she enters only if the Director decides it fits."],
    )?;
    for (id, character) in &cast {
        let state = serde_json::json!({ "location": character.location, "mood": character.mood });
        conn.execute(
            "INSERT INTO scene_character_states(scene_id, character_id, state_json, round) VALUES (?1, ?2, ?3, 0)",
            params![scene, id, state.to_string()],
        )?;
    }
    let book = Lorebook {
        name: Some("Saltmarsh Lore".into()),
        description: Some("Places and customs of the Saltmarsh Coast.".into()),
        entries: vec![
            lore(&["lighthouse", "the light", "lamp"], "Saltmarsh Light", "The Saltmarsh light has not gone dark in ninety years; the coast believes the drowned rise on the night it does."),
            lore(&["letter", "seal"], "The Harbour Seal", "Letters sealed in green wax come from the harbour council, or from someone who stole its seal."),
            lore(&["fog", "voices"], "Fog Voices", "On thick nights the fog carries voices; keepers are taught never to answer them by name."),
            lore(&["smuggler", "Siltborne", "skiff"], "The Siltborne Crew", "Marguerite Siltborne's crew runs brandy past the light on moonless nights and pays the village to look away."),
        ],
        ..Default::default()
    };
    let book_id = crate::interop::library::insert_lorebook(conn, "Saltmarsh Lore", None, &book, None)?;
    conn.execute("INSERT INTO campaign_lorebooks(campaign_id, lorebook_id) VALUES (?1, ?2)", params![campaign, book_id])?;
    Ok(scene)
}

fn lore(keys: &[&str], comment: &str, content: &str) -> LoreEntry {
    LoreEntry {
        keys: keys.iter().map(|k| k.to_string()).collect(),
        comment: comment.into(),
        content: content.into(),
        enabled: true,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_is_added_once_and_reads_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("lib.sqlite")).unwrap();
        let scene = ensure(&store).unwrap().expect("added on a new library");
        assert_eq!(ensure(&store).unwrap(), None, "never twice");
        let view = store.with(|c| records::load_view(c, &scene)).unwrap();
        assert_eq!(view.cast.len(), 3);
        assert_eq!(view.active().count(), 2);
        assert_eq!(view.persona.as_deref().map(|p| p.starts_with("Juno")), Some(true));
        let wren = view.member_by_name("wren talloway").unwrap();
        assert_eq!(wren.state.location.as_deref(), Some("the lamp room"));
        assert!(wren.sheet["personality"].contains("stubborn"));
        let lore = store.with(|c| crate::scene::lore::campaign_lore(c, &view.campaign_id)).unwrap();
        assert_eq!(lore.entries.len(), 4);
        assert_eq!(view.trackers["lamp_oil_hours"], 6);
    }

    /// A library that holds only identity runs (one character still being developed,
    /// no character row yet) is the user's: no demo world is added to it.
    #[test]
    fn a_library_with_only_an_identity_run_gets_no_demo() {
        use crate::identity::records::{RunRecord, RunStatus, insert_run};
        use crate::identity::schema::{CharacterSeed, Mode};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("lib.sqlite")).unwrap();
        let seed = CharacterSeed::parse(r#"{"name": "Oona Marrow", "role": "keeper", "concept": "Keeps the light and a secret."}"#).unwrap();
        let run = RunRecord {
            id: "run-1".into(),
            name: seed.name.clone(),
            mode: Mode::Fast,
            seed,
            entry_input: None,
            profile: None,
            auto_approve: false,
            status: RunStatus::InProgress,
            regenerations: 0,
            created_at: now_rfc3339(),
            completed_at: None,
            error: None,
        };
        store.transaction(|tx| insert_run(tx, &run)).unwrap();
        assert_eq!(ensure(&store).unwrap(), None);
        let worlds: i64 = store.with(|c| Ok(c.query_row("SELECT COUNT(*) FROM worlds", [], |r| r.get(0))?)).unwrap();
        assert_eq!(worlds, 0);
        assert_eq!(crate::companion::demo::ensure(&store).unwrap(), None, "nor the demo companion");
    }
}
