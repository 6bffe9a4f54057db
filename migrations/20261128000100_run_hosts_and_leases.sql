-- Several processes on one run (issue 34): the team store hands a run's
-- planned test cases out in chunks (leases), and every process working on
-- the run says so, so `runs` can show who works on it and a resume can
-- refuse while anyone does. Written only on PostgreSQL today (a SQLite
-- file has one writer process at a time), created on both so the schemas
-- stay the same (tests/it/postgres.rs).

-- One row per process that worked on a run: the first and every joiner.
CREATE TABLE run_host (
    run_id INTEGER NOT NULL REFERENCES evaluation_run(id) ON DELETE CASCADE,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    -- When the process started (clock ticks after boot; tells a reused pid).
    started INTEGER,
    first_seen TEXT NOT NULL,
    heartbeat_at TEXT NOT NULL,
    -- Test cases this process took and stored.
    sent INTEGER NOT NULL DEFAULT 0,
    stored INTEGER NOT NULL DEFAULT 0,
    -- Set when the process stopped working on the run (it ended cleanly).
    left_at TEXT,
    PRIMARY KEY (run_id, host, pid)
);

-- A run's planned test cases, in the plan's order, cut in chunks: chunk k
-- is the plan's items [k * size, (k + 1) * size). A process takes a chunk
-- (holder, expires_at as a Julian day, extended by its heartbeat) and marks
-- it done once every case of it is stored; a chunk whose holder died
-- expires and is taken by another process, which redoes only its missing
-- cases.
CREATE TABLE run_lease (
    run_id INTEGER NOT NULL REFERENCES evaluation_run(id) ON DELETE CASCADE,
    chunk INTEGER NOT NULL,
    holder_host TEXT,
    holder_pid INTEGER,
    expires_at REAL,
    done INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, chunk)
);
