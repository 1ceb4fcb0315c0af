//! Lorebooks of other front ends that SillyTavern imports by converting them to World
//! Info: NovelAI (`lorebookVersion`) and Agnai memory books (`kind: "memory"`). We convert
//! them the way SillyTavern's importer does, so a book moved from there keeps its keys,
//! text, order and switches; their other settings (NovelAI's context budget, Agnai's
//! priority) have no World Info field and are left out, which the import report says.

use super::FormatError;
use super::fields::kind;
use serde_json::{Map, Value, json};

/// Which foreign book a JSON object is, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Foreign {
    NovelAi,
    Agnai,
}

/// The foreign book `map` is: NovelAI's carry `lorebookVersion`, Agnai's `kind: "memory"`.
pub fn recognise(map: &Map<String, Value>) -> Option<Foreign> {
    if map.contains_key("lorebookVersion") && map.contains_key("entries") {
        Some(Foreign::NovelAi)
    } else if map.get("kind").and_then(Value::as_str) == Some("memory") && map.contains_key("entries") {
        Some(Foreign::Agnai)
    } else {
        None
    }
}

/// The World Info document SillyTavern makes of a foreign book (its `entries` keyed by
/// position, each entry's `uid` and `displayIndex` its position).
pub fn to_world_info(map: &Map<String, Value>, foreign: Foreign) -> Result<Value, FormatError> {
    let Some(Value::Array(items)) = map.get("entries") else {
        let found = map.get("entries").map_or("nothing", kind);
        return Err(FormatError::Field { path: "entries".into(), problem: format!("expected a list of entries, found {found}") });
    };
    let text = |entry: &Value, key: &str| entry.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    let keys = |entry: &Value, key: &str| -> Vec<Value> {
        entry.get(key).and_then(Value::as_array).map(|a| a.iter().filter(|k| k.is_string()).cloned().collect()).unwrap_or_default()
    };
    let mut entries = Map::new();
    for (index, entry) in items.iter().enumerate() {
        if !entry.is_object() {
            return Err(FormatError::Field { path: format!("entries[{index}]"), problem: format!("expected an entry, found {}", kind(entry)) });
        }
        let enabled = entry.get("enabled").and_then(Value::as_bool) != Some(false);
        let (key, comment, content, order) = match foreign {
            Foreign::NovelAi => (
                keys(entry, "keys"),
                text(entry, "displayName"),
                text(entry, "text"),
                entry.pointer("/contextConfig/budgetPriority").and_then(Value::as_i64).unwrap_or(0),
            ),
            Foreign::Agnai => {
                let weight = entry.get("weight");
                let order = weight.and_then(Value::as_i64).or_else(|| weight.and_then(Value::as_f64).map(|w| w as i64)).unwrap_or(0);
                (keys(entry, "keywords"), text(entry, "name"), text(entry, "entry"), order)
            }
        };
        let memo = !comment.trim().is_empty();
        entries.insert(
            index.to_string(),
            json!({
                "uid": index,
                "key": key,
                "keysecondary": [],
                "comment": comment,
                "content": content,
                "constant": false,
                "selective": false,
                "order": order,
                "position": 0,
                "disable": !enabled,
                "addMemo": memo,
                "displayIndex": index,
                "probability": 100,
                "useProbability": true,
            }),
        );
    }
    let mut out = Map::new();
    if let Some(name) = map.get("name").and_then(Value::as_str).filter(|n| !n.trim().is_empty()) {
        out.insert("name".into(), json!(name));
    }
    if let Some(description) = map.get("description").and_then(Value::as_str).filter(|d| !d.trim().is_empty()) {
        out.insert("description".into(), json!(description));
    }
    out.insert("entries".into(), Value::Object(entries));
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn novelai_and_agnai_books_become_world_info_as_sillytavern_converts_them() {
        let nai = json!({"lorebookVersion": 5, "entries": [{"text": "Black glass.", "displayName": "Citadel", "keys": ["citadel", "fortress"],
            "enabled": true, "contextConfig": {"budgetPriority": 400}}, {"text": "Off.", "keys": ["x"], "enabled": false}]});
        let wi = to_world_info(nai.as_object().unwrap(), Foreign::NovelAi).unwrap();
        assert_eq!(wi["entries"]["0"]["content"], "Black glass.");
        assert_eq!(wi["entries"]["0"]["key"], json!(["citadel", "fortress"]));
        assert_eq!(wi["entries"]["0"]["order"], 400);
        assert_eq!(wi["entries"]["0"]["comment"], "Citadel");
        assert_eq!(wi["entries"]["1"]["disable"], true);

        let agnai = json!({"kind": "memory", "name": "Agnai Book", "entries": [{"name": "Citadel", "entry": "Black glass.", "keywords": ["citadel"], "weight": 5, "enabled": true}]});
        assert_eq!(recognise(agnai.as_object().unwrap()), Some(Foreign::Agnai));
        let wi = to_world_info(agnai.as_object().unwrap(), Foreign::Agnai).unwrap();
        assert_eq!(wi["name"], "Agnai Book");
        assert_eq!(wi["entries"]["0"]["content"], "Black glass.");
        assert_eq!(wi["entries"]["0"]["key"], json!(["citadel"]));
        assert_eq!(wi["entries"]["0"]["order"], 5);
        assert!(to_world_info(json!({"kind": "memory", "entries": {}}).as_object().unwrap(), Foreign::Agnai).is_err());
    }
}
