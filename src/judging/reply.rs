//! Reading a model's reply (SPEC §4, §6): the JSON inside it (plain, in a
//! fenced block, or after prose), validated against the scenario's schema,
//! and the reply's text for the judge and the keyword quality scores.

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
    let Some(value) = crate::openrouter::extract_json(content) else {
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

/// The start of `s` on one line: whitespace runs collapsed, at most `max`
/// characters, `…` when cut. The one excerpt of a reply, error or rubric
/// that errors, reports and warnings show.
pub fn excerpt(s: &str, max: usize) -> String {
    let mut out = String::new();
    let mut chars = 0;
    for word in s.split_whitespace() {
        if chars > 0 {
            out.push(' ');
            chars += 1;
        }
        for c in word.chars() {
            if chars == max {
                out.push('…');
                return out;
            }
            out.push(c);
            chars += 1;
        }
    }
    out
}

/// The text of a reply for the judge and the quality scores: the `response`
/// field of a structured reply, else the whole text.
pub fn reply_text<'a>(content: &'a str, parsed: Option<&'a Value>) -> &'a str {
    parsed
        .and_then(|v| v.get("response"))
        .and_then(Value::as_str)
        .unwrap_or(content)
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
}
