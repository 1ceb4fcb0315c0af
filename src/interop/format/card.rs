//! Character Cards: V1 (bare fields, read only), V2 (`chara_card_v2`) and V3
//! (`chara_card_v3`), as one [`CharacterCard`] model.
//!
//! V3 is a superset of V2. Writing a V3 card as V2 keeps the V3-only fields (nickname,
//! assets, multilingual notes, sources, group greetings, dates) under
//! `extensions.lorekeeper.card_v3`, and reading such a V2 card brings them back.

use super::book::{BookFlavor, decode_character_book, encode_character_book, ensure_fields};
use super::fields::{Fields, kind, put_opt};
use super::preserve::preserve;
use super::FormatError;
use crate::lorebook::Lorebook;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// The card versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CardSpec {
    /// Fields at the top level, no `spec` (read only; written as V2).
    V1,
    V2,
    #[default]
    V3,
}

impl CardSpec {
    pub fn label(self) -> &'static str {
        match self {
            CardSpec::V1 => "Card V1",
            CardSpec::V2 => "Card V2",
            CardSpec::V3 => "Card V3",
        }
    }
}

/// A V3 asset: a picture, sound or other file that belongs to the card.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CardAsset {
    /// `icon`, `background`, `user_icon`, `emotion`, or an `x_`-prefixed custom type.
    pub kind: String,
    /// `https://...`, `data:...`, `embeded://path` or `ccdefault:`.
    pub uri: String,
    pub name: String,
    pub ext: String,
    pub extra: Map<String, Value>,
}

/// A character card, every field of V2 and V3.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CharacterCard {
    pub name: String,
    pub description: String,
    pub personality: String,
    pub scenario: String,
    pub first_mes: String,
    pub mes_example: String,
    pub creator_notes: String,
    pub system_prompt: String,
    pub post_history_instructions: String,
    pub alternate_greetings: Vec<String>,
    pub character_book: Option<Lorebook>,
    pub tags: Vec<String>,
    pub creator: String,
    pub character_version: String,
    /// `data.extensions`, kept whole (our own data lives under `lorekeeper`).
    pub extensions: Map<String, Value>,
    // V3
    pub nickname: Option<String>,
    /// ISO 639-1 code → notes.
    pub creator_notes_multilingual: Option<BTreeMap<String, String>>,
    /// `source`: ids or URLs the card came from.
    pub sources: Option<Vec<String>>,
    pub group_only_greetings: Vec<String>,
    pub assets: Option<Vec<CardAsset>>,
    /// Unix seconds.
    pub creation_date: Option<i64>,
    pub modification_date: Option<i64>,
    /// Unknown fields of `data`.
    pub extra: Map<String, Value>,
    /// Unknown top-level fields (SillyTavern also writes the V1 fields up there).
    pub envelope_extra: Map<String, Value>,
    /// The version this card was read as.
    pub spec: CardSpec,
    /// The document exactly as read, for a lossless export in the same version.
    pub source: Option<Value>,
}

/// Something to tell the user about a card that was still read.
pub type Warnings = Vec<String>;

/// Read a card document. The `spec` decides the version; `spec_version` must match it.
pub fn decode_card(value: Value) -> Result<(CharacterCard, Warnings), FormatError> {
    let source = value.clone();
    let mut top = Fields::new(value, "")?;
    let mut warnings = Vec::new();
    let spec = match top.string("spec")? {
        None => CardSpec::V1,
        Some(s) if s == "chara_card_v2" => CardSpec::V2,
        Some(s) if s == "chara_card_v3" => CardSpec::V3,
        Some(other) => return Err(FormatError::UnknownSpec { spec: other }),
    };
    let version = top.string("spec_version")?;
    match spec {
        CardSpec::V1 => warnings.push("a V1 card (no spec); read as V2".to_string()),
        CardSpec::V2 => match version.as_deref() {
            None => warnings.push("the V2 card has no spec_version; read as 2.0".to_string()),
            Some(v) if v.trim() == "2.0" || v.trim() == "2" => {}
            Some(v) => {
                return Err(FormatError::WrongVersion { spec: "chara_card_v2".into(), expected: "2.0".into(), found: v.into() });
            }
        },
        CardSpec::V3 => {
            let found = version.clone().unwrap_or_default();
            match found.trim().parse::<f64>() {
                Ok(v) if (3.0..4.0).contains(&v) => {
                    if v > 3.0 {
                        warnings.push(format!("the card says spec_version {found}; newer than 3.0, read as 3.0"));
                    }
                }
                _ => {
                    return Err(FormatError::WrongVersion { spec: "chara_card_v3".into(), expected: "3.x".into(), found });
                }
            }
        }
    }
    let mut card = match spec {
        CardSpec::V1 => decode_data(&mut top, spec)?,
        CardSpec::V2 | CardSpec::V3 => {
            let data = match top.take("data") {
                Some(data @ Value::Object(_)) => data,
                Some(other) => return Err(top.error("data", format!("expected an object, found {}", kind(&other)))),
                None => return Err(top.error("data", "missing: a V2/V3 card keeps its fields under `data`")),
            };
            let mut data = Fields::new(data, "data")?;
            let mut card = decode_data(&mut data, spec)?;
            card.extra = data.rest();
            card
        }
    };
    card.envelope_extra = top.rest();
    card.spec = spec;
    card.source = Some(source);
    Ok((card, warnings))
}

fn decode_data(f: &mut Fields, spec: CardSpec) -> Result<CharacterCard, FormatError> {
    let name = match f.string("name")? {
        Some(n) if !n.trim().is_empty() => n,
        _ => return Err(f.error("name", "missing: a card needs the character's name")),
    };
    let mut card = CharacterCard {
        name,
        description: f.string_or_empty("description")?,
        personality: f.string_or_empty("personality")?,
        scenario: f.string_or_empty("scenario")?,
        first_mes: f.string_or_empty("first_mes")?,
        mes_example: f.string_or_empty("mes_example")?,
        ..Default::default()
    };
    if spec == CardSpec::V1 {
        return Ok(card);
    }
    card.creator_notes = f.string_or_empty("creator_notes")?;
    card.system_prompt = f.string_or_empty("system_prompt")?;
    card.post_history_instructions = f.string_or_empty("post_history_instructions")?;
    card.alternate_greetings = f.strings_or_empty("alternate_greetings")?;
    card.character_book = match f.take("character_book") {
        None | Some(Value::Null) => None,
        Some(book) => Some(decode_character_book(book, &f.child("character_book"))?),
    };
    card.tags = f.strings_or_empty("tags")?;
    card.creator = f.string_or_empty("creator")?;
    card.character_version = f.string_or_empty("character_version")?;
    card.extensions = f.object_or_empty("extensions")?;
    if spec == CardSpec::V3 {
        decode_v3_fields(f, &mut card)?;
    } else if let Some(Value::Object(ours)) = card.extensions.get("lorekeeper")
        && let Some(v3 @ Value::Object(_)) = ours.get("card_v3")
    {
        let mut v3 = Fields::new(v3.clone(), f.child("extensions.lorekeeper.card_v3"))?;
        decode_v3_fields(&mut v3, &mut card)?;
        remove_ours(&mut card.extensions, "card_v3");
    }
    Ok(card)
}

fn decode_v3_fields(f: &mut Fields, card: &mut CharacterCard) -> Result<(), FormatError> {
    card.nickname = f.string("nickname")?;
    card.creator_notes_multilingual = match f.object("creator_notes_multilingual")? {
        None => None,
        Some(map) => {
            let mut notes = BTreeMap::new();
            for (lang, text) in map {
                match text {
                    Value::String(t) => {
                        notes.insert(lang, t);
                    }
                    other => {
                        return Err(f.error(&format!("creator_notes_multilingual.{lang}"), format!("expected text, found {}", kind(&other))));
                    }
                }
            }
            Some(notes)
        }
    };
    card.sources = f.strings("source")?;
    card.group_only_greetings = f.strings_or_empty("group_only_greetings")?;
    card.assets = match f.take("assets") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => {
            let mut assets = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                let mut a = Fields::new(item, f.child(&format!("assets[{i}]")))?;
                assets.push(CardAsset {
                    kind: a.string_or_empty("type")?,
                    uri: a.string_or_empty("uri")?,
                    name: a.string_or_empty("name")?,
                    ext: a.string_or_empty("ext")?,
                    extra: a.rest(),
                });
            }
            Some(assets)
        }
        Some(other) => return Err(f.error("assets", format!("expected a list, found {}", kind(&other)))),
    };
    card.creation_date = f.int("creation_date")?;
    card.modification_date = f.int("modification_date")?;
    Ok(())
}

/// Remove `extensions.lorekeeper.<key>`, and `lorekeeper` itself once empty.
fn remove_ours(extensions: &mut Map<String, Value>, key: &str) {
    if let Some(Value::Object(ours)) = extensions.get_mut("lorekeeper") {
        ours.shift_remove(key);
        if ours.is_empty() {
            extensions.shift_remove("lorekeeper");
        }
    }
}

fn v3_fields(card: &CharacterCard, m: &mut Map<String, Value>, always: bool) {
    if let Some(assets) = &card.assets {
        let list: Vec<Value> = assets
            .iter()
            .map(|a| {
                let mut o = Map::new();
                o.insert("type".into(), json!(a.kind));
                o.insert("uri".into(), json!(a.uri));
                o.insert("name".into(), json!(a.name));
                o.insert("ext".into(), json!(a.ext));
                for (k, v) in &a.extra {
                    o.entry(k.clone()).or_insert_with(|| v.clone());
                }
                Value::Object(o)
            })
            .collect();
        m.insert("assets".into(), Value::Array(list));
    }
    put_opt(m, "nickname", card.nickname.clone());
    if let Some(notes) = &card.creator_notes_multilingual {
        m.insert("creator_notes_multilingual".into(), json!(notes));
    }
    put_opt(m, "source", card.sources.clone());
    if always || !card.group_only_greetings.is_empty() {
        m.insert("group_only_greetings".into(), json!(card.group_only_greetings));
    }
    put_opt(m, "creation_date", card.creation_date);
    put_opt(m, "modification_date", card.modification_date);
}

fn fresh_card(card: &CharacterCard, target: CardSpec) -> Value {
    let flavor = if target == CardSpec::V3 { BookFlavor::V3 } else { BookFlavor::V2 };
    let mut data = Map::new();
    data.insert("name".into(), json!(card.name));
    data.insert("description".into(), json!(card.description));
    data.insert("personality".into(), json!(card.personality));
    data.insert("scenario".into(), json!(card.scenario));
    data.insert("first_mes".into(), json!(card.first_mes));
    data.insert("mes_example".into(), json!(card.mes_example));
    data.insert("creator_notes".into(), json!(card.creator_notes));
    data.insert("system_prompt".into(), json!(card.system_prompt));
    data.insert("post_history_instructions".into(), json!(card.post_history_instructions));
    data.insert("alternate_greetings".into(), json!(card.alternate_greetings));
    if let Some(book) = &card.character_book {
        data.insert("character_book".into(), encode_character_book(book, flavor));
    }
    data.insert("tags".into(), json!(card.tags));
    data.insert("creator".into(), json!(card.creator));
    data.insert("character_version".into(), json!(card.character_version));
    let mut extensions = card.extensions.clone();
    if target == CardSpec::V3 {
        v3_fields(card, &mut data, true);
    } else {
        let mut v3 = Map::new();
        v3_fields(card, &mut v3, false);
        if !v3.is_empty() {
            let ours = extensions.entry("lorekeeper").or_insert_with(|| Value::Object(Map::new()));
            if !ours.is_object() {
                *ours = Value::Object(Map::new());
            }
            if let Value::Object(ours) = ours {
                ours.insert("card_v3".into(), Value::Object(v3));
            }
        }
    }
    data.insert("extensions".into(), Value::Object(extensions));
    for (k, v) in &card.extra {
        data.entry(k.clone()).or_insert_with(|| v.clone());
    }
    let (spec, version) = match target {
        CardSpec::V3 => ("chara_card_v3", "3.0"),
        _ => ("chara_card_v2", "2.0"),
    };
    let mut top = Map::new();
    top.insert("spec".into(), json!(spec));
    top.insert("spec_version".into(), json!(version));
    top.insert("data".into(), Value::Object(data));
    for (k, v) in &card.envelope_extra {
        top.entry(k.clone()).or_insert_with(|| v.clone());
    }
    Value::Object(top)
}

const REQUIRED_V2: [&str; 14] = [
    "name",
    "description",
    "personality",
    "scenario",
    "first_mes",
    "mes_example",
    "creator_notes",
    "system_prompt",
    "post_history_instructions",
    "alternate_greetings",
    "tags",
    "creator",
    "character_version",
    "extensions",
];

/// Write `card` as `target` (V2 or V3; V1 is written as V2). A card read as the same
/// version comes back as it was read, changed only where the model was.
pub fn encode_card(card: &CharacterCard, target: CardSpec) -> Value {
    let target = if target == CardSpec::V1 { CardSpec::V2 } else { target };
    let fresh = fresh_card(card, target);
    let mut out = match &card.source {
        Some(source) if card.spec == target => match decode_card(source.clone()) {
            Ok((base, _)) => preserve(source, &fresh_card(&base, target), &fresh),
            Err(_) => fresh.clone(),
        },
        _ => fresh.clone(),
    };
    ensure_fields(&mut out, &fresh, &["spec", "spec_version", "data"]);
    if let (Some(out_data), Some(fresh_data)) = (out.get_mut("data"), fresh.get("data")) {
        ensure_fields(out_data, fresh_data, &REQUIRED_V2);
        if target == CardSpec::V3 {
            ensure_fields(out_data, fresh_data, &["group_only_greetings"]);
        }
    }
    out
}

/// The `chara` chunk written next to `ccv3` in a V3 PNG, for readers that only know V2.
/// The V3 spec asks backfilled cards to say so in their creator notes.
pub fn encode_v2_backfill(card: &CharacterCard) -> Value {
    let mut backfill = card.clone();
    backfill.source = None;
    let note = "This character card is Character Card V3, but it is loaded as a Character Card V2. \
                Please use a Character Card V3 compatible application to use this character card properly.";
    backfill.creator_notes =
        if card.creator_notes.is_empty() { note.to_string() } else { format!("{note}\n\n{}", card.creator_notes) };
    encode_card(&backfill, CardSpec::V2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(data: Value) -> Value {
        json!({"spec": "chara_card_v2", "spec_version": "2.0", "data": data})
    }

    #[test]
    fn versions_are_checked() {
        assert!(matches!(
            decode_card(json!({"spec": "chara_card_v2", "spec_version": "3.0", "data": {"name": "A"}})),
            Err(FormatError::WrongVersion { .. })
        ));
        assert!(matches!(
            decode_card(json!({"spec": "chara_card_v3", "spec_version": "2.0", "data": {"name": "A"}})),
            Err(FormatError::WrongVersion { .. })
        ));
        assert!(matches!(decode_card(json!({"spec": "chara_card_v9", "data": {}})), Err(FormatError::UnknownSpec { .. })));
        let (_, warnings) = decode_card(json!({"spec": "chara_card_v3", "spec_version": "3.1", "data": {"name": "A"}})).unwrap();
        assert_eq!(warnings.len(), 1);
    }

    #[test]
    fn v3_fields_survive_a_trip_through_v2() {
        let doc = json!({"spec": "chara_card_v3", "spec_version": "3.0", "data": {
            "name": "Aria", "nickname": "Ari", "group_only_greetings": ["Hi all"], "source": ["https://example.invalid/a"],
            "creation_date": 1700000000, "assets": [{"type": "icon", "uri": "ccdefault:", "name": "main", "ext": "png"}],
            "extensions": {"other": 1}
        }});
        let (card, _) = decode_card(doc).unwrap();
        let as_v2 = encode_card(&card, CardSpec::V2);
        assert_eq!(as_v2["data"]["extensions"]["lorekeeper"]["card_v3"]["nickname"], json!("Ari"));
        let (back, _) = decode_card(as_v2).unwrap();
        assert_eq!(back.nickname.as_deref(), Some("Ari"));
        assert_eq!(back.assets, card.assets);
        assert_eq!(back.extensions, card.extensions);
        assert_eq!(back.group_only_greetings, vec!["Hi all"]);
    }

    #[test]
    fn a_sloppy_card_gains_only_the_required_fields() {
        let doc = v2(json!({"name": "Bo", "description": "d", "extensions": {}}));
        let (card, _) = decode_card(doc).unwrap();
        let out = encode_card(&card, CardSpec::V2);
        assert_eq!(out["data"]["first_mes"], json!(""));
        assert!(out["data"].get("character_book").is_none());
    }

    #[test]
    fn v1_cards_are_read() {
        let (card, warnings) = decode_card(json!({"name": "Old", "description": "d", "first_mes": "Hi", "avatar": "x"})).unwrap();
        assert_eq!(card.spec, CardSpec::V1);
        assert_eq!(card.first_mes, "Hi");
        assert_eq!(card.envelope_extra.get("avatar"), Some(&json!("x")));
        assert_eq!(warnings.len(), 1);
        assert_eq!(encode_card(&card, CardSpec::V2)["data"]["name"], json!("Old"));
    }
}
