//! SQLite storage through sqlx (SPEC §5). This module opens the database:
//! connect options, embedded migrations (refusing a newer schema), the
//! read-only open that `runs`, `report`, `costs` and `export` use, and
//! closing. The rest of the flow lives in its children: [`seed`] writes the
//! benchmark content before a run, [`runs`] creates, claims, beats for and
//! finishes runs, [`results`] writes what the runner produces (and answers
//! its cache lookups), and [`reads`] holds every SELECT the reports, costs,
//! export and `runs` need. The pool stays private to this module.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::SqlitePool;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use backend::{Pool, on};

/// Why a resume discarded a judge-error result's charges: a literal, as
/// the totals' SQL text (totals.rs) looks the charge up by it.
macro_rules! retired_reason {
    () => {
        "a result with a judge error, judged again by a resume"
    };
}

mod backend;
mod batches;
mod compare;
mod complete;
mod copy;
mod copy_merge;
mod decode;
mod kept;
mod kinds;
mod leases;
mod plans;
mod pseudonym;
mod reads;
mod results;
mod reuse;
mod review;
mod runs;
mod scored;
mod seed;
mod served;
mod simulated;
mod team_budget;
mod totals;
mod turns;
mod view;
mod view_case;
mod view_pg_search;
mod view_run;
mod view_search;

pub use leases::LEASE_CHUNK;
pub use runs::HEARTBEAT_INTERVAL;
pub(crate) use runs::Owner;

pub const DEFAULT_DATABASE_URL: &str = "sqlite://helmbench.db";

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");
/// The same history for PostgreSQL (same versions; tests/it/postgres.rs
/// checks both give the same schema).
static PG_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// Whether `url` names a PostgreSQL database (the team store) rather than
/// a SQLite file.
fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open database {url}: {message}")]
    Open {
        url: String,
        message: String,
        #[source]
        source: sqlx::Error,
    },
    /// The file system says why the database file cannot be opened or
    /// created: which file, why, and the fix, in one sentence.
    #[error("{0}")]
    Path(String),
    #[error(
        "database {url} was written by a newer helmbench (it has migration {version}, unknown to this version); use a newer helmbench or another --database-url"
    )]
    NewerSchema { url: String, version: i64 },
    #[error(
        "database {url} was written by an older helmbench (migration {version} is not applied); read-only commands never change a database: run `helmbench migrate` first (it upgrades the file in place; keep a copy if an older helmbench must still read it)"
    )]
    OlderSchema { url: String, version: i64 },
    /// A database with only some of this version's migrations and no runs:
    /// one a helmbench is creating (or was stopped while creating), not an
    /// old one (issue 41, item 15).
    #[error(
        "database {url} is still being created (migration {version} is not applied yet and it holds no runs): try again in a moment; if the command creating it was stopped, `helmbench migrate` finishes it"
    )]
    BeingCreated { url: String, version: i64 },
    #[error(
        "database {url} has no helmbench tables (an empty file, or another program's database); pass the right --database-url"
    )]
    NotHelmbench { url: String },
    #[error("database {url} cannot be migrated: {message}")]
    Migrate {
        url: String,
        message: String,
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    #[error("database query failed: {0}")]
    Query(#[from] sqlx::Error),
    #[error("{0}")]
    NotFound(String),
    /// Stored content is not what this version wrote or expects, with the
    /// error that found it when there is one.
    #[error("database content is inconsistent: {message}")]
    Integrity {
        message: String,
        #[source]
        source: Option<crate::error::BoxError>,
    },
    /// Another live process is running the run.
    #[error("{0}")]
    Busy(String),
    /// A database a copy cannot take as it is (`migrate --from … --to …`):
    /// what is wrong and the fix.
    #[error("{0}")]
    Refused(String),
    /// Results kept in a file for the next run could not be written or read.
    #[error("results kept for the next run: {file}: {source}")]
    Pending {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// A file of results kept for the next run (a killed run's log, the
    /// results a run could not write) holds a record that cannot be read:
    /// what could be read is written, the file is moved aside (never
    /// deleted) and the command fails, so nothing paid leaves the books
    /// without a word.
    #[error(
        "results kept for the next run: {file}: record {record} cannot be read ({why}); the readable records were written and the file was moved to {kept_as} (kept, not deleted): the next --resume asks again, and pays again, for any test case only that record held"
    )]
    Damaged {
        file: String,
        kept_as: String,
        record: usize,
        why: String,
    },
    /// An in-memory database has no folder to keep results in.
    #[error("results kept for the next run: an in-memory database has no folder")]
    NoPendingFolder,
    /// A stored result's judgements, as SQLite aggregates them, are not the
    /// JSON expected (see [`Store::results`]).
    #[error("{0}")]
    Judgements(#[source] serde_json::Error),
}

impl StoreError {
    /// SQLite could not open or read `url`: its words (see
    /// [`describe_sqlx`]), with the error kept as the source.
    fn open(url: &str, source: sqlx::Error) -> StoreError {
        StoreError::Open {
            url: url.into(),
            message: describe_sqlx(&source),
            source,
        }
    }
}

impl From<StoreError> for crate::Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(m) | StoreError::Busy(m) | StoreError::Refused(m) => {
                crate::Error::usage(m)
            }
            other => crate::Error::Store(Box::new(other)),
        }
    }
}

/// The database handle; cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    pool: Pool,
    url: String,
    owner: Owner,
    /// The endpoint results written through this handle came from, and the
    /// only one whose cached replies it reuses; None reuses nothing.
    endpoint: Option<String>,
    /// The group commit of conversation turns (turns.rs), one per pool.
    turns: backend::TurnQueue,
}

impl Store {
    /// Whether `url` names the team store (PostgreSQL), where several
    /// processes may share a run.
    pub fn is_team_url(url: &str) -> bool {
        is_postgres_url(url)
    }

    /// The database file, or none for an in-memory database.
    pub fn database_file(&self) -> Option<PathBuf> {
        if is_postgres_url(&self.url) {
            return None;
        }
        let opts = connect_options(&self.url).ok()?;
        let file = opts.get_filename();
        (file.as_os_str() != ":memory:" && !file.as_os_str().is_empty()).then(|| file.to_path_buf())
    }
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
        // checkpoints copy each hot page from the WAL once, not once per
        // transaction: a checkpoint every 16,000 pages (128 MB of WAL)
        // instead of 4,000 took bytes written per byte kept on 220,000
        // results from 4.3 to 3.7 (results committed 4,096 at a time) and to
        // 3.0 (8,192 at a time, run/writer.rs); BENCHMARKS.md, issue 31.
        // The WAL is truncated back when the last connection closes.
        .pragma("wal_autocheckpoint", "16000")
        .pragma("cache_size", "-8192")
        // A statement that may stop halfway (a many-row INSERT under a
        // UNIQUE key) keeps the pages it changes in a statement journal,
        // which goes to a temporary file past 64 KB: every commit's inserts
        // wrote their pages there too, 2 % of a run's CPU (issue 45).
        .pragma("temp_store", "memory"))
}

/// The options a URL or path names, with its folder checked to exist.
fn base_options(url: &str) -> Result<SqliteConnectOptions, StoreError> {
    let opts = if url.starts_with("sqlite:") {
        SqliteConnectOptions::from_str(url).map_err(|e| StoreError::Open {
            url: url.into(),
            message: e.to_string(),
            source: e,
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
        return Err(StoreError::Path(missing_folder(&filename, parent)));
    }
    Ok(opts)
}

/// `path`'s folder `folder` is not a folder: missing, or a file (itself or
/// one of its own folders).
fn missing_folder(path: &Path, folder: &Path) -> String {
    let file = folder
        .ancestors()
        .find(|a| !a.as_os_str().is_empty() && a.exists())
        .filter(|a| !a.is_dir());
    match file {
        Some(file) => format!(
            "cannot create {}: {} is a file, not a folder (pass --database-url with a path inside a folder)",
            path.display(),
            file.display()
        ),
        None => format!(
            "cannot create {}: the folder {} does not exist (create it, or pass --database-url)",
            path.display(),
            folder.display()
        ),
    }
}

/// Why the file system refuses the database file `path`, found by trying
/// what SQLite needs (the file read-write, or created, and a `-wal` file
/// beside it); `None` when it refuses nothing (SQLite's own words stand).
/// Only called after SQLite failed to open or write the file.
fn path_problem(path: &Path) -> Option<String> {
    use std::fs::OpenOptions;
    if path.as_os_str() == ":memory:" || path.as_os_str().is_empty() {
        return None;
    }
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !folder.is_dir() {
        return Some(missing_folder(path, folder));
    }
    if let Some(p) = folder_given(path) {
        return Some(p);
    }
    // Creates `p` and removes it again: it did not exist.
    let probe_new = |p: &Path| {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(p)
            .map(|_| {
                let _ = std::fs::remove_file(p);
            })
    };
    let (verb, tried) = if path.exists() {
        (
            "open",
            OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .map(|_| ()),
        )
    } else {
        ("create", probe_new(path))
    };
    if let Err(e) = tried {
        return Some(io_problem(verb, path, path, &e));
    }
    // Write-ahead logging keeps `-wal` and `-shm` files beside the database.
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let wal = std::path::PathBuf::from(wal);
    if !wal.exists()
        && let Err(e) = probe_new(&wal)
    {
        return Some(io_problem("write beside", path, folder, &e));
    }
    None
}

/// A folder where the database file should be: which, and the fix (the
/// same words for `run-batch` and the read-only commands).
fn folder_given(path: &Path) -> Option<String> {
    path.is_dir().then(|| {
        format!(
            "cannot open {}: it is a folder, not a database file (pass --database-url with a file name, e.g. {})",
            path.display(),
            path.join("helmbench.db").display()
        )
    })
}

/// "cannot {verb} {path}: why (the fix)" for an I/O error on `target`.
fn io_problem(verb: &str, path: &Path, target: &Path, e: &std::io::Error) -> String {
    use std::io::ErrorKind;
    let why = match e.kind() {
        ErrorKind::PermissionDenied => format!(
            "permission denied (make {} writable for this user, or pass --database-url)",
            target.display()
        ),
        ErrorKind::ReadOnlyFilesystem => "the file system is read-only (copy the database to a writable folder, or pass --database-url)".to_string(),
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded => {
            "the disk is full (free some space, or pass --database-url on another disk)".to_string()
        }
        _ => format!("{e} (pass --database-url with a path you can write)"),
    };
    format!("cannot {verb} {}: {why}", path.display())
}

/// The options of a SQLite pool that writes. A connection is given back
/// to the pool only out of any transaction: when SQLite rolls a transaction
/// back itself (a full disk: SQLITE_FULL), the ROLLBACK sqlx sends then
/// fails and sqlx still counts the transaction as open, so every later
/// BEGIN on that connection failed ("attempted to call begin_with at
/// non-zero transaction depth") long after the disk had room again (issue
/// 41). Such a connection is closed and the pool opens a fresh one.
fn writer_pool() -> SqlitePoolOptions {
    use sqlx::Connection as _;
    SqlitePoolOptions::new().after_release(|conn, _| {
        Box::pin(async move {
            if !conn.is_in_transaction() {
                return Ok(true);
            }
            // A dropped transaction's ROLLBACK is queued, not yet run: once
            // the ping is answered it has been, or has failed.
            conn.ping().await?;
            Ok(!conn.is_in_transaction())
        })
    })
}

/// The error for SQLite failing to open or set up `url` (`path` on disk):
/// what the file system says when it refuses the file, else SQLite's words.
fn open_error(url: &str, path: &Path, e: sqlx::Error) -> StoreError {
    let open = StoreError::open(url, e);
    let not_a_database = open.to_string().contains("not a helmbench SQLite database");
    match path_problem(path).filter(|_| !not_a_database) {
        Some(p) => StoreError::Path(p),
        None => open,
    }
}
impl Store {
    /// Opens (creating if missing) and migrates the database.
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        if is_postgres_url(url) {
            return Store::open_postgres(url, false).await;
        }
        let opts = connect_options(url)?;
        let path = opts.get_filename().to_path_buf();
        let pool = writer_pool()
            .max_connections(4)
            .connect_with(opts)
            .await
            .map_err(|e| open_error(url, &path, e))?;
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
                    let message = match &e {
                        sqlx::migrate::MigrateError::Execute(inner) => describe_sqlx(inner),
                        other => other.to_string(),
                    };
                    // A file SQLite opened but cannot write (read-only).
                    if (message.contains("readonly") || message.contains("unable to open"))
                        && let Some(p) = path_problem(&path)
                    {
                        return Err(StoreError::Path(p));
                    }
                    return Err(StoreError::Migrate {
                        url: url.into(),
                        message,
                        source: e,
                    });
                }
            }
        }
        let store = Store {
            pool: Pool::Sqlite(pool),
            url: url.to_string(),
            owner: Owner::this_process(),
            endpoint: None,
            turns: Default::default(),
        };
        store.rebuild_totals_if_needed().await?;
        store.settle_gone_runs().await;
        Ok(store)
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
        if is_postgres_url(url) {
            return Store::open_postgres(url, true).await;
        }
        // A database another process is creating or upgrading shows no
        // tables, or only its first migrations, for a few milliseconds:
        // while a -wal file says a writer may be at work, look again (for up
        // to 5 s while it has no tables, 0.3 s while it is older) before
        // saying so.
        let started = tokio::time::Instant::now();
        loop {
            let opened = Store::try_open_read_only(url).await;
            let patience = match &opened {
                Err(StoreError::NotHelmbench { .. } | StoreError::BeingCreated { .. }) => {
                    Duration::from_secs(5)
                }
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
        if let Some(m) = applied.iter().find(|m| !known.contains(&m.version)) {
            return Err(StoreError::NewerSchema {
                url: url.into(),
                version: m.version,
            });
        }
        let done = finished(&applied);
        if let Some(m) = MIGRATOR.iter().find(|m| !done.contains(&m.version)) {
            // Migrations are applied in order, so a database being created
            // looks like an older one for a moment (or for good, when its
            // creator was killed): it holds no runs yet.
            let (url, version) = (url.to_string(), m.version);
            return Err(if holds_runs(&pool).await {
                StoreError::OlderSchema { url, version }
            } else {
                StoreError::BeingCreated { url, version }
            });
        }
        let store = Store {
            pool: Pool::Sqlite(pool),
            url: url.to_string(),
            owner: Owner::this_process(),
            endpoint: None,
            turns: Default::default(),
        };
        store.refuse_unfilled_totals().await?;
        Ok(store)
    }

    /// How many migrations of this version an existing database lacks,
    /// read without changing it (0 for a database this version cannot
    /// read: [`Store::open`] says why).
    pub async fn pending_migrations(url: &str) -> usize {
        if is_postgres_url(url) {
            let Ok(pool) = connect_postgres(url, 1).await else {
                return 0;
            };
            let applied: Vec<i64> =
                sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
                    .fetch_all(&pool)
                    .await
                    .unwrap_or_default();
            pool.close().await;
            return PG_MIGRATOR
                .iter()
                .filter(|m| !applied.contains(&m.version))
                .count();
        }
        let Ok((pool, applied)) = connect_read_only(url).await else {
            return 0;
        };
        pool.close().await;
        let done = finished(&applied);
        MIGRATOR
            .iter()
            .filter(|m| !done.contains(&m.version))
            .count()
    }

    /// Copies what the WAL holds into the database file without waiting
    /// for readers or writers (a passive checkpoint; PostgreSQL has no
    /// WAL of ours): run beside the reads that follow a batch, it leaves
    /// [`Store::close`] little to fold (issue 45). Errors only cost that
    /// head start: the close folds whatever is left.
    pub async fn fold_wal(&self) {
        if let Pool::Sqlite(pool) = &self.pool
            && let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                .execute(pool)
                .await
        {
            tracing::debug!(error = %e, "the WAL was not folded ahead of the close");
        }
    }

    /// Closes every connection: the last one checkpoints the WAL into the
    /// database file and removes `-wal` and `-shm` (unless another process
    /// still has the database open).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The versions of the migrations applied to the database, oldest first.
    pub async fn applied_migrations(&self) -> Result<Vec<i64>, StoreError> {
        on!(&self.pool, |pool| Ok(sqlx::query_scalar(
            "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version",
        )
        .fetch_all(pool)
        .await?))
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// A second handle on the same database with its own connection and a
    /// short busy timeout, for a writer that must notice a lock held by
    /// another program within `busy` and decide what to do, rather than
    /// wait in SQLite for the pool's 60 s.
    /// An in-memory database has no second connection: the same handle.
    ///
    /// The connection is opened with the pool's long timeout (opening sets
    /// pragmas that may wait on another process's checkpoint; with the short
    /// one, two batches on one database sometimes failed to open it) and
    /// only then gets the short one, for its writes.
    pub async fn with_busy_timeout(&self, busy: Duration) -> Result<Store, StoreError> {
        // PostgreSQL locks rows, not the database: no lock to notice.
        if is_postgres_url(&self.url) {
            return Ok(self.clone());
        }
        let opts = connect_options(&self.url)?;
        if opts.get_filename().as_os_str() == ":memory:" {
            return Ok(self.clone());
        }
        let busy_ms = busy.as_millis().min(i64::MAX as u128) as i64;
        let pool = writer_pool()
            .max_connections(1)
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "PRAGMA busy_timeout = {busy_ms}"
                    )))
                    .execute(conn)
                    .await
                    .map(|_| ())
                })
            })
            .connect_with(opts)
            .await
            .map_err(|e| StoreError::open(&self.url, e))?;
        Ok(Store {
            pool: Pool::Sqlite(pool),
            url: self.url.clone(),
            owner: self.owner.clone(),
            endpoint: self.endpoint.clone(),
            turns: Default::default(),
        })
    }
}

impl Store {
    /// Opens a PostgreSQL database (the team store): migrated to this
    /// version's schema unless `read_only`, where a database without every
    /// migration is refused as a SQLite one would be. A database with a
    /// migration this version does not know is refused either way.
    async fn open_postgres(url: &str, read_only: bool) -> Result<Store, StoreError> {
        let pool = connect_postgres(url, 8).await?;
        let shown = crate::domain::redact_password(url);
        let applied: Vec<(i64, bool)> =
            match sqlx::query_as("SELECT version, success FROM _sqlx_migrations")
                .fetch_all(&pool)
                .await
            {
                Ok(rows) => rows,
                // No table yet: a new database.
                Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => Vec::new(),
                Err(e) => return Err(StoreError::open(&shown, e)),
            };
        let known: HashSet<i64> = PG_MIGRATOR.iter().map(|m| m.version).collect();
        if let Some((v, _)) = applied.iter().find(|(v, _)| !known.contains(v)) {
            return Err(StoreError::NewerSchema {
                url: shown,
                version: *v,
            });
        }
        if read_only {
            if applied.is_empty() {
                return Err(StoreError::NotHelmbench { url: shown });
            }
            let done: HashSet<i64> = applied
                .iter()
                .filter(|(_, ok)| *ok)
                .map(|(v, _)| *v)
                .collect();
            if let Some(m) = PG_MIGRATOR.iter().find(|m| !done.contains(&m.version)) {
                return Err(StoreError::OlderSchema {
                    url: shown,
                    version: m.version,
                });
            }
        } else {
            migrate_postgres(&pool, &shown).await?;
        }
        // The URL is kept with its password hidden: the pool holds the
        // connections, and the URL is only ever shown (in errors).
        let store = Store {
            pool: Pool::Postgres(pool),
            url: shown,
            owner: Owner::this_process(),
            endpoint: None,
            turns: Default::default(),
        };
        if read_only {
            store.refuse_unfilled_totals().await?;
        } else {
            store.rebuild_totals_if_needed().await?;
            store.settle_gone_runs().await;
        }
        Ok(store)
    }

    /// The SQLite pool, for the few places only SQLite has (its pragmas in
    /// tests, the view's word index). Panics on PostgreSQL: callers check.
    #[cfg(test)]
    fn sqlite(&self) -> &SqlitePool {
        match &self.pool {
            Pool::Sqlite(p) => p,
            Pool::Postgres(_) => panic!("a SQLite-only statement on PostgreSQL"),
        }
    }
}

/// Applies PostgreSQL's migrations to `pool` (`shown`: its URL, password
/// hidden). Two processes migrating at once: PostgreSQL's migrator takes an
/// advisory lock, so the second waits and then finds it done.
async fn migrate_postgres(pool: &PgPool, shown: &str) -> Result<(), StoreError> {
    PG_MIGRATOR
        .run(pool)
        .await
        .map_err(|e| StoreError::Migrate {
            url: shown.to_string(),
            message: e.to_string(),
            source: e,
        })
}

/// A pool on the PostgreSQL database `url`, whose connections find the
/// SQLite functions the store's statements use (backend.rs) before
/// PostgreSQL's own.
async fn connect_postgres(url: &str, connections: u32) -> Result<PgPool, StoreError> {
    let shown = crate::domain::redact_password(url);
    let opts = PgConnectOptions::from_str(url)
        .map_err(|e| StoreError::open(&shown, e))?
        .options([("search_path", "public,helmbench_sqlite,pg_catalog")]);
    PgPoolOptions::new()
        .max_connections(connections)
        .acquire_timeout(Duration::from_secs(60))
        .connect_with(opts)
        .await
        .map_err(|e| StoreError::open(&shown, e))
}

/// Whether the file `ext` (`-wal`, `-shm`) lies beside the database `url`.
fn sidecar(url: &str, ext: &str) -> bool {
    base_options(url).is_ok_and(|o| {
        let mut p = o.get_filename().as_os_str().to_owned();
        p.push(ext);
        Path::new(&p).exists()
    })
}

/// A row of sqlx's `_sqlx_migrations`: a migration the database has, and
/// whether it finished.
#[derive(sqlx::FromRow)]
struct AppliedMigration {
    version: i64,
    success: bool,
}

/// The versions of the migrations that finished.
fn finished(applied: &[AppliedMigration]) -> HashSet<i64> {
    applied
        .iter()
        .filter(|m| m.success)
        .map(|m| m.version)
        .collect()
}

/// Opens a database read-only (see [`Store::open_read_only`]) and reads
/// which migrations it has.
async fn connect_read_only(url: &str) -> Result<(SqlitePool, Vec<AppliedMigration>), StoreError> {
    let base = base_options(url)?
        .create_if_missing(false)
        .read_only(true)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(60))
        .pragma("cache_size", "-8192");
    let path = base.get_filename().to_path_buf();
    if let Some(p) = folder_given(&path) {
        return Err(StoreError::Path(p));
    }
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
            let applied: Result<Vec<AppliedMigration>, sqlx::Error> =
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
    let (pool, applied) = opened.map_err(|e| StoreError::open(url, e))?;
    let applied = match applied {
        Ok(a) => a,
        Err(e) if e.to_string().contains("no such table") => {
            return Err(StoreError::NotHelmbench { url: url.into() });
        }
        Err(e) => return Err(StoreError::open(url, e)),
    };
    Ok((pool, applied))
}

/// Whether the database has any run (a database whose tables are not all
/// there yet has none).
async fn holds_runs(pool: &SqlitePool) -> bool {
    sqlx::query_scalar::<_, i64>("SELECT 1 FROM evaluation_run LIMIT 1")
        .fetch_optional(pool)
        .await
        .is_ok_and(|row| row.is_some())
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

impl Store {
    /// Whether a path-like URL points to an existing file (for read-only commands).
    pub fn database_exists(url: &str) -> bool {
        if is_postgres_url(url) {
            return true;
        }
        let path = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .unwrap_or(url);
        let path = path.split('?').next().unwrap_or(path);
        path == ":memory:" || Path::new(path).exists()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Root ignores permissions, so the refusals a normal user meets are
    /// checked on their wording here; the CLI test covers the paths.
    #[test]
    fn refused_paths_say_which_file_why_and_the_fix() {
        use std::io::{Error, ErrorKind};
        let db = Path::new("/data/helmbench.db");
        let e = Error::from(ErrorKind::PermissionDenied);
        assert_eq!(
            io_problem("create", db, db, &e),
            "cannot create /data/helmbench.db: permission denied (make /data/helmbench.db writable for this user, or pass --database-url)"
        );
        let e = Error::from(ErrorKind::ReadOnlyFilesystem);
        assert_eq!(
            io_problem("open", db, db, &e),
            "cannot open /data/helmbench.db: the file system is read-only (copy the database to a writable folder, or pass --database-url)"
        );
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("a/b/h.db");
        assert_eq!(
            path_problem(&missing).unwrap(),
            format!(
                "cannot create {}: the folder {} does not exist (create it, or pass --database-url)",
                missing.display(),
                dir.path().join("a/b").display()
            )
        );
        // A usable path: SQLite's own words stand, and no probe is left.
        let fine = dir.path().join("h.db");
        assert_eq!(path_problem(&fine), None);
        assert!(!fine.exists() && !dir.path().join("h.db-wal").exists());
    }

    /// A file SQLite refuses: the message names it and says why, and
    /// SQLite's error stays the cause.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_refused_open_keeps_sqlites_error_as_its_source() {
        use std::error::Error as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("not.db");
        std::fs::write(&path, vec![b'x'; 4096]).unwrap();
        let url = path.display().to_string();
        let e = Store::open_read_only(&url).await.unwrap_err();
        assert!(matches!(e, StoreError::Open { .. }), "{e:?}");
        assert!(
            e.to_string().contains("not a helmbench SQLite database"),
            "{e}"
        );
        let source = e.source().expect("the cause is kept");
        assert!(source.downcast_ref::<sqlx::Error>().is_some(), "{source:?}");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn pragmas_are_set_explicitly() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("x.db").display().to_string())
            .await
            .unwrap();
        let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(store.sqlite())
            .await
            .unwrap();
        assert_eq!(mode, "wal");
        let fk: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
            .fetch_one(store.sqlite())
            .await
            .unwrap();
        assert_eq!(fk, 1);
        let sync: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(store.sqlite())
            .await
            .unwrap();
        assert_eq!(sync, 1, "NORMAL");
        let busy: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
            .fetch_one(store.sqlite())
            .await
            .unwrap();
        assert!(busy >= 1000);
        // .cargo/config.toml builds the bundled SQLite without allocation
        // statistics (their global mutex serialised the row worker and the
        // reader of every long read).
        let options: Vec<String> = sqlx::query_scalar("PRAGMA compile_options")
            .fetch_all(store.sqlite())
            .await
            .unwrap();
        assert!(
            options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
            "{options:?}"
        );
    }
}
