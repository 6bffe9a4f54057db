//! The kill -9 window: at any instant at most one paid reply per worker is
//! not yet kept (a worker takes its next test case once its reply is in the
//! run's result log), so a SIGKILL at any point, at a high concurrency or
//! during another program's database lock, leaves the provider's calls
//! minus the results stored at most `--concurrency`, once what the killed
//! process kept is written (the first thing `--resume` does,
//! `helmbench::run::write_kept`). Writing it twice, as when a process dies
//! between a commit and emptying its log, stores nothing twice.

use std::sync::atomic::Ordering;
use std::time::Duration;

use helmbench::run::write_kept;
use helmbench::store::Store;
use serde_json::Value;

use crate::support::child::{connect, count, open_db, spawn, wait_until};
use crate::support::db_path;
use crate::support::grid_bench;
use crate::support::mock::counting_server;

const CONCURRENCY: usize = 32;

/// The whole benchmark `b` at [`CONCURRENCY`], in a child process.
fn start(b: &crate::support::Bench, uri: &str) -> std::process::Child {
    let c = CONCURRENCY.to_string();
    let args = [
        "run-batch",
        "--all-scenarios",
        "--concurrency",
        &c,
        "--fixed-concurrency",
    ];
    spawn(b, uri, &args, &[])
}

/// Starts a 2,000-case run at [`CONCURRENCY`] against a mock answering in
/// 2 ms, lets the mock answer `after` calls (and `lock` another program's
/// write lock for 1 s first, when set), SIGKILLs it, writes what it kept,
/// and returns (calls the mock answered, results stored).
async fn kill_after(after: i64, extra_ms: u64, lock: bool) -> (usize, i64) {
    let (server, mock) = counting_server(2, &[]).await;
    let b = grid_bench(40, 50);
    let mut child = start(&b, &server.uri());
    let pool = open_db(&b).await;
    // The database takes results every few seconds now: the mock's count
    // says how far the run is.
    wait_until(60, &format!("{after} calls"), || {
        let n = mock.total.load(Ordering::SeqCst) as i64;
        async move { n >= after }
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
    let store = Store::open(&db_path(&b).display().to_string())
        .await
        .unwrap();
    write_kept(&store, 1).await.unwrap();
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

/// A 2,000-case run killed (SIGKILL) once the mock answered 300 calls:
/// its benchmark, the mock, the database and the log it left.
async fn killed_after_300() -> (
    crate::support::Bench,
    wiremock::MockServer,
    sqlx::SqlitePool,
    std::path::PathBuf,
) {
    let (server, mock) = counting_server(2, &[]).await;
    let b = grid_bench(40, 50);
    let mut child = start(&b, &server.uri());
    let pool = open_db(&b).await;
    wait_until(60, "300 calls", || {
        let n = mock.total.load(Ordering::SeqCst);
        async move { n >= 300 }
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    let log = std::path::PathBuf::from(format!("{}.run-1.log", db_path(&b).display()));
    (b, server, pool, log)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_log_written_twice_stores_nothing_twice() {
    // A process that dies after a commit but before it empties its log
    // leaves records the database already holds: written again, they are
    // skipped by the mark the commit kept.
    let (b, _server, pool, log) = killed_after_300().await;
    assert!(log.exists(), "the killed process left its log");
    let copy = log.with_extension("copy");
    std::fs::copy(&log, &copy).unwrap();
    let store = Store::open(&db_path(&b).display().to_string())
        .await
        .unwrap();
    let before = count(&pool, "SELECT COUNT(*) FROM result").await;
    let kept = write_kept(&store, 1).await.unwrap() as i64;
    assert!(kept > 0, "the log held results the database did not");
    assert!(!log.exists(), "the log is removed once written");
    let after = count(&pool, "SELECT COUNT(*) FROM result").await;
    assert_eq!(after, before + kept);
    let totals =
        "SELECT (SELECT COUNT(*) FROM result) || '/' || (SELECT COUNT(*) FROM discarded_charge)
                  || '/' || (SELECT SUM(test_cases) FROM run_total)";
    let once: String = sqlx::query_scalar(totals).fetch_one(&pool).await.unwrap();
    // The same records again: nothing written, no charge or total counted twice.
    std::fs::rename(&copy, &log).unwrap();
    assert_eq!(write_kept(&store, 1).await.unwrap(), 0);
    let twice: String = sqlx::query_scalar(totals).fetch_one(&pool).await.unwrap();
    assert_eq!(once, twice);
    assert!(!log.exists());
}

/// A process killed while a commit was in flight leaves its log moved
/// aside for that commit (`DATABASE.run-1.log.committing`) and the log the
/// records after it went to: the resume writes both, each record once, and
/// removes both. Before the writer went on logging during a commit, the
/// log was one file; a replay that read only it lost the half aside.
#[tokio::test(flavor = "multi_thread")]
async fn a_log_moved_aside_for_a_commit_is_written_with_the_log_after_it() {
    use std::io::Write as _;
    let (b, _server, pool, log) = killed_after_300().await;
    let (aside, lines) = records_left(&log);
    assert!(lines.len() >= 10, "the logs hold {} records", lines.len());
    let codes: std::collections::BTreeSet<String> = lines
        .iter()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["kind"] == "result").then(|| v["value"]["test_code"].as_str().unwrap().to_string())
        })
        .collect();
    let (first, second) = lines.split_at(lines.len() / 2);
    for (path, part) in [(&aside, first), (&log, second)] {
        let mut z = lz4_flex::frame::FrameEncoder::new(std::fs::File::create(path).unwrap());
        for l in part {
            writeln!(z, "{l}").unwrap();
        }
        z.finish().unwrap();
    }
    let store = Store::open(&db_path(&b).display().to_string())
        .await
        .unwrap();
    let before = count(&pool, "SELECT COUNT(*) FROM result").await;
    let kept = write_kept(&store, 1).await.unwrap() as i64;
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM result").await,
        before + kept
    );
    assert!(
        !aside.exists() && !log.exists(),
        "both files are removed once written"
    );
    let stored: std::collections::BTreeSet<String> =
        sqlx::query_scalar("SELECT test_code FROM result")
            .fetch_all(&pool)
            .await
            .unwrap()
            .into_iter()
            .collect();
    let missing: Vec<_> = codes.difference(&stored).collect();
    assert!(
        missing.is_empty(),
        "records of the logs not written: {missing:?}"
    );
}

/// A result of unknown cost (an OpenAI-compatible server without a price,
/// a cost OpenRouter gave as no usable number) is NaN, which JSON writes as
/// `null`. A log holding such records, as every version before this one
/// wrote them, could not be read back: the resume set the paid results
/// aside as damaged and failed. They are written, their cost unknown.
#[tokio::test(flavor = "multi_thread")]
async fn results_of_unknown_cost_in_a_log_are_written_as_unknown() {
    use std::io::Write as _;
    let (b, _server, pool, log) = killed_after_300().await;
    let (aside, lines) = records_left(&log);
    for path in [&aside, &log] {
        let _ = std::fs::remove_file(path);
    }
    let mut unknown = 0;
    let lines: Vec<String> = lines
        .iter()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if v["kind"] == "result" {
                v["value"]["cost_usd"] = Value::Null;
                unknown += 1;
            }
            v.to_string()
        })
        .collect();
    assert!(unknown >= 10, "the logs hold {unknown} results");
    let mut z = lz4_flex::frame::FrameEncoder::new(std::fs::File::create(&log).unwrap());
    for l in &lines {
        writeln!(z, "{l}").unwrap();
    }
    z.finish().unwrap();
    let before = count(&pool, "SELECT COUNT(*) FROM result WHERE cost_unknown = 1").await;
    let store = Store::open(&db_path(&b).display().to_string())
        .await
        .unwrap();
    let kept = write_kept(&store, 1).await.unwrap() as i64;
    assert!(kept > 0 && !log.exists(), "the log is written and removed");
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM result WHERE cost_unknown = 1").await,
        before + kept,
        "each result of the log stored with its cost unknown, not $0"
    );
}

/// The file a killed run's log was moved aside to for a commit, and the
/// records of both, in order. The kill may have caught a commit in flight:
/// its file first (and the fresh log may not have its first block yet).
fn records_left(log: &std::path::Path) -> (std::path::PathBuf, Vec<String>) {
    let aside = std::path::PathBuf::from(format!("{}.committing", log.display()));
    let mut lines = Vec::new();
    for path in [aside.as_path(), log] {
        if std::fs::metadata(path).is_ok_and(|m| m.len() > 0) {
            lines.extend(log_lines(path));
        }
    }
    (aside, lines)
}

/// The records of a log (LZ4 frames of MessagePack records, each after its
/// length) that were written whole, as the killed process left them, each
/// as a line of JSON: what earlier versions wrote, and still read.
fn log_lines(log: &std::path::Path) -> Vec<String> {
    use std::io::Read as _;
    let bytes = std::fs::read(log).unwrap();
    assert_eq!(&bytes[..4], &[0x04, 0x22, 0x4d, 0x18], "an LZ4 frame");
    let mut text = Vec::new();
    let _ = lz4_flex::frame::FrameDecoder::new(&bytes[..]).read_to_end(&mut text);
    let head = b"helmbench result log 2\n";
    assert!(text.starts_with(head), "the log's records are MessagePack");
    let (mut rest, mut lines) = (&text[head.len()..], Vec::new());
    while rest.len() >= 4 {
        let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
        let Some(record) = rest.get(4..4 + len) else {
            break;
        };
        let v: Value = rmp_serde::from_slice(record).unwrap();
        lines.push(v.to_string());
        rest = &rest[4 + len..];
    }
    lines
}

/// Issue 41, item 10: a killed run's log with a damaged record in the
/// middle used to resume to "completed", exit 0, the record skipped (its
/// test case paid again) and the log deleted. The records that can be read
/// are written, the log is moved aside and named, and the resume fails;
/// the same for the file of results a run could not write.
#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_record_is_kept_aside_named_and_fails_the_resume() {
    use std::io::Write as _;
    let (b, server, pool, log) = killed_after_300().await;
    let mut lines = log_lines(&log);
    assert!(lines.len() >= 10, "the log holds {} records", lines.len());
    // A record in the middle, damaged; the log compressed again, as the
    // deflate stream versions before LZ4 wrote (still read on a resume).
    let mid = lines.len() / 2;
    lines[mid] = r#"{"seq": 7, "kind": "result", "value": {"run_id": 1, "test_co"#.into();
    let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    for l in &lines {
        writeln!(z, "{l}").unwrap();
    }
    let damaged = z.finish().unwrap();
    std::fs::write(&log, &damaged).unwrap();
    let before = count(&pool, "SELECT COUNT(*) FROM result").await;

    let out = crate::support::run(&b, &server, &["run-batch", "--resume", "1"]);
    crate::support::assert_no_panic(&out);
    let err = crate::support::stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    let aside = std::path::PathBuf::from(format!("{}.damaged", log.display()));
    assert!(
        err.contains(&aside.display().to_string())
            && err.contains(&format!("record {} cannot be read", mid + 1)),
        "the error names the record and where the log went: {err}"
    );
    assert!(
        !log.exists(),
        "the damaged log is moved, not left to replay"
    );
    assert_eq!(std::fs::read(&aside).unwrap(), damaged, "kept as it was");
    // Every readable record was written; nothing was sent.
    let after = count(&pool, "SELECT COUNT(*) FROM result").await;
    assert_eq!(after, before + lines.len() as i64 - 1);
    assert_ne!(crate::support::run_row(&b, 1)["status"], "completed");

    // A damaged file of results a run could not write: the same.
    let pending =
        std::path::PathBuf::from(format!("{}.run-1.pending.jsonl", db_path(&b).display()));
    std::fs::write(&pending, "{\"result\": \n").unwrap();
    let store = Store::open(&db_path(&b).display().to_string())
        .await
        .unwrap();
    let e = write_kept(&store, 1).await.unwrap_err().to_string();
    assert!(
        e.contains("pending.jsonl.damaged") && e.contains("record 1 cannot be read"),
        "{e}"
    );
    assert!(!pending.exists());

    // Nothing left to replay: the next resume finishes the run.
    let out = crate::support::run(&b, &server, &["run-batch", "--resume", "1"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        crate::support::stderr(&out)
    );
    assert_eq!(crate::support::run_row(&b, 1)["test_cases"], 2000);
}
