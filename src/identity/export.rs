//! The predecessor's folder layout, so tools built for it can read our characters:
//! `{id}/input.json, metadata.json, knowledge_base.json, checkpoints/NN_agent.json,
//! final_profile.json`.

use super::records::{CheckpointStatus, RunStatus};
use crate::store::{Store, StoreError};
use super::{IdentityError, RunView};
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};

/// Write the run's folder under `out/{id}/` and return its path. The folder is written
/// next to its final place and renamed into it, so a failed export leaves nothing behind.
/// `final_profile` is the stored profile of a completed run.
pub fn write_seed_folder(view: &RunView, final_profile: Option<&Value>, out: &Path) -> Result<PathBuf, IdentityError> {
    let io = |e: std::io::Error| IdentityError::Io(e.to_string());
    let run = &view.run;
    let target = out.join(&run.id);
    let staging = out.join(format!(".{}.partial", run.id));
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io)?;
    }
    std::fs::create_dir_all(staging.join("checkpoints")).map_err(io)?;
    let write = |name: &str, value: &Value| -> Result<(), IdentityError> {
        let text = serde_json::to_string_pretty(value).map_err(|e| IdentityError::Io(e.to_string()))?;
        std::fs::write(staging.join(name), text).map_err(io)
    };

    write("input.json", &input_data(run))?;

    let meta = metadata(view);
    let wave = meta.current_wave;
    let current = meta.current_checkpoint;
    write("metadata.json", &serde_json::to_value(&meta).unwrap_or_default())?;

    for cp in &view.checkpoints {
        if let Some(checkpoint) = checkpoint_document(cp) {
            let checkpoint = serde_json::to_value(&checkpoint).unwrap_or_default();
            write(&format!("checkpoints/{:02}_{}.json", cp.record.number, cp.record.agent.name()), &checkpoint)?;
        }
    }
    write("knowledge_base.json", &knowledge_base(view, wave, current))?;

    if let Some(profile) = final_profile {
        write("final_profile.json", profile)?;
    }
    if target.exists() {
        std::fs::remove_dir_all(&target).map_err(io)?;
    }
    std::fs::rename(&staging, &target).map_err(io)?;
    Ok(target)
}

/// The run's `knowledge_base.json`, as the predecessor kept it: the input, each agent's
/// approved output, and `agent_statuses` in the predecessor's words (see [`agent_status`]).
fn knowledge_base(view: &RunView, wave: u8, current: u8) -> Value {
    let run = &view.run;
    let mut kb = Map::new();
    kb.insert("character_id".into(), json!(run.id));
    kb.insert("input_data".into(), input_data(run));
    kb.insert("mode".into(), json!(run.mode.label()));
    let mut statuses = Map::new();
    for cp in &view.checkpoints {
        let agent = cp.record.agent.name();
        let current = cp.versions.iter().find(|v| v.version == cp.record.current_version);
        if cp.record.number <= 6 {
            let approved = cp.record.status == CheckpointStatus::Approved;
            kb.insert(agent.into(), if approved { current.map(|v| v.structured.clone()).unwrap_or(Value::Null) } else { Value::Null });
        }
        statuses.insert(agent.into(), json!({"status": agent_status(cp.record.status), "wave": cp.record.wave}));
    }
    kb.insert("image_generation".into(), Value::Null);
    kb.insert("current_wave".into(), json!(wave));
    kb.insert("current_checkpoint".into(), json!(current));
    kb.insert("agent_statuses".into(), Value::Object(statuses));
    Value::Object(kb)
}

/// The run's input as the predecessor kept it (`input.json`, `input_data`): what the
/// entry agent sent, every field of it; the seed when the run was started from one.
fn input_data(run: &super::records::RunRecord) -> Value {
    run.entry_input.clone().unwrap_or_else(|| serde_json::to_value(&run.seed).unwrap_or_default())
}

/// A checkpoint's status as the predecessor's `agent_statuses` said it of the agent:
/// `pending` (not run yet), `in_progress` (running, or running again on feedback),
/// `completed` (the agent finished; whether it is approved is the checkpoint's `status`)
/// or `failed`.
pub fn agent_status(status: CheckpointStatus) -> &'static str {
    match status {
        CheckpointStatus::Queued => "pending",
        CheckpointStatus::Running | CheckpointStatus::Regenerating => "in_progress",
        CheckpointStatus::AwaitingApproval | CheckpointStatus::Approved | CheckpointStatus::Stale => "completed",
        CheckpointStatus::Failed => "failed",
    }
}

/// A run's `metadata.json`, as the predecessor kept it (and its API's `status` returns it).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct SeedMetadata {
    pub character_id: String,
    pub created_at: String,
    /// `in_progress`, `completed` or `failed`.
    pub status: String,
    /// `fast`, `balanced` or `deep`.
    pub mode: String,
    /// The wave of the first checkpoint not yet approved (4: the consolidation; 4 when all are).
    pub current_wave: u8,
    /// The highest checkpoint with output.
    pub current_checkpoint: u8,
    /// Checkpoints approved.
    pub completed_checkpoints: u8,
    pub total_checkpoints: u8,
    /// Checkpoints regenerated with feedback.
    pub regenerations: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
}

/// The metadata of `view`'s run.
pub fn metadata(view: &RunView) -> SeedMetadata {
    let run = &view.run;
    let approved = view.checkpoints.iter().filter(|c| c.record.status == CheckpointStatus::Approved).count();
    let current = view.checkpoints.iter().filter(|c| c.record.current_version > 0).map(|c| c.record.number).max().unwrap_or(0);
    let wave = view.checkpoints.iter().find(|c| c.record.status != CheckpointStatus::Approved).map(|c| c.record.wave).unwrap_or(4);
    SeedMetadata {
        character_id: run.id.clone(),
        created_at: run.created_at.clone(),
        status: match run.status {
            RunStatus::InProgress => "in_progress",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
        }
        .to_string(),
        mode: run.mode.label().to_string(),
        current_wave: wave,
        current_checkpoint: current,
        completed_checkpoints: u8::try_from(approved).unwrap_or(u8::MAX),
        total_checkpoints: 7,
        regenerations: run.regenerations,
        completed_at: run.completed_at.clone(),
    }
}

/// One checkpoint as the predecessor saved it (`checkpoints/NN_agent.json`, and its API's
/// `checkpoint/{n}`).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct CheckpointDocument {
    pub checkpoint_number: u8,
    pub agent: String,
    /// `queued`, `running`, `awaiting_approval`, `approved`, `regenerating`, `stale`, `failed`.
    pub status: String,
    pub output: CheckpointOutput,
    pub metadata: CheckpointMetadata,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct CheckpointOutput {
    pub narrative: String,
    /// The agent's structured fields (checkpoint 7: the whole profile).
    #[schema(value_type = Object)]
    pub structured: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct CheckpointMetadata {
    pub wave: u8,
    pub timestamp: String,
    pub tokens_used: u32,
    pub agent_time_seconds: f64,
    /// Which version this is, and how many there are (ours; a seed client ignores them).
    pub version: u32,
    pub versions: usize,
}

/// The current version of `cp` as the predecessor's checkpoint JSON; `None` before it has one.
pub fn checkpoint_document(cp: &super::CheckpointView) -> Option<CheckpointDocument> {
    checkpoint_version_document(cp, cp.record.current_version)
}

/// [`checkpoint_document`] of version `version` of the checkpoint (the one approved or
/// current, or one feedback replaced), `None` when it has no such version.
pub fn checkpoint_version_document(cp: &super::CheckpointView, version: u32) -> Option<CheckpointDocument> {
    let v = cp.versions.iter().find(|v| v.version == version)?;
    Some(CheckpointDocument {
        checkpoint_number: cp.record.number,
        agent: cp.record.agent.name().to_string(),
        status: cp.record.status.as_str().to_string(),
        output: CheckpointOutput { narrative: v.narrative.clone(), structured: v.structured.clone() },
        metadata: CheckpointMetadata {
            wave: cp.record.wave,
            timestamp: v.created_at.clone(),
            tokens_used: v.usage.total(),
            agent_time_seconds: v.wall_ms as f64 / 1000.0,
            version: v.version,
            versions: cp.versions.len(),
        },
    })
}

/// Where the stored profile keeps the agents' narratives (checkpoints 1–6, by agent
/// name), beside the seed's fields: the card export and the chat sheet read them.
pub const NARRATIVES: &str = "narratives";

/// The final profile stored for a completed character, if any, as the predecessor's
/// `final_profile.json` (without the narratives kept beside it).
pub fn stored_profile(store: &Store, character_id: &str) -> Result<Option<Value>, IdentityError> {
    let record = store.with(|c| crate::character::get(c, character_id))?;
    match record.and_then(|r| r.profile_json) {
        Some(t) => {
            let mut profile: Value = serde_json::from_str(&t).map_err(|e| IdentityError::Store(StoreError::Corrupt(e.to_string())))?;
            if let Some(fields) = profile.as_object_mut() {
                fields.remove(NARRATIVES);
            }
            Ok(Some(profile))
        }
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The predecessor's scripts read `pending`, `in_progress`, `completed` and `failed`
    /// in `agent_statuses`; our checkpoint statuses never leak into it.
    #[test]
    fn agent_statuses_use_the_predecessors_words() {
        let all = [
            CheckpointStatus::Queued,
            CheckpointStatus::Running,
            CheckpointStatus::AwaitingApproval,
            CheckpointStatus::Approved,
            CheckpointStatus::Regenerating,
            CheckpointStatus::Stale,
            CheckpointStatus::Failed,
        ];
        let said: Vec<&str> = all.iter().map(|s| agent_status(*s)).collect();
        assert_eq!(said, ["pending", "in_progress", "completed", "completed", "in_progress", "completed", "failed"]);
    }
}
