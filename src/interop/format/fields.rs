//! Reading the fields of a JSON object one by one, leniently where real files vary and
//! with the field's path in every error.
//!
//! Taking a field removes it, so what is left at the end is exactly the set of fields
//! this build does not know: the `extra` that is written back on export (the same idea
//! as `#[serde(flatten)]`, with per-field leniency that derive cannot give). Cards in
//! the wild write numbers as strings or floats, booleans as 0/1 and lists as
//! comma-separated text; those are accepted. A value of the wrong kind altogether
//! (an object where text belongs) is an error naming the field.

use super::FormatError;
use serde_json::{Map, Value};

pub struct Fields {
    map: Map<String, Value>,
    path: String,
}

impl Fields {
    /// `value` must be a JSON object.
    pub fn new(value: Value, path: impl Into<String>) -> Result<Self, FormatError> {
        let path = path.into();
        match value {
            Value::Object(map) => Ok(Self { map, path }),
            other => Err(FormatError::Field { path, problem: format!("expected an object, found {}", kind(&other)) }),
        }
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// The path of a field of this object, for nested readers and errors.
    pub fn child(&self, key: &str) -> String {
        if self.path.is_empty() { key.to_string() } else { format!("{}.{key}", self.path) }
    }

    pub fn error(&self, key: &str, problem: impl Into<String>) -> FormatError {
        FormatError::Field { path: self.child(key), problem: problem.into() }
    }

    pub fn has(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// Remove a field as it is (`null` included).
    pub fn take(&mut self, key: &str) -> Option<Value> {
        self.map.shift_remove(key)
    }

    /// Text; numbers and booleans are accepted as their text. `null` is absent.
    pub fn string(&mut self, key: &str) -> Result<Option<String>, FormatError> {
        match self.take(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(Value::Bool(b)) => Ok(Some(b.to_string())),
            Some(other) => Err(self.error(key, format!("expected text, found {}", kind(&other)))),
        }
    }

    pub fn string_or_empty(&mut self, key: &str) -> Result<String, FormatError> {
        Ok(self.string(key)?.unwrap_or_default())
    }

    /// A boolean; `0`/`1` and `"true"`/`"false"` are accepted.
    pub fn bool(&mut self, key: &str) -> Result<Option<bool>, FormatError> {
        match self.take(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(Value::Number(n)) => Ok(Some(n.as_f64().is_some_and(|f| f != 0.0))),
            Some(Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" => Ok(Some(true)),
                "false" | "0" | "no" | "" => Ok(Some(false)),
                _ => Err(self.error(key, format!("expected true or false, found {s:?}"))),
            },
            Some(other) => Err(self.error(key, format!("expected true or false, found {}", kind(&other)))),
        }
    }

    /// A whole number; floats are rounded, numeric text is parsed, `true`/`false` are
    /// 1/0 (SillyTavern writes `delayUntilRecursion` either way).
    pub fn int(&mut self, key: &str) -> Result<Option<i64>, FormatError> {
        match self.take(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b as i64)),
            Some(Value::Number(n)) => Ok(Some(number_to_i64(&n))),
            Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
            Some(Value::String(s)) => match s.trim().parse::<f64>() {
                Ok(f) if f.is_finite() => Ok(Some(f.round().clamp(i64::MIN as f64, i64::MAX as f64) as i64)),
                _ => Err(self.error(key, format!("expected a number, found {s:?}"))),
            },
            Some(other) => Err(self.error(key, format!("expected a number, found {}", kind(&other)))),
        }
    }

    /// A count (negative values become 0).
    pub fn count(&mut self, key: &str) -> Result<Option<u32>, FormatError> {
        Ok(self.int(key)?.map(|n| n.clamp(0, u32::MAX as i64) as u32))
    }

    /// A list of text; a single text is split on commas (older tools), numbers in the
    /// list are taken as their text.
    pub fn strings(&mut self, key: &str) -> Result<Option<Vec<String>>, FormatError> {
        match self.take(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.split(',').map(str::trim).filter(|k| !k.is_empty()).map(String::from).collect())),
            Some(Value::Array(items)) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.into_iter().enumerate() {
                    match item {
                        Value::String(s) => out.push(s),
                        Value::Number(n) => out.push(n.to_string()),
                        Value::Null => {}
                        other => {
                            return Err(self.error(&format!("{key}[{i}]"), format!("expected text, found {}", kind(&other))));
                        }
                    }
                }
                Ok(Some(out))
            }
            Some(other) => Err(self.error(key, format!("expected a list of text, found {}", kind(&other)))),
        }
    }

    pub fn strings_or_empty(&mut self, key: &str) -> Result<Vec<String>, FormatError> {
        Ok(self.strings(key)?.unwrap_or_default())
    }

    /// A nested object; `null` is absent.
    pub fn object(&mut self, key: &str) -> Result<Option<Map<String, Value>>, FormatError> {
        match self.take(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(other) => Err(self.error(key, format!("expected an object, found {}", kind(&other)))),
        }
    }

    pub fn object_or_empty(&mut self, key: &str) -> Result<Map<String, Value>, FormatError> {
        Ok(self.object(key)?.unwrap_or_default())
    }

    /// The fields nobody took.
    pub fn rest(self) -> Map<String, Value> {
        self.map
    }
}

fn number_to_i64(n: &serde_json::Number) -> i64 {
    if let Some(i) = n.as_i64() {
        i
    } else if let Some(u) = n.as_u64() {
        i64::try_from(u).unwrap_or(i64::MAX)
    } else {
        n.as_f64().map_or(0, |f| f.round().clamp(i64::MIN as f64, i64::MAX as f64) as i64)
    }
}

/// "an object", "a number", ... for error messages.
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Insert `value` unless it is `None`.
pub fn put_opt<T: Into<Value>>(map: &mut Map<String, Value>, key: &str, value: Option<T>) {
    if let Some(v) = value {
        map.insert(key.to_string(), v.into());
    }
}

/// `Some(n)` as a number, `None` as `null`: SillyTavern writes its unset settings as null.
pub fn nullable<T: Into<Value>>(value: Option<T>) -> Value {
    value.map_or(Value::Null, Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lenient_scalars() {
        let mut f = Fields::new(json!({"a": "12", "b": 3.6, "c": true, "d": 1, "e": "a, b,,c", "f": null}), "x").unwrap();
        assert_eq!(f.int("a").unwrap(), Some(12));
        assert_eq!(f.int("b").unwrap(), Some(4));
        assert_eq!(f.int("c").unwrap(), Some(1));
        assert_eq!(f.bool("d").unwrap(), Some(true));
        assert_eq!(f.strings("e").unwrap(), Some(vec!["a".into(), "b".into(), "c".into()]));
        assert_eq!(f.string("f").unwrap(), None);
        assert!(f.rest().is_empty());
    }

    #[test]
    fn wrong_kinds_name_the_field() {
        let mut f = Fields::new(json!({"keys": [1, {"x": 1}], "n": {}}), "entries[3]").unwrap();
        let err = f.strings("keys").unwrap_err().to_string();
        assert_eq!(err, "entries[3].keys[1]: expected text, found an object");
        assert_eq!(f.int("n").unwrap_err().to_string(), "entries[3].n: expected a number, found an object");
        assert!(Fields::new(json!([1]), "data").is_err());
    }

    #[test]
    fn unknown_fields_are_left_in_order() {
        let mut f = Fields::new(json!({"z": 1, "known": "k", "a": 2}), "").unwrap();
        f.string("known").unwrap();
        let rest: Vec<String> = f.rest().keys().cloned().collect();
        assert_eq!(rest, vec!["z", "a"]);
    }
}
