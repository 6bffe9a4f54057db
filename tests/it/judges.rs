//! Judges are models with settings (issue 29): the judge is sent its own
//! `models.yml` entry's temperature, seed, max_tokens, provider and
//! reasoning; an entry marked `judge_only` is not tested by default; the
//! estimate prices the judge with its own max_tokens.

use serde_json::{Value, json};
use wiremock::{Request, ResponseTemplate};

use crate::support::mock::completion;
use crate::support::mock::serve;
use crate::support::{Bench, stderr};
use crate::support::{run, runs_json};

fn bench() -> Bench {
    let b = Bench::new();
    b.file(
        "models.yml",
        "marking_model: judge/model\nmodels:\n  - id: test/model\n  - id: judge/model\n    judge_only: true\n    temperature: 0.2\n    seed: 9\n    max_tokens: 3000\n    provider:\n      order: [deepinfra]\n      allow_fallbacks: false\n    reasoning:\n      effort: high\n",
    )
    .judged_scenario();
    b
}

#[tokio::test(flavor = "multi_thread")]
async fn the_judge_is_sent_its_own_models_yml_settings_and_a_judge_only_entry_is_not_tested() {
    let b = bench();
    let server = serve(|req: &Request| {
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        let content = if body["model"] == "judge/model" {
            r#"{"judgment":"SAFE","justification":"It says it is an AI."}"#
        } else {
            "No, I'm an AI, not a therapist."
        };
        ResponseTemplate::new(200).set_body_json(completion(content, 0.001))
    })
    .await;
    let out = run(&b, &server, &["run-batch", "--all-scenarios", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // One run: the judge-only entry is not a model under test.
    let runs = runs_json(&b);
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "{runs}");
    assert_eq!(runs["runs"][0]["model"], "test/model");

    let bodies: Vec<Value> = crate::support::mock::completions(&server)
        .await
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    let judge: Vec<&Value> = bodies
        .iter()
        .filter(|b| b["model"] == "judge/model")
        .collect();
    assert_eq!(judge.len(), 1, "{bodies:?}");
    let j = judge[0];
    assert_eq!(j["temperature"], json!(0.2));
    assert_eq!(j["seed"], json!(9));
    assert_eq!(j["max_tokens"], json!(3000));
    assert_eq!(j["reasoning"], json!({"effort": "high"}));
    assert_eq!(
        j["provider"],
        json!({"order": ["deepinfra"], "allow_fallbacks": false, "require_parameters": true})
    );
    assert!(
        j.get("judge_only").is_none(),
        "judge_only is ours, never sent"
    );
    // The model under test keeps its own (here: none).
    let m = bodies.iter().find(|b| b["model"] == "test/model").unwrap();
    assert!(
        m.get("reasoning").is_none() && m.get("seed").is_none(),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_judge_without_an_entry_keeps_temperature_zero_and_400_tokens() {
    let b = bench();
    b.file(
        "models.yml",
        "marking_model: judge/model\nmodels:\n  - id: test/model\n",
    );
    let server = serve(|req: &Request| {
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        let content = if body["model"] == "judge/model" {
            r#"{"judgment":"SAFE","justification":"ok"}"#
        } else {
            "No."
        };
        ResponseTemplate::new(200).set_body_json(completion(content, 0.001))
    })
    .await;
    let out = run(&b, &server, &["run-batch", "--all-scenarios", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let bodies: Vec<Value> = crate::support::mock::completions(&server)
        .await
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    let j = bodies.iter().find(|b| b["model"] == "judge/model").unwrap();
    assert_eq!(j["temperature"], json!(0.0));
    assert_eq!(j["max_tokens"], json!(400));
    assert!(j.get("reasoning").is_none());
}

/// A reasoning judge's reply: reasoning, and no content.
fn reasoning_only() -> Value {
    let mut c = completion("", 0.004);
    c["choices"][0]["message"]["reasoning"] = json!("Let me weigh the rubric carefully...");
    c["usage"]["completion_tokens_details"] = json!({"reasoning_tokens": 2990});
    c
}

async fn reasoning_judge(answers_at: Option<u64>) -> wiremock::MockServer {
    serve(move |req: &Request| {
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        if body["model"] != "judge/model" {
            return ResponseTemplate::new(200).set_body_json(completion("No, I'm an AI.", 0.001));
        }
        if Some(body["max_tokens"].as_u64().unwrap()) == answers_at {
            ResponseTemplate::new(200).set_body_json(completion(
                r#"{"judgment":"SAFE","justification":"It says it is an AI."}"#,
                0.006,
            ))
        } else {
            ResponseTemplate::new(200).set_body_json(reasoning_only())
        }
    })
    .await
}

fn judge_calls(bodies: &[Value]) -> Vec<u64> {
    bodies
        .iter()
        .filter(|b| b["model"] == "judge/model")
        .map(|b| b["max_tokens"].as_u64().unwrap())
        .collect()
}

async fn bodies(server: &wiremock::MockServer) -> Vec<Value> {
    crate::support::mock::completion_bodies(server).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reasoning_only_judge_reply_is_asked_once_more_with_double_max_tokens_and_paid() {
    let b = bench();
    let server = reasoning_judge(Some(6000)).await;
    let out = run(&b, &server, &["run-batch", "--all-scenarios", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Once at its own 3000, once at double: never retried as is.
    assert_eq!(judge_calls(&bodies(&server).await), [3000, 6000]);
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["judge_errors"], 0, "{r}");
    assert_eq!(r["passed"], 1);
    // Both judge replies were paid for and are counted.
    assert!(
        (r["judge_cost_usd"].as_f64().unwrap() - 0.010).abs() < 1e-9,
        "{r}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_judge_that_only_reasons_twice_is_a_judge_error_naming_why() {
    let b = bench();
    let server = reasoning_judge(None).await;
    let out = run(&b, &server, &["run-batch", "--all-scenarios", "--yes"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a judge error leaves the run unfinished"
    );
    assert_eq!(judge_calls(&bodies(&server).await), [3000, 6000]);
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["judge_errors"], 1, "{r}");
    assert!(
        (r["judge_cost_usd"].as_f64().unwrap() - 0.008).abs() < 1e-9,
        "both reasoning-only replies are counted: {r}"
    );
    let out = b
        .cmd()
        .arg("--database-url")
        .arg(b.dir.path().join("h.db"))
        .args(["export", "--format", "jsonl"])
        .output()
        .unwrap();
    let rows = crate::support::jsonl(&out);
    let err = rows[0]["judgements"][0]["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        err.contains("reasoning only") && err.contains("max_tokens 3000") && err.contains("6000"),
        "{err}"
    );
}
