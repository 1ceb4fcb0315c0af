-- Owned by the llm module.
-- Every LLM call as it was sent and what came back, so the workbench can show any
-- agent's prompt exactly as sent. Only the newest calls are kept (see `llm::calls`).
CREATE TABLE llm_calls (
    rowid             INTEGER PRIMARY KEY,
    at                TEXT NOT NULL,
    profile           TEXT NOT NULL,
    provider          TEXT NOT NULL,
    model             TEXT NOT NULL,
    -- JSON: the request after profile defaults were applied (messages, sampler, format).
    request_json      TEXT NOT NULL,
    reply             TEXT,
    error             TEXT,
    finish_reason     TEXT,
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    from_cache        INTEGER NOT NULL DEFAULT 0,
    elapsed_ms        INTEGER NOT NULL
);
