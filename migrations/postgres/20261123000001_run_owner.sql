-- PostgreSQL twin of ../20261123000001_run_owner.sql.
ALTER TABLE evaluation_run ADD COLUMN owner_host TEXT;
ALTER TABLE evaluation_run ADD COLUMN owner_pid BIGINT;
ALTER TABLE evaluation_run ADD COLUMN heartbeat_at TEXT;
