//! Hybrid search: keyword candidates (FTS5, rarest terms first within a row budget),
//! vector candidates (graph or exact, filtered in the cheapest order), fused.

use super::MemoryBank;
use crate::memory::MemoryError;
use crate::memory::keyword;
use crate::memory::records::{self, Memory};
use crate::memory::retrieval::{Candidate, Fused, RetrievalHit, SearchFilter, SearchMode, SearchRequest, fuse};
use rusqlite::params_from_iter;
use std::collections::{HashMap, HashSet};

/// Whatever a caller asks for, one search (or listing) returns at most this many hits.
const MAX_K: usize = 1000;

/// `WITH wanted(r) AS (VALUES ...)` over `rowids`, or `None` when there are none. Join
/// it first, with CROSS JOIN, to look each row up by rowid: with a plain
/// `rowid IN (...)` beside a filter SQLite preferred the (kind, scope, scope_id) index
/// and walked every row of the character's scope (13 ms at 100k instead of ~0.1 ms).
/// Rowids are integers from the library or the index, so they can be written into SQL.
fn wanted_rows(rowids: impl Iterator<Item = i64>) -> Option<String> {
    let values: Vec<String> = rowids.map(|r| format!("({r})")).collect();
    (!values.is_empty()).then(|| format!("WITH wanted(r) AS (VALUES {})", values.join(",")))
}

/// How far past the keyword budget a term's matches are counted (see
/// [`MemoryBank::keyword_terms`]).
const COUNT_CAP: usize = 4;

/// How many of the best fused candidates a hybrid search weighs (`weigh_turns`): on the
/// evaluation sets, 80 gives the same recall as weighing all of them (up to 200), and 50
/// loses 0.006.
const WEIGH_DEPTH: usize = 80;

/// A filter that keeps at most this many memories is searched by reading their vectors
/// from the library (a few hundred µs) instead of testing every row of the index.
const SMALL_SUBSET: usize = 2048;

impl MemoryBank {
    /// Keyword candidates: `(rowid, -bm25)`, best first.
    pub fn keyword_candidates(&self, query: &str, filter: &SearchFilter, n: usize) -> Result<Vec<Candidate>, MemoryError> {
        let terms = self.keyword_terms(query)?;
        let Some(fts) = keyword::fts_expression(&terms) else { return Ok(Vec::new()) };
        let (cond, mut params) = filter.sql();
        params.push(rusqlite::types::Value::Text(fts));
        let q = params.len();
        let budget = self.config().retrieval.keyword_max_rows;
        // BM25 costs ~1 µs for every row it ranks. When even the rarest terms match more
        // rows than the budget (a common word in a million memories), only the newest
        // `budget` of them are ranked: the floor is found by walking the doclists
        // newest first without ranking (~0.05 µs a row), and FTS5 seeks past the rest.
        let floor = if budget > 0 { self.keyword_floor(filter, &params, q, budget)? } else { None };
        params.push(rusqlite::types::Value::Integer(floor.unwrap_or(i64::MIN)));
        params.push(rusqlite::types::Value::Integer(n as i64));
        let sql = if filter.is_empty() {
            // No filter, no join: each matching row would otherwise be looked up in
            // `memories` before the ranking.
            format!(
                "SELECT rowid, -bm25(memory_fts) FROM memory_fts WHERE memory_fts MATCH ?{q} AND rowid >= ?{} \
                 ORDER BY bm25(memory_fts) LIMIT ?{}",
                q + 1,
                q + 2
            )
        } else {
            format!(
                "SELECT m.rowid, -bm25(memory_fts) FROM memory_fts JOIN memories m ON m.rowid = memory_fts.rowid \
                 WHERE memory_fts MATCH ?{q} AND memory_fts.rowid >= ?{} AND {cond} ORDER BY bm25(memory_fts) LIMIT ?{}",
                q + 1,
                q + 2
            )
        };
        self.with_reader(|c| {
            let mut stmt = c.prepare_cached(&sql)?;
            let rows = stmt.query_map(params_from_iter(params.iter()), |r| Ok((r.get::<_, i64>(0)?, r.get::<_, f64>(1)? as f32)))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// The rowid of the `budget`-th newest row matching the MATCH expression `?q` of
    /// `params` (and the filter), or `None` when fewer rows match.
    fn keyword_floor(
        &self,
        filter: &SearchFilter,
        params: &[rusqlite::types::Value],
        q: usize,
        budget: usize,
    ) -> Result<Option<i64>, MemoryError> {
        let (cond, _) = filter.sql();
        let offset = budget as i64 - 1;
        let sql = if filter.is_empty() {
            format!("SELECT rowid FROM memory_fts WHERE memory_fts MATCH ?{q} ORDER BY rowid DESC LIMIT 1 OFFSET {offset}")
        } else {
            format!(
                "SELECT m.rowid FROM memory_fts JOIN memories m ON m.rowid = memory_fts.rowid \
                 WHERE memory_fts MATCH ?{q} AND {cond} ORDER BY memory_fts.rowid DESC LIMIT 1 OFFSET {offset}"
            )
        };
        self.with_reader(|c| {
            use rusqlite::OptionalExtension;
            let mut stmt = c.prepare_cached(&sql)?;
            Ok(stmt.query_row(params_from_iter(params.iter()), |r| r.get::<_, i64>(0)).optional()?)
        })
    }

    /// The terms of `query` a keyword search uses: with more than one, each is counted
    /// (an FTS count reads its doclist without ranking it, ~0.05 ms per thousand rows)
    /// and they are chosen by [`keyword::choose_terms`] within `keyword_max_rows`.
    /// A count stops at `COUNT_CAP` × the budget: past it a term is kept only as the
    /// rarest of its query, and reading a common word's whole doclist in a million
    /// memories (100k rows, ~5 ms) to learn that would cost more than the search.
    pub fn keyword_terms(&self, query: &str) -> Result<Vec<String>, MemoryError> {
        let terms = keyword::query_terms(query);
        let budget = self.config().retrieval.keyword_max_rows;
        if terms.len() < 2 || budget == 0 {
            return Ok(terms);
        }
        let counted = self.with_reader(|c| {
            let mut stmt = c.prepare_cached("SELECT count(*) FROM (SELECT 1 FROM memory_fts WHERE memory_fts MATCH ?1 LIMIT ?2)")?;
            let cap = (budget * COUNT_CAP) as i64;
            terms
                .iter()
                .map(|t| Ok((t.clone(), stmt.query_row(rusqlite::params![format!("\"{t}\""), cap], |r| r.get::<_, i64>(0))? as usize)))
                .collect::<Result<Vec<_>, MemoryError>>()
        })?;
        let (kept, left_out) = keyword::choose_terms(&counted, budget);
        if !left_out.is_empty() {
            tracing::debug!(?kept, ?left_out, budget, "keyword search left out its most common terms");
        }
        Ok(kept)
    }

    /// The rowids passing `filter`, or `None` when it passes everything.
    fn allowed(&self, filter: &SearchFilter) -> Result<Option<HashSet<i64>>, MemoryError> {
        if filter.is_empty() {
            return Ok(None);
        }
        let (cond, params) = filter.sql();
        self.with_reader(|c| {
            let mut stmt = c.prepare_cached(&format!("SELECT m.rowid FROM memories m WHERE {cond}"))?;
            let rows = stmt.query_map(params_from_iter(params.iter()), |r| r.get::<_, i64>(0))?;
            Ok(Some(rows.collect::<Result<HashSet<_>, _>>()?))
        })
    }

    /// Vector candidates for an embedded query: `(rowid, cosine)`, best first.
    ///
    /// A filter is applied in the cheapest order for its selectivity. First the graph is
    /// searched unfiltered for a few times `n` and the filter checked on just those rows
    /// (one query): a broad filter (the memories of the character most of the library is
    /// about) is done there, without listing its 100k rows. Otherwise the filter is
    /// listed and, when it keeps few rows, only those are scored exactly.
    pub fn vector_candidates(&self, query: &[f32], filter: &SearchFilter, n: usize) -> Result<Vec<Candidate>, MemoryError> {
        // What other processes wrote is searched as soon as it is committed.
        self.sync_before_search();
        let index = &self.index;
        if filter.is_empty() {
            return Ok(index.search(query, n, &|_| true));
        }
        let wide = index.search(query, n.saturating_mul(4), &|_| true);
        let passing = self.passing(filter, wide.iter().map(|c| c.0))?;
        let offered = wide.len().min(n);
        let hits: Vec<Candidate> = wide.into_iter().filter(|c| passing.contains(&c.0)).take(n).collect();
        // The graph offers at most its `ef_search` candidates, filtered or not: when most
        // of them pass, they are what a filtered graph search would have returned.
        if hits.len() == n || (!hits.is_empty() && hits.len() * 2 >= offered) {
            return Ok(hits);
        }
        let allowed = self.allowed(filter)?.unwrap_or_default();
        if allowed.len() <= SMALL_SUBSET {
            // A character's lore among 100k memories: read those few vectors from the
            // library and score them, rather than test every row of the index.
            return self.score_rows(query, n, &allowed);
        }
        if allowed.len() <= index.live() / 8 {
            // Few enough to look each one up and score it exactly.
            return Ok(index.search_subset(query, n, &allowed));
        }
        let keep = |r: i64| allowed.contains(&r);
        Ok(index.search(query, n, &keep))
    }

    /// Exact scores of `rowids`' stored vectors (of the current model): `(rowid,
    /// cosine)`, best `n` first.
    fn score_rows(&self, query: &[f32], n: usize, rowids: &HashSet<i64>) -> Result<Vec<Candidate>, MemoryError> {
        let Some(wanted) = wanted_rows(rowids.iter().copied()) else { return Ok(Vec::new()) };
        let sql = format!(
            "{wanted} SELECT v.memory_rowid, v.vector FROM wanted \
             CROSS JOIN memory_vectors v ON v.memory_rowid = wanted.r WHERE v.model = ?1 AND v.dim = ?2"
        );
        let model = self.model_id();
        let mut scored: Vec<Candidate> = self.with_reader(|c| {
            let mut stmt = c.prepare(&sql)?;
            let mut rows = stmt.query(rusqlite::params![model, query.len() as i64])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                let blob: Vec<u8> = row.get(1)?;
                if let Some(v) = records::blob_to_vector(&blob) {
                    out.push((row.get::<_, i64>(0)?, crate::memory::vectors::dot(query, &v)));
                }
            }
            Ok(out)
        })?;
        scored.sort_by(|a, b| b.1.total_cmp(&a.1));
        scored.truncate(n);
        Ok(scored)
    }

    /// Which of `rowids` pass `filter` (one query, however many rows the filter keeps).
    pub(super) fn passing(&self, filter: &SearchFilter, rowids: impl Iterator<Item = i64>) -> Result<HashSet<i64>, MemoryError> {
        let Some(wanted) = wanted_rows(rowids) else { return Ok(HashSet::new()) };
        let (cond, params) = filter.sql();
        let sql = format!("{wanted} SELECT m.rowid FROM wanted CROSS JOIN memories m ON m.rowid = wanted.r WHERE {cond}");
        self.with_reader(|c| {
            let mut stmt = c.prepare(&sql)?;
            let rows = stmt.query_map(params_from_iter(params.iter()), |r| r.get::<_, i64>(0))?;
            Ok(rows.collect::<Result<HashSet<_>, _>>()?)
        })
    }

    /// Hybrid (or single-list) search. Any query text is valid.
    pub fn search(&self, request: &SearchRequest) -> Result<Vec<RetrievalHit>, MemoryError> {
        // Before the query is stripped of speakers' names: another process may have
        // brought new speakers.
        if request.mode != SearchMode::Keyword {
            self.sync_before_search();
        }
        let vector = match request.mode {
            SearchMode::Keyword => None,
            _ if request.query.trim().is_empty() => None,
            _ => Some(self.embedder()?.embed_query(&self.vector_query(&request.query)?)?),
        };
        self.search_with_vector(request, vector.as_deref())
    }

    /// The `k` memories written last that `filter` keeps, newest first: what a person's
    /// search with no query lists (`memory search ""`, the memory browser), so a library
    /// can be browsed before anything is asked of it. No list scored them: a hit has no
    /// keyword or vector score. (Agents' recall never lists by age: an empty query of
    /// theirs finds nothing.)
    pub fn newest(&self, filter: &SearchFilter, k: usize) -> Result<Vec<RetrievalHit>, MemoryError> {
        let (cond, mut params) = filter.sql();
        params.push(rusqlite::types::Value::Integer(k.min(MAX_K) as i64));
        let memories = self.with_reader(|c| {
            let sql = format!("SELECT m.rowid FROM memories m WHERE {cond} ORDER BY m.rowid DESC LIMIT ?{}", params.len());
            let rowids: Vec<i64> = c.prepare_cached(&sql)?.query_map(params_from_iter(params.iter()), |r| r.get(0))?.collect::<Result<_, _>>()?;
            let mut memories = records::load(c, &rowids)?;
            memories.sort_by_key(|m| std::cmp::Reverse(m.rowid));
            Ok(memories)
        })?;
        let unscored = Fused { score: 0.0, keyword: None, vector: None };
        Ok(memories.iter().enumerate().map(|(i, m)| RetrievalHit::of(m, i + 1, &unscored)).collect())
    }

    /// Search with a query vector computed by the caller (benchmarks with synthetic
    /// vectors; callers that embed once and search several scopes).
    pub fn search_with_vector(&self, request: &SearchRequest, query_vector: Option<&[f32]>) -> Result<Vec<RetrievalHit>, MemoryError> {
        let capped;
        let request = if request.k > MAX_K {
            capped = SearchRequest { k: MAX_K, ..request.clone() };
            &capped
        } else {
            request
        };
        let config = self.config().retrieval;
        let n = config.candidates.max(request.k);
        let vector_query = match (request.mode, query_vector) {
            (SearchMode::Keyword, _) => None,
            (_, q) => q,
        };
        let (keyword, vector) = match (request.mode, vector_query) {
            (SearchMode::Vector, q) => (Vec::new(), q.map(|q| self.vector_candidates(q, &request.filter, n)).transpose()?.unwrap_or_default()),
            (_, None) => (self.keyword_candidates(&request.query, &request.filter, n)?, Vec::new()),
            (_, Some(q)) if self.index.live() >= config.parallel_lists_from => {
                // The two lists share nothing but the library's reader, which each takes
                // per statement (`retrieval.parallel_lists_from` says why and when).
                std::thread::scope(|scope| {
                    let keyword = scope.spawn(|| self.keyword_candidates(&request.query, &request.filter, n));
                    let vector = self.vector_candidates(q, &request.filter, n);
                    let keyword = keyword.join().map_err(|_| MemoryError::Invalid("the keyword search stopped".into()))?;
                    Ok::<_, MemoryError>((keyword?, vector?))
                })?
            }
            (_, Some(q)) => (self.keyword_candidates(&request.query, &request.filter, n)?, self.vector_candidates(q, &request.filter, n)?),
        };
        let mut fused = fuse(&keyword, &vector, &config);
        if let (SearchMode::Hybrid, Some(q), crate::config::Fusion::Weighted) = (request.mode, vector_query, config.fusion)
            && !vector.is_empty()
        {
            // A keyword hit the vector list did not reach still has a vector: its cosine is
            // read and weighed as the list's are, so an exact rare word ("4321", a name)
            // is not held to the keyword share under a hundred vaguely similar turns.
            let vec_max = vector.iter().map(|c| c.1).fold(0f32, f32::max);
            let mut rescored = false;
            for (rowid, f) in fused.iter_mut() {
                if f.vector.is_none()
                    && f.keyword.is_some()
                    && vec_max > 0.0
                    && let Some(v) = self.index.vector(*rowid)
                {
                    let cosine = crate::memory::vectors::dot(q, &v);
                    f.score += config.vector_weight * (cosine / vec_max).max(0.0);
                    f.vector = Some((vector.len() + 1, cosine));
                    rescored = true;
                }
            }
            if rescored {
                crate::memory::retrieval::sort_fused(&mut fused);
            }
        }
        if request.mode == SearchMode::Hybrid && !vector.is_empty() && config.keyword_weight > 0.0 {
            // A memory kept without a vector (written while the model could not run, or
            // before a switch of model was reindexed) can only score through its words:
            // it is weighed by the keyword list alone, not left at the keyword list's
            // share, where any weak vector-only hit outranked an exact match.
            let whole = (config.keyword_weight + config.vector_weight) / config.keyword_weight;
            let mut rescored = false;
            for (rowid, f) in fused.iter_mut() {
                if f.vector.is_none() && f.keyword.is_some() && !self.index.contains(*rowid) {
                    f.score *= whole;
                    rescored = true;
                }
            }
            if rescored {
                crate::memory::retrieval::sort_fused(&mut fused);
            }
        }
        if request.mode == SearchMode::Hybrid
            && (config.short_turn_words > 0 || config.length_prior > 0.0 || config.speaker_boost > 0.0 || config.session_support > 0.0)
        {
            // Only the head of the list can reach the top k once weighed (the priors move
            // a score by a few times at most): reading every candidate's row would cost
            // more than the rest of the search at a million memories.
            fused.truncate(WEIGH_DEPTH.max(request.k));
            self.weigh_turns(&mut fused, &request.query, &config)?;
        }
        if config.time_boost > 0.0 && request.mode == SearchMode::Hybrid {
            let months = crate::memory::temporal::query_months(&request.query);
            if !months.is_empty() {
                self.boost_months(&mut fused, &months, config.time_boost)?;
            }
        }
        if config.neighbour_weight > 0.0 && request.mode == SearchMode::Hybrid {
            fused = self.spread_to_neighbours(fused, config.neighbour_weight, request.k, &request.filter)?;
        }
        // A candidate whose row is gone (deleted by another process after the vector
        // list was made) gives its place to the next one, not to nobody: cutting the list
        // at k first once left a search a hit short, its best keyword hit among those lost.
        let mut kept: Vec<(Memory, Fused)> = Vec::with_capacity(request.k);
        let mut rest = fused.into_iter().peekable();
        while kept.len() < request.k && rest.peek().is_some() {
            let chunk: Vec<(i64, Fused)> = rest.by_ref().take(request.k - kept.len()).collect();
            let rowids: Vec<i64> = chunk.iter().map(|f| f.0).collect();
            let memories = self.with_reader(|c| Ok(records::load(c, &rowids)?))?;
            let mut by_row: HashMap<i64, Memory> = memories.into_iter().map(|m| (m.rowid, m)).collect();
            kept.extend(chunk.into_iter().filter_map(|(rowid, f)| by_row.remove(&rowid).map(|m| (m, f))));
        }
        Ok(kept.iter().enumerate().map(|(i, (m, f))| RetrievalHit::of(m, i + 1, f)).collect())
    }
}
