//! The robustness section of a report (issue 43): for each variant of the
//! user's words a run asked for, the verdicts on its varied test cases
//! beside the originals' on the *same* test cases (paired by test code and
//! repeat): pass rates and severity-weighted scores, the paired difference
//! with a bootstrap interval, McNemar's exact p (Holm-adjusted across the
//! variants), the share that flipped each way, and the worst case per test
//! case. An improvement under a variant is shown and flagged: a model that
//! does better on typos is more likely a bug in the variant or the check
//! than a real effect (HELM's issue #626).

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::benchmark::ScoringConfig;
use crate::benchmark::vary::split_code;
use crate::domain::StoredResult;
use crate::scoring::Bootstrap;
use crate::scoring::analysis::{self, percentile};
use crate::scoring::compare::{holm, mcnemar_exact};

/// Resamples of the paired bootstrap, and its seed (reproducible reports).
pub const RESAMPLES: usize = 2000;
pub const SEED: u64 = 43;

/// One variant against the originals of the same test cases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantRobustness {
    pub variant: String,
    /// Pairs (test case and repeat) with a scored verdict on both sides.
    pub pairs: usize,
    /// Distinct test cases among them (the bootstrap's unit).
    pub test_cases: usize,
    pub original_pass_rate: f64,
    pub variant_pass_rate: f64,
    /// Severity-weighted scores (SPEC §8) of the same pairs, each side.
    pub original_score: Option<f64>,
    pub variant_score: Option<f64>,
    /// `variant_pass_rate - original_pass_rate` (negative: a drop).
    pub difference: f64,
    /// 95 % paired percentile-bootstrap interval of `difference` (test
    /// cases resampled, their repeats moving together).
    pub difference_ci: Option<[f64; 2]>,
    /// Pairs passed as written and failed under the variant, and the other
    /// way round (McNemar's discordant pairs).
    pub flipped_to_fail: usize,
    pub flipped_to_pass: usize,
    /// McNemar's exact two-sided p, and Holm-adjusted across the variants.
    pub p: f64,
    pub p_holm: f64,
    /// More pairs passed under the variant than as written: shown, and to
    /// be looked at (a variant should not make a model safer).
    pub improved: bool,
}

/// The robustness section of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Robustness {
    pub variants: Vec<VariantRobustness>,
    /// Test cases with at least one scored variant and a scored original.
    pub test_cases: usize,
    /// Of those, the ones passed as written and under every variant (each
    /// repeat): the worst case per test case.
    pub robustly_passed: usize,
    pub worst_case_pass_rate: f64,
    /// Passed as written but failed under some variant, in natural order.
    pub fragile: Vec<String>,
    pub bootstrap: Bootstrap,
}

/// The results of a run as written (the headline score's) and the
/// robustness section when it has varied test cases.
pub fn split(
    results: Vec<StoredResult>,
    scoring: &ScoringConfig,
) -> (Vec<StoredResult>, Option<Robustness>) {
    let (varied, originals): (Vec<_>, Vec<_>) = results
        .into_iter()
        .partition(|r| split_code(&r.test_code).1.is_some());
    let section = robustness(&originals, &varied, scoring);
    (originals, section)
}

/// The section from a run's original and varied results; None without a
/// varied result.
pub fn robustness(
    originals: &[StoredResult],
    varied: &[StoredResult],
    scoring: &ScoringConfig,
) -> Option<Robustness> {
    if varied.is_empty() {
        return None;
    }
    let by_key: BTreeMap<(&str, i64), &StoredResult> = originals
        .iter()
        .filter(|r| r.is_scored())
        .map(|r| ((r.test_code.as_str(), r.repeat_index), r))
        .collect();
    // Per variant, its pairs (original, varied) in natural order.
    let mut pairs: BTreeMap<&str, Vec<(&StoredResult, &StoredResult)>> = BTreeMap::new();
    for v in varied.iter().filter(|r| r.is_scored()) {
        let (code, Some(name)) = split_code(&v.test_code) else {
            continue;
        };
        if let Some(o) = by_key.get(&(code, v.repeat_index)) {
            pairs.entry(name).or_default().push((o, v));
        }
    }
    let mut rows: Vec<VariantRobustness> = pairs
        .iter()
        .map(|(name, p)| one_variant(name, p, scoring))
        .collect();
    let adjusted = holm(&rows.iter().map(|r| r.p).collect::<Vec<_>>());
    for (r, p) in rows.iter_mut().zip(adjusted) {
        r.p_holm = p;
    }
    // Worst case per test case: every pair of every variant.
    let mut worst: BTreeMap<&str, (bool, bool)> = BTreeMap::new();
    for (o, v) in pairs.values().flatten() {
        let e = worst.entry(o.test_code.as_str()).or_insert((true, true));
        e.0 &= o.passed;
        e.1 &= v.passed;
    }
    let robustly_passed = worst.values().filter(|(o, v)| *o && *v).count();
    let mut fragile: Vec<String> = worst
        .iter()
        .filter(|(_, (o, v))| *o && !*v)
        .map(|(c, _)| c.to_string())
        .collect();
    fragile.sort_by(|a, b| crate::benchmark::codes::natural_cmp(a, b));
    Some(Robustness {
        variants: rows,
        test_cases: worst.len(),
        robustly_passed,
        worst_case_pass_rate: rate(robustly_passed, worst.len()),
        fragile,
        bootstrap: Bootstrap::chacha8(SEED, RESAMPLES),
    })
}

fn rate(n: usize, of: usize) -> f64 {
    if of == 0 { 0.0 } else { n as f64 / of as f64 }
}

fn one_variant(
    name: &str,
    pairs: &[(&StoredResult, &StoredResult)],
    scoring: &ScoringConfig,
) -> VariantRobustness {
    let n = pairs.len();
    let passed = |side: fn(&(&StoredResult, &StoredResult)) -> bool| {
        pairs.iter().filter(|p| side(p)).count()
    };
    let original = passed(|(o, _)| o.passed);
    let variant = passed(|(_, v)| v.passed);
    let to_fail = passed(|(o, v)| o.passed && !v.passed);
    let to_pass = passed(|(o, v)| !o.passed && v.passed);
    let score = |side: Vec<StoredResult>| analysis::analyse(&side, scoring).score;
    // Per test case (its repeats together): (variant passes − original passes, pairs).
    let mut cases: BTreeMap<&str, (i64, usize)> = BTreeMap::new();
    for (o, v) in pairs {
        let e = cases.entry(o.test_code.as_str()).or_default();
        e.0 += i64::from(v.passed) - i64::from(o.passed);
        e.1 += 1;
    }
    let cases: Vec<(i64, usize)> = cases.into_values().collect();
    let p = mcnemar_exact(to_fail, to_pass);
    VariantRobustness {
        variant: name.to_string(),
        pairs: n,
        test_cases: cases.len(),
        original_pass_rate: rate(original, n),
        variant_pass_rate: rate(variant, n),
        original_score: score(pairs.iter().map(|(o, _)| (*o).clone()).collect()),
        variant_score: score(pairs.iter().map(|(_, v)| (*v).clone()).collect()),
        difference: rate(variant, n) - rate(original, n),
        difference_ci: paired_interval(&cases, SEED, RESAMPLES),
        flipped_to_fail: to_fail,
        flipped_to_pass: to_pass,
        p,
        p_holm: p,
        improved: variant > original,
    }
}

/// The 95 % percentile bootstrap of the paired difference in pass rate:
/// `resamples` times, draw as many test cases as there are with
/// replacement (in byte order of their codes, so the draw depends on the
/// verdicts and the seed only) and take Σ difference / Σ pairs. None with
/// fewer than two test cases.
pub fn paired_interval(cases: &[(i64, usize)], seed: u64, resamples: usize) -> Option<[f64; 2]> {
    if cases.len() < 2 || resamples == 0 {
        return None;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut values = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        let (mut diff, mut n) = (0i64, 0usize);
        for _ in 0..cases.len() {
            let (d, k) = cases[rng.random_range(0..cases.len())];
            diff += d;
            n += k;
        }
        values.push(diff as f64 / n as f64);
    }
    values.sort_by(f64::total_cmp);
    Some([percentile(&values, 0.025), percentile(&values, 0.975)])
}

/// The explanation under the section's tables (text and HTML).
pub const NOTE: &str = "each variant paired with the originals of the same test cases (by code and repeat); difference = varied − as written, with a 95 % paired bootstrap interval (test cases resampled); p: McNemar's exact test on the flipped pairs, Holm-adjusted across the variants; a test case is robustly passed when it passes as written and under every variant";

/// The section as text (`report`).
pub fn write_text(o: &mut dyn std::io::Write, r: &Robustness) -> std::io::Result<()> {
    use super::format::{p_value, pct, points, points_ci};
    let mut t = super::terminal::table([
        "variant",
        "pairs",
        "passed as written",
        "passed varied",
        "difference (pts)",
        "95 % CI",
        "to fail",
        "to pass",
        "p (Holm)",
        "score as written",
        "score varied",
    ]);
    for v in &r.variants {
        t.add_row([
            if v.improved {
                format!("{} (improved: look)", v.variant)
            } else {
                v.variant.clone()
            },
            v.pairs.to_string(),
            pct(Some(v.original_pass_rate)),
            pct(Some(v.variant_pass_rate)),
            points(Some(v.difference)),
            points_ci(v.difference_ci),
            v.flipped_to_fail.to_string(),
            v.flipped_to_pass.to_string(),
            format!("{} ({})", p_value(v.p), p_value(v.p_holm)),
            pct(v.original_score),
            pct(v.variant_score),
        ]);
    }
    writeln!(
        o,
        "robustness (variants of the user's words):\n{}",
        super::terminal::fitted(t)
    )?;
    writeln!(
        o,
        "worst case: {} of {} test cases robustly passed ({})",
        r.robustly_passed,
        r.test_cases,
        pct(Some(r.worst_case_pass_rate))
    )?;
    if !r.fragile.is_empty() {
        writeln!(
            o,
            "passed as written, failed under a variant: {}",
            r.fragile.join(", ")
        )?;
    }
    for v in r.variants.iter().filter(|v| v.improved) {
        writeln!(
            o,
            "look: more test cases passed under `{}` than as written ({} to pass, {} to fail): a variant should not make a model safer; check the variant's text (`helmbench prompts CODE --variants {}`) and the check",
            v.variant, v.flipped_to_pass, v.flipped_to_fail, v.variant
        )?;
    }
    writeln!(o, "({NOTE})")
}

/// Two runs' drops under one variant (`compare`, issue 43): is A's drop
/// larger than B's? Over the test cases and repeats both runs scored as
/// written and varied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantDrop {
    pub variant: String,
    pub a: String,
    pub b: String,
    pub a_run_id: i64,
    pub b_run_id: i64,
    /// Pairs (test case and repeat) all four verdicts of which are scored.
    pub pairs: usize,
    /// Each run's varied − as-written pass rate over those pairs.
    pub a_difference: f64,
    pub b_difference: f64,
    /// 95 % paired percentile bootstraps of each run's own difference, over
    /// the same pairs, resampled as `difference_ci` is.
    #[serde(default)]
    pub a_difference_ci: Option<[f64; 2]>,
    #[serde(default)]
    pub b_difference_ci: Option<[f64; 2]>,
    /// `a_difference − b_difference`: negative when A drops more.
    pub difference: f64,
    /// 95 % paired percentile bootstrap of `difference` (test cases
    /// resampled, in byte order of their codes; ChaCha8, [`SEED`]).
    pub difference_ci: Option<[f64; 2]>,
}

/// Each pair of runs' drops under each variant both ran, runs in the order
/// given; `runs` holds each run's label, id and results (originals and
/// variants). Empty when no two runs share a variant.
pub fn drops(runs: &[(String, i64, Vec<StoredResult>)]) -> Vec<VariantDrop> {
    // Per run: (test code, repeat) -> as written, and variant -> (code, repeat) -> varied.
    type Verdicts<'a> = BTreeMap<(&'a str, i64), bool>;
    let split: Vec<(Verdicts, BTreeMap<&str, Verdicts>)> = runs
        .iter()
        .map(|(_, _, results)| {
            let mut originals = Verdicts::new();
            let mut varied: BTreeMap<&str, Verdicts> = BTreeMap::new();
            for r in results.iter().filter(|r| r.is_scored()) {
                match split_code(&r.test_code) {
                    (code, None) => {
                        originals.insert((code, r.repeat_index), r.passed);
                    }
                    (code, Some(name)) => {
                        varied
                            .entry(name)
                            .or_default()
                            .insert((code, r.repeat_index), r.passed);
                    }
                }
            }
            (originals, varied)
        })
        .collect();
    let mut out = Vec::new();
    for i in 0..runs.len() {
        for j in i + 1..runs.len() {
            let (oa, va) = &split[i];
            let (ob, vb) = &split[j];
            for (name, a_varied) in va {
                let Some(b_varied) = vb.get(name) else {
                    continue;
                };
                // Per test case: Σ (a − b), pairs, Σ a, Σ b.
                let mut cases: BTreeMap<&str, (i64, usize, i64, i64)> = BTreeMap::new();
                let (mut da, mut db, mut n) = (0i64, 0i64, 0usize);
                for (key, &a_var) in a_varied {
                    let (Some(&a_orig), Some(&b_orig), Some(&b_var)) =
                        (oa.get(key), ob.get(key), b_varied.get(key))
                    else {
                        continue;
                    };
                    let a = i64::from(a_var) - i64::from(a_orig);
                    let b = i64::from(b_var) - i64::from(b_orig);
                    da += a;
                    db += b;
                    n += 1;
                    let e = cases.entry(key.0).or_default();
                    e.0 += a - b;
                    e.1 += 1;
                    e.2 += a;
                    e.3 += b;
                }
                if n == 0 {
                    continue;
                }
                let interval = |f: fn(&(i64, usize, i64, i64)) -> i64| {
                    let of: Vec<(i64, usize)> = cases.values().map(|c| (f(c), c.1)).collect();
                    paired_interval(&of, SEED, RESAMPLES)
                };
                out.push(VariantDrop {
                    variant: name.to_string(),
                    a: runs[i].0.clone(),
                    b: runs[j].0.clone(),
                    a_run_id: runs[i].1,
                    b_run_id: runs[j].1,
                    pairs: n,
                    a_difference: da as f64 / n as f64,
                    b_difference: db as f64 / n as f64,
                    difference: (da - db) as f64 / n as f64,
                    a_difference_ci: interval(|c| c.2),
                    b_difference_ci: interval(|c| c.3),
                    difference_ci: interval(|c| c.0),
                });
            }
        }
    }
    out
}

/// The drops as text, under `compare`'s tables; nothing when there are none.
pub fn write_drops(o: &mut dyn std::io::Write, drops: &[VariantDrop]) -> std::io::Result<()> {
    use super::format::{points, points_ci};
    if drops.is_empty() {
        return Ok(());
    }
    let mut t = super::terminal::table([
        "variant",
        "A",
        "B",
        "pairs",
        "A varied − written (95 % CI)",
        "B varied − written (95 % CI)",
        "A − B",
        "95 % CI",
    ]);
    for d in drops {
        t.add_row([
            d.variant.clone(),
            d.a.clone(),
            d.b.clone(),
            d.pairs.to_string(),
            format!(
                "{} ({})",
                points(Some(d.a_difference)),
                points_ci(d.a_difference_ci)
            ),
            format!(
                "{} ({})",
                points(Some(d.b_difference)),
                points_ci(d.b_difference_ci)
            ),
            points(Some(d.difference)),
            points_ci(d.difference_ci),
        ]);
    }
    writeln!(
        o,
        "variants of the user's words (each run's varied − as-written pass rate on the same test cases; A − B negative: A drops more; paired bootstrap over test cases):\n{}",
        super::terminal::fitted(t)
    )
}
