//! World Info in one-to-one chat: the lorebooks attached to the character (its card's
//! own `character_book` among them) are activated by the recent conversation with the
//! same engine the scenes use, and each fired entry says why it fired.
//!
//! Timed effects (sticky, cooldown, delay) count the messages of this chat as SillyTavern
//! counts its chat's length (the greeting is message 1, exchange `n`'s user message is
//! message `2n`), and the timers are kept per chat (`companion_lore_state`, migration
//! 0029) by the transaction that stores the exchange. A redraw of the last reply is the
//! same message again: the timers that exchange set are dropped and set anew, so a swipe
//! never advances them twice (SillyTavern drops an effect whose chat did not advance).

use super::records::{CharacterInfo, ChatTurn};
use crate::lorebook::Lorebook;
use crate::lorebook::activation::{
    self, ActivationOptions, ActivationState, CharacterRef, Outcome, ScanEntry, ScanInput, Trigger, activate,
};
use crate::memory::{MemoryKind, RetrievalHit, Scope};
use crate::store::StoreError;
use rusqlite::{Connection, OptionalExtension, params};

/// Messages scanned for keys when neither the book nor the entry says: SillyTavern's
/// default, 2 — the user's new message and the reply before it (each its own message,
/// as they are here). A migrated book fires as often, and stops as soon, as it did there.
const SCAN_DEPTH: u32 = 2;

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

/// The lorebooks that fire in a character's chat, loaded (with their library ids). A
/// card's own book keeps its budget, scan depth and recursion setting for export, but
/// they change nothing here ([`Lorebook::as_card_book`]), as in SillyTavern.
pub fn books(conn: &Connection, character_id: &str) -> Result<Vec<(String, Lorebook)>, StoreError> {
    let mut out = Vec::new();
    for (id, source) in book_ids(conn, character_id)? {
        let mut book = crate::interop::library::load_lorebook(conn, &id).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        if source == BookSource::Card {
            book = book.as_card_book();
        }
        out.push((id, book));
    }
    Ok(out)
}

/// The number of exchange `seq`'s user message in SillyTavern's count (its chat length
/// when that message is answered): the greeting is message 1.
pub fn message_number(seq: u32) -> u64 {
    2 * u64::from(seq)
}

/// The chat's lore timers as last kept. Those set at the message being drawn or later
/// belong to a draw being redone (a swipe, a regeneration) or to exchanges since deleted:
/// activation drops them as SillyTavern does (unless protected, see
/// [`activation::EntryTimer`]), so they are read whole here.
pub fn load_state(conn: &Connection, character_id: &str) -> Result<ActivationState, StoreError> {
    let json: Option<String> = conn
        .query_row("SELECT state_json FROM companion_lore_state WHERE character_id = ?1", [character_id], |r| r.get(0))
        .optional()?;
    match json {
        Some(json) => serde_json::from_str(&json).map_err(|e| StoreError::Corrupt(format!("chat lore timers: {e}"))),
        None => Ok(ActivationState::default()),
    }
}

/// Keep the chat's lore timers (called by the transaction that stores the exchange).
pub fn save_state(conn: &Connection, character_id: &str, state: &ActivationState) -> Result<(), StoreError> {
    let json = serde_json::to_string(state).map_err(|e| StoreError::Corrupt(format!("chat lore timers: {e}")))?;
    conn.execute(
        "INSERT INTO companion_lore_state(character_id, state_json) VALUES (?1, ?2)
         ON CONFLICT(character_id) DO UPDATE SET state_json = excluded.state_json",
        params![character_id, json],
    )?;
    Ok(())
}

/// What kind of draw a chat turn's reply is: entries' `triggers` name these, and a new
/// draw of the same message rolls probability and inclusion groups anew.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Generation {
    /// A reply to a new message.
    #[default]
    Normal,
    /// More of the last reply (`chat continue`): the same rolls as the draw it extends.
    Continue,
    /// A new draw of the last reply, kept as a swipe: SillyTavern's regenerate and its
    /// swipe at once, so entries triggered by either fire. `draw` (1 for the first
    /// redraw, then one more for each) seeds the new rolls.
    Regenerate { draw: u32 },
}

impl Generation {
    /// The SillyTavern generation types this draw counts as.
    pub fn triggers(self) -> &'static [&'static str] {
        match self {
            Generation::Normal => &["normal"],
            Generation::Continue => &["continue"],
            Generation::Regenerate { .. } => &["regenerate", "swipe"],
        }
    }

    /// What a new draw mixes into the rolls' seed (0: the message's own rolls).
    fn reroll(self) -> u64 {
        match self {
            Generation::Normal | Generation::Continue => 0,
            Generation::Regenerate { draw } => u64::from(draw).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        }
    }
}

/// The conversation one turn's lore is activated on.
pub struct TurnText<'a> {
    /// The user's name in this chat.
    pub user: &'a str,
    /// The exchanges before this one, oldest first.
    pub history: &'a [ChatTurn],
    /// The chat's chosen greeting as written (`None`: none). Scanned as the chat's first
    /// message while `history` reaches back to the first exchange, as SillyTavern scans
    /// its chat (the greeting is message 1: the default depth 2 reads it and the user's first message).
    pub greeting: Option<&'a str>,
    /// The user's new message.
    pub input: &'a str,
    /// The user's persona description in this chat (`None`: none), for entries that
    /// match it (`matchPersonaDescription`).
    pub persona: Option<&'a str>,
    /// This message's number ([`message_number`]): timers count in it.
    pub message_number: u64,
    /// The kind of draw: entries' triggers and the rolls' seed.
    pub generation: Generation,
    /// The chat variables before this message, for `{{getvar}}` in keys (what a key's
    /// macros would set is not kept: only the packet's macros change variables).
    pub variables: Option<&'a crate::prompting::macros::Variables>,
}

/// Activate `books` on the conversation so far and the user's new message, advancing the
/// chat's timers in `state`. Each entry activates with its own book's settings.
pub fn activate_for_turn(
    books: &[(String, Lorebook)],
    character: &CharacterInfo,
    text: &TurnText<'_>,
    state: &mut ActivationState,
    token_budget: u32,
    cancel: Option<&std::sync::atomic::AtomicBool>,
    similarity: Option<&dyn Fn(&[&str]) -> Vec<f32>>,
) -> ChatLore {
    if books.iter().all(|(_, b)| b.entries.is_empty()) {
        return ChatLore::default();
    }
    let TurnText { user, history, greeting, input, persona, message_number, generation, variables } = *text;
    let settled: Vec<(&str, usize, std::borrow::Cow<'_, crate::lorebook::LoreEntry>)> = books
        .iter()
        .flat_map(|(id, book)| {
            book.entries.iter().enumerate().map(move |(index, entry)| (id.as_str(), index, activation::with_book_settings(book, entry)))
        })
        .collect();
    let entries: Vec<ScanEntry<'_>> = settled.iter().map(|(book, index, entry)| ScanEntry { book, index: *index, entry }).collect();
    let mut messages: Vec<String> = Vec::new();
    let from_the_start = history.first().is_none_or(|t| t.seq <= 1);
    if let Some(greeting) = greeting.map(str::trim).filter(|g| from_the_start && !g.is_empty()) {
        // Its macros as the packet fills them (the greeting's own seed, no variables set).
        let macros = crate::prompting::MacroContext {
            char: &character.name,
            user,
            stable_seed: &character.id,
            random_seed: Some(crate::prompting::greeting_seed(&character.id)),
            ..Default::default()
        };
        messages.push(format!("{}: {}", character.name, crate::prompting::expand(greeting, &macros).text));
    }
    for turn in history {
        messages.push(format!("{user}: {}", turn.user_text));
        messages.push(format!("{}: {}", character.name, turn.reply));
    }
    messages.push(format!("{user}: {input}"));
    let field = |key: &str| character.sheet.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    // Entries flagged `vectorized` fire when their content is close to the message.
    let similar: Vec<(usize, f32)> = match similarity {
        Some(similarity) => {
            let scored = crate::memory::curate::vector_activated(&entries, |texts| Ok::<_, std::convert::Infallible>(similarity(texts)));
            scored.unwrap_or_else(|never| match never {})
        }
        None => Vec::new(),
    };
    let scan = ScanInput {
        similar,
        messages: messages.iter().map(String::as_str).collect(),
        message_number,
        generation: generation.triggers(),
        persona_description: persona.map(str::trim).filter(|p| !p.is_empty()),
        character_description: field("description"),
        character_personality: field("personality"),
        character_depth_prompt: character.card.depth_prompt.as_ref().map(|d| d.prompt.as_str()).filter(|p| !p.trim().is_empty()),
        scenario: field("scenario"),
        creator_notes: Some(character.card.creator_notes.as_str()).filter(|n| !n.trim().is_empty()),
        character: Some(CharacterRef { name: &character.name, tags: character.card.tags.iter().map(String::as_str).collect() }),
        ..Default::default()
    };
    // Books' own scan depth and recursion are their entries' (above); the smallest
    // budget a book sets applies to all, as in scenes.
    let budget = activation::smallest_book_budget(books.iter().map(|(_, b)| b)).map_or(token_budget, |b| b.min(token_budget));
    let mut options = ActivationOptions { scan_depth: SCAN_DEPTH, token_budget: Some(budget), cancel, ..Default::default() };
    // Rolls (probability, groups) are the same for the same chat, message and draw: a
    // regenerate rolls anew, as a SillyTavern swipe does, and a replay repeats them.
    options.seed = character.id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
        ^ scan.message_number
        ^ generation.reroll();
    // Macros in keys stand for this chat's names and values, as in the packet.
    let variables = std::cell::RefCell::new(variables.cloned().unwrap_or_default());
    let macros = crate::prompting::MacroContext {
        char: &character.name,
        user,
        description: field("description").unwrap_or(""),
        personality: field("personality").unwrap_or(""),
        scenario: field("scenario").unwrap_or(""),
        last_message: input,
        stable_seed: &character.id,
        random_seed: Some(options.seed),
        variables: Some(&variables),
        ..Default::default()
    };
    let expand = |key: &str| crate::prompting::expand(key, &macros).text;
    options.macros = Some(&expand);
    let report = activate(&entries, &scan, state, &options);
    let label = |i: usize| entries.get(i).map(|e| e.entry.label()).unwrap_or_default();
    // What the packet's lore budget keeps first: SillyTavern's budget order, sticky
    // entries then the highest insertion order (the hits stay in insertion order).
    let mut by_worth: Vec<usize> = (0..report.activated.len()).collect();
    by_worth.sort_by_key(|&k| {
        let a = &report.activated[k];
        let sticky = matches!(report.outcomes.get(a.index), Some(Outcome::Activated { trigger: Trigger::Sticky { .. }, .. }));
        let priority = entries.get(a.index).and_then(|e| e.entry.priority).unwrap_or(0);
        (!sticky, std::cmp::Reverse(a.insertion_order), std::cmp::Reverse(priority), a.index)
    });
    let mut worth = vec![0usize; report.activated.len()];
    for (place, k) in by_worth.into_iter().enumerate() {
        worth[k] = place;
    }
    let mut out = ChatLore::default();
    // Lore the activation's budget held back is said, beside the lore that fired.
    for (i, outcome) in report.outcomes.iter().enumerate() {
        if let Outcome::Skipped { skip: skip @ activation::SkipReason::Budget { .. } } = outcome {
            out.notes.push(format!("lore held back: {} ({})", label(i), skip.describe(&label)));
        }
    }
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
        // Two entries of one label fired by one key are two entries: each keeps its own
        // place (a shared id gave every one of them the last one's role and depth).
        let id = crate::lorebook::distinct_id(format!("lore {name} ({reason})"), |id| out.places.contains_key(id));
        out.places.insert(id.clone(), crate::lorebook::LorePlace::of(&entry.entry));
        out.hits.push(RetrievalHit {
            id,
            text: content,
            speaker: None,
            // World Info is placed by its own order: keep it ahead of retrieved lore.
            score: 2.0 - worth[rank] as f32 / 1000.0,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lorebook::{EntryId, LoreEntry};

    fn entry(id: i64, keys: &str, content: &str, change: impl FnOnce(&mut LoreEntry)) -> LoreEntry {
        let mut e = LoreEntry {
            id: Some(EntryId::Number(id)),
            comment: format!("E{id}"),
            keys: keys.split('|').filter(|k| !k.is_empty()).map(str::to_string).collect(),
            content: content.to_string(),
            enabled: true,
            ..Default::default()
        };
        change(&mut e);
        e
    }

    fn character() -> CharacterInfo {
        CharacterInfo { id: "c1".into(), name: "Ilse".into(), sheet: Vec::new(), card: Default::default() }
    }

    /// The fired entries' names for one message, and the timers after it.
    fn turn(books: &[(String, Lorebook)], input: &str, number: u64, state: &mut ActivationState) -> Vec<String> {
        let text = TurnText { user: "Ada", history: &[], greeting: None, persona: None, input, message_number: number, generation: Generation::Normal, variables: None };
        let lore = activate_for_turn(books, &character(), &text, state, 4096, None, None);
        lore.hits.iter().map(|h| h.id.clone()).collect()
    }

    #[test]
    fn the_highest_order_entry_is_worth_most_to_the_packet_budget() {
        let book = Lorebook {
            entries: vec![
                entry(1, "quay", "low", |e| e.insertion_order = 1),
                entry(2, "quay", "high", |e| e.insertion_order = 900),
                entry(3, "quay", "middle", |e| e.insertion_order = 50),
            ],
            ..Default::default()
        };
        let text = TurnText { user: "Ada", history: &[], greeting: None, persona: None, input: "the quay", message_number: 2, generation: Generation::Normal, variables: None };
        let lore = activate_for_turn(&[("b".into(), book)], &character(), &text, &mut ActivationState::default(), 4096, None, None);
        // Hits stay in insertion order (ascending), but are worth most by descending order.
        let by_id: Vec<(&str, f32)> = lore.hits.iter().map(|h| (h.text.as_str(), h.score)).collect();
        assert_eq!(by_id.iter().map(|(t, _)| *t).collect::<Vec<_>>(), ["low", "middle", "high"]);
        assert!(by_id[2].1 > by_id[1].1 && by_id[1].1 > by_id[0].1, "{by_id:?}");
    }

    #[test]
    fn each_entry_matches_with_its_own_book_s_settings() {
        let first = Lorebook { entries: vec![entry(1, "fog", "The fog brings voices.", |_| {}), entry(2, "voices", "v", |_| {})], ..Default::default() };
        let flat = Lorebook {
            recursive_scanning: Some(false),
            scan_depth: Some(1),
            entries: vec![entry(3, "oar", "The oar is carved from a mast.", |_| {}), entry(4, "mast", "m", |_| {}), entry(5, "rope", "r", |_| {})],
            ..Default::default()
        };
        let books = [("first".to_string(), first), ("flat".to_string(), flat)];
        let history = [ChatTurn {
            id: "t1".into(),
            character_id: "c1".into(),
            seq: 1,
            session: "s".into(),
            user_text: "A rope.".into(),
            reply: "Yes.".into(),
            at: String::new(),
            user_memory_id: None,
            reply_memory_id: None,
            proximity: crate::memory::detect::Proximity::Remote,
            packet: Default::default(),
            hits: Vec::new(),
            attempts: 1,
            prompt_tokens: 0,
            completion_tokens: 0,
            from_cache: false,
            elapsed_ms: 0,
            swipes: Vec::new(),
            swipe: 0,
            file: None,
            user_name: None,
        }];
        let text = TurnText { user: "Ada", history: &history, greeting: None, persona: None, input: "An oar in the fog.", message_number: 4, generation: Generation::Normal, variables: None };
        let lore = activate_for_turn(&books, &character(), &text, &mut ActivationState::default(), 4096, None, None);
        let mut fired: Vec<&str> = lore.hits.iter().map(|h| h.text.as_str()).collect();
        fired.sort_unstable();
        // The first book recurses; the second does not, and scans only the last message.
        assert_eq!(fired, ["The fog brings voices.", "The oar is carved from a mast.", "v"]);
    }

    #[test]
    fn the_greeting_is_scanned_as_the_chat_s_first_message() {
        let book = Lorebook { entries: vec![entry(1, "citadel", "The Citadel has nine gates.", |_| {})], ..Default::default() };
        let books = [("b".to_string(), book)];
        let fire = |greeting: Option<&str>| {
            let text = TurnText { user: "Ada", history: &[], greeting, persona: None, input: "hi", message_number: 2, generation: Generation::Normal, variables: None };
            activate_for_turn(&books, &character(), &text, &mut ActivationState::default(), 4096, None, None).hits.len()
        };
        assert_eq!(fire(Some("Welcome to the {{char}} Citadel, {{user}}.")), 1);
        assert_eq!(fire(None), 0);
    }

    #[test]
    fn triggers_follow_the_kind_of_draw_and_a_regenerate_rolls_anew() {
        let trig = |n: i64, t: &str| entry(n, "lantern", t, |e| e.triggers = vec![t.to_string()]);
        let book = Lorebook { entries: vec![trig(1, "normal"), trig(2, "continue"), trig(3, "swipe"), trig(4, "regenerate"), trig(5, "quiet")], ..Default::default() };
        let books = [("b".to_string(), book)];
        let fired = |generation: Generation| {
            let text = TurnText { user: "Ada", history: &[], greeting: None, persona: None, input: "the lantern", message_number: 2, generation, variables: None };
            let lore = activate_for_turn(&books, &character(), &text, &mut ActivationState::default(), 4096, None, None);
            let mut out: Vec<String> = lore.hits.iter().map(|h| h.text.clone()).collect();
            out.sort();
            out
        };
        assert_eq!(fired(Generation::Normal), ["normal"]);
        assert_eq!(fired(Generation::Continue), ["continue"]);
        assert_eq!(fired(Generation::Regenerate { draw: 1 }), ["regenerate", "swipe"]);

        // A 50% entry: the first draw's roll repeats, each redraw rolls its own.
        let coin = Lorebook { entries: vec![entry(1, "coin", "heads", |e| e.probability = 50)], ..Default::default() };
        let books = [("b".to_string(), coin)];
        let heads = |generation: Generation| {
            let text = TurnText { user: "Ada", history: &[], greeting: None, persona: None, input: "coin", message_number: 2, generation, variables: None };
            !activate_for_turn(&books, &character(), &text, &mut ActivationState::default(), 4096, None, None).hits.is_empty()
        };
        assert_eq!(heads(Generation::Normal), heads(Generation::Continue), "a continuation keeps the draw's rolls");
        let draws: Vec<bool> = (1..=16).map(|draw| heads(Generation::Regenerate { draw })).collect();
        assert!(draws.contains(&true) && draws.contains(&false), "redraws roll anew: {draws:?}");
        assert_eq!(draws, (1..=16).map(|draw| heads(Generation::Regenerate { draw })).collect::<Vec<_>>(), "and repeat on replay");
    }

    #[test]
    fn entries_match_the_persona_creator_notes_and_characters_note_when_they_opt_in() {
        let book = Lorebook {
            entries: vec![
                entry(1, "courier", "persona", |e| e.match_sources.persona_description = true),
                entry(2, "tested", "notes", |e| e.match_sources.creator_notes = true),
                entry(3, "lighthouse", "depth", |e| e.match_sources.character_depth_prompt = true),
                entry(4, "courier|tested|lighthouse", "none", |_| {}),
            ],
            ..Default::default()
        };
        let books = [("b".to_string(), book)];
        let mut c = character();
        c.card.creator_notes = "Tested with small models.".into();
        c.card.depth_prompt = Some(crate::character::DepthPrompt { prompt: "Remember the lighthouse.".into(), depth: 4, role: "system".into() });
        let text = TurnText { user: "Ada", history: &[], greeting: None, persona: Some("A courier."), input: "hello", message_number: 2, generation: Generation::Normal, variables: None };
        let lore = activate_for_turn(&books, &c, &text, &mut ActivationState::default(), 4096, None, None);
        let mut fired: Vec<&str> = lore.hits.iter().map(|h| h.text.as_str()).collect();
        fired.sort_unstable();
        assert_eq!(fired, ["depth", "notes", "persona"]);
    }

    #[test]
    fn the_smallest_book_budget_applies() {
        let book = |budget: Option<u32>, content: &str| Lorebook { token_budget: budget, entries: vec![entry(1, "quay", content, |_| {})], ..Default::default() };
        let books = [("a".to_string(), book(None, "short")), ("b".to_string(), book(Some(20), &"word ".repeat(40)))];
        let mut state = ActivationState::default();
        assert_eq!(turn(&books, "the quay", 2, &mut state).len(), 1, "book b's 20 tokens hold the short entry, not its own");
        let text = TurnText { user: "Ada", history: &[], greeting: None, persona: None, input: "the quay", message_number: 2, generation: Generation::Normal, variables: None };
        let lore = activate_for_turn(&books, &character(), &text, &mut ActivationState::default(), 4096, None, None);
        assert!(lore.notes.iter().any(|n| n.starts_with("lore held back: E1 (skipped by the lore budget")), "{:?}", lore.notes);
    }

    #[test]
    fn char_and_user_in_keys_are_this_chat_s_names() {
        let book = Lorebook { entries: vec![entry(1, "{{char}}", "c", |_| {}), entry(2, "{{user}}", "u", |_| {}), entry(3, "{{char}}'s oar", "o", |_| {})], ..Default::default() };
        let books = [("b".to_string(), book)];
        let fired = turn(&books, "Ada hands Ilse the oar.", 2, &mut ActivationState::default());
        assert_eq!(fired.len(), 2, "{fired:?}");
        assert!(fired[0].contains("E1") && fired[1].contains("E2"), "{fired:?}");
    }

    #[test]
    fn sticky_and_cooldown_count_chat_messages() {
        let book = Lorebook {
            entries: vec![entry(1, "bell", "b", |e| e.sticky = Some(3)), entry(2, "horn", "h", |e| e.cooldown = Some(4))],
            ..Default::default()
        };
        let books = [("b".to_string(), book)];
        let mut state = ActivationState::default();
        assert_eq!(turn(&books, "bell and horn", message_number(1), &mut state).len(), 2);
        let second = turn(&books, "the horn again", message_number(2), &mut state);
        assert_eq!(second.len(), 1);
        // As in SillyTavern: sticky 3 set at length 2 holds length 4 only; cooldown 4 set
        // at length 2 ends at 6, where the horn fires again and cools down anew.
        assert!(second[0].contains("sticky since message 2, until 4"), "{second:?}");
        let third = turn(&books, "horn", message_number(3), &mut state);
        assert!(third.len() == 1 && third[0].contains("E2"), "bell unstuck, horn cooled down: {third:?}");
        assert!(turn(&books, "horn", message_number(4), &mut state).is_empty(), "horn cooling down until 9");
    }
}
