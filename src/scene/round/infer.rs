//! State a character's reply implies without tagging it: the simple cases the scene
//! predecessor's heuristics covered — entering a place, leaving one, moving somewhere,
//! putting clothes on or taking them off. Only the narration is read (quoted speech is
//! not: "I'll go to the market" is a plan, not a move), and only sentences whose subject
//! is the character (its name, first name, or I / he / she / they). A `[field: value]`
//! tag of the reply always wins, and Director pass 2 overrides both.

use crate::scene::model::CharacterState;
use regex::Regex;
use std::sync::LazyLock;

/// Where a noun phrase ends: punctuation, or a conjunction that starts a new clause.
const PHRASE: &str = r"((?:the|a|an|her|his|their|my|our|its)\s+[^.,;:!?\n]+?)(?:\s+(?:and|but|while|as|where|when|to|with|without|in|at|for|from|behind|through|toward|towards|into|onto|beside|near|past|carrying|holding|before|after|until)\b|[.,;:!?\n]|$)";

static MOVE: LazyLock<Regex> = LazyLock::new(|| {
    let verbs = "steps?|walk(?:s|ed)?|go(?:es)?|went|heads?|headed|moves?|moved|climbs?|climbed|hurr(?:y|ies|ied)|runs?|ran|wanders?|slips?|slipped|strides?|strode|retreats?|retreated|descends?|descended|crosse?s?|crossed|returns?|returned|backs?|limps?|limped|stumbles?|stumbled|makes? (?:her|his|their|my) way|made (?:her|his|their|my) way";
    let particle = r"(?:(?:back|out|down|up|over|across|outside|inside|away)\s+)?";
    Regex::new(&format!(r"(?i)^(?:\w+ly\s+)?(?:{verbs})\s+{particle}(?:into|onto|to|toward|towards|inside)\s+{PHRASE}")).unwrap_or_else(|e| unreachable!("a fixed pattern: {e}"))
});

static ENTER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(r"(?i)^(?:\w+ly\s+)?(?:enters?|entered|arrives? (?:at|in)|arrived (?:at|in)|comes? into|came into|reach(?:es)?|reached)\s+{PHRASE}"))
        .unwrap_or_else(|e| unreachable!("a fixed pattern: {e}"))
});

static LEAVE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(r"(?i)^(?:\w+ly\s+)?(leaves?|left|exits?|exited|departs?|departed)\s+(for\s+)?{PHRASE}"))
        .unwrap_or_else(|e| unreachable!("a fixed pattern: {e}"))
});

/// What "leaves the X" must end in to be a place left rather than a thing put down
/// ("leaves the letter on the table" moves nobody).
const PLACES: &[&str] = &[
    "room", "hall", "house", "tavern", "inn", "cellar", "kitchen", "tower", "lighthouse", "gallery", "deck", "ship", "boat", "jetty",
    "harbour", "harbor", "office", "shop", "church", "chapel", "library", "camp", "village", "town", "city", "castle", "keep", "court",
    "courtyard", "yard", "garden", "cave", "forest", "woods", "scene", "building", "bar", "stage", "temple", "station", "study",
    "chamber", "hut", "cabin", "bridge", "dock", "docks", "pier", "market", "square", "street", "alley", "stair", "stairs", "attic",
];

static DRESS: LazyLock<Regex> = LazyLock::new(|| {
    let verbs = r"puts? on|pulls? on|pulled on|slips? into|slipped into|changes? into|changed into|dons?|donned|shrugs? (?:on|into)|shrugged (?:on|into)|wraps? (?:herself|himself|themselves|myself) in|wrapped (?:herself|himself|themselves|myself) in|buttons? up|buttoned up";
    Regex::new(&format!(r"(?i)^(?:\w+ly\s+)?(?:{verbs})\s+{PHRASE}")).unwrap_or_else(|e| unreachable!("a fixed pattern: {e}"))
});

static UNDRESS: LazyLock<Regex> = LazyLock::new(|| {
    let verbs = r"takes? off|took off|removes?|removed|sheds?|shrugs? off|shrugged off|peels? off|peeled off|pulls? off|pulled off";
    Regex::new(&format!(r"(?i)^(?:\w+ly\s+)?(?:{verbs})\s+{PHRASE}")).unwrap_or_else(|e| unreachable!("a fixed pattern: {e}"))
});

/// Quoted speech, in straight or curly quotes.
static SPEECH: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#""[^"]*"|“[^”]*”"#).unwrap_or_else(|e| unreachable!("a fixed pattern: {e}")));

/// What `prose`, written for the character `name`, implies about its state.
pub fn infer_delta(prose: &str, name: &str) -> CharacterState {
    let mut delta = CharacterState::default();
    let narration = SPEECH.replace_all(prose, ".");
    let first = name.split_whitespace().next().unwrap_or(name);
    let subjects: Vec<String> = [name, first, "I", "he", "she", "they"].iter().map(|s| s.to_lowercase()).collect();
    for sentence in narration.split(['.', '!', '?', ';', '\n']) {
        // Each clause whose subject is the character; "She laughs and steps onto the
        // deck" acts twice, so clauses after "and" keep the sentence's subject.
        let sentence = sentence.trim();
        let lower = sentence.to_lowercase();
        let Some(subject) = subjects.iter().filter(|s| starts_with_word(&lower, s)).max_by_key(|s| s.len()) else { continue };
        let rest = sentence[subject.len()..].trim_start();
        for clause in std::iter::once(rest).chain(rest.match_indices(" and ").map(|(i, _)| rest[i + 5..].trim_start())) {
            read_clause(clause, &mut delta);
        }
    }
    delta
}

fn starts_with_word(text: &str, word: &str) -> bool {
    text.starts_with(word) && text[word.len()..].chars().next().is_none_or(|c| !c.is_alphanumeric())
}

fn read_clause(clause: &str, delta: &mut CharacterState) {
    let phrase = |caps: &regex::Captures<'_>, group: usize| caps.get(group).map(|m| m.as_str().trim().to_string());
    if let Some(place) = MOVE.captures(clause).and_then(|c| phrase(&c, 1)) {
        delta.location = Some(place);
    } else if let Some(place) = ENTER.captures(clause).and_then(|c| phrase(&c, 1)) {
        delta.location = Some(place);
    } else if let Some(caps) = LEAVE.captures(clause)
        && let Some(place) = phrase(&caps, 3)
    {
        let verb = caps.get(1).map_or("", |m| m.as_str()).to_ascii_lowercase();
        let head = place.rsplit(' ').next().unwrap_or("").to_ascii_lowercase();
        if caps.get(2).is_some() {
            // "leaves for the jetty" names where they go.
            delta.location = Some(place);
        } else if !verb.starts_with("le") || PLACES.contains(&head.as_str()) {
            // "exits the boathouse", "leaves the lamp room": where they are not any more.
            delta.location = Some(format!("outside {place}"));
        }
    }
    if let Some(item) = DRESS.captures(clause).and_then(|c| phrase(&c, 1)) {
        delta.clothing = Some(without_owner(&item).to_string());
    } else if let Some(item) = UNDRESS.captures(clause).and_then(|c| phrase(&c, 1)) {
        delta.clothing = Some(format!("without {}", without_owner(&item)));
    }
}

/// "her oilskin coat" → "oilskin coat": the state is the character's own anyway.
fn without_owner(item: &str) -> &str {
    for owner in ["her ", "his ", "their ", "my ", "our ", "its ", "a ", "an ", "the "] {
        if item.len() > owner.len() && item[..owner.len()].eq_ignore_ascii_case(owner) {
            return &item[owner.len()..];
        }
    }
    item
}

#[cfg(test)]
mod tests {
    use super::*;

    fn infer(prose: &str) -> (Option<String>, Option<String>) {
        let d = infer_delta(prose, "Wren Talloway");
        (d.location, d.clothing)
    }

    #[test]
    fn moving_entering_and_leaving_set_the_location() {
        assert_eq!(infer("Wren reads the letter twice. She steps out onto the gallery.").0.as_deref(), Some("the gallery"));
        assert_eq!(infer("Wren hurries down to the jetty, lantern swinging.").0.as_deref(), Some("the jetty"));
        assert_eq!(infer("I slowly make my way to the lamp room and listen.").0.as_deref(), Some("the lamp room"));
        assert_eq!(infer("Wren enters the boathouse.").0.as_deref(), Some("the boathouse"));
        assert_eq!(infer("She leaves the lamp room without a word.").0.as_deref(), Some("outside the lamp room"));
        assert_eq!(infer("Wren leaves for the harbour office.").0.as_deref(), Some("the harbour office"));
        assert_eq!(infer("She laughs and walks into the storm cellar.").0.as_deref(), Some("the storm cellar"), "a second clause of the same subject");
    }

    #[test]
    fn dressing_sets_the_clothing() {
        assert_eq!(infer("Wren pulls on her oilskin coat and steps into the rain.").1.as_deref(), Some("oilskin coat"));
        assert_eq!(infer("Wren pulls on her oilskin coat and steps into the rain.").0.as_deref(), Some("the rain"));
        assert_eq!(infer("She takes off her wet boots.").1.as_deref(), Some("without wet boots"));
    }

    #[test]
    fn speech_and_other_people_change_nothing() {
        assert_eq!(infer("\"I'll go to the market tomorrow,\" Wren says."), (None, None), "a plan in speech is not a move");
        assert_eq!(infer("Ossian walks to the jetty. Wren watches him go."), (None, None), "another character's move");
        assert_eq!(infer("Wren mumbles something and hurries down the stair."), (None, None), "no destination named");
        assert_eq!(infer("Wrenna steps onto the deck."), (None, None), "a name that only starts like hers");
        assert_eq!(infer("Wren leaves the letter on the table."), (None, None), "a thing put down is not a place left");
        assert_eq!(infer("She exits the boathouse.").0.as_deref(), Some("outside the boathouse"));
    }
}
