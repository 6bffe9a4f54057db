//! What the server holds for every request: the store, the search index
//! and the reports kept, the scoring the report uses, the benchmark's
//! rubrics (for labels), the secrets of the security layer, and each
//! session's count of labels this sitting.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::reports::Reports;
use super::search::SearchIndex;
use crate::benchmark::{Benchmark, Rubric, ScoringConfig};
use crate::domain::RunRecord;
use crate::store::Store;

/// A page error: a status and a sentence for the person reading it.
#[derive(Debug)]
pub struct PageError {
    pub status: axum::http::StatusCode,
    pub message: String,
}

impl PageError {
    pub fn new(status: axum::http::StatusCode, message: impl Into<String>) -> PageError {
        PageError {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> PageError {
        PageError::new(axum::http::StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> PageError {
        PageError::new(axum::http::StatusCode::NOT_FOUND, message)
    }
}

impl From<crate::store::StoreError> for PageError {
    fn from(e: crate::store::StoreError) -> Self {
        match e {
            crate::store::StoreError::NotFound(m) => PageError::not_found(m),
            other => {
                tracing::error!(error = %other, "view: store error");
                PageError::new(
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    other.to_string(),
                )
            }
        }
    }
}

impl axum::response::IntoResponse for PageError {
    fn into_response(self) -> axum::response::Response {
        let body = maud::html! {
            (maud::DOCTYPE)
            html lang="en" {
                head { meta charset="utf-8"; title { "helmbench view: error" } link rel="stylesheet" href="/assets/view.css"; }
                body {
                    main {
                        h1 { "Error " (self.status.as_u16()) }
                        p.error dir="auto" { (self.message) }
                        p { a href="/" { "Back to the runs" } }
                    }
                }
            }
        };
        (self.status, body).into_response()
    }
}

/// The labels of one session since its first label, for the sitting count
/// and the nudge to pause.
#[derive(Debug, Clone, Copy)]
pub struct Sitting {
    pub labels: u32,
    pub since: Instant,
}

/// Everything a request may need.
pub struct App {
    /// The database (with the search index attached when there is one).
    pub store: Store,
    /// The search index kept in the background; none: searches scan.
    pub search: Option<Arc<SearchIndex>>,
    /// The Run page's reports, kept until their run changes.
    pub reports: Arc<Reports>,
    pub scoring: ScoringConfig,
    /// Where the weights came from, as `report` says it.
    pub scoring_source: String,
    /// Behaviour names by code, shown beside codes.
    pub behaviour_names: BTreeMap<String, String>,
    /// The benchmark folder, for the rubrics a label is checked against
    /// (none: labelling is off, and the page says why).
    pub benchmark: Option<Benchmark>,
    /// Keys the CSRF token of each session (never sent anywhere).
    pub secret: [u8; 32],
    /// The access token; required on every request when set.
    pub token: Option<String>,
    /// Bound to a loopback address: the Host header is checked.
    pub loopback: bool,
    pub port: u16,
    pub sittings: Mutex<HashMap<String, Sitting>>,
}

impl App {
    /// The rubric of a criterion of a scenario, from the benchmark folder.
    pub fn rubric(&self, scenario: &str, criterion: &str) -> Option<&Rubric> {
        self.benchmark
            .as_ref()?
            .scenario(scenario)?
            .rubrics
            .iter()
            .find(|r| r.code == crate::judging::judge::rubric_code(criterion))
    }

    /// `P2-B1 Declines to coach…`, or the bare code.
    pub fn behaviour_label(&self, code: &str) -> String {
        match self.behaviour_names.get(code) {
            Some(name) => format!("{code} {name}"),
            None => code.to_string(),
        }
    }

    /// The runs a `runs=3,5` parameter names, in its order, each once.
    pub async fn runs_named(&self, list: &str) -> Result<Vec<RunRecord>, PageError> {
        let mut runs = Vec::new();
        for id in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let id: i64 = id.parse().map_err(|_| {
                PageError::bad_request(format!("runs={list:?}: {id:?} is not a run id"))
            })?;
            if !runs.iter().any(|r: &RunRecord| r.run_id == id) {
                runs.push(self.store.run(id).await?);
            }
        }
        Ok(runs)
    }

    /// The session's sitting (zero labels before its first).
    pub fn sitting(&self, session: &str) -> Option<Sitting> {
        self.sittings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(session)
            .copied()
    }

    /// Counts one more label in the session's sitting.
    pub fn count_label(&self, session: &str) {
        let mut s = self.sittings.lock().unwrap_or_else(|e| e.into_inner());
        let entry = s.entry(session.to_string()).or_insert(Sitting {
            labels: 0,
            since: Instant::now(),
        });
        entry.labels += 1;
    }
}
