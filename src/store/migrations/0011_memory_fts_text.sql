-- Owned by the memory module.
-- The keyword index covers the text of a memory only. It used to index the speaker
-- too (at weight 0): a query term naming a speaker ("user", the character's name) then
-- read a doclist of half the library just to filter it out by column, most of a
-- search's time at 100k memories. Speakers are filtered in SQL, not by FTS.
DROP TRIGGER memories_fts_insert;
DROP TRIGGER memories_fts_delete;
DROP TRIGGER memories_fts_update;
DROP TABLE memory_fts;

CREATE VIRTUAL TABLE memory_fts USING fts5(
    text,
    content = 'memories', content_rowid = 'rowid',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memory_fts(rowid, text) VALUES (new.rowid, new.text);
END;
CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memory_fts(memory_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
END;
CREATE TRIGGER memories_fts_update AFTER UPDATE OF text ON memories BEGIN
    INSERT INTO memory_fts(memory_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
    INSERT INTO memory_fts(rowid, text) VALUES (new.rowid, new.text);
END;
INSERT INTO memory_fts(memory_fts) VALUES ('rebuild');
