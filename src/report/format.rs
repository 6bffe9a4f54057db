//! Formatting shared by the text and HTML renderings: percentages, and
//! HTML escaping (every value that reaches a page passes through it).

/// `79.1 %`, or `n/a`.
pub fn pct(value: Option<f64>) -> String {
    value.map_or_else(|| "n/a".to_string(), |v| format!("{:.1} %", v * 100.0))
}

/// Escapes text for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// Coverage beside a score: how many test cases the score is over, and
/// how many had no answer because the provider blocked them or the model
/// refused through an error, and how those entered the score.
pub fn coverage(
    tests: usize,
    scored: usize,
    blocked: usize,
    refused: usize,
    blocked_as: crate::domain::BlockedAs,
) -> String {
    let mut out = format!("scored {scored} of {tests} test cases");
    let mut parts = Vec::new();
    if blocked > 0 {
        parts.push(format!(
            "{blocked} blocked by the provider (moderation, guardrail or content policy)"
        ));
    }
    if refused > 0 {
        parts.push(format!(
            "{refused} refused by the model through a provider error"
        ));
    }
    if !parts.is_empty() {
        out.push_str("; ");
        out.push_str(&parts.join(", "));
        out.push_str(match blocked_as {
            crate::domain::BlockedAs::Exclude => "; left out of the score (--blocked-as exclude)",
            crate::domain::BlockedAs::Fail => {
                "; counted as misses at their severity (--blocked-as fail)"
            }
        });
    }
    out
}
