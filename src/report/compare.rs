//! `compare`: reads the compared runs' results from the store into a
//! [`Collector`] (one run at a time, reply text never read), and renders the
//! [`Comparison`] the statistics of [`crate::scoring::compare`] make of them
//! as terminal tables or JSON for scripts; the HTML page is
//! [`crate::report::html::compare`].

use std::io::{self, Write};

use super::format::{p_value, pct, pct_ci, points, points_ci};
use super::robustness;
use super::terminal::{fitted, table};
use crate::domain::RunRecord;
use crate::scoring::compare::{Collector, Comparison, RunLabel};
use crate::store::{Store, StoreError};

/// Excluded test cases the table lists before "and N more".
pub const EXCLUDED_SHOWN: usize = 20;

/// Runs whose results are read at once: SQLite packs one while the
/// collector takes in the one before (two cores' worth).
const READ_AHEAD: usize = 2;

/// Reads the results of `runs` into a [`Collector`], in the order given,
/// [`READ_AHEAD`] runs at a time.
pub async fn collect(store: &Store, runs: &[RunRecord]) -> Result<Collector, StoreError> {
    Ok(collect_with_variants(store, runs).await?.0)
}

/// [`collect`], and each pair of runs' drops under the variants of the
/// user's words they share ([`robustness::drops`]); only runs with
/// variants keep their results for it.
pub async fn collect_with_variants(
    store: &Store,
    runs: &[RunRecord],
) -> Result<(Collector, Vec<robustness::VariantDrop>), StoreError> {
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
    let mut with_variants = Vec::new();
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
            .map_err(|e| StoreError::Integrity {
                message: format!("reading run {}: {e}", runs[i].run_id),
                source: Some(Box::new(e)),
            })??;
        if let Some(next) = runs.get(i + READ_AHEAD) {
            pending.push_back(read(next.run_id));
        }
        // The originals alone, as `report` scores them: a variant of the
        // user's words (`~name`, issue 43) is compared apart.
        let mut any_varied = false;
        for row in &rows {
            if crate::benchmark::vary::split_code(&row.test_code)
                .1
                .is_none()
            {
                collector.add(i, row);
            } else {
                any_varied = true;
            }
        }
        if any_varied {
            with_variants.push((runs[i].model.clone(), runs[i].run_id, rows));
        }
    }
    Ok((collector, robustness::drops(&with_variants)))
}

/// `1 test case`, `2 test cases`.
fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// One sentence on what was compared, and what was left out.
pub fn summary(c: &Comparison) -> String {
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

fn score_of(c: &Comparison, run_id: i64) -> Option<f64> {
    c.leaderboard
        .iter()
        .find(|s| s.run_id == run_id)
        .and_then(|s| s.score)
}

/// The JSON scripts read: the [`Comparison`] as it is.
pub fn write_json(
    o: &mut dyn Write,
    c: &Comparison,
    drops: &[robustness::VariantDrop],
) -> io::Result<()> {
    let mut v = serde_json::to_value(c)?;
    if !drops.is_empty() {
        v["variants"] = serde_json::to_value(drops)?;
    }
    serde_json::to_writer_pretty(&mut *o, &v)?;
    writeln!(o)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::benchmark::ScoringConfig;
    use crate::scoring::compare::Options;
    use crate::scoring::compare::tests::res;

    /// Two runs over one perturbation of P1-B1 under two conditions; `model`
    /// names the second.
    pub fn comparison(model: &str) -> Comparison {
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
