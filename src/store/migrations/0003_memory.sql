-- Owned by the memory module.
SELECT 1;
