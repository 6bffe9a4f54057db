//! Any OpenAI-compatible server (issue 29), against our mock in OpenAI's
//! strict mode: unknown fields refused with OpenAI's 400, a plain model
//! list without prices, no `/key`, usage without a cost. A whole run costs
//! models.yml's prices, or is of unknown cost without them (never $0); the
//! structured-output probe; `--max-cost` with an unpriced model; the hint
//! on a strict server's refusal of OpenRouter's fields.

use wiremock::MockServer;

use crate::support::child::{count, open_db};
use crate::support::mock::{completion_bodies, completions, strict_server};
use crate::support::{Bench, KEY, json, online, stderr, stdout};

/// USD per million tokens of the priced entries, and what one mock reply
/// (100 prompt and 20 completion tokens) costs at them.
const PRICE: &str = "price: {prompt_per_mtok: 1, completion_per_mtok: 2}";
const PER_CALL: f64 = (100.0 * 1.0 + 20.0 * 2.0) / 1e6;

/// The category_match scenario (two test cases) and the judged one (one
/// test case, one judge call): four requests in a run.
fn bench(models_yml: &str) -> Bench {
    let b = Bench::new();
    b.file("models.yml", models_yml)
        .scenario("P1-B1-S1", "S1")
        .judged_scenario();
    b
}

async fn asked_for_key(server: &MockServer) -> bool {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .any(|r| r.url.path() == "/key")
}

fn run_batch(b: &Bench, uri: &str, extra: &[&str]) -> std::process::Output {
    online(b, KEY, uri)
        .args(["run-batch", "--all-scenarios"])
        .args(extra)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_whole_run_on_a_strict_server_costs_the_models_yml_prices() {
    let b = bench(&format!(
        "marking_model: judge/model\nmodels:\n  - id: test/model\n    api: openai-compatible\n    structured_outputs: true\n    temperature: 0\n    reasoning: {{effort: low}}\n    {PRICE}\n  - id: judge/model\n    api: openai-compatible\n    structured_outputs: true\n    judge_only: true\n    {PRICE}\n"
    ));
    let server = strict_server(true).await;
    let out = run_batch(&b, &server.uri(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let sent = completion_bodies(&server).await;
    assert_eq!(sent.len(), 4, "three replies and one verdict, no probe");
    for body in &sent {
        let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
        for ours in ["provider", "usage", "reasoning"] {
            assert!(!keys.iter().any(|k| *k == ours), "{ours} sent: {body}");
        }
    }
    assert!(
        sent.iter()
            .any(|b| b["model"] == "test/model" && b["reasoning_effort"] == "low")
    );
    assert!(
        !asked_for_key(&server).await,
        "an OpenAI-compatible run asks no /key"
    );

    let costs = json(
        &online(&b, KEY, &server.uri())
            .args(["costs", "--format", "json"])
            .output()
            .unwrap(),
    );
    let total = costs["total_cost_usd"].as_f64().unwrap();
    assert!((total - 4.0 * PER_CALL).abs() < 1e-12, "{costs}");
    assert_eq!(costs["unknown_cost_replies"], 0, "{costs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_price_the_cost_is_unknown_never_zero() {
    // The format for all from the environment, not from the entries.
    let b = bench(
        "marking_model: judge/model\nmodels:\n  - id: test/model\n    structured_outputs: true\n  - id: judge/model\n    structured_outputs: true\n    judge_only: true\n",
    );
    let server = strict_server(true).await;
    let out = online(&b, KEY, &server.uri())
        .env("HELMBENCH_API", "openai-compatible")
        .args(["run-batch", "--all-scenarios"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(completions(&server).await.len(), 4);
    assert!(!asked_for_key(&server).await);

    let costs = json(
        &online(&b, KEY, &server.uri())
            .args(["costs", "--format", "json"])
            .output()
            .unwrap(),
    );
    assert_eq!(costs["unknown_cost_replies"], 4, "{costs}");
    let text = stdout(
        &online(&b, KEY, &server.uri())
            .arg("costs")
            .output()
            .unwrap(),
    );
    assert!(text.contains("total: unknown"), "{text}");
    assert!(text.contains("4 replies of unknown cost"), "{text}");
    assert!(!text.contains("total: $0"), "{text}");

    let report = json(
        &online(&b, KEY, &server.uri())
            .args(["report", "--format", "json"])
            .output()
            .unwrap(),
    );
    assert!(
        report.to_string().contains(r#""unknown_cost_results":4"#),
        "{report}"
    );
    let text = stdout(
        &online(&b, KEY, &server.uri())
            .arg("report")
            .output()
            .unwrap(),
    );
    assert!(text.contains("4 call(s) of unknown cost"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_entry_that_does_not_say_is_probed_once_before_the_run() {
    let yml = "marking_model: judge/model\nmodels:\n  - id: test/model\n    api: openai-compatible\n  - id: judge/model\n    api: openai-compatible\n    structured_outputs: true\n    judge_only: true\n";
    let b = bench(yml);
    let server = strict_server(true).await;
    let out = run_batch(&b, &server.uri(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let sent = completion_bodies(&server).await;
    assert_eq!(sent.len(), 5, "one probe, then the run's four");
    assert_eq!(sent[0]["response_format"]["json_schema"]["name"], "probe");
    assert_eq!(sent[0]["model"], "test/model");
    assert!(stderr(&out).contains("whether it answers in a JSON schema"));

    // A server that ignores the schema: exit 2 after the probe, nothing else.
    let b = bench(yml);
    let server = strict_server(false).await;
    let out = run_batch(&b, &server.uri(), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("`test/model`"), "{err}");
    assert!(err.contains("structured_outputs: true"), "{err}");
    assert!(err.contains("not JSON"), "{err}");
    assert_eq!(
        completions(&server).await.len(),
        1,
        "only the probe was sent"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn max_cost_with_an_unpriced_model_is_a_usage_error_before_any_probe() {
    let b = bench(
        "marking_model: judge/model\nmodels:\n  - id: test/model\n    api: openai-compatible\n  - id: judge/model\n    api: openai-compatible\n    judge_only: true\n    price: {prompt_per_mtok: 1, completion_per_mtok: 2}\n",
    );
    let server = strict_server(true).await;
    let out = run_batch(&b, &server.uri(), &["--max-cost", "1", "--yes"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("model `test/model`"), "{err}");
    assert!(err.contains("no price"), "{err}");
    assert!(
        !err.contains("judge `judge/model`"),
        "the priced judge is fine: {err}"
    );
    assert_eq!(
        completions(&server).await.len(),
        0,
        "nothing sent, not even a probe"
    );
}

/// The one line that ends a run sent in OpenRouter's format to a server
/// that is not OpenRouter.
const NOT_OPENROUTER: &str = "is not OpenRouter";
const THE_FIX: &str = "pass --api openai-compatible";

/// A vLLM-shaped server (a plain `/models`, no `/key`, no `usage.cost`)
/// without `--api openai-compatible`: refused before anything is sent, in
/// one line that names the fix (not "does not support structured
/// outputs"), even with `--yes`.
#[tokio::test(flavor = "multi_thread")]
async fn a_plain_model_list_under_openrouters_format_names_the_fix_before_sending() {
    let b = Bench::new();
    b.file("models.yml", "models:\n  - id: test/model\n")
        .scenario("P1-B1-S1", "S1");
    let server = strict_server(true).await;
    for extra in [&[][..], &["--yes"][..]] {
        let out = run_batch(&b, &server.uri(), extra);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(NOT_OPENROUTER) && err.contains(THE_FIX),
            "{err}"
        );
        assert!(err.contains("supported_parameters"), "{err}");
        assert!(
            !err.contains("does not support structured outputs"),
            "{err}"
        );
        assert_eq!(completions(&server).await.len(), 0, "nothing sent");
    }
}

/// An OpenRouter-shaped model list without `/key` beside it: the same line.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_without_key_info_under_openrouters_format_names_the_fix() {
    use crate::support::mock::catalog_entry;
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, ResponseTemplate};
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/models"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(serde_json::json!({"data": [catalog_entry("test/model", true)]})),
        )
        .mount(&server)
        .await;
    let b = Bench::new();
    b.file("models.yml", "models:\n  - id: test/model\n")
        .scenario("P1-B1-S1", "S1");
    let out = run_batch(&b, &server.uri(), &["--yes"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(NOT_OPENROUTER) && err.contains(THE_FIX),
        "{err}"
    );
    assert!(err.contains("/key"), "{err}");
    assert_eq!(completions(&server).await.len(), 0, "nothing sent");
}

/// A strict server with no model list to tell (so the preflight cannot):
/// its 400 for `provider`, a field only OpenRouter's format sends, stops
/// the run at once with the line that names the fix; nothing is retried
/// and nothing is stored as a provider error.
#[tokio::test(flavor = "multi_thread")]
async fn a_strict_servers_refusal_of_our_field_stops_the_run_with_the_fix() {
    use crate::support::mock::Strict;
    use wiremock::Mock;
    use wiremock::matchers::{method, path};
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/chat/completions"))
        .respond_with(Strict {
            honours_schema: true,
        })
        .mount(&server)
        .await;
    let b = Bench::new();
    b.file("models.yml", "models:\n  - id: test/model\n")
        .scenario("P1-B1-S1", "S1");
    let out = run_batch(&b, &server.uri(), &["--yes", "--concurrency", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(NOT_OPENROUTER) && err.contains(THE_FIX),
        "{err}"
    );
    assert!(err.contains("`provider`"), "{err}");
    assert_eq!(
        completions(&server).await.len(),
        1,
        "the first refusal stops the run: nothing retried, nothing more sent"
    );
    let pool = open_db(&b).await;
    assert_eq!(count(&pool, "SELECT COUNT(*) FROM result").await, 0);
}

#[test]
fn an_unknown_api_is_a_usage_error() {
    let b = bench("models:\n  - id: test/model\n");
    let out = b
        .helmbench()
        .std()
        .args(["--api", "openai", "estimate", "--all-scenarios"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("openai-compatible"),
        "{}",
        stderr(&out)
    );
}

/// The probe is a paid request: its cost (models.yml's price) is kept
/// with the batch's first run, so `costs` counts it.
#[tokio::test(flavor = "multi_thread")]
async fn the_probe_is_counted_in_costs() {
    let b = bench(&format!(
        "marking_model: judge/model\nmodels:\n  - id: test/model\n    api: openai-compatible\n    {PRICE}\n  - id: judge/model\n    api: openai-compatible\n    structured_outputs: true\n    judge_only: true\n    {PRICE}\n"
    ));
    let server = strict_server(true).await;
    let out = run_batch(&b, &server.uri(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        completion_bodies(&server).await.len(),
        5,
        "a probe and four"
    );
    let costs = online(&b, KEY, &server.uri())
        .args(["costs", "--format", "json"])
        .output()
        .unwrap();
    let total = json(&costs)["total_cost_usd"].as_f64().unwrap();
    assert!(
        (total - 5.0 * PER_CALL).abs() < 1e-12,
        "five calls at the models.yml price, the probe among them: {total}"
    );
    let pool = open_db(&b).await;
    assert_eq!(
        count(
            &pool,
            "SELECT COUNT(*) FROM discarded_charge WHERE reason LIKE 'the structured-output probe of `test/model`%' AND call = 'model'"
        )
        .await,
        1
    );
}
