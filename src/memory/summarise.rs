//! The summarisation cycle: every `summary_every` turns, the unsummarised turns of a
//! conversation are compressed by an LLM into one summary memory that enters both the
//! keyword and the vector index.
//!
//! The buffer is not held in memory: it is the set of turns with `summarised = 0` in the
//! store, so a crash or restart loses nothing, and the summary is inserted and its turns
//! marked in one transaction, so a turn is never summarised twice nor dropped.

use super::bank::{MemoryBank, MemoryError};
use super::records::{self, Memory, MemoryKind, NewMemory, Scope};
use crate::llm::{CallContext, CancelToken, ChatMessage, ChatRequest, LlmClient, LlmError};
use rusqlite::params;

#[derive(Debug, thiserror::Error)]
pub enum SummariseError {
    #[error(transparent)]
    Memory(#[from] MemoryError),
    #[error("the summariser model failed: {0}")]
    Llm(#[from] LlmError),
    #[error("the summariser returned an empty summary")]
    Empty,
}

/// The turns waiting to be summarised in `scope` (and `session`, if given), oldest first.
pub fn buffer(bank: &MemoryBank, scope: &Scope, session: Option<&str>) -> Result<Vec<Memory>, MemoryError> {
    buffer_of(bank, scope, session, None)
}

/// [`buffer`] of the turns whose source starts with `source_prefix` (`chat:` for a
/// chat's own turns, not the memories a file brought in).
pub fn buffer_of(bank: &MemoryBank, scope: &Scope, session: Option<&str>, source_prefix: Option<&str>) -> Result<Vec<Memory>, MemoryError> {
    let rowids: Vec<i64> = bank.store().with(|c| {
        let mut stmt = c.prepare_cached(
            "SELECT rowid FROM memories WHERE kind = 'turn' AND summarised = 0 AND scope = ?1 AND scope_id IS ?2 \
             AND (?3 IS NULL OR session = ?3) AND (?4 IS NULL OR substr(source, 1, length(?4)) = ?4) ORDER BY seq",
        )?;
        let rows = stmt.query_map(params![scope.kind.as_str(), scope.id, session, source_prefix], |r| r.get(0))?;
        Ok(rows.collect::<Result<Vec<i64>, _>>()?)
    })?;
    Ok(bank.store().with(|c| records::load(c, &rowids))?)
}

/// The prompt that asks for a summary of `turns`.
pub fn summary_request(turns: &[Memory]) -> ChatRequest {
    let mut transcript = String::new();
    for t in turns {
        let when = t.time.as_deref().map(|d| format!("[{}] ", d.get(..10).unwrap_or(d))).unwrap_or_default();
        transcript.push_str(&format!("{when}{}: {}\n", t.speaker.as_deref().unwrap_or("?"), t.text));
    }
    ChatRequest::new(
        "",
        vec![
            ChatMessage::system(
                "You compress a stretch of conversation into one or two sentences of memory, written in the \
                 third person. Keep names, places, dates, promises, feelings and facts someone may ask about \
                 later. Answer with the summary only.",
            ),
            ChatMessage::user(format!("Conversation:\n{transcript}\nSummary:")),
        ],
    )
}

/// Summarise the buffer of `scope` / `session` (of the turns whose source starts with
/// `source_prefix`, if given) if it holds at least `every` turns. Returns the new
/// summary's id, or `None` when the buffer is still short.
pub fn summarise_if_due(
    bank: &MemoryBank,
    client: &LlmClient,
    scope: &Scope,
    session: Option<&str>,
    source_prefix: Option<&str>,
    every: usize,
) -> Result<Option<String>, SummariseError> {
    let turns = buffer_of(bank, scope, session, source_prefix)?;
    if turns.len() < every.max(1) {
        return Ok(None);
    }
    let turns = &turns[..every.max(1)];
    let cancel = CancelToken::new();
    let completion = client.complete(&summary_request(turns), CallContext::new(&cancel))?;
    let text = completion.text.trim().trim_start_matches("Summary:").trim().to_string();
    if text.is_empty() {
        return Err(SummariseError::Empty);
    }
    let mut witnesses: Vec<String> = turns.iter().flat_map(|t| t.witnesses.iter().cloned()).collect();
    witnesses.sort();
    witnesses.dedup();
    let first = turns.first().map(|t| t.id.as_str()).unwrap_or_default();
    let last = turns.last().map(|t| t.id.as_str()).unwrap_or_default();
    let summary = NewMemory {
        id: None,
        kind: MemoryKind::Summary,
        scope: scope.clone(),
        speaker: None,
        text,
        session: turns.last().and_then(|t| t.session.clone()),
        fiction_time: turns.last().and_then(|t| t.fiction_time.clone()),
        time: turns.last().and_then(|t| t.time.clone()),
        witnesses,
        source: Some(format!("turns {first}..{last}")),
        content_hash: None,
    };
    let covered: Vec<i64> = turns.iter().map(|t| t.rowid).collect();
    // Without the embedding model the summary is still kept, for keyword search, as
    // the turns it covers are.
    let prepared = bank.prepare_or_keyword_only(vec![summary])?;
    let write = bank.store().transaction(|tx| {
        let write = prepared.write(tx)?;
        let mut mark = tx.prepare_cached("UPDATE memories SET summarised = 1 WHERE rowid = ?1 AND summarised = 0")?;
        for rowid in &covered {
            if mark.execute([rowid])? != 1 {
                // Someone else summarised these turns meanwhile: keep theirs, drop ours.
                return Err(crate::store::StoreError::Corrupt("turns were summarised concurrently".into()));
            }
        }
        Ok(write)
    })
    .map_err(MemoryError::from)?;
    let id = write.ids().first().cloned();
    bank.publish(write);
    Ok(id)
}

/// Take apart every summary that covers one of `memory_ids` (a message being edited or
/// deleted): its turns become unsummarised again and the summary goes, so the next
/// summarisation cycle writes it anew from the turns as they now are. A summary whose
/// range overlaps one taken apart goes too, so no turn stays marked as summarised by a
/// summary that no longer exists. Runs in the caller's transaction; publish the returned
/// write after the commit.
pub fn reopen_covering(tx: &rusqlite::Connection, memory_ids: &[String]) -> Result<(crate::memory::MemoryWrite, usize), crate::store::StoreError> {
    use rusqlite::OptionalExtension;
    use std::collections::HashMap;
    type Scope = (String, Option<String>);
    let seq_of = |id: &str| -> Result<Option<(i64, Scope)>, crate::store::StoreError> {
        Ok(tx
            .query_row("SELECT seq, scope, scope_id FROM memories WHERE id = ?1", [id], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))
            .optional()?)
    };
    // Each scope's summaries with the range of turns they cover, read once.
    let mut summaries: HashMap<Scope, Vec<(String, i64, i64)>> = HashMap::new();
    let mut chosen: Vec<(Scope, String, i64, i64)> = Vec::new();
    for id in memory_ids {
        let Some((seq, scope)) = seq_of(id)? else { continue };
        if !summaries.contains_key(&scope) {
            let mut stmt = tx.prepare_cached(
                "SELECT id, source FROM memories WHERE kind = 'summary' AND scope = ?1 AND scope_id IS ?2 AND source LIKE 'turns %'",
            )?;
            let rows: Vec<(String, String)> = stmt.query_map(rusqlite::params![scope.0, scope.1], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
            let mut ranges = Vec::new();
            for (summary_id, source) in rows {
                let Some((first, last)) = source.strip_prefix("turns ").and_then(|r| r.split_once("..")) else { continue };
                if let (Some((from, _)), Some((to, _))) = (seq_of(first)?, seq_of(last)?) {
                    ranges.push((summary_id, from, to));
                }
            }
            summaries.insert(scope.clone(), ranges);
        }
        for (summary_id, from, to) in &summaries[&scope] {
            if (*from..=*to).contains(&seq) && !chosen.iter().any(|c| &c.1 == summary_id) {
                chosen.push((scope.clone(), summary_id.clone(), *from, *to));
            }
        }
    }
    // Overlapping summaries go with the ones chosen, until none is left overlapping.
    loop {
        let mut more = Vec::new();
        for (scope, ranges) in &summaries {
            for (summary_id, from, to) in ranges {
                let overlaps = chosen.iter().any(|(s, _, f, t)| s == scope && from <= t && f <= to);
                if overlaps && !chosen.iter().chain(&more).any(|c| &c.1 == summary_id) {
                    more.push((scope.clone(), summary_id.clone(), *from, *to));
                }
            }
        }
        if more.is_empty() {
            break;
        }
        chosen.extend(more);
    }
    for (scope, _, from, to) in &chosen {
        tx.execute(
            "UPDATE memories SET summarised = 0 WHERE kind = 'turn' AND scope = ?1 AND scope_id IS ?2 AND seq BETWEEN ?3 AND ?4",
            rusqlite::params![scope.0, scope.1, from, to],
        )?;
    }
    let ids: Vec<String> = chosen.into_iter().map(|c| c.1).collect();
    let count = ids.len();
    Ok((crate::memory::remove_ids(tx, &ids)?, count))
}
