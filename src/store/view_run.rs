//! What the view's Run page keys its cached report by (issue 32): the
//! run's state, read from the totals kept as results are written, so
//! telling whether `report`'s numbers for a run are still current costs a
//! few rows, not the 3 s of computing them again.

use super::backend::on;
use super::{Store, StoreError};

impl Store {
    /// A string that changes whenever the results of `run_id` do: the
    /// run's status and end, every kept total of each of its scenarios
    /// (counts by outcome, evaluations, costs), and its highest result id
    /// (a result deleted and written again, as a resume does, has a new
    /// one). Equal strings: `report` would print the same numbers.
    pub async fn run_state(&self, run_id: i64) -> Result<String, StoreError> {
        on!(&self.pool, |pool, d| {
            let state: Option<String> = sqlx::query_scalar(
            "SELECT er.status || '|' || COALESCE(er.completed_at, '') || '|' ||
                    (SELECT COALESCE(MAX(r.id), 0) FROM result r WHERE r.run_id = er.id) || '|' ||
                    COALESCE((SELECT group_concat(x, ';') FROM (
                      SELECT t.scenario_id || ':' || t.test_cases || ':' || t.passed || ':' ||
                             t.evaluations || ':' || t.passed_evaluations || ':' || t.format_failures || ':' ||
                             t.judge_errors || ':' || t.provider_errors || ':' || t.blocked || ':' ||
                             t.refused || ':' || t.cached_replies || ':' || t.cost_usd || ':' ||
                             t.judge_cost_usd || ':' || t.cost_unknown || ':' || t.judge_cost_unknown || ':' ||
                             t.discarded_model_usd || ':' || t.discarded_judge_usd AS x
                        FROM run_total t WHERE t.run_id = er.id ORDER BY t.scenario_id) k), '')
               FROM evaluation_run er WHERE er.id = $1",
        )
        .bind(run_id)
        .fetch_optional(pool)
        .await?;
            state.ok_or_else(|| {
                StoreError::NotFound(format!("no run with id {run_id} (see `helmbench runs`)"))
            })
        })
    }
}
