-- What actually answered, and what the answer's tokens were (issue 22).
--
-- OpenRouter may route a request to another provider or, with fallbacks,
-- another model: each reply names the model (`model`) and the provider
-- (`provider`) that served it. Rows written before this migration have
-- neither (NULL: unknown, never counted as a mismatch).
ALTER TABLE result ADD COLUMN served_model TEXT;
ALTER TABLE result ADD COLUMN provider TEXT;
ALTER TABLE judgement ADD COLUMN served_model TEXT;
ALTER TABLE judgement ADD COLUMN provider TEXT;
-- usage.completion_tokens_details.reasoning_tokens (part of
-- completion_tokens) and usage.prompt_tokens_details.cached_tokens (part
-- of prompt_tokens); 0 when the provider did not say.
ALTER TABLE result ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE result ADD COLUMN cached_prompt_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE judgement ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE judgement ADD COLUMN cached_prompt_tokens INTEGER NOT NULL DEFAULT 0;
-- With a provider error: error.metadata.error_type and provider_code, so
-- `runs` and `report` count the errors by type.
ALTER TABLE result ADD COLUMN error_type TEXT;
ALTER TABLE result ADD COLUMN provider_code TEXT;
