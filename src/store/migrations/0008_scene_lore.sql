-- Owned by the scene module: what lore activation carries from round to round.

-- The sticky / cooldown / delay timers of World Info entries in one scene (a
-- `lorebook::activation::ActivationState` as JSON), written by the round-close
-- transaction so a discarded round leaves the timers as they were.
CREATE TABLE scene_lore_state (
    scene_id   TEXT PRIMARY KEY REFERENCES scenes(id) ON DELETE CASCADE,
    state_json TEXT NOT NULL,
    round      INTEGER NOT NULL
);

-- A revision per lorebook, bumped by every change to the book or its entries whoever
-- writes it. The engine keeps compiled key indexes per (book, revision), so an edit is
-- seen by the next prompt and an unchanged book is never compiled twice. No foreign
-- key: a row outliving its book is harmless and ids are never reused.
CREATE TABLE lorebook_revisions (
    lorebook_id TEXT PRIMARY KEY,
    revision    INTEGER NOT NULL
);
CREATE TRIGGER lore_entries_revise_insert AFTER INSERT ON lore_entries BEGIN
    INSERT OR IGNORE INTO lorebook_revisions(lorebook_id, revision) VALUES (new.lorebook_id, 0);
    UPDATE lorebook_revisions SET revision = revision + 1 WHERE lorebook_id = new.lorebook_id;
END;
CREATE TRIGGER lore_entries_revise_update AFTER UPDATE ON lore_entries BEGIN
    INSERT OR IGNORE INTO lorebook_revisions(lorebook_id, revision) VALUES (new.lorebook_id, 0);
    UPDATE lorebook_revisions SET revision = revision + 1 WHERE lorebook_id IN (new.lorebook_id, old.lorebook_id);
END;
CREATE TRIGGER lore_entries_revise_delete AFTER DELETE ON lore_entries BEGIN
    INSERT OR IGNORE INTO lorebook_revisions(lorebook_id, revision) VALUES (old.lorebook_id, 0);
    UPDATE lorebook_revisions SET revision = revision + 1 WHERE lorebook_id = old.lorebook_id;
END;
CREATE TRIGGER lorebooks_revise_update AFTER UPDATE ON lorebooks BEGIN
    INSERT OR IGNORE INTO lorebook_revisions(lorebook_id, revision) VALUES (new.id, 0);
    UPDATE lorebook_revisions SET revision = revision + 1 WHERE lorebook_id = new.id;
END;

-- The last round the scene's running summary covers: the history section shows the
-- summary, then the rounds after this one verbatim.
ALTER TABLE scenes ADD COLUMN summary_round INTEGER NOT NULL DEFAULT 0;
