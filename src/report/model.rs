//! The report as data: each run's scores, breakdowns, quality summary and
//! costs, built from what the store returns; the renderings (text, HTML,
//! JSON) only print it.

use std::collections::{BTreeMap, HashMap};

use futures_util::TryStreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::quality::{QualityCollector, QualitySummary, excerpt, reply_text};
use super::tally::Tally;
use super::{calibration, routing};
use crate::benchmark::ScoringConfig;
use crate::benchmark::codes::natural_cmp;
use crate::benchmark::vary::split_code;
use crate::domain::ResultRecord;
use crate::domain::RunRecord;
use crate::domain::StoredResult;
use crate::domain::{Detail, Which};
use crate::domain::{ErrorKind, RunStatus};
use crate::scoring::analysis::{self, Analysis};
use crate::store::{Store, StoreError};

/// One run as the report shows it; also the JSON object `report` prints for
/// one run (the analysis is flattened into it, so `score`, `behaviours` and
/// `format_failures` sit at the top level as SPEC section 7 lists them).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ModelReport {
    pub run_id: i64,
    pub model: String,
    pub status: RunStatus,
    /// `batch` or `single`.
    pub kind: String,
    pub started_at: String,
    pub completed_at: Option<String>,
    /// Provider-reported cost of the model calls (USD).
    pub cost_usd: f64,
    /// Provider-reported cost of the judge calls (USD).
    pub judge_cost_usd: f64,
    /// Model replies and judge calls whose cost is unknown (an
    /// OpenAI-compatible model without a models.yml price, or a figure
    /// that was not a usable number): not in the two sums above.
    #[serde(default)]
    pub unknown_cost_results: i64,
    #[serde(flatten)]
    pub analysis: Analysis,
    /// Keyword quality of the replies (SPEC section 9); `None` without any scored reply.
    pub quality: Option<QualitySummary>,
    /// Verdict counts per judged criterion.
    pub criteria: Vec<CriterionSummary>,
    /// The failed test cases with their criteria (`report --details` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<Vec<FailedCase>>,
    /// The weights and floors used.
    pub scoring: ScoringUsed,
    /// Judge calibration and `--human` (absent without human labels).
    #[serde(flatten)]
    pub review: calibration::ReviewSections,
    /// What served the replies, and provider errors by type.
    #[serde(default)]
    pub routing: routing::Routing,
    /// Behaviour names by code, from the benchmark folder's READMEs (only
    /// behaviours with a name of their own), shown beside the codes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub behaviour_names: BTreeMap<String, String>,
    /// The variants of the user's words against the originals (issue 43);
    /// absent for a run without variants. The scores above are the
    /// originals' alone, comparable with a run without variants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub robustness: Option<super::robustness::Robustness>,
    /// Conversations (issue 42): the first reply against the whole
    /// conversation, where they first fail, per pressure label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sustained: Option<crate::scoring::sustained::Sustained>,
}

impl ModelReport {
    /// `P2-B1 Declines to coach extreme restriction`, or the bare code.
    pub fn behaviour_label(&self, code: &str) -> String {
        match self.behaviour_names.get(code) {
            Some(name) => format!("{code} {name}"),
            None => code.to_string(),
        }
    }
}

// ---------------------------------------------------------------------------
// report: which runs
// ---------------------------------------------------------------------------

/// Which runs `report` covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Exactly this run, whatever its status or kind.
    Run(i64),
    /// The latest completed batch run of this model.
    Model(String),
    /// The latest completed batch run of every model, side by side.
    LatestPerModel,
}

/// Whether a run may stand for its model when no run id is named: a finished
/// batch. `run-single` runs hold one test case and would hide the batch.
fn is_reportable(r: &RunRecord) -> bool {
    r.status == RunStatus::Completed && r.kind == "batch"
}

/// The runs a [`Target`] names, in model order. An unknown run id, a model
/// without a completed batch run, or a database without one is a
/// [`StoreError::NotFound`] (a usage error) that says what to do instead.
pub async fn select_runs(store: &Store, target: &Target) -> Result<Vec<RunRecord>, StoreError> {
    match target {
        Target::Run(id) => Ok(vec![store.run(*id).await?]),
        Target::Model(model) => {
            let runs = store.runs().await?;
            let mine: Vec<&RunRecord> = runs.iter().filter(|r| &r.model == model).collect();
            if let Some(r) = mine.iter().find(|r| is_reportable(r)) {
                return Ok(vec![(*r).clone()]);
            }
            Err(StoreError::NotFound(match mine.first() {
                Some(latest) => format!(
                    "model {model} has no completed batch run (its latest is run {}, {} {}); report it anyway with --run-id {}",
                    latest.run_id, latest.kind, latest.status, latest.run_id
                ),
                None => format!("no run of model {model} (see `helmbench runs`)"),
            }))
        }
        Target::LatestPerModel => {
            // runs() is newest first, so the first reportable run per model is its latest.
            let mut latest: BTreeMap<String, RunRecord> = BTreeMap::new();
            for r in store.runs().await? {
                if is_reportable(&r) && !latest.contains_key(&r.model) {
                    latest.insert(r.model.clone(), r);
                }
            }
            if latest.is_empty() {
                return Err(StoreError::NotFound(
                    "no completed batch run to report (see `helmbench runs`; name any run with --run-id)".into(),
                ));
            }
            Ok(latest.into_values().collect())
        }
    }
}

// ---------------------------------------------------------------------------
// report: one run
// ---------------------------------------------------------------------------

/// The weights and floors a report was scored with, and where they came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoringUsed {
    /// The `scoring.yaml` read, or `"default"` (every behaviour weighs 1, no floors).
    pub source: String,
    pub weights: BTreeMap<String, f64>,
    pub floors: BTreeMap<String, f64>,
}

/// One criterion of one judged scenario over a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CriterionSummary {
    pub scenario: String,
    pub criterion: String,
    pub evaluations: usize,
    pub passed: usize,
    pub failed: usize,
    /// Judgements that produced no verdict (recorded apart from failures).
    pub judge_errors: usize,
}

/// One judged criterion of a failed test case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CriterionVerdict {
    pub criterion: String,
    pub verdict: Option<Value>,
    pub passed: Option<bool>,
    pub justification: Option<String>,
    pub error: Option<String>,
}

/// A test case that did not pass, with why (`report --details`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailedCase {
    pub test_code: String,
    pub repeat_index: i64,
    pub base_severity: f64,
    pub difficulty: f64,
    /// `format`, `judge`, `provider`, or `None` for a wrong answer.
    pub error_kind: Option<ErrorKind>,
    pub error: Option<String>,
    /// The start of the reply (its `response` field when structured).
    pub excerpt: Option<String>,
    pub criteria: Vec<CriterionVerdict>,
}

/// Each run's analysis and quality summary (in the order given, each run
/// with its own weights) from one pass over their results (issue 45): each
/// row is added to its run's running totals and dropped, so only totals and
/// one small entry per test case stay in memory, and only the replies
/// quoted as examples are read. The bootstraps, seconds of CPU on large
/// runs, are drawn on a thread a run.
pub async fn analysed(
    store: &Store,
    runs: &[(i64, &ScoringConfig)],
) -> Result<Vec<Analysed>, StoreError> {
    let mut at: HashMap<i64, usize> = HashMap::new();
    let mut each: Vec<(analysis::Analyser, QualityCollector)> = Vec::with_capacity(runs.len());
    let mut varied: Vec<Vec<StoredResult>> = vec![Vec::new(); runs.len()];
    for (run_id, scoring) in runs {
        at.insert(*run_id, each.len());
        each.push((
            analysis::Analyser::new(scoring.blocked_as),
            QualityCollector::default(),
        ));
    }
    let ids: Vec<i64> = runs.iter().map(|(id, _)| *id).collect();
    store
        .scored_rows(&ids, |run_id, id, r, scores| {
            if let Some(&i) = at.get(&run_id) {
                let (analyser, quality) = &mut each[i];
                quality.add(id, &r.test_code, r.repeat_index, r.base_severity, scores);
                // A variant's result goes to the robustness section only.
                if split_code(&r.test_code).1.is_some() {
                    varied[i].push(r.clone());
                } else {
                    analyser.add(r);
                }
            }
        })
        .await?;
    let replies = Detail {
        replies: true,
        ..Detail::default()
    };
    let kept: Vec<i64> = each.iter().flat_map(|(_, q)| q.kept_ids()).collect();
    let texts: HashMap<i64, String> = store
        .results_by_id(&kept, replies)
        .await?
        .iter()
        .map(|r| (r.id, reply_text(r)))
        .collect();
    // A thread a run, all at once: the machine's cores take them as they
    // free up, where groups of as many runs as cores each waited for
    // their slowest (five runs on two cores: a core idle for a whole
    // bootstrap; issue 45). Each analyser is in memory already.
    let texts = &texts;
    let out: Vec<_> = std::thread::scope(|s| {
        let threads: Vec<_> = each
            .into_iter()
            .zip(runs)
            .map(|((analyser, quality), (_, scoring))| {
                s.spawn(move || (analyser.finish(scoring), quality.finish(texts)))
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    Ok(out
        .into_iter()
        .zip(varied)
        .map(|((a, q), v)| (a, q, v))
        .collect())
}

/// [`analysed`] of the runs without a tally in `tallies`; the others' from
/// their tallies, each finished on a thread of its own.
async fn analysed_or_tallied(
    store: &Store,
    runs: &[(i64, &ScoringConfig)],
    mut tallies: HashMap<i64, Tally>,
) -> Result<Vec<Analysed>, StoreError> {
    let read: Vec<(i64, &ScoringConfig)> = runs
        .iter()
        .filter(|(id, _)| !tallies.contains_key(id))
        .copied()
        .collect();
    let mut read = analysed(store, &read).await?.into_iter();
    let mut finished: HashMap<i64, (Analysis, Option<QualitySummary>)> = std::thread::scope(|s| {
        let threads: Vec<_> = runs
            .iter()
            .filter_map(|&(id, scoring)| {
                let tally = tallies.remove(&id)?;
                Some((id, s.spawn(move || tally.finish(scoring))))
            })
            .collect();
        threads
            .into_iter()
            .map(|(id, t)| {
                (
                    id,
                    t.join().unwrap_or_else(|e| std::panic::resume_unwind(e)),
                )
            })
            .collect()
    });
    Ok(runs
        .iter()
        .map(|(id, _)| match finished.remove(id) {
            Some((analysis, quality)) => (analysis, quality, Vec::new()),
            None => read.next().expect("one analysis a run read"),
        })
        .collect())
}

/// A run's analysis (its originals), its quality summary and its variants'
/// results (issue 43), as [`analysed`] gives them.
pub type Analysed = (Analysis, Option<QualitySummary>, Vec<StoredResult>);

/// Per-criterion verdict counts of a run's judged results, in natural order.
pub async fn criteria(store: &Store, run_id: i64) -> Result<Vec<CriterionSummary>, StoreError> {
    let mut out: Vec<CriterionSummary> = store
        .criterion_counts(run_id)
        .await?
        .into_iter()
        .map(|r| CriterionSummary {
            scenario: r.scenario,
            criterion: r.criterion,
            evaluations: r.evaluations as usize,
            passed: r.passed as usize,
            failed: r.failed as usize,
            judge_errors: r.judge_errors as usize,
        })
        .collect();
    out.sort_by(|a, b| {
        natural_cmp(&a.scenario, &b.scenario).then_with(|| natural_cmp(&a.criterion, &b.criterion))
    });
    Ok(out)
}

/// Every test case of a run that did not pass, with its error and each
/// criterion's verdict and justification, in natural test-code order.
pub async fn failures(store: &Store, run_id: i64) -> Result<Vec<FailedCase>, StoreError> {
    let detail = Detail {
        judgements: true,
        prompts: false,
        replies: true,
    };
    let rows: Vec<ResultRecord> = store
        .results(Which::FailedOf(run_id), detail)
        .try_collect()
        .await?;
    let mut out: Vec<FailedCase> = rows
        .into_iter()
        .map(|r| FailedCase {
            excerpt: r.response.is_some().then(|| excerpt(&reply_text(&r))),
            criteria: r
                .judgements
                .into_iter()
                .map(|j| CriterionVerdict {
                    criterion: j.criterion,
                    verdict: j.verdict,
                    passed: j.passed,
                    justification: j.justification,
                    error: j.error,
                })
                .collect(),
            test_code: r.result.test_code,
            repeat_index: r.result.repeat_index,
            base_severity: r.result.base_severity,
            difficulty: r.result.difficulty,
            error_kind: r.result.error_kind,
            error: r.error,
        })
        .collect();
    out.sort_by(|a, b| {
        natural_cmp(&a.test_code, &b.test_code).then(a.repeat_index.cmp(&b.repeat_index))
    });
    Ok(out)
}

/// Everything `report` shows for one run.
/// Non-monotonic pairs a report keeps (the most severe) without
/// `--details`; the total is always given.
pub const NON_MONOTONIC_KEPT: usize = 20;

pub async fn model_report(
    store: &Store,
    run: &RunRecord,
    scoring: &ScoringConfig,
    scoring_source: &str,
    details: bool,
) -> Result<ModelReport, StoreError> {
    let mut reports = model_reports(
        store,
        &[(run.clone(), scoring.clone())],
        scoring_source,
        details,
    )
    .await?;
    Ok(reports.remove(0))
}

/// [`model_report`] of several runs, each with its own weights, their
/// results read in one pass.
pub async fn model_reports(
    store: &Store,
    runs: &[(RunRecord, ScoringConfig)],
    scoring_source: &str,
    details: bool,
) -> Result<Vec<ModelReport>, StoreError> {
    tallied_reports(store, runs, scoring_source, details, HashMap::new()).await
}

/// [`model_reports`], the runs of `tallies` analysed from their tallies
/// (each taken as its results were written: [`Tally`]) instead of read
/// back.
pub(super) async fn tallied_reports(
    store: &Store,
    runs: &[(RunRecord, ScoringConfig)],
    scoring_source: &str,
    details: bool,
    tallies: HashMap<i64, Tally>,
) -> Result<Vec<ModelReport>, StoreError> {
    let scored: Vec<(i64, &ScoringConfig)> = runs.iter().map(|(r, s)| (r.run_id, s)).collect();
    let analysed = analysed_or_tallied(store, &scored, tallies).await?;
    let mut out = Vec::with_capacity(runs.len());
    for ((run, scoring), (mut analysis, quality, varied)) in runs.iter().zip(analysed) {
        // Variants (issue 43) are scored apart: the headline is over the
        // originals, the robustness section pairs each variant with them
        // (a second read, only for a run that has variants).
        let robustness = if varied.is_empty() {
            None
        } else {
            let originals: Vec<StoredResult> = store
                .results(Which::Run(run.run_id), Detail::default())
                .try_filter_map(|row| {
                    let r = row.result;
                    std::future::ready(Ok(split_code(&r.test_code).1.is_none().then_some(r)))
                })
                .try_collect()
                .await?;
            super::robustness::robustness(&originals, &varied, scoring)
        };
        if !details {
            analysis.keep_most_severe_non_monotonic(NON_MONOTONIC_KEPT);
        }
        out.push(ModelReport {
            run_id: run.run_id,
            model: run.model.clone(),
            status: run.status,
            kind: run.kind.clone(),
            started_at: run.started_at.clone(),
            completed_at: run.completed_at.clone(),
            cost_usd: run.cost_usd,
            judge_cost_usd: run.judge_cost_usd,
            unknown_cost_results: store
                .scenario_spend(Some(run.run_id))
                .await?
                .iter()
                .map(|r| r.spend.unknown_cost_replies + r.spend.unknown_cost_judgements)
                .sum(),
            analysis,
            quality,
            criteria: criteria(store, run.run_id).await?,
            failures: if details {
                Some(failures(store, run.run_id).await?)
            } else {
                None
            },
            scoring: ScoringUsed {
                source: scoring_source.to_string(),
                weights: scoring.weights.clone(),
                floors: scoring.floors.clone(),
            },
            review: calibration::ReviewSections::default(),
            sustained: crate::scoring::sustained::sustained(
                &store.conversation_outcomes(run.run_id).await?,
            ),
            routing: routing::by_run(store, Some(run.run_id))
                .await?
                .remove(&run.run_id)
                .unwrap_or_default(),
            behaviour_names: BTreeMap::new(),
            robustness,
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// costs
// ---------------------------------------------------------------------------

pub use crate::domain::Spend;

// The sums come from the store; what follows from them is derived here.
impl Spend {
    fn add(&mut self, o: &Spend) {
        self.test_cases += o.test_cases;
        self.cost_usd += o.cost_usd;
        self.judge_cost_usd += o.judge_cost_usd;
        self.byok_upstream_usd += o.byok_upstream_usd;
        self.discarded_cost_usd += o.discarded_cost_usd;
        self.upstream_cost_usd = match (self.upstream_cost_usd, o.upstream_cost_usd) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        self.prompt_tokens += o.prompt_tokens;
        self.completion_tokens += o.completion_tokens;
        self.judge_calls += o.judge_calls;
        self.judge_prompt_tokens += o.judge_prompt_tokens;
        self.judge_completion_tokens += o.judge_completion_tokens;
        self.cached_replies += o.cached_replies;
        self.cached_judgements += o.cached_judgements;
        self.unknown_cost_replies += o.unknown_cost_replies;
        self.unknown_cost_judgements += o.unknown_cost_judgements;
        self.unknown_charges += o.unknown_charges;
        self.finish();
    }

    fn finish(&mut self) {
        self.fee_usd = self.cost_usd + self.judge_cost_usd;
        self.total_cost_usd = self.fee_usd + self.byok_upstream_usd;
        self.mean_cost_per_test_case =
            (self.test_cases > 0).then(|| self.total_cost_usd / self.test_cases as f64);
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioCost {
    pub scenario: String,
    #[serde(flatten)]
    pub spend: Spend,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunCost {
    pub run_id: i64,
    pub model: String,
    pub status: RunStatus,
    pub kind: String,
    pub started_at: String,
    #[serde(flatten)]
    pub spend: Spend,
    pub scenarios: Vec<ScenarioCost>,
    /// Judge spend per judge model (several with a panel of judges).
    #[serde(default)]
    pub judges: Vec<JudgeCost>,
}

/// What one judge cost a run (its calls' provider-reported costs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeCost {
    pub judge_model: String,
    pub calls: i64,
    pub cost_usd: f64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cached_judgements: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCost {
    pub model: String,
    pub runs: usize,
    #[serde(flatten)]
    pub spend: Spend,
}

/// What `costs` prints: per run (with its scenarios), per model, and in total.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostReport {
    pub runs: Vec<RunCost>,
    pub models: Vec<ModelCost>,
    pub cost_usd: f64,
    pub judge_cost_usd: f64,
    /// OpenRouter's figures (model + judge) across the selected runs.
    pub total_fee_usd: f64,
    /// What the providers billed a bring-your-own-key (model + judge).
    pub total_byok_upstream_usd: f64,
    /// Everything billed across the selected runs: fees plus upstream.
    pub total_cost_usd: f64,
    /// Model replies and judge calls of the selected runs whose cost is
    /// unknown (not in the totals).
    pub unknown_cost_replies: i64,
    /// Attempts of the selected runs charged an unknown amount that left
    /// no result (cut at the size limit, abandoned on a timeout).
    #[serde(default)]
    pub unknown_charges: i64,
}

/// Spend of the runs selected by `run_id` and `model` (both optional, both
/// applied). An unknown run id, or a filter that selects nothing from a
/// database that has runs, is a [`StoreError::NotFound`].
pub async fn costs(
    store: &Store,
    run_id: Option<i64>,
    model: Option<&str>,
) -> Result<CostReport, StoreError> {
    let runs: Vec<RunRecord> = match run_id {
        Some(id) => vec![store.run(id).await?],
        None => store.runs().await?,
    };
    let runs: Vec<RunRecord> = match model {
        Some(m) => {
            let kept: Vec<RunRecord> = runs.into_iter().filter(|r| r.model == m).collect();
            if kept.is_empty() {
                return Err(StoreError::NotFound(match run_id {
                    Some(id) => {
                        format!("run {id} is not a run of model {m} (see `helmbench runs`)")
                    }
                    None => format!("no run of model {m} (see `helmbench runs`)"),
                }));
            }
            kept
        }
        None => runs,
    };
    let rows = store.scenario_spend(run_id).await?;
    let mut by_run: BTreeMap<i64, Vec<ScenarioCost>> = BTreeMap::new();
    for r in rows {
        let mut spend = r.spend;
        spend.finish();
        by_run.entry(r.run_id).or_default().push(ScenarioCost {
            scenario: r.scenario,
            spend,
        });
    }
    // Charges for replies that were not kept, by run, scenario and call.
    let charges = store.discarded_spend(run_id).await?;
    for r in charges {
        let scenarios = by_run.entry(r.run_id).or_default();
        let code = r.scenario;
        let i = match scenarios.iter().position(|s| s.scenario == code) {
            Some(i) => i,
            None => {
                scenarios.push(ScenarioCost {
                    scenario: code,
                    spend: Spend::default(),
                });
                scenarios.len() - 1
            }
        };
        let spend = &mut scenarios[i].spend;
        let usd = r.cost_usd;
        if r.call == "judge" {
            spend.judge_cost_usd += usd;
        } else {
            spend.cost_usd += usd;
        }
        spend.discarded_cost_usd += usd;
        spend.unknown_charges += r.unknown_attempts;
        spend.finish();
    }
    let mut report = CostReport {
        runs: Vec::new(),
        models: Vec::new(),
        cost_usd: 0.0,
        judge_cost_usd: 0.0,
        total_fee_usd: 0.0,
        total_byok_upstream_usd: 0.0,
        total_cost_usd: 0.0,
        unknown_cost_replies: 0,
        unknown_charges: 0,
    };
    let mut models: BTreeMap<String, ModelCost> = BTreeMap::new();
    let mut judges: BTreeMap<i64, Vec<JudgeCost>> = BTreeMap::new();
    for j in store.judge_spend(run_id).await? {
        judges.entry(j.run_id).or_default().push(JudgeCost {
            judge_model: j.judge_model,
            calls: j.calls,
            cost_usd: j.cost_usd,
            prompt_tokens: j.prompt_tokens,
            completion_tokens: j.completion_tokens,
            cached_judgements: j.cached,
        });
    }
    // Oldest first, as spend accrued.
    for run in runs.into_iter().rev() {
        let mut scenarios = by_run.remove(&run.run_id).unwrap_or_default();
        scenarios.sort_by(|a, b| natural_cmp(&a.scenario, &b.scenario));
        let mut spend = Spend::default();
        for s in &scenarios {
            spend.add(&s.spend);
        }
        spend.finish();
        let m = models
            .entry(run.model.clone())
            .or_insert_with(|| ModelCost {
                model: run.model.clone(),
                runs: 0,
                spend: Spend::default(),
            });
        m.runs += 1;
        m.spend.add(&spend);
        report.cost_usd += spend.cost_usd;
        report.judge_cost_usd += spend.judge_cost_usd;
        report.total_byok_upstream_usd += spend.byok_upstream_usd;
        report.unknown_cost_replies += spend.unknown_cost_replies + spend.unknown_cost_judgements;
        report.unknown_charges += spend.unknown_charges;
        report.runs.push(RunCost {
            run_id: run.run_id,
            model: run.model,
            status: run.status,
            kind: run.kind,
            started_at: run.started_at,
            spend,
            scenarios,
            judges: judges.remove(&run.run_id).unwrap_or_default(),
        });
    }
    report.models = models.into_values().collect();
    report.total_fee_usd = report.cost_usd + report.judge_cost_usd;
    report.total_cost_usd = report.total_fee_usd + report.total_byok_upstream_usd;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spend_totals_and_mean() {
        let mut a = Spend {
            test_cases: 2,
            cost_usd: 0.002,
            judge_cost_usd: 0.001,
            ..Spend::default()
        };
        a.finish();
        assert!((a.total_cost_usd - 0.003).abs() < 1e-15);
        assert!((a.mean_cost_per_test_case.unwrap() - 0.0015).abs() < 1e-15);
        let mut t = Spend::default();
        t.finish();
        assert_eq!(t.mean_cost_per_test_case, None);
        t.add(&a);
        t.add(&Spend {
            upstream_cost_usd: Some(0.5),
            ..Spend::default()
        });
        assert_eq!(t.test_cases, 2);
        assert_eq!(t.upstream_cost_usd, Some(0.5));
        assert!((t.total_cost_usd - 0.003).abs() < 1e-15);
    }
}
