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
    /// `before-char`, `after-char`, `an-top`, `an-bottom`, `at-depth`, `examples-top`, `examples-bottom`,
    /// `outlet` (only where a card, a note or a prompt writes `{{outlet::Name}}`).
    pub position: Option<String>,
    /// For `outlet`: the outlet's name, as `{{outlet::Name}}` writes it.
    pub outlet_name: Option<String>,
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
    /// `true`, `false` or `default` (the engine's setting).
    pub case_sensitive: Option<String>,
    /// `true`, `false` or `default` (the engine's setting).
    pub whole_words: Option<String>,
    /// Whether `probability` is rolled at all.
    pub use_probability: Option<bool>,
    /// Not fired by other entries' content.
    pub exclude_recursion: Option<bool>,
    /// Its content fires no other entry.
    pub prevent_recursion: Option<bool>,
    /// Fires only from this recursion level on (0: not delayed).
    pub delay_until_recursion: Option<u32>,
    /// Weight in its inclusion group's random pick.
    pub group_weight: Option<u32>,
    /// Wins its inclusion group outright (SillyTavern's "prioritize").
    pub group_override: Option<bool>,
    /// `true`, `false` or `default`: pick group members by how many keys matched.
    pub group_scoring: Option<String>,
    /// Fired by meaning (embedding similarity) as well as keys.
    pub vectorized: Option<bool>,
    /// Sent even when the lore budget is spent.
    pub ignore_budget: Option<bool>,
    /// Only for these characters (comma-separated or a list; empty clears).
    pub characters: Option<EntryKeys>,
    /// Only for characters with these tags.
    pub character_tags: Option<EntryKeys>,
    /// The character filter excludes instead.
    pub exclude_characters: Option<bool>,
    /// Generation types that may fire it: `normal`, `continue`, `impersonate`, `swipe`,
    /// `regenerate`, `quiet` (empty: all).
    pub triggers: Option<EntryKeys>,
    /// Extra texts its keys are matched against: `persona`, `description`, `personality`,
    /// `depth-prompt`, `scenario`, `creator-notes` (empty: the chat only).
    pub match_sources: Option<EntryKeys>,
}

/// Words for a setting that may be left to the engine: `true`, `false` or `default`.
fn tri_state(field: &str, value: &str) -> Result<Option<bool>, String> {
    match value.trim() {
        "true" | "yes" => Ok(Some(true)),
        "false" | "no" => Ok(Some(false)),
        "default" | "" => Ok(None),
        other => Err(format!("{field} {other:?}: say true, false or default")),
    }
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
                "outlet" => InsertionPosition::Outlet,
                other => {
                    return Err(format!(
                        "position {other:?}: say before-char, after-char, an-top, an-bottom, at-depth, examples-top, examples-bottom or outlet"
                    ));
                }
            };
        }
        if let Some(v) = self.outlet_name {
            entry.outlet_name = v.trim().to_string();
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
        if let Some(v) = &self.case_sensitive {
            entry.case_sensitive = tri_state("case_sensitive", v)?;
        }
        if let Some(v) = &self.whole_words {
            entry.match_whole_words = tri_state("whole_words", v)?;
        }
        if let Some(v) = &self.group_scoring {
            entry.use_group_scoring = tri_state("group_scoring", v)?;
        }
        for (given, slot) in [
            (self.use_probability, &mut entry.use_probability),
            (self.exclude_recursion, &mut entry.exclude_recursion),
            (self.prevent_recursion, &mut entry.prevent_recursion),
            (self.group_override, &mut entry.group_override),
            (self.vectorized, &mut entry.vectorized),
            (self.ignore_budget, &mut entry.ignore_budget),
            (self.exclude_characters, &mut entry.character_filter.is_exclude),
        ] {
            if let Some(v) = given {
                *slot = v;
            }
        }
        if let Some(v) = self.delay_until_recursion {
            entry.delay_until_recursion = v;
        }
        if let Some(v) = self.group_weight {
            entry.group_weight = v;
        }
        if let Some(v) = self.characters {
            entry.character_filter.names = v.into_list();
        }
        if let Some(v) = self.character_tags {
            entry.character_filter.tags = v.into_list();
        }
        if let Some(v) = self.triggers {
            let triggers = v.into_list();
            if let Some(bad) = triggers.iter().find(|t| !crate::lorebook::GENERATION_TRIGGERS.contains(&t.as_str())) {
                return Err(format!("triggers {bad:?}: say {}", crate::lorebook::GENERATION_TRIGGERS.join(", ")));
            }
            entry.triggers = triggers;
        }
        if let Some(v) = self.match_sources {
            let mut sources = crate::lorebook::MatchSources::default();
            for source in v.into_list() {
                let slot = match source.as_str() {
                    "persona" => &mut sources.persona_description,
                    "description" => &mut sources.character_description,
                    "personality" => &mut sources.character_personality,
                    "depth-prompt" => &mut sources.character_depth_prompt,
                    "scenario" => &mut sources.scenario,
                    "creator-notes" => &mut sources.creator_notes,
                    other => return Err(format!("match_sources {other:?}: say persona, description, personality, depth-prompt, scenario or creator-notes")),
                };
                *slot = true;
            }
            entry.match_sources = sources;
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
