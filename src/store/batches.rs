//! OpenRouter Batch API bookkeeping (issue 33): the batches a run submits
//! and the test cases each holds. The intent is written before the POST,
//! the batch id on the 202, status and counts on every poll, and what each
//! item became once its results are read: a resume after a kill polls what
//! is recorded and submits only what no live batch holds.

use std::collections::HashSet;

use super::backend::on;
use super::decode::from_columns;
use super::{Store, StoreError};
use crate::domain::{BatchItem, BatchRow, ItemOutcome};

from_columns!(BatchRow {
    id,
    run_id,
    phase,
    model,
    batch_key,
    round,
    state,
    remote_id,
    remote_status,
    total,
    completed,
    failed,
    cost_usd,
    estimate_usd,
    message,
    created_at,
    updated_at,
});
from_columns!(BatchItem {
    custom_id,
    test_code,
    repeat_index,
    criterion,
    judge_model,
    outcome,
});

const BATCH_COLUMNS: &str = "id, run_id, phase, model, batch_key, round, state, remote_id, remote_status, total, completed, failed, cost_usd, estimate_usd, message, created_at, updated_at";
const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

impl Store {
    /// Records a batch about to be posted, with its items, in one
    /// transaction: the intent that a resume finds if the process dies
    /// before the 202 is recorded.
    #[allow(clippy::too_many_arguments)]
    pub async fn record_batch_intent(
        &self,
        run_id: i64,
        phase: &str,
        model: &str,
        batch_key: &str,
        round: i64,
        estimate_usd: f64,
        items: &[BatchItem],
    ) -> Result<i64, StoreError> {
        on!(&self.pool, |pool, d| {
            let mut tx = pool.begin_with(d.begin_write()).await?;
            let id: i64 = sqlx::query_scalar(
            "INSERT INTO api_batch (run_id, phase, model, batch_key, round, state, total, estimate_usd)
             VALUES ($1, $2, $3, $4, $5, 'intent', $6, $7) RETURNING id",
        )
        .bind(run_id)
        .bind(phase)
        .bind(model)
        .bind(batch_key)
        .bind(round)
        .bind(items.len() as i64)
        .bind(estimate_usd)
        .fetch_one(&mut *tx)
        .await?;
            for it in items {
                sqlx::query(
                "INSERT INTO api_batch_item (batch_id, custom_id, test_code, repeat_index, criterion, judge_model)
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(id)
            .bind(&it.custom_id)
            .bind(&it.test_code)
            .bind(it.repeat_index)
            .bind(&it.criterion)
            .bind(&it.judge_model)
            .execute(&mut *tx)
            .await?;
            }
            tx.commit().await?;
            Ok(id)
        })
    }

    /// The 202 arrived: the batch's id and first status.
    pub async fn record_batch_submitted(
        &self,
        id: i64,
        remote_id: &str,
        status: &str,
    ) -> Result<(), StoreError> {
        on!(&self.pool, |pool, d| {
            sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE api_batch SET state = 'submitted', remote_id = $1, remote_status = $2, updated_at = {NOW} WHERE id = $3"
        )))
        .bind(remote_id)
        .bind(status)
        .bind(id)
        .execute(pool)
        .await?;
            Ok(())
        })
    }

    /// The batch will hold nothing more: its POST was refused or it ended
    /// without results (`refused`, `ended`: its items go out again), or its
    /// submission is uncertain (`abandoned`: its items are held, see
    /// `BatchRow::is_uncertain`).
    pub async fn record_batch_closed(
        &self,
        id: i64,
        state: &str,
        message: &str,
    ) -> Result<(), StoreError> {
        on!(&self.pool, |pool, d| {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE api_batch SET state = $1, message = $2, updated_at = {NOW} WHERE id = $3"
            )))
            .bind(state)
            .bind(message)
            .bind(id)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// What a poll saw: the status and counts; `completed` (with its
    /// `usage.cost`) once the batch completed, its results still to read.
    pub async fn record_batch_status(
        &self,
        id: i64,
        status: &str,
        counts: [i64; 3],
        completed: Option<Option<f64>>,
    ) -> Result<(), StoreError> {
        let (state_sql, cost) = match completed {
            Some(cost) => ("'completed'", cost),
            None => ("state", None),
        };
        let sql = format!(
            "UPDATE api_batch SET state = {state_sql}, remote_status = $1, total = $2, completed = $3, failed = $4,
               cost_usd = COALESCE($5, cost_usd), updated_at = {NOW} WHERE id = $6"
        );
        on!(&self.pool, |pool| sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(status)
            .bind(counts[0])
            .bind(counts[1])
            .bind(counts[2])
            .bind(cost)
            .bind(id)
            .execute(pool)
            .await?
            .rows_affected());
        Ok(())
    }

    /// Records what items of a batch became (written with or after their
    /// results, never before).
    pub async fn record_batch_items(
        &self,
        id: i64,
        outcomes: &[ItemOutcome],
    ) -> Result<(), StoreError> {
        on!(&self.pool, |pool, d| {
            if outcomes.is_empty() {
                return Ok(());
            }
            let mut tx = pool.begin_with(d.begin_write()).await?;
            for o in outcomes {
                sqlx::query(
                    "UPDATE api_batch_item SET outcome = $1, cost_usd = $2, cost_apportioned = $3
                 WHERE batch_id = $4 AND custom_id = $5",
                )
                .bind(o.outcome)
                .bind(o.cost_usd.filter(|c| c.is_finite()))
                .bind(i64::from(o.apportioned))
                .bind(id)
                .bind(&o.custom_id)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    /// Every result of a completed batch is read and stored.
    pub async fn record_batch_collected(&self, id: i64) -> Result<(), StoreError> {
        on!(&self.pool, |pool, d| {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE api_batch SET state = 'collected', updated_at = {NOW} WHERE id = $1"
            )))
            .bind(id)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// The batches of a run, oldest first.
    pub async fn run_batches(&self, run_id: i64) -> Result<Vec<BatchRow>, StoreError> {
        on!(&self.pool, |pool, d| {
            Ok(sqlx::query_as::<_, BatchRow>(sqlx::AssertSqlSafe(format!(
                "SELECT {BATCH_COLUMNS} FROM api_batch WHERE run_id = $1 ORDER BY id"
            )))
            .bind(run_id)
            .fetch_all(pool)
            .await?)
        })
    }

    /// Every recorded batch (for `runs`), by run then age.
    pub async fn all_batches(&self) -> Result<Vec<BatchRow>, StoreError> {
        on!(&self.pool, |pool, d| {
            Ok(sqlx::query_as::<_, BatchRow>(sqlx::AssertSqlSafe(format!(
                "SELECT {BATCH_COLUMNS} FROM api_batch ORDER BY run_id, id"
            )))
            .fetch_all(pool)
            .await?)
        })
    }

    /// The items of a batch.
    pub async fn batch_items(&self, id: i64) -> Result<Vec<BatchItem>, StoreError> {
        on!(&self.pool, |pool, d| {
            // In the order they were written: SQLite's rowid; PostgreSQL has
            // none, and the custom ids are numbered in that order.
            let sql = d.pick(
            "SELECT custom_id, test_code, repeat_index, criterion, judge_model, outcome FROM api_batch_item
             WHERE batch_id = $1 ORDER BY rowid",
            "SELECT custom_id, test_code, repeat_index, criterion, judge_model, outcome FROM api_batch_item
             WHERE batch_id = $1 ORDER BY length(custom_id), custom_id",
        );
            Ok(sqlx::query_as::<_, BatchItem>(sql)
                .bind(id)
                .fetch_all(pool)
                .await?)
        })
    }

    /// (test code, repeat) pairs of a run's model requests that a live
    /// batch holds and has not answered yet, or that a batch of uncertain
    /// submission holds (`intent`, `abandoned`: it may have been accepted).
    pub async fn held_cases(&self, run_id: i64) -> Result<HashSet<(String, i64)>, StoreError> {
        on!(&self.pool, |pool, d| {
            let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT i.test_code, i.repeat_index FROM api_batch_item i JOIN api_batch b ON b.id = i.batch_id
             WHERE b.run_id = $1 AND b.phase = 'model' AND b.state IN ('submitted', 'completed', 'intent', 'abandoned') AND i.outcome IS NULL",
        )
        .bind(run_id)
        .fetch_all(pool)
        .await?;
            Ok(rows.into_iter().collect())
        })
    }

    /// Sum of every batch's `usage.cost` in a run, and the estimates of
    /// its batches still in flight.
    pub async fn batch_spend(&self, run_id: i64) -> Result<(f64, f64), StoreError> {
        on!(&self.pool, |pool, d| {
            let (cost, in_flight): (f64, f64) = sqlx::query_as(
            "SELECT COALESCE(SUM(cost_usd), 0.0),
                    COALESCE(SUM(CASE WHEN state IN ('intent', 'submitted') THEN estimate_usd ELSE 0 END), 0.0)
             FROM api_batch WHERE run_id = $1",
        )
        .bind(run_id)
        .fetch_one(pool)
        .await?;
            Ok((cost, in_flight))
        })
    }
}
