//! The round's optional agents after the characters: the Narrator (scene narration,
//! streamed) and the World agent (trackers and in-fiction time). Kept apart from
//! [`super::round`], which decides when they run and what becomes of their output.

use super::SceneConfig;
use super::SceneEvent;
use super::envelope::{self, AgentKind, EnvelopeInput};
use super::lore::PreparedLore;
use super::model::{SceneMessage, SceneView, WorldUpdate};
use super::records::SceneNotes;
use super::model::CallLedger;
use super::SceneError;
use crate::context::Context;
use crate::llm::structured::{StructuredOptions, complete_structured, schema_for};
use crate::llm::{CallContext, CancelToken, ChatMessage, ChatRequest, LlmClient, ProviderProfile};
use crate::lorebook::activation::ActivationState;
use crate::prompting::PromptTemplates;
use std::sync::Arc;

/// What the Narrator and the World agent read of the round so far.
pub(super) struct AfterCharacters<'a> {
    pub ctx: &'a Arc<Context>,
    pub config: &'a SceneConfig,
    pub templates: &'a PromptTemplates,
    /// The scene with pass 1 and the characters' own deltas applied.
    pub live: &'a SceneView,
    pub notes: &'a SceneNotes,
    pub history: &'a [SceneMessage],
    pub lore: &'a PreparedLore,
    pub open_guidance: &'a str,
    pub message_number: u64,
    pub seed: u64,
    pub scene_id: &'a str,
    pub round: u32,
    pub cancel: &'a CancelToken,
    pub bank: Option<&'a crate::memory::MemoryBank>,
}

impl AfterCharacters<'_> {
    fn envelope(
        &self,
        agent: AgentKind,
        turn: &str,
        profile: &ProviderProfile,
        reply: &mut envelope::ReplyPlan,
        lore_state: &mut ActivationState,
    ) -> Result<(envelope::Envelope, envelope::RenderedPrompt), SceneError> {
        envelope::assemble_for_call(
            self.templates,
            agent,
            None,
            turn,
            &self.config.budgets,
            profile,
            reply,
            &EnvelopeInput {
                agent,
                view: self.live,
                notes: self.notes,
                history: self.history,
                lore: Some(self.lore),
                memories: &[],
                character: None,
                director_guidance: vec![self.open_guidance.to_string()],
                lore_scan_depth: self.config.lore_scan_depth,
                message_number: self.message_number,
                seed: self.seed,
                cancel: Some(self.cancel.flag()),
                bank: self.bank,
            },
            lore_state,
        )
    }

    fn request(profile: &ProviderProfile, system: String, user: String, stream: bool) -> ChatRequest {
        let mut request = ChatRequest::new(profile.model.clone(), vec![ChatMessage::system(system), ChatMessage::user(user)]);
        request.sampler = profile.sampler.clone();
        request.stream = stream;
        request
    }

    fn cancelled(&self) -> Result<(), SceneError> {
        if self.cancel.is_cancelled() { Err(SceneError::Llm(crate::llm::LlmError::Cancelled)) } else { Ok(()) }
    }
}

/// The Narrator's words for this round (streamed as tokens with `character_id`
/// `"narrator"`), and its call's ledger.
pub(super) fn narrate(
    at: &AfterCharacters<'_>,
    narrator: &(LlmClient, ProviderProfile),
    lore_state: &mut ActivationState,
) -> Result<(String, CallLedger), SceneError> {
    at.cancelled()?;
    let emit = |e: SceneEvent| at.ctx.emit(e);
    emit(SceneEvent::NarratorStarted { scene_id: at.scene_id.to_string(), round: at.round });
    let mut reply = envelope::ReplyPlan::prose(&narrator.1);
    let (envelope, prompt) = at.envelope(AgentKind::Narrator, &envelope::narrator_turn(at.round), &narrator.1, &mut reply, lore_state)?;
    let mut request = AfterCharacters::request(&narrator.1, prompt.system, prompt.user, true);
    reply.apply(&narrator.1, &mut request);
    let sink = at.ctx.clone();
    let (scene, round) = (at.scene_id.to_string(), at.round);
    let on_token = move |text: &str| {
        sink.emit(SceneEvent::Token { scene_id: scene.clone(), round, character_id: "narrator".into(), text: text.to_string() })
    };
    // The Narrator narrates: it speaks for no one of the cast, nor for the user.
    let others = super::prose::others(at.live, None);
    let who = super::prose::Speaker { scene_id: at.scene_id, round: at.round, character_id: "narrator", name: "the narrator", others };
    let completion = super::prose::draw(at.ctx, &narrator.0, request, who, at.cancel, &on_token)?;
    let content = completion.text.trim().to_string();
    emit(SceneEvent::NarratorFinished { scene_id: at.scene_id.to_string(), round: at.round, content: content.clone() });
    let ledger = CallLedger {
        agent: "narrator".into(),
        character: None,
        ledger: envelope.ledger,
        prompt_tokens: completion.usage.prompt_tokens,
        completion_tokens: completion.usage.completion_tokens,
        notes: envelope.notes,
    };
    Ok((content, ledger))
}

/// The World agent's trackers and minutes for this round, and its call's ledger.
pub(super) fn world(
    at: &AfterCharacters<'_>,
    world: &(LlmClient, ProviderProfile),
    lore_state: &mut ActivationState,
) -> Result<(WorldUpdate, CallLedger), SceneError> {
    at.cancelled()?;
    let options = StructuredOptions::default();
    let mut reply = envelope::ReplyPlan::structured(&world.1, &schema_for::<WorldUpdate>(), &options);
    let (envelope, prompt) = at.envelope(AgentKind::World, &envelope::world_turn(at.round), &world.1, &mut reply, lore_state)?;
    let mut request = AfterCharacters::request(&world.1, prompt.system, prompt.user, false);
    reply.apply(&world.1, &mut request);
    let on_wait = |holder: Option<&str>| {
        let agent = "the World agent".to_string();
        at.ctx.emit(SceneEvent::Waiting { scene_id: at.scene_id.to_string(), round: at.round, agent, holder: holder.map(str::to_string) })
    };
    let output = complete_structured::<WorldUpdate>(&world.0, request, &options, CallContext::new(at.cancel).with_wait(&on_wait))
        .map_err(|e| SceneError::Agent { agent: "world".into(), message: e.to_string() })?;
    at.ctx.emit(SceneEvent::WorldDecided { scene_id: at.scene_id.to_string(), round: at.round, decision: Box::new(output.value.clone()) });
    let ledger = CallLedger {
        agent: "world".into(),
        character: None,
        ledger: envelope.ledger,
        prompt_tokens: output.usage.prompt_tokens,
        completion_tokens: output.usage.completion_tokens,
        notes: envelope.notes,
    };
    Ok((output.value, ledger))
}
