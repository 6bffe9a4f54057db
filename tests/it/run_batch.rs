//! `run-batch` and `run-all` against a mock OpenRouter on 127.0.0.1 (real
//! HTTP, never the real API): what is sent and stored, the reply cache
//! (keyed by request, repeat and endpoint), replies outside the schema, and
//! several models in one command.

use std::sync::atomic::Ordering;

use serde_json::Value;

use crate::support::child::connect;
use crate::support::mock::{completions, ok_reply, sequence_server, triage_server};
use crate::support::{
    KEY, assert_no_key, bench, jsonl, read, run, run_with, runs_json, stderr, stdout,
};

#[tokio::test(flavor = "multi_thread")]
async fn batch_success_stores_verdicts_and_costs() {
    let m = triage_server().await;
    let b = bench();
    let out = run(&b, &m.server, &["-vv", "run-batch", "--all-scenarios"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    assert_no_key(&b, &out);
    let runs = runs_json(&b);
    let r = &runs["runs"][0];
    assert_eq!(r["status"], "completed");
    assert_eq!(r["model"], "test/model");
    assert_eq!(r["test_cases"], 2);
    assert_eq!(r["evaluations"], 2);
    // PT1 (severity 5) flagged -> pass; PT2 (severity -3) not flagged -> pass.
    assert_eq!(r["passed"], 2);
    assert!((r["cost_usd"].as_f64().unwrap() - 0.002).abs() < 1e-9);
    assert!(r["completed_at"].is_string());
    // The request of SPEC §6.
    let reqs = completions(&m.server).await;
    assert_eq!(reqs.len(), 2);
    for req in reqs {
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        assert_eq!(body["model"], "test/model");
        assert_eq!(body["temperature"], 0.0, "models.yml parameters are sent");
        assert_eq!(body["provider"]["require_parameters"], true);
        assert_eq!(body["response_format"]["type"], "json_schema");
        assert_eq!(body["response_format"]["json_schema"]["strict"], true);
        assert_eq!(body["messages"][0]["role"], "user");
        assert_eq!(
            req.headers.get("authorization").unwrap().to_str().unwrap(),
            format!("Bearer {KEY}")
        );
        assert_eq!(
            req.headers.get("x-title").unwrap().to_str().unwrap(),
            "helmbench"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn identical_requests_come_from_cache() {
    let m = triage_server().await;
    let b = bench();
    assert_eq!(
        run(&b, &m.server, &["run-batch", "--all-scenarios"])
            .status
            .code(),
        Some(0)
    );
    // The same batch again: already answered, so no new run (issue 31).
    let out = run(&b, &m.server, &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("test/model: already complete in run 1 (2 results;"),
        "{}",
        stdout(&out)
    );
    assert_eq!(runs_json(&b)["runs"].as_array().unwrap().len(), 1);
    // Scored another way, it is a new run of the same requests: every
    // reply from the cache.
    let out = run(
        &b,
        &m.server,
        &["run-batch", "--all-scenarios", "--blocked-as", "fail"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        m.calls.load(Ordering::SeqCst),
        2,
        "second run must not call the provider"
    );
    let runs = runs_json(&b);
    assert_eq!(runs["runs"][0]["cached_replies"], 2);
    assert_eq!(runs["runs"][0]["cost_usd"], 0.0);
    assert_eq!(runs["runs"][0]["passed"], 2);
    let out = run(
        &b,
        &m.server,
        &["run-batch", "--all-scenarios", "--no-cache"],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(m.calls.load(Ordering::SeqCst), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn repeats_send_every_test_case_again_and_each_repeat_has_its_own_cache_entry() {
    let m = triage_server().await;
    let b = bench();
    let out = run(
        &b,
        &m.server,
        &["run-batch", "--all-scenarios", "--repeats", "3"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        m.calls.load(Ordering::SeqCst),
        6,
        "2 test cases x 3 repeats"
    );
    let runs = runs_json(&b);
    assert_eq!(runs["runs"][0]["planned_test_cases"], 6);
    assert_eq!(runs["runs"][0]["test_cases"], 6);
    assert_eq!(
        runs["runs"][0]["cached_replies"], 0,
        "a repeat must not reuse another's reply"
    );
    let out = read(&b, &["export", "--format", "jsonl"]);
    let mut keys: Vec<(String, i64)> = jsonl(&out)
        .iter()
        .map(|r| {
            (
                r["test_code"].as_str().unwrap().to_string(),
                r["repeat_index"].as_i64().unwrap(),
            )
        })
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            ("P1-B1-S1-C1-PT1", 0),
            ("P1-B1-S1-C1-PT1", 1),
            ("P1-B1-S1-C1-PT1", 2),
            ("P1-B1-S1-C1-PT2", 0),
            ("P1-B1-S1-C1-PT2", 1),
            ("P1-B1-S1-C1-PT2", 2)
        ]
        .map(|(c, r)| (c.to_string(), r))
    );
    // The same repeats again: already answered, nothing sent, no new run.
    let out = run(
        &b,
        &m.server,
        &["run-batch", "--all-scenarios", "--repeats", "3"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("already complete in run 1 (6 results;"),
        "{}",
        stdout(&out)
    );
    assert_eq!(m.calls.load(Ordering::SeqCst), 6);
    assert_eq!(runs_json(&b)["runs"].as_array().unwrap().len(), 1);
    // One repeat more: a new run; each earlier repeat gets its own
    // earlier reply, the new one is sent.
    let out = run(
        &b,
        &m.server,
        &["run-batch", "--all-scenarios", "--repeats", "4"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(m.calls.load(Ordering::SeqCst), 8);
    assert_eq!(runs_json(&b)["runs"][0]["cached_replies"], 6);

    for bad in ["0", "10001"] {
        let out = run(
            &b,
            &m.server,
            &["run-batch", "--all-scenarios", "--repeats", bad],
        );
        assert_eq!(out.status.code(), Some(2), "--repeats {bad}");
        assert!(stderr(&out).contains("--repeats"), "{}", stderr(&out));
    }
    assert_eq!(m.calls.load(Ordering::SeqCst), 8);
}

#[tokio::test(flavor = "multi_thread")]
async fn cached_replies_are_reused_only_for_the_same_endpoint() {
    let local = triage_server().await;
    let real = triage_server().await;
    let b = bench();
    let batch = ["run-batch", "--all-scenarios"];
    let out = run_with(&b, KEY, &local.server.uri(), &batch);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(local.calls.load(Ordering::SeqCst), 2);
    // Same requests, another server: nothing comes from the local replies.
    let out = run_with(&b, KEY, &real.server.uri(), &batch);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        real.calls.load(Ordering::SeqCst),
        2,
        "replies of another endpoint were reused"
    );
    assert_eq!(runs_json(&b)["runs"][0]["cached_replies"], 0);
    // The same server again (its URL spelt with a slash): run 2 answered
    // it all, so no new run; scored another way, a new run reuses its
    // replies.
    let again = format!("{}/", real.server.uri());
    let out = run_with(&b, KEY, &again, &batch);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("already complete in run 2"),
        "{}",
        stdout(&out)
    );
    let out = run_with(
        &b,
        KEY,
        &again,
        &[&batch[..], &["--blocked-as", "fail"]].concat(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(real.calls.load(Ordering::SeqCst), 2);
    assert_eq!(runs_json(&b)["runs"][0]["cached_replies"], 2);

    // Rows written before endpoints were recorded are never reused.
    let p = connect(&b).await.unwrap();
    sqlx::query("UPDATE result SET endpoint = NULL")
        .execute(&p)
        .await
        .unwrap();
    p.close().await;
    let out = run_with(&b, KEY, &real.server.uri(), &batch);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(real.calls.load(Ordering::SeqCst), 4);
    let p = connect(&b).await.unwrap();
    let endpoints: Vec<Option<String>> =
        sqlx::query_scalar("SELECT DISTINCT endpoint FROM result ORDER BY endpoint")
            .fetch_all(&p)
            .await
            .unwrap();
    assert_eq!(
        endpoints,
        vec![
            None,
            Some(format!("{}/chat/completions", real.server.uri()))
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn prose_wrapped_json_passes_and_invalid_json_is_a_format_failure() {
    let server = sequence_server(vec![
        ok_reply("Here is my answer: {\"category\":\"HANDOFF\",\"response\":\"x\"} Take care."),
        ok_reply("{\"category\":\"MAYBE\",\"response\":\"x\"}"),
    ])
    .await;
    let b = bench();
    let out = run(
        &b,
        &server,
        &["run-batch", "--all-scenarios", "--concurrency", "1"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["test_cases"], 2);
    assert_eq!(r["passed"], 1);
    assert_eq!(r["format_failures"], 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn run_all_and_several_models() {
    let m = triage_server().await;
    let b = bench();
    let out = run(&b, &m.server, &["run-all", "--models", "a/one,b/two"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("=== P1-B1-S1-C1-PT1 · a/one ==="), "{text}");
    assert!(text.contains("=== P1-B1-S1-C1-PT1 · b/two ==="), "{text}");
    assert!(
        text.contains("1 scenarios, 2 test cases"),
        "list runs last: {text}"
    );
    let runs = runs_json(&b);
    let runs = runs["runs"].as_array().unwrap();
    let kinds: Vec<(String, String)> = runs
        .iter()
        .rev()
        .map(|r| {
            (
                r["kind"].as_str().unwrap().into(),
                r["model"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("single".into(), "a/one".into()),
            ("single".into(), "b/two".into()),
            ("batch".into(), "a/one".into()),
            ("batch".into(), "b/two".into())
        ]
    );
    assert!(runs.iter().all(|r| r["status"] == "completed"));
    let bodies = completions(&m.server).await;
    let models: std::collections::BTreeSet<String> = bodies
        .iter()
        .map(|r| {
            serde_json::from_slice::<Value>(&r.body).unwrap()["model"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(models.into_iter().collect::<Vec<_>>(), ["a/one", "b/two"]);
}
