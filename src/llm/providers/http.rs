//! The HTTP layer every remote provider shares: one `ureq` agent with the profile's
//! timeouts, requests run on a worker thread, and errors turned into [`LlmError`]s
//! that say what happened without ever quoting the key.
//!
//! Why a worker thread: a blocking read on a silent socket cannot be interrupted, but a
//! cancelled call must return at once. The worker does the blocking I/O and hands the
//! bytes over a bounded channel; the caller waits on that channel in short slices and
//! checks the [`CancelToken`] between them. A cancelled or finished caller drops the
//! channel, and the worker ends at its next read (bounded by the read timeout).

use crate::llm::retry::{parse_proto_duration, parse_retry_after};
use crate::llm::sse::{SseEvent, SseParser};
use crate::llm::{CancelToken, LlmError, Secret, Timeouts};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded};
use std::io::Read;
use std::time::{Duration, Instant, SystemTime};

/// How often a waiting caller looks at its cancel token.
const POLL: Duration = Duration::from_millis(40);
/// Largest non-streamed body accepted: far beyond any chat reply, small enough that a
/// misbehaving server cannot exhaust memory.
const MAX_BODY: usize = 32 << 20;
/// How much of an error body is read to find the server's message.
const MAX_ERROR_BODY: usize = 64 << 10;
/// Longest server message quoted in an error.
const MAX_QUOTED: usize = 600;

pub(crate) struct HttpTransport {
    agent: ureq::Agent,
    timeouts: Timeouts,
    secret: Option<Secret>,
}

/// A POST with a JSON body.
pub(crate) struct JsonPost<'a> {
    pub url: &'a str,
    /// Extra headers, credentials included (they never leave this module in a message).
    pub headers: Vec<(&'static str, String)>,
    pub body: &'a serde_json::Value,
    pub stream: bool,
}

enum Message {
    Head { status: u16, headers: Vec<(String, String)> },
    Data(Vec<u8>),
    End,
    Failed(LlmError),
}

impl HttpTransport {
    pub fn new(timeouts: Timeouts, secret: Option<Secret>) -> Self {
        let config = ureq::Agent::config_builder()
            // Error statuses are answers too: their bodies carry the server's reason.
            .http_status_as_error(false)
            // A redirected POST would be replayed as a GET and lose its body: report it.
            .max_redirects(0)
            .timeout_connect(Some(seconds(timeouts.connect_secs)))
            .timeout_per_read(Some(seconds(timeouts.read_secs)))
            .timeout_global(Some(seconds(timeouts.total_secs)))
            .user_agent(concat!("lorekeeper/", env!("CARGO_PKG_VERSION")))
            .build();
        Self { agent: config.new_agent(), timeouts, secret }
    }

    pub fn secret(&self) -> Option<&Secret> {
        self.secret.as_ref()
    }

    /// Send `post` and wait for the response head. Statuses outside 2xx become errors
    /// carrying the server's message (scrubbed of the key).
    pub fn post_json(&self, post: JsonPost<'_>, cancel: &CancelToken) -> Result<HttpResponse, LlmError> {
        let endpoint = endpoint_of(post.url);
        let body = serde_json::to_vec(post.body).map_err(|e| LlmError::Config(format!("cannot encode the request: {e}")))?;
        let mut request = self.agent.post(post.url).header("content-type", "application/json");
        request = request.header("accept", if post.stream { "text/event-stream" } else { "application/json" });
        for (name, value) in &post.headers {
            request = request.header(*name, value.as_str());
        }
        let (tx, rx) = bounded(64);
        let timeouts = self.timeouts;
        let worker_endpoint = endpoint.clone();
        tracing::debug!(endpoint = %endpoint, stream = post.stream, "sending request");
        std::thread::Builder::new()
            .name("lorekeeper-http".into())
            .spawn(move || run_exchange(request, body, tx, &worker_endpoint, &timeouts))
            .map_err(|e| LlmError::Connect { endpoint: endpoint.clone(), message: format!("cannot start a worker thread: {e}") })?;

        let mut response = HttpResponse {
            status: 0,
            headers: Vec::new(),
            rx,
            cancel: cancel.clone(),
            // The worker enforces every timeout itself; this guard only makes sure a
            // caller can never wait forever on a worker that misbehaves.
            hard_deadline: Instant::now() + seconds(self.timeouts.total_secs) + Duration::from_secs(2),
            total: seconds(self.timeouts.total_secs),
            finished: false,
        };
        match response.wait()? {
            Message::Head { status, headers } => {
                response.status = status;
                response.headers = headers;
            }
            Message::Failed(e) => return Err(e.scrub(self.secret.as_ref())),
            Message::Data(_) | Message::End => {
                return Err(LlmError::Malformed("the response had no status line".into()));
            }
        }
        if !(200..300).contains(&response.status) {
            let body = response.read_prefix(MAX_ERROR_BODY);
            return Err(error_from_status(response.status, &response.headers, &body).scrub(self.secret.as_ref()));
        }
        Ok(response)
    }
}

/// The response to a [`JsonPost`], its body still arriving.
pub(crate) struct HttpResponse {
    pub status: u16,
    headers: Vec<(String, String)>,
    rx: Receiver<Message>,
    cancel: CancelToken,
    hard_deadline: Instant,
    total: Duration,
    finished: bool,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn is_event_stream(&self) -> bool {
        self.header("content-type").is_some_and(|ct| ct.to_ascii_lowercase().starts_with("text/event-stream"))
    }

    fn wait(&self) -> Result<Message, LlmError> {
        loop {
            if self.cancel.is_cancelled() {
                return Err(LlmError::Cancelled);
            }
            match self.rx.recv_timeout(POLL) {
                Ok(message) => return Ok(message),
                Err(RecvTimeoutError::Timeout) if Instant::now() >= self.hard_deadline => {
                    return Err(LlmError::Timeout(self.total));
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(LlmError::Truncated { partial: String::new() });
                }
            }
        }
    }

    /// The next piece of the body, `None` at its end. A connection lost before the
    /// end is `Truncated` (with no partial text: the caller knows what it decoded).
    pub fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, LlmError> {
        if self.finished {
            return Ok(None);
        }
        match self.wait()? {
            Message::Data(bytes) => Ok(Some(bytes)),
            Message::End => {
                self.finished = true;
                Ok(None)
            }
            Message::Failed(e) => {
                self.finished = true;
                Err(e)
            }
            Message::Head { .. } => Err(LlmError::Malformed("a second response head arrived".into())),
        }
    }

    /// The rest of the body, at most `limit` bytes.
    pub fn read_to_end(&mut self, limit: usize) -> Result<Vec<u8>, LlmError> {
        let mut body = Vec::new();
        while let Some(chunk) = self.next_chunk()? {
            if body.len() + chunk.len() > limit {
                return Err(LlmError::Malformed(format!("the response is larger than {} MiB", limit >> 20)));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// Up to `limit` bytes of the body, for quoting; a body that breaks off early
    /// gives what arrived.
    fn read_prefix(&mut self, limit: usize) -> Vec<u8> {
        let mut body = Vec::new();
        while body.len() < limit {
            match self.next_chunk() {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) | Err(_) => break,
            }
        }
        body.truncate(limit);
        body
    }

    /// A whole non-streamed JSON body.
    pub fn json(&mut self) -> Result<serde_json::Value, LlmError> {
        let body = self.read_to_end(MAX_BODY)?;
        serde_json::from_slice(&body)
            .map_err(|e| LlmError::Malformed(format!("the body is not valid JSON ({e}): {}", quote(&body))))
    }

    /// Read the body as server-sent events. `on_event` returns `true` when the
    /// protocol's final event has arrived (reading stops there).
    pub fn read_events(
        &mut self,
        mut on_event: impl FnMut(SseEvent) -> Result<bool, LlmError>,
    ) -> Result<StreamEnd, LlmError> {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        let mut read = 0usize;
        while let Some(chunk) = self.next_chunk()? {
            read = read.saturating_add(chunk.len());
            parser.feed(&chunk, &mut events);
            for event in events.drain(..) {
                if on_event(event)? {
                    return Ok(StreamEnd::Finished);
                }
            }
            // Events already delivered stand; what is past a cap is refused, not kept.
            if let Some(why) = parser.overflow() {
                return Err(LlmError::Malformed(format!("the event stream was refused: {why}")));
            }
            if read > MAX_BODY {
                return Err(LlmError::Malformed(format!("the event stream ran past {} MiB", MAX_BODY >> 20)));
            }
        }
        Ok(StreamEnd::Eof { inside_event: parser.has_partial_event() })
    }
}

/// How an event stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamEnd {
    /// The protocol's final event arrived.
    Finished,
    /// The connection closed; `inside_event` when it closed in the middle of an event.
    Eof { inside_event: bool },
}

fn run_exchange(
    request: ureq::RequestBuilder<ureq::typestate::WithBody>,
    body: Vec<u8>,
    tx: Sender<Message>,
    endpoint: &str,
    timeouts: &Timeouts,
) {
    let response = match request.send(&body[..]) {
        Ok(response) => response,
        Err(e) => {
            let _ = tx.send(Message::Failed(request_error(e, endpoint, timeouts)));
            return;
        }
    };
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .filter_map(|(name, value)| Some((name.as_str().to_string(), value.to_str().ok()?.to_string())))
        .collect();
    if tx.send(Message::Head { status, headers }).is_err() {
        return;
    }
    let mut reader = response.into_body().into_reader();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let message = match reader.read(&mut buf) {
            Ok(0) => Message::End,
            Ok(n) => Message::Data(buf[..n].to_vec()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => Message::Failed(body_error(e, timeouts)),
        };
        let last = !matches!(message, Message::Data(_));
        // A send error means the caller is gone (cancelled or done): stop reading.
        if tx.send(message).is_err() || last {
            return;
        }
    }
}

fn request_error(error: ureq::Error, endpoint: &str, timeouts: &Timeouts) -> LlmError {
    let connect = |message: &str| LlmError::Connect { endpoint: endpoint.to_string(), message: message.to_string() };
    match error {
        // Nothing reached the server: as safe to retry as a refused connection.
        ureq::Error::Timeout(which @ (ureq::Timeout::Connect | ureq::Timeout::Resolve)) => {
            connect(&format!("no connection within {:?}", timeout_length(which, timeouts)))
        }
        ureq::Error::Timeout(which) => LlmError::Timeout(timeout_length(which, timeouts)),
        ureq::Error::HostNotFound => connect("host not found"),
        ureq::Error::ConnectionFailed => connect("connection failed"),
        ureq::Error::BadUri(_) => LlmError::Config(format!("invalid address {endpoint}")),
        // Never quote the header itself: the bad value may be the key.
        ureq::Error::Http(_) => LlmError::Config("a request header is invalid (does the API key contain stray characters?)".into()),
        ureq::Error::Io(e) => match e.kind() {
            std::io::ErrorKind::ConnectionRefused => connect("connection refused (is the server running?)"),
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => LlmError::Timeout(seconds(timeouts.read_secs)),
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
                connect("the server closed the connection without answering")
            }
            _ => connect(&e.to_string()),
        },
        other => connect(&other.to_string()),
    }
}

fn body_error(error: std::io::Error, timeouts: &Timeouts) -> LlmError {
    match ureq::Error::from(error) {
        ureq::Error::Timeout(which) => LlmError::Timeout(timeout_length(which, timeouts)),
        ureq::Error::Io(e) if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock) => {
            LlmError::Timeout(seconds(timeouts.read_secs))
        }
        other => {
            // Connection reset, early EOF inside a chunked or sized body, a broken
            // chunk header: in every case the reply stopped before its end.
            tracing::debug!(error = %other, "response body ended early");
            LlmError::Truncated { partial: String::new() }
        }
    }
}

fn timeout_length(which: ureq::Timeout, timeouts: &Timeouts) -> Duration {
    match which {
        ureq::Timeout::Connect | ureq::Timeout::Resolve => seconds(timeouts.connect_secs),
        ureq::Timeout::Global | ureq::Timeout::PerCall => seconds(timeouts.total_secs),
        _ => seconds(timeouts.read_secs),
    }
}

/// Turn an error status and its body into the error the caller sees.
pub(crate) fn error_from_status(status: u16, headers: &[(String, String)], body: &[u8]) -> LlmError {
    let json: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    if status == 429 {
        let header = |name: &str| headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str());
        let retry_after = header("retry-after-ms")
            .and_then(|ms| ms.trim().parse::<f64>().ok())
            .and_then(|ms| Duration::try_from_secs_f64(ms / 1000.0).ok())
            .or_else(|| header("retry-after").and_then(|v| parse_retry_after(v, SystemTime::now())))
            .or_else(|| json.as_ref().and_then(gemini_retry_delay));
        return LlmError::RateLimited { retry_after };
    }
    let message = match &json {
        Some(value) => server_message(value).unwrap_or_else(|| quote(body)),
        None => quote(body),
    };
    let message = if (300..400).contains(&status) {
        let location = headers.iter().find(|(n, _)| n.eq_ignore_ascii_case("location")).map(|(_, v)| v.as_str());
        format!("redirected to {}; use that address as the base URL", location.unwrap_or("another address"))
    } else if message.is_empty() {
        "no message".to_string()
    } else {
        message
    };
    let message = if status == 404 { format!("{message} (check the base URL and the model name)") } else { message };
    // A 503 that says when to come back is waited for like a 429.
    if status == 503 {
        let header = |name: &str| headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str());
        if let Some(retry_after) = header("retry-after").and_then(|v| parse_retry_after(v, SystemTime::now())) {
            return LlmError::Unavailable { message, retry_after };
        }
    }
    LlmError::Http { status, message }
}

/// The human part of an error body in the shapes the supported APIs use:
/// `{"error": {"message", "type"|"status"}}` (OpenAI, Anthropic, Gemini),
/// `{"error": "text"}` (llama.cpp, Ollama), `{"detail": ...}` (vLLM, FastAPI servers).
pub(crate) fn server_message(value: &serde_json::Value) -> Option<String> {
    let error = value.get("error").unwrap_or(value);
    if let Some(text) = error.as_str() {
        return Some(clip(text));
    }
    let message = error.get("message").or_else(|| error.get("detail")).or_else(|| value.get("detail"))?;
    let message = message.as_str().map(str::to_string).unwrap_or_else(|| message.to_string());
    let kind = error.get("type").or_else(|| error.get("status")).and_then(|k| k.as_str());
    Some(clip(&match kind {
        Some(kind) if !kind.is_empty() => format!("{kind}: {message}"),
        _ => message,
    }))
}

/// Gemini puts its back-off hint in the body: `error.details[].retryDelay`.
fn gemini_retry_delay(value: &serde_json::Value) -> Option<Duration> {
    value
        .pointer("/error/details")?
        .as_array()?
        .iter()
        .find_map(|d| d.get("retryDelay")?.as_str().and_then(parse_proto_duration))
}

/// A body quoted in an error: lossy UTF-8, clipped.
pub(crate) fn quote(body: &[u8]) -> String {
    clip(String::from_utf8_lossy(body).trim())
}

fn clip(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// `scheme://host:port` of a URL, for messages: never the path or query, which is
/// where keys end up when a user pastes a URL that embeds one.
pub(crate) fn endpoint_of(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    // Drop user-info (`user:pass@host`) as well.
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    format!("{scheme}://{host}")
}

/// A profile's base URL, read so that a path is joined to its path and not to its query.
/// Azure OpenAI puts the API version in the query (`https://host/openai/deployments/x?api-version=2024-02-01`):
/// appended to the string, `/chat/completions` landed inside the query's value and the
/// server answered for the deployment URL, not the endpoint. A base that does not parse
/// as an http(s) URL is joined as text, as before, and the request says what is wrong.
#[derive(Debug, Clone)]
pub(crate) struct BaseUrl(Result<url::Url, String>);

impl BaseUrl {
    pub(crate) fn parse(base: &str) -> Self {
        match url::Url::parse(base.trim()) {
            Ok(mut url) if matches!(url.scheme(), "http" | "https") && !url.cannot_be_a_base() => {
                // A fragment is never sent, and a path's trailing slash would double.
                url.set_fragment(None);
                let path = url.path().trim_end_matches('/').to_string();
                url.set_path(&path);
                Self(Ok(url))
            }
            _ => Self(Err(base.trim().trim_end_matches('/').to_string())),
        }
    }

    /// Whether the base's path ends with `suffix` (an API version such as `/v1`), its
    /// query aside.
    pub(crate) fn path_ends_with(&self, suffix: &str) -> bool {
        match &self.0 {
            Ok(url) => url.path().trim_end_matches('/').ends_with(suffix),
            Err(text) => text.ends_with(suffix),
        }
    }

    /// The URL of `path` (from its `/`) under the base: the base's query kept after
    /// the joined path, and `query` (`alt=sse`) added to it.
    pub(crate) fn join(&self, path: &str, query: Option<&str>) -> String {
        match &self.0 {
            Ok(base) => {
                let mut url = base.clone();
                let joined = format!("{}/{}", url.path().trim_end_matches('/'), path.trim_start_matches('/'));
                url.set_path(&joined);
                if let Some(extra) = query {
                    let all = match url.query() {
                        Some(kept) if !kept.is_empty() => format!("{kept}&{extra}"),
                        _ => extra.to_string(),
                    };
                    url.set_query(Some(&all));
                }
                url.into()
            }
            Err(text) => match query {
                Some(extra) => format!("{text}/{}?{extra}", path.trim_start_matches('/')),
                None => format!("{text}/{}", path.trim_start_matches('/')),
            },
        }
    }
}

/// A duration from a configured number of seconds; nonsense (negative, NaN) becomes a
/// small positive value rather than a panic.
pub(crate) fn seconds(secs: f64) -> Duration {
    Duration::try_from_secs_f64(secs.clamp(0.001, 7.0 * 24.0 * 3600.0)).unwrap_or(Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_joins_the_base_path_and_the_base_query_follows_it() {
        let azure = BaseUrl::parse("https://res.openai.azure.com/openai/deployments/gpt4o?api-version=2024-02-01");
        assert_eq!(azure.join("/chat/completions", None), "https://res.openai.azure.com/openai/deployments/gpt4o/chat/completions?api-version=2024-02-01");
        assert!(azure.path_ends_with("/gpt4o"));
        let slash = BaseUrl::parse("http://127.0.0.1:8080/v1/?a=1&b=2");
        assert!(slash.path_ends_with("/v1"));
        assert_eq!(slash.join("/models/m:streamGenerateContent", Some("alt=sse")), "http://127.0.0.1:8080/v1/models/m:streamGenerateContent?a=1&b=2&alt=sse");
        assert_eq!(BaseUrl::parse("http://localhost:11434/v1/").join("/chat/completions", None), "http://localhost:11434/v1/chat/completions");
        assert_eq!(BaseUrl::parse("https://api.openai.com").join("/v1/messages", None), "https://api.openai.com/v1/messages");
        assert_eq!(BaseUrl::parse("http://h/x#frag").join("/y", Some("alt=sse")), "http://h/x/y?alt=sse");
        // Not an http(s) URL: joined as text, as before, for the request to say what is wrong.
        assert_eq!(BaseUrl::parse("localhost:11434/v1/").join("/chat/completions", None), "localhost:11434/v1/chat/completions");
    }

    #[test]
    fn endpoints_keep_only_scheme_and_authority() {
        assert_eq!(endpoint_of("https://api.example.com/v1/chat?key=abc"), "https://api.example.com");
        assert_eq!(endpoint_of("http://user:pw@127.0.0.1:8080/v1"), "http://127.0.0.1:8080");
        assert_eq!(endpoint_of("localhost:11434/v1"), "http://localhost:11434");
    }

    #[test]
    fn server_messages_in_each_api_shape() {
        let openai = serde_json::json!({"error": {"message": "Incorrect API key", "type": "invalid_request_error"}});
        assert_eq!(server_message(&openai).unwrap(), "invalid_request_error: Incorrect API key");
        let anthropic = serde_json::json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
        assert_eq!(server_message(&anthropic).unwrap(), "overloaded_error: Overloaded");
        let gemini = serde_json::json!({"error": {"code": 400, "message": "API key not valid", "status": "INVALID_ARGUMENT"}});
        assert_eq!(server_message(&gemini).unwrap(), "INVALID_ARGUMENT: API key not valid");
        assert_eq!(server_message(&serde_json::json!({"error": "model not found"})).unwrap(), "model not found");
        assert_eq!(server_message(&serde_json::json!({"detail": "Not Found"})).unwrap(), "Not Found");
        assert_eq!(server_message(&serde_json::json!({"ok": true})), None);
    }

    #[test]
    fn rate_limits_read_every_hint() {
        let h = |n: &str, v: &str| vec![(n.to_string(), v.to_string())];
        assert_eq!(
            error_from_status(429, &h("Retry-After", "2"), b""),
            LlmError::RateLimited { retry_after: Some(Duration::from_secs(2)) }
        );
        assert_eq!(
            error_from_status(429, &h("retry-after-ms", "150"), b""),
            LlmError::RateLimited { retry_after: Some(Duration::from_millis(150)) }
        );
        let gemini = br#"{"error":{"code":429,"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"7s"}]}}"#;
        assert_eq!(
            error_from_status(429, &[], gemini),
            LlmError::RateLimited { retry_after: Some(Duration::from_secs(7)) }
        );
        assert_eq!(error_from_status(429, &[], b"slow down"), LlmError::RateLimited { retry_after: None });
    }

    #[test]
    fn other_statuses_quote_the_server() {
        assert_eq!(
            error_from_status(500, &[], b"<html>upstream exploded</html>"),
            LlmError::Http { status: 500, message: "<html>upstream exploded</html>".into() }
        );
        assert_eq!(error_from_status(502, &[], b""), LlmError::Http { status: 502, message: "no message".into() });
        let waiting = error_from_status(503, &[("Retry-After".into(), "2".into())], br#"{"error":"loading model"}"#);
        assert_eq!(waiting, LlmError::Unavailable { message: "loading model".into(), retry_after: Duration::from_secs(2) });
        assert!(waiting.is_transient());
        let long = "x".repeat(5000);
        let LlmError::Http { message, .. } = error_from_status(500, &[], long.as_bytes()) else { panic!() };
        assert!(message.chars().count() <= MAX_QUOTED + 1);
        let moved = error_from_status(301, &[("Location".into(), "https://new.example/v1".into())], b"");
        assert!(moved.to_string().contains("https://new.example/v1"), "{moved}");
    }

    #[test]
    fn a_key_with_a_line_break_is_refused_without_being_quoted() {
        let transport = HttpTransport::new(Timeouts::default(), None);
        let post = JsonPost {
            url: "http://127.0.0.1:9/v1/chat/completions",
            headers: vec![("authorization", "Bearer sk-abcdef\r\nX-Evil: 1".into())],
            body: &serde_json::json!({}),
            stream: false,
        };
        let error = transport.post_json(post, &CancelToken::new()).err().expect("refused");
        assert!(matches!(error, LlmError::Config(_)), "{error:?}");
        assert!(!error.to_string().contains("sk-abcdef"), "{error}");
    }

    #[test]
    fn odd_timeouts_do_not_panic() {
        assert!(seconds(-1.0) > Duration::ZERO);
        assert!(seconds(f64::NAN) > Duration::ZERO);
        assert_eq!(seconds(1.5), Duration::from_millis(1500));
    }
}
