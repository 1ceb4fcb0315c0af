//! A change to some of a lorebook entry's settings, as the command line's `lorebook entry add|edit`
//! flags and the HTTP entry routes' bodies say it: one set of names and one parser, so
//! every front door takes the same fields and refuses the same words.

use crate::lorebook::{InsertionPosition, LoreEntry, PromptRole, SelectiveLogic};
use serde::Deserialize;

/// Keys as one comma-separated line (a `/regular expression/` keeps its commas, see
/// [`crate::lorebook::split_keys`]) or as a list.
#[derive(Debug, Clone, PartialEq, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum EntryKeys {
    Line(String),
    List(Vec<String>),
}

impl EntryKeys {
    fn into_list(self) -> Vec<String> {
        match self {
            EntryKeys::Line(line) => crate::lorebook::split_keys(&line),
            EntryKeys::List(list) => list.into_iter().map(|k| k.trim().to_string()).filter(|k| !k.is_empty()).collect(),
        }
    }
}

/// The settings to change; what is absent stays as it is.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EntryPatch {
    /// Title / memo (never sent to the model).
    pub comment: Option<String>,
    /// Primary keys: comma-separated text (`/pattern/flags` for a regular expression) or a list.
    pub keys: Option<EntryKeys>,
    pub secondary_keys: Option<EntryKeys>,
    /// How secondary keys combine: `and-any`, `and-all`, `not-any`, `not-all`.
    pub logic: Option<String>,
    pub content: Option<String>,
    pub constant: Option<bool>,
    pub enabled: Option<bool>,
    /// Insertion order (higher goes later, nearer the end of the prompt).
    pub order: Option<i64>,
    /// `before-char`, `after-char`, `an-top`, `an-bottom`, `at-depth`, `examples-top`, `examples-bottom`.
    pub position: Option<String>,
    pub depth: Option<u32>,
    /// For `at-depth`: `system`, `user` or `assistant`.
    pub role: Option<String>,
    /// Percent, 0 to 100.
    pub probability: Option<u32>,
    /// Inclusion group.
    pub group: Option<String>,
    /// Rounds (0: none).
    pub sticky: Option<u32>,
    pub cooldown: Option<u32>,
    pub delay: Option<u32>,
    pub scan_depth: Option<u32>,
}

impl EntryPatch {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == EntryPatch::default()
    }

    /// Apply the settings given to `entry`; a word that is not a setting is refused with the
    /// field named. Ranges and keys are checked afterwards, as every edit is
    /// ([`crate::lorebook::activation::check_entry`]).
    pub fn apply(self, entry: &mut LoreEntry) -> Result<(), String> {
        if let Some(v) = self.comment {
            entry.comment = v;
        }
        if let Some(v) = self.keys {
            entry.keys = v.into_list();
        }
        if let Some(v) = self.secondary_keys {
            entry.secondary_keys = v.into_list();
            entry.selective = !entry.secondary_keys.is_empty() || entry.selective;
        }
        if let Some(v) = self.logic {
            entry.selective_logic = match v.as_str() {
                "and-any" => SelectiveLogic::AndAny,
                "and-all" => SelectiveLogic::AndAll,
                "not-any" => SelectiveLogic::NotAny,
                "not-all" => SelectiveLogic::NotAll,
                other => return Err(format!("logic {other:?}: say and-any, and-all, not-any or not-all")),
            };
        }
        if let Some(v) = self.content {
            entry.content = v;
        }
        if let Some(v) = self.constant {
            entry.constant = v;
        }
        if let Some(v) = self.enabled {
            entry.enabled = v;
        }
        if let Some(v) = self.order {
            entry.insertion_order = v;
        }
        if let Some(v) = self.position {
            entry.position = match v.as_str() {
                "before-char" => InsertionPosition::BeforeCharacter,
                "after-char" => InsertionPosition::AfterCharacter,
                "an-top" => InsertionPosition::AuthorNoteTop,
                "an-bottom" => InsertionPosition::AuthorNoteBottom,
                "at-depth" => InsertionPosition::AtDepth,
                "examples-top" => InsertionPosition::ExamplesTop,
                "examples-bottom" => InsertionPosition::ExamplesBottom,
                other => {
                    return Err(format!(
                        "position {other:?}: say before-char, after-char, an-top, an-bottom, at-depth, examples-top or examples-bottom"
                    ));
                }
            };
        }
        if let Some(v) = self.depth {
            entry.depth = v;
        }
        if let Some(v) = self.role {
            entry.role = match v.as_str() {
                "system" => PromptRole::System,
                "user" => PromptRole::User,
                "assistant" => PromptRole::Assistant,
                other => return Err(format!("role {other:?}: say system, user or assistant")),
            };
        }
        if let Some(v) = self.probability {
            entry.probability = v;
        }
        if let Some(v) = self.group {
            entry.group = v;
        }
        for (given, slot) in [(self.sticky, &mut entry.sticky), (self.cooldown, &mut entry.cooldown), (self.delay, &mut entry.delay)] {
            if let Some(v) = given {
                *slot = (v > 0).then_some(v);
            }
        }
        if let Some(v) = self.scan_depth {
            entry.scan_depth = Some(v);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_as_a_line_or_a_list_and_a_wrong_word_is_named() {
        let mut entry = LoreEntry::default();
        let patch: EntryPatch = serde_json::from_str(r#"{"keys": "/wyr{1,2}m/i, sluice", "secondary_keys": ["gate", " "]}"#).unwrap();
        patch.apply(&mut entry).unwrap();
        assert_eq!(entry.keys, ["/wyr{1,2}m/i", "sluice"]);
        assert_eq!(entry.secondary_keys, ["gate"]);
        assert!(entry.selective);
        let wrong = EntryPatch { position: Some("middle".into()), ..Default::default() }.apply(&mut entry).unwrap_err();
        assert!(wrong.starts_with("position \"middle\""), "{wrong}");
        assert!(serde_json::from_str::<EntryPatch>(r#"{"kees": "x"}"#).unwrap_err().to_string().contains("kees"));
    }
}
