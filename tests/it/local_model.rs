//! The embedded local provider against the real default model (Gemma 3 270M, Q4_K_M).
//!
//! The model is installed by `.ci/setup.sh`, which the README's test command runs first:
//! without it these tests fail and say so, rather than passing without testing anything.
//! Generations are kept short: the whole file runs in well under a minute on 2 cores.

use lorekeeper::llm::local::{CallOptions, LocalProvider, default_model_path};
use lorekeeper::llm::{
    CallContext, CancelToken, ChatMessage, ChatRequest, LlmError, Provider, ProviderKind, ProviderProfile, ResponseFormat,
    SamplerSettings,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn provider() -> LocalProvider {
    let path = default_model_path();
    assert!(path.is_file(), "the local model {} is not installed: run `bash .ci/setup.sh` first", path.display());
    let profile = ProviderProfile {
        name: "local".into(),
        kind: ProviderKind::Local,
        max_context_tokens: 2048,
        ..Default::default()
    };
    LocalProvider::from_profile(&profile).expect("the installed model loads")
}

fn request(messages: Vec<ChatMessage>, max_tokens: u32, seed: u64) -> ChatRequest {
    let mut request = ChatRequest::new("", messages);
    request.sampler = SamplerSettings { max_tokens: Some(max_tokens), seed: Some(seed), ..Default::default() };
    request.stream = true;
    request
}

/// Calls the provider and returns the completion with everything streamed meanwhile.
fn call_streaming(provider: &LocalProvider, request: &ChatRequest) -> (Result<lorekeeper::llm::Completion, LlmError>, String) {
    call_streaming_with(provider, request, None)
}

/// [`call_streaming`] with the provider's call options (`None`: the plain `Provider` call).
fn call_streaming_with(
    provider: &LocalProvider,
    request: &ChatRequest,
    options: Option<CallOptions>,
) -> (Result<lorekeeper::llm::Completion, LlmError>, String) {
    let streamed = Arc::new(Mutex::new(String::new()));
    let sink = {
        let streamed = streamed.clone();
        move |piece: &str| streamed.lock().unwrap().push_str(piece)
    };
    let cancel = CancelToken::new();
    let ctx = CallContext::with_tokens(&cancel, &sink);
    let result = match options {
        None => provider.complete(request, ctx),
        Some(options) => provider.complete_with_timings(request, ctx, options).map(|(completion, _)| completion),
    };
    let text = streamed.lock().unwrap().clone();
    (result, text)
}

#[test]
fn a_short_generation_streams_and_reports_exact_usage() {
    let provider = provider();
    assert!(provider.describe().contains("thread"), "{}", provider.describe());
    let req = request(
        vec![
            ChatMessage::system("Mira is a ferryman's daughter in the river city of Vell."),
            ChatMessage::user("Mira, what do you see on the river tonight?"),
        ],
        24,
        1,
    );
    let (result, streamed) = call_streaming(&provider, &req);
    let completion = result.expect("generation succeeds");
    eprintln!("{}\nreply: {:?} ({:?})", provider.describe(), completion.text, completion.usage);
    assert!(!completion.text.is_empty(), "empty reply");
    assert_eq!(streamed, completion.text, "the stream and the reply differ");
    assert!(!completion.text.contains("\nUser:"), "the reply ran into the next turn: {:?}", completion.text);
    assert!(completion.usage.reported);
    assert!(completion.usage.prompt_tokens > 10, "{:?}", completion.usage);
    assert!((1..=24).contains(&completion.usage.completion_tokens), "{:?}", completion.usage);
    assert!(matches!(completion.finish_reason.as_deref(), Some("stop" | "length")));
}

#[test]
fn a_grammar_constrained_object_parses_and_validates_against_its_schema() {
    let provider = provider();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "name": { "type": "string", "maxLength": 40 },
            "core_traits": { "type": "array", "items": { "type": "string", "maxLength": 40 }, "minItems": 4, "maxItems": 6 },
            "mood": { "enum": ["calm", "restless", "grim"] },
            "importance": { "type": "integer", "minimum": 1, "maximum": 5 },
            "age": { "type": "number" },
            "secretive": { "type": "boolean" },
            "goals": {
                "type": "object",
                "properties": {
                    "surface": { "type": "string", "maxLength": 80 },
                    "deep": { "type": "string", "maxLength": 80 }
                },
                "required": ["surface", "deep"]
            }
        },
        "required": ["name", "core_traits", "mood", "importance", "age", "secretive", "goals"]
    });
    let mut req = request(
        vec![
            ChatMessage::system("Describe the character Mira, a ferryman's daughter, as a JSON object."),
            ChatMessage::user("Mira's profile:"),
        ],
        400,
        3,
    );
    req.response_format = ResponseFormat::JsonSchema { name: "profile".into(), schema: schema.clone() };
    let (result, streamed) = call_streaming(&provider, &req);
    let completion = result.expect("generation succeeds");
    eprintln!("structured reply: {} ({:?})", completion.text, completion.usage);
    assert_eq!(completion.finish_reason.as_deref(), Some("stop"), "ran out of tokens: {}", completion.text);
    assert_eq!(streamed, completion.text);
    let value: serde_json::Value = serde_json::from_str(&completion.text)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", completion.text));
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(&value).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?} in {value}");
}

#[test]
fn cancellation_stops_a_long_generation_promptly() {
    let provider = provider();
    let mut req = request(vec![ChatMessage::user("Tell me a very long story about the river city of Vell.")], 1500, 5);
    req.sampler.stop = Vec::new();
    let cancel = CancelToken::new();
    let cancelled_at = Arc::new(Mutex::new(None::<Instant>));
    let pieces = Arc::new(Mutex::new(0usize));
    let sink = {
        let (cancel, cancelled_at, pieces) = (cancel.clone(), cancelled_at.clone(), pieces.clone());
        move |_: &str| {
            let mut n = pieces.lock().unwrap();
            *n += 1;
            if *n == 3 {
                cancel.cancel();
                *cancelled_at.lock().unwrap() = Some(Instant::now());
            }
        }
    };
    // Exactly 1500 tokens: the model cannot end its turn before the cancel comes.
    let options = CallOptions { exact_length: true, ..Default::default() };
    let result = provider.complete_with_timings(&req, CallContext::with_tokens(&cancel, &sink), options).map(|(c, _)| c);
    let returned = Instant::now();
    match result {
        Err(LlmError::Cancelled) => {}
        other => panic!("expected Cancelled, got {other:?}"),
    }
    let at = cancelled_at.lock().unwrap().expect("cancelled from the stream");
    let lag = returned - at;
    eprintln!("stopped {lag:?} after the cancel, {} pieces streamed", pieces.lock().unwrap());
    assert!(lag < Duration::from_secs(2), "took {lag:?} to stop after cancellation");
    assert!(*pieces.lock().unwrap() < 20, "kept streaming after the cancel");

    // A call cancelled before it starts never reaches the model.
    let cancel = CancelToken::new();
    cancel.cancel();
    assert!(matches!(provider.complete(&req, CallContext::new(&cancel)), Err(LlmError::Cancelled)));
}

/// A call queued behind another on the embedded model is told what holds it (an
/// identity run's checkpoint), once, instead of waiting minutes in silence; and told the
/// wait is over once it has the model (a Director's reply streams nothing to say so).
#[test]
fn a_call_waiting_for_the_model_hears_what_holds_it() {
    let _ = provider();
    let profile = ProviderProfile { name: "local".into(), kind: ProviderKind::Local, max_context_tokens: 2048, ..Default::default() };
    let holder = lorekeeper::llm::LlmClient::from_profile(&profile, None).unwrap().for_agent("identity.personality").doing("Tomas Reed, checkpoint 1");
    let waiter = lorekeeper::llm::LlmClient::from_profile(&profile, None).unwrap().for_agent("companion");
    let mut long = request(vec![ChatMessage::user("Tell me a long story about the river city of Vell.")], 80, 7);
    long.sampler.stop = Vec::new();
    let short = request(vec![ChatMessage::user("Say hello.")], 4, 8);
    let started = std::sync::atomic::AtomicBool::new(false);
    let heard = Mutex::new(Vec::<Option<String>>::new());
    let cancel = CancelToken::new();
    let on_token = |_: &str| started.store(true, std::sync::atomic::Ordering::Relaxed);
    std::thread::scope(|scope| {
        let first = scope.spawn(|| holder.complete(&long, CallContext::with_tokens(&cancel, &on_token)));
        let deadline = Instant::now() + Duration::from_secs(60);
        while !started.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let on_wait = |holder: Option<&str>| heard.lock().unwrap().push(holder.map(str::to_string));
        let second = waiter.complete(&short, CallContext::new(&cancel).with_wait(&on_wait));
        assert!(first.join().unwrap().is_ok());
        assert!(second.is_ok(), "{second:?}");
    });
    assert_eq!(*heard.lock().unwrap(), [Some("Tomas Reed, checkpoint 1".to_string()), None]);
}

#[test]
fn parallel_callers_share_the_model_and_get_whole_answers() {
    let provider = provider();
    // Greedy decoding is deterministic: if two calls running together disturbed each
    // other (interleaved tokens, shared cache), their answers would differ from the
    // answers each gives alone. Every call evaluates its whole prompt (`cold_cache`):
    // how much of a prefix the cache happens to hold depends on which test ran just
    // before, and a different batch split may round differently.
    let cold = Some(CallOptions { cold_cache: true, ..Default::default() });
    let greedy = |question: &str, seed| {
        let mut r = request(vec![ChatMessage::user(question)], 20, seed);
        r.sampler.temperature = Some(0.0);
        r
    };
    let a = greedy("Name three rivers of Europe.", 1);
    let b = greedy("What is the capital city of France?", 2);
    let alone_a = call_streaming_with(&provider, &a, cold).0.expect("a alone").text;
    let alone_b = call_streaming_with(&provider, &b, cold).0.expect("b alone").text;

    let other = LocalProvider::from_profile(&ProviderProfile {
        name: "second".into(),
        kind: ProviderKind::Local,
        max_context_tokens: 2048,
        ..Default::default()
    })
    .unwrap();
    assert!(provider.shares_model_with(&other), "the second provider loaded the model again");
    let (ra, rb) = std::thread::scope(|scope| {
        let ta = scope.spawn(|| call_streaming_with(&provider, &a, cold));
        let tb = scope.spawn(|| call_streaming_with(&other, &b, cold));
        (ta.join().unwrap(), tb.join().unwrap())
    });
    let (ca, sa) = (ra.0.expect("a in parallel"), ra.1);
    let (cb, sb) = (rb.0.expect("b in parallel"), rb.1);
    assert_eq!(sa, ca.text, "a's stream holds text that is not a's");
    assert_eq!(sb, cb.text, "b's stream holds text that is not b's");
    eprintln!("a: {:?}\nb: {:?}", ca.text, cb.text);
    assert_eq!(ca.text, alone_a);
    assert_eq!(cb.text, alone_b);
}

#[test]
fn a_shared_prompt_prefix_is_reused_without_changing_the_answer() {
    let shared = provider();
    // A context size of its own gives this test its own model thread, so calls from
    // tests running alongside cannot replace the cached prefix between its calls.
    let provider = LocalProvider::from_profile(&ProviderProfile {
        name: "private".into(),
        kind: ProviderKind::Local,
        max_context_tokens: 1536,
        ..Default::default()
    })
    .unwrap();
    assert!(!provider.shares_model_with(&shared));
    let greedy = |messages: Vec<ChatMessage>| {
        let mut r = request(messages, 16, 1);
        r.sampler.temperature = Some(0.0);
        r.stream = false;
        r
    };
    let cancel = CancelToken::new();
    let call = |r: &ChatRequest, cold_cache| {
        provider
            .complete_with_timings(r, CallContext::new(&cancel), CallOptions { cold_cache, ..Default::default() })
            .expect("generation succeeds")
    };
    let system = ChatMessage::system("Mira is a ferryman's daughter in the river city of Vell. She speaks briefly.");
    let first = greedy(vec![system.clone(), ChatMessage::user("Where do you live, Mira?")]);
    let (reply, _) = call(&first, false);
    // A follow-up repeats the whole conversation so far: only the new turn needs work.
    let follow_up = greedy(vec![
        system,
        ChatMessage::user("Where do you live, Mira?"),
        ChatMessage::assistant(reply.text.clone()),
        ChatMessage::user("And what does your father do?"),
    ]);
    let (warm, warm_timings) = call(&follow_up, false);
    let (cold, cold_timings) = call(&follow_up, true);
    eprintln!("reused {} of {} prompt tokens; warm {:?}, cold {:?}", warm_timings.prompt_tokens_reused, warm_timings.prompt_tokens, warm.text, cold.text);
    assert!(warm_timings.prompt_tokens_reused >= first_prompt_tokens(&provider, &first), "{warm_timings:?}");
    assert_eq!(cold_timings.prompt_tokens_reused, 0);
    assert_eq!(warm.usage, cold.usage);
    assert_eq!(warm.text, cold.text, "the cached prefix changed the answer");
}

/// Prompt tokens of `request` alone (what the follow-up must at least reuse).
fn first_prompt_tokens(provider: &LocalProvider, request: &ChatRequest) -> u32 {
    let cancel = CancelToken::new();
    let mut probe = request.clone();
    probe.sampler.max_tokens = Some(1);
    let (completion, _) = provider
        .complete_with_timings(&probe, CallContext::new(&cancel), CallOptions { cold_cache: true, ..Default::default() })
        .expect("probe succeeds");
    completion.usage.prompt_tokens - 1
}

/// Issue 18's demo round, offline: on the embedded model the Director names characters
/// who are present (its grammar lists them), at least one of them speaks, and the round
/// is saved. Before, the plan named `state_update` and nobody acted.
#[test]
fn an_offline_demo_round_has_a_present_character_speaking() {
    use lorekeeper::config::{Config, Paths};
    use lorekeeper::engine::{self, Command, Event};
    use lorekeeper::scene::{DirectorDecision, SceneCommand, SceneEvent, demo};

    assert!(default_model_path().is_file(), "the local model is not installed: run `bash .ci/setup.sh` first");
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths { config_file: dir.path().join("config.toml"), library_file: dir.path().join("library.sqlite"), log_dir: dir.path().join("logs") };
    let mut config = Config::default();
    assert_eq!(config.default_profile, "local", "the embedded model is the default when it is installed");
    // Keyword memories only: the embedder is not what this test is about.
    config.memory.embedding.model_dir = Some(dir.path().join("no-model"));
    // One seed, so a failure here can be run again as it happened.
    let mut local = config.profile("local").unwrap().clone();
    local.sampler.seed = Some(11);
    config.upsert_profile(local);
    config.save(&paths.config_file).unwrap();
    let scene = demo::ensure(&lorekeeper::store::Store::open(&paths.library_file).unwrap()).unwrap().unwrap();
    let engine = engine::start(paths).unwrap();
    let present: Vec<String> = engine
        .context()
        .store
        .with(|c| lorekeeper::scene::records::load_view(c, &scene))
        .unwrap()
        .cast
        .iter()
        .filter(|m| m.active && !m.muted)
        .map(|m| m.name.clone())
        .collect();
    engine
        .send(Command::Scene(SceneCommand::Round {
            scene: scene.clone(),
            input: Some("I hand the keeper the sealed letter and ask who sent it.".into()),
            force: Vec::new(),
            review: false,
        }))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut plan = None;
    let mut spoke = Vec::new();
    loop {
        match engine.events().recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Event::Scene(SceneEvent::DirectorDecided { pass: 1, decision: DirectorDecision::Plan(p), .. })) => plan = Some(p),
            Ok(Event::Scene(SceneEvent::CharacterFinished { name, content, .. })) => spoke.push((name, content)),
            Ok(Event::Scene(SceneEvent::RoundCompleted { .. })) => break,
            Ok(Event::Scene(SceneEvent::Error { message, .. })) => panic!("the round failed: {message}; spoke: {spoke:?}"),
            Ok(_) => {}
            Err(e) => panic!("no round in time: {e}"),
        }
    }
    let plan = plan.expect("the Director's plan");
    assert!(!plan.acting_characters.is_empty());
    for actor in &plan.acting_characters {
        assert!(present.contains(&actor.name), "{} is not present: {present:?}", actor.name);
    }
    assert!(spoke.iter().any(|(name, text)| present.contains(name) && text.split_whitespace().count() >= 2), "{spoke:?}");
}

/// The build puts llama.cpp's shared libraries and one CPU backend per x86-64 level beside
/// the binary, and the binary finds them there: a copy of that folder alone, with no
/// library path set, runs the model on a variant that fits this processor. The plain
/// x86-64 variant is among them, so the same folder runs on a machine without AVX.
#[test]
fn a_copied_binary_folder_runs_the_model_on_a_cpu_backend_of_its_own() {
    let model = default_model_path();
    assert!(model.is_file(), "the local model {} is not installed: run `bash .ci/setup.sh` first", model.display());
    // The copy runs in its own folder: the default path is relative to the repository.
    let model = std::fs::canonicalize(&model).unwrap();
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_lorekeeper"));
    let built = exe.parent().expect("the binary has a folder");
    let folder = tempfile::tempdir().unwrap();
    let mut variants = Vec::new();
    for entry in std::fs::read_dir(built).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("lib") && (name.ends_with(".so") || name.contains(".so."))) {
            continue;
        }
        // Version symlinks (libllama.so.0 -> libllama.so.0.0.N) are copied as files.
        std::fs::copy(entry.path(), folder.path().join(&name)).unwrap();
        if let Some(level) = name.strip_prefix("libggml-cpu-").and_then(|n| n.strip_suffix(".so")) {
            variants.push(level.to_string());
        }
    }
    assert!(variants.iter().any(|v| v == "x64"), "no plain x86-64 CPU backend beside the binary: {variants:?}");
    assert!(variants.len() >= 10, "expected one CPU backend per x86-64 level, found {variants:?}");
    let copy = folder.path().join("lorekeeper");
    std::fs::copy(&exe, &copy).unwrap();

    let out = std::process::Command::new(&copy)
        .args(["bench", "local", "--threads", "1", "--runs", "1", "--max-tokens", "4", "--json", "--model"])
        .arg(&model)
        .env_remove("LD_LIBRARY_PATH")
        .env("XDG_DATA_HOME", folder.path().join("data"))
        .current_dir(folder.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "the copied binary failed: {}", String::from_utf8_lossy(&out.stderr));
    let line = String::from_utf8_lossy(&out.stdout);
    let result: serde_json::Value = serde_json::from_str(line.lines().next().unwrap_or("")).unwrap();
    let loaded = result["cpu_backend_path"].as_str().unwrap_or_default();
    assert!(
        loaded.starts_with(&*folder.path().to_string_lossy()),
        "the CPU backend came from {loaded:?}, not from the copied folder"
    );
    assert!(variants.contains(&result["cpu_backend"].as_str().unwrap_or_default().to_string()), "{result}");
    assert!(result["prompt_tokens_per_sec"].as_f64().unwrap_or(0.0) > 0.0, "{result}");
}

/// What the trait lexicon costs under the grammar (issue 18): the same list of core
/// traits drawn with free strings and with every item one of the ~290 words of
/// `identity::traits::LEXICON` (as the base-model identity path asks it). Prints tokens
/// per CPU-second of generation and the grammar's fallbacks; BENCHMARKS.md, session 9.
/// Not part of the suite (about a minute): `cargo test --test it trait_lexicon -- --ignored --nocapture`.
#[test]
#[ignore]
fn trait_lexicon_enum_speed() {
    let provider = provider();
    let page = "Character notes from a novelist's workbook.\n\nCharacter: Corin Ashdown, ferryman. He rows travellers across the reservoir that drowned his village.\n\
        Personality: \"Corin Ashdown is patient with the river and impatient with people.\"\nIn brief: {\"core_traits\": [\"patient\", \"superstitious\", \"wry\", \"guarded\"]}\n\n\
        Character: Bruno Kessler, baker. A retired circus strongman who now runs a small bakery.\n\
        Personality: \"Bruno Kessler is gentle with dough and gruff with people. He never talks about the ring, and he keeps the iron bar he last bent under the counter.\"\nIn brief:";
    let words = lorekeeper::identity::traits::LEXICON;
    for (label, items) in [
        ("free strings", serde_json::json!({"type": "string", "minLength": 3, "maxLength": 80})),
        ("lexicon enum", serde_json::json!({"type": "string", "enum": words})),
    ] {
        let schema = serde_json::json!({"type": "object", "properties": {"core_traits": {"type": "array", "items": items, "minItems": 4, "maxItems": 6}},
            "required": ["core_traits"]});
        let (mut tokens, mut cpu_ms, mut wall_ms, mut rejections, mut wide, mut full) = (0u32, 0.0, 0.0, 0, 0, 0);
        for seed in 1..=12 {
            let mut req = request(vec![ChatMessage::system(page)], 120, seed);
            req.sampler.presence_penalty = Some(0.6);
            req.sampler.frequency_penalty = Some(0.6);
            req.response_format = ResponseFormat::JsonSchema { name: "brief".into(), schema: schema.clone() };
            let cancel = CancelToken::new();
            let (completion, timings) =
                provider.complete_with_timings(&req, CallContext::new(&cancel), CallOptions::default()).expect("generation succeeds");
            eprintln!("{label} seed {seed}: {}", completion.text.split_whitespace().collect::<Vec<_>>().join(" "));
            tokens += timings.completion_tokens;
            cpu_ms += timings.generation_cpu_ms.unwrap_or(timings.generation_ms);
            wall_ms += timings.generation_ms;
            rejections += timings.grammar_rejections;
            wide += timings.grammar_wide_scans;
            full += timings.grammar_full_scans;
        }
        eprintln!(
            "{label}: {tokens} tokens, {:.1} tok/CPU-s, {:.1} tok/s wall, {rejections} rejections, {wide} wide scans, {full} full scans",
            tokens as f64 / (cpu_ms / 1000.0),
            tokens as f64 / (wall_ms / 1000.0)
        );
    }
}
