//! The lorebook model: books of entries that are injected into prompts when their keys
//! appear in recent text.
//!
//! One model serves every source. SillyTavern World Info, the `character_book` of
//! Character Cards V2/V3 and standalone `lorebook_v3` files all map onto [`Lorebook`] and
//! [`LoreEntry`] with every activation setting as a typed field, so the scene engine's
//! activation code reads one shape whatever was imported. Field names follow
//! SillyTavern's meaning (its World Info engine is the reference for the semantics);
//! the doc comment of each field says how it behaves.
//!
//! Invariant: nothing read from a file is thrown away. Settings with no typed field stay
//! in `extensions` (the spec's own escape hatch) or `extra` (unknown fields), and the
//! document each entry was read from is kept in `source`, so that exporting in the same
//! format gives the same document back (see `crate::interop`).
//!
//! `{{char}}`, `{{user}}` and other macros are kept exactly as written; they are
//! resolved when a prompt is built, never here.

pub mod activation;
mod decorators;

pub use decorators::{Decorator, split_decorators};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A lorebook: book-wide scan settings and its entries, in file order.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Lorebook {
    /// The name the document gives itself (`None` when it has none, like World Info
    /// files whose name is their file name; the library then names the book).
    pub name: Option<String>,
    pub description: Option<String>,
    /// How many recent messages are scanned for keys (`None`: the engine's default).
    pub scan_depth: Option<u32>,
    /// Token budget for this book's entries (`None`: the engine's lore budget).
    pub token_budget: Option<u32>,
    /// Whether activated entries' content is scanned again for keys.
    pub recursive_scanning: Option<bool>,
    /// Book-level `extensions`, kept whole.
    pub extensions: Map<String, Value>,
    pub entries: Vec<LoreEntry>,
    /// Unknown book-level fields of the source document, written back on export.
    pub extra: Map<String, Value>,
    /// The book-level part of the document this book was read from (entries removed).
    pub source: Option<SourceDocument>,
}

impl Lorebook {
    /// This book as it fires when it is a card's own (`character_book`): SillyTavern copies
    /// only a card book's entries into its World Info, so the book's `scan_depth`,
    /// `token_budget` and `recursive_scanning` change nothing (the global settings apply).
    /// They are kept in the library for export; only the activated copy drops them.
    pub fn as_card_book(mut self) -> Self {
        self.scan_depth = None;
        self.token_budget = None;
        self.recursive_scanning = None;
        self
    }
}

/// The exact JSON an item was read from, and in which shape, so an export in that
/// shape can write back everything that was not changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceDocument {
    pub format: SourceFormat,
    pub json: Value,
}

/// The shapes a lorebook or entry can be read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceFormat {
    /// SillyTavern World Info: `{"entries": {"<uid>": {...}}}` with camelCase fields.
    WorldInfo,
    /// The `character_book` object of a V2/V3 card (entries in an array, settings
    /// beyond the spec under `extensions` in snake_case).
    CharacterBook,
    /// `{"spec": "lorebook_v3", "data": <character book>}`.
    LorebookV3,
}

/// An entry's identity inside its book: World Info's numeric `uid`, a card entry's `id`
/// (a number in V2, a string or a number in V3).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EntryId {
    Number(i64),
    Text(String),
}

impl std::fmt::Display for EntryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EntryId::Number(n) => write!(f, "{n}"),
            EntryId::Text(t) => f.write_str(t),
        }
    }
}

/// One lore entry with every activation setting of SillyTavern World Info and of the
/// V2/V3 character book.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LoreEntry {
    /// World Info `uid` / card `id`.
    pub id: Option<EntryId>,
    /// Card entries' `name` (AgnAI, Risu); not used in prompts.
    pub name: Option<String>,
    /// Title / memo shown in editors; not used in prompts.
    pub comment: String,
    /// The text injected when the entry fires. May start with V3 `@@decorator` lines
    /// (see [`LoreEntry::decorators`]) and contain macros, both kept as written.
    pub content: String,

    // --- Matching -------------------------------------------------------------------
    /// Primary keys: any one found in the scanned text fires the entry. A key written
    /// `/pattern/flags` is a regular expression (SillyTavern), whatever `use_regex` says.
    pub keys: Vec<String>,
    /// Optional filter keys, combined with the primary match by `selective_logic`.
    pub secondary_keys: Vec<String>,
    /// Whether `secondary_keys` apply (SillyTavern treats every entry as selective; V2
    /// cards say `selective: true` to enable the secondary keys).
    pub selective: bool,
    pub selective_logic: SelectiveLogic,
    /// V3 `use_regex`: every key (primary and secondary) is a regular expression.
    pub use_regex: bool,
    /// `None`: the engine's global setting.
    pub case_sensitive: Option<bool>,
    /// `None`: the engine's global setting.
    pub match_whole_words: Option<bool>,
    /// Messages scanned for this entry (`None`: the book's, then the engine's depth).
    pub scan_depth: Option<u32>,
    /// Extra text this entry's keys are also matched against.
    pub match_sources: MatchSources,
    /// Generation types that may fire the entry (`normal`, `continue`, `impersonate`,
    /// `swipe`, `regenerate`, `quiet`); empty means all.
    pub triggers: Vec<String>,
    /// Only for (or, with `is_exclude`, never for) these characters / tags.
    pub character_filter: CharacterFilter,

    // --- Activation -----------------------------------------------------------------
    /// `false` never fires, whatever else is set (World Info `disable`, card `enabled`).
    pub enabled: bool,
    /// Always fires (within the budget) without any key.
    pub constant: bool,
    /// Retrieved by embedding similarity instead of keys (SillyTavern's vector lore).
    pub vectorized: bool,
    /// Chance, 0–100, that a matched entry is actually inserted.
    pub probability: u32,
    /// Whether `probability` is rolled at all.
    pub use_probability: bool,

    // --- Recursion ------------------------------------------------------------------
    /// Cannot be fired by other entries' content (only by the chat itself).
    pub exclude_recursion: bool,
    /// Its content is not scanned to fire other entries.
    pub prevent_recursion: bool,
    /// Fires only during recursion passes at this level or later (0: not delayed;
    /// SillyTavern's `true` is level 1).
    pub delay_until_recursion: u32,

    // --- Placement ------------------------------------------------------------------
    /// Insertion order: SillyTavern `order`, card `insertion_order`. Entries with a
    /// higher value are inserted closer to the end of their position (more weight);
    /// ties are broken by the engine.
    pub insertion_order: i64,
    /// Card `priority` (AgnAI): when the budget runs out, lower priority goes first.
    pub priority: Option<i64>,
    pub position: InsertionPosition,
    /// For [`InsertionPosition::AtDepth`]: how many messages from the end.
    pub depth: u32,
    /// For [`InsertionPosition::AtDepth`]: the role of the injected message.
    pub role: PromptRole,
    /// For [`InsertionPosition::Outlet`]: the outlet's name.
    pub outlet_name: String,

    // --- Inclusion groups -----------------------------------------------------------
    /// Comma-separated inclusion groups (see [`LoreEntry::groups`]): of the entries of a
    /// group that fire together, only one is inserted.
    pub group: String,
    /// Group priority: this entry wins its group outright (highest order first).
    pub group_override: bool,
    /// Weight in the group's random pick.
    pub group_weight: u32,
    /// Pick group members by how many keys matched (`None`: the engine's setting).
    pub use_group_scoring: Option<bool>,

    // --- Timed effects (in messages) -------------------------------------------------
    /// Once fired, stays active for this many messages.
    pub sticky: Option<u32>,
    /// After firing (or after its sticky period), cannot fire for this many messages.
    pub cooldown: Option<u32>,
    /// Cannot fire before the chat has this many messages.
    pub delay: Option<u32>,

    // --- Budget and bookkeeping -------------------------------------------------------
    /// Inserted even when the lore budget is exhausted, and not counted against it.
    pub ignore_budget: bool,
    /// SillyTavern's Quick Reply automation id, run when the entry fires.
    pub automation_id: String,
    /// Editor-only: SillyTavern shows the memo field.
    pub add_memo: bool,
    /// Editor-only: manual sort position in SillyTavern's list.
    pub display_index: Option<i64>,

    /// The entry's `extensions`, minus the settings that have typed fields above.
    pub extensions: Map<String, Value>,
    /// Unknown fields of the source entry.
    pub extra: Map<String, Value>,
    /// The entry exactly as read, for a lossless export in the same shape.
    pub source: Option<SourceDocument>,
}

impl Default for LoreEntry {
    /// SillyTavern's defaults for a new entry.
    fn default() -> Self {
        Self {
            id: None,
            name: None,
            comment: String::new(),
            content: String::new(),
            keys: Vec::new(),
            secondary_keys: Vec::new(),
            selective: true,
            selective_logic: SelectiveLogic::AndAny,
            use_regex: false,
            case_sensitive: None,
            match_whole_words: None,
            scan_depth: None,
            match_sources: MatchSources::default(),
            triggers: Vec::new(),
            character_filter: CharacterFilter::default(),
            enabled: true,
            constant: false,
            vectorized: false,
            probability: 100,
            use_probability: true,
            exclude_recursion: false,
            prevent_recursion: false,
            delay_until_recursion: 0,
            insertion_order: 100,
            priority: None,
            position: InsertionPosition::BeforeCharacter,
            depth: DEFAULT_DEPTH,
            role: PromptRole::System,
            outlet_name: String::new(),
            group: String::new(),
            group_override: false,
            group_weight: DEFAULT_GROUP_WEIGHT,
            use_group_scoring: None,
            sticky: None,
            cooldown: None,
            delay: None,
            ignore_budget: false,
            automation_id: String::new(),
            add_memo: false,
            display_index: None,
            extensions: Map::new(),
            extra: Map::new(),
            source: None,
        }
    }
}

/// Where an activated entry goes in a prompt (its position, depth and role), kept by
/// the prompt builders beside the entry's text.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LorePlace {
    pub position: InsertionPosition,
    pub depth: u32,
    pub role: PromptRole,
    /// The entry's `ignore_budget`: it goes in whole even when the prompt's lore budget
    /// is spent, and is not counted against it (SillyTavern sends such entries always).
    #[serde(default)]
    pub ignore_budget: bool,
    /// For [`InsertionPosition::Outlet`]: the outlet whose `{{outlet::Name}}` takes it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub outlet: String,
}

impl LorePlace {
    pub fn of(entry: &LoreEntry) -> Self {
        Self {
            position: entry.position,
            depth: entry.depth,
            role: entry.role,
            ignore_budget: entry.ignore_budget,
            outlet: if entry.position == InsertionPosition::Outlet { entry.outlet_name.trim().to_string() } else { String::new() },
        }
    }

    /// An outlet entry: collected for `{{outlet::Name}}`, never placed where other lore goes.
    pub fn is_outlet(&self) -> bool {
        self.position == InsertionPosition::Outlet
    }
}

/// SillyTavern's default depth for `@ depth` entries.
pub const DEFAULT_DEPTH: u32 = 4;
/// SillyTavern's default inclusion-group weight.
pub const DEFAULT_GROUP_WEIGHT: u32 = 100;
/// The generation types an entry's `triggers` may name.
pub const GENERATION_TRIGGERS: [&str; 6] = ["normal", "continue", "impersonate", "swipe", "regenerate", "quiet"];

impl LoreEntry {
    /// The inclusion groups this entry belongs to (SillyTavern splits on commas).
    pub fn groups(&self) -> Vec<&str> {
        self.group.split(',').map(str::trim).filter(|g| !g.is_empty()).collect()
    }

    /// The V3 decorators at the top of `content`, and the content without them.
    pub fn decorators(&self) -> (Vec<Decorator>, &str) {
        split_decorators(&self.content)
    }

    /// Whether `probability` can keep a matched entry out.
    pub fn is_probabilistic(&self) -> bool {
        self.use_probability && self.probability < 100
    }

    /// A short label for lists: the comment, else the name, else the first keys.
    pub fn label(&self) -> String {
        if !self.comment.trim().is_empty() {
            return self.comment.trim().to_string();
        }
        if let Some(name) = self.name.as_deref().filter(|n| !n.trim().is_empty()) {
            return name.trim().to_string();
        }
        let keys = self.keys.join(", ");
        if keys.is_empty() { "(no keys)".to_string() } else { keys }
    }

    /// How the entry fires, as SillyTavern's strategy shows it: `constant`, `vectorized`
    /// (by meaning, keys or not), `keyed`, or `no keys` for one that can never fire.
    pub fn strategy(&self) -> &'static str {
        if !self.enabled {
            "disabled"
        } else if self.constant {
            "constant"
        } else if self.vectorized {
            "vectorized"
        } else if self.keys.iter().all(|k| k.trim().is_empty()) {
            "no keys"
        } else {
            "keyed"
        }
    }
}

/// How secondary keys combine with a primary match (SillyTavern `selectiveLogic`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(from = "i64", into = "i64")]
pub enum SelectiveLogic {
    /// 0: at least one secondary key is present.
    #[default]
    AndAny,
    /// 1: at least one secondary key is absent.
    NotAll,
    /// 2: no secondary key is present.
    NotAny,
    /// 3: every secondary key is present.
    AndAll,
    /// A code this build does not know, kept as it was.
    Other(i64),
}

impl From<i64> for SelectiveLogic {
    fn from(code: i64) -> Self {
        match code {
            0 => Self::AndAny,
            1 => Self::NotAll,
            2 => Self::NotAny,
            3 => Self::AndAll,
            other => Self::Other(other),
        }
    }
}

impl From<SelectiveLogic> for i64 {
    fn from(logic: SelectiveLogic) -> Self {
        match logic {
            SelectiveLogic::AndAny => 0,
            SelectiveLogic::NotAll => 1,
            SelectiveLogic::NotAny => 2,
            SelectiveLogic::AndAll => 3,
            SelectiveLogic::Other(code) => code,
        }
    }
}

/// Where an entry's content goes in the prompt (SillyTavern `position` codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(from = "i64", into = "i64")]
pub enum InsertionPosition {
    /// 0: before the character definitions (card `before_char`).
    #[default]
    BeforeCharacter,
    /// 1: after the character definitions (card `after_char`).
    AfterCharacter,
    /// 2: top of the author's note.
    AuthorNoteTop,
    /// 3: bottom of the author's note.
    AuthorNoteBottom,
    /// 4: inside the chat, `depth` messages from the end, as a `role` message.
    AtDepth,
    /// 5: before the example messages.
    ExamplesTop,
    /// 6: after the example messages.
    ExamplesBottom,
    /// 7: a named outlet (`outlet_name`): the entry fires as any other, but its content
    /// goes only where a card, a note or a prompt writes `{{outlet::Name}}`.
    Outlet,
    /// A code this build does not know, kept as it was.
    Other(i64),
}

impl From<i64> for InsertionPosition {
    fn from(code: i64) -> Self {
        match code {
            0 => Self::BeforeCharacter,
            1 => Self::AfterCharacter,
            2 => Self::AuthorNoteTop,
            3 => Self::AuthorNoteBottom,
            4 => Self::AtDepth,
            5 => Self::ExamplesTop,
            6 => Self::ExamplesBottom,
            7 => Self::Outlet,
            other => Self::Other(other),
        }
    }
}

impl From<InsertionPosition> for i64 {
    fn from(position: InsertionPosition) -> Self {
        match position {
            InsertionPosition::BeforeCharacter => 0,
            InsertionPosition::AfterCharacter => 1,
            InsertionPosition::AuthorNoteTop => 2,
            InsertionPosition::AuthorNoteBottom => 3,
            InsertionPosition::AtDepth => 4,
            InsertionPosition::ExamplesTop => 5,
            InsertionPosition::ExamplesBottom => 6,
            InsertionPosition::Outlet => 7,
            InsertionPosition::Other(code) => code,
        }
    }
}

/// The role of an `@ depth` injection (SillyTavern `role` codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(from = "i64", into = "i64")]
pub enum PromptRole {
    #[default]
    System,
    User,
    Assistant,
    Other(i64),
}

impl From<i64> for PromptRole {
    fn from(code: i64) -> Self {
        match code {
            0 => Self::System,
            1 => Self::User,
            2 => Self::Assistant,
            other => Self::Other(other),
        }
    }
}

impl From<PromptRole> for i64 {
    fn from(role: PromptRole) -> Self {
        match role {
            PromptRole::System => 0,
            PromptRole::User => 1,
            PromptRole::Assistant => 2,
            PromptRole::Other(code) => code,
        }
    }
}

/// Text beyond the chat that an entry's keys are matched against when opted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct MatchSources {
    pub persona_description: bool,
    pub character_description: bool,
    pub character_personality: bool,
    pub character_depth_prompt: bool,
    pub scenario: bool,
    pub creator_notes: bool,
}

/// Restricts an entry to (or, with `is_exclude`, away from) characters and tags.
///
/// What the lists hold depends on who wrote them, and so does how they match.
/// SillyTavern writes a character's avatar file name (without `.png`) in `names` and a
/// tag's id in `tags` (a UUID, or a number in older versions; the tag's name lives only in
/// SillyTavern's own settings, beside the map of which character has which tag), and it
/// matches both exactly. Lorekeeper has no tag ids: a card brings its tags as names
/// (`data.tags`, kept on the card as they came) and a person types names into the entry
/// editor, so a character's tag names are its tag identities here, and its name stands
/// for its file name. Hence:
///
/// - a list as SillyTavern wrote it (unchanged since the import, see
///   [`LoreEntry::filter_as_read`]) matches exactly, as SillyTavern does: its tag ids
///   never equal a tag name, so an entry kept to tags by id stays out for every character
///   here and one kept away from them fires for every character — what SillyTavern does
///   for a character that has none of those tags (the import says so, and the entry editor
///   is where to choose the tags again by name), while a book written here and brought
///   back through SillyTavern's format still matches its names;
/// - a list written here (by the editor, the CLI or HTTP, or any list changed since the
///   import) holds names and matches them with case and outer spaces aside.
///
/// Exported, both go out as they are: SillyTavern matches the names written here only
/// when they are its file names and tag ids, which it alone knows.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CharacterFilter {
    pub is_exclude: bool,
    pub names: Vec<String>,
    pub tags: Vec<String>,
}

/// Which of a character filter's lists stand as SillyTavern wrote them (exact matching)
/// rather than as written here (names, case aside). See [`CharacterFilter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FilterOrigin {
    pub names_as_read: bool,
    pub tags_as_read: bool,
}

impl CharacterFilter {
    pub fn is_empty(&self) -> bool {
        !self.is_exclude && self.names.is_empty() && self.tags.is_empty()
    }

    /// Whether the character called `name` with the tags `tags` passes: the names, then
    /// the tags, each required (or, with `is_exclude`, refused) when the list has any.
    pub fn admits(&self, origin: FilterOrigin, name: &str, tags: &[&str]) -> bool {
        let same = |exact: bool, a: &str, b: &str| if exact { a == b } else { a.trim().eq_ignore_ascii_case(b.trim()) };
        if !self.names.is_empty() {
            let named = self.names.iter().any(|n| same(origin.names_as_read, n, name));
            if named == self.is_exclude {
                return false;
            }
        }
        if !self.tags.is_empty() {
            let tagged = self.tags.iter().any(|t| tags.iter().any(|c| same(origin.tags_as_read, t, c)));
            if tagged == self.is_exclude {
                return false;
            }
        }
        true
    }
}

impl LoreEntry {
    /// Which lists of the character filter are exactly those of the document the entry
    /// was read from in SillyTavern's shapes (World Info's `characterFilter`, a character
    /// book's `extensions.character_filter`): those hold SillyTavern's file names and tag
    /// ids. A list edited since, or an entry written here, holds names.
    pub fn filter_as_read(&self) -> FilterOrigin {
        let Some(source) = &self.source else { return FilterOrigin::default() };
        let filter = match source.format {
            SourceFormat::WorldInfo => source.json.get("characterFilter"),
            SourceFormat::CharacterBook | SourceFormat::LorebookV3 => {
                source.json.get("extensions").and_then(|x| x.get("character_filter"))
            }
        };
        let Some(filter) = filter else { return FilterOrigin::default() };
        // As the import reads a list: text kept, numbers as text, nulls skipped.
        let list = |key: &str| -> Option<Vec<String>> {
            let items = filter.get(key)?.as_array()?;
            Some(
                items
                    .iter()
                    .filter_map(|v| match v {
                        Value::String(s) => Some(s.clone()),
                        Value::Number(n) => Some(n.to_string()),
                        _ => None,
                    })
                    .collect(),
            )
        };
        let cf = &self.character_filter;
        FilterOrigin {
            names_as_read: !cf.names.is_empty() && list("names").as_ref() == Some(&cf.names),
            tags_as_read: !cf.tags.is_empty() && list("tags").as_ref() == Some(&cf.tags),
        }
    }
}

/// Keys as a person types them in one line, comma-separated, where a key written as a
/// regular expression (`/wyr{1,2}m/i`) keeps its commas: a key that starts with `/` runs
/// to the next unescaped `/` followed by flags and then a comma or the end.
pub fn split_keys(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut keys = Vec::new();
    let mut current = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '/' && current.trim().is_empty() {
            // A regular expression: find where it closes.
            let mut j = i + 1;
            let mut end = None;
            while j < chars.len() {
                match chars[j] {
                    '\\' => j += 1,
                    '/' => {
                        let mut k = j + 1;
                        while k < chars.len() && chars[k].is_ascii_alphabetic() {
                            k += 1;
                        }
                        let mut after = k;
                        while after < chars.len() && chars[after].is_whitespace() {
                            after += 1;
                        }
                        if after == chars.len() || chars[after] == ',' {
                            end = Some(k);
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            if let Some(k) = end {
                current = chars[i..k].iter().collect();
                i = k;
                continue;
            }
        }
        if c == ',' {
            keys.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
        i += 1;
    }
    keys.push(current);
    keys.into_iter().map(|k| k.trim().to_string()).filter(|k| !k.is_empty()).collect()
}

/// `base`, or `base [2]`, `base [3]`… the first that `taken` does not hold: the id of a
/// fired entry in a prompt's ledger, which names it by label and reason, so two entries
/// alike in both still get a place each.
pub fn distinct_id(base: String, taken: impl Fn(&str) -> bool) -> String {
    if !taken(&base) {
        return base;
    }
    (2..).map(|n| format!("{base} [{n}]")).find(|id| !taken(id)).unwrap_or(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_keys_split_at_commas_but_not_inside_a_regular_expression() {
        assert_eq!(split_keys("dragon, wyrm ,, "), ["dragon", "wyrm"]);
        assert_eq!(split_keys("/wyr{1,2}m/i, drake"), ["/wyr{1,2}m/i", "drake"]);
        assert_eq!(split_keys("drake, /a\\/b{1,3}/gi"), ["drake", "/a\\/b{1,3}/gi"]);
        assert_eq!(split_keys("/x{2,}/"), ["/x{2,}/"]);
        // A slash that never closes is an ordinary key.
        assert_eq!(split_keys("/usr/bin, and/or"), ["/usr/bin", "and/or"]);
        assert_eq!(split_keys("a/b, c"), ["a/b", "c"]);
    }

    #[test]
    fn the_strategy_names_a_vectorized_keyless_entry_as_such() {
        let entry = |change: fn(&mut LoreEntry)| {
            let mut e = LoreEntry { enabled: true, keys: vec!["gate".into()], ..Default::default() };
            change(&mut e);
            e.strategy()
        };
        assert_eq!(entry(|_| {}), "keyed");
        assert_eq!(entry(|e| e.constant = true), "constant");
        assert_eq!(entry(|e| e.enabled = false), "disabled");
        assert_eq!(entry(|e| e.keys.clear()), "no keys");
        assert_eq!(
            entry(|e| {
                e.keys.clear();
                e.vectorized = true;
            }),
            "vectorized"
        );
    }

    #[test]
    fn codes_round_trip_including_unknown_ones() {
        for code in -1..10 {
            assert_eq!(i64::from(SelectiveLogic::from(code)), code);
            assert_eq!(i64::from(InsertionPosition::from(code)), code);
            assert_eq!(i64::from(PromptRole::from(code)), code);
        }
        assert_eq!(SelectiveLogic::from(2), SelectiveLogic::NotAny);
        assert_eq!(InsertionPosition::from(4), InsertionPosition::AtDepth);
        assert_eq!(serde_json::to_value(InsertionPosition::Outlet).unwrap(), serde_json::json!(7));
    }

    #[test]
    fn groups_split_on_commas_and_skip_blanks() {
        let entry = LoreEntry { group: "weather, ,seasons,".into(), ..Default::default() };
        assert_eq!(entry.groups(), vec!["weather", "seasons"]);
    }

    #[test]
    fn stored_json_round_trips() {
        let entry = LoreEntry {
            id: Some(EntryId::Text("a-1".into())),
            keys: vec!["{{char}}".into()],
            position: InsertionPosition::Other(42),
            sticky: Some(3),
            ..Default::default()
        };
        let json = serde_json::to_string(&entry).unwrap();
        assert_eq!(serde_json::from_str::<LoreEntry>(&json).unwrap(), entry);
    }

    #[test]
    fn label_prefers_comment_then_name_then_keys() {
        let mut entry = LoreEntry { keys: vec!["a".into(), "b".into()], ..Default::default() };
        assert_eq!(entry.label(), "a, b");
        entry.name = Some("Named".into());
        assert_eq!(entry.label(), "Named");
        entry.comment = "Memo".into();
        assert_eq!(entry.label(), "Memo");
    }
}
