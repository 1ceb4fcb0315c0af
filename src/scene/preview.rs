//! What the workbench asks of a scene: a snapshot (state, transcript, the last round's
//! Director decisions and ledgers) and an envelope preview for the next call.
//!
//! The preview carries the *candidates* of every section, not a fitted envelope, so the
//! Budgets panel can re-fit them on each slider move (allocation and enforcement are
//! cheap) without a store read per frame. Everything here runs on an engine worker.

use super::envelope::{self, AgentKind, Envelope, EnvelopeInput, RenderedPrompt};
use super::model::{CastMember, DirectorRecord, SceneMessage, SceneView};
use super::records::{self, RoundRecord};
use super::model::CallLedger;
use super::{SceneConfig, SceneError};
use crate::prompting::{BudgetItem, BudgetPlan, DroppedItem, PromptTemplates, Section, TemplateError};
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Transcript lines a snapshot carries: enough to read back, bounded so a long
/// campaign does not make every refresh heavy.
pub const SNAPSHOT_MESSAGES: u32 = 200;

/// The last closed round as the Scene panel shows it.
#[derive(Debug, Clone, Serialize)]
pub struct LastRound {
    pub round: u32,
    pub input: Option<String>,
    pub director: DirectorRecord,
    pub ledgers: Vec<CallLedger>,
    pub tokens: u64,
    /// The lore of the round, entry by entry, read from its calls' ledgers.
    pub lore: RoundLore,
}

impl LastRound {
    fn from_record(record: RoundRecord) -> Result<Self, SceneError> {
        let director = serde_json::from_value(record.director).map_err(|e| SceneError::Invalid(format!("round {} director record: {e}", record.round)))?;
        let ledgers: Vec<CallLedger> =
            serde_json::from_value(record.ledgers).map_err(|e| SceneError::Invalid(format!("round {} ledgers: {e}", record.round)))?;
        let lore = RoundLore::of(&ledgers);
        Ok(Self { round: record.round, input: record.input, director, ledgers, tokens: record.tokens, lore })
    }
}

/// A round's lore (the last round's without `round`): the scene's id, the round, its lore.
pub fn round_lore(conn: &Connection, scene: &str, round: Option<u32>) -> Result<(String, u32, RoundLore), SceneError> {
    let id = records::resolve_scene(conn, scene)?;
    let round = match round {
        Some(n) => n,
        None => records::load_view(conn, &id)?.rounds,
    };
    if round == 0 {
        return Err(SceneError::Invalid("no round has been played in this scene yet".into()));
    }
    let record = records::load_round(conn, &id, round)?.ok_or_else(|| SceneError::Invalid(format!("the scene has no round {round}")))?;
    let ledgers: Vec<CallLedger> = serde_json::from_value(record.ledgers).map_err(|e| SceneError::Invalid(format!("round {round} ledgers: {e}")))?;
    Ok((id, round, RoundLore::of(&ledgers)))
}

/// Which lore a round's agents were given and why, entry by entry: the ledgers keep it
/// call by call, which is how the Budgets panel shows it, but a game master asks "what
/// fired this round, and for whom".
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RoundLore {
    pub fired: Vec<FiredLore>,
    /// Entries that matched but were left out of a call (over budget, a timer, …).
    pub held_back: Vec<HeldLore>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FiredLore {
    /// The entry and why it fired, as activation says it: `Tide (constant)`,
    /// `Map (key "map")`, `Brother (key "bell tower" in the lore of Map)`.
    pub entry: String,
    /// The calls whose prompt it went into: `director`, `character Bram`, ….
    pub given_to: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeldLore {
    pub entry: String,
    pub call: String,
    pub reason: String,
}

impl RoundLore {
    pub fn of(ledgers: &[CallLedger]) -> Self {
        let mut out = RoundLore::default();
        for call in ledgers {
            let who = match &call.character {
                Some(name) => format!("{} {name}", call.agent),
                None => call.agent.clone(),
            };
            let Some(lore) = call.ledger.section(Section::Lore) else { continue };
            for id in &lore.kept {
                let entry = id.strip_prefix("lore ").unwrap_or(id);
                match out.fired.iter_mut().find(|f| f.entry == entry) {
                    Some(f) if !f.given_to.contains(&who) => f.given_to.push(who.clone()),
                    Some(_) => {}
                    None => out.fired.push(FiredLore { entry: entry.to_string(), given_to: vec![who.clone()] }),
                }
            }
            for dropped in &lore.dropped {
                let entry = dropped.id.strip_prefix("lore ").unwrap_or(&dropped.id).to_string();
                out.held_back.push(HeldLore { entry, call: who.clone(), reason: dropped.reason.clone() });
            }
        }
        out
    }

    /// One line per entry, as the CLI prints them and the Scene panel lists them.
    pub fn lines(&self) -> Vec<String> {
        let fired = self.fired.iter().map(|f| format!("{} — given to {}", f.entry, f.given_to.join(", ")));
        let held = self.held_back.iter().map(|h| format!("{} — held back from {}: {}", h.entry, h.call, h.reason));
        fired.chain(held).collect()
    }
}

/// A scene as the Scene panel draws it.
#[derive(Debug, Clone, Serialize)]
pub struct SceneSnapshot {
    pub view: SceneView,
    /// The last [`SNAPSHOT_MESSAGES`] messages, oldest first.
    pub messages: Vec<SceneMessage>,
    pub last_round: Option<LastRound>,
}

pub fn snapshot(conn: &Connection, scene: &str) -> Result<SceneSnapshot, SceneError> {
    let id = records::resolve_scene(conn, scene)?;
    let view = records::load_view(conn, &id)?;
    let messages = records::recent_messages(conn, &id, SNAPSHOT_MESSAGES)?;
    let last_round = match view.rounds {
        0 => None,
        n => records::load_round(conn, &id, n)?.map(LastRound::from_record).transpose()?,
    };
    Ok(SceneSnapshot { view, messages, last_round })
}

/// The prompt templates, shared with the UI thread so it can render a re-fitted
/// envelope itself. Not serialised: JSON consumers get the candidates and ledgers.
#[derive(Clone)]
pub struct SharedTemplates(pub Arc<PromptTemplates>);

impl std::fmt::Debug for SharedTemplates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PromptTemplates({})", self.0.dir().display())
    }
}

/// Tokens used per section by one closed round (all its calls summed).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TelemetryPoint {
    pub round: u32,
    pub used: BTreeMap<Section, u32>,
}

/// The next call of one agent in a scene, before budgets.
#[derive(Debug, Clone, Serialize)]
pub struct EnvelopePreview {
    pub scene_id: String,
    pub agent: AgentKind,
    /// The character the call speaks for ([`AgentKind::Character`]).
    pub character: Option<CastMember>,
    /// The plan rounds use (the campaign's own, or the config file's) and the agent
    /// profile's context size: the sliders' start.
    pub plan: BudgetPlan,
    /// Whether `plan` is the campaign's own.
    pub campaign_plan: bool,
    pub max_context_tokens: u32,
    /// Kept off the top before the shares apply: the instructions, the turn and the
    /// reply (`reply_tokens` of it).
    pub reserved_tokens: u32,
    pub reply_tokens: u32,
    /// The reply's cap and what a structured call appends to the prompt (its schema).
    pub reply: envelope::ReplyPlan,
    /// The cast by name, outside the budgets (the Director's passes).
    pub roster: Vec<String>,
    /// Lore among them is activated for the configured plan: a slider move re-fits
    /// what activated but does not activate more.
    pub candidates: BTreeMap<Section, Vec<BudgetItem>>,
    /// Lore entries that matched but were held back, with why.
    pub lore_held_back: Vec<DroppedItem>,
    /// Where each activated entry goes in the prompt.
    pub lore_places: BTreeMap<String, super::lore::LorePlace>,
    /// The instruction the call would end with.
    pub turn: String,
    pub last_round: Option<LastRound>,
    /// Tokens per section per round over the telemetry window, oldest first.
    pub telemetry: Vec<TelemetryPoint>,
    pub telemetry_messages: u32,
    #[serde(skip)]
    pub templates: Option<SharedTemplates>,
    /// Why the templates could not be loaded, if they could not.
    pub template_error: Option<String>,
}

impl EnvelopePreview {
    /// The envelope for `plan` and `max_context_tokens` (the sliders' values), with the
    /// instructions, the turn and the reply reserved first, as the round does.
    pub fn fit(&self, plan: &BudgetPlan, max_context_tokens: u32) -> Envelope {
        let mut envelope = envelope::fit(plan, max_context_tokens.saturating_sub(self.reserved_tokens), &self.candidates, &self.lore_held_back);
        envelope.lore_places = self.lore_places.clone();
        envelope.roster = self.roster.clone();
        envelope
    }

    /// The whole prompt as the round would send it, estimated: `prompt` (from
    /// [`Self::render`]) and the schema text a structured call appends.
    pub fn prompt_tokens(&self, prompt: &RenderedPrompt) -> u32 {
        envelope::prompt_tokens(prompt, self.reply)
    }

    /// The prompt exactly as the round would send it for `envelope`.
    pub fn render(&self, envelope: &Envelope) -> Result<RenderedPrompt, TemplateError> {
        match &self.templates {
            Some(t) => envelope::render(&t.0, self.agent, envelope, self.character.as_ref(), &self.turn),
            None => Err(TemplateError::MissingDir(crate::paths::prompts_dir())),
        }
    }
}

/// The next call of one agent as the configuration plans it: the preview fitted to the
/// plan rounds use, with each section's share, allocation, use and what it drops, and the
/// prompt as it would be sent. What `scene preview` prints and `GET
/// /api/scene/{scene}/preview` answers — the Budgets panel's numbers before any slider moves.
#[derive(Debug, Clone, Serialize)]
pub struct NextCall {
    pub scene_id: String,
    pub agent: AgentKind,
    /// The character the call speaks for (a character call).
    pub character: Option<String>,
    /// Whether the shares are the campaign's own (else the config file's).
    pub campaign_plan: bool,
    /// The agent profile's whole context, which prompt and reply share.
    pub max_context_tokens: u32,
    /// Kept off the top before the shares apply: the instructions, the turn and the reply.
    pub reserved_tokens: u32,
    /// The reply's cap.
    pub reply_tokens: u32,
    /// What a structured call appends to the prompt (its JSON Schema), in tokens.
    pub schema_tokens: u32,
    /// The whole prompt as sent, estimated (`None` when the templates cannot be loaded).
    pub prompt_tokens: Option<u32>,
    /// Of it, the sections' items.
    pub section_tokens: u32,
    /// Per section: its share, what it was given, used, kept and dropped (with why).
    pub sections: Vec<crate::prompting::SectionLedger>,
    /// The prompt as it would be sent (`None` when the templates cannot be loaded).
    pub system: Option<String>,
    pub user: Option<String>,
    /// Why the templates could not be loaded, if they could not.
    pub template_error: Option<String>,
}

impl EnvelopePreview {
    /// The next call as the configured plan fits it ([`NextCall`]).
    pub fn next_call(&self) -> NextCall {
        let envelope = self.fit(&self.plan, self.max_context_tokens);
        let rendered = self.render(&envelope);
        let (prompt, template_error) = match rendered {
            Ok(p) => (Some(p), self.template_error.clone()),
            Err(e) => (None, Some(self.template_error.clone().unwrap_or_else(|| e.to_string()))),
        };
        NextCall {
            scene_id: self.scene_id.clone(),
            agent: self.agent,
            character: self.character.as_ref().map(|c| c.name.clone()),
            campaign_plan: self.campaign_plan,
            max_context_tokens: self.max_context_tokens,
            reserved_tokens: self.reserved_tokens,
            reply_tokens: self.reply_tokens,
            schema_tokens: self.reply.appended,
            prompt_tokens: prompt.as_ref().map(|p| self.prompt_tokens(p)),
            section_tokens: envelope.ledger.used(),
            sections: envelope.ledger.sections,
            system: prompt.as_ref().map(|p| p.system.clone()),
            user: prompt.map(|p| p.user),
            template_error,
        }
    }
}

/// Build the preview of the next `agent` call in `scene`. For a character, the
/// Director guidance is what the last round's plan gave it (the next plan is not made
/// yet); `character` is a name or id, or `None` for the first active character.
pub fn preview(
    conn: &Connection,
    config: &crate::config::Config,
    scene: &str,
    agent: AgentKind,
    character: Option<&str>,
    recall: &super::recall::Recall,
) -> Result<EnvelopePreview, SceneError> {
    let id = records::resolve_scene(conn, scene)?;
    let mut scene_config: SceneConfig = config.scene.clone();
    let campaign_plan = super::authoring::campaign_budgets_of_scene(conn, &id)?;
    if let Some(plan) = &campaign_plan {
        scene_config.budgets = plan.clone();
    }
    let scene_config = &scene_config;
    let view = records::load_view(conn, &id)?;
    let notes = records::load_notes(conn, &id)?;
    let history = records::recent_messages(conn, &id, scene_config.history_window)?;
    let lore = super::lore::campaign_lore(conn, &view.campaign_id)?;
    // A copy of the scene's timers: previewing must not advance them.
    let mut lore_state = super::lore::load_state(conn, &id)?;
    let next_number = history.last().map(|m| m.number).unwrap_or(0) + 1;
    let last_round = match view.rounds {
        0 => None,
        n => records::load_round(conn, &id, n)?.map(LastRound::from_record).transpose()?,
    };
    let role = agent.role();
    let profile = config.profile_for_role(role).map_err(|e| SceneError::Invalid(e.to_string()))?.clone();
    let max_context_tokens = profile.max_context_tokens;
    let round = view.rounds + 1;

    let member = match agent {
        AgentKind::Character => {
            let member = match character {
                Some(key) => view.member_by_name(key),
                None => view.active().next(),
            };
            Some(member.cloned().ok_or_else(|| SceneError::Invalid(format!("no character {:?} in scene {}", character.unwrap_or("(active)"), view.name)))?)
        }
        _ => None,
    };
    let mut guidance = Vec::new();
    if let (Some(member), Some(last)) = (&member, &last_round) {
        let plan = &last.director.plan;
        if let Some(actor) = plan.acting_characters.iter().find(|a| view.member_by_name(&a.name).is_some_and(|m| m.id == member.id)) {
            guidance.push(actor.guidance.clone());
        }
        guidance.push(plan.open_guidance.clone());
    }
    let turn = match agent {
        AgentKind::Director => envelope::director_turn(round, None),
        AgentKind::Reconcile => envelope::reconcile_turn(round),
        AgentKind::Narrator => envelope::narrator_turn(round),
        AgentKind::World => envelope::world_turn(round),
        AgentKind::Character => envelope::character_turn(member.as_ref().map(|m| m.name.as_str()).unwrap_or_default()),
    };
    // What the character would recall now (the round searches again with its plan).
    let recalled = match &member {
        Some(m) => recall.for_character(&view.campaign_id, &view.id, &m.name, &history, &guidance, scene_config.memories_per_call, scene_config.recall_skips_newest).hits,
        None => Vec::new(),
    };
    let (templates, template_error) = match PromptTemplates::shipped() {
        Ok(t) => (Some(SharedTemplates(Arc::new(t))), None),
        Err(e) => (None, Some(e.to_string())),
    };
    // What the round keeps off the top before the shares apply (as `assemble_for_call`).
    let reply = match agent {
        AgentKind::Director => {
            let (schema, options) = super::round::director_schema::<super::model::DirectorPlan>(&profile, &view);
            envelope::ReplyPlan::structured(&profile, &schema, &options)
        }
        AgentKind::Reconcile => {
            let (schema, options) = super::round::director_schema::<super::model::Reconciliation>(&profile, &view);
            envelope::ReplyPlan::structured(&profile, &schema, &options)
        }
        AgentKind::World => {
            let schema = crate::llm::structured::schema_for::<super::model::WorldUpdate>();
            envelope::ReplyPlan::structured(&profile, &schema, &Default::default())
        }
        AgentKind::Character | AgentKind::Narrator => envelope::ReplyPlan::prose(&profile),
    };
    let reply_tokens = reply.tokens;
    let reserved_tokens = match &templates {
        Some(t) => envelope::reserve(&t.0, agent, member.as_ref(), &turn, reply, &envelope::roster(agent, &view))?,
        None => reply_tokens + reply.appended,
    };
    let gathered = envelope::gather(
        &scene_config.budgets,
        max_context_tokens.saturating_sub(reserved_tokens),
        &EnvelopeInput {
            agent,
            view: &view,
            notes: &notes,
            history: &history,
            lore: Some(&lore),
            memories: &recalled,
            character: member.as_ref(),
            director_guidance: guidance,
            lore_scan_depth: scene_config.lore_scan_depth,
            message_number: u64::from(next_number),
            seed: super::lore::seed_for(&id),
            cancel: None,
            bank: None,
        },
        &mut lore_state,
    );
    let (telemetry, telemetry_messages) = telemetry(conn, &id, scene_config.telemetry_window)?;
    Ok(EnvelopePreview {
        scene_id: id,
        agent,
        character: member,
        plan: scene_config.budgets.clone(),
        campaign_plan: campaign_plan.is_some(),
        max_context_tokens,
        reserved_tokens,
        reply_tokens,
        reply,
        roster: envelope::roster(agent, &view),
        candidates: gathered.sections,
        lore_held_back: gathered.lore_held_back,
        lore_places: gathered.lore_places,
        turn,
        last_round,
        telemetry,
        telemetry_messages,
        templates,
        template_error,
    })
}

/// Tokens per section for every round with a message among the scene's last `window`
/// messages, from the ledgers stored with each round. Returns the points and how many
/// messages the window actually covers.
pub fn telemetry(conn: &Connection, scene_id: &str, window: u32) -> Result<(Vec<TelemetryPoint>, u32), SceneError> {
    let window = window.max(1);
    let covered: u32 = conn.query_row(
        "SELECT COUNT(*) FROM (SELECT 1 FROM scene_messages WHERE scene_id = ?1 ORDER BY number DESC LIMIT ?2)",
        params![scene_id, window],
        |r| r.get(0),
    ).map_err(crate::store::StoreError::from)?;
    let first_round: u32 = conn
        .query_row(
            "SELECT round FROM scene_messages WHERE scene_id = ?1 ORDER BY number DESC LIMIT 1 OFFSET ?2",
            params![scene_id, window - 1],
            |r| r.get(0),
        )
        .optional()
        .map_err(crate::store::StoreError::from)?
        .unwrap_or(0);
    let mut stmt = conn
        .prepare("SELECT round, ledgers_json FROM scene_rounds WHERE scene_id = ?1 AND round >= ?2 ORDER BY round")
        .map_err(crate::store::StoreError::from)?;
    let rows: Vec<(u32, String)> = stmt
        .query_map(params![scene_id, first_round], |r| Ok((r.get(0)?, r.get(1)?)))
        .and_then(|rows| rows.collect())
        .map_err(crate::store::StoreError::from)?;
    let mut points = Vec::with_capacity(rows.len());
    for (round, json) in rows {
        let calls: Vec<CallLedger> =
            serde_json::from_str(&json).map_err(|e| SceneError::Invalid(format!("round {round} ledgers: {e}")))?;
        let mut used: BTreeMap<Section, u32> = Section::ALL.iter().map(|s| (*s, 0)).collect();
        for call in &calls {
            for section in &call.ledger.sections {
                *used.entry(section.section).or_default() += section.used;
            }
        }
        points.push(TelemetryPoint { round, used });
    }
    Ok((points, covered))
}
