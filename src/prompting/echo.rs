//! Whether a reply copies its own prompt: a small model that has nothing to say often
//! repeats the card's example dialogue, the character's description or its own
//! instruction ("tell the story as it is now"). A run of [`COPY_WORDS`] words or more
//! taken verbatim from the prompt marks a reply to be drawn again.

use std::collections::HashSet;

/// How many consecutive words count as a copy: fewer catches stock phrases ("I don't
/// know what you mean"), more lets a copied sentence through.
pub const COPY_WORDS: usize = 8;

fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|w| !w.is_empty())
        .map(|w| w.trim_matches('\'').to_lowercase())
        .filter(|w| !w.is_empty())
        .collect()
}

/// The prompt's runs of `n` words, ready to be checked against any number of replies.
#[derive(Debug, Default, Clone)]
pub struct CopyGuard {
    runs: HashSet<Vec<String>>,
    n: usize,
}

impl CopyGuard {
    /// Runs of [`COPY_WORDS`] words from every text of the prompt.
    pub fn new<'a>(sources: impl IntoIterator<Item = &'a str>) -> Self {
        Self::with_length(sources, COPY_WORDS)
    }

    pub fn with_length<'a>(sources: impl IntoIterator<Item = &'a str>, n: usize) -> Self {
        let n = n.max(1);
        let mut runs = HashSet::new();
        for source in sources {
            let w = words(source);
            for run in w.windows(n) {
                runs.insert(run.to_vec());
            }
        }
        Self { runs, n }
    }

    /// The longest stretch of `reply` copied from the prompt (as the prompt's words),
    /// if one is at least `n` words long.
    pub fn copied(&self, reply: &str) -> Option<String> {
        let w = words(reply);
        let mut best: Option<(usize, usize)> = None;
        let mut i = 0;
        while i + self.n <= w.len() {
            if self.runs.contains(&w[i..i + self.n]) {
                // Extend the copy as far as consecutive runs stay in the prompt.
                let mut end = i + self.n;
                while end < w.len() && self.runs.contains(&w[end + 1 - self.n..=end]) {
                    end += 1;
                }
                if best.is_none_or(|(s, e)| end - i > e - s) {
                    best = Some((i, end));
                }
                i = end;
            } else {
                i += 1;
            }
        }
        best.map(|(s, e)| w[s..e].join(" "))
    }

    /// Why `reply` is nothing but a copy — a run taken from these texts makes up at
    /// least four fifths of its words — or `None`. For texts a reply may quote (the
    /// user's own message: "'Before dawn?' she repeats.") but not merely parrot.
    pub fn only_copy(&self, reply: &str) -> Option<String> {
        let run = self.copied(reply)?;
        let (copied, all) = (run.split(' ').count(), words(reply).len());
        (copied * 5 >= all * 4).then(|| format!("it only repeated {copied} words of the message it answers"))
    }

    /// Why `reply` is a copy, for a discarded draw's reason, or `None`.
    pub fn reason(&self, reply: &str) -> Option<String> {
        self.copied(reply).map(|run| {
            let shown: String = run.chars().take(80).collect();
            let more = if shown.len() < run.len() { "…" } else { "" };
            format!("it copied {} words from its prompt (\"{shown}{more}\")", run.split(' ').count())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copied_run_of_eight_words_is_found_and_a_shorter_one_is_not() {
        let card = "Ilse Marrow is the keeper of the northern light. {{char}}: \"The lamp does not care who you are, only that you climb.\"";
        let guard = CopyGuard::new([card, "Tell the story as it is now."]);
        assert_eq!(
            guard.copied("*She shrugs.* The lamp does not care who you are, only that you climb. Up you go."),
            Some("the lamp does not care who you are only that you climb".into())
        );
        // Seven words in a row from the card, then the reply's own.
        assert_eq!(guard.copied("The lamp does not care who you climb with, stranger."), None);
        assert_eq!(guard.copied("Salt on the glass again. Hand me the rag, will you?"), None);
        assert!(guard.reason("Ilse Marrow is the keeper of the northern light.").is_some_and(|r| r.contains("copied 9 words")));
        // Case and punctuation do not hide a copy.
        assert!(guard.copied("ILSE MARROW -- is the keeper... of the Northern light!").is_some());
    }
}
