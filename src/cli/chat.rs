//! `lorekeeper chat ...`: the companion headless. `send` streams the reply to stdout;
//! with `--json` it prints one object, the committed turn with the memory hits it used.

use crate::companion::records::ChatTurn;
use crate::companion::{CompanionCommand, CompanionEvent};
use crate::engine::{Command, CoreEvent, EngineHandle, Event};
use anyhow::{Result, anyhow, bail};
use clap::Subcommand;
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// A reply from a slow local model can take minutes; never forever.
const TURN_LIMIT: Duration = Duration::from_secs(3600);
const QUICK_LIMIT: Duration = Duration::from_secs(120);

#[derive(Debug, Subcommand)]
pub enum ChatVerb {
    /// Send one message and stream the reply.
    Send {
        #[arg(long)]
        character: String,
        text: String,
        /// Pretend it is this time (RFC 3339): replays and tests.
        #[arg(long)]
        now: Option<String>,
    },
    /// Chat interactively (`/undo`, `/history`, `/quit`).
    Repl {
        #[arg(long)]
        character: String,
    },
    /// Print the conversation.
    History {
        #[arg(long)]
        character: String,
        #[arg(long, default_value_t = 1000)]
        limit: u32,
    },
    /// List characters with their chat progress.
    List,
    /// Take back the last exchange.
    Undo {
        #[arg(long)]
        character: String,
    },
    /// Draw the last reply again; every draw is kept as a swipe.
    Regenerate {
        #[arg(long)]
        character: String,
    },
    /// Choose swipe N (0-based) of the last reply.
    Swipe {
        #[arg(long)]
        character: String,
        index: usize,
    },
    /// Change a message's text (ids from `chat history --json`).
    Edit {
        #[arg(long)]
        character: String,
        #[arg(long)]
        message: String,
        text: String,
    },
    /// Delete a message's exchange, or with --and-after it and everything after it.
    Delete {
        #[arg(long)]
        character: String,
        #[arg(long)]
        message: String,
        #[arg(long)]
        and_after: bool,
    },
}

/// Wait for a message change to be stored; print it (as JSON with `json`).
fn changed(engine: &EngineHandle, json: bool) -> Result<()> {
    let mut out = std::io::stdout();
    let event = wait(engine, TURN_LIMIT, |e| match e {
        CompanionEvent::Token { text, .. } if !json => {
            let _ = write!(out, "{text}");
            let _ = out.flush();
            None
        }
        CompanionEvent::Discarded { attempt, reason, .. } => {
            eprintln!("\n(reply {attempt} discarded: {reason})");
            None
        }
        CompanionEvent::Cancelled { .. } => Some(Err(anyhow!("cancelled; nothing was changed"))),
        e @ CompanionEvent::Changed { .. } => Some(Ok(e.clone())),
        _ => None,
    })??;
    if json {
        println!("{}", serde_json::to_string(&event)?);
    } else if let CompanionEvent::Changed { action, turn, deleted, .. } = event {
        match turn {
            Some(t) => println!("\n{action}: {} (swipe {} of {})", t.reply, t.swipe + 1, t.swipes.len()),
            None => println!("{action} {} exchange(s)", deleted.len()),
        }
    }
    Ok(())
}

pub fn run(engine: &EngineHandle, verb: ChatVerb, json: bool) -> Result<ExitCode> {
    // A first chat has the demo companion to talk to.
    let send = |c: CompanionCommand| engine.send(Command::Companion(c)).map_err(|e| anyhow!(e));
    send(CompanionCommand::Demo)?;
    super::drive::wait(engine, Duration::from_secs(60), |event| match event {
        Event::Companion(CompanionEvent::DemoReady { .. }) => Some(Ok(())),
        Event::Companion(CompanionEvent::Failed { message, .. }) => Some(Err(anyhow!("{message}"))),
        _ => None,
    })??;
    match verb {
        ChatVerb::Send { character, text, now } => {
            send(CompanionCommand::Send { character, text, now })?;
            let turn = wait_turn(engine, json)?;
            if json {
                let out = serde_json::json!({ "turn": turn, "hits": turn.hits });
                println!("{}", serde_json::to_string(&out)?);
            }
        }
        ChatVerb::Repl { character } => repl(engine, &character)?,
        ChatVerb::History { character, limit } => {
            send(CompanionCommand::History { character, limit })?;
            let (name, turns, greeting) = wait(engine, QUICK_LIMIT, |e| match e {
                CompanionEvent::History { name, turns, greeting, .. } => Some((name.clone(), turns.clone(), greeting.clone())),
                _ => None,
            })?;
            if json {
                let messages = crate::companion::turn::control::messages(&turns);
                println!("{}", serde_json::to_string(&messages)?);
            } else {
                if let Some(greeting) = greeting.filter(|_| turns.first().is_none_or(|t| t.seq <= 1)) {
                    println!("{name}: {greeting}");
                }
                print_history(&name, &turns);
            }
        }
        ChatVerb::Regenerate { character } => {
            send(CompanionCommand::Regenerate { character })?;
            changed(engine, json)?;
        }
        ChatVerb::Swipe { character, index } => {
            send(CompanionCommand::Swipe { character, index })?;
            changed(engine, json)?;
        }
        ChatVerb::Edit { character, message, text } => {
            send(CompanionCommand::Edit { character, message, text })?;
            changed(engine, json)?;
        }
        ChatVerb::Delete { character, message, and_after } => {
            send(CompanionCommand::Delete { character, message, and_after })?;
            changed(engine, json)?;
        }
        ChatVerb::List => {
            send(CompanionCommand::List)?;
            let characters = wait(engine, QUICK_LIMIT, |e| match e {
                CompanionEvent::Characters { characters } => Some(characters.clone()),
                _ => None,
            })?;
            if json {
                println!("{}", serde_json::to_string(&characters)?);
            } else {
                for c in characters {
                    let last = c.last_chat_at.as_deref().unwrap_or("never");
                    println!("{}  {}  ({}, {} exchanges, last chat {last})", c.id, c.name, c.origin, c.turns);
                }
            }
        }
        ChatVerb::Undo { character } => {
            send(CompanionCommand::Undo { character })?;
            let undone = wait(engine, QUICK_LIMIT, |e| match e {
                CompanionEvent::Undone { turn_id, .. } => Some(turn_id.clone()),
                _ => None,
            })?;
            match (json, undone) {
                (true, id) => println!("{}", serde_json::json!({ "undone": id })),
                (false, Some(id)) => println!("took back exchange {id}"),
                (false, None) => println!("nothing to take back"),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Companion events until `pick` chooses one; a failure ends the wait with its message.
fn wait<T>(engine: &EngineHandle, limit: Duration, mut pick: impl FnMut(&CompanionEvent) -> Option<T>) -> Result<T> {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match engine.events().recv_timeout(left) {
            Ok(Event::Companion(CompanionEvent::Failed { message, .. })) => bail!("{message}"),
            Ok(Event::Companion(e)) => {
                if let Some(v) = pick(&e) {
                    return Ok(v);
                }
            }
            Ok(Event::Core(CoreEvent::Error { context, message })) => bail!("{context}: {message}"),
            Ok(_) => {}
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => bail!("no answer within {limit:?}"),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => bail!("the engine stopped unexpectedly"),
        }
    }
}

/// Stream one turn's reply (unless `quiet`) until it is committed.
fn wait_turn(engine: &EngineHandle, quiet: bool) -> Result<ChatTurn> {
    let mut out = std::io::stdout();
    let mut started = false;
    let turn = wait(engine, TURN_LIMIT, |e| {
        match e {
            CompanionEvent::TurnStarted { name, attempt, .. } if !quiet => {
                if *attempt > 1 {
                    let _ = writeln!(out);
                }
                let _ = write!(out, "{name}: ");
                started = true;
            }
            CompanionEvent::Token { text, .. } if !quiet => {
                let _ = write!(out, "{text}");
                let _ = out.flush();
            }
            CompanionEvent::Discarded { attempt, reason, .. } => {
                eprintln!("\n(reply {attempt} discarded: {reason})");
            }
            CompanionEvent::Cancelled { .. } => return Some(Err(anyhow!("cancelled; nothing was saved"))),
            CompanionEvent::TurnCommitted { turn } => return Some(Ok((**turn).clone())),
            _ => {}
        }
        None
    })??;
    if started {
        println!();
    }
    // The summarisation cycle runs after the commit; a process that left now would cut
    // it short (harmless — the turns stay unsummarised — but it would never finish).
    wait(engine, TURN_LIMIT, |e| matches!(e, CompanionEvent::Idle { .. }).then_some(()))?;
    Ok(turn)
}

fn print_history(name: &str, turns: &[ChatTurn]) {
    for t in turns {
        println!("[{}] you: {}", t.at, t.user_text);
        println!("[{}] {name}: {}", t.at, t.reply);
    }
}

fn repl(engine: &EngineHandle, character: &str) -> Result<()> {
    let send = |c: CompanionCommand| engine.send(Command::Companion(c)).map_err(|e| anyhow!(e));
    eprintln!("chatting with {character}; /undo takes back the last exchange, /history shows the chat, /quit ends");
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line?;
        let text = line.trim();
        match text {
            "" => continue,
            "/quit" | "/exit" => break,
            "/undo" => {
                send(CompanionCommand::Undo { character: character.to_string() })?;
                wait(engine, QUICK_LIMIT, |e| matches!(e, CompanionEvent::Undone { .. }).then_some(()))?;
                eprintln!("(took back the last exchange)");
            }
            "/history" => {
                send(CompanionCommand::History { character: character.to_string(), limit: 50 })?;
                let (name, turns) = wait(engine, QUICK_LIMIT, |e| match e {
                    CompanionEvent::History { name, turns, .. } => Some((name.clone(), turns.clone())),
                    _ => None,
                })?;
                print_history(&name, &turns);
            }
            _ => {
                send(CompanionCommand::Send { character: character.to_string(), text: text.to_string(), now: None })?;
                // A failed turn is reported and the chat goes on: nothing was saved.
                if let Err(e) = wait_turn(engine, false) {
                    eprintln!("\n{e}");
                }
            }
        }
    }
    Ok(())
}
