//! The binary run as a child process, so a test can kill, interrupt or race
//! it, and direct reads of the database it writes (another program's, as
//! far as the test is concerned). The runs killed and resumed here are of
//! `grid_bench(2, 20)`: [`N`] test cases, [`CONCURRENCY`] at a time.

use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{Row, SqlitePool};

use super::mock::gate_server;
use super::{
    Bench, FLIP_EVERY, KEY, assert_no_panic, db_path, expected_pass, online, runs_json, stderr,
};

/// helmbench ARGS (on `h.db`, with [`KEY`] for the mock at `uri`, `env`
/// added) as a child with piped output.
pub fn spawn(b: &Bench, uri: &str, args: &[&str], env: &[(&str, &str)]) -> Child {
    let mut c = online(b, KEY, uri);
    for (k, v) in env {
        c.env(k, v);
    }
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs the binary to completion off the async runtime.
pub async fn run_to_end(b: &Bench, uri: &str, args: &[&str]) -> Output {
    let child = spawn(b, uri, args, &[]);
    tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap()
}

/// Spawns the binary and waits until it has stored `n` results.
pub async fn spawn_until_stored(
    b: &Bench,
    uri: &str,
    args: &[&str],
    n: i64,
) -> (Child, SqlitePool) {
    let child = spawn(b, uri, args, &[]);
    let pool = open_db(b).await;
    wait_until(60, &format!("{n} results"), || {
        let pool = pool.clone();
        async move { count(&pool, "SELECT COUNT(*) FROM result").await >= n }
    })
    .await;
    (child, pool)
}

/// Sends `sig` (`-TERM`, `-STOP`, ...) to process `pid` with kill(1).
pub fn signal(pid: u32, sig: &str) {
    assert!(
        Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
}

/// One connection to the database the binary writes (another program's).
pub async fn connect(b: &Bench) -> Result<SqlitePool, sqlx::Error> {
    SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::new()
                .filename(db_path(b))
                .busy_timeout(Duration::from_secs(30)),
        )
        .await
}

/// A pool on the database the binary writes, once the binary has created it.
pub async fn open_db(b: &Bench) -> SqlitePool {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if db_path(b).exists()
            && let Ok(pool) = connect(b).await
            && sqlx::query("SELECT COUNT(*) FROM result")
                .fetch_one(&pool)
                .await
                .is_ok()
        {
            return pool;
        }
        assert!(Instant::now() < deadline, "the database never appeared");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn count(pool: &SqlitePool, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Polls until `cond` holds, failing after `secs`.
pub async fn wait_until<F, Fut>(secs: u64, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every stored result is unique per (run, test code, repeat) and the run
/// holds exactly `n` of them, each with the verdict the mocks imply.
pub async fn assert_exact_results(pool: &SqlitePool, run_id: i64, n: i64) {
    let rows = sqlx::query(
        "SELECT test_code, repeat_index, passed, error_kind, error FROM result WHERE run_id = ?",
    )
    .bind(run_id)
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(rows.len() as i64, n, "results of run {run_id}");
    let mut seen = std::collections::HashSet::new();
    for r in &rows {
        let code: String = r.get(0);
        let repeat: i64 = r.get(1);
        assert!(seen.insert((code.clone(), repeat)), "duplicate {code}");
        let passed: bool = r.get(2);
        let kind: Option<String> = r.get(3);
        let error: Option<String> = r.get(4);
        assert_eq!(kind, None, "{code}: {error:?}");
        assert_eq!(passed, expected_pass(&code), "verdict of {code}");
    }
    // And the table as a whole has no duplicate either (any run).
    assert_eq!(
        count(pool, "SELECT COUNT(*) FROM result").await,
        count(
            pool,
            "SELECT COUNT(*) FROM (SELECT DISTINCT run_id, test_code, repeat_index FROM result)"
        )
        .await
    );
}

pub const N: usize = 40; // grid_bench(2, 20)

pub const CONCURRENCY: usize = 4;

/// run-batch of every scenario, [`CONCURRENCY`] requests at a time.
pub fn batch_args() -> Vec<&'static str> {
    vec!["run-batch", "--all-scenarios", "--concurrency", "4"]
}

/// Starts (or resumes) a run against a gate answering `fast` requests, waits
/// until those are stored and every worker is blocked on a held request,
/// then SIGKILLs it. Returns (results stored, requests the mock received).
pub async fn run_and_kill(
    b: &Bench,
    args: &[&str],
    fast: usize,
    already: usize,
    env: &[(&str, &str)],
) -> (i64, usize) {
    let (server, gate) = gate_server(fast).await;
    let mut child = spawn(b, &server.uri(), args, env);
    let pool = open_db(b).await;
    let want_stored = (already + fast).min(N) as i64;
    let want_calls = (fast + CONCURRENCY).min(N - already);
    wait_until(60, "the results before the kill point", || {
        let pool = pool.clone();
        async move { count(&pool, "SELECT COUNT(*) FROM result").await >= want_stored }
    })
    .await;
    wait_until(60, "every worker to be in flight", || {
        let calls = gate.calls.load(Ordering::SeqCst);
        async move { calls >= want_calls }
    })
    .await;
    child.kill().unwrap(); // SIGKILL on unix
    let status = child.wait().unwrap();
    assert_eq!(status.code(), None, "the binary ended before it was killed");
    let stored = count(&pool, "SELECT COUNT(*) FROM result").await;
    // Nothing answered was lost: every reply the mock sent was stored.
    assert_eq!(stored, want_stored);
    assert_eq!(
        count(
            &pool,
            "SELECT COUNT(*) FROM evaluation_run WHERE status = 'running' AND completed_at IS NULL"
        )
        .await,
        1,
        "a killed run is left running, with no end time"
    );
    pool.close().await;
    (stored, gate.calls.load(Ordering::SeqCst))
}

/// Resumes run 1 against a healthy mock and checks the full set results.
pub async fn resume_to_completion(b: &Bench, stored_before: i64) -> usize {
    let (server, gate) = gate_server(usize::MAX).await;
    let out = run_to_end(b, &server.uri(), &["run-batch", "--resume", "1"]).await;
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let calls = gate.calls.load(Ordering::SeqCst);
    assert_eq!(
        calls as i64,
        N as i64 - stored_before,
        "resume sends exactly the missing test cases"
    );
    let pool = open_db(b).await;
    assert_exact_results(&pool, 1, N as i64).await;
    let r = &runs_json(b)["runs"][0];
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["test_cases"], N);
    assert_eq!(
        r["passed"],
        (1..=20usize)
            .filter(|i| !i.is_multiple_of(FLIP_EVERY))
            .count()
            * 2
    );
    calls
}

/// `--resume 1` against a fresh mock is refused with exit 2, naming the
/// live owner's pid, and sends nothing.
pub async fn assert_resume_refused(b: &Bench, owner_pid: u32) {
    let (other, other_gate) = gate_server(usize::MAX).await;
    let out = run_to_end(b, &other.uri(), &["run-batch", "--resume", "1"]).await;
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "run 1 is being run by another helmbench (pid {owner_pid}"
        )),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        other_gate.calls.load(Ordering::SeqCst),
        0,
        "nothing sent twice"
    );
}
