//! Formatting shared by the text and HTML renderings (and `helmbench
//! view`): percentages and their intervals, differences in points, money,
//! p-values, coverage. Plain text: the pages' template engine escapes it.

/// `79.1 %`, or `n/a`.
pub fn pct(value: Option<f64>) -> String {
    value.map_or_else(|| "n/a".to_string(), |v| format!("{:.1} %", v * 100.0))
}

/// USD with `places` decimals, without the `$`. A value that rounds to
/// zero at that precision is `0.00`: never `-0.000000` (a negative zero
/// from a subtraction) nor a row of zeros.
pub fn usd(value: f64, places: usize) -> String {
    let scale = 10f64.powi(places.min(12) as i32);
    if value.is_finite() && (value * scale).round() == 0.0 {
        return "0.00".to_string();
    }
    format!("{value:.places$}")
}

/// A sum of known costs for a cell, and `unknown` calls beside it: the
/// sum alone when every cost is known, `unknown` when none is (never a $0
/// that reads as free), else the sum `+ unknown`.
pub fn usd_known(value: f64, unknown: i64, places: usize) -> String {
    match unknown {
        0 => usd(value, places),
        _ if value == 0.0 => "unknown".to_string(),
        _ => format!("{} + unknown", usd(value, places)),
    }
}

/// [`usd_known`] in a sentence, with its dollar sign: `$0.0120`,
/// `unknown`, or `$0.0120 + unknown`.
pub fn dollars_known(value: f64, unknown: i64, places: usize) -> String {
    match unknown {
        0 => format!("${}", usd(value, places)),
        _ if value == 0.0 => "unknown".to_string(),
        _ => format!("${} + unknown", usd(value, places)),
    }
}

/// A p-value for a table cell: `0.0213`, or `< 0.0001` below that (never
/// `0.0000`, which reads as impossible).
pub fn p_value(p: f64) -> String {
    if p < 0.0001 {
        "< 0.0001".to_string()
    } else {
        format!("{p:.4}")
    }
}

/// A percentage interval: `71.2–84.0 %`.
pub fn pct_range([lo, hi]: [f64; 2]) -> String {
    format!("{:.1}–{:.1} %", lo * 100.0, hi * 100.0)
}

/// A percentage interval, or `n/a`.
pub fn pct_ci(ci: Option<[f64; 2]>) -> String {
    ci.map_or_else(|| "n/a".into(), pct_range)
}

/// A difference in percentage points: `+12.5`, or `n/a`.
pub fn points(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |v| format!("{:+.1}", v * 100.0))
}

/// An interval of differences in percentage points: `-3.1 to +12.5`, or `n/a`.
pub fn points_ci(ci: Option<[f64; 2]>) -> String {
    ci.map_or_else(
        || "n/a".into(),
        |[lo, hi]| format!("{:+.1} to {:+.1}", lo * 100.0, hi * 100.0),
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_that_rounds_to_zero_has_no_sign() {
        assert_eq!(usd(-0.0, 6), "0.00");
        assert_eq!(usd(-1e-12, 6), "0.00");
        assert_eq!(usd(0.0, 4), "0.00");
        assert_eq!(usd(0.00004, 4), "0.00");
        assert_eq!(usd(0.00123, 4), "0.0012");
        assert_eq!(usd(1.5, 6), "1.500000");
    }

    #[test]
    fn tiny_p_values_say_so() {
        assert_eq!(p_value(0.0), "< 0.0001");
        assert_eq!(p_value(0.00004), "< 0.0001");
        assert_eq!(p_value(0.0213), "0.0213");
        assert_eq!(p_value(1.0), "1.0000");
    }
}
