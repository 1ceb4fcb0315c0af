-- Owned by the companion module: the chat variables cards keep with `{{setvar}}` and its
-- kin. A chat's own (`companion_variables`, one row per character's chat: each
-- variable's values with the message that set them, as JSON, so a redrawn reply starts
-- from the values before it) and the library's globals (`{{setglobalvar}}`).
CREATE TABLE companion_variables (
    character_id TEXT PRIMARY KEY REFERENCES characters(id) ON DELETE CASCADE,
    vars_json    TEXT NOT NULL
);
CREATE TABLE companion_global_variables (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
