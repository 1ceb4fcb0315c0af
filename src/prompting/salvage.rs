//! Where a model's reply stops being the reply: the first prompt-like tag
//! (`</assistant_persona>`, `<context>`) or the first line spoken by someone else (or by
//! the speaker again, `[Name]:` once more). A small model often writes a good line and
//! then drifts into echoing its prompt's markup or playing the whole conversation; the
//! line before the drift is kept (see [`cut`]) rather than the whole draw thrown away,
//! and the drift never reaches history or memory. The stream is held back the same way
//! ([`StreamCut`]) so what was shown is what is stored.

/// Inline HTML a character may write as formatting (SillyTavern renders it): prose, not
/// prompt markup.
const PROSE_TAGS: &[&str] =
    &["b", "i", "u", "s", "em", "strong", "br", "small", "sup", "sub", "span", "font", "del", "ins", "mark", "q", "code", "p", "hr"];

/// Why a reply was cut where it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drift {
    /// A prompt-like tag began.
    Markup,
    /// A line of someone else's (their name as written).
    SpokeFor(String),
    /// The speaker's own label again: a second line of dialogue it wrote for itself.
    Again,
}

impl Drift {
    /// Why a draw that kept nothing was thrown away.
    pub fn reason(&self) -> String {
        match self {
            Drift::Markup => "it repeated the prompt's markup".into(),
            Drift::SpokeFor(name) => format!("it spoke for {name}"),
            Drift::Again => "it wrote a dialogue for itself".into(),
        }
    }
}

/// The name of a tag starting at `text` (just after `<`), and whether the tag is
/// complete; `None` when `text` cannot start a tag (`<3`, `< b`).
fn tag_at(text: &str) -> Option<(&str, bool)> {
    let rest = text.strip_prefix('/').unwrap_or(text);
    let len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':'))).unwrap_or(rest.len());
    let name = &rest[..len];
    if name.is_empty() {
        return rest.is_empty().then_some(("", false));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    let after = &rest[len..];
    if after.starts_with('>') || after.starts_with("/>") {
        Some((name, true))
    } else if after.is_empty() || after == "/" {
        Some((name, false))
    } else {
        None
    }
}

/// Where the first prompt-like tag (`<name>`, `</name>`, `<name/>`, not prose HTML) in
/// `text` starts. With `open`, a tag still being written at the end counts too.
fn first_markup(text: &str, open: bool) -> Option<usize> {
    text.match_indices('<').map(|(i, _)| i).find(|&i| match tag_at(&text[i + 1..]) {
        Some((name, true)) => !PROSE_TAGS.contains(&name.to_ascii_lowercase().as_str()),
        Some((_, false)) => open,
        None => false,
    })
}

/// Does `line` start with `name`'s label (`[Name]:` or `Name:`, case-insensitively,
/// after any `*`, `"` or `'`)? With `open`, a line that may still become one counts too.
fn labelled(line: &str, name: &str, open: bool) -> bool {
    let line = line.trim_start().trim_start_matches(['*', '"', '\'']).to_lowercase();
    let name = name.trim().to_lowercase();
    if name.is_empty() {
        return false;
    }
    [format!("[{name}]:"), format!("{name}:")].iter().any(|label| line.starts_with(label.as_str()) || (open && label.starts_with(line.as_str())))
}

/// Does `line` start with a bracketed speaker label `[Anyone]:`? With `open`, a line that
/// may still become one counts too.
fn bracketed(line: &str, open: bool) -> bool {
    let line = line.trim_start();
    let Some(rest) = line.strip_prefix('[') else { return open && line.is_empty() };
    match rest.find(']') {
        Some(end) => end <= 60 && !rest[..end].trim().is_empty() && (rest[end + 1..].starts_with(':') || (open && rest[end + 1..].is_empty())),
        None => open && rest.len() <= 60,
    }
}

/// Where `text` (the reply, its leading `[Name]:` already gone) drifts and why: the
/// first prompt-like tag, or the first line (after the first) that is a speaker label —
/// of the user or another in `others`, of `name` again, or any other `[Someone]:`.
/// With `open`, `text` is still being written: a line or tag that may yet become one
/// counts from where it starts.
fn drift(text: &str, name: &str, others: &[&str], open: bool) -> Option<(usize, Drift)> {
    let mut found = first_markup(text, open).map(|at| (at, Drift::Markup));
    let mut start = 0;
    for (n, line) in text.split_inclusive('\n').enumerate() {
        if found.as_ref().is_some_and(|(at, _)| *at <= start) {
            break;
        }
        let last = start + line.len() == text.len() && !line.ends_with('\n');
        let open = open && last;
        let speaker = others
            .iter()
            .find(|o| labelled(line, o, open))
            .map(|o| Drift::SpokeFor(o.trim().to_string()))
            .or_else(|| (n > 0 && labelled(line, name, open)).then_some(Drift::Again))
            .or_else(|| (n > 0 && bracketed(line, open)).then(|| Drift::SpokeFor(line.trim_start().trim_start_matches('[').split(']').next().unwrap_or("").to_string())));
        if let Some(why) = speaker {
            found = Some((start, why));
            break;
        }
        start += line.len();
    }
    found
}

/// Is what is left a reply worth keeping (some word in it)?
fn usable(text: &str) -> bool {
    text.chars().any(char::is_alphanumeric)
}

/// `text` cut where it drifts (see [`drift`]), trimmed: `Ok((kept, Some(why)))` when
/// something was cut and a usable reply is left, `Ok((text, None))` when nothing was,
/// `Err(why)` when nothing usable is left.
pub fn cut(text: &str, name: &str, others: &[&str]) -> Result<(String, Option<Drift>), Drift> {
    match drift(text, name, others, false) {
        None => Ok((text.trim().to_string(), None)),
        Some((at, why)) => {
            let kept = text[..at].trim();
            if usable(kept) { Ok((kept.to_string(), Some(why))) } else { Err(why) }
        }
    }
}

/// Holds a streamed reply back from where it may be drifting, so the stream shows what
/// [`cut`] will keep: fragments go in, the part that is certainly the reply comes out.
pub struct StreamCut {
    name: String,
    others: Vec<String>,
    text: String,
    shown: usize,
    done: bool,
}

impl StreamCut {
    pub fn new(name: &str, others: &[&str]) -> Self {
        Self { name: name.to_string(), others: others.iter().map(|o| o.to_string()).collect(), text: String::new(), shown: 0, done: false }
    }

    /// What of the reply can be shown now that `fragment` came.
    pub fn push(&mut self, fragment: &str) -> Option<String> {
        if self.done {
            return None;
        }
        self.text.push_str(fragment);
        let others: Vec<&str> = self.others.iter().map(String::as_str).collect();
        let upto = match drift(&self.text, &self.name, &others, true) {
            Some((at, _)) if drift(&self.text, &self.name, &others, false).is_some_and(|(closed, _)| closed == at) => {
                self.done = true;
                at
            }
            Some((at, _)) => at,
            None => self.text.len(),
        };
        // Trailing spaces wait for what follows them: a cut there would trim them.
        let upto = self.text[..upto].trim_end().len();
        self.emit(upto)
    }

    /// The rest when the stream ends: what [`cut`] keeps, less what was shown.
    pub fn finish(&mut self) -> Option<String> {
        if self.done {
            return None;
        }
        self.done = true;
        let others: Vec<&str> = self.others.iter().map(String::as_str).collect();
        let upto = drift(&self.text, &self.name, &others, false).map(|(at, _)| at).unwrap_or(self.text.len());
        let upto = self.text[..upto].trim_end().len().max(self.shown);
        self.emit(upto)
    }

    fn emit(&mut self, upto: usize) -> Option<String> {
        if upto <= self.shown {
            return None;
        }
        let out = self.text[self.shown..upto].to_string();
        self.shown = upto;
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(text: &str) -> String {
        match cut(text, "Ilse Marrow", &["Juno", "User"]) {
            Ok((kept, None)) => format!("kept {kept:?}"),
            Ok((kept, Some(why))) => format!("kept {kept:?} (cut: {})", why.reason()),
            Err(why) => format!("discarded: {}", why.reason()),
        }
    }

    #[test]
    fn a_reply_is_cut_where_it_drifts() {
        let cases = [
            "*She taps her nose.* Oh, Kit, I'm so glad you're here. *She holds up a chart of the Hollow Reef.*\n</assistant_persona>",
            "The chart? Aye.</assistant_persona> and more",
            "Do you mean the reef?\n<context>\n</context>",
            "The kettle's on.</assistant_user_input>\n</assistant_user_users>\n[Ilse Marrow]: Hm.",
            "Morning.\n[Ilse Marrow]: The kettle's on.\n[Ilse Marrow]: Sugar?",
            "The kettle's on.\n[Juno]: Thanks!",
            "Juno: I'll have tea.",
            "The kettle's on.\nUser: thanks",
            "Tea?\n[Maren Vosk]: I'll have some.",
            "<user_input>Do you remember?</user_input>",
            "I <3 lore, <b>really</b>, and a < b.",
            "Fine. <br/> Really <em>fine</em>.",
            "*smiles*\n</assistant_persona>",
        ];
        let shown: Vec<String> = cases.iter().map(|c| format!("{c:?} -> {}", kept(c))).collect();
        expect_test::expect![[r#"
            "*She taps her nose.* Oh, Kit, I'm so glad you're here. *She holds up a chart of the Hollow Reef.*\n</assistant_persona>" -> kept "*She taps her nose.* Oh, Kit, I'm so glad you're here. *She holds up a chart of the Hollow Reef.*" (cut: it repeated the prompt's markup)
            "The chart? Aye.</assistant_persona> and more" -> kept "The chart? Aye." (cut: it repeated the prompt's markup)
            "Do you mean the reef?\n<context>\n</context>" -> kept "Do you mean the reef?" (cut: it repeated the prompt's markup)
            "The kettle's on.</assistant_user_input>\n</assistant_user_users>\n[Ilse Marrow]: Hm." -> kept "The kettle's on." (cut: it repeated the prompt's markup)
            "Morning.\n[Ilse Marrow]: The kettle's on.\n[Ilse Marrow]: Sugar?" -> kept "Morning." (cut: it wrote a dialogue for itself)
            "The kettle's on.\n[Juno]: Thanks!" -> kept "The kettle's on." (cut: it spoke for Juno)
            "Juno: I'll have tea." -> discarded: it spoke for Juno
            "The kettle's on.\nUser: thanks" -> kept "The kettle's on." (cut: it spoke for User)
            "Tea?\n[Maren Vosk]: I'll have some." -> kept "Tea?" (cut: it spoke for Maren Vosk)
            "<user_input>Do you remember?</user_input>" -> discarded: it repeated the prompt's markup
            "I <3 lore, <b>really</b>, and a < b." -> kept "I <3 lore, <b>really</b>, and a < b."
            "Fine. <br/> Really <em>fine</em>." -> kept "Fine. <br/> Really <em>fine</em>."
            "*smiles*\n</assistant_persona>" -> kept "*smiles*" (cut: it repeated the prompt's markup)"#]]
        .assert_eq(&shown.join("\n"));
    }

    /// Whatever the fragments, the stream shows exactly what `cut` keeps.
    #[test]
    fn the_stream_shows_what_is_kept() {
        let replies = [
            "*She taps her nose.* Oh, Kit.\n</assistant_persona>",
            "Do you mean the reef?\n<context>\n</context>",
            "Morning.\n[Ilse Marrow]: The kettle's on.",
            "The kettle's on.\nJuno: thanks",
            "I <3 lore, <b>really</b>.\nJunebug is here.",
            "A < b and [note] here.",
        ];
        for reply in replies {
            for size in 1..8 {
                let mut stream = StreamCut::new("Ilse Marrow", &["Juno", "User"]);
                let chars: Vec<char> = reply.chars().collect();
                let mut shown: String = chars.chunks(size).filter_map(|c| stream.push(&c.iter().collect::<String>())).collect();
                shown.extend(stream.finish());
                let expected = cut(reply, "Ilse Marrow", &["Juno", "User"]).map(|(k, _)| k).unwrap_or_default();
                assert_eq!(shown, expected, "{reply:?} in fragments of {size}");
            }
        }
    }
}
