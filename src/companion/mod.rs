//! The companion: one-to-one chat with a character that remembers, knows how long it
//! has been, and notices whether the user is with it or far away.
//!
//! Invariant (hold–wait–commit): the user's message and the reply are stored together,
//! in one transaction, only once the reply is valid. An empty reply, one that speaks for
//! the user, a cut-off stream, a failed provider or a cancel stores nothing at all — not
//! the exchange, not its memory turns, not the proximity change, not the clock.

pub mod cli;
pub mod demo;
pub mod packet;
pub mod records;
pub mod turn;

use crate::engine::{EngineContext, Event};
use crate::llm::CancelToken;
use crate::memory::RetrievalHit;
use packet::{Packet, PacketBudgets};
use records::{ChatCharacter, ChatTurn};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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
    #[error("{0}")]
    Invalid(String),
}

/// Chat settings in the config file (`[companion]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompanionConfig {
    /// How the user is named in the packet and the history.
    pub user_name: String,
    /// Exchanges read as candidates for the history block (its budget cuts further).
    pub history_turns: u32,
    /// Memories retrieved for the memory bank, and lore chunks for the persona.
    pub memory_k: usize,
    pub lore_k: usize,
    /// Without a "do you remember", the memory bank is sent only if the best memory is
    /// at least this similar to the message (cosine).
    pub memory_confidence: f32,
    /// Draws per turn before the user is told no valid reply came.
    pub max_attempts: u32,
    /// A gap this long starts a new session (a new sitting of the conversation).
    pub session_gap_minutes: i64,
    pub budgets: PacketBudgets,
}

impl Default for CompanionConfig {
    fn default() -> Self {
        Self {
            user_name: "User".into(),
            history_turns: 24,
            memory_k: 5,
            lore_k: 4,
            memory_confidence: 0.6,
            max_attempts: 3,
            session_gap_minutes: 180,
            budgets: PacketBudgets::default(),
        }
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
    /// Take back the last exchange (and its memory turns).
    Undo { character: String },
    /// Add the demo character if the library does not have it.
    Demo,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum CompanionEvent {
    Characters { characters: Vec<ChatCharacter> },
    History { character_id: String, name: String, turns: Vec<ChatTurn> },
    /// The packet of the attempt about to be sent, exactly as it will be sent.
    TurnStarted { character_id: String, name: String, input: String, attempt: u32, packet: Box<Packet>, hits: Vec<RetrievalHit> },
    /// A streamed fragment of the reply of `attempt`.
    Token { character_id: String, attempt: u32, text: String },
    /// A draw was thrown away (empty, spoke for the user, cut off); another may follow.
    Discarded { character_id: String, attempt: u32, reason: String },
    /// The exchange is stored.
    TurnCommitted { turn: Box<ChatTurn> },
    Cancelled { character_id: String },
    /// The turn failed and nothing was stored.
    Failed { character_id: Option<String>, message: String },
    /// The summarisation cycle compressed older turns into a memory.
    Summarised { character_id: String, memory_id: String },
    Undone { character_id: String, turn_id: Option<String> },
    /// Everything a message set off is done (the turn, then the summarisation cycle).
    Idle { character_id: String },
    DemoReady { character_id: Option<String> },
}

/// The cancel switch of each character's running turn.
static RUNNING: Mutex<Option<HashMap<String, CancelToken>>> = Mutex::new(None);

/// Held while a turn runs: a second message to the same character is refused.
pub(crate) struct RunningGuard(String);

impl RunningGuard {
    pub(crate) fn acquire(character_id: &str, name: &str, cancel: &CancelToken) -> Result<Self, CompanionError> {
        let mut running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
        let map = running.get_or_insert_with(HashMap::new);
        if map.contains_key(character_id) {
            return Err(CompanionError::Busy { name: name.to_string() });
        }
        map.insert(character_id.to_string(), cancel.clone());
        Ok(Self(character_id.to_string()))
    }
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        if let Some(map) = RUNNING.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            map.remove(&self.0);
        }
    }
}

fn cancel_running(character_id: &str) -> bool {
    let running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
    match running.as_ref().and_then(|m| m.get(character_id)) {
        Some(token) => {
            token.cancel();
            true
        }
        None => false,
    }
}

pub fn handle(ctx: &Arc<EngineContext>, command: CompanionCommand) {
    // Cancel must not queue behind the turn it cancels.
    if let CompanionCommand::Cancel { character } = &command {
        let id = ctx.store.with(|c| records::resolve_character(c, character)).map(|c| c.id);
        match id {
            Ok(id) => {
                if !cancel_running(&id) {
                    tracing::info!(character = %id, "cancel: no reply is running");
                }
            }
            Err(e) => ctx.emit(Event::Companion(CompanionEvent::Failed { character_id: None, message: e.to_string() })),
        }
        return;
    }
    let ctx = ctx.clone();
    ctx.runtime.clone().spawn_blocking(move || {
        if let Err(e) = run_command(&ctx, command) {
            ctx.emit(Event::Companion(CompanionEvent::Failed { character_id: None, message: e.to_string() }));
        }
    });
}

fn run_command(ctx: &Arc<EngineContext>, command: CompanionCommand) -> Result<(), CompanionError> {
    let emit = |e: CompanionEvent| ctx.emit(Event::Companion(e));
    match command {
        CompanionCommand::List => emit(CompanionEvent::Characters { characters: ctx.store.with(records::list)? }),
        CompanionCommand::History { character, limit } => {
            let reader = ctx.store.reader()?;
            let info = records::resolve_character(&reader, &character)?;
            let turns = records::recent_turns(&reader, &info.id, limit, true)?;
            emit(CompanionEvent::History { character_id: info.id, name: info.name, turns });
        }
        CompanionCommand::Send { character, text, now } => {
            // A failed turn is reported with its character so the chat shows it in place.
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            match turn::send(ctx, &info, &text, now.as_deref(), &CancelToken::new()) {
                Ok(_) => turn::summarise(ctx, &info),
                Err(CompanionError::Llm(crate::llm::LlmError::Cancelled)) => {
                    emit(CompanionEvent::Cancelled { character_id: info.id.clone() })
                }
                Err(e) => emit(CompanionEvent::Failed { character_id: Some(info.id.clone()), message: e.to_string() }),
            }
            emit(CompanionEvent::Idle { character_id: info.id });
        }
        CompanionCommand::Cancel { .. } => {}
        CompanionCommand::Undo { character } => {
            let info = ctx.store.with(|c| records::resolve_character(c, &character))?;
            let turn_id = turn::undo(ctx, &info)?;
            emit(CompanionEvent::Undone { character_id: info.id, turn_id });
        }
        CompanionCommand::Demo => {
            let character_id = demo::ensure(&ctx.store)?;
            emit(CompanionEvent::DemoReady { character_id });
        }
    }
    Ok(())
}
