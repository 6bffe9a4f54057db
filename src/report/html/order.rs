//! The order the report page lists things in: behaviours and pillars in
//! natural code order over every model, breakdown keys with `none` first.

use std::cmp::Ordering;

use crate::benchmark::codes::natural_cmp;
use crate::report::model::ModelReport;
use crate::scoring::analysis::BehaviourScore;

pub fn find_behaviour<'a>(m: &'a ModelReport, code: &str) -> Option<&'a BehaviourScore> {
    m.analysis.behaviours.iter().find(|b| b.code == code)
}

/// Every behaviour code of every model, in natural order.
pub fn behaviour_codes(models: &[ModelReport]) -> Vec<&str> {
    union_sorted(
        models
            .iter()
            .flat_map(|m| m.analysis.behaviours.iter().map(|b| b.code.as_str())),
    )
}

pub fn union_sorted<'a>(codes: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut codes: Vec<&str> = codes.collect();
    codes.sort_by(|a, b| natural_cmp(a, b));
    codes.dedup();
    codes
}

/// Breakdown keys: `none` (no user context) first, then codes in natural order.
pub fn key_cmp(a: &str, b: &str) -> Ordering {
    (a != "none")
        .cmp(&(b != "none"))
        .then_with(|| natural_cmp(a, b))
}
