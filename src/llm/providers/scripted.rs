//! The scripted provider: replies read from a JSON script, for deterministic tests and
//! for demos that run with no model and no network.
//!
//! # Script format
//!
//! ```json
//! {
//!   "rules": [
//!     {
//!       "name": "connection test",
//!       "when": { "system_contains": "connection test" },
//!       "reply": "Hello, game master!"
//!     },
//!     {
//!       "name": "flaky then fine",
//!       "when": { "user_contains": "storm" },
//!       "replies": [
//!         { "fail": { "kind": "http", "status": 503, "message": "warming up" } },
//!         { "text": "The storm breaks.", "chunk_chars": 4, "chunk_delay_ms": 20 }
//!       ],
//!       "then": "repeat_last"
//!     },
//!     { "when": { "json": true }, "reply": { "json": { "ok": true } } }
//!   ],
//!   "default": "I have nothing scripted for that."
//! }
//! ```
//!
//! **Rules** are tried in order; the first that matches answers. A rule's `when` holds
//! when every condition given is true (no `when` matches everything):
//! - `user_contains`: substring of the last user message,
//! - `system_contains`: substring of the system prompt (all system messages),
//! - `any_contains`: substring of any message,
//! - `json`: whether the request asks for JSON (`json` or `json_schema` format).
//!
//! Substrings match case-insensitively. A rule answers with `reply` (one reply) or
//! `replies` (consumed in sequence, one per matching call). After the last reply,
//! `then` decides: `repeat_last` (the default), `cycle` (start over) or `exhausted`
//! (the rule stops matching and later rules get their turn). `default` answers when no
//! rule matches; without it such a request is a configuration error naming the script.
//!
//! **A reply** is a string, or an object with:
//! - `text`, or `json` (any JSON value, sent as compact JSON text); `{{last_user}}` in
//!   `text` is replaced by the last user message;
//! - `delay_ms`: wait before the first token (default 0);
//! - `wait_behind` and `wait_ms` (default 0): first wait `wait_ms` as a call queued behind
//!   another on the embedded model does, told (`CallContext::waiting`) that the model is
//!   busy with `wait_behind`, then that the wait is over; `delay_ms` follows;
//! - `chunk_chars` (default 12) and `chunk_delay_ms` (default 0): how a streamed reply
//!   is cut into fragments and paced;
//! - `finish_reason` (default `stop`);
//! - `fail`: answer with a failure instead, one of
//!   `{"kind": "http", "status": 500, "message": "..."}`,
//!   `{"kind": "rate_limited", "retry_after_ms": 200}`,
//!   `{"kind": "timeout"}` (waits the profile's read timeout, then fails),
//!   `{"kind": "truncated", "after_chars": 10}` (streams that much of `text`, then cuts),
//!   `{"kind": "malformed", "message": "..."}`,
//!   `{"kind": "connect"}` (as if the server were down).
//!
//! Usage is always an estimate (`reported: false`): no tokenizer runs here.

use crate::llm::retry::sleep_cancellable;
use crate::llm::{CallContext, ChatRequest, Completion, LlmError, Provider, ResponseFormat, Role, Timeouts, Usage, tokens};
use serde::Deserialize;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    #[serde(default)]
    pub rules: Vec<Rule>,
    #[serde(default)]
    pub default: Option<Reply>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub when: Condition,
    #[serde(default)]
    pub reply: Option<Reply>,
    #[serde(default)]
    pub replies: Vec<Reply>,
    #[serde(default)]
    pub then: AfterLast,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    pub user_contains: Option<String>,
    pub system_contains: Option<String>,
    pub any_contains: Option<String>,
    pub json: Option<bool>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AfterLast {
    #[default]
    RepeatLast,
    Cycle,
    Exhausted,
}

#[derive(Debug, Clone)]
pub enum Reply {
    Text(String),
    Detailed(Box<DetailedReply>),
}

/// By hand rather than `untagged`, so a mistyped field is named in the error instead
/// of "did not match any variant".
impl<'de> Deserialize<'de> for Reply {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::String(text) => Ok(Reply::Text(text)),
            other => DetailedReply::deserialize(other)
                .map(|reply| Reply::Detailed(Box::new(reply)))
                .map_err(|e| serde::de::Error::custom(format!("in a reply: {e}"))),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetailedReply {
    pub text: Option<String>,
    pub json: Option<serde_json::Value>,
    #[serde(default)]
    pub delay_ms: u64,
    /// What the embedded model would be busy with while this call waits for it.
    pub wait_behind: Option<String>,
    #[serde(default)]
    pub wait_ms: u64,
    pub chunk_chars: Option<usize>,
    #[serde(default)]
    pub chunk_delay_ms: u64,
    pub finish_reason: Option<String>,
    pub fail: Option<Failure>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Failure {
    Http {
        status: u16,
        #[serde(default)]
        message: Option<String>,
    },
    RateLimited {
        #[serde(default)]
        retry_after_ms: Option<u64>,
    },
    Timeout,
    Truncated {
        #[serde(default)]
        after_chars: Option<usize>,
    },
    Malformed {
        #[serde(default)]
        message: Option<String>,
    },
    Connect,
}

const DEFAULT_CHUNK_CHARS: usize = 12;

impl Script {
    pub fn parse(text: &str) -> Result<Self, LlmError> {
        let script: Script =
            serde_json::from_str(text).map_err(|e| LlmError::Config(format!("the script is not valid: {e}")))?;
        for (index, rule) in script.rules.iter().enumerate() {
            if rule.reply.is_none() && rule.replies.is_empty() {
                let name = rule.name.clone().unwrap_or_else(|| format!("#{}", index + 1));
                return Err(LlmError::Config(format!("script rule {name} has no reply")));
            }
        }
        Ok(script)
    }
}

/// Replies from a [`Script`]. Each provider instance (so each client built from a
/// profile) walks the sequences from their start: a test or a flow that builds a fresh
/// client gets the same replies every time.
pub struct ScriptedProvider {
    script: Script,
    source: String,
    read_timeout: Duration,
    positions: Mutex<Vec<usize>>,
}

impl ScriptedProvider {
    pub fn from_file(path: &Path, timeouts: Timeouts) -> Result<Self, LlmError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| LlmError::Config(format!("cannot read the script {}: {e}", path.display())))?;
        let script = Script::parse(&text).map_err(|e| match e {
            LlmError::Config(message) => LlmError::Config(format!("{message} ({})", path.display())),
            other => other,
        })?;
        Ok(Self::new(script, path.display().to_string(), timeouts))
    }

    pub fn from_json(text: &str, timeouts: Timeouts) -> Result<Self, LlmError> {
        Ok(Self::new(Script::parse(text)?, "inline script".into(), timeouts))
    }

    pub fn new(script: Script, source: String, timeouts: Timeouts) -> Self {
        let positions = Mutex::new(vec![0; script.rules.len()]);
        Self { script, source, read_timeout: crate::llm::http::seconds(timeouts.read_secs), positions }
    }

    /// Pick the reply for `request`, advancing the matching rule's sequence.
    fn choose(&self, request: &ChatRequest) -> Option<Reply> {
        let view = RequestView::of(request);
        let mut positions = self.positions.lock().unwrap_or_else(|p| p.into_inner());
        for (index, rule) in self.script.rules.iter().enumerate() {
            if !rule.when.matches(&view) {
                continue;
            }
            let replies: Vec<&Reply> = rule.reply.iter().chain(rule.replies.iter()).collect();
            let position = positions[index];
            let chosen = match rule.then {
                _ if position < replies.len() => replies[position],
                AfterLast::Exhausted => continue,
                AfterLast::Cycle => replies[position % replies.len()],
                AfterLast::RepeatLast => replies[replies.len() - 1],
            };
            positions[index] = position.saturating_add(1);
            return Some(chosen.clone());
        }
        self.script.default.clone()
    }
}

struct RequestView {
    last_user: String,
    system: String,
    all: String,
    wants_json: bool,
}

impl RequestView {
    fn of(request: &ChatRequest) -> Self {
        let last_user = request.messages.iter().rev().find(|m| m.role == Role::User).map(|m| m.content.clone());
        let system: Vec<&str> =
            request.messages.iter().filter(|m| m.role == Role::System).map(|m| m.content.as_str()).collect();
        let all: Vec<&str> = request.messages.iter().map(|m| m.content.as_str()).collect();
        Self {
            last_user: last_user.unwrap_or_default(),
            system: system.join("\n").to_lowercase(),
            all: all.join("\n").to_lowercase(),
            wants_json: !matches!(request.response_format, ResponseFormat::Text),
        }
    }
}

impl Condition {
    fn matches(&self, view: &RequestView) -> bool {
        let contains = |haystack: &str, needle: &Option<String>| {
            needle.as_ref().is_none_or(|n| haystack.contains(&n.to_lowercase()))
        };
        contains(&view.last_user.to_lowercase(), &self.user_contains)
            && contains(&view.system, &self.system_contains)
            && contains(&view.all, &self.any_contains)
            && self.json.is_none_or(|j| j == view.wants_json)
    }
}

impl Provider for ScriptedProvider {
    fn describe(&self) -> String {
        format!("scripted ({})", self.source)
    }

    fn complete(&self, request: &ChatRequest, ctx: CallContext<'_>) -> Result<Completion, LlmError> {
        let reply = self.choose(request).ok_or_else(|| {
            LlmError::Config(format!("the script {} has no rule for this request and no default reply", self.source))
        })?;
        let reply = match reply {
            Reply::Text(text) => DetailedReply { text: Some(text), ..Default::default() },
            Reply::Detailed(detailed) => *detailed,
        };
        let last_user = RequestView::of(request).last_user;
        let text = match (&reply.text, &reply.json) {
            (Some(text), _) => text.replace("{{last_user}}", &last_user),
            (None, Some(json)) => json.to_string(),
            (None, None) => String::new(),
        };
        if let Some(holder) = &reply.wait_behind {
            ctx.waiting(holder);
            sleep_cancellable(Duration::from_millis(reply.wait_ms), ctx.cancel)?;
            ctx.waited();
        }
        sleep_cancellable(Duration::from_millis(reply.delay_ms), ctx.cancel)?;

        let mut limit = None;
        match &reply.fail {
            None => {}
            Some(Failure::Truncated { after_chars }) => {
                limit = Some(after_chars.unwrap_or(text.chars().count() / 2));
            }
            Some(failure) => return Err(self.fail(failure, ctx.cancel)?),
        }

        let chunk_chars = reply.chunk_chars.unwrap_or(DEFAULT_CHUNK_CHARS).max(1);
        let mut sent = String::new();
        let chars: Vec<char> = text.chars().take(limit.unwrap_or(usize::MAX)).collect();
        if request.stream || limit.is_some() {
            for (i, piece) in chars.chunks(chunk_chars).enumerate() {
                if i > 0 {
                    sleep_cancellable(Duration::from_millis(reply.chunk_delay_ms), ctx.cancel)?;
                } else if ctx.cancel.is_cancelled() {
                    return Err(LlmError::Cancelled);
                }
                let fragment: String = piece.iter().collect();
                if request.stream {
                    ctx.emit(&fragment);
                }
                sent.push_str(&fragment);
            }
        } else {
            sent = chars.into_iter().collect();
        }
        if limit.is_some() {
            return Err(LlmError::Truncated { partial: sent });
        }
        Ok(Completion {
            usage: Usage {
                prompt_tokens: tokens::estimate_messages(&request.messages),
                completion_tokens: tokens::estimate(&sent),
                reported: false,
            },
            text: sent,
            finish_reason: Some(reply.finish_reason.unwrap_or_else(|| "stop".into())),
            model: if request.model.is_empty() { "scripted".into() } else { request.model.clone() },
            from_cache: false,
            elapsed_ms: 0,
        })
    }
}

impl ScriptedProvider {
    /// The error a scripted failure stands for; waits first where a real one would.
    fn fail(&self, failure: &Failure, cancel: &crate::llm::CancelToken) -> Result<LlmError, LlmError> {
        Ok(match failure {
            Failure::Http { status, message } => LlmError::Http {
                status: *status,
                message: message.clone().unwrap_or_else(|| "scripted failure".into()),
            },
            Failure::RateLimited { retry_after_ms } => {
                LlmError::RateLimited { retry_after: retry_after_ms.map(Duration::from_millis) }
            }
            Failure::Timeout => {
                // Like a silent server: only cancellation ends the wait early.
                sleep_cancellable(self.read_timeout, cancel)?;
                LlmError::Timeout(self.read_timeout)
            }
            Failure::Malformed { message } => {
                LlmError::Malformed(message.clone().unwrap_or_else(|| "scripted malformed reply".into()))
            }
            Failure::Connect => LlmError::Connect { endpoint: self.source.clone(), message: "scripted connection failure".into() },
            Failure::Truncated { .. } => LlmError::Truncated { partial: String::new() },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{CancelToken, ChatMessage};
    use std::time::Instant;

    fn timeouts() -> Timeouts {
        Timeouts { connect_secs: 1.0, read_secs: 0.2, total_secs: 5.0 }
    }

    fn provider(script: &str) -> ScriptedProvider {
        ScriptedProvider::from_json(script, timeouts()).unwrap()
    }

    fn ask(p: &ScriptedProvider, system: &str, user: &str) -> Result<Completion, LlmError> {
        let request = ChatRequest::new("demo", vec![ChatMessage::system(system), ChatMessage::user(user)]);
        p.complete(&request, CallContext::new(&CancelToken::new()))
    }

    fn text(p: &ScriptedProvider, system: &str, user: &str) -> String {
        ask(p, system, user).unwrap().text
    }

    #[test]
    fn rules_match_on_user_system_and_any_text() {
        let p = provider(
            r#"{"rules": [
                {"when": {"system_contains": "CONNECTION test"}, "reply": "pong"},
                {"when": {"user_contains": "dragon"}, "reply": "Roar."},
                {"when": {"any_contains": "tavern"}, "reply": "Ale for everyone."}
            ], "default": "..."}"#,
        );
        assert_eq!(text(&p, "You are a connection test.", "hi"), "pong");
        assert_eq!(text(&p, "narrator", "A DRAGON lands"), "Roar.");
        assert_eq!(text(&p, "Scene: the tavern", "hello"), "Ale for everyone.");
        assert_eq!(text(&p, "narrator", "nothing special"), "...");
    }

    #[test]
    fn only_the_last_user_message_counts_for_user_contains() {
        let p = provider(r#"{"rules": [{"when": {"user_contains": "dragon"}, "reply": "Roar."}], "default": "no"}"#);
        let request = ChatRequest::new(
            "m",
            vec![ChatMessage::user("a dragon!"), ChatMessage::assistant("where?"), ChatMessage::user("gone now")],
        );
        assert_eq!(p.complete(&request, CallContext::new(&CancelToken::new())).unwrap().text, "no");
    }

    #[test]
    fn sequences_repeat_cycle_or_run_out() {
        let p = provider(
            r#"{"rules": [
                {"when": {"user_contains": "repeat"}, "replies": ["1", "2"]},
                {"when": {"user_contains": "cycle"}, "replies": ["a", "b"], "then": "cycle"},
                {"when": {"user_contains": "once"}, "replies": ["only"], "then": "exhausted"},
                {"reply": "fallback rule"}
            ]}"#,
        );
        let got: Vec<String> = (0..3).map(|_| text(&p, "", "repeat")).collect();
        assert_eq!(got, ["1", "2", "2"]);
        let got: Vec<String> = (0..5).map(|_| text(&p, "", "cycle")).collect();
        assert_eq!(got, ["a", "b", "a", "b", "a"]);
        assert_eq!(text(&p, "", "once"), "only");
        assert_eq!(text(&p, "", "once"), "fallback rule");
    }

    #[test]
    fn json_requests_can_be_told_apart() {
        let p = provider(r#"{"rules": [{"when": {"json": true}, "reply": {"json": {"ok": true, "n": [1, 2]}}}], "default": "prose"}"#);
        let mut request = ChatRequest::new("m", vec![ChatMessage::user("x")]);
        assert_eq!(p.complete(&request, CallContext::new(&CancelToken::new())).unwrap().text, "prose");
        request.response_format = ResponseFormat::Json;
        assert_eq!(p.complete(&request, CallContext::new(&CancelToken::new())).unwrap().text, r#"{"ok":true,"n":[1,2]}"#);
    }

    #[test]
    fn streaming_emits_chunks_and_usage_is_an_estimate() {
        let p = provider(r#"{"default": {"text": "You said: {{last_user}}", "chunk_chars": 4}}"#);
        let seen = std::sync::Mutex::new(Vec::new());
        let sink = |t: &str| seen.lock().unwrap().push(t.to_string());
        let cancel = CancelToken::new();
        let mut request = ChatRequest::new("m", vec![ChatMessage::user("hello")]);
        request.stream = true;
        let c = p.complete(&request, CallContext::with_tokens(&cancel, &sink)).unwrap();
        assert_eq!(c.text, "You said: hello");
        assert_eq!(*seen.lock().unwrap(), ["You ", "said", ": he", "llo"]);
        assert!(!c.usage.reported);
        assert_eq!(c.usage.completion_tokens, tokens::estimate("You said: hello"));
        assert_eq!(c.finish_reason.as_deref(), Some("stop"));
    }

    #[test]
    fn injected_failures_become_the_matching_errors() {
        let p = provider(
            r#"{"rules": [
                {"when": {"user_contains": "500"}, "reply": {"fail": {"kind": "http", "status": 500, "message": "boom"}}},
                {"when": {"user_contains": "429"}, "reply": {"fail": {"kind": "rate_limited", "retry_after_ms": 1500}}},
                {"when": {"user_contains": "bad"}, "reply": {"fail": {"kind": "malformed"}}},
                {"when": {"user_contains": "down"}, "reply": {"fail": {"kind": "connect"}}},
                {"when": {"user_contains": "cut"}, "reply": {"text": "0123456789", "fail": {"kind": "truncated", "after_chars": 4}}},
                {"when": {"user_contains": "slow"}, "reply": {"fail": {"kind": "timeout"}}}
            ]}"#,
        );
        assert_eq!(ask(&p, "", "500"), Err(LlmError::Http { status: 500, message: "boom".into() }));
        assert_eq!(ask(&p, "", "429"), Err(LlmError::RateLimited { retry_after: Some(Duration::from_millis(1500)) }));
        assert!(matches!(ask(&p, "", "bad"), Err(LlmError::Malformed(_))));
        assert!(matches!(ask(&p, "", "down"), Err(LlmError::Connect { .. })));
        assert_eq!(ask(&p, "", "cut"), Err(LlmError::Truncated { partial: "0123".into() }));
        let started = Instant::now();
        assert_eq!(ask(&p, "", "slow"), Err(LlmError::Timeout(Duration::from_millis(200))));
        assert!(started.elapsed() >= Duration::from_millis(200));
    }

    #[test]
    fn delays_are_cancellable() {
        let p = provider(r#"{"default": {"text": "late", "delay_ms": 10000}}"#);
        let cancel = CancelToken::new();
        let canceller = {
            let cancel = cancel.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                cancel.cancel();
            })
        };
        let started = Instant::now();
        let result = p.complete(&ChatRequest::new("m", vec![ChatMessage::user("x")]), CallContext::new(&cancel));
        canceller.join().unwrap();
        assert_eq!(result, Err(LlmError::Cancelled));
        assert!(started.elapsed() < Duration::from_millis(500));
    }

    #[test]
    fn bad_scripts_are_refused_with_a_reason() {
        let err = |s: &str| ScriptedProvider::from_json(s, timeouts()).err().unwrap().to_string();
        assert!(err("{").contains("not valid"));
        assert!(err(r#"{"rules": [{"name": "empty"}]}"#).contains("empty"));
        assert!(err(r#"{"rules": [], "colour": 1}"#).contains("colour"));
        assert!(err(r#"{"rules": [{"reply": {"txt": "typo"}}]}"#).contains("txt"));
        assert!(err(r#"{"default": {"fail": {"kind": "explode"}}}"#).contains("explode"));
        let p = provider(r#"{"rules": []}"#);
        assert!(matches!(ask(&p, "", "x"), Err(LlmError::Config(_))));
        let missing = ScriptedProvider::from_file(Path::new("/nonexistent/script.json"), timeouts()).err().unwrap();
        assert!(missing.to_string().contains("/nonexistent/script.json"));
    }

    #[test]
    fn every_provider_starts_the_sequences_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("script.json");
        std::fs::write(&path, r#"{"rules": [{"replies": ["one", "two"]}]}"#).unwrap();
        let first = ScriptedProvider::from_file(&path, timeouts()).unwrap();
        assert_eq!(text(&first, "", "x"), "one");
        assert_eq!(text(&first, "", "x"), "two");
        let second = ScriptedProvider::from_file(&path, timeouts()).unwrap();
        assert_eq!(text(&second, "", "x"), "one");
    }

    #[test]
    fn the_shipped_demo_script_parses_and_answers_the_connection_test() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/demo-script.json");
        let p = ScriptedProvider::from_file(&path, timeouts()).unwrap();
        let reply = text(&p, "You are a connection test. Answer with one short sentence.", "Say hello to the game master.");
        assert!(reply.to_lowercase().contains("hello"), "{reply}");
    }
}
