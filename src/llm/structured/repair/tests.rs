//! One `check` per kind of damage: the input as a model might send it, the JSON it
//! meant, and exactly which repairs must be reported.

use super::*;
use serde_json::json;

#[track_caller]
fn check(input: &str, expected: Value, repairs: &[Repair]) {
    check_with(input, &RepairOptions::default(), expected, repairs);
}

#[track_caller]
fn check_with(input: &str, options: &RepairOptions<'_>, expected: Value, repairs: &[Repair]) {
    let repaired = match repair_json_with(input, options) {
        Ok(repaired) => repaired,
        Err(error) => panic!("could not repair {input:?}: {error}"),
    };
    assert_eq!(repaired.value, expected, "value read from {input:?}");
    let mut got: Vec<String> = repaired.repairs.iter().map(|r| format!("{r:?}")).collect();
    let mut want: Vec<String> = repairs.iter().map(|r| format!("{r:?}")).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "repairs reported for {input:?}");
}

#[track_caller]
fn check_error(input: &str, expected: &str) {
    match repair_json(input) {
        Ok(repaired) => panic!("{input:?} should be unrepairable, got {}", repaired.value),
        Err(error) => assert_eq!(error.to_string(), expected, "error for {input:?}"),
    }
}

#[test]
fn valid_json_is_returned_untouched() {
    check(r#"{"a": [1, 2.5, "x"], "b": null}"#, json!({"a": [1, 2.5, "x"], "b": null}), &[]);
    check("  [true, false]\n", json!([true, false]), &[]);
    check(r#"{"s": "ok \"quoted\" \u00e9"}"#, json!({"s": "ok \"quoted\" é"}), &[]);
}

#[test]
fn code_fences() {
    check("```json\n{\"a\": 1}\n```", json!({"a": 1}), &[Repair::CodeFence]);
    check("```\n{\"a\": 1}\n```", json!({"a": 1}), &[Repair::CodeFence]);
    check("Here it is:\n```JSON\n{\"a\": 1}\n```\nHope this helps!", json!({"a": 1}), &[Repair::CodeFence]);
    check("```{\"a\": 1}```", json!({"a": 1}), &[Repair::CodeFence]);
    // The fence was never closed because the output was cut off.
    check("```json\n{\"a\": [1, 2", json!({"a": [1, 2]}), &[Repair::CodeFence, Repair::ClosedTruncated]);
}

#[test]
fn several_fenced_blocks() {
    let wants_b = |v: &Value| v.get("b").is_some();
    let options = RepairOptions { expect: Expect::Object, accept: Some(&wants_b) };
    let reply = "First try:\n```json\n{\"a\": 1}\n```\nBetter:\n```json\n{\"b\": 2,}\n```";
    check_with(reply, &options, json!({"b": 2}), &[Repair::CodeFence, Repair::TrailingComma]);
    // Without a preference the first block wins.
    check(reply, json!({"a": 1}), &[Repair::CodeFence]);
    // JSON outside a fence that holds something else is still found.
    check("```python\nprint(1)\n```\n{\"a\": 1}", json!({"a": 1}), &[Repair::ProseBefore]);
}

#[test]
fn stray_backticks_and_language_tag() {
    check("`{\"a\": 1}`", json!({"a": 1}), &[Repair::StrayBackticks]);
    check("json\n{\"a\": 1}", json!({"a": 1}), &[Repair::LanguageTag]);
    check("JSON: {\"a\": 1}", json!({"a": 1}), &[Repair::LanguageTag]);
}

#[test]
fn prose_around_the_object() {
    check(
        "Sure! Here is the character:\n{\"name\": \"Ann\"}\nLet me know if you want changes.",
        json!({"name": "Ann"}),
        &[Repair::ProseBefore, Repair::ProseAfter],
    );
    // Braces inside prose that do not form JSON are passed over.
    check("I {think} this works: {\"a\": 1}", json!({"a": 1}), &[Repair::ProseBefore]);
}

#[test]
fn reasoning_blocks() {
    check("<think>Maybe {\"a\": 0}? No.</think>\n{\"a\": 1}", json!({"a": 1}), &[Repair::ReasoningBlock]);
    check("<thinking>{\"a\": 0}</thinking>```json\n{\"a\": 2}\n```", json!({"a": 2}), &[
        Repair::ReasoningBlock,
        Repair::CodeFence,
    ]);
    check_error("<think>I should answer {\"a\": 1}</think>\n", "the reply holds only a <think> reasoning block, no answer");
}

#[test]
fn several_candidates() {
    // Without a schema, the first complete document wins.
    check("{\"a\": 1} or maybe {\"b\": 2}", json!({"a": 1}), &[Repair::ProseAfter]);
    // When an object is wanted, an earlier array is passed over.
    let options = RepairOptions { expect: Expect::Object, accept: None };
    check_with("[1, 2] then {\"a\": 1}", &options, json!({"a": 1}), &[
        Repair::ProseBefore,
        Repair::SkippedCandidates { count: 1 },
    ]);
    // With a schema, the candidate it accepts wins even when it comes later.
    let wants_b = |v: &Value| v.get("b").is_some();
    let options = RepairOptions { expect: Expect::Object, accept: Some(&wants_b) };
    check_with("Draft: {\"a\": 1}\nFinal: {\"b\": 2}", &options, json!({"b": 2}), &[
        Repair::ProseBefore,
        Repair::SkippedCandidates { count: 1 },
    ]);
}

#[test]
fn trailing_and_extra_commas() {
    check(r#"{"a": 1, "b": 2,}"#, json!({"a": 1, "b": 2}), &[Repair::TrailingComma]);
    check(r#"{"a": [1, 2, 3,],}"#, json!({"a": [1, 2, 3]}), &[Repair::TrailingComma]);
    check(r#"{"a": [1,, 2], , "b": 1}"#, json!({"a": [1, 2], "b": 1}), &[Repair::ExtraComma]);
}

#[test]
fn missing_closers_from_truncated_output() {
    check(r#"{"a": {"b": [1, 2"#, json!({"a": {"b": [1, 2]}}), &[Repair::ClosedTruncated]);
    check(r#"{"a": 1, "b": "#, json!({"a": 1}), &[Repair::ClosedTruncated, Repair::DroppedIncompleteMember]);
    check(r#"{"a": 1, "b"#, json!({"a": 1}), &[Repair::TruncatedString, Repair::DroppedIncompleteMember]);
    check(r#"{"a": 1, "#, json!({"a": 1}), &[Repair::ClosedTruncated]);
    check(r#"{"a": tr"#, json!({"a": true}), &[Repair::ClosedTruncated]);
    check(r#"{"a": [1, 2.5e"#, json!({"a": [1, 2.5]}), &[Repair::ClosedTruncated]);
}

#[test]
fn truncated_string_literal() {
    check(
        r#"{"name": "Ann", "bio": "Born in the north, she"#,
        json!({"name": "Ann", "bio": "Born in the north, she"}),
        &[Repair::TruncatedString, Repair::ClosedTruncated],
    );
}

#[test]
fn single_quoted_strings() {
    check("{'line': 'it's fine', 'b': ['x', 'y']}", json!({"line": "it's fine", "b": ["x", "y"]}), &[
        Repair::SingleQuotes,
        Repair::UnescapedQuote,
    ]);
    check("{'mood': 'don\\'t panic'}", json!({"mood": "don't panic"}), &[Repair::SingleQuotes]);
}

#[test]
fn unquoted_keys() {
    check("{name: \"Ann\", age_years: 30, $ref: 1}", json!({"name": "Ann", "age_years": 30, "$ref": 1}), &[
        Repair::UnquotedKey,
    ]);
}

#[test]
fn python_and_javascript_literals() {
    check(r#"{"a": True, "b": False, "c": None}"#, json!({"a": true, "b": false, "c": null}), &[Repair::PythonLiteral]);
    check(r#"{"a": undefined, "b": TRUE}"#, json!({"a": null, "b": true}), &[Repair::NonJsonLiteral]);
}

#[test]
fn comments() {
    check(
        "{\n  // the name\n  \"a\": 1, /* inline */ \"b\": \"http://x//y\" # trailing\n}",
        json!({"a": 1, "b": "http://x//y"}),
        &[Repair::Comments],
    );
}

#[test]
fn smart_quotes_as_json_quotes() {
    check("{“name”: “Ann”, ‘role’: ‘scout’}", json!({"name": "Ann", "role": "scout"}), &[Repair::SmartQuotes]);
    // Typographic quotes inside a proper string are content and stay.
    check("{\"line\": \"She said “hi”\",}", json!({"line": "She said “hi”"}), &[Repair::TrailingComma]);
}

#[test]
fn raw_control_characters_inside_strings() {
    check("{\"a\": \"line one\nline two\tend\",}", json!({"a": "line one\nline two\tend"}), &[
        Repair::ControlCharacter,
        Repair::TrailingComma,
    ]);
}

#[test]
fn unescaped_inner_quotes() {
    check(
        r#"{"line": "He said "hi" and left", "n": 1}"#,
        json!({"line": "He said \"hi\" and left", "n": 1}),
        &[Repair::UnescapedQuote],
    );
    check(r#"{"a": "the "end"", "b": 2}"#, json!({"a": "the \"end\"", "b": 2}), &[Repair::UnescapedQuote]);
    check(r#"{"a": "He said, "no", twice"}"#, json!({"a": "He said, \"no\", twice"}), &[Repair::UnescapedQuote]);
    check(r#"{"a": 'it's', "b": 1}"#, json!({"a": "it's", "b": 1}), &[Repair::SingleQuotes, Repair::UnescapedQuote]);
    // Inside a single-quoted string, double quotes are plain text.
    check(r#"{'b': 'say "hi"'}"#, json!({"b": "say \"hi\""}), &[Repair::SingleQuotes]);
}

#[test]
fn missing_commas_and_colons() {
    check("{\"a\": 1\n \"b\": 2}", json!({"a": 1, "b": 2}), &[Repair::MissingComma]);
    check(r#"{"a": "x" "b": "y"}"#, json!({"a": "x", "b": "y"}), &[Repair::MissingComma]);
    check(r#"["x" "y" 3 4]"#, json!(["x", "y", 3, 4]), &[Repair::MissingComma]);
    check("{\"a\": [1, 2]\n  c: 3}", json!({"a": [1, 2], "c": 3}), &[Repair::MissingComma, Repair::UnquotedKey]);
    check("{a 1, b = 2}", json!({"a": 1, "b": 2}), &[Repair::MissingColon, Repair::UnquotedKey]);
    check(r#"{"a" 1, "b" "x"}"#, json!({"a": 1, "b": "x"}), &[Repair::MissingColon]);
    check("{\n\"a\": \"one\"\n\"b\": \"two\"\n}", json!({"a": "one", "b": "two"}), &[Repair::MissingComma]);
}

#[test]
fn non_finite_and_odd_numbers() {
    check(r#"{"a": NaN, "b": -Infinity, "c": Infinity}"#, json!({"a": null, "b": null, "c": null}), &[
        Repair::NonFiniteNumber,
    ]);
    check("[+1, .5, 5., 007, 0x1F, 1_000, -0.25]", json!([1, 0.5, 5, 7, 31, 1000, -0.25]), &[Repair::NumberFormat]);
    check("[1e400]", json!([null]), &[Repair::NonFiniteNumber]);
}

#[test]
fn byte_order_mark() {
    check("\u{FEFF}{\"a\": 1}", json!({"a": 1}), &[Repair::ByteOrderMark]);
    check("\u{FEFF}{\"a\": 1,}", json!({"a": 1}), &[Repair::ByteOrderMark, Repair::TrailingComma]);
}

#[test]
fn doubly_encoded_json() {
    check(r#""{\"a\": [1, 2]}""#, json!({"a": [1, 2]}), &[Repair::DoublyEncoded]);
    check(r#""{\"a\": 1,}""#, json!({"a": 1}), &[Repair::DoublyEncoded, Repair::TrailingComma]);
    // A plain string stays a string (the schema will say it is wrong).
    check(r#""just words""#, json!("just words"), &[]);
}

#[test]
fn one_element_array_when_an_object_is_wanted() {
    let object = RepairOptions { expect: Expect::Object, accept: None };
    check_with(r#"[{"a": 1}]"#, &object, json!({"a": 1}), &[Repair::UnwrappedArray]);
    check_with(r#"[{"a": 1},]"#, &object, json!({"a": 1}), &[Repair::UnwrappedArray, Repair::TrailingComma]);
    // Two elements are not ours to choose between.
    check_with(r#"[{"a": 1}, {"a": 2}]"#, &object, json!([{"a": 1}, {"a": 2}]), &[]);
    // Without the expectation the array is kept.
    check(r#"[{"a": 1}]"#, json!([{"a": 1}]), &[]);
}

#[test]
fn bare_values_mismatched_closers_and_placeholders() {
    check("{\"mood\": calm, \"born\": 2024-05-01}", json!({"mood": "calm", "born": "2024-05-01"}), &[
        Repair::UnquotedString,
    ]);
    check(r#"{"a": [1, 2}"#, json!({"a": [1, 2]}), &[Repair::MismatchedCloser]);
    check(r#"{"a": [1, 2, 3]]"#, json!({"a": [1, 2, 3]}), &[Repair::MismatchedCloser, Repair::ProseAfter]);
    check(r#"{"at": 12:30, "n": -3}"#, json!({"at": "12:30", "n": -3}), &[Repair::UnquotedString]);
    check(r#"{"a": [1, 2, ...], ...}"#, json!({"a": [1, 2]}), &[Repair::Ellipsis]);
}

#[test]
fn escapes() {
    check(r#"{"path": "C:\Users\ann", "ok": "\u00e9\ud83d\ude00",}"#, json!({"path": "C:\\Users\\ann", "ok": "é😀"}), &[
        Repair::InvalidEscape,
        Repair::TrailingComma,
    ]);
    check("{\"text\": \"line \\\nnext\"}", json!({"text": "line next"}), &[Repair::InvalidEscape]);
    check(r#"{"lone": "\ud800x",}"#, json!({"lone": "\u{FFFD}x"}), &[Repair::InvalidEscape, Repair::TrailingComma]);
}

#[test]
fn everything_at_once() {
    let reply = "Of course! Here's the profile:\n\n```json\n{\n  name: 'Mira', // protagonist\n  \"traits\": [\"brave\", \"wry\",],\n  \"alive\": True,\n  \"quote\": “Never again”\n";
    check(reply, json!({"name": "Mira", "traits": ["brave", "wry"], "alive": true, "quote": "Never again"}), &[
        Repair::CodeFence,
        Repair::UnquotedKey,
        Repair::SingleQuotes,
        Repair::Comments,
        Repair::TrailingComma,
        Repair::PythonLiteral,
        Repair::SmartQuotes,
        Repair::ClosedTruncated,
    ]);
}

#[test]
fn unrepairable_replies_give_clear_errors() {
    check_error("", "the reply is empty");
    check_error(" \n\t", "the reply is empty");
    check_error("I'm sorry, I can't help with that.", "the reply contains no JSON object or array");
    check_error(r#"{"a": }"#, "cannot repair the JSON at line 1, column 7: expected a value after the colon, found '}'");
    check_error("{\n\"a\" : 1,\n\"b\": @}", "cannot repair the JSON at line 3, column 6: expected a JSON value, found '@'");
    check_error(&"[".repeat(200), &format!("the JSON nests deeper than {MAX_DEPTH} levels (line 1, column 129)"));
}

#[test]
fn repairs_have_readable_descriptions() {
    assert_eq!(Repair::TrailingComma.to_string(), "removed trailing commas");
    assert_eq!(Repair::SkippedCandidates { count: 2 }.to_string(), "passed over 2 earlier JSON candidate(s)");
    let encoded = serde_json::to_value(Repair::SkippedCandidates { count: 2 }).unwrap_or_default();
    assert_eq!(encoded, json!({"kind": "skipped_candidates", "count": 2}));
}

/// Garbage, hostile nesting and megabyte inputs must end in a value or an error, never
/// a panic, and in reasonable time.
#[test]
fn never_panics_on_garbage() {
    let alphabet: Vec<char> = "{}[]\"',:.-+0123456789eEtrufalsnNIx \n\t\\/*#`“”‘’…éu".chars().collect();
    let mut rng = fastrand::Rng::with_seed(7);
    for _ in 0..3000 {
        let len = rng.usize(0..60);
        let text: String = (0..len).map(|_| alphabet[rng.usize(..alphabet.len())]).collect();
        let _ = repair_json(&text);
        let _ = repair_json_with(&text, &RepairOptions { expect: Expect::Object, accept: Some(&|v: &Value| v.is_object()) });
    }
    // Random bytes decoded lossily: every odd code point, control characters included.
    for _ in 0..300 {
        let bytes: Vec<u8> = (0..rng.usize(0..200)).map(|_| rng.u8(..)).collect();
        let _ = repair_json(&String::from_utf8_lossy(&bytes));
    }
    for deep in ["[".repeat(100_000), "{\"a\":".repeat(100_000), "[{".repeat(50_000), "\"".repeat(100_000)] {
        let _ = repair_json(&deep);
    }
    let big_array = format!("[{}", "1, ".repeat(350_000));
    let repaired = repair_json(&big_array);
    assert!(matches!(repaired, Ok(ref r) if r.value.as_array().map(Vec::len) == Some(350_000)));
    let big_string = format!("{{\"text\": \"{}", "word ".repeat(210_000));
    assert!(repair_json(&big_string).is_ok());
    let noise: String = (0..1_000_000).map(|_| alphabet[rng.usize(..alphabet.len())]).collect();
    let _ = repair_json(&noise);
    let braces = "{x".repeat(500_000);
    let _ = repair_json(&braces);
}

