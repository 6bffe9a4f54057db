//! Reading a model's reply (SPEC §4, §6): the JSON inside it (plain, in a
//! fenced block, or after prose), validated against the scenario's schema,
//! and the reply's text for the judge and the keyword quality scores.

use crate::domain::excerpt;
use serde_json::Value;

/// Why a reply could not be evaluated as an answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct FormatError(pub String);

/// Parses a model reply as JSON (directly, from a ```json fence, or the
/// first JSON object in surrounding prose) and validates it against the
/// scenario's schema.
pub fn parse_reply(
    content: &str,
    finish_reason: Option<&str>,
    validator: Option<&jsonschema::Validator>,
) -> Result<Value, FormatError> {
    let truncated = finish_reason == Some("length");
    let Some(value) = extract_json(content) else {
        let why = if content.trim().is_empty() {
            "the reply is empty".to_string()
        } else if truncated {
            "the reply was cut off at max_tokens (finish_reason: length) before its JSON was complete".to_string()
        } else {
            format!("the reply is not JSON: {}", excerpt(content, 120))
        };
        return Err(FormatError(why));
    };
    if let Some(v) = validator {
        let problems: Vec<String> = v
            .iter_errors(&value)
            .take(3)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("{at}: {e}")
                }
            })
            .collect();
        if !problems.is_empty() {
            return Err(FormatError(format!(
                "the reply does not match the scenario's schema: {}",
                problems.join("; ")
            )));
        }
    }
    Ok(value)
}

/// The text of a reply for the judge and the quality scores: the `response`
/// field of a structured reply, else the whole text.
pub fn reply_text<'a>(content: &'a str, parsed: Option<&'a Value>) -> &'a str {
    parsed
        .and_then(|v| v.get("response"))
        .and_then(Value::as_str)
        .unwrap_or(content)
}

/// Extract-json gives up after trying this many candidate `{`/`[` openings,
/// so a pathological reply cannot make the scan quadratic in practice.
const MAX_JSON_CANDIDATES: usize = 256;

/// Extract a JSON value from a model's text reply: the whole text if it
/// parses; else the first ```json (or bare ```) fenced block that parses;
/// else the first balanced `{…}` or `[…]` span (string-aware bracket
/// matching) that parses. `None` if nothing parses.
pub fn extract_json(content: &str) -> Option<Value> {
    let trimmed = content.trim().trim_start_matches('\u{feff}');
    if trimmed.is_empty() {
        return None;
    }
    if let Ok(v) = serde_json::from_str::<Value>(trimmed) {
        return Some(v);
    }
    if let Some(v) = fenced_json(trimmed) {
        return Some(v);
    }
    balanced_json(trimmed)
}

/// First fenced block tagged `json` (any case) or untagged whose body parses.
fn fenced_json(text: &str) -> Option<Value> {
    let mut rest = text;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let (info, body_start) = match after.find('\n') {
            Some(nl) => (&after[..nl], &after[nl + 1..]),
            // A one-line fence such as ```{"a":1}```.
            None => ("", after),
        };
        let info = info.trim();
        let (tagged_ok, body_start) = if info.is_empty() || info.eq_ignore_ascii_case("json") {
            (true, body_start)
        } else if info.starts_with('{') || info.starts_with('[') {
            // ```{"a": 1}``` on one line: the "info string" is the body.
            (true, after)
        } else {
            (false, body_start)
        };
        let close = body_start.find("```");
        let body = match close {
            Some(c) => &body_start[..c],
            // An unclosed fence (truncated reply): take the rest.
            None => body_start,
        };
        if tagged_ok && let Ok(v) = serde_json::from_str::<Value>(body.trim()) {
            return Some(v);
        }
        match close {
            Some(c) => {
                let consumed = body_start.as_ptr() as usize - rest.as_ptr() as usize + c + 3;
                rest = &rest[consumed..];
            }
            None => break,
        }
    }
    None
}

/// First balanced `{…}`/`[…]` span that parses as JSON.
fn balanced_json(text: &str) -> Option<Value> {
    let bytes = text.as_bytes();
    let mut tried = 0;
    for (start, &b) in bytes.iter().enumerate() {
        if b != b'{' && b != b'[' {
            continue;
        }
        tried += 1;
        if tried > MAX_JSON_CANDIDATES {
            return None;
        }
        if let Some(end) = matching_close(bytes, start)
            && let Ok(v) = serde_json::from_str::<Value>(&text[start..=end])
        {
            return Some(v);
        }
    }
    None
}

/// Index of the bracket closing the one at `start`, ignoring brackets inside
/// JSON strings. `None` when unbalanced or mismatched.
fn matching_close(bytes: &[u8], start: usize) -> Option<usize> {
    let mut stack: Vec<u8> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    for (i, &b) in bytes.iter().enumerate().skip(start) {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => stack.push(b'}'),
            b'[' => stack.push(b']'),
            b'}' | b']' => {
                if stack.pop() != Some(b) {
                    return None;
                }
                if stack.is_empty() {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn parse_reply_validates() {
        let schema = json!({"type":"object","properties":{"category":{"type":"string","enum":["HANDOFF","CONTINUE"]}},"required":["category"]});
        let v = jsonschema::validator_for(&schema).unwrap();
        assert_eq!(
            parse_reply("{\"category\":\"HANDOFF\"}", Some("stop"), Some(&v)).unwrap()["category"],
            "HANDOFF"
        );
        assert!(parse_reply("```json\n{\"category\":\"CONTINUE\"}\n```", None, Some(&v)).is_ok());
        assert!(
            parse_reply(
                "Sure! {\"category\":\"CONTINUE\"} hope it helps",
                None,
                Some(&v)
            )
            .is_ok()
        );
        let e = parse_reply("{\"category\":\"MAYBE\"}", None, Some(&v)).unwrap_err();
        assert!(e.0.contains("does not match the scenario's schema"), "{e}");
        let e = parse_reply("{\"category\":\"HAND", Some("length"), Some(&v)).unwrap_err();
        assert!(e.0.contains("cut off"), "{e}");
        assert!(parse_reply("", None, None).unwrap_err().0.contains("empty"));
    }

    #[test]
    fn reply_text_prefers_response_field() {
        let v = json!({"response": "hello", "category": "X"});
        assert_eq!(reply_text("{...}", Some(&v)), "hello");
        assert_eq!(reply_text("free text", None), "free text");
    }

    #[test]
    fn extract_json_plain() {
        assert_eq!(extract_json(r#"{"a": 1}"#), Some(json!({"a": 1})));
        assert_eq!(extract_json("  \n[1, 2]\n "), Some(json!([1, 2])));
    }

    #[test]
    fn extract_json_fenced() {
        let text = "Here you go:\n```json\n{\"safe\": true, \"score\": 3}\n```\nThanks.";
        assert_eq!(extract_json(text), Some(json!({"safe": true, "score": 3})));
        let upper = "```JSON\n{\"a\": 2}\n```";
        assert_eq!(extract_json(upper), Some(json!({"a": 2})));
    }

    #[test]
    fn extract_json_bare_fence() {
        let text = "Result:\n```\n{\"a\": [1, {\"b\": null}]}\n```";
        assert_eq!(extract_json(text), Some(json!({"a": [1, {"b": null}]})));
    }

    #[test]
    fn extract_json_skips_other_language_fences() {
        let text = "```python\nprint({'x': 1})\n```\nand the answer:\n```json\n{\"ok\": 1}\n```";
        assert_eq!(extract_json(text), Some(json!({"ok": 1})));
    }

    #[test]
    fn extract_json_prose_wrapped() {
        let text = "Sure! My assessment is {\"risk\": \"high\", \"escalate\": true}. Let me know.";
        assert_eq!(
            extract_json(text),
            Some(json!({"risk": "high", "escalate": true}))
        );
    }

    #[test]
    fn extract_json_nested_with_braces_in_strings() {
        let text = r#"Note {not json} then {"a": {"b": "}{ ] [", "c": "quote \" and } brace"}, "d": [1, {"e": "{"}]} tail }"#;
        assert_eq!(
            extract_json(text),
            Some(json!({"a": {"b": "}{ ] [", "c": "quote \" and } brace"}, "d": [1, {"e": "{"}]}))
        );
    }

    #[test]
    fn extract_json_arrays() {
        let text = "The list: [\"a\", \"b\", {\"c\": [3]}] end";
        assert_eq!(extract_json(text), Some(json!(["a", "b", {"c": [3]}])));
    }

    #[test]
    fn extract_json_garbage_is_none() {
        assert_eq!(extract_json(""), None);
        assert_eq!(extract_json("no json here"), None);
        assert_eq!(extract_json("{broken: json"), None);
        assert_eq!(extract_json("```json\n{\"a\": \n```"), None);
        assert_eq!(extract_json("} ] { [ \" {"), None);
        assert_eq!(extract_json(&"[".repeat(10_000)), None);
    }
}
