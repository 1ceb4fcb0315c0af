-- Owned by the llm module (response cache).
SELECT 1;
