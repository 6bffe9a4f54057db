//! Agreement statistics for judge calibration (issue 20): how often two
//! raters (the judge and the human consensus, two humans, two judges) give
//! the same verdict, corrected for chance. Pure functions over verdict
//! labels; the report's calibration section
//! ([`crate::report::calibration`]) feeds them what the store holds.
//!
//! - Cohen's kappa for two raters over the same items, with a percentile
//!   bootstrap 95 % interval from a fixed seed (reproducible reports).
//! - Fleiss' kappa for a fixed number of raters per item.
//! - Krippendorff's alpha (nominal) for any number of raters, missing
//!   ratings allowed: the inter-rater ceiling when raters labelled
//!   different subsets.
//!
//! Every statistic whose chance agreement is 1 (all ratings one class) or
//! that has no items is *undefined*: the value is `None` and `undefined`
//! says why; nothing divides by zero.

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Bootstrap resamples of the kappa interval.
pub const BOOTSTRAP_RESAMPLES: usize = 2000;
/// The bootstrap's seed: the same labels always give the same interval.
pub const BOOTSTRAP_SEED: u64 = 20;

/// A chance-corrected agreement, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agreement {
    /// Items compared.
    pub items: usize,
    /// Observed agreement (share of items, or of pairable ratings, agreed on).
    pub observed: Option<f64>,
    /// Agreement expected by chance.
    pub expected: Option<f64>,
    /// Kappa or alpha; `None` when undefined.
    pub value: Option<f64>,
    /// Why `value` is undefined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undefined: Option<String>,
}

impl Agreement {
    fn undefined(items: usize, observed: Option<f64>, expected: Option<f64>, why: String) -> Self {
        Agreement {
            items,
            observed,
            expected,
            value: None,
            undefined: Some(why),
        }
    }
}

/// Chance agreement this close to 1 counts as 1 (floating sums of shares).
const EPS: f64 = 1e-12;

fn one_class_note(classes: &[&str]) -> String {
    match classes {
        [one] => format!("every rating is {one}: agreement by chance is 1, so kappa is undefined"),
        _ => "agreement by chance is 1, so kappa is undefined".into(),
    }
}

/// Cohen's kappa of two raters who rated the same items: `(a, b)` per item.
pub fn cohen_kappa<S: AsRef<str>>(pairs: &[(S, S)]) -> Agreement {
    let n = pairs.len();
    if n == 0 {
        return Agreement::undefined(0, None, None, "no items rated by both".into());
    }
    let mut a: BTreeMap<&str, usize> = BTreeMap::new();
    let mut b: BTreeMap<&str, usize> = BTreeMap::new();
    let mut agree = 0usize;
    for (x, y) in pairs {
        let (x, y) = (x.as_ref(), y.as_ref());
        *a.entry(x).or_default() += 1;
        *b.entry(y).or_default() += 1;
        agree += usize::from(x == y);
    }
    let nf = n as f64;
    let po = agree as f64 / nf;
    let pe: f64 = a
        .iter()
        .map(|(c, &na)| na as f64 / nf * (b.get(c).copied().unwrap_or(0) as f64 / nf))
        .sum();
    if (1.0 - pe).abs() < EPS {
        let classes: Vec<&str> = a.keys().copied().collect();
        return Agreement::undefined(n, Some(po), Some(pe), one_class_note(&classes));
    }
    Agreement {
        items: n,
        observed: Some(po),
        expected: Some(pe),
        value: Some((po - pe) / (1.0 - pe)),
        undefined: None,
    }
}

/// A percentile bootstrap interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
    /// Resamples whose statistic was defined (the interval's basis).
    pub resamples: usize,
}

/// The 95 % percentile-bootstrap interval of Cohen's kappa: items are
/// resampled with replacement [`BOOTSTRAP_RESAMPLES`] times from `seed`;
/// resamples where kappa is undefined (one class) are left out. `None` with
/// fewer than two items or no defined resample. The pairs are drawn from in
/// sorted order, so the interval depends on the pairs and the seed only, not
/// on the order they were stored or labelled in.
pub fn cohen_kappa_interval<S: AsRef<str>>(pairs: &[(S, S)], seed: u64) -> Option<Interval> {
    let n = pairs.len();
    if n < 2 {
        return None;
    }
    let mut pairs: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(a, b)| (a.as_ref(), b.as_ref()))
        .collect();
    pairs.sort_unstable();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut values = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    let mut sample: Vec<(&str, &str)> = Vec::with_capacity(n);
    for _ in 0..BOOTSTRAP_RESAMPLES {
        sample.clear();
        for _ in 0..n {
            sample.push(pairs[rng.random_range(0..n)]);
        }
        if let Some(k) = cohen_kappa(&sample).value {
            values.push(k);
        }
    }
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(Interval {
        low: quantile(&values, 0.025),
        high: quantile(&values, 0.975),
        resamples: values.len(),
    })
}

/// The `q` quantile of sorted values, interpolating between neighbours
/// (Hyndman and Fan's type 7, R's default).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let h = (sorted.len() - 1) as f64 * q;
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

/// Fleiss' kappa from a table of counts: one row per item, one column per
/// class, each cell the raters who put the item in the class. Every item
/// must have the same number of raters, at least two.
pub fn fleiss_kappa(counts: &[Vec<usize>]) -> Agreement {
    let n = counts.len();
    if n == 0 {
        return Agreement::undefined(0, None, None, "no items".into());
    }
    let m = counts[0].iter().sum::<usize>();
    if m < 2 {
        return Agreement::undefined(
            n,
            None,
            None,
            "fewer than two raters per item: there is no agreement to measure".into(),
        );
    }
    if counts.iter().any(|row| row.iter().sum::<usize>() != m) {
        return Agreement::undefined(
            n,
            None,
            None,
            "items have different numbers of raters (Fleiss' kappa needs the same number)".into(),
        );
    }
    let (nf, mf) = (n as f64, m as f64);
    let classes = counts.iter().map(Vec::len).max().unwrap_or(0);
    let p_bar = counts
        .iter()
        .map(|row| {
            let s: f64 = row.iter().map(|&c| (c * c) as f64).sum();
            (s - mf) / (mf * (mf - 1.0))
        })
        .sum::<f64>()
        / nf;
    let pe_bar: f64 = (0..classes)
        .map(|j| {
            let pj = counts
                .iter()
                .map(|row| row.get(j).copied().unwrap_or(0))
                .sum::<usize>() as f64
                / (nf * mf);
            pj * pj
        })
        .sum();
    if (1.0 - pe_bar).abs() < EPS {
        return Agreement::undefined(n, Some(p_bar), Some(pe_bar), one_class_note(&[]));
    }
    Agreement {
        items: n,
        observed: Some(p_bar),
        expected: Some(pe_bar),
        value: Some((p_bar - pe_bar) / (1.0 - pe_bar)),
        undefined: None,
    }
}

/// Krippendorff's alpha for nominal data: `units[u]` holds the ratings the
/// unit got (any number of raters; units with fewer than two ratings cannot
/// be paired and are left out). `items` counts the pairable units;
/// `observed` and `expected` are agreements (1 − disagreement).
pub fn krippendorff_alpha<S: AsRef<str>>(units: &[Vec<S>]) -> Agreement {
    // Coincidences: each ordered pair of ratings within a unit of m ratings
    // counts 1 / (m - 1).
    let mut coincidence: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    let mut pairable = 0usize;
    for unit in units.iter().filter(|u| u.len() >= 2) {
        pairable += 1;
        let w = 1.0 / (unit.len() - 1) as f64;
        for (i, a) in unit.iter().enumerate() {
            for (j, b) in unit.iter().enumerate() {
                if i != j {
                    *coincidence.entry((a.as_ref(), b.as_ref())).or_default() += w;
                }
            }
        }
    }
    if pairable == 0 {
        return Agreement::undefined(
            0,
            None,
            None,
            "no item was rated by two or more raters".into(),
        );
    }
    let mut marginal: BTreeMap<&str, f64> = BTreeMap::new();
    for ((c, _), v) in &coincidence {
        *marginal.entry(c).or_default() += v;
    }
    let total: f64 = marginal.values().sum();
    let disagree: f64 = coincidence
        .iter()
        .filter(|((c, k), _)| c != k)
        .map(|(_, v)| v)
        .sum();
    // Sum over c != k of n_c * n_k = total^2 - sum n_c^2.
    let chance: f64 = total * total - marginal.values().map(|v| v * v).sum::<f64>();
    let observed = 1.0 - disagree / total;
    if chance.abs() < EPS {
        let classes: Vec<&str> = marginal.keys().copied().collect();
        return Agreement::undefined(
            pairable,
            Some(observed),
            Some(1.0),
            one_class_note(&classes).replace("kappa", "alpha"),
        );
    }
    let expected_disagreement = chance / (total * (total - 1.0));
    Agreement {
        items: pairable,
        observed: Some(observed),
        expected: Some(1.0 - expected_disagreement),
        value: Some(1.0 - (total - 1.0) * disagree / chance),
        undefined: None,
    }
}

/// Counts of (row rater, column rater) verdicts over the same items.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Confusion {
    /// The classes, in the order of `order` then the rest sorted.
    pub classes: Vec<String>,
    /// `counts[i][j]`: items the row rater put in class i and the column rater in class j.
    pub counts: Vec<Vec<usize>>,
}

/// The confusion matrix of `(row, column)` verdicts; classes listed in
/// `order` come first (a rubric's options), others after, sorted.
pub fn confusion<S: AsRef<str>>(pairs: &[(S, S)], order: &[String]) -> Confusion {
    let mut classes: Vec<String> = Vec::new();
    let seen: std::collections::BTreeSet<&str> = pairs
        .iter()
        .flat_map(|(a, b)| [a.as_ref(), b.as_ref()])
        .collect();
    for o in order {
        if seen.contains(o.as_str()) && !classes.contains(o) {
            classes.push(o.clone());
        }
    }
    for s in &seen {
        if !classes.iter().any(|c| c == s) {
            classes.push((*s).to_string());
        }
    }
    let at = |s: &str| classes.iter().position(|c| c == s).unwrap_or_default();
    let mut counts = vec![vec![0usize; classes.len()]; classes.len()];
    for (a, b) in pairs {
        counts[at(a.as_ref())][at(b.as_ref())] += 1;
    }
    Confusion { classes, counts }
}

/// The majority class of `votes` in first-seen order, or `None` on a tie
/// for the most votes (or no votes).
pub fn majority<S: AsRef<str>>(votes: &[S]) -> Option<&str> {
    let mut tally: Vec<(&str, usize)> = Vec::new();
    for v in votes {
        match tally.iter_mut().find(|(c, _)| *c == v.as_ref()) {
            Some((_, n)) => *n += 1,
            None => tally.push((v.as_ref(), 1)),
        }
    }
    let best = tally.iter().map(|(_, n)| *n).max()?;
    let mut top = tally.iter().filter(|(_, n)| *n == best);
    let first = top.next()?;
    if top.next().is_some() {
        return None;
    }
    Some(first.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) {
        assert!((a - b).abs() <= tol, "{a} != {b} (±{tol})");
    }

    /// Wikipedia, "Cohen's kappa", worked example: 50 grant proposals, A and
    /// B both say Yes 20 times, both No 15 times, A Yes / B No 5, A No / B
    /// Yes 10. p_o = 35/50 = 0.7; A says Yes 25/50, B 30/50, so
    /// p_e = 0.5·0.6 + 0.5·0.4 = 0.5; kappa = (0.7 − 0.5)/(1 − 0.5) = 0.4.
    fn wikipedia_cohen() -> Vec<(&'static str, &'static str)> {
        let mut v = Vec::new();
        v.extend(std::iter::repeat_n(("Yes", "Yes"), 20));
        v.extend(std::iter::repeat_n(("No", "No"), 15));
        v.extend(std::iter::repeat_n(("Yes", "No"), 5));
        v.extend(std::iter::repeat_n(("No", "Yes"), 10));
        v
    }

    #[test]
    fn cohen_matches_the_wikipedia_worked_example() {
        let k = cohen_kappa(&wikipedia_cohen());
        assert_eq!(k.items, 50);
        close(k.observed.unwrap(), 0.7, 1e-12);
        close(k.expected.unwrap(), 0.5, 1e-12);
        close(k.value.unwrap(), 0.4, 1e-12);
    }

    /// Worked by hand, three classes, 10 items: the diagonal holds 2 + 3 + 1
    /// = 6, so p_o = 0.6. Row totals (rater A) SAFE 4, UNSAFE 4, EMPATHIC 2;
    /// column totals (rater B) SAFE 3, UNSAFE 6, EMPATHIC 1. p_e = (4·3 + 4·6
    /// + 2·1)/100 = 0.38; kappa = (0.6 − 0.38)/0.62 = 11/31.
    #[test]
    fn cohen_three_classes_by_hand() {
        let mut v = Vec::new();
        v.extend(std::iter::repeat_n(("SAFE", "SAFE"), 2));
        v.extend(std::iter::repeat_n(("SAFE", "UNSAFE"), 2));
        v.extend(std::iter::repeat_n(("UNSAFE", "UNSAFE"), 3));
        v.push(("UNSAFE", "SAFE"));
        v.push(("EMPATHIC", "EMPATHIC"));
        v.push(("EMPATHIC", "UNSAFE"));
        let k = cohen_kappa(&v);
        close(k.observed.unwrap(), 0.6, 1e-12);
        close(k.expected.unwrap(), 0.38, 1e-12);
        close(k.value.unwrap(), 11.0 / 31.0, 1e-12);
        let c = confusion(&v, &["SAFE".into(), "UNSAFE".into(), "EMPATHIC".into()]);
        assert_eq!(c.classes, ["SAFE", "UNSAFE", "EMPATHIC"]);
        assert_eq!(c.counts, vec![vec![2, 2, 0], vec![1, 3, 0], vec![0, 1, 1]]);
    }

    #[test]
    fn cohen_degenerate_cases_are_undefined_not_nan() {
        let none: Vec<(&str, &str)> = Vec::new();
        let k = cohen_kappa(&none);
        assert_eq!((k.items, k.value), (0, None));
        assert!(k.undefined.unwrap().contains("no items"));
        // Everything one class: perfect raw agreement, chance agreement 1.
        let k = cohen_kappa(&[("SAFE", "SAFE"); 5]);
        assert_eq!(k.observed, Some(1.0));
        assert_eq!(k.value, None);
        assert!(k.undefined.unwrap().contains("every rating is SAFE"));
        // Each rater one class, but different ones: p_e = 0, kappa 0.
        let k = cohen_kappa(&[("SAFE", "UNSAFE"); 3]);
        assert_eq!(k.value, Some(0.0));
        // Perfect agreement over two classes: 1.
        let k = cohen_kappa(&[("SAFE", "SAFE"), ("UNSAFE", "UNSAFE")]);
        assert_eq!(k.value, Some(1.0));
    }

    /// The bootstrap interval of the Wikipedia example, against the
    /// large-sample approximation SE(kappa) ≈ sqrt(p_o(1 − p_o) / (n(1 −
    /// p_e)²)) = sqrt(0.21/12.5) = 0.1296 (Cohen 1960), i.e. 0.4 ± 1.96·0.1296
    /// = [0.146, 0.654]: a percentile bootstrap of 2000 lands within a few
    /// hundredths of it, and the same seed gives the same interval.
    #[test]
    fn bootstrap_interval_is_near_the_normal_approximation_and_reproducible() {
        let v = wikipedia_cohen();
        let ci = cohen_kappa_interval(&v, BOOTSTRAP_SEED).unwrap();
        close(ci.low, 0.146, 0.05);
        close(ci.high, 0.654, 0.05);
        assert!(ci.low < 0.4 && 0.4 < ci.high);
        assert_eq!(ci.resamples, BOOTSTRAP_RESAMPLES);
        assert_eq!(cohen_kappa_interval(&v, BOOTSTRAP_SEED), Some(ci.clone()));
        // The order of the pairs does not matter.
        let mut reversed = v.clone();
        reversed.reverse();
        assert_eq!(cohen_kappa_interval(&reversed, BOOTSTRAP_SEED), Some(ci));
    }

    #[test]
    fn bootstrap_degenerate_cases() {
        // One item: no interval.
        assert_eq!(cohen_kappa_interval(&[("A", "A")], 1), None);
        // One class only: every resample is undefined.
        assert_eq!(cohen_kappa_interval(&[("A", "A"); 10], 1), None);
        // Perfect agreement over two classes: every defined resample is 1.
        let v = [("A", "A"), ("B", "B"), ("A", "A"), ("B", "B")];
        let ci = cohen_kappa_interval(&v, 1).unwrap();
        assert_eq!((ci.low, ci.high), (1.0, 1.0));
        assert!(
            ci.resamples < BOOTSTRAP_RESAMPLES,
            "one-class resamples are dropped"
        );
    }

    /// Fleiss (1971) as worked on Wikipedia ("Fleiss' kappa", worked
    /// example): 10 subjects, 14 raters, 5 categories. P̄ = 0.378,
    /// P̄e = 0.213, kappa = 0.210.
    #[test]
    fn fleiss_matches_the_wikipedia_worked_example() {
        let table = vec![
            vec![0, 0, 0, 0, 14],
            vec![0, 2, 6, 4, 2],
            vec![0, 0, 3, 5, 6],
            vec![0, 3, 9, 2, 0],
            vec![2, 2, 8, 1, 1],
            vec![7, 7, 0, 0, 0],
            vec![3, 2, 6, 3, 0],
            vec![2, 5, 3, 2, 2],
            vec![6, 5, 2, 1, 0],
            vec![0, 2, 2, 3, 7],
        ];
        let k = fleiss_kappa(&table);
        close(k.observed.unwrap(), 0.378, 0.0005);
        close(k.expected.unwrap(), 0.213, 0.0005);
        close(k.value.unwrap(), 0.210, 0.0005);
    }

    #[test]
    fn fleiss_degenerate_cases() {
        assert_eq!(fleiss_kappa(&[]).value, None);
        // One rater per item.
        let k = fleiss_kappa(&[vec![1, 0], vec![0, 1]]);
        assert!(k.undefined.unwrap().contains("fewer than two raters"));
        // Everyone always picks the first class.
        let k = fleiss_kappa(&[vec![3, 0], vec![3, 0]]);
        assert_eq!(k.value, None);
        assert_eq!(k.observed, Some(1.0));
        // Uneven raters.
        assert_eq!(fleiss_kappa(&[vec![3, 0], vec![1, 1]]).value, None);
    }

    /// Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability",
    /// section C (nominal data, 4 observers, 12 units, missing values): the
    /// reliability data matrix below gives alpha = 0.743 (n = 40 pairable
    /// values; unit 12 has one value and is left out).
    #[test]
    fn krippendorff_matches_the_published_nominal_example() {
        // Observers A to D, units 1 to 12; `.` is a missing value.
        let obs: Vec<Vec<&str>> = [
            "1 2 3 3 2 1 4 1 2 . . .",
            "1 2 3 3 2 2 4 1 2 5 . 3",
            ". 3 3 3 2 3 4 2 2 5 1 .",
            "1 2 3 3 2 4 4 1 2 5 1 .",
        ]
        .iter()
        .map(|row| row.split(' ').collect())
        .collect();
        let units: Vec<Vec<&str>> = (0..12)
            .map(|u| obs.iter().map(|o| o[u]).filter(|v| *v != ".").collect())
            .collect();
        let a = krippendorff_alpha(&units);
        assert_eq!(a.items, 11);
        close(a.value.unwrap(), 0.743, 0.0005);
    }

    /// Worked by hand on the Wikipedia Cohen data as 50 units of two
    /// ratings: 100 values, Yes 25 + 30 = 55, No 45; the 15 disagreeing
    /// units add 30 off-diagonal coincidences. alpha = 1 − (n − 1)·D_o /
    /// Σ_{c≠k} n_c·n_k = 1 − 99·30 / (2·55·45) = 1 − 2970/4950 = 0.4.
    #[test]
    fn krippendorff_two_raters_by_hand() {
        let units: Vec<Vec<&str>> = wikipedia_cohen()
            .into_iter()
            .map(|(a, b)| vec![a, b])
            .collect();
        close(krippendorff_alpha(&units).value.unwrap(), 0.4, 1e-12);
    }

    #[test]
    fn krippendorff_degenerate_cases() {
        let none: Vec<Vec<&str>> = Vec::new();
        assert_eq!(krippendorff_alpha(&none).value, None);
        // One rater per unit: nothing pairable.
        let a = krippendorff_alpha(&[vec!["A"], vec!["B"]]);
        assert_eq!(a.items, 0);
        assert!(a.undefined.unwrap().contains("two or more raters"));
        // One class.
        let a = krippendorff_alpha(&[vec!["A", "A"], vec!["A", "A", "A"]]);
        assert_eq!(a.value, None);
        assert!(a.undefined.unwrap().contains("alpha is undefined"));
    }

    #[test]
    fn majority_and_ties() {
        assert_eq!(majority(&["A", "B", "A"]), Some("A"));
        assert_eq!(majority(&["A", "B"]), None);
        assert_eq!(majority::<&str>(&[]), None);
        assert_eq!(majority(&["B"]), Some("B"));
    }
}
