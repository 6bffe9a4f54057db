-- A blocked test case (moderation, guardrail, content policy) or a refusal
-- reported as an error keeps what the provider said: kind, message,
-- reasons, flagged input, provider and model slug, as one JSON object.
-- error_kind takes two new words: 'blocked' and 'refused'.
ALTER TABLE result ADD COLUMN block TEXT;
