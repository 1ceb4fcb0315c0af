//! The stages of one round, each a function over the [`RoundDraft`] it carries: begin
//! (read the scene) → Director pass 1 → the characters → the Narrator and the World
//! agent → Director pass 2 → close (the one transaction). Every stage before the close
//! only changes the draft, so a round stopped anywhere leaves the library untouched.

use super::{Agents, CallSetup, apply_updates, character_turn, request_for, split_delta, turn_order};
use crate::context::Context;
use crate::llm::structured::{ContentCheck, OutputSchema, StructuredOptions, complete_with_schema, schema_for, schema_name};
use crate::llm::{CallContext, CancelToken, LlmError};
use crate::lorebook::activation::ActivationState;
use crate::memory::RetrievalHit;
use crate::scene::envelope::{self, AgentKind, EnvelopeInput};
use crate::scene::lore::{self, PreparedLore};
use crate::scene::model::{
    CallLedger, CharacterState, Conflict, DirectorPlan, DirectorRecord, MessageKind, Reconciliation, STATE_FIELDS, SceneMessage, SceneView,
};
use crate::scene::narration::{self, AfterCharacters};
use crate::scene::recall::Recall;
use crate::scene::records::{self, RoundClose, SceneNotes};
use crate::scene::{DirectorDecision, SceneConfig, SceneError, SceneEvent};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Everything a round builds up before it closes.
pub(super) struct RoundDraft {
    pub scene_id: String,
    pub round: u32,
    pub input: Option<String>,
    /// The scene as it was before the round.
    pub view: SceneView,
    /// The scene as the characters see it: pass 1's activations and states, then each
    /// character's own changes as it acts.
    pub live: SceneView,
    pub notes: SceneNotes,
    /// What the next call reads: stored messages, then this round's.
    pub history: Vec<SceneMessage>,
    pub next_number: u32,
    pub new_messages: Vec<SceneMessage>,
    pub lore: Arc<PreparedLore>,
    pub lore_state: ActivationState,
    pub seed: u64,
    pub ledgers: Vec<CallLedger>,
    pub tokens: u64,
    /// `(agent, query, hits)` of every memory search, stored with the round.
    pub injections: Vec<(String, String, Vec<RetrievalHit>)>,
    pub record: DirectorRecord,
    pub active: BTreeSet<String>,
    pub entering: BTreeMap<String, String>,
    pub leaving: BTreeMap<String, String>,
    /// Changes to each character's state this round (deltas over `view`).
    pub states: BTreeMap<String, CharacterState>,
    /// What each character said of itself, to find where pass 2 disagrees.
    pub character_deltas: BTreeMap<String, CharacterState>,
    pub trackers: BTreeMap<String, serde_json::Value>,
    pub facts: Vec<String>,
    pub elapsed: u64,
    /// Characters the game master makes act this round (names or ids).
    pub force: Vec<String>,
    /// Pause after pass 1 for the game master to edit the plan.
    pub review: bool,
    /// The round's cancel token (shared flag), which lore activation stops on.
    pub cancel: CancelToken,
    /// The memory bank, for vector-activated lore (`None`: keys only).
    pub bank: Option<Arc<crate::memory::MemoryBank>>,
    /// What the user must hear about the round beside its messages (a reconciliation
    /// that was dropped), carried to `round_completed`.
    pub notices: Vec<String>,
}

impl RoundDraft {
    /// Read the scene and open the round with the user's message, if any.
    pub fn begin(ctx: &Context, scene_id: String, input: Option<String>, config: &SceneConfig, cancel: &CancelToken) -> Result<Self, SceneError> {
        let (view, notes, history, lore, lore_state, next_number) = ctx.store.with(|c| {
            let view = records::load_view(c, &scene_id)?;
            let notes = records::load_notes(c, &scene_id)?;
            let stored = records::recent_messages(c, &scene_id, config.history_window)?;
            let lore = lore::campaign_lore(c, &view.campaign_id)?;
            let lore_state = lore::load_state(c, &scene_id)?;
            // From the store, not the history window: the round's memories are named
            // after these numbers, and a short window must not reuse old ones.
            let next_number = records::next_message_number(c, &scene_id)?;
            Ok((view, notes, stored, lore, lore_state, next_number))
        })?;
        let mut draft = RoundDraft {
            bank: None,
            cancel: cancel.clone(),
            seed: lore::seed_for(&scene_id),
            round: view.rounds + 1,
            next_number,
            active: view.active().map(|c| c.id.clone()).collect(),
            live: view.clone(),
            trackers: view.trackers.clone(),
            facts: view.facts.clone(),
            elapsed: view.elapsed_minutes,
            scene_id,
            input,
            view,
            notes,
            history,
            new_messages: Vec::new(),
            lore,
            lore_state,
            ledgers: Vec::new(),
            tokens: 0,
            injections: Vec::new(),
            record: DirectorRecord::default(),
            entering: BTreeMap::new(),
            leaving: BTreeMap::new(),
            states: BTreeMap::new(),
            character_deltas: BTreeMap::new(),
            force: Vec::new(),
            review: false,
            notices: Vec::new(),
        };
        if let Some(text) = draft.input.clone().filter(|t| !t.trim().is_empty()) {
            let speaker = draft.view.persona.as_deref().and_then(|p| p.split(':').next()).unwrap_or("User").to_string();
            draft.push_message(MessageKind::User, None, speaker, text.trim().to_string());
        }
        Ok(draft)
    }

    fn push_message(&mut self, kind: MessageKind, character_id: Option<String>, speaker: String, content: String) {
        let message = SceneMessage { number: self.next_number, round: self.round, kind, character_id, speaker, content };
        self.next_number += 1;
        self.new_messages.push(message.clone());
        self.history.push(message);
    }

    fn envelope_input<'a>(&'a self, agent: AgentKind, view: &'a SceneView, config: &SceneConfig, guidance: Vec<String>) -> EnvelopeInput<'a> {
        EnvelopeInput {
            agent,
            view,
            notes: &self.notes,
            history: &self.history,
            lore: Some(&self.lore),
            memories: &[],
            character: None,
            director_guidance: guidance,
            lore_scan_depth: config.lore_scan_depth,
            message_number: u64::from(self.next_number),
            seed: self.seed,
            cancel: Some(self.cancel.flag()),
            bank: self.bank.as_deref(),
        }
    }

    fn emit_decision(&self, ctx: &Context, pass: u8, decision: DirectorDecision) {
        ctx.emit(SceneEvent::DirectorDecided { scene_id: self.scene_id.clone(), round: self.round, pass, decision });
    }
}

/// Whether the last call's memories section kept the memory `id` (its items are
/// `memory {id} (score …)`).
fn kept_memory(ledgers: &[CallLedger], id: &str) -> bool {
    let prefix = format!("memory {id} (");
    ledgers
        .last()
        .and_then(|call| call.ledger.sections.iter().find(|s| s.section == crate::prompting::Section::Memories))
        .is_some_and(|section| section.kept.iter().any(|k| k.starts_with(&prefix)))
}

fn cancelled(cancel: &CancelToken) -> Result<(), SceneError> {
    if cancel.is_cancelled() { Err(SceneError::Llm(LlmError::Cancelled)) } else { Ok(()) }
}

/// The schema and options of a Director call (either pass) for `view`'s cast. The
/// embedded model decodes under the schema's grammar: with the cast written in, it
/// cannot name anyone else, and the schema's text stays out of its prompt (a small
/// model would only copy it into the values). Other servers keep the plain schema, so a
/// stray unknown name beside real ones is only ignored (and recorded), as it always was.
pub(crate) fn director_schema<T: schemars::JsonSchema>(profile: &crate::llm::ProviderProfile, view: &SceneView) -> (serde_json::Value, StructuredOptions) {
    let mut options = StructuredOptions::default();
    // The type's doc comment (notes on the wire format for whoever reads the code),
    // its title and draft say nothing to the model and cost a small context dearly.
    let mut full = schema_for::<T>();
    if let Some(top) = full.as_object_mut() {
        for key in ["description", "title", "$schema"] {
            top.remove(key);
        }
    }
    let schema = if profile.kind == crate::llm::ProviderKind::Local {
        let cast: Vec<Member<'_>> = view.cast.iter().map(|m| Member { name: &m.name, present: m.active, muted: m.muted }).collect();
        options.schema_in_prompt = false;
        // The fields the small schema leaves out (`openGuidance`, `stateUpdates`) are
        // still the schema's words: a guidance of them is filler, and re-asked.
        options.content.field_names.extend(crate::llm::structured::content::field_names(&full));
        small_model_schema(cast_schema(full, &cast))
    } else {
        full
    };
    (schema, options)
}

/// One structured call of the Director (either pass): send the rendered envelope, ask for `T`
/// (validated, repaired, re-asked) under the schema and reply cap the envelope was
/// planned with, and keep the call's ledger and tokens in the draft.
#[allow(clippy::too_many_arguments)]
fn director_call<T: serde::de::DeserializeOwned + schemars::JsonSchema>(
    ctx: &Context,
    agents: &Agents,
    name: &str,
    (envelope, prompt): (envelope::Envelope, envelope::RenderedPrompt),
    (schema, mut options, reply): (serde_json::Value, StructuredOptions, envelope::ReplyPlan),
    draft: &mut RoundDraft,
    check: ContentCheck,
    settle_without: bool,
    cancel: &CancelToken,
) -> Result<Option<T>, SceneError> {
    let mut request = request_for(&agents.director.1, prompt.system, prompt.user, false);
    reply.apply(&agents.director.1, &mut request);
    options.content.checks.push(check);
    let schema = OutputSchema::<T>::with_schema(&schema_name::<T>(), schema)
        .map_err(|e| SceneError::Agent { agent: name.into(), message: e.to_string() })?;
    let mut notes = envelope.notes;
    // The embedded model answers one call at a time: a round that waits behind an
    // identity run says so, not only "planning…".
    let (scene_id, round) = (draft.scene_id.clone(), draft.round);
    let agent = format!("the {}", name.replacen("director", "Director", 1));
    let on_wait = |holder: Option<&str>| {
        ctx.emit(SceneEvent::Waiting { scene_id: scene_id.clone(), round, agent: agent.clone(), holder: holder.map(str::to_string) })
    };
    let call = CallContext::new(cancel).with_wait(&on_wait);
    let (value, usage) = match complete_with_schema::<T>(&agents.director.0, &schema, request, &options, call) {
        Ok(output) => (Some(output.value), output.usage),
        // Every attempt answered, none usable: for pass 2 the round still stands on the
        // characters' own state lines, and the ledger says why pass 2 changed nothing.
        Err(e @ crate::llm::structured::StructuredError::Exhausted { .. }) if settle_without => {
            notes.push(format!("not applied: {e}; the characters' own state lines stand"));
            (None, e.usage())
        }
        Err(e) => return Err(SceneError::Agent { agent: name.into(), message: e.to_string() }),
    };
    draft.tokens += u64::from(usage.total());
    draft.ledgers.push(CallLedger {
        agent: name.into(),
        character: None,
        ledger: envelope.ledger,
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
        notes,
    });
    Ok(value)
}

/// The Director's schema cut to what a small model can fill with sense: who acts and
/// why, who enters, the state after the round and the time it took. The optional
/// rest (turn order and priority, exits, state before anyone acts, open guidance, new
/// facts, trackers) is left out of its grammar, so it keeps its defaults, and every
/// free string must start with a letter and hold a phrase — a 270M model otherwise
/// writes `"12"` as guidance.
pub(crate) fn small_model_schema(mut schema: serde_json::Value) -> serde_json::Value {
    fn remove(schema: &mut serde_json::Value, at: &str, keys: &[&str]) {
        if let Some(serde_json::Value::Object(properties)) = schema.pointer_mut(at) {
            for key in keys {
                properties.remove(*key);
            }
        }
    }
    remove(&mut schema, "/properties", &["deactivations", "openGuidance", "newFacts", "trackers"]);
    if schema.pointer("/properties/actingCharacters").is_some() {
        remove(&mut schema, "/properties", &["stateUpdates"]);
    }
    remove(&mut schema, "/$defs/ActingCharacter/properties", &["priority", "order"]);
    fn phrases(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                // A state field (`"type": ["string", "null"]`) is optional already:
                // left out it stays unchanged, so the grammar need not offer `null`.
                if map.get("type") == Some(&serde_json::json!(["string", "null"])) {
                    map.insert("type".into(), serde_json::json!("string"));
                }
                let free = map.get("type") == Some(&serde_json::json!("string")) && !["enum", "const", "pattern"].iter().any(|k| map.contains_key(*k));
                if free {
                    // A first word of letters, then more words: not `"12"`, not `"Q401001"`.
                    map.insert("pattern".into(), serde_json::json!("^[A-Za-z][a-z',]* [^\"\\\\]{1,150}$"));
                }
                map.values_mut().for_each(phrases);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(phrases),
            _ => {}
        }
    }
    phrases(&mut schema);
    // A state field may be one word ("wary", "upstairs"), but a word.
    if let Some(serde_json::Value::Object(fields)) = schema.pointer_mut("/$defs/CharacterState/properties") {
        for field in fields.values_mut() {
            if let serde_json::Value::Object(field) = field {
                field.insert("pattern".into(), serde_json::json!("^[A-Za-z][^\"\\\\]{2,79}$"));
            }
        }
    }
    schema
}

/// A cast member as the Director's grammar sees it.
pub(crate) struct Member<'a> {
    pub name: &'a str,
    pub present: bool,
    pub muted: bool,
}

/// The Director's schema with the cast written into it: at least one character acts,
/// picked from those present and not muted (any unmuted one when none is present);
/// only absent characters enter and only present ones leave; state updates are keyed by
/// cast names. A model decoding under the schema's grammar (the embedded one) cannot
/// then name a field, a stranger, or nobody.
pub(crate) fn cast_schema(mut schema: serde_json::Value, cast: &[Member<'_>]) -> serde_json::Value {
    let names = |keep: &dyn Fn(&Member<'_>) -> bool| -> Vec<&str> { cast.iter().filter(|m| keep(m)).map(|m| m.name).collect() };
    let everyone = names(&|_| true);
    if everyone.is_empty() {
        return schema;
    }
    let mut actors = names(&|m| m.present && !m.muted);
    if actors.is_empty() {
        actors = names(&|m| !m.muted);
    }
    let (absent, present) = (names(&|m| !m.present), names(&|m| m.present));
    for (def, allowed) in [("ActingCharacter", &actors), ("Activation", &absent), ("Deactivation", &present)] {
        let allowed = if allowed.is_empty() { &everyone } else { allowed };
        if let Some(serde_json::Value::Object(name)) = schema.pointer_mut(&format!("/$defs/{def}/properties/name")) {
            name.insert("enum".into(), serde_json::json!(allowed));
        }
    }
    if let (Some(serde_json::Value::Object(acting)), false) = (schema.pointer_mut("/properties/actingCharacters"), actors.is_empty()) {
        acting.insert("minItems".into(), serde_json::json!(1));
        acting.insert("maxItems".into(), serde_json::json!(actors.len()));
    }
    let cast = &everyone;
    if let Some(serde_json::Value::Object(updates)) = schema.pointer_mut("/properties/stateUpdates") {
        if let Some(state) = updates.remove("additionalProperties") {
            let properties: serde_json::Map<String, serde_json::Value> = cast.iter().map(|n| (n.to_string(), state.clone())).collect();
            updates.insert("properties".into(), serde_json::Value::Object(properties));
            updates.insert("additionalProperties".into(), serde_json::Value::Bool(false));
        }
    }
    schema
}

/// A Director's reply must be about the scene's real cast: with `someone_acts` (pass 1)
/// at least one present (or entering) unmuted character acts, and state updates, when
/// there are any, name at least one cast member. A plan that names only field names or
/// strangers is re-asked instead of played as a round where nobody acts; a stray
/// unknown name beside real ones is only ignored, as before, and recorded as such. A
/// name is anyone's [`SceneView::member_by_name`] finds, so a cast member named by a
/// first name only is one of the cast.
fn cast_check(view: &SceneView, someone_acts: bool) -> ContentCheck {
    let view = view.clone();
    let cast: Vec<(String, bool, bool)> = view.cast.iter().map(|m| (m.name.clone(), m.active, m.muted)).collect();
    Arc::new(move |value: &serde_json::Value| {
        let known = |name: &str| view.member_by_name(name).is_some();
        let names = cast.iter().map(|(n, _, _)| n.as_str()).collect::<Vec<_>>().join(", ");
        // Who the correction offers: only those who can act (muted characters cannot).
        let who = |present: bool| cast.iter().filter(|(_, a, m)| *a == present && !m).map(|(n, _, _)| n.as_str()).collect::<Vec<_>>().join(", ");
        let (present, absent) = (who(true), who(false));
        let choose = match (present.is_empty(), absent.is_empty()) {
            (false, true) => format!("name at least one of the characters in this scene who can act: {present}"),
            (false, false) => format!("name at least one of the characters in this scene who can act: {present} (or bring in one of {absent} with activations)"),
            _ => format!("nobody who can act is in the scene: bring in one of {absent} with activations and name them"),
        };
        let field = |camel: &str, snake: &str| value.get(camel).or_else(|| value.get(snake)).cloned();
        let listed = |camel: &str, snake: &str| -> Vec<String> {
            field(camel, snake)
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default()
                .iter()
                .map(|item| item.get("name").and_then(|n| n.as_str()).unwrap_or_default().to_string())
                .collect()
        };
        let strangers = |list: &[String]| list.iter().filter(|n| !known(n)).map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ");
        let mut problems = Vec::new();
        let acting = listed("actingCharacters", "acting_characters");
        let entering = listed("activations", "activations");
        let can_act = cast.iter().any(|(_, _, muted)| !muted);
        let acts = acting.iter().any(|name| {
            view.member_by_name(name).is_some_and(|m| {
                !m.muted && (m.active || entering.iter().any(|e| view.member_by_name(e).is_some_and(|entering| entering.id == m.id)))
            })
        });
        if someone_acts && can_act && !acts {
            let named = if acting.is_empty() { "names nobody".to_string() } else { format!("names only {}", strangers(&acting)) };
            let named = if acting.iter().all(|n| known(n)) && !acting.is_empty() { "names only characters who are absent or muted".into() } else { named };
            problems.push(crate::llm::structured::SchemaError {
                path: "/actingCharacters".into(),
                message: format!("{named}, so nobody would act; {choose}"),
                schema_path: "content/cast".into(),
            });
        }
        if let Some(serde_json::Value::Object(updates)) = field("stateUpdates", "state_updates") {
            let keys: Vec<String> = updates.keys().cloned().collect();
            if !keys.is_empty() && !keys.iter().any(|k| known(k)) {
                problems.push(crate::llm::structured::SchemaError {
                    path: "/stateUpdates".into(),
                    message: format!("is keyed by {}, who are not characters in this scene; key it by their names: {names}", strangers(&keys)),
                    schema_path: "content/cast".into(),
                });
            }
        }
        problems
    })
}

/// The check of a plan the game master sends back: `base` (the Director's own), and no
/// name anywhere in it that is not one of the cast. A stray name the Director makes up is
/// only ignored, but one a person typed is a slip (a typo, someone not yet in the scene)
/// that would silently drop that character from the round.
fn reviewed_check(view: &SceneView, base: ContentCheck) -> ContentCheck {
    let cast: Vec<(String, String)> = view.cast.iter().map(|m| (m.id.clone(), m.name.clone())).collect();
    let view = view.clone();
    Arc::new(move |value: &serde_json::Value| {
        let value = &ids_as_names(&cast, value);
        let mut problems = base(value);
        let known = |name: &str| view.member_by_name(name).is_some();
        let names = cast.iter().map(|(_, n)| n.as_str()).collect::<Vec<_>>().join(", ");
        let field = |camel: &str, snake: &str| value.get(camel).or_else(|| value.get(snake)).cloned();
        let mut said = Vec::new();
        for (camel, snake) in [("actingCharacters", "acting_characters"), ("activations", "activations"), ("deactivations", "deactivations")] {
            let listed: Vec<String> = field(camel, snake)
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default()
                .iter()
                .map(|item| item.get("name").and_then(|n| n.as_str()).unwrap_or_default().to_string())
                .collect();
            let strangers: Vec<String> = listed.iter().filter(|n| !known(n)).map(|n| format!("{n:?}")).collect();
            if !strangers.is_empty() {
                said.push((format!("/{camel}"), strangers));
            }
        }
        if let Some(serde_json::Value::Object(updates)) = field("stateUpdates", "state_updates") {
            let strangers: Vec<String> = updates.keys().filter(|k| !known(k)).map(|n| format!("{n:?}")).collect();
            if !strangers.is_empty() {
                said.push(("/stateUpdates".to_string(), strangers));
            }
        }
        for (path, strangers) in said {
            // The base check may already have said so for this part of the plan.
            if problems.iter().any(|p| p.path == path) {
                continue;
            }
            problems.push(crate::llm::structured::SchemaError {
                path,
                message: format!(
                    "names {}, who {} not in this scene's cast; the cast is {names} (`scene cast add` brings someone in)",
                    strangers.join(", "),
                    if strangers.len() == 1 { "is" } else { "are" }
                ),
                schema_path: "content/cast".into(),
            });
        }
        problems
    })
}

/// `value`, a plan sent back by hand, with every cast member it names by id (the
/// contract's `{id|name}`) named by name instead, in its lists and `stateUpdates` keys.
fn ids_as_names(cast: &[(String, String)], value: &serde_json::Value) -> serde_json::Value {
    let name_of = |key: &str| cast.iter().find(|(id, _)| id == key.trim()).map(|(_, name)| name.clone());
    let mut value = value.clone();
    for list in ["actingCharacters", "acting_characters", "activations", "deactivations"] {
        for item in value.get_mut(list).and_then(|v| v.as_array_mut()).into_iter().flatten() {
            let Some(item) = item.as_object_mut() else { continue };
            let key = item.get("name").or_else(|| item.get("id")).and_then(|v| v.as_str()).map(str::to_string);
            if let Some(name) = key.as_deref().and_then(name_of) {
                item.remove("id");
                item.insert("name".into(), name.into());
            }
        }
    }
    for field in ["stateUpdates", "state_updates"] {
        if let Some(serde_json::Value::Object(updates)) = value.get_mut(field) {
            *updates = std::mem::take(updates).into_iter().map(|(key, state)| (name_of(&key).unwrap_or(key), state)).collect();
        }
    }
    value
}

/// Every cast member `plan` names by id or by part of the name (a first name), named by
/// the full name instead, so the record, the round's flags and every later comparison
/// read one name per character. A name no one of the cast answers to is left for the
/// stages to record as ignored.
fn plan_by_full_names(view: &SceneView, plan: &mut DirectorPlan) {
    let names = plan
        .acting_characters
        .iter_mut()
        .map(|a| &mut a.name)
        .chain(plan.activations.iter_mut().map(|a| &mut a.name))
        .chain(plan.deactivations.iter_mut().map(|a| &mut a.name));
    names.for_each(|name| full_name(view, name));
    plan.state_updates.iter_mut().for_each(|u| full_name(view, &mut u.name));
}

fn full_name(view: &SceneView, name: &mut String) {
    if let Some(member) = view.member_by_name(name) {
        *name = member.name.clone();
    }
}

/// `plan` as it will play: a cast member named to act while absent enters (models often
/// name someone to act and forget the activation; the game master expects them to come
/// in, not to vanish), and a name no one of the cast answers to is taken out of the
/// acting list, recorded as ignored and said as a notice of the round, so neither the
/// log nor the plan panel says that someone acts who will not.
fn settle_actors(view: &SceneView, plan: &mut DirectorPlan, ignored: &mut Vec<String>, notices: &mut Vec<String>) {
    let mut strangers = Vec::new();
    plan.acting_characters.retain(|a| {
        let known = view.member_by_name(&a.name).is_some();
        if !known {
            strangers.push(a.name.clone());
        }
        known
    });
    for name in strangers {
        notices.push(format!("the Director named {name} to act, who is not in the scene's cast: ignored"));
        ignored.push(format!("{name} (not in the cast)"));
    }
    for actor in &plan.acting_characters {
        let Some(member) = view.member_by_name(&actor.name) else { continue };
        let entering = plan.activations.iter().any(|a| view.member_by_name(&a.name).is_some_and(|m| m.id == member.id));
        if !member.active && !entering {
            plan.activations.push(crate::scene::model::Activation {
                name: member.name.clone(),
                entry_guidance: "You come into the scene to act this round.".into(),
            });
        }
    }
}

/// A character already in the scene does not enter it: a Director (or a reviewed plan)
/// that lists one anyway is recorded as ignored, so no one is told "you enter" in a
/// room they stood in all along, and the plan shown does not say "Enters:" for them.
fn drop_entries_of_the_present(view: &SceneView, plan: &mut DirectorPlan, ignored: &mut Vec<String>) {
    plan.activations.retain(|a| {
        let present = view.member_by_name(&a.name).is_some_and(|m| m.active);
        if present {
            ignored.push(format!("{} (entering, but already in the scene)", a.name));
        }
        !present
    });
}

/// Director pass 1: who acts, enters and leaves, and the state before anyone acts.
pub(super) fn director_plan(
    ctx: &Context,
    agents: &Agents,
    config: &SceneConfig,
    draft: &mut RoundDraft,
    cancel: &CancelToken,
) -> Result<DirectorPlan, SceneError> {
    let turn = envelope::director_turn(draft.round, draft.input.as_deref());
    let (schema, options) = director_schema::<DirectorPlan>(&agents.director.1, &draft.view);
    let mut reply = envelope::ReplyPlan::structured(&agents.director.1, &schema, &options);
    let mut lore_state = std::mem::take(&mut draft.lore_state);
    let fitted = envelope::assemble_for_call(
        &agents.templates,
        AgentKind::Director,
        None,
        &turn,
        &config.budgets,
        &agents.director.1,
        &mut reply,
        &draft.envelope_input(AgentKind::Director, &draft.view, config, Vec::new()),
        &mut lore_state,
    );
    draft.lore_state = lore_state;
    let fitted = fitted?;
    let check = cast_check(&draft.view, draft.force.is_empty());
    let mut plan: DirectorPlan =
        director_call(ctx, agents, "director", fitted, (schema, options, reply), draft, check, false, cancel)?.unwrap_or_default();
    plan_by_full_names(&draft.view, &mut plan);
    drop_entries_of_the_present(&draft.view, &mut plan, &mut draft.record.ignored);

    // The game master's word beats the Director's: muted characters do not act, and
    // forced ones do (after those it picked), present or not.
    plan.acting_characters.retain(|a| {
        let silenced = draft.view.member_by_name(&a.name).is_some_and(|m| m.muted);
        if silenced {
            draft.record.ignored.push(format!("{} (muted)", a.name));
        }
        !silenced
    });
    for name in &draft.force {
        let Some(member) = draft.view.member_by_name(name).cloned() else {
            draft.record.ignored.push(format!("{name} (forced, but not in the cast)"));
            continue;
        };
        // Named by the Director too, absent, they still enter: [`settle_actors`] brings
        // them in, with the game master's word for how.
        if !member.active && !plan.activations.iter().any(|a| a.name == member.name) {
            plan.activations.push(crate::scene::model::Activation {
                name: member.name.clone(),
                entry_guidance: "The game master brings you into the scene.".into(),
            });
        }
        if !plan.acting_characters.iter().any(|a| draft.view.member_by_name(&a.name).is_some_and(|m| m.id == member.id)) {
            plan.acting_characters
                .push(crate::scene::model::ActingCharacter::forced(member.name.clone(), "The game master asks you to act this round.".into()));
        }
    }
    settle_actors(&draft.view, &mut plan, &mut draft.record.ignored, &mut draft.notices);
    // What the log and the plan panel show is who will act, not what the Director wrote.
    draft.emit_decision(ctx, 1, DirectorDecision::Plan(Box::new(plan.clone())));
    // The game master reviews the plan before anyone acts: their version is the plan.
    if draft.review {
        let check = reviewed_check(&draft.view, cast_check(&draft.view, draft.force.is_empty()));
        let mut reviewed = super::review::wait_for_plan(ctx, &draft.scene_id, draft.round, plan.clone(), check, cancel)?;
        // Whoever it names by id or by a first name is named by name from here on.
        plan_by_full_names(&draft.view, &mut reviewed);
        drop_entries_of_the_present(&draft.view, &mut reviewed, &mut draft.record.ignored);
        settle_actors(&draft.view, &mut reviewed, &mut draft.record.ignored, &mut draft.notices);
        if reviewed != plan {
            draft.record.proposed = Some(plan);
        }
        plan = reviewed;
    }
    draft.record.plan = plan.clone();
    for activation in &plan.activations {
        match draft.view.member_by_name(&activation.name) {
            Some(member) => {
                draft.active.insert(member.id.clone());
                draft.entering.insert(member.id.clone(), activation.entry_guidance.clone());
                draft.record.flags.entry(member.name.clone()).or_default().entered = true;
            }
            None => draft.record.ignored.push(activation.name.clone()),
        }
    }
    for deactivation in &plan.deactivations {
        match draft.view.member_by_name(&deactivation.name) {
            Some(member) => {
                draft.leaving.insert(member.id.clone(), deactivation.exit_guidance.clone());
                draft.record.flags.entry(member.name.clone()).or_default().exited = true;
            }
            None => draft.record.ignored.push(deactivation.name.clone()),
        }
    }
    apply_updates(&mut draft.states, &draft.view, &plan.state_updates, &mut draft.record.ignored);
    for member in &mut draft.live.cast {
        member.active = draft.active.contains(&member.id);
        if let Some(delta) = draft.states.get(&member.id) {
            member.state.apply(delta);
        }
    }
    Ok(plan)
}

/// Each acting character in turn, streamed; its own `[field: value]` lines change its
/// state for the characters after it.
pub(super) fn characters(
    ctx: &Arc<Context>,
    agents: &Agents,
    config: &SceneConfig,
    recall: &Recall,
    plan: &DirectorPlan,
    draft: &mut RoundDraft,
    cancel: &CancelToken,
) -> Result<(), SceneError> {
    let mut acted = BTreeSet::new();
    for actor in turn_order(plan.acting_characters.clone()) {
        let Some(member) = draft.live.member_by_name(&actor.name).filter(|m| m.active).cloned() else {
            draft.record.ignored.push(actor.name.clone());
            continue;
        };
        if !acted.insert(member.id.clone()) {
            continue; // named twice: one turn each
        }
        draft.record.flags.entry(member.name.clone()).or_default().has_acted = true;
        cancelled(cancel)?;
        let mut guidance = vec![actor.guidance.clone()];
        if let Some(entry) = draft.entering.get(&member.id) {
            guidance.push(format!("You enter the scene this round: {entry}"));
        }
        if let Some(exit) = draft.leaving.get(&member.id) {
            guidance.push(format!("You leave the scene at the end of this round: {exit}"));
        }
        guidance.push(plan.open_guidance.clone());
        let recalled =
            recall.for_character(
                &draft.view.campaign_id,
                &draft.view.id,
                &member.name,
                &draft.history,
                &guidance,
                config.memories_per_call,
                config.recall_skips_newest,
            );
        let mut lore_state = std::mem::take(&mut draft.lore_state);
        let call = CallSetup {
            live: &draft.live,
            notes: &draft.notes,
            history: &draft.history,
            lore: &draft.lore,
            message_number: u64::from(draft.next_number),
            seed: draft.seed,
            bank: draft.bank.as_deref(),
        };
        let outcome =
            character_turn(ctx, agents, config, &call, &mut lore_state, &member, &recalled.hits, guidance, &draft.scene_id, draft.round, cancel);
        draft.lore_state = lore_state;
        let (reply, usage, ledger, macro_notes) = outcome?;
        draft.tokens += u64::from(usage.total());
        draft.ledgers.push(CallLedger {
            agent: "character".into(),
            character: Some(member.name.clone()),
            ledger,
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            notes: recalled.notes.into_iter().chain(macro_notes).collect(),
        });
        // What the prompt carried: the recalled memories its budget kept.
        let carried: Vec<RetrievalHit> = recalled.hits.into_iter().filter(|h| kept_memory(&draft.ledgers, &h.id)).collect();
        draft.injections.push((format!("scene:character:{}", member.name), recalled.query, carried));
        // The reply's own tags, then what its narration implies for fields it left open.
        let (prose, mut delta) = split_delta(&reply);
        let implied = super::infer::infer_delta(&prose, &member.name);
        for field in crate::scene::model::STATE_FIELDS {
            if delta.get(field).is_none()
                && let Some(value) = implied.get(field)
            {
                delta.set(field, value);
            }
        }
        ctx.emit(SceneEvent::CharacterFinished {
            scene_id: draft.scene_id.clone(),
            round: draft.round,
            character_id: member.id.clone(),
            name: member.name.clone(),
            content: prose.clone(),
            delta: delta.clone(),
        });
        if let Some(slot) = draft.live.cast.iter_mut().find(|c| c.id == member.id) {
            slot.state.apply(&delta);
        }
        draft.states.entry(member.id.clone()).or_default().apply(&delta);
        draft.character_deltas.entry(member.id.clone()).or_default().apply(&delta);
        draft.push_message(MessageKind::Character, Some(member.id.clone()), member.name.clone(), prose);
    }
    Ok(())
}

/// The Narrator, then the World agent (both optional); each sees the history as it
/// stands when it runs, narration included.
pub(super) fn after_characters(
    ctx: &Arc<Context>,
    agents: &Agents,
    config: &SceneConfig,
    plan: &DirectorPlan,
    draft: &mut RoundDraft,
    cancel: &CancelToken,
) -> Result<(), SceneError> {
    if let Some(narrator) = &agents.narrator {
        let mut lore_state = std::mem::take(&mut draft.lore_state);
        let at = after(ctx, agents, config, plan, draft, cancel);
        let outcome = narration::narrate(&at, narrator, &mut lore_state);
        draft.lore_state = lore_state;
        let (content, ledger) = outcome?;
        draft.tokens += u64::from(ledger.prompt_tokens) + u64::from(ledger.completion_tokens);
        draft.ledgers.push(ledger);
        if !content.is_empty() {
            draft.push_message(MessageKind::Narrator, None, "Narrator".into(), content);
        }
    }
    if let Some(world) = &agents.world {
        let mut lore_state = std::mem::take(&mut draft.lore_state);
        let at = after(ctx, agents, config, plan, draft, cancel);
        let outcome = narration::world(&at, world, &mut lore_state);
        draft.lore_state = lore_state;
        let (update, ledger) = outcome?;
        draft.tokens += u64::from(ledger.prompt_tokens) + u64::from(ledger.completion_tokens);
        draft.ledgers.push(ledger);
        for (name, value) in &update.trackers {
            draft.trackers.insert(name.clone(), value.clone());
        }
        draft.elapsed += plausible_minutes(update.elapsed_minutes, draft.ledgers.last_mut());
        // Pass 2 reconciles against the world as it now stands.
        draft.live.trackers = draft.trackers.clone();
        draft.record.world = Some(update);
    }
    Ok(())
}

fn after<'a>(
    ctx: &'a Arc<Context>,
    agents: &'a Agents,
    config: &'a SceneConfig,
    plan: &'a DirectorPlan,
    draft: &'a RoundDraft,
    cancel: &'a CancelToken,
) -> AfterCharacters<'a> {
    AfterCharacters {
        ctx,
        config,
        templates: &agents.templates,
        live: &draft.live,
        notes: &draft.notes,
        history: &draft.history,
        lore: &draft.lore,
        open_guidance: &plan.open_guidance,
        message_number: u64::from(draft.next_number),
        seed: draft.seed,
        scene_id: &draft.scene_id,
        round: draft.round,
        cancel,
        bank: draft.bank.as_deref(),
    }
}

/// Director pass 2: reconcile the characters' replies into states, trackers and facts;
/// where a character's own line and pass 2 disagree, pass 2 wins and the conflict is
/// recorded.
pub(super) fn reconcile(
    ctx: &Context,
    agents: &Agents,
    config: &SceneConfig,
    plan: &DirectorPlan,
    draft: &mut RoundDraft,
    pass: u8,
    cancel: &CancelToken,
) -> Result<bool, SceneError> {
    let mut lore_state = std::mem::take(&mut draft.lore_state);
    let turn = envelope::reconcile_turn(draft.round);
    let (schema, options) = director_schema::<Reconciliation>(&agents.director.1, &draft.view);
    let mut reply = envelope::ReplyPlan::structured(&agents.director.1, &schema, &options);
    let fitted = envelope::assemble_for_call(
        &agents.templates,
        AgentKind::Reconcile,
        None,
        &turn,
        &config.budgets,
        &agents.director.1,
        &mut reply,
        &draft.envelope_input(AgentKind::Reconcile, &draft.live, config, vec![plan.open_guidance.clone()]),
        &mut lore_state,
    );
    draft.lore_state = lore_state;
    let fitted = fitted?;
    let check = cast_check(&draft.view, false);
    let Some(mut reconciliation) =
        director_call::<Reconciliation>(ctx, agents, "director (reconcile)", fitted, (schema, options, reply), draft, check, true, cancel)?
    else {
        // Said where the user reads the round, not only in its ledger: what this pass
        // would have settled (states, time, trackers, facts) did not happen.
        let lost = if pass == 2 { "its state updates, in-fiction time, trackers and new facts" } else { "its further state updates, trackers and facts" };
        let why = draft.ledgers.last().and_then(|call| call.notes.last()).map(|n| n.trim_start_matches("not applied: ").to_string()).unwrap_or_default();
        draft.notices.push(format!("Director pass {pass} (reconciliation) was dropped, so {lost} were not applied: {why}"));
        tracing::warn!(scene = %draft.scene_id, round = draft.round, pass, "director reconciliation dropped: {why}");
        return Ok(false);
    };
    reconciliation.state_updates.iter_mut().for_each(|u| full_name(&draft.view, &mut u.name));
    draft.emit_decision(ctx, pass, DirectorDecision::Reconciliation(Box::new(reconciliation.clone())));
    let changed = changes_anything(&reconciliation, draft, pass);
    if pass > 2 && reconciliation.elapsed_minutes > 0 && let Some(call) = draft.ledgers.last_mut() {
        call.notes.push(format!("minutes from pass {pass} not applied: the round's time was settled in pass 2"));
    }
    for update in &reconciliation.state_updates {
        let Some(member) = draft.view.member_by_name(&update.name) else { continue };
        if let Some(delta) = draft.character_deltas.get(&member.id) {
            for field in STATE_FIELDS {
                if let (Some(mine), Some(theirs)) = (delta.get(field), update.state.get(field).filter(|v| !v.trim().is_empty()))
                    && mine != theirs.trim()
                {
                    draft.record.conflicts.push(Conflict {
                        character: member.name.clone(),
                        field: field.to_string(),
                        character_value: mine.to_string(),
                        director_value: theirs.trim().to_string(),
                    });
                }
            }
        }
    }
    apply_updates(&mut draft.states, &draft.view, &reconciliation.state_updates, &mut draft.record.ignored);
    let world_owns_trackers = agents.world.is_some();
    if world_owns_trackers
        && (!reconciliation.trackers.is_empty() || reconciliation.elapsed_minutes > 0)
        && let Some(call) = draft.ledgers.last_mut()
    {
        call.notes.push("trackers and minutes from pass 2 not applied: the World agent owns them".into());
    }
    for (name, value) in reconciliation.trackers.iter().filter(|_| !world_owns_trackers) {
        draft.trackers.insert(name.clone(), value.clone());
    }
    for fact in &reconciliation.new_facts {
        if !fact.trim().is_empty() && !draft.facts.iter().any(|f| f == fact.trim()) {
            draft.facts.push(fact.trim().to_string());
        }
    }
    if !world_owns_trackers && pass == 2 {
        draft.elapsed += plausible_minutes(reconciliation.elapsed_minutes, draft.ledgers.last_mut());
    }
    // The next pass reconciles against the scene as this one left it.
    for member in &mut draft.live.cast {
        if let Some(delta) = draft.states.get(&member.id) {
            member.state.apply(delta);
        }
    }
    draft.live.trackers = draft.trackers.clone();
    draft.live.facts = draft.facts.clone();
    draft.record.reconciliation = Some(reconciliation);
    Ok(changed)
}

/// Whether a reconciliation would change the scene as it stands: a state field, a
/// tracker, a new fact (or, in pass 2, time passing). A pass that changes nothing means
/// the round is settled and no further pass is asked for.
fn changes_anything(reconciliation: &Reconciliation, draft: &RoundDraft, pass: u8) -> bool {
    let state_changes = reconciliation.state_updates.iter().any(|update| {
        draft.live.member_by_name(&update.name).is_some_and(|member| {
            STATE_FIELDS.iter().any(|field| {
                update.state.get(field).filter(|v| !v.trim().is_empty()).is_some_and(|v| member.state.get(field) != Some(v.trim()))
            })
        })
    });
    let tracker_changes = reconciliation.trackers.iter().any(|(name, value)| draft.trackers.get(name) != Some(value));
    let new_facts = reconciliation.new_facts.iter().any(|f| !f.trim().is_empty() && !draft.facts.iter().any(|x| x == f.trim()));
    state_changes || tracker_changes || new_facts || (pass == 2 && reconciliation.elapsed_minutes > 0)
}

/// What the close committed, for `round_completed`.
pub(super) struct Closed {
    pub messages: Vec<SceneMessage>,
    pub active: Vec<String>,
    pub conflicts: Vec<Conflict>,
    pub tokens: u64,
    pub notices: Vec<String>,
}

/// The round close: messages, states, active set, trackers, facts, time, lore timers,
/// the round's memories and injection records, in one transaction.
pub(super) fn close(ctx: &Context, recall: &Recall, mut draft: RoundDraft, cancel: &CancelToken) -> Result<Closed, SceneError> {
    for id in draft.leaving.keys() {
        draft.active.remove(id);
    }
    // Full states (not deltas) for every character the round touched.
    let mut final_states = BTreeMap::new();
    for (id, delta) in &draft.states {
        let mut state = draft.view.cast.iter().find(|c| &c.id == id).map(|c| c.state.clone()).unwrap_or_default();
        state.apply(delta);
        final_states.insert(id.clone(), state);
    }
    cancelled(cancel)?;
    // The round's messages become memories of everyone present during it.
    let present: Vec<String> = draft.live.active().map(|c| c.name.clone()).collect();
    let turns = recall.turns(&draft.view.campaign_id, &draft.scene_id, &draft.new_messages, &present);
    let (memories, embed_note) = recall.prepare(turns).map_err(|e| SceneError::Invalid(e.to_string()))?;
    if let (Some(note), Some(last)) = (embed_note, draft.ledgers.last_mut()) {
        last.notes.push(note);
    }
    let close = RoundClose {
        scene_id: draft.scene_id.clone(),
        campaign_id: draft.view.campaign_id.clone(),
        round: draft.round,
        input: draft.input.clone(),
        messages: draft.new_messages.iter().map(|m| (m.kind, m.character_id.clone(), m.speaker.clone(), m.content.clone())).collect(),
        states: final_states,
        active: draft.active.clone(),
        trackers: draft.trackers,
        facts: draft.facts,
        elapsed_minutes: draft.elapsed,
        campaign_before: Some(records::CampaignState {
            trackers: draft.view.trackers.clone(),
            facts: draft.view.facts.clone(),
            elapsed_minutes: draft.view.elapsed_minutes,
        }),
        director: serde_json::to_value(&draft.record).map_err(|e| SceneError::Invalid(e.to_string()))?,
        ledgers: serde_json::to_value(&draft.ledgers).map_err(|e| SceneError::Invalid(e.to_string()))?,
        tokens: draft.tokens,
        lore_state: draft.lore_state,
    };
    cancelled(cancel)?;
    let (written, memory_write) = ctx.store.transaction(|tx| {
        let written = records::close_round(tx, &close)?;
        let memory_write = memories.write(tx)?;
        for (agent, query, hits) in &draft.injections {
            crate::memory::injections::record(tx, agent, query, hits)?;
        }
        Ok((written, memory_write))
    })?;
    if let Some(bank) = recall.bank() {
        bank.publish(memory_write);
    }
    Ok(Closed {
        messages: written,
        active: draft.active.into_iter().collect(),
        conflicts: draft.record.conflicts,
        tokens: draft.tokens,
        notices: draft.notices,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene::model::{DirectorPlan, Reconciliation};

    /// The embedded model's schema leaves `openGuidance` and `stateUpdates` out, but a
    /// guidance made of them (what a 270M model wrote in 2 of 3 rounds) is still filler.
    #[test]
    fn guidance_of_the_schemas_field_names_is_filler_for_the_small_model_too() {
        let view: SceneView = serde_json::from_value(serde_json::json!({
            "id": "s", "name": "n", "description": "", "world": "", "campaign": "", "campaign_id": "", "arc": "", "rounds": 0,
            "cast": [], "trackers": {}, "facts": [], "elapsed_minutes": 0, "persona": null
        }))
        .unwrap();
        let profile = crate::llm::ProviderProfile { kind: crate::llm::ProviderKind::Local, ..Default::default() };
        let (schema, options) = director_schema::<DirectorPlan>(&profile, &view);
        assert!(schema.pointer("/properties/openGuidance").is_none());
        for junk in ["openguidance 1 = stateUpdates", "stateupdate 1 = openGuidance 1 = ", "Open Guidance"] {
            let plan = serde_json::json!({"actingCharacters": [{"name": "Wren Talloway", "guidance": junk}]});
            assert!(!crate::llm::structured::content::check(&schema, &plan, &options.content).is_empty(), "{junk}");
        }
        let plan = serde_json::json!({"actingCharacters": [{"name": "Wren Talloway", "guidance": "Read the letter aloud."}]});
        assert!(crate::llm::structured::content::check(&schema, &plan, &options.content).is_empty());
    }

    /// Only cast names validate where the Director names someone, and the schema a
    /// grammar is built from says so.
    #[test]
    fn the_directors_schema_lists_the_cast() {
        let cast = [
            Member { name: "Wren Talloway", present: true, muted: false },
            Member { name: "Ossian Vale", present: true, muted: true },
            Member { name: "Marguerite Siltborne", present: false, muted: false },
        ];
        let plan = crate::llm::structured::CompiledSchema::new(cast_schema(schema_for::<DirectorPlan>(), &cast)).unwrap();
        let good = serde_json::json!({"actingCharacters": [{"name": "Wren Talloway"}], "stateUpdates": {"Ossian Vale": {"mood": "uneasy"}}});
        assert!(plan.validate(&good).is_empty(), "{:?}", plan.validate(&good));
        let junk = serde_json::json!({"actingCharacters": [{"name": "state_update"}], "stateUpdates": {"state_update": {"mood": "mood"}}});
        let paths: Vec<String> = plan.validate(&junk).into_iter().map(|e| e.path).collect();
        assert_eq!(paths, ["/actingCharacters/0/name", "/stateUpdates"], "{paths:?}");
        // Nobody, a muted character, or one who is not there: none of them validates.
        for acting in [serde_json::json!([]), serde_json::json!([{"name": "Ossian Vale"}]), serde_json::json!([{"name": "Marguerite Siltborne"}])] {
            assert!(!plan.validate(&serde_json::json!({"actingCharacters": acting})).is_empty(), "{acting}");
        }
        let entering = serde_json::json!({"actingCharacters": [{"name": "Wren Talloway"}], "activations": [{"name": "Marguerite Siltborne"}]});
        assert!(plan.validate(&entering).is_empty());
        let reconcile = cast_schema(schema_for::<Reconciliation>(), &cast);
        assert_eq!(reconcile.pointer("/properties/stateUpdates/additionalProperties"), Some(&serde_json::json!(false)));
        assert!(reconcile.pointer("/properties/stateUpdates/properties/Wren Talloway").is_some());
        // For the small model: names and guidance only, and guidance that is words.
        let small = crate::llm::structured::CompiledSchema::new(small_model_schema(cast_schema(schema_for::<DirectorPlan>(), &cast))).unwrap();
        assert!(small.schema().pointer("/properties/stateUpdates").is_none());
        assert!(small.validate(&serde_json::json!({"actingCharacters": [{"name": "Wren Talloway", "guidance": "Read the letter."}]})).is_empty());
        for junk in ["12", "Q401001", "Q401001 (in the scene)"] {
            assert!(!small.validate(&serde_json::json!({"actingCharacters": [{"name": "Wren Talloway", "guidance": junk}]})).is_empty(), "{junk}");
        }
        let twice = serde_json::json!({"actingCharacters": [{"name": "Wren Talloway"}, {"name": "Wren Talloway"}]});
        assert!(!small.validate(&twice).is_empty(), "one present unmuted actor: one entry at most");
        assert!(crate::llm::local::grammar::from_schema(small.schema()).is_ok());
        let reconcile = crate::llm::structured::CompiledSchema::new(small_model_schema(cast_schema(schema_for::<Reconciliation>(), &cast))).unwrap();
        assert!(reconcile.validate(&serde_json::json!({"stateUpdates": {"Wren Talloway": {"mood": "wary"}}})).is_empty());
        assert!(!reconcile.validate(&serde_json::json!({"stateUpdates": {"Wren Talloway": {"mood": "[1]"}}})).is_empty());
        assert!(crate::llm::local::grammar::from_schema(reconcile.schema()).is_ok());
        // No cast, nothing to list: the schema is left as it is.
        assert_eq!(cast_schema(schema_for::<DirectorPlan>(), &[]), schema_for::<DirectorPlan>());
    }
}

/// More in-fiction time than one round can pass: a year. A small model asked for the
/// round's minutes sometimes writes a number like 1200000004, and a campaign's clock that
/// jumps two thousand years is worse than one that stands still. A real time skip that
/// long is set by hand (`campaign time`).
pub const MAX_ROUND_MINUTES: u32 = 365 * 24 * 60;

/// The minutes an agent reported, or none (said in its call's notes) past [`MAX_ROUND_MINUTES`].
fn plausible_minutes(minutes: u32, call: Option<&mut CallLedger>) -> u64 {
    if minutes <= MAX_ROUND_MINUTES {
        return u64::from(minutes);
    }
    if let Some(call) = call {
        call.notes.push(format!("{minutes} in-fiction minutes not applied: more than a year in one round (set a time skip by hand)"));
    }
    0
}
