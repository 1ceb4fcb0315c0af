//! What `lorekeeper chat` does to a chat as a whole, over HTTP: the persona played in it,
//! a branch, a new chat, the chats put aside (list, open, rename, delete) and chat files
//! (export, import a SillyTavern `.jsonl`). Each route sends the engine command the CLI
//! sends and answers with the event it answers with (`changed`, `chats`, `imported`),
//! with the statuses the other chat routes answer: 400 a bad body naming the field, 404
//! an unknown character or saved chat, 409 a reply being written.

use super::play::{character_id, chat_refusal, no_fields};
use super::{ApiError, AppState, ErrorBody, Path, Query, body};
use crate::companion::chats::ChatFormat;
use crate::companion::{CompanionCommand, CompanionEvent};
use crate::engine::{Command, Event};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

const QUICK_LIMIT: Duration = Duration::from_secs(60);
/// An import embeds every message of the file: minutes for a long chat on a small machine.
const IMPORT_LIMIT: Duration = Duration::from_secs(30 * 60);

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/chat/{character}/persona", post(persona))
        .route("/api/chat/{character}/branch", post(branch))
        .route("/api/chat/{character}/new", post(new_chat))
        .route("/api/chat/{character}/chats", get(chats))
        .route("/api/chat/{character}/chats/{chat}", delete(delete_chat))
        .route("/api/chat/{character}/chats/{chat}/open", post(open_chat))
        .route("/api/chat/{character}/chats/{chat}/rename", post(rename_chat))
        .route("/api/chat/{character}/export", get(export))
        .route("/api/chat/{character}/import", post(import))
}

/// Whether `path` is the chat import, which takes a chat file as large as the CLI reads.
pub(super) fn is_chat_import(path: &str) -> bool {
    path.starts_with("/api/chat/") && path.ends_with("/import")
}

/// Send `command` and answer with the event it settles with, if it is one `wanted` takes;
/// a failure with the status its fault says.
async fn ask(state: &AppState, command: CompanionCommand, limit: Duration, wanted: fn(&CompanionEvent) -> bool) -> Result<axum::Json<Value>, ApiError> {
    match state.ask(Command::Companion(command), limit).await? {
        Event::Companion(e) if wanted(&e) => Ok(axum::Json(serde_json::to_value(e).map_err(ApiError::internal)?)),
        other => Err(chat_refusal(other)),
    }
}

fn is_changed(e: &CompanionEvent) -> bool {
    matches!(e, CompanionEvent::Changed { .. })
}

fn is_chats(e: &CompanionEvent) -> bool {
    matches!(e, CompanionEvent::Chats { .. })
}

/// What `…/persona` takes: `{"persona": "<name or id>"}`, or `{"persona": null}` to play
/// the configured name (`persona use --chat none`).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(super) struct PersonaBody {
    /// A persona's name or id; null: none.
    #[allow(dead_code)]
    persona: Option<String>,
}

/// Play a persona in this chat, or none (`{"persona": null}`: the configured name), as
/// `persona use --chat` does.
#[utoipa::path(post, path = "/api/chat/{character}/persona", request_body = PersonaBody, params(("character" = String, Path)),
    responses((status = 200, body = Object, description = "the `changed` event: `action` `persona <name>` or `persona none`"),
        (status = 400, body = ErrorBody, description = "a bad body, or no such persona"), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(super) async fn persona(State(state): State<Arc<AppState>>, Path(character): Path<String>, bytes: Bytes) -> Result<axum::Json<Value>, ApiError> {
    // `persona` must be said, even as null: a body that forgot it must not drop the persona.
    let request: serde_json::Map<String, Value> = body(&bytes)?;
    if let Some(other) = request.keys().find(|k| *k != "persona") {
        return Err(ApiError::bad_request(format!("invalid body: unknown field `{other}`, expected `persona`")));
    }
    let persona = match request.get("persona") {
        None => return Err(ApiError::bad_request("invalid body: `persona` is missing (a persona's name or id, or null for none)")),
        Some(Value::Null) => None,
        Some(Value::String(name)) if name.trim().is_empty() || name.trim().eq_ignore_ascii_case("none") => None,
        Some(Value::String(name)) => Some(name.clone()),
        Some(_) => return Err(ApiError::bad_request("invalid body: `persona` is a persona's name or id, or null")),
    };
    let id = character_id(&state, &character)?.id;
    ask(&state, CompanionCommand::UsePersona { character: id, persona }, QUICK_LIMIT, is_changed).await
}

/// What `…/branch` takes.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct BranchBody {
    /// A message id from the history (`messages[].id`; `greeting` to keep only the greeting).
    message: String,
}

/// Branch at a message: the chat as it is is saved whole (see `…/chats`); the chat played
/// keeps the exchanges up to that message's.
#[utoipa::path(post, path = "/api/chat/{character}/branch", request_body = BranchBody, params(("character" = String, Path)),
    responses((status = 200, body = Object, description = "the `changed` event: `action` names the saved original"),
        (status = 400, body = ErrorBody, description = "a bad body, no such message, or an empty chat"), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
pub(super) async fn branch(State(state): State<Arc<AppState>>, Path(character): Path<String>, bytes: Bytes) -> Result<axum::Json<Value>, ApiError> {
    let request: BranchBody = body(&bytes)?;
    let id = character_id(&state, &character)?.id;
    ask(&state, CompanionCommand::Branch { character: id, message: request.message }, QUICK_LIMIT, is_changed).await
}

/// Start a new chat: the chat played is saved whole (see `…/chats`) and the new one opens
/// with the greeting; the persona played stays.
#[utoipa::path(post, path = "/api/chat/{character}/new", params(("character" = String, Path)),
    responses((status = 200, body = Object, description = "the `changed` event: `action` `new chat`, naming the saved chat when there was one"),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(super) async fn new_chat(State(state): State<Arc<AppState>>, Path(character): Path<String>, bytes: Bytes) -> Result<axum::Json<Value>, ApiError> {
    no_fields(&bytes, "new")?;
    let id = character_id(&state, &character)?.id;
    ask(&state, CompanionCommand::NewChat { character: id }, QUICK_LIMIT, is_changed).await
}

/// The chats put aside for a character (branch originals, chats switched away from or
/// replaced by an import), newest first.
#[utoipa::path(get, path = "/api/chat/{character}/chats", params(("character" = String, Path)),
    responses((status = 200, body = Object, description = "the `chats` event: `saved`, each with `id`, `title`, `saved_at`, `turns`"),
        (status = 404, body = ErrorBody)))]
pub(super) async fn chats(State(state): State<Arc<AppState>>, Path(character): Path<String>) -> Result<axum::Json<Value>, ApiError> {
    let id = character_id(&state, &character)?.id;
    ask(&state, CompanionCommand::Chats { character: id }, QUICK_LIMIT, is_chats).await
}

/// Play a saved chat; the chat played is saved in its place.
#[utoipa::path(post, path = "/api/chat/{character}/chats/{chat}/open", params(("character" = String, Path), ("chat" = String, Path, description = "a saved chat's id")),
    responses((status = 200, body = Object, description = "the `changed` event: `action` `opened`, naming the chat saved in its place"),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody, description = "no such character or saved chat"), (status = 409, body = ErrorBody)))]
pub(super) async fn open_chat(
    State(state): State<Arc<AppState>>,
    Path((character, chat)): Path<(String, String)>,
    bytes: Bytes,
) -> Result<axum::Json<Value>, ApiError> {
    no_fields(&bytes, "open")?;
    let id = character_id(&state, &character)?.id;
    ask(&state, CompanionCommand::Open { character: id, chat }, IMPORT_LIMIT, is_changed).await
}

/// What `…/rename` takes.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RenameBody {
    title: String,
}

/// Give a saved chat a title of the user's own.
#[utoipa::path(post, path = "/api/chat/{character}/chats/{chat}/rename", request_body = RenameBody,
    params(("character" = String, Path), ("chat" = String, Path, description = "a saved chat's id")),
    responses((status = 200, body = Object, description = "the `chats` event: the saved chats as they now stand"),
        (status = 400, body = ErrorBody, description = "a bad body or an empty title"), (status = 404, body = ErrorBody, description = "no such character or saved chat")))]
pub(super) async fn rename_chat(
    State(state): State<Arc<AppState>>,
    Path((character, chat)): Path<(String, String)>,
    bytes: Bytes,
) -> Result<axum::Json<Value>, ApiError> {
    let request: RenameBody = body(&bytes)?;
    let id = character_id(&state, &character)?.id;
    ask(&state, CompanionCommand::RenameChat { character: id, chat, title: request.title }, QUICK_LIMIT, is_chats).await
}

/// Delete a saved chat for good (the chat played is not touched).
#[utoipa::path(delete, path = "/api/chat/{character}/chats/{chat}", params(("character" = String, Path), ("chat" = String, Path, description = "a saved chat's id")),
    responses((status = 200, body = Object, description = "the `chats` event: the saved chats left"),
        (status = 404, body = ErrorBody, description = "no such character or saved chat")))]
pub(super) async fn delete_chat(State(state): State<Arc<AppState>>, Path((character, chat)): Path<(String, String)>) -> Result<axum::Json<Value>, ApiError> {
    let id = character_id(&state, &character)?.id;
    ask(&state, CompanionCommand::DeleteChat { character: id, chat }, QUICK_LIMIT, is_chats).await
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExportQuery {
    #[serde(default)]
    format: Option<String>,
}

/// A private folder for one chat file on its way in or out.
fn private_dir() -> Result<std::path::PathBuf, ApiError> {
    let dir = std::env::temp_dir().join(format!("lorekeeper-chat-{}", crate::store::new_id()));
    std::fs::create_dir_all(&dir).map_err(ApiError::internal)?;
    Ok(dir)
}

/// The chat played as a file: `?format=jsonl` (default; a SillyTavern chat file, swipes
/// included), `markdown` or `json` (`{character, user, messages}`), as `chat export` writes it.
#[utoipa::path(get, path = "/api/chat/{character}/export", params(("character" = String, Path),
        ("format" = Option<String>, Query, description = "jsonl (default), markdown or json")),
    responses((status = 200, body = String, description = "the file (`application/jsonl`, `text/markdown` or `application/json`)"),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn export(State(state): State<Arc<AppState>>, Path(character): Path<String>, Query(query): Query<ExportQuery>) -> Result<Response, ApiError> {
    let (format, content_type, extension) = match query.format.as_deref().map(str::trim).unwrap_or("jsonl") {
        "jsonl" => (ChatFormat::Jsonl, "application/jsonl; charset=utf-8", "jsonl"),
        "markdown" | "md" => (ChatFormat::Markdown, "text/markdown; charset=utf-8", "md"),
        "json" => (ChatFormat::Json, "application/json", "json"),
        other => return Err(ApiError::bad_request(format!("invalid query: `format` {other:?}: jsonl, markdown or json"))),
    };
    let info = character_id(&state, &character)?;
    let dir = private_dir()?;
    let path = dir.join(format!("chat.{extension}"));
    let answer = state.ask(Command::Companion(CompanionCommand::Export { character: info.id, path: path.clone(), format }), QUICK_LIMIT).await;
    let text = match answer {
        Ok(Event::Companion(CompanionEvent::Exported { .. })) => std::fs::read(&path).map_err(ApiError::internal),
        Ok(other) => Err(chat_refusal(other)),
        Err(e) => Err(e),
    };
    let _ = std::fs::remove_dir_all(&dir);
    let text = text?;
    // A name the browser saves it under, from the character's name.
    let stem: String = info.name.chars().filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' ')).take(80).collect();
    let stem = if stem.trim().is_empty() { "chat".to_string() } else { stem.trim().to_string() };
    let disposition = format!("attachment; filename=\"{stem}.{extension}\"");
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, content_type.to_string()), (header::CONTENT_DISPOSITION, disposition)], text).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ImportQuery {
    /// The file's name: the title of the chat it replaces says it.
    #[serde(default)]
    name: Option<String>,
}

/// A chat file's bytes, as they are.
#[derive(utoipa::ToSchema)]
#[schema(value_type = String, format = Binary)]
pub(super) struct ChatUpload(#[allow(dead_code)] Vec<u8>);

/// Import a SillyTavern chat file (`.jsonl`, sent as the body) as the chat played; the
/// chat it replaces is saved (see `…/chats`), as `chat import` does.
#[utoipa::path(post, path = "/api/chat/{character}/import", params(("character" = String, Path), ("name" = Option<String>, Query, description = "the file's name")),
    request_body(content = ChatUpload, content_type = "application/octet-stream"),
    responses((status = 200, body = Object, description = "the `imported` event: `imported` with `exchanges`, `saved` (the replaced chat's id) and `notes`"),
        (status = 400, body = ErrorBody, description = "an empty body, or a malformed chat file (the line is named); nothing changed"),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody, description = "over 64 MB")))]
pub(super) async fn import(
    State(state): State<Arc<AppState>>,
    Path(character): Path<String>,
    Query(query): Query<ImportQuery>,
    bytes: Bytes,
) -> Result<axum::Json<Value>, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("the body is empty: send the chat file's bytes"));
    }
    let id = character_id(&state, &character)?.id;
    let name = query.name.unwrap_or_else(|| "chat.jsonl".into());
    let safe: String = name.chars().filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | ' ')).take(100).collect();
    let safe = safe.trim().trim_start_matches('.').to_string();
    let dir = private_dir()?;
    let path = dir.join(if safe.is_empty() { "chat.jsonl".to_string() } else { safe });
    std::fs::write(&path, &bytes).map_err(ApiError::internal)?;
    let answer = ask(&state, CompanionCommand::Import { character: id, path }, IMPORT_LIMIT, |e| matches!(e, CompanionEvent::Imported { .. })).await;
    let _ = std::fs::remove_dir_all(&dir);
    answer
}
