//! Named provider profiles: which backend, which model, and how to talk to it.
//! Profiles are stored in the TOML config; API keys never are (see [`crate::llm::Secret`]).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// Any OpenAI-compatible chat-completions server (llama.cpp, Ollama, LM Studio,
    /// vLLM, OpenRouter, OpenAI).
    #[default]
    Openai,
    /// Anthropic Messages API.
    Anthropic,
    /// Google Gemini `generateContent` / `streamGenerateContent`.
    Gemini,
    /// Replies read from a script file: deterministic tests and demos.
    Scripted,
    /// The embedded in-process model.
    Local,
}

impl ProviderKind {
    pub const ALL: [ProviderKind; 5] = [
        ProviderKind::Openai,
        ProviderKind::Anthropic,
        ProviderKind::Gemini,
        ProviderKind::Scripted,
        ProviderKind::Local,
    ];

    pub fn label(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Gemini => "gemini",
            ProviderKind::Scripted => "scripted",
            ProviderKind::Local => "local",
        }
    }

    /// The environment variable a key is read from when the profile names none.
    pub fn default_key_env(self) -> Option<&'static str> {
        match self {
            ProviderKind::Openai => Some("OPENAI_API_KEY"),
            ProviderKind::Anthropic => Some("ANTHROPIC_API_KEY"),
            ProviderKind::Gemini => Some("GEMINI_API_KEY"),
            ProviderKind::Scripted | ProviderKind::Local => None,
        }
    }

    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            ProviderKind::Openai => Some("http://127.0.0.1:8080/v1"),
            ProviderKind::Anthropic => Some("https://api.anthropic.com"),
            ProviderKind::Gemini => Some("https://generativelanguage.googleapis.com"),
            ProviderKind::Scripted | ProviderKind::Local => None,
        }
    }
}

/// Sampling parameters. `None` means "the server's default".
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplerSettings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f32>,
    /// Texts the reply must not copy: a worked example shown in the prompt, say. The
    /// embedded model lowers every token that would continue a three-token run of
    /// them; no remote API has such a setting, so it is never sent.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub avoid: Vec<String>,
}

/// What one API calls each sampler setting; `None` where it takes no such setting (the
/// value is then not sent). One table per API keeps the providers from each growing
/// their own copy of the same mapping.
pub(crate) struct SamplerWireNames {
    pub temperature: Option<&'static str>,
    pub top_p: Option<&'static str>,
    pub top_k: Option<&'static str>,
    pub max_tokens: Option<&'static str>,
    pub seed: Option<&'static str>,
    pub presence_penalty: Option<&'static str>,
    pub frequency_penalty: Option<&'static str>,
    pub stop: Option<&'static str>,
}

impl SamplerSettings {
    /// The settings that are set, under the API's names, in a fixed order.
    pub(crate) fn wire_fields(&self, names: &SamplerWireNames) -> Vec<(&'static str, serde_json::Value)> {
        use serde_json::json;
        [
            (names.temperature, self.temperature.map(|v| json!(v))),
            (names.top_p, self.top_p.map(|v| json!(v))),
            (names.top_k, self.top_k.map(|v| json!(v))),
            (names.max_tokens, self.max_tokens.map(|v| json!(v))),
            (names.seed, self.seed.map(|v| json!(v))),
            (names.presence_penalty, self.presence_penalty.map(|v| json!(v))),
            (names.frequency_penalty, self.frequency_penalty.map(|v| json!(v))),
            (names.stop, (!self.stop.is_empty()).then(|| json!(self.stop))),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some((name?, value?)))
        .collect()
    }
}

/// Time limits for one HTTP attempt.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Timeouts {
    pub connect_secs: f64,
    /// Longest silence allowed while waiting for the first byte or between stream chunks.
    pub read_secs: f64,
    /// Hard limit for the whole attempt, streaming included.
    pub total_secs: f64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self { connect_secs: 10.0, read_secs: 60.0, total_secs: 600.0 }
    }
}

/// How transient failures are retried: exponential backoff with full jitter, capped,
/// and never shorter than a server's `Retry-After`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetryPolicy {
    pub max_retries: u32,
    pub base_delay_ms: u64,
    pub max_delay_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_retries: 3, base_delay_ms: 500, max_delay_ms: 30_000 }
    }
}

/// A named way to reach a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProviderProfile {
    pub name: String,
    pub kind: ProviderKind,
    /// Server root, e.g. `http://127.0.0.1:8080/v1` for an OpenAI-compatible server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    pub model: String,
    /// Environment variable holding the API key; the kind's default when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    pub sampler: SamplerSettings,
    pub max_context_tokens: u32,
    pub timeouts: Timeouts,
    pub retry: RetryPolicy,
    /// Client-side limit; `None` for no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u32>,
    /// Serve identical requests from the response cache in the library.
    pub cache: bool,
    /// Whether the server understands `response_format: json_schema`.
    pub supports_json_schema: bool,
    /// Script file for the scripted provider, or model file for the local provider.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// CPU threads the embedded local model computes with; `None` picks a default
    /// from the machine (see `llm::local::default_threads`). Other kinds ignore it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
    /// Send the key over plain `http://` to a host that is not this machine. Off: a key
    /// for such a base URL is refused rather than sent where anyone on the way can read it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub allow_key_over_http: bool,
    /// Requests this profile has in flight at once. `None`: one at a time for an
    /// OpenAI-compatible server on this machine or the local network (most serve one
    /// request at a time, and llama.cpp's Python server cuts a running stream short
    /// when another arrives), no limit elsewhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<u32>,
}

impl Default for ProviderProfile {
    fn default() -> Self {
        Self {
            name: "default".into(),
            kind: ProviderKind::Openai,
            base_url: None,
            model: String::new(),
            api_key_env: None,
            sampler: SamplerSettings::default(),
            max_context_tokens: 8192,
            timeouts: Timeouts::default(),
            retry: RetryPolicy::default(),
            requests_per_minute: None,
            cache: false,
            supports_json_schema: true,
            allow_key_over_http: false,
            path: None,
            threads: None,
            max_parallel: None,
        }
    }
}

impl ProviderProfile {
    pub fn base_url(&self) -> Option<&str> {
        self.base_url.as_deref().or(self.kind.default_base_url())
    }

    /// The environment variable consulted for this profile's key, if it needs one.
    pub fn key_env(&self) -> Option<&str> {
        self.api_key_env.as_deref().or(self.kind.default_key_env())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wire_fields_send_only_what_is_set_and_named() {
        let names = SamplerWireNames {
            temperature: Some("temperature"),
            top_p: Some("topP"),
            top_k: None,
            max_tokens: Some("maxOutputTokens"),
            seed: None,
            presence_penalty: None,
            frequency_penalty: None,
            stop: Some("stop"),
        };
        let s = SamplerSettings { temperature: Some(0.5), top_k: Some(40), seed: Some(7), ..Default::default() };
        assert_eq!(s.wire_fields(&names), vec![("temperature", json!(0.5))]);
        let s = SamplerSettings { max_tokens: Some(64), stop: vec!["\nUser:".into()], ..Default::default() };
        assert_eq!(s.wire_fields(&names), vec![("maxOutputTokens", json!(64)), ("stop", json!(["\nUser:"]))]);
    }
}
