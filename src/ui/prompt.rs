//! The Prompt panel: every recent LLM call of every agent — identity agents, the
//! Director, characters, the narrator, the summariser, the companion — with its
//! messages exactly as sent, the sampler settings, and the reply or the error.

use crate::engine::{Command, LlmCommand};
use crate::llm::calls::CallRecord;
use egui::RichText;

/// Calls fetched per refresh.
const LIMIT: u32 = 200;

#[derive(Default)]
pub struct PromptPanel {
    calls: Vec<CallRecord>,
    selected: Option<i64>,
    filter: String,
    loading: bool,
    /// The log was fetched at least once (it may be empty).
    loaded: bool,
    /// Something new was probably sent since the last refresh.
    stale: bool,
}

impl PromptPanel {
    pub fn calls(&self) -> &[CallRecord] {
        &self.calls
    }

    pub fn apply(&mut self, calls: &[CallRecord]) {
        self.calls = calls.to_vec();
        self.loading = false;
        self.loaded = true;
        if self.selected.is_none_or(|id| !self.calls.iter().any(|c| c.id == id)) {
            self.selected = self.calls.first().map(|c| c.id);
        }
    }

    /// A call ended somewhere in the engine: refresh when the panel is next shown.
    pub fn mark_stale(&mut self) {
        self.stale = true;
    }

    fn refresh(&mut self, outbox: &mut Vec<Command>) {
        self.loading = true;
        self.stale = false;
        outbox.push(Command::Llm(LlmCommand::Calls { limit: LIMIT }));
    }

    pub fn show(&mut self, ui: &mut egui::Ui, outbox: &mut Vec<Command>) {
        if !self.loading && (self.stale || !self.loaded) {
            self.refresh(outbox);
        }
        ui.heading("Prompt");
        ui.horizontal(|ui| {
            ui.label(format!("The newest {} LLM calls, exactly as sent.", self.calls.len()));
            if ui.button("Refresh").clicked() {
                self.refresh(outbox);
            }
            let label = ui.label("Filter");
            ui.add(egui::TextEdit::singleline(&mut self.filter).hint_text("text in the prompt or reply").desired_width(220.0))
                .labelled_by(label.id);
        });
        ui.separator();
        let needle = self.filter.trim().to_lowercase();
        let shown: Vec<&CallRecord> = self
            .calls
            .iter()
            .filter(|c| {
                needle.is_empty()
                    || c.request.messages.iter().any(|m| m.content.to_lowercase().contains(&needle))
                    || c.reply.as_deref().is_some_and(|r| r.to_lowercase().contains(&needle))
            })
            .collect();
        let mut pick = None;
        let selected = self.selected.and_then(|id| self.calls.iter().find(|c| c.id == id));
        // Beside each other when the tile is wide; in a narrow tile (a column of the
        // *Play a scene* layout) the list sits above the call it opens.
        if ui.available_width() >= 720.0 {
            ui.horizontal_top(|ui| {
                ui.vertical(|ui| {
                    ui.set_width(360.0);
                    pick = call_list(ui, &shown, self.selected, f32::INFINITY);
                });
                ui.separator();
                ui.vertical(|ui| call_detail(ui, selected));
            });
        } else {
            let height = (ui.available_height() * 0.4).max(120.0);
            pick = call_list(ui, &shown, self.selected, height);
            ui.separator();
            call_detail(ui, selected);
        }
        if pick.is_some() {
            self.selected = pick;
        }
    }
}

/// The calls, newest first, one selectable entry each; returns the one clicked.
fn call_list(ui: &mut egui::Ui, shown: &[&CallRecord], selected: Option<i64>, max_height: f32) -> Option<i64> {
    let mut pick = None;
    egui::ScrollArea::vertical().id_salt("prompt_calls").max_height(max_height).show(ui, |ui| {
        for call in shown {
            let text = format!(
                "{}  {} · {} · {}+{} tok · {} ms{}\n{}",
                call.at.get(11..19).unwrap_or(&call.at),
                call.profile,
                call.model,
                call.prompt_tokens,
                call.completion_tokens,
                call.elapsed_ms,
                if call.from_cache { " · cached" } else if call.error.is_some() { " · failed" } else { "" },
                first_line(call)
            );
            if ui.selectable_label(selected == Some(call.id), text).clicked() {
                pick = Some(call.id);
            }
        }
    });
    pick
}

fn call_detail(ui: &mut egui::Ui, call: Option<&CallRecord>) {
    let Some(call) = call else {
        ui.weak("Pick a call to read its prompt.");
        return;
    };
    egui::ScrollArea::vertical().id_salt("prompt_detail").show(ui, |ui| show_call(ui, call));
}

/// What identifies a call in the list: the start of its system prompt (the agent's
/// role is stated there), else of its first message.
fn first_line(call: &CallRecord) -> String {
    let text = call.request.messages.first().map(|m| m.content.as_str()).unwrap_or_default();
    let line = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('<')).unwrap_or_default();
    let mut out: String = line.chars().take(70).collect();
    if line.chars().count() > 70 {
        out.push('…');
    }
    out
}

fn show_call(ui: &mut egui::Ui, call: &CallRecord) {
    ui.strong(format!("{} via {} ({})", call.model, call.profile, call.provider));
    let sampler = serde_json::to_string(&call.request.sampler).unwrap_or_default();
    ui.weak(format!("sampler {sampler} · format {:?} · stream {}", call.request.response_format, call.request.stream));
    for (i, message) in call.request.messages.iter().enumerate() {
        egui::CollapsingHeader::new(format!("{:?} message ({} chars)", message.role, message.content.chars().count()))
            .id_salt(("prompt_message", call.id, i))
            .default_open(true)
            .show(ui, |ui| {
                ui.label(RichText::new(&message.content).monospace());
            });
    }
    ui.separator();
    match (&call.reply, &call.error) {
        (Some(reply), _) => {
            ui.strong(format!("Reply ({})", call.finish_reason.as_deref().unwrap_or("?")));
            ui.label(RichText::new(reply).monospace());
        }
        (None, Some(error)) => {
            ui.colored_label(ui.visuals().error_fg_color, error);
        }
        (None, None) => {}
    }
}

impl super::Panel for PromptPanel {
    fn kinds(&self) -> &'static [super::PanelKind] {
        &[super::PanelKind::Prompt]
    }

    fn apply(&mut self, event: &crate::engine::Event, _outbox: &mut Vec<crate::engine::Command>) {
        if let crate::engine::Event::Llm(crate::engine::LlmEvent::Calls { calls }) = event {
            PromptPanel::apply(self, calls);
        }
    }

    fn show(&mut self, kind: super::PanelKind, ui: &mut egui::Ui, outbox: &mut Vec<crate::engine::Command>) {
        let _ = kind;
        PromptPanel::show(self, ui, outbox);
    }
}
