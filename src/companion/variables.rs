//! Chat variables (`{{setvar}}`, `{{getvar}}`, `{{incvar}}` and kin): what a card's
//! macros keep from one message to the next, such as a score, a mood, a count of visits.
//!
//! A chat's own variables are kept with the message that set them (migration 0031), in
//! the transaction that stores the exchange, as the lore timers are: a redrawn reply
//! (swipe, regenerate) is built from the values before its message, so `{{incvar}}` in a
//! card counts once per message however often the reply is drawn, and a deleted last
//! exchange takes its changes with it. The library's globals (`{{setglobalvar}}`) belong
//! to no chat and only ever hold their newest value, as in SillyTavern.

use crate::prompting::macros::Variables;
use crate::store::StoreError;
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Values of one variable kept at most. A chat may branch or be cut back to any of its
/// messages, so its values are kept far back; past this, the two oldest merge (the later
/// value, from the earlier message), which only a branch that far back could notice.
const HISTORY: usize = 10_000;

/// One chat's variables: each one's values, oldest first, with the number of the
/// message whose prompt set them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatVariables {
    #[serde(default)]
    values: BTreeMap<String, Vec<(u64, String)>>,
}

impl ChatVariables {
    /// The variables as they stood before message `message_number`.
    pub fn before(&self, message_number: u64) -> BTreeMap<String, String> {
        self.values
            .iter()
            .filter_map(|(name, history)| history.iter().rev().find(|(at, _)| *at < message_number).map(|(_, v)| (name.clone(), v.clone())))
            .collect()
    }

    /// Keep what message `message_number`'s prompt left: values set at that message or
    /// later (a draw being redone, exchanges since deleted) give way to `after`.
    pub fn record(&mut self, message_number: u64, after: &BTreeMap<String, String>) {
        let before = self.before(message_number);
        for history in self.values.values_mut() {
            history.retain(|(at, _)| *at < message_number);
        }
        for (name, value) in after {
            if before.get(name) != Some(value) {
                let history = self.values.entry(name.clone()).or_default();
                history.push((message_number, value.clone()));
                if history.len() > HISTORY {
                    let (from, _) = history.remove(0);
                    history[0].0 = from;
                }
            }
        }
        self.values.retain(|_, history| !history.is_empty());
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// A chat's variables, all their kept values.
pub fn load(conn: &Connection, character_id: &str) -> Result<ChatVariables, StoreError> {
    let json: Option<String> =
        conn.query_row("SELECT vars_json FROM companion_variables WHERE character_id = ?1", [character_id], |r| r.get(0)).optional()?;
    match json {
        Some(json) => serde_json::from_str(&json).map_err(|e| StoreError::Corrupt(format!("chat variables: {e}"))),
        None => Ok(ChatVariables::default()),
    }
}

/// Keep a chat's variables (the transaction that stores an exchange, or installs a chat).
pub fn save(conn: &Connection, character_id: &str, vars: &ChatVariables) -> Result<(), StoreError> {
    if vars.is_empty() {
        conn.execute("DELETE FROM companion_variables WHERE character_id = ?1", [character_id])?;
        return Ok(());
    }
    let json = serde_json::to_string(vars).map_err(|e| StoreError::Corrupt(format!("chat variables: {e}")))?;
    conn.execute(
        "INSERT INTO companion_variables(character_id, vars_json) VALUES (?1, ?2)
         ON CONFLICT(character_id) DO UPDATE SET vars_json = excluded.vars_json",
        params![character_id, json],
    )?;
    Ok(())
}

/// Forget what messages from `message_number` on set: their exchanges were taken back
/// (undo, deleting the last exchanges, a branch).
pub fn forget_from(conn: &Connection, character_id: &str, message_number: u64) -> Result<(), StoreError> {
    let mut chat = load(conn, character_id)?;
    if chat.is_empty() {
        return Ok(());
    }
    chat.record(message_number, &chat.before(message_number));
    save(conn, character_id, &chat)
}

/// The library's global variables.
pub fn globals(conn: &Connection) -> Result<BTreeMap<String, String>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT name, value FROM companion_global_variables")?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// What a prompt's macros start from for message `message_number` of a chat.
pub fn for_message(conn: &Connection, character_id: &str, message_number: u64) -> Result<Variables, StoreError> {
    Ok(Variables { local: load(conn, character_id)?.before(message_number), global: globals(conn)? })
}

/// Keep what message `message_number` left in `after` (its own macros and its prompt's):
/// the chat's own values with that message, the globals that differ from the stored ones.
pub fn keep(conn: &Connection, character_id: &str, message_number: u64, after: &Variables) -> Result<(), StoreError> {
    let mut chat = load(conn, character_id)?;
    chat.record(message_number, &after.local);
    save(conn, character_id, &chat)?;
    let stored = globals(conn)?;
    for (name, value) in &after.global {
        if stored.get(name) != Some(value) {
            conn.execute(
                "INSERT INTO companion_global_variables(name, value) VALUES (?1, ?2)
                 ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                params![name, value],
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_redrawn_message_starts_from_the_values_before_it() {
        let mut vars = ChatVariables::default();
        vars.record(2, &map(&[("visits", "1")]));
        vars.record(4, &map(&[("visits", "2"), ("mood", "calm")]));
        assert_eq!(vars.before(4), map(&[("visits", "1")]));
        assert_eq!(vars.before(6), map(&[("visits", "2"), ("mood", "calm")]));
        // Message 4 drawn again: its first draw's values give way.
        vars.record(4, &map(&[("visits", "2"), ("mood", "cross")]));
        assert_eq!(vars.before(6), map(&[("visits", "2"), ("mood", "cross")]));
        // An unchanged value is not kept again; a variable set only by a dropped draw goes.
        vars.record(4, &map(&[("visits", "1")]));
        assert_eq!(vars.before(6), map(&[("visits", "1")]));
        assert_eq!(vars.values["visits"], vec![(2, "1".to_string())]);
        // A long chat keeps every value: cut back to an early message, it reads the value
        // from then (it used to forget all but the last 32).
        for n in 3..100 {
            vars.record(2 * n, &map(&[("visits", &n.to_string())]));
        }
        assert_eq!(vars.before(1000)["visits"], "99");
        assert_eq!(vars.before(9)["visits"], "4");
        assert_eq!(vars.before(3)["visits"], "1");
    }
}
