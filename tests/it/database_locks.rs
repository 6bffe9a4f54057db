//! One database, other writers: a database another program holds locked
//! pauses sending (a bounded number of paid replies wait for it) and loses
//! nothing; locked past the wait, the run stops and keeps every paid reply
//! for the resume; two batches on one database at once, watched by a
//! reader, each store exactly their results.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::child::{
    assert_exact_results, connect, count, open_db, run_to_end, spawn, spawn_until_stored,
};
use crate::support::mock::{counting_server, slow_triage_server};
use crate::support::{
    Helmbench, assert_no_panic, db_path, grid_bench, run_row, runs_json, stderr, stdout,
};

/// At most this many paid replies wait for the writer, beside one per
/// request in flight (see runner::WRITE_QUEUE and WRITE_BATCH).
const PENDING_BOUND: usize = 1024 + 256;

/// The run's arguments; each result is committed as it arrives (not in a
/// transaction every 2 s), as these tests watch the database during the run.
fn locked_run_args<'a>(concurrency: &'a str, write_wait: &'a str) -> [&'a str; 8] {
    [
        "--test-log-age-ms",
        "0",
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

/// A commit in flight holds no worker (issue 45): the writer goes on
/// logging results, and the workers asking, while the database takes a
/// transaction. Here a transaction waits on another program's lock for
/// 0.6 s (less than the writer's 1 s busy wait, so it succeeds after): the
/// run goes on paying and logging the whole time. A writer that awaited
/// its commit held every worker after one reply each: at most
/// `--concurrency` more calls.
#[tokio::test(flavor = "multi_thread")]
async fn a_commit_waiting_on_a_lock_holds_no_worker() {
    const CONCURRENCY: usize = 8;
    let (server, mock) = counting_server(2, &[]).await;
    let b = grid_bench(10, 600); // 6,000 test cases
    let (child, pool) =
        spawn_until_stored(&b, &server.uri(), &locked_run_args("8", "120"), 50).await;
    let locker = connect(&b).await.unwrap();
    let tx = locker.begin_with("BEGIN IMMEDIATE").await.unwrap();
    let at_lock = mock.total.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let at_release = mock.total.load(Ordering::SeqCst);
    tx.rollback().await.unwrap();
    assert!(
        at_release - at_lock > 4 * CONCURRENCY,
        "{} calls during a commit's wait: the workers were held",
        at_release - at_lock
    );
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(count(&pool, "SELECT COUNT(*) FROM result").await, 6000);
    assert_eq!(
        mock.total.load(Ordering::SeqCst),
        6000,
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

#[tokio::test(flavor = "multi_thread")]
async fn two_batches_on_one_database_at_once_and_a_consistent_reader() {
    let server = slow_triage_server(20).await;
    let b = grid_bench(3, 100); // 300 test cases per run
    let args = [
        "run-batch",
        "--all-scenarios",
        "--no-cache",
        "--concurrency",
        "8",
    ];
    // Both start on a database that does not exist yet: both migrate it.
    let first = spawn(&b, &server.uri(), &args, &[]);
    let second = spawn(&b, &server.uri(), &args, &[]);
    let runs_reader = {
        let b_root = b.root();
        let db = db_path(&b);
        let dir = b.dir.path().to_path_buf();
        std::thread::spawn(move || {
            let mut snapshots = 0;
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                let out = Helmbench::in_dir(&dir)
                    .benchmark(&b_root)
                    .database(&db)
                    .std()
                    .args(["runs", "--format", "json"])
                    .output()
                    .unwrap();
                // Not created yet, or its migrations still under way (the
                // window grows with every migration: it made this flaky).
                if out.status.code() == Some(2)
                    && (stderr(&out).contains("no database")
                        || stderr(&out).contains("is still being created"))
                {
                    continue;
                }
                assert_eq!(out.status.code(), Some(0), "runs: {}", stderr(&out));
                let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                let runs = v["runs"].as_array().unwrap();
                let mut done = runs.len() == 2;
                for r in runs {
                    let n = |k: &str| r[k].as_i64().unwrap_or_else(|| panic!("{k} in {r}"));
                    assert!(n("passed") <= n("test_cases"), "{r}");
                    assert!(n("test_cases") <= n("planned_test_cases"), "{r}");
                    assert!(n("evaluations") >= n("test_cases"), "{r}");
                    assert!(r["cost_usd"].as_f64().unwrap() >= 0.0);
                    done &= r["status"] == "completed";
                }
                snapshots += 1;
                if done {
                    break;
                }
            }
            snapshots
        })
    };
    let (a, c) = tokio::task::spawn_blocking(move || {
        (
            first.wait_with_output().unwrap(),
            second.wait_with_output().unwrap(),
        )
    })
    .await
    .unwrap();
    for out in [&a, &c] {
        assert_no_panic(out);
        // Under load one writer may wait past its lock timeout for the
        // other: it pauses sending and says so, and nothing is lost.
        assert!(
            stderr(out)
                .lines()
                .filter(|l| l.contains("locked"))
                .all(|l| l.contains("sending paused")),
            "{}",
            stderr(out)
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(out));
    }
    let snapshots = runs_reader.join().unwrap();
    assert!(snapshots > 0);
    let pool = open_db(&b).await;
    assert_exact_results(&pool, 1, 300).await;
    assert_exact_results(&pool, 2, 300).await;
    let runs = runs_json(&b);
    assert_eq!(runs["runs"].as_array().unwrap().len(), 2, "{runs}");
    for r in runs["runs"].as_array().unwrap() {
        assert_eq!(r["status"], "completed");
        assert_eq!(r["test_cases"], 300);
    }
}

/// A `--resume` of a run whose process is alive but stalled on another
/// program's lock answers at once that the run is alive (exit 2), instead
/// of waiting for the lock.
#[tokio::test(flavor = "multi_thread")]
async fn a_resume_during_a_database_lock_answers_that_the_run_is_alive() {
    let (server, _) = counting_server(20, &[]).await;
    let b = grid_bench(3, 100);
    let (mut child, _pool) =
        spawn_until_stored(&b, &server.uri(), &locked_run_args("4", "120"), 20).await;
    let locker = connect(&b).await.unwrap();
    let tx = locker.begin_with("BEGIN IMMEDIATE").await.unwrap();
    let started = Instant::now();
    crate::support::child::assert_resume_refused(&b, child.id()).await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the resume waited {:?} for the lock",
        started.elapsed()
    );
    tx.rollback().await.unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A run that gives up on a locked database marks itself interrupted in
/// the database once the lock ends, before it exits: its stored status
/// does not stay `running`.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_gave_up_on_a_lock_marks_its_stored_status_once_the_lock_ends() {
    let (server, _) = counting_server(20, &[]).await;
    let b = grid_bench(3, 100);
    let (child, pool) = spawn_until_stored(&b, &server.uri(), &locked_run_args("4", "2"), 20).await;
    let locker = connect(&b).await.unwrap();
    let tx = locker.begin_with("BEGIN IMMEDIATE").await.unwrap();
    // The writer gives up at its first failed write after 2 s (each waits
    // 1 s for the lock): by 4 s; the lock ends at 5.5 s, while the run
    // still tries to mark itself (5 s more).
    tokio::time::sleep(Duration::from_millis(5500)).await;
    tx.rollback().await.unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let status: String = sqlx::query_scalar("SELECT status FROM evaluation_run WHERE id = 1")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(status, "interrupted", "{}", stderr(&out));
}

/// A run whose process is gone without marking it (killed; or it gave up
/// marking itself while a lock outlasted its wait) is marked
/// `interrupted` in the database by the next helmbench that opens it for
/// writing, so the stored status agrees with what `runs` shows.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_left_running_by_a_gone_process_is_marked_by_the_next_writer() {
    let (server, _) = counting_server(20, &[]).await;
    let b = grid_bench(3, 100);
    let (mut child, pool) =
        spawn_until_stored(&b, &server.uri(), &locked_run_args("4", "60"), 5).await;
    child.kill().unwrap(); // SIGKILL: nothing is marked
    child.wait().unwrap();
    let status = || async {
        sqlx::query_scalar::<_, String>("SELECT status FROM evaluation_run WHERE id = 1")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    assert_eq!(status().await, "running");
    // A reader shows it interrupted and writes nothing.
    let runs = runs_json(&b);
    assert_eq!(runs["runs"][0]["status"], "interrupted", "{runs}");
    assert_eq!(status().await, "running");
    let out = Helmbench::in_dir(b.dir.path())
        .database(db_path(&b))
        .std()
        .arg("migrate")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(status().await, "interrupted");
    let message: String = sqlx::query_scalar("SELECT message FROM evaluation_run WHERE id = 1")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(message.contains("--resume"), "{message}");
}
