-- Owned by the interop module (lorebooks and imported documents).
SELECT 1;
