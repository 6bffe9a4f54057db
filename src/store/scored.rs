//! The report's one pass over a run (issue 45): each result's scoring
//! columns and quality scores, read from `result` alone. The codes come
//! from the small tables once, by id, instead of five joins per row, and
//! no reply, prompt or judgement is read.

use std::collections::HashMap;

use futures_util::TryStreamExt;

use super::backend::on;
use super::decode::Row;
use super::{Store, StoreError};
use crate::domain::{CodeBook, QualityScores, StoredResult};

/// The rows of the runs `{runs}` (a list of `$3`, `$4`…) between ids `$1`
/// and `$2`, in id order. A range of the primary key, not the run's index:
/// read through that index, the rows came back in another order and SQLite
/// sorted a run's worth of them in a temporary B-tree (tens of megabytes
/// written to disk by a read command); the `+` keeps the planner off it.
/// The runs of a batch are written side by side, so their rows share pages
/// and the range reads each page once for all of them.
const SCORED_ROWS: &str =
    "SELECT run_id, id, test_code, repeat_index, scenario_id, condition_id, user_context_id,
        perturbation_id, base_severity, difficulty, passed, matched, error_kind, quality
   FROM result WHERE id BETWEEN $1 AND $2 AND +run_id IN ({runs}) ORDER BY id";

/// A code a result row points at; a missing one is a broken database.
fn code<'a>(map: &'a HashMap<i64, String>, id: i64, table: &str) -> Result<&'a str, StoreError> {
    map.get(&id).map(String::as_str).ok_or_else(|| {
        StoreError::Query(sqlx::Error::Protocol(format!(
            "a result points at {table} {id}, which is not in the database"
        )))
    })
}

/// `to = from`, reusing `to`'s allocation.
fn set(to: &mut String, from: &str) {
    to.clear();
    to.push_str(from);
}

impl Store {
    /// Every result of these runs in id order (the order the report's sums
    /// are taken in), in one pass, each handed to `each` with its run id, its
    /// id and its quality scores and then dropped: memory stays flat however
    /// large the runs.
    pub async fn scored_rows<F>(&self, runs: &[i64], mut each: F) -> Result<(), StoreError>
    where
        F: FnMut(i64, i64, &StoredResult, Option<QualityScores>) + Send,
    {
        if runs.is_empty() {
            return Ok(());
        }
        let codes = self.code_book().await?;
        // `$1`… for the ids alone, `$3`… after the range's two.
        let marks = |from: usize| -> String {
            let m: Vec<String> = (0..runs.len()).map(|i| format!("${}", i + from)).collect();
            m.join(", ")
        };
        let range = format!(
            "SELECT MIN(id) AS lo, MAX(id) AS hi FROM result WHERE run_id IN ({})",
            marks(1)
        );
        let sql = SCORED_ROWS.replace("{runs}", &marks(3));
        on!(&self.pool, |pool| {
            let mut q = sqlx::query(sqlx::AssertSqlSafe(range.clone()));
            for id in runs {
                q = q.bind(*id);
            }
            let row = q.fetch_one(pool).await?;
            let (Some(lo), Some(hi)) =
                (row.col::<Option<i64>>("lo")?, row.col::<Option<i64>>("hi")?)
            else {
                return Ok(());
            };
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .bind(lo)
                .bind(hi);
            for id in runs {
                q = q.bind(*id);
            }
            let mut rows = q.fetch(pool);
            // One result refilled per row: its strings keep their
            // allocations, so a row costs no allocation of its own.
            let mut r = StoredResult::default();
            while let Some(row) = rows.try_next().await? {
                let scenario_id: i64 = row.col("scenario_id")?;
                let (behaviour, scenario) = codes.scenarios.get(&scenario_id).ok_or_else(|| {
                    StoreError::Query(sqlx::Error::Protocol(format!(
                        "a result points at scenario {scenario_id}, which is not in the database"
                    )))
                })?;
                set(&mut r.behaviour, behaviour);
                set(&mut r.scenario, scenario);
                set(
                    &mut r.test_code,
                    sqlx::Row::try_get::<&str, _>(&row, "test_code")?,
                );
                set(
                    &mut r.condition,
                    code(&codes.conditions, row.col("condition_id")?, "condition")?,
                );
                set(
                    &mut r.perturbation,
                    code(
                        &codes.perturbations,
                        row.col("perturbation_id")?,
                        "perturbation",
                    )?,
                );
                match row.col::<Option<i64>>("user_context_id")? {
                    Some(id) => {
                        let c = code(&codes.user_contexts, id, "user context")?;
                        match &mut r.user_context {
                            Some(kept) => set(kept, c),
                            None => r.user_context = Some(c.to_string()),
                        }
                    }
                    None => r.user_context = None,
                }
                r.repeat_index = row.col("repeat_index")?;
                r.base_severity = row.col("base_severity")?;
                r.difficulty = row.col("difficulty")?;
                r.passed = row.col("passed")?;
                r.matched = row.col("matched")?;
                r.error_kind = row.col("error_kind")?;
                let quality = sqlx::Row::try_get::<Option<&str>, _>(&row, "quality")?
                    .and_then(|s| serde_json::from_str(s).ok());
                each(row.col("run_id")?, row.col("id")?, &r, quality);
            }
            Ok(())
        })
    }

    /// The codes of every seeded row by id, as [`Store::scored_rows`]
    /// names a row's pieces (a run's analysis kept as it is written reads
    /// its results with the same names).
    pub async fn code_book(&self) -> Result<CodeBook, StoreError> {
        on!(&self.pool, |pool| {
            let mut codes = CodeBook::default();
            for (table, map) in [
                ("condition", &mut codes.conditions),
                ("user_context", &mut codes.user_contexts),
                ("perturbation", &mut codes.perturbations),
            ] {
                let sql = format!("SELECT id, code FROM {table}");
                for row in sqlx::query(sqlx::AssertSqlSafe(sql))
                    .fetch_all(pool)
                    .await?
                {
                    map.insert(row.col("id")?, row.col("code")?);
                }
            }
            let scenarios = sqlx::query(
                "SELECT s.id, b.code AS behaviour, s.code FROM scenario s JOIN behaviour b ON b.id = s.behaviour_id",
            )
            .fetch_all(pool)
            .await?;
            for row in scenarios {
                codes
                    .scenarios
                    .insert(row.col("id")?, (row.col("behaviour")?, row.col("code")?));
            }
            Ok(codes)
        })
    }
}
