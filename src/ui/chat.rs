//! The Chat panel: talk to one character, watch the reply stream in (and cancel it),
//! and beside the conversation read the packet of the last turn exactly as it was sent,
//! block by block with token counts, with the memories that went into it.

use crate::companion::packet::Packet;
use crate::companion::records::{ChatCharacter, ChatTurn};
use crate::companion::{CompanionCommand, CompanionEvent};
use crate::engine::Command;
use crate::memory::RetrievalHit;
use egui::RichText;

/// The reply being streamed.
#[derive(Debug, Clone, Default)]
pub struct LiveReply {
    pub input: String,
    pub attempt: u32,
    pub text: String,
    /// Earlier draws of this turn that were thrown away, with the reason.
    pub discarded: Vec<String>,
    /// What holds the model this draw waits for (see [`CompanionEvent::Waiting`]); gone
    /// once the reply starts.
    pub waiting: Option<String>,
    /// The user typed `input` into the message box for this turn (not a regenerate or a
    /// continue of a message already kept): a failed turn gives it back to the box.
    pub typed: bool,
}

/// The packet shown beside the chat: the last one sent (live while a turn runs).
#[derive(Debug, Clone, Default)]
pub struct PacketView {
    pub packet: Packet,
    pub hits: Vec<RetrievalHit>,
    pub attempt: u32,
    pub committed: bool,
    /// The turn this packet was for ended without a reply kept (failed or cancelled).
    pub abandoned: bool,
}

#[derive(Default)]
pub struct ChatPanel {
    characters: Vec<ChatCharacter>,
    selected: Option<String>,
    turns: Vec<ChatTurn>,
    /// A message being edited (its id and the text so far), and the frame's requests to
    /// start or end an edit (applied after the transcript is drawn).
    editing: Option<(String, String)>,
    edit_request: Option<(String, String)>,
    editing_done: bool,
    /// The card's greeting and the creator's notes (shown, never sent).
    greeting: Option<String>,
    /// Every greeting of the card (the first message's swipes) and the chosen one.
    greetings: Vec<String>,
    greeting_swipe: u32,
    /// Who the user plays in this chat, and the personas to choose from.
    user: Option<crate::companion::records::ChatUser>,
    /// The persona's picture as a texture, with the persona it shows.
    picture: Option<(String, egui::TextureHandle)>,
    personas: Vec<crate::character::Persona>,
    /// The library's lorebooks, with where each fires for this chat.
    books: Vec<crate::companion::ChatBook>,
    creator_notes: String,
    /// The chat's Author's Note as stored, how many user messages the chat holds, and
    /// the note as being edited (taken from the stored one until the user changes it).
    author_note: Option<crate::companion::model::AuthorNote>,
    user_messages: u32,
    note_draft: crate::companion::model::AuthorNote,
    note_dirty: bool,
    /// The chat's variables (`{{setvar}}`) and the library's globals, as they stand.
    variables: std::collections::BTreeMap<String, String>,
    global_variables: std::collections::BTreeMap<String, String>,
    /// The chats put aside for the selected character, and the chat-file path field.
    saved: Vec<crate::companion::chats::SavedChat>,
    file_path: String,
    file_picker: super::platform::FilePicker,
    /// Words to find in the chat; the whole chat is loaded once asked for.
    search: String,
    live: Option<LiveReply>,
    packet: Option<PacketView>,
    input: String,
    notice: Option<String>,
    error: Option<String>,
    /// A memory the user asked to open in the memory browser.
    open_memory: Option<String>,
    /// The message whose Delete (or "Delete from here", `true`) was clicked, asking
    /// "Really delete?" before anything goes: one click never deletes, so a double click
    /// on a list that shifts under it cannot delete two exchanges.
    confirm_delete: Option<(String, bool)>,
    /// The message box gets the keyboard back after a send (the Send button took it).
    refocus: bool,
    /// The packet has a tile of its own in the layout, so the chat does not repeat it.
    packet_elsewhere: bool,
    /// The character to open once the list arrives (the one open at the last close).
    wanted: Option<String>,
    /// The character's portrait beside its messages.
    portraits: super::portrait::Portraits,
    /// What was typed and not sent, per character (the open one's is `input`).
    drafts: super::drafts::Drafts,
    /// What each chat left behind when another character was picked, by character id.
    left: std::collections::HashMap<String, LeftChat>,
    /// The characters' order as the Character list showed it when it opened: the list
    /// sorts by the latest chat, and rows moving under the pointer while it is open
    /// sent clicks to the wrong character.
    menu_order: Option<Vec<String>>,
}

/// What belongs to one chat and waits while another is open: its last turn's error and
/// notice, and the words of a turn still being answered (given back as its draft if that
/// turn fails). Its unsent words are its draft (`drafts`): one chat's draft is never
/// sent to another.
#[derive(Default)]
struct LeftChat {
    error: Option<String>,
    notice: Option<String>,
    sent: Option<String>,
}

/// Exchanges loaded when a character is opened.
const HISTORY_LIMIT: u32 = 200;

impl ChatPanel {
    /// Commands to send when the window opens.
    pub fn startup() -> Vec<Command> {
        // The library is watched from the start (characters, personas and lorebooks
        // another process changes), before any chat is open.
        vec![
            Command::Companion(CompanionCommand::Watch { character: None }),
            Command::Companion(CompanionCommand::Demo),
            Command::Companion(CompanionCommand::List),
        ]
    }

    pub fn characters(&self) -> &[ChatCharacter] {
        &self.characters
    }

    /// The message being written.
    pub fn draft(&self) -> &str {
        &self.input
    }

    /// Every chat's unsent message, by character id (what the window saves).
    pub fn drafts(&self) -> std::collections::BTreeMap<String, String> {
        self.drafts.all(&self.input)
    }

    /// The unsent messages a previous window kept.
    pub fn restore_drafts(&mut self, drafts: std::collections::BTreeMap<String, String>) {
        self.drafts.restore(drafts);
    }

    pub fn selected(&self) -> Option<&str> {
        self.selected.as_deref()
    }

    pub fn turns(&self) -> &[ChatTurn] {
        &self.turns
    }

    pub fn live(&self) -> Option<&LiveReply> {
        self.live.as_ref()
    }

    pub fn packet(&self) -> Option<&PacketView> {
        self.packet.as_ref()
    }

    /// The chats put aside for the selected character.
    pub fn saved_chats(&self) -> &[crate::companion::chats::SavedChat] {
        &self.saved
    }

    /// The greeting on screen (the chosen one), and who the user plays.
    pub fn greeting(&self) -> Option<&str> {
        self.greeting.as_deref()
    }

    pub fn user_name(&self) -> Option<&str> {
        self.user.as_ref().map(|u| u.name.as_str())
    }

    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// The memory to show in the memory browser, once (the workbench switches panels).
    pub fn take_open_memory(&mut self) -> Option<String> {
        self.open_memory.take()
    }

    fn is_selected(&self, character_id: &str) -> bool {
        self.selected.as_deref() == Some(character_id)
    }

    pub fn apply(&mut self, event: &CompanionEvent, outbox: &mut Vec<Command>) {
        match event {
            CompanionEvent::Characters { characters } => {
                self.characters = characters.clone();
                if let Some(wanted) = self.wanted.take().filter(|w| characters.iter().any(|c| &c.id == w) && !self.is_selected(w)) {
                    self.open_chat(Some(wanted.clone()));
                    self.turns.clear();
                    self.packet = None;
                    self.switched();
                    outbox.push(watch(&wanted));
                    outbox.push(history(&wanted));
                    outbox.push(Command::Companion(CompanionCommand::Chats { character: wanted }));
                }
                let gone = self.selected.as_ref().is_some_and(|s| !characters.iter().any(|c| &c.id == s));
                if gone {
                    self.open_chat(None);
                    self.turns.clear();
                    self.packet = None;
                    self.switched();
                }
                if self.selected.is_none()
                    && let Some(first) = self.characters.first().cloned()
                {
                    self.open_chat(Some(first.id.clone()));
                    outbox.push(watch(&first.id));
                    outbox.push(history(&first.id));
                    outbox.push(Command::Companion(CompanionCommand::Chats { character: first.id.clone() }));
                }
            }
            CompanionEvent::DemoReady { character_id: Some(_) } => outbox.push(Command::Companion(CompanionCommand::List)),
            CompanionEvent::History {
                character_id,
                turns,
                greeting,
                greetings,
                greeting_swipe,
                user,
                personas,
                books,
                creator_notes,
                variables,
                global_variables,
                author_note,
                user_messages,
                ..
            } if self.is_selected(character_id) => {
                if !self.note_dirty || self.author_note != *author_note {
                    self.note_draft = author_note.clone().unwrap_or_default();
                    self.note_dirty = false;
                }
                self.author_note = author_note.clone();
                self.user_messages = *user_messages;
                self.variables = variables.clone();
                self.global_variables = global_variables.clone();
                self.books = books.clone();
                self.turns = turns.clone();
                self.greeting = greeting.clone();
                self.greetings = greetings.clone();
                self.greeting_swipe = *greeting_swipe;
                self.user = Some(user.clone());
                self.personas = personas.clone();
                self.creator_notes = creator_notes.clone();
                if self.packet.is_none()
                    && let Some(last) = turns.last()
                {
                    self.packet = Some(PacketView { packet: last.packet.clone(), hits: last.hits.clone(), attempt: last.attempts, committed: true, abandoned: false });
                }
            }
            CompanionEvent::TurnStarted { character_id, input, attempt, packet, hits, .. } if self.is_selected(character_id) => {
                let live = self.live.get_or_insert_with(LiveReply::default);
                live.input = input.clone();
                live.attempt = *attempt;
                live.text.clear();
                live.waiting = None;
                self.packet = Some(PacketView { packet: (**packet).clone(), hits: hits.clone(), attempt: *attempt, committed: false, abandoned: false });
            }
            CompanionEvent::Token { character_id, attempt, text } if self.is_selected(character_id) => {
                if let Some(live) = self.live.as_mut().filter(|l| l.attempt == *attempt) {
                    live.text.push_str(text);
                    live.waiting = None;
                }
            }
            CompanionEvent::Waiting { character_id, attempt, holder } if self.is_selected(character_id) => {
                if let Some(live) = self.live.as_mut().filter(|l| l.attempt == *attempt) {
                    live.waiting = Some(holder.clone());
                }
            }
            CompanionEvent::Discarded { character_id, attempt, reason } if self.is_selected(character_id) => {
                if let Some(live) = self.live.as_mut() {
                    live.discarded.push(format!("reply {attempt} discarded: {reason}"));
                }
            }
            CompanionEvent::TurnCommitted { turn } if self.is_selected(&turn.character_id) => {
                self.live = None;
                self.error = None;
                self.notice = None;
                self.turns.push((**turn).clone());
                if let Some(view) = self.packet.as_mut() {
                    view.committed = true;
                }
                outbox.push(Command::Companion(CompanionCommand::List));
                // The card's macros may have changed the chat's variables.
                outbox.push(history(&turn.character_id));
            }
            // A turn of a chat left open elsewhere ended: its words and its error wait there.
            CompanionEvent::TurnCommitted { turn } if self.left.contains_key(&turn.character_id) => {
                if let Some(left) = self.left.get_mut(&turn.character_id) {
                    left.sent = None;
                    left.error = None;
                    left.notice = None;
                }
            }
            CompanionEvent::Cancelled { character_id } | CompanionEvent::Failed { character_id: Some(character_id), .. }
                if !self.is_selected(character_id) && self.left.contains_key(character_id) =>
            {
                if let Some(left) = self.left.get_mut(character_id) {
                    if let Some(sent) = left.sent.take() {
                        self.drafts.give_back(character_id, sent);
                    }
                    match event {
                        CompanionEvent::Failed { message, .. } => left.error = Some(message.clone()),
                        _ => left.notice = Some("Cancelled: nothing of that turn was saved.".into()),
                    }
                }
            }
            CompanionEvent::Cancelled { character_id } if self.is_selected(character_id) => {
                self.restore_input();
                self.notice = Some("Cancelled: nothing of that turn was saved.".into());
            }
            CompanionEvent::Failed { character_id, message, .. } => {
                if character_id.as_deref().is_none_or(|id| self.is_selected(id)) {
                    self.restore_input();
                    self.error = Some(message.clone());
                }
            }
            CompanionEvent::Summarised { character_id, .. } if self.is_selected(character_id) => {
                self.notice = Some("Older turns were summarised into a memory.".into());
            }
            CompanionEvent::Chats { character_id, saved } if self.is_selected(character_id) => {
                self.saved = saved.clone();
            }
            CompanionEvent::Imported { character_id, imported } if self.is_selected(character_id) => {
                let mut notice = format!("Imported {} exchange(s).", imported.exchanges);
                if imported.saved.is_some() {
                    notice.push_str(" The chat it replaced is saved below.");
                }
                for note in &imported.notes {
                    notice.push_str(&format!(" {}.", sentence(note)));
                }
                self.notice = Some(notice);
                self.packet = None;
                outbox.push(history(character_id));
                outbox.push(Command::Companion(CompanionCommand::Chats { character: character_id.clone() }));
                outbox.push(Command::Companion(CompanionCommand::List));
            }
            CompanionEvent::Exported { character_id, path, bytes } if self.is_selected(character_id) => {
                self.notice = Some(format!("Wrote {} ({bytes} bytes).", path.display()));
            }
            CompanionEvent::Changed { character_id, action, .. } if self.is_selected(character_id) => {
                self.live = None;
                self.error = None;
                self.packet = None;
                if action.starts_with("branched") || action.starts_with("opened") {
                    self.notice = Some(format!("Chat {action}."));
                    outbox.push(Command::Companion(CompanionCommand::Chats { character: character_id.clone() }));
                }
                if action.starts_with("author's note") {
                    self.note_dirty = false;
                    self.notice = Some(format!("{}.", sentence(action)));
                }
                outbox.push(history(character_id));
                outbox.push(Command::Companion(CompanionCommand::List));
            }
            CompanionEvent::Undone { character_id, .. } if self.is_selected(character_id) => {
                self.packet = None;
                outbox.push(history(character_id));
                outbox.push(Command::Companion(CompanionCommand::List));
            }
            // Another process (the CLI, a server, a second window) changed this chat: read
            // it again, and drop a question asked about the chat as it was.
            CompanionEvent::ChangedElsewhere { character_id: Some(id) } if self.is_selected(id) => {
                self.confirm_delete = None;
                if self.live.is_none() {
                    self.packet = None;
                }
                // A refusal already says so (and two lines would crowd the message box).
                if self.error.is_none() {
                    self.notice = Some("This chat was changed elsewhere (another window, the command line or the server); it has been reloaded.".into());
                }
                outbox.push(history(id));
                outbox.push(Command::Companion(CompanionCommand::Chats { character: id.clone() }));
                outbox.push(Command::Companion(CompanionCommand::List));
            }
            CompanionEvent::ChangedElsewhere { .. } => outbox.push(Command::Companion(CompanionCommand::List)),
            _ => {}
        }
    }

    /// Open `id`'s chat: what the open one leaves (its draft, error and notice, a turn
    /// still being answered) waits for it, and `id`'s comes back.
    fn open_chat(&mut self, id: Option<String>) {
        if let Some(old) = self.selected.take() {
            let left = LeftChat {
                error: self.error.take(),
                notice: self.notice.take(),
                sent: self.live.take().filter(|l| l.typed).map(|l| l.input),
            };
            if left.error.is_some() || left.notice.is_some() || left.sent.is_some() {
                self.left.insert(old, left);
            }
        }
        self.live = None;
        let back = id.as_ref().and_then(|id| self.left.remove(id)).unwrap_or_default();
        self.error = back.error;
        self.notice = back.notice;
        // Still unanswered (its end would have taken it): the reply is still being written.
        self.live = back.sent.map(|input| LiveReply { input, typed: true, ..Default::default() });
        self.selected = id;
        // The open chat's unsent words stay with it, and the new one's come back.
        self.drafts.follow(self.selected.as_deref(), &mut self.input);
    }

    /// What belongs to the character that was open: a question about one of its messages,
    /// and the chat-file path typed for it (importing it into the next character's chat
    /// would put one character's chat in another's).
    fn switched(&mut self) {
        self.confirm_delete = None;
        self.editing = None;
        self.file_path.clear();
    }

    /// A turn that stored nothing gives the user their words back to edit or resend.
    fn restore_input(&mut self) {
        if let Some(view) = self.packet.as_mut().filter(|v| !v.committed) {
            view.abandoned = true;
        }
        if let Some(live) = self.live.take()
            && live.typed
            && self.input.trim().is_empty()
        {
            self.input = live.input;
        }
    }

    pub fn show(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        ui.heading("Chat");
        ui.horizontal(|ui| {
            let label = ui.label("Character");
            let current = self
                .selected
                .as_deref()
                .and_then(|id| self.characters.iter().find(|c| c.id == id))
                .map(|c| super::short(&c.name).into_owned())
                .unwrap_or_else(|| "(none)".into());
            let mut choice = None;
            let mut open = false;
            egui::ComboBox::from_id_salt("chat_character")
                .selected_text(current)
                .show_ui(ui, |ui| {
                    open = true;
                    // The order the list opened with holds while it is open; a character
                    // added meanwhile goes last, one deleted drops out.
                    let order = self.menu_order.get_or_insert_with(|| self.characters.iter().map(|c| c.id.clone()).collect());
                    for c in &self.characters {
                        if !order.contains(&c.id) {
                            order.push(c.id.clone());
                        }
                    }
                    for id in order.iter() {
                        let Some(c) = self.characters.iter().find(|c| &c.id == id) else { continue };
                        let text = format!("{} — {}", super::short(&c.name), super::counted(c.turns as u64, "exchange", "exchanges"));
                        if ui.selectable_label(self.selected.as_deref() == Some(c.id.as_str()), text).clicked() {
                            choice = Some(c.id.clone());
                        }
                    }
                })
                .response
                .labelled_by(label.id);
            if !open {
                self.menu_order = None;
            }
            if let Some(id) = choice.filter(|id| !self.is_selected(id)) {
                self.open_chat(Some(id.clone()));
                self.turns.clear();
                self.greeting = None;
                self.greetings.clear();
                self.user = None;
                self.creator_notes.clear();
                self.variables.clear();
                self.global_variables.clear();
                self.packet = None;
                self.saved.clear();
                self.switched();
                outbox.push(watch(&id));
                outbox.push(history(&id));
                outbox.push(Command::Companion(CompanionCommand::Chats { character: id.clone() }));
            }
            if let Some(c) = self.selected.as_deref().and_then(|id| self.characters.iter().find(|c| c.id == id)) {
                ui.label(match &c.last_chat_at {
                    Some(at) => format!("last chat {at}"),
                    None => "no chat yet".into(),
                });
            }
        });
        ui.separator();
        if self.packet_elsewhere {
            self.show_conversation(ui, outbox);
            return;
        }
        let width = ui.available_width();
        ui.horizontal_top(|ui| {
            ui.vertical(|ui| {
                ui.set_width((width * 0.55).max(280.0));
                self.show_conversation(ui, outbox);
            });
            ui.separator();
            ui.vertical(|ui| {
                self.show_packet(ui);
            });
        });
    }

    /// Whether the layout shows the packet in a tile of its own (then the chat leaves it
    /// out rather than drawing it twice).
    pub fn set_packet_elsewhere(&mut self, elsewhere: bool) {
        self.packet_elsewhere = elsewhere;
    }

    /// Open `character` as the workbench did when it last closed; if the character is
    /// gone by the time the list arrives, the first one is opened instead.
    pub fn restore(&mut self, character: String) {
        self.wanted = Some(character);
    }

    /// The committed exchanges, each message with its controls (edit, delete from here),
    /// and under the last reply: regenerate and the swipes.
    fn show_turns(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>, user: &str, name: &str) {
        let busy = self.live.is_some();
        let last = self.turns.len().saturating_sub(1);
        let character = self.selected.clone().unwrap_or_default();
        // This frame's answer to "Really delete?" (`None`: no, or a new question) and a
        // question asked: applied after the transcript is drawn.
        let mut delete_answer: Option<Option<Command>> = None;
        let mut delete_ask: Option<(String, bool)> = None;
        for (i, t) in self.turns.iter().enumerate() {
            carried_lines(ui, t, &t.carried_before(), user, name);
            for (message, speaker, text, strong, at) in [
                (format!("{}-u", t.id), t.user_or(user).to_string(), &t.user_text, true, t.user_at()),
                (format!("{}-r", t.id), name.to_string(), &t.reply, false, t.reply_at()),
            ] {
                if let Some((_, draft)) = self.editing.as_mut().filter(|(m, _)| *m == message) {
                    ui.horizontal(|ui| {
                        let label = ui.label(format!("Edit {speaker}'s message"));
                        ui.add(egui::TextEdit::multiline(draft).desired_rows(2).id_salt(("chat_edit", &message))).labelled_by(label.id);
                    });
                    ui.horizontal(|ui| {
                        if ui.button("Save edit").clicked() {
                            outbox.push(Command::Companion(CompanionCommand::Edit {
                                character: character.clone(),
                                message: message.clone(),
                                text: draft.clone(),
                            }));
                            self.editing_done = true;
                        }
                        if ui.button("Cancel edit").clicked() {
                            self.editing_done = true;
                        }
                    });
                    continue;
                }
                let raw = text.to_string();
                let portraits = &mut self.portraits;
                beside_portrait(ui, (!strong).then(|| (portraits, character.as_str(), name)), outbox, |ui, outbox| ui.horizontal_wrapped(|ui| {
                    if strong {
                        ui.label(RichText::new(format!("{}: {raw}", super::short(&speaker))).strong())
                    } else {
                        ui.label(super::prose::job(ui, Some(&speaker), &raw))
                    };
                    // Each message's own time (an imported file's reply keeps its own).
                    ui.weak(sent_at(&at)).on_hover_text(format!("Sent {at}"));
                    if !busy {
                        if ui.small_button("Edit").on_hover_text("Change this message (its memory follows)").clicked() {
                            self.edit_request = Some((message.clone(), raw.clone()));
                        }
                        if !strong && ui.small_button("Branch here").on_hover_text("Save this chat as it is, and go on from this message").clicked() {
                            outbox.push(Command::Companion(CompanionCommand::Branch { character: character.clone(), message: message.clone() }));
                        }
                        let asked = self.confirm_delete.as_ref().filter(|(m, _)| *m == message).map(|(_, after)| *after);
                        if strong && let Some(and_after) = asked {
                            // The answer buttons sit right of the question, not where
                            // Delete was: a double click on Delete only asks.
                            ui.colored_label(
                                ui.visuals().warn_fg_color,
                                if and_after { "Really delete this exchange and everything after it?" } else { "Really delete this exchange?" },
                            );
                            if ui.small_button("No, keep it").clicked() {
                                delete_answer = Some(None);
                            }
                            if ui.small_button("Yes, delete").clicked() {
                                delete_answer = Some(Some(Command::Companion(CompanionCommand::Delete {
                                    character: character.clone(),
                                    message: message.clone(),
                                    and_after,
                                })));
                            }
                        } else {
                            if strong && ui.small_button("Delete").on_hover_text("Delete this exchange (your message and the reply to it); the rest of the chat stays").clicked() {
                                delete_answer = Some(None);
                                delete_ask = Some((message.clone(), false));
                            }
                            if strong && ui.small_button("Delete from here").on_hover_text("Delete this exchange and everything after it").clicked() {
                                delete_answer = Some(None);
                                delete_ask = Some((message.clone(), true));
                            }
                        }
                    }
                }));
            }
            carried_lines(ui, t, &t.carried(), user, name);
            if i == last && !busy {
                ui.horizontal(|ui| {
                    if ui.small_button("Regenerate").on_hover_text("Draw this reply again; every draw is kept").clicked() {
                        // Named, so a chat changed elsewhere meanwhile is not redrawn blind.
                        outbox.push(Command::Companion(CompanionCommand::Regenerate { character: character.clone(), expect: Some(t.id.clone()) }));
                    }
                    if ui.small_button("Continue").on_hover_text("Let the character say more, from where the reply stops").clicked() {
                        outbox.push(Command::Companion(CompanionCommand::Continue { character: character.clone() }));
                    }
                    let n = t.swipes.len().max(1);
                    if n > 1 {
                        let current = t.swipe as usize;
                        if ui.add_enabled(current > 0, egui::Button::new("Previous swipe").small()).clicked() {
                            outbox.push(Command::Companion(CompanionCommand::Swipe { character: character.clone(), index: current - 1 }));
                        }
                        ui.label(format!("swipe {} of {n}", current + 1));
                        if ui.add_enabled(current + 1 < n, egui::Button::new("Next swipe").small()).clicked() {
                            outbox.push(Command::Companion(CompanionCommand::Swipe { character: character.clone(), index: current + 1 }));
                        }
                    }
                });
            }
            ui.add_space(6.0);
        }
        if let Some(answer) = delete_answer {
            self.confirm_delete = delete_ask;
            outbox.extend(answer);
        }
        if let Some(request) = self.edit_request.take() {
            self.editing = Some(request);
        }
        if self.editing_done {
            self.editing = None;
            self.editing_done = false;
        }
    }

    /// Who the user plays in this chat: a persona chosen here, or the configured name.
    fn show_persona(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        let (Some(character), Some(user)) = (self.selected.clone(), self.user.as_ref()) else { return };
        // The picture is decoded once per persona, not per frame.
        let wanted = user.persona_id.clone().filter(|_| user.image_png.is_some());
        if self.picture.as_ref().map(|(id, _)| id) != wanted.as_ref() {
            self.picture = match (&wanted, &user.image_png) {
                (Some(id), Some(bytes)) => crate::character::rgba(bytes).ok().map(|(w, h, pixels)| {
                    let image = egui::ColorImage::from_rgba_unmultiplied([w as usize, h as usize], &pixels);
                    (id.clone(), ui.ctx().load_texture(format!("persona-{id}"), image, egui::TextureOptions::LINEAR))
                }),
                _ => None,
            };
        }
        let mut choice: Option<Option<String>> = None;
        ui.horizontal(|ui| {
            if let Some((_, texture)) = &self.picture {
                ui.add(egui::Image::new(texture).max_size(egui::vec2(48.0, 48.0)).alt_text(format!("{}'s picture", user.name)));
            }
            let label = ui.label("You play");
            let current = if user.persona_id.is_some() { user.name.clone() } else { format!("{} (no persona)", user.name) };
            egui::ComboBox::from_id_salt("chat_persona")
                .selected_text(current)
                .show_ui(ui, |ui| {
                    if ui.selectable_label(user.persona_id.is_none(), "No persona").clicked() {
                        choice = Some(None);
                    }
                    for p in &self.personas {
                        if ui.selectable_label(user.persona_id.as_deref() == Some(p.id.as_str()), &p.name).clicked() {
                            choice = Some(Some(p.id.clone()));
                        }
                    }
                })
                .response
                .labelled_by(label.id);
        });
        if let Some(persona) = choice.filter(|p| *p != user.persona_id) {
            outbox.push(Command::Companion(CompanionCommand::UsePersona { character, persona }));
        }
    }

    /// The greeting, and while nothing has been said yet, its swipes (the card's greetings).
    fn show_greeting(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>, name: &str, greeting: &str) {
        let character = self.selected.clone().unwrap_or_default();
        let id = crate::companion::turn::control::GREETING;
        if let Some((_, draft)) = self.editing.as_mut().filter(|(m, _)| m == id) {
            ui.horizontal(|ui| {
                let label = ui.label(format!("Edit {}'s greeting", super::short(name)));
                ui.add(egui::TextEdit::multiline(draft).desired_rows(2).id_salt(("chat_edit", id))).labelled_by(label.id);
            });
            ui.horizontal(|ui| {
                if ui.button("Save edit").clicked() {
                    outbox.push(Command::Companion(CompanionCommand::Edit { character: character.clone(), message: id.into(), text: draft.clone() }));
                    self.editing_done = true;
                }
                if ui.button("Cancel edit").clicked() {
                    self.editing_done = true;
                }
            });
            return;
        }
        let busy = self.live.is_some();
        let raw = greeting.to_string();
        let mut edit = false;
        beside_portrait(ui, Some((&mut self.portraits, character.as_str(), name)), outbox, |ui, _| {
            ui.horizontal_wrapped(|ui| {
                ui.label(super::prose::job(ui, Some(name), greeting));
                edit = !busy && ui.small_button("Edit greeting").on_hover_text("Change how this chat opens (the card keeps its own)").clicked();
            })
        });
        if edit {
            self.edit_request = Some((id.to_string(), raw));
        }
        let n = self.greetings.len();
        if n > 1 && self.turns.is_empty() && self.live.is_none() {
            let character = self.selected.clone().unwrap_or_default();
            let current = self.greeting_swipe as usize;
            ui.horizontal(|ui| {
                if ui.add_enabled(current > 0, egui::Button::new("Previous greeting").small()).clicked() {
                    outbox.push(Command::Companion(CompanionCommand::Swipe { character: character.clone(), index: current - 1 }));
                }
                ui.label(format!("greeting {} of {n}", current + 1));
                if ui.add_enabled(current + 1 < n, egui::Button::new("Next greeting").small()).clicked() {
                    outbox.push(Command::Companion(CompanionCommand::Swipe { character, index: current + 1 }));
                }
            });
        }
    }

    /// The lorebooks that fire in this chat (the card's own, the character's, the
    /// chat's), and the rest of the library to attach.
    fn show_lorebooks(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        use crate::companion::lore::BookSource;
        let Some(character) = self.selected.clone() else { return };
        let attached = self.books.iter().filter(|b| b.source.is_some()).count();
        egui::CollapsingHeader::new(format!("Lorebooks ({attached} attached)")).id_salt("chat_lorebooks").show(ui, |ui| {
            for book in &self.books {
                ui.horizontal(|ui| {
                    let command = |attach: bool, to_character: bool| {
                        Command::Companion(CompanionCommand::ChatLorebook { character: character.clone(), lorebook: book.id.clone(), attach, to_character })
                    };
                    match book.source {
                        Some(BookSource::Card) => {
                            ui.label(format!("{} — the card's own book", book.name));
                        }
                        Some(BookSource::Character) => {
                            ui.label(format!("{} — attached to the character (chat and scenes)", book.name));
                            if ui.small_button(format!("Detach {}", book.name)).clicked() {
                                outbox.push(command(false, true));
                            }
                        }
                        Some(BookSource::Chat) => {
                            ui.label(format!("{} — attached to this chat", book.name));
                            if ui.small_button(format!("Detach {}", book.name)).clicked() {
                                outbox.push(command(false, false));
                            }
                        }
                        None => {
                            ui.weak(&book.name);
                            if ui.small_button(format!("Attach {} to this chat", book.name)).clicked() {
                                outbox.push(command(true, false));
                            }
                            if ui.small_button(format!("Attach {} to the character", book.name)).on_hover_text("It fires in its scenes too").clicked() {
                                outbox.push(command(true, true));
                            }
                        }
                    }
                });
            }
            if self.books.is_empty() {
                ui.weak("The library has no lorebooks; import one in the Library panel.");
            }
        });
    }

    /// The chat's Author's Note: the user's standing instruction, where it goes and how
    /// often, saved for this chat only.
    fn show_author_note(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        use crate::companion::model::{AuthorNote, NotePosition, NoteRole};
        let Some(character) = self.selected.clone() else { return };
        let title = match &self.author_note {
            Some(note) if !note.text.trim().is_empty() => format!("Author's Note ({})", crate::companion::note_summary(note)),
            _ => "Author's Note (none)".to_string(),
        };
        egui::CollapsingHeader::new(title).id_salt("chat_author_note").show(ui, |ui| {
            let draft = &mut self.note_draft;
            let before = draft.clone();
            ui.weak("Your standing instruction for this chat, sent with the prompt; {{char}} and {{user}} are filled in.");
            let label = ui.label("Note text");
            ui.add(
                egui::TextEdit::multiline(&mut draft.text)
                    .hint_text("e.g. Keep the scene tense; it is raining.")
                    .desired_rows(3)
                    .desired_width(f32::INFINITY)
                    .id_salt("chat_note_text"),
            )
            .labelled_by(label.id);
            ui.horizontal_wrapped(|ui| {
                let where_label = ui.label("Where");
                egui::ComboBox::from_id_salt("chat_note_position")
                    .selected_text(match draft.position {
                        NotePosition::InChat => "in the chat",
                        NotePosition::BeforeCharacter => "before the character",
                        NotePosition::AfterCharacter => "after the character",
                    })
                    .show_ui(ui, |ui| {
                        ui.selectable_value(&mut draft.position, NotePosition::InChat, "in the chat");
                        ui.selectable_value(&mut draft.position, NotePosition::BeforeCharacter, "before the character");
                        ui.selectable_value(&mut draft.position, NotePosition::AfterCharacter, "after the character");
                    })
                    .response
                    .labelled_by(where_label.id);
                let in_chat = draft.position == NotePosition::InChat;
                ui.add_enabled_ui(in_chat, |ui| {
                    let label = ui.label("depth");
                    ui.add(egui::DragValue::new(&mut draft.depth).range(0..=10_000)).labelled_by(label.id).on_hover_text("Messages from the end of the chat");
                    let role_label = ui.label("said");
                    egui::ComboBox::from_id_salt("chat_note_role")
                        .selected_text(match draft.role {
                            NoteRole::System => "as the system",
                            NoteRole::User => "as the user",
                            NoteRole::Assistant => "as the assistant",
                        })
                        .show_ui(ui, |ui| {
                            ui.selectable_value(&mut draft.role, NoteRole::System, "as the system");
                            ui.selectable_value(&mut draft.role, NoteRole::User, "as the user");
                            ui.selectable_value(&mut draft.role, NoteRole::Assistant, "as the assistant");
                        })
                        .response
                        .labelled_by(role_label.id);
                });
                let label = ui.label("every");
                ui.add(egui::DragValue::new(&mut draft.every).range(0..=10_000)).labelled_by(label.id).on_hover_text("1: every user message; 0: paused");
                ui.label(if draft.every == 1 { "user message" } else { "user messages" });
            });
            if *draft != before {
                self.note_dirty = true;
            }
            let next = match draft.next_in(self.user_messages) {
                None => "Paused: not sent.".to_string(),
                Some(_) if draft.due(self.user_messages + 1) => "Goes with your next message.".to_string(),
                Some(n) => format!("Next goes with user message {} (the chat has {}).", self.user_messages + n, self.user_messages),
            };
            ui.weak(next);
            ui.horizontal(|ui| {
                let busy = self.live.is_some();
                let changed = self.author_note.clone().unwrap_or_default() != self.note_draft;
                if ui.add_enabled(!busy && changed, egui::Button::new("Save note")).clicked() {
                    outbox.push(Command::Companion(CompanionCommand::AuthorNote { character: character.clone(), note: Some(self.note_draft.clone()) }));
                }
                if ui.add_enabled(!busy && self.author_note.is_some(), egui::Button::new("Remove note")).clicked() {
                    self.note_draft = AuthorNote::default();
                    outbox.push(Command::Companion(CompanionCommand::AuthorNote { character: character.clone(), note: None }));
                }
            });
        });
    }

    /// The chats put aside (open one), and SillyTavern chat files in and out.
    fn show_chat_files(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        let Some(character) = self.selected.clone() else { return };
        let busy = self.live.is_some();
        egui::CollapsingHeader::new(format!("Chats and chat files ({} saved)", self.saved.len())).id_salt("chat_files").show(ui, |ui| {
            if ui.add_enabled(!busy, egui::Button::new("New chat")).on_hover_text("Start again from the greeting; this chat is saved below").clicked() {
                outbox.push(Command::Companion(CompanionCommand::NewChat { character: character.clone() }));
            }
            // Which saved chat is being retitled (its id and the title typed so far), or is
            // asked about before it is deleted: kept in egui's memory, this section's own.
            let renaming_id = egui::Id::unique("chat_files_renaming_saved_chat");
            let deleting_id = egui::Id::unique("chat_files_deleting_saved_chat");
            let mut renaming: Option<(String, String)> = ui.data(|d| d.get_temp(renaming_id));
            let mut deleting: Option<String> = ui.data(|d| d.get_temp(deleting_id));
            for saved in &self.saved {
                ui.horizontal(|ui| {
                    if let Some((id, title)) = renaming.as_mut().filter(|(id, _)| *id == saved.id) {
                        let label = ui.label("New title");
                        ui.add(egui::TextEdit::singleline(title).desired_width(240.0).id_salt(("saved_chat_title", id.as_str()))).labelled_by(label.id);
                        let ready = !title.trim().is_empty();
                        if ui.add_enabled(ready, egui::Button::new("Save title").small()).clicked() {
                            outbox.push(Command::Companion(CompanionCommand::RenameChat { character: character.clone(), chat: id.clone(), title: title.trim().to_string() }));
                            renaming = None;
                        } else if ui.button("Cancel rename").clicked() {
                            renaming = None;
                        }
                        return;
                    }
                    ui.label(format!("{} — {}, {}", saved.title, super::counted(saved.turns as u64, "exchange", "exchanges"), saved.saved_at));
                    if ui.add_enabled(!busy, egui::Button::new("Open").small()).on_hover_text("Play this chat; the current one is saved").clicked() {
                        outbox.push(Command::Companion(CompanionCommand::Open { character: character.clone(), chat: saved.id.clone() }));
                    }
                    if ui.add(egui::Button::new("Rename chat").small()).on_hover_text("Give this saved chat a title of your own").clicked() {
                        renaming = Some((saved.id.clone(), saved.title.clone()));
                    }
                    if deleting.as_deref() == Some(saved.id.as_str()) {
                        if ui.add(egui::Button::new("Delete for good").small()).on_hover_text("This saved chat cannot be brought back").clicked() {
                            outbox.push(Command::Companion(CompanionCommand::DeleteChat { character: character.clone(), chat: saved.id.clone() }));
                            deleting = None;
                        } else if ui.add(egui::Button::new("Keep it").small()).clicked() {
                            deleting = None;
                        }
                    } else if ui.add(egui::Button::new("Delete chat").small()).on_hover_text("Delete this saved chat (asks first)").clicked() {
                        deleting = Some(saved.id.clone());
                    }
                });
            }
            ui.data_mut(|d| {
                match renaming {
                    Some(r) => {
                        d.insert_temp(renaming_id, r);
                    }
                    None => d.remove::<(String, String)>(renaming_id),
                }
                match deleting {
                    Some(id) => {
                        d.insert_temp(deleting_id, id);
                    }
                    None => d.remove::<String>(deleting_id),
                }
            });
            ui.horizontal(|ui| {
                let label = ui.label("Chat file");
                ui.add(egui::TextEdit::singleline(&mut self.file_path).hint_text("path/to/chat.jsonl").id_salt("chat_file_path")).labelled_by(label.id);
                let request = || {
                    super::platform::FileRequest::save("Chat file to import, or to write", self.file_path.trim())
                        .filter("Chats", &["jsonl", "md", "json"])
                };
                if let Some(path) = self.file_picker.button(ui, "Browse…", request).and_then(|p| p.into_iter().next()) {
                    self.file_path = path.display().to_string();
                }
                let path = super::platform::typed_path(&self.file_path);
                let ready = !busy && !self.file_path.trim().is_empty();
                if ui.add_enabled(ready, egui::Button::new("Import chat")).on_hover_text("Read a SillyTavern .jsonl chat; the current chat is saved").clicked() {
                    outbox.push(Command::Companion(CompanionCommand::Import { character: character.clone(), path: path.clone() }));
                }
                if ui.add_enabled(ready, egui::Button::new("Export chat")).on_hover_text("Write this chat: .jsonl (SillyTavern), .md or .json, by the file's extension").clicked() {
                    let format = match path.extension().and_then(|e| e.to_str()) {
                        Some("md") => crate::companion::chats::ChatFormat::Markdown,
                        Some("json") => crate::companion::chats::ChatFormat::Json,
                        _ => crate::companion::chats::ChatFormat::Jsonl,
                    };
                    outbox.push(Command::Companion(CompanionCommand::Export { character: character.clone(), path, format }));
                }
            });
        });
    }

    /// The variables the card's macros keep (`{{setvar}}`), so a score or a mood the
    /// prompt reads can be seen; only when there are any.
    fn show_variables(&self, ui: &mut egui::Ui) {
        let count = self.variables.len() + self.global_variables.len();
        if count == 0 {
            return;
        }
        egui::CollapsingHeader::new(format!("Variables ({count})")).id_salt("chat_variables").show(ui, |ui| {
            let rows = self.variables.iter().map(|(k, v)| (k, v, "")).chain(self.global_variables.iter().map(|(k, v)| (k, v, " (global)")));
            egui::Grid::new("chat_variables_grid").num_columns(2).striped(true).show(ui, |ui| {
                for (name, value, scope) in rows {
                    ui.label(format!("{name}{scope}"));
                    ui.add(egui::Label::new(value.as_str()).wrap());
                    ui.end_row();
                }
            });
        });
    }

    fn show_conversation(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        let user = self.user.as_ref().map(|u| u.name.clone()).unwrap_or_else(|| "You".into());
        let user = user.as_str();
        self.show_persona(ui, outbox);
        self.show_chat_files(ui, outbox);
        self.show_lorebooks(ui, outbox);
        self.show_author_note(ui, outbox);
        let name = self
            .selected
            .as_deref()
            .and_then(|id| self.characters.iter().find(|c| c.id == id))
            .map(|c| c.name.clone())
            .unwrap_or_default();
        if !self.creator_notes.trim().is_empty() {
            egui::CollapsingHeader::new("Creator's notes (never sent to the model)").id_salt("chat_creator_notes").show(ui, |ui| {
                ui.label(self.creator_notes.trim());
            });
        }
        self.show_variables(ui);
        ui.horizontal(|ui| {
            let label = ui.label("Search chat");
            ui.add(egui::TextEdit::singleline(&mut self.search).desired_width(220.0).id_salt("chat_search")).labelled_by(label.id);
            if let Some(id) = self.selected.clone()
                && ui.button("Whole chat").on_hover_text("Load every exchange, not only the last 200").clicked()
            {
                outbox.push(Command::Companion(CompanionCommand::History { character: id, limit: u32::MAX }));
            }
        });
        let needle = self.search.trim().to_lowercase();
        if !needle.is_empty() {
            // Every message that has the words, one line each; only the rows in view are drawn.
            let found: Vec<String> = self
                .turns
                .iter()
                .flat_map(|t| [(t.seq, t.user_or(user), &t.user_text), (t.seq, name.as_str(), &t.reply)])
                .filter(|(_, _, text)| text.to_lowercase().contains(&needle))
                .map(|(seq, who, text)| format!("#{seq} · {who}: {}", text.replace('\n', " ")))
                .collect();
            ui.weak(format!("{} in the {} loaded", super::counted(found.len() as u64, "matching message", "matching messages"), super::counted(self.turns.len() as u64, "exchange", "exchanges")));
            let row = ui.text_style_height(&egui::TextStyle::Body) + ui.spacing().item_spacing.y;
            egui::ScrollArea::vertical().id_salt("chat_search_results").max_height(360.0).show_rows(ui, row, found.len(), |ui, rows| {
                for line in &found[rows] {
                    ui.add(egui::Label::new(line.as_str()).truncate()).on_hover_text(line.as_str());
                }
            });
            return;
        }
        // Room below for the message box and its buttons, and the notice and error lines.
        let lines = [self.notice.is_some(), self.error.is_some()].into_iter().filter(|l| *l).count() as f32;
        let height = (ui.available_height() - 110.0 - lines * 2.0 * ui.text_style_height(&egui::TextStyle::Body)).max(120.0);
        egui::ScrollArea::vertical().id_salt("chat_transcript").max_height(height).min_scrolled_height(height).auto_shrink([false, false]).stick_to_bottom(true).show(ui, |ui| {
            let from_the_start = self.turns.first().is_none_or(|t| t.seq <= 1);
            match self.greeting.clone().filter(|_| from_the_start) {
                Some(greeting) => {
                    self.show_greeting(ui, outbox, &name, &greeting);
                    ui.add_space(6.0);
                }
                None if self.turns.is_empty() && self.live.is_none() => {
                    ui.weak("No messages yet. Say hello.");
                }
                None => {}
            }
            self.show_turns(ui, outbox, user, &name);
            if let Some(live) = &self.live {
                ui.label(RichText::new(format!("{user}: {}", live.input)).strong());
                for d in &live.discarded {
                    ui.colored_label(ui.visuals().warn_fg_color, d);
                }
                let character = self.selected.clone().unwrap_or_default();
                beside_portrait(ui, Some((&mut self.portraits, character.as_str(), name.as_str())), outbox, |ui, _| {
                    ui.horizontal_wrapped(|ui| {
                        ui.label(super::prose::job(ui, Some(&name), &live.text));
                        ui.spinner();
                        if let Some(holder) = &live.waiting {
                            ui.weak(format!("waiting for the embedded model: {holder}"));
                        }
                    })
                });
            }
        });
        if let Some(notice) = &self.notice {
            ui.weak(notice);
        }
        if let Some(error) = &self.error {
            ui.colored_label(ui.visuals().error_fg_color, error);
        }
        ui.separator();
        let busy = self.live.is_some();
        self.drafts.follow(self.selected.as_deref(), &mut self.input);
        let label = ui.label("Message");
        let edit = egui::TextEdit::multiline(&mut self.input)
            .hint_text("Write to the character (Ctrl+Enter sends)")
            .desired_rows(2)
            .desired_width(f32::INFINITY)
            .id_salt("chat_input");
        // The box stays enabled while the reply is written (a disabled widget loses the
        // keyboard, and the keys typed next went to the workbench's shortcuts); only
        // sending waits for the reply.
        let response = ui.add(edit).labelled_by(label.id);
        if std::mem::take(&mut self.refocus) {
            response.request_focus();
        }
        // The key event's own modifiers, not the frame's: when Ctrl goes down, Enter is
        // pressed and Ctrl comes up within one frame (a quick hand, a busy window, a
        // first message while the chat is being opened), the frame's modifiers say
        // "no Ctrl" by its end and the shortcut was missed.
        let ctrl_enter = response.has_focus() && ui.input_mut(|i| i.consume_key(egui::Modifiers::COMMAND, egui::Key::Enter));
        ui.horizontal(|ui| {
            let can_send = !busy && self.selected.is_some() && !self.input.trim().is_empty();
            if (ui.add_enabled(can_send, egui::Button::new("Send")).clicked() || (ctrl_enter && can_send))
                && let Some(id) = self.selected.clone()
            {
                let text = std::mem::take(&mut self.input).trim().to_string();
                self.error = None;
                self.notice = None;
                self.live = Some(LiveReply { input: text.clone(), typed: true, ..Default::default() });
                self.refocus = true;
                outbox.push(Command::Companion(CompanionCommand::Send { character: id, text, now: None }));
            }
            // Esc stops the reply being written, as the button does.
            let escape = busy && ui.input_mut(|i| i.consume_key(egui::Modifiers::NONE, egui::Key::Escape));
            if busy
                && (ui.button("Cancel").on_hover_text("Stop the reply; nothing of this turn is saved (Esc)").clicked() || escape)
                && let Some(id) = self.selected.clone()
            {
                outbox.push(Command::Companion(CompanionCommand::Cancel { character: id }));
            }
            if !busy
                && !self.turns.is_empty()
                && ui.button("Undo last").on_hover_text("Take back the last exchange and its memories").clicked()
                && let Some(id) = self.selected.clone()
            {
                // The exchange on screen is the one to take back; the engine refuses when
                // the chat's last is another (changed elsewhere since it was read).
                let expect = self.turns.last().map(|t| t.id.clone());
                outbox.push(Command::Companion(CompanionCommand::Undo { character: id, expect }));
            }
        });
    }

    fn show_packet(&mut self, ui: &mut egui::Ui) {
        let Some(view) = &self.packet else {
            ui.weak("The packet of the last turn appears here: every block as sent, with its token count.");
            return;
        };
        ui.horizontal(|ui| {
            ui.strong("Packet");
            ui.label(format!(
                "{} tokens of {} · attempt {} · {}",
                view.packet.tokens,
                view.packet.max_context_tokens,
                view.attempt,
                if view.committed {
                    "committed"
                } else if view.abandoned {
                    "ended: no reply was kept"
                } else {
                    "sending"
                }
            ));
        });
        for note in &view.packet.notes {
            ui.weak(format!("• {note}"));
        }
        let mut open = None;
        egui::ScrollArea::vertical().id_salt("chat_packet").show(ui, |ui| {
            for block in &view.packet.blocks {
                // The budget governs the block's content, not its tags and fixed words:
                // "content 140 of 2,300" says what it allowed; the total is what was sent.
                let budget = match (block.content_tokens, block.budget) {
                    (Some(content), Some(budget)) => format!(" (content {content} of {budget})"),
                    (None, Some(budget)) => format!(" (budget {budget})"),
                    _ => String::new(),
                };
                let dropped = if block.dropped.is_empty() { String::new() } else { format!(", {} dropped", block.dropped.len()) };
                egui::CollapsingHeader::new(format!("<{}>  {} tokens{budget}{dropped}", block.tag, block.tokens))
                    .id_salt(("packet_block", &block.tag))
                    .default_open(matches!(block.tag.as_str(), "memory_bank" | "distance_context" | "user_input"))
                    .show(ui, |ui| {
                        ui.label(RichText::new(&block.text).monospace());
                        for d in &block.dropped {
                            ui.weak(format!("dropped {} ({} tokens): {}", d.id, d.tokens, d.reason));
                        }
                    });
            }
            ui.separator();
            ui.strong(format!("Memories in this packet: {}", view.hits.len()));
            if view.hits.is_empty() {
                ui.weak("No memory bank this turn.");
            }
            // Fused scores are on the fusion's own scale: bars are relative to the best.
            let best = view.hits.iter().map(|h| h.score).fold(0.0f32, f32::max);
            for hit in &view.hits {
                ui.horizontal(|ui| {
                    ui.label(format!("#{}", hit.rank));
                    score_bar(ui, "fused", Some(hit.score), best);
                    score_bar(ui, "keyword", hit.keyword_score, 20.0);
                    score_bar(ui, "vector", hit.vector_score, 1.0);
                    if ui.small_button("Open").on_hover_text("Show in the memory browser").clicked() {
                        open = Some(hit.id.clone());
                    }
                });
                ui.label(RichText::new(&hit.text).small());
            }
        });
        if open.is_some() {
            self.open_memory = open;
        }
    }
}

/// A message drawn by `add`, with its speaker's portrait to its left when `portrait`
/// names a character (the user's own messages have none).
fn beside_portrait<R>(
    ui: &mut egui::Ui,
    portrait: Option<(&mut super::portrait::Portraits, &str, &str)>,
    outbox: &mut Vec<Command>,
    add: impl FnOnce(&mut egui::Ui, &mut Vec<Command>) -> R,
) -> R {
    match portrait {
        Some((portraits, id, name)) => {
            ui.horizontal_top(|ui| {
                portraits.show(ui, id, name, super::portrait::SIZE, outbox);
                ui.vertical(|ui| add(ui, outbox)).inner
            })
            .inner
        }
        None => add(ui, outbox),
    }
}

/// An imported chat's messages that came in a row: read by the model, shown, not edited here.
fn carried_lines(ui: &mut egui::Ui, turn: &ChatTurn, carried: &[crate::companion::model::CarriedMessage], user: &str, name: &str) {
    for m in carried {
        ui.horizontal_wrapped(|ui| {
            ui.label(RichText::new(format!("{}: {}", super::short(m.speaker(turn, user, name)), m.text)).weak())
                .on_hover_text("From the imported chat file: sent to the model with the chat; not edited or swiped here");
            ui.weak(sent_at(&m.at)).on_hover_text(format!("Sent {}", m.at));
        });
    }
}

/// A message's time as shown beside it: `2026-11-24 19:03` (UTC, as stored), or the
/// stored text when it is not a time.
fn sent_at(at: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(at).map(|t| t.format("%Y-%m-%d %H:%M").to_string()).unwrap_or_else(|_| at.to_string())
}

/// `text` with its first letter capitalised, to stand as a sentence.
fn sentence(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|first| first.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// Ask the engine to watch this chat for changes another process makes.
fn watch(character_id: &str) -> Command {
    Command::Companion(CompanionCommand::Watch { character: Some(character_id.to_string()) })
}

fn history(character_id: &str) -> Command {
    Command::Companion(CompanionCommand::History { character: character_id.to_string(), limit: HISTORY_LIMIT })
}

/// The score's name beside a bar that holds only its number, so neither is cut off at
/// the bar's width; "–" when that list did not return the memory (a pinned memory).
fn score_bar(ui: &mut egui::Ui, label: &str, value: Option<f32>, scale: f32) {
    ui.weak(label);
    match value {
        Some(value) => {
            let fraction = if scale > 0.0 { (value / scale).clamp(0.0, 1.0) } else { 0.0 };
            ui.add(egui::ProgressBar::new(fraction).desired_width(56.0).text(format!("{value:.2}"))).on_hover_text(format!("{label} score {value:.4}"));
        }
        None => {
            ui.label("–").on_hover_text(format!("not in the {label} results"));
        }
    }
}

impl super::Panel for ChatPanel {
    fn kinds(&self) -> &'static [super::PanelKind] {
        &[super::PanelKind::Chat, super::PanelKind::Packet]
    }

    fn startup(&self) -> Vec<crate::engine::Command> {
        ChatPanel::startup()
    }

    fn apply(&mut self, event: &crate::engine::Event, outbox: &mut Vec<crate::engine::Command>) {
        self.portraits.apply(event);
        match event {
            crate::engine::Event::Companion(e) => ChatPanel::apply(self, e, outbox),
            // The library changed (a card imported or dropped, a character deleted or
            // renamed): the chat's character list is a view of it, so ask again.
            crate::engine::Event::Interop(crate::interop::InteropEvent::Library { .. }) => {
                outbox.push(crate::engine::Command::Companion(crate::companion::CompanionCommand::List))
            }
            _ => {}
        }
    }

    fn show(&mut self, kind: super::PanelKind, ui: &mut egui::Ui, outbox: &mut Vec<crate::engine::Command>) {
        match kind {
            super::PanelKind::Packet => self.show_packet(ui),
            _ => ChatPanel::show(self, ui, outbox),
        }
    }
}
