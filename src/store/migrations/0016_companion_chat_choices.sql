-- Owned by the companion module: which greeting opens a chat (0: the card's first_mes,
-- n: its n-th alternate greeting; the greetings are the first message's swipes), and
-- who the user plays in it (a persona; none: `[companion] user_name`).
ALTER TABLE companion_chats ADD COLUMN greeting INTEGER NOT NULL DEFAULT 0;
ALTER TABLE companion_chats ADD COLUMN persona_id TEXT REFERENCES personas(id) ON DELETE SET NULL;
