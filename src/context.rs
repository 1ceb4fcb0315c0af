//! What every capability is handed: the store, the paths and the config, the worker
//! runtime, shared services (the memory bank), the registry of running jobs, and a typed
//! event sink per capability.
//!
//! Architecture invariant: this module knows no capability. It sits under identity,
//! companion, scene, interop and memory, which used to reach up into the engine for the
//! same things and so tied every module into one import loop. Events are routed by type:
//! the engine registers one route per capability event type ([`EventRoutes::route`]),
//! and a capability emits its own type with [`Context::emit`] without knowing the
//! engine's `Event` enum. Services are kept the same way, by type, so the memory bank
//! can live here without this module importing memory.

use crate::config::{Config, ConfigError, Paths};
use crate::llm::CancelToken;
use crate::store::Store;
use serde::Serialize;
use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

/// Events every capability may send besides its own: a line for the event log, or an
/// error report for a command that failed before it could say so in its own terms.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum CoreEvent {
    /// A human-readable line for the event log.
    Log { level: LogLevel, message: String },
    /// A command failed; `context` names what was being done.
    Error { context: String, message: String },
    /// The engine stopped.
    Stopped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Info,
    Warn,
    Error,
}

impl CoreEvent {
    pub fn error(context: impl Into<String>, message: impl std::fmt::Display) -> Self {
        CoreEvent::Error { context: context.into(), message: message.to_string() }
    }
    pub fn info(message: impl Into<String>) -> Self {
        CoreEvent::Log { level: LogLevel::Info, message: message.into() }
    }
    pub fn warn(message: impl Into<String>) -> Self {
        CoreEvent::Log { level: LogLevel::Warn, message: message.into() }
    }
}

/// A cheap, clonable sender of one event type. It holds the route, not the context, so
/// a service kept in the context (the memory bank's rebuild observer) can hold one
/// without keeping the context alive.
pub struct Emitter<E> {
    send: Arc<dyn Fn(E) + Send + Sync>,
}

impl<E> Clone for Emitter<E> {
    fn clone(&self) -> Self {
        Self { send: self.send.clone() }
    }
}

impl<E: 'static> Emitter<E> {
    pub fn new(send: impl Fn(E) + Send + Sync + 'static) -> Self {
        Self { send: Arc::new(send) }
    }

    pub fn send(&self, event: E) {
        (self.send)(event)
    }

    /// An emitter that drops everything: for tools and tests that run a capability
    /// without an engine.
    pub fn discard() -> Self {
        Self::new(|_| {})
    }
}

impl Fault {
    /// Its name as events and error bodies give it (`not_found`, `too_long`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Fault::Request => "request",
            Fault::NotFound => "not_found",
            Fault::Busy => "busy",
            Fault::Conflict => "conflict",
            Fault::TooLong => "too_long",
            Fault::Provider => "provider",
            Fault::Library => "library",
        }
    }

    /// Whether the command was refused before it changed anything, for a reason that is
    /// only its sender's business (not the provider's or the library's failure).
    pub fn is_refusal(self) -> bool {
        matches!(self, Fault::Request | Fault::NotFound | Fault::Busy | Fault::Conflict | Fault::TooLong)
    }
}

/// Whose fault a failed command is, so a front door can say so (the HTTP server
/// answers 4xx for the request's — 409 for `Busy` and `Conflict` —, 502 for the
/// provider's, 500 for its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// The command cannot be done as asked (nothing to redraw, no such message).
    Request,
    /// It names something that is not there.
    NotFound,
    /// What it would change is busy (a round running, a reply being written).
    Busy,
    /// What it acts on changed since the sender looked (another window, process or
    /// client moved the chat or scene on, or edited what it would put back): the
    /// request was right when it was made, so it is no bad request; read again, then ask.
    Conflict,
    /// The user's text alone fills the model's context.
    TooLong,
    /// The model or its provider failed, or gave no reply worth keeping.
    Provider,
    /// The library, the memory or the templates failed.
    Library,
}

/// Where the answer to one command goes, for a front door that waits for it while other
/// commands of the same kind run (the HTTP server: two requests on one scene at once
/// each hear a `round_started` or an `error` on the event stream and cannot tell whose
/// it is). The capability answers with the event that settles the command — taken on
/// (`round_started`, `turn_committed`, `changed`, …) or refused — as well as emitting
/// it as usual; only the first answer counts. A reply dropped unanswered closes the
/// channel, so the one waiting is not left hanging.
pub struct Reply<E> {
    answer: Arc<Mutex<Option<Box<dyn FnOnce(E) + Send>>>>,
}

impl<E> Clone for Reply<E> {
    fn clone(&self) -> Self {
        Self { answer: self.answer.clone() }
    }
}

impl<E> std::fmt::Debug for Reply<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let answered = self.answer.lock().map(|a| a.is_none()).unwrap_or(true);
        f.debug_struct("Reply").field("answered", &answered).finish()
    }
}

impl<E: Send + 'static> Reply<E> {
    /// A reply and the receiver its answer arrives on.
    pub fn channel() -> (Self, tokio::sync::oneshot::Receiver<E>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        // The one waiting may have given up: then nobody needs the answer.
        let answer = move |event: E| {
            let _ = tx.send(event);
        };
        (Self { answer: Arc::new(Mutex::new(Some(Box::new(answer)))) }, rx)
    }

    /// Answer with `event`, unless the command was answered already; whether this was
    /// the answer.
    pub fn answer(&self, event: E) -> bool {
        let answer = self.answer.lock().unwrap_or_else(|p| p.into_inner()).take();
        match answer {
            Some(answer) => {
                answer(event);
                true
            }
            None => false,
        }
    }

    /// The same reply, answered in a capability's own event type (`wrap` makes it the
    /// engine's).
    pub fn map<F: Send + 'static>(self, wrap: fn(F) -> E) -> Reply<F> {
        Reply {
            answer: Arc::new(Mutex::new(Some(Box::new(move |event: F| {
                self.answer(wrap(event));
            })))),
        }
    }
}

/// Answer `reply`, when there is one, with a copy of `event`.
pub fn answer<E: Clone + Send + 'static>(reply: Option<&Reply<E>>, event: &E) {
    if let Some(reply) = reply {
        reply.answer(event.clone());
    }
}

/// Report a command's failure `event`: to the one waiting on `reply`, and on the event
/// stream through `emit` — except a refusal ([`Fault::is_refusal`]: busy, changed since
/// its sender looked, a bad request, something not there, too long) when that refusal is
/// the answer its sender waits for. Nothing was changed then, and the event stream is
/// what every watcher of the scene or chat hears (each WebSocket): there a busy refusal
/// read as the failure of the round or reply that is running, which goes on, a conflict
/// as a failure of theirs, and one client's mistyped message number as an error of the
/// scene. Without a reply (the workbench, the CLI) the stream is how the sender hears it,
/// so it is emitted; a failure after the command was taken on (a round that started,
/// then failed) is every watcher's news.
pub fn report_failure<E: Clone + Send + 'static>(reply: Option<&Reply<E>>, event: E, fault: Fault, emit: impl FnOnce(E)) {
    let answered = reply.is_some_and(|r| r.answer(event.clone()));
    if !(answered && fault.is_refusal()) {
        emit(event);
    }
}

/// The routes from capability event types to the engine's event stream, fixed when the
/// context is built.
#[derive(Default)]
pub struct EventRoutes {
    routes: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
}

impl EventRoutes {
    /// Route events of type `E` through `send`.
    pub fn route<E: 'static>(mut self, send: impl Fn(E) + Send + Sync + 'static) -> Self {
        self.routes.insert(TypeId::of::<E>(), Box::new(Emitter::new(send)));
        self
    }

    fn emitter<E: 'static>(&self) -> Option<&Emitter<E>> {
        self.routes.get(&TypeId::of::<E>()).and_then(|r| r.downcast_ref::<Emitter<E>>())
    }
}

/// Work that runs at most once at a time per key (a scene's round, a character's chat
/// turn, a checkpoint's agent), with the token that cancels it. A second start of the
/// same key is refused rather than queued, so the user sees why nothing happens.
///
/// With a library ([`Jobs::with_library`]) the guard holds across processes too: each
/// job takes a lease in the library (`job_leases`: a row with its owner, renewed by a
/// heartbeat, released when the job ends). A second process — the CLI while the GUI
/// plays, a second GUI — is refused the same round, turn or checkpoint instead of
/// running it twice and overwriting the winner. A lease whose owner died stops counting
/// when it expires ([`LEASE_TTL`]), or at once when the owner was a process on this
/// machine that no longer exists.
#[derive(Default)]
pub struct Jobs {
    running: Mutex<BTreeMap<JobKey, CancelToken>>,
    leases: Option<Leases>,
}

/// How long a lease holds without a heartbeat.
pub const LEASE_TTL: std::time::Duration = std::time::Duration::from_secs(30);
/// How often the leases of a live process are renewed.
const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(5);
/// How often a process with running jobs looks for cancels asked by other processes.
const CANCEL_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// This process's leases in the library, on a connection of their own so taking or
/// releasing one never waits on (or deadlocks with) the writer another thread holds.
struct Leases {
    store: Store,
    /// Unique per engine, so two engines in one process are two owners.
    owner: String,
    conn: Mutex<Option<rusqlite::Connection>>,
    heartbeat: std::sync::Once,
}

/// Who holds a lease, as a refusal names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    pub pid: u32,
    pub host: String,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
}

/// Whether a lease's owner is known to be gone: a process of this machine that no
/// longer exists. Elsewhere only expiry tells.
fn owner_is_gone(pid: u32, host: &str) -> bool {
    cfg!(target_os = "linux")
        && !host.is_empty()
        && host == host_name()
        && pid != std::process::id()
        && !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// A lease as stored: its owner, and what says whether that owner is still there.
struct Held {
    owner: String,
    pid: u32,
    host: String,
    expires_at: i64,
}

impl Held {
    fn read(conn: &rusqlite::Connection, key: &JobKey) -> rusqlite::Result<Option<Held>> {
        conn.query_row(
            "SELECT owner, pid, host, expires_at FROM job_leases WHERE kind = ?1 AND id = ?2",
            rusqlite::params![key.kind, key.id],
            |r| Ok(Held { owner: r.get(0)?, pid: r.get(1)?, host: r.get(2)?, expires_at: r.get(3)? }),
        )
        .optional()
    }

    /// Whether it still holds against `me`: another owner, not expired, not known dead.
    fn binds(&self, me: &str) -> bool {
        self.owner != me && self.expires_at > now_ms() && !owner_is_gone(self.pid, &self.host)
    }
}

impl Leases {
    fn with_conn<T>(&self, f: impl FnOnce(&mut rusqlite::Connection) -> rusqlite::Result<T>) -> Result<T, crate::store::StoreError> {
        let mut guard = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            *guard = Some(self.store.side_connection(std::time::Duration::from_secs(10))?);
        }
        match guard.as_mut() {
            Some(conn) => Ok(f(conn)?),
            None => unreachable!("opened above"),
        }
    }

    /// Take the lease of `key`, or say who holds it.
    fn take(&self, key: &JobKey) -> Result<Result<(), LeaseHolder>, crate::store::StoreError> {
        self.with_conn(|conn| {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let now = now_ms();
            if let Some(held) = Held::read(&tx, key)?
                && held.binds(&self.owner)
            {
                return Ok(Err(LeaseHolder { pid: held.pid, host: held.host }));
            }
            tx.execute(
                "INSERT OR REPLACE INTO job_leases (kind, id, owner, pid, host, taken_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                rusqlite::params![key.kind, key.id, self.owner, std::process::id(), host_name(), now, now + LEASE_TTL.as_millis() as i64],
            )?;
            tx.commit()?;
            Ok(Ok(()))
        })
    }

    fn release(&self, key: &JobKey) {
        let released = self.with_conn(|conn| {
            conn.execute("DELETE FROM job_leases WHERE kind = ?1 AND id = ?2 AND owner = ?3", rusqlite::params![key.kind, key.id, self.owner])
        });
        if let Err(e) = released {
            tracing::warn!(error = %e, kind = key.kind, id = %key.id, "could not release a job lease; it expires on its own");
        }
    }

    /// Whether another live owner holds `key`.
    fn held_elsewhere(&self, key: &JobKey) -> bool {
        match self.with_conn(|conn| Held::read(conn, key)) {
            Ok(Some(held)) => held.binds(&self.owner),
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the job leases");
                false
            }
        }
    }

    /// Ask the owner of `key` (another process) to cancel it; whether a live one holds it.
    fn request_cancel(&self, key: &JobKey) -> bool {
        if !self.held_elsewhere(key) {
            return false;
        }
        let asked = self.with_conn(|conn| {
            conn.execute("UPDATE job_leases SET cancel_requested = 1 WHERE kind = ?1 AND id = ?2", rusqlite::params![key.kind, key.id])
        });
        match asked {
            Ok(n) => n > 0,
            Err(e) => {
                tracing::warn!(error = %e, "could not ask another process to cancel a job");
                false
            }
        }
    }

    /// This owner's jobs another process asked to cancel, as `(kind, id)`.
    fn cancels_asked(&self) -> Result<Vec<(String, String)>, crate::store::StoreError> {
        self.with_conn(|conn| {
            let mut stmt = conn.prepare_cached("SELECT kind, id FROM job_leases WHERE owner = ?1 AND cancel_requested = 1")?;
            let rows = stmt.query_map([&self.owner], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })
    }

    fn renew(&self) -> Result<usize, crate::store::StoreError> {
        self.with_conn(|conn| {
            conn.execute(
                "UPDATE job_leases SET expires_at = ?1 WHERE owner = ?2",
                rusqlite::params![now_ms() + LEASE_TTL.as_millis() as i64, self.owner],
            )
        })
    }
}

use rusqlite::OptionalExtension;

/// What a job is about: a kind (`"round"`, `"turn"`, `"checkpoint"`) and an id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct JobKey {
    pub kind: &'static str,
    pub id: String,
}

impl JobKey {
    pub fn new(kind: &'static str, id: impl Into<String>) -> Self {
        Self { kind, id: id.into() }
    }
}

/// A running job: released from the registry (and its lease from the library) when
/// dropped.
pub struct Job {
    jobs: Arc<Jobs>,
    key: JobKey,
    cancel: CancelToken,
}

impl Job {
    pub fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if let Some(leases) = &self.jobs.leases {
            leases.release(&self.key);
        }
        self.jobs.lock().remove(&self.key);
    }
}

impl Jobs {
    /// Jobs guarded across every process that opens `store`.
    pub fn with_library(store: Store) -> Self {
        let owner = format!("{}-{}", std::process::id(), crate::store::new_id());
        Self { running: Mutex::default(), leases: Some(Leases { store, owner, conn: Mutex::new(None), heartbeat: std::sync::Once::new() }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<JobKey, CancelToken>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Register `key` as running, cancelled through `cancel`, or `None` when it already
    /// is, in this process or (with a library) in another.
    pub fn try_start(self: &Arc<Self>, key: JobKey, cancel: &CancelToken) -> Option<Job> {
        {
            let mut running = self.lock();
            if running.contains_key(&key) {
                return None;
            }
            running.insert(key.clone(), cancel.clone());
        }
        if let Some(leases) = &self.leases {
            match leases.take(&key) {
                Ok(Ok(())) => self.start_heartbeat(leases),
                Ok(Err(holder)) => {
                    tracing::info!(kind = key.kind, id = %key.id, pid = holder.pid, host = %holder.host, "refused: another process runs this job");
                    self.lock().remove(&key);
                    return None;
                }
                // The library cannot say (locked past the busy timeout, unwritable):
                // the guard in this process still holds, and the log says why.
                Err(e) => tracing::warn!(error = %e, kind = key.kind, id = %key.id, "could not take a job lease; guarding this process only"),
            }
        }
        Some(Job { jobs: self.clone(), key, cancel: cancel.clone() })
    }

    /// One thread per engine renews its leases until the engine is gone.
    fn start_heartbeat(self: &Arc<Self>, leases: &Leases) {
        leases.heartbeat.call_once(|| {
            let jobs = Arc::downgrade(self);
            let spawned = std::thread::Builder::new().name("job-lease-heartbeat".into()).spawn(move || {
                let mut last_renewal = std::time::Instant::now();
                loop {
                    std::thread::sleep(CANCEL_POLL);
                    let Some(jobs) = jobs.upgrade() else { return };
                    if jobs.lock().is_empty() {
                        continue;
                    }
                    let Some(leases) = &jobs.leases else { return };
                    match leases.cancels_asked() {
                        Ok(asked) => {
                            for (kind, id) in asked {
                                let running = jobs.lock();
                                if let Some((_, token)) = running.iter().find(|(k, _)| k.kind == kind && k.id == id) {
                                    tracing::info!(kind, id, "cancelled at another process's request");
                                    token.cancel();
                                }
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, "could not read cancel requests"),
                    }
                    if last_renewal.elapsed() >= HEARTBEAT {
                        last_renewal = std::time::Instant::now();
                        if let Err(e) = leases.renew() {
                            tracing::warn!(error = %e, "could not renew the job leases");
                        }
                    }
                }
            });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "could not start the job lease heartbeat; leases expire after {LEASE_TTL:?}");
            }
        });
    }

    /// Whether another process runs the job under `key` (a live owner holds its lease).
    pub fn runs_elsewhere(&self, key: &JobKey) -> bool {
        self.leases.as_ref().is_some_and(|l| l.held_elsewhere(key))
    }

    pub fn is_running(&self, key: &JobKey) -> bool {
        self.lock().contains_key(key) || self.leases.as_ref().is_some_and(|l| l.held_elsewhere(key))
    }

    /// Cancel the job running under `key`: here at once, or (with a library) in the
    /// process that holds its lease, within a fraction of a second. Returns whether one
    /// was running.
    pub fn cancel(&self, key: &JobKey) -> bool {
        if let Some(token) = self.lock().get(key) {
            token.cancel();
            return true;
        }
        self.leases.as_ref().is_some_and(|l| l.request_cancel(key))
    }
}

/// Shared services kept by type, each opened on first use by the module that owns it.
#[derive(Default)]
struct Services {
    slots: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

/// One service's slot: the owning module decides when to fill or replace it.
pub type ServiceSlot<T> = Mutex<Option<Arc<T>>>;

/// State shared by all work the engine runs.
pub struct Context {
    pub store: Store,
    pub paths: Paths,
    config: RwLock<Config>,
    routes: EventRoutes,
    pub runtime: tokio::runtime::Handle,
    pub jobs: Arc<Jobs>,
    services: Services,
}

impl Context {
    pub fn new(store: Store, paths: Paths, config: Config, routes: EventRoutes, runtime: tokio::runtime::Handle) -> Self {
        let jobs = Arc::new(Jobs::with_library(store.clone()));
        Self {
            store,
            paths,
            config: RwLock::new(config),
            routes,
            runtime,
            jobs,
            services: Services::default(),
        }
    }

    /// A snapshot of the current configuration.
    pub fn config(&self) -> Config {
        self.config.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Change the configuration and persist it; the change is visible only once saved.
    pub fn update_config(&self, change: impl FnOnce(&mut Config)) -> Result<Config, ConfigError> {
        let mut guard = self.config.write().unwrap_or_else(|p| p.into_inner());
        let mut next = guard.clone();
        change(&mut next);
        next.save(&self.paths.config_file)?;
        *guard = next.clone();
        Ok(next)
    }

    /// Send one event to the front doors.
    pub fn emit<E: 'static>(&self, event: E) {
        match self.routes.emitter::<E>() {
            Some(emitter) => emitter.send(event),
            None => tracing::error!(event = std::any::type_name::<E>(), "no route for this event type; dropped"),
        }
    }

    /// A clonable sender of `E` events, for work that outlives a borrow of the context.
    pub fn emitter<E: 'static>(&self) -> Emitter<E> {
        match self.routes.emitter::<E>() {
            Some(emitter) => emitter.clone(),
            None => {
                tracing::error!(event = std::any::type_name::<E>(), "no route for this event type");
                Emitter::discard()
            }
        }
    }

    /// The slot of the shared service of type `T` (empty until its owner fills it).
    pub fn service<T: Send + Sync + 'static>(&self) -> Arc<ServiceSlot<T>> {
        let mut slots = self.services.slots.lock().unwrap_or_else(|p| p.into_inner());
        let slot = slots.entry(TypeId::of::<T>()).or_insert_with(|| Arc::new(ServiceSlot::<T>::new(None)));
        match slot.clone().downcast::<ServiceSlot<T>>() {
            Ok(slot) => slot,
            // The map is keyed by the type id of `T`, so the slot is always a ServiceSlot<T>.
            Err(_) => unreachable!("a service slot is keyed by its own type"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_runs_once_and_is_released_when_dropped() {
        let jobs = Arc::new(Jobs::default());
        let key = JobKey::new("round", "s1");
        let job = jobs.try_start(key.clone(), &CancelToken::new()).expect("first start");
        assert!(jobs.try_start(key.clone(), &CancelToken::new()).is_none(), "a second start of the same key is refused");
        assert!(jobs.try_start(JobKey::new("turn", "s1"), &CancelToken::new()).is_some(), "another kind is another job");
        assert!(jobs.cancel(&key));
        assert!(job.cancel_token().is_cancelled());
        drop(job);
        assert!(!jobs.is_running(&key));
        assert!(!jobs.cancel(&key));
    }

    /// Two engines on one library (as two processes would be) share the guard through
    /// the library's leases; a lease whose owner is gone stops counting.
    #[test]
    fn a_job_leased_in_the_library_is_refused_to_another_engine() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("library.sqlite");
        let gui = Arc::new(Jobs::with_library(Store::open(&path).unwrap()));
        let cli = Arc::new(Jobs::with_library(Store::open(&path).unwrap()));
        let key = JobKey::new("round", "scene-1");
        let job = gui.try_start(key.clone(), &CancelToken::new()).expect("first start");
        assert!(cli.try_start(key.clone(), &CancelToken::new()).is_none(), "the other engine is refused");
        assert!(cli.is_running(&key), "and sees the job as running");
        assert!(cli.try_start(JobKey::new("round", "scene-2"), &CancelToken::new()).is_some(), "another scene is free");
        // The other engine cancels it: the owner's heartbeat sees the request.
        assert!(cli.cancel(&key), "a job running elsewhere can be cancelled");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !job.cancel_token().is_cancelled() {
            assert!(std::time::Instant::now() < deadline, "the owner never saw the cancel");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(!cli.cancel(&JobKey::new("round", "nowhere")), "nothing to cancel");
        drop(job);
        assert!(!cli.is_running(&key));
        let taken = cli.try_start(key.clone(), &CancelToken::new()).expect("released, so free");
        std::mem::forget(taken); // as if the process died holding it

        let store = Store::open(&path).unwrap();
        let set = |sql: &str| store.with(|c| Ok(c.execute(sql, [])?)).unwrap();
        // Its owner "died" on this machine: a pid that does not exist frees the lease at once.
        set("UPDATE job_leases SET pid = 999999999");
        assert!(!gui.is_running(&key));
        let again = gui.try_start(key.clone(), &CancelToken::new()).expect("a dead owner's lease is free");
        drop(again);
        // An owner elsewhere (another host) holds until the lease expires.
        let elsewhere = Arc::new(Jobs::with_library(Store::open(&path).unwrap()));
        let held = elsewhere.try_start(key.clone(), &CancelToken::new()).unwrap();
        std::mem::forget(held);
        set("UPDATE job_leases SET host = 'elsewhere', pid = 999999999");
        assert!(gui.try_start(key.clone(), &CancelToken::new()).is_none(), "a live lease of another host holds");
        set("UPDATE job_leases SET expires_at = 0");
        assert!(gui.try_start(key.clone(), &CancelToken::new()).is_some(), "an expired lease is free");
    }

    #[test]
    fn events_are_routed_by_type() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let routes = EventRoutes::default().route(move |e: CoreEvent| sink.lock().unwrap().push(format!("{e:?}")));
        let emitter = routes.emitter::<CoreEvent>().expect("routed").clone();
        emitter.send(CoreEvent::info("hello"));
        assert!(routes.emitter::<u32>().is_none());
        assert_eq!(seen.lock().unwrap().len(), 1);
    }
}
