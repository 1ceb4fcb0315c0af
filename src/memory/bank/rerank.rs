//! Query handling and re-ranking on top of the fused lists: what made hybrid beat both
//! keyword and vector search on the evaluation set (see `RetrievalConfig`).

use super::{MemoryBank, MemoryError};
use crate::config::RetrievalConfig;
use crate::memory::retrieval::{Fused, SearchFilter, sort_fused};
use rusqlite::OptionalExtension;
use std::collections::{HashMap, HashSet};

/// How many of the best hits say which sessions are about the query.
const SESSION_SUPPORT_DEPTH: usize = 20;

impl MemoryBank {
    /// The query text to embed: with `strip_names`, speaker names (and "the user") are
    /// removed unless nothing would be left.
    pub fn vector_query(&self, query: &str) -> Result<String, MemoryError> {
        if !self.config().retrieval.strip_names {
            return Ok(query.to_string());
        }
        let names = self.speakers()?;
        let kept: Vec<&str> = query
            .split_whitespace()
            .filter(|w| {
                let core: String = w.chars().filter(|c| c.is_alphanumeric()).collect::<String>().to_lowercase();
                let core = core.strip_suffix("s").filter(|_| w.contains('\'')).unwrap_or(&core).to_string();
                !names.contains(&core)
            })
            .collect();
        let text = kept.join(" ").replace(" the ?", "?");
        Ok(if text.trim().is_empty() { query.to_string() } else { text })
    }

    /// Lower-cased names of everyone who has spoken (read once, then kept up to date by
    /// `insert` and dropped by `remove_source`).
    pub fn speakers(&self) -> Result<HashSet<String>, MemoryError> {
        if let Some(known) = self.speakers.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
            return Ok(known.clone());
        }
        let known = self.with_reader(|c| {
            let mut stmt = c.prepare_cached("SELECT DISTINCT speaker FROM memories WHERE speaker IS NOT NULL")?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
            Ok(rows.map(|r| r.map(|s| s.to_lowercase())).collect::<Result<HashSet<_>, _>>()?)
        })?;
        *self.speakers.write().unwrap_or_else(|p| p.into_inner()) = Some(known.clone());
        Ok(known)
    }

    /// What a turn itself says about how likely it answers anything, applied to the
    /// fused scores of a hybrid search:
    /// - turns with fewer than `short_turn_words` content words are scaled down
    ///   ("How did you know?" embeds close to many queries and answers none);
    /// - every turn by `content words ^ length_prior` (the turns that carry facts say
    ///   more words);
    /// - a turn spoken by someone the query names by `1 + speaker_boost` ("What did
    ///   Priya see her physio about?" is answered by what Priya said);
    /// - a turn from a session whose best hit is strong by `1 + session_support ×` that
    ///   hit's share of the best score overall (the session is about the question).
    pub(super) fn weigh_turns(&self, fused: &mut [(i64, Fused)], query: &str, config: &RetrievalConfig) -> Result<(), MemoryError> {
        let asked: HashSet<String> = crate::memory::keyword::words(query).collect();
        let mut sessions: Vec<Option<String>> = Vec::with_capacity(fused.len());
        self.with_reader(|c| {
            let mut stmt = c.prepare_cached("SELECT text, speaker, session FROM memories WHERE rowid = ?1 AND kind = 'turn'")?;
            for (rowid, f) in fused.iter_mut() {
                let row: Option<(String, Option<String>, Option<String>)> =
                    stmt.query_row([*rowid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).optional()?;
                let Some((text, speaker, session)) = row else {
                    sessions.push(None);
                    continue;
                };
                let n = crate::memory::keyword::content_terms(&text).len();
                if config.short_turn_words > 0 {
                    f.score *= (n as f32 / config.short_turn_words as f32).min(1.0);
                }
                if config.length_prior > 0.0 {
                    f.score *= (n.max(1) as f32).powf(config.length_prior);
                }
                // "Rhee" in the query names the speaker "Hana Rhee"; "the user" names "user".
                let named = |s: &str| crate::memory::keyword::words(s).any(|w| w.chars().count() >= 3 && asked.contains(&w));
                if config.speaker_boost > 0.0 && speaker.as_deref().is_some_and(named) {
                    f.score *= 1.0 + config.speaker_boost;
                }
                sessions.push(session);
            }
            Ok(())
        })?;
        if config.session_support > 0.0 {
            let mut order: Vec<usize> = (0..fused.len()).collect();
            order.sort_by(|&a, &b| fused[b].1.score.total_cmp(&fused[a].1.score));
            let top = order.first().map_or(0.0, |&i| fused[i].1.score);
            let mut best: HashMap<&str, f32> = HashMap::new();
            for &i in order.iter().take(SESSION_SUPPORT_DEPTH) {
                if let Some(s) = sessions[i].as_deref() {
                    best.entry(s).or_insert(fused[i].1.score);
                }
            }
            if top > 0.0 {
                for (i, (_, f)) in fused.iter_mut().enumerate() {
                    if let Some(b) = sessions[i].as_deref().and_then(|s| best.get(s)) {
                        f.score *= 1.0 + config.session_support * b / top;
                    }
                }
            }
        }
        sort_fused(fused);
        Ok(())
    }

    /// Multiply the score of candidates from the given months by `1 + boost`.
    pub(super) fn boost_months(&self, fused: &mut [(i64, Fused)], months: &[u32], boost: f32) -> Result<(), MemoryError> {
        self.with_reader(|c| {
            let mut stmt = c.prepare_cached("SELECT time FROM memories WHERE rowid = ?1")?;
            for (rowid, f) in fused.iter_mut() {
                let time: Option<String> = stmt.query_row([*rowid], |r| r.get(0))?;
                if time.as_deref().and_then(crate::memory::temporal::month_of).is_some_and(|m| months.contains(&m)) {
                    f.score *= 1.0 + boost;
                }
            }
            Ok(())
        })?;
        sort_fused(fused);
        Ok(())
    }

    /// Give the turns next to each strong hit a share of its score: in conversation the
    /// answer often follows the turn that names the topic.
    pub(super) fn spread_to_neighbours(
        &self,
        fused: Vec<(i64, Fused)>,
        weight: f32,
        k: usize,
        filter: &SearchFilter,
    ) -> Result<Vec<(i64, Fused)>, MemoryError> {
        let top: Vec<(i64, f32)> = fused.iter().take(k.max(10)).map(|(r, f)| (*r, f.score)).collect();
        let mut scores: HashMap<i64, Fused> = fused.into_iter().collect();
        let shares: Vec<(i64, f32)> = self.with_reader(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT n.rowid FROM memories m JOIN memories n ON n.session IS m.session AND n.kind = 'turn' \
                 AND n.seq IN (m.seq - 1, m.seq + 1) WHERE m.rowid = ?1 AND m.kind = 'turn'",
            )?;
            let mut shares = Vec::new();
            for (rowid, score) in top {
                for n in stmt.query_map([rowid], |r| r.get::<_, i64>(0))? {
                    shares.push((n?, weight * score));
                }
            }
            Ok(shares)
        })?;
        // Only neighbours the filter allows; checked for these few rows, never by
        // listing everything the filter allows.
        let allowed = if filter.is_empty() { None } else { Some(self.passing(filter, shares.iter().map(|s| s.0))?) };
        for (n, share) in shares {
            if allowed.as_ref().is_none_or(|a| a.contains(&n)) {
                scores.entry(n).or_default().score += share;
            }
        }
        let mut list: Vec<(i64, Fused)> = scores.into_iter().collect();
        sort_fused(&mut list);
        Ok(list)
    }
}
