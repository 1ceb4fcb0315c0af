-- Owned by the companion module: the sticky / cooldown timers of World Info entries in
-- one character's chat (a `lorebook::activation::ActivationState` as JSON), written by
-- the transaction that stores an exchange or a redrawn reply, so a draw thrown away
-- leaves the timers as they were.
CREATE TABLE companion_lore_state (
    character_id TEXT PRIMARY KEY REFERENCES characters(id) ON DELETE CASCADE,
    state_json   TEXT NOT NULL
);
