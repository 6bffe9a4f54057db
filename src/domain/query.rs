//! What a caller asks the store for when it reads results: which stored
//! results and what beyond them ([`Which`], [`Detail`]: export, run-single,
//! the report), and the viewer's filter of the results matrix, its row
//! keys and the way a keyset page reads ([`ResultFilter`], [`StatusFilter`],
//! [`RowKey`], [`Direction`]). Built from flags and URLs; the store turns
//! them into SQL.

/// Which stored results a read returns, in stored order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// Every result of every run.
    Every,
    /// Every result of one run.
    Run(i64),
    /// The results of one run that did not pass.
    FailedOf(i64),
}

/// What a read of results carries beyond the result itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Detail {
    /// Each result's judgements (and so its judge cost).
    pub judgements: bool,
    /// Each result's composed prompt.
    pub prompts: bool,
    /// Each result's reply and its provenance: `response`, `parsed`,
    /// `error`, finish reason, generation id, served model and provider,
    /// error type and code, prompt hash and time stored (left out: `None`,
    /// or empty for the hash and the time). They are most of a row's bytes
    /// and text values; a report reads only scores.
    pub replies: bool,
}

/// Which results a filter keeps by verdict and review state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StatusFilter {
    #[default]
    All,
    Passed,
    Failed,
    Errors,
    Blocked,
    /// A panel's judges gave different verdicts on a criterion.
    JudgesDisagree,
    /// A human label's pass/fail differs from the judge's.
    HumanVsJudge,
    /// Judged, and no human label yet.
    Unlabelled,
}

impl StatusFilter {
    pub const ALL: [StatusFilter; 8] = [
        StatusFilter::All,
        StatusFilter::Failed,
        StatusFilter::Passed,
        StatusFilter::Errors,
        StatusFilter::Blocked,
        StatusFilter::JudgesDisagree,
        StatusFilter::HumanVsJudge,
        StatusFilter::Unlabelled,
    ];

    /// The word in the URL.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusFilter::All => "all",
            StatusFilter::Passed => "passed",
            StatusFilter::Failed => "failed",
            StatusFilter::Errors => "errors",
            StatusFilter::Blocked => "blocked",
            StatusFilter::JudgesDisagree => "disagree",
            StatusFilter::HumanVsJudge => "human-vs-judge",
            StatusFilter::Unlabelled => "unlabelled",
        }
    }

    pub fn parse(s: &str) -> Option<StatusFilter> {
        StatusFilter::ALL.into_iter().find(|f| f.as_str() == s)
    }
}

/// A results filter: the runs (columns), then conditions every kept row's
/// result meets in at least one of them.
/// The failed-at filter's name for a conversation's composed first
/// message (it has no turn code).
pub const FIRST_MESSAGE: &str = "message 1";

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResultFilter {
    pub runs: Vec<i64>,
    pub status: StatusFilter,
    /// Codes: `P1`, `P1-B1`, `P1-B1-S1`.
    pub pillar: Option<String>,
    pub behaviour: Option<String>,
    pub scenario: Option<String>,
    pub min_severity: Option<f64>,
    pub max_severity: Option<f64>,
    /// A variant of the user's words (issue 43): `typos` keeps that
    /// variant's rows (`…~typos`), `none` the originals alone.
    pub variant: Option<String>,
    /// Where a conversation first failed (issue 42): `message 1`, a turn
    /// code (`T3`), or `any` (it failed somewhere).
    pub failed_at: Option<String>,
    /// A conversation with a turn of this pressure label; with `failed_at`,
    /// its first failed turn carries the label.
    pub pressure: Option<String>,
    /// Text searched in the composed prompt, the reply and the judges'
    /// justifications: through the search index, its words as a phrase;
    /// by a scan, the text anywhere (case-insensitive for ASCII, as
    /// SQLite's LIKE is).
    pub search: Option<String>,
    /// The search reads the view's index (the store handle has it
    /// attached); else every row is scanned.
    pub search_index: bool,
}

/// A row key: test case and repeat.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RowKey {
    pub test_code: String,
    pub repeat_index: i64,
}

/// Which way a keyset page reads from its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    After,
    Before,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_through_the_url_word() {
        for f in StatusFilter::ALL {
            assert_eq!(StatusFilter::parse(f.as_str()), Some(f));
        }
        assert_eq!(StatusFilter::parse("nope"), None);
    }
}

/// The plan of one statement the store makes (its SQLite `EXPLAIN QUERY
/// PLAN` lines), for the tests that fail on a full scan of a large table.
#[derive(Debug, Clone)]
pub struct ReadPlan {
    pub name: String,
    pub plan: Vec<String>,
    /// Plan lines that scan a large table whole.
    pub scans: Vec<String>,
}
