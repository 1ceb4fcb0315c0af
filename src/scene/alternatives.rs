//! Redo and the rounds it keeps: a redo takes the last round back (as undo does) and
//! plays it again from the same input, keeping the old round whole as an alternative;
//! choosing an alternative swaps it with the round in its place. Every swap is one
//! transaction that also moves the rounds' memories, so what the characters remember is
//! always the round being played.

use super::model::{CharacterState, MessageKind, SceneMessage};
use super::records::{self, RoundClose};
use crate::memory::{MemoryWrite, NewMemory};
use crate::store::{StoreError, new_id, now_rfc3339};
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

/// One message of a kept round, with who witnessed it (its memory's witnesses).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeptMessage {
    pub kind: MessageKind,
    pub character_id: Option<String>,
    pub speaker: String,
    pub content: String,
    pub witnesses: Vec<String>,
}

/// A closed round whole, as it left the scene: enough to close it again exactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeptRound {
    pub round: u32,
    pub campaign_id: String,
    pub input: Option<String>,
    pub messages: Vec<KeptMessage>,
    /// The states the round wrote (the characters it touched).
    pub states: BTreeMap<String, CharacterState>,
    pub active: BTreeSet<String>,
    pub trackers: BTreeMap<String, serde_json::Value>,
    pub facts: Vec<String>,
    pub elapsed_minutes: u64,
    pub director: serde_json::Value,
    pub ledgers: serde_json::Value,
    pub tokens: u64,
    pub lore_state: crate::lorebook::activation::ActivationState,
}

/// A kept round, as lists show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alternative {
    pub id: String,
    pub round: u32,
    pub saved_at: String,
    pub preview: String,
}

/// The scene's last closed round, read whole.
fn capture(conn: &Connection, scene_id: &str) -> Result<KeptRound, StoreError> {
    let (rounds, active, campaign_id): (u32, String, String) = conn.query_row(
        "SELECT s.rounds, s.active_json, a.campaign_id FROM scenes s JOIN arcs a ON a.id = s.arc_id WHERE s.id = ?1",
        [scene_id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    if rounds == 0 {
        return Err(StoreError::Invalid("the scene has no round to redo".into()));
    }
    let record = records::load_round(conn, scene_id, rounds)?.ok_or_else(|| StoreError::NotFound(format!("round {rounds} of scene {scene_id}")))?;
    let mut stmt = conn.prepare(
        "SELECT number, kind, character_id, speaker, content FROM scene_messages WHERE scene_id = ?1 AND round = ?2 ORDER BY number",
    )?;
    let rows: Vec<(u32, String, Option<String>, String, String)> =
        stmt.query_map(params![scene_id, rounds], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?.collect::<Result<_, _>>()?;
    let mut messages = Vec::new();
    for (number, kind, character_id, speaker, content) in rows {
        let kind = MessageKind::parse(&kind).ok_or_else(|| corrupt("message kind", &kind))?;
        let witnesses = crate::memory::records::get(conn, &format!("scene:{scene_id}:{number}"))?.map(|m| m.witnesses).unwrap_or_default();
        messages.push(KeptMessage { kind, character_id, speaker, content, witnesses });
    }
    let mut stmt = conn.prepare("SELECT character_id, state_json FROM scene_character_states WHERE scene_id = ?1 AND round = ?2")?;
    let rows: Vec<(String, String)> = stmt.query_map(params![scene_id, rounds], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
    let mut states = BTreeMap::new();
    for (id, json) in rows {
        states.insert(id, serde_json::from_str(&json).map_err(|e| corrupt("character state", e))?);
    }
    let campaign: Option<(String, String, i64)> = conn
        .query_row(
            "SELECT trackers_json, facts_json, elapsed_minutes FROM campaign_state WHERE campaign_id = ?1",
            [&campaign_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let (trackers, facts, elapsed) = match campaign {
        Some((t, f, e)) => (
            serde_json::from_str(&t).map_err(|e| corrupt("trackers", e))?,
            serde_json::from_str(&f).map_err(|e| corrupt("facts", e))?,
            e.max(0) as u64,
        ),
        None => (BTreeMap::new(), Vec::new(), 0),
    };
    Ok(KeptRound {
        round: rounds,
        campaign_id,
        input: record.input,
        messages,
        states,
        active: serde_json::from_str(&active).map_err(|e| corrupt("scene active set", e))?,
        trackers,
        facts,
        elapsed_minutes: elapsed,
        director: record.director,
        ledgers: record.ledgers,
        tokens: record.tokens,
        lore_state: super::lore::load_state(conn, scene_id)?,
    })
}

/// Keep `round` as an alternative of its scene; returns its id.
fn keep(conn: &Connection, scene_id: &str, round: &KeptRound) -> Result<String, StoreError> {
    let id = new_id();
    // The input is the same in every version of a round: what differs is the replies.
    let preview: String = round
        .messages
        .iter()
        .filter(|m| m.kind != MessageKind::User)
        .map(|m| format!("{}: {}", m.speaker, m.content))
        .collect::<Vec<_>>()
        .join(" / ");
    let preview: String = preview.chars().take(400).collect();
    let json = serde_json::to_string(round).map_err(|e| corrupt("kept round", e))?;
    conn.execute(
        "INSERT INTO scene_round_alternatives(id, scene_id, round, saved_at, preview, round_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![id, scene_id, round.round, now_rfc3339(), preview, json],
    )?;
    Ok(id)
}

/// The kept rounds of a scene, newest round first.
pub fn list(conn: &Connection, scene_id: &str) -> Result<Vec<Alternative>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT id, round, saved_at, preview FROM scene_round_alternatives WHERE scene_id = ?1 ORDER BY round DESC, saved_at, rowid",
    )?;
    let rows = stmt.query_map([scene_id], |r| Ok(Alternative { id: r.get(0)?, round: r.get(1)?, saved_at: r.get(2)?, preview: r.get(3)? }))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Forget the alternatives that no longer follow from the scene: those of rounds after
/// `rounds` + 1 (an undo took back the round they came after).
pub fn forget_after(conn: &Connection, scene_id: &str, rounds: u32) -> Result<(), StoreError> {
    conn.execute("DELETE FROM scene_round_alternatives WHERE scene_id = ?1 AND round > ?2", params![scene_id, rounds + 1])?;
    Ok(())
}

fn take(conn: &Connection, scene_id: &str, id: &str) -> Result<KeptRound, StoreError> {
    let json: Option<String> = conn
        .query_row("SELECT round_json FROM scene_round_alternatives WHERE id = ?1 AND scene_id = ?2", params![id, scene_id], |r| r.get(0))
        .optional()?;
    let json = json.ok_or_else(|| StoreError::NotFound(format!("alternative {id:?} of scene {scene_id} (see `scene alternatives`)")))?;
    conn.execute("DELETE FROM scene_round_alternatives WHERE id = ?1", [id])?;
    serde_json::from_str(&json).map_err(|e| corrupt("kept round", e))
}

/// The memories a kept round's messages become when it is closed again, numbered as
/// the close numbers them.
pub fn memories(scene_id: &str, first_number: u32, round: &KeptRound) -> Vec<NewMemory> {
    round
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| !m.content.trim().is_empty())
        .map(|(i, m)| NewMemory {
            id: Some(format!("scene:{scene_id}:{}", first_number + i as u32)),
            kind: crate::memory::MemoryKind::Turn,
            scope: crate::memory::Scope { kind: crate::memory::ScopeKind::Campaign, id: Some(round.campaign_id.clone()) },
            speaker: Some(m.speaker.clone()),
            text: m.content.clone(),
            session: Some(scene_id.to_string()),
            witnesses: if m.witnesses.is_empty() { vec![m.speaker.clone()] } else { m.witnesses.clone() },
            ..Default::default()
        })
        .collect()
}

/// The number the first message of round `round` gets when it is closed (again): where
/// that round's messages start now, or the scene's next number.
pub fn first_number(conn: &Connection, scene_id: &str, round: u32) -> Result<u32, StoreError> {
    Ok(conn.query_row(
        "SELECT COALESCE((SELECT MIN(number) FROM scene_messages WHERE scene_id = ?1 AND round >= ?2),
                         (SELECT COALESCE(MAX(number), 0) + 1 FROM scene_messages WHERE scene_id = ?1))",
        params![scene_id, round],
        |r| r.get(0),
    )?)
}

/// Close a kept round again as the scene's next round.
fn reinstate(conn: &Connection, scene_id: &str, round: &KeptRound) -> Result<Vec<SceneMessage>, StoreError> {
    let close = RoundClose {
        scene_id: scene_id.to_string(),
        campaign_id: round.campaign_id.clone(),
        round: round.round,
        input: round.input.clone(),
        messages: round.messages.iter().map(|m| (m.kind, m.character_id.clone(), m.speaker.clone(), m.content.clone())).collect(),
        states: round.states.clone(),
        active: round.active.clone(),
        trackers: round.trackers.clone(),
        facts: round.facts.clone(),
        elapsed_minutes: round.elapsed_minutes,
        campaign_before: None,
        director: round.director.clone(),
        ledgers: round.ledgers.clone(),
        tokens: round.tokens,
        lore_state: round.lore_state.clone(),
    };
    records::close_round(conn, &close)
}

/// Take the last round back and keep it; returns it, its id, and the memory write of
/// its memories' removal. Inside the caller's transaction.
pub fn set_aside(conn: &Connection, scene_id: &str) -> Result<(KeptRound, String, MemoryWrite), StoreError> {
    let kept = capture(conn, scene_id)?;
    // A summary that told the round is forgotten with it; the next round that closes
    // writes it again over the rounds left.
    let (_, memory_ids, _) = records::undo_round(conn, scene_id)?;
    let id = keep(conn, scene_id, &kept)?;
    Ok((kept, id, crate::memory::remove_ids(conn, &memory_ids)?))
}

/// Read a kept round (to embed its memories before the swap's transaction).
pub fn peek(conn: &Connection, scene_id: &str, id: &str) -> Result<KeptRound, StoreError> {
    let json: Option<String> = conn
        .query_row("SELECT round_json FROM scene_round_alternatives WHERE id = ?1 AND scene_id = ?2", params![id, scene_id], |r| r.get(0))
        .optional()?;
    let json = json.ok_or_else(|| StoreError::NotFound(format!("alternative {id:?} of scene {scene_id} (see `scene alternatives`)")))?;
    serde_json::from_str(&json).map_err(|e| corrupt("kept round", e))
}

/// Play kept round `id` in place of the round with its number (which is kept in its
/// turn), or as the next round when the scene is one round short of it. `memories` are
/// its prepared memories. Inside the caller's transaction.
pub fn choose(
    conn: &Connection,
    scene_id: &str,
    id: &str,
    memories: crate::memory::PreparedMemories,
) -> Result<(u32, Option<String>, MemoryWrite), StoreError> {
    let rounds: u32 = conn.query_row("SELECT rounds FROM scenes WHERE id = ?1", [scene_id], |r| r.get(0))?;
    let chosen = take(conn, scene_id, id)?;
    let (put, mut write) = if chosen.round == rounds {
        let (_, put, write) = set_aside(conn, scene_id)?;
        (Some(put), write)
    } else if chosen.round == rounds + 1 {
        (None, MemoryWrite::default())
    } else {
        return Err(StoreError::Conflict(format!(
            "the alternative is of round {}, and the scene has {rounds} rounds: only the last round can be swapped",
            chosen.round
        )));
    };
    reinstate(conn, scene_id, &chosen)?;
    write = write.and(memories.write(conn)?);
    Ok((chosen.round, put, write))
}

/// Mark kept round `id` as set aside by a redo still playing (in the set-aside's
/// transaction), or (`false`) the redo as over.
pub fn mark_redo(conn: &Connection, id: &str, pending: bool) -> Result<(), StoreError> {
    conn.execute("UPDATE scene_round_alternatives SET redo_pending = ?2 WHERE id = ?1", params![id, pending])?;
    Ok(())
}

/// Kept rounds whose redo never finished: (scene, kept round's id, its round number).
pub fn pending_redos(conn: &Connection) -> Result<Vec<(String, String, u32)>, StoreError> {
    let mut stmt = conn.prepare("SELECT scene_id, id, round FROM scene_round_alternatives WHERE redo_pending = 1")?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Put a kept round back after a redo failed: the scene is as it was before the redo.
pub fn restore(conn: &Connection, scene_id: &str, id: &str, memories: crate::memory::PreparedMemories) -> Result<MemoryWrite, StoreError> {
    let kept = take(conn, scene_id, id)?;
    reinstate(conn, scene_id, &kept)?;
    memories.write(conn)
}
