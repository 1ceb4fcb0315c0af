//! The response cache: identical requests answered from the library instead of the
//! provider. Opt-in per profile, because a cached reply to a sampled request repeats
//! what was once a random draw.
//!
//! The key covers everything that shapes the answer and nothing that does not: the
//! endpoint and the request's model, messages, sampler and response format, as
//! canonical JSON (object keys sorted). Whether the call streams is not part of it (a
//! streamed call can be served by a cached non-streamed one and vice versa), and the
//! API key never is.

use crate::llm::{ChatRequest, Completion, Usage};
use crate::store::{Store, StoreError, now_rfc3339};
use rusqlite::OptionalExtension;
use serde_json::Value;
use sha2::{Digest, Sha256};

#[derive(Clone, Debug)]
pub struct ResponseCache {
    store: Store,
    capacity: usize,
}

impl ResponseCache {
    /// Replies kept by default: the least recently used go first beyond it, so a long
    /// campaign's cache cannot grow the library without bound.
    pub const DEFAULT_CAPACITY: usize = 5000;

    pub fn new(store: Store) -> Self {
        Self::with_capacity(store, Self::DEFAULT_CAPACITY)
    }

    pub fn with_capacity(store: Store, capacity: usize) -> Self {
        Self { store, capacity: capacity.max(1) }
    }

    /// The cache key of `request` sent to `endpoint` (a provider kind and address).
    pub fn key(endpoint: &str, request: &ChatRequest) -> String {
        let document = serde_json::json!({
            "endpoint": endpoint,
            "model": request.model,
            "messages": request.messages,
            "sampler": request.sampler,
            "response_format": request.response_format,
        });
        let canonical = canonical_json(&document);
        hex::encode(Sha256::digest(canonical.as_bytes()))
    }

    /// The cached reply for `key`, counting the hit.
    pub fn get(&self, key: &str) -> Result<Option<Completion>, StoreError> {
        self.store.with(|conn| {
            let found = conn
                .query_row(
                    "SELECT model, text, finish_reason, prompt_tokens, completion_tokens, usage_reported
                     FROM llm_response_cache WHERE key = ?1",
                    [key],
                    |row| {
                        Ok(Completion {
                            model: row.get(0)?,
                            text: row.get(1)?,
                            finish_reason: row.get(2)?,
                            usage: Usage {
                                prompt_tokens: row.get(3)?,
                                completion_tokens: row.get(4)?,
                                reported: row.get(5)?,
                            },
                            from_cache: true,
                            elapsed_ms: 0,
                        })
                    },
                )
                .optional()?;
            if found.is_some() {
                conn.execute(
                    "UPDATE llm_response_cache SET hits = hits + 1, last_hit_at = ?2 WHERE key = ?1",
                    [key, &now_rfc3339()],
                )?;
            }
            Ok(found)
        })
    }

    /// Remember `completion` as the reply for `key`.
    pub fn put(&self, key: &str, provider: &str, completion: &Completion) -> Result<(), StoreError> {
        self.store.with(|conn| {
            conn.execute(
                "INSERT INTO llm_response_cache
                    (key, provider, model, text, finish_reason, prompt_tokens, completion_tokens, usage_reported, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT(key) DO UPDATE SET
                    model = excluded.model, text = excluded.text, finish_reason = excluded.finish_reason,
                    prompt_tokens = excluded.prompt_tokens, completion_tokens = excluded.completion_tokens,
                    usage_reported = excluded.usage_reported, created_at = excluded.created_at",
                rusqlite::params![
                    key,
                    provider,
                    completion.model,
                    completion.text,
                    completion.finish_reason,
                    completion.usage.prompt_tokens,
                    completion.usage.completion_tokens,
                    completion.usage.reported,
                    now_rfc3339(),
                ],
            )?;
            // Over capacity: drop the least recently used (written or served) replies.
            conn.execute(
                "DELETE FROM llm_response_cache WHERE key IN (
                     SELECT key FROM llm_response_cache
                     ORDER BY coalesce(last_hit_at, created_at) DESC, created_at DESC LIMIT -1 OFFSET ?1)",
                [self.capacity as i64],
            )?;
            Ok(())
        })
    }

    /// Number of cached replies.
    pub fn len(&self) -> Result<u64, StoreError> {
        let count: i64 =
            self.store.with(|conn| Ok(conn.query_row("SELECT COUNT(*) FROM llm_response_cache", [], |r| r.get(0))?))?;
        Ok(count.max(0) as u64)
    }

    pub fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.len()? == 0)
    }

    /// Forget every cached reply; returns how many there were.
    pub fn clear(&self) -> Result<usize, StoreError> {
        self.store.with(|conn| Ok(conn.execute("DELETE FROM llm_response_cache", [])?))
    }
}

/// JSON with object keys sorted at every level and no insignificant whitespace, so
/// equal documents hash equally whatever order their keys were built in.
pub fn canonical_json(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                Value::Object(entries.into_iter().map(|(k, v)| (k.clone(), sorted(v))).collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ChatMessage, ResponseFormat};

    fn request() -> ChatRequest {
        ChatRequest::new("m", vec![ChatMessage::system("s"), ChatMessage::user("u")])
    }

    #[test]
    fn canonical_json_ignores_key_order() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": [1, {"d": 0, "c": 0}], "x": null}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a": {"x": null, "y": [1, {"c": 0, "d": 0}]}, "b": 1}"#).unwrap();
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(canonical_json(&b), r#"{"a":{"x":null,"y":[1,{"c":0,"d":0}]},"b":1}"#);
    }

    #[test]
    fn the_key_changes_with_everything_that_shapes_the_answer() {
        let base = ResponseCache::key("openai http://x", &request());
        assert_eq!(base.len(), 64);
        assert_eq!(base, ResponseCache::key("openai http://x", &request()));

        let mut streamed = request();
        streamed.stream = true;
        assert_eq!(base, ResponseCache::key("openai http://x", &streamed), "streaming does not change the answer");

        let mut variants = Vec::new();
        variants.push(ResponseCache::key("openai http://y", &request()));
        let mut r = request();
        r.model = "other".into();
        variants.push(ResponseCache::key("openai http://x", &r));
        let mut r = request();
        r.messages.push(ChatMessage::assistant("a"));
        variants.push(ResponseCache::key("openai http://x", &r));
        let mut r = request();
        r.sampler.temperature = Some(0.5);
        variants.push(ResponseCache::key("openai http://x", &r));
        let mut r = request();
        r.response_format = ResponseFormat::Json;
        variants.push(ResponseCache::key("openai http://x", &r));
        let mut r = request();
        r.response_format = ResponseFormat::JsonSchema { name: "x".into(), schema: serde_json::json!({"type": "object"}) };
        variants.push(ResponseCache::key("openai http://x", &r));
        for v in &variants {
            assert_ne!(&base, v);
        }
        let unique: std::collections::HashSet<_> = variants.iter().collect();
        assert_eq!(unique.len(), variants.len());
    }

    #[test]
    fn the_least_recently_used_replies_go_beyond_capacity() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ResponseCache::with_capacity(Store::open(dir.path().join("lib.sqlite")).unwrap(), 3);
        let reply = |text: &str| Completion {
            text: text.into(),
            usage: Usage::default(),
            finish_reason: None,
            model: "m".into(),
            from_cache: false,
            elapsed_ms: 0,
        };
        for key in ["a", "b", "c"] {
            cache.put(key, "openai", &reply(key)).unwrap();
            // Timestamps have millisecond resolution: keep the order unambiguous.
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // "a" is served again, so "b" is now the least recently used.
        assert!(cache.get("a").unwrap().is_some());
        std::thread::sleep(std::time::Duration::from_millis(5));
        cache.put("d", "openai", &reply("d")).unwrap();
        assert_eq!(cache.len().unwrap(), 3);
        assert!(cache.get("b").unwrap().is_none());
        for key in ["a", "c", "d"] {
            assert!(cache.get(key).unwrap().is_some(), "{key} kept");
        }
    }

    #[test]
    fn put_then_get_round_trips_and_counts_hits() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ResponseCache::new(Store::open(dir.path().join("lib.sqlite")).unwrap());
        assert!(cache.is_empty().unwrap());
        assert_eq!(cache.get("k").unwrap(), None);
        let completion = Completion {
            text: "Hello, world — ünïcode".into(),
            usage: Usage { prompt_tokens: 12, completion_tokens: 5, reported: true },
            finish_reason: Some("stop".into()),
            model: "m-1".into(),
            from_cache: false,
            elapsed_ms: 321,
        };
        cache.put("k", "openai", &completion).unwrap();
        cache.put("k", "openai", &completion).unwrap(); // replacing is fine
        let hit = cache.get("k").unwrap().unwrap();
        assert_eq!(hit, Completion { from_cache: true, elapsed_ms: 0, ..completion });
        cache.get("k").unwrap();
        let hits: i64 = cache
            .store
            .with(|c| Ok(c.query_row("SELECT hits FROM llm_response_cache WHERE key = 'k'", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(hits, 2);
        assert_eq!(cache.len().unwrap(), 1);
        assert_eq!(cache.clear().unwrap(), 1);
        assert!(cache.is_empty().unwrap());
    }
}
