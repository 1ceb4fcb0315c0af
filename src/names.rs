//! Finding a thing by what a person types when it is not the exact name: the start of
//! the name ("Capt" for "Captain Odile Rask"), else the start of one of its words
//! ("Odile", "rask", "northern" for "The Northern Run"). Case is ignored.
//!
//! Pure: each owner of a table reads its own `(id, name)` rows and asks here, so the
//! CLI, the HTTP API and the workbench resolve names the same way everywhere.

/// The rows `key` points at: those whose name starts with it, or, when none does, those
/// with a word (after a space or a mark) that starts with it. More than one is for the
/// caller to refuse, naming them.
fn starting_with<'a, T>(rows: &'a [T], name: impl Fn(&T) -> &str, key: &str) -> Vec<&'a T> {
    let key = key.trim().to_lowercase();
    if key.is_empty() {
        return Vec::new();
    }
    let prefixed: Vec<&T> = rows.iter().filter(|r| name(r).to_lowercase().starts_with(&key)).collect();
    if !prefixed.is_empty() {
        return prefixed;
    }
    rows.iter().filter(|r| word_starts_with(&name(r).to_lowercase(), &key)).collect()
}

/// Why [`only`] found no single row.
#[derive(Debug, Clone, PartialEq)]
pub enum NoMatch {
    None,
    /// Up to five of the names that matched, joined for an error message.
    Many(String),
}

impl NoMatch {
    /// The sentence for an error about `what` (`character "od"`).
    pub fn message(&self, what: &str) -> String {
        match self {
            NoMatch::None => what.to_string(),
            NoMatch::Many(names) => format!("{what}: more than one name matches ({names}); give the full name"),
        }
    }
}

/// The one row [`starting_with`] finds, or why there is none.
pub fn only<'a, T>(rows: &'a [T], name: impl Fn(&T) -> &str, key: &str) -> Result<&'a T, NoMatch> {
    let found = starting_with(rows, &name, key);
    match found.as_slice() {
        [one] => Ok(one),
        [] => Err(NoMatch::None),
        many => Err(NoMatch::Many(some_names(many, &name))),
    }
}

/// Up to five names of `rows`, for an error that says which ones matched.
fn some_names<T>(rows: &[&T], name: impl Fn(&T) -> &str) -> String {
    let mut names: Vec<&str> = rows.iter().take(5).map(|r| name(r)).collect();
    if rows.len() > 5 {
        names.push("…");
    }
    names.join(", ")
}

fn word_starts_with(name: &str, key: &str) -> bool {
    name.match_indices(key).any(|(i, _)| name[..i].chars().next_back().is_none_or(|c| !c.is_alphanumeric()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find<'a>(rows: &'a [&'a str], key: &str) -> Vec<&'a str> {
        starting_with(rows, |r| r, key).into_iter().copied().collect()
    }

    #[test]
    fn the_start_of_the_name_wins_over_the_start_of_a_word() {
        let rows = ["Captain Odile Rask", "Odette", "Sister Odile", "Brother O'Rourke"];
        assert_eq!(find(&rows, "capt"), ["Captain Odile Rask"]);
        assert_eq!(find(&rows, "Od"), ["Odette"], "a name that starts so comes first");
        assert_eq!(find(&rows, "odile"), ["Captain Odile Rask", "Sister Odile"]);
        assert_eq!(find(&rows, "rask"), ["Captain Odile Rask"]);
        assert_eq!(find(&rows, "rourke"), ["Brother O'Rourke"]);
        assert!(find(&rows, "ask").is_empty(), "the middle of a word is no match");
        assert!(find(&rows, "  ").is_empty());
        let many: Vec<String> = (0..7).map(|i| format!("Name {i}")).collect();
        assert_eq!(only(&many, |s| s.as_str(), "name"), Err(NoMatch::Many("Name 0, Name 1, Name 2, Name 3, Name 4, …".into())));
        assert_eq!(only(&many, |s| s.as_str(), "zed"), Err(NoMatch::None));
        assert_eq!(only(&many, |s| s.as_str(), "name 3"), Ok(&many[3]));
        assert_eq!(NoMatch::Many("A, B".into()).message("world \"x\""), "world \"x\": more than one name matches (A, B); give the full name");
    }
}
