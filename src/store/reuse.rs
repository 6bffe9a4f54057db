//! Reads of what the reply cache spared (issue 30 #11): per run, how many
//! replies were reused from an identical earlier request and what those
//! replies cost when they were first paid for.

use std::collections::BTreeMap;

use super::decode::from_columns;
use super::{Store, StoreError};
use crate::domain::Reuse;

from_columns!(Reuse {
    replies,
    original_cost_usd
});

impl Store {
    /// [`Reuse`] of every run with a reused reply, by run id (`run_id`:
    /// only that run).
    pub async fn reuse(&self, run_id: Option<i64>) -> Result<BTreeMap<i64, Reuse>, StoreError> {
        // Kept with the run's totals (see totals.rs), so `runs` and `costs`
        // never read every result for it.
        let rows: Vec<ReuseRow> = self.per_run(reuse_sql, run_id).await?;
        Ok(rows.into_iter().map(|r| (r.run_id, r.reuse)).collect())
    }
}

/// A row of [`reuse_sql`].
#[derive(sqlx::FromRow)]
struct ReuseRow {
    run_id: i64,
    #[sqlx(flatten)]
    reuse: Reuse,
}

/// The statement of [`Store::reuse`] for one run or every run.
pub(super) fn reuse_sql(one_run: bool) -> String {
    format!(
        "SELECT run_id, SUM(cached_replies) AS replies, SUM(reused_original_usd) AS original_cost_usd
           FROM run_total {}
          GROUP BY run_id HAVING SUM(cached_replies) > 0",
        if one_run { "WHERE run_id = $1" } else { "" }
    )
}
