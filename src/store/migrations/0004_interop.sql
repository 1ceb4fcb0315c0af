-- Owned by the interop module: lorebooks, their entries, and card portraits.

-- A lorebook: an imported World Info / lorebook_v3 file, or the book embedded in a
-- character card (`character_id` set; deleting the character deletes its book).
-- `book_json` is the book's own settings and source document (`lorebook::Lorebook`
-- without its entries); `source_sha256` identifies the imported document, so the
-- same file imported twice is recognised.
CREATE TABLE lorebooks (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    character_id  TEXT REFERENCES characters(id) ON DELETE CASCADE,
    book_json     TEXT NOT NULL,
    source_sha256 TEXT,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL
);
CREATE INDEX lorebooks_name ON lorebooks(name);
CREATE INDEX lorebooks_character ON lorebooks(character_id);
CREATE INDEX lorebooks_source ON lorebooks(source_sha256);

-- One entry per row, in book order (`ordinal`). `entry_json` is a `lorebook::LoreEntry`
-- with every activation setting and the entry's source document; the plain columns
-- are copies for listing and filtering without parsing JSON.
CREATE TABLE lore_entries (
    id          TEXT PRIMARY KEY,
    lorebook_id TEXT NOT NULL REFERENCES lorebooks(id) ON DELETE CASCADE,
    ordinal     INTEGER NOT NULL,
    label       TEXT NOT NULL,
    enabled     INTEGER NOT NULL,
    constant    INTEGER NOT NULL,
    entry_json  TEXT NOT NULL,
    UNIQUE (lorebook_id, ordinal)
);

-- A character's portrait as PNG bytes with the card chunks removed; an exported PNG
-- card is this picture with fresh chunks.
CREATE TABLE character_images (
    character_id TEXT PRIMARY KEY REFERENCES characters(id) ON DELETE CASCADE,
    png          BLOB NOT NULL
);
