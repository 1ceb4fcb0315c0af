//! A chat's Author's Note over HTTP: read it, write it whole, remove it — the engine
//! command `chat note` sends, with the statuses the other chat routes answer (400 a bad
//! body naming the field, 404 an unknown character, 409 a reply being written).

use super::play::{character_id, chat_refusal};
use super::{ApiError, AppState, ErrorBody, Path, body};
use crate::companion::model::{AuthorNote, NotePosition, NoteRole};
use crate::companion::{CompanionCommand, CompanionEvent};
use crate::engine::{Command, Event};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::get;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const QUICK_LIMIT: Duration = Duration::from_secs(60);

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/api/chat/{character}/note", get(note).put(put_note).delete(delete_note))
}

/// What `PUT …/note` takes: the note whole; a field left out takes SillyTavern's default
/// (depth 4, every 1, role `system`, position `in_chat`).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NoteBody {
    text: String,
    #[serde(default)]
    depth: Option<u32>,
    /// Sent with every Nth user message (1: every one, 0: paused).
    #[serde(default)]
    every: Option<u32>,
    /// `system`, `user` or `assistant`.
    #[serde(default)]
    role: Option<String>,
    /// `in_chat`, `before_character` or `after_character`.
    #[serde(default)]
    position: Option<String>,
}

impl NoteBody {
    fn note(self) -> Result<AuthorNote, ApiError> {
        let d = AuthorNote::default();
        let role = match self.role.as_deref().map(str::trim) {
            None => d.role,
            Some("system") => NoteRole::System,
            Some("user") => NoteRole::User,
            Some("assistant") => NoteRole::Assistant,
            Some(other) => return Err(ApiError::bad_request(format!("invalid body: `role` {other:?}: system, user or assistant"))),
        };
        let position = match self.position.as_deref().map(str::trim) {
            None => d.position,
            Some("in_chat" | "chat") => NotePosition::InChat,
            Some("before_character" | "before") => NotePosition::BeforeCharacter,
            Some("after_character" | "after") => NotePosition::AfterCharacter,
            Some(other) => return Err(ApiError::bad_request(format!("invalid body: `position` {other:?}: in_chat, before_character or after_character"))),
        };
        Ok(AuthorNote { text: self.text, depth: self.depth.unwrap_or(d.depth), every: self.every.unwrap_or(d.every), role, position })
    }
}

/// The note and where the chat's count stands.
fn shown(note: Option<&AuthorNote>, user_messages: u32) -> Value {
    json!({
        "author_note": note,
        "user_messages": user_messages,
        "sent_with_next_message": note.is_none_or(|n| n.due(user_messages + 1)),
        "summary": note.map(crate::companion::note_summary),
    })
}

async fn read(state: &AppState, character: String) -> Result<Value, ApiError> {
    match state.ask(Command::Companion(CompanionCommand::History { character, limit: 1 }), QUICK_LIMIT).await? {
        Event::Companion(CompanionEvent::History { author_note, user_messages, .. }) => Ok(shown(author_note.as_ref(), user_messages)),
        other => Err(chat_refusal(other)),
    }
}

async fn write(state: &AppState, character: String, note: Option<AuthorNote>) -> Result<Value, ApiError> {
    match state.ask(Command::Companion(CompanionCommand::AuthorNote { character: character.clone(), note }), QUICK_LIMIT).await? {
        Event::Companion(CompanionEvent::Changed { .. }) => read(state, character).await,
        other => Err(chat_refusal(other)),
    }
}

/// The chat's Author's Note (`author_note` null: none), how many user messages the chat
/// holds, and whether the note goes with the next one.
#[utoipa::path(get, path = "/api/chat/{character}/note", params(("character" = String, Path)),
    responses((status = 200, body = Object, description = "`author_note` (text, depth, every, role, position; null: none), `user_messages`, \
`sent_with_next_message`, `summary`"), (status = 404, body = ErrorBody)))]
pub(super) async fn note(State(state): State<Arc<AppState>>, Path(character): Path<String>) -> Result<axum::Json<Value>, ApiError> {
    let id = character_id(&state, &character)?.id;
    read(&state, id).await.map(axum::Json)
}

/// Write the chat's Author's Note whole, from the next message on; answers as `GET` does.
#[utoipa::path(put, path = "/api/chat/{character}/note", request_body = NoteBody, params(("character" = String, Path)),
    responses((status = 200, body = Object, description = "the note as kept, as `GET` answers"), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(super) async fn put_note(State(state): State<Arc<AppState>>, Path(character): Path<String>, bytes: Bytes) -> Result<axum::Json<Value>, ApiError> {
    let note = body::<NoteBody>(&bytes)?.note()?;
    let id = character_id(&state, &character)?.id;
    write(&state, id, Some(note)).await.map(axum::Json)
}

/// Remove the chat's Author's Note.
#[utoipa::path(delete, path = "/api/chat/{character}/note", params(("character" = String, Path)),
    responses((status = 200, body = Object, description = "as `GET` answers, `author_note` null"), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
pub(super) async fn delete_note(State(state): State<Arc<AppState>>, Path(character): Path<String>) -> Result<axum::Json<Value>, ApiError> {
    let id = character_id(&state, &character)?.id;
    write(&state, id, None).await.map(axum::Json)
}
