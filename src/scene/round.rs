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

use super::envelope::{self, AgentKind, EnvelopeInput};
use super::model::{
    ActingCharacter, CastMember, CharacterState, Conflict, DirectorPlan, DirectorRecord, MessageKind, Reconciliation,
    STATE_FIELDS, SceneMessage, SceneView, StateUpdate,
};
use super::lore;
use super::narration::{self, AfterCharacters};
use super::recall::Recall;
use super::records::{self, RoundClose};
use super::{SceneConfig, SceneError, SceneEvent};
use crate::engine::{EngineContext, Event};
use crate::llm::structured::{StructuredOptions, complete_structured};
use crate::llm::{CallContext, CancelToken, ChatMessage, ChatRequest, LlmClient, ProviderProfile};
use crate::prompting::{BudgetLedger, PromptTemplates};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// The budget ledger of one agent call, kept with the round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallLedger {
    pub agent: String,
    pub character: Option<String>,
    pub ledger: BudgetLedger,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// What went wrong short of failing the call (memories by keyword only, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Scenes with a round running, with the round's cancel token: a second round on the
/// same scene is refused rather than queued (so the user sees why nothing happens), and
/// [`cancel`] reaches the running one.
static RUNNING: Mutex<BTreeMap<String, CancelToken>> = Mutex::new(BTreeMap::new());

struct RunningGuard(String);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        RUNNING.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.0);
    }
}

/// Cancel the round running in `scene_id`. Returns whether one was running. Nothing of
/// a cancelled round is committed: every stage checks the token, the model calls stop
/// on it, and the round close refuses to start once it is set.
pub fn cancel(scene_id: &str) -> bool {
    match RUNNING.lock().unwrap_or_else(|p| p.into_inner()).get(scene_id) {
        Some(token) => {
            token.cancel();
            true
        }
        None => false,
    }
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

fn client_for(ctx: &EngineContext, role: &str) -> Result<(LlmClient, ProviderProfile), SceneError> {
    let config = ctx.config();
    let profile = config.profile_for_role(role).map_err(|e| SceneError::Invalid(e.to_string()))?.clone();
    let client = LlmClient::from_profile(&profile, Some(&ctx.store))?;
    Ok((client, profile))
}

/// Sort acting characters: explicit order first (ascending), then higher priority,
/// then name; the sort is stable so equal keys keep the Director's order.
pub fn turn_order(mut acting: Vec<ActingCharacter>) -> Vec<ActingCharacter> {
    acting.sort_by(|a, b| {
        let order = |c: &ActingCharacter| c.order.unwrap_or(u32::MAX);
        order(a).cmp(&order(b)).then(b.priority.cmp(&a.priority)).then_with(|| a.name.to_lowercase().cmp(&b.name.to_lowercase()))
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

/// Run one round on `scene_id`. `input` is the user's message, `None` to continue.
pub fn run(ctx: &Arc<EngineContext>, scene_id: &str, input: Option<String>, cancel: &CancelToken) -> Result<u32, SceneError> {
    let scene_id = ctx.store.with(|c| records::resolve_scene(c, scene_id))?;
    {
        let mut running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
        if running.contains_key(&scene_id) {
            return Err(SceneError::Busy(scene_id));
        }
        running.insert(scene_id.clone(), cancel.clone());
    }
    let _guard = RunningGuard(scene_id.clone());
    let config: SceneConfig = ctx.config().scene;
    let agents = Agents {
        director: client_for(ctx, "director")?,
        character: client_for(ctx, "character")?,
        narrator: if config.narrator { Some(client_for(ctx, "narrator")?) } else { None },
        world: if config.world_agent { Some(client_for(ctx, "world")?) } else { None },
        templates: PromptTemplates::shipped()?,
    };

    let (view, notes, stored, lore, mut lore_state) = ctx.store.with(|c| {
        let view = records::load_view(c, &scene_id)?;
        let notes = records::load_notes(c, &scene_id)?;
        let stored = records::recent_messages(c, &scene_id, config.history_window)?;
        let lore = lore::campaign_lore(c, &view.campaign_id)?;
        let lore_state = lore::load_state(c, &scene_id)?;
        Ok((view, notes, stored, lore, lore_state))
    })?;
    let seed = lore::seed_for(&scene_id);
    let recall = Recall::open(ctx);
    let mut injections: Vec<(String, String, Vec<crate::memory::RetrievalHit>)> = Vec::new();
    let round = view.rounds + 1;
    let emit = |e: SceneEvent| ctx.emit(Event::Scene(e));
    emit(SceneEvent::RoundStarted { scene_id: scene_id.clone(), round, input: input.clone() });

    let mut history: Vec<SceneMessage> = stored;
    let mut next_number = history.last().map(|m| m.number).unwrap_or(0) + 1;
    let mut new_messages = Vec::new();
    if let Some(text) = input.as_ref().filter(|t| !t.trim().is_empty()) {
        let speaker = view.persona.as_deref().and_then(|p| p.split(':').next()).unwrap_or("User").to_string();
        let message =
            SceneMessage { number: next_number, round, kind: MessageKind::User, character_id: None, speaker, content: text.trim().to_string() };
        next_number += 1;
        new_messages.push(message.clone());
        history.push(message);
    }
    let mut ledgers = Vec::new();
    let mut tokens: u64 = 0;
    let max_context = |p: &ProviderProfile| p.max_context_tokens;

    // --- Director pass 1 -----------------------------------------------------------
    let turn = envelope::director_turn(round, input.as_deref());
    let envelope = envelope::assemble(
        &config.budgets,
        max_context(&agents.director.1),
        &EnvelopeInput {
            agent: AgentKind::Director,
            view: &view,
            notes: &notes,
            history: &history,
            lore: Some(&lore),
            memories: &[],
            character: None,
            director_guidance: Vec::new(),
            lore_scan_depth: config.lore_scan_depth,
            message_number: u64::from(next_number),
            seed,
        },
        &mut lore_state,
    );
    let prompt = envelope::render(&agents.templates, AgentKind::Director, &envelope, None, &turn)?;
    let request = request_for(&agents.director.1, prompt.system, prompt.user, false);
    let output = complete_structured::<DirectorPlan>(&agents.director.0, request, &StructuredOptions::default(), CallContext::new(cancel))
        .map_err(|e| SceneError::Agent { agent: "director".into(), message: e.to_string() })?;
    tokens += u64::from(output.usage.total());
    ledgers.push(CallLedger {
        agent: "director".into(),
        character: None,
        ledger: envelope.ledger,
        prompt_tokens: output.usage.prompt_tokens,
        completion_tokens: output.usage.completion_tokens,
        notes: Vec::new(),
    });
    let plan = output.value;
    emit(SceneEvent::DirectorDecided { scene_id: scene_id.clone(), round, pass: 1, decision: output.json });

    let mut record = DirectorRecord { plan: plan.clone(), ..Default::default() };
    let mut active: BTreeSet<String> = view.active().map(|c| c.id.clone()).collect();
    let mut entering: BTreeMap<String, String> = BTreeMap::new();
    let mut leaving: BTreeMap<String, String> = BTreeMap::new();
    for activation in &plan.activations {
        match view.member_by_name(&activation.name) {
            Some(member) => {
                active.insert(member.id.clone());
                entering.insert(member.id.clone(), activation.entry_guidance.clone());
            }
            None => record.ignored.push(activation.name.clone()),
        }
    }
    for deactivation in &plan.deactivations {
        match view.member_by_name(&deactivation.name) {
            Some(member) => {
                leaving.insert(member.id.clone(), deactivation.exit_guidance.clone());
            }
            None => record.ignored.push(deactivation.name.clone()),
        }
    }
    let mut states: BTreeMap<String, CharacterState> = BTreeMap::new();
    apply_updates(&mut states, &view, &plan.state_updates, &mut record.ignored);

    // The scene as the characters see it: pass 1's activations and states applied.
    let mut live = view.clone();
    for member in &mut live.cast {
        member.active = active.contains(&member.id);
        if let Some(delta) = states.get(&member.id) {
            member.state.apply(delta);
        }
    }

    // --- Characters ------------------------------------------------------------------
    let mut character_deltas: BTreeMap<String, CharacterState> = BTreeMap::new();
    let mut acted = BTreeSet::new();
    for actor in turn_order(plan.acting_characters.clone()) {
        let Some(member) = live.member_by_name(&actor.name).filter(|m| m.active).cloned() else {
            record.ignored.push(actor.name.clone());
            continue;
        };
        if !acted.insert(member.id.clone()) {
            continue; // named twice: one turn each
        }
        if cancel.is_cancelled() {
            return Err(SceneError::Llm(crate::llm::LlmError::Cancelled));
        }
        let mut guidance = vec![actor.guidance.clone()];
        if let Some(entry) = entering.get(&member.id) {
            guidance.push(format!("You enter the scene this round: {entry}"));
        }
        if let Some(exit) = leaving.get(&member.id) {
            guidance.push(format!("You leave the scene at the end of this round: {exit}"));
        }
        guidance.push(plan.open_guidance.clone());
        let call = CallSetup { live: &live, notes: &notes, history: &history, lore: &lore, message_number: u64::from(next_number), seed };
        let recalled = recall.for_character(&view.campaign_id, &member.name, &history, &guidance, config.memories_per_call);
        let (reply, usage, ledger) =
            character_turn(ctx, &agents, &config, &call, &mut lore_state, &member, &recalled.hits, guidance, &scene_id, round, cancel)?;
        tokens += u64::from(usage.total());
        ledgers.push(CallLedger {
            agent: "character".into(),
            character: Some(member.name.clone()),
            ledger,
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            notes: recalled.notes,
        });
        injections.push((format!("scene:character:{}", member.name), recalled.query, recalled.hits));
        let (prose, delta) = split_delta(&reply);
        emit(SceneEvent::CharacterFinished {
            scene_id: scene_id.clone(),
            round,
            character_id: member.id.clone(),
            name: member.name.clone(),
            content: prose.clone(),
            delta: delta.clone(),
        });
        if let Some(slot) = live.cast.iter_mut().find(|c| c.id == member.id) {
            slot.state.apply(&delta);
        }
        states.entry(member.id.clone()).or_default().apply(&delta);
        character_deltas.entry(member.id.clone()).or_default().apply(&delta);
        let message = SceneMessage {
            number: next_number,
            round,
            kind: MessageKind::Character,
            character_id: Some(member.id.clone()),
            speaker: member.name.clone(),
            content: prose,
        };
        next_number += 1;
        new_messages.push(message.clone());
        history.push(message);
    }

    // --- Narrator, then the World agent (both optional) -------------------------------
    let mut trackers = view.trackers.clone();
    let mut facts = view.facts.clone();
    let mut elapsed = view.elapsed_minutes;
    // Both agents see the history as it stands when they run (narration included).
    let after = AfterCharacters {
        ctx,
        config: &config,
        templates: &agents.templates,
        live: &live,
        notes: &notes,
        history: &[],
        lore: &lore,
        open_guidance: &plan.open_guidance,
        message_number: 0,
        seed,
        scene_id: &scene_id,
        round,
        cancel,
    };
    if let Some(narrator) = &agents.narrator {
        let at = AfterCharacters { history: &history, message_number: u64::from(next_number), ..after };
        let (content, ledger) = narration::narrate(&at, narrator, &mut lore_state)?;
        tokens += u64::from(ledger.prompt_tokens) + u64::from(ledger.completion_tokens);
        ledgers.push(ledger);
        if !content.is_empty() {
            let message = SceneMessage { number: next_number, round, kind: MessageKind::Narrator, character_id: None, speaker: "Narrator".into(), content };
            next_number += 1;
            new_messages.push(message.clone());
            history.push(message);
        }
    }
    if let Some(world) = &agents.world {
        let at = AfterCharacters { history: &history, message_number: u64::from(next_number), ..after };
        let (update, ledger) = narration::world(&at, world, &mut lore_state)?;
        tokens += u64::from(ledger.prompt_tokens) + u64::from(ledger.completion_tokens);
        ledgers.push(ledger);
        for (name, value) in &update.trackers {
            trackers.insert(name.clone(), value.clone());
        }
        elapsed += u64::from(update.elapsed_minutes);
        // Pass 2 reconciles against the world as it now stands.
        live.trackers = trackers.clone();
        record.world = Some(update);
    }

    // --- Director pass 2 -------------------------------------------------------------
    if config.max_director_passes >= 2 {
        let envelope = envelope::assemble(
            &config.budgets,
            max_context(&agents.director.1),
            &EnvelopeInput {
                agent: AgentKind::Reconcile,
                view: &live,
                notes: &notes,
                history: &history,
                lore: Some(&lore),
                memories: &[],
                character: None,
                director_guidance: vec![plan.open_guidance.clone()],
                lore_scan_depth: config.lore_scan_depth,
                message_number: u64::from(next_number),
                seed,
            },
            &mut lore_state,
        );
        let turn = envelope::reconcile_turn(round);
        let prompt = envelope::render(&agents.templates, AgentKind::Reconcile, &envelope, None, &turn)?;
        let request = request_for(&agents.director.1, prompt.system, prompt.user, false);
        let output =
            complete_structured::<Reconciliation>(&agents.director.0, request, &StructuredOptions::default(), CallContext::new(cancel))
                .map_err(|e| SceneError::Agent { agent: "director (reconcile)".into(), message: e.to_string() })?;
        tokens += u64::from(output.usage.total());
        ledgers.push(CallLedger {
            agent: "director (reconcile)".into(),
            character: None,
            ledger: envelope.ledger,
            prompt_tokens: output.usage.prompt_tokens,
            completion_tokens: output.usage.completion_tokens,
            notes: Vec::new(),
        });
        emit(SceneEvent::DirectorDecided { scene_id: scene_id.clone(), round, pass: 2, decision: output.json });
        let reconciliation = output.value;
        for update in &reconciliation.state_updates {
            let Some(member) = view.member_by_name(&update.name) else { continue };
            if let Some(delta) = character_deltas.get(&member.id) {
                for field in STATE_FIELDS {
                    if let (Some(mine), Some(theirs)) = (delta.get(field), update.state.get(field).filter(|v| !v.trim().is_empty()))
                        && mine != theirs.trim()
                    {
                        record.conflicts.push(Conflict {
                            character: member.name.clone(),
                            field: field.to_string(),
                            character_value: mine.to_string(),
                            director_value: theirs.trim().to_string(),
                        });
                    }
                }
            }
        }
        apply_updates(&mut states, &view, &reconciliation.state_updates, &mut record.ignored);
        let world_owns_trackers = agents.world.is_some();
        if world_owns_trackers
            && (!reconciliation.trackers.is_empty() || reconciliation.elapsed_minutes > 0)
            && let Some(call) = ledgers.last_mut()
        {
            call.notes.push("trackers and minutes from pass 2 not applied: the World agent owns them".into());
        }
        for (name, value) in reconciliation.trackers.iter().filter(|_| !world_owns_trackers) {
            trackers.insert(name.clone(), value.clone());
        }
        for fact in &reconciliation.new_facts {
            if !fact.trim().is_empty() && !facts.iter().any(|f| f == fact.trim()) {
                facts.push(fact.trim().to_string());
            }
        }
        if !world_owns_trackers {
            elapsed += u64::from(reconciliation.elapsed_minutes);
        }
        record.reconciliation = Some(reconciliation);
    }

    // --- Round close -----------------------------------------------------------------
    for id in leaving.keys() {
        active.remove(id);
    }
    // Full states (not deltas) for every character the round touched.
    let mut final_states = BTreeMap::new();
    for (id, delta) in &states {
        let mut state = view.cast.iter().find(|c| &c.id == id).map(|c| c.state.clone()).unwrap_or_default();
        state.apply(delta);
        final_states.insert(id.clone(), state);
    }
    if cancel.is_cancelled() {
        return Err(SceneError::Llm(crate::llm::LlmError::Cancelled));
    }
    // The round's messages become memories of everyone present during it.
    let present: Vec<String> = live.active().map(|c| c.name.clone()).collect();
    let turns = recall.turns(&view.campaign_id, &scene_id, &new_messages, &present);
    let (vectors, embed_note) = recall.embed(&turns);
    if let (Some(note), Some(last)) = (embed_note, ledgers.last_mut()) {
        last.notes.push(note);
    }
    let close = RoundClose {
        scene_id: scene_id.clone(),
        campaign_id: view.campaign_id.clone(),
        round,
        input: input.clone(),
        messages: new_messages.iter().map(|m| (m.kind, m.character_id.clone(), m.speaker.clone(), m.content.clone())).collect(),
        states: final_states,
        active: active.clone(),
        trackers,
        facts,
        elapsed_minutes: elapsed,
        director: serde_json::to_value(&record).map_err(|e| SceneError::Invalid(e.to_string()))?,
        ledgers: serde_json::to_value(&ledgers).map_err(|e| SceneError::Invalid(e.to_string()))?,
        tokens,
        lore_state,
    };
    if cancel.is_cancelled() {
        return Err(SceneError::Llm(crate::llm::LlmError::Cancelled));
    }
    let (written, rowids) = ctx.store.transaction(|tx| {
        let written = records::close_round(tx, &close)?;
        let rowids = match recall.bank() {
            Some(bank) => bank.write_in(tx, &turns, vectors.as_deref())?,
            None => crate::memory::records::insert(tx, &turns)?,
        };
        for (agent, query, hits) in &injections {
            crate::memory::injections::record(tx, agent, query, hits)?;
        }
        Ok((written, rowids))
    })?;
    if let (Some(bank), Some(vectors)) = (recall.bank(), &vectors) {
        bank.publish(&rowids, vectors);
    }
    // Committed: the scene is free before anyone hears of it, so a front door that
    // starts the next round on `round_completed` is never refused as busy. The next
    // round may run while the summariser writes: it reads the summary as it was, and
    // the summary's compare-and-set keeps either order consistent.
    drop(_guard);
    emit(SceneEvent::RoundCompleted {
        scene_id: scene_id.clone(),
        round,
        messages: written,
        active: active.into_iter().collect(),
        conflicts: record.conflicts,
        tokens,
    });
    if super::summary::due(round, notes.summary_round, config.summarise_every) {
        match super::summary::summarise(ctx, &scene_id, round - 1, cancel) {
            Ok(Some(through_round)) => emit(SceneEvent::SummaryUpdated { scene_id, through_round }),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(scene = %scene_id, error = %e, "scene summary failed");
                emit(SceneEvent::SummaryFailed { scene_id, message: e.to_string() });
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
}

#[allow(clippy::too_many_arguments)]
fn character_turn(
    ctx: &Arc<EngineContext>,
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
) -> Result<(String, crate::llm::Usage, BudgetLedger), SceneError> {
    ctx.emit(Event::Scene(SceneEvent::CharacterStarted {
        scene_id: scene_id.to_string(),
        round,
        character_id: member.id.clone(),
        name: member.name.clone(),
    }));
    let envelope = envelope::assemble(
        &config.budgets,
        agents.character.1.max_context_tokens,
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
        },
        lore_state,
    );
    let turn = envelope::character_turn(&member.name);
    let prompt = envelope::render(&agents.templates, AgentKind::Character, &envelope, Some(member), &turn)?;
    let request = request_for(&agents.character.1, prompt.system, prompt.user, true);
    let sink = ctx.clone();
    let (scene, id) = (scene_id.to_string(), member.id.clone());
    let on_token = move |text: &str| {
        sink.emit(Event::Scene(SceneEvent::Token { scene_id: scene.clone(), round, character_id: id.clone(), text: text.to_string() }))
    };
    let completion = agents.character.0.complete(&request, CallContext::with_tokens(cancel, &on_token))?;
    Ok((completion.text, completion.usage, envelope.ledger))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor(name: &str, priority: i32, order: Option<u32>) -> ActingCharacter {
        ActingCharacter { name: name.into(), guidance: String::new(), priority, order }
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
