-- The character identity pipeline. One run per character being developed; its id is
-- the character's id. Every version of every checkpoint is kept.
CREATE TABLE identity_runs (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    mode          TEXT NOT NULL CHECK (mode IN ('fast', 'balanced', 'deep')),
    input_json    TEXT NOT NULL,
    -- Profile used by every agent of this run, overriding the role map.
    profile       TEXT,
    auto_approve  INTEGER NOT NULL DEFAULT 0,
    status        TEXT NOT NULL CHECK (status IN ('in_progress', 'completed', 'failed')),
    regenerations INTEGER NOT NULL DEFAULT 0,
    created_at    TEXT NOT NULL,
    completed_at  TEXT,
    error         TEXT
);

CREATE TABLE identity_checkpoints (
    run_id           TEXT NOT NULL REFERENCES identity_runs(id) ON DELETE CASCADE,
    number           INTEGER NOT NULL CHECK (number BETWEEN 1 AND 7),
    agent            TEXT NOT NULL,
    wave             INTEGER NOT NULL,
    status           TEXT NOT NULL CHECK (status IN
                       ('queued', 'running', 'awaiting_approval', 'approved',
                        'regenerating', 'stale', 'failed')),
    -- The version shown for approval; 0 before the first one exists.
    current_version  INTEGER NOT NULL DEFAULT 0,
    -- Feedback waiting to be applied by the next (re)generation.
    pending_feedback TEXT,
    error            TEXT,
    updated_at       TEXT NOT NULL,
    PRIMARY KEY (run_id, number)
);

CREATE TABLE identity_versions (
    run_id            TEXT NOT NULL,
    number            INTEGER NOT NULL,
    version           INTEGER NOT NULL,
    narrative         TEXT NOT NULL,
    structured_json   TEXT NOT NULL,
    -- Every structured-output attempt (raw text, repairs, schema errors).
    attempts_json     TEXT NOT NULL,
    -- The messages sent for the accepted attempt's first call.
    prompt_json       TEXT NOT NULL,
    -- The feedback this version answers, if it is a regeneration.
    feedback          TEXT,
    -- Which version of each earlier checkpoint it read: {"1": 2, "2": 1}.
    based_on_json     TEXT NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    usage_reported    INTEGER NOT NULL,
    wall_ms           INTEGER NOT NULL,
    started_at        TEXT NOT NULL,
    created_at        TEXT NOT NULL,
    PRIMARY KEY (run_id, number, version),
    FOREIGN KEY (run_id, number) REFERENCES identity_checkpoints(run_id, number) ON DELETE CASCADE
);
