//! The event log strip at the bottom of the window.

use crate::engine::{CoreEvent, Event, LogLevel};
use std::collections::VecDeque;

const KEEP: usize = 1000;

#[derive(Default)]
pub struct EventLog {
    lines: VecDeque<(LogLevel, String)>,
}

/// Longest line kept, in characters.
const LINE_CHARS: usize = 240;

fn clip(text: &str) -> String {
    let one_line = text.replace('\n', " ");
    match one_line.char_indices().nth(LINE_CHARS) {
        Some((cut, _)) => format!("{}…", &one_line[..cut]),
        None => one_line,
    }
}

fn companion_line(event: &crate::companion::CompanionEvent) -> Option<(LogLevel, String)> {
    use crate::companion::CompanionEvent as E;
    match event {
        E::Token { .. } | E::Characters { .. } | E::History { .. } | E::Idle { .. } | E::Chats { .. } => None,
        E::Imported { imported, .. } => Some((
            LogLevel::Info,
            format!("chat: imported {} exchange(s), {} message(s) kept for export only", imported.exchanges, imported.notes.len()),
        )),
        E::Exported { path, bytes, .. } => Some((LogLevel::Info, format!("chat: wrote {} ({bytes} bytes)", path.display()))),
        E::TurnStarted { name, attempt, packet, .. } => {
            Some((LogLevel::Info, format!("chat: {name}, attempt {attempt}, packet of {} tokens sent", packet.tokens)))
        }
        E::Discarded { attempt, reason, .. } => Some((LogLevel::Warn, format!("chat: reply {attempt} discarded: {reason}"))),
        E::TurnCommitted { turn } => Some((
            LogLevel::Info,
            format!(
                "chat: exchange {} saved ({} + {} tokens, {} memories in the packet{})",
                turn.seq,
                turn.prompt_tokens,
                turn.completion_tokens,
                turn.hits.len(),
                if turn.from_cache { ", from the cache" } else { "" }
            ),
        )),
        E::Cancelled { .. } => Some((LogLevel::Warn, "chat: reply cancelled, nothing saved".into())),
        E::Failed { message, .. } => Some((LogLevel::Error, format!("chat: {message}"))),
        E::Summarised { memory_id, .. } => Some((LogLevel::Info, format!("chat: older turns summarised into memory {memory_id}"))),
        E::Undone { turn_id, .. } => Some((LogLevel::Info, format!("chat: took back exchange {}", turn_id.as_deref().unwrap_or("(none)")))),
        E::DemoReady { character_id: Some(id) } => Some((LogLevel::Info, format!("chat: demo companion added ({id})"))),
        E::DemoReady { character_id: None } => None,
        E::Changed { action, turn, deleted, .. } => Some((
            LogLevel::Info,
            match turn {
                Some(t) => format!("chat: exchange {} {action} (swipe {} of {})", t.seq, t.swipe + 1, t.swipes.len()),
                None => format!("chat: {action} {} exchange(s)", deleted.len()),
            },
        )),
    }
}

fn author_line(event: &crate::scene::author::AuthorEvent) -> Option<(LogLevel, String)> {
    use crate::scene::author::AuthorEvent as E;
    match event {
        E::Authored { action, kind, name, impact, .. } => {
            let gone = impact.as_ref().filter(|i| !i.is_empty()).map(|i| format!(" with {}", i.describe())).unwrap_or_default();
            Some((LogLevel::Info, format!("{action} {kind} {name}{gone}")))
        }
        E::TranscriptExported { path, messages, .. } => Some((LogLevel::Info, format!("exported {messages} messages to {}", path.display()))),
        E::Tree { .. } | E::Personas { .. } => None,
    }
}

fn memory_line(event: &crate::memory::MemoryEvent) -> Option<(LogLevel, String)> {
    use crate::memory::MemoryEvent as E;
    let info = |text: String| Some((LogLevel::Info, text));
    match event {
        // Progress is shown by the memory browser; a line every 250 ms would bury the log.
        E::ImportProgress { .. } | E::ReindexProgress { .. } | E::IndexRebuildProgress { .. } => None,
        // Snapshots the panels asked for.
        E::Stats { .. } | E::Context { .. } | E::Injections { .. } | E::InjectionHistory { .. } => None,
        E::SearchResults { query, hits, elapsed_ms, .. } => {
            info(format!("memory: {} hits for {query:?} in {elapsed_ms:.1} ms", hits.len()))
        }
        E::Imported { summary } => info(format!(
            "memory: imported {} turns from {} ({:.0}/s)",
            summary.imported, summary.path, summary.per_second
        )),
        E::Evaluated { report } => info(format!(
            "memory: eval of {} questions, {:?}: recall@5 {:.3}, recall@10 {:.3}",
            report.questions, report.mode, report.recall_at_5, report.recall_at_10
        )),
        E::IndexRebuilding { vectors } => info(format!("memory: rebuilding the vector graph over {vectors} vectors in the background")),
        E::IndexRebuilt { vectors, elapsed_ms } => {
            info(format!("memory: vector graph rebuilt over {vectors} vectors in {:.1} s", *elapsed_ms as f64 / 1000.0))
        }
        E::Reindexed { embedded } => info(format!("memory: reindexed, {embedded} memories embedded")),
        E::LoreIndexed { report } => info(format!(
            "memory: {} lore files, {} indexed ({} chunks), {} unchanged, {} removed",
            report.files, report.indexed, report.chunks, report.unchanged, report.removed
        )),
        E::Curated { curated } => info(match curated.ids.as_slice() {
            [one] => format!("memory: {} {one}", curated.action),
            many => format!("memory: {} {} memories", curated.action, many.len()),
        }),
    }
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
            Event::Companion(e) => companion_line(e),
            Event::Memory(e) => memory_line(e),
            // Snapshots a panel asked for, and streamed tokens: the panels show them.
            Event::Scene(
                crate::scene::SceneEvent::Token { .. }
                | crate::scene::SceneEvent::State { .. }
                | crate::scene::SceneEvent::Scenes { .. }
                | crate::scene::SceneEvent::Snapshot { .. }
                | crate::scene::SceneEvent::Preview { .. },
            ) => None,
            Event::Author(e) => author_line(e),
            // Snapshots for the panels: the config, the library's lists.
            Event::Llm(crate::engine::LlmEvent::Config { .. } | crate::engine::LlmEvent::Calls { .. }) => None,
            Event::Interop(crate::interop::InteropEvent::Library { .. }) => None,
            Event::Scene(crate::scene::SceneEvent::DemoReady { scene_id }) => scene_id.as_ref().map(|id| (LogLevel::Info, format!("demo scene added ({id})"))),
            other => serde_json::to_string(other).ok().map(|s| (LogLevel::Info, s)),
        };
        // One row each: the strip is a log, the panels hold the details.
        let line = line.map(|(level, text)| (level, clip(&text)));
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
                    ui.add(egui::Label::new(egui::RichText::new(text).monospace().color(color)).truncate());
                }
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryEvent;

    #[test]
    fn progress_and_tokens_get_no_line_and_a_memory_outcome_one_plain_line() {
        let mut log = EventLog::default();
        for done in [0, 1000, 2000] {
            log.record(&Event::Memory(MemoryEvent::IndexRebuildProgress { done, total: 5000 }));
        }
        log.record(&Event::Memory(MemoryEvent::ImportProgress { done: 1, total: 2 }));
        let token = crate::scene::SceneEvent::Token { scene_id: "s".into(), round: 1, character_id: "c".into(), text: "Hi".into() };
        log.record(&Event::Scene(token));
        assert_eq!(log.lines().count(), 0);
        log.record(&Event::Memory(MemoryEvent::IndexRebuilding { vectors: 5000 }));
        log.record(&Event::Memory(MemoryEvent::IndexRebuilt { vectors: 5000, elapsed_ms: 2500 }));
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(
            lines,
            [
                "memory: rebuilding the vector graph over 5000 vectors in the background",
                "memory: vector graph rebuilt over 5000 vectors in 2.5 s"
            ]
        );
    }
}

impl super::Panel for EventLog {
    fn kinds(&self) -> &'static [super::PanelKind] {
        &[]
    }

    fn apply(&mut self, event: &crate::engine::Event, outbox: &mut Vec<crate::engine::Command>) {
        let _ = outbox;
        self.record(event);
    }

    fn show(&mut self, kind: super::PanelKind, ui: &mut egui::Ui, outbox: &mut Vec<crate::engine::Command>) {
        let _ = (kind, outbox);
        EventLog::show(self, ui);
    }
}
