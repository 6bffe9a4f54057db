-- Charges of an amount nobody knows (issues 29 and 30): a reply cut at the
-- size limit, an attempt abandoned on a timeout whose generation could not
-- be looked up, a cost that is not a usable number. They were rows of
-- discarded_charge with cost 0 and only their reason said so; now each row
-- says how many of its attempts were such, and the run totals count them,
-- so `costs`, `runs` and a run's summary say "unknown", never $0.
ALTER TABLE discarded_charge ADD COLUMN unknown_attempts INTEGER NOT NULL DEFAULT 0;
UPDATE discarded_charge SET unknown_attempts = attempts
 WHERE cost_usd = 0 AND reason LIKE 'charged an unknown amount%';

ALTER TABLE run_total ADD COLUMN discarded_unknown INTEGER NOT NULL DEFAULT 0;
UPDATE run_total SET discarded_unknown = COALESCE(
    (SELECT SUM(d.unknown_attempts) FROM discarded_charge d
      WHERE d.run_id = run_total.run_id AND COALESCE(d.scenario_id, 0) = run_total.scenario_id), 0);

DROP TRIGGER discarded_charge_total;
CREATE TRIGGER discarded_charge_total AFTER INSERT ON discarded_charge
BEGIN
    INSERT INTO run_total (run_id, scenario_id, discarded_model_usd, discarded_judge_usd, discarded_unknown)
    VALUES (NEW.run_id, COALESCE(NEW.scenario_id, 0),
            CASE WHEN NEW.call = 'model' THEN NEW.cost_usd ELSE 0.0 END,
            CASE WHEN NEW.call = 'judge' THEN NEW.cost_usd ELSE 0.0 END,
            NEW.unknown_attempts)
    ON CONFLICT (run_id, scenario_id) DO UPDATE SET
        discarded_model_usd = discarded_model_usd + excluded.discarded_model_usd,
        discarded_judge_usd = discarded_judge_usd + excluded.discarded_judge_usd,
        discarded_unknown = discarded_unknown + excluded.discarded_unknown;
END;
