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

/// An FTS5 MATCH expression for `text`, or `None` when it has no searchable word.
/// Every term is a double-quoted string of letters and digits, which FTS5 always
/// accepts; a query made only of stop words falls back to those words.
pub fn fts_query(text: &str) -> Option<String> {
    let mut terms = content_terms(text);
    if terms.is_empty() {
        let mut seen = BTreeSet::new();
        terms = words(text).filter(|w| seen.insert(w.clone())).take(MAX_TERMS).collect();
    }
    if terms.is_empty() {
        return None;
    }
    Some(terms.iter().map(|t| format!("\"{t}\"")).collect::<Vec<_>>().join(" OR "))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn long_text_is_capped() {
        let text: String = (0..5000).map(|i| format!("word{i} ")).collect();
        assert_eq!(content_terms(&text).len(), MAX_TERMS);
    }
}
