-- PostgreSQL twin of ../20261128000100_run_hosts_and_leases.sql.
CREATE TABLE run_host (
    run_id BIGINT NOT NULL REFERENCES evaluation_run(id) ON DELETE CASCADE,
    host TEXT NOT NULL,
    pid BIGINT NOT NULL,
    started BIGINT,
    first_seen TEXT NOT NULL,
    heartbeat_at TEXT NOT NULL,
    sent BIGINT NOT NULL DEFAULT 0,
    stored BIGINT NOT NULL DEFAULT 0,
    left_at TEXT,
    PRIMARY KEY (run_id, host, pid)
);

CREATE TABLE run_lease (
    run_id BIGINT NOT NULL REFERENCES evaluation_run(id) ON DELETE CASCADE,
    chunk BIGINT NOT NULL,
    holder_host TEXT,
    holder_pid BIGINT,
    expires_at DOUBLE PRECISION,
    done BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, chunk)
);
