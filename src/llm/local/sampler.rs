//! Choosing the next token from a short list of the most likely candidates.
//!
//! The model thread asks llama.cpp (optimised C++) for the `WINDOW` highest logits out
//! of the whole vocabulary (262k entries for Gemma 3); everything here then works on
//! that short list in plain Rust: repetition penalties, temperature, top-k, top-p and a
//! seeded draw. Keeping the sampler ours makes it deterministic under a seed and lets
//! the grammar check run on one token instead of the whole vocabulary (see
//! `decode`).

use crate::llm::SamplerSettings;
use std::collections::HashMap;

/// How many of the best candidates are kept per step. Larger than any sane `top_k` so
/// the grammar has alternatives to fall back on when the sampled token is rejected.
pub const WINDOW: usize = 64;

/// Defaults for settings a request leaves empty, chosen for small local models: a
/// little randomness (pure greedy decoding loops on tiny models) within a tight nucleus.
pub const DEFAULT_TEMPERATURE: f32 = 0.7;
pub const DEFAULT_TOP_K: usize = 40;
pub const DEFAULT_TOP_P: f32 = 0.95;

/// The same token this many times in a row is a loop (`0000…`, `!!!!…`), which small
/// models fall into and never leave; the token is then barred for one step.
pub const MAX_RUN: u32 = 8;

/// How much a token loses for continuing a run of a text the reply must not copy
/// ([`SamplerSettings::avoid`]): enough to pass over a copy when the model has any
/// word of its own, not so much that a token the grammar requires is out of reach
/// (the grammar still picks it when it is the only one allowed).
pub const COPY_PENALTY: f32 = 8.0;

/// Tokens in a run that [`COPY_PENALTY`] looks back on.
const COPY_RUN: usize = 3;

/// One candidate token with its (possibly penalised) logit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub token: i32,
    pub logit: f32,
}

/// Sampling state for one generation.
#[derive(Debug)]
pub struct Sampler {
    temperature: f32,
    top_k: usize,
    top_p: f32,
    presence_penalty: f32,
    frequency_penalty: f32,
    /// How often each token has been generated so far (for the penalties).
    counts: HashMap<i32, u32>,
    /// The last token and how many times in a row it has been generated.
    last: Option<(i32, u32)>,
    /// For each run of [`COPY_RUN`] tokens of a text not to copy, the tokens that
    /// followed it there.
    avoid: HashMap<[i32; COPY_RUN], Vec<i32>>,
    /// The last [`COPY_RUN`] tokens generated, oldest first.
    recent: Vec<i32>,
    rng: fastrand::Rng,
}

impl Sampler {
    pub fn new(settings: &SamplerSettings) -> Self {
        let rng = match settings.seed {
            Some(seed) => fastrand::Rng::with_seed(seed),
            None => fastrand::Rng::new(),
        };
        Self {
            temperature: settings.temperature.unwrap_or(DEFAULT_TEMPERATURE).max(0.0),
            top_k: settings.top_k.map_or(DEFAULT_TOP_K, |k| k as usize).clamp(1, WINDOW),
            top_p: settings.top_p.unwrap_or(DEFAULT_TOP_P).clamp(0.0, 1.0),
            presence_penalty: settings.presence_penalty.unwrap_or(0.0),
            frequency_penalty: settings.frequency_penalty.unwrap_or(0.0),
            counts: HashMap::new(),
            last: None,
            avoid: HashMap::new(),
            recent: Vec::new(),
            rng,
        }
    }

    /// The token sequences of the texts the reply must not copy.
    pub fn avoid_copying(&mut self, texts: impl IntoIterator<Item = Vec<i32>>) {
        for tokens in texts {
            for run in tokens.windows(COPY_RUN + 1) {
                let key = [run[0], run[1], run[2]];
                let next = self.avoid.entry(key).or_default();
                if !next.contains(&run[COPY_RUN]) {
                    next.push(run[COPY_RUN]);
                }
            }
        }
    }

    /// Applies the OpenAI-style presence and frequency penalties, then sorts by logit,
    /// best first. Penalties only ever lower a logit, so a token outside the window
    /// could not have overtaken one inside it: penalising the window is exact for the
    /// window's own order.
    pub fn prepare(&self, candidates: &mut Vec<Candidate>) {
        if self.presence_penalty != 0.0 || self.frequency_penalty != 0.0 {
            for c in candidates.iter_mut() {
                if let Some(&n) = self.counts.get(&c.token) {
                    c.logit -= self.presence_penalty + self.frequency_penalty * n as f32;
                }
            }
        }
        if let Some(next) = <[i32; COPY_RUN]>::try_from(self.recent.as_slice()).ok().and_then(|key| self.avoid.get(&key)) {
            for c in candidates.iter_mut() {
                if next.contains(&c.token) {
                    c.logit -= COPY_PENALTY;
                }
            }
        }
        if let Some((token, run)) = self.last
            && run >= MAX_RUN
        {
            candidates.retain(|c| c.token != token);
        }
        candidates.retain(|c| c.logit.is_finite());
        candidates.sort_by(|a, b| b.logit.total_cmp(&a.logit));
    }

    /// Draws one candidate from a list sorted best first; `None` only for an empty list.
    pub fn pick(&mut self, sorted: &[Candidate]) -> Option<usize> {
        if sorted.is_empty() {
            return None;
        }
        if self.temperature <= f32::EPSILON {
            return Some(0);
        }
        let pool = &sorted[..sorted.len().min(self.top_k)];
        let best = pool[0].logit;
        let weights: Vec<f64> = pool.iter().map(|c| (((c.logit - best) / self.temperature) as f64).exp()).collect();
        let total: f64 = weights.iter().sum();
        // Nucleus: the smallest prefix whose probability reaches top_p (at least one).
        let mut kept = 0;
        let mut mass = 0.0;
        for w in &weights {
            kept += 1;
            mass += w / total;
            if mass >= self.top_p as f64 {
                break;
            }
        }
        let kept_total: f64 = weights[..kept].iter().sum();
        let mut draw = self.rng.f64() * kept_total;
        for (i, w) in weights[..kept].iter().enumerate() {
            if draw < *w {
                return Some(i);
            }
            draw -= w;
        }
        Some(kept - 1)
    }

    /// Records a generated token for the penalties and the run limit.
    pub fn accept(&mut self, token: i32) {
        *self.counts.entry(token).or_insert(0) += 1;
        if !self.avoid.is_empty() {
            if self.recent.len() == COPY_RUN {
                self.recent.remove(0);
            }
            self.recent.push(token);
        }
        self.last = match self.last {
            Some((last, run)) if last == token => Some((token, run + 1)),
            _ => Some((token, 1)),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cands(logits: &[f32]) -> Vec<Candidate> {
        logits.iter().enumerate().map(|(i, &logit)| Candidate { token: i as i32, logit }).collect()
    }

    fn settings(temperature: f32) -> SamplerSettings {
        SamplerSettings { temperature: Some(temperature), seed: Some(7), ..Default::default() }
    }

    #[test]
    fn zero_temperature_is_greedy_and_prepare_sorts_and_drops_masked_tokens() {
        let mut s = Sampler::new(&settings(0.0));
        let mut c = cands(&[1.0, 5.0, f32::NEG_INFINITY, 3.0]);
        s.prepare(&mut c);
        assert_eq!(c.iter().map(|c| c.token).collect::<Vec<_>>(), vec![1, 3, 0]);
        assert_eq!(s.pick(&c), Some(0));
        assert_eq!(s.pick(&[]), None);
    }

    #[test]
    fn draws_follow_the_softmax_and_are_reproducible_under_a_seed() {
        let c = cands(&[2.0_f32.ln(), 1.0_f32.ln()]); // probabilities 2/3 and 1/3
        let mut s = Sampler::new(&SamplerSettings { temperature: Some(1.0), top_p: Some(1.0), seed: Some(1), ..Default::default() });
        let firsts = (0..3000).filter(|_| s.pick(&c) == Some(0)).count();
        assert!((1850..2150).contains(&firsts), "{firsts} of 3000 draws picked the 2/3 token");
        let mut a = Sampler::new(&settings(1.0));
        let mut b = Sampler::new(&settings(1.0));
        let many = cands(&[0.5, 0.4, 0.3, 0.2, 0.1]);
        let run_a: Vec<_> = (0..50).map(|_| a.pick(&many)).collect();
        let run_b: Vec<_> = (0..50).map(|_| b.pick(&many)).collect();
        assert_eq!(run_a, run_b);
    }

    #[test]
    fn top_k_and_top_p_cut_the_tail() {
        let c = cands(&[10.0, 9.0, 8.0, 0.0]);
        let mut k1 = Sampler::new(&SamplerSettings { temperature: Some(5.0), top_k: Some(1), ..Default::default() });
        assert!((0..200).all(|_| k1.pick(&c) == Some(0)));
        let mut k2 = Sampler::new(&SamplerSettings { temperature: Some(5.0), top_k: Some(2), top_p: Some(1.0), ..Default::default() });
        assert!((0..500).all(|_| k2.pick(&c).is_some_and(|i| i < 2)));
        let mut p = Sampler::new(&SamplerSettings { temperature: Some(1.0), top_p: Some(0.5), ..Default::default() });
        assert!((0..200).all(|_| p.pick(&c) == Some(0)), "the best token alone holds two thirds of the mass");
    }

    #[test]
    fn a_token_repeated_too_often_in_a_row_is_barred_once() {
        let mut s = Sampler::new(&settings(0.0));
        let fresh = cands(&[5.0, 1.0]);
        for _ in 0..MAX_RUN - 1 {
            s.accept(0);
        }
        let mut c = fresh.clone();
        s.prepare(&mut c);
        assert_eq!(c[0].token, 0, "seven in a row is still allowed");
        s.accept(0);
        let mut c = fresh.clone();
        s.prepare(&mut c);
        assert_eq!(c.iter().map(|c| c.token).collect::<Vec<_>>(), vec![1]);
        s.accept(1);
        let mut c = fresh;
        s.prepare(&mut c);
        assert_eq!(c[0].token, 0, "the run is broken, the token is back");
    }

    #[test]
    fn penalties_lower_repeated_tokens() {
        let mut s = Sampler::new(&SamplerSettings {
            presence_penalty: Some(1.0),
            frequency_penalty: Some(0.5),
            ..Default::default()
        });
        s.accept(0);
        s.accept(0);
        let mut c = cands(&[3.0, 2.5]);
        s.prepare(&mut c);
        assert_eq!(c[0], Candidate { token: 1, logit: 2.5 });
        assert_eq!(c[1], Candidate { token: 0, logit: 1.0 });
    }

    #[test]
    fn a_token_that_would_continue_a_copy_loses_its_lead() {
        let mut s = Sampler::new(&SamplerSettings { temperature: Some(0.0), ..Default::default() });
        s.avoid_copying([vec![1, 2, 3, 4]]);
        for t in [1, 2, 3] {
            s.accept(t);
        }
        // Token 4 would copy the run 1 2 3 4: it falls behind 9 although it led by 2.
        let mut window = cands(&[0.0, 0.0, 0.0, 0.0, 10.0, 0.0, 0.0, 0.0, 0.0, 8.0]);
        s.prepare(&mut window);
        assert_eq!(window[0].token, 9);
        // After another token the run is broken and 4 is free again.
        s.accept(7);
        let mut window = cands(&[0.0, 0.0, 0.0, 0.0, 10.0, 0.0, 0.0, 0.0, 0.0, 8.0]);
        s.prepare(&mut window);
        assert_eq!(window[0].token, 4);
    }

}
