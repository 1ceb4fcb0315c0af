//! The workbench window. The only module that knows egui.
//!
//! Invariant: the UI renders a view model and sends commands; it never blocks and never
//! touches the store or the network. Events are drained in `logic`, drawing happens in
//! `ui`, and the engine wakes the window after every event.

mod budgets;
pub mod chat;
mod event_log;
mod identity;
pub mod library;
mod memory;
mod prompt;
mod providers;
mod scene;

use crate::config::Paths;
use crate::engine::{self, Command, EngineHandle, Event};
use chat::ChatPanel;
use event_log::EventLog;
pub use identity::IdentityPanels;
use library::LibraryPanel;
pub use providers::TestView;
pub use scene::ScenePanels;
pub use memory::{MemoryPanel, MemoryTab};
pub use prompt::PromptPanel;
use providers::ProvidersPanel;

/// At most this many events are applied per frame, so a flood of streamed tokens
/// cannot stretch one frame; the rest wait for the next one.
const MAX_EVENTS_PER_FRAME: usize = 2000;

#[derive(Debug, thiserror::Error)]
pub enum UiError {
    #[error(transparent)]
    Engine(#[from] engine::EngineError),
    #[error("the window could not be opened: {0}")]
    Window(String),
}

/// The panels of the workbench, in the order of the navigation bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PanelKind {
    Waves,
    Checkpoints,
    Scene,
    Chat,
    Memory,
    Budgets,
    Prompt,
    Library,
    Providers,
}

impl PanelKind {
    pub const ALL: [PanelKind; 9] = [
        PanelKind::Waves,
        PanelKind::Checkpoints,
        PanelKind::Scene,
        PanelKind::Chat,
        PanelKind::Memory,
        PanelKind::Budgets,
        PanelKind::Prompt,
        PanelKind::Library,
        PanelKind::Providers,
    ];

    pub fn title(self) -> &'static str {
        match self {
            PanelKind::Waves => "Waves",
            PanelKind::Checkpoints => "Checkpoints",
            PanelKind::Scene => "Scene",
            PanelKind::Chat => "Chat",
            PanelKind::Memory => "Memory",
            PanelKind::Budgets => "Budgets",
            PanelKind::Prompt => "Prompt",
            PanelKind::Library => "Library",
            PanelKind::Providers => "Providers",
        }
    }
}

/// The eframe application.
pub struct WorkbenchApp {
    engine: EngineHandle,
    panel: PanelKind,
    log: EventLog,
    providers: ProvidersPanel,
    identity: IdentityPanels,
    library: LibraryPanel,
    scene: ScenePanels,
    memory: MemoryPanel,
    chat: ChatPanel,
    prompt: PromptPanel,
}

impl WorkbenchApp {
    /// Wire the engine's events to this window's repaints.
    pub fn new(egui_ctx: &egui::Context, engine: EngineHandle) -> Self {
        let repaint = egui_ctx.clone();
        engine.set_waker(move || repaint.request_repaint());
        let providers = ProvidersPanel::new(engine.context().config());
        let mut app = Self {
            engine,
            panel: PanelKind::Waves,
            log: EventLog::default(),
            providers,
            identity: IdentityPanels::default(),
            library: LibraryPanel::default(),
            scene: ScenePanels::default(),
            memory: MemoryPanel::new(),
            chat: ChatPanel::default(),
            prompt: PromptPanel::default(),
        };
        let startup = IdentityPanels::startup().into_iter().chain(ScenePanels::startup()).chain(MemoryPanel::startup()).chain(ChatPanel::startup());
        for command in startup {
            app.send(command);
        }
        app
    }

    /// The Prompt panel's view model.
    pub fn prompt(&self) -> &PromptPanel {
        &self.prompt
    }

    /// The Chat panel's view model.
    pub fn chat(&self) -> &ChatPanel {
        &self.chat
    }

    /// The memory browser's view model.
    pub fn memory(&self) -> &MemoryPanel {
        &self.memory
    }

    pub fn panel(&self) -> PanelKind {
        self.panel
    }

    pub fn engine(&self) -> &EngineHandle {
        &self.engine
    }

    /// The identity panels' view model.
    pub fn identity(&self) -> &IdentityPanels {
        &self.identity
    }

    /// The Scene and Budgets panels' view model.
    pub fn scene(&self) -> &ScenePanels {
        &self.scene
    }

    /// The Library panel's view model (for tests).
    pub fn library(&self) -> &LibraryPanel {
        &self.library
    }

    /// What the last test of a profile showed, as the Providers panel shows it.
    pub fn provider_test(&self, profile: &str) -> Option<&TestView> {
        self.providers.test_view(profile)
    }

    /// The event log's lines, oldest first.
    pub fn log_lines(&self) -> impl Iterator<Item = &str> {
        self.log.lines()
    }

    fn send(&mut self, command: Command) {
        if self.engine.send(command).is_err() {
            self.log.push_error("engine", "the engine has stopped; restart the workbench");
        }
    }

    fn apply(&mut self, event: Event) {
        self.log.record(&event);
        match &event {
            Event::Llm(crate::engine::LlmEvent::Calls { calls }) => self.prompt.apply(calls),
            Event::Llm(e) => self.providers.apply(e, &self.engine.context().config()),
            Event::Identity(e) => {
                let mut outbox = Vec::new();
                self.identity.apply(e, &mut outbox);
                for command in outbox {
                    self.send(command);
                }
            }
            Event::Interop(e) => self.library.apply(e),
            Event::Companion(e) => {
                let mut outbox = Vec::new();
                self.chat.apply(e, &mut outbox);
                for command in outbox {
                    self.send(command);
                }
            }
            Event::Scene(e) => {
                let mut outbox = Vec::new();
                self.scene.apply(e, &mut outbox);
                for command in outbox {
                    self.send(command);
                }
            }
            Event::Core(engine::CoreEvent::Error { context, message }) if context.starts_with("export ") => {
                self.library.export_failed(&format!("{context}: {message}"));
            }
            _ => {}
        }
        let mut outbox = Vec::new();
        self.memory.observe(&event, &mut outbox);
        for command in outbox {
            self.send(command);
        }
        // Events that follow an LLM call: the Prompt panel refreshes when next shown.
        if matches!(
            event,
            Event::Companion(crate::companion::CompanionEvent::TurnCommitted { .. } | crate::companion::CompanionEvent::Failed { .. })
                | Event::Scene(crate::scene::SceneEvent::RoundCompleted { .. })
                | Event::Identity(crate::identity::IdentityEvent::CheckpointReady { .. })
                | Event::Llm(crate::engine::LlmEvent::ProfileTested { .. })
        ) {
            self.prompt.mark_stale();
        }
    }

    /// Apply pending events (bounded per frame).
    pub fn drain_events(&mut self) {
        for _ in 0..MAX_EVENTS_PER_FRAME {
            match self.engine.events().try_recv() {
                Ok(event) => self.apply(event),
                Err(_) => break,
            }
        }
    }
}

impl eframe::App for WorkbenchApp {
    fn logic(&mut self, _ctx: &egui::Context, _frame: &mut eframe::Frame) {
        self.drain_events();
    }

    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        let dropped: Vec<std::path::PathBuf> = ui.ctx().input(|i| i.raw.dropped_files.iter().map(|f| f.path().to_path_buf()).collect());
        if !dropped.is_empty() {
            self.panel = PanelKind::Library;
            self.send(LibraryPanel::import_command(dropped));
        }
        egui::Panel::top("nav").show(ui, |ui| {
            ui.horizontal_wrapped(|ui| {
                ui.strong("Lorekeeper");
                ui.separator();
                for kind in PanelKind::ALL {
                    ui.selectable_value(&mut self.panel, kind, kind.title());
                }
                ui.separator();
                let config = self.engine.context().config();
                let line = model_line(&config);
                if ui.link(line.0).on_hover_text(line.1).clicked() {
                    self.panel = PanelKind::Providers;
                }
            });
        });
        egui::Panel::bottom("event_log").resizable(true).default_size(140.0).show(ui, |ui| {
            self.log.show(ui);
        });
        egui::CentralPanel::default_margins().show(ui, |ui| {
            let mut outbox = Vec::new();
            match self.panel {
                PanelKind::Providers => self.providers.show(ui, &mut outbox),
                PanelKind::Waves => {
                    egui::ScrollArea::vertical().show(ui, |ui| self.identity.show_waves(ui, &mut outbox));
                }
                PanelKind::Checkpoints => {
                    egui::ScrollArea::vertical().show(ui, |ui| self.identity.show_checkpoints(ui, &mut outbox));
                }
                PanelKind::Library => self.library.show(ui, &mut outbox),
                PanelKind::Scene => self.scene.show_scene(ui, &mut outbox),
                PanelKind::Budgets => self.scene.show_budgets(ui, &mut outbox),
                PanelKind::Memory => self.memory.show(ui, &mut outbox),
                PanelKind::Prompt => self.prompt.show(ui, &mut outbox),
                PanelKind::Chat => {
                    self.chat.show(ui, &mut outbox);
                    if let Some(id) = self.chat.take_open_memory() {
                        self.panel = PanelKind::Memory;
                        outbox.push(self.memory.focus(id));
                    }
                }
            }
            for command in outbox {
                self.send(command);
            }
        });
    }
}

/// Open the workbench window (blocks until it is closed).
pub fn run_native(paths: Paths) -> Result<(), UiError> {
    let engine = engine::start(paths)?;
    // A first launch opens on a playable scene.
    if let Err(e) = crate::scene::demo::ensure(&engine.context().store) {
        tracing::warn!("cannot add the demo scene: {e}");
    }
    if let Err(e) = crate::companion::demo::ensure(&engine.context().store) {
        tracing::warn!("cannot add the demo companion: {e}");
    }
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default().with_title("Lorekeeper").with_inner_size([1280.0, 800.0]),
        ..Default::default()
    };
    eframe::run_native("Lorekeeper", options, Box::new(move |cc| Ok(Box::new(WorkbenchApp::new(&cc.egui_ctx, engine)))))
        .map_err(|e| UiError::Window(e.to_string()))
}

/// What the default profile runs on, said plainly, with a hint for switching.
fn model_line(config: &crate::config::Config) -> (String, String) {
    use crate::llm::ProviderKind;
    let switch = "Click to choose another profile: a local server (llama.cpp, Ollama, LM Studio) or an API.".to_string();
    let Some(p) = config.profile(&config.default_profile) else {
        return ("No default profile".into(), switch);
    };
    let text = match p.kind {
        ProviderKind::Local => {
            let path = crate::llm::local::resolve_model_path(p.path.as_deref());
            match std::fs::metadata(&path) {
                Ok(m) => format!(
                    "Model: embedded {} ({} MiB, in-process, offline; small and rough)",
                    p.model,
                    m.len() / (1024 * 1024)
                ),
                Err(_) => format!("Model: embedded {} — not installed (run .ci/setup.sh)", p.model),
            }
        }
        ProviderKind::Scripted => "Model: none — scripted demo replies".to_string(),
        kind => format!("Model: {} via {} at {}", p.model, kind.label(), p.base_url().unwrap_or("?")),
    };
    (text, switch)
}
