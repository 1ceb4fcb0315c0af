//! Memories the user curates: pin one (its character is given it every time, within
//! the memory budget), change its text, delete it, or forget a whole session. Every
//! change goes through the one write protocol (prepare → write in one transaction →
//! publish), so the keyword index, the stored vector and the vector graph never answer
//! for a text the memory no longer has.

use super::MemoryError;
use super::bank::MemoryBank;
use super::bank::{MemoryWrite, remove_ids, remove_with_followers};
use super::records::{self, Scope};
use super::retrieval::{Fused, RetrievalHit};
use crate::store::{StoreError, now_rfc3339};
use rusqlite::{Connection, OptionalExtension, params};

/// The most pinned memories a character is given per prompt (the budget cuts further).
pub const MAX_PINNED: usize = 32;

/// Cosine similarity at which a `vectorized` lore entry fires, in chat and in scenes
/// (all-MiniLM-L6-v2: related sentences score 0.4–0.8, unrelated ones under 0.2).
pub const LORE_SIMILARITY_THRESHOLD: f32 = 0.4;

/// The `vectorized`, enabled entries among `entries` whose content `similarity` scores at
/// least [`LORE_SIMILARITY_THRESHOLD`], with that score (by position in `entries`): what
/// fires by meaning, in chat, in scenes and in a lore test alike. `similarity` scores the
/// contents it is given, and is asked only when some entry is vectorized.
pub fn vector_activated<E>(
    entries: &[crate::lorebook::activation::ScanEntry<'_>],
    similarity: impl FnOnce(&[&str]) -> Result<Vec<f32>, E>,
) -> Result<Vec<(usize, f32)>, E> {
    let vectorized: Vec<usize> = entries.iter().enumerate().filter(|(_, e)| e.entry.vectorized && e.entry.enabled).map(|(i, _)| i).collect();
    if vectorized.is_empty() {
        return Ok(Vec::new());
    }
    let contents: Vec<&str> = vectorized.iter().map(|&i| entries[i].entry.content.as_str()).collect();
    Ok(vectorized.into_iter().zip(similarity(&contents)?).filter(|(_, s)| *s >= LORE_SIMILARITY_THRESHOLD).collect())
}

/// Lore entry vectors kept in memory at most (a few MB).
pub const MAX_ENTRY_VECTORS: usize = 8192;

/// What a person did by hand to one memory: kept with a chat that is put aside, so the
/// chat's pins and edits come back with it when it is played again.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HandCuration {
    pub id: String,
    pub pinned: bool,
    /// The edited text and when it was edited (`None`: the text is as it was written).
    pub edited: Option<(String, String)>,
    /// Deleted by hand: the chat's message stays, its memory is not written again.
    #[serde(default)]
    pub deleted: bool,
}

/// The hand curation of those of `ids` that have any: pinned, edited, or deleted (every
/// id given is one its writer stored, so one that is gone was deleted by hand).
pub fn curation_of(conn: &Connection, ids: &[String]) -> Result<Vec<HandCuration>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT pinned, text, edited_at FROM memories WHERE id = ?1")?;
    let mut out = Vec::new();
    for id in ids {
        let row: Option<(bool, String, Option<String>)> = stmt.query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).optional()?;
        match row {
            None => out.push(HandCuration { id: id.clone(), pinned: false, edited: None, deleted: true }),
            Some((pinned, text, edited_at)) if pinned || edited_at.is_some() => {
                out.push(HandCuration { id: id.clone(), pinned, edited: edited_at.map(|at| (text, at)), deleted: false })
            }
            Some(_) => {}
        }
    }
    Ok(out)
}

/// A summary over some of a chat's turns, kept with the chat when it is put aside: the
/// summariser's work, and the user's pin or edit of it, come back with the chat.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KeptSummary {
    pub id: String,
    pub text: String,
    /// The first and last memory it covers (its source, `turns FIRST..LAST`).
    pub first: String,
    pub last: String,
    pub session: Option<String>,
    pub time: Option<String>,
    pub witnesses: Vec<String>,
    pub pinned: bool,
    pub edited_at: Option<String>,
}

impl KeptSummary {
    /// The summary as a memory to write again in `scope`.
    pub fn memory(&self, scope: Scope) -> records::NewMemory {
        records::NewMemory {
            id: Some(self.id.clone()),
            kind: records::MemoryKind::Summary,
            scope,
            speaker: None,
            text: self.text.clone(),
            session: self.session.clone(),
            fiction_time: None,
            time: self.time.clone(),
            witnesses: self.witnesses.clone(),
            source: Some(format!("turns {}..{}", self.first, self.last)),
            content_hash: None,
        }
    }
}

/// The summaries whose whole range lies among `ids` (a chat's memories, in order).
pub fn summaries_over(conn: &Connection, ids: &[String]) -> Result<Vec<KeptSummary>, StoreError> {
    let known: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
    let mut stmt = conn.prepare_cached(
        "SELECT rowid, id, text, source, session, time, pinned, edited_at FROM memories WHERE kind = 'summary' AND source LIKE 'turns %' ORDER BY seq",
    )?;
    type Row = (i64, String, String, String, Option<String>, Option<String>, bool, Option<String>);
    let rows: Vec<Row> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?)))?
        .collect::<Result<_, _>>()?;
    let mut witnesses = conn.prepare_cached("SELECT witness FROM memory_witnesses WHERE memory_rowid = ?1 ORDER BY witness")?;
    let mut out = Vec::new();
    for (rowid, id, text, source, session, time, pinned, edited_at) in rows {
        let Some((first, last)) = source.strip_prefix("turns ").and_then(|r| r.split_once("..")) else { continue };
        if !known.contains(first) || !known.contains(last) {
            continue;
        }
        let witnesses: Vec<String> = witnesses.query_map([rowid], |r| r.get(0))?.collect::<Result<_, _>>()?;
        out.push(KeptSummary { id, text, first: first.into(), last: last.into(), session, time, witnesses, pinned, edited_at });
    }
    Ok(out)
}

/// After a chat's memories (`ids`, in order) and its `kept` summaries are written again:
/// the turns each summary covers are marked summarised, and its pin and edit restored.
pub fn restore_summaries(tx: &Connection, ids: &[String], kept: &[KeptSummary]) -> Result<(), StoreError> {
    let position = |id: &str| ids.iter().position(|i| i == id);
    for k in kept {
        tx.execute("UPDATE memories SET pinned = ?2, edited_at = ?3 WHERE id = ?1", params![k.id, k.pinned as i64, k.edited_at])?;
        let (Some(from), Some(to)) = (position(&k.first), position(&k.last)) else { continue };
        for id in ids.get(from..=to).unwrap_or_default() {
            tx.execute("UPDATE memories SET summarised = 1 WHERE id = ?1 AND kind = 'turn'", [id])?;
        }
    }
    Ok(())
}

/// Mark memories written anew (their edited text already in them) pinned and edited as
/// `curation` says.
pub fn restore_curation(tx: &Connection, curation: &[HandCuration]) -> Result<(), StoreError> {
    for c in curation.iter().filter(|c| !c.deleted) {
        tx.execute(
            "UPDATE memories SET pinned = ?2, edited_at = ?3 WHERE id = ?1",
            params![c.id, c.pinned as i64, c.edited.as_ref().map(|(_, at)| at.as_str())],
        )?;
    }
    Ok(())
}

/// What a curation did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Curated {
    /// `pinned`, `unpinned`, `edited`, `deleted` or `forgot`.
    pub action: String,
    /// The memories it concerned.
    pub ids: Vec<String>,
}

/// Those of `ids` that are turns (what a summary is told from).
fn turns_among(conn: &Connection, ids: &[String]) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT 1 FROM memories WHERE id = ?1 AND kind = 'turn'")?;
    let mut out = Vec::new();
    for id in ids {
        if stmt.query_row([id], |_| Ok(())).optional()?.is_some() {
            out.push(id.clone());
        }
    }
    Ok(out)
}

fn exists(conn: &Connection, id: &str) -> Result<(), StoreError> {
    conn.query_row("SELECT 1 FROM memories WHERE id = ?1", [id], |_| Ok(()))
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("memory {id:?}")))
}

impl MemoryBank {
    /// Pin or unpin memory `id`.
    pub fn pin(&self, id: &str, pinned: bool) -> Result<Curated, MemoryError> {
        self.store().transaction(|tx| {
            exists(tx, id)?;
            tx.execute("UPDATE memories SET pinned = ?2 WHERE id = ?1", params![id, pinned as i64])?;
            Ok(())
        })?;
        Ok(Curated { action: if pinned { "pinned" } else { "unpinned" }.into(), ids: vec![id.to_string()] })
    }

    /// Give memory `id` a new text: embedded first, then text, keyword index and vector
    /// replaced in one transaction, and marked as edited.
    pub fn edit(&self, id: &str, text: &str) -> Result<Curated, MemoryError> {
        self.store().with(|c| exists(c, id))?;
        let prepared = self.prepare_edit(id, text)?;
        let write = self.store().transaction(|tx| {
            // A summary told from the old words would keep them: it goes, and its turns
            // wait to be summarised again as they now read.
            let (reopened, _) = super::summarise::reopen_covering(tx, &turns_among(tx, &[id.to_string()])?)?;
            let write = reopened.and(prepared.write(tx)?);
            tx.execute("UPDATE memories SET edited_at = ?2 WHERE id = ?1", params![id, now_rfc3339()])?;
            Ok(write)
        })?;
        self.publish(write);
        Ok(Curated { action: "edited".into(), ids: vec![id.to_string()] })
    }

    /// Delete memory `id` (its keyword row and vector go with it).
    pub fn delete(&self, id: &str) -> Result<Curated, MemoryError> {
        let followers = self.prepare_delete(id)?;
        let write = self.store().transaction(|tx| {
            exists(tx, id)?;
            // A summary that told the deleted turn would still tell it.
            let (reopened, _) = super::summarise::reopen_covering(tx, &turns_among(tx, &[id.to_string()])?)?;
            Ok(reopened.and(remove_with_followers(tx, id, followers)?))
        })?;
        self.publish(write);
        Ok(Curated { action: "deleted".into(), ids: vec![id.to_string()] })
    }

    /// Delete every memory of session `session`.
    pub fn forget_session(&self, session: &str) -> Result<Curated, MemoryError> {
        let (ids, write): (Vec<String>, MemoryWrite) = self.store().transaction(|tx| {
            let ids: Vec<String> =
                tx.prepare("SELECT id FROM memories WHERE session = ?1")?.query_map([session], |r| r.get(0))?.collect::<Result<_, _>>()?;
            if ids.is_empty() {
                return Err(StoreError::NotFound(format!("session {session:?}")));
            }
            // Summaries told from the session's turns go with them, wherever they were
            // filed (a summary is filed under the session of its last turn, and may span
            // the one before): a forgotten evening must not live on in one.
            let (reopened, _) = super::summarise::reopen_covering(tx, &turns_among(tx, &ids)?)?;
            let left: Vec<String> =
                tx.prepare("SELECT id FROM memories WHERE session = ?1")?.query_map([session], |r| r.get(0))?.collect::<Result<_, _>>()?;
            let write = reopened.and(remove_ids(tx, &left)?);
            Ok((ids, write))
        })?;
        self.publish(write);
        Ok(Curated { action: "forgot".into(), ids })
    }

    /// [`vector_activated`] with `text` (the recent text) embedded as the query by this
    /// bank's model; nothing is embedded when no entry is vectorized.
    pub fn vector_activated(&self, entries: &[crate::lorebook::activation::ScanEntry<'_>], text: &str) -> Result<Vec<(usize, f32)>, MemoryError> {
        vector_activated(entries, |contents| {
            let query = self.embedder()?.embed_query(text)?;
            self.similarities(&query, contents)
        })
    }

    /// Cosine similarity of each text to `query` (an embedding of the recent text), for
    /// vector-activated lore. The texts' vectors are embedded once and kept in memory
    /// (at most [`MAX_ENTRY_VECTORS`]).
    pub fn similarities(&self, query: &[f32], texts: &[&str]) -> Result<Vec<f32>, MemoryError> {
        use std::hash::{Hash, Hasher};
        let key = |t: &str| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            t.hash(&mut h);
            h.finish()
        };
        let missing: Vec<&str> = {
            let cache = self.entry_vectors.lock().unwrap_or_else(|p| p.into_inner());
            texts.iter().copied().filter(|t| !cache.contains_key(&key(t))).collect()
        };
        if !missing.is_empty() {
            let vectors = self.embedder()?.embed_documents(&missing)?;
            let mut cache = self.entry_vectors.lock().unwrap_or_else(|p| p.into_inner());
            if cache.len() + missing.len() > MAX_ENTRY_VECTORS {
                cache.clear();
            }
            for (t, v) in missing.iter().zip(vectors) {
                cache.insert(key(t), std::sync::Arc::new(v));
            }
        }
        let cache = self.entry_vectors.lock().unwrap_or_else(|p| p.into_inner());
        Ok(texts
            .iter()
            .map(|t| cache.get(&key(t)).map_or(0.0, |v| v.iter().zip(query).map(|(a, b)| a * b).sum::<f32>()))
            .collect())
    }

    /// The memories pinned in `scope` (turns and summaries), oldest first, as hits that
    /// say they are pinned. With `witness`, only those it may recall: it witnessed them,
    /// or they have no witnesses (common knowledge).
    pub fn pinned(&self, scope: &Scope, witness: Option<&str>) -> Result<Vec<RetrievalHit>, MemoryError> {
        let memories = self.store().with(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT rowid FROM memories m
                 WHERE pinned = 1 AND scope = ?1 AND scope_id IS ?2 AND kind IN ('turn', 'summary')
                   AND (?4 IS NULL
                        OR NOT EXISTS (SELECT 1 FROM memory_witnesses w WHERE w.memory_rowid = m.rowid)
                        OR EXISTS (SELECT 1 FROM memory_witnesses w WHERE w.memory_rowid = m.rowid AND lower(w.witness) = lower(?4)))
                 ORDER BY seq LIMIT ?3",
            )?;
            let rowids: Vec<i64> =
                stmt.query_map(params![scope.kind.as_str(), scope.id, MAX_PINNED as i64, witness], |r| r.get(0))?.collect::<Result<_, _>>()?;
            records::load(c, &rowids)
        })?;
        let pinned = Fused { score: 1.0, keyword: None, vector: None };
        Ok(memories.iter().enumerate().map(|(i, m)| RetrievalHit::of(m, i + 1, &pinned)).collect())
    }
}
