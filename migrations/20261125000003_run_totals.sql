-- Per-run totals kept as results are written (issue 31), so `runs`,
-- `costs` and the report's headers answer from a few rows per run at any
-- size instead of reading every result. Maintained by the store in the
-- same transaction as the results they count (src/store/totals.rs); the
-- rows are filled for an existing database on its first open after this
-- migration (the `totals_rebuild` marker), by the same code that keeps
-- them, so the two can never disagree on what a total means.

-- One row per run and scenario (scenario 0: charges with no scenario).
CREATE TABLE run_total (
    run_id INTEGER NOT NULL REFERENCES evaluation_run(id) ON DELETE CASCADE,
    scenario_id INTEGER NOT NULL,
    test_cases INTEGER NOT NULL DEFAULT 0,
    passed INTEGER NOT NULL DEFAULT 0,
    evaluations INTEGER NOT NULL DEFAULT 0,
    passed_evaluations INTEGER NOT NULL DEFAULT 0,
    format_failures INTEGER NOT NULL DEFAULT 0,
    judge_errors INTEGER NOT NULL DEFAULT 0,
    provider_errors INTEGER NOT NULL DEFAULT 0,
    blocked INTEGER NOT NULL DEFAULT 0,
    refused INTEGER NOT NULL DEFAULT 0,
    cached_replies INTEGER NOT NULL DEFAULT 0,
    -- What the reused (cached) replies cost when first paid for.
    reused_original_usd REAL NOT NULL DEFAULT 0,
    -- Model calls: OpenRouter's figure, the BYOK upstream part, and the
    -- upstream cost as replies reported it (with how many did).
    cost_usd REAL NOT NULL DEFAULT 0,
    byok_cost_usd REAL NOT NULL DEFAULT 0,
    upstream_cost_usd REAL NOT NULL DEFAULT 0,
    upstream_replies INTEGER NOT NULL DEFAULT 0,
    cost_unknown INTEGER NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    cached_prompt_tokens INTEGER NOT NULL DEFAULT 0,
    -- Judge calls (a panel's criterion: one call per judge).
    judge_cost_usd REAL NOT NULL DEFAULT 0,
    judge_byok_cost_usd REAL NOT NULL DEFAULT 0,
    judge_calls INTEGER NOT NULL DEFAULT 0,
    judge_cached INTEGER NOT NULL DEFAULT 0,
    judge_cost_unknown INTEGER NOT NULL DEFAULT 0,
    judge_prompt_tokens INTEGER NOT NULL DEFAULT 0,
    judge_completion_tokens INTEGER NOT NULL DEFAULT 0,
    judge_reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    judge_cached_prompt_tokens INTEGER NOT NULL DEFAULT 0,
    -- Charges for replies not kept (discarded_charge), by call.
    discarded_model_usd REAL NOT NULL DEFAULT 0,
    discarded_judge_usd REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, scenario_id)
) WITHOUT ROWID;

-- Replies by what served them ('' where the reply did not say).
CREATE TABLE run_served_total (
    run_id INTEGER NOT NULL REFERENCES evaluation_run(id) ON DELETE CASCADE,
    call TEXT NOT NULL,
    requested TEXT NOT NULL,
    served_model TEXT NOT NULL,
    provider TEXT NOT NULL,
    replies INTEGER NOT NULL,
    PRIMARY KEY (run_id, call, requested, served_model, provider)
) WITHOUT ROWID;

-- Provider errors by `error_type` ('' where none was given).
CREATE TABLE run_error_total (
    run_id INTEGER NOT NULL REFERENCES evaluation_run(id) ON DELETE CASCADE,
    error_type TEXT NOT NULL,
    results INTEGER NOT NULL,
    PRIMARY KEY (run_id, error_type)
) WITHOUT ROWID;

-- Charges are only ever added: a trigger keeps their totals whichever
-- statement writes them.
CREATE TRIGGER discarded_charge_total AFTER INSERT ON discarded_charge
BEGIN
    INSERT INTO run_total (run_id, scenario_id, discarded_model_usd, discarded_judge_usd)
    VALUES (NEW.run_id, COALESCE(NEW.scenario_id, 0),
            CASE WHEN NEW.call = 'model' THEN NEW.cost_usd ELSE 0.0 END,
            CASE WHEN NEW.call = 'judge' THEN NEW.cost_usd ELSE 0.0 END)
    ON CONFLICT (run_id, scenario_id) DO UPDATE SET
        discarded_model_usd = discarded_model_usd + excluded.discarded_model_usd,
        discarded_judge_usd = discarded_judge_usd + excluded.discarded_judge_usd;
END;

CREATE TABLE totals_rebuild (needed INTEGER NOT NULL);
INSERT INTO totals_rebuild VALUES (1);

-- Judge calls by judge model: a single judge's judgements and each panel
-- judge's votes (a panel's combined judgement is not counted twice).
CREATE TABLE run_judge_total (
    run_id INTEGER NOT NULL REFERENCES evaluation_run(id) ON DELETE CASCADE,
    judge_model TEXT NOT NULL,
    calls INTEGER NOT NULL,
    cost_usd REAL NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cached INTEGER NOT NULL,
    PRIMARY KEY (run_id, judge_model)
) WITHOUT ROWID;
