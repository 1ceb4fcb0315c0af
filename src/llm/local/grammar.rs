//! JSON Schema → GBNF grammar for constrained decoding.
//!
//! llama.cpp ships a converter (`common/json-schema-to-grammar`) that the crate exposes;
//! it covers everything our schemas use (objects with required and optional properties,
//! `$ref`/`$defs`, strings, numbers, integers with bounds, booleans, enums, `const`,
//! arrays with `minItems`/`maxItems`, nested objects, nullable types), so we use it
//! rather than keep a second converter in step with it. This module adds what the
//! converter cannot know: the entry rule our prompts need, and a cap on string length.

use crate::llm::{LlmError, ResponseFormat};
use serde_json::Value;

/// The rule generation starts from. It wraps the converter's `root` so that the
/// model may put one space or newline before the JSON: after `Assistant:` nearly
/// every model wants a space first, and forbidding it costs a rejected sample.
pub const START_RULE: &str = "lorekeeper-start";

/// Longest string the grammar lets the model write where the schema sets no
/// `maxLength`. A small base model inside an open string has nothing pulling it
/// toward the closing quote, and without a bound it can spend the whole token budget
/// on one field; the limit guarantees every field ends and the object closes. (llama.cpp
/// refuses repetitions above 2000, and 1200 characters is three solid paragraphs.)
pub const DEFAULT_MAX_STRING_CHARS: u64 = 1200;

/// llama.cpp's grammar parser refuses to expand a repetition beyond this many items.
const MAX_REPETITION: u64 = 2000;

/// A grammar ready for the sampler.
#[derive(Debug, Clone, PartialEq)]
pub struct Grammar {
    pub gbnf: String,
    pub root: &'static str,
    /// The smallest JSON the schema accepts, compact: its length in tokens is about
    /// what finishing a reply costs at worst, so the decoder keeps that much in reserve.
    pub minimal: String,
}

/// The grammar a response format needs, or `None` for free text.
pub fn for_format(format: &ResponseFormat) -> Result<Option<Grammar>, LlmError> {
    let schema = match format {
        ResponseFormat::Text => return Ok(None),
        ResponseFormat::Json => serde_json::json!({ "type": "object" }),
        ResponseFormat::JsonSchema { schema, .. } | ResponseFormat::JsonObjectSchema { schema } => schema.clone(),
    };
    from_schema(&schema).map(Some)
}

/// Converts a JSON Schema into a grammar whose start rule is [`START_RULE`].
pub fn from_schema(schema: &Value) -> Result<Grammar, LlmError> {
    let mut schema = schema.clone();
    cap_strings(&mut schema, DEFAULT_MAX_STRING_CHARS);
    let text = serde_json::to_string(&schema)
        .map_err(|e| LlmError::Config(format!("the JSON Schema cannot be serialised: {e}")))?;
    let converted = llama_cpp_2::json_schema_to_grammar(&text)
        .map_err(|e| LlmError::Config(format!("the JSON Schema cannot be turned into a grammar: {e}")))?;
    let gbnf = format!("{START_RULE} ::= [ \\n]? root\n{converted}");
    let minimal = minimal_instance(&schema, &schema, 0).to_string();
    Ok(Grammar { gbnf, root: START_RULE, minimal })
}

/// Deepest `$ref` chain followed; a recursive schema's minimal instance stops there.
const MAX_DEPTH: usize = 32;

/// The smallest value `schema` accepts: required properties only, `minItems` items,
/// empty strings (or `minLength` characters), the lower bound for numbers, `false`,
/// the first `enum` value, the smallest alternative of `anyOf`/`oneOf`. Only an
/// estimate for budgeting: it is never sent or validated.
pub fn minimal_instance(schema: &Value, root: &Value, depth: usize) -> Value {
    let Value::Object(map) = schema else { return Value::Null };
    if depth > MAX_DEPTH {
        return Value::Null;
    }
    if let Some(target) = map.get("$ref").and_then(Value::as_str) {
        return match resolve_ref(root, target) {
            Some(resolved) => minimal_instance(resolved, root, depth + 1),
            None => Value::Null,
        };
    }
    if let Some(value) = map.get("const") {
        return value.clone();
    }
    if let Some(first) = map.get("enum").and_then(Value::as_array).and_then(|e| e.first()) {
        return first.clone();
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(options) = map.get(key).and_then(Value::as_array) {
            return options
                .iter()
                .map(|o| minimal_instance(o, root, depth + 1))
                .min_by_key(|v| v.to_string().len())
                .unwrap_or(Value::Null);
        }
    }
    if let Some(first) = map.get("allOf").and_then(Value::as_array).and_then(|a| a.first()) {
        return minimal_instance(first, root, depth + 1);
    }
    let kind = match map.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(types)) if types.iter().any(|t| t == "null") => "null",
        Some(Value::Array(types)) => types.first().and_then(Value::as_str).unwrap_or("null"),
        _ if map.contains_key("properties") => "object",
        _ if map.contains_key("items") => "array",
        _ => "null",
    };
    let count = |key: &str| map.get(key).and_then(Value::as_u64).unwrap_or(0);
    match kind {
        "object" => {
            let properties = map.get("properties").and_then(Value::as_object);
            let required = map.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str);
            let object = required
                .map(|name| {
                    let property = properties.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
                    (name.to_string(), minimal_instance(property, root, depth + 1))
                })
                .collect();
            Value::Object(object)
        }
        "array" => {
            let item = map.get("items").map_or(Value::Null, |items| minimal_instance(items, root, depth + 1));
            Value::Array(vec![item; count("minItems").min(MAX_REPETITION) as usize])
        }
        "string" => Value::String("a".repeat(count("minLength").min(MAX_REPETITION) as usize)),
        "integer" | "number" => map.get("minimum").cloned().unwrap_or(Value::from(0)),
        "boolean" => Value::Bool(false),
        _ => Value::Null,
    }
}

/// Follows a local JSON pointer (`#/$defs/Name`).
fn resolve_ref<'a>(root: &'a Value, target: &str) -> Option<&'a Value> {
    let pointer = target.strip_prefix('#')?;
    root.pointer(pointer)
}

/// Gives every string schema without a `maxLength` the default cap. Walks every
/// nested schema position (properties, items, `$defs`, combinators) but never the
/// values of `enum`/`const`, which are data, not schemas.
fn cap_strings(schema: &mut Value, cap: u64) {
    let Value::Object(map) = schema else { return };
    let is_string = match map.get("type") {
        Some(Value::String(t)) => t == "string",
        Some(Value::Array(types)) => types.iter().any(|t| t == "string"),
        _ => false,
    };
    let constrained = ["enum", "const", "pattern", "format"].iter().any(|k| map.contains_key(*k));
    if is_string && !constrained {
        // An explicit limit above what llama.cpp can expand is lowered to the largest
        // it can: the output still satisfies the schema.
        let limit = map.get("maxLength").and_then(Value::as_u64).map_or(cap, |m| m.min(MAX_REPETITION));
        map.insert("maxLength".into(), Value::from(limit));
    }
    // An integer the Rust type holds in a fixed width (`"format": "uint32"`) gets that
    // width's bounds, so the model cannot write a number the type then refuses.
    let bounds = match map.get("format").and_then(Value::as_str) {
        Some("uint8") => Some((0, i64::from(u8::MAX))),
        Some("uint16") => Some((0, i64::from(u16::MAX))),
        Some("uint32") => Some((0, i64::from(u32::MAX))),
        Some("int8") => Some((i64::from(i8::MIN), i64::from(i8::MAX))),
        Some("int16") => Some((i64::from(i16::MIN), i64::from(i16::MAX))),
        Some("int32") => Some((i64::from(i32::MIN), i64::from(i32::MAX))),
        _ => None,
    };
    if let Some((low, high)) = bounds {
        map.entry("minimum").or_insert(Value::from(low));
        map.entry("maximum").or_insert(Value::from(high));
    }
    for (key, value) in map.iter_mut() {
        match key.as_str() {
            "enum" | "const" | "default" | "examples" | "description" | "title" => {}
            "properties" | "$defs" | "definitions" | "patternProperties" => {
                if let Value::Object(children) = value {
                    for child in children.values_mut() {
                        cap_strings(child, cap);
                    }
                }
            }
            "items" | "additionalProperties" | "not" | "contains" => cap_strings(value, cap),
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                if let Value::Array(children) = value {
                    for child in children {
                        cap_strings(child, cap);
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_needs_no_grammar_and_json_gets_an_object_grammar() {
        assert_eq!(for_format(&ResponseFormat::Text).unwrap(), None);
        let grammar = for_format(&ResponseFormat::Json).unwrap().unwrap();
        assert_eq!(grammar.root, START_RULE);
        assert!(grammar.gbnf.starts_with("lorekeeper-start ::= [ \\n]? root\n"));
        assert!(grammar.gbnf.contains("root ::="));
    }

    #[test]
    fn schema_features_we_use_all_convert() {
        let schema = json!({
            "type": "object",
            "properties": {
                "core_traits": { "type": "array", "items": { "type": "string" }, "minItems": 4, "maxItems": 6 },
                "mood": { "enum": ["calm", "tense"] },
                "importance": { "type": "integer", "minimum": 1, "maximum": 5 },
                "weight": { "type": "number" },
                "alive": { "type": "boolean" },
                "nickname": { "type": ["string", "null"] },
                "goals": { "$ref": "#/$defs/Goals" }
            },
            "required": ["core_traits", "mood", "importance", "weight", "alive", "goals"],
            "additionalProperties": false,
            "$defs": {
                "Goals": {
                    "type": "object",
                    "properties": { "surface": { "type": "string" }, "deep": { "type": "string" } },
                    "required": ["surface", "deep"]
                }
            }
        });
        let grammar = from_schema(&schema).unwrap();
        for needle in ["core-traits-item", "{3,5}", "calm", "tense", "[1-5]", "boolean", "nickname", "surface", "deep"] {
            assert!(grammar.gbnf.contains(needle), "grammar lacks {needle}:\n{}", grammar.gbnf);
        }
    }

    #[test]
    fn the_minimal_instance_has_only_what_the_schema_requires() {
        let schema = json!({
            "type": "object",
            "properties": {
                "traits": { "type": "array", "items": { "type": "string" }, "minItems": 2 },
                "mood": { "enum": ["calm", "tense"] },
                "level": { "type": "integer", "minimum": 1 },
                "alive": { "type": "boolean" },
                "nick": { "type": ["string", "null"] },
                "code": { "type": "string", "minLength": 3 },
                "goals": { "$ref": "#/$defs/Goals" },
                "either": { "anyOf": [{ "type": "object", "properties": { "x": { "type": "string" } }, "required": ["x"] }, { "type": "null" }] },
                "optional": { "type": "string" }
            },
            "required": ["traits", "mood", "level", "alive", "nick", "code", "goals", "either"],
            "$defs": { "Goals": { "type": "object", "properties": { "deep": { "type": "string" } }, "required": ["deep"] } }
        });
        assert_eq!(
            minimal_instance(&schema, &schema, 0),
            json!({ "traits": ["", ""], "mood": "calm", "level": 1, "alive": false, "nick": null, "code": "aaa", "goals": { "deep": "" }, "either": null })
        );
        let recursive = json!({ "$ref": "#" });
        assert_eq!(minimal_instance(&recursive, &recursive, 0), Value::Null);
        let grammar = from_schema(&schema).unwrap();
        assert!(grammar.minimal.starts_with("{\"traits\":[\"\",\"\"]"), "{}", grammar.minimal);
    }

    #[test]
    fn a_schema_the_converter_rejects_is_a_config_error() {
        let schema = json!({ "type": "object", "properties": { "a": { "$ref": "#/$defs/Missing" } }, "required": ["a"] });
        match from_schema(&schema) {
            Err(LlmError::Config(message)) => assert!(message.contains("grammar"), "{message}"),
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn strings_get_a_length_cap_but_enums_and_explicit_limits_do_not() {
        let mut schema = json!({
            "type": "object",
            "properties": {
                "free": { "type": "string" },
                "short": { "type": "string", "maxLength": 12 },
                "huge": { "type": "string", "maxLength": 100000 },
                "pick": { "type": "string", "enum": ["a", "b"] },
                "list": { "type": "array", "items": { "type": "string" } },
                "maybe": { "anyOf": [{ "type": "string" }, { "type": "null" }] }
            },
            "$defs": { "Inner": { "type": "string" } }
        });
        cap_strings(&mut schema, 50);
        assert_eq!(schema["properties"]["free"]["maxLength"], 50);
        assert_eq!(schema["properties"]["short"]["maxLength"], 12);
        assert_eq!(schema["properties"]["huge"]["maxLength"], 2000);
        assert!(schema["properties"]["pick"].get("maxLength").is_none());
        assert_eq!(schema["properties"]["list"]["items"]["maxLength"], 50);
        assert_eq!(schema["properties"]["maybe"]["anyOf"][0]["maxLength"], 50);
        assert_eq!(schema["$defs"]["Inner"]["maxLength"], 50);
    }

    /// A `u32` field (the Director's elapsed minutes) cannot be written as a number the
    /// type refuses: the model once wrote 1010708044997211.
    #[test]
    fn fixed_width_integers_get_their_bounds() {
        let mut schema = json!({ "type": "object", "properties": {
            "minutes": { "type": "integer", "format": "uint32", "minimum": 0 },
            "act": { "type": "integer", "format": "uint8", "minimum": 1, "maximum": 3 },
            "priority": { "type": "integer", "format": "int32" }
        }});
        cap_strings(&mut schema, 50);
        assert_eq!(schema["properties"]["minutes"]["maximum"], u32::MAX);
        assert_eq!(schema["properties"]["act"]["maximum"], 3);
        assert_eq!(schema["properties"]["priority"]["minimum"], i32::MIN);
        assert!(from_schema(&schema).is_ok());
    }
}
