//! SQLite storage through sqlx (SPEC §5): opening with explicit options and
//! embedded migrations, idempotent seeding of benchmark content by content
//! hash, run bookkeeping, and batched result writes.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};

use crate::benchmark::{Benchmark, Component, ComponentKind, Scenario};

pub const DEFAULT_DATABASE_URL: &str = "sqlite://helmbench.db";

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open database {url}: {message}")]
    Open { url: String, message: String },
    #[error(
        "database {url} was written by a newer helmbench (it has migration {version}, unknown to this version); use a newer helmbench or another --database-url"
    )]
    NewerSchema { url: String, version: i64 },
    #[error(
        "database {url} was written by an older helmbench (migration {version} is not applied); read-only commands never change a database: run `helmbench migrate` first (it upgrades the file in place; keep a copy if an older helmbench must still read it)"
    )]
    OlderSchema { url: String, version: i64 },
    #[error(
        "database {url} has no helmbench tables (an empty file, or another program's database); pass the right --database-url"
    )]
    NotHelmbench { url: String },
    #[error("database {url} cannot be migrated: {message}")]
    Migrate { url: String, message: String },
    #[error("database query failed: {0}")]
    Query(#[from] sqlx::Error),
    #[error("{0}")]
    NotFound(String),
    #[error("database content is inconsistent: {0}")]
    Integrity(String),
    /// Another live process is running the run.
    #[error("{0}")]
    Busy(String),
    /// Results kept in a file for the next run could not be written or read.
    #[error("results kept for the next run: {0}")]
    Pending(String),
}

impl From<StoreError> for crate::Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(m) | StoreError::Busy(m) => crate::Error::Usage(m),
            other => crate::Error::Store(other.to_string()),
        }
    }
}

/// The database handle; cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    pool: SqlitePool,
    url: String,
    owner: Owner,
    /// The endpoint results written through this handle came from, and the
    /// only one whose cached replies it reuses; None reuses nothing.
    endpoint: Option<String>,
}

/// Ids of the seeded rows of one benchmark, by code.
#[derive(Debug, Clone, Default)]
pub struct SeedIds {
    pub benchmark_id: i64,
    pub scenarios: HashMap<String, i64>,
    /// By full code (`P1-B1-S1-C1`).
    pub conditions: HashMap<String, i64>,
    pub user_contexts: HashMap<String, i64>,
    pub perturbations: HashMap<String, i64>,
}

/// One judged criterion of a result.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NewJudgement {
    pub criterion: String,
    pub judge_model: String,
    pub verdict: Option<Value>,
    pub justification: Option<String>,
    pub passed: Option<bool>,
    pub error: Option<String>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// NaN when a judge call's cost was unusable: stored as unknown.
    pub cost_usd: f64,
    pub generation_id: Option<String>,
    pub cached: bool,
    pub request_hash: Option<String>,
    pub response: Option<String>,
}

/// What the provider charged for a request beyond the reply that was kept
/// (see the `discarded_charge` table).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DiscardedCharge {
    pub run_id: i64,
    pub scenario_id: Option<i64>,
    pub test_code: String,
    pub repeat_index: i64,
    /// `model` or `judge`.
    pub call: String,
    pub attempts: i64,
    pub cost_usd: f64,
    pub reason: Option<String>,
}

/// One test case's outcome, as the runner hands it to the writer.
/// (De)serialisable so results that cannot be written can be kept in a
/// file and written by the next run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NewResult {
    pub run_id: i64,
    pub test_code: String,
    pub repeat_index: i64,
    pub scenario_id: i64,
    pub condition_id: i64,
    pub user_context_id: Option<i64>,
    pub perturbation_id: i64,
    pub prompt_hash: String,
    pub prompt: String,
    pub request_hash: String,
    pub base_severity: f64,
    pub difficulty: f64,
    pub response: Option<String>,
    pub parsed: Option<Value>,
    pub matched: Option<bool>,
    pub passed: bool,
    /// `format`, `provider` or `judge`; None for a clean verdict.
    pub error_kind: Option<String>,
    pub error: Option<String>,
    pub evaluation_details: Value,
    pub latency_ms: Option<i64>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// NaN (or any value that is not finite) when the provider's figure was
    /// unusable: stored as an unknown cost.
    pub cost_usd: f64,
    pub upstream_cost_usd: Option<f64>,
    pub generation_id: Option<String>,
    pub finish_reason: Option<String>,
    pub attempts: i64,
    pub cached: bool,
    pub quality: Option<Value>,
    pub judgements: Vec<NewJudgement>,
    /// Charges of attempts retried or refused while getting this result.
    #[serde(default)]
    pub charges: Vec<DiscardedCharge>,
    /// Replaces a stored result of the same test case that has a judge
    /// error (a resume judging it again); the old row's costs are kept as
    /// a discarded charge.
    #[serde(default)]
    pub replaces: bool,
}

/// A reply already paid for, reusable for an identical request.
#[derive(Debug, Clone)]
pub struct CachedReply {
    pub response: String,
    pub finish_reason: Option<String>,
    pub generation_id: Option<String>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
}

/// A run as `runs` and reports show it, with totals from its results.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct RunRow {
    pub run_id: i64,
    pub model: String,
    pub kind: String,
    pub status: String,
    pub started_at: String,
    pub completed_at: Option<String>,
    pub planned_test_cases: i64,
    pub test_cases: i64,
    pub passed: i64,
    pub evaluations: i64,
    pub passed_evaluations: i64,
    pub format_failures: i64,
    pub judge_errors: i64,
    pub provider_errors: i64,
    pub cached_replies: i64,
    pub cost_usd: f64,
    pub judge_cost_usd: f64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub settings: String,
    pub benchmark_hash: String,
    pub message: Option<String>,
    /// The run's budget (`--max-cost`), if any.
    pub max_cost_usd: Option<f64>,
    /// The part of `cost_usd` + `judge_cost_usd` paid for replies that were
    /// retried or not kept (see `discarded_charge`).
    pub discarded_cost_usd: f64,
    #[serde(skip)]
    pub owner_host: Option<String>,
    #[serde(skip)]
    pub owner_pid: Option<i64>,
    #[serde(skip)]
    pub owner_started: Option<i64>,
    /// Seconds since the owner's last heartbeat; None before migration 2.
    #[serde(skip)]
    pub heartbeat_age_s: Option<f64>,
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
    pub fn this_process() -> Owner {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
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

impl RunRow {
    /// Whether a process other than `me` is running this run now: its status
    /// is `running` and, on this host, its process is alive (also when
    /// stopped with Ctrl-Z or stalled on a database lock, whatever its
    /// heartbeat says); on another host, it beat in the last
    /// [`STALE_AFTER_S`] seconds.
    pub fn live_owner(&self, me: &Owner) -> Option<String> {
        if self.status != "running" {
            return None;
        }
        let (host, pid) = (self.owner_host.as_deref()?, self.owner_pid?);
        let heard = match self.heartbeat_age_s {
            Some(age) => format!("last heard {age:.0} s ago"),
            None => "never heard".to_string(),
        };
        if host == me.host {
            if pid == me.pid || !pid_alive(pid, self.owner_started) {
                return None;
            }
            return Some(format!("pid {pid} on {host}, alive; {heard}"));
        }
        self.heartbeat_age_s.filter(|a| *a < STALE_AFTER_S)?;
        Some(format!("pid {pid} on {host}, {heard}"))
    }

    /// A `running` run whose process is gone shows as `interrupted`; the
    /// stored status stays until a resume claims the run.
    fn settle(mut self, me: &Owner) -> RunRow {
        if self.status == "running" && self.live_owner(me).is_none() && !self.is_ours(me) {
            self.status = "interrupted".into();
            if self.message.is_none() {
                self.message = Some(
                    "the process running it stopped without finishing; resume it with run-batch --resume"
                        .into(),
                );
            }
        }
        self
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
fn pid_alive(pid: i64, started: Option<i64>) -> bool {
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

/// Turns `--database-url` into connect options: a `sqlite:` URL, or a plain path.
fn connect_options(url: &str) -> Result<SqliteConnectOptions, StoreError> {
    Ok(base_options(url)?
        // New databases only (an existing one keeps its page size). Composed
        // prompts run 1.5-2.5 KB: on 4 KB pages only one fits per page, half
        // of it wasted; 8 KB pages hold three. Larger pages would pack a
        // little better but double again the bytes each random insert into
        // the hash indexes writes to the WAL.
        .page_size(8192)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(60))
        // The request-hash indexes take inserts at random keys, so every
        // batch dirties pages all over them. A bigger page cache keeps them
        // in memory (reads per result fell from 31 KB to 6 KB) and rarer
        // checkpoints copy each hot page from the WAL once, not many times.
        // The WAL can grow to 32 MB between checkpoints; it is truncated
        // back when the last connection closes.
        .pragma("wal_autocheckpoint", "4000")
        .pragma("cache_size", "-8192"))
}

/// The options a URL or path names, with its folder checked to exist.
fn base_options(url: &str) -> Result<SqliteConnectOptions, StoreError> {
    let opts = if url.starts_with("sqlite:") {
        SqliteConnectOptions::from_str(url).map_err(|e| StoreError::Open {
            url: url.into(),
            message: e.to_string(),
        })?
    } else {
        SqliteConnectOptions::new().filename(url)
    };
    let filename = opts.get_filename().to_path_buf();
    if filename.as_os_str() != ":memory:"
        && let Some(parent) = filename.parent()
        && !parent.as_os_str().is_empty()
        && !parent.is_dir()
    {
        return Err(StoreError::Open {
            url: url.into(),
            message: format!("folder {} does not exist", parent.display()),
        });
    }
    Ok(opts)
}

impl Store {
    /// Opens (creating if missing) and migrates the database.
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        let opts = connect_options(url)?;
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(opts)
            .await
            .map_err(|e| StoreError::Open {
                url: url.into(),
                message: describe_sqlx(&e),
            })?;
        // A newer helmbench's database must not be touched by this one.
        let applied: Vec<i64> = sqlx::query_scalar("SELECT version FROM _sqlx_migrations")
            .fetch_all(&pool)
            .await
            .unwrap_or_default();
        let known: HashSet<i64> = MIGRATOR.iter().map(|m| m.version).collect();
        if let Some(v) = applied.iter().find(|v| !known.contains(v)) {
            return Err(StoreError::NewerSchema {
                url: url.into(),
                version: *v,
            });
        }
        // Two processes opening a database at once both try to apply a
        // migration; the loser's transaction fails ("table ... already
        // exists", "duplicate column name") and rolls back whole. Running the migrator again
        // then finds the migration recorded by the winner and skips it.
        let mut attempt = 0u64;
        loop {
            match MIGRATOR.run(&pool).await {
                Ok(()) => break,
                Err(e) if attempt < 5 && lost_migration_race(&e) => {
                    attempt += 1;
                    tracing::debug!(attempt, error = %e, "migration raced another process; retrying");
                    tokio::time::sleep(Duration::from_millis(50 * attempt)).await;
                }
                Err(e) => {
                    return Err(StoreError::Migrate {
                        url: url.into(),
                        message: match &e {
                            sqlx::migrate::MigrateError::Execute(inner) => describe_sqlx(inner),
                            other => other.to_string(),
                        },
                    });
                }
            }
        }
        Ok(Store {
            pool,
            url: url.to_string(),
            owner: Owner::this_process(),
            endpoint: None,
        })
    }

    /// This handle, recording `endpoint` (the request URL of the client that
    /// answers) with every result and judgement it writes, and reusing
    /// cached replies of that endpoint only.
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Store {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// Opens an existing database for reading only, for `runs`, `report`,
    /// `costs` and `export`: nothing is created, written or migrated.
    ///
    /// SQLite opens it with `mode=ro`; with `immutable=1` when no `-wal` or
    /// `-shm` file lies beside it and the file or its folder is read-only
    /// (an archived copy, a read-only mount), where `mode=ro` would need to
    /// create them, and as a fallback when `mode=ro` cannot open such a file.
    /// A database without every migration of this version is refused with
    /// [`StoreError::OlderSchema`] (naming `helmbench migrate`); a newer
    /// one with [`StoreError::NewerSchema`].
    pub async fn open_read_only(url: &str) -> Result<Store, StoreError> {
        // A database another process is creating or upgrading shows no
        // tables, or only its first migrations, for a few milliseconds:
        // while a -wal file says a writer may be at work, look again (for up
        // to 5 s while it has no tables, 0.3 s while it is older) before
        // saying so.
        let started = tokio::time::Instant::now();
        loop {
            let opened = Store::try_open_read_only(url).await;
            let patience = match &opened {
                Err(StoreError::NotHelmbench { .. }) => Duration::from_secs(5),
                Err(StoreError::OlderSchema { .. }) => Duration::from_millis(300),
                _ => return opened,
            };
            if started.elapsed() >= patience || !sidecar(url, "-wal") {
                return opened;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn try_open_read_only(url: &str) -> Result<Store, StoreError> {
        let (pool, applied) = connect_read_only(url).await?;
        let known: HashSet<i64> = MIGRATOR.iter().map(|m| m.version).collect();
        if let Some((v, _)) = applied.iter().find(|(v, _)| !known.contains(v)) {
            return Err(StoreError::NewerSchema {
                url: url.into(),
                version: *v,
            });
        }
        let done: HashSet<i64> = applied
            .iter()
            .filter(|(_, ok)| *ok)
            .map(|(v, _)| *v)
            .collect();
        if let Some(m) = MIGRATOR.iter().find(|m| !done.contains(&m.version)) {
            return Err(StoreError::OlderSchema {
                url: url.into(),
                version: m.version,
            });
        }
        Ok(Store {
            pool,
            url: url.to_string(),
            owner: Owner::this_process(),
            endpoint: None,
        })
    }

    /// How many migrations of this version an existing database lacks,
    /// read without changing it (0 for a database this version cannot
    /// read: [`Store::open`] says why).
    pub async fn pending_migrations(url: &str) -> usize {
        let Ok((pool, applied)) = connect_read_only(url).await else {
            return 0;
        };
        pool.close().await;
        let done: HashSet<i64> = applied
            .iter()
            .filter(|(_, ok)| *ok)
            .map(|(v, _)| *v)
            .collect();
        MIGRATOR
            .iter()
            .filter(|m| !done.contains(&m.version))
            .count()
    }

    /// Closes every connection: the last one checkpoints the WAL into the
    /// database file and removes `-wal` and `-shm` (unless another process
    /// still has the database open).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The versions of the migrations applied to the database, oldest first.
    pub async fn applied_migrations(&self) -> Result<Vec<i64>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Writes the benchmark's content rows, adding a version only where a
    /// content hash is new. Idempotent; old versions are never rewritten.
    pub async fn seed(&self, b: &Benchmark) -> Result<SeedIds, StoreError> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let mut ids = SeedIds::default();
        sqlx::query("INSERT INTO benchmark (content_hash, root) VALUES (?, ?) ON CONFLICT(content_hash) DO NOTHING")
            .bind(&b.content_hash)
            .bind(b.root.display().to_string())
            .execute(&mut *tx)
            .await?;
        ids.benchmark_id = sqlx::query_scalar("SELECT id FROM benchmark WHERE content_hash = ?")
            .bind(&b.content_hash)
            .fetch_one(&mut *tx)
            .await?;
        for p in &b.pillars {
            sqlx::query("INSERT INTO pillar (code, name, description) VALUES (?, ?, ?) ON CONFLICT(code) DO UPDATE SET name = excluded.name, description = excluded.description")
                .bind(&p.code).bind(&p.name).bind(&p.description)
                .execute(&mut *tx).await?;
        }
        for bh in &b.behaviours {
            sqlx::query("INSERT INTO behaviour (pillar_id, code, name, description) VALUES ((SELECT id FROM pillar WHERE code = ?), ?, ?, ?) ON CONFLICT(code) DO UPDATE SET name = excluded.name, description = excluded.description")
                .bind(&bh.pillar).bind(&bh.code).bind(&bh.name).bind(&bh.description)
                .execute(&mut *tx).await?;
        }
        for s in &b.scenarios {
            let evaluation = serde_json::to_string(&s.evaluation).unwrap_or_default();
            let rf = s.response_format.as_ref().map(Value::to_string);
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO scenario (behaviour_id, code, content_hash, evaluation, prompt, response_format)
                 VALUES ((SELECT id FROM behaviour WHERE code = ?), ?, ?, ?, ?, ?)
                 ON CONFLICT(code, content_hash) DO UPDATE SET code = excluded.code RETURNING id",
            )
            .bind(&s.behaviour).bind(&s.code).bind(&s.hash).bind(evaluation).bind(&s.prompt).bind(rf)
            .fetch_one(&mut *tx)
            .await?;
            ids.scenarios.insert(s.code.clone(), id);
        }
        // Components go in many rows a statement: one statement a row cost a
        // round trip to SQLite's thread each, ~0.5 s for 5,000 components.
        let all = |f: fn(&Scenario) -> &[Component]| {
            b.scenarios
                .iter()
                .flat_map(move |s| f(s).iter().map(move |c| (s, c)))
                .collect::<Vec<_>>()
        };
        let conditions = all(|s| &s.conditions);
        let user_contexts = all(|s| &s.user_contexts);
        let perturbations = all(|s| &s.perturbations);
        for (kind, rows, slot) in [
            (ComponentKind::Condition, &conditions, &mut ids.conditions),
            (
                ComponentKind::UserContext,
                &user_contexts,
                &mut ids.user_contexts,
            ),
            (
                ComponentKind::Perturbation,
                &perturbations,
                &mut ids.perturbations,
            ),
        ] {
            *slot = upsert_components(&mut tx, kind, rows, &ids.scenarios).await?;
        }
        for (table, column, rows, component_ids) in [
            (
                "scenario_condition",
                "condition_id",
                &conditions,
                &ids.conditions,
            ),
            (
                "scenario_user_context",
                "user_context_id",
                &user_contexts,
                &ids.user_contexts,
            ),
        ] {
            for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                let mut q = sqlx::QueryBuilder::new(format!(
                    "INSERT OR IGNORE INTO {table} (scenario_id, {column}) "
                ));
                q.push_values(chunk, |mut row, (s, c)| {
                    row.push_bind(ids.scenarios[&s.code])
                        .push_bind(component_ids[&c.full_code]);
                });
                q.build().execute(&mut *tx).await?;
            }
        }
        tx.commit().await?;
        Ok(ids)
    }

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
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query("INSERT INTO llm (model_id) VALUES (?) ON CONFLICT(model_id) DO NOTHING")
            .bind(model)
            .execute(&mut *tx)
            .await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO evaluation_run (benchmark_id, llm_id, kind, status, settings, tool_version, total_test_cases, owner_host, owner_pid, owner_started, max_cost_usd, heartbeat_at)
             VALUES (?, (SELECT id FROM llm WHERE model_id = ?), ?, 'running', ?, ?, ?, ?, ?, ?, ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) RETURNING id",
        )
        .bind(benchmark_id)
        .bind(model)
        .bind(kind)
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
    }

    /// Takes a run over for `--resume`: refused while another live process
    /// runs it (both would pay for the same test cases). `max_cost_usd`,
    /// when given, becomes the run's budget (its total, what was already
    /// spent included); otherwise the budget it was started with stays.
    pub async fn claim_run(
        &self,
        run_id: i64,
        max_cost_usd: Option<f64>,
    ) -> Result<(), StoreError> {
        // IMMEDIATE: two processes claiming at once are serialised here.
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let row = sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(format!(
            "{} WHERE er.id = ?",
            runs_query("WHERE r.run_id = ?")
        )))
        .bind(run_id)
        .bind(run_id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| {
            StoreError::NotFound(format!("no run with id {run_id} (see `helmbench runs`)"))
        })?;
        if let Some(owner) = row.live_owner(&self.owner) {
            return Err(StoreError::Busy(format!(
                "run {run_id} is being run by another helmbench ({owner}); wait for it to finish, or stop it and resume again"
            )));
        }
        sqlx::query(
            "UPDATE evaluation_run SET status = 'running', completed_at = NULL, message = NULL,
               owner_host = ?, owner_pid = ?, owner_started = ?, max_cost_usd = COALESCE(?, max_cost_usd),
               heartbeat_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?",
        )
        .bind(&self.owner.host)
        .bind(self.owner.pid)
        .bind(self.owner.started)
        .bind(max_cost_usd)
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Says this process still runs `run_id`. False when another process
    /// has taken the run over (it judged this one gone): stop sending.
    pub async fn heartbeat(&self, run_id: i64) -> Result<bool, StoreError> {
        let n = sqlx::query(
            "UPDATE evaluation_run SET heartbeat_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
             WHERE id = ? AND owner_host = ? AND owner_pid = ?",
        )
        .bind(run_id)
        .bind(&self.owner.host)
        .bind(self.owner.pid)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n == 1)
    }

    /// Records the end of a run with its totals recomputed from its results.
    pub async fn finish_run(
        &self,
        run_id: i64,
        status: &str,
        message: Option<&str>,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        // Only the owner ends a run: a process that lost it to a resume
        // elsewhere must not mark the other's run finished.
        sqlx::query("UPDATE evaluation_run SET status = ?, message = ?, completed_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
                     WHERE id = ? AND owner_host IS ? AND owner_pid IS ?")
            .bind(status)
            .bind(message)
            .bind(run_id)
            .bind(&self.owner.host)
            .bind(self.owner.pid)
            .execute(&mut *tx)
            .await?;
        // Built only from constants: no user input reaches the SQL text.
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE evaluation_run SET
               completed_test_cases = t.test_cases, passed_test_cases = t.passed,
               total_evaluations = t.evaluations, passed_evaluations = t.passed_evaluations,
               format_failures = t.format_failures, judge_errors = t.judge_errors, provider_errors = t.provider_errors,
               cached_replies = t.cached_replies, cost_usd = t.cost_usd, judge_cost_usd = t.judge_cost_usd,
               prompt_tokens = t.prompt_tokens, completion_tokens = t.completion_tokens
             FROM ({TOTALS} WHERE r.run_id = ? GROUP BY r.run_id) AS t WHERE evaluation_run.id = ?"
        )))
        .bind(run_id)
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE evaluation_run SET discarded_cost_usd = (SELECT COALESCE(SUM(cost_usd), 0.0) FROM discarded_charge WHERE run_id = ?1),
               cost_usd = (SELECT COALESCE(SUM(cost_usd), 0.0) FROM result WHERE run_id = ?1)
                 + (SELECT COALESCE(SUM(cost_usd), 0.0) FROM discarded_charge WHERE run_id = ?1 AND call = 'model'),
               judge_cost_usd = (SELECT COALESCE(SUM(j.cost_usd), 0.0) FROM judgement j JOIN result r ON r.id = j.result_id WHERE r.run_id = ?1)
                 + (SELECT COALESCE(SUM(cost_usd), 0.0) FROM discarded_charge WHERE run_id = ?1 AND call = 'judge')
             WHERE id = ?1",
        )
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

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
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT test_code, repeat_index FROM result WHERE run_id = ? AND ({filter})"
        )))
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<String, _>(0), r.get::<i64, _>(1)))
            .collect())
    }

    /// A successful, well-formed reply to an identical request sent to the
    /// same endpoint, if any.
    pub async fn cached_reply(
        &self,
        request_hash: &str,
    ) -> Result<Option<CachedReply>, StoreError> {
        let Some(endpoint) = &self.endpoint else {
            return Ok(None);
        };
        let row = sqlx::query(
            "SELECT response, finish_reason, generation_id, prompt_tokens, completion_tokens FROM result
             WHERE request_hash = ? AND endpoint = ? AND response IS NOT NULL AND (error_kind IS NULL OR error_kind = 'judge')
             ORDER BY id LIMIT 1",
        )
        .bind(request_hash)
        .bind(endpoint)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| CachedReply {
            response: r.get(0),
            finish_reason: r.get(1),
            generation_id: r.get(2),
            prompt_tokens: r.get(3),
            completion_tokens: r.get(4),
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
        for (table, set) in [("result", &mut out.0), ("judgement", &mut out.1)] {
            // Built from the two constant table names only.
            let sql = format!(
                "SELECT request_hash FROM {table} WHERE request_hash > ? ORDER BY request_hash LIMIT ?"
            );
            let mut after = String::new();
            loop {
                let page: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.clone()))
                    .bind(&after)
                    .bind(PAGE)
                    .fetch_all(&self.pool)
                    .await?;
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
        Ok(sqlx::query_scalar(
            "SELECT response FROM judgement WHERE request_hash = ? AND endpoint = ? AND response IS NOT NULL AND error IS NULL ORDER BY id LIMIT 1",
        )
        .bind(request_hash)
        .bind(endpoint)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Deletes a run's provider-error results so a resume sends them again.
    pub async fn clear_provider_errors(&self, run_id: i64) -> Result<u64, StoreError> {
        Ok(
            sqlx::query("DELETE FROM result WHERE run_id = ? AND error_kind = 'provider'")
                .bind(run_id)
                .execute(&self.pool)
                .await?
                .rows_affected(),
        )
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
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        for r in results.iter().filter(|r| r.replaces) {
            retire_judge_error(&mut tx, r).await?;
        }

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
            );
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
            for r in chunk {
                q = q.bind(&r.prompt_hash).bind(&r.prompt);
            }
            q.execute(&mut *tx).await?;
        }

        let mut written = 0usize;
        // Results with judgements need their id back, one row at a time; the
        // rest (every deterministic evaluation) go many rows per statement.
        let (plain, judged): (Vec<&NewResult>, Vec<&NewResult>) =
            results.iter().partition(|r| r.judgements.is_empty());
        for chunk in pow2_chunks(&plain, MAX_RESULT_ROWS) {
            let sql = values_sql(RESULT_INSERT, RESULT_COLUMNS, chunk.len(), RESULT_CONFLICT);
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
            for r in chunk {
                q = bind_result(q, r, self.endpoint.as_deref());
            }
            written += q.execute(&mut *tx).await?.rows_affected() as usize;
        }
        for r in judged {
            let sql = values_sql(
                RESULT_INSERT,
                RESULT_COLUMNS,
                1,
                &format!("{RESULT_CONFLICT} RETURNING id"),
            );
            let id: Option<i64> = bind_result(
                sqlx::query(sqlx::AssertSqlSafe(sql)),
                r,
                self.endpoint.as_deref(),
            )
            .fetch_optional(&mut *tx)
            .await?
            .map(|row| row.get(0));
            let Some(id) = id else { continue };
            written += 1;
            for j in &r.judgements {
                sqlx::query(
                    "INSERT INTO judgement (result_id, criterion, judge_model, verdict, justification, passed, error,
                       prompt_tokens, completion_tokens, cost_usd, generation_id, cached, request_hash, response,
                       endpoint, cost_unknown)
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                )
                .bind(id)
                .bind(&j.criterion)
                .bind(&j.judge_model)
                .bind(j.verdict.as_ref().map(Value::to_string))
                .bind(&j.justification)
                .bind(j.passed)
                .bind(&j.error)
                .bind(j.prompt_tokens)
                .bind(j.completion_tokens)
                .bind(known_cost(j.cost_usd))
                .bind(&j.generation_id)
                .bind(j.cached)
                .bind(&j.request_hash)
                .bind(&j.response)
                .bind(&self.endpoint)
                .bind(!j.cost_usd.is_finite())
                .execute(&mut *tx)
                .await?;
            }
        }
        for c in charges
            .iter()
            .chain(results.iter().flat_map(|r| &r.charges))
        {
            sqlx::query(
                "INSERT INTO discarded_charge (run_id, scenario_id, test_code, repeat_index, call, attempts, cost_usd, reason)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(c.run_id)
            .bind(c.scenario_id)
            .bind(&c.test_code)
            .bind(c.repeat_index)
            .bind(&c.call)
            .bind(c.attempts)
            .bind(c.cost_usd)
            .bind(&c.reason)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(written)
    }

    /// A second handle on the same database with its own connection and a
    /// short busy timeout, for a writer that must notice a lock held by
    /// another program within `busy` and decide what to do, rather than
    /// wait in SQLite for the pool's 60 s.
    /// An in-memory database has no second connection: the same handle.
    pub async fn with_busy_timeout(&self, busy: Duration) -> Result<Store, StoreError> {
        let opts = connect_options(&self.url)?.busy_timeout(busy);
        if opts.get_filename().as_os_str() == ":memory:" {
            return Ok(self.clone());
        }
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts)
            .await
            .map_err(|e| StoreError::Open {
                url: self.url.clone(),
                message: describe_sqlx(&e),
            })?;
        Ok(Store {
            pool,
            url: self.url.clone(),
            owner: self.owner.clone(),
            endpoint: self.endpoint.clone(),
        })
    }

    /// The file where results of `run_id` that could not be written are
    /// kept for the next run: beside the database. None for `:memory:`.
    pub fn pending_path(&self, run_id: i64) -> Option<PathBuf> {
        let opts = connect_options(&self.url).ok()?;
        let file = opts.get_filename();
        if file.as_os_str() == ":memory:" {
            return None;
        }
        Some(PathBuf::from(format!(
            "{}.run-{run_id}.pending.jsonl",
            file.display()
        )))
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
            .ok_or_else(|| StoreError::Pending("an in-memory database has no folder".into()))?;
        let io = |e: std::io::Error| StoreError::Pending(format!("{}: {e}", path.display()));
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
            serde_json::to_writer(&mut w, &p)
                .map_err(|e| StoreError::Pending(format!("{}: {e}", path.display())))?;
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
            Err(e) => return Err(StoreError::Pending(format!("{}: {e}", path.display()))),
        };
        let (mut results, mut charges) = (Vec::new(), Vec::new());
        // A line cut short by a crash while it was written is skipped.
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str::<Pending>(line) {
                Ok(Pending::Result(r)) => results.push(*r),
                Ok(Pending::Charge(c)) => charges.push(c),
                Err(e) => {
                    tracing::warn!(error = %e, path = %path.display(), "unreadable kept result skipped")
                }
            }
        }
        let n = results.len();
        for chunk in results.chunks(256) {
            self.write_results(chunk, &[]).await?;
        }
        self.write_results(&[], &charges).await?;
        std::fs::remove_file(&path)
            .map_err(|e| StoreError::Pending(format!("{}: {e}", path.display())))?;
        Ok(n)
    }

    /// How many results a run has stored.
    pub async fn count_results(&self, run_id: i64) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM result WHERE run_id = ?")
                .bind(run_id)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Every run, newest first, with totals computed from its results.
    pub async fn runs(&self) -> Result<Vec<RunRow>, StoreError> {
        Ok(sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(format!(
            "{} ORDER BY er.id DESC",
            runs_query("")
        )))
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .map(|r| r.settle(&self.owner))
        .collect())
    }

    pub async fn run(&self, run_id: i64) -> Result<RunRow, StoreError> {
        sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(format!(
            "{} WHERE er.id = ?",
            runs_query("WHERE r.run_id = ?")
        )))
        .bind(run_id)
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await?
        .map(|r| r.settle(&self.owner))
        .ok_or_else(|| {
            StoreError::NotFound(format!("no run with id {run_id} (see `helmbench runs`)"))
        })
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
async fn retire_judge_error(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    r: &NewResult,
) -> Result<(), StoreError> {
    const REASON: &str = "a result with a judge error, judged again by a resume";
    // The reply's cost, its judgements' costs, then the row itself.
    for sql in [
        "INSERT INTO discarded_charge (run_id, scenario_id, test_code, repeat_index, call, attempts, cost_usd, reason)
         SELECT run_id, scenario_id, test_code, repeat_index, 'model', 1, cost_usd, ?4 FROM result
         WHERE run_id = ?1 AND test_code = ?2 AND repeat_index = ?3 AND error_kind = 'judge' AND cost_usd > 0",
        "INSERT INTO discarded_charge (run_id, scenario_id, test_code, repeat_index, call, attempts, cost_usd, reason)
         SELECT r.run_id, r.scenario_id, r.test_code, r.repeat_index, 'judge', COUNT(*), SUM(j.cost_usd), ?4
         FROM judgement j JOIN result r ON r.id = j.result_id
         WHERE r.run_id = ?1 AND r.test_code = ?2 AND r.repeat_index = ?3 AND r.error_kind = 'judge'
         GROUP BY r.id HAVING SUM(j.cost_usd) > 0",
        "DELETE FROM result WHERE run_id = ?1 AND test_code = ?2 AND repeat_index = ?3 AND error_kind = 'judge'
           AND ?4 IS NOT NULL",
    ] {
        sqlx::query(sql)
            .bind(r.run_id)
            .bind(&r.test_code)
            .bind(r.repeat_index)
            .bind(REASON)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

/// A 64-bit key of a request hash (FNV-1a), for [`Store::request_keys`].
pub fn request_key(hash: &str) -> u64 {
    hash.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Rows per multi-row INSERT, at most: well under SQLite's 32,766 bound
/// variables (28 columns x 64 rows = 1,792).
const MAX_RESULT_ROWS: usize = 64;
const MAX_PROMPT_ROWS: usize = 128;

const RESULT_INSERT: &str = "INSERT INTO result (run_id, test_code, repeat_index, scenario_id, condition_id, user_context_id, perturbation_id,
   prompt_hash, request_hash, base_severity, difficulty, response, parsed, matched, passed, error_kind, error,
   evaluation_details, latency_ms, prompt_tokens, completion_tokens, cost_usd, upstream_cost_usd, generation_id,
   finish_reason, attempts, cached, quality, endpoint, cost_unknown) VALUES ";
const RESULT_COLUMNS: usize = 30;
const RESULT_CONFLICT: &str = " ON CONFLICT(run_id, test_code, repeat_index) DO NOTHING";

/// `head` + `rows` groups of `columns` placeholders + `tail`. Built only
/// from constants and counts: no user input reaches the SQL text.
fn values_sql(head: &str, columns: usize, rows: usize, tail: &str) -> String {
    let group = format!("({})", vec!["?"; columns].join(", "));
    let mut sql = String::with_capacity(head.len() + rows * (group.len() + 2) + tail.len());
    sql.push_str(head);
    for i in 0..rows {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&group);
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

type SqliteQuery = sqlx::query::Query<'static, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>;

/// A cost as stored: the figure, or 0 when it is unknown (NaN, or any
/// other value that is not finite: SQLite would store NaN as NULL and
/// fail the whole batch on the NOT NULL column).
fn known_cost(c: f64) -> f64 {
    if c.is_finite() { c } else { 0.0 }
}

/// Binds one result's 30 values in `RESULT_INSERT` column order.
fn bind_result(q: SqliteQuery, r: &NewResult, endpoint: Option<&str>) -> SqliteQuery {
    q.bind(r.run_id)
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
        .bind(r.matched)
        .bind(r.passed)
        .bind(r.error_kind.clone())
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
        .bind(r.cached)
        .bind(r.quality.as_ref().map(Value::to_string))
        .bind(endpoint.map(str::to_string))
        .bind(!r.cost_usd.is_finite())
}

/// Totals per run from its results (`r`): an mcsqe result counts one
/// evaluation per criterion, any other result one.
const TOTALS: &str = "SELECT r.run_id AS run_id,
    COUNT(*) AS test_cases,
    COALESCE(SUM(r.passed), 0) AS passed,
    COALESCE(SUM(CASE WHEN jr.n > 1 THEN jr.n ELSE 1 END), 0) AS evaluations,
    COALESCE(SUM(CASE WHEN jr.n > 1 THEN jr.np ELSE r.passed END), 0) AS passed_evaluations,
    COALESCE(SUM(r.error_kind = 'format'), 0) AS format_failures,
    COALESCE(SUM(r.error_kind = 'judge'), 0) AS judge_errors,
    COALESCE(SUM(r.error_kind = 'provider'), 0) AS provider_errors,
    COALESCE(SUM(r.cached), 0) AS cached_replies,
    COALESCE(SUM(r.cost_usd), 0.0) AS cost_usd,
    COALESCE(SUM(jr.cost), 0.0) AS judge_cost_usd,
    COALESCE(SUM(r.prompt_tokens), 0) AS prompt_tokens,
    COALESCE(SUM(r.completion_tokens), 0) AS completion_tokens
  FROM result r
  LEFT JOIN (SELECT result_id, COUNT(*) AS n, COALESCE(SUM(passed = 1), 0) AS np, COALESCE(SUM(cost_usd), 0.0) AS cost
             FROM judgement GROUP BY result_id) jr ON jr.result_id = r.id";

fn runs_query(filter: &str) -> String {
    format!(
        "SELECT er.id AS run_id, l.model_id AS model, er.kind, er.status, er.started_at, er.completed_at,
    er.total_test_cases AS planned_test_cases,
    COALESCE(t.test_cases, 0) AS test_cases, COALESCE(t.passed, 0) AS passed,
    COALESCE(t.evaluations, 0) AS evaluations, COALESCE(t.passed_evaluations, 0) AS passed_evaluations,
    COALESCE(t.format_failures, 0) AS format_failures, COALESCE(t.judge_errors, 0) AS judge_errors,
    COALESCE(t.provider_errors, 0) AS provider_errors, COALESCE(t.cached_replies, 0) AS cached_replies,
    COALESCE(t.cost_usd, 0.0) + COALESCE(d.model_cost, 0.0) AS cost_usd,
    COALESCE(t.judge_cost_usd, 0.0) + COALESCE(d.judge_cost, 0.0) AS judge_cost_usd,
    COALESCE(t.prompt_tokens, 0) AS prompt_tokens, COALESCE(t.completion_tokens, 0) AS completion_tokens,
    er.settings, b.content_hash AS benchmark_hash, er.message,
    er.max_cost_usd, COALESCE(d.model_cost, 0.0) + COALESCE(d.judge_cost, 0.0) AS discarded_cost_usd,
    er.owner_host, er.owner_pid, er.owner_started,
    (julianday('now') - julianday(er.heartbeat_at)) * 86400.0 AS heartbeat_age_s
  FROM evaluation_run er
  JOIN llm l ON l.id = er.llm_id
  JOIN benchmark b ON b.id = er.benchmark_id
  LEFT JOIN ({TOTALS} {filter} GROUP BY r.run_id) t ON t.run_id = er.id
  LEFT JOIN (SELECT run_id, SUM(CASE WHEN call = 'model' THEN cost_usd ELSE 0.0 END) AS model_cost,
                    SUM(CASE WHEN call = 'judge' THEN cost_usd ELSE 0.0 END) AS judge_cost
             FROM discarded_charge GROUP BY run_id) d ON d.run_id = er.id"
    )
}

/// Rows a multi-row statement carries: 7 parameters each stays far below
/// SQLite's limit of 32,766.
const ROWS_PER_STATEMENT: usize = 500;

/// Inserts components not stored yet (by full code and content hash) and
/// returns every one's id by full code.
async fn upsert_components(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    kind: ComponentKind,
    rows: &[(&Scenario, &Component)],
    scenario_ids: &HashMap<String, i64>,
) -> Result<HashMap<String, i64>, StoreError> {
    let (head, has_scenario, has_difficulty) = match kind {
        ComponentKind::Condition => (
            "INSERT INTO condition (full_code, code, content_hash, severity, metadata, prompt, difficulty) ",
            false,
            true,
        ),
        ComponentKind::UserContext => (
            "INSERT INTO user_context (full_code, code, content_hash, severity, metadata, prompt) ",
            false,
            false,
        ),
        ComponentKind::Perturbation => (
            "INSERT INTO perturbation (full_code, code, content_hash, severity, metadata, prompt, scenario_id) ",
            true,
            false,
        ),
    };
    let mut ids = HashMap::with_capacity(rows.len());
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let mut q = sqlx::QueryBuilder::new(head);
        q.push_values(chunk, |mut row, (s, c)| {
            row.push_bind(&c.full_code)
                .push_bind(&c.code)
                .push_bind(&c.hash)
                .push_bind(c.severity)
                .push_bind(c.metadata.to_string())
                .push_bind(&c.prompt);
            if has_difficulty {
                row.push_bind(c.difficulty);
            }
            if has_scenario {
                row.push_bind(scenario_ids[&s.code]);
            }
        });
        // A no-op update, so RETURNING also names the rows already stored.
        q.push(" ON CONFLICT(full_code, content_hash) DO UPDATE SET code = excluded.code RETURNING full_code, id");
        for row in q.build().fetch_all(&mut **tx).await? {
            ids.insert(row.get::<String, _>(0), row.get::<i64, _>(1));
        }
    }
    if ids.len() != rows.len() {
        return Err(StoreError::Integrity(format!(
            "stored {} of {} {kind:?} rows (a full code repeated?)",
            ids.len(),
            rows.len()
        )));
    }
    Ok(ids)
}

/// Whether the file `ext` (`-wal`, `-shm`) lies beside the database `url`.
fn sidecar(url: &str, ext: &str) -> bool {
    base_options(url).is_ok_and(|o| {
        let mut p = o.get_filename().as_os_str().to_owned();
        p.push(ext);
        Path::new(&p).exists()
    })
}

/// Opens a database read-only (see [`Store::open_read_only`]) and reads
/// which migrations it has, as (version, success).
async fn connect_read_only(url: &str) -> Result<(SqlitePool, Vec<(i64, bool)>), StoreError> {
    let base = base_options(url)?
        .create_if_missing(false)
        .read_only(true)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(60))
        .pragma("cache_size", "-8192");
    let path = base.get_filename().to_path_buf();
    let no_sidecars = !sidecar(url, "-wal") && !sidecar(url, "-shm");
    let read_only_bits = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.permissions().readonly());
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let immutable_first = no_sidecars && (read_only_bits(&path) || read_only_bits(folder));
    let connect = |immutable: bool| {
        let opts = base.clone().immutable(immutable);
        async move {
            let pool = SqlitePoolOptions::new()
                .max_connections(4)
                .connect_with(opts)
                .await?;
            // Opening is lazy about the file: read the schema to know.
            let applied: Result<Vec<(i64, bool)>, sqlx::Error> =
                sqlx::query_as("SELECT version, success FROM _sqlx_migrations")
                    .fetch_all(&pool)
                    .await;
            Ok::<_, sqlx::Error>((pool, applied))
        }
    };
    let opened = match connect(immutable_first).await {
        Err(_) | Ok((_, Err(_))) if !immutable_first && no_sidecars => connect(true).await,
        other => other,
    };
    let (pool, applied) = opened.map_err(|e| StoreError::Open {
        url: url.into(),
        message: describe_sqlx(&e),
    })?;
    let applied = match applied {
        Ok(a) => a,
        Err(e) if e.to_string().contains("no such table") => {
            return Err(StoreError::NotHelmbench { url: url.into() });
        }
        Err(e) => {
            return Err(StoreError::Open {
                url: url.into(),
                message: describe_sqlx(&e),
            });
        }
    };
    Ok((pool, applied))
}

/// Whether a migration failed because another process was applying the
/// same migration at the same moment.
fn lost_migration_race(e: &sqlx::migrate::MigrateError) -> bool {
    let msg = match e {
        sqlx::migrate::MigrateError::Execute(inner)
        | sqlx::migrate::MigrateError::ExecuteMigration(inner, _) => inner.to_string(),
        other => other.to_string(),
    };
    msg.contains("already exists")
        || msg.contains("duplicate column name")
        || msg.contains("locked")
        || msg.contains("UNIQUE constraint")
}

/// A readable cause for the common ways a file is not a usable database.
fn describe_sqlx(e: &sqlx::Error) -> String {
    let msg = e.to_string();
    if msg.contains("file is not a database") || msg.contains("malformed") {
        format!("{msg} (the file is not a helmbench SQLite database, or it is corrupt)")
    } else {
        msg
    }
}

/// Whether a path-like URL points to an existing file (for read-only commands).
pub fn database_exists(url: &str) -> bool {
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    let path = path.split('?').next().unwrap_or(path);
    path == ":memory:" || Path::new(path).exists()
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
        let mut row = RunRow {
            run_id: 1,
            model: "m".into(),
            kind: "batch".into(),
            status: "running".into(),
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
            cached_replies: 0,
            cost_usd: 0.0,
            judge_cost_usd: 0.0,
            prompt_tokens: 0,
            completion_tokens: 0,
            settings: String::new(),
            benchmark_hash: String::new(),
            message: None,
            max_cost_usd: None,
            discarded_cost_usd: 0.0,
            owner_host: Some(me.host.clone()),
            owner_pid: Some(parent),
            owner_started: process_started(parent),
            heartbeat_age_s: Some(3600.0),
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
