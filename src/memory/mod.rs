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

pub use bank::{MemoryBank, MemoryError, MemoryStats};
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
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            embedding: EmbeddingConfig::default(),
            retrieval: RetrievalConfig::default(),
            summary_every: 5,
            proximity_threshold: 0.45,
        }
    }
}
