//! Runs that have nothing left to do (issue 31): resuming a completed run
//! used to claim it and rewrite its completion time; now it leaves the
//! database as it is and says so.
//!
//! A fresh run of a batch already run (cache on) still copies the earlier
//! replies into a new run: deciding it is "the same batch" from the
//! recorded settings alone would miss what they do not record (the
//! endpoint, a judge's models.yml entry), and silently keeping old answers
//! for a changed request is worse than the bytes.

use crate::domain::RunRecord;
use crate::domain::RunStatus;
use crate::store::{Store, StoreError};

/// The run `run_id` when a resume would find nothing to do: completed,
/// every planned test case stored, no provider or judge error to send or
/// judge again (nor, with `--retry-blocked`, a blocked or refused case),
/// nothing kept in a pending file.
pub(super) async fn resume_has_nothing_to_do(
    store: &Store,
    run_id: i64,
    planned: usize,
    retry_blocked: bool,
) -> Result<Option<RunRecord>, StoreError> {
    let row = store.run(run_id).await?;
    Ok(finished(store, &row, planned, retry_blocked).then_some(row))
}

fn finished(store: &Store, row: &RunRecord, planned: usize, retry_blocked: bool) -> bool {
    row.status == RunStatus::Completed
        && row.test_cases == planned as i64
        && row.provider_errors == 0
        && row.judge_errors == 0
        && !(retry_blocked && row.blocked + row.refused > 0)
        && !store.pending_path(row.run_id).is_some_and(|p| p.exists())
        && !store.log_path(row.run_id).is_some_and(|p| p.exists())
}
