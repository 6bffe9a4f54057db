use super::*;
use crate::domain::{Api, ModelEntry, Reasoning};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

mod redaction;
use std::sync::{Arc, Mutex};
use wiremock::matchers::{body_json, header, method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const KEY: &str = "sk-or-v1-SECRET-test-key-0123456789abcdef";

fn cfg(server: &MockServer) -> ClientConfig {
    let mut c = ClientConfig::new(server.uri(), KEY);
    c.backoff_base = Duration::from_millis(10);
    c.backoff_max = Duration::from_millis(40);
    c.request_timeout = Duration::from_secs(5);
    c.max_total = Duration::from_secs(20);
    c.max_attempts = 4;
    c
}

fn client(server: &MockServer) -> Client {
    Client::new(cfg(server)).expect("client")
}

static MODEL: std::sync::LazyLock<ModelEntry> =
    std::sync::LazyLock::new(|| ModelEntry::new("openai/gpt-4o-mini"));

fn req() -> ChatRequest<'static> {
    ChatRequest {
        history: &[],
        model: &MODEL,
        prompt: "Hello?",
        response_format: None,
        api: Api::OpenRouter,
        user: None,
    }
}

/// The body `r` sends, parsed.
fn body(r: &ChatRequest) -> Value {
    serde_json::from_str(&r.to_json()).expect("the body is JSON")
}

fn ok_body(content: &str) -> Value {
    json!({
        "id": "gen-123",
        "provider": "OpenAI",
        "model": "openai/gpt-4o-mini",
        "object": "chat.completion",
        "choices": [{
            "index": 0,
            "finish_reason": "stop",
            "native_finish_reason": "stop",
            "message": {"role": "assistant", "content": content}
        }],
        "usage": {
            "prompt_tokens": 12,
            "completion_tokens": 7,
            "total_tokens": 19,
            "cost": 0.00042,
            "cost_details": {"upstream_inference_cost": 0.0004},
            "completion_tokens_details": {"reasoning_tokens": 3},
            "prompt_tokens_details": {"cached_tokens": 8}
        }
    })
}

fn ok() -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(ok_body("{\"answer\": 1}"))
}

fn err(status: u16, code: Value, message: &str) -> ResponseTemplate {
    ResponseTemplate::new(status)
        .set_body_json(json!({"error": {"code": code, "message": message}}))
}

/// Replies with each template in turn, then repeats the last one.
struct Sequence {
    replies: Vec<ResponseTemplate>,
    calls: Arc<Mutex<usize>>,
}

impl Respond for Sequence {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let mut n = self.calls.lock().unwrap();
        let r = self.replies[(*n).min(self.replies.len() - 1)].clone();
        *n += 1;
        r
    }
}

async fn mount_sequence(server: &MockServer, replies: Vec<ResponseTemplate>) -> Arc<Mutex<usize>> {
    let calls = Arc::new(Mutex::new(0));
    Mock::given(method("POST"))
        .and(path("/chat/completions"))
        .respond_with(Sequence {
            replies,
            calls: calls.clone(),
        })
        .mount(server)
        .await;
    calls
}

fn assert_no_key(s: &str) {
    assert!(!s.contains(KEY), "key leaked: {s}");
    assert!(!s.contains("SECRET"), "key leaked: {s}");
}

#[test]
fn the_body_is_written_field_by_field_in_a_fixed_order() {
    // The exact bytes matter: the reply cache is keyed by a hash of them.
    let model = ModelEntry {
        temperature: Some(0.7),
        seed: Some(-3),
        max_tokens: Some(800),
        reasoning: Some(Reasoning {
            effort: Some("low".into()),
            ..Default::default()
        }),
        ..ModelEntry::new("a/b")
    };
    let schema = json!({"type": "json_schema", "json_schema": {"name": "r", "strict": true,
        "schema": {"type": "object", "properties": {"z": {"type": "string"}, "a": {"enum": [1, 2.5, null]}}}}});
    let r = ChatRequest {
        history: &[],
        model: &model,
        prompt: "quotes \" and \\ and\nnew lines, emoji \u{1F600}, </tag>",
        response_format: Some(&schema),
        api: Api::OpenRouter,
        user: None,
    };
    // The cache key is the body as every request was sent before `usage`
    // was dropped and `user` added: replies stored then still answer.
    let legacy = concat!(
        r#"{"model":"a/b","messages":[{"role":"user","content":"quotes \" and \\ and\nnew lines, emoji "#,
        "\u{1F600}",
        r#", </tag>"}],"response_format":{"type":"json_schema","json_schema":{"name":"r","strict":true,"schema":{"type":"object","properties":{"z":{"type":"string"},"a":{"enum":[1,2.5,null]}}}}},"#,
        r#""provider":{"require_parameters":true},"temperature":0.7,"seed":-3,"max_tokens":800,"reasoning":{"effort":"low"},"usage":{"include":true}}"#
    );
    let with_user = ChatRequest {
        history: &[],
        user: Some("hb-0123"),
        ..r
    };
    for req in [r, with_user] {
        let body = req.body();
        assert_eq!(body.key_parts().concat(), legacy.as_bytes());
        assert_eq!(
            crate::benchmark::sha256_hex_pieces(&[&body.key_parts(), &[b"x"]]),
            crate::benchmark::sha256_hex(&[legacy.as_bytes(), b"x"])
        );
    }
    let sent = legacy.replace(r#","usage":{"include":true}}"#, "}");
    assert_eq!(r.to_json(), sent);
    assert_eq!(
        with_user.to_json(),
        sent.replace(
            r#""reasoning":{"effort":"low"}}"#,
            r#""reasoning":{"effort":"low"},"user":"hb-0123"}"#
        )
    );
    // A temperature that is not a number goes out as null, as serde_json writes it.
    let nan = ModelEntry {
        temperature: Some(f64::NAN),
        ..ModelEntry::new("a/b")
    };
    let bare = ChatRequest {
        history: &[],
        model: &nan,
        prompt: "hi",
        response_format: None,
        api: Api::OpenRouter,
        user: None,
    };
    assert_eq!(
        bare.body().key_parts().concat(),
        br#"{"model":"a/b","messages":[{"role":"user","content":"hi"}],"temperature":null,"usage":{"include":true}}"#
    );
    assert_eq!(
        bare.to_json(),
        r#"{"model":"a/b","messages":[{"role":"user","content":"hi"}],"temperature":null}"#
    );
}

#[tokio::test]
async fn body_and_headers_with_response_format() {
    let server = MockServer::start().await;
    let schema = json!({"type": "json_schema", "json_schema": {"name": "r", "strict": true, "schema": {"type": "object"}}});
    let expected = json!({
        "model": "openai/gpt-4o-mini",
        "messages": [{"role": "user", "content": "Hello?"}],
        "response_format": schema,
        "provider": {"require_parameters": true},
        "temperature": 0.0,
        "seed": 7,
        "max_tokens": 300
    });
    Mock::given(method("POST"))
        .and(path("/chat/completions"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .and(header("x-title", "helmbench"))
        .and(header("http-referer", "https://example.org/helmbench"))
        .and(header("content-type", "application/json"))
        .and(body_json(&expected))
        .respond_with(ok())
        .expect(1)
        .mount(&server)
        .await;
    let mut c = cfg(&server);
    c.base_url = format!("{}/", server.uri()); // trailing slash trimmed
    c.title = Some("helmbench".into());
    c.referer = Some("https://example.org/helmbench".into());
    let client = Client::new(c).unwrap();
    let model = ModelEntry {
        temperature: Some(0.0),
        seed: Some(7),
        max_tokens: Some(300),
        ..ModelEntry::new("openai/gpt-4o-mini")
    };
    let r = ChatRequest {
        history: &[],
        response_format: Some(&schema),
        model: &model,
        ..req()
    };
    let got = client.chat(&r).await.expect("chat");
    assert_eq!(got.content, "{\"answer\": 1}");
    // Key order on the wire is stable too (preserve_order).
    let keys: Vec<String> = body(&r).as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        keys,
        [
            "model",
            "messages",
            "response_format",
            "provider",
            "temperature",
            "seed",
            "max_tokens"
        ]
    );
}

#[tokio::test]
async fn body_without_response_format_has_no_provider_block() {
    let server = MockServer::start().await;
    let expected = json!({
        "model": "openai/gpt-4o-mini",
        "messages": [{"role": "user", "content": "Hello?"}]
    });
    Mock::given(method("POST"))
        .and(path("/chat/completions"))
        .and(body_json(&expected))
        .respond_with(ok())
        .expect(1)
        .mount(&server)
        .await;
    let got = client(&server).chat(&req()).await.expect("chat");
    assert_eq!(got.attempts, 1);
    let body = body(&req());
    assert!(body.get("provider").is_none());
    assert!(body.get("response_format").is_none());
    assert!(body.get("temperature").is_none());
    // No attribution headers when unset.
    let received = server.received_requests().await.unwrap();
    assert!(received[0].headers.get("x-title").is_none());
    assert!(received[0].headers.get("http-referer").is_none());
}

#[tokio::test]
async fn success_parses_usage_cost_and_ids() {
    let server = MockServer::start().await;
    mount_sequence(&server, vec![ok()]).await;
    let c = client(&server).chat(&req()).await.unwrap();
    assert_eq!(
        c,
        Completion {
            empty_because: None,
            byok_cost_usd: 0.0,
            generation_id: Some("gen-123".into()),
            content: "{\"answer\": 1}".into(),
            finish_reason: Some("stop".into()),
            provider: Some("OpenAI".into()),
            served_model: Some("openai/gpt-4o-mini".into()),
            prompt_tokens: 12,
            completion_tokens: 7,
            reasoning_tokens: 3,
            cached_prompt_tokens: 8,
            cost_usd: 0.00042,
            reported_cost_usd: Some(0.00042),
            upstream_cost_usd: Some(0.0004),
            attempts: 1,
            latency_ms: c.latency_ms,
        }
    );
}

/// A 402 (or a key-limit 403) says which limit it hit; only the
/// in-flight budget is retried.
#[tokio::test]
async fn spending_limits_are_told_apart() {
    let limit = |status: u16, meta: Value| {
        ResponseTemplate::new(status)
            .set_body_json(json!({"error": {"code": status, "message": "no", "metadata": meta}}))
    };
    for (status, meta, want) in [
        (
            402,
            json!({"limit_source": "openrouter_key_limit"}),
            CreditLimit::KeyLimit,
        ),
        (
            403,
            json!({"limit_source": "openrouter_key_limit"}),
            CreditLimit::KeyLimit,
        ),
        (
            402,
            json!({"limit_source": "openrouter_credits"}),
            CreditLimit::Credits,
        ),
        (
            402,
            json!({"limit_source": "openrouter_credits", "reason": "weight_exceeds_budget"}),
            CreditLimit::RequestTooExpensive,
        ),
        (402, json!({}), CreditLimit::Unspecified),
    ] {
        let server = MockServer::start().await;
        mount_sequence(&server, vec![limit(status, meta.clone()), ok()]).await;
        match client(&server).chat(&req()).await {
            Err(ProviderError::PaymentRequired { limit, .. }) => {
                assert_eq!(limit, want, "{meta}")
            }
            other => panic!("{meta}: {other:?}"),
        }
    }
    let server = MockServer::start().await;
    let in_flight = limit(
        402,
        json!({"limit_source": "openrouter_in_flight_budget", "reason": "in_flight_budget_exhausted"}),
    )
    .insert_header("retry-after", "0");
    mount_sequence(&server, vec![in_flight, ok()]).await;
    assert_eq!(client(&server).chat(&req()).await.unwrap().attempts, 2);
}

#[tokio::test]
async fn provider_error_type_and_code_are_kept() {
    let server = MockServer::start().await;
    let e = ResponseTemplate::new(503).set_body_json(json!({"error": {"code": 503,
        "message": "overloaded", "metadata": {"error_type": "provider_overloaded", "provider_code": 529}}}));
    mount_sequence(&server, vec![e]).await;
    let err = client(&server).chat(&req()).await.unwrap_err();
    assert!(matches!(err, ProviderError::Exhausted { .. }), "{err:?}");
    assert_eq!(
        err.meta(),
        ErrorMeta {
            error_type: Some("provider_overloaded".into()),
            provider_code: Some("529".into()),
        }
    );
}

#[tokio::test]
async fn missing_usage_is_tolerated() {
    let server = MockServer::start().await;
    let body = json!({"choices": [{"message": {"content": "hi"}}]});
    mount_sequence(
        &server,
        vec![ResponseTemplate::new(200).set_body_json(body)],
    )
    .await;
    let c = client(&server).chat(&req()).await.unwrap();
    assert_eq!(c.content, "hi");
    assert_eq!(c.generation_id, None);
    assert_eq!(c.provider, None);
    assert_eq!(c.finish_reason, None);
    assert_eq!((c.prompt_tokens, c.completion_tokens), (0, 0));
    assert_eq!(c.cost_usd, 0.0);
    assert_eq!(c.upstream_cost_usd, None);
}

#[tokio::test]
async fn partial_usage_without_cost_is_tolerated() {
    let server = MockServer::start().await;
    let mut body = ok_body("hi");
    body["usage"] = json!({"prompt_tokens": 3, "cost_details": null});
    mount_sequence(
        &server,
        vec![ResponseTemplate::new(200).set_body_json(body)],
    )
    .await;
    let c = client(&server).chat(&req()).await.unwrap();
    assert_eq!((c.prompt_tokens, c.completion_tokens), (3, 0));
    assert_eq!(c.cost_usd, 0.0);
    assert_eq!(c.upstream_cost_usd, None);
}

#[tokio::test]
async fn rate_limit_honours_retry_after_then_succeeds() {
    let server = MockServer::start().await;
    let calls = mount_sequence(
        &server,
        vec![
            err(429, json!(429), "Rate limit exceeded").insert_header("Retry-After", "1"),
            ok(),
        ],
    )
    .await;
    let started = Instant::now();
    let c = client(&server).chat(&req()).await.unwrap();
    assert_eq!(c.attempts, 2);
    assert_eq!(*calls.lock().unwrap(), 2);
    // Backoff alone would be ~10 ms; Retry-After says one second.
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn retry_after_beyond_total_budget_gives_up_early() {
    let server = MockServer::start().await;
    let calls = mount_sequence(
        &server,
        vec![err(429, json!(429), "slow down").insert_header("Retry-After", "120")],
    )
    .await;
    let mut c = cfg(&server);
    c.max_total = Duration::from_secs(2);
    let started = Instant::now();
    let e = Client::new(c).unwrap().chat(&req()).await.unwrap_err();
    assert!(
        matches!(e, ProviderError::Exhausted { attempts: 1, .. }),
        "{e:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(*calls.lock().unwrap(), 1);
    assert!(e.to_string().contains("slow down"), "{e}");
}

#[tokio::test]
async fn server_error_then_success() {
    let server = MockServer::start().await;
    mount_sequence(&server, vec![err(500, json!(500), "Internal"), ok()]).await;
    let c = client(&server).chat(&req()).await.unwrap();
    assert_eq!(c.attempts, 2);
}

#[tokio::test]
async fn gateway_errors_are_retried() {
    let server = MockServer::start().await;
    let calls = mount_sequence(
        &server,
        vec![
            err(502, json!(502), "model down"),
            err(503, json!(503), "no provider available"),
            ResponseTemplate::new(504).set_body_string("<html>Gateway Timeout</html>"),
            ok(),
        ],
    )
    .await;
    let c = client(&server).chat(&req()).await.unwrap();
    assert_eq!(c.attempts, 4);
    assert_eq!(*calls.lock().unwrap(), 4);
}

#[tokio::test]
async fn request_timeout_408_is_retried() {
    let server = MockServer::start().await;
    mount_sequence(&server, vec![err(408, json!(408), "timed out"), ok()]).await;
    assert_eq!(client(&server).chat(&req()).await.unwrap().attempts, 2);
}

#[tokio::test]
async fn top_level_error_inside_200_is_retried() {
    let server = MockServer::start().await;
    mount_sequence(
        &server,
        vec![
            ResponseTemplate::new(200).set_body_json(json!({
                "error": {"code": 502, "message": "Provider returned error",
                          "metadata": {"provider_name": "Foo", "raw": "upstream exploded"}}
            })),
            ok(),
        ],
    )
    .await;
    let c = client(&server).chat(&req()).await.unwrap();
    assert_eq!(c.attempts, 2);
    assert_eq!(c.content, "{\"answer\": 1}");
}

#[tokio::test]
async fn choice_level_error_inside_200_is_retried() {
    let server = MockServer::start().await;
    let mut bad = ok_body("partial");
    bad["choices"][0]["finish_reason"] = json!("error");
    bad["choices"][0]["error"] = json!({"code": "server_error", "message": "stream broke"});
    let mut bad_no_detail = ok_body("");
    bad_no_detail["choices"][0]["finish_reason"] = json!("error");
    mount_sequence(
        &server,
        vec![
            ResponseTemplate::new(200).set_body_json(bad),
            ResponseTemplate::new(200).set_body_json(bad_no_detail),
            ok(),
        ],
    )
    .await;
    let c = client(&server).chat(&req()).await.unwrap();
    assert_eq!(c.attempts, 3);
    assert_eq!(c.finish_reason.as_deref(), Some("stop"));
}

#[tokio::test]
async fn error_inside_200_that_never_clears_reports_its_message() {
    let server = MockServer::start().await;
    mount_sequence(
        &server,
        vec![ResponseTemplate::new(200).set_body_json(json!({
            "error": {"code": "provider_overloaded", "message": "try later"}
        }))],
    )
    .await;
    let e = client(&server).chat(&req()).await.unwrap_err();
    match &e {
        ProviderError::Exhausted { attempts, last, .. } => {
            assert_eq!(*attempts, 4);
            assert!(last.contains("provider_overloaded"), "{last}");
            assert!(last.contains("try later"), "{last}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn error_codes_may_be_numbers_or_strings() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(err(400, json!("invalid_request"), "bad schema"))
        .expect(1)
        .mount(&server)
        .await;
    let e = client(&server).chat(&req()).await.unwrap_err();
    match e {
        ProviderError::Rejected {
            status,
            code,
            message,
            ..
        } => {
            assert_eq!(status, 400);
            assert_eq!(code.as_deref(), Some("invalid_request"));
            assert_eq!(message, "bad schema");
        }
        other => panic!("unexpected {other:?}"),
    }

    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(err(
            404,
            json!(404),
            "No endpoints found that support the requested parameters",
        ))
        .expect(1)
        .mount(&server)
        .await;
    let e = client(&server).chat(&req()).await.unwrap_err();
    match &e {
        ProviderError::Rejected { status, code, .. } => {
            assert_eq!(*status, 404);
            assert_eq!(code.as_deref(), Some("404"));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(e.to_string().contains("No endpoints found"), "{e}");
    assert_eq!(e.kind(), "rejected");
    assert!(!e.is_fatal_for_run());
}

async fn not_retried(status: u16) -> ProviderError {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/chat/completions"))
        .respond_with(err(status, json!(status), "nope"))
        .expect(1)
        .mount(&server)
        .await;
    let e = client(&server).chat(&req()).await.unwrap_err();
    server.verify().await;
    e
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    for status in [400u16, 403, 404, 422] {
        let e = not_retried(status).await;
        assert!(
            matches!(e, ProviderError::Rejected { status: s, .. } if s == status),
            "{status}: {e:?}"
        );
    }
    let e = not_retried(401).await;
    assert!(matches!(e, ProviderError::Unauthorized { .. }));
    assert!(e.is_fatal_for_run());
    assert_eq!(e.kind(), "unauthorized");
    let e = not_retried(402).await;
    assert!(matches!(e, ProviderError::PaymentRequired { .. }));
    assert!(e.is_fatal_for_run());
    assert_eq!(e.kind(), "payment_required");
}

#[tokio::test]
async fn unauthorized_names_the_variable_not_the_key() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(err(
            401,
            json!(401),
            &format!("No auth credentials found for {KEY}"),
        ))
        .expect(1)
        .mount(&server)
        .await;
    let e = client(&server).chat(&req()).await.unwrap_err();
    let shown = e.to_string();
    assert!(shown.contains("OPENROUTER_API_KEY"), "{shown}");
    assert!(shown.contains("No auth credentials found"), "{shown}");
    assert_no_key(&shown);
    assert_no_key(&format!("{e:?}"));
}

#[tokio::test]
async fn auth_and_credit_errors_inside_200_are_fatal() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"error": {"code": 401, "message": "User not found."}})),
        )
        .expect(1)
        .mount(&server)
        .await;
    let e = client(&server).chat(&req()).await.unwrap_err();
    assert!(matches!(e, ProviderError::Unauthorized { .. }), "{e:?}");

    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(
                json!({"error": {"code": "402", "message": "Insufficient credits"}}),
            ),
        )
        .expect(1)
        .mount(&server)
        .await;
    let e = client(&server).chat(&req()).await.unwrap_err();
    assert!(matches!(e, ProviderError::PaymentRequired { .. }), "{e:?}");
    assert!(e.to_string().contains("Insufficient credits"));
}

#[tokio::test]
async fn in_flight_budget_402_with_retry_after_is_retried() {
    let server = MockServer::start().await;
    let busy = ResponseTemplate::new(402)
        .insert_header("Retry-After", "0")
        .set_body_json(
            json!({"error": {"code": 402, "message": "in-flight budget exhausted",
            "metadata": {"limit_source": "openrouter_in_flight_budget"}}}),
        );
    mount_sequence(&server, vec![busy, ok()]).await;
    let c = client(&server).chat(&req()).await.unwrap();
    assert_eq!(c.attempts, 2);
}

#[tokio::test]
async fn exhaustion_after_max_attempts() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(err(503, json!(503), "No instances available"))
        .expect(4)
        .mount(&server)
        .await;
    let e = client(&server).chat(&req()).await.unwrap_err();
    match &e {
        ProviderError::Exhausted { attempts, last, .. } => {
            assert_eq!(*attempts, 4);
            assert!(last.contains("503"), "{last}");
            assert!(last.contains("No instances available"), "{last}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(e.kind(), "exhausted");
    assert!(!e.is_fatal_for_run());
}

#[tokio::test]
async fn total_budget_is_respected() {
    let server = MockServer::start().await;
    let calls = mount_sequence(&server, vec![err(500, json!(500), "boom")]).await;
    let mut c = cfg(&server);
    c.max_attempts = 1000;
    c.backoff_base = Duration::from_millis(100);
    c.backoff_max = Duration::from_millis(100);
    c.max_total = Duration::from_millis(600);
    let started = Instant::now();
    let e = Client::new(c).unwrap().chat(&req()).await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(matches!(e, ProviderError::Exhausted { .. }), "{e:?}");
    assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}");
    let n = *calls.lock().unwrap();
    assert!((2..=13).contains(&n), "{n} calls");
}

#[tokio::test]
async fn empty_content_is_retried() {
    let server = MockServer::start().await;
    let calls = mount_sequence(
        &server,
        vec![
            ResponseTemplate::new(200).set_body_json(ok_body("  \n ")),
            ResponseTemplate::new(200)
                .set_body_json(json!({"id": "gen-x", "choices": [{"message": {"content": null}, "finish_reason": "stop"}]})),
            ok(),
        ],
    )
    .await;
    let c = client(&server).chat(&req()).await.unwrap();
    assert_eq!(c.attempts, 3);
    assert_eq!(*calls.lock().unwrap(), 3);
}

#[tokio::test]
async fn charged_replies_that_are_retried_or_refused_are_noted() {
    let server = MockServer::start().await;
    let usage = json!({"cost": 0.25});
    mount_sequence(
        &server,
        vec![
            // Empty content (charged, 0.42 from ok_body), no choices,
            // an error inside a 200, then a 400 inside a 200: all charged.
            ResponseTemplate::new(200).set_body_json(ok_body("")),
            ResponseTemplate::new(200).set_body_json(json!({"choices": [], "usage": usage})),
            ResponseTemplate::new(200).set_body_json(
                json!({"error": {"code": 502, "message": "x"}, "usage": {"cost": "0.25"}}),
            ),
            ResponseTemplate::new(200).set_body_json(
                json!({"error": {"code": 400, "message": "bad"}, "usage": {"cost": "NaN"}}),
            ),
        ],
    )
    .await;
    let log = std::sync::Arc::new(CallLog::default());
    let e = log.scope(client(&server).chat(&req())).await.unwrap_err();
    assert_eq!(e.kind(), "rejected");
    let notes = log.take();
    assert_eq!(notes.len(), 1);
    let (model, n) = &notes[0];
    assert_eq!(model, "openai/gpt-4o-mini");
    // The NaN cost is not a charge.
    assert_eq!(n.discarded_attempts, 3);
    assert!((n.discarded_cost_usd - 0.50042).abs() < 1e-12, "{n:?}");
    assert_eq!(n.failures, 1);
    // Outside a scope nothing is noted, and nothing fails.
    assert!(log.take().is_empty());
}

#[tokio::test]
async fn refusal_is_returned_as_content() {
    let server = MockServer::start().await;
    let body = json!({"choices": [{"message": {"content": null, "refusal": "I can't help with that."}, "finish_reason": "stop"}]});
    mount_sequence(
        &server,
        vec![ResponseTemplate::new(200).set_body_json(body)],
    )
    .await;
    let c = client(&server).chat(&req()).await.unwrap();
    assert_eq!(c.content, "I can't help with that.");
    assert_eq!(c.attempts, 1);
}

#[tokio::test]
async fn timeout_is_retried() {
    let server = MockServer::start().await;
    let calls = mount_sequence(
        &server,
        vec![ok().set_delay(Duration::from_millis(1500)), ok()],
    )
    .await;
    let mut c = cfg(&server);
    c.request_timeout = Duration::from_millis(300);
    let got = Client::new(c).unwrap().chat(&req()).await.unwrap();
    assert_eq!(got.attempts, 2);
    assert_eq!(*calls.lock().unwrap(), 2);
    assert!(
        got.latency_ms < 1000,
        "latency is the successful attempt's: {}",
        got.latency_ms
    );
}

#[tokio::test]
async fn timeouts_exhaust_with_a_timeout_reason() {
    let server = MockServer::start().await;
    mount_sequence(&server, vec![ok().set_delay(Duration::from_millis(1500))]).await;
    let mut c = cfg(&server);
    c.request_timeout = Duration::from_millis(200);
    c.max_attempts = 2;
    let e = Client::new(c).unwrap().chat(&req()).await.unwrap_err();
    match e {
        ProviderError::Exhausted { attempts, last, .. } => {
            assert_eq!(attempts, 2);
            assert!(last.contains("timeout"), "{last}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn connection_errors_are_retried_then_exhausted() {
    // Bind a port, then free it, so nothing listens there.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut c = ClientConfig::new(format!("http://127.0.0.1:{port}"), KEY);
    c.backoff_base = Duration::from_millis(5);
    c.backoff_max = Duration::from_millis(10);
    c.max_attempts = 3;
    let e = Client::new(c).unwrap().chat(&req()).await.unwrap_err();
    match &e {
        ProviderError::Exhausted { attempts, last, .. } => {
            assert_eq!(*attempts, 3);
            assert!(last.contains("connection"), "{last}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_no_key(&e.to_string());
    assert_no_key(&format!("{e:?}"));
}

#[tokio::test]
async fn length_finish_is_returned_not_retried() {
    let server = MockServer::start().await;
    let mut body = ok_body("{\"answer\": \"trunc");
    body["choices"][0]["finish_reason"] = json!("length");
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .expect(1)
        .mount(&server)
        .await;
    let c = client(&server).chat(&req()).await.unwrap();
    assert_eq!(c.finish_reason.as_deref(), Some("length"));
    assert_eq!(c.content, "{\"answer\": \"trunc");
    assert_eq!(c.attempts, 1);
    assert_eq!(crate::judging::reply::extract_json(&c.content), None);
}

#[tokio::test]
async fn length_finish_with_no_content_is_returned_not_retried() {
    // Reasoning models can spend the whole max_tokens before answering.
    let server = MockServer::start().await;
    let body = json!({"choices": [{"message": {"content": null}, "finish_reason": "length"}],
                      "usage": {"prompt_tokens": 5, "completion_tokens": 300}});
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .expect(1)
        .mount(&server)
        .await;
    let c = client(&server).chat(&req()).await.unwrap();
    assert_eq!(c.content, "");
    assert_eq!(c.completion_tokens, 300);
}

#[tokio::test]
async fn non_json_200_is_retried() {
    let server = MockServer::start().await;
    mount_sequence(
        &server,
        vec![
            ResponseTemplate::new(200).set_body_string("<html>oops</html>"),
            ok(),
        ],
    )
    .await;
    assert_eq!(client(&server).chat(&req()).await.unwrap().attempts, 2);
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let server = MockServer::start().await;
    let other = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ok())
        .expect(0)
        .mount(&other)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(307).insert_header(
            "Location",
            format!("{}/chat/completions", other.uri()).as_str(),
        ))
        .expect(1)
        .mount(&server)
        .await;
    let e = client(&server).chat(&req()).await.unwrap_err();
    assert!(
        matches!(e, ProviderError::Rejected { status: 307, .. }),
        "{e:?}"
    );
    other.verify().await;
}

#[tokio::test]
async fn long_provider_messages_are_truncated() {
    let server = MockServer::start().await;
    let long = "x".repeat(5000);
    Mock::given(method("POST"))
        .respond_with(err(400, json!(400), &long))
        .mount(&server)
        .await;
    let e = client(&server).chat(&req()).await.unwrap_err();
    let shown = e.to_string();
    assert!(shown.len() < 700, "{}", shown.len());
    assert!(shown.contains("xxxx"));
}
