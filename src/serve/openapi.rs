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
        super::identity::checkpoint_versions,
        super::identity::final_profile,
        super::identity::approve,
        super::identity::feedback,
        super::identity::reopen,
        super::identity::rerun,
        super::identity::keep,
        super::identity::cancel,
        super::identity::edit,
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
        super::scene_controls::redo,
        super::scene_controls::alternatives,
        super::scene_controls::use_alternative,
        super::scene_controls::mute,
        super::scene_controls::unmute,
        super::scene_controls::export,
        super::scene_controls::preview,
        super::play::scene_socket,
        super::play::chat_send,
        super::play::chat_history,
        super::play::chat_socket,
        super::play::chat_control,
        super::play::chat_cancel,
        super::chat_note::note,
        super::chat_note::put_note,
        super::chat_note::delete_note,
        super::chats::persona,
        super::chats::branch,
        super::chats::new_chat,
        super::chats::chats,
        super::chats::open_chat,
        super::chats::rename_chat,
        super::chats::delete_chat,
        super::chats::export,
        super::chats::import,
        super::play::export_card,
        super::characters::show,
        super::characters::edit,
        super::characters::remove,
        super::play::export_lorebook,
        super::play::memory_search,
        super::play::memory_models,
        super::play::memory_use_model,
        super::memory::stats,
        super::memory::injections,
        super::memory::reindex,
        super::memory::pin,
        super::memory::edit,
        super::memory::remove,
        super::memory::forget,
        super::memory::export,
        super::play::import,
        super::providers::list,
        super::author::worlds,
        super::author::characters,
        super::author::lorebooks,
        super::author::personas,
        super::author::identity_runs,
        super::author::new_world,
        super::author::new_campaign,
        super::author::new_arc,
        super::author::new_scene,
        super::author::new_persona,
        super::author::new_character,
        super::author::new_lorebook,
        super::author::edit_world,
        super::author::edit_campaign,
        super::author::edit_arc,
        super::author::edit_scene,
        super::author::edit_persona,
        super::author::delete_world,
        super::author::delete_campaign,
        super::author::delete_arc,
        super::author::delete_scene,
        super::author::delete_persona,
        super::author::campaign_cast,
        super::author::campaign_persona,
        super::author::world_lorebook,
        super::author::campaign_lorebook,
        super::author::campaign_state,
        super::author::character_state,
        super::lorebooks::show,
        super::lorebooks::remove,
        super::lorebooks::rename,
        super::lorebooks::entries,
        super::lorebooks::add_entry,
        super::lorebooks::edit_entry,
        super::lorebooks::delete_entry,
        super::lorebooks::duplicate_entry,
        super::lorebooks::move_entry,
        super::lorebooks::test,
        super::lorebooks::character_lorebook,
        super::lorebooks::chat_lorebook,
    ),
    components(schemas(super::ErrorBody)),
    modifiers(&EveryRoute)
)]
pub struct ApiDoc;

/// What every route may answer besides its own: 401 without the token (when the server
/// has one), 413 for a body over the limit, and 405 for a method a path does not take.
struct EveryRoute;

impl utoipa::Modify for EveryRoute {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{Ref, RefOr, ResponseBuilder, content::ContentBuilder};
        let error = |description: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content("application/json", ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build())
                    .build(),
            )
        };
        for item in openapi.paths.paths.values_mut() {
            let operations = [&mut item.get, &mut item.post, &mut item.delete, &mut item.put, &mut item.patch];
            for operation in operations.into_iter().flatten() {
                let responses = &mut operation.responses.responses;
                responses.entry("401".into()).or_insert_with(|| error("the server has a token and the request did not carry it"));
                if operation.request_body.is_some() {
                    responses.entry("413".into()).or_insert_with(|| error("the body is over the route's limit (2 MB; an import 64 MB)"));
                }
            }
        }
        let components = openapi.components.get_or_insert_with(Default::default);
        components.responses.insert("MethodNotAllowed".into(), error("405: the path does not take this method (every path answers so)"));
    }
}

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/api/openapi.json", get(|| async { axum::Json(ApiDoc::openapi()) }))
}

/// The document, for tools and tests.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}
