//! Authoring over HTTP: the library's worlds → campaigns → arcs → scenes, its characters,
//! lorebooks, personas and identity runs, read from snapshots of the store, and built,
//! changed or removed through the engine's authoring commands. Each change is sent as
//! `Command::Asked` and answered by its own `authored` event (or the error that refused
//! it), whatever other requests author meanwhile.

use super::{ApiError, AppState, ErrorBody, Path, Query, body};
use crate::engine::{Command, Event};
use crate::scene::author::{AuthorCommand, AuthorEvent};
use crate::scene::authoring::{Edit, Level, LoreLevel, StateEdit};
use crate::scene::{SceneCommand, SceneEvent};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// An authoring command waits for the one before it, never long.
const AUTHOR_LIMIT: Duration = Duration::from_secs(60);

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/worlds", get(worlds))
        .route("/api/characters", get(characters))
        .route("/api/lorebooks", get(lorebooks))
        .route("/api/personas", get(personas))
        .route("/api/identity/runs", get(identity_runs))
        .route("/api/worlds", post(new_world))
        .route("/api/world/{world}/campaigns", post(new_campaign))
        .route("/api/campaign/{campaign}/arcs", post(new_arc))
        .route("/api/arc/{arc}/scenes", post(new_scene))
        .route("/api/personas", post(new_persona))
        .route("/api/characters", post(new_character))
        .route("/api/lorebooks", post(new_lorebook))
        .route("/api/world/{world}", delete(delete_world))
        .route("/api/campaign/{campaign}", delete(delete_campaign))
        .route("/api/arc/{arc}", delete(delete_arc))
        .route("/api/scene/{scene}", delete(delete_scene))
        .route("/api/persona/{persona}", delete(delete_persona))
        .route("/api/world/{world}/edit", post(edit_world))
        .route("/api/campaign/{campaign}/edit", post(edit_campaign))
        .route("/api/arc/{arc}/edit", post(edit_arc))
        .route("/api/scene/{scene}/edit", post(edit_scene))
        .route("/api/persona/{persona}/edit", post(edit_persona))
        .route("/api/campaign/{campaign}/cast/{action}", post(campaign_cast))
        .route("/api/campaign/{campaign}/persona", post(campaign_persona))
        .route("/api/world/{world}/lorebook/{action}", post(world_lorebook))
        .route("/api/campaign/{campaign}/lorebook/{action}", post(campaign_lorebook))
        .route("/api/campaign/{campaign}/state", post(campaign_state))
        .route("/api/scene/{scene}/character/{character}/state", post(character_state))
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

/// What an authoring request did: the thing created, changed or removed, and the tree
/// after it where the change shows there.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct Authored {
    /// `created`, `updated`, `renamed` (a lorebook), `deleted`, `attached`, `detached`;
    /// `added` or `removed` for `cast`.
    action: String,
    /// `world`, `campaign`, `arc`, `scene`, `persona`, `character`, `cast`, `lorebook`, `campaign state`, `character state`.
    kind: String,
    /// The id of what was authored (for `cast`, `campaign state`: the campaign's; for
    /// `character state`: the scene's; for `lorebook`: the book's).
    id: String,
    /// Its name (for `cast`, `character state`: the character's).
    name: String,
    /// What went with a deletion: `{campaigns, arcs, scenes, messages}`; a lorebook's adds
    /// `lore_entries` and `detached` (what it was attached to, in words).
    #[schema(value_type = Option<Object>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    impact: Option<Value>,
    /// The authoring tree after the change, as `GET /api/worlds` answers.
    #[schema(value_type = Option<Object>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    tree: Option<Value>,
}

/// Send `command` and answer with what it authored (its own answer, not another
/// request's), with the tree after it when `with_tree`.
pub(super) async fn author(state: &AppState, command: AuthorCommand, with_tree: bool) -> Result<axum::Json<Authored>, ApiError> {
    match state.ask(Command::Scene(SceneCommand::Author(command)), AUTHOR_LIMIT).await? {
        Event::Author(AuthorEvent::Authored { action, kind, id, name, impact }) => {
            let impact = impact.map(serde_json::to_value).transpose().map_err(ApiError::internal)?;
            let tree = if with_tree { Some(tree(state)?) } else { None };
            Ok(axum::Json(Authored { action, kind, id, name, impact, tree }))
        }
        other => Err(super::play::scene_refusal(other)),
    }
}

/// A store read refused: 404 for what is not there (or a name several things share,
/// which names their ids), 400 for what cannot be done, 409 for what changed since the
/// sender looked, 500 for the library's fault.
fn refused(e: crate::store::StoreError) -> ApiError {
    use crate::store::StoreError;
    match e {
        StoreError::NotFound(message) => ApiError::not_found(message),
        StoreError::Invalid(message) => ApiError::bad_request(message),
        StoreError::Conflict(message) => ApiError::conflict(message),
        other => ApiError::internal(other),
    }
}

/// A world or campaign to create.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NewPlace {
    name: String,
    #[serde(default)]
    description: String,
    /// The game master's notes (given to the Director).
    #[serde(default)]
    notes: String,
}

/// Create a world.
#[utoipa::path(post, path = "/api/worlds", request_body = NewPlace,
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody)))]
pub(super) async fn new_world(State(state): State<Arc<AppState>>, bytes: Bytes) -> Result<axum::Json<Authored>, ApiError> {
    let NewPlace { name, description, notes } = body(&bytes)?;
    author(&state, AuthorCommand::NewWorld { name, description, notes }, true).await
}

/// Create a campaign in a world (by id or name).
#[utoipa::path(post, path = "/api/world/{world}/campaigns", request_body = NewPlace, params(("world" = String, Path)),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn new_campaign(State(state): State<Arc<AppState>>, Path(world): Path<String>, bytes: Bytes) -> Result<axum::Json<Authored>, ApiError> {
    let NewPlace { name, description, notes } = body(&bytes)?;
    author(&state, AuthorCommand::NewCampaign { world, name, description, notes }, true).await
}

/// An arc to create (an arc has notes, not a description).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NewArc {
    name: String,
    #[serde(default)]
    notes: String,
}

/// Create an arc in a campaign (by id or name).
#[utoipa::path(post, path = "/api/campaign/{campaign}/arcs", request_body = NewArc, params(("campaign" = String, Path)),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn new_arc(State(state): State<Arc<AppState>>, Path(campaign): Path<String>, bytes: Bytes) -> Result<axum::Json<Authored>, ApiError> {
    let NewArc { name, notes } = body(&bytes)?;
    author(&state, AuthorCommand::NewArc { campaign, name, notes }, true).await
}

/// A scene to create, as `lorekeeper scene new` takes it.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NewScene {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    notes: String,
    /// The scene's cast, by id or name; the campaign's cast when empty.
    #[serde(default)]
    cast: Vec<String>,
    /// Who is present at the start; the whole cast when absent.
    #[serde(default)]
    active: Option<Vec<String>>,
}

/// Create a scene in an arc (by id or name).
#[utoipa::path(post, path = "/api/arc/{arc}/scenes", request_body = NewScene, params(("arc" = String, Path)),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn new_scene(State(state): State<Arc<AppState>>, Path(arc): Path<String>, bytes: Bytes) -> Result<axum::Json<Authored>, ApiError> {
    let NewScene { name, description, notes, cast, active } = body(&bytes)?;
    let command = SceneCommand::New { arc, name, description, notes, cast, active };
    match state.ask(Command::Scene(command), AUTHOR_LIMIT).await? {
        Event::Scene(SceneEvent::SceneCreated { scene_id, name }) => Ok(axum::Json(Authored {
            action: "created".into(),
            kind: "scene".into(),
            id: scene_id,
            name: name.trim().to_string(),
            impact: None,
            tree: Some(tree(&state)?),
        })),
        other => Err(super::play::scene_refusal(other)),
    }
}

/// A persona to create: someone the user plays.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NewPersona {
    name: String,
    #[serde(default)]
    description: String,
}

/// Create a persona.
#[utoipa::path(post, path = "/api/personas", request_body = NewPersona,
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody)))]
pub(super) async fn new_persona(State(state): State<Arc<AppState>>, bytes: Bytes) -> Result<axum::Json<Authored>, ApiError> {
    let NewPersona { name, description } = body(&bytes)?;
    author(&state, AuthorCommand::NewPersona { name, description }, false).await
}

/// A character to write from scratch: a card of its own, its fields empty where absent
/// (as `lorekeeper character new` takes it).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NewCharacter {
    /// Required; no other character may go by it.
    name: String,
    description: Option<String>,
    personality: Option<String>,
    scenario: Option<String>,
    /// The greeting.
    first_mes: Option<String>,
    /// Example dialogue.
    mes_example: Option<String>,
    system_prompt: Option<String>,
    post_history_instructions: Option<String>,
    creator_notes: Option<String>,
    alternate_greetings: Option<Vec<String>>,
    tags: Option<Vec<String>>,
}

/// Create a character from scratch; its sheet is then edited like any card's.
#[utoipa::path(post, path = "/api/characters", request_body = NewCharacter,
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody, description = "no name, or a name another character goes by")))]
pub(super) async fn new_character(State(state): State<Arc<AppState>>, bytes: Bytes) -> Result<axum::Json<Authored>, ApiError> {
    let b: NewCharacter = body(&bytes)?;
    let sheet = crate::character::SheetEdit {
        name: Some(b.name),
        description: b.description,
        personality: b.personality,
        scenario: b.scenario,
        first_mes: b.first_mes,
        mes_example: b.mes_example,
        system_prompt: b.system_prompt,
        post_history_instructions: b.post_history_instructions,
        creator_notes: b.creator_notes,
        alternate_greetings: b.alternate_greetings,
        tags: b.tags,
    };
    author(&state, AuthorCommand::NewCharacter { sheet: Box::new(sheet) }, false).await
}

/// A lorebook to start, empty.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NewLorebook {
    /// Required; no other lorebook may have it.
    name: String,
    #[serde(default)]
    description: String,
}

/// Create an empty lorebook; its entries are added through the entry editor (the
/// workbench's lore editor, `lorekeeper lorebook entry add`).
#[utoipa::path(post, path = "/api/lorebooks", request_body = NewLorebook,
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody, description = "no name, or a name another lorebook has")))]
pub(super) async fn new_lorebook(State(state): State<Arc<AppState>>, bytes: Bytes) -> Result<axum::Json<Authored>, ApiError> {
    let NewLorebook { name, description } = body(&bytes)?;
    author(&state, AuthorCommand::NewLorebook { name, description }, false).await
}

/// What to change of a world, campaign, arc or scene; what is absent stays.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct EditBody {
    name: Option<String>,
    /// Not for an arc, which has notes only.
    description: Option<String>,
    notes: Option<String>,
}

async fn edit(state: &AppState, level: Level, key: String, bytes: &Bytes) -> Result<axum::Json<Authored>, ApiError> {
    let EditBody { name, description, notes } = body(bytes)?;
    if name.is_none() && description.is_none() && notes.is_none() {
        return Err(ApiError::bad_request("nothing to change: give name, description or notes"));
    }
    author(state, AuthorCommand::Edit { level, key, edit: Edit { name, description, notes } }, true).await
}

/// Rename, re-describe or re-note a world.
#[utoipa::path(post, path = "/api/world/{world}/edit", request_body = EditBody, params(("world" = String, Path)),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn edit_world(State(state): State<Arc<AppState>>, Path(key): Path<String>, bytes: Bytes) -> Result<axum::Json<Authored>, ApiError> {
    edit(&state, Level::World, key, &bytes).await
}

/// Rename, re-describe or re-note a campaign.
#[utoipa::path(post, path = "/api/campaign/{campaign}/edit", request_body = EditBody, params(("campaign" = String, Path)),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn edit_campaign(State(state): State<Arc<AppState>>, Path(key): Path<String>, bytes: Bytes) -> Result<axum::Json<Authored>, ApiError> {
    edit(&state, Level::Campaign, key, &bytes).await
}

/// Rename or re-note an arc.
#[utoipa::path(post, path = "/api/arc/{arc}/edit", request_body = EditBody, params(("arc" = String, Path)),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn edit_arc(State(state): State<Arc<AppState>>, Path(key): Path<String>, bytes: Bytes) -> Result<axum::Json<Authored>, ApiError> {
    edit(&state, Level::Arc, key, &bytes).await
}

/// Rename, re-describe or re-note a scene.
#[utoipa::path(post, path = "/api/scene/{scene}/edit", request_body = EditBody, params(("scene" = String, Path)),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn edit_scene(State(state): State<Arc<AppState>>, Path(key): Path<String>, bytes: Bytes) -> Result<axum::Json<Authored>, ApiError> {
    edit(&state, Level::Scene, key, &bytes).await
}

/// What to change of a persona; what is absent stays.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PersonaEdit {
    name: Option<String>,
    description: Option<String>,
}

/// Rename or re-describe a persona (by id or name).
#[utoipa::path(post, path = "/api/persona/{persona}/edit", request_body = PersonaEdit, params(("persona" = String, Path)),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn edit_persona(State(state): State<Arc<AppState>>, Path(persona): Path<String>, bytes: Bytes) -> Result<axum::Json<Authored>, ApiError> {
    let PersonaEdit { name, description } = body(&bytes)?;
    if name.is_none() && description.is_none() {
        return Err(ApiError::bad_request("nothing to change: give name or description"));
    }
    author(&state, AuthorCommand::EditPersona { persona, name, description }, false).await
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DeleteQuery {
    /// Delete what is under it too (the CLI's `--yes`).
    #[serde(default)]
    confirm: bool,
}

/// Delete a world, campaign, arc or scene. Unless confirmed, a delete that would take
/// anything with it (campaigns, arcs, scenes, messages) is refused with a 409 that says
/// what, as the CLI refuses without `--yes`; the engine checks again as it deletes.
async fn remove(state: &AppState, level: Level, key: String, confirm: bool) -> Result<axum::Json<Authored>, ApiError> {
    let would_go = |state: &AppState, key: &str| -> Result<Option<String>, ApiError> {
        let reader = state.store().reader().map_err(ApiError::internal)?;
        let (id, _) = crate::scene::authoring::resolve(&reader, level, key).map_err(refused)?;
        let impact = crate::scene::authoring::impact(&reader, level, &id).map_err(refused)?;
        Ok((!impact.is_empty()).then(|| impact.describe()))
    };
    let conflict = |what: String| {
        ApiError::unconfirmed(format!("deleting this {} also deletes {what}; send ?confirm=true to delete it all", level.label()))
    };
    if !confirm && let Some(what) = would_go(state, &key)? {
        return Err(conflict(what));
    }
    match author(state, AuthorCommand::Delete { level, key: key.clone(), confirmed: confirm }, true).await {
        // Something was put under it since it was read.
        Err(e) if !confirm && e.status() == StatusCode::BAD_REQUEST => match would_go(state, &key)? {
            Some(what) => Err(conflict(what)),
            None => Err(e),
        },
        answer => answer,
    }
}

/// Delete a world and everything in it (`?confirm=true` when it holds anything).
#[utoipa::path(delete, path = "/api/world/{world}", params(("world" = String, Path), ("confirm" = Option<bool>, Query)),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "not confirmed, and it holds campaigns, arcs, scenes or messages (named)")))]
pub(super) async fn delete_world(State(state): State<Arc<AppState>>, Path(key): Path<String>, Query(q): Query<DeleteQuery>) -> Result<axum::Json<Authored>, ApiError> {
    remove(&state, Level::World, key, q.confirm).await
}

/// Delete a campaign and everything in it (`?confirm=true` when it holds anything).
#[utoipa::path(delete, path = "/api/campaign/{campaign}", params(("campaign" = String, Path), ("confirm" = Option<bool>, Query)),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "not confirmed, and it holds arcs, scenes or messages (named)")))]
pub(super) async fn delete_campaign(State(state): State<Arc<AppState>>, Path(key): Path<String>, Query(q): Query<DeleteQuery>) -> Result<axum::Json<Authored>, ApiError> {
    remove(&state, Level::Campaign, key, q.confirm).await
}

/// Delete an arc and its scenes (`?confirm=true` when it holds any).
#[utoipa::path(delete, path = "/api/arc/{arc}", params(("arc" = String, Path), ("confirm" = Option<bool>, Query)),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "not confirmed, and it holds scenes or messages (named)")))]
pub(super) async fn delete_arc(State(state): State<Arc<AppState>>, Path(key): Path<String>, Query(q): Query<DeleteQuery>) -> Result<axum::Json<Authored>, ApiError> {
    remove(&state, Level::Arc, key, q.confirm).await
}

/// Delete a scene and its transcript (`?confirm=true` when it has messages).
#[utoipa::path(delete, path = "/api/scene/{scene}", params(("scene" = String, Path), ("confirm" = Option<bool>, Query)),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "not confirmed, and it has messages (counted)")))]
pub(super) async fn delete_scene(State(state): State<Arc<AppState>>, Path(key): Path<String>, Query(q): Query<DeleteQuery>) -> Result<axum::Json<Authored>, ApiError> {
    remove(&state, Level::Scene, key, q.confirm).await
}

/// Delete a persona (by id or name).
#[utoipa::path(delete, path = "/api/persona/{persona}", params(("persona" = String, Path)),
    responses((status = 200, body = Authored), (status = 404, body = ErrorBody)))]
pub(super) async fn delete_persona(State(state): State<Arc<AppState>>, Path(persona): Path<String>) -> Result<axum::Json<Authored>, ApiError> {
    author(&state, AuthorCommand::DeletePersona { persona }, false).await
}

/// A character of the library, by id or name.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CharacterBody {
    character: String,
}

/// Add a library character to a campaign's cast (`add`; its new scenes cast them) or
/// take one out (`remove`).
#[utoipa::path(post, path = "/api/campaign/{campaign}/cast/{action}", request_body = CharacterBody,
    params(("campaign" = String, Path), ("action" = String, Path, description = "add or remove")),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn campaign_cast(
    State(state): State<Arc<AppState>>,
    Path((campaign, action)): Path<(String, String)>,
    bytes: Bytes,
) -> Result<axum::Json<Authored>, ApiError> {
    let CharacterBody { character } = body(&bytes)?;
    let command = match action.as_str() {
        "add" => AuthorCommand::CastAdd { campaign, character },
        "remove" => AuthorCommand::CastRemove { campaign, character },
        other => return Err(ApiError::not_found(format!("no cast action {other:?}: add or remove"))),
    };
    author(&state, command, true).await
}

/// Who the user plays in a campaign's scenes.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PersonaChoice {
    /// A persona's id or name; `null` for nobody in particular. Required, so that a
    /// body without it is not taken for `null`.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    persona: Option<Option<String>>,
}

/// A field that may be `null`, told apart from one that is absent.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// Choose the persona the user plays in a campaign (`null`: nobody in particular).
#[utoipa::path(post, path = "/api/campaign/{campaign}/persona", request_body = PersonaChoice, params(("campaign" = String, Path)),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn campaign_persona(State(state): State<Arc<AppState>>, Path(campaign): Path<String>, bytes: Bytes) -> Result<axum::Json<Authored>, ApiError> {
    let PersonaChoice { persona } = body(&bytes)?;
    let Some(persona) = persona else {
        return Err(ApiError::bad_request("invalid body: missing field `persona` (a persona's id or name, or null for nobody)"));
    };
    author(&state, AuthorCommand::UsePersona { campaign, persona }, true).await
}

/// A lorebook of the library, by id or name.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct LorebookBody {
    lorebook: String,
}

async fn lorebook(state: &AppState, level: LoreLevel, owner: String, action: &str, bytes: &Bytes) -> Result<axum::Json<Authored>, ApiError> {
    let LorebookBody { lorebook } = body(bytes)?;
    let command = match action {
        "attach" => AuthorCommand::Attach { lorebook, level, owner },
        "detach" => AuthorCommand::Detach { lorebook, level, owner },
        other => return Err(ApiError::not_found(format!("no lorebook action {other:?}: attach or detach"))),
    };
    author(state, command, true).await
}

/// Attach a lorebook to a world (`attach`: every campaign of it scans the book) or
/// detach it (`detach`; 400 when it is not attached there).
#[utoipa::path(post, path = "/api/world/{world}/lorebook/{action}", request_body = LorebookBody,
    params(("world" = String, Path), ("action" = String, Path, description = "attach or detach")),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn world_lorebook(
    State(state): State<Arc<AppState>>,
    Path((world, action)): Path<(String, String)>,
    bytes: Bytes,
) -> Result<axum::Json<Authored>, ApiError> {
    lorebook(&state, LoreLevel::World, world, &action, &bytes).await
}

/// Attach a lorebook to a campaign (`attach`) or detach it (`detach`; 400 when it is
/// not attached there).
#[utoipa::path(post, path = "/api/campaign/{campaign}/lorebook/{action}", request_body = LorebookBody,
    params(("campaign" = String, Path), ("action" = String, Path, description = "attach or detach")),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn campaign_lorebook(
    State(state): State<Arc<AppState>>,
    Path((campaign, action)): Path<(String, String)>,
    bytes: Bytes,
) -> Result<axum::Json<Authored>, ApiError> {
    lorebook(&state, LoreLevel::Campaign, campaign, &action, &bytes).await
}

/// One hand edit of a campaign's state: exactly one of `tracker` (with `value`; without
/// one, or `null`, the tracker is removed), `add_fact`, `remove_fact`, `elapsed_minutes`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct StateBody {
    tracker: Option<String>,
    /// The tracker's new value: any JSON (a number, a text, a list, …).
    value: Option<Value>,
    add_fact: Option<String>,
    remove_fact: Option<String>,
    /// The in-fiction time since the campaign began.
    elapsed_minutes: Option<u64>,
}

/// Edit a campaign's trackers, facts or time by hand (kept in its history, as the
/// Campaign panel's edits are).
#[utoipa::path(post, path = "/api/campaign/{campaign}/state", request_body = StateBody, params(("campaign" = String, Path)),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn campaign_state(State(state): State<Arc<AppState>>, Path(campaign): Path<String>, bytes: Bytes) -> Result<axum::Json<Authored>, ApiError> {
    let StateBody { tracker, value, add_fact, remove_fact, elapsed_minutes } = body(&bytes)?;
    if value.is_some() && tracker.is_none() {
        return Err(ApiError::bad_request("invalid body: `value` goes with `tracker`"));
    }
    let mut edits: Vec<StateEdit> = Vec::new();
    edits.extend(tracker.map(|name| StateEdit::Tracker { name, value }));
    edits.extend(add_fact.map(|fact| StateEdit::AddFact { fact }));
    edits.extend(remove_fact.map(|fact| StateEdit::RemoveFact { fact }));
    edits.extend(elapsed_minutes.map(|minutes| StateEdit::Elapsed { minutes }));
    if edits.len() != 1 {
        return Err(ApiError::bad_request(format!(
            "invalid body: give exactly one of `tracker`, `add_fact`, `remove_fact`, `elapsed_minutes` (got {})",
            edits.len()
        )));
    }
    let edit = edits.remove(0);
    author(&state, AuthorCommand::EditState { campaign, edit }, true).await
}

/// The fields of a character's state to change in a scene; what is absent stays.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CharacterStateBody {
    location: Option<String>,
    mood: Option<String>,
    clothing: Option<String>,
    activity: Option<String>,
    intentions: Option<String>,
}

/// Edit a character's state in a scene by hand (the fields given only).
#[utoipa::path(post, path = "/api/scene/{scene}/character/{character}/state", request_body = CharacterStateBody,
    params(("scene" = String, Path), ("character" = String, Path)),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn character_state(
    State(state): State<Arc<AppState>>,
    Path((scene, character)): Path<(String, String)>,
    bytes: Bytes,
) -> Result<axum::Json<Authored>, ApiError> {
    let CharacterStateBody { location, mood, clothing, activity, intentions } = body(&bytes)?;
    let changed = crate::scene::model::CharacterState { location, mood, clothing, activity, intentions };
    if changed == Default::default() {
        return Err(ApiError::bad_request("nothing to change: give location, mood, clothing, activity or intentions"));
    }
    author(&state, AuthorCommand::EditCharacterState { scene, character, state: changed }, false).await
}
