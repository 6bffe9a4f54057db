-- PostgreSQL twin of ../20261128000101_team_budget.sql.
CREATE TABLE team_budget (
    batch TEXT PRIMARY KEY,
    max_usd DOUBLE PRECISION NOT NULL,
    spent_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    reserved_usd DOUBLE PRECISION NOT NULL DEFAULT 0
);
