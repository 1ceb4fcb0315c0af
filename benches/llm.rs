//! What the LLM plumbing costs around a model's own time.
//!
//! `cargo bench --profile dev --bench llm -- --warm-up-time 1 --measurement-time 3`.
//! - `sse/*`: parsing an OpenAI-style stream of 1,000 events (~135 KiB), fed in
//!   16 KiB reads (a fast network) and in 7-byte reads (the worst case);
//! - `tokens/estimate`: the usage estimate over 64 KiB of prose;
//! - `cache/key`: hashing a 30-message request (~40 KiB) into its cache key;
//! - `client/*`: a whole call through `LlmClient` to an OpenAI-compatible server on
//!   127.0.0.1 (worker thread, HTTP, parsing): a plain reply, and a 200-event stream.

#[path = "../tests/it/support/mock_http.rs"]
mod mock_http;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use lorekeeper::llm::sse::SseParser;
use lorekeeper::llm::{
    CallContext, CancelToken, ChatMessage, ChatRequest, LlmClient, ProviderKind, ProviderProfile, ResponseCache, tokens,
};
use mock_http::{Action, MockServer};
use serde_json::json;
use std::hint::black_box;

fn openai_stream(events: usize) -> Vec<u8> {
    let mut out = String::new();
    for i in 0..events {
        let chunk = json!({"id": "c1", "object": "chat.completion.chunk", "model": "m",
                           "choices": [{"index": 0, "delta": {"content": format!("word{i} ")}, "finish_reason": null}]});
        out.push_str(&format!("data: {chunk}\n\n"));
    }
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

fn prose(bytes: usize) -> String {
    let sentence = "The old lighthouse keeper had not spoken to anyone in three weeks, and when the stranger knocked — \
                    late, soaked, carrying a lantern — he opened the door only a crack. ";
    sentence.repeat(bytes / sentence.len() + 1)[..bytes].to_string()
}

fn bench(c: &mut Criterion) {
    let stream = openai_stream(1000);
    let mut sse = c.benchmark_group("sse");
    sse.throughput(Throughput::Bytes(stream.len() as u64));
    for (name, piece) in [("16KiB_reads", 16 * 1024), ("7_byte_reads", 7)] {
        sse.bench_function(name, |b| {
            b.iter(|| {
                let mut parser = SseParser::new();
                let mut events = Vec::new();
                for chunk in stream.chunks(piece) {
                    parser.feed(chunk, &mut events);
                }
                assert_eq!(events.len(), 1001);
                black_box(events)
            })
        });
    }
    sse.finish();

    let text = prose(64 * 1024);
    let mut estimate = c.benchmark_group("tokens");
    estimate.throughput(Throughput::Bytes(text.len() as u64));
    estimate.bench_function("estimate", |b| b.iter(|| black_box(tokens::estimate(black_box(&text)))));
    estimate.finish();

    let messages: Vec<ChatMessage> = (0..30)
        .map(|i| if i % 2 == 0 { ChatMessage::user(prose(1300)) } else { ChatMessage::assistant(prose(1300)) })
        .collect();
    let request = ChatRequest::new("m", messages);
    c.bench_function("cache/key", |b| b.iter(|| black_box(ResponseCache::key("openai|x", black_box(&request)))));

    let reply = json!({"model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello."}, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 5, "completion_tokens": 2}});
    let streamed = openai_stream(200);
    let server = MockServer::start(move |request, _| {
        if request.json()["stream"] == json!(true) {
            Action::Respond {
                status: 200,
                headers: vec![("Content-Type".into(), "text/event-stream".into())],
                body: mock_http::Body::Full(streamed.clone()),
            }
        } else {
            Action::json(200, &reply)
        }
    });
    let profile = ProviderProfile {
        name: "bench".into(),
        kind: ProviderKind::Openai,
        base_url: Some(format!("{}/v1", server.url())),
        model: "m".into(),
        ..Default::default()
    };
    let client = LlmClient::from_profile(&profile, None).expect("client");
    let plain = ChatRequest::new("m", vec![ChatMessage::user("hi")]);
    let mut stream_request = plain.clone();
    stream_request.stream = true;
    let cancel = CancelToken::new();
    c.bench_function("client/plain_call", |b| {
        b.iter(|| black_box(client.complete(&plain, CallContext::new(&cancel)).expect("reply")))
    });
    let sink = |t: &str| {
        black_box(t);
    };
    c.bench_function("client/stream_200_events", |b| {
        b.iter(|| black_box(client.complete(&stream_request, CallContext::with_tokens(&cancel, &sink)).expect("reply")))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
