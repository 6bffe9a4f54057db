//! A run as every reader sees it: its model, status, times and the totals
//! of its results, and how its blocked test cases are scored.

use serde::Serialize;

use super::{BlockedAs, RunStatus};

/// A run as `runs` and reports show it, with totals from its results: the
/// read model of `evaluation_run` (the store decodes it by column name,
/// and shows a `running` run whose process is gone as `interrupted`).
#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    pub run_id: i64,
    pub model: String,
    pub kind: String,
    pub status: RunStatus,
    pub started_at: String,
    pub completed_at: Option<String>,
    pub planned_test_cases: i64,
    pub test_cases: i64,
    pub passed: i64,
    pub evaluations: i64,
    pub passed_evaluations: i64,
    pub format_failures: i64,
    pub judge_errors: i64,
    pub provider_errors: i64,
    /// Test cases the provider blocked (moderation, guardrail, content
    /// policy) and those the model refused through an error.
    pub blocked: i64,
    pub refused: i64,
    pub cached_replies: i64,
    /// Model calls in all: OpenRouter's fee plus, with bring-your-own-key,
    /// what the providers billed the key (as budgets count them).
    pub cost_usd: f64,
    pub judge_cost_usd: f64,
    /// The bring-your-own-key part of `cost_usd` + `judge_cost_usd`.
    pub byok_cost_usd: f64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub settings: String,
    pub benchmark_hash: String,
    pub message: Option<String>,
    /// The run's budget (`--max-cost`), if any.
    pub max_cost_usd: Option<f64>,
    /// The part of `cost_usd` + `judge_cost_usd` paid for replies that were
    /// retried or not kept (see `discarded_charge`).
    pub discarded_cost_usd: f64,
    /// Calls whose cost nobody knows (replies and judge calls without a
    /// usable cost, attempts charged an unknown amount): `cost_usd` and
    /// `judge_cost_usd` leave them out, so they are a floor, not a total.
    pub unknown_cost_calls: i64,
}

impl RunRecord {
    /// How the run's blocked and refused test cases enter its score, as
    /// recorded with it (`exclude` for runs recorded before the choice).
    pub fn blocked_as(&self) -> BlockedAs {
        #[derive(serde::Deserialize)]
        struct Recorded {
            #[serde(default)]
            blocked_as: BlockedAs,
        }
        serde_json::from_str::<Recorded>(&self.settings)
            .map(|r| r.blocked_as)
            .unwrap_or_default()
    }
}

/// A process that works or worked on a run (the team store, issue 34): the
/// first one and every `--join`er, as `runs` shows them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunHost {
    pub host: String,
    pub pid: i64,
    /// Seconds since its last heartbeat.
    pub heartbeat_age_s: f64,
    /// Test cases it took, and of those, stored.
    pub sent: i64,
    pub stored: i64,
    /// Still working on the run: it has not left, and it beat recently
    /// (on this host: its process is alive).
    pub live: bool,
}
