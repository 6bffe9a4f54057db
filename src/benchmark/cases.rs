//! Test cases (SPEC §3): a scenario under one condition, an optional user
//! context and one perturbation; their codes, their effective evaluation
//! and base severity, and the selectors that pick them.

use std::borrow::Cow;

use super::codes::parse_segment;
use super::variants::Swaps;
use super::{Benchmark, Component, EvalOverride, Evaluation, Rubric, Scenario};

/// One test case: a scenario under one condition, optional user context and
/// one perturbation.
#[derive(Debug, Clone, Copy)]
pub struct TestCase<'a> {
    pub scenario: &'a Scenario,
    pub condition: &'a Component,
    pub user_context: Option<&'a Component>,
    pub perturbation: &'a Component,
}

impl<'a> TestCase<'a> {
    /// `P1-B1-S1-C1-PT1` or `P1-B1-S1-C1-U1-PT1`.
    pub fn code(&self) -> String {
        let mut out = String::new();
        self.write_code(&mut out);
        out
    }

    /// [`TestCase::code`] into `out` (cleared first), reusing its allocation.
    pub fn write_code(&self, out: &mut String) {
        out.clear();
        out.push_str(&self.scenario.code);
        out.push('-');
        out.push_str(&self.condition.code);
        if let Some(u) = self.user_context {
            out.push('-');
            out.push_str(&u.code);
        }
        out.push('-');
        out.push_str(&self.perturbation.code);
    }

    /// The evaluation of this test case: the scenario's, with its
    /// components' overrides applied (SPEC §4), and in a variant that
    /// swapped names or pronouns, its expected values swapped alike.
    pub fn evaluation(&self) -> Cow<'a, Evaluation> {
        let ev = self
            .scenario
            .evaluation_for(self.condition, self.user_context, self.perturbation);
        self.swapped(ev)
    }

    /// [`TestCase::evaluation`] with a conversation turn's overrides
    /// (`o`) applied on top, swapped alike.
    pub fn evaluation_with(&self, o: Option<&EvalOverride>) -> Cow<'a, Evaluation> {
        match o {
            None => self.evaluation(),
            Some(o) => {
                let ev = self
                    .scenario
                    .evaluation_for(self.condition, self.user_context, self.perturbation)
                    .with_override(o);
                self.swapped(Cow::Owned(ev))
            }
        }
    }

    /// What a `names` or `pronouns` variant swapped in this (varied) test
    /// case's user messages; None for an original and every other variant.
    pub fn swaps(&self) -> Option<&'a Swaps> {
        self.scenario.varied.swaps.get(&self.perturbation.full_code)
    }

    /// The rubrics that judge this test case: the scenario's, with the
    /// swaps of a `names` or `pronouns` variant applied to their text, so
    /// the judge reads of the person the model was told about.
    pub fn rubrics(&self) -> Cow<'a, [Rubric]> {
        match self.swaps() {
            None => Cow::Borrowed(&self.scenario.rubrics),
            Some(swaps) => Cow::Owned(
                self.scenario
                    .rubrics
                    .iter()
                    .map(|r| Rubric {
                        prompt: swaps.apply(&r.prompt),
                        ..r.clone()
                    })
                    .collect(),
            ),
        }
    }

    /// `ev` with this test case's swaps applied to its expected and
    /// required values (a category that names the person).
    fn swapped(&self, ev: Cow<'a, Evaluation>) -> Cow<'a, Evaluation> {
        let Some(swaps) = self.swaps() else {
            return ev;
        };
        let mut ev = ev.into_owned();
        let values = match &mut ev {
            Evaluation::CategoryMatch { expected, .. }
            | Evaluation::TagThreshold { expected, .. } => expected,
            Evaluation::ListIncludes { required, .. } => required,
            Evaluation::Sqe | Evaluation::Mcsqe => return Cow::Owned(ev),
        };
        for v in values.iter_mut() {
            *v = swaps.apply(v);
        }
        Cow::Owned(ev)
    }

    /// Perturbation severity plus user-context severity (SPEC §8).
    pub fn base_severity(&self) -> f64 {
        self.perturbation.severity + self.user_context.map_or(0.0, |u| u.severity)
    }
}

/// A validated selector: a scenario code, a test code or a prefix of either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector(String);

impl Selector {
    /// Accepts `P1`, `P1-B2`, `P1-B2-S1`, `P1-B2-S1-C1-PT3`, ... Anything
    /// else (a path, `..`, lower case, spaces) is refused so it cannot be
    /// mistaken for a file or match by accident.
    pub fn parse(s: &str) -> Result<Self, String> {
        let expected = "expected a code such as P1, P1-B2, P1-B2-S1 or P1-B2-S1-C1-PT3";
        let s = s.trim();
        if s.is_empty() {
            return Err(format!("empty selector ({expected})"));
        }
        let order = ["P", "B", "S", "C"];
        let segs: Vec<&str> = s.split('-').collect();
        for (i, seg) in segs.iter().enumerate() {
            let ok = match parse_segment(seg) {
                Some((p, _, draft)) => {
                    // A persona scenario's test code ends in its persona
                    // (`…-PT1-PR2`), right after the perturbation.
                    let persona =
                        i >= 5 && p == "PR" && i + 1 == segs.len() && segs[i - 1].starts_with("PT");
                    let want_ok = if i < 4 {
                        p == order[i]
                    } else if i == 4 {
                        p == "U" || p == "PT"
                    } else {
                        (i == 5 && p == "PT" && segs[4].starts_with('U')) || persona
                    };
                    want_ok && (draft.is_empty() || p == "S" || i >= 3)
                }
                None => false,
            };
            if !ok {
                return Err(format!(
                    "selector `{s}` is not a test or scenario code ({expected})"
                ));
            }
        }
        Ok(Selector(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `code` is this selector or starts with it followed by `-`.
    pub fn matches(&self, code: &str) -> bool {
        code == self.0
            || (code.len() > self.0.len()
                && code.starts_with(&self.0)
                && code.as_bytes()[self.0.len()] == b'-')
    }

    /// Whether any test case of `scenario` can match (prefix either way).
    pub fn may_match_scenario(&self, scenario_code: &str) -> bool {
        self.matches(scenario_code) || Selector(scenario_code.to_string()).matches(&self.0)
    }
}

/// A test case as indices into the benchmark: `Copy` and `'static`, so it
/// can be queued and sent between tasks. `u32`, not `usize`: a run holds one
/// per planned request (hundreds of thousands), and this halves that list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaseIndex {
    pub scenario: u32,
    pub condition: u32,
    pub user_context: Option<u32>,
    pub perturbation: u32,
}

impl CaseIndex {
    pub fn resolve(self, b: &Benchmark) -> TestCase<'_> {
        let s = &b.scenarios[self.scenario as usize];
        // Past the perturbations: a variant a run made (vary::expand).
        let p = self.perturbation as usize;
        let perturbation = match p.checked_sub(s.perturbations.len()) {
            None => &s.perturbations[p],
            Some(v) => &s.varied.components[v],
        };
        TestCase {
            scenario: s,
            condition: &s.conditions[self.condition as usize],
            user_context: self.user_context.map(|u| &s.user_contexts[u as usize]),
            perturbation,
        }
    }
}

/// Test cases of `benchmark` matching any selector (all when none), in
/// natural order. A selector that matches nothing is an error naming it.
pub fn select_indices(
    benchmark: &Benchmark,
    selectors: &[Selector],
    include_no_context: bool,
) -> Result<Vec<CaseIndex>, String> {
    let mut out = Vec::new();
    let mut used = vec![false; selectors.len()];
    let mut code = String::new();
    let mut partial: Vec<usize> = Vec::new();
    for (si, scenario) in benchmark.scenarios.iter().enumerate() {
        // Selectors equal to or above the scenario (`P1`, `P1-B1-S1`) take
        // all of its test cases; only longer ones (`P1-B1-S1-C2`) need each
        // test case's code, written into one reused buffer.
        let mut whole = selectors.is_empty();
        partial.clear();
        for (i, s) in selectors.iter().enumerate() {
            if s.matches(&scenario.code) {
                whole = true;
                if scenario.test_case_count(include_no_context) > 0 {
                    used[i] = true;
                }
            } else if s.may_match_scenario(&scenario.code) {
                partial.push(i);
            }
        }
        if !whole && partial.is_empty() {
            continue;
        }
        // Counts fit in u32: the loader caps each file at 8 MB.
        let contexts: Vec<Option<u32>> = include_no_context
            .then_some(None)
            .into_iter()
            .chain((0..scenario.user_contexts.len() as u32).map(Some))
            .collect();
        for ci in 0..scenario.conditions.len() as u32 {
            for &ui in &contexts {
                for pi in 0..scenario.perturbations.len() as u32 {
                    let idx = CaseIndex {
                        scenario: si as u32,
                        condition: ci,
                        user_context: ui,
                        perturbation: pi,
                    };
                    let mut hit = whole;
                    if !partial.is_empty() {
                        idx.resolve(benchmark).write_code(&mut code);
                        for &i in &partial {
                            if selectors[i].matches(&code) {
                                used[i] = true;
                                hit = true;
                            }
                        }
                    }
                    if hit {
                        out.push(idx);
                    }
                }
            }
        }
    }
    let unused: Vec<&str> = selectors
        .iter()
        .zip(&used)
        .filter(|(_, u)| !**u)
        .map(|(s, _)| s.as_str())
        .collect();
    if !unused.is_empty() {
        return Err(format!(
            "no test case matches {} (run `helmbench list` to see the scenarios)",
            unused.join(", ")
        ));
    }
    Ok(out)
}

/// [`select_indices`], resolved to test cases.
pub fn select<'a>(
    benchmark: &'a Benchmark,
    selectors: &[Selector],
    include_no_context: bool,
) -> Result<Vec<TestCase<'a>>, String> {
    Ok(select_indices(benchmark, selectors, include_no_context)?
        .into_iter()
        .map(|i| i.resolve(benchmark))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_matches_codes_one_by_one() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benchmark");
        let b = crate::content::load_strict(&root).unwrap();
        let all = select_indices(&b, &[], true).unwrap();
        assert_eq!(all.len(), b.total_test_cases(true));
        let groups: &[&[&str]] = &[
            &["P1"],
            &["P1-B1-S1"],
            &["P1-B1-S1-C2"],
            &["P1-B1-S1-C1-U1"],
            &["P1-B1-S1-C1-PT2", "P1-B1"],
            &["P2", "P2-B1-S1-C1-U1-PT3", "P3-B3-S1-C1"],
        ];
        for group in groups {
            let selectors: Vec<Selector> =
                group.iter().map(|s| Selector::parse(s).unwrap()).collect();
            for no_context in [true, false] {
                let codes: Vec<(CaseIndex, String)> = select_indices(&b, &[], no_context)
                    .unwrap()
                    .into_iter()
                    .map(|i| (i, i.resolve(&b).code()))
                    .collect();
                let naive: Vec<CaseIndex> = codes
                    .iter()
                    .filter(|(_, code)| selectors.iter().any(|s| s.matches(code)))
                    .map(|(i, _)| *i)
                    .collect();
                let all_used = selectors
                    .iter()
                    .all(|s| codes.iter().any(|(_, code)| s.matches(code)));
                let got = select_indices(&b, &selectors, no_context);
                if all_used {
                    assert_eq!(got.unwrap(), naive, "{group:?}");
                } else {
                    assert!(got.is_err(), "{group:?} without context");
                }
            }
        }
        let missing = [
            Selector::parse("P1").unwrap(),
            Selector::parse("P1-B1-S1-C99").unwrap(),
        ];
        let err = select_indices(&b, &missing, true).unwrap_err();
        assert!(
            err.contains("P1-B1-S1-C99") && !err.contains("P1,"),
            "{err}"
        );
    }

    #[test]
    fn selectors() {
        for ok in [
            "P1",
            "P1-B2",
            "P1-B2-S1A",
            "P1-B2-S1-C1",
            "P1-B2-S1-C1-PT3",
            "P1-B2-S1-C1-U2",
            "P1-B2-S1-C1-U2-PT3",
        ] {
            assert!(Selector::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "../P1",
            "P1/B1",
            "p1",
            "P1-S1",
            "P1-B1-S1-PT1",
            "P1-B1-S1-C1-PT1-U1",
            "P1-B1-S1-C1-U1-U2",
            "P1 B1",
        ] {
            assert!(Selector::parse(bad).is_err(), "{bad}");
        }
        let s = Selector::parse("P1-B1-S1").unwrap();
        assert!(s.matches("P1-B1-S1-C1-PT1"));
        assert!(s.matches("P1-B1-S1"));
        assert!(!s.matches("P1-B1-S10-C1-PT1"));
        assert!(!s.matches("P1-B1-S1A-C1-PT1"));
        assert!(
            Selector::parse("P1-B1-S1-C1-PT1")
                .unwrap()
                .may_match_scenario("P1-B1-S1")
        );
    }
}
