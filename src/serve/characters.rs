//! A library character over HTTP, as `lorekeeper character show|edit|delete` and the
//! workbench's library: read its sheet, change it (an imported card is edited in place,
//! so it exports with everything else it came with), or delete it with what goes with it.
//! Under `/api/characters/{character}` (an id or a name): `/api/character/{id}/…` is the
//! identity predecessor's, whose ids are identity runs.

use super::{ApiError, AppState, ErrorBody, Path, Query, body, wait_for};
use crate::engine::{Command, CoreEvent, Event};
use crate::interop::{InteropCommand, InteropEvent};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// A sheet is one row; a delete one transaction.
const LIMIT: Duration = Duration::from_secs(60);

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/characters/{character}", get(show).delete(remove))
        .route("/api/characters/{character}/edit", post(edit))
}

/// The id of the character `key` names: 404 when none does, 400 when two share the name
/// (said as such, with their ids).
fn resolve(state: &AppState, key: &str) -> Result<String, ApiError> {
    let reader = state.store().reader().map_err(ApiError::internal)?;
    match crate::character::resolve(&reader, key) {
        Ok(record) => Ok(record.id),
        Err(crate::store::StoreError::NotFound(message)) => Err(ApiError::not_found(message)),
        Err(crate::store::StoreError::Invalid(message)) => Err(ApiError::bad_request(message)),
        Err(e) => Err(ApiError::internal(e)),
    }
}

/// Send `command` about character `id` and wait for the event `pick` takes, or the
/// engine's error about that character (a 400: what the sheet refused). These commands
/// answer by event, so the answer is told from others' by the character's id.
async fn about<T>(state: &AppState, id: &str, command: InteropCommand, pick: impl Fn(&InteropEvent) -> Option<T>) -> Result<T, ApiError> {
    let mut events = state.events.subscribe();
    state.send(Command::Interop(command))?;
    let quoted = format!("{id:?}");
    let outcome = wait_for(&mut events, LIMIT, |event| match event {
        Event::Interop(e) => pick(e).map(Ok),
        Event::Core(CoreEvent::Error { context, message }) if context.contains(&quoted) => Some(Err(message.clone())),
        _ => None,
    })
    .await;
    match outcome {
        Some(Ok(answer)) => Ok(answer),
        Some(Err(message)) if message.contains("not found") => Err(ApiError::not_found(message)),
        Some(Err(message)) => Err(ApiError::bad_request(message)),
        None => Err(ApiError::internal("the engine did not answer in time")),
    }
}

fn sheet_of(id: &str, event: &InteropEvent) -> Option<Value> {
    match event {
        InteropEvent::Sheet { sheet, .. } if sheet.id == id => serde_json::to_value(sheet).ok(),
        _ => None,
    }
}

/// A character's sheet: its card's text (name, description, personality, scenario,
/// greeting, examples, system prompt, post-history instructions, notes, greetings, tags).
#[utoipa::path(get, path = "/api/characters/{character}", params(("character" = String, Path, description = "an id or a name")),
    responses((status = 200, body = Object, description = "the sheet"), (status = 404, body = ErrorBody)))]
pub(super) async fn show(State(state): State<Arc<AppState>>, Path(character): Path<String>) -> Result<axum::Json<Value>, ApiError> {
    let id = resolve(&state, &character)?;
    about(&state, &id, InteropCommand::Sheet { character: id.clone() }, |e| sheet_of(&id, e)).await.map(axum::Json)
}

/// What an edit changes: only the fields given (`character edit`'s flags).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SheetBody {
    name: Option<String>,
    description: Option<String>,
    personality: Option<String>,
    scenario: Option<String>,
    /// The greeting.
    first_mes: Option<String>,
    /// Example dialogue, `<START>` blocks.
    mes_example: Option<String>,
    system_prompt: Option<String>,
    post_history_instructions: Option<String>,
    creator_notes: Option<String>,
    alternate_greetings: Option<Vec<String>>,
    tags: Option<Vec<String>>,
}

/// Change a character's sheet; the sheet as saved. A field left out is kept.
#[utoipa::path(post, path = "/api/characters/{character}/edit", request_body = SheetBody, params(("character" = String, Path, description = "an id or a name")),
    responses((status = 200, body = Object, description = "the sheet as saved"), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn edit(State(state): State<Arc<AppState>>, Path(character): Path<String>, bytes: Bytes) -> Result<axum::Json<Value>, ApiError> {
    let b: SheetBody = body(&bytes)?;
    let edit = crate::character::SheetEdit {
        name: b.name,
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
    if edit == crate::character::SheetEdit::default() {
        return Err(ApiError::bad_request("nothing to change: give at least one field of the sheet"));
    }
    let id = resolve(&state, &character)?;
    about(&state, &id, InteropCommand::EditSheet { character: id.clone(), edit: Box::new(edit) }, |e| sheet_of(&id, e)).await.map(axum::Json)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DeleteQuery {
    /// Delete what goes with it too (the CLI's `--yes`).
    #[serde(default)]
    confirm: bool,
}

/// What a delete took.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct CharacterGone {
    id: String,
    name: String,
    /// What went with it (its identity run, chats, memories, cast places…).
    deleted_with_it: Vec<String>,
}

/// Delete a character (an identity run's character too). Unless confirmed, a delete that
/// would take anything with it (chats, memories, its run, its places in casts) is refused
/// with a 409 that says what, as the CLI refuses without `--yes`.
#[utoipa::path(delete, path = "/api/characters/{character}", params(("character" = String, Path, description = "an id or a name"),
        ("confirm" = Option<bool>, Query, description = "delete what goes with it too")),
    responses((status = 200, body = CharacterGone), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody, description = "it would take more with it: says what")))]
pub(super) async fn remove(State(state): State<Arc<AppState>>, Path(character): Path<String>, Query(query): Query<DeleteQuery>) -> Result<axum::Json<CharacterGone>, ApiError> {
    let id = resolve(&state, &character)?;
    let command = InteropCommand::DeleteCharacter { character: id.clone(), confirmed: query.confirm };
    let outcome = about(&state, &id, command, |e| match e {
        InteropEvent::CharacterDeleted { id: deleted, name, impact } if *deleted == id => Some(Ok(CharacterGone { id: deleted.clone(), name: name.clone(), deleted_with_it: impact.clone() })),
        InteropEvent::DeleteImpact { id: kept, name, impact } if *kept == id => Some(Err(ApiError::unconfirmed(format!(
            "deleting {name:?} would also delete {}; nothing was deleted: send ?confirm=true to delete it all",
            impact.join(", ")
        )))),
        _ => None,
    })
    .await?;
    outcome.map(axum::Json)
}
