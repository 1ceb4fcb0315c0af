-- Owned by the companion module: the chat's Author's Note (SillyTavern's `note_*` chat
-- metadata) as JSON, NULL when the user has written none.
ALTER TABLE companion_chats ADD COLUMN author_note_json TEXT;
