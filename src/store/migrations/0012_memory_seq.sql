-- Owned by the memory module.
-- Every insert numbers its memories after `max(seq)`: without an index on `seq` that
-- was a scan of the whole table per write (~20 ms at 1M memories).
CREATE INDEX memories_seq ON memories(seq);
