//! Control over every message of a chat: regenerate the last reply (every draw kept as
//! a swipe), choose a swipe, edit a message, delete a message or it and everything
//! after it. Each is one transaction that also changes the memories the messages
//! became (their text, keyword rows and vectors) and takes apart any summary that
//! covered a changed message, so the next summarisation cycle writes it anew. Each is
//! refused while a turn for that character runs.

use super::{Accepted, Agent, Draw, TurnDraft, draw, prepare};
use crate::companion::model::AuthorNote;
use crate::companion::records::{self, CharacterInfo, ChatTurn};
use crate::companion::{CompanionError, turn_job};
use crate::context::Context;
use crate::llm::{CancelToken, LlmClient};
use crate::memory::MemoryBank;
use crate::prompting::PromptTemplates;
use serde::Serialize;
use std::sync::Arc;

/// One message of a chat as scripts read it (`chat history --json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MessageView {
    pub id: String,
    /// `user` or `character`.
    pub role: &'static str,
    pub text: String,
    /// Every draw of a character message, and the chosen one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swipes: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swipe: Option<u32>,
    /// A message an imported chat file had in a row with others (`{turn}-b{n}` before its
    /// exchange, `{turn}-a{n}` after): sent to the model with the chat, not edited here.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub from_file: bool,
    /// Who the file says wrote it (empty: the exchange's user or the character).
    #[serde(skip)]
    pub speaker: Option<String>,
    /// When it was sent (RFC 3339): a message read from a chat file keeps its own
    /// `send_date`; none for the greeting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

/// The greeting's message id: it is the chat's first message, not an exchange.
pub const GREETING: &str = "greeting";

/// The messages of `turns`, in order: the greeting (its swipes the card's greetings,
/// `greeting` = the texts and the chosen index) while the chat reaches back to its start,
/// then each exchange's user message (`{turn}-u`) and the character's (`{turn}-r`).
/// The exchanges' ids are those of the memories they became.
pub fn messages(turns: &[ChatTurn], greeting: Option<(&[String], u32)>) -> Vec<MessageView> {
    let from_the_start = turns.first().is_none_or(|t| t.seq <= 1);
    let opening = greeting.filter(|(all, _)| from_the_start && !all.is_empty()).map(|(all, chosen)| {
        let swipe = chosen.min(all.len() as u32 - 1);
        MessageView {
            id: GREETING.into(),
            role: "character",
            text: all[swipe as usize].clone(),
            swipes: Some(all.to_vec()),
            swipe: Some(swipe),
            from_file: false,
            speaker: None,
            at: None,
        }
    });
    let carried = |t: &ChatTurn, list: Vec<crate::companion::model::CarriedMessage>, mark: char| -> Vec<MessageView> {
        list.into_iter()
            .enumerate()
            .map(|(i, m)| MessageView {
                id: format!("{}-{mark}{i}", t.id),
                role: if m.user { "user" } else { "character" },
                text: m.text,
                swipes: None,
                swipe: None,
                from_file: true,
                speaker: Some(m.name).filter(|n| !n.is_empty()),
                at: Some(m.at),
            })
            .collect()
    };
    opening
        .into_iter()
        .chain(turns.iter()
        .flat_map(|t| {
            let mut all = carried(t, t.carried_before(), 'b');
            all.push(MessageView {
                id: user_message_id(&t.id),
                role: "user",
                text: t.user_text.clone(),
                swipes: None,
                swipe: None,
                from_file: false,
                speaker: None,
                at: Some(t.user_at()),
            });
            all.push(MessageView {
                id: reply_message_id(&t.id),
                role: "character",
                text: t.reply.clone(),
                swipes: Some(t.swipes.clone()),
                swipe: Some(t.swipe),
                from_file: false,
                speaker: None,
                at: Some(t.reply_at()),
            });
            all.extend(carried(t, t.carried(), 'a'));
            all
        }))
        .collect()
}

/// The id of exchange `turn`'s user message.
pub fn user_message_id(turn: &str) -> String {
    format!("{turn}-u")
}

/// The id of exchange `turn`'s reply.
pub fn reply_message_id(turn: &str) -> String {
    format!("{turn}-r")
}

/// What a message id is, for an error that names one that is not.
const MESSAGE_IDS: &str = "a message id is an exchange's id followed by `-u` (the user's message) or `-r` (the reply), or `greeting` \
     for an edit — `messages[].id` in `chat history --json` or GET /api/chat/<character>/history, where each exchange also lists \
     `user_message_id` and `reply_message_id`";

/// Which message an id names: its exchange, and whether it is the reply.
fn find(ctx: &Context, character: &CharacterInfo, message: &str) -> Result<(ChatTurn, bool), CompanionError> {
    let turns = ctx.store.with(|c| records::all_turns(c, &character.id))?;
    let (turn_id, reply) = match message.rsplit_once('-') {
        Some((turn, "u")) => (turn, false),
        Some((turn, "r")) => (turn, true),
        _ if turns.iter().any(|t| t.id == message) => {
            return Err(CompanionError::Invalid(format!(
                "{message:?} is an exchange of {}'s chat, not one message: its user message is {:?}, its reply {:?}",
                character.name,
                user_message_id(message),
                reply_message_id(message)
            )));
        }
        _ => return Err(CompanionError::Invalid(format!("{message:?} is not a message id: {MESSAGE_IDS}"))),
    };
    let turn = turns
        .into_iter()
        .find(|t| t.id == turn_id)
        .ok_or_else(|| CompanionError::Invalid(format!("{}'s chat has no message {message:?}", character.name)))?;
    Ok((turn, reply))
}

/// Held while a message of this character's chat changes: no turn runs meanwhile.
pub(crate) fn hold(ctx: &Context, character: &CharacterInfo) -> Result<crate::context::Job, CompanionError> {
    ctx.jobs
        .try_start(turn_job(&character.id), &CancelToken::new())
        .ok_or_else(|| CompanionError::Busy { name: character.name.clone() })
}

/// Refuse a change to the chat's last exchange when it is not the one the sender saw
/// (`expect`: that exchange's id; `None`: unchecked, as the CLI sends by default). Called
/// with the chat held, so nothing of ours or of another process moves it meanwhile.
pub fn expect_last(conn: &rusqlite::Connection, character: &CharacterInfo, expect: Option<&str>) -> Result<(), CompanionError> {
    let Some(expect) = expect else { return Ok(()) };
    match records::recent_turns(conn, &character.id, 1, false)?.pop() {
        Some(last) if last.id == expect => Ok(()),
        Some(last) => Err(CompanionError::Stale(format!("its last exchange is now #{}, not the one you saw", last.seq))),
        None => Err(CompanionError::Stale("it holds no exchange now".into())),
    }
}

/// What a redraw of the last reply does with the draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redraw {
    /// A new draw of the whole reply, kept as a new chosen swipe.
    Swipe,
    /// More of the chosen reply: the draw is appended to it.
    Continue,
}

/// Draw the last reply again (a new chosen swipe) or extend it (`mode`).
pub fn redraw(
    ctx: &Arc<Context>,
    character: &CharacterInfo,
    mode: Redraw,
    expect: Option<&str>,
    cancel: &CancelToken,
) -> Result<ChatTurn, CompanionError> {
    let job = ctx
        .jobs
        .try_start(turn_job(&character.id), cancel)
        .ok_or_else(|| CompanionError::Busy { name: character.name.clone() })?;
    ctx.store.with(|c| Ok(expect_last(c, character, expect)))??;
    let last = ctx
        .store
        .with(|c| records::recent_turns(c, &character.id, 1, true))?
        .pop()
        .ok_or_else(|| CompanionError::Invalid(format!("{}'s chat has no reply to regenerate", character.name)))?;
    let config = ctx.config();
    let profile = config.profile_for_role("companion").map_err(|e| CompanionError::Invalid(e.to_string()))?.clone();
    let agent = Agent { client: LlmClient::from_profile(&profile, Some(&ctx.store))?.for_agent("companion"), profile, templates: PromptTemplates::shipped()? };
    let bank = crate::memory::bank_for(ctx)?;
    // A regenerate is the message's next draw (1 for the first redraw): its rolls are new.
    let generation = match mode {
        Redraw::Swipe => crate::companion::lore::Generation::Regenerate { draw: u32::try_from(last.swipes.len().max(1)).unwrap_or(u32::MAX) },
        Redraw::Continue => crate::companion::lore::Generation::Continue,
    };
    let prepared = prepare(ctx, &bank, character, &config.companion, &last.user_text, Some(&last), generation, cancel)?;
    let now = chrono::DateTime::parse_from_rfc3339(&last.at).map(|t| t.with_timezone(&chrono::Utc)).unwrap_or_else(|_| chrono::Utc::now());
    let continuing = match mode {
        Redraw::Swipe => None,
        Redraw::Continue => Some(last.reply.clone()),
    };
    let draft = TurnDraft { character, config: config.companion, text: &last.user_text, now, prepared, continuing };
    let attempts = draft.config.max_attempts.max(1);
    let mut last_reason = String::new();
    for attempt in 1..=attempts {
        match draw(ctx, &agent, &draft, attempt, &last_reason, cancel)? {
            Draw::Accepted(accepted) => {
                // The memories this draw was given, recorded as the companion's last injection.
                let hits = crate::companion::packet::carried(&accepted.packet, &draft.prepared.memories);
                let injection = Injection {
                    agent: format!("companion:{}", character.name),
                    query: draft.text.to_string(),
                    lore_state: draft.prepared.lore_state.clone(),
                    message_number: draft.prepared.message_number,
                    variables: accepted.variables.clone(),
                };
                let mut last = last;
                last.hits = hits;
                let turn = match mode {
                    Redraw::Swipe => add_swipe(&bank, last, accepted, &injection)?,
                    Redraw::Continue => extend(&bank, last, accepted, &injection)?,
                };
                drop(job);
                return Ok(turn);
            }
            Draw::Discarded(reason) => {
                ctx.emit(crate::companion::CompanionEvent::Discarded { character_id: character.id.clone(), attempt, reason: reason.clone() });
                last_reason = reason;
            }
        }
    }
    Err(CompanionError::NoValidReply { attempts, last: last_reason })
}

/// Store a new draw of `turn`'s reply as its chosen swipe, and the reply's memory with it.
fn add_swipe(bank: &MemoryBank, mut turn: ChatTurn, accepted: Accepted, injection: &Injection) -> Result<ChatTurn, CompanionError> {
    turn.swipes.push(accepted.reply.clone());
    turn.swipe = (turn.swipes.len() - 1) as u32;
    turn.reply = accepted.reply;
    turn.packet = accepted.packet;
    turn.attempts = accepted.attempt;
    turn.prompt_tokens = accepted.completion.usage.prompt_tokens;
    turn.completion_tokens = accepted.completion.usage.completion_tokens;
    turn.from_cache = accepted.completion.from_cache;
    turn.elapsed_ms = accepted.completion.elapsed_ms;
    rewrite(bank, &turn, (format!("{}-r", turn.id), turn.reply.clone()), Some(injection))?;
    Ok(turn)
}

/// Append a continuation to `turn`'s chosen reply (its swipe and its memory follow).
fn extend(bank: &MemoryBank, mut turn: ChatTurn, accepted: Accepted, injection: &Injection) -> Result<ChatTurn, CompanionError> {
    let reply = joined(&turn.reply, &accepted.reply);
    if let Some(chosen) = turn.swipes.get_mut(turn.swipe as usize) {
        *chosen = reply.clone();
    }
    turn.reply = reply;
    turn.packet = accepted.packet;
    turn.attempts = accepted.attempt;
    turn.prompt_tokens = accepted.completion.usage.prompt_tokens;
    turn.completion_tokens = turn.completion_tokens.saturating_add(accepted.completion.usage.completion_tokens);
    turn.elapsed_ms = turn.elapsed_ms.saturating_add(accepted.completion.elapsed_ms);
    rewrite(bank, &turn, (format!("{}-r", turn.id), turn.reply.clone()), Some(injection))?;
    Ok(turn)
}

/// `so_far` followed by `more`: a model that repeated the reply before going on has the
/// repeat dropped, and a space joins two words (not before punctuation).
fn joined(so_far: &str, more: &str) -> String {
    let so_far = so_far.trim_end();
    let more = more.strip_prefix(so_far).unwrap_or(more);
    let more = more.trim_end();
    let glue = match more.chars().next() {
        None => "",
        Some(c) if c.is_whitespace() => "",
        Some(c) if matches!(c, '.' | ',' | ';' | ':' | '!' | '?' | ')' | '…' | '\'' | '"' | '’' | '”') => "",
        Some(_) => " ",
    };
    format!("{so_far}{glue}{more}")
}

/// A new draw's memory injection: which agent was given `turn.hits`, for what query;
/// and the chat's lore timers and variables after the draw (the redrawn message set them
/// anew).
struct Injection {
    agent: String,
    query: String,
    lore_state: crate::lorebook::activation::ActivationState,
    message_number: u64,
    /// The variables as the draw left them.
    variables: crate::prompting::macros::Variables,
}

impl Injection {
    /// Record the injection, and keep the timers and variables the draw left.
    fn keep(&self, tx: &rusqlite::Connection, turn: &ChatTurn) -> Result<(), crate::store::StoreError> {
        crate::memory::injections::record(tx, &self.agent, &self.query, &turn.hits)?;
        crate::companion::lore::save_state(tx, &turn.character_id, &self.lore_state)?;
        crate::companion::variables::keep(tx, &turn.character_id, self.message_number, &self.variables)
    }
}

/// Store `turn` as it now is, with the memory named in `changed` given its new text
/// (and, for a new draw, the injection it was given), in one transaction; then make the
/// new vectors searchable.
fn rewrite(bank: &MemoryBank, turn: &ChatTurn, changed: (String, String), injection: Option<&Injection>) -> Result<(), CompanionError> {
    // One message at a time: the turns after it are embedded again with the context it
    // will have, read from the store as it is now.
    let (id, text) = changed;
    // A message whose memory the user deleted (`memory delete`, `memory forget`) is still
    // the chat's to edit, redraw or swipe; its memory stays deleted.
    let remembered = bank.store().with(|c| crate::memory::records::get(c, &id))?.is_some();
    let edit = if remembered { Some(bank.prepare_edit(&id, &text)?) } else { None };
    let writes = bank.store().transaction(|tx| {
        records::update_turn(tx, turn)?;
        if let Some(injection) = injection {
            injection.keep(tx, turn)?;
        }
        let Some(edit) = edit else {
            return Ok(crate::memory::MemoryWrite::default());
        };
        let (reopened, _) = crate::memory::summarise::reopen_covering(tx, std::slice::from_ref(&id))?;
        Ok(reopened.and(edit.write(tx)?))
    })?;
    bank.publish(writes);
    Ok(())
}

/// "1 swipe (number 0)", "3 swipes (numbered from 0)": how many there are to choose from,
/// counted as a person says it and numbered as `swipe` takes them.
fn swipes(n: usize, what: &str) -> String {
    match n {
        1 => format!("1 {what} (number 0)"),
        n => format!("{n} {what}s (numbered from 0)"),
    }
}

/// Choose swipe `index` (0-based) of the last character message: the conversation goes
/// on from it. Before the first exchange that message is the greeting, whose swipes are
/// the card's greetings (`Ok(None)`: a greeting was chosen).
pub fn choose_swipe(ctx: &Context, character: &CharacterInfo, index: usize) -> Result<Option<ChatTurn>, CompanionError> {
    let _job = hold(ctx, character)?;
    let Some(mut turn) = ctx.store.with(|c| records::recent_turns(c, &character.id, 1, true))?.pop() else {
        let state = ctx.store.with(|c| records::load_state(c, &character.id))?;
        if state.file.is_some() && !records::opening_is_frozen(&state) {
            return Err(CompanionError::Invalid("this chat came from a chat file: its opening is the file's, not the card's greetings".into()));
        }
        let count = records::greetings(&character.card).len();
        if index >= count {
            return Err(CompanionError::Invalid(match count {
                0 => format!("{}'s card has no greeting and the chat no reply yet", character.name),
                n => format!("{}'s card has {}; there is no greeting {index}", character.name, swipes(n, "greeting")),
            }));
        }
        // No exchange left: the chat starts again from the card's greetings as they are now.
        ctx.store.with(|c| {
            if records::opening_is_frozen(&state) {
                records::clear_file(c, &character.id)?;
            }
            records::set_greeting(c, &character.id, index as u32)
        })?;
        return Ok(None);
    };
    let Some(text) = turn.swipes.get(index).cloned() else {
        return Err(CompanionError::Invalid(format!("the last reply has {}; there is no swipe {index}", swipes(turn.swipes.len(), "swipe"))));
    };
    turn.swipe = index as u32;
    turn.reply = text.clone();
    let bank = crate::memory::bank_for(ctx)?;
    rewrite(&bank, &turn, (format!("{}-r", turn.id), text), None)?;
    Ok(Some(turn))
}

/// Play `persona` in this chat from the next message on (`None`: the configured name).
pub fn use_persona(ctx: &Context, character: &CharacterInfo, persona: Option<&str>) -> Result<Option<crate::character::Persona>, CompanionError> {
    let _job = hold(ctx, character)?;
    Ok(ctx.store.transaction(|tx| {
        let found = persona.map(|key| crate::character::resolve_persona(tx, key)).transpose()?;
        records::set_persona(tx, &character.id, found.as_ref().map(|p| p.id.as_str()))?;
        Ok(found)
    })?)
}

/// The longest Author's Note kept, in characters, and its deepest place (SillyTavern's
/// injection depth limit).
const MAX_NOTE_CHARS: usize = 20_000;
const MAX_NOTE_DEPTH: u32 = 10_000;

/// Write this chat's Author's Note from the next message on (`None`, or a note with no
/// text left at SillyTavern's defaults: remove it). Returns the note as kept.
pub fn set_author_note(ctx: &Context, character: &CharacterInfo, note: Option<AuthorNote>) -> Result<Option<AuthorNote>, CompanionError> {
    let note = note.map(|mut n| {
        n.text = n.text.trim().to_string();
        n
    });
    if let Some(n) = &note {
        if n.text.chars().count() > MAX_NOTE_CHARS {
            return Err(CompanionError::Invalid(format!("an author's note may be at most {MAX_NOTE_CHARS} characters; this one has {}", n.text.chars().count())));
        }
        if n.depth > MAX_NOTE_DEPTH {
            return Err(CompanionError::Invalid(format!("an author's note's depth may be at most {MAX_NOTE_DEPTH}, not {}", n.depth)));
        }
    }
    let note = note.filter(|n| *n != AuthorNote::default());
    let _job = hold(ctx, character)?;
    ctx.store.with(|c| records::set_author_note(c, &character.id, note.as_ref()))?;
    Ok(note)
}

/// Change the text of any message, the user's or the character's.
pub fn edit(ctx: &Context, character: &CharacterInfo, message: &str, text: &str) -> Result<ChatTurn, CompanionError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(CompanionError::Invalid("a message cannot be edited to nothing; delete it instead".into()));
    }
    let _job = hold(ctx, character)?;
    let (mut turn, reply) = find(ctx, character, message)?;
    if reply {
        turn.reply = text.to_string();
        if let Some(chosen) = turn.swipes.get_mut(turn.swipe as usize) {
            *chosen = text.to_string();
        }
    } else {
        turn.user_text = text.to_string();
    }
    let bank = crate::memory::bank_for(ctx)?;
    rewrite(&bank, &turn, (message.to_string(), text.to_string()), None)?;
    Ok(turn)
}

/// Change the greeting this chat opens with (its chosen swipe), for this chat only: the
/// card keeps its own. The opening is kept with the chat from then on, as the first
/// exchange keeps it.
pub fn edit_greeting(ctx: &Context, character: &CharacterInfo, text: &str) -> Result<(), CompanionError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(CompanionError::Invalid("a greeting cannot be edited to nothing".into()));
    }
    let _job = hold(ctx, character)?;
    let user_name = ctx.config().companion.user_name;
    ctx.store.transaction(|tx| {
        let state = records::load_state(tx, &character.id)?;
        // An imported chat's opening: its character message changes in place.
        if let Some(mut file) = state.file.clone().filter(|_| !records::opening_is_frozen(&state)) {
            let opening = file.get_mut("opening").and_then(|o| o.as_array_mut());
            let first = opening.and_then(|o| o.iter_mut().find(|m| !m["is_user"].as_bool().unwrap_or(false) && !m["is_system"].as_bool().unwrap_or(false)));
            let Some(first) = first else {
                return Err(crate::store::StoreError::Invalid(format!("{}'s chat opens with no greeting to edit", character.name)));
            };
            let chosen = first["swipe_id"].as_u64().unwrap_or(0) as usize;
            first["mes"] = serde_json::Value::String(text.to_string());
            if let Some(swipe) = first.get_mut("swipes").and_then(|s| s.as_array_mut()).and_then(|s| s.get_mut(chosen)) {
                *swipe = serde_json::Value::String(text.to_string());
            }
            return records::put_file(tx, &character.id, &file);
        }
        let (greetings, chosen) = records::chat_greetings(&state, &character.card);
        if greetings.is_empty() {
            return Err(crate::store::StoreError::Invalid(format!("{}'s card has no greeting to edit", character.name)));
        }
        // The others as they were shown: macros resolved.
        let user = records::chat_user(tx, &state, &user_name)?;
        let macros = crate::prompting::MacroContext {
            char: &character.name,
            user: &user.name,
            persona: &user.description,
            stable_seed: &character.id,
            random_seed: Some(crate::prompting::greeting_seed(&character.id)),
            ..Default::default()
        };
        let mut shown: Vec<String> = greetings.iter().map(|g| crate::prompting::expand(g, &macros).text).collect();
        // The new words are kept as they read now, for who the user is now: a later
        // persona switch renames nothing already said.
        shown[chosen as usize] = crate::prompting::expand(text, &macros).text;
        // The chat's row (made if it has none yet), then its opening kept anew.
        records::set_greeting(tx, &character.id, chosen)?;
        records::clear_file(tx, &character.id)?;
        records::freeze_opening(tx, &character.id, &character.name, &shown, chosen, &crate::store::now_rfc3339())
    })?;
    Ok(())
}

/// Delete the exchange a message belongs to (a user message and its reply go
/// together), or with `and_after` it and every later one. Returns the deleted ids.
pub fn delete(ctx: &Context, character: &CharacterInfo, message: &str, and_after: bool) -> Result<Vec<String>, CompanionError> {
    let _job = hold(ctx, character)?;
    delete_held(ctx, character, message, and_after)
}

/// [`delete`], the character already held by the caller (undo is a delete of the last
/// exchange).
pub(crate) fn delete_held(ctx: &Context, character: &CharacterInfo, message: &str, and_after: bool) -> Result<Vec<String>, CompanionError> {
    let (turn, _) = find(ctx, character, message)?;
    let all = ctx.store.with(|c| records::all_turns(c, &character.id))?;
    // Taken back to the end of the chat: what those messages set goes with them.
    let to_the_end = and_after || all.iter().all(|t| t.seq <= turn.seq);
    let doomed: Vec<ChatTurn> = all.into_iter().filter(|t| t.id == turn.id || (and_after && t.seq > turn.seq)).collect();
    let bank = crate::memory::bank_for(ctx)?;
    let memory_ids = super::memory_ids(&doomed);
    // The messages after a deleted exchange mixed its text into their vectors.
    let followers = bank.prepare_removal(&memory_ids)?;
    let write = bank.store().transaction(|tx| {
        let (mut write, _) = crate::memory::summarise::reopen_covering(tx, &memory_ids)?;
        for t in &doomed {
            write = write.and(crate::memory::remove_source(tx, &format!("chat:{}", t.id))?);
            records::delete_turn(tx, &character.id, &t.id)?;
        }
        if to_the_end {
            crate::companion::variables::forget_from(tx, &character.id, crate::companion::lore::message_number(turn.seq))?;
        }
        Ok(write.and(followers.write(tx)?))
    })?;
    bank.publish(write);
    Ok(doomed.into_iter().map(|t| t.id).collect())
}

#[cfg(test)]
mod tests {
    use super::joined;

    #[test]
    fn a_continuation_joins_the_reply_it_extends() {
        assert_eq!(joined("The heron nests", "by the sluice gate."), "The heron nests by the sluice gate.");
        assert_eq!(joined("The heron nests by the gate", ", mostly."), "The heron nests by the gate, mostly.");
        assert_eq!(joined("It was late.", "\nShe left."), "It was late.\nShe left.");
        assert_eq!(joined("It was late.", "It was late. She left."), "It was late. She left.", "a repeat of the reply is dropped");
    }
}
