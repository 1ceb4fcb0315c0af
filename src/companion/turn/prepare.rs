//! The first stage of a turn: everything before the first LLM call — chat state and
//! history, lore indexing, the message's embedding, proximity, and retrieval.

use crate::companion::records::{self, CharacterInfo, ChatState, ChatTurn, ChatUser};
use crate::companion::{CompanionConfig, CompanionError};
use crate::context::Context;
use crate::memory::detect::{Proximity, ProximityDetector, ProximitySignal, is_memory_intent};
use crate::memory::{MemoryBank, MemoryError, MemoryKind, RetrievalHit, Scope, ScopeKind, SearchFilter, SearchMode, SearchRequest};
use std::collections::HashSet;
use std::sync::Mutex;

/// What retrieval and the detectors decided for one message, before any LLM call.
#[derive(Debug, Clone, Default)]
pub struct Prepared {
    pub state: ChatState,
    /// Who the user is in this chat (its persona, or the configured name).
    pub user: ChatUser,
    pub history: Vec<ChatTurn>,
    pub lore: Vec<RetrievalHit>,
    /// Where each World Info hit of `lore` goes in the packet (by id).
    pub lore_places: std::collections::BTreeMap<String, crate::lorebook::LorePlace>,
    /// The memory bank's hits; empty when memory is not relevant to this message.
    pub memories: Vec<RetrievalHit>,
    /// The proximity after this message, and whether it changed.
    pub proximity: Proximity,
    pub proximity_changed: bool,
    pub notes: Vec<String>,
    /// The chat's lore timers after this message's activation, stored with the exchange.
    pub lore_state: crate::lorebook::activation::ActivationState,
    /// This message's number in the chat (the lore timers' and variables' count).
    pub message_number: u64,
    /// How many user messages the chat holds with this one (the Author's Note's count).
    pub user_messages: u32,
    /// The chat variables as they stood before this message (with what the message's
    /// own macros set): each draw's macros start from them, and the accepted draw's are
    /// stored with the exchange.
    pub variables: crate::prompting::macros::Variables,
    /// The user's message as sent and kept: its macros filled in when it was sent, as
    /// SillyTavern fills them (`{{char}}`, `{{user}}`, `{{setvar}}`, `{{roll}}`…).
    pub input: String,
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
    // What the character lived in a campaign's scenes — its own lines and what it saw or
    // was told there, not the campaign's common knowledge — is its memory too: a game
    // master who asks a character about a scene it played expects it to remember.
    let lived = bank.search_with_vector(
        &SearchRequest {
            query: text.to_string(),
            k: config.memory_k,
            mode,
            filter: SearchFilter {
                scope: Some(Scope { kind: crate::memory::ScopeKind::Campaign, id: None }),
                kinds: vec![MemoryKind::Turn, MemoryKind::Summary],
                witness: Some(character.name.clone()),
                witnessed_only: true,
                ..Default::default()
            },
        },
        vector,
    )?;
    let mut memories: Vec<RetrievalHit> = found.into_iter().filter(|h| !skip.contains(&h.id)).take(config.memory_k).collect();
    let mut from_scenes = 0;
    if !lived.is_empty() {
        let lived_ids: HashSet<String> = lived.iter().map(|h| h.id.clone()).collect();
        memories.extend(lived.into_iter().filter(|h| !skip.contains(&h.id)));
        // Each list's fused score is scaled by its own best, so the lists are merged by
        // what both measure alike: similarity to the message, then the fused score.
        let key = |h: &RetrievalHit| h.vector_score.unwrap_or(0.0);
        memories.sort_by(|a, b| key(b).total_cmp(&key(a)).then(b.score.total_cmp(&a.score)));
        memories.truncate(config.memory_k);
        from_scenes = memories.iter().filter(|m| lived_ids.contains(&m.id)).count();
    }
    for (i, hit) in memories.iter_mut().enumerate() {
        hit.rank = i + 1;
    }
    let intent = is_memory_intent(text);
    let best = memories.iter().filter_map(|h| h.vector_score).fold(f32::MIN, f32::max);
    let scenes_note = match from_scenes {
        0 => String::new(),
        n => format!(" ({n} from scenes {} played)", character.name),
    };
    if memories.is_empty() {
        notes.push("memory bank: no stored memory matched the message".into());
    } else if intent {
        notes.push(format!("memory bank: the message asks to remember{scenes_note}"));
    } else if best >= config.memory_confidence {
        notes.push(format!("memory bank: best memory similarity {best:.2} ≥ {:.2}{scenes_note}", config.memory_confidence));
    } else {
        notes.push(format!(
            "memory bank left out: no recall asked and best similarity {} < {:.2}",
            if best == f32::MIN { "n/a".to_string() } else { format!("{best:.2}") },
            config.memory_confidence
        ));
        memories.clear();
    }
    // Pinned memories come every time, first, whatever the message asks.
    let pinned = bank.pinned(&Scope::character(character.id.clone()), None)?;
    if !pinned.is_empty() {
        // A pinned message still in the recent history is read there, unless the user
        // edited its memory: then the edited words are what it should remember.
        let (sent, in_history): (Vec<RetrievalHit>, Vec<RetrievalHit>) = pinned.into_iter().partition(|p| p.edited || !skip.contains(&p.id));
        notes.push(match in_history.len() {
            0 => format!("memory bank: {} pinned", sent.len()),
            n => format!("memory bank: {} pinned ({n} more pinned, unedited and still in the chat history)", sent.len()),
        });
        memories.retain(|m| !sent.iter().chain(&in_history).any(|p| p.id == m.id));
        memories = sent.into_iter().chain(memories).collect();
        for (i, hit) in memories.iter_mut().enumerate() {
            hit.rank = i + 1;
        }
    }
    Ok((lore, memories))
}

/// Tokens World Info may fill before the packet's own lore budget applies.
const WORLD_INFO_TOKENS: u32 = 4096;

/// Everything before the first LLM call: state, history, lore indexing, the message's
/// embedding, proximity and retrieval. `redo` is the last exchange when its reply is
/// drawn again: it is not its own history, and its message keeps its number;
/// `generation` says which kind of draw this is (World Info triggers and rolls).
pub fn prepare(
    ctx: &Context,
    bank: &MemoryBank,
    character: &CharacterInfo,
    config: &CompanionConfig,
    text: &str,
    redo: Option<&ChatTurn>,
    generation: crate::companion::lore::Generation,
    cancel: &crate::llm::CancelToken,
) -> Result<Prepared, CompanionError> {
    let (state, user, recent, message_number, user_messages, mut lore_state, mut variables) = ctx.store.with(|c| {
        let mut state = records::load_state(c, &character.id)?;
        // A redrawn exchange is answered as it was first sent: the last chat before it
        // is the exchange before it (none for a chat's first), not itself — a redrawn
        // first message said "Time since last chat: moments ago".
        if let Some(turn) = redo {
            let before = records::recent_turns(c, &character.id, 2, false)?.into_iter().rfind(|t| t.seq < turn.seq);
            state.last_chat_at = before.map(|t| t.at);
        }
        let user = records::chat_user(c, &state, &config.user_name)?;
        let recent = records::recent_turns(c, &character.id, config.history_turns, false)?;
        let seq = match redo {
            Some(turn) => turn.seq,
            None => recent.last().map(|t| t.seq).unwrap_or(0).max(state.turns) + 1,
        };
        let number = crate::companion::lore::message_number(seq);
        let lore_state = crate::companion::lore::load_state(c, &character.id)?;
        let variables = crate::companion::variables::for_message(c, &character.id, number)?;
        let user_messages = match redo {
            Some(turn) => records::user_messages_through(c, &character.id, turn.seq)?,
            None => records::user_messages_through(c, &character.id, u32::MAX)? + 1,
        };
        Ok((state, user, recent, number, user_messages, lore_state, variables))
    })?;
    // A new message's macros are filled once, as it is sent (a redrawn one was filled
    // when it was first sent): what it says is what is searched, stored and shown.
    let expanded;
    let text = if redo.is_none() && (text.contains("{{") || text.contains("<USER>") || text.contains("<BOT>")) {
        let field = |key: &str| character.sheet.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()).unwrap_or("");
        let cell = std::cell::RefCell::new(variables);
        let macros = crate::prompting::MacroContext {
            char: &character.name,
            user: &user.name,
            persona: &user.description,
            description: field("description"),
            personality: field("personality"),
            scenario: field("scenario"),
            stable_seed: &character.id,
            variables: Some(&cell),
            ..Default::default()
        };
        expanded = crate::prompting::expand(text, &macros).text;
        variables = cell.into_inner();
        expanded.as_str()
    } else {
        text
    };
    // The exchange being redrawn is not its own history (retrieval still leaves its
    // memories out, so the redraw is not handed the reply it replaces).
    let history: Vec<ChatTurn> = recent.iter().filter(|t| redo.is_none_or(|r| r.id != t.id)).cloned().collect();
    let mut notes = Vec::new();
    // Lore files are re-indexed only when their content changed (a hash check per file);
    // a character's folder only while the library holds someone of that name.
    let slugs: HashSet<String> =
        ctx.store.with(|c| Ok(crate::character::list(c)?.into_iter().map(|r| records::slug(&r.name)).collect()))?;
    let ours = |scope: &Scope| scope.kind != ScopeKind::Character || scope.id.as_ref().is_some_and(|id| slugs.contains(id));
    if let Err(e) = crate::memory::lore::index_lore_where(bank, &crate::paths::lore_dir(), ours) {
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
    let (retrieved, memories) = retrieve(bank, character, config, text, vector.as_deref(), &recent, &mut notes)?;
    // The character's lorebooks (its card's book among them) fire on the conversation,
    // ahead of the lore retrieved from files; the packet's lore budget cuts both.
    let books = ctx.store.with(|c| crate::companion::lore::books(c, &character.id))?;
    let similarity_notes = std::sync::Mutex::new(Vec::new());
    let similarity = |texts: &[&str]| -> Vec<f32> {
        let Some(query) = vector.as_deref() else { return vec![0.0; texts.len()] };
        bank.similarities(query, texts).unwrap_or_else(|e| {
            similarity_notes.lock().unwrap_or_else(|p| p.into_inner()).push(format!("vector-activated lore unavailable: {e}"));
            vec![0.0; texts.len()]
        })
    };
    let (greetings, chosen) = records::chat_greetings(&state, &character.card);
    let turn_text = crate::companion::lore::TurnText {
        user: &user.name,
        history: &history,
        greeting: greetings.get(chosen as usize).map(String::as_str),
        input: text,
        persona: Some(user.description.as_str()),
        message_number,
        generation,
        variables: Some(&variables),
    };
    let fired = crate::companion::lore::activate_for_turn(
        &books,
        character,
        &turn_text,
        &mut lore_state,
        WORLD_INFO_TOKENS,
        Some(cancel.flag()),
        Some(&similarity),
    );
    notes.extend(similarity_notes.into_inner().unwrap_or_default());
    notes.extend(fired.notes);
    let lore_places = fired.places;
    let lore = fired.hits.into_iter().chain(retrieved).collect();
    Ok(Prepared {
        state,
        user,
        history,
        lore,
        lore_places,
        memories,
        proximity,
        proximity_changed,
        notes,
        lore_state,
        message_number,
        user_messages,
        variables,
        input: text.to_string(),
    })
}
