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
}

/// One request of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BatchItem {
    pub custom_id: String,
    pub test_code: String,
    pub repeat_index: i64,
    pub criterion: Option<String>,
    pub judge_model: Option<String>,
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
