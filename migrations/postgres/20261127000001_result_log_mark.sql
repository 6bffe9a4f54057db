-- The write-ahead log of a run's results (issue 31): each reply is appended
-- to a log beside the database before its worker takes the next test case,
-- and the database takes them in large transactions. Each transaction also
-- records the last log record it holds, so a log replayed after a crash
-- (between a commit and the log's truncation) writes nothing twice.
CREATE TABLE result_log_mark (
    run_id BIGINT NOT NULL UNIQUE REFERENCES evaluation_run(id) ON DELETE CASCADE,
    seq BIGINT NOT NULL
);
