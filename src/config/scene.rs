//! `[scene]`: how a round runs and what its context holds.

use crate::prompting::BudgetPlan;
use serde::{Deserialize, Serialize};

/// Scene settings in the config file (`[scene]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SceneConfig {
    /// Director calls per round: 1 (or 0) only plans; N ≥ 2 also reconciles after the
    /// characters, again and again until a pass changes nothing or N passes were made
    /// (at most 8).
    pub max_director_passes: u32,
    /// Messages read from the store as history candidates (the budget cuts further).
    pub history_window: u32,
    /// Recent messages scanned for lore keys.
    pub lore_scan_depth: usize,
    /// Budget percentages per context section.
    pub budgets: BudgetPlan,
    /// Messages the Budgets panel's per-section token plot looks back over.
    pub telemetry_window: u32,
    /// Memories retrieved for each character's call (the memories budget cuts further).
    pub memories_per_call: usize,
    /// The scene's newest messages not recalled as memories (two or three rounds): the
    /// prompt's recent messages already show them, and a memory slot spent repeating one
    /// is lost to what the character would not see otherwise.
    pub recall_skips_newest: usize,
    /// A Narrator agent (role `narrator`) describes the scene after the characters act.
    pub narrator: bool,
    /// A World agent (role `world`) owns trackers and in-fiction time; Director pass 2
    /// then reconciles characters and facts only.
    pub world_agent: bool,
    /// Every this many rounds the `summariser` folds all but the last round into the
    /// scene's summary (0: never).
    pub summarise_every: u32,
    /// Longest summary asked for, in words.
    pub summary_max_words: u32,
}

impl Default for SceneConfig {
    fn default() -> Self {
        Self { max_director_passes: 2, history_window: 400, lore_scan_depth: 4, budgets: BudgetPlan::default(), telemetry_window: 500, memories_per_call: 8,
            recall_skips_newest: 12,
            narrator: true,
            world_agent: false,
            summarise_every: 5,
            summary_max_words: 250,
        }
    }
}
