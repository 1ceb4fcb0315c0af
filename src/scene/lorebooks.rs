//! A lorebook as a whole, as a game master renames or deletes it: what it is attached to,
//! said in words before it goes. Each table is read by its owner — worlds and campaigns
//! here, characters by `character`, chats by `companion`, the book by `interop`.

use super::authoring::Impact;
use crate::store::StoreError;
use rusqlite::Connection;
use serde::Serialize;

/// What a lorebook holds and where it fires: what deleting it would take and detach.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LorebookUse {
    pub id: String,
    pub name: String,
    pub entries: usize,
    /// Where it is attached, in words: `world "Eldoria"`, `campaign "The Siege"`,
    /// `character "Mira"`, `the chat with "Mira"`, `the card of "Mira"` (its own book).
    pub bound: Vec<String>,
}

impl LorebookUse {
    /// Read a lorebook's use; `key` is an id or a name only it has.
    pub fn of(conn: &Connection, key: &str) -> Result<Self, StoreError> {
        let (id, name) = resolve(conn, key)?;
        let (entries, card) = crate::interop::library::lorebook_contents(conn, &id)?;
        let mut bound: Vec<String> =
            super::authoring::holding_lorebook(conn, &id)?.into_iter().map(|(kind, _, name)| format!("{kind} {name:?}")).collect();
        bound.extend(crate::character::holding_lorebook(conn, &id)?.into_iter().map(|(_, name)| format!("character {name:?}")));
        for character in crate::companion::records::chats_with_lorebook(conn, &id)? {
            let who = crate::character::get(conn, &character)?.map_or(character, |c| c.name);
            bound.push(format!("the chat with {who:?}"));
        }
        if let Some(character) = card {
            let who = crate::character::get(conn, &character)?.map_or(character, |c| c.name);
            bound.push(format!("the card of {who:?}"));
        }
        Ok(Self { id, name, entries, bound })
    }

    /// Whether deleting it would take nothing with it: no entries, attached nowhere.
    pub fn is_empty(&self) -> bool {
        self.entries == 0 && self.bound.is_empty()
    }

    /// What deleting it does, in words: `also deletes its 3 entries and detaches it from
    /// world "Eldoria"`.
    pub fn consequences(&self) -> String {
        let entries = match self.entries {
            0 => None,
            1 => Some("also deletes its one entry".to_string()),
            n => Some(format!("also deletes its {n} entries")),
        };
        let detaches = (!self.bound.is_empty()).then(|| format!("detaches it from {}", self.bound.join(", ")));
        match (entries, detaches) {
            (Some(e), Some(d)) => format!("{e} and {d}"),
            (Some(e), None) => e,
            (None, Some(d)) => format!("also {d}"),
            (None, None) => "takes nothing with it".into(),
        }
    }

    /// What deleting it takes, as a deletion's impact says it.
    pub fn impact(&self) -> Impact {
        Impact { lore_entries: self.entries.min(u32::MAX as usize) as u32, detached: self.bound.clone(), ..Impact::default() }
    }
}

/// A lorebook's `(id, name)`; one that is not there (or a name several share, which names
/// their ids) is not found.
fn resolve(conn: &Connection, key: &str) -> Result<(String, String), StoreError> {
    use crate::interop::InteropError;
    crate::interop::library::resolve_lorebook(conn, key).map_err(|e| match e {
        InteropError::Store(inner) => inner,
        other => StoreError::NotFound(other.to_string()),
    })
}

/// Delete a lorebook with its entries, detached from everything it was attached to, in
/// the caller's transaction. Unless `confirmed`, a book that holds entries or is attached
/// anywhere is refused with what would go (nothing is deleted).
pub fn delete(conn: &Connection, key: &str, confirmed: bool) -> Result<LorebookUse, StoreError> {
    let found = LorebookUse::of(conn, key)?;
    if !confirmed && !found.is_empty() {
        return Err(StoreError::Invalid(format!(
            "deleting lorebook {:?} {}; nothing was deleted: say it is meant (CLI: --yes, HTTP: ?confirm=true)",
            found.name,
            found.consequences()
        )));
    }
    crate::interop::library::delete_lorebook(conn, &found.id)?;
    Ok(found)
}

/// Rename a lorebook (no other book may have the name); returns its id and new name.
pub fn rename(conn: &Connection, key: &str, name: &str) -> Result<(String, String), StoreError> {
    let (id, _) = resolve(conn, key)?;
    let name = crate::interop::library::rename_lorebook(conn, &id, name)?;
    Ok((id, name))
}
