-- Which process is running a run, and when it last said so. A run whose
-- owner is gone (dead pid on this host, or no heartbeat for a while) may be
-- resumed; one whose owner is alive may not, so two processes never pay for
-- the same test cases.
ALTER TABLE evaluation_run ADD COLUMN owner_host TEXT;
ALTER TABLE evaluation_run ADD COLUMN owner_pid INTEGER;
ALTER TABLE evaluation_run ADD COLUMN heartbeat_at TEXT;
