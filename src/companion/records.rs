//! Companion rows: the chat state per character and the committed exchanges.

pub use super::model::{CharacterInfo, ChatCharacter, ChatState, ChatTurn, ChatUser, greetings, slug};
use super::model::Packet;
use crate::memory::detect::Proximity;
use crate::store::StoreError;
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

pub fn proximity_str(p: Proximity) -> &'static str {
    match p {
        Proximity::Physical => "PHYSICAL",
        Proximity::Remote => "REMOTE",
    }
}

fn parse_proximity(text: &str) -> Proximity {
    if text.eq_ignore_ascii_case("physical") { Proximity::Physical } else { Proximity::Remote }
}

/// Find a character by id, (case-insensitive) name or unique name prefix.
pub fn resolve_character(conn: &Connection, key: &str) -> Result<CharacterInfo, StoreError> {
    let record = crate::character::resolve(conn, key).map_err(|e| match e {
        StoreError::NotFound(what) if !what.contains("more than one") => StoreError::NotFound(format!("{what} (see `lorekeeper chat list`)")),
        other => other,
    })?;
    let sheet = crate::character::chat_sheet(&record);
    let card = crate::character::card_text(&record);
    Ok(CharacterInfo { id: record.id, name: record.name, sheet, card })
}

/// Every character of the library with its chat progress, most recently chatted first.
pub fn list(conn: &Connection) -> Result<Vec<ChatCharacter>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT character_id, turns, last_chat_at FROM companion_chats")?;
    let chats: std::collections::HashMap<String, (u32, Option<String>)> =
        stmt.query_map([], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))?.collect::<Result<_, _>>()?;
    let mut characters: Vec<ChatCharacter> = crate::character::list(conn)?
        .into_iter()
        .map(|c| {
            let (turns, last_chat_at) = chats.get(&c.id).cloned().unwrap_or_default();
            ChatCharacter { id: c.id, name: c.name, origin: c.origin, turns, last_chat_at }
        })
        .collect();
    // Most recently chatted first (RFC 3339 times sort as text), then never chatted by name.
    characters.sort_by(|a, b| match (&a.last_chat_at, &b.last_chat_at) {
        (Some(x), Some(y)) => y.cmp(x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    Ok(characters)
}

pub fn load_state(conn: &Connection, character_id: &str) -> Result<ChatState, StoreError> {
    Ok(conn
        .query_row(
            "SELECT proximity, session, last_chat_at, turns, greeting, persona_id, file_json, author_note_json FROM companion_chats WHERE character_id = ?1",
            [character_id],
            |r| {
                Ok(ChatState {
                    proximity: parse_proximity(&r.get::<_, String>(0)?),
                    session: r.get(1)?,
                    last_chat_at: r.get(2)?,
                    turns: r.get(3)?,
                    greeting: r.get::<_, i64>(4)?.clamp(0, i64::from(u32::MAX)) as u32,
                    persona_id: r.get(5)?,
                    file: r.get::<_, Option<String>>(6)?.and_then(|j| serde_json::from_str(&j).ok()),
                    author_note: r.get::<_, Option<String>>(7)?.and_then(|j| serde_json::from_str(&j).ok()),
                })
            },
        )
        .optional()?
        .unwrap_or_default())
}

/// The greetings a chat opens with, as written (macros unresolved), and the chosen one:
/// an imported chat's own opening message (its swipes) or else the card's greetings.
pub fn chat_greetings(state: &ChatState, card: &crate::character::CardText) -> (Vec<String>, u32) {
    if let Some(opening) = state.file.as_ref().and_then(|f| f.get("opening")).and_then(|o| o.as_array()) {
        let first = opening.iter().find(|m| {
            let flag = |k: &str| m.get(k).and_then(|v| v.as_bool()).unwrap_or(false);
            !flag("is_user") && !flag("is_system")
        });
        let Some(first) = first else { return (Vec::new(), 0) };
        let mes = first.get("mes").and_then(|v| v.as_str()).unwrap_or("").to_string();
        let mut swipes: Vec<String> = first
            .get("swipes")
            .and_then(|v| v.as_array())
            .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        let mut chosen = first.get("swipe_id").and_then(|v| v.as_u64()).unwrap_or(0) as usize;
        if swipes.is_empty() || chosen >= swipes.len() {
            swipes = vec![mes];
            chosen = 0;
        }
        return (swipes, chosen as u32);
    }
    let all = greetings(card);
    let chosen = state.greeting.min(all.len().saturating_sub(1) as u32);
    (all, chosen)
}

/// Keep the greetings a chat opened with as its own opening, once its first exchange is
/// stored: editing the card afterwards changes the next chat, not this one's first
/// message (as a SillyTavern chat file keeps it). `frozen` marks it as ours, not a file's.
/// A chat that already has an opening (an imported file's) keeps it.
pub fn freeze_opening(conn: &Connection, character_id: &str, name: &str, greetings: &[String], chosen: u32, at: &str) -> Result<(), StoreError> {
    let opening = match greetings.get(chosen as usize) {
        Some(mes) => vec![serde_json::json!({
            "name": name, "is_user": false, "is_system": false, "send_date": at,
            "mes": mes, "swipes": greetings, "swipe_id": chosen, "extra": {}
        })],
        None => Vec::new(),
    };
    let file = serde_json::json!({ "header": null, "opening": opening, "frozen": true });
    conn.execute("UPDATE companion_chats SET file_json = ?2 WHERE character_id = ?1 AND file_json IS NULL", params![character_id, file.to_string()])?;
    Ok(())
}

/// Make `file` the chat's kept opening (and header), whether or not the chat has begun.
pub fn put_file(conn: &Connection, character_id: &str, file: &serde_json::Value) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO companion_chats(character_id, file_json) VALUES (?1, ?2) \
         ON CONFLICT(character_id) DO UPDATE SET file_json = excluded.file_json",
        params![character_id, file.to_string()],
    )?;
    Ok(())
}

/// Forget a chat's kept opening (a chat with no exchange left starts from the card again).
pub fn clear_file(conn: &Connection, character_id: &str) -> Result<(), StoreError> {
    conn.execute("UPDATE companion_chats SET file_json = NULL WHERE character_id = ?1", [character_id])?;
    Ok(())
}

/// Whether a chat's opening is one [`freeze_opening`] kept (not an imported file's).
pub fn opening_is_frozen(state: &ChatState) -> bool {
    state.file.as_ref().and_then(|f| f.get("frozen")).and_then(serde_json::Value::as_bool).unwrap_or(false)
}

/// Attach a lorebook to this character's chat only; twice is once.
pub fn attach_chat_lorebook(conn: &Connection, character_id: &str, lorebook_id: &str) -> Result<(), StoreError> {
    conn.execute(
        "INSERT OR IGNORE INTO companion_chat_lorebooks(character_id, lorebook_id) VALUES (?1, ?2)",
        params![character_id, lorebook_id],
    )?;
    Ok(())
}

/// Detach a lorebook from the chat; returns whether it was attached.
pub fn detach_chat_lorebook(conn: &Connection, character_id: &str, lorebook_id: &str) -> Result<bool, StoreError> {
    Ok(conn.execute("DELETE FROM companion_chat_lorebooks WHERE character_id = ?1 AND lorebook_id = ?2", params![character_id, lorebook_id])? > 0)
}

/// The lorebooks attached to this character's chat, by id.
pub fn chat_lorebooks(conn: &Connection, character_id: &str) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT lorebook_id FROM companion_chat_lorebooks WHERE character_id = ?1 ORDER BY lorebook_id")?;
    let rows = stmt.query_map([character_id], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The characters whose chat alone a lorebook is attached to, by id.
pub fn chats_with_lorebook(conn: &Connection, lorebook_id: &str) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT character_id FROM companion_chat_lorebooks WHERE lorebook_id = ?1 ORDER BY character_id")?;
    let rows = stmt.query_map([lorebook_id], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Choose which greeting opens the chat (the first message's swipe).
pub fn set_greeting(conn: &Connection, character_id: &str, index: u32) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO companion_chats(character_id, greeting) VALUES (?1, ?2) \
         ON CONFLICT(character_id) DO UPDATE SET greeting = excluded.greeting",
        params![character_id, index],
    )?;
    Ok(())
}

fn note_json(note: Option<&super::model::AuthorNote>) -> Option<String> {
    note.and_then(|n| serde_json::to_string(n).ok())
}

/// Write (or with `None` remove) the chat's Author's Note.
pub fn set_author_note(conn: &Connection, character_id: &str, note: Option<&super::model::AuthorNote>) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO companion_chats(character_id, author_note_json) VALUES (?1, ?2) \
         ON CONFLICT(character_id) DO UPDATE SET author_note_json = excluded.author_note_json",
        params![character_id, note_json(note)],
    )?;
    Ok(())
}

/// How many user messages the chat holds up to and with the user message of the
/// exchange numbered `seq` (the Author's Note's count). As SillyTavern counts them (every
/// message of the chat that `is_user`): an imported file's user messages that made no
/// exchange of their own (two in a row, a last one with no reply, a hidden one) count
/// too — those before an exchange with it, those after it once a later one is sent.
pub fn user_messages_through(conn: &Connection, character_id: &str, seq: u32) -> Result<u32, StoreError> {
    Ok(conn.query_row(
        "SELECT (SELECT count(*) FROM companion_turns WHERE character_id = ?1 AND seq <= ?2)          + (SELECT count(*) FROM companion_turns t, json_each(t.file_json, '$.before') j             WHERE t.character_id = ?1 AND t.seq <= ?2 AND t.file_json IS NOT NULL AND json_extract(j.value, '$.is_user') = 1)          + (SELECT count(*) FROM companion_turns t, json_each(t.file_json, '$.after') j             WHERE t.character_id = ?1 AND t.seq < ?2 AND t.file_json IS NOT NULL AND json_extract(j.value, '$.is_user') = 1)",
        params![character_id, seq],
        |r| r.get(0),
    )?)
}

/// Choose the persona the user plays in this chat (`None`: the configured name).
pub fn set_persona(conn: &Connection, character_id: &str, persona_id: Option<&str>) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO companion_chats(character_id, persona_id) VALUES (?1, ?2) \
         ON CONFLICT(character_id) DO UPDATE SET persona_id = excluded.persona_id",
        params![character_id, persona_id],
    )?;
    Ok(())
}

/// Who the user is in this chat: its persona (without its picture: see
/// `crate::character::persona_image`), or `fallback` (the configured name).
pub fn chat_user(conn: &Connection, state: &ChatState, fallback: &str) -> Result<ChatUser, StoreError> {
    let persona = match state.persona_id.as_deref() {
        Some(id) => crate::character::persona(conn, id)?,
        None => None,
    };
    Ok(match persona {
        Some(p) => ChatUser { name: p.name, description: p.description, persona_id: Some(p.id), image_png: None },
        None => ChatUser { name: fallback.to_string(), description: String::new(), persona_id: None, image_png: None },
    })
}

const TURN_COLUMNS: &str = "id, character_id, seq, session, user_text, reply, at, user_memory_id, reply_memory_id, proximity, \
     packet_json, hits_json, attempts, prompt_tokens, completion_tokens, from_cache, elapsed_ms, swipes_json, swipe, file_json, user_name";

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
            swipes: {
                let reply: String = r.get(5)?;
                let swipes: Vec<String> = serde_json::from_str(&r.get::<_, String>(17)?).unwrap_or_default();
                if swipes.is_empty() { vec![reply] } else { swipes }
            },
            swipe: r.get(18)?,
            file: r.get::<_, Option<String>>(19)?.and_then(|j| serde_json::from_str(&j).ok()),
            user_name: r.get(20)?,
        },
        r.get(10)?,
        r.get(11)?,
    ))
}

/// A chat as a watch compares it ([`crate::watch`]): the open chat's exchanges (their
/// count, and the newest 500's ids, texts and chosen swipes, so an edit or a swipe
/// moves it too), and how many
/// exchanges the library holds, for the character list's counts, and the characters,
/// personas and lorebooks the lists show (one made, renamed or deleted elsewhere).
#[derive(Debug, Clone, PartialEq)]
pub struct ChatStanding {
    pub chat: Option<u64>,
    pub library: (i64, i64),
    pub characters: u64,
}

/// The standing of `character_id`'s chat (none: only the library's counts).
pub fn standing(conn: &Connection, character_id: Option<&str>) -> Result<ChatStanding, StoreError> {
    use std::hash::{Hash, Hasher};
    let library = conn.query_row("SELECT count(*), coalesce(max(rowid), 0) FROM companion_turns", [], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let chat = match character_id {
        Some(id) => {
            let mut stmt = conn.prepare_cached(
                "SELECT id, seq, user_text, reply, swipe FROM companion_turns WHERE character_id = ?1 ORDER BY seq DESC LIMIT 500",
            )?;
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            let count: i64 = conn.query_row("SELECT count(*) FROM companion_turns WHERE character_id = ?1", [id], |r| r.get(0))?;
            count.hash(&mut hasher);
            let rows = stmt.query_map([id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?, r.get::<_, i64>(4)?)))?;
            for row in rows {
                row?.hash(&mut hasher);
            }
            // The chat's own settings (greeting, persona, Author's Note) and the chats put
            // aside: a note or a new chat written elsewhere must reach an open editor too.
            let settings: Option<(i64, Option<String>, Option<String>)> = conn
                .query_row("SELECT greeting, persona_id, author_note_json FROM companion_chats WHERE character_id = ?1", [id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()?;
            settings.hash(&mut hasher);
            let saved: (i64, Option<String>) =
                conn.query_row("SELECT count(*), group_concat(id || ':' || title, '|') FROM companion_saved_chats WHERE character_id = ?1", [id], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
            saved.hash(&mut hasher);
            Some(hasher.finish())
        }
        None => None,
    };
    let characters = {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        crate::character::standing(conn)?.hash(&mut hasher);
        let books: std::collections::BTreeMap<String, String> = crate::interop::library::lorebook_names(conn)?.into_iter().collect();
        books.hash(&mut hasher);
        hasher.finish()
    };
    Ok(ChatStanding { chat, library, characters })
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
            turn.packet = super::stored_packet::from_stored_json(&packet).map_err(|e| StoreError::Corrupt(format!("turn {} packet: {e}", turn.id)))?;
            turn.hits = serde_json::from_str(&hits).map_err(|e| StoreError::Corrupt(format!("turn {} hits: {e}", turn.id)))?;
        }
        out.push(turn);
    }
    out.reverse();
    Ok(out)
}

/// Every exchange of a chat, oldest first, with packets.
pub fn all_turns(conn: &Connection, character_id: &str) -> Result<Vec<ChatTurn>, StoreError> {
    recent_turns(conn, character_id, u32::MAX, true)
}

/// Store an exchange's changed text, swipes and packet (a regenerate, an edit).
pub fn update_turn(conn: &Connection, turn: &ChatTurn) -> Result<(), StoreError> {
    let changed = conn.execute(
        "UPDATE companion_turns SET user_text = ?2, reply = ?3, swipes_json = ?4, swipe = ?5, packet_json = ?6, attempts = ?7,
         prompt_tokens = ?8, completion_tokens = ?9, from_cache = ?10, elapsed_ms = ?11, hits_json = ?12 WHERE id = ?1",
        params![
            turn.id,
            turn.user_text,
            turn.reply,
            to_json(&turn.swipes)?,
            turn.swipe,
            super::stored_packet::to_stored_json(&turn.packet)?,
            turn.attempts,
            turn.prompt_tokens,
            turn.completion_tokens,
            turn.from_cache,
            turn.elapsed_ms as i64,
            to_json(&turn.hits)?,
        ],
    )?;
    if changed == 0 {
        return Err(StoreError::NotFound(format!("chat turn {}", turn.id)));
    }
    Ok(())
}

/// Delete one exchange; the chat's state follows the newest one left.
pub fn delete_turn(conn: &Connection, character_id: &str, turn_id: &str) -> Result<(), StoreError> {
    conn.execute("DELETE FROM companion_turns WHERE id = ?1 AND character_id = ?2", params![turn_id, character_id])?;
    let previous = recent_turns(conn, character_id, 1, false)?.pop();
    conn.execute(
        "UPDATE companion_chats SET turns = (SELECT count(*) FROM companion_turns WHERE character_id = ?1), last_chat_at = ?2,
         proximity = ?3, session = ?4 WHERE character_id = ?1",
        params![
            character_id,
            previous.as_ref().map(|t| t.at.clone()),
            proximity_str(previous.as_ref().map(|t| t.proximity).unwrap_or_default()),
            previous.as_ref().map(|t| t.session.clone()),
        ],
    )?;
    Ok(())
}

/// Write a finished exchange and the chat's new state (inside the commit transaction).
/// Replace what an exchange keeps of the chat file it came from.
pub fn set_turn_file(conn: &Connection, turn_id: &str, file: Option<&serde_json::Value>) -> Result<(), StoreError> {
    conn.execute("UPDATE companion_turns SET file_json = ?2 WHERE id = ?1", params![turn_id, file.map(|f| f.to_string())])?;
    Ok(())
}

pub fn insert_turn(conn: &Connection, turn: &ChatTurn) -> Result<(), StoreError> {
    conn.execute(
        &format!("INSERT INTO companion_turns({TURN_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)"),
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
            super::stored_packet::to_stored_json(&turn.packet)?,
            to_json(&turn.hits)?,
            turn.attempts,
            turn.prompt_tokens,
            turn.completion_tokens,
            turn.from_cache,
            turn.elapsed_ms as i64,
            to_json(&if turn.swipes.is_empty() { vec![turn.reply.clone()] } else { turn.swipes.clone() })?,
            turn.swipe,
            turn.file.as_ref().map(|f| f.to_string()),
            turn.user_name,
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

/// Make `turns` the whole chat and `state` its state (switching chats, an import).
/// The caller has taken the old exchanges' memories out.
pub fn replace_chat(conn: &Connection, character_id: &str, state: &ChatState, turns: &[ChatTurn]) -> Result<(), StoreError> {
    conn.execute("DELETE FROM companion_turns WHERE character_id = ?1", [character_id])?;
    conn.execute("DELETE FROM companion_chats WHERE character_id = ?1", [character_id])?;
    for turn in turns {
        insert_turn(conn, turn)?;
    }
    conn.execute(
        "INSERT INTO companion_chats(character_id, proximity, session, last_chat_at, turns, greeting, persona_id, file_json, author_note_json) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, (SELECT id FROM personas WHERE id = ?7), ?8, ?9) \
         ON CONFLICT(character_id) DO UPDATE SET proximity = excluded.proximity, session = excluded.session, \
         last_chat_at = excluded.last_chat_at, turns = excluded.turns, greeting = excluded.greeting, \
         persona_id = excluded.persona_id, file_json = excluded.file_json, author_note_json = excluded.author_note_json",
        params![
            character_id,
            proximity_str(state.proximity),
            state.session,
            state.last_chat_at,
            turns.len() as u32,
            state.greeting,
            state.persona_id,
            state.file.as_ref().map(|f| f.to_string()),
            note_json(state.author_note.as_ref()),
        ],
    )?;
    Ok(())
}

/// Remove the last exchange (the user takes it back). Returns it, or `None` when the
/// chat is empty. The chat's clock and proximity go back to the previous exchange.
pub fn delete_last(conn: &Connection, character_id: &str) -> Result<Option<ChatTurn>, StoreError> {
    let Some(last) = recent_turns(conn, character_id, 1, false)?.pop() else { return Ok(None) };
    delete_turn(conn, character_id, &last.id)?;
    Ok(Some(last))
}

fn to_json<T: Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(format!("cannot encode a chat turn: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipeline_character_reads_through_its_profile() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path().join("lib.sqlite")).unwrap();
        let profile = crate::character::profile::sample_profile();
        store
            .with(|c| {
                c.execute(
                    "INSERT INTO characters(id, name, origin, profile_json, created_at, updated_at) VALUES ('p1', 'Vesna', 'identity', ?1, 'now', 'now')",
                    [profile.to_string()],
                )?;
                Ok(())
            })
            .unwrap();
        let info = store.with(|c| resolve_character(c, "vesna")).unwrap();
        assert_eq!(info.id, "p1");
        let personality = info.sheet.iter().find(|(k, _)| k == "personality").map(|(_, v)| v.as_str()).unwrap_or_default();
        assert!(personality.contains("Core traits"), "{:?}", info.sheet);
    }

    #[test]
    fn slugs_are_folder_names() {
        assert_eq!(slug("Ilse Marrow"), "ilse-marrow");
        assert_eq!(slug("  Dr. Ana-Sofía  Ruiz! "), "dr-ana-sofía-ruiz");
        assert_eq!(slug("***"), "");
    }
}
