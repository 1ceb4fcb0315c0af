//! Lore for the context envelope: the campaign's lorebooks activated with World Info
//! semantics ([`crate::lorebook::activation`]), and the per-process cache of their
//! compiled keys.
//!
//! Compiling the keys of a 5,000-entry book takes about half a second, far more than
//! the whole envelope may cost, so a [`PreparedLore`] (parsed entries plus
//! [`KeyIndex`]) is built once per set of (book, revision) and shared by every call.
//! Revisions come from triggers on the lore tables (migration `0008_scene_lore.sql`),
//! so any write to a book, by any module, makes the next call rebuild.
//!
//! The key index is compiled with SillyTavern's shipped defaults, case-insensitive and
//! whole words; entries that want otherwise say so themselves (`case_sensitive`,
//! `match_whole_words`).

use super::model::{CastMember, SceneMessage};
use crate::lorebook::activation::{
    self, ActivationOptions, ActivationState, CharacterRef, KeyIndex, Outcome, ScanEntry, ScanInput, SkipReason,
};
use crate::lorebook::{LoreEntry, Lorebook};
use crate::prompting::{BudgetItem, DroppedItem};
use crate::store::StoreError;
use rusqlite::{Connection, OptionalExtension, params};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The lorebooks of one campaign, parsed and with their keys compiled.
#[derive(Debug)]
pub struct PreparedLore {
    /// `(lorebook id, revision)` per book, in scan order: what this was built from.
    pub books: Vec<(String, i64)>,
    /// Enabled entries of every book, book after book, each with its book's settings
    /// ([`activation::with_book_settings`]: scan depth, recursion off).
    pub entries: Vec<LoreEntry>,
    /// Per entry: its book (index into `books`) and its ordinal in that book, which
    /// keys its timers (stable when other entries are switched off).
    slots: Vec<(usize, usize)>,
    index: KeyIndex,
    /// The smallest budget a book sets for itself.
    book_budget: Option<u32>,
    /// The deepest scan depth an entry asks for.
    deepest: u32,
}

/// The options the key index is compiled with; calls must use the same defaults or
/// [`activation::activate_with_index`] would recompile.
fn index_options() -> ActivationOptions<'static> {
    ActivationOptions { case_sensitive: false, match_whole_words: true, ..Default::default() }
}

/// One book to prepare: its id, revision, settings and `(ordinal, entry)` pairs.
pub type BookToPrepare = (String, i64, Lorebook, Vec<(usize, LoreEntry)>);

impl PreparedLore {
    pub fn build(books: Vec<BookToPrepare>) -> Self {
        let mut out = PreparedLore {
            books: Vec::new(),
            entries: Vec::new(),
            slots: Vec::new(),
            index: KeyIndex::build(std::iter::empty(), &index_options()),
            book_budget: None,
            deepest: 0,
        };
        for (book_index, (id, revision, book, entries)) in books.into_iter().enumerate() {
            out.books.push((id, revision));
            if let Some(budget) = activation::smallest_book_budget([&book]) {
                out.book_budget = Some(out.book_budget.map_or(budget, |b: u32| b.min(budget)));
            }
            for (ordinal, entry) in entries {
                let entry = activation::with_book_settings(&book, &entry).into_owned();
                out.deepest = out.deepest.max(entry.scan_depth.unwrap_or(0));
                out.entries.push(entry);
                out.slots.push((book_index, ordinal));
            }
        }
        out.index = KeyIndex::build(out.entries.iter(), &index_options());
        out
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries as activation takes them.
    pub fn scan_entries(&self) -> Vec<ScanEntry<'_>> {
        self.entries
            .iter()
            .zip(&self.slots)
            .map(|(entry, (book, ordinal))| ScanEntry { book: &self.books[*book].0, index: *ordinal, entry })
            .collect()
    }
}

/// Prepared lore per library and (book, revision) list, most recently used last.
type CacheKey = (PathBuf, Vec<(String, i64)>);
static CACHE: Mutex<Vec<(CacheKey, Arc<PreparedLore>)>> = Mutex::new(Vec::new());
/// Campaigns' lore sets kept at once; a workbench rarely has more scenes open.
const CACHE_SLOTS: usize = 8;
static BUILDS: AtomicU64 = AtomicU64::new(0);

/// How many [`PreparedLore`] this process has built (tests check the cache with it).
pub fn builds() -> u64 {
    BUILDS.load(Ordering::Relaxed)
}

fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

/// The lore of a campaign — its own lorebooks, its world's, and those of the characters
/// cast in it (their cards' own books and the books attached to them) — from the cache
/// when no book changed since it was prepared. Costs a few small queries on a hit.
pub fn campaign_lore(conn: &Connection, campaign_id: &str) -> Result<Arc<PreparedLore>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT lorebook_id FROM campaign_lorebooks WHERE campaign_id = ?1
         UNION
         SELECT wl.lorebook_id FROM world_lorebooks wl JOIN campaigns c ON c.world_id = wl.world_id WHERE c.id = ?1",
    )?;
    let mut ids: std::collections::BTreeSet<String> = stmt.query_map([campaign_id], |r| r.get(0))?.collect::<Result<_, _>>()?;
    // Cards' own books: their budget, scan depth and recursion setting change nothing
    // (SillyTavern copies only their entries).
    let mut card_books = std::collections::HashSet::new();
    for character in super::authoring::cast_of(conn, campaign_id)? {
        let own = crate::interop::library::books_of_character(conn, &character)?;
        card_books.extend(own.iter().cloned());
        ids.extend(own);
        ids.extend(crate::character::lorebooks(conn, &character)?);
    }
    let mut revision = conn.prepare_cached("SELECT revision FROM lorebook_revisions WHERE lorebook_id = ?1")?;
    let mut books: Vec<(String, i64)> = Vec::with_capacity(ids.len());
    for id in ids {
        let r: Option<i64> = revision.query_row([&id], |r| r.get(0)).optional()?;
        books.push((id, r.unwrap_or(0)));
    }
    let key: CacheKey = (conn.path().map(PathBuf::from).unwrap_or_default(), books);
    {
        let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = cache.iter().position(|(k, _)| *k == key) {
            let hit = cache.remove(at);
            let prepared = hit.1.clone();
            cache.push(hit);
            return Ok(prepared);
        }
    }
    // Built outside the lock: another campaign's call need not wait half a second.
    let mut books = Vec::new();
    for (id, revision) in &key.1 {
        let (mut book, entries) = crate::interop::library::enabled_entries(conn, id)?;
        if card_books.contains(id) {
            book = book.as_card_book();
        }
        books.push((id.clone(), *revision, book, entries));
    }
    let prepared = Arc::new(PreparedLore::build(books));
    BUILDS.fetch_add(1, Ordering::Relaxed);
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    cache.retain(|(k, _)| *k != key);
    cache.push((key, prepared.clone()));
    let excess = cache.len().saturating_sub(CACHE_SLOTS);
    cache.drain(..excess);
    Ok(prepared)
}

/// One call's view of the scene for activation.
pub struct LoreCall<'a> {
    /// The history, oldest first (only the last messages are scanned).
    pub messages: &'a [SceneMessage],
    /// The number of the message this call leads to: timers count in message numbers.
    pub message_number: u64,
    /// The character the prompt is for (`None`: the Director, no character filters).
    pub character: Option<&'a CastMember>,
    pub persona: Option<&'a str>,
    pub scenario: Option<&'a str>,
    /// Messages scanned by entries that do not set their own depth.
    pub scan_depth: u32,
    /// The lore section's tokens (the book's own budget applies if smaller).
    pub budget: Option<u32>,
    /// Seed of probability and group rolls: the same scene rolls the same way on replay.
    pub seed: u64,
    /// The call's cancel flag: a cancelled round stops checking keys.
    pub cancel: Option<&'a std::sync::atomic::AtomicBool>,
    /// The memory bank, whose embedder measures how close `vectorized` entries are to
    /// the recent messages (`None`: such entries fire by their keys only).
    pub bank: Option<&'a crate::memory::MemoryBank>,
    /// What macros in keys stand for in this call (`None`: keys match as written).
    pub macros: Option<&'a crate::prompting::MacroContext<'a>>,
}

/// Activated lore as budget items, and the entries that matched but were held back.
#[derive(Debug, Clone, Default)]
pub struct LoreActivation {
    pub items: Vec<BudgetItem>,
    pub held_back: Vec<DroppedItem>,
    /// Where each item (by id) goes in the prompt: its entry's position, depth and role.
    pub places: BTreeMap<String, LorePlace>,
}

pub use crate::lorebook::LorePlace;

/// The `vectorized` entries close in meaning to the scanned messages, with their cosine
/// similarity (at least [`crate::memory::curate::LORE_SIMILARITY_THRESHOLD`]). Nothing when no
/// entry is vectorized, or the embedder cannot run (such entries then fire by keys only).
fn similar_entries(entries: &[activation::ScanEntry<'_>], texts: &[String], bank: Option<&crate::memory::MemoryBank>) -> Vec<(usize, f32)> {
    let (Some(bank), false) = (bank, texts.is_empty()) else { return Vec::new() };
    let recent = texts.iter().rev().take(2).rev().cloned().collect::<Vec<_>>().join("\n");
    bank.vector_activated(entries, &recent).unwrap_or_else(|e| {
        tracing::debug!(error = %e, "vectorized lore fires by keys only");
        Vec::new()
    })
}

/// Activate the prepared lore for one call, advancing `state`'s timers.
pub fn activate(lore: &PreparedLore, call: &LoreCall<'_>, state: &mut ActivationState) -> LoreActivation {
    if lore.is_empty() {
        return LoreActivation::default();
    }
    let count = |text: &str| crate::llm::tokens::estimate(text);
    let budget = match (call.budget, lore.book_budget) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let expand = call.macros.map(|ctx| move |key: &str| crate::prompting::expand(key, ctx).text);
    let options = ActivationOptions {
        scan_depth: call.scan_depth,
        token_budget: budget,
        count_tokens: &count,
        seed: call.seed,
        cancel: call.cancel,
        macros: expand.as_ref().map(|f| f as &dyn Fn(&str) -> String),
        ..index_options()
    };
    let deepest = call.scan_depth.max(lore.deepest) as usize;
    let start = call.messages.len().saturating_sub(deepest);
    let texts: Vec<String> = call.messages[start..].iter().map(|m| format!("{}: {}", m.speaker, m.content)).collect();
    let sheet = |field: &str| call.character.and_then(|c| c.sheet.get(field)).map(String::as_str);
    let input = ScanInput {
        messages: texts.iter().map(String::as_str).collect(),
        message_number: call.message_number,
        persona_description: call.persona,
        character_description: sheet("description"),
        character_personality: sheet("personality"),
        character_depth_prompt: call.character.map(|c| c.depth_prompt.as_str()).filter(|t| !t.trim().is_empty()),
        creator_notes: call.character.map(|c| c.creator_notes.as_str()).filter(|t| !t.trim().is_empty()),
        scenario: sheet("scenario").or(call.scenario),
        character: call.character.map(|c| CharacterRef { name: &c.name, tags: c.tags.iter().map(String::as_str).collect() }),
        ..Default::default()
    };
    let entries = lore.scan_entries();
    let input = ScanInput { similar: similar_entries(&entries, &texts, call.bank), ..input };
    let report = activation::activate_with_index(&entries, &lore.index, &input, state, &options);

    let label = |i: usize| entries.get(i).map(|e| e.entry.label()).unwrap_or_default();
    let mut out = LoreActivation::default();
    for activated in &report.activated {
        let Some(scan) = entries.get(activated.index) else { continue };
        let Some(Outcome::Activated { trigger, .. }) = report.outcomes.get(activated.index) else { continue };
        let content = scan.entry.decorators().1.trim().to_string();
        if content.is_empty() {
            continue;
        }
        // Higher priority, then higher order, is worth more: what SillyTavern budgets first.
        let value = scan.entry.priority.unwrap_or(0) as f64 * 1e6 + scan.entry.insertion_order as f64;
        // Two entries of one label fired by one key keep a place each (see `distinct_id`).
        let id = crate::lorebook::distinct_id(format!("lore {} ({})", label(activated.index), trigger.reason(&label)), |id| out.places.contains_key(id));
        out.places.insert(id.clone(), LorePlace::of(scan.entry));
        out.items.push(BudgetItem {
            id,
            tokens: count(&content),
            text: content,
            value,
        });
    }
    for (i, outcome) in report.outcomes.iter().enumerate() {
        let Outcome::Skipped { skip } = outcome else { continue };
        let Some(reason) = held_back(skip, &label) else { continue };
        out.held_back.push(DroppedItem { id: format!("lore {}", label(i)), tokens: count(&entries[i].entry.content), reason });
    }
    out
}

/// The ledger's reason for an entry that matched (or was due) but did not go in;
/// `None` for entries that simply did not match, which would drown the ledger.
fn held_back(skip: &SkipReason, label: &dyn Fn(usize) -> String) -> Option<String> {
    match skip {
        // Entries that never matched are not "held back": the ledger lists the rest.
        SkipReason::Disabled
        | SkipReason::DecoratorDontActivate
        | SkipReason::Trigger { .. }
        | SkipReason::CharacterFilter { .. }
        | SkipReason::NoKeys
        | SkipReason::NoKeyMatched => None,
        other => Some(other.describe(label)),
    }
}

/// A stable seed from a scene id (FNV-1a), so rolls repeat for the same scene.
pub fn seed_for(scene_id: &str) -> u64 {
    scene_id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// The scene's lore timers (empty before the first round).
pub fn load_state(conn: &Connection, scene_id: &str) -> Result<ActivationState, StoreError> {
    use rusqlite::OptionalExtension;
    let json: Option<String> =
        conn.query_row("SELECT state_json FROM scene_lore_state WHERE scene_id = ?1", [scene_id], |r| r.get(0)).optional()?;
    match json {
        Some(json) => serde_json::from_str(&json).map_err(|e| corrupt("lore timers", e)),
        None => Ok(ActivationState::default()),
    }
}

/// Store the scene's lore timers (called by the round-close transaction).
pub fn save_state(conn: &Connection, scene_id: &str, round: u32, state: &ActivationState) -> Result<(), StoreError> {
    let json = serde_json::to_string(state).map_err(|e| corrupt("lore timers", e))?;
    conn.execute(
        "INSERT INTO scene_lore_state(scene_id, state_json, round) VALUES (?1, ?2, ?3)
         ON CONFLICT(scene_id) DO UPDATE SET state_json = excluded.state_json, round = excluded.round",
        params![scene_id, json, round],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lorebook::EntryId;
    use crate::scene::model::MessageKind;

    fn entry(id: i64, keys: &str, content: &str) -> LoreEntry {
        LoreEntry {
            id: Some(EntryId::Number(id)),
            comment: format!("E{id}"),
            keys: keys.split('|').filter(|k| !k.is_empty()).map(str::to_string).collect(),
            content: content.to_string(),
            enabled: true,
            ..Default::default()
        }
    }

    fn with(mut e: LoreEntry, change: impl FnOnce(&mut LoreEntry)) -> LoreEntry {
        change(&mut e);
        e
    }

    fn messages(texts: &[&str]) -> Vec<SceneMessage> {
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| SceneMessage {
                number: i as u32 + 1,
                round: 1,
                kind: MessageKind::User,
                character_id: None,
                speaker: "Juno".into(),
                content: t.to_string(),
            })
            .collect()
    }

    fn prepared(entries: Vec<LoreEntry>, book: Lorebook) -> PreparedLore {
        PreparedLore::build(vec![("book".into(), 1, book, entries.into_iter().enumerate().collect())])
    }

    /// One case: entries, chat, budget; the ids kept (in order) and the reasons held.
    struct Case {
        name: &'static str,
        entries: Vec<LoreEntry>,
        book: Lorebook,
        chat: &'static [&'static str],
        budget: Option<u32>,
        kept: &'static [&'static str],
        held: &'static [(&'static str, &'static str)],
    }

    /// An entry for characters tagged `smuggler` fires for a cast member whose card has
    /// the tag, and not for one without it.
    #[test]
    fn character_tag_filters_see_the_cards_tags() {
        let lore = prepared(
            vec![with(entry(1, "crate", "Smugglers know the crate's false bottom."), |e| e.character_filter.tags = vec!["smuggler".into()])],
            Lorebook::default(),
        );
        let chat = messages(&["Open the crate."]);
        let member = |tags: Vec<String>| CastMember {
            id: "c".into(),
            name: "Tessa".into(),
            sheet: Default::default(),
            active: true,
            state: Default::default(),
            muted: false,
            tags,
            creator_notes: "Tested with small models.".into(),
            depth_prompt: "Remember the lighthouse.".into(),
        };
        let fired = |m: &CastMember| {
            let call = LoreCall { messages: &chat, message_number: 2, character: Some(m), persona: None, scenario: None, scan_depth: 2, budget: None, seed: 7, cancel: None, bank: None, macros: None };
            activate(&lore, &call, &mut ActivationState::default()).items.len()
        };
        assert_eq!(fired(&member(vec!["clerk".into(), "smuggler".into()])), 1);
        assert_eq!(fired(&member(vec!["clerk".into()])), 0);
        // Entries that opt in match the card's creator's notes and Character's Note.
        let lore = prepared(
            vec![
                with(entry(1, "tested", "n"), |e| e.match_sources.creator_notes = true),
                with(entry(2, "lighthouse", "d"), |e| e.match_sources.character_depth_prompt = true),
                entry(3, "tested", "x"),
            ],
            Lorebook::default(),
        );
        let call = LoreCall { messages: &chat, message_number: 2, character: Some(&member(Vec::new())), persona: None, scenario: None, scan_depth: 2, budget: None, seed: 7, cancel: None, bank: None, macros: None };
        let texts: Vec<String> = activate(&lore, &call, &mut ActivationState::default()).items.into_iter().map(|i| i.text).collect();
        assert_eq!(texts, ["n", "d"]);
    }

    #[test]
    fn activation_in_the_envelope_says_why_each_entry_went_in_or_stayed_out() {
        let long = "word ".repeat(40);
        let cases = vec![
            Case {
                name: "plain key, case-insensitive by default; constant always",
                entries: vec![entry(1, "Lantern", "a lamp"), with(entry(2, "", "always"), |e| e.constant = true), entry(3, "tower", "t")],
                book: Lorebook::default(),
                chat: &["She lifts the LANTERN."],
                budget: None,
                kept: &["lore E1 (key \"Lantern\")", "lore E2 (constant)"],
                held: &[],
            },
            Case {
                name: "regex keys and whole words",
                entries: vec![
                    entry(1, "/lan.ern/i", "regex"),
                    with(entry(2, "ash", "whole"), |e| e.match_whole_words = Some(true)),
                    entry(3, "/([a-z/", "broken"),
                ],
                book: Lorebook::default(),
                chat: &["The lantern over the crashing waves."],
                budget: None,
                kept: &["lore E1 (key \"/lan.ern/i\")"],
                held: &[("lore E3", "regex key")],
            },
            Case {
                name: "secondary keys with NOT ANY",
                entries: vec![with(entry(1, "seal", "the seal"), |e| {
                    e.selective = true;
                    e.secondary_keys = vec!["wax".into()];
                    e.selective_logic = crate::lorebook::SelectiveLogic::NotAny;
                })],
                book: Lorebook::default(),
                chat: &["A seal of green wax."],
                budget: None,
                kept: &[],
                held: &[("lore E1", "secondary keys failed NOT ANY (found wax)")],
            },
            Case {
                name: "recursion: an activated entry's content fires another",
                entries: vec![entry(1, "fog", "The fog brings voices."), entry(2, "voices", "Never answer them.")],
                book: Lorebook::default(),
                chat: &["Fog again tonight."],
                budget: None,
                kept: &["lore E1 (key \"fog\")", "lore E2 (key \"voices\" in the lore of \"E1\")"],
                held: &[],
            },
            Case {
                name: "the book turns recursion off",
                entries: vec![entry(1, "fog", "The fog brings voices."), entry(2, "voices", "Never answer them.")],
                book: Lorebook { recursive_scanning: Some(false), ..Default::default() },
                chat: &["Fog again tonight."],
                budget: None,
                kept: &["lore E1 (key \"fog\")"],
                held: &[],
            },
            Case {
                name: "scan depth: the book's depth reaches back, an entry's own is narrower",
                entries: vec![entry(1, "harbour", "h"), with(entry(2, "council", "c"), |e| e.scan_depth = Some(1))],
                book: Lorebook { scan_depth: Some(3), ..Default::default() },
                chat: &["The harbour council met.", "Then the rain.", "Nothing more."],
                budget: None,
                kept: &["lore E1 (key \"harbour\")"],
                held: &[],
            },
            Case {
                name: "the lore budget: overflow skips the rest and says so",
                entries: vec![
                    with(entry(1, "fog", &long), |e| e.insertion_order = 10),
                    with(entry(2, "rain", &long), |e| e.insertion_order = 5),
                ],
                book: Lorebook::default(),
                chat: &["fog and rain"],
                budget: Some(60),
                kept: &["lore E1 (key \"fog\")"],
                held: &[("lore E2", "skipped by the lore budget")],
            },
            Case {
                name: "the book's own budget applies when smaller than the section's",
                entries: vec![entry(1, "fog", &long)],
                book: Lorebook { token_budget: Some(10), ..Default::default() },
                chat: &["fog"],
                budget: Some(1000),
                kept: &[],
                held: &[("lore E1", "skipped by the lore budget")],
            },
            Case {
                name: "probability zero never fires",
                entries: vec![with(entry(1, "fog", "f"), |e| {
                    e.use_probability = true;
                    e.probability = 0;
                })],
                book: Lorebook::default(),
                chat: &["fog"],
                budget: None,
                kept: &[],
                held: &[("lore E1", "probability")],
            },
            Case {
                name: "inclusion group keeps one",
                entries: vec![
                    with(entry(1, "fog", "a"), |e| {
                        e.group = "weather".into();
                        e.group_override = true;
                        e.insertion_order = 9;
                    }),
                    with(entry(2, "fog", "b"), |e| e.group = "weather".into()),
                ],
                book: Lorebook::default(),
                chat: &["fog"],
                budget: None,
                kept: &["lore E1 (key \"fog\")"],
                held: &[("lore E2", "inclusion group \"weather\": \"E1\" won")],
            },
        ];
        for case in cases {
            let lore = prepared(case.entries, case.book);
            let chat = messages(case.chat);
            let call = LoreCall {
                messages: &chat,
                message_number: chat.len() as u64 + 1,
                character: None,
                persona: None,
                scenario: None,
                scan_depth: 2,
                budget: case.budget,
                seed: 7,
                cancel: None,
                bank: None,
                macros: None,
            };
            let out = activate(&lore, &call, &mut ActivationState::default());
            let kept: Vec<&str> = out.items.iter().map(|i| i.id.as_str()).collect();
            assert_eq!(kept, case.kept, "{}", case.name);
            let held: Vec<(String, String)> = out.held_back.iter().map(|d| (d.id.clone(), d.reason.clone())).collect();
            assert_eq!(held.len(), case.held.len(), "{}: {held:?}", case.name);
            for ((id, reason), (want_id, want_reason)) in held.iter().zip(case.held) {
                assert_eq!(id, want_id, "{}", case.name);
                assert!(reason.contains(want_reason), "{}: {reason:?} should say {want_reason:?}", case.name);
            }
        }
    }

    /// A book that turns recursion off keeps it off for its own entries only: another
    /// book's entries still fire each other.
    #[test]
    fn recursion_off_in_one_book_leaves_the_others_recursive() {
        let flat = Lorebook { recursive_scanning: Some(false), ..Default::default() };
        let lore = PreparedLore::build(vec![
            ("flat".into(), 1, flat, vec![(0, entry(1, "oar", "The oar is carved from a mast.")), (1, entry(2, "mast", "m"))]),
            ("deep".into(), 1, Lorebook::default(), vec![(0, entry(3, "fog", "The fog brings voices.")), (1, entry(4, "voices", "v"))]),
        ]);
        let chat = messages(&["An oar in the fog."]);
        let call = LoreCall {
            messages: &chat,
            message_number: 2,
            character: None,
            persona: None,
            scenario: None,
            scan_depth: 2,
            budget: None,
            seed: 7,
            cancel: None,
            bank: None,
            macros: None,
        };
        let out = activate(&lore, &call, &mut ActivationState::default());
        let mut kept: Vec<&str> = out.items.iter().map(|i| i.id.as_str()).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["lore E1 (key \"oar\")", "lore E3 (key \"fog\")", "lore E4 (key \"voices\" in the lore of \"E3\")"]);
    }

    #[test]
    fn sticky_and_cooldown_carry_across_calls_through_the_state() {
        let lore = prepared(
            vec![with(entry(1, "bell", "The bell tolls."), |e| {
                e.sticky = Some(2);
                e.cooldown = Some(2);
            })],
            Lorebook::default(),
        );
        let mut state = ActivationState::default();
        let mut chat = messages(&["The bell rings."]);
        let run = |chat: &[SceneMessage], state: &mut ActivationState| {
            let call = LoreCall {
                messages: chat,
                message_number: chat.len() as u64 + 1,
                character: None,
                persona: None,
                scenario: None,
                scan_depth: 1,
                budget: None,
                seed: 0,
                cancel: None,
                bank: None,
                macros: None,
            };
            let out = activate(&lore, &call, state);
            (out.items.iter().map(|i| i.id.clone()).collect::<Vec<_>>(), out.held_back.iter().map(|d| d.reason.clone()).collect::<Vec<_>>())
        };
        assert_eq!(run(&chat, &mut state).0, vec!["lore E1 (key \"bell\")"]);
        // The state survives a store round trip, as between rounds.
        let json = serde_json::to_string(&state).unwrap();
        state = serde_json::from_str(&json).unwrap();
        chat.extend(messages(&["Quiet."]).into_iter().map(|mut m| {
            m.number = 2;
            m
        }));
        let (kept, _) = run(&chat, &mut state);
        assert!(kept[0].contains("sticky since message 2"), "{kept:?}");
        for n in 3..=4 {
            chat.push(SceneMessage { number: n, content: "The bell again.".into(), ..chat[0].clone() });
        }
        let (kept, held) = run(&chat, &mut state);
        assert!(kept.is_empty() && held[0].contains("cooling down"), "{kept:?} {held:?}");
    }

    #[test]
    fn the_cache_serves_one_index_until_a_book_changes() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path().join("lib.sqlite")).unwrap();
        let scene = crate::scene::demo::ensure(&store).unwrap().unwrap();
        let campaign = store.with(|c| crate::scene::records::load_view(c, &scene)).unwrap().campaign_id;
        let first = store.with(|c| campaign_lore(c, &campaign)).unwrap();
        let again = store.with(|c| campaign_lore(c, &campaign)).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "an unchanged book is not rebuilt");
        assert_eq!(first.entries.len(), 4);
        store
            .with(|c| {
                c.execute("UPDATE lore_entries SET enabled = 0 WHERE ordinal = 0", [])?;
                Ok(())
            })
            .unwrap();
        let changed = store.with(|c| campaign_lore(c, &campaign)).unwrap();
        assert!(!Arc::ptr_eq(&first, &changed), "an edited book is rebuilt");
        assert_eq!(changed.entries.len(), 3);
        // Timers stay keyed by ordinal whatever is switched off.
        assert_eq!(changed.scan_entries()[0].timer_key(), format!("{}/#1", changed.books[0].0));
        let settings = store.with(|c| campaign_lore(c, &campaign)).unwrap();
        assert!(Arc::ptr_eq(&changed, &settings));
        store
            .with(|c| {
                c.execute("UPDATE lorebooks SET book_json = book_json", [])?;
                Ok(())
            })
            .unwrap();
        assert!(!Arc::ptr_eq(&settings, &store.with(|c| campaign_lore(c, &campaign)).unwrap()), "book settings count too");
    }
}
