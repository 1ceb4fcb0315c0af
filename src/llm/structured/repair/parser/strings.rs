//! Strings: every quote style models use, escapes, and the look-ahead that decides
//! whether a quote character ends a string or is an unescaped quote inside it.

use super::{Failure, Parser, Slot, closers_for, is_quote, is_word_char};
use crate::llm::repair::Repair;

impl Parser<'_> {
    /// Reads a string opened by any quote character. Returns the text and whether the
    /// closing quote was found (false: the input ended inside the string).
    pub(super) fn parse_string(&mut self, slot: Slot) -> Result<(String, bool), Failure> {
        let Some(open) = self.peek() else { return Err(self.unexpected("a string")) };
        self.bump();
        match open {
            '"' => {}
            '\'' => self.note(Repair::SingleQuotes),
            _ => self.note(Repair::SmartQuotes),
        }
        let closers = closers_for(open);
        let mut out = String::new();
        loop {
            let Some(c) = self.peek() else {
                self.truncated = true;
                self.note(Repair::TruncatedString);
                return Ok((out, false));
            };
            if c == '\\' {
                self.bump();
                self.read_escape(open, &mut out);
                continue;
            }
            if closers.contains(&c) {
                let after = self.pos + c.len_utf8();
                if self.string_ends_at(after, slot) {
                    self.pos = after;
                    return Ok((out, true));
                }
                self.note(Repair::UnescapedQuote);
            } else if (c as u32) < 0x20 {
                self.note(Repair::ControlCharacter);
            }
            out.push(c);
            self.bump();
        }
    }

    fn read_escape(&mut self, open: char, out: &mut String) {
        let Some(c) = self.peek() else { return };
        self.bump();
        let plain = match c {
            '"' | '\\' | '/' => c,
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'u' => {
                if let Some(decoded) = self.read_unicode_escape() {
                    out.push(decoded);
                } else {
                    self.note(Repair::InvalidEscape);
                    out.push_str("\\u");
                }
                return;
            }
            '\'' => {
                if open != '\'' {
                    self.note(Repair::InvalidEscape);
                }
                '\''
            }
            // A backslash before a line break continues the line (JavaScript style).
            '\n' => {
                self.note(Repair::InvalidEscape);
                return;
            }
            _ => {
                // Keep the backslash: `C:\Users` and `\d+` mean what they say.
                self.note(Repair::InvalidEscape);
                out.push('\\');
                c
            }
        };
        out.push(plain);
    }

    /// Decodes the four hex digits after `\u` (and a following low surrogate). A lone
    /// surrogate becomes U+FFFD; a malformed escape returns `None` and consumes nothing.
    fn read_unicode_escape(&mut self) -> Option<char> {
        let high = self.hex4(self.pos)?;
        self.pos += 4;
        if !(0xD800..0xE000).contains(&high) {
            return char::from_u32(high);
        }
        if (0xD800..0xDC00).contains(&high) && self.rest().starts_with("\\u") {
            if let Some(low) = self.hex4(self.pos + 2).filter(|low| (0xDC00..0xE000).contains(low)) {
                self.pos += 6;
                return char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00));
            }
        }
        self.note(Repair::InvalidEscape);
        Some('\u{FFFD}')
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        let digits = self.src.get(at..at + 4)?;
        if !digits.chars().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        u32::from_str_radix(digits, 16).ok()
    }

    /// Decides whether a quote character just before `after` closes the string, by what
    /// follows it. This is what lets `"He said "hi" twice"` keep its inner quotes while
    /// `"a" "b": 1` (a missing comma) still splits into two strings.
    fn string_ends_at(&self, after: usize, slot: Slot) -> bool {
        let (next, newline) = self.skip_blank(after);
        let Some(c) = self.char_at(next) else { return true };
        if slot == Slot::Key {
            // `{"a" 1}`: with no colon left on the line, the colon is what is missing.
            // (Bounded look-ahead: a megabyte on one line must not make this quadratic.)
            let mut line = self.src.get(next..).unwrap_or("").chars().take_while(|&c| c != '\n').take(200);
            return c == ':' || c == '=' || !line.any(|c| c == ':');
        }
        match c {
            '}' | ']' => true,
            ',' => self.plausible_after_comma(next + 1),
            '/' => matches!(self.char_at(next + 1), Some('/' | '*')),
            '#' => next > after,
            c if is_quote(c) => {
                newline
                    || match slot {
                        Slot::ObjectValue => self.quoted_then(next, &[':']),
                        _ => next > after || self.quoted_then(next, &[',', ']']),
                    }
            }
            // `["a" 3]`: in a list, a value after a gap means a comma is missing.
            c if slot != Slot::ObjectValue
                && next > after
                && (c.is_ascii_digit() || matches!(c, '{' | '[' | '-') || self.is_literal_at(next)) =>
            {
                true
            }
            c if is_word_char(c) => newline && slot == Slot::ObjectValue && self.word_then_colon(next),
            _ => false,
        }
    }

    /// Skips plain whitespace from `at`; reports where it stopped and whether a line
    /// break was crossed.
    fn skip_blank(&self, at: usize) -> (usize, bool) {
        let rest = self.src.get(at..).unwrap_or("");
        let trimmed = rest.trim_start();
        let skipped = &rest[..rest.len() - trimmed.len()];
        (at + skipped.len(), skipped.contains('\n'))
    }

    fn plausible_after_comma(&self, at: usize) -> bool {
        let (next, _) = self.skip_blank(at);
        let Some(c) = self.char_at(next) else { return true };
        if is_quote(c) || matches!(c, '{' | '[' | '}' | ']' | '-' | '/') || c.is_ascii_digit() {
            return true;
        }
        is_word_char(c) && (self.word_then_colon(next) || self.is_literal_at(next))
    }

    fn word_then_colon(&self, at: usize) -> bool {
        let rest = self.src.get(at..).unwrap_or("");
        let word_len = rest.find(|c: char| !is_word_char(c)).unwrap_or(rest.len());
        rest[word_len..].trim_start().starts_with(':')
    }

    fn is_literal_at(&self, at: usize) -> bool {
        let rest = self.src.get(at..).unwrap_or("");
        let word = &rest[..rest.find(|c: char| !is_word_char(c)).unwrap_or(rest.len())];
        matches!(word, "true" | "false" | "null" | "True" | "False" | "None")
    }

    /// Whether a short quoted string starts at `at` (same line, any quote style) and is
    /// followed by one of `followers`.
    fn quoted_then(&self, at: usize, followers: &[char]) -> bool {
        let rest = self.src.get(at..).unwrap_or("");
        let mut chars = rest.char_indices();
        chars.next();
        for (i, c) in chars.take(200) {
            if c == '\n' {
                return false;
            }
            if is_quote(c) {
                let after = rest[i + c.len_utf8()..].trim_start();
                return after.starts_with(followers);
            }
        }
        false
    }
}
