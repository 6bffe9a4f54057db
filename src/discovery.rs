//! Finding scenario folders on disk (flat `P1-B1-S1/` and nested `P1/B1/S1/`
//! layouts, readability suffixes after `--`), the test-case notation
//! (`P1-B1-S1-C1-U1-PT1`), natural ordering of codes, and selectors.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::benchmark::{Benchmark, Component, Scenario};
use crate::content::ContentError;

/// Strips a readability suffix: `S1--basic-threat` -> `S1`.
pub fn strip_suffix(name: &str) -> &str {
    name.split_once("--").map_or(name, |(code, _)| code)
}

/// One segment of a code: letters, a number, an optional draft letter.
/// `PT10` -> ("PT", 10, ""), `S1A` -> ("S", 1, "A").
pub fn parse_segment(seg: &str) -> Option<(&str, u64, &str)> {
    let letters = seg.find(|c: char| c.is_ascii_digit())?;
    let (prefix, rest) = seg.split_at(letters);
    if prefix.is_empty() || !prefix.chars().all(|c| c.is_ascii_uppercase()) {
        return None;
    }
    let digits_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (digits, draft) = rest.split_at(digits_end);
    if digits.len() > 9 || !draft.chars().all(|c| c.is_ascii_uppercase()) || draft.len() > 2 {
        return None;
    }
    Some((prefix, digits.parse().ok()?, draft))
}

/// Whether `seg` is a segment with the given letter prefix (`C3`, `PT10`, `S1A`).
pub fn is_segment(seg: &str, prefix: &str) -> bool {
    parse_segment(seg).is_some_and(|(p, _, _)| p == prefix)
}

/// Natural order of codes: `PT2` before `PT10`, `S1` before `S1A` before `S2`.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let mut xs = a.split('-');
    let mut ys = b.split('-');
    loop {
        match (xs.next(), ys.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let ord = match (parse_segment(x), parse_segment(y)) {
                    (Some((px, nx, dx)), Some((py, ny, dy))) => {
                        px.cmp(py).then(nx.cmp(&ny)).then(dx.cmp(dy))
                    }
                    _ => x.cmp(y),
                };
                if ord != Ordering::Equal {
                    return ord;
                }
            }
        }
    }
}

/// A scenario folder found on disk, before its files are read.
#[derive(Debug, Clone)]
pub struct ScenarioDir {
    /// `P1-B1-S1`
    pub code: String,
    pub pillar: String,
    pub behaviour: String,
    /// `S1` or `S1A`
    pub short: String,
    pub dir: PathBuf,
    /// The pillar and behaviour folders in the nested layout (for README.md).
    pub pillar_dir: Option<PathBuf>,
    pub behaviour_dir: Option<PathBuf>,
}

/// Walks `scenarios/` and returns every scenario folder in natural order.
///
/// A folder is a scenario when its path below `scenarios/` (suffixes
/// stripped, joined with `-`) reads `P<n>-B<n>-S<n>`; anything that reads as
/// less (`P1`, `P1/B1`) is descended into. Hidden folders are skipped;
/// symlinks are followed but a loop is reported, not walked forever.
pub fn find_scenarios(root: &Path) -> (Vec<ScenarioDir>, Vec<ContentError>) {
    let mut found = Vec::new();
    let mut errors = Vec::new();
    let mut seen = HashSet::new();
    if !root.is_dir() {
        errors.push(ContentError::new(
            root,
            "scenarios folder not found (expected benchmark/scenarios/ holding scenario folders)",
        ));
        return (found, errors);
    }
    walk(root, &[], &mut seen, &mut found, &mut errors, 0);
    found.sort_by(|a, b| natural_cmp(&a.code, &b.code));
    // Two folders for one code (flat and nested, or two suffixes) is ambiguous.
    for pair in found.windows(2) {
        if pair[0].code == pair[1].code {
            errors.push(ContentError::new(
                &pair[1].dir,
                format!(
                    "duplicate scenario {}: also defined by {} (expected one folder per scenario code)",
                    pair[1].code,
                    pair[0].dir.display()
                ),
            ));
        }
    }
    found.dedup_by(|b, a| a.code == b.code);
    (found, errors)
}

fn walk(
    dir: &Path,
    parts: &[(String, PathBuf)],
    seen: &mut HashSet<PathBuf>,
    found: &mut Vec<ScenarioDir>,
    errors: &mut Vec<ContentError>,
    depth: usize,
) {
    let canonical = match dir.canonicalize() {
        Ok(c) => c,
        Err(e) => {
            errors.push(ContentError::new(dir, format!("cannot open folder: {e}")));
            return;
        }
    };
    if !seen.insert(canonical) || depth > 8 {
        errors.push(ContentError::new(
            dir,
            "folder is reached twice (a symlink loop or a link back into scenarios/); expected a tree",
        ));
        return;
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            errors.push(ContentError::new(dir, format!("cannot read folder: {e}")));
            return;
        }
    };
    let mut children: Vec<PathBuf> = Vec::new();
    for entry in entries.filter_map(|e| e.ok()) {
        let p = entry.path();
        if p.is_dir() {
            children.push(p);
        } else if let Some(name) = entry.file_name().to_str()
            && is_scenario_file(name)
        {
            // `scenarios/P1-B8/S1.md`: a scenario's file in a folder that
            // is not a scenario; nothing would ever read it.
            errors.push(ContentError::new(
                &p,
                format!(
                    "scenario file outside a scenario folder: nothing reads it here (expected it inside a folder such as {})",
                    example_scenario_folder(parts, name)
                ),
            ));
        } else if entry.file_type().is_ok_and(|t| t.is_symlink())
            && let Err(e) = std::fs::metadata(&p)
            && !entry.file_name().to_string_lossy().starts_with('.')
        {
            // A link to itself or to nowhere: following it fails, and
            // skipping it would drop whatever it was meant to hold.
            errors.push(ContentError::new(
                &p,
                format!("cannot open folder: {e} (a symlink loop or a dangling link)"),
            ));
        }
    }
    children.sort();
    for child in children {
        let Some(name) = child.file_name().and_then(|n| n.to_str()) else {
            // Skipping it silently would drop a scenario without a word.
            errors.push(ContentError::new(
                &child,
                "folder name is not valid UTF-8 (expected a scenario path such as P1-B1-S1)",
            ));
            continue;
        };
        if name.starts_with('.') || name.starts_with('_') {
            continue;
        }
        let mut codes: Vec<(String, PathBuf)> = parts.to_vec();
        for seg in strip_suffix(name).split('-') {
            codes.push((seg.to_string(), child.clone()));
        }
        match classify(&codes) {
            Shape::Scenario => {
                let pillar_dir = folder_of(&codes, 0, &child);
                let behaviour_dir = folder_of(&codes, 1, &child);
                found.push(ScenarioDir {
                    code: codes
                        .iter()
                        .map(|c| c.0.as_str())
                        .collect::<Vec<_>>()
                        .join("-"),
                    pillar: codes[0].0.clone(),
                    behaviour: format!("{}-{}", codes[0].0, codes[1].0),
                    short: codes[2].0.clone(),
                    dir: child,
                    pillar_dir,
                    behaviour_dir,
                });
            }
            Shape::Partial => walk(&child, &codes, seen, found, errors, depth + 1),
            Shape::Other => {
                // Component folders and notes live inside scenarios; anything
                // else named like a code is an authoring slip worth reporting.
                if let Some(code) = near_miss(parts, name) {
                    errors.push(ContentError::new(
                        &child,
                        format!(
                            "folder name `{name}` is close to scenario path {code} but does not parse, so it would be skipped (codes are upper case, separated by `-` or nested folders, with an optional --suffix; prefix the folder with `_` to leave it out on purpose)"
                        ),
                    ));
                } else if parts.len() < 3 && looks_like_code(name) {
                    errors.push(ContentError::new(
                        &child,
                        "folder name is not a scenario path (expected P<n>-B<n>-S<n>, or nested P<n>/B<n>/S<n>, with an optional --suffix)",
                    ));
                }
            }
        }
    }
}

enum Shape {
    Scenario,
    Partial,
    Other,
}

fn classify(codes: &[(String, PathBuf)]) -> Shape {
    let want = ["P", "B", "S"];
    if codes.len() > 3 {
        return Shape::Other;
    }
    for (i, (seg, _)) in codes.iter().enumerate() {
        match parse_segment(seg) {
            Some((p, _, draft)) if p == want[i] && (draft.is_empty() || p == "S") => {}
            _ => return Shape::Other,
        }
    }
    if codes.len() == 3 {
        Shape::Scenario
    } else {
        Shape::Partial
    }
}

/// The folder that introduced segment `i`, when it is not the scenario folder itself.
fn folder_of(codes: &[(String, PathBuf)], i: usize, scenario_dir: &Path) -> Option<PathBuf> {
    let p = &codes[i].1;
    (p != scenario_dir).then(|| p.clone())
}

/// What an author probably meant by a folder name that does not parse:
/// `p1-b3-s1`, `P1_B4_S1`, `P1.B1.S1`, `P1B1S1`, or a lower-case `b1` under
/// `P1/`. Some(the code) when the name, upper-cased and with `_`, `.` or
/// spaces read as `-`, continues the path so far as a scenario or as a
/// pillar or behaviour folder. Names that are not codes at all (`notes`,
/// `images`, `v2`) give None.
fn near_miss(parts: &[(String, PathBuf)], name: &str) -> Option<String> {
    let base = strip_suffix(name);
    let mut norm = String::with_capacity(base.len() + 4);
    let chars: Vec<char> = base.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let c = c.to_ascii_uppercase();
        match c {
            '_' | '.' | ' ' => norm.push('-'),
            // `P1B1S1`: a segment letter right after a number starts a new
            // segment (but not a draft letter, which ends the name or a segment).
            'B' | 'S' | 'P'
                if i > 0
                    && chars[i - 1].is_ascii_digit()
                    && chars.get(i + 1).is_some_and(char::is_ascii_digit) =>
            {
                norm.push('-');
                norm.push(c);
            }
            c => norm.push(c),
        }
    }
    if norm == base {
        return None;
    }
    let mut codes: Vec<(String, PathBuf)> = parts.to_vec();
    for seg in norm.split('-').filter(|s| !s.is_empty()) {
        codes.push((seg.to_string(), PathBuf::new()));
    }
    match classify(&codes) {
        Shape::Scenario | Shape::Partial => Some(
            codes
                .iter()
                .map(|c| c.0.as_str())
                .collect::<Vec<_>>()
                .join("-"),
        ),
        Shape::Other => None,
    }
}

/// Files that belong inside a scenario folder: `S1.md`, `S1A.json`,
/// `MCSQE.md`, `CR2.md`, `criteria.md` and the component files, with an
/// optional `--suffix`, in any case. README.md and other notes are not.
fn is_scenario_file(name: &str) -> bool {
    let Some((stem, ext)) = name.rsplit_once('.') else {
        return false;
    };
    let ext = ext.to_ascii_lowercase();
    let stem = strip_suffix(stem).to_ascii_uppercase();
    match ext.as_str() {
        "md" => {
            matches!(
                stem.as_str(),
                "MCSQE" | "CRITERIA" | "CONDITIONS" | "PERTURBATIONS" | "USER-CONTEXTS"
            ) || is_segment(&stem, "S")
                || is_segment(&stem, "CR")
        }
        "json" => is_segment(&stem, "S"),
        _ => false,
    }
}

/// A scenario folder path for the message about a stray scenario file
/// `name`, continuing the path so far (`P1-B8-S1/ or P1/B8/S1/`).
fn example_scenario_folder(parts: &[(String, PathBuf)], name: &str) -> String {
    let stem = name.split('.').next().unwrap_or("");
    let short = if is_segment(strip_suffix(stem), "S") {
        strip_suffix(stem)
    } else {
        "S1"
    };
    let mut codes: Vec<&str> = parts.iter().map(|c| c.0.as_str()).collect();
    for fill in ["P1", "B1", short].iter().skip(codes.len()) {
        codes.push(fill);
    }
    format!("{}/ or {}/", codes.join("-"), codes.join("/"))
}

fn looks_like_code(name: &str) -> bool {
    let first = strip_suffix(name).split('-').next().unwrap_or("");
    matches!(parse_segment(first), Some(("P", _, _)))
}

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
    /// components' overrides applied (SPEC §4).
    pub fn evaluation(&self) -> std::borrow::Cow<'a, crate::benchmark::Evaluation> {
        self.scenario
            .evaluation_for(self.condition, self.user_context, self.perturbation)
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
                    let want_ok = if i < 4 {
                        p == order[i]
                    } else if i == 4 {
                        p == "U" || p == "PT"
                    } else {
                        i == 5 && p == "PT" && segs[4].starts_with('U')
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
        TestCase {
            scenario: s,
            condition: &s.conditions[self.condition as usize],
            user_context: self.user_context.map(|u| &s.user_contexts[u as usize]),
            perturbation: &s.perturbations[self.perturbation as usize],
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
    fn natural_order() {
        let mut v = vec![
            "P1-B1-S1-C1-PT10",
            "P1-B1-S1-C1-PT2",
            "P1-B1-S1A",
            "P1-B1-S2",
            "P1-B1-S1",
            "P10-B1-S1",
            "P2-B1-S1",
        ];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            v,
            vec![
                "P1-B1-S1",
                "P1-B1-S1-C1-PT2",
                "P1-B1-S1-C1-PT10",
                "P1-B1-S1A",
                "P1-B1-S2",
                "P2-B1-S1",
                "P10-B1-S1"
            ]
        );
    }

    #[test]
    fn segments() {
        assert_eq!(parse_segment("PT10"), Some(("PT", 10, "")));
        assert_eq!(parse_segment("S1A"), Some(("S", 1, "A")));
        assert_eq!(parse_segment("s1"), None);
        assert_eq!(parse_segment("S"), None);
        assert_eq!(parse_segment("S1-"), None);
        assert_eq!(strip_suffix("S1--basic-threat"), "S1");
    }

    #[test]
    fn selection_matches_codes_one_by_one() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("benchmark");
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
