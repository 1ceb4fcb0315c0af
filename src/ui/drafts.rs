//! Unsent text, one per scene or chat: what the game master typed and did not send yet
//! stays with the scene (or character) it was typed for, and survives closing the
//! window (it goes into [`super::layout::WorkbenchState`]). Losing a long message to a
//! restart, or carrying it into another scene by switching, is what a user never expects.

use std::collections::BTreeMap;

/// The drafts of the items not shown; the shown one's draft is the panel's own message
/// box, and `owner` is the item that box belongs to.
#[derive(Debug, Default)]
pub struct Drafts {
    kept: BTreeMap<String, String>,
    owner: Option<String>,
}

impl Drafts {
    /// The drafts a previous window kept (by scene or character id).
    pub fn restore(&mut self, kept: BTreeMap<String, String>) {
        self.kept = kept;
    }

    /// Make the message box `input` the draft of `selected`: when another item was
    /// open, its text is kept for it and the new item's own draft (or nothing) comes back.
    /// Called each frame before the box is drawn, so every way of switching is covered.
    pub fn follow(&mut self, selected: Option<&str>, input: &mut String) {
        if self.owner.as_deref() == selected {
            return;
        }
        match self.owner.take() {
            Some(owner) => {
                let text = std::mem::take(input);
                if text.trim().is_empty() {
                    self.kept.remove(&owner);
                } else {
                    self.kept.insert(owner, text);
                }
            }
            // Typed before anything was open: it stays in the box.
            None if !input.trim().is_empty() => {
                self.owner = selected.map(str::to_string);
                return;
            }
            None => {}
        }
        if let Some(id) = selected
            && let Some(text) = self.kept.remove(id)
        {
            *input = text;
        }
        self.owner = selected.map(str::to_string);
    }

    /// Every unsent text, the open item's (`input`) included, by id: what the window saves.
    pub fn all(&self, input: &str) -> BTreeMap<String, String> {
        let mut all = self.kept.clone();
        if let Some(owner) = &self.owner {
            if input.trim().is_empty() {
                all.remove(owner);
            } else {
                all.insert(owner.clone(), input.to_string());
            }
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::Drafts;

    #[test]
    fn a_draft_stays_with_its_item_and_comes_back() {
        let mut drafts = Drafts::default();
        drafts.restore([("b".to_string(), "for b".to_string())].into());
        let mut input = String::new();
        drafts.follow(Some("a"), &mut input);
        assert_eq!(input, "");
        input.push_str("for a");
        drafts.follow(Some("b"), &mut input);
        assert_eq!(input, "for b");
        assert_eq!(drafts.all(&input).len(), 2);
        input.clear(); // sent
        drafts.follow(Some("a"), &mut input);
        assert_eq!(input, "for a");
        assert_eq!(drafts.all(&input), [("a".to_string(), "for a".to_string())].into());
    }
}
