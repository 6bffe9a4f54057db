//! Reads of what served each reply and what its tokens were (issue 22):
//! served models and providers per run, provider errors by type, reasoning
//! and cached prompt tokens per run, and the mean completion of a model's
//! stored replies, which the cost estimate uses.

use super::backend::on;
use super::decode::Row as _;
use super::decode::from_columns;
use super::{Store, StoreError};
use crate::domain::{Caller, ErrorTypeCount, ServedCount, TokenDetails};

from_columns!(ServedCount {
    run_id,
    call,
    requested,
    served_model,
    provider,
    replies,
});
from_columns!(ErrorTypeCount {
    run_id,
    error_type,
    results,
});
from_columns!(TokenDetails {
    run_id,
    reasoning_tokens,
    cached_prompt_tokens,
    judge_reasoning_tokens,
    judge_cached_prompt_tokens,
});

impl Store {
    /// Served model and provider counts, for one run or every run.
    pub async fn served_counts(&self, run_id: Option<i64>) -> Result<Vec<ServedCount>, StoreError> {
        self.per_run(served_counts_sql, run_id).await
    }

    /// Provider errors by `error_type`, for one run or every run.
    pub async fn error_type_counts(
        &self,
        run_id: Option<i64>,
    ) -> Result<Vec<ErrorTypeCount>, StoreError> {
        self.per_run(error_type_counts_sql, run_id).await
    }

    /// Reasoning and cached prompt tokens per run (one run or every run).
    pub async fn token_details(
        &self,
        run_id: Option<i64>,
    ) -> Result<Vec<TokenDetails>, StoreError> {
        self.per_run(token_details_sql, run_id).await
    }

    /// The mean completion tokens of `model`'s replies that were sent
    /// (not reused) and reported tokens, with how many there are, in the
    /// role `as_` (a tested model, a judge, a simulated user).
    pub async fn mean_completion_tokens(
        &self,
        model: &str,
        as_: Caller,
    ) -> Result<Option<(f64, i64)>, StoreError> {
        on!(&self.pool, |pool, d| {
            let sql = if as_ == Caller::Judge {
                "SELECT AVG(CAST(completion_tokens AS DOUBLE PRECISION)) AS mean, COUNT(*) AS replies FROM judgement
              WHERE judge_model = $1 AND cached = 0 AND completion_tokens > 0"
            } else if as_ == Caller::UserModel {
                // A simulated user's messages (issue 42).
                "SELECT AVG(CAST(completion_tokens AS DOUBLE PRECISION)) AS mean, COUNT(*) AS replies FROM simulated_turn
              WHERE user_model = $1 AND cached = 0 AND completion_tokens > 0"
            } else {
                // Per request: a conversation's result sums its turns, so
                // its live turns count one by one instead (issue 42).
                "SELECT AVG(CAST(x.ct AS DOUBLE PRECISION)) AS mean, COUNT(*) AS replies FROM (
                   SELECT r.completion_tokens AS ct
                     FROM result r JOIN evaluation_run er ON er.id = r.run_id JOIN llm l ON l.id = er.llm_id
                    WHERE l.model_id = $1 AND r.cached = 0 AND r.completion_tokens > 0
                      AND NOT EXISTS (SELECT 1 FROM turn t WHERE t.run_id = r.run_id
                          AND t.test_code = r.test_code AND t.repeat_index = r.repeat_index)
                   UNION ALL
                   SELECT t.completion_tokens AS ct
                     FROM turn t JOIN evaluation_run er ON er.id = t.run_id JOIN llm l ON l.id = er.llm_id
                    WHERE l.model_id = $1 AND t.cached = 0 AND t.prefilled = 0 AND t.completion_tokens > 0
                 ) x"
            };
            let row = sqlx::query(sql).bind(model).fetch_one(pool).await?;
            let n: i64 = row.col("replies")?;
            Ok(match n > 0 {
                true => Some((row.col("mean")?, n)),
                false => None,
            })
        })
    }
}

/// The statement of [`Store::served_counts`] for one run or every run.
pub(super) fn served_counts_sql(one_run: bool) -> String {
    format!(
            "SELECT run_id, call, requested, NULLIF(served_model, '') AS served_model,
                    NULLIF(provider, '') AS provider, replies
               FROM run_served_total {} ORDER BY run_id, call DESC, requested, served_model, provider",
            if one_run { "WHERE run_id = $1" } else { "" }
        )
}

/// The statement of [`Store::error_type_counts`] for one run or every run.
pub(super) fn error_type_counts_sql(one_run: bool) -> String {
    format!(
        "SELECT run_id, NULLIF(error_type, '') AS error_type, results FROM run_error_total {}
              ORDER BY run_id, results DESC, error_type",
        if one_run { "WHERE run_id = $1" } else { "" }
    )
}

/// The statement of [`Store::token_details`] for one run or every run.
pub(super) fn token_details_sql(one_run: bool) -> String {
    format!(
        "SELECT run_id, SUM(reasoning_tokens) AS reasoning_tokens,
                    SUM(cached_prompt_tokens) AS cached_prompt_tokens,
                    SUM(judge_reasoning_tokens) AS judge_reasoning_tokens,
                    SUM(judge_cached_prompt_tokens) AS judge_cached_prompt_tokens
               FROM run_total {}
              GROUP BY run_id HAVING SUM(test_cases) > 0 ORDER BY run_id",
        if one_run { "WHERE run_id = $1" } else { "" }
    )
}
