//! Companion rows: the chat state per character and the committed exchanges.

use super::packet::Packet;
use crate::memory::RetrievalHit;
use crate::memory::detect::Proximity;
use crate::store::StoreError;
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

/// A character one can chat with, as the chat list shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCharacter {
    pub id: String,
    pub name: String,
    pub origin: String,
    pub turns: u32,
    pub last_chat_at: Option<String>,
}

/// What the packet needs to know about the character.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CharacterInfo {
    pub id: String,
    pub name: String,
    /// Sheet fields (description, personality, scenario, ...) in a stable order.
    pub sheet: Vec<(String, String)>,
}

impl CharacterInfo {
    /// The lore folder name under `lore/characters/`: lower-case name with dashes, so
    /// `Ilse Marrow` reads `lore/characters/ilse-marrow/`.
    pub fn lore_slug(&self) -> String {
        slug(&self.name)
    }
}

pub fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.trim().chars() {
        if c.is_alphanumeric() {
            out.extend(c.to_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

/// Where the conversation with one character stands.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChatState {
    pub proximity: Proximity,
    pub session: Option<String>,
    pub last_chat_at: Option<String>,
    pub turns: u32,
}

/// One committed exchange.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatTurn {
    pub id: String,
    pub character_id: String,
    pub seq: u32,
    pub session: String,
    pub user_text: String,
    pub reply: String,
    pub at: String,
    pub user_memory_id: Option<String>,
    pub reply_memory_id: Option<String>,
    pub proximity: Proximity,
    pub packet: Packet,
    pub hits: Vec<RetrievalHit>,
    pub attempts: u32,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub from_cache: bool,
    pub elapsed_ms: u64,
}

pub fn proximity_str(p: Proximity) -> &'static str {
    match p {
        Proximity::Physical => "PHYSICAL",
        Proximity::Remote => "REMOTE",
    }
}

fn parse_proximity(text: &str) -> Proximity {
    if text.eq_ignore_ascii_case("physical") { Proximity::Physical } else { Proximity::Remote }
}

/// Find a character by id or (case-insensitive) name.
pub fn resolve_character(conn: &Connection, key: &str) -> Result<CharacterInfo, StoreError> {
    let row: Option<(String, String, Option<String>, Option<String>)> = conn
        .query_row(
            "SELECT id, name, card_json, profile_json FROM characters WHERE id = ?1 OR name = ?1 COLLATE NOCASE \
             ORDER BY (id = ?1) DESC, created_at LIMIT 1",
            [key.trim()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .optional()?;
    let (id, name, card, profile) = match row {
        Some(row) => row,
        None => {
            // A unique prefix of a name is enough ("ilse" for "Ilse Marrow").
            let mut stmt = conn.prepare_cached(
                "SELECT id, name, card_json, profile_json FROM characters WHERE name LIKE ?1 || '%' ESCAPE '\\' LIMIT 2",
            )?;
            let escaped = key.trim().replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
            let found: Vec<(String, String, Option<String>, Option<String>)> = stmt
                .query_map([escaped], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect::<Result<_, _>>()?;
            match found.len() {
                1 => found.into_iter().next().ok_or_else(|| StoreError::NotFound(format!("character {key:?}")))?,
                0 => return Err(StoreError::NotFound(format!("character {key:?} (see `lorekeeper chat list`)"))),
                _ => return Err(StoreError::NotFound(format!("character {key:?}: more than one name starts so; give the full name"))),
            }
        }
    };
    let sheet = crate::scene::records::base_sheet(card.as_deref(), profile.as_deref());
    // Stable, readable order: the usual card fields first, then the rest by name.
    let order = ["description", "personality", "scenario", "summary"];
    let mut fields: Vec<(String, String)> =
        order.iter().filter_map(|k| sheet.get(*k).map(|v| (k.to_string(), v.clone()))).collect();
    fields.extend(sheet.into_iter().filter(|(k, _)| !order.contains(&k.as_str())));
    Ok(CharacterInfo { id, name, sheet: fields })
}

/// Every character of the library with its chat progress, most recently chatted first.
pub fn list(conn: &Connection) -> Result<Vec<ChatCharacter>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT c.id, c.name, c.origin, coalesce(s.turns, 0), s.last_chat_at FROM characters c \
         LEFT JOIN companion_chats s ON s.character_id = c.id \
         ORDER BY s.last_chat_at IS NULL, s.last_chat_at DESC, c.name COLLATE NOCASE",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(ChatCharacter { id: r.get(0)?, name: r.get(1)?, origin: r.get(2)?, turns: r.get(3)?, last_chat_at: r.get(4)? })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub fn load_state(conn: &Connection, character_id: &str) -> Result<ChatState, StoreError> {
    Ok(conn
        .query_row(
            "SELECT proximity, session, last_chat_at, turns FROM companion_chats WHERE character_id = ?1",
            [character_id],
            |r| {
                Ok(ChatState {
                    proximity: parse_proximity(&r.get::<_, String>(0)?),
                    session: r.get(1)?,
                    last_chat_at: r.get(2)?,
                    turns: r.get(3)?,
                })
            },
        )
        .optional()?
        .unwrap_or_default())
}

const TURN_COLUMNS: &str = "id, character_id, seq, session, user_text, reply, at, user_memory_id, reply_memory_id, proximity, \
     packet_json, hits_json, attempts, prompt_tokens, completion_tokens, from_cache, elapsed_ms";

fn turn_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(ChatTurn, String, String)> {
    Ok((
        ChatTurn {
            id: r.get(0)?,
            character_id: r.get(1)?,
            seq: r.get(2)?,
            session: r.get(3)?,
            user_text: r.get(4)?,
            reply: r.get(5)?,
            at: r.get(6)?,
            user_memory_id: r.get(7)?,
            reply_memory_id: r.get(8)?,
            proximity: parse_proximity(&r.get::<_, String>(9)?),
            packet: Packet::default(),
            hits: Vec::new(),
            attempts: r.get(12)?,
            prompt_tokens: r.get(13)?,
            completion_tokens: r.get(14)?,
            from_cache: r.get::<_, i64>(15)? != 0,
            elapsed_ms: r.get::<_, i64>(16)?.max(0) as u64,
        },
        r.get(10)?,
        r.get(11)?,
    ))
}

/// The last `limit` exchanges, oldest first. `with_packets` also decodes each turn's
/// packet and hits (the history block needs neither).
pub fn recent_turns(conn: &Connection, character_id: &str, limit: u32, with_packets: bool) -> Result<Vec<ChatTurn>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {TURN_COLUMNS} FROM companion_turns WHERE character_id = ?1 ORDER BY seq DESC LIMIT ?2"
    ))?;
    let rows = stmt.query_map(params![character_id, limit], turn_from_row)?;
    let mut out = Vec::new();
    for row in rows {
        let (mut turn, packet, hits) = row?;
        if with_packets {
            turn.packet = serde_json::from_str(&packet).map_err(|e| StoreError::Corrupt(format!("turn {} packet: {e}", turn.id)))?;
            turn.hits = serde_json::from_str(&hits).map_err(|e| StoreError::Corrupt(format!("turn {} hits: {e}", turn.id)))?;
        }
        out.push(turn);
    }
    out.reverse();
    Ok(out)
}

/// Write a finished exchange and the chat's new state (inside the commit transaction).
pub fn insert_turn(conn: &Connection, turn: &ChatTurn) -> Result<(), StoreError> {
    conn.execute(
        &format!("INSERT INTO companion_turns({TURN_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)"),
        params![
            turn.id,
            turn.character_id,
            turn.seq,
            turn.session,
            turn.user_text,
            turn.reply,
            turn.at,
            turn.user_memory_id,
            turn.reply_memory_id,
            proximity_str(turn.proximity),
            to_json(&turn.packet)?,
            to_json(&turn.hits)?,
            turn.attempts,
            turn.prompt_tokens,
            turn.completion_tokens,
            turn.from_cache,
            turn.elapsed_ms as i64,
        ],
    )?;
    conn.execute(
        "INSERT INTO companion_chats(character_id, proximity, session, last_chat_at, turns) VALUES (?1, ?2, ?3, ?4, 1) \
         ON CONFLICT(character_id) DO UPDATE SET proximity = excluded.proximity, session = excluded.session, \
         last_chat_at = excluded.last_chat_at, turns = companion_chats.turns + 1",
        params![turn.character_id, proximity_str(turn.proximity), turn.session, turn.at],
    )?;
    Ok(())
}

/// Remove the last exchange (the user takes it back). Returns it, or `None` when the
/// chat is empty. The chat's clock and proximity go back to the previous exchange.
pub fn delete_last(conn: &Connection, character_id: &str) -> Result<Option<ChatTurn>, StoreError> {
    let Some(last) = recent_turns(conn, character_id, 1, false)?.pop() else { return Ok(None) };
    conn.execute("DELETE FROM companion_turns WHERE id = ?1", [&last.id])?;
    let previous = recent_turns(conn, character_id, 1, false)?.pop();
    conn.execute(
        "UPDATE companion_chats SET turns = max(turns - 1, 0), last_chat_at = ?2, proximity = ?3, session = ?4 WHERE character_id = ?1",
        params![
            character_id,
            previous.as_ref().map(|t| t.at.clone()),
            proximity_str(previous.as_ref().map(|t| t.proximity).unwrap_or_default()),
            previous.as_ref().map(|t| t.session.clone()),
        ],
    )?;
    Ok(Some(last))
}

fn to_json<T: Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(format!("cannot encode a chat turn: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_folder_names() {
        assert_eq!(slug("Ilse Marrow"), "ilse-marrow");
        assert_eq!(slug("  Dr. Ana-Sofía  Ruiz! "), "dr-ana-sofía-ruiz");
        assert_eq!(slug("***"), "");
    }
}
