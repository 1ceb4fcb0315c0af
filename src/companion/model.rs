//! The chat's data: the packet as sent, the character as the packet sees it, and the
//! committed exchanges. Plain types, so assembly (`packet`) and storage (`records`)
//! both build on them without depending on each other.

use crate::llm::ChatMessage;
use crate::memory::RetrievalHit;
use crate::prompting::DroppedItem;
use crate::memory::detect::Proximity;
use serde::{Deserialize, Serialize};

/// The packet as sent, with what each block cost.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Packet {
    /// The messages exactly as sent to the model.
    pub messages: Vec<ChatMessage>,
    /// The XML blocks in order, each with its text as sent and its token count.
    pub blocks: Vec<PacketBlock>,
    /// Why the conditional blocks are there or not, and any fallback taken.
    pub notes: Vec<String>,
    /// Estimated prompt tokens of all messages.
    pub tokens: u32,
    pub max_context_tokens: u32,
    /// The reply's cap the packet was planned with (sent as `max_tokens`).
    #[serde(default)]
    pub reply_tokens: u32,
}

impl Packet {
    pub fn block(&self, tag: &str) -> Option<&PacketBlock> {
        self.blocks.iter().find(|b| b.tag == tag)
    }

    /// The whole prompt as one text (system, then user), for display and search.
    pub fn text(&self) -> String {
        self.messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n\n")
    }
}

/// One XML block of the packet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PacketBlock {
    pub tag: String,
    /// The block as sent, tags included.
    pub text: String,
    pub tokens: u32,
    /// The block's token budget, for budgeted blocks: what its content may take.
    pub budget: Option<u32>,
    /// What of the block the budget governs (its entries, lines, or messages), without the
    /// tags and fixed words around them: measured against `budget`, where `tokens` is the
    /// whole block as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_tokens: Option<u32>,
    /// Items that did not fit the budget, with the reason.
    pub dropped: Vec<DroppedItem>,
}

/// A character one can chat with, as the chat list shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCharacter {
    pub id: String,
    pub name: String,
    pub origin: String,
    pub turns: u32,
    pub last_chat_at: Option<String>,
}

/// What the packet needs to know about the character.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CharacterInfo {
    pub id: String,
    pub name: String,
    /// Sheet fields (description, personality, scenario, ...) in a stable order.
    pub sheet: Vec<(String, String)>,
    /// Greeting, example dialogue, system prompt and the rest of the card's own text.
    #[serde(default)]
    pub card: crate::character::CardText,
}

impl CharacterInfo {
    /// The lore folder name under `lore/characters/`: lower-case name with dashes, so
    /// `Ilse Marrow` reads `lore/characters/ilse-marrow/`.
    pub fn lore_slug(&self) -> String {
        slug(&self.name)
    }
}

pub fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.trim().chars() {
        if c.is_alphanumeric() {
            out.extend(c.to_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

/// Where the conversation with one character stands.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChatState {
    pub proximity: Proximity,
    pub session: Option<String>,
    pub last_chat_at: Option<String>,
    pub turns: u32,
    /// Which greeting opens the chat: 0 the card's `first_mes`, n its n-th alternate.
    #[serde(default)]
    pub greeting: u32,
    /// The persona the user plays in this chat (`None`: `[companion] user_name`).
    #[serde(default)]
    pub persona_id: Option<String>,
    /// An imported chat file's header and opening messages, as read (see `chat_file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<serde_json::Value>,
    /// The user's Author's Note for this chat (`None`: none written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author_note: Option<AuthorNote>,
}

/// SillyTavern's Author's Note: the user's own standing instruction for one chat
/// ("keep it tense", "it is raining"), put into the prompt every `every` user messages,
/// `depth` messages from the end or around the character. Why: a game master steers a
/// long chat with it without editing the card, and a migrated chat keeps steering the
/// same way (the file's `chat_metadata.note_*` keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AuthorNote {
    /// Macros (`{{char}}`, `{{user}}`, …) are filled each time it is sent.
    pub text: String,
    /// Messages from the end of the chat as sent, the user's new message being the last
    /// (used when `position` is `in_chat`).
    pub depth: u32,
    /// Sent with every `every`-th user message (1: always; 0: never, kept but paused).
    pub every: u32,
    /// Said as a system, user or assistant note (in the chat only).
    pub role: NoteRole,
    pub position: NotePosition,
}

impl Default for AuthorNote {
    /// SillyTavern's defaults: in the chat at depth 4, every message, as the system.
    fn default() -> Self {
        Self { text: String::new(), depth: 4, every: 1, role: NoteRole::System, position: NotePosition::InChat }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoteRole {
    #[default]
    System,
    User,
    Assistant,
}

/// Where the note goes: among the messages at its depth, or in the system prompt just
/// before or after the character (SillyTavern's "before" / "after" the story string).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotePosition {
    #[default]
    #[serde(alias = "chat")]
    InChat,
    #[serde(alias = "before")]
    BeforeCharacter,
    #[serde(alias = "after")]
    AfterCharacter,
}

impl AuthorNote {
    /// Whether the note goes with the `user_messages`-th user message (this one counted),
    /// as SillyTavern counts: every message at 1, never at 0, else each multiple.
    pub fn due(&self, user_messages: u32) -> bool {
        match self.every {
            0 => false,
            1 => true,
            k => user_messages > 0 && user_messages % k == 0,
        }
    }

    /// How many user messages after the `user_messages`-th it is next sent (`None`: never).
    pub fn next_in(&self, user_messages: u32) -> Option<u32> {
        match self.every {
            0 => None,
            1 => Some(1),
            k => Some(k - user_messages % k),
        }
    }

    /// The note from a SillyTavern chat header's `chat_metadata` (`note_prompt`,
    /// `note_interval`, `note_depth`, `note_position`, `note_role`); `None` when it has
    /// no note text.
    pub fn from_chat_metadata(metadata: &serde_json::Value) -> Option<Self> {
        let text = metadata.get("note_prompt")?.as_str()?.trim();
        if text.is_empty() {
            return None;
        }
        let number = |key: &str| metadata.get(key).and_then(|v| v.as_f64().or_else(|| v.as_str()?.trim().parse().ok()));
        let d = Self::default();
        let count = |key: &str, default: u32| number(key).filter(|n| n.is_finite()).map(|n| n.abs().min(10_000.0) as u32).unwrap_or(default);
        Some(Self {
            text: text.to_string(),
            depth: count("note_depth", d.depth),
            every: number("note_interval").filter(|n| n.is_finite()).map(|n| if n <= 0.0 { 0 } else { n.min(10_000.0) as u32 }).unwrap_or(d.every),
            role: match number("note_role").map(|n| n as i64) {
                Some(1) => NoteRole::User,
                Some(2) => NoteRole::Assistant,
                _ => NoteRole::System,
            },
            position: match number("note_position").map(|n| n as i64) {
                Some(0) => NotePosition::AfterCharacter,
                Some(2) => NotePosition::BeforeCharacter,
                _ => NotePosition::InChat,
            },
        })
    }

    /// The `chat_metadata` keys SillyTavern keeps the note in.
    pub fn to_chat_metadata(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        m.insert("note_prompt".into(), self.text.clone().into());
        m.insert("note_interval".into(), self.every.into());
        m.insert("note_depth".into(), self.depth.into());
        let position = match self.position {
            NotePosition::AfterCharacter => 0,
            NotePosition::InChat => 1,
            NotePosition::BeforeCharacter => 2,
        };
        m.insert("note_position".into(), position.into());
        let role = match self.role {
            NoteRole::System => 0,
            NoteRole::User => 1,
            NoteRole::Assistant => 2,
        };
        m.insert("note_role".into(), role.into());
        m
    }
}

/// Who the user is in a chat: the chat's persona, or the configured name.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChatUser {
    pub name: String,
    /// The persona's description (empty without a persona); `{{persona}}` and the packet.
    pub description: String,
    pub persona_id: Option<String>,
    /// The persona's picture (PNG), for the chat to show; not sent to models.
    #[serde(skip)]
    pub image_png: Option<std::sync::Arc<Vec<u8>>>,
}

/// The greetings of a card in swipe order: `first_mes`, then the alternates.
pub fn greetings(card: &crate::character::CardText) -> Vec<String> {
    let mut all = vec![card.first_mes.trim().to_string()];
    all.extend(card.alternate_greetings.iter().map(|g| g.trim().to_string()));
    if all.iter().all(String::is_empty) { Vec::new() } else { all }
}

/// One committed exchange.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatTurn {
    pub id: String,
    pub character_id: String,
    pub seq: u32,
    pub session: String,
    pub user_text: String,
    pub reply: String,
    pub at: String,
    pub user_memory_id: Option<String>,
    pub reply_memory_id: Option<String>,
    pub proximity: Proximity,
    pub packet: Packet,
    pub hits: Vec<RetrievalHit>,
    pub attempts: u32,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub from_cache: bool,
    pub elapsed_ms: u64,
    /// Every draw kept for this reply (regenerating adds one); `reply` is `swipes[swipe]`.
    #[serde(default)]
    pub swipes: Vec<String>,
    #[serde(default)]
    pub swipe: u32,
    /// The chat-file objects an imported exchange came from (see `chat_file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<serde_json::Value>,
    /// The name the user went by when they wrote this message (`None`: the chat's
    /// persona, for exchanges stored before names were kept per message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_name: Option<String>,
}

impl ChatTurn {
    /// Who wrote this exchange's message: its own name, else the chat's `persona`.
    pub fn user_or<'a>(&'a self, persona: &'a str) -> &'a str {
        self.user_name.as_deref().filter(|n| !n.trim().is_empty()).unwrap_or(persona)
    }

    /// The messages an imported chat file had after this exchange that make no exchange
    /// of their own — a second message in a row from the user or a character, a last
    /// message with no reply — as (name, is the user's, text). They are part of the
    /// conversation the model reads, as in SillyTavern; hidden (`is_system`) messages
    /// are not.
    pub fn carried(&self) -> Vec<CarriedMessage> {
        self.carried_in("after")
    }

    /// Such messages before the first exchange of an imported chat (after its greeting).
    pub fn carried_before(&self) -> Vec<CarriedMessage> {
        self.carried_in("before")
    }

    /// When the user's message was sent: its own `send_date` in the chat file it came
    /// from (when one SillyTavern writes), else the exchange's time.
    pub fn user_at(&self) -> String {
        self.file_date("user").unwrap_or_else(|| self.at.clone())
    }

    /// When the character's reply was sent: its own `send_date` in the chat file it came
    /// from (SillyTavern stamps each message), else the exchange's time.
    pub fn reply_at(&self) -> String {
        self.file_date("reply").unwrap_or_else(|| self.at.clone())
    }

    fn file_date(&self, key: &str) -> Option<String> {
        self.file.as_ref()?.get(key)?.get("send_date").and_then(send_date)
    }

    fn carried_in(&self, key: &str) -> Vec<CarriedMessage> {
        let Some(after) = self.file.as_ref().and_then(|f| f.get(key)).and_then(serde_json::Value::as_array) else { return Vec::new() };
        after
            .iter()
            .filter_map(serde_json::Value::as_object)
            .filter(|o| !o.get("is_system").and_then(serde_json::Value::as_bool).unwrap_or(false))
            .filter_map(|o| {
                let text = o.get("mes")?.as_str()?.trim();
                let name = o.get("name").and_then(serde_json::Value::as_str).map(str::trim).unwrap_or("").to_string();
                let user = o.get("is_user").and_then(serde_json::Value::as_bool).unwrap_or(false);
                // Its own time, or the exchange's when the file gives none readable.
                let at = o.get("send_date").and_then(send_date).unwrap_or_else(|| self.at.clone());
                (!text.is_empty()).then(|| CarriedMessage { name, user, text: text.to_string(), at })
            })
            .collect()
    }
}

impl CarriedMessage {
    /// Who said it: the name the file gives, else the exchange's user or `character`.
    pub fn speaker<'a>(&'a self, turn: &'a ChatTurn, user: &'a str, character: &'a str) -> &'a str {
        match (self.name.is_empty(), self.user) {
            (false, _) => &self.name,
            (true, true) => turn.user_or(user),
            (true, false) => character,
        }
    }
}

/// A chat file's message carried with an exchange (see [`ChatTurn::carried`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CarriedMessage {
    /// As the file names the speaker (empty when it does not).
    pub name: String,
    pub user: bool,
    pub text: String,
    /// When it was sent (RFC 3339): its own `send_date`, else its exchange's time.
    pub at: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_is_due_as_sillytavern_counts_user_messages() {
        let every = |k: u32| AuthorNote { every: k, ..Default::default() };
        assert!((0..5).all(|n| every(1).due(n)), "every 1: always, before the first message too");
        assert!((0..9).all(|n| !every(0).due(n)), "every 0: paused");
        let due: Vec<u32> = (0..10).filter(|n| every(3).due(*n)).collect();
        assert_eq!(due, [3, 6, 9]);
        assert_eq!([1, 2, 3, 4].map(|n| every(3).next_in(n)), [Some(2), Some(1), Some(3), Some(2)]);
        assert_eq!(every(0).next_in(4), None);
    }

    #[test]
    fn the_note_reads_and_writes_sillytaverns_chat_metadata() {
        let metadata = serde_json::json!({ "note_prompt": "  It is raining.  ", "note_interval": 3, "note_depth": "2", "note_position": 2, "note_role": 1 });
        let note = AuthorNote::from_chat_metadata(&metadata).unwrap();
        assert_eq!(
            note,
            AuthorNote { text: "It is raining.".into(), depth: 2, every: 3, role: NoteRole::User, position: NotePosition::BeforeCharacter }
        );
        let back = serde_json::Value::Object(note.to_chat_metadata());
        assert_eq!(back, serde_json::json!({ "note_prompt": "It is raining.", "note_interval": 3, "note_depth": 2, "note_position": 2, "note_role": 1 }));
        // Defaults for what a file leaves out; a negative interval pauses, as SillyTavern reads it.
        let bare = AuthorNote::from_chat_metadata(&serde_json::json!({ "note_prompt": "Hush.", "note_interval": -1 })).unwrap();
        assert_eq!((bare.depth, bare.every, bare.role, bare.position), (4, 0, NoteRole::System, NotePosition::InChat));
        assert_eq!(AuthorNote::from_chat_metadata(&serde_json::json!({ "note_prompt": " " })), None);
        assert_eq!(AuthorNote::from_chat_metadata(&serde_json::json!({ "note_prompt": 7 })), None);
        assert_eq!(AuthorNote::from_chat_metadata(&serde_json::Value::Null), None);
    }
}

/// A message's `send_date` as RFC 3339, when it is one of the forms SillyTavern has
/// written: an RFC 3339 time, epoch milliseconds (a number, or digits as text),
/// `November 23, 2026 2:08pm`, or `2026-11-23 @14h 08m 37s 123ms`. The file's own text
/// is what goes back out on export; this is only how it is read and shown.
pub(crate) fn send_date(value: &serde_json::Value) -> Option<String> {
    use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};
    let rfc = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    if let Some(ms) = value.as_i64() {
        return Utc.timestamp_millis_opt(ms).single().map(rfc);
    }
    let text = value.as_str()?.trim();
    if let Some(ms) = text.parse::<i64>().ok().filter(|_| text.len() >= 10) {
        return Utc.timestamp_millis_opt(ms).single().map(rfc);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(rfc(t.with_timezone(&Utc)));
    }
    let lower = text.to_lowercase();
    for format in ["%B %d, %Y %I:%M%P", "%B %d, %Y %I:%M %P", "%B %e, %Y %l:%M%P", "%B %e, %Y %l:%M %P"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(&lower, format) {
            return Some(rfc(t.and_utc()));
        }
    }
    // `2026-11-23 @14h 08m 37s 123ms` (the milliseconds are optional).
    let cleaned: String = text.replace(['@', 'h', 'm', 's'], " ");
    let parts: Vec<&str> = cleaned.split_whitespace().collect();
    if parts.len() >= 4 {
        let joined = format!("{} {}:{}:{}", parts[0], parts[1], parts[2], parts[3]);
        if let Ok(t) = NaiveDateTime::parse_from_str(&joined, "%Y-%m-%d %H:%M:%S") {
            return Some(rfc(t.and_utc()));
        }
    }
    None
}
