//! The scene tables (migration `0006_scene.sql`): reading a scene whole, and the one
//! transaction that closes a round.

use super::model::{CastMember, CharacterState, MessageKind, SceneMessage, SceneSummary, SceneView};
use crate::store::{StoreError, new_id, now_rfc3339};
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

/// A scene by id, or by name when exactly one scene has it, or by the start of a name
/// or of a word of it (the one resolution of every authored level).
pub fn resolve_scene(conn: &Connection, key: &str) -> Result<String, StoreError> {
    super::authoring::resolve(conn, super::authoring::Level::Scene, key).map(|(id, _)| id)
}

/// Scenario / author notes of a scene and everything above it, broadest first.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SceneNotes {
    pub world: String,
    pub campaign: String,
    pub arc: String,
    pub scene: String,
    /// What the world is, as its game master described it (the envelope's setting; an
    /// arc has no description, and the scene's own is in the view).
    #[serde(default)]
    pub world_description: String,
    /// The campaign's premise, as described.
    #[serde(default)]
    pub campaign_description: String,
    /// Summaries of the campaign's earlier scenes (this arc's and earlier arcs'), oldest
    /// first.
    pub earlier_scenes: Vec<EarlierScene>,
    pub scene_summary: String,
    /// The last round `scene_summary` covers (0: none); history starts after it.
    #[serde(default)]
    pub summary_round: u32,
}

/// One earlier scene of the campaign as a later scene is told it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct EarlierScene {
    pub arc: String,
    pub scene: String,
    pub summary: String,
    /// Whether it belongs to the arc of the scene being played (told in full; an earlier
    /// arc's scenes are told briefly and go first when the budget is short).
    pub same_arc: bool,
    /// Its cast (character ids): only they are told it; the Director's passes and the
    /// Narrator and World agent hear every earlier scene.
    #[serde(default)]
    pub cast: Vec<String>,
}

/// The SQL condition "scene `s` was created before the scene `param` names" (creation
/// times tie within a second; the row order breaks the tie).
fn created_before(param: &str) -> String {
    format!(
        "(s.created_at < (SELECT created_at FROM scenes WHERE id = {param})
         OR (s.created_at = (SELECT created_at FROM scenes WHERE id = {param}) AND s.rowid < (SELECT rowid FROM scenes WHERE id = {param})))"
    )
}

pub fn load_notes(conn: &Connection, scene_id: &str) -> Result<SceneNotes, StoreError> {
    type NotesRow = (String, String, String, String, String, String, u32, String, String);
    let (world, campaign, arc, scene, arc_id, summary, summary_round, world_description, campaign_description): NotesRow =
        conn.query_row(
            "SELECT w.notes, c.notes, a.notes, s.notes, a.id, s.summary, s.summary_round, w.description, c.description
             FROM scenes s JOIN arcs a ON a.id = s.arc_id JOIN campaigns c ON c.id = a.campaign_id
             JOIN worlds w ON w.id = c.world_id WHERE s.id = ?1",
            [scene_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?, r.get(8)?)),
        )
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("scene {scene_id}")))?;
    // Every earlier scene of the campaign, whichever arc: the first scene of a new arc
    // is told the story so far.
    let mut stmt = conn.prepare(&format!(
        "SELECT a.name, s.name, s.summary, s.arc_id = ?1,
                (SELECT json_group_array(sc.character_id) FROM scene_cast sc WHERE sc.scene_id = s.id)
         FROM scenes s JOIN arcs a ON a.id = s.arc_id
         WHERE a.campaign_id = (SELECT a2.campaign_id FROM arcs a2 WHERE a2.id = ?1) AND s.id != ?2 AND s.summary != ''
           AND {}
         ORDER BY s.created_at, s.rowid",
        created_before("?2")
    ))?;
    let rows: Vec<(EarlierScene, String)> = stmt
        .query_map(params![arc_id, scene_id], |r| {
            Ok((EarlierScene { arc: r.get(0)?, scene: r.get(1)?, summary: r.get(2)?, same_arc: r.get(3)?, cast: Vec::new() }, r.get(4)?))
        })?
        .collect::<Result<_, _>>()?;
    let mut earlier_scenes = Vec::with_capacity(rows.len());
    for (mut earlier, cast) in rows {
        earlier.cast = serde_json::from_str(&cast).map_err(|e| corrupt("earlier scene cast", e))?;
        earlier_scenes.push(earlier);
    }
    Ok(SceneNotes { world, campaign, arc, scene, world_description, campaign_description, earlier_scenes, scene_summary: summary, summary_round })
}

/// The campaign's scenes created before `scene_id` whose running summary stops short of
/// their last round, with that round: a scene is summarised every few rounds, never at
/// its end, so its last rounds reach no later scene until they are folded in.
pub fn earlier_unsummarised(conn: &Connection, scene_id: &str) -> Result<Vec<(String, u32)>, StoreError> {
    let mut stmt = conn.prepare(&format!(
        "SELECT s.id, s.rounds FROM scenes s JOIN arcs a ON a.id = s.arc_id
         WHERE a.campaign_id = (SELECT a2.campaign_id FROM scenes s2 JOIN arcs a2 ON a2.id = s2.arc_id WHERE s2.id = ?1)
           AND s.id != ?1 AND s.rounds > s.summary_round AND {}
         ORDER BY s.created_at, s.rowid",
        created_before("?1")
    ))?;
    let rows = stmt.query_map(params![scene_id], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
    Ok(rows)
}

/// The scene with its cast (overrides applied), states and campaign state.
pub fn load_view(conn: &Connection, scene_id: &str) -> Result<SceneView, StoreError> {
    struct Row {
        name: String,
        description: String,
        active_json: String,
        muted_json: String,
        rounds: u32,
        arc: String,
        campaign: String,
        campaign_id: String,
        world: String,
        world_id: String,
        persona: Option<String>,
    }
    let row = conn
        .query_row(
            "SELECT s.name, s.description, s.active_json, s.rounds, a.name, c.name, c.id, w.name, w.id, s.muted_json,
                    c.persona_id
             FROM scenes s JOIN arcs a ON a.id = s.arc_id JOIN campaigns c ON c.id = a.campaign_id
             JOIN worlds w ON w.id = c.world_id WHERE s.id = ?1",
            [scene_id],
            |r| {
                Ok(Row {
                    name: r.get(0)?,
                    description: r.get(1)?,
                    active_json: r.get(2)?,
                    muted_json: r.get(9)?,
                    rounds: r.get(3)?,
                    arc: r.get(4)?,
                    campaign: r.get(5)?,
                    campaign_id: r.get(6)?,
                    world: r.get(7)?,
                    world_id: r.get(8)?,
                    persona: r.get(10)?,
                })
            },
        )
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("scene {scene_id}")))?;
    let active: BTreeSet<String> = serde_json::from_str(&row.active_json).map_err(|e| corrupt("scene active set", e))?;
    let muted: BTreeSet<String> = serde_json::from_str(&row.muted_json).map_err(|e| corrupt("scene muted set", e))?;

    let mut stmt = conn.prepare(
        "SELECT sc.character_id, st.state_json FROM scene_cast sc
         LEFT JOIN scene_character_states st ON st.scene_id = sc.scene_id AND st.character_id = sc.character_id
         WHERE sc.scene_id = ?1",
    )?;
    let rows: Vec<(String, Option<String>)> =
        stmt.query_map([scene_id], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
    let mut placed = Vec::new();
    for (id, state) in rows {
        // The characters table cascades into scene_cast, so a cast member always exists.
        let Some(character) = crate::character::placed(conn, &id, &row.world_id, &row.campaign_id)? else { continue };
        placed.push((character, state));
    }
    placed.sort_by(|(a, _), (b, _)| a.base_name.to_lowercase().cmp(&b.base_name.to_lowercase()).then_with(|| a.id.cmp(&b.id)));
    let mut cast = Vec::new();
    for (character, state) in placed {
        let state: CharacterState = match state {
            Some(json) => serde_json::from_str(&json).map_err(|e| corrupt("character state", e))?,
            None => CharacterState::default(),
        };
        cast.push(CastMember {
            active: active.contains(&character.id),
            muted: muted.contains(&character.id),
            id: character.id,
            name: character.name,
            sheet: character.sheet,
            tags: character.tags,
            creator_notes: character.creator_notes,
            depth_prompt: character.depth_prompt,
            state,
        });
    }

    let (trackers, facts, elapsed): (String, String, i64) = conn
        .query_row(
            "SELECT trackers_json, facts_json, elapsed_minutes FROM campaign_state WHERE campaign_id = ?1",
            [&row.campaign_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?
        .unwrap_or_else(|| ("{}".into(), "[]".into(), 0));
    Ok(SceneView {
        id: scene_id.to_string(),
        name: row.name,
        description: row.description,
        world: row.world,
        campaign: row.campaign,
        campaign_id: row.campaign_id,
        arc: row.arc,
        rounds: row.rounds,
        cast,
        trackers: serde_json::from_str(&trackers).map_err(|e| corrupt("trackers", e))?,
        facts: serde_json::from_str(&facts).map_err(|e| corrupt("facts", e))?,
        elapsed_minutes: elapsed.max(0) as u64,
        persona: match row.persona {
            Some(id) => crate::character::persona(conn, &id)?.map(|p| format!("{}: {}", p.name, p.description)),
            None => None,
        },
    })
}

/// The last `limit` messages of a scene, oldest first.
pub fn recent_messages(conn: &Connection, scene_id: &str, limit: u32) -> Result<Vec<SceneMessage>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT number, round, kind, character_id, speaker, content FROM scene_messages
         WHERE scene_id = ?1 ORDER BY number DESC LIMIT ?2",
    )?;
    let rows: Vec<(u32, u32, String, Option<String>, String, String)> = stmt
        .query_map(params![scene_id, limit], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))?
        .collect::<Result<_, _>>()?;
    // A character's lines carry the name it goes by now in this scene's campaign: after a
    // rename (its memories follow it) one prompt must not call it by two names.
    let place: Option<(String, String)> = conn
        .query_row(
            "SELECT c.world_id, c.id FROM scenes s JOIN arcs a ON a.id = s.arc_id JOIN campaigns c ON c.id = a.campaign_id WHERE s.id = ?1",
            [scene_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let mut names: std::collections::HashMap<String, Option<String>> = std::collections::HashMap::new();
    let mut out = Vec::with_capacity(rows.len());
    for (number, round, kind, character_id, speaker, content) in rows.into_iter().rev() {
        let kind = MessageKind::parse(&kind).ok_or_else(|| corrupt("message kind", &kind))?;
        let mut speaker = speaker;
        if let (Some(id), Some((world, campaign))) = (&character_id, &place) {
            if !names.contains_key(id) {
                let now = crate::character::placed(conn, id, world, campaign)?.map(|p| p.name);
                names.insert(id.clone(), now);
            }
            if let Some(Some(now)) = names.get(id) {
                speaker.clone_from(now);
            }
        }
        out.push(SceneMessage { number, round, kind, character_id, speaker, content });
    }
    Ok(out)
}

pub fn list_scenes(conn: &Connection) -> Result<Vec<SceneSummary>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT s.id, s.name, c.name, a.name, s.rounds, s.active_json
         FROM scenes s JOIN arcs a ON a.id = s.arc_id JOIN campaigns c ON c.id = a.campaign_id
         ORDER BY c.name COLLATE NOCASE, a.ordinal, s.created_at",
    )?;
    let rows: Vec<(String, String, String, String, u32, String)> =
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))?.collect::<Result<_, _>>()?;
    rows.into_iter()
        .map(|(id, name, campaign, arc, rounds, active)| {
            let active: Vec<String> = serde_json::from_str(&active).map_err(|e| corrupt("scene active set", e))?;
            Ok(SceneSummary { id, name, campaign, arc, rounds, active: active.len() })
        })
        .collect()
}

/// The stored audit of one round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundRecord {
    pub round: u32,
    pub input: Option<String>,
    pub director: serde_json::Value,
    pub ledgers: serde_json::Value,
    pub tokens: u64,
}

pub fn load_round(conn: &Connection, scene_id: &str, round: u32) -> Result<Option<RoundRecord>, StoreError> {
    let row: Option<(Option<String>, String, String, i64)> = conn
        .query_row(
            "SELECT input, director_json, ledgers_json, tokens FROM scene_rounds WHERE scene_id = ?1 AND round = ?2",
            params![scene_id, round],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .optional()?;
    row.map(|(input, director, ledgers, tokens)| {
        let mut director: serde_json::Value = serde_json::from_str(&director).map_err(|e| corrupt("round director", e))?;
        for plan in ["plan", "proposed"] {
            if let Some(plan) = director.get_mut(plan) {
                crate::scene::model::ActingCharacter::read_forced_sentinel(plan);
            }
        }
        Ok(RoundRecord {
            round,
            input,
            director,
            ledgers: serde_json::from_str(&ledgers).map_err(|e| corrupt("round ledgers", e))?,
            tokens: tokens.max(0) as u64,
        })
    })
    .transpose()
}

/// Everything a round changes, written by [`close_round`] at once.
#[derive(Debug, Clone)]
pub struct RoundClose {
    pub scene_id: String,
    pub campaign_id: String,
    pub round: u32,
    pub input: Option<String>,
    /// New messages in order, without numbers (they continue the scene's numbering).
    pub messages: Vec<(MessageKind, Option<String>, String, String)>,
    /// Every character whose state the round touched.
    pub states: BTreeMap<String, CharacterState>,
    pub active: BTreeSet<String>,
    pub trackers: BTreeMap<String, serde_json::Value>,
    pub facts: Vec<String>,
    pub elapsed_minutes: u64,
    /// The campaign state the round started from: the close applies only what the round
    /// changed, so another scene of the campaign closing meanwhile keeps its changes.
    /// `None`: the round's state is written whole (a kept round put back).
    pub campaign_before: Option<CampaignState>,
    pub director: serde_json::Value,
    pub ledgers: serde_json::Value,
    pub tokens: u64,
    /// The lore timers after every call of the round.
    pub lore_state: crate::lorebook::activation::ActivationState,
}

/// A campaign's trackers, facts and time, as a round read them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CampaignState {
    pub trackers: BTreeMap<String, serde_json::Value>,
    pub facts: Vec<String>,
    pub elapsed_minutes: u64,
}

/// `current` with what changed from `before` to `after` applied, field by field: a
/// tracker the round set or removed, facts it added or dropped, minutes it added. What
/// another scene changed meanwhile, and the round did not touch, stays.
pub fn merge_campaign_state(current: &CampaignState, before: &CampaignState, after: &CampaignState) -> CampaignState {
    let mut trackers = current.trackers.clone();
    for (name, value) in &after.trackers {
        if before.trackers.get(name) != Some(value) {
            trackers.insert(name.clone(), value.clone());
        }
    }
    for name in before.trackers.keys() {
        if !after.trackers.contains_key(name) {
            trackers.remove(name);
        }
    }
    let mut facts: Vec<String> = current.facts.iter().filter(|f| !before.facts.contains(f) || after.facts.contains(f)).cloned().collect();
    for fact in &after.facts {
        if !before.facts.contains(fact) && !facts.contains(fact) {
            facts.push(fact.clone());
        }
    }
    let added = after.elapsed_minutes.saturating_sub(before.elapsed_minutes);
    CampaignState { trackers, facts, elapsed_minutes: current.elapsed_minutes.saturating_add(added) }
}

/// Commit a round. Refuses (and writes nothing) when another round closed on the scene
/// since this one started, so two concurrent rounds cannot interleave their messages.
pub fn close_round(conn: &Connection, close: &RoundClose) -> Result<Vec<SceneMessage>, StoreError> {
    let rounds: u32 = conn.query_row("SELECT rounds FROM scenes WHERE id = ?1", [&close.scene_id], |r| r.get(0))?;
    if rounds + 1 != close.round {
        return Err(StoreError::Corrupt(format!(
            "round {} of scene {} cannot close: the scene has {rounds} closed rounds (another round ran meanwhile)",
            close.round, close.scene_id
        )));
    }
    let now = now_rfc3339();
    let mut before = snapshot_before(conn, close)?;
    let mut number: u32 =
        conn.query_row("SELECT COALESCE(MAX(number), 0) FROM scene_messages WHERE scene_id = ?1", [&close.scene_id], |r| r.get(0))?;
    let mut written = Vec::new();
    for (kind, character_id, speaker, content) in &close.messages {
        number += 1;
        conn.execute(
            "INSERT INTO scene_messages(id, scene_id, number, round, kind, character_id, speaker, content, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![new_id(), close.scene_id, number, close.round, kind.as_str(), character_id, speaker, content, now],
        )?;
        written.push(SceneMessage {
            number,
            round: close.round,
            kind: *kind,
            character_id: character_id.clone(),
            speaker: speaker.clone(),
            content: content.clone(),
        });
    }
    for (character_id, state) in &close.states {
        let json = serde_json::to_string(state).map_err(|e| corrupt("character state", e))?;
        conn.execute(
            "INSERT INTO scene_character_states(scene_id, character_id, state_json, round) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(scene_id, character_id) DO UPDATE SET state_json = excluded.state_json, round = excluded.round",
            params![close.scene_id, character_id, json, close.round],
        )?;
    }
    let active = serde_json::to_string(&close.active).map_err(|e| corrupt("active set", e))?;
    conn.execute(
        "UPDATE scenes SET rounds = ?2, active_json = ?3, updated_at = ?4 WHERE id = ?1",
        params![close.scene_id, close.round, active, now],
    )?;
    let after = CampaignState { trackers: close.trackers.clone(), facts: close.facts.clone(), elapsed_minutes: close.elapsed_minutes };
    let merged = match &close.campaign_before {
        Some(before) => {
            let row: Option<(String, String, i64)> = conn
                .query_row(
                    "SELECT trackers_json, facts_json, elapsed_minutes FROM campaign_state WHERE campaign_id = ?1",
                    [&close.campaign_id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()?;
            let current = match row {
                Some((t, f, e)) => CampaignState {
                    trackers: serde_json::from_str(&t).map_err(|e| corrupt("trackers", e))?,
                    facts: serde_json::from_str(&f).map_err(|e| corrupt("facts", e))?,
                    elapsed_minutes: e.max(0) as u64,
                },
                None => CampaignState::default(),
            };
            merge_campaign_state(&current, before, &after)
        }
        None => after,
    };
    let trackers = serde_json::to_string(&merged.trackers).map_err(|e| corrupt("trackers", e))?;
    let facts = serde_json::to_string(&merged.facts).map_err(|e| corrupt("facts", e))?;
    conn.execute(
        "INSERT INTO campaign_state(campaign_id, trackers_json, facts_json, elapsed_minutes, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT(campaign_id) DO UPDATE SET trackers_json = excluded.trackers_json, facts_json = excluded.facts_json,
            elapsed_minutes = excluded.elapsed_minutes, updated_at = excluded.updated_at",
        params![close.campaign_id, trackers, facts, merged.elapsed_minutes as i64, now],
    )?;
    // What the round wrote, beside what it found: undo takes back only what still reads
    // as the round left it, so an edit by hand (or another scene's round) since stays.
    let mut states_after = serde_json::Map::new();
    for (character_id, state) in &close.states {
        states_after.insert(character_id.clone(), serde_json::to_value(state).map_err(|e| corrupt("character state", e))?);
    }
    before["states_after"] = serde_json::Value::Object(states_after);
    before["campaign_after"] = serde_json::json!({ "trackers": merged.trackers, "facts": merged.facts, "elapsed": merged.elapsed_minutes });
    conn.execute(
        "INSERT INTO scene_rounds(scene_id, round, input, director_json, ledgers_json, tokens, created_at, before_json)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            close.scene_id,
            close.round,
            close.input,
            close.director.to_string(),
            close.ledgers.to_string(),
            close.tokens as i64,
            now,
            before.to_string()
        ],
    )?;
    super::lore::save_state(conn, &close.scene_id, close.round, &close.lore_state)?;
    Ok(written)
}

/// The stored rows a round close is about to overwrite, as they are: what undo puts back.
fn snapshot_before(conn: &Connection, close: &RoundClose) -> Result<serde_json::Value, StoreError> {
    let mut states = serde_json::Map::new();
    for character_id in close.states.keys() {
        let row: Option<(String, i64)> = conn
            .query_row(
                "SELECT state_json, round FROM scene_character_states WHERE scene_id = ?1 AND character_id = ?2",
                params![close.scene_id, character_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        states.insert(character_id.clone(), row.map_or(serde_json::Value::Null, |(s, r)| serde_json::json!({ "state": s, "round": r })));
    }
    let active: String = conn.query_row("SELECT active_json FROM scenes WHERE id = ?1", [&close.scene_id], |r| r.get(0))?;
    let campaign: Option<(String, String, i64)> = conn
        .query_row(
            "SELECT trackers_json, facts_json, elapsed_minutes FROM campaign_state WHERE campaign_id = ?1",
            [&close.campaign_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let lore: Option<(String, i64)> = conn
        .query_row("SELECT state_json, round FROM scene_lore_state WHERE scene_id = ?1", [&close.scene_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(serde_json::json!({
        "states": states,
        "active": active,
        "campaign": campaign.map(|(t, f, e)| serde_json::json!({ "trackers": t, "facts": f, "elapsed": e })),
        "lore": lore.map(|(s, r)| serde_json::json!({ "state": s, "round": r })),
    }))
}

/// The number the scene's next message gets.
pub fn next_message_number(conn: &Connection, scene_id: &str) -> Result<u32, StoreError> {
    Ok(conn.query_row("SELECT COALESCE(MAX(number), 0) + 1 FROM scene_messages WHERE scene_id = ?1", [scene_id], |r| r.get(0))?)
}

/// Take back the last closed round of `scene_id`: its messages go, and everything it
/// wrote is put back as it was, value by value, where it still reads as the round left
/// it; a tracker, fact, time or character state changed since (by hand, or by another
/// scene's round) keeps its new value, and the round's minutes are taken off the clock.
/// Returns the round, the ids of the memories its messages became (for the caller's
/// memory write), and — when the scene's summary told the round — the last round that
/// summary covered: it is forgotten (it cannot be taken apart), and the caller writes it

/// A scene as a watch compares it ([`crate::watch`]): the watched scene's row (rounds,
/// who is present, when it last changed) and its newest 500 messages, and the library's
/// rounds and messages in all, for the campaign tree's and scene list's counts, and the
/// authoring tree as the Campaigns panel shows it (a world, campaign, arc or scene made,
/// renamed or deleted elsewhere; a cast, persona or lorebook link changed).
#[derive(Debug, Clone, PartialEq)]
pub struct SceneStanding {
    pub scene: Option<u64>,
    pub library: (i64, i64, i64),
    pub tree: u64,
}

/// The standing of `scene_id` (none: only the library's counts).
pub fn standing(conn: &Connection, scene_id: Option<&str>) -> Result<SceneStanding, StoreError> {
    use std::hash::{Hash, Hasher};
    let library = conn.query_row(
        "SELECT (SELECT coalesce(sum(rounds), 0) FROM scenes), (SELECT count(*) FROM scene_messages), (SELECT coalesce(max(rowid), 0) FROM scene_messages)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    let scene = match scene_id {
        Some(id) => {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            let row: Option<(i64, String, String)> =
                conn.query_row("SELECT rounds, active_json, updated_at FROM scenes WHERE id = ?1", [id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).optional()?;
            row.hash(&mut hasher);
            let mut stmt = conn.prepare_cached("SELECT number, round, content FROM scene_messages WHERE scene_id = ?1 ORDER BY number DESC LIMIT 500")?;
            let rows = stmt.query_map([id], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?)))?;
            for row in rows {
                row?.hash(&mut hasher);
            }
            Some(hasher.finish())
        }
        None => None,
    };
    let tree = {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        let tree = super::authoring::tree(conn)?;
        serde_json::to_string(&tree).map_err(|e| corrupt("authoring tree", e))?.hash(&mut hasher);
        hasher.finish()
    };
    Ok(SceneStanding { scene, library, tree })
}

/// The number of the scene's last closed round (0: none yet).
pub fn rounds_of(conn: &Connection, scene_id: &str) -> Result<u32, StoreError> {
    Ok(conn.query_row("SELECT rounds FROM scenes WHERE id = ?1", [scene_id], |r| r.get(0))?)
}
/// again over what is left. Refused for a round closed before undo was possible.
pub fn undo_round(conn: &Connection, scene_id: &str) -> Result<(u32, Vec<String>, u32), StoreError> {
    let (rounds, campaign_id): (u32, String) = conn.query_row(
        "SELECT s.rounds, a.campaign_id FROM scenes s JOIN arcs a ON a.id = s.arc_id WHERE s.id = ?1",
        [scene_id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    if rounds == 0 {
        return Err(StoreError::Invalid("the scene has no round to undo".into()));
    }
    let forgotten = forget_summary_covering(conn, scene_id, rounds)?;
    let (before, closed_at): (Option<String>, String) = conn.query_row(
        "SELECT before_json, created_at FROM scene_rounds WHERE scene_id = ?1 AND round = ?2",
        params![scene_id, rounds],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let before: serde_json::Value = match before {
        Some(json) => serde_json::from_str(&json).map_err(|e| corrupt("round snapshot", e))?,
        None => return Err(StoreError::Invalid(format!("round {rounds} was closed before rounds could be undone"))),
    };
    if before["campaign_after"].is_object() {
        take_back(conn, scene_id, &campaign_id, &before)?;
    } else {
        restore_whole(conn, scene_id, &campaign_id, &closed_at, rounds, &before)?;
    }
    let active = before["active"].as_str().map(str::to_string).unwrap_or_else(|| "[]".into());
    conn.execute(
        "UPDATE scenes SET rounds = ?2, active_json = ?3, updated_at = ?4 WHERE id = ?1",
        params![scene_id, rounds - 1, active, now_rfc3339()],
    )?;
    let lore = &before["lore"];
    match (lore["state"].as_str(), lore["round"].as_i64()) {
        (Some(state), Some(round)) => conn.execute(
            "UPDATE scene_lore_state SET state_json = ?2, round = ?3 WHERE scene_id = ?1",
            params![scene_id, state, round],
        )?,
        _ => conn.execute("DELETE FROM scene_lore_state WHERE scene_id = ?1", [scene_id])?,
    };
    let mut stmt = conn.prepare("SELECT number FROM scene_messages WHERE scene_id = ?1 AND round = ?2")?;
    let numbers: Vec<u32> = stmt.query_map(params![scene_id, rounds], |r| r.get(0))?.collect::<Result<_, _>>()?;
    conn.execute("DELETE FROM scene_messages WHERE scene_id = ?1 AND round = ?2", params![scene_id, rounds])?;
    conn.execute("DELETE FROM scene_rounds WHERE scene_id = ?1 AND round = ?2", params![scene_id, rounds])?;
    Ok((rounds, numbers.into_iter().map(|n| format!("scene:{scene_id}:{n}")).collect(), forgotten))
}

/// `value` with what changed from `found` to `left` taken back, key by key, where
/// `value` still holds what the round `left`: a key changed since keeps its value.
fn take_back_keys(value: &mut serde_json::Map<String, serde_json::Value>, found: &serde_json::Value, left: &serde_json::Value) {
    let null = serde_json::Value::Null;
    let keys: BTreeSet<String> = found.as_object().into_iter().chain(left.as_object()).flat_map(|o| o.keys().cloned()).collect();
    for key in keys {
        let (was, wrote) = (found.get(&key).unwrap_or(&null), left.get(&key).unwrap_or(&null));
        if was == wrote || value.get(&key).unwrap_or(&null) != wrote {
            continue;
        }
        match was {
            serde_json::Value::Null => value.remove(&key),
            v => value.insert(key, v.clone()),
        };
    }
}

/// Undo for a round that kept what it wrote: each value the round set goes back to what
/// it found unless it changed since; facts it added go, facts it dropped come back; its
/// minutes come off the clock.
fn take_back(conn: &Connection, scene_id: &str, campaign_id: &str, before: &serde_json::Value) -> Result<(), StoreError> {
    let parse = |text: Option<&str>, what: &str| -> Result<serde_json::Value, StoreError> {
        text.map_or(Ok(serde_json::Value::Null), |t| serde_json::from_str(t).map_err(|e| corrupt(what, e)))
    };
    for (character_id, wrote) in before["states_after"].as_object().into_iter().flatten() {
        let found = &before["states"][character_id];
        let found_state = parse(found["state"].as_str(), "character state")?;
        let row: Option<(String, i64)> = conn
            .query_row(
                "SELECT state_json, round FROM scene_character_states WHERE scene_id = ?1 AND character_id = ?2",
                params![scene_id, character_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let Some((now_json, now_round)) = row else { continue };
        let mut now: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&now_json).map_err(|e| corrupt("character state", e))?;
        take_back_keys(&mut now, &found_state, wrote);
        let now = serde_json::Value::Object(now);
        if now == found_state || (found_state.is_null() && now.as_object().is_some_and(|o| o.values().all(serde_json::Value::is_null))) {
            match found["round"].as_i64() {
                Some(round) => conn.execute(
                    "UPDATE scene_character_states SET state_json = ?3, round = ?4 WHERE scene_id = ?1 AND character_id = ?2",
                    params![scene_id, character_id, now.to_string(), round],
                )?,
                None => conn.execute("DELETE FROM scene_character_states WHERE scene_id = ?1 AND character_id = ?2", params![scene_id, character_id])?,
            };
        } else {
            conn.execute(
                "UPDATE scene_character_states SET state_json = ?3, round = ?4 WHERE scene_id = ?1 AND character_id = ?2",
                params![scene_id, character_id, now.to_string(), now_round],
            )?;
        }
    }
    let found = &before["campaign"];
    let (found_trackers, found_facts) = (parse(found["trackers"].as_str(), "trackers")?, parse(found["facts"].as_str(), "facts")?);
    let found_elapsed = found["elapsed"].as_u64().unwrap_or(0);
    let left = &before["campaign_after"];
    let row: Option<(String, String, i64)> = conn
        .query_row("SELECT trackers_json, facts_json, elapsed_minutes FROM campaign_state WHERE campaign_id = ?1", [campaign_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .optional()?;
    let Some((trackers, facts, elapsed)) = row else { return Ok(()) };
    let mut trackers: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&trackers).map_err(|e| corrupt("trackers", e))?;
    take_back_keys(&mut trackers, &found_trackers, &left["trackers"]);
    let mut facts: Vec<String> = serde_json::from_str(&facts).map_err(|e| corrupt("facts", e))?;
    let list = |v: &serde_json::Value| -> Vec<String> { v.as_array().into_iter().flatten().filter_map(|f| f.as_str().map(str::to_string)).collect() };
    let (had, has) = (list(&found_facts), list(&left["facts"]));
    facts.retain(|f| had.contains(f) || !has.contains(f));
    for fact in had.iter().filter(|f| !has.contains(f)) {
        if !facts.contains(fact) {
            facts.push(fact.clone());
        }
    }
    let added = left["elapsed"].as_u64().unwrap_or(0).saturating_sub(found_elapsed);
    let elapsed = (elapsed.max(0) as u64).saturating_sub(added);
    conn.execute(
        "UPDATE campaign_state SET trackers_json = ?2, facts_json = ?3, elapsed_minutes = ?4, updated_at = ?5 WHERE campaign_id = ?1",
        params![
            campaign_id,
            serde_json::Value::Object(trackers).to_string(),
            serde_json::to_string(&facts).map_err(|e| corrupt("facts", e))?,
            elapsed as i64,
            now_rfc3339()
        ],
    )?;
    Ok(())
}

/// Undo for a round closed before rounds kept what they wrote: everything goes back
/// whole, so it is refused once anything changed the campaign's state since.
fn restore_whole(conn: &Connection, scene_id: &str, campaign_id: &str, closed_at: &str, rounds: u32, before: &serde_json::Value) -> Result<(), StoreError> {
    let changed_since: bool = conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM campaign_state WHERE campaign_id = ?1 AND updated_at > ?2)",
        params![campaign_id, closed_at],
        |r| r.get(0),
    )?;
    if changed_since || super::authoring::edited_since(conn, campaign_id, closed_at)? {
        return Err(StoreError::Conflict(format!(
            "round {rounds} cannot be undone: the campaign's state changed after it (another scene's round or an edit by hand)"
        )));
    }
    let text = |v: &serde_json::Value, key: &str| v[key].as_str().map(str::to_string);
    for (character_id, old) in before["states"].as_object().into_iter().flatten() {
        match (text(old, "state"), old["round"].as_i64()) {
            (Some(state), Some(round)) => conn.execute(
                "UPDATE scene_character_states SET state_json = ?3, round = ?4 WHERE scene_id = ?1 AND character_id = ?2",
                params![scene_id, character_id, state, round],
            )?,
            _ => conn.execute("DELETE FROM scene_character_states WHERE scene_id = ?1 AND character_id = ?2", params![scene_id, character_id])?,
        };
    }
    let campaign = &before["campaign"];
    match (text(campaign, "trackers"), text(campaign, "facts"), campaign["elapsed"].as_i64()) {
        (Some(trackers), Some(facts), Some(elapsed)) => conn.execute(
            "UPDATE campaign_state SET trackers_json = ?2, facts_json = ?3, elapsed_minutes = ?4, updated_at = ?5 WHERE campaign_id = ?1",
            params![campaign_id, trackers, facts, elapsed, now_rfc3339()],
        )?,
        _ => conn.execute("DELETE FROM campaign_state WHERE campaign_id = ?1", [&campaign_id])?,
    };
    Ok(())
}

/// The round of message `number` of a scene.
fn round_of_message(conn: &Connection, scene_id: &str, number: u32) -> Result<u32, StoreError> {
    conn.query_row("SELECT round FROM scene_messages WHERE scene_id = ?1 AND number = ?2", params![scene_id, number], |r| r.get(0))
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("message {number} of scene {scene_id}")))
}

/// Forget the scene's summary when round `round` is one it covers: it was written from
/// the transcript as it read before, and would go on telling every agent (and the later
/// scenes of the arc) what was edited or taken out. Those rounds are shown as they now
/// read until the summary is written again. Returns the last round the forgotten
/// summary covered, 0 when it did not cover `round`.
fn forget_summary_covering(conn: &Connection, scene_id: &str, round: u32) -> Result<u32, StoreError> {
    let covered: u32 = conn.query_row("SELECT summary_round FROM scenes WHERE id = ?1", [scene_id], |r| r.get(0))?;
    if round == 0 || round > covered {
        return Ok(0);
    }
    conn.execute("UPDATE scenes SET summary = '', summary_round = 0 WHERE id = ?1", [scene_id])?;
    Ok(covered)
}

/// Change the text of message `number` of a scene (a transcript edit by hand). Returns
/// the last round of the scene's summary when the summary told the message and was
/// forgotten (0 otherwise): the caller writes it again.
pub fn edit_message(conn: &Connection, scene_id: &str, number: u32, text: &str) -> Result<u32, StoreError> {
    if text.trim().is_empty() {
        return Err(StoreError::Invalid("a message cannot be edited to nothing".into()));
    }
    let round = round_of_message(conn, scene_id, number)?;
    conn.execute("UPDATE scene_messages SET content = ?3 WHERE scene_id = ?1 AND number = ?2", params![scene_id, number, text.trim()])?;
    forget_summary_covering(conn, scene_id, round)
}

/// Take message `number` out of a scene's transcript (the others keep their numbers).
/// Returns what [`edit_message`] does.
pub fn delete_message(conn: &Connection, scene_id: &str, number: u32) -> Result<u32, StoreError> {
    let round = round_of_message(conn, scene_id, number)?;
    conn.execute("DELETE FROM scene_messages WHERE scene_id = ?1 AND number = ?2", params![scene_id, number])?;
    forget_summary_covering(conn, scene_id, round)
}

/// Mute or unmute a cast member: the Director cannot pick a muted character to act.
pub fn set_muted(conn: &Connection, scene_id: &str, character_id: &str, muted: bool) -> Result<(), StoreError> {
    let json: String = conn.query_row("SELECT muted_json FROM scenes WHERE id = ?1", [scene_id], |r| r.get(0))?;
    let mut set: BTreeSet<String> = serde_json::from_str(&json).map_err(|e| corrupt("muted set", e))?;
    if muted {
        set.insert(character_id.to_string());
    } else {
        set.remove(character_id);
    }
    let json = serde_json::to_string(&set).map_err(|e| corrupt("muted set", e))?;
    conn.execute("UPDATE scenes SET muted_json = ?2 WHERE id = ?1", params![scene_id, json])?;
    Ok(())
}

/// Add a character to a scene's cast, absent: the Director brings them in when the
/// story wants them.
/// Whether `character_id` is in the cast of `scene_id`.
pub fn in_cast(conn: &Connection, scene_id: &str, character_id: &str) -> Result<bool, StoreError> {
    Ok(conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM scene_cast WHERE scene_id = ?1 AND character_id = ?2)",
        params![scene_id, character_id],
        |r| r.get(0),
    )?)
}

pub fn add_to_cast(conn: &Connection, scene_id: &str, character_id: &str) -> Result<(), StoreError> {
    conn.execute("INSERT OR IGNORE INTO scene_cast(scene_id, character_id) VALUES (?1, ?2)", params![scene_id, character_id])?;
    conn.execute("UPDATE scenes SET updated_at = ?2 WHERE id = ?1", params![scene_id, now_rfc3339()])?;
    Ok(())
}

/// Take a character out of a scene's cast (and so out of who is present and who is
/// muted). Its state in the scene and what it said stay: added again, it is as it was.
pub fn remove_from_cast(conn: &Connection, scene_id: &str, character_id: &str) -> Result<(), StoreError> {
    conn.execute("DELETE FROM scene_cast WHERE scene_id = ?1 AND character_id = ?2", params![scene_id, character_id])?;
    let (active, muted): (String, String) =
        conn.query_row("SELECT active_json, muted_json FROM scenes WHERE id = ?1", [scene_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let without = |json: &str, what: &str| -> Result<String, StoreError> {
        let mut set: BTreeSet<String> = serde_json::from_str(json).map_err(|e| corrupt(what, e))?;
        set.remove(character_id);
        serde_json::to_string(&set).map_err(|e| corrupt(what, e))
    };
    conn.execute(
        "UPDATE scenes SET active_json = ?2, muted_json = ?3, updated_at = ?4 WHERE id = ?1",
        params![scene_id, without(&active, "scene active set")?, without(&muted, "scene muted set")?, now_rfc3339()],
    )?;
    Ok(())
}

/// A new scene in `arc_id` with `cast` (character ids), `active` a subset of it.
pub fn create_scene(
    conn: &Connection,
    arc_id: &str,
    name: &str,
    description: &str,
    cast: &[String],
    active: &[String],
) -> Result<String, StoreError> {
    let id = new_id();
    let now = now_rfc3339();
    let active: BTreeSet<&String> = active.iter().filter(|a| cast.contains(a)).collect();
    let active_json = serde_json::to_string(&active).map_err(|e| corrupt("active set", e))?;
    conn.execute(
        "INSERT INTO scenes(id, arc_id, name, description, active_json, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
        params![id, arc_id, name, description, active_json, now],
    )?;
    for character in cast {
        conn.execute("INSERT OR IGNORE INTO scene_cast(scene_id, character_id) VALUES (?1, ?2)", params![id, character])?;
    }
    Ok(id)
}

/// A character id from an id or a (case-insensitive) name.
pub fn resolve_character(conn: &Connection, key: &str) -> Result<String, StoreError> {
    Ok(crate::character::resolve(conn, key)?.id)
}

/// The newest arc, for `scene new` without `--arc`.
pub fn latest_arc(conn: &Connection) -> Result<Option<String>, StoreError> {
    Ok(conn.query_row("SELECT id FROM arcs ORDER BY created_at DESC, ordinal DESC LIMIT 1", [], |r| r.get(0)).optional()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state(trackers: &[(&str, serde_json::Value)], facts: &[&str], minutes: u64) -> CampaignState {
        CampaignState {
            trackers: trackers.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
            facts: facts.iter().map(|f| f.to_string()).collect(),
            elapsed_minutes: minutes,
        }
    }

    /// Two scenes of one campaign close rounds that both started from the same state:
    /// the second keeps what the first changed and adds its own.
    #[test]
    fn a_round_close_applies_only_what_the_round_changed() {
        let start = state(&[("fog", json!("thick")), ("alarm", json!(0))], &["The bridge is out."], 60);
        // Scene A closed first: fog lifted, a fact, 10 minutes.
        let after_a = state(&[("fog", json!("lifting")), ("alarm", json!(0))], &["The bridge is out.", "The seal is green."], 70);
        // Scene B, from the same start: the alarm rose, the bridge fact dropped, 5 minutes.
        let after_b = state(&[("fog", json!("thick")), ("alarm", json!(1))], &[], 65);
        let merged = merge_campaign_state(&after_a, &start, &after_b);
        assert_eq!(merged.trackers.get("fog"), Some(&json!("lifting")), "A's fog is kept: B did not change it");
        assert_eq!(merged.trackers.get("alarm"), Some(&json!(1)), "B's alarm");
        assert_eq!(merged.facts, ["The seal is green."], "A's new fact kept, the fact B dropped gone");
        assert_eq!(merged.elapsed_minutes, 75, "both rounds' minutes");
        // A tracker the round removed goes; one another scene added stays.
        let current = state(&[("fog", json!("thick")), ("tide", json!("high"))], &[], 60);
        let removed = merge_campaign_state(&current, &state(&[("fog", json!("thick"))], &[], 60), &state(&[], &[], 60));
        assert_eq!(removed.trackers.keys().collect::<Vec<_>>(), ["tide"]);
    }
}
