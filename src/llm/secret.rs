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
}
