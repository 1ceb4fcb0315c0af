//! The companion: one-to-one chat with a character that remembers, knows how long it
//! has been, and notices whether the user is with it or far away.
//!
//! Invariant (hold–wait–commit): the user's message and the reply are stored together,
//! in one transaction, only once the reply is valid. An empty reply, one that speaks for
//! the user, a cut-off stream, a failed provider or a cancel stores nothing at all — not
//! the exchange, not its memory turns, not the proximity change, not the clock.

pub mod chat_file;
pub mod chats;
pub mod demo;
pub mod lore;
pub mod model;
pub mod packet;
pub mod records;
mod stored_packet;
pub mod turn;
pub mod variables;

use crate::context::{Context, Reply};
use crate::llm::CancelToken;
use crate::memory::RetrievalHit;
pub use crate::config::{CompanionConfig, PacketBudgets};
use packet::Packet;
use records::{ChatCharacter, ChatTurn};
use serde::Serialize;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum CompanionError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Memory(#[from] crate::memory::MemoryError),
    #[error(transparent)]
    Llm(#[from] crate::llm::LlmError),
    #[error(transparent)]
    Template(#[from] crate::prompting::TemplateError),
    #[error("{name} is already answering; wait for the reply or cancel it")]
    Busy { name: String },
    #[error("no valid reply after {attempts} attempts (last: {last}); nothing was saved, send again to retry")]
    NoValidReply { attempts: u32, last: String },
    /// The user's words are never cut, so a message that alone fills most of the
    /// model's context cannot be answered.
    #[error("the message is too long: {tokens} tokens, and the prompt with it {prompt} of the {context} the profile's context holds; shorten or split it")]
    TooLong { tokens: u32, prompt: u32, context: u32 },
    /// The sender named the exchange it acts on and the chat's last one is another:
    /// another process (or window) changed the chat since the sender looked.
    #[error("the chat changed since you looked ({0}); it has been reloaded")]
    Stale(String),
    #[error("{0}")]
    Invalid(String),
}

pub use crate::context::Fault;

impl CompanionError {
    pub fn fault(&self) -> Fault {
        match self {
            CompanionError::Busy { .. } => Fault::Busy,
            CompanionError::TooLong { .. } => Fault::TooLong,
            CompanionError::Stale(_) | CompanionError::Store(crate::store::StoreError::Conflict(_)) => Fault::Conflict,
            CompanionError::Invalid(_) | CompanionError::Store(crate::store::StoreError::Invalid(_)) => Fault::Request,
            CompanionError::Store(crate::store::StoreError::NotFound(_)) => Fault::NotFound,
            CompanionError::Llm(_) | CompanionError::NoValidReply { .. } => Fault::Provider,
            CompanionError::Store(_) | CompanionError::Memory(_) | CompanionError::Template(_) => Fault::Library,
        }
    }

    /// The event that reports this failure.
    fn failed(&self, character_id: Option<String>) -> CompanionEvent {
        CompanionEvent::Failed { character_id, message: self.to_string(), fault: self.fault() }
    }
}

#[derive(Debug, Clone)]
pub enum CompanionCommand {
    /// Report every character with its chat progress as [`CompanionEvent::Characters`].
    List,
    /// Report the last `limit` exchanges as [`CompanionEvent::History`].
    History { character: String, limit: u32 },
    /// Send a message; `now` overrides the clock (tests, replays), RFC 3339.
    Send { character: String, text: String, now: Option<String> },
    /// Stop the reply being streamed; nothing of that turn is stored.
    Cancel { character: String },
    /// Take back the last exchange (and its memory turns). With `expect` (the id of the
    /// last exchange the sender shows) it is refused when the last exchange is another
    /// ([`CompanionError::Stale`]): a view another process made stale never takes back
    /// an exchange its user has not seen.
    Undo { character: String, expect: Option<String> },
    /// Draw the last reply again, keeping every draw as a swipe; `expect` as for `Undo`.
    Regenerate { character: String, expect: Option<String> },
    /// Extend the last reply: the model writes on from where it stops.
    Continue { character: String },
    /// Choose swipe `index` (0-based) of the last reply (before the first exchange: the greeting).
    Swipe { character: String, index: usize },
    /// Attach a lorebook (id or name) to this character's chat only — or with
    /// `to_character` to the character, so it fires in its scenes too — or detach it.
    ChatLorebook { character: String, lorebook: String, attach: bool, to_character: bool },
    /// Play a persona in this chat (`None`: the configured name).
    UsePersona { character: String, persona: Option<String> },
    /// Write the chat's Author's Note (`None`: remove it), from the next message on.
    AuthorNote { character: String, note: Option<model::AuthorNote> },
    /// Change the text of a message (`{turn}-u` or `{turn}-r`, see `chat history --json`).
    Edit { character: String, message: String, text: String },
    /// Delete the exchange of a message, or with `and_after` it and everything after it.
    Delete { character: String, message: String, and_after: bool },
    /// Branch at a message: the chat as it is is put aside whole; the chat being played
    /// keeps the exchanges up to that message's.
    Branch { character: String, message: String },
    /// Report the chats put aside for a character as [`CompanionEvent::Chats`].
    Chats { character: String },
    /// Play a saved chat; the chat being played is put aside.
    Open { character: String, chat: String },
    /// Start a fresh chat (the greeting alone); the chat being played is put aside whole.
    NewChat { character: String },
    /// Delete a saved chat for good; answered with the saved chats left ([`CompanionEvent::Chats`]).
    DeleteChat { character: String, chat: String },
    /// Retitle a saved chat; answered with the saved chats ([`CompanionEvent::Chats`]).
    RenameChat { character: String, chat: String, title: String },
    /// Import a SillyTavern chat file (`.jsonl`) as the chat being played.
    Import { character: String, path: std::path::PathBuf },
    /// Write the chat being played as a SillyTavern chat file, Markdown or JSON.
    Export { character: String, path: std::path::PathBuf, format: chats::ChatFormat },
    /// Add the demo character if the library does not have it.
    Demo,
    /// The chat this front door shows (`None`: none): while it is watched, a change
    /// another process makes to it is said as [`CompanionEvent::ChangedElsewhere`]
    /// within a couple of seconds ([`crate::watch`]). One per engine; the last wins.
    Watch { character: Option<String> },
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum CompanionEvent {
    Characters { characters: Vec<ChatCharacter> },
    History {
        character_id: String,
        name: String,
        turns: Vec<ChatTurn>,
        /// The chosen greeting, macros resolved: the chat's first message.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        greeting: Option<String>,
        /// Every greeting of the card (the first message's swipes) and the chosen one.
        greetings: Vec<String>,
        greeting_swipe: u32,
        /// Who the user plays in this chat, and the personas there are to choose from.
        user: records::ChatUser,
        personas: Vec<crate::character::Persona>,
        /// Every lorebook of the library, with where it fires for this chat (`None`: not
        /// attached).
        books: Vec<ChatBook>,
        /// The chat's Author's Note (`None`: none written), and how many user messages
        /// the chat holds (the note's `every` counts them).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        author_note: Option<model::AuthorNote>,
        user_messages: u32,
        /// The card creator's notes, for the user to read; never sent to a model.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        creator_notes: String,
        /// The chat's variables (`{{setvar}}`) as they stand, and the library's globals
        /// (`{{setglobalvar}}`).
        #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        variables: std::collections::BTreeMap<String, String>,
        #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        global_variables: std::collections::BTreeMap<String, String>,
    },
    /// The packet of the attempt about to be sent, exactly as it will be sent.
    TurnStarted { character_id: String, name: String, input: String, attempt: u32, packet: Box<Packet>, hits: Vec<RetrievalHit> },
    /// The draw of `attempt` waits for the model, busy with `holder` ("Tomas Reed,
    /// checkpoint 1"): the embedded model answers one call at a time.
    Waiting { character_id: String, attempt: u32, holder: String },
    /// A streamed fragment of the reply of `attempt`.
    Token { character_id: String, attempt: u32, text: String },
    /// A draw was thrown away (empty, spoke for the user, cut off); another may follow.
    Discarded { character_id: String, attempt: u32, reason: String },
    /// The exchange is stored.
    TurnCommitted { turn: Box<ChatTurn> },
    Cancelled { character_id: String },
    /// A cancel was asked for: `running` says whether a reply was being written (here or
    /// in another process); its `cancelled` follows from the turn itself.
    CancelRequested { character_id: String, running: bool },
    /// The command failed and nothing was stored; `fault` says whose fault it was.
    Failed { character_id: Option<String>, message: String, fault: Fault },
    /// The summarisation cycle compressed older turns into a memory.
    Summarised { character_id: String, memory_id: String },
    Undone { character_id: String, turn_id: Option<String> },
    /// Messages changed by hand or redrawn (`action`: regenerated, swiped, edited,
    /// deleted): `turn` is the exchange as it now is, `deleted` the exchanges removed.
    Changed { character_id: String, action: String, turn: Option<Box<ChatTurn>>, deleted: Vec<String> },
    /// The chats put aside for a character, newest first.
    Chats { character_id: String, saved: Vec<chats::SavedChat> },
    /// A chat file was read in as the chat being played.
    Imported { character_id: String, imported: chats::Imported },
    /// The chat was written as a chat file.
    Exported { character_id: String, path: std::path::PathBuf, bytes: usize },
    /// Everything a message set off is done (the turn, then the summarisation cycle).
    Idle { character_id: String },
    DemoReady { character_id: Option<String> },
    /// Another process changed the watched chat (`character_id`), or only other chats
    /// (`None`: the character list's counts moved); read them again.
    ChangedElsewhere { character_id: Option<String> },
}

/// A lorebook as the chat sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatBook {
    pub id: String,
    pub name: String,
    pub source: Option<lore::BookSource>,
}

/// Every lorebook of the library, the ones firing in `character_id`'s chat first.
fn chat_books(conn: &rusqlite::Connection, character_id: &str) -> Result<Vec<ChatBook>, CompanionError> {
    let attached = lore::book_ids(conn, character_id)?;
    let names = crate::interop::library::lorebook_names(conn)?;
    let mut books: Vec<ChatBook> = names
        .into_iter()
        .map(|(id, name)| {
            let source = attached.iter().find(|(a, _)| *a == id).map(|(_, s)| *s);
            ChatBook { id, name, source }
        })
        .collect();
    books.sort_by(|a, b| b.source.is_some().cmp(&a.source.is_some()).then_with(|| a.name.to_lowercase().cmp(&b.name.to_lowercase())));
    Ok(books)
}

/// A chat file's text, refused before reading when it is too large to be a chat.
fn read_chat_file(path: &std::path::Path) -> Result<String, CompanionError> {
    let cannot = |e: std::io::Error| CompanionError::Invalid(format!("cannot read {}: {e}", path.display()));
    let size = std::fs::metadata(path).map_err(cannot)?.len();
    if size > chat_file::MAX_FILE_BYTES {
        return Err(CompanionError::Invalid(format!(
            "{} is {size} bytes; a chat file may be at most {} bytes",
            path.display(),
            chat_file::MAX_FILE_BYTES
        )));
    }
    let bytes = std::fs::read(path).map_err(cannot)?;
    String::from_utf8(bytes).map_err(|e| CompanionError::Invalid(format!("{} is not UTF-8 text: {e}", path.display())))
}

/// Where and how often a note goes, in words ("in the chat at depth 4, as the system,
/// every user message").
pub fn note_summary(note: &model::AuthorNote) -> String {
    let role = match note.role {
        model::NoteRole::System => "system",
        model::NoteRole::User => "user",
        model::NoteRole::Assistant => "assistant",
    };
    let place = match note.position {
        model::NotePosition::InChat => format!("in the chat at depth {}, as the {role}", note.depth),
        model::NotePosition::BeforeCharacter => "before the character".into(),
        model::NotePosition::AfterCharacter => "after the character".into(),
    };
    let when = match note.every {
        0 => "paused".to_string(),
        1 => "every user message".to_string(),
        n => format!("every {n} user messages"),
    };
    format!("{place}, {when}")
}

/// The job key of a character's chat turn: one turn per character at a time, and a
/// cancel reaches the running one.
pub(crate) fn turn_job(character_id: &str) -> crate::context::JobKey {
    crate::context::JobKey::new("turn", character_id)
}

pub fn handle(ctx: &Arc<Context>, command: CompanionCommand) {
    handle_asked(ctx, command, None)
}

/// [`handle`], answering `reply` with the event that settles the command: the stored
/// exchange of a send (`turn_committed`), the change of a redraw or an edit, or the
/// failure that refused it (`failed`, with whose fault it was).
pub fn handle_asked(ctx: &Arc<Context>, command: CompanionCommand, reply: Option<Reply<CompanionEvent>>) {
    // Cancel must not queue behind the turn it cancels.
    if let CompanionCommand::Cancel { character } = &command {
        let id = ctx.store.with(|c| records::resolve_character(c, character)).map(|c| c.id);
        match id {
            Ok(id) => {
                // Here or in another process on the library (its lease is asked to stop).
                let running = ctx.jobs.cancel(&turn_job(&id));
                if !running {
                    tracing::info!(character = %id, "cancel: no reply is running");
                }
                let requested = CompanionEvent::CancelRequested { character_id: id, running };
                crate::context::answer(reply.as_ref(), &requested);
                ctx.emit(requested);
            }
            Err(e) => {
                let failed = CompanionError::from(e).failed(None);
                crate::context::answer(reply.as_ref(), &failed);
                ctx.emit(failed);
            }
        }
        return;
    }
    // The watch exists before the next command is spawned: commands run side by side,
    // and one sent after `Watch` must count as ours, not as another process's change.
    // Its place in line is taken now too: the last one sent wins.
    let ticket = matches!(command, CompanionCommand::Watch { .. }).then(|| watch(ctx).ticket());
    let ctx = ctx.clone();
    ctx.runtime.clone().spawn_blocking(move || {
        let run = || match (command, ticket) {
            (CompanionCommand::Watch { character }, Some(ticket)) => watch_chat(&ctx, ticket, character),
            (command, _) => run_command(&ctx, command, reply.as_ref()),
        };
        // Our own changes are told by our events, not by the watch.
        let outcome = match watching(&ctx) {
            Some(watch) => watch.ours(run),
            None => run(),
        };
        if let Err(e) = outcome {
            crate::context::report_failure(reply.as_ref(), e.failed(None), e.fault(), |failed| ctx.emit(failed));
        }
    });
}

/// The watch of the chat a front door shows, once one asked for it.
fn watching(ctx: &Context) -> Option<Arc<crate::watch::Watch<records::ChatStanding>>> {
    ctx.service::<crate::watch::Watch<records::ChatStanding>>().lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// [`watching`], started on first use.
fn watch(ctx: &Context) -> Arc<crate::watch::Watch<records::ChatStanding>> {
    let slot = ctx.service::<crate::watch::Watch<records::ChatStanding>>();
    let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
    slot.get_or_insert_with(|| {
        let emitter = ctx.emitter::<CompanionEvent>();
        crate::watch::Watch::start(&ctx.runtime, ctx.store.clone(), records::standing, move |subject, before, now| {
            let character_id = (before.chat != now.chat).then(|| subject.map(str::to_string)).flatten();
            tracing::info!(character = ?character_id, "the chat changed in another process");
            emitter.send(CompanionEvent::ChangedElsewhere { character_id });
        })
    })
    .clone()
}

/// The list of saved chats changed (a new chat, a branch, a chat opened or imported in
/// place of the one played): whoever shows it hears the list as it now stands, after the
/// event that answers the command.
fn saved_changed(ctx: &Context, character_id: &str) -> Result<(), CompanionError> {
    let saved = ctx.store.with(|c| chats::saved(c, character_id))?;
    ctx.emit(CompanionEvent::Chats { character_id: character_id.to_string(), saved });
    Ok(())
}

/// Watch `character`'s chat (a name or id; `None`: only the library) from now on.
fn watch_chat(ctx: &Context, ticket: u64, character: Option<String>) -> Result<(), CompanionError> {
    let id = match character {
        Some(c) => Some(ctx.store.with(|conn| records::resolve_character(conn, &c))?.id),
        None => None,
    };
    watch(ctx).set(ticket, id);
    Ok(())
}

/// A refusal because the chat moved: every front door watching it reads it again.
fn reload_if_stale(ctx: &Context, error: &CompanionError, character_id: &str) {
    if matches!(error, CompanionError::Stale(_)) {
        ctx.emit(CompanionEvent::ChangedElsewhere { character_id: Some(character_id.to_string()) });
    }
}

fn run_command(ctx: &Arc<Context>, command: CompanionCommand, reply: Option<&Reply<CompanionEvent>>) -> Result<(), CompanionError> {
    // The first event the command emits here is its answer; the events a turn emits on
    // its way (`turn_started`, tokens) go out through the context and answer nothing.
    let emit = |e: CompanionEvent| {
        crate::context::answer(reply, &e);
        ctx.emit(e)
    };
    let command_is_continue = matches!(command, CompanionCommand::Continue { .. });
    let expect = match &command {
        CompanionCommand::Regenerate { expect, .. } => expect.clone(),
        _ => None,
    };
    match command {
        CompanionCommand::List => emit(CompanionEvent::Characters { characters: ctx.store.with(records::list)? }),
        CompanionCommand::History { character, limit } => {
            let reader = ctx.store.reader()?;
            let info = records::resolve_character(&reader, &character)?;
            let turns = records::recent_turns(&reader, &info.id, limit, true)?;
            let state = records::load_state(&reader, &info.id)?;
            let mut user = records::chat_user(&reader, &state, &ctx.config().companion.user_name)?;
            if let Some(id) = &user.persona_id {
                user.image_png = crate::character::persona_image(&reader, id)?.map(Arc::new);
            }
            let personas = crate::character::personas(&reader)?;
            let vars = variables::for_message(&reader, &info.id, u64::MAX)?;
            // The greeting shows the values as they stand; showing it changes none.
            let shown_vars = std::cell::RefCell::new(vars.clone());
            let macros = crate::prompting::MacroContext {
                char: &info.name,
                user: &user.name,
                persona: &user.description,
                stable_seed: &info.id,
                random_seed: Some(crate::prompting::greeting_seed(&info.id)),
                variables: Some(&shown_vars),
                ..Default::default()
            };
            let (opening, greeting_swipe) = records::chat_greetings(&state, &info.card);
            let greetings: Vec<String> = opening.iter().map(|g| crate::prompting::expand(g, &macros).text).collect();
            let greeting = greetings.get(greeting_swipe as usize).filter(|g| !g.is_empty()).cloned();
            let creator_notes = info.card.creator_notes.clone();
            let books = chat_books(&reader, &info.id)?;
            let user_messages = records::user_messages_through(&reader, &info.id, u32::MAX)?;
            emit(CompanionEvent::History {
                character_id: info.id,
                name: info.name,
                turns,
                greeting,
                greetings,
                greeting_swipe,
                user,
                personas,
                books,
                author_note: state.author_note.clone(),
                user_messages,
                creator_notes,
                variables: vars.local,
                global_variables: vars.global,
            });
        }
        CompanionCommand::Send { character, text, now } => {
            // A failed turn is reported with its character so the chat shows it in place.
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            match turn::send(ctx, &info, &text, now.as_deref(), &CancelToken::new()) {
                Ok(turn) => {
                    crate::context::answer(reply, &CompanionEvent::TurnCommitted { turn: Box::new(turn) });
                    turn::summarise(ctx, &info)
                }
                Err(CompanionError::Llm(crate::llm::LlmError::Cancelled)) => {
                    emit(CompanionEvent::Cancelled { character_id: info.id.clone() })
                }
                Err(e) => crate::context::report_failure(reply, e.failed(Some(info.id.clone())), e.fault(), |failed| ctx.emit(failed)),
            }
            emit(CompanionEvent::Idle { character_id: info.id });
        }
        CompanionCommand::Cancel { .. } => {}
        CompanionCommand::Undo { character, expect } => {
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            match turn::undo(ctx, &info, expect.as_deref()) {
                Ok(turn_id) => {
                    emit(CompanionEvent::Undone { character_id: info.id.clone(), turn_id });
                    // A summary the exchange was in was reopened: what is left is summarised again.
                    turn::summarise(ctx, &info);
                }
                Err(e) => {
                    crate::context::report_failure(reply, e.failed(Some(info.id.clone())), e.fault(), |failed| ctx.emit(failed));
                    reload_if_stale(ctx, &e, &info.id);
                }
            }
        }
        CompanionCommand::Watch { character } => watch_chat(ctx, watch(ctx).ticket(), character)?,
        CompanionCommand::Branch { character, message } => {
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            let saved = chats::branch(ctx, &info, &message)?;
            emit(CompanionEvent::Changed { character_id: info.id.clone(), action: format!("branched (the original is saved chat {saved})"), turn: None, deleted: Vec::new() });
            saved_changed(ctx, &info.id)?;
        }
        CompanionCommand::Chats { character } => {
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            let saved = ctx.store.with(|c| chats::saved(c, &info.id))?;
            let listed = CompanionEvent::Chats { character_id: info.id, saved };
            // A list asked for by one request (HTTP) is that request's answer alone: every
            // chat socket hears `chats` when the list changes, not each time a client reads it.
            match reply {
                Some(reply) => crate::context::answer(Some(reply), &listed),
                None => ctx.emit(listed),
            }
        }
        CompanionCommand::Open { character, chat } => {
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            let put = chats::open(ctx, &info, &chat)?;
            let action = match put {
                Some(id) => format!("opened (the chat before is saved chat {id})"),
                None => "opened".into(),
            };
            emit(CompanionEvent::Changed { character_id: info.id.clone(), action, turn: None, deleted: Vec::new() });
            saved_changed(ctx, &info.id)?;
        }
        CompanionCommand::NewChat { character } => {
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            let action = match chats::start_new(ctx, &info)? {
                Some(id) => format!("new chat (the chat before is saved chat {id})"),
                None => "new chat".into(),
            };
            emit(CompanionEvent::Changed { character_id: info.id.clone(), action, turn: None, deleted: Vec::new() });
            saved_changed(ctx, &info.id)?;
        }
        CompanionCommand::DeleteChat { character, chat } => {
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            chats::delete_saved(ctx, &info, &chat)?;
            let saved = ctx.store.with(|c| chats::saved(c, &info.id))?;
            emit(CompanionEvent::Chats { character_id: info.id, saved });
        }
        CompanionCommand::RenameChat { character, chat, title } => {
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            chats::rename_saved(ctx, &info, &chat, &title)?;
            let saved = ctx.store.with(|c| chats::saved(c, &info.id))?;
            emit(CompanionEvent::Chats { character_id: info.id, saved });
        }
        CompanionCommand::Import { character, path } => {
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            let text = read_chat_file(&path)?;
            let source = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string());
            let imported = chats::import(ctx, &info, &text, &source)?;
            let replaced = imported.saved.is_some();
            emit(CompanionEvent::Imported { character_id: info.id.clone(), imported });
            if replaced {
                saved_changed(ctx, &info.id)?;
            }
        }
        CompanionCommand::Export { character, path, format } => {
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            let text = chats::export_as(ctx, &info, format)?;
            crate::interop::library::write_atomically(&path, text.as_bytes()).map_err(|e| CompanionError::Invalid(e.to_string()))?;
            emit(CompanionEvent::Exported { character_id: info.id, path, bytes: text.len() });
        }
        CompanionCommand::Demo => {
            let character_id = demo::ensure(&ctx.store)?;
            emit(CompanionEvent::DemoReady { character_id });
        }
        CompanionCommand::Regenerate { character, .. } | CompanionCommand::Continue { character } => {
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            let (mode, action) = match command_is_continue {
                true => (turn::control::Redraw::Continue, "continued"),
                false => (turn::control::Redraw::Swipe, "regenerated"),
            };
            match turn::control::redraw(ctx, &info, mode, expect.as_deref(), &CancelToken::new()) {
                Ok(turn) => {
                    let changed = CompanionEvent::Changed { character_id: info.id.clone(), action: action.into(), turn: Some(Box::new(turn)), deleted: Vec::new() };
                    emit(changed);
                }
                Err(CompanionError::Llm(crate::llm::LlmError::Cancelled)) => emit(CompanionEvent::Cancelled { character_id: info.id.clone() }),
                Err(e) => {
                    crate::context::report_failure(reply, e.failed(Some(info.id.clone())), e.fault(), |failed| ctx.emit(failed));
                    reload_if_stale(ctx, &e, &info.id);
                }
            }
            emit(CompanionEvent::Idle { character_id: info.id });
        }
        CompanionCommand::Swipe { character, index } => {
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            let turn = turn::control::choose_swipe(ctx, &info, index)?;
            let action = if turn.is_some() { "swiped" } else { "greeting" };
            emit(CompanionEvent::Changed { character_id: info.id, action: action.into(), turn: turn.map(Box::new), deleted: Vec::new() });
        }
        CompanionCommand::ChatLorebook { character, lorebook, attach, to_character } => {
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            let whom = if to_character { "the character" } else { "the chat" };
            let (book, name) = ctx.store.transaction(|tx| {
                let (book, name) =
                    crate::interop::library::resolve_lorebook(tx, &lorebook).map_err(|e| crate::store::StoreError::Invalid(e.to_string()))?;
                let detached = match (attach, to_character) {
                    (true, false) => return records::attach_chat_lorebook(tx, &info.id, &book).map(|_| (book, name)),
                    (true, true) => return crate::character::attach_lorebook(tx, &info.id, &book).map(|_| (book, name)),
                    (false, false) => records::detach_chat_lorebook(tx, &info.id, &book)?,
                    (false, true) => crate::character::detach_lorebook(tx, &info.id, &book)?,
                };
                if !detached {
                    return Err(crate::store::StoreError::Invalid(format!("lorebook {name:?} is not attached to {whom}")));
                }
                Ok((book, name))
            })?;
            let action = if attach { format!("lorebook {name} ({book}) attached to {whom}") } else { format!("lorebook {name} ({book}) detached from {whom}") };
            emit(CompanionEvent::Changed { character_id: info.id, action, turn: None, deleted: Vec::new() });
        }
        CompanionCommand::UsePersona { character, persona } => {
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            let found = turn::control::use_persona(ctx, &info, persona.as_deref())?;
            let action = match found {
                Some(p) => format!("persona {}", p.name),
                None => "persona none".into(),
            };
            emit(CompanionEvent::Changed { character_id: info.id, action, turn: None, deleted: Vec::new() });
        }
        CompanionCommand::AuthorNote { character, note } => {
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            let kept = turn::control::set_author_note(ctx, &info, note)?;
            let action = match kept {
                Some(n) => format!("author's note set ({})", note_summary(&n)),
                None => "author's note removed".into(),
            };
            emit(CompanionEvent::Changed { character_id: info.id, action, turn: None, deleted: Vec::new() });
        }
        CompanionCommand::Edit { character, message, text } if message == turn::control::GREETING => {
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            turn::control::edit_greeting(ctx, &info, &text)?;
            emit(CompanionEvent::Changed { character_id: info.id.clone(), action: "edited".into(), turn: None, deleted: Vec::new() });
        }
        CompanionCommand::Edit { character, message, text } => {
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            let turn = turn::control::edit(ctx, &info, &message, &text)?;
            emit(CompanionEvent::Changed { character_id: info.id.clone(), action: "edited".into(), turn: Some(Box::new(turn)), deleted: Vec::new() });
            turn::summarise(ctx, &info);
        }
        CompanionCommand::Delete { character, message, and_after } => {
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            let deleted = turn::control::delete(ctx, &info, &message, and_after)?;
            emit(CompanionEvent::Changed { character_id: info.id.clone(), action: "deleted".into(), turn: None, deleted });
            turn::summarise(ctx, &info);
        }
    }
    Ok(())
}
