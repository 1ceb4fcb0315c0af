//! Memory: embeddings, keyword and vector indexes, hybrid retrieval with per-hit score
//! breakdowns, lore indexing, the summarisation cycle, proximity and memory intent.

use crate::engine::EngineContext;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Memory settings in the config file (embedding model, retrieval weights).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryConfig {}

#[derive(Debug, Clone)]
pub enum MemoryCommand {}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum MemoryEvent {}

pub fn handle(_ctx: &Arc<EngineContext>, command: MemoryCommand) {
    match command {}
}
