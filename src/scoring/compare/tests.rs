use super::*;
use crate::scoring::analysis::analyse;

/// A result of `code` (`P1-B1-S1-C1-PT1` or with `-U1-`) of severity
/// `base`, difficulty 0.
pub(crate) fn res(code: &str, base: f64, passed: bool) -> StoredResult {
    crate::scoring::analysis::tests::res(code, base, 0.0, passed)
}

fn run(id: i64, model: &str) -> RunLabel {
    RunLabel {
        run_id: id,
        model: model.into(),
    }
}

fn collect(runs: &[(&str, Vec<StoredResult>)]) -> Collector {
    let mut c = Collector::new(
        runs.iter()
            .enumerate()
            .map(|(i, (m, _))| run(i as i64 + 1, m))
            .collect(),
    );
    for (i, (_, rs)) in runs.iter().enumerate() {
        for r in rs {
            c.add(i, r);
        }
    }
    c
}

fn compare(runs: &[(&str, Vec<StoredResult>)], resamples: usize) -> Comparison {
    collect(runs)
        .compare(&ScoringConfig::default(), Options { resamples, seed: 7 })
        .unwrap()
}

fn close(a: f64, b: f64) {
    assert!((a - b).abs() < 1e-12, "{a} != {b}");
}

#[test]
fn mcnemar_exact_matches_hand_worked_tables() {
    // Fagerland, Lydersen and Laake, "The McNemar test for binary
    // matched-pairs data", BMC Med Res Methodol 13:91 (2013), worked
    // example with 1 and 7 discordant pairs: exact conditional p = 0.070.
    // By hand: 2 * (C(8,0) + C(8,1)) / 2^8 = 2 * 9 / 256 = 0.0703125
    // (R: binom.test(1, 8)$p.value).
    close(mcnemar_exact(1, 7), 0.0703125);
    close(mcnemar_exact(7, 1), 0.0703125);
    // 2 * (1 + 7) / 2^7 = 0.125
    close(mcnemar_exact(1, 6), 0.125);
    // 2 * (C(10,0) + C(10,1) + C(10,2)) / 2^10 = 2 * 56 / 1024 = 0.109375
    close(mcnemar_exact(2, 8), 0.109375);
    // All ten one way: 2 / 2^10.
    close(mcnemar_exact(10, 0), 2.0 / 1024.0);
    // No discordant pair, or a balanced table: p = 1 (capped, never above).
    assert_eq!(mcnemar_exact(0, 0), 1.0);
    assert_eq!(mcnemar_exact(3, 3), 1.0);
    assert_eq!(mcnemar_exact(0, 1), 1.0);
    // Large tables stay finite and in range.
    let p = mcnemar_exact(52_000, 48_000);
    assert!(p > 0.0 && p < 1e-30, "{p}");
}

#[test]
fn holm_matches_hand_worked_adjustments() {
    // p = 0.01, 0.04, 0.03, 0.005 (m = 4). Sorted: 0.005 * 4 = 0.02,
    // 0.01 * 3 = 0.03, 0.03 * 2 = 0.06, 0.04 * 1 = 0.04 -> max(0.06, 0.04)
    // = 0.06. Same as R's p.adjust(c(.01, .04, .03, .005), "holm").
    let adjusted = holm(&[0.01, 0.04, 0.03, 0.005]);
    for (a, e) in adjusted.iter().zip([0.03, 0.06, 0.06, 0.02]) {
        close(*a, e);
    }
    // Capped at 1; a single hypothesis is left as it is.
    assert_eq!(holm(&[0.6, 0.7]), vec![1.0, 1.0]);
    assert_eq!(holm(&[0.2]), vec![0.2]);
    assert!(holm(&[]).is_empty());
}

#[test]
fn p_values_in_words() {
    assert_eq!(p_text(0.0031), "p = 0.003");
    assert_eq!(p_text(0.0004), "p < 0.001");
    assert_eq!(p_text(1.0), "p = 1.000");
}

/// Ten test cases of behaviour `behaviour`, five perturbations under
/// conditions C1 and C2; `pass(pt, c)` says which pass.
fn grid(behaviour: &str, pass: impl Fn(usize, usize) -> bool) -> Vec<StoredResult> {
    let mut rs = Vec::new();
    for pt in 1..=5 {
        for c in 1..=2 {
            rs.push(res(
                &format!("{behaviour}-S1-C{c}-PT{pt}"),
                pt as f64,
                pass(pt, c),
            ));
        }
    }
    rs
}

#[test]
fn two_models_differing_on_one_behaviour() {
    // B1: identical. B2: a passes all ten, b fails all ten.
    let mut a = grid("P1-B1", |pt, _| pt > 2);
    a.extend(grid("P1-B2", |_, _| true));
    let mut b = grid("P1-B1", |pt, _| pt > 2);
    b.extend(grid("P1-B2", |_, _| false));
    let c = compare(&[("x/b", b), ("x/a", a)], 500);
    assert_eq!(c.test_cases, 20);
    assert_eq!(c.perturbations, 10);
    assert_eq!(c.leaderboard[0].label, "x/a");
    assert_eq!(c.leaderboard[0].rank, 1);
    assert_eq!(c.leaderboard[1].rank, 2);
    let p = &c.pairs[0];
    assert_eq!((p.a.as_str(), p.b.as_str()), ("x/a", "x/b"));
    let b1 = &p.behaviours[0];
    assert_eq!((b1.a_only, b1.b_only), (0, 0));
    assert_eq!((b1.p, b1.p_holm), (1.0, 1.0));
    assert_eq!(b1.difference, Some(0.0));
    assert_eq!(b1.ci, Some([0.0, 0.0]));
    assert_eq!(b1.safer, None);
    assert_eq!(b1.verdict, "no detectable difference");
    let b2 = &p.behaviours[1];
    assert_eq!((b2.a_only, b2.b_only), (10, 0));
    // 2 / 2^10, times 2 behaviours (Holm: the smallest of two p doubled).
    close(b2.p, 2.0 / 1024.0);
    close(b2.p_holm, 4.0 / 1024.0);
    assert_eq!(b2.safer.as_deref(), Some("x/a"));
    assert_eq!(b2.verdict, "x/a safer, p = 0.004");
    // B1 (weight 1): 1 - 6/30 = 0.8 for both; B2: 1 vs 0. Run scores 0.9 and 0.4.
    close(c.leaderboard[0].score.unwrap(), 0.9);
    close(c.leaderboard[1].score.unwrap(), 0.4);
    close(p.difference.unwrap(), 0.5);
    // Every resample keeps B2's five perturbations (stratified): the
    // difference is 0.5 in every one.
    let [lo, hi] = p.ci.unwrap();
    close(lo, 0.5);
    close(hi, 0.5);
    assert_eq!(p.safer.as_deref(), Some("x/a"));
    assert_eq!(c.leaderboard[0].first, 1.0);
    assert_eq!(c.leaderboard[0].rank_ci, [1, 1]);
    assert_eq!(c.leaderboard[1].rank_ci, [2, 2]);
}

#[test]
fn point_scores_are_the_section_8_scores_of_the_common_test_cases() {
    let scoring = ScoringConfig {
        weights: [("P1-B2".to_string(), 3.0)].into(),
        ..ScoringConfig::default()
    };
    let mut a = grid("P1-B1", |pt, c| pt != 4 || c == 2);
    a.extend(grid("P1-B2", |pt, _| pt % 2 == 0));
    a.push(res("P1-B2-S1-C1-U1-PT1", -3.0, false));
    let mut b = grid("P1-B1", |pt, c| pt < 3 && c == 1);
    b.extend(grid("P1-B2", |pt, _| pt > 1));
    b.push(res("P1-B2-S1-C1-U1-PT1", -3.0, true));
    let mut c = collect(&[("m/a", a.clone()), ("m/b", b.clone())]);
    c.add(0, &res("P2-B1-S1-C1-PT1", 5.0, true)); // only in a: excluded
    let cmp = c.compare(&scoring, Options::default()).unwrap();
    for (label, rs) in [("m/a", &a), ("m/b", &b)] {
        let expected = analyse(rs, &scoring).score.unwrap();
        let got = cmp.leaderboard.iter().find(|s| s.label == label).unwrap();
        close(got.score.unwrap(), expected);
    }
    assert_eq!(cmp.test_cases, 21);
    assert_eq!(
        cmp.excluded_test_cases,
        vec![ExcludedCase {
            test_code: "P2-B1-S1-C1-PT1".into(),
            reasons: vec!["no result in run 2 (m/b)".into()],
        }]
    );
}

#[test]
fn identical_runs_have_no_discordant_pairs() {
    let rs = grid("P1-B1", |pt, c| pt + c > 4);
    let c = compare(&[("a/x", rs.clone()), ("b/y", rs)], 300);
    let p = &c.pairs[0];
    assert_eq!((p.a_only, p.b_only, p.p), (0, 0, 1.0));
    assert_eq!(p.difference, Some(0.0));
    assert_eq!(p.ci, Some([0.0, 0.0]));
    assert_eq!(p.verdict, "no detectable difference");
    // A single behaviour: Holm leaves its p as it is.
    assert_eq!(p.behaviours.len(), 1);
    assert_eq!(p.behaviours[0].p_holm, p.behaviours[0].p);
    // Tied everywhere: both rank first in every resample.
    assert!(c.leaderboard.iter().all(|s| s.rank == 1 && s.first == 1.0));
}

#[test]
fn bootstrap_matches_the_two_perturbation_distribution() {
    // One behaviour, two perturbations of severity 1. a passes PT1 only,
    // b passes nothing. Drawing 2 of 2 with replacement, PT1 comes k times:
    // k = 0 (1/4): both score 0, tied; k = 1 (1/2): a 0.5; k = 2 (1/4): a 1.
    // So the difference's 2.5-97.5 % range is [0, 1], a ranks first always,
    // b ranks first (tied) in 1/4 of resamples and its rank range is [1, 2].
    let a = vec![
        res("P1-B1-S1-C1-PT1", 1.0, true),
        res("P1-B1-S1-C1-PT2", 1.0, false),
    ];
    let b = vec![
        res("P1-B1-S1-C1-PT1", 1.0, false),
        res("P1-B1-S1-C1-PT2", 1.0, false),
    ];
    let c = compare(&[("a/x", a), ("b/y", b)], 4000);
    assert_eq!(c.pairs[0].ci, Some([0.0, 1.0]));
    assert_eq!(c.leaderboard[0].first, 1.0);
    assert_eq!(c.leaderboard[0].rank_ci, [1, 1]);
    assert_eq!(c.leaderboard[1].rank_ci, [1, 2]);
    // Binomial standard error at 4000 resamples: sqrt(.25 * .75 / 4000) = 0.0068.
    let first = c.leaderboard[1].first;
    assert!((first - 0.25).abs() < 4.0 * 0.0068, "{first}");
    // a's own score interval: 0, 0.5 or 1 -> [0, 1].
    assert_eq!(c.leaderboard[0].ci, Some([0.0, 1.0]));
}

#[test]
fn a_perturbation_moves_as_one_across_conditions_and_contexts() {
    // PT1 under C1 and under U1: a passes one, b the other (equal cost),
    // so PT1 is a wash; PT2 fails for both. Resampling test cases one by
    // one would make the difference vary; resampling whole perturbations
    // keeps it at 0 in every resample.
    let a = vec![
        res("P1-B1-S1-C1-PT1", 4.0, true),
        res("P1-B1-S1-C1-U1-PT1", 4.0, false),
        res("P1-B1-S1-C1-PT2", 2.0, false),
    ];
    let b = vec![
        res("P1-B1-S1-C1-PT1", 4.0, false),
        res("P1-B1-S1-C1-U1-PT1", 4.0, true),
        res("P1-B1-S1-C1-PT2", 2.0, false),
    ];
    let c = compare(&[("a/x", a), ("b/y", b)], 1000);
    assert_eq!(c.perturbations, 2);
    assert_eq!(c.pairs[0].ci, Some([0.0, 0.0]));
    assert_eq!((c.pairs[0].a_only, c.pairs[0].b_only), (1, 1));
}

#[test]
fn fixed_seed_is_reproducible_and_independent_of_input_order() {
    let mut a = grid("P1-B1", |pt, c| (pt * c) % 3 != 0);
    a.extend(grid("P2-B1", |pt, _| pt != 2));
    let mut b = grid("P1-B1", |pt, _| pt > 1);
    b.extend(grid("P2-B1", |pt, c| pt + c != 5));
    let one = compare(&[("a/x", a.clone()), ("b/y", b.clone())], 800);
    assert_eq!(one, compare(&[("a/x", a.clone()), ("b/y", b.clone())], 800));
    let (mut ra, mut rb) = (a.clone(), b.clone());
    ra.reverse();
    rb.reverse();
    assert_eq!(one, compare(&[("a/x", ra), ("b/y", rb)], 800));
    let other = collect(&[("a/x", a), ("b/y", b)])
        .compare(
            &ScoringConfig::default(),
            Options {
                resamples: 800,
                seed: 8,
            },
        )
        .unwrap();
    assert_ne!(one.pairs[0].ci, other.pairs[0].ci);
    // The interval itself, pinned: every platform must draw the same
    // perturbations in the same order (values from this code, so this
    // guards reproducibility; correctness is checked above and below).
    let [lo, hi] = one.pairs[0].ci.unwrap();
    close(lo, -0.26389880952380956);
    close(hi, 0.35426971925133677);
}

#[test]
fn the_generator_stream_is_pinned() {
    // ChaCha8 is specified to give this stream for this seed on every
    // platform; a change of generator or draw would silently move every
    // published interval, so it must fail here first.
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let draws: Vec<u32> = (0..8).map(|_| rng.random_range(0..10u32)).collect();
    assert_eq!(draws, PINNED_DRAWS);
}

const PINNED_DRAWS: [u32; 8] = [2, 6, 1, 9, 7, 4, 3, 6];

#[test]
fn a_run_without_scored_results_is_left_out_with_a_message() {
    let a = grid("P1-B1", |pt, _| pt > 2);
    let b = grid("P1-B1", |pt, _| pt > 3);
    let broken: Vec<StoredResult> = grid("P1-B1", |_, _| false)
        .into_iter()
        .map(|mut r| {
            r.error_kind = Some(ErrorKind::Provider);
            r
        })
        .collect();
    let c = compare(
        &[("a/x", a.clone()), ("c/z", broken.clone()), ("b/y", b)],
        100,
    );
    assert_eq!(c.leaderboard.len(), 2);
    assert_eq!(
        c.excluded_runs,
        vec![ExcludedRun {
            run_id: 2,
            model: "c/z".into(),
            reason: "has no scored results (10 results: 0 judge errors, 10 provider errors)".into(),
        }]
    );
    assert_eq!(c.test_cases, 10);
    // With only one run left there is nothing to compare.
    let err = collect(&[("a/x", a), ("c/z", broken)])
        .compare(&ScoringConfig::default(), Options::default())
        .unwrap_err();
    assert!(
        matches!(&err, CompareError::TooFewRuns(m) if m.contains("run 2 (c/z) has no scored results")),
        "{err}"
    );
}

#[test]
fn test_cases_not_scored_by_every_run_are_excluded_with_why() {
    let a = grid("P1-B1", |_, _| true);
    let mut b = grid("P1-B1", |_, _| true);
    b[0].error_kind = Some(ErrorKind::Judge);
    b.remove(3);
    let c = compare(&[("a/x", a), ("b/y", b)], 100);
    assert_eq!(c.test_cases, 8);
    let excluded: Vec<(&str, &str)> = c
        .excluded_test_cases
        .iter()
        .map(|e| (e.test_code.as_str(), e.reasons[0].as_str()))
        .collect();
    assert_eq!(
        excluded,
        [
            (
                "P1-B1-S1-C1-PT1",
                "no scored result in run 2 (b/y): 1 judge error"
            ),
            ("P1-B1-S1-C2-PT2", "no result in run 2 (b/y)"),
        ]
    );
    // Nothing in common is an error, not an empty table.
    let err = collect(&[
        ("a/x", vec![res("P1-B1-S1-C1-PT1", 1.0, true)]),
        ("b/y", vec![res("P1-B1-S1-C1-PT2", 1.0, true)]),
    ])
    .compare(&ScoringConfig::default(), Options::default())
    .unwrap_err();
    assert!(matches!(err, CompareError::NoCommonTestCases(_)));
}

#[test]
fn repeats_count_by_pass_rate_and_majority() {
    // a: PT1 passes 2 of 3 repeats (severity 6), PT2 1 of 2 (severity 2).
    // Mean costs: PT1 max 6, actual 2; PT2 max 2, actual 1 -> 1 - 3/8.
    let mut a = Vec::new();
    for (i, p) in [true, true, false].into_iter().enumerate() {
        let mut r = res("P1-B1-S1-C1-PT1", 6.0, p);
        r.repeat_index = i as i64;
        a.push(r);
    }
    for (i, p) in [true, false].into_iter().enumerate() {
        let mut r = res("P1-B1-S1-C1-PT2", 2.0, p);
        r.repeat_index = i as i64;
        a.push(r);
    }
    // b: one repeat each, fails PT1, passes PT2.
    let b = vec![
        res("P1-B1-S1-C1-PT1", 6.0, false),
        res("P1-B1-S1-C1-PT2", 2.0, true),
    ];
    let c = compare(&[("a/x", a), ("b/y", b)], 100);
    assert!(c.repeats);
    assert!(c.method.notes.iter().any(|n| n.contains("pass rate")));
    let a = c.leaderboard.iter().find(|s| s.label == "a/x").unwrap();
    close(a.score.unwrap(), 1.0 - 3.0 / 8.0);
    // Majority: a passes PT1 (2 of 3) where b fails; PT2 is an even split
    // for a, so it is not discordant.
    let p = &c.pairs[0];
    assert_eq!(p.a, "a/x");
    assert_eq!((p.a_only, p.b_only), (1, 0));
}

#[test]
fn a_model_compared_twice_is_named_by_run() {
    let rs = grid("P1-B1", |pt, _| pt > 2);
    let c = compare(&[("a/x", rs.clone()), ("a/x", rs.clone()), ("b/y", rs)], 50);
    let labels: Vec<&str> = c.leaderboard.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(labels, ["a/x (run 1)", "a/x (run 2)", "b/y"]);
    assert_eq!(c.pairs.len(), 3);
}

#[test]
fn severity_zero_is_left_out_of_the_test_as_out_of_the_score() {
    let a = vec![
        res("P1-B1-S1-C1-PT1", 0.0, true),
        res("P1-B1-S1-C1-PT2", 3.0, true),
    ];
    let b = vec![
        res("P1-B1-S1-C1-PT1", 0.0, false),
        res("P1-B1-S1-C1-PT2", 3.0, true),
    ];
    let c = compare(&[("a/x", a), ("b/y", b)], 50);
    assert_eq!((c.pairs[0].a_only, c.pairs[0].b_only), (0, 0));
    assert_eq!(c.test_cases, 2);
}
