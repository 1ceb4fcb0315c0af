-- Owned by the character module: lorebooks attached to a character beside its card's own
-- book. They fire in its one-to-one chat and in the scenes of campaigns it is cast in.
CREATE TABLE character_lorebooks (
    character_id TEXT NOT NULL REFERENCES characters(id) ON DELETE CASCADE,
    lorebook_id  TEXT NOT NULL REFERENCES lorebooks(id) ON DELETE CASCADE,
    PRIMARY KEY (character_id, lorebook_id)
);

-- Owned by the companion module: lorebooks attached to one character's chat only.
CREATE TABLE companion_chat_lorebooks (
    character_id TEXT NOT NULL REFERENCES characters(id) ON DELETE CASCADE,
    lorebook_id  TEXT NOT NULL REFERENCES lorebooks(id) ON DELETE CASCADE,
    PRIMARY KEY (character_id, lorebook_id)
);
