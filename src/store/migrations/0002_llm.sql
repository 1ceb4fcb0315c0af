-- Owned by the llm module.

-- The opt-in response cache. `key` is the SHA-256 of the canonical JSON of the whole
-- request (endpoint, model, messages, sampler, response format); API keys are never
-- part of it, and nothing here holds one.
CREATE TABLE llm_response_cache (
    key               TEXT PRIMARY KEY,
    provider          TEXT NOT NULL,
    model             TEXT NOT NULL,
    text              TEXT NOT NULL,
    finish_reason     TEXT,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    usage_reported    INTEGER NOT NULL CHECK (usage_reported IN (0, 1)),
    created_at        TEXT NOT NULL,
    hits              INTEGER NOT NULL DEFAULT 0,
    last_hit_at       TEXT
);
CREATE INDEX llm_response_cache_created ON llm_response_cache(created_at);
