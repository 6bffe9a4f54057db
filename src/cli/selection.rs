//! Parsing what the command line selects and bounds: selectors,
//! concurrency, budgets. Each value is checked here once; nothing
//! downstream re-checks it.

use crate::benchmark::cases::Selector;
use crate::{Error, Result};

/// `--concurrency`: 1 to [`crate::run::MAX_CONCURRENCY`], checked here once.
pub fn parse_concurrency(s: &str) -> std::result::Result<std::num::NonZeroUsize, String> {
    let max = crate::run::MAX_CONCURRENCY;
    s.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .and_then(std::num::NonZeroUsize::new)
        .ok_or_else(|| format!("{s:?} is not a whole number from 1 to {max}"))
}

/// Selectors from the command line, comma-separated within an argument.
/// An empty or blank piece (`""`, `" "`, `","`, `"P1,"`) is a usage error:
/// dropping it could leave no selector at all, which means every test case.
pub fn parse_selectors(raw: &[String]) -> Result<Vec<Selector>> {
    raw.iter()
        .flat_map(|arg| arg.split(',').map(move |piece| (arg, piece)))
        .map(|(arg, piece)| {
            if piece.trim().is_empty() {
                return Err(Error::Usage(format!(
                    "empty selector in {arg:?} (expected codes such as P1, P1-B2 or P1-B2-S1, comma-separated)"
                )));
            }
            Selector::parse(piece).map_err(Error::Usage)
        })
        .collect()
}

/// A finite amount of USD above zero.
pub fn parse_budget(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of USD"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("{s:?} is not a finite amount of USD above 0"));
    }
    Ok(v)
}
