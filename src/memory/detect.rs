//! Detectors the companion chat uses before it builds a prompt: proximity (is the user
//! with the character, or writing from afar?) and memory intent (is the user asking the
//! character to remember something?). Both only add prompt blocks when they fire, which
//! is how the seed saved tokens.

use super::embedder::{EmbedError, Embedder};
use super::vectors::dot;
use serde::{Deserialize, Serialize};

/// Where the user is relative to the character.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Proximity {
    Physical,
    /// The seed's start state: a chat starts at a distance.
    #[default]
    Remote,
}

/// What one message suggests about proximity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProximitySignal {
    Physical,
    Remote,
    /// Arriving: "I'm coming over", "I just walked in".
    TowardPhysical,
    /// Leaving: "I have to head home", "I'll text you from the train".
    AwayRemote,
}

impl ProximitySignal {
    /// The state a signal leads to (transitions map to their end state).
    pub fn target(self) -> Proximity {
        match self {
            ProximitySignal::Physical | ProximitySignal::TowardPhysical => Proximity::Physical,
            ProximitySignal::Remote | ProximitySignal::AwayRemote => Proximity::Remote,
        }
    }
}

const ANCHORS: &[(ProximitySignal, &[&str])] = &[
    (
        ProximitySignal::Physical,
        &[
            "we are sitting together in the same room",
            "I'm right next to you",
            "I lean over and hug you",
            "I hand you a cup of tea across the table",
            "we are walking side by side",
        ],
    ),
    (
        ProximitySignal::Remote,
        &[
            "I'm texting you from far away",
            "sending you a message on my phone",
            "I miss you, I wish you were here with me",
            "we are talking over a video call",
            "writing you a letter from another city",
        ],
    ),
    (
        ProximitySignal::TowardPhysical,
        &[
            "I'm on my way over to see you",
            "I just arrived at your door",
            "I walk into the room where you are",
            "I'm coming to visit you now",
        ],
    ),
    (
        ProximitySignal::AwayRemote,
        &[
            "I have to leave now, goodbye, I'm heading home",
            "I'm getting on the train and leaving town",
            "I'll message you when I get back home",
            "I walk out of the door and go away",
        ],
    ),
];

/// The outcome of observing one message.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ProximityUpdate {
    pub state: Proximity,
    /// The state changed with this message (the prompt gets a distance block).
    pub changed: bool,
    /// The strongest signal and its similarity, if any cleared the threshold.
    pub signal: Option<ProximitySignal>,
    pub confidence: f32,
}

/// Tracks proximity across messages by similarity to anchor phrases.
#[derive(Debug, Clone)]
pub struct ProximityDetector {
    anchors: Vec<(ProximitySignal, Vec<f32>)>,
    threshold: f32,
    state: Proximity,
}

impl ProximityDetector {
    /// `state` is where the last session left off (kept by the caller across sessions).
    pub fn new(embedder: &Embedder, threshold: f32, state: Proximity) -> Result<Self, EmbedError> {
        let phrases: Vec<(ProximitySignal, &str)> =
            ANCHORS.iter().flat_map(|(s, list)| list.iter().map(move |p| (*s, *p))).collect();
        let vectors = embedder.embed(phrases.iter().map(|(_, p)| p.to_string()).collect())?;
        Ok(Self { anchors: phrases.into_iter().map(|(s, _)| s).zip(vectors).collect(), threshold, state })
    }

    pub fn state(&self) -> Proximity {
        self.state
    }

    /// The same anchors starting from `state`: the anchors are embedded once per
    /// process and each chat resumes from its own stored state.
    pub fn with_state(&self, state: Proximity) -> Self {
        Self { anchors: self.anchors.clone(), threshold: self.threshold, state }
    }

    pub fn set_threshold(&mut self, threshold: f32) {
        self.threshold = threshold;
    }

    /// The best-matching signal for an embedded message and its similarity.
    pub fn classify(&self, message: &[f32]) -> (ProximitySignal, f32) {
        let mut best = (ProximitySignal::Remote, f32::MIN);
        for (signal, anchor) in &self.anchors {
            let score = dot(message, anchor);
            if score > best.1 {
                best = (*signal, score);
            }
        }
        best
    }

    /// Update the state from one message. A signal below the threshold changes nothing;
    /// one above it moves the state to its target (a no-op when already there).
    pub fn observe(&mut self, embedder: &Embedder, text: &str) -> Result<ProximityUpdate, EmbedError> {
        let v = embedder.embed_query(text)?;
        Ok(self.observe_vector(&v))
    }

    pub fn observe_vector(&mut self, message: &[f32]) -> ProximityUpdate {
        let (signal, confidence) = self.classify(message);
        if confidence <= self.threshold {
            return ProximityUpdate { state: self.state, changed: false, signal: None, confidence };
        }
        let target = signal.target();
        let changed = target != self.state;
        self.state = target;
        ProximityUpdate { state: self.state, changed, signal: Some(signal), confidence }
    }
}

/// Phrases that ask the character to recall (lower case, matched on word boundaries).
const INTENT_PHRASES: &[&str] = &[
    "remember",
    "remembered",
    "recall",
    "do you know when",
    "last time",
    "that time",
    "the time we",
    "the time when",
    "back when",
    "we talked about",
    "we spoke about",
    "you told me",
    "you said",
    "i told you",
    "did i tell you",
    "did i mention",
    "i mentioned",
    "have you forgotten",
    "you forgot",
    "forget about",
    "what was the name",
    "what did i say",
    "what did you say",
    "remind me",
    "reminds me",
    "memory of",
    "as we discussed",
];

/// Does `text` ask the character to remember something ("do you remember...",
/// "what did I tell you about...")? Lexical on purpose: it runs on every message, must
/// cost nothing, and its false positives only add a memory block to one prompt.
pub fn is_memory_intent(text: &str) -> bool {
    let words: Vec<String> = super::keyword::words(text).collect();
    let joined = format!(" {} ", words.join(" "));
    INTENT_PHRASES.iter().any(|p| joined.contains(&format!(" {p} ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_intent_fires_on_recall_questions_only() {
        for yes in [
            "Do you remember our trip to the lighthouse?",
            "What did I tell you about my sister?",
            "Remind me, what was the name of Tobin's boat?",
            "That time we danced on the quay...",
            "You said you'd write.",
        ] {
            assert!(is_memory_intent(yes), "{yes}");
        }
        for no in ["Good morning!", "Let's go to the market.", "I'm remembering to breathe", "The time is late."] {
            assert!(!is_memory_intent(no), "{no}");
        }
    }

    #[test]
    fn transitions_map_to_their_end_state() {
        assert_eq!(ProximitySignal::TowardPhysical.target(), Proximity::Physical);
        assert_eq!(ProximitySignal::AwayRemote.target(), Proximity::Remote);
        assert_eq!(Proximity::default(), Proximity::Remote);
    }

    #[test]
    fn below_threshold_nothing_changes() {
        let mut d = ProximityDetector {
            anchors: vec![(ProximitySignal::Physical, vec![1.0, 0.0]), (ProximitySignal::Remote, vec![0.0, 1.0])],
            threshold: 0.45,
            state: Proximity::Remote,
        };
        let weak = d.observe_vector(&[0.4, 0.3]);
        assert!(!weak.changed && weak.signal.is_none());
        let strong = d.observe_vector(&[0.9, 0.1]);
        assert!(strong.changed);
        assert_eq!(strong.state, Proximity::Physical);
        let again = d.observe_vector(&[0.95, 0.0]);
        assert!(!again.changed, "staying put is not a change");
        assert!(d.observe_vector(&[0.0, 1.0]).changed);
        assert_eq!(d.state(), Proximity::Remote);
    }
}
