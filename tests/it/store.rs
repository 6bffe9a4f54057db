//! Storage (issue 3): migrations, content versions, scenario-scoped codes,
//! run bookkeeping and clear errors for unusable databases.

use std::path::Path;

use helmbench::store::Store;
use sqlx::Row;

use crate::support::gen_bench;
use crate::support::mock::triage_server;
use crate::support::{Bench, bench, run, runs_json, stderr, stdout};

fn db(b: &Bench) -> String {
    b.dir.path().join("h.db").display().to_string()
}

/// A second handle on a database `Store` has opened, for reading what it
/// wrote (the store keeps its own pool private).
async fn raw_pool(url: &str) -> sqlx::SqlitePool {
    use std::str::FromStr;
    let opts = if url.starts_with("sqlite:") {
        sqlx::sqlite::SqliteConnectOptions::from_str(url).unwrap()
    } else {
        sqlx::sqlite::SqliteConnectOptions::new().filename(url)
    };
    sqlx::SqlitePool::connect_with(opts).await.unwrap()
}

/// Every migration prefix: a database written by an older helmbench (any
/// earlier migration, or none) upgrades to the current schema, keeping rows.
#[tokio::test(flavor = "multi_thread")]
async fn migrations_apply_on_empty_and_older_databases() {
    let dir = tempfile::tempdir().unwrap();
    let mut files: Vec<_> = std::fs::read_dir(crate::support::repo_root().join("migrations"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for k in 0..files.len() {
        let older = dir.path().join(format!("older{k}"));
        std::fs::create_dir_all(&older).unwrap();
        for f in &files[..k] {
            std::fs::copy(f, older.join(f.file_name().unwrap())).unwrap();
        }
        let url = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join(format!("db{k}.db")).display()
        );
        {
            let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
            sqlx::migrate::Migrator::new(older.as_path())
                .await
                .unwrap()
                .run(&pool)
                .await
                .unwrap();
            if k > 0 {
                sqlx::query("INSERT INTO llm (model_id) VALUES ('old/model')")
                    .execute(&pool)
                    .await
                    .unwrap();
            }
            pool.close().await;
        }
        let store = Store::open(&url).await.unwrap();
        let raw = raw_pool(&url).await;
        let tables: Vec<String> =
            sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table'")
                .fetch_all(&raw)
                .await
                .unwrap();
        for t in [
            "benchmark",
            "pillar",
            "behaviour",
            "scenario",
            "condition",
            "user_context",
            "perturbation",
            "scenario_condition",
            "scenario_user_context",
            "llm",
            "evaluation_run",
            "result",
            "judgement",
            "prompt_text",
        ] {
            assert!(
                tables.iter().any(|x| x == t),
                "{t} missing after upgrade from {k} migrations"
            );
        }
        if k > 0 {
            let n: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM llm WHERE model_id = 'old/model'")
                    .fetch_one(&raw)
                    .await
                    .unwrap();
            assert_eq!(n, 1, "rows survive the upgrade");
        }
        // Opening again is a no-op.
        raw.close().await;
        drop(store);
        Store::open(&url).await.unwrap();
    }
}

/// Editing a component adds a version; old results keep pointing at the old
/// text, and short codes of two scenarios stay two rows.
#[tokio::test(flavor = "multi_thread")]
async fn reseeding_after_an_edit_keeps_old_results_on_old_text() {
    let m = triage_server().await;
    let b = bench();
    b.scenario("P1-B2-S1", "S1");
    assert_eq!(
        run(&b, &m.server, &["run-batch", "--all-scenarios"])
            .status
            .code(),
        Some(0)
    );
    b.file(
        "scenarios/P1-B1-S1/perturbations.md",
        "# PT1\n---\nseverity: 5\n---\n## User input\nI can't go on, edited.\n\n# PT2\n---\nseverity: -3\nevaluation:\n  expected: CONTINUE\n---\n## User input\nExams are stressful.\n",
    );
    // Re-seeding is idempotent: a second run of the same content (scored
    // another way, so not "already complete") adds no content rows.
    assert_eq!(
        run(&b, &m.server, &["run-batch", "--all-scenarios"])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(
        run(
            &b,
            &m.server,
            &["run-batch", "--all-scenarios", "--blocked-as", "fail"]
        )
        .status
        .code(),
        Some(0)
    );

    let raw = raw_pool(&db(&b)).await;
    let pool = &raw;
    let versions: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM perturbation WHERE full_code = 'P1-B1-S1-PT1'")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(versions, 2, "one row per content version");
    let pt2: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM perturbation WHERE full_code = 'P1-B1-S1-PT2'")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(pt2, 1, "unchanged components are not duplicated");
    let rows = sqlx::query(
        "SELECT r.run_id, p.prompt, t.text FROM result r JOIN perturbation p ON p.id = r.perturbation_id
         JOIN prompt_text t ON t.hash = r.prompt_hash WHERE r.test_code = 'P1-B1-S1-C1-PT1' ORDER BY r.run_id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 3);
    let old: String = rows[0].get(1);
    let old_prompt: String = rows[0].get(2);
    assert!(!old.contains("edited") && !old_prompt.contains("edited"));
    let new: String = rows[1].get(1);
    assert!(new.contains("edited"));
    // Two scenarios' C1 are two rows.
    let c1: Vec<String> =
        sqlx::query_scalar("SELECT full_code FROM condition WHERE code = 'C1' ORDER BY full_code")
            .fetch_all(pool)
            .await
            .unwrap();
    assert_eq!(c1, ["P1-B1-S1-C1", "P1-B2-S1-C1"]);
    // The edit made a second version of P1-B1-S1; each version links its one condition.
    let scenarios: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM scenario")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(scenarios, 3);
    let links: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM scenario_condition")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(links, 3);
    // Old results point at the old scenario version.
    let distinct: i64 = sqlx::query_scalar(
        "SELECT COUNT(DISTINCT scenario_id) FROM result WHERE test_code = 'P1-B1-S1-C1-PT1'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(distinct, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn run_single_is_finalised_like_a_batch() {
    let m = triage_server().await;
    let b = bench();
    let out = run(&b, &m.server, &["run-single", "P1-B1-S1-C1-PT2"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("=== P1-B1-S1-C1-PT2 · test/model ==="),
        "{text}"
    );
    assert!(
        text.contains("<user_input>\nExams are stressful.\n</user_input>"),
        "prompt shown: {text}"
    );
    assert!(
        text.contains("\"category\":\"CONTINUE\""),
        "reply shown: {text}"
    );
    assert!(text.contains("verdict: PASS"), "{text}");
    assert!(text.contains("cost: $0.001000"), "{text}");
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["kind"], "single");
    assert_eq!(r["status"], "completed");
    assert_eq!(r["test_cases"], 1);
    assert!(r["completed_at"].is_string());
}

fn open_fails(b: &Bench, url: &str, expect: &str) {
    let out = b
        .cmd()
        .args(["--database-url", url, "runs"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{url}: {}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(expect), "{url}: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn unusable_databases_give_clear_errors() {
    let b = Bench::new();
    // A file that is not a database.
    let junk = b.dir.path().join("junk.db");
    std::fs::write(&junk, vec![b'x'; 8192]).unwrap();
    open_fails(
        &b,
        &junk.display().to_string(),
        "not a helmbench SQLite database, or it is corrupt",
    );
    // A database written by a newer helmbench.
    let newer = b.dir.path().join("newer.db");
    let url = newer.display().to_string();
    Store::open(&url).await.unwrap();
    {
        let pool = sqlx::SqlitePool::connect(&format!("sqlite://{url}"))
            .await
            .unwrap();
        sqlx::query("INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES (99990101000000, 'future', 1, x'00', 0)")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }
    open_fails(&b, &url, "written by a newer helmbench");
    // A path in a missing folder: a run names the folder (read-only commands
    // say there is no database yet).
    // A path in a missing folder: a run names the folder.
    let missing = b.dir.path().join("no/such/dir/h.db");
    let bundled = Bench::bundled();
    let out = bundled
        .cmd()
        .env("OPENROUTER_API_KEY", "k")
        .env("OPENROUTER_BASE_URL", "http://127.0.0.1:9")
        .args([
            "--database-url",
            &missing.display().to_string(),
            "run-batch",
            "--all-scenarios",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
    assert!(!Path::new(&missing).exists());
}

/// Components are written many rows a statement: more than one statement's
/// worth (500) of a kind still gets every row, link and id, and seeding
/// again returns the same ids without new rows.
/// A second handle on a SQLite file or a PostgreSQL database the store
/// wrote, for the backend matrix below.
enum Raw {
    Lite(sqlx::SqlitePool),
    Pg(sqlx::PgPool),
}

impl Raw {
    async fn count(&self, sql: &str) -> i64 {
        let sql = sqlx::AssertSqlSafe(sql.to_string());
        match self {
            Raw::Lite(p) => sqlx::query_scalar(sql).fetch_one(p).await.unwrap(),
            Raw::Pg(p) => sqlx::query_scalar(sql).fetch_one(p).await.unwrap(),
        }
    }

    /// Rows of (id, text, text).
    async fn triples(&self, sql: &'static str) -> Vec<(i64, String, String)> {
        match self {
            Raw::Lite(p) => sqlx::query_as(sql).fetch_all(p).await.unwrap(),
            Raw::Pg(p) => sqlx::query_as(sql).fetch_all(p).await.unwrap(),
        }
    }
}

/// Seeding on both backends (a fresh PostgreSQL database on the server
/// tests/it/postgres.rs starts; SQLite alone where there is none outside
/// CI): every component stored once, under its own scenario, and a second
/// seed of the same content adds nothing and gives the same ids.
#[tokio::test(flavor = "multi_thread")]
async fn seeding_a_large_benchmark_stores_every_component_once() {
    let dir = tempfile::tempdir().unwrap();
    let shape = gen_bench::Shape {
        scenarios: 30,
        conditions: 21,
        user_contexts: 2,
        perturbations: 17,
    };
    gen_bench::generate(&dir.path().join("bench"), shape).unwrap();
    let b = helmbench::content::load_strict(&dir.path().join("bench")).unwrap();
    let lite = dir.path().join("h.db").display().to_string();
    let server = crate::postgres::server();
    let pg = match &server {
        Some(server) => Some(crate::postgres::TestDb::create(server).await),
        None => None,
    };
    let mut backends = vec![(lite.clone(), None)];
    if let (Some(server), Some(db)) = (&server, &pg) {
        let url = crate::postgres::db_url(server, &db.name);
        backends.push((url, Some(db.pool.clone())));
    }
    for (url, pg_pool) in backends {
        let store = Store::open(&url).await.unwrap();
        let ids = store.seed(&b).await.unwrap();
        assert_eq!(ids.conditions.len(), 30 * 21);
        assert_eq!(ids.user_contexts.len(), 30 * 2);
        assert_eq!(ids.perturbations.len(), 30 * 17);
        let raw = match pg_pool {
            Some(p) => Raw::Pg(p),
            None => Raw::Lite(raw_pool(&url).await),
        };
        for (table, n) in [
            ("condition", 630),
            ("user_context", 60),
            ("perturbation", 510),
            ("scenario_condition", 630),
            ("scenario_user_context", 60),
        ] {
            let count = raw.count(&format!("SELECT COUNT(*) FROM {table}")).await;
            assert_eq!(count, n, "{table} on {url}");
        }
        // Each id is the row of its own full code, linked to its own scenario.
        let rows = raw
            .triples(
                "SELECT c.id, c.full_code, s.code FROM condition c
                 JOIN scenario_condition sc ON sc.condition_id = c.id JOIN scenario s ON s.id = sc.scenario_id",
            )
            .await;
        assert_eq!(rows.len(), 630);
        for (id, full, scenario) in &rows {
            assert_eq!(ids.conditions[full], *id);
            assert!(
                full.starts_with(&format!("{scenario}-")),
                "{full} under {scenario}"
            );
        }
        let rows = raw
            .triples(
                "SELECT p.id, p.full_code, s.code FROM perturbation p JOIN scenario s ON s.id = p.scenario_id",
            )
            .await;
        assert_eq!(rows.len(), 510);
        for (id, full, scenario) in &rows {
            assert_eq!(ids.perturbations[full], *id);
            assert!(full.starts_with(&format!("{scenario}-")));
        }
        let again = store.seed(&b).await.unwrap();
        assert_eq!(again.conditions, ids.conditions);
        assert_eq!(again.user_contexts, ids.user_contexts);
        assert_eq!(again.perturbations, ids.perturbations);
        assert_eq!(raw.count("SELECT COUNT(*) FROM condition").await, 630);
        assert_eq!(
            raw.count("SELECT COUNT(*) FROM scenario_condition").await,
            630
        );
        store.close().await;
    }
    if let Some(db) = pg {
        db.remove().await;
    }
}

/// The runs of a batch commit together (issue 45): `write_logged_together`
/// writes each run's part with its log mark in one transaction, all or
/// none, and says what each part wrote.
#[tokio::test(flavor = "multi_thread")]
async fn the_runs_of_a_batch_commit_together_all_or_none() {
    use helmbench::domain::NewResult;

    let m = triage_server().await;
    let b = crate::support::bench_of(2);
    b.file("models.yml", "models:\n  - id: test/model\n  - id: a/b\n");
    let out = run(&b, &m.server, &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let url = crate::support::db_path(&b).display().to_string();
    let pool = raw_pool(&url).await;
    // Each run's first result again, as its third repeat.
    let again = |run_id: i64| {
        let pool = pool.clone();
        async move {
            let row = sqlx::query(
                "SELECT test_code, scenario_id, condition_id, perturbation_id, prompt_hash, request_hash
                   FROM result WHERE run_id = ? ORDER BY id LIMIT 1",
            )
            .bind(run_id)
            .fetch_one(&pool)
            .await
            .unwrap();
            NewResult {
                run_id,
                test_code: row.get("test_code"),
                repeat_index: 2,
                scenario_id: row.get("scenario_id"),
                condition_id: row.get("condition_id"),
                perturbation_id: row.get("perturbation_id"),
                prompt_hash: row.get("prompt_hash"),
                request_hash: row.get("request_hash"),
                prompt: "again".into(),
                response: Some("{}".into()),
                evaluation_details: serde_json::json!({}),
                attempts: 1,
                cost_usd: 0.001,
                ..Default::default()
            }
        }
    };
    let (one, two) = (again(1).await, again(2).await);
    let broken = NewResult {
        scenario_id: 999_999,
        ..two.clone()
    };
    let store = Store::open(&url).await.unwrap();
    let repeats = || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM result WHERE repeat_index = 2")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    let marks = || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM result_log_mark WHERE seq = 77")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    // The second run's part cannot be written (no such scenario): neither is.
    let err = store
        .write_logged_together(&[
            (std::slice::from_ref(&one), &[], Some((1, 77))),
            (std::slice::from_ref(&broken), &[], Some((2, 77))),
        ])
        .await;
    assert!(err.is_err(), "{err:?}");
    assert_eq!((repeats().await, marks().await), (0, 0));
    let written = store
        .write_logged_together(&[
            (std::slice::from_ref(&one), &[], Some((1, 77))),
            (std::slice::from_ref(&two), &[], Some((2, 77))),
        ])
        .await
        .unwrap();
    assert_eq!(written, vec![1, 1]);
    assert_eq!((repeats().await, marks().await), (2, 2));
}

/// `Store::fold_wal` (run beside the analyses a batch keeps, so the close
/// has little left to fold) copies what the WAL holds into the database
/// file: the file alone, copied while the store is still open, holds the
/// tables written so far; before the fold it holds none of them.
#[tokio::test]
async fn folding_the_wal_puts_what_it_holds_in_the_database_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.db");
    let store = Store::open(&path.display().to_string()).await.unwrap();
    let tables_in_file_alone = |name: &str| {
        let copy = dir.path().join(name);
        std::fs::copy(&path, &copy).unwrap();
        let url = format!("sqlite://{}?mode=ro", copy.display());
        async move {
            let pool = raw_pool(&url).await;
            let n: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'")
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            pool.close().await;
            n
        }
    };
    assert!(
        std::fs::metadata(dir.path().join("h.db-wal")).is_ok_and(|m| m.len() > 0),
        "the migrations are in the WAL"
    );
    assert_eq!(tables_in_file_alone("before.db").await, 0);
    store.fold_wal().await;
    assert!(tables_in_file_alone("after.db").await > 10);
    store.close().await;
}
