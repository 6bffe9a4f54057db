-- Simulated users (issue 42): every call of the user-simulator model of a
-- persona conversation, stored as it arrives (before the tested model is
-- asked), so a resume never pays a stored call twice and a rerun finds
-- each simulated message by request hash (the persona, the history and
-- the repeat). `stopped`: the simulator ended the conversation there.
CREATE TABLE simulated_turn (
    run_id INTEGER NOT NULL REFERENCES evaluation_run(id),
    test_code TEXT NOT NULL,
    repeat_index INTEGER NOT NULL DEFAULT 0,
    turn_index INTEGER NOT NULL,
    user_model TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    endpoint TEXT,
    reply TEXT NOT NULL,
    stopped INTEGER NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    cached INTEGER NOT NULL DEFAULT 0,
    served_model TEXT,
    generation_id TEXT,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (run_id, test_code, repeat_index, turn_index)
);
CREATE INDEX simulated_turn_request_hash ON simulated_turn(request_hash);
