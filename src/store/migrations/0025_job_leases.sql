-- Owned by the engine's job registry (context::Jobs): the round, chat turn or
-- checkpoint each process is running, so a second process is refused the same job.
-- A row is held by its owner's heartbeat and released when the job ends; one whose
-- owner died counts until expires_at (unix milliseconds). cancel_requested is how
-- another process cancels the job: the owner's heartbeat sees it and stops the work.
CREATE TABLE job_leases (
    kind       TEXT NOT NULL,
    id         TEXT NOT NULL,
    owner      TEXT NOT NULL,
    pid        INTEGER NOT NULL,
    host       TEXT NOT NULL,
    taken_at   INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, id)
);
