//! `GET /api/providers`: the provider profiles, which one is selected and the role map, as
//! `lorekeeper providers list` lists them (the engine's `ProfileList`). Read-only: a key is
//! never in it (only the variable it is read from), and profiles are changed from the CLI
//! or the workbench, which own the config file.

use super::AppState;
use crate::engine::ProfileList;
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use std::sync::Arc;

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/api/providers", get(list))
}

/// Every provider profile (kind, model, endpoint as scheme, host and port, the key's
/// environment variable, context size, the roles mapped to it), the selected (default)
/// profile and the role map.
#[utoipa::path(get, path = "/api/providers", responses((status = 200, body = ProfileList)))]
pub(super) async fn list(State(state): State<Arc<AppState>>) -> axum::Json<ProfileList> {
    axum::Json(ProfileList::of(&state.engine.context().config()))
}
