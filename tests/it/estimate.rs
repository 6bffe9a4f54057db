//! `estimate` and run-batch's preflight, against a mock OpenRouter: prices
//! and supported parameters come from `GET /models`, the key's limit from
//! `GET /key`. A run past `--max-cost` or the key's limit, or naming a model
//! or judge that is unknown or cannot answer in a JSON schema, is refused
//! before any request is sent; without a model list nothing is priced.

use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use crate::support::mock::{
    MOCK_COMPLETION_PRICE, MOCK_MODELS, MOCK_PROMPT_PRICE, catalog_entry, completions,
    rerouting_server, server_with,
};
use crate::support::{Bench, bench, json as out_json, jsonl, run, runs_json, stderr, stdout};

/// helmbench without a key, offline: nothing listens on port 9.
fn offline(b: &Bench, args: &[&str]) -> std::process::Output {
    b.cmd()
        .env("OPENROUTER_BASE_URL", "http://127.0.0.1:9")
        .args(args)
        .output()
        .unwrap()
}

/// Expected tokens of the composed prompts and their schemas, counted here
/// from `helmbench prompts` (the text sent): [chars / 5, chars / 3].
fn expected_prompt_tokens(b: &Bench) -> (u64, u64, usize) {
    let out = b
        .cmd()
        .args(["prompts", "--format", "jsonl"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let mut chars = 0usize;
    let rows = jsonl(&out);
    for r in &rows {
        chars += r["prompt"].as_str().unwrap().chars().count();
        if !r["response_format"].is_null() {
            chars += r["response_format"].to_string().chars().count();
        }
    }
    (
        (chars as f64 / 5.0).floor() as u64,
        (chars as f64 / 3.0).ceil() as u64,
        rows.len(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn estimate_counts_requests_tokens_and_prices_from_the_catalog() {
    let b = bench();
    b.file(
        "models.yml",
        "models:\n  - id: test/model\n    max_tokens: 800\n",
    );
    let (server, n) = rerouting_server().await;
    let (lo_tokens, hi_tokens, cases) = expected_prompt_tokens(&b);
    assert_eq!(cases, 2);
    // No key needed: the catalog is public.
    let out = b
        .cmd()
        .env("OPENROUTER_BASE_URL", server.uri())
        .args([
            "estimate",
            "--all-scenarios",
            "--repeats",
            "3",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = out_json(&out);
    let m = &v["estimate"]["models"][0];
    assert_eq!(m["model"], "test/model");
    assert_eq!(m["requests"], 6);
    assert_eq!(m["judge_requests"], json!([0, 0]));
    // 3 repeats of each prompt.
    let (lo, hi) = (
        m["prompt_tokens"][0].as_u64().unwrap(),
        m["prompt_tokens"][1].as_u64().unwrap(),
    );
    assert!(
        lo.abs_diff(3 * lo_tokens) <= 3 && hi.abs_diff(3 * hi_tokens) <= 3,
        "{m}"
    );
    // max_tokens 800 is the high end; a quarter of it the low end (no stored replies).
    assert_eq!(m["completion_tokens"], json!([6 * 200, 6 * 800]));
    // Priced at 1 and 2 USD per million tokens.
    let cost = m["cost_usd"].as_array().unwrap();
    let expect_hi = hi as f64 * MOCK_PROMPT_PRICE + 4800.0 * MOCK_COMPLETION_PRICE;
    let expect_lo = lo as f64 * MOCK_PROMPT_PRICE + 1200.0 * MOCK_COMPLETION_PRICE;
    assert!((cost[1].as_f64().unwrap() - expect_hi).abs() < 1e-5, "{m}");
    assert!((cost[0].as_f64().unwrap() - expect_lo).abs() < 1e-5, "{m}");
    assert_eq!(v["priced"], true);
    assert_eq!(
        n.load(Ordering::SeqCst),
        0,
        "an estimate sends no completion"
    );

    // After a run, the stored replies' mean (20 tokens) is the low end.
    let out = run(&b, &server, &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = b
        .cmd()
        .env("OPENROUTER_BASE_URL", server.uri())
        .arg("--database-url")
        .arg(b.dir.path().join("h.db"))
        .args(["estimate", "--all-scenarios"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("mean of 2 stored replies (20) to max_tokens 800"),
        "{text}"
    );
    assert!(text.contains("total: $"), "{text}");
    assert!(text.contains("how: prompt tokens"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn run_batch_refuses_past_max_cost_before_any_request_unless_yes() {
    let b = bench();
    let (server, n) = rerouting_server().await;
    let out = run(
        &b,
        &server,
        &["run-batch", "--all-scenarios", "--max-cost", "0.000001"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("exceeds --max-cost $0.0000"), "{err}");
    assert!(err.contains("upper end $"), "{err}");
    assert!(
        err.contains("Nothing was sent") && err.contains("--yes"),
        "{err}"
    );
    assert_eq!(n.load(Ordering::SeqCst), 0);
    assert!(completions(&server).await.is_empty());
    // No run was created.
    assert_eq!(runs_json(&b)["runs"].as_array().unwrap().len(), 0);

    let out = run(
        &b,
        &server,
        &[
            "run-batch",
            "--all-scenarios",
            "--max-cost",
            "0.000001",
            "--yes",
        ],
    );
    assert!(
        stderr(&out).contains("--yes: starting anyway"),
        "{}",
        stderr(&out)
    );
    assert!(n.load(Ordering::SeqCst) >= 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn run_batch_refuses_past_the_keys_remaining_limit() {
    let b = bench();
    let catalog = MOCK_MODELS.iter().map(|m| catalog_entry(m, true)).collect();
    let (server, n) = server_with(
        Some(catalog),
        json!({"limit": 5.0, "limit_remaining": 0.0000005, "usage": 4.99}),
    )
    .await;
    let out = run(&b, &server, &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("exceeds the key's remaining limit $0.0000"),
        "{err}"
    );
    assert!(
        err.contains("key: $0.0000 left of its $5.0000 limit"),
        "{err}"
    );
    assert_eq!(n.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_models_and_models_without_structured_outputs_are_refused_before_sending() {
    let b = bench();
    let (server, n) = rerouting_server().await;
    let out = run(
        &b,
        &server,
        &[
            "run-batch",
            "--all-scenarios",
            "--models",
            "nope/missing",
            "--yes",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("model `nope/missing` is not in OpenRouter's model list"),
        "{}",
        stderr(&out)
    );
    assert_eq!(n.load(Ordering::SeqCst), 0);

    // The model cannot answer in a JSON schema: refused for a deterministic scenario.
    let catalog = vec![
        catalog_entry("test/model", false),
        catalog_entry("judge/model", true),
    ];
    refused(
        &b,
        catalog,
        &["run-batch", "--all-scenarios"],
        "model `test/model` does not support structured outputs",
    )
    .await;
}

/// run-batch against a mock listing `catalog`: refused (exit 2) saying
/// `says`, before any completion is sent.
async fn refused(b: &Bench, catalog: Vec<Value>, args: &[&str], says: &str) {
    let (server, n) = server_with(Some(catalog), json!({"limit": null})).await;
    let out = run(b, &server, args);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains(says), "{}", stderr(&out));
    assert_eq!(n.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_judge_without_structured_outputs_is_refused() {
    let catalog = vec![
        catalog_entry("test/model", true),
        catalog_entry("google/gemini-2.5-flash", false),
    ];
    refused(
        &Bench::bundled(),
        catalog,
        &["run-batch", "--all-scenarios", "--models", "test/model"],
        "judge `google/gemini-2.5-flash` (marking_model of models.yml, or --judges) does not support structured outputs",
    )
    .await;
}

/// Every judge of a `--judges` panel is checked, not models.yml's judge.
#[tokio::test(flavor = "multi_thread")]
async fn every_judge_of_a_panel_is_checked_before_sending() {
    let catalog = vec![
        catalog_entry("test/model", true),
        catalog_entry("google/gemini-2.5-flash", true),
        catalog_entry("judge/a", true),
    ];
    refused(
        &Bench::bundled(),
        catalog,
        &[
            "run-batch",
            "--all-scenarios",
            "--models",
            "test/model",
            "--judges",
            "judge/a,judge/missing",
        ],
        "judge `judge/missing` (marking_model of models.yml, or --judges) is not in OpenRouter's model list",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_model_list_the_estimate_cannot_price_and_the_run_needs_yes() {
    let b = bench();
    let out = offline(&b, &["estimate", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("could not price"), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("run-batch would refuse without --yes"),
        "{}",
        stdout(&out)
    );

    // A server without a model list: the run is not started...
    let (server, n) = server_with(None, json!({"limit": null})).await;
    let out = run(&b, &server, &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("could not price the run"),
        "{}",
        stderr(&out)
    );
    assert_eq!(n.load(Ordering::SeqCst), 0);
    // ...unless --yes.
    let out = run(&b, &server, &["run-batch", "--all-scenarios", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(n.load(Ordering::SeqCst), 2);
}

#[test]
fn a_dry_run_without_a_key_needs_no_network() {
    let out = offline(&Bench::bundled(), &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("dry run"), "{}", stdout(&out));
}

/// `estimate --format json`'s first model with the catalog's `pricing`
/// given `key: value` on top of the mock's prices (nothing more when None).
async fn estimate_priced(key: &str, value: Option<&'static str>) -> Value {
    let b = bench();
    b.file(
        "models.yml",
        "models:\n  - id: test/model\n    max_tokens: 800\n",
    );
    let mut entry = crate::support::mock::catalog_entry("test/model", true);
    if let Some(v) = value {
        entry["pricing"][key] = json!(v);
    }
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::path("/models"))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(json!({"data": [entry]})))
        .mount(&server)
        .await;
    let out = b
        .cmd()
        .env("OPENROUTER_BASE_URL", server.uri())
        .args(["estimate", "--all-scenarios", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    out_json(&out)["estimate"]["models"][0].clone()
}

fn cost_range(m: &Value) -> [f64; 2] {
    let c = &m["cost_usd"];
    [c[0].as_f64().unwrap(), c[1].as_f64().unwrap()]
}

/// A per-request price (`pricing.request`) is added once per request.
#[tokio::test(flavor = "multi_thread")]
async fn a_per_request_price_is_counted_per_request() {
    let without = cost_range(&estimate_priced("request", None).await);
    let with = cost_range(&estimate_priced("request", Some("0.01")).await);
    // Two test cases: two requests at 0.01 each, on both ends.
    for i in 0..2 {
        assert!(
            (with[i] - without[i] - 0.02).abs() < 1e-9,
            "{with:?} {without:?}"
        );
    }
}

/// A price per internal reasoning token (`pricing.internal_reasoning`)
/// above the completion price raises the high end only: reasoning tokens
/// are counted among the completion tokens, and a reply may be all
/// reasoning or none.
#[tokio::test(flavor = "multi_thread")]
async fn an_internal_reasoning_price_raises_the_high_end() {
    let without = cost_range(&estimate_priced("internal_reasoning", None).await);
    // $10 per million reasoning tokens against the completion's $2.
    let m = estimate_priced("internal_reasoning", Some("0.00001")).await;
    let with = cost_range(&m);
    let high_tokens = m["completion_tokens"][1].as_f64().unwrap();
    assert!((with[0] - without[0]).abs() < 1e-12, "{with:?} {without:?}");
    let expected = high_tokens * (0.00001 - crate::support::mock::MOCK_COMPLETION_PRICE);
    // The JSON's token count is rounded up: within one token's price.
    assert!(
        (with[1] - without[1] - expected).abs() < 1e-5,
        "{with:?} {without:?} {high_tokens}"
    );
}
