//! Which lore entries go into the next prompt, and why the others do not.
//!
//! SillyTavern's World Info engine is the reference for the semantics: keys found in the
//! last messages fire entries, secondary keys filter them, activated entries' content is
//! scanned again (recursion), probability and inclusion groups thin the result, timed
//! effects carry entries across messages and the lore budget cuts the least important.
//! Every entry leaves with an [`Outcome`] precise enough for the game master to see why a
//! piece of lore did or did not reach the model.
//!
//! Pure logic: no I/O, no clock, no global randomness. Rolls are derived from
//! [`ActivationOptions::seed`], the message number and the entry, so the same inputs give
//! the same report (a replay shows what the model really saw).
//!
//! Where we knowingly differ from SillyTavern: whole-word matching treats every Unicode letter as a
//! word character; `@@activate` / `@@dont_activate` are the only V3 decorators honoured;
//! delay-until-recursion levels are those of entries that could fire (not disabled ones),
//! and with recursion off no level is ever opened; books may set their own scan depth,
//! recursion and budget ([`with_book_settings`]), which SillyTavern's books cannot.

mod matcher;
mod run;
#[cfg(test)]
mod tests;

pub use matcher::KeyIndex;

use super::{InsertionPosition, LoreEntry, Lorebook, PromptRole, SelectiveLogic};
use run::Run;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One entry offered for activation, with the book it comes from. Several books (world,
/// campaign, character) are activated together, because the budget and inclusion
/// groups span them all.
#[derive(Debug, Clone, Copy)]
pub struct ScanEntry<'a> {
    /// A stable name for the book (its library id): timers are keyed by it.
    pub book: &'a str,
    /// Position in its book, the timer key of entries without an id.
    pub index: usize,
    pub entry: &'a LoreEntry,
}

impl ScanEntry<'_> {
    /// The key of this entry's timers in [`ActivationState`]: `book/id`, or `book/#index`
    /// when the entry has no id.
    pub fn timer_key(&self) -> String {
        match &self.entry.id {
            Some(id) => format!("{}/{id}", self.book),
            None => format!("{}/#{}", self.book, self.index),
        }
    }
}

/// The entries of one book, ready for [`activate`].
pub fn book_entries<'a>(book: &'a str, lorebook: &'a Lorebook) -> Vec<ScanEntry<'a>> {
    lorebook.entries.iter().enumerate().map(|(index, entry)| ScanEntry { book, index, entry }).collect()
}

/// The character whose prompt is being built, for entries' character filters.
#[derive(Debug, Clone, Default)]
pub struct CharacterRef<'a> {
    /// Its name, which stands for SillyTavern's avatar file name.
    pub name: &'a str,
    /// Its card's tags, names: Lorekeeper has no other tag ids
    /// ([`crate::lorebook::CharacterFilter`]).
    pub tags: Vec<&'a str>,
}

/// What is scanned.
#[derive(Debug, Clone, Default)]
pub struct ScanInput<'a> {
    /// Recent messages, newest last (already formatted as they appear in the prompt).
    pub messages: Vec<&'a str>,
    /// The number of the message being generated: delays, sticky and cooldown count in
    /// these numbers.
    pub message_number: u64,
    /// Extra texts, scanned only for entries that opt in through `match_sources`.
    pub persona_description: Option<&'a str>,
    pub character_description: Option<&'a str>,
    pub character_personality: Option<&'a str>,
    pub character_depth_prompt: Option<&'a str>,
    pub scenario: Option<&'a str>,
    pub creator_notes: Option<&'a str>,
    /// Generation types checked against entries' `triggers`: an entry naming any of them
    /// may fire (empty counts as `normal`). More than one when a front door's action is
    /// several of SillyTavern's at once (a regenerate kept as a swipe is both).
    pub generation: &'a [&'a str],
    /// `None`: character filters are not applied.
    pub character: Option<CharacterRef<'a>>,
    /// Positions (in the entries slice) activated from outside, e.g. by the Director:
    /// they skip keys, timers and probability, but not the budget.
    pub forced: Vec<usize>,
    /// Entries flagged `vectorized` whose content is semantically close to the recent
    /// text (position, cosine similarity), measured by the caller with the memory
    /// embedder. Such an entry fires as a key match would (filters, timers, groups,
    /// probability and budget still apply), and its reason says how close it was.
    pub similar: Vec<(usize, f32)>,
}

/// How activation behaves where entries and books leave a setting open.
#[derive(Clone, Copy)]
pub struct ActivationOptions<'a> {
    /// Messages scanned when neither entry nor book says.
    pub scan_depth: u32,
    pub case_sensitive: bool,
    pub match_whole_words: bool,
    /// Whether activated entries' content is scanned for more keys.
    pub recursive: bool,
    /// Recursion passes after the first scan (SillyTavern's "max recursion steps").
    pub max_recursion_steps: u32,
    /// Tokens all activated lore may use (`None`: unlimited).
    pub token_budget: Option<u32>,
    /// The tokenizer of the model the prompt is for.
    pub count_tokens: &'a dyn Fn(&str) -> u32,
    /// Seed of the probability and inclusion-group rolls.
    pub seed: u64,
    /// Inclusion groups keep only the members that matched the most keys.
    pub group_scoring: bool,
    /// Wall time the key checks of one activation may take; entries not checked by then
    /// are skipped and say so (`None`: no limit).
    pub time_budget: Option<std::time::Duration>,
    /// Set when the call this activation is for was cancelled: entries not checked by
    /// then are skipped and say so, so a cancel never waits on a slow book.
    pub cancel: Option<&'a std::sync::atomic::AtomicBool>,
    /// Expands the macros of a key (`{{char}}`, `{{user}}`, ...) for this call, as
    /// SillyTavern substitutes them in every key before matching (`None`: keys match as
    /// written). A function, so activation needs no macro engine of its own (the caller
    /// has `prompting::expand`, the fuzz build mounts activation alone).
    pub macros: Option<&'a dyn Fn(&str) -> String>,
}

/// How long one activation's key checks may run by default: far more than any sane book
/// needs (thousands of plain keys take about a millisecond), little enough that a book
/// of pathological regular expressions cannot stall a round.
pub const DEFAULT_TIME_BUDGET: std::time::Duration = std::time::Duration::from_millis(250);

impl Default for ActivationOptions<'_> {
    fn default() -> Self {
        Self {
            scan_depth: 2,
            case_sensitive: false,
            // SillyTavern ships `world_info_match_whole_words: true`: "sea" is not found in
            // "seal". A migrated book fires as it did there.
            match_whole_words: true,
            recursive: true,
            max_recursion_steps: 10,
            token_budget: None,
            count_tokens: &estimate_tokens,
            seed: 0,
            group_scoring: false,
            time_budget: Some(DEFAULT_TIME_BUDGET),
            cancel: None,
            macros: None,
        }
    }
}

impl std::fmt::Debug for ActivationOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActivationOptions")
            .field("scan_depth", &self.scan_depth)
            .field("case_sensitive", &self.case_sensitive)
            .field("match_whole_words", &self.match_whole_words)
            .field("recursive", &self.recursive)
            .field("max_recursion_steps", &self.max_recursion_steps)
            .field("token_budget", &self.token_budget)
            .field("seed", &self.seed)
            .field("group_scoring", &self.group_scoring)
            .finish_non_exhaustive()
    }
}

impl ActivationOptions<'_> {
    /// These options with the book's own scan depth, budget and recursion setting.
    pub fn with_book(mut self, book: &Lorebook) -> Self {
        if let Some(depth) = book.scan_depth {
            self.scan_depth = depth;
        }
        if let Some(budget) = book.token_budget {
            self.token_budget = Some(budget);
        }
        if let Some(recursive) = book.recursive_scanning {
            self.recursive = recursive;
        }
        self
    }
}

/// `entry` as it activates beside other books' entries, with its own book's settings
/// (as `lorebook test` applies a lone book's): the book's scan depth where the entry sets
/// none, and, when the book turns recursion off, its entries neither fire from other
/// lore nor fire other lore by their content. Borrowed when the book changes nothing.
pub fn with_book_settings<'a>(book: &Lorebook, entry: &'a LoreEntry) -> std::borrow::Cow<'a, LoreEntry> {
    let depth = entry.scan_depth.is_none() && book.scan_depth.is_some();
    let flat = book.recursive_scanning == Some(false) && !(entry.exclude_recursion && entry.prevent_recursion);
    if !depth && !flat {
        return std::borrow::Cow::Borrowed(entry);
    }
    let mut entry = entry.clone();
    if depth {
        entry.scan_depth = book.scan_depth;
    }
    if flat {
        entry.exclude_recursion = true;
        entry.prevent_recursion = true;
    }
    std::borrow::Cow::Owned(entry)
}

/// The smallest lore budget any of `books` sets for itself (`None`: none sets one).
pub fn smallest_book_budget<'a>(books: impl IntoIterator<Item = &'a Lorebook>) -> Option<u32> {
    books.into_iter().filter_map(|b| b.token_budget.filter(|t| *t > 0)).min()
}

/// A tokenizer-free estimate (about four characters per token) for when the model's
/// tokenizer is unknown.
pub fn estimate_tokens(text: &str) -> u32 {
    u32::try_from(text.chars().count().div_ceil(4)).unwrap_or(u32::MAX)
}

/// Timed effects carried from message to message, as SillyTavern keeps them in its chat's
/// `timedWorldInfo`; the scene engine and the chat persist it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ActivationState {
    /// By [`ScanEntry::timer_key`].
    pub timers: BTreeMap<String, EntryTimer>,
}

/// An entry's running sticky and cooldown effects.
///
/// SillyTavern's model, kept as it keeps it, because its timings follow from the model
/// and from nothing simpler: when an entry fires at chat length `L`, each of its effects
/// not already running starts as `start = L, end = L + N`; an effect counts while the
/// chat is shorter than `end` (so `sticky: 1` never outlasts the message that set it, and
/// in a chat where each exchange adds two messages `sticky: 2` does not either); a sticky
/// effect that ends starts the cooldown at the length where its end was seen, protected,
/// and in force at once; an unprotected effect whose chat did not grow past its start (a
/// swipe, a regeneration, a rewind) is dropped before the scan, so a redraw fires as the
/// first draw did. Keeping the window instead (fired at, sticky until, cooling until) is
/// off by one message from SillyTavern for every even value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "StoredTimer")]
pub struct EntryTimer {
    pub sticky: Option<TimedEffect>,
    pub cooldown: Option<TimedEffect>,
}

/// One timed effect: in force while the chat is at least `start` and shorter than `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimedEffect {
    pub start: u64,
    pub end: u64,
    /// Set on the cooldown a sticky effect's end started: it survives a redraw of the
    /// message that saw the end (SillyTavern's `protected`).
    #[serde(default)]
    pub protected: bool,
}

impl TimedEffect {
    fn new(now: u64, length: u32, protected: bool) -> Self {
        Self { start: now, end: now + u64::from(length), protected }
    }

    /// The last message number it is in force for (`end` itself is not).
    pub fn last(&self) -> u64 {
        self.end.saturating_sub(1)
    }
}

/// An [`EntryTimer`] as stored: this shape, or the window libraries before it stored
/// (`fired_at`, `sticky_until`, `cooldown_until`, all inclusive), read as nearly as the
/// new model allows, so a chat's running timers survive the upgrade.
#[derive(Deserialize)]
struct StoredTimer {
    #[serde(default)]
    sticky: Option<TimedEffect>,
    #[serde(default)]
    cooldown: Option<TimedEffect>,
    fired_at: Option<u64>,
    sticky_until: Option<u64>,
    cooldown_until: Option<u64>,
}

impl From<StoredTimer> for EntryTimer {
    fn from(stored: StoredTimer) -> Self {
        let StoredTimer { sticky, cooldown, fired_at, sticky_until, cooldown_until } = stored;
        let Some(start) = fired_at else { return Self { sticky, cooldown } };
        let sticky_until = sticky_until.unwrap_or(start);
        let cooldown_until = cooldown_until.unwrap_or(sticky_until);
        Self {
            sticky: (sticky_until > start).then_some(TimedEffect { start, end: sticky_until + 1, protected: false }),
            cooldown: (cooldown_until > sticky_until).then_some(TimedEffect {
                start: sticky_until.max(start),
                end: cooldown_until + 1,
                protected: sticky_until > start,
            }),
        }
    }
}

/// Text an entry's key was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum Source {
    Chat,
    PersonaDescription,
    CharacterDescription,
    CharacterPersonality,
    CharacterDepthPrompt,
    Scenario,
    CreatorNotes,
    /// The content of the activated entry at this position.
    Recursion { from: usize },
}

/// Why an entry fired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum Trigger {
    Constant,
    /// Listed in [`ScanInput::forced`].
    Forced,
    /// An `@@activate` decorator.
    Decorator,
    /// Its sticky effect, started at message `fired_at`, is in force through message `until`.
    Sticky { fired_at: u64, until: u64 },
    /// This primary key was found in `source`.
    Key { key: String, source: Source },
    /// A `vectorized` entry close to the recent text: cosine similarity in thousandths.
    Vector { similarity: u16 },
}

impl Trigger {
    /// Why an entry fired, as the ledger and the packet view say it (`label` names the
    /// entry at a position, for lore that fired from another entry's content).
    pub fn reason(&self, label: &dyn Fn(usize) -> String) -> String {
        match self {
            Trigger::Constant => "constant".into(),
            Trigger::Forced => "forced".into(),
            Trigger::Decorator => "@@activate".into(),
            Trigger::Sticky { fired_at, until } => format!("sticky since message {fired_at}, until {until}"),
            Trigger::Key { key, source } => match source {
                Source::Chat => format!("key {key:?}"),
                Source::Recursion { from } => format!("key {key:?} in the lore of {:?}", label(*from)),
                other => format!("key {key:?} in the {}", other.name()),
            },
            Trigger::Vector { similarity } => format!("vector similarity {:.2}", f32::from(*similarity) / 1000.0),
        }
    }
}

/// An entry as an editor may save it: refused with the field named when a setting is
/// out of range or a regular-expression key does not compile.
pub fn check_entry(entry: &LoreEntry) -> Result<(), String> {
    if entry.probability > 100 {
        return Err(format!("probability: {} is not a percentage (0–100)", entry.probability));
    }
    if entry.position == InsertionPosition::Outlet && entry.outlet_name.trim().is_empty() {
        return Err("outlet_name: an entry at the outlet position needs the outlet's name ({{outlet::Name}} puts it in)".into());
    }
    if entry.group_weight == 0 && !entry.group.trim().is_empty() {
        return Err("group_weight: a group member needs a weight above 0".into());
    }
    for (field, keys) in [("keys", &entry.keys), ("secondary_keys", &entry.secondary_keys)] {
        for key in keys {
            if let Some(error) = matcher::regex_problem(key, entry.use_regex) {
                return Err(format!("{field}: {key:?} is not a valid regular expression ({error})"));
            }
        }
    }
    Ok(())
}

/// One entry's fate on a test text: whether it fired, and why (or why not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EntryVerdict {
    pub ordinal: usize,
    pub label: String,
    pub fired: bool,
    pub reason: String,
}

/// "Why did this fire / not fire": activate `book` on `text` as one message of a new
/// chat (the book's own settings, no timers carried in) and say for every entry what
/// happened to it.
pub fn explain(book: &Lorebook, text: &str) -> Vec<EntryVerdict> {
    explain_with(book, text, Vec::new(), None)
}

/// [`explain`] as a chat would activate the book: `similar` are the `vectorized`
/// entries close to the text (position, cosine), and `macros` fills the keys' macros
/// (`{{user}}` as the user's name), so a test says what the chat would do.
pub fn explain_with(book: &Lorebook, text: &str, similar: Vec<(usize, f32)>, macros: Option<&dyn Fn(&str) -> String>) -> Vec<EntryVerdict> {
    let entries = book_entries("test", book);
    let scan = ScanInput { messages: vec![text], message_number: 1, similar, ..Default::default() };
    let mut options = ActivationOptions::default().with_book(book);
    options.macros = macros;
    let report = activate(&entries, &scan, &mut ActivationState::default(), &options);
    let label = |i: usize| book.entries.get(i).map(|e| e.label()).unwrap_or_default();
    report
        .outcomes
        .iter()
        .enumerate()
        .map(|(ordinal, outcome)| {
            let (fired, reason) = match outcome {
                Outcome::Activated { trigger, .. } => (true, trigger.reason(&label)),
                Outcome::Skipped { skip } => (false, skip.describe(&label)),
            };
            EntryVerdict { ordinal, label: label(ordinal), fired, reason }
        })
        .collect()
}

impl SkipReason {
    /// Why an entry did not fire, in words (`label` names the entry at a position).
    pub fn describe(&self, label: &dyn Fn(usize) -> String) -> String {
        match self {
            SkipReason::Disabled => "disabled".into(),
            SkipReason::DecoratorDontActivate => "@@dont_activate".into(),
            SkipReason::Trigger { generation } => format!("not triggered by a {generation} generation"),
            SkipReason::CharacterFilter { character } => format!("its character filter leaves out {character}"),
            SkipReason::NoKeys => "no keys and not constant".into(),
            SkipReason::NoKeyMatched => "no key found in the scanned text".into(),
            SkipReason::Budget { needed, used, budget } => {
                format!("skipped by the lore budget: needed {needed} tokens with {used} of {budget} used")
            }
            SkipReason::Probability { roll, probability } => format!("probability: rolled {roll}, needed under {probability}"),
            SkipReason::InclusionGroup { group, winner, pick } => {
                format!("inclusion group {group:?}: {:?} won ({})", label(*winner), format!("{pick:?}").to_lowercase())
            }
            SkipReason::Cooldown { until } => format!("cooling down until message {until}"),
            SkipReason::Delay { from } => format!("delayed until message {from}"),
            SkipReason::SecondaryLogic { primary, logic, found, missing } => {
                // What made the logic fail: keys absent for AND, keys present for NOT.
                let why = match logic {
                    SelectiveLogic::NotAny | SelectiveLogic::NotAll => format!("found {}", found.join(", ")),
                    _ => format!("missing {}", missing.join(", ")),
                };
                let rule = match logic {
                    SelectiveLogic::AndAny => "AND ANY",
                    SelectiveLogic::AndAll => "AND ALL",
                    SelectiveLogic::NotAny => "NOT ANY",
                    SelectiveLogic::NotAll => "NOT ALL",
                    _ => "their rule",
                };
                format!("key {primary:?} matched but the secondary keys failed {rule} ({why})")
            }
            SkipReason::BadRegex { key, error } => format!("regex key {key:?} is invalid: {error}"),
            SkipReason::ExcludeRecursion { key, from } => {
                format!("key {key:?} only in the lore of {:?}, and the entry excludes recursion", label(*from))
            }
            SkipReason::DelayUntilRecursion { level } => format!("waits for recursion level {level}, never reached"),
            SkipReason::TimeBudget { after_ms } => format!("not checked: the activation's time budget ran out after {after_ms} ms"),
            SkipReason::Cancelled => "not checked: the call was cancelled".to_string(),
        }
    }
}

impl Source {
    pub fn name(&self) -> &'static str {
        match self {
            Source::Chat => "chat",
            Source::PersonaDescription => "persona description",
            Source::CharacterDescription => "character description",
            Source::CharacterPersonality => "character personality",
            Source::CharacterDepthPrompt => "character depth prompt",
            Source::Scenario => "scenario",
            Source::CreatorNotes => "creator notes",
            Source::Recursion { .. } => "lore",
        }
    }
}

/// How an inclusion group chose its winner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupPick {
    /// The winner fired in an earlier pass.
    EarlierPass,
    /// The winner is sticky.
    Sticky,
    /// The winner matched more keys (group scoring).
    Score,
    /// The winner has group priority and the highest order among those that do.
    Override,
    /// Weighted random pick.
    Weighted,
}

/// Why an entry did not fire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum SkipReason {
    Disabled,
    /// An `@@dont_activate` decorator.
    DecoratorDontActivate,
    /// The generation type is not among the entry's triggers.
    Trigger { generation: String },
    CharacterFilter { character: String },
    /// Not constant and without any key.
    NoKeys,
    NoKeyMatched,
    /// A key is a regular expression that does not compile (or gave up backtracking).
    BadRegex { key: String, error: String },
    /// Primary key `primary` matched, but the secondary keys did not satisfy `logic`.
    SecondaryLogic { primary: String, logic: SelectiveLogic, found: Vec<String>, missing: Vec<String> },
    /// Only the content of another entry mentions it, and it excludes recursion.
    ExcludeRecursion { key: String, from: usize },
    /// Delayed until recursion level `level`, which the scan never reached.
    DelayUntilRecursion { level: u32 },
    /// Rolled `roll` (0–99), needed less than `probability`.
    Probability { roll: u32, probability: u32 },
    /// Another member of `group` won it (`winner` is a position in the entries slice).
    InclusionGroup { group: String, winner: usize, pick: GroupPick },
    /// Cooling down after an earlier firing, until message `until` included.
    Cooldown { until: u64 },
    /// Cannot fire before message `from`.
    Delay { from: u64 },
    /// Needed `needed` tokens with `used` of `budget` spent (or the budget had already
    /// overflowed, which stops all later budgeted entries, as in SillyTavern).
    Budget { needed: u32, used: u32, budget: u32 },
    /// Not checked: the activation's time budget ran out first (hostile regex keys, a
    /// huge book); `after_ms` is how long it had run.
    TimeBudget { after_ms: u64 },
    /// Not checked: the call was cancelled first.
    Cancelled,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// Fired in scan pass `pass` (0: the first scan, then recursion passes).
    Activated { trigger: Trigger, pass: u32, tokens: u32 },
    Skipped { skip: SkipReason },
}

/// An activated entry, with what the prompt builder needs to place it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivatedEntry {
    /// Position in the entries slice given to [`activate`].
    pub index: usize,
    pub book: String,
    pub position: InsertionPosition,
    pub depth: u32,
    pub role: PromptRole,
    pub outlet_name: String,
    pub insertion_order: i64,
    pub tokens: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivationReport {
    /// One per entry, in the order given.
    pub outcomes: Vec<Outcome>,
    /// Activated entries in insertion order: by position, then ascending insertion order
    /// (the highest order ends closest to the end of its position), then book order.
    pub activated: Vec<ActivatedEntry>,
    /// Tokens spent from the budget (entries with `ignore_budget` excluded).
    pub tokens_used: u32,
    pub token_budget: Option<u32>,
    /// Recursion passes run after the first scan.
    pub recursion_passes: u32,
}

impl ActivationReport {
    /// The content each activated entry contributes (decorator lines removed), in
    /// insertion order.
    pub fn contents<'a>(&self, entries: &[ScanEntry<'a>]) -> Vec<&'a str> {
        self.activated.iter().filter_map(|a| entries.get(a.index)).map(|e| e.entry.decorators().1).collect()
    }

    pub fn is_activated(&self, index: usize) -> bool {
        matches!(self.outcomes.get(index), Some(Outcome::Activated { .. }))
    }
}

/// Activates `entries` for one prompt, compiling their keys first. When the same books
/// serve many prompts, build a [`KeyIndex`] once and call [`activate_with_index`].
pub fn activate(
    entries: &[ScanEntry<'_>],
    input: &ScanInput<'_>,
    state: &mut ActivationState,
    options: &ActivationOptions<'_>,
) -> ActivationReport {
    let index = KeyIndex::build(entries.iter().map(|e| e.entry), options);
    activate_with_index(entries, &index, input, state, options)
}

/// [`activate`] with keys compiled beforehand. An index built for another number of
/// entries or other case / whole-word defaults is not trusted: the keys are compiled
/// again for this call.
pub fn activate_with_index(
    entries: &[ScanEntry<'_>],
    index: &KeyIndex,
    input: &ScanInput<'_>,
    state: &mut ActivationState,
    options: &ActivationOptions<'_>,
) -> ActivationReport {
    if !index.fits(entries.len(), options) {
        return activate(entries, input, state, options);
    }
    Run::new(entries, index, input, options).run(state)
}
