-- Issue 45: each completed run's analysis (what `report` renders from,
-- as JSON), kept so `report` reads it instead of scoring the run's
-- results again (a bootstrap of 1,000 resamples per run: 0.5 s on 110,000
-- results). `analysis_key` is a hash of everything the analysis depends
-- on (the run's state and results, the weights, floors and --blocked-as,
-- the helmbench that computed it); a report whose key differs computes
-- the analysis afresh and never reads this one.
CREATE TABLE kept_analysis (
    run_id INTEGER NOT NULL UNIQUE REFERENCES evaluation_run(id) ON DELETE CASCADE,
    analysis_key TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
