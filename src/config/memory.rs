//! `[memory]`: the embedding model, retrieval weights, the summarisation cycle, the
//! proximity detector and the vector graph. The types live here, below the memory
//! module that reads them, so the config file's shape depends on no capability.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Memory settings in the config file (`[memory]`): embedding model, retrieval weights,
/// the summarisation cycle and the proximity detector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryConfig {
    pub embedding: EmbeddingConfig,
    pub retrieval: RetrievalConfig,
    /// Summarise a chat every this many exchanges (a message and its reply), as the
    /// companion predecessor did; a summary never splits an exchange.
    pub summary_every: usize,
    /// Similarity to an anchor phrase above which proximity changes.
    pub proximity_threshold: f32,
    /// When the HNSW graph over the vectors is (re)built.
    pub graph: GraphConfig,
}

/// `[memory.graph]`: the vector graph takes each new vector as it is written and drops
/// each removed one; it is saved beside the library in the background and loaded on
/// open. It is built from scratch (in the background, searching exactly meanwhile) only
/// when no saved graph fits the library, or to compact one that is mostly deleted nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GraphConfig {
    /// Build by itself when the graph is missing or mostly deleted nodes (`memory
    /// reindex` always builds).
    pub auto_rebuild: bool,
    /// No graph below this many vectors: an exact scan of 10k takes ~0.7 ms, as fast as
    /// the graph.
    pub min_vectors: usize,
    /// Save the graph once this many vectors were written or removed since the last
    /// save. A reopen replays the changes since then from the library, so a smaller
    /// number opens faster and a larger one writes the file less often.
    pub save_after: usize,
    /// Save the graph once changes its file lacks have waited this many seconds (0: only
    /// every `save_after` changes and on close), so a long-running workbench or server
    /// that is killed leaves the next process little to replay. The save runs in the
    /// background: writes and searches go on while the file is written.
    pub save_after_secs: f64,
    /// Candidates a graph search keeps (HNSW's `ef`), at least the number asked for.
    /// More finds more of the exact nearest neighbours and costs time: on real
    /// embeddings 64 finds 0.96 of them at 100k vectors but 0.75 at 1M, 128 finds 0.83
    /// at 1M for ~0.4 ms more (BENCHMARKS.md, "the vector graph on real embeddings").
    pub ef_search: usize,
}

impl Default for GraphConfig {
    fn default() -> Self {
        Self { auto_rebuild: true, min_vectors: 20_000, save_after: 5_000, save_after_secs: 300.0, ef_search: 64 }
    }
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            embedding: EmbeddingConfig::default(),
            retrieval: RetrievalConfig::default(),
            summary_every: 5,
            proximity_threshold: 0.45,
            graph: GraphConfig::default(),
        }
    }
}

/// How token vectors become one sentence vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// Mean of the token vectors under the attention mask (sentence-transformers' MiniLM).
    #[default]
    Mean,
    /// The first token's vector (bge models).
    Cls,
}

/// Where the model lives and how to run it. Defaults fit all-MiniLM-L6-v2 as installed
/// by `.ci/setup.sh`; another BERT-style model (bge-small, nomic-embed) is a matter of
/// pointing `model_dir` at it and setting pooling, dimension and prefixes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct EmbeddingConfig {
    /// Folder holding the model and `tokenizer.json` (default: `models/all-MiniLM-L6-v2`);
    /// a relative path is a folder of the models directory (`all-mpnet-base-v2`).
    pub model_dir: Option<PathBuf>,
    /// The ONNX file inside `model_dir`. `model.onnx` is fp32, `model_int8.onnx` int8.
    pub model_file: String,
    pub tokenizer_file: String,
    /// `libonnxruntime.so` (default: `$ORT_DYLIB_PATH`, else `models/onnxruntime/`).
    pub runtime_library: Option<PathBuf>,
    pub pooling: Pooling,
    pub dimension: usize,
    /// Longest input in tokens; longer texts are truncated.
    pub max_length: usize,
    /// Intra-op threads of each ONNX session.
    pub threads: usize,
    /// ONNX sessions run side by side on the batches of one job (an import); each
    /// holds its own copy of the weights. `sessions × threads` should not exceed the
    /// cores: on two cores, 2 × 1 embeds about 1.5× faster than 1 × 2.
    pub sessions: usize,
    /// Texts per model call. Small batches of length-sorted texts are faster per text
    /// on CPU than large ones (activations stay in cache, little padding): 8 embeds
    /// about 1.15× faster than 32 (BENCHMARKS.md session 8).
    pub batch_size: usize,
    /// Prepended to queries / documents (e.g. nomic's `search_query: `).
    pub query_prefix: String,
    pub document_prefix: String,
}

impl Default for EmbeddingConfig {
    fn default() -> Self {
        Self {
            model_dir: None,
            model_file: "model.onnx".into(),
            tokenizer_file: "tokenizer.json".into(),
            runtime_library: None,
            pooling: Pooling::Mean,
            dimension: 384,
            max_length: 256,
            threads: 1,
            sessions: 2,
            batch_size: 8,
            query_prefix: String::new(),
            document_prefix: String::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Fusion {
    /// Reciprocal rank fusion: `w / (k + rank)` summed over the lists.
    Rrf,
    /// Weighted sum of scores normalised to [0, 1] within each list.
    #[default]
    Weighted,
}

/// How the two result lists are merged. Tuned on the dev split of
/// `tests/data/memory/` (see `memory eval`), reported on the held-out split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetrievalConfig {
    pub fusion: Fusion,
    pub keyword_weight: f32,
    pub vector_weight: f32,
    /// RRF's damping constant.
    pub rrf_k: f32,
    /// Candidates taken from each list before fusion.
    pub candidates: usize,
    /// Share of a hit's fused score given to the turns just before and after it in its
    /// session (answers often sit next to the turn that names the topic).
    pub neighbour_weight: f32,
    /// Extra weight (a factor of `1 + time_boost`) for memories from the months a query
    /// names ("in April", "this summer").
    pub time_boost: f32,
    /// Earlier turns of the same session whose vectors are mixed into a turn's, so a
    /// reply like "Terribly, the cat leaves the room" carries the question it answers.
    pub context_turns: usize,
    /// The weight of each earlier turn's vector in that mix (the turn's own is 1).
    pub context_weight: f32,


    /// Turns with few content words ("How did you know?") rarely answer anything but
    /// embed close to many queries: their score is scaled by
    /// `min(1, content_words / short_turn_words)`. 0 turns this off.
    pub short_turn_words: usize,
    /// Every turn's hybrid score is multiplied by its content words to this power: the
    /// turns that carry facts say more (0 turns it off).
    pub length_prior: f32,
    /// A turn spoken by someone the query names gains this share of its score.
    pub speaker_boost: f32,
    /// A turn gains this share times its session's best hit (among the best 20) over
    /// the best hit overall: the sessions about the question are favoured.
    pub session_support: f32,
    /// Remove speaker names from the text that is embedded for a query: names dominate a
    /// small model's vector and pull in every turn that greets that person.
    pub strip_names: bool,
    /// About how many matching rows one keyword search may rank. BM25 costs a few µs per
    /// matching row, so a query mixing a rare word with common ones ("Mira", "love")
    /// would rank thousands of rows in a large library for the common words alone: its
    /// terms are taken rarest first while their rows fit this budget (the rarest is
    /// always kept), and the rest left to the vector list. When the rarest alone matches
    /// more (a common word in a million memories), only the newest this many matching
    /// rows are ranked. 0 ranks every match of every term.
    pub keyword_max_rows: usize,
    /// From this many vectors in the library, a hybrid search builds its keyword and
    /// vector lists on two threads. Below it both lists together take well under a
    /// millisecond and starting a thread (~30 µs) would be a visible share of the search;
    /// at a million memories the vector list (~1.4 ms) fits inside the keyword list's time.
    pub parallel_lists_from: usize,
}

impl Default for RetrievalConfig {
    /// Chosen on the dev splits of the evaluation sets in `tests/data/memory/` (the
    /// held-out splits are reported separately in BENCHMARKS.md: run
    /// `tests/data/memory/eval_all.py`).
    fn default() -> Self {
        Self {
            fusion: Fusion::Weighted,
            keyword_weight: 0.4,
            vector_weight: 0.6,
            rrf_k: 60.0,
            candidates: 100,
            neighbour_weight: 0.1,
            time_boost: 0.5,
            context_turns: 2,
            context_weight: 0.5,
            short_turn_words: 8,
            length_prior: 0.2,
            speaker_boost: 0.3,
            session_support: 0.4,
            strip_names: true,
            keyword_max_rows: 2000,
            parallel_lists_from: 50_000,
        }
    }
}
