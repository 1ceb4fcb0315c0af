//! A forgiving JSON reader for one candidate document.
//!
//! It accepts strict JSON plus the dialect language models actually write (JSON5-ish
//! quoting, Python literals, comments, missing or extra separators, output cut off
//! mid-way) and notes every liberty it took, so the caller can tell the user exactly
//! what was changed. Where a reading would be a guess with no good default (a colon
//! with no value, a stray symbol between members) it stops with an error instead.
//!
//! Positions are byte offsets that always sit on UTF-8 character boundaries: the
//! reader only ever advances by whole characters, so slicing cannot panic.

mod strings;

use super::Repair;
use serde_json::{Map, Number, Value};

/// Deeper nesting than this is refused. It matches serde_json's own limit, so whatever
/// we accept can be serialised and deserialised again, and it bounds our recursion.
pub const MAX_DEPTH: usize = 128;

/// Where the string being read sits; decides what may follow its closing quote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Key,
    ObjectValue,
    ArrayElement,
    TopLevel,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Failure {
    Unexpected { offset: usize, reason: String },
    TooDeep { offset: usize },
}

impl Failure {
    pub(super) fn offset(&self) -> usize {
        match self {
            Failure::Unexpected { offset, .. } | Failure::TooDeep { offset } => *offset,
        }
    }
}

/// One successfully read candidate.
pub(super) struct Parsed {
    pub value: Value,
    /// Byte offset just past the document.
    pub end: usize,
    /// The input ended inside the document, which was closed by us.
    pub truncated: bool,
    pub repairs: Vec<Repair>,
}

pub(super) fn parse_at(src: &str, start: usize) -> Result<Parsed, Failure> {
    let mut parser = Parser { src, pos: start, depth: 0, truncated: false, repairs: Vec::new() };
    parser.skip_trivia();
    let value = match parser.parse_value(Slot::TopLevel)? {
        Some(value) => value,
        None => return Err(parser.unexpected("a JSON value")),
    };
    Ok(Parsed { value, end: parser.pos, truncated: parser.truncated, repairs: parser.repairs })
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    depth: usize,
    truncated: bool,
    repairs: Vec<Repair>,
}

fn is_quote(c: char) -> bool {
    matches!(c, '"' | '\'' | '\u{201C}' | '\u{201D}' | '\u{2018}' | '\u{2019}')
}

fn closers_for(open: char) -> &'static [char] {
    match open {
        '"' => &['"'],
        '\'' => &['\''],
        '\u{201C}' | '\u{201D}' => &['\u{201D}', '\u{201C}'],
        _ => &['\u{2019}', '\u{2018}'],
    }
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$' || c == '-'
}

fn starts_value(c: char) -> bool {
    matches!(c, '{' | '[' | '-' | '+' | '.') || is_quote(c) || c.is_alphanumeric()
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        self.src.get(self.pos..).unwrap_or("")
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn char_at(&self, at: usize) -> Option<char> {
        self.src.get(at..).and_then(|s| s.chars().next())
    }

    fn bump(&mut self) {
        if let Some(c) = self.peek() {
            self.pos += c.len_utf8();
        }
    }

    fn note(&mut self, repair: Repair) {
        if !self.repairs.contains(&repair) {
            self.repairs.push(repair);
        }
    }

    /// The input ended inside the document: remember it, and say so once.
    fn hit_end(&mut self) {
        self.truncated = true;
        self.note(Repair::ClosedTruncated);
    }

    fn unexpected(&self, wanted: &str) -> Failure {
        let reason = match self.peek() {
            Some(c) => format!("expected {wanted}, found {c:?}"),
            None => format!("expected {wanted}, found the end of the text"),
        };
        Failure::Unexpected { offset: self.pos, reason }
    }

    /// Skips whitespace and comments (`//`, `/* */`, `#`), which JSON does not allow
    /// but models write, usually to annotate a field.
    fn skip_trivia(&mut self) {
        loop {
            let rest = self.rest();
            let Some(c) = rest.chars().next() else { return };
            if c.is_whitespace() || c == '\u{FEFF}' {
                self.pos += c.len_utf8();
            } else if rest.starts_with("//") || c == '#' {
                self.note(Repair::Comments);
                self.pos += rest.find('\n').unwrap_or(rest.len());
            } else if rest.starts_with("/*") {
                self.note(Repair::Comments);
                match rest[2..].find("*/") {
                    Some(end) => self.pos += end + 4,
                    None => {
                        self.pos += rest.len();
                        self.hit_end();
                    }
                }
            } else {
                return;
            }
        }
    }

    /// Skips a `...` / `…` placeholder where a member or element would be.
    fn skip_ellipsis(&mut self) -> bool {
        let rest = self.rest();
        let len = if rest.starts_with("...") {
            3
        } else if rest.starts_with('\u{2026}') {
            '\u{2026}'.len_utf8()
        } else {
            return false;
        };
        self.pos += len;
        self.note(Repair::Ellipsis);
        true
    }

    /// `None` means the input ended before any usable value started, so the caller
    /// should drop the member or element that was being read.
    fn parse_value(&mut self, slot: Slot) -> Result<Option<Value>, Failure> {
        let Some(c) = self.peek() else {
            self.hit_end();
            return Ok(None);
        };
        match c {
            '{' => self.parse_object().map(Some),
            '[' => self.parse_array().map(Some),
            c if is_quote(c) => Ok(Some(Value::String(self.parse_string(slot)?.0))),
            c if c.is_ascii_digit() || matches!(c, '-' | '+' | '.') => self.parse_number(),
            c if c.is_alphabetic() || c == '_' => self.parse_word(),
            _ => Err(self.unexpected("a JSON value")),
        }
    }

    fn enter(&mut self) -> Result<(), Failure> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Failure::TooDeep { offset: self.pos });
        }
        self.bump();
        Ok(())
    }

    fn parse_object(&mut self) -> Result<Value, Failure> {
        self.enter()?;
        let mut map = Map::new();
        // True right after `{` or a comma: a member may start, a second comma is extra.
        let mut after_separator = true;
        let mut after_comma = false;
        loop {
            self.skip_trivia();
            match self.peek() {
                None => {
                    self.hit_end();
                    break;
                }
                Some('}') => {
                    if after_comma {
                        self.note(Repair::TrailingComma);
                    }
                    self.bump();
                    break;
                }
                Some(']') => {
                    self.note(Repair::MismatchedCloser);
                    break;
                }
                Some(',') => {
                    if after_separator {
                        self.note(Repair::ExtraComma);
                    }
                    self.bump();
                    after_separator = true;
                    after_comma = true;
                    continue;
                }
                Some(_) if self.skip_ellipsis() => {
                    after_comma = false;
                    continue;
                }
                Some(c) if is_quote(c) || is_word_char(c) => {
                    if !after_separator {
                        self.note(Repair::MissingComma);
                    }
                }
                Some(_) => return Err(self.unexpected("a key, ',' or '}'")),
            }
            after_separator = false;
            after_comma = false;
            let Some(key) = self.parse_key()? else {
                self.note(Repair::DroppedIncompleteMember);
                break;
            };
            self.skip_trivia();
            match self.peek() {
                None => {
                    self.hit_end();
                    self.note(Repair::DroppedIncompleteMember);
                    break;
                }
                Some(':') => self.bump(),
                Some('=') => {
                    self.note(Repair::MissingColon);
                    self.bump();
                }
                Some(c) if starts_value(c) => self.note(Repair::MissingColon),
                Some(_) => return Err(self.unexpected("':' after the key")),
            }
            self.skip_trivia();
            match self.peek() {
                Some(',' | '}' | ']') => return Err(self.unexpected("a value after the colon")),
                _ => {}
            }
            match self.parse_value(Slot::ObjectValue)? {
                Some(value) => {
                    map.insert(key, value);
                }
                None => {
                    self.note(Repair::DroppedIncompleteMember);
                    break;
                }
            }
        }
        self.depth -= 1;
        Ok(Value::Object(map))
    }

    fn parse_key(&mut self) -> Result<Option<String>, Failure> {
        match self.peek() {
            Some(c) if is_quote(c) => {
                let (key, complete) = self.parse_string(Slot::Key)?;
                Ok(complete.then_some(key))
            }
            _ => {
                let start = self.pos;
                while self.peek().is_some_and(is_word_char) {
                    self.bump();
                }
                self.note(Repair::UnquotedKey);
                Ok(Some(self.src[start..self.pos].to_string()))
            }
        }
    }

    fn parse_array(&mut self) -> Result<Value, Failure> {
        self.enter()?;
        let mut items = Vec::new();
        let mut after_separator = true;
        let mut after_comma = false;
        loop {
            self.skip_trivia();
            match self.peek() {
                None => {
                    self.hit_end();
                    break;
                }
                Some(']') => {
                    if after_comma {
                        self.note(Repair::TrailingComma);
                    }
                    self.bump();
                    break;
                }
                Some('}') => {
                    self.note(Repair::MismatchedCloser);
                    break;
                }
                Some(',') => {
                    if after_separator {
                        self.note(Repair::ExtraComma);
                    }
                    self.bump();
                    after_separator = true;
                    after_comma = true;
                    continue;
                }
                Some(_) if self.skip_ellipsis() => {
                    after_comma = false;
                    continue;
                }
                Some(c) if starts_value(c) => {
                    if !after_separator {
                        self.note(Repair::MissingComma);
                    }
                }
                Some(_) => return Err(self.unexpected("a value, ',' or ']'")),
            }
            after_separator = false;
            after_comma = false;
            match self.parse_value(Slot::ArrayElement)? {
                Some(value) => items.push(value),
                None => break,
            }
        }
        self.depth -= 1;
        Ok(Value::Array(items))
    }

    fn parse_number(&mut self) -> Result<Option<Value>, Failure> {
        let start = self.pos;
        let rest = self.rest();
        let run_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '-' | '_')))
            .unwrap_or(rest.len());
        let run = &rest[..run_len];
        let at_end = run_len == rest.len();
        let unsigned = run.trim_start_matches(['-', '+']);
        if matches!(unsigned, "Infinity" | "inf" | "NaN") {
            self.pos += run_len;
            self.note(Repair::NonFiniteNumber);
            return Ok(Some(Value::Null));
        }
        let clock_time = rest[run_len..].starts_with(':') && rest[run_len + 1..].starts_with(|c: char| c.is_ascii_digit());
        if let Some(number) = number_from(run).filter(|_| !clock_time) {
            self.pos += run_len;
            if number.is_null() {
                self.note(Repair::NonFiniteNumber);
            } else if !is_strict_number(run) {
                self.note(Repair::NumberFormat);
            }
            return Ok(Some(number));
        }
        if at_end && !clock_time {
            // Cut off inside the number (`12.`, `3e`, `-`): keep what is certain.
            let certain = run.trim_end_matches(|c: char| !c.is_ascii_digit());
            self.pos += run_len;
            self.hit_end();
            return Ok(number_from(certain));
        }
        // Not a number after all (`180cm`, `2024-05-01`, `12:30`): an unquoted string.
        self.pos = start;
        self.read_bare_string().map(Some)
    }

    fn parse_word(&mut self) -> Result<Option<Value>, Failure> {
        let rest = self.rest();
        let word_len = rest.find(|c: char| !is_word_char(c)).unwrap_or(rest.len());
        let word = &rest[..word_len];
        let literal = match word {
            "true" => Some((Value::Bool(true), None)),
            "false" => Some((Value::Bool(false), None)),
            "null" => Some((Value::Null, None)),
            "True" => Some((Value::Bool(true), Some(Repair::PythonLiteral))),
            "False" => Some((Value::Bool(false), Some(Repair::PythonLiteral))),
            "None" => Some((Value::Null, Some(Repair::PythonLiteral))),
            "undefined" | "TRUE" | "FALSE" | "NULL" | "Null" => {
                let value = match word {
                    "TRUE" => Value::Bool(true),
                    "FALSE" => Value::Bool(false),
                    _ => Value::Null,
                };
                Some((value, Some(Repair::NonJsonLiteral)))
            }
            "NaN" | "Infinity" => Some((Value::Null, Some(Repair::NonFiniteNumber))),
            _ => None,
        };
        if let Some((value, repair)) = literal {
            self.pos += word_len;
            if let Some(repair) = repair {
                self.note(repair);
            }
            return Ok(Some(value));
        }
        if word_len == rest.len() && !word.is_empty() {
            // The text ends inside a literal such as `tru`.
            for (full, value) in [("true", Value::Bool(true)), ("false", Value::Bool(false)), ("null", Value::Null)] {
                if full.starts_with(word) {
                    self.pos += word_len;
                    self.hit_end();
                    return Ok(Some(value));
                }
            }
        }
        self.read_bare_string().map(Some)
    }

    /// An unquoted value runs to the next separator or line end: `{"mood": calm}`.
    fn read_bare_string(&mut self) -> Result<Value, Failure> {
        let rest = self.rest();
        let len = rest.find([',', '}', ']', '\n', '\r']).unwrap_or(rest.len());
        let text = rest[..len].trim_end();
        if text.is_empty() {
            return Err(self.unexpected("a value"));
        }
        if len == rest.len() {
            self.hit_end();
        }
        self.note(Repair::UnquotedString);
        self.pos += len;
        Ok(Value::String(text.to_string()))
    }
}

fn is_strict_number(run: &str) -> bool {
    serde_json::from_str::<Number>(run).is_ok()
}

/// Reads a number in JSON or in the looser forms models write (`+1`, `.5`, `5.`, `007`,
/// `0x1F`, `1_000`). Values too large for a double become `null` rather than an error.
fn number_from(run: &str) -> Option<Value> {
    if run.is_empty() {
        return None;
    }
    if let Ok(number) = serde_json::from_str::<Number>(run) {
        return Some(Value::Number(number));
    }
    let (negative, body) = match run.as_bytes()[0] {
        b'-' => (true, &run[1..]),
        b'+' => (false, &run[1..]),
        _ => (false, run),
    };
    if let Some(hex) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        let magnitude = i64::from_str_radix(hex, 16).ok()?;
        return Some(Value::from(if negative { -magnitude } else { magnitude }));
    }
    let body = body.replace('_', "");
    if body.is_empty() || !body.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return None;
    }
    let mut normalised = String::with_capacity(body.len() + 2);
    if negative {
        normalised.push('-');
    }
    let digits = body.trim_start_matches('0');
    if digits.is_empty() || digits.starts_with(['.', 'e', 'E']) {
        normalised.push('0');
    }
    normalised.push_str(digits);
    let normalised = normalised.replace(".e", ".0e").replace(".E", ".0E");
    let normalised = normalised.strip_suffix('.').unwrap_or(&normalised);
    if let Ok(number) = serde_json::from_str::<Number>(normalised) {
        return Some(Value::Number(number));
    }
    // Only a pure decimal that overflowed gets here; anything else is not a number.
    let float: f64 = normalised.parse().ok()?;
    Some(Number::from_f64(float).map_or(Value::Null, Value::Number))
}
