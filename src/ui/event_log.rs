//! The event log strip at the bottom of the window.

use crate::engine::{CoreEvent, Event, LogLevel};
use std::collections::VecDeque;

const KEEP: usize = 1000;

#[derive(Default)]
pub struct EventLog {
    lines: VecDeque<(LogLevel, String)>,
}

impl EventLog {
    /// Keep a line for events worth a line; streamed tokens are not.
    pub fn record(&mut self, event: &Event) {
        let line = match event {
            Event::Core(CoreEvent::Log { level, message }) => Some((*level, message.clone())),
            Event::Core(CoreEvent::Error { context, message }) => Some((LogLevel::Error, format!("{context}: {message}"))),
            Event::Core(CoreEvent::Stopped) => Some((LogLevel::Warn, "engine stopped".to_string())),
            Event::Llm(crate::engine::LlmEvent::ProfileToken { .. }) => None,
            Event::Identity(
                crate::identity::IdentityEvent::Token { .. }
                | crate::identity::IdentityEvent::Snapshot { .. }
                | crate::identity::IdentityEvent::Runs { .. },
            ) => None,
            other => serde_json::to_string(other).ok().map(|s| (LogLevel::Info, s)),
        };
        if let Some(line) = line {
            self.push(line.0, line.1);
        }
    }

    pub fn push_error(&mut self, context: &str, message: &str) {
        self.push(LogLevel::Error, format!("{context}: {message}"));
    }

    fn push(&mut self, level: LogLevel, text: String) {
        if self.lines.len() == KEEP {
            self.lines.pop_front();
        }
        self.lines.push_back((level, text));
    }

    pub fn lines(&self) -> impl Iterator<Item = &str> {
        self.lines.iter().map(|(_, s)| s.as_str())
    }

    pub fn show(&self, ui: &mut egui::Ui) {
        ui.label(egui::RichText::new("Event log").small().strong());
        let row_height = ui.text_style_height(&egui::TextStyle::Monospace);
        egui::ScrollArea::vertical().stick_to_bottom(true).auto_shrink([false, false]).show_rows(
            ui,
            row_height,
            self.lines.len(),
            |ui, range| {
                for (level, text) in self.lines.range(range) {
                    let color = match level {
                        LogLevel::Info => ui.visuals().text_color(),
                        LogLevel::Warn => ui.visuals().warn_fg_color,
                        LogLevel::Error => ui.visuals().error_fg_color,
                    };
                    ui.label(egui::RichText::new(text).monospace().color(color));
                }
            },
        );
    }
}
