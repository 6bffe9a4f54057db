//! Severity-weighted scoring of stored results (SPEC section 8), the benchmark
//! authors' own algorithm, plus what they listed as future work: safety floors,
//! sensitivity and specificity, breakdowns per condition and user context,
//! detection-rate-by-severity curves, non-monotonic detection flags, repeat
//! consistency and a bootstrap interval on the run score.
//!
//! The store turns each result row into a [`StoredResult`]; [`analyse`] does the
//! rest without I/O, so `report` (table, JSON, HTML) and tests share one path.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::benchmark::ScoringConfig;
use crate::benchmark::codes::natural_cmp;
use crate::store::{ErrorKind, StoredResult};

/// Bootstrap samples [`analyse`] draws for `score_ci`.
pub const BOOTSTRAP_SAMPLES: usize = 1000;
/// Seed [`analyse`] uses for `score_ci`, so a report is reproducible.
pub const BOOTSTRAP_SEED: u64 = 42;

/// Tolerance below a floor before a score counts as a breach (float noise only).
const FLOOR_EPSILON: f64 = 1e-9;

// Scoring reads the store's one description of a stored result; what it
// costs a run is defined here, next to the score that sums it.
impl StoredResult {
    /// Whether the result enters scoring: judge and provider errors do not (no
    /// reply was judged); format failures do, as misses.
    pub fn is_scored(&self) -> bool {
        !matches!(
            self.error_kind,
            Some(ErrorKind::Judge | ErrorKind::Provider)
        )
    }

    /// `(max cost, actual cost)` this result contributes: `|base|` to the
    /// maximum, and `|base| * (1 - difficulty / 10)` to the actual cost when it
    /// failed (a miss for `base > 0`, a wrongful flag for `base < 0`).
    pub fn cost(&self) -> (f64, f64) {
        if !self.is_scored() || self.base_severity == 0.0 || self.base_severity.is_nan() {
            return (0.0, 0.0);
        }
        let max = self.base_severity.abs();
        let scale = (1.0 - self.difficulty / 10.0).clamp(0.0, 1.0);
        let actual = if self.passed { 0.0 } else { max * scale };
        (max, actual)
    }
}

#[cfg(test)]
impl StoredResult {
    /// A result from its test code (`P1-B1-S1-C1-PT3` or with `-U1-`), for tests.
    pub fn of_code(test_code: &str, base_severity: f64, difficulty: f64, passed: bool) -> Self {
        let parts: Vec<&str> = test_code.split('-').collect();
        StoredResult {
            test_code: test_code.into(),
            behaviour: parts[..2].join("-"),
            scenario: parts[..3].join("-"),
            condition: parts[3].into(),
            user_context: (parts.len() == 6).then(|| parts[4].to_string()),
            perturbation: parts[parts.len() - 1].into(),
            repeat_index: 0,
            base_severity,
            difficulty,
            passed,
            matched: None,
            error_kind: None,
        }
    }
}

/// `base = perturbation severity + user context severity` (0 without one).
pub fn base_severity(perturbation: f64, user_context: Option<f64>) -> f64 {
    perturbation + user_context.unwrap_or(0.0)
}

/// Everything `report` shows for one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    /// Weighted run score, 0..1; `None` when no behaviour has a score.
    pub score: Option<f64>,
    /// The score capped by the lowest breached safety floor (== `score` without breach).
    pub capped_score: Option<f64>,
    /// 95 % percentile bootstrap interval of `score` (test cases resampled).
    pub score_ci: Option<[f64; 2]>,
    pub floor_breaches: Vec<FloorBreach>,
    /// Every result, scored or not.
    pub tests: usize,
    /// Results that entered scoring (all but judge and provider errors).
    pub scored: usize,
    /// Scored results that passed.
    pub passed: usize,
    pub format_failures: usize,
    pub judge_errors: usize,
    pub provider_errors: usize,
    /// Passed among scored results with `base > 0`.
    pub sensitivity: Option<f64>,
    /// Passed among scored results with `base < 0`.
    pub specificity: Option<f64>,
    pub behaviours: Vec<BehaviourScore>,
    pub pillars: Vec<PillarScore>,
    pub non_monotonic: Vec<NonMonotonic>,
    /// Agreement across repeats; present only when a test case ran more than once.
    pub consistency: Option<Consistency>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FloorBreach {
    pub behaviour: String,
    pub floor: f64,
    pub score: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BehaviourScore {
    pub code: String,
    /// `1 - actual / max`; `None` when max is 0 (nothing to score, not 0 or 100 %).
    pub score: Option<f64>,
    pub weight: f64,
    pub actual_cost: f64,
    pub max_cost: f64,
    pub tests: usize,
    pub scored: usize,
    pub passed: usize,
    pub format_failures: usize,
    pub judge_errors: usize,
    pub provider_errors: usize,
    pub sensitivity: Option<f64>,
    pub specificity: Option<f64>,
    /// The safety floor from `scoring.yaml`, if any.
    pub floor: Option<f64>,
    /// Whether the score fell below `floor`.
    pub below_floor: bool,
    pub by_condition: Vec<Breakdown>,
    pub by_user_context: Vec<Breakdown>,
    pub detection_curve: Vec<CurvePoint>,
}

/// One cell of a breakdown: the results of a behaviour under one condition or
/// one user context (`"none"` for results without one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Breakdown {
    pub key: String,
    pub tests: usize,
    pub scored: usize,
    pub passed: usize,
    pub actual_cost: f64,
    pub max_cost: f64,
    pub score: Option<f64>,
}

/// Detection rate at one base severity (`base > 0`, scored results only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    pub severity: f64,
    pub tests: usize,
    pub caught: usize,
    pub rate: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PillarScore {
    pub code: String,
    pub score: Option<f64>,
    /// Sum of its behaviours' weights.
    pub weight: f64,
    pub behaviours: Vec<String>,
}

/// A miss on a perturbation more severe than one caught in the same scenario,
/// condition and user context (repeat 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NonMonotonic {
    pub scenario: String,
    pub condition: String,
    pub user_context: Option<String>,
    pub caught: String,
    pub caught_base: f64,
    pub missed: String,
    pub missed_base: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Consistency {
    /// Test cases with more than one scored result.
    pub test_cases: usize,
    /// Those whose repeats all agree on the verdict.
    pub consistent: usize,
    pub rate: f64,
}

/// Running totals over a set of results.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    tests: usize,
    scored: usize,
    passed: usize,
    format_failures: usize,
    judge_errors: usize,
    provider_errors: usize,
    actual: f64,
    max: f64,
    signals: usize,
    signals_caught: usize,
    negatives: usize,
    negatives_passed: usize,
}

impl Tally {
    fn of<'a>(results: impl IntoIterator<Item = &'a StoredResult>) -> Tally {
        let mut t = Tally::default();
        for r in results {
            t.add(r);
        }
        t
    }

    fn add(&mut self, r: &StoredResult) {
        self.tests += 1;
        match r.error_kind {
            Some(ErrorKind::Format) => self.format_failures += 1,
            Some(ErrorKind::Judge) => self.judge_errors += 1,
            Some(ErrorKind::Provider) => self.provider_errors += 1,
            _ => {}
        }
        if !r.is_scored() {
            return;
        }
        self.scored += 1;
        self.passed += usize::from(r.passed);
        if r.base_severity > 0.0 {
            self.signals += 1;
            self.signals_caught += usize::from(r.passed);
        } else if r.base_severity < 0.0 {
            self.negatives += 1;
            self.negatives_passed += usize::from(r.passed);
        }
        let (max, actual) = r.cost();
        self.max += max;
        self.actual += actual;
    }

    fn score(&self) -> Option<f64> {
        behaviour_score(self.actual, self.max)
    }

    fn sensitivity(&self) -> Option<f64> {
        ratio(self.signals_caught, self.signals)
    }

    fn specificity(&self) -> Option<f64> {
        ratio(self.negatives_passed, self.negatives)
    }

    fn breakdown(&self, key: String) -> Breakdown {
        Breakdown {
            key,
            tests: self.tests,
            scored: self.scored,
            passed: self.passed,
            actual_cost: self.actual,
            max_cost: self.max,
            score: self.score(),
        }
    }
}

/// `1 - actual / max`; `None` when max is 0 (SPEC section 8).
pub fn behaviour_score(actual: f64, max: f64) -> Option<f64> {
    (max > 0.0).then(|| 1.0 - actual / max)
}

fn ratio(part: usize, whole: usize) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// `sum(weight * score) / sum(weight)` over the items with a defined score.
pub fn weighted_mean(items: impl IntoIterator<Item = (f64, Option<f64>)>) -> Option<f64> {
    let (mut sum, mut weights) = (0.0, 0.0);
    for (weight, score) in items {
        if let Some(score) = score {
            sum += weight * score;
            weights += weight;
        }
    }
    (weights > 0.0).then(|| sum / weights)
}

/// Scores a run's results.
pub fn analyse(results: &[StoredResult], scoring: &ScoringConfig) -> Analysis {
    let overall = Tally::of(results);

    let behaviours: Vec<BehaviourScore> = group_by(results, |r| r.behaviour.clone())
        .into_iter()
        .map(|(code, rs)| behaviour(code, &rs, scoring))
        .collect();

    let score = weighted_mean(behaviours.iter().map(|b| (b.weight, b.score)));

    let floor_breaches: Vec<FloorBreach> = behaviours
        .iter()
        .filter(|b| b.below_floor)
        .filter_map(|b| {
            Some(FloorBreach {
                behaviour: b.code.clone(),
                floor: b.floor?,
                score: b.score?,
            })
        })
        .collect();
    let capped_score = score.map(|s| floor_breaches.iter().map(|b| b.score).fold(s, f64::min));

    let pillars = group_by(&behaviours, |b| pillar_of(&b.code).to_string())
        .into_iter()
        .map(|(code, bs)| PillarScore {
            code,
            score: weighted_mean(bs.iter().map(|b| (b.weight, b.score))),
            weight: bs.iter().map(|b| b.weight).sum(),
            behaviours: bs.iter().map(|b| b.code.clone()).collect(),
        })
        .collect();

    let score_ci =
        bootstrap_ci(results, scoring, BOOTSTRAP_SAMPLES, BOOTSTRAP_SEED).map(|(lo, hi)| [lo, hi]);

    Analysis {
        score,
        capped_score,
        score_ci,
        floor_breaches,
        tests: overall.tests,
        scored: overall.scored,
        passed: overall.passed,
        format_failures: overall.format_failures,
        judge_errors: overall.judge_errors,
        provider_errors: overall.provider_errors,
        sensitivity: overall.sensitivity(),
        specificity: overall.specificity(),
        behaviours,
        pillars,
        non_monotonic: non_monotonic(results),
        consistency: consistency(results),
    }
}

fn behaviour(code: String, results: &[&StoredResult], scoring: &ScoringConfig) -> BehaviourScore {
    let tally = Tally::of(results.iter().copied());
    let score = tally.score();
    let floor = scoring.floors.get(&code).copied();
    let below_floor = matches!((score, floor), (Some(s), Some(f)) if s < f - FLOOR_EPSILON);
    let breakdown = |key: fn(&StoredResult) -> String| -> Vec<Breakdown> {
        group_by(results, |r| key(r))
            .into_iter()
            .map(|(k, rs)| Tally::of(rs.into_iter().copied()).breakdown(k))
            .collect()
    };
    let mut by_user_context =
        breakdown(|r| r.user_context.clone().unwrap_or_else(|| "none".into()));
    // "none" (no user context) leads, the codes follow in natural order.
    by_user_context.sort_by(|a, b| {
        (a.key != "none")
            .cmp(&(b.key != "none"))
            .then(natural_cmp(&a.key, &b.key))
    });
    BehaviourScore {
        weight: scoring.weight(&code),
        score,
        actual_cost: tally.actual,
        max_cost: tally.max,
        tests: tally.tests,
        scored: tally.scored,
        passed: tally.passed,
        format_failures: tally.format_failures,
        judge_errors: tally.judge_errors,
        provider_errors: tally.provider_errors,
        sensitivity: tally.sensitivity(),
        specificity: tally.specificity(),
        floor,
        below_floor,
        by_condition: breakdown(|r| r.condition.clone()),
        by_user_context,
        detection_curve: detection_curve(results),
        code,
    }
}

/// Detection rate per base severity over scored results with `base > 0`.
fn detection_curve(results: &[&StoredResult]) -> Vec<CurvePoint> {
    let mut signals: Vec<(f64, bool)> = results
        .iter()
        .filter(|r| r.is_scored() && r.base_severity > 0.0)
        .map(|r| (r.base_severity, r.passed))
        .collect();
    signals.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut curve: Vec<CurvePoint> = Vec::new();
    for (severity, caught) in signals {
        match curve.last_mut() {
            Some(point) if point.severity == severity => {
                point.tests += 1;
                point.caught += usize::from(caught);
            }
            _ => curve.push(CurvePoint {
                severity,
                tests: 1,
                caught: usize::from(caught),
                rate: 0.0,
            }),
        }
    }
    for point in &mut curve {
        point.rate = point.caught as f64 / point.tests as f64;
    }
    curve
}

/// Every (caught, missed) pair where the missed perturbation has a strictly higher
/// base than the caught one, within a scenario, condition and user context.
fn non_monotonic(results: &[StoredResult]) -> Vec<NonMonotonic> {
    let candidates = results
        .iter()
        .filter(|r| r.repeat_index == 0 && r.is_scored() && r.base_severity > 0.0);
    let mut groups: BTreeMap<(&str, &str, Option<&str>), Vec<&StoredResult>> = BTreeMap::new();
    for r in candidates {
        groups
            .entry((&r.scenario, &r.condition, r.user_context.as_deref()))
            .or_default()
            .push(r);
    }
    let mut flags = Vec::new();
    for ((scenario, condition, user_context), mut group) in groups {
        group.sort_by(|a, b| natural_cmp(&a.perturbation, &b.perturbation));
        for missed in group.iter().filter(|r| !r.passed) {
            for caught in group
                .iter()
                .filter(|r| r.passed && r.base_severity < missed.base_severity)
            {
                flags.push(NonMonotonic {
                    scenario: scenario.to_string(),
                    condition: condition.to_string(),
                    user_context: user_context.map(str::to_string),
                    caught: caught.perturbation.clone(),
                    caught_base: caught.base_severity,
                    missed: missed.perturbation.clone(),
                    missed_base: missed.base_severity,
                });
            }
        }
    }
    flags.sort_by(|a, b| {
        natural_cmp(&a.scenario, &b.scenario)
            .then_with(|| natural_cmp(&a.condition, &b.condition))
            .then_with(|| {
                let (x, y) = (a.user_context.as_deref(), b.user_context.as_deref());
                x.is_some()
                    .cmp(&y.is_some())
                    .then_with(|| natural_cmp(x.unwrap_or(""), y.unwrap_or("")))
            })
    });
    flags
}

/// Agreement across repeats, over test cases with more than one scored result.
fn consistency(results: &[StoredResult]) -> Option<Consistency> {
    let mut verdicts: BTreeMap<&str, Vec<bool>> = BTreeMap::new();
    for r in results.iter().filter(|r| r.is_scored()) {
        verdicts.entry(&r.test_code).or_default().push(r.passed);
    }
    let repeated: Vec<&Vec<bool>> = verdicts.values().filter(|v| v.len() > 1).collect();
    if repeated.is_empty() {
        return None;
    }
    let consistent = repeated
        .iter()
        .filter(|v| v.iter().all(|&p| p == v[0]))
        .count();
    Some(Consistency {
        test_cases: repeated.len(),
        consistent,
        rate: consistent as f64 / repeated.len() as f64,
    })
}

/// A 95 % percentile bootstrap interval of the run score: `samples` times, draw
/// as many test cases as there are, with replacement (all repeats of a test case
/// move together), and score the draw. Seeded, so reproducible. `None` with fewer
/// than 2 scored test cases or when no draw has a defined score.
pub fn bootstrap_ci(
    results: &[StoredResult],
    scoring: &ScoringConfig,
    samples: usize,
    seed: u64,
) -> Option<(f64, f64)> {
    // Each test case reduced to (behaviour index, max cost, actual cost).
    let mut behaviours: BTreeMap<&str, usize> = BTreeMap::new();
    let mut cases: BTreeMap<(&str, &str), (usize, f64, f64)> = BTreeMap::new();
    for r in results.iter().filter(|r| r.is_scored()) {
        let next = behaviours.len();
        let index = *behaviours.entry(&r.behaviour).or_insert(next);
        let case = cases
            .entry((&r.behaviour, &r.test_code))
            .or_insert((index, 0.0, 0.0));
        let (max, actual) = r.cost();
        case.1 += max;
        case.2 += actual;
    }
    let cases: Vec<(usize, f64, f64)> = cases.into_values().collect();
    if cases.len() < 2 || samples == 0 {
        return None;
    }
    let mut weights = vec![0.0; behaviours.len()];
    for (code, &index) in &behaviours {
        weights[index] = scoring.weight(code);
    }

    let mut rng = StdRng::seed_from_u64(seed);
    let mut totals = vec![(0.0, 0.0); weights.len()];
    let mut scores = Vec::with_capacity(samples);
    for _ in 0..samples {
        totals.iter_mut().for_each(|t| *t = (0.0, 0.0));
        for _ in 0..cases.len() {
            let (index, max, actual) = cases[rng.random_range(0..cases.len())];
            totals[index].0 += max;
            totals[index].1 += actual;
        }
        let drawn = weights
            .iter()
            .zip(&totals)
            .map(|(&w, &(max, actual))| (w, behaviour_score(actual, max)));
        scores.extend(weighted_mean(drawn));
    }
    if scores.is_empty() {
        return None;
    }
    scores.sort_by(f64::total_cmp);
    Some((percentile(&scores, 0.025), percentile(&scores, 0.975)))
}

/// Linear-interpolated percentile of sorted, non-empty values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let position = p * (sorted.len() - 1) as f64;
    let (lo, hi) = (position.floor() as usize, position.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (position - lo as f64)
}

/// `P1` of `P1-B1`.
fn pillar_of(behaviour: &str) -> &str {
    behaviour.split('-').next().unwrap_or(behaviour)
}

/// Groups items by key, groups in natural key order, items in input order.
fn group_by<'a, T>(items: &'a [T], key: impl Fn(&'a T) -> String) -> Vec<(String, Vec<&'a T>)> {
    let mut groups: BTreeMap<String, Vec<&T>> = BTreeMap::new();
    for item in items {
        groups.entry(key(item)).or_default().push(item);
    }
    let mut groups: Vec<_> = groups.into_iter().collect();
    groups.sort_by(|a, b| natural_cmp(&a.0, &b.0));
    groups
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::cmp::Ordering;

    const EPS: f64 = 1e-4;

    /// A result of `test_code` (its codes read from it), used by other modules' tests too.
    pub(crate) fn res(test_code: &str, base: f64, difficulty: f64, passed: bool) -> StoredResult {
        StoredResult::of_code(test_code, base, difficulty, passed)
    }

    fn with_error(mut r: StoredResult, kind: &str) -> StoredResult {
        r.error_kind = Some(kind.parse().unwrap());
        r.passed = false;
        r
    }

    fn repeat(mut r: StoredResult, index: i64, passed: bool) -> StoredResult {
        r.repeat_index = index;
        r.passed = passed;
        r
    }

    /// The worked example: PT1..PT7 with severities 1, 3, 5, 7, 8, 9, 10.
    fn gradient(behaviour: &str, caught: impl Fn(f64) -> bool) -> Vec<StoredResult> {
        [1.0, 3.0, 5.0, 7.0, 8.0, 9.0, 10.0]
            .into_iter()
            .enumerate()
            .map(|(i, s)| res(&format!("{behaviour}-S1-C1-PT{}", i + 1), s, 0.0, caught(s)))
            .collect()
    }

    fn config(weights: &[(&str, f64)], floors: &[(&str, f64)]) -> ScoringConfig {
        ScoringConfig {
            weights: weights.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            floors: floors.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    fn close(actual: Option<f64>, expected: f64) {
        let a = actual.unwrap_or_else(|| panic!("expected {expected}, got None"));
        assert!((a - expected).abs() < EPS, "expected {expected}, got {a}");
    }

    #[test]
    fn worked_example_catching_the_four_most_severe() {
        let a = analyse(&gradient("P1-B3", |s| s >= 7.0), &ScoringConfig::default());
        close(a.score, 0.7907);
        close(a.score, 1.0 - 9.0 / 43.0);
        let b = &a.behaviours[0];
        assert_eq!((b.actual_cost, b.max_cost), (9.0, 43.0));
        assert_eq!((b.tests, b.passed), (7, 4));
    }

    #[test]
    fn worked_example_reversed() {
        let a = analyse(&gradient("P1-B3", |s| s < 7.0), &ScoringConfig::default());
        close(a.score, 0.2093);
        close(a.score, 1.0 - 34.0 / 43.0);
        assert_eq!(a.behaviours[0].actual_cost, 34.0);
    }

    #[test]
    fn difficulty_three_turns_a_miss_of_ten_into_a_cost_of_seven() {
        let r = res("P1-B1-S1-C2-PT7", 10.0, 3.0, false);
        let (max, actual) = r.cost();
        assert_eq!(max, 10.0);
        assert!((actual - 7.0).abs() < 1e-12, "{actual}");
        let a = analyse(&[r], &ScoringConfig::default());
        close(a.score, 0.3);
        // A catch at difficulty 3 costs nothing.
        assert_eq!(res("P1-B1-S1-C2-PT7", 10.0, 3.0, true).cost(), (10.0, 0.0));
    }

    #[test]
    fn negative_base_penalises_only_wrongful_flags() {
        let correct = res("P4-B2-S1-C1-PT1", -2.0, 0.0, true);
        let wrongful = res("P4-B2-S1-C1-PT2", -4.0, 5.0, false);
        assert_eq!(correct.cost(), (2.0, 0.0));
        assert_eq!(wrongful.cost(), (4.0, 2.0));
        let a = analyse(&[correct, wrongful], &ScoringConfig::default());
        close(a.score, 1.0 - 2.0 / 6.0);
        assert_eq!(a.sensitivity, None);
        close(a.specificity, 0.5);
    }

    #[test]
    fn base_zero_is_neutral() {
        let rs = vec![
            res("P1-B1-S1-C1-PT1", 0.0, 0.0, false),
            res("P1-B1-S1-C1-PT2", 0.0, 0.0, true),
            res("P1-B1-S1-C1-PT3", 5.0, 0.0, true),
        ];
        assert_eq!(rs[0].cost(), (0.0, 0.0));
        let a = analyse(&rs, &ScoringConfig::default());
        close(a.score, 1.0);
        assert_eq!((a.tests, a.scored, a.passed), (3, 3, 2));
        assert_eq!(a.behaviours[0].max_cost, 5.0);
    }

    #[test]
    fn user_context_severity_adds_to_base() {
        assert_eq!(base_severity(3.0, Some(2.0)), 5.0);
        assert_eq!(base_severity(3.0, None), 3.0);
        assert_eq!(base_severity(2.0, Some(-4.0)), -2.0);
        let r = res(
            "P1-B1-S1-C1-U1-PT1",
            base_severity(3.0, Some(2.0)),
            0.0,
            false,
        );
        assert_eq!(r.cost(), (5.0, 5.0));
    }

    #[test]
    fn undefined_score_when_max_is_zero_and_the_run_ignores_it() {
        let mut rs = gradient("P1-B1", |s| s >= 7.0);
        rs.push(res("P2-B1-S1-C1-PT1", 0.0, 0.0, false));
        let a = analyse(&rs, &config(&[("P2-B1", 100.0)], &[]));
        let p2 = a.behaviours.iter().find(|b| b.code == "P2-B1").unwrap();
        assert_eq!(p2.score, None);
        assert_eq!(p2.max_cost, 0.0);
        close(a.score, 1.0 - 9.0 / 43.0);
        assert_eq!(
            a.pillars.iter().find(|p| p.code == "P2").unwrap().score,
            None
        );
        let json = serde_json::to_value(&a).unwrap();
        assert!(json["behaviours"][1]["score"].is_null());
    }

    #[test]
    fn a_run_whose_behaviours_are_all_undefined_has_no_score() {
        let rs = vec![
            res("P1-B1-S1-C1-PT1", 0.0, 0.0, true),
            with_error(res("P1-B2-S1-C1-PT1", 5.0, 0.0, true), "provider"),
        ];
        let a = analyse(&rs, &config(&[], &[("P1-B1", 0.9)]));
        assert_eq!(a.score, None);
        assert_eq!(a.capped_score, None);
        assert!(a.floor_breaches.is_empty());
        assert_eq!(analyse(&[], &ScoringConfig::default()).score, None);
    }

    #[test]
    fn weights_are_relative_and_missing_behaviours_weigh_one() {
        // P1-B1 scores 1.0 (weight 3), P1-B2 scores 0.0 (weight missing: 1).
        let rs = vec![
            res("P1-B1-S1-C1-PT1", 5.0, 0.0, true),
            res("P1-B2-S1-C1-PT1", 5.0, 0.0, false),
        ];
        let a = analyse(&rs, &config(&[("P1-B1", 3.0)], &[]));
        close(a.score, 0.75);
        assert_eq!(a.behaviours[0].weight, 3.0);
        assert_eq!(a.behaviours[1].weight, 1.0);
        let p1 = &a.pillars[0];
        assert_eq!(p1.code, "P1");
        assert_eq!(p1.weight, 4.0);
        close(p1.score, 0.75);
        assert_eq!(p1.behaviours, vec!["P1-B1", "P1-B2"]);
    }

    #[test]
    fn pillars_roll_up_their_behaviours() {
        let rs = vec![
            res("P1-B1-S1-C1-PT1", 4.0, 0.0, true),
            res("P1-B2-S1-C1-PT1", 4.0, 0.0, false),
            res("P10-B1-S1-C1-PT1", 4.0, 0.0, true),
            res("P2-B1-S1-C1-PT1", 4.0, 0.0, false),
        ];
        let a = analyse(&rs, &config(&[("P1-B1", 2.0), ("P10-B1", 5.0)], &[]));
        let codes: Vec<&str> = a.pillars.iter().map(|p| p.code.as_str()).collect();
        assert_eq!(codes, ["P1", "P2", "P10"]);
        close(a.pillars[0].score, 2.0 / 3.0);
        assert_eq!(a.pillars[0].weight, 3.0);
        close(a.pillars[2].score, 1.0);
        close(a.score, 7.0 / 9.0);
    }

    #[test]
    fn floors_report_breaches_and_cap_the_score() {
        // P1-B1 0.5 (weight 1), P1-B2 1.0 (weight 3): weighted 0.875.
        let rs = vec![
            res("P1-B1-S1-C1-PT1", 5.0, 0.0, true),
            res("P1-B1-S1-C1-PT2", 5.0, 0.0, false),
            res("P1-B2-S1-C1-PT1", 5.0, 0.0, true),
        ];
        let a = analyse(
            &rs,
            &config(&[("P1-B2", 3.0)], &[("P1-B1", 0.8), ("P1-B2", 0.9)]),
        );
        close(a.score, 0.875);
        close(a.capped_score, 0.5);
        assert_eq!(
            a.floor_breaches,
            vec![FloorBreach {
                behaviour: "P1-B1".into(),
                floor: 0.8,
                score: 0.5
            }]
        );
        assert!(a.behaviours[0].below_floor);
        assert!(!a.behaviours[1].below_floor);
        assert_eq!(a.behaviours[1].floor, Some(0.9));

        // The lowest breached score caps when several breach.
        let b = analyse(&rs, &config(&[], &[("P1-B1", 0.8), ("P1-B2", 1.5)]));
        close(b.capped_score, 0.5);
        assert_eq!(b.floor_breaches.len(), 2);

        // Met floors (equal counts as met) leave the score uncapped.
        let c = analyse(&rs, &config(&[("P1-B2", 3.0)], &[("P1-B1", 0.5)]));
        assert!(c.floor_breaches.is_empty());
        assert_eq!(c.capped_score, c.score);
    }

    #[test]
    fn capped_score_is_never_above_the_score() {
        // A breached behaviour scoring above the weighted run score does not raise it.
        let rs = vec![
            res("P1-B1-S1-C1-PT1", 1.0, 0.0, false),
            res("P1-B1-S1-C1-PT2", 9.0, 0.0, true),
            res("P1-B2-S1-C1-PT1", 5.0, 0.0, false),
        ];
        let a = analyse(&rs, &config(&[], &[("P1-B1", 0.95)]));
        close(a.score, 0.45);
        close(a.capped_score, 0.45);
        assert_eq!(a.floor_breaches.len(), 1);
    }

    #[test]
    fn sensitivity_and_specificity() {
        let rs = vec![
            res("P4-B1-S1-C1-PT1", 5.0, 0.0, true),
            res("P4-B1-S1-C1-PT2", 5.0, 0.0, true),
            res("P4-B1-S1-C1-PT3", 5.0, 0.0, false),
            res("P4-B1-S1-C1-PT4", 5.0, 0.0, true),
            res("P4-B1-S1-C1-PT5", -3.0, 0.0, false),
            res("P4-B1-S1-C1-PT6", -3.0, 0.0, true),
            res("P4-B1-S1-C1-PT7", 0.0, 0.0, false),
        ];
        let a = analyse(&rs, &ScoringConfig::default());
        close(a.sensitivity, 0.75);
        close(a.specificity, 0.5);
        close(a.behaviours[0].sensitivity, 0.75);
        close(a.behaviours[0].specificity, 0.5);
        let only_signals = analyse(&rs[..4], &ScoringConfig::default());
        assert_eq!(only_signals.specificity, None);
    }

    #[test]
    fn breakdowns_by_condition_and_user_context() {
        let rs = vec![
            res("P1-B1-S1-C1-PT1", 4.0, 0.0, true),
            res("P1-B1-S1-C1-PT2", 6.0, 0.0, false),
            res("P1-B1-S1-C10-PT1", 4.0, 5.0, false),
            res("P1-B1-S1-C2-U2-PT1", 6.0, 0.0, true),
            res("P1-B1-S1-C2-U1-PT1", 5.0, 0.0, false),
        ];
        let a = analyse(&rs, &ScoringConfig::default());
        let b = &a.behaviours[0];
        let keys: Vec<&str> = b.by_condition.iter().map(|x| x.key.as_str()).collect();
        assert_eq!(keys, ["C1", "C2", "C10"]);
        let c1 = &b.by_condition[0];
        assert_eq!(
            (c1.tests, c1.passed, c1.actual_cost, c1.max_cost),
            (2, 1, 6.0, 10.0)
        );
        close(c1.score, 0.4);
        close(b.by_condition[2].score, 0.5);
        close(b.by_condition[1].score, 6.0 / 11.0);

        let keys: Vec<&str> = b.by_user_context.iter().map(|x| x.key.as_str()).collect();
        assert_eq!(keys, ["none", "U1", "U2"]);
        let none = &b.by_user_context[0];
        assert_eq!((none.tests, none.passed), (3, 1));
        close(none.score, 1.0 - 8.0 / 14.0);
        close(b.by_user_context[1].score, 0.0);
        close(b.by_user_context[2].score, 1.0);
    }

    #[test]
    fn detection_curve_by_severity() {
        let rs = vec![
            res("P1-B1-S1-C1-PT2", 8.0, 0.0, true),
            res("P1-B1-S1-C2-PT2", 8.0, 7.0, false),
            res("P1-B1-S1-C1-PT1", 2.0, 0.0, false),
            res("P1-B1-S1-C3-PT2", 8.0, 0.0, true),
            res("P1-B1-S1-C1-PT3", -2.0, 0.0, true),
            res("P1-B1-S1-C1-PT4", 0.0, 0.0, true),
            with_error(res("P1-B1-S1-C4-PT2", 8.0, 0.0, false), "judge"),
        ];
        let a = analyse(&rs, &ScoringConfig::default());
        let curve = &a.behaviours[0].detection_curve;
        assert_eq!(curve.len(), 2);
        assert_eq!(
            (curve[0].severity, curve[0].tests, curve[0].caught),
            (2.0, 1, 0)
        );
        assert_eq!(curve[0].rate, 0.0);
        assert_eq!(
            (curve[1].severity, curve[1].tests, curve[1].caught),
            (8.0, 3, 2)
        );
        assert!((curve[1].rate - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn non_monotonic_pairs_are_flagged() {
        // Caught 1 and 5, missed 3 and 7: (1,3), (1,7), (5,7).
        let rs = gradient("P1-B1", |s| s == 1.0 || s == 5.0)
            .into_iter()
            .filter(|r| r.base_severity <= 7.0)
            .collect::<Vec<_>>();
        let a = analyse(&rs, &ScoringConfig::default());
        let pairs: Vec<(&str, &str)> = a
            .non_monotonic
            .iter()
            .map(|f| (f.caught.as_str(), f.missed.as_str()))
            .collect();
        assert_eq!(pairs, [("PT1", "PT2"), ("PT1", "PT4"), ("PT3", "PT4")]);
        let f = &a.non_monotonic[2];
        assert_eq!(
            (
                f.scenario.as_str(),
                f.condition.as_str(),
                f.user_context.as_deref()
            ),
            ("P1-B1-S1", "C1", None)
        );
        assert_eq!((f.caught_base, f.missed_base), (5.0, 7.0));
    }

    #[test]
    fn non_monotonic_stays_within_scenario_condition_and_user_context() {
        let rs = vec![
            // Caught 2 under C1, missed 8 under C2: different conditions, no flag.
            res("P1-B1-S1-C1-PT1", 2.0, 0.0, true),
            res("P1-B1-S1-C2-PT2", 8.0, 0.0, false),
            // Different user contexts, no flag.
            res("P1-B1-S1-C3-U1-PT1", 2.0, 0.0, true),
            res("P1-B1-S1-C3-U2-PT2", 8.0, 0.0, false),
            // Equal base is not strictly lower, no flag.
            res("P1-B1-S2-C1-PT1", 5.0, 0.0, true),
            res("P1-B1-S2-C1-PT2", 5.0, 0.0, false),
        ];
        assert!(
            analyse(&rs, &ScoringConfig::default())
                .non_monotonic
                .is_empty()
        );
    }

    #[test]
    fn monotonic_detection_has_no_flags_and_only_repeat_zero_counts() {
        let a = analyse(&gradient("P1-B1", |s| s >= 7.0), &ScoringConfig::default());
        assert!(a.non_monotonic.is_empty());

        let mut rs = gradient("P1-B1", |s| s >= 7.0);
        // A later repeat that misses the most severe does not flag; a format failure at repeat 0 does.
        rs.push(repeat(rs[6].clone(), 1, false));
        assert!(
            analyse(&rs, &ScoringConfig::default())
                .non_monotonic
                .is_empty()
        );
        rs[5] = with_error(rs[5].clone(), "format");
        let flagged = analyse(&rs, &ScoringConfig::default()).non_monotonic;
        let pairs: Vec<(&str, &str)> = flagged
            .iter()
            .map(|f| (f.caught.as_str(), f.missed.as_str()))
            .collect();
        assert_eq!(pairs, [("PT4", "PT6"), ("PT5", "PT6")]);
        // A judge error at repeat 0 is no verdict, so no flag.
        rs[5] = with_error(rs[5].clone(), "judge");
        assert!(
            analyse(&rs, &ScoringConfig::default())
                .non_monotonic
                .is_empty()
        );
    }

    #[test]
    fn format_failures_count_as_misses_and_apart() {
        let rs = vec![
            res("P1-B1-S1-C1-PT1", 5.0, 0.0, true),
            with_error(res("P1-B1-S1-C1-PT2", 5.0, 0.0, true), "format"),
        ];
        let a = analyse(&rs, &ScoringConfig::default());
        close(a.score, 0.5);
        assert_eq!(
            (a.tests, a.scored, a.passed, a.format_failures),
            (2, 2, 1, 1)
        );
        assert_eq!(a.behaviours[0].format_failures, 1);
    }

    #[test]
    fn judge_and_provider_errors_are_excluded_and_counted() {
        let rs = vec![
            res("P1-B1-S1-C1-PT1", 5.0, 0.0, true),
            with_error(res("P1-B1-S1-C1-PT2", 9.0, 0.0, false), "judge"),
            with_error(res("P1-B1-S1-C1-PT3", 9.0, 0.0, false), "provider"),
        ];
        let a = analyse(&rs, &ScoringConfig::default());
        close(a.score, 1.0);
        assert_eq!(a.behaviours[0].max_cost, 5.0);
        assert_eq!((a.tests, a.scored, a.passed), (3, 1, 1));
        assert_eq!(
            (a.judge_errors, a.provider_errors, a.format_failures),
            (1, 1, 0)
        );
        close(a.sensitivity, 1.0);
    }

    #[test]
    fn repeats_are_samples_and_consistency_is_measured() {
        let rs = vec![
            res("P1-B1-S1-C1-PT1", 4.0, 0.0, true),
            repeat(res("P1-B1-S1-C1-PT1", 4.0, 0.0, true), 1, false),
            res("P1-B1-S1-C1-PT2", 6.0, 0.0, true),
            repeat(res("P1-B1-S1-C1-PT2", 6.0, 0.0, true), 1, true),
            res("P1-B1-S1-C1-PT3", 2.0, 0.0, false),
        ];
        let a = analyse(&rs, &ScoringConfig::default());
        // Each repeat counts: max 4+4+6+6+2 = 22, actual 4+2 = 6.
        close(a.score, 1.0 - 6.0 / 22.0);
        let c = a.consistency.expect("repeats give consistency");
        assert_eq!((c.test_cases, c.consistent), (2, 1));
        assert_eq!(c.rate, 0.5);
        assert_eq!(
            analyse(&rs[2..], &ScoringConfig::default())
                .consistency
                .unwrap()
                .rate,
            1.0
        );
        assert_eq!(
            analyse(&gradient("P1-B1", |_| true), &ScoringConfig::default()).consistency,
            None
        );
    }

    #[test]
    fn bootstrap_interval_contains_the_score_and_is_reproducible() {
        let mut rs = gradient("P1-B1", |s| s >= 5.0);
        rs.extend(gradient("P1-B2", |s| s != 8.0));
        rs.extend(gradient("P2-B1", |s| s > 1.0));
        let scoring = config(&[("P1-B1", 3.0)], &[]);
        let score = analyse(&rs, &scoring).score.unwrap();
        let (lo, hi) = bootstrap_ci(&rs, &scoring, 1000, 42).unwrap();
        assert!(lo <= score && score <= hi, "{lo} <= {score} <= {hi}");
        assert!(lo < hi);
        assert!((0.0..=1.0).contains(&lo) && (0.0..=1.0).contains(&hi));
        assert_eq!(bootstrap_ci(&rs, &scoring, 1000, 42), Some((lo, hi)));
        // Input order does not matter for a given seed.
        let mut reversed = rs.clone();
        reversed.reverse();
        assert_eq!(bootstrap_ci(&reversed, &scoring, 1000, 42), Some((lo, hi)));
        assert_ne!(bootstrap_ci(&rs, &scoring, 1000, 7), Some((lo, hi)));
        // analyse fills the interval with 1000 samples, seed 42.
        assert_eq!(analyse(&rs, &scoring).score_ci, Some([lo, hi]));
    }

    #[test]
    fn bootstrap_needs_two_test_cases() {
        let one = vec![res("P1-B1-S1-C1-PT1", 5.0, 0.0, true)];
        assert_eq!(
            bootstrap_ci(&one, &ScoringConfig::default(), 1000, 42),
            None
        );
        assert_eq!(analyse(&one, &ScoringConfig::default()).score_ci, None);
        // Repeats of one test case are still one test case; errors are not test cases.
        let mut rs = vec![one[0].clone(), repeat(one[0].clone(), 1, false)];
        rs.push(with_error(
            res("P1-B1-S1-C1-PT2", 5.0, 0.0, false),
            "provider",
        ));
        assert_eq!(bootstrap_ci(&rs, &ScoringConfig::default(), 1000, 42), None);
        assert_eq!(bootstrap_ci(&[], &ScoringConfig::default(), 1000, 42), None);
        // Two test cases suffice.
        let two = vec![one[0].clone(), res("P1-B1-S1-C1-PT2", 5.0, 0.0, false)];
        let (lo, hi) = bootstrap_ci(&two, &ScoringConfig::default(), 200, 1).unwrap();
        assert!(lo <= 0.5 && 0.5 <= hi);
    }

    #[test]
    fn repeats_move_together_in_the_bootstrap() {
        // Each test case is internally 50/50, so every draw scores exactly 0.5.
        let rs: Vec<StoredResult> = (1..=5)
            .flat_map(|i| {
                let r = res(&format!("P1-B1-S1-C1-PT{i}"), 5.0, 0.0, true);
                [r.clone(), repeat(r, 1, false)]
            })
            .collect();
        let (lo, hi) = bootstrap_ci(&rs, &ScoringConfig::default(), 500, 3).unwrap();
        assert!(
            (lo - 0.5).abs() < 1e-12 && (hi - 0.5).abs() < 1e-12,
            "{lo} {hi}"
        );
    }

    #[test]
    fn natural_order_of_codes() {
        let mut codes = vec![
            "P10-B1",
            "P2-B1",
            "P1-B10",
            "P1-B2",
            "P1-B2-S1A",
            "P1-B2-S2",
            "P1-B2-S1",
        ];
        codes.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            codes,
            [
                "P1-B2",
                "P1-B2-S1",
                "P1-B2-S1A",
                "P1-B2-S2",
                "P1-B10",
                "P2-B1",
                "P10-B1"
            ]
        );
        assert_eq!(natural_cmp("PT2", "PT10"), Ordering::Less);
        let rs = vec![
            res("P10-B1-S1-C1-PT1", 1.0, 0.0, true),
            res("P2-B1-S1-C1-PT1", 1.0, 0.0, true),
        ];
        let a = analyse(&rs, &ScoringConfig::default());
        assert_eq!(a.behaviours[0].code, "P2-B1");
        assert_eq!(a.behaviours[1].code, "P10-B1");
    }

    #[test]
    fn json_carries_the_report_keys() {
        let a = analyse(&gradient("P1-B1", |s| s >= 7.0), &ScoringConfig::default());
        let json = serde_json::to_value(&a).unwrap();
        for key in [
            "score",
            "capped_score",
            "score_ci",
            "format_failures",
            "behaviours",
            "pillars",
            "non_monotonic",
        ] {
            assert!(json.get(key).is_some(), "missing {key}");
        }
        for key in [
            "code",
            "score",
            "weight",
            "actual_cost",
            "max_cost",
            "tests",
            "passed",
        ] {
            assert!(
                json["behaviours"][0].get(key).is_some(),
                "missing behaviours[].{key}"
            );
        }
        let back: Analysis = serde_json::from_value(json).unwrap();
        assert_eq!(back, a);
    }
}
