//! One budget for a batch that several processes run (the team store,
//! issue 34): `team_budget` holds the batch's `--max-cost`, what it spent
//! and what its attempts in flight reserved. Each reservation and each
//! settlement is one atomic UPDATE, so processes together never commit
//! more than the budget (a first attempt: while under it; a retry: only if
//! its expected cost fits), overshooting it by at most what is in flight.

use super::backend::on;
use super::{Store, StoreError};
use crate::domain::BudgetState;

impl Store {
    /// Opens the batch's budget. `fresh` (a new batch, or a resume, when no
    /// process of it is left): its maximum and spend are set, and the
    /// reservations of processes gone are dropped. Otherwise (a joiner) the
    /// row the first process opened is kept as it is.
    pub async fn open_team_budget(
        &self,
        batch: &str,
        max_usd: f64,
        spent_usd: f64,
        fresh: bool,
    ) -> Result<(), StoreError> {
        let sql = if fresh {
            "INSERT INTO team_budget (batch, max_usd, spent_usd, reserved_usd) VALUES ($1, $2, $3, 0.0)
             ON CONFLICT (batch) DO UPDATE SET max_usd = excluded.max_usd, spent_usd = excluded.spent_usd, reserved_usd = 0.0"
        } else {
            "INSERT INTO team_budget (batch, max_usd, spent_usd, reserved_usd) VALUES ($1, $2, $3, 0.0)
             ON CONFLICT (batch) DO NOTHING"
        };
        on!(&self.pool, |pool| {
            sqlx::query(sql)
                .bind(batch)
                .bind(max_usd)
                .bind(spent_usd)
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    /// Reserves `usd` for one attempt if it may be sent (`retry`: only if it
    /// fits; a first attempt: while the budget is not reached). Ok(state
    /// after) when reserved, Err(state) when refused.
    pub async fn reserve_team_budget(
        &self,
        batch: &str,
        usd: f64,
        retry: bool,
    ) -> Result<Result<BudgetState, BudgetState>, StoreError> {
        let sql = if retry {
            "UPDATE team_budget SET reserved_usd = reserved_usd + $2
              WHERE batch = $1 AND spent_usd + reserved_usd + $2 <= max_usd
              RETURNING spent_usd, reserved_usd, max_usd"
        } else {
            "UPDATE team_budget SET reserved_usd = reserved_usd + $2
              WHERE batch = $1 AND spent_usd + reserved_usd < max_usd
              RETURNING spent_usd, reserved_usd, max_usd"
        };
        on!(&self.pool, |pool| {
            let took: Option<BudgetState> = sqlx::query_as(sql)
                .bind(batch)
                .bind(usd)
                .fetch_optional(pool)
                .await?;
            if let Some(s) = took {
                return Ok(Ok(s));
            }
            let now: Option<BudgetState> = sqlx::query_as(
                "SELECT spent_usd, reserved_usd, max_usd FROM team_budget WHERE batch = $1",
            )
            .bind(batch)
            .fetch_optional(pool)
            .await?;
            now.map(Err).ok_or_else(|| {
                StoreError::NotFound(format!(
                    "the budget of batch {batch} is not in the database"
                ))
            })
        })
    }

    /// Settles an attempt: `counted` spent in place of the `reserved`.
    pub async fn settle_team_budget(
        &self,
        batch: &str,
        reserved: f64,
        counted: f64,
    ) -> Result<BudgetState, StoreError> {
        on!(&self.pool, |pool| {
            Ok(sqlx::query_as(
                "UPDATE team_budget SET spent_usd = spent_usd + $3,
                        reserved_usd = CASE WHEN reserved_usd - $2 > 0.0 THEN reserved_usd - $2 ELSE 0.0 END
                  WHERE batch = $1 RETURNING spent_usd, reserved_usd, max_usd",
            )
            .bind(batch)
            .bind(reserved)
            .bind(counted)
            .fetch_one(pool)
            .await?)
        })
    }
}
