-- PostgreSQL twin of ../20261126000001_unknown_charges.sql.
ALTER TABLE discarded_charge ADD COLUMN unknown_attempts BIGINT NOT NULL DEFAULT 0;
UPDATE discarded_charge SET unknown_attempts = attempts
 WHERE cost_usd = 0 AND reason LIKE 'charged an unknown amount%';

ALTER TABLE run_total ADD COLUMN discarded_unknown BIGINT NOT NULL DEFAULT 0;
UPDATE run_total SET discarded_unknown = COALESCE(
    (SELECT SUM(d.unknown_attempts) FROM discarded_charge d
      WHERE d.run_id = run_total.run_id AND COALESCE(d.scenario_id, 0) = run_total.scenario_id), 0);

DROP TRIGGER discarded_charge_total ON discarded_charge;
CREATE OR REPLACE FUNCTION discarded_charge_total() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_total (run_id, scenario_id, discarded_model_usd, discarded_judge_usd, discarded_unknown)
    VALUES (NEW.run_id, COALESCE(NEW.scenario_id, 0),
            CASE WHEN NEW.call = 'model' THEN NEW.cost_usd ELSE 0.0 END,
            CASE WHEN NEW.call = 'judge' THEN NEW.cost_usd ELSE 0.0 END,
            NEW.unknown_attempts)
    ON CONFLICT (run_id, scenario_id) DO UPDATE SET
        discarded_model_usd = run_total.discarded_model_usd + excluded.discarded_model_usd,
        discarded_judge_usd = run_total.discarded_judge_usd + excluded.discarded_judge_usd,
        discarded_unknown = run_total.discarded_unknown + excluded.discarded_unknown;
    RETURN NULL;
END;
$$;
CREATE TRIGGER discarded_charge_total AFTER INSERT ON discarded_charge
    FOR EACH ROW EXECUTE FUNCTION discarded_charge_total();
