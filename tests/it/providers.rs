//! Protocol tests: each HTTP provider against a local server speaking its real wire
//! format, through the real `LlmClient` (retries, cache, rate limit, cancellation).
//! Every case must end in the right result or a clear error: never a panic or a hang.

use crate::support;

use lorekeeper::llm::{
    CallContext, CancelToken, ChatMessage, ChatRequest, Completion, LlmClient, LlmError, ProviderKind, ProviderProfile,
    RetryPolicy, Timeouts,
};
use lorekeeper::store::Store;
use serde_json::json;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use support::mock_http::{Action, After, MockServer, Recorded};
use support::wire::{Anthropic, Dialect, Gemini, MODEL, OpenAi};

const FRAGMENTS: [&str; 8] = ["Hel", "lo, ", "wörld", " — ", "世界", " 🐉", "!\r\n", "Done."];

fn full_text() -> String {
    FRAGMENTS.concat()
}

// ---------------------------------------------------------------------------------
// Fixtures

/// A fresh key in a fresh environment variable, so tests never share or race on one.
struct Key {
    var: String,
    value: String,
}

impl Key {
    fn new(test: &str) -> Self {
        let var = format!("LOREKEEPER_TEST_KEY_{}_{:08X}", test.to_uppercase(), fastrand::u32(..));
        let value = format!("sk-test-{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
        // SAFETY: the variable name is unique to this test, and std serialises its own
        // environment reads and writes; nothing outside Rust reads this variable.
        unsafe { std::env::set_var(&var, &value) };
        Self { var, value }
    }
}

/// A server that refuses requests to the wrong endpoint or with the wrong key (as the
/// real APIs do, echoing the presented key back) and passes the rest to `inner`.
fn api_server<D: Dialect>(key: &Key, inner: impl Fn(&Recorded, usize) -> Action + Send + Sync + 'static) -> MockServer {
    let expected = key.value.clone();
    MockServer::start(move |request, index| {
        if request.method != "POST" || !D::is_endpoint(&request.target) {
            return Action::json(404, &D::error(&format!("no route for {}", request.target)));
        }
        match D::presented_key(request) {
            Some(presented) if presented == expected => inner(request, index),
            presented => Action::json(401, &D::error(&format!("Incorrect API key provided: {}", presented.unwrap_or_default()))),
        }
    })
}

fn profile<D: Dialect>(server: &MockServer, key: &Key) -> ProviderProfile {
    ProviderProfile {
        name: format!("{}-test-{:08x}", D::NAME, fastrand::u32(..)),
        kind: D::KIND,
        base_url: Some(D::base_url(&server.url())),
        model: MODEL.into(),
        api_key_env: Some(key.var.clone()),
        timeouts: Timeouts { connect_secs: 2.0, read_secs: 3.0, total_secs: 20.0 },
        retry: RetryPolicy { max_retries: 2, base_delay_ms: 10, max_delay_ms: 2_000 },
        ..Default::default()
    }
}

fn client(profile: &ProviderProfile) -> LlmClient {
    LlmClient::from_profile(profile, None).expect("client builds")
}

fn request(stream: bool) -> ChatRequest {
    let mut request = ChatRequest::new(MODEL, vec![ChatMessage::system("You are a test."), ChatMessage::user("Say hello.")]);
    request.stream = stream;
    request
}

/// Run a call, collecting streamed fragments.
fn call(client: &LlmClient, request: &ChatRequest) -> (Result<Completion, LlmError>, String) {
    let streamed = Mutex::new(String::new());
    let sink = |t: &str| streamed.lock().unwrap().push_str(t);
    let cancel = CancelToken::new();
    let result = client.complete(request, CallContext::with_tokens(&cancel, &sink));
    (result, streamed.into_inner().unwrap())
}

fn stream_bytes(events: &[(String, Option<usize>)]) -> Vec<u8> {
    events.iter().map(|(e, _)| e.as_str()).collect::<String>().into_bytes()
}

/// The stream up to the middle of the event carrying fragment `n`.
fn stream_cut_inside_fragment<D: Dialect>(n: usize) -> Vec<u8> {
    let events = D::stream(&FRAGMENTS);
    let at = events.iter().position(|(_, f)| *f == Some(n)).expect("fragment event");
    let mut bytes = stream_bytes(&events[..at]);
    let event = events[at].0.as_bytes();
    bytes.extend_from_slice(&event[..event.len() / 2]);
    bytes
}

fn assert_full_reply(completion: &Completion, text: &str) {
    assert_eq!(completion.text, text);
    assert!(completion.usage.reported, "usage should be the server's: {:?}", completion.usage);
    assert_eq!((completion.usage.prompt_tokens, completion.usage.completion_tokens), (11, 7));
    assert_eq!(completion.finish_reason.as_deref(), Some("stop"));
    assert_eq!(completion.model, MODEL);
    assert!(!completion.from_cache);
}

// ---------------------------------------------------------------------------------
// Cases, each run against every dialect

fn plain_success_with_usage<D: Dialect>() {
    let key = Key::new("plain");
    let server = api_server::<D>(&key, |_, _| Action::json(200, &D::reply("Hello, game master!")));
    let (result, streamed) = call(&client(&profile::<D>(&server, &key)), &request(false));
    assert_full_reply(&result.expect("a reply"), "Hello, game master!");
    assert!(streamed.is_empty(), "a plain call streams nothing");
    let sent = &server.requests()[0];
    let body = sent.json();
    let all_text = body.to_string();
    assert!(all_text.contains("You are a test.") && all_text.contains("Say hello."), "{all_text}");
    assert!(!sent.target.contains(&key.value), "the key must not travel in the URL");
    assert_eq!(server.hits(), 1);
}

fn streaming_split_at_arbitrary_bytes<D: Dialect>() {
    for (seed, chunked) in [(1, true), (2, false), (3, true)] {
        let key = Key::new("split");
        let bytes = stream_bytes(&D::stream(&FRAGMENTS));
        let server = api_server::<D>(&key, move |_, _| Action::event_stream(&bytes, seed, chunked, After::End));
        let (result, streamed) = call(&client(&profile::<D>(&server, &key)), &request(true));
        let completion = result.unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_full_reply(&completion, &full_text());
        assert_eq!(streamed, full_text(), "every fragment reaches the sink, in order");
        let body = server.requests()[0].json();
        if D::KIND != ProviderKind::Gemini {
            assert_eq!(body["stream"], json!(true));
        }
    }
}

fn stream_cut_off_mid_event<D: Dialect>() {
    for chunked in [true, false] {
        let key = Key::new("cut");
        let bytes = stream_cut_inside_fragment::<D>(2);
        let server = api_server::<D>(&key, move |_, _| Action::event_stream(&bytes, 7, chunked, After::Cut));
        let (result, streamed) = call(&client(&profile::<D>(&server, &key)), &request(true));
        let expected_partial = FRAGMENTS[..2].concat();
        assert_eq!(result, Err(LlmError::Truncated { partial: expected_partial.clone() }), "chunked: {chunked}");
        assert_eq!(streamed, expected_partial);
        assert_eq!(server.hits(), 1, "no retry once tokens reached the caller");
    }
}

fn a_cut_before_any_token_is_retried<D: Dialect>() {
    let key = Key::new("cut_retry");
    let cut = stream_cut_inside_fragment::<D>(0);
    let whole = stream_bytes(&D::stream(&FRAGMENTS));
    let server = api_server::<D>(&key, move |_, i| {
        if i == 0 { Action::event_stream(&cut, 11, true, After::Cut) } else { Action::event_stream(&whole, 12, true, After::End) }
    });
    let (result, streamed) = call(&client(&profile::<D>(&server, &key)), &request(true));
    assert_full_reply(&result.expect("the retry succeeds"), &full_text());
    assert_eq!(streamed, full_text());
    assert_eq!(server.hits(), 2);
}

fn rate_limited_then_success<D: Dialect>() {
    let key = Key::new("429");
    let server = api_server::<D>(&key, |_, i| {
        if i == 0 {
            Action::json(429, &D::error("Rate limit reached, slow down")).with_header("Retry-After", "1")
        } else {
            Action::json(200, &D::reply("after the wait"))
        }
    });
    let started = Instant::now();
    let (result, _) = call(&client(&profile::<D>(&server, &key)), &request(false));
    assert_full_reply(&result.expect("retried after the wait"), "after the wait");
    assert!(started.elapsed() >= Duration::from_secs(1), "Retry-After: 1 was not honoured ({:?})", started.elapsed());
    assert_eq!(server.hits(), 2);
}

fn server_error_then_success<D: Dialect>() {
    let key = Key::new("500_once");
    let server = api_server::<D>(&key, |_, i| {
        if i == 0 { Action::json(500, &D::error("temporary glitch")) } else { Action::json(200, &D::reply("recovered")) }
    });
    let (result, _) = call(&client(&profile::<D>(&server, &key)), &request(false));
    assert_full_reply(&result.expect("retried"), "recovered");
    assert_eq!(server.hits(), 2);
}

fn server_error_forever<D: Dialect>() {
    let key = Key::new("500_always");
    let server = api_server::<D>(&key, |_, _| Action::json(500, &D::error("upstream exploded")));
    let (result, _) = call(&client(&profile::<D>(&server, &key)), &request(false));
    let error = result.expect_err("no success is possible");
    assert!(matches!(error, LlmError::Http { status: 500, .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("HTTP 500") && message.contains("upstream exploded"), "{message}");
    assert_eq!(server.hits(), 3, "one attempt and max_retries = 2 retries");
}

fn silent_server_times_out<D: Dialect>() {
    let key = Key::new("silent");
    let server = api_server::<D>(&key, |_, _| Action::Silent);
    let mut profile = profile::<D>(&server, &key);
    profile.timeouts.read_secs = 0.4;
    profile.retry.max_retries = 0;
    let started = Instant::now();
    let (result, _) = call(&client(&profile), &request(true));
    assert!(matches!(result, Err(LlmError::Timeout(_))), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
}

fn malformed_json<D: Dialect>() {
    let key = Key::new("malformed");
    let server = api_server::<D>(&key, |_, _| Action::raw(200, "application/json", br#"{"choices": [{"message": "#.to_vec()));
    let (result, _) = call(&client(&profile::<D>(&server, &key)), &request(false));
    let error = result.expect_err("cannot parse");
    assert!(matches!(error, LlmError::Malformed(_)), "{error:?}");
    assert!(error.to_string().contains("not valid JSON"), "{error}");
    assert_eq!(server.hits(), 1, "a malformed body is not retried");

    let key = Key::new("malformed_stream");
    let server = api_server::<D>(&key, |_, _| Action::event_stream(b"data: {this is not json}\n\n", 5, true, After::End));
    let (result, _) = call(&client(&profile::<D>(&server, &key)), &request(true));
    assert!(matches!(result, Err(LlmError::Malformed(_))), "{result:?}");
}

fn cancellation_mid_stream<D: Dialect>() {
    let key = Key::new("cancel");
    let events = D::stream(&FRAGMENTS);
    let upto = events.iter().position(|(_, f)| *f == Some(1)).unwrap() + 1;
    let bytes = stream_bytes(&events[..upto]);
    let server = api_server::<D>(&key, move |_, _| Action::event_stream(&bytes, 3, true, After::Stall));
    let mut profile = profile::<D>(&server, &key);
    profile.timeouts.read_secs = 20.0; // only cancellation can end this call quickly
    let client = client(&profile);
    let cancel = CancelToken::new();
    let (first_token_tx, first_token_rx) = crossbeam_channel::bounded::<()>(16);
    let call_thread = {
        let cancel = cancel.clone();
        std::thread::spawn(move || {
            let sink = move |_: &str| {
                let _ = first_token_tx.try_send(());
            };
            client.complete(&request(true), CallContext::with_tokens(&cancel, &sink))
        })
    };
    first_token_rx.recv_timeout(Duration::from_secs(5)).expect("the stream started");
    std::thread::sleep(Duration::from_millis(100));
    let cancelled_at = Instant::now();
    cancel.cancel();
    let result = call_thread.join().expect("no panic");
    assert_eq!(result, Err(LlmError::Cancelled));
    assert!(cancelled_at.elapsed() < Duration::from_secs(1), "cancel took {:?}", cancelled_at.elapsed());
}

fn key_never_leaks_into_errors<D: Dialect>() {
    let key = Key::new("leak");
    let echoed = key.value.clone();
    // The key is right, but the server still refuses and quotes it back.
    let server = api_server::<D>(&key, move |_, _| Action::json(401, &D::error(&format!("key {echoed} is suspended"))));
    let (result, _) = call(&client(&profile::<D>(&server, &key)), &request(false));
    let error = result.expect_err("refused");
    assert!(matches!(error, LlmError::Http { status: 401, .. }), "{error:?}");
    for shown in [error.to_string(), format!("{error:?}")] {
        assert!(!shown.contains(&key.value), "the key leaked: {shown}");
        assert!(shown.contains("[redacted]"), "{shown}");
    }
    assert_eq!(server.hits(), 1, "401 is not retried");
}

fn cached_requests_never_reach_the_server<D: Dialect>() {
    let key = Key::new("cache");
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("library.sqlite")).unwrap();
    let echoed = key.value.clone();
    // The reply even quotes the key: it must be scrubbed before it is stored.
    let server = api_server::<D>(&key, move |_, _| Action::json(200, &D::reply(&format!("your key {echoed} works"))));
    let profile = ProviderProfile { cache: true, ..profile::<D>(&server, &key) };
    let client = LlmClient::from_profile(&profile, Some(&store)).unwrap();

    let (first, _) = call(&client, &request(false));
    let first = first.unwrap();
    assert!(!first.from_cache);
    assert_eq!(first.text, "your key [redacted] works");
    let (second, streamed) = call(&client, &request(true));
    let second = second.unwrap();
    assert!(second.from_cache);
    assert_eq!(second.text, first.text);
    assert_eq!(second.usage, first.usage);
    assert_eq!(streamed, first.text, "a cached reply to a streamed request is replayed to the sink");
    // A fresh client on the same library hits the same cache.
    let (third, _) = call(&LlmClient::from_profile(&profile, Some(&store)).unwrap(), &request(false));
    assert!(third.unwrap().from_cache);
    assert_eq!(server.hits(), 1);

    let mut different = request(false);
    different.messages.push(ChatMessage::user("Something else."));
    call(&client, &different).0.unwrap();
    assert_eq!(server.hits(), 2, "a different request is not a hit");

    drop(client);
    let needle = key.value.as_bytes();
    for suffix in ["", "-wal", "-shm"] {
        let path = dir.path().join(format!("library.sqlite{suffix}"));
        if let Ok(bytes) = std::fs::read(&path) {
            assert!(!bytes.windows(needle.len()).any(|w| w == needle), "the key is in {}", path.display());
        }
    }
    drop(store);
}

macro_rules! provider_tests {
    ($module:ident, $dialect:ty) => {
        mod $module {
            use super::*;
            #[test]
            fn plain_success_with_usage() {
                super::plain_success_with_usage::<$dialect>()
            }
            #[test]
            fn streaming_split_at_arbitrary_bytes() {
                super::streaming_split_at_arbitrary_bytes::<$dialect>()
            }
            #[test]
            fn stream_cut_off_mid_event() {
                super::stream_cut_off_mid_event::<$dialect>()
            }
            #[test]
            fn a_cut_before_any_token_is_retried() {
                super::a_cut_before_any_token_is_retried::<$dialect>()
            }
            #[test]
            fn rate_limited_then_success() {
                super::rate_limited_then_success::<$dialect>()
            }
            #[test]
            fn server_error_then_success() {
                super::server_error_then_success::<$dialect>()
            }
            #[test]
            fn server_error_forever() {
                super::server_error_forever::<$dialect>()
            }
            #[test]
            fn silent_server_times_out() {
                super::silent_server_times_out::<$dialect>()
            }
            #[test]
            fn malformed_json() {
                super::malformed_json::<$dialect>()
            }
            #[test]
            fn cancellation_mid_stream() {
                super::cancellation_mid_stream::<$dialect>()
            }
            #[test]
            fn key_never_leaks_into_errors() {
                super::key_never_leaks_into_errors::<$dialect>()
            }
            #[test]
            fn cached_requests_never_reach_the_server() {
                super::cached_requests_never_reach_the_server::<$dialect>()
            }
        }
    };
}

provider_tests!(openai, OpenAi);
provider_tests!(anthropic, Anthropic);
provider_tests!(gemini, Gemini);

// ---------------------------------------------------------------------------------
// Cases about one provider or none

#[test]
fn openai_request_carries_sampler_and_json_schema() {
    let key = Key::new("openai_body");
    let server = api_server::<OpenAi>(&key, |_, _| Action::json(200, &OpenAi::reply("{}")));
    let mut profile = profile::<OpenAi>(&server, &key);
    profile.sampler.temperature = Some(0.25);
    let mut request = request(false);
    request.sampler.max_tokens = Some(64);
    request.response_format = lorekeeper::llm::ResponseFormat::JsonSchema {
        name: "persona".into(),
        schema: json!({"type": "object", "properties": {"name": {"type": "string"}}}),
    };
    call(&client(&profile), &request).0.unwrap();
    let body = server.requests()[0].json();
    assert_eq!(body["model"], json!(MODEL));
    assert_eq!(body["temperature"], json!(0.25));
    assert_eq!(body["max_tokens"], json!(64));
    assert_eq!(body["response_format"]["type"], json!("json_schema"));
    assert_eq!(body["response_format"]["json_schema"]["schema"]["properties"]["name"]["type"], json!("string"));
}

#[test]
fn a_wrong_base_url_says_so() {
    let key = Key::new("wrong_url");
    let server = api_server::<OpenAi>(&key, |_, _| Action::json(200, &OpenAi::reply("unreachable")));
    let profile = ProviderProfile { base_url: Some(format!("{}/api", server.url())), ..profile::<OpenAi>(&server, &key) };
    let error = call(&client(&profile), &request(false)).0.expect_err("no such route");
    assert!(matches!(error, LlmError::Http { status: 404, .. }), "{error:?}");
    assert!(error.to_string().contains("check the base URL"), "{error}");
    assert_eq!(server.hits(), 1, "404 is not retried");
}

#[test]
fn a_local_openai_server_needs_no_key() {
    let server = MockServer::start(|request, _| {
        if request.header("authorization").is_some() {
            Action::json(400, &OpenAi::error("unexpected authorization header"))
        } else {
            Action::json(200, &OpenAi::reply("no key needed"))
        }
    });
    let profile = ProviderProfile {
        name: "keyless".into(),
        kind: ProviderKind::Openai,
        base_url: Some(OpenAi::base_url(&server.url())),
        model: MODEL.into(),
        api_key_env: Some("LOREKEEPER_TEST_KEY_NEVER_SET_FOR_KEYLESS".into()),
        ..Default::default()
    };
    let (result, _) = call(&client(&profile), &request(false));
    assert_eq!(result.unwrap().text, "no key needed");
}

#[test]
fn remote_apis_without_a_key_are_refused_before_any_request() {
    for kind in [ProviderKind::Anthropic, ProviderKind::Gemini] {
        let profile = ProviderProfile {
            kind,
            model: MODEL.into(),
            api_key_env: Some("LOREKEEPER_TEST_KEY_NEVER_SET_FOR_REMOTE".into()),
            ..Default::default()
        };
        let error = LlmClient::from_profile(&profile, None).err().expect("refused");
        assert_eq!(error, LlmError::MissingKey { var: "LOREKEEPER_TEST_KEY_NEVER_SET_FOR_REMOTE".into() });
        assert!(error.to_string().contains("LOREKEEPER_TEST_KEY_NEVER_SET_FOR_REMOTE"));
    }
}

#[test]
fn connection_refused_is_a_clear_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    }; // closed again: nothing listens there now
    let profile = ProviderProfile {
        name: "refused".into(),
        kind: ProviderKind::Openai,
        base_url: Some(format!("http://127.0.0.1:{port}/v1")),
        model: MODEL.into(),
        retry: RetryPolicy { max_retries: 1, base_delay_ms: 10, max_delay_ms: 50 },
        ..Default::default()
    };
    let started = Instant::now();
    let (result, _) = call(&client(&profile), &request(false));
    let error = result.expect_err("nothing listens");
    assert!(matches!(error, LlmError::Connect { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains(&format!("127.0.0.1:{port}")) && message.contains("refused"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn the_rate_limit_spaces_requests_across_clones() {
    let key = Key::new("rpm");
    let server = api_server::<OpenAi>(&key, |_, _| Action::json(200, &OpenAi::reply("ok")));
    let profile = ProviderProfile { requests_per_minute: Some(600), ..profile::<OpenAi>(&server, &key) };
    let first = client(&profile);
    let second = client(&profile); // built separately from the same profile
    let third = first.clone();
    let started = Instant::now();
    for client in [&first, &second, &third, &first] {
        call(client, &request(false)).0.unwrap();
    }
    let elapsed = started.elapsed();
    // Four requests at 600 a minute: three gaps of at least 100 ms.
    assert!(elapsed >= Duration::from_millis(300), "took only {elapsed:?}");
    assert_eq!(server.hits(), 4);
}

#[test]
fn the_scripted_demo_profile_answers_the_connection_test() {
    let profile = lorekeeper::config::demo_profile();
    let client = LlmClient::from_profile(&profile, None).expect("the demo script loads");
    let request = ChatRequest::new(
        "",
        vec![
            ChatMessage::system("You are a connection test. Answer with one short sentence."),
            ChatMessage::user("Say hello to the game master."),
        ],
    );
    let mut request = request;
    request.stream = true;
    let (result, streamed) = call(&client, &request);
    let completion = result.unwrap();
    assert!(completion.text.contains("Hello"), "{}", completion.text);
    assert_eq!(streamed, completion.text);
    assert!(!completion.usage.reported);
    assert!(completion.usage.completion_tokens > 0);
}

/// A server that streams without ever ending a line (or an event) is cut off at the
/// cap with a clear error; the tokens that came before it were streamed as usual.
#[test]
fn an_endless_line_or_event_ends_the_call_at_its_cap() {
    use support::mock_http::Body;
    for endless in [b"data: ".iter().copied().chain(std::iter::repeat_n(b'a', 3 << 20)).collect::<Vec<u8>>(), {
        let line = format!("data: {}\n", "b".repeat(1000));
        line.repeat(6000).into_bytes()
    }] {
        let key = Key::new("endless");
        // The keep-alive, the role and the first fragment; never the stop.
        let opening = OpenAi::stream(&FRAGMENTS[..1]);
        let mut pieces = vec![stream_bytes(&opening[..3])];
        pieces.extend(endless.chunks(64 << 10).map(<[u8]>::to_vec));
        let server = api_server::<OpenAi>(&key, move |_, _| Action::Respond {
            status: 200,
            headers: vec![("Content-Type".into(), "text/event-stream".into())],
            body: Body::Pieces { pieces: pieces.clone(), chunked: true, then: After::End },
        });
        let (result, streamed) = call(&client(&profile::<OpenAi>(&server, &key)), &request(true));
        match result {
            Err(LlmError::Malformed(message)) => {
                assert!(message.contains("more than 4 MiB") || message.contains("longer than 1 MiB"), "{message}")
            }
            other => panic!("expected the stream to be refused, got {other:?}"),
        }
        assert_eq!(streamed, FRAGMENTS[0], "what came before the runaway was streamed");
    }
}

// ---------------------------------------------------------------------------------
// Servers that refuse a response format (llama.cpp's Python server and friends)

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Verdict {
    name: String,
    mood: String,
}

/// How llama.cpp's Python server (`llama_cpp.server`) answers a format it does not know:
/// HTTP 500 with the validation error as the message.
fn llama_cpp_refusal(format: &str) -> Action {
    Action::json(
        500,
        &OpenAi::error(&format!(
            "[{{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': '{format}'}}]"
        )),
    )
}

fn structured(client: &LlmClient) -> Result<Verdict, String> {
    let request = ChatRequest::new(MODEL, vec![ChatMessage::system("Judge the scene."), ChatMessage::user("Wren at the lamp.")]);
    let cancel = CancelToken::new();
    lorekeeper::llm::structured::complete_structured::<Verdict>(client, request, &Default::default(), CallContext::new(&cancel))
        .map(|o| o.value)
        .map_err(|e| e.to_string())
}

fn format_of(request: &Recorded) -> String {
    request.json()["response_format"]["type"].as_str().unwrap_or("none").to_string()
}

/// A server that refuses `json_schema` gets `json_object` at once (not the same request
/// three more times), the call succeeds, and every later client of the profile, in this
/// session or the next, starts at `json_object`.
#[test]
fn a_server_refusing_json_schema_gets_json_object_and_the_profile_remembers() {
    let key = Key::new("format_ladder");
    let server = api_server::<OpenAi>(&key, |request, _| match format_of(request).as_str() {
        "json_schema" => llama_cpp_refusal("json_schema"),
        _ => Action::json(200, &OpenAi::reply(r#"{"name": "Wren", "mood": "watchful"}"#)),
    });
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("library.sqlite")).unwrap();
    let profile = profile::<OpenAi>(&server, &key);
    let first = LlmClient::from_profile(&profile, Some(&store)).unwrap();
    let verdict = structured(&first).expect("the call succeeds on the next rung");
    assert_eq!((verdict.name.as_str(), verdict.mood.as_str()), ("Wren", "watchful"));
    let formats: Vec<String> = server.requests().iter().map(format_of).collect();
    assert_eq!(formats, ["json_schema", "json_object"], "one refusal, then the next rung; no blind re-send");
    let sent = server.requests()[1].json();
    assert_eq!(sent["response_format"]["schema"]["properties"]["mood"]["type"], "string", "the schema beside json_object, as llama.cpp takes it");
    let system = sent["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("<json_schema>") && system.contains("\"mood\""), "the schema travels in the prompt: {system}");

    // Another client of the profile starts where the first ended.
    let second = LlmClient::from_profile(&profile, None).unwrap();
    structured(&second).unwrap();
    assert_eq!(format_of(&server.requests()[2]), "json_object");

    // The library remembers it, with the server's reason, for the next session.
    let remembered = lorekeeper::llm::client::formats::remembered(&store).unwrap();
    let row = remembered.iter().find(|r| r.0 == profile.name).expect("remembered");
    assert_eq!(row.2, "json_object+schema");
    assert!(row.3.contains("Input should be 'text' or 'json_object'"), "{}", row.3);
    // A session that starts fresh (another profile name, same server, the library's row
    // copied to it) begins at json_object without asking for json_schema first.
    let fresh = ProviderProfile { name: format!("{}-next-session", profile.name), ..profile.clone() };
    store
        .with(|c| {
            c.execute(
                "INSERT INTO format_fallbacks (profile, endpoint, level, reason, at) SELECT ?1, endpoint, level, reason, at FROM format_fallbacks WHERE profile = ?2",
                [&fresh.name, &profile.name],
            )?;
            Ok(())
        })
        .unwrap();
    let before = server.hits();
    structured(&LlmClient::from_profile(&fresh, Some(&store)).unwrap()).unwrap();
    assert_eq!(server.hits(), before + 1);
    assert_eq!(format_of(&server.requests()[before]), "json_object");
}

/// A server that takes neither `json_schema` nor `json_object` gets plain text, which
/// the structured layer repairs; a call costs at most one request per rung, and one
/// that refuses only the schema beside `json_object` gets plain `json_object`.
#[test]
fn a_server_refusing_every_format_gets_plain_text() {
    let key = Key::new("format_object");
    let server = api_server::<OpenAi>(&key, |request, _| match format_of(request).as_str() {
        "json_schema" => Action::json(400, &OpenAi::error("Invalid value for 'response_format.type': json_schema")),
        "json_object" if request.json()["response_format"].get("schema").is_some() => {
            Action::json(422, &OpenAi::error("response_format.schema: Extra inputs are not permitted"))
        }
        _ => Action::json(200, &OpenAi::reply(r#"{"name": "Juno", "mood": "tired"}"#)),
    });
    let verdict = structured(&client(&profile::<OpenAi>(&server, &key))).expect("plain json_object");
    assert_eq!(verdict.mood, "tired");
    let schemas: Vec<bool> = server.requests().iter().map(|r| r.json()["response_format"].get("schema").is_some()).collect();
    let formats: Vec<String> = server.requests().iter().map(format_of).collect();
    assert_eq!(formats, ["json_schema", "json_object", "json_object"]);
    assert_eq!(schemas, [false, true, false]);

    let key = Key::new("format_text");
    let server = api_server::<OpenAi>(&key, |request, _| match format_of(request).as_str() {
        "json_schema" => llama_cpp_refusal("json_schema"),
        "json_object" => Action::json(400, &OpenAi::error("response_format json_object is not supported by this model")),
        _ => Action::json(200, &OpenAi::reply("Here you go:\n```json\n{\"name\": \"Ossian\", \"mood\": \"evasive\",}\n```")),
    });
    let profile = profile::<OpenAi>(&server, &key);
    let verdict = structured(&client(&profile)).expect("plain text, repaired");
    assert_eq!(verdict.mood, "evasive");
    let formats: Vec<String> = server.requests().iter().map(format_of).collect();
    assert_eq!(formats, ["json_schema", "json_object", "json_object", "none"]);
}

/// A request the server calls invalid is not sent again unchanged, even under a 5xx
/// status; an ordinary 500 still is.
#[test]
fn an_invalid_request_is_not_retried_unchanged() {
    let key = Key::new("invalid_500");
    let server = api_server::<OpenAi>(&key, |_, _| {
        Action::json(500, &OpenAi::error("1 validation error: messages.1.content Input should be a valid string"))
    });
    let profile = profile::<OpenAi>(&server, &key);
    let error = call(&client(&profile), &request(false)).0.expect_err("invalid");
    assert!(error.to_string().contains("Input should be a valid string"), "{error}");
    assert_eq!(server.hits(), 1, "not retried");
}

/// A request that timed out waiting for the reply is not sent again by the client: the
/// server may still be generating it, and a second request would be billed again.
#[test]
fn a_timed_out_reply_is_not_sent_again() {
    for stream in [false, true] {
        let key = Key::new("timeout_once");
        let server = api_server::<OpenAi>(&key, |_, _| Action::Silent);
        let mut profile = profile::<OpenAi>(&server, &key);
        profile.timeouts.read_secs = 0.3;
        profile.retry.max_retries = 3;
        let (result, _) = call(&client(&profile), &request(stream));
        assert!(matches!(result, Err(LlmError::Timeout(_))), "{result:?}");
        assert_eq!(server.hits(), 1, "sent once (stream: {stream})");
    }
}

/// llama.cpp's Python server ends a running stream with `[DONE]` and no stop reason when
/// another request arrives. That is a reply cut off, not an empty one: with nothing
/// shown yet, it is asked again and the full reply comes back.
#[test]
fn a_stream_ended_early_without_a_stop_reason_is_cut_off_not_empty() {
    let key = Key::new("done_early");
    let server = api_server::<OpenAi>(&key, |_, index| {
        if index == 0 {
            let role = json!({"id": "c1", "object": "chat.completion.chunk", "model": MODEL,
                              "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": null}]});
            Action::event_stream(format!("data: {role}\n\ndata: [DONE]\n\n").as_bytes(), 3, true, After::End)
        } else {
            Action::event_stream(&stream_bytes(&OpenAi::stream(&FRAGMENTS)), 4, true, After::End)
        }
    });
    let profile = profile::<OpenAi>(&server, &key);
    let (result, streamed) = call(&client(&profile), &request(true));
    assert_eq!(result.expect("asked again").text, full_text());
    assert_eq!(streamed, full_text());
    assert_eq!(server.hits(), 2);
}

/// A server on this machine gets one request of a profile at a time (so two agents of a
/// wave cannot cut each other off); `max_parallel` lifts the limit.
#[test]
fn a_local_server_gets_one_request_of_a_profile_at_a_time() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    for (max_parallel, expected_peak) in [(None, 1), (Some(0), 3)] {
        let key = Key::new("parallel");
        let in_flight = std::sync::Arc::new(AtomicUsize::new(0));
        let peak = std::sync::Arc::new(AtomicUsize::new(0));
        let (f, p) = (in_flight.clone(), peak.clone());
        let server = api_server::<OpenAi>(&key, move |_, _| {
            let now = f.fetch_add(1, Ordering::SeqCst) + 1;
            p.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(300));
            f.fetch_sub(1, Ordering::SeqCst);
            Action::json(200, &OpenAi::reply("done"))
        });
        let profile = ProviderProfile { max_parallel, ..profile::<OpenAi>(&server, &key) };
        let client = client(&profile);
        std::thread::scope(|s| {
            for _ in 0..3 {
                let client = client.clone();
                s.spawn(move || assert_eq!(call(&client, &request(false)).0.unwrap().text, "done"));
            }
        });
        assert_eq!(peak.load(Ordering::SeqCst), expected_peak, "max_parallel {max_parallel:?}");
    }
}

/// A base URL with a query (Azure OpenAI puts the API version there:
/// `…/openai/deployments/x?api-version=2024-02-01`) gets the endpoint's path joined to its
/// path, the query kept after it, for every dialect; it was appended to the string, so
/// the request went to `…?api-version=2024-02-01/chat/completions`.
#[test]
fn a_base_url_with_a_query_keeps_it_after_the_endpoint_path() {
    fn sent_to<D: Dialect>(base_path: &str, stream: bool) -> String {
        let key = Key::new("query_base");
        let server = MockServer::start(move |_, _| match stream {
            true => Action::event_stream(&stream_bytes(&D::stream(&FRAGMENTS)), 7, true, After::End),
            false => Action::json(200, &D::reply("Hello from the deployment.")),
        });
        let profile = ProviderProfile { base_url: Some(format!("{}{base_path}", server.url())), ..profile::<D>(&server, &key) };
        let (result, _) = call(&client(&profile), &request(stream));
        result.expect("a reply");
        let sent = server.requests();
        assert_eq!(sent.len(), 1, "{sent:?}");
        sent[0].target.clone()
    }
    let azure = "/openai/deployments/gpt4o?api-version=2024-02-01";
    assert_eq!(sent_to::<OpenAi>(azure, false), "/openai/deployments/gpt4o/chat/completions?api-version=2024-02-01");
    assert_eq!(sent_to::<OpenAi>("/openai/deployments/gpt4o/?api-version=2024-02-01", true), "/openai/deployments/gpt4o/chat/completions?api-version=2024-02-01");
    assert_eq!(sent_to::<Anthropic>("/proxy/v1?tenant=a", false), "/proxy/v1/messages?tenant=a");
    assert_eq!(sent_to::<Anthropic>("/proxy?tenant=a", false), "/proxy/v1/messages?tenant=a");
    assert_eq!(sent_to::<Gemini>("/gw?tenant=a", false), format!("/gw/v1beta/models/{MODEL}:generateContent?tenant=a"));
    assert_eq!(sent_to::<Gemini>("/gw/v1beta?tenant=a", true), format!("/gw/v1beta/models/{MODEL}:streamGenerateContent?tenant=a&alt=sse"));
}
