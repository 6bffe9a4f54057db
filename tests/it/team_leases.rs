//! Several processes on one run, on the team store (issue 34): the first
//! `run-batch` on a PostgreSQL database takes its test cases in leases,
//! `run-batch --join N` processes share them, `runs` shows who works on a
//! run, and a process killed with -9 loses only its leases, which the
//! others take over. All through the binary, against the mock provider,
//! on the real PostgreSQL tests/it/postgres.rs starts (these tests fail
//! under CI=true without one).

use std::collections::HashMap;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

use serde_json::Value;
use sqlx::postgres::PgPool;
use wiremock::MockServer;

use crate::postgres::{TestDb, db_url, server};
use crate::support::mock::{completions, prompt_of, slow_triage_server};
use crate::support::{Bench, KEY, grid_bench, json, stderr, stdout};

/// helmbench ARGS on the PostgreSQL database `url`, against the mock.
fn cmd(b: &Bench, url: &str, mock: &MockServer, args: &[&str]) -> std::process::Command {
    let mut c = b.helmbench().database(url).provider(KEY, &mock.uri()).std();
    c.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    c
}

fn spawn(b: &Bench, url: &str, mock: &MockServer, args: &[&str]) -> Child {
    cmd(b, url, mock, args).spawn().unwrap()
}

async fn wait(child: Child) -> Output {
    tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap()
}

fn read(b: &Bench, url: &str, args: &[&str]) -> Output {
    b.helmbench()
        .database(url)
        .std()
        .args(args)
        .output()
        .unwrap()
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Polls until `sql` counts at least `n`, failing after a minute.
async fn wait_for(pool: &PgPool, sql: &str, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // The tables exist once the first process has migrated the database.
        if let Ok(c) = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_one(pool)
            .await
            && c >= n
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {sql} >= {n}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn runs_json(b: &Bench, url: &str) -> Value {
    let out = read(b, url, &["runs", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    json(&out)
}

const RUN: [&str; 6] = [
    "run-batch",
    "--all-scenarios",
    "--yes",
    "--concurrency",
    "2",
    "--progress-every=0",
];

/// `run-batch --join 1` with the same two requests in flight as [`RUN`].
const JOIN: [&str; 6] = [
    "run-batch",
    "--join",
    "1",
    "--concurrency",
    "2",
    "--progress-every=0",
];

#[tokio::test(flavor = "multi_thread")]
async fn a_joined_run_is_shared_and_runs_shows_its_processes() {
    let Some(pg) = server() else { return };
    let db = TestDb::create(&pg).await;
    let url = db_url(&pg, &db.name);
    let b = grid_bench(8, 20); // 160 test cases: five chunks
    let mock = slow_triage_server(60).await;
    let first = spawn(&b, &url, &mock, &RUN);
    wait_for(&db.pool, "SELECT count(*) FROM result", 4).await;
    let joiner = spawn(&b, &url, &mock, &JOIN);
    // Both say they work on run 1 (the joiner once it has taken a lease).
    wait_for(
        &db.pool,
        "SELECT count(*) FROM run_host WHERE run_id = 1 AND left_at IS NULL",
        2,
    )
    .await;
    let runs = runs_json(&b, &url);
    let hosts = runs["runs"][0]["hosts"].as_array().unwrap().clone();
    assert_eq!(hosts.len(), 2, "{runs:#}");
    let pids: Vec<i64> = hosts.iter().map(|h| h["pid"].as_i64().unwrap()).collect();
    assert!(pids.contains(&i64::from(first.id())), "{hosts:?}");
    assert!(pids.contains(&i64::from(joiner.id())), "{hosts:?}");
    for h in &hosts {
        assert_eq!(h["live"], true, "{h}");
        assert!(!h["host"].as_str().unwrap().is_empty());
        assert!(h["heartbeat_age_s"].as_f64().unwrap() < 30.0);
    }
    assert_eq!(runs["runs"][0]["status"], "running");
    let table = stdout(&read(&b, &url, &["runs"]));
    assert!(
        table.contains("run 1: processes: ")
            && table.contains(&format!(":{} (working", joiner.id())),
        "{table}"
    );
    // A resume while they work is refused, pointing at --join.
    let out = cmd(&b, &url, &mock, &["run-batch", "--resume", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--join 1"), "{}", stderr(&out));

    let (a, j) = (wait(first).await, wait(joiner).await);
    assert_eq!(a.status.code(), Some(0), "{}", stderr(&a));
    assert_eq!(j.status.code(), Some(0), "{}", stderr(&j));
    // Every case once, both did some, nothing asked twice.
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM result WHERE run_id = 1").await,
        160
    );
    let asked = completions(&mock).await;
    assert_eq!(asked.len(), 160, "every test case asked once");
    let runs = runs_json(&b, &url);
    let run = &runs["runs"][0];
    assert_eq!(run["status"], "completed", "{run:#}");
    assert_eq!(run["test_cases"], 160);
    let hosts = run["hosts"].as_array().unwrap();
    let stored: i64 = hosts.iter().map(|h| h["stored"].as_i64().unwrap()).sum();
    assert!(hosts.iter().all(|h| h["live"] == false), "{hosts:?}");
    assert!(
        hosts.iter().all(|h| h["stored"].as_i64().unwrap() > 0),
        "both processes stored results: {hosts:?}"
    );
    assert_eq!(stored, 160, "{hosts:?}");
    // The finished run still lists who shared it.
    let table = stdout(&read(&b, &url, &["runs"]));
    assert!(table.contains("(gone,"), "{table}");
    db.remove().await;
}

#[test]
fn join_on_sqlite_is_refused_naming_the_team_store() {
    let b = grid_bench(1, 2);
    let out = b
        .helmbench()
        .database(crate::support::db_path(&b))
        .provider(KEY, "http://127.0.0.1:9")
        .std()
        .args(["run-batch", "--join", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("team store"), "{}", stderr(&out));
    assert!(stderr(&out).contains("--resume"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn join_refuses_a_finished_run_and_changed_content() {
    let Some(pg) = server() else { return };
    let db = TestDb::create(&pg).await;
    let url = db_url(&pg, &db.name);
    let b = grid_bench(1, 4);
    let mock = slow_triage_server(0).await;
    let out = cmd(&b, &url, &mock, &RUN).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = cmd(&b, &url, &mock, &["run-batch", "--join", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("nothing to join"), "{}", stderr(&out));
    b.file(
        "scenarios/P1-B1-S1/conditions.md",
        "# C1\n## System instructions\nChanged.\n\n",
    );
    let out = cmd(&b, &url, &mock, &["run-batch", "--join", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("content changed"), "{}", stderr(&out));
    assert_eq!(
        completions(&mock).await.len(),
        4,
        "nothing sent by the refusals"
    );
    db.remove().await;
}

/// Three processes on one run (the first, two `--join`ers), one killed
/// with -9 after two seconds: the others finish the run; every planned
/// test case is stored once; no request was paid twice beyond the killed
/// process's requests in flight (at most its --concurrency).
#[tokio::test(flavor = "multi_thread")]
async fn three_processes_one_killed_store_each_test_case_once() {
    let Some(pg) = server() else { return };
    let db = TestDb::create(&pg).await;
    let url = db_url(&pg, &db.name);
    let b = grid_bench(10, 30); // 300 test cases
    let planned = 300;
    let mock = slow_triage_server(80).await;
    let first = spawn(&b, &url, &mock, &RUN);
    wait_for(
        &db.pool,
        "SELECT count(*) FROM run_lease WHERE run_id = 1",
        1,
    )
    .await;
    let second = spawn(&b, &url, &mock, &JOIN);
    let doomed = spawn(&b, &url, &mock, &JOIN);
    let doomed_pid = doomed.id();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before_kill = count(&db.pool, "SELECT count(*) FROM result WHERE run_id = 1").await;
    assert!(before_kill < planned, "the run ended before the kill");
    crate::support::child::signal(doomed_pid, "-KILL");
    let killed = wait(doomed).await;
    assert_eq!(killed.status.code(), None, "killed by a signal");
    let (a, s) = (wait(first).await, wait(second).await);
    assert_eq!(a.status.code(), Some(0), "{}", stderr(&a));
    assert_eq!(s.status.code(), Some(0), "{}", stderr(&s));

    // Every planned test case stored exactly once.
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM result WHERE run_id = 1").await,
        planned
    );
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM (SELECT DISTINCT test_code, repeat_index FROM result WHERE run_id = 1) d"
        )
        .await,
        planned
    );
    // No request paid twice beyond the killed process's in flight (2).
    let mut asked: HashMap<String, usize> = HashMap::new();
    for r in completions(&mock).await {
        *asked.entry(prompt_of(&r)).or_default() += 1;
    }
    assert_eq!(asked.len() as i64, planned, "every test case asked");
    let twice: usize = asked.values().map(|n| n - 1).sum();
    assert!(twice <= 2, "{twice} requests paid twice");
    let runs = runs_json(&b, &url);
    let run = &runs["runs"][0];
    assert_eq!(run["status"], "completed", "{run:#}");
    assert_eq!(run["test_cases"], planned);
    let hosts = run["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 3, "{hosts:?}");
    let dead = hosts
        .iter()
        .find(|h| h["pid"] == i64::from(doomed_pid))
        .unwrap();
    assert_eq!(dead["live"], false, "{dead}");
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM run_lease WHERE run_id = 1 AND done = 0"
        )
        .await,
        0
    );
    db.remove().await;
}

/// One budget for three processes (the first, two joiners; the first,
/// the run's owner, killed with -9 after two seconds): each would spend
/// the whole `--max-cost` on its own, together they stay within it plus
/// the requests in flight, and the joiners end the run, stopped for the
/// budget, every stored test case once.
#[tokio::test(flavor = "multi_thread")]
async fn three_processes_keep_one_budget() {
    let Some(pg) = server() else { return };
    let db = TestDb::create(&pg).await;
    let url = db_url(&pg, &db.name);
    let b = grid_bench(10, 30); // 300 test cases at $0.001
    let mock = slow_triage_server(150).await;
    let budget = 0.15;
    let mut first_args = RUN.to_vec();
    first_args.extend(["--max-cost", "0.15"]);
    let first = spawn(&b, &url, &mock, &first_args);
    wait_for(
        &db.pool,
        "SELECT count(*) FROM run_lease WHERE run_id = 1",
        1,
    )
    .await;
    let second = spawn(&b, &url, &mock, &JOIN);
    let third = spawn(&b, &url, &mock, &JOIN);
    // This time the process that started the run (its owner) is killed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    crate::support::child::signal(first.id(), "-KILL");
    let killed = wait(first).await;
    assert_eq!(killed.status.code(), None, "killed by a signal");
    // The run lives on in the joiners.
    assert_eq!(runs_json(&b, &url)["runs"][0]["status"], "running");
    let (a, s) = (wait(second).await, wait(third).await);
    for out in [&a, &s] {
        assert!(
            stdout(out).contains("budget reached") || stdout(out).contains("continues in"),
            "{}\n{}",
            stdout(out),
            stderr(out)
        );
    }
    // What the provider was paid: every request it answered.
    let paid = completions(&mock).await.len() as f64 * 0.001;
    // In flight at once: three processes, two requests each.
    let in_flight = 3.0 * 2.0 * 0.001;
    assert!(
        paid <= budget + in_flight + 1e-9,
        "paid ${paid:.3} for a ${budget} budget"
    );
    assert!(paid >= budget - in_flight, "stopped early: ${paid:.3}");
    let stored = count(&db.pool, "SELECT count(*) FROM result WHERE run_id = 1").await;
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM (SELECT DISTINCT test_code, repeat_index FROM result WHERE run_id = 1) d"
        )
        .await,
        stored
    );
    assert!(stored < 300, "the budget stopped the run");
    let runs = runs_json(&b, &url);
    let run = &runs["runs"][0];
    assert_eq!(run["status"], "interrupted", "{run:#}");
    assert!(
        run["message"].as_str().unwrap().contains("budget reached"),
        "{run:#}"
    );
    let spent = run["cost_usd"].as_f64().unwrap() + run["judge_cost_usd"].as_f64().unwrap();
    assert!(spent <= budget + in_flight + 1e-9, "{run:#}");
    db.remove().await;
}

/// A lease-managed run whose only process was killed: `runs` shows it
/// interrupted, `--resume` takes it over and asks only the missing test
/// cases (chunks checked anew against what is stored), once each.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_leased_run_resumes_asking_only_what_is_missing() {
    let Some(pg) = server() else { return };
    let db = TestDb::create(&pg).await;
    let url = db_url(&pg, &db.name);
    let b = grid_bench(4, 20); // 80 test cases
    let mock = slow_triage_server(40).await;
    let first = spawn(&b, &url, &mock, &RUN);
    wait_for(&db.pool, "SELECT count(*) FROM result", 20).await;
    crate::support::child::signal(first.id(), "-KILL");
    let killed = wait(first).await;
    assert_eq!(killed.status.code(), None);
    let stored = count(&db.pool, "SELECT count(*) FROM result WHERE run_id = 1").await;
    assert!(stored < 80);
    let runs = runs_json(&b, &url);
    assert_eq!(runs["runs"][0]["status"], "interrupted", "{runs:#}");
    let sent_before = completions(&mock).await.len();
    let out = cmd(&b, &url, &mock, &["run-batch", "--resume", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM (SELECT DISTINCT test_code, repeat_index FROM result WHERE run_id = 1) d"
        )
        .await,
        80
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM result WHERE run_id = 1").await,
        80
    );
    // Exactly the missing ones were asked (the killed process's requests
    // in flight were sent before the kill: paid, never stored, asked again).
    let asked_again = completions(&mock).await.len() - sent_before;
    assert_eq!(asked_again as i64, 80 - stored);
    assert_eq!(runs_json(&b, &url)["runs"][0]["status"], "completed");
    db.remove().await;
}

/// A joiner on another machine (`HELMBENCH_HOST`) that dies: its pid means
/// nothing here, so its chunk is taken only once its lease expires. The
/// first process, its own work done, waits for it meanwhile instead of
/// leaving the run unfinished; the lease's expiry (30 s after the last
/// heartbeat) is brought forward in the database rather than waited for.
#[tokio::test(flavor = "multi_thread")]
async fn a_chunk_held_on_a_gone_machine_is_taken_when_its_lease_expires() {
    let Some(pg) = server() else { return };
    let db = TestDb::create(&pg).await;
    let url = db_url(&pg, &db.name);
    let b = grid_bench(5, 20); // 100 test cases: chunks of 32, 32, 32, 4
    let mock = slow_triage_server(40).await;
    let first = spawn(&b, &url, &mock, &RUN);
    wait_for(
        &db.pool,
        "SELECT count(*) FROM run_lease WHERE run_id = 1",
        1,
    )
    .await;
    let far = cmd(&b, &url, &mock, &JOIN)
        .env("HELMBENCH_HOST", "far-away")
        .spawn()
        .unwrap();
    let held = "SELECT count(*) FROM run_lease WHERE run_id = 1 AND holder_host = 'far-away'";
    wait_for(&db.pool, held, 1).await;
    wait_for(&db.pool, "SELECT count(*) FROM result WHERE run_id = 1", 10).await;
    crate::support::child::signal(far.id(), "-KILL");
    assert_eq!(wait(far).await.status.code(), None);
    // Everything else done, the first process waits for the far chunk.
    wait_for(
        &db.pool,
        "SELECT count(*) FROM run_lease WHERE run_id = 1 AND (done = 1 OR holder_host = 'far-away')",
        4,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut first = first;
    assert!(
        first.try_wait().unwrap().is_none(),
        "the first process left the run unfinished"
    );
    assert_eq!(
        count(&db.pool, held).await,
        1,
        "the far chunk is still leased"
    );
    assert!(count(&db.pool, "SELECT count(*) FROM result WHERE run_id = 1").await < 100);
    // Thirty seconds later, as far as the lease is concerned.
    sqlx::query(
        "UPDATE run_lease SET expires_at = expires_at - 1.0 WHERE holder_host = 'far-away'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let out = wait(first).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM result WHERE run_id = 1").await,
        100
    );
    let mut asked: HashMap<String, usize> = HashMap::new();
    for r in completions(&mock).await {
        *asked.entry(prompt_of(&r)).or_default() += 1;
    }
    assert_eq!(asked.len(), 100);
    assert!(
        asked.values().map(|n| n - 1).sum::<usize>() <= 2,
        "paid twice beyond in-flight"
    );
    let runs = runs_json(&b, &url);
    assert_eq!(runs["runs"][0]["status"], "completed", "{runs:#}");
    let hosts = runs["runs"][0]["hosts"].as_array().unwrap();
    assert!(hosts.iter().any(|h| h["host"] == "far-away"), "{hosts:?}");
    db.remove().await;
}

/// Ctrl-C on a joiner: its requests in flight finish and are stored (the
/// grace period), its leases go back at once, it exits 0 saying the run
/// continues; the first process finishes the run, nothing paid twice.
#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_joiner_hands_its_chunks_back() {
    let Some(pg) = server() else { return };
    let db = TestDb::create(&pg).await;
    let url = db_url(&pg, &db.name);
    let b = grid_bench(8, 20); // 160 test cases
    let mock = slow_triage_server(50).await;
    let first = spawn(&b, &url, &mock, &RUN);
    wait_for(
        &db.pool,
        "SELECT count(*) FROM run_lease WHERE run_id = 1",
        1,
    )
    .await;
    let joiner = spawn(&b, &url, &mock, &JOIN);
    let mine = format!(
        "SELECT count(*) FROM run_lease WHERE run_id = 1 AND holder_pid = {}",
        joiner.id()
    );
    wait_for(&db.pool, &mine, 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    crate::support::child::signal(joiner.id(), "-INT");
    let j = wait(joiner).await;
    assert_eq!(j.status.code(), Some(0), "{}", stderr(&j));
    assert!(
        stdout(&j).contains("the run continues in"),
        "{}",
        stdout(&j)
    );
    assert_eq!(count(&db.pool, &mine).await, 0, "its leases went back");
    let a = wait(first).await;
    assert_eq!(a.status.code(), Some(0), "{}", stderr(&a));
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM result WHERE run_id = 1").await,
        160
    );
    let mut asked: HashMap<String, usize> = HashMap::new();
    for r in completions(&mock).await {
        *asked.entry(prompt_of(&r)).or_default() += 1;
    }
    assert_eq!(asked.len(), 160);
    assert!(asked.values().all(|n| *n == 1), "a request paid twice");
    assert_eq!(runs_json(&b, &url)["runs"][0]["status"], "completed");
    db.remove().await;
}

/// The shared budget's rules, atomic on the real server: 40 reservations
/// at once against a $1 budget take exactly eight $0.125 slots (a first
/// attempt goes while spent + reserved is under the budget; amounts exact
/// in binary, so no rounding decides), a retry only when its cost fits, a
/// settlement moves a reservation into the spend; a joiner's open keeps
/// the row, a resume's drops what was reserved.
#[tokio::test(flavor = "multi_thread")]
async fn the_shared_budget_reserves_atomically() {
    let Some(pg) = server() else { return };
    let db = TestDb::create(&pg).await;
    let url = db_url(&pg, &db.name);
    let store = helmbench::store::Store::open(&url).await.unwrap();
    store.open_team_budget("b1", 1.0, 0.0, true).await.unwrap();
    let tries = (0..40).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { store.reserve_team_budget("b1", 0.125, false).await })
    });
    let mut taken = 0;
    for t in tries {
        if t.await.unwrap().unwrap().is_ok() {
            taken += 1;
        }
    }
    assert_eq!(taken, 8);
    // Reached: a first attempt is refused, whatever its cost.
    let refused = store.reserve_team_budget("b1", 0.0, false).await.unwrap();
    assert_eq!(refused, Err((0.0, 1.0, 1.0)));
    // Two attempts settle cheaper than reserved: room for a retry that fits.
    store.settle_team_budget("b1", 0.125, 0.025).await.unwrap();
    let state = store.settle_team_budget("b1", 0.125, 0.025).await.unwrap();
    assert!(
        (state.0 - 0.05).abs() < 1e-12 && state.1 == 0.75,
        "{state:?}"
    );
    assert!(
        store
            .reserve_team_budget("b1", 0.25, true)
            .await
            .unwrap()
            .is_err()
    );
    assert!(
        store
            .reserve_team_budget("b1", 0.125, true)
            .await
            .unwrap()
            .is_ok()
    );
    // A joiner's open keeps what is reserved (a retry of 0.125 no longer fits)…
    store.open_team_budget("b1", 1.0, 0.0, false).await.unwrap();
    assert!(
        store
            .reserve_team_budget("b1", 0.125, true)
            .await
            .unwrap()
            .is_err()
    );
    // …a resume's (nobody in flight) drops it and takes the spend given.
    store.open_team_budget("b1", 1.0, 0.05, true).await.unwrap();
    let fresh = store.reserve_team_budget("b1", 0.125, false).await.unwrap();
    assert_eq!(fresh, Ok((0.05, 0.125, 1.0)));
    store.close().await;
    db.remove().await;
}

/// A process stopped (Ctrl-Z, a laptop's sleep) past its lease: another
/// process takes its chunk and finishes it; when the stopped one wakes, it
/// asks the database which chunks it still holds before sending another
/// case, and sends none of those it had queued from the chunk it lost. A
/// case is paid twice only if it was in flight when the process stopped
/// (its concurrency, 2).
#[tokio::test(flavor = "multi_thread")]
async fn a_process_stopped_past_its_lease_sends_none_of_the_chunk_another_took() {
    use crate::support::child::signal;

    let Some(pg) = server() else { return };
    let db = TestDb::create(&pg).await;
    let url = db_url(&pg, &db.name);
    let b = grid_bench(2, 16); // 32 test cases: one chunk
    let mock = slow_triage_server(300).await;
    let sleeper = spawn(&b, &url, &mock, &RUN);
    wait_for(&db.pool, "SELECT count(*) FROM result WHERE run_id = 1", 2).await;
    signal(sleeper.id(), "-STOP");
    let stopped = Instant::now();
    // Its lease runs out (brought forward, as 30 s of silence would) and a
    // process that joins takes the chunk and asks every missing case.
    sqlx::query("UPDATE run_lease SET expires_at = 0 WHERE run_id = 1")
        .execute(&db.pool)
        .await
        .unwrap();
    let joiner = wait(spawn(
        &b,
        &url,
        &mock,
        &[
            "run-batch",
            "--join",
            "1",
            "--concurrency",
            "8",
            "--progress-every=0",
        ],
    ))
    .await;
    assert_eq!(joiner.status.code(), Some(0), "{}", stderr(&joiner));
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM result WHERE run_id = 1").await,
        32
    );
    // Wake it well past two heartbeats after its last one.
    let asleep = Duration::from_secs(12);
    tokio::time::sleep(asleep.saturating_sub(stopped.elapsed())).await;
    signal(sleeper.id(), "-CONT");
    let woke = wait(sleeper).await;
    assert_eq!(woke.status.code(), Some(0), "{}", stderr(&woke));
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM result WHERE run_id = 1").await,
        32,
        "each test case stored once"
    );
    let mut asked: HashMap<String, usize> = HashMap::new();
    for r in completions(&mock).await {
        *asked.entry(prompt_of(&r)).or_default() += 1;
    }
    assert_eq!(asked.len(), 32);
    let twice: usize = asked.values().map(|n| n - 1).sum();
    assert!(
        twice <= 2,
        "{twice} requests paid twice (in flight when stopped: 2)"
    );
    assert_eq!(runs_json(&b, &url)["runs"][0]["status"], "completed");
    db.remove().await;
}
