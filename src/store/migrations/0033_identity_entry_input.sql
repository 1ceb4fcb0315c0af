-- Owned by the identity module: what the entry agent sent to start a run, as it sent it
-- (`POST /api/character/start`'s body without the start options), so the predecessor's
-- `input.json` and `knowledge_base.input_data` are that input and not our seed made of
-- it. NULL for a run started from a seed file or the GUI, whose input is the seed.
ALTER TABLE identity_runs ADD COLUMN entry_input_json TEXT;
