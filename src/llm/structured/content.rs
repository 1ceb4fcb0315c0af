//! What a reader would call junk in a reply that has the right shape.
//!
//! A small model asked for JSON of a schema often returns the schema's own words as the
//! values (`"core_traits": ["fears", "secrets"]`), placeholders (`"..."`, `"one sentence
//! summary"`), the same item four times, or a narrative of one line that never names
//! its subject. Such a reply validates, so the schema alone accepts it. These checks run
//! after the schema, for every provider, and a reply that fails them is re-asked like
//! one that breaks the schema; each problem is reported as a [`SchemaError`] whose
//! `schema_path` starts with `content/`, so the attempt list says what was wrong where.

use super::SchemaError;
use serde_json::Value;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

/// A check of the caller's own (who may appear, what must be named).
pub type ContentCheck = Arc<dyn Fn(&Value) -> Vec<SchemaError> + Send + Sync>;

/// The content rules of one call. The defaults apply to every structured call.
#[derive(Clone)]
pub struct ContentRules {
    /// Reject string values that are the schema's field names, its descriptions,
    /// or placeholders, and lists whose items are all the same.
    pub reject_junk: bool,
    /// More words that are names of fields, not content (the input's own keys, for
    /// example the seed's `role` and `concept`).
    pub field_names: Vec<String>,
    /// Values of a worked example shown to the model: one of them coming back (three
    /// words or more, compared without punctuation) was copied, not written for this subject.
    pub borrowed: Vec<String>,
    /// The string at each JSON Pointer must be at least this many characters long.
    pub min_chars: Vec<(String, usize)>,
    /// The string at each JSON Pointer must name one of `names`.
    pub mentions: Vec<(String, Vec<String>)>,
    /// Checks of the caller's own, run after the rules above.
    pub checks: Vec<ContentCheck>,
}

impl Default for ContentRules {
    fn default() -> Self {
        Self {
            reject_junk: true,
            field_names: Vec::new(),
            borrowed: Vec::new(),
            min_chars: Vec::new(),
            mentions: Vec::new(),
            checks: Vec::new(),
        }
    }
}

impl fmt::Debug for ContentRules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContentRules")
            .field("reject_junk", &self.reject_junk)
            .field("field_names", &self.field_names)
            .field("borrowed", &self.borrowed.len())
            .field("min_chars", &self.min_chars)
            .field("mentions", &self.mentions)
            .field("checks", &self.checks.len())
            .finish()
    }
}

impl ContentRules {
    /// No content rules at all (for callers that check the value themselves).
    pub fn none() -> Self {
        Self { reject_junk: false, ..Self::default() }
    }
}

/// Values that stand in for content in templates and examples (compared normalised).
const PLACEHOLDERS: &[&str] = &[
    "string", "text", "value", "example", "placeholder", "todo", "tbd", "n/a", "lorem ipsum", "one sentence summary",
    "a sentence", "one sentence", "summary", "your text here", "your answer", "insert here", "insert text here",
    "description", "etc", "xxx", "integer", "number", "boolean", "array", "object", "null", "undefined",
];

/// Lowercase, `_`/`-`/camelCase split into spaces, single spaces, no surrounding punctuation.
pub(crate) fn normalise(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut previous_lower = false;
    for c in text.chars() {
        if c == '_' || c == '-' || c.is_whitespace() {
            out.push(' ');
            previous_lower = false;
            continue;
        }
        if c.is_uppercase() && previous_lower {
            out.push(' ');
        }
        previous_lower = c.is_lowercase();
        out.extend(c.to_lowercase());
    }
    let words: Vec<&str> = out.split_whitespace().collect();
    words.join(" ").trim_matches(|c: char| matches!(c, '.' | ',' | ';' | ':' | '!' | '"' | '\'' | '[' | ']' | '{' | '}')).trim().to_string()
}

/// Only the words, lowercase, one space apart: for telling a copied phrase despite its
/// punctuation.
fn plain(text: &str) -> String {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\'')).filter(|w| !w.is_empty()).map(str::to_lowercase).collect::<Vec<_>>().join(" ")
}

/// What the schema itself says: its field names, its descriptions and titles, and the
/// strings it allows by `enum`/`const` (which are content by definition).
#[derive(Default)]
struct SchemaWords {
    fields: BTreeSet<String>,
    descriptions: BTreeSet<String>,
    allowed: BTreeSet<String>,
    borrowed: BTreeSet<String>,
}

fn schema_words(schema: &Value, words: &mut SchemaWords) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                match key.as_str() {
                    "properties" => {
                        if let Value::Object(properties) = value {
                            for (name, sub) in properties {
                                words.fields.insert(normalise(name));
                                schema_words(sub, words);
                            }
                        }
                    }
                    "description" | "title" => {
                        if let Value::String(text) = value {
                            words.descriptions.insert(normalise(text));
                        }
                    }
                    "enum" => {
                        for item in value.as_array().into_iter().flatten() {
                            if let Value::String(text) = item {
                                words.allowed.insert(normalise(text));
                            }
                        }
                    }
                    "const" => {
                        if let Value::String(text) = value {
                            words.allowed.insert(normalise(text));
                        }
                    }
                    _ => schema_words(value, words),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| schema_words(item, words)),
        _ => {}
    }
}

/// `text` without spaces, `_` or `-`, lowercase: `Open Guidance`, `openguidance` and
/// `open_guidance` alike.
fn compact(text: &str) -> String {
    normalise(text).replace(' ', "")
}

/// The field a string of field names is made of: only field names (any case or
/// spacing), numbers and `=` (`openguidance 1 = stateUpdates`, `stateupdate 1 =`), or
/// `name = value` fragments keyed by field names (`mood = tense`) — a small model
/// writing the schema's words back with the grammar's punctuation, not content.
fn field_filler(text: &str, words: &SchemaWords) -> Option<String> {
    let fields: Vec<(String, &String)> = words.fields.iter().map(|f| (f.replace(' ', ""), f)).filter(|(c, _)| !c.is_empty()).collect();
    let field_of = |piece: &str| {
        let piece = compact(piece);
        fields.iter().find(|(c, _)| same_word(&piece, c)).map(|(_, f)| (*f).clone())
    };
    // Only field names between numbers and `=`.
    let pieces: Vec<&str> = text.split(|c: char| c.is_ascii_digit() || matches!(c, '=' | ':' | ',' | ';' | '#')).filter(|p| p.chars().any(char::is_alphanumeric)).collect();
    if !pieces.is_empty() {
        let named: Option<Vec<String>> = pieces.iter().map(|p| field_of(p)).collect();
        if let Some(first) = named.and_then(|n| n.into_iter().next()) {
            return Some(first);
        }
    }
    // `name = value` fragments, each keyed by a field name.
    if text.contains('=') {
        let keys: Vec<&str> = text.split([',', ';', '\n']).filter(|f| !f.trim().is_empty()).map(|f| f.split('=').next().unwrap_or("")).collect();
        let keyed: Option<Vec<String>> = keys.iter().map(|k| field_of(k.trim_matches(|c: char| c.is_ascii_digit() || c.is_whitespace()))).collect();
        if let Some(first) = keyed.and_then(|k| k.into_iter().next()) {
            return Some(first);
        }
    }
    None
}

/// The property names `schema` declares, at any depth: for a caller that sends a model
/// less of a schema than its type has, whose left-out fields are still not content.
pub fn field_names(schema: &Value) -> Vec<String> {
    let mut words = SchemaWords::default();
    schema_words(schema, &mut words);
    words.fields.into_iter().collect()
}

/// Whether `word` is `field` or its singular or plural.
fn same_word(word: &str, field: &str) -> bool {
    word == field || format!("{word}s") == field || format!("{field}s") == word
}

/// Only dots, dashes, ellipses, question marks and the like: a gap where words belong.
fn only_marks(text: &str) -> bool {
    !text.trim().is_empty() && text.chars().all(|c| !c.is_alphanumeric())
}

/// `<trait>`, `[name]`, `{description}`: a template slot left unfilled.
fn template_slot(text: &str) -> bool {
    let t = text.trim();
    let wrapped = [('<', '>'), ('[', ']'), ('{', '}')].iter().any(|(a, b)| t.starts_with(*a) && t.ends_with(*b));
    wrapped && t.split_whitespace().count() <= 4
}

/// An HTML tag or attribute (`<a href=`, `</div>`, `<br>`): a small model recalling web
/// pages, never what a character sheet says. `a < b` and `<3` are not tags.
fn markup(text: &str) -> bool {
    let lower = text.to_lowercase();
    if ["href=", "src=", "&nbsp;", "&quot;"].iter().any(|a| lower.contains(a)) {
        return true;
    }
    lower.match_indices('<').any(|(i, _)| {
        let rest = &lower[i + 1..];
        let rest = rest.strip_prefix('/').unwrap_or(rest);
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
        let after = rest[name.len()..].chars().next();
        !name.is_empty() && name.starts_with(|c: char| c.is_ascii_alphabetic()) && name.len() <= 10 && matches!(after, None | Some(' ' | '>' | '/'))
    })
}

/// Every problem of `value` under `rules`, located by JSON Pointer.
pub fn check(schema: &Value, value: &Value, rules: &ContentRules) -> Vec<SchemaError> {
    let mut problems = Vec::new();
    if rules.reject_junk {
        let mut words = SchemaWords::default();
        schema_words(schema, &mut words);
        words.fields.extend(rules.field_names.iter().map(|f| normalise(f)));
        words.borrowed.extend(rules.borrowed.iter().map(|b| plain(b)).filter(|b| b.split(' ').count() >= 3));
        walk(value, "", &words, &mut problems);
    }
    for (pointer, min) in &rules.min_chars {
        if let Some(text) = value.pointer(pointer).and_then(Value::as_str) {
            let length = text.trim().chars().count();
            if length < *min {
                problems.push(problem(
                    pointer,
                    "too-short",
                    format!("is {length} characters long; write at least {min} characters of real prose"),
                ));
            }
        }
    }
    for (pointer, names) in &rules.mentions {
        if let Some(text) = value.pointer(pointer).and_then(Value::as_str) {
            if !names.iter().any(|name| mentions(text, name)) {
                let list = names.iter().map(|n| format!("\"{n}\"")).collect::<Vec<_>>().join(" or ");
                problems.push(problem(pointer, "unnamed", format!("never names {list}: write about them by name")));
            }
        }
    }
    for check in &rules.checks {
        problems.extend(check(value));
    }
    problems.sort_by(|a, b| a.path.cmp(&b.path));
    problems
}

fn problem(path: &str, rule: &str, message: String) -> SchemaError {
    SchemaError { path: path.to_string(), message, schema_path: format!("content/{rule}") }
}

fn walk(value: &Value, path: &str, words: &SchemaWords, problems: &mut Vec<SchemaError>) {
    match value {
        Value::String(text) => {
            if let Some(why) = junk_string(text, words) {
                problems.push(problem(path, "junk", why));
            }
        }
        Value::Array(items) => {
            let filled: Vec<&Value> = items.iter().filter(|i| !matches!(i, Value::String(s) if s.trim().is_empty())).collect();
            if filled.len() >= 2 {
                let first = comparable(filled[0]);
                if filled.iter().all(|item| comparable(item) == first) {
                    problems.push(problem(path, "repeated", format!("has {} items that are all the same; each item must say something different", filled.len())));
                }
            }
            for (i, item) in items.iter().enumerate() {
                walk(item, &format!("{path}/{i}"), words, problems);
            }
        }
        Value::Object(map) => {
            // Two fields of one object saying the same sentence (a confident and a
            // stressed line both "I love you.", a surface and a deep goal alike): the
            // second says nothing of its own.
            let mut said: Vec<(&str, String)> = Vec::new();
            for (key, item) in map {
                let escaped = key.replace('~', "~0").replace('/', "~1");
                if let Value::String(text) = item
                    && text.split_whitespace().count() >= 2
                {
                    let norm = normalise(text);
                    if let Some((first, _)) = said.iter().find(|(_, n)| *n == norm) {
                        problems.push(problem(
                            &format!("{path}/{escaped}"),
                            "repeated",
                            format!("says the same as {first:?}; each field must say something of its own"),
                        ));
                    } else {
                        said.push((key.as_str(), norm));
                    }
                }
                walk(item, &format!("{path}/{escaped}"), words, problems);
            }
        }
        _ => {}
    }
}

fn comparable(value: &Value) -> String {
    match value {
        Value::String(text) => normalise(text),
        other => other.to_string(),
    }
}

/// Why `text` is not content, if it is not.
fn junk_string(text: &str, words: &SchemaWords) -> Option<String> {
    if text.trim().is_empty() {
        return None;
    }
    let norm = normalise(text);
    if words.allowed.contains(&norm) {
        return None;
    }
    if only_marks(text) || template_slot(text) {
        return Some(format!("{text:?} is a placeholder, not content"));
    }
    if let Some(field) = words.fields.iter().find(|field| same_word(&norm, field)) {
        return Some(format!("{text:?} is the name of the field {field:?}, not content"));
    }
    if let Some(field) = field_filler(text, words) {
        return Some(format!("{text:?} is made of the field name {field:?}, not content"));
    }
    if PLACEHOLDERS.contains(&norm.as_str()) || words.descriptions.contains(&norm) {
        return Some(format!("{text:?} is a placeholder or the schema's own description, not content"));
    }
    if ["\"}", "{\"", "[\"", "\"]", "\":", "”}", "}}"].iter().any(|piece| text.contains(piece)) {
        return Some(format!("{text:?} has pieces of JSON in it, not content"));
    }
    if !text.chars().any(char::is_alphabetic) {
        return Some(format!("{text:?} has no words in it"));
    }
    if markup(text) {
        return Some(format!("{text:?} has web markup in it, not content"));
    }
    if words.borrowed.contains(&plain(text)) {
        return Some(format!("{text:?} is copied from the worked example, not written for this subject"));
    }
    None
}

/// Whether `text` names `name`: the whole name, or one of its words of three letters
/// or more, as a word of its own (case-insensitive).
pub fn mentions(text: &str, name: &str) -> bool {
    let words: Vec<String> = text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect();
    let name_words: Vec<String> = name.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect();
    if name_words.is_empty() {
        return true;
    }
    if words.windows(name_words.len()).any(|w| w == name_words.as_slice()) {
        return true;
    }
    name_words.iter().filter(|w| w.chars().count() >= 3).any(|part| words.iter().any(|w| w == part))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "narrative": {"type": "string", "description": "Rich prose, two to four paragraphs."},
                "structured": {"type": "object", "properties": {
                    "core_traits": {"type": "array", "items": {"type": "string"}},
                    "fears": {"type": "array", "items": {"type": "string"}},
                    "emotional_baseline": {"type": "string"},
                    "tone": {"enum": ["warm", "cold"]}
                }}
            }
        })
    }

    fn problems(value: Value, rules: &ContentRules) -> Vec<String> {
        check(&schema(), &value, rules).iter().map(|p| format!("{} [{}]", p, p.schema_path)).collect()
    }

    /// The Director's guidance a 270M model wrote (schema field names with the grammar's
    /// punctuation) is filler; prose that merely uses such a word is not.
    #[test]
    fn field_names_with_numbers_and_equals_are_filler() {
        let rules = ContentRules { field_names: vec!["openGuidance".into(), "stateUpdates".into(), "mood".into()], ..ContentRules::default() };
        let junk = ["openguidance 1 = stateUpdates", "stateupdate 1 = openGuidance 1 = ", "Open Guidance", "openguidance 2 = stateUpdates", "mood = tense, fears = 2"];
        for text in junk {
            let found = problems(json!({ "narrative": text }), &rules);
            assert!(found.iter().any(|p| p.contains("field")), "{text:?}: {found:?}");
        }
        for text in ["Offer the open guidance of the harbour master.", "Her mood = grim, she says.", "Ask Bastien about the chart: 3 crowns."] {
            let found = problems(json!({ "narrative": text }), &rules);
            assert!(found.is_empty(), "{text:?}: {found:?}");
        }
    }

    #[test]
    fn every_kind_of_junk_is_named_where_it_is() {
        let junk = json!({
            "narrative": "...",
            "structured": {
                "core_traits": ["fear", "secrets", "Emotional Baseline", "<trait>"],
                "fears": ["drowning", "drowning", "1000010", "The sound of a bell, under water.", "wry"],
                "emotional_baseline": "one sentence summary",
                "triggers": ["the tide", "The tide."],
                "secrets": ["fears [", "I didn't want to.\"}, ", "her sister died.”}}}", "<a href=", "she hid it </div>"],
                "tone": "warm",
                "sample_dialogue": {"confident": "I love you.", "stressed": "I love you.", "sarcastic": "Oh, lovely."}
            }
        });
        let rules = ContentRules {
            field_names: vec!["secrets".into()],
            borrowed: vec!["the sound of a bell under water".into(), "wry".into()],
            ..ContentRules::default()
        };
        expect_test::expect![[r#"
            at /narrative: "..." is a placeholder, not content [content/junk]
            at /structured/core_traits/0: "fear" is the name of the field "fears", not content [content/junk]
            at /structured/core_traits/1: "secrets" is the name of the field "secrets", not content [content/junk]
            at /structured/core_traits/2: "Emotional Baseline" is the name of the field "emotional baseline", not content [content/junk]
            at /structured/core_traits/3: "<trait>" is a placeholder, not content [content/junk]
            at /structured/emotional_baseline: "one sentence summary" is a placeholder or the schema's own description, not content [content/junk]
            at /structured/fears/2: "1000010" has no words in it [content/junk]
            at /structured/fears/3: "The sound of a bell, under water." is copied from the worked example, not written for this subject [content/junk]
            at /structured/sample_dialogue/stressed: says the same as "confident"; each field must say something of its own [content/repeated]
            at /structured/secrets/0: "fears [" is the name of the field "fears", not content [content/junk]
            at /structured/secrets/1: "I didn't want to.\"}, " has pieces of JSON in it, not content [content/junk]
            at /structured/secrets/2: "her sister died.”}}}" has pieces of JSON in it, not content [content/junk]
            at /structured/secrets/3: "<a href=" has web markup in it, not content [content/junk]
            at /structured/secrets/4: "she hid it </div>" has web markup in it, not content [content/junk]
            at /structured/triggers: has 2 items that are all the same; each item must say something different [content/repeated]"#]]
        .assert_eq(&problems(junk, &rules).join("\n"));
    }

    #[test]
    fn real_content_passes_and_the_schema_description_echoed_does_not() {
        let good = json!({
            "narrative": "Ilse Marrow keeps the northern light and trades in secrets to keep it lit.",
            "structured": {"core_traits": ["stubborn", "dry-humoured", "watchful", "loyal"], "fears": ["the dark", "debt", "a harbour of <3 ships"], "emotional_baseline": "guarded calm", "tone": "cold"}
        });
        let rules = ContentRules {
            min_chars: vec![("/narrative".into(), 40)],
            mentions: vec![("/narrative".into(), vec!["Ilse Marrow".into()])],
            ..ContentRules::default()
        };
        assert!(problems(good, &rules).is_empty());
        let echoed = json!({"narrative": "Rich prose, two to four paragraphs.", "structured": {}});
        let shown = problems(echoed, &rules).join("\n");
        assert!(shown.contains("schema's own description"), "{shown}");
        assert!(shown.contains("never names \"Ilse Marrow\""), "{shown}");
        assert!(shown.contains("write at least 40 characters"), "{shown}");
    }

    #[test]
    fn names_are_found_as_words() {
        assert!(mentions("Marrow climbed the stair.", "Ilse Marrow"));
        assert!(mentions("ilse  marrow smiled", "Ilse Marrow"));
        assert!(!mentions("The marrowbone soup.", "Ilse Marrow"));
        assert!(!mentions("She climbed the stair.", "Ilse Marrow"));
        assert!(mentions("Bo waved.", "Bo"));
    }

    #[test]
    fn normalising_splits_camel_case_and_underscores() {
        assert_eq!(normalise("actingCharacters"), "acting characters");
        assert_eq!(normalise(" core_traits. "), "core traits");
        assert_eq!(normalise("Emotional-Baseline"), "emotional baseline");
    }
}
