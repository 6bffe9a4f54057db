//! Results: what the runner's writer hands over (results with their
//! judgements and discarded charges) is written here in batched
//! transactions; results that cannot be written are kept in a pending file
//! beside the database for the next run. Also the lookups a run makes while
//! it runs: stored and judge-error cases for a resume, and cached replies
//! and judgements for identical requests.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::Row;

use super::backend::{Dialect, Tx, on, on_tx};
use super::decode::from_columns;
use super::{Store, StoreError, totals};

use crate::domain::{CachedReply, DiscardedCharge, NewJudgement, NewResult, request_key};

/// `$q` with one result's 38 values bound in `RESULT_INSERT` column order
/// (`$r`: a `&NewResult`, `$endpoint`: an `Option<&str>`), on either
/// backend. Flags are bound as the 0/1 integers both schemas store.
macro_rules! bind_result {
    ($q:expr, $r:expr, $endpoint:expr) => {{
        let r: &NewResult = $r;
        let endpoint: Option<&str> = $endpoint;
        $q.bind(r.run_id)
            .bind(r.test_code.clone())
            .bind(r.repeat_index)
            .bind(r.scenario_id)
            .bind(r.condition_id)
            .bind(r.user_context_id)
            .bind(r.perturbation_id)
            .bind(r.prompt_hash.clone())
            .bind(r.request_hash.clone())
            .bind(r.base_severity)
            .bind(r.difficulty)
            .bind(r.response.clone())
            .bind(r.parsed.as_ref().map(Value::to_string))
            .bind(r.matched.map(i64::from))
            .bind(i64::from(r.passed))
            .bind(r.error_kind)
            .bind(r.error.clone())
            .bind(r.evaluation_details.to_string())
            .bind(r.latency_ms)
            .bind(r.prompt_tokens)
            .bind(r.completion_tokens)
            .bind(known_cost(r.cost_usd))
            .bind(r.upstream_cost_usd.filter(|c| c.is_finite()))
            .bind(r.generation_id.clone())
            .bind(r.finish_reason.clone())
            .bind(r.attempts)
            .bind(i64::from(r.cached))
            .bind(
                r.quality
                    .as_ref()
                    .and_then(|q| serde_json::to_string(q).ok()),
            )
            .bind(endpoint.map(str::to_string))
            .bind(i64::from(!r.cost_usd.is_finite()))
            .bind(r.served.served_model.clone())
            .bind(r.served.provider.clone())
            .bind(r.served.reasoning_tokens)
            .bind(r.served.cached_prompt_tokens)
            .bind(r.error_type.clone())
            .bind(r.provider_code.clone())
            .bind(r.block.as_ref().and_then(|b| serde_json::to_string(b).ok()))
            .bind(known_cost(r.byok_cost_usd))
    }};
}

from_columns!(CachedReply {
    response,
    finish_reason,
    generation_id,
    prompt_tokens,
    completion_tokens,
    served_model,
    provider,
});

/// One run's part of a commit: its results, its charges, and its log mark
/// (run id, sequence number of the last record).
pub type LoggedPart<'a> = (&'a [NewResult], &'a [DiscardedCharge], Option<(i64, i64)>);

/// The reply cache's lookup: found through the index of the request
/// hash's first 16 characters (issue 45), the whole hash then compared as
/// `request_hash || ''`: SQLite 3.40 (Debian's) puts a hash compared as a
/// bare column into the prefix's expression (constant propagation) and
/// scans the table; the bundled 3.51 does not, and `store/plans.rs` fails
/// on a scan either way.
pub(super) const CACHED_REPLY: &str = "SELECT response, finish_reason, generation_id, prompt_tokens, completion_tokens, served_model, provider FROM result
             WHERE substr(request_hash, 1, 16) = substr($1, 1, 16) AND request_hash || '' = $1
               AND endpoint = $2 AND response IS NOT NULL AND (error_kind IS NULL OR error_kind = 'judge')
             ORDER BY id LIMIT 1";

impl Store {
    /// (test code, repeat) pairs of a run that are done: stored, and not
    /// with a judge error (a resume judges those again, see
    /// [`Store::judge_error_cases`]).
    pub async fn stored_cases(&self, run_id: i64) -> Result<HashSet<(String, i64)>, StoreError> {
        self.cases(run_id, "error_kind IS NULL OR error_kind <> 'judge'")
            .await
    }

    /// (test code, repeat) pairs of a run stored with a judge error.
    pub async fn judge_error_cases(
        &self,
        run_id: i64,
    ) -> Result<HashSet<(String, i64)>, StoreError> {
        self.cases(run_id, "error_kind = 'judge'").await
    }

    async fn cases(
        &self,
        run_id: i64,
        filter: &'static str,
    ) -> Result<HashSet<(String, i64)>, StoreError> {
        // `filter` is one of two constants: no user input reaches the SQL text.
        let rows: Vec<(String, i64)> = on!(&self.pool, |pool| sqlx::query_as(sqlx::AssertSqlSafe(
            format!("SELECT test_code, repeat_index FROM result WHERE run_id = $1 AND ({filter})")
        ))
        .bind(run_id)
        .fetch_all(pool)
        .await?);
        Ok(rows.into_iter().collect())
    }

    /// A successful, well-formed reply to an identical request sent to the
    /// same endpoint, if any ([`CACHED_REPLY`]).
    pub async fn cached_reply(
        &self,
        request_hash: &str,
    ) -> Result<Option<CachedReply>, StoreError> {
        let Some(endpoint) = &self.endpoint else {
            return Ok(None);
        };
        Ok(on!(&self.pool, |pool| {
            sqlx::query_as(CACHED_REPLY)
                .bind(request_hash)
                .bind(endpoint)
                .fetch_optional(pool)
                .await?
        }))
    }

    /// [`request_key`]s of every request hash stored with a result, and of
    /// every judge request hash: a superset of what [`Store::cached_reply`]
    /// and [`Store::cached_judgement`] can find, so that a run asks the
    /// database only about requests it may have answered before. Read in
    /// pages along the hash indexes (8 bytes kept per stored row).
    pub async fn request_keys(&self) -> Result<(HashSet<u64>, HashSet<u64>), StoreError> {
        const PAGE: i64 = 20_000;
        let mut out = (HashSet::new(), HashSet::new());
        // Several judges' own judgements (votes) are cached per judge too.
        // A conversation's turns (issue 42) are replies too.
        for (table, judge) in [
            ("result", false),
            ("turn", false),
            ("judgement", true),
            ("judge_vote", true),
        ] {
            let set = if judge { &mut out.1 } else { &mut out.0 };
            // Built from the four constant table names only. The result
            // table's index holds the hash's first 16 characters, all a key
            // is made of (`request_key`): read in the index's order, a page
            // after the last prefix (rows of one prefix share their key).
            let key = if table == "result" {
                "substr(request_hash, 1, 16)"
            } else {
                "request_hash"
            };
            let sql = format!("SELECT {key} FROM {table} WHERE {key} > $1 ORDER BY {key} LIMIT $2");
            let mut after = String::new();
            loop {
                let page: Vec<String> = on!(&self.pool, |pool| sqlx::query_scalar(
                    sqlx::AssertSqlSafe(sql.clone())
                )
                .bind(&after)
                .bind(PAGE)
                .fetch_all(pool)
                .await?);
                set.extend(page.iter().map(|h| request_key(h)));
                match page.into_iter().last() {
                    Some(last) => after = last,
                    None => break,
                }
            }
        }
        Ok(out)
    }

    /// A judge's raw answer to an identical judge request sent to the same
    /// endpoint, if any.
    pub async fn cached_judgement(&self, request_hash: &str) -> Result<Option<String>, StoreError> {
        let Some(endpoint) = &self.endpoint else {
            return Ok(None);
        };
        Ok(on!(&self.pool, |pool| {
            sqlx::query_scalar(
            "SELECT response FROM judgement WHERE request_hash = $1 AND endpoint = $2 AND response IS NOT NULL AND error IS NULL
             UNION ALL
             SELECT response FROM judge_vote WHERE request_hash = $1 AND endpoint = $2 AND response IS NOT NULL AND error IS NULL
             LIMIT 1",
        )
        .bind(request_hash)
        .bind(endpoint)
        .fetch_optional(pool)
        .await?
        }))
    }

    /// Deletes a run's provider-error results so a resume sends them again;
    /// with `blocked`, its blocked and refused ones too (`--retry-blocked`).
    pub async fn clear_provider_errors(
        &self,
        run_id: i64,
        blocked: bool,
    ) -> Result<u64, StoreError> {
        let kinds: &[&str] = if blocked {
            &["provider", "blocked", "refused"]
        } else {
            &["provider"]
        };
        let affected = totals::Affected::RunKinds { run_id, kinds };
        let mut tx = self.write_tx().await?;
        totals::apply(&mut tx, &affected, -1).await?;
        let sql = if blocked {
            "DELETE FROM result WHERE run_id = $1 AND error_kind IN ('provider', 'blocked', 'refused')"
        } else {
            "DELETE FROM result WHERE run_id = $1 AND error_kind = 'provider'"
        };
        let n = on_tx!(&mut tx, |t| sqlx::query(sql)
            .bind(run_id)
            .execute(&mut **t)
            .await?
            .rows_affected());
        tx.commit().await?;
        Ok(n)
    }

    /// Writes results in one transaction. A (run, test code, repeat) already
    /// stored is skipped, so a replayed write never duplicates a row.
    ///
    /// Rows go in multi-row INSERTs of power-of-two sizes (so each connection
    /// caches a handful of prepared statements, not one per batch size), and
    /// each distinct prompt text is sent once per batch.
    ///
    /// `charges` are discarded charges of requests that left no result (a
    /// 402, an interruption); each result's own charges are written with it.
    pub async fn write_results(
        &self,
        results: &[NewResult],
        charges: &[DiscardedCharge],
    ) -> Result<usize, StoreError> {
        self.write_logged(results, charges, None).await
    }

    /// [`Store::write_results`] of records taken from a run's result log:
    /// `mark` (run id, sequence number of the last record written) is kept
    /// in the same transaction, so a replay of that log after a crash skips
    /// what is already here ([`Store::log_mark`]).
    pub async fn write_logged(
        &self,
        results: &[NewResult],
        charges: &[DiscardedCharge],
        mark: Option<(i64, i64)>,
    ) -> Result<usize, StoreError> {
        let written = self
            .write_logged_together(&[(results, charges, mark)])
            .await?;
        Ok(written[0])
    }

    /// [`Store::write_logged`] of several runs' parts (each a [`LoggedPart`]) in one transaction
    /// (issue 45: the runs of a batch commit together, so ten models write
    /// like one): every part or none; what each part wrote, in order.
    pub async fn write_logged_together(
        &self,
        parts: &[LoggedPart<'_>],
    ) -> Result<Vec<usize>, StoreError> {
        let mut tx = self.write_tx().await?;
        let mut written = Vec::with_capacity(parts.len());
        for (results, charges, mark) in parts {
            written.push(self.write_part(&mut tx, results, charges, *mark).await?);
        }
        tx.commit().await?;
        Ok(written)
    }

    async fn write_part(
        &self,
        tx: &mut Tx,
        results: &[NewResult],
        charges: &[DiscardedCharge],
        mark: Option<(i64, i64)>,
    ) -> Result<usize, StoreError> {
        let mut tx = tx;
        if let Some((run_id, seq)) = mark {
            on_tx!(&mut tx, |t| sqlx::query(
                "INSERT INTO result_log_mark (run_id, seq) VALUES ($1, $2)
                 ON CONFLICT (run_id) DO UPDATE SET seq = MAX(result_log_mark.seq, excluded.seq)",
            )
            .bind(run_id)
            .bind(seq)
            .execute(&mut **t)
            .await?
            .rows_affected());
        }
        for r in results.iter().filter(|r| r.replaces) {
            retire_judge_error(tx, r).await?;
        }
        // Read after the deletes above: a new row may take a deleted id.
        let last_id: i64 = on_tx!(&mut tx, |t| sqlx::query_scalar(
            "SELECT COALESCE(MAX(id), 0) FROM result"
        )
        .fetch_one(&mut **t)
        .await?);

        let mut seen = HashSet::with_capacity(results.len());
        let prompts: Vec<&NewResult> = results
            .iter()
            .filter(|r| seen.insert(r.prompt_hash.as_str()))
            .collect();
        drop(seen);
        for chunk in pow2_chunks(&prompts, MAX_PROMPT_ROWS) {
            let sql = values_sql(
                "INSERT INTO prompt_text (hash, text) VALUES ",
                2,
                chunk.len(),
                " ON CONFLICT(hash) DO NOTHING",
                tx.dialect(),
            );
            on_tx!(&mut tx, |t| {
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                for r in chunk {
                    q = q.bind(&r.prompt_hash).bind(&r.prompt);
                }
                q.execute(&mut **t).await?.rows_affected()
            });
        }

        let mut written = 0usize;
        // Results with judgements need their id back, one row at a time; the
        // rest (every deterministic evaluation) go many rows per statement.
        let (plain, judged): (Vec<&NewResult>, Vec<&NewResult>) =
            results.iter().partition(|r| r.judgements.is_empty());
        for chunk in pow2_chunks(&plain, MAX_RESULT_ROWS) {
            let sql = values_sql(
                RESULT_INSERT,
                RESULT_COLUMNS,
                chunk.len(),
                RESULT_CONFLICT,
                tx.dialect(),
            );
            written += on_tx!(&mut tx, |t| {
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                for r in chunk {
                    q = bind_result!(q, r, self.endpoint.as_deref());
                }
                q.execute(&mut **t).await?.rows_affected() as usize
            });
        }
        for r in judged {
            let sql = values_sql(
                RESULT_INSERT,
                RESULT_COLUMNS,
                1,
                &format!("{RESULT_CONFLICT} RETURNING id"),
                tx.dialect(),
            );
            let id: Option<i64> = on_tx!(&mut tx, |t| bind_result!(
                sqlx::query(sqlx::AssertSqlSafe(sql)),
                r,
                self.endpoint.as_deref()
            )
            .fetch_optional(&mut **t)
            .await?
            .map(|row| row.try_get("id"))
            .transpose()?);
            let Some(id) = id else { continue };
            written += 1;
            for j in &r.judgements {
                on_tx!(&mut tx, |t| {
                    sqlx::query(
                    "INSERT INTO judgement (result_id, criterion, judge_model, verdict, justification, passed, error,
                       prompt_tokens, completion_tokens, cost_usd, generation_id, cached, request_hash, response,
                       endpoint, cost_unknown, served_model, provider, reasoning_tokens, cached_prompt_tokens,
                       byok_cost_usd)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)",
                )
                .bind(id)
                .bind(&j.criterion)
                .bind(&j.judge_model)
                .bind(j.verdict.as_ref().map(Value::to_string))
                .bind(&j.justification)
                .bind(j.passed.map(i64::from))
                .bind(&j.error)
                .bind(j.prompt_tokens)
                .bind(j.completion_tokens)
                .bind(known_cost(j.cost_usd))
                .bind(&j.generation_id)
                .bind(i64::from(j.cached))
                .bind(&j.request_hash)
                .bind(&j.response)
                .bind(&self.endpoint)
                .bind(i64::from(!j.cost_usd.is_finite()))
                .bind(&j.served.served_model)
                .bind(&j.served.provider)
                .bind(j.served.reasoning_tokens)
                .bind(j.served.cached_prompt_tokens)
                .bind(known_cost(j.byok_cost_usd))
                .execute(&mut **t)
                .await?
                .rows_affected()
                });
                write_votes(tx, id, j, self.endpoint.as_deref()).await?;
            }
        }
        totals::apply(tx, &totals::Affected::After(last_id), 1).await?;
        let lost = if written < results.len() {
            lost_charges(tx, results, last_id).await?
        } else {
            Vec::new()
        };
        for c in charges
            .iter()
            .chain(results.iter().flat_map(|r| &r.charges))
            .chain(&lost)
        {
            on_tx!(&mut tx, |t| {
                sqlx::query(
                "INSERT INTO discarded_charge (run_id, scenario_id, test_code, repeat_index, call, attempts, cost_usd, unknown_attempts, reason)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(c.run_id)
            .bind(c.scenario_id)
            .bind(&c.test_code)
            .bind(c.repeat_index)
            .bind(&c.call)
            .bind(c.attempts)
            .bind(c.cost_usd)
            .bind(c.unknown_attempts)
            .bind(&c.reason)
            .execute(&mut **t)
            .await?
            .rows_affected()
            });
        }
        Ok(written)
    }

    /// The file where results of `run_id` that could not be written are
    /// kept for the next run: beside the database. None for `:memory:`.
    pub fn pending_path(&self, run_id: i64) -> Option<PathBuf> {
        self.run_file(run_id, "pending.jsonl")
    }

    /// The write-ahead log of `run_id`'s results (see `run/log.rs`): beside
    /// the database. None for `:memory:`.
    pub fn log_path(&self, run_id: i64) -> Option<PathBuf> {
        self.run_file(run_id, "log")
    }

    /// `DATABASE.run-ID.ext`, beside the database file.
    fn run_file(&self, run_id: i64, ext: &str) -> Option<PathBuf> {
        let file = self.database_file()?;
        Some(PathBuf::from(format!(
            "{}.run-{run_id}.{ext}",
            file.display()
        )))
    }

    /// The sequence number of the last record of `run_id`'s result log
    /// that the database holds (0: none).
    pub async fn log_mark(&self, run_id: i64) -> Result<i64, StoreError> {
        let seq: Option<i64> = on!(&self.pool, |pool| sqlx::query_scalar(
            "SELECT seq FROM result_log_mark WHERE run_id = $1"
        )
        .bind(run_id)
        .fetch_optional(pool)
        .await?);
        Ok(seq.unwrap_or(0))
    }

    /// Appends results (and loose charges) that could not be written to
    /// [`Store::pending_path`], flushed to disk; returns the path.
    pub fn keep_pending(
        &self,
        run_id: i64,
        results: &[NewResult],
        charges: &[DiscardedCharge],
    ) -> Result<PathBuf, StoreError> {
        use std::io::Write as _;
        let path = self
            .pending_path(run_id)
            .ok_or(StoreError::NoPendingFolder)?;
        let io = |source| pending_error(&path, source);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io)?;
        let mut w = std::io::BufWriter::new(file);
        let lines = results
            .iter()
            .map(|r| Pending::Result(Box::new(r.clone())))
            .chain(charges.iter().cloned().map(Pending::Charge));
        for p in lines {
            serde_json::to_writer(&mut w, &p).map_err(|e| io(e.into()))?;
            w.write_all(b"\n").map_err(io)?;
        }
        let file = w.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        Ok(path)
    }

    /// Writes what a previous process kept in [`Store::pending_path`] for
    /// `run_id`, then removes the file; returns how many results it held.
    pub async fn write_pending(&self, run_id: i64) -> Result<usize, StoreError> {
        let Some(path) = self.pending_path(run_id) else {
            return Ok(0);
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(pending_error(&path, e)),
        };
        let (mut results, mut charges) = (Vec::new(), Vec::new());
        let mut damage = None;
        for (i, line) in text.split_inclusive('\n').enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Pending>(line) {
                Ok(Pending::Result(r)) => results.push(*r),
                Ok(Pending::Charge(c)) => charges.push(c),
                // The last line cut short by a crash while it was written.
                Err(_) if !line.ends_with('\n') => {}
                Err(e) => {
                    damage.get_or_insert((i + 1, e.to_string()));
                }
            }
        }
        let n = results.len();
        for chunk in results.chunks(256) {
            self.write_results(chunk, &[]).await?;
        }
        self.write_results(&[], &charges).await?;
        match damage {
            Some((record, why)) => Err(Store::set_aside(&path, record, why)),
            None => {
                std::fs::remove_file(&path).map_err(|e| pending_error(&path, e))?;
                Ok(n)
            }
        }
    }

    /// Moves a file of kept results that holds an unreadable record (number
    /// `record`, for `why`) aside, next to it, never over an earlier one,
    /// and returns the error that names both.
    pub fn set_aside(path: &std::path::Path, record: usize, why: String) -> StoreError {
        let file = path.display().to_string();
        let mut n = 1;
        let kept = loop {
            let to = PathBuf::from(match n {
                1 => format!("{file}.damaged"),
                n => format!("{file}.damaged-{n}"),
            });
            if !to.exists() {
                break to;
            }
            n += 1;
        };
        if let Err(e) = std::fs::rename(path, &kept) {
            return pending_error(path, e);
        }
        StoreError::Damaged {
            file,
            kept_as: kept.display().to_string(),
            record,
            why,
        }
    }

    /// How many results a run has stored.
    pub async fn count_results(&self, run_id: i64) -> Result<i64, StoreError> {
        Ok(on!(&self.pool, |pool| sqlx::query_scalar(
            "SELECT COUNT(*) FROM result WHERE run_id = $1"
        )
        .bind(run_id)
        .fetch_one(pool)
        .await?))
    }
}

impl Store {
    /// A transaction that writes results. On PostgreSQL it first takes
    /// the result table's write lock: the totals of a write are computed
    /// over the ids above the highest one it read (`totals::Affected::After`),
    /// which another process's concurrent insert would break; SQLite's
    /// IMMEDIATE transaction serialises writers already.
    async fn write_tx(&self) -> Result<Tx, StoreError> {
        let mut tx = Tx::write(&self.pool).await?;
        if tx.dialect() == Dialect::Postgres {
            on_tx!(&mut tx, |t| sqlx::query(
                "LOCK TABLE result IN SHARE ROW EXCLUSIVE MODE"
            )
            .execute(&mut **t)
            .await?
            .rows_affected());
        }
        Ok(tx)
    }
}

/// One line of a [`Store::pending_path`] file.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
enum Pending {
    Result(Box<NewResult>),
    Charge(DiscardedCharge),
}

/// Before a resume's new result for the same test case is written: keeps
/// what the stored judge-error result and its judgements cost as discarded
/// charges, then deletes it (its judgements go with it).
async fn retire_judge_error(tx: &mut Tx, r: &NewResult) -> Result<(), StoreError> {
    const REASON: &str = retired_reason!();
    let affected = totals::Affected::JudgeError {
        run_id: r.run_id,
        test_code: &r.test_code,
        repeat_index: r.repeat_index,
    };
    totals::apply(tx, &affected, -1).await?;
    // The reply's cost, its judgements' costs, then the row itself.
    for sql in [
        "INSERT INTO discarded_charge (run_id, scenario_id, test_code, repeat_index, call, attempts, cost_usd, unknown_attempts, reason)
         SELECT run_id, scenario_id, test_code, repeat_index, 'model', 1, cost_usd, cost_unknown, $4 FROM result
         WHERE run_id = $1 AND test_code = $2 AND repeat_index = $3 AND error_kind = 'judge'
           AND (cost_usd > 0 OR cost_unknown > 0)",
        "INSERT INTO discarded_charge (run_id, scenario_id, test_code, repeat_index, call, attempts, cost_usd, unknown_attempts, reason)
         SELECT r.run_id, r.scenario_id, r.test_code, r.repeat_index, 'judge', COUNT(*), SUM(j.cost_usd), SUM(j.cost_unknown), $4
         FROM judgement j JOIN result r ON r.id = j.result_id
         WHERE r.run_id = $1 AND r.test_code = $2 AND r.repeat_index = $3 AND r.error_kind = 'judge'
         GROUP BY r.id HAVING SUM(j.cost_usd) > 0 OR SUM(j.cost_unknown) > 0",
        "DELETE FROM result WHERE run_id = $1 AND test_code = $2 AND repeat_index = $3 AND error_kind = 'judge'
           AND $4 IS NOT NULL",
    ] {
        on_tx!(&mut *tx, |t| sqlx::query(sql)
            .bind(r.run_id)
            .bind(&r.test_code)
            .bind(r.repeat_index)
            .bind(REASON)
            .execute(&mut **t)
            .await?
            .rows_affected());
    }
    Ok(())
}

/// The charges of the results of `results` that were not inserted (a
/// result of the same run, test case and repeat was stored first: another
/// process answered it too, the lease case README calls paid twice): what
/// their reply and verdicts cost, kept as discarded charges rather than
/// dropped. The inserted rows are those above `last_id`.
async fn lost_charges(
    tx: &mut Tx,
    results: &[NewResult],
    last_id: i64,
) -> Result<Vec<DiscardedCharge>, StoreError> {
    const REASON: &str = "a result of a test case already stored (another process answered it too): paid twice, not kept";
    let rows = on_tx!(&mut *tx, |t| sqlx::query(
        "SELECT run_id, test_code, repeat_index FROM result WHERE id > $1"
    )
    .bind(last_id)
    .fetch_all(&mut **t)
    .await?
    .iter()
    .map(|row| {
        Ok::<_, sqlx::Error>((
            row.try_get::<i64, _>("run_id")?,
            row.try_get::<String, _>("test_code")?,
            row.try_get::<i64, _>("repeat_index")?,
        ))
    })
    .collect::<Result<Vec<_>, _>>()?);
    let mut inserted: HashMap<(i64, String, i64), usize> = HashMap::new();
    for key in rows {
        *inserted.entry(key).or_default() += 1;
    }
    let mut lost = Vec::new();
    for r in results {
        let key = (r.run_id, r.test_code.clone(), r.repeat_index);
        match inserted.get_mut(&key) {
            Some(n) if *n > 0 => *n -= 1,
            _ => lost.extend(r.paid_as_charges(true, &r.judgements, REASON)),
        }
    }
    Ok(lost)
}

/// Rows per multi-row INSERT, at most: well under SQLite's 32,766 bound
/// variables (38 columns x 64 rows = 2,432).
const MAX_RESULT_ROWS: usize = 64;
const MAX_PROMPT_ROWS: usize = 128;

const RESULT_INSERT: &str = "INSERT INTO result (run_id, test_code, repeat_index, scenario_id, condition_id, user_context_id, perturbation_id,
   prompt_hash, request_hash, base_severity, difficulty, response, parsed, matched, passed, error_kind, error,
   evaluation_details, latency_ms, prompt_tokens, completion_tokens, cost_usd, upstream_cost_usd, generation_id,
   finish_reason, attempts, cached, quality, endpoint, cost_unknown, served_model, provider, reasoning_tokens,
   cached_prompt_tokens, error_type, provider_code, block, byok_cost_usd) VALUES ";
const RESULT_COLUMNS: usize = 38;
const RESULT_CONFLICT: &str = " ON CONFLICT(run_id, test_code, repeat_index) DO NOTHING";

/// `head` + `rows` groups of `columns` placeholders + `tail`. Built only
/// from constants and counts: no user input reaches the SQL text.
fn values_sql(head: &str, columns: usize, rows: usize, tail: &str, d: Dialect) -> String {
    let mut sql = String::with_capacity(head.len() + rows * columns * 6 + tail.len());
    sql.push_str(head);
    let mut n = 0;
    for i in 0..rows {
        sql.push_str(if i > 0 { ", (" } else { "(" });
        for c in 0..columns {
            n += 1;
            if c > 0 {
                sql.push_str(", ");
            }
            // SQLite looks a named parameter (`$17`) up in a list, from its
            // start, at each bind: 2,432 of them a statement made the write
            // 1.4-1.9 times slower than anonymous `?` (bench/scale.sh's
            // batch, issue 34). PostgreSQL knows only `$N`.
            match d {
                Dialect::Sqlite => sql.push('?'),
                Dialect::Postgres => {
                    sql.push('$');
                    sql.push_str(&n.to_string());
                }
            }
        }
        sql.push(')');
    }
    sql.push_str(tail);
    sql
}

/// Splits `items` into chunks of `max` and then descending powers of two,
/// so only log2(max) + 1 distinct statement shapes ever exist.
fn pow2_chunks<T>(items: &[T], max: usize) -> Vec<&[T]> {
    let mut out = Vec::new();
    let mut rest = items;
    while !rest.is_empty() {
        let n = if rest.len() >= max {
            max
        } else {
            1 << rest.len().ilog2()
        };
        let (chunk, tail) = rest.split_at(n);
        out.push(chunk);
        rest = tail;
    }
    out
}

/// Writes the votes of a panel's judgement (nothing for a single judge),
/// inside the transaction that writes its result.
async fn write_votes(
    tx: &mut Tx,
    result_id: i64,
    j: &NewJudgement,
    endpoint: Option<&str>,
) -> Result<(), StoreError> {
    for v in &j.votes {
        on_tx!(&mut *tx, |t| {
            sqlx::query(
            "INSERT INTO judge_vote (result_id, criterion, judge_model, verdict, justification, passed, error,
               prompt_tokens, completion_tokens, cost_usd, cost_unknown, generation_id, cached, request_hash,
               response, endpoint)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
             ON CONFLICT (result_id, criterion, judge_model) DO NOTHING",
        )
        .bind(result_id)
        .bind(&j.criterion)
        .bind(&v.judge_model)
        .bind(v.verdict.as_ref().map(Value::to_string))
        .bind(&v.justification)
        .bind(v.passed.map(i64::from))
        .bind(&v.error)
        .bind(v.prompt_tokens)
        .bind(v.completion_tokens)
        .bind(known_cost(v.cost_usd))
        .bind(i64::from(!v.cost_usd.is_finite()))
        .bind(&v.generation_id)
        .bind(i64::from(v.cached))
        .bind(&v.request_hash)
        .bind(&v.response)
        .bind(endpoint)
        .execute(&mut **t)
        .await?
        .rows_affected()
        });
    }
    Ok(())
}

/// A cost as stored: the figure, or 0 when it is unknown (NaN, or any
/// other value that is not finite: SQLite would store NaN as NULL and
/// fail the whole batch on the NOT NULL column).
pub(super) fn known_cost(c: f64) -> f64 {
    if c.is_finite() { c } else { 0.0 }
}

/// The pending file at `path` could not be written or read.
fn pending_error(path: &std::path::Path, source: std::io::Error) -> StoreError {
    StoreError::Pending {
        file: path.display().to_string(),
        source,
    }
}
