//! A component's (or a turn's) `evaluation:` frontmatter: the scenario's
//! evaluation keys it overrides for the replies it takes part in (SPEC §4).

use serde_json::Value;

use super::error::ContentError;
use super::files::json_type;
use crate::benchmark::{Component, EvalOverride, Evaluation};

/// One component's `evaluation:` frontmatter, checked against the keys the
/// scenario's evaluation type can override.
pub(super) fn parse_override(
    c: &Component,
    ev: &Evaluation,
    errors: &mut Vec<ContentError>,
) -> Option<EvalOverride> {
    let block = c.metadata.get("evaluation")?;
    let mut fail = |msg: String| {
        errors.push(
            ContentError::new(&c.source, msg)
                .at(c.line)
                .in_section(c.section_label()),
        );
        None
    };
    let Value::Object(block) = block else {
        return fail(format!(
            "`evaluation` is a {} (expected a mapping of the keys this {} overrides, e.g. `evaluation: {{expected: ...}}`)",
            json_type(block),
            c.kind.as_str()
        ));
    };
    let allowed: &[&str] = match ev {
        Evaluation::CategoryMatch { .. } => &["expected"],
        Evaluation::ListIncludes { .. } => &["required"],
        Evaluation::TagThreshold { .. } => &["expected", "min_correct", "max_incorrect"],
        Evaluation::Sqe | Evaluation::Mcsqe => &[],
    };
    for key in block.keys() {
        if !allowed.contains(&key.as_str()) {
            let expected = if allowed.is_empty() {
                "none: the rubric decides a judged evaluation".to_string()
            } else {
                allowed.join(", ")
            };
            return fail(format!(
                "`evaluation.{key}` cannot be overridden by a {} of a {} scenario (expected: {expected})",
                c.kind.as_str(),
                ev.type_name()
            ));
        }
    }
    let list = |key: &str| -> Result<Option<Vec<String>>, String> {
        match block.get(key) {
            None => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(vec![s.clone()])),
            Some(Value::Array(items)) if !items.is_empty() => items
                .iter()
                .map(|v| match v {
                    Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
                    Value::Number(_) | Value::Bool(_) => Ok(v.to_string()),
                    other => Err(format!(
                        "`evaluation.{key}` holds {other} (expected non-empty strings)"
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(format!(
                "`evaluation.{key}` is {other} (expected a value or a non-empty list of values)"
            )),
        }
    };
    let count = |key: &str| -> Result<Option<usize>, String> {
        match block.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64().map(|v| v as usize)),
            Some(other) => Err(format!(
                "`evaluation.{key}` is {other} (expected a whole number of 0 or more)"
            )),
        }
    };
    let parsed = (|| -> Result<EvalOverride, String> {
        Ok(EvalOverride {
            expected: list("expected")?,
            required: list("required")?,
            min_correct: count("min_correct")?,
            max_incorrect: count("max_incorrect")?,
        })
    })();
    match parsed {
        Ok(o) if o == EvalOverride::default() => None,
        Ok(o) => Some(o),
        Err(msg) => fail(msg),
    }
}
