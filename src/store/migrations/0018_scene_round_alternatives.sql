-- Owned by the scene module: rounds a redo replaced, kept whole (messages with who
-- witnessed them, the states, active set, campaign state and lore timers they left, the
-- Director's record and ledgers) so the user can switch back to one. JSON, see
-- `scene::records::KeptRound`.
CREATE TABLE scene_round_alternatives (
    id         TEXT PRIMARY KEY,
    scene_id   TEXT NOT NULL REFERENCES scenes(id) ON DELETE CASCADE,
    round      INTEGER NOT NULL,
    saved_at   TEXT NOT NULL,
    -- The round's first words, for lists.
    preview    TEXT NOT NULL,
    round_json TEXT NOT NULL
);
CREATE INDEX scene_round_alternatives_by_scene ON scene_round_alternatives(scene_id, round);
