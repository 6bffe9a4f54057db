-- Nothing to do on SQLite: its text columns already compare in byte order
-- (BINARY). The PostgreSQL twin declares COLLATE "C" on every text column
-- so the team store orders codes as SQLite does (issue 41, item 11). The
-- version is kept in both histories.
SELECT 1;
