//! What an identity agent's output must say beyond its schema, for every provider and
//! both ways of asking (`pipeline`'s instructions, `base`'s workbook page).

use super::records::RunRecord;
use super::schema::{Agent, Mode};
use crate::llm::Usage;
use crate::llm::structured::ContentRules;

/// An agent's answer: narrative, structured part, every attempt, tokens spent.
pub(super) type Asked = (String, serde_json::Value, serde_json::Value, Usage);

/// The shortest narrative each depth accepts: at least a paragraph.
pub fn min_narrative_chars(mode: Mode) -> usize {
    match mode {
        Mode::Fast => 200,
        Mode::Balanced => 300,
        Mode::Deep => 400,
    }
}

/// What an agent's output must say beyond its schema: no field names (the seed's keys
/// included) or placeholders, a narrative of a paragraph or more that names the
/// character (the consolidation: an overview under the character's own name), core
/// traits that are traits. The
/// narrative is at the JSON Pointer `narrative_at` (`None`: not in this value), the
/// structured part under `structured_at` (`""` when it is the whole value).
pub(super) fn content_rules(run: &RunRecord, agent: Agent, narrative_at: Option<&str>, structured_at: &str) -> ContentRules {
    let name = run.seed.name.trim().to_string();
    let mut rules = ContentRules {
        field_names: ["name", "role", "concept", "storyline", "other_characters", "narrative", "structured"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ..ContentRules::default()
    };
    // Checkpoint 7's narrative is the predecessor's fixed status line ("Character
    // development complete. …"); the profile names the character in its overview instead.
    if let Some(at) = narrative_at.filter(|_| agent != Agent::FinalConsolidation) {
        rules.min_chars.push((at.to_string(), min_narrative_chars(run.mode)));
        rules.mentions.push((at.to_string(), vec![name.clone()]));
    }
    // A core trait is a trait, whoever wrote it (see `traits`).
    if agent == Agent::Personality {
        rules.checks.push(super::traits::check(format!("{structured_at}/core_traits"), name.clone()));
    }
    if agent == Agent::FinalConsolidation {
        let expected = name.clone();
        let at = format!("{structured_at}/overview/name");
        rules.checks.push(std::sync::Arc::new(move |value: &serde_json::Value| {
            let given = value.pointer(&at).and_then(|v| v.as_str()).unwrap_or_default();
            if crate::llm::structured::content::mentions(given, &expected) {
                Vec::new()
            } else {
                vec![crate::llm::structured::SchemaError {
                    path: at.clone(),
                    message: format!("is {given:?}, but the character is {expected:?}"),
                    schema_path: "content/name".into(),
                }]
            }
        }));
    }
    rules
}

