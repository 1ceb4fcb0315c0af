//! World Info in one-to-one chat: the lorebooks attached to the character (its card's
//! own `character_book` among them) are activated by the recent conversation with the
//! same engine the scenes use, and each fired entry says why it fired.
//!
//! Timed effects (sticky, cooldown, delay) count messages of this chat, but are not yet
//! kept between turns: each turn starts from a fresh activation state.

use super::records::{CharacterInfo, ChatTurn};
use crate::lorebook::Lorebook;
use crate::lorebook::activation::{ActivationOptions, ActivationState, CharacterRef, Outcome, ScanInput, activate, book_entries};
use crate::memory::{MemoryKind, RetrievalHit, Scope};
use crate::store::StoreError;
use rusqlite::Connection;

/// Messages scanned for keys when the book does not say (SillyTavern's default is 2;
/// an exchange here is two messages).
const SCAN_DEPTH: u32 = 4;

/// What fired for one turn: hits for the packet's lore block (budgeted with it), and one
/// line per fired entry with its reason for the packet's notes.
#[derive(Debug, Clone, Default)]
pub struct ChatLore {
    pub hits: Vec<RetrievalHit>,
    pub notes: Vec<String>,
    /// Where each fired entry (by hit id) goes in the packet.
    pub places: std::collections::BTreeMap<String, crate::lorebook::LorePlace>,
}

/// Where a lorebook in a chat comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BookSource {
    /// The character's card's own `character_book`.
    Card,
    /// Attached to the character (fires in its scenes too).
    Character,
    /// Attached to this chat only.
    Chat,
}

/// The ids of the lorebooks that fire in a character's chat, each once, with where it
/// comes from: the card's own book, then those attached to the character, then to the chat.
pub fn book_ids(conn: &Connection, character_id: &str) -> Result<Vec<(String, BookSource)>, StoreError> {
    let mut out: Vec<(String, BookSource)> = Vec::new();
    let sources = [
        (crate::interop::library::books_of_character(conn, character_id)?, BookSource::Card),
        (crate::character::lorebooks(conn, character_id)?, BookSource::Character),
        (super::records::chat_lorebooks(conn, character_id)?, BookSource::Chat),
    ];
    for (ids, source) in sources {
        for id in ids {
            if !out.iter().any(|(known, _)| *known == id) {
                out.push((id, source));
            }
        }
    }
    Ok(out)
}

/// The lorebooks that fire in a character's chat, loaded (with their library ids).
pub fn books(conn: &Connection, character_id: &str) -> Result<Vec<(String, Lorebook)>, StoreError> {
    let mut out = Vec::new();
    for (id, _) in book_ids(conn, character_id)? {
        let book = crate::interop::library::load_lorebook(conn, &id).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        out.push((id, book));
    }
    Ok(out)
}

/// Activate `books` on the conversation so far and the user's new message.
pub fn activate_for_turn(
    books: &[(String, Lorebook)],
    character: &CharacterInfo,
    user: &str,
    history: &[ChatTurn],
    input: &str,
    token_budget: u32,
    cancel: Option<&std::sync::atomic::AtomicBool>,
    similarity: Option<&dyn Fn(&[&str]) -> Vec<f32>>,
) -> ChatLore {
    if books.iter().all(|(_, b)| b.entries.is_empty()) {
        return ChatLore::default();
    }
    let entries: Vec<_> = books.iter().flat_map(|(id, book)| book_entries(id, book)).collect();
    let mut messages: Vec<String> = Vec::new();
    for turn in history {
        messages.push(format!("{user}: {}", turn.user_text));
        messages.push(format!("{}: {}", character.name, turn.reply));
    }
    messages.push(format!("{user}: {input}"));
    let field = |key: &str| character.sheet.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    // Entries flagged `vectorized` fire when their content is close to the message.
    let vectorized: Vec<usize> = entries.iter().enumerate().filter(|(_, e)| e.entry.vectorized && e.entry.enabled).map(|(i, _)| i).collect();
    let similar: Vec<(usize, f32)> = match similarity {
        Some(similarity) if !vectorized.is_empty() => {
            let texts: Vec<&str> = vectorized.iter().map(|&i| entries[i].entry.content.as_str()).collect();
            vectorized.iter().copied().zip(similarity(&texts)).filter(|(_, s)| *s >= crate::memory::curate::LORE_SIMILARITY_THRESHOLD).collect()
        }
        _ => Vec::new(),
    };
    let scan = ScanInput {
        similar,
        messages: messages.iter().map(String::as_str).collect(),
        message_number: messages.len() as u64,
        character_description: field("description"),
        character_personality: field("personality"),
        scenario: field("scenario"),
        character: Some(CharacterRef { name: &character.name, tags: character.card.tags.iter().map(String::as_str).collect() }),
        ..Default::default()
    };
    let mut options = ActivationOptions { scan_depth: SCAN_DEPTH, token_budget: Some(token_budget), cancel, ..Default::default() };
    if let Some((_, first)) = books.first() {
        options = options.with_book(first);
    }
    // Rolls (probability, groups) are the same for the same chat and message.
    options.seed = character.id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
        ^ scan.message_number;
    let report = activate(&entries, &scan, &mut ActivationState::default(), &options);
    let label = |i: usize| entries.get(i).map(|e| e.entry.label()).unwrap_or_default();
    let mut out = ChatLore::default();
    for (rank, activated) in report.activated.iter().enumerate() {
        let Some(entry) = entries.get(activated.index) else { continue };
        let Some(Outcome::Activated { trigger, .. }) = report.outcomes.get(activated.index) else { continue };
        let content = entry.entry.decorators().1.trim().to_string();
        if content.is_empty() {
            continue;
        }
        let name = label(activated.index);
        let reason = trigger.reason(&label);
        out.notes.push(format!("lore fired: {name} ({reason})"));
        let id = format!("lore {name} ({reason})");
        out.places.insert(id.clone(), crate::lorebook::LorePlace::of(&entry.entry));
        out.hits.push(RetrievalHit {
            id,
            text: content,
            speaker: None,
            // World Info is placed by its own order: keep it ahead of retrieved lore.
            score: 2.0 - rank as f32 / 1000.0,
            keyword_score: None,
            vector_score: None,
            rank: rank + 1,
            keyword_rank: None,
            vector_rank: None,
            kind: MemoryKind::Lore,
            scope: Scope::character(character.id.clone()),
            session: None,
            time: None,
            pinned: false,
            edited: false,
        });
    }
    out
}
