//! What `lorekeeper scene` does to a played scene beside playing it, over HTTP: redo the
//! last round, list the rounds redos kept and play one of them instead, mute or unmute
//! a cast member, export the transcript, and preview the next call's prompt. Each goes through the same engine command
//! as the CLI verb, with the statuses the other scene routes answer (400 a bad request
//! naming the field, 404 an unknown scene, character or kept round, 409 a round running).

use super::play::{no_fields, scene_id, scene_refusal};
use super::{ApiError, AppState, ErrorBody, Path, Query, body};
use crate::engine::{Command, Event};
use crate::scene::transcript::TranscriptFormat;
use crate::scene::{SceneCommand, SceneEvent};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// Reading or changing what is stored; a redo answers as soon as its round starts.
const QUICK_LIMIT: Duration = Duration::from_secs(60);

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/scene/{scene}/redo", post(redo))
        .route("/api/scene/{scene}/alternatives", get(alternatives))
        .route("/api/scene/{scene}/alternative/{id}/use", post(use_alternative))
        .route("/api/scene/{scene}/mute", post(mute))
        .route("/api/scene/{scene}/unmute", post(unmute))
        .route("/api/scene/{scene}/export", get(export))
        .route("/api/scene/{scene}/preview", get(preview))
}

/// The redo's new round, started.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct RedoStarted {
    scene_id: String,
    /// The round played again.
    round: u32,
    status: String,
}

/// Play the scene's last round again from the same input; the old round is kept as an
/// alternative. Answers when the new round starts; it plays in the background and
/// reports on `WS /ws/scene/{scene}` (`redoFailed` when it fails: the old round is back).
#[utoipa::path(post, path = "/api/scene/{scene}/redo", params(("scene" = String, Path)),
    responses((status = 202, body = RedoStarted), (status = 400, body = ErrorBody, description = "a field sent, or no round to redo"),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody, description = "a round is running in the scene"),
        (status = 502, body = ErrorBody, description = "the provider could not start the round; the old round is back")))]
pub(super) async fn redo(State(state): State<Arc<AppState>>, Path(scene): Path<String>, bytes: Bytes) -> Result<Response, ApiError> {
    no_fields(&bytes, "redo")?;
    let id = scene_id(&state, &scene)?;
    match state.ask(Command::Scene(SceneCommand::Redo { scene: id.clone() }), QUICK_LIMIT).await? {
        Event::Scene(SceneEvent::RoundStarted { round, .. }) => {
            Ok((StatusCode::ACCEPTED, axum::Json(RedoStarted { scene_id: id, round, status: "started".into() })).into_response())
        }
        other => Err(scene_refusal(other)),
    }
}

/// The rounds redos kept.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct Alternatives {
    scene_id: String,
    /// Each `{id, round, saved_at, preview}`, latest round first.
    #[schema(value_type = Vec<Object>)]
    alternatives: Value,
}

/// The rounds kept by redos, each with the id `…/alternative/{id}/use` takes.
#[utoipa::path(get, path = "/api/scene/{scene}/alternatives", params(("scene" = String, Path)),
    responses((status = 200, body = Alternatives), (status = 404, body = ErrorBody)))]
pub(super) async fn alternatives(State(state): State<Arc<AppState>>, Path(scene): Path<String>) -> Result<axum::Json<Alternatives>, ApiError> {
    let id = scene_id(&state, &scene)?;
    match state.ask(Command::Scene(SceneCommand::Alternatives { scene: id }), QUICK_LIMIT).await? {
        Event::Scene(SceneEvent::Alternatives { scene_id, alternatives }) => {
            Ok(axum::Json(Alternatives { scene_id, alternatives: serde_json::to_value(alternatives).map_err(ApiError::internal)? }))
        }
        other => Err(scene_refusal(other)),
    }
}

/// A kept round played in place of another.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct AlternativeChosen {
    scene_id: String,
    /// The round it now is.
    round: u32,
    /// The id the round it replaced is kept under, when there was one.
    kept: Option<String>,
}

/// Play kept round `id` in place of the round with its number, which is kept in turn.
#[utoipa::path(post, path = "/api/scene/{scene}/alternative/{id}/use", params(("scene" = String, Path), ("id" = String, Path)),
    responses((status = 200, body = AlternativeChosen), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody, description = "no such scene or kept round"),
        (status = 409, body = ErrorBody)))]
pub(super) async fn use_alternative(
    State(state): State<Arc<AppState>>,
    Path((scene, alternative)): Path<(String, String)>,
    bytes: Bytes,
) -> Result<axum::Json<AlternativeChosen>, ApiError> {
    no_fields(&bytes, "use")?;
    let id = scene_id(&state, &scene)?;
    match state.ask(Command::Scene(SceneCommand::UseAlternative { scene: id, id: alternative }), QUICK_LIMIT).await? {
        Event::Scene(SceneEvent::AlternativeChosen { scene_id, round, kept }) => Ok(axum::Json(AlternativeChosen { scene_id, round, kept })),
        other => Err(scene_refusal(other)),
    }
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct MuteBody {
    /// The cast member, by id or name.
    character: String,
}

/// A cast member muted or unmuted.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct MuteAnswer {
    scene_id: String,
    name: String,
    muted: bool,
}

async fn set_muted(state: &AppState, scene: &str, bytes: &Bytes, muted: bool) -> Result<axum::Json<MuteAnswer>, ApiError> {
    let request: MuteBody = body(bytes)?;
    let id = scene_id(state, scene)?;
    match state.ask(Command::Scene(SceneCommand::Mute { scene: id, character: request.character, muted }), QUICK_LIMIT).await? {
        Event::Scene(SceneEvent::Muted { scene_id, name, muted }) => Ok(axum::Json(MuteAnswer { scene_id, name, muted })),
        other => Err(scene_refusal(other)),
    }
}

/// Keep a cast member from being picked to act (`{"character": id or name}`).
#[utoipa::path(post, path = "/api/scene/{scene}/mute", request_body = MuteBody, params(("scene" = String, Path)),
    responses((status = 200, body = MuteAnswer), (status = 400, body = ErrorBody, description = "a bad body, or a character not in the scene's cast"),
        (status = 404, body = ErrorBody)))]
pub(super) async fn mute(State(state): State<Arc<AppState>>, Path(scene): Path<String>, bytes: Bytes) -> Result<axum::Json<MuteAnswer>, ApiError> {
    set_muted(&state, &scene, &bytes, true).await
}

/// Let a muted cast member be picked to act again.
#[utoipa::path(post, path = "/api/scene/{scene}/unmute", request_body = MuteBody, params(("scene" = String, Path)),
    responses((status = 200, body = MuteAnswer), (status = 400, body = ErrorBody, description = "a bad body, or a character not in the scene's cast"),
        (status = 404, body = ErrorBody)))]
pub(super) async fn unmute(State(state): State<Arc<AppState>>, Path(scene): Path<String>, bytes: Bytes) -> Result<axum::Json<MuteAnswer>, ApiError> {
    set_muted(&state, &scene, &bytes, false).await
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExportQuery {
    #[serde(default)]
    format: Option<String>,
}

/// The whole transcript as `lorekeeper scene export` writes it: `?format=markdown`
/// (the default, as `text/markdown`) or `json`.
#[utoipa::path(get, path = "/api/scene/{scene}/export", params(("scene" = String, Path), ("format" = Option<String>, Query, description = "markdown (default) or json")),
    responses((status = 200, body = Object, description = "the transcript: Markdown text, or {scene, messages, state_edits} as JSON"),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn export(State(state): State<Arc<AppState>>, Path(scene): Path<String>, Query(query): Query<ExportQuery>) -> Result<Response, ApiError> {
    let format = match query.format.as_deref().unwrap_or("markdown") {
        "markdown" | "md" => TranscriptFormat::Markdown,
        "json" => TranscriptFormat::Json,
        other => return Err(ApiError::bad_request(format!("invalid query: `format` {other:?}: markdown or json"))),
    };
    let id = scene_id(&state, &scene)?;
    // A reader connection: a long transcript does not hold the writer's lock.
    let reader = state.store().reader().map_err(ApiError::internal)?;
    let (text, _) = crate::scene::transcript::render(&reader, &id, format).map_err(ApiError::internal)?;
    let kind = match format {
        TranscriptFormat::Markdown => "text/markdown; charset=utf-8",
        TranscriptFormat::Json => "application/json",
    };
    Ok(([(header::CONTENT_TYPE, kind)], text).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PreviewQuery {
    #[serde(default)]
    agent: Option<crate::scene::envelope::AgentKind>,
    #[serde(default)]
    character: Option<String>,
}

/// The next call's prompt as `lorekeeper scene preview` shows it (the workbench's Budgets
/// panel): the Director's by default, `?agent=reconcile|narrator|world`, or a character's
/// (`?character=NAME`, or `?agent=character` for the first present one). Each section's
/// share, allocated and used tokens and what it drops (with why), the reply's cap, the
/// prompt's estimated tokens and its text. Nothing is stored or sent to a model.
#[utoipa::path(get, path = "/api/scene/{scene}/preview",
    params(("scene" = String, Path), ("agent" = Option<String>, Query, description = "director (default), reconcile, character, narrator or world"),
        ("character" = Option<String>, Query, description = "the character whose call it is, by name or id")),
    responses((status = 200, body = Object, description = "the next call: {scene_id, agent, character, campaign_plan, max_context_tokens, reserved_tokens, reply_tokens, schema_tokens, prompt_tokens, section_tokens, sections: [{section, percent, allocated, used, kept, dropped: [{id, tokens, reason}]}], system, user, template_error}"),
        (status = 400, body = ErrorBody, description = "a bad query, or a character not present in the scene"), (status = 404, body = ErrorBody)))]
pub(super) async fn preview(State(state): State<Arc<AppState>>, Path(scene): Path<String>, Query(query): Query<PreviewQuery>) -> Result<Response, ApiError> {
    use crate::scene::envelope::AgentKind;
    let agent = match (query.agent, &query.character) {
        (Some(a), Some(_)) if a != AgentKind::Character => {
            return Err(ApiError::bad_request("invalid query: `character` is for a character's call; leave out `agent` or send `agent=character`"));
        }
        (Some(a), _) => a,
        (None, Some(_)) => AgentKind::Character,
        (None, None) => AgentKind::Director,
    };
    let id = scene_id(&state, &scene)?;
    match state.ask(Command::Scene(SceneCommand::Preview { scene: id, agent, character: query.character }), QUICK_LIMIT).await? {
        Event::Scene(SceneEvent::Preview { preview }) => Ok(axum::Json(preview.next_call()).into_response()),
        other => Err(scene_refusal(other)),
    }
}
