//! Character Card V3 decorators: `@@name value` lines at the top of an entry's content
//! that change how it activates (`@@activate`, `@@depth 4`, `@@scan_depth 2`, ...).
//!
//! They stay inside `content` as written (so export is lossless); this only splits them
//! off for the activation code, which decides which ones it honours.

/// One decorator line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decorator {
    /// The name without the `@` signs, e.g. `depth`.
    pub name: String,
    /// The text after the name (comma-separated values stay joined), if any.
    pub value: Option<String>,
    /// Written `@@@name`: only considered when the decorator above it is not.
    pub fallback: bool,
}

impl Decorator {
    /// The comma-separated values (`@@additional_keys a,b` → `["a", "b"]`).
    pub fn values(&self) -> Vec<&str> {
        self.value.as_deref().map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).collect()).unwrap_or_default()
    }
}

/// The leading decorator lines of `content`, and the rest with the blank lines that
/// separated them removed.
pub fn split_decorators(content: &str) -> (Vec<Decorator>, &str) {
    let mut decorators = Vec::new();
    let mut rest = content;
    loop {
        let line_end = rest.find('\n').map_or(rest.len(), |i| i + 1);
        let line = rest[..line_end].trim_end_matches(['\n', '\r']);
        let Some(body) = line.strip_prefix("@@") else { break };
        let (fallback, body) = match body.strip_prefix('@') {
            Some(b) => (true, b),
            None => (false, body),
        };
        let mut parts = body.splitn(2, char::is_whitespace);
        let name = parts.next().unwrap_or_default().trim();
        if name.is_empty() {
            break;
        }
        let value = parts.next().map(str::trim).filter(|v| !v.is_empty()).map(str::to_string);
        decorators.push(Decorator { name: name.to_string(), value, fallback });
        rest = &rest[line_end..];
    }
    if !decorators.is_empty() {
        rest = rest.trim_start_matches(['\n', '\r']);
    }
    (decorators, rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(content: &str, expected: &[(&str, Option<&str>, bool)], expected_rest: &str) {
        let (decorators, rest) = split_decorators(content);
        let got: Vec<(&str, Option<&str>, bool)> =
            decorators.iter().map(|d| (d.name.as_str(), d.value.as_deref(), d.fallback)).collect();
        assert_eq!(got, expected);
        assert_eq!(rest, expected_rest);
    }

    #[test]
    fn splits_leading_decorators_only() {
        check("@@depth 5\n@@@instruct_depth 5\n@@activate\n\nThe tower hums.", &[
            ("depth", Some("5"), false),
            ("instruct_depth", Some("5"), true),
            ("activate", None, false),
        ], "The tower hums.");
        check("No decorators.\n@@depth 3", &[], "No decorators.\n@@depth 3");
        check("", &[], "");
        check("@@\nText", &[], "@@\nText");
        check("@@role assistant\r\nHi", &[("role", Some("assistant"), false)], "Hi");
    }

    #[test]
    fn values_split_on_commas() {
        let (d, _) = split_decorators("@@additional_keys rain, storm,,fog\n");
        assert_eq!(d[0].values(), vec!["rain", "storm", "fog"]);
    }
}
