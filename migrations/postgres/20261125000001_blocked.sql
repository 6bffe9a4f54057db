-- PostgreSQL twin of ../20261125000001_blocked.sql.
ALTER TABLE result ADD COLUMN block TEXT;
