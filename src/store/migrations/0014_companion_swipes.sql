-- Owned by the companion module: every draw kept for a reply (its swipes, JSON text
-- array) and which one the conversation goes on from. `reply` is always the chosen one.
ALTER TABLE companion_turns ADD COLUMN swipes_json TEXT NOT NULL DEFAULT '[]';
ALTER TABLE companion_turns ADD COLUMN swipe INTEGER NOT NULL DEFAULT 0;
