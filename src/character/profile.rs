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
//!
//! The agents' narratives (kept beside the profile under `narratives`, by agent name)
//! are the prose a reader meets first; the structured fields follow as a compact sheet,
//! one labelled line each, lists joined so they still read as lists.

use serde_json::{Value, json};

/// The card text a profile maps to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProfileText {
    pub name: String,
    pub description: String,
    pub personality: String,
    pub scenario: String,
    /// A greeting in the character's own voice, set in a scene they appear in, built
    /// from their material (empty when the profile has none of it).
    pub first_mes: String,
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
        first_mes: greeting(profile),
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

/// Append `label: text` as its own line (or paragraph) when there is text.
fn para(out: &mut Vec<String>, label: &str, body: Option<String>) {
    if let Some(body) = body.filter(|b| !b.trim().is_empty()) {
        out.push(if label.is_empty() { body } else { format!("{label}: {body}") });
    }
}

fn joined(items: Vec<String>, sep: &str) -> Option<String> {
    if items.is_empty() { None } else { Some(items.join(sep)) }
}

/// The narrative an agent wrote for this character, if the profile keeps it.
fn narrative(p: &Value, agent: &str) -> Option<String> {
    text(p, &["narratives", agent])
}

/// Prose paragraphs first, then the labelled lines, a blank line between the two.
fn sections(prose: Vec<String>, lines: Vec<String>) -> String {
    let mut blocks = prose;
    if !lines.is_empty() {
        blocks.push(lines.join("\n"));
    }
    blocks.join("\n\n")
}

fn description(p: &Value) -> String {
    let mut prose = Vec::new();
    para(&mut prose, "", text(p, &["overview", "one_line"]));
    for agent in ["personality", "physical_description", "backstory_motivation"] {
        para(&mut prose, "", narrative(p, agent));
    }
    let mut out = Vec::new();
    para(&mut out, "Role", text(p, &["overview", "role"]));
    para(&mut out, "Look", text(p, &["visual", "style_notes"]));
    para(&mut out, "Bearing", text(p, &["physical_presence", "body_language"]));
    para(&mut out, "Movement", text(p, &["physical_presence", "movement_style"]));
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
    sections(prose, out)
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
    // How the voice carries the personality, after the summary it explains.
    let mut blocks = vec![out.join("\n")];
    blocks.extend(narrative(p, "voice_dialogue"));
    blocks.retain(|b| !b.is_empty());
    blocks.join("\n\n")
}

fn scenario(p: &Value) -> String {
    let mut prose = Vec::new();
    para(&mut prose, "", narrative(p, "story_arc"));
    para(&mut prose, "", narrative(p, "relationships"));
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
    para(&mut out, "Arc", joined(beats, "; "));
    para(&mut out, "Appears in", joined(list(p, &["narrative_arc", "scene_presence"]), "; "));
    let relationships: Vec<String> = objects(p, &["relationships"])
        .into_iter()
        .filter_map(|r| {
            let other = text(r, &["character"])?;
            let kind = text(r, &["type"]).map(|t| format!(" ({t})")).unwrap_or_default();
            let dynamic = text(r, &["dynamic"]).map(|d| format!(": {d}")).unwrap_or_default();
            let evolution = text(r, &["evolution"]).map(|e| format!("; over the story, {e}")).unwrap_or_default();
            Some(format!("- {other}{kind}{dynamic}{evolution}"))
        })
        .collect();
    if !relationships.is_empty() {
        out.push(format!("Relationships:\n{}", relationships.join("\n")));
    }
    sections(prose, out)
}

/// The first sentence of `text` (up to its first full stop, question or exclamation mark
/// followed by a space), when it is short enough to open a scene.
fn first_sentence(text: &str) -> Option<String> {
    let text = text.trim();
    let end = text
        .char_indices()
        .find(|(i, c)| matches!(c, '.' | '!' | '?') && text[i + c.len_utf8()..].starts_with(char::is_whitespace))
        .map_or(text.len(), |(i, c)| i + c.len_utf8());
    let sentence = text[..end].trim();
    (!sentence.is_empty() && sentence.chars().count() <= 280).then(|| sentence.to_string())
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// A greeting from the character's own material: a scene they appear in, how they carry
/// themselves there (the physical narrative's opening, else their bearing), a habit of
/// theirs as `{{user}}` arrives, and a line of their own (the confident sample, else the
/// first one they have).
fn greeting(p: &Value) -> String {
    let name = text(p, &["name"]).or_else(|| text(p, &["overview", "name"])).unwrap_or_else(|| "{{char}}".into());
    let first_name = name.split_whitespace().next().unwrap_or(&name).to_string();
    let mut narration = Vec::new();
    if let Some(scene) = list(p, &["narrative_arc", "scene_presence"]).into_iter().next() {
        narration.push(format!("{}.", capitalised(scene.trim_end_matches('.'))));
    }
    let presence = narrative(p, "physical_description")
        .and_then(|n| first_sentence(&n))
        .or_else(|| text(p, &["physical_presence", "body_language"]).map(|b| format!("{name} waits, {}.", b.trim_end_matches('.'))));
    narration.extend(presence);
    match list(p, &["physical_presence", "mannerisms"]).into_iter().next() {
        Some(habit) => narration.push(format!("{first_name} {} and looks up as {{{{user}}}} comes near.", habit.trim_end_matches('.'))),
        None if !narration.is_empty() => narration.push(format!("{first_name} looks up as {{{{user}}}} comes near.")),
        None => {}
    }
    let samples = get(p, &["voice", "sample_dialogue"]);
    let line = ["confident", "sarcastic", "vulnerable", "stressed"]
        .iter()
        .find_map(|state| samples.and_then(|s| text(s, &[*state])))
        .or_else(|| match samples {
            Some(Value::Object(all)) => all.values().filter_map(Value::as_str).map(str::trim).find(|l| !l.is_empty()).map(String::from),
            _ => None,
        });
    let mut out = Vec::new();
    if !narration.is_empty() {
        out.push(format!("*{}*", narration.join(" ")));
    }
    if let Some(line) = line {
        let line = line.trim_matches('"');
        out.push(format!("\"{line}\""));
    }
    out.join("\n\n")
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

    /// What a SillyTavern user reads: the narratives, every section with its own
    /// separators, and a greeting of the character's own.
    #[test]
    fn a_developed_profile_reads_well_as_a_card() {
        let mut profile = sample_profile();
        profile["visual"]["style_notes"] = json!("ink-blue coat, lamplit archive, sepia palette");
        profile["narratives"] = json!({
            "personality": "Mira Vell measures everything, herself most of all.",
            "physical_description": "Mira Vell stands at the chart table as if it were a ship's wheel. Her hands never rest.",
            "backstory_motivation": "The flood took the town she had mapped twice.",
            "voice_dialogue": "She talks in bearings and distances.",
            "story_arc": "Mira guides the expedition she swore she would never join.",
            "relationships": "Mira keeps people at the length of a good map."
        });
        let text = profile_text(&profile, "fallback");
        let d = &text.description;
        assert!(d.starts_with("A mapmaker who charts what others forget.\n\nMira Vell measures everything"), "{d}");
        for want in ["The flood took the town", "Her hands never rest.", "Look: ink-blue coat", "Bearing: leans over tables\nMovement: quick and precise"] {
            assert!(d.contains(want), "missing {want:?} in {d}");
        }
        assert!(text.personality.ends_with("\n\nShe talks in bearings and distances."), "{}", text.personality);
        let sc = &text.scenario;
        for want in ["Mira guides the expedition", "Mira keeps people at the length", "Arc: Act 1: refuses the journey", "Appears in: the archive", "- Tomas (rival): trades barbs and maps; over the story, grudging trust"] {
            assert!(sc.contains(want), "missing {want:?} in {sc}");
        }
        assert_eq!(
            text.first_mes,
            "*The archive. Mira Vell stands at the chart table as if it were a ship's wheel. Mira taps her compass and looks up as {{user}} comes near.*\n\n\"North is wherever I say, {{user}}.\""
        );
    }

    /// Without narratives the greeting is still the character's own: the scene, their
    /// bearing, a habit, a line.
    #[test]
    fn the_greeting_is_built_from_the_structured_material_alone() {
        let mut profile = sample_profile();
        profile["narrative_arc"]["transformation_beats"] = json!([{"act": 1, "beat": "refuses"}, {"act": 2, "beat": "relents"}]);
        let text = profile_text(&profile, "fallback");
        assert_eq!(
            text.first_mes,
            "*The archive. Mira Vell waits, leans over tables. Mira taps her compass and looks up as {{user}} comes near.*\n\n\"North is wherever I say, {{user}}.\""
        );
        assert!(text.scenario.contains("Arc: Act 1: refuses; Act 2: relents"), "{}", text.scenario);
        assert!(!text.description.contains("tables quick"), "{}", text.description);
    }

    #[test]
    fn an_empty_profile_still_reads() {
        let text = profile_text(&json!({}), "Nameless");
        assert_eq!(text.name, "Nameless");
        assert!(text.description.is_empty());
        assert!(text.first_mes.is_empty());
    }
}
