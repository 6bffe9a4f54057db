-- OpenRouter Batch API (issue 33): every batch a run submits, recorded
-- BEFORE it is posted (state `intent`), its id written on the 202
-- (`submitted`), its status and counts as polls see them, and what its
-- results became. A resume polls what is recorded and submits only test
-- cases no live batch holds, so a kill -9 at any instant never pays twice
-- for a test case a batch already accepted.
CREATE TABLE api_batch (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES evaluation_run(id) ON DELETE CASCADE,
    -- `model`: the run's test cases; `judge`: their judge requests.
    phase TEXT NOT NULL CHECK (phase IN ('model', 'judge')),
    -- The batch's one model (the run's model, or one judge).
    model TEXT NOT NULL,
    -- Which requests share the batch: one JSON schema per batch.
    batch_key TEXT NOT NULL,
    -- Submission round of the run (failures go out again, a bounded number of times).
    round INTEGER NOT NULL DEFAULT 0,
    -- intent -> submitted -> completed -> collected, or ended (failed,
    -- expired, cancelled: its items go out again), refused (the POST was
    -- answered with an error), abandoned (an intent whose 202 never came).
    state TEXT NOT NULL CHECK (state IN ('intent', 'submitted', 'completed', 'collected', 'ended', 'refused', 'abandoned')),
    remote_id TEXT UNIQUE,
    remote_status TEXT,
    total INTEGER NOT NULL DEFAULT 0,
    completed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    -- The completed batch's `usage.cost` (USD); NULL before.
    cost_usd REAL,
    -- What it was estimated to cost when submitted: counted by --max-cost
    -- while it is in flight.
    estimate_usd REAL NOT NULL DEFAULT 0,
    message TEXT,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX api_batch_run ON api_batch(run_id, state);

-- One request of a batch: which test case (and, for a judge, which
-- criterion and judge) it asks, and what became of it.
CREATE TABLE api_batch_item (
    batch_id INTEGER NOT NULL REFERENCES api_batch(id) ON DELETE CASCADE,
    custom_id TEXT NOT NULL,
    test_code TEXT NOT NULL,
    repeat_index INTEGER NOT NULL,
    criterion TEXT,
    judge_model TEXT,
    -- NULL while in flight; `answered`, `blocked`, `failed` once read.
    outcome TEXT,
    cost_usd REAL,
    -- 1 when the item carried no cost of its own and got its share of the
    -- batch's `usage.cost` in proportion to its tokens.
    cost_apportioned INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_id, custom_id)
);
CREATE INDEX api_batch_item_case ON api_batch_item(test_code, repeat_index);
