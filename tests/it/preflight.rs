//! The preflight checks every parameter it will send (issue 29) against
//! OpenRouter's `supported_parameters`, for every model and judge, before
//! anything is paid; a wrong model id is refused first, with the nearest
//! id in the catalog (issue 30).

use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::{Bench, KEY, online, stderr};

/// A catalog where `plain/model` takes no `seed` and `judge/plain` no
/// `reasoning`; the chat endpoint answers 500 so that any request sent
/// would show in the mock's log.
async fn catalog() -> MockServer {
    let server = MockServer::start().await;
    let entry = |id: &str, params: &[&str]| {
        json!({"id": id, "pricing": {"prompt": "0.000001", "completion": "0.000002"},
               "supported_parameters": params})
    };
    let all = [
        "max_tokens",
        "temperature",
        "seed",
        "reasoning",
        "response_format",
        "structured_outputs",
    ];
    let data = json!({"data": [
        entry("plain/model", &["max_tokens", "temperature", "response_format", "structured_outputs"]),
        entry("judge/plain", &["max_tokens", "temperature", "response_format", "structured_outputs"]),
        entry("judge/notemp", &["max_tokens", "reasoning", "response_format", "structured_outputs"]),
        entry("test/model", &all),
        entry("judge/model", &all),
    ]});
    mount_failing(&server, data).await;
    server
}

/// Mounts `GET /models` answering `models`, a `/key` without a limit, and
/// a chat endpoint that answers 500 (any request sent shows in the log).
async fn mount_failing(server: &MockServer, models: serde_json::Value) {
    Mock::given(method("GET"))
        .and(path("/models"))
        .respond_with(ResponseTemplate::new(200).set_body_json(models))
        .mount(server)
        .await;
    Mock::given(method("GET"))
        .and(path("/key"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(
                json!({"data": {"limit": null, "limit_remaining": null, "usage": 0}}),
            ),
        )
        .mount(server)
        .await;
    Mock::given(method("POST"))
        .and(path("/chat/completions"))
        .respond_with(ResponseTemplate::new(500))
        .mount(server)
        .await;
}

fn bench(models_yml: &str) -> Bench {
    let b = Bench::new();
    b.file("models.yml", models_yml).scenario("P1-B1-S1", "S1");
    b
}

/// `helmbench ARGS` against a fresh catalog mock: it must exit 2 with no
/// chat request sent. Returns its stderr, and the mock for more checks.
async fn refused(b: &Bench, args: &[&str]) -> (String, MockServer) {
    let server = catalog().await;
    let out = online(b, KEY, &server.uri()).args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(posts(&server).await, 0);
    (stderr(&out), server)
}

async fn posts(server: &MockServer) -> usize {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.method.as_str() == "POST")
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_seed_the_model_does_not_take_is_refused_before_anything_is_sent() {
    let b = bench("models:\n  - id: plain/model\n    seed: 7\n");
    let (err, server) = refused(&b, &["run-batch", "--all-scenarios", "--yes"]).await;
    assert!(
        err.contains("model `plain/model` does not take `seed`") && err.contains("models.yml"),
        "{err}"
    );
    assert!(err.contains("nothing was sent"), "{err}");
    assert!(
        !b.dir.path().join("h.db").exists() || {
            let out = online(&b, KEY, &server.uri())
                .args(["runs", "--format", "json"])
                .output()
                .unwrap();
            serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["runs"]
                .as_array()
                .unwrap()
                .is_empty()
        },
        "no run was created"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_judge_reasoning_the_judge_does_not_take_is_refused_before_anything_is_sent() {
    let b = bench(
        "marking_model: judge/plain\nmodels:\n  - id: test/model\n  - id: judge/plain\n    judge_only: true\n    reasoning:\n      effort: low\n",
    );
    // A judged scenario, so the judge is part of the plan.
    b.judged_scenario();
    let (err, _server) = refused(&b, &["run-batch", "--all-scenarios", "--yes"]).await;
    assert!(
        err.contains("judge `judge/plain` does not take `reasoning`"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_model_id_is_refused_first_with_the_nearest_id() {
    let b = bench("models:\n  - id: test/modle\n");
    let (err, _server) = refused(&b, &["run-batch", "--all-scenarios"]).await;
    assert!(err.contains("did you mean `test/model`?"), "{err}");
    // Refused before the estimate is printed.
    assert!(!err.contains("estimate"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_judge_that_takes_no_temperature_is_told_to_get_an_entry_without_one() {
    // A judge without an entry is sent temperature 0; `judge/plain` takes
    // none in this catalog, so say how to send none.
    let b = bench("marking_model: judge/notemp\nmodels:\n  - id: test/model\n");
    b.judged_scenario();
    let (err, server) = refused(&b, &["run-batch", "--all-scenarios", "--yes"]).await;
    assert!(
        err.contains("judge `judge/notemp` does not take `temperature`")
            && err.contains("give the judge its own entry in models.yml without `temperature`"),
        "{err}"
    );
    // With an entry that sets no temperature, none is sent and the check passes.
    b.file(
        "models.yml",
        "marking_model: judge/notemp\nmodels:\n  - id: test/model\n  - id: judge/notemp\n    judge_only: true\n",
    );
    let out = online(&b, KEY, &server.uri())
        .args(["estimate", "--all-scenarios", "--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["run_batch_would_refuse"], json!([]), "{v}");
}

/// A resume checks again what it will send: a model whose endpoints took
/// `seed` when the run began, and no longer do, is refused before the
/// resume sends anything.
#[tokio::test(flavor = "multi_thread")]
async fn a_resume_refuses_a_parameter_the_model_no_longer_takes() {
    let b = bench("models:\n  - id: plain/model\n    seed: 7\n");
    // When the run began: `plain/model` took a seed; every request failed.
    let then = MockServer::start().await;
    let data = json!({"data": [{"id": "plain/model",
        "pricing": {"prompt": "0.000001", "completion": "0.000002"},
        "supported_parameters": ["max_tokens", "temperature", "seed", "response_format", "structured_outputs"]}]});
    mount_failing(&then, data).await;
    let first = online(&b, KEY, &then.uri())
        .args(["run-batch", "--all-scenarios", "--max-attempts", "1"])
        .output()
        .unwrap();
    assert!(posts(&then).await > 0, "{}", stderr(&first));
    // Now its endpoints take no seed: the resume is refused, nothing sent.
    let (err, _server) = refused(&b, &["run-batch", "--resume", "1"]).await;
    assert!(
        err.contains("run 1: model `plain/model` does not take `seed`"),
        "{err}"
    );
    assert!(err.contains("nothing was sent"), "{err}");
}

/// A resume whose preflight cannot read the model list goes on (the run
/// was checked when it began) but says what was not checked, never
/// silently.
#[tokio::test(flavor = "multi_thread")]
async fn a_resume_that_cannot_read_the_model_list_says_what_was_not_checked() {
    let b = bench("models:\n  - id: test/model\n");
    let then = catalog().await;
    let first = online(&b, KEY, &then.uri())
        .args(["run-batch", "--all-scenarios", "--max-attempts", "1"])
        .output()
        .unwrap();
    assert!(posts(&then).await > 0, "{}", stderr(&first));
    // Now the server has no model list, and its chat endpoint answers.
    let now = crate::support::mock::triage_server().await;
    Mock::given(method("GET"))
        .and(path("/models"))
        .respond_with(ResponseTemplate::new(503))
        .with_priority(1)
        .mount(&now.server)
        .await;
    let out = online(&b, KEY, &now.server.uri())
        .args(["run-batch", "--resume", "1"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning: run 1: the resume's preflight could not read the model list")
            && err.contains("`test/model`")
            && err.contains("were not checked"),
        "{err}"
    );
}
