//! The embedded local provider: a GGUF model run in-process through llama.cpp, so the
//! workbench works offline with no server and no key.
//!
//! Every [`LocalProvider`] built for the same model file and settings shares one model
//! thread (see [`worker`]): the weights are loaded once, and calls from parallel agents
//! queue up and are answered one after the other. Structured requests are decoded
//! under a grammar built from their JSON Schema ([`grammar`]), so even the tiny default
//! model returns JSON that parses and matches the schema's shape.

pub mod bench;
pub mod decode;
pub mod grammar;
pub mod prompt;
pub mod sampler;
pub mod worker;

pub use worker::{CallOptions, ModelInfo, Timings};

use super::{CallContext, ChatRequest, Completion, LlmError, Provider, ProviderKind, ProviderProfile};
use crossbeam_channel::{RecvTimeoutError, Sender};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};
use worker::{Job, Reply, WorkerConfig};

/// The model `.ci/setup.sh` installs under `models/`: Gemma 3 270M, Q4_K_M.
pub const DEFAULT_MODEL_FILE: &str = "gemma-3-270m-q4_k_m.gguf";

/// The default model's path (it may not exist: the set-up script installs it).
pub fn default_model_path() -> PathBuf {
    crate::paths::models_dir().join(DEFAULT_MODEL_FILE)
}

/// Threads to compute with when the profile does not say: half the cores, at least one.
///
/// Measured with the default model on a 2-core machine: 2 threads gave ~51 tok/s on an
/// idle machine but fell to 3–8 tok/s as soon as another process used the second core
/// (llama.cpp's threads wait on each other at every layer), while 1 thread held ~29.
/// The workbench always has other work running (UI, embeddings, other agents), so it
/// leaves half the machine to them.
pub fn default_threads() -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    (cores / 2).clamp(1, 8)
}

/// The process-wide model threads, by what they were started with. Weak so that a
/// model is unloaded once no provider uses it any more.
fn workers() -> &'static Mutex<HashMap<WorkerConfig, Weak<SharedModel>>> {
    static WORKERS: OnceLock<Mutex<HashMap<WorkerConfig, Weak<SharedModel>>>> = OnceLock::new();
    WORKERS.get_or_init(Default::default)
}

/// A running model thread; dropping the last handle closes its queue and stops it.
struct SharedModel {
    jobs: Sender<Job>,
    info: ModelInfo,
    /// The job being answered now, for the calls queued behind it.
    busy: worker::Busy,
}

/// What the model is busy with, as a waiting call is told: the holder's label, else
/// "another call".
fn holder(label: Option<&str>) -> String {
    label.filter(|l| !l.trim().is_empty()).unwrap_or("another call").to_string()
}

/// The local provider. Cheap to clone; clones and every provider built for the same
/// model and settings share one loaded model.
#[derive(Clone)]
pub struct LocalProvider {
    model: Arc<SharedModel>,
    /// The name completions report: the profile's model, else the GGUF's own name.
    model_name: String,
    total_timeout: Duration,
}

impl std::fmt::Debug for LocalProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalProvider").field("info", &self.model.info).finish()
    }
}

impl LocalProvider {
    /// Loads (or joins the already loaded) model a `local` profile names. `path` is the
    /// GGUF file (relative paths are also tried under the models folder; none means
    /// the default model), `threads` the CPU threads, `max_context_tokens` the context
    /// to allocate, `timeouts.total_secs` the limit for one generation.
    pub fn from_profile(profile: &ProviderProfile) -> Result<Self, LlmError> {
        if profile.kind != ProviderKind::Local {
            return Err(LlmError::Config(format!(
                "profile {:?} is of kind {}, not local",
                profile.name,
                profile.kind.label()
            )));
        }
        let path = resolve_model_path(profile.path.as_deref());
        let config = WorkerConfig {
            path: std::fs::canonicalize(&path).unwrap_or(path),
            n_ctx: profile.max_context_tokens,
            threads: profile.threads.unwrap_or_else(default_threads).max(1),
        };
        let model = shared_model(config)?;
        let model_name = if profile.model.trim().is_empty() { model.info.name.clone() } else { profile.model.clone() };
        let total_timeout = Duration::from_secs_f64(profile.timeouts.total_secs.max(1.0));
        Ok(Self { model, model_name, total_timeout })
    }

    /// What is loaded: name, size, context, threads, prompt style.
    pub fn info(&self) -> &ModelInfo {
        &self.model.info
    }

    /// Whether both providers run on the same loaded model (and so share its queue).
    pub fn shares_model_with(&self, other: &LocalProvider) -> bool {
        Arc::ptr_eq(&self.model, &other.model)
    }

    /// [`Provider::complete`] that also reports where the time went, with the bench's
    /// knobs (see [`CallOptions`]).
    pub fn complete_with_timings(
        &self,
        request: &ChatRequest,
        ctx: CallContext<'_>,
        options: CallOptions,
    ) -> Result<(Completion, Timings), LlmError> {
        if ctx.cancel.is_cancelled() {
            return Err(LlmError::Cancelled);
        }
        static NEXT_JOB: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let id = NEXT_JOB.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (replies_tx, replies) = crossbeam_channel::unbounded();
        let job = Job {
            id,
            label: ctx.label.map(str::to_string),
            request: request.clone(),
            model_name: self.model_name.clone(),
            cancel: ctx.cancel.clone(),
            total_timeout: self.total_timeout,
            queued_at: Instant::now(),
            replies: replies_tx,
            options,
        };
        self.model
            .jobs
            .send(job)
            .map_err(|_| LlmError::Config("the local model thread has stopped".into()))?;
        // Until the model thread takes this job, the caller is told what holds the model
        // (once per holder): a queue wait of minutes behind an identity run is otherwise
        // a spinner that says nothing. Once it has the model, it is told the wait is over.
        let mut told: Option<u64> = None;
        let mut started = false;
        loop {
            // Poll so that a call still waiting in the queue returns as soon as it is
            // cancelled; the model thread skips cancelled jobs when it reaches them.
            match replies.recv_timeout(Duration::from_millis(50)) {
                Ok(Reply::Token(text)) => {
                    // A token is the model at work on this call: any wait told of is over.
                    if !started {
                        started = true;
                        if told.is_some() {
                            ctx.waited();
                        }
                    }
                    ctx.emit(&text)
                }
                Ok(Reply::Done(result)) => return result,
                Err(RecvTimeoutError::Timeout) => {
                    if ctx.cancel.is_cancelled() {
                        return Err(LlmError::Cancelled);
                    }
                    if !started && ctx.on_wait.is_some() {
                        let busy = self.model.busy.lock().unwrap_or_else(|p| p.into_inner()).clone();
                        match busy {
                            Some((holder_id, _)) if holder_id == id => {
                                started = true;
                                if told.is_some() {
                                    ctx.waited();
                                }
                            }
                            Some((holder_id, label)) if told != Some(holder_id) => {
                                told = Some(holder_id);
                                ctx.waiting(&holder(label.as_deref()));
                            }
                            _ => {}
                        }
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(LlmError::Config("the local model thread stopped during the call".into()));
                }
            }
        }
    }
}

impl Provider for LocalProvider {
    fn describe(&self) -> String {
        let info = &self.model.info;
        format!(
            "local ({}, {} parameters, {} on disk, {} thread{}, context {}{})",
            info.name,
            human_count(info.parameters),
            human_bytes(info.size_bytes),
            info.threads,
            if info.threads == 1 { "" } else { "s" },
            info.n_ctx,
            if info.chat_template { "" } else { ", base model: transcript prompts" }
        )
    }

    fn complete(&self, request: &ChatRequest, ctx: CallContext<'_>) -> Result<Completion, LlmError> {
        self.complete_with_timings(request, ctx, CallOptions::default()).map(|(completion, _)| completion)
    }
}

/// Where a profile's model file is looked for (a relative path may live under `models/`).
pub fn resolve_model_path(path: Option<&Path>) -> PathBuf {
    match path {
        None => default_model_path(),
        Some(p) if p.is_relative() && !p.exists() => {
            let under_models = crate::paths::models_dir().join(p);
            if under_models.exists() { under_models } else { p.to_path_buf() }
        }
        Some(p) => p.to_path_buf(),
    }
}

fn shared_model(config: WorkerConfig) -> Result<Arc<SharedModel>, LlmError> {
    // The lock is held while a model loads so two agents starting together load it once.
    let mut workers = workers().lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    workers.retain(|_, weak| weak.strong_count() > 0);
    if let Some(model) = workers.get(&config).and_then(Weak::upgrade) {
        return Ok(model);
    }
    let (jobs, info, busy) = worker::spawn(config.clone())?;
    let model = Arc::new(SharedModel { jobs, info, busy });
    workers.insert(config, Arc::downgrade(&model));
    Ok(model)
}

/// `268M`, `1.2B`: how model sizes are usually spoken of.
pub fn human_count(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.1}B", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{}M", (n as f64 / 1e6).round()),
        n => format!("{n}"),
    }
}

pub fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n => format!("{} MiB", (n as f64 / (1u64 << 20) as f64).round()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_threads_leave_half_the_machine() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        let t = default_threads();
        assert!(t >= 1 && t <= cores.max(1) && t <= 8, "{t} threads on {cores} cores");
    }

    #[test]
    fn sizes_read_the_way_people_say_them() {
        assert_eq!(human_count(268_098_176), "268M");
        assert_eq!(human_count(1_240_000_000), "1.2B");
        assert_eq!(human_bytes(253_113_024), "241 MiB");
        assert_eq!(human_bytes(5 << 30), "5.0 GiB");
    }

    #[test]
    fn a_missing_model_file_or_a_wrong_kind_is_a_clear_config_error() {
        let profile = ProviderProfile {
            name: "local".into(),
            kind: ProviderKind::Local,
            path: Some("/nonexistent/model.gguf".into()),
            ..Default::default()
        };
        match LocalProvider::from_profile(&profile) {
            Err(LlmError::Config(message)) => assert!(message.contains("setup.sh"), "{message}"),
            other => panic!("expected a config error, got {other:?}"),
        }
        let wrong = ProviderProfile { kind: ProviderKind::Openai, ..profile };
        assert!(matches!(LocalProvider::from_profile(&wrong), Err(LlmError::Config(_))));
    }
}
