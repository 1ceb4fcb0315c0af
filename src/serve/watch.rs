//! What the scene and chat sockets hear of work another process does on the library
//! (the CLI playing a round or sending a message, a second server): its events never
//! reach this engine, so while a socket is open the scene or chat is read again every
//! two seconds and what changed is said in the socket's own messages, marked
//! `"elsewhere": true`. An event of ours makes what it changed the known standing, so the
//! next read does not say it again; a change is said once two reads in a row agree, so
//! a round of ours committed just before its event arrives is not said twice.

use super::AppState;
use crate::companion::model::ChatTurn;
use crate::scene::model::SceneMessage;
use serde_json::{Value, json};
use std::hash::{Hash, Hasher};

/// How often an open socket reads its scene or chat again.
pub(super) const EVERY: std::time::Duration = std::time::Duration::from_secs(2);
/// How many of the newest messages or exchanges a read compares.
const WINDOW: u32 = 500;

/// A socket's subject as the store has it.
pub(super) trait Watched: Send + 'static {
    type Standing: PartialEq + Send;
    /// The subject as it stands; `None` when it cannot be read now.
    fn read(&self, state: &AppState) -> Option<Self::Standing>;
    /// What changed from `before` to `now`, as the socket's messages.
    fn moved(&self, state: &AppState, before: &Self::Standing, now: &Self::Standing) -> Vec<Value>;
}

/// Compare reads, and say a change once two reads in a row agree on it.
pub(super) struct Watch<W: Watched> {
    watched: W,
    known: Option<W::Standing>,
    pending: Option<W::Standing>,
}

impl<W: Watched> Watch<W> {
    pub fn new(watched: W, state: &AppState) -> Self {
        let known = watched.read(state);
        Self { watched, known, pending: None }
    }

    /// An event of ours about the subject: what it changed is known, not news.
    pub fn heard(&mut self, state: &AppState) {
        if let Some(now) = self.watched.read(state) {
            self.known = Some(now);
        }
        self.pending = None;
    }

    /// Read again; the messages for a change another process made.
    pub fn tick(&mut self, state: &AppState) -> Vec<Value> {
        let Some(now) = self.watched.read(state) else { return Vec::new() };
        let Some(known) = &self.known else {
            self.known = Some(now);
            return Vec::new();
        };
        if *known == now {
            self.pending = None;
            return Vec::new();
        }
        if self.pending.as_ref() != Some(&now) {
            self.pending = Some(now);
            return Vec::new();
        }
        let messages = self.watched.moved(state, known, &now);
        self.known = Some(now);
        self.pending = None;
        messages
    }
}

fn digest(parts: impl IntoIterator<Item = impl Hash>) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for part in parts {
        part.hash(&mut hasher);
    }
    hasher.finish()
}

/// A scene: its rounds, its newest messages, whether a round runs in another process.
pub(super) struct Scene(pub String);

#[derive(Debug, PartialEq)]
pub(super) struct SceneStanding {
    rounds: u32,
    last: u32,
    count: usize,
    digest: u64,
    elsewhere: bool,
}

impl Scene {
    fn messages(state: &AppState, id: &str) -> Option<Vec<SceneMessage>> {
        let reader = state.store().reader().ok()?;
        crate::scene::records::recent_messages(&reader, id, WINDOW).ok()
    }
}

impl Watched for Scene {
    type Standing = SceneStanding;

    fn read(&self, state: &AppState) -> Option<SceneStanding> {
        let reader = state.store().reader().ok()?;
        let rounds = crate::scene::records::load_view(&reader, &self.0).ok()?.rounds;
        let messages = crate::scene::records::recent_messages(&reader, &self.0, WINDOW).ok()?;
        let elsewhere = state.engine.context().jobs.runs_elsewhere(&crate::scene::round::job(&self.0));
        Some(SceneStanding {
            rounds,
            last: messages.iter().map(|m| m.number).max().unwrap_or(0),
            count: messages.len(),
            digest: digest(messages.iter().map(|m| (m.number, &m.content))),
            elsewhere,
        })
    }

    fn moved(&self, state: &AppState, before: &SceneStanding, now: &SceneStanding) -> Vec<Value> {
        let id = &self.0;
        let mut out = Vec::new();
        if now.elsewhere && !before.elsewhere {
            out.push(json!({ "type": "roundStarted", "sceneId": id, "round": now.rounds + 1, "elsewhere": true }));
        }
        let new: Vec<SceneMessage> = match now.last > before.last {
            true => Self::messages(state, id).unwrap_or_default().into_iter().filter(|m| m.number > before.last).collect(),
            false => Vec::new(),
        };
        let active: Vec<String> = state
            .store()
            .reader()
            .ok()
            .and_then(|r| crate::scene::records::load_view(&r, id).ok())
            .map(|v| v.active().map(|c| c.id.clone()).collect())
            .unwrap_or_default();
        let mut rounds: Vec<u32> = new.iter().map(|m| m.round).collect();
        rounds.dedup();
        for round in &rounds {
            let messages: Vec<&SceneMessage> = new.iter().filter(|m| m.round == *round).collect();
            out.push(json!({ "type": "roundCompleted", "sceneId": id, "round": round, "messages": messages, "activeCharacters": active, "elsewhere": true }));
        }
        // Anything else — a round taken back, a message edited or deleted, a round that
        // ended with nothing kept — is said as a change to read again.
        let only_new = now.rounds == before.rounds + rounds.len() as u32;
        if rounds.is_empty() && (before.rounds, before.last, before.count, before.digest) != (now.rounds, now.last, now.count, now.digest)
            || !rounds.is_empty() && !only_new
            || before.elsewhere && !now.elsewhere && rounds.is_empty()
        {
            out.push(json!({ "type": "sceneChanged", "sceneId": id, "rounds": now.rounds, "elsewhere": true }));
        }
        out
    }
}

/// A character's chat: its newest exchanges.
pub(super) struct Chat(pub String);

#[derive(Debug, PartialEq)]
pub(super) struct ChatStanding {
    last: u32,
    count: usize,
    digest: u64,
}

impl Chat {
    /// The newest exchanges; with their packets when they are to be sent whole.
    fn turns(state: &AppState, id: &str, packets: bool) -> Option<Vec<ChatTurn>> {
        let reader = state.store().reader().ok()?;
        crate::companion::records::recent_turns(&reader, id, WINDOW, packets).ok()
    }
}

impl Watched for Chat {
    type Standing = ChatStanding;

    fn read(&self, state: &AppState) -> Option<ChatStanding> {
        let turns = Self::turns(state, &self.0, false)?;
        Some(ChatStanding {
            last: turns.iter().map(|t| t.seq).max().unwrap_or(0),
            count: turns.len(),
            digest: digest(turns.iter().map(|t| (&t.id, &t.user_text, &t.reply, t.swipe))),
        })
    }

    fn moved(&self, state: &AppState, before: &ChatStanding, now: &ChatStanding) -> Vec<Value> {
        let new: Vec<ChatTurn> = match now.last > before.last {
            true => Self::turns(state, &self.0, true).unwrap_or_default().into_iter().filter(|t| t.seq > before.last).collect(),
            false => Vec::new(),
        };
        let mut out: Vec<Value> = new.iter().map(|turn| json!({ "type": "turn_committed", "turn": turn, "elsewhere": true })).collect();
        // Past the window the count stays put; below it, a count that is not the old one
        // plus the new exchanges means some were also taken back.
        if new.is_empty() || (now.count < WINDOW as usize && now.count != before.count + new.len()) {
            out.push(json!({ "type": "chat_changed", "character_id": self.0, "elsewhere": true }));
        }
        out
    }
}
