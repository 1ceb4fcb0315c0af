//! The scene's domain types: the Director's JSON contracts (their schemas come from
//! these types, so prompt and validation cannot drift), character state, and the
//! views the front doors read.

use crate::prompting::BudgetLedger;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The five things a round may change about a character. `None` means "unchanged".
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
pub struct ActingCharacter {
    /// The character's name exactly as listed in the scene's cast.
    // The contract's `{id|name}`: a plan sent back by hand may name a cast member by id
    // (the round reads it as that member's name).
    #[serde(alias = "id")]
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
    /// The game master made them act (`scene round --force`, the Scene panel's "Acts this
    /// round"), not the Director: they act after those it picked, and their `priority`
    /// is no rank of the Director's. Not the Director's to set: out of its schema.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[schemars(skip)]
    pub forced: bool,
}

impl ActingCharacter {
    /// The priority a forced character was stored with before `forced` existed (it read
    /// as -2147483648 in every plan shown).
    const FORCED_SENTINEL: i64 = i32::MIN as i64;

    pub fn forced(name: String, guidance: String) -> Self {
        Self { name, guidance, priority: 0, order: None, forced: true }
    }

    /// A stored plan (`actingCharacters` JSON) of a version that marked a forced
    /// character by its priority, read as `forced` with no priority.
    pub fn read_forced_sentinel(plan: &mut serde_json::Value) {
        let Some(acting) = plan.get_mut("actingCharacters").and_then(|a| a.as_array_mut()) else { return };
        for actor in acting {
            if actor.get("priority").and_then(|p| p.as_i64()) == Some(Self::FORCED_SENTINEL) {
                actor["priority"] = 0.into();
                actor["forced"] = true.into();
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Activation {
    /// A cast member not yet in the scene who enters this round.
    // The contract's `{id|name}`: a plan sent back by hand may name a cast member by id
    // (the round reads it as that member's name).
    #[serde(alias = "id")]
    pub name: String,
    /// How they enter; given to the character for its turn.
    #[serde(default, alias = "entry_guidance")]
    pub entry_guidance: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Deactivation {
    /// A character in the scene who leaves at the end of this round.
    // The contract's `{id|name}`: a plan sent back by hand may name a cast member by id
    // (the round reads it as that member's name).
    #[serde(alias = "id")]
    pub name: String,
    /// How they leave; given to the character if it acts this round.
    #[serde(default, alias = "exit_guidance")]
    pub exit_guidance: String,
}

/// A state change for one character, decided by the Director. On the wire the
/// updates of a pass are one object keyed by character name (`"stateUpdates":
/// {"Wren": {"mood": "wary"}}`), as the scene predecessor's contract has it; see
/// [`state_updates_wire`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateUpdate {
    /// The character's name.
    pub name: String,
    #[serde(flatten)]
    pub state: CharacterState,
}

/// Director pass 1: who acts, who enters and leaves, and the state before anyone acts.
///
/// The wire form is the scene predecessor's contract, camelCase (`actingCharacters`,
/// `stateUpdates`, `openGuidance`), and the schema is strict: `actingCharacters` is
/// required (an empty list says, explicitly, that nobody acts) and unknown fields are
/// refused, so `{}` or a reply in another dialect fails validation and repair and
/// re-asking engage instead of a silent round where nobody acts. The snake_case names
/// are still read (rounds recorded before the switch), never written.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DirectorPlan {
    #[serde(alias = "acting_characters")]
    pub acting_characters: Vec<ActingCharacter>,
    #[serde(default)]
    pub activations: Vec<Activation>,
    #[serde(default)]
    pub deactivations: Vec<Deactivation>,
    /// State to set before anyone acts, keyed by character name.
    #[serde(default, alias = "state_updates", with = "state_updates_wire")]
    #[schemars(with = "BTreeMap<String, CharacterState>")]
    pub state_updates: Vec<StateUpdate>,
    /// Guidance for every character acting this round.
    #[serde(default, alias = "open_guidance")]
    pub open_guidance: String,
}

/// Director pass 2: the state after everyone acted. Where it contradicts a
/// character's own reply, the Director wins. Strict like [`DirectorPlan`]:
/// `stateUpdates` is required (`{}` when nobody changed).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Reconciliation {
    /// State after the round, keyed by character name.
    #[serde(alias = "state_updates", with = "state_updates_wire")]
    #[schemars(with = "BTreeMap<String, CharacterState>")]
    pub state_updates: Vec<StateUpdate>,
    /// Trackers to set (name -> new value); trackers not named keep their value.
    #[serde(default)]
    pub trackers: BTreeMap<String, serde_json::Value>,
    /// New facts the story has established this round.
    #[serde(default, alias = "new_facts")]
    pub new_facts: Vec<String>,
    /// In-fiction minutes that passed during the round.
    #[serde(default, alias = "elapsed_minutes")]
    pub elapsed_minutes: u32,
}

/// The World agent's report (when `[scene] world_agent` is on it owns trackers and
/// time, and Director pass 2's trackers and minutes are not applied). `trackers` is
/// required (`{}` when none changed); unknown fields are refused.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorldUpdate {
    /// Trackers to set (name -> new value); trackers not named keep their value.
    pub trackers: BTreeMap<String, serde_json::Value>,
    /// In-fiction minutes that passed during the round.
    #[serde(default, alias = "elapsed_minutes")]
    pub elapsed_minutes: u32,
}

/// `stateUpdates` on the wire: an object keyed by character name, each value the
/// fields that change. Reading also takes the list form (`[{"name": …, "mood": …}]`)
/// that rounds were recorded in before the switch. Two updates of one name merge, the
/// later field winning, as applying them in order would.
pub mod state_updates_wire {
    use super::{CharacterState, StateUpdate};
    use serde::de::{self, MapAccess, SeqAccess, Visitor};
    use serde::ser::SerializeMap;
    use serde::{Deserializer, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(updates: &[StateUpdate], serializer: S) -> Result<S::Ok, S::Error> {
        let mut merged: Vec<(&str, CharacterState)> = Vec::new();
        for update in updates {
            match merged.iter_mut().find(|(name, _)| *name == update.name) {
                Some((_, state)) => state.apply(&update.state),
                None => merged.push((&update.name, update.state.clone())),
            }
        }
        let mut map = serializer.serialize_map(Some(merged.len()))?;
        for (name, state) in &merged {
            map.serialize_entry(name, state)?;
        }
        map.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<StateUpdate>, D::Error> {
        deserializer.deserialize_any(UpdatesVisitor)
    }

    struct UpdatesVisitor;

    impl<'de> Visitor<'de> for UpdatesVisitor {
        type Value = Vec<StateUpdate>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an object of state updates keyed by character name")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some((name, state)) = map.next_entry::<String, CharacterState>()? {
                out.push(StateUpdate { name, state });
            }
            Ok(out)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(update) = seq.next_element::<StateUpdate>()? {
                out.push(update);
            }
            Ok(out)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
    }
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
    /// The card's creator's notes and Character's Note: never in a prompt here, but lore
    /// entries may match them (`matchCreatorNotes`, `matchCharacterDepthPrompt`). Read
    /// from the card each time the cast is loaded, so never stored with the scene.
    #[serde(skip)]
    pub creator_notes: String,
    #[serde(skip)]
    pub depth_prompt: String,
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

    /// The cast member `name` means: its id or its whole name (case ignored), else the
    /// one member whose name, or a word of it, starts with `name` (`crate::names`, as the
    /// CLI resolves what a person types). A Director, like a person, often names someone
    /// by first name ("Maudry" for "Maudry Kettlewick"); a name two members share means
    /// neither.
    pub fn member_by_name(&self, name: &str) -> Option<&CastMember> {
        let name = name.trim();
        self.cast
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name) || c.id == name)
            .or_else(|| crate::names::only(&self.cast, |c| c.name.as_str(), name).ok())
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

    /// An empty reply, an unknown field, or the snake_case dialect does not make a plan:
    /// the schema names what is wrong, so repair and re-asking engage.
    #[test]
    fn a_plan_is_the_predecessors_camel_case_contract_and_nothing_else() {
        let schema = crate::llm::structured::schema_for::<DirectorPlan>();
        let validate = |v: serde_json::Value| crate::llm::structured::validate(&schema, &v);
        assert!(!validate(serde_json::json!({})).is_empty(), "{{}} is not a plan");
        let snake = serde_json::json!({ "acting_characters": [{ "name": "Wren", "guidance": "speak" }], "open_guidance": "x" });
        assert!(validate(snake).iter().any(|e| e.message.contains("actingCharacters")), "another dialect's names are refused");
        let extra = serde_json::json!({ "actingCharacters": [], "mood": "tense" });
        assert!(!validate(extra).is_empty(), "an unknown field is refused");
        let bad_state = serde_json::json!({ "actingCharacters": [], "stateUpdates": { "Wren": { "hunger": "high" } } });
        assert!(!validate(bad_state).is_empty(), "a state field that does not exist is refused");
        assert!(validate(serde_json::json!({ "actingCharacters": [] })).is_empty(), "an explicit empty list is a plan");
        let full = serde_json::json!({
            "actingCharacters": [{ "name": "Wren", "guidance": "speak", "priority": 1, "order": 1 }],
            "activations": [{ "name": "Ossian", "entryGuidance": "up the stair" }],
            "deactivations": [{ "name": "Juno", "exitGuidance": "out into the fog" }],
            "stateUpdates": { "Wren": { "mood": "wary", "location": "the gallery" } },
            "openGuidance": "Midnight nears."
        });
        assert!(validate(full.clone()).is_empty(), "{:?}", validate(full.clone()));
        let plan: DirectorPlan = serde_json::from_value(full.clone()).unwrap();
        assert_eq!(plan.activations[0].entry_guidance, "up the stair");
        assert_eq!(plan.state_updates[0].name, "Wren");
        assert_eq!(plan.state_updates[0].state.location.as_deref(), Some("the gallery"));
        assert_eq!(serde_json::to_value(&plan).unwrap(), full, "produced exactly as accepted");
    }

    #[test]
    fn a_reconciliation_needs_its_state_updates_and_speaks_camel_case() {
        let schema = crate::llm::structured::schema_for::<Reconciliation>();
        let validate = |v: serde_json::Value| crate::llm::structured::validate(&schema, &v);
        assert!(!validate(serde_json::json!({})).is_empty(), "{{}} is not a reconciliation");
        assert!(!validate(serde_json::json!({ "stateUpdates": {}, "new_facts": ["x"] })).is_empty());
        let ok = serde_json::json!({ "stateUpdates": { "Ossian": { "location": "the jetty" } }, "trackers": { "fog": "thin" }, "newFacts": ["The seal is green."], "elapsedMinutes": 10 });
        assert!(validate(ok.clone()).is_empty(), "{:?}", validate(ok.clone()));
        let r: Reconciliation = serde_json::from_value(ok.clone()).unwrap();
        assert_eq!((r.elapsed_minutes, r.new_facts.len(), r.state_updates.len()), (10, 1, 1));
        assert_eq!(serde_json::to_value(&r).unwrap(), ok);
        let world = crate::llm::structured::schema_for::<WorldUpdate>();
        assert!(!crate::llm::structured::validate(&world, &serde_json::json!({ "elapsed_minutes": 5 })).is_empty());
    }

    #[test]
    fn apply_overwrites_only_the_fields_a_delta_sets() {
        let mut state = CharacterState { location: Some("hall".into()), mood: Some("calm".into()), ..Default::default() };
        state.apply(&CharacterState { mood: Some("angry".into()), activity: Some("  ".into()), ..Default::default() });
        assert_eq!(state.location.as_deref(), Some("hall"));
        assert_eq!(state.mood.as_deref(), Some("angry"));
        assert_eq!(state.activity, None, "a blank value is no change");
    }

    /// Rounds recorded before the switch kept snake_case names and a list of updates;
    /// they still read, and two updates of one name merge when written.
    #[test]
    fn a_recorded_plan_in_the_old_form_still_reads() {
        let plan: DirectorPlan = serde_json::from_value(serde_json::json!({
            "acting_characters": [{"name": "Mira", "guidance": "greet", "priority": 2}],
            "activations": [{"name": "Ada", "entry_guidance": "in"}],
            "state_updates": [{"name": "Mira", "mood": "wary"}, {"name": "Mira", "location": "hall"}],
            "open_guidance": "go"
        }))
        .unwrap();
        assert_eq!(plan.state_updates[0].state.mood.as_deref(), Some("wary"));
        assert_eq!((plan.acting_characters[0].order, plan.activations[0].entry_guidance.as_str(), plan.open_guidance.as_str()), (None, "in", "go"));
        let written = serde_json::to_value(&plan).unwrap();
        assert_eq!(written["stateUpdates"], serde_json::json!({ "Mira": { "mood": "wary", "location": "hall" } }));
        assert!(written.get("state_updates").is_none() && written.get("acting_characters").is_none());
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
