//! `lorekeeper bench local`: how fast the embedded model is on this machine.
//!
//! Measures, per thread count: prompt evaluation and generation speed (tokens per
//! second), time to first token, and the process's peak resident memory; plus the
//! same generation under a JSON Schema grammar, since structured agents pay for the
//! grammar check on every token. Numbers are medians over the runs.

use super::{CallOptions, LocalProvider, Timings};
use crate::llm::{CallContext, CancelToken, ChatMessage, ChatRequest, LlmError, ProviderKind, ProviderProfile, ResponseFormat, SamplerSettings};
use serde::Serialize;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// GGUF file; the default model when `None`.
    pub model: Option<PathBuf>,
    pub threads: Vec<u32>,
    pub runs: u32,
    pub max_tokens: u32,
    /// Print every reply to stderr, to see what was measured.
    pub show: bool,
}

/// One thread count's results.
#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    pub model: String,
    pub threads: u32,
    pub load_ms: u64,
    /// The llama.cpp CPU backend variant in use (`zen4`, `haswell`, `x64`, …), and its file.
    pub cpu_backend: Option<String>,
    pub cpu_backend_path: Option<PathBuf>,
    pub prompt_tokens: u32,
    pub prompt_tokens_per_sec: f64,
    pub generated_tokens: u32,
    pub generation_tokens_per_sec: f64,
    pub first_token_ms: f64,
    pub json_generated_tokens: u32,
    pub json_tokens_per_sec: f64,
    /// The same three speeds per second of the model thread's CPU time (Linux): on a
    /// shared machine these compare engines where wall-clock speeds mostly measure load.
    pub prompt_tokens_per_cpu_sec: Option<f64>,
    pub generation_tokens_per_cpu_sec: Option<f64>,
    pub json_tokens_per_cpu_sec: Option<f64>,
    pub json_grammar_rejections: u32,
    pub json_grammar_wide_scans: u32,
    pub json_grammar_full_scans: u32,
    pub json_valid: bool,
    /// Peak resident set of the whole process so far (VmHWM), in MiB.
    pub peak_rss_mib: f64,
}

/// A story prompt long enough (~300 tokens) to time prompt evaluation. The text runs
/// ignore stops, so each generates exactly `max_tokens` tokens.
fn story_messages() -> Vec<ChatMessage> {
    let setting = "The river city of Vell is built on nine islands joined by rope bridges. \
        Its ferrymen keep a guild older than the city council, and they remember every debt. \
        Mira, the ferryman's daughter, has found a sealed letter in the bilge of her father's boat, \
        addressed to a councillor who drowned eleven years ago. The guild wants the letter; \
        the council wants it burned; Mira wants to know why her father kept it. ";
    vec![
        ChatMessage::system(format!(
            "You are the narrator of a slow, atmospheric story. Write long, vivid paragraphs. {}",
            setting.repeat(3)
        )),
        ChatMessage::user("Describe, in detail, the night Mira opens the letter on the ninth bridge."),
        // A prefill: the model continues a narration rather than answering briefly.
        ChatMessage::assistant("It was past midnight when Mira reached the ninth bridge."),
    ]
}

fn personality_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "core_traits": { "type": "array", "items": { "type": "string" }, "minItems": 4, "maxItems": 6 },
            "fears": { "type": "array", "items": { "type": "string" }, "minItems": 2, "maxItems": 4 },
            "emotional_baseline": { "type": "string" }
        },
        "required": ["core_traits", "fears", "emotional_baseline"]
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The median when every run has a value.
fn median_of(values: Option<Vec<f64>>) -> Option<f64> {
    values.filter(|v| !v.is_empty()).map(median)
}

/// Peak resident memory of this process in MiB (Linux), 0 where unknown.
pub fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// `zen4` from `.../libggml-cpu-zen4.so`.
fn cpu_variant_name(path: &std::path::Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    Some(name.strip_prefix("libggml-cpu-")?.strip_suffix(".so")?.to_string())
}

/// Runs the bench for each thread count, calling `report` as each finishes.
pub fn run(options: &BenchOptions, mut report: impl FnMut(&BenchResult)) -> Result<Vec<BenchResult>, LlmError> {
    let mut results = Vec::new();
    for &threads in &options.threads {
        let profile = ProviderProfile {
            name: "bench".into(),
            kind: ProviderKind::Local,
            path: options.model.clone(),
            threads: Some(threads),
            max_context_tokens: 2048,
            ..Default::default()
        };
        let provider = LocalProvider::from_profile(&profile)?;
        let cancel = CancelToken::new();
        // Every run evaluates its whole prompt: the cache would otherwise serve the
        // repeated prompt from the second run on.
        let call = |request: &ChatRequest, exact_length: bool| {
            provider.complete_with_timings(request, CallContext::new(&cancel), CallOptions { exact_length, cold_cache: true })
        };
        let sampler = |seed| SamplerSettings { max_tokens: Some(options.max_tokens), seed: Some(seed), ..Default::default() };

        // Warm-up: first-touch page faults of the mmapped weights are not inference.
        let mut warm = ChatRequest::new("", vec![ChatMessage::user("Hello")]);
        warm.sampler.max_tokens = Some(4);
        call(&warm, true)?;

        let mut text_runs: Vec<Timings> = Vec::new();
        let mut json_runs: Vec<Timings> = Vec::new();
        let mut json_valid = true;
        let schema = personality_schema();
        let validator = jsonschema::validator_for(&schema)
            .map_err(|e| LlmError::Config(format!("bench schema does not compile: {e}")))?;
        for run in 0..options.runs.max(1) {
            let mut text = ChatRequest::new("", story_messages());
            text.sampler = sampler(u64::from(run) + 1);
            let (completion, timings) = call(&text, true)?;
            if options.show {
                eprintln!("--- text run {run}, {threads} thread(s):\n{}", completion.text);
            }
            text_runs.push(timings);

            let mut json = ChatRequest::new(
                "",
                vec![
                    ChatMessage::system("Describe the personality of Mira, a ferryman's daughter in a river city, as JSON."),
                    ChatMessage::user("Give her core traits, fears and emotional baseline."),
                ],
            );
            // The same budget: the decoder's closing mode finishes the object within it.
            json.sampler = sampler(u64::from(run) + 100);
            json.response_format = ResponseFormat::JsonSchema { name: "personality".into(), schema: schema.clone() };
            let (completion, timings) = call(&json, false)?;
            if options.show {
                eprintln!("--- JSON run {run}, {threads} thread(s), {:?}:\n{}", completion.finish_reason, completion.text);
            }
            json_valid &= serde_json::from_str::<serde_json::Value>(&completion.text).is_ok_and(|v| validator.is_valid(&v));
            json_runs.push(timings);
        }
        let result = BenchResult {
            model: provider.info().name.clone(),
            threads,
            load_ms: provider.info().load_ms,
            cpu_backend: provider.info().cpu_backend.as_deref().and_then(cpu_variant_name),
            cpu_backend_path: provider.info().cpu_backend.clone(),
            prompt_tokens: text_runs[0].prompt_tokens,
            prompt_tokens_per_sec: median(text_runs.iter().map(Timings::prompt_tokens_per_sec).collect()),
            generated_tokens: text_runs.iter().map(|t| t.completion_tokens).sum::<u32>() / text_runs.len() as u32,
            generation_tokens_per_sec: median(text_runs.iter().map(Timings::generation_tokens_per_sec).collect()),
            first_token_ms: median(text_runs.iter().filter_map(|t| t.first_token_ms).collect()),
            json_generated_tokens: json_runs.iter().map(|t| t.completion_tokens).sum::<u32>() / json_runs.len() as u32,
            json_tokens_per_sec: median(json_runs.iter().map(Timings::generation_tokens_per_sec).collect()),
            prompt_tokens_per_cpu_sec: median_of(text_runs.iter().map(Timings::prompt_tokens_per_cpu_sec).collect()),
            generation_tokens_per_cpu_sec: median_of(text_runs.iter().map(Timings::generation_tokens_per_cpu_sec).collect()),
            json_tokens_per_cpu_sec: median_of(json_runs.iter().map(Timings::generation_tokens_per_cpu_sec).collect()),
            json_grammar_rejections: json_runs.iter().map(|t| t.grammar_rejections).sum(),
            json_grammar_wide_scans: json_runs.iter().map(|t| t.grammar_wide_scans).sum(),
            json_grammar_full_scans: json_runs.iter().map(|t| t.grammar_full_scans).sum(),
            json_valid,
            peak_rss_mib: peak_rss_mib(),
        };
        report(&result);
        results.push(result);
    }
    Ok(results)
}
