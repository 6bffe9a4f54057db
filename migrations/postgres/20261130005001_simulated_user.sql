-- Simulated users (issue 42): see the SQLite migration of the same name.
CREATE TABLE simulated_turn (
    run_id BIGINT NOT NULL REFERENCES evaluation_run(id),
    test_code TEXT COLLATE "C" NOT NULL,
    repeat_index BIGINT NOT NULL DEFAULT 0,
    turn_index BIGINT NOT NULL,
    user_model TEXT COLLATE "C" NOT NULL,
    request_hash TEXT COLLATE "C" NOT NULL,
    endpoint TEXT COLLATE "C",
    reply TEXT COLLATE "C" NOT NULL,
    stopped BIGINT NOT NULL DEFAULT 0,
    prompt_tokens BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0,
    cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    cached BIGINT NOT NULL DEFAULT 0,
    served_model TEXT COLLATE "C",
    generation_id TEXT COLLATE "C",
    created_at TEXT COLLATE "C" NOT NULL DEFAULT (to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')),
    PRIMARY KEY (run_id, test_code, repeat_index, turn_index)
);
CREATE INDEX simulated_turn_request_hash ON simulated_turn(request_hash);
