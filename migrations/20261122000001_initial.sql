-- The seed's entities (benchmark, pillar, behaviour, scenario, condition, user
-- context, perturbation, their links, LLM, evaluation run, result), with the
-- fixes of SPEC §5: scenario-scoped components, content-hashed versions that
-- never rewrite what old results point to, deduplicated prompt texts, and
-- per-criterion judgements.

CREATE TABLE benchmark (
    id INTEGER PRIMARY KEY,
    content_hash TEXT NOT NULL UNIQUE,
    root TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE TABLE pillar (
    id INTEGER PRIMARY KEY,
    code TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT ''
);

CREATE TABLE behaviour (
    id INTEGER PRIMARY KEY,
    pillar_id INTEGER NOT NULL REFERENCES pillar(id),
    code TEXT NOT NULL UNIQUE,          -- P1-B1
    name TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT ''
);

-- One row per version of a scenario: editing a file adds a row.
CREATE TABLE scenario (
    id INTEGER PRIMARY KEY,
    behaviour_id INTEGER NOT NULL REFERENCES behaviour(id),
    code TEXT NOT NULL,                 -- P1-B1-S1
    content_hash TEXT NOT NULL,
    evaluation TEXT NOT NULL,           -- JSON of the evaluation config
    prompt TEXT NOT NULL,               -- converted scenario prompt
    response_format TEXT,               -- JSON, NULL for free-text replies
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    UNIQUE (code, content_hash)
);

-- Conditions, user contexts and perturbations are scenario-scoped (P1-B1-S1-C1).
CREATE TABLE condition (
    id INTEGER PRIMARY KEY,
    full_code TEXT NOT NULL,
    code TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    difficulty REAL NOT NULL DEFAULT 0,
    severity REAL NOT NULL DEFAULT 0,
    metadata TEXT NOT NULL DEFAULT '{}',
    prompt TEXT NOT NULL,
    UNIQUE (full_code, content_hash)
);

CREATE TABLE user_context (
    id INTEGER PRIMARY KEY,
    full_code TEXT NOT NULL,
    code TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    severity REAL NOT NULL DEFAULT 0,
    metadata TEXT NOT NULL DEFAULT '{}',
    prompt TEXT NOT NULL,
    UNIQUE (full_code, content_hash)
);

CREATE TABLE perturbation (
    id INTEGER PRIMARY KEY,
    scenario_id INTEGER NOT NULL REFERENCES scenario(id),
    full_code TEXT NOT NULL,
    code TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    severity REAL NOT NULL DEFAULT 0,
    metadata TEXT NOT NULL DEFAULT '{}',
    prompt TEXT NOT NULL,
    UNIQUE (full_code, content_hash)
);

CREATE TABLE scenario_condition (
    scenario_id INTEGER NOT NULL REFERENCES scenario(id),
    condition_id INTEGER NOT NULL REFERENCES condition(id),
    PRIMARY KEY (scenario_id, condition_id)
);

CREATE TABLE scenario_user_context (
    scenario_id INTEGER NOT NULL REFERENCES scenario(id),
    user_context_id INTEGER NOT NULL REFERENCES user_context(id),
    PRIMARY KEY (scenario_id, user_context_id)
);

CREATE TABLE llm (
    id INTEGER PRIMARY KEY,
    model_id TEXT NOT NULL UNIQUE
);

CREATE TABLE evaluation_run (
    id INTEGER PRIMARY KEY,
    benchmark_id INTEGER NOT NULL REFERENCES benchmark(id),
    llm_id INTEGER NOT NULL REFERENCES llm(id),
    kind TEXT NOT NULL DEFAULT 'batch',         -- batch | single
    status TEXT NOT NULL CHECK (status IN ('running', 'completed', 'interrupted', 'failed')),
    started_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    completed_at TEXT,
    -- The exact settings used: models.yml entry, selectors, concurrency,
    -- repeats, tool version, judge model. Resume replays these.
    settings TEXT NOT NULL,
    tool_version TEXT NOT NULL,
    -- Planned and finished counts; test cases and evaluations apart.
    total_test_cases INTEGER NOT NULL DEFAULT 0,
    completed_test_cases INTEGER NOT NULL DEFAULT 0,
    passed_test_cases INTEGER NOT NULL DEFAULT 0,
    total_evaluations INTEGER NOT NULL DEFAULT 0,
    passed_evaluations INTEGER NOT NULL DEFAULT 0,
    format_failures INTEGER NOT NULL DEFAULT 0,
    judge_errors INTEGER NOT NULL DEFAULT 0,
    provider_errors INTEGER NOT NULL DEFAULT 0,
    cached_replies INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    judge_cost_usd REAL NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    message TEXT
);

-- Composed prompts, stored once per distinct text.
CREATE TABLE prompt_text (
    hash TEXT PRIMARY KEY,
    text TEXT NOT NULL
);

CREATE TABLE result (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES evaluation_run(id),
    test_code TEXT NOT NULL,
    repeat_index INTEGER NOT NULL DEFAULT 0,
    scenario_id INTEGER NOT NULL REFERENCES scenario(id),
    condition_id INTEGER NOT NULL REFERENCES condition(id),
    user_context_id INTEGER REFERENCES user_context(id),
    perturbation_id INTEGER NOT NULL REFERENCES perturbation(id),
    prompt_hash TEXT NOT NULL REFERENCES prompt_text(hash),
    request_hash TEXT NOT NULL,          -- model + prompt + schema + parameters (the cache key)
    base_severity REAL NOT NULL,
    difficulty REAL NOT NULL,
    response TEXT,                       -- the raw reply
    parsed TEXT,                         -- JSON parsed from the reply
    matched INTEGER,                     -- the evaluation check held (flag raised)
    passed INTEGER NOT NULL,             -- the test case verdict
    error_kind TEXT,                     -- format | provider | judge
    error TEXT,
    evaluation_details TEXT,             -- JSON
    latency_ms INTEGER,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    upstream_cost_usd REAL,
    generation_id TEXT,
    finish_reason TEXT,
    attempts INTEGER NOT NULL DEFAULT 1,
    cached INTEGER NOT NULL DEFAULT 0,
    quality TEXT,                        -- JSON of the seed-004 scores
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    UNIQUE (run_id, test_code, repeat_index)
);
CREATE INDEX result_request_hash ON result(request_hash);

-- One row per judged criterion (sqe: one, mcsqe: one per CR file).
CREATE TABLE judgement (
    id INTEGER PRIMARY KEY,
    result_id INTEGER NOT NULL REFERENCES result(id) ON DELETE CASCADE,
    criterion TEXT NOT NULL,
    judge_model TEXT NOT NULL,
    verdict TEXT,                        -- JSON: a string or a list
    justification TEXT,
    passed INTEGER,
    error TEXT,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    generation_id TEXT,
    cached INTEGER NOT NULL DEFAULT 0,
    request_hash TEXT,                   -- the judge request (the cache key)
    response TEXT,                       -- the judge's raw answer
    UNIQUE (result_id, criterion)
);
CREATE INDEX judgement_request_hash ON judgement(request_hash);
