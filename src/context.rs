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
#[derive(Default)]
pub struct Jobs {
    running: Mutex<BTreeMap<JobKey, CancelToken>>,
}

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

/// A running job: released from the registry when dropped.
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
        self.jobs.lock().remove(&self.key);
    }
}

impl Jobs {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<JobKey, CancelToken>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Register `key` as running, cancelled through `cancel`, or `None` when it already is.
    pub fn try_start(self: &Arc<Self>, key: JobKey, cancel: &CancelToken) -> Option<Job> {
        let mut running = self.lock();
        if running.contains_key(&key) {
            return None;
        }
        let cancel = cancel.clone();
        running.insert(key.clone(), cancel.clone());
        Some(Job { jobs: self.clone(), key, cancel })
    }

    pub fn is_running(&self, key: &JobKey) -> bool {
        self.lock().contains_key(key)
    }

    /// Cancel the job running under `key`. Returns whether one was running.
    pub fn cancel(&self, key: &JobKey) -> bool {
        match self.lock().get(key) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
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
        Self {
            store,
            paths,
            config: RwLock::new(config),
            routes,
            runtime,
            jobs: Arc::new(Jobs::default()),
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
