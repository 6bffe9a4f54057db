//! The team store (issue 34, "every command on postgres://"): the same
//! batch, run through the CLI once into SQLite and once into a fresh
//! PostgreSQL database on the real server tests/it/postgres.rs starts,
//! reads the same through every read command: `runs`, `costs`, `report`,
//! `export`, `compare`, `review`, `estimate`, the totals kept as results are written
//! (recounted), and a resume of a completed run. Values that are the time
//! or the machine's (timestamps, latencies, the database's own name) are
//! set aside before comparing; every count, cost, score and reply must be
//! equal.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::postgres::{TestDb, db_url, server};
use crate::support::scored_run::{bench, scripted_server};
use crate::support::{Bench, KEY, json, jsonl, ok, stderr, stdout};

/// helmbench ARGS on `url`, against the mock at `base`.
pub(crate) fn on(b: &Bench, url: &str, base: &str, args: &[&str]) -> Output {
    b.helmbench()
        .database(url)
        .provider(KEY, base)
        .std()
        .args(args)
        .output()
        .unwrap()
}

/// Keys whose values are the clock's or the machine's, not the data's.
const VOLATILE: [&str; 11] = [
    "started_at",
    "updated_at",
    // A Batch API batch's polling round: how soon its judge batch went out.
    "round",
    "completed_at",
    "created_at",
    "latency_ms",
    "heartbeat_age_s",
    "database",
    "generated_at",
    "owner",
    "hosts",
];

/// `v` without [`VOLATILE`] keys, at any depth.
fn steady(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !VOLATILE.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), steady(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(steady).collect()),
        other => other.clone(),
    }
}

/// The first path where `a` and `b` differ, for a readable failure.
fn first_difference(a: &Value, b: &Value, at: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()) {
                let (p, q) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                if let Some(d) = first_difference(p, q, &format!("{at}.{k}")) {
                    return Some(d);
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(p, q, &format!("{at}[{i}]"))),
        _ if a == b => None,
        // Sums of costs: SQLite adds floats with compensated (Kahan-
        // Babuska-Neumaier) summation, PostgreSQL's sum(float8) plainly;
        // they agree to the last few bits, never to a printed digit.
        (Value::Number(x), Value::Number(y))
            if (x.as_f64().unwrap() - y.as_f64().unwrap()).abs()
                <= 1e-12 * x.as_f64().unwrap().abs().max(1.0) =>
        {
            None
        }
        _ => Some(format!("{at}: SQLite {a} / PostgreSQL {b}")),
    }
}

fn assert_same(what: &str, lite: &Value, pg: &Value) {
    let (lite, pg) = (steady(lite), steady(pg));
    if let Some(d) = first_difference(&lite, &pg, what) {
        panic!("{what} differs between the backends: {d}");
    }
}

/// The export's lines, ordered by run and test case (each backend streams
/// in its own id order, which is the order results were written in).
fn sorted_export(out: &Output) -> Vec<Value> {
    let mut rows: Vec<Value> = jsonl(out).iter().map(steady).collect();
    rows.sort_by_key(|r| {
        (
            r["run_id"].as_i64(),
            r["test_code"].as_str().map(str::to_string),
            r["repeat_index"].as_i64(),
        )
    });
    rows
}

/// The totals the store kept at `url` equal a recount of its rows.
async fn assert_recounted(url: &str) {
    let store = helmbench::store::Store::open(url).await.unwrap();
    assert_eq!(
        store.recount_mismatches().await.unwrap(),
        Vec::<String>::new()
    );
    store.close().await;
}

/// A review sheet with every verdict filled as the judge's opposite on
/// one criterion, so the calibration has something to say.
fn filled(sheet: &Path) -> String {
    let mut r = csv::Reader::from_path(sheet).unwrap();
    let headers = r.headers().unwrap().clone();
    let col = |n: &str| headers.iter().position(|h| h == n).unwrap();
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(&headers).unwrap();
    for (i, rec) in r.records().enumerate() {
        let mut rec: Vec<String> = rec.unwrap().iter().map(str::to_string).collect();
        rec[col("verdict")] = if i % 2 == 0 { "SAFE" } else { "UNSAFE" }.into();
        w.write_record(&rec).unwrap();
    }
    String::from_utf8(w.into_inner().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_read_command_says_the_same_on_postgresql_as_on_sqlite() {
    let Some(pg_server) = server() else { return };
    let db = TestDb::create(&pg_server).await;
    let pg = db_url(&pg_server, &db.name);
    let (server, model_calls, _) = scripted_server().await;
    let b = bench();
    let lite = crate::support::db_path(&b).display().to_string();
    let lite = lite.as_str();
    // No cache: the two models' runs judge identical replies, and which of
    // them pays the judge and which reuses its verdict is a race (a run's
    // judge cost would differ between the backends by timing alone).
    let batch = [
        "run-batch",
        "--all-scenarios",
        "--models",
        "test/model,a/b",
        "--no-cache",
    ];
    ok(on(&b, lite, &server.uri(), &batch));
    let calls = model_calls.load(std::sync::atomic::Ordering::SeqCst);
    ok(on(&b, &pg, &server.uri(), &batch));
    // Nothing reused across databases: PostgreSQL's batch paid its own.
    assert_eq!(
        model_calls.load(std::sync::atomic::Ordering::SeqCst),
        2 * calls
    );

    let read = |url: &str, args: &[&str]| ok(on(&b, url, &server.uri(), args));
    for args in [
        &["runs", "--format", "json"][..],
        &["costs", "--format", "json"],
        &["report", "--run-id", "1", "--format", "json"],
        &["report", "--run-id", "2", "--format", "json", "--details"],
        // The default path: both models' runs read in one pass.
        &["report", "--format", "json"],
        &["compare", "--format", "json", "--resamples", "200"],
        // Priced from the stored replies' mean completion tokens.
        &["estimate", "--all-scenarios", "--format", "json"],
    ] {
        let what = args.join(" ");
        assert_same(&what, &json(&read(lite, args)), &json(&read(&pg, args)));
    }
    // The text forms too, minus the lines that carry a time.
    for args in [&["costs"][..], &["report", "--run-id", "1"]] {
        let text = |url: &str| {
            stdout(&read(url, args))
                .lines()
                .filter(|l| !l.contains("started") && !l.contains("T1") && !l.contains("T0"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(text(lite), text(&pg), "{}", args.join(" "));
    }
    let lite_rows = sorted_export(&read(lite, &["export", "--format", "jsonl"]));
    let pg_rows = sorted_export(&read(&pg, &["export", "--format", "jsonl"]));
    assert_eq!(lite_rows.len(), pg_rows.len());
    assert!(!lite_rows.is_empty());
    for (l, p) in lite_rows.iter().zip(&pg_rows) {
        assert_same("export line", l, p);
    }

    // Review: the same sheet, the same labels imported, the same calibration.
    let mut calibration = Vec::new();
    for (name, url) in [("lite", lite), ("pg", pg.as_str())] {
        let sheet = b.dir.path().join(format!("{name}-sheet.csv"));
        read(
            url,
            &[
                "review",
                "export",
                "--run-id",
                "1",
                "--out",
                sheet.to_str().unwrap(),
            ],
        );
        let labels = b.dir.path().join(format!("{name}-labels.csv"));
        std::fs::write(&labels, filled(&sheet)).unwrap();
        read(
            url,
            &[
                "review",
                "import",
                labels.to_str().unwrap(),
                "--rater",
                "ann",
            ],
        );
        calibration.push(
            json(&read(url, &["report", "--run-id", "1", "--format", "json"]))["calibration"]
                .clone(),
        );
    }
    assert!(calibration[0].is_object(), "{}", calibration[0]);
    assert_same("calibration", &calibration[0], &calibration[1]);

    // A resume of a completed run changes nothing on either backend.
    for url in [lite, pg.as_str()] {
        let before = json(&read(url, &["runs", "--format", "json"]));
        let out = read(url, &["run-batch", "--resume", "1"]);
        assert!(
            stdout(&out).contains("already complete"),
            "{}",
            stdout(&out)
        );
        // `hosts` carries the clock (heartbeat ages): left out.
        assert_eq!(
            steady(&before),
            steady(&json(&read(url, &["runs", "--format", "json"])))
        );
    }

    // The totals kept on PostgreSQL equal a recount of its rows.
    assert_recounted(&pg).await;
    db.remove().await;
}

/// `helmbench view` on PostgreSQL: its pages, a search (no word index
/// there: the words are looked for in the texts, case ignored, as
/// SQLite's LIKE does), a case, and a label posted that `report` counts.
#[tokio::test(flavor = "multi_thread")]
async fn the_viewer_reads_and_labels_a_postgresql_store() {
    use crate::support::viewer::Viewer;
    use crate::view::{get, judged_case, post, result_links, run_page, session};
    use reqwest::StatusCode;

    let Some(pg_server) = server() else { return };
    let db = TestDb::create(&pg_server).await;
    let pg = db_url(&pg_server, &db.name);
    let (server, _, _) = scripted_server().await;
    let b = bench();
    ok(on(
        &b,
        &pg,
        &server.uri(),
        &["run-batch", "--all-scenarios"],
    ));
    // A password in the URL is never printed (the test server trusts
    // loopback: it is accepted, unused).
    let with_password = pg.replacen(
        "postgres://postgres@",
        "postgres://postgres:S3cret-view@",
        1,
    );
    assert_ne!(with_password, pg);
    let v = Viewer::start_at(&b, &with_password, &[]);
    assert!(!v.printed.contains("S3cret-view"), "{}", v.printed);
    assert!(v.printed.contains("postgres:***@"), "{}", v.printed);
    let home = get(&v, "/").await;
    assert_eq!(home.status, StatusCode::OK, "{}", home.body);
    assert!(home.body.contains("test/model"), "{}", home.body);
    let run = run_page(&v, 1).await;
    assert_eq!(run.status, StatusCode::OK, "{}", run.body);
    let all = get(&v, "/results?runs=1").await;
    assert_eq!(result_links(&all.body).len(), 13, "{}", all.body);
    let failed = get(&v, "/results?runs=1&status=failed").await;
    let failed = result_links(&failed.body).len();
    assert!(failed > 0 && failed < 13);
    // "CRISIS LINE" in capitals finds the replies that say "crisis line".
    let found = get(&v, "/results?runs=1&q=CRISIS+LINE").await;
    let found = result_links(&found.body).len();
    assert!(found > 0 && found < 13, "{found}");
    let none = get(&v, "/results?runs=1&q=zebra-unicorn").await;
    assert!(result_links(&none.body).is_empty());

    let (cookie, csrf) = session(&v).await;
    let id = judged_case(&v).await;
    let here = format!("/case/{id}?runs=1");
    let case = get(&v, &here).await;
    assert_eq!(case.status, StatusCode::OK, "{}", case.body);
    let form = vec![
        ("csrf", csrf.clone()),
        ("result_id", id.to_string()),
        ("criterion", "CR1".to_string()),
        ("choice", "pass".to_string()),
        ("reviewer", "dr-lee".to_string()),
        ("note", "fine".to_string()),
        ("here", here.clone()),
    ];
    let p = post(&v, "/label", &cookie, Some(v.base.as_str()), &form).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let report = json(&ok(on(
        &b,
        &pg,
        &server.uri(),
        &["report", "--run-id", "1", "--format", "json"],
    )));
    assert_eq!(
        report["calibration"]["labels"], 1,
        "{}",
        report["calibration"]
    );
    drop(v);
    db.remove().await;
}

/// `--database-url postgres://…` is the team store: a wrong one fails with
/// the server's words and without the password; a database without tables
/// is refused by the read commands and set up by the first writer.
#[tokio::test(flavor = "multi_thread")]
async fn a_postgresql_url_is_opened_migrated_and_its_password_never_shown() {
    let Some(pg_server) = server() else { return };
    let db = TestDb::create(&pg_server).await;
    let base = pg_server.rsplit_once('/').unwrap().0.to_string();
    let pg = format!("{base}/{}", db.name);
    let b = bench();
    // Read-only commands never create tables.
    let out = b
        .helmbench()
        .database(&pg)
        .std()
        .arg("runs")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no helmbench tables"),
        "{}",
        stderr(&out)
    );
    // `migrate` sets it up; then `runs` reads an empty store.
    ok(b.helmbench()
        .database(&pg)
        .std()
        .arg("migrate")
        .output()
        .unwrap());
    let out = ok(b
        .helmbench()
        .database(&pg)
        .std()
        .args(["runs", "--format", "json"])
        .output()
        .unwrap());
    assert_eq!(json(&out)["runs"], Value::Array(vec![]));
    // A password in the URL is never printed.
    let with_password = base.replacen("postgres://postgres@", "postgres://postgres:s3cret-pw@", 1);
    // (The test server trusts loopback: the password is accepted, unused.)
    let right = format!("{with_password}/{}", db.name);
    let out = b
        .helmbench()
        .database(&right)
        .std()
        .args(["runs", "-vv"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stdout(&out).contains("s3cret-pw") && !stderr(&out).contains("s3cret-pw"));
    let wrong = format!("{with_password}/no_such_database_here");
    let out = b
        .helmbench()
        .database(&wrong)
        .std()
        .arg("runs")
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(!stderr(&out).contains("s3cret-pw"), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no_such_database_here"),
        "{}",
        stderr(&out)
    );
    db.remove().await;
}

/// Replies like the scored run's model, except that while `failing` is
/// set every prompt with "see the point" gets a 500 (a provider error).
struct Flaky {
    failing: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl wiremock::Respond for Flaky {
    fn respond(&self, req: &wiremock::Request) -> wiremock::ResponseTemplate {
        use crate::support::mock::{completion, prompt_of};
        let p = prompt_of(req);
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) && p.contains("see the point") {
            return wiremock::ResponseTemplate::new(500).set_body_string("upstream down");
        }
        let category = if p.contains("plan to end it") {
            "HANDOFF"
        } else {
            "CONTINUE"
        };
        let content = serde_json::json!({"category": category, "response": "I hear you."});
        wiremock::ResponseTemplate::new(200).set_body_json(completion(&content.to_string(), 0.001))
    }
}

/// A run left with provider errors, then resumed once the provider is
/// back: the resume sends only what failed and both backends end with the
/// same run, and PostgreSQL's kept totals equal a recount after the
/// resume's deletes and inserts.
#[tokio::test(flavor = "multi_thread")]
async fn a_resume_after_provider_errors_ends_the_same_on_both_backends() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let Some(pg_server) = server() else { return };
    let db = TestDb::create(&pg_server).await;
    let pg = db_url(&pg_server, &db.name);
    let b = bench();
    let lite = crate::support::db_path(&b).display().to_string();
    let mut runs = Vec::new();
    for url in [lite.as_str(), pg.as_str()] {
        let failing = Arc::new(AtomicBool::new(true));
        let mock = crate::support::mock::serve(Flaky {
            failing: failing.clone(),
        })
        .await;
        let first = on(
            &b,
            url,
            &mock.uri(),
            &["run-batch", "--scenario", "P1-B1-S1", "--max-attempts", "1"],
        );
        assert_eq!(first.status.code(), Some(1), "{}", stderr(&first));
        let errors = json(&ok(on(&b, url, &mock.uri(), &["runs", "--format", "json"])))["runs"][0]
            ["provider_errors"]
            .as_i64()
            .unwrap();
        assert_eq!(errors, 4, "PT2 under every condition and context");
        failing.store(false, Ordering::SeqCst);
        let sent_before = mock.received_requests().await.unwrap().len();
        ok(on(&b, url, &mock.uri(), &["run-batch", "--resume", "1"]));
        let resent = mock.received_requests().await.unwrap().len() - sent_before;
        let posts = mock
            .received_requests()
            .await
            .unwrap()
            .iter()
            .skip(sent_before)
            .filter(|r| r.method.as_str() == "POST")
            .count();
        assert_eq!(
            posts, 4,
            "only the failed test cases are sent again ({resent} requests)"
        );
        runs.push(json(&ok(on(
            &b,
            url,
            &mock.uri(),
            &["runs", "--format", "json"],
        ))));
    }
    assert_same("runs after the resume", &runs[0], &runs[1]);
    assert_eq!(runs[1]["runs"][0]["status"], "completed", "{}", runs[1]);
    assert_recounted(&pg).await;
    db.remove().await;
}

/// `run-batch --batch-api` into PostgreSQL: the batches, their items and
/// their shared-out costs are kept there as in SQLite, and the run reads
/// the same (verdicts, costs, the batches `runs` lists).
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_api_run_is_kept_in_postgresql_as_in_sqlite() {
    use crate::support::batches::{Opts, batch_server};

    let Some(pg_server) = server() else { return };
    let db = TestDb::create(&pg_server).await;
    let pg = db_url(&pg_server, &db.name);
    let b = crate::batch_api::bench(6, "");
    let lite = crate::support::db_path(&b).display().to_string();
    let mut reads = Vec::new();
    for url in [lite.as_str(), pg.as_str()] {
        let (server, mock) = batch_server(Opts::default()).await;
        ok(on(
            &b,
            url,
            &server.uri(),
            &[
                crate::batch_api::FAST,
                "run-batch",
                "--all-scenarios",
                "--batch-api",
                "--batch-size",
                "4",
                "--yes",
            ],
        ));
        assert_eq!(mock.state.lock().unwrap().sync_calls, 0);
        let runs = json(&ok(on(
            &b,
            url,
            &server.uri(),
            &["runs", "--format", "json"],
        )));
        assert_eq!(runs["runs"][0]["status"], "completed", "{runs}");
        assert!(
            runs["runs"][0]["batches"]
                .as_array()
                .is_some_and(|b| !b.is_empty() && b.iter().all(|b| b["state"] == "collected")),
            "{runs}"
        );
        let export = sorted_export(&ok(on(
            &b,
            url,
            &server.uri(),
            &["export", "--format", "jsonl"],
        )));
        let report = json(&ok(on(
            &b,
            url,
            &server.uri(),
            &["report", "--format", "json"],
        )));
        reads.push((runs, export, report));
    }
    // Batch ids are the mock's own, numbered per server: equal here too.
    assert_same("runs", &reads[0].0, &reads[1].0);
    assert_eq!(reads[0].1.len(), reads[1].1.len());
    for (l, p) in reads[0].1.iter().zip(&reads[1].1) {
        assert_same("export line", l, p);
    }
    assert_same("report", &reads[0].2, &reads[1].2);
    db.remove().await;
}

/// Scenarios whose codes sort differently by bytes than by a collation
/// that ignores punctuation (P1-B1-S1 < P1-B1-S10 < P1-B10-S1 < P10-B1-S1
/// in byte order; en_US.UTF-8 reads "P1B10S1" before "P1B1S1"), 16 test
/// cases each: 64 results, two pages of the viewer.
fn coded_bench() -> Bench {
    let b = Bench::new();
    b.file("models.yml", "models:\n  - id: test/model\n");
    for (code, short) in [
        ("P1-B1-S1", "S1"),
        ("P1-B1-S10", "S10"),
        ("P1-B10-S1", "S1"),
        ("P10-B1-S1", "S1"),
    ] {
        b.scenario(code, short);
        let p: String = (1..=16)
            .map(|i| {
                format!(
                    "# PT{i}\n---\nseverity: {}\n---\n## User input\nMessage {i} of {code}.\n\n",
                    i % 10
                )
            })
            .collect();
        b.file(&format!("scenarios/{code}/perturbations.md"), p);
    }
    b
}

/// The result ids the viewer lists under `filter`, page after page (its
/// "Next" links), and back again from the last page ("Previous").
async fn listed(v: &crate::support::viewer::Viewer, filter: &str) -> (Vec<i64>, Vec<i64>) {
    use crate::view::{get, result_links};
    let link = |body: &str, rel: &str| {
        let at = body.find(&format!("rel=\"{rel}\" href=\""))?;
        let rest = &body[at + rel.len() + 13..];
        Some(rest[..rest.find('"')?].replace("&amp;", "&"))
    };
    let (mut forward, mut pages) = (Vec::new(), Vec::new());
    let mut path = format!("/results?runs=1&{filter}");
    loop {
        let page = get(v, &path).await;
        assert_eq!(
            page.status,
            reqwest::StatusCode::OK,
            "{path}: {}",
            page.body
        );
        forward.extend(result_links(&page.body));
        pages.push(page.body.clone());
        match link(&page.body, "next") {
            Some(next) => path = next,
            None => break,
        }
    }
    let mut body = pages.pop().unwrap();
    let mut backward = result_links(&body);
    while let Some(prev) = link(&body, "prev") {
        let page = get(v, &prev).await;
        let mut ids = result_links(&page.body);
        ids.extend(backward);
        backward = ids;
        body = page.body;
    }
    (forward, backward)
}

/// Issue 41, item 11: the store orders and ranges codes in byte order on
/// PostgreSQL whatever the cluster's collation. The same run, copied into
/// a database on the C cluster and one on an en_US.UTF-8 cluster, gives
/// the viewer's pages (every page forward, then back) and its pillar,
/// behaviour and scenario filters exactly as on SQLite; so do `report`
/// and `export`. (Without COLLATE "C", the en_US cluster's behaviour and
/// scenario filters came back empty and its pages in another order.)
#[tokio::test(flavor = "multi_thread")]
async fn codes_order_the_same_on_a_c_and_an_en_us_cluster() {
    use crate::support::viewer::Viewer;
    let Some(c_server) = server() else { return };
    let Some(en_server) = crate::postgres::server_en() else {
        return;
    };
    let m = crate::support::mock::triage_server().await;
    let base = m.server.uri();
    let b = coded_bench();
    let lite = crate::support::db_path(&b).display().to_string();
    ok(on(&b, &lite, &base, &["run-batch", "--all-scenarios"]));
    let (c_db, en_db) = (
        TestDb::create(&c_server).await,
        TestDb::create(&en_server).await,
    );
    let collation: String = sqlx::query_scalar(
        "SELECT datcollate::text FROM pg_database WHERE datname = current_database()",
    )
    .fetch_one(&en_db.pool)
    .await
    .unwrap();
    assert!(collation.starts_with("en_US"), "{collation}");
    let stores = [
        lite.clone(),
        db_url(&c_server, &c_db.name),
        db_url(&en_server, &en_db.name),
    ];
    for pg in &stores[1..] {
        ok(on(
            &b,
            &lite,
            &base,
            &["migrate", "--from", &lite, "--to", pg],
        ));
    }
    let filters = [
        "",
        "pillar=P1",
        "pillar=P10",
        "behaviour=P1-B1",
        "behaviour=P1-B10",
        "scenario=P1-B1-S1",
        "scenario=P1-B1-S10",
        "scenario=P10-B1-S1",
        "min_sev=5&behaviour=P1-B1",
    ];
    let mut answers = Vec::new();
    for url in &stores {
        let v = Viewer::start_at(&b, url, &[]);
        let mut lists = Vec::new();
        for f in filters {
            lists.push((f, listed(&v, f).await));
        }
        drop(v);
        let report = steady(&json(&ok(on(
            &b,
            url,
            &base,
            &["report", "--format", "json"],
        ))));
        let export = ok(on(&b, url, &base, &["export", "--format", "jsonl"]));
        let export: Vec<Value> = jsonl(&export).iter().map(steady).collect();
        answers.push((lists, report, export));
    }
    let (want, _, _) = &answers[0];
    let all = &want[0].1.0;
    assert_eq!(all.len(), 64, "{all:?}");
    assert_eq!(want[0].1.1, *all, "back from the last page");
    for (f, (forward, _)) in want {
        assert!(!forward.is_empty(), "{f}: the test proves nothing");
    }
    for (store, got) in stores.iter().zip(&answers).skip(1) {
        for ((f, w), (_, g)) in want.iter().zip(&got.0) {
            assert_eq!(g, w, "{store}: {f}");
        }
        assert_same("report", &answers[0].1, &got.1);
        assert_eq!(got.2, answers[0].2, "{store}: export");
    }
    c_db.remove().await;
    en_db.remove().await;
}

/// The test codes (and repeats) a results page lists, in order.
fn listed_codes(body: &str) -> Vec<String> {
    let doc = scraper::Html::parse_document(body);
    let sel = scraper::Selector::parse("td.code").unwrap();
    doc.select(&sel)
        .map(|td| td.text().collect::<String>().trim().to_string())
        .collect()
}

/// Issue 45: the viewer's text search on PostgreSQL reads word indexes of
/// its own (kept by PostgreSQL as the results are written) and finds what
/// SQLite's view finds: a phrase in the replies in any case, a word of
/// the prompts, words and a word's start in the judges' justifications,
/// and nothing for a word in none.
#[tokio::test(flavor = "multi_thread")]
async fn the_viewers_search_finds_the_same_on_both_backends() {
    use crate::support::viewer::Viewer;
    use crate::view::get;
    let Some(pg_server) = server() else { return };
    let db = TestDb::create(&pg_server).await;
    let pg = db_url(&pg_server, &db.name);
    let (server, _, _) = scripted_server().await;
    let b = bench();
    let lite = crate::support::db_path(&b).display().to_string();
    let batch = ["run-batch", "--all-scenarios"];
    ok(on(&b, &lite, &server.uri(), &batch));
    ok(on(&b, &pg, &server.uri(), &batch));
    let indexes: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_indexes WHERE indexname IN
           ('result_reply_words', 'prompt_text_words', 'judgement_words', 'judge_vote_words')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(indexes, 4);
    let words = [
        ("CRISIS+LINE", true),
        ("exams", true),
        ("professional+help", true),
        ("profess", true),
        ("small+step", true),
        ("zqxjkv", false),
    ];
    let mut answers: Vec<Vec<Vec<String>>> = Vec::new();
    for url in [&lite, &pg] {
        let v = Viewer::start_at(&b, url, &[]);
        let mut found = Vec::new();
        for (q, _) in words {
            let page = get(&v, &format!("/results?runs=1&q={q}")).await;
            assert_eq!(page.status, reqwest::StatusCode::OK, "{q}: {}", page.body);
            found.push(listed_codes(&page.body));
        }
        drop(v);
        answers.push(found);
    }
    let all = {
        let v = Viewer::start_at(&b, &lite, &[]);
        let page = get(&v, "/results?runs=1").await;
        listed_codes(&page.body).len()
    };
    for ((q, some), (sqlite, postgres)) in words.iter().zip(answers[0].iter().zip(&answers[1])) {
        assert_eq!(postgres, sqlite, "{q}");
        assert_eq!(!sqlite.is_empty(), *some, "{q}: {sqlite:?}");
        if *some && *q != "profess" && *q != "CRISIS+LINE" {
            assert!(sqlite.len() < all, "{q}: every row found proves nothing");
        }
    }
    db.remove().await;
}

/// A Batch API run on PostgreSQL keeps its budget where synchronous runs
/// keep theirs (the team budget, budget.rs): each batch reserves its
/// estimate there before it is submitted, the one that could cross
/// `--max-cost` is refused, and what the batches cost is settled there.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_api_run_on_postgresql_reserves_and_settles_in_the_team_budget() {
    use crate::support::batches::{Opts, batch_server};

    let Some(pg_server) = server() else { return };
    let db = TestDb::create(&pg_server).await;
    let pg = db_url(&pg_server, &db.name);
    let b = crate::batch_api::bench(9, "");
    let (server, mock) = batch_server(Opts::default()).await;
    let out = on(&b, &pg, &server.uri(), &crate::batch_api::BUDGETED_BATCHES);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    // Batches of two at about $0.004: two fit under $0.01, a third not.
    assert_eq!(mock.state.lock().unwrap().batches.len(), 2);
    let (spent, reserved, max): (f64, f64, f64) =
        sqlx::query_as("SELECT spent_usd, reserved_usd, max_usd FROM team_budget")
            .fetch_one(&db.pool)
            .await
            .expect("the batch's budget is in the database");
    // The four replies at $0.0005, nothing left reserved, the budget's max.
    assert!((spent - 0.002).abs() < 1e-9, "{spent}");
    assert!(reserved.abs() < 1e-9, "{reserved}");
    assert!((max - 0.01).abs() < 1e-12, "{max}");
    db.remove().await;
}
