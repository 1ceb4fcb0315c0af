//! The workbench window. The only module that knows egui.
//!
//! Invariant: the UI renders a view model and sends commands; it never blocks and never
//! touches the store or the network. Events are drained in `logic`, drawing happens in
//! `ui`, and the engine wakes the window after every event.

mod budgets;
pub mod campaigns;
pub mod chat;
mod event_log;
mod identity;
pub mod library;
pub mod lore_editor;
mod memory;
pub mod platform;
mod prompt;
pub mod prose;
mod providers;
mod scene;
mod screenshot;
pub use screenshot::{ScreenshotOptions, screenshot};

use crate::config::Paths;
use crate::engine::{self, Command, EngineHandle, Event};
use egui::RichText;
use std::collections::VecDeque;
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

/// One unit of the workbench: a view model that asks for what it needs when the window
/// opens, follows the engine's events, and draws the panel kinds it owns. The app loops
/// over its panels instead of knowing each one's methods.
pub trait Panel {
    /// The panel kinds this unit draws (the identity unit draws Waves and Checkpoints).
    fn kinds(&self) -> &'static [PanelKind];
    /// Commands sent once when the window opens.
    fn startup(&self) -> Vec<Command> {
        Vec::new()
    }
    /// Update the view model from one engine event; commands it needs go to `outbox`.
    fn apply(&mut self, event: &Event, outbox: &mut Vec<Command>);
    /// Draw `kind`; commands from the user's actions go to `outbox`.
    fn show(&mut self, kind: PanelKind, ui: &mut egui::Ui, outbox: &mut Vec<Command>);
}

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
    Campaigns,
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
    /// The panel whose title is `name` (any case).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.title().eq_ignore_ascii_case(name.trim()))
    }

    pub const ALL: [PanelKind; 10] = [
        PanelKind::Campaigns,
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
            PanelKind::Campaigns => "Campaigns",
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

/// Fonts for what egui's own cannot draw (it has Latin, Greek, Cyrillic and symbols):
/// Chinese, Japanese and Korean, which users' cards and lorebooks are often written in.
/// The first one installed is used; `.ci/setup.sh` installs the first
/// (`fonts-wqy-microhei`, Apache-2.0). Read from the system, never downloaded.
pub const FALLBACK_FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf",
];

/// Add the first installed [`FALLBACK_FONTS`] behind egui's own fonts, in both
/// families, so a glyph egui lacks is drawn instead of shown as a box. Returns the
/// file used.
pub fn install_fallback_fonts(ctx: &egui::Context) -> Option<&'static str> {
    let (path, bytes) = FALLBACK_FONTS.iter().find_map(|p| std::fs::read(p).ok().map(|b| (*p, b)))?;
    let mut fonts = egui::FontDefinitions::default();
    fonts.font_data.insert("fallback".into(), std::sync::Arc::new(egui::FontData::from_owned(bytes)));
    for family in [egui::FontFamily::Proportional, egui::FontFamily::Monospace] {
        fonts.families.entry(family).or_default().push("fallback".into());
    }
    ctx.set_fonts(fonts);
    tracing::debug!(font = path, "fallback font installed");
    Some(path)
}

/// Every keyboard shortcut of the workbench, as the `?` overlay lists them.
pub const SHORTCUTS: [(&str, &str); 8] = [
    ("Ctrl+1 … Ctrl+9, Ctrl+0", "show a panel: Campaigns, Waves, Checkpoints, Scene, Chat, Memory, Budgets, Prompt, Library, Providers"),
    ("Ctrl+Enter (Scene)", "play the round with your message"),
    ("Ctrl+Enter (Chat)", "send the message"),
    ("Esc (Scene, Chat)", "stop the running round or reply; nothing of it is saved"),
    ("Ctrl+Enter (Checkpoints)", "approve the checkpoint"),
    ("Ctrl+Shift+Enter (Checkpoints)", "send the checkpoint back with your feedback"),
    ("? or F1", "show or hide this list (not while you type in a field)"),
    ("Esc (this list)", "close it"),
];

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
    campaigns: campaigns::CampaignsPanel,
    /// Commands the engine could not take yet (its queue was full): sent first on the
    /// next frame, in order, and shown as "engine busy" meanwhile. A frame never waits.
    pending: VecDeque<Command>,
    /// The window was asked to close while work ran: what runs, shown until the game
    /// master quits anyway or keeps working.
    close_guard: Option<String>,
    /// The `?` overlay of keyboard shortcuts is open.
    show_shortcuts: bool,
    /// Transcripts as written (asterisks, one colour) rather than as prose.
    raw_text: bool,
    /// The game master chose to quit with work running.
    quit_anyway: bool,
}

impl WorkbenchApp {
    /// Wire the engine's events to this window's repaints.
    pub fn new(egui_ctx: &egui::Context, engine: EngineHandle) -> Self {
        install_fallback_fonts(egui_ctx);
        let repaint = egui_ctx.clone();
        engine.set_waker(move || repaint.request_repaint());
        let mut app = Self {
            engine,
            panel: PanelKind::Waves,
            log: EventLog::default(),
            providers: ProvidersPanel::new(),
            identity: IdentityPanels::default(),
            library: LibraryPanel::default(),
            scene: ScenePanels::default(),
            memory: MemoryPanel::new(),
            chat: ChatPanel::default(),
            prompt: PromptPanel::default(),
            campaigns: campaigns::CampaignsPanel::default(),
            pending: VecDeque::new(),
            close_guard: None,
            show_shortcuts: false,
            raw_text: false,
            quit_anyway: false,
        };
        app.providers.set_paths(app.engine.context().paths.clone());
        let startup: Vec<Command> = app.panels().iter().flat_map(|p| p.startup()).collect();
        for command in startup {
            app.send(command);
        }
        app
    }

    /// Every panel unit, in navigation order.
    fn panels(&mut self) -> [&mut dyn Panel; 9] {
        [
            &mut self.campaigns,
            &mut self.identity,
            &mut self.scene,
            &mut self.chat,
            &mut self.memory,
            &mut self.prompt,
            &mut self.library,
            &mut self.providers,
            &mut self.log,
        ]
    }

    /// What is running that closing the window would stop: a round, a chat reply, an
    /// identity agent (`None`: nothing).
    pub fn running_work(&self) -> Option<String> {
        let mut work = Vec::new();
        if self.scene.live().is_some() {
            work.push("a scene round".to_string());
        }
        if self.chat.live().is_some() {
            work.push("a chat reply".to_string());
        }
        if let Some(view) = self.identity.view() {
            let agents = view.checkpoints.iter().filter(|c| c.record.status.is_working()).count();
            if agents > 0 {
                work.push(format!("{agents} identity agent(s) of {}", view.run.name));
            }
        }
        (!work.is_empty()).then(|| work.join(", "))
    }

    /// Whether the close guard is showing.
    pub fn close_guard(&self) -> Option<&str> {
        self.close_guard.as_deref()
    }

    /// The Providers panel's view model.
    pub fn providers(&self) -> &ProvidersPanel {
        &self.providers
    }

    /// The Campaigns panel's view model.
    pub fn campaigns(&self) -> &campaigns::CampaignsPanel {
        &self.campaigns
    }

    /// Select a node of the Campaigns tree by kind and name, as a click on it would.
    pub fn select_in_campaigns(&mut self, level: crate::scene::authoring::Level, name: &str) -> bool {
        self.campaigns.select_named(level, name)
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

    /// Commands waiting for room in the engine's queue.
    pub fn pending_commands(&self) -> usize {
        self.pending.len()
    }

    /// Queue a command without blocking the frame: whatever the engine cannot take now
    /// waits in `pending`, behind any older command.
    fn send(&mut self, command: Command) {
        self.pending.push_back(command);
        self.flush();
    }

    fn flush(&mut self) {
        while let Some(command) = self.pending.pop_front() {
            match self.engine.try_send(command) {
                Ok(()) => {}
                Err(engine::TrySendError::Full(command)) => {
                    self.pending.push_front(command);
                    break;
                }
                Err(engine::TrySendError::Stopped) => {
                    self.pending.clear();
                    self.log.push_error("engine", "the engine has stopped; restart the workbench");
                }
            }
        }
    }

    fn apply(&mut self, event: Event) {
        let mut outbox = Vec::new();
        for panel in self.panels() {
            panel.apply(&event, &mut outbox);
        }
        if let Event::Core(engine::CoreEvent::Error { context, message }) = &event {
            if context.starts_with("export ") || context.starts_with("delete character ") || context.starts_with("sheet of ") {
                self.library.export_failed(&format!("{context}: {message}"));
            } else if context.starts_with("lorebook ") || context.starts_with("test lorebook ") {
                self.library.lore_editor_mut().failed(&format!("{context}: {message}"));
            }
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
        for command in outbox {
            self.send(command);
        }
    }

    /// Apply pending events (bounded per frame).
    pub fn drain_events(&mut self) {
        self.flush();
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
        // Closing while work runs asks first: the work would be lost (nothing of an
        // unfinished round or reply is kept).
        if ui.ctx().input(|i| i.viewport().close_requested()) && !self.quit_anyway {
            if let Some(work) = self.running_work() {
                ui.ctx().send_viewport_cmd(egui::ViewportCommand::CancelClose);
                self.close_guard = Some(work);
            }
        }
        if let Some(work) = self.close_guard.clone() {
            egui::Window::new("Quit while work runs?").collapsible(false).resizable(false).anchor(egui::Align2::CENTER_CENTER, [0.0, 0.0]).show(ui.ctx(), |ui| {
                ui.label(format!("Still running: {work}. Quitting stops it, and nothing of it is saved."));
                ui.horizontal(|ui| {
                    if ui.button("Keep working").clicked() {
                        self.close_guard = None;
                    }
                    if ui.button("Quit anyway").clicked() {
                        self.close_guard = None;
                        self.quit_anyway = true;
                        ui.ctx().send_viewport_cmd(egui::ViewportCommand::Close);
                    }
                });
            });
        }
        self.shortcuts(ui);
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
                if ui.checkbox(&mut self.raw_text, "Raw text").on_hover_text("Transcripts as written: asterisks kept, speech not coloured").changed() {
                    prose::set_raw(ui.ctx(), self.raw_text);
                }
                if let Some(line) = self.providers.model_line()
                    && ui.link(&line.text).on_hover_text(&line.hint).clicked()
                {
                    self.panel = PanelKind::Providers;
                }
                if !self.pending.is_empty() {
                    ui.separator();
                    ui.label(RichText::new(format!("engine busy: {} command(s) waiting", self.pending.len())).color(ui.visuals().warn_fg_color))
                        .on_hover_text("The engine's queue is full; your commands are sent, in order, as it catches up.");
                }
            });
        });
        egui::Panel::bottom("event_log").resizable(true).default_size(140.0).show(ui, |ui| {
            self.log.show(ui);
        });
        egui::CentralPanel::default_margins().show(ui, |ui| {
            let mut outbox = Vec::new();
            let kind = self.panel;
            for panel in self.panels() {
                if panel.kinds().contains(&kind) {
                    panel.show(kind, ui, &mut outbox);
                }
            }
            if let Some(scene) = self.campaigns.take_open_scene() {
                self.panel = PanelKind::Scene;
                self.scene.open(scene, &mut outbox);
            }
            if let Some(id) = self.chat.take_open_memory() {
                self.panel = PanelKind::Memory;
                outbox.push(self.memory.focus(id));
            }
            for command in outbox {
                self.send(command);
            }
        });
    }
}

impl WorkbenchApp {
    /// Show `kind`, as its entry in the navigation bar does.
    pub fn show_panel(&mut self, kind: PanelKind) {
        self.panel = kind;
    }

    /// Whether the keyboard shortcuts overlay is open.
    pub fn shortcuts_shown(&self) -> bool {
        self.show_shortcuts
    }

    /// The workbench-wide keys (panels, the overlay) and the overlay itself. Keys that
    /// type a character are ignored while a text field has the keyboard.
    fn shortcuts(&mut self, ui: &mut egui::Ui) {
        let typing = ui.ctx().egui_wants_keyboard_input();
        let numbers = [
            egui::Key::Num1,
            egui::Key::Num2,
            egui::Key::Num3,
            egui::Key::Num4,
            egui::Key::Num5,
            egui::Key::Num6,
            egui::Key::Num7,
            egui::Key::Num8,
            egui::Key::Num9,
            egui::Key::Num0,
        ];
        let (panel, toggle, close) = ui.input_mut(|i| {
            let panel = numbers.iter().position(|k| i.consume_key(egui::Modifiers::COMMAND, *k));
            let question = !typing && i.events.iter().any(|e| matches!(e, egui::Event::Text(t) if t == "?"));
            let toggle = i.consume_key(egui::Modifiers::NONE, egui::Key::F1) || question;
            let close = self.show_shortcuts && i.consume_key(egui::Modifiers::NONE, egui::Key::Escape);
            (panel, toggle, close)
        });
        if let Some(n) = panel {
            self.panel = PanelKind::ALL[n];
        }
        if toggle {
            self.show_shortcuts = !self.show_shortcuts;
        }
        if close {
            self.show_shortcuts = false;
        }
        if !self.show_shortcuts {
            return;
        }
        let mut open = true;
        egui::Window::new("Keyboard shortcuts").open(&mut open).collapsible(false).resizable(false).anchor(egui::Align2::CENTER_CENTER, [0.0, 0.0]).show(ui.ctx(), |ui| {
            egui::Grid::new("shortcuts").num_columns(2).striped(true).show(ui, |ui| {
                for (keys, what) in SHORTCUTS {
                    ui.strong(keys);
                    ui.label(what);
                    ui.end_row();
                }
            });
        });
        self.show_shortcuts &= open;
    }
}

/// Open the workbench window (blocks until it is closed).
pub fn run_native(paths: Paths) -> Result<(), UiError> {
    let engine = engine::start(paths)?;
    // A first launch opens on a playable scene and a companion to talk to; the panels
    // list them again when the engine says they are ready.
    // (The Chat panel asks for the demo companion itself when it starts.)
    if engine.send(Command::Scene(crate::scene::SceneCommand::Demo)).is_err() {
        tracing::warn!("the engine stopped before the demo could be added");
    }
    let options = eframe::NativeOptions {
        viewport: platform::viewport(egui::ViewportBuilder::default().with_title("Lorekeeper").with_inner_size([1280.0, 800.0])),
        ..Default::default()
    };
    eframe::run_native("Lorekeeper", options, Box::new(move |cc| Ok(Box::new(WorkbenchApp::new(&cc.egui_ctx, engine)))))
        .map_err(|e| UiError::Window(e.to_string()))
}

/// A panel's outcome line: plain for what went through, in the error colour for what did not.
pub(crate) fn status_line(ui: &mut egui::Ui, status: &Option<Result<String, String>>) {
    match status {
        Some(Ok(text)) => {
            ui.label(text);
        }
        Some(Err(text)) => {
            ui.colored_label(ui.visuals().error_fg_color, text);
        }
        None => {}
    }
}
