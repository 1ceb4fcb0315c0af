//! `lorekeeper scene ...`: scenes headless. A round prints its events (tokens stream
//! as text without `--json`) and ends at `round_completed`.

use super::model::SceneView;
use super::{SceneCommand, SceneEvent};
use crate::cli::drive;
use crate::engine::{Command, EngineHandle, Event};
use anyhow::{Result, anyhow};
use clap::{Args, Subcommand};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// A round runs several agents; slow local models need time, but never forever.
const ROUND_LIMIT: Duration = Duration::from_secs(3 * 3600);
const QUICK_LIMIT: Duration = Duration::from_secs(120);

#[derive(Debug, Subcommand)]
pub enum SceneVerb {
    /// Create a scene in an arc.
    New(NewArgs),
    /// Play a round with the user's message.
    Round { scene: String, text: String },
    /// Play a round without a user message.
    Continue { scene: String },
    /// Show active characters, their states, trackers and facts.
    State { scene: String },
    /// List scenes.
    List,
    /// Add the demo world (once per library).
    Demo,
}

#[derive(Debug, Args)]
pub struct NewArgs {
    pub name: String,
    /// The arc (default: the newest).
    #[arg(long)]
    pub arc: Option<String>,
    #[arg(long, default_value = "")]
    pub description: String,
    /// Characters who may appear, by name or id, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub cast: Vec<String>,
    /// Cast members present at the start (default: the whole cast).
    #[arg(long, value_delimiter = ',')]
    pub active: Option<Vec<String>>,
}

fn is_error(event: &Event) -> Option<Result<(), anyhow::Error>> {
    match event {
        Event::Scene(SceneEvent::Error { message, .. }) => Some(Err(anyhow!("{message}"))),
        _ => None,
    }
}

pub fn run(engine: &EngineHandle, verb: SceneVerb, json: bool) -> Result<ExitCode> {
    let send = |c: SceneCommand| engine.send(Command::Scene(c)).map_err(|e| anyhow!(e));
    let wait = |limit: Duration, done: fn(&SceneEvent) -> bool| -> Result<ExitCode> {
        drive(engine, json, limit, |event| {
            is_error(event).or_else(|| match event {
                Event::Scene(e) if done(e) => Some(Ok(())),
                _ => None,
            })
        })??;
        Ok(ExitCode::SUCCESS)
    };
    match verb {
        SceneVerb::New(args) => {
            let active = args.active.unwrap_or_else(|| args.cast.clone());
            send(SceneCommand::New { arc: args.arc, name: args.name, description: args.description, cast: args.cast, active })?;
            wait(QUICK_LIMIT, |e| matches!(e, SceneEvent::SceneCreated { .. }))
        }
        SceneVerb::Round { scene, text } => {
            send(SceneCommand::Round { scene, input: Some(text) })?;
            wait(ROUND_LIMIT, |e| matches!(e, SceneEvent::RoundCompleted { .. }))
        }
        SceneVerb::Continue { scene } => {
            send(SceneCommand::Round { scene, input: None })?;
            wait(ROUND_LIMIT, |e| matches!(e, SceneEvent::RoundCompleted { .. }))
        }
        SceneVerb::State { scene } => {
            send(SceneCommand::State { scene })?;
            wait(QUICK_LIMIT, |e| matches!(e, SceneEvent::State { .. }))
        }
        SceneVerb::List => {
            send(SceneCommand::List)?;
            wait(QUICK_LIMIT, |e| matches!(e, SceneEvent::Scenes { .. }))
        }
        SceneVerb::Demo => {
            send(SceneCommand::Demo)?;
            wait(QUICK_LIMIT, |e| matches!(e, SceneEvent::DemoReady { .. }))
        }
    }
}

/// Human-readable lines for the events of this module.
pub fn print_human(out: &mut impl Write, event: &SceneEvent) -> std::io::Result<()> {
    use SceneEvent as E;
    match event {
        E::SceneCreated { scene_id, name } => writeln!(out, "created scene {name} ({scene_id})"),
        E::RoundStarted { round, .. } => writeln!(out, "round {round}"),
        E::DirectorDecided { pass, decision, .. } => writeln!(out, "director pass {pass}: {decision}"),
        E::CharacterStarted { name, .. } => write!(out, "\n{name}: "),
        E::NarratorStarted { .. } => write!(out, "\nNarrator: "),
        E::NarratorFinished { .. } => writeln!(out),
        E::Token { text, .. } => write!(out, "{text}"),
        E::CharacterFinished { delta, .. } => {
            if delta.is_empty() { writeln!(out) } else { writeln!(out, "\n  (state: {})", serde_json::to_string(delta).unwrap_or_default()) }
        }
        E::RoundCompleted { round, messages, conflicts, tokens, .. } => {
            writeln!(out, "round {round} saved: {} messages, {tokens} tokens", messages.len())?;
            for c in conflicts {
                writeln!(out, "  director overrode {}'s {}: {:?} -> {:?}", c.character, c.field, c.character_value, c.director_value)?;
            }
            Ok(())
        }
        E::WorldDecided { decision, .. } => writeln!(out, "world: {decision}"),
        E::RoundCancelled { .. } => writeln!(out, "round cancelled; nothing was saved"),
        E::SummaryUpdated { through_round, .. } => writeln!(out, "scene summary now covers rounds 1 to {through_round}"),
        E::SummaryFailed { message, .. } => writeln!(out, "scene summary not updated: {message}"),
        E::State { view } => print_state(out, view),
        E::Scenes { scenes } => {
            for s in scenes {
                writeln!(out, "{}  {}  ({} / {}, {} rounds, {} present)", s.id, s.name, s.campaign, s.arc, s.rounds, s.active)?;
            }
            Ok(())
        }
        E::DemoReady { scene_id: Some(id) } => writeln!(out, "demo scene ready: {id}"),
        E::DemoReady { scene_id: None } => writeln!(out, "this library already has its worlds; no demo added"),
        E::Snapshot { snapshot } => print_state(out, &snapshot.view),
        E::Preview { preview } => {
            let envelope = preview.fit(&preview.plan, preview.max_context_tokens);
            for s in &envelope.ledger.sections {
                writeln!(out, "  {:<20} {:>6} of {:>6} tokens, {} dropped", s.section.label(), s.used, s.allocated, s.dropped.len())?;
            }
            Ok(())
        }
        E::Error { message, .. } => writeln!(out, "error: {message}"),
    }
}

fn print_state(out: &mut impl Write, view: &SceneView) -> std::io::Result<()> {
    writeln!(out, "{} — {} / {} / {} — {} rounds, {} in-fiction minutes", view.name, view.world, view.campaign, view.arc, view.rounds, view.elapsed_minutes)?;
    for member in &view.cast {
        let state = serde_json::to_string(&member.state).unwrap_or_default();
        writeln!(out, "  {} {}  {state}", if member.active { "*" } else { " " }, member.name)?;
    }
    for (name, value) in &view.trackers {
        writeln!(out, "  tracker {name} = {value}")?;
    }
    for fact in &view.facts {
        writeln!(out, "  fact: {fact}")?;
    }
    Ok(())
}
