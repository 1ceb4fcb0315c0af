//! A lorebook over HTTP, as the Library panel's lore editor and `lorekeeper lorebook` handle
//! it: what it holds and where it is attached, renamed or deleted (detached from
//! everything in the same transaction), its entries listed, added, edited (the fields
//! `lorebook entry add|edit` takes, the same checks), deleted, duplicated and moved, the
//! activation test, and the book attached to a character or to one character's chat
//! (worlds and campaigns are in `author`). Each change is the engine's command, answered
//! with its own event: the entries as saved, or the refusal with whose fault it is.

use super::author::{Authored, author};
use super::{ApiError, AppState, ErrorBody, Path, Query, body};
use crate::engine::{Command, Event};
use crate::interop::{InteropCommand, InteropEvent};
use crate::scene::author::AuthorCommand;
use crate::scene::authoring::LoreLevel;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// An entry change is one transaction; a test may embed its text once.
const LIMIT: Duration = Duration::from_secs(60);

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/lorebook/{lorebook}", get(show).delete(remove))
        .route("/api/lorebook/{lorebook}/rename", post(rename))
        .route("/api/lorebook/{lorebook}/entries", get(entries).post(add_entry))
        .route("/api/lorebook/{lorebook}/entry/{index}", axum::routing::delete(delete_entry))
        .route("/api/lorebook/{lorebook}/entry/{index}/edit", post(edit_entry))
        .route("/api/lorebook/{lorebook}/entry/{index}/duplicate", post(duplicate_entry))
        .route("/api/lorebook/{lorebook}/entry/{index}/move", post(move_entry))
        .route("/api/lorebook/{lorebook}/test", post(test))
        .route("/api/character/{character_id}/lorebook/{action}", post(character_lorebook))
        .route("/api/chat/{character}/lorebook/{action}", post(chat_lorebook))
}

/// A lorebook: what it holds and where it fires.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct LorebookInUse {
    id: String,
    name: String,
    entries: usize,
    /// Where it is attached, in words: `world "Eldoria"`, `campaign "The Siege"`,
    /// `character "Mira"`, `the chat with "Mira"`, `the card of "Mira"` (its own book).
    bound: Vec<String>,
}

/// A store read refused: 404 for a book that is not there (or a name several share,
/// which names their ids), 400 for what cannot be done, 500 for the library's fault.
fn refused(e: crate::store::StoreError) -> ApiError {
    use crate::store::StoreError;
    match e {
        StoreError::NotFound(message) => ApiError::not_found(message),
        StoreError::Invalid(message) => ApiError::bad_request(message),
        other => ApiError::internal(other),
    }
}

fn use_of(state: &AppState, key: &str) -> Result<crate::scene::lorebooks::LorebookUse, ApiError> {
    let reader = state.store().reader().map_err(ApiError::internal)?;
    crate::scene::lorebooks::LorebookUse::of(&reader, key).map_err(refused)
}

/// What a lorebook (id or name) holds and where it is attached: what deleting it would
/// delete and detach.
#[utoipa::path(get, path = "/api/lorebook/{lorebook}", params(("lorebook" = String, Path)),
    responses((status = 200, body = LorebookInUse), (status = 404, body = ErrorBody)))]
pub(super) async fn show(State(state): State<Arc<AppState>>, Path(lorebook): Path<String>) -> Result<axum::Json<LorebookInUse>, ApiError> {
    let found = use_of(&state, &lorebook)?;
    Ok(axum::Json(LorebookInUse { id: found.id, name: found.name, entries: found.entries, bound: found.bound }))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DeleteQuery {
    /// Delete it although it holds entries or is attached somewhere (the CLI's `--yes`).
    #[serde(default)]
    confirm: bool,
}

/// Delete a lorebook with its entries, detached from every world, campaign, character and
/// chat in the same transaction. Unless `?confirm=true`, one that holds entries or is
/// attached anywhere is refused with a 409 that says what would go, as the CLI refuses
/// without `--yes`.
#[utoipa::path(delete, path = "/api/lorebook/{lorebook}", params(("lorebook" = String, Path), ("confirm" = Option<bool>, Query)),
    responses((status = 200, body = Authored, description = "`impact`: `{lore_entries, detached: [what it was attached to]}`"),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "not confirmed, and it holds entries or is attached somewhere (named)")))]
pub(super) async fn remove(State(state): State<Arc<AppState>>, Path(lorebook): Path<String>, Query(q): Query<DeleteQuery>) -> Result<axum::Json<Authored>, ApiError> {
    let conflict = |found: &crate::scene::lorebooks::LorebookUse| {
        ApiError::unconfirmed(format!("deleting lorebook {:?} {}; send ?confirm=true to delete it", found.name, found.consequences()))
    };
    let found = use_of(&state, &lorebook)?;
    if !q.confirm && !found.is_empty() {
        return Err(conflict(&found));
    }
    match author(&state, AuthorCommand::DeleteLorebook { lorebook: found.id.clone(), confirmed: q.confirm }, false).await {
        // An entry or an attachment came since it was read.
        Err(e) if !q.confirm && e.status() == StatusCode::BAD_REQUEST => match use_of(&state, &found.id) {
            Ok(now) if !now.is_empty() => Err(conflict(&now)),
            _ => Err(e),
        },
        answer => answer,
    }
}

/// A lorebook's new name.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct LorebookRename {
    /// No other lorebook may have it (case aside).
    name: String,
}

/// Rename a lorebook (id or name); a name another book has is refused.
#[utoipa::path(post, path = "/api/lorebook/{lorebook}/rename", request_body = LorebookRename, params(("lorebook" = String, Path)),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody, description = "an empty name, or one another lorebook has"),
        (status = 404, body = ErrorBody)))]
pub(super) async fn rename(State(state): State<Arc<AppState>>, Path(lorebook): Path<String>, bytes: Bytes) -> Result<axum::Json<Authored>, ApiError> {
    let LorebookRename { name } = body(&bytes)?;
    author(&state, AuthorCommand::RenameLorebook { lorebook, name }, false).await
}

/// A lorebook's entries in their order (an entry's index is its place in this list).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct LorebookEntries {
    id: String,
    name: String,
    /// Each entry with every setting: keys, secondary_keys, content, comment, constant,
    /// enabled, insertion_order, position, depth, role, probability, group, sticky, …
    #[schema(value_type = Vec<Object>)]
    entries: Value,
    /// What the change did (`added`, `saved`, `deleted`, `duplicated`, `moved`) and the
    /// index it concerns; absent for a list.
    #[serde(skip_serializing_if = "Option::is_none")]
    changed: Option<EntryChange>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct EntryChange {
    action: String,
    index: usize,
}

/// A refused interop command, with the status its fault says.
fn interop_refusal(answer: Event) -> ApiError {
    use crate::context::Fault;
    match answer {
        Event::Interop(InteropEvent::Refused { message, fault, .. }) => match fault {
            Fault::NotFound => ApiError::not_found(message),
            Fault::Library | Fault::Provider => ApiError::internal(message),
            _ => ApiError::bad_request(message),
        }
        .with_fault(fault.as_str()),
        other => ApiError::internal(format!("unexpected answer: {}", serde_json::to_value(&other).map(|v| v["event"].to_string()).unwrap_or_default())),
    }
}

/// Send an entry command and answer with the entries as saved.
async fn change(state: &AppState, command: InteropCommand) -> Result<axum::Json<LorebookEntries>, ApiError> {
    match state.ask(Command::Interop(command), LIMIT).await? {
        Event::Interop(InteropEvent::Entries { id, name, entries, changed }) => Ok(axum::Json(LorebookEntries {
            id,
            name,
            entries: serde_json::to_value(entries).map_err(ApiError::internal)?,
            changed: changed.map(|(action, index)| EntryChange { action, index }),
        })),
        other => Err(interop_refusal(other)),
    }
}

/// An entry's index from the path, read after the body so a bad body is named first.
fn index(text: &str) -> Result<usize, ApiError> {
    text.trim().parse().map_err(|_| ApiError::bad_request(format!("invalid path: the entry index {text:?} is not a number (see …/entries)")))
}

/// A lorebook's entries in their order, with every setting.
#[utoipa::path(get, path = "/api/lorebook/{lorebook}/entries", params(("lorebook" = String, Path)),
    responses((status = 200, body = LorebookEntries), (status = 404, body = ErrorBody)))]
pub(super) async fn entries(State(state): State<Arc<AppState>>, Path(lorebook): Path<String>) -> Result<axum::Json<LorebookEntries>, ApiError> {
    change(&state, InteropCommand::Entries { lorebook }).await
}

/// Add an entry at the end of a lorebook with the settings given (an empty body adds a
/// blank one), checked as the entry editor checks it.
#[utoipa::path(post, path = "/api/lorebook/{lorebook}/entries", request_body = crate::interop::EntryPatch, params(("lorebook" = String, Path)),
    responses((status = 200, body = LorebookEntries), (status = 400, body = ErrorBody, description = "a setting out of range or a key that is not a valid regular expression (named)"),
        (status = 404, body = ErrorBody)))]
pub(super) async fn add_entry(State(state): State<Arc<AppState>>, Path(lorebook): Path<String>, bytes: Bytes) -> Result<axum::Json<LorebookEntries>, ApiError> {
    let patch: crate::interop::EntryPatch = if bytes.iter().all(u8::is_ascii_whitespace) { Default::default() } else { body(&bytes)? };
    change(&state, InteropCommand::PatchEntry { lorebook, ordinal: None, patch: Box::new(patch) }).await
}

/// Change the settings given of the entry at `index`; the others stay.
#[utoipa::path(post, path = "/api/lorebook/{lorebook}/entry/{index}/edit", request_body = crate::interop::EntryPatch,
    params(("lorebook" = String, Path), ("index" = usize, Path)),
    responses((status = 200, body = LorebookEntries), (status = 400, body = ErrorBody, description = "nothing to change, a setting out of range or a bad key (named)"),
        (status = 404, body = ErrorBody, description = "no such lorebook, or no entry at that index")))]
pub(super) async fn edit_entry(
    State(state): State<Arc<AppState>>,
    Path((lorebook, at)): Path<(String, String)>,
    bytes: Bytes,
) -> Result<axum::Json<LorebookEntries>, ApiError> {
    let patch: crate::interop::EntryPatch = body(&bytes)?;
    if patch.is_empty() {
        return Err(ApiError::bad_request("nothing to change: give at least one setting (comment, keys, content, …)"));
    }
    let ordinal = index(&at)?;
    change(&state, InteropCommand::PatchEntry { lorebook, ordinal: Some(ordinal), patch: Box::new(patch) }).await
}

/// Delete the entry at `index`; the entries after it move up one.
#[utoipa::path(delete, path = "/api/lorebook/{lorebook}/entry/{index}", params(("lorebook" = String, Path), ("index" = usize, Path)),
    responses((status = 200, body = LorebookEntries), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn delete_entry(State(state): State<Arc<AppState>>, Path((lorebook, at)): Path<(String, String)>) -> Result<axum::Json<LorebookEntries>, ApiError> {
    let ordinal = index(&at)?;
    change(&state, InteropCommand::DeleteEntry { lorebook, ordinal }).await
}

/// Copy the entry at `index` to the end of its book.
#[utoipa::path(post, path = "/api/lorebook/{lorebook}/entry/{index}/duplicate", params(("lorebook" = String, Path), ("index" = usize, Path)),
    responses((status = 200, body = LorebookEntries), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn duplicate_entry(
    State(state): State<Arc<AppState>>,
    Path((lorebook, at)): Path<(String, String)>,
    bytes: Bytes,
) -> Result<axum::Json<LorebookEntries>, ApiError> {
    super::play::no_fields(&bytes, "duplicate")?;
    let ordinal = index(&at)?;
    change(&state, InteropCommand::DuplicateEntry { lorebook, ordinal }).await
}

/// Where an entry moves.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct EntryMove {
    /// Its new index, 0 to the last (past the last: a 400).
    to: usize,
}

/// Move the entry at `index` to another index; the others keep their order.
#[utoipa::path(post, path = "/api/lorebook/{lorebook}/entry/{index}/move", request_body = EntryMove,
    params(("lorebook" = String, Path), ("index" = usize, Path)),
    responses((status = 200, body = LorebookEntries), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn move_entry(
    State(state): State<Arc<AppState>>,
    Path((lorebook, at)): Path<(String, String)>,
    bytes: Bytes,
) -> Result<axum::Json<LorebookEntries>, ApiError> {
    let EntryMove { to } = body(&bytes)?;
    let from = index(&at)?;
    change(&state, InteropCommand::MoveEntry { lorebook, from, to }).await
}

/// A text to test a lorebook on.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct LoreTestBody {
    text: String,
}

/// Why each entry fires or stays out.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct LoreTestAnswer {
    id: String,
    text: String,
    /// Per entry: `ordinal`, `label`, `fired`, `reason`.
    #[schema(value_type = Vec<Object>)]
    verdicts: Value,
}

/// Run a lorebook's activation on a text, as a chat would, and say why each entry fires
/// or stays out (`lorekeeper lorebook test`, the lore editor's test box).
#[utoipa::path(post, path = "/api/lorebook/{lorebook}/test", request_body = LoreTestBody, params(("lorebook" = String, Path)),
    responses((status = 200, body = LoreTestAnswer), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn test(State(state): State<Arc<AppState>>, Path(lorebook): Path<String>, bytes: Bytes) -> Result<axum::Json<LoreTestAnswer>, ApiError> {
    let LoreTestBody { text } = body(&bytes)?;
    if text.trim().is_empty() {
        return Err(ApiError::bad_request("invalid body: `text` is empty"));
    }
    match state.ask(Command::Interop(InteropCommand::TestLore { lorebook, text }), LIMIT).await? {
        Event::Interop(InteropEvent::LoreTest { id, text, verdicts }) => {
            Ok(axum::Json(LoreTestAnswer { id, text, verdicts: serde_json::to_value(verdicts).map_err(ApiError::internal)? }))
        }
        other => Err(interop_refusal(other)),
    }
}

/// A lorebook of the library, by id or name.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct LorebookChoice {
    lorebook: String,
}

/// Attach a lorebook to a character (`attach`: it fires in the character's chat and in the
/// scenes of campaigns the character is cast in, beside its card's own book) or detach it
/// (`detach`; 400 when it is not attached there), as `lorebook attach --character` does.
#[utoipa::path(post, path = "/api/character/{character_id}/lorebook/{action}", request_body = LorebookChoice,
    params(("character_id" = String, Path, description = "a character's id or name"), ("action" = String, Path, description = "attach or detach")),
    responses((status = 200, body = Authored), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn character_lorebook(
    State(state): State<Arc<AppState>>,
    Path((character, action)): Path<(String, String)>,
    bytes: Bytes,
) -> Result<axum::Json<Authored>, ApiError> {
    let LorebookChoice { lorebook } = body(&bytes)?;
    let command = match action.as_str() {
        "attach" => AuthorCommand::Attach { lorebook, level: LoreLevel::Character, owner: character },
        "detach" => AuthorCommand::Detach { lorebook, level: LoreLevel::Character, owner: character },
        other => return Err(ApiError::not_found(format!("no lorebook action {other:?}: attach or detach"))),
    };
    author(&state, command, false).await
}

/// Attach a lorebook to one character's chat only (`attach`) or detach it (`detach`; 400
/// when it is not attached there), as `lorebook attach --chat` does.
#[utoipa::path(post, path = "/api/chat/{character}/lorebook/{action}", request_body = LorebookChoice,
    params(("character" = String, Path), ("action" = String, Path, description = "attach or detach")),
    responses((status = 200, body = Object, description = "the `changed` event: `action` says what was attached or detached"),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn chat_lorebook(
    State(state): State<Arc<AppState>>,
    Path((character, action)): Path<(String, String)>,
    bytes: Bytes,
) -> Result<axum::Json<Value>, ApiError> {
    let LorebookChoice { lorebook } = body(&bytes)?;
    let attach = match action.as_str() {
        "attach" => true,
        "detach" => false,
        other => return Err(ApiError::not_found(format!("no lorebook action {other:?}: attach or detach"))),
    };
    let id = super::play::character_id(&state, &character)?.id;
    // Not there is a 404, as for a character's or a world's attachments.
    use_of(&state, &lorebook)?;
    let command = crate::companion::CompanionCommand::ChatLorebook { character: id, lorebook, attach, to_character: false };
    match state.ask(Command::Companion(command), LIMIT).await? {
        Event::Companion(e @ crate::companion::CompanionEvent::Changed { .. }) => Ok(axum::Json(serde_json::to_value(e).map_err(ApiError::internal)?)),
        other => Err(super::play::chat_refusal(other)),
    }
}
