//! The memory browser: search memories and lore with filters, see every hit's keyword,
//! vector and fused score as bars, read the source turn in its conversation, and watch
//! the index (vectors indexed by the graph, pending in the exact-scan tail, rebuilding).

use crate::engine::Command;
use crate::memory::{Memory, MemoryCommand, MemoryEvent, MemoryStats, RetrievalHit, Scope, SearchFilter, SearchMode, SearchRequest};

#[derive(Default)]
pub struct MemoryPanel {
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
}

fn optional(text: &str) -> Option<String> {
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

impl MemoryPanel {
    pub fn new() -> Self {
        Self { k: 20, ..Default::default() }
    }

    /// Commands to send when the workbench opens (index status for the header).
    pub fn startup() -> Vec<Command> {
        vec![Command::Memory(MemoryCommand::Stats)]
    }

    pub fn hits(&self) -> &[RetrievalHit] {
        &self.hits
    }

    pub fn stats(&self) -> Option<&MemoryStats> {
        self.stats.as_ref()
    }

    pub fn apply(&mut self, event: &MemoryEvent) {
        match event {
            MemoryEvent::SearchResults { query, hits, elapsed_ms, .. } => {
                self.searching = false;
                self.hits = hits.clone();
                self.searched = Some((query.clone(), *elapsed_ms));
            }
            MemoryEvent::Stats { stats } => self.stats = Some(stats.clone()),
            MemoryEvent::Context { id, memories } if self.selected.as_deref() == Some(id) => {
                self.context = memories.clone();
            }
            MemoryEvent::ImportProgress { done, total } | MemoryEvent::ReindexProgress { done, total } => {
                self.status = Some(format!("working: {done}/{total}"));
            }
            MemoryEvent::IndexRebuilding { vectors } => {
                self.status = Some(format!("rebuilding the vector graph over {vectors} vectors"));
                if let Some(s) = self.stats.as_mut() {
                    s.rebuilding = true;
                }
            }
            MemoryEvent::IndexRebuilt { vectors, elapsed_ms } => {
                self.status = Some(format!("vector graph rebuilt over {vectors} vectors in {elapsed_ms} ms"));
            }
            MemoryEvent::Imported { .. } | MemoryEvent::Reindexed { .. } => {
                self.status = None;
            }
            _ => {}
        }
    }

    fn request(&self) -> Result<SearchRequest, String> {
        let scope = match optional(&self.scope) {
            Some(s) => Some(Scope::parse(&s).ok_or_else(|| format!("unknown scope {s:?}: world, campaign:ID or character:ID"))?),
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
        let mut search = false;
        ui.horizontal(|ui| {
            let label = ui.label("Search memories");
            let edit = ui.add(
                egui::TextEdit::singleline(&mut self.query).hint_text("any text: a question, keywords, a name").desired_width(420.0).id_salt("memory_query"),
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
                ("Scope", &mut self.scope, "world, character:ID"),
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
                    outbox.push(Command::Memory(MemoryCommand::Search { request }));
                }
                Err(e) => self.status = Some(e),
            }
        }
        match (&self.searched, self.searching) {
            (_, true) => {
                ui.label("Searching…");
            }
            (Some((q, ms)), false) => {
                ui.label(format!("{} hits for {q:?} in {ms:.1} ms", self.hits.len()));
            }
            _ => {}
        }
        ui.separator();
        let context_height = if self.selected.is_some() { 180.0 } else { 0.0 };
        let table_height = (ui.available_height() - context_height).max(120.0);
        ui.allocate_ui(egui::vec2(ui.available_width(), table_height), |ui| self.show_table(ui, outbox));
        if self.selected.is_some() {
            ui.separator();
            self.show_context(ui);
        }
    }

    fn show_status(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        ui.horizontal_wrapped(|ui| {
            match &self.stats {
                Some(s) => {
                    ui.label(format!(
                        "{} memories ({} turns, {} summaries, {} lore) · vectors: {} indexed, {} pending{} · model {}",
                        s.memories,
                        s.turns,
                        s.summaries,
                        s.lore_chunks,
                        s.ann_indexed,
                        s.ann_pending + s.without_vectors,
                        if s.rebuilding { " · rebuilding" } else { "" },
                        s.model
                    ));
                }
                None => {
                    ui.label("Index status not loaded yet.");
                }
            }
            if ui.button("Refresh status").clicked() {
                outbox.push(Command::Memory(MemoryCommand::Stats));
            }
            if ui.button("Rebuild index").clicked() {
                outbox.push(Command::Memory(MemoryCommand::Reindex { force: false }));
                outbox.push(Command::Memory(MemoryCommand::Stats));
            }
            if let Some(status) = &self.status {
                ui.label(status);
            }
        });
    }

    fn show_table(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        use egui_extras::{Column, TableBuilder};
        let max_kw = self.hits.iter().filter_map(|h| h.keyword_score).fold(0f32, f32::max);
        let max_fused = self.hits.iter().map(|h| h.score).fold(0f32, f32::max);
        let mut open = None;
        TableBuilder::new(ui)
            .striped(true)
            .resizable(true)
            .column(Column::exact(36.0))
            .column(Column::initial(70.0))
            .column(Column::remainder().at_least(240.0).clip(true))
            .column(Column::exact(110.0))
            .column(Column::exact(110.0))
            .column(Column::exact(110.0))
            .column(Column::exact(64.0))
            .header(22.0, |mut header| {
                for title in ["#", "Speaker", "Memory", "Fused", "Keyword", "Vector", ""] {
                    header.col(|ui| {
                        ui.strong(title);
                    });
                }
            })
            .body(|body| {
                body.rows(24.0, self.hits.len(), |mut row| {
                    let hit = &self.hits[row.index()];
                    let selected = self.selected.as_deref() == Some(hit.id.as_str());
                    row.set_selected(selected);
                    row.col(|ui| {
                        ui.label(hit.rank.to_string());
                    });
                    row.col(|ui| {
                        ui.label(hit.speaker.as_deref().unwrap_or(hit.kind.as_str()));
                    });
                    row.col(|ui| {
                        ui.label(&hit.text).on_hover_text(format!(
                            "{} · {} · {}",
                            hit.id,
                            hit.session.as_deref().unwrap_or("no session"),
                            hit.time.as_deref().unwrap_or("no time")
                        ));
                    });
                    row.col(|ui| score_bar(ui, Some(hit.score), max_fused, "fused"));
                    row.col(|ui| score_bar(ui, hit.keyword_score, max_kw, "keyword"));
                    row.col(|ui| score_bar(ui, hit.vector_score, 1.0, "vector"));
                    row.col(|ui| {
                        if ui.small_button("Context").on_hover_text("Show the turns around this memory").clicked() {
                            open = Some(hit.id.clone());
                        }
                    });
                });
            });
        if let Some(id) = open {
            self.selected = Some(id.clone());
            self.context.clear();
            outbox.push(Command::Memory(MemoryCommand::Context { id, before: 3, after: 3 }));
        }
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
        self.selected = Some(id.clone());
        self.context.clear();
        Command::Memory(MemoryCommand::Context { id, before: 3, after: 3 })
    }
}
