//! Human review (issue 20) as the labelling sheet, `review import`, the
//! viewer and the report's judge calibration see it: the judged items a
//! sheet is made of, a label to store and a stored one, what an import
//! changed, and the judgements and panel votes labels are compared with.

use serde_json::Value;

/// One judged criterion of one result, as a labelling sheet shows it.
#[derive(Debug, Clone)]
pub struct ReviewItem {
    pub result_id: i64,
    pub test_code: String,
    pub repeat_index: i64,
    pub behaviour: String,
    pub scenario: String,
    pub criterion: String,
    pub judge_model: String,
    /// The judge's verdict (a string or a list); `None` for a judge error.
    pub judge_verdict: Option<Value>,
    pub judge_passed: Option<bool>,
    /// The composed prompt the model (and the judge) saw.
    pub prompt: String,
    pub response: Option<String>,
    pub parsed: Option<String>,
}

/// One label to store.
#[derive(Debug, Clone, PartialEq)]
pub struct NewLabel {
    pub result_id: i64,
    pub criterion: String,
    pub verdict: Value,
    pub passed: bool,
    pub note: Option<String>,
}

/// One stored label.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelRow {
    pub result_id: i64,
    pub criterion: String,
    pub rater: String,
    pub verdict: Value,
    pub passed: bool,
}

/// What one import changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Imported {
    /// Labels written (new or replacing).
    pub stored: usize,
    /// Of those, labels that replaced the same rater's earlier label.
    pub replaced: usize,
}

/// One judgement of a result that has human labels.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelledJudgement {
    pub result_id: i64,
    pub scenario: String,
    pub criterion: String,
    pub judge_model: String,
    pub verdict: Option<Value>,
    pub passed: Option<bool>,
}

/// One judge's verdict on one criterion of one result: a panel's vote.
#[derive(Debug, Clone, PartialEq)]
pub struct VoteRow {
    pub result_id: i64,
    pub scenario: String,
    pub criterion: String,
    pub judge_model: String,
    pub verdict: Option<Value>,
}
