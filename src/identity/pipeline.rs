//! The identity pipeline as a state machine over the store.
//!
//! Every transition (approve, reject, an agent finishing) is one transaction followed
//! by [`advance`], which looks at the stored state and starts whatever may run now.
//! Nothing polls: approval is a command, and an agent finishing calls `advance` itself.
//! Which agents are running in this process is kept in memory; a checkpoint stored as
//! running that is not in that set was interrupted (the app was killed), so `advance`
//! simply starts it again — that is the whole of resuming.

use super::prompt::{build_request, fit_request};
use super::records::{self, CheckpointRecord, CheckpointStatus, RunRecord, RunStatus, VersionRecord};
use super::schema::*;
use super::{IdentityError, IdentityEvent};
use crate::context::{Context, JobKey};
use super::rules::{Asked, content_rules};
use crate::llm::structured::{StructuredOptions, complete_structured};
use crate::llm::{CallContext, CancelToken, LlmClient};
use crate::store::{new_id, now_rfc3339};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// Serialises state transitions across the process (commands and finishing agents).
fn transitions() -> &'static Mutex<()> {
    static LOCK: OnceLock<Mutex<()>> = OnceLock::new();
    LOCK.get_or_init(|| Mutex::new(()))
}

/// The job key of one checkpoint's agent, held while the agent runs in this process.
fn job(run_id: &str, number: u8) -> JobKey {
    JobKey::new("checkpoint", format!("{run_id}#{number}"))
}

pub(super) fn is_running(ctx: &Context, run_id: &str, number: u8) -> bool {
    ctx.jobs.is_running(&job(run_id, number))
}

fn emit(ctx: &Context, event: IdentityEvent) {
    ctx.emit(event);
}

/// Create a run and start wave 1.
pub fn start(
    ctx: &Arc<Context>,
    seed: CharacterSeed,
    entry_input: Option<serde_json::Value>,
    mode: Mode,
    profile: Option<String>,
    auto_approve: bool,
) -> Result<String, IdentityError> {
    let config = ctx.config();
    if let Some(name) = &profile {
        if config.profile(name).is_none() {
            return Err(IdentityError::Invalid(format!("no profile named {name:?}")));
        }
    }
    // Characters are found by name everywhere: a run that would end as a second one of a
    // name is refused before it spends anything.
    if ctx.store.with(|c| crate::character::name_in_use(c, &seed.name, ""))? {
        return Err(IdentityError::Invalid(format!(
            "a character already goes by {:?}: give the new one another name (or rename that one first)",
            seed.name.trim()
        )));
    }
    let run = RunRecord {
        id: new_id(),
        name: seed.name.clone(),
        mode,
        seed,
        entry_input,
        profile,
        auto_approve,
        status: RunStatus::InProgress,
        regenerations: 0,
        created_at: now_rfc3339(),
        completed_at: None,
        error: None,
    };
    ctx.store.transaction(|tx| records::insert_run(tx, &run))?;
    emit(ctx, IdentityEvent::RunStarted { character_id: run.id.clone(), name: run.name.clone(), mode });
    advance(ctx, &run.id);
    Ok(run.id)
}

/// The wave whose checkpoints are not all approved yet; 5 when all seven are.
fn current_wave(checkpoints: &[CheckpointRecord]) -> u8 {
    (1..=4)
        .find(|w| checkpoints.iter().any(|c| c.wave == *w && c.status != CheckpointStatus::Approved))
        .unwrap_or(5)
}

/// Start what may run now, finish the run when everything is approved, and say when
/// the run waits for the user.
pub fn advance(ctx: &Arc<Context>, run_id: &str) {
    let outcome = {
        let _guard = transitions().lock().unwrap_or_else(|p| p.into_inner());
        advance_locked(ctx, run_id)
    };
    if let Err(e) = outcome {
        emit(ctx, IdentityEvent::Error { character_id: run_id.to_string(), checkpoint: None, message: e.to_string() });
    }
}

fn advance_locked(ctx: &Arc<Context>, run_id: &str) -> Result<(), IdentityError> {
    let run = match ctx.store.with(|c| records::load_run(c, run_id)) {
        Ok(run) => run,
        // Deleted while an agent of it ran: that agent's follow-up has nothing to move on.
        Err(crate::store::StoreError::NotFound(_)) => {
            tracing::debug!(run = run_id, "the run was deleted; nothing to advance");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    // A failed run still reports where it stands (and runs what else is queued): the
    // user re-runs the failed checkpoint from there.
    if run.status == RunStatus::Completed {
        return Ok(());
    }
    let checkpoints = ctx.store.with(|c| records::checkpoints(c, run_id))?;
    let wave = current_wave(&checkpoints);
    if wave == 5 {
        return complete(ctx, &run);
    }
    let in_wave: Vec<&CheckpointRecord> = checkpoints.iter().filter(|c| c.wave == wave).collect();
    let fresh_wave = in_wave.iter().all(|c| c.status == CheckpointStatus::Queued);
    let mut to_start = Vec::new();
    for cp in &in_wave {
        let interrupted = cp.status.is_working() && !is_running(ctx, run_id, cp.number);
        let stale_auto = run.auto_approve && cp.status == CheckpointStatus::Stale;
        if cp.status == CheckpointStatus::Queued || interrupted || stale_auto {
            to_start.push((cp.agent, cp.pending_feedback.clone(), cp.status));
        }
    }
    // Stored as running before the wave is announced, so a reader of the store (a
    // WebSocket that connects just then) sees the wave started whenever it missed the event;
    // and each agent's job is registered before that, so whoever reads "running" (the
    // workbench's Cancel, `identity cancel`) finds a job to cancel.
    let mut claimed = Vec::new();
    for (agent, feedback, status) in &to_start {
        let Some(job) = claim(ctx, run_id, agent.number()) else {
            tracing::debug!(run = run_id, checkpoint = agent.number(), "agent already running");
            continue;
        };
        let next = if *status == CheckpointStatus::Regenerating { *status } else { CheckpointStatus::Running };
        ctx.store.with(|c| records::set_status(c, run_id, agent.number(), next, None))?;
        claimed.push((*agent, feedback.clone(), job));
    }
    if fresh_wave && !to_start.is_empty() {
        emit(
            ctx,
            IdentityEvent::WaveStarted {
                character_id: run_id.to_string(),
                wave,
                agents: in_wave.iter().map(|c| c.agent.name().to_string()).collect(),
            },
        );
    }
    for (agent, feedback, job) in claimed {
        spawn_agent(ctx, &run, agent, feedback, job);
    }
    // Nothing running for this run any more: the user has the next move.
    let after = ctx.store.with(|c| records::checkpoints(c, run_id))?;
    if !after.iter().any(|c| c.status.is_working() || is_running(ctx, run_id, c.number)) {
        let with = |s: CheckpointStatus| after.iter().filter(|c| c.status == s).map(|c| c.number).collect::<Vec<_>>();
        emit(
            ctx,
            IdentityEvent::Idle {
                character_id: run_id.to_string(),
                awaiting_approval: with(CheckpointStatus::AwaitingApproval),
                stale: with(CheckpointStatus::Stale),
                failed: with(CheckpointStatus::Failed),
            },
        );
    }
    Ok(())
}

/// Register checkpoint `number`'s agent as running, or `None` when it already is. Done
/// before its status says it works (and before its task starts), so no other thread sees
/// the checkpoint as interrupted, and a cancel sent the moment it reads as running finds
/// the job. The token reaches the agent's model calls, so `cancel` (here or from another
/// process) stops the agent mid-generation, or before it begins.
fn claim(ctx: &Context, run_id: &str, number: u8) -> Option<(CancelToken, crate::context::Job)> {
    let cancel = CancelToken::new();
    ctx.jobs.try_start(job(run_id, number), &cancel).map(|job| (cancel, job))
}

fn spawn_agent(ctx: &Arc<Context>, run: &RunRecord, agent: Agent, feedback: Option<String>, (cancel, job): (CancelToken, crate::context::Job)) {
    let ctx = ctx.clone();
    let run = run.clone();
    ctx.runtime.clone().spawn_blocking(move || {
        let number = agent.number();
        let outcome = run_agent(&ctx, &run, agent, feedback.as_deref(), &cancel);
        // The agent stays in the running set until its follow-up (approval or advance)
        // is done, so no other thread declares the run idle while this checkpoint
        // still waits for its automatic approval.
        match outcome {
            Ok(()) => {
                if run.auto_approve {
                    if let Err(e) = approve(&ctx, &run.id, number) {
                        emit(&ctx, IdentityEvent::Error { character_id: run.id.clone(), checkpoint: Some(number), message: e.to_string() });
                    }
                } else {
                    advance(&ctx, &run.id);
                }
            }
            Err(_) if cancel.is_cancelled() => {
                // Cancelled by the game master: not a failure of the run. The checkpoint
                // waits for a re-run; nothing of the cancelled draw is kept.
                let message = format!("Checkpoint {number} was cancelled; re-run it to generate it again");
                let _ = ctx.store.with(|c| records::set_status(c, &run.id, number, CheckpointStatus::Failed, Some(&message)));
                emit(&ctx, IdentityEvent::Cancelled { character_id: run.id.clone(), checkpoint: number });
            }
            Err(e) => {
                // The predecessor's words, and the run marked failed until a re-run.
                let message = format!("{FAILED_PREFIX}{e}");
                let _ = ctx.store.transaction(|tx| {
                    records::set_status(tx, &run.id, number, CheckpointStatus::Failed, Some(&message))?;
                    records::finish_run(tx, &run.id, RunStatus::Failed, Some(&message))
                });
                emit(&ctx, IdentityEvent::Error { character_id: run.id.clone(), checkpoint: Some(number), message });
                advance(&ctx, &run.id);
            }
        }
        drop(job);
        // Now that this agent is really done, the run may be idle.
        advance(&ctx, &run.id);
    });
}

/// One agent call: prompt from the approved knowledge base (and the feedback with the
/// version it answers), structured output, then the new version stored for approval.
fn run_agent(ctx: &Arc<Context>, run: &RunRecord, agent: Agent, feedback: Option<&str>, cancel: &CancelToken) -> Result<(), IdentityError> {
    let number = agent.number();
    let started_at = now_rfc3339();
    let started = Instant::now();
    let (checkpoints, current) =
        ctx.store.with(|c| Ok((records::checkpoints(c, &run.id)?, records::current_versions(c, &run.id)?)))?;
    // The knowledge base: approved outputs of every earlier wave.
    let knowledge: BTreeMap<u8, &VersionRecord> = checkpoints
        .iter()
        .filter(|c| c.wave < agent.wave() && c.status == CheckpointStatus::Approved)
        .filter_map(|c| current.get(&c.number).map(|v| (c.number, v)))
        .collect();
    let previous = feedback.and_then(|_| current.get(&number));
    let version = ctx.store.with(|c| records::versions(c, &run.id, number))?.last().map(|v| v.version).unwrap_or(0) + 1;
    emit(ctx, IdentityEvent::AgentStarted { character_id: run.id.clone(), checkpoint: number, agent, version });

    let config = ctx.config();
    let profile = match &run.profile {
        Some(name) => config.profile(name).ok_or_else(|| IdentityError::Invalid(format!("no profile named {name:?}")))?,
        None => config.profile_for_role(&agent.role()).map_err(|e| IdentityError::Invalid(e.to_string()))?,
    };
    let client = LlmClient::from_profile(profile, Some(&ctx.store))?.for_agent(&agent.role()).doing(format!("{}, checkpoint {number}", run.name));
    let options = StructuredOptions { content: content_rules(run, agent, Some("/narrative"), "/structured"), ..StructuredOptions::default() };
    let base = profile.kind == crate::llm::ProviderKind::Local;
    let request = if base {
        // The embedded model's workbook page is its own (`identity::base`).
        build_request(run, agent, &knowledge, feedback, previous)?
    } else {
        let schema = agent.output_schema();
        let appended = crate::llm::structured::schema_instruction(&schema, &options)
            .map_or(0, |text| crate::llm::tokens::estimate(&format!("\n\n{text}")));
        let format = crate::llm::ResponseFormat::JsonSchema { name: String::new(), schema };
        fit_request(run, agent, &knowledge, feedback, previous, profile, &format, appended)?
    };
    let prompt = serde_json::to_value(&request.messages).unwrap_or_default();
    let run_id = run.id.clone();
    let sink_ctx = ctx.clone();
    let on_token = move |text: &str| {
        sink_ctx.emit(IdentityEvent::Token { character_id: run_id.clone(), checkpoint: number, text: text.to_string() })
    };
    let call = CallContext::with_tokens(cancel, &on_token);
    // A base model (the embedded default) is given a worked example and asked for the
    // narrative first; see `identity::base`.
    let asking = Asking {
        client: &client,
        run,
        agent,
        knowledge: &knowledge,
        feedback,
        request,
        options: &options,
        call,
        base,
    };
    let asked = match agent {
        Agent::Personality => asking.ask::<PersonalityOutput>(),
        Agent::BackstoryMotivation => asking.ask::<BackstoryOutput>(),
        Agent::VoiceDialogue => asking.ask::<VoiceOutput>(),
        Agent::PhysicalDescription => asking.ask::<PhysicalOutput>(),
        Agent::StoryArc => asking.ask::<StoryArcOutput>(),
        Agent::Relationships => asking.ask::<RelationshipsOutput>(),
        Agent::FinalConsolidation => asking.ask::<ConsolidationOutput>(),
    };
    let (narrative, mut structured, attempts, usage) = match asked {
        Ok(asked) => asked,
        Err(IdentityError::Agent { message, attempts })
            if !cancel.is_cancelled() && attempts.as_array().is_some_and(|a| !a.is_empty()) =>
        {
            // A failed draw that got replies is kept as a version that is never put up for
            // approval: its refused replies stay for the inspector, and the tokens billed
            // for them count in the run's total. (A call that got no reply left nothing.)
            let spent: Vec<crate::llm::structured::StructuredAttempt> = serde_json::from_value(attempts.clone()).unwrap_or_default();
            let record = VersionRecord {
                number,
                version,
                narrative: String::new(),
                structured: serde_json::Value::Null,
                attempts: attempts.clone(),
                prompt,
                feedback: feedback.map(str::to_string),
                based_on: knowledge.iter().map(|(n, v)| (*n, v.version)).collect(),
                usage: crate::llm::structured::total_usage(&spent),
                wall_ms: started.elapsed().as_millis() as u64,
                started_at,
                created_at: now_rfc3339(),
            };
            if let Err(e) = ctx.store.with(|c| records::insert_failed_version(c, &run.id, &record)) {
                tracing::warn!(run = %run.id, checkpoint = number, error = %e, "could not keep the failed draw");
            }
            return Err(IdentityError::Agent { message, attempts });
        }
        Err(e) => return Err(e),
    };
    if agent == Agent::FinalConsolidation {
        // Checkpoint 7 shows the whole profile the user is about to accept.
        let consolidation: ConsolidationOutput = serde_json::from_value(structured.clone())
            .map_err(|e| IdentityError::Invalid(format!("consolidation output: {e}")))?;
        let mut so_far = current.clone();
        so_far.remove(&7);
        let profile = assemble_profile(run, &so_far, &consolidation, usage.total() as u64)?;
        structured = serde_json::to_value(profile).map_err(|e| IdentityError::Invalid(e.to_string()))?;
    }
    let record = VersionRecord {
        number,
        version,
        narrative,
        structured,
        attempts,
        prompt,
        feedback: feedback.map(str::to_string),
        based_on: knowledge.iter().map(|(n, v)| (*n, v.version)).collect(),
        usage,
        wall_ms: started.elapsed().as_millis() as u64,
        started_at,
        created_at: now_rfc3339(),
    };
    let stale = {
        let _guard = transitions().lock().unwrap_or_else(|p| p.into_inner());
        ctx.store.transaction(|tx| {
            records::insert_version(tx, &run.id, &record)?;
            // An earlier checkpoint was re-opened while this agent ran.
            let now = records::checkpoints(tx, &run.id)?;
            let current = records::current_versions(tx, &run.id)?;
            let stale = record.based_on.iter().any(|(n, v)| {
                let approved = now.iter().any(|c| c.number == *n && c.status == CheckpointStatus::Approved);
                !approved || current.get(n).map(|cv| cv.version) != Some(*v)
            });
            if stale {
                records::set_status(tx, &run.id, number, CheckpointStatus::Stale, None)?;
            }
            Ok(stale)
        })?
    };
    emit(
        ctx,
        IdentityEvent::CheckpointReady {
            character_id: run.id.clone(),
            checkpoint_number: number,
            agent,
            version,
            message: format!("{} analysis complete. Awaiting approval.", agent.name()),
            tokens: usage.total(),
            wall_ms: record.wall_ms,
        },
    );
    if stale {
        emit(ctx, IdentityEvent::CheckpointStale { character_id: run.id.clone(), checkpoint_number: number });
    }
    Ok(())
}


/// One agent call, with everything either way of asking needs.
struct Asking<'a> {
    client: &'a LlmClient,
    run: &'a RunRecord,
    agent: Agent,
    knowledge: &'a BTreeMap<u8, &'a VersionRecord>,
    feedback: Option<&'a str>,
    request: crate::llm::ChatRequest,
    options: &'a StructuredOptions,
    call: CallContext<'a>,
    /// A base model (the embedded default): a workbook page instead of instructions
    /// (see `identity::base`).
    base: bool,
}

impl Asking<'_> {
    fn ask<T>(self) -> Result<Asked, IdentityError>
    where
        T: DeserializeOwned + schemars::JsonSchema + serde::Serialize,
    {
        if self.base {
            return super::base::ask::<T>(self.client, self.run, self.agent, self.knowledge, self.feedback, self.call);
        }
        match complete_structured::<AgentOutput<T>>(self.client, self.request, self.options, self.call) {
            Ok(out) => {
                let structured = serde_json::to_value(&out.value.structured).map_err(|e| IdentityError::Invalid(e.to_string()))?;
                let attempts = serde_json::to_value(&out.attempts).unwrap_or_default();
                Ok((out.value.narrative, structured, attempts, out.usage))
            }
            Err(e) => Err(IdentityError::Agent { message: e.to_string(), attempts: serde_json::to_value(e.attempts()).unwrap_or_default() }),
        }
    }
}

/// Build the final profile from the approved checkpoints 1–6 and the consolidation.
pub fn assemble_profile(
    run: &RunRecord,
    versions: &BTreeMap<u8, VersionRecord>,
    consolidation: &ConsolidationOutput,
    extra_tokens: u64,
) -> Result<FinalCharacterProfile, IdentityError> {
    fn take<T: DeserializeOwned>(versions: &BTreeMap<u8, VersionRecord>, agent: Agent) -> Result<T, IdentityError> {
        let v = versions
            .get(&agent.number())
            .ok_or_else(|| IdentityError::Invalid(format!("checkpoint {} has no approved output", agent.number())))?;
        serde_json::from_value(v.structured.clone())
            .map_err(|e| IdentityError::Invalid(format!("stored {} output: {e}", agent.name())))
    }
    let relationships: RelationshipsOutput = take(versions, Agent::Relationships)?;
    let total_tokens = versions.values().filter(|v| v.number != 7).map(|v| v.usage.total() as u64).sum::<u64>() + extra_tokens;
    let started = chrono::DateTime::parse_from_rfc3339(&run.created_at).ok();
    let minutes = started.map(|s| (chrono::Utc::now() - s.with_timezone(&chrono::Utc)).num_milliseconds() as f64 / 60_000.0);
    Ok(FinalCharacterProfile {
        character_id: run.id.clone(),
        name: run.name.clone(),
        version: "1.0".into(),
        completed_at: now_rfc3339(),
        overview: consolidation.overview.clone(),
        visual: Visual { images: Vec::new(), style_notes: consolidation.style_notes.clone() },
        psychology: take(versions, Agent::Personality)?,
        physical_presence: take(versions, Agent::PhysicalDescription)?,
        voice: take(versions, Agent::VoiceDialogue)?,
        backstory_motivation: take(versions, Agent::BackstoryMotivation)?,
        narrative_arc: take(versions, Agent::StoryArc)?,
        relationships: relationships.relationships,
        metadata: ProfileMetadata {
            mode: run.mode,
            development_time_minutes: (minutes.unwrap_or(0.0) * 100.0).round() / 100.0,
            total_checkpoints: 7,
            regenerations: run.regenerations,
            total_tokens,
        },
    })
}

/// All seven approved: store the character and close the run, in one transaction.
fn complete(ctx: &Arc<Context>, run: &RunRecord) -> Result<(), IdentityError> {
    let current = ctx.store.with(|c| records::current_versions(c, &run.id))?;
    let final_version = current.get(&7).ok_or_else(|| IdentityError::Invalid("no final consolidation".into()))?;
    let consolidation = ConsolidationOutput {
        overview: serde_json::from_value(final_version.structured["overview"].clone())
            .map_err(|e| IdentityError::Invalid(format!("stored final profile: {e}")))?,
        style_notes: final_version.structured["visual"]["style_notes"].as_str().unwrap_or_default().to_string(),
    };
    let mut upstream = current.clone();
    upstream.remove(&7);
    let mut profile = assemble_profile(run, &upstream, &consolidation, final_version.usage.total() as u64)?;
    profile.metadata.regenerations = run.regenerations;
    // Every token spent on the run, not only the versions kept.
    profile.metadata.total_tokens = ctx.store.with(|c| records::run_tokens(c, &run.id))?;
    // The agents' narratives are kept with the character (for its card and its chat
    // sheet, `character::profile`); the seed's profile is served without them.
    let mut stored = serde_json::to_value(&profile).map_err(|e| IdentityError::Invalid(e.to_string()))?;
    let narratives: serde_json::Map<String, serde_json::Value> = upstream
        .values()
        .filter(|v| !v.narrative.trim().is_empty())
        .filter_map(|v| Agent::from_number(v.number).map(|a| (a.name().to_string(), serde_json::Value::String(v.narrative.clone()))))
        .collect();
    stored[super::export::NARRATIVES] = serde_json::Value::Object(narratives);
    // A name another character took while the run went on (another run, a rename, an
    // import) is not refused here — that would strand seven approved checkpoints — the
    // character is saved under the first free "Name (2)", and the completion says so.
    let saved_as = ctx.store.transaction(|tx| {
        let name = crate::character::free_name(tx, &run.name, &run.id)?;
        if name != run.name {
            stored["name"] = serde_json::Value::String(name.clone());
            records::rename_run(tx, &run.id, &name)?;
        }
        let profile_json = serde_json::to_string(&stored).map_err(|e| crate::store::StoreError::Corrupt(e.to_string()))?;
        crate::character::save_profile(tx, &run.id, &name, &profile_json)?;
        records::finish_run(tx, &run.id, RunStatus::Completed, None)?;
        Ok(name)
    })?;
    let message = if saved_as == run.name {
        "All agents completed. Character profile ready.".to_string()
    } else {
        format!("All agents completed. Character profile ready, saved as {saved_as:?}: another character took the name {:?} while the run went on.", run.name)
    };
    emit(ctx, IdentityEvent::CharacterComplete { character_id: run.id.clone(), message, total_tokens: profile.metadata.total_tokens });
    Ok(())
}

fn checkpoint(ctx: &Context, run_id: &str, number: u8) -> Result<CheckpointRecord, IdentityError> {
    let checkpoints = ctx.store.with(|c| records::checkpoints(c, run_id))?;
    // Every run has its seven: none at all means there is no such run.
    if checkpoints.is_empty() {
        return Err(IdentityError::Store(crate::store::StoreError::NotFound(format!("identity run {run_id:?} (`identity list` shows the runs)"))));
    }
    checkpoints.into_iter().find(|c| c.number == number).ok_or_else(|| IdentityError::Invalid(format!("no checkpoint {number} (checkpoints are 1–7)")))
}

/// What approving or rejecting a checkpoint whose agent died with its process is told.
fn interrupted(run_id: &str, number: u8) -> IdentityError {
    IdentityError::Invalid(format!(
        "checkpoint {number} was interrupted: the process running it stopped before it finished; `identity resume {run_id}` (or opening the workbench) runs it again"
    ))
}

/// Approve the current version of a checkpoint awaiting approval.
pub fn approve(ctx: &Arc<Context>, run_id: &str, number: u8) -> Result<(), IdentityError> {
    let wave_done = {
        let _guard = transitions().lock().unwrap_or_else(|p| p.into_inner());
        let cp = checkpoint(ctx, run_id, number)?;
        if cp.status.is_working() && !is_running(ctx, run_id, number) {
            return Err(interrupted(run_id, number));
        }
        if cp.status != CheckpointStatus::AwaitingApproval {
            return Err(IdentityError::Invalid(format!(
                "checkpoint {number} is {}, not awaiting approval",
                cp.status.as_str()
            )));
        }
        ctx.store.with(|c| records::set_status(c, run_id, number, CheckpointStatus::Approved, None))?;
        let all = ctx.store.with(|c| records::checkpoints(c, run_id))?;
        let wave: Vec<&CheckpointRecord> = all.iter().filter(|c| c.wave == cp.wave).collect();
        wave.iter().all(|c| c.status == CheckpointStatus::Approved).then(|| {
            (cp.wave, wave.iter().map(|c| c.agent.name().to_string()).collect::<Vec<_>>())
        })
    };
    emit(ctx, IdentityEvent::CheckpointApproved { character_id: run_id.to_string(), checkpoint_number: number });
    // As the predecessor sent them: waves 1–3 complete with the next wave (3 → "final");
    // the consolidation (wave 4) ends with `character_complete` alone.
    if let Some((wave, agents)) = wave_done.filter(|(wave, _)| *wave < 4) {
        let next_wave = if wave < 3 { serde_json::json!(wave + 1) } else { serde_json::json!("final") };
        emit(ctx, IdentityEvent::WaveComplete { character_id: run_id.to_string(), wave, agents_completed: agents, next_wave });
    }
    advance(ctx, run_id);
    Ok(())
}

/// Send a checkpoint back: the agent runs again with the feedback and the rejected
/// version in its prompt.
pub fn reject(ctx: &Arc<Context>, run_id: &str, number: u8, feedback: &str) -> Result<(), IdentityError> {
    let feedback = feedback.trim();
    if feedback.is_empty() {
        return Err(IdentityError::Invalid("rejecting needs feedback for the agent".into()));
    }
    let _guard = transitions().lock().unwrap_or_else(|p| p.into_inner());
    let cp = checkpoint(ctx, run_id, number)?;
    if cp.status.is_working() && !is_running(ctx, run_id, number) {
        return Err(interrupted(run_id, number));
    }
    if !matches!(cp.status, CheckpointStatus::AwaitingApproval | CheckpointStatus::Stale | CheckpointStatus::Failed) {
        return Err(IdentityError::Invalid(format!("checkpoint {number} is {} and cannot be rejected", cp.status.as_str())));
    }
    let Some(job) = claim(ctx, run_id, number) else {
        return Err(IdentityError::Invalid(format!("checkpoint {number} is already running")));
    };
    let run = ctx.store.transaction(|tx| {
        records::set_status(tx, run_id, number, CheckpointStatus::Regenerating, None)?;
        records::set_pending_feedback(tx, run_id, number, Some(feedback))?;
        if cp.status == CheckpointStatus::Failed {
            // A failed checkpoint tried again with feedback is a retry, as `rerun` is: the
            // run is in progress again. It is no regeneration (the predecessor counted an
            // output sent back with feedback, and a failed draw left no output to send
            // back; a failed regeneration was counted when its version was rejected).
            reopen_unless_failed(tx, run_id)?;
        } else {
            records::bump_regenerations(tx, run_id)?;
        }
        records::load_run(tx, run_id)
    })?;
    emit(
        ctx,
        IdentityEvent::CheckpointRejected { character_id: run_id.to_string(), checkpoint_number: number, feedback: feedback.to_string() },
    );
    // Claimed before its status changed and started under the transition lock, so no
    // concurrent `advance` mistakes the regenerating checkpoint for an interrupted one.
    spawn_agent(ctx, &run, cp.agent, Some(feedback.to_string()), job);
    Ok(())
}

/// Take an approved checkpoint back to awaiting approval; every later checkpoint that
/// read it becomes stale.
pub fn reopen(ctx: &Arc<Context>, run_id: &str, number: u8) -> Result<Vec<u8>, IdentityError> {
    let stale = {
        let _guard = transitions().lock().unwrap_or_else(|p| p.into_inner());
        let cp = checkpoint(ctx, run_id, number)?;
        if cp.status != CheckpointStatus::Approved {
            return Err(IdentityError::Invalid(format!("checkpoint {number} is {}, not approved", cp.status.as_str())));
        }
        ctx.store.transaction(|tx| {
            records::set_status(tx, run_id, number, CheckpointStatus::AwaitingApproval, None)?;
            records::reopen_run(tx, run_id)?;
            let current = records::current_versions(tx, run_id)?;
            let mut stale = Vec::new();
            for later in records::checkpoints(tx, run_id)? {
                let read_it = current.get(&later.number).is_some_and(|v| v.based_on.contains_key(&number));
                if read_it && matches!(later.status, CheckpointStatus::Approved | CheckpointStatus::AwaitingApproval) {
                    records::set_status(tx, run_id, later.number, CheckpointStatus::Stale, None)?;
                    stale.push(later.number);
                }
            }
            Ok(stale)
        })?
    };
    emit(ctx, IdentityEvent::CheckpointReopened { character_id: run_id.to_string(), checkpoint_number: number });
    for n in &stale {
        emit(ctx, IdentityEvent::CheckpointStale { character_id: run_id.to_string(), checkpoint_number: *n });
    }
    advance(ctx, run_id);
    Ok(stale)
}

/// The predecessor's words for a failed run, which start a failed checkpoint's error.
const FAILED_PREFIX: &str = "Character development failed: ";

/// A failed run is in progress again once none of its checkpoints is failed any more
/// (the caller just set the one being tried again running or queued).
fn reopen_unless_failed(tx: &rusqlite::Connection, run_id: &str) -> Result<(), crate::store::StoreError> {
    let run = records::load_run(tx, run_id)?;
    // A cancelled checkpoint waits as failed too, but never failed the run.
    let still_failed = records::checkpoints(tx, run_id)?
        .iter()
        .any(|c| c.status == CheckpointStatus::Failed && c.error.as_deref().is_some_and(|e| e.starts_with(FAILED_PREFIX)));
    if run.status == RunStatus::Failed && !still_failed {
        records::reopen_run(tx, run_id)?;
    }
    Ok(())
}

/// Re-run a stale or failed checkpoint as it is (no feedback).
pub fn rerun(ctx: &Arc<Context>, run_id: &str, number: u8) -> Result<(), IdentityError> {
    {
        let _guard = transitions().lock().unwrap_or_else(|p| p.into_inner());
        let cp = checkpoint(ctx, run_id, number)?;
        if !matches!(cp.status, CheckpointStatus::Stale | CheckpointStatus::Failed) {
            return Err(IdentityError::Invalid(format!("checkpoint {number} is {}; only stale or failed ones re-run", cp.status.as_str())));
        }
        ctx.store.transaction(|tx| {
            records::set_status(tx, run_id, number, CheckpointStatus::Queued, None)?;
            // A failed run is in progress again once its checkpoint runs again.
            reopen_unless_failed(tx, run_id)
        })?;
    }
    advance(ctx, run_id);
    Ok(())
}

/// Cancel a run's running agents (one checkpoint, or all), in this process or the one
/// running them. The checkpoints that were running.
pub fn cancel(ctx: &Context, run_id: &str, number: Option<u8>) -> Result<Vec<u8>, IdentityError> {
    let run = ctx.store.with(|c| records::load_run(c, run_id))?;
    let numbers: Vec<u8> = match number {
        Some(n) => vec![n],
        None => (1..=7).collect(),
    };
    Ok(numbers.into_iter().filter(|n| ctx.jobs.cancel(&job(&run.id, *n))).collect())
}

/// Run `delete` (which deletes `run_id`'s run, or the character it became) with the run's
/// agents cancelled first (here or in the process running them) and every transition
/// held off until it is done: no agent of the run is started meanwhile, and none that
/// was finishing makes the run a character (`complete` runs under the same lock, and its
/// transaction fails once the run is gone). A cancelled agent's follow-up only says so.
pub fn while_stopped<T>(ctx: &Context, run_id: &str, delete: impl FnOnce() -> T) -> T {
    let _guard = transitions().lock().unwrap_or_else(|p| p.into_inner());
    for number in 1..=7 {
        ctx.jobs.cancel(&job(run_id, number));
    }
    delete()
}

/// Keep a stale checkpoint's version as it is: it goes back to awaiting approval.
pub fn keep(ctx: &Arc<Context>, run_id: &str, number: u8) -> Result<(), IdentityError> {
    {
        let _guard = transitions().lock().unwrap_or_else(|p| p.into_inner());
        let cp = checkpoint(ctx, run_id, number)?;
        if cp.status != CheckpointStatus::Stale {
            return Err(IdentityError::Invalid(format!("checkpoint {number} is {}, not stale", cp.status.as_str())));
        }
        ctx.store.with(|c| records::set_status(c, run_id, number, CheckpointStatus::AwaitingApproval, None))?;
    }
    advance(ctx, run_id);
    Ok(())
}

/// The game master's own version of a checkpoint awaiting approval: `structured` (and
/// the narrative, when given) replace the agent's, as a new version put up for approval.
/// Checked against the agent's schema first; refused with the field named. The agent's
/// versions stay in the history.
pub fn edit(ctx: &Arc<Context>, run_id: &str, number: u8, narrative: Option<String>, structured: serde_json::Value) -> Result<u32, IdentityError> {
    let version = {
        let _guard = transitions().lock().unwrap_or_else(|p| p.into_inner());
        let cp = checkpoint(ctx, run_id, number)?;
        if cp.status != CheckpointStatus::AwaitingApproval {
            return Err(IdentityError::Invalid(format!(
                "checkpoint {number} is {}: only a version awaiting approval can be edited",
                cp.status.as_str()
            )));
        }
        let current = ctx
            .store
            .with(|c| records::version(c, run_id, number, cp.current_version))?
            .ok_or_else(|| IdentityError::Invalid(format!("checkpoint {number} has no version to edit")))?;
        let narrative = narrative.unwrap_or_else(|| current.narrative.clone());
        let whole = serde_json::json!({ "narrative": narrative, "structured": structured });
        let errors = crate::llm::structured::validate(&cp.agent.output_schema(), &whole);
        if let Some(first) = errors.first() {
            let field = first.path.trim_start_matches('/').replace('/', ".");
            return Err(IdentityError::Invalid(format!(
                "the edit of checkpoint {number} breaks its schema at {}: {}{}",
                if field.is_empty() { "the top level".to_string() } else { field },
                first.message,
                if errors.len() > 1 { format!(" (and {} more)", errors.len() - 1) } else { String::new() }
            )));
        }
        let now = crate::store::now_rfc3339();
        let version = ctx.store.with(|c| records::versions(c, run_id, number))?.iter().map(|v| v.version).max().unwrap_or(0) + 1;
        let record = VersionRecord {
            number,
            version,
            narrative,
            structured,
            attempts: serde_json::json!([]),
            prompt: serde_json::json!({ "edited_by": "game master", "from_version": current.version }),
            feedback: Some(format!("edited by hand from version {}", current.version)),
            based_on: current.based_on.clone(),
            usage: Default::default(),
            wall_ms: 0,
            started_at: now.clone(),
            created_at: now,
        };
        ctx.store.transaction(|tx| records::insert_version(tx, run_id, &record))?;
        version
    };
    let agent = Agent::from_number(number).ok_or_else(|| IdentityError::Invalid(format!("no checkpoint {number}")))?;
    emit(
        ctx,
        IdentityEvent::CheckpointReady {
            character_id: run_id.to_string(),
            checkpoint_number: number,
            agent,
            version,
            message: format!("{}: your edit is version {version}. Awaiting approval.", agent.name()),
            tokens: 0,
            wall_ms: 0,
        },
    );
    Ok(version)
}
