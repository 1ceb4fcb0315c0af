-- Owned by the memory module: every prompt's injected memories, not only each agent's
-- last (`memory_injections`), so the memory browser can go back round by round or turn
-- by turn. The last 200 per agent are kept.
CREATE TABLE memory_injection_log (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    agent  TEXT NOT NULL,
    query  TEXT NOT NULL,
    at     TEXT NOT NULL,
    hits   TEXT NOT NULL
);
CREATE INDEX memory_injection_log_by_agent ON memory_injection_log(agent, seq);
