//! `[companion]`: one-to-one chat settings and the packet's per-block budgets.

use serde::{Deserialize, Serialize};

/// Chat settings in the config file (`[companion]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompanionConfig {
    /// How the user is named in the packet and the history.
    pub user_name: String,
    /// Exchanges read as candidates for the history block (its budget cuts further).
    pub history_turns: u32,
    /// Memories retrieved for the memory bank, and lore chunks for the persona.
    pub memory_k: usize,
    pub lore_k: usize,
    /// Without a "do you remember", the memory bank is sent only if the best memory is
    /// at least this similar to the message (cosine).
    pub memory_confidence: f32,
    /// Draws per turn before the user is told no valid reply came.
    pub max_attempts: u32,
    /// A gap this long starts a new session (a new sitting of the conversation).
    pub session_gap_minutes: i64,
    pub budgets: PacketBudgets,
}

impl Default for CompanionConfig {
    fn default() -> Self {
        Self {
            user_name: "User".into(),
            history_turns: 24,
            memory_k: 5,
            lore_k: 4,
            memory_confidence: 0.6,
            max_attempts: 3,
            session_gap_minutes: 180,
            budgets: PacketBudgets::default(),
        }
    }
}

/// Percentages of the profile's `max_context_tokens` per budgeted block. What is left
/// over is room for the fixed blocks (time, distance, trigger) and the reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PacketBudgets {
    pub persona: f64,
    pub lore: f64,
    pub memory: f64,
    pub history: f64,
    /// The card's example dialogue: dropped whole, first of all, when it does not fit.
    pub examples: f64,
    pub input: f64,
}

impl Default for PacketBudgets {
    fn default() -> Self {
        Self { persona: 12.0, lore: 10.0, memory: 12.0, history: 32.0, examples: 6.0, input: 10.0 }
    }
}
