//! Memory: embeddings, keyword and vector indexes, hybrid retrieval with per-hit score
//! breakdowns, lore indexing, the summarisation cycle, proximity and memory intent.
//!
//! Invariant: renders nothing and never blocks the caller's UI thread: the engine runs
//! every [`MemoryCommand`] on a blocking worker, and the embedder has its own thread.

pub mod bank;
pub mod curate;
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

pub use bank::{GraphProgress, MemoryBank, MemoryError, MemoryStats, MemoryWrite, PreparedEdit, PreparedMemories, remove_campaign, remove_character, remove_ids, remove_scene, remove_source};
pub use commands::{ImportSummary, MemoryAnswer, MemoryCommand, MemoryEvent, bank_for, close, handle, handle_asked, import_file, read_import};
pub use crate::config::{EmbeddingConfig, Fusion, GraphConfig, MemoryConfig, Pooling, RetrievalConfig};
pub use embedder::{EmbedError, Embedder, EmbeddingModel, MODELS, find_model};
pub use records::{Memory, MemoryKind, NewMemory, Scope, ScopeKind};
pub use retrieval::{RetrievalHit, SearchFilter, SearchMode, SearchRequest};


