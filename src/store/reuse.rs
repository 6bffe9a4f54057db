//! Reads of what the reply cache spared (issue 30 #11): per run, how many
//! replies were reused from an identical earlier request and what those
//! replies cost when they were first paid for.

use std::collections::BTreeMap;

use sqlx::Row;

use super::{Store, StoreError};

/// Replies one run reused from the cache, and what they first cost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reuse {
    pub replies: i64,
    /// The provider-reported cost of the paid replies they copy (fee plus
    /// BYOK upstream, as budgets count); 0 for replies whose first answer
    /// had an unknown cost.
    pub original_cost_usd: f64,
}

impl Store {
    /// [`Reuse`] of every run with a reused reply, by run id (`run_id`:
    /// only that run).
    pub async fn reuse(&self, run_id: Option<i64>) -> Result<BTreeMap<i64, Reuse>, StoreError> {
        // The reply a cached result copies: the first paid one of the same
        // request at the same endpoint, as `cached_reply` picks it.
        let rows = sqlx::query(
            "SELECT r.run_id, COUNT(*),
                    COALESCE(SUM((SELECT o.cost_usd + o.byok_cost_usd FROM result o
                                  WHERE o.request_hash = r.request_hash AND o.endpoint IS r.endpoint
                                    AND o.cached = 0 AND o.response IS NOT NULL
                                  ORDER BY o.id LIMIT 1)), 0.0)
             FROM result r
             WHERE r.cached = 1 AND (?1 IS NULL OR r.run_id = ?1)
             GROUP BY r.run_id",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get::<i64, _>(0),
                    Reuse {
                        replies: r.get(1),
                        original_cost_usd: r.get(2),
                    },
                )
            })
            .collect())
    }
}
