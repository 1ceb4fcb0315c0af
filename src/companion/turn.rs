//! One chat turn: hold the user's message, build the packet, stream a reply, judge it,
//! and commit the exchange in one transaction — or store nothing.

use super::packet::{self, Packet, PacketInput};
use super::records::{self, CharacterInfo, ChatState, ChatTurn};
use super::{CompanionConfig, CompanionError, CompanionEvent, turn_job};
use crate::context::{Context, CoreEvent};
use crate::llm::{CallContext, CancelToken, ChatRequest, Completion, LlmClient, LlmError};
use crate::memory::detect::{Proximity, ProximityDetector, ProximitySignal, is_memory_intent};
use crate::memory::{MemoryBank, MemoryError, MemoryKind, NewMemory, RetrievalHit, Scope, SearchFilter, SearchMode, SearchRequest};
use crate::prompting::PromptTemplates;
use chrono::{DateTime, Utc};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What retrieval and the detectors decided for one message, before any LLM call.
#[derive(Debug, Clone, Default)]
pub struct Prepared {
    pub state: ChatState,
    pub history: Vec<ChatTurn>,
    pub lore: Vec<RetrievalHit>,
    /// The memory bank's hits; empty when memory is not relevant to this message.
    pub memories: Vec<RetrievalHit>,
    /// The proximity after this message, and whether it changed.
    pub proximity: Proximity,
    pub proximity_changed: bool,
    pub notes: Vec<String>,
}

/// Anchor vectors embedded once per process and embedding model.
static DETECTOR: Mutex<Option<(String, ProximityDetector)>> = Mutex::new(None);

fn detector(bank: &MemoryBank, threshold: f32, state: Proximity) -> Result<ProximityDetector, MemoryError> {
    let model = bank.model_id();
    let mut slot = DETECTOR.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, d)) = slot.as_ref().filter(|(m, _)| *m == model) {
        let mut d = d.with_state(state);
        d.set_threshold(threshold);
        return Ok(d);
    }
    let d = ProximityDetector::new(&bank.embedder()?, threshold, state)?;
    *slot = Some((model, d.clone()));
    Ok(d)
}

/// The memory turns an exchange became, so a memory already in the history block is
/// not repeated in the memory bank.
fn history_memory_ids(history: &[ChatTurn]) -> HashSet<String> {
    history.iter().flat_map(|t| [t.user_memory_id.clone(), t.reply_memory_id.clone()]).flatten().collect()
}

/// Retrieve lore and memories for `text` and decide whether the memory bank goes out.
/// `vector` is the message's embedding (`None`: keyword-only, e.g. no model).
pub fn retrieve(
    bank: &MemoryBank,
    character: &CharacterInfo,
    config: &CompanionConfig,
    text: &str,
    vector: Option<&[f32]>,
    history: &[ChatTurn],
    notes: &mut Vec<String>,
) -> Result<(Vec<RetrievalHit>, Vec<RetrievalHit>), MemoryError> {
    let mode = if vector.is_some() { SearchMode::Hybrid } else { SearchMode::Keyword };
    let lore = bank.search_with_vector(
        &SearchRequest {
            query: text.to_string(),
            k: config.lore_k,
            mode,
            filter: SearchFilter {
                scope: Some(Scope::character(character.lore_slug())),
                kinds: vec![MemoryKind::Lore],
                ..Default::default()
            },
        },
        vector,
    )?;

    let skip = history_memory_ids(history);
    let found = bank.search_with_vector(
        &SearchRequest {
            query: text.to_string(),
            k: config.memory_k + skip.len().min(64),
            mode,
            filter: SearchFilter {
                scope: Some(Scope::character(character.id.clone())),
                kinds: vec![MemoryKind::Turn, MemoryKind::Summary],
                ..Default::default()
            },
        },
        vector,
    )?;
    let mut memories: Vec<RetrievalHit> = found.into_iter().filter(|h| !skip.contains(&h.id)).take(config.memory_k).collect();
    for (i, hit) in memories.iter_mut().enumerate() {
        hit.rank = i + 1;
    }
    let intent = is_memory_intent(text);
    let best = memories.iter().filter_map(|h| h.vector_score).fold(f32::MIN, f32::max);
    if memories.is_empty() {
        notes.push("memory bank: nothing relevant stored".into());
    } else if intent {
        notes.push("memory bank: the message asks to remember".into());
    } else if best >= config.memory_confidence {
        notes.push(format!("memory bank: best memory similarity {best:.2} ≥ {:.2}", config.memory_confidence));
    } else {
        notes.push(format!(
            "memory bank left out: no recall asked and best similarity {} < {:.2}",
            if best == f32::MIN { "n/a".to_string() } else { format!("{best:.2}") },
            config.memory_confidence
        ));
        memories.clear();
    }
    Ok((lore, memories))
}

/// Everything before the first LLM call: state, history, lore indexing, the message's
/// embedding, proximity and retrieval.
pub fn prepare(
    ctx: &Context,
    bank: &MemoryBank,
    character: &CharacterInfo,
    config: &CompanionConfig,
    text: &str,
) -> Result<Prepared, CompanionError> {
    let (state, history) = ctx.store.with(|c| {
        Ok((records::load_state(c, &character.id)?, records::recent_turns(c, &character.id, config.history_turns, false)?))
    })?;
    let mut notes = Vec::new();
    // Lore files are re-indexed only when their content changed (a hash check per file).
    if let Err(e) = crate::memory::lore::index_lore(bank, &crate::paths::lore_dir()) {
        notes.push(format!("lore not re-indexed: {e}"));
    }
    let vector = match bank.embedder().and_then(|e| Ok(e.embed_query(text)?)) {
        Ok(v) => Some(v),
        Err(e) => {
            notes.push(format!("embedding model unavailable ({e}): keyword-only retrieval, proximity unchanged"));
            None
        }
    };
    let threshold = ctx.config().memory.proximity_threshold;
    let (proximity, proximity_changed) = match &vector {
        Some(v) => match detector(bank, threshold, state.proximity) {
            Ok(mut d) => {
                let update = d.observe_vector(v);
                if update.changed {
                    let how = match update.signal {
                        Some(ProximitySignal::TowardPhysical) => "arriving",
                        Some(ProximitySignal::AwayRemote) => "leaving",
                        Some(ProximitySignal::Physical) => "together",
                        Some(ProximitySignal::Remote) | None => "apart",
                    };
                    notes.push(format!(
                        "distance: now {} ({how}, similarity {:.2} > {threshold:.2})",
                        super::records::proximity_str(update.state),
                        update.confidence
                    ));
                }
                (update.state, update.changed)
            }
            Err(e) => {
                notes.push(format!("proximity detector unavailable: {e}"));
                (state.proximity, false)
            }
        },
        None => (state.proximity, false),
    };
    let (lore, memories) = retrieve(bank, character, config, text, vector.as_deref(), &history, &mut notes)?;
    Ok(Prepared { state, history, lore, memories, proximity, proximity_changed, notes })
}

/// The labels a reply may start with (the trigger asks for `[Name]:`).
fn labels(name: &str) -> [String; 4] {
    [format!("[{name}]:"), format!("{name}:"), "[AI]:".to_string(), "AI:".to_string()]
}

/// `text` without a leading `label`, compared case-insensitively, or `None`.
fn strip_label<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    let mut rest = text.char_indices();
    for expected in label.chars() {
        let (_, got) = rest.next()?;
        if !got.to_lowercase().eq(expected.to_lowercase()) {
            return None;
        }
    }
    Some(rest.next().map(|(i, _)| &text[i..]).unwrap_or(""))
}

/// Is `text` the start of `label` (case-insensitively)?
fn begins_label(text: &str, label: &str) -> bool {
    let mut expected = label.chars();
    text.chars().all(|c| expected.next().is_some_and(|e| c.to_lowercase().eq(e.to_lowercase())))
}

/// Holds back the first fragments of a streamed reply until it is clear whether they
/// are the `[Name]:` label, so the label never reaches the screen.
pub(crate) struct LabelStripper {
    labels: [String; 4],
    head: String,
    decided: bool,
    /// Right after a stripped label, leading spaces are not shown either.
    skip_space: bool,
}

impl LabelStripper {
    pub(crate) fn new(name: &str) -> Self {
        Self { labels: labels(name), head: String::new(), decided: false, skip_space: false }
    }

    /// What of `fragment` can be shown now.
    pub(crate) fn push(&mut self, fragment: &str) -> Option<String> {
        if self.decided {
            if self.skip_space {
                let rest = fragment.trim_start();
                self.skip_space = rest.is_empty();
                return Some(rest.to_string()).filter(|r| !r.is_empty());
            }
            return Some(fragment.to_string());
        }
        self.head.push_str(fragment);
        let trimmed = self.head.trim_start();
        for label in &self.labels {
            if let Some(rest) = strip_label(trimmed, label) {
                self.decided = true;
                let rest = rest.trim_start().to_string();
                self.head.clear();
                self.skip_space = rest.is_empty();
                return Some(rest).filter(|r| !r.is_empty());
            }
        }
        if self.labels.iter().any(|l| begins_label(trimmed, l)) {
            return None;
        }
        self.decided = true;
        Some(std::mem::take(&mut self.head))
    }

    /// Whatever is still held when the stream ends.
    pub(crate) fn finish(&mut self) -> Option<String> {
        self.decided = true;
        Some(std::mem::take(&mut self.head)).filter(|h| !h.trim().is_empty())
    }
}


/// Judge a finished reply: the cleaned text, or why it is thrown away.
pub fn judge(completion: &Completion, name: &str, user: &str) -> Result<String, String> {
    if completion.finish_reason.as_deref() == Some("length") {
        return Err("it was cut off at the token limit".into());
    }
    let mut text = completion.text.trim();
    // The trigger asks for `[Name]: ...`; the label is not part of what was said.
    for label in labels(name) {
        if let Some(rest) = strip_label(text, &label) {
            text = rest;
            break;
        }
    }
    let text = text.trim();
    if text.is_empty() {
        return Err("it was empty".into());
    }
    let speaks_for_user = text.lines().any(|line| {
        let line = line.trim_start().to_lowercase();
        [user.to_lowercase(), "user".to_string()]
            .iter()
            .any(|u| line.starts_with(&format!("[{u}]:")) || line.starts_with(&format!("{u}:")))
    });
    if speaks_for_user {
        return Err(format!("it spoke for {user}"));
    }
    // A model that echoes the packet's markup has lost the thread, whatever else it wrote.
    let tags = packet::TAGS.iter().chain(&["assistant_persona"]);
    if tags.into_iter().any(|tag| text.contains(&format!("<{tag}>")) || text.contains(&format!("</{tag}>"))) {
        return Err("it repeated the prompt's markup".into());
    }
    Ok(text.to_string())
}

fn parse_now(now: Option<&str>) -> Result<DateTime<Utc>, CompanionError> {
    match now {
        None => Ok(Utc::now()),
        Some(t) => DateTime::parse_from_rfc3339(t.trim())
            .map(|d| d.with_timezone(&Utc))
            .map_err(|e| CompanionError::Invalid(format!("--now {t:?} is not an RFC 3339 time: {e}"))),
    }
}

/// The session of a message at `now`: the current one, or a new one after a long gap.
fn session_for(state: &ChatState, character_id: &str, now: DateTime<Utc>, gap_minutes: i64) -> String {
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

/// Run one turn to its end. Returns the committed exchange.
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
    let cc = config.companion.clone();
    let profile = config.profile_for_role("companion").map_err(|e| CompanionError::Invalid(e.to_string()))?.clone();
    let client = LlmClient::from_profile(&profile, Some(&ctx.store))?;
    let templates = PromptTemplates::shipped()?;
    let bank = crate::memory::bank_for(ctx)?;
    let prepared = prepare(ctx, &bank, character, &cc, text)?;
    let emit = |e: CompanionEvent| ctx.emit(e);

    let name = character.name.as_str();
    let user = cc.user_name.as_str();
    let mut last_reason = String::new();
    for attempt in 1..=cc.max_attempts.max(1) {
        let retry_note = (attempt > 1)
            .then(|| format!("Your previous reply was discarded because {last_reason}. Answer again, only as {name}."));
        let packet = packet::assemble(
            &templates,
            &cc,
            PacketInput {
                character,
                user_name: user,
                input: text,
                now,
                last_chat_at: prepared.state.last_chat_at.as_deref(),
                distance: prepared.proximity_changed.then_some(prepared.proximity),
                history: &prepared.history,
                lore: &prepared.lore,
                memories: &prepared.memories,
                max_context_tokens: profile.max_context_tokens,
                retry_note: retry_note.as_deref(),
                notes: prepared.notes.clone(),
            },
        )?;
        emit(CompanionEvent::TurnStarted {
            character_id: character.id.clone(),
            name: character.name.clone(),
            input: text.to_string(),
            attempt,
            packet: Box::new(packet.clone()),
            hits: prepared.memories.clone(),
        });
        let mut request = ChatRequest::new("", packet.messages.clone());
        request.stream = true;
        // A base model continues text: open the character's line for it.
        request.reply_prefix = Some(format!("[{name}]:"));
        // A model that starts writing the user's next line is stopped there: the reply
        // before it stands, instead of the whole draw being thrown away by `judge`.
        // Four at most: the OpenAI API's limit.
        let mut stops = vec![format!("\n[{user}]:"), format!("\n{user}:"), "<user_input>".into(), "<chat_history>".into()];
        if !user.eq_ignore_ascii_case("user") {
            stops[3] = "\n[User]:".into();
        }
        request.sampler.stop = stops;
        let delivered = AtomicBool::new(false);
        let stripper = Mutex::new(LabelStripper::new(name));
        let on_token = |fragment: &str| {
            delivered.store(true, Ordering::Relaxed);
            let shown = stripper.lock().unwrap_or_else(|p| p.into_inner()).push(fragment);
            if let Some(text) = shown {
                emit(CompanionEvent::Token { character_id: character.id.clone(), attempt, text });
            }
        };
        let result = client.complete_checked(&request, CallContext::with_tokens(cancel, &on_token), &|c| judge(c, name, user).is_ok());
        if let Some(rest) = stripper.lock().unwrap_or_else(|p| p.into_inner()).finish() {
            emit(CompanionEvent::Token { character_id: character.id.clone(), attempt, text: rest });
        }
        let completion = match result {
            Ok(c) => c,
            Err(LlmError::Cancelled) => return Err(LlmError::Cancelled.into()),
            // A stream that broke after it started: the client does not retry a reply the
            // user has partly seen; this turn throws the draw away and asks again.
            Err(e) if e.is_transient() && delivered.load(Ordering::Relaxed) => {
                last_reason = format!("the stream broke off ({e})");
                emit(CompanionEvent::Discarded { character_id: character.id.clone(), attempt, reason: last_reason.clone() });
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if cancel.is_cancelled() {
            return Err(LlmError::Cancelled.into());
        }
        let reply = match judge(&completion, name, user) {
            Ok(reply) => reply,
            Err(reason) => {
                last_reason = reason;
                emit(CompanionEvent::Discarded { character_id: character.id.clone(), attempt, reason: last_reason.clone() });
                continue;
            }
        };
        let turn = commit(&bank, character, &cc, &prepared, text, reply, now, packet, attempt, &completion)?;
        // Free the character before saying so: a front door that sends the next message
        // as soon as it hears of the commit must not find it still busy.
        drop(guard);
        emit(CompanionEvent::TurnCommitted { turn: Box::new(turn.clone()) });
        return Ok(turn);
    }
    Err(CompanionError::NoValidReply { attempts: cc.max_attempts.max(1), last: last_reason })
}

/// Store the exchange, its two memory turns, the chat's new state and what the memory
/// bank carried — one transaction.
#[allow(clippy::too_many_arguments)]
fn commit(
    bank: &MemoryBank,
    character: &CharacterInfo,
    cc: &CompanionConfig,
    prepared: &Prepared,
    text: &str,
    reply: String,
    now: DateTime<Utc>,
    packet: Packet,
    attempts: u32,
    completion: &Completion,
) -> Result<ChatTurn, CompanionError> {
    let at = now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let session = session_for(&prepared.state, &character.id, now, cc.session_gap_minutes);
    let id = crate::store::new_id();
    let memory = |suffix: &str, speaker: &str, words: &str| NewMemory {
        id: Some(format!("{id}-{suffix}")),
        kind: MemoryKind::Turn,
        scope: Scope::character(character.id.clone()),
        speaker: Some(speaker.to_string()),
        text: words.to_string(),
        session: Some(session.clone()),
        fiction_time: None,
        time: Some(at.clone()),
        witnesses: vec![character.name.clone(), cc.user_name.clone()],
        source: Some(format!("chat:{id}")),
        content_hash: None,
    };
    let items = vec![memory("u", &cc.user_name, text), memory("r", &character.name, &reply)];
    let turn = ChatTurn {
        id: id.clone(),
        character_id: character.id.clone(),
        seq: prepared.history.last().map(|t| t.seq).unwrap_or(0).max(prepared.state.turns) + 1,
        session: session.clone(),
        user_text: text.to_string(),
        reply,
        at: at.clone(),
        user_memory_id: Some(format!("{id}-u")),
        reply_memory_id: Some(format!("{id}-r")),
        proximity: prepared.proximity,
        packet,
        hits: prepared.memories.clone(),
        attempts,
        prompt_tokens: completion.usage.prompt_tokens,
        completion_tokens: completion.usage.completion_tokens,
        from_cache: completion.from_cache,
        elapsed_ms: completion.elapsed_ms,
    };
    let agent = format!("companion:{}", character.name);
    // No embedding model: the exchange is still kept, found by keyword until reindexed.
    let memories = bank.prepare_or_keyword_only(items)?;
    let write = bank.store().transaction(|tx| {
        let write = memories.write(tx)?;
        records::insert_turn(tx, &turn)?;
        crate::memory::injections::record(tx, &agent, text, &turn.hits)?;
        Ok(write)
    })?;
    bank.publish(write);
    Ok(turn)
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
        Ok(profile) => LlmClient::from_profile(profile, Some(&ctx.store)),
        Err(e) => Err(LlmError::Config(e.to_string())),
    };
    let outcome = client.map_err(|e| e.to_string()).and_then(|client| {
        crate::memory::summarise::summarise_if_due(
            bank,
            &client,
            &Scope::character(character.id.clone()),
            None,
            config.memory.summary_every,
        )
        .map_err(|e| e.to_string())
    });
    match outcome {
        Ok(Some(memory_id)) => ctx.emit(CompanionEvent::Summarised { character_id: character.id.clone(), memory_id }),
        Ok(None) => {}
        Err(e) => ctx.emit(CoreEvent::warn(format!("the summary of {}'s chat is postponed: {e}", character.name))),
    }
}

/// Take back the last exchange with its memory turns, in one transaction. Refused once
/// a summary covers it (the summary cannot be taken apart).
pub fn undo(ctx: &Context, character: &CharacterInfo) -> Result<Option<String>, CompanionError> {
    let bank = crate::memory::bank_for(ctx)?;
    let Some(last) = ctx.store.with(|c| records::recent_turns(c, &character.id, 1, false))?.pop() else {
        return Ok(None);
    };
    let summarised = ctx.store.with(|c| crate::memory::records::any_summarised(c, &format!("chat:{}", last.id)))?;
    if summarised {
        return Err(CompanionError::Invalid("the last exchange is already part of a summary memory and cannot be taken back".into()));
    }
    let write = ctx.store.transaction(|tx| {
        let write = crate::memory::remove_source(tx, &format!("chat:{}", last.id))?;
        records::delete_last(tx, &character.id)?;
        Ok(write)
    })?;
    bank.publish(write);
    Ok(Some(last.id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::Usage;

    fn reply(text: &str, finish: &str) -> Completion {
        Completion {
            text: text.into(),
            usage: Usage::default(),
            finish_reason: Some(finish.into()),
            model: "m".into(),
            from_cache: false,
            elapsed_ms: 0,
        }
    }

    /// What the judge keeps or why it throws a draw away, for the replies a model
    /// really writes.
    #[test]
    fn the_judge_on_typical_draws() {
        let cases = [
            ("[Ilse Marrow]: The kettle's on.", "stop"),
            ("Ilse Marrow: *smiles* The kettle's on.", "stop"),
            ("The kettle's on.\n[Juno]: Thanks!", "stop"),
            ("Juno: I'll have tea.", "stop"),
            ("<user_input>Do you remember?</user_input>", "stop"),
            ("   ", "stop"),
            ("The kettle's on and the", "length"),
        ];
        let shown: Vec<String> = cases
            .iter()
            .map(|(text, finish)| match judge(&reply(text, finish), "Ilse Marrow", "Juno") {
                Ok(kept) => format!("{text:?} -> kept {kept:?}"),
                Err(why) => format!("{text:?} -> discarded: {why}"),
            })
            .collect();
        expect_test::expect![[r#"
            "[Ilse Marrow]: The kettle's on." -> kept "The kettle's on."
            "Ilse Marrow: *smiles* The kettle's on." -> kept "*smiles* The kettle's on."
            "The kettle's on.\n[Juno]: Thanks!" -> discarded: it spoke for Juno
            "Juno: I'll have tea." -> discarded: it spoke for Juno
            "<user_input>Do you remember?</user_input>" -> discarded: it repeated the prompt's markup
            "   " -> discarded: it was empty
            "The kettle's on and the" -> discarded: it was cut off at the token limit"#]].assert_eq(&shown.join("\n"));
    }

    #[test]
    fn judging_replies() {
        let ok = |t: &str| judge(&reply(t, "stop"), "Ilse Marrow", "Juno");
        assert_eq!(ok("[Ilse Marrow]: Morning. The kettle's on.").unwrap(), "Morning. The kettle's on.");
        assert_eq!(ok("ilse marrow: Hm.").unwrap(), "Hm.");
        assert_eq!(ok("  Plain words.  ").unwrap(), "Plain words.");
        assert!(ok("[Ilse Marrow]:   ").unwrap_err().contains("empty"));
        assert!(ok("").unwrap_err().contains("empty"));
        assert!(ok("[User]: I agree with myself.").unwrap_err().contains("spoke for Juno"));
        assert!(ok("Sure.\nJuno: and then I said...").unwrap_err().contains("spoke for Juno"));
        assert!(judge(&reply("A long story that", "length"), "Ilse", "U").unwrap_err().contains("cut off"));
        // A name that merely starts the same way is not a label.
        assert_eq!(ok("Userland is far.").unwrap(), "Userland is far.");
        assert!(ok("<temporal_data>\nCurrent date: today").unwrap_err().contains("markup"));
        assert_eq!(ok("I <3 lore, <b>really</b>.").unwrap(), "I <3 lore, <b>really</b>.");
    }

    #[test]
    fn the_label_never_reaches_the_stream() {
        let run = |fragments: &[&str]| {
            let mut s = LabelStripper::new("Ilse Marrow");
            let mut out: String = fragments.iter().filter_map(|f| s.push(f)).collect();
            out.extend(s.finish());
            out
        };
        assert_eq!(run(&["[Ils", "e Marr", "ow]: Hel", "lo."]), "Hello.");
        assert_eq!(run(&["  ilse marrow:", " Hm."]), "Hm.");
        assert_eq!(run(&["Hello", " there."]), "Hello there.");
        assert_eq!(run(&["[Il"]), "[Il");
        assert_eq!(run(&["Ïlse: ", "ok"]), "Ïlse: ok");
        assert_eq!(run(&["AI: fine"]), "fine");
    }

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
