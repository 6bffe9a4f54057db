//! A provider that fails, through a mock on 127.0.0.1: retried statuses and
//! timeouts, stops that say why (401, spending limits, many errors in a
//! row) and resume, errors stored by type, 300 test cases under injected
//! faults, reply bodies past the size limit and costs that are not usable
//! numbers. Nothing answered is lost, nothing crashes, and a resume sends
//! only what is missing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::support::child::{assert_exact_results, connect, count, open_db, run_to_end};
use crate::support::mock::{
    Shared, completion, completions, fixed_reply_server, mock_server, ok_reply, prompt_of,
    sequence_server, served_reply, triage_reply, triage_server,
};
use crate::support::{
    FLIP_EVERY, KEY, assert_no_key, assert_no_panic, bench, bench_of, grid_bench, json as out_json,
    jsonl, online, read, run, run_in_order, run_with, runs_json, stderr, stdout, triage_content,
};

#[tokio::test(flavor = "multi_thread")]
async fn transient_failures_are_retried() {
    let server = sequence_server(vec![
        ResponseTemplate::new(429)
            .insert_header("Retry-After", "0")
            .set_body_json(json!({"error": {"code": 429, "message": "rate limited"}})),
        ResponseTemplate::new(500)
            .set_body_json(json!({"error": {"code": "internal", "message": "boom"}})),
        ResponseTemplate::new(200)
            .set_body_json(json!({"error": {"code": 502, "message": "upstream"}})),
        ok_reply(""),
        ok_reply("```json\n{\"category\":\"HANDOFF\",\"response\":\"x\"}\n```"),
    ])
    .await;
    let b = bench();
    let out = run(
        &b,
        &server,
        &[
            "run-batch",
            "--scenario",
            "P1-B1-S1-C1-PT1",
            "--concurrency",
            "1",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["passed"], 1, "{r}");
    assert_eq!(r["format_failures"], 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timed_out_request_is_retried() {
    let server = sequence_server(vec![
        ok_reply("{\"category\":\"HANDOFF\",\"response\":\"x\"}")
            .set_delay(std::time::Duration::from_secs(3)),
        ok_reply("{\"category\":\"HANDOFF\",\"response\":\"x\"}"),
    ])
    .await;
    let b = bench();
    let out = run(
        &b,
        &server,
        &[
            "run-batch",
            "--scenario",
            "P1-B1-S1-C1-PT1",
            "--request-timeout",
            "1",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["passed"], 1);
    assert_eq!(completions(&server).await.len(), 2);
}

/// Fails the risky test case with 500 while `broken` is set; answers the rest.
struct BrokenForOne {
    broken: Arc<std::sync::atomic::AtomicBool>,
    calls: Arc<AtomicUsize>,
}

impl Respond for BrokenForOne {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.broken.load(Ordering::SeqCst) && prompt_of(req).contains("can't go on") {
            return ResponseTemplate::new(500)
                .set_body_json(json!({"error": {"code": 500, "message": "boom"}}));
        }
        ok_reply(r#"{"category":"HANDOFF","response":"Please reach out."}"#)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_test_case_left_without_a_reply_fails_the_command_until_resumed() {
    let server = mock_server().await;
    let broken = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let calls = Arc::new(AtomicUsize::new(0));
    Mock::given(method("POST"))
        .and(path("/chat/completions"))
        .respond_with(BrokenForOne {
            broken: broken.clone(),
            calls: calls.clone(),
        })
        .mount(&server)
        .await;
    let b = bench();
    let out = run(
        &b,
        &server,
        &["run-batch", "--all-scenarios", "--max-attempts", "2"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("run 1: 1 test case got no reply from the provider")
            && stderr(&out).contains("resume with: helmbench run-batch --resume 1"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "two attempts for one, one for the other"
    );
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["status"], "completed", "every test case has a row");
    assert_eq!(r["provider_errors"], 1);

    broken.store(false, Ordering::SeqCst);
    let out = run(&b, &server, &["run-batch", "--resume", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("no reply"), "{}", stderr(&out));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        4,
        "only the missing reply is sent again"
    );
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["provider_errors"], 0);
    assert_eq!(r["test_cases"], 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn unauthorized_stops_with_a_clear_message() {
    let server = sequence_server(vec![ResponseTemplate::new(401).set_body_json(
        json!({"error": {"code": 401, "message": "No auth credentials found"}}),
    )])
    .await;
    let b = bench();
    let out = run(&b, &server, &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("OPENROUTER_API_KEY"),
        "{}",
        stderr(&out)
    );
    assert_no_key(&b, &out);
    assert_eq!(runs_json(&b)["runs"][0]["status"], "interrupted");
}

#[tokio::test(flavor = "multi_thread")]
async fn out_of_credits_stops_cleanly_and_resume_completes() {
    let server = sequence_server(vec![
        ok_reply("{\"category\":\"HANDOFF\",\"response\":\"x\"}"),
        ResponseTemplate::new(402)
            .set_body_json(json!({"error": {"code": 402, "message": "Insufficient credits"}})),
    ])
    .await;
    let b = bench();
    let out = run(
        &b,
        &server,
        &["run-batch", "--all-scenarios", "--concurrency", "1"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--resume 1"), "{}", stderr(&out));
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["status"], "interrupted");
    assert_eq!(r["test_cases"], 1);

    let healthy = triage_server().await;
    let out = run(&b, &healthy.server, &["run-batch", "--resume", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        healthy.calls.load(Ordering::SeqCst),
        1,
        "only the missing test case is sent"
    );
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["status"], "completed");
    assert_eq!(r["test_cases"], 2);
}

/// A key whose spending limit is reached fails every request with 403:
/// the run stops after a bounded number instead of recording them all.
#[tokio::test(flavor = "multi_thread")]
async fn many_provider_errors_in_a_row_stop_the_run() {
    let server = sequence_server(vec![ResponseTemplate::new(403).set_body_json(
        // No limit_source: a 403 that names the key limit stops the run at
        // once (spending_limits_stop_the_run_cleanly_saying_which); this one only repeats.
        json!({"error": {"code": 403, "message": "Key limit exceeded"}}),
    )])
    .await;
    let b = bench();
    let perts: String = (1..=40)
        .map(|i| format!("# PT{i}\n## User input\nmessage {i}\n\n"))
        .collect();
    b.file("scenarios/P1-B1-S1/perturbations.md", perts);
    let out = run(
        &b,
        &server,
        &["run-batch", "--all-scenarios", "--concurrency", "1"],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["status"], "interrupted");
    assert_eq!(r["provider_errors"], 25);
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("Key limit exceeded"),
        "{r}"
    );
    assert_eq!(completions(&server).await.len(), 25, "403 is never retried");
}

/// Answers every completion with `status` and `body` (and Retry-After 0
/// when `retry_after`), then with a triage reply once `fail_first` calls
/// have failed (`usize::MAX`: always fail).
struct Failing {
    status: u16,
    body: Value,
    retry_after: bool,
    fail_first: usize,
    n: Arc<AtomicUsize>,
}

impl Respond for Failing {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let i = self.n.fetch_add(1, Ordering::SeqCst);
        if i >= self.fail_first {
            return served_reply(req, "test/model");
        }
        let t = ResponseTemplate::new(self.status).set_body_json(self.body.clone());
        if self.retry_after {
            t.insert_header("retry-after", "0")
        } else {
            t
        }
    }
}

async fn failing_server(
    status: u16,
    body: Value,
    retry_after: bool,
    fail_first: usize,
) -> (MockServer, Arc<AtomicUsize>) {
    let server = mock_server().await;
    let n = Arc::new(AtomicUsize::new(0));
    Mock::given(method("POST"))
        .and(path("/chat/completions"))
        .respond_with(Failing {
            status,
            body,
            retry_after,
            fail_first,
            n: n.clone(),
        })
        .mount(&server)
        .await;
    (server, n)
}

fn limit_error(limit_source: &str, reason: Option<&str>) -> Value {
    let mut meta = json!({"limit_source": limit_source});
    if let Some(r) = reason {
        meta["reason"] = json!(r);
    }
    json!({"error": {"code": 402, "message": "Insufficient credits", "metadata": meta}})
}

#[tokio::test(flavor = "multi_thread")]
async fn spending_limits_stop_the_run_cleanly_saying_which() {
    for (status, source, reason, says) in [
        (
            402,
            "openrouter_key_limit",
            None,
            "the API key's credit limit is spent",
        ),
        (
            403,
            "openrouter_key_limit",
            None,
            "the API key's credit limit is spent",
        ),
        (
            402,
            "openrouter_credits",
            None,
            "the account's balance cannot cover the request",
        ),
        (
            402,
            "openrouter_credits",
            Some("weight_exceeds_budget"),
            "lower `max_tokens` for this model in models.yml",
        ),
    ] {
        let b = bench();
        let (server, n) =
            failing_server(status, limit_error(source, reason), false, usize::MAX).await;
        let out = run(
            &b,
            &server,
            &["run-batch", "--all-scenarios", "--concurrency", "1"],
        );
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let all = format!("{}{}", stdout(&out), stderr(&out));
        assert!(all.contains(says), "{source}: {all}");
        assert!(!all.contains(KEY));
        // Not retried: one request, and the run stopped there.
        assert_eq!(n.load(Ordering::SeqCst), 1, "{source}");
        let runs = runs_json(&b);
        assert_eq!(runs["runs"][0]["status"], "interrupted");
        assert!(runs["runs"][0]["message"].as_str().unwrap().contains(says));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_in_flight_budget_is_transient_and_retried() {
    let b = bench();
    let body = limit_error(
        "openrouter_in_flight_budget",
        Some("in_flight_budget_exhausted"),
    );
    let (server, n) = failing_server(402, body, true, 1).await;
    let out = run(
        &b,
        &server,
        &["run-batch", "--all-scenarios", "--concurrency", "1"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // One 402, then both test cases answered.
    assert_eq!(n.load(Ordering::SeqCst), 3);
    assert_eq!(runs_json(&b)["runs"][0]["status"], "completed");
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_errors_are_stored_and_counted_by_type() {
    let b = bench();
    let body = json!({"error": {"code": 503, "message": "Provider returned error",
        "metadata": {"error_type": "provider_overloaded", "provider_code": 529, "provider_name": "ProvA"}}});
    let (server, _) = failing_server(503, body, false, usize::MAX).await;
    let out = run(
        &b,
        &server,
        &["run-batch", "--all-scenarios", "--max-attempts", "1"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let runs = runs_json(&b);
    assert_eq!(
        runs["runs"][0]["routing"]["provider_errors_by_type"],
        json!({"provider_overloaded": 2})
    );
    let out = read(&b, &["runs"]);
    assert!(
        stderr(&out).contains("run 1: provider errors by type: provider_overloaded ×2"),
        "{}",
        stderr(&out)
    );
    let out = read(&b, &["export"]);
    let rows = jsonl(&out);
    assert_eq!(rows.len(), 2, "{}", stderr(&out));
    for r in rows {
        assert_eq!(r["error_kind"], "provider");
        assert_eq!(r["error_type"], "provider_overloaded");
        assert_eq!(r["provider_code"], "529");
    }
    let out = read(&b, &["report", "--run-id", "1", "--format", "json"]);
    assert_eq!(
        out_json(&out)["routing"]["provider_errors_by_type"]["provider_overloaded"],
        2
    );
}

/// Fails 30 % of first attempts (a third each: 429 with Retry-After: 0,
/// 500, an error inside a 200 body) and wraps 20 % of replies in ```json
/// fences, chosen by the prompt so every fault is deterministic.
struct Faulty {
    attempts: Mutex<HashMap<String, usize>>,
    faults: AtomicUsize,
    fenced: AtomicUsize,
    calls: AtomicUsize,
}

fn bucket(prompt: &str) -> u64 {
    // FNV-1a: stable across runs, spread well enough over the prompts.
    prompt.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    }) % 100
}

impl Respond for Shared<Faulty> {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let this = &self.0;
        this.calls.fetch_add(1, Ordering::SeqCst);
        let p = prompt_of(req);
        let attempt = {
            let mut m = this.attempts.lock().unwrap();
            let n = m.entry(p.clone()).or_insert(0);
            *n += 1;
            *n
        };
        let k = bucket(&p);
        if attempt == 1 && k < 30 {
            this.faults.fetch_add(1, Ordering::SeqCst);
            return match k % 3 {
                0 => ResponseTemplate::new(429)
                    .insert_header("Retry-After", "0")
                    .set_body_json(json!({"error": {"code": 429, "message": "rate limited"}})),
                1 => ResponseTemplate::new(500)
                    .set_body_json(json!({"error": {"code": "internal", "message": "boom"}})),
                _ => ResponseTemplate::new(200).set_body_json(
                    json!({"error": {"code": 502, "message": "upstream overloaded"}}),
                ),
            };
        }
        let mut content = triage_content(&p);
        if (30..50).contains(&k) {
            this.fenced.fetch_add(1, Ordering::SeqCst);
            content = format!("```json\n{content}\n```");
        }
        ResponseTemplate::new(200).set_body_json(completion(&content, 0.001))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn three_hundred_cases_under_provider_faults() {
    let server = crate::support::mock::mock_server().await;
    let faulty = Arc::new(Faulty {
        attempts: Mutex::new(HashMap::new()),
        faults: AtomicUsize::new(0),
        fenced: AtomicUsize::new(0),
        calls: AtomicUsize::new(0),
    });
    Mock::given(method("POST"))
        .and(path("/chat/completions"))
        .respond_with(Shared(faulty.clone()))
        .mount(&server)
        .await;
    let b = grid_bench(3, 100);
    let out = run_to_end(
        &b,
        &server.uri(),
        &["run-batch", "--all-scenarios", "--concurrency", "16"],
    )
    .await;
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let faults = faulty.faults.load(Ordering::SeqCst);
    let fenced = faulty.fenced.load(Ordering::SeqCst);
    // The prompts spread over the buckets: roughly 30 % and 20 %.
    assert!((60..=120).contains(&faults), "faults injected: {faults}");
    assert!((30..=90).contains(&fenced), "fenced replies: {fenced}");
    assert_eq!(faulty.calls.load(Ordering::SeqCst), 300 + faults);

    let pool = open_db(&b).await;
    assert_exact_results(&pool, 1, 300).await;
    // Each faulted request took exactly one retry, and nothing else did.
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM result WHERE attempts = 2").await,
        faults as i64
    );
    assert_eq!(
        count(
            &pool,
            "SELECT COUNT(*) FROM result WHERE attempts NOT IN (1, 2)"
        )
        .await,
        0
    );
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["status"], "completed");
    assert_eq!(r["test_cases"], 300);
    let expected = (1..=100usize)
        .filter(|i| !i.is_multiple_of(FLIP_EVERY))
        .count()
        * 3;
    assert_eq!(r["passed"], expected);
    assert_eq!(r["format_failures"], 0);
    assert_eq!(r["provider_errors"], 0);
    eprintln!(
        "faults injected and survived: {faults} failed first attempts, {fenced} fenced replies"
    );
}

/// A server that answers every request with 200 and a chunked body that
/// never ends (until the client hangs up), counting requests.
async fn endless_body_server() -> (String, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let c = c.clone();
            tokio::spawn(async move {
                // Read the request head and body (small) before answering.
                let mut buf = vec![0u8; 64 * 1024];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                // Completions only: the preflight's GETs get the same endless body.
                if got.starts_with(b"POST") {
                    c.fetch_add(1, Ordering::SeqCst);
                }
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                if sock.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = format!("{:x}\r\n{}\r\n", 64 * 1024, "x".repeat(64 * 1024));
                while sock.write_all(chunk.as_bytes()).await.is_ok() {}
            });
        }
    });
    (format!("http://{addr}"), calls)
}

#[tokio::test(flavor = "multi_thread")]
async fn reply_bodies_over_the_limit_are_abandoned_and_retried() {
    // An endless body: read whole, it would fill memory until the timeout.
    let (uri, calls) = endless_body_server().await;
    let b = bench();
    let started = std::time::Instant::now();
    let out = online(&b, KEY, &uri)
        .env("HELMBENCH_MAX_REPLY_BYTES", "1048576")
        .args([
            "run-batch",
            "--all-scenarios",
            "--max-attempts",
            "2",
            "--request-timeout",
            "60",
            // The model list is endless too: not priced, started anyway.
            "--yes",
        ])
        .output()
        .unwrap();
    assert_no_panic(&out);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "the body was read until the timeout ({:?})",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        4,
        "two test cases, two attempts each"
    );
    let p = connect(&b).await.unwrap();
    let errors: Vec<String> =
        sqlx::query_scalar("SELECT error FROM result WHERE error_kind = 'provider'")
            .fetch_all(&p)
            .await
            .unwrap();
    assert_eq!(errors.len(), 2);
    for e in errors {
        assert!(
            e.contains("1048576-byte limit") && e.contains("gave up after 2 attempts"),
            "{e}"
        );
    }

    // With a Content-Length over the limit, the body is not read at all;
    // under the limit, the reply is used.
    let mut big = triage_reply(json!(0.001));
    big["padding"] = json!("y".repeat(2 * 1024 * 1024));
    let (server, calls) = fixed_reply_server(ResponseTemplate::new(200).set_body_json(big)).await;
    let b = bench();
    let out = run_with(
        &b,
        KEY,
        &server.uri(),
        &[
            "run-batch",
            "--all-scenarios",
            "--max-attempts",
            "3",
            "--max-reply-bytes",
            "1048576",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(calls.load(Ordering::SeqCst), 6);
    // Retries are logged at -v now; the stored error names the cap.
    let rows = jsonl(&read(&b, &["export", "--format", "jsonl"]));
    assert_eq!(rows.len(), 2);
    for r in &rows {
        let e = r["error"].as_str().unwrap_or_default();
        assert!(e.contains("of 2097"), "{r}");
    }
    // The default limit (16 MiB) takes the 2 MB reply.
    let out = run_with(&b, KEY, &server.uri(), &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let runs = runs_json(&b);
    assert_eq!(runs["runs"][0]["test_cases"], 2);
    assert_eq!(runs["runs"][0]["provider_errors"], 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn unusable_costs_are_recorded_as_unknown_and_never_fail_a_write() {
    let costs = vec![
        json!("NaN"),
        json!(-0.5),
        json!(1e300),
        json!("inf"),
        json!("-Infinity"),
        json!("twelve cents"),
        json!({"usd": 1}),
        json!(5000.0),
        json!(0.001),
        json!("0.002"),
        json!(null),
        json!(0.0),
    ];
    // One reply per cost, in order.
    let server = sequence_server(
        costs
            .iter()
            .map(|c| ResponseTemplate::new(200).set_body_json(triage_reply(c.clone())))
            .collect(),
    )
    .await;
    let b = bench_of(costs.len());
    let out = run_in_order(&b, KEY, &server);
    assert_no_panic(&out);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(
        err.matches("recorded as unknown").count(),
        8,
        "one warning per unusable cost:\n{err}"
    );
    let runs = runs_json(&b);
    assert_eq!(runs["runs"][0]["test_cases"], costs.len());
    assert_eq!(runs["runs"][0]["status"], "completed");
    let c = read(&b, &["costs", "--format", "json"]);
    assert_eq!(c.status.code(), Some(0), "{}", stderr(&c));
    let c = out_json(&c);
    assert_eq!(c["unknown_cost_replies"], 8, "{c}");
    assert_eq!(c["runs"][0]["unknown_cost_replies"], 8);
    let total = c["total_cost_usd"].as_f64().unwrap();
    assert!((total - 0.003).abs() < 1e-12, "{total}");
    let text = stdout(&read(&b, &["costs"]));
    assert!(text.contains("unknown cost: 8 replies"), "{text}");
    let p = connect(&b).await.unwrap();
    let stored: Vec<(f64, bool)> =
        sqlx::query_as("SELECT cost_usd, cost_unknown FROM result ORDER BY id")
            .fetch_all(&p)
            .await
            .unwrap();
    assert_eq!(stored.iter().filter(|(_, u)| *u).count(), 8);
    assert!(
        stored
            .iter()
            .all(|(c, _)| c.is_finite() && *c >= 0.0 && *c < 1.0)
    );
}

/// Runs `script` with `sh` in a mount namespace of its own (as root, or in
/// a user namespace where the kernel allows one), where it can mount a
/// small tmpfs: a disk that fills and empties without touching the host.
/// `$@` in the script is `helmbench` with `cmd`'s arguments and environment.
fn in_own_mounts(cmd: std::process::Command, script: &str) -> std::process::Output {
    let probe = |flags: &str| {
        std::process::Command::new("unshare")
            .args([
                flags,
                "sh",
                "-c",
                "d=$(mktemp -d) && mount -t tmpfs -o size=1m tmpfs \"$d\"",
            ])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let flags = ["-m", "-rm"]
        .into_iter()
        .find(|f| probe(f))
        .expect("this test mounts a small tmpfs in a mount namespace of its own (`unshare -m` as root, or `unshare -rm`): neither works here");
    let mut sh = std::process::Command::new("unshare");
    sh.args([flags, "sh", "-c", script, "sh"])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    if let Some(dir) = cmd.get_current_dir() {
        sh.current_dir(dir);
    }
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    sh.output().unwrap()
}

/// A disk that fills during a run and then has room again: the writer
/// retries with the results kept and, once space is back, writes them and
/// the run completes (issue 41, item 14: every later write failed with
/// "begin_with at non-zero transaction depth" until the run stopped).
#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_freed_within_the_retry_window_lets_the_run_complete() {
    let b = bench_of(120);
    let server = crate::support::mock::slow_triage_server(60).await;
    let disk = b.dir.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let cmd = b
        .helmbench()
        .database(disk.join("h.db"))
        .provider(KEY, &server.uri())
        .std();
    // The run starts on an empty 16 MB disk; a second in, a file takes
    // every free byte, and two seconds later it goes. The database is
    // copied out before the namespace (and its tmpfs) ends.
    let script = r#"
        d=disk; mount -t tmpfs -o size=16m tmpfs "$d" || exit 90
        "$@" run-batch --all-scenarios --concurrency 4 --write-wait-secs 20 &
        pid=$!
        sleep 1
        dd if=/dev/zero of="$d/filler" bs=64k 2>/dev/null
        echo "filled: $(df -k "$d" | tail -1)" >&2
        sleep 2
        rm -f "$d/filler"
        wait $pid; rc=$?
        cp "$d"/h.db* . 2>/dev/null
        exit $rc
    "#;
    let out = in_own_mounts(cmd, script);
    assert_no_panic(&out);
    let err = stderr(&out);
    assert!(err.contains("filled:"), "the disk never filled: {err}");
    assert!(
        err.contains("database or disk is full"),
        "the full disk is named while it lasts: {err}"
    );
    assert!(!err.contains("transaction depth"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
    let r = crate::support::run_row(&b, 1);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["test_cases"], 120, "{r}");
}
