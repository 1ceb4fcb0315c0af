//! Memory: embeddings, keyword and vector indexes, hybrid retrieval with per-hit score
//! breakdowns, lore indexing, the summarisation cycle, proximity and memory intent.
//!
//! Invariant: renders nothing and never blocks the caller's UI thread: the engine runs
//! every [`MemoryCommand`] on a blocking worker, and the embedder has its own thread.

pub mod bank;
pub mod cli;
mod commands;
pub mod embedder;
pub mod eval;
pub mod injections;
pub mod keyword;
pub mod lore;
pub mod records;
pub mod retrieval;
pub mod summarise;
pub mod temporal;
pub mod detect;
pub mod vectors;

pub use bank::{GraphProgress, MemoryBank, MemoryError, MemoryStats};
pub use commands::{ImportSummary, MemoryCommand, MemoryEvent, bank_for, handle, import_file, read_import};
pub use embedder::{EmbedError, Embedder, EmbeddingConfig, Pooling};
pub use records::{Memory, MemoryKind, NewMemory, Scope, ScopeKind};
pub use retrieval::{Fusion, RetrievalConfig, RetrievalHit, SearchFilter, SearchMode, SearchRequest};

use serde::{Deserialize, Serialize};

/// Memory settings in the config file (`[memory]`): embedding model, retrieval weights,
/// the summarisation cycle and the proximity detector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryConfig {
    pub embedding: EmbeddingConfig,
    pub retrieval: RetrievalConfig,
    /// Summarise the unsummarised turns every this many turns.
    pub summary_every: usize,
    /// Similarity to an anchor phrase above which proximity changes.
    pub proximity_threshold: f32,
    /// When the HNSW graph over the vectors is (re)built.
    pub graph: GraphConfig,
}

/// `[memory.graph]`: the vector graph is rebuilt on a background thread as memories
/// come and go; until then new vectors are scanned exactly, so nothing waits for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GraphConfig {
    /// Rebuild by itself when the tail grows (`memory reindex` always rebuilds).
    pub auto_rebuild: bool,
    /// No graph below this many vectors: an exact scan of 10k takes ~0.7 ms, as fast as
    /// the graph, while building one takes seconds to minutes.
    pub min_vectors: usize,
    /// Rebuild once this many vectors (or a twentieth of those the graph covers, if
    /// more) are outside the graph: new ones, or deleted ones it still holds.
    pub rebuild_after: usize,
}

impl Default for GraphConfig {
    fn default() -> Self {
        Self { auto_rebuild: true, min_vectors: 20_000, rebuild_after: 5_000 }
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
