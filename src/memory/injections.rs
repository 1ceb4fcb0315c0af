//! What each agent was given: the memories injected into an agent's most recent prompt.
//!
//! Every caller that puts retrieved memories into a prompt (the companion's memory bank,
//! a scene character's memories) records them here under an agent label, inside the
//! same transaction that commits the turn, so the memory browser shows exactly what went
//! out and never a hit from a turn that was discarded.

use super::retrieval::RetrievalHit;
use crate::store::{StoreError, now_rfc3339};
use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};

/// The memories of one agent's last prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Injection {
    /// Who was prompted, e.g. `companion:Mira` or `scene:character:Tobin`.
    pub agent: String,
    /// The text the memories were retrieved for.
    pub query: String,
    pub at: String,
    /// Best first, with their scores; empty when the agent got no memories.
    pub hits: Vec<RetrievalHit>,
}

/// Replace `agent`'s last injection. Call it on the connection (or transaction) that
/// commits the turn the prompt belongs to.
pub fn record(conn: &Connection, agent: &str, query: &str, hits: &[RetrievalHit]) -> Result<(), StoreError> {
    let json = serde_json::to_string(hits).map_err(|e| StoreError::Corrupt(format!("injection hits: {e}")))?;
    conn.execute(
        "INSERT INTO memory_injections(agent, query, at, hits) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT(agent) DO UPDATE SET query = excluded.query, at = excluded.at, hits = excluded.hits",
        params![agent, query, now_rfc3339(), json],
    )?;
    conn.execute(
        "INSERT INTO memory_injection_log(agent, query, at, hits) VALUES (?1, ?2, ?3, ?4)",
        params![agent, query, now_rfc3339(), json],
    )?;
    conn.execute(
        "DELETE FROM memory_injection_log WHERE agent = ?1 AND seq <= \
         (SELECT seq FROM memory_injection_log WHERE agent = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)",
        params![agent, KEPT_PER_AGENT],
    )?;
    Ok(())
}

/// Injections kept per agent in the log.
pub const KEPT_PER_AGENT: i64 = 200;

/// `agent`'s injections, newest first (at most `limit`).
pub fn history(conn: &Connection, agent: &str, limit: u32) -> Result<Vec<Injection>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT agent, query, at, hits FROM memory_injection_log WHERE agent = ?1 ORDER BY seq DESC LIMIT ?2")?;
    let rows = stmt.query_map(params![agent, limit], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (agent, query, at, hits) = row?;
        out.push(Injection { agent, query, at, hits: serde_json::from_str(&hits).unwrap_or_default() });
    }
    Ok(out)
}

/// Every agent's last injection, most recent first.
pub fn latest(conn: &Connection) -> Result<Vec<Injection>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT agent, query, at, hits FROM memory_injections ORDER BY at DESC, agent")?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?)))?;
    let mut out = Vec::new();
    for row in rows {
        let (agent, query, at, hits) = row?;
        // A row written by a newer version with another hit shape shows as no hits
        // rather than hiding every other agent's row.
        let hits = serde_json::from_str(&hits).unwrap_or_default();
        out.push(Injection { agent, query, at, hits });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryKind, Scope};

    fn hit(id: &str, rank: usize) -> RetrievalHit {
        RetrievalHit {
            id: id.into(),
            text: format!("memory {id}"),
            speaker: None,
            score: 1.0 / rank as f32,
            keyword_score: Some(2.0),
            vector_score: None,
            rank,
            keyword_rank: Some(rank),
            vector_rank: None,
            kind: MemoryKind::Summary,
            scope: Scope::world(),
            session: None,
            time: None,
            pinned: false,
            edited: false,
        }
    }

    #[test]
    fn the_last_injection_per_agent_replaces_the_previous_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path().join("lib.sqlite")).unwrap();
        store.with(|c| record(c, "companion:Mira", "first", &[hit("a", 1)])).unwrap();
        store.with(|c| record(c, "scene:director", "x", &[])).unwrap();
        store.with(|c| record(c, "companion:Mira", "second", &[hit("b", 1), hit("c", 2)])).unwrap();
        let all = store.with(latest).unwrap();
        assert_eq!(all.len(), 2);
        let mira = all.iter().find(|i| i.agent == "companion:Mira").unwrap();
        assert_eq!(mira.query, "second");
        assert_eq!(mira.hits.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(), ["b", "c"]);
    }

    #[test]
    fn every_injection_is_kept_in_the_log_newest_first_up_to_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path().join("lib.sqlite")).unwrap();
        for n in 0..(KEPT_PER_AGENT + 5) {
            store.with(|c| record(c, "companion:Mira", &format!("q{n}"), &[hit("a", 1)])).unwrap();
        }
        store.with(|c| record(c, "scene:character:Tobin", "other", &[])).unwrap();
        let log = store.with(|c| history(c, "companion:Mira", 1000)).unwrap();
        assert_eq!(log.len() as i64, KEPT_PER_AGENT);
        assert_eq!(log[0].query, format!("q{}", KEPT_PER_AGENT + 4));
        assert_eq!(store.with(|c| history(c, "scene:character:Tobin", 10)).unwrap().len(), 1);
    }

    #[test]
    fn an_injection_in_a_rolled_back_transaction_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path().join("lib.sqlite")).unwrap();
        let failed: Result<(), StoreError> = store.transaction(|tx| {
            record(tx, "companion:Mira", "q", &[hit("a", 1)])?;
            Err(StoreError::Corrupt("the reply was invalid".into()))
        });
        assert!(failed.is_err());
        assert!(store.with(latest).unwrap().is_empty());
    }
}
