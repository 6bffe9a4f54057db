//! Reads of what served each reply and what its tokens were (issue 22):
//! served models and providers per run, provider errors by type, reasoning
//! and cached prompt tokens per run, and the mean completion of a model's
//! stored replies, which the cost estimate uses.

use sqlx::Row;

use super::{Store, StoreError};

/// Replies of one run (or its judge) served by one model and provider.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedCount {
    pub run_id: i64,
    /// `model` or `judge`.
    pub call: String,
    /// The model the request asked for.
    pub requested: String,
    /// None for replies stored before served models were recorded.
    pub served_model: Option<String>,
    pub provider: Option<String>,
    pub replies: i64,
}

/// Provider errors of one run with one `error_type` (None: not given).
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorTypeCount {
    pub run_id: i64,
    pub error_type: Option<String>,
    pub results: i64,
}

/// Reasoning and cached prompt tokens of one run, model and judge apart.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TokenDetails {
    pub run_id: i64,
    pub reasoning_tokens: i64,
    pub cached_prompt_tokens: i64,
    pub judge_reasoning_tokens: i64,
    pub judge_cached_prompt_tokens: i64,
}

impl Store {
    /// Served model and provider counts, for one run or every run.
    pub async fn served_counts(&self, run_id: Option<i64>) -> Result<Vec<ServedCount>, StoreError> {
        let rows = sqlx::query(
            "SELECT r.run_id, 'model', l.model_id, r.served_model, r.provider, COUNT(*)
               FROM result r JOIN evaluation_run er ON er.id = r.run_id JOIN llm l ON l.id = er.llm_id
              WHERE r.response IS NOT NULL AND (?1 IS NULL OR r.run_id = ?1)
              GROUP BY r.run_id, l.model_id, r.served_model, r.provider
             UNION ALL
             SELECT r.run_id, 'judge', j.judge_model, j.served_model, j.provider, COUNT(*)
               FROM judgement j JOIN result r ON r.id = j.result_id
              WHERE j.response IS NOT NULL AND (?1 IS NULL OR r.run_id = ?1)
              GROUP BY r.run_id, j.judge_model, j.served_model, j.provider",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| ServedCount {
                run_id: r.get(0),
                call: r.get(1),
                requested: r.get(2),
                served_model: r.get(3),
                provider: r.get(4),
                replies: r.get(5),
            })
            .collect())
    }

    /// Provider errors by `error_type`, for one run or every run.
    pub async fn error_type_counts(
        &self,
        run_id: Option<i64>,
    ) -> Result<Vec<ErrorTypeCount>, StoreError> {
        let rows = sqlx::query(
            "SELECT run_id, error_type, COUNT(*) FROM result
              WHERE error_kind = 'provider' AND (?1 IS NULL OR run_id = ?1)
              GROUP BY run_id, error_type ORDER BY run_id, COUNT(*) DESC, error_type",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| ErrorTypeCount {
                run_id: r.get(0),
                error_type: r.get(1),
                results: r.get(2),
            })
            .collect())
    }

    /// Reasoning and cached prompt tokens per run (one run or every run).
    pub async fn token_details(
        &self,
        run_id: Option<i64>,
    ) -> Result<Vec<TokenDetails>, StoreError> {
        let rows = sqlx::query(
            "SELECT r.run_id, COALESCE(SUM(r.reasoning_tokens), 0), COALESCE(SUM(r.cached_prompt_tokens), 0),
                    COALESCE(SUM(j.rt), 0), COALESCE(SUM(j.ct), 0)
               FROM result r
               LEFT JOIN (SELECT result_id, SUM(reasoning_tokens) AS rt, SUM(cached_prompt_tokens) AS ct
                            FROM judgement GROUP BY result_id) j ON j.result_id = r.id
              WHERE (?1 IS NULL OR r.run_id = ?1)
              GROUP BY r.run_id ORDER BY r.run_id",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| TokenDetails {
                run_id: r.get(0),
                reasoning_tokens: r.get(1),
                cached_prompt_tokens: r.get(2),
                judge_reasoning_tokens: r.get(3),
                judge_cached_prompt_tokens: r.get(4),
            })
            .collect())
    }

    /// The mean completion tokens of `model`'s replies that were sent
    /// (not reused) and reported tokens, with how many there are; as a
    /// judge when `judge` is set.
    pub async fn mean_completion_tokens(
        &self,
        model: &str,
        judge: bool,
    ) -> Result<Option<(f64, i64)>, StoreError> {
        let sql = if judge {
            "SELECT AVG(completion_tokens), COUNT(*) FROM judgement
              WHERE judge_model = ? AND cached = 0 AND completion_tokens > 0"
        } else {
            "SELECT AVG(r.completion_tokens), COUNT(*)
               FROM result r JOIN evaluation_run er ON er.id = r.run_id JOIN llm l ON l.id = er.llm_id
              WHERE l.model_id = ? AND r.cached = 0 AND r.completion_tokens > 0"
        };
        let row = sqlx::query(sql).bind(model).fetch_one(&self.pool).await?;
        let n: i64 = row.get(1);
        Ok((n > 0).then(|| (row.get::<f64, _>(0), n)))
    }
}
