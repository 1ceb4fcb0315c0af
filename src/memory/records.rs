//! Memory rows: what is stored (turns, summaries, lore chunks) and how it is written.

use crate::store::{StoreError, new_id, now_rfc3339};
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum MemoryKind {
    #[default]
    Turn,
    Summary,
    Lore,
}

impl MemoryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryKind::Turn => "turn",
            MemoryKind::Summary => "summary",
            MemoryKind::Lore => "lore",
        }
    }
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "turn" => Some(MemoryKind::Turn),
            "summary" => Some(MemoryKind::Summary),
            "lore" => Some(MemoryKind::Lore),
            _ => None,
        }
    }
}

/// Whose memory this is: the whole world, one campaign, or one character.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ScopeKind {
    #[default]
    World,
    Campaign,
    Character,
}

impl ScopeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ScopeKind::World => "world",
            ScopeKind::Campaign => "campaign",
            ScopeKind::Character => "character",
        }
    }
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "world" => Some(ScopeKind::World),
            "campaign" => Some(ScopeKind::Campaign),
            "character" => Some(ScopeKind::Character),
            _ => None,
        }
    }
}

/// A scope with the id of the world / campaign / character it belongs to (`None`: all).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct Scope {
    pub kind: ScopeKind,
    pub id: Option<String>,
}

impl Scope {
    pub fn world() -> Self {
        Self::default()
    }
    pub fn character(id: impl Into<String>) -> Self {
        Self { kind: ScopeKind::Character, id: Some(id.into()) }
    }
    /// Parse `world`, `campaign:ID`, `character:ID` (the import format's `scope`).
    pub fn parse(text: &str) -> Option<Self> {
        let (kind, id) = match text.split_once(':') {
            Some((k, id)) => (k.trim(), Some(id.trim().to_string()).filter(|s| !s.is_empty())),
            None => (text.trim(), None),
        };
        Some(Self { kind: ScopeKind::parse(&kind.to_ascii_lowercase())?, id })
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.id {
            Some(id) => write!(f, "{}:{id}", self.kind.as_str()),
            None => f.write_str(self.kind.as_str()),
        }
    }
}

/// A memory to store. `id` defaults to a fresh id; `seq` to the next in order.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct NewMemory {
    pub id: Option<String>,
    pub kind: MemoryKind,
    pub scope: Scope,
    pub speaker: Option<String>,
    pub text: String,
    pub session: Option<String>,
    pub fiction_time: Option<String>,
    /// When it happened (RFC 3339 or a date); defaults to now.
    pub time: Option<String>,
    pub witnesses: Vec<String>,
    pub source: Option<String>,
    pub content_hash: Option<String>,
}

/// A stored memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    #[serde(skip)]
    pub rowid: i64,
    pub id: String,
    pub kind: MemoryKind,
    pub scope: Scope,
    pub speaker: Option<String>,
    pub text: String,
    pub session: Option<String>,
    pub seq: i64,
    pub fiction_time: Option<String>,
    pub time: Option<String>,
    pub witnesses: Vec<String>,
    pub source: Option<String>,
    /// Injected for its character every time (the user pinned it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
    /// When the user changed its text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edited_at: Option<String>,
}

pub(crate) const MEMORY_COLUMNS: &str =
    "m.rowid, m.id, m.kind, m.scope, m.scope_id, m.speaker, m.text, m.session, m.seq, m.fiction_time, m.time, m.source, m.pinned, m.edited_at";

pub(crate) fn memory_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Memory> {
    let kind: String = row.get(2)?;
    let scope: String = row.get(3)?;
    Ok(Memory {
        rowid: row.get(0)?,
        id: row.get(1)?,
        kind: MemoryKind::parse(&kind).unwrap_or_default(),
        scope: Scope { kind: ScopeKind::parse(&scope).unwrap_or_default(), id: row.get(4)? },
        speaker: row.get(5)?,
        text: row.get(6)?,
        session: row.get(7)?,
        seq: row.get(8)?,
        fiction_time: row.get(9)?,
        time: row.get(10)?,
        witnesses: Vec::new(),
        source: row.get(11)?,
        pinned: row.get::<_, i64>(12)? != 0,
        edited_at: row.get(13)?,
    })
}

/// Normalise a time given by a user or an import: RFC 3339 stays as is (in UTC), a bare
/// date becomes midnight UTC, anything else is kept verbatim (still shown, never compared).
/// Whether `text` is a time [`normalise_time`] understands (not kept as it came).
pub fn is_time(text: &str) -> bool {
    let normalised = normalise_time(text);
    normalised.ends_with('Z') && chrono::DateTime::parse_from_rfc3339(&normalised).is_ok()
}

pub fn normalise_time(text: &str) -> String {
    let t = text.trim();
    if let Ok(dt) = chrono::DateTime::parse_from_rfc3339(t) {
        return dt.with_timezone(&chrono::Utc).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    }
    if let Ok(dt) = chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%d %H:%M") {
        return dt.and_utc().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    }
    if let Ok(dt) = chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%dT%H:%M:%S") {
        return dt.and_utc().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        if let Some(dt) = d.and_hms_opt(0, 0, 0) {
            return dt.and_utc().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        }
    }
    t.to_string()
}

/// What [`insert_replacing`] wrote.
pub struct Inserted {
    pub rowids: Vec<i64>,
    pub ids: Vec<String>,
    /// Rowids of older memories replaced because they had the same id (a re-import),
    /// whose vectors the caller must drop.
    pub replaced: Vec<i64>,
}

/// Insert memories in the caller's transaction. An id already present is replaced
/// (re-importing a file updates rather than duplicates). Only the bank's write
/// protocol calls this (`PreparedMemories::write`).
pub(crate) fn insert_replacing(conn: &Connection, items: &[NewMemory]) -> Result<Inserted, StoreError> {
    let mut next_seq: i64 = conn.query_row("SELECT coalesce(max(seq), 0) + 1 FROM memories", [], |r| r.get(0))?;
    let now = now_rfc3339();
    let mut insert = conn.prepare_cached(
        "INSERT INTO memories(id, kind, scope, scope_id, speaker, text, session, seq, fiction_time, time, created_at, source, content_hash)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )?;
    let mut witness = conn.prepare_cached("INSERT OR IGNORE INTO memory_witnesses(memory_rowid, witness) VALUES (?1, ?2)")?;
    let mut existing = conn.prepare_cached("SELECT rowid FROM memories WHERE id = ?1")?;
    let mut rowids = Vec::with_capacity(items.len());
    let mut ids = Vec::with_capacity(items.len());
    let mut replaced = Vec::new();
    for item in items {
        let id = item.id.clone().filter(|s| !s.trim().is_empty()).unwrap_or_else(new_id);
        if let Some(old) = existing.query_row([&id], |r| r.get::<_, i64>(0)).optional()? {
            conn.execute("DELETE FROM memories WHERE rowid = ?1", [old])?;
            replaced.push(old);
        }
        let time = item.time.as_deref().map(normalise_time).unwrap_or_else(|| now.clone());
        insert.execute(params![
            id,
            item.kind.as_str(),
            item.scope.kind.as_str(),
            item.scope.id,
            item.speaker.as_deref().map(str::trim).filter(|s| !s.is_empty()),
            item.text,
            item.session,
            next_seq,
            item.fiction_time,
            time,
            now,
            item.source,
            item.content_hash,
        ])?;
        next_seq += 1;
        let rowid = conn.last_insert_rowid();
        for w in item.witnesses.iter().map(|w| w.trim()).filter(|w| !w.is_empty()) {
            witness.execute(params![rowid, w])?;
        }
        rowids.push(rowid);
        ids.push(id);
    }
    Ok(Inserted { rowids, ids, replaced })
}

/// Rename a witness: what `from` witnessed or said (in `scope` only, or everywhere with
/// `None`) is witnessed or said by `to` instead (a speaker recalls what it said). A
/// character that changes its name keeps what it saw, and someone later given the old
/// name does not inherit it. Returns how many witness and speaker rows changed.
pub fn rename_witness(conn: &Connection, scope: Option<&Scope>, from: &str, to: &str) -> Result<usize, StoreError> {
    let (from, to) = (from.trim(), to.trim());
    if from.is_empty() || to.is_empty() || from == to {
        return Ok(0);
    }
    let within = if scope.is_some() { "AND memory_rowid IN (SELECT rowid FROM memories WHERE scope = ?3 AND scope_id IS ?4)" } else { "AND ?3 IS ?3 AND ?4 IS ?4" };
    let (kind, id) = scope.map_or((None, None), |s| (Some(s.kind.as_str()), s.id.clone()));
    // Renamed where the memory does not already have `to`; the rest (it does) go.
    let renamed = conn.execute(
        &format!("UPDATE OR IGNORE memory_witnesses SET witness = ?2 WHERE witness = ?1 COLLATE NOCASE {within}"),
        params![from, to, kind, id],
    )?;
    let dropped = conn.execute(
        &format!("DELETE FROM memory_witnesses WHERE witness = ?1 COLLATE NOCASE AND witness != ?2 {within}"),
        params![from, to, kind, id],
    )?;
    let own = if scope.is_some() { "AND scope = ?3 AND scope_id IS ?4" } else { "AND ?3 IS ?3 AND ?4 IS ?4" };
    let spoken = conn.execute(&format!("UPDATE memories SET speaker = ?2 WHERE speaker = ?1 COLLATE NOCASE {own}"), params![from, to, kind, id])?;
    Ok(renamed + dropped + spoken)
}

/// Tell `witness` about a memory (they now recall it too).
pub fn add_witness(conn: &Connection, memory_id: &str, witness: &str) -> Result<(), StoreError> {
    let changed = conn.execute(
        "INSERT OR IGNORE INTO memory_witnesses(memory_rowid, witness) SELECT rowid, ?2 FROM memories WHERE id = ?1",
        params![memory_id, witness.trim()],
    )?;
    if changed == 0 {
        let known: bool = conn.query_row("SELECT EXISTS(SELECT 1 FROM memories WHERE id = ?1)", [memory_id], |r| r.get(0))?;
        if !known {
            return Err(StoreError::NotFound(format!("memory {memory_id}")));
        }
    }
    Ok(())
}

/// Fetch memories by rowid (in the given order), with their witnesses.
pub fn load(conn: &Connection, rowids: &[i64]) -> Result<Vec<Memory>, StoreError> {
    let mut by_row = conn.prepare_cached(&format!("SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.rowid = ?1"))?;
    let mut witnesses = conn.prepare_cached("SELECT witness FROM memory_witnesses WHERE memory_rowid = ?1 ORDER BY witness")?;
    let mut out = Vec::with_capacity(rowids.len());
    for &rowid in rowids {
        if let Some(mut m) = by_row.query_row([rowid], memory_from_row).optional()? {
            m.witnesses = witnesses.query_map([rowid], |r| r.get(0))?.collect::<Result<_, _>>()?;
            out.push(m);
        }
    }
    Ok(out)
}

/// Whether a summary already covers any memory written from `source` (a summary
/// cannot be taken apart, so such memories are no longer undone).
pub fn any_summarised(conn: &Connection, source: &str) -> Result<bool, StoreError> {
    Ok(conn.query_row("SELECT EXISTS(SELECT 1 FROM memories WHERE source = ?1 AND summarised = 1)", [source], |r| r.get(0))?)
}

/// The rowid of memory `id`, if there is one.
pub fn rowid_of(conn: &Connection, id: &str) -> Result<Option<i64>, StoreError> {
    Ok(conn.query_row("SELECT rowid FROM memories WHERE id = ?1", [id], |r| r.get(0)).optional()?)
}

/// The memory with `id`, if any.
pub fn get(conn: &Connection, id: &str) -> Result<Option<Memory>, StoreError> {
    Ok(match rowid_of(conn, id)? {
        Some(r) => load(conn, &[r])?.pop(),
        None => None,
    })
}

/// The turns around `memory` in its session: up to `before` earlier and `after` later.
pub fn context(conn: &Connection, memory: &Memory, before: usize, after: usize) -> Result<Vec<Memory>, StoreError> {
    let mut earlier: Vec<i64> = conn
        .prepare_cached("SELECT rowid FROM memories WHERE session IS ?1 AND kind = 'turn' AND seq < ?2 ORDER BY seq DESC LIMIT ?3")?
        .query_map(params![memory.session, memory.seq, before as i64], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    earlier.reverse();
    let later: Vec<i64> = conn
        .prepare_cached("SELECT rowid FROM memories WHERE session IS ?1 AND kind = 'turn' AND seq > ?2 ORDER BY seq LIMIT ?3")?
        .query_map(params![memory.session, memory.seq, after as i64], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let mut ids = earlier;
    ids.push(memory.rowid);
    ids.extend(later);
    load(conn, &ids)
}

/// Vectors are stored as little-endian f32 bytes.
pub fn vector_to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn blob_to_vector(blob: &[u8]) -> Option<Vec<f32>> {
    if blob.len() % 4 != 0 {
        return None;
    }
    Some(blob.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

pub fn store_vectors(conn: &Connection, model: &str, items: &[(i64, &[f32])]) -> Result<(), StoreError> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO memory_vectors(memory_rowid, model, dim, vector) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(memory_rowid) DO UPDATE SET model = excluded.model, dim = excluded.dim, vector = excluded.vector",
    )?;
    for (rowid, v) in items {
        stmt.execute(params![rowid, model, v.len() as i64, vector_to_blob(v)])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {

    /// What a search's time bounds accept; anything else is refused, not compared as text.
    #[test]
    fn a_time_is_a_date_an_hour_or_rfc3339() {
        for t in ["2024-05-01", "2024-05-01 10:30", "2024-05-01T10:30:00", "2024-05-01T10:30:00+02:00"] {
            assert!(is_time(t), "{t}");
        }
        for t in ["notadate", "2024-99-99", "yesterday-ish", ""] {
            assert!(!is_time(t), "{t}");
        }
    }

    use super::*;

    #[test]
    fn scopes_parse_and_print() {
        assert_eq!(Scope::parse("character:mira"), Some(Scope::character("mira")));
        assert_eq!(Scope::parse("World"), Some(Scope::world()));
        assert_eq!(Scope::parse("planet:x"), None);
        assert_eq!(Scope::character("mira").to_string(), "character:mira");
    }

    #[test]
    fn times_normalise_to_utc_and_keep_free_text() {
        assert_eq!(normalise_time("2024-03-02"), "2024-03-02T00:00:00Z");
        assert_eq!(normalise_time("2024-03-02T10:00:00+02:00"), "2024-03-02T08:00:00Z");
        assert_eq!(normalise_time("the third day of Frostmoon"), "the third day of Frostmoon");
    }

    #[test]
    fn vectors_round_trip_through_blobs() {
        let v = vec![0.5f32, -1.25, 3.0];
        assert_eq!(blob_to_vector(&vector_to_blob(&v)), Some(v));
        assert_eq!(blob_to_vector(&[1, 2, 3]), None);
    }
}
