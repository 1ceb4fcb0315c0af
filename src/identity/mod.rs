//! The character identity pipeline: six agents in three waves and a consolidation,
//! each output a checkpoint the game master approves or sends back with feedback.
//!
//! Invariant: every checkpoint version is in the store before its `checkpoint_ready`
//! event, and a run can be resumed from the store alone (see [`pipeline`]).

mod base;
pub mod export;
pub mod pipeline;
pub mod prompt;
pub mod records;
mod rules;
pub mod schema;
pub mod traits;

use crate::context::Context;
use records::{CheckpointRecord, RunRecord, VersionRecord};
use schema::{Agent, CharacterSeed, Mode};
use serde::Serialize;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Llm(#[from] crate::llm::LlmError),
    #[error(transparent)]
    Template(#[from] crate::prompting::TemplateError),
    #[error("the agent failed: {message}")]
    Agent { message: String, attempts: serde_json::Value },
    #[error("{0}")]
    Invalid(String),
    #[error("cannot write the export: {0}")]
    Io(String),
}

#[derive(Debug, Clone)]
pub enum IdentityCommand {
    /// `entry_input`: what the entry agent sent, as it sent it, when the seed was made
    /// of it (`POST /api/character/start`); exported as the predecessor's `input.json`.
    Start { seed: CharacterSeed, entry_input: Option<serde_json::Value>, mode: Mode, profile: Option<String>, auto_approve: bool },
    Approve { character_id: String, checkpoint: u8 },
    Reject { character_id: String, checkpoint: u8, feedback: String },
    Reopen { character_id: String, checkpoint: u8 },
    /// Re-run a stale or failed checkpoint as it is.
    Rerun { character_id: String, checkpoint: u8 },
    /// Keep a stale checkpoint's version.
    Keep { character_id: String, checkpoint: u8 },
    /// Put the game master's own version of a checkpoint awaiting approval up for
    /// approval: its structured fields (and narrative, when given), schema-checked.
    Edit { character_id: String, checkpoint: u8, narrative: Option<String>, structured: serde_json::Value },
    /// Stop a run's running agents (one checkpoint, or every one); reported as
    /// [`IdentityEvent::Cancelled`] per checkpoint, or an error when none was running.
    Cancel { character_id: String, checkpoint: Option<u8> },
    /// Continue interrupted runs: one, or every run in progress.
    Resume { character_id: Option<String> },
    /// Report a run's full state as a [`IdentityEvent::Snapshot`].
    Snapshot { character_id: String },
    List,
    /// Write a run as a seed folder under `out`; reported as [`IdentityEvent::Exported`].
    Export { character_id: String, out: std::path::PathBuf },
}

/// A run with every checkpoint and version, for the panels and `identity status`.
#[derive(Debug, Clone, Serialize)]
pub struct RunView {
    pub run: RunRecord,
    pub checkpoints: Vec<CheckpointView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CheckpointView {
    #[serde(flatten)]
    pub record: CheckpointRecord,
    pub versions: Vec<VersionRecord>,
    /// Stored as working, but no process runs it (the one that did stopped): `identity
    /// resume` runs it again. Known only where the view was read with [`mark_interrupted`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
}

/// Say which of `view`'s working checkpoints no process runs any more.
pub fn mark_interrupted(ctx: &Context, view: &mut RunView) {
    for cp in &mut view.checkpoints {
        cp.interrupted = cp.record.status.is_working() && !pipeline::is_running(ctx, &view.run.id, cp.record.number);
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum IdentityEvent {
    RunStarted { character_id: String, name: String, mode: Mode },
    WaveStarted { character_id: String, wave: u8, agents: Vec<String> },
    AgentStarted { character_id: String, checkpoint: u8, agent: Agent, version: u32 },
    /// A streamed fragment of an agent's reply.
    Token { character_id: String, checkpoint: u8, text: String },
    CheckpointReady {
        character_id: String,
        checkpoint_number: u8,
        agent: Agent,
        version: u32,
        message: String,
        tokens: u32,
        wall_ms: u64,
    },
    CheckpointApproved { character_id: String, checkpoint_number: u8 },
    CheckpointRejected { character_id: String, checkpoint_number: u8, feedback: String },
    CheckpointReopened { character_id: String, checkpoint_number: u8 },
    CheckpointStale { character_id: String, checkpoint_number: u8 },
    WaveComplete { character_id: String, wave: u8, agents_completed: Vec<String>, next_wave: serde_json::Value },
    CharacterComplete { character_id: String, message: String, total_tokens: u64 },
    /// No agent of the run is working: the next move is the user's.
    Idle { character_id: String, awaiting_approval: Vec<u8>, stale: Vec<u8>, failed: Vec<u8> },
    Error { character_id: String, checkpoint: Option<u8>, message: String },
    /// A running agent was cancelled; its checkpoint waits for a re-run.
    Cancelled { character_id: String, checkpoint: u8 },
    /// A cancel was asked of these running checkpoints (here or in the process running
    /// them); each reports [`IdentityEvent::Cancelled`] where it ran.
    CancelRequested { character_id: String, checkpoints: Vec<u8> },
    Snapshot { view: Box<RunView> },
    Runs { runs: Vec<RunRecord> },
    /// A seed folder was written.
    Exported { character_id: String, path: std::path::PathBuf },
}

impl IdentityEvent {
    pub fn character_id(&self) -> Option<&str> {
        use IdentityEvent::*;
        match self {
            RunStarted { character_id, .. }
            | WaveStarted { character_id, .. }
            | AgentStarted { character_id, .. }
            | Token { character_id, .. }
            | CheckpointReady { character_id, .. }
            | CheckpointApproved { character_id, .. }
            | CheckpointRejected { character_id, .. }
            | CheckpointReopened { character_id, .. }
            | CheckpointStale { character_id, .. }
            | WaveComplete { character_id, .. }
            | CharacterComplete { character_id, .. }
            | Idle { character_id, .. }
            | Error { character_id, .. }
            | Cancelled { character_id, .. }
            | CancelRequested { character_id, .. } => Some(character_id),
            Snapshot { view } => Some(&view.run.id),
            Runs { .. } => None,
            Exported { character_id, .. } => Some(character_id),
        }
    }
}

/// Load a run with all its checkpoints and versions.
pub fn load_view(store: &crate::store::Store, character_id: &str) -> Result<RunView, IdentityError> {
    Ok(store.with(|c| {
        let run = records::load_run(c, character_id)?;
        let mut checkpoints = Vec::new();
        for record in records::checkpoints(c, character_id)? {
            let versions = records::versions(c, character_id, record.number)?;
            checkpoints.push(CheckpointView { record, versions, interrupted: false });
        }
        Ok(RunView { run, checkpoints })
    })?)
}

pub fn handle(ctx: &Arc<Context>, command: IdentityCommand) {
    let ctx = ctx.clone();
    // Store work and agent start-up stay off the engine loop.
    ctx.runtime.clone().spawn_blocking(move || {
        let subject = match &command {
            IdentityCommand::Approve { character_id, .. }
            | IdentityCommand::Reject { character_id, .. }
            | IdentityCommand::Reopen { character_id, .. }
            | IdentityCommand::Rerun { character_id, .. }
            | IdentityCommand::Keep { character_id, .. }
            | IdentityCommand::Cancel { character_id, .. }
            | IdentityCommand::Edit { character_id, .. }
            | IdentityCommand::Snapshot { character_id }
            | IdentityCommand::Export { character_id, .. } => character_id.clone(),
            IdentityCommand::Resume { character_id } => character_id.clone().unwrap_or_default(),
            IdentityCommand::Start { .. } | IdentityCommand::List => String::new(),
        };
        if let Err(e) = run_command(&ctx, command) {
            ctx.emit(IdentityEvent::Error { character_id: subject, checkpoint: None, message: e.to_string() });
        }
    });
}

fn run_command(ctx: &Arc<Context>, command: IdentityCommand) -> Result<(), IdentityError> {
    match command {
        IdentityCommand::Start { seed, entry_input, mode, profile, auto_approve } => {
            pipeline::start(ctx, seed, entry_input, mode, profile, auto_approve).map(|_| ())
        }
        IdentityCommand::Approve { character_id, checkpoint } => pipeline::approve(ctx, &character_id, checkpoint),
        IdentityCommand::Reject { character_id, checkpoint, feedback } => {
            pipeline::reject(ctx, &character_id, checkpoint, &feedback)
        }
        IdentityCommand::Reopen { character_id, checkpoint } => {
            pipeline::reopen(ctx, &character_id, checkpoint).map(|_| ())
        }
        IdentityCommand::Rerun { character_id, checkpoint } => pipeline::rerun(ctx, &character_id, checkpoint),
        IdentityCommand::Keep { character_id, checkpoint } => pipeline::keep(ctx, &character_id, checkpoint),
        IdentityCommand::Cancel { character_id, checkpoint } => {
            let checkpoints = pipeline::cancel(ctx, &character_id, checkpoint)?;
            if !checkpoints.is_empty() {
                ctx.emit(IdentityEvent::CancelRequested { character_id, checkpoints });
                Ok(())
            } else {
                Err(IdentityError::Invalid(match checkpoint {
                    Some(n) => format!("checkpoint {n} is not running"),
                    None => "no agent of this run is running".to_string(),
                }))
            }
        }
        IdentityCommand::Edit { character_id, checkpoint, narrative, structured } => {
            pipeline::edit(ctx, &character_id, checkpoint, narrative, structured).map(|_| ())
        }
        IdentityCommand::Resume { character_id } => {
            let ids = match character_id {
                Some(id) => vec![ctx.store.with(|c| records::load_run(c, &id))?.id],
                None => ctx
                    .store
                    .with(records::list_runs)?
                    .into_iter()
                    .filter(|r| r.status == records::RunStatus::InProgress)
                    .map(|r| r.id)
                    .collect(),
            };
            for id in ids {
                pipeline::advance(ctx, &id);
            }
            Ok(())
        }
        IdentityCommand::Snapshot { character_id } => {
            let mut view = load_view(&ctx.store, &character_id)?;
            mark_interrupted(ctx, &mut view);
            ctx.emit(IdentityEvent::Snapshot { view: Box::new(view) });
            Ok(())
        }
        IdentityCommand::List => {
            let runs = ctx.store.with(records::list_runs)?;
            ctx.emit(IdentityEvent::Runs { runs });
            Ok(())
        }
        IdentityCommand::Export { character_id, out } => {
            let view = load_view(&ctx.store, &character_id)?;
            let profile = export::stored_profile(&ctx.store, &view.run.id)?;
            let path = export::write_seed_folder(&view, profile.as_ref(), &out)?;
            ctx.emit(IdentityEvent::Exported { character_id: view.run.id.clone(), path });
            Ok(())
        }
    }
}
