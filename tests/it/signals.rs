//! SIGINT and SIGTERM: the run saves what finished, is marked interrupted
//! and says how to resume; the requests in flight are dropped, or with
//! `--grace-secs` waited for and stored.

use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::support::child::{
    CONCURRENCY, batch_args, count, open_db, resume_to_completion, signal, spawn, wait_until,
};
use crate::support::mock::{counting_server, gate_server};
use crate::support::{
    KEY, assert_key_absent, assert_no_panic, grid_bench, run_row, runs_json, stderr,
};

/// Interrupts a run with `signal` once 9 results are stored and every
/// worker is blocked on a held request, then resumes it.
#[cfg(unix)]
async fn interrupt_then_resume(signal: &str) {
    let b = grid_bench(2, 20);
    let (server, gate) = gate_server(9).await;
    let child = spawn(&b, &server.uri(), &batch_args(), &[]);
    let pool = open_db(&b).await;
    wait_until(60, "9 results", || {
        let pool = pool.clone();
        async move { count(&pool, "SELECT COUNT(*) FROM result").await >= 9 }
    })
    .await;
    wait_until(60, "every worker in flight", || {
        let c = gate.calls.load(Ordering::SeqCst);
        async move { c >= 9 + CONCURRENCY }
    })
    .await;
    let sent = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    // The held requests (a minute each) are dropped, not waited for.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_no_panic(&out);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{signal}: {err}");
    assert!(err.contains("interrupted: saving what finished"), "{err}");
    assert!(
        err.contains("resume with: helmbench run-batch --resume 1"),
        "{err}"
    );
    assert_key_absent("stdout", &out.stdout);
    assert_key_absent("stderr", &out.stderr);
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["status"], "interrupted", "{r}");
    assert_eq!(r["test_cases"], 9);
    assert!(r["message"].as_str().unwrap().contains("cancelled"), "{r}");
    assert!(r["completed_at"].is_string());
    resume_to_completion(&b, 9).await;
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn sigint_saves_marks_interrupted_and_resume_completes() {
    interrupt_then_resume("-INT").await;
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_is_handled_like_ctrl_c() {
    interrupt_then_resume("-TERM").await;
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
