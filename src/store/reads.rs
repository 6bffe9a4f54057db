//! Reads: every SELECT that reports, costs, export and `runs` need, as
//! typed rows. Nothing outside the store runs SQL of its own.

use super::runs::runs_query;
use super::{RunRow, Store, StoreError};

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
        sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(format!(
            "{} WHERE er.id = ?",
            runs_query("WHERE r.run_id = ?")
        )))
        .bind(run_id)
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await?
        .map(|r| r.settle(&self.owner))
        .ok_or_else(|| {
            StoreError::NotFound(format!("no run with id {run_id} (see `helmbench runs`)"))
        })
    }
}
