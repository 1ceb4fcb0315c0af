//! The identity pipeline's two panels: Waves (progress, timings, tokens, a timeline)
//! and the Checkpoint inspector (output side by side, attempts, versions with diffs,
//! approve / reject with feedback / re-open).

use crate::engine::Command;
use crate::identity::records::{CheckpointStatus, RunRecord, RunStatus, VersionRecord};
use crate::identity::schema::{Agent, CharacterSeed, Mode, OtherCharacter};
use crate::identity::{CheckpointView, IdentityCommand, IdentityEvent, RunView};
use egui::{Color32, RichText};
use std::collections::BTreeMap;

/// Streamed text kept per running agent, so the panel can show it live.
const LIVE_TAIL: usize = 600;

#[derive(Default)]
pub struct IdentityPanels {
    runs: Vec<RunRecord>,
    selected: Option<String>,
    view: Option<RunView>,
    /// Checkpoint number → streamed text of the running version.
    live: BTreeMap<u8, String>,
    /// When each checkpoint's live text last grew.
    live_at: BTreeMap<u8, std::time::Instant>,
    inspect: u8,
    compare: Option<(u32, u32)>,
    feedback: String,
    form: SeedForm,
    /// A snapshot was asked for and has not arrived.
    refreshing: bool,
    last_error: Option<String>,
    /// The checkpoint the last error was about (`None`: the run as a whole), so the error
    /// goes once that checkpoint is ready again or the run moves past it.
    error_checkpoint: Option<u8>,
    /// A checkpoint whose fields the game master is editing: its number, the structured
    /// fields as JSON text and the narrative.
    editing: Option<(u8, String, String)>,
    /// The seed-folder path, the last export's outcome, and a deletion waiting for "yes".
    export_path: String,
    export_picker: super::platform::FilePicker,
    exported: Option<String>,
    confirm_delete: bool,
    /// The run to open once the run list arrives (the one open at the last close).
    wanted: Option<String>,
    /// The feedback field, whose Ctrl+Enter keys are the inspector's own.
    feedback_id: Option<egui::Id>,
    /// Checkpoints (run, number) whose agent this process runs: seen start, not yet end.
    /// A checkpoint the store says is working but that is not here runs in another
    /// process (the CLI, a server), whose events never reach this one.
    here: std::collections::BTreeSet<(String, u8)>,
    /// When the selected run's state was last read because another process works on it.
    polled: Option<std::time::Instant>,
}

struct SeedForm {
    name: String,
    role: String,
    concept: String,
    storyline: String,
    others: String,
    mode: Mode,
    auto_approve: bool,
}

impl Default for SeedForm {
    fn default() -> Self {
        Self {
            name: String::new(),
            role: String::new(),
            concept: String::new(),
            storyline: String::new(),
            others: String::new(),
            mode: Mode::Balanced,
            auto_approve: false,
        }
    }
}

impl IdentityPanels {
    /// Commands to send when the window opens: list runs and resume interrupted ones.
    pub fn startup() -> Vec<Command> {
        vec![Command::Identity(IdentityCommand::List), Command::Identity(IdentityCommand::Resume { character_id: None })]
    }

    /// The last error the engine reported for the selected run.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    pub fn view(&self) -> Option<&RunView> {
        self.view.as_ref()
    }

    /// Agents of the selected run working in this process (quitting would stop them).
    pub fn working_here(&self) -> usize {
        let Some(view) = &self.view else { return 0 };
        view.checkpoints.iter().filter(|c| c.record.status.is_working() && self.here.contains(&(view.run.id.clone(), c.record.number))).count()
    }

    /// While the selected run has agents working in another process, its state is read
    /// again every two seconds (that process's events never reach this one); returns
    /// when to look next, for the window to wake.
    pub fn poll_elsewhere(&mut self, outbox: &mut Vec<Command>) -> Option<std::time::Duration> {
        const EVERY: std::time::Duration = std::time::Duration::from_secs(2);
        let view = self.view.as_ref()?;
        let elsewhere = view.checkpoints.iter().any(|c| c.record.status.is_working() && !self.here.contains(&(view.run.id.clone(), c.record.number)));
        if !elsewhere {
            self.polled = None;
            return None;
        }
        let id = view.run.id.clone();
        match self.polled {
            Some(at) if at.elapsed() < EVERY => Some(EVERY - at.elapsed()),
            _ => {
                self.polled = Some(std::time::Instant::now());
                self.refresh(&id, outbox);
                Some(EVERY)
            }
        }
    }

    /// The runs the character lists offer.
    pub fn runs(&self) -> &[RunRecord] {
        &self.runs
    }

    pub fn selected(&self) -> Option<&str> {
        self.selected.as_deref()
    }

    /// Which checkpoint the inspector shows.
    pub fn inspecting(&self) -> u8 {
        self.inspect
    }

    pub fn apply(&mut self, event: &IdentityEvent, outbox: &mut Vec<Command>) {
        match event {
            IdentityEvent::AgentStarted { character_id, checkpoint, .. } => {
                self.here.insert((character_id.clone(), *checkpoint));
            }
            IdentityEvent::CheckpointReady { character_id, checkpoint_number, .. } => {
                self.here.remove(&(character_id.clone(), *checkpoint_number));
            }
            IdentityEvent::Error { character_id, checkpoint: Some(n), .. } | IdentityEvent::Cancelled { character_id, checkpoint: n } => {
                self.here.remove(&(character_id.clone(), *n));
            }
            IdentityEvent::Idle { character_id, .. } | IdentityEvent::CharacterComplete { character_id, .. } => {
                self.here.retain(|(run, _)| run != character_id);
            }
            _ => {}
        }
        match event {
            IdentityEvent::Runs { runs } => {
                self.runs = runs.clone();
                if let Some(wanted) = self.wanted.take().filter(|w| runs.iter().any(|r| &r.id == w)) {
                    self.select(wanted, outbox);
                }
                if self.selected.as_ref().is_some_and(|s| !runs.iter().any(|r| &r.id == s)) {
                    self.selected = None;
                    self.view = None;
                }
                if self.selected.is_none() {
                    if let Some(last) = runs.last() {
                        self.select(last.id.clone(), outbox);
                    }
                }
            }
            IdentityEvent::Snapshot { view } => {
                if self.selected.as_deref() == Some(view.run.id.as_str()) {
                    self.refreshing = false;
                    if let Some(pos) = self.runs.iter().position(|r| r.id == view.run.id) {
                        self.runs[pos] = view.run.clone();
                    }
                    self.view = Some((**view).clone());
                }
            }
            IdentityEvent::RunStarted { character_id, name, .. } => {
                // The form's character is on its way: the form is ready for the next one
                // (its mode and approval choice stay).
                if self.form.name.trim() == name.trim() {
                    self.form = SeedForm { mode: self.form.mode, auto_approve: self.form.auto_approve, ..SeedForm::default() };
                }
                outbox.push(Command::Identity(IdentityCommand::List));
                self.select(character_id.clone(), outbox);
            }
            IdentityEvent::Token { character_id, checkpoint, text } => {
                if self.selected.as_deref() == Some(character_id) {
                    self.live_at.insert(*checkpoint, std::time::Instant::now());
                    let live = self.live.entry(*checkpoint).or_default();
                    live.push_str(text);
                    if live.len() > LIVE_TAIL * 2 {
                        let cut = live.len() - LIVE_TAIL;
                        let cut = (cut..live.len()).find(|i| live.is_char_boundary(*i)).unwrap_or(live.len());
                        live.drain(..cut);
                    }
                }
            }
            IdentityEvent::Exported { character_id, path } if self.selected.as_deref() == Some(character_id) => {
                self.exported = Some(format!("Wrote the seed folder {}", path.display()));
            }
            IdentityEvent::CheckpointReady { character_id, checkpoint_number, .. }
                if self.selected.as_deref() == Some(character_id) && self.editing.as_ref().is_some_and(|(n, _, _)| n == checkpoint_number) =>
            {
                self.editing = None;
                self.last_error = None;
                let id = character_id.clone();
                self.refresh(&id, outbox);
            }
            IdentityEvent::Error { message, character_id, checkpoint } => {
                if self.selected.as_deref() == Some(character_id) || character_id.is_empty() {
                    self.last_error = Some(message.clone());
                    self.error_checkpoint = *checkpoint;
                }
                self.refresh(character_id, outbox);
            }
            other => {
                if self.last_error.is_some() && other.character_id().is_some_and(|id| self.selected.as_deref() == Some(id)) && self.error_is_over(other) {
                    self.last_error = None;
                    self.error_checkpoint = None;
                }
                if let Some(id) = other.character_id() {
                    if let IdentityEvent::AgentStarted { checkpoint, .. } = other {
                        self.live.remove(checkpoint);
                    }
                    let id = id.to_string();
                    self.refresh(&id, outbox);
                }
            }
        }
    }

    /// Whether `event` (of the selected run) shows the last error is behind it: the
    /// checkpoint it was about is ready or approved (after a re-run or an edit), or the
    /// run finished.
    fn error_is_over(&self, event: &IdentityEvent) -> bool {
        match event {
            IdentityEvent::CheckpointReady { checkpoint_number: n, .. } | IdentityEvent::CheckpointApproved { checkpoint_number: n, .. } => {
                self.error_checkpoint.is_none_or(|failed| failed == *n)
            }
            IdentityEvent::CharacterComplete { .. } => true,
            _ => false,
        }
    }

    fn refresh(&mut self, character_id: &str, outbox: &mut Vec<Command>) {
        // One snapshot in flight at a time: a burst of events costs one store read.
        if self.selected.as_deref() == Some(character_id) && !self.refreshing {
            self.refreshing = true;
            outbox.push(Command::Identity(IdentityCommand::Snapshot { character_id: character_id.to_string() }));
        }
    }

    /// Open the run the workbench showed when it last closed (if it is gone by the
    /// time the run list arrives, the newest is opened instead).
    pub fn restore(&mut self, run: String) {
        self.wanted = Some(run);
    }

    fn select(&mut self, id: String, outbox: &mut Vec<Command>) {
        if self.selected.as_deref() != Some(id.as_str()) {
            self.view = None;
            self.editing = None;
            self.exported = None;
            self.confirm_delete = false;
            // Another run's error says nothing about this one.
            self.last_error = None;
            self.error_checkpoint = None;
            self.live.clear();
            self.compare = None;
            self.refreshing = false;
        }
        self.selected = Some(id.clone());
        self.refresh(&id, outbox);
    }

    // ----- Waves -------------------------------------------------------------------

    pub fn show_waves(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        ui.heading("Waves");
        self.run_picker(ui, outbox);
        egui::CollapsingHeader::new("New character").default_open(self.runs.is_empty()).show(ui, |ui| self.seed_form(ui, outbox));
        if let Some(error) = &self.last_error {
            ui.colored_label(ui.visuals().error_fg_color, error);
        }
        let Some(view) = &self.view else {
            if self.selected.is_some() {
                ui.spinner();
            }
            return;
        };
        ui.separator();
        let tokens: u64 = view.checkpoints.iter().flat_map(|c| &c.versions).map(|v| u64::from(v.usage.total())).sum();
        ui.label(format!(
            "{} — {} — mode {} — {} regenerations — {} tokens",
            view.run.name,
            match view.run.status {
                RunStatus::InProgress => "in progress",
                RunStatus::Completed => "complete",
                RunStatus::Failed => "failed",
            },
            view.run.mode.label(),
            view.run.regenerations,
            tokens
        ));
        let mut open = None;
        // The state next to the agent, where a narrow tile still shows it; the rest scrolls.
        egui::ScrollArea::horizontal().id_salt("waves_grid_scroll").show(ui, |ui| egui::Grid::new("waves_grid").num_columns(7).striped(true).spacing([14.0, 4.0]).show(ui, |ui| {
            for h in ["#", "Agent", "State", "Wave", "Version", "Tokens", "Time"] {
                ui.strong(h);
            }
            ui.end_row();
            for cp in &view.checkpoints {
                let current = current_version(cp);
                ui.label(cp.record.number.to_string());
                if ui.link(cp.record.agent.title()).clicked() {
                    open = Some(cp.record.number);
                }
                status_chip(ui, cp.record.status);
                ui.label(cp.record.wave.to_string());
                ui.label(if cp.record.current_version == 0 { "—".to_string() } else { format!("v{}", cp.record.current_version) });
                ui.label(current.map(|v| usage_text(v)).unwrap_or_default());
                ui.label(current.map(|v| format!("{:.1}s", v.wall_ms as f64 / 1000.0)).unwrap_or_default());
                ui.end_row();
            }
        }));
        // What the running agents are writing, under the table: a preview in a cell of its
        // own widened the Agent column and pushed State to Time out of a narrow tile.
        for cp in view.checkpoints.iter().filter(|c| c.record.status.is_working()) {
            if let Some(live) = self.live.get(&cp.record.number) {
                let line = format!("{} {}: {}", cp.record.number, cp.record.agent.title(), tail(live, 120));
                ui.add(egui::Label::new(RichText::new(line).monospace().small().weak()).truncate());
            }
        }
        if let Some(n) = open {
            self.inspect = n;
        }
        timeline(ui, view);
        let run_id = view.run.id.clone();
        let name = view.run.name.clone();
        let complete = view.run.status == RunStatus::Completed;
        self.run_files(ui, &run_id, &name, complete, outbox);
    }

    /// A finished run out as a seed folder; any run deleted with its character.
    fn run_files(&mut self, ui: &mut egui::Ui, run_id: &str, name: &str, complete: bool, outbox: &mut Vec<Command>) {
        ui.separator();
        // Wrapped, so a narrow tile still shows every button.
        ui.horizontal_wrapped(|ui| {
            let label = ui.label("Seed folder");
            ui.add(egui::TextEdit::singleline(&mut self.export_path).hint_text("/path/to/folder").desired_width(ui.available_width().clamp(120.0, 300.0)).id_salt("identity_export_path"))
                .labelled_by(label.id);
            if let Some(folder) = self.export_picker.button(ui, "Browse…", || super::platform::FileRequest::folder("Seed folder")).and_then(|p| p.into_iter().next()) {
                self.export_path = folder.display().to_string();
            }
            let ready = complete && !self.export_path.trim().is_empty();
            if ui.add_enabled(ready, egui::Button::new("Export seed folder")).on_hover_text("The finished character as a seed folder").clicked() {
                outbox.push(Command::Identity(IdentityCommand::Export {
                    character_id: run_id.to_string(),
                    out: super::platform::typed_path(&self.export_path),
                }));
            }
        });
        if let Some(done) = &self.exported {
            ui.colored_label(Color32::from_rgb(80, 170, 90), done);
        }
        if !self.confirm_delete {
            if ui.button("Delete run…").clicked() {
                self.confirm_delete = true;
            }
            return;
        }
        ui.label(if complete {
            format!("Delete {name}'s run, every version, and the character with its chat and memories?")
        } else {
            format!("Delete {name}'s run and every version? Its running agents are stopped.")
        });
        ui.horizontal_wrapped(|ui| {
            if ui.button(format!("Delete {name}")).clicked() {
                outbox.push(Command::Interop(crate::interop::InteropCommand::DeleteCharacter { character: run_id.to_string(), confirmed: true }));
                self.confirm_delete = false;
            }
            if ui.button("Keep it").clicked() {
                self.confirm_delete = false;
            }
        });
    }

    fn run_picker(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        if self.runs.is_empty() {
            return;
        }
        let label = ui.label("Character");
        let shown = self
            .selected
            .as_ref()
            .and_then(|id| self.runs.iter().find(|r| &r.id == id))
            .map(|r| r.name.clone())
            .unwrap_or_else(|| "choose…".into());
        let mut choice = None;
        egui::ComboBox::from_id_salt("identity_run")
            .selected_text(shown)
            .show_ui(ui, |ui| {
                for r in self.runs.iter().rev() {
                    if ui.selectable_label(self.selected.as_deref() == Some(&r.id), format!("{} ({})", r.name, r.created_at)).clicked() {
                        choice = Some(r.id.clone());
                    }
                }
            })
            .response
            .labelled_by(label.id);
        if let Some(id) = choice {
            self.select(id, outbox);
        }
    }

    fn seed_form(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        let f = &mut self.form;
        egui::Grid::new("seed_form").num_columns(2).show(ui, |ui| {
            for (name, text, lines) in [
                ("Name", &mut f.name, 1),
                ("Role", &mut f.role, 1),
                ("Concept", &mut f.concept, 3),
                ("Storyline", &mut f.storyline, 3),
                ("Other characters", &mut f.others, 3),
            ] {
                let label = ui.label(name);
                let edit = if lines == 1 { egui::TextEdit::singleline(text) } else { egui::TextEdit::multiline(text).desired_rows(lines) };
                let edit = if name == "Other characters" { edit.hint_text("one per line: name - role - concept") } else { edit };
                // As wide as the tile leaves (a narrow Waves tile cut the fields off).
                ui.add(edit.desired_width(ui.available_width().clamp(120.0, 420.0))).labelled_by(label.id);
                ui.end_row();
            }
            let label = ui.label("Depth");
            egui::ComboBox::from_id_salt("seed_mode")
                .selected_text(f.mode.label())
                .show_ui(ui, |ui| {
                    for m in [Mode::Fast, Mode::Balanced, Mode::Deep] {
                        ui.selectable_value(&mut f.mode, m, m.label());
                    }
                })
                .response
                .labelled_by(label.id);
            ui.end_row();
        });
        // Outside the grid, so the words wrap in a narrow tile instead of being cut: cut
        // to "Approve each chec", it read as "I'll approve each one" and was ticked for that.
        ui.checkbox(&mut f.auto_approve, "Auto-approve (skip my review)")
            .on_hover_text("Every checkpoint is approved as soon as it is written; you do not review them");
        let ready = !f.name.trim().is_empty() && !f.concept.trim().is_empty();
        if ui.add_enabled(ready, egui::Button::new("Start development")).clicked() {
            let seed = CharacterSeed {
                name: f.name.trim().to_string(),
                role: f.role.trim().to_string(),
                concept: f.concept.trim().to_string(),
                storyline: serde_json::Value::String(f.storyline.trim().to_string()),
                other_characters: f
                    .others
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(other_character)
                    .collect(),
            };
            self.last_error = None;
            outbox.push(Command::Identity(IdentityCommand::Start { seed, entry_input: None, mode: f.mode, profile: None, auto_approve: f.auto_approve }));
        }
    }

    // ----- Checkpoint inspector ----------------------------------------------------

    pub fn show_checkpoints(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        ui.heading("Checkpoints");
        self.run_picker(ui, outbox);
        let Some(view) = self.view.clone() else {
            ui.label("Start a character in the Waves panel; its checkpoints appear here.");
            return;
        };
        if self.inspect == 0 {
            self.inspect = view
                .checkpoints
                .iter()
                .find(|c| c.record.status == CheckpointStatus::AwaitingApproval)
                .map(|c| c.record.number)
                .unwrap_or(1);
        }
        ui.horizontal_wrapped(|ui| {
            for cp in &view.checkpoints {
                let text = format!("{} {}", cp.record.number, cp.record.agent.title());
                let r = ui.selectable_label(self.inspect == cp.record.number, RichText::new(text).color(status_color(cp.record.status)));
                if r.clicked() {
                    self.inspect = cp.record.number;
                    self.compare = None;
                }
            }
        });
        let Some(cp) = view.checkpoints.iter().find(|c| c.record.number == self.inspect) else { return };
        ui.separator();
        self.actions(ui, &view.run.id, cp, outbox);
        if let Some(error) = &cp.record.error {
            ui.colored_label(ui.visuals().error_fg_color, error);
        }
        // The draw that failed, refused replies and all (it is never the current version).
        if let Some(failed) = cp.versions.iter().rev().find(|v| v.is_failed() && v.version > cp.record.current_version) {
            ui.label(format!(
                "Failed draw (version {}) — {} — {:.1}s — {}",
                failed.version,
                usage_text(failed),
                failed.wall_ms as f64 / 1000.0,
                failed.created_at
            ));
            attempts(ui, failed);
        }
        let Some(current) = current_version(cp) else {
            match self.live.get(&cp.record.number) {
                Some(live) if cp.record.status.is_working() => {
                    // The agent may write on with nothing to show (a part not streamed):
                    // say so rather than "Streaming…" over text that stopped moving.
                    let quiet = self.live_at.get(&cp.record.number).map_or(0, |at| at.elapsed().as_secs());
                    if quiet < 3 {
                        ui.label("Streaming…");
                    } else {
                        ui.label(format!("Still working — no new text for {quiet} s. The last words written:"));
                    }
                    ui.ctx().request_repaint_after(std::time::Duration::from_secs(1));
                    ui.label(RichText::new(tail(live, LIVE_TAIL)).monospace());
                }
                _ => {
                    ui.label("No output yet.");
                }
            }
            return;
        };
        ui.label(format!(
            "Version {} of {} — {} — {:.1}s — {}",
            current.version,
            cp.versions.len(),
            usage_text(current),
            current.wall_ms as f64 / 1000.0,
            current.created_at
        ));
        if let Some(feedback) = &current.feedback {
            ui.label(RichText::new(format!("Answers feedback: {feedback}")).italics());
        }
        // The two columns take most of a tall window (the panel scrolls as a whole past them).
        let tall = (ui.ctx().content_rect().height() * 0.55).max(320.0);
        ui.columns(2, |cols| {
            cols[0].strong("Narrative");
            egui::ScrollArea::vertical().id_salt("narrative").max_height(tall).show(&mut cols[0], |ui| {
                ui.label(&current.narrative);
            });
            cols[1].strong("Structured");
            egui::ScrollArea::vertical().id_salt("structured").max_height(tall).show(&mut cols[1], |ui| {
                json_tree(ui, "structured", &current.structured);
            });
        });
        self.field_editor(ui, &view.run.id, cp, current, outbox);
        attempts(ui, current);
        self.versions(ui, cp);
    }

    /// Edit a checkpoint awaiting approval: its structured fields as JSON and its
    /// narrative; saved as a new version (schema-checked by the engine) for approval.
    fn field_editor(&mut self, ui: &mut egui::Ui, run_id: &str, cp: &CheckpointView, current: &VersionRecord, outbox: &mut Vec<Command>) {
        if cp.record.status != CheckpointStatus::AwaitingApproval {
            return;
        }
        let n = cp.record.number;
        if self.editing.as_ref().is_none_or(|(editing, _, _)| *editing != n) {
            if ui.button("Edit fields").on_hover_text("Change the structured fields yourself; your version is checked and put up for approval").clicked() {
                let json = serde_json::to_string_pretty(&current.structured).unwrap_or_default();
                self.editing = Some((n, json, current.narrative.clone()));
            }
            return;
        }
        let Some((_, json, narrative)) = self.editing.as_mut() else { return };
        let label = ui.label("Structured fields (JSON)");
        ui.add(egui::TextEdit::multiline(json).code_editor().desired_rows(10).desired_width(f32::INFINITY).id_salt("checkpoint_json"))
            .labelled_by(label.id);
        let label = ui.label("Narrative");
        ui.add(egui::TextEdit::multiline(narrative).desired_rows(4).desired_width(f32::INFINITY).id_salt("checkpoint_narrative"))
            .labelled_by(label.id);
        let parsed = serde_json::from_str::<serde_json::Value>(json);
        if let Err(e) = &parsed {
            ui.colored_label(ui.visuals().error_fg_color, format!("not JSON yet: {e}"));
        }
        let mut cancel = false;
        ui.horizontal(|ui| {
            if ui.add_enabled(parsed.is_ok(), egui::Button::new("Save as a new version")).clicked()
                && let Ok(structured) = &parsed
            {
                outbox.push(Command::Identity(IdentityCommand::Edit {
                    character_id: run_id.to_string(),
                    checkpoint: n,
                    narrative: Some(narrative.clone()),
                    structured: structured.clone(),
                }));
            }
            if ui.button("Cancel editing").clicked() {
                cancel = true;
            }
        });
        if cancel {
            self.editing = None;
        }
    }

    fn actions(&mut self, ui: &mut egui::Ui, run_id: &str, cp: &CheckpointView, outbox: &mut Vec<Command>) {
        let status = cp.record.status;
        let id = run_id.to_string();
        let n = cp.record.number;
        // Wrapped, so a narrow tile keeps every control on screen.
        ui.horizontal_wrapped(|ui| {
            status_chip(ui, status);
            let can_approve = status == CheckpointStatus::AwaitingApproval;
            // With panels side by side, Ctrl+Enter typed into another panel's field (the
            // scene's message, the chat) is that panel's: approve only when no field or
            // the feedback field has the keyboard.
            let focus = ui.ctx().memory(|m| m.focused());
            let ours = focus.is_none() || focus == self.feedback_id;
            let approve_key = ours && ui.input_mut(|i| i.consume_key(egui::Modifiers::CTRL, egui::Key::Enter));
            if ui.add_enabled(can_approve, egui::Button::new("Approve")).on_hover_text("Ctrl+Enter").clicked()
                || (can_approve && approve_key)
            {
                outbox.push(Command::Identity(IdentityCommand::Approve { character_id: id.clone(), checkpoint: n }));
            }
            if ui.add_enabled(status == CheckpointStatus::Approved, egui::Button::new("Re-open")).clicked() {
                outbox.push(Command::Identity(IdentityCommand::Reopen { character_id: id.clone(), checkpoint: n }));
            }
            if ui
                .add_enabled(matches!(status, CheckpointStatus::Stale | CheckpointStatus::Failed), egui::Button::new("Re-run"))
                .clicked()
            {
                outbox.push(Command::Identity(IdentityCommand::Rerun { character_id: id.clone(), checkpoint: n }));
            }
            if ui.add_enabled(status == CheckpointStatus::Stale, egui::Button::new("Keep as is")).clicked() {
                outbox.push(Command::Identity(IdentityCommand::Keep { character_id: id.clone(), checkpoint: n }));
            }
            if ui.add_enabled(status.is_working(), egui::Button::new("Cancel")).on_hover_text("Stop this agent; re-run it later").clicked() {
                outbox.push(Command::Identity(IdentityCommand::Cancel { character_id: id.clone(), checkpoint: Some(n) }));
            }
        });
        let can_reject = matches!(status, CheckpointStatus::AwaitingApproval | CheckpointStatus::Stale | CheckpointStatus::Failed);
        ui.horizontal_wrapped(|ui| {
            let label = ui.label("Feedback");
            let width = (ui.available_width() - 200.0).clamp(160.0, 460.0);
            let field = ui
                .add(egui::TextEdit::singleline(&mut self.feedback).desired_width(width).hint_text("what should change"))
                .labelled_by(label.id);
            self.feedback_id = Some(field.id);
            let focus = ui.ctx().memory(|m| m.focused());
            let reject_key = (focus.is_none() || focus == Some(field.id))
                && ui.input_mut(|i| i.consume_key(egui::Modifiers::CTRL | egui::Modifiers::SHIFT, egui::Key::Enter));
            let ready = can_reject && !self.feedback.trim().is_empty();
            if ui.add_enabled(ready, egui::Button::new("Reject with feedback")).on_hover_text("Ctrl+Shift+Enter").clicked()
                || (ready && reject_key)
            {
                outbox.push(Command::Identity(IdentityCommand::Reject {
                    character_id: id.clone(),
                    checkpoint: n,
                    feedback: std::mem::take(&mut self.feedback),
                }));
            }
        });
    }

    fn versions(&mut self, ui: &mut egui::Ui, cp: &CheckpointView) {
        if cp.versions.len() < 2 {
            return;
        }
        egui::CollapsingHeader::new(format!("Versions ({}) and differences", cp.versions.len())).default_open(false).show(ui, |ui| {
            let last = cp.versions.len() as u32;
            let (mut a, mut b) = self.compare.unwrap_or((last - 1, last));
            ui.horizontal(|ui| {
                let label = ui.label("Compare version");
                ui.add(egui::DragValue::new(&mut a).range(1..=last)).labelled_by(label.id);
                let label = ui.label("with");
                ui.add(egui::DragValue::new(&mut b).range(1..=last)).labelled_by(label.id);
            });
            self.compare = Some((a, b));
            let find = |n: u32| cp.versions.iter().find(|v| v.version == n);
            if let (Some(va), Some(vb)) = (find(a), find(b)) {
                diff_view(ui, &va.as_text(), &vb.as_text());
            }
        });
    }
}

fn current_version(cp: &CheckpointView) -> Option<&VersionRecord> {
    cp.versions.iter().find(|v| v.version == cp.record.current_version)
}

fn usage_text(v: &VersionRecord) -> String {
    format!("{} tokens{}", v.usage.total(), if v.usage.reported { "" } else { " (est.)" })
}

/// The last `chars` characters of `text` on one line, from the start of a word and
/// marked "…" when cut (a preview that began mid-word read as garbled).
fn tail(text: &str, chars: usize) -> String {
    let count = text.chars().count();
    let skip = count.saturating_sub(chars);
    let kept: String = text.chars().skip(skip).collect();
    let kept = if skip == 0 {
        kept
    } else {
        match kept.find(char::is_whitespace).filter(|at| *at < kept.len() / 2) {
            Some(at) => format!("…{}", kept[at..].trim_start()),
            None => format!("…{kept}"),
        }
    };
    kept.replace('\n', " ")
}

fn status_color(status: CheckpointStatus) -> Color32 {
    match status {
        CheckpointStatus::Queued => Color32::GRAY,
        CheckpointStatus::Running | CheckpointStatus::Regenerating => Color32::from_rgb(90, 160, 230),
        CheckpointStatus::AwaitingApproval => Color32::from_rgb(230, 180, 60),
        CheckpointStatus::Approved => Color32::from_rgb(80, 170, 90),
        CheckpointStatus::Stale => Color32::from_rgb(200, 120, 200),
        CheckpointStatus::Failed => Color32::from_rgb(220, 80, 80),
    }
}

/// One line of the form's "Other characters": name, role and concept, split at an em
/// dash, a spaced hyphen or double hyphen, or a bar — what a keyboard types ("Mira Voss -
/// lighthouse keeper - guards the sea she fears"). A hyphen inside a word
/// ("Anne-Marie") is not a split.
fn other_character(line: &str) -> OtherCharacter {
    let mut parts = line.split(['—', '–', '|']).flat_map(|p| p.split(" -- ")).flat_map(|p| p.split(" - ")).map(|p| p.trim().to_string());
    let name = parts.next().unwrap_or_default();
    let role = parts.next().unwrap_or_default();
    let concept = parts.collect::<Vec<_>>().join(" - ");
    OtherCharacter { name, role, concept }
}

fn status_chip(ui: &mut egui::Ui, status: CheckpointStatus) {
    ui.label(RichText::new(status.as_str().replace('_', " ")).color(status_color(status)).strong());
}

/// Structured output as a tree a person can read.
fn json_tree(ui: &mut egui::Ui, key: &str, value: &serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            egui::CollapsingHeader::new(key).id_salt(ui.scope_id().with(key)).default_open(true).show(ui, |ui| {
                for (k, v) in map {
                    json_tree(ui, k, v);
                }
            });
        }
        serde_json::Value::Array(items) => {
            egui::CollapsingHeader::new(format!("{key} [{}]", items.len())).id_salt(ui.scope_id().with(key)).default_open(true).show(ui, |ui| {
                for (i, v) in items.iter().enumerate() {
                    match v {
                        serde_json::Value::String(s) => {
                            ui.label(format!("• {s}"));
                        }
                        other => json_tree(ui, &format!("{}", i + 1), other),
                    }
                }
            });
        }
        serde_json::Value::String(s) => {
            ui.horizontal_wrapped(|ui| {
                ui.strong(format!("{key}:"));
                ui.label(s);
            });
        }
        other => {
            ui.horizontal_wrapped(|ui| {
                ui.strong(format!("{key}:"));
                ui.label(other.to_string());
            });
        }
    }
}

fn attempts(ui: &mut egui::Ui, v: &VersionRecord) {
    let Some(list) = v.attempts.as_array() else { return };
    let title = format!("Attempts ({}) — raw replies, repairs and schema errors", list.len());
    egui::CollapsingHeader::new(title).id_salt(("attempts", v.version)).default_open(list.len() > 1 || v.is_failed()).show(ui, |ui| {
        for a in list {
            let number = a["number"].as_u64().unwrap_or(0);
            ui.strong(format!("Attempt {number}: {}", crate::identity::records::attempt_outcome(a)));
            if let Some(repairs) = a["repairs"].as_array().filter(|r| !r.is_empty()) {
                ui.label(format!("Repairs: {}", repairs.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")));
            }
            if let Some(errors) = a["errors"].as_array().filter(|e| !e.is_empty()) {
                for e in errors {
                    ui.colored_label(ui.visuals().warn_fg_color, format!("{}: {}", e["path"].as_str().unwrap_or(""), e["message"].as_str().unwrap_or("")));
                }
            }
            egui::CollapsingHeader::new("raw reply").id_salt(("raw", v.version, number)).show(ui, |ui| {
                ui.label(RichText::new(a["raw"].as_str().unwrap_or_default()).monospace());
            });
        }
    });
}

/// What became of one attempt, in words: "accepted", or why it was refused.
fn diff_view(ui: &mut egui::Ui, old: &str, new: &str) {
    let diff = similar::TextDiff::from_lines(old, new);
    egui::ScrollArea::vertical().id_salt("diff").max_height(260.0).show(ui, |ui| {
        for change in diff.iter_all_changes() {
            let (sign, color) = match change.tag() {
                similar::ChangeTag::Delete => ("-", Color32::from_rgb(220, 90, 90)),
                similar::ChangeTag::Insert => ("+", Color32::from_rgb(90, 190, 110)),
                similar::ChangeTag::Equal => (" ", ui.visuals().weak_text_color()),
            };
            ui.label(RichText::new(format!("{sign} {}", change.value().trim_end_matches('\n'))).monospace().color(color));
        }
    });
}

/// Each version as a bar from its start to its end, in seconds since the run began.
fn timeline(ui: &mut egui::Ui, view: &RunView) {
    let Some(origin) = chrono::DateTime::parse_from_rfc3339(&view.run.created_at).ok() else { return };
    let secs = |t: &str| chrono::DateTime::parse_from_rfc3339(t).ok().map(|t| (t - origin).num_milliseconds() as f64 / 1000.0);
    let mut bars = Vec::new();
    for cp in &view.checkpoints {
        for v in &cp.versions {
            if let (Some(start), Some(end)) = (secs(&v.started_at), secs(&v.created_at)) {
                let agent = Agent::from_number(cp.record.number).map(|a| a.title()).unwrap_or("");
                bars.push(
                    egui_plot::Bar::new(cp.record.number as f64, (end - start).max(0.01))
                        .base_offset(start)
                        .name(format!("{agent} v{}", v.version))
                        .width(0.6),
                );
            }
        }
    }
    if bars.is_empty() {
        return;
    }
    ui.label("Timeline (seconds since start; one bar per version)");
    let chart = egui_plot::BarChart::new("versions", bars).horizontal().color(Color32::from_rgb(90, 160, 230));
    egui_plot::Plot::new("identity_timeline").height(180.0).allow_scroll(false).show(ui, |plot| plot.bar_chart(chart));
}

impl super::Panel for IdentityPanels {
    fn kinds(&self) -> &'static [super::PanelKind] {
        &[super::PanelKind::Waves, super::PanelKind::Checkpoints]
    }

    fn startup(&self) -> Vec<crate::engine::Command> {
        IdentityPanels::startup()
    }

    fn apply(&mut self, event: &crate::engine::Event, outbox: &mut Vec<crate::engine::Command>) {
        match event {
            crate::engine::Event::Identity(e) => IdentityPanels::apply(self, e, outbox),
            // A run is its character: once the character is deleted, the run list follows.
            crate::engine::Event::Interop(crate::interop::InteropEvent::CharacterDeleted { id, .. }) => {
                if self.selected.as_deref() == Some(id.as_str()) {
                    self.selected = None;
                    self.view = None;
                }
                self.runs.retain(|r| r.id != *id);
                outbox.push(Command::Identity(IdentityCommand::List));
            }
            _ => {}
        }
    }

    fn show(&mut self, kind: super::PanelKind, ui: &mut egui::Ui, outbox: &mut Vec<crate::engine::Command>) {
        match kind {
            super::PanelKind::Checkpoints => {
                egui::ScrollArea::vertical().show(ui, |ui| self.show_checkpoints(ui, outbox));
            }
            _ => {
                egui::ScrollArea::vertical().show(ui, |ui| self.show_waves(ui, outbox));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn other_characters_split_at_what_a_keyboard_types() {
        let o = super::other_character("Mira Voss - lighthouse keeper - guards the sea she fears");
        assert_eq!((o.name.as_str(), o.role.as_str(), o.concept.as_str()), ("Mira Voss", "lighthouse keeper", "guards the sea she fears"));
        let o = super::other_character("Anne-Marie Holt — ferrywoman — sells tickets | and secrets");
        assert_eq!((o.name.as_str(), o.role.as_str(), o.concept.as_str()), ("Anne-Marie Holt", "ferrywoman", "sells tickets - and secrets"));
        let o = super::other_character("Tobin -- brother");
        assert_eq!((o.name.as_str(), o.role.as_str(), o.concept.as_str()), ("Tobin", "brother", ""));
    }

    #[test]
    fn a_live_preview_starts_at_a_word() {
        assert_eq!(super::tail("short text", 40), "short text");
        assert_eq!(super::tail("the keeper climbs the lighthouse stairs", 20), "…lighthouse stairs");
        assert_eq!(super::tail("one\nline", 40), "one line");
    }

    #[test]
    fn an_attempts_outcome_reads_as_words() {
        let invalid = serde_json::json!({"number": 1, "failure": {"kind": "invalid"}, "errors": [{"path": "/a", "message": "x"}, {"path": "/b", "message": "y"}]});
        assert_eq!(crate::identity::records::attempt_outcome(&invalid), "refused: does not match the schema (2 problems below)");
        let unparseable = serde_json::json!({"number": 2, "failure": {"kind": "unparseable", "message": "EOF at line 1"}, "errors": []});
        assert_eq!(crate::identity::records::attempt_outcome(&unparseable), "refused: not JSON: EOF at line 1");
        assert_eq!(crate::identity::records::attempt_outcome(&serde_json::json!({"number": 3, "failure": null})), "accepted");
    }
}
