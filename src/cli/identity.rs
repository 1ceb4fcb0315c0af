//! `lorekeeper identity ...`: the pipeline headless. Each verb sends its command and
//! prints events until the run needs the user again (or is complete).

use crate::identity::schema::{CharacterSeed, Mode};
use crate::identity::{IdentityCommand, IdentityEvent};
use super::drive::{drive, wait};
use crate::engine::{Command, EngineHandle, Event};
use anyhow::{Result, anyhow, bail};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Agents can be slow on small machines: generous, but never endless.
const RUN_LIMIT: Duration = Duration::from_secs(6 * 3600);
/// Reading or writing what is already stored.
const QUICK_LIMIT: Duration = Duration::from_secs(120);

#[derive(Debug, Subcommand)]
pub enum IdentityVerb {
    /// Develop a character from a seed file.
    Start(StartArgs),
    /// Show a run's checkpoints and versions.
    Status { id: String },
    /// Approve checkpoint N.
    Approve { id: String, checkpoint: u8 },
    /// Send checkpoint N back with feedback; the agent runs again.
    Reject {
        id: String,
        checkpoint: u8,
        #[arg(long)]
        feedback: String,
    },
    /// Take approved checkpoint N back; later checkpoints that used it become stale.
    Reopen { id: String, checkpoint: u8 },
    /// Re-run a stale or failed checkpoint.
    Rerun { id: String, checkpoint: u8 },
    /// Keep a stale checkpoint as it is.
    Keep { id: String, checkpoint: u8 },
    /// Put your own version of a checkpoint awaiting approval up for approval: its
    /// structured fields (JSON, or @file), and optionally its narrative. Checked against
    /// the agent's schema; refused with the field named.
    Edit {
        id: String,
        checkpoint: u8,
        #[arg(long)]
        structured: String,
        #[arg(long)]
        narrative: Option<String>,
    },
    /// Stop a run's running agents (in this or another process, the GUI's too): one
    /// checkpoint with --checkpoint, otherwise every one. The checkpoint waits for a re-run.
    Cancel {
        id: String,
        #[arg(long)]
        checkpoint: Option<u8>,
    },
    /// Compare two versions of a checkpoint, line by line (default: the current version
    /// against the one before it).
    Diff {
        id: String,
        checkpoint: u8,
        /// The older version (default: the one before --to).
        #[arg(long)]
        from: Option<u32>,
        /// The newer version (default: the current one).
        #[arg(long)]
        to: Option<u32>,
    },
    /// Continue a run interrupted by a crash or a quit.
    Resume { id: String },
    /// List runs.
    List,
    /// Export a character.
    Export(ExportArgs),
    /// Delete a run with every checkpoint version, and the character it develops (its
    /// chat, casts and memories too); only with --yes.
    Delete {
        id: String,
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Debug, Args)]
pub struct StartArgs {
    /// JSON: {"name","role","concept","storyline","other_characters":[{"name","role","concept"}]}
    #[arg(long)]
    pub seed: PathBuf,
    #[arg(long, default_value = "balanced")]
    pub mode: String,
    /// Run every agent on this profile instead of the role map.
    #[arg(long)]
    pub profile: Option<String>,
    /// Approve every checkpoint as soon as it is valid.
    #[arg(long)]
    pub auto_approve: bool,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    pub id: String,
    #[arg(long, default_value = "seed-folder")]
    pub format: String,
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(engine: &EngineHandle, verb: IdentityVerb, json: bool) -> Result<ExitCode> {
    let send = |c: IdentityCommand| engine.send(Command::Identity(c)).map_err(|e| anyhow!(e));
    match verb {
        IdentityVerb::Start(args) => {
            // A seed is a few hundred bytes; a megabyte is already a mistake.
            let text = crate::paths::read_text_bounded(&args.seed, 1 << 20)?;
            let seed = CharacterSeed::parse(&text).map_err(|e| anyhow!("{}: {e}", args.seed.display()))?;
            let mode = Mode::parse(&args.mode).ok_or_else(|| anyhow!("mode must be fast, balanced or deep"))?;
            send(IdentityCommand::Start { seed, entry_input: None, mode, profile: args.profile, auto_approve: args.auto_approve })?;
            follow(engine, json, None)
        }
        IdentityVerb::Approve { id, checkpoint } => {
            send(IdentityCommand::Approve { character_id: id.clone(), checkpoint })?;
            follow(engine, json, Some(id))
        }
        IdentityVerb::Reject { id, checkpoint, feedback } => {
            send(IdentityCommand::Reject { character_id: id.clone(), checkpoint, feedback })?;
            follow(engine, json, Some(id))
        }
        IdentityVerb::Reopen { id, checkpoint } => {
            send(IdentityCommand::Reopen { character_id: id.clone(), checkpoint })?;
            follow(engine, json, Some(id))
        }
        IdentityVerb::Rerun { id, checkpoint } => {
            send(IdentityCommand::Rerun { character_id: id.clone(), checkpoint })?;
            follow(engine, json, Some(id))
        }
        IdentityVerb::Cancel { id, checkpoint } => {
            send(IdentityCommand::Cancel { character_id: id.clone(), checkpoint })?;
            drive(engine, json, QUICK_LIMIT, |event| match event {
                Event::Identity(IdentityEvent::CancelRequested { character_id, .. }) if *character_id == id => Some(Ok(())),
                Event::Identity(IdentityEvent::Error { character_id, checkpoint: None, message }) if *character_id == id => {
                    Some(Err(anyhow!("{message}")))
                }
                _ => None,
            })??;
            Ok(ExitCode::SUCCESS)
        }
        IdentityVerb::Keep { id, checkpoint } => {
            send(IdentityCommand::Keep { character_id: id.clone(), checkpoint })?;
            follow(engine, json, Some(id))
        }
        IdentityVerb::Edit { id, checkpoint, structured, narrative } => {
            let text = match structured.strip_prefix('@') {
                Some(path) => crate::paths::read_text_bounded(std::path::Path::new(path), 1 << 20)?,
                None => structured,
            };
            let structured: serde_json::Value = serde_json::from_str(&text).map_err(|e| anyhow!("--structured is not JSON: {e}"))?;
            send(IdentityCommand::Edit { character_id: id.clone(), checkpoint, narrative, structured })?;
            let version = drive(engine, json, QUICK_LIMIT, |event| match event {
                Event::Identity(IdentityEvent::CheckpointReady { character_id, checkpoint_number, version, .. })
                    if *character_id == id && *checkpoint_number == checkpoint =>
                {
                    Some(Ok(*version))
                }
                Event::Identity(IdentityEvent::Error { character_id, message, .. }) if *character_id == id => Some(Err(anyhow!("{message}"))),
                _ => None,
            })??;
            if !json {
                outln!("checkpoint {checkpoint}: your edit is version {version}, awaiting approval");
            }
            Ok(ExitCode::SUCCESS)
        }
        IdentityVerb::Resume { id } => {
            send(IdentityCommand::Resume { character_id: Some(id.clone()) })?;
            follow(engine, json, Some(id))
        }
        IdentityVerb::Status { id } => {
            let view = snapshot(engine, id)?;
            if json {
                outln!("{}", serde_json::to_string(&view)?);
            } else {
                outln!("{} ({}) {} — mode {}, {} regenerations", view.run.name, view.run.id, status_word(&view), view.run.mode.label(), view.run.regenerations);
                for cp in &view.checkpoints {
                    let tokens: u32 = cp.versions.iter().map(|v| v.usage.total()).sum();
                    let status = if cp.interrupted { format!("interrupted ({})", cp.record.status.as_str()) } else { cp.record.status.as_str().to_string() };
                    outln!(
                        "  {} {:<22} wave {}  {:<18} v{}  {} tokens",
                        cp.record.number,
                        cp.record.agent.name(),
                        cp.record.wave,
                        status,
                        cp.record.current_version,
                        tokens
                    );
                }
                if view.checkpoints.iter().any(|c| c.interrupted) {
                    outln!("the process running this run stopped before it finished: `identity resume {}` runs the interrupted checkpoints again", view.run.id);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        IdentityVerb::Diff { id, checkpoint, from, to } => {
            let view = snapshot(engine, id)?;
            let cp = view
                .checkpoints
                .iter()
                .find(|c| c.record.number == checkpoint)
                .ok_or_else(|| anyhow!("{} has no checkpoint {checkpoint} (1 to {})", view.run.name, view.checkpoints.len()))?;
            let newest = cp.versions.iter().map(|v| v.version).max().ok_or_else(|| anyhow!("checkpoint {checkpoint} has no version yet"))?;
            let to = to.unwrap_or(if cp.record.current_version > 0 { cp.record.current_version } else { newest });
            let from = from.unwrap_or(to.saturating_sub(1));
            let find = |n: u32| {
                cp.versions.iter().find(|v| v.version == n).ok_or_else(|| {
                    let have: Vec<String> = cp.versions.iter().map(|v| v.version.to_string()).collect();
                    anyhow!("checkpoint {checkpoint} has no version {n} (it has {})", have.join(", "))
                })
            };
            let (old, new) = (find(from)?, find(to)?);
            let (old_text, new_text) = (old.as_text(), new.as_text());
            let diff = similar::TextDiff::from_lines(&old_text, &new_text);
            if json {
                let changes: Vec<serde_json::Value> = diff
                    .iter_all_changes()
                    .map(|c| serde_json::json!({ "tag": format!("{:?}", c.tag()).to_lowercase(), "line": c.value().trim_end_matches('\n') }))
                    .collect();
                outln!("{}", serde_json::json!({ "checkpoint": checkpoint, "from": from, "to": to, "changes": changes }));
            } else {
                outln!("checkpoint {checkpoint} ({}), version {from} → {to}", cp.record.agent.title());
                for change in diff.iter_all_changes() {
                    let sign = match change.tag() {
                        similar::ChangeTag::Delete => '-',
                        similar::ChangeTag::Insert => '+',
                        similar::ChangeTag::Equal => ' ',
                    };
                    outln!("{sign} {}", change.value().trim_end_matches('\n'));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        IdentityVerb::List => {
            send(IdentityCommand::List)?;
            let runs = wait(engine, QUICK_LIMIT, |event| match event {
                Event::Identity(IdentityEvent::Runs { runs }) => Some(Ok(runs.clone())),
                Event::Identity(IdentityEvent::Error { checkpoint: None, message, .. }) => Some(Err(anyhow!("{message}"))),
                _ => None,
            })??;
            for r in runs {
                if json {
                    outln!("{}", serde_json::json!({"id": r.id, "name": r.name, "mode": r.mode, "status": r.status, "created_at": r.created_at}));
                } else {
                    outln!("{}  {:<24} {:<11}  {}", r.id, r.name, run_status_word(r.status), r.created_at);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        IdentityVerb::Delete { id, yes } => {
            if !yes {
                bail!("deleting run {id} deletes every checkpoint version and its character; pass --yes");
            }
            super::interop::delete_character(engine, id, true, json)
        }
        IdentityVerb::Export(args) => {
            if args.format != "seed-folder" {
                bail!("unknown format {:?}: identity export writes seed-folder (cards: `lorekeeper export character`)", args.format);
            }
            let out = std::path::absolute(&args.out).unwrap_or(args.out);
            send(IdentityCommand::Export { character_id: args.id, out })?;
            let dir = wait(engine, QUICK_LIMIT, |event| match event {
                Event::Identity(IdentityEvent::Exported { path, .. }) => Some(Ok(path.clone())),
                Event::Identity(IdentityEvent::Error { checkpoint: None, message, .. }) => Some(Err(anyhow!("{message}"))),
                _ => None,
            })??;
            if json {
                outln!("{}", serde_json::json!({"exported": dir}));
            } else {
                outln!("exported to {}", dir.display());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A run as stored: its checkpoints and every version.
fn snapshot(engine: &EngineHandle, id: String) -> Result<Box<crate::identity::RunView>> {
    engine.send(Command::Identity(IdentityCommand::Snapshot { character_id: id })).map_err(|e| anyhow!(e))?;
    wait(engine, QUICK_LIMIT, |event| match event {
        Event::Identity(IdentityEvent::Snapshot { view }) => Some(Ok(view.clone())),
        Event::Identity(IdentityEvent::Error { checkpoint: None, message, .. }) => Some(Err(anyhow!("{message}"))),
        _ => None,
    })?
}

fn status_word(view: &crate::identity::RunView) -> &'static str {
    run_status_word(view.run.status)
}

/// A run's status as a person says it.
fn run_status_word(status: crate::identity::records::RunStatus) -> &'static str {
    match status {
        crate::identity::records::RunStatus::InProgress => "in progress",
        crate::identity::records::RunStatus::Completed => "completed",
        crate::identity::records::RunStatus::Failed => "failed",
    }
}

/// Print events until the run is complete or waits for the user. `id` is learnt from
/// `run_started` when starting.
fn follow(engine: &EngineHandle, json: bool, mut id: Option<String>) -> Result<ExitCode> {
    let verdict = drive(engine, json, RUN_LIMIT, |event| {
        let Event::Identity(e) = event else { return None };
        if let IdentityEvent::RunStarted { character_id, .. } = e {
            if id.is_none() {
                id = Some(character_id.clone());
            }
        }
        let mine = match (&id, e.character_id()) {
            (Some(want), Some(got)) => want == got,
            (None, Some("")) => true,
            _ => false,
        };
        if !mine {
            return None;
        }
        match e {
            IdentityEvent::CharacterComplete { .. } => Some(Ok(())),
            IdentityEvent::Idle { failed, awaiting_approval, stale, .. } => Some(if failed.is_empty() {
                if !json {
                    eprintln!("waiting for you: approve {awaiting_approval:?}, stale {stale:?}");
                }
                Ok(())
            } else {
                {
                    // What to run next, with this run's id and its first failed checkpoint.
                    let run = id.as_deref().unwrap_or("ID");
                    let first = failed.first().copied().unwrap_or(1);
                    Err(anyhow!(
                        "checkpoint(s) {failed:?} failed; `lorekeeper identity status {run}` says why, `lorekeeper identity rerun {run} {first}` tries again"
                    ))
                }
            }),
            IdentityEvent::Error { checkpoint: None, message, .. } => Some(Err(anyhow!("{message}"))),
            _ => None,
        }
    })?;
    verdict.map(|_| ExitCode::SUCCESS)
}
