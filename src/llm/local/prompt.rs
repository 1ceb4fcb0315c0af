//! Turning a conversation into the text the model continues, and turning the model's
//! token pieces back into text that is safe to stream.
//!
//! Two prompt styles exist because GGUF files come in two kinds. Instruction-tuned
//! models carry a chat template in their metadata and are prompted through it. Base
//! (pretrained) models such as the packaged Gemma 3 270M have none: they only continue
//! text, so the conversation is written out as a plain transcript that ends with an
//! open assistant turn, and generation stops where the model starts the next turn.

use crate::llm::{ChatMessage, Role};

/// Speaker tags of the transcript format. Kept short and plain-English because a base
/// model has seen this layout (play scripts, chat logs, forum quotes) far more often
/// than any bespoke markup, so it both continues it and ends its turn reliably.
pub const USER_TAG: &str = "User:";
pub const ASSISTANT_TAG: &str = "Assistant:";
pub const SYSTEM_TAG: &str = "System:";

/// Where a transcript reply ends: the model opening the next speaker's line.
pub fn transcript_stops() -> Vec<String> {
    [USER_TAG, ASSISTANT_TAG, SYSTEM_TAG].iter().map(|tag| format!("\n{tag}")).collect()
}

/// Renders `messages` as a completion prompt for a model without a chat template.
///
/// The format, in full:
///
/// ```text
/// <every system message, in order, separated by a blank line>
///
/// User: <user message>
///
/// Assistant: <assistant message>
///
/// User: <user message>
///
/// Assistant:
/// ```
///
/// A conversation of system messages only is a document: it is sent as it is, so the
/// model continues its last line.
///
/// System text goes first without a tag: a base model reads it as the preamble of a
/// document, which is what instructions are to it. A system message that appears
/// after the first turn is kept in place under a `System:` tag so its position in the
/// conversation survives. If the conversation ends with an assistant message, that
/// message is left open (no blank line after it) so the model continues it: a prefill.
pub fn render_transcript(messages: &[ChatMessage]) -> String {
    // System text alone is a document for the model to continue exactly where it
    // stops (a worked example, then the entry to write): no speaker tags at all.
    if !messages.is_empty() && messages.iter().all(|m| m.role == Role::System) {
        return messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n\n");
    }
    let mut out = String::new();
    let mut seen_turn = false;
    for (i, message) in messages.iter().enumerate() {
        let last = i + 1 == messages.len();
        let content = message.content.trim();
        match message.role {
            Role::System if !seen_turn => {
                if !content.is_empty() {
                    out.push_str(content);
                    out.push_str("\n\n");
                }
            }
            role => {
                seen_turn = true;
                let tag = match role {
                    Role::System => SYSTEM_TAG,
                    Role::User => USER_TAG,
                    Role::Assistant => ASSISTANT_TAG,
                };
                out.push_str(tag);
                out.push(' ');
                out.push_str(content);
                if last && role == Role::Assistant {
                    // A prefill: the model picks up exactly where this text stops.
                    return out;
                }
                out.push_str("\n\n");
            }
        }
    }
    out.push_str(ASSISTANT_TAG);
    out
}

/// Finds stop strings in streamed text without ever emitting a piece of one.
///
/// Text that could still turn out to be the beginning of a stop string is held back
/// until the next piece decides it, so a consumer of the stream never sees a stray
/// `"\nUs"` that the final reply does not contain.
#[derive(Debug, Default)]
pub struct StopScanner {
    stops: Vec<String>,
    /// Also stop where a new line opens with any speaker tag (`Mira:`), not just ours.
    speaker_tags: bool,
    /// Everything accepted so far (the reply as it will be returned).
    text: String,
    /// How much of `text` has been released to the stream.
    released: usize,
    stopped: bool,
}

impl StopScanner {
    pub fn new(stops: impl IntoIterator<Item = String>) -> Self {
        let stops = stops.into_iter().filter(|s| !s.is_empty()).collect();
        Self { stops, ..Default::default() }
    }

    /// Stops as well at a line that opens with a speaker tag: a base model continuing a
    /// transcript often invents the next speaker (`\nMira: ...`) rather than using
    /// ours, and everything from there on is not the assistant's reply.
    pub fn with_speaker_tags(mut self) -> Self {
        self.speaker_tags = true;
        self
    }

    /// Adds a piece of generated text. Returns the text that is now safe to stream; once
    /// a stop string has appeared, [`Self::stopped`] is true and nothing more is taken.
    pub fn push(&mut self, piece: &str) -> String {
        if self.stopped {
            return String::new();
        }
        // A stop string can straddle the previous pieces, so search from the oldest
        // byte it could start at: the unreleased tail covers that by construction.
        let search_from = self.released;
        self.text.push_str(piece);
        let fixed = self
            .stops
            .iter()
            .filter_map(|stop| self.text[search_from..].find(stop.as_str()).map(|at| search_from + at));
        let (tag_at, tag_hold) = if self.speaker_tags { self.speaker_tag(search_from) } else { (None, None) };
        if let Some(at) = fixed.chain(tag_at).min() {
            self.text.truncate(at);
            self.stopped = true;
            return self.release(at);
        }
        let mut safe = self.text.len() - self.longest_partial_stop();
        if let Some(hold) = tag_hold {
            safe = safe.min(hold);
        }
        self.release(safe)
    }

    /// The first newline at or after `from` that opens a complete speaker tag, and the
    /// newline of the last line that could still become one (to hold back).
    fn speaker_tag(&self, from: usize) -> (Option<usize>, Option<usize>) {
        let tail = &self.text[from..];
        let mut hold = None;
        for (i, _) in tail.match_indices('\n') {
            match speaker_tag(&tail[i + 1..]) {
                TagMatch::Complete => return (Some(from + i), None),
                TagMatch::Partial => {
                    hold.get_or_insert(from + i);
                }
                TagMatch::No => {}
            }
        }
        (None, hold)
    }

    /// The unreleased tail, once generation has ended for another reason.
    pub fn finish(&mut self) -> String {
        self.release(self.text.len())
    }

    pub fn stopped(&self) -> bool {
        self.stopped
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    fn release(&mut self, upto: usize) -> String {
        if upto <= self.released {
            return String::new();
        }
        let out = self.text[self.released..upto].to_string();
        self.released = upto;
        out
    }

    /// Length in bytes of the longest suffix of the text that is a proper prefix of a
    /// stop string (always on a character boundary).
    fn longest_partial_stop(&self) -> usize {
        let mut best = 0;
        for stop in &self.stops {
            for (len, _) in stop.char_indices().skip(1) {
                if len > best && self.text.ends_with(&stop[..len]) {
                    best = len;
                }
            }
        }
        best
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TagMatch {
    /// The line opens with `Name:`.
    Complete,
    /// The line so far could still become `Name:`.
    Partial,
    No,
}

/// Longest speaker name considered a tag; longer lines are prose.
const MAX_TAG_CHARS: usize = 32;

/// Whether `line` opens with a speaker tag: one to three capitalised words (letters,
/// digits, `'`, `-`, `.`), at most [`MAX_TAG_CHARS`] characters, then a colon. Lines
/// such as `Step 1: ...` or `and then: ...` are prose, not tags.
fn speaker_tag(line: &str) -> TagMatch {
    let mut words = 0;
    let mut at_word_start = true;
    for (n, c) in line.chars().enumerate() {
        if n > MAX_TAG_CHARS {
            return TagMatch::No;
        }
        if at_word_start {
            if !c.is_uppercase() || words == 3 {
                return TagMatch::No;
            }
            words += 1;
            at_word_start = false;
        } else if c == ':' {
            return TagMatch::Complete;
        } else if c == ' ' {
            at_word_start = true;
        } else if !(c.is_alphanumeric() || matches!(c, '\'' | '-' | '.')) {
            return TagMatch::No;
        }
    }
    TagMatch::Partial
}

/// Reassembles UTF-8 text from token pieces, which may split a character across tokens
/// (byte-fallback tokens emit one byte of an emoji at a time).
#[derive(Debug, Default)]
pub struct Utf8Assembler {
    pending: Vec<u8>,
}

impl Utf8Assembler {
    /// Adds bytes and returns every complete character now available. Bytes that can
    /// never become valid UTF-8 come out as U+FFFD rather than being dropped silently.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(text) => {
                    out.push_str(text);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // The prefix up to `valid` is valid UTF-8 by definition.
                    out.push_str(&String::from_utf8_lossy(&self.pending[..valid]));
                    match e.error_len() {
                        // An incomplete character at the end: wait for its other bytes.
                        None => {
                            self.pending.drain(..valid);
                            return out;
                        }
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
    }

    /// Whatever is left when generation ends: an incomplete character is replaced.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

/// Trims the reply's surrounding whitespace as it streams, so the streamed text and the
/// returned text are the same string. Leading whitespace (the space after `Assistant:`)
/// is dropped; trailing whitespace is held until more text follows it.
#[derive(Debug, Default)]
pub struct TrimmedStream {
    started: bool,
    pending_space: String,
}

impl TrimmedStream {
    pub fn push(&mut self, text: &str) -> String {
        let text = if self.started { text } else { text.trim_start() };
        if text.is_empty() {
            return String::new();
        }
        self.started = true;
        let body = text.trim_end();
        let tail = &text[body.len()..];
        if body.is_empty() {
            self.pending_space.push_str(tail);
            return String::new();
        }
        let mut out = std::mem::take(&mut self.pending_space);
        out.push_str(body);
        self.pending_space.push_str(tail);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcript_puts_system_first_and_leaves_an_open_assistant_turn() {
        let prompt = render_transcript(&[
            ChatMessage::system("You are Mira, a ferryman's daughter."),
            ChatMessage::user("Who are you?"),
            ChatMessage::assistant("Mira."),
            ChatMessage::user("  And your father?  "),
        ]);
        assert_eq!(
            prompt,
            "You are Mira, a ferryman's daughter.\n\nUser: Who are you?\n\nAssistant: Mira.\n\nUser: And your father?\n\nAssistant:"
        );
    }

    #[test]
    fn transcript_keeps_late_system_messages_in_place_and_continues_a_prefill() {
        let prompt = render_transcript(&[
            ChatMessage::user("Hi"),
            ChatMessage::system("The storm begins."),
            ChatMessage::assistant("The wind"),
        ]);
        assert_eq!(prompt, "User: Hi\n\nSystem: The storm begins.\n\nAssistant: The wind");
        assert_eq!(render_transcript(&[]), "Assistant:");
    }

    #[test]
    fn system_text_alone_is_a_document_continued_where_it_stops() {
        let prompt = render_transcript(&[ChatMessage::system("Character: Corin.\nPersonality: ")]);
        assert_eq!(prompt, "Character: Corin.\nPersonality: ");
    }

    fn scan(stops: &[&str], pieces: &[&str]) -> (Vec<String>, String, bool) {
        let mut scanner = StopScanner::new(stops.iter().map(|s| s.to_string()));
        let mut streamed = Vec::new();
        for piece in pieces {
            streamed.push(scanner.push(piece));
            if scanner.stopped() {
                break;
            }
        }
        if !scanner.stopped() {
            streamed.push(scanner.finish());
        }
        (streamed, scanner.text().to_string(), scanner.stopped())
    }

    #[test]
    fn stop_strings_split_across_pieces_are_never_streamed() {
        let (streamed, text, stopped) = scan(&["\nUser:"], &["Hello", " there\n", "Us", "er: next"]);
        assert_eq!(streamed, vec!["Hello", " there", "", ""]);
        assert_eq!(text, "Hello there");
        assert!(stopped);
    }

    #[test]
    fn held_back_text_is_released_when_it_turns_out_harmless() {
        let (streamed, text, stopped) = scan(&["\nUser:"], &["a\n", "Usb", " stick"]);
        assert_eq!(streamed.concat(), "a\nUsb stick");
        assert_eq!(streamed[0], "a");
        assert_eq!(text, "a\nUsb stick");
        assert!(!stopped);
    }

    #[test]
    fn the_earliest_of_several_stops_wins_and_multibyte_text_is_safe() {
        let (streamed, text, stopped) = scan(&["END", "ünd"], &["héllo wörld ü", "nd END"]);
        assert_eq!(text, "héllo wörld ");
        assert_eq!(streamed.concat(), "héllo wörld ");
        assert!(stopped);
        let (_, text, stopped) = scan(&[], &["no stops at all"]);
        assert_eq!(text, "no stops at all");
        assert!(!stopped);
    }

    #[test]
    fn speaker_tags_are_recognised_and_prose_is_not() {
        for tag in ["Mira:", "Old Tom:", "Dr. Vell-Arn:", "Élodie: hi", "Captain O'Brien Jr:"] {
            assert_eq!(speaker_tag(tag), TagMatch::Complete, "{tag}");
        }
        for partial in ["", "M", "Old To", "Old "] {
            assert_eq!(speaker_tag(partial), TagMatch::Partial, "{partial:?}");
        }
        for prose in ["Step 1: go", "and then: x", "The river was dark: x", "\"Mira\": x", " Mira:", "Mira, the"] {
            assert_eq!(speaker_tag(prose), TagMatch::No, "{prose}");
        }
        assert_eq!(speaker_tag("Averyveryveryverylongwordthatgoeson and on:"), TagMatch::No);
    }

    #[test]
    fn an_invented_speaker_ends_the_reply_without_leaking_into_the_stream() {
        let mut scanner = StopScanner::new(transcript_stops()).with_speaker_tags();
        let pieces = ["I see a ship.", "\n", "\nMi", "ra", ": What", " is it?"];
        let streamed: String = pieces.iter().map(|p| scanner.push(p)).collect();
        assert!(scanner.stopped());
        // The newline before the tag's line is the reply's (the worker trims it).
        assert_eq!(scanner.text(), "I see a ship.\n");
        assert_eq!(streamed, scanner.text());
        let mut scanner = StopScanner::new(transcript_stops()).with_speaker_tags();
        let pieces = ["Dawn came.", "\nThe river", " was dark: cold and still."];
        let mut streamed: String = pieces.iter().map(|p| scanner.push(p)).collect();
        streamed.push_str(&scanner.finish());
        assert!(!scanner.stopped());
        assert_eq!(streamed, pieces.concat());
    }

    #[test]
    fn trimmed_stream_matches_the_trimmed_text() {
        let pieces = [" ", " Hello", " world", "\n", "\n", "Again", " \n"];
        let mut stream = TrimmedStream::default();
        let streamed: String = pieces.iter().map(|p| stream.push(p)).collect();
        assert_eq!(streamed, pieces.concat().trim());
        assert_eq!(streamed, "Hello world\n\nAgain");
    }

    #[test]
    fn utf8_assembler_waits_for_split_characters_and_replaces_garbage() {
        let mut utf8 = Utf8Assembler::default();
        let crab = "🦀".as_bytes();
        assert_eq!(utf8.push(b"a"), "a");
        assert_eq!(utf8.push(&crab[..2]), "");
        assert_eq!(utf8.push(&crab[2..]), "🦀");
        assert_eq!(utf8.push(&[0xff, b'b']), "\u{fffd}b");
        assert_eq!(utf8.push(&crab[..1]), "");
        assert_eq!(utf8.finish(), "\u{fffd}");
    }
}
