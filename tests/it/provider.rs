//! What is sent to OpenRouter and what it says about a reply, through a
//! mock on 127.0.0.1: the model and provider that served each reply and its
//! reasoning and cached tokens are stored, exported and warned about;
//! `provider:` and `reasoning:` of models.yml are sent as written, and
//! unknown keys in them are content errors.

use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use crate::support::mock::{completions, rerouting_server};
use crate::support::{Bench, bench, json as out_json, jsonl, read, run, runs_json, stderr, stdout};

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
            "served_model,provider,reasoning_tokens,cached_prompt_tokens,error_type,provider_code,block"
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
