-- Conversations (issue 42): every reply of a conversation, stored as it
-- arrives, so a killed conversation resumes from its last stored turn and
-- a rerun finds each turn in the cache (its request hash covers the whole
-- history). The conversation's verdict stays in `result`.
CREATE TABLE turn (
    run_id INTEGER NOT NULL REFERENCES evaluation_run(id),
    test_code TEXT NOT NULL,
    repeat_index INTEGER NOT NULL DEFAULT 0,
    turn_index INTEGER NOT NULL,
    turn_code TEXT,
    pressure TEXT,
    user_message TEXT NOT NULL,
    prefilled INTEGER NOT NULL DEFAULT 0,
    judged INTEGER NOT NULL DEFAULT 1,
    request_hash TEXT,
    endpoint TEXT,
    response TEXT,
    finish_reason TEXT,
    generation_id TEXT,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    byok_cost_usd REAL NOT NULL DEFAULT 0,
    latency_ms INTEGER,
    attempts INTEGER NOT NULL DEFAULT 0,
    cached INTEGER NOT NULL DEFAULT 0,
    served_model TEXT,
    provider TEXT,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    cached_prompt_tokens INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (run_id, test_code, repeat_index, turn_index)
);
CREATE INDEX turn_request_hash ON turn(request_hash);
