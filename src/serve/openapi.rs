//! `GET /api/openapi.json`: the API described from its own types and handlers (utoipa),
//! so the document cannot drift from what the server does.

use super::AppState;
use axum::Router;
use axum::routing::get;
use std::sync::Arc;
use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
    info(title = "Lorekeeper", description = "The Lorekeeper engine over HTTP: the identity predecessor's API, scenes, chat, memory and the library."),
    paths(
        super::identity::start,
        super::identity::status,
        super::identity::checkpoint,
        super::identity::final_profile,
        super::identity::approve,
        super::identity::feedback,
        super::identity::socket,
        super::play::scenes,
        super::play::scene_state,
        super::play::scene_lore,
        super::play::scene_transcript,
        super::play::scene_message,
        super::play::scene_cast,
        super::play::scene_undo,
        super::play::round,
        super::play::cancel_round,
        super::play::scene_socket,
        super::play::chat_send,
        super::play::chat_history,
        super::play::chat_socket,
        super::play::chat_control,
        super::play::export_card,
        super::play::export_lorebook,
        super::play::memory_search,
        super::play::memory_models,
        super::play::memory_use_model,
        super::memory::pin,
        super::memory::edit,
        super::memory::remove,
        super::memory::forget,
        super::play::import,
    ),
    components(schemas(super::ErrorBody))
)]
pub struct ApiDoc;

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/api/openapi.json", get(|| async { axum::Json(ApiDoc::openapi()) }))
}

/// The document, for tools and tests.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}
