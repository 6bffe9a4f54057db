//! Prompt composition (SPEC §2): scenario, condition, user context (when the
//! test case has one) and perturbation, each already converted to XML at load
//! time, joined by one blank line. Composition is a concatenation so that
//! hundreds of thousands of test cases never re-parse markdown.

use serde_json::Value;

use crate::benchmark::cases::TestCase;

/// The exact user message sent to the model for `case`.
pub fn compose(case: &TestCase<'_>) -> String {
    let mut out = String::new();
    compose_into(case, &mut out);
    out
}

/// Composes into `out` (cleared first), reusing its allocation.
pub fn compose_into(case: &TestCase<'_>, out: &mut String) {
    out.clear();
    out.reserve(
        case.scenario.prompt.len()
            + case.condition.prompt.len()
            + case.user_context.map_or(0, |u| u.prompt.len())
            + case.perturbation.prompt.len()
            + 6,
    );
    let parts = [
        Some(case.scenario.prompt.as_str()),
        Some(case.condition.prompt.as_str()),
        case.user_context.map(|u| u.prompt.as_str()),
        Some(case.perturbation.prompt.as_str()),
    ];
    for part in parts.into_iter().flatten() {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(part);
    }
}

/// The `response_format` sent with `case`, if its scenario has a schema.
pub fn response_format<'a>(case: &TestCase<'a>) -> Option<&'a Value> {
    case.scenario.response_format.as_ref()
}
