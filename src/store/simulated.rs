//! The user-simulator calls of persona conversations (issue 42), one row a
//! call: written as each arrives, before the tested model is asked, so a
//! resume reuses a paid call; found by request hash as a cache of every
//! simulated message; summed for `costs`.

use super::backend::{Tx, on, on_tx};
use super::decode::from_columns;
use super::{Store, StoreError};
use crate::domain::{SimulatedCall, SimulatorCost};

from_columns!(SimulatedCall {
    run_id,
    test_code,
    repeat_index,
    turn_index,
    user_model,
    request_hash,
    reply,
    stopped,
    prompt_tokens,
    completion_tokens,
    cost_usd,
    cached,
    served_model,
    generation_id,
});

const COLUMNS: &str = "run_id, test_code, repeat_index, turn_index, user_model, request_hash, reply, stopped, prompt_tokens, completion_tokens, cost_usd, cached, served_model, generation_id";

/// run, simulator, calls, cached calls, prompt and completion tokens, cost.
type CostRow = (i64, String, i64, i64, i64, i64, f64);

impl Store {
    /// Stores one simulator call, committed before this returns; a call
    /// stored before under the same exchange (a resume that simulates
    /// again after an earlier change) is replaced.
    pub async fn write_simulated(&self, c: &SimulatedCall) -> Result<(), StoreError> {
        let mut tx = Tx::write(&self.pool).await?;
        let sql = format!(
            "INSERT INTO simulated_turn ({COLUMNS}, endpoint) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
             ON CONFLICT (run_id, test_code, repeat_index, turn_index) DO UPDATE SET
               user_model = excluded.user_model, request_hash = excluded.request_hash, reply = excluded.reply,
               stopped = excluded.stopped, prompt_tokens = excluded.prompt_tokens,
               completion_tokens = excluded.completion_tokens, cost_usd = excluded.cost_usd,
               cached = excluded.cached, served_model = excluded.served_model,
               generation_id = excluded.generation_id, endpoint = excluded.endpoint"
        );
        let endpoint = self.endpoint.clone();
        on_tx!(&mut tx, |t| sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .bind(c.run_id)
            .bind(c.test_code.clone())
            .bind(c.repeat_index)
            .bind(c.turn_index)
            .bind(c.user_model.clone())
            .bind(c.request_hash.clone())
            .bind(c.reply.clone())
            .bind(i64::from(c.stopped))
            .bind(c.prompt_tokens)
            .bind(c.completion_tokens)
            .bind(if c.cost_usd.is_finite() {
                c.cost_usd
            } else {
                0.0
            })
            .bind(i64::from(c.cached))
            .bind(c.served_model.clone())
            .bind(c.generation_id.clone())
            .bind(endpoint.clone())
            .execute(&mut **t)
            .await?
            .rows_affected());
        tx.commit().await?;
        Ok(())
    }

    /// The simulator calls of one conversation of a run, in order.
    pub async fn simulated_of(
        &self,
        run_id: i64,
        test_code: &str,
        repeat: i64,
    ) -> Result<Vec<SimulatedCall>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM simulated_turn WHERE run_id = $1 AND test_code = $2 AND repeat_index = $3 ORDER BY turn_index"
        );
        Ok(on!(&self.pool, |pool| sqlx::query_as(sqlx::AssertSqlSafe(
            sql.clone()
        ))
        .bind(run_id)
        .bind(test_code)
        .bind(repeat)
        .fetch_all(pool)
        .await?))
    }

    /// A simulator call with the same request hash made against the same
    /// endpoint by any run, if any.
    pub async fn cached_simulated(
        &self,
        request_hash: &str,
    ) -> Result<Option<SimulatedCall>, StoreError> {
        let Some(endpoint) = &self.endpoint else {
            return Ok(None);
        };
        let sql = format!(
            "SELECT {COLUMNS} FROM simulated_turn WHERE request_hash = $1 AND endpoint = $2 LIMIT 1"
        );
        Ok(on!(&self.pool, |pool| sqlx::query_as(sqlx::AssertSqlSafe(
            sql.clone()
        ))
        .bind(request_hash)
        .bind(endpoint)
        .fetch_optional(pool)
        .await?))
    }

    /// What the user simulator cost, per run (of `run_id`, or every run)
    /// and simulator model.
    pub async fn simulator_costs(
        &self,
        run_id: Option<i64>,
    ) -> Result<Vec<SimulatorCost>, StoreError> {
        let rows: Vec<CostRow> = on!(&self.pool, |pool| {
            sqlx::query_as(
            "SELECT run_id, user_model, COUNT(*), COALESCE(SUM(cached), 0), COALESCE(SUM(prompt_tokens), 0),
                    COALESCE(SUM(completion_tokens), 0), COALESCE(SUM(cost_usd), 0.0)
             FROM simulated_turn WHERE ($1 IS NULL OR run_id = $1)
             GROUP BY run_id, user_model ORDER BY run_id, user_model"
        )
        .bind(run_id)
        .fetch_all(pool)
        .await?
        });
        Ok(rows
            .into_iter()
            .map(
                |(
                    run_id,
                    user_model,
                    calls,
                    cached,
                    prompt_tokens,
                    completion_tokens,
                    cost_usd,
                )| {
                    SimulatorCost {
                        run_id,
                        user_model,
                        calls,
                        cached,
                        prompt_tokens,
                        completion_tokens,
                        cost_usd,
                    }
                },
            )
            .collect())
    }
}
