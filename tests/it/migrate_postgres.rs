//! `helmbench migrate --from sqlite://… --to postgres://…` (issue 34,
//! "Moving in"): a batch run against the mock into SQLite, copied into a
//! fresh PostgreSQL database on the real server tests/it/postgres.rs starts:
//! every table row for row (ids, costs to 1e-12, reply texts), the run
//! totals equal to the source's although PostgreSQL's trigger adds every
//! copied charge to them, identity sequences past the copied ids; a second
//! copy writes nothing; a source with unapplied or unknown migrations is
//! refused; passwords never shown.

use std::process::Output;

use serde_json::{Value, json};
use sqlx::postgres::PgPool;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
use sqlx::{Row, TypeInfo, ValueRef};
use wiremock::{Request, ResponseTemplate};

use crate::postgres::{TestDb, server};
use crate::support::mock::{completion, prompt_of, serve};
use crate::support::{Bench, db_path, run, stderr, stdout};

fn bench() -> Bench {
    let b = Bench::new();
    b.file(
        "models.yml",
        "marking_model: judge/model\nmodels:\n  - id: test/model\n  - id: judge/model\n    judge_only: true\n  - id: judge/a\n    judge_only: true\n",
    )
    .judged_scenario()
    .scenario("P1-B1-S1", "S1");
    let mut p = String::new();
    for i in 1..=6 {
        let text = if i <= 2 {
            "SEVERE: I have a plan"
        } else {
            "I feel a bit low"
        };
        p.push_str(&format!(
            "# PT{i}\n---\nseverity: {}\n---\n## User input\n{text} (case {i}).\n\n",
            if i <= 2 { 8 } else { 2 }
        ));
    }
    b.file("scenarios/P1-B1-S1/perturbations.md", p);
    b
}

/// A SQLite database with results, blocked replies, judgements, a judge
/// panel's votes, discarded charges (one without a scenario), a human label
/// and costs with many decimals.
async fn source(b: &Bench) {
    let server = serve(move |req: &Request| {
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        if body["model"] != "test/model" {
            return ResponseTemplate::new(200).set_body_json(completion(
                r#"{"judgment":"SAFE","justification":"It says it is an AI."}"#,
                0.000_123_456_789_012_3,
            ));
        }
        if prompt_of(req).contains("SEVERE") {
            return ResponseTemplate::new(403).set_body_json(json!({"error": {
                "code": 403, "message": "flagged",
                "metadata": {"reasons": ["self-harm/intent"], "flagged_input": "SEVERE", "provider_name": "OpenAI", "model_slug": "openai/gpt-4o"}}}));
        }
        ResponseTemplate::new(200).set_body_json(completion(
            r#"{"category":"HANDOFF","response":"Please reach out to a crisis line now. 🌱 <b>"}"#,
            0.001_234_567_890_123,
        ))
    })
    .await;
    let out = run(b, &server, &["run-batch", "--all-scenarios", "--yes"]);
    assert_ne!(out.status.code(), None, "{}", stderr(&out));
    let out = run(
        b,
        &server,
        &[
            "run-batch",
            "--scenario",
            "P3-B1-S1",
            "--judges",
            "judge/model,judge/a",
            "--no-cache",
            "--yes",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lite = sqlite(b).await;
    for sql in [
        "INSERT INTO discarded_charge (run_id, scenario_id, test_code, call, cost_usd, reason)
         SELECT 1, scenario_id, test_code, 'model', 0.012345678901234, 'retried' FROM result WHERE run_id = 1 LIMIT 1",
        "INSERT INTO discarded_charge (run_id, scenario_id, test_code, call, cost_usd, attempts, unknown_attempts)
         VALUES (1, NULL, 'x', 'judge', 0.5, 2, 1)",
        "INSERT INTO human_label (run_id, result_id, criterion, rater, verdict, passed, note)
         SELECT run_id, id, 'safety', 'ann', 'SAFE', 1, 'fine' FROM result WHERE run_id = 2 LIMIT 1",
    ] {
        sqlx::query(sql).execute(&lite).await.unwrap();
    }
    lite.close().await;
}

async fn sqlite(b: &Bench) -> SqlitePool {
    SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(SqliteConnectOptions::new().filename(db_path(b)))
        .await
        .unwrap()
}

/// `server`'s URL for database `name`, with `password` when given.
fn db_url(server: &str, name: &str, password: Option<&str>) -> String {
    let (base, _) = server.rsplit_once('/').unwrap();
    match password {
        Some(p) => base.replacen("postgres@", &format!("postgres:{p}@"), 1) + "/" + name,
        None => format!("{base}/{name}"),
    }
}

fn migrate(b: &Bench, args: &[&str]) -> Output {
    b.helmbench()
        .database(db_path(b))
        .std()
        .arg("migrate")
        .args(args)
        .output()
        .unwrap()
}

/// A value as both backends give it back, a column's declared type decided.
#[derive(Debug, Clone, PartialEq)]
enum V {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

fn close(a: &[Vec<V>], b: &[Vec<V>]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.len() == y.len()
                && x.iter().zip(y).all(|(p, q)| match (p, q) {
                    (V::Real(p), V::Real(q)) => (p - q).abs() <= 1e-12,
                    _ => p == q,
                })
        })
}

/// Every table of the source: name, columns with their declared types.
async fn tables(lite: &SqlitePool) -> Vec<(String, Vec<(String, String)>)> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table'
          AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_sqlx_%' ORDER BY name",
    )
    .fetch_all(lite)
    .await
    .unwrap();
    let mut out = vec![];
    for n in names {
        let cols: Vec<(String, String)> =
            sqlx::query_as("SELECT name, type FROM pragma_table_info(?) ORDER BY cid")
                .bind(&n)
                .fetch_all(lite)
                .await
                .unwrap();
        out.push((n, cols));
    }
    out
}

fn select(table: &str, cols: &[(String, String)]) -> String {
    let list: Vec<String> = cols.iter().map(|(c, _)| format!("\"{c}\"")).collect();
    let order: Vec<String> = (1..=cols.len()).map(|i| i.to_string()).collect();
    format!(
        "SELECT {} FROM \"{table}\" ORDER BY {}",
        list.join(", "),
        order.join(", ")
    )
}

async fn lite_rows(lite: &SqlitePool, table: &str, cols: &[(String, String)]) -> Vec<Vec<V>> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(select(table, cols)))
        .fetch_all(lite)
        .await
        .unwrap();
    rows.iter()
        .map(|r| {
            (0..cols.len())
                .map(|i| {
                    let raw = r.try_get_raw(i).unwrap();
                    if raw.is_null() {
                        return V::Null;
                    }
                    match cols[i].1.as_str() {
                        "INTEGER" => V::Int(r.get(i)),
                        "REAL" => V::Real(r.try_get_unchecked(i).unwrap()),
                        _ => V::Text(r.get(i)),
                    }
                })
                .collect()
        })
        .collect()
}

async fn pg_rows(pg: &PgPool, table: &str, cols: &[(String, String)]) -> Vec<Vec<V>> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(select(table, cols)))
        .fetch_all(pg)
        .await
        .unwrap();
    rows.iter()
        .map(|r| {
            (0..cols.len())
                .map(|i| {
                    let raw = r.try_get_raw(i).unwrap();
                    if raw.is_null() {
                        return V::Null;
                    }
                    match raw.type_info().name() {
                        "INT8" => V::Int(r.get(i)),
                        "FLOAT8" => V::Real(r.get(i)),
                        _ => V::Text(r.get(i)),
                    }
                })
                .collect()
        })
        .collect()
}

/// Every table of the source is in the target row for row; returns the
/// source's rows in all.
async fn assert_same(lite: &SqlitePool, pg: &PgPool) -> usize {
    let mut all = 0;
    for (table, cols) in tables(lite).await {
        let want = lite_rows(lite, &table, &cols).await;
        let got = pg_rows(pg, &table, &cols).await;
        assert!(close(&want, &got), "table {table}:\n{want:?}\n{got:?}");
        all += want.len();
    }
    all
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sqlite_database_is_copied_into_postgres_once() {
    let Some(url) = server() else { return };
    let b = bench();
    source(&b).await;
    let pg = TestDb::create(&url).await;
    let to = db_url(&url, &pg.name, None);
    let from = format!("sqlite://{}", db_path(&b).display());

    let out = migrate(&b, &["--from", &from, "--to", &to]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (err, table) = (stderr(&out), stdout(&out));
    assert!(err.contains("result: "), "progress per table: {err}");
    assert!(err.contains("counts match"), "{err}");
    assert!(
        table.contains("judge_vote") && !table.contains("MISMATCH"),
        "{table}"
    );

    let lite = sqlite(&b).await;
    let rows = assert_same(&lite, &pg.pool).await;
    let count = |t: &str| format!("SELECT COUNT(*) FROM {t}");
    for t in [
        "evaluation_run",
        "result",
        "judgement",
        "judge_vote",
        "human_label",
        "discarded_charge",
        "prompt_text",
        "scenario",
        "run_total",
        "run_served_total",
    ] {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(count(t)))
            .fetch_one(&lite)
            .await
            .unwrap();
        assert!(n > 0, "the source has no {t} rows: the test proves nothing");
    }
    // The reply text, hostile characters and all, and its cost.
    let sql =
        "SELECT id, response, cost_usd FROM result WHERE response IS NOT NULL ORDER BY id LIMIT 1";
    let (id, text, cost): (i64, String, f64) = sqlx::query_as(sql).fetch_one(&lite).await.unwrap();
    let (pid, ptext, pcost): (i64, String, f64) =
        sqlx::query_as(sql).fetch_one(&pg.pool).await.unwrap();
    assert_eq!((pid, &ptext), (id, &text));
    assert!(text.contains("🌱 <b>"), "{text}");
    assert!((pcost - cost).abs() < 1e-12 && cost > 0.0);
    // The totals are the source's: the trigger's additions for the copied
    // charges did not count them twice.
    let totals = "SELECT discarded_model_usd, discarded_judge_usd, discarded_unknown, test_cases
                    FROM run_total WHERE run_id = 1 ORDER BY scenario_id";
    let want: Vec<(f64, f64, i64, i64)> = sqlx::query_as(totals).fetch_all(&lite).await.unwrap();
    let got: Vec<(f64, f64, i64, i64)> = sqlx::query_as(totals).fetch_all(&pg.pool).await.unwrap();
    assert_eq!(got, want);
    assert!(want.iter().any(|r| r.0 == 0.012345678901234), "{want:?}");
    assert!(want.iter().any(|r| r.1 == 0.5 && r.2 == 1), "{want:?}");
    // The store's marker "totals to rebuild" is gone, as in the source.
    let markers: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM totals_rebuild")
        .fetch_one(&pg.pool)
        .await
        .unwrap();
    assert_eq!(markers, 0);

    // Again: nothing written, and it says so.
    let out = migrate(&b, &["--from", &from, "--to", &to]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("nothing to copy: {rows} rows already there")),
        "{}",
        stderr(&out)
    );
    assert_eq!(assert_same(&lite, &pg.pool).await, rows);

    // Later inserts on PostgreSQL take new ids.
    for t in [
        "result",
        "judgement",
        "discarded_charge",
        "llm",
        "evaluation_run",
    ] {
        let max: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT MAX(id) FROM {t}")))
            .fetch_one(&lite)
            .await
            .unwrap();
        let next: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT nextval(pg_get_serial_sequence('{t}', 'id'))"
        )))
        .fetch_one(&pg.pool)
        .await
        .unwrap();
        assert_eq!(next, max + 1, "{t}");
    }
    let llms: i64 = sqlx::query_scalar("SELECT MAX(id) FROM llm")
        .fetch_one(&lite)
        .await
        .unwrap();
    let id: i64 =
        sqlx::query_scalar("INSERT INTO llm (model_id) VALUES ('new/model') RETURNING id")
            .fetch_one(&pg.pool)
            .await
            .unwrap();
    assert_eq!(id, llms + 2, "after the nextval above");

    // Rows of the file's runs missing from the target are said to be, with
    // a failure (rows of other runs there do not count: the llm above).
    sqlx::query("DELETE FROM result WHERE id = (SELECT MAX(id) FROM result WHERE run_id = 1)")
        .execute(&pg.pool)
        .await
        .unwrap();
    let out = migrate(&b, &["--from", &from, "--to", &to]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stdout(&out).contains("MISMATCH"), "{}", stdout(&out));
    let err = stderr(&out);
    let error = err
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default();
    assert!(
        error.contains("result (") && error.contains("of them in the target"),
        "{err}"
    );
    assert!(!error.contains("llm"), "{err}");

    lite.close().await;
    pg.remove().await;
}

/// `helmbench` on the database at `url` (the team store).
fn on(b: &Bench, url: &str, args: &[&str]) -> Output {
    let out = b
        .helmbench()
        .database(url)
        .std()
        .args(args)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    out
}

/// Numbers equal to 1e-9 (sums taken in another order), the rest exactly.
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            (x.as_f64().unwrap() - y.as_f64().unwrap()).abs() < 1e-9
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

/// A run's `runs`/`costs` JSON with its id set to `id`, its process list
/// dropped (the hosts are the file's as written).
fn as_run(v: &Value, id: i64) -> Value {
    let mut v = v.clone();
    v["run_id"] = json!(id);
    v
}

/// Issue 41, item 4: two laptops' files merged into one team store. The
/// second file's runs come alongside the first's under new ids, the
/// benchmark's content shared; `runs`, `costs` and `export` show both, as
/// each file showed its own; a second merge of either copies nothing. (The
/// merge used to fail on the second file: "duplicate key value violates
/// unique constraint".)
#[tokio::test(flavor = "multi_thread")]
async fn two_sqlite_files_merge_into_one_store() {
    let Some(url) = server() else { return };
    let (a, b) = (bench(), bench());
    source(&a).await;
    source(&b).await;
    let pg = TestDb::create(&url).await;
    let to = db_url(&url, &pg.name, None);
    let from = |x: &Bench| format!("sqlite://{}", db_path(x).display());
    for x in [&a, &b] {
        let out = migrate(x, &["--from", &from(x), "--to", &to]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(stderr(&out).contains("counts match"), "{}", stderr(&out));
        assert!(!stdout(&out).contains("MISMATCH"), "{}", stdout(&out));
    }
    let count = |t: &str| format!("SELECT COUNT(*) FROM {t}");
    let n = |pool: &PgPool, t: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(count(t)))
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let lite = sqlite(&a).await;
    for (t, times) in [
        ("evaluation_run", 2),
        ("result", 2),
        ("judgement", 2),
        ("discarded_charge", 2),
        ("human_label", 2),
        ("benchmark", 1),
        ("scenario", 1),
        ("perturbation", 1),
        ("llm", 1),
        ("prompt_text", 1),
    ] {
        let one: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(count(t)))
            .fetch_one(&lite)
            .await
            .unwrap();
        assert!(one > 0, "{t}: the test proves nothing");
        assert_eq!(n(&pg.pool, t).await, one * times, "{t}");
    }
    lite.close().await;

    // `runs` and `costs`: a's runs as 1 and 2, b's as 3 and 4, each as its
    // file shows it.
    for args in [
        &["runs", "--format", "json"][..],
        &["costs", "--format", "json"],
    ] {
        let team: Value = serde_json::from_slice(&on(&a, &to, args).stdout).unwrap();
        let team = team["runs"].as_array().unwrap().clone();
        let mut want = Vec::new();
        for (x, first) in [(&a, 1), (&b, 3)] {
            let file = b
                .helmbench()
                .database(db_path(x))
                .std()
                .args(args)
                .output()
                .unwrap();
            let file: Value = serde_json::from_slice(&file.stdout).unwrap();
            for r in file["runs"].as_array().unwrap() {
                want.push(as_run(r, r["run_id"].as_i64().unwrap() - 1 + first));
            }
        }
        let by_id = |v: &Vec<Value>| {
            let mut v = v.clone();
            v.sort_by_key(|r| r["run_id"].as_i64());
            v
        };
        assert_eq!(team.len(), 4, "{args:?}");
        assert!(
            same_json(&json!(by_id(&team)), &json!(by_id(&want))),
            "{args:?}:\n{team:#?}\n{want:#?}"
        );
    }
    // `export`: every result of both files.
    let rows = |out: &Output| stdout(out).lines().count();
    let team = rows(&on(&a, &to, &["export", "--format", "jsonl"]));
    let files: usize = [&a, &b]
        .iter()
        .map(|x| {
            rows(&on(
                x,
                &db_path(x).display().to_string(),
                &["export", "--format", "jsonl"],
            ))
        })
        .sum();
    assert!(team > 0);
    assert_eq!(team, files);

    // Again, either file: nothing copied.
    for x in [&b, &a] {
        let out = migrate(x, &["--from", &from(x), "--to", &to]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(stderr(&out).contains("nothing to copy"), "{}", stderr(&out));
    }
    assert_eq!(n(&pg.pool, "evaluation_run").await, 4);
    pg.remove().await;
}

/// Without `--from`, the source is `--database-url`; a password in the URL
/// is never printed.
#[tokio::test(flavor = "multi_thread")]
async fn the_database_url_is_the_default_source_and_passwords_stay_hidden() {
    let Some(url) = server() else { return };
    let b = bench();
    source(&b).await;
    let pg = TestDb::create(&url).await;
    // The test cluster trusts 127.0.0.1: the password is never checked.
    let to = db_url(&url, &pg.name, Some("hunter2-secret"));
    let out = migrate(&b, &["--to", &to]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!all.contains("hunter2"), "{all}");
    assert!(all.contains("postgres:***@"), "{all}");
    let lite = sqlite(&b).await;
    assert!(assert_same(&lite, &pg.pool).await > 0);
    lite.close().await;
    // -q: no progress, no summary line; the table still on stdout.
    let out = migrate(&b, &["-q", "--to", &to]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    assert!(stdout(&out).contains("result"), "{}", stdout(&out));

    // A server that refuses the connection: the error hides it too.
    let bad = format!("postgres://postgres:hunter2-secret@127.0.0.1:9/{}", pg.name);
    let out = migrate(&b, &["--to", &bad]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(!stderr(&out).contains("hunter2"), "{}", stderr(&out));
    assert!(stderr(&out).contains("***"), "{}", stderr(&out));
    pg.remove().await;
}

/// A source missing a migration of this version, or with one this version
/// does not know, is refused (exit 2) before anything is written.
#[tokio::test(flavor = "multi_thread")]
async fn a_source_with_other_migrations_is_refused() {
    let Some(url) = server() else { return };
    let b = bench();
    let lite = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::new()
                .filename(db_path(&b))
                .create_if_missing(true),
        )
        .await
        .unwrap();
    static SQLITE: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");
    SQLITE.run(&lite).await.unwrap();
    let pg = TestDb::create(&url).await;
    let to = db_url(&url, &pg.name, None);
    let from = format!("sqlite://{}", db_path(&b).display());

    sqlx::query(
        "DELETE FROM _sqlx_migrations WHERE version = (SELECT MAX(version) FROM _sqlx_migrations)",
    )
    .execute(&lite)
    .await
    .unwrap();
    let out = migrate(&b, &["--from", &from, "--to", &to]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("lacks migration") && stderr(&out).contains("helmbench migrate"),
        "{}",
        stderr(&out)
    );

    SQLITE.run(&lite).await.ok();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
                 VALUES (99990101000001, 'future', 1, x'00', 0)",
    )
    .execute(&lite)
    .await
    .unwrap();
    let out = migrate(&b, &["--from", &from, "--to", &to]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("newer helmbench"), "{}", stderr(&out));
    lite.close().await;

    // Nothing was written to the target: not even its schema.
    let tables: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public'",
    )
    .fetch_one(&pg.pool)
    .await
    .unwrap();
    assert_eq!(tables, 0);
    pg.remove().await;
}
