//! Memory curation over HTTP, as in the workbench's memory browser and the CLI: pin a
//! memory (its character is given it every time, within budget), change its text (one
//! transaction: text, keyword index, vector), delete it, or forget a whole session.
//! Each answers with what was done (`action`, `ids`) once it is committed.

use super::{ApiError, AppState, ErrorBody, Query, body};
use crate::engine::{Command, Event};
use crate::memory::{MemoryCommand, MemoryEvent};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// A curation is one transaction (an edit embeds one text first).
const LIMIT: Duration = Duration::from_secs(60);

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/memory/forget", post(forget))
        .route("/api/memory/export", get(export))
        .route("/api/memory/stats", get(stats))
        .route("/api/memory/injections", get(injections))
        .route("/api/memory/reindex", post(reindex))
        .route("/api/memory/{id}", delete(remove))
        .route("/api/memory/{id}/pin", post(pin))
        .route("/api/memory/{id}/edit", post(edit))
}

/// `{"pinned": false}` unpins; an empty body pins.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PinBody {
    #[serde(default = "yes")]
    pinned: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct MemoryEditBody {
    /// The memory's new text (not empty).
    text: String,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ForgetBody {
    /// The session whose memories go.
    session: String,
}

/// What a curation did.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct Curation {
    /// `pinned`, `unpinned`, `edited`, `deleted` or `forgot`.
    action: String,
    /// The memories it concerned.
    ids: Vec<String>,
}

/// Send `command` and wait for its own outcome: the curation, or the engine's error for
/// it (404 when the memory or session does not exist).
async fn curate(state: &AppState, command: MemoryCommand) -> Result<axum::Json<Curation>, ApiError> {
    match state.ask(Command::Memory(command), LIMIT).await? {
        Event::Memory(MemoryEvent::Curated { curated }) => Ok(axum::Json(Curation { action: curated.action, ids: curated.ids })),
        other => Err(super::play::memory_refusal(other, StatusCode::BAD_REQUEST)),
    }
}

/// The library's memory counts, its embedding model and its vector graph, as
/// `memory stats` prints them.
#[utoipa::path(get, path = "/api/memory/stats", responses((status = 200, body = Object, description = "counts, model, graph")))]
pub(super) async fn stats(State(state): State<Arc<AppState>>) -> Result<axum::Json<serde_json::Value>, ApiError> {
    match state.ask(Command::Memory(MemoryCommand::Stats), LIMIT).await? {
        Event::Memory(MemoryEvent::Stats { stats }) => Ok(axum::Json(serde_json::to_value(stats).map_err(ApiError::internal)?)),
        other => Err(super::play::memory_refusal(other, StatusCode::INTERNAL_SERVER_ERROR)),
    }
}

/// What each agent's last prompt was given from memory (`memory injections`): the
/// memories injected, with their scores and why.
#[utoipa::path(get, path = "/api/memory/injections", responses((status = 200, body = Object, description = "`{\"injections\": [...]}`, one per agent")))]
pub(super) async fn injections(State(state): State<Arc<AppState>>) -> Result<axum::Json<serde_json::Value>, ApiError> {
    match state.ask(Command::Memory(MemoryCommand::Injections), LIMIT).await? {
        Event::Memory(MemoryEvent::Injections { injections }) => Ok(axum::Json(serde_json::json!({ "injections": injections }))),
        other => Err(super::play::memory_refusal(other, StatusCode::INTERNAL_SERVER_ERROR)),
    }
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ReindexBody {
    /// Embed every memory again, not only those without a vector of the current model.
    #[serde(default)]
    force: bool,
}

/// Embed the memories that have no vector of the current model (all of them with
/// `force`) and rebuild the graph (`memory reindex`); answers when they are embedded.
#[utoipa::path(post, path = "/api/memory/reindex", request_body = ReindexBody,
    responses((status = 200, body = Object, description = "`{\"embedded\": n}`"), (status = 400, body = ErrorBody)))]
pub(super) async fn reindex(State(state): State<Arc<AppState>>, bytes: Bytes) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let request: ReindexBody = if bytes.is_empty() { ReindexBody::default() } else { body(&bytes)? };
    match state.ask(Command::Memory(MemoryCommand::Reindex { force: request.force }), Duration::from_secs(60 * 60)).await? {
        Event::Memory(MemoryEvent::Reindexed { embedded }) => Ok(axum::Json(serde_json::json!({ "embedded": embedded }))),
        other => Err(super::play::memory_refusal(other, StatusCode::BAD_REQUEST)),
    }
}

/// Pin a memory (`{"pinned": false}` unpins it).
#[utoipa::path(post, path = "/api/memory/{id}/pin", params(("id" = String, Path)),
    request_body(content = PinBody, description = "an empty body pins", content_type = "application/json"),
    responses((status = 200, body = Curation), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn pin(State(state): State<Arc<AppState>>, Path(id): Path<String>, bytes: Bytes) -> Result<axum::Json<Curation>, ApiError> {
    let request: PinBody = if bytes.iter().all(u8::is_ascii_whitespace) { PinBody { pinned: true } } else { body(&bytes)? };
    curate(&state, MemoryCommand::Pin { id, pinned: request.pinned }).await
}

/// Give a memory a new text: embedded, then text, keyword index and vector replaced in
/// one transaction; the memory is marked as edited.
#[utoipa::path(post, path = "/api/memory/{id}/edit", params(("id" = String, Path)),
    request_body = MemoryEditBody,
    responses((status = 200, body = Curation), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn edit(State(state): State<Arc<AppState>>, Path(id): Path<String>, bytes: Bytes) -> Result<axum::Json<Curation>, ApiError> {
    let request: MemoryEditBody = body(&bytes)?;
    if request.text.trim().is_empty() {
        return Err(ApiError::bad_request("`text` is empty: delete the memory instead"));
    }
    curate(&state, MemoryCommand::Edit { id, text: request.text }).await
}

/// Delete a memory (its keyword row and vector go with it).
#[utoipa::path(delete, path = "/api/memory/{id}", params(("id" = String, Path)),
    responses((status = 200, body = Curation), (status = 404, body = ErrorBody)))]
pub(super) async fn remove(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<axum::Json<Curation>, ApiError> {
    curate(&state, MemoryCommand::Delete { id }).await
}

/// Delete every memory of a session.
#[utoipa::path(post, path = "/api/memory/forget", request_body = ForgetBody,
    responses((status = 200, body = Curation), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn forget(State(state): State<Arc<AppState>>, bytes: Bytes) -> Result<axum::Json<Curation>, ApiError> {
    let request: ForgetBody = body(&bytes)?;
    curate(&state, MemoryCommand::ForgetSession { session: request.session }).await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExportQuery {
    scope: Option<String>,
}

/// The turns and summaries as curated (edited text, pins, nothing deleted), one JSON
/// object per line in the format `POST /api/import` and `memory import` read back;
/// `?scope=character:NAME` for one character's.
#[utoipa::path(get, path = "/api/memory/export", params(("scope" = Option<String>, Query, description = "world, campaign:ID or character:NAME or ID")),
    responses((status = 200, content_type = "application/x-ndjson", body = String, description = "one memory per line"),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn export(State(state): State<Arc<AppState>>, Query(query): Query<ExportQuery>) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    let scope = match query.scope.as_deref() {
        Some(s) => Some(
            crate::memory::records::Scope::parse(s)
                .ok_or_else(|| ApiError::bad_request(format!("scope {s:?}: world, campaign:ID or character:NAME or ID")))?,
        ),
        None => None,
    };
    match state.ask(Command::Memory(MemoryCommand::Export { path: None, scope }), LIMIT).await? {
        Event::Memory(MemoryEvent::Exported { lines: Some(lines), .. }) => {
            Ok(([(axum::http::header::CONTENT_TYPE, "application/x-ndjson")], lines.as_str().to_owned()).into_response())
        }
        other => Err(super::play::memory_refusal(other, StatusCode::BAD_REQUEST)),
    }
}
