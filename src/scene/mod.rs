//! The scene and campaign engine: worlds, campaigns, arcs and scenes, and the round
//! in which a Director picks who acts, characters act in turn, and the Director
//! reconciles the state before everything is saved at once.
//!
//! Invariant: a round is in the store whole or not at all (see [`round`]), and every
//! agent call keeps the budget ledger of its context envelope with the round.

pub mod author;
pub mod authoring;
pub mod lorebooks;
pub mod demo;
pub mod envelope;
pub mod lore;
pub mod model;
mod narration;
mod prose;
pub mod preview;
pub mod recall;
pub mod records;
pub mod round;
pub mod summary;
pub mod transcript;
pub mod alternatives;

use crate::context::{Context, Reply};
use crate::llm::CancelToken;
pub use crate::config::SceneConfig;
use model::{CharacterState, Conflict, SceneMessage, SceneSummary, SceneView};
use serde::Serialize;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum SceneError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Llm(#[from] crate::llm::LlmError),
    #[error(transparent)]
    Template(#[from] crate::prompting::TemplateError),
    #[error("the {agent} failed: {message}")]
    Agent { agent: String, message: String },
    #[error("a round is already running in scene {0} (wait for it, or stop it with `lorekeeper scene cancel {0}`)")]
    Busy(String),
    /// The game master's words are never cut, so an input that alone fills most of a
    /// model's context cannot be played (the same limit as a chat message).
    #[error("the message is too long: {tokens} tokens, more than half of the {context} the {role} profile's context holds; shorten or split it")]
    InputTooLong { tokens: u32, role: &'static str, context: u32 },
    /// The sender named the round it acts on and the scene's last one is another:
    /// another process (or window) changed the scene since the sender looked.
    #[error("the scene changed since you looked ({0}); it has been reloaded")]
    Stale(String),
    #[error("{0}")]
    Invalid(String),
}

impl SceneError {
    pub fn fault(&self) -> crate::context::Fault {
        use crate::context::Fault;
        use crate::store::StoreError;
        match self {
            SceneError::Busy(_) => Fault::Busy,
            SceneError::InputTooLong { .. } => Fault::TooLong,
            SceneError::Stale(_) | SceneError::Store(StoreError::Conflict(_)) => Fault::Conflict,
            SceneError::Invalid(_) | SceneError::Store(StoreError::Invalid(_)) => Fault::Request,
            SceneError::Store(StoreError::NotFound(_)) => Fault::NotFound,
            SceneError::Llm(_) | SceneError::Agent { .. } => Fault::Provider,
            SceneError::Store(_) | SceneError::Template(_) => Fault::Library,
        }
    }
}

#[derive(Debug, Clone)]
pub enum SceneCommand {
    /// Play a round: with the user's message, or `None` to continue. `force` names
    /// characters who act this round whatever the Director decides.
    /// With `review`, the round pauses after Director pass 1 ([`SceneEvent::PlanReview`])
    /// until [`SceneCommand::SubmitPlan`] sends the plan back, edited or as it was.
    Round { scene: String, input: Option<String>, force: Vec<String>, review: bool },
    /// The plan for the round waiting in `scene` (after [`SceneEvent::PlanReview`]).
    SubmitPlan { scene: String, plan: model::DirectorPlan },
    /// Take back the last round: messages, states, trackers, facts, time, lore timers
    /// and memories as they were before it. With `expect_round` (the last round the
    /// sender shows) it is refused when the scene's last round is another
    /// ([`SceneError::Stale`]): a view another process made stale never takes back a
    /// round its user has not seen.
    Undo { scene: String, expect_round: Option<u32> },
    /// Play the last round again from the same input; the old round is kept as an
    /// alternative to switch back to.
    Redo { scene: String },
    /// Report the rounds kept by redos as [`SceneEvent::Alternatives`].
    Alternatives { scene: String },
    /// Play a kept round in place of the round with its number (which is kept in turn).
    UseAlternative { scene: String, id: String },
    /// Change the text of a transcript message (its memory follows).
    EditMessage { scene: String, number: u32, text: String },
    /// Take a message out of the transcript (its memory goes; the turns after it are
    /// embedded again without it). The round's state stays: undo takes back a round.
    DeleteMessage { scene: String, number: u32 },
    /// Mute (or unmute) a cast member: the Director cannot pick a muted character.
    Mute { scene: String, character: String, muted: bool },
    /// Add a character to a scene's cast (absent: the Director brings them in), or take
    /// one out (`add` false). Refused while a round runs on the scene.
    Cast { scene: String, character: String, add: bool },
    /// Stop the round running in `scene` (an id or name); nothing of it is committed and
    /// the round ends with [`SceneEvent::RoundCancelled`].
    Cancel { scene: String },
    /// Report a scene's state as [`SceneEvent::State`].
    State { scene: String },
    List,
    /// A new scene in an arc (an id, or a name only one arc has). The cast is by name or
    /// id, the campaign's cast when empty; `active` is who is present at the start, the
    /// whole cast when `None`.
    New { arc: String, name: String, description: String, notes: String, cast: Vec<String>, active: Option<Vec<String>> },
    /// Build, change or remove worlds, campaigns, arcs, scenes, personas, lore links
    /// and state by hand.
    Author(author::AuthorCommand),
    /// Add the demo world if the library has no world yet.
    Demo,
    /// Report a scene's whole transcript as [`SceneEvent::Transcript`] (scrollback).
    Transcript { scene: String },
    /// Report the scene's state, recent transcript and last round as [`SceneEvent::Snapshot`].
    Snapshot { scene: String },
    /// Report which lore a round (the last one without `round`) fired and held back, as
    /// [`SceneEvent::Lore`].
    Lore { scene: String, round: Option<u32> },
    /// Report the candidates of `agent`'s next call as [`SceneEvent::Preview`]
    /// (`character`: a name or id for [`envelope::AgentKind::Character`]).
    Preview { scene: String, agent: envelope::AgentKind, character: Option<String> },
    /// The scene this front door shows (`None`: none): while it is watched, a change
    /// another process makes to it is said as [`SceneEvent::ChangedElsewhere`] within a
    /// couple of seconds ([`crate::watch`]). One per engine; the last wins.
    Watch { scene: Option<String> },
}

/// What the Director decided in one pass; serialised as the decision itself.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum DirectorDecision {
    Plan(Box<model::DirectorPlan>),
    Reconciliation(Box<model::Reconciliation>),
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum SceneEvent {
    SceneCreated { scene_id: String, name: String },
    RoundStarted { scene_id: String, round: u32, input: Option<String> },
    /// The round waits for the game master's version of the Director's plan
    /// ([`SceneCommand::SubmitPlan`]); the plan is as the Director made it, with muted
    /// characters taken out and forced ones put in.
    PlanReview { scene_id: String, round: u32, plan: model::DirectorPlan },
    /// The Director's accepted plan (pass 1) or reconciliation (pass 2).
    DirectorDecided { scene_id: String, round: u32, pass: u8, decision: DirectorDecision },
    CharacterStarted { scene_id: String, round: u32, character_id: String, name: String },
    /// The narrator starts; its fragments come as [`SceneEvent::Token`] with
    /// `character_id` `"narrator"`.
    NarratorStarted { scene_id: String, round: u32 },
    NarratorFinished { scene_id: String, round: u32, content: String },
    /// A streamed fragment of a character's (or the narrator's) reply.
    Token { scene_id: String, round: u32, character_id: String, text: String },
    /// What streamed for this character (or `"narrator"`) since it started is thrown
    /// away and drawn again: it was empty or copied its prompt (`reason`).
    Redrawn { scene_id: String, round: u32, character_id: String, name: String, reason: String },
    CharacterFinished { scene_id: String, round: u32, character_id: String, name: String, content: String, delta: CharacterState },
    /// A call of the round waits for the embedded model, which answers one call at a time
    /// and is busy with `holder` ("Tomas Reed, checkpoint 1", another scene's Director);
    /// `agent` is who waits ("the Director", a character's name, "the narrator", "the World
    /// agent"). Said once per holder, then with no `holder` once the call has the model
    /// (the Director's reply streams nothing, so its next event may be a while coming).
    Waiting { scene_id: String, round: u32, agent: String, holder: Option<String> },
    /// The round is committed: its messages as numbered in the store.
    RoundCompleted {
        scene_id: String,
        round: u32,
        messages: Vec<SceneMessage>,
        active: Vec<String>,
        conflicts: Vec<Conflict>,
        tokens: u64,
        /// What the user must hear beside the messages: a Director reconciliation that
        /// was dropped after its attempts, and what that left unapplied.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        notices: Vec<String>,
    },
    /// The World agent's accepted update.
    WorldDecided { scene_id: String, round: u32, decision: Box<model::WorldUpdate> },
    /// The running round stopped on [`SceneCommand::Cancel`]; nothing was saved.
    RoundCancelled { scene_id: String },
    /// Round `round` was taken back; the scene is as it was before it.
    RoundUndone { scene_id: String, round: u32 },
    Muted { scene_id: String, name: String, muted: bool },
    /// `name` joined the scene's cast (absent until the Director brings them in) or left it.
    CastChanged { scene_id: String, character_id: String, name: String, added: bool },
    /// A cancel was asked for; `running` says whether a round was running (in this
    /// process or another on the same library) to be stopped.
    CancelRequested { scene_id: String, running: bool },
    /// The rounds kept by redos, newest round first.
    Alternatives { scene_id: String, alternatives: Vec<alternatives::Alternative> },
    /// A kept round is played again as round `round`; `kept` is the round it replaced.
    AlternativeChosen { scene_id: String, round: u32, kept: Option<String> },
    /// A redo failed or was cancelled: the round it replaced is back as it was.
    RedoFailed { scene_id: String, round: u32, message: String },
    MessageEdited { scene_id: String, number: u32 },
    MessageDeleted { scene_id: String, number: u32 },
    /// The round about to be reported complete is followed by a summary of rounds 1 to
    /// `through_round`: [`SceneEvent::SummaryUpdated`] or [`SceneEvent::SummaryFailed`]
    /// comes after it (a front door that waits for the summary knows to).
    SummaryStarted { scene_id: String, through_round: u32 },
    /// The scene's summary now covers rounds 1 to `through_round`; `scene` is its name
    /// (an earlier scene's summary can be caught up by a later scene's round).
    SummaryUpdated { scene_id: String, scene: String, through_round: u32 },
    /// The summary could not be written; the round it followed is saved regardless.
    SummaryFailed { scene_id: String, message: String },
    State { view: Box<SceneView> },
    Scenes { scenes: Vec<SceneSummary> },
    DemoReady { scene_id: Option<String> },
    Snapshot { snapshot: Box<preview::SceneSnapshot> },
    Lore { scene_id: String, round: u32, lore: preview::RoundLore },
    /// Every message of a scene, oldest first.
    Transcript { scene_id: String, messages: Vec<SceneMessage> },
    Preview { preview: Box<preview::EnvelopePreview> },
    /// A command failed; `fault` says whose fault it was.
    Error { scene_id: Option<String>, message: String, fault: crate::context::Fault },
    /// Another process changed the watched scene (`scene_id`), or only other scenes
    /// (`None`: the scene list's and campaign tree's counts moved); read them again.
    ChangedElsewhere { scene_id: Option<String> },
}

pub fn handle(ctx: &Arc<Context>, command: SceneCommand) {
    handle_asked(ctx, command, None)
}

/// Where a scene command's answer goes: a scene event, or an authoring command's own
/// event. Both are views of the one reply its sender waits on, so the first answer wins.
#[derive(Debug, Clone)]
pub struct Answer {
    pub scene: Reply<SceneEvent>,
    pub author: Reply<author::AuthorEvent>,
}

/// [`handle`], answering `reply` with the event that settles the command: the first it
/// emits itself (`round_started` for a round, `round_undone`, `cast_changed`,
/// `authored` for an authoring command, …) or the error that refused it.
pub fn handle_asked(ctx: &Arc<Context>, command: SceneCommand, reply: Option<Answer>) {
    let ctx = ctx.clone();
    let (reply, author_reply) = match reply {
        Some(Answer { scene, author }) => (Some(scene), Some(author)),
        None => (None, None),
    };
    // The watch exists before the next command is spawned: commands run side by side,
    // and one sent after `Watch` must count as ours, not as another process's change.
    // Its place in line is taken now too: the last one sent wins.
    let ticket = matches!(command, SceneCommand::Watch { .. }).then(|| watch(&ctx).ticket());
    ctx.runtime.clone().spawn_blocking(move || {
        let subject = match &command {
            SceneCommand::Round { scene, .. }
            | SceneCommand::Undo { scene, .. }
            | SceneCommand::Redo { scene }
            | SceneCommand::SubmitPlan { scene, .. }
            | SceneCommand::Alternatives { scene }
            | SceneCommand::UseAlternative { scene, .. }
            | SceneCommand::Mute { scene, .. }
            | SceneCommand::Cast { scene, .. }
            | SceneCommand::EditMessage { scene, .. }
            | SceneCommand::DeleteMessage { scene, .. }
            | SceneCommand::Cancel { scene }
            | SceneCommand::State { scene }
            | SceneCommand::Snapshot { scene }
            | SceneCommand::Lore { scene, .. }
            | SceneCommand::Transcript { scene }
            | SceneCommand::Preview { scene, .. } => Some(scene.clone()),
            _ => None,
        };
        let run = || match (command, ticket) {
            (SceneCommand::Watch { scene }, Some(ticket)) => watch_scene(&ctx, ticket, scene),
            (command, _) => run_command(&ctx, command, reply.as_ref(), author_reply.as_ref()),
        };
        // Our own changes are told by our events, not by the watch.
        let outcome = match watching(&ctx) {
            Some(watch) => watch.ours(run),
            None => run(),
        };
        if let Err(e) = outcome {
            let stale = matches!(e, SceneError::Stale(_));
            let error = SceneEvent::Error { scene_id: subject.clone(), message: e.to_string(), fault: e.fault() };
            crate::context::report_failure(reply.as_ref(), error, e.fault(), |error| ctx.emit(error));
            // A refusal because the scene moved: every front door watching it reads it again.
            if stale {
                ctx.emit(SceneEvent::ChangedElsewhere { scene_id: subject });
            }
        }
    });
}

/// The watch of the scene a front door shows, once one asked for it.
fn watching(ctx: &Context) -> Option<Arc<crate::watch::Watch<records::SceneStanding>>> {
    ctx.service::<crate::watch::Watch<records::SceneStanding>>().lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// [`watching`], started on first use.
fn watch(ctx: &Context) -> Arc<crate::watch::Watch<records::SceneStanding>> {
    let slot = ctx.service::<crate::watch::Watch<records::SceneStanding>>();
    let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
    slot.get_or_insert_with(|| {
        let emitter = ctx.emitter::<SceneEvent>();
        crate::watch::Watch::start(&ctx.runtime, ctx.store.clone(), records::standing, move |subject, before, now| {
            let scene_id = (before.scene != now.scene).then(|| subject.map(str::to_string)).flatten();
            tracing::info!(scene = ?scene_id, "a scene changed in another process");
            emitter.send(SceneEvent::ChangedElsewhere { scene_id });
        })
    })
    .clone()
}

/// Watch `scene` (an id or name; `None`: only the library) from now on.
fn watch_scene(ctx: &Context, ticket: u64, scene: Option<String>) -> Result<(), SceneError> {
    let id = match scene {
        Some(s) => Some(ctx.store.with(|c| records::resolve_scene(c, &s))?),
        None => None,
    };
    watch(ctx).set(ticket, id);
    Ok(())
}

/// The scene `scene` names, held as if a round ran on it: a change by hand is refused
/// while a round runs (the round would close on a scene the change altered).
fn hold(ctx: &Context, scene: &str) -> Result<(String, crate::context::Job), SceneError> {
    let scene_id = ctx.store.with(|c| records::resolve_scene(c, scene))?;
    match ctx.jobs.try_start(round::job(&scene_id), &CancelToken::new()) {
        Some(job) => Ok((scene_id, job)),
        None => Err(SceneError::Busy(scene_id)),
    }
}

/// The memories kept round `id` writes when it is closed again (embedded now, outside
/// the swap's transaction).
fn kept_memories(ctx: &Context, recall: &recall::Recall, scene_id: &str, id: &str) -> Result<crate::memory::PreparedMemories, SceneError> {
    let (kept, first) = ctx.store.with(|c| {
        let kept = alternatives::peek(c, scene_id, id)?;
        let first = alternatives::first_number(c, scene_id, kept.round)?;
        Ok((kept, first))
    })?;
    let (memories, _) = recall.prepare(alternatives::memories(scene_id, first, &kept)).map_err(|e| SceneError::Invalid(e.to_string()))?;
    Ok(memories)
}

/// Redo the last round: keep it, take it back, and play it again from its input. When
/// the new round fails or is cancelled, the kept round is put back as it was. The scene
/// is held from the set-aside to the end, and the kept round is marked as a redo's until
/// then: should the process die in between, the next engine on the library puts it back
/// ([`recover_redos`]). `reply` hears the new round's `round_started`, or the error that
/// ended the redo before it started (the kept round is back then).
fn redo(ctx: &Arc<Context>, scene: &str, reply: Option<&Reply<SceneEvent>>) -> Result<(), SceneError> {
    let recall = recall::Recall::open(ctx);
    let cancel = CancelToken::new();
    let scene_id = ctx.store.with(|c| records::resolve_scene(c, scene))?;
    let job = ctx.jobs.try_start(round::job(&scene_id), &cancel).ok_or_else(|| SceneError::Busy(scene_id.clone()))?;
    let (kept, kept_id, write) = ctx.store.transaction(|tx| {
        let (kept, id, write) = alternatives::set_aside(tx, &scene_id)?;
        alternatives::mark_redo(tx, &id, true)?;
        Ok((kept, id, write))
    })?;
    if let Some(bank) = recall.bank() {
        bank.publish(write);
    }
    ctx.emit(SceneEvent::RoundUndone { scene_id: scene_id.clone(), round: kept.round });
    let outcome = round::run_held(ctx, Some(job), &scene_id, kept.input.clone(), Vec::new(), false, &cancel, reply);
    let failure = match outcome {
        Ok(_) => None,
        Err(_) if cancel.is_cancelled() => Some(("cancelled".to_string(), crate::context::Fault::Busy)),
        Err(e) => Some((e.to_string(), e.fault())),
    };
    match failure {
        Some((message, fault)) => {
            put_back(ctx, &recall, &scene_id, &kept_id)?;
            // Heard only when the new round never started (the first answer wins).
            let refusal = format!("the redo failed ({message}); round {} is back as it was", kept.round);
            crate::context::answer(reply, &SceneEvent::Error { scene_id: Some(scene_id.clone()), message: refusal, fault });
            ctx.emit(SceneEvent::RedoFailed { scene_id: scene_id.clone(), round: kept.round, message });
        }
        None => ctx.store.with(|c| alternatives::mark_redo(c, &kept_id, false))?,
    }
    let alternatives = ctx.store.with(|c| alternatives::list(c, &scene_id))?;
    ctx.emit(SceneEvent::Alternatives { scene_id, alternatives });
    Ok(())
}

/// Close kept round `kept_id` again as the scene's last round.
fn put_back(ctx: &Context, recall: &recall::Recall, scene_id: &str, kept_id: &str) -> Result<(), SceneError> {
    let memories = kept_memories(ctx, recall, scene_id, kept_id)?;
    let write = ctx.store.transaction(|tx| alternatives::restore(tx, scene_id, kept_id, memories))?;
    if let Some(bank) = recall.bank() {
        bank.publish(write);
    }
    Ok(())
}

/// Redos a dead process left unfinished: the kept round goes back where it was, unless
/// the new round was committed before the process died (then the redo is simply over).
/// A scene another live process is playing is left to it. Run when the engine starts.
pub fn recover_redos(ctx: &Arc<Context>) {
    let pending = match ctx.store.with(alternatives::pending_redos) {
        Ok(pending) => pending,
        Err(e) => {
            tracing::warn!(error = %e, "could not look for unfinished redos");
            return;
        }
    };
    for (scene_id, kept_id, round) in pending {
        let Some(_job) = ctx.jobs.try_start(round::job(&scene_id), &CancelToken::new()) else { continue };
        let recovered = (|| -> Result<bool, SceneError> {
            let rounds: u32 = ctx.store.with(|c| Ok(records::load_view(c, &scene_id)?.rounds))?;
            if rounds >= round {
                ctx.store.with(|c| alternatives::mark_redo(c, &kept_id, false))?;
                return Ok(false);
            }
            put_back(ctx, &recall::Recall::open(ctx), &scene_id, &kept_id)?;
            Ok(true)
        })();
        match recovered {
            Ok(true) => {
                tracing::info!(scene = %scene_id, round, "put back the round an interrupted redo had set aside");
                ctx.emit(SceneEvent::RedoFailed {
                    scene_id,
                    round,
                    message: "the process playing the redo stopped before it finished".into(),
                });
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(scene = %scene_id, error = %e, "could not put back the round of an interrupted redo"),
        }
    }
}

/// Write the scene's summary again through `through_round` from the transcript as it now
/// reads, after an edit forgot it (`through_round` 0: it did not). Called while the scene
/// is held, so the next round's prompts get the new summary; should the summariser fail,
/// those rounds are shown as they are (within the history's budget) and the next round
/// that closes summarises them again.
fn summarise_again(ctx: &Context, scene_id: &str, through_round: u32) {
    if through_round == 0 {
        return;
    }
    match summary::summarise(ctx, scene_id, through_round, &CancelToken::new()) {
        Ok(Some(through_round)) => ctx.emit(summary::updated(ctx, scene_id, through_round)),
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(scene = %scene_id, error = %e, "scene summary not written again after an edit");
            ctx.emit(SceneEvent::SummaryFailed { scene_id: scene_id.to_string(), message: e.to_string() });
        }
    }
}

fn run_command(
    ctx: &Arc<Context>,
    command: SceneCommand,
    reply: Option<&Reply<SceneEvent>>,
    author_reply: Option<&Reply<author::AuthorEvent>>,
) -> Result<(), SceneError> {
    let emit = |e: SceneEvent| {
        crate::context::answer(reply, &e);
        ctx.emit(e)
    };
    match command {
        SceneCommand::Round { scene, input, force, review } => {
            let cancel = CancelToken::new();
            match round::run(ctx, &scene, input, force, review, &cancel, reply) {
                Ok(_) => Ok(()),
                // However the stop surfaced (a cancelled stream, a structured call that
                // gave up), a cancelled round is reported as such, not as a failure.
                Err(_) if cancel.is_cancelled() => {
                    let scene_id = ctx.store.with(|c| records::resolve_scene(c, &scene)).unwrap_or(scene);
                    emit(SceneEvent::RoundCancelled { scene_id });
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
        SceneCommand::Cancel { scene } => {
            let scene_id = ctx.store.with(|c| records::resolve_scene(c, &scene))?;
            let running = round::cancel(ctx, &scene_id);
            if !running {
                // Finished meanwhile: its round_completed tells the rest.
                tracing::debug!(scene = %scene_id, "cancel: no round running");
            }
            emit(SceneEvent::CancelRequested { scene_id, running });
            Ok(())
        }
        SceneCommand::State { scene } => {
            let view = ctx.store.with(|c| records::load_view(c, &records::resolve_scene(c, &scene)?))?;
            emit(SceneEvent::State { view: Box::new(view) });
            Ok(())
        }
        SceneCommand::List => {
            emit(SceneEvent::Scenes { scenes: ctx.store.with(records::list_scenes)? });
            Ok(())
        }
        SceneCommand::New { arc, name, description, notes, cast, active } => author::in_order(ctx, || {
            if name.trim().is_empty() {
                return Err(SceneError::Invalid("a scene needs a name".into()));
            }
            let id = ctx.store.transaction(|tx| {
                let (arc, _) = authoring::resolve(tx, authoring::Level::Arc, &arc)?;
                let mut cast: Vec<String> = cast.iter().map(|c| records::resolve_character(tx, c)).collect::<Result<_, _>>()?;
                if cast.is_empty() {
                    let campaign: String = tx.query_row("SELECT campaign_id FROM arcs WHERE id = ?1", [&arc], |r| r.get(0))?;
                    cast = authoring::cast_of(tx, &campaign)?;
                }
                let active: Vec<String> = match active {
                    Some(names) => names.iter().map(|c| records::resolve_character(tx, c)).collect::<Result<_, _>>()?,
                    None => cast.clone(),
                };
                let id = records::create_scene(tx, &arc, name.trim(), &description, &cast, &active)?;
                if !notes.trim().is_empty() {
                    authoring::edit(tx, authoring::Level::Scene, &id, &authoring::Edit { notes: Some(notes.clone()), ..Default::default() })?;
                }
                Ok(id)
            })?;
            emit(SceneEvent::SceneCreated { scene_id: id, name });
            let tree = ctx.store.with(authoring::tree)?;
            ctx.emit(author::AuthorEvent::Tree { tree: Box::new(tree) });
            Ok(())
        }),
        SceneCommand::Author(command) => author::handle(ctx, command, author_reply),
        SceneCommand::Watch { scene } => watch_scene(ctx, watch(ctx).ticket(), scene),
        SceneCommand::Undo { scene, expect_round } => {
            let (scene_id, job) = hold(ctx, &scene)?;
            if let Some(expected) = expect_round {
                let rounds = ctx.store.with(|c| records::rounds_of(c, &scene_id))?;
                if rounds != expected {
                    return Err(SceneError::Stale(format!("its last round is now {rounds}, not {expected}")));
                }
            }
            let bank = crate::memory::bank_for(ctx).ok();
            let (round, write, forgotten) = ctx.store.transaction(|tx| {
                let (round, memory_ids, forgotten) = records::undo_round(tx, &scene_id)?;
                // Alternatives of later rounds followed from the round taken back.
                alternatives::forget_after(tx, &scene_id, round - 1)?;
                Ok((round, crate::memory::remove_ids(tx, &memory_ids)?, forgotten))
            })?;
            if let Some(bank) = bank {
                bank.publish(write);
            }
            // The summary that told the round is written again over the rounds left.
            summarise_again(ctx, &scene_id, forgotten.min(round - 1));
            drop(job);
            emit(SceneEvent::RoundUndone { scene_id, round });
            Ok(())
        }
        SceneCommand::Redo { scene } => redo(ctx, &scene, reply),
        SceneCommand::SubmitPlan { scene, plan } => {
            let scene_id = ctx.store.with(|c| records::resolve_scene(c, &scene))?;
            round::submit_plan(ctx, &scene_id, plan)
        }
        SceneCommand::Alternatives { scene } => {
            let scene_id = ctx.store.with(|c| records::resolve_scene(c, &scene))?;
            let alternatives = ctx.store.with(|c| alternatives::list(c, &scene_id))?;
            emit(SceneEvent::Alternatives { scene_id, alternatives });
            Ok(())
        }
        SceneCommand::UseAlternative { scene, id } => {
            let (scene_id, job) = hold(ctx, &scene)?;
            let recall = recall::Recall::open(ctx);
            let memories = kept_memories(ctx, &recall, &scene_id, &id)?;
            let (round, kept, write) = ctx.store.transaction(|tx| alternatives::choose(tx, &scene_id, &id, memories))?;
            if let Some(bank) = recall.bank() {
                bank.publish(write);
            }
            let alternatives = ctx.store.with(|c| alternatives::list(c, &scene_id))?;
            // Free before anyone hears of it: a front door may act on the scene at once.
            drop(job);
            emit(SceneEvent::AlternativeChosen { scene_id: scene_id.clone(), round, kept });
            emit(SceneEvent::Alternatives { scene_id, alternatives });
            Ok(())
        }
        SceneCommand::EditMessage { scene, number, text } => {
            let (scene_id, job) = hold(ctx, &scene)?;
            let memory_id = format!("scene:{scene_id}:{number}");
            let bank = crate::memory::bank_for(ctx).ok();
            let exists = ctx.store.with(|c| Ok(crate::memory::records::get(c, &memory_id)?.is_some()))?;
            let edit = match (&bank, exists) {
                (Some(bank), true) => Some(bank.prepare_edit(&memory_id, &text).map_err(|e| SceneError::Invalid(e.to_string()))?),
                // No bank: the memory's text still follows (its stale vector goes).
                (None, true) => Some(crate::memory::PreparedEdit::text_only(&memory_id, &text)),
                (_, false) => None,
            };
            let (forgotten, write) = ctx.store.transaction(|tx| {
                let forgotten = records::edit_message(tx, &scene_id, number, &text)?;
                let write = match edit {
                    Some(edit) => edit.write(tx)?,
                    None => crate::memory::MemoryWrite::default(),
                };
                Ok((forgotten, write))
            })?;
            if let Some(bank) = bank {
                bank.publish(write);
            }
            summarise_again(ctx, &scene_id, forgotten);
            // Free before anyone hears of it: a front door may act on the scene at once.
            drop(job);
            emit(SceneEvent::MessageEdited { scene_id, number });
            Ok(())
        }
        SceneCommand::DeleteMessage { scene, number } => {
            let (scene_id, job) = hold(ctx, &scene)?;
            let memory_id = format!("scene:{scene_id}:{number}");
            let bank = crate::memory::bank_for(ctx).ok();
            // Embedded before the transaction: the turns after it, without it.
            let followers = match &bank {
                Some(bank) => bank.prepare_removal(std::slice::from_ref(&memory_id)).map_err(|e| SceneError::Invalid(e.to_string()))?,
                None => Default::default(),
            };
            let (forgotten, write) = ctx.store.transaction(|tx| {
                let forgotten = records::delete_message(tx, &scene_id, number)?;
                let (reopened, _) = crate::memory::summarise::reopen_covering(tx, std::slice::from_ref(&memory_id))?;
                Ok((forgotten, reopened.and(crate::memory::bank::remove_with_followers(tx, &memory_id, followers)?)))
            })?;
            if let Some(bank) = bank {
                bank.publish(write);
            }
            summarise_again(ctx, &scene_id, forgotten);
            drop(job);
            emit(SceneEvent::MessageDeleted { scene_id, number });
            Ok(())
        }
        SceneCommand::Mute { scene, character, muted } => {
            let (scene_id, name) = ctx.store.transaction(|tx| {
                let scene_id = records::resolve_scene(tx, &scene)?;
                let character = crate::character::resolve(tx, &character)?;
                // Muting someone the scene does not have would silently do nothing.
                if records::load_view(tx, &scene_id)?.cast.iter().all(|c| c.id != character.id) {
                    return Err(crate::store::StoreError::Invalid(format!("{} is not in the scene's cast", character.name)));
                }
                records::set_muted(tx, &scene_id, &character.id, muted)?;
                Ok((scene_id, character.name))
            })?;
            emit(SceneEvent::Muted { scene_id, name, muted });
            Ok(())
        }
        SceneCommand::Cast { scene, character, add } => {
            let (scene_id, job) = hold(ctx, &scene)?;
            let (character_id, name) = ctx.store.transaction(|tx| {
                let character = crate::character::resolve(tx, &character)?;
                let view = records::load_view(tx, &scene_id)?;
                let member = view.cast.iter().find(|c| c.id == character.id);
                match (add, member) {
                    (true, Some(member)) => return Err(crate::store::StoreError::Invalid(format!("{} is already in the scene's cast", member.name))),
                    (false, None) => return Err(crate::store::StoreError::Invalid(format!("{} is not in the scene's cast", character.name))),
                    (true, None) => records::add_to_cast(tx, &scene_id, &character.id)?,
                    (false, Some(_)) => records::remove_from_cast(tx, &scene_id, &character.id)?,
                }
                let name = records::load_view(tx, &scene_id)?.cast.into_iter().find(|c| c.id == character.id).map_or(character.name, |c| c.name);
                Ok((character.id, name))
            })?;
            drop(job);
            emit(SceneEvent::CastChanged { scene_id, character_id, name, added: add });
            Ok(())
        }
        SceneCommand::Transcript { scene } => {
            // A reader connection: a long transcript does not hold the writer's lock.
            let reader = ctx.store.reader()?;
            let scene_id = records::resolve_scene(&reader, &scene)?;
            let messages = records::recent_messages(&reader, &scene_id, u32::MAX)?;
            emit(SceneEvent::Transcript { scene_id, messages });
            Ok(())
        }
        SceneCommand::Snapshot { scene } => {
            // A reader connection: a long campaign's snapshot does not hold the writer's lock.
            let snapshot = preview::snapshot(&ctx.store.reader()?, &scene)?;
            emit(SceneEvent::Snapshot { snapshot: Box::new(snapshot) });
            Ok(())
        }
        SceneCommand::Lore { scene, round } => {
            let (scene_id, round, lore) = preview::round_lore(&ctx.store.reader()?, &scene, round)?;
            emit(SceneEvent::Lore { scene_id, round, lore });
            Ok(())
        }
        SceneCommand::Preview { scene, agent, character } => {
            let config = ctx.config();
            let recall = if agent == envelope::AgentKind::Character { recall::Recall::open(ctx) } else { recall::Recall::none() };
            let preview = preview::preview(&ctx.store.reader()?, &config, &scene, agent, character.as_deref(), &recall)?;
            emit(SceneEvent::Preview { preview: Box::new(preview) });
            Ok(())
        }
        SceneCommand::Demo => {
            let scene_id = demo::ensure(&ctx.store)?;
            emit(SceneEvent::DemoReady { scene_id });
            Ok(())
        }
    }
}
