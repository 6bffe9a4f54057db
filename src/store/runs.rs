//! Runs: a run is created (or claimed by a resume) before the first
//! request, kept alive by heartbeats from its owning process while it runs,
//! and finished with totals recomputed from its results. Also the run row
//! as `runs` and reports show it, and the owner logic that tells a live
//! run from one whose process is gone.

use std::path::Path;
use std::time::Duration;

use super::backend::on;
use super::decode::Row;
use serde_json::Value;

use super::{Store, StoreError};

use crate::domain::{RunRecord, RunStatus};

/// A run as read with its owner: what tells a live run from one whose
/// process is gone. Readers outside the store get only the [`RunRecord`].
#[derive(Debug, Clone, sqlx::FromRow)]
pub(super) struct OwnedRun {
    #[sqlx(flatten)]
    pub(super) run: RunRecord,
    owner_host: Option<String>,
    owner_pid: Option<i64>,
    owner_started: Option<i64>,
    /// Seconds since the owner's last heartbeat; None before migration 2.
    heartbeat_age_s: Option<f64>,
    /// Seconds since the latest heartbeat of a process that joined the run
    /// (`--join`, the team store) and has not left it; None without one.
    joined_age_s: Option<f64>,
}

/// A run decoded by column name (the columns of [`run_sql`]).
impl<R: Row> sqlx::FromRow<'_, R> for RunRecord {
    fn from_row(r: &R) -> Result<Self, sqlx::Error> {
        Ok(RunRecord {
            run_id: r.col("run_id")?,
            model: r.col("model")?,
            kind: r.col("kind")?,
            status: r.col("status")?,
            started_at: r.col("started_at")?,
            completed_at: r.col("completed_at")?,
            planned_test_cases: r.col("planned_test_cases")?,
            test_cases: r.col("test_cases")?,
            passed: r.col("passed")?,
            evaluations: r.col("evaluations")?,
            passed_evaluations: r.col("passed_evaluations")?,
            format_failures: r.col("format_failures")?,
            judge_errors: r.col("judge_errors")?,
            provider_errors: r.col("provider_errors")?,
            blocked: r.col("blocked")?,
            refused: r.col("refused")?,
            cached_replies: r.col("cached_replies")?,
            cost_usd: r.col("cost_usd")?,
            judge_cost_usd: r.col("judge_cost_usd")?,
            byok_cost_usd: r.col("byok_cost_usd")?,
            prompt_tokens: r.col("prompt_tokens")?,
            completion_tokens: r.col("completion_tokens")?,
            settings: r.col("settings")?,
            benchmark_hash: r.col("benchmark_hash")?,
            message: r.col("message")?,
            max_cost_usd: r.col("max_cost_usd")?,
            discarded_cost_usd: r.col("discarded_cost_usd")?,
            unknown_cost_calls: r.col("unknown_cost_calls")?,
        })
    }
}

/// How often a process running a run says it is alive, and how long a
/// silence means it is gone (a process on another host, or a reused pid).
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);
pub const STALE_AFTER_S: f64 = 30.0;

/// This process, as a run's owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub host: String,
    pub pid: i64,
    /// When the process started (see [`process_started`]); None without /proc.
    pub started: Option<i64>,
}

impl Owner {
    /// This process; its host is `HELMBENCH_HOST` when set (machines, or
    /// containers, that share one hostname must tell themselves apart on
    /// the team store), else the hostname.
    pub fn this_process() -> Owner {
        let named = std::env::var("HELMBENCH_HOST")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty());
        let host = named
            .map(Ok)
            .unwrap_or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname"))
            .or_else(|_| std::fs::read_to_string("/etc/hostname"))
            .ok()
            .map(|h| h.trim().to_string())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .or_else(|| std::env::var("COMPUTERNAME").ok())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "unknown-host".into());
        let pid = i64::from(std::process::id());
        Owner {
            host,
            pid,
            started: process_started(pid),
        }
    }
}

impl OwnedRun {
    /// Whether a process other than `me` is running this run now: its status
    /// is `running` and, on this host, its process is alive (also when
    /// stopped with Ctrl-Z or stalled on a database lock, whatever its
    /// heartbeat says); on another host, it beat in the last
    /// [`STALE_AFTER_S`] seconds.
    pub fn live_owner(&self, me: &Owner) -> Option<String> {
        if self.run.status != RunStatus::Running {
            return None;
        }
        let joined = || {
            self.joined_age_s
                .filter(|a| *a < STALE_AFTER_S)
                .map(|a| format!("processes that joined it, last heard {a:.0} s ago"))
        };
        let (Some(host), Some(pid)) = (self.owner_host.as_deref(), self.owner_pid) else {
            return joined();
        };
        let heard = match self.heartbeat_age_s {
            Some(age) => format!("last heard {age:.0} s ago"),
            None => "never heard".to_string(),
        };
        if host == me.host {
            if pid == me.pid || !pid_alive(pid, self.owner_started) {
                return joined();
            }
            return Some(format!("pid {pid} on {host}, alive; {heard}"));
        }
        match self.heartbeat_age_s.filter(|a| *a < STALE_AFTER_S) {
            Some(_) => Some(format!("pid {pid} on {host}, {heard}")),
            None => joined(),
        }
    }

    /// A `running` run whose process is gone shows as `interrupted`; the
    /// stored status stays until a resume claims the run.
    pub(super) fn settle(self, me: &Owner) -> RunRecord {
        let live = self.live_owner(me).is_some() || self.is_ours(me);
        let mut run = self.run;
        if run.status == RunStatus::Running && !live {
            run.status = RunStatus::Interrupted;
            if run.message.is_none() {
                run.message = Some(
                    "the process running it stopped without finishing; resume it with run-batch --resume"
                        .into(),
                );
            }
        }
        run
    }

    fn is_ours(&self, me: &Owner) -> bool {
        self.owner_host.as_deref() == Some(me.host.as_str()) && self.owner_pid == Some(me.pid)
    }
}

/// Whether the process `pid` (started at `started`, when known) exists on
/// this host and has not exited: a stopped process (Ctrl-Z, SIGSTOP) is
/// alive, a zombie is not, and a pid reused by a process that started at
/// another time is not the owner. Without /proc (not Linux) every pid is
/// assumed alive.
pub(super) fn pid_alive(pid: i64, started: Option<i64>) -> bool {
    if !Path::new("/proc/self").exists() {
        return true;
    }
    let Some((state, start)) = proc_stat(pid) else {
        return false;
    };
    !matches!(state, 'Z' | 'X' | 'x') && started.is_none_or(|s| s == start)
}

/// The state letter and start time (clock ticks after boot) of a process,
/// from /proc/PID/stat.
fn proc_stat(pid: i64) -> Option<(char, i64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: the
    // fields after it start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 22 overall is the 20th after the name.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// When process `pid` started (clock ticks after boot); None without /proc.
pub fn process_started(pid: i64) -> Option<i64> {
    proc_stat(pid).map(|(_, start)| start)
}
impl Store {
    /// Starts a run; its status is `running` until [`Store::finish_run`].
    pub async fn create_run(
        &self,
        benchmark_id: i64,
        model: &str,
        kind: &str,
        settings: &Value,
        planned_test_cases: i64,
        max_cost_usd: Option<f64>,
    ) -> Result<i64, StoreError> {
        on!(&self.pool, |pool, d| {
            let mut tx = pool.begin_with(d.begin_write()).await?;
            sqlx::query("INSERT INTO llm (model_id) VALUES ($1) ON CONFLICT(model_id) DO NOTHING")
                .bind(model)
                .execute(&mut *tx)
                .await?;
            let id: i64 = sqlx::query_scalar(
            "INSERT INTO evaluation_run (benchmark_id, llm_id, kind, status, settings, tool_version, total_test_cases, owner_host, owner_pid, owner_started, max_cost_usd, heartbeat_at)
             VALUES ($1, (SELECT id FROM llm WHERE model_id = $2), $3, $4, $5, $6, $7, $8, $9, $10, $11, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) RETURNING id",
        )
        .bind(benchmark_id)
        .bind(model)
        .bind(kind)
        .bind(RunStatus::Running)
        .bind(settings.to_string())
        .bind(env!("CARGO_PKG_VERSION"))
        .bind(planned_test_cases)
        .bind(&self.owner.host)
        .bind(self.owner.pid)
        .bind(self.owner.started)
        .bind(max_cost_usd)
        .fetch_one(&mut *tx)
        .await?;
            tx.commit().await?;
            Ok(id)
        })
    }

    /// Takes a run over for `--resume`: refused while another live process
    /// runs it (both would pay for the same test cases). `max_cost_usd`,
    /// when given, becomes the run's budget (its total, what was already
    /// spent included); otherwise the budget it was started with stays.
    /// Refuses, as [`Store::claim_run`] would, a run another live process
    /// owns, with a read alone: it answers while another program holds the
    /// write lock, where the claim itself would wait for it.
    pub async fn refuse_if_owned(&self, run_id: i64) -> Result<(), StoreError> {
        on!(&self.pool, |pool, d| {
            let row = sqlx::query_as::<_, OwnedRun>(sqlx::AssertSqlSafe(run_sql()))
                .bind(run_id)
                .bind(run_id)
                .fetch_optional(pool)
                .await?;
            match row.and_then(|r| r.live_owner(&self.owner)) {
                Some(owner) => Err(StoreError::Busy(format!(
                    "run {run_id} is being run by another helmbench ({owner}); {}",
                    busy_hint(d, run_id)
                ))),
                None => Ok(()),
            }
        })
    }

    pub async fn claim_run(
        &self,
        run_id: i64,
        max_cost_usd: Option<f64>,
    ) -> Result<(), StoreError> {
        on!(&self.pool, |pool, d| {
            // IMMEDIATE: two processes claiming at once are serialised here.
            let mut tx = pool.begin_with(d.begin_write()).await?;
            let row = sqlx::query_as::<_, OwnedRun>(sqlx::AssertSqlSafe(run_sql()))
                .bind(run_id)
                .bind(run_id)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| {
                    StoreError::NotFound(format!("no run with id {run_id} (see `helmbench runs`)"))
                })?;
            if let Some(owner) = row.live_owner(&self.owner) {
                return Err(StoreError::Busy(format!(
                    "run {run_id} is being run by another helmbench ({owner}); {}",
                    busy_hint(d, run_id)
                )));
            }
            sqlx::query(
            "UPDATE evaluation_run SET status = $1, completed_at = NULL, message = NULL,
               owner_host = $2, owner_pid = $3, owner_started = $4, max_cost_usd = COALESCE($5, max_cost_usd),
               heartbeat_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = $6",
        )
        .bind(RunStatus::Running)
        .bind(&self.owner.host)
        .bind(self.owner.pid)
        .bind(self.owner.started)
        .bind(max_cost_usd)
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// Marks `interrupted` the runs a process of this host left `running`
    /// and is gone (killed, or it exited while a lock outlasted its wait):
    /// what `runs` shows already, now stored, so every reader of the table
    /// agrees. Best effort on a writer's open: a database busy now is left
    /// for the next one (the runs still show as interrupted).
    pub(super) async fn settle_gone_runs(&self) {
        on!(&self.pool, |pool, d| {
            let rows: Vec<(i64, i64, Option<i64>)> = match sqlx::query_as(
                "SELECT id, owner_pid, owner_started FROM evaluation_run
              WHERE status = $1 AND owner_host = $2 AND owner_pid IS NOT NULL",
            )
            .bind(RunStatus::Running)
            .bind(&self.owner.host)
            .fetch_all(pool)
            .await
            {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::debug!(error = %e, "runs left running not read");
                    return;
                }
            };
            for (id, pid, started) in rows {
                if pid == self.owner.pid || pid_alive(pid, started) {
                    continue;
                }
                let marked = sqlx::query(
                "UPDATE evaluation_run SET status = $1, completed_at = COALESCE(completed_at, heartbeat_at),
                        message = COALESCE(message, $2)
                  WHERE id = $3 AND status = $4 AND owner_host = $5 AND owner_pid = $6
                    AND NOT EXISTS (SELECT 1 FROM run_host h WHERE h.run_id = evaluation_run.id AND h.left_at IS NULL
                          AND NOT (h.host = $5 AND h.pid = $6)
                          AND (julianday('now') - julianday(h.heartbeat_at)) * 86400.0 < $7)",
            )
            .bind(RunStatus::Interrupted)
            .bind("the process running it stopped without finishing; resume it with run-batch --resume")
            .bind(id)
            .bind(RunStatus::Running)
            .bind(&self.owner.host)
            .bind(pid)
            .bind(STALE_AFTER_S)
            .execute(pool)
            .await;
                if let Err(e) = marked {
                    tracing::debug!(run_id = id, error = %e, "a run left running not marked");
                    return;
                }
            }
        })
    }

    /// Says this process still runs `run_id`. False when another process
    /// has taken the run over (it judged this one gone): stop sending.
    pub async fn heartbeat(&self, run_id: i64) -> Result<bool, StoreError> {
        on!(&self.pool, |pool, d| {
            let n = sqlx::query(
                "UPDATE evaluation_run SET heartbeat_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
             WHERE id = $1 AND owner_host = $2 AND owner_pid = $3",
            )
            .bind(run_id)
            .bind(&self.owner.host)
            .bind(self.owner.pid)
            .execute(pool)
            .await?
            .rows_affected();
            Ok(n == 1)
        })
    }

    /// Records the end of a run (its totals are kept as results are
    /// written: see `totals.rs`; the old total columns of `evaluation_run`
    /// are no longer written or read).
    pub async fn finish_run(
        &self,
        run_id: i64,
        status: RunStatus,
        message: Option<&str>,
    ) -> Result<(), StoreError> {
        on!(&self.pool, |pool, d| {
            let mut tx = pool.begin_with(d.begin_write()).await?;
            // Only the owner ends a run: a process that lost it to a resume
            // elsewhere must not mark the other's run finished.
            sqlx::query("UPDATE evaluation_run SET status = $1, message = $2, completed_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
                     WHERE id = $3 AND owner_host IS NOT DISTINCT FROM $4 AND owner_pid IS NOT DISTINCT FROM $5")
            .bind(status)
            .bind(message)
            .bind(run_id)
            .bind(&self.owner.host)
            .bind(self.owner.pid)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        })
    }
}

/// What to do about a run another live process runs: on the team store,
/// join it; on SQLite, wait.
fn busy_hint(d: super::backend::Dialect, run_id: i64) -> String {
    d.pick(
        "wait for it to finish, or stop it and resume again".to_string(),
        format!(
            "join it with `helmbench run-batch --join {run_id}` (work is shared in leases), wait for it to finish, or stop it and resume again"
        ),
    )
}

/// One run with its totals (binds: the run's id twice).
pub(super) fn run_sql() -> String {
    format!("{} WHERE er.id = $1", runs_query("WHERE run_id = $1"))
}

/// A run with its totals, summed over its few `run_total` rows (one per
/// scenario), never over its results. `{filter}` narrows the totals to
/// the run asked for, so a single run's read touches only its own rows.
pub(super) fn runs_query(filter: &str) -> String {
    format!(
        "SELECT er.id AS run_id, l.model_id AS model, er.kind, er.status, er.started_at, er.completed_at,
    er.total_test_cases AS planned_test_cases,
    COALESCE(t.test_cases, 0) AS test_cases, COALESCE(t.passed, 0) AS passed,
    COALESCE(t.evaluations, 0) AS evaluations, COALESCE(t.passed_evaluations, 0) AS passed_evaluations,
    COALESCE(t.format_failures, 0) AS format_failures, COALESCE(t.judge_errors, 0) AS judge_errors,
    COALESCE(t.provider_errors, 0) AS provider_errors, COALESCE(t.cached_replies, 0) AS cached_replies,
    COALESCE(t.blocked, 0) AS blocked, COALESCE(t.refused, 0) AS refused,
    COALESCE(t.cost_usd, 0.0) AS cost_usd, COALESCE(t.judge_cost_usd, 0.0) AS judge_cost_usd,
    COALESCE(t.prompt_tokens, 0) AS prompt_tokens, COALESCE(t.completion_tokens, 0) AS completion_tokens,
    COALESCE(t.byok_cost_usd, 0.0) AS byok_cost_usd,
    er.settings, b.content_hash AS benchmark_hash, er.message,
    er.max_cost_usd, COALESCE(t.discarded_cost_usd, 0.0) AS discarded_cost_usd,
    COALESCE(t.unknown_cost_calls, 0) AS unknown_cost_calls,
    er.owner_host, er.owner_pid, er.owner_started,
    (julianday('now') - julianday(er.heartbeat_at)) * 86400.0 AS heartbeat_age_s,
    (SELECT min((julianday('now') - julianday(h.heartbeat_at)) * 86400.0) FROM run_host h
      WHERE h.run_id = er.id AND h.left_at IS NULL
        AND NOT (h.host = er.owner_host AND h.pid = er.owner_pid)) AS joined_age_s
  FROM evaluation_run er
  JOIN llm l ON l.id = er.llm_id
  JOIN benchmark b ON b.id = er.benchmark_id
  LEFT JOIN (SELECT run_id, SUM(test_cases) AS test_cases, SUM(passed) AS passed,
                    SUM(evaluations) AS evaluations, SUM(passed_evaluations) AS passed_evaluations,
                    SUM(format_failures) AS format_failures, SUM(judge_errors) AS judge_errors,
                    SUM(provider_errors) AS provider_errors, SUM(blocked) AS blocked, SUM(refused) AS refused,
                    SUM(cached_replies) AS cached_replies,
                    -- All that was billed: fees plus, with bring-your-own-key, the upstream part.
                    SUM(cost_usd + byok_cost_usd + discarded_model_usd) AS cost_usd,
                    SUM(judge_cost_usd + judge_byok_cost_usd + discarded_judge_usd) AS judge_cost_usd,
                    SUM(byok_cost_usd + judge_byok_cost_usd) AS byok_cost_usd,
                    SUM(discarded_model_usd + discarded_judge_usd) AS discarded_cost_usd,
                    SUM(cost_unknown + judge_cost_unknown + discarded_unknown) AS unknown_cost_calls,
                    SUM(prompt_tokens) AS prompt_tokens, SUM(completion_tokens) AS completion_tokens
               FROM run_total {filter} GROUP BY run_id) t ON t.run_id = er.id"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_pid_counts_only_with_its_own_start_time() {
        if !Path::new("/proc/self").exists() {
            return;
        }
        let me = i64::from(std::process::id());
        let started = process_started(me).expect("our own start time");
        assert!(pid_alive(me, None));
        assert!(pid_alive(me, Some(started)));
        // The same pid, started at another time: a reused pid, not the owner.
        assert!(!pid_alive(me, Some(started + 1)));
        assert!(!pid_alive(i64::from(i32::MAX), None));
    }

    #[cfg(unix)]
    #[test]
    fn an_owner_on_this_host_is_live_while_its_pid_is_whatever_its_heartbeat() {
        let me = Owner::this_process();
        let parent = i64::from(std::os::unix::process::parent_id());
        let run = RunRecord {
            run_id: 1,
            model: "m".into(),
            kind: "batch".into(),
            status: RunStatus::Running,
            started_at: String::new(),
            completed_at: None,
            planned_test_cases: 0,
            test_cases: 0,
            passed: 0,
            evaluations: 0,
            passed_evaluations: 0,
            format_failures: 0,
            judge_errors: 0,
            provider_errors: 0,
            blocked: 0,
            refused: 0,
            cached_replies: 0,
            cost_usd: 0.0,
            judge_cost_usd: 0.0,
            byok_cost_usd: 0.0,
            prompt_tokens: 0,
            completion_tokens: 0,
            settings: String::new(),
            benchmark_hash: String::new(),
            message: None,
            max_cost_usd: None,
            discarded_cost_usd: 0.0,
            unknown_cost_calls: 0,
        };
        let mut row = OwnedRun {
            run,
            owner_host: Some(me.host.clone()),
            owner_pid: Some(parent),
            owner_started: process_started(parent),
            heartbeat_age_s: Some(3600.0),
            joined_age_s: None,
        };
        assert!(row.live_owner(&me).is_some(), "a stale heartbeat alone");
        row.owner_host = Some("elsewhere".into());
        assert!(
            row.live_owner(&me).is_none(),
            "another host: the heartbeat decides"
        );
        row.heartbeat_age_s = Some(1.0);
        assert!(row.live_owner(&me).is_some());
    }
}
