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
        ..Default::default()
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
    let r = res("P1-B1-S1-C1-U1-PT1", 3.0 + 2.0, 0.0, false);
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

/// The bootstrap as it was first written: each draw reads the drawn test
/// case's own (behaviour, max, actual) entry. `bootstrap_ci` draws through a
/// table of the distinct entries instead (for speed); the intervals must be
/// the same to the bit.
fn bootstrap_drawing_cases(
    results: &[StoredResult],
    scoring: &ScoringConfig,
    samples: usize,
    seed: u64,
) -> Option<(f64, f64)> {
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
    let mut weights = vec![0.0; behaviours.len()];
    for (code, &index) in &behaviours {
        weights[index] = scoring.weight(code);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut scores = Vec::new();
    for _ in 0..samples {
        let mut totals = vec![(0.0, 0.0); weights.len()];
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
    scores.sort_by(f64::total_cmp);
    Some((percentile(&scores, 0.025), percentile(&scores, 0.975)))
}

#[test]
fn the_bootstrap_through_distinct_entries_draws_what_the_plain_one_draws() {
    // Many behaviours, severities, difficulties and repeats, so that test
    // cases share some entries and not others.
    let mut rs = Vec::new();
    for b in 1..=4 {
        for s in 1..=6 {
            for pt in 1..=9 {
                let code = format!("P{}-B{b}-S{s}-C1-PT{pt}", 1 + b % 2);
                let base = f64::from(pt) + f64::from(s) * 0.37;
                let r = res(&code, base, f64::from(s % 3) * 0.5, (pt * s + b) % 3 != 0);
                rs.push(repeat(r.clone(), 1, (pt + s) % 2 == 0));
                rs.push(r);
            }
        }
    }
    rs.push(with_error(
        res("P1-B1-S9-C1-PT1", 5.0, 0.0, false),
        "format",
    ));
    let scoring = config(&[("P1-B1", 3.0), ("P2-B2", 0.5)], &[]);
    for seed in [42, 7, 2026] {
        let got = bootstrap_ci(&rs, &scoring, 300, seed).unwrap();
        let want = bootstrap_drawing_cases(&rs, &scoring, 300, seed).unwrap();
        // The same draws: the bounds differ at most by the rounding of a
        // count x value against the same value added count times (a
        // different draw moves a bound by far more than 1e-12).
        for (g, w) in [(got.0, want.0), (got.1, want.1)] {
            assert!(
                (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                "seed {seed}: {got:?} vs {want:?}"
            );
        }
        assert_ne!(
            bootstrap_ci(&rs, &scoring, 300, seed + 1).unwrap(),
            want,
            "another seed draws other resamples"
        );
    }
}

/// A plain sum of 0.1, 0.2 and 0.3 depends on the order (0.6000000000000001
/// one way, 0.6 the other); the tally's sum gives 0.6 in every order, so a
/// score shown to one decimal never differs between two readings of the
/// same results in another order.
#[test]
fn sums_do_not_depend_on_the_order_of_their_terms() {
    assert_ne!(0.1 + 0.2 + 0.3, 0.3 + 0.2 + 0.1);
    let orders = [
        [0.1, 0.2, 0.3],
        [0.3, 0.2, 0.1],
        [0.2, 0.1, 0.3],
        [0.3, 0.1, 0.2],
    ];
    for o in orders {
        let mut s = Sum::default();
        for x in o {
            s.add(x);
        }
        assert_eq!(s.value(), 0.6, "{o:?}");
    }
}

#[test]
fn the_inlined_draw_is_rands() {
    // The bootstrap's inlined draw must take the same numbers from the same
    // stream as rand's `random_range`, or every interval would move.
    for n in [
        1u32,
        2,
        3,
        7,
        1000,
        110_000,
        (1 << 31) + 1,
        u32::MAX - 1,
        u32::MAX,
    ] {
        let mut ours = ChaCha8Rng::seed_from_u64(u64::from(n));
        let mut rands = ChaCha8Rng::seed_from_u64(u64::from(n));
        for _ in 0..20_000 {
            assert_eq!(
                below(&mut ours, n) as usize,
                rands.random_range(0..n as usize),
                "n = {n}"
            );
        }
    }
}

/// docs/src/results.md promises that a published interval is reproduced by
/// a later helmbench (the same generator, seed and resamples): these two
/// intervals, on 12,000 test cases that share a few dozen entries and on
/// the small mixed set above, are pinned to what this bootstrap drew when
/// the promise was written down. A faster draw with other numbers (say,
/// counts per entry from binomials, equal in distribution) moves them and
/// fails here.
#[test]
fn a_published_interval_is_reproduced() {
    let mut many = Vec::new();
    for i in 0..12_000u32 {
        let (b, pt) = (1 + i % 3, 1 + i % 5);
        let code = format!("P1-B{b}-S{}-C1-PT{pt}", i / 15);
        many.push(res(&code, f64::from(pt) * 2.0, 2.0, (i * 7919) % 10 < 7));
    }
    let scoring = config(&[("P1-B1", 2.0)], &[]);
    let few: Vec<StoredResult> = gradient("P1-B3", |s| s >= 7.0)
        .into_iter()
        .chain(gradient("P2-B1", |s| s < 7.0))
        .collect();
    for (got, want) in [
        (
            bootstrap_ci(&many, &scoring, 1000, 42).unwrap(),
            (0.751938075384, 0.767345084502),
        ),
        (
            bootstrap_ci(&few, &ScoringConfig::default(), 1000, 42).unwrap(),
            (0.242546114079, 0.744992607712),
        ),
    ] {
        assert!(
            (got.0 - want.0).abs() < 1e-9 && (got.1 - want.1).abs() < 1e-9,
            "{got:?} vs {want:?}"
        );
    }
}
