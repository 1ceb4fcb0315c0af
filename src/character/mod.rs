//! Characters: the one owner of the `characters` table (migration 0001) and of the
//! tables that say who a character is in a given place — `character_overrides` and
//! `personas` (created with the scene tables in migration 0006, owned here since).
//!
//! Architecture invariant: no other module reads or writes these tables; identity,
//! interop, scene and companion call the functions here. A character's sheet (what
//! prompts say about it) is built in one place: its card's fields, else its identity
//! profile read through the card mapping, then world and campaign overrides on top.
//!
//! API boundary: plain functions over a `rusqlite::Connection`, so the caller chooses
//! the transaction (an import writes a character and its lorebook in one).

pub mod profile;

use crate::store::{StoreError, new_id, now_rfc3339};
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use std::collections::BTreeMap;

/// Where a character came from (the `origin` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Identity,
    Card,
    Demo,
    Manual,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Identity => "identity",
            Origin::Card => "card",
            Origin::Demo => "demo",
            Origin::Manual => "manual",
        }
    }
}

/// One row of the characters table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CharacterRecord {
    pub id: String,
    pub name: String,
    pub origin: String,
    /// An imported card document, kept whole so export is lossless.
    #[serde(skip)]
    pub card_json: Option<String>,
    /// An identity pipeline's final profile.
    #[serde(skip)]
    pub profile_json: Option<String>,
    pub created_at: String,
}

const COLUMNS: &str = "id, name, origin, card_json, profile_json, created_at";

fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<CharacterRecord> {
    Ok(CharacterRecord {
        id: r.get(0)?,
        name: r.get(1)?,
        origin: r.get(2)?,
        card_json: r.get(3)?,
        profile_json: r.get(4)?,
        created_at: r.get(5)?,
    })
}

/// The character with this id, if any.
pub fn get(conn: &Connection, id: &str) -> Result<Option<CharacterRecord>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM characters WHERE id = ?1");
    Ok(conn.query_row(&sql, [id], from_row).optional()?)
}

/// Find a character by id, by (case-insensitive) name, or by a unique prefix of a
/// name ("ilse" for "Ilse Marrow"). Two characters of one name (a card imported twice)
/// are told apart by id: the error lists them, rather than one being picked silently for
/// a chat, an edit or a delete.
pub fn resolve(conn: &Connection, key: &str) -> Result<CharacterRecord, StoreError> {
    let key = key.trim();
    if let Some(found) = get(conn, key)? {
        return Ok(found);
    }
    let rows: Vec<(String, String)> = conn
        .prepare_cached("SELECT id, name FROM characters ORDER BY name COLLATE NOCASE, created_at")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let exact: Vec<&(String, String)> = rows.iter().filter(|(_, name)| name.trim().eq_ignore_ascii_case(key)).collect();
    let chosen = match exact.as_slice() {
        [one] => &one.0,
        [] => {
            // The start of the name, or of a word of it ("Odile" for "Captain Odile Rask").
            let found = crate::names::only(&rows, |r| &r.1, key);
            match found {
                Ok((id, _)) => id,
                Err(crate::names::NoMatch::Many(_)) => {
                    let named: Vec<&(String, String)> = rows.iter().filter(|r| crate::names::only(std::slice::from_ref(*r), |r| &r.1, key).is_ok()).collect();
                    return Err(StoreError::Invalid(ambiguous(key, &named)));
                }
                Err(e) => return Err(StoreError::NotFound(e.message(&format!("character {key:?}")))),
            }
        }
        many => return Err(StoreError::Invalid(ambiguous(key, many))),
    };
    get(conn, chosen)?.ok_or_else(|| StoreError::NotFound(format!("character {key:?}")))
}

/// The error for a name several characters answer to: each with its id when names repeat.
fn ambiguous(key: &str, rows: &[&(String, String)]) -> String {
    let repeated = rows.iter().any(|(id, name)| rows.iter().any(|(other, n)| other != id && n.eq_ignore_ascii_case(name)));
    let listed: Vec<String> = rows
        .iter()
        .take(6)
        .map(|(id, name)| if repeated { format!("{name} (id {id})") } else { name.clone() })
        .collect();
    let give = if repeated { "give the id" } else { "give the full name" };
    format!("character {key:?}: more than one name matches ({}); {give}", listed.join(", "))
}

/// Every character, sorted by name.
pub fn list(conn: &Connection) -> Result<Vec<CharacterRecord>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM characters ORDER BY name COLLATE NOCASE, created_at");
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map([], from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// A fingerprint of the characters and personas as lists show them (ids, names, when
/// each last changed), for a watch of what another process changes ([`crate::watch`]).
pub fn standing(conn: &Connection) -> Result<u64, StoreError> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let mut stmt = conn.prepare_cached("SELECT id, name, updated_at FROM characters ORDER BY id")?;
    for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?)))? {
        row?.hash(&mut hasher);
    }
    for persona in personas(conn)? {
        (persona.id, persona.name, persona.description).hash(&mut hasher);
    }
    Ok(hasher.finish())
}

/// Whether the library holds a character of the user's: any not added by a demo. The
/// demos are added only to a library that holds none, so a user's own data never gets
/// ours mixed in.
pub fn any_of_the_users(conn: &Connection) -> Result<bool, StoreError> {
    Ok(conn.query_row("SELECT EXISTS(SELECT 1 FROM characters WHERE origin != 'demo')", [], |r| r.get(0))?)
}

/// The card character imported from exactly this (canonical) document, if any: the
/// same file imported twice is one character.
pub fn find_card(conn: &Connection, canonical_json: &str) -> Result<Option<CharacterRecord>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM characters WHERE origin = 'card' AND card_json = ?1");
    Ok(conn.query_row(&sql, [canonical_json], from_row).optional()?)
}

/// What a new character is made of.
pub struct NewCharacter<'a> {
    /// `None`: a fresh id.
    pub id: Option<&'a str>,
    pub name: &'a str,
    pub origin: Origin,
    pub card_json: Option<&'a str>,
    pub profile_json: Option<&'a str>,
}

/// Add a character; returns its id.
pub fn insert(conn: &Connection, new: NewCharacter<'_>) -> Result<String, StoreError> {
    let id = new.id.map(str::to_string).unwrap_or_else(new_id);
    conn.execute(
        "INSERT INTO characters(id, name, origin, card_json, profile_json, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
        params![id, new.name, new.origin.as_str(), new.card_json, new.profile_json, now_rfc3339()],
    )?;
    Ok(id)
}

/// Store the final profile of the identity run `id` as its character (created on the
/// first completion, updated when a finished run is completed again).
pub fn save_profile(conn: &Connection, id: &str, name: &str, profile_json: &str) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO characters (id, name, origin, profile_json, created_at, updated_at)
         VALUES (?1, ?2, 'identity', ?3, ?4, ?4)
         ON CONFLICT(id) DO UPDATE SET name = excluded.name, profile_json = excluded.profile_json, updated_at = excluded.updated_at",
        params![id, name, profile_json, now_rfc3339()],
    )?;
    Ok(())
}

/// Sheet fields a card contributes to prompts.
const CARD_FIELDS: [&str; 4] = ["description", "personality", "scenario", "summary"];

/// The sheet of a base character: its card's fields, else its identity profile read
/// through the mapping the card export uses (the profile is nested: its top-level text
/// is only metadata — id, dates, version — which no agent should be handed).
pub fn base_sheet(card_json: Option<&str>, profile_json: Option<&str>) -> BTreeMap<String, String> {
    let mut sheet = BTreeMap::new();
    let text_fields = |value: &serde_json::Value, sheet: &mut BTreeMap<String, String>, only: Option<&[&str]>| {
        if let Some(object) = value.as_object() {
            for (key, v) in object {
                if only.is_some_and(|keys| !keys.contains(&key.as_str())) {
                    continue;
                }
                if let Some(text) = v.as_str().filter(|t| !t.trim().is_empty()) {
                    sheet.insert(key.clone(), text.to_string());
                }
            }
        }
    };
    if let Some(card) = card_json.and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok()) {
        // V2/V3 cards keep their fields under `data`; V1 at the top.
        let data = card.get("data").unwrap_or(&card);
        text_fields(data, &mut sheet, Some(&CARD_FIELDS));
    } else if let Some(profile) = profile_json.and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok()) {
        let card = profile::profile_text(&profile, "");
        for (key, value) in [("description", card.description), ("personality", card.personality), ("scenario", card.scenario)] {
            if !value.trim().is_empty() {
                sheet.insert(key.to_string(), value);
            }
        }
    }
    sheet
}

/// A character's sheet for one-to-one chat, as ordered fields: the usual card fields
/// first, then the rest by name. A character developed by the identity pipeline has a
/// nested profile and no card: it is read through the same mapping the card export uses.
pub fn chat_sheet(record: &CharacterRecord) -> Vec<(String, String)> {
    let sheet = base_sheet(record.card_json.as_deref(), record.profile_json.as_deref());
    let mut fields: Vec<(String, String)> =
        CARD_FIELDS.iter().filter_map(|k| sheet.get(*k).map(|v| (k.to_string(), v.clone()))).collect();
    fields.extend(sheet.into_iter().filter(|(k, _)| !CARD_FIELDS.contains(&k.as_str())));
    fields
}

/// The parts of a card that shape a chat besides the sheet: the greeting and its
/// alternatives, example dialogue, the card's own system prompt and post-history
/// instructions, and the creator's notes (shown to the user, never sent).
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct CardText {
    pub first_mes: String,
    pub alternate_greetings: Vec<String>,
    pub mes_example: String,
    pub system_prompt: String,
    pub post_history_instructions: String,
    pub creator_notes: String,
    pub tags: Vec<String>,
    /// SillyTavern's Character's Note (`extensions.depth_prompt`): sent in the chat at
    /// its depth, as its role, every message.
    #[serde(default)]
    pub depth_prompt: Option<DepthPrompt>,
}

/// A note a card puts into the chat at a depth (`extensions.depth_prompt`).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct DepthPrompt {
    pub prompt: String,
    /// Messages from the end of the chat (SillyTavern's default is 4).
    pub depth: u32,
    /// `system`, `user` or `assistant`.
    pub role: String,
}

/// The card text of a character imported from a card (V1 fields at the top, V2/V3
/// under `data`); empty for other characters or a card that is not JSON.
pub fn card_text(record: &CharacterRecord) -> CardText {
    let Some(card) = record.card_json.as_deref().and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok()) else {
        return CardText::default();
    };
    let data = card.get("data").unwrap_or(&card);
    let text = |key: &str| data.get(key).and_then(|v| v.as_str()).unwrap_or("").to_string();
    let list = |key: &str| -> Vec<String> {
        data.get(key).and_then(|v| v.as_array()).map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()).unwrap_or_default()
    };
    CardText {
        first_mes: text("first_mes"),
        alternate_greetings: list("alternate_greetings"),
        mes_example: text("mes_example"),
        system_prompt: text("system_prompt"),
        post_history_instructions: text("post_history_instructions"),
        creator_notes: text("creator_notes"),
        tags: list("tags"),
        depth_prompt: data.get("extensions").and_then(|e| e.get("depth_prompt")).and_then(|d| {
            let prompt = d.get("prompt").and_then(|v| v.as_str()).map(str::trim).filter(|p| !p.is_empty())?;
            // Depth and role as SillyTavern reads them: a number (default 4), and one of
            // three roles (anything else is the system's).
            let depth = d.get("depth").and_then(|v| v.as_u64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))).unwrap_or(4);
            let role = match d.get("role").and_then(|v| v.as_str()).map(str::trim) {
                Some(r @ ("user" | "assistant")) => r.to_string(),
                _ => "system".to_string(),
            };
            Some(DepthPrompt { prompt: prompt.to_string(), depth: depth.min(10_000) as u32, role })
        }),
    }
}

/// A character as one campaign sees it: overrides applied.
#[derive(Debug, Clone, PartialEq)]
pub struct PlacedCharacter {
    pub id: String,
    /// The base name, for stable ordering.
    pub base_name: String,
    /// The name in this campaign (an override may rename).
    pub name: String,
    pub sheet: BTreeMap<String, String>,
    /// The card's tags (lorebook entries' character filters may name them).
    pub tags: Vec<String>,
    /// The card's creator's notes and Character's Note text, which lore entries may match.
    pub creator_notes: String,
    pub depth_prompt: String,
}

/// The stored override of `id` for one world or campaign, as JSON text.
fn override_json(conn: &Connection, id: &str, scope: &str, scope_id: &str) -> Result<Option<String>, StoreError> {
    Ok(conn
        .query_row(
            "SELECT override_json FROM character_overrides WHERE character_id = ?1 AND scope = ?2 AND scope_id = ?3",
            params![id, scope, scope_id],
            |r| r.get(0),
        )
        .optional()?)
}

/// Every name character `id` goes by: its own, and those a world or campaign gives it.
pub fn names_of(conn: &Connection, id: &str) -> Result<Vec<String>, StoreError> {
    let Some(record) = get(conn, id)? else { return Ok(Vec::new()) };
    let mut names = vec![record.name];
    let mut stmt = conn.prepare_cached("SELECT override_json FROM character_overrides WHERE character_id = ?1")?;
    for json in stmt.query_map([id], |r| r.get::<_, String>(0))? {
        let value: serde_json::Value = serde_json::from_str(&json?).map_err(|e| StoreError::Corrupt(format!("character override: {e}")))?;
        if let Some(name) = value.get("name").and_then(|n| n.as_str()).map(str::trim).filter(|n| !n.is_empty()) {
            if !names.iter().any(|known: &String| known.eq_ignore_ascii_case(name)) {
                names.push(name.to_string());
            }
        }
    }
    Ok(names)
}

/// `name`, or the first of `name (2)`, `name (3)`, … no character but `except` goes by:
/// what an identity run's character is called when its name was taken while it ran.
pub fn free_name(conn: &Connection, name: &str, except: &str) -> Result<String, StoreError> {
    let name = name.trim();
    let mut candidate = name.to_string();
    let mut n = 2;
    while name_in_use(conn, &candidate, except)? {
        candidate = format!("{name} ({n})");
        n += 1;
    }
    Ok(candidate)
}

/// Whether a character other than `except` goes by `name`, here or anywhere it is placed.
pub fn name_in_use(conn: &Connection, name: &str, except: &str) -> Result<bool, StoreError> {
    let own: bool = conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM characters WHERE id != ?2 AND name = ?1 COLLATE NOCASE)",
        params![name.trim(), except],
        |r| r.get(0),
    )?;
    if own {
        return Ok(true);
    }
    let overridden: bool = conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM character_overrides WHERE character_id != ?2 AND json_extract(override_json, '$.name') = ?1 COLLATE NOCASE)",
        params![name.trim(), except],
        |r| r.get(0),
    )?;
    Ok(overridden)
}

/// The sheet of `id` in `world_id` / `campaign_id`: the base sheet, then the world's
/// override, then the campaign's (the narrower scope wins). `None` when no such
/// character exists.
pub fn placed(conn: &Connection, id: &str, world_id: &str, campaign_id: &str) -> Result<Option<PlacedCharacter>, StoreError> {
    let Some(record) = get(conn, id)? else { return Ok(None) };
    let mut sheet = base_sheet(record.card_json.as_deref(), record.profile_json.as_deref());
    let mut name = record.name.clone();
    for (scope, scope_id) in [("world", world_id), ("campaign", campaign_id)] {
        let json = override_json(conn, id, scope, scope_id)?;
        let Some(json) = json else { continue };
        let value: serde_json::Value =
            serde_json::from_str(&json).map_err(|e| StoreError::Corrupt(format!("character override: {e}")))?;
        for (key, v) in value.as_object().into_iter().flatten() {
            if let Some(text) = v.as_str() {
                if key == "name" {
                    name = text.to_string();
                } else {
                    sheet.insert(key.clone(), text.to_string());
                }
            }
        }
    }
    let card = card_text(&record);
    let depth_prompt = card.depth_prompt.map(|d| d.prompt).unwrap_or_default();
    Ok(Some(PlacedCharacter { id: record.id, base_name: record.name, name, sheet, tags: card.tags, creator_notes: card.creator_notes, depth_prompt }))
}

/// One character's override for one world or campaign: the sheet fields set there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SheetOverride {
    pub character_id: String,
    /// The character's own name (the override may give it another here).
    pub character: String,
    pub fields: BTreeMap<String, String>,
}

/// Every override set for one world or campaign (`scope`: `world` or `campaign`), by
/// character name: what a front door shows as in effect there, and what an editor of
/// the override starts from.
pub fn overrides_in(conn: &Connection, scope: &str, scope_id: &str) -> Result<Vec<SheetOverride>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT o.character_id, c.name, o.override_json FROM character_overrides o JOIN characters c ON c.id = o.character_id
         WHERE o.scope = ?1 AND o.scope_id = ?2 ORDER BY c.name COLLATE NOCASE, c.id",
    )?;
    let rows: Vec<(String, String, String)> =
        stmt.query_map(params![scope, scope_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?.collect::<Result<_, _>>()?;
    rows.into_iter()
        .map(|(character_id, character, json)| {
            let value: serde_json::Value =
                serde_json::from_str(&json).map_err(|e| StoreError::Corrupt(format!("character override: {e}")))?;
            let fields = value.as_object().into_iter().flatten().filter_map(|(k, v)| v.as_str().map(|t| (k.clone(), t.to_string()))).collect();
            Ok(SheetOverride { character_id, character, fields })
        })
        .collect()
}

/// Set (or with an empty text, remove) sheet fields of `id` for one world or one
/// campaign (`scope`: `world` or `campaign`); the fields not named keep their override.
/// Returns the override as it now is (empty: none left, and the row is gone).
pub fn set_override(
    conn: &Connection,
    id: &str,
    scope: &str,
    scope_id: &str,
    fields: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, StoreError> {
    if !matches!(scope, "world" | "campaign") {
        return Err(StoreError::Invalid(format!("an override is for a world or a campaign, not {scope:?}")));
    }
    let json = override_json(conn, id, scope, scope_id)?;
    let mut current: BTreeMap<String, String> = match json {
        Some(j) => serde_json::from_str(&j).map_err(|e| StoreError::Corrupt(format!("character override: {e}")))?,
        None => BTreeMap::new(),
    };
    for (key, value) in fields {
        if value.trim().is_empty() {
            current.remove(key);
        } else {
            current.insert(key.clone(), value.trim().to_string());
        }
    }
    if current.is_empty() {
        conn.execute("DELETE FROM character_overrides WHERE character_id = ?1 AND scope = ?2 AND scope_id = ?3", params![id, scope, scope_id])?;
    } else {
        let json = serde_json::to_string(&current).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        conn.execute(
            "INSERT INTO character_overrides(character_id, scope, scope_id, override_json) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(character_id, scope, scope_id) DO UPDATE SET override_json = excluded.override_json",
            params![id, scope, scope_id, json],
        )?;
    }
    Ok(current)
}

/// Changes to a character's sheet (the card's own text); `None` keeps a field.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct SheetEdit {
    pub name: Option<String>,
    pub description: Option<String>,
    pub personality: Option<String>,
    pub scenario: Option<String>,
    pub first_mes: Option<String>,
    pub mes_example: Option<String>,
    pub system_prompt: Option<String>,
    pub post_history_instructions: Option<String>,
    pub creator_notes: Option<String>,
    pub alternate_greetings: Option<Vec<String>>,
    pub tags: Option<Vec<String>>,
}

/// A character's sheet as an editor shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sheet {
    pub id: String,
    pub name: String,
    pub origin: String,
    pub description: String,
    pub personality: String,
    pub scenario: String,
    pub card: CardText,
    /// The lorebooks that fire for it: its card's own book and those attached to it
    /// (filled by the caller, which may read the lorebook tables).
    pub lorebooks: Vec<SheetLorebook>,
}

/// A lorebook of a character, as its sheet lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SheetLorebook {
    pub id: String,
    pub name: String,
    /// `card`: the card's own embedded book; `attached`: attached to the character
    /// (by hand, or bound as the World Info book its card names).
    pub source: &'static str,
}

/// The sheet of `record`: its card's text (a character developed by the identity
/// pipeline shows the card its profile maps to).
pub fn sheet(record: &CharacterRecord) -> Sheet {
    let fields = chat_sheet(record);
    let field = |key: &str| fields.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()).unwrap_or_default();
    let card = if record.card_json.is_some() {
        card_text(record)
    } else {
        let mapped = record.profile_json.as_deref().and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok());
        // A profile has no greeting, system prompt or post-history instructions of its own.
        mapped.map(|p| profile::profile_text(&p, &record.name)).map_or_else(CardText::default, |c| CardText {
            mes_example: c.mes_example,
            creator_notes: c.creator_notes,
            tags: c.tags,
            ..Default::default()
        })
    };
    Sheet {
        id: record.id.clone(),
        name: record.name.clone(),
        origin: record.origin.clone(),
        description: field("description"),
        personality: field("personality"),
        scenario: field("scenario"),
        card,
        lorebooks: Vec::new(),
    }
}

/// Change a character's sheet. An imported card is edited in place (under `data` for
/// V2/V3, and the V1 copy at the top where the card has one), so everything else on it
/// stays as it came and exports unchanged; a character developed by the identity
/// pipeline gets a card of its own, started from the card its profile maps to.
pub fn edit_sheet(conn: &Connection, id: &str, edit: &SheetEdit) -> Result<CharacterRecord, StoreError> {
    let record = get(conn, id)?.ok_or_else(|| StoreError::NotFound(format!("character {id}")))?;
    let name = match edit.name.as_deref().map(str::trim) {
        Some("") => return Err(StoreError::Invalid("name: a character needs a name".into())),
        Some(name) => name.to_string(),
        None => record.name.clone(),
    };
    // A rename to a name another character goes by (in any case) would leave every route
    // that finds a character by name unable to tell the two apart: refused, as `create`.
    if edit.name.is_some() && name_in_use(conn, &name, id)? {
        return Err(StoreError::Invalid(format!("a character already goes by {name:?}: choose another name")));
    }
    let mut card: serde_json::Value = match record.card_json.as_deref() {
        Some(json) => serde_json::from_str(json).map_err(|e| StoreError::Corrupt(format!("the card of {}: {e}", record.name)))?,
        None => {
            let current = sheet(&record);
            serde_json::json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": {
                "name": record.name, "description": current.description, "personality": current.personality,
                "scenario": current.scenario, "first_mes": current.card.first_mes, "mes_example": current.card.mes_example,
                "creator_notes": current.card.creator_notes, "system_prompt": current.card.system_prompt,
                "post_history_instructions": current.card.post_history_instructions,
                "alternate_greetings": current.card.alternate_greetings, "tags": current.card.tags,
                "creator": "", "character_version": "", "extensions": {} } })
        }
    };
    let texts = [
        ("name", Some(&name)),
        ("description", edit.description.as_ref()),
        ("personality", edit.personality.as_ref()),
        ("scenario", edit.scenario.as_ref()),
        ("first_mes", edit.first_mes.as_ref()),
        ("mes_example", edit.mes_example.as_ref()),
        ("system_prompt", edit.system_prompt.as_ref()),
        ("post_history_instructions", edit.post_history_instructions.as_ref()),
        ("creator_notes", edit.creator_notes.as_ref()),
    ];
    let lists = [("alternate_greetings", edit.alternate_greetings.as_ref()), ("tags", edit.tags.as_ref())];
    let has_data = card.get("data").is_some_and(|d| d.is_object());
    for target in [has_data.then_some("data"), Some("")].into_iter().flatten() {
        let object = if target.is_empty() { Some(&mut card) } else { card.get_mut(target) };
        let Some(object) = object.and_then(|o| o.as_object_mut()) else { continue };
        // The V1 copy at the top is only kept in step where the card has one.
        let top = target.is_empty() && has_data;
        for (key, value) in texts {
            if let Some(value) = value
                && (!top || object.contains_key(key))
            {
                object.insert(key.to_string(), serde_json::Value::String(value.clone()));
            }
        }
        for (key, value) in lists {
            if let Some(value) = value
                && (!top || object.contains_key(key))
            {
                object.insert(key.to_string(), serde_json::json!(value));
            }
        }
    }
    let json = serde_json::to_string(&card).map_err(|e| StoreError::Corrupt(format!("cannot encode the card: {e}")))?;
    conn.execute(
        "UPDATE characters SET name = ?2, card_json = ?3, updated_at = ?4 WHERE id = ?1",
        params![id, name, json, now_rfc3339()],
    )?;
    get(conn, id)?.ok_or_else(|| StoreError::NotFound(format!("character {id}")))
}

/// A character written from scratch (origin `manual`): a V2 card of its own, blank but
/// for what `edit` gives (its `name` is required), so it chats, plays, is edited and
/// exports as an imported card does. A name another character already goes by is
/// refused: names are how casts, chats and overrides find a character.
pub fn create(conn: &Connection, edit: &SheetEdit) -> Result<CharacterRecord, StoreError> {
    let name = edit.name.as_deref().map(str::trim).filter(|n| !n.is_empty());
    let name = name.ok_or_else(|| StoreError::Invalid("name: a character needs a name".into()))?;
    if name_in_use(conn, name, "")? {
        return Err(StoreError::Invalid(format!("a character already goes by {name:?}: give the new one another name")));
    }
    let card = serde_json::json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": {
        "name": name, "description": "", "personality": "", "scenario": "", "first_mes": "", "mes_example": "",
        "creator_notes": "", "system_prompt": "", "post_history_instructions": "", "alternate_greetings": [], "tags": [],
        "creator": "", "character_version": "", "extensions": {} } });
    let json = serde_json::to_string(&card).map_err(|e| StoreError::Corrupt(format!("cannot encode the card: {e}")))?;
    let id = insert(conn, NewCharacter { id: None, name, origin: Origin::Manual, card_json: Some(&json), profile_json: None })?;
    edit_sheet(conn, &id, &SheetEdit { name: None, ..edit.clone() })
}

/// Delete a character from the library. What refers to it goes with it (its chat, its
/// card's book, its places in casts and scenes: `ON DELETE CASCADE`; its identity run:
/// migration 0020); scene messages it spoke keep their text and lose the link. The
/// caller forgets its memories in the same transaction.
pub fn delete(conn: &Connection, id: &str) -> Result<(), StoreError> {
    if conn.execute("DELETE FROM characters WHERE id = ?1", [id])? == 0 {
        return Err(StoreError::NotFound(format!("character {id}")));
    }
    Ok(())
}

/// Attach a lorebook to a character (beside its card's own book); twice is once.
pub fn attach_lorebook(conn: &Connection, character_id: &str, lorebook_id: &str) -> Result<(), StoreError> {
    conn.execute("INSERT OR IGNORE INTO character_lorebooks(character_id, lorebook_id) VALUES (?1, ?2)", params![character_id, lorebook_id])?;
    Ok(())
}

/// Detach a lorebook from a character; returns whether it was attached.
pub fn detach_lorebook(conn: &Connection, character_id: &str, lorebook_id: &str) -> Result<bool, StoreError> {
    Ok(conn.execute("DELETE FROM character_lorebooks WHERE character_id = ?1 AND lorebook_id = ?2", params![character_id, lorebook_id])? > 0)
}

/// The lorebooks attached to a character by hand (not its card's own), by id.
pub fn lorebooks(conn: &Connection, character_id: &str) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT lorebook_id FROM character_lorebooks WHERE character_id = ?1 ORDER BY lorebook_id")?;
    let rows = stmt.query_map([character_id], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The World Info book a character's card names (`data.extensions.world`, SillyTavern's
/// link from a character to a book of its worlds folder), when it names one.
pub fn world_book_name(record: &CharacterRecord) -> Option<String> {
    let card: serde_json::Value = serde_json::from_str(record.card_json.as_deref()?).ok()?;
    let world = card.pointer("/data/extensions/world").and_then(serde_json::Value::as_str)?.trim();
    (!world.is_empty()).then(|| world.to_string())
}

/// The characters whose cards name `book` (case aside) as their World Info book,
/// `(id, name)` by name: those a book of that name is bound to when it is imported.
pub fn naming_world_book(conn: &Connection, book: &str) -> Result<Vec<(String, String)>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT id, name FROM characters WHERE card_json IS NOT NULL AND json_valid(card_json)
           AND trim(json_extract(card_json, '$.data.extensions.world')) = ?1 COLLATE NOCASE ORDER BY name COLLATE NOCASE, id",
    )?;
    let rows = stmt.query_map([book.trim()], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The characters a lorebook is attached to by hand, `(id, name)` by name (what deleting
/// the book would detach it from).
pub fn holding_lorebook(conn: &Connection, lorebook_id: &str) -> Result<Vec<(String, String)>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT c.id, c.name FROM character_lorebooks l JOIN characters c ON c.id = l.character_id
         WHERE l.lorebook_id = ?1 ORDER BY c.name COLLATE NOCASE, c.id",
    )?;
    let rows = stmt.query_map([lorebook_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// A persona: who the user plays.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Persona {
    pub id: String,
    pub name: String,
    pub description: String,
}

pub fn persona(conn: &Connection, id: &str) -> Result<Option<Persona>, StoreError> {
    Ok(conn
        .query_row("SELECT id, name, description FROM personas WHERE id = ?1", [id], |r| {
            Ok(Persona { id: r.get(0)?, name: r.get(1)?, description: r.get(2)? })
        })
        .optional()?)
}

/// Whether a persona other than `except` goes by `name` (case ignored).
fn persona_name_taken(conn: &Connection, name: &str, except: &str) -> Result<bool, StoreError> {
    Ok(conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM personas WHERE id != ?2 AND trim(name) = ?1 COLLATE NOCASE)",
        params![name.trim(), except],
        |r| r.get(0),
    )?)
}

/// Add a persona; returns its id. A name another persona goes by is refused: personas are
/// found by name, and two of one name could then be found by neither.
pub fn insert_persona(conn: &Connection, name: &str, description: &str) -> Result<String, StoreError> {
    if persona_name_taken(conn, name, "")? {
        return Err(StoreError::Invalid(format!("a persona already goes by {:?}: give the new one another name", name.trim())));
    }
    let id = new_id();
    conn.execute(
        "INSERT INTO personas(id, name, description, created_at) VALUES (?1, ?2, ?3, ?4)",
        params![id, name, description, now_rfc3339()],
    )?;
    Ok(id)
}

/// Every persona, by name.
pub fn personas(conn: &Connection) -> Result<Vec<Persona>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT id, name, description FROM personas ORDER BY name COLLATE NOCASE, created_at")?;
    let rows = stmt.query_map([], |r| Ok(Persona { id: r.get(0)?, name: r.get(1)?, description: r.get(2)? }))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// A persona by id, or by a name only one persona has.
pub fn resolve_persona(conn: &Connection, key: &str) -> Result<Persona, StoreError> {
    let key = key.trim();
    if let Some(found) = persona(conn, key)? {
        return Ok(found);
    }
    let mut stmt = conn.prepare_cached("SELECT id, name, description FROM personas WHERE name = ?1 COLLATE NOCASE")?;
    let mut found: Vec<Persona> =
        stmt.query_map([key], |r| Ok(Persona { id: r.get(0)?, name: r.get(1)?, description: r.get(2)? }))?.collect::<Result<_, _>>()?;
    if found.is_empty() {
        // The start of a name, or of a word of it.
        let all = personas(conn)?;
        // Several that match is the request's to make precise (a 400, as for every name), none a 404.
        let one = crate::names::only(&all, |p| &p.name, key).map_err(|e| {
            let message = e.message(&format!("persona {key:?}"));
            match e {
                crate::names::NoMatch::None => StoreError::NotFound(message),
                crate::names::NoMatch::Many(_) => StoreError::Invalid(message),
            }
        })?;
        return Ok(one.clone());
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        n => Err(StoreError::Invalid(format!("persona {key:?}: more than one name matches ({n} personas have that name); give the id"))),
    }
}

/// Change a persona's name or description (`None` keeps it).
pub fn update_persona(conn: &Connection, id: &str, name: Option<&str>, description: Option<&str>) -> Result<(), StoreError> {
    if let Some(name) = name
        && persona_name_taken(conn, name, id)?
    {
        return Err(StoreError::Invalid(format!("a persona already goes by {:?}: choose another name", name.trim())));
    }
    let changed = conn.execute(
        "UPDATE personas SET name = coalesce(?2, name), description = coalesce(?3, description) WHERE id = ?1",
        params![id, name, description],
    )?;
    if changed == 0 {
        return Err(StoreError::NotFound(format!("persona {id}")));
    }
    Ok(())
}

/// Largest persona picture accepted, in bytes and in pixels per side.
pub const MAX_IMAGE_BYTES: usize = 8 * 1024 * 1024;
pub const MAX_IMAGE_SIDE: u32 = 4096;

/// A PNG decoded to RGBA8 (width, height, pixels), refused when it is not a PNG, too
/// large, or damaged.
pub fn rgba(bytes: &[u8]) -> Result<(u32, u32, Vec<u8>), String> {
    if bytes.len() > MAX_IMAGE_BYTES {
        return Err(format!("the picture is {} bytes; at most {MAX_IMAGE_BYTES}", bytes.len()));
    }
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().map_err(|e| format!("not a PNG picture: {e}"))?;
    let (width, height) = (reader.info().width, reader.info().height);
    if width > MAX_IMAGE_SIDE || height > MAX_IMAGE_SIDE {
        return Err(format!("the picture is {width}×{height}; at most {MAX_IMAGE_SIDE} pixels a side"));
    }
    let size = reader.output_buffer_size().ok_or("the picture's size overflows")?;
    let mut buffer = vec![0; size];
    let frame = reader.next_frame(&mut buffer).map_err(|e| format!("the picture is damaged: {e}"))?;
    let data = &buffer[..frame.buffer_size()];
    let pixels = match frame.color_type {
        png::ColorType::Rgba => data.to_vec(),
        png::ColorType::Rgb => data.chunks_exact(3).flat_map(|p| [p[0], p[1], p[2], 255]).collect(),
        png::ColorType::GrayscaleAlpha => data.chunks_exact(2).flat_map(|p| [p[0], p[0], p[0], p[1]]).collect(),
        png::ColorType::Grayscale => data.iter().flat_map(|g| [*g, *g, *g, 255]).collect(),
        png::ColorType::Indexed => return Err("an indexed picture was not expanded".into()),
    };
    Ok((width, height, pixels))
}

/// Give a persona a picture (PNG bytes, checked to decode), or take it away (`None`).
pub fn set_persona_image(conn: &Connection, id: &str, png_bytes: Option<&[u8]>) -> Result<(), StoreError> {
    if let Some(bytes) = png_bytes {
        rgba(bytes).map_err(|e| StoreError::Invalid(format!("image: {e}")))?;
    }
    if conn.execute("UPDATE personas SET image_png = ?2 WHERE id = ?1", params![id, png_bytes])? == 0 {
        return Err(StoreError::NotFound(format!("persona {id}")));
    }
    Ok(())
}

/// A persona's picture, if it has one.
pub fn persona_image(conn: &Connection, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
    Ok(conn.query_row("SELECT image_png FROM personas WHERE id = ?1", [id], |r| r.get(0)).optional()?.flatten())
}

/// Delete a persona; campaigns that used it have none afterwards.
pub fn delete_persona(conn: &Connection, id: &str) -> Result<(), StoreError> {
    if conn.execute("DELETE FROM personas WHERE id = ?1", [id])? == 0 {
        return Err(StoreError::NotFound(format!("persona {id}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("lib.sqlite")).unwrap();
        (dir, store)
    }

    /// A character the identity pipeline built reaches a scene with its profile as prose
    /// (what its agents wrote), never as the profile's metadata.
    #[test]
    fn a_developed_character_is_placed_with_its_profile_not_its_metadata() {
        let (_dir, store) = store();
        let profile = profile::sample_profile().to_string();
        store
            .with(|c| {
                insert(c, NewCharacter { id: Some("m1"), name: "Mira Vell", origin: Origin::Identity, card_json: None, profile_json: Some(&profile) })?;
                let placed = placed(c, "m1", "w", "c")?.unwrap();
                let text: String = placed.sheet.iter().map(|(k, v)| format!("{k}: {v}\n")).collect();
                assert!(text.contains("meticulous") && text.contains("cartographer"), "{text}");
                for metadata in ["completed_at", "character_id", "2026-01-02", "version"] {
                    assert!(!text.contains(metadata), "{metadata} in {text}");
                }
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn resolves_by_id_name_and_unique_prefix() {
        let (_dir, store) = store();
        store
            .with(|c| {
                insert(c, NewCharacter { id: Some("a1"), name: "Ilse Marrow", origin: Origin::Manual, card_json: None, profile_json: None })?;
                insert(c, NewCharacter { id: Some("b2"), name: "Ilya", origin: Origin::Manual, card_json: None, profile_json: None })?;
                insert(c, NewCharacter { id: Some("c3"), name: "Tam_5%", origin: Origin::Manual, card_json: None, profile_json: None })?;
                assert_eq!(resolve(c, "a1")?.name, "Ilse Marrow");
                assert_eq!(resolve(c, "ilya")?.id, "b2");
                assert_eq!(resolve(c, "ilse")?.id, "a1");
                assert_eq!(resolve(c, "Tam_")?.id, "c3", "LIKE wildcards in a key are literal");
                assert!(resolve(c, "il").is_err(), "an ambiguous prefix is refused");
                assert!(resolve(c, "zed").is_err());
                // A word of the name, or the start of one: "Odile" for "Captain Odile Rask".
                insert(c, NewCharacter { id: Some("d4"), name: "Captain Odile Rask", origin: Origin::Manual, card_json: None, profile_json: None })?;
                insert(c, NewCharacter { id: Some("e5"), name: "Brother O'Rourke", origin: Origin::Manual, card_json: None, profile_json: None })?;
                assert_eq!(resolve(c, "Odile")?.id, "d4");
                assert_eq!(resolve(c, "rask")?.id, "d4");
                assert_eq!(resolve(c, "odile rask")?.id, "d4");
                assert_eq!(resolve(c, "rourke")?.id, "e5");
                assert!(resolve(c, "ask").is_err(), "the middle of a word is no match");
                match resolve(c, "marrow") {
                    Ok(found) => assert_eq!(found.id, "a1"),
                    Err(e) => panic!("{e}"),
                }
                insert(c, NewCharacter { id: Some("f6"), name: "Odette", origin: Origin::Manual, card_json: None, profile_json: None })?;
                assert_eq!(resolve(c, "odile")?.id, "d4");
                insert(c, NewCharacter { id: Some("g7"), name: "Sister Odile", origin: Origin::Manual, card_json: None, profile_json: None })?;
                let err = resolve(c, "odile").unwrap_err().to_string();
                assert!(err.contains("Captain Odile Rask, Sister Odile"), "the names that match are listed: {err}");
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn a_campaign_override_wins_over_the_world_and_the_card() {
        let (_dir, store) = store();
        store
            .with(|c| {
                let card = r#"{"spec":"chara_card_v2","data":{"name":"Ro","description":"a smith","personality":"gruff"}}"#;
                insert(c, NewCharacter { id: Some("r"), name: "Ro", origin: Origin::Card, card_json: Some(card), profile_json: None })?;
                c.execute_batch(
                    "INSERT INTO character_overrides(character_id, scope, scope_id, override_json) VALUES
                       ('r', 'world', 'w', '{\"personality\":\"weary\",\"name\":\"Old Ro\"}'),
                       ('r', 'campaign', 'k', '{\"personality\":\"hopeful\"}');",
                )?;
                let ro = placed(c, "r", "w", "k")?.expect("exists");
                assert_eq!(ro.name, "Old Ro");
                assert_eq!(ro.sheet.get("description").map(String::as_str), Some("a smith"));
                assert_eq!(ro.sheet.get("personality").map(String::as_str), Some("hopeful"));
                assert!(placed(c, "nobody", "w", "k")?.is_none());
                Ok(())
            })
            .unwrap();
    }
}
