//! `lorekeeper scene ...`: scenes headless. A round prints its events (tokens stream
//! as text without `--json`) and ends at `round_completed`.

use crate::scene::envelope::AgentKind;
use crate::scene::{SceneCommand, SceneEvent};
use super::drive::drive;
use crate::engine::{Command, EngineHandle, Event};
use anyhow::{Result, anyhow};
use clap::{Args, Subcommand};
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
    Round {
        scene: String,
        text: String,
        /// Characters who act this round whatever the Director decides (repeatable).
        #[arg(long)]
        force: Vec<String>,
        /// Pause after the Director's plan: it is printed (one JSON line with --json),
        /// and the plan to play is read from standard input as one JSON line (an empty
        /// line or the end of input plays it as it is).
        #[arg(long)]
        review: bool,
    },
    /// Take back the last round exactly: messages, states, trackers, facts, time, lore timers, memories.
    Undo {
        scene: String,
        /// Only if the scene's last round is this one: refused when the scene changed since.
        #[arg(long)]
        expect_round: Option<u32>,
    },
    /// Play the last round again from the same input; the old round is kept as an
    /// alternative (`scene alternatives`, `scene use-alternative`).
    Redo { scene: String },
    /// List the rounds kept by redos.
    Alternatives { scene: String },
    /// Play a kept round in place of the round with its number (which is kept in turn).
    UseAlternative { scene: String, id: String },
    /// Keep a character from being picked to act.
    Mute { scene: String, character: String },
    /// Add a character to a running scene's cast, or take one out.
    Cast {
        #[command(subcommand)]
        verb: CastVerb,
    },
    /// Stop the round running in a scene, in this process or another on the same
    /// library (the GUI, `serve`, another `scene round`); nothing of it is saved.
    Cancel { scene: String },
    /// Let a muted character be picked to act again.
    Unmute { scene: String, character: String },
    /// Play a round without a user message.
    Continue { scene: String },
    /// Show active characters, their states, trackers and facts.
    State { scene: String },
    /// Show which lore entries a round fired (and why, and for whom) and which it held back.
    Lore {
        scene: String,
        /// The round (default: the last).
        #[arg(long)]
        round: Option<u32>,
    },
    /// Show the next call's prompt as it would be sent (the Director's, or a character's
    /// with --character): each section's share, allocated and used tokens and what it
    /// drops, the reply's cap, and the prompt text — the Budgets panel's preview.
    Preview {
        scene: String,
        /// Whose call: director (the default), reconcile, narrator, world, or character.
        #[arg(long, value_enum)]
        agent: Option<PreviewAgent>,
        /// The character whose call it is (a name or id; implies --agent character;
        /// without it a character call is the first present one's).
        #[arg(long)]
        character: Option<String>,
        /// Leave out the prompt text: only the numbers.
        #[arg(long)]
        no_prompt: bool,
    },
    /// List scenes.
    List,
    /// Add the demo world (once per library).
    Demo,
    /// Take transcript message N out of the scene (its memory goes with it; the round's
    /// state stays, `scene undo` takes back a whole round).
    DeleteMessage { scene: String, number: u32 },
    /// Rename a scene or change its description or notes; or with --message N, change
    /// the text of transcript message N (its memory follows).
    Edit {
        #[command(flatten)]
        args: super::author::EditArgs,
        #[arg(long)]
        message: Option<u32>,
        /// The message's new text (with --message).
        text: Option<String>,
    },
    /// Delete a scene (with --yes when it has messages).
    Delete(super::author::DeleteArgs),
    /// Write the whole transcript as Markdown or JSON.
    Export {
        scene: String,
        #[arg(long, value_enum, default_value = "markdown")]
        format: super::author::ExportFormat,
        #[arg(long)]
        out: std::path::PathBuf,
    },
    /// Change a character's state in a scene by hand.
    SetState(super::author::SetStateArgs),
}

/// The agent `scene preview` shows the next call of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PreviewAgent {
    Director,
    Reconcile,
    Character,
    Narrator,
    World,
}

impl PreviewAgent {
    fn kind(self) -> AgentKind {
        match self {
            PreviewAgent::Director => AgentKind::Director,
            PreviewAgent::Reconcile => AgentKind::Reconcile,
            PreviewAgent::Character => AgentKind::Character,
            PreviewAgent::Narrator => AgentKind::Narrator,
            PreviewAgent::World => AgentKind::World,
        }
    }
}

/// `scene cast add|remove SCENE CHARACTER`.
#[derive(Debug, Subcommand)]
pub enum CastVerb {
    /// Add a character (by id or name) to the scene's cast; absent until the Director
    /// (or `--force`) brings them in.
    Add { scene: String, character: String },
    /// Take a character out of the scene's cast; what it said stays in the transcript.
    Remove { scene: String, character: String },
}

#[derive(Debug, Args)]
pub struct NewArgs {
    pub name: String,
    /// The arc, by id or name.
    #[arg(long)]
    pub arc: String,
    #[arg(long, default_value = "")]
    pub description: String,
    /// Scenario / author notes for this scene.
    #[arg(long, default_value = "")]
    pub notes: String,
    /// Characters who may appear, by name or id, comma-separated (default: the
    /// campaign's cast).
    #[arg(long, value_delimiter = ',')]
    pub cast: Vec<String>,
    /// Cast members present at the start (default: the whole cast).
    #[arg(long, value_delimiter = ',')]
    pub active: Option<Vec<String>>,
}

/// The plan to play: one JSON line from standard input, or `proposed` on an empty line
/// or the end of input. A plan that does not read is refused with the reason.
fn read_plan(proposed: &crate::scene::model::DirectorPlan) -> Result<crate::scene::model::DirectorPlan> {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    if line.trim().is_empty() {
        return Ok(proposed.clone());
    }
    serde_json::from_str(line.trim()).map_err(|e| anyhow!("the edited plan is not a Director plan: {e}"))
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
    // A round ends saved, or cancelled (here or from another process: `scene cancel`);
    // a summary that follows it is waited for, so its outcome is printed too.
    let play = || -> Result<ExitCode> {
        let mut summary_follows = false;
        drive(engine, json, ROUND_LIMIT, |event| {
            is_error(event).or_else(|| match event {
                Event::Scene(SceneEvent::SummaryStarted { .. }) => {
                    summary_follows = true;
                    None
                }
                Event::Scene(SceneEvent::RoundCompleted { .. }) if !summary_follows => Some(Ok(())),
                Event::Scene(SceneEvent::SummaryUpdated { .. } | SceneEvent::SummaryFailed { .. }) if summary_follows => Some(Ok(())),
                Event::Scene(SceneEvent::RoundCancelled { .. }) => Some(Err(anyhow!("the round was cancelled; nothing was saved"))),
                _ => None,
            })
        })??;
        Ok(ExitCode::SUCCESS)
    };
    match verb {
        SceneVerb::New(args) => {
            send(SceneCommand::New {
                arc: args.arc,
                name: args.name,
                description: args.description,
                notes: args.notes,
                cast: args.cast,
                active: args.active,
            })?;
            wait(QUICK_LIMIT, |e| matches!(e, SceneEvent::SceneCreated { .. }))
        }
        SceneVerb::Round { scene, text, force, review: false } => {
            send(SceneCommand::Round { scene, input: Some(text), force, review: false })?;
            play()
        }
        SceneVerb::Round { scene, text, force, review: true } => {
            send(SceneCommand::Round { scene, input: Some(text), force, review: true })?;
            drive(engine, json, ROUND_LIMIT, |event| {
                is_error(event).or_else(|| match event {
                    Event::Scene(SceneEvent::PlanReview { scene_id, plan, .. }) => {
                        let reviewed = match read_plan(plan) {
                            Ok(plan) => plan,
                            Err(e) => return Some(Err(e)),
                        };
                        match engine.send(Command::Scene(SceneCommand::SubmitPlan { scene: scene_id.clone(), plan: reviewed })) {
                            Ok(()) => None,
                            Err(e) => Some(Err(anyhow!(e))),
                        }
                    }
                    Event::Scene(SceneEvent::RoundCompleted { .. }) => Some(Ok(())),
                    Event::Scene(SceneEvent::RoundCancelled { .. }) => Some(Err(anyhow!("the round was cancelled; nothing was saved"))),
                    _ => None,
                })
            })??;
            Ok(ExitCode::SUCCESS)
        }
        SceneVerb::Continue { scene } => {
            send(SceneCommand::Round { scene, input: None, force: Vec::new(), review: false })?;
            play()
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
        SceneVerb::Undo { scene, expect_round } => {
            send(SceneCommand::Undo { scene, expect_round })?;
            wait(QUICK_LIMIT, |e| matches!(e, SceneEvent::RoundUndone { .. }))
        }
        SceneVerb::Redo { scene } => {
            send(SceneCommand::Redo { scene })?;
            drive(engine, json, ROUND_LIMIT, |event| {
                is_error(event).or_else(|| match event {
                    Event::Scene(SceneEvent::RedoFailed { round, message, .. }) => {
                        Some(Err(anyhow!("the redo failed ({message}); round {round} is back as it was")))
                    }
                    Event::Scene(SceneEvent::Alternatives { .. }) => Some(Ok(())),
                    _ => None,
                })
            })??;
            Ok(ExitCode::SUCCESS)
        }
        SceneVerb::Preview { scene, agent, character, no_prompt } => {
            let agent = match (agent, &character) {
                (Some(a), Some(_)) if a != PreviewAgent::Character => anyhow::bail!("--character is for a character's call; leave out --agent or give --agent character"),
                (Some(a), _) => a.kind(),
                (None, Some(_)) => AgentKind::Character,
                (None, None) => AgentKind::Director,
            };
            send(SceneCommand::Preview { scene, agent, character })?;
            let preview = super::drive::wait(engine, QUICK_LIMIT, |event| match event {
                Event::Scene(SceneEvent::Preview { preview }) => Some(Ok(preview.next_call())),
                Event::Scene(SceneEvent::Error { message, .. }) => Some(Err(anyhow!("{message}"))),
                _ => None,
            })??;
            print_next_call(&preview, json, no_prompt)?;
            Ok(ExitCode::SUCCESS)
        }
        SceneVerb::Lore { scene, round } => {
            send(SceneCommand::Lore { scene, round })?;
            wait(QUICK_LIMIT, |e| matches!(e, SceneEvent::Lore { .. }))
        }
        SceneVerb::Alternatives { scene } => {
            send(SceneCommand::Alternatives { scene })?;
            wait(QUICK_LIMIT, |e| matches!(e, SceneEvent::Alternatives { .. }))
        }
        SceneVerb::UseAlternative { scene, id } => {
            send(SceneCommand::UseAlternative { scene, id })?;
            wait(QUICK_LIMIT, |e| matches!(e, SceneEvent::Alternatives { .. }))
        }
        SceneVerb::Cast { verb } => {
            let (scene, character, add) = match verb {
                CastVerb::Add { scene, character } => (scene, character, true),
                CastVerb::Remove { scene, character } => (scene, character, false),
            };
            send(SceneCommand::Cast { scene, character, add })?;
            wait(QUICK_LIMIT, |e| matches!(e, SceneEvent::CastChanged { .. }))
        }
        SceneVerb::Cancel { scene } => {
            send(SceneCommand::Cancel { scene })?;
            wait(QUICK_LIMIT, |e| matches!(e, SceneEvent::CancelRequested { .. }))
        }
        SceneVerb::Mute { scene, character } => {
            send(SceneCommand::Mute { scene, character, muted: true })?;
            wait(QUICK_LIMIT, |e| matches!(e, SceneEvent::Muted { .. }))
        }
        SceneVerb::Unmute { scene, character } => {
            send(SceneCommand::Mute { scene, character, muted: false })?;
            wait(QUICK_LIMIT, |e| matches!(e, SceneEvent::Muted { .. }))
        }
        SceneVerb::Edit { args, message: Some(number), text } => {
            let Some(text) = text else { anyhow::bail!("give the message's new text") };
            send(SceneCommand::EditMessage { scene: args.key, number, text })?;
            wait(QUICK_LIMIT, |e| matches!(e, SceneEvent::MessageEdited { .. }))
        }
        SceneVerb::DeleteMessage { scene, number } => {
            send(SceneCommand::DeleteMessage { scene, number })?;
            wait(QUICK_LIMIT, |e| matches!(e, SceneEvent::MessageDeleted { .. }))
        }
        SceneVerb::Edit { args, message: None, text } => {
            if text.is_some() {
                anyhow::bail!("a text without --message: say which message to edit");
            }
            super::author::scene_edit(engine, args, json)
        }
        SceneVerb::Delete(args) => super::author::scene_delete(engine, args, json),
        SceneVerb::Export { scene, format, out } => super::author::scene_export(engine, scene, format, out, json),
        SceneVerb::SetState(args) => super::author::scene_set_state(engine, args, json),
    }
}


/// `scene preview`: one JSON line, or the numbers as the Budgets panel words them and
/// the prompt below.
fn print_next_call(call: &crate::scene::preview::NextCall, json: bool, no_prompt: bool) -> Result<()> {
    if json {
        let mut value = serde_json::to_value(call)?;
        if no_prompt && let Some(object) = value.as_object_mut() {
            object.remove("system");
            object.remove("user");
        }
        outln!("{value}");
        return Ok(());
    }
    let who = match (call.agent, &call.character) {
        (AgentKind::Character, Some(name)) => name.clone(),
        (AgentKind::Reconcile, _) => "the Director (reconcile)".into(),
        (AgentKind::Narrator, _) => "the Narrator".into(),
        (AgentKind::World, _) => "the World agent".into(),
        _ => "the Director".into(),
    };
    outln!("Next call of {who} in scene {}", call.scene_id);
    match call.prompt_tokens {
        Some(prompt) => outln!(
            "  prompt {prompt} tokens ({} of them the sections) + reply {} = {} of {} tokens",
            call.section_tokens,
            call.reply_tokens,
            prompt + call.reply_tokens,
            call.max_context_tokens
        ),
        None => outln!("  {} of {} tokens used by the sections", call.section_tokens, call.max_context_tokens),
    }
    let schema = match call.schema_tokens {
        0 => String::new(),
        n => format!(" ({n} of them the reply's JSON Schema)"),
    };
    outln!(
        "  kept off the top: {} tokens for the instructions and the turn{schema}, {} for the reply",
        call.reserved_tokens.saturating_sub(call.reply_tokens),
        call.reply_tokens
    );
    outln!("  shares: {}", if call.campaign_plan { "the campaign's own" } else { "the config file's" });
    outln!("  {:<20} {:>6} {:>9} {:>6} {:>8}", "section", "share", "allocated", "used", "dropped");
    for s in &call.sections {
        outln!("  {:<20} {:>5.0}% {:>9} {:>6} {:>8}", s.section.label(), s.percent, s.allocated, s.used, s.dropped.len());
        for d in &s.dropped {
            outln!("      dropped {} ({} tokens): {}", d.id, d.tokens, d.reason);
        }
    }
    if let Some(error) = &call.template_error {
        outln!("  the prompt templates cannot be loaded: {error}");
    }
    if !no_prompt {
        if let Some(system) = &call.system {
            outln!("--- system\n{system}");
        }
        if let Some(user) = &call.user {
            outln!("--- user\n{user}");
        }
    }
    Ok(())
}

/// A new library in `dir` holding the demo world after one round played by the shipped
/// demo script (the `demo` profile), for `screenshot --demo-round`: the same picture on
/// every machine, with or without the embedded model.
pub fn demo_round_library(dir: &std::path::Path) -> Result<crate::config::Paths> {
    let paths = crate::config::Paths {
        config_file: dir.join("config.toml"),
        library_file: dir.join("library.sqlite"),
        log_dir: dir.join("logs"),
    };
    let mut config = crate::config::Config::default();
    config.default_profile = "demo".into();
    config.save(&paths.config_file)?;
    let engine = super::start(paths.clone())?;
    engine.send(Command::Scene(SceneCommand::Demo))?;
    let scene = super::drive::wait(&engine, QUICK_LIMIT, |event| match event {
        Event::Scene(SceneEvent::DemoReady { scene_id }) => Some(scene_id.clone()),
        _ => None,
    })?
    .ok_or_else(|| anyhow!("the demo scene was not added"))?;
    engine.send(Command::Scene(SceneCommand::Round {
        scene: scene.clone(),
        input: Some("I knock on the lighthouse door.".into()),
        force: Vec::new(),
        review: false,
    }))?;
    super::drive::wait(&engine, ROUND_LIMIT, |event| match event {
        Event::Scene(SceneEvent::RoundCompleted { scene_id, .. }) if *scene_id == scene => Some(()),
        _ => None,
    })?;
    Ok(paths)
}
