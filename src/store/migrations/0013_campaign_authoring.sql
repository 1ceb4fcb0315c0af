-- Owned by the scene module: what a game master builds by hand.

-- A campaign's cast: library characters who belong to it. A new scene of the campaign
-- starts with this cast unless it is given its own.
CREATE TABLE campaign_cast (
    campaign_id  TEXT NOT NULL REFERENCES campaigns(id) ON DELETE CASCADE,
    character_id TEXT NOT NULL REFERENCES characters(id) ON DELETE CASCADE,
    PRIMARY KEY (campaign_id, character_id)
);

-- Lorebooks (owned by interop) that every campaign of a world scans.
CREATE TABLE world_lorebooks (
    world_id    TEXT NOT NULL REFERENCES worlds(id) ON DELETE CASCADE,
    lorebook_id TEXT NOT NULL REFERENCES lorebooks(id) ON DELETE CASCADE,
    PRIMARY KEY (world_id, lorebook_id)
);

-- Changes made by hand to a campaign's state (trackers, facts, time) or to a
-- character's state in a scene, in order: the history shows them beside the rounds.
CREATE TABLE state_edits (
    id          TEXT PRIMARY KEY,
    campaign_id TEXT NOT NULL REFERENCES campaigns(id) ON DELETE CASCADE,
    scene_id    TEXT REFERENCES scenes(id) ON DELETE CASCADE,
    edit_json   TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX state_edits_campaign ON state_edits(campaign_id, created_at);
