//! The scene's domain types: the Director's JSON contracts (their schemas come from
//! these types, so prompt and validation cannot drift), character state, and the
//! views the front doors read.

use crate::prompting::BudgetLedger;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The five things a round may change about a character. `None` means "unchanged".
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct CharacterState {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mood: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clothing: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub activity: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intentions: Option<String>,
}

/// The state fields by name, for the delta parser, conflicts and prompts.
pub const STATE_FIELDS: [&str; 5] = ["location", "mood", "clothing", "activity", "intentions"];

impl CharacterState {
    pub fn get(&self, field: &str) -> Option<&str> {
        match field {
            "location" => self.location.as_deref(),
            "mood" => self.mood.as_deref(),
            "clothing" => self.clothing.as_deref(),
            "activity" => self.activity.as_deref(),
            "intentions" => self.intentions.as_deref(),
            _ => None,
        }
    }

    fn slot(&mut self, field: &str) -> Option<&mut Option<String>> {
        match field {
            "location" => Some(&mut self.location),
            "mood" => Some(&mut self.mood),
            "clothing" => Some(&mut self.clothing),
            "activity" => Some(&mut self.activity),
            "intentions" => Some(&mut self.intentions),
            _ => None,
        }
    }

    /// Set one field by name; false for an unknown field.
    pub fn set(&mut self, field: &str, value: &str) -> bool {
        match self.slot(field) {
            Some(slot) => {
                *slot = Some(value.to_string());
                true
            }
            None => false,
        }
    }

    /// Overwrite every field `delta` sets; blank values count as unset.
    pub fn apply(&mut self, delta: &CharacterState) {
        for field in STATE_FIELDS {
            if let Some(value) = delta.get(field).map(str::trim).filter(|v| !v.is_empty()) {
                self.set(field, value);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        STATE_FIELDS.iter().all(|f| self.get(f).is_none())
    }
}

/// A character the Director wants to act this round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ActingCharacter {
    /// The character's name exactly as listed in the scene's cast.
    pub name: String,
    /// What this character should do or aim for in their turn.
    #[serde(default)]
    pub guidance: String,
    /// Higher acts earlier among characters without an explicit order.
    #[serde(default)]
    pub priority: i32,
    /// Explicit turn position (1 = first); characters with one act before those without.
    #[serde(default)]
    pub order: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Activation {
    /// A cast member not yet in the scene who enters this round.
    pub name: String,
    /// How they enter; given to the character for its turn.
    #[serde(default)]
    pub entry_guidance: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Deactivation {
    /// A character in the scene who leaves at the end of this round.
    pub name: String,
    /// How they leave; given to the character if it acts this round.
    #[serde(default)]
    pub exit_guidance: String,
}

/// A state change for one character, decided by the Director.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StateUpdate {
    /// The character's name.
    pub name: String,
    #[serde(flatten)]
    pub state: CharacterState,
}

/// Director pass 1: who acts, who enters and leaves, and the state before anyone acts.
/// `acting_characters` is required (an empty list says, explicitly, that nobody acts):
/// a reply without it — `{}`, or another contract's field names — is refused by the
/// schema, so repair and re-asking engage instead of a silent round where nobody acts.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct DirectorPlan {
    pub acting_characters: Vec<ActingCharacter>,
    #[serde(default)]
    pub activations: Vec<Activation>,
    #[serde(default)]
    pub deactivations: Vec<Deactivation>,
    #[serde(default)]
    pub state_updates: Vec<StateUpdate>,
    /// Guidance for every character acting this round.
    #[serde(default)]
    pub open_guidance: String,
}

/// Director pass 2: the state after everyone acted. Where it contradicts a
/// character's own reply, the Director wins.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct Reconciliation {
    pub state_updates: Vec<StateUpdate>,
    /// Trackers to set (name -> new value); trackers not named keep their value.
    pub trackers: BTreeMap<String, serde_json::Value>,
    /// New facts the story has established this round.
    pub new_facts: Vec<String>,
    /// In-fiction minutes that passed during the round.
    pub elapsed_minutes: u32,
}

/// The World agent's report (when `[scene] world_agent` is on it owns trackers and
/// time, and Director pass 2's trackers and minutes are not applied).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct WorldUpdate {
    /// Trackers to set (name -> new value); trackers not named keep their value.
    pub trackers: BTreeMap<String, serde_json::Value>,
    /// In-fiction minutes that passed during the round.
    pub elapsed_minutes: u32,
}

/// A state field where a character's reply and the Director's pass 2 disagreed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conflict {
    pub character: String,
    pub field: String,
    pub character_value: String,
    pub director_value: String,
}

/// What the round record keeps of the Director.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DirectorRecord {
    pub plan: DirectorPlan,
    /// The Director's own plan, when the game master edited it before anyone acted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposed: Option<DirectorPlan>,
    pub reconciliation: Option<Reconciliation>,
    /// The World agent's report, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<WorldUpdate>,
    pub conflicts: Vec<Conflict>,
    /// Acting characters the Director named that are not in the scene's cast.
    pub ignored: Vec<String>,
    /// Per character (by name): whether it acted, entered or left this round, kept with
    /// the round under the scene predecessor's names.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub flags: BTreeMap<String, RoundFlags>,
}

/// What a character did this round, as the scene predecessor's round flags name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RoundFlags {
    #[serde(rename = "hasActedThisRound")]
    pub has_acted: bool,
    #[serde(rename = "enteredThisRound")]
    pub entered: bool,
    #[serde(rename = "exitedThisRound")]
    pub exited: bool,
}

/// One line of a scene's transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SceneMessage {
    pub number: u32,
    pub round: u32,
    pub kind: MessageKind,
    pub character_id: Option<String>,
    pub speaker: String,
    pub content: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    User,
    Character,
    Narrator,
}

impl MessageKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MessageKind::User => "user",
            MessageKind::Character => "character",
            MessageKind::Narrator => "narrator",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "user" => Some(MessageKind::User),
            "character" => Some(MessageKind::Character),
            "narrator" => Some(MessageKind::Narrator),
            _ => None,
        }
    }
}

/// A cast member as the scene sees it: the base character with its world and campaign
/// overrides applied, and its current state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CastMember {
    pub id: String,
    pub name: String,
    /// Sheet fields (description, personality, scenario, ...), overrides applied.
    pub sheet: BTreeMap<String, String>,
    pub active: bool,
    pub state: CharacterState,
    /// Muted in this scene: the Director cannot pick it to act.
    #[serde(default)]
    pub muted: bool,
    /// The card's tags, for lorebook entries' character filters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

impl CastMember {
    /// The sheet as prose, for prompts.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        for (key, value) in &self.sheet {
            if !value.trim().is_empty() {
                out.push_str(&format!("{key}: {}\n", value.trim()));
            }
        }
        out
    }
}

/// Everything `scene state` reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SceneView {
    pub id: String,
    pub name: String,
    pub description: String,
    pub world: String,
    pub campaign: String,
    pub campaign_id: String,
    pub arc: String,
    pub rounds: u32,
    pub cast: Vec<CastMember>,
    pub trackers: BTreeMap<String, serde_json::Value>,
    pub facts: Vec<String>,
    pub elapsed_minutes: u64,
    pub persona: Option<String>,
}

impl SceneView {
    pub fn active(&self) -> impl Iterator<Item = &CastMember> {
        self.cast.iter().filter(|c| c.active)
    }

    pub fn member_by_name(&self, name: &str) -> Option<&CastMember> {
        let name = name.trim();
        self.cast.iter().find(|c| c.name.eq_ignore_ascii_case(name) || c.id == name)
    }
}

/// One line of `scene list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SceneSummary {
    pub id: String,
    pub name: String,
    pub campaign: String,
    pub arc: String,
    pub rounds: u32,
    pub active: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty reply, or one in another contract's field names, does not make a plan.
    #[test]
    fn a_plan_without_acting_characters_is_refused_by_its_schema() {
        let schema = crate::llm::structured::schema_for::<DirectorPlan>();
        let validate = |v: serde_json::Value| crate::llm::structured::validate(&schema, &v);
        assert!(!validate(serde_json::json!({})).is_empty(), "{{}} is not a plan");
        let camel = serde_json::json!({ "actingCharacters": [{ "name": "Wren", "guidance": "speak" }], "openGuidance": "x" });
        assert!(validate(camel).iter().any(|e| e.message.contains("acting_characters")), "field names of another contract are refused");
        assert!(validate(serde_json::json!({ "acting_characters": [] })).is_empty(), "an explicit empty list is a plan");
    }

    #[test]
    fn apply_overwrites_only_the_fields_a_delta_sets() {
        let mut state = CharacterState { location: Some("hall".into()), mood: Some("calm".into()), ..Default::default() };
        state.apply(&CharacterState { mood: Some("angry".into()), activity: Some("  ".into()), ..Default::default() });
        assert_eq!(state.location.as_deref(), Some("hall"));
        assert_eq!(state.mood.as_deref(), Some("angry"));
        assert_eq!(state.activity, None, "a blank value is no change");
    }

    #[test]
    fn the_director_contract_reads_flattened_state_updates() {
        let plan: DirectorPlan = serde_json::from_value(serde_json::json!({
            "acting_characters": [{"name": "Mira", "guidance": "greet", "priority": 2}],
            "state_updates": [{"name": "Mira", "mood": "wary"}]
        }))
        .unwrap();
        assert_eq!(plan.state_updates[0].state.mood.as_deref(), Some("wary"));
        assert_eq!(plan.acting_characters[0].order, None);
        assert!(plan.activations.is_empty());
    }
}

/// The budget ledger of one agent call, kept with the round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallLedger {
    pub agent: String,
    pub character: Option<String>,
    pub ledger: BudgetLedger,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// What went wrong short of failing the call (memories by keyword only, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}
