-- Bring-your-own-key: `usage.cost` is only OpenRouter's fee; what the
-- provider billed the user's own key is `usage.cost_details.
-- upstream_inference_cost`. Kept apart (0 without BYOK) so costs can show
-- both and budgets count their sum.
ALTER TABLE result ADD COLUMN byok_cost_usd REAL NOT NULL DEFAULT 0;
ALTER TABLE judgement ADD COLUMN byok_cost_usd REAL NOT NULL DEFAULT 0;
