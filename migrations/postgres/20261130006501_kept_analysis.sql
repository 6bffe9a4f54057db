-- Issue 45: each completed run's analysis, kept for `report`: see the
-- SQLite migration of the same name.
CREATE TABLE kept_analysis (
    run_id BIGINT NOT NULL UNIQUE REFERENCES evaluation_run(id) ON DELETE CASCADE,
    analysis_key TEXT COLLATE "C" NOT NULL,
    body TEXT COLLATE "C" NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL DEFAULT (to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
);
