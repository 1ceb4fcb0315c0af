//! The workbench window. The only module that knows egui.
//!
//! Invariant: the UI renders a view model and sends commands; it never blocks and never
//! touches the store or the network. Events are drained in `logic`, drawing happens in
//! `ui`, and the engine wakes the window after every event.

mod budgets;
pub mod campaigns;
pub mod chat;
mod drafts;
mod event_log;
mod identity;
pub mod layout;
pub mod library;
pub mod lore_editor;
mod memory;
mod portrait;
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
use layout::{NamedLayout, WorkbenchState};
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

/// The panels of the workbench, in the order of the navigation bar. Each is a tile of
/// the layout; the first ten answer Ctrl+1 … Ctrl+0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub enum PanelKind {
    Campaigns,
    #[default]
    Waves,
    Checkpoints,
    Scene,
    Chat,
    Memory,
    Budgets,
    Prompt,
    Library,
    Providers,
    /// The chat's last packet with the memories it carried (drawn beside the chat when it
    /// has no tile of its own).
    Packet,
    /// What each agent's last prompt was given from memory.
    Injections,
    /// The event log.
    Events,
}

impl PanelKind {
    /// The panel whose title is `name` (any case).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.title().eq_ignore_ascii_case(name.trim()))
    }

    pub const ALL: [PanelKind; 13] = [
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
        PanelKind::Packet,
        PanelKind::Injections,
        PanelKind::Events,
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
            PanelKind::Packet => "Packet",
            PanelKind::Injections => "Injected memories",
            PanelKind::Events => "Event log",
        }
    }
}

/// Fonts for what egui's own cannot draw (it has Latin, Greek, Cyrillic, symbols and,
/// with `monochrome_emoji_fonts`, emoji): Chinese, Japanese and Korean, which users'
/// cards and lorebooks are often written in. The first one installed is used;
/// `.ci/setup.sh` installs the first (`fonts-wqy-microhei`, Apache-2.0). Read from the
/// system, never downloaded.
pub const FALLBACK_FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf",
];

/// Fonts for Arabic and Hebrew; `.ci/setup.sh` installs the first (`fonts-dejavu-core`).
/// More than a matter of boxes: egui 0.37 splits a line into runs by the font that draws
/// each character and shapes each run in the direction of its script, so letters no font
/// has stay in the Latin font's run and turn the whole run, English included, right to
/// left. With a font of their own they form runs of their own: each word reads right to
/// left and the Latin around it left to right (words keep their logical order: egui has
/// no bidirectional layout).
pub const RTL_FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/noto/NotoSansArabic-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// Add the first installed font of [`FALLBACK_FONTS`] and of [`RTL_FONTS`] behind
/// egui's own fonts, in both families, so a glyph egui lacks is drawn instead of shown
/// as a box. Returns the files used.
pub fn install_fallback_fonts(ctx: &egui::Context) -> Vec<&'static str> {
    let mut fonts = egui::FontDefinitions::default();
    let mut used = Vec::new();
    for (name, list) in [("fallback", &FALLBACK_FONTS), ("rtl", &RTL_FONTS)] {
        let Some((path, bytes)) = list.iter().find_map(|p| std::fs::read(p).ok().map(|b| (*p, b))) else { continue };
        fonts.font_data.insert(name.into(), std::sync::Arc::new(egui::FontData::from_owned(bytes)));
        for family in [egui::FontFamily::Proportional, egui::FontFamily::Monospace] {
            fonts.families.entry(family).or_default().push(name.into());
        }
        tracing::debug!(font = path, "fallback font installed");
        used.push(path);
    }
    ctx.set_fonts(fonts);
    used
}

/// A chart's key in small type in its top-left corner, half see-through, so a chart a few
/// hundred points tall keeps most of its plot in view.
pub(crate) fn small_legend() -> egui_plot::Legend {
    egui_plot::Legend::default().text_style(egui::TextStyle::Small).position(egui_plot::Corner::LeftTop).background_alpha(0.5)
}

/// How many characters of a name a row, a button or a menu shows.
pub const SHORT_NAME: usize = 40;

/// A name as a row, a button or a menu shows it: past [`SHORT_NAME`] characters it ends in
/// "…", so one card's long name ("Bartholomew Aloysius …, Lord Protector of the Sunken
/// Reaches") cannot widen a panel past its tile and push its controls out of view.
pub fn short(name: &str) -> std::borrow::Cow<'_, str> {
    if name.chars().count() <= SHORT_NAME {
        return std::borrow::Cow::Borrowed(name);
    }
    let kept: String = name.chars().take(SHORT_NAME - 1).collect();
    std::borrow::Cow::Owned(format!("{}…", kept.trim_end()))
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

/// Every panel unit of the workbench. Kept apart from the layout so the tiles can lend
/// the panels to each tile while the tree itself is being drawn.
struct Panels {
    log: EventLog,
    providers: ProvidersPanel,
    identity: IdentityPanels,
    library: LibraryPanel,
    scene: ScenePanels,
    memory: MemoryPanel,
    chat: ChatPanel,
    prompt: PromptPanel,
    campaigns: campaigns::CampaignsPanel,
}

impl Panels {
    /// Every panel unit, in navigation order.
    fn all(&mut self) -> [&mut dyn Panel; 9] {
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

    fn show(&mut self, kind: PanelKind, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        for panel in self.all() {
            if panel.kinds().contains(&kind) {
                panel.show(kind, ui, outbox);
            }
        }
    }
}

/// What the tiles need to draw one frame: the panels to lend each tile, where their
/// commands go, and which panel the game master last picked.
struct TileDispatch<'a> {
    panels: &'a mut Panels,
    outbox: &'a mut Vec<Command>,
    focused: &'a mut PanelKind,
}

impl egui_tiles::Behavior<PanelKind> for TileDispatch<'_> {
    fn pane_ui(&mut self, ui: &mut egui::Ui, _tile: egui_tiles::TileId, kind: &mut PanelKind) -> egui_tiles::UiResponse {
        egui::Frame::new().inner_margin(6.0).show(ui, |ui| {
            ui.set_min_size(ui.available_size());
            self.panels.show(*kind, ui, self.outbox);
        });
        egui_tiles::UiResponse::None
    }

    fn tab_title_for_pane(&mut self, kind: &PanelKind) -> egui::WidgetText {
        kind.title().into()
    }

    fn on_tab_button(&mut self, tiles: &mut egui_tiles::Tiles<PanelKind>, tile: egui_tiles::TileId, response: egui::Response) -> egui::Response {
        if response.clicked()
            && let Some(egui_tiles::Tile::Pane(kind)) = tiles.get(tile)
        {
            *self.focused = *kind;
        }
        response.on_hover_text("Drag the tab to move the panel; drag a tile's edge to resize it")
    }

    /// A panel can be closed from its tab; the navigation bar brings it back.
    fn is_tab_closable(&self, tiles: &egui_tiles::Tiles<PanelKind>, tile: egui_tiles::TileId) -> bool {
        matches!(tiles.get(tile), Some(egui_tiles::Tile::Pane(_)))
    }

    fn simplification_options(&self) -> egui_tiles::SimplificationOptions {
        egui_tiles::SimplificationOptions { all_panes_must_have_tabs: true, ..Default::default() }
    }

    fn tab_bar_height(&self, _style: &egui::Style) -> f32 {
        22.0
    }
}

/// The eframe application.
pub struct WorkbenchApp {
    engine: EngineHandle,
    panels: Panels,
    /// The tiles and what else survives a restart.
    state: WorkbenchState,
    /// The name typed for "Save layout".
    layout_name: String,
    /// Commands the engine could not take yet (its queue was full): sent first on the
    /// next frame, in order, and shown as "engine busy" meanwhile. A frame never waits.
    pending: VecDeque<Command>,
    /// The window was asked to close while work ran: what runs, shown until the game
    /// master quits anyway or keeps working.
    close_guard: Option<String>,
    /// The `?` overlay of keyboard shortcuts is open.
    show_shortcuts: bool,
    /// The game master chose to quit with work running.
    quit_anyway: bool,
}

impl WorkbenchApp {
    /// The workbench with every panel as a tab (one shown at a time) and nothing
    /// remembered: what tests and the screenshot command start from.
    pub fn new(egui_ctx: &egui::Context, engine: EngineHandle) -> Self {
        Self::with_state(egui_ctx, engine, WorkbenchState::default())
    }

    /// The workbench as it was when it last closed (eframe's storage), or on a first
    /// launch the *Play a scene* layout over the demo scene.
    pub fn restore(egui_ctx: &egui::Context, engine: EngineHandle, storage: Option<&dyn eframe::Storage>) -> Self {
        let state = storage.and_then(WorkbenchState::load).unwrap_or_else(|| WorkbenchState::starting_with(NamedLayout::PlayScene));
        Self::with_state(egui_ctx, engine, state)
    }

    /// Wire the engine's events to this window's repaints and open what `state` had open.
    pub fn with_state(egui_ctx: &egui::Context, engine: EngineHandle, state: WorkbenchState) -> Self {
        Self::build(egui_ctx, engine, state, true)
    }

    /// The workbench for a capture (the screenshot command): as [`Self::new`], but it
    /// never resumes an interrupted identity run — a picture must not spend model calls.
    pub fn for_capture(egui_ctx: &egui::Context, engine: EngineHandle) -> Self {
        Self::build(egui_ctx, engine, WorkbenchState::default(), false)
    }

    fn build(egui_ctx: &egui::Context, engine: EngineHandle, state: WorkbenchState, resume: bool) -> Self {
        install_fallback_fonts(egui_ctx);
        let repaint = egui_ctx.clone();
        engine.set_waker(move || repaint.request_repaint());
        prose::set_raw(egui_ctx, state.raw_text);
        let mut log = EventLog::default();
        for line in engine.config_warnings() {
            log.push_warn(line);
        }
        let mut app = Self {
            engine,
            panels: Panels {
                log,
                providers: ProvidersPanel::new(),
                identity: IdentityPanels::default(),
                library: LibraryPanel::default(),
                scene: ScenePanels::default(),
                memory: MemoryPanel::new(),
                chat: ChatPanel::default(),
                prompt: PromptPanel::default(),
                campaigns: campaigns::CampaignsPanel::default(),
            },
            state,
            layout_name: String::new(),
            pending: VecDeque::new(),
            close_guard: None,
            show_shortcuts: false,
            quit_anyway: false,
        };
        app.panels.providers.set_paths(app.engine.context().paths.clone());
        if let Some(scene) = app.state.scene.clone() {
            app.panels.scene.restore(scene);
        }
        app.panels.scene.restore_drafts(app.state.scene_drafts.clone());
        app.panels.chat.restore_drafts(app.state.chat_drafts.clone());
        if let Some(character) = app.state.chat_character.clone() {
            app.panels.chat.restore(character);
        }
        if let Some(run) = app.state.identity_run.clone() {
            app.panels.identity.restore(run);
        }
        let startup: Vec<Command> = app.panels.all().iter().flat_map(|p| p.startup()).collect();
        for command in startup {
            if !resume && matches!(command, Command::Identity(crate::identity::IdentityCommand::Resume { .. })) {
                continue;
            }
            app.send(command);
        }
        app
    }

    /// What [`eframe::App::save`] writes: the tiles as they are and what is open.
    pub fn state(&self) -> WorkbenchState {
        let mut state = self.state.clone();
        state.scene = self.panels.scene.selected().map(str::to_string);
        state.chat_character = self.panels.chat.selected().map(str::to_string);
        state.identity_run = self.panels.identity.selected().map(str::to_string);
        state.scene_drafts = self.panels.scene.drafts();
        state.chat_drafts = self.panels.chat.drafts();
        state
    }

    /// The tiles in one line (see [`layout::describe`]).
    pub fn arrangement(&self) -> String {
        layout::describe(&self.state.tree)
    }

    /// The layout the tiles started from (a built-in title or a saved name).
    pub fn layout_name(&self) -> &str {
        &self.state.layout
    }

    /// Replace the tiles with a built-in layout, as the Layout menu does.
    pub fn use_layout(&mut self, layout: NamedLayout) {
        self.state.tree = layout.tree();
        self.state.layout = layout.title().to_string();
        self.state.focused = layout.focus();
    }

    /// Keep the tiles as they are under `name` (replacing a layout saved by that name).
    pub fn save_layout(&mut self, name: &str) -> bool {
        let name = name.trim();
        if name.is_empty() || NamedLayout::ALL.iter().any(|l| l.title().eq_ignore_ascii_case(name)) {
            return false;
        }
        self.state.saved.insert(name.to_string(), self.state.tree.clone());
        self.state.layout = name.to_string();
        true
    }

    /// Put back the tiles saved as `name`.
    pub fn use_saved_layout(&mut self, name: &str) -> bool {
        let Some(tree) = self.state.saved.get(name).cloned() else { return false };
        self.state.tree = tree;
        self.state.layout = name.to_string();
        true
    }

    /// Whether `kind` is drawn (in the layout, on its tab container's open tab).
    pub fn is_shown(&self, kind: PanelKind) -> bool {
        layout::is_shown(&self.state.tree, kind)
    }

    /// What is running that closing the window would stop: a round, a chat reply, an
    /// identity agent (`None`: nothing).
    pub fn running_work(&self) -> Option<String> {
        let mut work = Vec::new();
        if self.panels.scene.live().is_some() {
            work.push("a scene round".to_string());
        }
        if self.panels.chat.live().is_some() {
            work.push("a chat reply".to_string());
        }
        // Only agents this process runs: one the CLI or a server runs goes on without us.
        if let Some(view) = self.panels.identity.view() {
            let agents = self.panels.identity.working_here();
            if agents > 0 {
                work.push(format!("{agents} identity agent(s) of {}", view.run.name));
            }
        }
        (!work.is_empty()).then(|| work.join(", "))
    }

    /// Close without the close guard's question (the screenshot verb, done capturing).
    pub fn quit_without_asking(&mut self) {
        self.quit_anyway = true;
    }

    /// Whether the close guard is showing.
    pub fn close_guard(&self) -> Option<&str> {
        self.close_guard.as_deref()
    }

    /// The Providers panel's view model.
    pub fn providers(&self) -> &ProvidersPanel {
        &self.panels.providers
    }

    /// The Campaigns panel's view model.
    pub fn campaigns(&self) -> &campaigns::CampaignsPanel {
        &self.panels.campaigns
    }

    /// Select a node of the Campaigns tree by kind and name, as a click on it would.
    pub fn select_in_campaigns(&mut self, level: crate::scene::authoring::Level, name: &str) -> bool {
        self.panels.campaigns.select_named(level, name)
    }

    /// The Prompt panel's view model.
    pub fn prompt(&self) -> &PromptPanel {
        &self.panels.prompt
    }

    /// The Chat panel's view model.
    pub fn chat(&self) -> &ChatPanel {
        &self.panels.chat
    }

    /// The memory browser's view model.
    pub fn memory(&self) -> &MemoryPanel {
        &self.panels.memory
    }

    /// The panel last picked (from the navigation bar, a tab or a shortcut).
    pub fn panel(&self) -> PanelKind {
        self.state.focused
    }

    pub fn engine(&self) -> &EngineHandle {
        &self.engine
    }

    /// The identity panels' view model.
    pub fn identity(&self) -> &IdentityPanels {
        &self.panels.identity
    }

    /// The Scene and Budgets panels' view model.
    pub fn scene(&self) -> &ScenePanels {
        &self.panels.scene
    }

    /// The Library panel's view model (for tests).
    pub fn library(&self) -> &LibraryPanel {
        &self.panels.library
    }

    /// What the last test of a profile showed, as the Providers panel shows it.
    pub fn provider_test(&self, profile: &str) -> Option<&TestView> {
        self.panels.providers.test_view(profile)
    }

    /// The event log's lines, oldest first.
    pub fn log_lines(&self) -> impl Iterator<Item = &str> {
        self.panels.log.lines()
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
                    self.panels.log.push_error("engine", "the engine has stopped; restart the workbench");
                }
            }
        }
    }

    fn apply(&mut self, event: Event) {
        let mut outbox = Vec::new();
        for panel in self.panels.all() {
            panel.apply(&event, &mut outbox);
        }
        if let Event::Core(engine::CoreEvent::Error { context, message }) = &event {
            if context.starts_with("export ") || context.starts_with("delete character ") || context.starts_with("sheet of ") {
                self.panels.library.export_failed(&format!("{context}: {message}"));
            } else if context.starts_with("lorebook ") || context.starts_with("test lorebook ") {
                self.panels.library.lore_editor_mut().failed(&format!("{context}: {message}"));
            }
        }
        // Events that follow an LLM call, here or in another process (a round the CLI
        // played is heard as `ChangedElsewhere`): the Prompt panel refreshes when next shown.
        if matches!(
            event,
            Event::Companion(
                crate::companion::CompanionEvent::TurnCommitted { .. }
                    | crate::companion::CompanionEvent::Failed { .. }
                    | crate::companion::CompanionEvent::ChangedElsewhere { .. }
            ) | Event::Scene(crate::scene::SceneEvent::RoundCompleted { .. } | crate::scene::SceneEvent::ChangedElsewhere { .. })
                | Event::Identity(crate::identity::IdentityEvent::CheckpointReady { .. })
                | Event::Llm(crate::engine::LlmEvent::ProfileTested { .. })
        ) {
            self.panels.prompt.mark_stale();
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

    /// The navigation bar: a panel's entry brings it into view, the Layout menu swaps
    /// the tiles for a named or saved arrangement or saves this one.
    fn navigation(&mut self, ui: &mut egui::Ui) {
        ui.horizontal_wrapped(|ui| {
            ui.strong("Lorekeeper");
            ui.separator();
            let focused = self.state.focused;
            for kind in PanelKind::ALL {
                if ui.selectable_label(focused == kind, kind.title()).clicked() {
                    self.show_panel(kind);
                }
            }
            ui.separator();
            self.layout_menu(ui);
            ui.separator();
            if ui.checkbox(&mut self.state.raw_text, "Raw text").on_hover_text("Transcripts as written: asterisks kept, speech not coloured").changed() {
                prose::set_raw(ui.ctx(), self.state.raw_text);
            }
            if let Some(line) = self.panels.providers.model_line()
                && ui.link(&line.text).on_hover_text(&line.hint).clicked()
            {
                self.show_panel(PanelKind::Providers);
            }
            if !self.pending.is_empty() {
                ui.separator();
                ui.label(RichText::new(format!("engine busy: {} command(s) waiting", self.pending.len())).color(ui.visuals().warn_fg_color))
                    .on_hover_text("The engine's queue is full; your commands are sent, in order, as it catches up.");
            }
        });
    }

    fn layout_menu(&mut self, ui: &mut egui::Ui) {
        // The menu holds a text field (the name to save under), so a click inside it must
        // not close it; a click outside or a chosen layout does.
        let config = egui::containers::menu::MenuConfig::new().close_behavior(egui::PopupCloseBehavior::CloseOnClickOutside);
        let (response, _) = egui::containers::menu::MenuButton::new("Layouts").config(config).ui(ui, |ui| {
            for layout in NamedLayout::ALL {
                if ui.button(layout.title()).clicked() {
                    self.use_layout(layout);
                    ui.close();
                }
            }
            let saved: Vec<String> = self.state.saved.keys().cloned().collect();
            if !saved.is_empty() {
                ui.separator();
                ui.weak("Saved");
                for name in saved {
                    ui.horizontal(|ui| {
                        if ui.button(&name).clicked() {
                            self.use_saved_layout(&name);
                            ui.close();
                        }
                        if ui.small_button("Forget").on_hover_text(format!("Forget the layout {name:?}")).clicked() {
                            self.state.saved.remove(&name);
                        }
                    });
                }
            }
            ui.separator();
            ui.horizontal(|ui| {
                let label = ui.label("Layout name");
                ui.add(egui::TextEdit::singleline(&mut self.layout_name).desired_width(140.0)).labelled_by(label.id);
                let name = self.layout_name.clone();
                if ui.button("Save layout").on_hover_text("Keep the tiles as they are under this name").clicked() && self.save_layout(&name) {
                    self.layout_name.clear();
                    ui.close();
                }
            });
        });
        response.on_hover_text(format!("Now: {}", self.state.layout));
    }
}

impl eframe::App for WorkbenchApp {
    fn logic(&mut self, _ctx: &egui::Context, _frame: &mut eframe::Frame) {
        self.drain_events();
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, layout::STORAGE_KEY, &self.state());
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
        let mut polls = Vec::new();
        if let Some(next) = self.panels.identity.poll_elsewhere(&mut polls) {
            ui.ctx().request_repaint_after(next);
        }
        for command in polls {
            self.send(command);
        }
        let dropped: Vec<std::path::PathBuf> = ui.ctx().input(|i| i.raw.dropped_files.iter().map(|f| f.path().to_path_buf()).collect());
        if !dropped.is_empty() {
            self.show_panel(PanelKind::Library);
            self.send(LibraryPanel::import_command(dropped));
        }
        egui::Panel::top("nav").show(ui, |ui| self.navigation(ui));
        self.panels.chat.set_packet_elsewhere(layout::is_shown(&self.state.tree, PanelKind::Packet));
        egui::CentralPanel::default_margins().show(ui, |ui| {
            let mut outbox = Vec::new();
            let mut behavior = TileDispatch { panels: &mut self.panels, outbox: &mut outbox, focused: &mut self.state.focused };
            self.state.tree.ui(&mut behavior, ui);
            if let Some(scene) = self.panels.campaigns.take_open_scene() {
                self.open_scene(scene);
            }
            if let Some(id) = self.panels.chat.take_open_memory() {
                self.show_panel(PanelKind::Memory);
                outbox.push(self.panels.memory.focus(id));
            }
            if self.panels.memory.take_reveal() {
                self.show_panel(PanelKind::Memory);
            }
            for command in outbox {
                self.send(command);
            }
        });
    }
}

impl WorkbenchApp {
    /// Bring `kind` into view, as its entry in the navigation bar does: its tab is opened,
    /// or it joins the tiles beside the panel in use.
    pub fn show_panel(&mut self, kind: PanelKind) {
        layout::reveal(&mut self.state.tree, kind, self.state.focused);
        self.state.focused = kind;
    }

    /// Open `scene` in the Scene panel and bring it into view (as the Campaigns tree's
    /// "open" does).
    pub fn open_scene(&mut self, scene: String) {
        self.show_panel(PanelKind::Scene);
        let mut outbox = Vec::new();
        self.panels.scene.open(scene, &mut outbox);
        for command in outbox {
            self.send(command);
        }
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
            self.show_panel(PanelKind::ALL[n]);
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

/// Open the workbench window (blocks until it is closed). The layout, what was open and
/// the window's size are kept beside the config file (`workbench.ron`).
pub fn run_native(paths: Paths) -> Result<(), UiError> {
    let persistence = paths.config_file.with_file_name("workbench.ron");
    let engine = engine::start(paths)?;
    // A first launch opens on a playable scene and a companion to talk to; the panels
    // list them again when the engine says they are ready.
    // (The Chat panel asks for the demo companion itself when it starts.)
    if engine.send(Command::Scene(crate::scene::SceneCommand::Demo)).is_err() {
        tracing::warn!("the engine stopped before the demo could be added");
    }
    let options = eframe::NativeOptions {
        viewport: platform::viewport(egui::ViewportBuilder::default().with_title("Lorekeeper").with_inner_size([1280.0, 800.0])),
        persistence_path: Some(persistence),
        ..Default::default()
    };
    eframe::run_native("Lorekeeper", options, Box::new(move |cc| Ok(Box::new(WorkbenchApp::restore(&cc.egui_ctx, engine, cc.storage)))))
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
