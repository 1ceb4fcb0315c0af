//! Retrieval evaluation: questions with the ids of the memories that answer them.
//! recall@k is the mean, over questions, of the fraction of a question's evidence ids
//! found in its top k hits.

use super::bank::{MemoryBank, MemoryError};
use super::retrieval::{SearchMode, SearchRequest};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// One line of an evaluation file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    pub question: String,
    pub evidence: Vec<String>,
    /// `single-hop`, `multi-hop`, `temporal`, ... (reported separately).
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// `dev` (used for tuning) or `test` (held out).
    #[serde(default)]
    pub split: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Recall {
    pub questions: usize,
    pub recall_at_k: f64,
    pub recall_at_5: f64,
    pub recall_at_10: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalReport {
    pub questions: usize,
    pub k: usize,
    pub mode: SearchMode,
    pub recall_at_k: f64,
    pub recall_at_5: f64,
    pub recall_at_10: f64,
    pub by_type: BTreeMap<String, Recall>,
    pub by_split: BTreeMap<String, Recall>,
    /// Each split by type, keyed `split/type` (`test/multi-session`): the held-out
    /// numbers of each kind of question, apart from the ones tuned on.
    pub by_split_and_type: BTreeMap<String, Recall>,
    /// Questions whose evidence was not all found in the top k, with what was missing.
    pub misses: Vec<Miss>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Miss {
    pub question: String,
    pub missing: Vec<String>,
}

pub fn read_questions(path: &Path) -> Result<Vec<Question>, MemoryError> {
    let text = crate::paths::read_text_bounded(path, 64 << 20)
        .map_err(|e| MemoryError::Read { path: path.display().to_string(), message: e.to_string() })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let q: Question = serde_json::from_str(line)
            .map_err(|e| MemoryError::BadLine { path: path.display().to_string(), line: i + 1, message: e.to_string() })?;
        if q.evidence.is_empty() {
            return Err(MemoryError::BadLine {
                path: path.display().to_string(),
                line: i + 1,
                message: "a question needs at least one evidence id".into(),
            });
        }
        out.push(q);
    }
    Ok(out)
}

fn fraction_found(evidence: &[String], top: &[String]) -> f64 {
    let found = evidence.iter().filter(|e| top.contains(e)).count();
    found as f64 / evidence.len() as f64
}

/// Run every question through `bank` and measure recall.
pub fn evaluate(bank: &MemoryBank, questions: &[Question], k: usize, mode: SearchMode) -> Result<EvalReport, MemoryError> {
    let depth = k.max(10);
    let vectors = match mode {
        SearchMode::Keyword => vec![None; questions.len()],
        _ => {
            let embedder = bank.embedder()?;
            let prefix = embedder.config().query_prefix.clone();
            let texts = questions.iter().map(|q| Ok(format!("{prefix}{}", bank.vector_query(&q.question)?))).collect::<Result<Vec<_>, MemoryError>>()?;
            embedder
                .embed(texts)?
                .into_iter()
                .map(Some)
                .collect()
        }
    };
    #[derive(Default)]
    struct Acc {
        n: usize,
        k: f64,
        at5: f64,
        at10: f64,
    }
    let mut all = Acc::default();
    let mut by_type: BTreeMap<String, Acc> = BTreeMap::new();
    let mut by_split: BTreeMap<String, Acc> = BTreeMap::new();
    let mut by_split_and_type: BTreeMap<String, Acc> = BTreeMap::new();
    let mut misses = Vec::new();
    for (q, v) in questions.iter().zip(vectors) {
        let request = SearchRequest { mode, ..SearchRequest::new(q.question.clone(), depth) };
        let hits = bank.search_with_vector(&request, v.as_deref())?;
        let ids: Vec<String> = hits.into_iter().map(|h| h.id).collect();
        let at = |n: usize| fraction_found(&q.evidence, &ids[..ids.len().min(n)]);
        let (rk, r5, r10) = (at(k), at(5), at(10));
        if rk < 1.0 {
            let top = &ids[..ids.len().min(k)];
            misses.push(Miss {
                question: q.question.clone(),
                missing: q.evidence.iter().filter(|e| !top.contains(e)).cloned().collect(),
            });
        }
        for acc in [
            Some(&mut all),
            q.kind.as_ref().map(|t| by_type.entry(t.clone()).or_default()),
            q.split.as_ref().map(|s| by_split.entry(s.clone()).or_default()),
            q.split.as_ref().zip(q.kind.as_ref()).map(|(s, t)| by_split_and_type.entry(format!("{s}/{t}")).or_default()),
        ]
        .into_iter()
        .flatten()
        {
            acc.n += 1;
            acc.k += rk;
            acc.at5 += r5;
            acc.at10 += r10;
        }
    }
    let recall = |a: &Acc| {
        let n = a.n.max(1) as f64;
        Recall { questions: a.n, recall_at_k: a.k / n, recall_at_5: a.at5 / n, recall_at_10: a.at10 / n }
    };
    let total = recall(&all);
    Ok(EvalReport {
        questions: total.questions,
        k,
        mode,
        recall_at_k: total.recall_at_k,
        recall_at_5: total.recall_at_5,
        recall_at_10: total.recall_at_10,
        by_type: by_type.iter().map(|(t, a)| (t.clone(), recall(a))).collect(),
        by_split: by_split.iter().map(|(s, a)| (s.clone(), recall(a))).collect(),
        by_split_and_type: by_split_and_type.iter().map(|(s, a)| (s.clone(), recall(a))).collect(),
        misses,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fraction_counts_each_evidence_id_once() {
        let ev = vec!["a".to_string(), "b".to_string()];
        assert_eq!(fraction_found(&ev, &["b".into(), "x".into()]), 0.5);
        assert_eq!(fraction_found(&ev, &["a".into(), "b".into()]), 1.0);
        assert_eq!(fraction_found(&ev, &[]), 0.0);
    }
}
