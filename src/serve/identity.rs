//! The identity predecessor's API, path for path: start, status, checkpoint, final,
//! approve, feedback (which really regenerates here), and its WebSocket with the five
//! message types it sent (`wave_started`, `checkpoint_ready`, `wave_complete`,
//! `character_complete`, `error`) field for field. What the GUI needs besides (tokens,
//! versions, approvals) goes out as further types a seed client ignores.

use super::{ApiError, AppState, ErrorBody, Path, Query, Upgrade, body, wait_for};
use crate::engine::{Command, Event};
use crate::identity::export::{CheckpointDocument, SeedMetadata, checkpoint_document, checkpoint_version_document, metadata};
use crate::identity::records::{CheckpointStatus, RunStatus};
use crate::identity::schema::{CharacterSeed, Mode, OtherCharacter};
use crate::identity::{IdentityCommand, IdentityError, IdentityEvent, RunView};
use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/character/start", post(start))
        .route("/api/character/{character_id}/status", get(status))
        .route("/api/character/{character_id}/checkpoint/{n}", get(checkpoint))
        .route("/api/character/{character_id}/checkpoint/{n}/versions", get(checkpoint_versions))
        .route("/api/character/{character_id}/final", get(final_profile))
        .route("/api/character/{character_id}/approve", post(approve))
        .route("/api/character/{character_id}/feedback", post(feedback))
        .route("/api/character/{character_id}/reopen", post(reopen))
        .route("/api/character/{character_id}/rerun", post(rerun))
        .route("/api/character/{character_id}/keep", post(keep))
        .route("/api/character/{character_id}/cancel", post(cancel))
        .route("/api/character/{character_id}/checkpoint/{n}/edit", post(edit))
        .route("/ws/character/{character_id}", get(socket))
}

/// The predecessor's start body: the entry agent's characters (the first is developed,
/// the rest are the people around it), the storyline, the depth.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(super) struct StartBody {
    #[schema(value_type = Vec<Object>)]
    characters: Vec<Value>,
    #[serde(default)]
    #[schema(value_type = Object)]
    storyline: Value,
    #[serde(default = "balanced")]
    mode: String,
    /// Ours: approve every checkpoint as it is ready.
    #[serde(default)]
    auto_approve: bool,
    /// Ours: the provider profile every agent uses.
    #[serde(default)]
    profile: Option<String>,
}

/// The fields of the start body.
const START_FIELDS: [&str; 5] = ["characters", "storyline", "mode", "auto_approve", "profile"];

/// The start body is the predecessor's entry agent's output, passed whole, so a field we
/// do not read is let through as the predecessor let it through; but one a letter or two
/// from a field we take is a mistake to name (`auto_aprove` would otherwise leave the
/// run waiting for approvals the client believes it turned off).
fn refuse_near_misses(bytes: &Bytes) -> Result<(), ApiError> {
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(bytes) else { return Ok(()) };
    for sent in fields.keys().filter(|k| !START_FIELDS.contains(&k.as_str())) {
        // Close enough to be a slip, not another word: `auto_aprove` and `charaters`
        // are, `model` (beside `mode`) is not.
        let near = START_FIELDS.iter().find(|field| strsim::normalized_damerau_levenshtein(&sent.to_lowercase().replace('-', "_"), field) > 0.8);
        if let Some(field) = near {
            return Err(ApiError::bad_request(format!("invalid body: unknown field `{sent}`; did you mean `{field}`?")));
        }
    }
    Ok(())
}

/// The start body as the entry agent sent it, without the start's own options (`mode`,
/// which the predecessor kept beside it, and our `auto_approve` and `profile`): what the
/// predecessor saved as `input.json`, every field of every character kept.
fn entry_input(bytes: &Bytes) -> Option<Value> {
    let Ok(Value::Object(mut fields)) = serde_json::from_slice::<Value>(bytes) else { return None };
    for option in ["mode", "auto_approve", "profile"] {
        fields.remove(option);
    }
    Some(Value::Object(fields))
}

fn balanced() -> String {
    "balanced".into()
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct StartResponse {
    character_id: String,
    status: String,
    message: String,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ApproveBody {
    checkpoint: u8,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct FeedbackBody {
    checkpoint: u8,
    feedback: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct ActionResponse {
    message: String,
    status: String,
    checkpoint: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    estimated_time_seconds: Option<f64>,
}

/// A character object of the start body as our seed: name, role and concept, under the
/// names entry agents use for them.
fn seed_from(body: &StartBody) -> Result<CharacterSeed, ApiError> {
    let text = |v: &Value, keys: &[&str]| -> String {
        keys.iter().find_map(|k| v.get(*k).and_then(Value::as_str)).map(str::trim).unwrap_or_default().to_string()
    };
    let Some(first) = body.characters.first() else {
        return Err(ApiError::bad_request("invalid body: `characters` is empty; the first character is the one developed"));
    };
    let name = text(first, &["name", "character_name"]);
    if name.is_empty() {
        return Err(ApiError::bad_request("invalid body: `characters[0].name` is missing"));
    }
    // As a seed file without one is refused: the concept is what every agent develops.
    let concept = text(first, &["concept", "description", "summary", "core_concept", "background"]);
    if concept.is_empty() {
        return Err(ApiError::bad_request(
            "invalid body: `characters[0].concept` is missing or empty; the character developed needs a concept \
             (read from `concept`, `description`, `summary`, `core_concept` or `background`)",
        ));
    }
    let others = body.characters[1..]
        .iter()
        .filter_map(|c| {
            let name = text(c, &["name", "character_name"]);
            (!name.is_empty()).then(|| OtherCharacter {
                name,
                role: text(c, &["role", "archetype"]),
                concept: text(c, &["concept", "description", "summary"]),
            })
        })
        .collect();
    Ok(CharacterSeed { name, role: text(first, &["role", "archetype", "occupation"]), concept, storyline: body.storyline.clone(), other_characters: others })
}

fn load(state: &AppState, id: &str) -> Result<RunView, ApiError> {
    match crate::identity::load_view(state.store(), id) {
        Ok(view) => Ok(view),
        Err(IdentityError::Store(crate::store::StoreError::NotFound(_)) | IdentityError::Invalid(_)) => {
            Err(ApiError::not_found(format!("Character {id} not found")))
        }
        Err(e) => Err(ApiError::internal(e)),
    }
}

/// Start developing a character; the waves run in the background.
#[utoipa::path(post, path = "/api/character/start", request_body = StartBody,
    responses((status = 200, body = StartResponse), (status = 400, body = ErrorBody)))]
pub(super) async fn start(State(state): State<Arc<AppState>>, bytes: Bytes) -> Result<axum::Json<StartResponse>, ApiError> {
    let request: StartBody = body(&bytes)?;
    refuse_near_misses(&bytes)?;
    let seed = seed_from(&request)?;
    let mode = Mode::parse(&request.mode).ok_or_else(|| ApiError::bad_request("invalid body: `mode` must be fast, balanced or deep"))?;
    let _one_at_a_time = state.start_lock.lock().await;
    let mut events = state.events.subscribe();
    let entry_input = entry_input(&bytes);
    let command = IdentityCommand::Start { seed, entry_input, mode, profile: request.profile, auto_approve: request.auto_approve };
    state.send(Command::Identity(command))?;
    let started = wait_for(&mut events, Duration::from_secs(30), |event| match event {
        Event::Identity(IdentityEvent::RunStarted { character_id, .. }) => Some(Ok(character_id.clone())),
        Event::Identity(IdentityEvent::Error { checkpoint: None, message, .. }) => Some(Err(message.clone())),
        _ => None,
    })
    .await;
    match started {
        Some(Ok(character_id)) => Ok(axum::Json(StartResponse {
            character_id,
            status: "in_progress".into(),
            message: "Character development started".into(),
        })),
        Some(Err(message)) => Err(ApiError::bad_request(message)),
        None => Err(ApiError::internal("the engine did not start the run in time")),
    }
}

/// The run's metadata, as the predecessor's `metadata.json`.
#[utoipa::path(get, path = "/api/character/{character_id}/status",
    params(("character_id" = String, Path)),
    responses((status = 200, body = SeedMetadata), (status = 404, body = ErrorBody)))]
pub(super) async fn status(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<axum::Json<SeedMetadata>, ApiError> {
    Ok(axum::Json(metadata(&load(&state, &id)?)))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct VersionQuery {
    /// A version of the checkpoint (see `…/versions`); the current one without it.
    #[serde(default)]
    version: Option<u32>,
}

/// One checkpoint's current version, or with `?version=V` that version.
#[utoipa::path(get, path = "/api/character/{character_id}/checkpoint/{n}",
    params(("character_id" = String, Path), ("n" = u8, Path), ("version" = Option<u32>, Query, description = "a version listed by …/versions; the current one without it")),
    responses((status = 200, body = CheckpointDocument), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn checkpoint(
    State(state): State<Arc<AppState>>,
    Path((id, n)): Path<(String, String)>,
    Query(query): Query<VersionQuery>,
) -> Result<axum::Json<CheckpointDocument>, ApiError> {
    let view = load(&state, &id)?;
    let n = checkpoint_number(&n)?;
    let cp = checkpoint_of(&view, n)?;
    match query.version {
        Some(version) => checkpoint_version_document(cp, version).map(axum::Json).ok_or_else(|| {
            let kept: Vec<String> = cp.versions.iter().map(|v| v.version.to_string()).collect();
            ApiError::not_found(format!("Checkpoint {n} has no version {version} (it has: {})", if kept.is_empty() { "none".into() } else { kept.join(", ") }))
        }),
        None => checkpoint_document(cp).map(axum::Json).ok_or_else(|| ApiError::not_found(format!("Checkpoint {n} has no output yet"))),
    }
}

fn checkpoint_number(n: &str) -> Result<u8, ApiError> {
    n.parse().map_err(|_| ApiError::bad_request(format!("checkpoint {n:?} is not a number from 1 to 7")))
}

/// One version of a checkpoint, as `identity status` lists it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct VersionItem {
    version: u32,
    /// The version the checkpoint now serves (the one approved, once it is).
    current: bool,
    /// A draw whose every attempt was refused: no output, never put up for approval.
    failed: bool,
    /// The feedback it was drawn with, when it was.
    feedback: Option<String>,
    tokens_used: u32,
    created_at: String,
}

/// Every version of a checkpoint, oldest first (feedback draws a new one; `?version=V`
/// on the checkpoint reads any of them).
#[utoipa::path(get, path = "/api/character/{character_id}/checkpoint/{n}/versions",
    params(("character_id" = String, Path), ("n" = u8, Path)),
    responses((status = 200, body = Vec<VersionItem>), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn checkpoint_versions(
    State(state): State<Arc<AppState>>,
    Path((id, n)): Path<(String, String)>,
) -> Result<axum::Json<Vec<VersionItem>>, ApiError> {
    let view = load(&state, &id)?;
    let cp = checkpoint_of(&view, checkpoint_number(&n)?)?;
    Ok(axum::Json(
        cp.versions
            .iter()
            .map(|v| VersionItem {
                version: v.version,
                current: v.version == cp.record.current_version,
                failed: v.is_failed(),
                feedback: v.feedback.clone(),
                tokens_used: v.usage.total(),
                created_at: v.created_at.clone(),
            })
            .collect(),
    ))
}

/// The final profile of a completed character.
#[utoipa::path(get, path = "/api/character/{character_id}/final",
    params(("character_id" = String, Path)),
    responses((status = 200, body = Object, description = "the final profile"), (status = 404, body = ErrorBody)))]
pub(super) async fn final_profile(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<axum::Json<Value>, ApiError> {
    let view = load(&state, &id)?;
    if view.run.status != RunStatus::Completed {
        return Err(ApiError::not_found("Final profile not found: the character is not complete"));
    }
    crate::identity::export::stored_profile(state.store(), &id)
        .map_err(ApiError::internal)?
        .map(axum::Json)
        .ok_or_else(|| ApiError::not_found("Final profile not found"))
}

fn checkpoint_of(view: &RunView, n: u8) -> Result<&crate::identity::CheckpointView, ApiError> {
    view.checkpoints.iter().find(|c| c.record.number == n).ok_or_else(|| ApiError::not_found(format!("Checkpoint {n} not found")))
}

/// Approve a checkpoint awaiting approval.
#[utoipa::path(post, path = "/api/character/{character_id}/approve", request_body = ApproveBody,
    params(("character_id" = String, Path)),
    responses((status = 200, body = ActionResponse), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(super) async fn approve(State(state): State<Arc<AppState>>, Path(id): Path<String>, bytes: Bytes) -> Result<axum::Json<ActionResponse>, ApiError> {
    let request: ApproveBody = body(&bytes)?;
    let view = load(&state, &id)?;
    let cp = checkpoint_of(&view, request.checkpoint)?;
    if cp.record.status != CheckpointStatus::AwaitingApproval {
        return Err(ApiError::conflict(format!("Checkpoint {} is {}, not awaiting approval", request.checkpoint, cp.record.status.as_str())));
    }
    let n = request.checkpoint;
    done(&state, Command::Identity(IdentityCommand::Approve { character_id: id.clone(), checkpoint: n }), &id, |event| {
        matches!(event, IdentityEvent::CheckpointApproved { checkpoint_number, .. } if *checkpoint_number == n)
    })
    .await?;
    Ok(axum::Json(ActionResponse {
        message: format!("Checkpoint {} approved", request.checkpoint),
        status: "approved".into(),
        checkpoint: request.checkpoint,
        estimated_time_seconds: None,
    }))
}

/// Send a checkpoint back with feedback: its agent runs again with it.
#[utoipa::path(post, path = "/api/character/{character_id}/feedback", request_body = FeedbackBody,
    params(("character_id" = String, Path)),
    responses((status = 200, body = ActionResponse), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(super) async fn feedback(State(state): State<Arc<AppState>>, Path(id): Path<String>, bytes: Bytes) -> Result<axum::Json<ActionResponse>, ApiError> {
    let request: FeedbackBody = body(&bytes)?;
    if request.feedback.trim().is_empty() {
        return Err(ApiError::bad_request("invalid body: `feedback` is empty"));
    }
    let view = load(&state, &id)?;
    let cp = checkpoint_of(&view, request.checkpoint)?;
    if !matches!(cp.record.status, CheckpointStatus::AwaitingApproval | CheckpointStatus::Stale | CheckpointStatus::Failed) {
        return Err(ApiError::conflict(format!("Checkpoint {} is {}; only a checkpoint awaiting approval, stale or failed takes feedback", request.checkpoint, cp.record.status.as_str())));
    }
    let estimate = cp.versions.last().map(|v| v.wall_ms as f64 / 1000.0);
    let n = request.checkpoint;
    done(&state, Command::Identity(IdentityCommand::Reject { character_id: id.clone(), checkpoint: n, feedback: request.feedback }), &id, |event| {
        matches!(event, IdentityEvent::CheckpointRejected { checkpoint_number, .. } if *checkpoint_number == n)
    })
    .await?;
    Ok(axum::Json(ActionResponse {
        message: format!("Regenerating checkpoint {} with feedback", request.checkpoint),
        status: "regenerating".into(),
        checkpoint: request.checkpoint,
        estimated_time_seconds: estimate,
    }))
}

/// Re-open an approved checkpoint: it awaits approval again, and every checkpoint that
/// read it goes stale (re-run or keep each), as `identity reopen` does.
#[utoipa::path(post, path = "/api/character/{character_id}/reopen", request_body = ApproveBody,
    params(("character_id" = String, Path)),
    responses((status = 200, body = ActionResponse), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(super) async fn reopen(State(state): State<Arc<AppState>>, Path(id): Path<String>, bytes: Bytes) -> Result<axum::Json<ActionResponse>, ApiError> {
    let request: ApproveBody = body(&bytes)?;
    checkpoint_of(&load(&state, &id)?, request.checkpoint)?;
    let n = request.checkpoint;
    done(&state, Command::Identity(IdentityCommand::Reopen { character_id: id.clone(), checkpoint: n }), &id, |event| {
        matches!(event, IdentityEvent::CheckpointReopened { checkpoint_number, .. } if *checkpoint_number == n)
    })
    .await?;
    action(&state, &id, n, format!("Checkpoint {n} reopened"))
}

/// Run a stale or failed checkpoint's agent again as it is (no feedback), as
/// `identity rerun` does: the way on for a run whose agent failed.
#[utoipa::path(post, path = "/api/character/{character_id}/rerun", request_body = ApproveBody,
    params(("character_id" = String, Path)),
    responses((status = 200, body = ActionResponse), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(super) async fn rerun(State(state): State<Arc<AppState>>, Path(id): Path<String>, bytes: Bytes) -> Result<axum::Json<ActionResponse>, ApiError> {
    let request: ApproveBody = body(&bytes)?;
    let n = request.checkpoint;
    let view = load(&state, &id)?;
    let cp = checkpoint_of(&view, n)?;
    if !matches!(cp.record.status, CheckpointStatus::Stale | CheckpointStatus::Failed) {
        return Err(ApiError::conflict(format!("Checkpoint {n} is {}; only a stale or failed checkpoint re-runs", cp.record.status.as_str())));
    }
    settle(&state, Command::Identity(IdentityCommand::Rerun { character_id: id.clone(), checkpoint: n }), &id, n, |s| {
        !matches!(s, CheckpointStatus::Stale | CheckpointStatus::Failed)
    })
    .await?;
    action(&state, &id, n, format!("Checkpoint {n} is running again"))
}

/// Keep a stale checkpoint's version as it is: it awaits approval again (`identity keep`).
#[utoipa::path(post, path = "/api/character/{character_id}/keep", request_body = ApproveBody,
    params(("character_id" = String, Path)),
    responses((status = 200, body = ActionResponse), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(super) async fn keep(State(state): State<Arc<AppState>>, Path(id): Path<String>, bytes: Bytes) -> Result<axum::Json<ActionResponse>, ApiError> {
    let request: ApproveBody = body(&bytes)?;
    let n = request.checkpoint;
    let view = load(&state, &id)?;
    let cp = checkpoint_of(&view, n)?;
    if cp.record.status != CheckpointStatus::Stale {
        return Err(ApiError::conflict(format!("Checkpoint {n} is {}, not stale", cp.record.status.as_str())));
    }
    settle(&state, Command::Identity(IdentityCommand::Keep { character_id: id.clone(), checkpoint: n }), &id, n, |s| s != CheckpointStatus::Stale).await?;
    action(&state, &id, n, format!("Checkpoint {n} kept as it is"))
}

/// Which running agent to stop: one checkpoint's, or (none given) every one of the run.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RunCancelBody {
    #[serde(default)]
    checkpoint: Option<u8>,
}

/// Stop a run's running agents (one checkpoint's, or all), here or in the process that
/// runs them (`identity cancel`); a cancelled checkpoint waits as failed, to re-run.
#[utoipa::path(post, path = "/api/character/{character_id}/cancel", request_body = RunCancelBody,
    params(("character_id" = String, Path)),
    responses((status = 200, body = Object, description = "`{\"cancelled\": [checkpoint numbers]}`"), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "nothing of it is running")))]
pub(super) async fn cancel(State(state): State<Arc<AppState>>, Path(id): Path<String>, bytes: Bytes) -> Result<axum::Json<Value>, ApiError> {
    let request: RunCancelBody = if bytes.is_empty() { RunCancelBody::default() } else { body(&bytes)? };
    load(&state, &id)?;
    let mut events = state.events.subscribe();
    state.send(Command::Identity(IdentityCommand::Cancel { character_id: id.clone(), checkpoint: request.checkpoint }))?;
    let outcome = wait_for(&mut events, Duration::from_secs(60), |event| match event {
        Event::Identity(IdentityEvent::CancelRequested { character_id, checkpoints }) if *character_id == id => Some(Ok(checkpoints.clone())),
        Event::Identity(IdentityEvent::Error { character_id, checkpoint: None, message }) if *character_id == id => Some(Err(message.clone())),
        _ => None,
    })
    .await;
    match outcome {
        Some(Ok(checkpoints)) => Ok(axum::Json(json!({ "cancelled": checkpoints }))),
        Some(Err(message)) => Err(ApiError::conflict(message)),
        None => Err(ApiError::internal("the engine did not answer in time")),
    }
}

/// The game master's own version of a checkpoint awaiting approval.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CheckpointEditBody {
    /// The checkpoint's structured output, whole; checked against its agent's schema.
    #[schema(value_type = Object)]
    structured: Value,
    /// Its narrative; left out, the current version's is kept.
    #[serde(default)]
    narrative: Option<String>,
}

/// Replace a checkpoint awaiting approval with your own version (`identity edit`): a new
/// version, checked against the agent's schema (refused with the field named), put up for
/// approval; the agent's versions stay in its history.
#[utoipa::path(post, path = "/api/character/{character_id}/checkpoint/{n}/edit", request_body = CheckpointEditBody,
    params(("character_id" = String, Path), ("n" = u8, Path)),
    responses((status = 200, body = Object, description = "`{\"checkpoint\", \"version\", \"status\": \"awaiting_approval\"}`"), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody, description = "not awaiting approval, or the edit breaks the schema")))]
pub(super) async fn edit(State(state): State<Arc<AppState>>, Path((id, n)): Path<(String, u8)>, bytes: Bytes) -> Result<axum::Json<Value>, ApiError> {
    let request: CheckpointEditBody = body(&bytes)?;
    let view = load(&state, &id)?;
    let cp = checkpoint_of(&view, n)?;
    if cp.record.status != CheckpointStatus::AwaitingApproval {
        return Err(ApiError::conflict(format!("Checkpoint {n} is {}: only a version awaiting approval can be edited", cp.record.status.as_str())));
    }
    let mut events = state.events.subscribe();
    state.send(Command::Identity(IdentityCommand::Edit { character_id: id.clone(), checkpoint: n, narrative: request.narrative, structured: request.structured }))?;
    let outcome = wait_for(&mut events, Duration::from_secs(60), |event| match event {
        Event::Identity(IdentityEvent::CheckpointReady { character_id, checkpoint_number, version, .. }) if *character_id == id && *checkpoint_number == n => {
            Some(Ok(*version))
        }
        Event::Identity(IdentityEvent::Error { character_id, checkpoint: None, message }) if *character_id == id => Some(Err(message.clone())),
        _ => None,
    })
    .await;
    match outcome {
        Some(Ok(version)) => Ok(axum::Json(json!({ "checkpoint": n, "version": version, "status": "awaiting_approval" }))),
        Some(Err(message)) => Err(ApiError::conflict(message)),
        None => Err(ApiError::internal("the engine did not answer in time")),
    }
}

/// The answer to a recovery: what was done and where the checkpoint stands now.
fn action(state: &AppState, id: &str, n: u8, message: String) -> Result<axum::Json<ActionResponse>, ApiError> {
    let view = load(state, id)?;
    let cp = checkpoint_of(&view, n)?;
    Ok(axum::Json(ActionResponse { message, status: cp.record.status.as_str().to_string(), checkpoint: n, estimated_time_seconds: None }))
}

/// Send `command` and answer once checkpoint `n` of run `id` is in a status `settled`
/// takes (these commands change it and start agents without an event of their own), or
/// with the engine's error about the run as a 409.
async fn settle(state: &AppState, command: Command, id: &str, n: u8, settled: impl Fn(CheckpointStatus) -> bool) -> Result<(), ApiError> {
    let mut events = state.events.subscribe();
    state.send(command)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let view = load(state, id)?;
        if checkpoint_of(&view, n).is_ok_and(|cp| settled(cp.record.status)) {
            return Ok(());
        }
        let error = wait_for(&mut events, Duration::from_millis(50), |event| match event {
            Event::Identity(IdentityEvent::Error { character_id, checkpoint: None, message }) if character_id == id => Some(message.clone()),
            _ => None,
        })
        .await;
        if let Some(message) = error {
            return Err(ApiError::conflict(message));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ApiError::internal("the engine did not answer in time"));
        }
    }
}

/// Send `command` and answer once the engine did it (`is_done`), so a request that
/// returned is visible to the next one; an engine error about the run is a 409.
async fn done(state: &AppState, command: Command, id: &str, is_done: impl Fn(&IdentityEvent) -> bool) -> Result<(), ApiError> {
    let mut events = state.events.subscribe();
    state.send(command)?;
    let outcome = wait_for(&mut events, Duration::from_secs(60), |event| match event {
        Event::Identity(e) if e.character_id() == Some(id) && is_done(e) => Some(Ok(())),
        Event::Identity(IdentityEvent::Error { character_id, checkpoint: None, message }) if character_id == id => Some(Err(message.clone())),
        _ => None,
    })
    .await;
    match outcome {
        Some(Ok(())) => Ok(()),
        Some(Err(message)) => Err(ApiError::conflict(message)),
        None => Err(ApiError::internal("the engine did not answer in time")),
    }
}

/// The run's live messages. A client that connects late first gets where the run stands
/// (a `checkpoint_ready` for every checkpoint awaiting approval, `character_complete` if
/// it is done), so it never misses a checkpoint.
#[utoipa::path(get, path = "/ws/character/{character_id}", params(("character_id" = String, Path)),
    responses((status = 101, description = "WebSocket: the predecessor's messages"), (status = 404, body = ErrorBody)))]
pub(super) async fn socket(State(state): State<Arc<AppState>>, Path(id): Path<String>, Upgrade(upgrade): Upgrade) -> Response {
    if let Err(e) = load(&state, &id) {
        return e.into_response();
    }
    upgrade.on_upgrade(move |socket| follow(state, id, socket)).into_response()
}

async fn follow(state: Arc<AppState>, id: String, mut socket: WebSocket) {
    // Subscribe before reading the state, so nothing falls between the two.
    let mut events = state.events.subscribe();
    let Ok(replayed) = send_state(&state, &id, &mut socket).await else { return };
    // What was emitted while the state was read is already in it: a wave or an agent
    // that started just then is not announced twice.
    let mut replayed = Replayed::new(&replayed, std::time::Instant::now());
    while let Ok(event) = events.try_recv() {
        let Event::Identity(event) = &*event else { continue };
        if event.character_id() != Some(id.as_str()) {
            continue;
        }
        for message in seed_messages(event) {
            let text = message.to_string();
            if replayed.already_said(&text, std::time::Instant::now()) {
                continue;
            }
            if socket.send(Message::Text(text.into())).await.is_err() {
                return;
            }
        }
    }
    // Work on this run in another process (the CLI approving, a second server) sends no
    // event here: every two seconds the run is read again and what changed is said in
    // the predecessor's messages. An event of ours is said as it comes, and what it
    // changed becomes the known standing, so the next read does not say it again.
    let mut known = load(&state, &id).ok().map(|v| standing(&v));
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(2));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let Ok(view) = load(&state, &id) else { continue };
                let now = standing(&view);
                for message in moved_elsewhere(known.as_ref(), &now, &view) {
                    if socket.send(Message::Text(message.to_string().into())).await.is_err() {
                        return;
                    }
                }
                known = Some(now);
            }
            event = events.recv() => match event {
                Ok(event) => {
                    let Event::Identity(event) = &*event else { continue };
                    if event.character_id() != Some(id.as_str()) {
                        continue;
                    }
                    if !matches!(event, IdentityEvent::Token { .. }) {
                        known = load(&state, &id).ok().map(|v| standing(&v)).or(known);
                    }
                    for message in seed_messages(event) {
                        let text = message.to_string();
                        if replayed.already_said(&text, std::time::Instant::now()) {
                            continue;
                        }
                        if socket.send(Message::Text(text.into())).await.is_err() {
                            return;
                        }
                    }
                }
                // Too slow to keep up: say where the run stands instead of what it missed.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    if send_state(&state, &id, &mut socket).await.is_err() {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            incoming = socket.recv() => match incoming {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {} // clients only listen; pings are answered by the library
            },
        }
    }
}

/// The messages a newly joined socket was sent as the run's state, for telling apart an
/// event that the state already showed. The engine writes a change before it emits the
/// event, so the state can show an agent started whose event is still on its way: that
/// event arrives just after the join and must not be said twice. Past a short grace the
/// list is dropped, as a later message equal to one of them (a checkpoint ready again
/// after a rejection) is news.
struct Replayed {
    messages: Vec<String>,
    until: std::time::Instant,
}

impl Replayed {
    const GRACE: std::time::Duration = std::time::Duration::from_secs(2);

    fn new(messages: &[Value], now: std::time::Instant) -> Self {
        Replayed { messages: messages.iter().map(Value::to_string).collect(), until: now + Self::GRACE }
    }

    /// Whether `text` was in the replay and has not been matched yet (each replayed
    /// message swallows one equal event, within the grace).
    fn already_said(&mut self, text: &str, now: std::time::Instant) -> bool {
        if now > self.until {
            self.messages.clear();
            return false;
        }
        match self.messages.iter().position(|r| r == text) {
            Some(i) => {
                self.messages.swap_remove(i);
                true
            }
            None => false,
        }
    }
}

/// Send where the run stands; the messages sent.
async fn send_state(state: &AppState, id: &str, socket: &mut WebSocket) -> Result<Vec<Value>, axum::Error> {
    let Ok(view) = load(state, id) else { return Ok(Vec::new()) };
    let messages = state_messages(&view);
    for message in &messages {
        socket.send(Message::Text(message.to_string().into())).await?;
    }
    Ok(messages)
}

/// Each checkpoint's status and version, and whether the run is complete: what a read
/// of the run is compared by.
#[derive(Debug, Clone, PartialEq)]
struct Standing {
    checkpoints: Vec<(u8, CheckpointStatus, u32)>,
    complete: bool,
}

fn standing(view: &RunView) -> Standing {
    Standing {
        checkpoints: view.checkpoints.iter().map(|c| (c.record.number, c.record.status, c.record.current_version)).collect(),
        complete: view.run.status == RunStatus::Completed,
    }
}

/// What changed between two reads of a run, as the messages its events would have sent.
fn moved_elsewhere(before: Option<&Standing>, now: &Standing, view: &RunView) -> Vec<Value> {
    let Some(before) = before else { return Vec::new() };
    if before == now {
        return Vec::new();
    }
    let mut out = vec![json!({ "type": "state", "metadata": metadata(view) })];
    for (cp, &(number, status, version)) in view.checkpoints.iter().zip(&now.checkpoints) {
        if before.checkpoints.iter().any(|&(n, s, v)| n == number && s == status && v == version) {
            continue;
        }
        match status {
            CheckpointStatus::AwaitingApproval => out.push(checkpoint_ready(number, cp.record.agent)),
            CheckpointStatus::Approved => out.push(json!({ "type": "checkpoint_approved", "checkpoint_number": number })),
            CheckpointStatus::Running | CheckpointStatus::Regenerating => {
                out.push(json!({ "type": "agent_started", "checkpoint_number": number, "agent": cp.record.agent.name(), "version": version + 1 }))
            }
            CheckpointStatus::Stale => out.push(json!({ "type": "checkpoint_stale", "checkpoint_number": number })),
            CheckpointStatus::Failed => out.push(json!({ "type": "checkpoint_failed", "checkpoint_number": number })),
            _ => {}
        }
    }
    if now.complete && !before.complete {
        out.push(json!({ "type": "character_complete", "character_id": view.run.id, "message": "All agents completed. Character profile ready." }));
    }
    out
}

/// Where a run stands, as messages: ours (`state`, the metadata), then the predecessor's
/// as its connection flow has them: the current wave's `wave_started`, the agents still
/// working (`agent_started`), a `checkpoint_ready` for what waits on the user, the
/// `error` of a failed run, `character_complete` for a finished one.
fn state_messages(view: &RunView) -> Vec<Value> {
    let mut out = vec![json!({ "type": "state", "metadata": metadata(view) })];
    if view.run.status != RunStatus::Completed {
        let wave = view.checkpoints.iter().find(|c| c.record.status != CheckpointStatus::Approved).map(|c| c.record.wave);
        if let Some(wave) = wave {
            let in_wave = view.checkpoints.iter().filter(|c| c.record.wave == wave);
            // As `advance` announced it: every agent of the wave, once one has started.
            if in_wave.clone().any(|c| c.record.status != CheckpointStatus::Queued) {
                let agents: Vec<&str> = in_wave.map(|c| c.record.agent.name()).collect();
                out.push(json!({ "type": "wave_started", "wave": wave, "agents": agents }));
            }
        }
        for cp in view.checkpoints.iter().filter(|c| c.record.status.is_working()) {
            let version = cp.versions.iter().map(|v| v.version).max().unwrap_or(0) + 1;
            out.push(json!({ "type": "agent_started", "checkpoint_number": cp.record.number, "agent": cp.record.agent.name(), "version": version }));
        }
    }
    for cp in &view.checkpoints {
        if cp.record.status == CheckpointStatus::AwaitingApproval {
            out.push(checkpoint_ready(cp.record.number, cp.record.agent));
        }
    }
    if view.run.status == RunStatus::Failed {
        let message = view.run.error.clone().unwrap_or_else(|| "Character development failed".into());
        out.push(json!({ "type": "error", "message": message }));
    }
    if view.run.status == RunStatus::Completed {
        out.push(json!({ "type": "character_complete", "character_id": view.run.id, "message": "All agents completed. Character profile ready." }));
    }
    out
}

fn checkpoint_ready(number: u8, agent: crate::identity::schema::Agent) -> Value {
    json!({
        "type": "checkpoint_ready",
        "checkpoint_number": number,
        "agent": agent.name(),
        "message": format!("{} analysis complete. Awaiting approval.", agent.name()),
    })
}

/// An engine event as the WebSocket messages it becomes.
fn seed_messages(event: &IdentityEvent) -> Vec<Value> {
    match event {
        IdentityEvent::WaveStarted { wave, agents, .. } => vec![json!({ "type": "wave_started", "wave": wave, "agents": agents })],
        IdentityEvent::CheckpointReady { checkpoint_number, agent, version, message, tokens, wall_ms, .. } => vec![
            json!({ "type": "checkpoint_ready", "checkpoint_number": checkpoint_number, "agent": agent.name(), "message": message }),
            json!({ "type": "checkpoint_version", "checkpoint_number": checkpoint_number, "version": version, "tokens": tokens, "wall_ms": wall_ms }),
        ],
        IdentityEvent::WaveComplete { wave, agents_completed, next_wave, .. } => {
            vec![json!({ "type": "wave_complete", "wave": wave, "agents_completed": agents_completed, "next_wave": next_wave })]
        }
        IdentityEvent::CharacterComplete { character_id, message, .. } => {
            vec![json!({ "type": "character_complete", "character_id": character_id, "message": message })]
        }
        IdentityEvent::Error { message, checkpoint, .. } => {
            let mut out = vec![json!({ "type": "error", "message": message })];
            if let Some(n) = checkpoint {
                out.push(json!({ "type": "checkpoint_failed", "checkpoint_number": n }));
            }
            out
        }
        IdentityEvent::AgentStarted { checkpoint, agent, version, .. } => {
            vec![json!({ "type": "agent_started", "checkpoint_number": checkpoint, "agent": agent.name(), "version": version })]
        }
        IdentityEvent::Token { checkpoint, text, .. } => vec![json!({ "type": "token", "checkpoint_number": checkpoint, "text": text })],
        IdentityEvent::CheckpointApproved { checkpoint_number, .. } => vec![json!({ "type": "checkpoint_approved", "checkpoint_number": checkpoint_number })],
        IdentityEvent::CheckpointRejected { checkpoint_number, feedback, .. } => {
            vec![json!({ "type": "checkpoint_regenerating", "checkpoint_number": checkpoint_number, "feedback": feedback })]
        }
        IdentityEvent::CheckpointStale { checkpoint_number, .. } => vec![json!({ "type": "checkpoint_stale", "checkpoint_number": checkpoint_number })],
        IdentityEvent::Cancelled { checkpoint, .. } => vec![json!({ "type": "checkpoint_cancelled", "checkpoint_number": checkpoint })],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod replay_tests {
    use super::*;

    #[test]
    fn an_event_the_replay_already_said_is_swallowed_once_and_only_just_after_the_join() {
        let t0 = std::time::Instant::now();
        let ms = std::time::Duration::from_millis;
        let started = json!({ "type": "agent_started", "checkpoint_number": 1, "agent": "personality", "version": 1 });
        let ready = json!({ "type": "checkpoint_ready", "checkpoint_number": 2 });
        let mut replayed = Replayed::new(&[started.clone(), ready.clone()], t0);
        // The event of a start the state already showed, arriving late: not said again.
        assert!(replayed.already_said(&started.to_string(), t0 + ms(300)));
        // A second, equal event is news (each replayed message swallows one).
        assert!(!replayed.already_said(&started.to_string(), t0 + ms(400)));
        // Past the grace, a checkpoint ready again (after a rejection) is said.
        assert!(!replayed.already_said(&ready.to_string(), t0 + Replayed::GRACE + ms(1)));
    }
}
