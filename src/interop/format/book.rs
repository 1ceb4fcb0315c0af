//! The Character Card lorebook (`character_book` in V2/V3 cards) and the standalone
//! `{"spec": "lorebook_v3", "data": ...}` file.
//!
//! The spec's own fields map directly; SillyTavern's extra settings travel in each
//! entry's `extensions` under snake_case names (`exclude_recursion`, `group_weight`,
//! `sticky`, ...), which is how SillyTavern itself writes them into cards. Those are
//! lifted into typed fields on import and written back on export.

use super::fields::{Fields, nullable, put_opt};
use super::preserve::preserve;
use super::FormatError;
use crate::lorebook::{CharacterFilter, EntryId, InsertionPosition, LoreEntry, Lorebook, SourceDocument, SourceFormat};
use serde_json::{Map, Value, json};

/// Which card version a book is written for: V3 requires `use_regex` on every entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BookFlavor {
    V2,
    V3,
}

/// Read a `character_book` object.
pub fn decode_character_book(value: Value, path: &str) -> Result<Lorebook, FormatError> {
    let source = value.clone();
    let mut f = Fields::new(value, path)?;
    let entries = match f.take("entries") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items,
        Some(other) => return Err(f.error("entries", format!("expected a list, found {}", super::fields::kind(&other)))),
    };
    let mut book = decode_book_fields(&mut f)?;
    book.entries = entries
        .into_iter()
        .enumerate()
        .map(|(i, e)| decode_entry(e, &f.child(&format!("entries[{i}]"))))
        .collect::<Result<_, _>>()?;
    if exported_by_sillytavern(&book.entries) {
        // SillyTavern writes `use_regex: true` on every entry of a card's book ("ST keys
        // are always regex") and ignores the field when it reads a card: its keys are
        // plain text unless written `/pattern/flags`. Read as regular expressions, "C++"
        // or "who?" would fire on any "c" or on "whoever". The field is kept for export.
        for e in &mut book.entries {
            e.use_regex = false;
            e.extra.insert("use_regex".into(), json!(true));
        }
    }
    book.extra = f.rest();
    book.source = Some(SourceDocument { format: SourceFormat::CharacterBook, json: without_entries(source) });
    Ok(book)
}

/// Read a `lorebook_v3` file (its `spec` already checked by the caller).
pub fn decode_lorebook_v3(value: Value) -> Result<Lorebook, FormatError> {
    let source = value.clone();
    let mut f = Fields::new(value, "")?;
    let data = f.take("data").ok_or_else(|| f.error("data", "missing"))?;
    let mut book = decode_character_book(data, "data")?;
    let mut wrapper = source;
    if let Some(Value::Object(data)) = wrapper.get_mut("data") {
        data.insert("entries".into(), Value::Null);
    }
    book.source = Some(SourceDocument { format: SourceFormat::LorebookV3, json: wrapper });
    Ok(book)
}

fn decode_book_fields(f: &mut Fields) -> Result<Lorebook, FormatError> {
    Ok(Lorebook {
        name: f.string("name")?,
        description: f.string("description")?,
        scan_depth: f.count("scan_depth")?,
        token_budget: f.count("token_budget")?,
        recursive_scanning: f.bool("recursive_scanning")?,
        extensions: f.object_or_empty("extensions")?,
        ..Default::default()
    })
}

/// `entries` replaced by `null`, so the stored source keeps its key order without
/// duplicating the entries (each entry keeps its own source).
fn without_entries(mut value: Value) -> Value {
    if let Value::Object(map) = &mut value
        && map.contains_key("entries")
    {
        map.insert("entries".into(), Value::Null);
    }
    value
}

/// Whether a book is SillyTavern's card export: every entry says `use_regex: true` and
/// carries an extension field SillyTavern names in camel case.
fn exported_by_sillytavern(entries: &[LoreEntry]) -> bool {
    let st_written = |e: &LoreEntry| {
        e.source.as_ref().and_then(|s| s.json.get("extensions")).is_some_and(|x| x.get("selectiveLogic").is_some() || x.get("useProbability").is_some())
    };
    !entries.is_empty() && entries.iter().all(|e| e.use_regex && st_written(e))
}

/// Read one `character_book` entry.
pub fn decode_entry(value: Value, path: &str) -> Result<LoreEntry, FormatError> {
    let source = value.clone();
    let mut f = Fields::new(value, path)?;
    let mut ext = Fields::new(Value::Object(f.object_or_empty("extensions")?), f.child("extensions"))?;
    let mut e = LoreEntry {
        keys: f.strings_or_empty("keys")?,
        content: f.string_or_empty("content")?,
        enabled: f.bool("enabled")?.unwrap_or(true),
        insertion_order: f.int("insertion_order")?.unwrap_or(100),
        use_regex: f.bool("use_regex")?.unwrap_or(false),
        constant: f.bool("constant")?.unwrap_or(false),
        name: f.string("name")?,
        priority: f.int("priority")?,
        id: take_id(&mut f, "id")?,
        comment: f.string_or_empty("comment")?,
        selective: f.bool("selective")?.unwrap_or(false),
        secondary_keys: f.strings_or_empty("secondary_keys")?,
        ..Default::default()
    };
    let top_case = f.bool("case_sensitive")?;
    let ext_case = ext.bool("case_sensitive")?;
    e.case_sensitive = top_case.or(ext_case);
    let spec_position = f.string("position")?;
    e.position = match ext.int("position")? {
        Some(code) => InsertionPosition::from(code),
        None if spec_position.as_deref() == Some("before_char") => InsertionPosition::BeforeCharacter,
        None => InsertionPosition::AfterCharacter,
    };
    e.exclude_recursion = ext.bool("exclude_recursion")?.unwrap_or(false);
    e.prevent_recursion = ext.bool("prevent_recursion")?.unwrap_or(false);
    e.delay_until_recursion = ext.count("delay_until_recursion")?.unwrap_or(0);
    e.display_index = ext.int("display_index")?;
    e.probability = ext.count("probability")?.unwrap_or(100);
    e.use_probability = ext.bool("useProbability")?.unwrap_or(true);
    e.depth = ext.count("depth")?.unwrap_or(crate::lorebook::DEFAULT_DEPTH);
    e.selective_logic = ext.int("selectiveLogic")?.unwrap_or(0).into();
    e.outlet_name = ext.string_or_empty("outlet_name")?;
    e.group = ext.string_or_empty("group")?;
    e.group_override = ext.bool("group_override")?.unwrap_or(false);
    e.group_weight = ext.count("group_weight")?.unwrap_or(crate::lorebook::DEFAULT_GROUP_WEIGHT);
    e.scan_depth = ext.count("scan_depth")?;
    e.match_whole_words = ext.bool("match_whole_words")?;
    e.use_group_scoring = ext.bool("use_group_scoring")?;
    e.automation_id = ext.string_or_empty("automation_id")?;
    e.role = ext.int("role")?.unwrap_or(0).into();
    e.vectorized = ext.bool("vectorized")?.unwrap_or(false);
    e.sticky = ext.count("sticky")?;
    e.cooldown = ext.count("cooldown")?;
    e.delay = ext.count("delay")?;
    e.match_sources.persona_description = ext.bool("match_persona_description")?.unwrap_or(false);
    e.match_sources.character_description = ext.bool("match_character_description")?.unwrap_or(false);
    e.match_sources.character_personality = ext.bool("match_character_personality")?.unwrap_or(false);
    e.match_sources.character_depth_prompt = ext.bool("match_character_depth_prompt")?.unwrap_or(false);
    e.match_sources.scenario = ext.bool("match_scenario")?.unwrap_or(false);
    e.match_sources.creator_notes = ext.bool("match_creator_notes")?.unwrap_or(false);
    e.triggers = ext.strings_or_empty("triggers")?;
    e.ignore_budget = ext.bool("ignore_budget")?.unwrap_or(false);
    if let Some(filter) = ext.object("character_filter")? {
        e.character_filter = decode_filter(filter, &ext.child("character_filter"), "is_exclude")?;
    }
    // SillyTavern derives the memo toggle from the comment; ours is kept when written.
    e.add_memo = ext.bool("add_memo")?.unwrap_or(!e.comment.is_empty());
    e.extensions = ext.rest();
    e.extra = f.rest();
    e.source = Some(SourceDocument { format: SourceFormat::CharacterBook, json: source });
    Ok(e)
}

pub(super) fn take_id(f: &mut Fields, key: &str) -> Result<Option<EntryId>, FormatError> {
    match f.take(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(EntryId::Text(s))),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(i) => Ok(Some(EntryId::Number(i))),
            None => Ok(Some(EntryId::Text(n.to_string()))),
        },
        Some(other) => Err(f.error(key, format!("expected a number or text, found {}", super::fields::kind(&other)))),
    }
}

pub(super) fn decode_filter(map: Map<String, Value>, path: &str, exclude_key: &str) -> Result<CharacterFilter, FormatError> {
    let mut f = Fields::new(Value::Object(map), path)?;
    Ok(CharacterFilter {
        is_exclude: f.bool(exclude_key)?.unwrap_or(false),
        names: f.strings_or_empty("names")?,
        tags: f.strings_or_empty("tags")?,
    })
}

pub(super) fn id_value(id: &Option<EntryId>) -> Option<Value> {
    id.as_ref().map(|id| match id {
        EntryId::Number(n) => json!(n),
        EntryId::Text(t) => json!(t),
    })
}

/// Every field of an entry in `character_book` shape, ignoring how it was read.
fn fresh_entry(e: &LoreEntry, flavor: BookFlavor) -> Value {
    let mut ext = e.extensions.clone();
    let st: [(&str, Value); 33] = [
        ("position", json!(i64::from(e.position))),
        ("exclude_recursion", json!(e.exclude_recursion)),
        ("display_index", nullable(e.display_index)),
        ("probability", json!(e.probability)),
        ("useProbability", json!(e.use_probability)),
        ("depth", json!(e.depth)),
        ("selectiveLogic", json!(i64::from(e.selective_logic))),
        ("outlet_name", json!(e.outlet_name)),
        ("group", json!(e.group)),
        ("group_override", json!(e.group_override)),
        ("group_weight", json!(e.group_weight)),
        ("prevent_recursion", json!(e.prevent_recursion)),
        ("delay_until_recursion", json!(e.delay_until_recursion)),
        ("scan_depth", nullable(e.scan_depth)),
        ("match_whole_words", nullable(e.match_whole_words)),
        ("use_group_scoring", nullable(e.use_group_scoring)),
        ("case_sensitive", nullable(e.case_sensitive)),
        ("automation_id", json!(e.automation_id)),
        ("role", json!(i64::from(e.role))),
        ("vectorized", json!(e.vectorized)),
        ("sticky", nullable(e.sticky)),
        ("cooldown", nullable(e.cooldown)),
        ("delay", nullable(e.delay)),
        ("match_persona_description", json!(e.match_sources.persona_description)),
        ("match_character_description", json!(e.match_sources.character_description)),
        ("match_character_personality", json!(e.match_sources.character_personality)),
        ("match_character_depth_prompt", json!(e.match_sources.character_depth_prompt)),
        ("match_scenario", json!(e.match_sources.scenario)),
        ("match_creator_notes", json!(e.match_sources.creator_notes)),
        ("triggers", json!(e.triggers)),
        ("ignore_budget", json!(e.ignore_budget)),
        ("add_memo", json!(e.add_memo)),
        ("character_filter", if e.character_filter.is_empty() {
            Value::Null
        } else {
            json!({"is_exclude": e.character_filter.is_exclude, "names": e.character_filter.names, "tags": e.character_filter.tags})
        }),
    ];
    for (key, value) in st {
        if key == "character_filter" && value.is_null() || key == "display_index" && value.is_null() {
            continue;
        }
        ext.insert(key.to_string(), value);
    }
    let mut m = Map::new();
    m.insert("keys".into(), json!(e.keys));
    m.insert("content".into(), json!(e.content));
    m.insert("extensions".into(), Value::Object(ext));
    m.insert("enabled".into(), json!(e.enabled));
    m.insert("insertion_order".into(), json!(e.insertion_order));
    if flavor == BookFlavor::V3 || e.use_regex {
        m.insert("use_regex".into(), json!(e.use_regex));
    }
    put_opt(&mut m, "case_sensitive", e.case_sensitive);
    m.insert("constant".into(), json!(e.constant));
    put_opt(&mut m, "name", e.name.clone());
    put_opt(&mut m, "priority", e.priority);
    put_opt(&mut m, "id", id_value(&e.id));
    m.insert("comment".into(), json!(e.comment));
    m.insert("selective".into(), json!(e.selective));
    m.insert("secondary_keys".into(), json!(e.secondary_keys));
    let position = if e.position == InsertionPosition::BeforeCharacter { "before_char" } else { "after_char" };
    m.insert("position".into(), json!(position));
    for (key, value) in &e.extra {
        m.entry(key.clone()).or_insert_with(|| value.clone());
    }
    Value::Object(m)
}

/// An entry in `character_book` shape: the document it was read from, changed only
/// where the entry was (see [`preserve`]), with the fields `flavor` requires.
pub fn encode_entry(e: &LoreEntry, flavor: BookFlavor) -> Value {
    let fresh = fresh_entry(e, flavor);
    let mut out = match &e.source {
        Some(SourceDocument { format: SourceFormat::CharacterBook, json: source }) => match decode_entry(source.clone(), "") {
            Ok(base) => preserve(source, &fresh_entry(&base, flavor), &fresh),
            Err(_) => fresh.clone(),
        },
        _ => fresh.clone(),
    };
    ensure_fields(&mut out, &fresh, required_entry_fields(flavor));
    out
}

fn required_entry_fields(flavor: BookFlavor) -> &'static [&'static str] {
    match flavor {
        BookFlavor::V2 => &["keys", "content", "extensions", "enabled", "insertion_order"],
        BookFlavor::V3 => &["keys", "content", "extensions", "enabled", "insertion_order", "use_regex"],
    }
}

/// Copy from `fresh` the `required` fields `out` lacks, so a sloppy source still
/// exports as a valid document.
pub(super) fn ensure_fields(out: &mut Value, fresh: &Value, required: &[&str]) {
    if let (Value::Object(out), Value::Object(fresh)) = (out, fresh) {
        for key in required {
            if !out.contains_key(*key)
                && let Some(v) = fresh.get(*key)
            {
                out.insert((*key).to_string(), v.clone());
            }
        }
    }
}

fn fresh_book_fields(book: &Lorebook) -> Value {
    let mut m = Map::new();
    put_opt(&mut m, "name", book.name.clone());
    put_opt(&mut m, "description", book.description.clone());
    put_opt(&mut m, "scan_depth", book.scan_depth);
    put_opt(&mut m, "token_budget", book.token_budget);
    put_opt(&mut m, "recursive_scanning", book.recursive_scanning);
    m.insert("extensions".into(), Value::Object(book.extensions.clone()));
    m.insert("entries".into(), Value::Null);
    for (key, value) in &book.extra {
        m.entry(key.clone()).or_insert_with(|| value.clone());
    }
    Value::Object(m)
}

/// The book-level settings of a stored source (its entries are not needed).
fn decode_book_level(source: &Value) -> Option<Lorebook> {
    let mut f = Fields::new(source.clone(), "").ok()?;
    f.take("entries");
    let mut book = decode_book_fields(&mut f).ok()?;
    book.extra = f.rest();
    Some(book)
}

/// The book-level source in `character_book` shape, if the book was read as one.
fn inner_source(book: &Lorebook) -> Option<&Value> {
    match &book.source {
        Some(SourceDocument { format: SourceFormat::CharacterBook, json }) => Some(json),
        Some(SourceDocument { format: SourceFormat::LorebookV3, json }) => json.get("data"),
        _ => None,
    }
}

/// A book in `character_book` shape.
pub fn encode_character_book(book: &Lorebook, flavor: BookFlavor) -> Value {
    let fresh = fresh_book_fields(book);
    let mut out = match inner_source(book) {
        Some(source) => match decode_book_level(source) {
            Some(base) => preserve(source, &fresh_book_fields(&base), &fresh),
            None => fresh.clone(),
        },
        None => fresh.clone(),
    };
    ensure_fields(&mut out, &fresh, &["extensions"]);
    if let Value::Object(m) = &mut out {
        m.insert("entries".into(), Value::Array(book.entries.iter().map(|e| encode_entry(e, flavor)).collect()));
    }
    out
}

/// A book as a standalone `lorebook_v3` file.
pub fn encode_lorebook_v3(book: &Lorebook) -> Value {
    let inner = encode_character_book(book, BookFlavor::V3);
    match &book.source {
        Some(SourceDocument { format: SourceFormat::LorebookV3, json: Value::Object(wrapper) }) => {
            let mut wrapper = wrapper.clone();
            wrapper.insert("data".into(), inner);
            Value::Object(wrapper)
        }
        _ => json!({"spec": "lorebook_v3", "data": inner}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn st_extensions_become_typed_fields_and_come_back() {
        let entry = json!({
            "keys": ["tower"], "content": "The tower hums.", "extensions": {"position": 4, "depth": 2, "role": 1,
            "sticky": 3, "group": "a,b", "selectiveLogic": 3, "other/tool": {"x": 1}},
            "enabled": true, "insertion_order": 5, "use_regex": false, "id": "t-1", "position": "after_char"
        });
        let e = decode_entry(entry.clone(), "e").unwrap();
        assert_eq!(e.position, InsertionPosition::AtDepth);
        assert_eq!((e.depth, e.sticky, e.groups()), (2, Some(3), vec!["a", "b"]));
        assert_eq!(e.selective_logic, crate::lorebook::SelectiveLogic::AndAll);
        assert_eq!(e.id, Some(EntryId::Text("t-1".into())));
        assert_eq!(e.extensions.keys().collect::<Vec<_>>(), vec!["other/tool"]);
        assert_eq!(encode_entry(&e, BookFlavor::V3), entry);
    }

    #[test]
    fn an_edit_changes_only_its_field() {
        let entry = json!({"keys": "a, b", "content": "x", "extensions": {}, "enabled": 1, "insertion_order": "7"});
        let mut e = decode_entry(entry, "e").unwrap();
        e.sticky = Some(2);
        let out = encode_entry(&e, BookFlavor::V2);
        assert_eq!(out, json!({"keys": "a, b", "content": "x", "extensions": {"sticky": 2}, "enabled": 1, "insertion_order": "7"}));
    }

    #[test]
    fn sillytaverns_use_regex_marker_keeps_plain_keys_plain_and_is_written_back() {
        // As SillyTavern's card export writes every entry.
        let st = json!({"keys": ["C++", "who?"], "content": "x", "use_regex": true, "enabled": true, "insertion_order": 1,
            "extensions": {"selectiveLogic": 0, "useProbability": true, "display_index": 0}});
        let book = decode_character_book(json!({"entries": [st.clone(), st]}), "").unwrap();
        let e = &book.entries[0];
        assert!(!e.use_regex, "SillyTavern matches these keys as text");
        assert_eq!(encode_entry(e, BookFlavor::V2)["use_regex"], json!(true));
        // Another tool's entry that asks for regular expressions gets them, and so does
        // one entry of our own export among others that do not.
        let other = json!({"keys": ["gr[ae]y"], "content": "x", "use_regex": true, "enabled": true, "insertion_order": 1, "extensions": {}});
        assert!(decode_character_book(json!({"entries": [other]}), "").unwrap().entries[0].use_regex);
        let ours = |regex: bool| json!({"keys": ["gr[ae]y"], "content": "x", "use_regex": regex, "enabled": true, "insertion_order": 1,
            "extensions": {"selectiveLogic": 0, "useProbability": true}});
        assert!(decode_character_book(json!({"entries": [ours(true), ours(false)]}), "").unwrap().entries[0].use_regex);
    }

    #[test]
    fn v3_export_adds_the_required_use_regex() {
        let e = decode_entry(json!({"keys": [], "content": "", "extensions": {}, "enabled": true, "insertion_order": 1}), "e").unwrap();
        assert_eq!(encode_entry(&e, BookFlavor::V3)["use_regex"], json!(false));
        assert!(encode_entry(&e, BookFlavor::V2).get("use_regex").is_none());
    }
}
