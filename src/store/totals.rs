//! Per-run totals kept as results are written (issue 31): `runs`, `costs`
//! and the report's headers read a few rows per run instead of every
//! result.
//!
//! Every statement that adds or removes results calls [`apply`] in its own
//! transaction: before a delete with the sign -1 over the rows it is about
//! to delete, after an insert with +1 over the rows it added. Both use one
//! statement per table that computes what a set of results contributes, so
//! a total always means exactly what a recount would say
//! ([`Store::recount_mismatches`] checks it). Discarded charges, which are
//! only ever added, are kept by a trigger (see the migration).

use super::backend::{Arg, Dialect, Tx, bind_args, on, on_tx};
use super::{Store, StoreError};

/// The migration that added the totals (and the rebuild marker).
const MIGRATION: i64 = 20261125000003;

/// Every kept table.
const TABLES: [&str; 4] = [
    "run_total",
    "run_served_total",
    "run_error_total",
    "run_judge_total",
];

/// Results whose contribution is added or removed.
pub(super) enum Affected<'a> {
    /// Every result with an id above this one (the rows a transaction
    /// inserted after reading the highest id under its write lock).
    After(i64),
    /// A run's results with one of the error kinds (`clear_provider_errors`).
    RunKinds { run_id: i64, kinds: &'a [&'a str] },
    /// The judge-error result of one test case that a resume replaces.
    JudgeError {
        run_id: i64,
        test_code: &'a str,
        repeat_index: i64,
    },
    /// Every result (the rebuild and the recount).
    All,
}

impl Affected<'_> {
    /// The condition on `result r` (only constants: values are bound).
    pub(super) fn condition(&self) -> String {
        match self {
            Affected::After(_) => "r.id > $1".into(),
            Affected::RunKinds { kinds, .. } => {
                // Numbered: the condition appears twice in a statement.
                let marks: Vec<String> = (0..kinds.len()).map(|i| format!("${}", i + 2)).collect();
                let marks = marks.join(", ");
                format!("r.run_id = $1 AND r.error_kind IN ({marks})")
            }
            Affected::JudgeError { .. } => {
                "r.run_id = $1 AND r.test_code = $2 AND r.repeat_index = $3 AND r.error_kind = 'judge'"
                    .into()
            }
            Affected::All => "TRUE".into(),
        }
    }

    /// The values of the condition's `$1`, `$2`…, in order.
    fn values(&self) -> Vec<Arg> {
        match self {
            Affected::After(id) => vec![Arg::from(*id)],
            Affected::RunKinds { run_id, kinds } => std::iter::once(Arg::from(*run_id))
                .chain(kinds.iter().map(|k| Arg::from(*k)))
                .collect(),
            Affected::JudgeError {
                run_id,
                test_code,
                repeat_index,
            } => vec![
                Arg::from(*run_id),
                Arg::from(*test_code),
                Arg::from(*repeat_index),
            ],
            Affected::All => vec![],
        }
    }
}

/// The counted columns of `run_total`, as (column, expression over `r`, a
/// result, and `jr`, its judgements summed) in one place: the insert, the
/// upsert and the recount are all built from this list.
const RUN_TOTAL: &[(&str, &str)] = &[
    ("test_cases", "COUNT(*)"),
    ("passed", "SUM(r.passed)"),
    // An mcsqe result counts one evaluation per criterion, any other one.
    (
        "evaluations",
        "SUM(CASE WHEN jr.n > 1 THEN jr.n ELSE 1 END)",
    ),
    (
        "passed_evaluations",
        "SUM(CASE WHEN jr.n > 1 THEN jr.np ELSE r.passed END)",
    ),
    (
        "format_failures",
        "SUM(CASE WHEN r.error_kind = 'format' THEN 1 ELSE 0 END)",
    ),
    (
        "judge_errors",
        "SUM(CASE WHEN r.error_kind = 'judge' THEN 1 ELSE 0 END)",
    ),
    (
        "provider_errors",
        "SUM(CASE WHEN r.error_kind = 'provider' THEN 1 ELSE 0 END)",
    ),
    (
        "blocked",
        "SUM(CASE WHEN r.error_kind = 'blocked' THEN 1 ELSE 0 END)",
    ),
    (
        "refused",
        "SUM(CASE WHEN r.error_kind = 'refused' THEN 1 ELSE 0 END)",
    ),
    ("cached_replies", "SUM(r.cached)"),
    // The reply a cached result copies: the first paid one of the same
    // request at the same endpoint stored before it, as `cached_reply`
    // picks it (before it: a later paid copy does not change the figure).
    // A resume that judges a stored unjudged reply again retires that row
    // and keeps its cost as a discarded charge: then the charge is what
    // the reused reply first cost.
    (
        "reused_original_usd",
        concat!("SUM(CASE WHEN r.cached = 1 THEN COALESCE(
           (SELECT o.cost_usd + o.byok_cost_usd FROM result o
             WHERE substr(o.request_hash, 1, 16) = substr(r.request_hash, 1, 16) AND o.request_hash || '' = r.request_hash
               AND o.endpoint IS NOT DISTINCT FROM r.endpoint
               AND o.id < r.id AND o.cached = 0 AND o.response IS NOT NULL
             ORDER BY o.id LIMIT 1),
           (SELECT d.cost_usd FROM discarded_charge d
             WHERE d.run_id = r.run_id AND d.test_code = r.test_code AND d.repeat_index = r.repeat_index
               AND d.call = 'model' AND d.reason = '", retired_reason!(), "'
             ORDER BY d.id DESC LIMIT 1)) END)"),
    ),
    ("cost_usd", "SUM(r.cost_usd)"),
    ("byok_cost_usd", "SUM(r.byok_cost_usd)"),
    (
        "upstream_cost_usd",
        "SUM(COALESCE(r.upstream_cost_usd, 0.0))",
    ),
    ("upstream_replies", "COUNT(r.upstream_cost_usd)"),
    ("cost_unknown", "SUM(r.cost_unknown)"),
    ("prompt_tokens", "SUM(r.prompt_tokens)"),
    ("completion_tokens", "SUM(r.completion_tokens)"),
    ("reasoning_tokens", "SUM(r.reasoning_tokens)"),
    ("cached_prompt_tokens", "SUM(r.cached_prompt_tokens)"),
    ("judge_cost_usd", "SUM(jr.cost)"),
    ("judge_byok_cost_usd", "SUM(jr.byok)"),
    ("judge_calls", "SUM(jr.calls)"),
    ("judge_cached", "SUM(jr.cached)"),
    ("judge_cost_unknown", "SUM(jr.unknown)"),
    ("judge_prompt_tokens", "SUM(jr.pt)"),
    ("judge_completion_tokens", "SUM(jr.ct)"),
    ("judge_reasoning_tokens", "SUM(jr.rt)"),
    ("judge_cached_prompt_tokens", "SUM(jr.cpt)"),
];

/// What a set of results (`{cond}`) adds to `run_total`, times `?9`
/// (the sign), per run and scenario.
fn run_total_sql(table: &str, cond: &str, run: &str) -> String {
    let cols: Vec<&str> = RUN_TOTAL.iter().map(|(c, _)| *c).collect();
    let exprs: Vec<String> = RUN_TOTAL
        .iter()
        .map(|(_, e)| format!("$9 * COALESCE({e}, 0)"))
        .collect();
    let updates: Vec<String> = cols
        .iter()
        .map(|c| format!("{c} = t.{c} + excluded.{c}"))
        .collect();
    format!(
        "INSERT INTO {table} AS t (run_id, scenario_id, {cols})
         SELECT r.run_id, r.scenario_id, {exprs}
           FROM result r
           LEFT JOIN (
             SELECT j.result_id, COUNT(*) AS n, SUM(CASE WHEN j.passed = 1 THEN 1 ELSE 0 END) AS np,
                    SUM(j.cost_usd) AS cost, SUM(j.byok_cost_usd) AS byok,
                    -- A panel's criterion is one judgement but one call per
                    -- judge (its votes), each cached or not.
                    SUM(MAX(1, j.votes)) AS calls,
                    SUM(CASE WHEN j.votes > 0 THEN j.votes_cached ELSE j.cached END) AS cached,
                    SUM(j.cost_unknown) AS unknown, SUM(j.prompt_tokens) AS pt,
                    SUM(j.completion_tokens) AS ct, SUM(j.reasoning_tokens) AS rt,
                    SUM(j.cached_prompt_tokens) AS cpt
               FROM (SELECT j.*,
                       (SELECT COUNT(*) FROM judge_vote v
                         WHERE v.result_id = j.result_id AND v.criterion = j.criterion) AS votes,
                       (SELECT COALESCE(SUM(v.cached), 0) FROM judge_vote v
                         WHERE v.result_id = j.result_id AND v.criterion = j.criterion) AS votes_cached
                       FROM judgement j
                      WHERE j.result_id IN (SELECT r.id FROM result r WHERE {cond})) j
              GROUP BY j.result_id) jr ON jr.result_id = r.id
          WHERE {cond}
          GROUP BY {run}, r.scenario_id
         ON CONFLICT (run_id, scenario_id) DO UPDATE SET {updates}",
        cols = cols.join(", "),
        exprs = exprs.join(", "),
        updates = updates.join(", "),
    )
}

/// What a set of results adds to `run_served_total`: replies (a stored
/// response) by what served them, model and judge calls apart.
fn served_sql(table: &str, cond: &str) -> String {
    format!(
        "INSERT INTO {table} AS t (run_id, call, requested, served_model, provider, replies)
         SELECT run_id, call, requested, served_model, provider, $9 * COUNT(*) FROM (
           SELECT r.run_id, 'model' AS call, l.model_id AS requested,
                  COALESCE(r.served_model, '') AS served_model, COALESCE(r.provider, '') AS provider
             FROM result r JOIN evaluation_run er ON er.id = r.run_id JOIN llm l ON l.id = er.llm_id
            WHERE r.response IS NOT NULL AND {cond}
           UNION ALL
           SELECT r.run_id, 'judge', j.judge_model, COALESCE(j.served_model, ''), COALESCE(j.provider, '')
             FROM judgement j JOIN result r ON r.id = j.result_id
            WHERE j.response IS NOT NULL AND {cond}) u
          WHERE TRUE
          GROUP BY run_id, call, requested, served_model, provider
         ON CONFLICT (run_id, call, requested, served_model, provider)
           DO UPDATE SET replies = t.replies + excluded.replies"
    )
}

/// What a set of results adds to `run_error_total`.
fn errors_sql(table: &str, cond: &str, run: &str) -> String {
    format!(
        "INSERT INTO {table} AS t (run_id, error_type, results)
         SELECT r.run_id, COALESCE(r.error_type, ''), $9 * COUNT(*) FROM result r
          WHERE r.error_kind = 'provider' AND {cond}
          GROUP BY {run}, COALESCE(r.error_type, '')
         ON CONFLICT (run_id, error_type) DO UPDATE SET results = t.results + excluded.results"
    )
}

/// What a set of results adds to `run_judge_total`: a single judge's
/// judgements, and each panel judge's votes (a panel's combined judgement,
/// whose cost is its votes', is not counted twice).
fn judges_sql(table: &str, cond: &str) -> String {
    format!(
        "INSERT INTO {table} AS t (run_id, judge_model, calls, cost_usd, prompt_tokens, completion_tokens, cached)
         SELECT r.run_id, x.judge_model, $9 * COUNT(*), $9 * COALESCE(SUM(x.cost_usd), 0),
                $9 * COALESCE(SUM(x.prompt_tokens), 0), $9 * COALESCE(SUM(x.completion_tokens), 0),
                $9 * COALESCE(SUM(x.cached), 0)
           FROM (SELECT result_id, judge_model, cost_usd, prompt_tokens, completion_tokens, cached
                   FROM judgement j
                  WHERE j.result_id IN (SELECT r.id FROM result r WHERE {cond})
                    AND NOT EXISTS (SELECT 1 FROM judge_vote v
                                     WHERE v.result_id = j.result_id AND v.criterion = j.criterion)
                 UNION ALL
                 SELECT result_id, judge_model, cost_usd, prompt_tokens, completion_tokens, cached
                   FROM judge_vote v
                  WHERE v.result_id IN (SELECT r.id FROM result r WHERE {cond})) AS x
           JOIN result r ON r.id = x.result_id
          WHERE TRUE
          GROUP BY r.run_id, x.judge_model
         ON CONFLICT (run_id, judge_model) DO UPDATE SET
           calls = t.calls + excluded.calls, cost_usd = t.cost_usd + excluded.cost_usd,
           prompt_tokens = t.prompt_tokens + excluded.prompt_tokens,
           completion_tokens = t.completion_tokens + excluded.completion_tokens,
           cached = t.cached + excluded.cached"
    )
}

/// The kept tables other than `run_total`, with their keys and counts.
const KEYED: [(&str, &str, &str); 3] = [
    (
        "run_served_total",
        "run_id, call, requested, served_model, provider",
        "replies",
    ),
    ("run_error_total", "run_id, error_type", "results"),
    (
        "run_judge_total",
        "run_id, judge_model",
        "calls, ROUND(CAST(cost_usd AS NUMERIC), 9), prompt_tokens, completion_tokens, cached",
    ),
];

/// The four tables and their statements, for the store's tables or the
/// recount's temporary copies.
///
/// The run totals and error types group by `+r.run_id`, not `r.run_id`:
/// grouped by the bare column,
/// SQLite read the whole unique index of `result` (run, test code, repeat)
/// in its order for the rows a write added (`r.id > ?1`), at every commit,
/// instead of searching the new rows' id range (`tests/it/totals.rs`
/// checks the plans). PostgreSQL plans the bare column well and refuses
/// the expression (`r.run_id` is selected, not grouped by).
pub(super) fn statements(prefix: &str, cond: &str, d: Dialect) -> [String; 4] {
    let run = d.pick("+r.run_id", "r.run_id");
    [
        run_total_sql(&format!("{prefix}run_total"), cond, run),
        served_sql(&format!("{prefix}run_served_total"), cond),
        errors_sql(&format!("{prefix}run_error_total"), cond, run),
        judges_sql(&format!("{prefix}run_judge_total"), cond),
    ]
}

/// Adds (`sign` 1) or removes (-1) what `affected` contributes to the totals.
pub(super) async fn apply(
    tx: &mut Tx,
    affected: &Affected<'_>,
    sign: i64,
) -> Result<(), StoreError> {
    apply_to(tx, "", affected, sign).await?;
    if sign < 0 {
        // Counts that fell to nothing are no longer there to list.
        for sql in [
            "DELETE FROM run_served_total WHERE replies = 0",
            "DELETE FROM run_error_total WHERE results = 0",
            "DELETE FROM run_judge_total WHERE calls = 0",
        ] {
            on_tx!(&mut *tx, |t| sqlx::query(sql)
                .execute(&mut **t)
                .await?
                .rows_affected());
        }
    }
    Ok(())
}

async fn apply_to(
    tx: &mut Tx,
    prefix: &str,
    affected: &Affected<'_>,
    sign: i64,
) -> Result<(), StoreError> {
    // `$9`, the sign, is numbered apart from the condition's values;
    // placeholders up to $8 the condition does not use are bound as NULL.
    let mut args = affected.values();
    while args.len() < 8 {
        args.push(Arg::Int(None));
    }
    args.push(Arg::from(sign));
    for sql in statements(prefix, &affected.condition(), tx.dialect()) {
        // Built from constants and the fixed condition above: every value
        // is bound.
        on_tx!(&mut *tx, |t| bind_args!(
            sqlx::query(sqlx::AssertSqlSafe(sql)),
            args.clone()
        )
        .execute(&mut **t)
        .await?
        .rows_affected());
    }
    Ok(())
}

/// Empties the totals and fills them from every stored result and charge.
pub(super) async fn rebuild(tx: &mut Tx) -> Result<(), StoreError> {
    for table in TABLES {
        on_tx!(&mut *tx, |t| sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {table}"
        )))
        .execute(&mut **t)
        .await?
        .rows_affected());
    }
    apply_to(tx, "", &Affected::All, 1).await?;
    on_tx!(&mut *tx, |t| sqlx::query(DISCARDED_TOTALS)
        .execute(&mut **t)
        .await?
        .rows_affected());
    Ok(())
}

/// What the stored discarded charges add (the trigger's sum, all at once).
const DISCARDED_TOTALS: &str =
    "INSERT INTO run_total AS t (run_id, scenario_id, discarded_model_usd, discarded_judge_usd, discarded_unknown)
     SELECT run_id, COALESCE(scenario_id, 0),
            SUM(CASE WHEN call = 'model' THEN cost_usd ELSE 0.0 END),
            SUM(CASE WHEN call = 'judge' THEN cost_usd ELSE 0.0 END),
            SUM(unknown_attempts)
       FROM discarded_charge WHERE TRUE GROUP BY run_id, COALESCE(scenario_id, 0)
     ON CONFLICT (run_id, scenario_id) DO UPDATE SET
       discarded_model_usd = t.discarded_model_usd + excluded.discarded_model_usd,
       discarded_judge_usd = t.discarded_judge_usd + excluded.discarded_judge_usd,
       discarded_unknown = t.discarded_unknown + excluded.discarded_unknown";

impl Store {
    /// Fills the totals of a database migrated from before they were kept
    /// (the migration leaves a marker); once, whichever process gets there
    /// first.
    pub(super) async fn rebuild_totals_if_needed(&self) -> Result<(), StoreError> {
        const NEEDED: &str = "SELECT needed FROM totals_rebuild LIMIT 1";
        let needed: Option<i64> = on!(&self.pool, |pool| sqlx::query_scalar(NEEDED)
            .fetch_optional(pool)
            .await?);
        if needed.is_none() {
            return Ok(());
        }
        let mut tx = Tx::write(&self.pool).await?;
        if tx.dialect() == Dialect::Postgres {
            // Two processes opening at once: the second waits here for the
            // first's rebuild, then finds the marker gone.
            on_tx!(&mut tx, |t| sqlx::query(
                "LOCK TABLE totals_rebuild IN EXCLUSIVE MODE"
            )
            .execute(&mut **t)
            .await?
            .rows_affected());
        }
        let still: Option<i64> = on_tx!(&mut tx, |t| sqlx::query_scalar(NEEDED)
            .fetch_optional(&mut **t)
            .await?);
        if still.is_some() {
            rebuild(&mut tx).await?;
            on_tx!(&mut tx, |t| sqlx::query("DELETE FROM totals_rebuild")
                .execute(&mut **t)
                .await?
                .rows_affected());
        }
        tx.commit().await?;
        Ok(())
    }

    /// For a read-only open: a database migrated but whose totals are not
    /// filled yet (the process that migrated it stopped first) would read
    /// as zeros; it needs `helmbench migrate`, as an older schema does.
    pub(super) async fn refuse_unfilled_totals(&self) -> Result<(), StoreError> {
        let unfilled: Option<i64> = on!(&self.pool, |pool| sqlx::query_scalar(
            "SELECT needed FROM totals_rebuild LIMIT 1"
        )
        .fetch_optional(pool)
        .await?);
        // A database its creator stopped between the migration and the
        // first fill (a kill -9 in a new database's first milliseconds)
        // holds no runs: its totals, none, are right.
        let runs: Option<i64> = on!(&self.pool, |pool| sqlx::query_scalar(
            "SELECT id FROM evaluation_run LIMIT 1"
        )
        .fetch_optional(pool)
        .await?);
        match unfilled {
            Some(_) if runs.is_some() => Err(StoreError::OlderSchema {
                url: self.url.clone(),
                version: MIGRATION,
            }),
            _ => Ok(()),
        }
    }

    /// Where the kept totals differ from a full recount of the results and
    /// charges: one line per differing table row, empty when they agree.
    /// Costs agree to within 1e-9 USD (sums taken in another order).
    pub async fn recount_mismatches(&self) -> Result<Vec<String>, StoreError> {
        let mut tx = Tx::read(&self.pool).await?;
        let d = tx.dialect();
        // The schemas of the store's tables and of this transaction's copies.
        let (main, temp) = d.pick(("main", "temp"), ("public", "pg_temp"));
        // Copies of the tables as the migration made them (defaults and
        // keys included, which CREATE TABLE ... AS would drop).
        for table in TABLES {
            let ddl = match d {
                Dialect::Sqlite => {
                    let ddl: String = on_tx!(&mut tx, |t| sqlx::query_scalar(
                        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = $1",
                    )
                    .bind(table)
                    .fetch_one(&mut **t)
                    .await?);
                    ddl.replacen(
                        &format!("CREATE TABLE {table}"),
                        &format!("CREATE TEMP TABLE recount_{table}"),
                        1,
                    )
                    // A temp table cannot reference the main schema's tables.
                    .replace("REFERENCES evaluation_run(id) ON DELETE CASCADE", "")
                }
                Dialect::Postgres => format!(
                    "CREATE TEMP TABLE recount_{table}
                       (LIKE public.{table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES)"
                ),
            };
            on_tx!(&mut tx, |t| sqlx::query(sqlx::AssertSqlSafe(ddl))
                .execute(&mut **t)
                .await?
                .rows_affected());
        }
        apply_to(&mut tx, &format!("{temp}.recount_"), &Affected::All, 1).await?;
        let discarded = DISCARDED_TOTALS.replacen(
            "INTO run_total AS t",
            &format!("INTO {temp}.recount_run_total AS t"),
            1,
        );
        on_tx!(&mut tx, |t| sqlx::query(sqlx::AssertSqlSafe(discarded))
            .execute(&mut **t)
            .await?
            .rows_affected());
        let mut out = Vec::new();
        let cols: Vec<String> = RUN_TOTAL
            .iter()
            .map(|(c, _)| c.to_string())
            .chain([
                "discarded_model_usd".into(),
                "discarded_judge_usd".into(),
                "discarded_unknown".into(),
            ])
            .collect();
        let differs: Vec<String> = cols
            .iter()
            .map(|c| format!("ABS(COALESCE(a.{c}, 0) - COALESCE(b.{c}, 0)) > 1e-9"))
            .collect();
        // Each differing column as ` name=recounted/kept`.
        let named: Vec<String> = cols
            .iter()
            .map(|c| {
                format!(
                    "CASE WHEN ABS(COALESCE(a.{c}, 0) - COALESCE(b.{c}, 0)) > 1e-9
                       THEN ' {c}=' || COALESCE(a.{c}, 0) || '/' || COALESCE(b.{c}, 0) ELSE '' END"
                )
            })
            .collect();
        let total_diff = format!(
            "SELECT a.run_id || '/' || a.scenario_id || {n} FROM {temp}.recount_run_total a
               LEFT JOIN {main}.run_total b USING (run_id, scenario_id) WHERE {d}
             UNION ALL
             SELECT b.run_id || '/' || b.scenario_id || ' (kept, not recounted)' FROM {main}.run_total b
               LEFT JOIN {temp}.recount_run_total a USING (run_id, scenario_id)
              WHERE a.run_id IS NULL AND ({d})",
            d = differs.join(" OR "),
            n = named.join(" || ")
        );
        let rows: Vec<String> = on_tx!(&mut tx, |t| sqlx::query_scalar(sqlx::AssertSqlSafe(
            total_diff
        ))
        .fetch_all(&mut **t)
        .await?);
        for row in rows {
            out.push(format!("run_total {row}"));
        }
        for (t, key, value) in KEYED {
            let sql = format!(
                "SELECT * FROM (SELECT {key}, {value} FROM {temp}.recount_{t}
                                EXCEPT SELECT {key}, {value} FROM {main}.{t}) a
                 UNION ALL
                 SELECT * FROM (SELECT {key}, {value} FROM {main}.{t}
                                EXCEPT SELECT {key}, {value} FROM {temp}.recount_{t}) b"
            );
            let n = on_tx!(&mut tx, |t| sqlx::query(sqlx::AssertSqlSafe(sql))
                .fetch_all(&mut **t)
                .await?
                .len());
            if n > 0 {
                out.push(format!("{t}: {n} rows differ"));
            }
        }
        tx.rollback().await?;
        Ok(out)
    }
}
