//! The lorebook editor (in the Library panel): a book's entries in order — add,
//! duplicate, delete, reorder — one entry's settings in a form (keys, secondary keys and
//! their logic, content, constant, order, placement, probability, timed effects, group),
//! and a test box that runs activation on a text and says why each entry fired or not.
//! Every change is one engine command; the form shows the stored entry again afterwards.

use crate::engine::Command;
use crate::interop::InteropCommand;
use crate::lorebook::activation::EntryVerdict;
use crate::lorebook::{InsertionPosition, LoreEntry, PromptRole, SelectiveLogic};

/// The entry being edited, as the form holds it (lists as comma-separated text).
#[derive(Debug, Clone, Default)]
struct Draft {
    ordinal: usize,
    entry: LoreEntry,
    keys: String,
    secondary: String,
    sticky: String,
    cooldown: String,
    delay: String,
    /// The character filter's names and tags, comma-separated.
    characters: String,
    tags: String,
}

impl Draft {
    fn of(ordinal: usize, entry: &LoreEntry) -> Self {
        let number = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_default();
        Self {
            ordinal,
            keys: entry.keys.join(", "),
            secondary: entry.secondary_keys.join(", "),
            sticky: number(entry.sticky),
            cooldown: number(entry.cooldown),
            delay: number(entry.delay),
            characters: entry.character_filter.names.join(", "),
            tags: entry.character_filter.tags.join(", "),
            entry: entry.clone(),
        }
    }

    /// The entry the form describes.
    fn entry(&self) -> LoreEntry {
        let list = crate::lorebook::split_keys;
        let number = |text: &str| text.trim().parse::<u32>().ok();
        let mut entry = self.entry.clone();
        entry.keys = list(&self.keys);
        entry.secondary_keys = list(&self.secondary);
        entry.sticky = number(&self.sticky);
        entry.cooldown = number(&self.cooldown);
        entry.delay = number(&self.delay);
        let names = |text: &str| text.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_string).collect::<Vec<_>>();
        entry.character_filter.names = names(&self.characters);
        entry.character_filter.tags = names(&self.tags);
        entry
    }
}

#[derive(Default)]
pub struct LoreEditor {
    /// The book open in the editor: its id and name, and its entries as stored.
    book: Option<(String, String)>,
    entries: Vec<LoreEntry>,
    draft: Option<Draft>,
    test_text: String,
    verdicts: Vec<EntryVerdict>,
    status: Option<String>,
}

const POSITIONS: [(InsertionPosition, &str); 8] = [
    (InsertionPosition::BeforeCharacter, "before the character"),
    (InsertionPosition::AfterCharacter, "after the character"),
    (InsertionPosition::AuthorNoteTop, "author's note, top"),
    (InsertionPosition::AuthorNoteBottom, "author's note, bottom"),
    (InsertionPosition::AtDepth, "in the chat, at depth"),
    (InsertionPosition::ExamplesTop, "before the examples"),
    (InsertionPosition::ExamplesBottom, "after the examples"),
    (InsertionPosition::Outlet, "an outlet: where {{outlet::Name}} is written"),
];

const LOGICS: [(SelectiveLogic, &str); 4] = [
    (SelectiveLogic::AndAny, "and any"),
    (SelectiveLogic::AndAll, "and all"),
    (SelectiveLogic::NotAny, "not any"),
    (SelectiveLogic::NotAll, "not all"),
];

const ROLES: [(PromptRole, &str); 3] = [(PromptRole::System, "system"), (PromptRole::User, "user"), (PromptRole::Assistant, "assistant")];

impl LoreEditor {
    /// Open a book: its entries are asked for.
    pub fn open(&mut self, id: &str, name: &str) -> Command {
        self.book = Some((id.to_string(), name.to_string()));
        self.entries.clear();
        self.draft = None;
        self.verdicts.clear();
        self.status = None;
        Command::Interop(InteropCommand::Entries { lorebook: id.to_string() })
    }

    pub fn is_open(&self) -> bool {
        self.book.is_some()
    }

    /// A lorebook was renamed or deleted: the editor open on it follows (shows the new
    /// name, or closes, leaving nothing to save into).
    pub fn book_changed(&mut self, id: &str, renamed: Option<&str>) {
        if self.book.as_ref().is_none_or(|(open, _)| open != id) {
            return;
        }
        match renamed {
            Some(name) => self.book = Some((id.to_string(), name.to_string())),
            None => {
                self.book = None;
                self.entries.clear();
                self.draft = None;
                self.verdicts.clear();
            }
        }
    }

    pub fn entries(&self) -> &[LoreEntry] {
        &self.entries
    }

    pub fn verdicts(&self) -> &[EntryVerdict] {
        &self.verdicts
    }

    pub fn status(&self) -> Option<&str> {
        self.status.as_deref()
    }

    /// The entries came (after opening or a change): the form follows the changed entry.
    pub fn entries_arrived(&mut self, id: &str, entries: &[LoreEntry], changed: Option<&(String, usize)>) {
        if self.book.as_ref().is_none_or(|(open, _)| open != id) {
            return;
        }
        self.entries = entries.to_vec();
        match changed {
            Some((what, n)) => {
                self.status = Some(format!("Entry {what}."));
                self.draft = match what.as_str() {
                    "deleted" => None,
                    _ => entries.get(*n).map(|e| Draft::of(*n, e)),
                };
            }
            None => self.draft = self.draft.take().filter(|d| d.ordinal < entries.len()),
        }
    }

    pub fn verdicts_arrived(&mut self, id: &str, verdicts: &[EntryVerdict]) {
        if self.book.as_ref().is_some_and(|(open, _)| open == id) {
            self.verdicts = verdicts.to_vec();
        }
    }

    /// A change was refused (the engine's error for a lorebook context).
    pub fn failed(&mut self, message: &str) {
        self.status = Some(message.to_string());
    }

    pub fn show(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        let Some((id, name)) = self.book.clone() else { return };
        let command = |c: InteropCommand| Command::Interop(c);
        ui.horizontal(|ui| {
            ui.heading(format!("Lorebook: {name}"));
            if ui.button("Close editor").clicked() {
                self.book = None;
            }
        });
        if self.book.is_none() {
            return;
        }
        if let Some(status) = &self.status {
            ui.weak(status);
        }
        ui.horizontal(|ui| {
            if ui.button("Add entry").clicked() {
                let entry = LoreEntry { comment: "New entry".into(), ..Default::default() };
                outbox.push(command(InteropCommand::SaveEntry { lorebook: id.clone(), ordinal: None, entry: Box::new(entry) }));
            }
        });
        let last = self.entries.len().saturating_sub(1);
        for (n, entry) in self.entries.iter().enumerate() {
            ui.horizontal(|ui| {
                let open = self.draft.as_ref().is_some_and(|d| d.ordinal == n);
                let state = if !entry.enabled { " (disabled)" } else if entry.constant { " (constant)" } else { "" };
                if ui.selectable_label(open, format!("{n}. {}{state}", entry.label())).on_hover_text(entry.keys.join(", ")).clicked() {
                    self.draft = Some(Draft::of(n, entry));
                }
                let lorebook = id.clone();
                if ui.add_enabled(n > 0, egui::Button::new("Up").small()).clicked() {
                    outbox.push(command(InteropCommand::MoveEntry { lorebook: lorebook.clone(), from: n, to: n - 1 }));
                }
                if ui.add_enabled(n < last, egui::Button::new("Down").small()).clicked() {
                    outbox.push(command(InteropCommand::MoveEntry { lorebook: lorebook.clone(), from: n, to: n + 1 }));
                }
                if ui.small_button("Duplicate").clicked() {
                    outbox.push(command(InteropCommand::DuplicateEntry { lorebook: lorebook.clone(), ordinal: n }));
                }
                if ui.small_button("Delete").clicked() {
                    outbox.push(command(InteropCommand::DeleteEntry { lorebook, ordinal: n }));
                }
            });
        }
        self.form(ui, outbox, &id);
        ui.separator();
        ui.strong("Why did it fire?");
        ui.horizontal(|ui| {
            let label = ui.label("Test text");
            ui.add(egui::TextEdit::singleline(&mut self.test_text).desired_width(420.0).id_salt("lore_test_text")).labelled_by(label.id);
            if ui.add_enabled(!self.test_text.trim().is_empty(), egui::Button::new("Test activation")).clicked() {
                outbox.push(command(InteropCommand::TestLore { lorebook: id.clone(), text: self.test_text.clone() }));
            }
        });
        for v in &self.verdicts {
            let line = format!("{}. {} — {}", v.ordinal, v.label, v.reason);
            if v.fired {
                ui.colored_label(egui::Color32::from_rgb(80, 170, 90), format!("fires: {line}"));
            } else {
                ui.weak(format!("stays out: {line}"));
            }
        }
    }

    fn form(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>, id: &str) {
        let Some(draft) = self.draft.as_mut() else { return };
        let mut save = false;
        ui.group(|ui| {
            ui.strong(format!("Entry {}", draft.ordinal));
            let field = |ui: &mut egui::Ui, label: &str, text: &mut String, salt: &str| {
                ui.horizontal(|ui| {
                    let l = ui.label(label);
                    ui.add(egui::TextEdit::singleline(text).desired_width(360.0).id_salt(("lore_field", salt.to_string()))).labelled_by(l.id);
                });
            };
            field(ui, "Title", &mut draft.entry.comment, "title");
            field(ui, "Keys", &mut draft.keys, "keys");
            field(ui, "Secondary keys", &mut draft.secondary, "secondary");
            ui.horizontal(|ui| {
                ui.checkbox(&mut draft.entry.selective, "Use secondary keys");
                let current = LOGICS.iter().find(|(l, _)| *l == draft.entry.selective_logic).map_or("other", |(_, n)| *n);
                egui::ComboBox::from_label("Logic").selected_text(current).show_ui(ui, |ui| {
                    for (logic, label) in LOGICS {
                        ui.selectable_value(&mut draft.entry.selective_logic, logic, label);
                    }
                });
            });
            let l = ui.label("Content");
            ui.add(egui::TextEdit::multiline(&mut draft.entry.content).desired_rows(4).desired_width(f32::INFINITY).id_salt("lore_content")).labelled_by(l.id);
            ui.horizontal(|ui| {
                ui.checkbox(&mut draft.entry.enabled, "Enabled");
                ui.checkbox(&mut draft.entry.constant, "Constant");
                let l = ui.label("Order");
                ui.add(egui::DragValue::new(&mut draft.entry.insertion_order)).labelled_by(l.id);
                let l = ui.label("Probability %");
                ui.add(egui::DragValue::new(&mut draft.entry.probability).range(0..=100)).labelled_by(l.id);
            });
            ui.horizontal(|ui| {
                let current = POSITIONS.iter().find(|(p, _)| *p == draft.entry.position).map_or("other", |(_, n)| *n);
                egui::ComboBox::from_label("Position").selected_text(current).show_ui(ui, |ui| {
                    for (position, label) in POSITIONS {
                        ui.selectable_value(&mut draft.entry.position, position, label);
                    }
                });
                if draft.entry.position == InsertionPosition::Outlet {
                    let l = ui.label("Outlet name");
                    ui.add(egui::TextEdit::singleline(&mut draft.entry.outlet_name).desired_width(140.0).id_salt("lore_outlet")).labelled_by(l.id);
                }
                if draft.entry.position == InsertionPosition::AtDepth {
                    let l = ui.label("Depth");
                    ui.add(egui::DragValue::new(&mut draft.entry.depth).range(0..=1000)).labelled_by(l.id);
                    let role = ROLES.iter().find(|(r, _)| *r == draft.entry.role).map_or("other", |(_, n)| *n);
                    egui::ComboBox::from_label("As").selected_text(role).show_ui(ui, |ui| {
                        for (r, label) in ROLES {
                            ui.selectable_value(&mut draft.entry.role, r, label);
                        }
                    });
                }
            });
            ui.horizontal(|ui| {
                for (label, text, salt) in [("Sticky", &mut draft.sticky, "sticky"), ("Cooldown", &mut draft.cooldown, "cooldown"), ("Delay", &mut draft.delay, "delay")] {
                    let l = ui.label(label);
                    ui.add(egui::TextEdit::singleline(text).desired_width(40.0).id_salt(("lore_timer", salt))).labelled_by(l.id);
                }
            });
            field(ui, "Inclusion group", &mut draft.entry.group, "group");
            egui::CollapsingHeader::new("More settings").id_salt("lore_more").show(ui, |ui| more_settings(ui, draft));
            if ui.button("Save entry").clicked() {
                save = true;
            }
        });
        if save {
            let entry = draft.entry();
            outbox.push(Command::Interop(InteropCommand::SaveEntry { lorebook: id.to_string(), ordinal: Some(draft.ordinal), entry: Box::new(entry) }));
        }
    }
}

/// `None`, `Some(true)`, `Some(false)`: a setting left to the engine, or set either way.
fn tri_state(ui: &mut egui::Ui, label: &str, value: &mut Option<bool>) {
    let shown = match value {
        None => "default",
        Some(true) => "yes",
        Some(false) => "no",
    };
    egui::ComboBox::from_label(label).selected_text(shown).show_ui(ui, |ui| {
        ui.selectable_value(value, None, "default");
        ui.selectable_value(value, Some(true), "yes");
        ui.selectable_value(value, Some(false), "no");
    });
}

/// The settings SillyTavern's entry editor has beyond the common ones: matching,
/// recursion, groups, budget, character filter, triggers and match sources.
fn more_settings(ui: &mut egui::Ui, draft: &mut Draft) {
    let e = &mut draft.entry;
    ui.horizontal(|ui| {
        tri_state(ui, "Case-sensitive", &mut e.case_sensitive);
        tri_state(ui, "Whole words", &mut e.match_whole_words);
        tri_state(ui, "Group scoring", &mut e.use_group_scoring);
    });
    ui.horizontal(|ui| {
        ui.checkbox(&mut e.use_probability, "Use probability");
        ui.checkbox(&mut e.ignore_budget, "Ignore budget");
        ui.checkbox(&mut e.vectorized, "Vectorized");
    });
    ui.horizontal(|ui| {
        ui.checkbox(&mut e.exclude_recursion, "Non-recursable");
        ui.checkbox(&mut e.prevent_recursion, "Prevent further recursion");
        let l = ui.label("Delay until recursion");
        ui.add(egui::DragValue::new(&mut e.delay_until_recursion).range(0..=100)).labelled_by(l.id);
    });
    ui.horizontal(|ui| {
        ui.checkbox(&mut e.group_override, "Prioritize in group");
        let l = ui.label("Group weight");
        ui.add(egui::DragValue::new(&mut e.group_weight).range(1..=10_000)).labelled_by(l.id);
    });
    ui.horizontal(|ui| {
        let l = ui.label("Only for characters");
        ui.add(egui::TextEdit::singleline(&mut draft.characters).desired_width(200.0).id_salt("lore_filter_names")).labelled_by(l.id);
        let l = ui.label("tags");
        ui.add(egui::TextEdit::singleline(&mut draft.tags).desired_width(140.0).id_salt("lore_filter_tags")).labelled_by(l.id);
        ui.checkbox(&mut draft.entry.character_filter.is_exclude, "Exclude them instead");
    });
    let e = &mut draft.entry;
    ui.horizontal_wrapped(|ui| {
        ui.label("Triggers (none: all)");
        for trigger in crate::lorebook::GENERATION_TRIGGERS {
            let mut on = e.triggers.iter().any(|t| t == trigger);
            if ui.checkbox(&mut on, trigger).changed() {
                e.triggers.retain(|t| t != trigger);
                if on {
                    e.triggers.push(trigger.to_string());
                }
            }
        }
    });
    ui.horizontal_wrapped(|ui| {
        ui.label("Also match");
        let m = &mut e.match_sources;
        ui.checkbox(&mut m.persona_description, "Persona");
        ui.checkbox(&mut m.character_description, "Description");
        ui.checkbox(&mut m.character_personality, "Personality");
        ui.checkbox(&mut m.scenario, "Scenario");
        ui.checkbox(&mut m.character_depth_prompt, "Character's Note");
        ui.checkbox(&mut m.creator_notes, "Creator's notes");
    });
}
