//! JSON Schema (as schemars writes it) → the OpenAPI subset Gemini's `responseSchema`
//! accepts. Gemini rejects the request outright on keywords it does not know
//! (`$schema`, `$ref`, `additionalProperties`, ...), so the schema is rewritten:
//! references are inlined, `["T", "null"]` and `anyOf [T, null]` become
//! `nullable: true`, `const` becomes a one-value `enum`, unsupported formats and
//! keywords are dropped, type names are upper-cased, and `propertyOrdering` keeps the
//! struct's field order (Gemini otherwise orders properties alphabetically).
//!
//! Dropping a keyword loosens the server-side constraint only: the structured-output
//! layer still validates the reply against the full schema.

use serde_json::{Map, Value, json};

/// Deepest `$ref` nesting inlined; a recursive type is cut off below it as a plain
/// object.
const MAX_DEPTH: usize = 16;

pub(crate) fn to_gemini_schema(schema: &Value) -> Value {
    convert(schema, schema, 0)
}

fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    root.pointer(pointer)
}

fn convert(node: &Value, root: &Value, depth: usize) -> Value {
    let Some(object) = node.as_object() else {
        // `true` (anything) and other degenerate schemas: no constraint Gemini can say.
        return json!({"type": "STRING"});
    };
    if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
        if depth >= MAX_DEPTH {
            return json!({"type": "OBJECT"});
        }
        return match resolve(root, reference) {
            Some(target) => {
                let mut converted = convert(target, root, depth + 1);
                // Sibling keywords of a `$ref` (often a description) still apply.
                if let (Some(out), Some(desc)) = (converted.as_object_mut(), object.get("description")) {
                    out.insert("description".into(), desc.clone());
                }
                converted
            }
            None => json!({"type": "OBJECT"}),
        };
    }

    let mut out = Map::new();
    let mut nullable = object.get("nullable").and_then(Value::as_bool).unwrap_or(false);

    // `type` may be a list: keep the one non-null type, record nullability.
    let mut kind: Option<String> = match object.get("type") {
        Some(Value::String(t)) => Some(t.clone()),
        Some(Value::Array(types)) => {
            let names: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
            nullable |= names.contains(&"null");
            let non_null: Vec<&str> = names.into_iter().filter(|t| *t != "null").collect();
            (non_null.len() == 1).then(|| non_null[0].to_string())
        }
        _ => None,
    };

    // anyOf / oneOf: `[T, null]` is a nullable T; anything else stays an anyOf.
    let alternatives = object.get("anyOf").or_else(|| object.get("oneOf")).and_then(Value::as_array);
    if let Some(alternatives) = alternatives {
        let is_null = |v: &Value| v.get("type").and_then(Value::as_str) == Some("null");
        let rest: Vec<&Value> = alternatives.iter().filter(|v| !is_null(v)).collect();
        nullable |= rest.len() < alternatives.len();
        if rest.len() == 1 && kind.is_none() {
            let mut inner = convert(rest[0], root, depth);
            if let Some(inner_map) = inner.as_object_mut() {
                if nullable {
                    inner_map.insert("nullable".into(), json!(true));
                }
                if let Some(desc) = object.get("description") {
                    inner_map.insert("description".into(), desc.clone());
                }
            }
            return inner;
        }
        if !rest.is_empty() {
            out.insert("anyOf".into(), Value::Array(rest.into_iter().map(|v| convert(v, root, depth)).collect()));
        }
    }

    if let Some(value) = object.get("const") {
        out.insert("enum".into(), json!([value]));
        if kind.is_none() && value.is_string() {
            kind = Some("string".into());
        }
    }
    if let Some(values) = object.get("enum").and_then(Value::as_array) {
        // Gemini's enums are string-only; a null member means nullable.
        nullable |= values.iter().any(Value::is_null);
        let strings: Vec<Value> = values.iter().filter(|v| v.is_string()).cloned().collect();
        if strings.len() == values.iter().filter(|v| !v.is_null()).count() && !strings.is_empty() {
            out.insert("enum".into(), Value::Array(strings));
            kind.get_or_insert_with(|| "string".into());
        }
    }

    if let Some(kind) = &kind {
        out.insert("type".into(), json!(kind.to_ascii_uppercase()));
        if let Some(format) = object.get("format").and_then(Value::as_str) {
            let supported = match kind.as_str() {
                "string" => matches!(format, "date-time" | "enum"),
                "integer" => matches!(format, "int32" | "int64"),
                "number" => matches!(format, "float" | "double"),
                _ => false,
            };
            if supported {
                out.insert("format".into(), json!(format));
            }
        }
    }
    if nullable {
        out.insert("nullable".into(), json!(true));
    }
    for key in ["description", "title", "minItems", "maxItems", "minimum", "maximum", "minLength", "maxLength", "pattern"] {
        if let Some(value) = object.get(key) {
            out.insert(key.into(), value.clone());
        }
    }
    if let Some(items) = object.get("items") {
        out.insert("items".into(), convert(items, root, depth));
    }
    if let Some(properties) = object.get("properties").and_then(Value::as_object) {
        let converted: Map<String, Value> =
            properties.iter().map(|(name, schema)| (name.clone(), convert(schema, root, depth))).collect();
        out.insert("propertyOrdering".into(), json!(properties.keys().collect::<Vec<_>>()));
        out.insert("properties".into(), Value::Object(converted));
        out.entry("type").or_insert_with(|| json!("OBJECT"));
    }
    if let Some(required) = object.get("required").filter(|r| r.is_array()) {
        out.insert("required".into(), required.clone());
    }
    if out.get("type").is_none() && out.get("anyOf").is_none() {
        // Gemini needs a type; an unconstrained value is closest to a string.
        out.insert("type".into(), json!("STRING"));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schemars_style_schema_becomes_gemini_shaped() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Profile",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "name": {"type": "string"},
                "age": {"type": ["integer", "null"], "format": "uint32", "minimum": 0},
                "traits": {"type": "array", "items": {"type": "string"}, "minItems": 4, "maxItems": 6},
                "mood": {"$ref": "#/$defs/Mood", "description": "How they feel."},
                "home": {"anyOf": [{"$ref": "#/$defs/Place"}, {"type": "null"}]},
                "kind": {"const": "npc"}
            },
            "required": ["name", "traits"],
            "$defs": {
                "Mood": {"type": "string", "enum": ["calm", "angry"]},
                "Place": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
            }
        });
        let expected = json!({
            "type": "OBJECT",
            "title": "Profile",
            "propertyOrdering": ["name", "age", "traits", "mood", "home", "kind"],
            "properties": {
                "name": {"type": "STRING"},
                "age": {"type": "INTEGER", "nullable": true, "minimum": 0},
                "traits": {"type": "ARRAY", "minItems": 4, "maxItems": 6, "items": {"type": "STRING"}},
                "mood": {"enum": ["calm", "angry"], "type": "STRING", "description": "How they feel."},
                "home": {
                    "type": "OBJECT", "propertyOrdering": ["city"], "properties": {"city": {"type": "STRING"}},
                    "required": ["city"], "nullable": true
                },
                "kind": {"enum": ["npc"], "type": "STRING"}
            },
            "required": ["name", "traits"]
        });
        assert_eq!(to_gemini_schema(&schema), expected);
    }

    #[test]
    fn recursive_references_stop() {
        let schema = json!({
            "type": "object",
            "properties": {"child": {"$ref": "#/$defs/Node"}},
            "$defs": {"Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}}}
        });
        let converted = to_gemini_schema(&schema);
        let text = converted.to_string();
        assert!(!text.contains("$ref"));
        assert!(text.len() < 10_000);
    }

    #[test]
    fn unknown_shapes_still_get_a_type() {
        assert_eq!(to_gemini_schema(&json!(true)), json!({"type": "STRING"}));
        assert_eq!(to_gemini_schema(&json!({"$ref": "#/nowhere"})), json!({"type": "OBJECT"}));
        let mixed = to_gemini_schema(&json!({"anyOf": [{"type": "string"}, {"type": "integer"}]}));
        assert_eq!(mixed, json!({"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]}));
    }
}
