-- Owned by the memory module.
-- Every remembered thing is one row of `memories`: a raw chat turn, an LLM summary of
-- several turns, or a chunk of a lore file. Its integer rowid keys the FTS5 index and the
-- stored vector, so the three stay in step through triggers and cascades.
CREATE TABLE memories (
    rowid         INTEGER PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    kind          TEXT NOT NULL CHECK (kind IN ('turn', 'summary', 'lore')),
    scope         TEXT NOT NULL DEFAULT 'world' CHECK (scope IN ('world', 'campaign', 'character')),
    scope_id      TEXT,
    speaker       TEXT,
    text          TEXT NOT NULL,
    session       TEXT,
    -- Conversation order: neighbours of a hit are the rows just before and after it.
    seq           INTEGER NOT NULL,
    -- In-fiction time as the story states it (free text), and the real time it happened.
    fiction_time  TEXT,
    time          TEXT,
    created_at    TEXT NOT NULL,
    -- Lore: the file and chunk it came from; summary: the turns it covers.
    source        TEXT,
    content_hash  TEXT,
    -- For turns: 1 once a summary covers it. The unsummarised buffer is `summarised = 0`.
    summarised    INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX memories_scope ON memories(scope, scope_id);
CREATE INDEX memories_session_seq ON memories(session, seq);
CREATE INDEX memories_time ON memories(time);
CREATE INDEX memories_buffer ON memories(kind, scope, scope_id, summarised);
CREATE INDEX memories_source ON memories(source);

-- Who was present (or was told). A memory without witnesses is common knowledge.
CREATE TABLE memory_witnesses (
    memory_rowid INTEGER NOT NULL REFERENCES memories(rowid) ON DELETE CASCADE,
    witness      TEXT NOT NULL,
    PRIMARY KEY (memory_rowid, witness)
) WITHOUT ROWID;
CREATE INDEX memory_witnesses_by_name ON memory_witnesses(witness);

-- Keyword index (BM25). Porter stemming so "swam" finds little but "swimming" finds
-- "swim"; diacritics folded.
CREATE VIRTUAL TABLE memory_fts USING fts5(
    text, speaker,
    content = 'memories', content_rowid = 'rowid',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memory_fts(rowid, text, speaker) VALUES (new.rowid, new.text, coalesce(new.speaker, ''));
END;
CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memory_fts(memory_fts, rowid, text, speaker) VALUES ('delete', old.rowid, old.text, coalesce(old.speaker, ''));
END;
CREATE TRIGGER memories_fts_update AFTER UPDATE OF text, speaker ON memories BEGIN
    INSERT INTO memory_fts(memory_fts, rowid, text, speaker) VALUES ('delete', old.rowid, old.text, coalesce(old.speaker, ''));
    INSERT INTO memory_fts(rowid, text, speaker) VALUES (new.rowid, new.text, coalesce(new.speaker, ''));
END;

-- One vector per memory and model (little-endian f32). `model` names the embedder so a
-- model change is detected and answered by a re-index.
CREATE TABLE memory_vectors (
    memory_rowid INTEGER PRIMARY KEY REFERENCES memories(rowid) ON DELETE CASCADE,
    model        TEXT NOT NULL,
    dim          INTEGER NOT NULL,
    vector       BLOB NOT NULL
);

-- The persisted HNSW graph: one row, rebuilt in the background. `max_rowid` says which
-- memories it covers; newer ones are scanned exactly until the next rebuild.
CREATE TABLE memory_ann (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    model      TEXT NOT NULL,
    max_rowid  INTEGER NOT NULL,
    count      INTEGER NOT NULL,
    built_at   TEXT NOT NULL,
    graph      BLOB NOT NULL
);
