//! One round: Director pass 1 → each acting character in turn (streamed) → Director
//! pass 2 → round close.
//!
//! Hold–wait–commit: nothing of the round touches the store until it closes, and the
//! close is one transaction (messages, character states, active set, trackers, facts,
//! time, the round's audit). A round killed at any point before the commit leaves the
//! scene exactly as it was; `round_completed` is sent only after the commit.
//!
//! State precedence, lowest to highest: the state before the round, Director pass 1
//! (authoritative before anyone acts), each character's own reply, Director pass 2.
//! Where a character's reply and pass 2 disagree on a field, pass 2 wins and the
//! conflict is recorded in the round's audit.

mod infer;
mod review;
mod stages;

pub use review::submit as submit_plan;
pub(crate) use stages::director_schema;

use super::envelope::{self, AgentKind, EnvelopeInput};
use super::model::{ActingCharacter, CastMember, CharacterState, STATE_FIELDS, SceneMessage, SceneView, StateUpdate};
use super::lore;
use super::recall::Recall;
use super::records;
pub use super::model::CallLedger;
use super::{SceneConfig, SceneError, SceneEvent};
use crate::context::{Context, JobKey};
use crate::llm::{CancelToken, ChatMessage, ChatRequest, LlmClient, ProviderProfile};
use stages::RoundDraft;
use crate::prompting::{BudgetLedger, PromptTemplates};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The job key of `scene_id`'s round: a second round on the same scene is refused
/// rather than queued (so the user sees why nothing happens), and [`cancel`] reaches the
/// running one.
pub(crate) fn job(scene_id: &str) -> JobKey {
    JobKey::new("round", scene_id)
}

/// How the last round that started in a scene (in this process) ended, when it did not
/// complete: what `GET /api/scene/{id}` tells a client that has no socket.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RoundFailure {
    pub round: u32,
    pub message: String,
    /// The fault's name as events give it (`provider`, `library`, …), or `cancelled`.
    pub fault: String,
}

/// The last failure of each scene's rounds since this engine started; a round that starts
/// clears its scene's. Kept in memory: the engine's state, as the running job is.
#[derive(Default)]
struct RoundOutcomes(std::sync::Mutex<std::collections::HashMap<String, RoundFailure>>);

fn outcomes(ctx: &Context) -> Arc<RoundOutcomes> {
    let slot = ctx.service::<RoundOutcomes>();
    slot.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(Default::default).clone()
}

fn record_outcome(ctx: &Context, scene_id: &str, failure: Option<RoundFailure>) {
    let outcomes = outcomes(ctx);
    let mut map = outcomes.0.lock().unwrap_or_else(|p| p.into_inner());
    match failure {
        Some(failure) => map.insert(scene_id.to_string(), failure),
        None => map.remove(scene_id),
    };
}

/// Whether a round runs in `scene_id` (here or in another process on the library) and
/// how the last one that started here failed, if it did and none started since.
pub fn round_state(ctx: &Context, scene_id: &str) -> (bool, Option<RoundFailure>) {
    let running = ctx.jobs.is_running(&job(scene_id));
    let failed = outcomes(ctx).0.lock().unwrap_or_else(|p| p.into_inner()).get(scene_id).cloned();
    (running, failed)
}

/// Cancel the round running in `scene_id`. Returns whether one was running. Nothing of
/// a cancelled round is committed: every stage checks the token, the model calls stop
/// on it, and the round close refuses to start once it is set.
pub fn cancel(ctx: &Context, scene_id: &str) -> bool {
    ctx.jobs.cancel(&job(scene_id))
}

/// Agents and their clients for one round.
struct Agents {
    director: (LlmClient, ProviderProfile),
    character: (LlmClient, ProviderProfile),
    /// `None` when `[scene] narrator = false`.
    narrator: Option<(LlmClient, ProviderProfile)>,
    /// `Some` when `[scene] world_agent = true`.
    world: Option<(LlmClient, ProviderProfile)>,
    templates: PromptTemplates,
}

fn client_for(ctx: &Context, role: &str) -> Result<(LlmClient, ProviderProfile), SceneError> {
    let config = ctx.config();
    let profile = config.profile_for_role(role).map_err(|e| SceneError::Invalid(e.to_string()))?.clone();
    let client = LlmClient::from_profile(&profile, Some(&ctx.store))?.for_agent(role);
    Ok((client, profile))
}

/// Refuse an input that alone takes more than half the context of a model the round
/// calls: every prompt of the round carries it whole, so it would crowd out the scene
/// or be refused by the provider halfway through the round. Checked before the round
/// starts, so nothing of it is stored.
fn fits_every_context(input: Option<&str>, agents: &Agents) -> Result<(), SceneError> {
    let Some(input) = input else { return Ok(()) };
    let tokens = crate::llm::tokens::estimate(input);
    let roles = [("director", Some(&agents.director)), ("character", Some(&agents.character)), ("narrator", agents.narrator.as_ref()), ("world", agents.world.as_ref())];
    for (role, agent) in roles {
        if let Some((_, profile)) = agent
            && tokens > profile.max_context_tokens / 2
        {
            return Err(SceneError::InputTooLong { tokens, role, context: profile.max_context_tokens });
        }
    }
    Ok(())
}

/// Sort acting characters: explicit order first (ascending), then higher priority,
/// then name; the sort is stable so equal keys keep the Director's order.
pub fn turn_order(mut acting: Vec<ActingCharacter>) -> Vec<ActingCharacter> {
    acting.sort_by(|a, b| {
        let order = |c: &ActingCharacter| c.order.unwrap_or(u32::MAX);
        // Those the game master made act come after those the Director picked.
        order(a)
            .cmp(&order(b))
            .then(a.forced.cmp(&b.forced))
            .then(b.priority.cmp(&a.priority))
            .then_with(|| a.name.to_lowercase().cmp(&b.name.to_lowercase()))
    });
    acting
}

/// Split a character's reply into its prose and the state it declares for itself:
/// lines of the form `[mood: wary]` (any of the five state fields) anywhere in the
/// reply are taken out of the prose and read as the character's delta.
pub fn split_delta(reply: &str) -> (String, CharacterState) {
    let mut delta = CharacterState::default();
    let mut prose = Vec::new();
    for line in reply.lines() {
        let trimmed = line.trim();
        let parsed = trimmed
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .and_then(|t| t.split_once(':'))
            .map(|(field, value)| (field.trim().to_lowercase(), value.trim()))
            .filter(|(field, value)| STATE_FIELDS.contains(&field.as_str()) && !value.is_empty());
        match parsed {
            Some((field, value)) => {
                delta.set(&field, value);
            }
            None => prose.push(line),
        }
    }
    (prose.join("\n").trim().to_string(), delta)
}

fn apply_updates(states: &mut BTreeMap<String, CharacterState>, view: &SceneView, updates: &[StateUpdate], ignored: &mut Vec<String>) {
    for update in updates {
        match view.member_by_name(&update.name) {
            Some(member) => states.entry(member.id.clone()).or_default().apply(&update.state),
            None => ignored.push(update.name.clone()),
        }
    }
}

/// However many passes the config asks for, a round never makes more Director calls.
const MAX_DIRECTOR_PASSES: u32 = 8;

/// Run one round on `scene_id`. `input` is the user's message, `None` to continue.
/// With `review`, the round pauses after Director pass 1 until the game master sends the
/// plan back ([`submit_plan`]), edited or not.
/// `started` hears `round_started` (or nothing: an error before it is the caller's to
/// report).
pub fn run(
    ctx: &Arc<Context>,
    scene_id: &str,
    input: Option<String>,
    force: Vec<String>,
    review: bool,
    cancel: &CancelToken,
    started: Option<&crate::context::Reply<SceneEvent>>,
) -> Result<u32, SceneError> {
    run_held(ctx, None, scene_id, input, force, review, cancel, started)
}

/// [`run`], with the scene's job already `held` by the caller (a redo, which must not
/// let another round in between taking the last round back and playing it again).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_held(
    ctx: &Arc<Context>,
    held: Option<crate::context::Job>,
    scene_id: &str,
    input: Option<String>,
    force: Vec<String>,
    review: bool,
    cancel: &CancelToken,
    started: Option<&crate::context::Reply<SceneEvent>>,
) -> Result<u32, SceneError> {
    let scene_id = ctx.store.with(|c| records::resolve_scene(c, scene_id))?;
    let job = match held {
        Some(job) => job,
        None => ctx.jobs.try_start(job(&scene_id), cancel).ok_or_else(|| SceneError::Busy(scene_id.clone()))?,
    };
    let mut config: SceneConfig = ctx.config().scene;
    // The campaign's own shares, when the game master saved some, over the config file's.
    if let Some(plan) = ctx.store.with(|c| super::authoring::campaign_budgets_of_scene(c, &scene_id))? {
        config.budgets = plan;
    }
    let agents = Agents {
        director: client_for(ctx, "director")?,
        character: client_for(ctx, "character")?,
        narrator: if config.narrator { Some(client_for(ctx, "narrator")?) } else { None },
        world: if config.world_agent { Some(client_for(ctx, "world")?) } else { None },
        templates: PromptTemplates::shipped()?,
    };
    fits_every_context(input.as_deref(), &agents)?;
    let recall = Recall::open(ctx);
    // How the campaign's earlier scenes ended reaches this one: their unsummarised last
    // rounds are folded in first (once each; a failure only leaves a summary as it was).
    super::summary::catch_up_earlier(ctx, &scene_id, cancel);
    let mut draft = RoundDraft::begin(ctx, scene_id.clone(), input.clone(), &config, cancel)?;
    // Who is forced to act, by the names the game master typed: each must be one of the
    // cast (a word of a name will do), or the round does not start.
    let mut forced = Vec::new();
    for name in &force {
        let exact = draft.view.member_by_name(name).map(|m| m.name.clone());
        let member = match exact {
            Some(name) => name,
            None => crate::names::only(&draft.view.cast, |m| m.name.as_str(), name).map(|m| m.name.clone()).map_err(|e| {
                let cast: Vec<&str> = draft.view.cast.iter().map(|m| m.name.as_str()).collect();
                SceneError::Invalid(e.message(&format!("{name:?} is not in this scene's cast ({})", cast.join(", "))))
            })?,
        };
        if !forced.contains(&member) {
            forced.push(member);
        }
    }
    draft.force = forced;
    draft.review = review;
    draft.bank = recall.bank().cloned();
    let round = draft.round;
    let summary_round = draft.notes.summary_round;
    let event = SceneEvent::RoundStarted { scene_id: scene_id.clone(), round, input };
    // Cleared before anyone hears the round started, so no one reads the last one's failure as this one's.
    record_outcome(ctx, &scene_id, None);
    crate::context::answer(started, &event);
    ctx.emit(event);

    let played = (|| {
        let plan = stages::director_plan(ctx, &agents, &config, &mut draft, cancel)?;
        stages::characters(ctx, &agents, &config, &recall, &plan, &mut draft, cancel)?;
        stages::after_characters(ctx, &agents, &config, &plan, &mut draft, cancel)?;
        // Pass 1 planned; passes 2..=N reconcile until one changes nothing (0 and 1: none).
        for pass in 2..=config.max_director_passes.min(MAX_DIRECTOR_PASSES) {
            if !stages::reconcile(ctx, &agents, &config, &plan, &mut draft, pass as u8, cancel)? {
                break;
            }
        }
        stages::close(ctx, &recall, draft, cancel)
    })();
    // Kept before the scene is free (the job goes with this function), so whoever sees
    // it idle also sees how the round ended.
    let closed = played.inspect_err(|e| {
        let fault = if cancel.is_cancelled() { "cancelled".to_string() } else { e.fault().as_str().to_string() };
        record_outcome(ctx, &scene_id, Some(RoundFailure { round, message: e.to_string(), fault }));
    })?;

    // Committed: the scene is free before anyone hears of it, so a front door that
    // starts the next round on `round_completed` is never refused as busy. The next
    // round may run while the summariser writes: it reads the summary as it was, and
    // the summary's compare-and-set keeps either order consistent.
    drop(job);
    let summary_due = super::summary::due(round, summary_round, config.summarise_every);
    if summary_due {
        ctx.emit(SceneEvent::SummaryStarted { scene_id: scene_id.clone(), through_round: round - 1 });
    }
    ctx.emit(SceneEvent::RoundCompleted {
        scene_id: scene_id.clone(),
        round,
        messages: closed.messages,
        active: closed.active,
        conflicts: closed.conflicts,
        tokens: closed.tokens,
        notices: closed.notices,
    });
    if summary_due {
        match super::summary::summarise(ctx, &scene_id, round - 1, cancel) {
            Ok(Some(through_round)) => ctx.emit(super::summary::updated(ctx, &scene_id, through_round)),
            // Nothing new to cover, or another run covered it: it covers them all the same.
            Ok(None) => ctx.emit(super::summary::updated(ctx, &scene_id, round - 1)),
            Err(e) => {
                tracing::warn!(scene = %scene_id, error = %e, "scene summary failed");
                ctx.emit(SceneEvent::SummaryFailed { scene_id, message: e.to_string() });
            }
        }
    }
    Ok(round)
}

fn request_for(profile: &ProviderProfile, system: String, user: String, stream: bool) -> ChatRequest {
    let mut request = ChatRequest::new(profile.model.clone(), vec![ChatMessage::system(system), ChatMessage::user(user)]);
    request.sampler = profile.sampler.clone();
    request.stream = stream;
    request
}

/// What a character's call reads of the round so far.
struct CallSetup<'a> {
    live: &'a SceneView,
    notes: &'a records::SceneNotes,
    history: &'a [SceneMessage],
    lore: &'a lore::PreparedLore,
    message_number: u64,
    seed: u64,
    bank: Option<&'a crate::memory::MemoryBank>,
}

#[allow(clippy::too_many_arguments)]
fn character_turn(
    ctx: &Arc<Context>,
    agents: &Agents,
    config: &SceneConfig,
    call: &CallSetup<'_>,
    lore_state: &mut crate::lorebook::activation::ActivationState,
    member: &CastMember,
    memories: &[crate::memory::RetrievalHit],
    guidance: Vec<String>,
    scene_id: &str,
    round: u32,
    cancel: &CancelToken,
) -> Result<(String, crate::llm::Usage, BudgetLedger, Vec<String>), SceneError> {
    ctx.emit(SceneEvent::CharacterStarted {
        scene_id: scene_id.to_string(),
        round,
        character_id: member.id.clone(),
        name: member.name.clone(),
    });
    let turn = envelope::character_turn(&member.name);
    let mut reply = envelope::ReplyPlan::prose(&agents.character.1);
    let (envelope, prompt) = envelope::assemble_for_call(
        &agents.templates,
        AgentKind::Character,
        Some(member),
        &turn,
        &config.budgets,
        &agents.character.1,
        &mut reply,
        &EnvelopeInput {
            agent: AgentKind::Character,
            view: call.live,
            notes: call.notes,
            history: call.history,
            lore: Some(call.lore),
            memories,
            character: Some(member),
            director_guidance: guidance,
            lore_scan_depth: config.lore_scan_depth,
            message_number: call.message_number,
            seed: call.seed,
            cancel: Some(cancel.flag()),
            bank: call.bank,
        },
        lore_state,
    )?;
    let mut request = request_for(&agents.character.1, prompt.system, prompt.user, true);
    reply.apply(&agents.character.1, &mut request);
    let sink = ctx.clone();
    let (scene, id) = (scene_id.to_string(), member.id.clone());
    let on_token = move |text: &str| {
        sink.emit(SceneEvent::Token { scene_id: scene.clone(), round, character_id: id.clone(), text: text.to_string() })
    };
    let others = crate::scene::prose::others(call.live, Some(&member.id));
    let who = crate::scene::prose::Speaker { scene_id, round, character_id: &member.id, name: &member.name, others };
    let completion = crate::scene::prose::draw(ctx, &agents.character.0, request, who, cancel, &on_token)?;
    Ok((completion.text, completion.usage, envelope.ledger, envelope.notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor(name: &str, priority: i32, order: Option<u32>) -> ActingCharacter {
        ActingCharacter { name: name.into(), guidance: String::new(), priority, order, forced: false }
    }

    #[test]
    fn turn_order_is_explicit_order_then_priority_then_name() {
        let check = |input: Vec<ActingCharacter>, expected: &[&str]| {
            let got: Vec<String> = turn_order(input).into_iter().map(|a| a.name).collect();
            assert_eq!(got, expected);
        };
        check(vec![actor("Bram", 1, None), actor("Ada", 1, None), actor("Cole", 5, None)], &["Cole", "Ada", "Bram"]);
        check(vec![actor("Bram", 9, None), actor("Ada", 0, Some(2)), actor("Cole", 0, Some(1))], &["Cole", "Ada", "Bram"]);
        check(vec![actor("bram", 0, None), actor("Ada", 0, None)], &["Ada", "bram"]);
        // Asked for by the game master: after the Director's own, whatever their priority.
        check(vec![ActingCharacter::forced("Ada".into(), String::new()), actor("Bram", -3, None)], &["Bram", "Ada"]);
    }

    #[test]
    fn split_delta_takes_state_lines_out_of_the_prose() {
        let (prose, delta) = split_delta("I step back.\n[Mood: wary]\n\"Who's there?\"\n[location: the cellar]\n[weather: rain]");
        assert_eq!(prose, "I step back.\n\"Who's there?\"\n[weather: rain]");
        assert_eq!(delta.mood.as_deref(), Some("wary"));
        assert_eq!(delta.location.as_deref(), Some("the cellar"));
        let (prose, delta) = split_delta("Just talk [mood: happy] inline.");
        assert_eq!(prose, "Just talk [mood: happy] inline.");
        assert!(delta.is_empty());
    }
}
