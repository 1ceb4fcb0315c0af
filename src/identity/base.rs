//! The identity agents on a base model (the embedded default).
//!
//! A small pretrained model does not follow instructions; it continues documents. Given
//! the agents' usual prompt (a task, a seed, a JSON Schema) it writes the schema's own
//! words back as values. So for a base model each agent's prompt is a page of a
//! writer's workbook instead: one worked entry for a different character, in exactly
//! the form wanted, then the seed's entry left open. The agent is asked twice:
//!
//! 1. **The narrative first, as prose.** The page ends at `Personality:` and the model
//!    writes the paragraph, held by a grammar to one quoted paragraph of the mode's
//!    minimum length or more.
//! 2. **The brief drawn from it.** The paragraph is put on the page and the model
//!    writes the `In brief:` JSON under the grammar of the agent's schema, tightened
//!    where the answer is known (the consolidation's name is the seed's; a relationship
//!    names one of the seed's other characters when it lists any), each core trait a
//!    word of `traits::LEXICON`, and every other string a phrase with no JSON in it.
//!
//! Both answers pass the same content checks as every other provider's, plus one of
//! their own: nothing may be lifted from the worked example. A failed draw is drawn
//! again from the same page (a document has no conversation to correct it in). The
//! examples live in `prompts/identity/base/examples.json`, the page in `document.j2`.

use super::IdentityError;
use super::rules::{Asked, content_rules, min_narrative_chars};
use super::records::{RunRecord, VersionRecord};
use super::schema::{Agent, CharacterSeed};
use super::traits::LEXICON;
use crate::llm::structured::{
    ContentRules, OutputSchema, StructuredAttempt, StructuredOptions, clip, complete_with_schema, schema_for, total_usage,
};
use crate::llm::{CallContext, ChatMessage, ChatRequest, LlmClient};
use crate::prompting::PromptTemplates;
use crate::prompting::echo::CopyGuard;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The fixed narrative of checkpoint 7, as the predecessor wrote it: the consolidation
/// writes no prose of its own, only the overview.
pub const CONSOLIDATION_NARRATIVE: &str =
    "Character development complete. All aspects consolidated into a comprehensive profile.";

/// How much of an approved narrative goes on the page: enough to stay consistent, short
/// enough that the small model's context holds the page.
const KNOWLEDGE_CHARS: usize = 500;

/// Draws of each part before the agent fails: a fresh draw costs a small model a few
/// seconds, and one in three or four is lifted from the example or repeats itself.
const BASE_DRAWS: u32 = 4;

/// Presence and frequency penalty in the brief: without it the small model fills a
/// list with one item over and over.
const BRIEF_REPETITION_PENALTY: f32 = 0.6;

/// The longest narrative the grammar allows (about three solid paragraphs).
const MAX_NARRATIVE_CHARS: usize = 1100;

#[derive(Debug, Deserialize)]
struct Examples {
    character: ExampleCharacter,
    agents: BTreeMap<String, ExampleAgent>,
}

#[derive(Debug, Serialize, Deserialize)]
struct ExampleCharacter {
    name: String,
    role: String,
    concept: String,
}

#[derive(Debug, Deserialize)]
struct ExampleAgent {
    heading: String,
    narrative: String,
    brief: Value,
}

fn examples(templates: &PromptTemplates) -> Result<Examples, IdentityError> {
    let path = templates.dir().join("identity/base/examples.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| IdentityError::Invalid(format!("cannot read {}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| IdentityError::Invalid(format!("{} is not valid: {e}", path.display())))
}

/// Every string of `value` (the example's values, which must not come back).
fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|i| strings(i, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// The proper names of the worked examples that the seed does not use: the example
/// character's name and the capitalised words its pages use mid-sentence ("Hollin", its
/// drowned village). A small model borrows them; a profile that names them is about the
/// example, not the seed.
fn example_names(examples: &Examples, seed: &super::schema::CharacterSeed) -> Vec<String> {
    let seed_text = serde_json::to_string(seed).unwrap_or_default().to_lowercase();
    let mut texts = vec![examples.character.name.clone()];
    for agent in examples.agents.values() {
        texts.push(agent.narrative.clone());
        strings(&agent.brief, &mut texts);
    }
    let mut names: Vec<String> = examples.character.name.split_whitespace().map(str::to_string).collect();
    for text in &texts {
        for sentence in text.split(['.', '!', '?', ';', ':', '"']) {
            for word in sentence.split_whitespace().skip(1) {
                let word = word.trim_matches(|c: char| !c.is_alphanumeric());
                let word = word.strip_suffix("'s").unwrap_or(word);
                if word.chars().next().is_some_and(char::is_uppercase) && word.chars().count() >= 4 && !names.iter().any(|n| n == word) {
                    names.push(word.to_string());
                }
            }
        }
    }
    names.retain(|n| n.chars().count() >= 3 && !seed_text.contains(&n.to_lowercase()));
    names
}

/// A content check refusing any string of a reply that names one of `names`.
fn no_example_names(names: Vec<String>) -> crate::llm::structured::ContentCheck {
    Arc::new(move |value: &Value| {
        let mut texts = Vec::new();
        strings(value, &mut texts);
        let found = names.iter().find(|n| texts.iter().any(|t| crate::llm::structured::content::mentions(t, n)));
        match found {
            Some(name) => vec![crate::llm::structured::SchemaError {
                path: String::new(),
                message: format!("names {name:?}, who or which belongs to the worked example; write about this character's own world"),
                schema_path: "content/borrowed".into(),
            }],
            None => Vec::new(),
        }
    })
}

/// Every free string of a brief holds a phrase: not empty (a small model's favourite
/// way out of a field it has nothing for) and not a ramble.
const BRIEF_STRING_CHARS: (u64, u64) = (3, 200);

/// A list item is shorter still: a trait, a fear, a habit.
const BRIEF_ITEM_CHARS: u64 = 80;

fn phrases(schema: &mut Value) {
    phrases_within(schema, BRIEF_STRING_CHARS.1);
}

/// The grammar of a phrase of `min..=max` characters: it starts with neither a space nor
/// a mark (`,.:;`) and holds no line break and none of `{}[]<>`. Left free, a small model inside a
/// string writes the JSON it thinks comes next (`"}, {"`, `"] ,"`, `"[...]"`) or web markup
/// it has seen (`"<a href="`), and the draw is refused; the grammar takes the pattern,
/// validation all three.
fn phrase_pattern(min: u64, max: u64) -> String {
    let inner = "\"\\\\{}\\[\\]<>\\n\\r";
    format!("^[^ ,.:;{inner}][^{inner}]{{{},{}}}$", min.saturating_sub(1), max.saturating_sub(1))
}

fn phrases_within(schema: &mut Value, max: u64) {
    match schema {
        Value::Object(map) => {
            let free_string = map.get("type") == Some(&json!("string"))
                && !["enum", "const", "pattern"].iter().any(|k| map.contains_key(*k));
            if free_string {
                map.entry("minLength").or_insert(json!(BRIEF_STRING_CHARS.0));
                map.entry("maxLength").or_insert(json!(max));
                let bounds = (map["minLength"].as_u64().unwrap_or(1), map["maxLength"].as_u64().unwrap_or(max));
                map.insert("pattern".into(), json!(phrase_pattern(bounds.0, bounds.1)));
            }
            let is_list = map.get("type") == Some(&json!("array"));
            for (key, value) in map.iter_mut() {
                let max = if is_list && key == "items" { BRIEF_ITEM_CHARS } else { max };
                phrases_within(value, max);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| phrases_within(i, max)),
        _ => {}
    }
}

/// The words the base model may use as core traits: the lexicon, less the worked
/// example's own traits (shown just above on the page, they would be copied rather than
/// chosen) and any word that names the character (which the trait check refuses).
fn trait_words(seed: &CharacterSeed, example_brief: &Value) -> Vec<&'static str> {
    let shown: Vec<String> = example_brief
        .get("core_traits")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|t| t.trim().to_lowercase())
        .collect();
    LEXICON
        .iter()
        .copied()
        .filter(|word| !shown.iter().any(|s| s == word) && !crate::llm::structured::content::mentions(word, seed.name.trim()))
        .collect()
}

/// The agent's schema, tightened where the seed already knows the answer, with every
/// free string a phrase, and (personality) every core trait a word of the lexicon.
fn brief_schema<T: JsonSchema>(seed: &CharacterSeed, agent: Agent, example_brief: &Value) -> Value {
    let mut schema = schema_for::<T>();
    phrases(&mut schema);
    match agent {
        Agent::Personality => {
            // The grammar holds each item to one of the words; the trait check still
            // refuses the same trait twice.
            if let Some(items) = schema.pointer_mut("/properties/core_traits/items") {
                *items = json!({ "type": "string", "enum": trait_words(seed, example_brief) });
            }
        }
        Agent::FinalConsolidation => {
            if let Some(name) = schema.pointer_mut("/$defs/Overview/properties/name") {
                *name = json!({ "type": "string", "const": seed.name.trim() });
            }
            let role = seed.role.trim();
            if let (Some(field), false) = (schema.pointer_mut("/$defs/Overview/properties/role"), role.is_empty()) {
                *field = json!({ "type": "string", "const": role });
            }
        }
        Agent::Relationships if !seed.other_characters.is_empty() => {
            let names: Vec<&str> = seed
                .other_characters
                .iter()
                .map(|o| o.name.trim())
                .filter(|n| !n.is_empty())
                .collect();
            if let (Some(character), false) = (
                schema.pointer_mut("/$defs/Relationship/properties/character"),
                names.is_empty(),
            ) {
                *character = json!({ "type": "string", "enum": names });
                // One relationship per character the seed names, no more.
                if let Some(Value::Object(list)) = schema.pointer_mut("/properties/relationships") {
                    list.insert("minItems".into(), json!(1));
                    list.insert("maxItems".into(), json!(names.len()));
                }
            }
        }
        _ => {}
    }
    schema
}

fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

/// The workbook page for `agent`: the worked example, then the seed's entry, open at
/// the narrative (or, given the narrative, at the brief).
fn render_page(
    templates: &PromptTemplates,
    examples: &Examples,
    agent: Agent,
    seed: &CharacterSeed,
    knowledge: &[(Agent, &str)],
    feedback: Option<&str>,
    narrative: Option<&str>,
) -> Result<String, IdentityError> {
    let example = examples.agents.get(agent.name()).ok_or_else(|| {
        IdentityError::Invalid(format!(
            "the worked examples have no entry for {}",
            agent.name()
        ))
    })?;
    let knowledge: Vec<Value> = knowledge
        .iter()
        .filter(|(a, text)| *a != Agent::FinalConsolidation && !text.trim().is_empty())
        .map(|(a, text)| {
            let heading = examples
                .agents
                .get(a.name())
                .map_or(a.title(), |e| e.heading.as_str());
            json!({ "heading": heading, "narrative": quoted(&clip(text.trim(), KNOWLEDGE_CHARS)) })
        })
        .collect();
    let storyline = match &seed.storyline {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    // The page ends exactly where the model writes: no trailing newline.
    Ok(templates
        .render(
            "identity/base/document.j2",
            json!({
                "heading": example.heading,
                "example": examples.character,
                "example_narrative": quoted(&example.narrative),
                "example_brief": example.brief.to_string(),
                "seed": seed,
                "storyline": storyline,
                "knowledge": knowledge,
                "feedback": feedback,
                "narrative": narrative.map(quoted),
            }),
        )?
        .trim_end()
        .to_string())
}

/// The narrative's schema: one paragraph between `min` and [`MAX_NARRATIVE_CHARS`]
/// characters that opens with the character's name (a small model left to choose
/// often writes about someone else, or about the worked example's character) and holds
/// no line break (left free to, the model goes on to the page's next line —
/// `\nBackstory: "` — and closes the string there, with a raw line break inside it that
/// no JSON reader takes). The grammar is built from the pattern; validation checks both.
fn narrative_schema(name: &str, min: usize) -> Value {
    let rest_min = min.saturating_sub(name.chars().count() + 1).max(1);
    let rest_max = MAX_NARRATIVE_CHARS.saturating_sub(name.chars().count() + 1).max(rest_min);
    let pattern = format!("^{} [^\"\\\\\\n\\r]{{{rest_min},{rest_max}}}$", regex::escape(name));
    json!({ "type": "string", "minLength": min, "maxLength": MAX_NARRATIVE_CHARS, "pattern": pattern })
}

/// How a page is asked: no schema text (the grammar holds the shape), fresh draws of the
/// same page instead of re-asks, up to [`BASE_DRAWS`] of them.
fn page_options(content: ContentRules) -> StructuredOptions {
    StructuredOptions { schema_in_prompt: false, reask: false, content, max_attempts: BASE_DRAWS, ..StructuredOptions::default() }
}

/// One agent call on a base model: narrative, then the brief; see the module docs.
pub(super) fn ask<T>(
    client: &LlmClient,
    run: &RunRecord,
    agent: Agent,
    knowledge: &BTreeMap<u8, &VersionRecord>,
    feedback: Option<&str>,
    call: CallContext<'_>,
) -> Result<Asked, IdentityError>
where
    T: DeserializeOwned + JsonSchema + Serialize,
{
    let templates = PromptTemplates::shipped()?;
    let examples = examples(&templates)?;
    let example = examples.agents.get(agent.name()).ok_or_else(|| {
        IdentityError::Invalid(format!(
            "the worked examples have no entry for {}",
            agent.name()
        ))
    })?;
    let knowledge: Vec<(Agent, &str)> = knowledge
        .iter()
        .filter_map(|(n, v)| Agent::from_number(*n).map(|a| (a, v.narrative.as_str())))
        .collect();
    let page = |narrative: Option<&str>| {
        render_page(
            &templates, &examples, agent, &run.seed, &knowledge, feedback, narrative,
        )
    };
    let mut borrowed = Vec::new();
    strings(&example.brief, &mut borrowed);
    let foreign = example_names(&examples, &run.seed);
    // The worked example is there to show the form, not the words: the model is steered
    // off continuing any run of it, and (in the brief, where a small model loops) off
    // repeating itself.
    let avoid = vec![example.narrative.clone(), example.brief.to_string()];
    let request = |text: String, max_tokens: u32, repetition: Option<f32>| {
        let mut request = ChatRequest::new(String::new(), vec![ChatMessage::system(text)]);
        request.stream = true;
        request.sampler.max_tokens = Some(max_tokens);
        request.sampler.avoid = avoid.clone();
        request.sampler.presence_penalty = repetition;
        request.sampler.frequency_penalty = repetition;
        request
    };
    let agent_error = |e: crate::llm::structured::StructuredError, before: &[StructuredAttempt]| {
        let attempts: Vec<StructuredAttempt> = before
            .iter()
            .cloned()
            .chain(renumber(e.attempts(), before.len()))
            .collect();
        IdentityError::Agent {
            message: e.to_string(),
            attempts: serde_json::to_value(attempts).unwrap_or_default(),
        }
    };

    // 1. The narrative, as prose on the page.
    let mut attempts: Vec<StructuredAttempt> = Vec::new();
    let narrative = if agent == Agent::FinalConsolidation {
        CONSOLIDATION_NARRATIVE.to_string()
    } else {
        let schema = narrative_schema(run.seed.name.trim(), min_narrative_chars(run.mode));
        let schema = OutputSchema::<String>::with_schema("narrative", schema)
            .map_err(|e| IdentityError::Invalid(e.to_string()))?;
        let mut rules = content_rules(run, agent, Some(""), "");
        let copies = CopyGuard::new([example.narrative.as_str()]);
        rules.checks.push(Arc::new(move |value: &Value| {
            let text = value.as_str().unwrap_or_default();
            match copies.copied(text) {
                Some(run) => vec![crate::llm::structured::SchemaError {
                    path: String::new(),
                    message: format!(
                        "copies the worked example (\"{}\"); write about this character",
                        clip(&run, 80)
                    ),
                    schema_path: "content/borrowed".into(),
                }],
                None => Vec::new(),
            }
        }));
        rules.checks.push(no_example_names(foreign.clone()));
        let options = page_options(rules);
        let max_tokens = (MAX_NARRATIVE_CHARS / 3) as u32;
        match complete_with_schema(
            client,
            &schema,
            request(page(None)?, max_tokens, None),
            &options,
            call,
        ) {
            Ok(out) => {
                attempts = out.attempts;
                out.value.trim().to_string()
            }
            Err(e) => return Err(agent_error(e, &[])),
        }
    };

    // 2. The brief, drawn from the narrative now on the page.
    let schema = OutputSchema::<T>::with_schema(
        &crate::llm::structured::schema_name::<T>(),
        brief_schema::<T>(&run.seed, agent, &example.brief),
    )
    .map_err(|e| IdentityError::Invalid(e.to_string()))?;
    let mut rules = content_rules(run, agent, None, "");
    rules.borrowed = borrowed;
    rules.checks.push(no_example_names(foreign));
    let options = page_options(rules);
    let shown = (agent != Agent::FinalConsolidation).then_some(narrative.as_str());
    let out = complete_with_schema(client, &schema, request(page(shown)?, 700, Some(BRIEF_REPETITION_PENALTY)), &options, call)
        .map_err(|e| agent_error(e, &attempts))?;
    let before = attempts.len();
    attempts.extend(renumber(&out.attempts, before));
    let structured =
        serde_json::to_value(&out.value).map_err(|e| IdentityError::Invalid(e.to_string()))?;
    let usage = total_usage(&attempts);
    Ok((
        narrative,
        structured,
        serde_json::to_value(&attempts).unwrap_or_default(),
        usage,
    ))
}

/// The second call's attempts, numbered after the first call's.
fn renumber(attempts: &[StructuredAttempt], after: usize) -> Vec<StructuredAttempt> {
    attempts
        .iter()
        .cloned()
        .map(|mut a| {
            a.number += after as u32;
            a
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed() -> CharacterSeed {
        CharacterSeed::parse(
            r#"{"name": "Ilse Marrow", "role": "lighthouse keeper", "concept": "A widow who trades secrets with smugglers to keep the light burning.",
                "storyline": "A stranger washes ashore.", "other_characters": [{"name": "Tomas Venn", "role": "smuggler"}]}"#,
        )
        .unwrap()
    }

    /// The worked example's own names are refused in a profile of another seed: its
    /// character and its drowned village, not common words that open a sentence.
    #[test]
    fn the_worked_examples_names_are_refused_unless_the_seed_uses_them() {
        let templates = PromptTemplates::shipped().unwrap();
        let examples = examples(&templates).unwrap();
        let names = example_names(&examples, &seed());
        for name in ["Corin", "Ashdown", "Hollin"] {
            assert!(names.iter().any(|n| n == name), "{name} missing from {names:?}");
        }
        for word in ["When", "Nobody", "The", "His"] {
            assert!(!names.iter().any(|n| n == word), "{word} is not a name: {names:?}");
        }
        let check = no_example_names(names);
        assert!(check(&json!("Ilse Marrow keeps the light above Hollin.")).len() == 1);
        assert!(check(&json!({"timeline": [{"event": "meets Corin at the ferry"}]})).len() == 1);
        assert!(check(&json!("Ilse Marrow keeps the light and trades in secrets.")).is_empty());
        let mut hollin_seed = seed();
        hollin_seed.concept = "A keeper whose sister drowned at Hollin.".into();
        assert!(!example_names(&examples, &hollin_seed).iter().any(|n| n == "Hollin"));
    }

    /// The page a base model continues: the worked example in exactly the form wanted,
    /// then the seed's entry, open where the model writes. No schema, no field list.
    #[test]
    fn the_workbook_page_for_the_narrative_and_then_for_the_brief() {
        let templates = PromptTemplates::shipped().unwrap();
        let examples = examples(&templates).unwrap();
        let knowledge = [(Agent::Personality, "Ilse Marrow is stubborn and kind.")];
        let page = render_page(
            &templates,
            &examples,
            Agent::VoiceDialogue,
            &seed(),
            &knowledge,
            Some("more salt"),
            None,
        )
        .unwrap();
        let tail: Vec<&str> = page.lines().skip(6).collect();
        expect_test::expect![[r#"
            Character: Ilse Marrow, lighthouse keeper. A widow who trades secrets with smugglers to keep the light burning.
            Story: A stranger washes ashore.
            Others in the story: Tomas Venn (smuggler).
            Personality: "Ilse Marrow is stubborn and kind."
            The editor's note on the last draft: more salt
            Voice:"#]]
        .assert_eq(&tail.join("\n"));
        assert!(page.starts_with("Character notes from a novelist's workbook."));
        assert!(
            page.contains("\nVoice: \"Corin Ashdown speaks slowly"),
            "{page}"
        );
        assert!(!page.contains("speech_pattern\":\"...") && !page.contains("json_schema"));

        let brief = render_page(
            &templates,
            &examples,
            Agent::VoiceDialogue,
            &seed(),
            &[],
            None,
            Some("Ilse talks \"little\"."),
        )
        .unwrap();
        assert!(
            brief.ends_with("Voice: \"Ilse talks \\\"little\\\".\"\nIn brief:"),
            "{brief}"
        );
        // Every agent has its worked example.
        for n in 1..=7 {
            let agent = Agent::from_number(n).unwrap();
            assert!(
                render_page(&templates, &examples, agent, &seed(), &[], None, None).is_ok(),
                "{agent:?}"
            );
        }
    }

    #[test]
    fn the_brief_schema_fixes_what_the_seed_already_knows() {
        let run_seed = seed();
        let schema = {
            let mut s = schema_for::<super::super::schema::ConsolidationOutput>();
            if let Some(name) = s.pointer_mut("/$defs/Overview/properties/name") {
                *name = json!({ "type": "string", "const": run_seed.name });
            }
            s
        };
        assert_eq!(
            schema.pointer("/$defs/Overview/properties/name/const"),
            Some(&json!("Ilse Marrow"))
        );
        let relationships = schema_for::<super::super::schema::RelationshipsOutput>();
        assert!(
            relationships
                .pointer("/$defs/Relationship/properties/character")
                .is_some(),
            "{relationships}"
        );
        let mut personality = schema_for::<super::super::schema::PersonalityOutput>();
        phrases(&mut personality);
        assert_eq!(personality.pointer("/properties/core_traits/items/minLength"), Some(&json!(3)));
        assert_eq!(personality.pointer("/properties/core_traits/items/maxLength"), Some(&json!(80)));
        assert_eq!(personality.pointer("/properties/emotional_baseline/maxLength"), Some(&json!(200)));
        // A phrase starts with a word and holds no JSON of its own.
        let phrase = crate::llm::structured::CompiledSchema::new(personality.pointer("/properties/emotional_baseline").unwrap().clone()).unwrap();
        for good in ["a quiet, watchful calm", "'River's listening.'", "(rarely) angry", "42 years of calm", "Øyvind's debt"] {
            assert!(phrase.is_valid(&json!(good)), "{good}");
        }
        for junk in ["}, {", "\", {", "] ,", "[...]", "calm\nBackstory:", "ok", " calm", "a {b}"] {
            assert!(!phrase.is_valid(&json!(junk)), "{junk}");
        }
        crate::llm::local::grammar::from_schema(&personality).unwrap();
        // The personality's traits come from the lexicon, less the worked example's and the name's.
        let templates = PromptTemplates::shipped().unwrap();
        let example = &examples(&templates).unwrap().agents["personality"].brief;
        let mut frank = run_seed.clone();
        frank.name = "Frank Odell".into();
        let schema = brief_schema::<super::super::schema::PersonalityOutput>(&frank, Agent::Personality, example);
        let words = schema.pointer("/properties/core_traits/items/enum").and_then(Value::as_array).unwrap();
        assert_eq!(words.len(), LEXICON.len() - 4, "patient, superstitious, guarded and frank are left out");
        for gone in ["patient", "superstitious", "guarded", "frank"] {
            assert!(!words.contains(&json!(gone)), "{gone}");
        }
        assert_eq!(schema.pointer("/properties/core_traits/minItems"), Some(&json!(4)));
        let compiled = crate::llm::structured::CompiledSchema::new(schema.clone()).unwrap();
        let traits = |list: Value| json!({"core_traits": list, "fears": ["the dark", "debt"], "secrets": ["a debt", "a letter"],
            "emotional_baseline": "guarded calm", "triggers": ["pity", "bells", "lies"]});
        assert!(compiled.is_valid(&traits(json!(["stubborn", "dry-humoured", "protective", "secretive"]))));
        assert!(!compiled.is_valid(&traits(json!(["stubborn", "smuggle", "protective", "secretive"]))));
        assert!(!compiled.is_valid(&traits(json!(["stubborn", "she's a keeper", "protective", "secretive"]))));
        // Other agents keep their free strings.
        let voice = brief_schema::<super::super::schema::VoiceOutput>(&frank, Agent::VoiceDialogue, example);
        assert_eq!(voice.pointer("/properties/verbal_tics/items/enum"), None);
        // The grammar converter takes the list (one alternative per word).
        let grammar = crate::llm::local::grammar::from_schema(&schema).unwrap();
        assert!(grammar.gbnf.contains("dry-humoured"), "{}", grammar.gbnf);
        let narrative = crate::llm::structured::CompiledSchema::new(narrative_schema("Ilse Marrow", 40)).unwrap();
        assert!(narrative.is_valid(&json!("Ilse Marrow keeps the light and trades in secrets with the smugglers.")));
        assert!(!narrative.is_valid(&json!("Corin Ashdown keeps the ferry and trades in secrets with the smugglers.")));
        assert!(!narrative.is_valid(&json!("Ilse Marrow sleeps.")));
        assert!(!narrative.is_valid(&json!("Ilse Marrow keeps the light and trades in secrets.\nOthers in the story: Tomas Venn.")));
        let grammar = crate::llm::local::grammar::from_schema(&narrative_schema("Ilse Marrow", 40)).unwrap();
        assert!(grammar.gbnf.contains("\\n\\r]"), "{}", grammar.gbnf);
    }
}
