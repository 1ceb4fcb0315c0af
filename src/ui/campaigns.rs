//! The Campaigns panel: the library as a tree of worlds → campaigns → arcs → scenes,
//! and beside it the selected node with everything a game master sets by hand — names,
//! descriptions and notes, a campaign's cast (and who they are here: its overrides) and
//! persona, the personas themselves, attached lorebooks, trackers, facts and in-fiction
//! time, new children, delete with confirmation, and a scene's transcript export.

use crate::engine::{Command, Event};
use crate::identity::IdentityEvent;
use crate::interop::{CharacterSummary, InteropCommand, InteropEvent, LorebookSummary};
use crate::scene::author::{AuthorCommand, AuthorEvent, TranscriptFormat};
use crate::scene::authoring::{CampaignNode, Edit, Level, LoreLevel, StateEdit, Tree};
use crate::scene::{SceneCommand, SceneEvent};
use egui::RichText;

/// The node shown on the right.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Selected {
    level: Level,
    id: String,
}

/// Text being typed, kept across frames.
#[derive(Debug, Default)]
struct Drafts {
    world_name: String,
    name: String,
    description: String,
    notes: String,
    /// The node the name/description/notes fields were filled from, and what they were
    /// filled with (typed text differs from it until saved).
    loaded_for: Option<Selected>,
    loaded: (String, String, String),
    /// Name, description and notes typed in a node and not saved, kept when another node
    /// is opened and given back when it is opened again (with what they were typed over).
    unsaved: std::collections::BTreeMap<String, ((String, String, String), (String, String, String))>,
    child_name: String,
    persona_name: String,
    persona_description: String,
    /// The persona open in the editor (its id), and its name and description as typed.
    persona_edit: Option<String>,
    persona_edit_name: String,
    persona_edit_description: String,
    /// The picture file typed (or chosen) for the persona open in the editor.
    persona_image: String,
    /// A persona whose delete waits for a second click.
    persona_delete: Option<String>,
    /// The campaign's in-fiction minutes, as typed.
    minutes: String,
    tracker_name: String,
    tracker_value: String,
    fact: String,
    export_path: String,
    character_filter: String,
    /// A cast member whose Remove was clicked, asking "Take them out?" before they go.
    cast_remove: Option<String>,
    lorebook_filter: String,
    /// A cast member whose sheet is being overridden for this campaign, and the
    /// fields typed for it (by [`OVERRIDE_FIELDS`]).
    override_for: Option<String>,
    override_texts: std::collections::BTreeMap<String, String>,
    /// The campaign's override of that member as the editor opened with it: a field left
    /// as it was is not sent, so saving one field never touches the others.
    override_loaded: std::collections::BTreeMap<String, String>,
}

impl Drafts {
    /// The name, description and notes as typed.
    fn typed(&self) -> (String, String, String) {
        (self.name.clone(), self.description.clone(), self.notes.clone())
    }
}

/// The key of a node's unsaved text.
fn node_key(node: &Selected) -> String {
    format!("{:?}:{}", node.level, node.id)
}

/// The sheet fields a campaign override sets in the editor, with their labels (those
/// `campaign override` takes).
const OVERRIDE_FIELDS: [(&str, &str); 4] =
    [("name", "Name here"), ("description", "Description here"), ("personality", "Personality here"), ("scenario", "Scenario here")];

/// Library items offered at once (type in the filter to find the others).
const LIST_LIMIT: usize = 30;

#[derive(Default)]
pub struct CampaignsPanel {
    tree: Tree,
    personas: Vec<crate::character::Persona>,
    characters: Vec<CharacterSummary>,
    lorebooks: Vec<LorebookSummary>,
    /// Characters whose identity run has not finished, by run id: not in the library yet,
    /// so "Find character" says why typing their name offers no Add.
    developing: std::collections::BTreeMap<String, String>,
    selected: Option<Selected>,
    drafts: Drafts,
    /// A delete the engine refused until confirmed: the node and what would go.
    confirm: Option<(Selected, String)>,
    status: Option<Result<String, String>>,
    open_scene: Option<String>,
    transcript_picker: super::platform::FilePicker,
    persona_image_picker: super::platform::FilePicker,
}

fn author(command: AuthorCommand) -> Command {
    Command::Scene(SceneCommand::Author(command))
}

impl CampaignsPanel {
    pub fn startup() -> Vec<Command> {
        vec![author(AuthorCommand::Tree), author(AuthorCommand::Personas), Command::Interop(InteropCommand::List)]
    }

    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    /// What the last command said: a confirmation, or why it was refused.
    pub fn status(&self) -> Option<&Result<String, String>> {
        self.status.as_ref()
    }

    /// A scene the user asked to play (the app opens it in the Scene panel).
    pub fn take_open_scene(&mut self) -> Option<String> {
        self.open_scene.take()
    }

    pub fn apply(&mut self, event: &Event, outbox: &mut Vec<Command>) {
        match event {
            Event::Author(AuthorEvent::Tree { tree }) => {
                self.tree = (**tree).clone();
                // An override editor nobody has typed in yet follows the override as the
                // library now has it (set by another process since this window read it).
                if let (Some(character), Some(selected)) = (self.drafts.override_for.clone(), self.selected.clone())
                    && selected.level == Level::Campaign
                    && self.changed_override_fields().is_empty()
                {
                    self.open_override(&selected.id, &character);
                }
                // What was selected is gone (deleted here, or by another process): its
                // settings are not left on screen to save into nothing.
                if self.selected.as_ref().is_some_and(|s| !self.exists(s)) {
                    self.selected = None;
                    self.confirm = None;
                }
            }
            Event::Author(AuthorEvent::Personas { personas }) => self.personas = personas.clone(),
            Event::Author(AuthorEvent::Authored { action, kind, name, impact, .. }) => {
                let gone = impact.as_ref().filter(|i| !i.is_empty()).map(|i| format!(" with {}", i.describe())).unwrap_or_default();
                self.status = Some(Ok(format!("{}{gone}", capitalised(&crate::scene::author::authored_sentence(action, kind, name)))));
                if kind == "persona" {
                    outbox.push(author(AuthorCommand::Personas));
                }
                // The picture is in: its path is typed no more (one refused stays, to correct).
                if kind == "persona" && action == "pictured" {
                    self.drafts.persona_image.clear();
                }
                if action == "deleted" {
                    self.confirm = None;
                    if self.selected.as_ref().is_some_and(|s| !self.exists(s)) {
                        self.selected = None;
                    }
                }
            }
            Event::Author(AuthorEvent::TranscriptExported { path, messages, .. }) => {
                self.status = Some(Ok(format!("Wrote {messages} messages to {}", path.display())));
            }
            Event::Scene(SceneEvent::Error { scene_id: None, message, .. }) => {
                if let Some(selected) = self.selected.clone().filter(|_| message.contains("confirm to delete")) {
                    self.confirm = Some((selected, message.clone()));
                }
                self.status = Some(Err(message.clone()));
            }
            // The tree's round counts follow rounds played here and elsewhere.
            // and worlds, campaigns, arcs and scenes another process made, renamed or
            // deleted (the scene watch's tree, [`crate::scene::records::SceneStanding`]).
            Event::Scene(SceneEvent::RoundCompleted { .. } | SceneEvent::ChangedElsewhere { .. }) => outbox.push(author(AuthorCommand::Tree)),
            // Personas (and characters: the Library panel lists them again) made elsewhere.
            Event::Companion(crate::companion::CompanionEvent::ChangedElsewhere { .. }) => outbox.push(author(AuthorCommand::Personas)),
            Event::Identity(IdentityEvent::Runs { runs }) => {
                self.developing =
                    runs.iter().filter(|r| r.status != crate::identity::records::RunStatus::Completed).map(|r| (r.id.clone(), r.name.clone())).collect();
            }
            Event::Identity(IdentityEvent::RunStarted { character_id, name, .. }) => {
                self.developing.insert(character_id.clone(), name.clone());
            }
            Event::Identity(IdentityEvent::CharacterComplete { character_id, .. }) => {
                self.developing.remove(character_id);
            }
            Event::Interop(InteropEvent::Library { characters, lorebooks }) => {
                self.characters = characters.clone();
                self.lorebooks = lorebooks.clone();
            }
            _ => {}
        }
    }

    fn exists(&self, s: &Selected) -> bool {
        self.tree.worlds.iter().any(|w| {
            (s.level == Level::World && w.id == s.id)
                || w.campaigns.iter().any(|c| {
                    (s.level == Level::Campaign && c.id == s.id)
                        || c.arcs.iter().any(|a| (s.level == Level::Arc && a.id == s.id) || a.scenes.iter().any(|x| s.level == Level::Scene && x.id == s.id))
                })
        })
    }

    /// Name, description and notes of the selected node (arcs have no description).
    fn texts(&self, s: &Selected) -> (String, String, String) {
        for w in &self.tree.worlds {
            if s.level == Level::World && w.id == s.id {
                return (w.name.clone(), w.description.clone(), w.notes.clone());
            }
            for c in &w.campaigns {
                if s.level == Level::Campaign && c.id == s.id {
                    return (c.name.clone(), c.description.clone(), c.notes.clone());
                }
                for a in &c.arcs {
                    if s.level == Level::Arc && a.id == s.id {
                        return (a.name.clone(), String::new(), a.notes.clone());
                    }
                    for x in &a.scenes {
                        if s.level == Level::Scene && x.id == s.id {
                            return (x.name.clone(), x.description.clone(), x.notes.clone());
                        }
                    }
                }
            }
        }
        Default::default()
    }

    fn campaign(&self, id: &str) -> Option<&CampaignNode> {
        self.tree.worlds.iter().flat_map(|w| &w.campaigns).find(|c| c.id == id)
    }

    /// The fields of `character` the world of campaign `id` overrides.
    fn world_override(&self, id: &str, character: &str) -> std::collections::BTreeMap<String, String> {
        let world = self.tree.worlds.iter().find(|w| w.campaigns.iter().any(|c| c.id == id));
        world.and_then(|w| w.overrides.iter().find(|o| o.character_id == character)).map(|o| o.fields.clone()).unwrap_or_default()
    }

    /// Open the override editor of `character` in campaign `id`, filled with the
    /// campaign's override as it stands.
    fn open_override(&mut self, id: &str, character: &str) {
        let current = self
            .campaign(id)
            .and_then(|c| c.overrides.iter().find(|o| o.character_id == character))
            .map(|o| o.fields.clone())
            .unwrap_or_default();
        self.drafts.override_texts =
            OVERRIDE_FIELDS.iter().map(|(field, _)| (field.to_string(), current.get(*field).cloned().unwrap_or_default())).collect();
        self.drafts.override_loaded = current;
        self.drafts.override_for = Some(character.to_string());
    }

    /// The fields the user changed in the override editor: a field emptied is sent empty
    /// (its override removed), one left as it opened is not sent at all.
    fn changed_override_fields(&self) -> std::collections::BTreeMap<String, String> {
        self.drafts
            .override_texts
            .iter()
            .filter(|(field, text)| text.trim() != self.drafts.override_loaded.get(*field).map(|t| t.trim()).unwrap_or(""))
            .map(|(field, text)| (field.clone(), text.trim().to_string()))
            .collect()
    }

    pub fn show(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        ui.heading("Campaigns");
        // The outcome line keeps its row while empty, so the first outcome shown does not
        // push every control below it down under the pointer.
        match &self.status {
            None => {
                ui.label(" ");
            }
            status => super::status_line(ui, status),
        }
        // Side by side when the tile is wide; in a narrow one the tree stands above the
        // settings, so the settings' buttons are not pushed off the tile's edge.
        if ui.available_width() >= 640.0 {
            ui.horizontal_top(|ui| {
                ui.vertical(|ui| {
                    ui.set_width(300.0);
                    self.show_tree(ui, outbox);
                });
                ui.separator();
                ui.vertical(|ui| {
                    egui::ScrollArea::vertical().id_salt("campaigns_detail").show(ui, |ui| self.show_detail(ui, outbox));
                });
            });
        } else {
            let tree_height = (ui.available_height() * 0.4).max(120.0);
            ui.allocate_ui(egui::vec2(ui.available_width(), tree_height), |ui| self.show_tree(ui, outbox));
            ui.separator();
            egui::ScrollArea::vertical().id_salt("campaigns_detail").show(ui, |ui| self.show_detail(ui, outbox));
        }
    }

    /// A name field whose button (or Enter) makes the thing named.
    fn name_field(ui: &mut egui::Ui, label: &str, text: &mut String, width: f32, salt: &str, button: &str) -> bool {
        ui.horizontal_wrapped(|ui| {
            let l = ui.label(label);
            let field = ui.add(egui::TextEdit::singleline(text).desired_width(width).id_salt(salt)).labelled_by(l.id);
            let entered = field.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
            let ready = !text.trim().is_empty();
            (ui.add_enabled(ready, egui::Button::new(button)).clicked() || entered) && ready
        })
        .inner
    }

    fn show_tree(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        if Self::name_field(ui, "New world", &mut self.drafts.world_name, 140.0, "campaigns_world_name", "Create world") {
            let name = std::mem::take(&mut self.drafts.world_name).trim().to_string();
            outbox.push(author(AuthorCommand::NewWorld { name, description: String::new(), notes: String::new() }));
        }
        if self.tree.worlds.is_empty() {
            ui.label("No worlds yet: create one to start a campaign.");
        }
        let mut clicked = None;
        egui::ScrollArea::vertical().id_salt("campaigns_tree").show(ui, |ui| {
            for w in &self.tree.worlds {
                let node = |level, id: &str| Selected { level, id: id.to_string() };
                egui::CollapsingHeader::new(format!("{} (world)", w.name)).id_salt(("world", &w.id)).default_open(true).show(ui, |ui| {
                    if ui.selectable_label(self.selected == Some(node(Level::World, &w.id)), format!("Settings of world {}", w.name)).clicked() {
                        clicked = Some(node(Level::World, &w.id));
                    }
                    for c in &w.campaigns {
                        egui::CollapsingHeader::new(format!("Campaign {}", c.name)).id_salt(("campaign", &c.id)).default_open(true).show(ui, |ui| {
                            if ui.selectable_label(self.selected == Some(node(Level::Campaign, &c.id)), format!("Settings of {}", c.name)).clicked() {
                                clicked = Some(node(Level::Campaign, &c.id));
                            }
                            for a in &c.arcs {
                                if ui.selectable_label(self.selected == Some(node(Level::Arc, &a.id)), format!("Arc {}", a.name)).clicked() {
                                    clicked = Some(node(Level::Arc, &a.id));
                                }
                                for s in &a.scenes {
                                    let text = format!("    Scene {} ({} rounds)", s.name, s.rounds);
                                    if ui.selectable_label(self.selected == Some(node(Level::Scene, &s.id)), text).clicked() {
                                        clicked = Some(node(Level::Scene, &s.id));
                                    }
                                }
                            }
                        });
                    }
                });
            }
        });
        if let Some(node) = clicked {
            self.select(node);
        }
        let _ = outbox;
    }

    /// Select a node by its kind and name (for tests and links).
    pub fn select_named(&mut self, level: Level, name: &str) -> bool {
        let mut found = None;
        for w in &self.tree.worlds {
            if level == Level::World && w.name == name {
                found = Some(w.id.clone());
            }
            for c in &w.campaigns {
                if level == Level::Campaign && c.name == name {
                    found = Some(c.id.clone());
                }
                for a in &c.arcs {
                    if level == Level::Arc && a.name == name {
                        found = Some(a.id.clone());
                    }
                    for s in &a.scenes {
                        if level == Level::Scene && s.name == name {
                            found = Some(s.id.clone());
                        }
                    }
                }
            }
        }
        match found {
            Some(id) => {
                self.select(Selected { level, id });
                true
            }
            None => false,
        }
    }

    fn select(&mut self, node: Selected) {
        self.confirm = None;
        self.selected = Some(node);
    }

    fn show_detail(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        let Some(selected) = self.selected.clone() else {
            ui.label("Select a world, campaign, arc or scene.");
            return;
        };
        let stored = self.texts(&selected);
        if self.drafts.loaded_for.as_ref() != Some(&selected) {
            // Clicking another node does not throw away what was typed in this one.
            if let Some(left) = self.drafts.loaded_for.take() {
                let typed = self.drafts.typed();
                if typed != self.drafts.loaded && self.exists(&left) {
                    self.drafts.unsaved.insert(node_key(&left), (typed, std::mem::take(&mut self.drafts.loaded)));
                }
            }
            let (typed, loaded) = self.drafts.unsaved.remove(&node_key(&selected)).unwrap_or_else(|| (stored.clone(), stored.clone()));
            (self.drafts.name, self.drafts.description, self.drafts.notes) = typed;
            self.drafts.loaded = loaded;
            self.drafts.child_name.clear();
            // An override editor belongs to the campaign it was opened in.
            self.drafts.override_for = None;
            self.drafts.loaded_for = Some(selected.clone());
        }
        // Saved (here or elsewhere), the fields are clean again; untouched, they follow
        // the node as the library now has it.
        let typed = self.drafts.typed();
        if typed == stored {
            self.drafts.loaded = stored;
        } else if typed == self.drafts.loaded {
            (self.drafts.name, self.drafts.description, self.drafts.notes) = stored.clone();
            self.drafts.loaded = stored;
        }
        let level = selected.level;
        ui.strong(format!("{} {}", capitalised(level.label()), self.drafts.name));
        text_row(ui, "Name", &mut self.drafts.name, false);
        if matches!(level, Level::World | Level::Campaign | Level::Scene) {
            text_row(ui, "Description", &mut self.drafts.description, true);
        }
        text_row(ui, "Notes", &mut self.drafts.notes, true);
        ui.horizontal(|ui| {
            if ui.button("Save").clicked() {
                let edit = Edit {
                    name: Some(self.drafts.name.clone()),
                    description: (level != Level::Arc).then(|| self.drafts.description.clone()),
                    notes: Some(self.drafts.notes.clone()),
                };
                outbox.push(author(AuthorCommand::Edit { level, key: selected.id.clone(), edit }));
            }
            if ui.button("Delete").clicked() {
                outbox.push(author(AuthorCommand::Delete { level, key: selected.id.clone(), confirmed: false }));
            }
            if self.drafts.typed() != self.drafts.loaded {
                ui.colored_label(ui.visuals().warn_fg_color, "Not saved yet");
                if ui.button("Revert changes").on_hover_text("Put back the name, description and notes as saved").clicked() {
                    (self.drafts.name, self.drafts.description, self.drafts.notes) = self.texts(&selected);
                    self.drafts.loaded = self.texts(&selected);
                }
            }
        });
        if let Some((node, message)) = self.confirm.clone().filter(|(node, _)| *node == selected) {
            ui.colored_label(ui.visuals().warn_fg_color, message);
            if ui.button("Confirm delete").clicked() {
                outbox.push(author(AuthorCommand::Delete { level: node.level, key: node.id, confirmed: true }));
            }
        }
        ui.separator();
        match level {
            Level::World => {
                self.child_form(ui, outbox, "New campaign", "Create campaign", |name| {
                    author(AuthorCommand::NewCampaign { world: selected.id.clone(), name, description: String::new(), notes: String::new() })
                });
                self.lore_form(ui, outbox, LoreLevel::World, &selected.id);
            }
            Level::Campaign => self.show_campaign(ui, outbox, &selected.id),
            // A new scene starts with the campaign's cast, everyone present.
            Level::Arc => self.child_form(ui, outbox, "New scene", "Create scene", |name| {
                Command::Scene(SceneCommand::New {
                    arc: selected.id.clone(),
                    name,
                    description: String::new(),
                    notes: String::new(),
                    cast: Vec::new(),
                    active: None,
                })
            }),
            Level::Scene => self.show_scene(ui, outbox, &selected.id),
        }
    }

    fn child_form(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>, label: &str, button: &str, make: impl FnOnce(String) -> Command) {
        if Self::name_field(ui, label, &mut self.drafts.child_name, 180.0, "campaigns_child_name", button) {
            outbox.push(make(std::mem::take(&mut self.drafts.child_name).trim().to_string()));
        }
    }

    fn lore_form(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>, level: LoreLevel, owner: &str) {
        let attached: Vec<(String, String)> = match level {
            LoreLevel::World => self.tree.worlds.iter().find(|w| w.id == owner).map(|w| w.lorebooks.clone()).unwrap_or_default(),
            LoreLevel::Campaign => self.campaign(owner).map(|c| c.lorebooks.clone()).unwrap_or_default(),
            // Characters' books are attached in the Chat panel.
            LoreLevel::Character => Vec::new(),
        };
        ui.label(RichText::new("Lorebooks").strong());
        for (id, name) in &attached {
            ui.horizontal(|ui| {
                ui.label(name);
                if ui.small_button(format!("Detach {name}")).clicked() {
                    outbox.push(author(AuthorCommand::Detach { lorebook: id.clone(), level, owner: owner.to_string() }));
                }
            });
        }
        let filter = self.drafts.lorebook_filter.to_lowercase();
        let candidates: Vec<&LorebookSummary> = self
            .lorebooks
            .iter()
            .filter(|b| !attached.iter().any(|(id, _)| *id == b.id) && b.name.to_lowercase().contains(&filter))
            .take(LIST_LIMIT)
            .collect();
        if self.lorebooks.is_empty() {
            ui.weak("No lorebooks in the library yet: import World Info or lorebook files in the Library panel.");
        } else {
            ui.horizontal_wrapped(|ui| {
                text_inline(ui, "Find lorebook", &mut self.drafts.lorebook_filter, 120.0);
                for b in candidates {
                    if ui.small_button(format!("Attach {}", b.name)).on_hover_text(super::counted(b.entries as u64, "entry", "entries")).clicked() {
                        outbox.push(author(AuthorCommand::Attach { lorebook: b.id.clone(), level, owner: owner.to_string() }));
                    }
                }
            });
        }
    }

    fn show_campaign(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>, id: &str) {
        let Some(campaign) = self.campaign(id).cloned() else { return };
        self.child_form(ui, outbox, "New arc", "Create arc", |name| {
            author(AuthorCommand::NewArc { campaign: id.to_string(), name, notes: String::new() })
        });

        ui.label(RichText::new("Persona (who the user plays)").strong());
        ui.label(campaign.persona.as_ref().map(|p| format!("{}: {}", p.name, p.description)).unwrap_or_else(|| "none".into()));
        ui.horizontal_wrapped(|ui| {
            for p in self.personas.iter().filter(|p| campaign.persona.as_ref().is_none_or(|c| c.id != p.id)).take(LIST_LIMIT) {
                if ui.small_button(format!("Play as {}", p.name)).on_hover_text(&p.description).clicked() {
                    outbox.push(author(AuthorCommand::UsePersona { campaign: id.to_string(), persona: Some(p.id.clone()) }));
                }
            }
            if campaign.persona.is_some() && ui.small_button("Play as nobody in particular").clicked() {
                outbox.push(author(AuthorCommand::UsePersona { campaign: id.to_string(), persona: None }));
            }
        });
        ui.horizontal_wrapped(|ui| {
            text_inline(ui, "Persona name", &mut self.drafts.persona_name, 120.0);
            text_inline(ui, "Persona description", &mut self.drafts.persona_description, 220.0);
            if ui.add_enabled(!self.drafts.persona_name.trim().is_empty(), egui::Button::new("Create persona")).clicked() {
                let name = std::mem::take(&mut self.drafts.persona_name);
                let description = std::mem::take(&mut self.drafts.persona_description);
                outbox.push(author(AuthorCommand::NewPersona { name, description }));
            }
        });
        self.persona_list(ui, outbox);

        ui.label(RichText::new("Cast").strong());
        // The add controls stand above the members: a member added is listed below them,
        // so a second click on the same spot cannot land on a member's Remove.
        self.cast_candidates(ui, outbox, id, &campaign.cast);
        // A removal waiting for its answer, dropped once that member is gone.
        if self.drafts.cast_remove.as_ref().is_some_and(|c| !campaign.cast.iter().any(|(id, _)| id == c)) {
            self.drafts.cast_remove = None;
        }
        for (cid, name) in &campaign.cast {
            let editing = self.drafts.override_for.as_deref() == Some(cid.as_str());
            ui.horizontal(|ui| {
                ui.label(name);
                if self.drafts.cast_remove.as_deref() == Some(cid.as_str()) {
                    // The answers sit right of the question, not where Remove was: a
                    // double click on Remove only asks.
                    ui.colored_label(ui.visuals().warn_fg_color, format!("Take {name} out of the cast?"));
                    if ui.small_button(format!("Keep {name}")).clicked() {
                        self.drafts.cast_remove = None;
                    }
                    if ui.small_button(format!("Yes, remove {name}")).on_hover_text("The scenes they played keep what they said").clicked() {
                        outbox.push(author(AuthorCommand::CastRemove { campaign: id.to_string(), character: cid.clone() }));
                        self.drafts.cast_remove = None;
                    }
                } else if ui.small_button(format!("Remove {name}")).clicked() {
                    self.drafts.cast_remove = Some(cid.clone());
                }
                if !editing && ui.small_button(format!("Override {name} here")).on_hover_text("Who they are in this campaign: fields over their card's").clicked() {
                    self.open_override(id, cid);
                    // Read again: another process (the CLI, a server) may have changed it.
                    outbox.push(author(AuthorCommand::Tree));
                }
            });
            // What is in effect, so an override set elsewhere (the CLI, the world) is seen.
            let world = self.world_override(id, cid);
            let here = campaign.overrides.iter().find(|o| o.character_id == *cid).map(|o| o.fields.clone()).unwrap_or_default();
            for (scope, fields) in [("in this campaign", &here), ("in the world", &world)] {
                if !fields.is_empty() {
                    let listed: Vec<String> = fields.iter().map(|(f, t)| format!("{f}: {}", super::short(t))).collect();
                    ui.weak(format!("Overridden {scope}: {}", listed.join("; ")));
                }
            }
            if editing {
                self.override_editor(ui, outbox, id, cid, &world);
            }
        }
        self.lore_form(ui, outbox, LoreLevel::Campaign, id);

        ui.label(
            RichText::new(format!("State ({} minutes in: {})", campaign.elapsed_minutes, crate::scene::envelope::said_duration(campaign.elapsed_minutes)))
                .strong(),
        );
        // The in-fiction clock by hand (`campaign time`): a time skip, or a correction.
        ui.horizontal_wrapped(|ui| {
            let l = ui.label("In-fiction minutes");
            let hint = campaign.elapsed_minutes.to_string();
            ui.add(egui::TextEdit::singleline(&mut self.drafts.minutes).hint_text(hint).desired_width(100.0).id_salt("campaigns_minutes"))
                .labelled_by(l.id);
            let minutes = self.drafts.minutes.trim().parse::<u64>().ok();
            if !self.drafts.minutes.trim().is_empty() && minutes.is_none() {
                ui.colored_label(ui.visuals().warn_fg_color, "a whole number of minutes since the campaign began");
            }
            let set = ui.add_enabled(minutes.is_some(), egui::Button::new("Set time")).on_hover_text("Minutes since the campaign began");
            if let (true, Some(minutes)) = (set.clicked(), minutes) {
                self.drafts.minutes.clear();
                outbox.push(author(AuthorCommand::EditState { campaign: id.to_string(), edit: StateEdit::Elapsed { minutes } }));
            }
        });
        for (name, value) in &campaign.trackers {
            ui.horizontal(|ui| {
                ui.label(format!("{name} = {value}"));
                if ui.small_button(format!("Remove tracker {name}")).clicked() {
                    let edit = StateEdit::Tracker { name: name.clone(), value: None };
                    outbox.push(author(AuthorCommand::EditState { campaign: id.to_string(), edit }));
                }
            });
        }
        ui.horizontal_wrapped(|ui| {
            text_inline(ui, "Tracker", &mut self.drafts.tracker_name, 120.0);
            text_inline(ui, "Value", &mut self.drafts.tracker_value, 120.0);
            if ui.add_enabled(!self.drafts.tracker_name.trim().is_empty(), egui::Button::new("Set tracker")).clicked() {
                let text = std::mem::take(&mut self.drafts.tracker_value);
                let value = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
                let edit = StateEdit::Tracker { name: std::mem::take(&mut self.drafts.tracker_name), value: Some(value) };
                outbox.push(author(AuthorCommand::EditState { campaign: id.to_string(), edit }));
            }
        });
        for fact in &campaign.facts {
            ui.horizontal(|ui| {
                ui.label(format!("• {fact}"));
                if ui.small_button("Remove fact").clicked() {
                    outbox.push(author(AuthorCommand::EditState { campaign: id.to_string(), edit: StateEdit::RemoveFact { fact: fact.clone() } }));
                }
            });
        }
        ui.horizontal_wrapped(|ui| {
            text_inline(ui, "Fact", &mut self.drafts.fact, 260.0);
            if ui.add_enabled(!self.drafts.fact.trim().is_empty(), egui::Button::new("Add fact")).clicked() {
                let fact = std::mem::take(&mut self.drafts.fact);
                outbox.push(author(AuthorCommand::EditState { campaign: id.to_string(), edit: StateEdit::AddFact { fact } }));
            }
        });
    }

    /// "Find character" and an Add button for each character of the library not in the
    /// campaign's `cast` whose name holds what was typed.
    fn cast_candidates(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>, id: &str, cast: &[(String, String)]) {
        let filter = self.drafts.character_filter.to_lowercase();
        let candidates: Vec<&CharacterSummary> = self
            .characters
            .iter()
            .filter(|c| !cast.iter().any(|(id, _)| *id == c.id) && c.name.to_lowercase().contains(&filter))
            .take(LIST_LIMIT)
            .collect();
        if self.characters.is_empty() {
            ui.weak("No characters in the library yet: import cards in the Library panel.");
        }
        ui.horizontal_wrapped(|ui| {
            text_inline(ui, "Find character", &mut self.drafts.character_filter, 120.0);
            for c in candidates {
                if ui.small_button(format!("Add {}", c.name)).clicked() {
                    outbox.push(author(AuthorCommand::CastAdd { campaign: id.to_string(), character: c.id.clone() }));
                }
            }
        });
        // A name typed of a character still being developed: there is nobody to add yet.
        if !filter.trim().is_empty() {
            let library = |run: &String| self.characters.iter().any(|c| c.id == *run);
            for (_, name) in self.developing.iter().filter(|(run, name)| !library(run) && name.to_lowercase().contains(filter.trim())) {
                ui.weak(format!("{name} is still being developed: castable once their run in the Waves panel completes."));
            }
        }
    }

    /// Every persona, each to edit (name, description) or delete (a second click; the
    /// campaigns and chats that play it then play nobody in particular).
    fn persona_list(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        if self.personas.is_empty() {
            return;
        }
        egui::CollapsingHeader::new(format!("Personas ({})", self.personas.len())).id_salt("campaigns_personas").show(ui, |ui| {
            for p in self.personas.clone() {
                ui.horizontal_wrapped(|ui| {
                    ui.label(super::short(&p.name)).on_hover_text(&p.description);
                    if ui.small_button(format!("Edit persona {}", p.name)).clicked() {
                        self.drafts.persona_edit = Some(p.id.clone());
                        self.drafts.persona_edit_name = p.name.clone();
                        self.drafts.persona_edit_description = p.description.clone();
                        self.drafts.persona_image.clear();
                    }
                    if self.drafts.persona_delete.as_deref() == Some(p.id.as_str()) {
                        ui.colored_label(ui.visuals().warn_fg_color, "campaigns and chats that play it will play nobody in particular");
                        if ui.small_button(format!("Confirm delete of persona {}", p.name)).clicked() {
                            outbox.push(author(AuthorCommand::DeletePersona { persona: p.id.clone() }));
                            self.drafts.persona_delete = None;
                        }
                        if ui.small_button("Keep persona").clicked() {
                            self.drafts.persona_delete = None;
                        }
                    } else if ui.small_button(format!("Delete persona {}", p.name)).clicked() {
                        self.drafts.persona_delete = Some(p.id.clone());
                    }
                });
                if self.drafts.persona_edit.as_deref() != Some(p.id.as_str()) {
                    continue;
                }
                ui.indent(("persona_edit", &p.id), |ui| {
                    ui.horizontal(|ui| {
                        let l = ui.label("Persona's name");
                        ui.add(egui::TextEdit::singleline(&mut self.drafts.persona_edit_name).desired_width(200.0).id_salt("campaigns_persona_edit_name"))
                            .labelled_by(l.id);
                    });
                    ui.horizontal(|ui| {
                        let l = ui.label("Persona's description");
                        let width = (ui.available_width() - 8.0).clamp(120.0, 420.0);
                        let edit = egui::TextEdit::multiline(&mut self.drafts.persona_edit_description)
                            .desired_rows(2)
                            .desired_width(width)
                            .id_salt("campaigns_persona_edit_description");
                        ui.add(edit).labelled_by(l.id);
                    });
                    self.persona_image_row(ui, outbox, &p);
                    ui.horizontal_wrapped(|ui| {
                        // Only what changed is sent, as `persona edit` takes it.
                        let name = Some(self.drafts.persona_edit_name.trim().to_string()).filter(|n| *n != p.name);
                        let description = Some(self.drafts.persona_edit_description.clone()).filter(|d| *d != p.description);
                        let ready = (name.is_some() || description.is_some()) && !self.drafts.persona_edit_name.trim().is_empty();
                        if ui.add_enabled(ready, egui::Button::new("Save persona")).clicked() {
                            outbox.push(author(AuthorCommand::EditPersona { persona: p.id.clone(), name, description }));
                            self.drafts.persona_edit = None;
                        }
                        if ui.button("Close persona").clicked() {
                            self.drafts.persona_edit = None;
                        }
                    });
                });
            }
        });
    }

    /// The persona's picture, as `persona image` sets it: a PNG file typed or chosen, read
    /// and checked to decode by the engine (a file that is no PNG image is refused, and the
    /// status line says why), or taken away.
    fn persona_image_row(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>, persona: &crate::character::Persona) {
        ui.horizontal_wrapped(|ui| {
            text_inline(ui, "Persona's picture (PNG)", &mut self.drafts.persona_image, 240.0);
            let request = || super::platform::FileRequest::open("A picture of the persona", false).filter("PNG image", &["png"]);
            if let Some(path) = self.persona_image_picker.button(ui, "Browse…", request).and_then(|p| p.into_iter().next()) {
                self.drafts.persona_image = path.display().to_string();
            }
            let typed = !self.drafts.persona_image.trim().is_empty();
            if ui.add_enabled(typed, egui::Button::new("Set picture")).on_hover_text("Shown beside the chat when you play this persona").clicked() {
                let path = super::platform::typed_path(&self.drafts.persona_image);
                outbox.push(author(AuthorCommand::PersonaImage { persona: persona.id.clone(), path: Some(path) }));
            }
            if ui.button("Remove picture").clicked() {
                outbox.push(author(AuthorCommand::PersonaImage { persona: persona.id.clone(), path: None }));
            }
        });
    }

    /// The campaign override of cast member `character`, one field a row so it fits a
    /// narrow tile with its buttons on screen; an empty field shows what the world's
    /// override (else the card) gives instead.
    fn override_editor(
        &mut self,
        ui: &mut egui::Ui,
        outbox: &mut Vec<Command>,
        id: &str,
        character: &str,
        world: &std::collections::BTreeMap<String, String>,
    ) {
        ui.indent(("override", character), |ui| {
            for (field, label) in OVERRIDE_FIELDS {
                let text = self.drafts.override_texts.entry(field.to_string()).or_default();
                let hint = world.get(field).map(|t| format!("the world's: {}", super::short(t))).unwrap_or_else(|| "the card's".into());
                ui.horizontal(|ui| {
                    let l = ui.label(label);
                    let width = (ui.available_width() - 8.0).clamp(120.0, 420.0);
                    let edit = egui::TextEdit::singleline(text).hint_text(hint).desired_width(width).id_salt(format!("campaigns_{label}"));
                    ui.add(edit).labelled_by(l.id);
                });
            }
            ui.horizontal_wrapped(|ui| {
                let changed = self.changed_override_fields();
                let save = ui
                    .add_enabled(!changed.is_empty(), egui::Button::new("Save override"))
                    .on_hover_text("Saves the fields you changed; a field you empty goes back to the world's or the card's");
                if save.clicked() {
                    outbox.push(author(AuthorCommand::Override {
                        level: Level::Campaign,
                        owner: id.to_string(),
                        character: character.to_string(),
                        fields: changed,
                    }));
                    self.drafts.override_for = None;
                }
                if ui.button("Close override").clicked() {
                    self.drafts.override_for = None;
                }
            });
        });
    }

    fn show_scene(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>, id: &str) {
        if ui.button("Play in the Scene panel").clicked() {
            self.open_scene = Some(id.to_string());
        }
        ui.horizontal(|ui| {
            text_inline(ui, "Transcript file", &mut self.drafts.export_path, 280.0);
            let request = || {
                super::platform::FileRequest::save("Export the transcript", self.drafts.export_path.trim())
                    .filter("Markdown or JSON", &["md", "json"])
            };
            if let Some(path) = self.transcript_picker.button(ui, "Browse…", request).and_then(|p| p.into_iter().next()) {
                self.drafts.export_path = path.display().to_string();
            }
            let typed = !self.drafts.export_path.trim().is_empty();
            let path = super::platform::typed_path(&self.drafts.export_path);
            if ui.add_enabled(typed, egui::Button::new("Export Markdown")).clicked() {
                outbox.push(author(AuthorCommand::ExportTranscript { scene: id.to_string(), format: TranscriptFormat::Markdown, out: path.clone() }));
            }
            if ui.add_enabled(typed, egui::Button::new("Export JSON")).clicked() {
                outbox.push(author(AuthorCommand::ExportTranscript { scene: id.to_string(), format: TranscriptFormat::Json, out: path }));
            }
        });
    }
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// A labelled text field on its own row.
fn text_row(ui: &mut egui::Ui, label: &str, text: &mut String, multiline: bool) {
    ui.horizontal(|ui| {
        let l = ui.label(label);
        let salt = format!("campaigns_{label}");
        let edit = if multiline {
            egui::TextEdit::multiline(text).desired_rows(2).desired_width(420.0).id_salt(salt)
        } else {
            egui::TextEdit::singleline(text).desired_width(420.0).id_salt(salt)
        };
        ui.add(edit).labelled_by(l.id);
    });
}

/// A labelled text field inside a row.
fn text_inline(ui: &mut egui::Ui, label: &str, text: &mut String, width: f32) {
    let l = ui.label(label);
    ui.add(egui::TextEdit::singleline(text).desired_width(width).id_salt(format!("campaigns_{label}"))).labelled_by(l.id);
}

impl super::Panel for CampaignsPanel {
    fn kinds(&self) -> &'static [super::PanelKind] {
        &[super::PanelKind::Campaigns]
    }

    fn startup(&self) -> Vec<Command> {
        CampaignsPanel::startup()
    }

    fn apply(&mut self, event: &Event, outbox: &mut Vec<Command>) {
        CampaignsPanel::apply(self, event, outbox);
    }

    fn show(&mut self, kind: super::PanelKind, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        let _ = kind;
        CampaignsPanel::show(self, ui, outbox);
    }
}
