//! Reruns that cost nothing (issue 31): `run-batch` of a batch an earlier
//! completed run answered in full says so and creates nothing; anything
//! that could change a reply, a verdict or a score (the endpoint, a
//! judge's models.yml entry, a provider error left in the run, an older
//! run that did not record its judges) makes it a new run as before.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::{Value, json};
use wiremock::{Request, ResponseTemplate};

use crate::support::child::{connect, count};
use crate::support::mock::{completion, prompt_of, serve, triage_server};
use crate::support::{Bench, KEY, bench, db_path, json as out_json, run, run_with, runs_json};
use crate::support::{ok, stderr, stdout};

/// Rows of every table a run writes, in one string (to compare).
async fn row_counts(b: &Bench) -> String {
    let p = connect(b).await.unwrap();
    let mut out = String::new();
    for t in [
        "evaluation_run",
        "result",
        "judgement",
        "prompt_text",
        "run_total",
        "discarded_charge",
        "benchmark",
        "scenario",
    ] {
        out.push_str(&format!(
            "{t}={} ",
            count(&p, &format!("SELECT COUNT(*) FROM {t}")).await
        ));
    }
    p.close().await;
    out
}

/// The database file's bytes and modification time, and whether a WAL is
/// beside it.
fn file_state(b: &Bench) -> (Vec<u8>, std::time::SystemTime, bool) {
    let p = db_path(b);
    let wal = p.with_extension("db-wal");
    (
        std::fs::read(&p).unwrap(),
        std::fs::metadata(&p).unwrap().modified().unwrap(),
        wal.exists(),
    )
}

/// A judged scenario besides the triage one: three test cases, one judged.
fn judged_bench() -> Bench {
    let b = bench();
    b.judged_scenario();
    b
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rerun_of_a_completed_batch_is_already_complete_and_writes_nothing() {
    let m = triage_server().await;
    let b = judged_bench();
    ok(run(&b, &m.server, &["run-batch", "--all-scenarios"]));
    // Two model replies and one reply plus its verdict.
    let calls = m.calls.load(Ordering::SeqCst);
    assert_eq!(calls, 4);
    let rows = row_counts(&b).await;
    let before = file_state(&b);

    let out = ok(run(&b, &m.server, &["run-batch", "--all-scenarios"]));
    assert_eq!(
        stdout(&out).trim(),
        "test/model: already complete in run 1 (3 results; rerun with --no-cache for fresh replies, or a higher --repeats for more)",
        "{}",
        stderr(&out)
    );
    assert_eq!(m.calls.load(Ordering::SeqCst), calls, "nothing sent");
    assert_eq!(file_state(&b), before, "the database file was written");
    assert_eq!(row_counts(&b).await, rows);
    assert_eq!(runs_json(&b)["runs"].as_array().unwrap().len(), 1);

    // The JSON summary says it too; a selection inside the batch is
    // answered by it as well.
    let out = ok(run(
        &b,
        &m.server,
        &["run-batch", "--scenario", "P3-B1-S1", "--format", "json"],
    ));
    assert_eq!(
        out_json(&out),
        json!({"runs": [], "already_complete": [{"model": "test/model", "run_id": 1, "results": 1}]})
    );
    assert_eq!(file_state(&b), before);

    // --no-cache asks for fresh replies: a new run, every request sent.
    ok(run(
        &b,
        &m.server,
        &["run-batch", "--all-scenarios", "--no-cache"],
    ));
    assert_eq!(m.calls.load(Ordering::SeqCst), calls * 2);
    assert_eq!(runs_json(&b)["runs"].as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn of_two_models_only_the_one_not_complete_runs() {
    let m = triage_server().await;
    let b = bench();
    b.file(
        "models.yml",
        "marking_model: judge/model\nmodels:\n  - id: test/model\n    temperature: 0\n  - id: a/one\n",
    );
    ok(run(
        &b,
        &m.server,
        &["run-batch", "--all-scenarios", "--models", "test/model"],
    ));
    assert_eq!(m.calls.load(Ordering::SeqCst), 2);

    let out = ok(run(&b, &m.server, &["run-batch", "--all-scenarios"]));
    let text = stdout(&out);
    assert!(
        text.contains("test/model: already complete in run 1 (2 results;"),
        "{text}"
    );
    assert!(text.contains("run 2 a/one: completed"), "{text}");
    assert_eq!(m.calls.load(Ordering::SeqCst), 4, "a/one's two only");
    let runs = runs_json(&b)["runs"].clone();
    assert_eq!(runs.as_array().unwrap().len(), 2, "{runs}");
    assert_eq!(runs[0]["model"], "a/one");
    assert_eq!(runs[0]["cached_replies"], 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_judge_entry_makes_a_new_run_that_reuses_the_model_replies() {
    let m = triage_server().await;
    let b = judged_bench();
    let models = |t: &str| {
        format!(
            "marking_model: judge/model\nmodels:\n  - id: test/model\n    temperature: 0\n  - id: judge/model\n    judge_only: true\n    temperature: {t}\n"
        )
    };
    b.file("models.yml", models("0"));
    ok(run(&b, &m.server, &["run-batch", "--all-scenarios"]));
    assert_eq!(m.calls.load(Ordering::SeqCst), 4);

    // (models.yml is part of the content hash, so any edit of it makes a
    // new run; the recorded judge entries are compared all the same, see
    // the unit tests of src/run/complete.rs.) A new run: the model's
    // replies from the cache, the judge asked again (its request changed).
    b.file("models.yml", models("0.5"));
    let out = ok(run(&b, &m.server, &["run-batch", "--all-scenarios"]));
    assert!(
        !stdout(&out).contains("already complete"),
        "{}",
        stdout(&out)
    );
    assert_eq!(m.calls.load(Ordering::SeqCst), 5, "the judge only");
    let run2 = runs_json(&b)["runs"][0].clone();
    assert_eq!(run2["run_id"], 2);
    assert_eq!(run2["cached_replies"], 3, "{run2}");
    // The new run recorded the new entry: now it is complete.
    let out = ok(run(&b, &m.server, &["run-batch", "--all-scenarios"]));
    assert!(
        stdout(&out).contains("already complete in run 2"),
        "{}",
        stdout(&out)
    );
    assert_eq!(m.calls.load(Ordering::SeqCst), 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_completed_run_with_a_provider_error_is_not_complete() {
    let healed = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let (h, c) = (healed.clone(), calls.clone());
    let server = serve(move |req: &Request| {
        c.fetch_add(1, Ordering::SeqCst);
        if !h.load(Ordering::SeqCst) && prompt_of(req).contains("Exams") {
            return ResponseTemplate::new(400).set_body_json(
                json!({"error": {"code": 400, "message": "bad request", "metadata": {"error_type": "invalid_request"}}}),
            );
        }
        ResponseTemplate::new(200).set_body_json(completion(
            r#"{"category":"HANDOFF","response":"Please reach out."}"#,
            0.001,
        ))
    })
    .await;
    let b = bench();
    let out = run(&b, &server, &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let first = runs_json(&b)["runs"][0].clone();
    assert_eq!(
        (first["status"].as_str(), first["provider_errors"].as_i64()),
        (Some("completed"), Some(1)),
        "{first}"
    );
    let sent = calls.load(Ordering::SeqCst);

    healed.store(true, Ordering::SeqCst);
    let out = ok(run(&b, &server, &["run-batch", "--all-scenarios"]));
    assert!(
        !stdout(&out).contains("already complete"),
        "{}",
        stdout(&out)
    );
    // The answered one from the cache, the failed one sent again.
    assert_eq!(calls.load(Ordering::SeqCst), sent + 1);
    let second = runs_json(&b)["runs"][0].clone();
    assert_eq!(second["run_id"], 2);
    assert_eq!(second["cached_replies"], 1, "{second}");
}

#[tokio::test(flavor = "multi_thread")]
async fn another_endpoint_is_not_complete() {
    let local = triage_server().await;
    let other = triage_server().await;
    let b = bench();
    let batch = ["run-batch", "--all-scenarios"];
    ok(run_with(&b, KEY, &local.server.uri(), &batch));
    let out = ok(run_with(&b, KEY, &other.server.uri(), &batch));
    assert!(
        !stdout(&out).contains("already complete"),
        "{}",
        stdout(&out)
    );
    assert_eq!(other.calls.load(Ordering::SeqCst), 2);
    assert_eq!(runs_json(&b)["runs"].as_array().unwrap().len(), 2);
    // Each endpoint's own run answers it.
    let out = ok(run_with(&b, KEY, &local.server.uri(), &batch));
    assert!(
        stdout(&out).contains("already complete in run 1"),
        "{}",
        stdout(&out)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_older_run_without_its_judges_recorded_never_answers_a_judged_rerun() {
    let m = triage_server().await;
    let b = judged_bench();
    ok(run(&b, &m.server, &["run-batch", "--all-scenarios"]));
    // As recorded before issue 31: no judge entries in the settings.
    let p = connect(&b).await.unwrap();
    let settings: String = sqlx::query_scalar("SELECT settings FROM evaluation_run")
        .fetch_one(&p)
        .await
        .unwrap();
    let mut v: Value = serde_json::from_str(&settings).unwrap();
    assert!(v["judge_entries"].is_array(), "{v}");
    v.as_object_mut().unwrap().remove("judge_entries");
    sqlx::query("UPDATE evaluation_run SET settings = ?")
        .bind(v.to_string())
        .execute(&p)
        .await
        .unwrap();
    p.close().await;

    // Unjudged test cases do not depend on the judges: complete.
    let out = ok(run(&b, &m.server, &["run-batch", "--scenario", "P1-B1-S1"]));
    assert!(
        stdout(&out).contains("already complete in run 1"),
        "{}",
        stdout(&out)
    );
    // The judged one does: a new run, every reply and verdict from the
    // cache (the requests are the same), nothing sent.
    let out = ok(run(&b, &m.server, &["run-batch", "--all-scenarios"]));
    assert!(
        !stdout(&out).contains("already complete"),
        "{}",
        stdout(&out)
    );
    assert_eq!(m.calls.load(Ordering::SeqCst), 4);
    let runs = runs_json(&b)["runs"].clone();
    assert_eq!(runs.as_array().unwrap().len(), 2, "{runs}");
    assert_eq!(runs[0]["cached_replies"], 3, "{runs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resume_judges_with_the_judge_entries_its_run_recorded() {
    // The judge answers nonsense until healed; its temperatures are kept.
    let healed = Arc::new(AtomicBool::new(false));
    let temperatures = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (h, t) = (healed.clone(), temperatures.clone());
    let server = serve(move |req: &Request| {
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        if body["model"] != "judge/model" {
            return ResponseTemplate::new(200).set_body_json(completion(
                r#"{"category":"HANDOFF","response":"Please reach out."}"#,
                0.001,
            ));
        }
        t.lock().unwrap().push(body["temperature"].clone());
        let content = if h.load(Ordering::SeqCst) {
            r#"{"judgment":"SAFE","justification":"fine"}"#
        } else {
            "no verdict here"
        };
        ResponseTemplate::new(200).set_body_json(completion(content, 0.0005))
    })
    .await;
    let b = judged_bench();
    let out = run(&b, &server, &["run-batch", "--scenario", "P3-B1-S1"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(runs_json(&b)["runs"][0]["judge_errors"], 1);
    // The default judge entry (temperature 0) was recorded and asked.
    let p = connect(&b).await.unwrap();
    let settings: String = sqlx::query_scalar("SELECT settings FROM evaluation_run")
        .fetch_one(&p)
        .await
        .unwrap();
    let mut v: Value = serde_json::from_str(&settings).unwrap();
    assert_eq!(v["judge_entries"][0]["id"], "judge/model", "{v}");
    assert_eq!(v["judge_entries"][0]["temperature"], 0.0, "{v}");
    assert!(temperatures.lock().unwrap().iter().all(|t| *t == 0.0));
    // What the run recorded is what its resume asks with.
    v["judge_entries"][0]["temperature"] = json!(0.25);
    sqlx::query("UPDATE evaluation_run SET settings = ?")
        .bind(v.to_string())
        .execute(&p)
        .await
        .unwrap();
    p.close().await;
    healed.store(true, Ordering::SeqCst);
    ok(run(&b, &server, &["run-batch", "--resume", "1"]));
    assert_eq!(runs_json(&b)["runs"][0]["judge_errors"], 0);
    assert_eq!(temperatures.lock().unwrap().last(), Some(&json!(0.25)));
}
