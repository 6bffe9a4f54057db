//! `run-batch --resume` after a SIGKILL: before the first write, mid-batch
//! (twice: the resume itself is killed too) and during the final
//! bookkeeping. Nothing answered is lost, and only the requests in flight
//! at a kill are paid twice. Resuming a run that does not exist is a usage
//! error.

use crate::support::child::{CONCURRENCY, N, batch_args, resume_to_completion, run_and_kill};
use crate::support::{Bench, assert_no_panic, grid_bench, stderr};

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_before_the_first_write_then_resume() {
    let b = grid_bench(2, 20);
    let (stored, calls) = run_and_kill(&b, &batch_args(), 0, 0, &[]).await;
    assert_eq!(stored, 0);
    // Paid twice: only the requests in flight at the kill.
    assert_eq!(calls, CONCURRENCY);
    let resumed = resume_to_completion(&b, stored).await;
    assert!(calls + resumed - N <= CONCURRENCY);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_mid_batch_twice_then_resume() {
    let b = grid_bench(2, 20);
    let (stored, calls) = run_and_kill(&b, &batch_args(), 13, 0, &[]).await;
    assert_eq!(stored, 13);
    assert!(
        calls as i64 - stored <= CONCURRENCY as i64,
        "{calls} sent, {stored} stored"
    );
    // The resume itself is killed mid-way.
    let (stored2, calls2) = run_and_kill(&b, &["run-batch", "--resume", "1"], 11, 13, &[]).await;
    assert_eq!(stored2, 24);
    assert!(calls2 as i64 - 11 <= CONCURRENCY as i64);
    let resumed = resume_to_completion(&b, stored2).await;
    let paid_twice = calls + calls2 + resumed - N;
    assert!(
        paid_twice <= 2 * CONCURRENCY,
        "{paid_twice} requests paid twice over two kills"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_final_bookkeeping_then_resume() {
    let b = grid_bench(2, 20);
    // Hold the run between its last result write and its bookkeeping.
    let mut args = batch_args();
    args.push("--test-pause-before-finish-ms=60000");
    let (stored, calls) = run_and_kill(&b, &args, N, 0, &[]).await;
    assert_eq!(stored, N as i64);
    assert_eq!(calls, N);
    let resumed = resume_to_completion(&b, stored).await;
    assert_eq!(resumed, 0, "nothing is paid twice");
}

#[test]
fn resume_of_an_unknown_run_is_a_usage_error() {
    let b = Bench::new();
    b.file("models.yml", "models:\n  - id: a/b\n")
        .scenario("P1-B1-S1", "S1");
    let out = b
        .cmd()
        .env("OPENROUTER_API_KEY", "sk-test")
        .env("OPENROUTER_BASE_URL", "http://127.0.0.1:9")
        .args(["--database-url"])
        .arg(b.dir.path().join("h.db"))
        .args(["run-batch", "--resume", "42"])
        .output()
        .unwrap();
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no run with id 42"),
        "{}",
        stderr(&out)
    );
}
