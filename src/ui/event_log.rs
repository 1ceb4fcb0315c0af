//! The event log strip at the bottom of the window.

use crate::engine::{CoreEvent, Event, LogLevel};
use std::collections::VecDeque;

const KEEP: usize = 1000;

#[derive(Default)]
pub struct EventLog {
    lines: VecDeque<(LogLevel, String)>,
    /// Identity runs' names by id, so a line says whose checkpoint it was (several runs
    /// can wait at once: "checkpoint 1 approved" alone named nobody).
    runs: std::collections::HashMap<String, String>,
    /// Chat characters' names by id, so a chat line says whose chat it was as the Chat
    /// panel names it (it named the character's id, which the user never sees).
    chats: std::collections::HashMap<String, String>,
    /// Scenes' names by id, for the same reason.
    scenes: std::collections::HashMap<String, String>,
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
            match imported.notes.as_slice() {
                [] => format!("chat: imported {} exchange(s)", imported.exchanges),
                notes => format!("chat: imported {} exchange(s); {}", imported.exchanges, notes.join("; ")),
            },
        )),
        E::Exported { path, bytes, .. } => Some((LogLevel::Info, format!("chat: wrote {} ({bytes} bytes)", path.display()))),
        E::TurnStarted { name, attempt, packet, .. } => {
            Some((LogLevel::Info, format!("chat: {name}, attempt {attempt}, packet of {} tokens sent", packet.tokens)))
        }
        E::Discarded { attempt, reason, .. } => Some((LogLevel::Warn, format!("chat: reply {attempt} discarded: {reason}"))),
        E::Waiting { holder, .. } => Some((LogLevel::Info, format!("chat: waiting for the embedded model: {holder}"))),
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
        E::CancelRequested { running: false, .. } => Some((LogLevel::Info, "chat: cancel asked, but no reply was being written".into())),
        E::CancelRequested { .. } => None,
        E::Failed { message, .. } => Some((LogLevel::Error, format!("chat: {message}"))),
        E::Summarised { memory_id, .. } => Some((LogLevel::Info, format!("chat: older turns summarised into memory {memory_id}"))),
        E::Undone { turn_id: Some(_), .. } => Some((LogLevel::Info, "chat: took back the last exchange".into())),
        E::Undone { turn_id: None, .. } => Some((LogLevel::Info, "chat: nothing to take back".into())),
        E::DemoReady { character_id: Some(_) } => Some((LogLevel::Info, "chat: demo companion added".into())),
        E::DemoReady { character_id: None } => None,
        E::ChangedElsewhere { character_id: Some(_) } => Some((LogLevel::Info, "chat: changed in another process; reloaded".into())),
        E::ChangedElsewhere { character_id: None } => None,
        E::Changed { action, turn, deleted, .. } => Some((
            LogLevel::Info,
            match turn {
                Some(t) => format!("chat: exchange {} {action} (swipe {} of {})", t.seq, t.swipe + 1, t.swipes.len()),
                None if deleted.is_empty() => format!("chat: {action}"),
                None => format!("chat: {action} {} exchange(s)", deleted.len()),
            },
        )),
    }
}

/// The character whose chat `event` is about, when it says.
fn chat_character(event: &crate::companion::CompanionEvent) -> Option<&str> {
    use crate::companion::CompanionEvent as E;
    match event {
        E::TurnStarted { character_id, .. }
        | E::Discarded { character_id, .. }
        | E::Waiting { character_id, .. }
        | E::Cancelled { character_id }
        | E::CancelRequested { character_id, .. }
        | E::Summarised { character_id, .. }
        | E::Undone { character_id, .. }
        | E::Changed { character_id, .. }
        | E::Imported { character_id, .. }
        | E::Exported { character_id, .. } => Some(character_id),
        E::TurnCommitted { turn } => Some(&turn.character_id),
        E::Failed { character_id, .. } | E::ChangedElsewhere { character_id } => character_id.as_deref(),
        E::Token { .. } | E::Characters { .. } | E::History { .. } | E::Chats { .. } | E::Idle { .. } | E::DemoReady { .. } => None,
    }
}

fn identity_line(event: &crate::identity::IdentityEvent) -> Option<(LogLevel, String)> {
    use crate::identity::IdentityEvent as E;
    let info = |text: String| Some((LogLevel::Info, text));
    match event {
        E::Token { .. } | E::Snapshot { .. } | E::Runs { .. } => None,
        E::RunStarted { name, mode, .. } => info(format!("identity: developing {name} ({})", mode.label())),
        E::WaveStarted { wave, agents, .. } => info(format!("identity: wave {wave} started: {}", agents.join(", "))),
        E::AgentStarted { checkpoint, agent, version, .. } => info(format!("identity: {} writing checkpoint {checkpoint} (version {version})", agent.title())),
        E::CheckpointReady { checkpoint_number, message, tokens, wall_ms, .. } => {
            info(format!("identity: checkpoint {checkpoint_number}: {message} ({tokens} tokens, {:.1} s)", *wall_ms as f64 / 1000.0))
        }
        E::CheckpointApproved { checkpoint_number, .. } => info(format!("identity: checkpoint {checkpoint_number} approved")),
        E::CheckpointRejected { checkpoint_number, .. } => info(format!("identity: checkpoint {checkpoint_number} sent back with feedback")),
        E::CheckpointReopened { checkpoint_number, .. } => info(format!("identity: checkpoint {checkpoint_number} re-opened")),
        E::CheckpointStale { checkpoint_number, .. } => Some((LogLevel::Warn, format!("identity: checkpoint {checkpoint_number} is stale"))),
        E::WaveComplete { wave, next_wave, .. } => info(format!("identity: wave {wave} complete, next: {}", next_wave.as_str().map(str::to_string).unwrap_or_else(|| next_wave.to_string()))),
        E::CharacterComplete { message, total_tokens, .. } => info(format!("identity: {message} ({total_tokens} tokens)")),
        E::Idle { awaiting_approval, stale, failed, .. } => {
            let list = |v: &[u8]| v.iter().map(u8::to_string).collect::<Vec<_>>().join(", ");
            let mut parts = Vec::new();
            if !awaiting_approval.is_empty() {
                parts.push(format!("awaiting approval: {}", list(awaiting_approval)));
            }
            if !stale.is_empty() {
                parts.push(format!("stale: {}", list(stale)));
            }
            if !failed.is_empty() {
                parts.push(format!("failed: {}", list(failed)));
            }
            (!parts.is_empty()).then(|| (LogLevel::Info, format!("identity: waiting for you — {}", parts.join("; "))))
        }
        E::Error { checkpoint, message, .. } => Some((
            LogLevel::Error,
            match checkpoint {
                Some(n) => format!("identity: checkpoint {n}: {message}"),
                None => format!("identity: {message}"),
            },
        )),
        E::Cancelled { checkpoint, .. } => Some((LogLevel::Warn, format!("identity: checkpoint {checkpoint} cancelled"))),
        E::CancelRequested { checkpoints, .. } => info(format!("identity: asked checkpoint(s) {:?} to stop", checkpoints)),
        E::Exported { path, .. } => info(format!("identity: wrote {}", path.display())),
    }
}

fn scene_line(event: &crate::scene::SceneEvent) -> Option<(LogLevel, String)> {
    use crate::scene::SceneEvent as E;
    let info = |text: String| Some((LogLevel::Info, text));
    match event {
        E::Token { .. }
        | E::State { .. }
        | E::Scenes { .. }
        | E::Snapshot { .. }
        | E::Lore { .. }
        | E::Preview { .. }
        | E::Transcript { .. }
        | E::Alternatives { .. } => None,
        E::DemoReady { scene_id } => scene_id.as_ref().map(|_| (LogLevel::Info, "scene: demo scene added".into())),
        E::ChangedElsewhere { scene_id } => scene_id.as_ref().map(|_| (LogLevel::Info, "scene: changed in another process; reloaded".into())),
        E::SceneCreated { name, .. } => info(format!("scene: created {name}")),
        E::RoundStarted { round, input, .. } => info(match input {
            Some(text) => format!("scene: round {round} started: {text}"),
            None => format!("scene: round {round} started (continue)"),
        }),
        E::PlanReview { round, plan, .. } => info(format!("scene: round {round} waits for your review of the plan ({} acting)", plan.acting_characters.len())),
        E::DirectorDecided { round, pass, decision, .. } => info(format!("scene: round {round}, Director pass {pass}: {}", decision_line(decision))),
        E::CharacterStarted { name, .. } => info(format!("scene: {name} is acting")),
        E::CharacterFinished { name, delta, .. } => info(if delta.is_empty() {
            format!("scene: {name} finished")
        } else {
            let fields: Vec<String> = crate::scene::model::STATE_FIELDS.iter().filter_map(|f| delta.get(f).map(|v| format!("{f} {v}"))).collect();
            format!("scene: {name} finished ({})", fields.join(", "))
        }),
        E::NarratorStarted { .. } => info("scene: the narrator is writing".into()),
        E::Waiting { round, agent, holder: Some(holder), .. } => info(format!("scene: round {round}: {agent} waits for the embedded model: {holder}")),
        E::Waiting { holder: None, .. } => None,
        E::Redrawn { name, reason, .. } => Some((LogLevel::Warn, format!("scene: a reply of {name} was drawn again: {reason}"))),
        E::NarratorFinished { .. } => info("scene: the narrator finished".into()),
        E::RoundCompleted { round, messages, conflicts, tokens, notices, .. } => {
            let saved = format!(
                "scene: round {round} saved: {} messages, {tokens} tokens{}",
                messages.len(),
                if conflicts.is_empty() { String::new() } else { format!(", the Director overrode {} claim(s)", conflicts.len()) }
            );
            // A dropped reconciliation is a warning: the round stands, but less of it than planned.
            if notices.is_empty() { info(saved) } else { Some((LogLevel::Warn, format!("{saved} — {}", notices.join("; ")))) }
        }
        E::WorldDecided { decision, .. } => info(format!("scene: the world set {} tracker(s), {} minutes passed", decision.trackers.len(), decision.elapsed_minutes)),
        E::RoundCancelled { .. } => Some((LogLevel::Warn, "scene: round cancelled, nothing saved".into())),
        E::RoundUndone { round, .. } => info(format!("scene: round {round} taken back")),
        E::Muted { name, muted, .. } => info(format!("scene: {name} {}", if *muted { "muted" } else { "unmuted" })),
        E::CastChanged { name, added, .. } => info(format!("scene: {name} {}", if *added { "joined the cast" } else { "left the cast" })),
        E::CancelRequested { running, .. } => info(if *running { "scene: cancel asked".to_string() } else { "scene: no round to cancel".to_string() }),
        E::AlternativeChosen { round, .. } => info(format!("scene: a kept version of round {round} is back")),
        E::RedoFailed { round, message, .. } => Some((LogLevel::Error, format!("scene: redo of round {round} failed, the round is back as it was: {message}"))),
        E::MessageEdited { number, .. } => info(format!("scene: message {number} edited")),
        E::MessageDeleted { number, .. } => info(format!("scene: message {number} deleted")),
        E::SummaryStarted { .. } => None,
        E::SummaryUpdated { scene, through_round, .. } => info(format!("scene: the summary of {scene} now covers rounds 1–{through_round}")),
        E::SummaryFailed { message, .. } => Some((LogLevel::Warn, format!("scene: summary not written: {message}"))),
        E::Error { message, .. } => Some((LogLevel::Error, format!("scene: {message}"))),
    }
}

fn decision_line(decision: &crate::scene::DirectorDecision) -> String {
    let value = serde_json::to_value(decision).unwrap_or_default();
    let names = |key: &str| -> Vec<String> {
        value.get(key).and_then(|v| v.as_array()).map(|a| a.iter().filter_map(|x| x["name"].as_str().map(str::to_string)).collect()).unwrap_or_default()
    };
    let acting = names("actingCharacters");
    if !acting.is_empty() || value.get("actingCharacters").is_some() {
        let mut line = if acting.is_empty() { "nobody acts".to_string() } else { format!("{} act", acting.join(", ")) };
        for (key, verb) in [("activations", "enter"), ("deactivations", "leave")] {
            let who = names(key);
            if !who.is_empty() {
                line.push_str(&format!("; {} {verb}", who.join(", ")));
            }
        }
        return line;
    }
    let changed = value.get("stateUpdates").and_then(|v| v.as_object()).map_or(0, |o| o.len());
    let facts = value.get("newFacts").and_then(|v| v.as_array()).map_or(0, |a| a.len());
    format!("reconciled: {changed} state change(s), {facts} new fact(s)")
}

fn interop_line(event: &crate::interop::InteropEvent) -> Option<(LogLevel, String)> {
    use crate::interop::InteropEvent as E;
    let info = |text: String| Some((LogLevel::Info, text));
    match event {
        E::Library { .. } | E::Entries { changed: None, .. } | E::Sheet { saved: false, .. } | E::LoreTest { .. } | E::DeleteImpact { .. } | E::Portrait { .. } | E::Refused { .. } => None,
        E::ImportReport { created, skipped, warnings } => Some((
            if skipped.iter().any(|s| s.error) { LogLevel::Warn } else { LogLevel::Info },
            format!("library: imported {} item(s), skipped {} file(s), {} warning(s)", created.len(), skipped.len(), warnings.len()),
        )),
        E::Exported { name, format, path, bytes, .. } => info(format!("library: wrote {name} as {format} to {} ({bytes} bytes)", path.display())),
        E::Entries { name, changed: Some((what, at)), .. } => info(format!("library: {name}: entry {at} {what}")),
        E::Sheet { sheet, saved: true } => info(format!("library: saved the sheet of {}", sheet.name)),
        E::CharacterDeleted { name, impact, .. } => info(format!("library: deleted {name}{}", if impact.is_empty() { String::new() } else { format!(" with {}", impact.join(", ")) })),
    }
}

fn llm_line(event: &crate::engine::LlmEvent) -> Option<(LogLevel, String)> {
    use crate::engine::LlmEvent as E;
    match event {
        E::ProfileToken { .. } | E::Config { .. } | E::Calls { .. } => None,
        E::ProfileTestStarted { profile } => Some((LogLevel::Info, format!("providers: testing {profile}"))),
        E::ProfileTested { profile, ok: true, model, latency_ms, .. } => Some((LogLevel::Info, format!("providers: {profile} ({model}) answered in {latency_ms} ms"))),
        E::ProfileTested { profile, error, .. } => Some((LogLevel::Error, format!("providers: {profile} failed: {}", error.clone().unwrap_or_default()))),
        E::ConfigSaved => Some((LogLevel::Info, "providers: configuration saved".into())),
        // A check is the panel asking as a profile is selected: shown there, not logged.
        E::KeyStatus { action: crate::engine::KeyAction::Checked, .. } => None,
        E::KeyStatus { profile, problem: Some(problem), .. } => Some((LogLevel::Warn, format!("providers: {profile}: {problem}"))),
        E::KeyStatus { profile, source, .. } => Some((LogLevel::Info, format!("providers: {profile}: {}", source.line()))),
    }
}

fn author_line(event: &crate::scene::author::AuthorEvent) -> Option<(LogLevel, String)> {
    use crate::scene::author::AuthorEvent as E;
    match event {
        E::Authored { action, kind, name, impact, .. } => {
            let gone = impact.as_ref().filter(|i| !i.is_empty()).map(|i| format!(" with {}", i.describe())).unwrap_or_default();
            Some((LogLevel::Info, format!("{}{gone}", crate::scene::author::authored_sentence(action, kind, name))))
        }
        E::TranscriptExported { path, messages, .. } => Some((LogLevel::Info, format!("exported {messages} messages to {}", path.display()))),
        E::Tree { .. } | E::Personas { .. } | E::Budgets { .. } | E::LorebookUse { .. } => None,
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
        // The memory browser's own list, read again after every change: a line each
        // time buried the log under "the 0 newest memories listed".
        E::SearchResults { query, .. } if query.trim().is_empty() => None,
        E::SearchResults { query, hits, elapsed_ms, .. } => info(format!("memory: {} hits for {query:?} in {elapsed_ms:.1} ms", hits.len())),
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
        E::Exported { path: Some(path), memories, .. } => info(format!("memory: {memories} memories written to {path}")),
        E::Exported { path: None, .. } => None,
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
            // Every event says what happened in one plain line; snapshots a panel asked
            // for and streamed tokens get none (the panels show them).
            Event::Llm(e) => llm_line(e),
            Event::Identity(e) => {
                use crate::identity::IdentityEvent as E;
                match e {
                    E::Runs { runs } => self.runs.extend(runs.iter().map(|r| (r.id.clone(), r.name.clone()))),
                    E::RunStarted { character_id, name, .. } => {
                        self.runs.insert(character_id.clone(), name.clone());
                    }
                    E::Snapshot { view } => {
                        self.runs.insert(view.run.id.clone(), view.run.name.clone());
                    }
                    _ => {}
                }
                let whose = e.character_id().and_then(|id| self.runs.get(id));
                identity_line(e).map(|(level, line)| match (whose, line.strip_prefix("identity: ")) {
                    (Some(name), Some(rest)) if !matches!(e, E::RunStarted { .. }) => (level, format!("identity: {name}: {rest}")),
                    _ => (level, line),
                })
            }
            Event::Companion(e) => {
                use crate::companion::CompanionEvent as E;
                match e {
                    E::Characters { characters } => self.chats.extend(characters.iter().map(|c| (c.id.clone(), c.name.clone()))),
                    E::History { character_id, name, .. } | E::TurnStarted { character_id, name, .. } => {
                        self.chats.insert(character_id.clone(), name.clone());
                    }
                    _ => {}
                }
                let whose = chat_character(e).and_then(|id| self.chats.get(id));
                companion_line(e).map(|(level, line)| match (whose, line.strip_prefix("chat: ")) {
                    // A turn's first line names its character already.
                    (Some(name), Some(rest)) if !matches!(e, E::TurnStarted { .. }) => (level, format!("chat with {name}: {rest}")),
                    _ => (level, line),
                })
            }
            Event::Memory(e) => memory_line(e),
            Event::Scene(e) => {
                use crate::scene::SceneEvent as E;
                match e {
                    E::Scenes { scenes } => self.scenes.extend(scenes.iter().map(|s| (s.id.clone(), s.name.clone()))),
                    E::SceneCreated { scene_id, name } => {
                        self.scenes.insert(scene_id.clone(), name.clone());
                    }
                    E::State { view } => {
                        self.scenes.insert(view.id.clone(), view.name.clone());
                    }
                    E::Snapshot { snapshot } => {
                        self.scenes.insert(snapshot.view.id.clone(), snapshot.view.name.clone());
                    }
                    _ => {}
                }
                // Only the line that named the scene by its id takes its name: a round's
                // lines belong to the scene on screen, and crowding each with its name
                // would bury what happened.
                let named = match e {
                    E::ChangedElsewhere { scene_id } => scene_id.as_ref().and_then(|id| self.scenes.get(id)),
                    _ => None,
                };
                scene_line(e).map(|(level, line)| match (named, line.strip_prefix("scene: ")) {
                    (Some(name), Some(rest)) => (level, format!("scene {name}: {rest}")),
                    _ => (level, line),
                })
            }
            Event::Author(e) => author_line(e),
            Event::Interop(e) => interop_line(e),
        };
        // One row each: the strip is a log, the panels hold the details.
        let line = line.map(|(level, text)| (level, clip(&text)));
        if let Some(line) = line {
            self.push(line.0, line.1);
        }
    }

    pub fn push_warn(&mut self, text: &str) {
        self.push(LogLevel::Warn, clip(text));
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

    /// No event reaches the strip as raw JSON: a round, a plan, an import and a profile
    /// test each read as one plain sentence.
    #[test]
    fn every_event_is_one_plain_line() {
        use crate::scene::SceneEvent;
        let mut log = EventLog::default();
        let plan = crate::scene::model::DirectorPlan {
            acting_characters: vec![crate::scene::model::ActingCharacter { name: "Wren".into(), guidance: String::new(), priority: 1, order: None, forced: false }],
            activations: vec![crate::scene::model::Activation { name: "Ossian".into(), entry_guidance: String::new() }],
            ..Default::default()
        };
        log.record(&Event::Scene(SceneEvent::RoundStarted { scene_id: "s".into(), round: 3, input: Some("Knock.".into()) }));
        log.record(&Event::Scene(SceneEvent::DirectorDecided { scene_id: "s".into(), round: 3, pass: 1, decision: crate::scene::DirectorDecision::Plan(Box::new(plan)) }));
        log.record(&Event::Scene(SceneEvent::RoundCompleted {
            scene_id: "s".into(),
            round: 3,
            messages: Vec::new(),
            active: Vec::new(),
            conflicts: Vec::new(),
            tokens: 812,
            notices: Vec::new(),
        }));
        log.record(&Event::Interop(crate::interop::InteropEvent::ImportReport { created: Vec::new(), skipped: Vec::new(), warnings: Vec::new() }));
        log.record(&Event::Interop(crate::interop::InteropEvent::Library { characters: Vec::new(), lorebooks: Vec::new() }));
        log.record(&Event::Llm(crate::engine::LlmEvent::ConfigSaved));
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(
            lines,
            [
                "scene: round 3 started: Knock.",
                "scene: round 3, Director pass 1: Wren act; Ossian enter",
                "scene: round 3 saved: 0 messages, 812 tokens",
                "library: imported 0 item(s), skipped 0 file(s), 0 warning(s)",
                "providers: configuration saved",
            ]
        );
    }

    /// A round whose reconciliation was dropped is saved, but the log says so, as a
    /// warning, with what was not applied.
    #[test]
    fn a_dropped_reconciliation_is_a_warning_in_the_log() {
        use crate::scene::SceneEvent;
        let mut log = EventLog::default();
        let notice = "Director pass 2 (reconciliation) was dropped, so its state updates, in-fiction time, trackers and new facts were not applied: no valid Reconciliation after 3 attempt(s)";
        log.record(&Event::Scene(SceneEvent::RoundCompleted {
            scene_id: "s".into(),
            round: 4,
            messages: Vec::new(),
            active: Vec::new(),
            conflicts: Vec::new(),
            tokens: 90,
            notices: vec![notice.into()],
        }));
        assert_eq!(log.lines.back().map(|(level, _)| *level), Some(LogLevel::Warn));
        let line = log.lines().last().unwrap_or_default();
        assert!(line.starts_with("scene: round 4 saved: 0 messages, 90 tokens — Director pass 2 (reconciliation) was dropped"), "{line}");
    }

    /// A chat line names the character whose chat it is, as the Chat panel does, and a
    /// scene changed elsewhere its scene: they named the character's or the scene's id
    /// (`chat: 01J…'s chat changed in another process`), which the user never sees.
    #[test]
    fn chat_and_scene_lines_name_the_character_and_the_scene_not_their_ids() {
        use crate::companion::CompanionEvent as C;
        use crate::scene::SceneEvent as S;
        let mut log = EventLog::default();
        let ilse = crate::companion::model::ChatCharacter { id: "01JCHAT".into(), name: "Ilse Marrow".into(), origin: "demo".into(), turns: 0, last_chat_at: None };
        log.record(&Event::Companion(C::DemoReady { character_id: Some("01JCHAT".into()) }));
        log.record(&Event::Companion(C::Characters { characters: vec![ilse] }));
        log.record(&Event::Companion(C::ChangedElsewhere { character_id: Some("01JCHAT".into()) }));
        log.record(&Event::Companion(C::Undone { character_id: "01JCHAT".into(), turn_id: Some("01JTURN".into()) }));
        log.record(&Event::Companion(C::Failed { character_id: Some("01JCHAT".into()), message: "the chat changed since you looked".into(), fault: crate::context::Fault::Conflict }));
        log.record(&Event::Companion(C::Cancelled { character_id: "01JOTHER".into() }));
        let summary = crate::scene::model::SceneSummary { id: "01JSCENE".into(), name: "Harbour at dusk".into(), campaign: String::new(), arc: String::new(), rounds: 0, active: 0 };
        log.record(&Event::Scene(S::Scenes { scenes: vec![summary] }));
        log.record(&Event::Scene(S::ChangedElsewhere { scene_id: Some("01JSCENE".into()) }));
        log.record(&Event::Scene(S::DemoReady { scene_id: Some("01JSCENE".into()) }));
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(
            lines,
            [
                "chat: demo companion added",
                "chat with Ilse Marrow: changed in another process; reloaded",
                "chat with Ilse Marrow: took back the last exchange",
                "chat with Ilse Marrow: the chat changed since you looked",
                "chat: reply cancelled, nothing saved",
                "scene Harbour at dusk: changed in another process; reloaded",
                "scene: demo scene added",
            ]
        );
        assert!(!lines.iter().any(|l| l.contains("01J")), "no id in a line: {lines:?}");
    }

    /// With several runs waiting, each identity line names its run.
    #[test]
    fn identity_lines_name_their_run() {
        use crate::identity::IdentityEvent as E;
        let mut log = EventLog::default();
        log.record(&Event::Identity(E::RunStarted { character_id: "a".into(), name: "Wren Abernethy".into(), mode: crate::identity::schema::Mode::Fast }));
        log.record(&Event::Identity(E::CheckpointApproved { character_id: "a".into(), checkpoint_number: 1 }));
        log.record(&Event::Identity(E::Idle { character_id: "b".into(), awaiting_approval: vec![2], stale: Vec::new(), failed: Vec::new() }));
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines[1..], ["identity: Wren Abernethy: checkpoint 1 approved", "identity: waiting for you — awaiting approval: 2"]);
    }

    #[test]
    fn progress_and_tokens_get_no_line_and_a_memory_outcome_one_plain_line() {
        let mut log = EventLog::default();
        for done in [0, 1000, 2000] {
            log.record(&Event::Memory(MemoryEvent::IndexRebuildProgress { done, total: 5000 }));
        }
        log.record(&Event::Memory(MemoryEvent::ImportProgress { done: 1, total: 2 }));
        let token = crate::scene::SceneEvent::Token { scene_id: "s".into(), round: 1, character_id: "c".into(), text: "Hi".into() };
        log.record(&Event::Scene(token));
        // The memory browser's list, read again after each authoring action, is no news.
        let listed = MemoryEvent::SearchResults { query: String::new(), mode: Default::default(), hits: Vec::new(), elapsed_ms: 0.1 };
        log.record(&Event::Memory(listed));
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
        &[super::PanelKind::Events]
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
