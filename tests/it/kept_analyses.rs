//! Kept analyses (issue 45): `run-batch` keeps each completed run's report
//! data, and `report` prints from it byte for byte what it prints from a
//! freshly computed analysis; anything the analysis depends on (the
//! results, the weights, the run's --blocked-as, its status) makes it
//! compute again. A kept body is tampered with (a sentinel number) to
//! tell which of the two `report` printed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};
use sqlx::{PgPool, SqlitePool};
use wiremock::{Request, ResponseTemplate};

use crate::postgres::{TestDb, db_url, server};
use crate::support::child::connect;
use crate::support::mock::{completion, prompt_of, serve};
use crate::support::scored_run::{KIND, bench, scripted_server};
use crate::support::{Bench, db_path, json as out_json, ok, stderr};
use crate::team_store::on;

/// The store under test, for the statements the test makes itself.
enum Db {
    Lite(SqlitePool),
    Pg(PgPool),
}

impl Db {
    async fn exec(&self, sql: &str) {
        let sql = sqlx::AssertSqlSafe(sql.to_string());
        match self {
            Db::Lite(p) => sqlx::query(sql).execute(p).await.map(|_| ()),
            Db::Pg(p) => sqlx::query(sql).execute(p).await.map(|_| ()),
        }
        .unwrap();
    }

    /// The kept analyses: (run id, key, body), by run.
    async fn kept(&self) -> Vec<(i64, String, String)> {
        let sql = "SELECT run_id, analysis_key, body FROM kept_analysis ORDER BY run_id";
        match self {
            Db::Lite(p) => sqlx::query_as(sql).fetch_all(p).await,
            Db::Pg(p) => sqlx::query_as(sql).fetch_all(p).await,
        }
        .unwrap()
    }

    /// Every kept body with `format_failures` made 77, under its own key.
    async fn tamper(&self) {
        for (run_id, _, body) in self.kept().await {
            let mut v: Value = serde_json::from_str(&body).unwrap();
            v["format_failures"] = json!(77);
            let body = v.to_string().replace('\'', "''");
            self.exec(&format!(
                "UPDATE kept_analysis SET body = '{body}' WHERE run_id = {run_id}"
            ))
            .await;
        }
    }
}

const FORMATS: [&[&str]; 6] = [
    &["report"],
    &["report", "--format", "json"],
    &["report", "--format", "html"],
    &["report", "--run-id", "1"],
    &["report", "--run-id", "2", "--format", "json"],
    &["report", "--model", "a/b", "--format", "html"],
];

/// Two models' runs, each analysis kept at the end of the batch; every
/// format of `report` from the kept analyses, then (with them deleted)
/// from fresh ones: the same bytes. The kept ones were read: a tampered
/// body shows. On SQLite both were kept from the tallies their writers
/// took (`tallied`: report::Tally), not read back: what the tally adds up
/// is what a fresh read computes.
async fn kept_prints_what_fresh_does(url: &str, tallied: usize, db: impl AsyncFnOnce() -> Db) {
    let (server, _, _) = scripted_server().await;
    let b = bench();
    let base = server.uri();
    let batch = ok(on(
        &b,
        url,
        &base,
        &[
            "run-batch",
            "--all-scenarios",
            "--models",
            "test/model,a/b",
            "--no-cache",
            "-vv",
        ],
    ));
    assert!(
        stderr(&batch).contains(&format!("tallied={tallied} runs=2")),
        "{}",
        stderr(&batch)
    );
    let db = db().await;
    let kept = db.kept().await;
    assert_eq!(
        kept.iter().map(|k| k.0).collect::<Vec<_>>(),
        [1, 2],
        "every completed run's analysis is kept"
    );
    let from_kept: Vec<Vec<u8>> = FORMATS
        .iter()
        .map(|args| ok(on(&b, url, &base, args)).stdout)
        .collect();
    db.tamper().await;
    let r = out_json(&ok(on(&b, url, &base, &["report", "--format", "json"])));
    assert_eq!(
        r["reports"][0]["format_failures"], 77,
        "the kept one is read"
    );
    assert_eq!(
        r["reports"][1]["format_failures"], 77,
        "the kept one is read"
    );
    db.exec("DELETE FROM kept_analysis").await;
    for (args, kept) in FORMATS.iter().zip(from_kept) {
        let fresh = ok(on(&b, url, &base, args)).stdout;
        assert!(
            fresh == kept,
            "{args:?}: from the kept analysis\n{}\nfresh\n{}",
            String::from_utf8_lossy(&kept),
            String::from_utf8_lossy(&fresh)
        );
    }
    // A read command writes nothing: no analysis is kept by `report`.
    assert!(db.kept().await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kept_analysis_prints_what_a_fresh_one_does_on_sqlite() {
    let b = bench();
    let url = db_path(&b).display().to_string();
    kept_prints_what_fresh_does(&url, 2, async || {
        Db::Lite(
            sqlx::sqlite::SqlitePoolOptions::new()
                .connect(&format!("sqlite://{url}"))
                .await
                .unwrap(),
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kept_analysis_prints_what_a_fresh_one_does_on_postgresql() {
    let Some(pg_server) = server() else { return };
    let db = TestDb::create(&pg_server).await;
    let url = db_url(&pg_server, &db.name);
    let pool = db.pool.clone();
    kept_prints_what_fresh_does(&url, 0, async || Db::Pg(pool)).await;
    db.remove().await;
}

/// Everything else the analysis depends on, changed one at a time under a
/// tampered kept body: the weights and floors, the run's --blocked-as, its
/// status, --details. Each makes `report` compute (the sentinel gone); put
/// back, the kept one is read again.
#[tokio::test(flavor = "multi_thread")]
async fn what_the_analysis_depends_on_makes_report_compute_again() {
    let (server, _, _) = scripted_server().await;
    let b = bench();
    let base = server.uri();
    ok(on(&b, "h.db", &base, &["run-batch", "--all-scenarios"]));
    let db = Db::Lite(connect(&b).await.unwrap());
    db.tamper().await;
    let failures = |args: &[&str]| {
        let mut all = vec!["report", "--run-id", "1", "--format", "json"];
        all.extend(args);
        out_json(&ok(on(&b, "h.db", &base, &all)))["format_failures"].clone()
    };
    assert_eq!(failures(&[]), 77);
    assert_eq!(failures(&["--details"]), 1, "--details always computes");

    let scoring = b.root().join("scoring.yaml");
    let weights = std::fs::read_to_string(&scoring).unwrap();
    std::fs::write(&scoring, weights.replace("P1-B1: 3", "P1-B1: 2")).unwrap();
    assert_eq!(failures(&[]), 1, "other weights");
    std::fs::write(&scoring, weights.replace("0.5", "0.25")).unwrap();
    assert_eq!(failures(&[]), 1, "another floor");
    std::fs::write(&scoring, &weights).unwrap();
    assert_eq!(failures(&[]), 77);

    let settings: String = match &db {
        Db::Lite(p) => sqlx::query_scalar("SELECT settings FROM evaluation_run")
            .fetch_one(p)
            .await
            .unwrap(),
        Db::Pg(_) => unreachable!(),
    };
    let mut v: Value = serde_json::from_str(&settings).unwrap();
    v["blocked_as"] = json!("fail");
    let set = |s: String| {
        format!(
            "UPDATE evaluation_run SET settings = '{}'",
            s.replace('\'', "''")
        )
    };
    db.exec(&set(v.to_string())).await;
    assert_eq!(failures(&[]), 1, "the run's --blocked-as");
    db.exec(&set(settings)).await;
    assert_eq!(failures(&[]), 77);

    db.exec("UPDATE evaluation_run SET status = 'interrupted'")
        .await;
    assert_eq!(failures(&[]), 1, "a run not completed");
    db.exec("UPDATE evaluation_run SET status = 'completed'")
        .await;
    assert_eq!(failures(&[]), 77);

    // A result deleted (its judgements with it).
    db.exec(
        "DELETE FROM judgement WHERE result_id = (SELECT MAX(id) FROM result);
         DELETE FROM result WHERE id = (SELECT MAX(id) FROM result);",
    )
    .await;
    assert_eq!(failures(&[]), 1, "a result fewer");
}

/// A re-judge (`run-batch --resume` of a completed run with a judge error)
/// changes the run's results: the next `report` computes, even where the
/// analysis kept before the re-judge were left in place.
#[tokio::test(flavor = "multi_thread")]
async fn a_rejudge_makes_the_next_report_compute_again() {
    let healed = Arc::new(AtomicBool::new(false));
    let h = healed.clone();
    let server = serve(move |req: &Request| {
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        if body["model"] != "judge/model" {
            let content = if prompt_of(req).contains("I feel low.") {
                "That sounds hard.".to_string()
            } else {
                json!({"category": "HANDOFF", "response": KIND}).to_string()
            };
            return ResponseTemplate::new(200).set_body_json(completion(&content, 0.001));
        }
        let content = if h.load(Ordering::SeqCst) {
            r#"{"judgment":"SAFE","justification":"fine"}"#
        } else {
            "no verdict here"
        };
        ResponseTemplate::new(200).set_body_json(completion(content, 0.0005))
    })
    .await;
    let b = bench();
    let base = server.uri();
    let out = on(&b, "h.db", &base, &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let db = Db::Lite(connect(&b).await.unwrap());
    let before = db.kept().await;
    assert_eq!(
        before.len(),
        1,
        "a completed run with a judge error is kept"
    );
    let report = |b: &Bench| ok(on(b, "h.db", &base, &["report", "--format", "json"])).stdout;
    let judged_wrong = out_json(&ok(on(&b, "h.db", &base, &["report", "--format", "json"])));
    assert_eq!(judged_wrong["reports"][0]["judge_errors"], 1);

    healed.store(true, Ordering::SeqCst);
    let resumed = ok(on(
        &b,
        "h.db",
        &base,
        &["run-batch", "--resume", "1", "-vv"],
    ));
    // The resuming process wrote one result of the run's 13 (replacing
    // one): its tally does not stand for the run, which is read back.
    assert!(
        stderr(&resumed).contains("tallied=0 runs=1"),
        "{}",
        stderr(&resumed)
    );
    let after = db.kept().await;
    assert_ne!(after[0].1, before[0].1, "kept again under a new key");
    let kept_after = report(&b);
    // The analysis of before the re-judge, as if it had not been replaced.
    let (_, key, body) = &before[0];
    db.exec(&format!(
        "UPDATE kept_analysis SET analysis_key = '{key}', body = '{}'",
        body.replace('\'', "''")
    ))
    .await;
    let printed = report(&b);
    db.exec("DELETE FROM kept_analysis").await;
    let fresh = report(&b);
    assert_eq!(
        String::from_utf8_lossy(&printed),
        String::from_utf8_lossy(&fresh)
    );
    let v: Value = serde_json::from_slice(&fresh).unwrap();
    assert_eq!(v["reports"][0]["judge_errors"], 0, "{v}");
    assert_eq!(
        String::from_utf8_lossy(&kept_after),
        String::from_utf8_lossy(&fresh),
        "the analysis kept after the re-judge"
    );
}
