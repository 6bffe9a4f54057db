//! Reads: every SELECT that reports, costs, export and `runs` need, as
//! typed rows. Nothing outside the store runs SQL of its own.

use futures_util::{Stream, TryStreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::Row;

use super::runs::{run_sql, runs_query};
use super::{RunRow, Store, StoreError};
use crate::domain::QualityScores;
use crate::domain::ServedBy;
use crate::domain::StoredResult;

fn json_col(s: Option<String>) -> Option<Value> {
    s.and_then(|s| serde_json::from_str(&s).ok())
}

/// One judged criterion of an exported result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportJudgement {
    pub criterion: String,
    pub judge_model: String,
    pub verdict: Option<Value>,
    pub passed: Option<bool>,
    pub justification: Option<String>,
    pub error: Option<String>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cost_usd: f64,
    pub cached: bool,
    /// What served the judge's answer.
    #[serde(flatten, default)]
    pub served: ServedBy,
}

/// One exported result: a JSONL line, or a CSV row (nested values as JSON text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportRow {
    pub run_id: i64,
    pub model: String,
    #[serde(flatten)]
    pub result: StoredResult,
    /// The error message.
    pub error: Option<String>,
    /// The raw reply.
    pub response: Option<String>,
    pub parsed: Option<Value>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// Provider-reported cost of the model call.
    pub cost_usd: f64,
    pub upstream_cost_usd: Option<f64>,
    /// Provider-reported cost of the judge calls.
    pub judge_cost_usd: f64,
    pub latency_ms: Option<i64>,
    pub attempts: i64,
    pub cached: bool,
    pub finish_reason: Option<String>,
    pub generation_id: Option<String>,
    pub created_at: String,
    pub judgements: Vec<ExportJudgement>,
    pub quality: Option<QualityScores>,
    pub prompt_hash: String,
    /// The composed prompt, with `--with-prompts` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The model (`served_model`) and provider that served the reply, which
    /// routing may make differ from `model` (null before they were stored),
    /// and its reasoning and cached prompt tokens.
    #[serde(flatten, default)]
    pub served: ServedBy,
    /// With a provider error: `error.metadata.error_type` and `provider_code`.
    #[serde(default)]
    pub error_type: Option<String>,
    #[serde(default)]
    pub provider_code: Option<String>,
    /// A blocked or refused test case: what the provider said.
    #[serde(default)]
    pub block: Option<crate::domain::Block>,
}

impl Store {
    /// Every run, newest first, with totals computed from its results.
    pub async fn runs(&self) -> Result<Vec<RunRow>, StoreError> {
        Ok(sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(format!(
            "{} ORDER BY er.id DESC",
            runs_query("")
        )))
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .map(|r| r.settle(&self.owner))
        .collect())
    }

    pub async fn run(&self, run_id: i64) -> Result<RunRow, StoreError> {
        sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(run_sql()))
            .bind(run_id)
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await?
            .map(|r| r.settle(&self.owner))
            .ok_or_else(|| {
                StoreError::NotFound(format!("no run with id {run_id} (see `helmbench runs`)"))
            })
    }

    /// Every result of `run_id` (every run when `None`) as `export` writes
    /// it, streamed row by row (never `fetch_all`), so memory stays flat
    /// however large the database is.
    pub fn export_rows(
        &self,
        run_id: Option<i64>,
        with_prompts: bool,
    ) -> impl Stream<Item = Result<ExportRow, StoreError>> + '_ {
        let mut q =
            sqlx::query(sqlx::AssertSqlSafe(export_sql(run_id.is_some()))).bind(with_prompts);
        if let Some(id) = run_id {
            q = q.bind(id);
        }
        q.fetch(&self.pool)
            .map_err(StoreError::from)
            .and_then(|row| std::future::ready(export_row(&row)))
    }
}

/// The judgements as SQLite aggregates them (one JSON array per result, in
/// stored order), so each result stays one row of the stream.
#[derive(Deserialize)]
struct RawJudgement {
    criterion: String,
    judge_model: String,
    verdict: Option<Value>,
    passed: Option<i64>,
    justification: Option<String>,
    error: Option<String>,
    prompt_tokens: i64,
    completion_tokens: i64,
    cost_usd: f64,
    cached: i64,
    #[serde(flatten, default)]
    served: ServedBy,
}

const EXPORT_QUERY: &str = "SELECT r.run_id, l.model_id, r.test_code, r.repeat_index, b.code, s.code, c.code, u.code, p.code,
    r.base_severity, r.difficulty, r.passed, r.matched, r.error_kind, r.error, r.response, r.parsed,
    r.prompt_tokens, r.completion_tokens, r.cost_usd, r.upstream_cost_usd, r.latency_ms, r.attempts, r.cached,
    r.finish_reason, r.generation_id, r.created_at,
    (SELECT json_group_array(json_object('criterion', j.criterion, 'judge_model', j.judge_model,
            'verdict', json(j.verdict), 'passed', j.passed, 'justification', j.justification, 'error', j.error,
            'prompt_tokens', j.prompt_tokens, 'completion_tokens', j.completion_tokens, 'cost_usd', j.cost_usd,
            'cached', j.cached, 'served_model', j.served_model, 'provider', j.provider,
            'reasoning_tokens', j.reasoning_tokens, 'cached_prompt_tokens', j.cached_prompt_tokens) ORDER BY j.id)
       FROM judgement j WHERE j.result_id = r.id),
    r.quality, r.prompt_hash, CASE WHEN ? THEN (SELECT text FROM prompt_text WHERE hash = r.prompt_hash) END,
    r.served_model, r.provider, r.reasoning_tokens, r.cached_prompt_tokens, r.error_type, r.provider_code,
    r.block
  FROM result r
  JOIN evaluation_run er ON er.id = r.run_id
  JOIN llm l ON l.id = er.llm_id
  JOIN scenario s ON s.id = r.scenario_id
  JOIN behaviour b ON b.id = s.behaviour_id
  JOIN condition c ON c.id = r.condition_id
  LEFT JOIN user_context u ON u.id = r.user_context_id
  JOIN perturbation p ON p.id = r.perturbation_id";

/// The statement of [`Store::export_rows`] for one run or every run: one
/// per case, as `(? IS NULL OR r.run_id = ?)` would keep SQLite from using
/// the run's index (a whole-table scan per export).
pub(super) fn export_sql(one_run: bool) -> String {
    match one_run {
        true => format!("{EXPORT_QUERY} WHERE r.run_id = ? ORDER BY r.id"),
        false => format!("{EXPORT_QUERY} ORDER BY r.id"),
    }
}

fn export_row(row: &sqlx::sqlite::SqliteRow) -> Result<ExportRow, StoreError> {
    let json_col = |i: usize| -> Option<Value> {
        row.get::<Option<String>, _>(i)
            .and_then(|s| serde_json::from_str(&s).ok())
    };
    let raw: Vec<RawJudgement> = match row.get::<Option<String>, _>(27) {
        Some(s) => serde_json::from_str(&s).map_err(StoreError::Judgements)?,
        None => Vec::new(),
    };
    let judgements: Vec<ExportJudgement> = raw
        .into_iter()
        .map(|j| ExportJudgement {
            criterion: j.criterion,
            judge_model: j.judge_model,
            verdict: j.verdict,
            passed: j.passed.map(|p| p != 0),
            justification: j.justification,
            error: j.error,
            prompt_tokens: j.prompt_tokens,
            completion_tokens: j.completion_tokens,
            cost_usd: j.cost_usd,
            cached: j.cached != 0,
            served: j.served,
        })
        .collect();
    Ok(ExportRow {
        run_id: row.get(0),
        model: row.get(1),
        result: StoredResult {
            test_code: row.get(2),
            repeat_index: row.get(3),
            behaviour: row.get(4),
            scenario: row.get(5),
            condition: row.get(6),
            user_context: row.get(7),
            perturbation: row.get(8),
            base_severity: row.get(9),
            difficulty: row.get(10),
            passed: row.get(11),
            matched: row.get(12),
            error_kind: row.get(13),
        },
        error: row.get(14),
        response: row.get(15),
        parsed: json_col(16),
        prompt_tokens: row.get(17),
        completion_tokens: row.get(18),
        cost_usd: row.get(19),
        upstream_cost_usd: row.get(20),
        judge_cost_usd: judgements.iter().map(|j| j.cost_usd).sum(),
        latency_ms: row.get(21),
        attempts: row.get(22),
        cached: row.get(23),
        finish_reason: row.get(24),
        generation_id: row.get(25),
        created_at: row.get(26),
        judgements,
        quality: row
            .get::<Option<String>, _>(28)
            .and_then(|s| serde_json::from_str(&s).ok()),
        prompt_hash: row.get(29),
        prompt: row.get(30),
        served: ServedBy {
            served_model: row.get(31),
            provider: row.get(32),
            reasoning_tokens: row.get(33),
            cached_prompt_tokens: row.get(34),
        },
        error_type: row.get(35),
        provider_code: row.get(36),
        block: row
            .get::<Option<String>, _>("block")
            .and_then(|b| serde_json::from_str(&b).ok()),
    })
}

/// A stored result as the report streams it: the record, plus its error and
/// reply for the keyword quality summary and `report --details`.
#[derive(Debug, Clone)]
pub struct ReportRow {
    pub id: i64,
    pub result: StoredResult,
    pub error: Option<String>,
    /// The stored keyword quality scores.
    pub quality: Option<QualityScores>,
    pub response: Option<String>,
    pub parsed: Option<String>,
}

/// The FROM and WHERE of a [`StoredResult`] read of one run (a macro so
/// that `concat!` can join it to each column list).
macro_rules! stored_from {
    () => {
        "FROM result r
  JOIN scenario s ON s.id = r.scenario_id
  JOIN behaviour b ON b.id = s.behaviour_id
  JOIN condition c ON c.id = r.condition_id
  LEFT JOIN user_context u ON u.id = r.user_context_id
  JOIN perturbation p ON p.id = r.perturbation_id
  WHERE r.run_id = ?"
    };
}
pub(super) use stored_from;

/// The SELECT of [`ReportRow`]s of one run; `{filter}` narrows it.
pub(super) const REPORT_ROWS: &str = concat!(
    "SELECT r.id, r.test_code, r.repeat_index, b.code, s.code, c.code, u.code, p.code,
       r.base_severity, r.difficulty, r.passed, r.matched, r.error_kind, r.error, r.quality, r.response, r.parsed ",
    stored_from!()
);

fn report_row(row: &sqlx::sqlite::SqliteRow) -> ReportRow {
    ReportRow {
        id: row.get(0),
        result: StoredResult {
            test_code: row.get(1),
            repeat_index: row.get(2),
            behaviour: row.get(3),
            scenario: row.get(4),
            condition: row.get(5),
            user_context: row.get(6),
            perturbation: row.get(7),
            base_severity: row.get(8),
            difficulty: row.get(9),
            passed: row.get(10),
            matched: row.get(11),
            error_kind: row.get(12),
        },
        error: row.get(13),
        quality: row
            .get::<Option<String>, _>(14)
            .and_then(|q| serde_json::from_str(&q).ok()),
        response: row.get(15),
        parsed: row.get(16),
    }
}

/// Verdict counts of one judged criterion of one scenario.
#[derive(Debug, Clone)]
pub struct CriterionCount {
    pub scenario: String,
    pub criterion: String,
    pub evaluations: i64,
    pub passed: i64,
    pub failed: i64,
    pub judge_errors: i64,
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

/// Spend of a set of results, from the provider-reported costs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    pub test_cases: i64,
    /// Model calls.
    pub cost_usd: f64,
    /// Judge calls.
    pub judge_cost_usd: f64,
    /// Model + judge, all that was billed: OpenRouter's fees plus, with
    /// bring-your-own-key, what the providers billed the key.
    pub total_cost_usd: f64,
    /// OpenRouter's own figure (`usage.cost`) for model + judge: the whole
    /// price, or only its fee with bring-your-own-key.
    #[serde(default)]
    pub fee_usd: f64,
    /// With bring-your-own-key: what the providers billed the key for
    /// model + judge (`upstream_inference_cost` of replies marked
    /// `is_byok`); 0 otherwise.
    #[serde(default)]
    pub byok_upstream_usd: f64,
    /// The part of `cost_usd` + `judge_cost_usd` charged for replies that
    /// were retried or not kept (empty content, no choices, an error inside
    /// a 200 with a cost, a judge-error result judged again).
    #[serde(default)]
    pub discarded_cost_usd: f64,
    /// With bring-your-own-key: the upstream provider's cost; `None` when no
    /// reply reported one.
    pub upstream_cost_usd: Option<f64>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub judge_calls: i64,
    pub judge_prompt_tokens: i64,
    pub judge_completion_tokens: i64,
    /// Replies reused from an identical earlier request, at no cost.
    pub cached_replies: i64,
    pub cached_judgements: i64,
    /// Model replies and judge calls whose provider-reported cost was not a
    /// usable number: unknown, and left out of the sums above.
    pub unknown_cost_replies: i64,
    pub unknown_cost_judgements: i64,
    /// Attempts charged an amount nobody knows that left no result (cut at
    /// the size limit, abandoned on a timeout): not in the sums above.
    #[serde(default)]
    pub unknown_charges: i64,
    /// `total_cost_usd / test_cases`; `None` without test cases.
    pub mean_cost_per_test_case: Option<f64>,
}

/// What one scenario of one run spent, summed over its results (the
/// derived totals are left to the report).
#[derive(Debug, Clone)]
pub struct ScenarioSpendRow {
    pub run_id: i64,
    pub scenario: String,
    pub spend: Spend,
}

/// Discarded charges of one run, scenario (`""` when none) and call.
#[derive(Debug, Clone)]
pub struct DiscardedSpendRow {
    pub run_id: i64,
    pub scenario: String,
    /// `model` or `judge`.
    pub call: String,
    pub cost_usd: f64,
    /// Attempts charged an unknown amount.
    pub unknown_attempts: i64,
}

impl Store {
    /// A run's results as the report reads them, streamed in stored order.
    pub fn report_rows(
        &self,
        run_id: i64,
    ) -> impl Stream<Item = Result<ReportRow, StoreError>> + '_ {
        sqlx::query(sqlx::AssertSqlSafe(format!("{REPORT_ROWS} ORDER BY r.id")))
            .bind(run_id)
            .fetch(&self.pool)
            .map_ok(|row| report_row(&row))
            .map_err(StoreError::from)
    }

    /// Verdict counts per scenario and criterion of a run's judgements.
    pub async fn criterion_counts(&self, run_id: i64) -> Result<Vec<CriterionCount>, StoreError> {
        let rows = sqlx::query(CRITERION_COUNTS)
            .bind(run_id)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .map(|r| CriterionCount {
                scenario: r.get(0),
                criterion: r.get(1),
                evaluations: r.get(2),
                passed: r.get(3),
                failed: r.get(4),
                judge_errors: r.get(5),
            })
            .collect())
    }

    /// A run's results that did not pass, in stored order.
    pub async fn failed_results(&self, run_id: i64) -> Result<Vec<ReportRow>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{REPORT_ROWS} AND r.passed = 0 ORDER BY r.id"
        )))
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(report_row).collect())
    }

    /// The judgements of a run's results that did not pass, with their
    /// result's id.
    pub async fn failed_judgements(
        &self,
        run_id: i64,
    ) -> Result<Vec<(i64, CriterionVerdict)>, StoreError> {
        let rows = sqlx::query(FAILED_JUDGEMENTS)
            .bind(run_id)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .map(|j| {
                let verdict = CriterionVerdict {
                    criterion: j.get(1),
                    verdict: json_col(j.get(2)),
                    passed: j.get(3),
                    justification: j.get(4),
                    error: j.get(5),
                };
                (j.get(0), verdict)
            })
            .collect())
    }

    /// Spend per run and scenario (one run, or every run when `None`), from
    /// the kept totals.
    pub async fn scenario_spend(
        &self,
        run_id: Option<i64>,
    ) -> Result<Vec<ScenarioSpendRow>, StoreError> {
        let sql = scenario_spend_sql(run_id.is_some());
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        if let Some(id) = run_id {
            q = q.bind(id);
        }
        let rows = q.fetch_all(&self.pool).await?;
        Ok(rows
            .iter()
            .map(|r| ScenarioSpendRow {
                run_id: r.get(0),
                scenario: r.get(1),
                spend: Spend {
                    test_cases: r.get(2),
                    cost_usd: r.get(3),
                    judge_cost_usd: r.get(4),
                    upstream_cost_usd: r.get(5),
                    prompt_tokens: r.get(6),
                    completion_tokens: r.get(7),
                    judge_calls: r.get(8),
                    judge_prompt_tokens: r.get(9),
                    judge_completion_tokens: r.get(10),
                    cached_replies: r.get(11),
                    cached_judgements: r.get(12),
                    unknown_cost_replies: r.get(13),
                    unknown_cost_judgements: r.get(14),
                    byok_upstream_usd: r.get("byok"),
                    ..Spend::default()
                },
            })
            .collect())
    }

    /// Charges for replies that were not kept, by run, scenario and call.
    pub async fn discarded_spend(
        &self,
        run_id: Option<i64>,
    ) -> Result<Vec<DiscardedSpendRow>, StoreError> {
        let sql = discarded_spend_sql(run_id.is_some());
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        if let Some(id) = run_id {
            q = q.bind(id);
        }
        let rows = q.fetch_all(&self.pool).await?;
        Ok(rows
            .iter()
            .map(|r| DiscardedSpendRow {
                run_id: r.get(0),
                scenario: r.get(1),
                call: r.get(2),
                cost_usd: r.get(3),
                unknown_attempts: r.get("unknown"),
            })
            .collect())
    }
}

/// The statement of [`Store::scenario_spend`] for one run or every run.
pub(super) fn scenario_spend_sql(one_run: bool) -> String {
    format!(
        "SELECT t.run_id, s.code, SUM(t.test_cases), SUM(t.cost_usd), SUM(t.judge_cost_usd),
                CASE WHEN SUM(t.upstream_replies) > 0 THEN SUM(t.upstream_cost_usd) END,
                SUM(t.prompt_tokens), SUM(t.completion_tokens),
                SUM(t.judge_calls), SUM(t.judge_prompt_tokens), SUM(t.judge_completion_tokens),
                SUM(t.cached_replies), SUM(t.judge_cached),
                SUM(t.cost_unknown), SUM(t.judge_cost_unknown),
                SUM(t.byok_cost_usd + t.judge_byok_cost_usd) AS byok
         FROM run_total t
         JOIN scenario s ON s.id = t.scenario_id
         {}
         GROUP BY t.run_id, s.code
         HAVING SUM(t.test_cases) > 0",
        if one_run { "WHERE t.run_id = ?" } else { "" }
    )
}

/// The statement of [`Store::discarded_spend`] for one run or every run.
pub(super) fn discarded_spend_sql(one_run: bool) -> String {
    let filter = if one_run {
        "WHERE t.run_id = ?1"
    } else {
        "WHERE 1"
    };
    format!(
        "SELECT run_id, scenario, call, cost, unknown FROM (
               SELECT t.run_id, COALESCE(s.code, '') AS scenario, 'model' AS call,
                      SUM(t.discarded_model_usd) AS cost, SUM(t.discarded_unknown) AS unknown
                 FROM run_total t LEFT JOIN scenario s ON s.id = t.scenario_id {filter}
                GROUP BY t.run_id, s.code
               UNION ALL
               SELECT t.run_id, COALESCE(s.code, ''), 'judge', SUM(t.discarded_judge_usd), 0
                 FROM run_total t LEFT JOIN scenario s ON s.id = t.scenario_id {filter}
                GROUP BY t.run_id, s.code)
             WHERE cost <> 0 OR unknown <> 0"
    )
}

pub(super) const CRITERION_COUNTS: &str = "SELECT s.code, j.criterion, COUNT(*), COALESCE(SUM(j.passed = 1), 0), COALESCE(SUM(j.passed = 0), 0),
                COALESCE(SUM(j.passed IS NULL), 0)
         FROM judgement j JOIN result r ON r.id = j.result_id JOIN scenario s ON s.id = r.scenario_id
         WHERE r.run_id = ? GROUP BY s.code, j.criterion";

pub(super) const FAILED_JUDGEMENTS: &str =
    "SELECT j.result_id, j.criterion, j.verdict, j.passed, j.justification, j.error
         FROM judgement j JOIN result r ON r.id = j.result_id
         WHERE r.run_id = ? AND r.passed = 0 ORDER BY j.result_id, j.id";
