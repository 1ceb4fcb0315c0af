//! The model thread: it loads one GGUF file, owns the llama.cpp context, and serves
//! generation jobs one at a time from a queue.
//!
//! llama.cpp contexts are not safe to share, and a 2-core machine gains nothing from
//! two generations at once (each would get half the compute). A single owner thread
//! with a FIFO queue gives parallel agents whole, non-interleaved answers, in order,
//! and makes "one model in memory" true by construction.

use super::grammar;
use super::prompt::{StopScanner, TrimmedStream, Utf8Assembler, render_transcript, transcript_stops};
use super::decode::TokenChooser;
use super::sampler::Sampler;
use crate::llm::{CancelToken, ChatMessage, ChatRequest, Completion, LlmError, Role, Usage};
use crossbeam_channel::{Receiver, Sender};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Reply length when the request sets no `max_tokens`.
pub const DEFAULT_MAX_TOKENS: u32 = 1024;
/// Tokens evaluated per `decode` call while reading the prompt.
const PROMPT_BATCH: u32 = 512;

/// What the model thread needs to start.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkerConfig {
    pub path: PathBuf,
    pub n_ctx: u32,
    pub threads: u32,
}

/// Facts about the loaded model, for the UI and for `describe`.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// `general.name` from the GGUF metadata, else the file name.
    pub name: String,
    pub path: PathBuf,
    pub parameters: u64,
    pub size_bytes: u64,
    /// Context actually allocated (the profile's limit, capped by the training context).
    pub n_ctx: u32,
    pub n_ctx_train: u32,
    pub threads: u32,
    /// Whether prompts go through the model's own chat template (else the transcript).
    pub chat_template: bool,
    pub load_ms: u64,
    /// The CPU backend variant llama.cpp chose for this processor (the loaded
    /// `libggml-cpu-<level>.so`), where the platform tells.
    pub cpu_backend: Option<PathBuf>,
}

/// Where the time of one call went.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Timings {
    /// Waiting in the queue behind other calls.
    pub queued_ms: f64,
    /// Evaluating the prompt.
    pub prompt_ms: f64,
    /// From the start of the job to the first visible token.
    pub first_token_ms: Option<f64>,
    /// From the end of the prompt to the last token.
    pub generation_ms: f64,
    pub prompt_tokens: u32,
    /// Leading prompt tokens whose cached state was kept from the previous call.
    pub prompt_tokens_reused: u32,
    pub completion_tokens: u32,
    /// Sampled tokens the grammar turned down; how often no candidate in the window
    /// was allowed so the wide window was checked; how often not even that held one,
    /// so the whole vocabulary had to be.
    pub grammar_rejections: u32,
    pub grammar_wide_scans: u32,
    pub grammar_full_scans: u32,
    /// The model thread's CPU time in the prompt and in generation (Linux). On a busy
    /// machine wall time measures the scheduler as much as the engine; CPU time does not.
    pub prompt_cpu_ms: Option<f64>,
    pub generation_cpu_ms: Option<f64>,
}

impl Timings {
    /// Speed of evaluating the part of the prompt that was not cached.
    pub fn prompt_tokens_per_sec(&self) -> f64 {
        per_sec(self.prompt_tokens - self.prompt_tokens_reused, self.prompt_ms)
    }
    pub fn generation_tokens_per_sec(&self) -> f64 {
        per_sec(self.completion_tokens, self.generation_ms)
    }
    /// [`Self::prompt_tokens_per_sec`] per second of the model thread's CPU time.
    pub fn prompt_tokens_per_cpu_sec(&self) -> Option<f64> {
        self.prompt_cpu_ms.map(|cpu| per_sec(self.prompt_tokens - self.prompt_tokens_reused, cpu))
    }
    pub fn generation_tokens_per_cpu_sec(&self) -> Option<f64> {
        self.generation_cpu_ms.map(|cpu| per_sec(self.completion_tokens, cpu))
    }
}

/// CPU time the calling thread has run, in ms (the scheduler's nanosecond count; Linux).
fn thread_cpu_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = stat.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e6)
}

fn per_sec(tokens: u32, ms: f64) -> f64 {
    if ms > 0.0 { tokens as f64 * 1000.0 / ms } else { 0.0 }
}

/// One queued call.
pub struct Job {
    pub request: ChatRequest,
    /// Name reported in the completion.
    pub model_name: String,
    pub cancel: CancelToken,
    pub total_timeout: Duration,
    pub queued_at: Instant,
    pub replies: Sender<Reply>,
    pub options: CallOptions,
    /// Which call this is (unique in the process), and what it is for: while it runs,
    /// [`Busy`] says so to the calls queued behind it.
    pub id: u64,
    pub label: Option<String>,
}

/// The job the model thread is answering now (its id and label), for calls waiting.
pub type Busy = std::sync::Arc<std::sync::Mutex<Option<(u64, Option<String>)>>>;

/// Knobs for measuring rather than for use: the bench must time the same work every run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallOptions {
    /// Generate exactly `max_tokens`: no stop strings, no end of turn, no loop check.
    pub exact_length: bool,
    /// Evaluate the whole prompt even if the cache holds a prefix of it.
    pub cold_cache: bool,
}

/// What the model thread sends back for a job: streamed text, then one result.
pub enum Reply {
    Token(String),
    Done(Result<(Completion, Timings), LlmError>),
}

/// llama.cpp's global state may be initialised once per process; every model thread
/// shares it. Also returns the CPU backend variant that was loaded.
fn backend() -> Result<(&'static LlamaBackend, Option<&'static Path>), LlmError> {
    static BACKEND: OnceLock<Result<(LlamaBackend, Option<PathBuf>), String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            // llama.cpp prints ~250 lines per model load, at its INFO level, to stderr.
            // Keep them out of the terminal always, and out of our log file unless
            // debug logging is on (`LOREKEEPER_LOG=debug`); our own errors say what
            // failed either way.
            let verbose = tracing::enabled!(tracing::Level::DEBUG);
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default().with_logs_enabled(verbose));
            let cpu = load_cpu_backend()?;
            Ok((LlamaBackend::init().map_err(|e| e.to_string())?, cpu))
        })
        .as_ref()
        .map(|(backend, cpu)| (backend, cpu.as_deref()))
        .map_err(|e| LlmError::Config(format!("cannot initialise llama.cpp: {e}")))
}

/// The folders that may hold the CPU backends, in order: beside the executable (where
/// build.rs puts them, and where a copied `target/release/` folder carries them), then the
/// folder llama-cpp-sys-2 built them in.
fn backend_dirs() -> Vec<PathBuf> {
    let beside = std::env::current_exe().ok().and_then(|exe| exe.parent().map(Path::to_path_buf));
    let built = option_env!("LOREKEEPER_GGML_BACKENDS_DIR").map(PathBuf::from);
    beside.into_iter().chain(built).collect()
}

/// Whether `dir` holds at least one CPU backend variant (`libggml-cpu-<level>.so`).
fn holds_cpu_backend(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| e.file_name().to_str().is_some_and(|n| n.starts_with("libggml-cpu-") && n.ends_with(".so")))
    })
}

/// llama.cpp is built with one CPU backend per x86-64 level (see build.rs). ggml loads
/// every variant in the folder, asks each how well it fits this CPU, and keeps the best:
/// AVX-512 VNNI here, plain SSE2 on an old machine, from the same binary. It must happen
/// before the first model is loaded. Returns the variant's file where the platform tells.
fn load_cpu_backend() -> Result<Option<PathBuf>, String> {
    let dirs = backend_dirs();
    let dir = dirs.iter().find(|d| holds_cpu_backend(d)).ok_or_else(|| {
        let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        format!("no llama.cpp CPU backend (libggml-cpu-*.so) in {}; keep the libraries built beside the binary", searched.join(" or "))
    })?;
    if dir.to_str().is_none() {
        return Err(format!("the backend folder {} is not valid UTF-8", dir.display()));
    }
    llama_cpp_2::llama_backend::load_backends_from_path(dir);
    let devices = llama_cpp_2::list_llama_ggml_backend_devices();
    let Some(cpu) = devices.iter().find(|d| d.backend.eq_ignore_ascii_case("cpu")) else {
        return Err(format!("no CPU backend in {} fits this processor", dir.display()));
    };
    let variant = loaded_cpu_variant();
    tracing::info!(cpu = %cpu.description, variant = ?variant, "llama.cpp CPU backend loaded");
    Ok(variant)
}

/// The CPU variant in memory: ggml opens every variant to score it and keeps only the
/// best one mapped, so the process's memory map names it (Linux; `None` elsewhere).
fn loaded_cpu_variant() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().filter_map(|line| line.split_whitespace().nth(5)).map(PathBuf::from).find(|path| {
        path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("libggml-cpu-") && n.ends_with(".so"))
    })
}

/// Starts the model thread and waits until the model is loaded (or failed to).
pub fn spawn(config: WorkerConfig) -> Result<(Sender<Job>, ModelInfo, Busy), LlmError> {
    if !config.path.is_file() {
        return Err(LlmError::Config(format!(
            "the local model file {} does not exist (run `bash .ci/setup.sh` to install the default model)",
            config.path.display()
        )));
    }
    // Bounded: a flood of agents waits to enqueue instead of growing memory without end.
    let (jobs_tx, jobs_rx) = crossbeam_channel::bounded::<Job>(256);
    let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
    let busy = Busy::default();
    let running = busy.clone();
    std::thread::Builder::new()
        .name("local-model".into())
        .spawn(move || run(config, jobs_rx, ready_tx, running))
        .map_err(|e| LlmError::Config(format!("cannot start the local model thread: {e}")))?;
    match ready_rx.recv() {
        Ok(Ok(info)) => Ok((jobs_tx, info, busy)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(LlmError::Config("the local model thread stopped while loading the model".into())),
    }
}

fn run(config: WorkerConfig, jobs: Receiver<Job>, ready: Sender<Result<ModelInfo, LlmError>>, busy: Busy) {
    let started = Instant::now();
    let loaded = (|| {
        let (backend, cpu_backend) = backend()?;
        let model = LlamaModel::load_from_file(backend, &config.path, &LlamaModelParams::default())
            .map_err(|e| LlmError::Config(format!("cannot load the model {}: {e}", config.path.display())))?;
        let n_ctx_train = model.n_ctx_train();
        let n_ctx = config.n_ctx.min(n_ctx_train.max(256)).max(256);
        let threads = config.threads.max(1) as i32;
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(n_ctx))
            .with_n_batch(PROMPT_BATCH)
            .with_n_ubatch(PROMPT_BATCH)
            .with_n_threads(threads)
            .with_n_threads_batch(threads)
            // Keep the whole context for sliding-window layers too (Gemma 3 uses them):
            // without it a cached prompt prefix cannot be rolled back to and reused.
            .with_swa_full(true);
        Ok::<_, LlmError>((backend, model, params, n_ctx, n_ctx_train, cpu_backend))
    })();
    let (backend, model, params, n_ctx, n_ctx_train, cpu_backend) = match loaded {
        Ok(parts) => parts,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let mut ctx = match model.new_context(backend, params) {
        Ok(ctx) => ctx,
        Err(e) => {
            let _ = ready.send(Err(LlmError::Config(format!("cannot create a llama.cpp context of {n_ctx} tokens: {e}"))));
            return;
        }
    };
    let template = usable_chat_template(&model);
    let name = model
        .meta_val_str("general.name")
        .ok()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| config.path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default());
    let info = ModelInfo {
        name,
        path: config.path.clone(),
        parameters: model.n_params(),
        size_bytes: model.size(),
        n_ctx,
        n_ctx_train,
        threads: config.threads.max(1),
        chat_template: template.is_some(),
        load_ms: started.elapsed().as_millis() as u64,
        cpu_backend: cpu_backend.map(Path::to_path_buf),
    };
    tracing::info!(model = %info.name, threads = info.threads, n_ctx, chat_template = info.chat_template, load_ms = info.load_ms, "local model loaded");
    if ready.send(Ok(info)).is_err() {
        return;
    }
    // The tokens whose state the context holds, at positions 0.., for prefix reuse.
    let mut cached: Vec<LlamaToken> = Vec::new();
    // Ends when every provider holding the queue has been dropped.
    for job in jobs {
        let queued_ms = job.queued_at.elapsed().as_secs_f64() * 1000.0;
        *busy.lock().unwrap_or_else(|p| p.into_inner()) = Some((job.id, job.label.clone()));
        let result = if job.cancel.is_cancelled() {
            Err(LlmError::Cancelled)
        } else {
            let replies = job.replies.clone();
            let emit = |text: &str| {
                let _ = replies.send(Reply::Token(text.to_string()));
            };
            // A panic inside one job (a bug, or a llama.cpp wrapper assertion) must not
            // take the model away from every other agent.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                generate(&model, &mut ctx, &mut cached, template.as_ref(), &job, &emit)
            }))
            .unwrap_or_else(|_| Err(LlmError::Malformed("the local model thread hit an internal error".into())))
            .inspect_err(|_| {
                // Whatever the failure left in the cache is not worth trusting.
                ctx.clear_kv_cache();
                cached.clear();
            })
            .map(|(completion, mut timings)| {
                timings.queued_ms = queued_ms;
                (completion, timings)
            })
        };
        *busy.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let _ = job.replies.send(Reply::Done(result));
    }
}

/// The model's own chat template, if llama.cpp can apply it. Base models have none;
/// some GGUFs carry a Jinja template llama.cpp's built-in engine does not recognise,
/// and those fall back to the transcript too rather than failing every call.
fn usable_chat_template(model: &LlamaModel) -> Option<LlamaChatTemplate> {
    let template = model.chat_template(None).ok()?;
    let probe = [
        LlamaChatMessage::new("system".into(), "s".into()).ok()?,
        LlamaChatMessage::new("user".into(), "u".into()).ok()?,
    ];
    match model.apply_chat_template(&template, &probe, true) {
        Ok(_) => Some(template),
        Err(e) => {
            tracing::warn!("the model's chat template is not supported by llama.cpp ({e}); using the transcript format");
            None
        }
    }
}

fn runtime_error(what: &str, e: impl std::fmt::Display) -> LlmError {
    LlmError::Malformed(format!("the local model failed {what}: {e}"))
}

/// The prompt text for `request`: the model's own chat template when it has one, else a
/// transcript a base model continues; with the stop strings that end the reply. A
/// `reply_prefix` opens the assistant's turn with that text.
fn render_prompt(
    model: &LlamaModel,
    template: Option<&LlamaChatTemplate>,
    request: &ChatRequest,
) -> Result<(String, bool, Vec<String>), LlmError> {
    let prefilled;
    let messages = match &request.reply_prefix {
        Some(prefix) => {
            prefilled = [request.messages.as_slice(), &[ChatMessage::assistant(prefix.clone())]].concat();
            prefilled.as_slice()
        }
        None => request.messages.as_slice(),
    };
    Ok(match template {
        Some(template) => {
            let messages = messages
                .iter()
                .map(|m| {
                    let role = match m.role {
                        Role::System => "system",
                        Role::User => "user",
                        Role::Assistant => "assistant",
                    };
                    LlamaChatMessage::new(role.into(), m.content.clone())
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| LlmError::Config(format!("a message cannot be sent to the local model: {e}")))?;
            let prompt = model
                .apply_chat_template(template, &messages, true)
                .map_err(|e| runtime_error("to apply its chat template", e))?;
            (prompt, true, Vec::new())
        }
        None => (render_transcript(messages), false, transcript_stops()),
    })
}

/// Runs one job to completion on the model thread.
fn generate(
    model: &LlamaModel,
    ctx: &mut LlamaContext<'_>,
    cached: &mut Vec<LlamaToken>,
    template: Option<&LlamaChatTemplate>,
    job: &Job,
    emit: &dyn Fn(&str),
) -> Result<(Completion, Timings), LlmError> {
    let started = Instant::now();
    let cpu_started = thread_cpu_ms();
    let deadline = started + job.total_timeout;
    let request = &job.request;
    let vocab = model.vocab();
    let grammar = grammar::for_format(&request.response_format)?;

    let (prompt, parse_special, mut stops) = render_prompt(model, template, request)?;
    stops.extend(request.sampler.stop.iter().cloned());
    if grammar.is_some() || job.options.exact_length {
        // The grammar decides where JSON ends; a speaker tag inside a string is content.
        stops.clear();
    }

    let prompt_tokens = vocab.tokenize(prompt.as_bytes(), true, parse_special);
    let n_ctx = ctx.n_ctx() as usize;
    if prompt_tokens.is_empty() {
        return Err(LlmError::Config("the prompt for the local model is empty".into()));
    }
    if prompt_tokens.len() + 1 >= n_ctx {
        return Err(LlmError::Config(format!(
            "the prompt has {} tokens but the local model's context holds {n_ctx}; raise max_context_tokens or shorten the prompt",
            prompt_tokens.len()
        )));
    }
    let room = (n_ctx - prompt_tokens.len()) as u32;
    // What finishing a structured reply can cost: the schema's smallest instance.
    let minimal_tokens = grammar.as_ref().map_or(0, |g| vocab.tokenize(g.minimal.as_bytes(), false, false).len() as u32);
    let default_max = DEFAULT_MAX_TOKENS.max(minimal_tokens.saturating_mul(4));
    let max_tokens = request.sampler.max_tokens.unwrap_or(default_max).min(room);

    let (reused, mut batch) = evaluate_prompt(ctx, cached, &prompt_tokens, job, deadline)?;
    let prompt_done = Instant::now();
    let cpu_prompt_done = thread_cpu_ms();
    let mut timings = Timings {
        prompt_ms: ms(prompt_done - started),
        prompt_cpu_ms: cpu_prompt_done.zip(cpu_started).map(|(done, start)| done - start),
        prompt_tokens: prompt_tokens.len() as u32,
        prompt_tokens_reused: reused as u32,
        ..Default::default()
    };

    let grammar_sampler = match &grammar {
        Some(g) => Some(
            LlamaSampler::grammar(model, &g.gbnf, g.root)
                .map_err(|e| LlmError::Config(format!("llama.cpp rejected the grammar built from the schema: {e}")))?,
        ),
        None => None,
    };
    let mut sampler = Sampler::new(&request.sampler);
    sampler.avoid_copying(request.sampler.avoid.iter().map(|text| vocab.tokenize(text.as_bytes(), false, false).iter().map(|t| t.0).collect()));
    let mut chooser = TokenChooser::new(model, sampler, grammar_sampler);
    chooser.avoid_copying_words(&request.sampler.avoid);
    // The end of the budget is kept for closing a structured reply (see `decode`): a
    // reply cut off mid-object is worth nothing. The reserve is what the schema's
    // smallest instance costs with a margin, and at least a quarter of the budget.
    let reserve = (minimal_tokens * 3 / 2 + 16).max(max_tokens / 4).min(max_tokens);
    let closing_from = max_tokens - reserve;
    // Invented speakers only end a transcript reply, and never JSON (see `stops` above).
    let mut scanner = StopScanner::new(stops);
    if template.is_none() && grammar.is_none() && !job.options.exact_length {
        scanner = scanner.with_speaker_tags();
    }
    let mut utf8 = Utf8Assembler::default();
    let mut trimmed = TrimmedStream::default();
    let stream = request.stream;
    let mut send = |text: &str, timings: &mut Timings| {
        let out = trimmed.push(text);
        if !out.is_empty() {
            timings.first_token_ms.get_or_insert_with(|| ms(started.elapsed()));
            if stream {
                emit(&out);
            }
        }
    };

    let mut logits_index = batch.n_tokens() - 1;
    let mut pos = prompt_tokens.len() as i32;
    let mut generated: u32 = 0;
    let finish_reason = loop {
        check_continue(&job.cancel, deadline, job.total_timeout)?;
        if generated >= max_tokens {
            break "length";
        }
        if grammar.is_some() && generated == closing_from {
            chooser.start_closing();
        }
        let token = chooser.choose(ctx, logits_index, &vocab)?;
        if vocab.is_eog(token) && !job.options.exact_length {
            break "stop";
        }
        generated += 1;
        let piece = vocab.token_to_piece(token, false, None);
        let text = utf8.push(&piece);
        chooser.accept(token, &text)?;
        let looping = chooser.is_looping();
        let released = scanner.push(&text);
        send(&released, &mut timings);
        if scanner.stopped() {
            break "stop";
        }
        if looping && !job.options.exact_length {
            // A structured reply is wrapped up; free text simply ends here.
            if grammar.is_none() {
                break "stop";
            }
            chooser.start_closing();
        }
        if grammar.is_some() && text.contains(['}', ']']) && json_complete(scanner.text()) {
            break "stop";
        }
        batch.clear();
        batch.add(token, pos, &[0], true).map_err(|e| runtime_error("to batch a token", e))?;
        ctx.decode(&mut batch).map_err(|e| runtime_error("to evaluate a token", e))?;
        cached.push(token);
        pos += 1;
        logits_index = 0;
    };
    if !scanner.stopped() {
        let tail = utf8.finish();
        let mut released = scanner.push(&tail);
        released.push_str(&scanner.finish());
        send(&released, &mut timings);
    }
    timings.generation_ms = ms(prompt_done.elapsed());
    timings.generation_cpu_ms = thread_cpu_ms().zip(cpu_prompt_done).map(|(done, start)| done - start);
    timings.grammar_rejections = chooser.rejections;
    timings.grammar_wide_scans = chooser.wide_scans;
    timings.grammar_full_scans = chooser.full_scans;
    timings.completion_tokens = generated;

    let completion = Completion {
        text: scanner.text().trim().to_string(),
        usage: Usage { prompt_tokens: timings.prompt_tokens, completion_tokens: generated, reported: true },
        finish_reason: Some(finish_reason.into()),
        model: job.model_name.clone(),
        from_cache: false,
        elapsed_ms: started.elapsed().as_millis() as u64,
    };
    Ok((completion, timings))
}

/// Evaluate the prompt, reusing the cached state of the longest prefix it shares with
/// the last call (a re-ask repeats the whole conversation; a chat repeats its history).
/// Returns how many tokens were reused, and the batch whose last position holds the
/// logits that start the reply.
fn evaluate_prompt(
    ctx: &mut LlamaContext<'_>,
    cached: &mut Vec<LlamaToken>,
    prompt_tokens: &[LlamaToken],
    job: &Job,
    deadline: Instant,
) -> Result<(usize, LlamaBatch<'static>), LlmError> {
    // The last prompt token is always evaluated: its logits start the reply.
    let keep = if job.options.cold_cache { 0 } else { common_prefix(cached, prompt_tokens).min(prompt_tokens.len() - 1) };
    let reused = if keep > 0 && ctx.kv_cache_seq_rm(0, Some(keep as u32), None).is_ok() {
        keep
    } else {
        ctx.clear_kv_cache();
        0
    };
    cached.truncate(reused);

    // Evaluate the prompt in batches; only the last position needs logits.
    let mut batch = LlamaBatch::new(PROMPT_BATCH as usize, 1);
    let last = prompt_tokens.len() - 1;
    for chunk_start in (reused..prompt_tokens.len()).step_by(PROMPT_BATCH as usize) {
        check_continue(&job.cancel, deadline, job.total_timeout)?;
        let chunk = &prompt_tokens[chunk_start..(chunk_start + PROMPT_BATCH as usize).min(prompt_tokens.len())];
        batch.clear();
        for (i, token) in chunk.iter().enumerate() {
            let pos = chunk_start + i;
            batch.add(*token, pos as i32, &[0], pos == last).map_err(|e| runtime_error("to batch the prompt", e))?;
        }
        ctx.decode(&mut batch).map_err(|e| runtime_error("to evaluate the prompt", e))?;
        cached.extend_from_slice(chunk);
    }
    Ok((reused, batch))
}

fn common_prefix(a: &[LlamaToken], b: &[LlamaToken]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn check_continue(cancel: &CancelToken, deadline: Instant, total: Duration) -> Result<(), LlmError> {
    if cancel.is_cancelled() {
        return Err(LlmError::Cancelled);
    }
    if Instant::now() >= deadline {
        return Err(LlmError::Timeout(total));
    }
    Ok(())
}

/// Whether the text so far is one whole JSON value: grammar-constrained generation can
/// stop there instead of sampling whitespace until the model happens to pick EOS.
fn json_complete(text: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(text.trim()).is_ok()
}
