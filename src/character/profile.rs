//! A finished identity profile (the seed's `FinalCharacterProfile`, stored as JSON in
//! `characters.profile_json`) read as the text fields of a character card.
//!
//! The profile is read as loose JSON with the seed's field names, so a missing or
//! oddly shaped section leaves its field empty instead of failing. The fields are what
//! other tools put in a prompt: the chat sheet reads them here, and interop's card
//! export (`interop::profile`) wraps them in a Character Card with the whole profile
//! under `extensions.lorekeeper.profile`, so nothing is lost. Why here and not in
//! interop: the sheet needs the mapping, and a character must not reach up into the
//! file formats.

use serde_json::{Value, json};

/// The card text a profile maps to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProfileText {
    pub name: String,
    pub description: String,
    pub personality: String,
    pub scenario: String,
    pub mes_example: String,
    pub tags: Vec<String>,
    pub creator_notes: String,
    pub character_version: String,
    /// `completed_at` as a Unix time, when it is a valid RFC 3339 time.
    pub creation_date: Option<i64>,
}

/// Read `profile`'s card text; `fallback_name` is used when the profile has no name.
pub fn profile_text(profile: &Value, fallback_name: &str) -> ProfileText {
    let name = text(profile, &["name"])
        .or_else(|| text(profile, &["overview", "name"]))
        .unwrap_or_else(|| fallback_name.to_string());
    let mode = text(profile, &["metadata", "mode"]);
    ProfileText {
        name,
        description: description(profile),
        personality: personality(profile),
        scenario: scenario(profile),
        mes_example: examples(profile),
        tags: [text(profile, &["overview", "role"]), text(profile, &["narrative_arc", "arc_type"])].into_iter().flatten().collect(),
        creator_notes: match mode {
            Some(mode) => format!("Developed with Lorekeeper's character identity pipeline ({mode} mode)."),
            None => "Developed with Lorekeeper's character identity pipeline.".into(),
        },
        character_version: text(profile, &["version"]).unwrap_or_else(|| "1.0".into()),
        creation_date: text(profile, &["completed_at"]).and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok()).map(|t| t.timestamp()),
    }
}

fn get<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(*key))
}

/// Non-empty text at `path` (numbers are written out).
fn text(value: &Value, path: &[&str]) -> Option<String> {
    match get(value, path)? {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The text items of the list at `path`.
fn list(value: &Value, path: &[&str]) -> Vec<String> {
    match get(value, path) {
        Some(Value::Array(items)) => items.iter().filter_map(|i| i.as_str()).map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect(),
        _ => Vec::new(),
    }
}

fn objects<'a>(value: &'a Value, path: &[&str]) -> Vec<&'a Value> {
    match get(value, path) {
        Some(Value::Array(items)) => items.iter().filter(|i| i.is_object()).collect(),
        _ => Vec::new(),
    }
}

/// Append `label: text` as its own paragraph when there is text.
fn para(out: &mut Vec<String>, label: &str, body: Option<String>) {
    if let Some(body) = body.filter(|b| !b.trim().is_empty()) {
        out.push(if label.is_empty() { body } else { format!("{label}: {body}") });
    }
}

fn joined(items: Vec<String>, sep: &str) -> Option<String> {
    if items.is_empty() { None } else { Some(items.join(sep)) }
}

fn description(p: &Value) -> String {
    let mut out = Vec::new();
    para(&mut out, "", text(p, &["overview", "one_line"]));
    para(&mut out, "Role", text(p, &["overview", "role"]));
    let physical = ["body_language", "movement_style"].iter().filter_map(|k| text(p, &["physical_presence", k])).collect::<Vec<_>>();
    para(&mut out, "Presence", joined(physical, " "));
    para(&mut out, "Mannerisms", joined(list(p, &["physical_presence", "mannerisms"]), "; "));
    para(&mut out, "Physical quirks", joined(list(p, &["physical_presence", "physical_quirks"]), "; "));
    let timeline: Vec<String> = objects(p, &["backstory_motivation", "timeline"])
        .into_iter()
        .filter_map(|t| {
            let event = text(t, &["event"])?;
            Some(match text(t, &["age"]) {
                Some(age) => format!("age {age}: {event}"),
                None => event,
            })
        })
        .collect();
    para(&mut out, "History", joined(timeline, "; "));
    let formative: Vec<String> = objects(p, &["backstory_motivation", "formative_experiences"])
        .into_iter()
        .filter_map(|f| {
            let experience = text(f, &["experience"])?;
            Some(match text(f, &["impact"]) {
                Some(impact) => format!("{experience} ({impact})"),
                None => experience,
            })
        })
        .collect();
    para(&mut out, "Formative experiences", joined(formative, "; "));
    para(&mut out, "Wants", text(p, &["backstory_motivation", "goals", "surface"]));
    para(&mut out, "Needs", text(p, &["backstory_motivation", "goals", "deep"]));
    para(&mut out, "Secrets", joined(list(p, &["psychology", "secrets"]), "; "));
    out.join("\n\n")
}

fn personality(p: &Value) -> String {
    let mut out = Vec::new();
    para(&mut out, "Core traits", joined(list(p, &["psychology", "core_traits"]), ", "));
    para(&mut out, "Emotional baseline", text(p, &["psychology", "emotional_baseline"]));
    para(&mut out, "Fears", joined(list(p, &["psychology", "fears"]), "; "));
    para(&mut out, "Triggers", joined(list(p, &["psychology", "triggers"]), "; "));
    let conflicts: Vec<String> = objects(p, &["backstory_motivation", "internal_conflicts"])
        .into_iter()
        .filter_map(|c| {
            let conflict = text(c, &["conflict"])?;
            Some(match text(c, &["description"]) {
                Some(d) => format!("{conflict}: {d}"),
                None => conflict,
            })
        })
        .collect();
    para(&mut out, "Inner conflicts", joined(conflicts, "; "));
    para(&mut out, "Speech", text(p, &["voice", "speech_pattern"]));
    para(&mut out, "Vocabulary", text(p, &["voice", "vocabulary"]));
    para(&mut out, "Verbal tics", joined(list(p, &["voice", "verbal_tics"]), "; "));
    out.join("\n")
}

fn scenario(p: &Value) -> String {
    let mut out = Vec::new();
    let role = text(p, &["narrative_arc", "role"]);
    let arc = text(p, &["narrative_arc", "arc_type"]);
    para(&mut out, "Story role", match (role, arc) {
        (Some(r), Some(a)) => Some(format!("{r}, on a {a} arc")),
        (r, a) => r.or(a),
    });
    let beats: Vec<String> = objects(p, &["narrative_arc", "transformation_beats"])
        .into_iter()
        .filter_map(|b| {
            let beat = text(b, &["beat"])?;
            Some(match text(b, &["act"]) {
                Some(act) => format!("Act {act}: {beat}"),
                None => beat,
            })
        })
        .collect();
    para(&mut out, "Arc", joined(beats, " "));
    let relationships: Vec<String> = objects(p, &["relationships"])
        .into_iter()
        .filter_map(|r| {
            let other = text(r, &["character"])?;
            let kind = text(r, &["type"]).map(|t| format!(" ({t})")).unwrap_or_default();
            let dynamic = text(r, &["dynamic"]).map(|d| format!(": {d}")).unwrap_or_default();
            Some(format!("{other}{kind}{dynamic}"))
        })
        .collect();
    para(&mut out, "Relationships", joined(relationships, "; "));
    out.join("\n")
}

/// The voice samples as example dialogue, one `<START>` block per emotional state.
fn examples(p: &Value) -> String {
    let Some(Value::Object(samples)) = get(p, &["voice", "sample_dialogue"]) else { return String::new() };
    samples
        .iter()
        .filter_map(|(state, line)| {
            let line = line.as_str()?.trim();
            (!line.is_empty()).then(|| format!("<START>\n{{{{user}}}}: ({state})\n{{{{char}}}}: {line}"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A profile with every section, for tests and the demo.
pub fn sample_profile() -> Value {
    json!({
        "character_id": "c-1", "name": "Mira Vell", "version": "1.0", "completed_at": "2026-01-02T03:04:05Z",
        "overview": {"name": "Mira Vell", "role": "cartographer", "importance": 4, "one_line": "A mapmaker who charts what others forget."},
        "visual": {"images": [], "style_notes": ""},
        "psychology": {"core_traits": ["meticulous", "wry", "restless", "loyal"], "fears": ["being forgotten", "open water"],
            "secrets": ["she burned her first atlas"], "emotional_baseline": "guarded curiosity",
            "triggers": ["careless ink", "maps of her home", "being rushed"]},
        "physical_presence": {"mannerisms": ["taps her compass"], "body_language": "leans over tables", "movement_style": "quick and precise",
            "physical_quirks": ["ink-stained fingers"]},
        "voice": {"speech_pattern": "clipped", "verbal_tics": ["\"as the crow flies\""], "vocabulary": "technical",
            "sample_dialogue": {"confident": "North is wherever I say, {{user}}.", "vulnerable": "I never drew my home.",
            "stressed": "Give me the chart. Now.", "sarcastic": "Oh, another shortcut."}},
        "backstory_motivation": {"timeline": [{"age": 9, "event": "finds a broken astrolabe"}],
            "formative_experiences": [{"experience": "the flood", "impact": "distrusts rivers"}],
            "goals": {"surface": "finish the atlas", "deep": "be remembered"},
            "internal_conflicts": [{"conflict": "duty vs home", "description": "maps her home only in secret"}]},
        "narrative_arc": {"role": "guide", "arc_type": "growth", "transformation_beats": [{"act": 1, "beat": "refuses the journey"}],
            "scene_presence": ["the archive"]},
        "relationships": [{"character": "Tomas", "type": "rival", "dynamic": "trades barbs and maps", "evolution": "grudging trust"}],
        "metadata": {"mode": "balanced", "development_time_minutes": 12, "total_checkpoints": 7, "regenerations": 1, "total_tokens": 10000}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_lands_somewhere() {
        let text = profile_text(&sample_profile(), "fallback");
        assert_eq!(text.name, "Mira Vell");
        assert!(text.description.starts_with("A mapmaker who charts what others forget."));
        assert!(text.description.contains("Secrets: she burned her first atlas"));
        assert!(text.personality.contains("Core traits: meticulous, wry, restless, loyal"));
        assert!(text.personality.contains("Speech: clipped"));
        assert!(text.scenario.contains("Tomas (rival): trades barbs and maps"));
        assert!(text.mes_example.contains("{{char}}: North is wherever I say, {{user}}."));
        assert_eq!(text.creation_date, Some(1_767_323_045));
        assert_eq!(text.tags, ["cartographer", "growth"]);
    }

    #[test]
    fn an_empty_profile_still_reads() {
        let text = profile_text(&json!({}), "Nameless");
        assert_eq!(text.name, "Nameless");
        assert!(text.description.is_empty());
    }
}
