//! The Scene panel: pick a scene, see who is present and how they are, the campaign's
//! trackers and facts, the Director's decisions, and the transcript with replies
//! streaming in; play a round or let the scene continue.
//!
//! The panel holds a view model fed by scene events. Snapshots come from the engine
//! (one in flight at a time); the live round is built from the events themselves and
//! replaced by the stored snapshot once the round is committed.

use super::budgets::BudgetsPanel;
use crate::engine::Command;
use crate::scene::model::{DirectorPlan, Reconciliation, STATE_FIELDS, SceneMessage, SceneSummary};
use crate::scene::preview::SceneSnapshot;
use crate::scene::round::turn_order;
use crate::scene::{DirectorDecision, SceneCommand, SceneEvent};
use egui::RichText;

/// One character's turn of the round being played.
#[derive(Debug, Clone)]
pub struct LiveTurn {
    pub name: String,
    pub text: String,
    pub done: bool,
}

/// The round being played, as far as the events have told.
#[derive(Debug, Clone, Default)]
pub struct LiveRound {
    pub round: u32,
    pub input: Option<String>,
    pub plan: Option<DirectorPlan>,
    pub reconciliation: Option<Reconciliation>,
    pub turns: Vec<LiveTurn>,
    /// Who of the round waits for the embedded model and what holds it (see
    /// [`SceneEvent::Waiting`]), as the panel says it; gone once the call has the model.
    pub waiting: Option<String>,
    /// Committed: shown until the stored snapshot that includes it arrives.
    pub completed: bool,
}

#[derive(Default)]
pub struct ScenePanels {
    scenes: Vec<SceneSummary>,
    selected: Option<String>,
    snapshot: Option<SceneSnapshot>,
    refreshing: bool,
    live: Option<LiveRound>,
    input: String,
    last_error: Option<String>,
    /// Set when the last round was cancelled (shown until the next round starts).
    cancelled: bool,
    budgets: BudgetsPanel,
    /// Characters the user makes act in the next round.
    force: std::collections::BTreeSet<String>,
    /// The message of the round in flight, given back if the round stores nothing.
    sent_input: Option<String>,
    /// Rounds kept by redos (for the selected scene).
    alternatives: Vec<crate::scene::alternatives::Alternative>,
    /// Pause each round after the Director's plan, and the plan waiting for review.
    review_plan: bool,
    pending_plan: Option<crate::scene::model::DirectorPlan>,
    /// Who the game master skipped in the waiting plan, with the place each had in it,
    /// so a skip can be taken back before the plan is sent.
    skipped: Vec<(usize, crate::scene::model::ActingCharacter)>,
    /// A transcript message being edited (its number and the text so far).
    editing: Option<(u32, String)>,
    /// The message whose Delete was clicked, asking "Really delete?" before it goes (as
    /// the chat asks): Delete sits beside Edit, and a slip must not take a message out.
    confirm_delete: Option<u32>,
    /// Words to find in the transcript, and the whole transcript once asked for.
    search: String,
    whole: Option<Vec<SceneMessage>>,
    /// The scene to open once the list arrives (the one open at the last close).
    wanted: Option<String>,
    /// The cast's portraits.
    portraits: super::portrait::Portraits,
    /// A character (by name) to bring into the scene's cast or take out of it.
    cast_change: String,
    /// The open scene's cast members in the order their control rows were first shown.
    cast_rows: Vec<String>,
    /// What was typed and not sent, per scene (the open scene's is `input`).
    drafts: super::drafts::Drafts,
    /// A cast member's state in this scene being edited by hand (as `scene set-state`).
    state_edit: Option<StateEdit>,
}

/// The state editor under the scene's cast: one character's fields as they were when it
/// opened, and as typed. Only the fields changed are sent (a blank one is no change, as
/// the engine reads it), so a round's later change to another field is kept.
#[derive(Debug, Clone)]
struct StateEdit {
    scene: String,
    character_id: String,
    name: String,
    before: crate::scene::model::CharacterState,
    fields: [String; STATE_FIELDS.len()],
}

impl StateEdit {
    fn of(scene: &str, member: &crate::scene::model::CastMember) -> Self {
        Self {
            scene: scene.to_string(),
            character_id: member.id.clone(),
            name: member.name.clone(),
            before: member.state.clone(),
            fields: STATE_FIELDS.map(|f| member.state.get(f).unwrap_or_default().to_string()),
        }
    }

    /// The fields typed that differ from what the editor opened with.
    fn changed(&self) -> crate::scene::model::CharacterState {
        let mut changed = crate::scene::model::CharacterState::default();
        for (field, typed) in STATE_FIELDS.iter().zip(&self.fields) {
            let typed = typed.trim();
            if !typed.is_empty() && Some(typed) != self.before.get(field).map(str::trim) {
                changed.set(field, typed);
            }
        }
        changed
    }
}

impl ScenePanels {
    /// Commands to send when the window opens.
    pub fn startup() -> Vec<Command> {
        // The library is watched from the start (scenes and the authoring tree another
        // process changes), before any scene is open.
        vec![Command::Scene(SceneCommand::Watch { scene: None }), Command::Scene(SceneCommand::List)]
    }

    pub fn selected(&self) -> Option<&str> {
        self.selected.as_deref()
    }

    pub fn snapshot(&self) -> Option<&SceneSnapshot> {
        self.snapshot.as_ref()
    }

    /// The round being played, if one is.
    pub fn live(&self) -> Option<&LiveRound> {
        self.live.as_ref()
    }

    /// The Director's plan waiting for the game master, if a round paused for it.
    pub fn pending_plan(&self) -> Option<&crate::scene::model::DirectorPlan> {
        self.pending_plan.as_ref()
    }

    /// Rounds kept by redos, for the selected scene.
    pub fn alternatives(&self) -> &[crate::scene::alternatives::Alternative] {
        &self.alternatives
    }

    pub fn budgets(&self) -> &BudgetsPanel {
        &self.budgets
    }

    pub fn was_cancelled(&self) -> bool {
        self.cancelled
    }

    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    fn is_selected(&self, scene_id: &str) -> bool {
        self.selected.as_deref() == Some(scene_id)
    }

    pub fn apply(&mut self, event: &SceneEvent, outbox: &mut Vec<Command>) {
        match event {
            SceneEvent::Scenes { scenes } => {
                self.scenes = scenes.clone();
                if let Some(wanted) = self.wanted.take().filter(|w| scenes.iter().any(|x| &x.id == w)) {
                    self.select(wanted, outbox);
                }
                let still_there = self.selected.as_ref().is_some_and(|s| scenes.iter().any(|x| &x.id == s));
                if !still_there {
                    if let Some(first) = scenes.first() {
                        self.select(first.id.clone(), outbox);
                    }
                }
            }
            SceneEvent::SceneCreated { .. } | SceneEvent::DemoReady { .. } => outbox.push(Command::Scene(SceneCommand::List)),
            SceneEvent::Snapshot { snapshot } => {
                if self.is_selected(&snapshot.view.id) {
                    self.refreshing = false;
                    if self.live.as_ref().is_some_and(|l| l.completed && snapshot.view.rounds >= l.round) {
                        self.live = None;
                    }
                    self.snapshot = Some((**snapshot).clone());
                }
            }
            SceneEvent::Preview { preview } => {
                if self.is_selected(&preview.scene_id) {
                    self.budgets.set_preview((**preview).clone());
                }
            }
            SceneEvent::RoundStarted { scene_id, round, input } if self.is_selected(scene_id) => {
                self.last_error = None;
                self.cancelled = false;
                self.live = Some(LiveRound { round: *round, input: input.clone(), ..Default::default() });
            }
            // The embedded model answers one call at a time: a round waiting behind an
            // identity run or a chat says so, not only "planning…".
            SceneEvent::Waiting { scene_id, agent, holder, .. } if self.is_selected(scene_id) => {
                if let Some(live) = &mut self.live {
                    live.waiting = holder.as_ref().map(|holder| format!("{} waits for the embedded model, busy with {holder}", capitalised(agent)));
                }
            }
            SceneEvent::DirectorDecided { scene_id, decision, .. } if self.is_selected(scene_id) => {
                if let Some(live) = &mut self.live {
                    live.waiting = None;
                    match decision {
                        DirectorDecision::Plan(plan) => live.plan = Some((**plan).clone()),
                        DirectorDecision::Reconciliation(r) => live.reconciliation = Some((**r).clone()),
                    }
                }
            }
            SceneEvent::CharacterStarted { scene_id, name, .. } if self.is_selected(scene_id) => {
                if let Some(live) = &mut self.live {
                    live.waiting = None;
                    live.turns.push(LiveTurn { name: name.clone(), text: String::new(), done: false });
                }
            }
            SceneEvent::NarratorStarted { scene_id, .. } if self.is_selected(scene_id) => {
                if let Some(live) = &mut self.live {
                    live.waiting = None;
                    live.turns.push(LiveTurn { name: "Narrator".into(), text: String::new(), done: false });
                }
            }
            SceneEvent::NarratorFinished { scene_id, content, .. } if self.is_selected(scene_id) => {
                if let Some(turn) = self.live.as_mut().and_then(|l| l.turns.last_mut()) {
                    turn.text = content.clone();
                    turn.done = true;
                }
            }
            SceneEvent::Token { scene_id, text, .. } if self.is_selected(scene_id) => {
                if let Some(live) = &mut self.live {
                    live.waiting = None;
                }
                if let Some(turn) = self.live.as_mut().and_then(|l| l.turns.last_mut()) {
                    turn.text.push_str(text);
                }
            }
            SceneEvent::Redrawn { scene_id, .. } if self.is_selected(scene_id) => {
                if let Some(turn) = self.live.as_mut().and_then(|l| l.turns.last_mut()) {
                    turn.text.clear();
                }
            }
            SceneEvent::CharacterFinished { scene_id, content, .. } if self.is_selected(scene_id) => {
                if let Some(turn) = self.live.as_mut().and_then(|l| l.turns.last_mut()) {
                    turn.text = content.clone();
                    turn.done = true;
                }
            }
            SceneEvent::RoundCompleted { scene_id, round, .. } => {
                outbox.push(Command::Scene(SceneCommand::List));
                if self.is_selected(scene_id) {
                    self.sent_input = None;
                    if let Some(live) = &mut self.live {
                        live.round = *round;
                        live.completed = true;
                    }
                    // A snapshot asked for before the commit would not include the round.
                    self.refreshing = false;
                    self.refresh(outbox);
                    outbox.push(self.budgets.preview_command(scene_id));
                }
            }
            SceneEvent::RoundCancelled { scene_id } if self.is_selected(scene_id) => {
                self.pending_plan = None;
                self.live = None;
                self.cancelled = true;
                self.restore_input();
            }
            SceneEvent::PlanReview { scene_id, plan, .. } if self.is_selected(scene_id) => {
                if let Some(live) = &mut self.live {
                    live.waiting = None;
                }
                self.pending_plan = Some(plan.clone());
                self.skipped.clear();
            }
            SceneEvent::Transcript { scene_id, messages } if self.is_selected(scene_id) => {
                self.whole = Some(messages.clone());
            }
            SceneEvent::Alternatives { scene_id, alternatives } if self.is_selected(scene_id) => {
                self.alternatives = alternatives.clone();
            }
            SceneEvent::RedoFailed { scene_id, round, message } if self.is_selected(scene_id) => {
                outbox.push(Command::Scene(SceneCommand::List));
                self.live = None;
                self.last_error = Some(format!("The redo failed ({message}); round {round} is back as it was."));
                outbox.push(Command::Scene(SceneCommand::Snapshot { scene: scene_id.clone() }));
            }
            SceneEvent::AlternativeChosen { scene_id, .. } if self.is_selected(scene_id) => {
                outbox.push(Command::Scene(SceneCommand::List));
                self.live = None;
                outbox.push(Command::Scene(SceneCommand::Snapshot { scene: scene_id.clone() }));
            }
            SceneEvent::RoundUndone { scene_id, .. } | SceneEvent::Muted { scene_id, .. } | SceneEvent::MessageEdited { scene_id, .. }
            | SceneEvent::MessageDeleted { scene_id, .. }
            | SceneEvent::CastChanged { scene_id, .. }
                if self.is_selected(scene_id) =>
            {
                self.live = None;
                // A change that went through: an earlier refusal (a name not found, a
                // message gone) no longer describes the scene.
                self.last_error = None;
                outbox.push(Command::Scene(SceneCommand::Snapshot { scene: scene_id.clone() }));
                // The scene list's round counts follow an undo.
                outbox.push(Command::Scene(SceneCommand::List));
            }
            // Another process (the CLI, a server, a second window) changed this scene: read
            // it again (a round of ours running here is read when it ends).
            SceneEvent::ChangedElsewhere { scene_id: Some(id) } if self.is_selected(id) => {
                outbox.push(Command::Scene(SceneCommand::List));
                outbox.push(Command::Scene(SceneCommand::Alternatives { scene: id.clone() }));
                // The Budgets panel's refit and telemetry count that round too.
                outbox.push(self.budgets.preview_command(id));
                if self.live.is_none() {
                    self.whole = None;
                    self.refreshing = false;
                    self.refresh(outbox);
                }
            }
            SceneEvent::ChangedElsewhere { .. } => outbox.push(Command::Scene(SceneCommand::List)),
            SceneEvent::Error { scene_id, message, .. } => {
                if scene_id.as_deref().is_none_or(|s| self.is_selected(s)) {
                    self.pending_plan = None;
                    self.last_error = Some(message.clone());
                    self.live = None;
                    self.refreshing = false;
                    self.restore_input();
                }
            }
            _ => {}
        }
    }

    fn refresh(&mut self, outbox: &mut Vec<Command>) {
        if let Some(scene) = &self.selected {
            // One snapshot in flight at a time: a burst of events costs one read.
            if !self.refreshing {
                self.refreshing = true;
                outbox.push(Command::Scene(SceneCommand::Snapshot { scene: scene.clone() }));
            }
        }
    }

    /// A round that stored nothing gives the user their words back, to edit or resend.
    fn restore_input(&mut self) {
        if let Some(sent) = self.sent_input.take()
            && self.input.trim().is_empty()
        {
            self.input = sent;
        }
    }

    /// The message box's text (for tests).
    pub fn input(&self) -> &str {
        &self.input
    }

    /// Every scene's unsent message, by scene id (what the window saves).
    pub fn drafts(&self) -> std::collections::BTreeMap<String, String> {
        self.drafts.all(&self.input)
    }

    /// The unsent messages a previous window kept.
    pub fn restore_drafts(&mut self, drafts: std::collections::BTreeMap<String, String>) {
        self.drafts.restore(drafts);
    }

    /// Open `scene` as the workbench did when it last closed, once the scene list
    /// arrives and if the scene is still there.
    pub fn restore(&mut self, scene: String) {
        self.wanted = Some(scene);
    }

    /// Show `scene` (asked for by another panel), refreshing the list first.
    pub fn open(&mut self, scene: String, outbox: &mut Vec<Command>) {
        outbox.push(Command::Scene(SceneCommand::List));
        self.select(scene, outbox);
    }

    fn select(&mut self, id: String, outbox: &mut Vec<Command>) {
        if !self.is_selected(&id) {
            self.snapshot = None;
            self.live = None;
            self.refreshing = false;
            self.budgets.clear();
            self.alternatives.clear();
            self.editing = None;
            self.confirm_delete = None;
            self.whole = None;
            self.cast_rows.clear();
            // Rounds another process plays here are heard within a couple of seconds.
            outbox.push(Command::Scene(SceneCommand::Watch { scene: Some(id.clone()) }));
        }
        outbox.push(self.budgets.preview_command(&id));
        outbox.push(Command::Scene(SceneCommand::Alternatives { scene: id.clone() }));
        self.selected = Some(id);
        self.refresh(outbox);
    }

    /// The scene chooser both panels share.
    fn scene_picker(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>, salt: &str) {
        ui.horizontal(|ui| {
            let label = ui.label("Scene");
            let shown = self
                .selected
                .as_ref()
                .and_then(|id| self.scenes.iter().find(|s| &s.id == id))
                .map(|s| s.name.clone())
                .unwrap_or_else(|| "choose…".into());
            let mut choice = None;
            egui::ComboBox::from_id_salt(salt)
                .selected_text(shown)
                .show_ui(ui, |ui| {
                    for s in &self.scenes {
                        let text = format!("{} — {} / {} ({})", s.name, s.campaign, s.arc, super::counted(s.rounds, "round", "rounds"));
                        if ui.selectable_label(self.selected.as_deref() == Some(&s.id), text).clicked() {
                            choice = Some(s.id.clone());
                        }
                    }
                })
                .response
                .labelled_by(label.id);
            if ui.button("Refresh").clicked() {
                outbox.push(Command::Scene(SceneCommand::List));
                self.refreshing = false;
                self.refresh(outbox);
                if let Some(id) = &self.selected {
                    outbox.push(self.budgets.preview_command(id));
                }
            }
            if let Some(id) = choice {
                self.select(id, outbox);
            }
        });
        if self.scenes.is_empty() {
            ui.label("No scene yet. Make one in the Campaigns panel: a world, a campaign, an arc, then New scene (or `lorekeeper scene new` from a terminal).");
        }
    }

    // ----- Scene -------------------------------------------------------------------

    pub fn show_scene(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        ui.heading("Scene");
        self.scene_picker(ui, outbox, "scene_picker");
        if let Some(error) = &self.last_error {
            ui.colored_label(ui.visuals().error_fg_color, error);
        }
        let Some(snapshot) = &self.snapshot else {
            if self.selected.is_some() {
                ui.spinner();
            }
            return;
        };
        let view = &snapshot.view;
        ui.label(format!(
            "{} / {} / {} — {} — {}{}",
            view.world,
            view.campaign,
            view.arc,
            super::counted(view.rounds, "round", "rounds"),
            super::counted(view.elapsed_minutes, "in-fiction minute", "in-fiction minutes"),
            view.persona.as_deref().map(|p| format!(" — you play {}", p.split(':').next().unwrap_or(p))).unwrap_or_default()
        ));
        // Two columns when the tile is wide; in a narrow tile the cast, the state and the
        // Director's plan fold away above the controls and the transcript.
        if ui.available_width() < 760.0 {
            egui::CollapsingHeader::new("Cast, state and the Director's plan").id_salt("scene_state_folded").show(ui, |ui| {
                egui::ScrollArea::both().id_salt("scene_state").max_height(ui.ctx().content_rect().height() * 0.35).show(ui, |ui| {
                    self.characters(ui, outbox);
                    self.campaign_state(ui);
                    self.director(ui);
                    self.round_lore(ui);
                });
            });
            self.play_controls(ui, outbox);
            ui.separator();
            self.transcript(ui, outbox);
            return;
        }
        ui.columns(2, |columns| {
            // Both ways: a wide state table scrolls inside its column instead of running
            // under the transcript.
            egui::ScrollArea::both().id_salt("scene_state").show(&mut columns[0], |ui| {
                self.characters(ui, outbox);
                self.campaign_state(ui);
                self.director(ui);
                self.round_lore(ui);
            });
            let ui = &mut columns[1];
            self.play_controls(ui, outbox);
            ui.separator();
            self.transcript(ui, outbox);
        });
    }

    fn characters(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        let Some(snapshot) = &self.snapshot else { return };
        let running = self.live.as_ref().is_some_and(|l| !l.completed);
        let mut open_edit = None;
        ui.strong("Characters");
        egui::Grid::new("scene_characters").striped(true).num_columns(2 + STATE_FIELDS.len()).show(ui, |ui| {
            ui.strong("Name");
            ui.strong("Present");
            for field in STATE_FIELDS {
                ui.strong(field);
            }
            ui.end_row();
            // Present characters first: they are who the round is about.
            let mut cast: Vec<_> = snapshot.view.cast.iter().collect();
            cast.sort_by_key(|c| !c.active);
            for member in cast {
                ui.horizontal(|ui| {
                    self.portraits.show(ui, &member.id, &member.name, super::portrait::SIZE, outbox);
                    ui.label(super::short(&member.name)).on_hover_text(&member.name);
                    // A round writes states when it closes: edits wait until it has.
                    if !running
                        && self.state_edit.is_none()
                        && ui
                            .small_button(format!("Edit state of {}", super::short(&member.name)))
                            .on_hover_text("Change where they are, their mood, clothing, activity or intentions in this scene")
                            .clicked()
                    {
                        open_edit = Some(StateEdit::of(&snapshot.view.id, member));
                    }
                });
                ui.label(if member.active { "yes" } else { "—" });
                for field in STATE_FIELDS {
                    ui.label(member.state.get(field).unwrap_or("—"));
                }
                ui.end_row();
            }
        });
        if open_edit.is_some() {
            self.state_edit = open_edit;
        }
        self.state_editor(ui, running, outbox);
    }

    /// The open state edit's fields, saved as `AuthorCommand::EditCharacterState`; the
    /// snapshot is read again when the authoring tree that follows arrives.
    fn state_editor(&mut self, ui: &mut egui::Ui, running: bool, outbox: &mut Vec<Command>) {
        let Some(edit) = self.state_edit.as_mut() else { return };
        if self.selected.as_deref() != Some(edit.scene.as_str()) {
            self.state_edit = None;
            return;
        }
        ui.add_space(4.0);
        ui.strong(format!("State of {} in this scene", super::short(&edit.name)));
        egui::Grid::new("scene_state_edit").num_columns(2).show(ui, |ui| {
            for (field, text) in STATE_FIELDS.iter().zip(edit.fields.iter_mut()) {
                let label = ui.label(capitalised(field));
                ui.add(egui::TextEdit::singleline(text).desired_width(220.0).id_salt(("scene_state_edit", *field))).labelled_by(label.id);
                ui.end_row();
            }
        });
        let changed = edit.changed();
        let mut close = false;
        ui.horizontal(|ui| {
            let save = ui
                .add_enabled(!running && !changed.is_empty(), egui::Button::new("Save state"))
                .on_hover_text("Only the fields you changed are saved; a blank field is left as it was");
            if save.clicked() {
                outbox.push(Command::Scene(SceneCommand::Author(crate::scene::author::AuthorCommand::EditCharacterState {
                    scene: edit.scene.clone(),
                    character: edit.character_id.clone(),
                    state: changed.clone(),
                })));
                close = true;
            }
            if ui.button("Cancel state edit").clicked() {
                close = true;
            }
        });
        if close {
            self.state_edit = None;
        }
    }

    fn campaign_state(&self, ui: &mut egui::Ui) {
        let Some(snapshot) = &self.snapshot else { return };
        let view = &snapshot.view;
        ui.add_space(6.0);
        ui.strong("Trackers");
        if view.trackers.is_empty() {
            ui.weak("none");
        }
        for (name, value) in &view.trackers {
            let value = value.as_str().map(str::to_string).unwrap_or_else(|| value.to_string());
            ui.label(format!("{name} = {value}"));
        }
        ui.add_space(6.0);
        ui.strong("Facts");
        if view.facts.is_empty() {
            ui.weak("none yet");
        }
        for fact in &view.facts {
            ui.label(format!("• {fact}"));
        }
    }

    /// The Director's decisions: of the round being played, else of the last one.
    fn director(&self, ui: &mut egui::Ui) {
        ui.add_space(6.0);
        let stored = self.snapshot.as_ref().and_then(|s| s.last_round.as_ref());
        let (round, plan, reconciliation, conflicts, ignored) = match (&self.live, stored) {
            (Some(live), _) => (live.round, live.plan.as_ref(), live.reconciliation.as_ref(), &[][..], &[][..]),
            (None, Some(last)) => (
                last.round,
                Some(&last.director.plan),
                last.director.reconciliation.as_ref(),
                last.director.conflicts.as_slice(),
                last.director.ignored.as_slice(),
            ),
            (None, None) => {
                ui.strong("Director");
                ui.weak("No round played yet.");
                return;
            }
        };
        ui.strong(format!("Director — round {round}"));
        let Some(plan) = plan else {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("planning…");
            });
            return;
        };
        ui.label("Acting order:");
        for (i, actor) in turn_order(plan.acting_characters.clone()).iter().enumerate() {
            let guidance = if actor.guidance.trim().is_empty() { String::new() } else { format!(" — {}", actor.guidance.trim()) };
            // A character the game master made act has no priority of the Director's.
            let why = if actor.forced { "asked by you".to_string() } else { format!("priority {}", actor.priority) };
            ui.label(format!("  {}. {} ({why}){guidance}", i + 1, super::short(&actor.name)));
        }
        for a in &plan.activations {
            ui.label(format!("Enters: {} — {}", super::short(&a.name), a.entry_guidance));
        }
        for d in &plan.deactivations {
            ui.label(format!("Leaves: {} — {}", super::short(&d.name), d.exit_guidance));
        }
        for u in &plan.state_updates {
            ui.label(format!("Before acting, {}: {}", super::short(&u.name), state_text(&u.state)));
        }
        if !plan.open_guidance.trim().is_empty() {
            ui.label(format!("Guidance to all: {}", plan.open_guidance.trim()));
        }
        if let Some(r) = reconciliation {
            ui.label("Reconciled:");
            for u in &r.state_updates {
                ui.label(format!("  {}: {}", super::short(&u.name), state_text(&u.state)));
            }
            for (name, value) in &r.trackers {
                ui.label(format!("  tracker {name} = {value}"));
            }
            for fact in &r.new_facts {
                ui.label(format!("  new fact: {fact}"));
            }
            if r.elapsed_minutes > 0 {
                ui.label(format!("  {} minutes passed", r.elapsed_minutes));
            }
        }
        for c in conflicts {
            ui.label(
                RichText::new(format!(
                    "Conflict: {} said {} = {:?}; the Director kept {:?}",
                    c.character, c.field, c.character_value, c.director_value
                ))
                .color(ui.visuals().warn_fg_color),
            );
        }
        if !ignored.is_empty() {
            ui.weak(format!("Ignored (not in the scene): {}", ignored.join(", ")));
        }
    }

    /// The plan waiting for the game master: who acts, in what order, with what guidance.
    /// The lore of the last round: each entry that fired, why, and whose prompt it went
    /// into; those that matched but were held back, and why.
    fn round_lore(&self, ui: &mut egui::Ui) {
        let Some(last) = self.snapshot.as_ref().and_then(|s| s.last_round.as_ref()) else { return };
        let lore = &last.lore;
        let title = format!("Lore — round {} ({} fired, {} held back)", last.round, lore.fired.len(), lore.held_back.len());
        egui::CollapsingHeader::new(title).id_salt("scene_round_lore").default_open(true).show(ui, |ui| {
            if lore.fired.is_empty() && lore.held_back.is_empty() {
                ui.weak("No lorebook entry matched this round.");
            }
            for f in &lore.fired {
                ui.label(format!("{} — given to {}", f.entry, f.given_to.iter().map(|w| super::short(w).into_owned()).collect::<Vec<_>>().join(", ")));
            }
            for h in &lore.held_back {
                ui.weak(format!("{} — held back from {}: {}", h.entry, super::short(&h.call), h.reason));
            }
        });
    }

    fn plan_review(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>, scene: &str) {
        let Some(plan) = self.pending_plan.as_mut() else { return };
        let mut submitted = false;
        ui.group(|ui| {
            ui.strong("The Director's plan — change it before anyone acts");
            let mut remove = None;
            for (i, acting) in plan.acting_characters.iter_mut().enumerate() {
                ui.horizontal(|ui| {
                    let label = ui.label(format!("{}. {}", i + 1, super::short(&acting.name)));
                    ui.add(egui::TextEdit::singleline(&mut acting.guidance).desired_width(420.0).id_salt(("plan_guidance", i))).labelled_by(label.id);
                    if ui.small_button(format!("Skip {}", super::short(&acting.name))).on_hover_text("Take them out of this round").clicked() {
                        remove = Some(i);
                    }
                });
            }
            if let Some(i) = remove {
                self.skipped.push((i, plan.acting_characters.remove(i)));
            }
            // A skip is taken back: the character returns to the place it had.
            let mut restore = None;
            for (i, (_, skipped)) in self.skipped.iter().enumerate() {
                ui.horizontal(|ui| {
                    ui.weak(format!("skipped: {}", super::short(&skipped.name)));
                    if ui.small_button(format!("Restore {}", super::short(&skipped.name))).on_hover_text("Put them back in this round").clicked() {
                        restore = Some(i);
                    }
                });
            }
            if let Some(i) = restore {
                let (place, actor) = self.skipped.remove(i);
                plan.acting_characters.insert(place.min(plan.acting_characters.len()), actor);
            }
            ui.horizontal(|ui| {
                let label = ui.label("Guidance for everyone");
                ui.add(egui::TextEdit::singleline(&mut plan.open_guidance).desired_width(420.0).id_salt("plan_open_guidance")).labelled_by(label.id);
            });
            for a in &plan.activations {
                ui.weak(format!("enters: {} — {}", super::short(&a.name), a.entry_guidance));
            }
            for d in &plan.deactivations {
                ui.weak(format!("leaves: {} — {}", super::short(&d.name), d.exit_guidance));
            }
            if ui.button("Play with this plan").clicked() {
                outbox.push(Command::Scene(SceneCommand::SubmitPlan { scene: scene.to_string(), plan: plan.clone() }));
                submitted = true;
            }
        });
        if submitted {
            self.pending_plan = None;
            self.skipped.clear();
        }
    }

    fn play_controls(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        let Some(scene) = self.selected.clone() else { return };
        self.plan_review(ui, outbox, &scene);
        let running = self.live.as_ref().is_some_and(|l| !l.completed);
        self.drafts.follow(Some(&scene), &mut self.input);
        let label = ui.label("Your message");
        let field = ui
            .add(egui::TextEdit::multiline(&mut self.input).desired_rows(2).desired_width(f32::INFINITY).hint_text("what you say or do (Ctrl+Enter plays the round)"))
            .labelled_by(label.id);
        let ctrl_enter = field.has_focus() && ui.input_mut(|i| i.consume_key(egui::Modifiers::COMMAND, egui::Key::Enter));
        ui.horizontal(|ui| {
            let has_text = !self.input.trim().is_empty();
            if ui.add_enabled(!running && has_text, egui::Button::new("Play round")).on_hover_text("Ctrl+Enter").clicked() || (ctrl_enter && !running && has_text) {
                let input = std::mem::take(&mut self.input);
                self.sent_input = Some(input.clone());
                let force = std::mem::take(&mut self.force).into_iter().collect();
                outbox.push(Command::Scene(SceneCommand::Round { scene: scene.clone(), input: Some(input), force, review: self.review_plan }));
                self.live = Some(LiveRound::default());
            }
            if ui.add_enabled(!running, egui::Button::new("Continue")).clicked() {
                let force = std::mem::take(&mut self.force).into_iter().collect();
                outbox.push(Command::Scene(SceneCommand::Round { scene: scene.clone(), input: None, force, review: self.review_plan }));
                self.live = Some(LiveRound::default());
            }
            ui.checkbox(&mut self.review_plan, "Review the Director's plan").on_hover_text("Pause after the plan, to change who acts and how, before anyone does");
            if running {
                // Esc stops the running round, as the button does.
                let escape = ui.input_mut(|i| i.consume_key(egui::Modifiers::NONE, egui::Key::Escape));
                if ui.button("Cancel round").on_hover_text("Stop this round; nothing of it is saved (Esc)").clicked() || escape {
                    outbox.push(Command::Scene(SceneCommand::Cancel { scene: scene.clone() }));
                }
                ui.spinner();
            }
        });
        if let Some(waiting) = self.live.as_ref().filter(|l| !l.completed).and_then(|l| l.waiting.as_deref()) {
            ui.weak(waiting);
        }
        if self.cancelled && !running {
            ui.weak("The round was cancelled; nothing of it was saved.");
        }
        if let Some(snapshot) = self.snapshot.as_ref().filter(|_| !running) {
            let cast: Vec<(String, bool)> = snapshot.view.cast.iter().map(|c| (c.name.clone(), c.muted)).collect();
            let rounds = snapshot.view.rounds;
            ui.horizontal_wrapped(|ui| {
                if rounds > 0
                    && ui.button("Undo last round").on_hover_text("Its messages and memories go; what it changed in states, trackers, facts, time and lore timers goes back, except what was edited since").clicked()
                {
                    // The round on screen is the one to take back; the engine refuses when
                    // the scene's last is another (changed elsewhere since it was read).
                    outbox.push(Command::Scene(SceneCommand::Undo { scene: scene.clone(), expect_round: Some(rounds) }));
                }
                if rounds > 0
                    && ui.button("Redo last round").on_hover_text("Play it again from the same input; this version is kept to switch back to").clicked()
                {
                    outbox.push(Command::Scene(SceneCommand::Redo { scene: scene.clone() }));
                    self.live = Some(LiveRound::default());
                }
            });
            // One row per cast member, in a grid: a label that changes width (Mute →
            // Unmute) or a member joining never moves another control under the pointer.
            // The "acts" box stays (greyed) for a muted member so its column keeps its width.
            // Rows keep the order they were first shown in (the cast is listed by name, so
            // a member joining would otherwise push those after them down a row).
            self.cast_rows.retain(|n| cast.iter().any(|(c, _)| c == n));
            for (name, _) in &cast {
                if !self.cast_rows.contains(name) {
                    self.cast_rows.push(name.clone());
                }
            }
            let rows: Vec<(String, bool)> =
                self.cast_rows.iter().filter_map(|n| cast.iter().find(|(c, _)| c == n)).cloned().collect();
            egui::Grid::new("scene_cast_controls").num_columns(3).spacing([12.0, 2.0]).show(ui, |ui| {
                for (name, muted) in &rows {
                    ui.label(super::short(name));
                    let mut forced = !muted && self.force.contains(name);
                    let acts = ui
                        .add_enabled(!muted, egui::Checkbox::new(&mut forced, format!("{} acts", super::short(name))))
                        .on_hover_text("Make them act this round, whatever the Director decides")
                        .on_disabled_hover_text("Muted: unmute them to make them act");
                    if acts.changed() {
                        if forced {
                            self.force.insert(name.clone());
                        } else {
                            self.force.remove(name);
                        }
                    }
                    let label = if *muted { format!("Unmute {}", super::short(name)) } else { format!("Mute {}", super::short(name)) };
                    if ui.small_button(label).clicked() {
                        outbox.push(Command::Scene(SceneCommand::Mute { scene: scene.clone(), character: name.clone(), muted: !muted }));
                    }
                    ui.end_row();
                }
            });
            // Someone of the library joins the scene (absent until the Director brings
            // them in), or a cast member leaves it.
            ui.horizontal_wrapped(|ui| {
                let label = ui.label("Cast change");
                ui.add(egui::TextEdit::singleline(&mut self.cast_change).hint_text("a character's name").desired_width(180.0).id_salt("scene_cast_change"))
                    .labelled_by(label.id);
                let named = !self.cast_change.trim().is_empty();
                for (text, add, hover) in [
                    ("Add to cast", true, "Bring this character into the scene's cast, absent until the Director (or 'acts') brings them in"),
                    ("Remove from cast", false, "Take this character out of the scene's cast; what they said stays"),
                ] {
                    if ui.add_enabled(named, egui::Button::new(text)).on_hover_text(hover).clicked() {
                        let character = std::mem::take(&mut self.cast_change).trim().to_string();
                        outbox.push(Command::Scene(SceneCommand::Cast { scene: scene.clone(), character, add }));
                    }
                }
            });
            // Rounds kept by redos: the last round's can be swapped back in.
            let swappable: Vec<_> = self.alternatives.iter().filter(|a| a.round == rounds || a.round == rounds + 1).collect();
            if !swappable.is_empty() {
                egui::CollapsingHeader::new(format!("Kept versions of the last round ({})", swappable.len())).id_salt("scene_alternatives").show(ui, |ui| {
                    for a in swappable {
                        ui.horizontal_wrapped(|ui| {
                            if ui.small_button("Use this version").on_hover_text("Play this version; the current one is kept").clicked() {
                                outbox.push(Command::Scene(SceneCommand::UseAlternative { scene: scene.clone(), id: a.id.clone() }));
                            }
                            ui.label(format!("round {} · {}", a.round, a.preview));
                        });
                    }
                });
            }
        }
    }

    /// The transcript: the recent messages in full (each editable while no round runs),
    /// or — with words to find — every match in the whole transcript, which is loaded
    /// once asked for and listed one line per message, drawing only the rows in view.
    fn transcript(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        let Some(scene) = self.selected.clone() else { return };
        let Some(snapshot) = &self.snapshot else { return };
        let running = self.live.as_ref().is_some_and(|l| !l.completed);
        ui.horizontal_wrapped(|ui| {
            let label = ui.label("Search transcript");
            let width = (ui.available_width() - 160.0).clamp(120.0, 220.0);
            ui.add(egui::TextEdit::singleline(&mut self.search).desired_width(width).id_salt("scene_search")).labelled_by(label.id);
            let label = if self.whole.is_some() { "Reload whole transcript" } else { "Whole transcript" };
            if ui.button(label).on_hover_text("Scroll back through every message of the scene").clicked() {
                outbox.push(Command::Scene(SceneCommand::Transcript { scene: scene.clone() }));
            }
            if self.whole.is_some() && ui.button("Recent messages").on_hover_text("Back to the recent messages, to edit or delete them").clicked() {
                self.whole = None;
                self.search.clear();
            }
        });
        let needle = self.search.trim().to_lowercase();
        if !needle.is_empty() || self.whole.is_some() {
            let source: &[SceneMessage] = self.whole.as_deref().unwrap_or(&snapshot.messages);
            let found: Vec<&SceneMessage> = source
                .iter()
                .filter(|m| needle.is_empty() || m.content.to_lowercase().contains(&needle) || m.speaker.to_lowercase().contains(&needle))
                .collect();
            let scope = if self.whole.is_some() { "the whole transcript" } else { "the recent messages (load the whole transcript to search it all)" };
            ui.weak(format!("{} of {} messages in {scope}", found.len(), source.len()));
            let row = ui.text_style_height(&egui::TextStyle::Body) + ui.spacing().item_spacing.y;
            egui::ScrollArea::vertical().id_salt("scene_transcript_whole").max_height(360.0).show_rows(ui, row, found.len(), |ui, rows| {
                for m in &found[rows] {
                    let line: String = format!("#{} · round {} · {}: {}", m.number, m.round, m.speaker, m.content).replace('\n', " ");
                    ui.add(egui::Label::new(line).truncate()).on_hover_text(&m.content);
                }
            });
            return;
        }
        let mut start_edit = None;
        // This frame's answer to "Really delete?" (`Some(None)`: keep it) and a question asked.
        let mut delete_answer: Option<Option<u32>> = None;
        let mut delete_ask = None;
        let mut save = None;
        let mut stop_edit = false;
        egui::ScrollArea::vertical().id_salt("scene_transcript").stick_to_bottom(true).show(ui, |ui| {
            if snapshot.messages.is_empty() && self.live.is_none() {
                ui.weak("The transcript is empty: say something and play the first round.");
            }
            let mut round = 0;
            for m in &snapshot.messages {
                if m.round != round {
                    round = m.round;
                    ui.weak(format!("— round {round} —"));
                }
                ui.horizontal(|ui| {
                    ui.label(RichText::new(format!("{}:", super::short(&m.speaker))).strong());
                    if !running && self.editing.is_none() && ui.small_button(format!("Edit message {}", m.number)).on_hover_text("Change its text (its memory follows)").clicked() {
                        start_edit = Some((m.number, m.content.clone()));
                    }
                    if !running && self.editing.is_none() {
                        if self.confirm_delete == Some(m.number) {
                            // The answers sit right of the question, not where Delete
                            // was: a double click on Delete only asks.
                            ui.colored_label(ui.visuals().warn_fg_color, format!("Really delete message {}?", m.number));
                            if ui.small_button("No, keep it").clicked() {
                                delete_answer = Some(None);
                            }
                            if ui.small_button("Yes, delete").clicked() {
                                delete_answer = Some(Some(m.number));
                            }
                        } else if ui
                            .small_button(format!("Delete message {}", m.number))
                            .on_hover_text("Take it out of the transcript, and its memory with it (the round's state stays; Undo takes back a round)")
                            .clicked()
                        {
                            delete_ask = Some(m.number);
                        }
                    }
                });
                match self.editing.as_mut().filter(|(n, _)| *n == m.number) {
                    Some((_, draft)) => {
                        let label = ui.label(format!("New text of message {}", m.number));
                        ui.add(egui::TextEdit::multiline(draft).desired_rows(2).desired_width(f32::INFINITY).id_salt(("scene_edit", m.number)))
                            .labelled_by(label.id);
                        ui.horizontal(|ui| {
                            if ui.button("Save edit").clicked() {
                                save = Some((m.number, draft.clone()));
                            }
                            if ui.button("Cancel edit").clicked() {
                                stop_edit = true;
                            }
                        });
                    }
                    None => {
                        ui.label(super::prose::job(ui, None, &m.content));
                    }
                }
            }
            if let Some(live) = &self.live {
                ui.weak(format!("— round {}{} —", live.round, if live.completed { "" } else { " (playing)" }));
                if let Some(input) = live.input.as_deref().filter(|t| !t.trim().is_empty()) {
                    // Named as the stored message will be: the campaign's persona, else "User".
                    let persona = snapshot.view.persona.as_deref().and_then(|p| p.split(':').next()).map(str::trim).filter(|p| !p.is_empty());
                    ui.label(RichText::new(format!("{}:", super::short(persona.unwrap_or("User")))).strong());
                    ui.label(input);
                }
                for turn in &live.turns {
                    ui.label(RichText::new(format!("{}:", super::short(&turn.name))).strong());
                    ui.horizontal_wrapped(|ui| {
                        ui.label(super::prose::job(ui, None, &turn.text));
                        if !turn.done {
                            ui.spinner();
                        }
                    });
                }
            }
        });
        if let Some(request) = start_edit {
            self.editing = Some(request);
        }
        if let Some(answer) = delete_answer {
            self.confirm_delete = None;
            if let Some(number) = answer {
                outbox.push(Command::Scene(SceneCommand::DeleteMessage { scene: scene.clone(), number }));
            }
        }
        if let Some(number) = delete_ask {
            self.confirm_delete = Some(number);
        }
        if let Some((number, text)) = save {
            outbox.push(Command::Scene(SceneCommand::EditMessage { scene, number, text }));
            self.editing = None;
        }
        if stop_edit {
            self.editing = None;
        }
    }

    // ----- Budgets -----------------------------------------------------------------

    pub fn show_budgets(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        ui.heading("Budgets");
        self.scene_picker(ui, outbox, "budgets_scene_picker");
        let Some(scene) = self.selected.clone() else { return };
        let active: Vec<String> =
            self.snapshot.as_ref().map(|s| s.view.active().map(|c| c.name.clone()).collect()).unwrap_or_default();
        let campaign = self.snapshot.as_ref().map(|s| s.view.campaign_id.clone());
        self.budgets.show(ui, &scene, campaign.as_deref(), &active, outbox);
    }
}

/// `text` with its first letter a capital ("the Director" opens a sentence).
fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn state_text(state: &crate::scene::model::CharacterState) -> String {
    let parts: Vec<String> = STATE_FIELDS.iter().filter_map(|f| state.get(f).map(|v| format!("{f}: {v}"))).collect();
    if parts.is_empty() { "no change".into() } else { parts.join("; ") }
}

impl super::Panel for ScenePanels {
    fn kinds(&self) -> &'static [super::PanelKind] {
        &[super::PanelKind::Scene, super::PanelKind::Budgets]
    }

    fn startup(&self) -> Vec<crate::engine::Command> {
        ScenePanels::startup()
    }

    fn apply(&mut self, event: &crate::engine::Event, outbox: &mut Vec<crate::engine::Command>) {
        self.portraits.apply(event);
        match event {
            crate::engine::Event::Scene(e) => ScenePanels::apply(self, e, outbox),
            // A scene created, renamed or deleted elsewhere: the list follows; and the open
            // scene's campaign state (trackers, facts, persona, cast) may have changed.
            crate::engine::Event::Author(crate::scene::author::AuthorEvent::Tree { tree }) => {
                outbox.push(Command::Scene(SceneCommand::List));
                let still_there = self.selected.as_ref().is_some_and(|id| {
                    tree.worlds.iter().flat_map(|w| &w.campaigns).flat_map(|c| &c.arcs).flat_map(|a| &a.scenes).any(|s| &s.id == id)
                });
                if still_there {
                    self.refresh(outbox);
                }
            }
            // A campaign's shares saved or reset: the preview says which its rounds use.
            crate::engine::Event::Author(crate::scene::author::AuthorEvent::Authored { action, .. }) if action.contains("budgets") => {
                if let Some(scene) = self.selected.clone() {
                    outbox.push(self.budgets.preview_command(&scene));
                }
            }
            _ => {}
        }
    }

    fn show(&mut self, kind: super::PanelKind, ui: &mut egui::Ui, outbox: &mut Vec<crate::engine::Command>) {
        match kind {
            super::PanelKind::Budgets => self.show_budgets(ui, outbox),
            _ => self.show_scene(ui, outbox),
        }
    }
}
