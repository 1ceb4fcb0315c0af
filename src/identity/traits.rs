//! Personality traits: what a core trait is, for every provider, and the words the
//! embedded default chooses its traits from.
//!
//! Asked for `core_traits`, a 270M base model writes whatever continues the page:
//! `"smuggle"`, `"she's a keeper"`, the character's own name. Two things hold it to
//! traits. On the base-model path the grammar lets the list hold only words of
//! [`LEXICON`] (an `enum` on the items, see `base::brief_schema`), so every trait is a
//! trait by construction. For every provider, [`check`] refuses an item that is clearly
//! not a trait (a sentence about someone, the character's name, a ramble, the same
//! trait twice), and the reply is re-asked like one that breaks the schema. Field names
//! and placeholders are refused by the general junk check (`llm::structured::content`).

use crate::llm::structured::content::{ContentCheck, mentions, normalise};
use crate::llm::structured::SchemaError;
use serde_json::Value;
use std::sync::Arc;

/// Common English personality traits, one or two words each, lowercase. Every word
/// here passes [`not_a_trait`] and the general junk check (a test holds both).
pub const LEXICON: &[&str] = &[
    // Warmth and how they treat others.
    "kind", "gentle", "warm", "generous", "compassionate", "caring", "tender-hearted", "soft-spoken", "affectionate",
    "empathetic", "forgiving", "patient", "tolerant", "polite", "courteous", "gracious", "hospitable", "charitable",
    "selfless", "protective", "nurturing", "devoted", "loyal", "faithful", "dependable", "reliable", "trustworthy",
    "honest", "sincere", "frank", "blunt", "tactless", "candid", "straightforward", "fair-minded", "just",
    "cold", "aloof", "distant", "callous", "cruel", "ruthless", "vindictive", "spiteful",
    "petty", "jealous", "envious", "possessive", "selfish", "greedy", "manipulative", "cunning", "sly", "deceitful",
    "scheming", "calculating", "ungrateful", "rude", "arrogant", "condescending", "vain", "proud",
    "boastful", "humble", "modest", "unassuming",
    // Temper and mood.
    "calm", "serene", "even-tempered", "composed", "easygoing", "laid-back", "relaxed", "cheerful", "jovial",
    "good-natured", "optimistic", "hopeful", "idealistic", "pessimistic", "cynical", "gloomy", "melancholy",
    "brooding", "moody", "sullen", "grumpy", "irritable", "short-tempered", "hot-headed", "quick-tempered", "volatile",
    "impulsive", "reckless", "restless", "anxious", "nervous", "insecure", "self-conscious",
    "fearful", "timid", "shy", "reserved", "quiet", "taciturn", "withdrawn", "solitary", "introverted",
    "extroverted", "outgoing", "sociable", "gregarious", "talkative", "loud", "boisterous",
    "lively", "spirited", "energetic", "enthusiastic", "passionate", "intense", "fiery", "earnest", "sentimental",
    "nostalgic", "wistful", "romantic", "dreamy",
    // Mind and humour.
    "curious", "inquisitive", "observant", "perceptive", "watchful", "shrewd", "astute", "clever", "quick-witted",
    "sharp-tongued", "witty", "dry-humoured", "sardonic", "sarcastic", "ironic", "playful", "mischievous", "whimsical",
    "eccentric", "quirky", "imaginative", "creative", "inventive", "resourceful", "practical", "pragmatic",
    "down-to-earth", "sensible", "level-headed", "rational", "logical", "analytical", "methodical", "meticulous",
    "thorough", "precise", "orderly", "tidy", "disorganised", "absent-minded", "forgetful",
    "naive", "gullible", "trusting", "wise", "thoughtful", "reflective", "introspective", "philosophical", "bookish",
    "scholarly", "intellectual", "open-minded", "narrow-minded", "opinionated", "dogmatic", "superstitious", "devout",
    "spiritual", "sceptical", "suspicious", "distrustful", "paranoid", "wary", "cautious", "careful", "prudent",
    // Will and conduct.
    "stubborn", "headstrong", "strong-willed", "determined", "persistent", "tenacious", "resilient", "tough", "hardy",
    "stoic", "brave", "courageous", "bold", "daring", "fearless", "adventurous", "ambitious", "driven",
    "competitive", "hard-working", "diligent", "industrious", "conscientious", "disciplined", "dutiful", "responsible",
    "principled", "honourable", "righteous", "self-righteous", "strict", "stern", "demanding",
    "controlling", "domineering", "bossy", "commanding", "confident", "self-assured", "assertive",
    "decisive", "indecisive", "hesitant", "passive", "obedient", "rebellious", "defiant",
    "argumentative", "combative", "aggressive", "secretive", "private", "guarded", "evasive", "mysterious",
    "lazy", "idle", "complacent", "careless", "frugal", "thrifty", "miserly", "extravagant", "flamboyant",
    "charming", "charismatic", "persuasive", "diplomatic", "tactful", "discreet",
    "world-weary", "embittered", "bitter", "resentful", "guilt-ridden", "haunted", "lonely",
    "grieving", "old-fashioned", "traditional", "conventional", "unconventional", "independent", "self-reliant",
    "sensitive", "thin-skinned", "gruff", "unflappable", "adaptable", "flexible",
    "rigid", "warm-hearted", "big-hearted", "good-humoured", "solemn", "serious", "unsentimental", "perfectionist", "tight-lipped",
];

/// Subject pronouns (and their contractions' heads): a "trait" that starts with one is a
/// sentence about someone (`"she's a keeper"`, `"he smuggles"`).
const PRONOUNS: &[&str] = &["i", "he", "she", "they", "we", "you", "it", "who"];

/// Verbs that start a sentence fragment rather than name a trait (`"is a keeper"`).
const LEADING_VERBS: &[&str] = &["is", "was", "are", "were", "has", "had", "does", "did", "will", "can", "likes", "loves", "hates"];

/// A trait is a word or a short phrase.
const MAX_TRAIT_WORDS: usize = 3;

/// Why `text` is not a personality trait of the character called `name`, if it clearly
/// is not one. Lenient on purpose: anything a reader could take for a trait passes.
pub fn not_a_trait(text: &str, name: &str) -> Option<String> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let words: Vec<String> = text.replace('’', "'").split_whitespace().map(str::to_lowercase).collect();
    if words.len() > MAX_TRAIT_WORDS {
        return Some(format!("{text:?} is {} words long; a trait is a word or a short phrase (\"stubborn\", \"dry-humoured\")", words.len()));
    }
    if mentions(text, name) {
        return Some(format!("{text:?} names the character; a trait says what {name} is like"));
    }
    let first = words[0].trim_matches(|c: char| !c.is_alphanumeric() && c != '\'');
    let head = first.split('\'').next().unwrap_or(first);
    if PRONOUNS.contains(&head) {
        return Some(format!("{text:?} is a sentence about someone, not a trait"));
    }
    if LEADING_VERBS.contains(&first) {
        return Some(format!("{text:?} starts like a sentence, not a trait"));
    }
    None
}

/// The check of the list of traits at the JSON Pointer `at` for the character `name`:
/// every item a trait ([`not_a_trait`]) and no trait twice.
pub fn check(at: String, name: String) -> ContentCheck {
    Arc::new(move |value: &Value| {
        let mut problems = Vec::new();
        let Some(items) = value.pointer(&at).and_then(Value::as_array) else { return problems };
        let mut seen: Vec<String> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let Some(text) = item.as_str() else { continue };
            let why = not_a_trait(text, &name).or_else(|| {
                let norm = normalise(text);
                if seen.contains(&norm) { Some(format!("{text:?} is listed twice; each trait must be different")) } else { None }
            });
            seen.push(normalise(text));
            if let Some(message) = why {
                problems.push(SchemaError { path: format!("{at}/{i}"), message, schema_path: "content/not-a-trait".into() });
            }
        }
        problems
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::structured::ContentRules;
    use serde_json::json;

    #[test]
    fn traits_pass_and_sentences_names_and_rambles_do_not() {
        for good in ["stubborn", "dry-humoured", "Protective", "quick to anger", "loyal to family", "fiercely loyal", "sharp-tongued"] {
            assert_eq!(not_a_trait(good, "Mira Voss"), None, "{good}");
        }
        let refused: Vec<String> = [
            "she's a keeper",
            "She’s kind",
            "he is stubborn",
            "they smuggle",
            "is a keeper",
            "Mira's pride",
            "voss",
            "keeps the light burning every night",
        ]
        .iter()
        .map(|t| not_a_trait(t, "Mira Voss").unwrap_or_else(|| format!("{t:?} ACCEPTED")))
        .collect();
        expect_test::expect![[r#"
            "she's a keeper" is a sentence about someone, not a trait
            "She’s kind" is a sentence about someone, not a trait
            "he is stubborn" is a sentence about someone, not a trait
            "they smuggle" is a sentence about someone, not a trait
            "is a keeper" starts like a sentence, not a trait
            "Mira's pride" names the character; a trait says what Mira Voss is like
            "voss" names the character; a trait says what Mira Voss is like
            "keeps the light burning every night" is 6 words long; a trait is a word or a short phrase ("stubborn", "dry-humoured")"#]]
        .assert_eq(&refused.join("\n"));
    }

    #[test]
    fn the_check_names_each_bad_item_and_a_repeat() {
        let check = check("/core_traits".into(), "Mira Voss".into());
        let value = json!({"core_traits": ["stubborn", "she's a keeper", "Stubborn", "watchful"]});
        let problems: Vec<String> = check(&value).iter().map(|p| format!("{p} [{}]", p.schema_path)).collect();
        expect_test::expect![[r#"
            at /core_traits/1: "she's a keeper" is a sentence about someone, not a trait [content/not-a-trait]
            at /core_traits/2: "Stubborn" is listed twice; each trait must be different [content/not-a-trait]"#]]
        .assert_eq(&problems.join("\n"));
        assert!(check(&json!({"core_traits": ["stubborn", "watchful", "kind", "wry"]})).is_empty());
        assert!(check(&json!({"other": 1})).is_empty());
    }

    /// Every word of the lexicon is a trait by both checks, lowercase, and listed once.
    #[test]
    fn every_word_of_the_lexicon_is_a_trait() {
        let schema = json!({"type": "object", "properties": {
            "core_traits": {"type": "array", "items": {"type": "string"}}, "fears": {"type": "array"}, "secrets": {"type": "array"},
            "emotional_baseline": {"type": "string"}, "triggers": {"type": "array"}}});
        let rules = ContentRules { field_names: ["name", "role", "concept", "storyline", "narrative", "structured"].map(String::from).to_vec(), ..ContentRules::default() };
        let mut seen = std::collections::BTreeSet::new();
        for word in LEXICON {
            assert!(seen.insert(*word), "{word} is listed twice");
            assert_eq!(word.to_lowercase(), *word);
            assert_eq!(not_a_trait(word, "Mira Voss"), None, "{word}");
            let value = json!({"core_traits": [word]});
            let problems = crate::llm::structured::content::check(&schema, &value, &rules);
            assert!(problems.is_empty(), "{word}: {problems:?}");
        }
        assert!((150..=300).contains(&LEXICON.len()), "{}", LEXICON.len());
    }
}
