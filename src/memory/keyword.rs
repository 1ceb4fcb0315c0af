//! Turning any user text into a safe FTS5 query, and running it.
//!
//! FTS5 has its own query language (quotes, AND/OR/NOT, NEAR, `*`, `^`, column filters),
//! so raw user text is often a syntax error. We never pass user text through: the query
//! is rebuilt from its words, each one a quoted string of letters and digits, joined by
//! OR. Stop words are dropped (they match nearly every turn and cost ~3 µs per matching
//! row to rank) and the term count is capped, so a 10 kB paste stays fast.

use std::collections::BTreeSet;

/// At most this many distinct terms go into one FTS query.
pub const MAX_TERMS: usize = 48;

/// Common English function words and chat filler that carry no topic.
const STOP_WORDS: &[&str] = &[
    "a", "about", "above", "after", "again", "against", "all", "also", "am", "an", "and", "any", "are", "as", "at",
    "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could", "did",
    "do", "does", "doing", "done", "down", "during", "each", "even", "ever", "few", "for", "from", "further", "get",
    "got", "had", "has", "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how",
    "i", "if", "in", "into", "is", "it", "its", "itself", "just", "know", "let", "like", "me", "more", "most", "much",
    "my", "myself", "no", "nor", "not", "now", "of", "off", "oh", "ok", "okay", "on", "once", "one", "only", "or",
    "other", "our", "ours", "ourselves", "out", "over", "own", "really", "remember", "recall", "said", "same", "say",
    "she", "should", "so", "some", "such", "tell", "than", "that", "the", "their", "theirs", "them", "themselves",
    "then", "there", "these", "they", "thing", "things", "think", "this", "those", "through", "to", "told", "too",
    "under", "until", "up", "us", "very", "was", "we", "well", "were", "what", "when", "where", "which", "while",
    "who", "whom", "why", "will", "with", "would", "yeah", "yes", "you", "your", "yours", "yourself", "yourselves",
    "s", "t", "d", "ll", "m", "re", "ve", "don", "didn", "doesn", "isn", "wasn", "weren", "won", "wouldn",
    "couldn", "shouldn", "ain", "anything", "something", "everything", "time", "times", "way", "thats", "im",
];

pub fn is_stop_word(word: &str) -> bool {
    static SET: std::sync::OnceLock<std::collections::HashSet<&'static str>> = std::sync::OnceLock::new();
    SET.get_or_init(|| STOP_WORDS.iter().copied().collect()).contains(word)
}

/// The words of `text`: runs of letters and digits, lower-cased, in order.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(|w| w.to_lowercase())
}

/// The content words of `text`: no stop words, no single letters, no duplicates,
/// at most [`MAX_TERMS`], in first-seen order.
pub fn content_terms(text: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for w in words(text) {
        if w.chars().count() < 2 || is_stop_word(&w) || !seen.insert(w.clone()) {
            continue;
        }
        out.push(w);
        if out.len() == MAX_TERMS {
            break;
        }
    }
    out
}

/// The terms an FTS query for `text` is made of: its content words, or, when it has
/// none, its words (a query made only of stop words still finds something).
pub fn query_terms(text: &str) -> Vec<String> {
    let terms = content_terms(text);
    if !terms.is_empty() {
        return terms;
    }
    let mut seen = BTreeSet::new();
    words(text).filter(|w| seen.insert(w.clone())).take(MAX_TERMS).collect()
}

/// An FTS5 MATCH expression for `terms` (any of them), or `None` when there are none.
/// Every term is a double-quoted string of letters and digits, which FTS5 always accepts.
pub fn fts_expression(terms: &[String]) -> Option<String> {
    if terms.is_empty() {
        return None;
    }
    Some(terms.iter().map(|t| format!("\"{t}\"")).collect::<Vec<_>>().join(" OR "))
}

/// Which terms to search, given how many rows each matches (`(term, rows)` in query
/// order): rarest first while the rows they match add up to at most `budget`; the
/// rarest matching term is always kept. Terms matching nothing are left out (they
/// cannot change the result). Returns `(kept, left_out)`, each in query order.
pub fn choose_terms(counted: &[(String, usize)], budget: usize) -> (Vec<String>, Vec<String>) {
    let mut order: Vec<usize> = (0..counted.len()).collect();
    order.sort_by_key(|&i| counted[i].1);
    let mut keep = vec![false; counted.len()];
    let mut rows = 0usize;
    let mut any = false;
    for i in order {
        let n = counted[i].1;
        if n == 0 {
            continue;
        }
        if !any || budget == 0 || rows + n <= budget {
            keep[i] = true;
            rows += n;
            any = true;
        }
    }
    let mut kept = Vec::new();
    let mut left = Vec::new();
    for (i, (term, _)) in counted.iter().enumerate() {
        if keep[i] { kept.push(term.clone()) } else { left.push(term.clone()) }
    }
    (kept, left)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The MATCH expression a search for `text` would use, before terms are counted.
    fn fts_query(text: &str) -> Option<String> {
        fts_expression(&query_terms(text))
    }

    #[test]
    fn every_listed_stop_word_is_recognised() {
        assert!(STOP_WORDS.iter().all(|w| is_stop_word(w)));
        assert!(!is_stop_word("lighthouse"));
    }

    #[test]
    fn operators_and_quotes_become_plain_terms() {
        assert_eq!(
            fts_query("\"lighthouse\" AND (Kettle OR point*) NEAR/3 -x ^y col:z").as_deref(),
            Some("\"lighthouse\" OR \"kettle\" OR \"point\" OR \"near\" OR \"col\"")
        );
    }

    #[test]
    fn stop_words_go_unless_nothing_else_is_left() {
        assert_eq!(fts_query("do you remember the lake?").as_deref(), Some("\"lake\""));
        assert_eq!(fts_query("what was it").as_deref(), Some("\"what\" OR \"was\" OR \"it\""));
        assert_eq!(fts_query("🙂 !!! ..."), None);
    }

    #[test]
    fn terms_are_chosen_rarest_first_within_the_budget() {
        let counted: Vec<(String, usize)> =
            [("mira", 2900), ("dish", 3), ("love", 1500), ("zither", 0), ("pie", 400)].iter().map(|(t, n)| (t.to_string(), *n)).collect();
        let (kept, left) = choose_terms(&counted, 2000);
        assert_eq!(kept, ["dish", "love", "pie"]);
        assert_eq!(left, ["mira", "zither"]);
        // The rarest matching term stays even when it alone is over the budget.
        let (kept, _) = choose_terms(&counted, 1);
        assert_eq!(kept, ["dish"]);
        // No budget: every term that matches.
        let (kept, left) = choose_terms(&counted, 0);
        assert_eq!(kept, ["mira", "dish", "love", "pie"]);
        assert_eq!(left, ["zither"]);
        assert_eq!(choose_terms(&[("x".to_string(), 0)], 10), (vec![], vec!["x".to_string()]));
    }

    #[test]
    fn long_text_is_capped() {
        let text: String = (0..5000).map(|i| format!("word{i} ")).collect();
        assert_eq!(content_terms(&text).len(), MAX_TERMS);
    }
}
