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

/// `chat export --format`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ChatFormatArg {
    Jsonl,
    Markdown,
    Json,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum NoteRoleArg {
    System,
    User,
    Assistant,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum NotePositionArg {
    #[value(alias = "chat")]
    InChat,
    #[value(alias = "before-character")]
    Before,
    #[value(alias = "after-character")]
    After,
}

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
    /// Chat interactively (`/undo`, `/regenerate`, `/swipe N`, `/continue`, `/history`,
    /// `/help`, `/quit`; `//text` sends a message that starts with a slash).
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
    /// Print the chat's variables (what a card's `{{setvar}}` macros keep) and the
    /// library's globals.
    Variables {
        #[arg(long)]
        character: String,
    },
    /// List characters with their chat progress.
    List,
    /// Stop the reply being written for a character, here or in another process (the
    /// GUI, `serve`); nothing of it is stored.
    Cancel {
        #[arg(long)]
        character: String,
    },
    /// Take back the last exchange.
    Undo {
        #[arg(long)]
        character: String,
        /// Only if the last exchange is this one (its id, see `chat history --json`):
        /// refused when the chat changed since.
        #[arg(long)]
        expect: Option<String>,
    },
    /// Draw the last reply again; every draw is kept as a swipe.
    Regenerate {
        #[arg(long)]
        character: String,
        /// Only if the last exchange is this one (its id): refused when the chat changed since.
        #[arg(long)]
        expect: Option<String>,
    },
    /// Extend the last reply: the model writes on from where it stops.
    Continue {
        #[arg(long)]
        character: String,
    },
    /// Choose swipe N (0-based) of the last reply (before the first exchange: the greeting).
    Swipe {
        #[arg(long)]
        character: String,
        index: usize,
    },
    /// Branch at a message: the chat as it is is saved; this chat keeps what came up to it.
    Branch {
        #[arg(long)]
        character: String,
        #[arg(long)]
        message: String,
    },
    /// List the chats put aside for a character (branch originals, replaced chats).
    Chats {
        #[arg(long)]
        character: String,
    },
    /// Play a saved chat; the chat being played is saved in its place.
    Open {
        #[arg(long)]
        character: String,
        chat: String,
    },
    /// Start a new chat with the character: the chat being played is saved whole (see
    /// `chat chats`), and the new one opens with the greeting.
    New {
        #[arg(long)]
        character: String,
    },
    /// Delete a saved chat for good (ids from `chat chats`).
    DeleteChat {
        #[arg(long)]
        character: String,
        chat: String,
    },
    /// Give a saved chat a title of your own (ids from `chat chats`).
    RenameChat {
        #[arg(long)]
        character: String,
        chat: String,
        title: String,
    },
    /// Import a SillyTavern chat file (.jsonl) as the character's chat (the chat it
    /// replaces is saved).
    Import {
        file: std::path::PathBuf,
        #[arg(long)]
        character: String,
    },
    /// Write the character's chat as a SillyTavern chat file (.jsonl, swipes included),
    /// or as Markdown or JSON.
    Export {
        #[arg(long)]
        character: String,
        #[arg(long)]
        out: std::path::PathBuf,
        #[arg(long, value_enum, default_value = "jsonl")]
        format: ChatFormatArg,
    },
    /// Change a message's text (ids from `chat history --json`).
    Edit {
        #[arg(long)]
        character: String,
        #[arg(long)]
        message: String,
        text: String,
    },
    /// Show or write the chat's Author's Note (SillyTavern's): your standing
    /// instruction for this chat, put into the prompt every N user messages. With no
    /// option it prints the note; options change only what they name.
    Note {
        #[arg(long)]
        character: String,
        /// The note's text; macros such as {{char}} and {{user}} are filled when it is sent.
        #[arg(long)]
        text: Option<String>,
        /// Messages from the end of the chat (in the chat only; default 4).
        #[arg(long)]
        depth: Option<u32>,
        /// Send it with every Nth user message (1: every message, 0: paused).
        #[arg(long)]
        every: Option<u32>,
        /// Said as a system, user or assistant note (in the chat only).
        #[arg(long, value_enum)]
        role: Option<NoteRoleArg>,
        /// In the chat at its depth, or before or after the character in the system prompt.
        #[arg(long, value_enum)]
        position: Option<NotePositionArg>,
        /// Remove the note.
        #[arg(long, conflicts_with_all = ["text", "depth", "every", "role", "position"])]
        clear: bool,
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

/// Play `persona` in the chat with `character` (`None`: the configured name).
pub fn use_persona(engine: &EngineHandle, character: String, persona: Option<String>, json: bool) -> Result<ExitCode> {
    engine.send(Command::Companion(CompanionCommand::UsePersona { character, persona })).map_err(|e| anyhow!(e))?;
    changed(engine, json)?;
    Ok(ExitCode::SUCCESS)
}

/// Attach a lorebook to (or detach it from) one character's chat.
pub fn chat_lorebook(engine: &EngineHandle, character: String, lorebook: String, attach: bool, json: bool) -> Result<ExitCode> {
    engine.send(Command::Companion(CompanionCommand::ChatLorebook { character, lorebook, attach, to_character: false })).map_err(|e| anyhow!(e))?;
    changed(engine, json)?;
    Ok(ExitCode::SUCCESS)
}

/// Wait for a message change to be stored; print it (as JSON with `json`).
/// Wait for a message control's outcome and print it: the reply as it now stands, or
/// with `user_side` (an edit of the user's own message) that message.
fn changed(engine: &EngineHandle, json: bool) -> Result<()> {
    changed_side(engine, json, false)
}

fn changed_side(engine: &EngineHandle, json: bool, user_side: bool) -> Result<()> {
    // A redraw streams as a send does: each draw on its own line, with the speaker's name.
    let mut stream = ReplyStream::new(json);
    let event = wait(engine, TURN_LIMIT, |e| {
        stream.hear(e);
        match e {
            CompanionEvent::Cancelled { .. } => Some(Err(anyhow!("cancelled; nothing was changed"))),
            e @ CompanionEvent::Changed { .. } => Some(Ok(e.clone())),
            _ => None,
        }
    });
    let streamed = stream.started;
    stream.end();
    let event = event??;
    if json {
        outln!("{}", serde_json::to_string(&event)?);
    } else if let CompanionEvent::Changed { action, turn, deleted, .. } = event {
        match turn {
            Some(t) if user_side => outln!("{action}: {}", t.user_text),
            // The reply was just streamed whole: no need to print it twice.
            Some(t) if streamed && action == "regenerated" => outln!("{action} (swipe {} of {})", t.swipe + 1, t.swipes.len()),
            Some(t) => outln!("{action}: {} (swipe {} of {})", t.reply, t.swipe + 1, t.swipes.len()),
            None if action == "deleted" => outln!("{action} {} exchange(s)", deleted.len()),
            None => outln!("{action}"),
        }
    }
    Ok(())
}

/// A reply streamed to stdout as it comes: the speaker's name with its first words (so a
/// draw that fails before any leaves no half line), each new draw on a line of its own,
/// a discarded draw said on stderr.
struct ReplyStream {
    out: std::io::Stdout,
    quiet: bool,
    speaker: Option<String>,
    started: bool,
}

impl ReplyStream {
    fn new(quiet: bool) -> Self {
        Self { out: std::io::stdout(), quiet, speaker: None, started: false }
    }

    fn hear(&mut self, e: &CompanionEvent) {
        match e {
            CompanionEvent::TurnStarted { name, .. } if !self.quiet => {
                self.end();
                self.speaker = Some(name.clone());
            }
            CompanionEvent::Token { text, .. } if !self.quiet => {
                if let Some(name) = self.speaker.take() {
                    let _ = write!(self.out, "{name}: ");
                    self.started = true;
                }
                let _ = write!(self.out, "{text}");
                let _ = self.out.flush();
            }
            CompanionEvent::Discarded { attempt, reason, .. } => {
                // The discarded draw's line ends before the note, and the next draw starts a new one.
                self.end();
                eprintln!("(reply {attempt} discarded: {reason})");
            }
            _ => {}
        }
    }

    /// End the line a reply was streamed on, if one was.
    fn end(&mut self) {
        if self.started {
            let _ = writeln!(self.out);
            let _ = self.out.flush();
            self.started = false;
        }
    }
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
                outln!("{}", serde_json::to_string(&out)?);
            }
        }
        ChatVerb::Repl { character } => repl(engine, &character)?,
        ChatVerb::History { character, limit } => {
            send(CompanionCommand::History { character, limit })?;
            let (name, turns, greeting, greetings, chosen, user) = wait(engine, QUICK_LIMIT, |e| match e {
                CompanionEvent::History { name, turns, greeting, greetings, greeting_swipe, user, .. } => {
                    Some((name.clone(), turns.clone(), greeting.clone(), greetings.clone(), *greeting_swipe, user.name.clone()))
                }
                _ => None,
            })?;
            if json {
                let messages = crate::companion::turn::control::messages(&turns, Some((&greetings, chosen)));
                outln!("{}", serde_json::to_string(&messages)?);
            } else {
                if let Some(greeting) = greeting.filter(|_| turns.first().is_none_or(|t| t.seq <= 1)) {
                    outln!("{name}: {greeting}");
                }
                print_history(&user, &name, &turns)?;
            }
        }
        ChatVerb::Variables { character } => {
            send(CompanionCommand::History { character, limit: 1 })?;
            let (local, global) = wait(engine, QUICK_LIMIT, |e| match e {
                CompanionEvent::History { variables, global_variables, .. } => Some((variables.clone(), global_variables.clone())),
                _ => None,
            })?;
            if json {
                outln!("{}", serde_json::json!({ "variables": local, "global": global }));
            } else if local.is_empty() && global.is_empty() {
                outln!("no variables");
            } else {
                for (name, value) in &local {
                    outln!("{name} = {value}");
                }
                for (name, value) in &global {
                    outln!("{name} = {value}  (global)");
                }
            }
        }
        ChatVerb::Note { character, text, depth, every, role, position, clear } => {
            use crate::companion::model::{NotePosition, NoteRole};
            send(CompanionCommand::History { character: character.clone(), limit: 1 })?;
            let (current, user_messages) = wait(engine, QUICK_LIMIT, |e| match e {
                CompanionEvent::History { author_note, user_messages, .. } => Some((author_note.clone(), *user_messages)),
                _ => None,
            })?;
            let asks = text.is_some() || depth.is_some() || every.is_some() || role.is_some() || position.is_some();
            if !asks && !clear {
                match (&current, json) {
                    (_, true) => outln!("{}", serde_json::json!({ "author_note": current, "user_messages": user_messages })),
                    (None, false) => outln!("no author's note"),
                    (Some(note), false) => {
                        let next = match note.next_in(user_messages) {
                            Some(_) if note.due(user_messages + 1) => "sent with your next message".to_string(),
                            Some(n) => format!("next sent with user message {} (the chat has {user_messages})", user_messages + n),
                            None => String::new(),
                        };
                        let summary = crate::companion::note_summary(note);
                        match next.is_empty() {
                            true => outln!("{}\n({summary})", note.text),
                            false => outln!("{}\n({summary}; {next})", note.text),
                        }
                    }
                }
                return Ok(ExitCode::SUCCESS);
            }
            let note = (!clear).then(|| {
                let mut note = current.unwrap_or_default();
                if let Some(text) = text {
                    note.text = text;
                }
                if let Some(depth) = depth {
                    note.depth = depth;
                }
                if let Some(every) = every {
                    note.every = every;
                }
                if let Some(role) = role {
                    note.role = match role {
                        NoteRoleArg::System => NoteRole::System,
                        NoteRoleArg::User => NoteRole::User,
                        NoteRoleArg::Assistant => NoteRole::Assistant,
                    };
                }
                if let Some(position) = position {
                    note.position = match position {
                        NotePositionArg::InChat => NotePosition::InChat,
                        NotePositionArg::Before => NotePosition::BeforeCharacter,
                        NotePositionArg::After => NotePosition::AfterCharacter,
                    };
                }
                note
            });
            send(CompanionCommand::AuthorNote { character, note })?;
            changed(engine, json)?;
        }
        ChatVerb::Cancel { character } => {
            send(CompanionCommand::Cancel { character })?;
            let running = wait(engine, QUICK_LIMIT, |e| match e {
                CompanionEvent::CancelRequested { running, .. } => Some(*running),
                _ => None,
            })?;
            if json {
                outln!("{}", serde_json::json!({ "status": if running { "cancelling" } else { "idle" } }));
            } else if running {
                outln!("cancelling the reply; nothing of it is stored");
            } else {
                outln!("no reply is being written");
            }
        }
        ChatVerb::Regenerate { character, expect } => {
            send(CompanionCommand::Regenerate { character, expect })?;
            changed(engine, json)?;
        }
        ChatVerb::Branch { character, message } => {
            send(CompanionCommand::Branch { character, message })?;
            changed(engine, json)?;
        }
        ChatVerb::Open { character, chat } => {
            send(CompanionCommand::Open { character, chat })?;
            changed(engine, json)?;
        }
        ChatVerb::New { character } => {
            send(CompanionCommand::NewChat { character })?;
            changed(engine, json)?;
        }
        ChatVerb::DeleteChat { character, chat } => {
            send(CompanionCommand::DeleteChat { character, chat: chat.clone() })?;
            let saved = wait(engine, QUICK_LIMIT, |e| match e {
                CompanionEvent::Chats { saved, .. } => Some(saved.clone()),
                _ => None,
            })?;
            match json {
                true => outln!("{}", serde_json::json!({ "deleted": chat, "saved": saved })),
                false => outln!("deleted saved chat {chat} ({} left)", saved.len()),
            }
        }
        ChatVerb::RenameChat { character, chat, title } => {
            send(CompanionCommand::RenameChat { character, chat: chat.clone(), title })?;
            let saved = wait(engine, QUICK_LIMIT, |e| match e {
                CompanionEvent::Chats { saved, .. } => Some(saved.clone()),
                _ => None,
            })?;
            let renamed = saved.iter().find(|c| c.id == chat);
            match (json, renamed) {
                (true, _) => outln!("{}", serde_json::json!({ "renamed": renamed, "saved": saved })),
                (false, Some(c)) => outln!("saved chat {} is now titled {:?}", c.id, c.title),
                (false, None) => outln!("renamed saved chat {chat}"),
            }
        }
        ChatVerb::Chats { character } => {
            send(CompanionCommand::Chats { character })?;
            let saved = wait(engine, QUICK_LIMIT, |e| match e {
                CompanionEvent::Chats { saved, .. } => Some(saved.clone()),
                _ => None,
            })?;
            if json {
                outln!("{}", serde_json::to_string(&saved)?);
            } else if saved.is_empty() {
                outln!("no saved chats");
            } else {
                for c in saved {
                    outln!("{}  {}  ({} exchanges, saved {})", c.id, c.title, c.turns, c.saved_at);
                }
            }
        }
        ChatVerb::Import { file, character } => {
            let path = std::path::absolute(&file)?;
            send(CompanionCommand::Import { character, path })?;
            let imported = wait(engine, TURN_LIMIT, |e| match e {
                CompanionEvent::Imported { imported, .. } => Some(imported.clone()),
                _ => None,
            })?;
            if json {
                outln!("{}", serde_json::to_string(&imported)?);
            } else {
                outln!("imported {} exchange(s) from {}", imported.exchanges, file.display());
                if let Some(saved) = &imported.saved {
                    outln!("the chat it replaced is saved as {saved} (`chat open`)");
                }
                for note in &imported.notes {
                    outln!("note: {note}");
                }
            }
        }
        ChatVerb::Export { character, out, format } => {
            let path = std::path::absolute(&out)?;
            let format = match format {
                ChatFormatArg::Jsonl => crate::companion::chats::ChatFormat::Jsonl,
                ChatFormatArg::Markdown => crate::companion::chats::ChatFormat::Markdown,
                ChatFormatArg::Json => crate::companion::chats::ChatFormat::Json,
            };
            send(CompanionCommand::Export { character, path, format })?;
            let (path, bytes) = wait(engine, QUICK_LIMIT, |e| match e {
                CompanionEvent::Exported { path, bytes, .. } => Some((path.clone(), *bytes)),
                _ => None,
            })?;
            if json {
                outln!("{}", serde_json::json!({ "path": path, "bytes": bytes }));
            } else {
                outln!("wrote {} ({bytes} bytes)", path.display());
            }
        }
        ChatVerb::Continue { character } => {
            send(CompanionCommand::Continue { character })?;
            changed(engine, json)?;
        }
        ChatVerb::Swipe { character, index } => {
            send(CompanionCommand::Swipe { character, index })?;
            changed(engine, json)?;
        }
        ChatVerb::Edit { character, message, text } => {
            let user_side = message.ends_with("-u");
            send(CompanionCommand::Edit { character, message, text })?;
            changed_side(engine, json, user_side)?;
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
                outln!("{}", serde_json::to_string(&characters)?);
            } else {
                for c in characters {
                    let last = c.last_chat_at.as_deref().unwrap_or("never");
                    outln!("{}  {}  ({}, {} exchanges, last chat {last})", c.id, c.name, c.origin, c.turns);
                }
            }
        }
        ChatVerb::Undo { character, expect } => {
            send(CompanionCommand::Undo { character, expect })?;
            let undone = wait(engine, QUICK_LIMIT, |e| match e {
                CompanionEvent::Undone { turn_id, .. } => Some(turn_id.clone()),
                _ => None,
            })?;
            match (json, undone) {
                (true, id) => outln!("{}", serde_json::json!({ "undone": id })),
                (false, Some(id)) => outln!("took back exchange {id}"),
                (false, None) => outln!("nothing to take back"),
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
    let mut stream = ReplyStream::new(quiet);
    let turn = wait(engine, TURN_LIMIT, |e| {
        stream.hear(e);
        match e {
            CompanionEvent::Cancelled { .. } => Some(Err(anyhow!("cancelled; nothing was saved"))),
            CompanionEvent::TurnCommitted { turn } => {
                // A reply that came whole (from the cache) is printed whole.
                if let Some(name) = stream.speaker.take().filter(|_| !stream.started) {
                    let _ = write!(stream.out, "{name}: {}", turn.reply);
                    stream.started = true;
                }
                Some(Ok((**turn).clone()))
            }
            _ => None,
        }
    });
    // The line a reply was streamed on ends, whether the reply was kept or not.
    stream.end();
    let turn = turn??;
    // The summarisation cycle runs after the commit; a process that left now would cut
    // it short (harmless — the turns stay unsummarised — but it would never finish).
    wait(engine, TURN_LIMIT, |e| matches!(e, CompanionEvent::Idle { .. }).then_some(()))?;
    Ok(turn)
}

fn print_history(user: &str, name: &str, turns: &[ChatTurn]) -> Result<()> {
    for t in turns {
        // Each message at its own time (an imported file's reply or carried message has
        // its own `send_date`).
        for m in t.carried_before() {
            outln!("[{}] {}: {}  (from the chat file)", m.at, m.speaker(t, user, name), m.text);
        }
        outln!("[{}] {}: {}", t.user_at(), t.user_or(user), t.user_text);
        outln!("[{}] {name}: {}", t.reply_at(), t.reply);
        for m in t.carried() {
            outln!("[{}] {}: {}  (from the chat file)", m.at, m.speaker(t, user, name), m.text);
        }
    }
    Ok(())
}

/// What `chat repl` takes besides a message.
const REPL_COMMANDS: &str = "/undo, /regenerate, /swipe N, /continue, /history, /help, /quit";

fn repl(engine: &EngineHandle, character: &str) -> Result<()> {
    let send = |c: CompanionCommand| engine.send(Command::Companion(c)).map_err(|e| anyhow!(e));
    let c = || character.to_string();
    eprintln!("chatting with {character}; commands: {REPL_COMMANDS} (a line starting with // is sent as a message starting with /)");
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line?;
        let text = line.trim();
        // `//…` is a message that starts with a slash; any other `/word` is a command, and
        // one this does not know is refused rather than sent to the character.
        let (command, argument) = match text.strip_prefix('/') {
            Some(rest) if !rest.starts_with('/') => {
                let mut words = rest.splitn(2, char::is_whitespace);
                (Some(words.next().unwrap_or_default().to_lowercase()), words.next().unwrap_or_default().trim().to_string())
            }
            _ => (None, String::new()),
        };
        // A control's failure (nothing to regenerate, no such swipe) is said and the chat goes on.
        let said = |result: Result<()>| {
            if let Err(e) = result {
                eprintln!("{e}");
            }
        };
        match command.as_deref() {
            None if text.is_empty() => continue,
            None => {
                let text = text.strip_prefix('/').unwrap_or(text);
                send(CompanionCommand::Send { character: c(), text: text.to_string(), now: None })?;
                // A failed turn is reported and the chat goes on: nothing was saved.
                if let Err(e) = wait_turn(engine, false) {
                    eprintln!("\n{e}");
                }
            }
            Some("quit" | "exit") => break,
            Some("help") => eprintln!("commands: {REPL_COMMANDS}"),
            Some("undo") => {
                send(CompanionCommand::Undo { character: c(), expect: None })?;
                said(wait(engine, QUICK_LIMIT, |e| matches!(e, CompanionEvent::Undone { .. }).then_some(())).map(|_| eprintln!("(took back the last exchange)")));
            }
            Some("regenerate" | "regen") => {
                send(CompanionCommand::Regenerate { character: c(), expect: None })?;
                said(changed(engine, false));
            }
            Some("continue") => {
                send(CompanionCommand::Continue { character: c() })?;
                said(changed(engine, false));
            }
            Some("swipe") => match argument.parse::<usize>() {
                Ok(index) => {
                    send(CompanionCommand::Swipe { character: c(), index })?;
                    said(changed(engine, false));
                }
                Err(_) => eprintln!("/swipe takes the swipe's number (from 0): /swipe 1"),
            },
            Some("history") => {
                send(CompanionCommand::History { character: c(), limit: 50 })?;
                let (name, turns, user) = wait(engine, QUICK_LIMIT, |e| match e {
                    CompanionEvent::History { name, turns, user, .. } => Some((name.clone(), turns.clone(), user.name.clone())),
                    _ => None,
                })?;
                print_history(&user, &name, &turns)?;
            }
            Some(other) => eprintln!("unknown command /{other}; commands: {REPL_COMMANDS} (nothing was sent)"),
        }
    }
    Ok(())
}
