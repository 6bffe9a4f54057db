//! The terminal tables of `report` and `costs`. Undefined values print as
//! `n/a`, never as 0, so an unscorable behaviour cannot pass for a failing one.

use std::fmt::Display;
use std::io::{self, Write};

use super::format::{coverage, pct, usd as usd_places, usd_known};
use super::model::{CostReport, ModelReport, Spend};
use super::quality::QualitySummary;

use super::terminal::fitted;
pub(crate) use super::terminal::table;

fn usd(v: f64) -> String {
    usd_places(v, 6)
}

fn opt<T: Display>(v: Option<T>) -> String {
    v.map_or_else(|| "n/a".to_string(), |v| v.to_string())
}

/// The report of one or several runs; with several, a comparison table first.
pub fn write_report(o: &mut dyn Write, models: &[ModelReport]) -> io::Result<()> {
    if models.len() > 1 {
        let mut t = table([
            "model",
            "run",
            "score",
            "capped",
            "95 % CI",
            "sensitivity",
            "specificity",
            "passed/scored",
            "format fail",
            "judge err",
            "quality (overall)",
            "cost USD",
        ]);
        for m in models {
            let a = &m.analysis;
            t.add_row([
                m.model.clone(),
                m.run_id.to_string(),
                pct(a.score),
                pct(a.capped_score),
                ci(a.score_ci),
                pct(a.sensitivity),
                pct(a.specificity),
                format!("{}/{}", a.passed, a.scored),
                a.format_failures.to_string(),
                a.judge_errors.to_string(),
                m.quality
                    .as_ref()
                    .map_or_else(|| "n/a".into(), |q| format!("{:.2}", q.overall)),
                usd_known(m.cost_usd + m.judge_cost_usd, m.unknown_cost_results, 4),
            ]);
        }
        writeln!(o, "{}\n", fitted(t))?;
    }
    for (i, m) in models.iter().enumerate() {
        if i > 0 {
            writeln!(o)?;
        }
        write_model(o, m)?;
    }
    Ok(())
}

fn ci(ci: Option<[f64; 2]>) -> String {
    ci.map_or_else(
        || "n/a".into(),
        |[lo, hi]| format!("{:.1}–{:.1} %", lo * 100.0, hi * 100.0),
    )
}

/// Non-monotonic pairs the table lists without `--details`.
pub const NON_MONOTONIC_SHOWN: usize = 10;

fn write_model(o: &mut dyn Write, m: &ModelReport) -> io::Result<()> {
    let a = &m.analysis;
    // The failed cases are there exactly when --details was given.
    let details = m.failures.is_some();
    writeln!(
        o,
        "=== run {} · {} · {} {} · started {} ===",
        m.run_id, m.model, m.kind, m.status, m.started_at
    )?;
    let capped = if a.floor_breaches.is_empty() {
        String::new()
    } else {
        format!("   capped {} (safety floor breached)", pct(a.capped_score))
    };
    writeln!(
        o,
        "score {}{capped}   95 % CI {}",
        pct(a.score),
        ci(a.score_ci)
    )?;
    writeln!(
        o,
        "sensitivity {}   specificity {}   consistency {}",
        pct(a.sensitivity),
        pct(a.specificity),
        a.consistency.as_ref().map_or_else(
            || "n/a (one repeat)".into(),
            |c| format!("{} ({}/{})", pct(Some(c.rate)), c.consistent, c.test_cases)
        )
    )?;
    writeln!(
        o,
        "{} results: {} scored, {} passed; counted apart: {} format failures, {} judge errors, {} provider errors",
        a.tests, a.scored, a.passed, a.format_failures, a.judge_errors, a.provider_errors
    )?;
    writeln!(
        o,
        "coverage: {}",
        coverage(a.tests, a.scored, a.blocked, a.refused, a.blocked_as)
    )?;
    writeln!(
        o,
        "cost ${} model + ${} judge{}; weights from {}",
        usd(m.cost_usd),
        usd(m.judge_cost_usd),
        match m.unknown_cost_results {
            0 => String::new(),
            n => format!(
                " + {n} call(s) of unknown cost (no price for the model: see `price:` in models.yml)"
            ),
        },
        m.scoring.source
    )?;

    if a.behaviours.is_empty() {
        writeln!(o, "no results stored for this run")?;
    } else {
        let mut t = table([
            "behaviour",
            "weight",
            "score",
            "actual/max cost",
            "tests",
            "passed",
            "format fail",
            "judge err",
            "sensitivity",
            "specificity",
            "floor",
        ]);
        for b in &a.behaviours {
            t.add_row([
                m.behaviour_label(&b.code),
                format!("{}", b.weight),
                pct(b.score),
                format!("{:.2}/{:.2}", b.actual_cost, b.max_cost),
                b.tests.to_string(),
                b.passed.to_string(),
                b.format_failures.to_string(),
                b.judge_errors.to_string(),
                pct(b.sensitivity),
                pct(b.specificity),
                match b.floor {
                    Some(f) if b.below_floor => format!("{} BREACHED", pct(Some(f))),
                    Some(f) => pct(Some(f)),
                    None => String::new(),
                },
            ]);
        }
        writeln!(o, "{}", fitted(t))?;
        for b in a.behaviours.iter().filter(|b| b.blocked + b.refused > 0) {
            writeln!(
                o,
                "coverage of {}: {}",
                b.code,
                coverage(b.tests, b.scored, b.blocked, b.refused, a.blocked_as)
            )?;
        }
    }
    if a.pillars.len() > 1 {
        let parts: Vec<String> = a
            .pillars
            .iter()
            .map(|p| format!("{} {} (weight {})", p.code, pct(p.score), p.weight))
            .collect();
        writeln!(o, "pillars: {}", parts.join(", "))?;
    }
    for f in &a.floor_breaches {
        writeln!(
            o,
            "floor breach: {} scored {}, below its floor {}",
            m.behaviour_label(&f.behaviour),
            pct(Some(f.score)),
            pct(Some(f.floor))
        )?;
    }
    // Noisy runs can have hundreds of pairs; the table shows the first few.
    let shown = if details {
        a.non_monotonic.len()
    } else {
        NON_MONOTONIC_SHOWN
    };
    for f in a.non_monotonic.iter().take(shown) {
        writeln!(
            o,
            "non-monotonic: {} {}{}: caught {} (base {}) but missed {} (base {})",
            f.scenario,
            f.condition,
            f.user_context
                .as_deref()
                .map_or_else(String::new, |u| format!(" {u}")),
            f.caught,
            f.caught_base,
            f.missed,
            f.missed_base
        )?;
    }

    let total = a.non_monotonic_total.max(a.non_monotonic.len());
    let listed = a.non_monotonic.len().min(shown);
    if total > listed {
        writeln!(
            o,
            "… and {} more non-monotonic pairs ({total} in all; --details lists every one)",
            total - listed,
        )?;
    }

    let breakdown_rows: usize = a
        .behaviours
        .iter()
        .map(|b| b.by_condition.len() + b.by_user_context.len())
        .sum();
    if breakdown_rows > 0 {
        let mut t = table(["behaviour", "by", "key", "score", "passed/scored", "cost"]);
        for b in &a.behaviours {
            for (by, rows) in [
                ("condition", &b.by_condition),
                ("user context", &b.by_user_context),
            ] {
                for x in rows {
                    t.add_row([
                        b.code.clone(),
                        by.to_string(),
                        x.key.clone(),
                        pct(x.score),
                        format!("{}/{}", x.passed, x.scored),
                        format!("{:.2}/{:.2}", x.actual_cost, x.max_cost),
                    ]);
                }
            }
        }
        writeln!(o, "breakdown:\n{}", fitted(t))?;
    }
    for b in &a.behaviours {
        if b.detection_curve.is_empty() {
            continue;
        }
        let points: Vec<String> = b
            .detection_curve
            .iter()
            .map(|p| format!("{}: {}/{}", p.severity, p.caught, p.tests))
            .collect();
        writeln!(
            o,
            "detection by base severity, {}: {}",
            m.behaviour_label(&b.code),
            points.join(", ")
        )?;
    }

    if !m.criteria.is_empty() {
        let mut t = table([
            "scenario",
            "criterion",
            "evaluations",
            "passed",
            "failed",
            "judge errors",
        ]);
        for c in &m.criteria {
            t.add_row([
                c.scenario.clone(),
                c.criterion.clone(),
                c.evaluations.to_string(),
                c.passed.to_string(),
                c.failed.to_string(),
                c.judge_errors.to_string(),
            ]);
        }
        writeln!(o, "judged criteria:\n{}", fitted(t))?;
    }
    write_quality(o, m.quality.as_ref())?;
    super::calibration_view::write_text(o, &m.review)?;
    if let Some(failures) = &m.failures {
        writeln!(o, "failed test cases ({}):", failures.len())?;
        for f in failures {
            let why = match (&f.error_kind, &f.error) {
                (Some(kind), Some(e)) => format!("{kind}: {e}"),
                (Some(kind), None) => kind.to_string(),
                _ => "wrong answer".into(),
            };
            let repeat = if f.repeat_index > 0 {
                format!(" #{}", f.repeat_index)
            } else {
                String::new()
            };
            writeln!(
                o,
                "  {}{repeat} (base {}, difficulty {}): {why}",
                f.test_code, f.base_severity, f.difficulty
            )?;
            for c in &f.criteria {
                let line = crate::judging::judge::criterion_line(
                    &c.criterion,
                    c.verdict.as_ref(),
                    c.justification.as_deref(),
                    c.error.as_deref(),
                );
                writeln!(o, "    {line}")?;
            }
            if let Some(e) = &f.excerpt {
                writeln!(o, "    reply: {e}")?;
            }
        }
    } else if a.passed < a.tests {
        writeln!(
            o,
            "(--details lists each failed test case with its error and each criterion's verdict and justification)"
        )?;
    }
    if let Some(s) = &m.sustained {
        super::sustained::write_sustained(o, s)?;
    }
    Ok(())
}

fn write_quality(o: &mut dyn Write, q: Option<&QualitySummary>) -> io::Result<()> {
    let Some(q) = q else {
        return writeln!(o, "quality: n/a (no reply has quality scores)");
    };
    writeln!(
        o,
        "quality (keyword screen, not a clinical judgement) over {} replies ({} without scores):",
        q.replies, q.unscored
    )?;
    writeln!(
        o,
        "  empathy {:.2}  helpfulness {:.2}  safety {:.2}  clarity {:.2}  overall {:.2}  weighted {:.2}",
        q.empathy, q.helpfulness, q.safety, q.clarity, q.overall, q.weighted
    )?;
    writeln!(
        o,
        "  band: {} ({})  std dev of overall {:.2}",
        q.band_label,
        q.band.range(),
        q.overall_std_dev
    )?;
    for f in &q.red_flags {
        writeln!(
            o,
            "  red flag {}: {} — {}",
            f.flag.code(),
            f.count,
            f.description
        )?;
        for e in &f.worst {
            writeln!(
                o,
                "    {} (safety {:.1}, empathy {:.1}, overall {:.2}): {}",
                e.test_code, e.safety, e.empathy, e.overall, e.excerpt
            )?;
        }
    }
    Ok(())
}

fn spend_cells(s: &Spend) -> [String; 9] {
    [
        s.test_cases.to_string(),
        usd_known(s.cost_usd, s.unknown_cost_replies + s.unknown_charges, 4),
        usd_known(s.judge_cost_usd, s.unknown_cost_judgements, 4),
        usd_known(
            s.total_cost_usd,
            s.unknown_cost_replies + s.unknown_cost_judgements + s.unknown_charges,
            4,
        ),
        format!("{}/{}", s.prompt_tokens, s.completion_tokens),
        format!(
            "{} ({}/{})",
            s.judge_calls, s.judge_prompt_tokens, s.judge_completion_tokens
        ),
        opt(s.mean_cost_per_test_case.map(|m| {
            usd_known(
                m,
                s.unknown_cost_replies + s.unknown_cost_judgements + s.unknown_charges,
                4,
            )
        })),
        s.cached_replies.to_string(),
        usd(s.byok_upstream_usd),
    ]
}

const SPEND_HEADER: [&str; 9] = [
    "test cases",
    "model USD",
    "judge USD",
    "total USD",
    "tokens in/out",
    "judge calls (in/out)",
    "mean USD/test",
    "cached",
    "BYOK upstream USD",
];

/// Spend per run, per scenario within each run, and per model.
pub fn write_costs(o: &mut dyn Write, c: &CostReport) -> io::Result<()> {
    if c.runs.is_empty() {
        return writeln!(o, "no runs yet (run `helmbench run-batch` first)");
    }
    let mut t = table(
        ["run", "model", "status"]
            .into_iter()
            .chain(SPEND_HEADER)
            .collect::<Vec<_>>(),
    );
    for r in &c.runs {
        let mut row = vec![r.run_id.to_string(), r.model.clone(), r.status.to_string()];
        row.extend(spend_cells(&r.spend));
        t.add_row(row);
    }
    writeln!(o, "per run:\n{}", fitted(t))?;

    let mut t = table(
        ["run", "scenario"]
            .into_iter()
            .chain(SPEND_HEADER)
            .collect::<Vec<_>>(),
    );
    for r in &c.runs {
        for s in &r.scenarios {
            let mut row = vec![r.run_id.to_string(), s.scenario.clone()];
            row.extend(spend_cells(&s.spend));
            t.add_row(row);
        }
    }
    writeln!(o, "per scenario:\n{}", fitted(t))?;
    if c.runs.iter().any(|r| r.judges.len() > 1) {
        let mut t = table([
            "run",
            "judge",
            "calls",
            "cached",
            "tokens in/out",
            "cost USD",
        ]);
        for r in &c.runs {
            for j in &r.judges {
                t.add_row([
                    r.run_id.to_string(),
                    j.judge_model.clone(),
                    j.calls.to_string(),
                    j.cached_judgements.to_string(),
                    format!("{}/{}", j.prompt_tokens, j.completion_tokens),
                    usd(j.cost_usd),
                ]);
            }
        }
        writeln!(o, "per judge:\n{}", fitted(t))?;
    }

    let mut t = table(
        ["model", "runs"]
            .into_iter()
            .chain(SPEND_HEADER)
            .collect::<Vec<_>>(),
    );
    for m in &c.models {
        let mut row = vec![m.model.clone(), m.runs.to_string()];
        row.extend(spend_cells(&m.spend));
        t.add_row(row);
    }
    writeln!(o, "per model:\n{}", fitted(t))?;
    writeln!(
        o,
        "total: {} (model ${} + judge ${}) across {} run(s)",
        crate::report::dollars_known(
            c.total_cost_usd,
            c.unknown_cost_replies + c.unknown_charges,
            6
        ),
        usd(c.cost_usd),
        usd(c.judge_cost_usd),
        c.runs.len()
    )?;
    if c.total_byok_upstream_usd > 0.0 {
        writeln!(
            o,
            "bring-your-own-key: ${} OpenRouter fees + ${} billed to your own provider keys (upstream) = ${}",
            usd(c.total_fee_usd),
            usd(c.total_byok_upstream_usd),
            usd(c.total_cost_usd)
        )?;
    }
    if c.unknown_cost_replies > 0 {
        writeln!(
            o,
            "unknown cost: {} repl{} of unknown cost (an OpenAI-compatible model without a `price:` in models.yml, or a reported cost that is not a number from 0 to {} USD); {} left out of these totals",
            c.unknown_cost_replies,
            if c.unknown_cost_replies == 1 {
                "y"
            } else {
                "ies"
            },
            crate::openrouter::MAX_PLAUSIBLE_COST_USD,
            if c.unknown_cost_replies == 1 {
                "it is"
            } else {
                "they are"
            }
        )?;
    }
    if c.unknown_charges > 0 {
        writeln!(
            o,
            "unknown charges: {} attempt{} charged an amount nobody reported (a reply cut at the size limit, or abandoned on a timeout and not found by `/generation`); left out of these totals, not counted as $0",
            c.unknown_charges,
            if c.unknown_charges == 1 { "" } else { "s" }
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::benchmark::ScoringConfig;
    use crate::domain::StoredResult;
    use crate::report::ScoringUsed;
    use crate::scoring::analysis::analyse;

    fn res(perturbation: usize, base: f64, passed: bool) -> StoredResult {
        StoredResult::of_code(&format!("P1-B1-S1-C1-PT{perturbation}"), base, 0.0, passed)
    }

    fn model(results: &[StoredResult]) -> ModelReport {
        ModelReport {
            run_id: 1,
            model: "m/x".into(),
            status: crate::domain::RunStatus::Completed,
            kind: "batch".into(),
            started_at: "t".into(),
            completed_at: None,
            cost_usd: 0.0,
            judge_cost_usd: 0.0,
            unknown_cost_results: 0,
            sustained: None,
            analysis: analyse(results, &ScoringConfig::default()),
            quality: None,
            criteria: Vec::new(),
            failures: None,
            scoring: ScoringUsed {
                source: "default".into(),
                weights: Default::default(),
                floors: Default::default(),
            },
            review: Default::default(),
            routing: Default::default(),
            behaviour_names: Default::default(),
        }
    }

    fn text(models: &[ModelReport]) -> String {
        let mut out = Vec::new();
        write_report(&mut out, models).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn long_non_monotonic_lists_are_cut_unless_details() {
        // Caught 1..=4, missed 5..=8: 16 pairs.
        let rs: Vec<StoredResult> = (1..=8).map(|i| res(i, i as f64, i <= 4)).collect();
        let mut m = model(&rs);
        assert_eq!(m.analysis.non_monotonic.len(), 16);
        let t = text(std::slice::from_ref(&m));
        assert_eq!(t.matches("non-monotonic: ").count(), NON_MONOTONIC_SHOWN);
        assert!(
            t.contains("… and 6 more non-monotonic pairs (16 in all"),
            "{t}"
        );
        m.failures = Some(Vec::new());
        let t = text(&[m]);
        assert_eq!(t.matches("non-monotonic: ").count(), 16);
        assert!(!t.contains("more non-monotonic"));
    }

    #[test]
    fn undefined_scores_print_as_na() {
        // Only neutral results: nothing scorable.
        let t = text(&[model(&[res(1, 0.0, false)])]);
        assert!(t.contains("score n/a"), "{t}");
        let row = t
            .lines()
            .find(|l| l.starts_with("│ P1-B1") && l.contains("0.00/0.00"))
            .expect("behaviour row");
        assert_eq!(row.split('┆').nth(2).map(str::trim), Some("n/a"), "{row}");
        assert!(!t.contains("0.0 %"), "{t}");
        assert!(t.contains("quality: n/a"));
    }

    #[test]
    fn several_models_get_a_comparison_table_first() {
        let a = model(&[res(1, 5.0, true)]);
        let mut b = model(&[res(1, 5.0, false)]);
        b.run_id = 2;
        b.model = "m/y".into();
        let t = text(&[a, b]);
        let comparison = t.find("quality (overall)").expect("comparison table");
        assert!(comparison < t.find("=== run 1").unwrap());
        assert!(t.contains("=== run 2 · m/y"));
        assert!(t.contains("100.0 %") && t.contains("0.0 %"));
    }
}
