//! What a completed run answered (issue 31): a rerun of a batch asks it
//! before it creates anything, so a rerun that would only copy stored
//! replies into a new run is refused instead.
//!
//! Plain SQL with `$N` placeholders and no SQLite-only function, so it
//! reads the same on PostgreSQL.

use std::collections::HashSet;

use super::backend::on;
use super::{Store, StoreError};

impl Store {
    /// The request hashes of run `run_id`'s results that were answered at
    /// this handle's endpoint: stored without a provider error or a judge
    /// error (what a resume would send or judge again counts as not
    /// answered; a block, a refusal or a reply outside the schema is the
    /// answer). `None` for a handle without an endpoint, which answers
    /// nothing, as it reuses no cached reply.
    pub async fn answered_requests(
        &self,
        run_id: i64,
    ) -> Result<Option<HashSet<String>>, StoreError> {
        let Some(endpoint) = &self.endpoint else {
            return Ok(None);
        };
        let hashes: Vec<String> = on!(&self.pool, |pool| sqlx::query_scalar(
            "SELECT request_hash FROM result
              WHERE run_id = $1 AND endpoint = $2
                AND (error_kind IS NULL OR error_kind NOT IN ('provider', 'judge'))",
        )
        .bind(run_id)
        .bind(endpoint)
        .fetch_all(pool)
        .await?);
        Ok(Some(hashes.into_iter().collect()))
    }
}
