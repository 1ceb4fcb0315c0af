//! The rest of the engine over HTTP: scenes (list, state, play a round, cancel; live
//! events on `WS /ws/scene/{id}` named after the scene predecessor's socket events:
//! `agentStatus`, `stateUpdated`, `roundCompleted`), chat (send with the reply's tokens
//! on `WS /ws/chat/{character}`, history), memory search with its score breakdown, and
//! importing cards and lorebooks.

use super::{ApiError, AppState, ErrorBody, Path, Query, Upgrade, body, wait_for};
use crate::companion::{CompanionCommand, CompanionEvent};
use crate::engine::{Command, Event};
use crate::interop::{InteropCommand, InteropEvent};
use crate::memory::{MemoryCommand, MemoryEvent, SearchRequest};
use crate::scene::{SceneCommand, SceneEvent};
use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

/// A chat reply or a round can take minutes on a small machine; never forever.
const PLAY_LIMIT: Duration = Duration::from_secs(30 * 60);
/// Reading what is stored.
const QUICK_LIMIT: Duration = Duration::from_secs(60);

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/scenes", get(scenes))
        .route("/api/scene/{scene}", get(scene_state))
        .route("/api/scene/{scene}/lore", get(scene_lore))
        .route("/api/scene/{scene}/messages", get(scene_transcript))
        .route("/api/scene/{scene}/message/{number}/{action}", post(scene_message))
        .route("/api/scene/{scene}/cast/{action}", post(scene_cast))
        .route("/api/scene/{scene}/undo", post(scene_undo))
        .route("/api/scene/{scene}/round", post(round))
        .route("/api/scene/{scene}/cancel", post(cancel_round))
        .route("/ws/scene/{scene}", get(scene_socket))
        .route("/api/chat/{character}/send", post(chat_send))
        .route("/api/chat/{character}/history", get(chat_history))
        .route("/api/chat/{character}/cancel", post(chat_cancel))
        .route("/api/chat/{character}/{action}", post(chat_control))
        .route("/api/library/character/{character}/card", get(export_card))
        .route("/api/library/lorebook/{lorebook}", get(export_lorebook))
        .route("/ws/chat/{character}", get(chat_socket))
        .route("/api/memory/search", get(memory_search))
        .route("/api/memory/model", get(memory_models).post(memory_use_model))
        .route("/api/library/import", post(import))
}

pub(super) fn scene_id(state: &AppState, scene: &str) -> Result<String, ApiError> {
    state.store().with(|c| crate::scene::records::resolve_scene(c, scene)).map_err(|e| ApiError::not_found(format!("Scene not found: {e}")))
}

/// Every scene of the library.
#[utoipa::path(get, path = "/api/scenes", responses((status = 200, body = Vec<Object>, description = "the scenes: id, name, campaign, arc, rounds played, how many are present")))]
pub(super) async fn scenes(State(state): State<Arc<AppState>>) -> Result<axum::Json<Value>, ApiError> {
    let list = state.store().with(crate::scene::records::list_scenes).map_err(ApiError::internal)?;
    Ok(axum::Json(serde_json::to_value(list).map_err(ApiError::internal)?))
}

/// A scene's state: cast, who is present and as what, trackers, facts, time — and
/// `round_state`: `{running, last_failure}`, whether a round runs in it now (in this
/// server or another process on the library) and, when the last round this server
/// started failed or was cancelled, `{round, message, fault}` (`fault` as events give it,
/// or `cancelled`); a round that starts clears it. A client without a socket polls this.
#[utoipa::path(get, path = "/api/scene/{scene}", params(("scene" = String, Path)),
    responses((status = 200, body = Object, description = "the scene's state, with round_state: {running, last_failure: null or {round, message, fault}}"),
        (status = 404, body = ErrorBody)))]
pub(super) async fn scene_state(State(state): State<Arc<AppState>>, Path(scene): Path<String>) -> Result<axum::Json<Value>, ApiError> {
    let id = scene_id(&state, &scene)?;
    let view = state.store().with(|c| crate::scene::records::load_view(c, &id)).map_err(ApiError::internal)?;
    let mut value = serde_json::to_value(view).map_err(ApiError::internal)?;
    let (running, last_failure) = crate::scene::round::round_state(state.engine.context(), &id);
    if let Some(object) = value.as_object_mut() {
        object.insert("round_state".into(), serde_json::json!({ "running": running, "last_failure": last_failure }));
    }
    Ok(axum::Json(value))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LoreQuery {
    round: Option<u32>,
}

/// Which lore entries a round fired (why, and whose prompt each went into) and which it
/// held back; the last round without `round`.
#[utoipa::path(get, path = "/api/scene/{scene}/lore", params(("scene" = String, Path), ("round" = Option<u32>, Query)),
    responses((status = 200, body = Object, description = "the round's lore: {scene_id, round, fired: [{entry, given_to}], held_back: [{entry, call, reason}]}"),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn scene_lore(
    State(state): State<Arc<AppState>>,
    Path(scene): Path<String>,
    Query(query): Query<LoreQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let id = scene_id(&state, &scene)?;
    let reader = state.store().reader().map_err(ApiError::internal)?;
    let (scene_id, round, lore) = crate::scene::preview::round_lore(&reader, &id, query.round).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(axum::Json(serde_json::json!({ "scene_id": scene_id, "round": round, "fired": lore.fired, "held_back": lore.held_back })))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MessagesQuery {
    /// Only the messages after this number (what a client has not seen yet).
    #[serde(default)]
    after: u32,
}

/// One line of a scene's transcript.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct TranscriptMessage {
    /// The message's number in the scene (numbers are kept when one is deleted).
    number: u32,
    round: u32,
    /// `user`, `character` or `narrator`.
    kind: String,
    speaker: String,
    character_id: Option<String>,
    content: String,
}

/// A scene's transcript, oldest first: every message with its number (what
/// `…/message/{number}/edit|delete` take), round and speaker.
#[utoipa::path(get, path = "/api/scene/{scene}/messages", params(("scene" = String, Path), ("after" = Option<u32>, Query, description = "only messages numbered after this")),
    responses((status = 200, body = Vec<TranscriptMessage>), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn scene_transcript(
    State(state): State<Arc<AppState>>,
    Path(scene): Path<String>,
    Query(query): Query<MessagesQuery>,
) -> Result<axum::Json<Vec<TranscriptMessage>>, ApiError> {
    let id = scene_id(&state, &scene)?;
    // A reader connection: a long transcript does not hold the writer's lock.
    let reader = state.store().reader().map_err(ApiError::internal)?;
    let messages = crate::scene::records::recent_messages(&reader, &id, u32::MAX).map_err(ApiError::internal)?;
    Ok(axum::Json(
        messages
            .into_iter()
            .filter(|m| m.number > query.after)
            .map(|m| TranscriptMessage {
                number: m.number,
                round: m.round,
                kind: serde_json::to_value(m.kind).ok().and_then(|k| k.as_str().map(str::to_string)).unwrap_or_default(),
                speaker: m.speaker,
                character_id: m.character_id,
                content: m.content,
            })
            .collect(),
    ))
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CastBody {
    /// The character, by id or name.
    character: String,
}

/// A cast change: who joined or left (`action`: add or remove).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct CastAnswer {
    scene_id: String,
    character_id: String,
    name: String,
    action: String,
}

/// Add a character to a scene's cast (`add`: absent until the Director brings them in)
/// or take one out (`remove`). Refused (409) while a round runs on the scene.
#[utoipa::path(post, path = "/api/scene/{scene}/cast/{action}", request_body = CastBody,
    params(("scene" = String, Path), ("action" = String, Path, description = "add or remove")),
    responses((status = 200, body = CastAnswer), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(super) async fn scene_cast(
    State(state): State<Arc<AppState>>,
    Path((scene, action)): Path<(String, String)>,
    bytes: Bytes,
) -> Result<axum::Json<CastAnswer>, ApiError> {
    let add = match action.as_str() {
        "add" => true,
        "remove" => false,
        other => return Err(ApiError::not_found(format!("no cast action {other:?}: add or remove"))),
    };
    let request: CastBody = body(&bytes)?;
    let id = scene_id(&state, &scene)?;
    match state.ask(Command::Scene(SceneCommand::Cast { scene: id, character: request.character, add }), QUICK_LIMIT).await? {
        Event::Scene(SceneEvent::CastChanged { scene_id, character_id, name, .. }) => Ok(axum::Json(CastAnswer { scene_id, character_id, name, action })),
        other => Err(scene_refusal(other)),
    }
}

/// The round taken back.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct RoundUndone {
    scene_id: String,
    round: u32,
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SceneUndoBody {
    /// The scene's last round as the client shows it: the undo is refused (409) when the
    /// scene has moved on since (another client played or took back a round), so a view
    /// gone stale never takes back a round its user has not seen. Leave it out to undo
    /// whatever round is last.
    #[serde(default)]
    expect_round: Option<u32>,
}

/// Take back the scene's last round exactly (messages, states, trackers, facts, time,
/// lore timers, memories); `{"expect_round": n}` takes it back only if it is still round `n`.
#[utoipa::path(post, path = "/api/scene/{scene}/undo", request_body = SceneUndoBody, params(("scene" = String, Path)),
    responses((status = 200, body = RoundUndone), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "a round is running, or the last round is not `expect_round`")))]
pub(super) async fn scene_undo(State(state): State<Arc<AppState>>, Path(scene): Path<String>, bytes: Bytes) -> Result<axum::Json<RoundUndone>, ApiError> {
    let request: SceneUndoBody = if bytes.iter().all(u8::is_ascii_whitespace) { SceneUndoBody::default() } else { body(&bytes)? };
    let id = scene_id(&state, &scene)?;
    match state.ask(Command::Scene(SceneCommand::Undo { scene: id, expect_round: request.expect_round }), QUICK_LIMIT).await? {
        Event::Scene(SceneEvent::RoundUndone { scene_id, round }) => Ok(axum::Json(RoundUndone { scene_id, round })),
        other => Err(scene_refusal(other)),
    }
}

/// A route that takes no body: nothing, or `{}`; a field sent to it is refused by name
/// (`{"rounds": 3}` to undo would otherwise undo one round and say nothing).
pub(super) fn no_fields(bytes: &Bytes, action: &str) -> Result<(), ApiError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct NoFields {}
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    body::<NoFields>(bytes).map(|_| ()).map_err(|e| ApiError::bad_request(format!("{}; {action} takes no fields", e.detail)))
}

/// A scene command answered with something other than what it asked for: its error,
/// with the status its fault says (see [`ApiError::of_fault`]).
pub(super) fn scene_refusal(answer: Event) -> ApiError {
    match answer {
        Event::Scene(SceneEvent::Error { message, fault, .. }) => ApiError::of_fault(fault, message),
        other => ApiError::internal(format!("unexpected answer: {}", serde_json::to_value(&other).map(|v| v["event"].to_string()).unwrap_or_default())),
    }
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RoundBody {
    /// The game master's message; none to let the scene continue.
    #[serde(default)]
    input: Option<String>,
    /// Characters who act this round whatever the Director decides.
    #[serde(default)]
    force: Vec<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct RoundStarted {
    scene_id: String,
    round: u32,
    status: String,
}

/// Start a round; it plays in the background and reports on `WS /ws/scene/{scene}`.
#[utoipa::path(post, path = "/api/scene/{scene}/round", request_body = RoundBody, params(("scene" = String, Path)),
    responses((status = 202, body = RoundStarted), (status = 400, body = ErrorBody, description = "a bad body, or a `force` name not in the cast"),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody, description = "a round is already running in the scene"),
        (status = 413, body = ErrorBody, description = "the input alone is over half a model's context")))]
pub(super) async fn round(State(state): State<Arc<AppState>>, Path(scene): Path<String>, bytes: Bytes) -> Result<Response, ApiError> {
    let request: RoundBody = if bytes.is_empty() { RoundBody::default() } else { body(&bytes)? };
    let id = scene_id(&state, &scene)?;
    let command = SceneCommand::Round { scene: id.clone(), input: request.input, force: request.force, review: false };
    match state.ask(Command::Scene(command), QUICK_LIMIT).await? {
        Event::Scene(SceneEvent::RoundStarted { round, .. }) => {
            Ok((StatusCode::ACCEPTED, axum::Json(RoundStarted { scene_id: id, round, status: "started".into() })).into_response())
        }
        Event::Scene(SceneEvent::RoundCancelled { .. }) => Err(ApiError::cancelled("the round was cancelled before it started")),
        other => Err(scene_refusal(other)),
    }
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct MessageBody {
    /// The message's new text (`edit`).
    #[serde(default)]
    text: Option<String>,
}

/// The message changed (`action`: edit or delete).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct MessageAnswer {
    scene_id: String,
    number: u32,
    action: String,
}

/// Change a transcript message's text (`edit`, `{"text": "…"}`) or take it out (`delete`);
/// its memory follows either way.
#[utoipa::path(post, path = "/api/scene/{scene}/message/{number}/{action}", request_body = MessageBody,
    params(("scene" = String, Path), ("number" = u32, Path), ("action" = String, Path, description = "edit or delete")),
    responses((status = 200, body = MessageAnswer), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(super) async fn scene_message(
    State(state): State<Arc<AppState>>,
    Path((scene, number, action)): Path<(String, u32, String)>,
    bytes: Bytes,
) -> Result<axum::Json<MessageAnswer>, ApiError> {
    // The request is read before the scene is looked up: a bad body is the client's
    // mistake whichever scene it names.
    let text = match action.as_str() {
        "edit" => {
            let request: MessageBody = body(&bytes)?;
            Some(request.text.filter(|t| !t.trim().is_empty()).ok_or_else(|| ApiError::bad_request("invalid body: `text` is missing or empty"))?)
        }
        "delete" => {
            no_fields(&bytes, "delete")?;
            None
        }
        other => return Err(ApiError::not_found(format!("no message action {other:?}: edit or delete"))),
    };
    let id = scene_id(&state, &scene)?;
    let command = match text {
        Some(text) => SceneCommand::EditMessage { scene: id.clone(), number, text },
        None => SceneCommand::DeleteMessage { scene: id.clone(), number },
    };
    match state.ask(Command::Scene(command), QUICK_LIMIT).await? {
        Event::Scene(SceneEvent::MessageEdited { .. } | SceneEvent::MessageDeleted { .. }) => {
            Ok(axum::Json(MessageAnswer { scene_id: id, number, action }))
        }
        other => Err(scene_refusal(other)),
    }
}

/// What a cancel found.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct CancelAnswer {
    scene_id: String,
    /// `cancelling`, or `idle` when no round was running (here or in another process).
    status: String,
}

/// What `POST /api/chat/{character}/cancel` answers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct ChatCancelAnswer {
    character_id: String,
    /// `cancelling`, or `idle` when no reply was being written (here or in another process).
    status: String,
}

/// Stop the reply being written for a character (here or in another process); nothing of
/// it is stored. The turn's own `cancelled` follows on the chat socket.
#[utoipa::path(post, path = "/api/chat/{character}/cancel", params(("character" = String, Path)),
    responses((status = 200, body = ChatCancelAnswer), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn chat_cancel(
    State(state): State<Arc<AppState>>,
    Path(character): Path<String>,
    bytes: Bytes,
) -> Result<axum::Json<ChatCancelAnswer>, ApiError> {
    no_fields(&bytes, "cancel")?;
    let id = character_id(&state, &character)?.id;
    match state.ask(Command::Companion(CompanionCommand::Cancel { character: id.clone() }), QUICK_LIMIT).await? {
        Event::Companion(CompanionEvent::CancelRequested { running, .. }) => {
            Ok(axum::Json(ChatCancelAnswer { character_id: id, status: if running { "cancelling" } else { "idle" }.into() }))
        }
        other => Err(chat_refusal(other)),
    }
}

/// Stop the round running in a scene; nothing of it is kept.
#[utoipa::path(post, path = "/api/scene/{scene}/cancel", params(("scene" = String, Path)),
    responses((status = 200, body = CancelAnswer), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn cancel_round(State(state): State<Arc<AppState>>, Path(scene): Path<String>, bytes: Bytes) -> Result<axum::Json<CancelAnswer>, ApiError> {
    no_fields(&bytes, "cancel")?;
    let id = scene_id(&state, &scene)?;
    let running = match state.ask(Command::Scene(SceneCommand::Cancel { scene: id.clone() }), QUICK_LIMIT).await? {
        Event::Scene(SceneEvent::CancelRequested { running, .. }) => running,
        other => return Err(scene_refusal(other)),
    };
    // `idle`: no round was running here or in another process on the library.
    Ok(axum::Json(CancelAnswer { scene_id: id, status: if running { "cancelling" } else { "idle" }.into() }))
}

/// A scene's live events, as the scene predecessor's socket named them.
#[utoipa::path(get, path = "/ws/scene/{scene}", params(("scene" = String, Path)),
    responses((status = 101, description = "WebSocket: roundStarted, agentStatus, token, waiting (a call of the round waits for the embedded model, busy with `holder`; `holder` null: the wait is over), redrawn, stateUpdated, roundCompleted, roundCancelled, redoFailed (a redo's round failed: the round it replaced is back), error")))]
pub(super) async fn scene_socket(State(state): State<Arc<AppState>>, Path(scene): Path<String>, Upgrade(upgrade): Upgrade) -> Response {
    match scene_id(&state, &scene) {
        Ok(id) => upgrade
            .on_upgrade(move |socket| {
                let watched = super::watch::Scene(id.clone());
                relay(state, socket, move |event| scene_messages(&id, event), watched)
            })
            .into_response(),
        Err(e) => e.into_response(),
    }
}

fn scene_messages(id: &str, event: &Event) -> Vec<Value> {
    let Event::Scene(event) = event else { return Vec::new() };
    let mine = |scene_id: &str| scene_id == id;
    match event {
        SceneEvent::RoundStarted { scene_id, round, input } if mine(scene_id) => {
            vec![json!({ "type": "roundStarted", "sceneId": scene_id, "round": round, "input": input })]
        }
        SceneEvent::DirectorDecided { scene_id, round, pass, decision } if mine(scene_id) => vec![json!({
            "type": "agentStatus", "sceneId": scene_id, "round": round, "agent": "director", "pass": pass, "status": "complete", "decision": decision,
        })],
        SceneEvent::CharacterStarted { scene_id, round, character_id, name } if mine(scene_id) => vec![json!({
            "type": "agentStatus", "sceneId": scene_id, "round": round, "agent": "character", "characterId": character_id, "name": name, "status": "start",
        })],
        SceneEvent::Token { scene_id, character_id, text, .. } if mine(scene_id) => {
            vec![json!({ "type": "token", "sceneId": scene_id, "characterId": character_id, "text": text })]
        }
        SceneEvent::Waiting { scene_id, round, agent, holder } if mine(scene_id) => {
            vec![json!({ "type": "waiting", "sceneId": scene_id, "round": round, "agent": agent, "holder": holder })]
        }
        SceneEvent::Redrawn { scene_id, round, character_id, name, reason } if mine(scene_id) => {
            vec![json!({ "type": "redrawn", "sceneId": scene_id, "round": round, "characterId": character_id, "name": name, "reason": reason })]
        }
        SceneEvent::CharacterFinished { scene_id, round, character_id, name, content, delta } if mine(scene_id) => vec![
            json!({ "type": "agentStatus", "sceneId": scene_id, "round": round, "agent": "character", "characterId": character_id, "name": name, "status": "complete", "content": content }),
            json!({ "type": "stateUpdated", "sceneId": scene_id, "characterStates": { character_id.clone(): delta } }),
        ],
        SceneEvent::NarratorStarted { scene_id, round } if mine(scene_id) => {
            vec![json!({ "type": "agentStatus", "sceneId": scene_id, "round": round, "agent": "narrator", "status": "start" })]
        }
        SceneEvent::NarratorFinished { scene_id, round, content } if mine(scene_id) => {
            vec![json!({ "type": "agentStatus", "sceneId": scene_id, "round": round, "agent": "narrator", "status": "complete", "content": content })]
        }
        SceneEvent::WorldDecided { scene_id, round, decision } if mine(scene_id) => vec![
            json!({ "type": "agentStatus", "sceneId": scene_id, "round": round, "agent": "world", "status": "complete" }),
            json!({ "type": "stateUpdated", "sceneId": scene_id, "trackers": decision.trackers, "elapsedMinutes": decision.elapsed_minutes }),
        ],
        SceneEvent::RoundCompleted { scene_id, round, messages, active, conflicts, tokens, notices } if mine(scene_id) => vec![json!({
            "type": "roundCompleted", "sceneId": scene_id, "round": round, "messages": messages, "activeCharacters": active, "conflicts": conflicts, "tokens": tokens,
            "notices": notices,
        })],
        SceneEvent::RoundCancelled { scene_id } if mine(scene_id) => vec![json!({ "type": "roundCancelled", "sceneId": scene_id })],
        SceneEvent::RedoFailed { scene_id, round, message } if mine(scene_id) => {
            vec![json!({ "type": "redoFailed", "sceneId": scene_id, "round": round, "message": message })]
        }
        SceneEvent::Error { scene_id: Some(scene_id), message, fault } if mine(scene_id) => {
            vec![json!({ "type": "error", "sceneId": scene_id, "message": message, "fault": fault })]
        }
        _ => Vec::new(),
    }
}

/// Forward what `translate` makes of each engine event until the client goes, and what
/// another process changed in the `watched` scene or chat (see `serve::watch`).
async fn relay<W: super::watch::Watched>(
    state: Arc<AppState>,
    mut socket: WebSocket,
    translate: impl Fn(&Event) -> Vec<Value> + Send + 'static,
    watched: W,
) {
    let mut events = state.events.subscribe();
    let mut watch = super::watch::Watch::new(watched, &state);
    let mut tick = tokio::time::interval(super::watch::EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let messages = tokio::select! {
            _ = tick.tick() => watch.tick(&state),
            event = events.recv() => match event {
                Ok(event) => {
                    let messages = translate(&event);
                    // Ours: what it changed is known. A token changes nothing stored.
                    if messages.iter().any(|m| m["type"] != "token") {
                        watch.heard(&state);
                    }
                    messages
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => vec![json!({ "type": "lagged", "missed": missed })],
                Err(broadcast::error::RecvError::Closed) => return,
            },
            incoming = socket.recv() => match incoming {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => Vec::new(),
            },
        };
        for message in messages {
            if socket.send(Message::Text(message.to_string().into())).await.is_err() {
                return;
            }
        }
    }
}

pub(super) fn character_id(state: &AppState, character: &str) -> Result<crate::character::CharacterRecord, ApiError> {
    state
        .store()
        .with(|c| crate::character::resolve(c, character))
        .map_err(|e| ApiError::not_found(format!("Character not found: {e}")))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SendBody {
    text: String,
}

/// Send a chat message and wait for the stored exchange; the reply's tokens stream on
/// `WS /ws/chat/{character}` meanwhile.
#[utoipa::path(post, path = "/api/chat/{character}/send", request_body = SendBody, params(("character" = String, Path)),
    responses((status = 200, body = Object, description = "the stored exchange: id, user_text, reply, swipes, the packet sent, …"),
        (status = 400, body = ErrorBody, description = "a bad body or an empty text"), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "the character is answering already, or the reply was cancelled"),
        (status = 413, body = ErrorBody, description = "the message alone fills the model's context"),
        (status = 502, body = ErrorBody, description = "the provider failed or gave no reply worth keeping; nothing was stored")))]
pub(super) async fn chat_send(State(state): State<Arc<AppState>>, Path(character): Path<String>, bytes: Bytes) -> Result<axum::Json<Value>, ApiError> {
    let request: SendBody = body(&bytes)?;
    if request.text.trim().is_empty() {
        return Err(ApiError::bad_request("invalid body: `text` is empty"));
    }
    let info = character_id(&state, &character)?;
    let command = CompanionCommand::Send { character: info.id, text: request.text, now: None };
    match state.ask(Command::Companion(command), PLAY_LIMIT).await? {
        Event::Companion(CompanionEvent::TurnCommitted { turn }) => Ok(axum::Json(serde_json::to_value(turn).map_err(ApiError::internal)?)),
        other => Err(chat_refusal(other)),
    }
}

/// A chat command answered with something other than what it asked for: the status
/// says whose fault the failure was — the request's (400, 404, 409 busy or stale, 413 a message
/// too long), the provider's (502: it failed or gave no reply worth keeping) or the
/// server's (500) — whether it was a send, a redraw or an edit.
pub(super) fn chat_refusal(answer: Event) -> ApiError {
    match answer {
        Event::Companion(CompanionEvent::Failed { message, fault, .. }) => ApiError::of_fault(fault, message),
        Event::Companion(CompanionEvent::Cancelled { .. }) => ApiError::cancelled("the reply was cancelled; nothing was saved"),
        other => ApiError::internal(format!("unexpected answer: {}", serde_json::to_value(&other).map(|v| v["event"].to_string()).unwrap_or_default())),
    }
}

/// What the message-control endpoints take: `swipe` `{"index": n}`, `edit`
/// `{"message": "…", "text": "…"}`, `delete` `{"message": "…", "and_after": bool}`, where
/// `message` is a message id from the history (`messages[].id`, or an exchange's
/// `user_message_id` or `reply_message_id`: `<exchange id>-u` or `-r`; `greeting` for
/// `edit`); `regenerate` and `undo` may take `{"expect": "<last exchange id>"}`,
/// `continue` takes nothing.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ControlBody {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    and_after: Option<bool>,
    /// `regenerate` and `undo`: the id of the exchange the client shows as the last; a
    /// chat that has moved on since (another client, the CLI) is refused (409, saying so).
    #[serde(default)]
    expect: Option<String>,
}

impl ControlBody {
    /// Refuse a field the action does not take (an `index` sent to `undo` would be
    /// ignored, and the client would believe it had said which exchange).
    fn only_for(&self, action: &str) -> Result<(), ApiError> {
        let takes: &[&str] = match action {
            "swipe" => &["index"],
            "edit" => &["message", "text"],
            "delete" => &["message", "and_after"],
            "regenerate" | "undo" => &["expect"],
            _ => &[],
        };
        let sent = [
            ("index", self.index.is_some()),
            ("message", self.message.is_some()),
            ("text", self.text.is_some()),
            ("and_after", self.and_after.is_some()),
            ("expect", self.expect.is_some()),
        ];
        match sent.iter().find(|(name, present)| *present && !takes.contains(name)) {
            Some((name, _)) if takes.is_empty() => Err(ApiError::bad_request(format!("invalid body: `{name}` is not taken by {action}, which takes no fields"))),
            Some((name, _)) => Err(ApiError::bad_request(format!(
                "invalid body: `{name}` is not taken by {action}, which takes {}",
                takes.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(" and ")
            ))),
            None => Ok(()),
        }
    }
}

/// Message control on a chat: `regenerate` the last reply (every draw kept as a swipe),
/// `continue` it, `swipe` to a draw, `edit` or `delete` a message, `undo` the last
/// exchange. Answers with what changed.
#[utoipa::path(post, path = "/api/chat/{character}/{action}", request_body = ControlBody,
    params(("character" = String, Path), ("action" = String, Path, description = "regenerate, continue, swipe, edit, delete or undo")),
    responses((status = 200, body = Object, description = "what changed: the `changed` or `undone` event, with the turn as it now stands"),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 502, body = ErrorBody, description = "regenerate or continue: the provider failed; nothing was changed")))]
pub(super) async fn chat_control(
    State(state): State<Arc<AppState>>,
    Path((character, action)): Path<(String, String)>,
    bytes: Bytes,
) -> Result<axum::Json<Value>, ApiError> {
    let request: ControlBody = if bytes.is_empty() { ControlBody::default() } else { body(&bytes)? };
    request.only_for(&action)?;
    let info = character_id(&state, &character)?;
    let c = info.id.clone();
    let need = |field: Option<String>, name: &str| field.ok_or_else(|| ApiError::bad_request(format!("invalid body: `{name}` is missing")));
    let command = match action.as_str() {
        "regenerate" => CompanionCommand::Regenerate { character: c.clone(), expect: request.expect.clone() },
        "continue" => CompanionCommand::Continue { character: c.clone() },
        "undo" => CompanionCommand::Undo { character: c.clone(), expect: request.expect.clone() },
        "swipe" => CompanionCommand::Swipe {
            character: c.clone(),
            index: request.index.ok_or_else(|| ApiError::bad_request("invalid body: `index` is missing"))?,
        },
        "edit" => CompanionCommand::Edit { character: c.clone(), message: need(request.message, "message")?, text: need(request.text, "text")? },
        "delete" => CompanionCommand::Delete { character: c.clone(), message: need(request.message, "message")?, and_after: request.and_after.unwrap_or(false) },
        other => return Err(ApiError::not_found(format!("no chat action {other:?}: regenerate, continue, swipe, edit, delete or undo"))),
    };
    match state.ask(Command::Companion(command), PLAY_LIMIT).await? {
        Event::Companion(e @ (CompanionEvent::Changed { .. } | CompanionEvent::Undone { .. })) => Ok(axum::Json(serde_json::to_value(e).map_err(ApiError::internal)?)),
        other => Err(chat_refusal(other)),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FormatQuery {
    #[serde(default)]
    format: Option<String>,
}

/// Export through the engine into a private folder and answer with the file's JSON.
async fn export(state: &AppState, make: impl FnOnce(std::path::PathBuf) -> InteropCommand) -> Result<axum::Json<Value>, ApiError> {
    let dir = tempfile_dir()?;
    let out = dir.join("export.json");
    let mut events = state.events.subscribe();
    state.send(Command::Interop(make(out.clone())))?;
    let outcome = wait_for(&mut events, QUICK_LIMIT, |event| match event {
        Event::Interop(InteropEvent::Exported { path, .. }) if *path == out => Some(Ok(())),
        Event::Core(crate::engine::CoreEvent::Error { context, message }) if context.starts_with("export") => Some(Err(message.clone())),
        _ => None,
    })
    .await;
    let result = match outcome {
        Some(Ok(())) => std::fs::read(&out)
            .map_err(ApiError::internal)
            .and_then(|bytes| serde_json::from_slice(&bytes).map_err(ApiError::internal))
            .map(axum::Json),
        Some(Err(message)) => Err(ApiError::not_found(message)),
        None => Err(ApiError::internal("the export did not finish in time")),
    };
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// A character as a card: `?format=v2` (default) or `v3`.
#[utoipa::path(get, path = "/api/library/character/{character}/card", params(("character" = String, Path), ("format" = Option<String>, Query)),
    responses((status = 200, body = Object, description = "the card's JSON"), (status = 404, body = ErrorBody)))]
pub(super) async fn export_card(
    State(state): State<Arc<AppState>>,
    Path(character): Path<String>,
    Query(query): Query<FormatQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    use crate::interop::library::CardFormat;
    let format = match query.format.as_deref().unwrap_or("v2") {
        "v2" | "card-v2" => CardFormat::CardV2,
        "v3" | "card-v3" => CardFormat::CardV3,
        other => return Err(ApiError::bad_request(format!("format {other:?}: v2 or v3"))),
    };
    let character = character_id(&state, &character)?.id;
    export(&state, |out| InteropCommand::ExportCharacter { character, format, png: false, out }).await
}

/// A lorebook: `?format=world-info` (default) or `lorebook-v3`.
#[utoipa::path(get, path = "/api/library/lorebook/{lorebook}", params(("lorebook" = String, Path), ("format" = Option<String>, Query)),
    responses((status = 200, body = Object, description = "the lorebook's JSON"), (status = 404, body = ErrorBody)))]
pub(super) async fn export_lorebook(
    State(state): State<Arc<AppState>>,
    Path(lorebook): Path<String>,
    Query(query): Query<FormatQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    use crate::interop::library::LorebookFormat;
    let format = match query.format.as_deref().unwrap_or("world-info") {
        "world-info" => LorebookFormat::WorldInfo,
        "lorebook-v3" | "lorebook_v3" => LorebookFormat::LorebookV3,
        other => return Err(ApiError::bad_request(format!("format {other:?}: world-info or lorebook-v3"))),
    };
    export(&state, |out| InteropCommand::ExportLorebook { lorebook, format, out }).await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HistoryQuery {
    #[serde(default = "hundred")]
    limit: u32,
    /// Include each exchange's prompt packet (tens of KB each: 100 exchanges were 5 MB).
    #[serde(default)]
    packets: bool,
}

fn hundred() -> u32 {
    100
}

/// A chat's exchanges, oldest first, with the greeting and who the user plays; its
/// messages, each with the id `edit` and `delete` take (as `chat history --json` lists
/// them), and each exchange's two message ids beside its own.
#[utoipa::path(get, path = "/api/chat/{character}/history", params(("character" = String, Path), ("limit" = Option<u32>, Query),
    ("packets" = Option<bool>, Query, description = "include each exchange's prompt `packet` (left out by default: tens of KB per exchange)")),
    responses((status = 200, body = Object, description = "the chat: `turns` (each exchange, with `user_message_id` and `reply_message_id`: the ids \
`edit` and `delete` take; an exchange's own `id` names both messages), `messages` (every message in order — the greeting while the chat reaches \
back to its start, then each exchange's user message and reply — with its `id`, `role`, the speaker's `name`, `text`, and a reply's `swipes` and `swipe`), the \
greeting, who the user plays, and the variables (`variables`, `global_variables`) when it has any. A turn's prompt `packet` only with \
`packets=true`"), (status = 404, body = ErrorBody)))]
pub(super) async fn chat_history(
    State(state): State<Arc<AppState>>,
    Path(character): Path<String>,
    Query(query): Query<HistoryQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let info = character_id(&state, &character)?;
    match state.ask(Command::Companion(CompanionCommand::History { character: info.id, limit: query.limit.min(10_000) }), QUICK_LIMIT).await? {
        Event::Companion(history @ CompanionEvent::History { .. }) => {
            let mut value = with_message_ids(&history)?;
            if !query.packets {
                // Each packet is the whole prompt of its exchange (~70 KB in a long chat):
                // a client showing the chat needs none of them.
                for turn in value["turns"].as_array_mut().into_iter().flatten() {
                    if let Some(turn) = turn.as_object_mut() {
                        turn.remove("packet");
                    }
                }
            }
            Ok(axum::Json(value))
        }
        other => Err(chat_refusal(other)),
    }
}

/// The history as JSON, with the ids a message is edited or deleted by: `messages` (what
/// `chat history --json` prints) and each turn's `user_message_id` and `reply_message_id`.
/// A turn's own `id` names an exchange, which `edit` cannot take (which of its two
/// messages?); clients used to have to build the message ids themselves.
fn with_message_ids(history: &CompanionEvent) -> Result<Value, ApiError> {
    let mut value = serde_json::to_value(history).map_err(ApiError::internal)?;
    if let CompanionEvent::History { turns, greetings, greeting_swipe, name, user, .. } = history {
        let messages = crate::companion::turn::control::messages(turns, Some((greetings, *greeting_swipe)));
        // Each message with its speaker's name, as a client shows it: the character's, or
        // the user's as that message was sent (an imported chat's messages carry their own).
        let speakers: Vec<&str> = messages
            .iter()
            .map(|m| match m.role {
                _ if m.speaker.is_some() => m.speaker.as_deref().unwrap_or_default(),
                "user" if m.from_file => turns.iter().find(|t| m.id.starts_with(&t.id)).map_or(user.name.as_str(), |t| t.user_or(&user.name)),
                "user" => turns.iter().find(|t| crate::companion::turn::control::user_message_id(&t.id) == m.id).map_or(user.name.as_str(), |t| t.user_or(&user.name)),
                _ => name.as_str(),
            })
            .collect();
        value["messages"] = serde_json::to_value(&messages).map_err(ApiError::internal)?;
        if let Some(listed) = value["messages"].as_array_mut() {
            for (json, speaker) in listed.iter_mut().zip(speakers) {
                json["name"] = Value::String(speaker.to_string());
            }
        }
        if let Some(listed) = value["turns"].as_array_mut() {
            for (json, turn) in listed.iter_mut().zip(turns) {
                json["user_message_id"] = Value::String(crate::companion::turn::control::user_message_id(&turn.id));
                json["reply_message_id"] = Value::String(crate::companion::turn::control::reply_message_id(&turn.id));
            }
        }
    }
    Ok(value)
}

/// A chat's live events: each attempt's packet, the reply's tokens, discarded draws, the
/// stored exchange.
#[utoipa::path(get, path = "/ws/chat/{character}", params(("character" = String, Path)),
    responses((status = 101, description = "WebSocket: turn_started, token, discarded, turn_committed, failed; changed (a regenerate, continue, swipe, edit or delete: its action and the turn as it now stands), undone; chats (the saved chats changed — a new chat, branch, open, rename, delete or an import that put the chat aside: `saved`, each with `id`, `title`, `saved_at`, `turns`); imported (a chat file read in as the chat played: `imported` with `exchanges`, `saved`, `notes`)")))]
pub(super) async fn chat_socket(State(state): State<Arc<AppState>>, Path(character): Path<String>, Upgrade(upgrade): Upgrade) -> Response {
    let info = match character_id(&state, &character) {
        Ok(info) => info,
        Err(e) => return e.into_response(),
    };
    upgrade
        .on_upgrade(move |socket| {
            let watched = super::watch::Chat(info.id.clone());
            let translate = move |event: &Event| match event {
                Event::Companion(e) if companion_character(e) == Some(info.id.as_str()) => {
                    let mut value = serde_json::to_value(e).unwrap_or_default();
                    if let Some(kind) = value.as_object_mut().and_then(|o| o.remove("event")) {
                        value["type"] = kind;
                    }
                    vec![value]
                }
                _ => Vec::new(),
            };
            relay(state, socket, translate, watched)
        })
        .into_response()
}

fn companion_character(event: &CompanionEvent) -> Option<&str> {
    match event {
        CompanionEvent::TurnStarted { character_id, .. }
        | CompanionEvent::Token { character_id, .. }
        | CompanionEvent::Discarded { character_id, .. }
        | CompanionEvent::Waiting { character_id, .. }
        | CompanionEvent::Cancelled { character_id }
        | CompanionEvent::Changed { character_id, .. }
        | CompanionEvent::Undone { character_id, .. }
        | CompanionEvent::Chats { character_id, .. }
        | CompanionEvent::Imported { character_id, .. } => Some(character_id),
        CompanionEvent::TurnCommitted { turn } => Some(&turn.character_id),
        CompanionEvent::Failed { character_id, .. } => character_id.as_deref(),
        _ => None,
    }
}

/// The filters `lorekeeper memory search` takes, by the same names.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SearchQuery {
    q: String,
    #[serde(default = "ten")]
    k: usize,
    /// hybrid (default), keyword or vector.
    #[serde(default)]
    mode: Option<String>,
    /// world, campaign[:ID] or character[:NAME or ID].
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    speaker: Option<String>,
    /// Only what this character witnessed or was told.
    #[serde(default)]
    witness: Option<String>,
    #[serde(default)]
    session: Option<String>,
    /// Earliest time (RFC 3339 or YYYY-MM-DD).
    #[serde(default)]
    from: Option<String>,
    /// Latest time (RFC 3339 or YYYY-MM-DD, inclusive).
    #[serde(default)]
    to: Option<String>,
}

impl SearchQuery {
    /// The request the CLI's `memory search` would make of the same words.
    fn request(self) -> Result<SearchRequest, ApiError> {
        use crate::memory::retrieval::{SearchFilter, SearchMode};
        let mode = match self.mode.as_deref() {
            None => SearchMode::Hybrid,
            Some(text) => SearchMode::parse(text)
                .ok_or_else(|| ApiError::bad_request(format!("invalid query: `mode` {text:?}: hybrid, keyword or vector")))?,
        };
        let scope = match self.scope.as_deref() {
            None => None,
            Some(text) => Some(
                crate::memory::Scope::parse(text)
                    .ok_or_else(|| ApiError::bad_request(format!("invalid query: `scope` {text:?}: world, campaign[:ID] or character[:NAME or ID]")))?,
            ),
        };
        let filter = SearchFilter {
            scope,
            kinds: Vec::new(),
            speaker: self.speaker,
            witness: self.witness,
            witnessed_only: false,
            session: self.session,
            time_from: self.from,
            time_to: self.to,
        };
        Ok(SearchRequest { query: self.q, k: self.k.clamp(1, 200), mode, filter })
    }
}

fn ten() -> usize {
    10
}

/// Memory search, with the filters of `lorekeeper memory search`: every hit with its
/// keyword, vector and fused scores.
#[utoipa::path(get, path = "/api/memory/search",
    params(("q" = String, Query), ("k" = Option<usize>, Query), ("mode" = Option<String>, Query, description = "hybrid (default), keyword or vector"),
        ("scope" = Option<String>, Query, description = "world, campaign[:ID] or character[:NAME or ID]"), ("speaker" = Option<String>, Query),
        ("witness" = Option<String>, Query, description = "only what this character witnessed or was told"), ("session" = Option<String>, Query),
        ("from" = Option<String>, Query, description = "earliest time, RFC 3339 or YYYY-MM-DD"),
        ("to" = Option<String>, Query, description = "latest time, RFC 3339 or YYYY-MM-DD, inclusive")),
    responses((status = 200, body = Object, description = "hits, best first"), (status = 400, body = ErrorBody)))]
pub(super) async fn memory_search(State(state): State<Arc<AppState>>, Query(query): Query<SearchQuery>) -> Result<axum::Json<Value>, ApiError> {
    let command = MemoryCommand::Search { request: query.request()? };
    match state.ask(Command::Memory(command), QUICK_LIMIT).await? {
        Event::Memory(MemoryEvent::SearchResults { query, hits, elapsed_ms, mode }) => {
            Ok(axum::Json(json!({ "query": query, "mode": mode, "elapsed_ms": elapsed_ms, "hits": hits })))
        }
        other => Err(memory_refusal(other, StatusCode::BAD_REQUEST)),
    }
}

/// A memory command answered with its error: 404 for what is not there, else `status`.
pub(super) fn memory_refusal(answer: Event, status: StatusCode) -> ApiError {
    match answer {
        Event::Core(crate::engine::CoreEvent::Error { message, .. }) if message.contains("not found") => ApiError::not_found(message),
        Event::Core(crate::engine::CoreEvent::Error { message, .. }) => ApiError::new(status, message),
        other => ApiError::internal(format!("unexpected answer: {}", serde_json::to_value(&other).map(|v| v["event"].to_string()).unwrap_or_default())),
    }
}

/// The embedding models there are, and the one in use.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct EmbeddingModels {
    /// As `<folder>/<file>`.
    in_use: String,
    /// Each with its name, dimension and files.
    #[schema(value_type = Vec<Object>)]
    models: Value,
}

/// The embedding models a library can use, and the one in use (as `<folder>/<file>`).
#[utoipa::path(get, path = "/api/memory/model", responses((status = 200, body = EmbeddingModels)))]
pub(super) async fn memory_models(State(state): State<Arc<AppState>>) -> Result<axum::Json<EmbeddingModels>, ApiError> {
    let in_use = match state.ask(Command::Memory(MemoryCommand::Stats), QUICK_LIMIT).await? {
        Event::Memory(MemoryEvent::Stats { stats }) => stats.model,
        other => return Err(memory_refusal(other, StatusCode::INTERNAL_SERVER_ERROR)),
    };
    Ok(axum::Json(EmbeddingModels { in_use, models: serde_json::to_value(crate::memory::MODELS).map_err(ApiError::internal)? }))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ModelBody {
    /// A model's name, e.g. `all-mpnet-base-v2`.
    name: String,
}

/// The model now in use and how many memories it embedded.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct ModelSwitched {
    model: String,
    embedded: usize,
}

/// Switch the library to another embedding model (saved in the config) and embed every
/// memory with it; answers when the memories are embedded.
#[utoipa::path(post, path = "/api/memory/model", request_body = ModelBody,
    responses((status = 200, body = ModelSwitched), (status = 400, body = ErrorBody)))]
pub(super) async fn memory_use_model(State(state): State<Arc<AppState>>, bytes: Bytes) -> Result<axum::Json<ModelSwitched>, ApiError> {
    let request: ModelBody = body(&bytes)?;
    let name = crate::memory::find_model(&request.name).map(|m| m.name.to_string()).unwrap_or_else(|| request.name.clone());
    match state.ask(Command::Memory(MemoryCommand::UseModel { name: request.name }), PLAY_LIMIT).await? {
        Event::Memory(MemoryEvent::Reindexed { embedded }) => Ok(axum::Json(ModelSwitched { model: name, embedded })),
        other => Err(memory_refusal(other, StatusCode::BAD_REQUEST)),
    }
}

/// A file's bytes, as they are.
#[derive(utoipa::ToSchema)]
#[schema(value_type = String, format = Binary)]
pub(super) struct Upload(#[allow(dead_code)] Vec<u8>);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ImportQuery {
    /// The file's name (its kind is read from its content; the name names what it makes).
    #[serde(default)]
    name: Option<String>,
}

/// Import a character card (PNG or JSON) or a lorebook (World Info, lorebook_v3, a
/// character book) sent as the request body; what it created, or why it was skipped.
#[utoipa::path(post, path = "/api/library/import", params(("name" = Option<String>, Query)), request_body(content = Upload, content_type = "application/octet-stream"),
    responses((status = 200, body = Object, description = "the import report: what was created, what was skipped and why"), (status = 400, body = ErrorBody),
        (status = 413, body = ErrorBody, description = "over 64 MB")))]
pub(super) async fn import(State(state): State<Arc<AppState>>, Query(query): Query<ImportQuery>, bytes: Bytes) -> Result<axum::Json<Value>, ApiError> {
    if bytes.is_empty() {
        return Err(ApiError::bad_request("the body is empty: send the file's bytes"));
    }
    let name = query.name.unwrap_or_else(|| "upload".into());
    let safe: String = name.chars().filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | ' ')).take(100).collect();
    let dir = tempfile_dir()?;
    let path = dir.join(if safe.trim().is_empty() { "upload".to_string() } else { safe });
    std::fs::write(&path, &bytes).map_err(ApiError::internal)?;
    let answer = state.ask(Command::Interop(InteropCommand::Import { paths: vec![path.clone()] }), PLAY_LIMIT).await;
    let _ = std::fs::remove_dir_all(&dir);
    let report = match answer? {
        Event::Interop(report @ InteropEvent::ImportReport { .. }) => serde_json::to_value(report).map_err(ApiError::internal)?,
        _ => return Err(ApiError::internal("the import answered with something other than its report")),
    };
    // Nothing came of it: the file was refused, which is the request's fault, not a success.
    let created = report["created"].as_array().map_or(0, Vec::len);
    if let Some(skipped) = report["skipped"].as_array().filter(|s| created == 0 && !s.is_empty()) {
        let reasons: Vec<&str> = skipped.iter().filter_map(|s| s["reason"].as_str()).collect();
        return Err(ApiError::bad_request(format!("nothing imported: {}", reasons.join("; "))));
    }
    Ok(axum::Json(report))
}

/// A private folder for one upload.
fn tempfile_dir() -> Result<std::path::PathBuf, ApiError> {
    let dir = std::env::temp_dir().join(format!("lorekeeper-upload-{}", crate::store::new_id()));
    std::fs::create_dir_all(&dir).map_err(ApiError::internal)?;
    Ok(dir)
}
