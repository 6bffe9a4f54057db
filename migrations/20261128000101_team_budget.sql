-- One budget for a batch run by several processes (the team store, issue
-- 34): `--max-cost` held in the database, keyed by the batch's token (its
-- runs' settings), so every process of the batch reserves before each
-- attempt and settles after its reply with one atomic UPDATE each. Written
-- only on PostgreSQL (a SQLite file's batch is one process, whose budget
-- stays in memory); created on both so the schemas stay the same.
CREATE TABLE team_budget (
    batch TEXT PRIMARY KEY,
    max_usd REAL NOT NULL,
    -- Charged so far (every process, replies and discarded attempts).
    spent_usd REAL NOT NULL DEFAULT 0,
    -- Expected costs of the attempts in flight; a killed process's stay
    -- counted until the batch is resumed (nobody is left in flight then).
    reserved_usd REAL NOT NULL DEFAULT 0
);
