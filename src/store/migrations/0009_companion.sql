-- Owned by the companion module.
-- One row per character the user has chatted with: where the conversation stands.
CREATE TABLE companion_chats (
    character_id  TEXT PRIMARY KEY REFERENCES characters(id) ON DELETE CASCADE,
    -- PHYSICAL or REMOTE, kept across sessions (the proximity detector starts from it).
    proximity     TEXT NOT NULL DEFAULT 'REMOTE',
    -- The current sitting; a long gap starts a new one (memory turns carry it).
    session       TEXT,
    last_chat_at  TEXT,
    turns         INTEGER NOT NULL DEFAULT 0
);

-- A committed exchange: the user's message and the character's reply, written together
-- (hold–wait–commit) with the packet exactly as it was sent and the memories it carried.
CREATE TABLE companion_turns (
    id                TEXT PRIMARY KEY,
    character_id      TEXT NOT NULL REFERENCES characters(id) ON DELETE CASCADE,
    seq               INTEGER NOT NULL,
    session           TEXT NOT NULL,
    user_text         TEXT NOT NULL,
    reply             TEXT NOT NULL,
    at                TEXT NOT NULL,
    -- The two memory turns this exchange became (memories.id).
    user_memory_id    TEXT,
    reply_memory_id   TEXT,
    proximity         TEXT NOT NULL,
    -- JSON: the packet (messages as sent, blocks with token counts, notes).
    packet_json       TEXT NOT NULL,
    -- JSON: the memory hits in the packet's memory bank.
    hits_json         TEXT NOT NULL,
    attempts          INTEGER NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    from_cache        INTEGER NOT NULL,
    elapsed_ms        INTEGER NOT NULL,
    UNIQUE (character_id, seq)
);
