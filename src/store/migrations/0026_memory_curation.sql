-- Owned by the memory module: memories the user curates. A pinned memory is injected
-- for its character every time (within the memory budget); edited_at says the text is
-- the user's, not what was said.
ALTER TABLE memories ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memories ADD COLUMN edited_at TEXT;
CREATE INDEX memories_pinned ON memories(scope, scope_id) WHERE pinned = 1;
