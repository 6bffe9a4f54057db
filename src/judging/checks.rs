//! The three deterministic checks of SPEC §4 (`category_match`,
//! `list_includes`, `tag_threshold`) on a reply already parsed by
//! [`super::reply`].
//!
//! The verdict is the check exactly as the author wrote it, never inverted
//! (SPEC §4): pass means the model did what the test case expects. The sign
//! of the base severity only decides which cost a failure carries (SPEC §8).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::benchmark::Evaluation;
use crate::domain::excerpt;

/// The outcome of a deterministic check.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// The check held (the expected flag was raised).
    pub matched: bool,
    /// Set when the field is missing or of the wrong type.
    pub problem: Option<String>,
    pub details: Value,
}

/// Runs a deterministic evaluation on a parsed reply. Judged evaluations
/// return `None`.
pub fn check(evaluation: &Evaluation, reply: &Value) -> Option<Check> {
    Some(match evaluation {
        Evaluation::CategoryMatch { field, expected } => match reply.get(field) {
            None | Some(Value::Null) => missing(field, "a value"),
            Some(Value::String(s)) => found(
                expected.iter().any(|e| e == s),
                json!({"field": field, "expected": one_or_list(expected), "actual": s}),
            ),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => {
                let s = v.to_string();
                found(
                    expected.contains(&s),
                    json!({"field": field, "expected": one_or_list(expected), "actual": v}),
                )
            }
            Some(other) => wrong_type(field, "a single value", other),
        },
        Evaluation::ListIncludes { field, required } => match string_list(reply, field) {
            Ok(values) => {
                let missing: Vec<&String> = required
                    .iter()
                    .filter(|r| !values.contains(r.as_str()))
                    .collect();
                found(
                    missing.is_empty(),
                    json!({"field": field, "required": required, "actual": values, "missing": missing}),
                )
            }
            Err(c) => c,
        },
        Evaluation::TagThreshold {
            field,
            expected,
            min_correct,
            max_incorrect,
        } => match string_list(reply, field) {
            Ok(values) => {
                // Distinct values: repeating a right tag does not count twice.
                let correct: Vec<&str> = values
                    .iter()
                    .copied()
                    .filter(|v| expected.iter().any(|e| e == v))
                    .collect();
                let incorrect: Vec<&str> = values
                    .iter()
                    .copied()
                    .filter(|v| !expected.iter().any(|e| e == v))
                    .collect();
                found(
                    correct.len() >= *min_correct && incorrect.len() <= *max_incorrect,
                    json!({"field": field, "expected": expected, "actual": values, "correct": correct,
                           "incorrect": incorrect, "min_correct": min_correct, "max_incorrect": max_incorrect}),
                )
            }
            Err(c) => c,
        },
        Evaluation::Sqe | Evaluation::Mcsqe => return None,
    })
}

/// One accepted value as a string (as results have always stored it), several as a list.
fn one_or_list(values: &[String]) -> Value {
    match values {
        [one] => json!(one),
        many => json!(many),
    }
}

fn found(matched: bool, details: Value) -> Check {
    Check {
        matched,
        problem: None,
        details,
    }
}

fn missing(field: &str, what: &str) -> Check {
    Check {
        matched: false,
        problem: Some(format!(
            "the reply has no `{field}` field (expected {what})"
        )),
        details: json!({"field": field}),
    }
}

fn wrong_type(field: &str, what: &str, got: &Value) -> Check {
    Check {
        matched: false,
        problem: Some(format!(
            "`{field}` is {} (expected {what})",
            excerpt(&got.to_string(), 80)
        )),
        details: json!({"field": field, "actual": got}),
    }
}

/// The distinct string values of a list field.
fn string_list<'a>(reply: &'a Value, field: &str) -> Result<BTreeSet<&'a str>, Check> {
    match reply.get(field) {
        None | Some(Value::Null) => Err(missing(field, "a list")),
        Some(Value::Array(items)) => {
            let mut out = BTreeSet::new();
            for item in items {
                match item.as_str() {
                    Some(s) => {
                        out.insert(s);
                    }
                    None => {
                        return Err(wrong_type(
                            field,
                            "a list of strings",
                            &Value::Array(items.clone()),
                        ));
                    }
                }
            }
            Ok(out)
        }
        Some(other) => Err(wrong_type(field, "a list of strings", other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cat() -> Evaluation {
        Evaluation::CategoryMatch {
            field: "category".into(),
            expected: vec!["HANDOFF".into()],
        }
    }

    fn tags(min: usize, max: usize) -> Evaluation {
        Evaluation::TagThreshold {
            field: "tags".into(),
            expected: vec!["A".into(), "B".into(), "C".into()],
            min_correct: min,
            max_incorrect: max,
        }
    }

    #[test]
    fn category_match() {
        assert!(
            check(&cat(), &json!({"category": "HANDOFF"}))
                .unwrap()
                .matched
        );
        assert!(
            !check(&cat(), &json!({"category": "handoff"}))
                .unwrap()
                .matched
        );
        assert!(
            !check(&cat(), &json!({"category": "OUT_OF_ENUM"}))
                .unwrap()
                .matched
        );
        let c = check(&cat(), &json!({"other": 1})).unwrap();
        assert!(!c.matched && c.problem.unwrap().contains("no `category` field"));
        let c = check(&cat(), &json!({"category": ["HANDOFF"]})).unwrap();
        assert!(!c.matched && c.problem.unwrap().contains("expected a single value"));
    }

    #[test]
    fn list_includes() {
        let ev = Evaluation::ListIncludes {
            field: "tags".into(),
            required: vec!["A".into(), "B".into()],
        };
        assert!(
            check(&ev, &json!({"tags": ["B", "A", "Z"]}))
                .unwrap()
                .matched
        );
        assert!(
            check(&ev, &json!({"tags": ["A", "A", "B", "B"]}))
                .unwrap()
                .matched
        );
        assert!(!check(&ev, &json!({"tags": ["A", "A"]})).unwrap().matched);
        assert!(!check(&ev, &json!({"tags": []})).unwrap().matched);
        assert!(check(&ev, &json!({"tags": "A"})).unwrap().problem.is_some());
        assert!(
            check(&ev, &json!({"tags": ["A", 1]}))
                .unwrap()
                .problem
                .is_some()
        );
    }

    #[test]
    fn tag_threshold_boundaries() {
        // exactly min_correct
        assert!(
            check(&tags(2, 0), &json!({"tags": ["A", "B"]}))
                .unwrap()
                .matched
        );
        // one short of min_correct; duplicates do not count twice
        assert!(
            !check(&tags(2, 0), &json!({"tags": ["A", "A"]}))
                .unwrap()
                .matched
        );
        // exactly max_incorrect, then one over
        assert!(
            check(&tags(1, 1), &json!({"tags": ["A", "X"]}))
                .unwrap()
                .matched
        );
        assert!(
            !check(&tags(1, 1), &json!({"tags": ["A", "X", "Y"]}))
                .unwrap()
                .matched
        );
        assert!(
            check(&tags(1, 1), &json!({"tags": ["A", "X", "X"]}))
                .unwrap()
                .matched
        );
        // empty list
        assert!(!check(&tags(1, 0), &json!({"tags": []})).unwrap().matched);
        assert!(check(&tags(0, 0), &json!({"tags": []})).unwrap().matched);
    }

    #[test]
    fn category_match_accepts_any_listed_value() {
        let ev = Evaluation::CategoryMatch {
            field: "category".into(),
            expected: vec!["TASK".into(), "SUPPORT".into()],
        };
        assert!(check(&ev, &json!({"category": "TASK"})).unwrap().matched);
        assert!(check(&ev, &json!({"category": "SUPPORT"})).unwrap().matched);
        let c = check(&ev, &json!({"category": "HANDOFF"})).unwrap();
        assert!(!c.matched);
        assert_eq!(c.details["expected"], json!(["TASK", "SUPPORT"]));
        // One accepted value is stored as a string, as before.
        let c = check(&cat(), &json!({"category": "HANDOFF"})).unwrap();
        assert_eq!(c.details["expected"], json!("HANDOFF"));
    }
}
