//! An identity profile exported as a Character Card: the text the character module
//! reads from it (`character::profile`), and the whole profile under
//! `extensions.lorekeeper.profile`, so a card exported and imported again loses nothing.

use super::format::card::{CardSpec, CharacterCard};
use crate::character::profile::profile_text;
use serde_json::{Map, Value};

/// Build a card from `profile`; `fallback_name` is used when the profile has no name.
pub fn card_from_profile(profile: &Value, fallback_name: &str) -> CharacterCard {
    let text = profile_text(profile, fallback_name);
    let mut card = CharacterCard {
        name: text.name,
        spec: CardSpec::V3,
        description: text.description,
        personality: text.personality,
        scenario: text.scenario,
        first_mes: text.first_mes,
        mes_example: text.mes_example,
        tags: text.tags,
        creator: "Lorekeeper".into(),
        character_version: text.character_version,
        creator_notes: text.creator_notes,
        creation_date: text.creation_date,
        modification_date: Some(chrono::Utc::now().timestamp()),
        ..Default::default()
    };
    let mut ours = Map::new();
    ours.insert("profile".into(), profile.clone());
    card.extensions.insert("lorekeeper".into(), Value::Object(ours));
    card
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::character::profile::sample_profile;
    use crate::interop::format::card::{decode_card, encode_card};

    #[test]
    fn the_card_carries_the_profiles_text_and_the_whole_profile() {
        let profile = sample_profile();
        let card = card_from_profile(&profile, "fallback");
        assert_eq!(card.name, "Mira Vell");
        assert!(card.description.starts_with("A mapmaker who charts what others forget."));
        assert!(card.personality.contains("Core traits: meticulous, wry, restless, loyal"));
        assert_eq!(card.creation_date, Some(1_767_323_045));
        assert_eq!(card.creator, "Lorekeeper");
        assert_eq!(card.extensions["lorekeeper"]["profile"], profile);
        for spec in [CardSpec::V2, CardSpec::V3] {
            let (back, _) = decode_card(encode_card(&card, spec)).unwrap();
            assert_eq!(back.extensions["lorekeeper"]["profile"], profile);
        }
    }

    #[test]
    fn an_empty_profile_still_exports() {
        let card = card_from_profile(&serde_json::json!({}), "Nameless");
        assert_eq!(card.name, "Nameless");
        assert!(card.description.is_empty());
    }
}
