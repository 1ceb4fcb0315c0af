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
    let templates = PromptTemplates::shipped()?;
    let knowledge: Vec<KnowledgeEntry<'_>> = knowledge
        .iter()
        .filter_map(|(n, v)| Agent::from_number(*n).map(|a| (a, v)))
        .map(|(a, v)| KnowledgeEntry {
            agent: a.name(),
            title: a.title(),
            narrative: &v.narrative,
            structured: serde_json::to_string_pretty(&v.structured).unwrap_or_default(),
        })
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
