//! Witness-scoped memories for the characters of a round, and the round's messages
//! turned into memories.
//!
//! A character recalls only what it witnessed (or what is common knowledge): every
//! scene message becomes a memory turn whose witnesses are the characters present when
//! it was said, and each character's search filters on its own name. Nothing is
//! written here: the round close stores the turns and the injection records in its one
//! transaction, so a discarded round leaves no memory behind.
//!
//! The memory bank wants the embedding model; without it (no model under `models/`,
//! a model that fails to load) recall falls back to keyword search and the round
//! says so in its ledger, rather than failing.

use super::model::SceneMessage;
use crate::context::Context;
use crate::memory::{MemoryBank, MemoryError, MemoryKind, PreparedMemories, NewMemory, RetrievalHit, Scope, ScopeKind, SearchFilter, SearchMode, SearchRequest};
use std::sync::Arc;

/// Recall for one round: the bank (if it opened) and how it searches.
pub struct Recall {
    bank: Option<Arc<MemoryBank>>,
    mode: SearchMode,
    /// Why recall is degraded, if it is; copied into every character call's ledger.
    pub notes: Vec<String>,
}

/// What one character's call was given.
#[derive(Debug, Clone)]
pub struct Recalled {
    pub query: String,
    pub hits: Vec<RetrievalHit>,
    pub notes: Vec<String>,
}

impl Recall {
    pub fn open(ctx: &Context) -> Self {
        let mut notes = Vec::new();
        let bank = match crate::memory::bank_for(ctx) {
            Ok(bank) => Some(bank),
            Err(e) => {
                notes.push(format!("memories unavailable: {e}"));
                None
            }
        };
        let mode = match bank.as_ref().map(|b| b.embedder()) {
            Some(Err(e)) => {
                notes.push(format!("embedding model unavailable ({e}): memories found by keyword only"));
                SearchMode::Keyword
            }
            _ => SearchMode::Hybrid,
        };
        Self { bank, mode, notes }
    }

    /// A recall that never finds anything (no bank), for callers without an engine.
    pub fn none() -> Self {
        Self { bank: None, mode: SearchMode::Keyword, notes: Vec::new() }
    }

    pub fn bank(&self) -> Option<&Arc<MemoryBank>> {
        self.bank.as_ref()
    }

    /// The campaign's memories `witness` may recall, for the moment described by the
    /// last messages and the Director's guidance. The newest `skip` of `history`
    /// (messages of `scene_id`) are not recalled: the prompt's recent messages show them
    /// as they are (`[scene] recall_skips_newest`).
    #[allow(clippy::too_many_arguments)]
    pub fn for_character(
        &self,
        campaign_id: &str,
        scene_id: &str,
        witness: &str,
        history: &[SceneMessage],
        guidance: &[String],
        k: usize,
        skip: usize,
    ) -> Recalled {
        let mut notes = self.notes.clone();
        let query = query_text(history, guidance);
        let Some(bank) = &self.bank else { return Recalled { query, hits: Vec::new(), notes } };
        if k == 0 || query.trim().is_empty() {
            return Recalled { query, hits: Vec::new(), notes };
        }
        let newest = &history[history.len().saturating_sub(skip)..];
        let shown: std::collections::HashSet<String> = newest.iter().map(|m| format!("scene:{scene_id}:{}", m.number)).collect();
        let mut request = SearchRequest::new(query.clone(), k + shown.len());
        request.mode = self.mode;
        request.filter = SearchFilter {
            scope: Some(Scope { kind: ScopeKind::Campaign, id: Some(campaign_id.to_string()) }),
            witness: Some(witness.to_string()),
            ..Default::default()
        };
        let hits = match bank.search(&request) {
            Ok(hits) => hits,
            Err(e) if self.mode != SearchMode::Keyword => {
                notes.push(format!("hybrid memory search failed ({e}): keyword only for this call"));
                request.mode = SearchMode::Keyword;
                bank.search(&request).unwrap_or_else(|e| {
                    notes.push(format!("memory search failed: {e}"));
                    Vec::new()
                })
            }
            Err(e) => {
                notes.push(format!("memory search failed: {e}"));
                Vec::new()
            }
        };
        let mut hits: Vec<RetrievalHit> = hits.into_iter().filter(|h| !shown.contains(&h.id)).take(k).collect();
        for (i, hit) in hits.iter_mut().enumerate() {
            hit.rank = i + 1;
        }
        // Pinned memories the character may recall come every time, first.
        let hits = match bank.pinned(&Scope { kind: ScopeKind::Campaign, id: Some(campaign_id.to_string()) }, Some(witness)) {
            Ok(pinned) if !pinned.is_empty() => {
                notes.push(format!("memory: {} pinned", pinned.len()));
                let mut all: Vec<RetrievalHit> = pinned;
                all.extend(hits.into_iter().filter(|h| !all.iter().any(|p| p.id == h.id)).collect::<Vec<_>>());
                for (i, hit) in all.iter_mut().enumerate() {
                    hit.rank = i + 1;
                }
                all
            }
            Ok(_) => hits,
            Err(e) => {
                notes.push(format!("pinned memories unavailable: {e}"));
                hits
            }
        };
        Recalled { query, hits, notes }
    }

    /// The round's messages as memory turns of the campaign, witnessed by `present`
    /// (the characters in the scene during the round). Ids follow the scene's message
    /// numbers, so a round can never be remembered twice.
    pub fn turns(&self, campaign_id: &str, scene_id: &str, messages: &[SceneMessage], present: &[String]) -> Vec<NewMemory> {
        messages
            .iter()
            .filter(|m| !m.content.trim().is_empty())
            .map(|m| {
                let mut witnesses = present.to_vec();
                if witnesses.is_empty() {
                    // Said to nobody: the speaker alone knows (never common knowledge).
                    witnesses.push(m.speaker.clone());
                }
                NewMemory {
                    id: Some(format!("scene:{scene_id}:{}", m.number)),
                    kind: MemoryKind::Turn,
                    scope: Scope { kind: ScopeKind::Campaign, id: Some(campaign_id.to_string()) },
                    speaker: Some(m.speaker.clone()),
                    text: m.content.clone(),
                    session: Some(scene_id.to_string()),
                    witnesses,
                    ..Default::default()
                }
            })
            .collect()
    }

    /// Stage 1 of the memory write for the round's turns: embedded when the embedder
    /// works, else kept for keyword search until a reindex (and the note says so).
    pub fn prepare(&self, turns: Vec<NewMemory>) -> Result<(PreparedMemories, Option<String>), MemoryError> {
        match (&self.bank, self.mode) {
            (Some(bank), SearchMode::Hybrid) => {
                let prepared = bank.prepare_or_keyword_only(turns)?;
                let note = prepared
                    .keyword_only
                    .as_ref()
                    .map(|e| format!("the round's memories are stored without vectors ({e}); `memory reindex` adds them"));
                Ok((prepared, note))
            }
            _ => Ok((PreparedMemories::without_vectors(turns)?, None)),
        }
    }
}

/// The search text: the last three messages and the guidance for this turn.
fn query_text(history: &[SceneMessage], guidance: &[String]) -> String {
    let start = history.len().saturating_sub(3);
    let mut parts: Vec<String> = history[start..].iter().map(|m| m.content.clone()).collect();
    parts.extend(guidance.iter().filter(|g| !g.trim().is_empty()).cloned());
    parts.join("\n")
}

/// The name `character_id` goes by in each campaign an override of `scope` (`world` or
/// `campaign`) on `owner` reaches: its scene memories are witnessed under that name.
pub fn names_by_campaign(conn: &rusqlite::Connection, character_id: &str, scope: &str, owner: &str) -> Result<Vec<(String, String)>, crate::store::StoreError> {
    let sql = if scope == "world" {
        "SELECT id, world_id FROM campaigns WHERE world_id = ?1"
    } else {
        "SELECT id, world_id FROM campaigns WHERE id = ?1"
    };
    let campaigns: Vec<(String, String)> = conn.prepare(sql)?.query_map([owner], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
    let mut names = Vec::new();
    for (campaign, world) in campaigns {
        if let Some(placed) = crate::character::placed(conn, character_id, &world, &campaign)? {
            names.push((campaign, placed.name));
        }
    }
    Ok(names)
}

/// After an override changed what `character_id` is called in some campaigns (`before`,
/// from [`names_by_campaign`]), what it witnessed there under the old name is witnessed
/// under the new one: recall filters on the name, and a rename must not cost the memories.
pub fn follow_renames(conn: &rusqlite::Connection, character_id: &str, before: &[(String, String)]) -> Result<(), crate::store::StoreError> {
    for (campaign, old) in before {
        let world: String = conn.query_row("SELECT world_id FROM campaigns WHERE id = ?1", [campaign], |r| r.get(0))?;
        let Some(now) = crate::character::placed(conn, character_id, &world, campaign)? else { continue };
        if now.name != *old {
            let scope = Scope { kind: ScopeKind::Campaign, id: Some(campaign.clone()) };
            crate::memory::records::rename_witness(conn, Some(&scope), old, &now.name)?;
        }
    }
    Ok(())
}
