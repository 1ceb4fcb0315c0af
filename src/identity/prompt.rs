//! The identity agents' prompts, rendered from `prompts/identity/`.

use super::IdentityError;
use super::records::{RunRecord, VersionRecord};
use super::schema::{Agent, Mode};
use crate::llm::{ChatMessage, ChatRequest};
use crate::prompting::PromptTemplates;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Serialize)]
struct KnowledgeEntry<'a> {
    agent: &'static str,
    title: &'static str,
    narrative: &'a str,
    structured: String,
}

#[derive(Serialize)]
struct Previous<'a> {
    version: u32,
    narrative: &'a str,
    structured: String,
}

fn depth_instruction(mode: Mode) -> &'static str {
    match mode {
        Mode::Fast => "Focus on the essential elements only; keep the narrative to two short paragraphs.",
        Mode::Balanced => "Balance depth with economy; three paragraphs of narrative.",
        Mode::Deep => {
            "Go deep: nuance, contradiction and specific detail; up to four rich paragraphs of narrative."
        }
    }
}

/// The request for one agent call. `feedback` and `previous` are set when the user sent
/// the previous version back.
pub fn build_request(
    run: &RunRecord,
    agent: Agent,
    knowledge: &BTreeMap<u8, &VersionRecord>,
    feedback: Option<&str>,
    previous: Option<&VersionRecord>,
) -> Result<ChatRequest, IdentityError> {
    build_shaped(run, agent, knowledge, feedback, previous, Shape::default())
}

/// How much of the approved checkpoints a prompt carries.
#[derive(Debug, Clone, Copy, Default)]
struct Shape {
    /// The structured outputs as one-line JSON rather than pretty-printed.
    compact: bool,
    /// Each narrative cut to this many tokens at a sentence boundary (`Some(0)`: left out).
    narrative_tokens: Option<u32>,
}

/// [`build_request`] held to `profile`'s context: the prompt, the JSON Schema's text the
/// structured layer appends (`appended` tokens) and the reply's planned cap must fit.
/// When they do not, the approved checkpoints are told more briefly — their JSON on one
/// line, then their narratives cut at a sentence boundary, shorter and shorter, then
/// left out — so the reply keeps its cap (an identity call at 2,048 tokens used to get
/// 64). A context too small even for the bare prompt and half the reply's cap is an
/// error naming the profile and the context it needs, before any call.
#[allow(clippy::too_many_arguments)]
pub fn fit_request(
    run: &RunRecord,
    agent: Agent,
    knowledge: &BTreeMap<u8, &VersionRecord>,
    feedback: Option<&str>,
    previous: Option<&VersionRecord>,
    profile: &crate::llm::ProviderProfile,
    format: &crate::llm::ResponseFormat,
    appended: u32,
) -> Result<ChatRequest, IdentityError> {
    let cap = crate::llm::client::planned_reply_cap(profile, format);
    let max = profile.max_context_tokens;
    let cost = |request: &ChatRequest| crate::llm::tokens::estimate_messages(&request.messages).saturating_add(appended);
    let longest = knowledge.values().map(|v| crate::llm::tokens::estimate(&v.narrative)).max().unwrap_or(0);
    let mut shapes = vec![Shape::default(), Shape { compact: true, narrative_tokens: None }];
    let mut limit = longest;
    while limit > 48 {
        limit /= 2;
        shapes.push(Shape { compact: true, narrative_tokens: Some(limit) });
    }
    shapes.push(Shape { compact: true, narrative_tokens: Some(0) });
    let mut last = None;
    for shape in shapes {
        let request = build_shaped(run, agent, knowledge, feedback, previous, shape)?;
        if cost(&request).saturating_add(cap) <= max {
            return Ok(request);
        }
        last = Some(request);
    }
    // The briefest prompt: sent when half the reply's cap still fits, else refused.
    let request = last.ok_or_else(|| IdentityError::Invalid("no prompt was built".into()))?;
    let least = (cap / 2).max(crate::llm::client::MIN_REPLY_CAP).min(cap);
    let need = cost(&request).saturating_add(least);
    if need > max {
        return Err(IdentityError::Invalid(format!(
            "profile \"{}\" has {max} tokens of context, too few for the {} agent: its prompt needs {} ({appended} of them the \
             JSON Schema) with the approved checkpoints told briefly, and its reply at least {least}, so it needs a context of \
             at least {need} tokens",
            profile.name,
            agent.name(),
            cost(&request)
        )));
    }
    Ok(request)
}

fn build_shaped(
    run: &RunRecord,
    agent: Agent,
    knowledge: &BTreeMap<u8, &VersionRecord>,
    feedback: Option<&str>,
    previous: Option<&VersionRecord>,
    shape: Shape,
) -> Result<ChatRequest, IdentityError> {
    let templates = PromptTemplates::shipped()?;
    let json = |value: &serde_json::Value| {
        if shape.compact { serde_json::to_string(value) } else { serde_json::to_string_pretty(value) }.unwrap_or_default()
    };
    let narratives: Vec<String> = knowledge
        .values()
        .map(|v| match shape.narrative_tokens {
            None => v.narrative.clone(),
            Some(0) => "(left out to fit the context: the structured summary below stands for it)".to_string(),
            Some(tokens) => crate::prompting::budget::cut_to(&v.narrative, tokens)
                .unwrap_or_else(|| crate::llm::structured::clip(&v.narrative, tokens as usize * 3)),
        })
        .collect();
    let knowledge: Vec<KnowledgeEntry<'_>> = knowledge
        .iter()
        .zip(&narratives)
        .filter_map(|((n, v), narrative)| Agent::from_number(*n).map(|a| (a, v, narrative)))
        .map(|(a, v, narrative)| KnowledgeEntry { agent: a.name(), title: a.title(), narrative, structured: json(&v.structured) })
        .collect();
    let storyline = match &run.seed.storyline {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    };
    let context = serde_json::json!({
        "agent": agent.name(),
        "title": agent.title(),
        "mode": run.mode.label(),
        "depth": depth_instruction(run.mode),
        "seed": run.seed,
        "storyline": storyline,
        "knowledge": knowledge,
        "feedback": feedback,
        "previous": previous.map(|v| Previous {
            version: v.version,
            narrative: &v.narrative,
            structured: serde_json::to_string_pretty(&v.structured).unwrap_or_default(),
        }),
    });
    let system = templates.render("identity/system.j2", &context)?;
    let user = templates.render(&format!("identity/{}.j2", agent.name()), &context)?;
    let mut request = ChatRequest::new(String::new(), vec![ChatMessage::system(system), ChatMessage::user(user)]);
    request.stream = true;
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::records::RunStatus;
    use crate::identity::schema::CharacterSeed;

    fn version(number: u8, subject: &str) -> VersionRecord {
        let narrative: String = (1..=60).map(|n| format!("Mira's {subject} shows in moment {n} of the story. ")).collect();
        let structured = serde_json::json!({ "notes": (1..=30).map(|n| format!("{subject} detail {n}")).collect::<Vec<_>>() });
        VersionRecord {
            number,
            version: 1,
            narrative,
            structured,
            attempts: serde_json::Value::Null,
            prompt: serde_json::Value::Null,
            feedback: None,
            based_on: BTreeMap::new(),
            usage: Default::default(),
            wall_ms: 0,
            started_at: String::new(),
            created_at: String::new(),
        }
    }

    /// Wave 2 at 2,048 tokens: the approved checkpoints are told briefly enough that the
    /// reply keeps its planned cap; a context too small even then is refused by name.
    #[test]
    fn an_agent_prompt_is_fitted_so_the_reply_keeps_its_cap() {
        let run = RunRecord {
            id: "r".into(),
            name: "Mira".into(),
            mode: Mode::Balanced,
            seed: CharacterSeed {
                name: "Mira".into(),
                role: "smuggler".into(),
                concept: "a reluctant guide".into(),
                storyline: serde_json::Value::Null,
                other_characters: Vec::new(),
            },
            entry_input: None,
            profile: None,
            auto_approve: true,
            status: RunStatus::InProgress,
            regenerations: 0,
            created_at: String::new(),
            completed_at: None,
            error: None,
        };
        let (one, two) = (version(1, "temper"), version(2, "past"));
        let knowledge: BTreeMap<u8, &VersionRecord> = [(1u8, &one), (2u8, &two)].into_iter().collect();
        let agent = Agent::VoiceDialogue;
        let schema = agent.output_schema();
        let options = crate::llm::structured::StructuredOptions::default();
        let appended = crate::llm::tokens::estimate(&format!("\n\n{}", crate::llm::structured::schema_instruction(&schema, &options).unwrap()));
        let format = crate::llm::ResponseFormat::JsonSchema { name: String::new(), schema };
        let profile = crate::llm::ProviderProfile { name: "small".into(), max_context_tokens: 2048, ..Default::default() };
        let cap = crate::llm::client::planned_reply_cap(&profile, &format);
        let whole = build_request(&run, agent, &knowledge, None, None).unwrap();
        assert!(crate::llm::tokens::estimate_messages(&whole.messages) + appended + cap > 2048, "the test needs a prompt too large");
        let fitted = fit_request(&run, agent, &knowledge, None, None, &profile, &format, appended).unwrap();
        let sent = crate::llm::tokens::estimate_messages(&fitted.messages) + appended;
        assert!(sent + cap <= 2048, "{sent} + {cap}");
        let text: String = fitted.messages.iter().map(|m| m.content.as_str()).collect();
        assert!(text.contains("temper detail 30") && text.contains("past detail 30"), "the structured outputs stay: {text}");
        assert!(text.contains("Mira's temper shows in moment 1 of the story."), "{text}");

        let tiny = crate::llm::ProviderProfile { name: "tiny".into(), max_context_tokens: 700, ..Default::default() };
        let error = fit_request(&run, agent, &knowledge, None, None, &tiny, &format, appended).unwrap_err().to_string();
        assert!(error.contains("profile \"tiny\" has 700 tokens of context") && error.contains("needs a context of at least"), "{error}");
    }
}
