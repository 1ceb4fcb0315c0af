-- Owned by the companion module.
-- The name the user went by when they wrote each message (their persona then): a later
-- switch of persona does not rename what was already said. NULL for turns stored
-- before this column: they read as the chat's persona.
ALTER TABLE companion_turns ADD COLUMN user_name TEXT;
