//! The query plans of the reads `runs`, `costs`, `report` and `export`
//! make for one run (issue 31): with a million results, a statement that
//! scans the whole `result` table (or its judgements) instead of searching
//! the run's rows costs seconds per run. `tests/it/totals.rs` fails on any
//! such scan; the statements are the ones the commands run, not copies.

use super::backend::{Dialect, on};
use super::decode::Row as _;
use super::{Store, StoreError, compare, reads, results, reuse, review, runs, served, totals};
use crate::domain::{ReadPlan, Which};

/// The tables whose full scan grows with every result ever stored, and
/// the aliases the store's statements give them (a plan names the alias).
const LARGE: [&str; 11] = [
    "result",
    "r",
    "o",
    "judgement",
    "j",
    "judge_vote",
    "v",
    "discarded_charge",
    "d",
    "human_label",
    "h",
];

impl Store {
    /// Each read statement of one run, by name, with its plan (SQLite's
    /// `EXPLAIN QUERY PLAN` lines) and whether it scans a large table.
    pub async fn read_plans(&self) -> Result<Vec<ReadPlan>, StoreError> {
        on!(&self.pool, |pool, d| {
            let statements: Vec<(&str, String)> = vec![
                ("runs / run", runs::run_sql()),
                ("costs: scenarios", reads::scenario_spend_sql(true)),
                ("costs: discarded", reads::discarded_spend_sql(true)),
                ("costs: served models", served::served_counts_sql(true)),
                ("costs: error types", served::error_type_counts_sql(true)),
                ("costs: tokens", served::token_details_sql(true)),
                ("costs: judges", review::judge_spend_sql(true)),
                ("runs / costs: cache reuse", reuse::reuse_sql(true)),
                (
                    "report: results",
                    reads::results_sql(Which::Run(0), Dialect::Sqlite),
                ),
                (
                    "report: failed results",
                    reads::results_sql(Which::FailedOf(0), Dialect::Sqlite),
                ),
                ("report: criteria", reads::CRITERION_COUNTS.into()),
                ("report: scoring", compare::SCORING_RESULTS.into()),
                ("report: labels", review::LABELS.into()),
                (
                    "report: labelled judgements",
                    review::LABELLED_JUDGEMENTS.into(),
                ),
                ("report: votes", review::VOTES.into()),
                ("export", reads::results_sql(Which::Run(0), Dialect::Sqlite)),
                ("run: the reply cache", results::CACHED_REPLY.into()),
            ];
            // The totals every write adds, for the rows it inserted.
            let written = totals::Affected::After(0).condition();
            let mut statements = statements;
            for (i, sql) in totals::statements("", &written, Dialect::Sqlite)
                .into_iter()
                .enumerate()
            {
                let name = [
                    "write: run totals",
                    "write: served",
                    "write: error types",
                    "write: judges",
                ][i];
                statements.push((name, sql));
            }
            let mut out = Vec::with_capacity(statements.len());
            for (name, sql) in statements {
                // Parameters left unbound are NULL: a plan does not depend on
                // the values (no statistics are gathered).
                let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
                    .fetch_all(pool)
                    .await?;
                let lines: Vec<String> = rows.iter().map(|r| r.val::<String>("detail")).collect();
                out.push(plan_of(name, lines, &LARGE));
            }
            Ok(out)
        })
    }
}

/// A statement's plan lines, with those that scan one of the `large`
/// tables (or aliases) whole.
pub(super) fn plan_of(name: &str, lines: Vec<String>, large: &[&str]) -> ReadPlan {
    let scans = lines
        .iter()
        .filter(|l| {
            let mut words = l.split_whitespace();
            words.next() == Some("SCAN") && words.next().is_some_and(|t| large.contains(&t))
        })
        .cloned()
        .collect();
    ReadPlan {
        name: name.to_string(),
        plan: lines,
        scans,
    }
}
