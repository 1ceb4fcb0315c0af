//! `lorekeeper serve`: the engine over HTTP and WebSocket, the fourth front door beside
//! the GUI, the CLI and the tests. It speaks the identity predecessor's REST + WebSocket
//! API exactly (`identity`), so that system's scripts and frontends drive Lorekeeper
//! unchanged, and the rest of the engine in the same style (`play`).
//!
//! Like every front door it only sends [`Command`]s and reads [`Event`]s and snapshots
//! of the library: one thread drains the engine's events into a broadcast channel every
//! WebSocket subscribes to. Loopback by default; any other address needs a bearer token,
//! and then every request carries it.

mod author;
mod characters;
mod identity;
mod lorebooks;
mod memory;
pub mod openapi;
mod play;
mod providers;
mod chat_note;
mod chats;
mod scene_controls;
mod watch;

use crate::engine::{Command, EngineHandle, Event};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::broadcast;

/// Events buffered per WebSocket client before it counts as lagging (it then gets the
/// current state again instead of the events it missed).
const EVENT_BUFFER: usize = 4096;
/// The largest body a route takes: a JSON request (a start, a message, an edit).
const MAX_BODY_BYTES: usize = 2 << 20;
/// The largest file `POST /api/library/import` takes.
const MAX_IMPORT_BYTES: usize = 64 << 20;
/// How much of a body past its limit is still read and thrown away, so a client that is
/// still sending hears the 413 instead of a connection reset under its upload.
const MAX_DRAIN_BYTES: u64 = 256 << 20;

/// How the server is reached.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub addr: SocketAddr,
    /// Required of every request when set; required to be set on a non-loopback address.
    pub token: Option<String>,
    /// The one origin browsers may call from (CORS); none when unset.
    pub cors: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("refusing to listen on {0} without a token: set --token or LOREKEEPER_API_TOKEN, or listen on 127.0.0.1")]
    NoToken(SocketAddr),
    #[error("the --cors origin {0:?} is not a valid header value")]
    BadOrigin(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("the server stopped: {0}")]
    Io(#[from] std::io::Error),
}

/// What every handler is given.
pub(crate) struct AppState {
    pub engine: Arc<EngineHandle>,
    pub events: broadcast::Sender<Arc<Event>>,
    token: Option<String>,
    /// One start at a time: the next `run_started` is then the one it asked for.
    pub start_lock: tokio::sync::Mutex<()>,
}

impl AppState {
    pub fn store(&self) -> &crate::store::Store {
        &self.engine.context().store
    }

    pub fn send(&self, command: Command) -> Result<(), ApiError> {
        self.engine.send(command).map_err(|_| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the engine has stopped"))
    }

    /// Send `command` and wait up to `limit` for the event that answers it — this
    /// request's own, whatever other requests on the same scene or chat hear meanwhile.
    pub async fn ask(&self, command: Command, limit: std::time::Duration) -> Result<Event, ApiError> {
        let (reply, answer) = crate::engine::Reply::channel();
        self.send(Command::Asked { command: Box::new(command), reply })?;
        match tokio::time::timeout(limit, answer).await {
            Ok(Ok(event)) => Ok(event),
            Ok(Err(_)) => Err(ApiError::internal("the engine finished the request without an answer")),
            Err(_) => Err(ApiError::internal("no answer in time")),
        }
    }
}

/// A running server: its address, and a way to stop it.
pub struct ServerHandle {
    pub addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), std::io::Error>>>,
    runtime: tokio::runtime::Handle,
}

impl ServerHandle {
    /// Stop accepting requests and wait for the server to end.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    /// Block until the server ends (for `lorekeeper serve`).
    pub fn wait(mut self) -> Result<(), ServeError> {
        match self.task.take() {
            Some(task) => match self.runtime.block_on(task) {
                Ok(result) => result.map_err(ServeError::Io),
                Err(e) => Err(ServeError::Io(std::io::Error::other(e.to_string()))),
            },
            None => Ok(()),
        }
    }

    fn stop_inner(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = self.runtime.block_on(task);
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// Start serving `engine` on its runtime. The engine's events are read by the server
/// from now on (a front door drains them; this one is the server).
pub fn start(engine: EngineHandle, options: ServeOptions) -> Result<ServerHandle, ServeError> {
    if options.token.as_deref().is_none_or(|t| t.trim().is_empty()) && !options.addr.ip().is_loopback() {
        return Err(ServeError::NoToken(options.addr));
    }
    let cors = match &options.cors {
        Some(origin) => Some(HeaderValue::from_str(origin).map_err(|_| ServeError::BadOrigin(origin.clone()))?),
        None => None,
    };
    let runtime = engine.context().runtime.clone();
    let (events, _) = broadcast::channel(EVENT_BUFFER);
    let engine = Arc::new(engine);
    pump_events(engine.clone(), events.clone());
    let state = Arc::new(AppState { engine, events, token: options.token.filter(|t| !t.trim().is_empty()), start_lock: Default::default() });
    // A run whose process died (a server killed mid-wave) goes on here, as the workbench
    // resumes it: an HTTP client has no other way to get it moving again.
    if let Err(e) = state.engine.send(crate::engine::Command::Identity(crate::identity::IdentityCommand::Resume { character_id: None })) {
        tracing::warn!(error = %e, "could not resume interrupted identity runs");
    }
    let app = router(state.clone(), cors);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(options.addr))
        .map_err(|source| ServeError::Bind { addr: options.addr, source })?;
    let addr = listener.local_addr()?;
    let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = runtime.spawn(async move {
        axum::serve(listener, app.into_make_service())
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await
    });
    tracing::info!(%addr, "serving the engine over HTTP");
    Ok(ServerHandle { addr, shutdown: Some(shutdown), task: Some(task), runtime })
}

/// One thread moves the engine's events into the broadcast channel.
fn pump_events(engine: Arc<EngineHandle>, events: broadcast::Sender<Arc<Event>>) {
    let weak = Arc::downgrade(&engine);
    let receiver = engine.events().clone();
    drop(engine);
    let spawned = std::thread::Builder::new().name("serve-events".into()).spawn(move || {
        while let Ok(event) = receiver.recv() {
            // No subscriber is not an error: nobody is listening right now.
            let _ = events.send(Arc::new(event));
            if weak.strong_count() == 0 {
                return;
            }
        }
    });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the event pump; WebSockets will stay silent");
    }
}

fn router(state: Arc<AppState>, cors: Option<HeaderValue>) -> Router {
    let api = identity::routes().merge(play::routes()).merge(scene_controls::routes()).merge(chat_note::routes()).merge(chats::routes()).merge(author::routes()).merge(characters::routes()).merge(lorebooks::routes()).merge(memory::routes()).merge(providers::routes()).merge(openapi::routes()).fallback(no_route).method_not_allowed_fallback(wrong_method);
    // `limit_body` is the one limit: axum's own would answer a second time, in plain text.
    let app = api
        .layer(axum::extract::DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn(limit_body))
        .layer(axum::middleware::from_fn_with_state(state.clone(), authorise))
        .with_state(state);
    match cors {
        Some(origin) => app.layer(axum::middleware::from_fn(move |request: Request, next: Next| {
            let origin = origin.clone();
            async move { with_cors(origin, request, next).await }
        })),
        None => app,
    }
}

/// The subprotocol a browser's WebSocket names beside its token, and which the server
/// answers with (a browser that offers subprotocols refuses a handshake that picks none).
const WS_PROTOCOL: &str = "lorekeeper";
/// A subprotocol `bearer.<token>` carries the token of a browser's WebSocket.
const WS_TOKEN_PREFIX: &str = "bearer.";

/// Every request carries the token when the server has one; a wrong one changes nothing.
/// A browser cannot set `Authorization` on a WebSocket, so a handshake may carry it as a
/// subprotocol (`new WebSocket(url, ["lorekeeper", "bearer." + token])`) or as the
/// `access_token` query parameter (RFC 6750). Neither is logged: no request line or
/// header is.
async fn authorise(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if let Some(token) = &state.token {
        let headers = request.headers();
        let bearer = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        let handshake = headers.get(header::UPGRADE).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
        let mut presented: Vec<String> = bearer.map(str::to_string).into_iter().collect();
        if handshake {
            let protocols = headers.get_all(header::SEC_WEBSOCKET_PROTOCOL).iter().filter_map(|v| v.to_str().ok());
            presented.extend(protocols.flat_map(|v| v.split(',')).filter_map(|p| p.trim().strip_prefix(WS_TOKEN_PREFIX)).map(str::to_string));
            if let Ok(axum::extract::Query(query)) = axum::extract::Query::<std::collections::HashMap<String, String>>::try_from_uri(request.uri()) {
                presented.extend(query.get("access_token").cloned());
            }
        }
        if !presented.iter().any(|p| same_secret(p.as_bytes(), token.as_bytes())) {
            return ApiError::new(StatusCode::UNAUTHORIZED, "a valid bearer token is required").into_response();
        }
    }
    next.run(request).await
}

/// Read the body whole before any route sees it, up to its limit; a larger one is
/// answered 413 with `{"detail"}` (axum answered plain text or nothing, and reset the
/// connection under a large upload). The rest of a body past the limit is read and
/// thrown away, up to [`MAX_DRAIN_BYTES`], so a client that sends it all before it
/// reads the answer still gets one; a client that asked `Expect: 100-continue` is
/// answered before it sends anything.
async fn limit_body(request: Request, next: Next) -> Response {
    use axum::body::HttpBody;
    let path = request.uri().path().to_string();
    let limit = if path == "/api/library/import" || chats::is_chat_import(&path) { MAX_IMPORT_BYTES } else { MAX_BODY_BYTES };
    let too_large = |close: bool| {
        let mut response =
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, format!("the request body is larger than the {limit} bytes {path} takes")).into_response();
        if close {
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    };
    let (parts, mut body) = request.into_parts();
    let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if let Some(declared) = declared.filter(|n| *n > limit as u64) {
        let waits_to_send = parts.headers.get(header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        if waits_to_send || declared > MAX_DRAIN_BYTES {
            return too_large(true);
        }
    }
    let mut kept = Vec::new();
    let mut total: u64 = 0;
    while let Some(frame) = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => return ApiError::bad_request(format!("cannot read the request body: {e}")).into_response(),
        };
        let Ok(data) = frame.into_data() else { continue };
        total += data.len() as u64;
        if total <= limit as u64 {
            kept.extend_from_slice(&data);
        } else if total > MAX_DRAIN_BYTES {
            return too_large(true);
        }
    }
    if total > limit as u64 {
        return too_large(false);
    }
    next.run(Request::from_parts(parts, axum::body::Body::from(kept))).await
}

/// Compare without stopping at the first difference, so timing tells nothing.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn with_cors(origin: HeaderValue, request: Request, next: Next) -> Response {
    let preflight = request.method() == Method::OPTIONS;
    let mut response = if preflight { StatusCode::NO_CONTENT.into_response() } else { next.run(request).await };
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST, DELETE, OPTIONS"));
    headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static("authorization, content-type"));
    response
}

/// An error answer: a status and `{"detail": "...", "fault": "..."}` — the predecessor's
/// FastAPI body, with whose fault it is in the words the socket events use.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    detail: String,
    /// Set where the status alone does not say it (a 409 busy, cancelled or unconfirmed).
    fault: Option<&'static str>,
}

/// The body of every error answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorBody {
    pub detail: String,
    /// Whose fault, for a program to act on: `request` (a bad request: fix it), `not_found`,
    /// `busy` (a round or reply is running: retry later), `conflict` (it changed since you
    /// looked: read again, then ask), `confirm` (a delete that takes more: resend with
    /// `?confirm=true`), `cancelled` (cancelled: do not resend), `too_long`, `provider`
    /// (the model or its provider failed) or `library` (the server's own).
    pub fault: String,
}

impl ApiError {
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        Self { status, detail: detail.into(), fault: None }
    }
    /// The answer to a refusal whose fault the engine gave.
    pub fn of_fault(fault: crate::context::Fault, detail: impl Into<String>) -> Self {
        use crate::context::Fault;
        let status = match fault {
            Fault::Request => StatusCode::BAD_REQUEST,
            Fault::NotFound => StatusCode::NOT_FOUND,
            Fault::Busy | Fault::Conflict => StatusCode::CONFLICT,
            Fault::TooLong => StatusCode::PAYLOAD_TOO_LARGE,
            Fault::Provider => StatusCode::BAD_GATEWAY,
            Fault::Library => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self { status, detail: detail.into(), fault: Some(fault.as_str()) }
    }
    /// The same answer, with `fault` said instead of what its status implies.
    pub fn with_fault(mut self, fault: &'static str) -> Self {
        self.fault = Some(fault);
        self
    }
    /// A 409 for a delete that would take more with it than asked.
    pub fn unconfirmed(detail: impl Into<String>) -> Self {
        Self::conflict(detail).with_fault("confirm")
    }
    /// A 409 for work that was cancelled: nothing to resend.
    pub fn cancelled(detail: impl Into<String>) -> Self {
        Self::conflict(detail).with_fault("cancelled")
    }
    /// The fault a status says when none was given.
    fn fault(&self) -> &'static str {
        self.fault.unwrap_or(match self.status {
            StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => "not_found",
            StatusCode::CONFLICT => "conflict",
            StatusCode::PAYLOAD_TOO_LARGE => "too_long",
            StatusCode::BAD_GATEWAY => "provider",
            s if s.is_client_error() => "request",
            _ => "library",
        })
    }
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, detail)
    }
    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, detail)
    }
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, detail)
    }
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, detail.to_string())
    }
    pub fn status(&self) -> StatusCode {
        self.status
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let fault = self.fault().to_string();
        (self.status, axum::Json(ErrorBody { detail: self.detail, fault })).into_response()
    }
}

/// Query parameters, refused like a bad body: a 400 with `{"detail"}` naming what is
/// wrong (axum's own answer is plain text).
pub(crate) struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> axum::extract::FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Query(value)),
            Err(rejection) => Err(ApiError::bad_request(format!("invalid query: {}", rejection.body_text()))),
        }
    }
}

/// Path parameters, refused like a bad query: a 400 with `{"detail"}` naming the
/// parameter and what it should be (axum's own answer is plain text).
pub(crate) struct Path<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> axum::extract::FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            Err(rejection) => Err(ApiError::new(rejection.status(), format!("invalid path: {}", rejection.body_text()))),
        }
    }
}

/// A WebSocket upgrade; a socket route asked without one answers `{"detail"}` with the
/// status axum chose (426, 405, 400) instead of plain text.
pub(crate) struct Upgrade(pub axum::extract::ws::WebSocketUpgrade);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Upgrade {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::ws::WebSocketUpgrade::from_request_parts(parts, state).await {
            // Named back when the client offered it (a browser passing its token as a
            // subprotocol); the token's own subprotocol is never echoed.
            Ok(upgrade) => Ok(Upgrade(upgrade.protocols([WS_PROTOCOL]))),
            Err(rejection) => Err(ApiError::new(
                rejection.status(),
                format!("{}: this route is a WebSocket (GET with an Upgrade: websocket handshake)", rejection.body_text()),
            )),
        }
    }
}

/// A request for a path no route serves: a JSON 404 that says where the routes are.
async fn no_route(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no endpoint {method} {}; the routes are listed at /api/openapi.json", uri.path()))
}

/// A route asked with a method it does not take.
async fn wrong_method(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, format!("{} does not take {method}; see /api/openapi.json", uri.path()))
}

/// A JSON body read by hand, so a malformed one is a 400 that names the field.
pub(crate) fn body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("invalid body: {e}")))
}

/// Wait for the first event `pick` takes, up to `limit`.
pub(crate) async fn wait_for<T>(
    events: &mut broadcast::Receiver<Arc<Event>>,
    limit: std::time::Duration,
    mut pick: impl FnMut(&Event) -> Option<T>,
) -> Option<T> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Ok(event)) => {
                if let Some(found) = pick(&event) {
                    return Some(found);
                }
            }
            Ok(Err(broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(broadcast::error::RecvError::Closed)) | Err(_) => return None,
        }
    }
}
