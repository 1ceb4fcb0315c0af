-- Owned by the scene module: a round set aside by a redo that has not finished yet. A
-- process that dies while the redo's new round plays leaves the flag; the next engine
-- to open the library puts the kept round back (or, when the new round was committed,
-- clears the flag), so a crash never leaves the scene a round short.
ALTER TABLE scene_round_alternatives ADD COLUMN redo_pending INTEGER NOT NULL DEFAULT 0;
