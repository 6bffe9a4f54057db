-- PostgreSQL twin of ../20261123000003_endpoint_and_unknown_cost.sql.
ALTER TABLE result ADD COLUMN endpoint TEXT;
ALTER TABLE judgement ADD COLUMN endpoint TEXT;
ALTER TABLE result ADD COLUMN cost_unknown BIGINT NOT NULL DEFAULT 0;
ALTER TABLE judgement ADD COLUMN cost_unknown BIGINT NOT NULL DEFAULT 0;
