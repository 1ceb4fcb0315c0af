//! SillyTavern World Info files: `{"entries": {"<uid>": {...}}}` with SillyTavern's
//! camelCase field names (`key`, `keysecondary`, `selectiveLogic`, `disable`, `order`,
//! numeric `position`, ...).
//!
//! A World Info file has no name of its own (SillyTavern names it after the file);
//! card-only fields with no World Info equivalent (`name`, `priority`, `use_regex`) are
//! kept under the entry's `extensions.lorekeeper` so a card book survives a trip through
//! World Info.

use super::book::{decode_filter, id_value, take_id};
use super::fields::{Fields, nullable, put_opt};
use super::preserve::preserve;
use super::FormatError;
use crate::lorebook::{EntryId, LoreEntry, Lorebook, SourceDocument, SourceFormat};
use serde_json::{Map, Value, json};

/// Read a World Info document.
pub fn decode_world_info(value: Value) -> Result<Lorebook, FormatError> {
    let mut source = value.clone();
    let mut f = Fields::new(value, "")?;
    let entries: Vec<(Option<String>, Value)> = match f.take("entries") {
        Some(Value::Object(map)) => map.into_iter().map(|(k, v)| (Some(k), v)).collect(),
        Some(Value::Array(items)) => items.into_iter().map(|v| (None, v)).collect(),
        None | Some(Value::Null) => Vec::new(),
        Some(other) => return Err(f.error("entries", format!("expected an object of entries, found {}", super::fields::kind(&other)))),
    };
    let mut book = Lorebook { name: f.string("name")?, ..Default::default() };
    for (i, (key, entry)) in entries.into_iter().enumerate() {
        let path = match &key {
            Some(k) => format!("entries[{k:?}]"),
            None => format!("entries[{i}]"),
        };
        let mut e = decode_entry(entry, &path)?;
        if e.id.is_none() {
            e.id = key.and_then(|k| k.parse::<i64>().ok()).map(EntryId::Number);
        }
        book.entries.push(e);
    }
    book.extra = f.rest();
    if let Value::Object(map) = &mut source {
        map.insert("entries".into(), Value::Null);
    }
    book.source = Some(SourceDocument { format: SourceFormat::WorldInfo, json: source });
    Ok(book)
}

/// Read one World Info entry.
pub fn decode_entry(value: Value, path: &str) -> Result<LoreEntry, FormatError> {
    let source = value.clone();
    let mut f = Fields::new(value, path)?;
    let mut e = LoreEntry {
        id: take_id(&mut f, "uid")?,
        keys: f.strings_or_empty("key")?,
        secondary_keys: f.strings_or_empty("keysecondary")?,
        comment: f.string_or_empty("comment")?,
        content: f.string_or_empty("content")?,
        constant: f.bool("constant")?.unwrap_or(false),
        vectorized: f.bool("vectorized")?.unwrap_or(false),
        selective: f.bool("selective")?.unwrap_or(true),
        selective_logic: f.int("selectiveLogic")?.unwrap_or(0).into(),
        add_memo: f.bool("addMemo")?.unwrap_or(false),
        insertion_order: f.int("order")?.unwrap_or(100),
        position: f.int("position")?.unwrap_or(0).into(),
        enabled: !f.bool("disable")?.unwrap_or(false),
        ignore_budget: f.bool("ignoreBudget")?.unwrap_or(false),
        exclude_recursion: f.bool("excludeRecursion")?.unwrap_or(false),
        prevent_recursion: f.bool("preventRecursion")?.unwrap_or(false),
        delay_until_recursion: f.count("delayUntilRecursion")?.unwrap_or(0),
        probability: f.count("probability")?.unwrap_or(100),
        use_probability: f.bool("useProbability")?.unwrap_or(true),
        depth: f.count("depth")?.unwrap_or(crate::lorebook::DEFAULT_DEPTH),
        outlet_name: f.string_or_empty("outletName")?,
        group: f.string_or_empty("group")?,
        group_override: f.bool("groupOverride")?.unwrap_or(false),
        group_weight: f.count("groupWeight")?.unwrap_or(crate::lorebook::DEFAULT_GROUP_WEIGHT),
        scan_depth: f.count("scanDepth")?,
        case_sensitive: f.bool("caseSensitive")?,
        match_whole_words: f.bool("matchWholeWords")?,
        use_group_scoring: f.bool("useGroupScoring")?,
        automation_id: f.string_or_empty("automationId")?,
        role: f.int("role")?.unwrap_or(0).into(),
        sticky: f.count("sticky")?,
        cooldown: f.count("cooldown")?,
        delay: f.count("delay")?,
        triggers: f.strings_or_empty("triggers")?,
        display_index: f.int("displayIndex")?,
        ..Default::default()
    };
    e.match_sources.persona_description = f.bool("matchPersonaDescription")?.unwrap_or(false);
    e.match_sources.character_description = f.bool("matchCharacterDescription")?.unwrap_or(false);
    e.match_sources.character_personality = f.bool("matchCharacterPersonality")?.unwrap_or(false);
    e.match_sources.character_depth_prompt = f.bool("matchCharacterDepthPrompt")?.unwrap_or(false);
    e.match_sources.scenario = f.bool("matchScenario")?.unwrap_or(false);
    e.match_sources.creator_notes = f.bool("matchCreatorNotes")?.unwrap_or(false);
    if let Some(filter) = f.object("characterFilter")? {
        e.character_filter = decode_filter(filter, &f.child("characterFilter"), "isExclude")?;
    }
    let mut extensions = f.object_or_empty("extensions")?;
    if let Some(Value::Object(ours)) = extensions.get("lorekeeper") {
        let mut ours = Fields::new(Value::Object(ours.clone()), f.child("extensions.lorekeeper"))?;
        e.name = ours.string("name")?;
        e.priority = ours.int("priority")?;
        e.use_regex = ours.bool("use_regex")?.unwrap_or(false);
        if let Some(Value::String(id)) = ours.take("id") {
            e.id = Some(EntryId::Text(id));
        }
        let rest = ours.rest();
        if rest.is_empty() {
            extensions.shift_remove("lorekeeper");
        } else {
            extensions.insert("lorekeeper".into(), Value::Object(rest));
        }
    }
    e.extensions = extensions;
    e.extra = f.rest();
    e.source = Some(SourceDocument { format: SourceFormat::WorldInfo, json: source });
    Ok(e)
}

/// Every field of an entry in World Info shape, in SillyTavern's template order.
fn fresh_entry(e: &LoreEntry, index: usize) -> Value {
    let mut m = Map::new();
    let uid = match &e.id {
        Some(EntryId::Number(n)) => json!(n),
        _ => json!(index),
    };
    m.insert("uid".into(), uid);
    m.insert("key".into(), json!(e.keys));
    m.insert("keysecondary".into(), json!(e.secondary_keys));
    m.insert("comment".into(), json!(e.comment));
    m.insert("content".into(), json!(e.content));
    m.insert("constant".into(), json!(e.constant));
    m.insert("vectorized".into(), json!(e.vectorized));
    m.insert("selective".into(), json!(e.selective));
    m.insert("selectiveLogic".into(), json!(i64::from(e.selective_logic)));
    m.insert("addMemo".into(), json!(e.add_memo));
    m.insert("order".into(), json!(e.insertion_order));
    m.insert("position".into(), json!(i64::from(e.position)));
    m.insert("disable".into(), json!(!e.enabled));
    m.insert("ignoreBudget".into(), json!(e.ignore_budget));
    m.insert("excludeRecursion".into(), json!(e.exclude_recursion));
    m.insert("preventRecursion".into(), json!(e.prevent_recursion));
    m.insert("matchPersonaDescription".into(), json!(e.match_sources.persona_description));
    m.insert("matchCharacterDescription".into(), json!(e.match_sources.character_description));
    m.insert("matchCharacterPersonality".into(), json!(e.match_sources.character_personality));
    m.insert("matchCharacterDepthPrompt".into(), json!(e.match_sources.character_depth_prompt));
    m.insert("matchScenario".into(), json!(e.match_sources.scenario));
    m.insert("matchCreatorNotes".into(), json!(e.match_sources.creator_notes));
    m.insert("delayUntilRecursion".into(), json!(e.delay_until_recursion));
    m.insert("probability".into(), json!(e.probability));
    m.insert("useProbability".into(), json!(e.use_probability));
    m.insert("depth".into(), json!(e.depth));
    m.insert("outletName".into(), json!(e.outlet_name));
    m.insert("group".into(), json!(e.group));
    m.insert("groupOverride".into(), json!(e.group_override));
    m.insert("groupWeight".into(), json!(e.group_weight));
    m.insert("scanDepth".into(), nullable(e.scan_depth));
    m.insert("caseSensitive".into(), nullable(e.case_sensitive));
    m.insert("matchWholeWords".into(), nullable(e.match_whole_words));
    m.insert("useGroupScoring".into(), nullable(e.use_group_scoring));
    m.insert("automationId".into(), json!(e.automation_id));
    m.insert("role".into(), json!(i64::from(e.role)));
    m.insert("sticky".into(), nullable(e.sticky));
    m.insert("cooldown".into(), nullable(e.cooldown));
    m.insert("delay".into(), nullable(e.delay));
    m.insert("triggers".into(), json!(e.triggers));
    put_opt(&mut m, "displayIndex", e.display_index);
    if !e.character_filter.is_empty() {
        let filter = &e.character_filter;
        m.insert("characterFilter".into(), json!({"isExclude": filter.is_exclude, "names": filter.names, "tags": filter.tags}));
    }
    let mut extensions = e.extensions.clone();
    let mut ours = match extensions.shift_remove("lorekeeper") {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    put_opt(&mut ours, "name", e.name.clone());
    put_opt(&mut ours, "priority", e.priority);
    if e.use_regex {
        ours.insert("use_regex".into(), json!(true));
    }
    if let (Some(EntryId::Text(_)), Some(id)) = (&e.id, id_value(&e.id)) {
        // A V3 text id has no World Info form; kept so it can come back.
        ours.insert("id".into(), id);
    }
    if !ours.is_empty() {
        extensions.insert("lorekeeper".into(), Value::Object(ours));
    }
    if !extensions.is_empty() {
        m.insert("extensions".into(), Value::Object(extensions));
    }
    for (key, value) in &e.extra {
        m.entry(key.clone()).or_insert_with(|| value.clone());
    }
    Value::Object(m)
}

/// An entry in World Info shape, lossless when it was read from World Info.
pub fn encode_entry(e: &LoreEntry, index: usize) -> Value {
    let fresh = fresh_entry(e, index);
    match &e.source {
        Some(SourceDocument { format: SourceFormat::WorldInfo, json: source }) => match decode_entry(source.clone(), "") {
            Ok(base) => preserve(source, &fresh_entry(&base, index), &fresh),
            Err(_) => fresh,
        },
        _ => fresh,
    }
}

/// A book as a World Info document; entries are keyed by their uid.
pub fn encode_world_info(book: &Lorebook) -> Value {
    let mut fresh = Map::new();
    fresh.insert("entries".into(), Value::Null);
    put_opt(&mut fresh, "name", book.name.clone());
    for (key, value) in &book.extra {
        fresh.entry(key.clone()).or_insert_with(|| value.clone());
    }
    let fresh = Value::Object(fresh);
    let mut out = match &book.source {
        Some(SourceDocument { format: SourceFormat::WorldInfo, json: source }) => {
            let mut base = Map::new();
            base.insert("entries".into(), Value::Null);
            let mut f = Fields::new(source.clone(), "").ok();
            let name = f.as_mut().and_then(|f| {
                f.take("entries");
                f.string("name").ok().flatten()
            });
            put_opt(&mut base, "name", name);
            if let Some(f) = f {
                for (key, value) in f.rest() {
                    base.entry(key).or_insert(value);
                }
            }
            preserve(source, &Value::Object(base), &fresh)
        }
        _ => fresh,
    };
    let mut entries = Map::new();
    for (i, e) in book.entries.iter().enumerate() {
        let mut encoded = encode_entry(e, i);
        let mut key = encoded.get("uid").map(|u| u.to_string().trim_matches('"').to_string()).unwrap_or_else(|| i.to_string());
        if entries.contains_key(&key) {
            // Two entries with one uid cannot both be keys; the later one gets a free uid.
            let mut free = entries.len();
            while entries.contains_key(&free.to_string()) {
                free += 1;
            }
            key = free.to_string();
            if let Value::Object(m) = &mut encoded {
                m.insert("uid".into(), json!(free));
            }
        }
        entries.insert(key, encoded);
    }
    if let Value::Object(m) = &mut out {
        m.insert("entries".into(), Value::Object(entries));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lorebook::{InsertionPosition, PromptRole, SelectiveLogic};

    #[test]
    fn reads_st_names_and_codes() {
        let doc = json!({"entries": {"7": {"uid": 7, "key": ["rain"], "keysecondary": ["storm"], "selectiveLogic": 2,
            "position": 4, "depth": 1, "role": 2, "disable": true, "delayUntilRecursion": true, "probability": null,
            "scanDepth": null, "sticky": 2, "characterFilter": {"isExclude": true, "names": ["a.png"], "tags": []}}}});
        let book = decode_world_info(doc.clone()).unwrap();
        let e = &book.entries[0];
        assert_eq!(e.selective_logic, SelectiveLogic::NotAny);
        assert_eq!((e.position, e.depth, e.role), (InsertionPosition::AtDepth, 1, PromptRole::Assistant));
        assert!(!e.enabled);
        assert_eq!((e.delay_until_recursion, e.probability, e.scan_depth, e.sticky), (1, 100, None, Some(2)));
        assert!(e.character_filter.is_exclude);
        assert_eq!(encode_world_info(&book), doc);
    }

    #[test]
    fn a_card_only_field_survives_world_info() {
        let e = LoreEntry { name: Some("Tower".into()), priority: Some(3), use_regex: true, ..Default::default() };
        let json = fresh_entry(&e, 0);
        assert_eq!(json["extensions"]["lorekeeper"], json!({"name": "Tower", "priority": 3, "use_regex": true}));
        let back = decode_entry(json, "e").unwrap();
        assert_eq!((back.name, back.priority, back.use_regex), (Some("Tower".into()), Some(3), true));
        assert!(back.extensions.is_empty());
    }
}
