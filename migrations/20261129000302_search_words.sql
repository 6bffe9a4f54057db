-- Nothing to do on SQLite: `helmbench view` keeps its FTS5 word index in a
-- file beside the database (src/store/view_search.rs). The PostgreSQL twin
-- gives the team store word indexes of its own (issue 45). The version is
-- kept in both histories.
SELECT 1;
