//! The read behind `compare`: a run's results with only the columns scoring
//! needs (no prompt, reply, parsed or quality text, which `report` also
//! reads). SQLite packs them into one JSON array per run, so twenty runs of
//! 110,000 results cross the driver as twenty rows: row by row, the driver's
//! per-row cost, not SQLite, was most of `compare`'s time (BENCHMARKS.md).

use serde::Deserialize;

use super::backend::on;
use super::{Store, StoreError};
use crate::domain::{ErrorKind, StoredResult};

/// The rows both statements below pack: a run's results and their codes.
macro_rules! scoring_from {
    () => {
        "
  FROM result r
  JOIN scenario s ON s.id = r.scenario_id
  JOIN behaviour b ON b.id = s.behaviour_id
  JOIN condition c ON c.id = r.condition_id
  LEFT JOIN user_context u ON u.id = r.user_context_id
  JOIN perturbation p ON p.id = r.perturbation_id
  WHERE r.run_id = $1"
    };
}

/// One JSON array per run; each element lists the [`StoredResult`] columns
/// scoring reads, in the order of [`Packed`].
// A whole-number REAL goes as an integer: the same value to serde, and
// SQLite writes integers several times faster than floats.
pub(super) const SCORING_RESULTS: &str = concat!(
    "SELECT json_group_array(json_array(r.test_code, b.code, s.code, c.code, u.code, p.code,
       r.repeat_index,
       CASE WHEN r.base_severity = CAST(r.base_severity AS INTEGER) THEN CAST(r.base_severity AS INTEGER) ELSE r.base_severity END,
       CASE WHEN r.difficulty = CAST(r.difficulty AS INTEGER) THEN CAST(r.difficulty AS INTEGER) ELSE r.difficulty END,
       r.passed, r.matched, r.error_kind))
",
    scoring_from!()
);

/// [`SCORING_RESULTS`] in PostgreSQL's words (an empty run: `[]`, as SQLite's).
const SCORING_RESULTS_POSTGRES: &str = concat!(
    "SELECT COALESCE(json_agg(json_build_array(r.test_code, b.code, s.code, c.code, u.code, p.code,
       r.repeat_index,
       CASE WHEN r.base_severity = CAST(r.base_severity AS BIGINT) THEN CAST(r.base_severity AS BIGINT)::text::json ELSE to_json(r.base_severity) END,
       CASE WHEN r.difficulty = CAST(r.difficulty AS BIGINT) THEN CAST(r.difficulty AS BIGINT)::text::json ELSE to_json(r.difficulty) END,
       r.passed, r.matched, r.error_kind))::text, '[]')
",
    scoring_from!()
);

/// One element of the array.
#[derive(Deserialize)]
struct Packed(
    String,
    String,
    String,
    String,
    Option<String>,
    String,
    i64,
    f64,
    f64,
    i64,
    Option<i64>,
    Option<ErrorKind>,
);

impl Store {
    /// A run's results for scoring only, in no particular order.
    pub async fn scoring_results(&self, run_id: i64) -> Result<Vec<StoredResult>, StoreError> {
        on!(&self.pool, |pool, d| {
            let packed: Option<String> =
                sqlx::query_scalar(d.pick(SCORING_RESULTS, SCORING_RESULTS_POSTGRES))
                    .bind(run_id)
                    .fetch_one(pool)
                    .await?;
            let Some(packed) = packed else {
                return Ok(Vec::new());
            };
            let rows: Vec<Packed> = serde_json::from_str(&packed).map_err(|e| StoreError::Integrity {
            message: format!(
                "the results of run {run_id}, as SQLite packs them, are not the JSON expected: {e}"
            ),
            source: Some(Box::new(e)),
        })?;
            Ok(rows
                .into_iter()
                .map(|p| StoredResult {
                    test_code: p.0,
                    behaviour: p.1,
                    scenario: p.2,
                    condition: p.3,
                    user_context: p.4,
                    perturbation: p.5,
                    repeat_index: p.6,
                    base_severity: p.7,
                    difficulty: p.8,
                    passed: p.9 != 0,
                    matched: p.10.map(|m| m != 0),
                    error_kind: p.11,
                })
                .collect())
        })
    }
}
