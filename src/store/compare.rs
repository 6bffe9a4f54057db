//! The read behind `compare`: a run's results with only the columns scoring
//! needs (no prompt, reply, parsed or quality text, which `report` also
//! reads), streamed, so comparing twenty runs of 110,000 results reads little
//! more than it keeps.

use futures_util::{Stream, TryStreamExt};

use super::reads::{stored_from, stored_result};
use super::{Store, StoreError, StoredResult};

/// The columns of [`StoredResult`] that scoring reads; the text columns are NULL.
const SCORING_RESULTS: &str = concat!(
    "SELECT r.id, r.test_code, b.code, s.code, c.code, u.code, p.code, r.repeat_index,
       r.base_severity, r.difficulty, r.passed, r.error_kind, NULL, NULL, NULL, NULL ",
    stored_from!(),
    " ORDER BY r.id"
);

impl Store {
    /// A run's results for scoring only (`error`, `quality`, `response` and
    /// `parsed` left `None`), streamed in stored order.
    pub fn scoring_results(
        &self,
        run_id: i64,
    ) -> impl Stream<Item = Result<StoredResult, StoreError>> + '_ {
        sqlx::query(SCORING_RESULTS)
            .bind(run_id)
            .fetch(&self.pool)
            .map_ok(|row| stored_result(&row))
            .map_err(StoreError::from)
    }
}
