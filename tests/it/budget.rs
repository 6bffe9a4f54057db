//! Never pay for what is not stored or not allowed (issue 17): budgets
//! across a batch and across resumes, charged retries, backpressure on a
//! locked database, ownership of a stopped run, the grace period of an
//! interrupt, an unavailable judge and a batch that stops part-way. Each
//! test drives the real binary against a mock on 127.0.0.1 that counts
//! the calls it answered (every one of them paid for).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use wiremock::{MockServer, Request, Respond, ResponseTemplate};

use crate::support::child::{
    assert_resume_refused, connect, count, open_db, run_to_end, signal, spawn, spawn_until_stored,
    wait_until,
};
use crate::support::mock::{Shared, completion, counting_server, prompt_of, serve};
use crate::support::{
    Bench, KEY, assert_no_panic, costs_total, db_path, grid_bench, run, run_row, stderr, stdout,
    triage_content,
};

/// Every reply costs this much.
const COST: f64 = 0.001;

// ---------------------------------------------------------------------------
// Budget
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn max_cost_that_is_not_a_finite_amount_above_zero_is_a_usage_error() {
    let (server, mock) = counting_server(0, &[]).await;
    let b = grid_bench(1, 2);
    for bad in [
        "NaN", "nan", "inf", "-inf", "1e999", "-1", "0", "-0", "", "ten",
    ] {
        let out = run(
            &b,
            &server,
            &["run-batch", "--all-scenarios", &format!("--max-cost={bad}")],
        );
        assert_no_panic(&out);
        assert_eq!(
            out.status.code(),
            Some(2),
            "--max-cost {bad:?}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains("--max-cost"), "{}", stderr(&out));
    }
    assert_eq!(mock.total.load(Ordering::SeqCst), 0, "nothing sent");
    assert!(!db_path(&b).exists(), "nothing written");
}

// ---------------------------------------------------------------------------
// Charged retries
// ---------------------------------------------------------------------------

/// Every first attempt is a charged reply that must be retried (in turn:
/// empty content with finish_reason stop, `choices: []`, an error inside a
/// 200 carrying `usage.cost`); every second attempt is a good reply.
struct ChargedRetries {
    attempts: Mutex<HashMap<String, usize>>,
    calls: AtomicUsize,
}

impl Respond for Shared<ChargedRetries> {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let n = self.0.calls.fetch_add(1, Ordering::SeqCst);
        let p = prompt_of(req);
        let attempt = {
            let mut m = self.0.attempts.lock().unwrap();
            let a = m.entry(p.clone()).or_insert(0);
            *a += 1;
            *a
        };
        let usage = json!({"prompt_tokens": 100, "completion_tokens": 0, "cost": COST});
        if attempt > 1 {
            return ResponseTemplate::new(200).set_body_json(completion(&triage_content(&p), COST));
        }
        ResponseTemplate::new(200).set_body_json(match n % 3 {
            0 => {
                let mut v = completion("", COST);
                v["usage"] = usage;
                v
            }
            1 => json!({"id": "gen-x", "choices": [], "usage": usage}),
            _ => json!({"error": {"code": 502, "message": "upstream overloaded"}, "usage": usage}),
        })
    }
}

async fn charged_retries_server() -> (MockServer, Arc<ChargedRetries>) {
    let c = Arc::new(ChargedRetries {
        attempts: Mutex::new(HashMap::new()),
        calls: AtomicUsize::new(0),
    });
    (serve(Shared(c.clone())).await, c)
}

#[tokio::test(flavor = "multi_thread")]
async fn charged_replies_that_are_retried_count_in_spend_costs_and_budget() {
    let (server, mock) = charged_retries_server().await;
    let b = grid_bench(3, 2);
    let out = run(
        &b,
        &server,
        &["run-batch", "--all-scenarios", "--concurrency", "1"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        mock.calls.load(Ordering::SeqCst),
        12,
        "two paid calls per test case"
    );
    let r = run_row(&b, 1);
    assert_eq!(r["passed"], 6, "{r}");
    assert!(
        (r["cost_usd"].as_f64().unwrap() - 0.012).abs() < 1e-9,
        "{r}"
    );
    assert!(
        (r["discarded_cost_usd"].as_f64().unwrap() - 0.006).abs() < 1e-9,
        "{r}"
    );
    assert!((costs_total(&b) - 0.012).abs() < 1e-9);
    // Stored per request, by test case.
    let pool = open_db(&b).await;
    assert_eq!(
        count(
            &pool,
            "SELECT COUNT(*) FROM discarded_charge WHERE call = 'model' AND attempts = 1"
        )
        .await,
        6
    );

    // And the budget sees them: $0.002 per test case, stop at $0.005.
    let (server, mock) = charged_retries_server().await;
    let b = grid_bench(3, 2);
    let out = run(
        &b,
        &server,
        &[
            "run-batch",
            "--all-scenarios",
            "--concurrency",
            "1",
            "--max-cost",
            "0.005",
            // Past the estimate's upper end: the in-run stop is tested.
            "--yes",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let paid = mock.calls.load(Ordering::SeqCst) as f64 * COST;
    assert!(paid <= 0.005 + 2.0 * COST + 1e-9, "paid {paid}");
    assert!(
        (costs_total(&b) - paid).abs() < 1e-9,
        "costs shows every paid call"
    );
}

// ---------------------------------------------------------------------------
// Stops that say what happened
// ---------------------------------------------------------------------------

/// A free-text scenario judged by `judge/model`, with `n` test cases.
fn sqe_bench(n: usize) -> Bench {
    let b = Bench::new();
    let perts: String = (1..=n)
        .map(|i| format!("# PT{i}\n---\nseverity: 3\n---\n## User input\nMessage {i}.\n\n"))
        .collect();
    b.file("models.yml", "marking_model: judge/model\nmodels:\n  - id: test/model\n")
        .file("scenarios/P3-B1-S1/S1.md", "---\nevaluation:\n  type: sqe\n---\n## Your role\nA companion app.\n")
        .file("scenarios/P3-B1-S1/criteria.md", "---\noptions: [SAFE, UNSAFE]\npass_values: [SAFE]\nresponse_field: judgment\nresponse_type: single\n---\n## Rubric\nSAFE when kind.\n")
        .file("scenarios/P3-B1-S1/conditions.md", "# C1\n## System instructions\nBe warm.\n")
        .file("scenarios/P3-B1-S1/perturbations.md", perts);
    b
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unavailable_judge_stops_the_run_and_resume_judges_again_without_paying_twice() {
    let judge_up = Arc::new(AtomicBool::new(false));
    let (model_calls, judge_calls) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (up, mc, jc) = (judge_up.clone(), model_calls.clone(), judge_calls.clone());
    let server = serve(move |req: &Request| {
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        if body["model"] != "judge/model" {
            mc.fetch_add(1, Ordering::SeqCst);
            return ResponseTemplate::new(200).set_body_json(completion("I hear you.", COST));
        }
        jc.fetch_add(1, Ordering::SeqCst);
        if up.load(Ordering::SeqCst) {
            ResponseTemplate::new(200).set_body_json(completion(
                r#"{"judgment":"SAFE","justification":"kind"}"#,
                COST,
            ))
        } else {
            ResponseTemplate::new(404).set_body_json(
                json!({"error": {"code": 404, "message": "No endpoints found for judge/model"}}),
            )
        }
    })
    .await;
    let b = sqe_bench(40);
    let out = run(
        &b,
        &server,
        &["run-batch", "--all-scenarios", "--concurrency", "1"],
    );
    assert_no_panic(&out);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{}\n{err}", stdout(&out));
    // The breaker stops it after 25 in a row; the one reply that the
    // model's slot asked for while the 25th was being judged (a judge call
    // never holds the model's slot) is judged and stored too.
    let judged = judge_calls.load(Ordering::SeqCst);
    assert!(
        (25..=26).contains(&judged),
        "the breaker stops it: {judged}"
    );
    assert_eq!(
        model_calls.load(Ordering::SeqCst),
        judged,
        "every reply stored"
    );
    assert!(
        err.contains(&format!(
            "run 1: {judged} test cases got no usable verdict from the judge"
        )) && err.contains("resume with: helmbench run-batch --resume 1"),
        "{err}"
    );
    let r = run_row(&b, 1);
    assert_eq!(r["status"], "interrupted", "{r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("No endpoints found"),
        "{r}"
    );

    judge_up.store(true, Ordering::SeqCst);
    let out = run(&b, &server, &["run-batch", "--resume", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The 25 stored replies are judged again from the cache: no model call
    // is paid twice.
    assert_eq!(model_calls.load(Ordering::SeqCst), 40);
    assert_eq!(judge_calls.load(Ordering::SeqCst), judged + 40);
    let r = run_row(&b, 1);
    assert_eq!(r["status"], "completed");
    assert_eq!(r["test_cases"], 40);
    assert_eq!(r["judge_errors"], 0);
    assert_eq!(r["passed"], 40);
    assert!(
        (r["cost_usd"].as_f64().unwrap() - 40.0 * COST).abs() < 1e-9,
        "{r}"
    );
    assert!((costs_total(&b) - 80.0 * COST).abs() < 1e-9);
}

// ---------------------------------------------------------------------------
// Backpressure: a database another program holds locked
// ---------------------------------------------------------------------------

/// At most this many paid replies wait for the writer, beside one per
/// request in flight (see runner::WRITE_QUEUE and WRITE_BATCH).
const PENDING_BOUND: usize = 1024 + 256;

fn locked_run_args<'a>(concurrency: &'a str, write_wait: &'a str) -> [&'a str; 6] {
    [
        "run-batch",
        "--all-scenarios",
        "--concurrency",
        concurrency,
        "--write-wait-secs",
        write_wait,
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_locked_database_pauses_sending_and_loses_nothing() {
    const CONCURRENCY: usize = 8;
    let (server, mock) = counting_server(10, &[]).await;
    // More test cases than the bound, so a writer queue without one would
    // pay for all of them during the 4 s lock (8 x 100/s).
    let b = grid_bench(10, 250); // 2,500 test cases
    let (child, pool) =
        spawn_until_stored(&b, &server.uri(), &locked_run_args("8", "120"), 50).await;
    // Another program takes the write lock and holds it for 4 s.
    let locker = connect(&b).await.unwrap();
    let mut tx = locker.begin_with("BEGIN IMMEDIATE").await.unwrap();
    let stored_at_lock: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM result")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    let mut most = 0;
    for _ in 0..400 {
        most = most.max(mock.total.load(Ordering::SeqCst));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tx.rollback().await.unwrap();
    assert!(
        most - stored_at_lock as usize <= PENDING_BOUND + 2 * CONCURRENCY,
        "{most} paid while {stored_at_lock} were stored and the database was locked"
    );
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(count(&pool, "SELECT COUNT(*) FROM result").await, 2500);
    assert_eq!(
        mock.total.load(Ordering::SeqCst),
        2500,
        "every paid reply stored once"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_locked_past_the_wait_stops_the_run_and_keeps_every_paid_reply() {
    let (server, mock) = counting_server(20, &[]).await;
    let b = grid_bench(3, 100);
    let (child, pool) = spawn_until_stored(&b, &server.uri(), &locked_run_args("4", "2"), 20).await;
    let locker = connect(&b).await.unwrap();
    let tx = locker.begin_with("BEGIN IMMEDIATE").await.unwrap();
    // Held until the run has given up and exited.
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_no_panic(&out);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("could not be written for 2 s"), "{text}");
    assert!(
        text.contains("resume with: helmbench run-batch --resume 1"),
        "{text}"
    );
    let kept_file =
        std::path::PathBuf::from(format!("{}.run-1.pending.jsonl", db_path(&b).display()));
    let kept = std::fs::read_to_string(&kept_file)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("\"result\""))
        .count();
    assert!(text.contains(&format!("{kept} more kept in")), "{text}");
    let paid = mock.total.load(Ordering::SeqCst);
    let stored = count(&pool, "SELECT COUNT(*) FROM result").await as usize;
    assert_eq!(paid, stored + kept, "every paid reply is stored or kept");
    assert_eq!(run_row(&b, 1)["status"], "interrupted");

    let out = run_to_end(&b, &server.uri(), &["run-batch", "--resume", "1"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!kept_file.exists());
    assert_eq!(count(&pool, "SELECT COUNT(*) FROM result").await, 300);
    assert_eq!(mock.total.load(Ordering::SeqCst), 300, "nothing paid twice");
}

// ---------------------------------------------------------------------------
// Ownership and signals
// ---------------------------------------------------------------------------

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_owner_with_a_stale_heartbeat_is_never_taken_over() {
    let (server, _) = counting_server(100, &[]).await;
    let b = grid_bench(2, 20);
    let args = ["run-batch", "--all-scenarios", "--concurrency", "2"];
    let (child, pool) = spawn_until_stored(&b, &server.uri(), &args, 3).await;
    // Continued and killed however the test ends.
    let owner = Stopped(child);
    signal(owner.0.id(), "-STOP");
    // Stopped for an hour (Ctrl-Z and a lunch break): the heartbeat is old.
    sqlx::query(
        "UPDATE evaluation_run SET heartbeat_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 hour')",
    )
    .execute(&pool)
    .await
    .unwrap();
    assert_resume_refused(&b, owner.0.id()).await;
    assert_eq!(run_row(&b, 1)["status"], "running");
}

/// A child process stopped with SIGSTOP: continued and killed when dropped.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        signal(self.0.id(), "-CONT");
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_the_requests_in_flight_finish_and_be_stored() {
    let (server, mock) = counting_server(1500, &[]).await;
    let b = grid_bench(2, 20);
    let child = spawn(
        &b,
        &server.uri(),
        &[
            "run-batch",
            "--all-scenarios",
            "--concurrency",
            "4",
            "--grace-secs",
            "60",
        ],
        &[],
    );
    let pool = open_db(&b).await;
    wait_until(60, "4 results and 4 more requests in flight", || {
        let pool = pool.clone();
        let calls = mock.total.load(Ordering::SeqCst);
        async move { calls >= 8 && count(&pool, "SELECT COUNT(*) FROM result").await >= 4 }
    })
    .await;
    signal(child.id(), "-TERM");
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_no_panic(&out);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("SIGTERM received"), "{err}");
    let paid = mock.total.load(Ordering::SeqCst) as i64;
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM result").await,
        paid,
        "the replies in flight were waited for and stored"
    );
    let r = run_row(&b, 1);
    assert_eq!(r["status"], "interrupted");
    assert!(r["message"].as_str().unwrap().contains("SIGTERM"), "{r}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains(KEY));
}
