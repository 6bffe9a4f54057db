-- PostgreSQL twin of ../20261125000003_run_totals.sql (WITHOUT ROWID has
-- no meaning here: every table is a heap with its primary key's index).

CREATE TABLE run_total (
    run_id BIGINT NOT NULL REFERENCES evaluation_run(id) ON DELETE CASCADE,
    scenario_id BIGINT NOT NULL,
    test_cases BIGINT NOT NULL DEFAULT 0,
    passed BIGINT NOT NULL DEFAULT 0,
    evaluations BIGINT NOT NULL DEFAULT 0,
    passed_evaluations BIGINT NOT NULL DEFAULT 0,
    format_failures BIGINT NOT NULL DEFAULT 0,
    judge_errors BIGINT NOT NULL DEFAULT 0,
    provider_errors BIGINT NOT NULL DEFAULT 0,
    blocked BIGINT NOT NULL DEFAULT 0,
    refused BIGINT NOT NULL DEFAULT 0,
    cached_replies BIGINT NOT NULL DEFAULT 0,
    reused_original_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    byok_cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    upstream_cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    upstream_replies BIGINT NOT NULL DEFAULT 0,
    cost_unknown BIGINT NOT NULL DEFAULT 0,
    prompt_tokens BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0,
    reasoning_tokens BIGINT NOT NULL DEFAULT 0,
    cached_prompt_tokens BIGINT NOT NULL DEFAULT 0,
    judge_cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    judge_byok_cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    judge_calls BIGINT NOT NULL DEFAULT 0,
    judge_cached BIGINT NOT NULL DEFAULT 0,
    judge_cost_unknown BIGINT NOT NULL DEFAULT 0,
    judge_prompt_tokens BIGINT NOT NULL DEFAULT 0,
    judge_completion_tokens BIGINT NOT NULL DEFAULT 0,
    judge_reasoning_tokens BIGINT NOT NULL DEFAULT 0,
    judge_cached_prompt_tokens BIGINT NOT NULL DEFAULT 0,
    discarded_model_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    discarded_judge_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, scenario_id)
);

CREATE TABLE run_served_total (
    run_id BIGINT NOT NULL REFERENCES evaluation_run(id) ON DELETE CASCADE,
    call TEXT NOT NULL,
    requested TEXT NOT NULL,
    served_model TEXT NOT NULL,
    provider TEXT NOT NULL,
    replies BIGINT NOT NULL,
    PRIMARY KEY (run_id, call, requested, served_model, provider)
);

CREATE TABLE run_error_total (
    run_id BIGINT NOT NULL REFERENCES evaluation_run(id) ON DELETE CASCADE,
    error_type TEXT NOT NULL,
    results BIGINT NOT NULL,
    PRIMARY KEY (run_id, error_type)
);

-- Charges are only ever added: a trigger keeps their totals whichever
-- statement writes them (SQLite's trigger body, as a plpgsql function).
CREATE FUNCTION discarded_charge_total() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_total (run_id, scenario_id, discarded_model_usd, discarded_judge_usd)
    VALUES (NEW.run_id, COALESCE(NEW.scenario_id, 0),
            CASE WHEN NEW.call = 'model' THEN NEW.cost_usd ELSE 0.0 END,
            CASE WHEN NEW.call = 'judge' THEN NEW.cost_usd ELSE 0.0 END)
    ON CONFLICT (run_id, scenario_id) DO UPDATE SET
        discarded_model_usd = run_total.discarded_model_usd + excluded.discarded_model_usd,
        discarded_judge_usd = run_total.discarded_judge_usd + excluded.discarded_judge_usd;
    RETURN NULL;
END;
$$;
CREATE TRIGGER discarded_charge_total AFTER INSERT ON discarded_charge
    FOR EACH ROW EXECUTE FUNCTION discarded_charge_total();

CREATE TABLE totals_rebuild (needed BIGINT NOT NULL);
INSERT INTO totals_rebuild VALUES (1);

CREATE TABLE run_judge_total (
    run_id BIGINT NOT NULL REFERENCES evaluation_run(id) ON DELETE CASCADE,
    judge_model TEXT NOT NULL,
    calls BIGINT NOT NULL,
    cost_usd DOUBLE PRECISION NOT NULL,
    prompt_tokens BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    cached BIGINT NOT NULL,
    PRIMARY KEY (run_id, judge_model)
);
