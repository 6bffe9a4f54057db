//! The performance harnesses (`bench/run.sh`, `bench/compare.sh`) still run:
//! their generators, mock server and bare client (the examples, compiled in
//! here) on a tiny size, with a dry-run, a batch and a `compare` of the real
//! binary. Checks that it works, never
//! how fast: timings belong in BENCHMARKS.md, not in tests.

use std::time::Duration;

use crate::support::{Helmbench, gen_bench, gen_compare_db, json, stderr, stdout};

#[allow(dead_code)]
#[path = "../../examples/bare_client.rs"]
mod bare_client;
#[allow(dead_code)]
#[path = "../../examples/mock_openrouter.rs"]
mod mock_openrouter;

/// helmbench in `dir` on the benchmark generated at `dir/bench`.
fn helmbench(dir: &std::path::Path) -> std::process::Command {
    Helmbench::in_dir(dir).benchmark(dir.join("bench")).std()
}

#[test]
fn harness_runs_on_a_tiny_benchmark() {
    let tmp = tempfile::tempdir().unwrap();
    let shape = gen_bench::Shape {
        scenarios: 3,
        conditions: 2,
        user_contexts: 1,
        perturbations: 2,
    };
    let cases = gen_bench::generate(&tmp.path().join("bench"), shape).unwrap();
    assert_eq!(cases, 3 * 2 * (1 + 1) * 2);

    // The generated content is valid and every test case composes.
    let out = helmbench(tmp.path())
        .args([
            "run-batch",
            "--all-scenarios",
            "--dry-run",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["test_cases"], cases);
    assert_eq!(v["unique_prompts"], cases);
    assert_eq!(v["content_errors"].as_array().unwrap().len(), 0);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (addr, stats) = rt
        .block_on(mock_openrouter::start(0, Duration::from_millis(1)))
        .unwrap();
    let base = format!("http://{addr}");

    // A batch against the mock stores every result.
    let db = tmp.path().join("bench.db");
    let out = helmbench(tmp.path())
        .env("OPENROUTER_API_KEY", "bench")
        .env("OPENROUTER_BASE_URL", &base)
        .args(["-q", "--database-url"])
        .arg(&db)
        .args([
            "run-batch",
            "--all-scenarios",
            "--concurrency",
            "4",
            "--no-cache",
            "--max-attempts",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("completed"), "{}", stdout(&out));
    assert_eq!(stats.requests(), cases as u64);
    assert!(stats.window_s() > 0.0);
    let out = helmbench(tmp.path())
        .args(["--database-url"])
        .arg(&db)
        .args(["runs", "--format", "json"])
        .output()
        .unwrap();
    let runs = json(&out);
    assert_eq!(runs["runs"][0]["test_cases"], cases);
    assert_eq!(runs["runs"][0]["status"], "completed");

    // The bare client sends the same requests and gets every reply.
    stats.reset();
    let bodies = bare_client::bodies(&tmp.path().join("bench"), cases).unwrap();
    assert_eq!(bodies.len(), cases);
    assert!(bodies[0].contains("\"response_format\""));
    let floor = rt.block_on(bare_client::run(&base, bodies, 4));
    assert_eq!((floor.requests, floor.errors), (cases, 0));
    assert_eq!(stats.requests(), cases as u64);
}

/// The `compare` harness (`bench/compare.sh`) writes runs that `compare`
/// reads: every model's run complete and every test case counted.
#[tokio::test(flavor = "multi_thread")]
async fn compare_harness_writes_runs_compare_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let shape = gen_bench::Shape {
        scenarios: 6,
        conditions: 2,
        user_contexts: 1,
        perturbations: 2,
    };
    gen_compare_db::run(tmp.path(), 3, shape).await.unwrap();
    let out = Helmbench::in_dir(tmp.path())
        .benchmark("bench")
        .database("compare.db")
        .std()
        .args(["compare", "--format", "json", "--resamples", "100"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["leaderboard"].as_array().unwrap().len(), 3);
    assert_eq!(v["test_cases"], shape.test_cases());
    assert_eq!(v["pairs"].as_array().unwrap().len(), 3);
}
