-- Owned by the memory module.
-- The memories that went into each agent's most recent prompt, so the memory browser can
-- show what every agent was actually given (one row per agent label, replaced per call).
CREATE TABLE memory_injections (
    agent  TEXT PRIMARY KEY,
    query  TEXT NOT NULL,
    at     TEXT NOT NULL,
    -- JSON array of retrieval hits, as injected (best first, with their scores).
    hits   TEXT NOT NULL
);
