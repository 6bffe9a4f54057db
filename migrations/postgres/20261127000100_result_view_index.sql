-- PostgreSQL twin of ../20261127000100_result_view_index.sql: the same
-- index, partial on the same condition (kept for the same plans).
CREATE INDEX result_view ON result (run_id, test_code, repeat_index, passed, error_kind, base_severity)
    WHERE run_id IS NOT NULL;
