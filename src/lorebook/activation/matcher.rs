//! Key matching for activation, compiled once per set of entries.
//!
//! A book of 5,000 entries has some 15,000 keys; testing each against twenty messages
//! one by one costs tens of milliseconds per prompt. Instead every plain key goes into
//! one of two Aho-Corasick automata (case-sensitive, and case-insensitive run over
//! lower-cased text), each scanned text is walked once, and an entry's question "is my
//! key within my scan depth?" becomes an array lookup. Regular-expression keys are rare
//! and are compiled once here and run per entry.

use super::ActivationOptions;
use crate::lorebook::LoreEntry;
use aho_corasick::{AhoCorasick, MatchKind};
use std::collections::HashMap;

/// SillyTavern's JavaScript regexes can backtrack without bound; a hostile or careless
/// key must cost a skip, not a frozen prompt build.
const REGEX_BACKTRACK_LIMIT: usize = 200_000;

/// The largest compiled program one regex key may make (bytes): a key like `a{1000}{1000}`
/// is refused instead of taking the memory a whole book may use.
const REGEX_SIZE_LIMIT: usize = 256 * 1024;

/// Regular-expression keys compiled per set of books; keys past it are not compiled and
/// their entries say why. Real books have a handful; thousands is an attack or a mistake.
pub const MAX_REGEX_KEYS: usize = 2_000;

/// Which automaton a plain key lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Case {
    Sensitive,
    Insensitive,
}

/// One compiled key.
#[derive(Debug)]
pub(super) enum Key {
    /// A literal; `whole_word` is already resolved (multi-word keys never need it,
    /// as in SillyTavern, which matches them as plain substrings).
    Plain { case: Case, pattern: u32, whole_word: bool },
    Regex(Box<Pattern>),
    /// A regex that does not compile: the message is shown as the skip reason.
    Invalid(String),
    /// A blank key, which matches nothing.
    Empty,
    /// A key with macros (`{{char}}`, `<USER>`): its text depends on the call, so it is
    /// resolved per activation ([`KeyIndex::macro_keys`] at `slot`), as SillyTavern
    /// substitutes macros in every key before matching.
    Macro { slot: u32 },
    /// A resolved macro key's literal text, searched directly (such keys are rare).
    Text { needle: String, case_sensitive: bool, whole_word: bool },
}

/// A key whose macros are resolved per call, with its entry's matching settings.
#[derive(Debug)]
pub(super) struct MacroKey {
    pub raw: String,
    pub case_sensitive: bool,
    pub whole_words: bool,
    pub use_regex: bool,
}

/// Whether `raw` holds a macro to resolve before matching.
fn has_macro(raw: &str) -> bool {
    (raw.contains("{{") && raw.contains("}}")) || raw.contains("<USER>") || raw.contains("<BOT>")
}

impl MacroKey {
    /// This key for one call: macros expanded (`None`: left as written), then compiled
    /// as any key is (a `/regex/`, or literal text).
    pub fn resolve(&self, macros: Option<&dyn Fn(&str) -> String>) -> Key {
        let text = match macros {
            Some(expand) => expand(&self.raw),
            None => self.raw.clone(),
        };
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Key::Empty;
        }
        match parse_slash_regex(trimmed) {
            Some((pattern, flags)) => compile_regex(pattern, flags.contains('i'), flags.contains('s'), flags.contains('m')),
            None if self.use_regex => compile_regex(trimmed, !self.case_sensitive, false, false),
            None => Key::Text {
                needle: if self.case_sensitive { trimmed.to_string() } else { trimmed.to_lowercase() },
                case_sensitive: self.case_sensitive,
                whole_word: self.whole_words && !trimmed.contains(char::is_whitespace),
            },
        }
    }
}

/// Whether a resolved macro key's text occurs in `text` (as a whole word if asked).
pub(super) fn text_has(text: &str, needle: &str, case_sensitive: bool, whole_word: bool) -> bool {
    let lowered;
    let hay = if case_sensitive {
        text
    } else {
        lowered = text.to_lowercase();
        &lowered
    };
    if !whole_word {
        return hay.contains(needle);
    }
    hay.match_indices(needle).any(|(at, found)| {
        let before = hay[..at].chars().next_back();
        let after = hay[at + found.len()..].chars().next();
        !before.is_some_and(is_word_char) && !after.is_some_and(is_word_char)
    })
}

#[derive(Debug, Default)]
pub(super) struct EntryKeys {
    pub primary: Vec<Key>,
    pub secondary: Vec<Key>,
}

/// The compiled keys of a list of entries. Build it once per version of the books and
/// pass it to [`super::activate_with_index`]; it must be rebuilt when entries change.
#[derive(Debug)]
pub struct KeyIndex {
    pub(super) entries: Vec<EntryKeys>,
    /// Keys with macros, resolved per call (see [`Key::Macro`]).
    pub(super) macro_keys: Vec<MacroKey>,
    sensitive: Option<AhoCorasick>,
    insensitive: Option<AhoCorasick>,
    pub(super) pattern_counts: [usize; 2],
    defaults: (bool, bool),
}

impl KeyIndex {
    /// Compiles the keys of `entries` with the case and whole-word defaults of `options`.
    pub fn build<'e>(entries: impl IntoIterator<Item = &'e LoreEntry>, options: &ActivationOptions<'_>) -> Self {
        let mut patterns: [Vec<String>; 2] = [Vec::new(), Vec::new()];
        let mut ids: [HashMap<String, u32>; 2] = [HashMap::new(), HashMap::new()];
        let mut compiled = Vec::new();
        let mut regexes = 0usize;
        let mut macro_keys = Vec::new();
        for entry in entries {
            let case_sensitive = entry.case_sensitive.unwrap_or(options.case_sensitive);
            let whole_words = entry.match_whole_words.unwrap_or(options.match_whole_words);
            let mut compile = |raw: &String| -> Key {
                let trimmed = raw.trim();
                if trimmed.is_empty() {
                    return Key::Empty;
                }
                if has_macro(trimmed) {
                    macro_keys.push(MacroKey { raw: trimmed.to_string(), case_sensitive, whole_words, use_regex: entry.use_regex });
                    return Key::Macro { slot: (macro_keys.len() - 1) as u32 };
                }
                let regex = match parse_slash_regex(trimmed) {
                    Some((pattern, flags)) => Some((pattern, flags.contains('i'), flags.contains('s'), flags.contains('m'))),
                    None if entry.use_regex => Some((trimmed, !case_sensitive, false, false)),
                    None => None,
                };
                if let Some((pattern, insensitive, dot_all, multi_line)) = regex {
                    regexes += 1;
                    if regexes > MAX_REGEX_KEYS {
                        return Key::Invalid(format!("more than {MAX_REGEX_KEYS} regular-expression keys in these books; this one was not compiled"));
                    }
                    return compile_regex(pattern, insensitive, dot_all, multi_line);
                }
                let (case, text) =
                    if case_sensitive { (Case::Sensitive, trimmed.to_string()) } else { (Case::Insensitive, trimmed.to_lowercase()) };
                let slot = case as usize;
                let next = patterns[slot].len() as u32;
                let pattern = *ids[slot].entry(text.clone()).or_insert_with(|| {
                    patterns[slot].push(text.clone());
                    next
                });
                Key::Plain { case, pattern, whole_word: whole_words && !text.contains(char::is_whitespace) }
            };
            let primary = entry.keys.iter().map(&mut compile).collect();
            let secondary = entry.secondary_keys.iter().map(&mut compile).collect();
            compiled.push(EntryKeys { primary, secondary });
        }
        let automaton = |list: &[String]| {
            if list.is_empty() {
                return None;
            }
            // Standard semantics are required for overlapping search, which reports
            // every key present even when keys overlap ("Iron" and "Iron Keep").
            AhoCorasick::builder().match_kind(MatchKind::Standard).build(list).ok()
        };
        Self {
            sensitive: automaton(&patterns[0]),
            insensitive: automaton(&patterns[1]),
            pattern_counts: [patterns[0].len(), patterns[1].len()],
            entries: compiled,
            macro_keys,
            defaults: (options.case_sensitive, options.match_whole_words),
        }
    }

    /// Whether this index was built for this many entries with these defaults.
    pub fn fits(&self, entry_count: usize, options: &ActivationOptions<'_>) -> bool {
        self.entries.len() == entry_count && self.defaults == (options.case_sensitive, options.match_whole_words)
    }

    /// Scans one text: for each automaton, per pattern, whether it occurs at all and
    /// whether it occurs as a whole word.
    /// `age` is how many messages back the text is (0 for the newest message and for
    /// texts that are not messages); each pattern keeps the youngest age it was seen at.
    pub(super) fn scan(&self, text: &str, age: u32, found: &mut Found) {
        if let Some(ac) = &self.sensitive {
            scan_with(ac, text, age, &mut found.hits[0]);
        }
        if let Some(ac) = &self.insensitive {
            scan_with(ac, &text.to_lowercase(), age, &mut found.hits[1]);
        }
    }

    pub(super) fn empty_found(&self) -> Found {
        Found { hits: [vec![Hit::NONE; self.pattern_counts[0]], vec![Hit::NONE; self.pattern_counts[1]]] }
    }
}

/// Where a pattern was seen: the smallest "age" (0 = the newest message, or the only
/// text) at which it occurs anywhere, and at which it occurs as a whole word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Hit {
    pub any: u32,
    pub word: u32,
}

impl Hit {
    pub const NONE: Hit = Hit { any: u32::MAX, word: u32::MAX };
}

/// Per-pattern hits of one scanned text, or of the chat scanned message by message.
#[derive(Debug, Clone)]
pub(super) struct Found {
    pub hits: [Vec<Hit>; 2],
}

impl Found {
    /// Whether a plain key is present within `depth` (ages `0..depth`).
    pub fn has(&self, case: Case, pattern: u32, whole_word: bool, depth: u32) -> bool {
        let hit = self.hits[case as usize][pattern as usize];
        let age = if whole_word { hit.word } else { hit.any };
        age < depth
    }
}

fn scan_with(ac: &AhoCorasick, text: &str, age: u32, hits: &mut [Hit]) {
    for m in ac.find_overlapping_iter(text) {
        let hit = &mut hits[m.pattern().as_usize()];
        hit.any = hit.any.min(age);
        if hit.word <= age {
            continue;
        }
        let before = text[..m.start()].chars().next_back();
        let after = text[m.end()..].chars().next();
        if !before.is_some_and(is_word_char) && !after.is_some_and(is_word_char) {
            hit.word = age;
        }
    }
}

/// A word character for whole-word matching. SillyTavern uses JavaScript's ASCII `\w`;
/// we count every Unicode letter and digit, so "café" is not found inside "cafés".
pub(super) fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `/pattern/flags` (SillyTavern's regex key form): the pattern and its flags.
pub(super) fn parse_slash_regex(key: &str) -> Option<(&str, &str)> {
    let body = key.strip_prefix('/')?;
    let close = body.rfind('/')?;
    let (pattern, flags) = (&body[..close], &body[close + 1..]);
    if pattern.is_empty() || !flags.chars().all(|f| "gimsuyd".contains(f)) {
        return None;
    }
    Some((pattern, flags))
}

/// Why a key that is a regular expression (written `/pattern/flags`, or any key when
/// `use_regex`) does not compile; `None` for a plain key or a good pattern.
pub(super) fn regex_problem(key: &str, use_regex: bool) -> Option<String> {
    let (pattern, flags) = match parse_slash_regex(key) {
        Some((pattern, flags)) => (pattern, flags),
        None if use_regex => (key, ""),
        None => return None,
    };
    match compile_regex(pattern, flags.contains('i'), flags.contains('s'), flags.contains('m')) {
        Key::Invalid(error) => Some(error),
        _ => None,
    }
}

fn compile_regex(pattern: &str, insensitive: bool, dot_all: bool, multi_line: bool) -> Key {
    let mut prefix = String::new();
    for (on, flag) in [(insensitive, 'i'), (dot_all, 's'), (multi_line, 'm')] {
        if on {
            prefix.push(flag);
        }
    }
    let full = if prefix.is_empty() { pattern.to_string() } else { format!("(?{prefix}){pattern}") };
    match regex::RegexBuilder::new(&full).size_limit(REGEX_SIZE_LIMIT).build() {
        Ok(regex) => return Key::Regex(Box::new(Pattern::Linear(regex))),
        // Too big for the limit: refused, not retried by the backtracking engine.
        Err(regex::Error::CompiledTooBig(limit)) => {
            return Key::Invalid(format!("the compiled pattern is larger than {limit} bytes"));
        }
        Err(_) => {}
    }
    match fancy_regex::RegexBuilder::new(&full).backtrack_limit(REGEX_BACKTRACK_LIMIT).delegate_size_limit(REGEX_SIZE_LIMIT).build() {
        Ok(regex) => Key::Regex(Box::new(Pattern::Backtracking(regex))),
        Err(error) => Key::Invalid(error.to_string()),
    }
}

/// A compiled regex key. Most keys compile with the `regex` crate (linear time, and
/// an order of magnitude faster on `\b`, which is in almost every key); only keys
/// using JavaScript features it lacks (look-around, back-references) fall back to
/// `fancy-regex` and its bounded backtracking.
#[derive(Debug)]
pub(super) enum Pattern {
    Linear(regex::Regex),
    Backtracking(fancy_regex::Regex),
}

impl Pattern {
    /// `Err` when the backtracking engine gives up on a pathological key.
    pub fn is_match(&self, text: &str) -> Result<bool, String> {
        match self {
            Pattern::Linear(regex) => Ok(regex.is_match(text)),
            Pattern::Backtracking(regex) => regex.is_match(text).map_err(|error| error.to_string()),
        }
    }
}
