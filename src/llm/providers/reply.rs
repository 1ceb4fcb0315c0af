//! What every provider does with a reply as it arrives: collect the text, pass each
//! streamed fragment on, remember the stop reason, model and usage, and estimate the
//! usage when the provider reported none.

use crate::llm::{CallContext, ChatRequest, Completion, LlmError, Usage, tokens};
use crate::llm::http::StreamEnd;

#[derive(Debug, Default)]
pub(crate) struct ReplyBuilder {
    pub text: String,
    pub finish_reason: Option<String>,
    pub model: Option<String>,
    pub prompt_tokens: Option<u32>,
    pub completion_tokens: Option<u32>,
}

impl ReplyBuilder {
    /// Append a fragment and stream it to the caller.
    pub fn push(&mut self, ctx: &CallContext<'_>, fragment: &str) {
        if !fragment.is_empty() {
            self.text.push_str(fragment);
            ctx.emit(fragment);
        }
    }

    pub fn set_finish(&mut self, reason: &str) {
        self.finish_reason = Some(normalise_finish_reason(reason));
    }

    /// `Truncated` carrying the text received so far, for a stream that stopped early.
    pub fn truncated(&self) -> LlmError {
        LlmError::Truncated { partial: self.text.clone() }
    }

    /// Errors raised while reading a stream: a bare `Truncated` gets the partial text.
    pub fn annotate(&self, error: LlmError) -> LlmError {
        match error {
            LlmError::Truncated { partial } if partial.is_empty() => self.truncated(),
            other => other,
        }
    }

    /// Decide how a stream that ended at `end` came out: complete when the protocol's
    /// final event arrived, or when the connection closed cleanly after a stop reason
    /// (some servers omit the final event); cut off otherwise.
    pub fn judge_end(&self, end: StreamEnd) -> Result<(), LlmError> {
        match end {
            StreamEnd::Finished => Ok(()),
            StreamEnd::Eof { inside_event: false } if self.finish_reason.is_some() => Ok(()),
            StreamEnd::Eof { .. } => Err(self.truncated()),
        }
    }

    pub fn finish(self, request: &ChatRequest) -> Completion {
        let usage = match (self.prompt_tokens, self.completion_tokens) {
            (Some(prompt_tokens), Some(completion_tokens)) => {
                Usage { prompt_tokens, completion_tokens, reported: true }
            }
            (prompt, completion) => Usage {
                prompt_tokens: prompt.unwrap_or_else(|| tokens::estimate_messages(&request.messages)),
                completion_tokens: completion.unwrap_or_else(|| tokens::estimate(&self.text)),
                reported: false,
            },
        };
        Completion {
            text: self.text,
            usage,
            finish_reason: self.finish_reason,
            model: self.model.filter(|m| !m.is_empty()).unwrap_or_else(|| request.model.clone()),
            from_cache: false,
            elapsed_ms: 0,
        }
    }
}

/// Stop reasons in one vocabulary: OpenAI's `stop`/`length` for the common cases,
/// anything else lower-cased as the provider named it.
pub(crate) fn normalise_finish_reason(reason: &str) -> String {
    match reason.to_ascii_lowercase().as_str() {
        "end_turn" | "stop_sequence" | "stop" | "eos" => "stop".to_string(),
        "max_tokens" | "length" => "length".to_string(),
        other => other.to_string(),
    }
}

/// Map an error status found inside a 200 stream (OpenAI-style `{"error": {...}}`) to
/// an error: the same classification as a real status would get.
pub(crate) fn in_stream_error(status: Option<u16>, message: String) -> LlmError {
    match status {
        Some(429) => LlmError::RateLimited { retry_after: None },
        Some(status @ 400..=599) => LlmError::Http { status, message },
        _ => LlmError::Http { status: 500, message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{CancelToken, ChatMessage};

    #[test]
    fn usage_is_estimated_only_when_missing() {
        let request = ChatRequest::new("m", vec![ChatMessage::user("hello there")]);
        let reported = ReplyBuilder { text: "hi".into(), prompt_tokens: Some(9), completion_tokens: Some(1), ..Default::default() };
        assert_eq!(reported.finish(&request).usage, Usage { prompt_tokens: 9, completion_tokens: 1, reported: true });
        let partial = ReplyBuilder { text: "hi".into(), prompt_tokens: Some(9), ..Default::default() };
        let usage = partial.finish(&request).usage;
        assert!(!usage.reported);
        assert_eq!((usage.prompt_tokens, usage.completion_tokens), (9, 1));
        let none = ReplyBuilder::default().finish(&request);
        assert_eq!(none.usage.prompt_tokens, tokens::estimate_messages(&request.messages));
        assert_eq!(none.model, "m");
    }

    #[test]
    fn fragments_are_collected_and_streamed() {
        let seen = std::sync::Mutex::new(Vec::new());
        let sink = |t: &str| seen.lock().unwrap().push(t.to_string());
        let cancel = CancelToken::new();
        let ctx = CallContext::with_tokens(&cancel, &sink);
        let mut reply = ReplyBuilder::default();
        reply.push(&ctx, "Hel");
        reply.push(&ctx, "");
        reply.push(&ctx, "lo");
        assert_eq!(reply.text, "Hello");
        assert_eq!(*seen.lock().unwrap(), ["Hel", "lo"]);
        assert_eq!(reply.annotate(LlmError::Truncated { partial: String::new() }), LlmError::Truncated { partial: "Hello".into() });
    }

    #[test]
    fn stream_ends_are_judged() {
        let mut reply = ReplyBuilder::default();
        assert!(reply.judge_end(StreamEnd::Finished).is_ok());
        assert!(reply.judge_end(StreamEnd::Eof { inside_event: false }).is_err());
        reply.set_finish("end_turn");
        assert_eq!(reply.finish_reason.as_deref(), Some("stop"));
        assert!(reply.judge_end(StreamEnd::Eof { inside_event: false }).is_ok());
        assert!(reply.judge_end(StreamEnd::Eof { inside_event: true }).is_err());
    }

    #[test]
    fn finish_reasons_are_normalised() {
        assert_eq!(normalise_finish_reason("MAX_TOKENS"), "length");
        assert_eq!(normalise_finish_reason("STOP"), "stop");
        assert_eq!(normalise_finish_reason("SAFETY"), "safety");
    }
}
