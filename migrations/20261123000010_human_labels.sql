-- Human labels of judged criteria (issue 20): what raters said about the
-- judge's items, imported from labelling sheets (`helmbench review import`).
-- One row per (result, criterion, rater): importing the same rater's sheet
-- again replaces that rater's labels for its rows, never duplicates them.
-- `passed` is the verdict read with the rubric's pass values at import, so
-- `report --human` can rescore a run without the benchmark folder.
CREATE TABLE human_label (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES evaluation_run(id),
    result_id INTEGER NOT NULL REFERENCES result(id) ON DELETE CASCADE,
    criterion TEXT NOT NULL,
    rater TEXT NOT NULL,
    verdict TEXT NOT NULL,               -- JSON: a string or a list, as the judge's
    passed INTEGER NOT NULL,
    note TEXT,
    imported_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    UNIQUE (result_id, criterion, rater)
);
CREATE INDEX human_label_run ON human_label(run_id);

-- Several judges (issue 20): with a panel (`marking_model` a list, or
-- `--judges`), each criterion's row in `judgement` holds the combined
-- verdict (judge_model is the panel, comma-separated; its cost the sum of
-- the votes'), and each judge's own judgement is a vote here. Votes are
-- cached per judge (request_hash) like judgements, and leave with their
-- result.
CREATE TABLE judge_vote (
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
    cost_unknown INTEGER NOT NULL DEFAULT 0,
    generation_id TEXT,
    cached INTEGER NOT NULL DEFAULT 0,
    request_hash TEXT,
    response TEXT,
    endpoint TEXT,
    UNIQUE (result_id, criterion, judge_model)
);
CREATE INDEX judge_vote_request_hash ON judge_vote(request_hash);
