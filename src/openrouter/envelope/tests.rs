use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reqwest::StatusCode;

use super::success;
use crate::openrouter::classify::{Outcome, classify, parse_json};

/// The outcome `classify` gives `text`, as the client calls it.
fn slow(status: u16, text: &str, empty_is_answer: bool) -> Outcome {
    let status = StatusCode::from_u16(status).unwrap();
    classify(status, None, text, parse_json(text), empty_is_answer)
}

/// One of `options`, picked by `rng`: nine times in ten one of the first
/// [`USUAL`] (the forms providers send), else any.
fn pick<'a>(rng: &mut ChaCha8Rng, options: &[&'a str]) -> &'a str {
    let from = if rng.random_range(0..10) == 0 {
        options.len()
    } else {
        USUAL.min(options.len())
    };
    options[rng.random_range(0..from)]
}

/// How many forms at the head of each list below are the usual ones.
const USUAL: usize = 4;

/// A field `"key":value` or nothing (`value` empty).
fn field(key: &str, value: &str) -> Option<String> {
    (!value.is_empty()).then(|| format!("{key:?}:{value}"))
}

fn object(fields: impl IntoIterator<Item = Option<String>>) -> String {
    let fields: Vec<String> = fields.into_iter().flatten().collect();
    format!("{{{}}}", fields.join(","))
}

/// Numbers as providers write them, and the forms `classify` reads
/// otherwise (text, out of range, the wrong type).
const NUMBERS: &[&str] = &[
    "",
    "null",
    "14",
    "60",
    "0",
    "1.5",
    "-3",
    "1e3",
    "2.5E-4",
    "0.0001",
    "\"14\"",
    "\" 7 \"",
    "1e400",
    "true",
    "{}",
    "[]",
    "18446744073709551616",
    "-0",
];
const COSTS: &[&str] = &[
    "",
    "null",
    "0.0001",
    "0.25",
    "0",
    "1e-7",
    "-0.5",
    "-0",
    "1000000",
    "\"0.002\"",
    "\"NaN\"",
    "1e400",
    "{}",
    "true",
];
const TEXTS: &[&str] = &[
    "\"I'm here to listen.\"",
    "\"{\\\"category\\\":\\\"HANDOFF\\\",\\\"response\\\":\\\"Please call\\\\nnow\\\"}\"",
    "\"line\\nbreak \\\"quoted\\\" \\\\ tab\\t\"",
    "\"caf\u{e9} \u{2014} \u{1f49c}\"",
    "",
    "null",
    "\"\"",
    "\"  \"",
    "[\"a\",{\"type\":\"text\",\"text\":\"b\"}]",
    "42",
    "{}",
];
const NAMES: &[&str] = &[
    "\"gen-123\"",
    "\"  Mock  \"",
    "",
    "null",
    "\"\"",
    "\"a\\/b\"",
    "7",
    "\"openai/gpt-4o\"",
];
const FINISH: &[&str] = &[
    "\"stop\"",
    "\"length\"",
    "",
    "null",
    "\"content_filter\"",
    "\"error\"",
    "\"tool_calls\"",
    "3",
];
const LISTS: &[&str] = &["", "null", "[]", "[{\"id\":\"x\"}]", "[1,2]", "{}", "\"x\""];
const BOOLS: &[&str] = &["", "null", "true", "false", "\"true\"", "1"];
const ERRORS: &[&str] = &[
    "",
    "",
    "",
    "null",
    "{\"code\":502,\"message\":\"upstream\"}",
    "\"oops\"",
];

fn usage(rng: &mut ChaCha8Rng) -> String {
    let details = |rng: &mut ChaCha8Rng, key: &str| match rng.random_range(0..4) {
        0 => String::new(),
        1 => "null".into(),
        2 => "7".into(),
        _ => object([field(key, pick(rng, NUMBERS))]),
    };
    let cost_details = match rng.random_range(0..3) {
        0 => String::new(),
        1 => "null".into(),
        _ => object([field("upstream_inference_cost", pick(rng, COSTS))]),
    };
    object([
        field("prompt_tokens", pick(rng, NUMBERS)),
        field("completion_tokens", pick(rng, NUMBERS)),
        field("total_tokens", pick(rng, NUMBERS)),
        field("cost", pick(rng, COSTS)),
        field("is_byok", pick(rng, BOOLS)),
        field(
            "prompt_tokens_details",
            &details(&mut *rng, "cached_tokens"),
        ),
        field(
            "completion_tokens_details",
            &details(&mut *rng, "reasoning_tokens"),
        ),
        field("cost_details", &cost_details),
    ])
}

fn reply(rng: &mut ChaCha8Rng) -> String {
    let message = match rng.random_range(0..16) {
        0 => String::new(),
        1 => "null".into(),
        _ => object([
            field("role", "\"assistant\""),
            field("content", pick(rng, TEXTS)),
            field("refusal", pick(rng, TEXTS)),
            field("reasoning", pick(rng, TEXTS)),
            field("reasoning_details", pick(rng, LISTS)),
            field("tool_calls", pick(rng, LISTS)),
        ]),
    };
    let choice = object([
        field("index", "0"),
        field("finish_reason", pick(rng, FINISH)),
        field("message", &message),
        field("error", pick(rng, ERRORS)),
    ]);
    let choices = match rng.random_range(0..20) {
        0 => String::new(),
        1 => "[]".into(),
        2 => format!("[{choice},{{\"index\":1}}]"),
        3 => "{}".into(),
        _ => format!("[{choice}]"),
    };
    let usage = match rng.random_range(0..10) {
        0 => String::new(),
        1 => "null".into(),
        _ => usage(rng),
    };
    let mut fields = vec![
        field("id", pick(rng, NAMES)),
        field("provider", pick(rng, NAMES)),
        field("model", pick(rng, NAMES)),
        field("object", "\"chat.completion\""),
        field("choices", &choices),
        field("usage", &usage),
        field("error", pick(rng, ERRORS)),
    ];
    // A duplicated field: the `Value` path keeps the last.
    if rng.random_range(0..12) == 0 {
        fields.push(field("model", pick(rng, NAMES)));
    }
    if rng.random_range(0..12) == 0 {
        fields.swap(0, 4);
    }
    object(fields)
}

/// Every reply the typed path answers is answered as `classify` answers it
/// (the whole `Completion`, costs and counts included), over 20,000
/// replies built from the forms each field takes; and it does answer most
/// of the well-formed ones, so the check is not vacuous.
#[test]
fn the_fast_path_answers_as_classify_does() {
    let mut rng = ChaCha8Rng::seed_from_u64(45);
    let (mut answered, mut total) = (0, 0);
    for _ in 0..20_000 {
        let text = reply(&mut rng);
        let status = if rng.random_range(0..10) == 0 {
            201
        } else {
            200
        };
        let empty_is_answer = rng.random_range(0..2) == 0;
        total += 1;
        let Some(fast) = success(status, &text, empty_is_answer) else {
            continue;
        };
        answered += 1;
        match slow(status, &text, empty_is_answer) {
            Outcome::Success(c) => assert_eq!(
                format!("{fast:?}"),
                format!("{c:?}"),
                "the two paths read {text} differently"
            ),
            _ => panic!("the fast path answered {text}, classify did not"),
        }
    }
    assert!(
        answered * 10 > total,
        "the fast path answered only {answered} of {total} replies"
    );
}

#[test]
fn a_common_reply_takes_the_fast_path() {
    let text = r#"{"id":"gen-mock-1","provider":"Mock","model":"a/b","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"{\"category\":\"HANDOFF\"}"}}],"usage":{"prompt_tokens":14,"completion_tokens":60,"total_tokens":74,"cost":0.0001,"is_byok":true,"cost_details":{"upstream_inference_cost":0.002},"completion_tokens_details":{"reasoning_tokens":3},"prompt_tokens_details":{"cached_tokens":4}}}"#;
    let c = success(200, text, false).expect("the common shape is read");
    assert_eq!(c.content, r#"{"category":"HANDOFF"}"#);
    assert_eq!(c.generation_id.as_deref(), Some("gen-mock-1"));
    assert_eq!(c.served_model.as_deref(), Some("a/b"));
    assert_eq!((c.prompt_tokens, c.completion_tokens), (14, 60));
    assert_eq!((c.reasoning_tokens, c.cached_prompt_tokens), (3, 4));
    assert_eq!(c.cost_usd, 0.0001);
    assert_eq!(c.byok_cost_usd, 0.002);
}

/// What only `classify` reads: errors, text counts, implausible costs,
/// content in parts, escaped names, duplicated fields, empty replies to
/// retry, and nesting past serde_json's depth limit.
#[test]
fn other_replies_are_left_to_classify() {
    let ok =
        |choice: &str, usage: &str| format!(r#"{{"id":"g","choices":[{choice}],"usage":{usage}}}"#);
    let message = r#"{"finish_reason":"stop","message":{"content":"hi"}}"#;
    assert!(success(200, &ok(message, r#"{"cost":0.1}"#), false).is_some());
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    for text in [
        ok(
            r#"{"finish_reason":"error","message":{"content":"hi"}}"#,
            "{}",
        ),
        ok(
            r#"{"finish_reason":"stop","error":{"code":502},"message":{"content":"hi"}}"#,
            "{}",
        ),
        ok(message, r#"{"prompt_tokens":"14"}"#),
        ok(message, r#"{"cost":-1}"#),
        ok(message, r#"{"cost":1e400}"#),
        ok(message, r#"{"cost":"0.1"}"#),
        ok(
            r#"{"finish_reason":"stop","message":{"content":[{"text":"hi"}]}}"#,
            "{}",
        ),
        ok(r#"{"finish_reason":"stop","message":{"content":""}}"#, "{}"),
        r#"{"id":"a\/b","choices":[{"message":{"content":"hi"}}]}"#.to_string(),
        r#"{"model":"a","model":"b","choices":[{"message":{"content":"hi"}}]}"#.to_string(),
        format!(r#"{{"extra":{deep},"choices":[{message}]}}"#),
        r#"{"choices":[]}"#.to_string(),
        "not json".to_string(),
    ] {
        assert!(success(200, &text, false).is_none(), "{text}");
    }
}
