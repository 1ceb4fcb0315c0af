//! One chat turn: hold the user's message, build the packet, stream a reply, judge it,
//! and commit the exchange in one transaction — or store nothing.

use super::packet::{self, Packet, PacketInput};
use super::records::{self, CharacterInfo, ChatState, ChatTurn};
use super::{CompanionConfig, CompanionError, CompanionEvent, turn_job};
use crate::context::{Context, CoreEvent};
use crate::llm::{CallContext, CancelToken, ChatRequest, Completion, LlmClient, LlmError, ProviderProfile};
use crate::memory::{MemoryBank, MemoryKind, NewMemory, Scope};
use crate::prompting::PromptTemplates;
use chrono::{DateTime, Utc};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub mod control;
mod judge;
mod prepare;

pub use judge::judge;
pub use prepare::{Prepared, prepare, retrieve};
use crate::prompting::echo::CopyGuard;
use crate::prompting::salvage::StreamCut;
use judge::LabelStripper;

fn parse_now(now: Option<&str>) -> Result<DateTime<Utc>, CompanionError> {
    match now {
        None => Ok(Utc::now()),
        Some(t) => DateTime::parse_from_rfc3339(t.trim())
            .map(|d| d.with_timezone(&Utc))
            .map_err(|e| CompanionError::Invalid(format!("--now {t:?} is not an RFC 3339 time: {e}"))),
    }
}

/// The session of a message at `now`: the current one, or a new one after a long gap.
pub(crate) fn session_for(state: &ChatState, character_id: &str, now: DateTime<Utc>, gap_minutes: i64) -> String {
    let recent = state
        .last_chat_at
        .as_deref()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .is_some_and(|last| (now - last.with_timezone(&Utc)).num_minutes() < gap_minutes);
    match (&state.session, recent) {
        (Some(s), true) => s.clone(),
        _ => format!("chat-{}-{}", character_id.get(..12).unwrap_or(character_id), now.format("%Y%m%dT%H%M%S")),
    }
}

/// One turn between its stages: the message, when it was sent, and what preparation
/// found for it.
struct TurnDraft<'a> {
    character: &'a CharacterInfo,
    config: CompanionConfig,
    text: &'a str,
    now: DateTime<Utc>,
    prepared: Prepared,
    /// The reply being continued (`chat continue`): the draw writes what comes after it.
    continuing: Option<String>,
}

/// The companion agent of this turn.
struct Agent {
    client: LlmClient,
    profile: ProviderProfile,
    templates: PromptTemplates,
}

/// A draw the judge accepted.
struct Accepted {
    reply: String,
    packet: Packet,
    attempt: u32,
    completion: Completion,
    /// The chat variables as this draw's prompt left them.
    variables: crate::prompting::macros::Variables,
}

/// What one draw came to: a reply to commit, or the reason it was thrown away.
enum Draw {
    Accepted(Accepted),
    Discarded(String),
}

/// Run one turn to its end: prepare → draw (judged; redrawn up to `max_attempts`) →
/// commit. Returns the committed exchange.
pub fn send(
    ctx: &Arc<Context>,
    character: &CharacterInfo,
    text: &str,
    now: Option<&str>,
    cancel: &CancelToken,
) -> Result<ChatTurn, CompanionError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(CompanionError::Invalid("an empty message is not sent".into()));
    }
    let now = parse_now(now)?;
    let guard = ctx
        .jobs
        .try_start(turn_job(&character.id), cancel)
        .ok_or_else(|| CompanionError::Busy { name: character.name.clone() })?;
    let config = ctx.config();
    let profile = config.profile_for_role("companion").map_err(|e| CompanionError::Invalid(e.to_string()))?.clone();
    let agent = Agent { client: LlmClient::from_profile(&profile, Some(&ctx.store))?.for_agent("companion"), profile, templates: PromptTemplates::shipped()? };
    let bank = crate::memory::bank_for(ctx)?;
    let prepared = prepare(ctx, &bank, character, &config.companion, text, None, crate::companion::lore::Generation::Normal, cancel)?;
    // The message as sent, its macros filled in.
    let input = prepared.input.clone();
    let draft = TurnDraft { character, config: config.companion, text: &input, now, prepared, continuing: None };

    let attempts = draft.config.max_attempts.max(1);
    let mut last_reason = String::new();
    for attempt in 1..=attempts {
        match draw(ctx, &agent, &draft, attempt, &last_reason, cancel)? {
            Draw::Accepted(accepted) => {
                let turn = commit(&bank, &draft, accepted)?;
                // Free the character before saying so: a front door that sends the next
                // message as soon as it hears of the commit must not find it still busy.
                drop(guard);
                ctx.emit(CompanionEvent::TurnCommitted { turn: Box::new(turn.clone()) });
                return Ok(turn);
            }
            Draw::Discarded(reason) => {
                ctx.emit(CompanionEvent::Discarded { character_id: character.id.clone(), attempt, reason: reason.clone() });
                last_reason = reason;
            }
        }
    }
    Err(CompanionError::NoValidReply { attempts, last: last_reason })
}

/// One draw: assemble the packet (saying why the last draw was thrown away), stream the
/// reply with its `[Name]:` label held back, and judge it.
fn draw(
    ctx: &Context,
    agent: &Agent,
    draft: &TurnDraft<'_>,
    attempt: u32,
    last_reason: &str,
    cancel: &CancelToken,
) -> Result<Draw, CompanionError> {
    let character = draft.character;
    let prepared = &draft.prepared;
    let name = character.name.as_str();
    let user = prepared.user.name.as_str();
    let retry = (attempt > 1).then(|| format!("Your previous reply was discarded because {last_reason}. Answer again, only as {name}."));
    let go_on = draft.continuing.as_deref().map(|so_far| {
        format!("Your last reply stopped here: \"{}\". Continue it from exactly where it stops, without repeating any of it.", so_far.trim())
    });
    let retry_note = match (go_on, retry) {
        (Some(a), Some(b)) => Some(format!("{a}\n{b}")),
        (a, b) => a.or(b),
    };
    let (opening, chosen) = records::chat_greetings(&prepared.state, &character.card);
    // Every draw starts from the variables before this message; the accepted one's stay.
    let variables = std::cell::RefCell::new(prepared.variables.clone());
    // The reply's cap is planned before the blocks share the context, and sent.
    let reply_tokens = crate::llm::client::planned_reply_cap(&agent.profile, &crate::llm::ResponseFormat::Text);
    let packet = packet::assemble(
        &agent.templates,
        &draft.config,
        PacketInput {
            character,
            user_name: user,
            persona: &prepared.user.description,
            greeting: opening.get(chosen as usize).map(String::as_str),
            input: draft.text,
            now: draft.now,
            last_chat_at: prepared.state.last_chat_at.as_deref(),
            distance: prepared.proximity_changed.then_some(prepared.proximity),
            history: &prepared.history,
            lore: &prepared.lore,
            lore_places: &prepared.lore_places,
            memories: &prepared.memories,
            max_context_tokens: agent.profile.max_context_tokens,
            reply_tokens,
            retry_note: retry_note.as_deref(),
            notes: prepared.notes.clone(),
            variables: Some(&variables),
            author_note: prepared.state.author_note.as_ref(),
            user_messages: prepared.user_messages,
        },
    )?;
    let variables = variables.into_inner();
    // The user's words are never cut, so a message that alone fills most of the model's
    // context cannot be answered: say so, rather than let the provider refuse the prompt.
    let input_tokens = packet.block("user_input").map(|b| b.tokens).unwrap_or(0);
    if packet.tokens + reply_tokens > packet.max_context_tokens && input_tokens > packet.max_context_tokens / 2 {
        return Err(CompanionError::TooLong { tokens: input_tokens, prompt: packet.tokens, context: packet.max_context_tokens });
    }
    ctx.emit(CompanionEvent::TurnStarted {
        character_id: character.id.clone(),
        name: character.name.clone(),
        input: draft.text.to_string(),
        attempt,
        // The memories this packet carries (its budget may have cut some).
        hits: packet::carried(&packet, &prepared.memories),
        packet: Box::new(packet.clone()),
    });
    let mut request = ChatRequest::new("", packet.messages.clone());
    request.stream = true;
    if agent.profile.kind != crate::llm::ProviderKind::Local || agent.profile.sampler.max_tokens.is_some() {
        request.sampler.max_tokens = Some(reply_tokens);
    }
    // A base model continues text: open the character's line for it (with the reply so
    // far when continuing one).
    request.reply_prefix = Some(match &draft.continuing {
        Some(so_far) => format!("[{name}]: {}", so_far.trim()),
        None => format!("[{name}]:"),
    });
    // A model that starts writing the user's next line is stopped there: the reply
    // before it stands, instead of the whole draw being thrown away by `judge`.
    // Four at most: the OpenAI API's limit.
    let mut stops = vec![format!("\n[{user}]:"), format!("\n{user}:"), "<user_input>".into(), "<chat_history>".into()];
    if !user.eq_ignore_ascii_case("user") {
        stops[3] = "\n[User]:".into();
    }
    request.sampler.stop = stops;
    let delivered = AtomicBool::new(false);
    // The stream shows what the judge will keep: the label held back, and nothing from
    // where the reply drifts into markup or someone else's line.
    let stripper = Mutex::new((LabelStripper::new(name), StreamCut::new(name, &[user, "User"])));
    let on_token = |fragment: &str| {
        delivered.store(true, Ordering::Relaxed);
        let mut held = stripper.lock().unwrap_or_else(|p| p.into_inner());
        let (label, drift) = &mut *held;
        let shown = label.push(fragment).and_then(|f| drift.push(&f));
        drop(held);
        if let Some(text) = shown {
            ctx.emit(CompanionEvent::Token { character_id: character.id.clone(), attempt, text });
        }
    };
    // What the reply must not recite: the packet as sent, less the earlier turns and
    // the memories recalled from them (a character may repeat itself or what it was
    // told, as people do when they remember; it may not read out its card, its example
    // dialogue or its instructions), plus the greeting it opened with. The user's new
    // message may be quoted back ("'Before dawn?' she repeats."), not only parroted.
    let said: Vec<&str> = ["chat_history", "memory_bank", "user_input"]
        .iter()
        .filter_map(|b| packet.block(b))
        .map(|b| b.text.as_str())
        .filter(|t| !t.is_empty())
        .collect();
    let sent: Vec<String> = packet.messages.iter().map(|m| said.iter().fold(m.content.clone(), |content, block| content.replace(block, ""))).collect();
    let greeting = opening.get(chosen as usize).cloned().unwrap_or_default();
    let copies = CopyGuard::new(sent.iter().map(String::as_str).chain([greeting.as_str()]));
    let echoes = CopyGuard::new([draft.text]);
    // The end of a wait is not said: the reply's first token clears the chat's line.
    let on_wait = |holder: Option<&str>| {
        if let Some(holder) = holder {
            ctx.emit(CompanionEvent::Waiting { character_id: character.id.clone(), attempt, holder: holder.to_string() })
        }
    };
    let result = agent.client.complete_checked(&request, CallContext::with_tokens(cancel, &on_token).with_wait(&on_wait), &|c| {
        judge(c, name, user, &copies, &echoes).is_ok()
    });
    let rest = {
        let mut held = stripper.lock().unwrap_or_else(|p| p.into_inner());
        let (label, drift) = &mut *held;
        let mut rest: String = label.finish().and_then(|f| drift.push(&f)).unwrap_or_default();
        rest.extend(drift.finish());
        rest
    };
    if !rest.is_empty() {
        ctx.emit(CompanionEvent::Token { character_id: character.id.clone(), attempt, text: rest });
    }
    let completion = match result {
        Ok(c) => c,
        Err(LlmError::Cancelled) => return Err(LlmError::Cancelled.into()),
        // A stream that went silent: the server may still be writing it (and billing
        // it), so it is not asked again; the turn fails and nothing is stored, as a
        // scene's stalled speaker fails.
        Err(e @ LlmError::Timeout(_)) => return Err(e.into()),
        // A stream that broke after it started: the client does not retry a reply the
        // user has partly seen; this turn throws the draw away and asks again.
        Err(e) if e.is_transient() && delivered.load(Ordering::Relaxed) => {
            return Ok(Draw::Discarded(format!("the stream broke off ({e})")));
        }
        Err(e) => return Err(e.into()),
    };
    if cancel.is_cancelled() {
        return Err(LlmError::Cancelled.into());
    }
    Ok(match judge(&completion, name, user, &copies, &echoes) {
        Ok(reply) => Draw::Accepted(Accepted { reply, packet, attempt, completion, variables }),
        Err(reason) => Draw::Discarded(reason),
    })
}

/// Store the exchange, its two memory turns, the chat's new state and what the memory
/// bank carried — one transaction.
fn commit(bank: &MemoryBank, draft: &TurnDraft<'_>, accepted: Accepted) -> Result<ChatTurn, CompanionError> {
    let TurnDraft { character, config: cc, text, now, prepared, .. } = draft;
    let Accepted { reply, packet, attempt: attempts, completion, variables } = accepted;
    let (text, now) = (*text, *now);
    let at = now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let session = session_for(&prepared.state, &character.id, now, cc.session_gap_minutes);
    let id = crate::store::new_id();
    let turn = ChatTurn {
        id: id.clone(),
        character_id: character.id.clone(),
        seq: prepared.history.last().map(|t| t.seq).unwrap_or(0).max(prepared.state.turns) + 1,
        session: session.clone(),
        user_text: text.to_string(),
        reply: reply.clone(),
        at: at.clone(),
        user_memory_id: Some(format!("{id}-u")),
        reply_memory_id: Some(format!("{id}-r")),
        proximity: prepared.proximity,
        hits: packet::carried(&packet, &prepared.memories),
        packet,
        attempts,
        prompt_tokens: completion.usage.prompt_tokens,
        completion_tokens: completion.usage.completion_tokens,
        from_cache: completion.from_cache,
        elapsed_ms: completion.elapsed_ms,
        swipes: vec![reply],
        swipe: 0,
        file: None,
        user_name: Some(prepared.user.name.clone()),
    };
    let items = memories_of(&turn, &character.name, &prepared.user.name);
    let agent = format!("companion:{}", character.name);
    // No embedding model: the exchange is still kept, found by keyword until reindexed.
    let memories = bank.prepare_or_keyword_only(items)?;
    let write = bank.store().transaction(|tx| {
        let write = memories.write(tx)?;
        records::insert_turn(tx, &turn)?;
        crate::companion::lore::save_state(tx, &character.id, &prepared.lore_state)?;
        crate::companion::variables::keep(tx, &character.id, prepared.message_number, &variables)?;
        if prepared.state.turns == 0 && prepared.state.file.is_none() {
            // Kept as it was shown: macros resolved for who the user was then.
            let macros = crate::prompting::MacroContext {
                char: &character.name,
                user: &prepared.user.name,
                persona: &prepared.user.description,
                stable_seed: &character.id,
                random_seed: Some(crate::prompting::greeting_seed(&character.id)),
                ..Default::default()
            };
            let (greetings, chosen) = records::chat_greetings(&prepared.state, &character.card);
            let shown: Vec<String> = greetings.iter().map(|g| crate::prompting::expand(g, &macros).text).collect();
            records::freeze_opening(tx, &character.id, &character.name, &shown, chosen, &at)?;
        }
        crate::memory::injections::record(tx, &agent, text, &turn.hits)?;
        Ok(write)
    })?;
    bank.publish(write);
    Ok(turn)
}

/// The two memory turns an exchange becomes (`{id}-u`, `{id}-r`, source `chat:{id}`),
/// leaving out a message with no words.
pub(crate) fn memories_of(turn: &ChatTurn, name: &str, user: &str) -> Vec<NewMemory> {
    let memory = |suffix: &str, speaker: &str, words: &str| NewMemory {
        id: Some(format!("{}-{suffix}", turn.id)),
        kind: MemoryKind::Turn,
        scope: Scope::character(turn.character_id.clone()),
        speaker: Some(speaker.to_string()),
        text: words.to_string(),
        session: Some(turn.session.clone()),
        fiction_time: None,
        time: Some(turn.at.clone()),
        witnesses: vec![name.to_string(), turn.user_or(user).to_string()],
        source: Some(format!("chat:{}", turn.id)),
        content_hash: None,
    };
    [memory("u", turn.user_or(user), &turn.user_text), memory("r", name, &turn.reply)].into_iter().filter(|m| !m.text.trim().is_empty()).collect()
}

/// The ids of the memories exchanges were stored as, in order (`{turn}-u` and
/// `{turn}-r`; none for a message with no words, which [`memories_of`] never stores).
pub(crate) fn memory_ids<'t>(turns: impl IntoIterator<Item = &'t ChatTurn>) -> Vec<String> {
    turns
        .into_iter()
        .flat_map(|t| [(format!("{}-u", t.id), &t.user_text), (format!("{}-r", t.id), &t.reply)])
        .filter(|(_, text)| !text.trim().is_empty())
        .map(|(id, _)| id)
        .collect()
}

/// The summarisation cycle after a committed turn. A failure only postpones it: the
/// unsummarised turns stay in the store and the next turn tries again. It runs after
/// the turn has let go of the character, so the next message need not wait for it.
pub fn summarise(ctx: &Context, character: &CharacterInfo) {
    let config = ctx.config();
    let bank = match crate::memory::bank_for(ctx) {
        Ok(bank) => bank,
        Err(e) => {
            ctx.emit(CoreEvent::warn(format!("the summary of {}'s chat is postponed: {e}", character.name)));
            return;
        }
    };
    let bank = bank.as_ref();
    let client = match config.profile_for_role("summariser") {
        Ok(profile) => LlmClient::from_profile(profile, Some(&ctx.store)).map(|c| c.for_agent("summariser")),
        Err(e) => Err(LlmError::Config(e.to_string())),
    };
    let outcome = client.map_err(|e| e.to_string()).and_then(|client| {
        crate::memory::summarise::summarise_if_due(
            bank,
            &client,
            &Scope::character(character.id.clone()),
            None,
            // The chat's own turns: memories imported for the character are not its
            // conversation, and a file of thousands would cost a summary call per message.
            Some("chat:"),
            // An exchange is two memory turns (the message and the reply): counting in
            // exchanges keeps a summary from ever cutting one in half.
            config.memory.summary_every.max(1) * 2,
        )
        .map_err(|e| e.to_string())
    });
    match outcome {
        Ok(Some(memory_id)) => ctx.emit(CompanionEvent::Summarised { character_id: character.id.clone(), memory_id }),
        Ok(None) => {}
        Err(e) => ctx.emit(CoreEvent::warn(format!("the summary of {}'s chat is postponed: {e}", character.name))),
    }
}

/// Take back the last exchange with its memory turns, in one transaction: a delete of
/// the last exchange (a summary over it is reopened, and written again from what is
/// left). Refused while a turn runs: the turn would commit onto the exchange being taken
/// back; and, with `expect`, when the last exchange is not that one
/// ([`control::expect_last`]).
pub fn undo(ctx: &Context, character: &CharacterInfo, expect: Option<&str>) -> Result<Option<String>, CompanionError> {
    let _job = control::hold(ctx, character)?;
    ctx.store.with(|c| Ok(control::expect_last(c, character, expect)))??;
    // The character is held: no exchange can be added between this read and the delete.
    let Some(last) = ctx.store.with(|c| records::recent_turns(c, &character.id, 1, false))?.pop() else {
        return Ok(None);
    };
    // Exactly what deleting the last exchange does, a summary over it reopened (undo used
    // to refuse an exchange a summary covered while delete took it back).
    control::delete_held(ctx, character, &control::reply_message_id(&last.id), false)?;
    Ok(Some(last.id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_gap_starts_a_new_session() {
        let now = DateTime::parse_from_rfc3339("2026-11-21T12:00:00Z").unwrap().with_timezone(&Utc);
        let state = ChatState { session: Some("s1".into()), last_chat_at: Some("2026-11-21T11:00:00Z".into()), ..Default::default() };
        assert_eq!(session_for(&state, "c", now, 180), "s1");
        let later = now + chrono::Duration::hours(5);
        assert_ne!(session_for(&state, "c", later, 180), "s1");
        assert!(session_for(&ChatState::default(), "c", now, 180).starts_with("chat-c-"));
    }
}
