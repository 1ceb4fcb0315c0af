//! The memory browser: search memories and lore with filters, see every hit's keyword,
//! vector and fused score as bars, read the source turn in its conversation, see which
//! memories went into each agent's last prompt, and watch the index (vectors indexed by
//! the graph, pending in the exact-scan tail, rebuilding).

use crate::engine::{Command, Event};
use crate::memory::injections::Injection;
use crate::memory::{Memory, MemoryCommand, MemoryEvent, MemoryStats, RetrievalHit, Scope, SearchFilter, SearchMode, SearchRequest};
use std::time::Instant;

/// The two halves of the panel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemoryTab {
    #[default]
    Search,
    /// What each agent's last prompt was given.
    Injections,
}

/// Long work on the index, as the status line shows it.
#[derive(Debug, Clone, PartialEq)]
enum Work {
    /// Embedding (import or reindex): `done` of `total` memories.
    Embedding { what: &'static str, done: usize, total: usize },
    /// The HNSW graph is being rebuilt: points inserted so far, and since when.
    Rebuilding { vectors: usize, done: usize, since: Instant },
}

#[derive(Default)]
pub struct MemoryPanel {
    tab: MemoryTab,
    query: String,
    k: usize,
    mode: SearchMode,
    speaker: String,
    witness: String,
    scope: String,
    from: String,
    to: String,
    hits: Vec<RetrievalHit>,
    searched: Option<(String, f64)>,
    searching: bool,
    selected: Option<String>,
    context: Vec<Memory>,
    stats: Option<MemoryStats>,
    status: Option<String>,
    work: Option<Work>,
    injections: Vec<Injection>,
    /// The selected agent's earlier prompts (newest first), and the one shown (0: latest).
    history: Vec<Injection>,
    shown: usize,
    agent: Option<String>,
    /// The agent was picked by hand: it stays picked while it has an injection.
    agent_by_hand: bool,
    /// Which agents the person is working with (`scene:` or `companion:`), from what they
    /// did last: the agent shown follows it until one is picked by hand.
    prefer: Option<&'static str>,
    /// The last search sent, run again after a memory is curated.
    last_request: Option<SearchRequest>,
    /// The selected memory's text as the user edits it, and which memory it is for.
    edit_text: String,
    edit_for: Option<String>,
    /// A curation was done: the edit field is filled again from the context that follows
    /// it (not from the one still shown, which holds the text from before).
    refill_edit: bool,
    /// A memory was opened from the injections tile: bring the browser into view.
    reveal: bool,
    /// An embedding model picked in the menu, waiting for the user to confirm the switch
    /// (it re-embeds every memory).
    switch_to: Option<&'static str>,
}

fn optional(text: &str) -> Option<String> {
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

impl MemoryPanel {
    pub fn new() -> Self {
        Self { k: 20, ..Default::default() }
    }

    /// Commands to send when the workbench opens (index status for the header, what the
    /// agents were last given, and the newest memories, so the browser opens on the
    /// library rather than on an empty list).
    pub fn startup() -> Vec<Command> {
        let mut commands = vec![Command::Memory(MemoryCommand::Stats), Command::Memory(MemoryCommand::Injections)];
        if let Ok(request) = Self::new().request() {
            commands.push(Command::Memory(MemoryCommand::Search { request }));
        }
        commands
    }

    pub fn tab(&self) -> MemoryTab {
        self.tab
    }

    /// Every agent's last injection, most recent first.
    pub fn injections(&self) -> &[Injection] {
        &self.injections
    }

    /// The agent whose injected memories are shown.
    pub fn selected_agent(&self) -> Option<&str> {
        self.agent.as_deref()
    }

    /// Follow the engine: memory events update the panel; a committed round (the moment
    /// injections are written, in the round's transaction) asks for them again, and
    /// finished index work asks for fresh counts.
    pub fn observe(&mut self, event: &Event, outbox: &mut Vec<Command>) {
        match event {
            Event::Memory(e) => {
                self.apply(e);
                // A curated memory: the list and the context show it as it now is.
                if let MemoryEvent::Curated { .. } = e {
                    if let Some(request) = self.last_request.clone() {
                        self.searching = true;
                        outbox.push(Command::Memory(MemoryCommand::Search { request }));
                    }
                    if let Some(id) = self.selected.clone() {
                        outbox.push(Command::Memory(MemoryCommand::Context { id, before: 3, after: 3 }));
                    }
                }
                if matches!(
                    e,
                    MemoryEvent::Imported { .. }
                        | MemoryEvent::Reindexed { .. }
                        | MemoryEvent::IndexRebuilt { .. }
                        | MemoryEvent::LoreIndexed { .. }
                ) {
                    self.memories_changed(outbox);
                }
            }
            // A memory command that failed (a model not installed, a file that cannot be
            // read): say so where the work was shown, and stop showing it.
            Event::Core(crate::engine::CoreEvent::Error { context, message }) if context.starts_with("memory") => {
                self.work = None;
                self.searching = false;
                self.status = Some(format!("{context} failed: {message}"));
            }
            // A round here, or one another process played (the CLI, a server): what its
            // characters were given is in the library either way.
            Event::Scene(crate::scene::SceneEvent::RoundCompleted { .. } | crate::scene::SceneEvent::ChangedElsewhere { .. }) => {
                self.follow("scene:");
                outbox.push(Command::Memory(MemoryCommand::Injections));
                self.memories_changed(outbox);
            }
            Event::Companion(crate::companion::CompanionEvent::TurnCommitted { .. }) => {
                self.follow("companion:");
                outbox.push(Command::Memory(MemoryCommand::Injections));
                self.memories_changed(outbox);
            }
            // Whatever else writes or takes back memories: the count and the newest follow.
            Event::Scene(
                crate::scene::SceneEvent::RoundUndone { .. }
                | crate::scene::SceneEvent::MessageEdited { .. }
                | crate::scene::SceneEvent::MessageDeleted { .. }
                | crate::scene::SceneEvent::AlternativeChosen { .. }
                | crate::scene::SceneEvent::RedoFailed { .. }
                | crate::scene::SceneEvent::SummaryUpdated { .. },
            )
            | Event::Companion(
                crate::companion::CompanionEvent::Changed { .. }
                | crate::companion::CompanionEvent::Undone { .. }
                | crate::companion::CompanionEvent::Imported { .. }
                | crate::companion::CompanionEvent::Summarised { .. },
            )
            | Event::Author(crate::scene::author::AuthorEvent::Authored { .. }) => self.memories_changed(outbox),
            // A scene open in the Scene panel: its agents are the ones to show.
            Event::Scene(crate::scene::SceneEvent::Snapshot { .. }) if self.prefer.is_none() => self.follow("scene:"),
            _ => {}
        }
    }

    /// Memories were written or taken back elsewhere: the count follows, and so does the
    /// list when it shows the newest (a search the person made stays as they made it).
    fn memories_changed(&mut self, outbox: &mut Vec<Command>) {
        outbox.push(Command::Memory(MemoryCommand::Stats));
        let browsing = self.query.trim().is_empty() && self.searched.as_ref().is_some_and(|(q, _)| q.trim().is_empty());
        if !self.searching && browsing {
            if let Ok(request) = self.request() {
                self.searching = true;
                outbox.push(Command::Memory(MemoryCommand::Search { request }));
            }
        }
    }

    /// Show the agents of what the person did last (`scene:` or `companion:`).
    fn follow(&mut self, prefix: &'static str) {
        self.prefer = Some(prefix);
        if !self.agent_by_hand {
            self.agent = self.default_agent();
        }
    }

    /// The most recently prompted agent of the kind the person works with, else the most
    /// recent of all.
    fn default_agent(&self) -> Option<String> {
        let preferred = self.prefer.and_then(|p| self.injections.iter().find(|i| i.agent.starts_with(p)));
        preferred.or(self.injections.first()).map(|i| i.agent.clone())
    }

    /// The text of the search whose results are shown.
    pub fn shown_query(&self) -> Option<&str> {
        self.searched.as_ref().map(|(q, _)| q.as_str())
    }

    /// The text of the last search sent.
    pub fn last_query(&self) -> Option<&str> {
        self.last_request.as_ref().map(|r| r.query.as_str())
    }

    /// The memory whose context is open, as last reported (pin and edit marks included).
    pub fn selected_memory(&self) -> Option<&Memory> {
        self.selected.as_ref().and_then(|id| self.context.iter().find(|m| &m.id == id))
    }

    pub fn hits(&self) -> &[RetrievalHit] {
        &self.hits
    }

    pub fn stats(&self) -> Option<&MemoryStats> {
        self.stats.as_ref()
    }

    pub fn apply(&mut self, event: &MemoryEvent) {
        match event {
            // Results of an older search than the last one asked (the newest list asked
            // at start, answered after the person's own search) are not shown over it.
            MemoryEvent::SearchResults { query, .. } if self.last_request.as_ref().is_some_and(|r| r.query != *query) => {}
            MemoryEvent::SearchResults { query, hits, elapsed_ms, .. } => {
                self.searching = false;
                self.hits = hits.clone();
                self.searched = Some((query.clone(), *elapsed_ms));
            }
            MemoryEvent::Stats { stats } => self.stats = Some(stats.clone()),
            MemoryEvent::Context { id, memories } if self.selected.as_deref() == Some(id) => {
                self.context = memories.clone();
                if std::mem::take(&mut self.refill_edit) {
                    self.edit_for = None;
                }
            }
            MemoryEvent::ImportProgress { done, total } => {
                self.work = Some(Work::Embedding { what: "importing", done: *done, total: *total });
            }
            MemoryEvent::ReindexProgress { done, total } => {
                self.work = Some(Work::Embedding { what: "embedding", done: *done, total: *total });
            }
            MemoryEvent::IndexRebuilding { vectors } => {
                self.work = Some(Work::Rebuilding { vectors: *vectors, done: 0, since: Instant::now() });
                if let Some(s) = self.stats.as_mut() {
                    s.rebuilding = true;
                }
            }
            MemoryEvent::IndexRebuildProgress { done, total } => match self.work.as_mut() {
                Some(Work::Rebuilding { done: shown, .. }) => *shown = *done,
                _ => {
                    // The panel opened while a rebuild was already running.
                    self.work = Some(Work::Rebuilding { vectors: *total, done: *done, since: Instant::now() })
                }
            },
            MemoryEvent::IndexRebuilt { vectors, elapsed_ms } => {
                self.work = None;
                self.status = Some(format!("vector graph rebuilt over {vectors} vectors in {:.1} s", *elapsed_ms as f64 / 1000.0));
                if let Some(s) = self.stats.as_mut() {
                    s.rebuilding = false;
                }
            }
            MemoryEvent::Imported { .. } => self.work = None,
            MemoryEvent::Reindexed { embedded } => {
                self.work = None;
                self.status = Some(format!("embedded {embedded} memories"));
            }
            MemoryEvent::Curated { curated } => {
                self.status = Some(match curated.ids.as_slice() {
                    [one] => format!("{} {one}", curated.action),
                    many => format!("{} {} memories", curated.action, many.len()),
                });
                if matches!(curated.action.as_str(), "deleted" | "forgot")
                    && self.selected.as_ref().is_some_and(|s| curated.ids.contains(s))
                {
                    self.selected = None;
                    self.context.clear();
                }
                self.refill_edit = true;
            }
            MemoryEvent::InjectionHistory { agent, injections } if self.agent.as_deref() == Some(agent.as_str()) => {
                self.history = injections.clone();
                self.shown = self.shown.min(self.history.len().saturating_sub(1));
            }
            MemoryEvent::Injections { injections } => {
                self.injections = injections.clone();
                let still_there = self.agent.as_ref().is_some_and(|a| self.injections.iter().any(|i| &i.agent == a));
                if !still_there {
                    self.agent_by_hand = false;
                }
                if !self.agent_by_hand {
                    self.agent = self.default_agent();
                }
            }
            _ => {}
        }
    }

    fn request(&self) -> Result<SearchRequest, String> {
        let scope = match optional(&self.scope) {
            Some(s) => Some(Scope::parse(&s).ok_or_else(|| format!("unknown scope {s:?}: world, campaign:ID or character:NAME"))?),
            None => None,
        };
        Ok(SearchRequest {
            query: self.query.clone(),
            k: self.k.max(1),
            mode: self.mode,
            filter: SearchFilter {
                scope,
                kinds: Vec::new(),
                speaker: optional(&self.speaker),
                witness: optional(&self.witness),
                witnessed_only: false,
                session: None,
                time_from: optional(&self.from),
                time_to: optional(&self.to),
            },
        })
    }

    pub fn show(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        ui.heading("Memory");
        self.show_status(ui, outbox);
        ui.separator();
        ui.horizontal(|ui| {
            ui.selectable_value(&mut self.tab, MemoryTab::Search, "Browse memories");
            let label = format!("Injected into prompts ({})", self.injections.len());
            if ui.selectable_value(&mut self.tab, MemoryTab::Injections, label).clicked() {
                outbox.push(Command::Memory(MemoryCommand::Injections));
            }
        });
        ui.separator();
        let open = match self.tab {
            MemoryTab::Search => self.show_search(ui, outbox),
            MemoryTab::Injections => self.show_injections(ui, outbox),
        };
        if let Some(id) = open {
            self.open(id, outbox);
        }
        if self.selected.is_some() {
            ui.separator();
            self.show_context(ui);
            self.show_curation(ui, outbox);
        }
    }

    /// The memories injected into each agent's prompts, as a tile of their own (the
    /// *Play a scene* and *Inspect memory* layouts put it beside the transcript). Opening
    /// a memory from here shows it in the memory browser.
    pub fn show_injected(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        let open = egui::ScrollArea::vertical().id_salt("injected_tile").show(ui, |ui| self.show_injections(ui, outbox)).inner;
        if let Some(id) = open {
            self.tab = MemoryTab::Search;
            self.open(id, outbox);
            self.reveal = true;
        }
    }

    /// Select a memory and ask for the turns around it.
    fn open(&mut self, id: String, outbox: &mut Vec<Command>) {
        self.selected = Some(id.clone());
        self.context.clear();
        outbox.push(Command::Memory(MemoryCommand::Context { id, before: 3, after: 3 }));
    }

    /// Whether a memory was opened from the injections tile, so the browser should be
    /// brought into view (asked once).
    pub fn take_reveal(&mut self) -> bool {
        std::mem::take(&mut self.reveal)
    }

    /// The table's height: what is left above the context view, if one is open.
    fn table_height(&self, ui: &egui::Ui) -> f32 {
        let context_height = if self.selected.is_some() { 250.0 } else { 0.0 };
        (ui.available_height() - context_height).max(120.0)
    }

    /// The search form and its hits; returns the hit whose context was asked for.
    fn show_search(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) -> Option<String> {
        let mut search = false;
        ui.horizontal(|ui| {
            let label = ui.label("Search memories");
            let edit = ui.add(
                egui::TextEdit::singleline(&mut self.query).hint_text("a question, keywords, a name; empty: the newest").desired_width(420.0).id_salt("memory_query"),
            );
            let edit = edit.labelled_by(label.id);
            search |= edit.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
            let label = ui.label("Hits");
            ui.add(egui::DragValue::new(&mut self.k).range(1..=200)).labelled_by(label.id);
            ui.label("Mode");
            for mode in [SearchMode::Hybrid, SearchMode::Keyword, SearchMode::Vector] {
                ui.selectable_value(&mut self.mode, mode, format!("{mode:?}").to_lowercase());
            }
            search |= ui.button("Search").clicked();
        });
        ui.horizontal_wrapped(|ui| {
            for (name, value, hint) in [
                ("Speaker", &mut self.speaker, "anyone"),
                ("Witness", &mut self.witness, "no restriction"),
                ("Scope", &mut self.scope, "world, character:NAME"),
                ("From", &mut self.from, "YYYY-MM-DD"),
                ("To", &mut self.to, "YYYY-MM-DD"),
            ] {
                let label = ui.label(name);
                ui.add(egui::TextEdit::singleline(value).hint_text(hint).desired_width(110.0).id_salt(("memory_filter", name)))
                    .labelled_by(label.id);
            }
        });
        if search {
            match self.request() {
                Ok(request) => {
                    self.searching = true;
                    self.status = None;
                    self.last_request = Some(request.clone());
                    outbox.push(Command::Memory(MemoryCommand::Search { request }));
                }
                Err(e) => self.status = Some(e),
            }
        }
        match (&self.searched, self.searching) {
            (_, true) => {
                ui.label("Searching…");
            }
            (Some((q, _)), false) if q.trim().is_empty() => {
                ui.label(format!("The {} newest memories", self.hits.len()));
            }
            (Some((q, ms)), false) => {
                ui.label(format!("{} for “{}” in {ms:.1} ms", super::counted(self.hits.len() as u64, "hit", "hits"), one_line(q)));
            }
            _ => {}
        }
        ui.separator();
        let height = self.table_height(ui);
        let selected = self.selected.as_deref();
        ui.allocate_ui(egui::vec2(ui.available_width(), height), |ui| hit_table(ui, "memory_hits", &self.hits, selected)).inner
    }

    /// Agents and the memories their last prompt was given, scored as at the time.
    fn show_injections(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) -> Option<String> {
        ui.horizontal(|ui| {
            ui.label("The memories each agent's most recent prompt was given.");
            if ui.button("Refresh injections").clicked() {
                outbox.push(Command::Memory(MemoryCommand::Injections));
            }
        });
        if self.injections.is_empty() {
            ui.label("No agent has been given memories yet: they appear after a companion turn or a scene round.");
            return None;
        }
        ui.horizontal_wrapped(|ui| {
            ui.label("Agent");
            for injection in &self.injections {
                let selected = self.agent.as_deref() == Some(injection.agent.as_str());
                let text = format!("{} ({})", injection.agent, injection.hits.len());
                if ui.selectable_label(selected, text).on_hover_text(format!("prompted at {}", injection.at)).clicked() {
                    self.agent = Some(injection.agent.clone());
                    self.agent_by_hand = true;
                    self.history.clear();
                    self.shown = 0;
                    outbox.push(Command::Memory(MemoryCommand::InjectionHistory { agent: injection.agent.clone(), limit: 50 }));
                }
            }
        });
        let Some(latest) = self.agent.as_ref().and_then(|a| self.injections.iter().find(|i| &i.agent == a)) else {
            return None;
        };
        // Back through this agent's earlier prompts.
        if self.history.len() > 1 {
            ui.horizontal(|ui| {
                if ui.add_enabled(self.shown + 1 < self.history.len(), egui::Button::new("Earlier prompt")).clicked() {
                    self.shown += 1;
                }
                ui.label(format!("prompt {} of the last {}", self.history.len() - self.shown, self.history.len()));
                if ui.add_enabled(self.shown > 0, egui::Button::new("Later prompt")).clicked() {
                    self.shown -= 1;
                }
            });
        }
        let injection = self.history.get(self.shown).filter(|_| self.shown > 0).unwrap_or(latest);
        ui.add(
            egui::Label::new(format!(
                "{} for “{}” at {}",
                super::counted(injection.hits.len() as u64, "memory", "memories"),
                one_line(&injection.query),
                injection.at
            ))
            .truncate(),
        )
        .on_hover_text(injection.query.trim());
        ui.separator();
        let height = self.table_height(ui);
        let selected = self.selected.as_deref();
        ui.allocate_ui(egui::vec2(ui.available_width(), height), |ui| hit_table(ui, "memory_injected", &injection.hits, selected)).inner
    }

    fn show_status(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        ui.horizontal_wrapped(|ui| {
            match &self.stats {
                Some(s) => {
                    // A small library has no graph: every vector is compared, and that is fine.
                    let vectors = if s.ann_indexed == 0 && !s.graph_loaded {
                        format!("vectors: {}, each compared (no graph needed yet)", s.with_vectors)
                    } else {
                        format!("vectors: {} in the graph, {} newer (compared one by one)", s.ann_indexed, s.ann_pending)
                    };
                    ui.label(format!(
                        "{} memories ({} turns, {} summaries, {} lore) · {vectors}{}{}{} · model {}",
                        s.memories,
                        s.turns,
                        s.summaries,
                        s.lore_chunks,
                        if s.ann_removed > 0 { format!(", {} deleted", s.ann_removed) } else { String::new() },
                        if s.without_vectors > 0 { format!(", {} not embedded", s.without_vectors) } else { String::new() },
                        if s.rebuilding { " · rebuilding" } else { "" },
                        s.model
                    ))
                    .on_hover_text(
                        "in the graph: found through the vector graph · newer: added since it was built, compared \
                         one by one until the next rebuild (it starts by itself, see [memory.graph]; a small library \
                         needs no graph) · deleted: still in the graph, skipped in results · not embedded: no vector \
                         of this model yet (Rebuild index embeds them)",
                    );
                }
                None => {
                    ui.label("Index status not loaded yet.");
                }
            }
            if ui.button("Refresh status").clicked() {
                outbox.push(Command::Memory(MemoryCommand::Stats));
            }
            let busy = self.work.is_some() || self.stats.as_ref().is_some_and(|s| s.rebuilding);
            if ui.add_enabled(!busy, egui::Button::new("Rebuild index")).clicked() {
                outbox.push(Command::Memory(MemoryCommand::Reindex { force: false }));
            }
            if let Some(status) = &self.status {
                ui.label(status);
            }
        });
        self.show_model(ui, outbox);
        match &self.work {
            Some(Work::Embedding { what, done, total }) => {
                let fraction = if *total > 0 { *done as f32 / *total as f32 } else { 0.0 };
                ui.add(egui::ProgressBar::new(fraction).desired_width(360.0).text(format!("{what} {done}/{total}")));
            }
            Some(Work::Rebuilding { vectors, done, since }) => {
                let fraction = if *vectors == 0 { 0.0 } else { (*done as f32 / *vectors as f32).min(1.0) };
                ui.horizontal(|ui| {
                    ui.add(
                        egui::ProgressBar::new(fraction)
                            .desired_width(240.0)
                            .text(format!("vector graph {done}/{vectors}")),
                    );
                    ui.label(format!("{} s; new memories are searched exactly meanwhile", since.elapsed().as_secs()));
                });
                // The elapsed time moves without events.
                ui.ctx().request_repaint_after(std::time::Duration::from_millis(500));
            }
            None => {}
        }
    }

    /// The embedding model in use, a menu of the installed ones, and the confirmation a
    /// switch needs: the library's memories are embedded again with the new model.
    fn show_model(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        // The row is drawn before the index status arrives too, so nothing below it moves
        // when it does.
        let (current, memories, rebuilding) = match &self.stats {
            // The stats name the model as `<folder>/<file>`.
            Some(stats) => (stats.model.split('/').next().unwrap_or_default(), stats.memories, stats.rebuilding),
            None => ("…", 0, true),
        };
        let busy = self.work.is_some() || rebuilding;
        ui.horizontal_wrapped(|ui| {
            let label = ui.label("Embedding model");
            let mut picked = None;
            ui.add_enabled_ui(!busy, |ui| {
                egui::ComboBox::from_id_salt("memory-model")
                    .selected_text(current)
                    .show_ui(ui, |ui| {
                        for model in crate::memory::MODELS.iter() {
                            let item = ui.selectable_label(model.name == current, model.name).on_hover_text(model.about);
                            if item.clicked() && model.name != current {
                                picked = Some(model.name);
                            }
                        }
                    })
                    .response
                    .labelled_by(label.id);
            });
            if picked.is_some() {
                self.switch_to = picked;
            }
            if let Some(name) = self.switch_to {
                ui.label(format!("Switch to {name} and embed all {memories} memories again?"));
                if ui.add_enabled(!busy, egui::Button::new("Switch model")).clicked() {
                    outbox.push(Command::Memory(MemoryCommand::UseModel { name: name.to_string() }));
                    self.switch_to = None;
                    self.status = Some(format!("loading {name}…"));
                }
                if ui.button("Keep the current model").clicked() {
                    self.switch_to = None;
                }
            }
        });
    }

    /// Pin, edit, delete the selected memory, or forget its session.
    fn show_curation(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        let Some(memory) = self.selected.as_ref().and_then(|id| self.context.iter().find(|m| &m.id == id)).cloned() else { return };
        if self.edit_for.as_deref() != Some(memory.id.as_str()) {
            self.edit_for = Some(memory.id.clone());
            self.edit_text = memory.text.clone();
        }
        ui.horizontal(|ui| {
            if memory.pinned {
                ui.label("Pinned: given to its character in every prompt.");
                if ui.button("Unpin").clicked() {
                    outbox.push(Command::Memory(MemoryCommand::Pin { id: memory.id.clone(), pinned: false }));
                }
            } else if ui.button("Pin").on_hover_text("Give this memory to its character in every prompt").clicked() {
                outbox.push(Command::Memory(MemoryCommand::Pin { id: memory.id.clone(), pinned: true }));
            }
            if let Some(at) = &memory.edited_at {
                ui.weak(format!("edited {}", at.get(..16).unwrap_or(at)));
            }
            if ui.button("Delete memory").clicked() {
                outbox.push(Command::Memory(MemoryCommand::Delete { id: memory.id.clone() }));
            }
            if let Some(session) = &memory.session
                && ui.button(format!("Forget session {session}")).on_hover_text("Delete every memory of this session").clicked()
            {
                outbox.push(Command::Memory(MemoryCommand::ForgetSession { session: session.clone() }));
            }
        });
        ui.horizontal(|ui| {
            let label = ui.label("Memory text");
            ui.add(egui::TextEdit::singleline(&mut self.edit_text).desired_width(520.0).id_salt("memory_edit_text")).labelled_by(label.id);
            let changed = self.edit_text.trim() != memory.text && !self.edit_text.trim().is_empty();
            if ui.add_enabled(changed, egui::Button::new("Save text")).clicked() {
                outbox.push(Command::Memory(MemoryCommand::Edit { id: memory.id.clone(), text: self.edit_text.trim().to_string() }));
            }
        });
    }

    fn show_context(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            ui.strong("In context");
            if ui.small_button("Close").clicked() {
                self.selected = None;
            }
        });
        egui::ScrollArea::vertical().id_salt("memory_context").max_height(150.0).show(ui, |ui| {
            for m in &self.context {
                let line = format!(
                    "[{}] {}: {}",
                    m.time.as_deref().map(|t| t.get(..16).unwrap_or(t)).unwrap_or("-"),
                    m.speaker.as_deref().unwrap_or(m.kind.as_str()),
                    m.text
                );
                if self.selected.as_deref() == Some(m.id.as_str()) {
                    ui.label(egui::RichText::new(line).strong());
                } else {
                    ui.label(line);
                }
            }
        });
    }
}

/// Hits with their three scores as bars (virtualised: only visible rows are laid out);
/// returns the id whose row (or its "Context" button, first so a narrow tile still shows
/// it) was clicked.
fn hit_table(ui: &mut egui::Ui, salt: &str, hits: &[RetrievalHit], selected: Option<&str>) -> Option<String> {
    use egui_extras::{Column, TableBuilder};
    let max_kw = hits.iter().filter_map(|h| h.keyword_score).fold(0f32, f32::max);
    let max_fused = hits.iter().map(|h| h.score).fold(0f32, f32::max);
    let mut open = None;
    TableBuilder::new(ui)
        .id_salt(salt)
        .striped(true)
        .resizable(true)
        .sense(egui::Sense::click())
        .column(Column::exact(36.0))
        .column(Column::exact(64.0))
        .column(Column::initial(70.0))
        .column(Column::remainder().at_least(240.0).clip(true))
        .column(Column::exact(110.0))
        .column(Column::exact(110.0))
        .column(Column::exact(110.0))
        .header(22.0, |mut header| {
            for title in ["#", "", "Speaker", "Memory", "Fused", "Keyword", "Vector"] {
                header.col(|ui| {
                    ui.strong(title);
                });
            }
        })
        .body(|body| {
            body.rows(24.0, hits.len(), |mut row| {
                let hit = &hits[row.index()];
                row.set_selected(selected == Some(hit.id.as_str()));
                row.col(|ui| {
                    ui.label(hit.rank.to_string());
                });
                row.col(|ui| {
                    if ui.small_button("Context").on_hover_text("Show the turns around this memory").clicked() {
                        open = Some(hit.id.clone());
                    }
                });
                row.col(|ui| {
                    ui.label(hit.speaker.as_deref().unwrap_or(hit.kind.as_str()));
                });
                row.col(|ui| {
                    let text = match (hit.pinned, hit.edited) {
                        (true, true) => format!("[pinned] {} (edited)", hit.text),
                        (true, false) => format!("[pinned] {}", hit.text),
                        (false, true) => format!("{} (edited)", hit.text),
                        (false, false) => hit.text.clone(),
                    };
                    ui.label(text).on_hover_text(format!(
                        "{} · {} · {}",
                        hit.id,
                        hit.session.as_deref().unwrap_or("no session"),
                        hit.time.as_deref().unwrap_or("no time")
                    ));
                });
                // The newest memories (no query) were not scored: no bar claims they were.
                let scored = hit.keyword_score.is_some() || hit.vector_score.is_some() || hit.score > 0.0;
                row.col(|ui| score_bar(ui, scored.then_some(hit.score), max_fused, "fused"));
                row.col(|ui| score_bar(ui, hit.keyword_score, max_kw, "keyword"));
                row.col(|ui| score_bar(ui, hit.vector_score, 1.0, "vector"));
                if row.response().clicked() {
                    open = Some(hit.id.clone());
                }
            });
        });
    open
}

/// A score as a bar scaled to `max`, labelled with the number (or "–" when the list did
/// not return the memory), so the accessible label carries the value.
fn score_bar(ui: &mut egui::Ui, score: Option<f32>, max: f32, what: &str) {
    match score {
        Some(s) => {
            let fraction = if max > 0.0 { (s / max).clamp(0.0, 1.0) } else { 0.0 };
            ui.add(egui::ProgressBar::new(fraction).desired_width(100.0).text(format!("{s:.3}")))
                .on_hover_text(format!("{what} score {s:.4}"));
        }
        None => {
            ui.label("–").on_hover_text(format!("not in the {what} results"));
        }
    }
}

impl MemoryPanel {
    /// Show memory `id` in its context (another panel linked to it).
    pub fn focus(&mut self, id: String) -> Command {
        self.tab = MemoryTab::Search;
        self.selected = Some(id.clone());
        self.context.clear();
        Command::Memory(MemoryCommand::Context { id, before: 3, after: 3 })
    }
}

/// A query as a person wrote it, on one line: its line breaks and runs of spaces become
/// one space (a chat message's paragraphs, not `\n` escapes), cut to a header's length.
fn one_line(text: &str) -> String {
    const MAX: usize = 120;
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= MAX {
        return flat;
    }
    let kept: String = flat.chars().take(MAX - 1).collect();
    format!("{}…", kept.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::injections::Injection;

    fn injection(agent: &str) -> Injection {
        Injection { agent: agent.into(), query: "q".into(), at: "2024-05-01T12:00:00Z".into(), hits: Vec::new() }
    }

    #[test]
    fn a_committed_round_asks_for_the_injections_again() {
        let mut panel = MemoryPanel::new();
        let mut outbox = Vec::new();
        let round = crate::scene::SceneEvent::RoundCompleted {
            scene_id: "s".into(),
            round: 1,
            messages: Vec::new(),
            active: Vec::new(),
            conflicts: Vec::new(),
            tokens: 0,
            notices: Vec::new(),
        };
        panel.observe(&Event::Scene(round), &mut outbox);
        assert!(matches!(outbox.as_slice(), [Command::Memory(MemoryCommand::Injections), Command::Memory(MemoryCommand::Stats)]));
        outbox.clear();
        panel.observe(&Event::Memory(MemoryEvent::Stats { stats: MemoryStats::default() }), &mut outbox);
        assert!(outbox.is_empty(), "a status answer asks for nothing more");
    }

    #[test]
    fn the_selected_agent_survives_a_refresh_while_it_is_still_listed() {
        let mut panel = MemoryPanel::new();
        panel.apply(&MemoryEvent::Injections { injections: vec![injection("companion:Mira"), injection("scene:director")] });
        assert_eq!(panel.selected_agent(), Some("companion:Mira"));
        // Picked by hand (as a click does).
        panel.agent = Some("scene:director".into());
        panel.agent_by_hand = true;
        panel.apply(&MemoryEvent::Injections { injections: vec![injection("scene:character:Tobin"), injection("scene:director")] });
        assert_eq!(panel.selected_agent(), Some("scene:director"));
        panel.apply(&MemoryEvent::Injections { injections: vec![injection("scene:character:Tobin")] });
        assert_eq!(panel.selected_agent(), Some("scene:character:Tobin"));
    }

    #[test]
    fn the_agent_shown_follows_what_the_person_did_last_until_one_is_picked() {
        let mut panel = MemoryPanel::new();
        let mut outbox = Vec::new();
        let listed = vec![injection("companion:Mira"), injection("scene:character:Tobin"), injection("scene:director")];
        panel.apply(&MemoryEvent::Injections { injections: listed.clone() });
        assert_eq!(panel.selected_agent(), Some("companion:Mira"), "the most recent, knowing nothing else");
        let round = crate::scene::SceneEvent::RoundCompleted {
            scene_id: "s".into(),
            round: 1,
            messages: Vec::new(),
            active: Vec::new(),
            conflicts: Vec::new(),
            tokens: 0,
            notices: Vec::new(),
        };
        panel.observe(&Event::Scene(round), &mut outbox);
        assert_eq!(panel.selected_agent(), Some("scene:character:Tobin"), "a round played: the scene's agents");
        panel.agent = Some("scene:director".into());
        panel.agent_by_hand = true;
        panel.apply(&MemoryEvent::Injections { injections: listed });
        assert_eq!(panel.selected_agent(), Some("scene:director"), "a pick by hand stays");
    }

    #[test]
    fn index_work_shows_progress_then_clears_and_refreshes_the_counts() {
        let mut panel = MemoryPanel::new();
        let mut outbox = Vec::new();
        panel.apply(&MemoryEvent::Stats { stats: MemoryStats::default() });
        panel.apply(&MemoryEvent::ReindexProgress { done: 256, total: 1000 });
        assert_eq!(panel.work, Some(Work::Embedding { what: "embedding", done: 256, total: 1000 }));
        panel.apply(&MemoryEvent::IndexRebuilding { vectors: 1000 });
        assert!(matches!(panel.work, Some(Work::Rebuilding { vectors: 1000, done: 0, .. })));
        panel.apply(&MemoryEvent::IndexRebuildProgress { done: 400, total: 1000 });
        assert!(matches!(panel.work, Some(Work::Rebuilding { vectors: 1000, done: 400, .. })));
        assert!(panel.stats().is_some_and(|s| s.rebuilding));
        panel.observe(&Event::Memory(MemoryEvent::IndexRebuilt { vectors: 1000, elapsed_ms: 5 }), &mut outbox);
        assert_eq!(panel.work, None);
        assert!(panel.stats().is_some_and(|s| !s.rebuilding));
        assert!(matches!(outbox.as_slice(), [Command::Memory(MemoryCommand::Stats)]));
    }
}

impl super::Panel for MemoryPanel {
    fn kinds(&self) -> &'static [super::PanelKind] {
        &[super::PanelKind::Memory, super::PanelKind::Injections]
    }

    fn startup(&self) -> Vec<crate::engine::Command> {
        MemoryPanel::startup()
    }

    fn apply(&mut self, event: &crate::engine::Event, outbox: &mut Vec<crate::engine::Command>) {
        self.observe(event, outbox);
    }

    fn show(&mut self, kind: super::PanelKind, ui: &mut egui::Ui, outbox: &mut Vec<crate::engine::Command>) {
        match kind {
            super::PanelKind::Injections => self.show_injected(ui, outbox),
            _ => MemoryPanel::show(self, ui, outbox),
        }
    }
}
