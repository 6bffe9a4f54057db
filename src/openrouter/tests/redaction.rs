//! The key never shows: not in logs, errors or `Debug` output; and the
//! client's defaults and configuration checks.

use super::*;
use std::fmt;

use crate::openrouter::classify::{backoff_delay, parse_retry_after};

/// Collects every tracing event's fields as text.
struct Capture(Arc<Mutex<Vec<String>>>);

struct FieldText(String);

impl tracing::field::Visit for FieldText {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut t = FieldText(String::new());
        span.record(&mut t);
        self.0.lock().unwrap().push(t.0);
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut t = FieldText(String::new());
        values.record(&mut t);
        self.0.lock().unwrap().push(t.0);
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut t = FieldText(format!("{} ", event.metadata().level()));
        event.record(&mut t);
        self.0.lock().unwrap().push(t.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[tokio::test]
async fn retry_logs_never_contain_the_key() {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let _guard = tracing::subscriber::set_default(Capture(lines.clone()));
    let server = MockServer::start().await;
    mount_sequence(
        &server,
        vec![
            err(500, json!(500), &format!("echo {KEY}")),
            err(429, json!(429), "slow"),
            ok(),
        ],
    )
    .await;
    let c = client(&server).chat(&req()).await.unwrap();
    assert_eq!(c.attempts, 3);
    let lines = lines.lock().unwrap();
    let warns: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("INFO") && l.contains("retrying"))
        .collect();
    assert_eq!(warns.len(), 2, "{lines:?}");
    assert!(
        warns[0].contains("attempt=1") && warns[0].contains("status=500"),
        "{}",
        warns[0]
    );
    assert!(warns[0].contains("delay_ms=") && warns[0].contains("openai/gpt-4o-mini"));
    for l in lines.iter() {
        assert_no_key(l);
    }
}

#[tokio::test]
async fn echoed_key_is_scrubbed_from_errors() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(err(403, json!(403), &format!("key {KEY} is blocked")))
        .mount(&server)
        .await;
    let e = client(&server).chat(&req()).await.unwrap_err();
    assert_no_key(&e.to_string());
    assert_no_key(&format!("{e:?}"));
    assert!(e.to_string().contains("<redacted>"));
}

#[test]
fn debug_output_never_contains_the_key() {
    let mut c = ClientConfig::new(DEFAULT_BASE_URL, KEY);
    c.title = Some("helmbench".into());
    let shown = format!("{c:?}");
    assert!(shown.contains("api_key: <redacted>"), "{shown}");
    assert_no_key(&shown);
    let client = Client::new(c).unwrap();
    assert_no_key(&format!("{client:?}"));

    let errors = [
        ProviderError::Unauthorized {
            message: "m".into(),
        },
        ProviderError::PaymentRequired {
            limit: CreditLimit::Unspecified,
            message: "m".into(),
        },
        ProviderError::Rejected {
            status: 400,
            code: Some("400".into()),
            message: "m".into(),
            meta: ErrorMeta::default(),
        },
        ProviderError::Exhausted {
            attempts: 3,
            last: "m".into(),
            meta: ErrorMeta::default(),
        },
        ProviderError::Config("m".into()),
    ];
    let kinds: Vec<&str> = errors.iter().map(ProviderError::kind).collect();
    assert_eq!(
        kinds,
        [
            "unauthorized",
            "payment_required",
            "rejected",
            "exhausted",
            "config"
        ]
    );
    for e in &errors {
        assert_no_key(&format!("{e:?}"));
        assert_no_key(&e.to_string());
    }
}

#[test]
fn config_errors_do_not_echo_the_key() {
    let bad = ClientConfig::new(DEFAULT_BASE_URL, "sk-or-SECRET\nX-Injected: 1");
    let e = Client::new(bad).unwrap_err();
    assert!(matches!(e, ProviderError::Config(_)));
    assert_no_key(&e.to_string());
    assert_no_key(&format!("{e:?}"));

    assert!(matches!(
        Client::new(ClientConfig::new(DEFAULT_BASE_URL, "  ")),
        Err(ProviderError::Config(_))
    ));
    assert!(matches!(
        Client::new(ClientConfig::new("openrouter.ai/api/v1", KEY)),
        Err(ProviderError::Config(_))
    ));
    let mut zero = ClientConfig::new(DEFAULT_BASE_URL, KEY);
    zero.max_attempts = 0;
    assert!(matches!(Client::new(zero), Err(ProviderError::Config(_))));
}

#[test]
fn defaults() {
    let c = ClientConfig::new(DEFAULT_BASE_URL, KEY);
    assert_eq!(c.request_timeout, Duration::from_secs(120));
    assert_eq!(c.max_attempts, 6);
    assert_eq!(c.max_total, Duration::from_secs(600));
    assert_eq!(c.backoff_base, Duration::from_secs(1));
    assert_eq!(c.backoff_max, Duration::from_secs(60));
    assert_eq!(DEFAULT_BASE_URL, "https://openrouter.ai/api/v1");
}

#[test]
fn backoff_grows_and_is_capped() {
    let base = Duration::from_millis(100);
    let max = Duration::from_millis(1000);
    for _ in 0..50 {
        let d0 = backoff_delay(base, max, 0);
        assert!(d0 >= Duration::from_millis(50) && d0 <= base, "{d0:?}");
        let d2 = backoff_delay(base, max, 2);
        assert!(
            d2 >= Duration::from_millis(200) && d2 <= Duration::from_millis(400),
            "{d2:?}"
        );
        let d20 = backoff_delay(base, max, 20);
        assert!(d20 >= Duration::from_millis(500) && d20 <= max, "{d20:?}");
        assert!(backoff_delay(base, max, u32::MAX) <= max);
    }
}

#[test]
fn retry_after_parsing() {
    assert_eq!(parse_retry_after("17"), Some(Duration::from_secs(17)));
    assert_eq!(
        parse_retry_after(" 1.5 "),
        Some(Duration::from_millis(1500))
    );
    assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    assert_eq!(parse_retry_after("-3"), None);
}

#[test]
fn a_key_escaped_in_part_is_scrubbed() {
    let key = "sk-or-v1-abc/def&ghi";
    let r = crate::openrouter::redact::Redactor::new(key);
    for echoed in [
        "sk-or-v1-abc&#x2F;def&amp;ghi",
        "sk-or-v1-abc&#47;def&ghi",
        "sk-or-v1-abc&sol;def&#38;ghi",
        "sk&#45;or-v1-abc/def&amp;ghi",
        "sk-or-v1-abc%2Fdef&ghi",
        "sk-or-v1-abc\\/def\\u0026ghi",
        "sk-or-v1-abc&#X2f;def%26ghi",
    ] {
        let text = format!("error: key {echoed} is invalid");
        assert_eq!(
            r.scrub(&text),
            "error: key <redacted> is invalid",
            "{echoed}"
        );
        let mut v = serde_json::json!({"message": text});
        r.scrub_value(&mut v);
        assert_eq!(v["message"], "error: key <redacted> is invalid");
    }
    // Text that only looks like escapes is left alone.
    let text = "a &amp; b %20 c \\u0041 sk-or-v1-abc&#x2F;XXX";
    assert_eq!(r.scrub(text), text);
}
