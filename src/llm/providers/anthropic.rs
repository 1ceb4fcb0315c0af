//! Anthropic's Messages API: `POST {base}/v1/messages` with `x-api-key` and a pinned
//! `anthropic-version`, plain or streamed as typed server-sent events.

use crate::llm::http::{HttpResponse, HttpTransport, JsonPost, server_message};
use crate::llm::reply::ReplyBuilder;
use crate::llm::profile::SamplerWireNames;
use crate::llm::{CallContext, ChatRequest, Completion, LlmError, Provider, ResponseFormat, Role, Secret, Timeouts};
use serde_json::{Map, Value, json};

const API_VERSION: &str = "2023-06-01";
/// The Messages API takes no seed or penalties; `max_tokens` is required, so it is set
/// separately with a default.
const SAMPLER_NAMES: SamplerWireNames = SamplerWireNames {
    temperature: Some("temperature"),
    top_p: Some("top_p"),
    top_k: Some("top_k"),
    max_tokens: None,
    seed: None,
    presence_penalty: None,
    frequency_penalty: None,
    stop: Some("stop_sequences"),
};

/// The API requires `max_tokens`; this applies when the profile sets none.
const DEFAULT_MAX_TOKENS: u32 = 4096;

pub(crate) struct AnthropicProvider {
    http: HttpTransport,
    url: String,
    key: Secret,
}

impl AnthropicProvider {
    pub fn new(base_url: &str, timeouts: Timeouts, key: Secret) -> Self {
        let base = crate::llm::providers::http::BaseUrl::parse(base_url);
        let url = if base.path_ends_with("/v1") { base.join("/messages", None) } else { base.join("/v1/messages", None) };
        Self { http: HttpTransport::new(timeouts, Some(key.clone())), url, key }
    }
}

impl Provider for AnthropicProvider {
    fn describe(&self) -> String {
        format!("anthropic ({})", crate::llm::http::endpoint_of(&self.url))
    }

    fn complete(&self, request: &ChatRequest, ctx: CallContext<'_>) -> Result<Completion, LlmError> {
        // Only a streamed request hands fragments to the sink.
        let ctx = if request.stream { ctx } else { CallContext::new(ctx.cancel) };
        let body = request_body(request);
        let headers = vec![("x-api-key", self.key.expose().to_string()), ("anthropic-version", API_VERSION.to_string())];
        let mut response =
            self.http.post_json(JsonPost { url: &self.url, headers, body: &body, stream: request.stream }, ctx.cancel)?;
        let mut reply = ReplyBuilder::default();
        if request.stream && response.is_event_stream() {
            read_stream(&mut response, &mut reply, &ctx).map_err(|e| reply.annotate(e))?;
        } else {
            parse_message(&response.json()?, &mut reply, &ctx)?;
        }
        Ok(reply.finish(request))
    }
}

pub(crate) fn request_body(request: &ChatRequest) -> Value {
    let mut system: Vec<String> =
        request.messages.iter().filter(|m| m.role == Role::System).map(|m| m.content.clone()).collect();
    // The API has no JSON mode: say it in the system prompt (the structured-output
    // layer validates the reply either way).
    match &request.response_format {
        ResponseFormat::Text => {}
        ResponseFormat::Json => system.push("Reply with a single JSON object and nothing else.".into()),
        // A schema the prompt already carries (the structured layer puts it there, and
        // plans the budget with it) is not sent a second time.
        ResponseFormat::JsonSchema { schema, .. } | ResponseFormat::JsonObjectSchema { schema } => {
            let text = schema.to_string();
            if request.messages.iter().any(|m| m.content.contains(&text)) {
                system.push("Reply with a single JSON object and nothing else.".into());
            } else {
                system.push(format!("Reply with a single JSON object and nothing else. It must validate against this JSON Schema:\n{text}"));
            }
        }
    }
    // Consecutive turns of one role are merged: the API wants them alternating.
    let mut messages: Vec<(Role, String)> = Vec::new();
    for m in request.messages.iter().filter(|m| m.role != Role::System) {
        match messages.last_mut() {
            Some((role, text)) if *role == m.role => {
                text.push_str("\n\n");
                text.push_str(&m.content);
            }
            _ => messages.push((m.role, m.content.clone())),
        }
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({"role": if role == Role::Assistant { "assistant" } else { "user" }, "content": content}))
        .collect();

    let s = &request.sampler;
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("max_tokens".into(), json!(s.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)));
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    body.insert("messages".into(), Value::Array(messages));
    for (name, value) in s.wire_fields(&SAMPLER_NAMES) {
        body.insert(name.into(), value);
    }
    if request.stream {
        body.insert("stream".into(), json!(true));
    }
    Value::Object(body)
}

fn count(value: Option<&Value>) -> Option<u32> {
    value.and_then(Value::as_u64).map(|n| n.min(u32::MAX as u64) as u32)
}

/// Input tokens as billed: fresh input plus what was written to or read from the
/// prompt cache.
fn input_tokens(usage: &Value) -> Option<u32> {
    let fresh = count(usage.get("input_tokens"))?;
    let cached = count(usage.get("cache_creation_input_tokens"))
        .unwrap_or(0)
        .saturating_add(count(usage.get("cache_read_input_tokens")).unwrap_or(0));
    Some(fresh.saturating_add(cached))
}

fn parse_message(value: &Value, reply: &mut ReplyBuilder, ctx: &CallContext<'_>) -> Result<(), LlmError> {
    if value.get("type").and_then(Value::as_str) == Some("error") {
        return Err(stream_error(value));
    }
    let content = value
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| LlmError::Malformed(format!("no content in the reply: {}", crate::llm::http::quote(value.to_string().as_bytes()))))?;
    for block in content.iter().filter(|b| b.get("type").and_then(Value::as_str) == Some("text")) {
        if let Some(text) = block.get("text").and_then(Value::as_str) {
            reply.push(ctx, text);
        }
    }
    if let Some(reason) = value.get("stop_reason").and_then(Value::as_str) {
        reply.set_finish(reason);
    }
    if reply.finish_reason.as_deref() == Some("refusal") && reply.text.is_empty() {
        return Err(LlmError::Blocked { reason: "the model declined (stop reason: refusal)".into() });
    }
    reply.model = value.get("model").and_then(Value::as_str).map(str::to_string);
    if let Some(usage) = value.get("usage") {
        reply.prompt_tokens = input_tokens(usage);
        reply.completion_tokens = count(usage.get("output_tokens"));
    }
    Ok(())
}

fn read_stream(response: &mut HttpResponse, reply: &mut ReplyBuilder, ctx: &CallContext<'_>) -> Result<(), LlmError> {
    let end = response.read_events(|event| {
        let data: Value = serde_json::from_str(&event.data).map_err(|e| {
            LlmError::Malformed(format!("a stream event is not valid JSON ({e}): {}", crate::llm::http::quote(event.data.as_bytes())))
        })?;
        let kind = data.get("type").and_then(Value::as_str).or(event.event.as_deref()).unwrap_or_default();
        match kind {
            "message_start" => {
                let message = data.get("message").unwrap_or(&Value::Null);
                reply.model = message.get("model").and_then(Value::as_str).map(str::to_string);
                if let Some(usage) = message.get("usage") {
                    reply.prompt_tokens = input_tokens(usage);
                    reply.completion_tokens = count(usage.get("output_tokens"));
                }
            }
            "content_block_delta" => {
                if data.pointer("/delta/type").and_then(Value::as_str) == Some("text_delta")
                    && let Some(text) = data.pointer("/delta/text").and_then(Value::as_str)
                {
                    reply.push(ctx, text);
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    reply.set_finish(reason);
                }
                // Output tokens here are cumulative; newer servers repeat input too.
                if let Some(usage) = data.get("usage") {
                    reply.completion_tokens = count(usage.get("output_tokens")).or(reply.completion_tokens);
                    reply.prompt_tokens = input_tokens(usage).or(reply.prompt_tokens);
                }
            }
            "message_stop" => return Ok(true),
            "error" => return Err(stream_error(&data)),
            _ => {} // ping, content_block_start/stop, and event types added later
        }
        Ok(false)
    })?;
    reply.judge_end(end)
}

/// An `error` event (or error body) in Anthropic's shape, classified like the HTTP
/// status the same error gets outside a stream.
fn stream_error(data: &Value) -> LlmError {
    let message = server_message(data).unwrap_or_else(|| "unknown error".to_string());
    let status = match data.pointer("/error/type").and_then(Value::as_str).unwrap_or_default() {
        "rate_limit_error" => return LlmError::RateLimited { retry_after: None },
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "overloaded_error" => 529,
        _ => 500,
    };
    LlmError::Http { status, message }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{CancelToken, ChatMessage};

    /// The schema goes into the system prompt once: not again when the prompt has it.
    #[test]
    fn a_schema_the_prompt_carries_is_not_sent_twice() {
        let schema = serde_json::json!({ "type": "object", "properties": { "mood": { "type": "string" } } });
        let format = ResponseFormat::JsonSchema { name: "state".into(), schema: schema.clone() };
        let mut bare = ChatRequest::new("m", vec![ChatMessage::system("You are a clerk."), ChatMessage::user("Hi")]);
        bare.response_format = format.clone();
        let system = request_body(&bare)["system"].to_string();
        assert_eq!(system.matches("\\\"mood\\\"").count(), 1, "{system}");
        let mut carried = ChatRequest::new("m", vec![ChatMessage::system(format!("You are a clerk.\n<json_schema>\n{schema}\n</json_schema>")), ChatMessage::user("Hi")]);
        carried.response_format = format;
        let system = request_body(&carried)["system"].to_string();
        assert_eq!(system.matches("\\\"mood\\\"").count(), 1, "{system}");
        assert!(system.contains("Reply with a single JSON object and nothing else."), "{system}");
    }

    /// A server may report any count: the sums saturate instead of overflowing.
    #[test]
    fn absurd_reported_counts_saturate() {
        let usage = serde_json::json!({"input_tokens": 4_000_000_000u64, "cache_creation_input_tokens": 4_000_000_000u64,
                                       "cache_read_input_tokens": u64::MAX});
        assert_eq!(input_tokens(&usage), Some(u32::MAX));
        let usage = crate::llm::Usage { prompt_tokens: u32::MAX, completion_tokens: 7, reported: true };
        assert_eq!(usage.total(), u32::MAX);
    }

    #[test]
    fn system_goes_top_level_and_turns_are_merged() {
        let mut request = ChatRequest::new(
            "claude",
            vec![
                ChatMessage::system("You are terse."),
                ChatMessage::user("a"),
                ChatMessage::user("b"),
                ChatMessage::assistant("c"),
                ChatMessage::user("d"),
            ],
        );
        request.response_format = ResponseFormat::Json;
        let body = request_body(&request);
        assert_eq!(body["system"], json!("You are terse.\n\nReply with a single JSON object and nothing else."));
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": "a\n\nb"},
                {"role": "assistant", "content": "c"},
                {"role": "user", "content": "d"}
            ])
        );
        assert_eq!(body["max_tokens"], json!(DEFAULT_MAX_TOKENS));
        assert!(body.get("stream").is_none());
    }

    #[test]
    fn a_message_is_parsed_with_cached_input_counted() {
        let value = json!({
            "type": "message", "model": "claude-x", "stop_reason": "end_turn",
            "content": [{"type": "text", "text": "Hel"}, {"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "lo"}],
            "usage": {"input_tokens": 10, "cache_read_input_tokens": 5, "output_tokens": 3}
        });
        let cancel = CancelToken::new();
        let mut reply = ReplyBuilder::default();
        parse_message(&value, &mut reply, &CallContext::new(&cancel)).unwrap();
        let c = reply.finish(&ChatRequest::new("asked", vec![]));
        assert_eq!(c.text, "Hello");
        assert_eq!(c.finish_reason.as_deref(), Some("stop"));
        assert_eq!((c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.reported), (15, 3, true));
    }

    #[test]
    fn error_types_map_to_statuses() {
        let e = |t: &str| stream_error(&json!({"type": "error", "error": {"type": t, "message": "m"}}));
        assert_eq!(e("overloaded_error"), LlmError::Http { status: 529, message: "overloaded_error: m".into() });
        assert!(e("overloaded_error").is_transient());
        assert_eq!(e("rate_limit_error"), LlmError::RateLimited { retry_after: None });
        assert!(!e("invalid_request_error").is_transient());
    }
}
