//! The three HTTP APIs as a server speaks them: endpoints, how the key arrives, and
//! replies, streams and errors in each API's real shape.

#![allow(dead_code)] // each test binary uses a different part of it

use super::mock_http::Recorded;
use lorekeeper::llm::ProviderKind;
use serde_json::{Value, json};

/// The model every canned reply names.
pub const MODEL: &str = "test-model-001";

/// How one API looks on the wire, from the server's side.
pub trait Dialect {
    const NAME: &'static str;
    const KIND: ProviderKind;
    fn base_url(server: &str) -> String;
    /// Whether `target` is one of this API's endpoints for [`MODEL`].
    fn is_endpoint(target: &str) -> bool;
    /// The key the client presented.
    fn presented_key(request: &Recorded) -> Option<String>;
    /// A complete non-streamed reply: `text`, 11 prompt and 7 completion tokens.
    fn reply(text: &str) -> Value;
    /// A streamed reply of `fragments`, as whole events; the index says which
    /// fragment an event carries.
    fn stream(fragments: &[&str]) -> Vec<(String, Option<usize>)>;
    fn error(message: &str) -> Value;
}

pub struct OpenAi;
pub struct Anthropic;
pub struct Gemini;

impl Dialect for OpenAi {
    const NAME: &'static str = "openai";
    const KIND: ProviderKind = ProviderKind::Openai;
    fn base_url(server: &str) -> String {
        format!("{server}/v1")
    }
    fn is_endpoint(target: &str) -> bool {
        target == "/v1/chat/completions"
    }
    fn presented_key(request: &Recorded) -> Option<String> {
        request.header("authorization")?.strip_prefix("Bearer ").map(str::to_string)
    }
    fn reply(text: &str) -> Value {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        })
    }
    fn stream(fragments: &[&str]) -> Vec<(String, Option<usize>)> {
        let chunk = |delta: Value, finish: Value| {
            format!(
                "data: {}\n\n",
                json!({"id": "c1", "object": "chat.completion.chunk", "model": MODEL,
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            )
        };
        let mut events = vec![(": keep-alive\n\n".to_string(), None), (chunk(json!({"role": "assistant", "content": ""}), Value::Null), None)];
        for (i, f) in fragments.iter().enumerate() {
            events.push((chunk(json!({"content": f}), Value::Null), Some(i)));
        }
        events.push((chunk(json!({}), json!("stop")), None));
        let usage = json!({"id": "c1", "object": "chat.completion.chunk", "model": MODEL, "choices": [],
                           "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}});
        events.push((format!("data: {usage}\n\n"), None));
        events.push(("data: [DONE]\n\n".to_string(), None));
        events
    }
    fn error(message: &str) -> Value {
        json!({"error": {"message": message, "type": "server_error", "code": null}})
    }
}

impl Dialect for Anthropic {
    const NAME: &'static str = "anthropic";
    const KIND: ProviderKind = ProviderKind::Anthropic;
    fn base_url(server: &str) -> String {
        server.to_string()
    }
    fn is_endpoint(target: &str) -> bool {
        target == "/v1/messages"
    }
    fn presented_key(request: &Recorded) -> Option<String> {
        // The version header is part of the protocol: without it the key is refused.
        (request.header("anthropic-version") == Some("2023-06-01")).then_some(())?;
        request.header("x-api-key").map(str::to_string)
    }
    fn reply(text: &str) -> Value {
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": MODEL,
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 11, "output_tokens": 7}
        })
    }
    fn stream(fragments: &[&str]) -> Vec<(String, Option<usize>)> {
        let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
        let mut events = vec![
            (
                event("message_start", json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                    "model": MODEL, "content": [], "stop_reason": null, "usage": {"input_tokens": 11, "output_tokens": 1}}})),
                None,
            ),
            (event("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})), None),
            (event("ping", json!({"type": "ping"})), None),
        ];
        for (i, f) in fragments.iter().enumerate() {
            events.push((
                event("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": f}})),
                Some(i),
            ));
        }
        events.push((event("content_block_stop", json!({"type": "content_block_stop", "index": 0})), None));
        events.push((
            event("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 7}})),
            None,
        ));
        events.push((event("message_stop", json!({"type": "message_stop"})), None));
        events
    }
    fn error(message: &str) -> Value {
        json!({"type": "error", "error": {"type": "api_error", "message": message}})
    }
}

impl Dialect for Gemini {
    const NAME: &'static str = "gemini";
    const KIND: ProviderKind = ProviderKind::Gemini;
    fn base_url(server: &str) -> String {
        server.to_string()
    }
    fn is_endpoint(target: &str) -> bool {
        target == format!("/v1beta/models/{MODEL}:generateContent")
            || target == format!("/v1beta/models/{MODEL}:streamGenerateContent?alt=sse")
    }
    fn presented_key(request: &Recorded) -> Option<String> {
        request.header("x-goog-api-key").map(str::to_string)
    }
    fn reply(text: &str) -> Value {
        json!({
            "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 7, "totalTokenCount": 18},
            "modelVersion": MODEL
        })
    }
    fn stream(fragments: &[&str]) -> Vec<(String, Option<usize>)> {
        // Gemini separates its events with CRLF pairs.
        let mut events: Vec<(String, Option<usize>)> = fragments
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let chunk = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": f}]}, "index": 0}],
                                   "usageMetadata": {"promptTokenCount": 11, "totalTokenCount": 11}, "modelVersion": MODEL});
                (format!("data: {chunk}\r\n\r\n"), Some(i))
            })
            .collect();
        let last = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP", "index": 0}],
                          "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 7, "totalTokenCount": 18}, "modelVersion": MODEL});
        events.push((format!("data: {last}\r\n\r\n"), None));
        events
    }
    fn error(message: &str) -> Value {
        json!({"error": {"code": 500, "message": message, "status": "INTERNAL"}})
    }
}
