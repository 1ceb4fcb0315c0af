//! The Library panel: characters and lorebooks, import by dropping files on the window
//! (or typing a path, or choosing in the desktop's file dialog), written from scratch
//! ("New character", "New lorebook": the sheet or entry editor opens on the new one),
//! export from a row's context menu.

use crate::engine::Command;
use crate::interop::{CardFormat, CharacterSummary, InteropCommand, InteropEvent, LorebookFormat, LorebookSummary};
use crate::scene::SceneCommand;
use crate::scene::author::{AuthorCommand, AuthorEvent};
use std::path::PathBuf;

/// What an export dialog is about.
#[derive(Debug, Clone, PartialEq)]
enum ExportTarget {
    Character { id: String, name: String },
    Lorebook { id: String, name: String },
}

#[derive(Debug, Clone)]
struct ExportDialog {
    target: ExportTarget,
    card_format: CardFormat,
    png: bool,
    lore_format: LorebookFormat,
    path: String,
}

impl ExportDialog {
    fn new(target: ExportTarget) -> Self {
        let mut dialog = Self { target, card_format: CardFormat::CardV3, png: true, lore_format: LorebookFormat::WorldInfo, path: String::new() };
        dialog.path = dialog.default_path();
        dialog
    }

    fn name(&self) -> &str {
        match &self.target {
            ExportTarget::Character { name, .. } | ExportTarget::Lorebook { name, .. } => name,
        }
    }

    fn extension(&self) -> &'static str {
        match self.target {
            ExportTarget::Character { .. } if self.png => "png",
            _ => "json",
        }
    }

    /// `<home>/<name>.<ext>`, with characters that file systems dislike replaced.
    fn default_path(&self) -> String {
        let stem: String = self.name().chars().map(|c| if c.is_alphanumeric() || c == '-' || c == '_' || c == ' ' { c } else { '_' }).collect();
        let dir = directories::BaseDirs::new().map(|b| b.home_dir().to_path_buf()).unwrap_or_default();
        dir.join(format!("{}.{}", stem.trim(), self.extension())).display().to_string()
    }

    fn command(&self) -> Command {
        let out = super::platform::typed_path(&self.path);
        Command::Interop(match &self.target {
            ExportTarget::Character { id, .. } => {
                InteropCommand::ExportCharacter { character: id.clone(), format: self.card_format, png: self.png, out }
            }
            ExportTarget::Lorebook { id, .. } => InteropCommand::ExportLorebook { lorebook: id.clone(), format: self.lore_format, out },
        })
    }
}

/// A character's sheet in the editor: every text field as typed (lists one per line).
#[derive(Debug, Clone, Default)]
pub struct SheetForm {
    id: String,
    fields: Vec<(&'static str, String)>,
}

/// The sheet's fields, as labelled in the form and named on the card.
const SHEET_FIELDS: [(&str, &str); 11] = [
    ("Name", "name"),
    ("Description", "description"),
    ("Personality", "personality"),
    ("Scenario", "scenario"),
    ("Greeting", "first_mes"),
    ("Alternate greetings (one per line)", "alternate_greetings"),
    ("Example dialogue", "mes_example"),
    ("System prompt", "system_prompt"),
    ("Post-history instructions", "post_history_instructions"),
    ("Creator's notes", "creator_notes"),
    ("Tags (comma-separated)", "tags"),
];

impl SheetForm {
    fn of(sheet: &crate::character::Sheet) -> Self {
        let card = &sheet.card;
        let value = |key: &str| -> String {
            match key {
                "name" => sheet.name.clone(),
                "description" => sheet.description.clone(),
                "personality" => sheet.personality.clone(),
                "scenario" => sheet.scenario.clone(),
                "first_mes" => card.first_mes.clone(),
                "alternate_greetings" => card.alternate_greetings.join("\n"),
                "mes_example" => card.mes_example.clone(),
                "system_prompt" => card.system_prompt.clone(),
                "post_history_instructions" => card.post_history_instructions.clone(),
                "creator_notes" => card.creator_notes.clone(),
                "tags" => card.tags.join(", "),
                _ => String::new(),
            }
        };
        Self { id: sheet.id.clone(), fields: SHEET_FIELDS.iter().map(|(_, key)| (*key, value(key))).collect() }
    }

    /// The whole form as an edit (every field given).
    fn edit(&self) -> crate::character::SheetEdit {
        let get = |key: &str| self.fields.iter().find(|(k, _)| *k == key).map(|(_, v)| v.clone()).unwrap_or_default();
        crate::character::SheetEdit {
            name: Some(get("name")),
            description: Some(get("description")),
            personality: Some(get("personality")),
            scenario: Some(get("scenario")),
            first_mes: Some(get("first_mes")),
            mes_example: Some(get("mes_example")),
            system_prompt: Some(get("system_prompt")),
            post_history_instructions: Some(get("post_history_instructions")),
            creator_notes: Some(get("creator_notes")),
            alternate_greetings: Some(get("alternate_greetings").lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect()),
            tags: Some(get("tags").split(',').map(str::trim).filter(|t| !t.is_empty()).map(str::to_string).collect()),
        }
    }
}

#[derive(Default)]
pub struct LibraryPanel {
    characters: Vec<CharacterSummary>,
    lorebooks: Vec<LorebookSummary>,
    listed: bool,
    /// Lines of the last import report, and whether each one is a problem.
    report: Vec<(String, bool)>,
    /// The outcome of the last export.
    status: Option<Result<String, String>>,
    export: Option<ExportDialog>,
    import_path: String,
    /// The file dialogs of the import field and the export dialog's "Save to" field.
    import_picker: super::platform::FilePicker,
    export_picker: super::platform::FilePicker,
    editor: super::lore_editor::LoreEditor,
    /// A character whose deletion waits for confirmation: its id, name and what goes with it.
    confirm_delete: Option<(String, String, Vec<String>)>,
    /// The character sheet open in the editor, and one asked for this frame.
    sheet: Option<SheetForm>,
    sheet_request: Option<String>,
    portraits: super::portrait::Portraits,
    /// Names typed for a character or lorebook written from scratch.
    new_character: String,
    new_lorebook: String,
    /// What this panel asked to create (`character` or `lorebook`, and the name), until
    /// the engine says it was made — then its sheet or entry editor opens — or refused.
    creating: Option<(&'static str, String)>,
    /// A lorebook being renamed: its id, its name, the new name as typed.
    rename_book: Option<(String, String, String)>,
    /// A lorebook whose deletion waits for confirmation: its id and name, and what it holds
    /// and where it is attached once the engine has said.
    confirm_book: Option<(String, String, Option<crate::scene::lorebooks::LorebookUse>)>,
    /// A rename or deletion of a lorebook sent and not answered yet: a refusal then lands
    /// in the status line.
    book_pending: bool,
}

impl LibraryPanel {
    pub fn characters(&self) -> &[CharacterSummary] {
        &self.characters
    }

    pub fn lorebooks(&self) -> &[LorebookSummary] {
        &self.lorebooks
    }

    /// The outcome of the last export or deletion (`Err`: what went wrong).
    pub fn status(&self) -> Option<&Result<String, String>> {
        self.status.as_ref()
    }

    /// A field of the sheet open in the editor, as typed (`key` as on the card).
    pub fn sheet_value(&self, key: &str) -> Option<&str> {
        self.sheet.as_ref()?.fields.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str())
    }

    /// The character whose deletion waits for confirmation, with what would go.
    pub fn confirming_delete(&self) -> Option<&(String, String, Vec<String>)> {
        self.confirm_delete.as_ref()
    }

    /// The lorebook whose deletion waits for confirmation, with what it holds and where it
    /// is attached once known.
    pub fn confirming_book_delete(&self) -> Option<&(String, String, Option<crate::scene::lorebooks::LorebookUse>)> {
        self.confirm_book.as_ref()
    }

    pub fn lore_editor(&self) -> &super::lore_editor::LoreEditor {
        &self.editor
    }

    pub fn lore_editor_mut(&mut self) -> &mut super::lore_editor::LoreEditor {
        &mut self.editor
    }

    /// The command that imports files dropped on the window.
    pub fn import_command(paths: Vec<PathBuf>) -> Command {
        Command::Interop(InteropCommand::Import { paths })
    }

    pub fn apply(&mut self, event: &InteropEvent) {
        match event {
            InteropEvent::Library { characters, lorebooks } => {
                self.characters = characters.clone();
                self.lorebooks = lorebooks.clone();
                self.listed = true;
            }
            InteropEvent::ImportReport { created, skipped, warnings } => {
                self.report.clear();
                for c in created {
                    self.report.push((format!("Created {:?} from {}: {}", c.item.name, file_name(&c.path), c.item.detail), false));
                }
                for w in warnings {
                    self.report.push((format!("Note on {}: {}", file_name(&w.path), w.message), false));
                }
                for s in skipped {
                    self.report.push((format!("Skipped {}: {}", file_name(&s.path), s.reason), s.error));
                }
            }
            InteropEvent::Exported { name, format, path, .. } => {
                self.status = Some(Ok(format!("Exported {name:?} as {format} to {}", path.display())));
            }
            InteropEvent::Entries { id, entries, changed, .. } => {
                self.editor.entries_arrived(id, entries, changed.as_ref());
                if let Some(book) = self.lorebooks.iter_mut().find(|b| &b.id == id) {
                    book.entries = entries.len();
                }
            }
            InteropEvent::LoreTest { id, verdicts, .. } => self.editor.verdicts_arrived(id, verdicts),
            InteropEvent::Sheet { sheet, saved } => {
                if *saved {
                    self.status = Some(Ok(format!("Saved the sheet of {:?}.", sheet.name)));
                }
                self.sheet = Some(SheetForm::of(sheet));
            }
            InteropEvent::DeleteImpact { id, name, impact } => self.confirm_delete = Some((id.clone(), name.clone(), impact.clone())),
            InteropEvent::CharacterDeleted { name, impact, .. } => {
                self.confirm_delete = None;
                let with = if impact.is_empty() { String::new() } else { format!(" with {}", impact.join(", ")) };
                self.status = Some(Ok(format!("Deleted {name:?}{with}.")));
            }
            InteropEvent::Portrait { .. } | InteropEvent::Refused { .. } => {}
        }
    }

    /// An export failed (the engine's error event for an export context).
    pub fn export_failed(&mut self, message: &str) {
        self.status = Some(Err(message.to_string()));
    }

    pub fn show(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        if !self.listed {
            self.listed = true;
            outbox.push(Command::Interop(InteropCommand::List));
        }
        ui.heading("Library");
        ui.label("Drop character cards (PNG or JSON), World Info or lorebook files on the window to import them.");
        ui.horizontal(|ui| {
            let label = ui.label("Import file");
            ui.add(egui::TextEdit::singleline(&mut self.import_path).hint_text("/path/to/card.png").id_salt("library_import_path"))
                .labelled_by(label.id);
            let ready = !self.import_path.trim().is_empty();
            if ui.add_enabled(ready, egui::Button::new("Import")).clicked() {
                outbox.push(Self::import_command(vec![super::platform::typed_path(&self.import_path)]));
                self.import_path.clear();
            }
            let request = || {
                super::platform::FileRequest::open("Import cards and lorebooks", true)
                    .filter("Cards and lorebooks", &["png", "json"])
            };
            if let Some(paths) = self.import_picker.button(ui, "Browse…", request) {
                outbox.push(Self::import_command(paths));
            }
            if ui.button("Refresh").clicked() {
                outbox.push(Command::Interop(InteropCommand::List));
            }
        });
        ui.horizontal_wrapped(|ui| {
            if Self::create_field(ui, "New character", &mut self.new_character, "Create character") {
                let name = std::mem::take(&mut self.new_character).trim().to_string();
                let sheet = crate::character::SheetEdit { name: Some(name.clone()), ..Default::default() };
                self.creating = Some(("character", name));
                outbox.push(Command::Scene(SceneCommand::Author(AuthorCommand::NewCharacter { sheet: Box::new(sheet) })));
            }
            if Self::create_field(ui, "New lorebook", &mut self.new_lorebook, "Create lorebook") {
                let name = std::mem::take(&mut self.new_lorebook).trim().to_string();
                self.creating = Some(("lorebook", name.clone()));
                outbox.push(Command::Scene(SceneCommand::Author(AuthorCommand::NewLorebook { name, description: String::new() })));
            }
        });
        if !self.report.is_empty() {
            ui.group(|ui| {
                ui.strong("Last import");
                for (line, problem) in &self.report {
                    if *problem {
                        ui.colored_label(ui.visuals().error_fg_color, line);
                    } else {
                        ui.label(line);
                    }
                }
            });
        }
        match &self.status {
            Some(Ok(text)) => {
                ui.colored_label(egui::Color32::from_rgb(80, 170, 90), text);
            }
            Some(Err(text)) => {
                ui.colored_label(ui.visuals().error_fg_color, text);
            }
            None => {}
        }
        ui.separator();
        if self.sheet.is_some() {
            egui::ScrollArea::vertical().id_salt("sheet_editor").auto_shrink([false, true]).show(ui, |ui| {
                self.sheet_editor(ui, outbox);
            });
            return;
        }
        if self.editor.is_open() {
            egui::ScrollArea::vertical().id_salt("lore_editor").auto_shrink([false, true]).show(ui, |ui| {
                self.editor.show(ui, outbox);
            });
            return;
        }
        let mut edit = None;
        let mut delete = None;
        egui::ScrollArea::vertical().auto_shrink([false, true]).show(ui, |ui| {
            ui.columns(2, |cols| {
                delete = self.character_list(&mut cols[0], outbox);
                edit = self.lorebook_list(&mut cols[1], outbox);
            });
        });
        self.rename_book_window(ui, outbox);
        self.confirm_book_window(ui, outbox);
        if let Some(character) = self.sheet_request.take() {
            outbox.push(Command::Interop(InteropCommand::Sheet { character }));
        }
        if let Some(character) = delete {
            // Asked without confirmation first: a character with nothing attached goes at
            // once, otherwise the engine says what would go with it.
            outbox.push(Command::Interop(InteropCommand::DeleteCharacter { character, confirmed: false }));
        }
        self.confirm_delete_window(ui, outbox);
        if let Some((id, name)) = edit {
            outbox.push(self.editor.open(&id, &name));
        }
        self.export_dialog(ui, outbox);
    }

    /// A name field with the button (or Enter) that creates the thing named.
    fn create_field(ui: &mut egui::Ui, label: &str, text: &mut String, button: &str) -> bool {
        let l = ui.label(label);
        let field = ui.add(egui::TextEdit::singleline(text).hint_text("a name").desired_width(160.0).id_salt(("library_new", label))).labelled_by(l.id);
        let entered = field.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
        let ready = !text.trim().is_empty();
        (ui.add_enabled(ready, egui::Button::new(button)).clicked() || entered) && ready
    }

    /// What the engine said about a character or lorebook this panel asked to create:
    /// made (the list is read again and its sheet or entry editor opens, to fill in), or
    /// refused (why, in the status line).
    fn creation_answered(&mut self, event: &crate::engine::Event, outbox: &mut Vec<Command>) {
        use crate::engine::Event;
        let Some((kind, name)) = self.creating.clone() else { return };
        match event {
            Event::Author(AuthorEvent::Authored { action, kind: made, id, name: made_name, .. })
                if action == "created" && made == kind && made_name.eq_ignore_ascii_case(&name) =>
            {
                self.creating = None;
                outbox.push(Command::Interop(InteropCommand::List));
                if kind == "character" {
                    self.status = Some(Ok(format!("Created the character {made_name:?}: write its sheet below and save it.")));
                    outbox.push(Command::Interop(InteropCommand::Sheet { character: id.clone() }));
                } else {
                    self.status = Some(Ok(format!("Created the lorebook {made_name:?}: add its entries.")));
                    self.sheet = None;
                    outbox.push(self.editor.open(id, made_name));
                }
            }
            Event::Scene(crate::scene::SceneEvent::Error { scene_id: None, message, .. }) => {
                self.creating = None;
                self.status = Some(Err(message.clone()));
            }
            _ => {}
        }
    }

    /// The characters; returns the one whose "Delete…" was chosen.
    fn character_list(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) -> Option<String> {
        ui.strong(format!("Characters ({})", self.characters.len()));
        if self.characters.is_empty() {
            ui.weak("No characters yet.");
        }
        let mut open = None;
        let mut delete = None;
        let mut sheet = None;
        for c in &self.characters {
            if ui.small_button(format!("Edit sheet of {}", super::short(&c.name))).clicked() {
                sheet = Some(c.id.clone());
            }
            let origin = if c.has_card { "card" } else { c.origin.as_str() };
            let response = ui
                .horizontal(|ui| {
                    self.portraits.show(ui, &c.id, &c.name, super::portrait::SIZE * 0.6, outbox);
                    ui.selectable_label(false, super::short(&c.name)).on_hover_text(format!("{} · {origin} · {}", c.name, c.id))
                })
                .inner;
            let target = ExportTarget::Character { id: c.id.clone(), name: c.name.clone() };
            response.context_menu(|ui| {
                if ui.button("Export as card…").clicked() {
                    open = Some(target.clone());
                    ui.close();
                }
                if ui.button("Delete…").clicked() {
                    delete = Some(c.id.clone());
                    ui.close();
                }
                if ui.button("Edit sheet…").clicked() {
                    sheet = Some(c.id.clone());
                    ui.close();
                }
            });
            if response.clicked() {
                open = Some(target);
            }
        }
        if let Some(target) = open {
            self.export = Some(ExportDialog::new(target));
        }
        self.sheet_request = sheet;
        delete
    }

    /// The lorebooks; returns the book whose "Edit entries" was clicked.
    fn lorebook_list(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) -> Option<(String, String)> {
        ui.strong(format!("Lorebooks ({})", self.lorebooks.len()));
        if self.lorebooks.is_empty() {
            ui.weak("No lorebooks yet.");
        }
        let mut open = None;
        let mut edit = None;
        let mut rename = None;
        let mut delete = None;
        for b in &self.lorebooks {
            if ui.small_button(format!("Edit entries of {}", super::short(&b.name))).clicked() {
                edit = Some((b.id.clone(), b.name.clone()));
            }
            let owner = b.character_id.as_ref().and_then(|id| self.characters.iter().find(|c| &c.id == id));
            let text = match owner {
                Some(c) => format!("{} ({}, {}'s card)", super::short(&b.name), super::counted(b.entries as u64, "entry", "entries"), super::short(&c.name)),
                None => format!("{} ({})", super::short(&b.name), super::counted(b.entries as u64, "entry", "entries")),
            };
            let response = ui.selectable_label(false, text);
            let target = ExportTarget::Lorebook { id: b.id.clone(), name: b.name.clone() };
            response.context_menu(|ui| {
                if ui.button("Export lorebook…").clicked() {
                    open = Some(target.clone());
                    ui.close();
                }
                if ui.button("Rename lorebook…").clicked() {
                    rename = Some((b.id.clone(), b.name.clone()));
                    ui.close();
                }
                if ui.button("Delete lorebook…").clicked() {
                    delete = Some((b.id.clone(), b.name.clone()));
                    ui.close();
                }
            });
            if response.clicked() {
                open = Some(target);
            }
        }
        if let Some(target) = open {
            self.export = Some(ExportDialog::new(target));
        }
        if let Some((id, name)) = rename {
            self.rename_book = Some((id, name.clone(), name));
        }
        if let Some((id, name)) = delete {
            // Always asked first: what it holds and where it fires are read, then shown.
            outbox.push(Command::Scene(SceneCommand::Author(AuthorCommand::LorebookUse { lorebook: id.clone() })));
            self.confirm_book = Some((id, name, None));
        }
        edit
    }

    /// The rename dialog of a lorebook: a new name, which no other book may have.
    fn rename_book_window(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        let Some((id, name, typed)) = self.rename_book.as_mut() else { return };
        let mut close = false;
        egui::Window::new(format!("Rename lorebook {name}")).collapsible(false).resizable(false).show(ui.ctx(), |ui| {
            let label = ui.label("New name");
            let field = ui.add(egui::TextEdit::singleline(typed).desired_width(260.0).id_salt("library_rename_book")).labelled_by(label.id);
            let entered = field.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
            ui.horizontal(|ui| {
                let ready = !typed.trim().is_empty() && typed.trim() != name.as_str();
                if (ui.add_enabled(ready, egui::Button::new("Rename")).clicked() || entered) && ready {
                    outbox.push(Command::Scene(SceneCommand::Author(AuthorCommand::RenameLorebook { lorebook: id.clone(), name: typed.trim().to_string() })));
                    self.book_pending = true;
                    close = true;
                }
                if ui.button("Cancel").clicked() {
                    close = true;
                }
            });
        });
        if close {
            self.rename_book = None;
        }
    }

    /// The confirmation of a lorebook's deletion: its entries and everything it is
    /// attached to are said before anything goes.
    fn confirm_book_window(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        let Some((id, name, known)) = self.confirm_book.clone() else { return };
        let mut close = false;
        egui::Window::new(format!("Delete lorebook {name}?")).collapsible(false).resizable(false).show(ui.ctx(), |ui| {
            match &known {
                None => {
                    ui.label("Reading what it holds and where it is attached…");
                }
                Some(found) => {
                    ui.label(match found.entries {
                        0 => "It holds no entries.".to_string(),
                        1 => "Its one entry goes with it.".to_string(),
                        n => format!("Its {n} entries go with it."),
                    });
                    if found.bound.is_empty() {
                        ui.label("It is attached nowhere.");
                    } else {
                        ui.label(format!("It is detached from {}.", found.bound.join(", ")));
                    }
                    ui.label("This cannot be undone.");
                }
            }
            ui.horizontal(|ui| {
                if ui.add_enabled(known.is_some(), egui::Button::new(format!("Delete lorebook {name}"))).clicked() {
                    outbox.push(Command::Scene(SceneCommand::Author(AuthorCommand::DeleteLorebook { lorebook: id.clone(), confirmed: true })));
                    self.book_pending = true;
                    close = true;
                }
                if ui.button("Keep it").clicked() {
                    close = true;
                }
            });
        });
        if close {
            self.confirm_book = None;
        }
    }

    /// What the engine said about a lorebook this panel renames or deletes: what it holds
    /// (for the confirmation), that it was renamed or deleted (the list is read again and
    /// an editor open on it follows), or why not.
    fn book_answered(&mut self, event: &crate::engine::Event, outbox: &mut Vec<Command>) {
        use crate::engine::Event;
        match event {
            Event::Author(AuthorEvent::LorebookUse { lorebook }) => {
                if let Some((id, _, known)) = self.confirm_book.as_mut()
                    && *id == lorebook.id
                {
                    *known = Some(lorebook.clone());
                }
            }
            Event::Author(AuthorEvent::Authored { action, kind, id, name, impact }) if kind == "lorebook" && (action == "renamed" || action == "deleted") => {
                self.book_pending = false;
                outbox.push(Command::Interop(InteropCommand::List));
                if action == "renamed" {
                    self.editor.book_changed(id, Some(name));
                    self.status = Some(Ok(format!("Renamed the lorebook to {name:?}.")));
                } else {
                    self.editor.book_changed(id, None);
                    let with = impact.as_ref().filter(|i| !i.is_empty()).map(|i| format!(" with {}", i.describe())).unwrap_or_default();
                    self.status = Some(Ok(format!("Deleted the lorebook {name:?}{with}.")));
                }
            }
            Event::Scene(crate::scene::SceneEvent::Error { scene_id: None, message, .. }) if self.book_pending => {
                self.book_pending = false;
                self.status = Some(Err(message.clone()));
            }
            _ => {}
        }
    }

    /// The character sheet editor: every card field; saved as one edit.
    fn sheet_editor(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        let Some(form) = self.sheet.as_mut() else { return };
        let mut close = false;
        ui.horizontal(|ui| {
            ui.heading("Character sheet");
            if ui.button("Close sheet").clicked() {
                close = true;
            }
        });
        for ((label, _), (_, value)) in SHEET_FIELDS.iter().zip(form.fields.iter_mut()) {
            let l = ui.label(*label);
            let multiline = !matches!(*label, "Name" | "Tags (comma-separated)");
            let edit = if multiline { egui::TextEdit::multiline(value).desired_rows(3) } else { egui::TextEdit::singleline(value) };
            ui.add(edit.desired_width(f32::INFINITY).id_salt(("sheet_field", *label))).labelled_by(l.id);
        }
        if ui.button("Save sheet").clicked() {
            outbox.push(Command::Interop(InteropCommand::EditSheet { character: form.id.clone(), edit: Box::new(form.edit()) }));
        }
        if close {
            self.sheet = None;
        }
    }

    fn confirm_delete_window(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        let Some((id, name, impact)) = self.confirm_delete.clone() else { return };
        let mut close = false;
        egui::Window::new(format!("Delete {name}?")).collapsible(false).resizable(false).show(ui.ctx(), |ui| {
            ui.label(format!("Deleting {name} also deletes: {}.", impact.join(", ")));
            ui.label("Its memories go too. This cannot be undone.");
            ui.horizontal(|ui| {
                if ui.button(format!("Delete {name} and all of it")).clicked() {
                    outbox.push(Command::Interop(InteropCommand::DeleteCharacter { character: id.clone(), confirmed: true }));
                    close = true;
                }
                if ui.button("Keep it").clicked() {
                    close = true;
                }
            });
        });
        if close {
            self.confirm_delete = None;
        }
    }

    fn export_dialog(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        let Some(dialog) = &mut self.export else { return };
        let picker = &mut self.export_picker;
        let mut keep_open = true;
        let mut send = false;
        egui::Window::new(format!("Export {}", dialog.name())).collapsible(false).resizable(false).show(ui.ctx(), |ui| {
            let before = dialog.extension();
            match dialog.target {
                ExportTarget::Character { .. } => {
                    egui::ComboBox::from_label("Card format").selected_text(dialog.card_format.label()).show_ui(ui, |ui| {
                        ui.selectable_value(&mut dialog.card_format, CardFormat::CardV3, "card-v3");
                        ui.selectable_value(&mut dialog.card_format, CardFormat::CardV2, "card-v2");
                    });
                    ui.checkbox(&mut dialog.png, "PNG with portrait");
                }
                ExportTarget::Lorebook { .. } => {
                    egui::ComboBox::from_label("Lorebook format").selected_text(dialog.lore_format.label()).show_ui(ui, |ui| {
                        ui.selectable_value(&mut dialog.lore_format, LorebookFormat::WorldInfo, "world-info");
                        ui.selectable_value(&mut dialog.lore_format, LorebookFormat::LorebookV3, "lorebook-v3");
                    });
                }
            }
            if dialog.extension() != before {
                if let Some(stem) = dialog.path.strip_suffix(&format!(".{before}")) {
                    dialog.path = format!("{stem}.{}", dialog.extension());
                }
            }
            let label = ui.label("Save to");
            ui.add(egui::TextEdit::singleline(&mut dialog.path).desired_width(360.0).id_salt("library_export_path")).labelled_by(label.id);
            ui.horizontal(|ui| {
                let request = || {
                    let title = format!("Export {}", dialog.name());
                    super::platform::FileRequest::save(&title, &dialog.path).filter(dialog.extension(), &[dialog.extension()])
                };
                if let Some(path) = picker.button(ui, "Browse…", request).and_then(|p| p.into_iter().next()) {
                    dialog.path = path.display().to_string();
                }
            });
            ui.horizontal(|ui| {
                if ui.add_enabled(!dialog.path.trim().is_empty(), egui::Button::new("Export")).clicked() {
                    send = true;
                }
                if ui.button("Cancel").clicked() {
                    keep_open = false;
                }
            });
        });
        if send {
            outbox.push(dialog.command());
            self.status = None;
            keep_open = false;
        }
        if !keep_open {
            self.export = None;
        }
    }
}

fn file_name(path: &std::path::Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string())
}

impl super::Panel for LibraryPanel {
    fn kinds(&self) -> &'static [super::PanelKind] {
        &[super::PanelKind::Library]
    }

    fn apply(&mut self, event: &crate::engine::Event, outbox: &mut Vec<crate::engine::Command>) {
        use crate::engine::Event;
        self.portraits.apply(event);
        self.creation_answered(event, outbox);
        self.book_answered(event, outbox);
        match event {
            Event::Interop(e) => LibraryPanel::apply(self, e),
            // A character made elsewhere (the demo companion, the demo scene's cast, a
            // finished identity run) may have come after the last list: list again. The
            // answer reaches every panel that shows characters (an import sends its own).
            Event::Companion(crate::companion::CompanionEvent::DemoReady { character_id: Some(_) })
            | Event::Scene(crate::scene::SceneEvent::DemoReady { scene_id: Some(_) })
            | Event::Identity(crate::identity::IdentityEvent::CharacterComplete { .. })
            // Another process (the CLI, a server) imported, made, renamed or deleted one:
            // the chat's watch hears it ([`crate::companion::records::ChatStanding`]).
            | Event::Companion(crate::companion::CompanionEvent::ChangedElsewhere { .. }) => outbox.push(Command::Interop(InteropCommand::List)),
            _ => {}
        }
    }

    fn show(&mut self, kind: super::PanelKind, ui: &mut egui::Ui, outbox: &mut Vec<crate::engine::Command>) {
        let _ = kind;
        LibraryPanel::show(self, ui, outbox);
    }
}
