//! The Runs page: every run with status, model, progress, spend and
//! coverage, newest first; a running run's row is kept current by the page's
//! script polling [`runs_json`] (text only: the script never writes HTML).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, State};
use maud::{Markup, html};
use serde::Serialize;

use super::layout::{Nav, inline, page};
use super::security::Session;
use super::state::{App, PageError};
use crate::domain::RunRecord;
use crate::report::usd;

/// One run as the page and its poll show it.
#[derive(Serialize)]
pub struct RunLine {
    pub run_id: i64,
    pub model: String,
    pub kind: String,
    pub status: String,
    /// `12 / 40`
    pub progress: String,
    pub passed: i64,
    pub failed: i64,
    /// Format, judge and provider errors.
    pub errors: String,
    pub blocked: i64,
    pub spend: String,
    pub started_at: String,
}

impl RunLine {
    fn of(r: &RunRecord) -> RunLine {
        let answered = r.test_cases - r.judge_errors - r.provider_errors - r.blocked - r.refused;
        RunLine {
            run_id: r.run_id,
            model: r.model.clone(),
            kind: r.kind.clone(),
            status: r.status.as_str().to_string(),
            progress: format!("{} / {}", r.test_cases, r.planned_test_cases),
            passed: r.passed,
            failed: (answered - r.passed).max(0),
            errors: format!(
                "{} format, {} judge, {} provider",
                r.format_failures, r.judge_errors, r.provider_errors
            ),
            blocked: r.blocked + r.refused,
            spend: format!("${}", usd(r.cost_usd + r.judge_cost_usd, 4)),
            started_at: r.started_at.clone(),
        }
    }
}

/// `GET /api/runs`: the rows as JSON, for the page's poll.
pub async fn runs_json(State(app): State<Arc<App>>) -> Result<Json<Vec<RunLine>>, PageError> {
    Ok(Json(
        app.store.runs().await?.iter().map(RunLine::of).collect(),
    ))
}

/// `GET /`.
pub async fn runs_page(
    State(app): State<Arc<App>>,
    Extension(session): Extension<Session>,
) -> Result<Markup, PageError> {
    let runs = app.store.runs().await?;
    let lines: Vec<RunLine> = runs.iter().map(RunLine::of).collect();
    let body = html! {
        h1 { "Runs" }
        @if lines.is_empty() {
            p.empty { "No runs in this database yet (run `helmbench run-batch` first)." }
        } @else {
            p.note {
                "Open a run for its scores and the judge's agreement with your labels, or its failed cases directly. "
                "A running run's row updates while it runs."
            }
            table id="runs" data-poll="/api/runs" {
                thead { tr {
                    th { "Run" } th { "Model" } th { "Kind" } th { "Status" } th { "Progress" }
                    th { "Passed" } th { "Failed" } th { "Errors" } th { "Blocked / refused" }
                    th { "Spend (USD)" } th { "Started" }
                } }
                tbody {
                    @for l in &lines {
                        tr data-run-id=(l.run_id) data-status=(l.status) {
                            td.num { a href={ "/runs/" (l.run_id) } { "run " (l.run_id) } }
                            td { (inline(&l.model)) }
                            td { (l.kind) }
                            td data-field="status" { span class={ "badge " (l.status) } { (l.status) } }
                            td.num data-field="progress" { (l.progress) }
                            td.num data-field="passed" { (l.passed) }
                            td.num data-field="failed" {
                                a href={ "/results?runs=" (l.run_id) "&status=failed" } { (l.failed) " failed" }
                            }
                            td data-field="errors" { (l.errors) }
                            td.num data-field="blocked" { (l.blocked) }
                            td.num data-field="spend" { (l.spend) }
                            td { (l.started_at) }
                        }
                    }
                }
            }
        }
    };
    Ok(page("Runs", &session, Nav::Runs, "/", body))
}
