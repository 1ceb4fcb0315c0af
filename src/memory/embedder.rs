//! Sentence embeddings with ONNX Runtime (`ort`) and `tokenizers`, on one worker thread.
//!
//! Why a dedicated thread: an `ort` session is expensive to create (tens of MB of weights)
//! and runs fastest on whole batches. Every caller sends its texts to the one worker, which
//! drains whatever is queued, sorts it by length (less padding), runs it in batches of
//! `batch_size` and scatters the vectors back. Callers block on a reply channel, so the
//! embedder is used from the engine's blocking workers, never from the UI thread.
//!
//! Why several sessions: a job of many batches (an import) runs `sessions` ONNX sessions
//! side by side, each taking the next batch. On two cores, two one-thread sessions embed
//! about 1.5× faster than one two-thread session (measured, BENCHMARKS.md session 8): a
//! small BERT's operators are too short for the intra-op pool's per-operator barrier to
//! pay, and on a loaded machine that barrier waits for whichever thread was preempted.

use crate::config::{EmbeddingConfig, Pooling};
use crossbeam_channel::{Receiver, Sender, bounded};
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

impl EmbeddingConfig {
    /// A relative `model_dir` names a folder of the models directory, so a config can say
    /// `model_dir = "all-mpnet-base-v2"` wherever the workbench was installed.
    pub fn model_dir(&self) -> PathBuf {
        match &self.model_dir {
            Some(dir) if dir.is_absolute() => dir.clone(),
            Some(dir) => crate::paths::models_dir().join(dir),
            None => crate::paths::models_dir().join("all-MiniLM-L6-v2"),
        }
    }

    pub fn runtime_library(&self) -> PathBuf {
        if let Some(path) = &self.runtime_library {
            return path.clone();
        }
        if let Some(path) = std::env::var_os("ORT_DYLIB_PATH") {
            return PathBuf::from(path);
        }
        crate::paths::models_dir().join("onnxruntime").join("libonnxruntime.so")
    }
}

/// An embedding model `.ci/setup.sh` installs, named by its folder in the models directory.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct EmbeddingModel {
    pub name: &'static str,
    pub dimension: usize,
    /// Its sentence-transformers `max_seq_length`: the longest input it was trained on.
    pub max_length: usize,
    /// What choosing it means, for the model menu and `memory model`.
    pub about: &'static str,
}

/// The models a library can choose between (measured in BENCHMARKS.md, session 10).
pub const MODELS: [EmbeddingModel; 2] = [
    EmbeddingModel {
        name: "all-MiniLM-L6-v2",
        dimension: 384,
        max_length: 256,
        about: "the default: fast imports (~380 turns/s on two cores), recall@10 0.74 on the evaluation conversations",
    },
    EmbeddingModel {
        name: "all-mpnet-base-v2",
        dimension: 768,
        max_length: 384,
        about: "better recall (0.79 on the evaluation conversations), imports ~6x slower, 436 MB",
    },
];

/// The installable model called `name` (any case).
pub fn find_model(name: &str) -> Option<&'static EmbeddingModel> {
    MODELS.iter().find(|m| m.name.eq_ignore_ascii_case(name.trim()))
}

impl EmbeddingConfig {
    /// This config with `model`'s folder, size and pooling; where the runtime is and how
    /// many threads, sessions and texts per batch it uses stay as they are.
    pub fn with_model(&self, model: &EmbeddingModel) -> EmbeddingConfig {
        let defaults = EmbeddingConfig::default();
        EmbeddingConfig {
            model_dir: Some(model.name.into()),
            model_file: defaults.model_file,
            tokenizer_file: defaults.tokenizer_file,
            pooling: Pooling::Mean,
            dimension: model.dimension,
            max_length: model.max_length,
            query_prefix: String::new(),
            document_prefix: String::new(),
            ..self.clone()
        }
    }

    /// The name of the model folder in use (`all-MiniLM-L6-v2`).
    pub fn model_name(&self) -> String {
        self.model_dir().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EmbedError {
    #[error("{what} not found at {path}; install the model files with `bash .ci/setup.sh` (or set memory.embedding paths in the config)")]
    Missing { what: &'static str, path: PathBuf },
    #[error("cannot load ONNX Runtime from {path}: {message}")]
    Runtime { path: PathBuf, message: String },
    #[error("cannot load the embedding model {path}: {message}")]
    Model { path: PathBuf, message: String },
    #[error("cannot load the tokenizer {path}: {message}")]
    Tokenizer { path: PathBuf, message: String },
    #[error("the model gives {found}-dimensional vectors but the config says {expected}")]
    Dimension { expected: usize, found: usize },
    #[error("embedding failed: {0}")]
    Inference(String),
    #[error("the embedder has stopped")]
    Stopped,
}

/// ONNX Runtime allows one environment per process, and the library can be loaded once.
static ORT_ENVIRONMENT: OnceLock<Result<(PathBuf, ort::environment::Environment), String>> = OnceLock::new();

fn environment(library: &Path) -> Result<&'static ort::environment::Environment, EmbedError> {
    if !library.is_file() {
        return Err(EmbedError::Missing { what: "the ONNX Runtime library", path: library.to_path_buf() });
    }
    let loaded = ORT_ENVIRONMENT.get_or_init(|| {
        let builder = ort::init_from(library).map_err(|e| e.to_string())?;
        let env = builder.with_name("lorekeeper").build().map_err(|e| e.to_string())?;
        Ok((library.to_path_buf(), env))
    });
    match loaded {
        Ok((_, env)) => Ok(env),
        Err(message) => Err(EmbedError::Runtime { path: library.to_path_buf(), message: message.clone() }),
    }
}

struct Job {
    texts: Vec<String>,
    reply: Sender<Result<Vec<Vec<f32>>, EmbedError>>,
}

/// Handle to the embedding worker. Cloning shares the worker.
#[derive(Clone)]
pub struct Embedder {
    jobs: Sender<Job>,
    config: EmbeddingConfig,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder").field("model", &self.config.model_dir().join(&self.config.model_file)).finish()
    }
}

impl Embedder {
    /// Load the model on a new worker thread; returns once it is ready (or failed).
    pub fn start(config: &EmbeddingConfig) -> Result<Embedder, EmbedError> {
        let config = config.clone();
        let (jobs_tx, jobs_rx) = bounded::<Job>(1024);
        let (ready_tx, ready_rx) = bounded::<Result<(), EmbedError>>(1);
        let worker_config = config.clone();
        std::thread::Builder::new()
            .name("lorekeeper-embedder".into())
            .spawn(move || match Model::load(&worker_config) {
                Ok(mut model) => {
                    let _ = ready_tx.send(Ok(()));
                    model.serve(jobs_rx);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| EmbedError::Inference(format!("cannot start the embedder thread: {e}")))?;
        ready_rx.recv().map_err(|_| EmbedError::Stopped)??;
        Ok(Embedder { jobs: jobs_tx, config })
    }

    /// The one embedder of the process for `config`: started on first use, restarted
    /// only when the configuration changes.
    pub fn shared(config: &EmbeddingConfig) -> Result<Embedder, EmbedError> {
        static SHARED: Mutex<Option<Embedder>> = Mutex::new(None);
        let mut slot = SHARED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = slot.as_ref().filter(|e| e.config == *config) {
            return Ok(existing.clone());
        }
        let started = Embedder::start(config)?;
        *slot = Some(started.clone());
        Ok(started)
    }

    pub fn config(&self) -> &EmbeddingConfig {
        &self.config
    }

    pub fn dimension(&self) -> usize {
        self.config.dimension
    }

    /// Embed texts as they are (no prefix). Vectors are L2-normalised.
    pub fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let (reply, answer) = bounded(1);
        self.jobs.send(Job { texts, reply }).map_err(|_| EmbedError::Stopped)?;
        answer.recv().map_err(|_| EmbedError::Stopped)?
    }

    /// Embed stored documents (with the document prefix).
    pub fn embed_documents(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let prefix = &self.config.document_prefix;
        self.embed(texts.iter().map(|t| format!("{prefix}{t}")).collect())
    }

    /// Embed one search query (with the query prefix).
    pub fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let mut out = self.embed(vec![format!("{}{text}", self.config.query_prefix)])?;
        out.pop().ok_or_else(|| EmbedError::Inference("no vector returned".into()))
    }
}

/// The worker's state: tokenizer and sessions (all of the same model).
struct Model {
    tokenizer: Tokenizer,
    sessions: Vec<ort::session::Session>,
    input_names: Vec<String>,
    config: EmbeddingConfig,
}

impl Model {
    fn load(config: &EmbeddingConfig) -> Result<Model, EmbedError> {
        let dir = config.model_dir();
        let model_path = dir.join(&config.model_file);
        let tokenizer_path = dir.join(&config.tokenizer_file);
        if !model_path.is_file() {
            return Err(EmbedError::Missing { what: "the embedding model", path: model_path });
        }
        if !tokenizer_path.is_file() {
            return Err(EmbedError::Missing { what: "the tokenizer", path: tokenizer_path });
        }
        let env = environment(&config.runtime_library())?;
        let mut tokenizer = Tokenizer::from_file(&tokenizer_path)
            .map_err(|e| EmbedError::Tokenizer { path: tokenizer_path.clone(), message: e.to_string() })?;
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: config.max_length.max(8), ..Default::default() }))
            .map_err(|e| EmbedError::Tokenizer { path: tokenizer_path.clone(), message: e.to_string() })?;
        let pad_id = tokenizer.get_padding().map(|p| p.pad_id).unwrap_or(0);
        let pad_token = tokenizer.get_padding().map(|p| p.pad_token.clone()).unwrap_or_else(|| "[PAD]".into());
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            pad_id,
            pad_token,
            ..Default::default()
        }));
        let model_err = |e: ort::Error| EmbedError::Model { path: model_path.clone(), message: e.to_string() };
        let mut sessions = Vec::new();
        for _ in 0..config.sessions.max(1) {
            let session = ort::session::Session::builder(env)
                .map_err(model_err)?
                .with_optimization_level(ort::session::builder::GraphOptimizationLevel::All)
                .map_err(|e| model_err(e.into()))?
                .with_intra_threads(config.threads.max(1))
                .map_err(|e| model_err(e.into()))?
                .commit_from_file(&model_path)
                .map_err(model_err)?;
            sessions.push(session);
        }
        let input_names = sessions[0].inputs().iter().map(|i| i.name().to_string()).collect();
        let mut model = Model { tokenizer, sessions, input_names, config: config.clone() };
        // Check the dimension once, so a wrong config fails at start, not mid-import.
        let probe = model.embed_sorted(&["dimension probe"])?;
        let found = probe.first().map(|v| v.len()).unwrap_or(0);
        if found != config.dimension {
            return Err(EmbedError::Dimension { expected: config.dimension, found });
        }
        Ok(model)
    }

    fn serve(&mut self, jobs: Receiver<Job>) {
        while let Ok(first) = jobs.recv() {
            // Drain what else is queued so concurrent callers share batches.
            let mut batch = vec![first];
            let mut queued: usize = batch[0].texts.len();
            while queued < 256.max(self.config.batch_size) {
                match jobs.try_recv() {
                    Ok(job) => {
                        queued += job.texts.len();
                        batch.push(job);
                    }
                    Err(_) => break,
                }
            }
            let texts: Vec<&str> = batch.iter().flat_map(|j| j.texts.iter().map(String::as_str)).collect();
            let result = self.embed_sorted(&texts);
            let mut offset = 0;
            for job in batch {
                let n = job.texts.len();
                let answer = match &result {
                    Ok(vectors) => Ok(vectors[offset..offset + n].to_vec()),
                    Err(e) => Err(e.clone()),
                };
                offset += n;
                let _ = job.reply.send(answer);
            }
        }
    }

    /// Embed in length order (similar lengths share a batch, so little padding), then
    /// return the vectors in the callers' order. With several sessions and several
    /// batches, each session runs on its own thread and takes the next batch when done
    /// (a preempted session does not hold the others back).
    fn embed_sorted(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let batches: Vec<&[usize]> = order.chunks(self.config.batch_size.max(1)).collect();
        let pooling = self.config.pooling;
        let (tokenizer, names) = (&self.tokenizer, self.input_names.as_slice());
        let run_batch = |session: &mut ort::session::Session, chunk: &[usize]| {
            let batch: Vec<&str> = chunk.iter().map(|&i| texts[i]).collect();
            run(tokenizer, session, names, pooling, &batch)
        };
        let mut results: Vec<(usize, Vec<Vec<f32>>)> = Vec::with_capacity(batches.len());
        if self.sessions.len() == 1 || batches.len() == 1 {
            for (b, chunk) in batches.iter().enumerate() {
                results.push((b, run_batch(&mut self.sessions[0], chunk)?));
            }
        } else {
            let next = std::sync::atomic::AtomicUsize::new(0);
            let per_session: Vec<Result<Vec<(usize, Vec<Vec<f32>>)>, EmbedError>> = std::thread::scope(|scope| {
                let handles: Vec<_> = self
                    .sessions
                    .iter_mut()
                    .take(batches.len())
                    .map(|session| {
                        let (next, batches, run_batch) = (&next, &batches, &run_batch);
                        scope.spawn(move || {
                            let mut done = Vec::new();
                            loop {
                                let b = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                let Some(chunk) = batches.get(b) else { return Ok(done) };
                                done.push((b, run_batch(session, chunk)?));
                            }
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Err(EmbedError::Inference("an embedding session panicked".into()))))
                    .collect()
            });
            for part in per_session {
                results.extend(part?);
            }
        }
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        for (b, vectors) in results {
            for (&i, v) in batches[b].iter().zip(vectors) {
                out[i] = v;
            }
        }
        Ok(out)
    }
}

/// Tokenise, run and pool one batch on one session.
fn run(
    tokenizer: &Tokenizer,
    session: &mut ort::session::Session,
    input_names: &[String],
    pooling: Pooling,
    texts: &[&str],
) -> Result<Vec<Vec<f32>>, EmbedError> {
    let encodings = tokenizer
        .encode_batch(texts.to_vec(), true)
        .map_err(|e| EmbedError::Inference(format!("tokenizer: {e}")))?;
    let batch = encodings.len();
    let seq = encodings.iter().map(|e| e.get_ids().len()).max().unwrap_or(0).max(1);
    let mut ids = vec![0i64; batch * seq];
    let mut mask = vec![0i64; batch * seq];
    let mut types = vec![0i64; batch * seq];
    for (row, enc) in encodings.iter().enumerate() {
        for (col, ((&id, &m), &t)) in
            enc.get_ids().iter().zip(enc.get_attention_mask()).zip(enc.get_type_ids()).enumerate()
        {
            ids[row * seq + col] = id as i64;
            mask[row * seq + col] = m as i64;
            types[row * seq + col] = t as i64;
        }
    }
    let shape = [batch, seq];
    let tensor = |data: &Vec<i64>| {
        ort::value::Tensor::from_array((shape, data.clone()))
            .map_err(|e| EmbedError::Inference(e.to_string()))
    };
    let mut inputs: Vec<(Cow<'_, str>, ort::session::SessionInputValue<'_>)> = Vec::new();
    for name in input_names {
        let data = match name.as_str() {
            "input_ids" => &ids,
            "attention_mask" => &mask,
            "token_type_ids" => &types,
            other => return Err(EmbedError::Inference(format!("the model wants an unknown input {other:?}"))),
        };
        inputs.push((Cow::Owned(name.clone()), tensor(data)?.into()));
    }
    let outputs = session.run(inputs).map_err(|e| EmbedError::Inference(e.to_string()))?;
    let (_, value) = outputs.iter().next().ok_or_else(|| EmbedError::Inference("the model has no output".into()))?;
    let (out_shape, data) = value.try_extract_tensor::<f32>().map_err(|e| EmbedError::Inference(e.to_string()))?;
    let dims: Vec<usize> = out_shape.iter().map(|&d| d.max(0) as usize).collect();
    let vectors = match dims.as_slice() {
        // Token vectors: pool them.
        [b, s, d] if *b == batch && *s == seq => {
            pool(data, &mask, batch, seq, *d, pooling)
        }
        // Already one vector per text (models exported with pooling inside).
        [b, d] if *b == batch => data.chunks(*d).map(|c| c.to_vec()).collect(),
        other => return Err(EmbedError::Inference(format!("unexpected output shape {other:?}"))),
    };
    Ok(vectors.into_iter().map(normalise).collect())
}

/// Pool `[batch, seq, dim]` token vectors into one vector per row.
fn pool(data: &[f32], mask: &[i64], batch: usize, seq: usize, dim: usize, pooling: Pooling) -> Vec<Vec<f32>> {
    (0..batch)
        .map(|b| {
            let row = &data[b * seq * dim..(b + 1) * seq * dim];
            match pooling {
                Pooling::Cls => row[..dim].to_vec(),
                Pooling::Mean => {
                    let mut sum = vec![0f32; dim];
                    let mut count = 0f32;
                    for s in 0..seq {
                        if mask[b * seq + s] == 0 {
                            continue;
                        }
                        count += 1.0;
                        for (acc, x) in sum.iter_mut().zip(&row[s * dim..(s + 1) * dim]) {
                            *acc += x;
                        }
                    }
                    let count = count.max(1e-9);
                    sum.iter_mut().for_each(|x| *x /= count);
                    sum
                }
            }
        })
        .collect()
}

/// Unit length, so a dot product is the cosine similarity.
pub fn normalise(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 1e-12 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

/// Shared pointer type used by the rest of the memory module.
pub type SharedEmbedder = Arc<Embedder>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_pooling_ignores_padding_and_cls_takes_the_first_token() {
        // batch 1, seq 3 (last is padding), dim 2
        let data = [1.0, 2.0, 3.0, 4.0, 100.0, 100.0];
        let mask = [1, 1, 0];
        assert_eq!(pool(&data, &mask, 1, 3, 2, Pooling::Mean), vec![vec![2.0, 3.0]]);
        assert_eq!(pool(&data, &mask, 1, 3, 2, Pooling::Cls), vec![vec![1.0, 2.0]]);
    }

    #[test]
    fn normalise_gives_unit_vectors_and_leaves_zero_alone() {
        let v = normalise(vec![3.0, 4.0]);
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
        assert_eq!(normalise(vec![0.0, 0.0]), vec![0.0, 0.0]);
    }

    #[test]
    fn missing_files_say_how_to_install_them() {
        let dir = tempfile::tempdir().unwrap();
        let config = EmbeddingConfig { model_dir: Some(dir.path().to_path_buf()), ..Default::default() };
        let err = Embedder::start(&config).unwrap_err();
        assert!(matches!(err, EmbedError::Missing { .. }), "{err}");
        assert!(err.to_string().contains(".ci/setup.sh"), "{err}");
    }
}
