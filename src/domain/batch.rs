//! The OpenRouter Batch API's bookkeeping as the runner and `runs` see it
//! (issue 33): a batch as recorded, one request of it, and what one item
//! became once its results were read.

use serde::Serialize;

/// A batch as recorded.
#[derive(Debug, Clone, Serialize)]
pub struct BatchRow {
    pub id: i64,
    pub run_id: i64,
    /// `model` or `judge`.
    pub phase: String,
    pub model: String,
    pub batch_key: String,
    pub round: i64,
    /// intent, submitted, completed, collected, ended, refused, abandoned.
    pub state: String,
    /// OpenRouter's batch id, once the 202 arrived.
    pub remote_id: Option<String>,
    /// OpenRouter's status at the last poll.
    pub remote_status: Option<String>,
    pub total: i64,
    pub completed: i64,
    pub failed: i64,
    pub cost_usd: Option<f64>,
    pub estimate_usd: f64,
    pub message: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

impl BatchRow {
    /// Submitted and not yet ended at OpenRouter, or completed with results
    /// not all read: its items must not be submitted again.
    pub fn is_live(&self) -> bool {
        matches!(self.state.as_str(), "submitted" | "completed")
    }

    /// Its create's outcome is unknown (a 429 or 5xx, a timeout or an
    /// unreadable answer after the body was sent, or a process that stopped
    /// before the answer was recorded): OpenRouter may have accepted it, and
    /// with no list endpoint nor idempotency key nobody can tell. Stored as
    /// `abandoned` (the state's name since issue 33); its items are not
    /// sent again unless the user asks (`--resubmit-uncertain`).
    pub fn is_uncertain(&self) -> bool {
        matches!(self.state.as_str(), "intent" | "abandoned")
    }
}

/// What a run's batches of uncertain submission hold and may cost, and the
/// choice the user has; `None` when there are none. One wording for `runs`,
/// the progress line and the end of the run.
pub fn uncertain_batches(run_id: i64, rows: &[BatchRow]) -> Option<String> {
    let uncertain: Vec<&BatchRow> = rows.iter().filter(|b| b.is_uncertain()).collect();
    if uncertain.is_empty() {
        return None;
    }
    Some(uncertain_line(
        run_id,
        uncertain.len(),
        uncertain.iter().map(|b| b.total).sum(),
        uncertain.iter().map(|b| b.estimate_usd).sum(),
    ))
}

/// [`uncertain_batches`]' line for `batches` holding `requests`, estimated
/// at `usd`.
pub fn uncertain_line(run_id: i64, batches: usize, requests: i64, usd: f64) -> String {
    format!(
        "{requests} request{} in {batches} batch{} of uncertain submission (OpenRouter may have accepted {}: up to ${usd:.4} if so) not sent again; `helmbench run-batch --resume {run_id} --resubmit-uncertain` sends them again (paid twice if the first was accepted)",
        if requests == 1 { "" } else { "s" },
        if batches == 1 { "" } else { "es" },
        if batches == 1 { "it" } else { "them" },
    )
}

/// One request of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BatchItem {
    pub custom_id: String,
    pub test_code: String,
    pub repeat_index: i64,
    pub criterion: Option<String>,
    pub judge_model: Option<String>,
    /// What it became once read (`answered`, `blocked`, `failed`); None in
    /// flight. A read again skips those that have one.
    pub outcome: Option<String>,
}

/// What one read item became, and what it cost.
#[derive(Debug, Clone)]
pub struct ItemOutcome {
    pub custom_id: String,
    /// `answered`, `blocked` or `failed`.
    pub outcome: &'static str,
    pub cost_usd: Option<f64>,
    pub apportioned: bool,
}
