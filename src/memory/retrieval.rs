//! Hybrid retrieval: keyword (FTS5 BM25) and vector candidates, fused, with every hit
//! carrying its keyword score, vector score, fused score and rank so a game master can
//! see why it was recalled.

use crate::config::{Fusion, RetrievalConfig};
use super::records::{MemoryKind, Scope};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    #[default]
    Hybrid,
    Keyword,
    Vector,
}

impl SearchMode {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "hybrid" => Some(SearchMode::Hybrid),
            "keyword" => Some(SearchMode::Keyword),
            "vector" => Some(SearchMode::Vector),
            _ => None,
        }
    }
}

/// What to search and where.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SearchFilter {
    /// Only this scope (an id of `None` matches every id of that kind).
    pub scope: Option<Scope>,
    /// Only these kinds (empty: all).
    pub kinds: Vec<MemoryKind>,
    pub speaker: Option<String>,
    /// Only what this character witnessed or was told (or common knowledge).
    pub witness: Option<String>,
    /// With `witness`: only what they witnessed, said or were told, not common knowledge
    /// (a chat recalls the scenes its character played, not every campaign's facts).
    pub witnessed_only: bool,
    pub session: Option<String>,
    /// Inclusive time range, RFC 3339 or a date.
    pub time_from: Option<String>,
    pub time_to: Option<String>,
}

impl SearchFilter {
    pub fn is_empty(&self) -> bool {
        *self == SearchFilter::default()
    }

    /// SQL conditions on `memories m` and their parameters.
    pub(crate) fn sql(&self) -> (String, Vec<rusqlite::types::Value>) {
        use rusqlite::types::Value;
        let mut conds: Vec<String> = Vec::new();
        let mut params: Vec<Value> = Vec::new();
        let mut bind = |conds: &mut Vec<String>, sql: &str, v: Value| {
            params.push(v);
            conds.push(sql.replace('?', &format!("?{}", params.len())));
        };
        if let Some(scope) = &self.scope {
            bind(&mut conds, "m.scope = ?", Value::Text(scope.kind.as_str().into()));
            if let Some(id) = &scope.id {
                bind(&mut conds, "m.scope_id = ?", Value::Text(id.clone()));
            }
        }
        if !self.kinds.is_empty() {
            let list: Vec<String> = self.kinds.iter().map(|k| format!("'{}'", k.as_str())).collect();
            conds.push(format!("m.kind IN ({})", list.join(", ")));
        }
        if let Some(s) = &self.speaker {
            bind(&mut conds, "m.speaker = ? COLLATE NOCASE", Value::Text(s.clone()));
        }
        if let Some(w) = &self.witness {
            let common = if self.witnessed_only { "" } else { "OR NOT EXISTS (SELECT 1 FROM memory_witnesses x WHERE x.memory_rowid = m.rowid) " };
            bind(
                &mut conds,
                &format!(
                    "(m.speaker = ? COLLATE NOCASE {common}\
                     OR EXISTS (SELECT 1 FROM memory_witnesses x WHERE x.memory_rowid = m.rowid AND x.witness = ? COLLATE NOCASE))"
                ),
                Value::Text(w.clone()),
            );
        }
        if let Some(s) = &self.session {
            bind(&mut conds, "m.session = ?", Value::Text(s.clone()));
        }
        if let Some(t) = &self.time_from {
            bind(&mut conds, "m.time >= ?", Value::Text(super::records::normalise_time(t)));
        }
        if let Some(t) = &self.time_to {
            let mut end = super::records::normalise_time(t);
            // A bare date as the upper bound means the whole day.
            if end.ends_with("T00:00:00Z") && t.trim().len() == 10 {
                end = end.replace("T00:00:00Z", "T23:59:59Z");
            }
            bind(&mut conds, "m.time <= ?", Value::Text(end));
        }
        (if conds.is_empty() { "1".into() } else { conds.join(" AND ") }, params)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchRequest {
    pub query: String,
    pub k: usize,
    #[serde(default)]
    pub mode: SearchMode,
    #[serde(default)]
    pub filter: SearchFilter,
}

impl SearchRequest {
    pub fn new(query: impl Into<String>, k: usize) -> Self {
        Self { query: query.into(), k, mode: SearchMode::Hybrid, filter: SearchFilter::default() }
    }
}

/// One recalled memory and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrievalHit {
    pub id: String,
    pub text: String,
    pub speaker: Option<String>,
    /// The fused score the list is ordered by.
    pub score: f32,
    /// BM25 relevance (higher is better), if the keyword search found it.
    pub keyword_score: Option<f32>,
    /// Cosine similarity to the query, if the vector search found it.
    pub vector_score: Option<f32>,
    /// 1-based position in the fused list.
    pub rank: usize,
    pub keyword_rank: Option<usize>,
    pub vector_rank: Option<usize>,
    pub kind: MemoryKind,
    pub scope: Scope,
    pub session: Option<String>,
    pub time: Option<String>,
    /// Pinned by the user: injected whatever the query (see `memory::curate`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
    /// The user changed its text.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub edited: bool,
}

impl RetrievalHit {
    /// `m` as a hit at `rank`, with its scores from the lists that found it.
    pub fn of(m: &crate::memory::records::Memory, rank: usize, fused: &Fused) -> Self {
        RetrievalHit {
            id: m.id.clone(),
            text: m.text.clone(),
            speaker: m.speaker.clone(),
            score: fused.score,
            keyword_score: fused.keyword.map(|k| k.1),
            vector_score: fused.vector.map(|v| v.1),
            rank,
            keyword_rank: fused.keyword.map(|k| k.0),
            vector_rank: fused.vector.map(|v| v.0),
            kind: m.kind,
            scope: m.scope.clone(),
            session: m.session.clone(),
            time: m.time.clone(),
            pinned: m.pinned,
            edited: m.edited_at.is_some(),
        }
    }
}

/// One list's candidate: rowid and raw score (higher is better).
pub type Candidate = (i64, f32);

/// Scores of one memory across the lists, before ranking.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Fused {
    pub score: f32,
    pub keyword: Option<(usize, f32)>,
    pub vector: Option<(usize, f32)>,
}

/// Merge the two ranked lists (best first) into fused scores by rowid.
pub fn fuse(keyword: &[Candidate], vector: &[Candidate], config: &RetrievalConfig) -> Vec<(i64, Fused)> {
    let mut out: std::collections::HashMap<i64, Fused> = std::collections::HashMap::new();
    // Normalise each list by its best score: BM25 and cosine live on different scales.
    let kw_max = keyword.iter().map(|c| c.1).fold(0f32, f32::max);
    let vec_max = vector.iter().map(|c| c.1).fold(0f32, f32::max);
    let norm_kw = |s: f32| if kw_max > 0.0 { s / kw_max } else { 0.0 };
    let norm_vec = |s: f32| if vec_max > 0.0 { (s / vec_max).max(0.0) } else { 0.0 };
    for (rank, &(rowid, s)) in keyword.iter().enumerate() {
        let f = out.entry(rowid).or_default();
        f.keyword = Some((rank + 1, s));
        f.score += match config.fusion {
            Fusion::Rrf => config.keyword_weight / (config.rrf_k + rank as f32 + 1.0),
            Fusion::Weighted => config.keyword_weight * norm_kw(s),
        };
    }
    for (rank, &(rowid, s)) in vector.iter().enumerate() {
        let f = out.entry(rowid).or_default();
        f.vector = Some((rank + 1, s));
        f.score += match config.fusion {
            Fusion::Rrf => config.vector_weight / (config.rrf_k + rank as f32 + 1.0),
            Fusion::Weighted => config.vector_weight * norm_vec(s),
        };
    }
    let mut list: Vec<(i64, Fused)> = out.into_iter().collect();
    sort_fused(&mut list);
    list
}

/// Best first; ties broken by rowid so the order is stable.
pub fn sort_fused(list: &mut [(i64, Fused)]) {
    list.sort_by(|a, b| b.1.score.partial_cmp(&a.1.score).unwrap_or(std::cmp::Ordering::Equal).then(a.0.cmp(&b.0)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rrf_rewards_agreement_between_the_lists() {
        let config = RetrievalConfig { fusion: Fusion::Rrf, ..Default::default() };
        let fused = fuse(&[(1, 9.0), (2, 5.0)], &[(2, 0.9), (3, 0.8)], &config);
        assert_eq!(fused[0].0, 2, "{fused:?}");
        assert_eq!(fused[0].1.keyword, Some((2, 5.0)));
        assert_eq!(fused[0].1.vector, Some((1, 0.9)));
    }

    #[test]
    fn weighted_fusion_follows_the_weights() {
        let only_vectors = RetrievalConfig { keyword_weight: 0.0, vector_weight: 1.0, ..Default::default() };
        let fused = fuse(&[(1, 9.0)], &[(2, 0.9), (1, 0.2)], &only_vectors);
        assert_eq!(fused[0].0, 2);
        let only_keywords = RetrievalConfig { keyword_weight: 1.0, vector_weight: 0.0, ..Default::default() };
        let fused = fuse(&[(1, 9.0)], &[(2, 0.9), (1, 0.2)], &only_keywords);
        assert_eq!(fused[0].0, 1);
    }

    #[test]
    fn filters_become_bound_parameters() {
        let filter = SearchFilter {
            scope: Some(Scope::character("mira")),
            speaker: Some("x'); DROP TABLE memories; --".into()),
            time_to: Some("2024-03-02".into()),
            ..Default::default()
        };
        let (sql, params) = filter.sql();
        assert!(!sql.contains("DROP"));
        assert_eq!(params.len(), 4);
        assert!(sql.contains("m.time <= ?4"));
    }
}
