//! What `helmbench view` shows (issue 32): a cell of the results matrix
//! and its status, a matching result as a download lists it, and the test
//! case page: one result with everything stored about it, its judgements
//! and votes, its human labels, and the same test case in other runs.

use serde::Serialize;

/// What a cell of the matrix shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CellStatus {
    Pass,
    /// The verdict failed (a wrong answer, or a reply outside the schema).
    Fail,
    /// No verdict: the provider or the judge failed.
    Error,
    /// The provider blocked the request or the model refused through an error.
    Blocked,
}

impl CellStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CellStatus::Pass => "pass",
            CellStatus::Fail => "fail",
            CellStatus::Error => "error",
            CellStatus::Blocked => "blocked",
        }
    }

    /// A result's status from its verdict and error kind.
    pub fn of(passed: bool, error_kind: Option<&str>) -> CellStatus {
        match error_kind {
            Some("blocked" | "refused") => CellStatus::Blocked,
            Some("provider" | "judge") => CellStatus::Error,
            _ if passed => CellStatus::Pass,
            _ => CellStatus::Fail,
        }
    }
}

/// One cell: one result of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cell {
    pub result_id: i64,
    pub run_id: i64,
    pub test_code: String,
    pub repeat_index: i64,
    pub status: CellStatus,
    pub base_severity: f64,
    /// Human labels of this result (any rater, any criterion).
    pub labels: i64,
    /// The reply as stored, and its parsed fields (JSON): the matrix shows
    /// the start of each reply in its cell.
    pub response: Option<String>,
    pub parsed: Option<String>,
}

/// One matching result, as a download lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DownloadRow {
    pub result_id: i64,
    pub run_id: i64,
    pub model: String,
    pub test_code: String,
    pub repeat_index: i64,
    pub scenario: String,
    pub behaviour: String,
    pub status: CellStatus,
    pub base_severity: f64,
    pub difficulty: f64,
    pub error_kind: Option<String>,
    pub error: Option<String>,
    pub response: Option<String>,
    /// Every criterion's judge verdict and justification, `criterion: verdict: why`, one a line.
    pub judgements: String,
    pub human_labels: i64,
}

/// One result with everything the test case page shows.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseDetail {
    pub result_id: i64,
    pub run_id: i64,
    pub model: String,
    pub test_code: String,
    pub repeat_index: i64,
    pub pillar: String,
    pub behaviour: String,
    pub scenario: String,
    pub condition: String,
    pub user_context: Option<String>,
    pub perturbation: String,
    pub base_severity: f64,
    pub difficulty: f64,
    /// The evaluation config (JSON): which check, what it expects.
    pub evaluation: String,
    /// The JSON schema the reply was asked to follow (none: free text).
    pub response_format: Option<String>,
    pub prompt: String,
    pub response: Option<String>,
    pub parsed: Option<String>,
    /// Whether the check held on the reply (the flag was raised).
    pub matched: Option<bool>,
    pub passed: bool,
    pub status: CellStatus,
    pub error_kind: Option<String>,
    pub error: Option<String>,
    /// What the check found (JSON): expected and actual values.
    pub evaluation_details: Option<String>,
    pub latency_ms: Option<i64>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub reasoning_tokens: i64,
    pub cost_usd: f64,
    pub cost_unknown: bool,
    pub served_model: Option<String>,
    pub provider: Option<String>,
    pub attempts: i64,
    pub cached: bool,
    pub finish_reason: Option<String>,
    pub error_type: Option<String>,
    /// The provider's block (JSON), when it blocked the request.
    pub block: Option<String>,
    pub created_at: String,
}

/// One judge's (or a panel's combined) verdict on one criterion.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseJudgement {
    pub criterion: String,
    pub judge_model: String,
    /// JSON text: a string or a list; none on a judge error.
    pub verdict: Option<String>,
    pub justification: Option<String>,
    pub passed: Option<bool>,
    pub error: Option<String>,
    pub cost_usd: f64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// True for a panel member's own vote, false for the judgement that counts.
    pub vote: bool,
}

/// One human label of a result.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseLabel {
    pub criterion: String,
    pub rater: String,
    /// JSON text, as the judge's.
    pub verdict: String,
    pub passed: bool,
    pub note: Option<String>,
    pub at: String,
}

/// The same test case and repeat in another run.
#[derive(Debug, Clone, PartialEq)]
pub struct Sibling {
    pub result_id: i64,
    pub run_id: i64,
    pub model: String,
    pub status: CellStatus,
    pub response: Option<String>,
    pub parsed: Option<String>,
}

/// The original or one variant of the user's words of a test case, in one
/// run and repeat (issue 43): its verdict and the user's text as it was
/// stored with the run (never drawn again).
#[derive(Debug, Clone, PartialEq)]
pub struct CaseVariant {
    pub result_id: i64,
    pub test_code: String,
    /// The variant's name; None for the original.
    pub variant: Option<String>,
    pub variant_seed: Option<i64>,
    pub status: CellStatus,
    /// Message 1's user text: the (varied) perturbation's stored text.
    pub message: String,
    /// A conversation's later user messages, in order.
    pub later: Vec<LaterMessage>,
}

/// A later user message of a conversation, as it was sent.
#[derive(Debug, Clone, PartialEq)]
pub struct LaterMessage {
    pub turn_index: i64,
    /// The script's turn (`T3`), or a simulated user's.
    pub turn_code: Option<String>,
    pub text: String,
}

/// How far `helmbench view`'s search index has come.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SearchProgress {
    /// The highest result id indexed.
    pub last_id: i64,
    /// Results not indexed yet.
    pub pending: i64,
    /// Results in the database.
    pub results: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_status_of_each_error_kind() {
        assert_eq!(CellStatus::of(true, None), CellStatus::Pass);
        assert_eq!(CellStatus::of(false, None), CellStatus::Fail);
        assert_eq!(CellStatus::of(false, Some("format")), CellStatus::Fail);
        assert_eq!(CellStatus::of(false, Some("judge")), CellStatus::Error);
        assert_eq!(CellStatus::of(false, Some("refused")), CellStatus::Blocked);
    }
}
