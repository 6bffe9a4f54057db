-- The endpoint that answered each request (the request URL; a base URL with
-- credentials is refused, so none is stored). The reply cache reuses a reply
-- only for the same endpoint, so replies from a local test server are never
-- reused against the real provider. Rows written before this migration have
-- none and are never reused; they still count and report as before.
ALTER TABLE result ADD COLUMN endpoint TEXT;
ALTER TABLE judgement ADD COLUMN endpoint TEXT;
-- 1 when the provider reported a cost that is not a number from 0 to 1000
-- USD ("NaN", inf, negative, absurd, text): the call's cost is unknown,
-- cost_usd holds 0, and `costs` counts such replies apart.
ALTER TABLE result ADD COLUMN cost_unknown INTEGER NOT NULL DEFAULT 0;
ALTER TABLE judgement ADD COLUMN cost_unknown INTEGER NOT NULL DEFAULT 0;
