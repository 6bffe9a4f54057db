-- PostgreSQL twin of ../20261123000020_served_model_and_reasoning.sql.
ALTER TABLE result ADD COLUMN served_model TEXT;
ALTER TABLE result ADD COLUMN provider TEXT;
ALTER TABLE judgement ADD COLUMN served_model TEXT;
ALTER TABLE judgement ADD COLUMN provider TEXT;
ALTER TABLE result ADD COLUMN reasoning_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE result ADD COLUMN cached_prompt_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE judgement ADD COLUMN reasoning_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE judgement ADD COLUMN cached_prompt_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE result ADD COLUMN error_type TEXT;
ALTER TABLE result ADD COLUMN provider_code TEXT;
