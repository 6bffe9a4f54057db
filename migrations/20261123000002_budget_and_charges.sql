-- What a run may spend and what it paid for but did not keep (issue 17).
--
-- The run's budget (--max-cost, USD; NULL: no cap). A resume continues the
-- same budget: what the run already spent counts against it.
ALTER TABLE evaluation_run ADD COLUMN max_cost_usd REAL;
-- Total of the run's discarded charges (below), kept with the run's totals.
ALTER TABLE evaluation_run ADD COLUMN discarded_cost_usd REAL NOT NULL DEFAULT 0;
-- The owner's process start time (clock ticks after boot, /proc/PID/stat),
-- so a pid reused by another process after a crash is not taken for the owner.
ALTER TABLE evaluation_run ADD COLUMN owner_started INTEGER;

-- Replies the provider charged for (they carry `usage.cost`) but that were
-- not kept: retried (empty content, no choices, an error inside a 200),
-- refused, cut off by an interruption, or a judged result replaced by a
-- resume. One row per request that had such a charge; never deleted, so
-- `costs` and the run's spend include them.
CREATE TABLE discarded_charge (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES evaluation_run(id),
    scenario_id INTEGER REFERENCES scenario(id),
    test_code TEXT NOT NULL,
    repeat_index INTEGER NOT NULL DEFAULT 0,
    call TEXT NOT NULL CHECK (call IN ('model', 'judge')),
    attempts INTEGER NOT NULL DEFAULT 1,
    cost_usd REAL NOT NULL,
    reason TEXT,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX discarded_charge_run ON discarded_charge(run_id);
