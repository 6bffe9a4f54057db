//! The kill -9 window: at any instant at most one paid reply per worker is
//! not yet stored (a worker takes its next test case once its reply is
//! committed), so a SIGKILL at any point, at a high concurrency or during
//! another program's database lock, leaves the provider's calls minus the
//! stored results at most `--concurrency`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::child::{connect, count, open_db, spawn, wait_until};
use crate::support::grid_bench;
use crate::support::mock::counting_server;

const CONCURRENCY: usize = 32;

/// Starts a 2,000-case run at [`CONCURRENCY`] against a mock answering in
/// 2 ms, lets it store `after` results (and `lock` another program's write
/// lock for 1 s first, when set), SIGKILLs it, and returns (calls the mock
/// answered, results stored).
async fn kill_after(after: i64, extra_ms: u64, lock: bool) -> (usize, i64) {
    let (server, mock) = counting_server(2, &[]).await;
    let b = grid_bench(40, 50);
    let c = CONCURRENCY.to_string();
    let mut child = spawn(
        &b,
        &server.uri(),
        &[
            "run-batch",
            "--all-scenarios",
            "--concurrency",
            &c,
            "--fixed-concurrency",
        ],
        &[],
    );
    let pool = open_db(&b).await;
    wait_until(60, &format!("{after} results"), || {
        let pool = pool.clone();
        async move { count(&pool, "SELECT COUNT(*) FROM result").await >= after }
    })
    .await;
    let locker = connect(&b).await.unwrap();
    let tx = if lock {
        let tx = locker.begin_with("BEGIN IMMEDIATE").await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        Some(tx)
    } else {
        None
    };
    tokio::time::sleep(Duration::from_millis(extra_ms)).await;
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert_eq!(status.code(), None, "the run ended before it was killed");
    if let Some(tx) = tx {
        tx.rollback().await.unwrap();
    }
    // Requests that reached the mock before the kill are all answered.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let calls = mock.total.load(Ordering::SeqCst);
    let stored = count(&pool, "SELECT COUNT(*) FROM result").await;
    (calls, stored)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigkill_at_any_point_loses_at_most_one_reply_per_worker() {
    // Kill points spread over the run, a few milliseconds apart.
    for (after, extra_ms) in [(20, 0), (150, 3), (300, 7), (450, 1)] {
        let (calls, stored) = kill_after(after, extra_ms, false).await;
        assert!(
            calls as i64 - stored <= CONCURRENCY as i64,
            "killed after {after} results: {calls} calls paid, {stored} stored"
        );
        assert!(calls < 2000, "the run finished before the kill");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigkill_during_a_database_lock_loses_at_most_one_reply_per_worker() {
    for after in [40, 200] {
        let (calls, stored) = kill_after(after, 0, true).await;
        assert!(
            calls as i64 - stored <= CONCURRENCY as i64,
            "killed during a lock after {after} results: {calls} calls paid, {stored} stored"
        );
    }
}
