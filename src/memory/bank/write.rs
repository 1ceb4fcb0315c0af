//! The one way memories are written, by every writer (an import, lore indexing, a chat
//! turn, a scene round, the summariser, an undo):
//!
//! 1. **prepare**, outside any transaction: validate, and embed with the model (the
//!    write lock is never held while the model runs). When the embedder cannot run, a
//!    writer that must not fail (a chat turn, a round) stores the memories for keyword
//!    search only, and `memory reindex` embeds them later.
//! 2. **write**, inside the caller's transaction, beside the caller's own rows (the
//!    exchange, the round, the covered-turn marks), so both are stored or neither is.
//! 3. **publish**, after the commit: the vector index learns of new and removed rows.
//!    A transaction that rolls back publishes nothing, so the index never holds a
//!    vector the library does not.

use super::MemoryBank;
use crate::memory::MemoryError;
use crate::memory::records::{self, MemoryKind, NewMemory};
use crate::store::StoreError;
use rusqlite::Connection;
use std::collections::{HashMap, HashSet, VecDeque};

/// Memories ready to be written: checked, and embedded unless `keyword_only` says why not.
#[derive(Debug)]
pub struct PreparedMemories {
    items: Vec<NewMemory>,
    /// Vectors paired with `items`, and the model that made them.
    vectors: Option<(Vec<Vec<f32>>, String)>,
    /// Why these memories have no vectors, when the embedder failed.
    pub keyword_only: Option<String>,
}

impl PreparedMemories {
    /// Memories stored without vectors (no bank, or keyword search only): keyword
    /// search finds them at once, `memory reindex` embeds them later.
    pub fn without_vectors(items: Vec<NewMemory>) -> Result<Self, MemoryError> {
        check_texts(&items)?;
        Ok(Self { items, vectors: None, keyword_only: None })
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Stage 2: store the memories in the caller's transaction. Replaces a memory with
    /// the same id (a re-import), and reports it so its stale vector is dropped.
    pub fn write(self, tx: &Connection) -> Result<MemoryWrite, StoreError> {
        let before = journal_seq(tx)?;
        let inserted = records::insert_replacing(tx, &self.items)?;
        if let Some((vectors, model)) = &self.vectors {
            let pairs: Vec<(i64, &[f32])> = inserted.rowids.iter().copied().zip(vectors.iter().map(|v| v.as_slice())).collect();
            records::store_vectors(tx, model, &pairs)?;
        }
        let speakers = self.items.iter().filter_map(|m| m.speaker.as_deref()).map(str::to_lowercase).collect();
        Ok(MemoryWrite {
            ids: inserted.ids,
            vectors: self.vectors.map(|(v, _)| inserted.rowids.iter().copied().zip(v).collect()).unwrap_or_default(),
            gone: inserted.replaced,
            speakers,
            journal: JournalSpan::between(before, journal_seq(tx)?),
        })
    }
}

/// What a transaction did to the memories, to publish once it has committed.
#[derive(Debug, Default)]
#[must_use = "publish it after the transaction commits, or the vector index misses the change"]
pub struct MemoryWrite {
    ids: Vec<String>,
    vectors: Vec<(i64, Vec<f32>)>,
    /// Rows replaced or deleted.
    gone: Vec<i64>,
    speakers: Vec<String>,
    /// The `memory_vector_changes` entries the write's transaction added for it, so
    /// publish can move the bank's watermark past them: its own writes then cost the
    /// next search no replay (see [`MemoryBank::sync_with_library`]).
    journal: JournalSpan,
}

/// Which journal entries a write added.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) enum JournalSpan {
    /// None (a write that changed no vector).
    #[default]
    Nothing,
    /// Every entry after the first number up to the second, all of them this write's:
    /// read in the write's transaction, which holds the library's write lock.
    Entries(i64, i64),
    /// Not known as one run (two parts of a write with other vector changes between
    /// them): the next search replays from the watermark instead.
    Unknown,
}

impl JournalSpan {
    fn between(before: i64, after: i64) -> Self {
        if after > before { JournalSpan::Entries(before, after) } else { JournalSpan::Nothing }
    }

    /// The span of two parts of one transaction's write.
    fn and(self, other: JournalSpan) -> JournalSpan {
        match (self, other) {
            (JournalSpan::Nothing, x) | (x, JournalSpan::Nothing) => x,
            (JournalSpan::Entries(a, b), JournalSpan::Entries(c, d)) if b == c => JournalSpan::Entries(a, d),
            (JournalSpan::Entries(a, b), JournalSpan::Entries(c, d)) if d == a => JournalSpan::Entries(c, b),
            _ => JournalSpan::Unknown,
        }
    }
}

/// The last journal entry handed out (trimmed or not), inside the caller's transaction.
fn journal_seq(tx: &Connection) -> Result<i64, StoreError> {
    use rusqlite::OptionalExtension;
    Ok(tx
        .query_row("SELECT seq FROM sqlite_sequence WHERE name = 'memory_vector_changes'", [], |r| r.get::<_, i64>(0))
        .optional()?
        .unwrap_or(0))
}

impl MemoryWrite {
    /// The ids of the memories written, in order.
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// How many memories were deleted or replaced.
    pub fn removed(&self) -> usize {
        self.gone.len()
    }

    /// Combine two writes of one transaction.
    pub fn and(mut self, other: MemoryWrite) -> MemoryWrite {
        self.ids.extend(other.ids);
        self.vectors.extend(other.vectors);
        self.gone.extend(other.gone);
        self.speakers.extend(other.speakers);
        self.journal = self.journal.and(other.journal);
        self
    }
}

/// Stage 2 of a removal: delete the memories of `source` (their keyword rows and
/// vectors go with them) in the caller's transaction.
pub fn remove_source(tx: &Connection, source: &str) -> Result<MemoryWrite, StoreError> {
    let before = journal_seq(tx)?;
    let gone: Vec<i64> =
        tx.prepare("SELECT rowid FROM memories WHERE source = ?1")?.query_map([source], |r| r.get(0))?.collect::<Result<_, _>>()?;
    tx.execute("DELETE FROM memories WHERE source = ?1", [source])?;
    Ok(MemoryWrite { gone, journal: JournalSpan::between(before, journal_seq(tx)?), ..Default::default() })
}

fn check_texts(items: &[NewMemory]) -> Result<(), MemoryError> {
    match items.iter().find(|i| i.text.trim().is_empty()) {
        Some(empty) => Err(MemoryError::Invalid(format!("memory {:?} has no text", empty.id.as_deref().unwrap_or("(new)")))),
        None => Ok(()),
    }
}

impl MemoryBank {
    /// Stage 1: check and embed `items`; fails when the embedder cannot run.
    pub fn prepare(&self, items: Vec<NewMemory>) -> Result<PreparedMemories, MemoryError> {
        check_texts(&items)?;
        if items.is_empty() {
            return Ok(PreparedMemories { items, vectors: None, keyword_only: None });
        }
        let texts = self.embedding_texts(&items)?;
        let vectors = self.embed_in_context(&texts)?;
        Ok(PreparedMemories { items, vectors: Some((vectors, self.model_id())), keyword_only: None })
    }

    /// [`Self::prepare`] for a writer that must not fail for want of the model (a chat
    /// turn, a round): without the embedder the memories are kept for keyword search,
    /// and `keyword_only` says why.
    pub fn prepare_or_keyword_only(&self, items: Vec<NewMemory>) -> Result<PreparedMemories, MemoryError> {
        check_texts(&items)?;
        match self.prepare(items.clone()) {
            Ok(prepared) => Ok(prepared),
            Err(MemoryError::Embed(e)) => {
                tracing::warn!(error = %e, "storing memories without vectors");
                Ok(PreparedMemories { items, vectors: None, keyword_only: Some(e.to_string()) })
            }
            Err(e) => Err(e),
        }
    }

    /// Stage 1 with vectors already known (benchmarks, re-imports).
    pub fn prepare_with_vectors(&self, items: Vec<NewMemory>, vectors: Vec<Vec<f32>>) -> Result<PreparedMemories, MemoryError> {
        if items.len() != vectors.len() {
            return Err(MemoryError::Invalid(format!("{} memories but {} vectors", items.len(), vectors.len())));
        }
        check_texts(&items)?;
        Ok(PreparedMemories { items, vectors: Some((vectors, self.model_id())), keyword_only: None })
    }

    /// Stage 3: make a committed write searchable by vector, and forget removed rows.
    pub fn publish(&self, write: MemoryWrite) {
        if !write.speakers.is_empty()
            && let Some(known) = self.speakers.write().unwrap_or_else(|p| p.into_inner()).as_mut()
        {
            known.extend(write.speakers);
        }
        if !write.gone.is_empty() && write.ids.is_empty() {
            // A removal: a speaker may have no memory left, so the cache is rebuilt.
            *self.speakers.write().unwrap_or_else(|p| p.into_inner()) = None;
        }
        if write.gone.is_empty() && write.vectors.is_empty() {
            return;
        }
        let changed = write.gone.len() + write.vectors.len();
        {
            // The graph changes here and only here (or in a journal replay, which takes
            // the same lock): a transaction that rolled back never reaches this point.
            let mut journal = self.journal.lock().unwrap_or_else(|p| p.into_inner());
            self.index.apply(&write.gone, &write.vectors);
            // The write's own entries follow the watermark with none between: the index
            // now holds them, so the next search has nothing of this process's to replay.
            // With a gap (another process wrote in between) the watermark stays, and the
            // next search replays from it, these entries included (idempotently).
            if let JournalSpan::Entries(from, to) = write.journal
                && *journal == from
            {
                *journal = to;
            }
        }
        self.changes.fetch_add(changed, std::sync::atomic::Ordering::SeqCst);
        if !self.maybe_rebuild() {
            self.maybe_save();
        }
    }

    /// Prepare, write in a transaction of its own and publish: memories that are all
    /// there is to the change (an import, lore). Returns their ids.
    pub fn add(&self, items: Vec<NewMemory>) -> Result<Vec<String>, MemoryError> {
        let prepared = self.prepare(items)?;
        self.commit(prepared)
    }

    /// [`Self::add`] with vectors already known (benchmarks, re-imports).
    pub fn add_with_vectors(&self, items: Vec<NewMemory>, vectors: Vec<Vec<f32>>) -> Result<Vec<String>, MemoryError> {
        let prepared = self.prepare_with_vectors(items, vectors)?;
        self.commit(prepared)
    }

    fn commit(&self, prepared: PreparedMemories) -> Result<Vec<String>, MemoryError> {
        if prepared.is_empty() {
            return Ok(Vec::new());
        }
        let write = self.store.transaction(|tx| prepared.write(tx))?;
        let ids = write.ids().to_vec();
        self.publish(write);
        Ok(ids)
    }

    /// Delete the memories of `source` in a transaction of their own. Returns how many.
    pub fn remove_source(&self, source: &str) -> Result<usize, MemoryError> {
        let write = self.store.transaction(|tx| remove_source(tx, source))?;
        let removed = write.removed();
        self.publish(write);
        Ok(removed)
    }

    /// What gets embedded for each new memory: a turn comes with up to `context_turns`
    /// earlier turns of its session (from the batch or the store).
    fn embedding_texts(&self, items: &[NewMemory]) -> Result<Vec<InContext>, MemoryError> {
        let window = self.config().retrieval.context_turns;
        let mut recent: HashMap<String, VecDeque<String>> = HashMap::new();
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let session = match (&item.session, item.kind) {
                (Some(s), MemoryKind::Turn) if window > 0 => s.clone(),
                _ => {
                    out.push(InContext { text: item.text.clone(), earlier: Vec::new() });
                    continue;
                }
            };
            if !recent.contains_key(&session) {
                let earlier = self.store.with(|c| {
                    let mut stmt = c.prepare_cached(
                        "SELECT text FROM memories WHERE session = ?1 AND kind = 'turn' ORDER BY seq DESC LIMIT ?2",
                    )?;
                    let rows = stmt.query_map(rusqlite::params![session, window as i64], |r| r.get::<_, String>(0))?;
                    Ok(rows.collect::<Result<Vec<_>, _>>()?)
                })?;
                recent.insert(session.clone(), earlier.into_iter().rev().collect());
            }
            let window_texts = recent.entry(session).or_default();
            out.push(InContext { text: item.text.clone(), earlier: window_texts.iter().cloned().collect() });
            window_texts.push_back(item.text.clone());
            while window_texts.len() > window {
                window_texts.pop_front();
            }
        }
        Ok(out)
    }

    /// One vector per text: each text is embedded alone, and a turn's vector is its own
    /// plus `context_weight` times each earlier turn's, normalised. Each distinct text
    /// is embedded once, so a batch of consecutive turns costs one embedding per turn.
    ///
    /// Why not embed the turns joined into one text (what this did before): the mean
    /// pooling of a small model then spreads a turn's meaning over three turns' words,
    /// and each input is three times as long. On the evaluation sets the mixed vectors
    /// find more (BENCHMARKS.md, session 9) at a third of the embedding work.
    pub(super) fn embed_in_context(&self, texts: &[InContext]) -> Result<Vec<Vec<f32>>, MemoryError> {
        let mut unique: Vec<&str> = Vec::new();
        let mut slot: HashMap<&str, usize> = HashMap::new();
        for t in texts {
            for s in t.earlier.iter().map(String::as_str).chain(std::iter::once(t.text.as_str())) {
                slot.entry(s).or_insert_with(|| {
                    unique.push(s);
                    unique.len() - 1
                });
            }
        }
        let plain = self.embedder()?.embed_documents(&unique)?;
        if plain.len() != unique.len() {
            return Err(MemoryError::Invalid(format!("the embedder returned {} vectors for {} texts", plain.len(), unique.len())));
        }
        let weight = self.config().retrieval.context_weight;
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = plain[slot[t.text.as_str()]].clone();
                for e in &t.earlier {
                    for (x, y) in v.iter_mut().zip(&plain[slot[e.as_str()]]) {
                        *x += weight * y;
                    }
                }
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                if norm > 0.0 {
                    v.iter_mut().for_each(|x| *x /= norm);
                }
                v
            })
            .collect())
    }
}

/// The texts of the up to `window` turns before turn `rowid` in its session, oldest
/// first (none when `rowid` is not a turn of a session).
pub(super) fn earlier_turns(c: &Connection, rowid: i64, window: i64) -> Result<Vec<String>, rusqlite::Error> {
    earlier_turns_changed(c, rowid, window, None)
}

/// A change to turns that the turns after them must be embedded again for.
#[derive(Clone, Copy)]
enum Change<'a> {
    /// Turn `.0` will read `.1`.
    Edited(i64, &'a str),
    /// These turns will be gone.
    Removed(&'a HashSet<i64>),
}

/// [`earlier_turns`] as they will read once `change` is made (a removal lets the
/// window reach further back).
fn earlier_turns_changed(c: &Connection, rowid: i64, window: i64, change: Option<Change<'_>>) -> Result<Vec<String>, rusqlite::Error> {
    let mut stmt = c.prepare_cached(
        "SELECT p.rowid, p.text FROM memories m JOIN memories p ON p.session = m.session AND p.kind = 'turn' AND p.seq < m.seq \
         WHERE m.rowid = ?1 AND m.kind = 'turn' ORDER BY p.seq DESC LIMIT ?2",
    )?;
    let reach = match change {
        Some(Change::Removed(gone)) => window + gone.len() as i64,
        _ => window,
    };
    let rows = stmt.query_map(rusqlite::params![rowid, reach], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
    let mut earlier = Vec::new();
    for row in rows {
        let (r, text) = row?;
        match change {
            Some(Change::Edited(e, replacement)) if e == r => earlier.push(replacement.to_string()),
            Some(Change::Removed(gone)) if gone.contains(&r) => {}
            _ => earlier.push(text),
        }
    }
    earlier.truncate(window.max(0) as usize);
    earlier.reverse();
    Ok(earlier)
}

/// The up to `window` turns after turn `rowid` in its session: their stored vectors mix
/// in its text.
fn turns_after(c: &Connection, rowid: i64, window: i64) -> Result<Vec<(i64, String)>, rusqlite::Error> {
    let mut stmt = c.prepare_cached(
        "SELECT f.rowid, f.text FROM memories m JOIN memories f ON f.session = m.session AND f.kind = 'turn' AND f.seq > m.seq \
         WHERE m.rowid = ?1 AND m.kind = 'turn' ORDER BY f.seq LIMIT ?2",
    )?;
    stmt.query_map(rusqlite::params![rowid, window], |r| Ok((r.get(0)?, r.get(1)?)))?.collect()
}

/// The turns whose stored vectors mix in turn `rowid`'s text, each with its context as
/// it will read once `rowid` reads `replacement`. An edit re-embeds them, so no vector
/// keeps a share of a text that is gone.
fn followers_of_edit(c: &Connection, rowid: i64, window: i64, replacement: &str) -> Result<Vec<(i64, InContext)>, rusqlite::Error> {
    if window <= 0 {
        return Ok(Vec::new());
    }
    turns_after(c, rowid, window)?
        .into_iter()
        .map(|(f, text)| Ok((f, InContext { text, earlier: earlier_turns_changed(c, f, window, Some(Change::Edited(rowid, replacement)))? })))
        .collect()
}

/// The turns that stay and whose stored vectors mix in any of the `gone` turns' texts
/// (several from one session, or from several), each with its context as it will read
/// without them.
fn followers_of_removal(c: &Connection, gone: &HashSet<i64>, window: i64) -> Result<Vec<(i64, InContext)>, rusqlite::Error> {
    if window <= 0 {
        return Ok(Vec::new());
    }
    let mut followers = std::collections::BTreeMap::new();
    for &rowid in gone {
        for (f, text) in turns_after(c, rowid, window)? {
            if !gone.contains(&f) && !followers.contains_key(&f) {
                followers.insert(f, text);
            }
        }
    }
    followers
        .into_iter()
        .map(|(f, text)| Ok((f, InContext { text, earlier: earlier_turns_changed(c, f, window, Some(Change::Removed(gone)))? })))
        .collect()
}

/// New vectors for the turns after a changed one (see [`followers_in_context`]), made
/// before the transaction; written by [`FollowerVectors::write`] inside it.
#[derive(Debug, Default)]
pub struct FollowerVectors {
    vectors: Vec<(i64, Vec<f32>)>,
    model: String,
}

impl FollowerVectors {
    /// Store the new vectors of the followers that still exist.
    pub fn write(self, tx: &Connection) -> Result<MemoryWrite, StoreError> {
        let before = journal_seq(tx)?;
        let mut kept = Vec::new();
        for (rowid, v) in self.vectors {
            let exists = tx.query_row("SELECT count(*) FROM memories WHERE rowid = ?1", [rowid], |r| r.get::<_, i64>(0))? > 0;
            if exists {
                records::store_vectors(tx, &self.model, &[(rowid, v.as_slice())])?;
                kept.push((rowid, v));
            }
        }
        let journal = JournalSpan::between(before, journal_seq(tx)?);
        Ok(MemoryWrite { ids: Vec::new(), gone: kept.iter().map(|k| k.0).collect(), vectors: kept, speakers: Vec::new(), journal })
    }
}

/// A text to embed, with the earlier turns of its session (oldest first) that give it
/// context.
#[derive(Debug, Clone)]
pub(super) struct InContext {
    pub text: String,
    pub earlier: Vec<String>,
}

/// A new text for one stored memory (an edited message, a chosen swipe), embedded
/// before the transaction like any other write.
#[derive(Debug)]
pub struct PreparedEdit {
    id: String,
    text: String,
    vector: Option<(Vec<f32>, String)>,
    followers: FollowerVectors,
    /// Why the edited memory has no vector now, when the embedder failed.
    pub keyword_only: Option<String>,
}

impl PreparedEdit {
    /// An edit with no vector (no memory bank could be opened): the old vector is dropped,
    /// the new text is found by keyword until a `memory reindex`.
    pub fn text_only(id: &str, text: &str) -> Self {
        Self {
            id: id.to_string(),
            text: text.trim().to_string(),
            vector: None,
            followers: FollowerVectors::default(),
            keyword_only: Some("no memory bank".into()),
        }
    }

    /// Stage 2: change the text in place (its keyword index follows by trigger), and
    /// replace its vector — or drop it, so no stale vector answers for the old text.
    /// The memory keeps its place in its session.
    pub fn write(self, tx: &Connection) -> Result<MemoryWrite, StoreError> {
        let rowid = records::rowid_of(tx, &self.id)?.ok_or_else(|| StoreError::NotFound(format!("memory {}", self.id)))?;
        let before = journal_seq(tx)?;
        tx.execute("UPDATE memories SET text = ?2 WHERE rowid = ?1", rusqlite::params![rowid, self.text])?;
        let vectors = match self.vector {
            Some((v, model)) => {
                records::store_vectors(tx, &model, &[(rowid, v.as_slice())])?;
                vec![(rowid, v)]
            }
            None => {
                tx.execute("DELETE FROM memory_vectors WHERE memory_rowid = ?1", [rowid])?;
                Vec::new()
            }
        };
        let journal = JournalSpan::between(before, journal_seq(tx)?);
        let edited = MemoryWrite { ids: Vec::new(), vectors, gone: vec![rowid], speakers: Vec::new(), journal };
        Ok(edited.and(self.followers.write(tx)?))
    }
}

impl MemoryBank {
    /// Stage 1 of an edit: the memory `id` will read `text` (embedded now; keyword-only
    /// with the reason when the embedder cannot run).
    pub fn prepare_edit(&self, id: &str, text: &str) -> Result<PreparedEdit, MemoryError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(MemoryError::Invalid(format!("memory {id:?} would have no text")));
        }
        // An edited turn keeps the context of the turns before it, as when it was written,
        // and the turns after it, whose vectors mix in its text, are embedded again.
        let window = self.config().retrieval.context_turns as i64;
        let (earlier, followers): (Vec<String>, Vec<(i64, InContext)>) = if window == 0 {
            (Vec::new(), Vec::new())
        } else {
            self.store.with(|c| {
                Ok(match records::rowid_of(c, id)? {
                    Some(rowid) => (earlier_turns(c, rowid, window)?, followers_of_edit(c, rowid, window, text)?),
                    None => (Vec::new(), Vec::new()),
                })
            })?
        };
        let mut texts = vec![InContext { text: text.to_string(), earlier }];
        texts.extend(followers.iter().map(|f| f.1.clone()));
        let model = self.model_id();
        let (vector, followers, keyword_only) = match self.embed_in_context(&texts) {
            Ok(v) if v.len() == texts.len() => {
                let mut v = v.into_iter();
                let own = v.next().map(|own| (own, model.clone()));
                let vectors = followers.iter().map(|f| f.0).zip(v).collect();
                (own, FollowerVectors { vectors, model }, None)
            }
            Ok(_) => (None, FollowerVectors::default(), Some("the embedder returned nothing".to_string())),
            Err(e) => (None, FollowerVectors::default(), Some(e.to_string())),
        };
        Ok(PreparedEdit { id: id.to_string(), text: text.to_string(), vector, followers, keyword_only })
    }

    /// The new vectors of the turns after memory `id` for when it is deleted (none when
    /// it is no turn of a session, or the embedder cannot run: they keep their vectors).
    pub fn prepare_delete(&self, id: &str) -> Result<FollowerVectors, MemoryError> {
        self.prepare_removal(&[id.to_string()])
    }

    /// [`Self::prepare_delete`] for several memories removed together (a chat exchange
    /// and the messages after it): each turn that stays is embedded once, with the
    /// context it will have without any of them. Write it in the removal's transaction
    /// with [`FollowerVectors::write`] after the rows are gone.
    pub fn prepare_removal(&self, ids: &[String]) -> Result<FollowerVectors, MemoryError> {
        let window = self.config().retrieval.context_turns as i64;
        if window <= 0 || ids.is_empty() {
            return Ok(FollowerVectors::default());
        }
        let followers = self.store.with(|c| {
            let mut gone = HashSet::new();
            for id in ids {
                gone.extend(records::rowid_of(c, id)?);
            }
            Ok(followers_of_removal(c, &gone, window)?)
        })?;
        if followers.is_empty() {
            return Ok(FollowerVectors::default());
        }
        let texts: Vec<InContext> = followers.iter().map(|f| f.1.clone()).collect();
        match self.embed_in_context(&texts) {
            Ok(v) if v.len() == texts.len() => Ok(FollowerVectors { vectors: followers.iter().map(|f| f.0).zip(v).collect(), model: self.model_id() }),
            Ok(_) => Ok(FollowerVectors::default()),
            Err(e) => {
                tracing::warn!(error = %e, "the turns after deleted memories keep their vectors");
                Ok(FollowerVectors::default())
            }
        }
    }
}

/// Stage 2 of deleting memory `id`: the row goes (keyword row and vector with it) and the
/// turns after it take the vectors `followers` prepared without it.
pub fn remove_with_followers(tx: &Connection, id: &str, followers: FollowerVectors) -> Result<MemoryWrite, StoreError> {
    let removed = remove_ids(tx, &[id.to_string()])?;
    Ok(removed.and(followers.write(tx)?))
}

/// Stage 2 of a removal by id: delete these memories (a summary that no longer holds).
pub fn remove_ids(tx: &Connection, ids: &[String]) -> Result<MemoryWrite, StoreError> {
    let before = journal_seq(tx)?;
    let mut gone = Vec::new();
    for id in ids {
        if let Some(rowid) = records::rowid_of(tx, id)? {
            tx.execute("DELETE FROM memories WHERE rowid = ?1", [rowid])?;
            gone.push(rowid);
        }
    }
    Ok(MemoryWrite { gone, journal: JournalSpan::between(before, journal_seq(tx)?), ..Default::default() })
}

/// Stage 2 of forgetting what a scene's messages became (the scene is being deleted).
pub fn remove_scene(tx: &Connection, scene_id: &str) -> Result<MemoryWrite, StoreError> {
    remove_where(tx, "id LIKE ?1 ESCAPE '\\'", &format!("scene:{}:%", scene_id.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_")))
}

/// Stage 2 of forgetting a campaign: every memory of its scope (the campaign is being
/// deleted).
pub fn remove_campaign(tx: &Connection, campaign_id: &str) -> Result<MemoryWrite, StoreError> {
    remove_where(tx, "scope = 'campaign' AND scope_id = ?1", campaign_id)
}

/// Stage 2 of forgetting a character: every memory of its scope, its one-to-one chat's
/// (the character is being deleted).
pub fn remove_character(tx: &Connection, character_id: &str) -> Result<MemoryWrite, StoreError> {
    remove_where(tx, "scope = 'character' AND scope_id = ?1", character_id)
}

fn remove_where(tx: &Connection, condition: &str, value: &str) -> Result<MemoryWrite, StoreError> {
    let before = journal_seq(tx)?;
    let gone: Vec<i64> = tx
        .prepare(&format!("SELECT rowid FROM memories WHERE {condition}"))?
        .query_map([value], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    tx.execute(&format!("DELETE FROM memories WHERE {condition}"), [value])?;
    Ok(MemoryWrite { gone, journal: JournalSpan::between(before, journal_seq(tx)?), ..Default::default() })
}
