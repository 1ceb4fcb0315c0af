-- Owned by the llm module: which agent made each logged call (director, character,
-- narrator, world, summariser, companion, identity.<agent>, test), so the workbench can
-- chart latency and tokens per agent. Calls logged before this column say ''.
ALTER TABLE llm_calls ADD COLUMN agent TEXT NOT NULL DEFAULT '';
