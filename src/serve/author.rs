//! Authoring over HTTP: the library's worlds → campaigns → arcs → scenes, its characters,
//! lorebooks, personas and identity runs, read from snapshots of the store, and built,
//! changed or removed through the engine's authoring commands. Each change is sent as
//! `Command::Asked` and answered by its own `authored` event (or the error that refused
//! it), whatever other requests author meanwhile.

use super::{ApiError, AppState};
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/worlds", get(worlds))
        .route("/api/characters", get(characters))
        .route("/api/lorebooks", get(lorebooks))
        .route("/api/personas", get(personas))
        .route("/api/identity/runs", get(identity_runs))
}

/// The library as a tree.
fn tree(state: &AppState) -> Result<Value, ApiError> {
    let reader = state.store().reader().map_err(ApiError::internal)?;
    let tree = crate::scene::authoring::tree(&reader).map_err(ApiError::internal)?;
    serde_json::to_value(tree).map_err(ApiError::internal)
}

/// The authoring tree: every world with its lorebooks and campaigns; each campaign with
/// its persona, cast, lorebooks, trackers, facts, time and arcs; each arc with its scenes.
#[utoipa::path(get, path = "/api/worlds",
    responses((status = 200, body = Object, description = "{worlds: [{id, name, description, notes, lorebooks, campaigns: [{id, name, …, arcs: [{id, name, notes, scenes}]}]}]}")))]
pub(super) async fn worlds(State(state): State<Arc<AppState>>) -> Result<axum::Json<Value>, ApiError> {
    Ok(axum::Json(tree(&state)?))
}

/// A character in the library.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct CharacterItem {
    id: String,
    name: String,
    /// Where it came from: `identity`, `card`, …
    origin: String,
    has_card: bool,
    has_profile: bool,
    has_portrait: bool,
}

/// A lorebook in the library.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct LorebookItem {
    id: String,
    name: String,
    entries: usize,
    /// The character whose card embeds the book.
    character_id: Option<String>,
}

fn library(state: &AppState) -> Result<(Vec<crate::interop::library::CharacterSummary>, Vec<crate::interop::library::LorebookSummary>), ApiError> {
    let reader = state.store().reader().map_err(ApiError::internal)?;
    crate::interop::library::list(&reader).map_err(ApiError::internal)
}

/// Every character of the library, by name (what casts, chats and overrides name).
#[utoipa::path(get, path = "/api/characters", responses((status = 200, body = Vec<CharacterItem>)))]
pub(super) async fn characters(State(state): State<Arc<AppState>>) -> Result<axum::Json<Vec<CharacterItem>>, ApiError> {
    let (characters, _) = library(&state)?;
    Ok(axum::Json(
        characters
            .into_iter()
            .map(|c| CharacterItem { id: c.id, name: c.name, origin: c.origin, has_card: c.has_card, has_profile: c.has_profile, has_portrait: c.has_portrait })
            .collect(),
    ))
}

/// Every lorebook of the library, by name, with how many entries it holds.
#[utoipa::path(get, path = "/api/lorebooks", responses((status = 200, body = Vec<LorebookItem>)))]
pub(super) async fn lorebooks(State(state): State<Arc<AppState>>) -> Result<axum::Json<Vec<LorebookItem>>, ApiError> {
    let (_, lorebooks) = library(&state)?;
    Ok(axum::Json(
        lorebooks.into_iter().map(|b| LorebookItem { id: b.id, name: b.name, entries: b.entries, character_id: b.character_id }).collect(),
    ))
}

/// Someone the user plays.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct PersonaItem {
    id: String,
    name: String,
    description: String,
}

/// Every persona.
#[utoipa::path(get, path = "/api/personas", responses((status = 200, body = Vec<PersonaItem>)))]
pub(super) async fn personas(State(state): State<Arc<AppState>>) -> Result<axum::Json<Vec<PersonaItem>>, ApiError> {
    let reader = state.store().reader().map_err(ApiError::internal)?;
    let personas = crate::character::personas(&reader).map_err(ApiError::internal)?;
    Ok(axum::Json(personas.into_iter().map(|p| PersonaItem { id: p.id, name: p.name, description: p.description }).collect()))
}

/// An identity run, as `lorekeeper identity list` shows it (its details are at the
/// predecessor's `/api/character/{id}/status`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct RunItem {
    /// The id the predecessor's routes take.
    character_id: String,
    name: String,
    mode: String,
    status: String,
    created_at: String,
    completed_at: Option<String>,
    error: Option<String>,
}

/// Every identity run, oldest first.
#[utoipa::path(get, path = "/api/identity/runs", responses((status = 200, body = Vec<RunItem>)))]
pub(super) async fn identity_runs(State(state): State<Arc<AppState>>) -> Result<axum::Json<Vec<RunItem>>, ApiError> {
    let reader = state.store().reader().map_err(ApiError::internal)?;
    let runs = crate::identity::records::list_runs(&reader).map_err(ApiError::internal)?;
    let label = |v: serde_json::Result<Value>| v.ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
    Ok(axum::Json(
        runs.into_iter()
            .map(|r| RunItem {
                character_id: r.id,
                name: r.name,
                mode: label(serde_json::to_value(r.mode)),
                status: label(serde_json::to_value(r.status)),
                created_at: r.created_at,
                completed_at: r.completed_at,
                error: r.error,
            })
            .collect(),
    ))
}
