//! The Run page: one run's scores per model, pillar and behaviour with
//! intervals, coverage and cost, and the judge's agreement with the human
//! labels so far. The numbers are `report`'s own: the page builds the same
//! [`crate::report::ModelReport`] (and its calibration section) that
//! `report --format json` prints, and only renders it. The report is
//! computed in the background and kept until the run's results change
//! ([`super::reports`]); while it is computed the page says so and
//! refreshes itself.

use std::sync::Arc;

use axum::extract::{Extension, Path, State};
use maud::{Markup, html};

use super::layout::{Nav, inline, page, page_refreshing};
use super::reports::Shown;
use super::security::Session;
use super::state::{App, PageError};
use crate::report::calibration::{Calibration, CriterionCalibration, calibration};
use crate::report::html::parts::{band_chip, pct_cell};
use crate::report::{ModelReport, coverage, pct, pct_ci, usd};

/// The report of run `run_id`, exactly as `report --run-id` builds it,
/// without its review sections (the page reads the calibration itself, at
/// every request: labels change it, and the report is kept until results
/// change).
pub async fn build_report(app: &App, run_id: i64) -> Result<ModelReport, PageError> {
    let run = app.store.run(run_id).await?;
    let scoring = crate::benchmark::ScoringConfig {
        blocked_as: run.blocked_as(),
        ..app.scoring.clone()
    };
    // A completed run's analysis as run-batch kept it, where it still holds.
    let mut report =
        crate::report::kept::reports(&app.store, &[(run, scoring)], &app.scoring_source, false)
            .await?
            .remove(0);
    report.behaviour_names = app.behaviour_names.clone();
    Ok(report)
}

fn num(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |k| format!("{k:.2}"))
}

fn calibration_row(c: &CriterionCalibration, overall: bool) -> Markup {
    html! {
        tr.overall[overall] {
            td { (inline(&c.scenario)) }
            td { (inline(&c.criterion)) }
            td.num { (c.items) }
            td.num { (pct(c.raw_agreement)) }
            td.num { (c.kappa.map_or_else(|| c.kappa_undefined.clone().unwrap_or_else(|| "undefined".into()), |k| format!("{k:.2}"))) }
            td.num { (c.kappa_ci.map_or_else(|| "n/a".into(), |[lo, hi]| format!("{lo:.2}–{hi:.2}"))) }
            td { @if let Some(f) = &c.flag { span.flag { (f) } } }
        }
    }
}

/// How often a page waiting for its report reloads.
const REFRESH_S: u32 = 2;

/// `GET /runs/{id}`.
pub async fn run_page(
    State(app): State<Arc<App>>,
    Extension(session): Extension<Session>,
    Path(run_id): Path<i64>,
) -> Result<Markup, PageError> {
    let run = app.store.run(run_id).await?;
    let state = app.store.run_state(run_id).await?;
    let computing_app = app.clone();
    let shown = app
        .reports
        .get(run_id, state, move || async move {
            build_report(&computing_app, run_id)
                .await
                .map_err(|e| e.message)
        })
        .await
        .map_err(|why| PageError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, why))?;
    let calibrated = calibration(&app.store, run_id).await?;
    let labels = app.store.label_count(run_id).await?;
    let results = |status: &str| format!("/results?runs={run_id}&status={status}");
    let (report, computing) = match &shown {
        Shown::Current(r) => (Some(r.as_ref()), false),
        Shown::Computing(r) => (r.as_deref(), true),
    };
    let body = html! {
        h1 { "Run " (run.run_id) ": " (inline(&run.model)) }
        p.note {
            (run.kind) " run, " span class={ "badge " (run.status.as_str()) } { (run.status.as_str()) }
            ", started " (run.started_at)
            @if let Some(c) = &run.completed_at { ", completed " (c) }
            ". Weights and floors: " (app.scoring_source) "."
        }
        nav.actions {
            a.button href=(results("failed")) { "Failed cases" }
            a.button href=(results("all")) { "All results" }
            a.button href=(results("unlabelled")) { "Unlabelled" }
            a.button href=(results("human-vs-judge")) { "Human ≠ judge" }
            a.button href=(results("errors")) { "Errors" }
        }
        @if computing {
            p.computing data-computing {
                @if report.is_some() {
                    "The run has new results since these numbers were computed: computing them again. "
                } @else {
                    "Computing report's numbers for this run's " (run.test_cases) " results. "
                }
                "This page reloads by itself."
            }
        }
        @if let Some(r) = report { (scores(r, run_id)) }
        (agreement(calibrated.as_ref(), labels, run_id))
    };
    let title = format!("Run {run_id}");
    let back = format!("/runs/{run_id}");
    Ok(if computing {
        page_refreshing(&title, &session, Nav::Runs, &back, body, REFRESH_S)
    } else {
        page(&title, &session, Nav::Runs, &back, body)
    })
}

/// The score, pillar and behaviour tables of a report.
fn scores(r: &ModelReport, run_id: i64) -> Markup {
    let a = &r.analysis;
    html! {
        h2 { "Score" }
        table data-table="scores" {
            tr { th { "Score" } th { "Capped score" } th { "95 % CI" } th { "Sensitivity" } th { "Specificity" }
                 th { "Passed / scored" } th { "Format failures" } th { "Judge errors" } th { "Provider errors" }
                 th { "Cost (USD)" } th { "Judge cost (USD)" } }
            tr {
                td.num data-value="score" { (pct(a.score)) }
                td.num.breach[!a.floor_breaches.is_empty()] { (pct(a.capped_score)) }
                td.num { (pct_ci(a.score_ci)) }
                (pct_cell(a.sensitivity))
                (pct_cell(a.specificity))
                td.num data-value="passed" { (a.passed) " / " (a.scored) }
                td.num { (a.format_failures) }
                td.num data-value="judge-errors" { (a.judge_errors) }
                td.num { (a.provider_errors) }
                td.num { (usd(r.cost_usd, 4)) }
                td.num { (usd(r.judge_cost_usd, 4)) }
            }
        }
        p.note.coverage { "Coverage: " (coverage(a.tests, a.scored, a.blocked, a.refused, a.blocked_as)) "." }
        @if !a.floor_breaches.is_empty() {
            p.breach {
                "Safety floor breached: "
                @for (i, b) in a.floor_breaches.iter().enumerate() {
                    @if i > 0 { ", " }
                    (inline(&b.behaviour)) " " (pct(Some(b.score))) " < " (pct(Some(b.floor)))
                }
            }
        }
        h2 { "Pillars" }
        table data-table="pillars" {
            tr { th { "Pillar" } th { "Score" } th { "Weight" } th { "Behaviours" } }
            @for p in &a.pillars {
                tr { td { (inline(&p.code)) } (pct_cell(p.score)) td.num { (p.weight) }
                     td { (p.behaviours.join(", ")) } }
            }
        }
        h2 { "Behaviours" }
        table data-table="behaviours" {
            tr { th { "Behaviour" } th { "Score" } th { "Weight" } th { "Passed / scored / tests" }
                 th { "Sensitivity" } th { "Specificity" } th { "Floor" } th { "Failed cases" } }
            @for b in &a.behaviours {
                tr.breach[b.below_floor] {
                    td { (inline(&r.behaviour_label(&b.code))) }
                    @match b.score {
                        // The band in words on its colour, as in the report's heat-maps.
                        Some(score) => td.num { (band_chip(score)) " " (pct(Some(score))) },
                        None => (pct_cell(None)),
                    }
                    td.num { (b.weight) }
                    td.num { (b.passed) " / " (b.scored) " / " (b.tests) }
                    (pct_cell(b.sensitivity))
                    (pct_cell(b.specificity))
                    td.num { @if let Some(f) = b.floor { (pct(Some(f))) @if b.below_floor { " breached" } } @else { "—" } }
                    td { a href={ "/results?runs=" (run_id) "&status=failed&behaviour=" (b.code) } { "failed" } }
                }
            }
        }
    }
}

/// The judge's agreement with the human labels so far.
fn agreement(c: Option<&Calibration>, labels: i64, run_id: i64) -> Markup {
    let results = |status: &str| format!("/results?runs={run_id}&status={status}");
    html! {
        h2 { "Judge agreement with human labels" }
        @match c {
            None => p.empty data-labels=(labels) {
                "No human labels yet. Label judged cases from "
                a href=(results("unlabelled")) { "the unlabelled ones" }
                " or " a href=(results("failed")) { "the failed ones" } "; the agreement shows here at once."
            },
            Some(c) => {
                p.note data-labels=(labels) {
                    (c.labels) " label(s) of " (c.labelled_items) " item(s) by " (c.raters.join(", "))
                    ". Cohen's kappa with a " (c.bootstrap.resamples) "-resample bootstrap interval; below "
                    (num(Some(c.reliable_kappa))) " the judge is flagged."
                }
                table data-table="calibration" {
                    tr { th { "Scenario" } th { "Criterion" } th { "Items" } th { "Raw agreement" } th { "Kappa" }
                         th { "95 % CI" } th { "Flag" } }
                    @for cr in &c.criteria { (calibration_row(cr, false)) }
                    (calibration_row(&c.overall, true))
                }
            }
        }
    }
}
