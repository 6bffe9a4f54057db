//! `compare --format html`: one self-contained page (inline CSS and SVG,
//! no script) with the leaderboard, a forest plot of the pairwise
//! differences per behaviour, the verdicts and what was left out. The
//! leaderboard table is shared with `helmbench view`'s Compare page.

use maud::{Markup, html};

use super::parts::{at, document, header, inline};
use crate::report::compare::summary;
use crate::report::format::{p_value, pct, pct_ci, points, points_ci};
use crate::report::robustness::{self, VariantDrop};
use crate::scoring::compare::{ALPHA, Comparison, MIN_DISCORDANT, Pair};

/// The self-contained HTML page; `drops`: the runs' drops under the
/// variants of the user's words they share (issue 43), if any.
pub fn render(c: &Comparison, drops: &[VariantDrop]) -> String {
    let half = axis_half_width(c);
    let body = html! {
        p.note { (summary(c)) }
        ul.note { @for n in &c.method.notes { li { (n) } } }
        h2 { "Leaderboard" }
        (leaderboard(c, |run_id| html! { (run_id) }))
        h2 { "Pairwise differences" }
        p.note {
            "Each row: A’s score minus B’s in percentage points, the dot the difference and the line "
            "its 95 % interval. Dark rows carry a verdict: the interval excludes 0 and McNemar’s p "
            "(Holm-adjusted for a behaviour) is below " (ALPHA) ", on the same side, over at least "
            (MIN_DISCORDANT) " discordant test cases."
        }
        @for p in &c.pairs { (forest(p, half)) }
        h2 { "Verdicts" }
        (verdicts(c))
        @if !drops.is_empty() {
            h2 { "Variants of the user's words" }
            (variant_drops(drops))
        }
        (left_out(c))
    };
    document("HELMBench comparison", body).into_string()
}

/// The leaderboard: rank, score and interval, the rank's interval and how
/// often each run ranked first; `run` renders the run id's cell content
/// (a link in `helmbench view`, the number on the page).
pub fn leaderboard(c: &Comparison, run: impl Fn(i64) -> Markup) -> Markup {
    html! {
        table data-table="leaderboard" {
            (header(&["Rank", "Model", "Run", "Score", "95 % CI", "Rank 95 % range", "Ranked first"]))
            @for s in &c.leaderboard {
                tr {
                    td.num { (s.rank) }
                    td { (inline(&s.label)) }
                    td.num { (run(s.run_id)) }
                    td.num { (pct(s.score)) }
                    td.num { (pct_ci(s.ci)) }
                    td.num { (s.rank_ci[0]) "–" (s.rank_ci[1]) }
                    td.num { (pct(Some(s.first))) }
                }
            }
        }
    }
}

/// Each pair of runs' drops under each variant they share (issue 43): each
/// run's varied − as-written pass rate with its interval, and the
/// difference of the two with its interval, as `compare`'s JSON has them.
/// Shared with `helmbench view`'s Compare page.
pub fn variant_drops(drops: &[VariantDrop]) -> Markup {
    html! {
        p.note {
            "Each run’s pass rate varied minus as written, on the test cases and repeats both runs scored "
            "both ways; A − B negative: A drops more. 95 % paired bootstrap intervals (test cases resampled, "
            (robustness::RESAMPLES) " resamples, seed " (robustness::SEED) ")."
        }
        table data-table="variant-drops" {
            (header(&["Variant", "A", "B", "Pairs", "A varied − written", "95 % CI",
                "B varied − written", "95 % CI", "A − B", "95 % CI"]))
            @for d in drops {
                tr data-variant=(d.variant) {
                    td { (inline(&d.variant)) }
                    td { (inline(&d.a)) }
                    td { (inline(&d.b)) }
                    td.num { (d.pairs) }
                    td.num data-value=(d.a_difference) { (points(Some(d.a_difference))) }
                    td.num { (points_ci(d.a_difference_ci)) }
                    td.num data-value=(d.b_difference) { (points(Some(d.b_difference))) }
                    td.num { (points_ci(d.b_difference_ci)) }
                    td.num data-value=(d.difference) { (points(Some(d.difference))) }
                    td.num { (points_ci(d.difference_ci)) }
                }
            }
        }
    }
}

/// A verdict cell: the verdict, and why there is none.
fn verdict_cell(verdict: &str, reason: Option<&str>) -> Markup {
    html! {
        td {
            (verdict)
            @if let Some(r) = reason { br; small.reason { (r) } }
        }
    }
}

fn verdicts(c: &Comparison) -> Markup {
    html! {
        table data-table="pairs" {
            (header(&["A", "B", "Behaviour", "A − B", "95 % CI", "A only / B only", "p", "p (Holm)",
                "Verdict"]))
            @for p in &c.pairs {
                tr {
                    td { (inline(&p.a)) }
                    td { (inline(&p.b)) }
                    td { "all (weighted)" }
                    td.num { (points(p.difference)) }
                    td.num { (points_ci(p.ci)) }
                    td.num { (p.a_only) " / " (p.b_only) }
                    td.num { (p_value(p.p)) }
                    td {}
                    (verdict_cell(&p.verdict, p.reason.as_deref()))
                }
                @for b in &p.behaviours {
                    tr {
                        td {} td {}
                        td.code { (b.code) }
                        td.num { (points(b.difference)) }
                        td.num { (points_ci(b.ci)) }
                        td.num { (b.a_only) " / " (b.b_only) }
                        td.num { (p_value(b.p)) }
                        td.num { (p_value(b.p_holm)) }
                        (verdict_cell(&b.verdict, b.reason.as_deref()))
                    }
                }
            }
        }
    }
}

/// The runs and test cases the comparison left out, and why.
fn left_out(c: &Comparison) -> Markup {
    if c.excluded_runs.is_empty() && c.excluded_test_cases.is_empty() {
        return html! {};
    }
    html! {
        h2 { "Left out" }
        @if !c.excluded_runs.is_empty() {
            ul data-table="excluded-runs" {
                @for r in &c.excluded_runs {
                    li { "run " (r.run_id) " (" (inline(&r.model)) ") " (r.reason) }
                }
            }
        }
        @if !c.excluded_test_cases.is_empty() {
            table data-table="excluded-test-cases" {
                (header(&["Test case", "Why"]))
                @for e in &c.excluded_test_cases {
                    tr { td.code { (e.test_code) } td { (e.reasons.join("; ")) } }
                }
            }
        }
    }
}

/// Half the width of the forest plots' shared axis, in score units: the
/// widest interval end, rounded up to 10 points (at least 10).
fn axis_half_width(c: &Comparison) -> f64 {
    let widest = c
        .pairs
        .iter()
        .flat_map(|p| {
            std::iter::once((p.difference, p.ci))
                .chain(p.behaviours.iter().map(|b| (b.difference, b.ci)))
        })
        .flat_map(|(d, ci)| {
            let [lo, hi] = ci.unwrap_or([0.0, 0.0]);
            [d.unwrap_or(0.0).abs(), lo.abs(), hi.abs()]
        })
        .fold(0.0_f64, f64::max);
    ((widest * 10.0).ceil() / 10.0).clamp(0.1, 1.0)
}

/// One pair's forest plot: the weighted score, then each behaviour.
fn forest(p: &Pair, half: f64) -> Markup {
    const LABEL: f64 = 130.0;
    const AREA: f64 = 460.0;
    const ROW: f64 = 20.0;
    const TOP: f64 = 26.0;
    // (label, difference, interval, has a verdict)
    type Row<'a> = (&'a str, Option<f64>, Option<[f64; 2]>, bool);
    let rows: Vec<Row> = std::iter::once(("all (weighted)", p.difference, p.ci, p.safer.is_some()))
        .chain(
            p.behaviours
                .iter()
                .map(|b| (b.code.as_str(), b.difference, b.ci, b.safer.is_some())),
        )
        .collect();
    let width = LABEL + AREA + 170.0;
    let height = TOP + ROW * rows.len() as f64 + 10.0;
    let x = |v: f64| at(LABEL + (v.clamp(-half, half) + half) / (2.0 * half) * AREA);
    html! {
        figure {
            figcaption { (inline(&p.a)) " − " (inline(&p.b)) }
            svg.chart data-chart="forest" viewBox={ "0 0 " (width) " " (height) } width=(width)
                height=(height) role="img"
                aria-label={ "Score differences of " (p.a) " and " (p.b) " with 95 % intervals" } {
                @for tick in [-half, -half / 2.0, 0.0, half / 2.0, half] {
                    line x1=(x(tick)) y1=(TOP - 6.0) x2=(x(tick)) y2=(height - 4.0)
                        stroke=(if tick == 0.0 { "#888" } else { "#ddd" }) {}
                    text x=(x(tick)) y="14" text-anchor="middle" { (format!("{:+.0}", tick * 100.0)) }
                }
                @for (i, (label, d, ci, verdict)) in rows.iter().enumerate() {
                    @let y = TOP + ROW * i as f64 + ROW / 2.0;
                    @let colour = if *verdict { "#1f4e9c" } else { "#999" };
                    text x=(at(LABEL - 6.0)) y=(at(y + 4.0)) text-anchor="end" { (label) }
                    @if let Some([lo, hi]) = ci {
                        line x1=(x(*lo)) y1=(at(y)) x2=(x(*hi)) y2=(at(y)) stroke=(colour) stroke-width="2" {}
                    }
                    @match d {
                        Some(d) => {
                            circle cx=(x(*d)) cy=(at(y)) r="4" fill=(colour) {
                                title { (label) ": " (points(Some(*d))) " (" (points_ci(*ci)) ")" }
                            }
                            text x=(at(LABEL + AREA + 8.0)) y=(at(y + 4.0)) {
                                (points(Some(*d))) " [" (points_ci(*ci)) "]"
                            }
                        }
                        None => text x=(at(LABEL + AREA + 8.0)) y=(at(y + 4.0)) fill="#777" { "n/a" },
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::compare::tests::comparison;

    #[test]
    fn html_escapes_every_name_by_construction() {
        let hostile = "<script>alert('x')</script>&\"";
        let drop = VariantDrop {
            variant: "typos".into(),
            a: "a/x".into(),
            b: hostile.into(),
            a_run_id: 1,
            b_run_id: 2,
            pairs: 2,
            a_difference: -0.5,
            b_difference: 0.0,
            a_difference_ci: None,
            b_difference_ci: Some([0.0, 0.0]),
            difference: -0.5,
            difference_ci: Some([-1.0, 0.0]),
        };
        let page = render(&comparison(hostile), &[drop]);
        assert!(!page.contains("<script"), "{page}");
        assert!(page.contains("&lt;script&gt;alert('x')&lt;/script&gt;&amp;&quot;"));
        assert_eq!(page.matches("data-chart=\"forest\"").count(), 1);
        assert!(page.contains("data-table=\"leaderboard\""));
        // Parsed back, the name is the text it was, in the leaderboard,
        // the verdicts and the forest plot's caption.
        let doc = scraper::Html::parse_document(&page);
        let sel = |css: &str| scraper::Selector::parse(css).unwrap();
        assert_eq!(doc.select(&sel("script")).count(), 0);
        let drop_cells: Vec<String> = doc
            .select(&sel("table[data-table=variant-drops] td"))
            .map(|e| e.text().collect())
            .collect();
        assert_eq!(
            drop_cells[3..],
            [
                "2",
                "-50.0",
                "n/a",
                "+0.0",
                "+0.0 to +0.0",
                "-50.0",
                "-100.0 to +0.0"
            ]
        );
        for css in [
            "table[data-table=leaderboard] td",
            "table[data-table=pairs] td",
            "table[data-table=variant-drops] td",
            "figcaption",
        ] {
            assert!(
                doc.select(&sel(css))
                    .any(|e| e.text().collect::<String>().contains(hostile)),
                "{css}: {page}"
            );
        }
    }
}
