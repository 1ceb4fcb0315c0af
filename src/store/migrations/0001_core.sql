-- Library-wide key/value facts (schema notes, last-opened panel, ...).
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- Characters, whatever made them: the identity pipeline, a card import, the demo.
-- `card_json` keeps an imported card document whole so export is lossless;
-- `profile_json` holds an identity pipeline's final profile.
CREATE TABLE characters (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    origin       TEXT NOT NULL CHECK (origin IN ('identity', 'card', 'demo', 'manual')),
    card_json    TEXT,
    profile_json TEXT,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);
CREATE INDEX characters_name ON characters(name);
