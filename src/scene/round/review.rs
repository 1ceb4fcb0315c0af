//! The pause after Director pass 1: when the game master asked to review the plan, the
//! round shows it (`plan_review`) and waits — holding nothing but its own job — until the
//! plan comes back, edited or as it was, or the round is cancelled.

use super::super::model::DirectorPlan;
use super::super::{SceneError, SceneEvent};
use crate::context::Context;
use crate::llm::structured::ContentCheck;
use crate::llm::{CancelToken, LlmError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The rounds waiting for their plan, by scene, each with the check a plan must pass
/// (the one the Director's own plan passed: someone of the cast acts).
#[derive(Default)]
pub struct PlanDesk {
    waiting: Mutex<HashMap<String, (crossbeam_channel::Sender<DirectorPlan>, ContentCheck)>>,
}

fn desk(ctx: &Context) -> Arc<PlanDesk> {
    let slot = ctx.service::<PlanDesk>();
    let mut held = slot.lock().unwrap_or_else(|p| p.into_inner());
    held.get_or_insert_with(|| Arc::new(PlanDesk::default())).clone()
}

/// Show `plan` and wait for the game master's version of it.
pub(super) fn wait_for_plan(
    ctx: &Context,
    scene_id: &str,
    round: u32,
    plan: DirectorPlan,
    check: ContentCheck,
    cancel: &CancelToken,
) -> Result<DirectorPlan, SceneError> {
    let desk = desk(ctx);
    let (send, receive) = crossbeam_channel::bounded(1);
    desk.waiting.lock().unwrap_or_else(|p| p.into_inner()).insert(scene_id.to_string(), (send, check));
    ctx.emit(SceneEvent::PlanReview { scene_id: scene_id.to_string(), round, plan });
    let outcome = loop {
        match receive.recv_timeout(Duration::from_millis(100)) {
            Ok(plan) => break Ok(plan),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) if cancel.is_cancelled() => break Err(LlmError::Cancelled.into()),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break Err(LlmError::Cancelled.into()),
        }
    };
    desk.waiting.lock().unwrap_or_else(|p| p.into_inner()).remove(scene_id);
    outcome
}

/// Hand the waiting round of `scene_id` its plan. A plan the Director's own would have
/// been refused for (nobody of the cast acts) is refused, and the round waits on for one
/// that passes.
pub fn submit(ctx: &Context, scene_id: &str, plan: DirectorPlan) -> Result<(), SceneError> {
    let desk = desk(ctx);
    let mut waiting = desk.waiting.lock().unwrap_or_else(|p| p.into_inner());
    let Some((sender, check)) = waiting.remove(scene_id) else {
        return Err(SceneError::Invalid(format!("no round of scene {scene_id} is waiting for its plan")));
    };
    let problems = check(&serde_json::to_value(&plan).unwrap_or_default());
    if !problems.is_empty() {
        let said: Vec<String> = problems.iter().map(|p| format!("{} {}", p.path.trim_start_matches('/'), p.message)).collect();
        waiting.insert(scene_id.to_string(), (sender, check));
        return Err(SceneError::Invalid(format!("the plan was not taken (the round still waits for one): {}", said.join("; "))));
    }
    sender.send(plan).map_err(|_| SceneError::Invalid("the round stopped waiting for its plan".into()))
}
