-- Owned by the scene module: what a round changed, so the last round can be taken
-- back exactly, and the characters the Director may not pick in a scene.

-- JSON: the state before the round of everything it wrote (character states, the active
-- set, the campaign's trackers, facts and time, the lore timers). NULL for rounds closed
-- before this column existed: those cannot be undone.
ALTER TABLE scene_rounds ADD COLUMN before_json TEXT;

-- JSON array of character ids muted in this scene.
ALTER TABLE scenes ADD COLUMN muted_json TEXT NOT NULL DEFAULT '[]';
