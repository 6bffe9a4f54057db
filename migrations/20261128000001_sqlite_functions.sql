-- Nothing to do on SQLite: its PostgreSQL twin gives PostgreSQL the SQLite
-- functions the store's statements use, so both run the same SQL (issue 34,
-- src/store/backend.rs). The version is kept in both histories.
SELECT 1;
