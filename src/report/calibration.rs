//! Judge calibration and human overrides in `report` (issue 20): for a run
//! with human labels (`review import`), how far the judge agrees with the
//! human consensus on each criterion (raw agreement, Cohen's kappa with a
//! bootstrap interval, the confusion matrix, a flag below
//! [`RELIABLE_KAPPA`]), how far the humans agree with each other (the
//! ceiling a judge can reach), and with `report --human` the run scored
//! again with the human consensus in place of the judge's verdict. Reads
//! labels and judgements from [`crate::store`], computes with
//! [`crate::scoring::agreement`], and renders its own table and HTML
//! section; `report` calls in through small hooks.

use std::collections::{BTreeMap, BTreeSet};

use futures_util::TryStreamExt;
use serde::{Deserialize, Serialize};

use crate::benchmark::ScoringConfig;
use crate::benchmark::codes::natural_cmp;
use crate::domain::{Detail, Which};
use crate::domain::{ErrorKind, LabelRow, LabelledJudgement, VoteRow};
use crate::review::verdict_class;
use crate::scoring::agreement::{
    Agreement, BOOTSTRAP_SEED, Confusion, cohen_kappa, cohen_kappa_interval, confusion,
    fleiss_kappa, krippendorff_alpha, majority,
};
use crate::scoring::analysis;
use crate::store::{Store, StoreError};

/// Below this kappa the judge is flagged as not reliable on a criterion
/// (Landis and Koch's "substantial" starts at 0.61; 0.6 is the usual bar).
pub const RELIABLE_KAPPA: f64 = 0.6;

/// What the flag says.
pub const UNRELIABLE: &str = "the judge is not reliable on this criterion";

/// The report's sections about human review; empty (and absent from the
/// JSON) for a run without labels.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewSections {
    /// Judge against humans, for a run with human labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Calibration>,
    /// `report --human`: the run scored with the human consensus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub human_corrected: Option<HumanCorrected>,
    /// With several judges: how far they agree with each other, per criterion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_agreement: Option<Vec<JudgeAgreement>>,
}

/// Pairwise agreement of a panel's judges on one criterion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeAgreement {
    pub scenario: String,
    pub criterion: String,
    pub pairs: Vec<PairAgreement>,
}

/// Cohen's kappa of two judges over the items both gave a verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairAgreement {
    pub judge_a: String,
    pub judge_b: String,
    pub items: usize,
    pub raw_agreement: Option<f64>,
    pub kappa: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kappa_undefined: Option<String>,
}

/// One judge of a panel against the human consensus on one criterion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeVsHumans {
    pub judge: String,
    pub items: usize,
    pub raw_agreement: Option<f64>,
    pub kappa: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kappa_undefined: Option<String>,
}

/// The judge calibration section of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Every rater with labels in the run.
    pub raters: Vec<String>,
    /// Labelled (result, criterion) items.
    pub labelled_items: usize,
    /// Labels (one per rater and item).
    pub labels: usize,
    /// The kappa below which a criterion is flagged.
    pub reliable_kappa: f64,
    /// How every `kappa_ci` here was drawn (generator, seed, resamples).
    #[serde(default = "kappa_bootstrap")]
    pub bootstrap: crate::scoring::Bootstrap,
    /// Over every criterion, comparing pass/fail (the verdict scoring uses).
    pub overall: CriterionCalibration,
    /// Per scenario and criterion, comparing the verdicts themselves.
    pub criteria: Vec<CriterionCalibration>,
}

/// The judge against the human consensus on one criterion (or overall).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CriterionCalibration {
    /// `all` for the overall row.
    pub scenario: String,
    pub criterion: String,
    /// Items with a human consensus and a judge verdict: what is compared.
    pub items: usize,
    /// Labelled items whose raters tied (no consensus): left out here,
    /// counted, and given to the judge by `report --human`.
    pub human_ties: usize,
    /// Labelled items the judge gave no verdict (judge errors): left out.
    pub judge_errors: usize,
    pub raw_agreement: Option<f64>,
    /// Cohen's kappa, judge against human consensus.
    pub kappa: Option<f64>,
    /// Why kappa is undefined (no items; every verdict one class).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kappa_undefined: Option<String>,
    /// Percentile bootstrap 95 % interval of kappa.
    pub kappa_ci: Option<[f64; 2]>,
    /// Rows: the judge's verdict; columns: the humans'.
    pub confusion: Confusion,
    /// `Some(false)` below [`RELIABLE_KAPPA`]; `None` when kappa is undefined.
    pub reliable: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flag: Option<String>,
    /// Agreement among the human raters, with two or more of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inter_rater: Option<InterRater>,
    /// With several judges: each judge against the human consensus, so
    /// the one that agrees best can be picked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judges: Vec<JudgeVsHumans>,
}

/// How far the human raters agree with each other on a criterion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InterRater {
    /// Raters who labelled items of this criterion.
    pub raters: usize,
    /// `cohen_kappa` with two raters, `krippendorff_alpha` (nominal,
    /// missing labels allowed) with more.
    pub method: String,
    /// Items labelled by two or more raters.
    pub items: usize,
    pub raw_agreement: Option<f64>,
    pub value: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undefined: Option<String>,
    /// Fleiss' kappa over the items every rater labelled (three or more raters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleiss_kappa: Option<f64>,
}

/// A run scored with the human consensus in place of the judge (`report --human`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HumanCorrected {
    /// Labelled items whose consensus replaced the judge's verdict.
    pub overridden: usize,
    /// Of those, items where the consensus passes what the judge failed or
    /// the other way round.
    pub changed: usize,
    /// Labelled items whose raters tied: the judge's verdict is kept.
    pub ties_kept_judge: usize,
    /// Test cases whose verdict changed.
    pub test_cases_changed: usize,
    pub judged_score: Option<f64>,
    pub human_score: Option<f64>,
    pub judged_passed: usize,
    pub human_passed: usize,
    pub behaviours: Vec<BehaviourSideBySide>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BehaviourSideBySide {
    pub code: String,
    pub judged: Option<f64>,
    pub human: Option<f64>,
}

/// The human consensus of one labelled item.
#[derive(Debug, Clone, PartialEq)]
enum Consensus {
    Verdict { class: String, passed: bool },
    Tie,
}

/// Labels grouped by (result, criterion), raters in name order.
type Labelled<'a> = BTreeMap<(i64, &'a str), Vec<&'a LabelRow>>;

fn group(labels: &[LabelRow]) -> Labelled<'_> {
    let mut by: Labelled<'_> = BTreeMap::new();
    for l in labels {
        by.entry((l.result_id, l.criterion.as_str()))
            .or_default()
            .push(l);
    }
    by
}

fn consensus(labels: &[&LabelRow]) -> Consensus {
    let classes: Vec<String> = labels
        .iter()
        .map(|l| verdict_class(Some(&l.verdict)))
        .collect();
    match majority(&classes) {
        Some(c) => Consensus::Verdict {
            class: c.to_string(),
            passed: labels
                .iter()
                .zip(&classes)
                .find(|(_, k)| *k == c)
                .is_some_and(|(l, _)| l.passed),
        },
        None => Consensus::Tie,
    }
}

/// Judge against humans over `pairs` of (judge, human) classes.
fn compare(
    scenario: &str,
    criterion: &str,
    pairs: &[(String, String)],
    order: &[String],
    ties: usize,
    judge_errors: usize,
) -> CriterionCalibration {
    let k = cohen_kappa(pairs);
    let reliable = k.value.map(|v| v >= RELIABLE_KAPPA);
    CriterionCalibration {
        scenario: scenario.into(),
        criterion: criterion.into(),
        items: pairs.len(),
        human_ties: ties,
        judge_errors,
        raw_agreement: k.observed,
        kappa: k.value,
        kappa_undefined: k.undefined,
        kappa_ci: cohen_kappa_interval(pairs, BOOTSTRAP_SEED).map(|i| [i.low, i.high]),
        confusion: confusion(pairs, order),
        reliable,
        flag: (reliable == Some(false)).then(|| UNRELIABLE.to_string()),
        inter_rater: None,
        judges: Vec::new(),
    }
}

/// Agreement among raters over `items` (each item: its labels, one per rater).
fn inter_rater(items: &[&Vec<&LabelRow>]) -> Option<InterRater> {
    let raters: BTreeSet<&str> = items
        .iter()
        .flat_map(|ls| ls.iter().map(|l| l.rater.as_str()))
        .collect();
    if raters.len() < 2 {
        return None;
    }
    let class = |l: &LabelRow| verdict_class(Some(&l.verdict));
    let (method, a, fleiss) = if raters.len() == 2 {
        let [r1, r2]: [&str; 2] = raters.iter().copied().collect::<Vec<_>>().try_into().ok()?;
        let pairs: Vec<(String, String)> = items
            .iter()
            .filter_map(|ls| {
                let a = ls.iter().find(|l| l.rater == r1)?;
                let b = ls.iter().find(|l| l.rater == r2)?;
                Some((class(a), class(b)))
            })
            .collect();
        ("cohen_kappa", cohen_kappa(&pairs), None)
    } else {
        let units: Vec<Vec<String>> = items
            .iter()
            .map(|ls| ls.iter().map(|l| class(l)).collect())
            .collect();
        // Fleiss over the items every rater labelled.
        let mut all_classes: Vec<String> = units.iter().flatten().cloned().collect();
        all_classes.sort();
        all_classes.dedup();
        let table: Vec<Vec<usize>> = units
            .iter()
            .filter(|u| u.len() == raters.len())
            .map(|u| {
                all_classes
                    .iter()
                    .map(|c| u.iter().filter(|x| *x == c).count())
                    .collect()
            })
            .collect();
        let fleiss = (!table.is_empty())
            .then(|| fleiss_kappa(&table).value)
            .flatten();
        ("krippendorff_alpha", krippendorff_alpha(&units), fleiss)
    };
    let Agreement {
        items: n,
        observed,
        value,
        undefined,
        ..
    } = a;
    Some(InterRater {
        raters: raters.len(),
        method: method.into(),
        items: n,
        raw_agreement: observed,
        value,
        undefined,
        fleiss_kappa: fleiss,
    })
}

/// The calibration section of run `run_id`, `None` without labels.
pub async fn calibration(store: &Store, run_id: i64) -> Result<Option<Calibration>, StoreError> {
    let labels = store.labels(run_id).await?;
    if labels.is_empty() {
        return Ok(None);
    }
    let judgements = store.labelled_judgements(run_id).await?;
    let votes = store.votes(run_id).await?;
    Ok(Some(calibrate(&labels, &judgements, &votes)))
}

/// (judge class, human class) per item.
type Pairs = Vec<(String, String)>;

/// A criterion's verdict classes by (result, judge).
type ByResultAndJudge<'a> = BTreeMap<(i64, &'a str), String>;

/// Each judge of a panel against the human consensus, per criterion.
fn judges_vs_humans(
    by_item: &Labelled<'_>,
    votes: &[VoteRow],
) -> BTreeMap<(String, String), Vec<JudgeVsHumans>> {
    // (scenario, criterion) -> judge (first-vote order) -> pairs.
    let mut per: BTreeMap<(String, String), Vec<(String, Pairs)>> = BTreeMap::new();
    for v in votes {
        let judges = per
            .entry((v.scenario.clone(), v.criterion.clone()))
            .or_default();
        let at = match judges.iter().position(|(j, _)| *j == v.judge_model) {
            Some(i) => i,
            None => {
                judges.push((v.judge_model.clone(), Vec::new()));
                judges.len() - 1
            }
        };
        let Some(ls) = by_item.get(&(v.result_id, v.criterion.as_str())) else {
            continue;
        };
        if let (Consensus::Verdict { class, .. }, Some(verdict)) = (consensus(ls), &v.verdict) {
            judges[at].1.push((verdict_class(Some(verdict)), class));
        }
    }
    per.into_iter()
        .map(|(key, judges)| {
            let list = judges
                .into_iter()
                .map(|(judge, pairs)| {
                    let k = cohen_kappa(&pairs);
                    JudgeVsHumans {
                        judge,
                        items: pairs.len(),
                        raw_agreement: k.observed,
                        kappa: k.value,
                        kappa_undefined: k.undefined,
                    }
                })
                .collect();
            (key, list)
        })
        .collect()
}

/// Pairwise Cohen's kappa between a panel's judges, per criterion, over the
/// items both judges gave a verdict.
pub fn judge_agreement(votes: &[VoteRow]) -> Vec<JudgeAgreement> {
    // (scenario, criterion) -> judges in first-vote order; (result, judge) -> class.
    let mut order: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    let mut verdicts: BTreeMap<(&str, &str), ByResultAndJudge<'_>> = BTreeMap::new();
    for v in votes {
        let key = (v.scenario.as_str(), v.criterion.as_str());
        let judges = order.entry(key).or_default();
        if !judges.contains(&v.judge_model.as_str()) {
            judges.push(&v.judge_model);
        }
        if let Some(verdict) = &v.verdict {
            verdicts
                .entry(key)
                .or_default()
                .insert((v.result_id, &v.judge_model), verdict_class(Some(verdict)));
        }
    }
    let mut out: Vec<JudgeAgreement> = order
        .into_iter()
        .map(|(key, judges)| {
            let empty = BTreeMap::new();
            let got = verdicts.get(&key).unwrap_or(&empty);
            let results: BTreeSet<i64> = got.keys().map(|(r, _)| *r).collect();
            let mut pairs = Vec::new();
            for (i, a) in judges.iter().enumerate() {
                for b in &judges[i + 1..] {
                    let both: Vec<(String, String)> = results
                        .iter()
                        .filter_map(|r| {
                            Some((got.get(&(*r, *a))?.clone(), got.get(&(*r, *b))?.clone()))
                        })
                        .collect();
                    let k = cohen_kappa(&both);
                    pairs.push(PairAgreement {
                        judge_a: a.to_string(),
                        judge_b: b.to_string(),
                        items: both.len(),
                        raw_agreement: k.observed,
                        kappa: k.value,
                        kappa_undefined: k.undefined,
                    });
                }
            }
            JudgeAgreement {
                scenario: key.0.to_string(),
                criterion: key.1.to_string(),
                pairs,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        natural_cmp(&a.scenario, &b.scenario).then_with(|| natural_cmp(&a.criterion, &b.criterion))
    });
    out
}

/// [`calibration`] from what the store returned.
pub fn calibrate(
    labels: &[LabelRow],
    judgements: &[LabelledJudgement],
    votes: &[VoteRow],
) -> Calibration {
    let by_item = group(labels);
    let judged: BTreeMap<(i64, &str), &LabelledJudgement> = judgements
        .iter()
        .map(|j| ((j.result_id, j.criterion.as_str()), j))
        .collect();
    // Per (scenario, criterion): (judge, human) class pairs, pass/fail pairs, ties, judge errors.
    #[derive(Default)]
    struct Acc<'a> {
        pairs: Vec<(String, String)>,
        ties: usize,
        judge_errors: usize,
        items: Vec<&'a Vec<&'a LabelRow>>,
    }
    let mut per: BTreeMap<(String, String), Acc<'_>> = BTreeMap::new();
    let mut overall = Acc::default();
    for ((result, criterion), ls) in &by_item {
        let Some(j) = judged.get(&(*result, *criterion)) else {
            continue;
        };
        let acc = per
            .entry((j.scenario.clone(), criterion.to_string()))
            .or_default();
        acc.items.push(ls);
        match (consensus(ls), j.verdict.as_ref(), j.passed) {
            (Consensus::Tie, _, _) => {
                acc.ties += 1;
                overall.ties += 1;
            }
            (_, None, _) | (_, _, None) => {
                acc.judge_errors += 1;
                overall.judge_errors += 1;
            }
            (Consensus::Verdict { class, passed }, Some(v), Some(jp)) => {
                acc.pairs.push((verdict_class(Some(v)), class));
                overall
                    .pairs
                    .push((pass_fail(jp).into(), pass_fail(passed).into()));
            }
        }
    }
    let mut per_judge = judges_vs_humans(&by_item, votes);
    let mut criteria: Vec<CriterionCalibration> = per
        .into_iter()
        .map(|((scenario, criterion), acc)| {
            let mut c = compare(
                &scenario,
                &criterion,
                &acc.pairs,
                &[],
                acc.ties,
                acc.judge_errors,
            );
            c.inter_rater = inter_rater(&acc.items);
            c.judges = per_judge
                .remove(&(scenario.clone(), criterion.clone()))
                .unwrap_or_default();
            c
        })
        .collect();
    criteria.sort_by(|a, b| {
        natural_cmp(&a.scenario, &b.scenario).then_with(|| natural_cmp(&a.criterion, &b.criterion))
    });
    let order = ["pass".to_string(), "fail".to_string()];
    let mut all = compare(
        "all",
        "all",
        &overall.pairs,
        &order,
        overall.ties,
        overall.judge_errors,
    );
    let every: Vec<&Vec<&LabelRow>> = by_item.values().collect();
    all.inter_rater = inter_rater(&every).map(|mut ir| {
        // Overall inter-rater agreement on pass/fail, like the judge's.
        let units: Vec<Vec<&str>> = every
            .iter()
            .map(|ls| ls.iter().map(|l| pass_fail(l.passed)).collect())
            .collect();
        let a = if ir.raters == 2 {
            let pairs: Vec<(&str, &str)> = units
                .iter()
                .filter(|u| u.len() == 2)
                .map(|u| (u[0], u[1]))
                .collect();
            cohen_kappa(&pairs)
        } else {
            krippendorff_alpha(&units)
        };
        ir.items = a.items;
        ir.raw_agreement = a.observed;
        ir.value = a.value;
        ir.undefined = a.undefined;
        ir.fleiss_kappa = None;
        ir
    });
    let raters: BTreeSet<&str> = labels.iter().map(|l| l.rater.as_str()).collect();
    Calibration {
        raters: raters.into_iter().map(str::to_string).collect(),
        labelled_items: by_item.len(),
        labels: labels.len(),
        reliable_kappa: RELIABLE_KAPPA,
        bootstrap: kappa_bootstrap(),
        overall: all,
        criteria,
    }
}

/// The kappa intervals' bootstrap: ChaCha8 from [`BOOTSTRAP_SEED`].
fn kappa_bootstrap() -> crate::scoring::Bootstrap {
    crate::scoring::Bootstrap::chacha8(
        BOOTSTRAP_SEED,
        crate::scoring::agreement::BOOTSTRAP_RESAMPLES,
    )
}

fn pass_fail(passed: bool) -> &'static str {
    if passed { "pass" } else { "fail" }
}

/// `report --human`: the run's results with each labelled criterion's
/// verdict replaced by the human consensus (ties keep the judge's), scored
/// again beside the judged score. No request is sent.
pub async fn human_corrected(
    store: &Store,
    run_id: i64,
    scoring: &ScoringConfig,
    judged: &analysis::Analysis,
) -> Result<HumanCorrected, StoreError> {
    let labels = store.labels(run_id).await?;
    let judgements = store.labelled_judgements(run_id).await?;
    let by_item = group(&labels);
    // Per labelled result: its criteria's pass/fail after the override.
    let mut per_result: BTreeMap<i64, Vec<Option<bool>>> = BTreeMap::new();
    let (mut overridden, mut changed, mut ties) = (0, 0, 0);
    for j in &judgements {
        let passed = match by_item.get(&(j.result_id, j.criterion.as_str())) {
            Some(ls) => match consensus(ls) {
                Consensus::Verdict { passed, .. } => {
                    overridden += 1;
                    changed += usize::from(j.passed != Some(passed));
                    Some(passed)
                }
                Consensus::Tie => {
                    ties += 1;
                    j.passed
                }
            },
            None => j.passed,
        };
        per_result.entry(j.result_id).or_default().push(passed);
    }
    let mut results = Vec::new();
    let mut test_cases_changed = 0;
    let mut rows = std::pin::pin!(store.results(Which::Run(run_id), Detail::default()));
    while let Some(row) = rows.try_next().await? {
        let mut r = row.result;
        if let Some(criteria) = per_result.get(&row.id) {
            let before = (r.passed, r.error_kind);
            // A judged result passes when every criterion passes; a
            // criterion still without a verdict keeps it a judge error.
            if criteria.iter().any(Option::is_none) {
                r.passed = false;
                r.error_kind = Some(ErrorKind::Judge);
            } else {
                r.passed = criteria.iter().all(|p| *p == Some(true));
                if r.error_kind == Some(ErrorKind::Judge) {
                    r.error_kind = None;
                }
            }
            test_cases_changed += usize::from(before != (r.passed, r.error_kind));
        }
        results.push(r);
    }
    let human = analysis::analyse(&results, scoring);
    let behaviours = judged
        .behaviours
        .iter()
        .map(|b| BehaviourSideBySide {
            code: b.code.clone(),
            judged: b.score,
            human: human
                .behaviours
                .iter()
                .find(|h| h.code == b.code)
                .and_then(|h| h.score),
        })
        .collect();
    Ok(HumanCorrected {
        overridden,
        changed,
        ties_kept_judge: ties,
        test_cases_changed,
        judged_score: judged.score,
        human_score: human.score,
        judged_passed: judged.passed,
        human_passed: human.passed,
        behaviours,
    })
}

// ---------------------------------------------------------------------------
// rendering: each section is a title, a header and rows of cells, drawn as
// a terminal table or an HTML table by the same code
// ---------------------------------------------------------------------------

/// A run's review sections: calibration whenever the run has labels, the
/// judges' agreement with each other when a panel judged, the
/// human-corrected score with `human`.
pub async fn review_sections(
    store: &Store,
    run_id: i64,
    analysis: &analysis::Analysis,
    scoring: &ScoringConfig,
    human: bool,
) -> Result<ReviewSections, StoreError> {
    let mut review = ReviewSections {
        calibration: calibration(store, run_id).await?,
        ..Default::default()
    };
    let votes = store.votes(run_id).await?;
    if !votes.is_empty() {
        review.judge_agreement = Some(judge_agreement(&votes));
    }
    if human {
        review.human_corrected = Some(human_corrected(store, run_id, scoring, analysis).await?);
    }
    Ok(review)
}
