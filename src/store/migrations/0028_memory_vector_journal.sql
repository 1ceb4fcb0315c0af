-- Owned by the memory module. Every change to a stored vector, in order, so that a
-- vector graph saved beside the library catches up on open by replaying what came
-- after it, instead of being rebuilt. Trimmed up to what the last saved graph holds.
CREATE TABLE memory_vector_changes (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    memory_rowid INTEGER NOT NULL
);

CREATE TRIGGER memory_vectors_journal_insert AFTER INSERT ON memory_vectors BEGIN
    INSERT INTO memory_vector_changes(memory_rowid) VALUES (new.memory_rowid);
END;
CREATE TRIGGER memory_vectors_journal_update AFTER UPDATE ON memory_vectors BEGIN
    INSERT INTO memory_vector_changes(memory_rowid) VALUES (new.memory_rowid);
END;
CREATE TRIGGER memory_vectors_journal_delete AFTER DELETE ON memory_vectors BEGIN
    INSERT INTO memory_vector_changes(memory_rowid) VALUES (old.memory_rowid);
END;

-- The graph is now a file beside the library, written without a write transaction.
DROP TABLE memory_ann;
