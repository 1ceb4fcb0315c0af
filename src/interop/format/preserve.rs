//! Lossless re-export: write back the document as it was read, changed only where the
//! model was changed.
//!
//! Decoding normalises (an absent field becomes its default, `100.0` becomes `100`,
//! `false` becomes `0`), so encoding a decoded document does not give the same bytes.
//! Rather than track how every field was spelled, export encodes twice: `baseline`
//! from the document as it was imported, `fresh` from the model as it is now. Where
//! the two agree nothing was edited and the source's own spelling is kept; where they
//! differ the fresh value wins. Unedited documents therefore come back equal to what
//! was imported, unknown fields included.

use serde_json::Value;

/// Merge `fresh` into `source`, keeping the source wherever `baseline` equals `fresh`.
pub fn preserve(source: &Value, baseline: &Value, fresh: &Value) -> Value {
    match (source, baseline, fresh) {
        (Value::Object(src), Value::Object(base), Value::Object(new)) => {
            let mut out = src.clone();
            for (key, new_value) in new {
                let base_value = base.get(key);
                if base_value == Some(new_value) {
                    continue;
                }
                let merged = match (src.get(key), base_value) {
                    (Some(s), Some(b)) => preserve(s, b, new_value),
                    _ => new_value.clone(),
                };
                out.insert(key.clone(), merged);
            }
            for key in base.keys() {
                if !new.contains_key(key) {
                    out.remove(key);
                }
            }
            out.into()
        }
        _ if baseline == fresh => source.clone(),
        _ => fresh.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unchanged_keeps_the_source_spelling() {
        let source = json!({"order": 100.0, "flag": false, "unknown": [1, 2]});
        let baseline = json!({"order": 100, "flag": 0, "absent": null, "unknown": [1, 2]});
        assert_eq!(preserve(&source, &baseline, &baseline), source);
    }

    #[test]
    fn changed_fields_take_the_new_value_and_nested_objects_merge() {
        let source = json!({"a": 1.0, "ext": {"x": "keep", "y": 1}, "gone": 1});
        let baseline = json!({"a": 1, "ext": {"x": "keep", "y": 1}, "gone": 1});
        let fresh = json!({"a": 2, "ext": {"x": "keep", "y": 5}, "new": true});
        assert_eq!(preserve(&source, &baseline, &fresh), json!({"a": 2, "ext": {"x": "keep", "y": 5}, "new": true}));
    }

    #[test]
    fn fields_the_decoder_ignored_survive() {
        let source = json!({"a": 1, "legacy": "x"});
        let baseline = json!({"a": 1});
        let fresh = json!({"a": 3});
        assert_eq!(preserve(&source, &baseline, &fresh), json!({"a": 3, "legacy": "x"}));
    }
}
