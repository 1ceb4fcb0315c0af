//! Talking to language models: one [`Provider`] trait over every backend, and a
//! [`LlmClient`] that wraps any provider with retries, rate limiting and caching.
//!
//! Calls are blocking on purpose: the engine runs them on worker threads, which keeps
//! every provider simple to test against a plain local HTTP server and lets a
//! [`CancelToken`] stop a stream between two reads.

//! Subsystems, each a folder: `providers` (one attempt against one backend, on the
//! wire), `client` (every policy around a call: retries, rate limit, response cache,
//! call log), `structured` (schema → validate → repair → re-ask) and `local` (the
//! embedded model). `profile`, `secret`, `keyring` (keys kept in the OS keyring) and
//! `tokens` are shared by all of them.

pub mod client;
pub mod keyring;
pub mod local;
pub mod profile;
pub mod providers;
pub mod secret;
pub mod structured;
pub mod tokens;

pub use client::{calls, rate_limit, retry};
pub use providers::{scripted, sse};
pub use structured::repair;
use providers::{anthropic, gemini, http, openai, reply};

/// A base URL as it may be shown or stored: scheme, host and port only — never the
/// user-info, path or query a pasted URL can carry a key in.
pub fn shown_endpoint(url: &str) -> String {
    http::endpoint_of(url)
}

pub use client::cache::ResponseCache;
pub use client::LlmClient;
pub use profile::{ProviderKind, ProviderProfile, RetryPolicy, SamplerSettings, Timeouts};
pub use secret::Secret;

use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Who said a message in a chat request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
}

impl ChatMessage {
    pub fn system(content: impl Into<String>) -> Self {
        Self { role: Role::System, content: content.into() }
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self { role: Role::User, content: content.into() }
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self { role: Role::Assistant, content: content.into() }
    }
}

/// What shape the reply must have. Providers that cannot enforce a schema on the
/// server side still receive it, and the structured-output layer validates anyway.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    #[default]
    Text,
    /// Any JSON object.
    Json,
    /// JSON that must validate against `schema`.
    JsonSchema { name: String, schema: serde_json::Value },
    /// Any JSON object as far as the API contract goes, with `schema` passed where the
    /// server takes one beside it: llama.cpp's servers accept `response_format:
    /// {"type": "json_object", "schema": …}` and constrain decoding to it. The rung
    /// below `JsonSchema` for servers that refuse that (see `client::formats`).
    JsonObjectSchema { schema: serde_json::Value },
}

/// One request to a model. Everything that influences the answer lives here, so its
/// hash is a sound response-cache key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub sampler: SamplerSettings,
    #[serde(default)]
    pub response_format: ResponseFormat,
    /// Ask for a streamed reply. Tokens are delivered through [`CallContext::on_token`].
    #[serde(default)]
    pub stream: bool,
    /// Text the reply is started with, for a model that continues a transcript (the
    /// embedded model): without it a base model often writes more of the prompt
    /// instead of the character's line. Providers of chat models ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_prefix: Option<String>,
}

impl ChatRequest {
    pub fn new(model: impl Into<String>, messages: Vec<ChatMessage>) -> Self {
        Self {
            model: model.into(),
            messages,
            sampler: SamplerSettings::default(),
            response_format: ResponseFormat::Text,
            stream: false,
            reply_prefix: None,
        }
    }
}

/// Token counts as the provider reported them. `reported` is false when the provider
/// sent none and the numbers are our own estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub reported: bool,
}

impl Usage {
    /// Both counts; saturates, since a server may report any number.
    pub fn total(&self) -> u32 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

/// A finished reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    pub text: String,
    pub usage: Usage,
    /// The provider's stop reason, normalised to lower case (`stop`, `length`, ...).
    pub finish_reason: Option<String>,
    /// The model that answered, as the provider named it.
    pub model: String,
    /// Served from the response cache without reaching the provider.
    #[serde(default)]
    pub from_cache: bool,
    /// Wall time of the call, in milliseconds.
    #[serde(default)]
    pub elapsed_ms: u64,
}

/// Shared flag that stops an in-flight call. Cloning shares the flag.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
    /// The flag itself, for work below the LLM layer (lore activation) that stops on it.
    pub fn flag(&self) -> &AtomicBool {
        &self.0
    }
}

/// Per-call context: cancellation and the streaming sink.
#[derive(Clone, Copy)]
pub struct CallContext<'a> {
    pub cancel: &'a CancelToken,
    /// Receives each streamed text fragment as it arrives.
    pub on_token: Option<&'a (dyn Fn(&str) + Send + Sync)>,
    /// Told, while the call waits for a model another call holds (the embedded model
    /// answers one call at a time), what that other call is for (`Some("Tomas Reed,
    /// checkpoint 1")`): a wait of minutes is then a wait the user can read. Told `None`
    /// once the call has the model after such a wait, so a call that streams nothing (a
    /// Director's structured reply) does not read as waiting while it is answered.
    pub on_wait: Option<&'a (dyn Fn(Option<&str>) + Send + Sync)>,
    /// What this call is for, as another call waiting behind it is told.
    pub label: Option<&'a str>,
}

impl<'a> CallContext<'a> {
    pub fn new(cancel: &'a CancelToken) -> Self {
        Self { cancel, on_token: None, on_wait: None, label: None }
    }
    pub fn with_tokens(cancel: &'a CancelToken, on_token: &'a (dyn Fn(&str) + Send + Sync)) -> Self {
        Self { cancel, on_token: Some(on_token), on_wait: None, label: None }
    }
    /// The same context, telling `on_wait` what holds the model while the call waits.
    pub fn with_wait(mut self, on_wait: &'a (dyn Fn(Option<&str>) + Send + Sync)) -> Self {
        self.on_wait = Some(on_wait);
        self
    }
    /// Say that the model is busy with `what`.
    pub fn waiting(&self, what: &str) {
        if let Some(f) = self.on_wait {
            f(Some(what));
        }
    }
    /// Say that the wait [`CallContext::waiting`] told of is over: the call has the model.
    pub fn waited(&self) {
        if let Some(f) = self.on_wait {
            f(None);
        }
    }
    pub fn emit(&self, fragment: &str) {
        if let Some(f) = self.on_token {
            f(fragment);
        }
    }
}

/// Everything that can go wrong talking to a model. Messages never contain secrets.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    #[error("cannot reach {endpoint}: {message}")]
    Connect { endpoint: String, message: String },
    #[error("the provider did not answer within {0:?}")]
    Timeout(Duration),
    #[error("rate limited by the provider (HTTP 429){}", retry_after.map(|d| format!(", retry after {:.1}s", d.as_secs_f64())).unwrap_or_default())]
    RateLimited { retry_after: Option<Duration> },
    #[error("the provider answered HTTP {status}: {message}")]
    Http { status: u16, message: String },
    /// HTTP 503 with a `Retry-After`: the server said when to come back.
    #[error("the provider is unavailable (HTTP 503): {message}; retry after {:.1}s", retry_after.as_secs_f64())]
    Unavailable { message: String, retry_after: Duration },
    #[error("malformed response from the provider: {0}")]
    Malformed(String),
    #[error("the stream ended before the reply was complete ({} characters received)", partial.chars().count())]
    Truncated { partial: String },
    #[error("cancelled")]
    Cancelled,
    #[error("no API key: set the environment variable {var}, or store a key for the profile in the keyring")]
    MissingKey { var: String },
    #[error("provider configuration: {0}")]
    Config(String),
    #[error("structured output failed after {attempts} attempt(s): {last_error}")]
    Structured { attempts: u32, last_error: String },
    /// The provider refused to answer (a safety filter, a blocked prompt).
    #[error("the provider refused to answer: {reason}")]
    Blocked { reason: String },
}

/// Whether a server's error message says the request is invalid, whatever its status.
fn says_invalid(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    ["input should be", "validation error", "extra inputs are not permitted", "invalid_request_error", "unrecognized request argument", "field required"]
        .iter()
        .any(|needle| m.contains(needle))
}

impl LlmError {
    /// Errors worth retrying: the same request may succeed a moment later.
    pub fn is_transient(&self) -> bool {
        match self {
            LlmError::Connect { .. }
            | LlmError::Timeout(_)
            | LlmError::RateLimited { .. }
            | LlmError::Unavailable { .. }
            | LlmError::Truncated { .. } => true,
            // A 5xx that says the request itself is invalid (llama.cpp's Python server
            // answers a schema it cannot take with 500) would fail the same way again.
            LlmError::Http { status, message } => (*status >= 500 && !says_invalid(message)) || *status == 408,
            _ => false,
        }
    }

    /// The same error with every occurrence of `secret` removed from its text. Errors
    /// quote what servers said, and some servers echo the key back.
    pub fn scrub(self, secret: Option<&Secret>) -> Self {
        let Some(secret) = secret else { return self };
        match self {
            LlmError::Connect { endpoint, message } => {
                LlmError::Connect { endpoint: secret.scrub(&endpoint), message: secret.scrub(&message) }
            }
            LlmError::Http { status, message } => LlmError::Http { status, message: secret.scrub(&message) },
            LlmError::Unavailable { message, retry_after } => LlmError::Unavailable { message: secret.scrub(&message), retry_after },
            LlmError::Malformed(message) => LlmError::Malformed(secret.scrub(&message)),
            LlmError::Truncated { partial } => LlmError::Truncated { partial: secret.scrub(&partial) },
            LlmError::Config(message) => LlmError::Config(secret.scrub(&message)),
            LlmError::Structured { attempts, last_error } => {
                LlmError::Structured { attempts, last_error: secret.scrub(&last_error) }
            }
            LlmError::Blocked { reason } => LlmError::Blocked { reason: secret.scrub(&reason) },
            other @ (LlmError::Timeout(_)
            | LlmError::RateLimited { .. }
            | LlmError::Cancelled
            | LlmError::MissingKey { .. }) => other,
        }
    }
}

/// One backend that turns a [`ChatRequest`] into a [`Completion`].
///
/// Implementations do exactly one attempt: retries, rate limiting and caching are the
/// [`LlmClient`]'s job so every provider gets them the same way.
pub trait Provider: Send + Sync {
    /// Short human label, e.g. `openai-compatible (http://127.0.0.1:8080)`.
    fn describe(&self) -> String;
    fn complete(&self, request: &ChatRequest, ctx: CallContext<'_>) -> Result<Completion, LlmError>;
}
