//! The team store's schema (issue 34, first slice): `migrations/postgres/`
//! is the same history as `migrations/` (same versions, one file each) and
//! gives the same schema on a real PostgreSQL 15 as the SQLite migrations
//! give through `helmbench migrate`.
//!
//! The server: `HELMBENCH_TEST_POSTGRES_URL` (`.ci/run` starts a throwaway
//! cluster with scripts/postgres/start.sh and exports it). Without it, the
//! first test starts one itself with the same script under
//! `target/postgres-test-PID/`, stopped and removed when this test process
//! ends. Without PostgreSQL installed these tests fail under `CI=true` and
//! are skipped elsewhere, saying how to get it. Each test works in its own
//! new database (dropped at its end).
//!
//! The type mapping checked, SQLite declared type -> PostgreSQL type:
//! INTEGER -> bigint, REAL -> double precision, TEXT -> text; an
//! `INTEGER PRIMARY KEY` (SQLite's rowid) -> a bigint identity column.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
use sqlx::{ConnectOptions, Connection, Executor, Row};

use crate::support::{Bench, db_path, read, repo_root, stderr};

static SQLITE: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");
static POSTGRES: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

const URL_VAR: &str = "HELMBENCH_TEST_POSTGRES_URL";

fn installed() -> bool {
    std::path::Path::new("/usr/lib/postgresql/15/bin/initdb").exists()
        || Command::new("sh")
            .args(["-c", "command -v initdb"])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

static STARTED: OnceLock<Result<String, String>> = OnceLock::new();

/// A cluster of our own under target/, stopped and removed by a watcher
/// shell once this test process is gone (a static is never dropped).
fn start_own() -> Result<String, String> {
    let dir: PathBuf = repo_root()
        .join("target")
        .join(format!("postgres-test-{}", std::process::id()));
    let out = Command::new(repo_root().join("scripts/postgres/start.sh"))
        .arg(&dir)
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("scripts/postgres/start.sh: {e}"))?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let url = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let watch = format!(
        "while kill -0 {me} 2>/dev/null; do sleep 1; done; \"$STOP\" \"$DIR\"; rm -rf \"$DIR\"",
        me = std::process::id()
    );
    Command::new("sh")
        .args(["-c", &watch])
        .env("STOP", repo_root().join("scripts/postgres/stop.sh"))
        .env("DIR", &dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("the cluster's watcher: {e}"))?;
    Ok(url)
}

/// The server's URL, or None (skipped, with a message) where there is no
/// PostgreSQL outside CI.
pub(crate) fn server() -> Option<String> {
    if let Ok(url) = std::env::var(URL_VAR)
        && !url.is_empty()
    {
        return Some(url);
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    if !installed() {
        assert!(
            !ci,
            "no PostgreSQL (CI=true: this suite must run): set {URL_VAR} or install PostgreSQL 15 (`apt-get install -y postgresql`)"
        );
        eprintln!(
            "skipped: no PostgreSQL ({URL_VAR} unset and no initdb; `apt-get install -y postgresql`, or run .ci/run)"
        );
        return None;
    }
    match STARTED.get_or_init(start_own) {
        Ok(url) => Some(url.clone()),
        Err(why) => panic!("PostgreSQL is installed but did not start: {why}"),
    }
}

/// The second test server's URL, whose cluster was created with a non-C
/// locale (en_US.UTF-8: .ci/run starts it), or None (skipped, with a
/// message) outside CI where there is none. Under CI=true it must be there.
pub(crate) fn server_en() -> Option<String> {
    const VAR: &str = "HELMBENCH_TEST_POSTGRES_URL_EN";
    if let Ok(url) = std::env::var(VAR)
        && !url.is_empty()
    {
        return Some(url);
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(
        !ci,
        "no en_US.UTF-8 PostgreSQL cluster (CI=true: this test must run): set {VAR} (.ci/run starts one with scripts/postgres/start.sh --locale en_US.UTF-8 DIR)"
    );
    eprintln!(
        "skipped: no en_US.UTF-8 PostgreSQL cluster ({VAR} unset; `scripts/postgres/start.sh --locale en_US.UTF-8 DIR`, or run .ci/run)"
    );
    None
}

/// The URL of database `name` on the test server at `server`.
pub(crate) fn db_url(server: &str, name: &str) -> String {
    let (base, _) = server.rsplit_once('/').unwrap();
    format!("{base}/{name}")
}

/// A new, empty database on the server, dropped when the test is done.
pub(crate) struct TestDb {
    admin: PgConnectOptions,
    pub(crate) name: String,
    pub(crate) pool: PgPool,
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

impl TestDb {
    pub(crate) async fn create(url: &str) -> TestDb {
        let admin: PgConnectOptions = url.parse().expect("the PostgreSQL URL");
        let name = format!(
            "helmbench_t{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        );
        let mut c = admin.connect().await.expect("connect to PostgreSQL");
        c.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .unwrap();
        c.close().await.unwrap();
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect_with(admin.clone().database(&name))
            .await
            .unwrap();
        TestDb { admin, name, pool }
    }

    /// A new database on the server holding `b`'s SQLite database, copied
    /// by `helmbench migrate`, and its URL.
    pub(crate) async fn migrated_from(server: &str, b: &crate::support::Bench) -> (TestDb, String) {
        let db = TestDb::create(server).await;
        let url = db_url(server, &db.name);
        let lite = crate::support::db_path(b).display().to_string();
        crate::support::ok(
            b.helmbench()
                .database(&lite)
                .provider(crate::support::KEY, "http://127.0.0.1:9")
                .std()
                .args(["migrate", "--from", &lite, "--to", &url])
                .output()
                .unwrap(),
        );
        (db, url)
    }

    pub(crate) async fn remove(self) {
        self.pool.close().await;
        let mut c = self.admin.connect().await.unwrap();
        c.execute(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE {} WITH (FORCE)",
            self.name
        )))
        .await
        .unwrap();
        c.close().await.unwrap();
    }
}

/// A new SQLite store: the store's migrations (the same folder its
/// migrator embeds) on a new file, then opened by `helmbench migrate`, which
/// must take it as up to date.
async fn sqlite_store(b: &Bench) -> SqlitePool {
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::new()
                .filename(db_path(b))
                .create_if_missing(true),
        )
        .await
        .unwrap();
    SQLITE.run(&pool).await.unwrap();
    let out = read(b, &["migrate"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    pool
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Column {
    name: String,
    /// `integer`, `real` or `text` (the mapping above).
    ty: &'static str,
    not_null: bool,
    /// The default, normalised: the timestamp expression is `<now>`, a
    /// generated key `<rowid>`, casts and parentheses dropped.
    default: Option<String>,
}

#[derive(Debug, PartialEq, Eq, Default)]
struct Table {
    columns: Vec<Column>,
    primary_key: Vec<String>,
    /// (name for a CREATE INDEX, None for a UNIQUE constraint's), unique, columns.
    indexes: BTreeSet<(Option<String>, bool, Vec<String>)>,
    /// columns, referenced table, its columns, ON DELETE.
    foreign_keys: BTreeSet<(Vec<String>, String, Vec<String>, String)>,
}

#[derive(Debug, PartialEq, Eq)]
struct Schema {
    tables: BTreeMap<String, Table>,
    /// (trigger, table)
    triggers: BTreeSet<(String, String)>,
}

fn sqlite_type(declared: &str) -> &'static str {
    match declared {
        "INTEGER" => "integer",
        "REAL" => "real",
        "TEXT" => "text",
        other => panic!("SQLite type {other} has no stated PostgreSQL mapping"),
    }
}

fn pg_type(ty: &str) -> &'static str {
    match ty {
        "bigint" => "integer",
        "double precision" => "real",
        "text" => "text",
        other => panic!("PostgreSQL type {other} has no stated SQLite mapping"),
    }
}

fn normalise_default(d: &str) -> String {
    if d.contains("strftime(") || d.contains("statement_timestamp()") {
        return "<now>".into();
    }
    let d = d.trim().trim_start_matches('(').trim_end_matches(')');
    match d.find("::") {
        Some(i) => d[..i].to_string(),
        None => d.to_string(),
    }
}

async fn sqlite_schema(pool: &SqlitePool) -> Schema {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table'
          AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_sqlx_%'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let mut tables = BTreeMap::new();
    for name in names {
        let mut t = Table::default();
        let cols = sqlx::query(
            "SELECT name, type, \"notnull\" AS nn, dflt_value, pk FROM pragma_table_info(?) ORDER BY cid",
        )
        .bind(&name)
        .fetch_all(pool)
        .await
        .unwrap();
        let mut pk: Vec<(i64, String)> = vec![];
        for c in &cols {
            let col: String = c.get("name");
            let pk_pos: i64 = c.get("pk");
            if pk_pos > 0 {
                pk.push((pk_pos, col.clone()));
            }
        }
        pk.sort();
        t.primary_key = pk.into_iter().map(|(_, c)| c).collect();
        let rowid_key = t.primary_key.len() == 1;
        for c in &cols {
            let col: String = c.get("name");
            let ty = sqlite_type(c.get::<String, _>("type").as_str());
            let pk_pos: i64 = c.get("pk");
            let default: Option<String> = c.get("dflt_value");
            // A lone INTEGER PRIMARY KEY is the rowid: never NULL, numbered
            // by SQLite. Other key columns here are all declared NOT NULL
            // (SQLite would otherwise accept NULL in them; PostgreSQL never).
            let rowid = pk_pos > 0 && rowid_key && ty == "integer";
            t.columns.push(Column {
                name: col,
                ty,
                not_null: c.get::<i64, _>("nn") == 1 || pk_pos > 0,
                default: if rowid {
                    Some("<rowid>".into())
                } else {
                    default.as_deref().map(normalise_default)
                },
            });
        }
        let indexes = sqlx::query(
            "SELECT name, \"unique\" AS u, origin FROM pragma_index_list(?) WHERE origin <> 'pk'",
        )
        .bind(&name)
        .fetch_all(pool)
        .await
        .unwrap();
        for ix in indexes {
            let ix_name: String = ix.get("name");
            let ix_cols: Vec<String> =
                // An expression's column has no name (issue 45's prefix index).
                sqlx::query_scalar("SELECT COALESCE(name, '<expr>') FROM pragma_index_info(?) ORDER BY seqno")
                    .bind(&ix_name)
                    .fetch_all(pool)
                    .await
                    .unwrap();
            let explicit = ix.get::<String, _>("origin") == "c";
            t.indexes.insert((
                explicit.then_some(ix_name),
                ix.get::<i64, _>("u") == 1,
                ix_cols,
            ));
        }
        let fks = sqlx::query(
            "SELECT id, \"table\" AS ref, \"from\" AS col, \"to\" AS ref_col, on_delete
               FROM pragma_foreign_key_list(?) ORDER BY id, seq",
        )
        .bind(&name)
        .fetch_all(pool)
        .await
        .unwrap();
        let mut by_id: BTreeMap<i64, (Vec<String>, String, Vec<String>, String)> = BTreeMap::new();
        for fk in fks {
            let e = by_id.entry(fk.get("id")).or_insert_with(|| {
                (
                    vec![],
                    fk.get("ref"),
                    vec![],
                    fk.get::<String, _>("on_delete"),
                )
            });
            e.0.push(fk.get("col"));
            e.2.push(fk.get("ref_col"));
        }
        t.foreign_keys = by_id.into_values().collect();
        tables.insert(name, t);
    }
    let triggers =
        sqlx::query_as("SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger'")
            .fetch_all(pool)
            .await
            .unwrap()
            .into_iter()
            .collect();
    Schema { tables, triggers }
}

/// PostgreSQL's word indexes for the viewer's search (issue 45): SQLite's
/// view keeps an FTS5 index in a file of its own instead.
const PG_ONLY_INDEXES: [&str; 4] = [
    "result_reply_words",
    "prompt_text_words",
    "judgement_words",
    "judge_vote_words",
];

async fn pg_schema(pool: &PgPool) -> Schema {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables
          WHERE table_schema = 'public' AND table_type = 'BASE TABLE'
            AND table_name <> '_sqlx_migrations'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let mut tables = BTreeMap::new();
    for name in names {
        let mut t = Table::default();
        let cols = sqlx::query(
            "SELECT column_name::text AS name, data_type::text AS ty, is_nullable::text AS nullable,
                    column_default::text AS dflt, is_identity::text AS ident
               FROM information_schema.columns
              WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position",
        )
        .bind(&name)
        .fetch_all(pool)
        .await
        .unwrap();
        for c in cols {
            let default: Option<String> = c.get("dflt");
            t.columns.push(Column {
                name: c.get("name"),
                ty: pg_type(c.get::<String, _>("ty").as_str()),
                not_null: c.get::<String, _>("nullable") == "NO",
                default: if c.get::<String, _>("ident") == "YES" {
                    Some("<rowid>".into())
                } else {
                    default.as_deref().map(normalise_default)
                },
            });
        }
        let indexes = sqlx::query(
            "SELECT i.relname::text AS name, ix.indisunique AS u, ix.indisprimary AS pk,
                    EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = ix.indexrelid) AS constraint_backed,
                    (SELECT array_agg(COALESCE(a.attname::text, '<expr>') ORDER BY k.ord)
                       FROM unnest(ix.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
                       LEFT JOIN pg_attribute a ON a.attrelid = ix.indrelid AND a.attnum = k.attnum) AS cols
               FROM pg_index ix
               JOIN pg_class i ON i.oid = ix.indexrelid
               JOIN pg_class tb ON tb.oid = ix.indrelid
              WHERE tb.relnamespace = 'public'::regnamespace AND tb.relname = $1
                AND NOT (i.relname::text = ANY($2))",
        )
        .bind(&name)
        .bind(&PG_ONLY_INDEXES[..])
        .fetch_all(pool)
        .await
        .unwrap();
        for ix in indexes {
            let cols: Vec<String> = ix.get("cols");
            if ix.get::<bool, _>("pk") {
                t.primary_key = cols;
                continue;
            }
            let explicit = !ix.get::<bool, _>("constraint_backed");
            t.indexes.insert((
                explicit.then(|| ix.get("name")),
                ix.get::<bool, _>("u"),
                cols,
            ));
        }
        let fks = sqlx::query(
            "SELECT (SELECT array_agg(a.attname::text ORDER BY k.ord)
                       FROM unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
                       JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum) AS cols,
                    r.relname::text AS ref,
                    (SELECT array_agg(a.attname::text ORDER BY k.ord)
                       FROM unnest(c.confkey) WITH ORDINALITY AS k(attnum, ord)
                       JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.attnum) AS ref_cols,
                    c.confdeltype::text AS on_delete
               FROM pg_constraint c
               JOIN pg_class tb ON tb.oid = c.conrelid
               JOIN pg_class r ON r.oid = c.confrelid
              WHERE c.contype = 'f' AND tb.relnamespace = 'public'::regnamespace AND tb.relname = $1",
        )
        .bind(&name)
        .fetch_all(pool)
        .await
        .unwrap();
        for fk in fks {
            let on_delete = match fk.get::<String, _>("on_delete").as_str() {
                "a" => "NO ACTION",
                "c" => "CASCADE",
                "r" => "RESTRICT",
                "n" => "SET NULL",
                "d" => "SET DEFAULT",
                other => panic!("unknown confdeltype {other}"),
            };
            t.foreign_keys.insert((
                fk.get("cols"),
                fk.get("ref"),
                fk.get("ref_cols"),
                on_delete.to_string(),
            ));
        }
        tables.insert(name, t);
    }
    let triggers = sqlx::query_as(
        "SELECT t.tgname::text, c.relname::text FROM pg_trigger t
           JOIN pg_class c ON c.oid = t.tgrelid
          WHERE NOT t.tgisinternal AND c.relnamespace = 'public'::regnamespace",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .collect();
    Schema { tables, triggers }
}

/// The same statements on both backends: a run with a totals row the store
/// wrote, then discarded charges (one statement of two rows among them),
/// which the trigger adds to the run's totals.
const CHARGES: [&str; 12] = [
    "INSERT INTO benchmark (id, content_hash, root) VALUES (1, 'h', '/b')",
    "INSERT INTO llm (id, model_id) VALUES (1, 'vendor/model')",
    "INSERT INTO pillar (id, code, name) VALUES (1, 'P1', 'p')",
    "INSERT INTO behaviour (id, pillar_id, code, name) VALUES (1, 1, 'P1-B1', 'b')",
    "INSERT INTO scenario (id, behaviour_id, code, content_hash, evaluation, prompt)
     VALUES (7, 1, 'P1-B1-S1', 'h', '{}', 'p')",
    "INSERT INTO evaluation_run (id, benchmark_id, llm_id, status, settings, tool_version)
     VALUES (1, 1, 1, 'running', '{}', 't')",
    "INSERT INTO run_total (run_id, scenario_id, test_cases, passed) VALUES (1, 7, 2, 1)",
    "INSERT INTO discarded_charge (run_id, scenario_id, test_code, call, cost_usd, reason)
     VALUES (1, 7, 'a', 'model', 0.25, 'retried')",
    "INSERT INTO discarded_charge (run_id, scenario_id, test_code, call, cost_usd)
     VALUES (1, 7, 'a', 'judge', 0.125), (1, 7, 'b', 'judge', 0.0625)",
    "INSERT INTO discarded_charge (run_id, scenario_id, test_code, call, cost_usd, attempts, unknown_attempts)
     VALUES (1, 7, 'b', 'model', 0, 3, 3)",
    "INSERT INTO discarded_charge (run_id, scenario_id, test_code, call, cost_usd, attempts, unknown_attempts)
     VALUES (1, 7, 'c', 'judge', 0, 2, 2)",
    "INSERT INTO discarded_charge (run_id, scenario_id, test_code, call, cost_usd)
     VALUES (1, NULL, 'c', 'judge', 0.5)",
];

const TOTALS: &str = "SELECT scenario_id, test_cases, passed, discarded_model_usd,
        discarded_judge_usd, discarded_unknown
   FROM run_total WHERE run_id = 1 ORDER BY scenario_id";

type TotalRow = (i64, i64, i64, f64, f64, i64);

/// `2026-11-26T05:21:00.123Z`: SQLite's strftime('%Y-%m-%dT%H:%M:%fZ').
fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 24
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'.',
            23 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// The two migration folders are one history: the same versions and
/// descriptions, in order. sqlx's migrate!() reads only the files directly
/// in its folder, so `migrations/postgres/` never leaks into the SQLite
/// migrator (a leak would repeat every version).
#[test]
fn both_backends_have_the_same_migration_history() {
    let history = |m: &sqlx::migrate::Migrator| -> Vec<(i64, String)> {
        m.iter()
            .map(|m| (m.version, m.description.to_string()))
            .collect()
    };
    let sqlite = history(&SQLITE);
    assert_eq!(sqlite, history(&POSTGRES));
    let files = std::fs::read_dir(repo_root().join("migrations"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "sql")
        })
        .count();
    assert_eq!(sqlite.len(), files);
    let unique: BTreeSet<i64> = sqlite.iter().map(|(v, _)| *v).collect();
    assert_eq!(unique.len(), sqlite.len(), "a version repeats: {sqlite:?}");
}

/// PostgreSQL's migrations give the schema SQLite's give: the same tables,
/// columns (name, order, mapped type, nullability, default), primary keys,
/// indexes, foreign keys and triggers; and the run-totals trigger adds a
/// discarded charge to the totals the same way on both.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_schema_matches_sqlite() {
    let Some(url) = server() else { return };
    let pg = TestDb::create(&url).await;
    POSTGRES.run(&pg.pool).await.unwrap();
    let b = Bench::new();
    let lite = sqlite_store(&b).await;

    let (want, got) = (sqlite_schema(&lite).await, pg_schema(&pg.pool).await);
    assert!(want.tables.len() >= 25, "{:?}", want.tables.keys());
    assert_eq!(
        want.tables.keys().collect::<Vec<_>>(),
        got.tables.keys().collect::<Vec<_>>()
    );
    for (name, t) in &want.tables {
        assert_eq!(Some(t), got.tables.get(name), "table {name}");
    }
    assert_eq!(want.triggers, got.triggers);
    // Every text column compares in byte order, as SQLite's (issue 41,
    // item 11): a later migration's new column too.
    let other: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text FROM information_schema.columns
          WHERE table_schema = 'public' AND data_type = 'text' AND table_name <> '_sqlx_migrations'
            AND collation_name IS DISTINCT FROM 'C' ORDER BY 1, 2",
    )
    .fetch_all(&pg.pool)
    .await
    .unwrap();
    assert_eq!(other, vec![], "text columns without COLLATE \"C\"");
    assert!(
        want.triggers
            .contains(&("discarded_charge_total".into(), "discarded_charge".into()))
    );

    for sql in CHARGES {
        sqlx::query(sql).execute(&lite).await.unwrap();
        sqlx::query(sql).execute(&pg.pool).await.unwrap();
    }
    let on_sqlite: Vec<TotalRow> = sqlx::query_as(TOTALS).fetch_all(&lite).await.unwrap();
    let on_pg: Vec<TotalRow> = sqlx::query_as(TOTALS).fetch_all(&pg.pool).await.unwrap();
    assert_eq!(
        on_sqlite,
        vec![(0, 0, 0, 0.0, 0.5, 0), (7, 2, 1, 0.25, 0.1875, 5)]
    );
    assert_eq!(on_pg, on_sqlite);

    // Defaults fill in the same: the timestamp's form, a generated id.
    let stamp = "SELECT created_at FROM discarded_charge ORDER BY id";
    let lite_stamps: Vec<String> = sqlx::query_scalar(stamp).fetch_all(&lite).await.unwrap();
    let pg_stamps: Vec<String> = sqlx::query_scalar(stamp).fetch_all(&pg.pool).await.unwrap();
    assert_eq!(lite_stamps.len(), 6);
    assert_eq!(pg_stamps.len(), 6);
    for s in lite_stamps.iter().chain(&pg_stamps) {
        assert!(is_timestamp(s), "{s}");
    }
    let ids = "SELECT id FROM discarded_charge ORDER BY id";
    let lite_ids: Vec<i64> = sqlx::query_scalar(ids).fetch_all(&lite).await.unwrap();
    let pg_ids: Vec<i64> = sqlx::query_scalar(ids).fetch_all(&pg.pool).await.unwrap();
    assert_eq!(lite_ids, vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(pg_ids, lite_ids);

    lite.close().await;
    pg.remove().await;
}

/// Migrating an up-to-date PostgreSQL database again changes nothing: the
/// same schema, the same recorded history, no seed row inserted twice.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_migrations_twice_are_a_no_op() {
    let Some(url) = server() else { return };
    let pg = TestDb::create(&url).await;
    let history = "SELECT version, checksum, success FROM _sqlx_migrations ORDER BY version";
    POSTGRES.run(&pg.pool).await.unwrap();
    let schema = pg_schema(&pg.pool).await;
    let applied: Vec<(i64, Vec<u8>, bool)> =
        sqlx::query_as(history).fetch_all(&pg.pool).await.unwrap();
    assert_eq!(applied.len(), POSTGRES.iter().count());
    assert!(applied.iter().all(|(_, _, ok)| *ok));

    POSTGRES.run(&pg.pool).await.unwrap();
    assert_eq!(pg_schema(&pg.pool).await, schema);
    let again: Vec<(i64, Vec<u8>, bool)> =
        sqlx::query_as(history).fetch_all(&pg.pool).await.unwrap();
    assert_eq!(again, applied);
    let markers: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM totals_rebuild")
        .fetch_one(&pg.pool)
        .await
        .unwrap();
    assert_eq!(markers, 1);
    pg.remove().await;
}
