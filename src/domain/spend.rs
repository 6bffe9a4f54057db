//! What runs cost, as `costs`, `runs` and the report read it (SPEC §5):
//! the spend of a set of results from the provider-reported costs, per
//! scenario, what replies that were not kept cost, what each judge cost,
//! and what the reply cache spared (issue 30 #11).

use serde::{Deserialize, Serialize};

/// Spend of a set of results, from the provider-reported costs. Read from
/// the kept totals; `total_cost_usd`, `fee_usd`, `discarded_cost_usd`,
/// `unknown_charges` and `mean_cost_per_test_case` are derived by the
/// report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    pub test_cases: i64,
    /// Model calls.
    pub cost_usd: f64,
    /// Judge calls.
    pub judge_cost_usd: f64,
    /// Model + judge, all that was billed: OpenRouter's fees plus, with
    /// bring-your-own-key, what the providers billed the key.
    pub total_cost_usd: f64,
    /// OpenRouter's own figure (`usage.cost`) for model + judge: the whole
    /// price, or only its fee with bring-your-own-key.
    #[serde(default)]
    pub fee_usd: f64,
    /// With bring-your-own-key: what the providers billed the key for
    /// model + judge (`upstream_inference_cost` of replies marked
    /// `is_byok`); 0 otherwise.
    #[serde(default)]
    pub byok_upstream_usd: f64,
    /// The part of `cost_usd` + `judge_cost_usd` charged for replies that
    /// were retried or not kept (empty content, no choices, an error inside
    /// a 200 with a cost, a judge-error result judged again).
    #[serde(default)]
    pub discarded_cost_usd: f64,
    /// With bring-your-own-key: the upstream provider's cost; `None` when no
    /// reply reported one.
    pub upstream_cost_usd: Option<f64>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub judge_calls: i64,
    pub judge_prompt_tokens: i64,
    pub judge_completion_tokens: i64,
    /// Replies reused from an identical earlier request, at no cost.
    pub cached_replies: i64,
    pub cached_judgements: i64,
    /// Model replies and judge calls whose provider-reported cost was not a
    /// usable number: unknown, and left out of the sums above.
    pub unknown_cost_replies: i64,
    pub unknown_cost_judgements: i64,
    /// Attempts charged an amount nobody knows that left no result (cut at
    /// the size limit, abandoned on a timeout): not in the sums above.
    #[serde(default)]
    pub unknown_charges: i64,
    /// `total_cost_usd / test_cases`; `None` without test cases.
    pub mean_cost_per_test_case: Option<f64>,
}

/// What one scenario of one run spent, summed over its results (the
/// derived totals are left to the report).
#[derive(Debug, Clone)]
pub struct ScenarioSpendRow {
    pub run_id: i64,
    pub scenario: String,
    pub spend: Spend,
}

/// Discarded charges of one run, scenario (`""` when none) and call.
#[derive(Debug, Clone)]
pub struct DiscardedSpendRow {
    pub run_id: i64,
    pub scenario: String,
    /// `model` or `judge`.
    pub call: String,
    pub cost_usd: f64,
    /// Attempts charged an unknown amount.
    pub unknown_attempts: i64,
}

/// What one judge cost a run.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeSpendRow {
    pub run_id: i64,
    pub judge_model: String,
    pub calls: i64,
    pub cost_usd: f64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cached: i64,
}

/// Replies one run reused from the cache, and what they first cost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reuse {
    pub replies: i64,
    /// The provider-reported cost of the paid replies they copy (fee plus
    /// BYOK upstream, as budgets count); 0 for replies whose first answer
    /// had an unknown cost.
    pub original_cost_usd: f64,
}

/// A budget shared by the processes of a batch (the team store), as the
/// database holds it: spent, reserved by attempts in flight, maximum (USD).
pub type BudgetState = (f64, f64, f64);
