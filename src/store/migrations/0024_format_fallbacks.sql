-- Owned by the LLM client (llm::client::formats): the response format each profile's
-- server accepts, once it refused a richer one (json_schema -> json_object -> text), so
-- a later session does not pay for the same refusal again.
CREATE TABLE format_fallbacks (
    profile  TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    level    TEXT NOT NULL,
    reason   TEXT NOT NULL,
    at       TEXT NOT NULL,
    PRIMARY KEY (profile, endpoint)
);
