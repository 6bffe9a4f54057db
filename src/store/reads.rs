//! Reads: every SELECT that reports, costs, export and `runs` need, as
//! typed rows. Nothing outside the store runs SQL of its own.

use super::backend::{Dialect, Pool, on};
use super::decode::Row;
use futures_util::{Stream, TryStreamExt};
use serde_json::Value;
use sqlx::sqlite::SqliteRow;

use super::decode::from_columns;
use super::runs::{OwnedRun, run_sql, runs_query};
use super::{Store, StoreError};
use crate::domain::{
    CriterionCount, Detail, DiscardedSpendRow, JudgementRecord, ResultRecord, RunRecord,
    ScenarioSpendRow, ServedBy, Spend, StoredResult, Which,
};

/// A JSON text column as a value; `None` when empty or unreadable.
pub(super) fn json_col<R: Row>(row: &R, col: &str) -> Result<Option<Value>, sqlx::Error> {
    Ok(row
        .col::<Option<String>>(col)?
        .and_then(|s| serde_json::from_str(&s).ok()))
}

impl Store {
    /// Every run, newest first, with totals computed from its results.
    pub async fn runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        on!(&self.pool, |pool, d| {
            Ok(sqlx::query_as::<_, OwnedRun>(sqlx::AssertSqlSafe(format!(
                "{} ORDER BY er.id DESC",
                runs_query("")
            )))
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(|r| r.settle(&self.owner))
            .collect())
        })
    }

    pub async fn run(&self, run_id: i64) -> Result<RunRecord, StoreError> {
        on!(&self.pool, |pool, d| {
            sqlx::query_as::<_, OwnedRun>(sqlx::AssertSqlSafe(run_sql()))
                .bind(run_id)
                .bind(run_id)
                .fetch_optional(pool)
                .await?
                .map(|r| r.settle(&self.owner))
                .ok_or_else(|| {
                    StoreError::NotFound(format!("no run with id {run_id} (see `helmbench runs`)"))
                })
        })
    }

    /// The rows of a read of one run (`run_id`, its one `?`) or of every
    /// run, in the words `sql_of(one_run)` gives, decoded by column name.
    pub(super) async fn per_run<O>(
        &self,
        sql_of: fn(bool) -> String,
        run_id: Option<i64>,
    ) -> Result<Vec<O>, StoreError>
    where
        O: for<'r> sqlx::FromRow<'r, SqliteRow>
            + for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>
            + Send
            + Unpin,
    {
        on!(&self.pool, |pool, d| {
            let mut q = sqlx::query_as(sqlx::AssertSqlSafe(sql_of(run_id.is_some())));
            if let Some(id) = run_id {
                q = q.bind(id);
            }
            Ok(q.fetch_all(pool).await?)
        })
    }

    /// The stored results `which` names, as [`ResultRecord`]s with what
    /// `detail` asks for, streamed row by row (never `fetch_all`), so memory
    /// stays flat however large the database is. What `export`,
    /// `run-single` and the report read.
    pub fn results(
        &self,
        which: Which,
        detail: Detail,
    ) -> impl Stream<Item = Result<ResultRecord, StoreError>> + '_ {
        use futures_util::StreamExt as _;
        // The rows of either backend, decoded alike.
        macro_rules! rows {
            ($pool:expr, $d:expr) => {{
                let mut q = sqlx::query(sqlx::AssertSqlSafe(results_sql(which, $d)))
                    .bind(detail.judgements)
                    .bind(detail.prompts)
                    .bind(detail.replies);
                if let Which::Run(id) | Which::FailedOf(id) = which {
                    q = q.bind(id);
                }
                q.fetch($pool)
                    .map_err(StoreError::from)
                    .and_then(|row| std::future::ready(result_record(&row)))
            }};
        }
        match &self.pool {
            Pool::Sqlite(pool) => rows!(pool, Dialect::Sqlite).left_stream(),
            Pool::Postgres(pool) => rows!(pool, Dialect::Postgres).right_stream(),
        }
    }
}

impl Store {
    /// The stored results with these ids (a handful: the examples a report
    /// quotes), in id order, with what `detail` asks for.
    pub async fn results_by_id(
        &self,
        ids: &[i64],
        detail: Detail,
    ) -> Result<Vec<ResultRecord>, StoreError> {
        on!(&self.pool, |pool, d| {
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            // ?1-?3 are the detail flags; the ids follow as ?4, ?5, ...
            let list: Vec<String> = (0..ids.len()).map(|i| format!("${}", i + 4)).collect();
            let sql = format!(
                "{} WHERE r.id IN ({}) ORDER BY r.id",
                results_query(d),
                list.join(", ")
            );
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(detail.judgements)
                .bind(detail.prompts)
                .bind(detail.replies);
            for id in ids {
                q = q.bind(*id);
            }
            q.fetch_all(pool).await?.iter().map(result_record).collect()
        })
    }
}

/// The columns of a [`ResultRecord`], each named as its field. The
/// judgements come as one JSON array per result (in stored order, decoded
/// by key), so each result stays one row of the stream; they and the prompt
/// are read only when asked (`?1`, `?2`, and the reply with its provenance
/// `?3`: SQLite skips an unused `CASE` arm, and each text value left out is
/// one copy fewer between sqlx's worker thread and the reader).
/// A result's judgements as one JSON array (when `$1`), in SQLite's words.
const JUDGEMENTS_SQLITE: &str = "CASE WHEN $1 THEN (SELECT json_group_array(json_object('criterion', j.criterion, 'judge_model', j.judge_model,
            'verdict', json(j.verdict), 'passed', json(CASE WHEN j.passed THEN 'true' WHEN NOT j.passed THEN 'false' END),
            'justification', j.justification, 'error', j.error,
            'prompt_tokens', j.prompt_tokens, 'completion_tokens', j.completion_tokens, 'cost_usd', j.cost_usd,
            'cached', json(CASE WHEN j.cached THEN 'true' ELSE 'false' END), 'served_model', j.served_model,
            'provider', j.provider, 'reasoning_tokens', j.reasoning_tokens,
            'cached_prompt_tokens', j.cached_prompt_tokens) ORDER BY j.id)
       FROM judgement j WHERE j.result_id = r.id) END AS judgements,";

/// The same array in PostgreSQL's (flags are 0/1 integers in both schemas).
const JUDGEMENTS_POSTGRES: &str = "CASE WHEN $1 THEN (SELECT json_agg(json_build_object('criterion', j.criterion, 'judge_model', j.judge_model,
            'verdict', j.verdict::json, 'passed', CASE WHEN j.passed = 1 THEN true WHEN j.passed = 0 THEN false END,
            'justification', j.justification, 'error', j.error,
            'prompt_tokens', j.prompt_tokens, 'completion_tokens', j.completion_tokens, 'cost_usd', j.cost_usd,
            'cached', j.cached <> 0, 'served_model', j.served_model,
            'provider', j.provider, 'reasoning_tokens', j.reasoning_tokens,
            'cached_prompt_tokens', j.cached_prompt_tokens) ORDER BY j.id)::text
       FROM judgement j WHERE j.result_id = r.id) END AS judgements,";

/// Every stored result's columns (`$1`: judgements, `$2`: prompts, `$3`:
/// replies and provenance), before its WHERE.
fn results_query(d: Dialect) -> String {
    RESULTS_QUERY.replacen(
        "{judgements}",
        d.pick(JUDGEMENTS_SQLITE, JUDGEMENTS_POSTGRES),
        1,
    )
}

const RESULTS_QUERY: &str = "SELECT r.id, r.run_id, l.model_id AS model, r.test_code, r.repeat_index,
    b.code AS behaviour, s.code AS scenario, c.code AS condition, u.code AS user_context, p.code AS perturbation,
    r.base_severity, r.difficulty, r.passed, r.matched, r.error_kind,
    CASE WHEN $3 THEN r.error END AS error, CASE WHEN $3 THEN r.response END AS response,
    CASE WHEN $3 THEN r.parsed END AS parsed,
    r.prompt_tokens, r.completion_tokens, r.cost_usd, r.upstream_cost_usd, r.latency_ms, r.attempts, r.cached,
    CASE WHEN $3 THEN r.finish_reason END AS finish_reason,
    CASE WHEN $3 THEN r.generation_id END AS generation_id,
    CASE WHEN $3 THEN r.created_at ELSE '' END AS created_at,
    {judgements}
    r.quality, CASE WHEN $3 THEN r.prompt_hash ELSE '' END AS prompt_hash,
    CASE WHEN $2 THEN (SELECT text FROM prompt_text WHERE hash = r.prompt_hash) END AS prompt,
    CASE WHEN $3 THEN r.served_model END AS served_model, CASE WHEN $3 THEN r.provider END AS provider,
    r.reasoning_tokens, r.cached_prompt_tokens,
    CASE WHEN $3 THEN r.error_type END AS error_type, CASE WHEN $3 THEN r.provider_code END AS provider_code,
    r.block
  FROM result r
  JOIN evaluation_run er ON er.id = r.run_id
  JOIN llm l ON l.id = er.llm_id
  JOIN scenario s ON s.id = r.scenario_id
  JOIN behaviour b ON b.id = s.behaviour_id
  JOIN condition c ON c.id = r.condition_id
  LEFT JOIN user_context u ON u.id = r.user_context_id
  JOIN perturbation p ON p.id = r.perturbation_id";

/// The statement of [`Store::results`]: one per case, as `(? IS NULL OR
/// r.run_id = ?)` would keep SQLite from using the run's index (a
/// whole-table scan per read).
pub(super) fn results_sql(which: Which, d: Dialect) -> String {
    let query = results_query(d);
    match which {
        Which::Every => format!("{query} ORDER BY r.id"),
        Which::Run(_) => format!("{query} WHERE r.run_id = $4 ORDER BY r.id"),
        Which::FailedOf(_) => {
            format!("{query} WHERE r.run_id = $4 AND r.passed = 0 ORDER BY r.id")
        }
    }
}

/// One row of [`RESULTS_QUERY`], decoded by column name.
fn result_record<R: Row>(row: &R) -> Result<ResultRecord, StoreError> {
    let judgements: Vec<JudgementRecord> = match row.col::<Option<String>>("judgements")? {
        Some(s) => serde_json::from_str(&s).map_err(StoreError::Judgements)?,
        None => Vec::new(),
    };
    Ok(ResultRecord {
        id: row.col("id")?,
        run_id: row.col("run_id")?,
        model: row.col("model")?,
        result: StoredResult {
            test_code: row.col("test_code")?,
            repeat_index: row.col("repeat_index")?,
            behaviour: row.col("behaviour")?,
            scenario: row.col("scenario")?,
            condition: row.col("condition")?,
            user_context: row.col("user_context")?,
            perturbation: row.col("perturbation")?,
            base_severity: row.col("base_severity")?,
            difficulty: row.col("difficulty")?,
            passed: row.col("passed")?,
            matched: row.col("matched")?,
            error_kind: row.col("error_kind")?,
        },
        error: row.col("error")?,
        response: row.col("response")?,
        parsed: json_col(row, "parsed")?,
        prompt_tokens: row.col("prompt_tokens")?,
        completion_tokens: row.col("completion_tokens")?,
        cost_usd: row.col("cost_usd")?,
        upstream_cost_usd: row.col("upstream_cost_usd")?,
        judge_cost_usd: judgements.iter().map(|j| j.cost_usd).sum(),
        latency_ms: row.col("latency_ms")?,
        attempts: row.col("attempts")?,
        cached: row.col("cached")?,
        finish_reason: row.col("finish_reason")?,
        generation_id: row.col("generation_id")?,
        created_at: row.col("created_at")?,
        judgements,
        quality: row
            .col::<Option<String>>("quality")?
            .and_then(|s| serde_json::from_str(&s).ok()),
        prompt_hash: row.col("prompt_hash")?,
        prompt: row.col("prompt")?,
        served: ServedBy {
            served_model: row.col("served_model")?,
            provider: row.col("provider")?,
            reasoning_tokens: row.col("reasoning_tokens")?,
            cached_prompt_tokens: row.col("cached_prompt_tokens")?,
        },
        error_type: row.col("error_type")?,
        provider_code: row.col("provider_code")?,
        block: row
            .col::<Option<String>>("block")?
            .and_then(|b| serde_json::from_str(&b).ok()),
    })
}

from_columns!(CriterionCount {
    scenario,
    criterion,
    evaluations,
    passed,
    failed,
    judge_errors,
});
// The columns of the kept totals; the report derives the rest.
from_columns!(Spend {
    test_cases,
    cost_usd,
    judge_cost_usd,
    byok_upstream_usd,
    upstream_cost_usd,
    prompt_tokens,
    completion_tokens,
    judge_calls,
    judge_prompt_tokens,
    judge_completion_tokens,
    cached_replies,
    cached_judgements,
    unknown_cost_replies,
    unknown_cost_judgements,
    ..Spend::default()
});
from_columns!(DiscardedSpendRow {
    run_id,
    scenario,
    call,
    cost_usd,
    unknown_attempts,
});

impl<R: Row> sqlx::FromRow<'_, R> for ScenarioSpendRow {
    fn from_row(row: &R) -> Result<Self, sqlx::Error> {
        Ok(ScenarioSpendRow {
            run_id: row.col("run_id")?,
            scenario: row.col("scenario")?,
            spend: Spend::from_row(row)?,
        })
    }
}

impl Store {
    /// Verdict counts per scenario and criterion of a run's judgements.
    pub async fn criterion_counts(&self, run_id: i64) -> Result<Vec<CriterionCount>, StoreError> {
        on!(&self.pool, |pool, d| {
            let rows = sqlx::query_as(CRITERION_COUNTS)
                .bind(run_id)
                .fetch_all(pool)
                .await?;
            Ok(rows)
        })
    }

    /// Spend per run and scenario (one run, or every run when `None`), from
    /// the kept totals.
    pub async fn scenario_spend(
        &self,
        run_id: Option<i64>,
    ) -> Result<Vec<ScenarioSpendRow>, StoreError> {
        self.per_run(scenario_spend_sql, run_id).await
    }

    /// Charges for replies that were not kept, by run, scenario and call.
    pub async fn discarded_spend(
        &self,
        run_id: Option<i64>,
    ) -> Result<Vec<DiscardedSpendRow>, StoreError> {
        self.per_run(discarded_spend_sql, run_id).await
    }
}

/// The statement of [`Store::scenario_spend`] for one run or every run.
pub(super) fn scenario_spend_sql(one_run: bool) -> String {
    format!(
        "SELECT t.run_id, s.code AS scenario, SUM(t.test_cases) AS test_cases,
                SUM(t.cost_usd) AS cost_usd, SUM(t.judge_cost_usd) AS judge_cost_usd,
                CASE WHEN SUM(t.upstream_replies) > 0 THEN SUM(t.upstream_cost_usd) END AS upstream_cost_usd,
                SUM(t.prompt_tokens) AS prompt_tokens, SUM(t.completion_tokens) AS completion_tokens,
                SUM(t.judge_calls) AS judge_calls, SUM(t.judge_prompt_tokens) AS judge_prompt_tokens,
                SUM(t.judge_completion_tokens) AS judge_completion_tokens,
                SUM(t.cached_replies) AS cached_replies, SUM(t.judge_cached) AS cached_judgements,
                SUM(t.cost_unknown) AS unknown_cost_replies, SUM(t.judge_cost_unknown) AS unknown_cost_judgements,
                SUM(t.byok_cost_usd + t.judge_byok_cost_usd) AS byok_upstream_usd
         FROM run_total t
         JOIN scenario s ON s.id = t.scenario_id
         {}
         GROUP BY t.run_id, s.code
         HAVING SUM(t.test_cases) > 0",
        if one_run { "WHERE t.run_id = $1" } else { "" }
    )
}

/// The statement of [`Store::discarded_spend`] for one run or every run.
pub(super) fn discarded_spend_sql(one_run: bool) -> String {
    let filter = if one_run {
        "WHERE t.run_id = $1"
    } else {
        "WHERE TRUE"
    };
    format!(
        "SELECT run_id, scenario, call, cost AS cost_usd, unknown AS unknown_attempts FROM (
               SELECT t.run_id, COALESCE(s.code, '') AS scenario, 'model' AS call,
                      SUM(t.discarded_model_usd) AS cost, SUM(t.discarded_unknown) AS unknown
                 FROM run_total t LEFT JOIN scenario s ON s.id = t.scenario_id {filter}
                GROUP BY t.run_id, s.code
               UNION ALL
               SELECT t.run_id, COALESCE(s.code, ''), 'judge', SUM(t.discarded_judge_usd), 0
                 FROM run_total t LEFT JOIN scenario s ON s.id = t.scenario_id {filter}
                GROUP BY t.run_id, s.code) spent
             WHERE cost <> 0 OR unknown <> 0"
    )
}

pub(super) const CRITERION_COUNTS: &str = "SELECT s.code AS scenario, j.criterion, COUNT(*) AS evaluations,
                COALESCE(SUM(CASE WHEN j.passed = 1 THEN 1 ELSE 0 END), 0) AS passed, COALESCE(SUM(CASE WHEN j.passed = 0 THEN 1 ELSE 0 END), 0) AS failed,
                COALESCE(SUM(CASE WHEN j.passed IS NULL THEN 1 ELSE 0 END), 0) AS judge_errors
         FROM judgement j JOIN result r ON r.id = j.result_id JOIN scenario s ON s.id = r.scenario_id
         WHERE r.run_id = $1 GROUP BY s.code, j.criterion";
