//! The Compare page: two or more runs' paired results with the numbers
//! `compare` gives (its leaderboard, paired differences with intervals,
//! McNemar with Holm per behaviour), computed by the same
//! [`crate::report::compare::collect_with_variants`] and
//! [`crate::scoring::compare`] with the default seed and resamples, so the
//! page and `compare` agree; with the runs' drops under the variants of the
//! user's words they share, as `compare` shows them.

use std::sync::Arc;

use axum::extract::{Extension, Query, State};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{Nav, inline, page};
use super::security::Session;
use super::state::{App, PageError};
use crate::domain::RunRecord;
use crate::report::html::compare::{leaderboard, variant_drops};
use crate::report::{Target, p_value, pct, points, points_ci, select_runs};
use crate::scoring::compare::{DEFAULT_RESAMPLES, DEFAULT_SEED, Options};

#[derive(Debug, Default, Deserialize)]
pub struct CompareQuery {
    /// Run ids, comma-separated; default: the latest completed batch of every model.
    pub runs: Option<String>,
}

async fn pick(app: &App, q: &CompareQuery) -> Result<Vec<RunRecord>, PageError> {
    let Some(list) = q.runs.as_deref().map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(select_runs(&app.store, &Target::LatestPerModel)
            .await
            .unwrap_or_default());
    };
    app.runs_named(list).await
}

/// `GET /compare`.
pub async fn compare_page(
    State(app): State<Arc<App>>,
    Extension(session): Extension<Session>,
    Query(q): Query<CompareQuery>,
) -> Result<Markup, PageError> {
    let runs = pick(&app, &q).await?;
    let ids: Vec<String> = runs.iter().map(|r| r.run_id.to_string()).collect();
    let form = html! {
        form.filters method="get" action="/compare" {
            label { "Runs " input type="text" name="runs" value=(ids.join(",")) size="12" title="two or more run ids, comma-separated"; }
            button type="submit" { "Compare" }
        }
    };
    if runs.len() < 2 {
        let body = html! {
            h1 { "Compare" }
            (form)
            p.empty { "Compare needs at least two runs: name them above (run ids, comma-separated), or complete a batch run of a second model." }
        };
        return Ok(page("Compare", &session, Nav::Compare, "/compare", body));
    }
    let (collector, drops) =
        crate::report::compare::collect_with_variants(&app.store, &runs).await?;
    let scoring = app.scoring.clone();
    // The bootstrap is CPU work: off the async workers.
    let comparison = tokio::task::spawn_blocking(move || {
        collector.compare(
            &scoring,
            Options {
                resamples: DEFAULT_RESAMPLES,
                seed: DEFAULT_SEED,
            },
        )
    })
    .await
    .map_err(|e| PageError::bad_request(format!("comparison failed: {e}")))?
    .map_err(|e| PageError::bad_request(e.to_string()))?;
    let c = &comparison;
    let body = html! {
        h1 { "Compare" }
        (form)
        p.note {
            "Paired over the " (c.test_cases) " test cases every run answered and scored ("
            (c.perturbations) " perturbations); " (c.method.resamples) " bootstrap resamples, seed " (c.method.seed) "."
        }
        @for n in &c.method.notes { p.note { (n) } }
        @for r in &c.excluded_runs { p.note { "Run " (r.run_id) " (" (inline(&r.model)) ") " (r.reason) ": left out." } }
        h2 { "Leaderboard" }
        (leaderboard(c, |run_id| html! { a href={ "/runs/" (run_id) } { (run_id) } }))
        h2 { "Pairs" }
        @for p in &c.pairs {
            section.pair {
                h3 { (inline(&p.a)) " vs " (inline(&p.b)) }
                p { strong { (p.verdict) } @if let Some(r) = &p.reason { " (" (r) ")" } }
                table data-table="pair" {
                    tr { th { "Behaviour" } th { "A" } th { "B" } th { "A − B (points)" } th { "95 % CI" } th { "A only / B only" } th { "p" } th { "p (Holm)" } th { "Verdict" } }
                    tr.overall {
                        td { "all" } td.num { } td.num { }
                        td.num { (points(p.difference)) } td.num { (points_ci(p.ci)) }
                        td.num { (p.a_only) " / " (p.b_only) } td.num { (p_value(p.p)) } td.num { "—" } td { (p.verdict) }
                    }
                    @for b in &p.behaviours {
                        tr {
                            td { (inline(&app.behaviour_label(&b.code))) }
                            td.num { (pct(b.a_score)) } td.num { (pct(b.b_score)) }
                            td.num { (points(b.difference)) } td.num { (points_ci(b.ci)) }
                            td.num { (b.a_only) " / " (b.b_only) }
                            td.num { (p_value(b.p)) } td.num { (p_value(b.p_holm)) }
                            td { (b.verdict) }
                        }
                    }
                }
                p { a href={ "/results?runs=" (p.a_run_id) "," (p.b_run_id) } { "Open these two runs side by side in the results matrix" } }
            }
        }
        @if !drops.is_empty() {
            h2 { "Variants of the user's words" }
            (variant_drops(&drops))
        }
    };
    Ok(page("Compare", &session, Nav::Compare, "/compare", body))
}
