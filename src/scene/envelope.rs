//! The context envelope of one agent call: candidates for every SPEC §3 section,
//! fitted into the budgets by [`prompting::enforce`], then rendered by the templates
//! in `prompts/scene/`. The ledger of the fit travels with the round.
//!
//! Where each kind of context goes:
//! - history: the scene's messages, this round's included, newest kept first;
//! - summaries: the scene's running summary and earlier scenes' summaries;
//! - lore: entries matched in recent text (see [`match_lore`]);
//! - memories: empty until the memory module offers witness-scoped recall;
//! - notes: world / campaign / arc / scene notes, persona, trackers and facts;
//! - director guidance: the Director's words for the acting character;
//! - character guidance: character sheets and their current states.

use super::model::{CastMember, STATE_FIELDS, SceneMessage, SceneView};
use super::records::SceneNotes;
use crate::llm::tokens::estimate;
use crate::lorebook::LoreEntry;
use crate::prompting::{BudgetItem, BudgetLedger, BudgetPlan, PromptTemplates, Section, TemplateError, enforce};
use serde::Serialize;
use std::collections::BTreeMap;

/// Which agent the envelope is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentKind {
    /// Director pass 1: plans the round.
    Director,
    /// Director pass 2: reconciles what the characters did.
    Reconcile,
    Character,
}

impl AgentKind {
    pub fn template(self) -> &'static str {
        match self {
            AgentKind::Director => "scene/director.j2",
            AgentKind::Reconcile => "scene/reconcile.j2",
            AgentKind::Character => "scene/character.j2",
        }
    }
}

/// What one call sees, before budgets.
pub struct EnvelopeInput<'a> {
    pub agent: AgentKind,
    pub view: &'a SceneView,
    pub notes: &'a SceneNotes,
    /// Stored messages, oldest first, then this round's so far.
    pub history: &'a [SceneMessage],
    pub lore: &'a [LoreEntry],
    /// The character this call speaks for ([`AgentKind::Character`] only).
    pub character: Option<&'a CastMember>,
    /// The Director's guidance for this call, most important first.
    pub director_guidance: Vec<String>,
    /// Messages scanned for lore keys (the most recent ones).
    pub lore_scan_depth: usize,
}

/// A budgeted envelope: the items kept per section and the ledger.
#[derive(Debug, Clone, Serialize)]
pub struct Envelope {
    pub kept: BTreeMap<Section, Vec<BudgetItem>>,
    pub ledger: BudgetLedger,
}

fn item(id: impl Into<String>, text: String, value: f64) -> BudgetItem {
    BudgetItem { id: id.into(), tokens: estimate(&text), text, value }
}

/// Gather every candidate and fit it into `max_context_tokens` by `plan`.
pub fn assemble(plan: &BudgetPlan, max_context_tokens: u32, input: &EnvelopeInput<'_>) -> Envelope {
    fit(plan, max_context_tokens, &candidates(input))
}

/// Fit gathered candidates into the budgets. Kept apart from [`candidates`] so the
/// workbench can re-fit the same candidates on every slider move without a store read.
pub fn fit(plan: &BudgetPlan, max_context_tokens: u32, candidates: &BTreeMap<Section, Vec<BudgetItem>>) -> Envelope {
    let (kept, ledger) = enforce(plan, max_context_tokens, candidates);
    Envelope { kept, ledger }
}

/// Every candidate item of every section, before budgets.
pub fn candidates(input: &EnvelopeInput<'_>) -> BTreeMap<Section, Vec<BudgetItem>> {
    let mut candidates: BTreeMap<Section, Vec<BudgetItem>> = BTreeMap::new();

    let history = input
        .history
        .iter()
        .map(|m| item(format!("message {}", m.number), format!("{}: {}", m.speaker, m.content), 0.0))
        .collect();
    candidates.insert(Section::History, history);

    let mut summaries: Vec<BudgetItem> = input
        .notes
        .earlier_scenes
        .iter()
        .enumerate()
        .map(|(i, (name, summary))| item(format!("scene summary {name}"), format!("Earlier scene \"{name}\": {summary}"), i as f64))
        .collect();
    if !input.notes.scene_summary.trim().is_empty() {
        summaries.push(item("this scene's summary", format!("So far in this scene: {}", input.notes.scene_summary), 1e6));
    }
    candidates.insert(Section::Summaries, summaries);

    let start = input.history.len().saturating_sub(input.lore_scan_depth);
    let scan: String = input.history[start..].iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n");
    let lore = match_lore(input.lore, &scan)
        .into_iter()
        .map(|(entry, why)| {
            let label = if entry.comment.is_empty() { why.clone() } else { entry.comment.clone() };
            // Lower insertion order is injected first in SillyTavern: worth more here.
            let value = entry.priority.unwrap_or(0) as f64 * 1e6 - entry.insertion_order as f64;
            item(format!("lore {label} ({why})"), entry.content.clone(), value)
        })
        .collect();
    candidates.insert(Section::Lore, lore);
    candidates.insert(Section::Memories, Vec::new());

    let mut notes = Vec::new();
    // Narrower scopes are more specific to the moment: worth more.
    for (value, (label, text)) in [
        ("world notes", &input.notes.world),
        ("campaign notes", &input.notes.campaign),
        ("arc notes", &input.notes.arc),
        ("scene notes", &input.notes.scene),
    ]
    .into_iter()
    .enumerate()
    {
        if !text.trim().is_empty() {
            notes.push(item(label, format!("{}: {}", capitalise(label), text.trim()), value as f64));
        }
    }
    if !input.view.description.trim().is_empty() {
        notes.push(item("scene description", format!("Scene: {}", input.view.description.trim()), 5.0));
    }
    if let Some(persona) = &input.view.persona {
        notes.push(item("persona", format!("The user plays {persona}"), 6.0));
    }
    if !input.view.trackers.is_empty() {
        let trackers: Vec<String> = input.view.trackers.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        notes.push(item("trackers", format!("Trackers: {}", trackers.join("; ")), 7.0));
    }
    for (i, fact) in input.view.facts.iter().enumerate() {
        notes.push(item(format!("fact {}", i + 1), format!("Fact: {fact}"), 4.0 + i as f64 / 1000.0));
    }
    candidates.insert(Section::Notes, notes);

    let guidance = input
        .director_guidance
        .iter()
        .filter(|g| !g.trim().is_empty())
        .enumerate()
        .map(|(i, g)| item(format!("guidance {}", i + 1), g.clone(), -(i as f64)))
        .collect();
    candidates.insert(Section::DirectorGuidance, guidance);

    let mut sheets = Vec::new();
    for member in &input.view.cast {
        let own = input.character.is_some_and(|c| c.id == member.id);
        // The Director needs the whole cast; a character needs itself and who is present.
        if input.agent == AgentKind::Character && !own && !member.active {
            continue;
        }
        let mut text = format!("{}{}", member.name, if member.active { " (in the scene)" } else { " (not in the scene)" });
        if own || input.agent != AgentKind::Character {
            text.push('\n');
            text.push_str(&member.summary());
        }
        let state = state_line(member);
        if !state.is_empty() {
            text.push_str(&format!("\nState: {state}"));
        }
        let value = if own { 1e6 } else if member.active { 1.0 } else { 0.0 };
        sheets.push(item(format!("character {}", member.name), text.trim_end().to_string(), value));
    }
    candidates.insert(Section::CharacterGuidance, sheets);
    candidates
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

fn state_line(member: &CastMember) -> String {
    STATE_FIELDS
        .iter()
        .filter_map(|f| member.state.get(f).map(|v| format!("{f}: {v}")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Lore entries that fire on `scan`, with why. A stand-in until
/// `crate::lorebook::activation` lands: constant entries, and plain keys found as
/// substrings (case-insensitive unless the entry says otherwise, whole words when it
/// asks). Regex keys, secondary keys, recursion, probability, groups and timed effects
/// are that module's job; entries relying on them do not fire here.
pub fn match_lore<'e>(entries: &'e [LoreEntry], scan: &str) -> Vec<(&'e LoreEntry, String)> {
    let lower = scan.to_lowercase();
    let mut out = Vec::new();
    for entry in entries.iter().filter(|e| e.enabled) {
        if entry.constant {
            out.push((entry, "constant".to_string()));
            continue;
        }
        let case_sensitive = entry.case_sensitive.unwrap_or(false);
        let whole = entry.match_whole_words.unwrap_or(false);
        let hit = entry.keys.iter().filter(|k| !k.trim().is_empty() && !is_regex_key(k) && !entry.use_regex).find(|key| {
            let (hay, needle) = if case_sensitive { (scan, key.to_string()) } else { (lower.as_str(), key.to_lowercase()) };
            contains(hay, needle.trim(), whole)
        });
        if let Some(key) = hit {
            out.push((entry, format!("key {key:?}")));
        }
    }
    out
}

fn is_regex_key(key: &str) -> bool {
    key.len() > 2 && key.starts_with('/') && key[1..].contains('/')
}

fn contains(hay: &str, needle: &str, whole_words: bool) -> bool {
    if !whole_words {
        return hay.contains(needle);
    }
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    hay.match_indices(needle).any(|(at, _)| !word(hay[..at].chars().next_back()) && !word(hay[at + needle.len()..].chars().next()))
}

/// The instruction ending Director pass 1 (`input` is the user's message, `None` to
/// continue). Shared with the workbench preview so it shows the words a round sends.
pub fn director_turn(round: u32, input: Option<&str>) -> String {
    match input {
        Some(text) => format!("Round {round}. The user says: {}", text.trim()),
        None => format!("Round {round}. The user asks the scene to continue without a new message."),
    }
}

/// The instruction ending Director pass 2.
pub fn reconcile_turn(round: u32) -> String {
    format!("Round {round} has been played. Reconcile the state of the scene after it.")
}

/// The instruction ending a character's call.
pub fn character_turn(name: &str) -> String {
    format!("It is {name}'s turn. Write what {name} says and does now.")
}

/// The rendered prompt of one call.
#[derive(Debug, Clone, Serialize)]
pub struct RenderedPrompt {
    pub system: String,
    pub user: String,
}

/// Render the kept sections with the agent's template. `turn` is the instruction for
/// this call (the user's input, the character's cue, the reconciliation request).
pub fn render(
    templates: &PromptTemplates,
    agent: AgentKind,
    envelope: &Envelope,
    character: Option<&CastMember>,
    turn: &str,
) -> Result<RenderedPrompt, TemplateError> {
    let text = |section: Section| -> Vec<String> {
        envelope.kept.get(&section).map(|items| items.iter().map(|i| i.text.clone()).collect()).unwrap_or_default()
    };
    let context = serde_json::json!({
        "character": character.map(|c| c.name.clone()),
        "history": text(Section::History),
        "summaries": text(Section::Summaries),
        "lore": text(Section::Lore),
        "memories": text(Section::Memories),
        "notes": text(Section::Notes),
        "director_guidance": text(Section::DirectorGuidance),
        "characters": text(Section::CharacterGuidance),
        "state_fields": STATE_FIELDS,
        "turn": turn,
    });
    Ok(RenderedPrompt { system: templates.render(agent.template(), &context)?, user: turn.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(keys: &[&str], content: &str) -> LoreEntry {
        LoreEntry { keys: keys.iter().map(|k| k.to_string()).collect(), content: content.into(), enabled: true, ..Default::default() }
    }

    #[test]
    fn lore_matches_plain_keys_constants_and_whole_words() {
        let mut constant = entry(&[], "always");
        constant.constant = true;
        let mut whole = entry(&["ash"], "ash tree");
        whole.match_whole_words = Some(true);
        let mut cased = entry(&["Tower"], "tower");
        cased.case_sensitive = Some(true);
        let mut disabled = entry(&["lantern"], "off");
        disabled.enabled = false;
        let entries = vec![constant, whole, cased, entry(&["LANTERN"], "lantern"), disabled, entry(&["/lan.ern/i"], "regex")];
        let fired = |scan: &str| match_lore(&entries, scan).into_iter().map(|(e, _)| e.content.as_str()).collect::<Vec<_>>();
        assert_eq!(fired("She lifts the lantern, dashing to the tower."), vec!["always", "lantern"]);
        assert_eq!(fired("Ash falls near the Tower"), vec!["always", "ash tree", "tower"]);
    }

    #[test]
    fn whole_word_search_checks_every_occurrence() {
        assert!(contains("crashing ash", "ash", true));
        assert!(!contains("crashing", "ash", true));
        assert!(contains("crashing", "ash", false));
    }
}
