//! `compare`: reads the compared runs' results from the store into a
//! [`Collector`] (one run at a time, reply text never read), and renders the
//! [`Comparison`] the statistics of [`crate::scoring::compare`] make of them
//! as terminal tables, JSON for scripts, or one self-contained HTML page (a
//! leaderboard and a forest plot of the pairwise differences per behaviour,
//! inline SVG, no script). Every string from data goes through
//! [`html::escape`] in the page.

use std::fmt::{self, Write as _};
use std::io::{self, Write};

use super::format::{escape, p_value, pct};
use super::html;
use super::terminal::{fitted, table};
use crate::domain::RunRecord;
use crate::scoring::compare::{Collector, Comparison, Pair, RunLabel};
use crate::store::{Store, StoreError};

/// Excluded test cases the table lists before "and N more".
pub const EXCLUDED_SHOWN: usize = 20;

/// Runs whose results are read at once: SQLite packs one while the
/// collector takes in the one before (two cores' worth).
const READ_AHEAD: usize = 2;

/// Reads the results of `runs` into a [`Collector`], in the order given,
/// [`READ_AHEAD`] runs at a time.
pub async fn collect(store: &Store, runs: &[RunRecord]) -> Result<Collector, StoreError> {
    let mut collector = Collector::new(
        runs.iter()
            .map(|r| RunLabel {
                run_id: r.run_id,
                model: r.model.clone(),
            })
            .collect(),
    );
    let read = |run_id: i64| {
        let store = store.clone();
        tokio::spawn(async move { store.scoring_results(run_id).await })
    };
    let mut pending: std::collections::VecDeque<_> = runs
        .iter()
        .take(READ_AHEAD)
        .map(|r| read(r.run_id))
        .collect();
    for i in 0..runs.len() {
        let rows = pending
            .pop_front()
            .expect("one read per run")
            .await
            .map_err(|e| StoreError::Integrity(format!("reading run {}: {e}", runs[i].run_id)))??;
        if let Some(next) = runs.get(i + READ_AHEAD) {
            pending.push_back(read(next.run_id));
        }
        for row in rows {
            collector.add(i, &row);
        }
    }
    Ok(collector)
}

/// A difference in percentage points: `+12.5`, or `n/a`.
fn points(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |v| format!("{:+.1}", v * 100.0))
}

fn pct_ci(ci: Option<[f64; 2]>) -> String {
    ci.map_or_else(
        || "n/a".into(),
        |[lo, hi]| format!("{:.1}–{:.1} %", lo * 100.0, hi * 100.0),
    )
}

fn points_ci(ci: Option<[f64; 2]>) -> String {
    ci.map_or_else(
        || "n/a".into(),
        |[lo, hi]| format!("{:+.1} to {:+.1}", lo * 100.0, hi * 100.0),
    )
}

/// `1 test case`, `2 test cases`.
fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

fn summary(c: &Comparison) -> String {
    format!(
        "Compared {} on {} ({}) that every one of them answered and scored; {} excluded, {} left out.",
        count(c.leaderboard.len(), "run"),
        count(c.test_cases, "test case"),
        count(c.perturbations, "perturbation"),
        count(c.excluded_test_cases.len(), "test case"),
        count(c.excluded_runs.len(), "run")
    )
}

/// The terminal tables: leaderboard, every pair by behaviour, what was left
/// out, and how the numbers were made.
pub fn write_text(o: &mut dyn Write, c: &Comparison) -> io::Result<()> {
    writeln!(o, "{}\n", summary(c))?;
    writeln!(o, "Leaderboard")?;
    let mut t = table([
        "rank",
        "model",
        "run",
        "score",
        "95 % CI",
        "rank 95 % range",
        "ranked first",
    ]);
    for s in &c.leaderboard {
        t.add_row([
            s.rank.to_string(),
            s.label.clone(),
            s.run_id.to_string(),
            pct(s.score),
            pct_ci(s.ci),
            format!("{}–{}", s.rank_ci[0], s.rank_ci[1]),
            format!("{:.1} %", s.first * 100.0),
        ]);
    }
    writeln!(o, "{}\n", fitted(t))?;

    writeln!(
        o,
        "Pairs (A − B in percentage points; positive: A scores higher)"
    )?;
    let mut t = table([
        "A",
        "B",
        "behaviour",
        "A score",
        "B score",
        "A − B",
        "95 % CI",
        "A only / B only",
        "p",
        "p (Holm)",
        "verdict",
    ]);
    for p in &c.pairs {
        t.add_row([
            p.a.clone(),
            p.b.clone(),
            "all (weighted)".into(),
            pct(score_of(c, p.a_run_id)),
            pct(score_of(c, p.b_run_id)),
            points(p.difference),
            points_ci(p.ci),
            format!("{} / {}", p.a_only, p.b_only),
            p_value(p.p),
            "".into(),
            p.verdict.clone(),
        ]);
        for b in &p.behaviours {
            t.add_row([
                String::new(),
                String::new(),
                b.code.clone(),
                pct(b.a_score),
                pct(b.b_score),
                points(b.difference),
                points_ci(b.ci),
                format!("{} / {}", b.a_only, b.b_only),
                p_value(b.p),
                p_value(b.p_holm),
                b.verdict.clone(),
            ]);
        }
    }
    writeln!(o, "{}", fitted(t))?;
    let unsettled: Vec<String> = c
        .pairs
        .iter()
        .flat_map(|p| {
            let all = p
                .reason
                .as_ref()
                .map(|r| format!("{} vs {}, all: {r}", p.a, p.b));
            all.into_iter().chain(p.behaviours.iter().filter_map(|b| {
                b.reason
                    .as_ref()
                    .map(|r| format!("{} vs {}, {}: {r}", p.a, p.b, b.code))
            }))
        })
        .collect();
    if !unsettled.is_empty() {
        writeln!(o, "\nWhy no verdict:")?;
        for line in unsettled {
            writeln!(o, "  {line}")?;
        }
    }

    if !c.excluded_runs.is_empty() {
        writeln!(o, "\nRuns left out:")?;
        for r in &c.excluded_runs {
            writeln!(o, "  run {} ({}) {}", r.run_id, r.model, r.reason)?;
        }
    }
    if !c.excluded_test_cases.is_empty() {
        writeln!(
            o,
            "\nExcluded test cases ({}), not answered and scored by every run:",
            c.excluded_test_cases.len()
        )?;
        for e in c.excluded_test_cases.iter().take(EXCLUDED_SHOWN) {
            writeln!(o, "  {}: {}", e.test_code, e.reasons.join("; "))?;
        }
        if c.excluded_test_cases.len() > EXCLUDED_SHOWN {
            writeln!(
                o,
                "  … and {} more (--format json lists every one)",
                c.excluded_test_cases.len() - EXCLUDED_SHOWN
            )?;
        }
    }
    writeln!(o, "\nMethod:")?;
    for n in &c.method.notes {
        writeln!(o, "  - {n}")?;
    }
    Ok(())
}

/// A verdict cell of the page: the verdict, and why there is none.
fn verdict_html(verdict: &str, reason: Option<&str>) -> String {
    match reason {
        Some(r) => format!(
            "{}<br><small class=\"reason\">{}</small>",
            escape(verdict),
            escape(r)
        ),
        None => escape(verdict),
    }
}

fn score_of(c: &Comparison, run_id: i64) -> Option<f64> {
    c.leaderboard
        .iter()
        .find(|s| s.run_id == run_id)
        .and_then(|s| s.score)
}

/// The JSON scripts read: the [`Comparison`] as it is.
pub fn write_json(o: &mut dyn Write, c: &Comparison) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *o, c)?;
    writeln!(o)
}

/// The self-contained HTML page.
pub fn render_html(c: &Comparison) -> String {
    let mut out = String::new();
    write_html(&mut out, c).expect("writing to a String cannot fail");
    out
}

fn write_html(out: &mut String, c: &Comparison) -> fmt::Result {
    writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"generator\" content=\"helmbench {}\">\n<title>HELMBench comparison</title>\n\
         <style>\n{}</style>\n</head>\n<body>\n<h1>HELMBench comparison</h1>",
        env!("CARGO_PKG_VERSION"),
        html::CSS
    )?;
    writeln!(out, "<p class=\"note\">{}</p>", escape(&summary(c)))?;
    writeln!(out, "<ul class=\"note\">")?;
    for n in &c.method.notes {
        writeln!(out, "<li>{}</li>", escape(n))?;
    }
    writeln!(out, "</ul>")?;

    writeln!(
        out,
        "<h2>Leaderboard</h2>\n<table data-table=\"leaderboard\">\n<tr><th>Rank</th><th>Model</th>\
         <th>Run</th><th>Score</th><th>95 % CI</th><th>Rank 95 % range</th><th>Ranked first</th></tr>"
    )?;
    for s in &c.leaderboard {
        writeln!(
            out,
            "<tr><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}&ndash;{}</td><td class=\"num\">{:.1} %</td></tr>",
            s.rank,
            escape(&s.label),
            s.run_id,
            escape(&pct(s.score)),
            escape(&pct_ci(s.ci)),
            s.rank_ci[0],
            s.rank_ci[1],
            s.first * 100.0
        )?;
    }
    writeln!(out, "</table>")?;

    writeln!(
        out,
        "<h2>Pairwise differences</h2>\n<p class=\"note\">Each row: A&rsquo;s score minus B&rsquo;s \
         in percentage points, the dot the difference and the line its 95 % interval. Dark rows \
         carry a verdict: the interval excludes 0 and McNemar&rsquo;s p (Holm-adjusted for a \
         behaviour) is below {}, on the same side, over at least {} discordant test cases.</p>",
        crate::scoring::compare::ALPHA,
        crate::scoring::compare::MIN_DISCORDANT
    )?;
    let half = axis_half_width(c);
    for p in &c.pairs {
        forest(out, p, half)?;
    }

    writeln!(
        out,
        "<h2>Verdicts</h2>\n<table data-table=\"pairs\">\n<tr><th>A</th><th>B</th><th>Behaviour</th>\
         <th>A &minus; B</th><th>95 % CI</th><th>A only / B only</th><th>p</th><th>p (Holm)</th><th>Verdict</th></tr>"
    )?;
    for p in &c.pairs {
        writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>all (weighted)</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{} / {}</td><td class=\"num\">{}</td><td></td><td>{}</td></tr>",
            escape(&p.a),
            escape(&p.b),
            escape(&points(p.difference)),
            escape(&points_ci(p.ci)),
            p.a_only,
            p.b_only,
            escape(&p_value(p.p)),
            verdict_html(&p.verdict, p.reason.as_deref())
        )?;
        for b in &p.behaviours {
            writeln!(
                out,
                "<tr><td></td><td></td><td class=\"code\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{} / {}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                escape(&b.code),
                escape(&points(b.difference)),
                escape(&points_ci(b.ci)),
                b.a_only,
                b.b_only,
                escape(&p_value(b.p)),
                escape(&p_value(b.p_holm)),
                verdict_html(&b.verdict, b.reason.as_deref())
            )?;
        }
    }
    writeln!(out, "</table>")?;

    if !c.excluded_runs.is_empty() || !c.excluded_test_cases.is_empty() {
        writeln!(out, "<h2>Left out</h2>")?;
        if !c.excluded_runs.is_empty() {
            writeln!(out, "<ul data-table=\"excluded-runs\">")?;
            for r in &c.excluded_runs {
                writeln!(
                    out,
                    "<li>run {} ({}) {}</li>",
                    r.run_id,
                    escape(&r.model),
                    escape(&r.reason)
                )?;
            }
            writeln!(out, "</ul>")?;
        }
        if !c.excluded_test_cases.is_empty() {
            writeln!(
                out,
                "<table data-table=\"excluded-test-cases\">\n<tr><th>Test case</th><th>Why</th></tr>"
            )?;
            for e in &c.excluded_test_cases {
                writeln!(
                    out,
                    "<tr><td class=\"code\">{}</td><td>{}</td></tr>",
                    escape(&e.test_code),
                    escape(&e.reasons.join("; "))
                )?;
            }
            writeln!(out, "</table>")?;
        }
    }
    writeln!(out, "</body>\n</html>")
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
fn forest(out: &mut String, p: &Pair, half: f64) -> fmt::Result {
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
    let x = |v: f64| LABEL + (v.clamp(-half, half) + half) / (2.0 * half) * AREA;
    writeln!(
        out,
        "<figure><figcaption>{} &minus; {}</figcaption>\n<svg class=\"chart\" data-chart=\"forest\" \
         viewBox=\"0 0 {width} {height}\" width=\"{width}\" height=\"{height}\" role=\"img\" \
         aria-label=\"Score differences of {} and {} with 95 % intervals\">",
        escape(&p.a),
        escape(&p.b),
        escape(&p.a),
        escape(&p.b)
    )?;
    for tick in [-half, -half / 2.0, 0.0, half / 2.0, half] {
        let stroke = if tick == 0.0 { "#888" } else { "#ddd" };
        writeln!(
            out,
            "<line x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{2}\" stroke=\"{stroke}\"/>\
             <text x=\"{0:.1}\" y=\"14\" text-anchor=\"middle\">{3:+.0}</text>",
            x(tick),
            TOP - 6.0,
            height - 4.0,
            tick * 100.0
        )?;
    }
    for (i, (label, d, ci, verdict)) in rows.iter().enumerate() {
        let y = TOP + ROW * i as f64 + ROW / 2.0;
        let colour = if *verdict { "#1f4e9c" } else { "#999" };
        writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LABEL - 6.0,
            y + 4.0,
            escape(label)
        )?;
        if let Some([lo, hi]) = ci {
            writeln!(
                out,
                "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{colour}\" stroke-width=\"2\"/>",
                x(*lo),
                x(*hi)
            )?;
        }
        match d {
            Some(d) => writeln!(
                out,
                "<circle cx=\"{:.1}\" cy=\"{y:.1}\" r=\"4\" fill=\"{colour}\"><title>{}: {} ({})</title></circle>\
                 <text x=\"{:.1}\" y=\"{:.1}\">{} [{}]</text>",
                x(*d),
                escape(label),
                escape(&points(Some(*d))),
                escape(&points_ci(*ci)),
                LABEL + AREA + 8.0,
                y + 4.0,
                escape(&points(Some(*d))),
                escape(&points_ci(*ci))
            )?,
            None => writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#777\">n/a</text>",
                LABEL + AREA + 8.0,
                y + 4.0
            )?,
        }
    }
    writeln!(out, "</svg></figure>")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::benchmark::ScoringConfig;
    use crate::scoring::compare::Options;
    use crate::scoring::compare::tests::res;

    /// Two runs over one perturbation of P1-B1 under two conditions; `model`
    /// names the second.
    fn comparison(model: &str) -> Comparison {
        let mut c = Collector::new(vec![
            RunLabel {
                run_id: 1,
                model: "a/x".into(),
            },
            RunLabel {
                run_id: 2,
                model: model.into(),
            },
        ]);
        for (run, passed) in [(0, true), (1, false)] {
            for condition in ["C1", "C2"] {
                c.add(run, &res(&format!("P1-B1-S1-{condition}-PT1"), 5.0, passed));
            }
        }
        c.compare(
            &ScoringConfig::default(),
            Options {
                resamples: 50,
                seed: 1,
            },
        )
        .unwrap()
    }

    #[test]
    fn html_escapes_every_name_by_construction() {
        let hostile = "<script>alert('x')</script>&\"";
        let page = render_html(&comparison(hostile));
        assert!(!page.contains("<script"), "{page}");
        assert!(page.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"));
        assert_eq!(page.matches("data-chart=\"forest\"").count(), 1);
        assert!(page.contains("data-table=\"leaderboard\""));
    }

    #[test]
    fn text_shows_the_leaderboard_pairs_and_method() {
        let mut out = Vec::new();
        write_text(&mut out, &comparison("b/y")).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with(
            "Compared 2 runs on 2 test cases (1 perturbation) that every one of them answered and scored; 0 test cases excluded, 0 runs left out."
        ));
        // a passes both, b fails both: 100 points apart, 2 discordant pairs.
        assert!(text.contains("+100.0"), "{text}");
        assert!(text.contains("2 / 0"), "{text}");
        assert!(text.contains("whole perturbations"), "{text}");
    }
}
