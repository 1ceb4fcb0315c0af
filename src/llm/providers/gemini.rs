//! Google's Gemini API: `POST {base}/v1beta/models/{model}:generateContent`, or
//! `:streamGenerateContent?alt=sse` for server-sent events.
//!
//! The key travels in the `x-goog-api-key` header, never in the `?key=` query the API
//! also accepts, so it cannot leak into a logged or quoted URL.

use super::gemini_schema::to_gemini_schema;
use crate::llm::http::{HttpResponse, HttpTransport, JsonPost, server_message};
use crate::llm::reply::{ReplyBuilder, in_stream_error};
use crate::llm::profile::SamplerWireNames;
use crate::llm::{CallContext, ChatRequest, Completion, LlmError, Provider, ResponseFormat, Role, Secret, Timeouts};
use serde_json::{Map, Value, json};

pub(crate) struct GeminiProvider {
    http: HttpTransport,
    base_url: String,
    /// The base with its API version, joined to a model's path before its query.
    base: crate::llm::providers::http::BaseUrl,
    /// `/v1beta` when the base names no version, else nothing.
    version: &'static str,
    key: Secret,
    supports_json_schema: bool,
}

impl GeminiProvider {
    pub fn new(base_url: &str, timeouts: Timeouts, key: Secret, supports_json_schema: bool) -> Self {
        let base = crate::llm::providers::http::BaseUrl::parse(base_url);
        let version = if base.path_ends_with("/v1beta") || base.path_ends_with("/v1") { "" } else { "/v1beta" };
        let base_url = base_url.trim_end_matches('/').to_string();
        Self { http: HttpTransport::new(timeouts, Some(key.clone())), base_url, base, version, key, supports_json_schema }
    }

    fn url(&self, model: &str, stream: bool) -> Result<String, LlmError> {
        let model = model.strip_prefix("models/").unwrap_or(model);
        if model.is_empty() || model.contains(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace()) {
            return Err(LlmError::Config(format!("{model:?} is not a Gemini model name")));
        }
        let version = self.version;
        Ok(if stream {
            self.base.join(&format!("{version}/models/{model}:streamGenerateContent"), Some("alt=sse"))
        } else {
            self.base.join(&format!("{version}/models/{model}:generateContent"), None)
        })
    }
}

impl Provider for GeminiProvider {
    fn describe(&self) -> String {
        format!("gemini ({})", crate::llm::http::endpoint_of(&self.base_url))
    }

    fn complete(&self, request: &ChatRequest, ctx: CallContext<'_>) -> Result<Completion, LlmError> {
        // Only a streamed request hands fragments to the sink.
        let ctx = if request.stream { ctx } else { CallContext::new(ctx.cancel) };
        let url = self.url(&request.model, request.stream)?;
        let body = request_body(request, self.supports_json_schema);
        let headers = vec![("x-goog-api-key", self.key.expose().to_string())];
        let mut response =
            self.http.post_json(JsonPost { url: &url, headers, body: &body, stream: request.stream }, ctx.cancel)?;
        let mut reply = ReplyBuilder::default();
        if request.stream && response.is_event_stream() {
            read_stream(&mut response, &mut reply, &ctx).map_err(|e| reply.annotate(e))?;
        } else {
            read_chunk(&response.json()?, &mut reply, &ctx)?;
        }
        refuse_if_blocked(&reply)?;
        Ok(reply.finish(request))
    }
}

const SAMPLER_NAMES: SamplerWireNames = SamplerWireNames {
    temperature: Some("temperature"),
    top_p: Some("topP"),
    top_k: Some("topK"),
    max_tokens: Some("maxOutputTokens"),
    seed: Some("seed"),
    presence_penalty: Some("presencePenalty"),
    frequency_penalty: Some("frequencyPenalty"),
    stop: Some("stopSequences"),
};

pub(crate) fn request_body(request: &ChatRequest, supports_json_schema: bool) -> Value {
    let system: Vec<&str> =
        request.messages.iter().filter(|m| m.role == Role::System).map(|m| m.content.as_str()).collect();
    let mut contents: Vec<(Role, String)> = Vec::new();
    for m in request.messages.iter().filter(|m| m.role != Role::System) {
        match contents.last_mut() {
            Some((role, text)) if *role == m.role => {
                text.push_str("\n\n");
                text.push_str(&m.content);
            }
            _ => contents.push((m.role, m.content.clone())),
        }
    }
    let contents: Vec<Value> = contents
        .into_iter()
        .map(|(role, text)| json!({"role": if role == Role::Assistant { "model" } else { "user" }, "parts": [{"text": text}]}))
        .collect();

    let mut config: Map<String, Value> =
        request.sampler.wire_fields(&SAMPLER_NAMES).into_iter().map(|(name, value)| (name.to_string(), value)).collect();
    let mut put = |name: &str, value: Option<Value>| {
        if let Some(value) = value {
            config.insert(name.to_string(), value);
        }
    };
    match &request.response_format {
        ResponseFormat::Text => {}
        ResponseFormat::Json | ResponseFormat::JsonObjectSchema { .. } => put("responseMimeType", Some(json!("application/json"))),
        ResponseFormat::JsonSchema { schema, .. } => {
            put("responseMimeType", Some(json!("application/json")));
            if supports_json_schema {
                put("responseSchema", Some(to_gemini_schema(schema)));
            }
        }
    }

    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(contents));
    if !system.is_empty() {
        body.insert("systemInstruction".into(), json!({"parts": [{"text": system.join("\n\n")}]}));
    }
    if !config.is_empty() {
        body.insert("generationConfig".into(), Value::Object(config));
    }
    Value::Object(body)
}

/// One `GenerateContentResponse`: the whole reply, or one piece of a stream.
fn read_chunk(value: &Value, reply: &mut ReplyBuilder, ctx: &CallContext<'_>) -> Result<(), LlmError> {
    if value.get("error").is_some() {
        let status = value.pointer("/error/code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok());
        return Err(in_stream_error(status, server_message(value).unwrap_or_default()));
    }
    if let Some(reason) = value.pointer("/promptFeedback/blockReason").and_then(Value::as_str) {
        return Err(LlmError::Blocked { reason: format!("the prompt was blocked ({reason})") });
    }
    let candidates = value.get("candidates").and_then(Value::as_array);
    if candidates.is_none() && value.get("usageMetadata").is_none() {
        return Err(LlmError::Malformed(format!(
            "no candidates in the reply: {}",
            crate::llm::http::quote(value.to_string().as_bytes())
        )));
    }
    if let Some(candidate) = candidates.and_then(|c| c.first()) {
        let parts = candidate.pointer("/content/parts").and_then(Value::as_array);
        for part in parts.into_iter().flatten() {
            // Thought summaries are the model's scratchpad, not its reply.
            if part.get("thought").and_then(Value::as_bool) == Some(true) {
                continue;
            }
            if let Some(text) = part.get("text").and_then(Value::as_str) {
                reply.push(ctx, text);
            }
        }
        if let Some(reason) = candidate.get("finishReason").and_then(Value::as_str) {
            reply.set_finish(reason);
        }
    }
    if let Some(model) = value.get("modelVersion").and_then(Value::as_str) {
        reply.model = Some(model.to_string());
    }
    if let Some(usage) = value.get("usageMetadata") {
        let count = |name: &str| usage.get(name).and_then(Value::as_u64).map(|n| n.min(u32::MAX as u64) as u32);
        if let Some(prompt) = count("promptTokenCount") {
            reply.prompt_tokens = Some(prompt);
        }
        // Thinking tokens are generated and billed as output, so they count here.
        let output = count("candidatesTokenCount");
        let thoughts = count("thoughtsTokenCount");
        if output.is_some() || thoughts.is_some() {
            reply.completion_tokens = Some(output.unwrap_or(0).saturating_add(thoughts.unwrap_or(0)));
        }
    }
    Ok(())
}

/// Gemini's stream has no end marker: it is complete when a chunk carried a finish
/// reason and the connection then closed cleanly.
fn read_stream(response: &mut HttpResponse, reply: &mut ReplyBuilder, ctx: &CallContext<'_>) -> Result<(), LlmError> {
    let end = response.read_events(|event| {
        let chunk: Value = serde_json::from_str(&event.data).map_err(|e| {
            LlmError::Malformed(format!("a stream event is not valid JSON ({e}): {}", crate::llm::http::quote(event.data.as_bytes())))
        })?;
        read_chunk(&chunk, reply, ctx)?;
        Ok(false)
    })?;
    reply.judge_end(end)
}

/// A reply cut short by a safety stop with nothing said is a refusal, not an answer.
fn refuse_if_blocked(reply: &ReplyBuilder) -> Result<(), LlmError> {
    match reply.finish_reason.as_deref() {
        Some(reason @ ("safety" | "recitation" | "blocklist" | "prohibited_content" | "spii"))
            if reply.text.trim().is_empty() =>
        {
            Err(LlmError::Blocked { reason: format!("the reply was withheld (finish reason: {reason})") })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{CancelToken, ChatMessage};

    #[test]
    fn roles_system_and_config_are_mapped() {
        let mut request = ChatRequest::new(
            "gemini-2.0-flash",
            vec![ChatMessage::system("Be kind."), ChatMessage::user("hi"), ChatMessage::assistant("hello")],
        );
        request.sampler.max_tokens = Some(64);
        request.sampler.top_k = Some(40);
        request.response_format = ResponseFormat::JsonSchema { name: "x".into(), schema: json!({"type": "object"}) };
        let body = request_body(&request, true);
        assert_eq!(body["systemInstruction"], json!({"parts": [{"text": "Be kind."}]}));
        assert_eq!(
            body["contents"],
            json!([{"role": "user", "parts": [{"text": "hi"}]}, {"role": "model", "parts": [{"text": "hello"}]}])
        );
        assert_eq!(
            body["generationConfig"],
            json!({"topK": 40, "maxOutputTokens": 64, "responseMimeType": "application/json", "responseSchema": {"type": "OBJECT"}})
        );
        assert!(request_body(&request, false)["generationConfig"].get("responseSchema").is_none());
    }

    #[test]
    fn urls_are_built_and_bad_model_names_refused() {
        let p = GeminiProvider::new("http://127.0.0.1:9/", Default::default(), Secret::new("k"), true);
        assert_eq!(p.url("models/gemini-pro", false).unwrap(), "http://127.0.0.1:9/v1beta/models/gemini-pro:generateContent");
        assert_eq!(
            p.url("gemini-pro", true).unwrap(),
            "http://127.0.0.1:9/v1beta/models/gemini-pro:streamGenerateContent?alt=sse"
        );
        assert!(matches!(p.url("a/b?key=1", false), Err(LlmError::Config(_))));
    }

    #[test]
    fn a_response_is_read_without_thoughts() {
        let value = json!({
            "candidates": [{"content": {"role": "model", "parts": [{"text": "plan", "thought": true}, {"text": "Hi"}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 1, "thoughtsTokenCount": 2, "totalTokenCount": 7},
            "modelVersion": "gemini-x"
        });
        let cancel = CancelToken::new();
        let mut reply = ReplyBuilder::default();
        read_chunk(&value, &mut reply, &CallContext::new(&cancel)).unwrap();
        let c = reply.finish(&ChatRequest::new("m", vec![]));
        assert_eq!((c.text.as_str(), c.finish_reason.as_deref(), c.model.as_str()), ("Hi", Some("stop"), "gemini-x"));
        assert_eq!((c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.reported), (4, 3, true));
    }

    #[test]
    fn blocked_prompts_and_withheld_replies_are_refusals() {
        let cancel = CancelToken::new();
        let ctx = CallContext::new(&cancel);
        let blocked = json!({"promptFeedback": {"blockReason": "SAFETY"}});
        assert!(matches!(read_chunk(&blocked, &mut ReplyBuilder::default(), &ctx), Err(LlmError::Blocked { .. })));
        let mut reply = ReplyBuilder::default();
        read_chunk(&json!({"candidates": [{"finishReason": "SAFETY"}]}), &mut reply, &ctx).unwrap();
        assert!(matches!(refuse_if_blocked(&reply), Err(LlmError::Blocked { .. })));
        assert!(matches!(read_chunk(&json!({"x": 1}), &mut ReplyBuilder::default(), &ctx), Err(LlmError::Malformed(_))));
    }
}
