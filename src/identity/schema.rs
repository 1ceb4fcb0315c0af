//! The identity agents' outputs, field for field as the predecessor defined them
//! (`seeds/character-identity-agent.md`). JSON Schemas are generated from these types,
//! so the bounds the model is held to (e.g. 4–6 core traits) cannot drift from the code.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How deep the agents go; changes the prompts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Fast,
    #[default]
    Balanced,
    Deep,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Mode::Fast => "fast",
            Mode::Balanced => "balanced",
            Mode::Deep => "deep",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "fast" => Some(Mode::Fast),
            "balanced" => Some(Mode::Balanced),
            "deep" => Some(Mode::Deep),
            _ => None,
        }
    }
}

/// The pipeline's input: the character to develop and the story around it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CharacterSeed {
    pub name: String,
    pub role: String,
    pub concept: String,
    #[serde(default)]
    pub storyline: serde_json::Value,
    #[serde(default)]
    pub other_characters: Vec<OtherCharacter>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OtherCharacter {
    pub name: String,
    #[serde(default)]
    pub role: String,
    #[serde(default)]
    pub concept: String,
}

impl CharacterSeed {
    /// Read and check a seed file's JSON.
    pub fn parse(text: &str) -> Result<Self, String> {
        let seed: CharacterSeed = serde_json::from_str(text).map_err(|e| format!("not a character seed: {e}"))?;
        if seed.name.trim().is_empty() {
            return Err("the seed's name is empty".into());
        }
        if seed.concept.trim().is_empty() {
            return Err("the seed's concept is empty".into());
        }
        Ok(seed)
    }
}

/// What every agent returns: prose for the reader, structure for the machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentOutput<T> {
    /// Rich prose, two to four paragraphs.
    #[schemars(length(min = 1))]
    pub narrative: String,
    pub structured: T,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PersonalityOutput {
    /// Fundamental personality characteristics.
    #[schemars(length(min = 4, max = 6))]
    pub core_traits: Vec<String>,
    /// Deep psychological fears.
    #[schemars(length(min = 2, max = 4))]
    pub fears: Vec<String>,
    /// What they hide from others or themselves.
    #[schemars(length(min = 2, max = 3))]
    pub secrets: Vec<String>,
    /// Default emotional state.
    pub emotional_baseline: String,
    /// What causes strong reactions.
    #[schemars(length(min = 3, max = 5))]
    pub triggers: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TimelineEvent {
    #[schemars(range(min = 0, max = 10000))]
    pub age: u32,
    pub event: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FormativeExperience {
    pub experience: String,
    pub impact: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Goals {
    /// What they consciously pursue.
    pub surface: String,
    /// What they actually need.
    pub deep: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InternalConflict {
    pub conflict: String,
    pub description: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BackstoryOutput {
    #[schemars(length(min = 5, max = 10))]
    pub timeline: Vec<TimelineEvent>,
    #[schemars(length(min = 3, max = 5))]
    pub formative_experiences: Vec<FormativeExperience>,
    pub goals: Goals,
    #[schemars(length(min = 2, max = 4))]
    pub internal_conflicts: Vec<InternalConflict>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SampleDialogue {
    pub confident: String,
    pub vulnerable: String,
    pub stressed: String,
    pub sarcastic: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VoiceOutput {
    /// Formal, casual, fragmented...
    pub speech_pattern: String,
    /// Characteristic phrases, stutters, patterns.
    #[schemars(length(min = 1, max = 8))]
    pub verbal_tics: Vec<String>,
    /// Word choice level and style.
    pub vocabulary: String,
    pub sample_dialogue: SampleDialogue,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PhysicalOutput {
    /// Habitual physical behaviours.
    #[schemars(length(min = 1, max = 8))]
    pub mannerisms: Vec<String>,
    pub body_language: String,
    /// Graceful, clumsy, tense, relaxed...
    pub movement_style: String,
    #[schemars(length(min = 1, max = 8))]
    pub physical_quirks: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TransformationBeat {
    #[schemars(range(min = 1, max = 3))]
    pub act: u8,
    pub beat: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoryArcOutput {
    /// Protagonist, antagonist, mentor...
    pub role: String,
    /// Growth, corruption, redemption...
    pub arc_type: String,
    #[schemars(length(min = 1, max = 9))]
    pub transformation_beats: Vec<TransformationBeat>,
    /// Which scenes they appear in.
    pub scene_presence: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Relationship {
    /// Name of the other character.
    pub character: String,
    /// Ally, enemy, family...
    #[serde(rename = "type")]
    pub kind: String,
    pub dynamic: String,
    pub evolution: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RelationshipsOutput {
    pub relationships: Vec<Relationship>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Overview {
    pub name: String,
    pub role: String,
    /// 1 (background) to 5 (central).
    #[schemars(range(min = 1, max = 5))]
    pub importance: u8,
    /// One-sentence summary.
    pub one_line: String,
}

/// What the consolidation agent writes itself; everything else in the final profile
/// is taken verbatim from the approved checkpoints, so nothing approved is rewritten.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsolidationOutput {
    pub overview: Overview,
    /// Visual style notes for portrait artists.
    pub style_notes: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Visual {
    pub images: Vec<String>,
    pub style_notes: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProfileMetadata {
    pub mode: Mode,
    pub development_time_minutes: f64,
    pub total_checkpoints: u32,
    pub regenerations: u32,
    pub total_tokens: u64,
}

/// The finished character, as the predecessor's `final_profile.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FinalCharacterProfile {
    pub character_id: String,
    pub name: String,
    pub version: String,
    pub completed_at: String,
    pub overview: Overview,
    pub visual: Visual,
    pub psychology: PersonalityOutput,
    pub physical_presence: PhysicalOutput,
    pub voice: VoiceOutput,
    pub backstory_motivation: BackstoryOutput,
    pub narrative_arc: StoryArcOutput,
    pub relationships: Vec<Relationship>,
    pub metadata: ProfileMetadata,
}

/// The seven checkpoints' agents, in checkpoint order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Agent {
    Personality,
    BackstoryMotivation,
    VoiceDialogue,
    PhysicalDescription,
    StoryArc,
    Relationships,
    FinalConsolidation,
}

impl Agent {
    pub const ALL: [Agent; 7] = [
        Agent::Personality,
        Agent::BackstoryMotivation,
        Agent::VoiceDialogue,
        Agent::PhysicalDescription,
        Agent::StoryArc,
        Agent::Relationships,
        Agent::FinalConsolidation,
    ];

    /// Checkpoint number, 1–7.
    pub fn number(self) -> u8 {
        Agent::ALL.iter().position(|a| *a == self).map(|i| i as u8 + 1).unwrap_or(0)
    }

    pub fn from_number(number: u8) -> Option<Agent> {
        Agent::ALL.get((number as usize).checked_sub(1)?).copied()
    }

    pub fn wave(self) -> u8 {
        match self {
            Agent::Personality | Agent::BackstoryMotivation => 1,
            Agent::VoiceDialogue | Agent::PhysicalDescription | Agent::StoryArc => 2,
            Agent::Relationships => 3,
            Agent::FinalConsolidation => 4,
        }
    }

    pub fn in_wave(wave: u8) -> impl Iterator<Item = Agent> {
        Agent::ALL.into_iter().filter(move |a| a.wave() == wave)
    }

    pub fn name(self) -> &'static str {
        match self {
            Agent::Personality => "personality",
            Agent::BackstoryMotivation => "backstory_motivation",
            Agent::VoiceDialogue => "voice_dialogue",
            Agent::PhysicalDescription => "physical_description",
            Agent::StoryArc => "story_arc",
            Agent::Relationships => "relationships",
            Agent::FinalConsolidation => "final_consolidation",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Agent::Personality => "Personality",
            Agent::BackstoryMotivation => "Backstory & Motivation",
            Agent::VoiceDialogue => "Voice & Dialogue",
            Agent::PhysicalDescription => "Physical Description",
            Agent::StoryArc => "Story Arc",
            Agent::Relationships => "Relationships",
            Agent::FinalConsolidation => "Final Consolidation",
        }
    }

    /// The config role whose profile this agent uses.
    pub fn role(self) -> String {
        format!("identity.{}", self.name())
    }

    /// The JSON Schema of this agent's whole reply (`{narrative, structured}`).
    pub fn output_schema(self) -> serde_json::Value {
        use crate::llm::structured::schema_for;
        match self {
            Agent::Personality => schema_for::<AgentOutput<PersonalityOutput>>(),
            Agent::BackstoryMotivation => schema_for::<AgentOutput<BackstoryOutput>>(),
            Agent::VoiceDialogue => schema_for::<AgentOutput<VoiceOutput>>(),
            Agent::PhysicalDescription => schema_for::<AgentOutput<PhysicalOutput>>(),
            Agent::StoryArc => schema_for::<AgentOutput<StoryArcOutput>>(),
            Agent::Relationships => schema_for::<AgentOutput<RelationshipsOutput>>(),
            Agent::FinalConsolidation => schema_for::<AgentOutput<ConsolidationOutput>>(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::structured::validate;
    use serde_json::json;

    #[test]
    fn numbers_waves_and_names_follow_the_seed() {
        let table: Vec<(u8, &str, u8)> = Agent::ALL.iter().map(|a| (a.number(), a.name(), a.wave())).collect();
        assert_eq!(
            table,
            vec![
                (1, "personality", 1),
                (2, "backstory_motivation", 1),
                (3, "voice_dialogue", 2),
                (4, "physical_description", 2),
                (5, "story_arc", 2),
                (6, "relationships", 3),
                (7, "final_consolidation", 4),
            ]
        );
        assert_eq!(Agent::from_number(0), None);
        assert_eq!(Agent::from_number(8), None);
    }

    #[test]
    fn schemas_carry_the_seed_bounds() {
        let schema = Agent::Personality.output_schema();
        let good = json!({"narrative": "n", "structured": {
            "core_traits": ["a","b","c","d"], "fears": ["f","g"], "secrets": ["s","t"],
            "emotional_baseline": "calm", "triggers": ["x","y","z"]}});
        assert!(validate(&schema, &good).is_empty(), "{:?}", validate(&schema, &good));
        let mut few = good.clone();
        few["structured"]["core_traits"] = json!(["a", "b"]);
        let errors = validate(&schema, &few);
        assert!(errors.iter().any(|e| e.path.contains("core_traits")), "{errors:?}");
        let mut extra = good.clone();
        extra["structured"]["mood"] = json!("x");
        assert!(!validate(&schema, &extra).is_empty());
        let arc = Agent::StoryArc.output_schema();
        let bad_act = json!({"narrative": "n", "structured": {"role": "r", "arc_type": "growth",
            "transformation_beats": [{"act": 4, "beat": "b"}], "scene_presence": []}});
        assert!(!validate(&arc, &bad_act).is_empty());
        let rel = Agent::Relationships.output_schema();
        let ok = json!({"narrative": "n", "structured": {"relationships": [
            {"character": "Ash", "type": "ally", "dynamic": "d", "evolution": "e"}]}});
        assert!(validate(&rel, &ok).is_empty(), "{:?}", validate(&rel, &ok));
    }
}
