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
}
