-- Owned by the companion module.
-- The SillyTavern objects an imported exchange came from ({"user","reply","after"}) and
-- an imported chat's header and opening messages ({"header","opening"}): what a later
-- export writes back, so a chat file round-trips.
ALTER TABLE companion_turns ADD COLUMN file_json TEXT;
ALTER TABLE companion_chats ADD COLUMN file_json TEXT;

-- Chats put aside: the original of a branch, a chat an import replaced, a chat switched
-- away from. Whole (state and exchanges with their packets, JSON), to switch back to.
-- Only the chat in `companion_turns` has memories: switching rewrites them.
CREATE TABLE companion_saved_chats (
    id           TEXT PRIMARY KEY,
    character_id TEXT NOT NULL REFERENCES characters(id) ON DELETE CASCADE,
    title        TEXT NOT NULL,
    saved_at     TEXT NOT NULL,
    turns        INTEGER NOT NULL,
    chat_json    TEXT NOT NULL
);
CREATE INDEX companion_saved_chats_by_character ON companion_saved_chats(character_id, saved_at);
