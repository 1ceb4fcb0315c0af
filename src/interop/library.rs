//! Cards and lorebooks in the library: import into the store, list, load and export.
//!
//! Invariant: one file is one transaction. A file that cannot be read, or whose
//! writing fails half-way, leaves the library exactly as it was.

use super::format::card::{CardSpec, CharacterCard, decode_card, encode_card, encode_v2_backfill};
use super::format::detect::{Document, parse_bytes};
use super::format::{FormatError, MAX_FILE_BYTES, book, png, world_info};
use super::profile::card_from_profile;
use crate::character;
use crate::lorebook::{LoreEntry, Lorebook, SourceFormat};
use crate::store::{Store, StoreError, new_id, now_rfc3339};
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum InteropError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("no {kind} named or with id {key:?}")]
    NotFound { kind: &'static str, key: String },
    #[error("{count} {kind}s are named {key:?}; use an id: {ids}")]
    Ambiguous { kind: &'static str, key: String, count: usize, ids: String },
    #[error("character {name:?} has neither a card nor an identity profile to export")]
    NothingToExport { name: String },
    #[error("stored data for {what} is damaged: {reason}")]
    Damaged { what: String, reason: String },
    #[error("the entry was not saved: {0}")]
    InvalidEntry(String),
    #[error("lorebook {book:?} has no entry {index}: it has {count} (numbered from 0, as its list shows)")]
    NoEntry { book: String, index: usize, count: usize },
}

/// What an import created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreatedItem {
    pub kind: ItemKind,
    pub id: String,
    pub name: String,
    /// e.g. "Card V3 (PNG), 12 lore entries".
    pub detail: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    Character,
    Lorebook,
}

/// The result of importing one file that was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportOutcome {
    Created { items: Vec<CreatedItem>, warnings: Vec<String> },
    /// The same document is already in the library.
    Duplicate { kind: ItemKind, id: String, name: String },
}

/// Read and import one file.
pub fn import_file(store: &Store, path: &Path) -> Result<ImportOutcome, InteropError> {
    let bytes = crate::paths::read_bounded(path, MAX_FILE_BYTES).map_err(|e| match e {
        crate::paths::ReadError::Io { source, .. } => InteropError::Read { path: path.to_path_buf(), source },
        // Its real size, not the byte past the limit where reading stopped.
        crate::paths::ReadError::TooLarge { limit, .. } => {
            FormatError::TooLarge { size: std::fs::metadata(path).map(|m| m.len()).unwrap_or(limit + 1), limit }.into()
        }
        other => InteropError::Read { path: path.to_path_buf(), source: std::io::Error::new(std::io::ErrorKind::InvalidInput, other.to_string()) },
    })?;
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "Imported".into());
    import_bytes(store, &bytes, &stem)
}

/// Import one document; `stem` names a lorebook whose document has no name.
pub fn import_bytes(store: &Store, bytes: &[u8], stem: &str) -> Result<ImportOutcome, InteropError> {
    let parsed = parse_bytes(bytes)?;
    let canonical = serde_json::to_string(&parsed.json).map_err(|e| FormatError::Json { what: "the document".into(), reason: e.to_string() })?;
    let kind_label = parsed.kind.label();
    let mut warnings = parsed.warnings;
    // Entries an editor would refuse are kept as they came (a round trip changes nothing),
    // and said: a key that is not a valid regular expression never fires.
    let book = match &parsed.document {
        Document::Card(c) => c.card.character_book.as_ref(),
        Document::Lorebook(b) => Some(&**b),
    };
    for (i, entry) in book.into_iter().flat_map(|b| b.entries.iter()).enumerate() {
        if let Err(problem) = crate::lorebook::activation::check_entry(entry) {
            warnings.push(format!("lore entry {i} ({}): {problem}; kept as it came, fix it in the entry editor", entry.label()));
        }
        // SillyTavern's tag ids name tags only in its own settings: said, so the user can
        // choose the tags again by name (see `lorebook::CharacterFilter`).
        if entry.filter_as_read().tags_as_read {
            let how = if entry.character_filter.is_exclude { "fires for every character here" } else { "fires for no character here" };
            warnings.push(format!(
                "lore entry {i} ({}): its character filter names SillyTavern tag ids ({}), which no character here carries (tags here are names), so it {how}; choose the tags by name in the entry editor",
                entry.label(),
                entry.character_filter.tags.join(", ")
            ));
        }
    }
    store.transaction(|tx| match parsed.document {
        Document::Card(parsed_card) => {
            if let Some(existing) = character::find_card(tx, &canonical)? {
                return Ok(ImportOutcome::Duplicate { kind: ItemKind::Character, id: existing.id, name: existing.name });
            }
            let card = parsed_card.card;
            let id = character::insert(
                tx,
                character::NewCharacter { id: None, name: &card.name, origin: character::Origin::Card, card_json: Some(&canonical), profile_json: None },
            )?;
            if let Some(image) = &parsed_card.image {
                tx.execute("INSERT INTO character_images(character_id, png) VALUES (?1, ?2)", params![id, image])?;
            }
            let mut detail = kind_label;
            let mut items = Vec::new();
            let mut own_book = None;
            if let Some(book) = &card.character_book {
                let wanted = book.name.clone().filter(|n| !n.trim().is_empty()).unwrap_or_else(|| format!("{}'s lorebook", card.name));
                let name = unique_book_name(tx, &wanted, &mut warnings)?;
                let book_id = insert_lorebook(tx, &name, Some(&id), book, None)?;
                own_book = Some((wanted, book_id.clone()));
                detail.push_str(&format!(", {} lore entries", book.entries.len()));
                items.push(CreatedItem {
                    kind: ItemKind::Lorebook,
                    id: book_id,
                    name,
                    detail: format!("embedded in {}'s card, {} entries", card.name, book.entries.len()),
                });
            }
            if let Some(world) = card.extensions.get("world").and_then(serde_json::Value::as_str) {
                bind_world_book(tx, &id, &card.name, world, own_book.as_ref(), &mut warnings)?;
            }
            items.insert(0, CreatedItem { kind: ItemKind::Character, id, name: card.name.clone(), detail });
            Ok(ImportOutcome::Created { items, warnings: warnings.clone() })
        }
        Document::Lorebook(book) => {
            let digest = hex::encode(Sha256::digest(canonical.as_bytes()));
            let existing: Option<(String, String)> = tx
                .query_row("SELECT id, name FROM lorebooks WHERE source_sha256 = ?1", [&digest], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            if let Some((id, name)) = existing {
                return Ok(ImportOutcome::Duplicate { kind: ItemKind::Lorebook, id, name });
            }
            let wanted = book.name.clone().filter(|n| !n.trim().is_empty()).unwrap_or_else(|| stem.to_string());
            let name = unique_book_name(tx, &wanted, &mut warnings)?;
            let id = insert_lorebook(tx, &name, None, &book, Some(&digest))?;
            // Cards imported before their World Info book get it now. A book renamed for
            // a clash is not the one they name (that one is in the library already).
            if name == wanted {
                let bound = character::naming_world_book(tx, &name)?;
                for (character_id, _) in &bound {
                    character::attach_lorebook(tx, character_id, &id)?;
                }
                if !bound.is_empty() {
                    let names: Vec<String> = bound.iter().map(|(_, n)| format!("{n:?}")).collect();
                    warnings.push(format!(
                        "bound to {} (their cards name {name:?} as their World Info book): it fires in their chats and scenes",
                        names.join(", ")
                    ));
                }
            }
            let detail = format!("{kind_label}, {} entries", book.entries.len());
            Ok(ImportOutcome::Created { items: vec![CreatedItem { kind: ItemKind::Lorebook, id, name, detail }], warnings: warnings.clone() })
        }
    })
    .map_err(InteropError::from)
}

/// Bind the World Info book a card names (`data.extensions.world`, SillyTavern's link from
/// a character to a book of its worlds folder) to the character, as SillyTavern fires that
/// book in the character's chats; say in `notes` what was bound, or that the book is not in
/// the library yet (importing it later binds it: see [`import_bytes`]). A card that names
/// its own embedded book (`own_book`: the name it asked for, its id) has it already.
fn bind_world_book(
    conn: &Connection,
    character_id: &str,
    character_name: &str,
    world: &str,
    own_book: Option<&(String, String)>,
    notes: &mut Vec<String>,
) -> Result<(), StoreError> {
    let world = world.trim();
    if world.is_empty() {
        return Ok(());
    }
    if own_book.is_some_and(|(wanted, _)| wanted.trim().eq_ignore_ascii_case(world)) {
        notes.push(format!("its World Info book {world:?} is the card's own embedded book, imported with it"));
        return Ok(());
    }
    let own_id = own_book.map(|(_, id)| id.as_str());
    let found: Option<(String, String)> = conn
        .query_row(
            "SELECT id, name FROM lorebooks WHERE name = ?1 COLLATE NOCASE AND id IS NOT ?2 ORDER BY created_at, id LIMIT 1",
            params![world, own_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    match found {
        Some((book_id, name)) => {
            character::attach_lorebook(conn, character_id, &book_id)?;
            notes.push(format!(
                "bound World Info book {name:?} (named by the card) to {character_name:?}: it fires in its chats and scenes"
            ));
        }
        None => notes.push(format!(
            "the card names World Info book {world:?}, which is not in the library: import it (SillyTavern's worlds/{world}.json) and it is bound to {character_name:?} then"
        )),
    }
    Ok(())
}

/// The name an imported lorebook gets: its own, or when another book has that one, the
/// first free `name (2)`, `name (3)`, … — said in `warnings`. Books are attached and edited
/// by name, and two of one name could then only be told apart by id; the file itself is
/// kept as it came (its export still carries its own name).
fn unique_book_name(conn: &Connection, wanted: &str, warnings: &mut Vec<String>) -> Result<String, StoreError> {
    let name = free_name(conn, wanted)?;
    if name != wanted {
        warnings.push(format!(
            "a lorebook is already named {wanted:?}: this one was imported as {name:?} (rename either one with `lorebook rename`)"
        ));
    }
    Ok(name)
}

/// Add a lorebook to the library (the scene engine's demo content uses this too);
/// `character_id` links a card's embedded book, `digest` identifies an imported file.
/// Call it inside a transaction so the book and its entries land together.
pub fn insert_lorebook(
    conn: &Connection,
    name: &str,
    character_id: Option<&str>,
    book: &Lorebook,
    digest: Option<&str>,
) -> Result<String, StoreError> {
    let id = new_id();
    let now = now_rfc3339();
    let settings = Lorebook { entries: Vec::new(), ..book.clone() };
    let book_json = serde_json::to_string(&settings).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    conn.execute(
        "INSERT INTO lorebooks(id, name, character_id, book_json, source_sha256, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
        params![id, name, character_id, book_json, digest, now],
    )?;
    let mut insert = conn.prepare(
        "INSERT INTO lore_entries(id, lorebook_id, ordinal, label, enabled, constant, entry_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    for (ordinal, entry) in book.entries.iter().enumerate() {
        let json = serde_json::to_string(entry).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        insert.execute(params![new_id(), id, ordinal as i64, entry.label(), entry.enabled, entry.constant, json])?;
    }
    Ok(id)
}

/// A lorebook written from scratch: named, empty, its entries added in the entry editor
/// (`lorebook entry add`). A name another lorebook has is refused, since books are
/// attached and edited by name. Returns its id.
pub fn create_lorebook(conn: &Connection, name: &str, description: &str) -> Result<String, StoreError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(StoreError::Invalid("name: a lorebook needs a name".into()));
    }
    if name_taken(conn, name, None)? {
        return Err(StoreError::Invalid(format!("a lorebook is already named {name:?}: give the new one another name")));
    }
    let description = Some(description.trim().to_string()).filter(|d| !d.is_empty());
    insert_lorebook(conn, name, None, &Lorebook { name: Some(name.to_string()), description, ..Default::default() }, None)
}

/// Whether a lorebook other than `except` is named `name` (case aside): books are attached,
/// edited and exported by name, so two of one name would each need their id.
fn name_taken(conn: &Connection, name: &str, except: Option<&str>) -> Result<bool, StoreError> {
    Ok(conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM lorebooks WHERE name = ?1 COLLATE NOCASE AND id IS NOT ?2)",
        params![name, except],
        |r| r.get(0),
    )?)
}

/// `name`, or the first of `name (2)`, `name (3)`, … no lorebook has: what an imported book
/// is called when its own name is taken (the import says so).
pub fn free_name(conn: &Connection, name: &str) -> Result<String, StoreError> {
    let mut candidate = name.to_string();
    let mut n = 2;
    while name_taken(conn, &candidate, None)? {
        candidate = format!("{name} ({n})");
        n += 1;
    }
    Ok(candidate)
}

/// Rename a lorebook; a name another book has is refused, as [`create_lorebook`] refuses
/// it. The book's own document takes the new name too when it had one (a World Info file
/// has none), so an export carries it. Returns the name as kept (trimmed).
pub fn rename_lorebook(conn: &Connection, id: &str, name: &str) -> Result<String, StoreError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(StoreError::Invalid("name: a lorebook needs a name".into()));
    }
    if name_taken(conn, name, Some(id))? {
        return Err(StoreError::Invalid(format!("a lorebook is already named {name:?}: choose another name")));
    }
    let json: String = conn
        .query_row("SELECT book_json FROM lorebooks WHERE id = ?1", [id], |r| r.get(0))
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("no lorebook with id {id:?}")))?;
    let mut settings: Lorebook = serde_json::from_str(&json).map_err(|e| StoreError::Corrupt(format!("lorebook {id}: {e}")))?;
    if settings.name.is_some() {
        settings.name = Some(name.to_string());
    }
    let json = serde_json::to_string(&settings).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    conn.execute("UPDATE lorebooks SET name = ?1, book_json = ?2, updated_at = ?3 WHERE id = ?4", params![name, json, now_rfc3339(), id])?;
    Ok(name.to_string())
}

/// How many entries a lorebook holds, and the character whose card embeds it (if one does).
pub fn lorebook_contents(conn: &Connection, id: &str) -> Result<(usize, Option<String>), StoreError> {
    let (entries, character): (i64, Option<String>) = conn
        .query_row(
            "SELECT (SELECT count(*) FROM lore_entries WHERE lorebook_id = b.id), b.character_id FROM lorebooks b WHERE b.id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("no lorebook with id {id:?}")))?;
    Ok((entries.max(0) as usize, character))
}

/// Delete a lorebook and its entries. Its attachments (to worlds, campaigns, characters
/// and chats, each in its owner's table) go in the same statement, by the schema's
/// `ON DELETE CASCADE`; the caller says first what they were. A card that embedded it
/// exports without a book from then on.
pub fn delete_lorebook(conn: &Connection, id: &str) -> Result<(), StoreError> {
    if conn.execute("DELETE FROM lorebooks WHERE id = ?1", [id])? == 0 {
        return Err(StoreError::NotFound(format!("no lorebook with id {id:?}")));
    }
    Ok(())
}

/// Replace one entry of a lorebook (by its position in the book), e.g. after an edit.
/// Its `source` is kept as it is, so the next export changes only what was edited.
pub fn update_entry(conn: &Connection, lorebook_id: &str, ordinal: usize, entry: &LoreEntry) -> Result<(), InteropError> {
    let json = serde_json::to_string(entry).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let changed = conn
        .execute(
            "UPDATE lore_entries SET entry_json = ?1, label = ?2, enabled = ?3, constant = ?4 WHERE lorebook_id = ?5 AND ordinal = ?6",
            params![json, entry.label(), entry.enabled, entry.constant, lorebook_id, ordinal as i64],
        )
        .map_err(StoreError::from)?;
    if changed == 0 {
        return Err(InteropError::NotFound { kind: "lore entry", key: format!("{lorebook_id}#{ordinal}") });
    }
    conn.execute("UPDATE lorebooks SET updated_at = ?1 WHERE id = ?2", params![now_rfc3339(), lorebook_id]).map_err(StoreError::from)?;
    Ok(())
}

/// The ids of a lorebook's entries in their order.
fn entry_ids(conn: &Connection, lorebook_id: &str) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare("SELECT id FROM lore_entries WHERE lorebook_id = ?1 ORDER BY ordinal")?;
    let rows = stmt.query_map([lorebook_id], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Give a lorebook's entries the positions 0..n in the order of `ids` (two passes, so
/// the book's unique positions never collide midway), and mark the book changed.
fn renumber(conn: &Connection, lorebook_id: &str, ids: &[String]) -> Result<(), StoreError> {
    conn.execute("UPDATE lore_entries SET ordinal = -1 - ordinal WHERE lorebook_id = ?1", [lorebook_id])?;
    let mut set = conn.prepare("UPDATE lore_entries SET ordinal = ?2 WHERE id = ?1")?;
    for (ordinal, id) in ids.iter().enumerate() {
        set.execute(params![id, ordinal as i64])?;
    }
    conn.execute("UPDATE lorebooks SET updated_at = ?1 WHERE id = ?2", params![now_rfc3339(), lorebook_id])?;
    Ok(())
}

fn no_entry(lorebook_id: &str, ordinal: usize) -> InteropError {
    InteropError::NotFound { kind: "lore entry", key: format!("{lorebook_id}#{ordinal}") }
}

/// Add `entry` at the end of a lorebook; returns its position.
pub fn add_entry(conn: &Connection, lorebook_id: &str, entry: &LoreEntry) -> Result<usize, InteropError> {
    let ordinal = entry_ids(conn, lorebook_id)?.len();
    let json = serde_json::to_string(entry).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    conn.execute(
        "INSERT INTO lore_entries(id, lorebook_id, ordinal, label, enabled, constant, entry_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![new_id(), lorebook_id, ordinal as i64, entry.label(), entry.enabled, entry.constant, json],
    )
    .map_err(StoreError::from)?;
    conn.execute("UPDATE lorebooks SET updated_at = ?1 WHERE id = ?2", params![now_rfc3339(), lorebook_id]).map_err(StoreError::from)?;
    Ok(ordinal)
}

/// Delete the entry at `ordinal`; the entries after it move up one.
pub fn delete_entry(conn: &Connection, lorebook_id: &str, ordinal: usize) -> Result<(), InteropError> {
    let mut ids = entry_ids(conn, lorebook_id)?;
    if ordinal >= ids.len() {
        return Err(no_entry(lorebook_id, ordinal));
    }
    let id = ids.remove(ordinal);
    conn.execute("DELETE FROM lore_entries WHERE id = ?1", [&id]).map_err(StoreError::from)?;
    renumber(conn, lorebook_id, &ids)?;
    Ok(())
}

/// Move the entry at `from` to position `to` (the others keep their order); returns
/// where it went (`to`, or the end when `to` is past it). Every entry's `display_index`
/// becomes its new position, so SillyTavern's editor (its custom sort) shows the order too.
pub fn move_entry(conn: &Connection, lorebook_id: &str, from: usize, to: usize) -> Result<usize, InteropError> {
    let mut ids = entry_ids(conn, lorebook_id)?;
    if from >= ids.len() {
        return Err(no_entry(lorebook_id, from));
    }
    // A place past the last is refused, not taken as "last": a script that asks for 9999
    // in a book of twelve has the wrong index, and should hear it.
    if to >= ids.len() {
        return Err(InteropError::InvalidEntry(format!("to: {to} is past the last entry (the book has {} entries, 0–{})", ids.len(), ids.len() - 1)));
    }
    let id = ids.remove(from);
    let at = to;
    ids.insert(at, id);
    renumber(conn, lorebook_id, &ids)?;
    for (ordinal, mut entry) in load_lorebook(conn, lorebook_id)?.entries.into_iter().enumerate() {
        let index = i64::try_from(ordinal).unwrap_or(i64::MAX);
        if entry.display_index != Some(index) {
            entry.display_index = Some(index);
            update_entry(conn, lorebook_id, ordinal, &entry)?;
        }
    }
    Ok(at)
}

/// Copy the entry at `ordinal` to the end of its book, as a new entry of its own (no
/// source document, so it is written fresh on export). Returns the copy's position.
pub fn duplicate_entry(conn: &Connection, lorebook_id: &str, ordinal: usize) -> Result<usize, InteropError> {
    let book = load_lorebook(conn, lorebook_id)?;
    let mut copy = book.entries.get(ordinal).cloned().ok_or_else(|| no_entry(lorebook_id, ordinal))?;
    copy.source = None;
    copy.id = None;
    if !copy.comment.trim().is_empty() {
        copy.comment = format!("{} (copy)", copy.comment.trim());
    }
    add_entry(conn, lorebook_id, &copy)
}

/// A character in the library, as lists show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CharacterSummary {
    pub id: String,
    pub name: String,
    pub origin: String,
    pub has_card: bool,
    pub has_profile: bool,
    pub has_portrait: bool,
}

/// A lorebook in the library, as lists show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LorebookSummary {
    pub id: String,
    pub name: String,
    pub entries: usize,
    /// The character whose card embeds this book.
    pub character_id: Option<String>,
}

/// Every character and lorebook, sorted by name.
pub fn list(conn: &Connection) -> Result<(Vec<CharacterSummary>, Vec<LorebookSummary>), StoreError> {
    let mut stmt = conn.prepare("SELECT character_id FROM character_images")?;
    let portraits: std::collections::HashSet<String> = stmt.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
    let characters = character::list(conn)?
        .into_iter()
        .map(|c| CharacterSummary {
            has_card: c.card_json.is_some(),
            has_profile: c.profile_json.is_some(),
            has_portrait: portraits.contains(&c.id),
            id: c.id,
            name: c.name,
            origin: c.origin,
        })
        .collect();
    let mut stmt = conn.prepare(
        "SELECT b.id, b.name, (SELECT COUNT(*) FROM lore_entries e WHERE e.lorebook_id = b.id), b.character_id
         FROM lorebooks b ORDER BY b.name COLLATE NOCASE, b.created_at",
    )?;
    let lorebooks = stmt
        .query_map([], |r| {
            Ok(LorebookSummary { id: r.get(0)?, name: r.get(1)?, entries: r.get::<_, i64>(2)? as usize, character_id: r.get(3)? })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok((characters, lorebooks))
}

/// Load a lorebook with its entries, in book order.
pub fn load_lorebook(conn: &Connection, id: &str) -> Result<Lorebook, InteropError> {
    let json: String = conn
        .query_row("SELECT book_json FROM lorebooks WHERE id = ?1", [id], |r| r.get(0))
        .optional()
        .map_err(StoreError::from)?
        .ok_or_else(|| InteropError::NotFound { kind: "lorebook", key: id.to_string() })?;
    let damaged = |reason: String| InteropError::Damaged { what: format!("lorebook {id}"), reason };
    let mut book: Lorebook = serde_json::from_str(&json).map_err(|e| damaged(e.to_string()))?;
    let mut stmt = conn.prepare("SELECT entry_json FROM lore_entries WHERE lorebook_id = ?1 ORDER BY ordinal").map_err(StoreError::from)?;
    let rows = stmt.query_map([id], |r| r.get::<_, String>(0)).map_err(StoreError::from)?;
    for row in rows {
        let json = row.map_err(StoreError::from)?;
        book.entries.push(serde_json::from_str::<LoreEntry>(&json).map_err(|e| damaged(e.to_string()))?);
    }
    Ok(book)
}

/// A lorebook's settings (without entries) and its enabled entries with their book
/// order, for activation: what a scene or a chat fires lore from.
pub fn enabled_entries(conn: &Connection, book_id: &str) -> Result<(Lorebook, Vec<(usize, LoreEntry)>), StoreError> {
    let corrupt = |what: &str, e: serde_json::Error| StoreError::Corrupt(format!("{what}: {e}"));
    let book_json: String = conn.query_row("SELECT book_json FROM lorebooks WHERE id = ?1", [book_id], |r| r.get(0))?;
    let book: Lorebook = serde_json::from_str(&book_json).map_err(|e| corrupt("lorebook settings", e))?;
    let mut stmt = conn.prepare_cached("SELECT ordinal, entry_json FROM lore_entries WHERE lorebook_id = ?1 AND enabled = 1 ORDER BY ordinal")?;
    let rows: Vec<(i64, String)> = stmt.query_map([book_id], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
    let entries = rows
        .into_iter()
        .map(|(ordinal, json)| Ok((ordinal.max(0) as usize, serde_json::from_str(&json).map_err(|e| corrupt("lore entry", e))?)))
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok((book, entries))
}

/// Whether the library holds any lorebook (none of the demos brings one).
pub fn any_lorebook(conn: &Connection) -> Result<bool, StoreError> {
    Ok(conn.query_row("SELECT EXISTS(SELECT 1 FROM lorebooks)", [], |r| r.get(0))?)
}

/// Every lorebook's name by id (the authoring tree names attached books with it).
pub fn lorebook_names(conn: &Connection) -> Result<std::collections::HashMap<String, String>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT id, name FROM lorebooks")?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The lorebooks attached to a character (its card's own book among them), oldest first.
pub fn books_of_character(conn: &Connection, character_id: &str) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT id FROM lorebooks WHERE character_id = ?1 ORDER BY created_at, id")?;
    let rows = stmt.query_map([character_id], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// A character's sheet with the lorebooks that fire for it: its card's own, then those
/// attached to it, each once.
pub fn sheet_with_books(conn: &Connection, record: &character::CharacterRecord) -> Result<character::Sheet, StoreError> {
    let mut sheet = character::sheet(record);
    let names = lorebook_names(conn)?;
    let own = books_of_character(conn, &record.id)?.into_iter().map(|id| (id, "card"));
    let attached = character::lorebooks(conn, &record.id)?.into_iter().map(|id| (id, "attached"));
    for (id, source) in own.chain(attached) {
        if sheet.lorebooks.iter().any(|b| b.id == id) {
            continue;
        }
        let name = names.get(&id).cloned().unwrap_or_else(|| id.clone());
        sheet.lorebooks.push(character::SheetLorebook { id, name, source });
    }
    Ok(sheet)
}

/// A lorebook's `(id, name)` by id, or by a name only one lorebook has.
pub fn resolve_lorebook(conn: &Connection, key: &str) -> Result<(String, String), InteropError> {
    resolve(conn, "lorebooks", "lorebook", key)
}

/// Resolve `key` (an id, else an exact name, case-insensitive, else the start of a name
/// or of a word of it) in `table`.
fn resolve(conn: &Connection, table: &'static str, kind: &'static str, key: &str) -> Result<(String, String), InteropError> {
    let by_id: Option<(String, String)> = conn
        .query_row(&format!("SELECT id, name FROM {table} WHERE id = ?1"), [key], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .map_err(StoreError::from)?;
    if let Some(found) = by_id {
        return Ok(found);
    }
    let mut stmt = conn
        .prepare(&format!("SELECT id, name FROM {table} WHERE name = ?1 COLLATE NOCASE ORDER BY created_at"))
        .map_err(StoreError::from)?;
    let found = stmt
        .query_map([key.trim()], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .map_err(StoreError::from)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(StoreError::from)?;
    if found.is_empty() {
        // The start of a name, or of a word of it.
        let rows: Vec<(String, String)> = conn
            .prepare(&format!("SELECT id, name FROM {table} ORDER BY name COLLATE NOCASE, created_at"))
            .and_then(|mut stmt| stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
            .map_err(StoreError::from)?;
        return match crate::names::only(&rows, |r| &r.1, key) {
            Ok(one) => Ok(one.clone()),
            Err(crate::names::NoMatch::None) => Err(InteropError::NotFound { kind, key: key.to_string() }),
            Err(many) => Err(InteropError::Store(StoreError::Invalid(many.message(&format!("{kind} {key:?}"))))),
        };
    }
    match found.len() {
        1 => Ok(found.into_iter().next().unwrap_or_default()),
        count => Err(InteropError::Ambiguous {
            kind,
            key: key.to_string(),
            count,
            ids: found.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>().join(", "),
        }),
    }
}

/// The card formats a character can be exported in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CardFormat {
    CardV2,
    CardV3,
}

impl CardFormat {
    pub fn spec(self) -> CardSpec {
        match self {
            CardFormat::CardV2 => CardSpec::V2,
            CardFormat::CardV3 => CardSpec::V3,
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            CardFormat::CardV2 => "card-v2",
            CardFormat::CardV3 => "card-v3",
        }
    }
}

/// The formats a lorebook can be exported in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LorebookFormat {
    WorldInfo,
    LorebookV3,
}

impl LorebookFormat {
    pub fn label(self) -> &'static str {
        match self {
            LorebookFormat::WorldInfo => "world-info",
            LorebookFormat::LorebookV3 => "lorebook-v3",
        }
    }
}

/// A finished export, ready to write.
#[derive(Debug, Clone)]
pub struct Export {
    pub id: String,
    pub name: String,
    pub bytes: Vec<u8>,
}

/// A character as a card: its imported card (with its lorebook as it is now), else a
/// card built from its identity profile.
pub fn load_card(conn: &Connection, id: &str) -> Result<(CharacterCard, Option<Vec<u8>>), InteropError> {
    let character::CharacterRecord { name, card_json, profile_json, .. } =
        character::get(conn, id)?.ok_or_else(|| InteropError::NotFound { kind: "character", key: id.to_string() })?;
    let damaged = |reason: String| InteropError::Damaged { what: format!("character {name:?}"), reason };
    let mut card = if let Some(json) = card_json {
        let value: serde_json::Value = serde_json::from_str(&json).map_err(|e| damaged(e.to_string()))?;
        let (mut card, _) = decode_card(value).map_err(|e| damaged(e.to_string()))?;
        card.character_book = None;
        card
    } else if let Some(json) = profile_json {
        let profile: serde_json::Value = serde_json::from_str(&json).map_err(|e| damaged(e.to_string()))?;
        card_from_profile(&profile, &name)
    } else {
        return Err(InteropError::NothingToExport { name });
    };
    let book_id: Option<String> = conn
        .query_row("SELECT id FROM lorebooks WHERE character_id = ?1 ORDER BY created_at LIMIT 1", [id], |r| r.get(0))
        .optional()
        .map_err(StoreError::from)?;
    if let Some(book_id) = book_id {
        card.character_book = Some(load_lorebook(conn, &book_id)?);
    }
    // `extensions.world`: the World Info book bound to it, by name, as SillyTavern links
    // them. A name kept from the card stays while that book is attached or not in the
    // library at all (another SillyTavern still has it); one the user detached goes.
    let names = lorebook_names(conn)?;
    let attached: Vec<&String> = character::lorebooks(conn, id)?.iter().filter_map(|b| names.get(b)).collect();
    let kept = card.extensions.get("world").and_then(serde_json::Value::as_str).map(str::trim).filter(|w| !w.is_empty());
    let world = match kept {
        Some(w) if attached.iter().any(|a| a.eq_ignore_ascii_case(w)) || !names.values().any(|n| n.eq_ignore_ascii_case(w)) => Some(w.to_string()),
        _ => attached.first().map(|a| a.to_string()),
    };
    match world {
        Some(world) => {
            card.extensions.insert("world".into(), serde_json::Value::String(world));
        }
        None if kept.is_some() => {
            card.extensions.insert("world".into(), serde_json::Value::String(String::new()));
        }
        None => {}
    }
    let image: Option<Vec<u8>> = conn
        .query_row("SELECT png FROM character_images WHERE character_id = ?1", [id], |r| r.get(0))
        .optional()
        .map_err(StoreError::from)?;
    Ok((card, image))
}

/// A character's portrait as a small square PNG (see [`png::square_thumbnail`]): `None`
/// when its card brought no picture, an error when the stored one cannot be decoded.
pub fn portrait(conn: &Connection, id: &str, side: u32) -> Result<Option<Vec<u8>>, InteropError> {
    let image: Option<Vec<u8>> = conn
        .query_row("SELECT png FROM character_images WHERE character_id = ?1", [id], |r| r.get(0))
        .optional()
        .map_err(StoreError::from)?;
    let Some(image) = image else { return Ok(None) };
    let (width, height, rgba) =
        character::rgba(&image).map_err(|reason| InteropError::Damaged { what: format!("the portrait of character {id}"), reason })?;
    let thumbnail = png::square_thumbnail(width, height, &rgba, side);
    Ok((!thumbnail.is_empty()).then_some(thumbnail))
}

/// Export a character (by id or name) as a card document, JSON or PNG.
pub fn export_character(conn: &Connection, key: &str, format: CardFormat, as_png: bool) -> Result<Export, InteropError> {
    let (id, name) = resolve(conn, "characters", "character", key)?;
    let (card, image) = load_card(conn, &id)?;
    let document = encode_card(&card, format.spec());
    let bytes = if as_png {
        let image = image.unwrap_or_else(|| png::placeholder_portrait(&card.name));
        let json = document.to_string();
        match format {
            CardFormat::CardV2 => png::embed_card_chunks(&image, &[("chara", &json)])?,
            CardFormat::CardV3 => {
                // Both chunks, as other V3 writers do: V2-only readers still get the card.
                let backfill = encode_v2_backfill(&card).to_string();
                png::embed_card_chunks(&image, &[("chara", &backfill), ("ccv3", &json)])?
            }
        }
    } else {
        pretty(&document)
    };
    Ok(Export { id, name, bytes })
}

/// Export a lorebook (by id or name).
pub fn export_lorebook(conn: &Connection, key: &str, format: LorebookFormat) -> Result<Export, InteropError> {
    let (id, name) = resolve(conn, "lorebooks", "lorebook", key)?;
    let mut book = load_lorebook(conn, &id)?;
    let same_shape = matches!(
        (format, book.source.as_ref().map(|s| s.format)),
        (LorebookFormat::WorldInfo, Some(SourceFormat::WorldInfo)) | (LorebookFormat::LorebookV3, Some(SourceFormat::LorebookV3))
    );
    if book.name.is_none() && !same_shape {
        book.name = Some(name.clone());
    }
    let document = match format {
        LorebookFormat::WorldInfo => world_info::encode_world_info(&book),
        LorebookFormat::LorebookV3 => book::encode_lorebook_v3(&book),
    };
    Ok(Export { id, name, bytes: pretty(&document) })
}

fn pretty(value: &serde_json::Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(value).unwrap_or_else(|_| value.to_string().into_bytes());
    bytes.push(b'\n');
    bytes
}

/// Write `bytes` to `path` through a temporary file, so a failed write never leaves a
/// half-written file where a good one was.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), InteropError> {
    let write_err = |source| InteropError::Write { path: path.to_path_buf(), source };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(write_err)?;
    }
    let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "export".into());
    let tmp = path.with_file_name(format!(".{file_name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(write_err)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        write_err(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file over the limit is refused by its real size, not the byte where reading stopped.
    #[test]
    fn a_file_too_large_is_refused_with_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("lib.sqlite")).unwrap();
        let big = dir.path().join("big.json");
        std::fs::File::create(&big).unwrap().set_len(200 << 20).unwrap();
        let message = import_file(&store, &big).unwrap_err().to_string();
        assert!(message.contains(&format!("{} bytes", 200u64 << 20)), "{message}");
    }
}
