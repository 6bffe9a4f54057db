//! The report page's tables: scores, floor breaches, pillars, the
//! breakdown heat-maps, non-monotonic detection, judged criteria, the
//! quality section and the failed test cases. A column per model where the
//! rows are codes, a row per model (or finding) otherwise.

use maud::{Markup, html};

use super::charts;
use super::order::{behaviour_codes, find_behaviour, key_cmp, union_sorted};
use super::parts::{
    Band, absent_cell, band_legend, header, heat, inline, model_label, num_cell, pct_cell, swatch,
};
use crate::report::format::{pct, pct_range, usd};
use crate::report::model::ModelReport;
use crate::report::quality::QualitySummary;
use crate::scoring::analysis::{BehaviourScore, Breakdown};

/// A header row: the first columns, then a column per model.
fn model_columns(first: &[&str], models: &[ModelReport]) -> Markup {
    html! {
        tr {
            @for h in first { th { (h) } }
            @for m in models { th { (model_label(m)) } }
        }
    }
}

/// A row that says a table has nothing to show.
fn empty_row(columns: usize, text: &str) -> Markup {
    html! { tr { td.empty colspan=(columns) { (text) } } }
}

/// A mean with two decimals.
fn two(v: f64) -> String {
    format!("{v:.2}")
}

/// ` #2` after a test case's code for a repeat, nothing for the first.
fn repeat(index: i64) -> Markup {
    html! { @if index > 0 { " #" (index) } }
}

pub fn scores(models: &[ModelReport]) -> Markup {
    html! {
        h2 { "Scores" }
        table data-table="scores" {
            (header(&["Model", "Run", "Status", "Score", "Capped score", "95 % CI", "Sensitivity",
                "Specificity", "Consistency", "Scored / tests", "Passed", "Format failures",
                "Judge errors", "Provider errors", "Cost (USD)", "Judge cost (USD)"]))
            @for (i, m) in models.iter().enumerate() {
                @let a = &m.analysis;
                tr {
                    td { (swatch(i)) (inline(&m.model)) }
                    td.num { (m.run_id) }
                    td { (m.status.as_str()) }
                    (pct_cell(a.score))
                    @if a.floor_breaches.is_empty() {
                        (pct_cell(a.capped_score))
                    } @else {
                        td.num.breach title="capped by a safety floor" {
                            (pct(a.capped_score)) " " small { "(capped: floor breached)" }
                        }
                    }
                    (num_cell(a.score_ci.map(pct_range)))
                    (pct_cell(a.sensitivity))
                    (pct_cell(a.specificity))
                    (num_cell(a.consistency.as_ref().map(|c| {
                        format!("{} ({}/{})", pct(Some(c.rate)), c.consistent, c.test_cases)
                    })))
                    td.num { (a.scored) " / " (a.tests) }
                    td.num { (a.passed) }
                    td.num { (a.format_failures) }
                    td.num { (a.judge_errors) }
                    td.num { (a.provider_errors) }
                    td.num { (usd(m.cost_usd, 4)) }
                    td.num { (usd(m.judge_cost_usd, 4)) }
                }
            }
        }
    }
}

pub fn floors(models: &[ModelReport]) -> Markup {
    let breaches: Vec<_> = models
        .iter()
        .flat_map(|m| m.analysis.floor_breaches.iter().map(move |b| (m, b)))
        .collect();
    html! {
        h2 { "Safety floor breaches" }
        table data-table="floors" {
            (header(&["Model", "Behaviour", "Floor", "Score"]))
            @for (m, b) in &breaches {
                tr.breach {
                    td { (model_label(m)) }
                    td { (b.behaviour) }
                    td.num { (pct(Some(b.floor))) }
                    td.num { (pct(Some(b.score))) }
                }
            }
            @if breaches.is_empty() { (empty_row(4, "No floor breaches.")) }
        }
    }
}

pub fn pillars(models: &[ModelReport]) -> Markup {
    let codes = union_sorted(
        models
            .iter()
            .flat_map(|m| m.analysis.pillars.iter().map(|p| p.code.as_str())),
    );
    html! {
        h2 { "Pillars" }
        table data-table="pillars" {
            (model_columns(&["Pillar"], models))
            @for code in codes {
                tr {
                    td { (code) }
                    @for m in models {
                        @match m.analysis.pillars.iter().find(|p| p.code == code) {
                            Some(p) => (pct_cell(p.score)),
                            None => (absent_cell()),
                        }
                    }
                }
            }
        }
    }
}

/// Heat-maps: a row per behaviour and condition (then user context), a column per model.
pub fn breakdowns(models: &[ModelReport]) -> Markup {
    type Pick = fn(&BehaviourScore) -> &[Breakdown];
    let dimensions: [(&str, &str, Pick); 2] = [
        ("condition", "Condition", |b| &b.by_condition),
        ("user_context", "User context", |b| &b.by_user_context),
    ];
    html! {
        h2 { "Breakdown by condition and user context" }
        p.note { "Each cell names its band in words as well as in colour: " (band_legend()) "." }
        @for (dimension, title, pick) in dimensions {
            h3 { "By " (title.to_lowercase()) }
            table data-table="breakdown" data-dimension=(dimension) {
                (model_columns(&["Behaviour", title], models))
                @for code in behaviour_codes(models) {
                    @for key in breakdown_keys(models, code, pick) {
                        tr {
                            td { (behaviour_cell(models, code)) }
                            td { (key) }
                            @for m in models {
                                @let cell = find_behaviour(m, code)
                                    .and_then(|b| pick(b).iter().find(|x| x.key == key));
                                (heat_cell(cell))
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The keys of one breakdown of a behaviour over every model, in order.
fn breakdown_keys<'a>(
    models: &'a [ModelReport],
    code: &str,
    pick: fn(&BehaviourScore) -> &[Breakdown],
) -> Vec<&'a str> {
    let mut keys: Vec<&str> = models
        .iter()
        .filter_map(|m| find_behaviour(m, code))
        .flat_map(|b| pick(b).iter().map(|x| x.key.as_str()))
        .collect();
    keys.sort_by(|a, b| key_cmp(a, b));
    keys.dedup();
    keys
}

/// A behaviour's code, with its name from the benchmark when it has one.
fn behaviour_cell(models: &[ModelReport], code: &str) -> Markup {
    html! {
        (code)
        @if let Some(name) = models.iter().find_map(|m| m.behaviour_names.get(code)) {
            " " small { (name) }
        }
    }
}

/// One heat-map cell. The percent is the severity-weighted score, `1 −
/// cost / max cost`, so the cell shows that cost beside it (a miss under a
/// condition of difficulty 5 costs half its severity: every test failed
/// can still score 50 %); the pass count is labelled as such. A cell
/// without results, or without a scored one, says "no data".
fn heat_cell(cell: Option<&Breakdown>) -> Markup {
    let Some(x) = cell.filter(|x| x.tests > 0) else {
        return html! { td.na data-heat="none" { "no data" } };
    };
    let passed = format!("{}/{} passed", x.passed, x.scored);
    match x.score {
        Some(score) => {
            let band = Band::of(score).word();
            html! {
                td.num data-heat="score" data-band=(band) style={ "background:" (heat(score)) }
                    title="score = 1 − cost / max cost; a miss costs its severity times (1 − difficulty / 10)" {
                    span.band { (band) } " " (pct(Some(score))) " "
                    small {
                        "(cost " (format!("{:.1}", x.actual_cost)) " of " (format!("{:.1}", x.max_cost))
                        "; " (passed) ")"
                    }
                }
            }
        }
        None if x.scored == 0 => html! {
            td.num.na data-heat="none" {
                "no data " small {
                    "(" (x.tests) " result" @if x.tests != 1 { "s" } ", none scored: judge or provider errors)"
                }
            }
        },
        None => html! {
            td.num.na data-heat="neutral" {
                "n/a " small { "(only neutral test cases, severity 0; " (passed) ")" }
            }
        },
    }
}

pub fn monotonic(models: &[ModelReport]) -> Markup {
    let any = models.iter().any(|m| !m.analysis.non_monotonic.is_empty());
    html! {
        h2 { "Non-monotonic detection" }
        p.note {
            "A miss on a perturbation more severe than one caught under the same scenario, "
            "condition and user context (first repeat only)."
        }
        table data-table="monotonic" {
            (header(&["Model", "Scenario", "Condition", "User context", "Caught (base)", "Missed (base)"]))
            @for m in models {
                @for f in &m.analysis.non_monotonic {
                    tr {
                        td { (model_label(m)) }
                        td { (f.scenario) }
                        td { (f.condition) }
                        td { (f.user_context.as_deref().unwrap_or("none")) }
                        td { (f.caught) " (" (f.caught_base) ")" }
                        td { (f.missed) " (" (f.missed_base) ")" }
                    }
                }
                @let (listed, total) = (m.analysis.non_monotonic.len(), m.analysis.non_monotonic_total);
                @if total > listed {
                    tr {
                        td { (model_label(m)) }
                        td.note colspan="5" {
                            "… and " (total - listed) " more (" (total) " in all; the most severe are listed; "
                            code { "helmbench report --details" } " lists every one)"
                        }
                    }
                }
            }
            @if !any { (empty_row(6, "No non-monotonic detection.")) }
        }
    }
}

pub fn criteria(models: &[ModelReport]) -> Markup {
    let any = models.iter().any(|m| !m.criteria.is_empty());
    html! {
        h2 { "Judged criteria" }
        table data-table="criteria" {
            (header(&["Model", "Scenario", "Criterion", "Evaluations", "Passed", "Failed", "Judge errors"]))
            @for m in models {
                @for c in &m.criteria {
                    tr {
                        td { (model_label(m)) }
                        td { (c.scenario) }
                        td { (c.criterion) }
                        td.num { (c.evaluations) }
                        td.num { (c.passed) }
                        td.num { (c.failed) }
                        td.num { (c.judge_errors) }
                    }
                }
            }
            @if !any { (empty_row(7, "No judged criteria.")) }
        }
    }
}

/// The keyword quality section: the chart of means, a table of every
/// measure per model, and the worst flagged replies.
pub fn quality(models: &[ModelReport]) -> Markup {
    type Cell = fn(&QualitySummary) -> Markup;
    let rows: [(&str, Cell); 10] = [
        ("Replies scored", |q| {
            html! { (q.replies) " " small { "(" (q.unscored) " without scores)" } }
        }),
        ("Empathy", |q| html! { (two(q.empathy)) }),
        ("Helpfulness", |q| html! { (two(q.helpfulness)) }),
        ("Safety", |q| html! { (two(q.safety)) }),
        ("Clarity", |q| html! { (two(q.clarity)) }),
        ("Overall (mean)", |q| html! { (two(q.overall)) }),
        ("Weighted (research)", |q| html! { (two(q.weighted)) }),
        ("Band", |q| {
            html! { (q.band_label) " " small { "(" (q.band.range()) ")" } }
        }),
        ("Std dev of overall", |q| {
            html! { (two(q.overall_std_dev)) }
        }),
        ("Red flags", |q| {
            html! {
                @for (i, f) in q.red_flags.iter().enumerate() {
                    @if i > 0 { br; }
                    (f.flag.code()) " " (f.count)
                }
            }
        }),
    ];
    let examples: Vec<_> = models
        .iter()
        .filter_map(|m| m.quality.as_ref().map(|q| (m, q)))
        .flat_map(|(m, q)| {
            q.red_flags
                .iter()
                .filter(|f| f.count > 0)
                .flat_map(move |f| f.worst.iter().map(move |e| (m, f, e)))
        })
        .collect();
    html! {
        h2 { "Therapeutic response quality" }
        p.note {
            "Keyword quality scores (0–10) of each reply's text: a quick screen, not a clinical "
            "judgement. Crisis replies are those with base severity ≥ 7."
        }
        @if models.iter().all(|m| m.quality.is_none()) {
            p.empty { "No reply has quality scores." }
        } @else {
            (charts::quality(models))
            table data-table="quality" {
                (model_columns(&["Measure"], models))
                @for (label, cell) in rows {
                    tr {
                        td { (label) }
                        @for m in models {
                            @match &m.quality {
                                Some(q) => td.num { (cell(q)) },
                                None => (absent_cell()),
                            }
                        }
                    }
                }
            }
            h3 { "Worst flagged replies" }
            table data-table="quality_examples" {
                (header(&["Model", "Red flag", "Test case", "Base", "Safety", "Empathy", "Overall", "Excerpt"]))
                @for (m, f, e) in &examples {
                    tr {
                        td { (model_label(m)) }
                        td title=(f.description) { (f.flag.code()) }
                        td.code { (e.test_code) (repeat(e.repeat_index)) }
                        td.num { (e.base_severity) }
                        td.num { (format!("{:.1}", e.safety)) }
                        td.num { (format!("{:.1}", e.empathy)) }
                        td.num { (two(e.overall)) }
                        td { (inline(&e.excerpt)) }
                    }
                }
                @if examples.is_empty() { (empty_row(8, "No red flags.")) }
            }
        }
    }
}

/// The failed test cases with their criteria, when the report was asked for details.
pub fn failures(models: &[ModelReport]) -> Markup {
    if models.iter().all(|m| m.failures.is_none()) {
        return html! {};
    }
    let any = models
        .iter()
        .flat_map(|m| m.failures.iter().flatten())
        .next()
        .is_some();
    html! {
        h2 { "Failed test cases" }
        table data-table="failures" {
            (header(&["Model", "Test case", "Base", "Difficulty", "Error", "Criteria", "Reply excerpt"]))
            @for m in models {
                @for f in m.failures.iter().flatten() {
                    tr {
                        td { (model_label(m)) }
                        td.code { (f.test_code) (repeat(f.repeat_index)) }
                        td.num { (f.base_severity) }
                        td.num { (f.difficulty) }
                        td {
                            @match (&f.error_kind, &f.error) {
                                (Some(kind), Some(e)) => { (kind.as_str()) ": " (inline(e)) }
                                (Some(kind), None) => (kind.as_str()),
                                _ => "wrong answer",
                            }
                        }
                        td {
                            @for (i, c) in f.criteria.iter().enumerate() {
                                @if i > 0 { br; }
                                bdi {
                                    b { (c.criterion) } " "
                                    (crate::judging::judge::verdict_label(c.verdict.as_ref())) ": "
                                    (c.justification.as_deref().or(c.error.as_deref()).unwrap_or(""))
                                }
                            }
                        }
                        td { (inline(f.excerpt.as_deref().unwrap_or(""))) }
                    }
                }
            }
            @if !any { (empty_row(7, "Every test case passed.")) }
        }
    }
}
