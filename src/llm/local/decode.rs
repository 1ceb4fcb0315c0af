//! Choosing each next token: plain sampling, or sampling under a grammar.
//!
//! Under a grammar the draw happens first and only the drawn token is checked: that is
//! one grammar test instead of 262k, and the model's favourite is usually legal. When
//! it is not, the rest of the window is checked in one call and the draw repeated among
//! the legal ones. If no candidate in the window is legal, the grammar checks a wide
//! window of the `WIDE_WINDOW` likeliest tokens next (the token the grammar forces — a
//! key's quote, a colon, a brace — is nearly always among them), and only if none of
//! those is legal either does it run over the whole vocabulary. (Applying the grammar to
//! the whole vocabulary at every step measured ~1.6 tok/s on this machine; this order
//! measured ~22. The wide window took grammar-constrained JSON from 0.86 to 0.92–0.96 of
//! free generation: BENCHMARKS.md, session 9. What still needs the whole vocabulary is
//! mostly the first token, when the prompt did not lead the model to open the JSON.)
//!
//! A grammar guarantees the shape of the JSON but not that it ends: a small model can
//! fill a string with `000000…` until the token limit cuts the object in half. So when
//! the budget runs low the chooser switches to *closing*: among the legal candidates it
//! prefers the ones that end the current string, number, array or object, which brings
//! the reply to the shortest valid ending the grammar allows.

use super::sampler::{COPY_PENALTY, Candidate, Sampler, WINDOW};
use crate::llm::LlmError;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::vocab::LlamaVocab;
use std::collections::HashMap;

fn failure(what: &str) -> LlmError {
    LlmError::Malformed(format!("the local model failed {what}"))
}

/// Picks tokens for one generation.
pub struct TokenChooser {
    sampler: Sampler,
    grammar: Option<LlamaSampler>,
    top_window: LlamaSampler,
    /// llama.cpp's DRY ("don't repeat yourself") penalty against looping phrases.
    dry: LlamaSampler,
    json: JsonCursor,
    closing: bool,
    /// Every token generated so far, to spot a reply that has started to loop.
    history: Vec<i32>,
    /// Drawn tokens the grammar turned down.
    pub rejections: u32,
    /// Steps where no candidate in the wide window was legal and the whole vocabulary was checked.
    pub full_scans: u32,
    /// Steps where no candidate in the window was legal and the wide window was checked.
    pub wide_scans: u32,
    wide_window: LlamaSampler,
    words: WordCopyGuard,
}

/// How many of the likeliest tokens are checked against the grammar before the whole
/// vocabulary (262k entries for Gemma 3) is.
const WIDE_WINDOW: usize = 16384;

impl TokenChooser {
    pub fn new(model: &LlamaModel, sampler: Sampler, grammar: Option<LlamaSampler>) -> Self {
        Self {
            sampler,
            grammar,
            top_window: LlamaSampler::top_k(WINDOW as i32),
            dry: dry_sampler(model),
            json: JsonCursor::default(),
            closing: false,
            history: Vec::new(),
            rejections: 0,
            full_scans: 0,
            wide_scans: 0,
            wide_window: LlamaSampler::top_k(WIDE_WINDOW as i32),
            words: WordCopyGuard::default(),
        }
    }

    /// Texts the reply must not copy, word for word (see [`WordCopyGuard`]); the
    /// sampler holds the same texts token for token.
    pub fn avoid_copying_words(&mut self, texts: &[String]) {
        self.words = WordCopyGuard::new(texts);
    }

    /// From now on, prefer the tokens that finish the JSON soonest.
    pub fn start_closing(&mut self) {
        self.closing = true;
    }

    /// The next token, from the logits at `logits_index` of the last decode.
    pub fn choose(&mut self, ctx: &LlamaContext<'_>, logits_index: i32, vocab: &LlamaVocab<'_>) -> Result<LlamaToken, LlmError> {
        let mut all = ctx.token_data_array_ith(logits_index);
        all.apply_sampler(&mut self.top_window);
        all.apply_sampler(&mut self.dry);
        let mut window = to_candidates(&all);
        prepare(&self.sampler, &self.words, &mut window, vocab);
        let Some(grammar) = self.grammar.as_mut() else {
            let first = self.sampler.pick(&window).ok_or_else(|| failure("to sample: no candidate token"))?;
            return Ok(LlamaToken(window[first].token));
        };
        if !self.closing {
            let first = self.sampler.pick(&window).ok_or_else(|| failure("to sample: no candidate token"))?;
            if !filter_by_grammar(grammar, &window[first..=first]).is_empty() {
                return Ok(LlamaToken(window[first].token));
            }
            self.rejections += 1;
        }
        let mut legal = filter_by_grammar(grammar, &window);
        if legal.is_empty() {
            self.wide_scans += 1;
            let mut wide = ctx.token_data_array_ith(logits_index);
            wide.apply_sampler(&mut self.wide_window);
            let allowed = filter_by_grammar(grammar, &to_candidates(&wide));
            if !allowed.is_empty() {
                let mut array = LlamaTokenDataArray::new(
                    allowed.iter().map(|c| LlamaTokenData::new(LlamaToken(c.token), c.logit, 0.0)).collect(),
                    false,
                );
                legal = shortlist(&mut array, &mut self.top_window, &mut self.dry, &self.sampler, &self.words, vocab);
            }
        }
        if legal.is_empty() {
            self.full_scans += 1;
            let mut all = ctx.token_data_array_ith(logits_index);
            all.apply_sampler(grammar);
            legal = shortlist(&mut all, &mut self.top_window, &mut self.dry, &self.sampler, &self.words, vocab);
        }
        if self.closing {
            let in_string = self.json.in_string();
            let best = legal
                .iter()
                .enumerate()
                .min_by_key(|(i, c)| (closing_rank(&piece(vocab, c.token), in_string), *i))
                .map(|(i, _)| i)
                .ok_or_else(|| failure("to follow the grammar: no token is allowed"))?;
            return Ok(LlamaToken(legal[best].token));
        }
        let pick = self.sampler.pick(&legal).ok_or_else(|| failure("to follow the grammar: no token is allowed"))?;
        Ok(LlamaToken(legal[pick].token))
    }

    /// Whether the reply ends in the same stretch of tokens three times over: a loop
    /// the model will not leave by itself (DRY stops loops inside a string, but not a
    /// JSON array that keeps repeating the same item).
    pub fn is_looping(&self) -> bool {
        ends_in_loop(&self.history)
    }

    /// Records the chosen token (and its text) in the sampler, grammar and JSON state.
    pub fn accept(&mut self, token: LlamaToken, text: &str) -> Result<(), LlmError> {
        self.history.push(token.0);
        self.words.feed(text);
        self.sampler.accept(token.0);
        self.dry.accept(token);
        if let Some(grammar) = self.grammar.as_mut() {
            grammar.try_accept(token).map_err(|e| LlmError::Malformed(format!("the local model failed to advance the grammar: {e}")))?;
            self.json.feed(text);
        }
        Ok(())
    }
}

/// Shortest and longest stretch of tokens checked for repetition.
const LOOP_MIN: usize = 4;
const LOOP_MAX: usize = 96;

/// Whether `tokens` ends with three identical copies of some stretch of
/// `LOOP_MIN..=LOOP_MAX` tokens.
fn ends_in_loop(tokens: &[i32]) -> bool {
    let n = tokens.len();
    (LOOP_MIN..=LOOP_MAX.min(n / 3)).any(|len| {
        let last = &tokens[n - len..];
        last == &tokens[n - 2 * len..n - len] && last == &tokens[n - 3 * len..n - 2 * len]
    })
}

/// DRY with the settings its author recommends (multiplier 0.8, base 1.75, repeats of
/// two tokens allowed) over the last 512 generated tokens. Small models loop on whole
/// phrases ("I am a girl. I am a girl. ..."), which a per-token guard cannot see. The
/// sequence breakers include the quote, so the repeated shape of JSON (`{"name": "...`)
/// is never penalised, only repeats inside one string or one stretch of prose.
fn dry_sampler(model: &LlamaModel) -> LlamaSampler {
    LlamaSampler::dry(model, 0.8, 1.75, 2, 512, ["\n", ":", "\"", "*"])
}

fn piece(vocab: &LlamaVocab<'_>, token: i32) -> String {
    String::from_utf8_lossy(&vocab.token_to_piece(LlamaToken(token), false, None)).into_owned()
}

/// How directly a token heads for the end of the JSON (lower is sooner). Inside a
/// string only the closing quote ends anything; outside, closing brackets come first,
/// then the comma that ends a number or moves on to a required member.
///
/// Tokens often join several characters (`},`, `",`, `"]`), so the whole piece counts:
/// `},` closes an object only to open the next array item, which is how a closing
/// reply would otherwise keep appending empty items forever.
fn closing_rank(piece: &str, in_string: bool) -> u8 {
    let closers_only = |s: &str| s.chars().all(|c| matches!(c, ']' | '}') || c.is_whitespace());
    let p = piece.trim();
    if in_string {
        return match p.strip_prefix('"') {
            Some(rest) if closers_only(rest) => 0,
            Some(_) => 1,
            None => 2,
        };
    }
    match p.chars().next() {
        None => 5,
        Some(']' | '}') if closers_only(p) => 0,
        Some(']' | '}') => 1,
        Some(',') => 2,
        Some('"') => 3,
        Some(_) => 4,
    }
}


/// The sampler's order and penalties, then the word-level copy penalty.
fn prepare(sampler: &Sampler, words: &WordCopyGuard, candidates: &mut Vec<Candidate>, vocab: &LlamaVocab<'_>) {
    sampler.prepare(candidates);
    if words.penalise(candidates, |token| piece(vocab, token)) {
        candidates.sort_by(|a, b| b.logit.total_cmp(&a.logit));
    }
}

/// The window of legal tokens to draw from, out of `array` (already masked by the
/// grammar): the top of it, with the loop guard and the sampler's own cut applied —
/// unless they would leave nothing, because the grammar outranks the loop guard.
fn shortlist(
    array: &mut LlamaTokenDataArray,
    top_window: &mut LlamaSampler,
    dry: &mut LlamaSampler,
    sampler: &Sampler,
    words: &WordCopyGuard,
    vocab: &LlamaVocab<'_>,
) -> Vec<Candidate> {
    array.apply_sampler(top_window);
    array.apply_sampler(dry);
    let forced = to_candidates(array);
    let mut legal = forced.clone();
    prepare(sampler, words, &mut legal, vocab);
    if legal.is_empty() { forced } else { legal }
}

fn to_candidates(array: &LlamaTokenDataArray) -> Vec<Candidate> {
    array
        .data
        .iter()
        .filter(|d| d.logit().is_finite())
        .map(|d| Candidate { token: d.id().0, logit: d.logit() })
        .collect()
}

/// The candidates the grammar allows next (the grammar masks the rest to -inf).
fn filter_by_grammar(grammar: &mut LlamaSampler, candidates: &[Candidate]) -> Vec<Candidate> {
    let mut array = LlamaTokenDataArray::new(
        candidates.iter().map(|c| LlamaTokenData::new(LlamaToken(c.token), c.logit, 0.0)).collect(),
        false,
    );
    array.apply_sampler(grammar);
    to_candidates(&array)
}

/// Words of a text, lowercase: letters, digits and inner apostrophes.
fn words_of(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '’'))
        .map(|w| w.trim_matches(|c| c == '\'' || c == '’').to_lowercase())
        .filter(|w| !w.is_empty())
        .collect()
}

/// The copy penalty by words: once the reply's last two words are two consecutive words
/// of a text it must not copy, a token that starts the word that followed them there
/// loses [`COPY_PENALTY`], whatever its case and whatever quote or space came before.
/// The sampler's own guard needs three identical tokens first, which a short value of a
/// worked example (`"the ferry crossing"`) never gives it after a different quote, and
/// it lets `" Silence"` through where `" silence"` was penalised; the small model then
/// writes the example's phrase with one capital, and the draw is refused as a copy.
#[derive(Debug, Default)]
struct WordCopyGuard {
    next: HashMap<(String, String), Vec<String>>,
    /// The end of the reply so far (enough for its last two words).
    tail: String,
}

/// Characters of the reply kept to find its last two words.
const WORD_TAIL: usize = 160;

impl WordCopyGuard {
    fn new(texts: &[String]) -> Self {
        let mut next: HashMap<(String, String), Vec<String>> = HashMap::new();
        for text in texts {
            for run in words_of(text).windows(3) {
                let after = next.entry((run[0].clone(), run[1].clone())).or_default();
                if !after.contains(&run[2]) {
                    after.push(run[2].clone());
                }
            }
        }
        Self { next, tail: String::new() }
    }

    fn feed(&mut self, text: &str) {
        if self.next.is_empty() {
            return;
        }
        self.tail.push_str(text);
        if self.tail.len() > 2 * WORD_TAIL {
            let cut = self.tail.char_indices().rev().nth(WORD_TAIL).map_or(0, |(i, _)| i);
            self.tail.drain(..cut);
        }
    }

    /// Lowers every candidate that starts a copied word; whether any was lowered.
    fn penalise(&self, candidates: &mut [Candidate], piece: impl Fn(i32) -> String) -> bool {
        if self.next.is_empty() {
            return false;
        }
        let words = words_of(&self.tail);
        let [.., a, b] = words.as_slice() else { return false };
        let Some(banned) = self.next.get(&(a.clone(), b.clone())) else { return false };
        let mid_word = self.tail.chars().last().is_some_and(char::is_alphanumeric);
        let mut lowered = false;
        for c in candidates.iter_mut() {
            let text = piece(c.token);
            // A piece that goes on with the last word is not a new word.
            if mid_word && text.chars().next().is_some_and(char::is_alphanumeric) {
                continue;
            }
            let Some(first) = words_of(&text).into_iter().next() else { continue };
            // A prefix: the word may go on in the next token (" cross" + "ing").
            if banned.iter().any(|w| w.starts_with(&first)) {
                c.logit -= COPY_PENALTY;
                lowered = true;
            }
        }
        lowered
    }
}

/// Just enough JSON lexing to know whether the text so far ends inside a string.
#[derive(Debug, Default, Clone, Copy)]
struct JsonCursor {
    in_string: bool,
    escaped: bool,
}

impl JsonCursor {
    fn feed(&mut self, text: &str) {
        for c in text.chars() {
            if !self.in_string {
                self.in_string = c == '"';
            } else if self.escaped {
                self.escaped = false;
            } else if c == '\\' {
                self.escaped = true;
            } else if c == '"' {
                self.in_string = false;
            }
        }
    }

    fn in_string(&self) -> bool {
        self.in_string
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_tracks_strings_and_escapes_across_pieces() {
        let mut cursor = JsonCursor::default();
        let mut states = Vec::new();
        // `{"name": "say \"hi\\"}` split so an escape straddles two pieces.
        for piece in ["{", "\"na", "me\"", ": \"say \\", "\"hi", "\\\\", "\"", "}"] {
            cursor.feed(piece);
            states.push(cursor.in_string());
        }
        assert_eq!(states, vec![false, true, false, true, true, true, false, false]);
    }

    #[test]
    fn three_copies_of_a_stretch_make_a_loop() {
        let item = [7, 8, 9, 10, 11];
        let mut tokens = vec![1, 2, 3];
        tokens.extend(item);
        tokens.extend(item);
        assert!(!ends_in_loop(&tokens), "two copies are allowed");
        tokens.extend(item);
        assert!(ends_in_loop(&tokens));
        tokens.push(12);
        assert!(!ends_in_loop(&tokens));
        assert!(!ends_in_loop(&[5, 5, 5]), "short runs are the sampler's business");
        assert!(!ends_in_loop(&[]));
    }

    #[test]
    fn the_word_guard_lowers_the_next_word_of_a_copy_whatever_its_case_or_quote() {
        let mut guard = WordCopyGuard::new(&["{\"scene_presence\":[\"the ferry crossing\"],\"c\":\"guilt against silence\"}".to_string()]);
        let pieces = [" crossing", " Cross", "crossing", " bakery", "\",", " Silence"];
        let piece = |t: i32| pieces[t as usize].to_string();
        let lowered = |guard: &WordCopyGuard| {
            let mut c: Vec<Candidate> = (0..pieces.len() as i32).map(|token| Candidate { token, logit: 0.0 }).collect();
            guard.penalise(&mut c, piece);
            c.iter().filter(|c| c.logit < 0.0).map(|c| pieces[c.token as usize]).collect::<Vec<_>>()
        };
        guard.feed(" \"The");
        assert!(lowered(&guard).is_empty(), "one word is not a run");
        guard.feed(" Ferry");
        // " crossing" and " Cross" start the copied word; "crossing" would go on with "Ferry".
        assert_eq!(lowered(&guard), vec![" crossing", " Cross"]);
        guard.feed(" bakery");
        assert!(lowered(&guard).is_empty());
        guard.feed("\", \"guilt against");
        assert_eq!(lowered(&guard), vec![" Silence"]);
        let free = WordCopyGuard::default();
        assert!(lowered(&free).is_empty());
    }

    #[test]
    fn closing_prefers_what_ends_the_json_soonest() {
        let mut pieces = vec!["0", "\",", " and", "\"]", "\""];
        pieces.sort_by_key(|p| closing_rank(p, true));
        assert_eq!(pieces, vec!["\"]", "\"", "\",", "0", " and"]);
        let mut pieces = vec!["7", "\n  ", "\"", ",", "},", " }", "]}"];
        pieces.sort_by_key(|p| closing_rank(p, false));
        assert_eq!(pieces, vec![" }", "]}", "},", ",", "\"", "7", "\n  "]);
    }
}
