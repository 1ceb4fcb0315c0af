//! The predecessor's folder layout, so tools built for it can read our characters:
//! `{id}/input.json, metadata.json, knowledge_base.json, checkpoints/NN_agent.json,
//! final_profile.json`.

use super::records::{CheckpointStatus, RunStatus};
use crate::store::{Store, StoreError};
use super::{IdentityError, RunView};
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

    write("input.json", &serde_json::to_value(&run.seed).unwrap_or_default())?;

    let approved = view.checkpoints.iter().filter(|c| c.record.status == CheckpointStatus::Approved).count();
    let current = view
        .checkpoints
        .iter()
        .filter(|c| c.record.current_version > 0)
        .map(|c| c.record.number)
        .max()
        .unwrap_or(0);
    let wave = view
        .checkpoints
        .iter()
        .find(|c| c.record.status != CheckpointStatus::Approved)
        .map(|c| c.record.wave)
        .unwrap_or(4);
    let mut metadata = json!({
        "character_id": run.id,
        "created_at": run.created_at,
        "status": match run.status { RunStatus::InProgress => "in_progress", RunStatus::Completed => "completed", RunStatus::Failed => "failed" },
        "mode": run.mode.label(),
        "current_wave": wave,
        "current_checkpoint": current,
        "completed_checkpoints": approved,
        "total_checkpoints": 7,
        "regenerations": run.regenerations,
    });
    if let Some(done) = &run.completed_at {
        metadata["completed_at"] = json!(done);
    }
    write("metadata.json", &metadata)?;

    let mut kb = Map::new();
    kb.insert("character_id".into(), json!(run.id));
    kb.insert("input_data".into(), serde_json::to_value(&run.seed).unwrap_or_default());
    kb.insert("mode".into(), json!(run.mode.label()));
    let mut statuses = Map::new();
    for cp in &view.checkpoints {
        let agent = cp.record.agent.name();
        let current = cp.versions.iter().find(|v| v.version == cp.record.current_version);
        if cp.record.number <= 6 {
            let approved = cp.record.status == CheckpointStatus::Approved;
            kb.insert(agent.into(), if approved { current.map(|v| v.structured.clone()).unwrap_or(Value::Null) } else { Value::Null });
        }
        statuses.insert(agent.into(), json!({"status": cp.record.status.as_str(), "wave": cp.record.wave}));
        if let Some(v) = current {
            let checkpoint = json!({
                "checkpoint_number": cp.record.number,
                "agent": agent,
                "status": cp.record.status.as_str(),
                "output": {"narrative": v.narrative, "structured": v.structured},
                "metadata": {
                    "wave": cp.record.wave,
                    "timestamp": v.created_at,
                    "tokens_used": v.usage.total(),
                    "agent_time_seconds": v.wall_ms as f64 / 1000.0,
                    "version": v.version,
                    "versions": cp.versions.len(),
                },
            });
            write(&format!("checkpoints/{:02}_{agent}.json", cp.record.number), &checkpoint)?;
        }
    }
    kb.insert("image_generation".into(), Value::Null);
    kb.insert("current_wave".into(), json!(wave));
    kb.insert("current_checkpoint".into(), json!(current));
    kb.insert("agent_statuses".into(), Value::Object(statuses));
    write("knowledge_base.json", &Value::Object(kb))?;

    if let Some(profile) = final_profile {
        write("final_profile.json", profile)?;
    }
    if target.exists() {
        std::fs::remove_dir_all(&target).map_err(io)?;
    }
    std::fs::rename(&staging, &target).map_err(io)?;
    Ok(target)
}

/// The final profile stored for a completed character, if any.
pub fn stored_profile(store: &Store, character_id: &str) -> Result<Option<Value>, IdentityError> {
    let record = store.with(|c| crate::character::get(c, character_id))?;
    match record.and_then(|r| r.profile_json) {
        Some(t) => serde_json::from_str(&t).map(Some).map_err(|e| IdentityError::Store(StoreError::Corrupt(e.to_string()))),
        None => Ok(None),
    }
}
