//! [`Analyser`]: the analysis taken as results stream past, one at a time,
//! so `report` reads a run once and keeps only totals and one small entry
//! per test case (issue 45: 110,000 results no longer sit in memory as
//! rows). Every sum is added in the order the results arrive, as the
//! in-memory analysis did, so the numbers are the same to the last bit.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use super::{
    Analysis, BehaviourScore, Breakdown, Consistency, CurvePoint, FLOOR_EPSILON, NonMonotonic,
    Tally,
};
use crate::benchmark::ScoringConfig;
use crate::benchmark::codes::natural_cmp;
use crate::domain::{BlockedAs, ErrorKind, StoredResult};

/// One behaviour's running totals.
#[derive(Default)]
struct BehaviourTotals {
    tally: Tally,
    blocked: usize,
    refused: usize,
    by_condition: BTreeMap<String, Tally>,
    by_user_context: BTreeMap<String, Tally>,
    /// Detection per base severity (`base > 0`, scored), by the severity's
    /// bits: for positive numbers their order is the numbers' order.
    curve: BTreeMap<u64, (f64, usize, usize)>,
}

/// One scored result as the bootstrap and the repeats' agreement need it:
/// its test code (a range of [`Analyser::test_codes`], one string for the
/// whole run rather than one per result), behaviour index, verdict and costs.
struct Scored {
    code: (u32, u32),
    behaviour: u32,
    passed: bool,
    max: f64,
    actual: f64,
}

/// A group of the non-monotonic check: (scenario, condition, user context)
/// code indexes.
type GroupKey = (u32, u32, Option<u32>);

/// A candidate of the non-monotonic check: (perturbation code index, base, passed).
type Candidate = (u32, f64, bool);

/// The analysis of results added one at a time; [`Analyser::finish`]
/// gives what [`super::analyse`] gives on the same results in the same order.
pub struct Analyser {
    blocked_as: BlockedAs,
    overall: Tally,
    behaviours: BTreeMap<String, BehaviourTotals>,
    /// Behaviours of scored results in the order first seen (the
    /// bootstrap's order of summation).
    scored_behaviours: Vec<String>,
    scored_index: HashMap<String, u32>,
    scored: Vec<Scored>,
    test_codes: String,
    /// Scenario, condition, user context and perturbation codes by index.
    codes: Codes,
    /// The non-monotonic check's candidates by (scenario, condition, user
    /// context) index: no copy of a code per result.
    monotonic: HashMap<GroupKey, Vec<Candidate>>,
}

/// Codes as small numbers, so a result adds no string of its own.
#[derive(Default)]
struct Codes {
    names: Vec<String>,
    index: HashMap<String, u32>,
}

impl Codes {
    fn of(&mut self, code: &str) -> u32 {
        if let Some(&i) = self.index.get(code) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(code.to_string());
        self.index.insert(code.to_string(), i);
        i
    }

    fn name(&self, i: u32) -> &str {
        &self.names[i as usize]
    }
}

impl Analyser {
    pub fn new(blocked_as: BlockedAs) -> Analyser {
        Analyser {
            blocked_as,
            overall: Tally::default(),
            behaviours: BTreeMap::new(),
            scored_behaviours: Vec::new(),
            scored_index: HashMap::new(),
            scored: Vec::new(),
            test_codes: String::new(),
            codes: Codes::default(),
            monotonic: HashMap::new(),
        }
    }

    pub fn add(&mut self, stored: &StoredResult) {
        // Coverage comes from the result as stored; with `--blocked-as
        // fail` a blocked one is then scored as a miss.
        let r: Cow<StoredResult> = match self.blocked_as {
            BlockedAs::Fail if stored.is_blocked() => Cow::Owned(stored.counted_as_miss()),
            _ => Cow::Borrowed(stored),
        };
        self.overall.add(&r);
        let b = entry(&mut self.behaviours, &r.behaviour);
        match stored.error_kind {
            Some(ErrorKind::Blocked) => b.blocked += 1,
            Some(ErrorKind::Refused) => b.refused += 1,
            _ => {}
        }
        b.tally.add(&r);
        entry(&mut b.by_condition, &r.condition).add(&r);
        entry(
            &mut b.by_user_context,
            r.user_context.as_deref().unwrap_or("none"),
        )
        .add(&r);
        if !r.is_scored() {
            return;
        }
        if r.base_severity > 0.0 {
            let point = b
                .curve
                .entry(r.base_severity.to_bits())
                .or_insert((r.base_severity, 0, 0));
            point.1 += 1;
            point.2 += usize::from(r.passed);
        }
        let index = match self.scored_index.get(r.behaviour.as_str()) {
            Some(&i) => i,
            None => {
                let i = self.scored_behaviours.len() as u32;
                self.scored_behaviours.push(r.behaviour.clone());
                self.scored_index.insert(r.behaviour.clone(), i);
                i
            }
        };
        let (max, actual) = r.cost();
        let start = self.test_codes.len() as u32;
        self.test_codes.push_str(&r.test_code);
        self.scored.push(Scored {
            code: (start, self.test_codes.len() as u32),
            behaviour: index,
            passed: r.passed,
            max,
            actual,
        });
        if r.repeat_index == 0 && r.base_severity > 0.0 {
            let key = (
                self.codes.of(&r.scenario),
                self.codes.of(&r.condition),
                r.user_context.as_deref().map(|u| self.codes.of(u)),
            );
            let p = self.codes.of(&r.perturbation);
            self.monotonic
                .entry(key)
                .or_default()
                .push((p, r.base_severity, r.passed));
        }
    }

    pub fn finish(self, scoring: &ScoringConfig) -> Analysis {
        let mut behaviours: Vec<(String, BehaviourTotals)> = self.behaviours.into_iter().collect();
        behaviours.sort_by(|a, b| natural_cmp(&a.0, &b.0));
        let behaviours: Vec<BehaviourScore> = behaviours
            .into_iter()
            .map(|(code, t)| behaviour(code, t, scoring))
            .collect();
        let weights: Vec<f64> = self
            .scored_behaviours
            .iter()
            .map(|code| scoring.weight(code))
            .collect();
        let code = |x: &Scored| &self.test_codes[x.code.0 as usize..x.code.1 as usize];
        let behaviour_of = |x: &Scored| self.scored_behaviours[x.behaviour as usize].as_str();
        // Agreement across repeats: the scored results of each test code.
        let mut order: Vec<u32> = (0..self.scored.len() as u32).collect();
        order.sort_by(|&a, &b| code(&self.scored[a as usize]).cmp(code(&self.scored[b as usize])));
        let (mut repeated, mut consistent) = (0, 0);
        for same in order
            .chunk_by(|&a, &b| code(&self.scored[a as usize]) == code(&self.scored[b as usize]))
        {
            if same.len() > 1 {
                repeated += 1;
                let first = self.scored[same[0] as usize].passed;
                consistent += usize::from(
                    same.iter()
                        .all(|&i| self.scored[i as usize].passed == first),
                );
            }
        }
        // The bootstrap draws test cases in (behaviour, test code) order,
        // each the sum of its repeats in the order they came (the sort is
        // stable).
        order.sort_by(|&a, &b| {
            let (a, b) = (&self.scored[a as usize], &self.scored[b as usize]);
            (behaviour_of(a), code(a)).cmp(&(behaviour_of(b), code(b)))
        });
        let mut cases: Vec<(usize, f64, f64)> = Vec::with_capacity(order.len());
        let mut last: Option<&Scored> = None;
        for &i in &order {
            let x = &self.scored[i as usize];
            match (last, cases.last_mut()) {
                (Some(l), Some(case)) if l.behaviour == x.behaviour && code(l) == code(x) => {
                    case.1 += x.max;
                    case.2 += x.actual;
                }
                _ => cases.push((x.behaviour as usize, x.max, x.actual)),
            }
            last = Some(x);
        }
        drop(order);
        let score_ci = super::bootstrap_cases(
            &cases,
            &weights,
            super::BOOTSTRAP_SAMPLES,
            super::BOOTSTRAP_SEED,
        );
        let consistency = (repeated > 0).then(|| Consistency {
            test_cases: repeated,
            consistent,
            rate: consistent as f64 / repeated as f64,
        });
        let non_monotonic = non_monotonic(self.monotonic, &self.codes);
        super::assemble(
            scoring,
            self.overall,
            behaviours,
            score_ci.map(|(lo, hi)| [lo, hi]),
            non_monotonic,
            consistency,
        )
    }
}

/// The totals under `key`, made on first use without copying the key again.
fn entry<'a, T: Default>(map: &'a mut BTreeMap<String, T>, key: &str) -> &'a mut T {
    if !map.contains_key(key) {
        map.insert(key.to_string(), T::default());
    }
    map.get_mut(key).expect("just inserted")
}

fn behaviour(code: String, t: BehaviourTotals, scoring: &ScoringConfig) -> BehaviourScore {
    let score = t.tally.score();
    let floor = scoring.floors.get(&code).copied();
    let below_floor = matches!((score, floor), (Some(s), Some(f)) if s < f - FLOOR_EPSILON);
    let breakdown = |groups: BTreeMap<String, Tally>| -> Vec<Breakdown> {
        let mut groups: Vec<(String, Tally)> = groups.into_iter().collect();
        groups.sort_by(|a, b| natural_cmp(&a.0, &b.0));
        groups.into_iter().map(|(k, t)| t.breakdown(k)).collect()
    };
    let mut by_user_context = breakdown(t.by_user_context);
    // "none" (no user context) leads, the codes follow in natural order.
    by_user_context.sort_by(|a, b| {
        (a.key != "none")
            .cmp(&(b.key != "none"))
            .then(natural_cmp(&a.key, &b.key))
    });
    BehaviourScore {
        weight: scoring.weight(&code),
        score,
        actual_cost: t.tally.actual.value(),
        max_cost: t.tally.max.value(),
        tests: t.tally.tests,
        scored: t.tally.scored,
        passed: t.tally.passed,
        format_failures: t.tally.format_failures,
        judge_errors: t.tally.judge_errors,
        provider_errors: t.tally.provider_errors,
        blocked: t.blocked,
        refused: t.refused,
        sensitivity: t.tally.sensitivity(),
        specificity: t.tally.specificity(),
        floor,
        below_floor,
        by_condition: breakdown(t.by_condition),
        by_user_context,
        detection_curve: t
            .curve
            .into_values()
            .map(|(severity, tests, caught)| CurvePoint {
                severity,
                tests,
                caught,
                rate: caught as f64 / tests as f64,
            })
            .collect(),
        code,
    }
}

/// Every (caught, missed) pair where the missed perturbation has a strictly
/// higher base than the caught one, within a scenario, condition and user
/// context (repeat 0, scored, `base > 0`).
fn non_monotonic(groups: HashMap<GroupKey, Vec<Candidate>>, codes: &Codes) -> Vec<NonMonotonic> {
    // In the order of the codes themselves (as strings), as before.
    let mut groups: Vec<(GroupKey, Vec<Candidate>)> = groups.into_iter().collect();
    groups.sort_unstable_by(|(a, _), (b, _)| {
        let strings = |k: &GroupKey| (codes.name(k.0), codes.name(k.1), k.2.map(|u| codes.name(u)));
        strings(a).cmp(&strings(b))
    });
    let mut flags = Vec::new();
    for ((scenario, condition, user_context), mut group) in groups {
        let (scenario, condition) = (codes.name(scenario), codes.name(condition));
        let user_context = user_context.map(|u| codes.name(u));
        group.sort_by(|a, b| natural_cmp(codes.name(a.0), codes.name(b.0)));
        for missed in group.iter().filter(|r| !r.2) {
            for caught in group.iter().filter(|r| r.2 && r.1 < missed.1) {
                flags.push(NonMonotonic {
                    scenario: scenario.to_string(),
                    condition: condition.to_string(),
                    user_context: user_context.map(str::to_string),
                    caught: codes.name(caught.0).to_string(),
                    caught_base: caught.1,
                    missed: codes.name(missed.0).to_string(),
                    missed_base: missed.1,
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
