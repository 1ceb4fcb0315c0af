-- Owned by the scene module: worlds, campaigns, arcs, scenes, their messages and the
-- state a round changes. Notes at every level are the scenario / author notes of the
-- context envelope.

CREATE TABLE personas (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    created_at  TEXT NOT NULL
);

CREATE TABLE worlds (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    notes       TEXT NOT NULL DEFAULT '',
    created_at  TEXT NOT NULL
);

CREATE TABLE campaigns (
    id          TEXT PRIMARY KEY,
    world_id    TEXT NOT NULL REFERENCES worlds(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    notes       TEXT NOT NULL DEFAULT '',
    persona_id  TEXT REFERENCES personas(id) ON DELETE SET NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX campaigns_world ON campaigns(world_id);

-- Trackers (a JSON object: name -> any value), dynamic facts (a JSON array of text)
-- and in-fiction time, all written once per round at round close.
CREATE TABLE campaign_state (
    campaign_id     TEXT PRIMARY KEY REFERENCES campaigns(id) ON DELETE CASCADE,
    trackers_json   TEXT NOT NULL DEFAULT '{}',
    facts_json      TEXT NOT NULL DEFAULT '[]',
    elapsed_minutes INTEGER NOT NULL DEFAULT 0,
    updated_at      TEXT NOT NULL
);

-- Lorebooks (owned by interop) that a campaign's scenes scan.
CREATE TABLE campaign_lorebooks (
    campaign_id TEXT NOT NULL REFERENCES campaigns(id) ON DELETE CASCADE,
    lorebook_id TEXT NOT NULL REFERENCES lorebooks(id) ON DELETE CASCADE,
    PRIMARY KEY (campaign_id, lorebook_id)
);

-- A base character (core `characters`) adjusted for one world or one campaign. The
-- campaign's override wins over the world's; `override_json` is a JSON object of
-- sheet fields (description, personality, scenario, ...).
CREATE TABLE character_overrides (
    character_id  TEXT NOT NULL REFERENCES characters(id) ON DELETE CASCADE,
    scope         TEXT NOT NULL CHECK (scope IN ('world', 'campaign')),
    scope_id      TEXT NOT NULL,
    override_json TEXT NOT NULL,
    PRIMARY KEY (character_id, scope, scope_id)
);

CREATE TABLE arcs (
    id          TEXT PRIMARY KEY,
    campaign_id TEXT NOT NULL REFERENCES campaigns(id) ON DELETE CASCADE,
    ordinal     INTEGER NOT NULL,
    name        TEXT NOT NULL,
    notes       TEXT NOT NULL DEFAULT '',
    created_at  TEXT NOT NULL
);
CREATE INDEX arcs_campaign ON arcs(campaign_id, ordinal);

-- `active_json`: ids of the characters currently in the scene. `rounds`: the number
-- of closed rounds, advanced only by the round-close transaction.
CREATE TABLE scenes (
    id          TEXT PRIMARY KEY,
    arc_id      TEXT NOT NULL REFERENCES arcs(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    notes       TEXT NOT NULL DEFAULT '',
    summary     TEXT NOT NULL DEFAULT '',
    active_json TEXT NOT NULL DEFAULT '[]',
    rounds      INTEGER NOT NULL DEFAULT 0,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE INDEX scenes_arc ON scenes(arc_id);

-- Who may be in a scene (the Director activates and deactivates among them).
CREATE TABLE scene_cast (
    scene_id     TEXT NOT NULL REFERENCES scenes(id) ON DELETE CASCADE,
    character_id TEXT NOT NULL REFERENCES characters(id) ON DELETE CASCADE,
    PRIMARY KEY (scene_id, character_id)
);

-- One row per character per scene: location, mood, clothing, activity, intentions.
CREATE TABLE scene_character_states (
    scene_id     TEXT NOT NULL REFERENCES scenes(id) ON DELETE CASCADE,
    character_id TEXT NOT NULL REFERENCES characters(id) ON DELETE CASCADE,
    state_json   TEXT NOT NULL,
    round        INTEGER NOT NULL,
    PRIMARY KEY (scene_id, character_id)
);

-- Messages are numbered per scene from 1, and carry the round that produced them.
CREATE TABLE scene_messages (
    id           TEXT PRIMARY KEY,
    scene_id     TEXT NOT NULL REFERENCES scenes(id) ON DELETE CASCADE,
    number       INTEGER NOT NULL,
    round        INTEGER NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('user', 'character', 'narrator')),
    character_id TEXT REFERENCES characters(id) ON DELETE SET NULL,
    speaker      TEXT NOT NULL,
    content      TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    UNIQUE (scene_id, number)
);
CREATE INDEX scene_messages_round ON scene_messages(scene_id, round);

-- The audit of a closed round: the Director's decisions of both passes, the
-- reconciled conflicts, and the budget ledger of every agent call.
CREATE TABLE scene_rounds (
    scene_id      TEXT NOT NULL REFERENCES scenes(id) ON DELETE CASCADE,
    round         INTEGER NOT NULL,
    input         TEXT,
    director_json TEXT NOT NULL,
    ledgers_json  TEXT NOT NULL,
    tokens        INTEGER NOT NULL,
    created_at    TEXT NOT NULL,
    PRIMARY KEY (scene_id, round)
);
