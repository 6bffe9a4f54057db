//! Kept analyses (issue 45): a completed run's report data, stored once
//! so `report` reads it instead of scoring the run's results again. The
//! store only keeps and returns the text under its key; what the key
//! covers and when it is written is `crate::report::kept`'s.

use super::backend::on;
use super::{Store, StoreError};

impl Store {
    /// What a kept analysis of `run_id` depends on in the store: the run's
    /// state ([`Store::run_state`]: status, end, highest result id, every
    /// kept total by scenario), the number and the sum of its result ids (a
    /// result deleted and written again, as a resume or a re-judge does,
    /// changes them even where the highest id comes back), and the number
    /// of its conversations' turns.
    pub async fn analysis_state(&self, run_id: i64) -> Result<String, StoreError> {
        let state = self.run_state(run_id).await?;
        let results: String = on!(&self.pool, |pool| {
            sqlx::query_scalar(
                "SELECT CAST(COUNT(*) AS TEXT) || ':' || CAST(COALESCE(SUM(id), 0) AS TEXT) || ':' ||
                        CAST((SELECT COUNT(*) FROM turn t WHERE t.run_id = $1) AS TEXT)
                   FROM result WHERE run_id = $1",
            )
            .bind(run_id)
            .fetch_one(pool)
            .await?
        });
        Ok(format!("{state}|{results}"))
    }

    /// The kept analysis of `run_id`, with the key it was kept under.
    pub async fn kept_analysis(&self, run_id: i64) -> Result<Option<(String, String)>, StoreError> {
        Ok(on!(&self.pool, |pool| {
            sqlx::query_as("SELECT analysis_key, body FROM kept_analysis WHERE run_id = $1")
                .bind(run_id)
                .fetch_optional(pool)
                .await?
        }))
    }

    /// Keeps `body` as the analysis of `run_id` under `key`, in place of
    /// any kept before.
    pub async fn keep_analysis(
        &self,
        run_id: i64,
        key: &str,
        body: &str,
    ) -> Result<(), StoreError> {
        on!(&self.pool, |pool| {
            sqlx::query(
                "INSERT INTO kept_analysis (run_id, analysis_key, body) VALUES ($1, $2, $3)
                 ON CONFLICT (run_id) DO UPDATE SET analysis_key = excluded.analysis_key,
                     body = excluded.body, created_at = excluded.created_at",
            )
            .bind(run_id)
            .bind(key)
            .bind(body)
            .execute(pool)
            .await?;
        });
        Ok(())
    }
}
