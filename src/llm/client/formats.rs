//! The structured-output ladder: `json_schema` → `json_object` with the schema beside it
//! (llama.cpp's servers constrain decoding to it) → plain `json_object` (the schema stays
//! in the prompt) → plain text (the structured layer repairs and validates it).
//!
//! Servers people run do not all take OpenAI's `response_format: json_schema`:
//! llama.cpp's Python server answers it with HTTP 500 ("Input should be 'text' or
//! 'json_object'"), others with 400 or 422. Sending the same request again only bills
//! the same refusal, so a refusal moves the profile one rung down at once and the call
//! goes on there. The rung is remembered per profile and server: in memory for every
//! client built from the profile, and in the library (`format_fallbacks`) so the next
//! session starts where this one ended. Owned by the LLM client; nothing else touches
//! the table.

use crate::llm::{ChatRequest, LlmError, ResponseFormat};
use crate::store::{Store, StoreError, now_rfc3339};
use rusqlite::{OptionalExtension, params};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

/// How much structure a server accepts, from most to least.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FormatLevel {
    /// `response_format: json_schema` (or the provider's own schema field).
    Schema = 0,
    /// `json_object` with the schema beside it, as llama.cpp's servers take it.
    ObjectWithSchema = 1,
    /// Any JSON (`json_object`); the schema is in the prompt.
    JsonObject = 2,
    /// No response format at all; the structured layer repairs the text.
    Text = 3,
}

impl FormatLevel {
    pub fn name(self) -> &'static str {
        match self {
            FormatLevel::Schema => "json_schema",
            FormatLevel::ObjectWithSchema => "json_object+schema",
            FormatLevel::JsonObject => "json_object",
            FormatLevel::Text => "text",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        match name {
            "json_schema" => Some(FormatLevel::Schema),
            "json_object+schema" => Some(FormatLevel::ObjectWithSchema),
            "json_object" => Some(FormatLevel::JsonObject),
            "text" => Some(FormatLevel::Text),
            _ => None,
        }
    }

    fn from_u8(n: u8) -> Self {
        match n {
            0 => FormatLevel::Schema,
            1 => FormatLevel::ObjectWithSchema,
            2 => FormatLevel::JsonObject,
            _ => FormatLevel::Text,
        }
    }

    /// The rung below, if any.
    pub fn lower(self) -> Option<Self> {
        match self {
            FormatLevel::Schema => Some(FormatLevel::ObjectWithSchema),
            FormatLevel::ObjectWithSchema => Some(FormatLevel::JsonObject),
            FormatLevel::JsonObject => Some(FormatLevel::Text),
            FormatLevel::Text => None,
        }
    }

    /// The rung a request's format is sent at.
    pub fn of(format: &ResponseFormat) -> Self {
        match format {
            ResponseFormat::JsonSchema { .. } => FormatLevel::Schema,
            ResponseFormat::JsonObjectSchema { .. } => FormatLevel::ObjectWithSchema,
            ResponseFormat::Json => FormatLevel::JsonObject,
            ResponseFormat::Text => FormatLevel::Text,
        }
    }
}

/// `request` as sent at `level`: its format lowered to the rung, never raised.
pub fn at_level(request: &ChatRequest, level: FormatLevel) -> std::borrow::Cow<'_, ChatRequest> {
    if FormatLevel::of(&request.response_format) >= level {
        return std::borrow::Cow::Borrowed(request);
    }
    let mut lowered = request.clone();
    lowered.response_format = match level {
        FormatLevel::Schema => unreachable!("a request is never below the top rung"),
        FormatLevel::ObjectWithSchema => match &request.response_format {
            ResponseFormat::JsonSchema { schema, .. } => ResponseFormat::JsonObjectSchema { schema: schema.clone() },
            _ => ResponseFormat::Json,
        },
        FormatLevel::JsonObject => ResponseFormat::Json,
        FormatLevel::Text => ResponseFormat::Text,
    };
    std::borrow::Cow::Owned(lowered)
}

/// Whether `error` is the server refusing the response format it was sent (rather than
/// failing for another reason): an HTTP error that names the format.
pub fn refuses_format(error: &LlmError, sent: &ResponseFormat) -> bool {
    if matches!(sent, ResponseFormat::Text) {
        return false;
    }
    let LlmError::Http { status, message } = error else { return false };
    if !(400..600).contains(status) || matches!(status, 401 | 403 | 404 | 408 | 429) {
        return false;
    }
    let m = message.to_ascii_lowercase();
    ["response_format", "response format", "json_schema", "json_object", "responsemimetype", "responseschema", "response_schema"]
        .iter()
        .any(|needle| m.contains(needle))
}

/// Each profile's rung, shared by every client built from it in this process.
static LEVELS: LazyLock<Mutex<HashMap<String, Arc<AtomicU8>>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// The rung of one profile on one server.
#[derive(Clone)]
pub struct FormatMemory {
    profile: String,
    endpoint: String,
    level: Arc<AtomicU8>,
    store: Option<Store>,
}

impl FormatMemory {
    /// The shared rung for `profile` on `endpoint`, starting at `start` the first time.
    pub fn shared(profile: &str, endpoint: &str, start: FormatLevel) -> Self {
        let key = format!("{profile}|{endpoint}");
        let level = LEVELS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key)
            .or_insert_with(|| Arc::new(AtomicU8::new(start as u8)))
            .clone();
        Self { profile: profile.to_string(), endpoint: endpoint.to_string(), level, store: None }
    }

    /// Remember in `store` too, and start from what it remembers.
    pub fn with_store(mut self, store: &Store) -> Self {
        match store.with(|c| {
            Ok(c.query_row(
                "SELECT level FROM format_fallbacks WHERE profile = ?1 AND endpoint = ?2",
                params![self.profile, self.endpoint],
                |r| r.get::<_, String>(0),
            )
            .optional()?)
        }) {
            Ok(Some(name)) => {
                if let Some(level) = FormatLevel::from_name(&name) {
                    self.level.fetch_max(level as u8, Ordering::SeqCst);
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "could not read the remembered response format"),
        }
        self.store = Some(store.clone());
        self
    }

    pub fn level(&self) -> FormatLevel {
        FormatLevel::from_u8(self.level.load(Ordering::SeqCst))
    }

    /// Move below `refused` (the rung the server just refused); the new rung, or `None`
    /// at the bottom. Two calls refused at once move it one rung, not two.
    pub fn step_down(&self, refused: FormatLevel, reason: &str) -> Option<FormatLevel> {
        let next = refused.lower()?;
        let before = self.level.fetch_max(next as u8, Ordering::SeqCst);
        if before < next as u8 {
            tracing::warn!(profile = %self.profile, from = refused.name(), to = next.name(), reason, "the server refused a response format; using the next one");
            if let Some(store) = &self.store
                && let Err(e) = remember(store, &self.profile, &self.endpoint, next, reason)
            {
                tracing::warn!(error = %e, "could not remember the response format in the library");
            }
        }
        Some(self.level())
    }
}

fn remember(store: &Store, profile: &str, endpoint: &str, level: FormatLevel, reason: &str) -> Result<(), StoreError> {
    let reason: String = reason.chars().take(300).collect();
    store.transaction(|tx| {
        tx.execute(
            "INSERT INTO format_fallbacks (profile, endpoint, level, reason, at) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT(profile, endpoint) DO UPDATE SET level = excluded.level, reason = excluded.reason, at = excluded.at",
            params![profile, endpoint, level.name(), reason, now_rfc3339()],
        )?;
        Ok(())
    })
}

/// What the library remembers: `(profile, endpoint, level, reason)` per profile.
pub fn remembered(store: &Store) -> Result<Vec<(String, String, String, String)>, StoreError> {
    store.with(|c| {
        let mut stmt = c.prepare("SELECT profile, endpoint, level, reason FROM format_fallbacks ORDER BY profile, endpoint")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    })
}

/// Forget a profile's rung (after the server was upgraded): the next call starts at the top.
pub fn forget(store: &Store, profile: &str) -> Result<usize, StoreError> {
    LEVELS.lock().unwrap_or_else(|p| p.into_inner()).retain(|key, _| !key.starts_with(&format!("{profile}|")));
    store.transaction(|tx| Ok(tx.execute("DELETE FROM format_fallbacks WHERE profile = ?1", params![profile])?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16, message: &str) -> LlmError {
        LlmError::Http { status, message: message.into() }
    }

    #[test]
    fn a_refusal_names_the_format() {
        let schema = ResponseFormat::JsonSchema { name: "x".into(), schema: serde_json::json!({}) };
        assert!(refuses_format(&http(500, "response_format.type: Input should be 'text' or 'json_object'"), &schema));
        assert!(refuses_format(&http(400, "Invalid parameter: 'response_format' of type 'json_schema' is not supported"), &schema));
        assert!(refuses_format(&http(422, "json_object is not supported by this model"), &ResponseFormat::Json));
        assert!(!refuses_format(&http(500, "CUDA out of memory"), &schema), "another failure is not a refusal");
        assert!(!refuses_format(&http(429, "response_format rate"), &schema));
        assert!(!refuses_format(&http(400, "response_format"), &ResponseFormat::Text), "text cannot go lower");
    }

    #[test]
    fn a_request_is_lowered_never_raised() {
        let mut request = ChatRequest::new("m", vec![]);
        request.response_format = ResponseFormat::JsonSchema { name: "x".into(), schema: serde_json::json!({}) };
        assert_eq!(at_level(&request, FormatLevel::ObjectWithSchema).response_format, ResponseFormat::JsonObjectSchema { schema: serde_json::json!({}) });
        assert_eq!(at_level(&request, FormatLevel::JsonObject).response_format, ResponseFormat::Json);
        assert_eq!(at_level(&request, FormatLevel::Text).response_format, ResponseFormat::Text);
        assert!(matches!(at_level(&request, FormatLevel::Schema), std::borrow::Cow::Borrowed(_)));
        request.response_format = ResponseFormat::Text;
        assert_eq!(at_level(&request, FormatLevel::JsonObject).response_format, ResponseFormat::Text);
    }

    #[test]
    fn the_rung_is_shared_and_only_goes_down() {
        let a = FormatMemory::shared("ladder-test", "http://127.0.0.1:1", FormatLevel::Schema);
        let b = FormatMemory::shared("ladder-test", "http://127.0.0.1:1", FormatLevel::Schema);
        assert_eq!(a.step_down(FormatLevel::Schema, "refused"), Some(FormatLevel::ObjectWithSchema));
        assert_eq!(b.level(), FormatLevel::ObjectWithSchema, "clients of one profile share the rung");
        assert_eq!(b.step_down(FormatLevel::Schema, "refused again"), Some(FormatLevel::ObjectWithSchema), "a late refusal of the old rung does not skip one");
        assert_eq!(a.step_down(FormatLevel::ObjectWithSchema, "refused"), Some(FormatLevel::JsonObject));
        assert_eq!(a.step_down(FormatLevel::JsonObject, "refused"), Some(FormatLevel::Text));
        assert_eq!(a.step_down(FormatLevel::Text, "refused"), None);
    }
}
