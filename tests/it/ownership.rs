//! A run has one owner process: resuming a run another live process runs is
//! refused before anything is sent; a dead owner's run is interrupted at
//! once, another host's only once its heartbeat is old; a process whose
//! run was taken over stops sending; a stopped (SIGSTOP) owner is never
//! taken over, however old its heartbeat.

use std::sync::atomic::Ordering;

use crate::support::child::{
    assert_resume_refused, batch_args, count, open_db, resume_to_completion, run_and_kill,
    run_to_end, signal, spawn, spawn_until_stored, wait_until,
};
use crate::support::mock::{counting_server, gate_server, slow_triage_server};
use crate::support::{assert_no_panic, grid_bench, run_row, runs_json, stderr};

/// A run has one owner: `--resume` of a run another live process is running
/// is refused before anything is sent; once that process is killed, `runs`
/// calls the run interrupted at once and the resume goes ahead.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_is_resumed_by_one_process_at_a_time() {
    let b = grid_bench(2, 20);
    let (server, _gate) = gate_server(5).await;
    let mut child = spawn(&b, &server.uri(), &batch_args(), &[]);
    let pool = open_db(&b).await;
    wait_until(60, "five results", || {
        let pool = pool.clone();
        async move { count(&pool, "SELECT COUNT(*) FROM result").await >= 5 }
    })
    .await;

    assert_resume_refused(&b, child.id()).await;
    assert_eq!(runs_json(&b)["runs"][0]["status"], "running");

    child.kill().unwrap();
    child.wait().unwrap();
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["status"], "interrupted", "{r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("stopped without finishing"),
        "{r}"
    );
    pool.close().await;
    resume_to_completion(&b, 5).await;
}

/// Across hosts only the heartbeat tells a live owner from a dead one: a
/// fresh one refuses the resume, one older than 30 s lets it through.
#[tokio::test(flavor = "multi_thread")]
async fn an_owner_on_another_host_counts_while_its_heartbeat_is_fresh() {
    let b = grid_bench(2, 20);
    let (stored, _) = run_and_kill(&b, &batch_args(), 7, 0, &[]).await;
    let pool = open_db(&b).await;
    sqlx::query(
        "UPDATE evaluation_run SET owner_host = 'lab-node-7', owner_pid = 4242,
           heartbeat_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
    )
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(runs_json(&b)["runs"][0]["status"], "running");
    let (server, gate) = gate_server(usize::MAX).await;
    let out = run_to_end(&b, &server.uri(), &["run-batch", "--resume", "1"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("pid 4242 on lab-node-7"),
        "{}",
        stderr(&out)
    );
    assert_eq!(gate.calls.load(Ordering::SeqCst), 0);

    sqlx::query(
        "UPDATE evaluation_run SET heartbeat_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-31 seconds')",
    )
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(runs_json(&b)["runs"][0]["status"], "interrupted");
    pool.close().await;
    resume_to_completion(&b, stored).await;
}

/// A running process keeps its heartbeat fresh, and stops sending when
/// another process has taken its run over (here: the row names pid 1).
#[tokio::test(flavor = "multi_thread")]
async fn a_run_taken_over_elsewhere_stops_sending_and_leaves_the_row_alone() {
    let server = slow_triage_server(500).await;
    // 40 test cases one at a time: 20 s, and two heartbeats (5 s apart) come first.
    let b = grid_bench(2, 20);
    let child = spawn(
        &b,
        &server.uri(),
        &["run-batch", "--all-scenarios", "--concurrency", "1"],
        &[],
    );
    let pool = open_db(&b).await;
    let beat = || {
        let pool = pool.clone();
        async move {
            // An error is "not yet": the binary may still be migrating.
            sqlx::query_scalar::<_, String>("SELECT heartbeat_at FROM evaluation_run WHERE id = 1")
                .fetch_optional(&pool)
                .await
                .ok()
                .flatten()
        }
    };
    wait_until(60, "the run row", || {
        let beat = beat();
        async move { beat.await.is_some() }
    })
    .await;
    let first = beat().await.unwrap();
    wait_until(20, "a second heartbeat", || {
        let (beat, first) = (beat(), first.clone());
        async move { beat.await.is_some_and(|b| b > first) }
    })
    .await;

    sqlx::query("UPDATE evaluation_run SET owner_pid = 1 WHERE id = 1")
        .execute(&pool)
        .await
        .unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("another helmbench took over run 1"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stored = count(&pool, "SELECT COUNT(*) FROM result").await;
    assert!(stored < 40, "it stopped early: {stored}");
    // The new owner's row is not marked finished by the old one.
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM evaluation_run WHERE status = 'running' AND completed_at IS NULL AND owner_pid = 1").await,
        1
    );
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_owner_with_a_stale_heartbeat_is_never_taken_over() {
    let (server, _) = counting_server(100, &[]).await;
    let b = grid_bench(2, 20);
    // Committed as they arrive: the test waits for stored results.
    let args = [
        "--test-log-age-ms",
        "0",
        "run-batch",
        "--all-scenarios",
        "--concurrency",
        "2",
    ];
    let (child, pool) = spawn_until_stored(&b, &server.uri(), &args, 3).await;
    // Continued and killed however the test ends.
    let owner = Stopped(child);
    // Stopped for an hour (Ctrl-Z and a lunch break): the heartbeat is old.
    // A stop that lands inside the owner's write transaction holds the
    // database's write lock for as long as it is stopped (as a real Ctrl-Z
    // would): continue it a moment and stop it again until it is stopped
    // outside one, which the write below proves.
    let mut tries = 0;
    loop {
        signal(owner.0.id(), "-STOP");
        let aged = sqlx::query(
            "UPDATE evaluation_run SET heartbeat_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 hour')",
        )
        .execute(&pool)
        .await;
        match aged {
            Ok(_) => break,
            Err(e) if tries < 20 && e.to_string().contains("locked") => {
                tries += 1;
                signal(owner.0.id(), "-CONT");
                tokio::time::sleep(std::time::Duration::from_millis(30)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
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
