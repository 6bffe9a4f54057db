//! Issue 22 against a mock OpenRouter on 127.0.0.1: what served each reply
//! (model, provider) and its reasoning and cached tokens are stored, exported
//! and warned about; `provider:` and `reasoning:` of models.yml are sent as
//! written; the estimate and run-batch's preflight (prices and supported
//! parameters from `GET /models`, the key's limit from `GET /key`) refuse
//! before any request is sent; 402s stop or retry by their limit source;
//! provider errors are counted by `error_type`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::support::mock::{
    MOCK_COMPLETION_PRICE, MOCK_MODELS, MOCK_PROMPT_PRICE, catalog_entry, completions, mock_server,
    rerouting_server, served_reply, server_with,
};
use crate::support::{
    Bench, KEY, bench, json as out_json, jsonl, read, run, runs_json, stderr, stdout,
};

/// helmbench without a key, offline: nothing listens on port 9.
fn offline(b: &Bench, args: &[&str]) -> std::process::Output {
    b.cmd()
        .env("OPENROUTER_BASE_URL", "http://127.0.0.1:9")
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn served_model_provider_and_tokens_are_stored_exported_and_warned_about() {
    let b = bench();
    let (server, n) = rerouting_server().await;
    let out = run(&b, &server, &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(n.load(Ordering::SeqCst), 2);
    // The estimate came first, on stderr.
    assert!(stderr(&out).contains("cost estimate"), "{}", stderr(&out));

    let out = read(&b, &["export", "--format", "jsonl"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows = jsonl(&out);
    assert_eq!(rows.len(), 2);
    for r in &rows {
        let served = if r["test_code"].as_str().unwrap().ends_with("PT1") {
            "other/model"
        } else {
            "test/model-2025-01-01"
        };
        assert_eq!(r["served_model"], served, "{r}");
        assert_eq!(r["provider"], "ProvA");
        assert_eq!(r["reasoning_tokens"], 7);
        assert_eq!(r["cached_prompt_tokens"], 30);
    }
    let out = read(&b, &["export", "--format", "csv"]);
    let text = stdout(&out);
    let header = text.lines().next().unwrap();
    assert!(
        header.ends_with(
            "served_model,provider,reasoning_tokens,cached_prompt_tokens,error_type,provider_code"
        ),
        "{header}"
    );
    assert!(text.contains("other/model,ProvA,7,30,,"), "{text}");

    // runs and report count the one reply another model served (a dated
    // version of the requested model is the same model) and warn.
    let runs = runs_json(&b);
    let routing = &runs["runs"][0]["routing"];
    assert_eq!(routing["replies_with_served_model"], 2);
    assert_eq!(routing["served_by_other_model"], 1);
    assert_eq!(routing["other_models"]["other/model"], 1);
    assert_eq!(routing["providers"]["ProvA"], 2);
    let out = read(&b, &["runs"]);
    assert!(
        stderr(&out).contains(
            "1 of 2 replies were served by another model than test/model (other/model ×1)"
        ),
        "{}",
        stderr(&out)
    );
    let out = read(&b, &["report", "--run-id", "1", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(out_json(&out)["routing"]["served_by_other_model"], 1);
    assert!(
        stderr(&out).contains("served by another model"),
        "{}",
        stderr(&out)
    );

    // costs shows the reasoning tokens apart: 2 replies x 7.
    let out = read(&b, &["costs", "--format", "json"]);
    let v = out_json(&out);
    assert_eq!(v["reasoning"][0]["reasoning_tokens"], 14);
    assert_eq!(v["reasoning"][0]["cached_prompt_tokens"], 60);
    let out = read(&b, &["costs"]);
    assert!(
        stdout(&out).contains("reasoning tokens"),
        "{}",
        stdout(&out)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_and_reasoning_blocks_are_sent_as_written_with_require_parameters() {
    let b = bench();
    b.file(
        "models.yml",
        "models:\n  - id: test/model\n    provider:\n      order: [deepinfra, together]\n      allow_fallbacks: false\n      data_collection: deny\n      max_price: {prompt: 1, completion: 2}\n    reasoning:\n      effort: low\n      exclude: true\n",
    );
    let (server, _) = rerouting_server().await;
    let out = run(&b, &server, &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = completions(&server).await;
    assert_eq!(reqs.len(), 2);
    for r in reqs {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            body["provider"],
            json!({"order": ["deepinfra", "together"], "allow_fallbacks": false,
                   "data_collection": "deny", "max_price": {"prompt": 1, "completion": 2},
                   "require_parameters": true})
        );
        assert_eq!(body["reasoning"], json!({"effort": "low", "exclude": true}));
    }
}

#[test]
fn unknown_keys_in_provider_or_reasoning_are_content_errors_naming_models_yml() {
    for (yaml, expected) in [
        (
            "models:\n  - id: a/b\n    provider:\n      fallback: no\n",
            "fallback",
        ),
        (
            "models:\n  - id: a/b\n    reasoning:\n      budget: 3\n",
            "budget",
        ),
        (
            "models:\n  - id: a/b\n    reasoning:\n      effort: extreme\n",
            "extreme",
        ),
        (
            "models:\n  - id: a/b\n    provider:\n      require_parameters: false\n",
            "require_parameters",
        ),
    ] {
        let b = Bench::new();
        b.file("models.yml", yaml).scenario("P1-B1-S1", "S1");
        let out = b
            .cmd()
            .args(["run-batch", "--all-scenarios"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{yaml}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("models.yml") && err.contains(expected),
            "{yaml}: {err}"
        );
    }
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
    for r in jsonl(&out) {
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
