-- PostgreSQL twin of ../20261127000100_result_view_index.sql: the same
-- index (an index-only scan here needs the visibility map, which VACUUM
-- keeps; the ordered range scan is what matters).
CREATE INDEX result_view ON result (run_id, test_code, repeat_index, passed, error_kind, base_severity);
