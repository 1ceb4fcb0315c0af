//! Events as a person reads them: what each verb prints without `--json`.

use crate::engine::{CoreEvent, Event, LlmEvent};
use crate::interop::InteropEvent;
use crate::scene::SceneEvent;
use crate::scene::model::SceneView;
use std::io::Write;

pub(super) fn print_human(out: &mut impl Write, event: &Event) -> std::io::Result<()> {
    match event {
        Event::Core(CoreEvent::Log { message, .. }) => writeln!(out, "{message}"),
        Event::Core(CoreEvent::Error { .. }) | Event::Core(CoreEvent::Stopped) => Ok(()),
        Event::Llm(LlmEvent::ProfileToken { text, .. }) => write!(out, "{text}"),
        Event::Llm(LlmEvent::ProfileTested { ok: true, provider, model, usage, latency_ms, .. }) => writeln!(
            out,
            "\nok: {provider}, model {model}, {latency_ms} ms, {} prompt + {} completion tokens{}",
            usage.prompt_tokens,
            usage.completion_tokens,
            if usage.reported { "" } else { " (estimated)" }
        ),
        Event::Llm(LlmEvent::ProfileTested { ok: false, .. }) => Ok(()),
        Event::Llm(LlmEvent::ProfileTestStarted { profile }) => writeln!(out, "testing {profile}…"),
        Event::Identity(e) => print_identity(out, e),
        Event::Interop(e) => print_interop(out, e),
        Event::Scene(e) => print_scene(out, e),
        other => match serde_json::to_string(other) {
            Ok(line) => writeln!(out, "{line}"),
            Err(_) => Ok(()),
        },
    }
}

fn print_identity(out: &mut impl Write, event: &crate::identity::IdentityEvent) -> std::io::Result<()> {
    use crate::identity::IdentityEvent as E;
    match event {
        E::RunStarted { character_id, name, mode } => writeln!(out, "developing {name} ({character_id}), mode {}", mode.label()),
        E::WaveStarted { wave, agents, .. } => writeln!(out, "wave {wave}: {}", agents.join(", ")),
        E::AgentStarted { checkpoint, agent, version, .. } => writeln!(out, "  {checkpoint} {} running (version {version})", agent.name()),
        E::Token { .. } => Ok(()),
        E::CheckpointReady { checkpoint_number, message, tokens, wall_ms, .. } => {
            writeln!(out, "  {checkpoint_number} ready: {message} ({tokens} tokens, {:.1}s)", *wall_ms as f64 / 1000.0)
        }
        E::CheckpointApproved { checkpoint_number, .. } => writeln!(out, "  {checkpoint_number} approved"),
        E::CheckpointRejected { checkpoint_number, .. } => writeln!(out, "  {checkpoint_number} sent back, regenerating"),
        E::CheckpointReopened { checkpoint_number, .. } => writeln!(out, "  {checkpoint_number} re-opened"),
        E::CheckpointStale { checkpoint_number, .. } => writeln!(out, "  {checkpoint_number} is stale"),
        E::WaveComplete { wave, .. } => writeln!(out, "wave {wave} complete"),
        E::CharacterComplete { character_id, total_tokens, .. } => {
            writeln!(out, "character {character_id} complete ({total_tokens} tokens)")
        }
        E::Idle { .. } | E::Snapshot { .. } | E::Runs { .. } | E::Exported { .. } => Ok(()),
        E::Cancelled { checkpoint, .. } => writeln!(out, "  {checkpoint} cancelled; re-run it to generate it again"),
        E::CancelRequested { checkpoints, .. } => {
            let list: Vec<String> = checkpoints.iter().map(u8::to_string).collect();
            writeln!(out, "asked checkpoint(s) {} to stop", list.join(", "))
        }
        E::Error { checkpoint, message, .. } => match checkpoint {
            Some(n) => writeln!(out, "  {n} failed: {message}"),
            // The verb waiting on it says it once, on stderr.
            None => Ok(()),
        },
    }
}

/// Human-readable lines for the events of this module.
fn print_scene(out: &mut impl Write, event: &SceneEvent) -> std::io::Result<()> {
    use SceneEvent as E;
    match event {
        E::SceneCreated { scene_id, name } => writeln!(out, "created scene {name} ({scene_id})"),
        E::RoundStarted { round, .. } => writeln!(out, "round {round}"),
        E::DirectorDecided { pass, decision, .. } => writeln!(out, "director pass {pass}: {}", serde_json::to_string(decision).unwrap_or_default()),
        E::CharacterStarted { name, .. } => write!(out, "\n{name}: "),
        E::NarratorStarted { .. } => write!(out, "\nNarrator: "),
        E::NarratorFinished { .. } => writeln!(out),
        E::Token { text, .. } => write!(out, "{text}"),
        E::Redrawn { reason, .. } => write!(out, "\n  [drawn again: {reason}]\n  "),
        E::Waiting { agent, holder: Some(holder), .. } => writeln!(out, "({agent} waits for the embedded model: {holder})"),
        E::Waiting { holder: None, .. } => Ok(()),
        E::CharacterFinished { delta, .. } => {
            if delta.is_empty() { writeln!(out) } else { writeln!(out, "\n  (state: {})", serde_json::to_string(delta).unwrap_or_default()) }
        }
        E::RoundCompleted { round, messages, conflicts, tokens, notices, .. } => {
            writeln!(out, "round {round} saved: {} messages, {tokens} tokens", messages.len())?;
            for c in conflicts {
                writeln!(out, "  director overrode {}'s {}: {:?} -> {:?}", c.character, c.field, c.character_value, c.director_value)?;
            }
            for notice in notices {
                writeln!(out, "  warning: {notice}")?;
            }
            Ok(())
        }
        E::WorldDecided { decision, .. } => writeln!(out, "world: {}", serde_json::to_string(decision).unwrap_or_default()),
        E::RoundCancelled { .. } => writeln!(out, "round cancelled; nothing was saved"),
        E::MessageEdited { number, .. } => writeln!(out, "message {number} edited"),
        E::MessageDeleted { number, .. } => writeln!(out, "message {number} deleted"),
        E::RoundUndone { round, .. } => writeln!(out, "round {round} taken back; the scene is as it was before it"),
        E::Muted { name, muted, .. } => writeln!(out, "{name} {}", if *muted { "muted: the Director cannot pick them" } else { "may act again" }),
        E::CastChanged { name, added: true, .. } => writeln!(out, "{name} joined the scene's cast (absent until the Director brings them in)"),
        E::CastChanged { name, added: false, .. } => writeln!(out, "{name} left the scene's cast"),
        E::CancelRequested { running: true, .. } => writeln!(out, "the running round was asked to stop; nothing of it is saved"),
        E::CancelRequested { running: false, .. } => writeln!(out, "no round is running in this scene"),
        E::Alternatives { alternatives, .. } => {
            if alternatives.is_empty() {
                writeln!(out, "no kept rounds")?;
            }
            for a in alternatives {
                // One line each: the start of the round (the whole is kept; `--json` has 400 characters).
                let line = a.preview.replace('\n', " ");
                let short: String = line.chars().take(100).collect();
                let more = if line.chars().count() > 100 { "…" } else { "" };
                writeln!(out, "{}  round {}  kept {}  {short}{more}", a.id, a.round, a.saved_at)?;
            }
            Ok(())
        }
        E::AlternativeChosen { round, kept, .. } => match kept {
            Some(id) => writeln!(out, "round {round} is the kept version now; the one it replaced is kept as {id}"),
            None => writeln!(out, "round {round} is the kept version now"),
        },
        E::PlanReview { round, plan, .. } => {
            writeln!(out, "round {round}: the Director's plan (send it back edited as one JSON line, or an empty line to play it):")?;
            writeln!(out, "{}", serde_json::to_string(plan).unwrap_or_default())
        }
        E::RedoFailed { round, message, .. } => writeln!(out, "the redo failed ({message}); round {round} is back as it was"),
        E::SummaryStarted { through_round, .. } => writeln!(out, "summarising rounds 1 to {through_round}…"),
        E::SummaryUpdated { scene, through_round, .. } => writeln!(out, "summary of scene \"{scene}\" now covers rounds 1 to {through_round}"),
        E::SummaryFailed { message, .. } => writeln!(out, "scene summary not updated: {message}"),
        E::State { view } => print_state(out, view),
        E::Scenes { scenes } => {
            for s in scenes {
                writeln!(out, "{}  {}  ({} / {}, {} rounds, {} present)", s.id, s.name, s.campaign, s.arc, s.rounds, s.active)?;
            }
            Ok(())
        }
        E::DemoReady { scene_id: Some(id) } => writeln!(out, "demo scene ready: {id}"),
        E::DemoReady { scene_id: None } => writeln!(out, "no demo added: this library has had it, or holds worlds, characters or lorebooks of yours"),
        E::ChangedElsewhere { scene_id: Some(id) } => writeln!(out, "scene {id} changed elsewhere"),
        E::ChangedElsewhere { scene_id: None } => Ok(()),
        E::Lore { round, lore, .. } => {
            writeln!(out, "round {round}: {} entries fired, {} held back", lore.fired.len(), lore.held_back.len())?;
            for line in lore.lines() {
                writeln!(out, "  {line}")?;
            }
            Ok(())
        }
        E::Snapshot { snapshot } => print_state(out, &snapshot.view),
        E::Transcript { messages, .. } => {
            for m in messages {
                writeln!(out, "{:>5}  round {:<4} {}: {}", m.number, m.round, m.speaker, m.content)?;
            }
            Ok(())
        }
        E::Preview { preview } => {
            let envelope = preview.fit(&preview.plan, preview.max_context_tokens);
            if let Ok(prompt) = preview.render(&envelope) {
                let sent = preview.prompt_tokens(&prompt);
                writeln!(
                    out,
                    "  prompt as sent about {sent} tokens ({} of them the sections) + reply cap {} of a {}-token context",
                    envelope.ledger.used(),
                    preview.reply_tokens,
                    preview.max_context_tokens
                )?;
            }
            for s in &envelope.ledger.sections {
                writeln!(out, "  {:<20} {:>6} of {:>6} tokens, {} dropped", s.section.label(), s.used, s.allocated, s.dropped.len())?;
            }
            Ok(())
        }
        // The verb waiting on it says it once, on stderr, and exits non-zero.
        E::Error { .. } => Ok(()),
    }
}

fn print_state(out: &mut impl Write, view: &SceneView) -> std::io::Result<()> {
    writeln!(out, "{} — {} / {} / {} — {} rounds, {} in-fiction minutes", view.name, view.world, view.campaign, view.arc, view.rounds, view.elapsed_minutes)?;
    for member in &view.cast {
        let state = serde_json::to_string(&member.state).unwrap_or_default();
        let muted = if member.muted { " (muted)" } else { "" };
        writeln!(out, "  {} {}{muted}  {state}", if member.active { "*" } else { " " }, member.name)?;
    }
    for (name, value) in &view.trackers {
        writeln!(out, "  tracker {name} = {value}")?;
    }
    for fact in &view.facts {
        writeln!(out, "  fact: {fact}")?;
    }
    Ok(())
}

/// Human text for interop events.
fn print_interop(out: &mut impl Write, event: &InteropEvent) -> std::io::Result<()> {
    match event {
        InteropEvent::ImportReport { created, skipped, warnings } => {
            for c in created {
                let kind = match c.item.kind {
                    crate::interop::ItemKind::Character => "character",
                    crate::interop::ItemKind::Lorebook => "lorebook",
                };
                writeln!(out, "created {kind} {:?} ({}) from {}: {}", c.item.name, c.item.id, c.path.display(), c.item.detail)?;
            }
            for w in warnings {
                writeln!(out, "note: {}: {}", w.path.display(), w.message)?;
            }
            for s in skipped {
                writeln!(out, "skipped {}: {}", s.path.display(), s.reason)?;
            }
            if created.is_empty() && skipped.is_empty() {
                writeln!(out, "nothing to import")?;
            }
            Ok(())
        }
        InteropEvent::Exported { name, format, path, bytes, .. } => {
            writeln!(out, "wrote {name:?} as {format} to {} ({bytes} bytes)", path.display())
        }
        InteropEvent::Library { characters, lorebooks } => {
            writeln!(out, "{} characters, {} lorebooks", characters.len(), lorebooks.len())
        }
        InteropEvent::Portrait { id, png } => match png {
            Some(png) => writeln!(out, "portrait of {id}: {} bytes of PNG", png.0.len()),
            None => writeln!(out, "{id} has no portrait"),
        },
        InteropEvent::Entries { name, entries, changed, .. } => {
            match changed {
                // A move names the entry moved and where it went.
                Some((what, n)) => match what.strip_prefix("moved from ") {
                    Some(from) => writeln!(out, "moved entry {from} to {n} of {name:?}")?,
                    None => writeln!(out, "{what} entry {n} of {name:?}")?,
                },
                None => {}
            }
            for (n, e) in entries.iter().enumerate() {
                writeln!(out, "{n:>3}. {}  [{}]  {}, order {}, {:?}", e.label(), e.keys.join(", "), e.strategy(), e.insertion_order, e.position)?;
            }
            Ok(())
        }
        InteropEvent::Sheet { sheet, saved } => {
            if *saved {
                writeln!(out, "saved the sheet of {:?}", sheet.name)?;
            }
            writeln!(out, "{} ({}, {})", sheet.name, sheet.origin, sheet.id)?;
            for (label, text) in [
                ("description", &sheet.description),
                ("personality", &sheet.personality),
                ("scenario", &sheet.scenario),
                ("greeting", &sheet.card.first_mes),
                ("example dialogue", &sheet.card.mes_example),
                ("system prompt", &sheet.card.system_prompt),
                ("post-history instructions", &sheet.card.post_history_instructions),
                ("creator's notes", &sheet.card.creator_notes),
            ] {
                if !text.trim().is_empty() {
                    writeln!(out, "  {label}: {text}")?;
                }
            }
            for g in &sheet.card.alternate_greetings {
                writeln!(out, "  alternate greeting: {g}")?;
            }
            if !sheet.card.tags.is_empty() {
                writeln!(out, "  tags: {}", sheet.card.tags.join(", "))?;
            }
            for book in &sheet.lorebooks {
                let how = if book.source == "card" { "the card's own" } else { "attached" };
                writeln!(out, "  lorebook: {} ({how}, {})", book.name, book.id)?;
            }
            Ok(())
        }
        InteropEvent::DeleteImpact { name, impact, .. } => {
            writeln!(out, "deleting {name:?} would also delete: {}; nothing was deleted (pass --yes)", impact.join(", "))
        }
        InteropEvent::CharacterDeleted { name, impact, .. } => {
            if impact.is_empty() {
                writeln!(out, "deleted {name:?}")
            } else {
                writeln!(out, "deleted {name:?} with {}", impact.join(", "))
            }
        }
        InteropEvent::Refused { message, .. } => writeln!(out, "refused: {message}"),
        InteropEvent::LoreTest { verdicts, .. } => {
            for v in verdicts {
                writeln!(out, "{} {:>3}. {}: {}", if v.fired { "fires" } else { "  -  " }, v.ordinal, v.label, v.reason)?;
            }
            Ok(())
        }
    }
}
