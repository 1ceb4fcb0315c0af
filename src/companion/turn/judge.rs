//! The judge of a finished draw (is it the character's line, whole, and only theirs?)
//! and the label stripper that keeps `[Name]:` out of the streamed text.

use crate::llm::Completion;
use crate::prompting::echo::CopyGuard;
use crate::prompting::salvage;

/// The labels a reply may start with (the trigger asks for `[Name]:`).
fn labels(name: &str) -> [String; 4] {
    [format!("[{name}]:"), format!("{name}:"), "[AI]:".to_string(), "AI:".to_string()]
}

/// `text` without a leading `label`, compared case-insensitively, or `None`.
fn strip_label<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    let mut rest = text.char_indices();
    for expected in label.chars() {
        let (_, got) = rest.next()?;
        if !got.to_lowercase().eq(expected.to_lowercase()) {
            return None;
        }
    }
    Some(rest.next().map(|(i, _)| &text[i..]).unwrap_or(""))
}

/// Is `text` the start of `label` (case-insensitively)?
fn begins_label(text: &str, label: &str) -> bool {
    let mut expected = label.chars();
    text.chars().all(|c| expected.next().is_some_and(|e| c.to_lowercase().eq(e.to_lowercase())))
}

/// Holds back the first fragments of a streamed reply until it is clear whether they
/// are the `[Name]:` label, so the label never reaches the screen.
pub(crate) struct LabelStripper {
    labels: [String; 4],
    head: String,
    decided: bool,
    /// Right after a stripped label, leading spaces are not shown either.
    skip_space: bool,
}

impl LabelStripper {
    pub(crate) fn new(name: &str) -> Self {
        Self { labels: labels(name), head: String::new(), decided: false, skip_space: false }
    }

    /// What of `fragment` can be shown now.
    pub(crate) fn push(&mut self, fragment: &str) -> Option<String> {
        if self.decided {
            if self.skip_space {
                let rest = fragment.trim_start();
                self.skip_space = rest.is_empty();
                return Some(rest.to_string()).filter(|r| !r.is_empty());
            }
            return Some(fragment.to_string());
        }
        self.head.push_str(fragment);
        let trimmed = self.head.trim_start();
        for label in &self.labels {
            if let Some(rest) = strip_label(trimmed, label) {
                self.decided = true;
                let rest = rest.trim_start().to_string();
                self.head.clear();
                self.skip_space = rest.is_empty();
                return Some(rest).filter(|r| !r.is_empty());
            }
        }
        if self.labels.iter().any(|l| begins_label(trimmed, l)) {
            return None;
        }
        self.decided = true;
        Some(std::mem::take(&mut self.head))
    }

    /// Whatever is still held when the stream ends.
    pub(crate) fn finish(&mut self) -> Option<String> {
        self.decided = true;
        Some(std::mem::take(&mut self.head)).filter(|h| !h.trim().is_empty())
    }
}


/// Judge a finished reply: the cleaned text, or why it is thrown away. `copies` holds
/// the packet's text: a reply that repeats eight words of it in a row (the card's
/// example dialogue, its description, an earlier line) is the model with nothing of its
/// own to say, and is drawn again. `input` holds the user's message, which a reply may
/// quote (characters echo a question back) but not merely repeat.
pub fn judge(completion: &Completion, name: &str, user: &str, copies: &CopyGuard, input: &CopyGuard) -> Result<String, String> {
    let mut text = completion.text.trim();
    // The trigger asks for `[Name]: ...`; the label is not part of what was said. A small
    // model may write it twice (`[Name]: [Name]:`): every leading one goes.
    while let Some(rest) = labels(name).iter().find_map(|label| strip_label(text, label)) {
        text = rest.trim_start();
    }
    let text = text.trim();
    let cut_off = completion.finish_reason.as_deref() == Some("length");
    if text.is_empty() {
        return Err(if cut_off { "it was cut off at the token limit" } else { "it was empty" }.into());
    }
    // A small model often writes a good line, then echoes the packet's markup or goes on
    // with the user's next line (or its own again): the line before the drift is the
    // reply, and only a draw with nothing before it is thrown away.
    let (text, drifted) = salvage::cut(text, name, &[user, "User"]).map_err(|why| match why {
        // "User" is the user, whatever their persona's name.
        salvage::Drift::SpokeFor(_) => format!("it spoke for {user}"),
        why => why.reason(),
    })?;
    // A reply cut at its drift ended before the token limit did.
    if cut_off && drifted.is_none() {
        return Err("it was cut off at the token limit".into());
    }
    if let Some(reason) = copies.reason(&text).or_else(|| input.only_copy(&text)) {
        return Err(reason);
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::Usage;

    #[test]
    fn a_label_written_twice_is_no_reply() {
        let copies = CopyGuard::new([""]);
        let done = |text: &str| Completion {
            text: text.into(),
            usage: Usage::default(),
            finish_reason: Some("stop".into()),
            model: "m".into(),
            from_cache: false,
            elapsed_ms: 0,
        };
        assert_eq!(judge(&done("[Corvin Ashdale]: [Corvin Ashdale]:"), "Corvin Ashdale", "Sam", &copies, &CopyGuard::default()), Err("it was empty".into()));
        assert_eq!(judge(&done("[Corvin Ashdale]: Corvin Ashdale: Aye."), "Corvin Ashdale", "Sam", &copies, &CopyGuard::default()), Ok("Aye.".into()));
    }

    /// The card's example dialogue, as the packet carries it.
    fn card() -> CopyGuard {
        CopyGuard::new(["{{char}}: Mind the third step, it has been loose since the winter storm. {{user}}: Thanks."])
    }

    fn reply(text: &str, finish: &str) -> Completion {
        Completion {
            text: text.into(),
            usage: Usage::default(),
            finish_reason: Some(finish.into()),
            model: "m".into(),
            from_cache: false,
            elapsed_ms: 0,
        }
    }

    /// What the judge keeps or why it throws a draw away, for the replies a model
    /// really writes.
    #[test]
    fn the_judge_on_typical_draws() {
        let cases = [
            ("[Ilse Marrow]: The kettle's on.", "stop"),
            ("Ilse Marrow: *smiles* The kettle's on.", "stop"),
            ("The kettle's on.\n[Juno]: Thanks!", "stop"),
            ("Juno: I'll have tea.", "stop"),
            ("<user_input>Do you remember?</user_input>", "stop"),
            ("   ", "stop"),
            ("The kettle's on and the", "length"),
            ("*smiles* Mind the third step, it has been loose since the winter storm.", "stop"),
        ];
        let shown: Vec<String> = cases
            .iter()
            .map(|(text, finish)| match judge(&reply(text, finish), "Ilse Marrow", "Juno", &card(), &CopyGuard::default()) {
                Ok(kept) => format!("{text:?} -> kept {kept:?}"),
                Err(why) => format!("{text:?} -> discarded: {why}"),
            })
            .collect();
        expect_test::expect![[r#"
            "[Ilse Marrow]: The kettle's on." -> kept "The kettle's on."
            "Ilse Marrow: *smiles* The kettle's on." -> kept "*smiles* The kettle's on."
            "The kettle's on.\n[Juno]: Thanks!" -> kept "The kettle's on."
            "Juno: I'll have tea." -> discarded: it spoke for Juno
            "<user_input>Do you remember?</user_input>" -> discarded: it repeated the prompt's markup
            "   " -> discarded: it was empty
            "The kettle's on and the" -> discarded: it was cut off at the token limit
            "*smiles* Mind the third step, it has been loose since the winter storm." -> discarded: it copied 12 words from its prompt ("mind the third step it has been loose since the winter storm")"#]].assert_eq(&shown.join("\n"));
    }

    #[test]
    fn judging_replies() {
        let ok = |t: &str| judge(&reply(t, "stop"), "Ilse Marrow", "Juno", &card(), &CopyGuard::default());
        assert_eq!(ok("[Ilse Marrow]: Morning. The kettle's on.").unwrap(), "Morning. The kettle's on.");
        assert_eq!(ok("ilse marrow: Hm.").unwrap(), "Hm.");
        assert_eq!(ok("  Plain words.  ").unwrap(), "Plain words.");
        assert!(ok("[Ilse Marrow]:   ").unwrap_err().contains("empty"));
        assert!(ok("").unwrap_err().contains("empty"));
        assert!(ok("[User]: I agree with myself.").unwrap_err().contains("spoke for Juno"));
        // What came before the user's line is the reply; the rest never stands.
        assert_eq!(ok("Sure.\nJuno: and then I said...").unwrap(), "Sure.");
        // The embedded model's drafts a tester saw thrown away or kept whole (Odile, Ilse).
        let odile = "*She taps her nose.* Oh, Kit, I'm so glad you're here. *She holds up a chart of the Hollow Reef.*";
        assert_eq!(ok(&format!("[Ilse Marrow]: {odile}\n</assistant_persona>")).unwrap(), odile);
        assert_eq!(ok("Mm. The kettle's on.\n</assistant_user_input>\n</assistant_user_users>").unwrap(), "Mm. The kettle's on.");
        assert_eq!(ok("Do you mean the reef?\n<context>\n</context>").unwrap(), "Do you mean the reef?");
        assert_eq!(ok("Morning.\n[Ilse Marrow]: The kettle's on.\n[Ilse Marrow]: Sugar?").unwrap(), "Morning.");
        // A draft that drifts before the token limit ends is whole up to its drift.
        assert_eq!(judge(&reply("Aye.\n<context>\n<context>\n<context", "length"), "Ilse Marrow", "Juno", &card(), &CopyGuard::default()).unwrap(), "Aye.");
        assert!(judge(&reply("A long story that", "length"), "Ilse", "U", &card(), &CopyGuard::default()).unwrap_err().contains("cut off"));
        // A name that merely starts the same way is not a label.
        assert_eq!(ok("Userland is far.").unwrap(), "Userland is far.");
        assert!(ok("<temporal_data>\nCurrent date: today").unwrap_err().contains("markup"));
        assert_eq!(ok("I <3 lore, <b>really</b>.").unwrap(), "I <3 lore, <b>really</b>.");
    }

    #[test]
    fn the_label_never_reaches_the_stream() {
        let run = |fragments: &[&str]| {
            let mut s = LabelStripper::new("Ilse Marrow");
            let mut out: String = fragments.iter().filter_map(|f| s.push(f)).collect();
            out.extend(s.finish());
            out
        };
        assert_eq!(run(&["[Ils", "e Marr", "ow]: Hel", "lo."]), "Hello.");
        assert_eq!(run(&["  ilse marrow:", " Hm."]), "Hm.");
        assert_eq!(run(&["Hello", " there."]), "Hello there.");
        assert_eq!(run(&["[Il"]), "[Il");
        assert_eq!(run(&["Ïlse: ", "ok"]), "Ïlse: ok");
        assert_eq!(run(&["AI: fine"]), "fine");
    }
}
