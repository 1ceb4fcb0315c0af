//! The engine: owns the library and all work; the front doors (GUI, CLI, tests) talk to
//! it only through [`Command`]s in and [`Event`]s out.
//!
//! Invariant: nothing here knows egui. Work runs on the engine's tokio runtime
//! (blocking calls in `spawn_blocking`), never on the caller's thread, and every event
//! is sent after the store has committed what it reports.

mod llm_commands;

pub use llm_commands::{KeyAction, LlmCommand, LlmEvent, ModelLine, ProfileList, ProfileSummary};

pub use crate::context::{CoreEvent, LogLevel, Reply};

use crate::config::{Config, Paths};
use crate::context::{Context, EventRoutes};
use crate::store::Store;
use crossbeam_channel::{Receiver, Sender, bounded};
use serde::Serialize;
use std::sync::{Arc, RwLock};

/// Capacity of the command queue: senders block when the engine is this far behind.
const COMMAND_CAPACITY: usize = 256;
/// Capacity of the event queue: the engine blocks when a front door stops draining.
const EVENT_CAPACITY: usize = 8192;

/// Everything a front door can ask for. Closed: each capability adds its own variant.
#[derive(Debug, Clone)]
pub enum Command {
    Llm(LlmCommand),
    Identity(crate::identity::IdentityCommand),
    Memory(crate::memory::MemoryCommand),
    Interop(crate::interop::InteropCommand),
    Scene(crate::scene::SceneCommand),
    Companion(crate::companion::CompanionCommand),
    /// A command whose sender waits for its answer on `reply`: the event that settles
    /// it (see [`Reply`]). Scene, chat and memory commands and an import answer; any
    /// other is run as if sent plainly and its reply dropped unanswered.
    Asked { command: Box<Command>, reply: Reply<Event> },
    /// Stop accepting commands; in-flight work is cancelled.
    Shutdown,
}

/// Everything the engine reports. Serialises to one JSON object with an `event` field,
/// which is what `--json` prints, one per line.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Event {
    Core(CoreEvent),
    Llm(LlmEvent),
    Identity(crate::identity::IdentityEvent),
    Memory(crate::memory::MemoryEvent),
    Interop(crate::interop::InteropEvent),
    Scene(crate::scene::SceneEvent),
    Author(crate::scene::author::AuthorEvent),
    Companion(crate::companion::CompanionEvent),
}

impl Event {
    pub fn error(context: impl Into<String>, message: impl std::fmt::Display) -> Self {
        Event::Core(CoreEvent::Error { context: context.into(), message: message.to_string() })
    }
    pub fn info(message: impl Into<String>) -> Self {
        Event::Core(CoreEvent::Log { level: LogLevel::Info, message: message.into() })
    }
    pub fn warn(message: impl Into<String>) -> Self {
        Event::Core(CoreEvent::Log { level: LogLevel::Warn, message: message.into() })
    }
}

type Waker = Arc<dyn Fn() + Send + Sync>;

/// Where events go. Each send also calls the waker (the GUI's `request_repaint`).
#[derive(Clone)]
pub struct EventSink {
    tx: Sender<Event>,
    waker: Arc<RwLock<Option<Waker>>>,
}

impl EventSink {
    pub fn send(&self, event: Event) {
        // A closed channel means every front door is gone: nobody is left to tell.
        let _ = self.tx.send(event);
        if let Some(wake) = self.waker.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
            wake();
        }
    }
}

/// The front door's end of the engine.
pub struct EngineHandle {
    commands: Sender<Command>,
    events: Receiver<Event>,
    waker: Arc<RwLock<Option<Waker>>>,
    context: Arc<Context>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Settings in the config file that nothing reads, one line each for a person.
    config_warnings: Vec<String>,
}

impl EngineHandle {
    /// Settings in the config file that nothing reads (misspelt or retired), one line
    /// each: the CLI prints them on stderr, the workbench in its event log.
    pub fn config_warnings(&self) -> &[String] {
        &self.config_warnings
    }

    /// Queue a command. Fails only when the engine has stopped.
    pub fn send(&self, command: Command) -> Result<(), EngineStopped> {
        self.commands.send(command).map_err(|_| EngineStopped)
    }

    /// Queue a command if there is room, without waiting: for a front door that must
    /// not block (the GUI's frame). A full queue gives the command back.
    pub fn try_send(&self, command: Command) -> Result<(), TrySendError> {
        self.commands.try_send(command).map_err(|e| match e {
            crossbeam_channel::TrySendError::Full(command) => TrySendError::Full(command),
            crossbeam_channel::TrySendError::Disconnected(_) => TrySendError::Stopped,
        })
    }

    /// The event stream (drain it: the engine blocks when it is full).
    pub fn events(&self) -> &Receiver<Event> {
        &self.events
    }

    /// Called after every event, from the engine's threads.
    pub fn set_waker(&self, wake: impl Fn() + Send + Sync + 'static) {
        *self.waker.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(wake));
    }

    /// Read-only access for front doors that need a snapshot (config, paths).
    pub fn context(&self) -> &Arc<Context> {
        &self.context
    }
}

impl Drop for EngineHandle {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Shutdown);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the engine has stopped")]
pub struct EngineStopped;

/// Why [`EngineHandle::try_send`] did not queue a command.
#[derive(Debug)]
pub enum TrySendError {
    /// The queue is full: here is the command back, to send later.
    Full(Command),
    Stopped,
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("cannot start the worker runtime: {0}")]
    Runtime(std::io::Error),
}

/// Open the library and config at `paths` and start the engine.
pub fn start(paths: Paths) -> Result<EngineHandle, EngineError> {
    let (config, unknown) = Config::load_checked(&paths.config_file)?;
    let config_warnings = Config::unknown_key_warnings(&paths.config_file, &unknown);
    for line in &config_warnings {
        tracing::warn!("{line}");
    }
    let store = Store::open(&paths.library_file)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(16)
        .thread_name("lorekeeper-worker")
        .enable_all()
        .build()
        .map_err(EngineError::Runtime)?;
    let (command_tx, command_rx) = bounded::<Command>(COMMAND_CAPACITY);
    let (event_tx, event_rx) = bounded::<Event>(EVENT_CAPACITY);
    let waker: Arc<RwLock<Option<Waker>>> = Arc::new(RwLock::new(None));
    let sink = EventSink { tx: event_tx, waker: waker.clone() };
    let context = Arc::new(Context::new(store, paths, config, routes(&sink), runtime.handle().clone()));
    let loop_context = context.clone();
    let thread = std::thread::Builder::new()
        .name("lorekeeper-engine".into())
        .spawn(move || run_loop(runtime, loop_context, command_rx))
        .map_err(EngineError::Runtime)?;
    Ok(EngineHandle { commands: command_tx, events: event_rx, waker, context, thread: Some(thread), config_warnings })
}

/// Each capability's events become one variant of [`Event`].
fn routes(sink: &EventSink) -> EventRoutes {
    fn to<E: 'static>(sink: &EventSink, wrap: fn(E) -> Event) -> impl Fn(E) + Send + Sync + 'static {
        let sink = sink.clone();
        move |e| sink.send(wrap(e))
    }
    EventRoutes::default()
        .route(to(sink, Event::Core))
        .route(to(sink, Event::Llm))
        .route(to(sink, Event::Identity))
        .route(to(sink, Event::Memory))
        .route(to(sink, Event::Interop))
        .route(to(sink, Event::Scene))
        .route(to(sink, Event::Author))
        .route(to(sink, Event::Companion))
}

fn run_loop(runtime: tokio::runtime::Runtime, context: Arc<Context>, commands: Receiver<Command>) {
    // A redo a dead process left half done is finished first (its round put back).
    crate::scene::recover_redos(&context);
    while let Ok(command) = commands.recv() {
        tracing::debug!(?command, "command");
        if !dispatch(&context, command, None) {
            break;
        }
    }
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    // Changes the saved vector graph lacks would be replayed by every later process.
    crate::memory::close(&context);
    context.emit(CoreEvent::Stopped);
}

/// A memory command's answer: its event, or the error it was reported with.
fn memory_answer(answer: crate::memory::MemoryAnswer) -> Event {
    match answer {
        Ok(event) => Event::Memory(event),
        Err(error) => Event::Core(error),
    }
}

/// Hand a command to its capability, with the reply its sender waits on; false on
/// shutdown.
fn dispatch(context: &Arc<Context>, command: Command, reply: Option<Reply<Event>>) -> bool {
    match command {
        Command::Shutdown => return false,
        Command::Asked { command, reply } => return dispatch(context, *command, Some(reply)),
        Command::Llm(c) => llm_commands::handle(context, c),
        Command::Identity(c) => crate::identity::handle(context, c),
        Command::Memory(c) => crate::memory::handle_asked(context, c, reply.map(|r| r.map(memory_answer))),
        Command::Interop(c) => crate::interop::handle_asked(context, c, reply.map(|r| r.map(Event::Interop))),
        Command::Scene(c) => crate::scene::handle_asked(
            context,
            c,
            reply.map(|r| crate::scene::Answer { scene: r.clone().map(Event::Scene), author: r.map(Event::Author) }),
        ),
        Command::Companion(c) => crate::companion::handle_asked(context, c, reply.map(|r| r.map(Event::Companion))),
    }
    true
}
