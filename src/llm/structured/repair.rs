//! Turning the JSON a model actually wrote into the JSON it meant.
//!
//! Models wrap JSON in code fences and prose, stop mid-object when they run out of
//! tokens, and mix in JavaScript and Python habits. [`repair_json`] reads all of that,
//! and reports each kind of change as a [`Repair`] so the user can see that a reply was
//! mended, and how, instead of trusting it blindly. Damage with no sound reading (a
//! member with no value, a stray symbol where a separator must be) is an error, not a
//! guess: the structured-output layer then asks the model again.

mod parser;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

pub use parser::MAX_DEPTH;

/// One kind of change made to a reply to read it as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Repair {
    ByteOrderMark,
    ReasoningBlock,
    CodeFence,
    StrayBackticks,
    LanguageTag,
    ProseBefore,
    ProseAfter,
    /// Earlier JSON candidates in the reply were passed over (they did not parse
    /// completely, had the wrong shape, or did not match the schema).
    SkippedCandidates { count: usize },
    DoublyEncoded,
    UnwrappedArray,
    TrailingComma,
    ExtraComma,
    MissingComma,
    MissingColon,
    ClosedTruncated,
    TruncatedString,
    DroppedIncompleteMember,
    MismatchedCloser,
    SingleQuotes,
    SmartQuotes,
    UnquotedKey,
    UnquotedString,
    PythonLiteral,
    NonJsonLiteral,
    NonFiniteNumber,
    NumberFormat,
    Comments,
    ControlCharacter,
    UnescapedQuote,
    InvalidEscape,
    Ellipsis,
}

impl fmt::Display for Repair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Repair::ByteOrderMark => "removed a byte-order mark",
            Repair::ReasoningBlock => "ignored a <think> reasoning block",
            Repair::CodeFence => "took the JSON out of a code fence",
            Repair::StrayBackticks => "removed stray backticks",
            Repair::LanguageTag => "removed a leading \"json\" label",
            Repair::ProseBefore => "ignored text before the JSON",
            Repair::ProseAfter => "ignored text after the JSON",
            Repair::SkippedCandidates { count } => {
                return write!(f, "passed over {count} earlier JSON candidate(s)");
            }
            Repair::DoublyEncoded => "decoded JSON that was sent as a JSON string",
            Repair::UnwrappedArray => "took the object out of a one-element array",
            Repair::TrailingComma => "removed trailing commas",
            Repair::ExtraComma => "removed extra commas",
            Repair::MissingComma => "inserted missing commas",
            Repair::MissingColon => "inserted missing colons",
            Repair::ClosedTruncated => "closed output that was cut off",
            Repair::TruncatedString => "closed a string that was cut off",
            Repair::DroppedIncompleteMember => "dropped a member that was cut off",
            Repair::MismatchedCloser => "fixed a mismatched closing bracket",
            Repair::SingleQuotes => "replaced single quotes with double quotes",
            Repair::SmartQuotes => "replaced typographic quotes used as JSON quotes",
            Repair::UnquotedKey => "quoted bare keys",
            Repair::UnquotedString => "quoted bare text values",
            Repair::PythonLiteral => "converted Python True/False/None",
            Repair::NonJsonLiteral => "converted a non-JSON literal (undefined, TRUE, NULL)",
            Repair::NonFiniteNumber => "replaced NaN/Infinity with null",
            Repair::NumberFormat => "normalised a number written in a non-JSON form",
            Repair::Comments => "removed comments",
            Repair::ControlCharacter => "escaped raw line breaks or tabs inside strings",
            Repair::UnescapedQuote => "escaped quotes inside a string",
            Repair::InvalidEscape => "kept an invalid escape sequence literally",
            Repair::Ellipsis => "removed a \"...\" placeholder",
        };
        f.write_str(text)
    }
}

/// Why a reply could not be read as JSON at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RepairError {
    #[error("the reply is empty")]
    Empty,
    #[error("the reply contains no JSON object or array")]
    NoJson,
    #[error("the reply holds only a <think> reasoning block, no answer")]
    OnlyReasoning,
    #[error("cannot repair the JSON at line {line}, column {column}: {reason}")]
    Unrepairable { line: usize, column: usize, reason: String },
    #[error("the JSON nests deeper than {} levels (line {line}, column {column})", MAX_DEPTH)]
    TooDeep { line: usize, column: usize },
}

/// A reply read as JSON, with what had to be changed to read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Repaired {
    pub value: Value,
    /// Distinct kinds of change, in the order they were first needed. Empty when the
    /// reply was valid JSON as sent.
    pub repairs: Vec<Repair>,
}

/// The top-level shape the caller wants; it decides between candidates and whether a
/// one-element array is unwrapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Expect {
    #[default]
    Any,
    Object,
    Array,
}

impl Expect {
    /// Reads the top-level `"type"` of a JSON Schema.
    pub fn from_schema(schema: &Value) -> Self {
        match schema.get("type").and_then(Value::as_str) {
            Some("object") => Expect::Object,
            Some("array") => Expect::Array,
            _ => Expect::Any,
        }
    }

    fn admits(self, value: &Value) -> bool {
        match self {
            Expect::Any => value.is_object() || value.is_array(),
            Expect::Object => value.is_object(),
            Expect::Array => value.is_array(),
        }
    }
}

#[derive(Clone, Copy, Default)]
pub struct RepairOptions<'a> {
    pub expect: Expect,
    /// Prefers the candidate this accepts (typically "valid against the schema") when
    /// a reply holds several JSON documents.
    pub accept: Option<&'a dyn Fn(&Value) -> bool>,
}

/// How many candidate starts are tried per region: bounds the work on hostile input.
const MAX_CANDIDATES: usize = 32;

/// Reads `text` as JSON, repairing it where needed; see [`repair_json_with`].
pub fn repair_json(text: &str) -> Result<Repaired, RepairError> {
    repair_json_with(text, &RepairOptions::default())
}

/// Reads `text` as JSON, repairing common damage. Strict JSON comes back unchanged with
/// no repairs. Otherwise the fenced code blocks are searched first, then the whole
/// text, for the best candidate: a complete one of the expected shape that `accept`
/// takes, preferring earlier ones.
pub fn repair_json_with(text: &str, options: &RepairOptions<'_>) -> Result<Repaired, RepairError> {
    let mut repairs = Vec::new();
    let text = match text.strip_prefix('\u{FEFF}') {
        Some(rest) => {
            repairs.push(Repair::ByteOrderMark);
            rest
        }
        None => text,
    };
    if text.trim().is_empty() {
        return Err(RepairError::Empty);
    }
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        return Ok(finish(value, repairs, options));
    }
    let without_reasoning = strip_reasoning(text);
    let text = match &without_reasoning {
        Some(rest) => {
            repairs.push(Repair::ReasoningBlock);
            if rest.trim().is_empty() {
                return Err(RepairError::OnlyReasoning);
            }
            rest.as_str()
        }
        None => text,
    };
    let mut best: Option<(Found, bool)> = None;
    let mut first_failure: Option<RepairError> = None;
    // Fenced blocks first: a model that fences its answer puts the answer there.
    for block in fenced_blocks(text) {
        match search(block, options) {
            Ok(found) if best.as_ref().is_none_or(|(b, _)| found.rank > b.rank) => best = Some((found, true)),
            Ok(_) => {}
            Err(error) => {
                first_failure.get_or_insert(error);
            }
        }
        if best.as_ref().is_some_and(|(b, _)| b.rank == BEST_RANK) {
            break;
        }
    }
    if best.as_ref().is_none_or(|(b, _)| b.rank < BEST_RANK) {
        match search(text, options) {
            Ok(found) if best.as_ref().is_none_or(|(b, _)| found.rank > b.rank) => best = Some((found, false)),
            Ok(_) => {}
            Err(error) => {
                first_failure.get_or_insert(error);
            }
        }
    }
    match best {
        Some((found, fenced)) => {
            if fenced {
                repairs.push(Repair::CodeFence);
                repairs.extend(found.repairs.into_iter().filter(|r| !is_surrounding_text(r)));
            } else {
                repairs.extend(found.repairs);
            }
            Ok(finish(found.value, repairs, options))
        }
        None => Err(first_failure.unwrap_or(RepairError::NoJson)),
    }
}

/// Removes closed `<think>…</think>` / `<thinking>…</thinking>` blocks, which reasoning
/// models put before the answer and which often hold drafts of it.
fn strip_reasoning(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = text;
    let mut found = false;
    while let Some((open, close)) = ["<think>", "<thinking>"]
        .iter()
        .filter_map(|tag| {
            let open = rest.find(tag)?;
            let closing = format!("</{}", &tag[1..]);
            let close = rest[open..].find(&closing)? + open + closing.len();
            Some((open, close))
        })
        .min()
    {
        out.push_str(&rest[..open]);
        rest = &rest[close..];
        found = true;
    }
    out.push_str(rest);
    found.then_some(out)
}

fn is_surrounding_text(repair: &Repair) -> bool {
    matches!(repair, Repair::ProseBefore | Repair::ProseAfter | Repair::StrayBackticks | Repair::LanguageTag)
}

/// Applies the whole-document repairs: a JSON string holding the real document, and a
/// one-element array around the wanted object.
fn finish(value: Value, mut repairs: Vec<Repair>, options: &RepairOptions<'_>) -> Repaired {
    let value = match value {
        Value::String(inner) if inner.trim_start().starts_with(['{', '[']) => {
            match repair_json_with(&inner, options) {
                Ok(decoded) if options.expect.admits(&decoded.value) => {
                    push_unique(&mut repairs, Repair::DoublyEncoded);
                    for repair in decoded.repairs {
                        push_unique(&mut repairs, repair);
                    }
                    decoded.value
                }
                _ => Value::String(inner),
            }
        }
        other => other,
    };
    let value = match value {
        Value::Array(mut items) if wants_unwrap(&items, options.expect) => {
            push_unique(&mut repairs, Repair::UnwrappedArray);
            items.remove(0)
        }
        other => other,
    };
    Repaired { value, repairs }
}

fn wants_unwrap(items: &[Value], expect: Expect) -> bool {
    expect == Expect::Object && items.len() == 1 && items[0].is_object()
}

/// What [`finish`] will make of a candidate, without copying it.
fn unwrapped_view(value: &Value, expect: Expect) -> &Value {
    match value {
        Value::Array(items) if wants_unwrap(items, expect) => &items[0],
        other => other,
    }
}

fn push_unique(repairs: &mut Vec<Repair>, repair: Repair) {
    if !repairs.contains(&repair) {
        repairs.push(repair);
    }
}

/// The contents of each fenced code block (```` ``` ````), in order. An unclosed fence
/// (output cut off) runs to the end of the text.
fn fenced_blocks(text: &str) -> Vec<&str> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("```") {
        let after_ticks = rest[open..].trim_start_matches('`');
        // The info string (`json`, `JSON5`, ...) runs to the end of the opening line.
        let body = match after_ticks.find('\n') {
            Some(newline) if !after_ticks[..newline].contains(['{', '[']) => &after_ticks[newline + 1..],
            _ => after_ticks,
        };
        match body.find("```") {
            Some(close) => {
                blocks.push(&body[..close]);
                rest = body[close..].trim_start_matches('`');
            }
            None => {
                blocks.push(body);
                break;
            }
        }
    }
    blocks
}

/// A candidate's rank: the expected shape counts most, then acceptance by the
/// caller, then being complete rather than cut off.
fn rank(value: &Value, truncated: bool, options: &RepairOptions<'_>) -> u8 {
    let unwrapped = unwrapped_view(value, options.expect);
    let shape = options.expect.admits(unwrapped);
    let accepted = options.accept.is_none_or(|accept| accept(unwrapped));
    u8::from(shape) * 4 + u8::from(accepted) * 2 + u8::from(!truncated)
}

const BEST_RANK: u8 = 7;

struct Found {
    value: Value,
    repairs: Vec<Repair>,
    rank: u8,
}

/// The best candidate in one region of text.
fn search(region: &str, options: &RepairOptions<'_>) -> Result<Found, RepairError> {
    struct Candidate {
        value: Value,
        repairs: Vec<Repair>,
        start: usize,
        end: usize,
        rank: u8,
        index: usize,
    }
    if let Ok(value) = serde_json::from_str::<Value>(region.trim()) {
        let rank = rank(&value, false, options);
        return Ok(Found { value, repairs: Vec::new(), rank });
    }
    let mut best: Option<Candidate> = None;
    let mut first_failure: Option<parser::Failure> = None;
    let mut parsed_count = 0;
    let mut tried = 0;
    let mut from = 0;
    while tried < MAX_CANDIDATES {
        let Some(offset) = region.get(from..).and_then(|rest| rest.find(['{', '['])) else { break };
        let start = from + offset;
        tried += 1;
        match parser::parse_at(region, start) {
            Ok(parsed) => {
                let rank = rank(&parsed.value, parsed.truncated, options);
                if best.as_ref().is_none_or(|b| rank > b.rank) {
                    best = Some(Candidate {
                        value: parsed.value,
                        repairs: parsed.repairs,
                        start,
                        end: parsed.end,
                        rank,
                        index: parsed_count,
                    });
                }
                parsed_count += 1;
                if rank == BEST_RANK {
                    break;
                }
                // Later candidates are siblings, not pieces of this one.
                from = parsed.end.max(start + 1);
            }
            Err(failure) => {
                first_failure.get_or_insert(failure);
                from = start + 1;
            }
        }
    }
    let Some(best) = best else {
        return Err(match first_failure {
            Some(failure) => {
                let (line, column) = line_column(region, failure.offset());
                match failure {
                    parser::Failure::Unexpected { reason, .. } => RepairError::Unrepairable { line, column, reason },
                    parser::Failure::TooDeep { .. } => RepairError::TooDeep { line, column },
                }
            }
            None => RepairError::NoJson,
        });
    };
    let mut repairs = Vec::new();
    if let Some(repair) = classify_prefix(&region[..best.start]) {
        repairs.push(repair);
    }
    if best.index > 0 {
        repairs.push(Repair::SkippedCandidates { count: best.index });
    }
    for repair in best.repairs {
        push_unique(&mut repairs, repair);
    }
    if let Some(repair) = classify_suffix(region.get(best.end..).unwrap_or("")) {
        push_unique(&mut repairs, repair);
    }
    Ok(Found { value: best.value, repairs, rank: best.rank })
}

fn classify_prefix(prefix: &str) -> Option<Repair> {
    let trimmed = prefix.trim();
    if trimmed.is_empty() {
        return None;
    }
    let label = trimmed.trim_matches('`').trim_end_matches(':').trim();
    if label.eq_ignore_ascii_case("json") {
        Some(Repair::LanguageTag)
    } else if label.is_empty() {
        Some(Repair::StrayBackticks)
    } else {
        Some(Repair::ProseBefore)
    }
}

fn classify_suffix(suffix: &str) -> Option<Repair> {
    let trimmed = suffix.trim();
    if trimmed.is_empty() {
        None
    } else if trimmed.chars().all(|c| c == '`') {
        Some(Repair::StrayBackticks)
    } else {
        Some(Repair::ProseAfter)
    }
}

/// One-based line and column (in characters) of a byte offset, for error messages.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}
