//! A character's chats: the one being played, and the chats put aside — the original
//! of a branch, a chat an import replaced, a chat switched away from. Only the chat
//! being played has memories, so the character remembers one line of events: switching
//! takes the old chat's memories out and writes the new one's, in one transaction.
//!
//! Chat files (SillyTavern `.jsonl`) come in and go out here too (`chat_file` is the
//! codec).

use super::chat_file::{self, ChatFile, ExportChat, ExportExchange};
use super::records::{self, CharacterInfo, ChatState, ChatTurn};
use super::turn::control::hold;
use super::turn::memory_ids;
use super::CompanionError;
use crate::context::Context;
use crate::memory::MemoryBank;
use crate::memory::detect::Proximity;
use crate::store::StoreError;
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

/// A chat put aside, as the list shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SavedChat {
    pub id: String,
    pub title: String,
    pub saved_at: String,
    pub turns: u32,
}

/// A chat whole: what a saved chat holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct WholeChat {
    state: ChatState,
    turns: Vec<ChatTurn>,
    /// Its memories' pins, edits and deletions, as they were when it was put aside.
    #[serde(default)]
    curation: Vec<crate::memory::curate::HandCuration>,
    /// The summaries over its turns (written again with it, pins and edits kept).
    #[serde(default)]
    summaries: Vec<crate::memory::curate::KeptSummary>,
    /// Its lore timers (sticky, cooldown), so a chat played again goes on where it was.
    #[serde(default)]
    lore_timers: crate::lorebook::activation::ActivationState,
    /// Its chat variables (`{{setvar}}`), each with the messages that set it.
    #[serde(default)]
    variables: super::variables::ChatVariables,
}


/// The chats put aside for a character, newest first.
pub fn saved(conn: &Connection, character_id: &str) -> Result<Vec<SavedChat>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, title, saved_at, turns FROM companion_saved_chats WHERE character_id = ?1 ORDER BY saved_at DESC, rowid DESC",
    )?;
    let rows = stmt.query_map([character_id], |r| Ok(SavedChat { id: r.get(0)?, title: r.get(1)?, saved_at: r.get(2)?, turns: r.get(3)? }))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Put the chat being played aside under `title` (nothing when it is empty); returns the
/// saved chat's id.
fn put_aside(tx: &Connection, character_id: &str, title: &str) -> Result<Option<String>, StoreError> {
    let turns = records::all_turns(tx, character_id)?;
    let ids = memory_ids(&turns);
    let whole = WholeChat {
        state: records::load_state(tx, character_id)?,
        curation: crate::memory::curate::curation_of(tx, &ids)?,
        summaries: crate::memory::curate::summaries_over(tx, &ids)?,
        lore_timers: super::lore::load_state(tx, character_id)?,
        variables: super::variables::load(tx, character_id)?,
        turns,
    };
    // Nothing said yet, and no imported opening: nothing worth keeping (an edited
    // greeting alone is not a chat).
    if whole.turns.is_empty() && (whole.state.file.is_none() || records::opening_is_frozen(&whole.state)) {
        return Ok(None);
    }
    let mut value = serde_json::to_value(&whole).map_err(|e| StoreError::Corrupt(format!("cannot encode a chat: {e}")))?;
    // Its packets as the exchanges keep them: each block a span of its messages.
    if let Some(turns) = value.get_mut("turns").and_then(serde_json::Value::as_array_mut) {
        for (stored, turn) in turns.iter_mut().zip(&whole.turns) {
            if let Some(stored) = stored.as_object_mut() {
                stored.insert("packet".into(), super::stored_packet::to_stored(&turn.packet)?);
            }
        }
    }
    let json = value.to_string();
    let id = crate::store::new_id();
    tx.execute(
        "INSERT INTO companion_saved_chats(id, character_id, title, saved_at, turns, chat_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![id, character_id, title, crate::store::now_rfc3339(), whole.turns.len() as u32, json],
    )?;
    Ok(Some(id))
}

/// A saved chat, read whole.
fn read_saved(conn: &Connection, character: &CharacterInfo, id: &str) -> Result<WholeChat, StoreError> {
    let json: Option<String> = conn
        .query_row("SELECT chat_json FROM companion_saved_chats WHERE id = ?1 AND character_id = ?2", params![id, character.id], |r| r.get(0))
        .optional()?;
    let json = json.ok_or_else(|| StoreError::NotFound(format!("saved chat {id:?} of {} (see `chat chats`)", character.name)))?;
    let corrupt = |e: String| StoreError::Corrupt(format!("saved chat {id}: {e}"));
    let mut value: serde_json::Value = serde_json::from_str(&json).map_err(|e| corrupt(e.to_string()))?;
    if let Some(turns) = value.get_mut("turns").and_then(serde_json::Value::as_array_mut) {
        for packet in turns.iter_mut().filter_map(|t| t.get_mut("packet")) {
            super::stored_packet::restore_texts(packet).map_err(corrupt)?;
        }
    }
    serde_json::from_value(value).map_err(|e| corrupt(e.to_string()))
}

/// Replace the chat being played by `whole`, memories and all, inside `tx`: the old
/// chat's memories (and any summary over them) go, the new chat's are written from
/// `prepared`.
fn install(
    tx: &Connection,
    character_id: &str,
    whole: &WholeChat,
    prepared: crate::memory::PreparedMemories,
) -> Result<crate::memory::MemoryWrite, StoreError> {
    let current = records::all_turns(tx, character_id)?;
    let ids = memory_ids(&current);
    let (mut write, _) = crate::memory::summarise::reopen_covering(tx, &ids)?;
    for t in &current {
        write = write.and(crate::memory::remove_source(tx, &format!("chat:{}", t.id))?);
    }
    records::replace_chat(tx, character_id, &whole.state, &whole.turns)?;
    let write = write.and(prepared.write(tx)?);
    crate::memory::curate::restore_curation(tx, &whole.curation)?;
    crate::memory::curate::restore_summaries(tx, &memory_ids(&whole.turns), &whole.summaries)?;
    super::lore::save_state(tx, character_id, &whole.lore_timers)?;
    super::variables::save(tx, character_id, &whole.variables)?;
    Ok(write)
}

/// The memories of a whole chat, embedded before any transaction (keyword-only when
/// there is no embedding model).
fn prepare_memories(bank: &MemoryBank, ctx: &Context, character: &CharacterInfo, whole: &WholeChat) -> Result<crate::memory::PreparedMemories, CompanionError> {
    let user = ctx.store.with(|c| records::chat_user(c, &whole.state, &ctx.config().companion.user_name))?;
    let curated = |item: &crate::memory::NewMemory| whole.curation.iter().find(|c| item.id.as_deref() == Some(c.id.as_str()));
    let mut items: Vec<crate::memory::NewMemory> = whole
        .turns
        .iter()
        .flat_map(|t| super::turn::memories_of(t, &character.name, &user.name))
        // A memory deleted by hand stays deleted.
        .filter(|item| !curated(item).is_some_and(|c| c.deleted))
        .collect();
    // A memory edited by hand is written (and embedded) with its edited text.
    for item in &mut items {
        if let Some((text, _)) = curated(item).and_then(|c| c.edited.clone()) {
            item.text = text;
        }
    }
    let scope = crate::memory::Scope::character(character.id.clone());
    items.extend(whole.summaries.iter().map(|k| k.memory(scope.clone())));
    Ok(bank.prepare_or_keyword_only(items)?)
}

/// Branch at a message: the chat as it is now is put aside whole, and the chat being
/// played keeps the exchanges up to and including that message's exchange. Returns the
/// saved original's id.
pub fn branch(ctx: &Context, character: &CharacterInfo, message: &str) -> Result<String, CompanionError> {
    let _job = hold(ctx, character)?;
    let turns = ctx.store.with(|c| records::all_turns(c, &character.id))?;
    let at = if message == super::turn::control::GREETING {
        None
    } else {
        let turn_id = message.strip_suffix("-u").or_else(|| message.strip_suffix("-r"));
        let found = turn_id.and_then(|id| turns.iter().find(|t| t.id == id));
        Some(found.ok_or_else(|| CompanionError::Invalid(format!("{}'s chat has no message {message:?} (see `chat history --json`)", character.name)))?.seq)
    };
    let doomed: Vec<&ChatTurn> = turns.iter().filter(|t| at.is_none_or(|seq| t.seq > seq)).collect();
    let bank = crate::memory::bank_for(ctx)?;
    let memory_ids = memory_ids(doomed.iter().copied());
    let title = format!("before the branch at {message}");
    let (saved, write) = bank.store().transaction(|tx| {
        let saved = put_aside(tx, &character.id, &title)?
            .ok_or_else(|| StoreError::Invalid(format!("{}'s chat is empty: there is nothing to branch", character.name)))?;
        let (mut write, _) = crate::memory::summarise::reopen_covering(tx, &memory_ids)?;
        for t in &doomed {
            write = write.and(crate::memory::remove_source(tx, &format!("chat:{}", t.id))?);
            records::delete_turn(tx, &character.id, &t.id)?;
        }
        // The branch ends at its exchange: a chat file's messages that came after it go too.
        if let Some(kept) = at.and_then(|seq| turns.iter().find(|t| t.seq == seq))
            && let Some(mut file) = kept.file.clone()
            && file.get("after").and_then(serde_json::Value::as_array).is_some_and(|a| !a.is_empty())
        {
            file["after"] = serde_json::json!([]);
            records::set_turn_file(tx, &kept.id, Some(&file))?;
        }
        // What the cut messages set goes with them.
        super::variables::forget_from(tx, &character.id, super::lore::message_number(at.map_or(1, |seq| seq + 1)))?;
        Ok((saved, write))
    })?;
    bank.publish(write);
    Ok(saved)
}

/// Switch to a saved chat: the chat being played is put aside, the saved one is played
/// (its memories written anew). Returns the id the put-aside chat got, if it had any.
pub fn open(ctx: &Context, character: &CharacterInfo, saved_id: &str) -> Result<Option<String>, CompanionError> {
    let _job = hold(ctx, character)?;
    let bank = crate::memory::bank_for(ctx)?;
    // Read first, to embed outside the transaction; the character is held, so the row
    // is the same when the transaction takes it out.
    let (whole, opened) = ctx.store.with(|c| Ok((read_saved(c, character, saved_id)?, saved_title(c, saved_id)?)))?;
    let prepared = prepare_memories(&bank, ctx, character, &whole)?;
    // The title says which chat took its place ("switched away from" alone named none).
    let title = format!("put aside to open “{opened}”");
    let (put, write) = bank.store().transaction(|tx| {
        let put = put_aside(tx, &character.id, &title)?;
        tx.execute("DELETE FROM companion_saved_chats WHERE id = ?1", [saved_id])?;
        let write = install(tx, &character.id, &whole, prepared)?;
        Ok((put, write))
    })?;
    bank.publish(write);
    Ok(put)
}

/// A saved chat's title (empty when it has none).
fn saved_title(conn: &Connection, id: &str) -> Result<String, StoreError> {
    let title: Option<String> = conn.query_row("SELECT title FROM companion_saved_chats WHERE id = ?1", [id], |r| r.get(0)).optional()?;
    Ok(title.unwrap_or_default())
}

/// Start a fresh chat, as SillyTavern's "Start new chat" does: the chat being played is
/// put aside whole (as a branch or an open does), and the new one holds nothing but the
/// greeting; the persona played goes on being played. Returns the id the put-aside chat
/// got, if it had anything worth keeping.
pub fn start_new(ctx: &Context, character: &CharacterInfo) -> Result<Option<String>, CompanionError> {
    let _job = hold(ctx, character)?;
    let bank = crate::memory::bank_for(ctx)?;
    let persona_id = ctx.store.with(|c| records::load_state(c, &character.id))?.persona_id;
    let fresh = WholeChat { state: ChatState { persona_id, ..Default::default() }, ..Default::default() };
    let prepared = prepare_memories(&bank, ctx, character, &fresh)?;
    let (put, write) = bank.store().transaction(|tx| {
        let put = put_aside(tx, &character.id, "put aside for a new chat")?;
        let write = install(tx, &character.id, &fresh, prepared)?;
        Ok((put, write))
    })?;
    bank.publish(write);
    Ok(put)
}

/// Delete a saved chat for good (the chat being played is not touched).
pub fn delete_saved(ctx: &Context, character: &CharacterInfo, saved_id: &str) -> Result<(), CompanionError> {
    let deleted = ctx.store.transaction(|tx| {
        Ok(tx.execute("DELETE FROM companion_saved_chats WHERE id = ?1 AND character_id = ?2", params![saved_id, character.id])?)
    })?;
    match deleted {
        0 => Err(StoreError::NotFound(format!("saved chat {saved_id:?} of {} (see `chat chats`)", character.name)).into()),
        _ => Ok(()),
    }
}

/// Give a saved chat a title of the user's own.
pub fn rename_saved(ctx: &Context, character: &CharacterInfo, saved_id: &str, title: &str) -> Result<(), CompanionError> {
    let title = title.trim();
    if title.is_empty() {
        return Err(CompanionError::Invalid("a saved chat's title cannot be empty".into()));
    }
    let renamed = ctx.store.transaction(|tx| {
        Ok(tx.execute("UPDATE companion_saved_chats SET title = ?3 WHERE id = ?1 AND character_id = ?2", params![saved_id, character.id, title])?)
    })?;
    match renamed {
        0 => Err(StoreError::NotFound(format!("saved chat {saved_id:?} of {} (see `chat chats`)", character.name)).into()),
        _ => Ok(()),
    }
}

/// What an import did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Imported {
    pub exchanges: usize,
    /// The chat the import replaced, put aside (`None`: there was none).
    pub saved: Option<String>,
    /// Messages carried along rather than read as conversation.
    pub notes: Vec<String>,
}

/// Import a SillyTavern chat file as the chat being played; the chat it replaces is put
/// aside. A malformed file changes nothing and names the line.
pub fn import(ctx: &Context, character: &CharacterInfo, text: &str, source: &str) -> Result<Imported, CompanionError> {
    let file = chat_file::parse(text).map_err(|e| CompanionError::Invalid(format!("{source}: {e}")))?;
    let _job = hold(ctx, character)?;
    let mut whole = whole_from_file(ctx, character, &file);
    let mut notes = file.notes.clone();
    // A file of another character's chat is most likely the wrong file: said, not refused
    // (a renamed character's own chat is as likely).
    if let Some(other) = file.raw["header"]["character_name"].as_str().map(str::trim).filter(|n| !n.is_empty())
        && !other.eq_ignore_ascii_case(character.name.trim())
    {
        notes.push(format!("the file is a chat with {other}, not {}: it was read in as {}'s chat", character.name, character.name));
    }
    // Who the user played: the persona of the file's `user_name`, when the library has one.
    if let Some(user) = file.raw["header"]["user_name"].as_str().map(str::trim).filter(|u| !u.is_empty()) {
        let personas = ctx.store.with(crate::character::personas)?;
        match personas.iter().find(|p| p.name.trim().eq_ignore_ascii_case(user)) {
            Some(persona) => whole.state.persona_id = Some(persona.id.clone()),
            None => notes.push(format!("the file's user, {user}, is no persona of this library: the chat plays as the configured name")),
        }
    }
    let metadata = &file.raw["header"]["chat_metadata"];
    // The file's Author's Note goes on steering the chat as it did there.
    whole.state.author_note = crate::companion::model::AuthorNote::from_chat_metadata(metadata);
    if let Some(note) = &whole.state.author_note {
        notes.push(format!("the file's Author's Note is this chat's: sent {} (see `chat note`)", super::note_summary(note)));
    }
    // The chat's own lorebook (SillyTavern's chat-bound World Info), found by name.
    let chat_book = metadata["world_info"].as_str().map(str::trim).filter(|b| !b.is_empty()).map(str::to_string);
    let bank = crate::memory::bank_for(ctx)?;
    let prepared = prepare_memories(&bank, ctx, character, &whole)?;
    let title = format!("before the import of {source}");
    let (saved, write, attached) = bank.store().transaction(|tx| {
        let saved = put_aside(tx, &character.id, &title)?;
        let write = install(tx, &character.id, &whole, prepared)?;
        let attached = match &chat_book {
            Some(book) => match crate::interop::library::resolve_lorebook(tx, book) {
                Ok((id, _)) => records::attach_chat_lorebook(tx, &character.id, &id).map(|_| Ok(book.clone()))?,
                Err(e) => Err(format!("the file's chat lorebook {book:?} is not attached: {e} (import it, then `lorebook attach {book:?} --chat`)")),
            },
            None => Ok(String::new()),
        };
        Ok((saved, write, attached))
    })?;
    match attached {
        Ok(book) if !book.is_empty() => notes.push(format!("the file's chat lorebook {book:?} is attached to this chat")),
        Ok(_) => {}
        Err(note) => notes.push(note),
    }
    bank.publish(write);
    Ok(Imported { exchanges: whole.turns.len(), saved, notes })
}

/// The stored turns of an imported file: times from the file where it has them
/// (otherwise the previous one's, or now), sessions split by the configured gap.
fn whole_from_file(ctx: &Context, character: &CharacterInfo, file: &ChatFile) -> WholeChat {
    let config = ctx.config().companion;
    let now = crate::store::now_rfc3339();
    let mut state = ChatState { file: Some(file.raw.clone()), ..Default::default() };
    // The opening greeting picks the card's greeting with the same text, if there is one.
    if let Some(greeting) = file.greeting.as_deref() {
        let all = records::greetings(&character.card);
        if let Some(i) = all.iter().position(|g| g.trim() == greeting.trim()) {
            state.greeting = i as u32;
        }
    }
    let mut turns = Vec::new();
    let mut last_at: Option<String> = None;
    for (i, e) in file.exchanges.iter().enumerate() {
        let at = e.at.clone().or_else(|| last_at.clone()).unwrap_or_else(|| now.clone());
        let when = chrono::DateTime::parse_from_rfc3339(&at).map(|t| t.with_timezone(&chrono::Utc)).unwrap_or_else(|_| chrono::Utc::now());
        let session = super::turn::session_for(&state, &character.id, when, config.session_gap_minutes);
        state.session = Some(session.clone());
        state.last_chat_at = Some(at.clone());
        let id = crate::store::new_id();
        turns.push(ChatTurn {
            id: id.clone(),
            character_id: character.id.clone(),
            seq: i as u32 + 1,
            session,
            user_text: e.user_text.clone(),
            reply: e.reply.clone(),
            at: at.clone(),
            user_memory_id: Some(format!("{id}-u")),
            reply_memory_id: Some(format!("{id}-r")),
            proximity: Proximity::default(),
            packet: Default::default(),
            hits: Vec::new(),
            attempts: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            from_cache: false,
            elapsed_ms: 0,
            swipes: e.swipes.clone(),
            swipe: e.swipe,
            // The name the file gives the user's message (each message carries its own).
            user_name: e.raw.get("user").and_then(|u| u.get("name")).and_then(|n| n.as_str()).map(str::to_string),
            file: Some(e.raw.clone()),
        });
        last_at = Some(at);
    }
    state.turns = turns.len() as u32;
    // The file's variables hold from its start on: which message set each is not said.
    let mut variables = super::variables::ChatVariables::default();
    variables.record(1, &chat_file::variables(file));
    WholeChat { state, turns, curation: Vec::new(), summaries: Vec::new(), lore_timers: Default::default(), variables }
}

/// What a chat is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatFormat {
    /// A SillyTavern chat file (swipes included; round-trips).
    #[default]
    Jsonl,
    /// To read: the greeting and every message, each with its speaker.
    Markdown,
    /// For scripts: `{character, user, messages}` with the messages as `chat history --json` lists them.
    Json,
}

/// The chat being played, written as `format`.
pub fn export_as(ctx: &Context, character: &CharacterInfo, format: ChatFormat) -> Result<String, CompanionError> {
    if format == ChatFormat::Jsonl {
        return export(ctx, character);
    }
    let whole = Exportable::load(ctx, character)?;
    let (turns, user) = (&whole.turns, &whole.user);
    let messages = super::turn::control::messages(turns, Some((&whole.greetings, whole.chosen)));
    Ok(match format {
        ChatFormat::Json => {
            let doc = serde_json::json!({ "character": character.name, "user": user.name, "messages": messages });
            serde_json::to_string_pretty(&doc).map_err(|e| CompanionError::Invalid(format!("cannot write the chat: {e}")))?
        }
        _ => {
            let mut out = format!("# {} and {}\n\n", character.name, user.name);
            for m in &messages {
                // A user message under the name it was sent as (a persona since put down, a file's user).
                let sent_as = || turns.iter().find(|t| super::turn::control::user_message_id(&t.id) == m.id).map(|t| t.user_or(&user.name));
                let who = if m.role == "user" { sent_as().unwrap_or(user.name.as_str()) } else { character.name.as_str() };
                out.push_str(&format!("**{who}**: {}\n\n", m.text.trim()));
            }
            out
        }
    })
}

/// A chat read whole for an export: its state, exchanges, who the user is, and its
/// greetings with the user's name in them.
struct Exportable {
    /// The chat variables as they stand now.
    variables: std::collections::BTreeMap<String, String>,
    state: ChatState,
    turns: Vec<ChatTurn>,
    user: records::ChatUser,
    greetings: Vec<String>,
    chosen: u32,
}

impl Exportable {
    fn load(ctx: &Context, character: &CharacterInfo) -> Result<Self, CompanionError> {
        let (state, turns, user, variables) = ctx.store.with(|c| {
            let state = records::load_state(c, &character.id)?;
            let user = records::chat_user(c, &state, &ctx.config().companion.user_name)?;
            let variables = super::variables::load(c, &character.id)?.before(u64::MAX);
            Ok((state, records::all_turns(c, &character.id)?, user, variables))
        })?;
        let macros = crate::prompting::MacroContext {
            char: &character.name,
            user: &user.name,
            persona: &user.description,
            stable_seed: &character.id,
            random_seed: Some(crate::prompting::greeting_seed(&character.id)),
            ..Default::default()
        };
        let (opening, chosen) = records::chat_greetings(&state, &character.card);
        let greetings = opening.iter().map(|g| crate::prompting::expand(g, &macros).text).collect();
        Ok(Self { state, turns, user, greetings, chosen, variables })
    }
}

/// The chat being played as a SillyTavern chat file.
pub fn export(ctx: &Context, character: &CharacterInfo) -> Result<String, CompanionError> {
    let Exportable { state, turns, user, greetings, chosen, variables } = Exportable::load(ctx, character)?;
    let from_the_start = turns.first().is_none_or(|t| t.seq <= 1);
    let created = turns.first().map(|t| t.at.clone()).unwrap_or_else(crate::store::now_rfc3339);
    let chat = ExportChat {
        user_name: &user.name,
        character_name: &character.name,
        raw: state.file.as_ref(),
        greeting: from_the_start.then_some((greetings.as_slice(), chosen)),
        created: &created,
        exchanges: turns
            .iter()
            .map(|t| ExportExchange {
                user_text: &t.user_text,
                user_name: t.user_name.as_deref(),
                reply: &t.reply,
                swipes: &t.swipes,
                swipe: t.swipe,
                at: &t.at,
                raw: t.file.as_ref(),
            })
            .collect(),
        variables: &variables,
        author_note: state.author_note.as_ref(),
    };
    Ok(chat_file::render(&chat))
}
