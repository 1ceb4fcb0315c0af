//! API keys. A [`Secret`] can be used to build a request but cannot be printed,
//! logged or serialised by accident: its `Debug` and `Display` are redacted and it
//! implements no `Serialize`.

use std::fmt;

#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The raw value, for the one place that needs it: an outgoing request header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Read a key from the environment; `None` when unset or blank.
    pub fn from_env(var: &str) -> Option<Self> {
        std::env::var(var).ok().filter(|v| !v.trim().is_empty()).map(|v| Self(v.trim().to_string()))
    }

    /// Replace every occurrence of the secret in `text`, for error messages that echo
    /// a server's response (some servers repeat the key back).
    pub fn scrub(&self, text: &str) -> String {
        if self.0.len() < 4 { text.to_string() } else { text.replace(&self.0, "[redacted]") }
    }
}

/// Scrubs a secret out of a stream of fragments: a key split across two fragments is
/// caught too, because the tail that could be the start of the key is held back until
/// the next fragment (or the end) says what it is.
pub struct StreamScrubber {
    secret: Option<Secret>,
    pending: String,
}

impl StreamScrubber {
    pub fn new(secret: Option<Secret>) -> Self {
        Self { secret: secret.filter(|s| s.0.len() >= 4), pending: String::new() }
    }

    /// The text safe to show now.
    pub fn push(&mut self, fragment: &str) -> String {
        let Some(secret) = &self.secret else { return fragment.to_string() };
        self.pending.push_str(fragment);
        let scrubbed = secret.scrub(&self.pending);
        // Hold back the longest tail that is a start of the key.
        let hold = (1..secret.0.len().min(scrubbed.len() + 1))
            .rev()
            .find(|n| scrubbed.is_char_boundary(scrubbed.len() - n) && secret.0.starts_with(&scrubbed[scrubbed.len() - n..]))
            .unwrap_or(0);
        let cut = scrubbed.len() - hold;
        self.pending = scrubbed[cut..].to_string();
        scrubbed[..cut].to_string()
    }

    /// What was held back, at the end of the stream.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_never_show_the_value() {
        let s = Secret::new("sk-live-1234567890");
        assert!(!format!("{s:?}").contains("1234567890"));
        assert!(!format!("{s}").contains("1234567890"));
        assert_eq!(s.scrub("bad key sk-live-1234567890 given"), "bad key [redacted] given");
    }

    #[test]
    fn a_key_split_across_fragments_never_reaches_the_screen() {
        let mut scrubber = StreamScrubber::new(Some(Secret::new("sk-live-1234567890")));
        let mut shown = String::new();
        for fragment in ["The key is sk-li", "ve-12345", "67890, sk", "!"] {
            let out = scrubber.push(fragment);
            assert!(!out.contains("sk-live-1234567890"));
            shown.push_str(&out);
        }
        shown.push_str(&scrubber.finish());
        assert_eq!(shown, "The key is [redacted], sk!");
        let mut plain = StreamScrubber::new(None);
        assert_eq!(plain.push("as is"), "as is");
    }
}
