//! Several processes on one run (the team store, issue 34): the hosts
//! working on a run, and the leases its planned test cases are handed out
//! in. A run on PostgreSQL is lease-managed from its start: its plan is cut
//! in chunks ([`LEASE_CHUNK`] items, in the plan's order), each process
//! takes one not-done chunk at a time (`FOR UPDATE SKIP LOCKED`: two
//! processes never take the same one), its heartbeat extends the chunks it
//! holds, and a chunk whose holder died expires after [`LEASE_S`] seconds
//! and is taken by another process, which asks only its missing cases.

use std::collections::HashMap;

use super::backend::{Arg, Pool, bind_args, on};
use super::runs::{STALE_AFTER_S, pid_alive};
use super::{Store, StoreError};
use crate::domain::{RunHost, RunStatus};

/// Planned items per chunk: small enough that a dead process's chunk is
/// soon redone, large enough that claims are rare next to results.
pub const LEASE_CHUNK: usize = 32;
/// How long a lease lasts without a heartbeat (which comes every
/// [`super::HEARTBEAT_INTERVAL`], 5 s).
pub(super) const LEASE_S: f64 = 30.0;

/// `julianday('now')` plus [`LEASE_S`], the expiry a claim or a heartbeat sets.
fn expiry() -> String {
    format!("julianday('now') + {LEASE_S:.1} / 86400.0")
}

/// A row of `run_host`: host, pid, started, heartbeat age, sent, stored, left.
type HostRow = (String, i64, Option<i64>, f64, i64, i64, Option<String>);
/// A [`HostRow`] after its run's id.
type RunHostRow = (i64, String, i64, Option<i64>, f64, i64, i64, Option<String>);

impl Store {
    /// Whether runs here may be shared by several processes (PostgreSQL).
    pub fn is_team_store(&self) -> bool {
        matches!(self.pool, Pool::Postgres(_))
    }

    /// Says this process works on `run_id` (the first process or a joiner;
    /// again after a resume).
    pub async fn join_host(&self, run_id: i64) -> Result<(), StoreError> {
        on!(&self.pool, |pool| {
            sqlx::query(
                "INSERT INTO run_host (run_id, host, pid, started, first_seen, heartbeat_at)
                 VALUES ($1, $2, $3, $4, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
                 ON CONFLICT (run_id, host, pid) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, left_at = NULL",
            )
            .bind(run_id)
            .bind(&self.owner.host)
            .bind(self.owner.pid)
            .bind(self.owner.started)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// This process's heartbeat on a lease-managed run: its host row (with
    /// its counts), the leases it holds (extended by [`LEASE_S`]), and the
    /// run's own heartbeat, so the run reads as alive while anyone works
    /// on it.
    /// Returns the chunks this process still holds: one it held and that
    /// is not among them was taken by another process after its lease
    /// expired (this one was stopped, or cut off from the database).
    pub async fn host_heartbeat(
        &self,
        run_id: i64,
        sent: i64,
        stored: i64,
    ) -> Result<Vec<i64>, StoreError> {
        on!(&self.pool, |pool| {
            let mut tx = pool.begin().await?;
            sqlx::query(
                "UPDATE run_host SET heartbeat_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), sent = $4, stored = $5
                  WHERE run_id = $1 AND host = $2 AND pid = $3",
            )
            .bind(run_id)
            .bind(&self.owner.host)
            .bind(self.owner.pid)
            .bind(sent)
            .bind(stored)
            .execute(&mut *tx)
            .await?;
            let held: Vec<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "UPDATE run_lease SET expires_at = {}
                  WHERE run_id = $1 AND holder_host = $2 AND holder_pid = $3 AND done = 0
                  RETURNING chunk",
                expiry()
            )))
            .bind(run_id)
            .bind(&self.owner.host)
            .bind(self.owner.pid)
            .fetch_all(&mut *tx)
            .await?;
            sqlx::query(
                "UPDATE evaluation_run SET heartbeat_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = $1",
            )
            .bind(run_id)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(held)
        })
    }

    /// Cuts the run's plan of `planned` items into chunks, once (a second
    /// call, a joiner's or a resume's, adds nothing). A resume (`reset`)
    /// makes every chunk not done again: each is then checked against the
    /// stored results when taken, so what an earlier process left unjudged
    /// or unanswered is asked again.
    pub async fn plan_leases(
        &self,
        run_id: i64,
        planned: usize,
        reset: bool,
    ) -> Result<(), StoreError> {
        let chunks = planned.div_ceil(LEASE_CHUNK) as i64;
        on!(&self.pool, |pool| {
            let mut tx = pool.begin().await?;
            if reset {
                sqlx::query(
                    "UPDATE run_lease SET done = 0, holder_host = NULL, holder_pid = NULL, expires_at = NULL WHERE run_id = $1",
                )
                .bind(run_id)
                .execute(&mut *tx)
                .await?;
            }
            // `WHERE true`: SQLite reads ON CONFLICT after a bare SELECT
            // as part of a join.
            sqlx::query(
                "WITH RECURSIVE c(n) AS (SELECT CAST(0 AS BIGINT) UNION ALL SELECT n + 1 FROM c WHERE n + 1 < $2)
                 INSERT INTO run_lease (run_id, chunk)
                 SELECT $1, n FROM c WHERE $2 > 0 ON CONFLICT (run_id, chunk) DO NOTHING",
            )
            .bind(run_id)
            .bind(chunks)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// Takes the first chunk of the run that is not done and that nobody
    /// holds (or whose holder's lease expired): its number, or None when
    /// every chunk is done or held. Locked rows are skipped, so processes
    /// claiming at once take different chunks.
    pub async fn claim_chunk(&self, run_id: i64) -> Result<Option<i64>, StoreError> {
        on!(&self.pool, |pool, d| {
            let mut tx = pool.begin_with(d.begin_write()).await?;
            let chunk: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT chunk FROM run_lease
                  WHERE run_id = $1 AND done = 0 AND (holder_host IS NULL OR expires_at < julianday('now'))
                  ORDER BY chunk LIMIT 1{}",
                d.pick("", " FOR UPDATE SKIP LOCKED")
            )))
            .bind(run_id)
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(c) = chunk {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "UPDATE run_lease SET holder_host = $3, holder_pid = $4, expires_at = {}
                      WHERE run_id = $1 AND chunk = $2",
                    expiry()
                )))
                .bind(run_id)
                .bind(c)
                .bind(&self.owner.host)
                .bind(self.owner.pid)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(chunk)
        })
    }

    /// Marks a chunk done: every case of it is stored.
    pub async fn chunk_done(&self, run_id: i64, chunk: i64) -> Result<(), StoreError> {
        on!(&self.pool, |pool| {
            sqlx::query(
                "UPDATE run_lease SET done = 1, holder_host = NULL, holder_pid = NULL, expires_at = NULL
                  WHERE run_id = $1 AND chunk = $2",
            )
            .bind(run_id)
            .bind(chunk)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// Of the (test code, repeat) pairs asked, those stored for the run,
    /// each with whether its judge failed (asked again, replacing it).
    pub async fn stored_among(
        &self,
        run_id: i64,
        codes: &[String],
    ) -> Result<HashMap<(String, i64), bool>, StoreError> {
        if codes.is_empty() {
            return Ok(HashMap::new());
        }
        let marks: Vec<String> = (0..codes.len()).map(|i| format!("${}", i + 2)).collect();
        let sql = format!(
            "SELECT test_code, repeat_index, CAST(CASE WHEN error_kind = 'judge' THEN 1 ELSE 0 END AS BIGINT) AS judge
               FROM result WHERE run_id = $1 AND test_code IN ({})",
            marks.join(", ")
        );
        let args: Vec<Arg> = codes.iter().map(|c| Arg::from(c.as_str())).collect();
        let rows: Vec<(String, i64, i64)> = on!(&self.pool, |pool| {
            bind_args!(
                sqlx::query_as(sqlx::AssertSqlSafe(sql.clone())).bind(run_id),
                args.clone()
            )
            .fetch_all(pool)
            .await?
        });
        Ok(rows.into_iter().map(|(c, r, j)| ((c, r), j == 1)).collect())
    }

    /// Every run's processes, by run, first seen first.
    pub async fn all_run_hosts(&self) -> Result<HashMap<i64, Vec<RunHost>>, StoreError> {
        let rows: Vec<RunHostRow> = on!(&self.pool, |pool| {
            sqlx::query_as(
                "SELECT run_id, host, pid, started, (julianday('now') - julianday(heartbeat_at)) * 86400.0 AS age,
                        sent, stored, left_at
                   FROM run_host ORDER BY run_id, first_seen, host, pid",
            )
            .fetch_all(pool)
            .await?
        });
        let mut by_run: HashMap<i64, Vec<RunHost>> = HashMap::new();
        for (id, h, p, s, a, se, st, l) in rows {
            by_run
                .entry(id)
                .or_default()
                .push(self.host_of((h, p, s, a, se, st, l)));
        }
        Ok(by_run)
    }

    fn host_of(&self, (host, pid, started, age, sent, stored, left): HostRow) -> RunHost {
        let live = left.is_none()
            && if host == self.owner.host {
                pid == self.owner.pid || pid_alive(pid, started)
            } else {
                age < STALE_AFTER_S
            };
        RunHost {
            host,
            pid,
            heartbeat_age_s: age.max(0.0),
            sent,
            stored,
            live,
        }
    }

    /// This process leaves a lease-managed run, and records how it ended
    /// unless another process still works on it: `completed` is always
    /// recorded (nothing is left to anyone); any other end only by the
    /// last process. Returns the processes still on it (empty when the
    /// status was recorded). Finishers are serialised on the run's row, so
    /// two that end together cannot both leave it to the other.
    pub async fn leave_run(
        &self,
        run_id: i64,
        status: RunStatus,
        message: Option<&str>,
    ) -> Result<Vec<String>, StoreError> {
        on!(&self.pool, |pool, d| {
            let mut tx = pool.begin_with(d.begin_write()).await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT id FROM evaluation_run WHERE id = $1{}",
                d.pick("", " FOR UPDATE")
            )))
            .bind(run_id)
            .fetch_optional(&mut *tx)
            .await?;
            sqlx::query(
                "UPDATE run_host SET left_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), heartbeat_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
                  WHERE run_id = $1 AND host = $2 AND pid = $3",
            )
            .bind(run_id)
            .bind(&self.owner.host)
            .bind(self.owner.pid)
            .execute(&mut *tx)
            .await?;
            // Our own leases go back at once: another process need not wait
            // for them to expire.
            sqlx::query(
                "UPDATE run_lease SET holder_host = NULL, holder_pid = NULL, expires_at = NULL
                  WHERE run_id = $1 AND holder_host = $2 AND holder_pid = $3 AND done = 0",
            )
            .bind(run_id)
            .bind(&self.owner.host)
            .bind(self.owner.pid)
            .execute(&mut *tx)
            .await?;
            let rows: Vec<HostRow> = sqlx::query_as(
                "SELECT host, pid, started, (julianday('now') - julianday(heartbeat_at)) * 86400.0 AS age,
                        sent, stored, left_at
                   FROM run_host WHERE run_id = $1",
            )
            .bind(run_id)
            .fetch_all(&mut *tx)
            .await?;
            let others: Vec<String> = rows
                .into_iter()
                .map(|h| self.host_of(h))
                .filter(|h| h.live && !(h.host == self.owner.host && h.pid == self.owner.pid))
                .map(|h| format!("pid {} on {}", h.pid, h.host))
                .collect();
            if status == RunStatus::Completed || others.is_empty() {
                sqlx::query(
                    "UPDATE evaluation_run SET status = $1, message = $2,
                            completed_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = $3",
                )
                .bind(status)
                .bind(message)
                .bind(run_id)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(if status == RunStatus::Completed {
                Vec::new()
            } else {
                others
            })
        })
    }
}

impl Store {
    /// Frees the leases of processes of this host that are gone (a dead
    /// pid cannot be working): their chunks need not wait for expiry.
    pub async fn release_dead_holders(&self, run_id: i64) -> Result<(), StoreError> {
        on!(&self.pool, |pool| {
            let holders: Vec<(i64, Option<i64>)> = sqlx::query_as(
                "SELECT DISTINCT l.holder_pid, h.started FROM run_lease l
                   LEFT JOIN run_host h ON h.run_id = l.run_id AND h.host = l.holder_host AND h.pid = l.holder_pid
                  WHERE l.run_id = $1 AND l.done = 0 AND l.holder_host = $2 AND l.holder_pid <> $3",
            )
            .bind(run_id)
            .bind(&self.owner.host)
            .bind(self.owner.pid)
            .fetch_all(pool)
            .await?;
            for (pid, started) in holders {
                if pid_alive(pid, started) {
                    continue;
                }
                sqlx::query(
                    "UPDATE run_lease SET holder_host = NULL, holder_pid = NULL, expires_at = NULL
                      WHERE run_id = $1 AND done = 0 AND holder_host = $2 AND holder_pid = $3",
                )
                .bind(run_id)
                .bind(&self.owner.host)
                .bind(pid)
                .execute(pool)
                .await?;
            }
            Ok(())
        })
    }

    /// The run's chunks not done, and of those, how many this process
    /// holds with a lease that has not expired.
    pub async fn chunks_held(&self, run_id: i64) -> Result<(i64, i64), StoreError> {
        on!(&self.pool, |pool| {
            let left: i64 =
                sqlx::query_scalar("SELECT count(*) FROM run_lease WHERE run_id = $1 AND done = 0")
                    .bind(run_id)
                    .fetch_one(pool)
                    .await?;
            let held: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM run_lease WHERE run_id = $1 AND done = 0
                    AND holder_host IS NOT NULL AND expires_at >= julianday('now')
                    AND holder_host = $2 AND holder_pid = $3",
            )
            .bind(run_id)
            .bind(&self.owner.host)
            .bind(self.owner.pid)
            .fetch_one(pool)
            .await?;
            Ok((left, held))
        })
    }
}

impl Store {
    /// Whether the run's work is handed out in leases (it has chunks).
    pub async fn has_leases(&self, run_id: i64) -> Result<bool, StoreError> {
        on!(&self.pool, |pool| {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM run_lease WHERE run_id = $1")
                .bind(run_id)
                .fetch_one(pool)
                .await?;
            Ok(n > 0)
        })
    }
}
