//! The context envelope of one agent call: candidates for every SPEC §3 section,
//! fitted into the budgets by [`prompting::enforce`], then rendered by the templates
//! in `prompts/scene/`. The ledger of the fit travels with the round.
//!
//! Where each kind of context goes:
//! - history: the scene's messages after the rounds its summary covers, this round's
//!   included, newest kept first;
//! - summaries: the scene's running summary and earlier scenes' summaries;
//! - lore: the campaign's lorebooks activated with World Info semantics (see
//!   [`super::lore`]); the activation's budget is the lore section's allocation, and
//!   entries held back (budget, probability, groups, timers) are in the ledger;
//! - memories: what the acting character witnessed, retrieved by the round;
//! - setting: the world's, the campaign's and the scene's descriptions (an arc has
//!   none), cut at a sentence when the section is short;
//! - notes: world / campaign / arc / scene notes, persona, trackers, facts and the
//!   campaign's in-fiction time in words;
//! - director guidance: the Director's words for the acting character;
//! - character guidance: character sheets and their current states; a character gets
//!   its own sheet whole and an excerpt of each other present character's description.

use super::model::{CastMember, STATE_FIELDS, SceneMessage, SceneView};
use super::records::SceneNotes;
use super::lore::{LoreCall, LorePlace, PreparedLore};
use crate::lorebook::{InsertionPosition, PromptRole};
use crate::llm::structured::{StructuredOptions, schema_instruction};
use crate::llm::tokens::estimate;
use crate::llm::ResponseFormat;
use crate::lorebook::activation::ActivationState;
use crate::memory::RetrievalHit;
use crate::prompting::macros::{MacroContext, expand};
use super::SceneError;
use crate::prompting::budget::ESSENTIAL;
use crate::prompting::{BudgetItem, BudgetLedger, BudgetPlan, DroppedItem, PromptTemplates, Section, TemplateError, allocate, enforce};
use serde::Serialize;
use std::collections::BTreeMap;

/// Which agent the envelope is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentKind {
    /// Director pass 1: plans the round.
    Director,
    /// Director pass 2: reconciles what the characters did.
    Reconcile,
    Character,
    /// Narration after the characters, before the reconciliation.
    Narrator,
    /// Trackers and time, when the World agent is on.
    World,
}

impl AgentKind {
    pub fn template(self) -> &'static str {
        match self {
            AgentKind::Director => "scene/director.j2",
            AgentKind::Reconcile => "scene/reconcile.j2",
            AgentKind::Character => "scene/character.j2",
            AgentKind::Narrator => "scene/narrator.j2",
            AgentKind::World => "scene/world.j2",
        }
    }

    /// The role whose profile the call uses.
    pub fn role(self) -> &'static str {
        match self {
            AgentKind::Director | AgentKind::Reconcile => "director",
            AgentKind::Character => "character",
            AgentKind::Narrator => "narrator",
            AgentKind::World => "world",
        }
    }
}

/// What one call sees, before budgets.
pub struct EnvelopeInput<'a> {
    pub agent: AgentKind,
    pub view: &'a SceneView,
    pub notes: &'a SceneNotes,
    /// Stored messages, oldest first, then this round's so far.
    pub history: &'a [SceneMessage],
    /// The campaign's prepared lorebooks (`None`: no lore section).
    pub lore: Option<&'a PreparedLore>,
    /// Memories retrieved for this call, best first.
    pub memories: &'a [RetrievalHit],
    /// The character this call speaks for ([`AgentKind::Character`] only).
    pub character: Option<&'a CastMember>,
    /// The Director's guidance for this call, most important first.
    pub director_guidance: Vec<String>,
    /// Messages scanned for lore keys (the most recent ones).
    pub lore_scan_depth: usize,
    /// The number of the message this call leads to (lore timers count in these).
    pub message_number: u64,
    /// Seed of the lore's probability rolls (see [`super::lore::seed_for`]).
    pub seed: u64,
    /// The call's cancel flag, which stops lore activation early.
    pub cancel: Option<&'a std::sync::atomic::AtomicBool>,
    /// For vector-activated lore (see [`super::lore::LoreCall::bank`]).
    pub bank: Option<&'a crate::memory::MemoryBank>,
}

/// A budgeted envelope: the items kept per section and the ledger.
#[derive(Debug, Clone, Serialize)]
pub struct Envelope {
    pub kept: BTreeMap<Section, Vec<BudgetItem>>,
    pub ledger: BudgetLedger,
    /// What macro expansion had to cut (a huge `{{random}}`, a too-deep field).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Where each kept lore item goes in the prompt (by id; missing: with the lore list).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub lore_places: BTreeMap<String, LorePlace>,
    /// The cast by name for the agents that pick who acts (see [`roster`]): outside the
    /// budgets, so no cut makes a present character unpickable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roster: Vec<String>,
}

/// Every candidate of one call, and the lore held back before the budgets.
#[derive(Debug, Clone, Default)]
pub struct Candidates {
    pub sections: BTreeMap<Section, Vec<BudgetItem>>,
    /// Lore entries that matched but did not activate, with why (budget, probability,
    /// inclusion group, cooldown...); appended to the lore section's ledger.
    pub lore_held_back: Vec<DroppedItem>,
    /// Where each activated entry goes (by item id).
    pub lore_places: BTreeMap<String, LorePlace>,
    /// What macro expansion had to cut.
    pub notes: Vec<String>,
}

/// Gather every candidate and fit it into `max_context_tokens` by `plan`, advancing
/// the scene's lore timers in `lore_state`.
pub fn assemble(plan: &BudgetPlan, max_context_tokens: u32, input: &EnvelopeInput<'_>, lore_state: &mut ActivationState) -> Envelope {
    let gathered = gather(plan, max_context_tokens, input, lore_state);
    let mut envelope = fit(plan, max_context_tokens, &gathered.sections, &gathered.lore_held_back);
    envelope.notes = gathered.notes;
    envelope.lore_places = gathered.lore_places;
    envelope.roster = roster(input.agent, input.view);
    envelope
}

/// Every cast member's name, present ones first, for the Director's two passes (none
/// for other agents): the character sheets are budgeted and a tight context drops
/// some, but whoever is in the scene must stay nameable. Muted ones are marked.
pub fn roster(agent: AgentKind, view: &SceneView) -> Vec<String> {
    if !matches!(agent, AgentKind::Director | AgentKind::Reconcile) {
        return Vec::new();
    }
    let names = |present: bool| -> Vec<String> {
        view.cast
            .iter()
            .filter(|m| m.active == present)
            .map(|m| if m.muted { format!("{} (muted: cannot act)", m.name) } else { m.name.clone() })
            .collect()
    };
    let (present, absent) = (names(true), names(false));
    let mut lines = Vec::new();
    if !present.is_empty() {
        lines.push(format!("In the scene: {}", present.join(", ")));
    }
    if !absent.is_empty() {
        lines.push(format!("Not in the scene: {}", absent.join(", ")));
    }
    lines
}

/// What a call adds to the envelope's prompt and asks back, planned before the section
/// shares apply so the prompt as sent plus the reply's cap fit the model's context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
pub struct ReplyPlan {
    /// The reply's `max_tokens`: sent with the request (see [`ReplyPlan::apply`]).
    pub tokens: u32,
    /// What the structured-output layer adds to the system prompt: the JSON Schema's
    /// text, a few thousand characters for the Director's plan.
    pub appended: u32,
}

impl ReplyPlan {
    /// A prose reply (a character, the Narrator).
    pub fn prose(profile: &crate::llm::ProviderProfile) -> Self {
        Self { tokens: reply_reserve(profile, &ResponseFormat::Text), appended: 0 }
    }

    /// A structured reply of `schema`, asked with `options` (whose `schema_in_prompt`
    /// says whether the schema's text joins the prompt).
    pub fn structured(profile: &crate::llm::ProviderProfile, schema: &serde_json::Value, options: &StructuredOptions) -> Self {
        let format = ResponseFormat::JsonSchema { name: String::new(), schema: schema.clone() };
        let appended = schema_instruction(schema, options).map_or(0, |text| estimate(&format!("\n\n{text}")));
        Self { tokens: reply_reserve(profile, &format), appended }
    }

    /// Put the planned cap on the request. The embedded model sizes its reply from the
    /// grammar it decodes under, so it is left to do that unless the profile caps it.
    pub fn apply(&self, profile: &crate::llm::ProviderProfile, request: &mut crate::llm::ChatRequest) {
        if profile.kind != crate::llm::ProviderKind::Local || profile.sampler.max_tokens.is_some() {
            request.sampler.max_tokens = Some(self.tokens);
        }
    }
}

/// The reply's share of the context: the profile's `max_tokens` when it sets one (the
/// budget plans for it, whatever it costs the sections), else the client's default cap
/// for the format held to a quarter of the context.
pub fn reply_reserve(profile: &crate::llm::ProviderProfile, format: &ResponseFormat) -> u32 {
    crate::llm::client::planned_reply_cap(profile, format)
}

/// Estimated tokens of `prompt` as sent: both messages with their framing, plus what
/// the structured layer appends.
pub fn prompt_tokens(prompt: &RenderedPrompt, reply: ReplyPlan) -> u32 {
    let messages = [crate::llm::ChatMessage::system(prompt.system.clone()), crate::llm::ChatMessage::user(prompt.user.clone())];
    crate::llm::tokens::estimate_messages(&messages).saturating_add(reply.appended)
}

/// What one call keeps off the top before the section shares apply: the template's own
/// instructions (the prompt rendered with every section empty), the turn, what the
/// structured layer appends, and the reply.
pub fn reserve(
    templates: &PromptTemplates,
    agent: AgentKind,
    character: Option<&CastMember>,
    turn: &str,
    reply: ReplyPlan,
    roster: &[String],
) -> Result<u32, TemplateError> {
    let empty = Envelope {
        kept: BTreeMap::new(),
        ledger: BudgetLedger::default(),
        notes: Vec::new(),
        lore_places: BTreeMap::new(),
        roster: roster.to_vec(),
    };
    let bare = render(templates, agent, &empty, character, turn)?;
    Ok(prompt_tokens(&bare, reply).saturating_add(reply.tokens))
}

/// Assemble and render one call so that its prompt plus the reply's `max_tokens` fit
/// the model's context: the instructions, the turn, the schema's text and the reply are
/// reserved first, the section shares apply to the rest, and should the rendered prompt
/// still not fit (each item's own markup), the sections are fitted again into less.
/// Lore timers advance once, for the envelope that is sent. The ledger counts the whole
/// prompt as sent (`prompt_tokens`) and the reply's cap.
#[allow(clippy::too_many_arguments)]
pub fn assemble_for_call(
    templates: &PromptTemplates,
    agent: AgentKind,
    character: Option<&CastMember>,
    turn: &str,
    plan: &BudgetPlan,
    profile: &crate::llm::ProviderProfile,
    reply: &mut ReplyPlan,
    input: &EnvelopeInput<'_>,
    lore_state: &mut ActivationState,
) -> Result<(Envelope, RenderedPrompt), SceneError> {
    let max = profile.max_context_tokens;
    let mut reserved = reserve(templates, agent, character, turn, *reply, &roster(agent, input.view))?;
    // The instructions, the turn and the schema leave less than the reply's cap: the
    // reply gets what is left (the client never sends less than its floor), rather than
    // a request the server must refuse.
    let mut shrunk = None;
    if reserved > max {
        let fixed = reserved - reply.tokens;
        // Below half its planned cap a reply (a Director's plan above all) is cut off
        // before it closes: better said now, before any call, than failed after.
        let least = usable_reply(reply.tokens);
        if fixed.saturating_add(least) > max {
            let schema = if reply.appended > 0 { format!(" ({} of them its JSON Schema)", reply.appended) } else { String::new() };
            return Err(SceneError::Invalid(format!(
                "profile \"{}\" has {max} tokens of context, too few for the {} call: its instructions and turn need {fixed}{schema} \
                 and its reply at least {least} of the {} planned, so it needs a context of at least {} tokens \
                 (or a smaller max_tokens, or another profile for the role)",
                profile.name,
                agent.role(),
                reply.tokens,
                fixed + least
            )));
        }
        let tokens = max.saturating_sub(fixed);
        shrunk = Some(reply.tokens);
        reply.tokens = tokens;
        reserved = fixed + tokens;
    }
    let reply = *reply;
    let mut budget = max.saturating_sub(reserved);
    let finish = |mut envelope: Envelope, prompt: &RenderedPrompt| {
        envelope.ledger.prompt_tokens = prompt_tokens(prompt, reply);
        envelope.ledger.reply_tokens = reply.tokens;
        envelope.ledger.context_tokens = max;
        envelope
    };
    for _ in 0..4 {
        let mut state = lore_state.clone();
        let mut envelope = assemble(plan, budget, input, &mut state);
        let prompt = render(templates, agent, &envelope, character, turn)?;
        let total = prompt_tokens(&prompt, reply).saturating_add(reply.tokens);
        if total <= max || budget == 0 {
            let schema = if reply.appended > 0 { format!(" ({} of them the reply's JSON Schema)", reply.appended) } else { String::new() };
            envelope.notes.push(format!(
                "context: {max} tokens; {} kept for the instructions and the turn{schema}, {} for the reply; the sections shared {budget}",
                reserved.saturating_sub(reply.tokens),
                reply.tokens
            ));
            if let Some(asked) = shrunk {
                envelope.notes.push(format!("the reply's cap was cut from {asked} to {} tokens: the instructions, the turn and the schema leave no more", reply.tokens));
            }
            if total > max {
                envelope.notes.push(format!("the instructions and the turn alone need {total} tokens with the reply: more than the context holds"));
            }
            *lore_state = state;
            return Ok((finish(envelope, &prompt), prompt));
        }
        // Shrink from what the sections used, not from what they were given: a section
        // with room to spare (history's slack under one more message) would otherwise
        // absorb the cut and the next fit send the same prompt again.
        budget = envelope.ledger.used().min(budget).saturating_sub(total - max + 16);
    }
    // Four fits did not close the gap: send nothing of the sections rather than overflow.
    let mut state = lore_state.clone();
    let mut envelope = assemble(plan, 0, input, &mut state);
    envelope.notes.push("context: the sections were left out to keep the prompt within the context".into());
    let prompt = render(templates, agent, &envelope, character, turn)?;
    *lore_state = state;
    Ok((finish(envelope, &prompt), prompt))
}

/// The least reply cap worth a call that planned `planned`: half of it, and never
/// below the client's floor.
pub fn usable_reply(planned: u32) -> u32 {
    (planned / 2).max(crate::llm::client::MIN_REPLY_CAP).min(planned)
}

/// Fit gathered candidates into the budgets. Kept apart from [`gather`] so the
/// workbench can re-fit the same candidates on every slider move without a store read.
pub fn fit(
    plan: &BudgetPlan,
    max_context_tokens: u32,
    candidates: &BTreeMap<Section, Vec<BudgetItem>>,
    lore_held_back: &[DroppedItem],
) -> Envelope {
    let (kept, mut ledger) = enforce(plan, max_context_tokens, candidates);
    if let Some(section) = ledger.sections.iter_mut().find(|s| s.section == Section::Lore) {
        section.dropped.extend(lore_held_back.iter().cloned());
    }
    Envelope { kept, ledger, notes: Vec::new(), lore_places: BTreeMap::new(), roster: Vec::new() }
}

/// [`candidates`] plus activated lore. Lore activation gets the tokens the lore section
/// will be allocated, so World Info's own budget rule (an overflow stops every later
/// budgeted entry) decides, and the ledger names what it skipped.
pub fn gather(plan: &BudgetPlan, max_context_tokens: u32, input: &EnvelopeInput<'_>, lore_state: &mut ActivationState) -> Candidates {
    let mut notes = Vec::new();
    let mut sections = candidates(input, &mut notes);
    let mut lore_held_back = Vec::new();
    let mut lore_places = BTreeMap::new();
    // Notes and lore are the user's and the cards' own text: their macros are resolved
    // for this call (character sheets were resolved per character in `candidates`), and
    // so are the macros in lore keys.
    let persona = Persona::of(input.view);
    let speaker = call_character(input);
    let ctx = macro_context(input, &persona, &speaker, None);
    if let Some(lore) = input.lore.filter(|l| !l.is_empty()) {
        let mut present: Vec<Section> = sections.iter().filter(|(_, items)| !items.is_empty()).map(|(s, _)| *s).collect();
        present.push(Section::Lore);
        let budget = allocate(plan, max_context_tokens, &present).get(&Section::Lore).copied();
        let scenario = Some(input.view.description.as_str()).filter(|d| !d.trim().is_empty());
        let activation = super::lore::activate(
            lore,
            &LoreCall {
                messages: input.history,
                message_number: input.message_number,
                character: input.character,
                persona: input.view.persona.as_deref(),
                scenario,
                scan_depth: u32::try_from(input.lore_scan_depth).unwrap_or(u32::MAX),
                budget,
                seed: input.seed,
                cancel: input.cancel,
                bank: input.bank,
                macros: Some(&ctx),
            },
            lore_state,
        );
        sections.insert(Section::Lore, activation.items);
        lore_held_back = activation.held_back;
        lore_places = activation.places;
    }
    for section in [Section::Setting, Section::Notes, Section::Lore] {
        for item in sections.get_mut(&section).into_iter().flatten() {
            if item.text.contains("{{") || item.text.contains('<') {
                let out = expand(&item.text, &ctx);
                notes.extend(out.notes);
                item.tokens = estimate(&out.text);
                item.text = out.text;
            }
        }
    }
    Candidates { sections, lore_held_back, lore_places, notes }
}

/// The name the user plays under in `view` ("User" without a persona).
pub fn persona_name(view: &SceneView) -> String {
    Persona::of(view).name
}

/// The user's persona as the envelope tells it: `name: description`.
struct Persona {
    name: String,
    description: String,
}

impl Persona {
    fn of(view: &SceneView) -> Self {
        match view.persona.as_deref().map(|p| p.split_once(':').unwrap_or((p, ""))) {
            Some((name, description)) => Self { name: name.trim().to_string(), description: description.trim().to_string() },
            None => Self { name: "User".into(), description: String::new() },
        }
    }
}

/// Who `{{char}}` is in this call's shared text: the character it speaks for, else the
/// characters present.
fn call_character(input: &EnvelopeInput<'_>) -> String {
    match input.character {
        Some(c) => c.name.clone(),
        None => input.view.active().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", "),
    }
}

/// Macro values for one call; `member` fills the card fields of a character's sheet.
fn macro_context<'a>(input: &'a EnvelopeInput<'_>, persona: &'a Persona, character: &'a str, member: Option<&'a CastMember>) -> MacroContext<'a> {
    let field = |name: &str| member.and_then(|m| m.sheet.get(name)).map(String::as_str).unwrap_or("");
    MacroContext {
        char: character,
        user: &persona.name,
        persona: &persona.description,
        description: field("description"),
        personality: field("personality"),
        scenario: field("scenario"),
        last_message: input.history.last().map(|m| m.content.as_str()).unwrap_or(""),
        stable_seed: &input.view.id,
        // Deterministic per message, so a preview shows what the round will send.
        random_seed: Some(input.seed ^ input.message_number),
        ..Default::default()
    }
}

fn item(id: impl Into<String>, text: String, value: f64) -> BudgetItem {
    BudgetItem { id: id.into(), tokens: estimate(&text), text, value }
}

/// Every candidate item of every section but lore (see [`gather`]), before budgets.
/// What the macro engine cut or refused in a character sheet goes to `macro_notes`.
pub fn candidates(input: &EnvelopeInput<'_>, macro_notes: &mut Vec<String>) -> BTreeMap<Section, Vec<BudgetItem>> {
    let mut candidates: BTreeMap<Section, Vec<BudgetItem>> = BTreeMap::new();

    // Rounds the scene summary covers are told by the summary, not repeated verbatim;
    // the last closed round always is (a scene summarised to its end when a later scene
    // started, then played again, keeps where it stopped).
    let covered = input.notes.summary_round.min(input.view.rounds.saturating_sub(1));
    let history = input
        .history
        .iter()
        .filter(|m| m.round > covered)
        .map(|m| item(format!("message {}", m.number), format!("{}: {}", m.speaker, m.content), 0.0))
        .collect();
    candidates.insert(Section::History, history);

    // Oldest first in the prompt; when the budget is short the oldest go first, and an
    // earlier arc's scenes (told briefly) before any of this arc's.
    let mut summaries: Vec<BudgetItem> = input
        .notes
        .earlier_scenes
        .iter()
        // A character is told only the scenes it was cast in: the others happened
        // where it was not.
        .filter(|earlier| input.character.is_none_or(|c| earlier.cast.contains(&c.id)))
        .enumerate()
        .map(|(i, earlier)| {
            let name = &earlier.scene;
            if earlier.same_arc {
                item(format!("scene summary {name}"), format!("Earlier scene \"{name}\": {}", earlier.summary.trim()), 1000.0 + i as f64)
            } else {
                let text = format!("Earlier, in arc \"{}\", scene \"{name}\": {}", earlier.arc, brief(&earlier.summary, EARLIER_ARC_CHARS));
                item(format!("scene summary {} / {name}", earlier.arc), text, i as f64)
            }
        })
        .collect();
    if !input.notes.scene_summary.trim().is_empty() {
        let through = input.notes.summary_round;
        let text = format!("So far in this scene (through round {through}): {}", input.notes.scene_summary.trim());
        summaries.push(item("this scene's summary", text, 1e6));
    }
    candidates.insert(Section::Summaries, summaries);

    candidates.insert(Section::Lore, Vec::new());

    // Best first: a lower-ranked memory is the first to go.
    let memories = input
        .memories
        .iter()
        .map(|hit| {
            let text = match &hit.speaker {
                Some(speaker) if !hit.text.starts_with(speaker.as_str()) => format!("{speaker}: {}", hit.text),
                _ => hit.text.clone(),
            };
            item(format!("memory {} (score {:.3})", hit.id, hit.score), format!("You remember: {text}"), f64::from(hit.score))
        })
        .collect();
    candidates.insert(Section::Memories, memories);

    let mut notes = Vec::new();
    // Narrower scopes are more specific to the moment: worth more.
    for (value, (label, text)) in [
        ("world notes", &input.notes.world),
        ("campaign notes", &input.notes.campaign),
        ("arc notes", &input.notes.arc),
        ("scene notes", &input.notes.scene),
    ]
    .into_iter()
    .enumerate()
    {
        if !text.trim().is_empty() {
            notes.push(item(label, format!("{}: {}", capitalise(label), text.trim()), value as f64));
        }
    }
    if let Some(persona) = &input.view.persona {
        notes.push(item("persona", format!("The user plays {persona}"), 6.0));
    }
    if !input.view.trackers.is_empty() {
        let trackers: Vec<String> = input.view.trackers.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        notes.push(item("trackers", format!("Trackers: {}", trackers.join("; ")), 7.0));
    }
    // The campaign's clock, in words: the World agent reports the minutes a round took
    // and everyone else should know whether it is the first evening or the third week.
    if input.view.elapsed_minutes > 0 {
        let time = format!("Time in the story: {} since the campaign began", said_duration(input.view.elapsed_minutes));
        notes.push(item("in-fiction time", time, 6.5));
    }
    for (i, fact) in input.view.facts.iter().enumerate() {
        notes.push(item(format!("fact {}", i + 1), format!("Fact: {fact}"), 4.0 + i as f64 / 1000.0));
    }
    candidates.insert(Section::Notes, notes);

    // What the game master wrote the world, campaign and scene to be. Each is cut at a
    // sentence rather than dropped when the section is short (the cut is in the ledger):
    // the scene, the most immediate, first, then the campaign's premise, then the world.
    let view = input.view;
    let setting = [
        ("world description", "World", &view.world, &input.notes.world_description, 1.0),
        ("campaign description", "Campaign", &view.campaign, &input.notes.campaign_description, 2.0),
        ("scene description", "Scene", &view.name, &view.description, 3.0),
    ]
    .into_iter()
    .filter(|(.., text, _)| !text.trim().is_empty())
    .map(|(id, level, name, text, rank)| item(id, format!("{level} \"{}\": {}", name.trim(), text.trim()), ESSENTIAL + rank))
    .collect();
    candidates.insert(Section::Setting, setting);

    let guidance = input
        .director_guidance
        .iter()
        .filter(|g| !g.trim().is_empty())
        .enumerate()
        .map(|(i, g)| item(format!("guidance {}", i + 1), g.clone(), -(i as f64)))
        .collect();
    candidates.insert(Section::DirectorGuidance, guidance);

    let mut sheets = Vec::new();
    for member in &input.view.cast {
        let own = input.character.is_some_and(|c| c.id == member.id);
        // The Director needs the whole cast; a character needs itself and who is present.
        if input.agent == AgentKind::Character && !own && !member.active {
            continue;
        }
        // The game master's mute: the Director and everyone planning with it are told who
        // cannot be picked to act; a character need not know.
        let place = match (member.active, member.muted && input.agent != AgentKind::Character) {
            (true, false) => " (in the scene)",
            (true, true) => " (in the scene; muted by the game master: cannot act)",
            (false, false) => " (not in the scene)",
            (false, true) => " (not in the scene; muted by the game master: cannot act)",
        };
        let mut text = format!("{}{place}", member.name);
        if own || input.agent != AgentKind::Character {
            text.push('\n');
            // A card's `{{char}}` is the card's own character, whoever the call is for.
            let persona = Persona::of(input.view);
            let summary = member.summary();
            let expanded = expand(&summary, &macro_context(input, &persona, &member.name, Some(member)));
            text.push_str(&expanded.text);
            macro_notes.extend(expanded.notes.into_iter().map(|n| format!("{}'s sheet: {n}", member.name)));
        } else if let Some(excerpt) = others_excerpt(input, member, macro_notes) {
            // A character plays beside the others present: it is told who they are, in
            // brief, so it can name and describe them rightly; its own sheet stays whole.
            text.push('\n');
            text.push_str(&excerpt);
        }
        // What others can see of a character (where it is, how it looks and seems, what
        // it is doing) is told to everyone; what it means to do only to itself and to
        // those who plan the round (the Director, the World agent). The Narrator's words
        // become what every character present witnessed, so it sees no one's intentions.
        let private = own || !matches!(input.agent, AgentKind::Character | AgentKind::Narrator);
        let state = state_line(member, private);
        if !state.is_empty() {
            text.push_str(&format!("\nState: {state}"));
        }
        let value = if own { 1e6 } else if member.active { 1.0 } else { 0.0 };
        sheets.push(item(format!("character {}", member.name), text.trim_end().to_string(), value));
    }
    candidates.insert(Section::CharacterGuidance, sheets);
    candidates
}

/// How much of an earlier arc's scene summary a later arc is told.
const EARLIER_ARC_CHARS: usize = 480;

/// How much of another present character's description a character is told.
pub const OTHERS_EXCERPT_CHARS: usize = 320;

/// Another present character as a character sees it: its description (its personality
/// when it has none) in whole sentences up to [`OTHERS_EXCERPT_CHARS`], macros resolved
/// as its own card's.
fn others_excerpt(input: &EnvelopeInput<'_>, member: &CastMember, macro_notes: &mut Vec<String>) -> Option<String> {
    let (field, text) = ["description", "personality"]
        .into_iter()
        .find_map(|field| member.sheet.get(field).filter(|t| !t.trim().is_empty()).map(|t| (field, t)))?;
    let persona = Persona::of(input.view);
    let expanded = expand(text, &macro_context(input, &persona, &member.name, Some(member)));
    macro_notes.extend(expanded.notes.into_iter().map(|n| format!("{}'s sheet: {n}", member.name)));
    let one_line = expanded.text.split_whitespace().collect::<Vec<_>>().join(" ");
    let excerpt = brief(&one_line, OTHERS_EXCERPT_CHARS);
    (!excerpt.is_empty()).then(|| format!("{field}: {excerpt}"))
}

/// `text` cut to whole sentences within `max` characters (at least its first sentence,
/// clipped, when that alone is longer), so an earlier arc's scene costs little.
fn brief(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut end = 0;
    for (i, c) in text.char_indices().take(max) {
        if matches!(c, '.' | '!' | '?') {
            end = i + c.len_utf8();
        }
    }
    if end == 0 {
        return crate::llm::structured::clip(text, max);
    }
    format!("{} …", &text[..end])
}

/// `minutes` as a person says it: "1 day, 9 hours and 20 minutes", "3 weeks and 2 days".
/// Years and weeks are counted when they fit; the two or three largest units are said.
pub fn said_duration(minutes: u64) -> String {
    if minutes == 0 {
        return "no time".into();
    }
    let units = [("year", 365 * 24 * 60), ("week", 7 * 24 * 60), ("day", 24 * 60), ("hour", 60), ("minute", 1)];
    let mut left = minutes;
    let mut parts = Vec::new();
    for (name, size) in units {
        let n = left / size;
        left %= size;
        if n > 0 {
            parts.push(format!("{n} {name}{}", if n == 1 { "" } else { "s" }));
        }
    }
    // A long campaign is told in its large units: "2 years, 3 weeks and 1 day".
    parts.truncate(3);
    match parts.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => "no time".into(),
    }
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// The state fields only a character itself (and the round's planners) may read.
pub const PRIVATE_STATE_FIELDS: [&str; 1] = ["intentions"];

/// `member`'s state as a prompt line; the private fields only with `private`.
fn state_line(member: &CastMember, private: bool) -> String {
    STATE_FIELDS
        .iter()
        .filter(|f| private || !PRIVATE_STATE_FIELDS.contains(f))
        .filter_map(|f| member.state.get(f).map(|v| format!("{f}: {v}")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The instruction ending Director pass 1 (`input` is the user's message, `None` to
/// continue). Shared with the workbench preview so it shows the words a round sends.
pub fn director_turn(round: u32, input: Option<&str>) -> String {
    match input {
        Some(text) => format!("Round {round}. The user says: {}", text.trim()),
        None => format!("Round {round}. The user asks the scene to continue without a new message."),
    }
}

/// The instruction ending Director pass 2.
pub fn reconcile_turn(round: u32) -> String {
    format!("Round {round} has been played. Reconcile the state of the scene after it.")
}

/// The instruction ending the narrator's call.
pub fn narrator_turn(round: u32) -> String {
    format!("Round {round}: narrate the scene as it stands after what the characters just did.")
}

/// The instruction ending the World agent's call.
pub fn world_turn(round: u32) -> String {
    format!("Round {round} has been played. Report the trackers that changed and the minutes that passed.")
}

/// The instruction ending a character's call.
pub fn character_turn(name: &str) -> String {
    format!("It is {name}'s turn. Write what {name} says and does now.")
}

/// The rendered prompt of one call.
#[derive(Debug, Clone, Serialize)]
pub struct RenderedPrompt {
    pub system: String,
    pub user: String,
}

/// Render the kept sections with the agent's template. `turn` is the instruction for
/// this call (the user's input, the character's cue, the reconciliation request).
pub fn render(
    templates: &PromptTemplates,
    agent: AgentKind,
    envelope: &Envelope,
    character: Option<&CastMember>,
    turn: &str,
) -> Result<RenderedPrompt, TemplateError> {
    // Kept outlet entries go where a sheet, the setting or a note writes `{{outlet::Name}}`
    // (their macros were expanded before the lore fired, which left these as written), and
    // nowhere else; in lore itself an outlet is empty, as World Info fills it first.
    let kept_lore = envelope.kept.get(&Section::Lore).map(Vec::as_slice).unwrap_or_default();
    use crate::prompting::macros::{collect_outlets, fill_outlets};
    let no_outlets = BTreeMap::new();
    let lore_texts: Vec<String> = kept_lore.iter().map(|i| fill_outlets(&i.text, &no_outlets)).collect();
    let outlet_place = |id: &str| envelope.lore_places.get(id).filter(|p| p.is_outlet());
    let outlets = collect_outlets(
        kept_lore.iter().zip(&lore_texts).filter_map(|(i, text)| outlet_place(&i.id).map(|p| (p.outlet.as_str(), text.as_str()))),
    );
    let text = |section: Section| -> Vec<String> {
        let fills = matches!(section, Section::Setting | Section::Notes | Section::CharacterGuidance);
        let fill = |t: &str| if fills && t.contains("{{") { fill_outlets(t, &outlets) } else { t.to_string() };
        envelope.kept.get(&section).map(|items| items.iter().map(|i| fill(&i.text)).collect()).unwrap_or_default()
    };
    // Each kept lore entry where its position puts it: before or after the characters,
    // at the top or bottom of the scenario / author notes, or inside the recent messages
    // `depth` messages from the end, said as its role. (Scenes have no example dialogue:
    // those go with the lore list, before the characters.)
    let mut lore = Vec::new();
    let (mut after, mut an_top, mut an_bottom, mut at_depth) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (item, text) in kept_lore.iter().zip(lore_texts) {
        let place = envelope.lore_places.get(&item.id).cloned().unwrap_or_default();
        let item = BudgetItem { text, ..item.clone() };
        match place.position {
            InsertionPosition::Outlet => {}
            InsertionPosition::AfterCharacter => after.push(item.text.clone()),
            InsertionPosition::AuthorNoteTop => an_top.push(item.text.clone()),
            InsertionPosition::AuthorNoteBottom => an_bottom.push(item.text.clone()),
            InsertionPosition::AtDepth => at_depth.push((place.depth, place.role, item.text.clone())),
            _ => lore.push(item.text.clone()),
        }
    }
    let mut history = text(Section::History);
    // Deepest first, so each insertion counts from the end of the messages as sent.
    at_depth.sort_by(|a, b| b.0.cmp(&a.0));
    for (depth, role, text) in at_depth {
        let at = history.len().saturating_sub(depth as usize);
        let who = match role {
            PromptRole::User => "user",
            PromptRole::Assistant => "assistant",
            _ => "system",
        };
        history.insert(at, format!("[{who} note] {text}"));
    }
    let context = serde_json::json!({
        "character": character.map(|c| c.name.clone()),
        "history": history,
        "summaries": text(Section::Summaries),
        "lore": lore,
        "lore_after": after,
        "lore_an_top": an_top,
        "lore_an_bottom": an_bottom,
        "memories": text(Section::Memories),
        "setting": text(Section::Setting),
        "notes": text(Section::Notes),
        "director_guidance": text(Section::DirectorGuidance),
        "characters": text(Section::CharacterGuidance),
        "state_fields": STATE_FIELDS,
        "roster": envelope.roster,
        "turn": turn,
    });
    Ok(RenderedPrompt { system: templates.render(agent.template(), &context)?, user: turn.to_string() })
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene::{demo, lore, records};
    use crate::store::Store;

    /// The demo scene's Director and character prompts exactly as rendered: a change to
    /// a template, a budget or the assembly shows here as a reviewable diff
    /// (`UPDATE_EXPECT=1` rewrites the files).
    #[test]
    fn the_demo_scene_envelopes_as_sent() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("lib.sqlite")).unwrap();
        let scene = demo::ensure(&store).unwrap().expect("a fresh library gets the demo");
        let templates = PromptTemplates::shipped().unwrap();
        let config = crate::config::SceneConfig::default();
        let (view, notes, history, prepared, mut lore_state) = store
            .with(|c| {
                let view = records::load_view(c, &scene)?;
                Ok((
                    records::load_notes(c, &scene)?,
                    records::recent_messages(c, &scene, config.history_window)?,
                    lore::campaign_lore(c, &view.campaign_id)?,
                    lore::load_state(c, &scene)?,
                    view,
                ))
            })
            .map(|(notes, history, prepared, state, view)| (view, notes, history, prepared, state))
            .unwrap();
        let input = |agent, character| EnvelopeInput {
            agent,
            view: &view,
            notes: &notes,
            history: &history,
            lore: Some(&prepared),
            memories: &[],
            character,
            director_guidance: vec!["Someone knocks at the lamp room door.".into()],
            lore_scan_depth: config.lore_scan_depth,
            message_number: history.last().map_or(1, |m| u64::from(m.number) + 1),
            seed: 7,
            cancel: None,
            bank: None,
        };
        let show = |envelope: &Envelope, prompt: &RenderedPrompt| {
            let sections: Vec<String> = envelope.ledger.sections.iter().map(|s| format!("{:?}={}", s.section, s.used)).collect();
            format!("--- system\n{}\n--- user\n{}\n--- used: {}", prompt.system, prompt.user, sections.join(" "))
        };

        let director = assemble(&config.budgets, 8192, &input(AgentKind::Director, None), &mut lore_state);
        let turn = director_turn(1, Some("I light the lamp."));
        let prompt = render(&templates, AgentKind::Director, &director, None, &turn).unwrap();
        expect_test::expect_file!["snapshots/envelope_director.txt"].assert_eq(&show(&director, &prompt));

        let member = view.active().next().expect("the demo has someone present");
        let character = assemble(&config.budgets, 8192, &input(AgentKind::Character, Some(member)), &mut lore_state);
        let prompt = render(&templates, AgentKind::Character, &character, Some(member), &character_turn(&member.name)).unwrap();
        expect_test::expect_file!["snapshots/envelope_character.txt"].assert_eq(&show(&character, &prompt));
    }

    /// Each lore entry goes where its position says: the top or bottom of the notes,
    /// before or after the characters, or among the recent messages at its depth.
    #[test]
    fn lore_is_placed_by_each_entrys_position() {
        let templates = PromptTemplates::shipped().unwrap();
        let item = |id: &str, text: &str| BudgetItem { id: id.into(), tokens: estimate(text), text: text.into(), value: 1.0 };
        let mut kept = BTreeMap::new();
        kept.insert(Section::Notes, vec![item("n", "The lamp room is cold.")]);
        kept.insert(Section::CharacterGuidance, vec![item("c", "Wren Talloway: the keeper.")]);
        kept.insert(Section::History, (1..=5).map(|n| item(&format!("h{n}"), &format!("Wren: line {n}."))).collect());
        kept.insert(
            Section::Lore,
            vec![item("before", "LORE-BEFORE"), item("after", "LORE-AFTER"), item("top", "LORE-TOP"), item("bottom", "LORE-BOTTOM"), item("deep", "LORE-DEPTH")],
        );
        let place = |position, depth, role| LorePlace { position, depth, role, ..Default::default() };
        let lore_places = [
            ("before", place(InsertionPosition::BeforeCharacter, 4, PromptRole::System)),
            ("after", place(InsertionPosition::AfterCharacter, 4, PromptRole::System)),
            ("top", place(InsertionPosition::AuthorNoteTop, 4, PromptRole::System)),
            ("bottom", place(InsertionPosition::AuthorNoteBottom, 4, PromptRole::System)),
            ("deep", place(InsertionPosition::AtDepth, 2, PromptRole::User)),
        ]
        .into_iter()
        .map(|(id, p)| (id.to_string(), p))
        .collect();
        let envelope = Envelope { kept, ledger: BudgetLedger::default(), notes: Vec::new(), lore_places, roster: Vec::new() };
        let prompt = render(&templates, AgentKind::Director, &envelope, None, "turn").unwrap().system;
        let at = |needle: &str| prompt.find(needle).unwrap_or_else(|| panic!("{needle} missing:\n{prompt}"));
        assert!(at("LORE-TOP") < at("The lamp room is cold.") && at("The lamp room is cold.") < at("LORE-BOTTOM"), "{prompt}");
        assert!(at("LORE-BEFORE") < at("Wren Talloway: the keeper.") && at("Wren Talloway: the keeper.") < at("LORE-AFTER"), "{prompt}");
        // Two messages from the end, said as the user's note.
        assert!(at("Wren: line 3.") < at("[user note] LORE-DEPTH") && at("[user note] LORE-DEPTH") < at("Wren: line 4."), "{prompt}");
    }

    /// An outlet entry goes only where a sheet, the setting or a note writes its
    /// `{{outlet::Name}}`, which waited as written until the lore fired.
    #[test]
    fn outlet_lore_fills_its_macro_and_goes_nowhere_else() {
        let templates = PromptTemplates::shipped().unwrap();
        let item = |id: &str, text: &str| BudgetItem { id: id.into(), tokens: estimate(text), text: text.into(), value: 1.0 };
        let mut kept = BTreeMap::new();
        kept.insert(Section::Notes, vec![item("n", "The lamp room is cold. Sky: {{outlet::sky}}")]);
        kept.insert(Section::Setting, vec![item("s", "A lighthouse. {{OUTLET::sky}}")]);
        kept.insert(Section::CharacterGuidance, vec![item("c", "Wren Talloway: the keeper, {{outlet::mood}}.")]);
        kept.insert(Section::History, vec![item("h1", "Wren: {{outlet::sky}} is not filled in what was said.")]);
        kept.insert(Section::Lore, vec![item("low", "STORM-LOW"), item("high", "STORM-HIGH"), item("plain", "LORE-PLAIN {{outlet::sky}}")]);
        let outlet = LorePlace { position: InsertionPosition::Outlet, outlet: "sky".into(), ..Default::default() };
        let lore_places =
            [("low".to_string(), outlet.clone()), ("high".to_string(), outlet), ("plain".to_string(), LorePlace::default())].into_iter().collect();
        let envelope = Envelope { kept, ledger: BudgetLedger::default(), notes: Vec::new(), lore_places, roster: Vec::new() };
        let prompt = render(&templates, AgentKind::Director, &envelope, None, "turn").unwrap().system;
        assert!(prompt.contains("Sky: STORM-HIGH\nSTORM-LOW"), "{prompt}");
        assert!(prompt.contains("A lighthouse. STORM-HIGH\nSTORM-LOW"), "{prompt}");
        assert!(prompt.contains("the keeper, ."), "an outlet nothing fired for is empty: {prompt}");
        assert!(prompt.contains("Wren: {{outlet::sky}} is not filled"), "{prompt}");
        assert!(prompt.contains("LORE-PLAIN") && !prompt.contains("LORE-PLAIN {{"), "in lore an outlet is empty: {prompt}");
        assert_eq!(prompt.matches("STORM-LOW").count(), 2, "nowhere else: {prompt}");
    }

    /// The prompt as sent plus the reply's `max_tokens` never exceed the model's context,
    /// however much history, lore and memory there is, at 2k, 8k and 128k.
    #[test]
    fn instructions_turn_and_reply_are_reserved_before_the_shares() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("lib.sqlite")).unwrap();
        let scene = demo::ensure(&store).unwrap().expect("a fresh library gets the demo");
        let templates = PromptTemplates::shipped().unwrap();
        let config = crate::config::SceneConfig::default();
        let (view, notes, prepared) = store
            .with(|c| {
                let view = records::load_view(c, &scene)?;
                Ok((records::load_notes(c, &scene)?, lore::campaign_lore(c, &view.campaign_id)?, view))
            })
            .map(|(notes, prepared, view)| (view, notes, prepared))
            .unwrap();
        let line = "The fog rolls in over the harbour and the keeper trims the wick again, muttering about the council. ";
        let history: Vec<SceneMessage> = (1..=4000)
            .map(|n| SceneMessage {
                number: n,
                round: n / 4 + 1,
                kind: crate::scene::model::MessageKind::Character,
                character_id: None,
                speaker: "Wren Talloway".into(),
                content: line.repeat(3),
            })
            .collect();
        let memories: Vec<RetrievalHit> = (0..40)
            .map(|i| RetrievalHit {
                id: format!("m{i}"),
                text: line.repeat(6),
                speaker: Some("Wren Talloway".into()),
                score: 1.0 - i as f32 / 100.0,
                keyword_score: None,
                vector_score: None,
                rank: i + 1,
                keyword_rank: None,
                vector_rank: None,
                kind: crate::memory::MemoryKind::Turn,
                scope: crate::memory::Scope::character("x"),
                session: None,
                time: None,
                pinned: false,
                edited: false,
            })
            .collect();
        let member = view.active().next().expect("someone is present").clone();
        for (max, reply_tokens) in [(2048u32, Some(512u32)), (8192, Some(1024)), (131_072, Some(4096)), (8192, None), (4096, None), (1500, None)] {
            let profile = crate::llm::ProviderProfile {
                max_context_tokens: max,
                sampler: crate::llm::SamplerSettings { max_tokens: reply_tokens, ..Default::default() },
                ..Default::default()
            };
            for (agent, character) in [(AgentKind::Director, None), (AgentKind::Character, Some(&member))] {
                let input = EnvelopeInput {
                    agent,
                    view: &view,
                    notes: &notes,
                    history: &history,
                    lore: Some(&prepared),
                    memories: &memories,
                    character,
                    director_guidance: vec!["Someone knocks at the lamp room door.".into()],
                    lore_scan_depth: config.lore_scan_depth,
                    message_number: 4001,
                    seed: 7,
                    cancel: None,
                    bank: None,
                };
                let (turn, mut reply) = match agent {
                    AgentKind::Director => {
                        let (schema, options) = crate::scene::round::director_schema::<crate::scene::model::DirectorPlan>(&profile, &view);
                        (director_turn(1000, Some("I light the lamp.")), ReplyPlan::structured(&profile, &schema, &options))
                    }
                    _ => (character_turn(&member.name), ReplyPlan::prose(&profile)),
                };
                let mut state = ActivationState::default();
                let fitted = assemble_for_call(&templates, agent, character, &turn, &config.budgets, &profile, &mut reply, &input, &mut state);
                if agent == AgentKind::Director && max == 1500 {
                    // The instructions and the 1,067-token schema leave the plan less than
                    // half its cap: refused before any call, saying what would do.
                    let error = fitted.expect_err("too small for the Director").to_string();
                    assert!(error.contains("profile \"default\" has 1500 tokens of context, too few for the director call"), "{error}");
                    assert!(error.contains("needs a context of at least 15"), "{error}");
                    continue;
                }
                let (envelope, prompt) = fitted.unwrap();
                // The request as the structured layer sends it: the schema's text joins the system prompt.
                let mut system = prompt.system.clone();
                if agent == AgentKind::Director {
                    let (schema, options) = crate::scene::round::director_schema::<crate::scene::model::DirectorPlan>(&profile, &view);
                    system = format!("{}\n\n{}", system.trim_end(), schema_instruction(&schema, &options).unwrap());
                    assert!(reply.appended > 500, "the schema is counted: {reply:?}");
                }
                let sent = crate::llm::tokens::estimate_messages(&[crate::llm::ChatMessage::system(system), crate::llm::ChatMessage::user(prompt.user.clone())]);
                assert!(sent + reply.tokens <= max, "{agent:?} at {max}: {sent} sent + {} for the reply > {max}", reply.tokens);
                assert_eq!(envelope.ledger.prompt_tokens, prompt_tokens(&prompt, reply), "the ledger counts the whole prompt");
                assert!(envelope.ledger.prompt_tokens + 2 >= sent, "{} counted, {sent} sent", envelope.ledger.prompt_tokens);
                // Without a cap of its own the reply takes at most a quarter of the context;
                // a cap the profile sets is kept whole unless the instructions leave less.
                assert!(reply.tokens <= reply_tokens.unwrap_or(max / 4), "{reply:?}");
                if max >= 2048 {
                    assert_eq!(Some(reply.tokens), reply_tokens.or(Some(reply.tokens)), "the profile's cap is planned for");
                }
                let history_used = envelope.ledger.sections.iter().find(|s| s.section == Section::History).map_or(0, |s| s.used);
                // The room left is used: at 128k far more history goes than at 2k.
                let shared = envelope.ledger.max_context_tokens;
                // (At 2,048 and less the Director's instructions and schema leave the
                // sections a few hundred tokens, less than one of these long messages.)
                if max > 2048 || agent == AgentKind::Character {
                    assert!(history_used > shared / 8 && shared > max / 20, "{agent:?} at {max}: only {history_used} tokens of history of {shared}");
                }
                assert!(envelope.notes.iter().any(|n| n.starts_with(&format!("context: {max} tokens"))), "{:?}", envelope.notes);
            }
        }
    }

    /// However tight the context, the Director can name everyone present: the sheets
    /// are cut by the budget, the names are not.
    #[test]
    fn a_tight_budget_never_removes_a_present_characters_name_from_the_director() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("lib.sqlite")).unwrap();
        let scene = demo::ensure(&store).unwrap().expect("a fresh library gets the demo");
        let templates = PromptTemplates::shipped().unwrap();
        let config = crate::config::SceneConfig::default();
        let (mut view, notes) = store.with(|c| Ok((records::load_view(c, &scene)?, records::load_notes(c, &scene)?))).unwrap();
        for member in &mut view.cast {
            member.active = true;
            member.sheet.insert("description".into(), format!("{} keeps the harbour's oldest secrets. ", member.name).repeat(160));
        }
        view.cast[1].muted = true;
        let history: Vec<SceneMessage> = Vec::new();
        for max in [1500u32, 2048, 4096] {
            for agent in [AgentKind::Director, AgentKind::Reconcile] {
                let profile = crate::llm::ProviderProfile { max_context_tokens: max, ..Default::default() };
                let input = EnvelopeInput {
                    agent,
                    view: &view,
                    notes: &notes,
                    history: &history,
                    lore: None,
                    memories: &[],
                    character: None,
                    director_guidance: Vec::new(),
                    lore_scan_depth: 2,
                    message_number: 1,
                    seed: 7,
                    cancel: None,
                    bank: None,
                };
                let mut reply = ReplyPlan::prose(&profile);
                let (envelope, prompt) =
                    assemble_for_call(&templates, agent, None, "Round 1.", &config.budgets, &profile, &mut reply, &input, &mut Default::default()).unwrap();
                let sheets = envelope.ledger.section(Section::CharacterGuidance).unwrap();
                assert!(!sheets.dropped.is_empty(), "the budget cut sheets at {max}");
                let roster = prompt.system.split("## Characters\n").nth(1).expect("a cast list").split("\n\n").next().unwrap();
                for member in &view.cast {
                    assert!(roster.contains(&member.name), "{agent:?} at {max}: {} is not named:\n{}", member.name, prompt.system);
                }
                assert!(roster.contains(&format!("{} (muted: cannot act)", view.cast[1].name)), "{roster}");
            }
        }
    }

    #[test]
    fn a_characters_own_long_card_and_intentions_reach_it_whatever_the_context() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("lib.sqlite")).unwrap();
        let scene = demo::ensure(&store).unwrap().expect("a fresh library gets the demo");
        let templates = PromptTemplates::shipped().unwrap();
        let config = crate::config::SceneConfig::default();
        let (mut view, notes) = store.with(|c| Ok((records::load_view(c, &scene)?, records::load_notes(c, &scene)?))).unwrap();
        for member in &mut view.cast {
            member.active = true;
            // 4.6k characters: far more than the 10% character-guidance share of 2048.
            let description: String = (1..=100).map(|n| format!("{} remembers harbour night {n} well. ", member.name)).collect();
            member.sheet.insert("description".into(), description);
            member.state.intentions = Some(format!("{} means to find the brass key", member.name));
        }
        let member = view.cast[0].clone();
        let history: Vec<SceneMessage> = Vec::new();
        for max in [1024u32, 2048, 8192] {
            let profile = crate::llm::ProviderProfile { max_context_tokens: max, ..Default::default() };
            let input = EnvelopeInput {
                agent: AgentKind::Character,
                view: &view,
                notes: &notes,
                history: &history,
                lore: None,
                memories: &[],
                character: Some(&member),
                director_guidance: Vec::new(),
                lore_scan_depth: 2,
                message_number: 1,
                seed: 7,
                cancel: None,
                bank: None,
            };
            let mut reply = ReplyPlan::prose(&profile);
            let turn = character_turn(&member.name);
            let (envelope, prompt) = assemble_for_call(
                &templates, AgentKind::Character, Some(&member), &turn, &config.budgets, &profile, &mut reply, &input, &mut Default::default(),
            )
            .unwrap();
            assert!(prompt.system.contains(&format!("{} remembers harbour night 1 well.", member.name)), "at {max}:\n{}", prompt.system);
            assert!(prompt.system.contains(&format!("intentions: {} means to find the brass key", member.name)), "at {max}:\n{}", prompt.system);
            let sheets = envelope.ledger.section(Section::CharacterGuidance).unwrap();
            assert!(sheets.kept.contains(&format!("character {}", member.name)), "at {max}: {sheets:?}");
            if max == 8192 {
                // Room enough: the whole card, not a cut one.
                assert!(prompt.system.contains(&format!("{} remembers harbour night 100 well.", member.name)), "{}", prompt.system);
            } else {
                let cut = sheets.dropped.iter().find(|d| d.id == format!("character {}", member.name)).expect("the cut is in the ledger");
                assert!(cut.reason.starts_with("cut from"), "{cut:?}");
            }
            assert!(envelope.ledger.prompt_tokens + envelope.ledger.reply_tokens <= max);
        }
    }

    /// A long world description and campaign premise are cut at a sentence to fit the
    /// setting's share, never dropped whole, and the cut is in the ledger; the notes
    /// (trackers, facts) keep their own share. Another present character is told in a
    /// bounded excerpt, the character's own card whole.
    #[test]
    fn a_long_setting_is_cut_in_its_own_share_and_others_are_told_in_brief() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("lib.sqlite")).unwrap();
        let scene = demo::ensure(&store).unwrap().expect("a fresh library gets the demo");
        let templates = PromptTemplates::shipped().unwrap();
        let config = crate::config::SceneConfig::default();
        let (mut view, mut notes) = store.with(|c| Ok((records::load_view(c, &scene)?, records::load_notes(c, &scene)?))).unwrap();
        notes.world_description = (1..=200).map(|n| format!("Island {n} of the drowned archipelago keeps iron sacred. ")).collect();
        notes.campaign_description = "Smugglers run stolen iron past the priests' lanterns.".into();
        for member in &mut view.cast {
            member.active = true;
            let description: String = (1..=40).map(|n| format!("{} has scar number {n}. ", member.name)).collect();
            member.sheet.insert("description".into(), description);
        }
        let member = view.cast[0].clone();
        let other = view.cast[1].clone();
        for max in [2048u32, 8192] {
            let profile = crate::llm::ProviderProfile { max_context_tokens: max, ..Default::default() };
            let input = EnvelopeInput {
                agent: AgentKind::Character,
                view: &view,
                notes: &notes,
                history: &[],
                lore: None,
                memories: &[],
                character: Some(&member),
                director_guidance: Vec::new(),
                lore_scan_depth: 2,
                message_number: 1,
                seed: 7,
                cancel: None,
                bank: None,
            };
            let mut reply = ReplyPlan::prose(&profile);
            let turn = character_turn(&member.name);
            let (envelope, prompt) = assemble_for_call(
                &templates, AgentKind::Character, Some(&member), &turn, &config.budgets, &profile, &mut reply, &input, &mut Default::default(),
            )
            .unwrap();
            let setting = envelope.ledger.section(Section::Setting).expect("a setting section");
            assert_eq!(setting.kept, ["world description", "campaign description", "scene description"], "at {max}: {setting:?}");
            assert!(prompt.system.contains("World \"The Saltmarsh Coast\": Island 1 of the drowned archipelago keeps iron sacred."), "{}", prompt.system);
            if max == 2048 {
                let cut = setting.dropped.iter().find(|d| d.id == "world description").unwrap_or_else(|| panic!("no cut in the ledger: {setting:?}"));
                assert!(cut.reason.starts_with("cut from"), "{cut:?}");
                assert!(!prompt.system.contains("Island 200 of"), "cut at {max}");
            } else {
                // Nothing else asks for the room the other sections leave: the whole world.
                assert!(prompt.system.contains("Island 200 of") && setting.dropped.is_empty(), "{setting:?}");
            }
            assert!(prompt.system.contains("Campaign \"") && prompt.system.contains("Smugglers run stolen iron"), "{}", prompt.system);
            assert!(prompt.system.contains("- Trackers: "), "the notes keep their share: {}", prompt.system);
            // The other character: a bounded excerpt, in whole sentences; its own card whole.
            assert!(prompt.system.contains(&format!("description: {} has scar number 1.", other.name)), "{}", prompt.system);
            assert!(!prompt.system.contains(&format!("{} has scar number 40.", other.name)), "{}", prompt.system);
            let excerpt = prompt.system.split(&format!("description: {} has", other.name)).nth(1).unwrap().lines().next().unwrap();
            assert!(excerpt.chars().count() < OTHERS_EXCERPT_CHARS, "{excerpt}");
            if max == 8192 {
                assert!(prompt.system.contains(&format!("{} has scar number 40.", member.name)), "{}", prompt.system);
            }
        }
    }

    #[test]
    fn an_earlier_arcs_scene_is_told_in_whole_sentences() {
        let summary = "Juno came up the stair. She gave Wren a letter. Wren read it twice and refused.";
        assert_eq!(brief(summary, 200), summary);
        assert_eq!(brief(summary, 50), "Juno came up the stair. She gave Wren a letter. …");
        assert_eq!(brief("No full stop anywhere in this long line", 10), "No full st…");
    }

    #[test]
    fn in_fiction_time_is_said_in_words() {
        assert_eq!(said_duration(2000), "1 day, 9 hours and 20 minutes");
        assert_eq!(said_duration(1), "1 minute");
        assert_eq!(said_duration(120), "2 hours");
        assert_eq!(said_duration(61), "1 hour and 1 minute");
        assert_eq!(said_duration(23 * 24 * 60 + 5), "3 weeks, 2 days and 5 minutes");
        assert_eq!(said_duration(2 * 365 * 24 * 60 + 24 * 60 + 7), "2 years, 1 day and 7 minutes");
    }

    /// A card's sheet whose macro had to be limited says so in the call's notes, naming
    /// whose sheet it was, the way notes and lore already do.
    #[test]
    fn a_limited_macro_in_a_sheet_is_noted_with_its_owner() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("lib.sqlite")).unwrap();
        let scene = demo::ensure(&store).unwrap().expect("a fresh library gets the demo");
        let mut view = store.with(|c| records::load_view(c, &scene)).unwrap();
        let name = view.cast[0].name.clone();
        view.cast[0].sheet.insert("personality".into(), "Counts {{roll:5000d6}} gulls.".into());
        let input = EnvelopeInput {
            agent: AgentKind::Director,
            view: &view,
            notes: &Default::default(),
            history: &[],
            lore: None,
            memories: &[],
            character: None,
            director_guidance: Vec::new(),
            lore_scan_depth: 2,
            message_number: 1,
            seed: 7,
            cancel: None,
            bank: None,
        };
        let gathered = gather(&crate::config::SceneConfig::default().budgets, 8192, &input, &mut Default::default());
        let sheet = &gathered.sections[&Section::CharacterGuidance].iter().find(|i| i.id == format!("character {name}")).unwrap().text;
        assert!(!sheet.contains("{{roll"), "the macro was expanded: {sheet}");
        assert!(
            gathered.notes.iter().any(|n| n.starts_with(&format!("{name}'s sheet:")) && n.contains("was limited")),
            "{:?}",
            gathered.notes
        );
    }
}
