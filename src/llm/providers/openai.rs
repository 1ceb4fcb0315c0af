//! OpenAI-compatible chat completions: `POST {base}/chat/completions`, plain or as
//! server-sent events. The dialect every local server speaks (llama.cpp, Ollama,
//! LM Studio, vLLM) as well as OpenRouter and OpenAI.

use crate::llm::http::{HttpResponse, HttpTransport, JsonPost, server_message};
use crate::llm::reply::{ReplyBuilder, in_stream_error};
use crate::llm::profile::SamplerWireNames;
use crate::llm::{CallContext, ChatRequest, Completion, LlmError, Provider, ResponseFormat, Secret, Timeouts};
use serde_json::{Map, Value, json};

pub(crate) struct OpenAiProvider {
    http: HttpTransport,
    base_url: String,
    /// Where requests go: `/chat/completions` under the base, its query kept (Azure's `api-version`).
    url: String,
    supports_json_schema: bool,
}

impl OpenAiProvider {
    pub fn new(base_url: &str, timeouts: Timeouts, key: Option<Secret>, supports_json_schema: bool) -> Self {
        Self {
            http: HttpTransport::new(timeouts, key),
            base_url: base_url.trim_end_matches('/').to_string(),
            url: crate::llm::providers::http::BaseUrl::parse(base_url).join("/chat/completions", None),
            supports_json_schema,
        }
    }
}

impl Provider for OpenAiProvider {
    fn describe(&self) -> String {
        format!("openai-compatible ({})", crate::llm::http::endpoint_of(&self.base_url))
    }

    fn complete(&self, request: &ChatRequest, ctx: CallContext<'_>) -> Result<Completion, LlmError> {
        // Only a streamed request hands fragments to the sink.
        let ctx = if request.stream { ctx } else { CallContext::new(ctx.cancel) };
        let body = request_body(request, self.supports_json_schema);
        let mut headers = Vec::new();
        // Local servers need no key, and some reject an empty bearer: send one only
        // when there is one.
        if let Some(key) = self.http.secret() {
            headers.push(("authorization", format!("Bearer {}", key.expose())));
        }
        let mut response =
            self.http.post_json(JsonPost { url: &self.url, headers, body: &body, stream: request.stream }, ctx.cancel)?;
        let mut reply = ReplyBuilder::default();
        if request.stream && response.is_event_stream() {
            read_stream(&mut response, &mut reply, &ctx).map_err(|e| reply.annotate(e))?;
        } else {
            // Some servers answer a streaming request with one JSON body; the caller
            // still gets the text through its token sink.
            let value = response.json()?;
            parse_body(&value, &mut reply, &ctx)?;
        }
        Ok(reply.finish(request))
    }
}

/// The request as OpenAI's API expects it. Sampler fields are sent only when set, so
/// the server's defaults apply otherwise (`top_k` is not OpenAI's own but llama.cpp,
/// vLLM and Ollama accept it; set it only for such servers).
const SAMPLER_NAMES: SamplerWireNames = SamplerWireNames {
    temperature: Some("temperature"),
    top_p: Some("top_p"),
    top_k: Some("top_k"),
    max_tokens: Some("max_tokens"),
    seed: Some("seed"),
    presence_penalty: Some("presence_penalty"),
    frequency_penalty: Some("frequency_penalty"),
    stop: Some("stop"),
};

pub(crate) fn request_body(request: &ChatRequest, supports_json_schema: bool) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("messages".into(), json!(request.messages));
    for (name, value) in request.sampler.wire_fields(&SAMPLER_NAMES) {
        body.insert(name.into(), value);
    }
    let mut put = |name: &str, value: Option<Value>| {
        if let Some(value) = value {
            body.insert(name.to_string(), value);
        }
    };
    put(
        "response_format",
        match &request.response_format {
            ResponseFormat::Text => None,
            ResponseFormat::Json => Some(json!({"type": "json_object"})),
            ResponseFormat::JsonSchema { name, schema } if supports_json_schema => Some(json!({
                "type": "json_schema",
                "json_schema": {"name": schema_name(name), "schema": schema},
            })),
            ResponseFormat::JsonSchema { .. } => Some(json!({"type": "json_object"})),
            ResponseFormat::JsonObjectSchema { schema } => Some(json!({"type": "json_object", "schema": schema})),
        },
    );
    if request.stream {
        put("stream", Some(json!(true)));
        put("stream_options", Some(json!({"include_usage": true})));
    }
    Value::Object(body)
}

/// OpenAI requires schema names matching `^[a-zA-Z0-9_-]{1,64}$`.
fn schema_name(name: &str) -> String {
    let cleaned: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).take(64).collect();
    if cleaned.is_empty() { "response".to_string() } else { cleaned }
}

fn parse_body(value: &Value, reply: &mut ReplyBuilder, ctx: &CallContext<'_>) -> Result<(), LlmError> {
    if value.get("error").is_some() {
        let status = value.pointer("/error/code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok());
        return Err(in_stream_error(status, server_message(value).unwrap_or_default()));
    }
    let choice = value
        .pointer("/choices/0")
        .ok_or_else(|| LlmError::Malformed(format!("no choices in the reply: {}", crate::llm::http::quote(value.to_string().as_bytes()))))?;
    match choice.pointer("/message/content") {
        Some(Value::String(text)) => reply.push(ctx, text),
        Some(Value::Null) | None => {} // e.g. a refusal or a tool call: no text
        Some(other) => return Err(LlmError::Malformed(format!("message content is not text: {other}"))),
    }
    if let Some(refusal) = choice.pointer("/message/refusal").and_then(Value::as_str).filter(|r| !r.is_empty()) {
        return Err(LlmError::Blocked { reason: refusal.to_string() });
    }
    if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
        reply.set_finish(reason);
    }
    read_common(value, reply);
    Ok(())
}

fn read_common(value: &Value, reply: &mut ReplyBuilder) {
    if let Some(model) = value.get("model").and_then(Value::as_str) {
        reply.model = Some(model.to_string());
    }
    if let Some(usage) = value.get("usage").filter(|u| u.is_object()) {
        let count = |name: &str| usage.get(name).and_then(Value::as_u64).map(|n| n.min(u32::MAX as u64) as u32);
        reply.prompt_tokens = count("prompt_tokens").or(reply.prompt_tokens);
        reply.completion_tokens = count("completion_tokens").or(reply.completion_tokens);
    }
}

fn read_stream(response: &mut HttpResponse, reply: &mut ReplyBuilder, ctx: &CallContext<'_>) -> Result<(), LlmError> {
    let end = response.read_events(|event| {
        let data = event.data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| LlmError::Malformed(format!("a stream event is not valid JSON ({e}): {}", crate::llm::http::quote(data.as_bytes()))))?;
        if chunk.get("error").is_some() {
            let status = chunk.pointer("/error/code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok());
            return Err(in_stream_error(status, server_message(&chunk).unwrap_or_default()));
        }
        if let Some(choice) = chunk.pointer("/choices/0") {
            if let Some(text) = choice.pointer("/delta/content").and_then(Value::as_str) {
                reply.push(ctx, text);
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                reply.set_finish(reason);
            }
        }
        read_common(&chunk, reply);
        Ok(false)
    })?;
    // Every complete reply says why it stopped before `[DONE]`. A `[DONE]` without one
    // is a server ending the stream early (llama.cpp's Python server does, the moment
    // another request arrives): the reply is cut off, not empty or complete.
    if end == crate::llm::http::StreamEnd::Finished && reply.finish_reason.is_none() {
        return Err(reply.truncated());
    }
    reply.judge_end(end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{CancelToken, ChatMessage};

    #[test]
    fn the_body_carries_only_what_is_set() {
        let mut request = ChatRequest::new("llama", vec![ChatMessage::system("s"), ChatMessage::user("u")]);
        let body = request_body(&request, true);
        assert_eq!(
            body,
            json!({"model": "llama", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]})
        );
        request.stream = true;
        request.sampler.temperature = Some(0.5);
        request.sampler.max_tokens = Some(10);
        request.sampler.stop = vec!["\n\n".into()];
        request.response_format = ResponseFormat::JsonSchema { name: "Final profile!".into(), schema: json!({"type": "object"}) };
        let body = request_body(&request, true);
        assert_eq!(body["temperature"], json!(0.5));
        assert_eq!(body["max_tokens"], json!(10));
        assert_eq!(body["stop"], json!(["\n\n"]));
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
        assert_eq!(body["response_format"]["json_schema"]["name"], json!("Final_profile_"));
        assert_eq!(request_body(&request, false)["response_format"], json!({"type": "json_object"}));
    }

    #[test]
    fn a_plain_body_is_parsed_with_usage() {
        let value = json!({
            "model": "gpt-x", "choices": [{"message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
        });
        let cancel = CancelToken::new();
        let mut reply = ReplyBuilder::default();
        parse_body(&value, &mut reply, &CallContext::new(&cancel)).unwrap();
        let c = reply.finish(&ChatRequest::new("asked", vec![]));
        assert_eq!((c.text.as_str(), c.model.as_str(), c.finish_reason.as_deref()), ("Hi", "gpt-x", Some("stop")));
        assert!(c.usage.reported);
        assert_eq!(c.usage.total(), 9);
    }

    #[test]
    fn bodies_without_choices_or_with_errors_are_errors() {
        let cancel = CancelToken::new();
        let ctx = CallContext::new(&cancel);
        let err = parse_body(&json!({"object": "list"}), &mut ReplyBuilder::default(), &ctx).unwrap_err();
        assert!(matches!(err, LlmError::Malformed(_)), "{err}");
        let err = parse_body(&json!({"error": {"code": 503, "message": "loading model"}}), &mut ReplyBuilder::default(), &ctx)
            .unwrap_err();
        assert_eq!(err, LlmError::Http { status: 503, message: "loading model".into() });
        let refusal = json!({"choices": [{"message": {"content": null, "refusal": "I can't help with that."}}]});
        assert!(matches!(parse_body(&refusal, &mut ReplyBuilder::default(), &ctx), Err(LlmError::Blocked { .. })));
    }
}
