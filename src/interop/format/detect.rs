//! What a file is, from its content alone (never its extension): a PNG card, a JSON
//! card, a World Info file, a `lorebook_v3` file or a bare character book.

use super::card::{CardSpec, CharacterCard, decode_card};
use super::{FormatError, MAX_FILE_BYTES, book, parse_json, png, world_info};
use crate::lorebook::Lorebook;
use serde_json::Value;

/// How the document was packaged, for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DocumentKind {
    CardJson(CardSpec),
    CardPng(CardSpec),
    WorldInfo,
    LorebookV3,
    CharacterBook,
    /// A NovelAI lorebook, converted to World Info as SillyTavern imports it.
    NovelAi,
    /// An Agnai memory book, converted to World Info as SillyTavern imports it.
    AgnaiMemory,
}

impl DocumentKind {
    pub fn label(self) -> String {
        match self {
            DocumentKind::CardJson(spec) => format!("{} (JSON)", spec.label()),
            DocumentKind::CardPng(spec) => format!("{} (PNG)", spec.label()),
            DocumentKind::WorldInfo => "SillyTavern World Info".into(),
            DocumentKind::LorebookV3 => "lorebook_v3".into(),
            DocumentKind::CharacterBook => "character book".into(),
            DocumentKind::NovelAi => "NovelAI lorebook (converted to World Info)".into(),
            DocumentKind::AgnaiMemory => "Agnai memory book (converted to World Info)".into(),
        }
    }
}

/// A character read from a card, with its portrait when it came in a PNG.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCard {
    pub card: CharacterCard,
    /// The PNG with its card chunks removed.
    pub image: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Document {
    Card(Box<ParsedCard>),
    Lorebook(Box<Lorebook>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub kind: DocumentKind,
    pub document: Document,
    /// The document's JSON exactly as read (stored so export can be lossless).
    pub json: Value,
    pub warnings: Vec<String>,
}

/// Read any supported file.
pub fn parse_bytes(bytes: &[u8]) -> Result<Parsed, FormatError> {
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(FormatError::TooLarge { size: bytes.len() as u64, limit: MAX_FILE_BYTES });
    }
    if bytes.starts_with(&png::SIGNATURE) {
        return parse_png(bytes);
    }
    if bytes.starts_with(b"PK\x03\x04") {
        return Err(FormatError::Charx);
    }
    if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return Err(FormatError::NotRecognised("a JPEG image; cards are read from PNG or JSON".into()));
    }
    if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        return Err(FormatError::NotRecognised("a WebP image; cards are read from PNG or JSON".into()));
    }
    let body = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') | Some(b'[') => {}
        Some(_) => return Err(FormatError::NotRecognised("neither a PNG nor a JSON document".into())),
        None => return Err(FormatError::NotRecognised("the file is empty".into())),
    }
    if is_chat_file(body) {
        return Err(FormatError::NotRecognised(
            "a SillyTavern chat file (.jsonl), not a card or lorebook: import it as a chat with `lorekeeper chat import FILE --character NAME`, or the Chat panel's \"Import chat\" button".into(),
        ));
    }
    let json = parse_json(bytes, "the file")?;
    parse_json_document(json, false)
}

/// Whether `body` is a SillyTavern chat file: JSON lines whose first is the chat's header
/// (`user_name`, `character_name`, `chat_metadata`) or a message (`mes`). Said as such,
/// since as one JSON document it only fails with "trailing characters".
fn is_chat_file(body: &[u8]) -> bool {
    let first = body.split(|b| *b == b'\n').next().unwrap_or(body);
    if first.len() == body.trim_ascii_end().len() {
        return false;
    }
    match serde_json::from_slice::<serde_json::Value>(first) {
        Ok(serde_json::Value::Object(o)) => ["user_name", "character_name", "chat_metadata", "mes"].iter().any(|k| o.contains_key(*k)),
        _ => false,
    }
}

fn parse_png(bytes: &[u8]) -> Result<Parsed, FormatError> {
    let chunks = png::read_card_chunks(bytes)?;
    let (chunk, text) = chunks.preferred().ok_or(FormatError::NoCardInPng)?;
    let json = parse_json(text.as_bytes(), &format!("the `{chunk}` chunk"))?;
    let mut parsed = parse_json_document(json, true)?;
    let image = png::strip_card_chunks(bytes)?;
    png::validate_image(&image)?;
    if let Document::Card(card) = &mut parsed.document {
        card.image = Some(image);
    }
    if chunk == "ccv3" && chunks.chara.is_some() {
        parsed.warnings.push("the PNG has both `ccv3` and `chara` chunks; read `ccv3`".into());
    }
    Ok(parsed)
}

/// Classify and read a JSON document. `from_png` restricts it to cards.
pub fn parse_json_document(json: Value, from_png: bool) -> Result<Parsed, FormatError> {
    let Value::Object(map) = &json else {
        return Err(FormatError::NotRecognised(format!("the JSON is {}, not an object", super::fields::kind(&json))));
    };
    // Other front ends' books, converted to World Info as SillyTavern's importer does
    // (their array of entries would otherwise read as a character book's, losing text).
    if let Some(foreign) = super::foreign::recognise(map).filter(|_| !from_png) {
        let converted = super::foreign::to_world_info(map, foreign)?;
        let book = world_info::decode_world_info(converted.clone())?;
        let (kind, lost) = match foreign {
            super::foreign::Foreign::NovelAi => (DocumentKind::NovelAi, "NovelAI's context settings but the budget priority (now the order)"),
            super::foreign::Foreign::Agnai => (DocumentKind::AgnaiMemory, "Agnai's priority (the weight is now the order)"),
        };
        let warnings = vec![format!("converted to World Info as SillyTavern imports it; left out: {lost}")];
        return Ok(Parsed { kind, document: Document::Lorebook(Box::new(book)), json: converted, warnings });
    }
    let spec = map.get("spec").and_then(Value::as_str);
    let looks_v1 = map.get("name").is_some_and(Value::is_string)
        && ["description", "personality", "first_mes", "mes_example", "scenario"].iter().any(|k| map.get(*k).is_some_and(Value::is_string));
    let entries = map.get("entries");
    enum Class {
        Card,
        LorebookV3,
        WorldInfo,
        CharacterBook,
    }
    let class = match (spec, entries) {
        (Some("lorebook_v3"), _) if !from_png => Class::LorebookV3,
        (Some(_), _) => Class::Card,
        (None, _) if map.contains_key("spec") => {
            return Err(FormatError::Field { path: "spec".into(), problem: "expected text".into() });
        }
        (None, Some(Value::Object(_))) if !from_png => Class::WorldInfo,
        (None, Some(Value::Array(_))) if !from_png => Class::CharacterBook,
        (None, _) if looks_v1 => Class::Card,
        _ => {
            return Err(FormatError::NotRecognised(if from_png {
                "the PNG's card chunk holds JSON that is not a character card".into()
            } else {
                "a JSON object with no `spec`, no `entries` and no card fields".into()
            }));
        }
    };
    let (kind, document, warnings) = match class {
        Class::Card => {
            let (card, warnings) = decode_card(json.clone())?;
            let kind = if from_png { DocumentKind::CardPng(card.spec) } else { DocumentKind::CardJson(card.spec) };
            (kind, Document::Card(Box::new(ParsedCard { card, image: None })), warnings)
        }
        Class::LorebookV3 => (DocumentKind::LorebookV3, Document::Lorebook(Box::new(book::decode_lorebook_v3(json.clone())?)), Vec::new()),
        Class::WorldInfo => (DocumentKind::WorldInfo, Document::Lorebook(Box::new(world_info::decode_world_info(json.clone())?)), Vec::new()),
        Class::CharacterBook => {
            (DocumentKind::CharacterBook, Document::Lorebook(Box::new(book::decode_character_book(json.clone(), "")?)), Vec::new())
        }
    };
    Ok(Parsed { kind, document, json, warnings })
}

#[cfg(test)]
mod chat_file_tests {
    /// A SillyTavern chat given to the card import is named, with the way to import it.
    #[test]
    fn a_chat_file_is_named_and_sent_to_chat_import() {
        let chat = b"{\"user_name\":\"Corin\",\"character_name\":\"Maren\",\"chat_metadata\":{}}\n{\"name\":\"Maren\",\"is_user\":false,\"mes\":\"Evening.\"}\n";
        let err = super::parse_bytes(chat).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("SillyTavern chat file") && err.contains("chat import"), "{err}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn classifies_by_content() {
        let kind = |v: Value| parse_json_document(v, false).map(|p| p.kind);
        assert_eq!(kind(json!({"entries": {}})).unwrap(), DocumentKind::WorldInfo);
        assert_eq!(kind(json!({"entries": []})).unwrap(), DocumentKind::CharacterBook);
        assert_eq!(kind(json!({"spec": "lorebook_v3", "data": {"entries": []}})).unwrap(), DocumentKind::LorebookV3);
        assert_eq!(kind(json!({"spec": "chara_card_v2", "spec_version": "2.0", "data": {"name": "A"}})).unwrap(), DocumentKind::CardJson(CardSpec::V2));
        assert_eq!(kind(json!({"name": "A", "first_mes": "hi"})).unwrap(), DocumentKind::CardJson(CardSpec::V1));
        assert!(matches!(kind(json!({"hello": 1})), Err(FormatError::NotRecognised(_))));
        assert!(matches!(kind(json!([1, 2])), Err(FormatError::NotRecognised(_))));
        assert!(parse_json_document(json!({"entries": {}}), true).is_err());
    }

    #[test]
    fn novelai_and_agnai_books_import_with_their_keys_and_text() {
        let read = |v: Value| match parse_json_document(v, false).unwrap() {
            Parsed { kind, document: Document::Lorebook(book), .. } => (kind, *book),
            other => panic!("{other:?}"),
        };
        let (kind, book) = read(json!({"lorebookVersion": 5, "entries": [{"text": "Black glass.", "keys": ["citadel"], "displayName": "Citadel"}]}));
        assert_eq!(kind, DocumentKind::NovelAi);
        assert_eq!((book.entries[0].keys.clone(), book.entries[0].content.as_str()), (vec!["citadel".to_string()], "Black glass."));
        let (kind, book) = read(json!({"kind": "memory", "name": "Book", "entries": [{"name": "C", "entry": "Black glass.", "keywords": ["citadel"], "weight": 5}]}));
        assert_eq!(kind, DocumentKind::AgnaiMemory);
        assert_eq!(book.name.as_deref(), Some("Book"));
        assert_eq!((book.entries[0].keys.clone(), book.entries[0].content.as_str()), (vec!["citadel".to_string()], "Black glass."));
        assert_eq!(book.entries[0].insertion_order, 5);
    }

    #[test]
    fn non_documents_are_named() {
        assert!(matches!(parse_bytes(b""), Err(FormatError::NotRecognised(_))));
        assert!(matches!(parse_bytes(b"hello"), Err(FormatError::NotRecognised(_))));
        assert!(matches!(parse_bytes(b"PK\x03\x04rest"), Err(FormatError::Charx)));
        assert!(matches!(parse_bytes(b"{\"a\":"), Err(FormatError::Json { .. })));
    }
}
