//! The robustness section of the report page (issue 43): a row per run
//! and variant of the user's words, with each run's worst case.

use maud::{Markup, html};

use super::parts::{header, model_label};
use crate::report::format::{p_value, pct, points, points_ci};
use crate::report::model::ModelReport;
use crate::report::robustness;

/// The section as HTML (`report --format html`), one row per run and
/// variant; nothing without a run that has variants.
pub fn section(models: &[ModelReport]) -> Markup {
    let with: Vec<_> = models
        .iter()
        .filter_map(|m| m.robustness.as_ref().map(|r| (m, r)))
        .collect();
    html! {
        @if !with.is_empty() {
            h2 { "Robustness to variants of the user's words" }
            p.note { (robustness::NOTE) "." }
            table data-table="robustness" {
                (header(&["Model", "Variant", "Pairs", "Passed as written", "Passed varied",
                    "Difference (pts)", "95 % CI", "To fail", "To pass", "p (Holm)",
                    "Score as written", "Score varied"]))
                @for (m, r) in &with {
                    @for v in &r.variants {
                        tr data-variant=(v.variant) data-improved=(v.improved) {
                            td { (model_label(m)) }
                            td { (v.variant) @if v.improved { " " strong { "improved: look" } } }
                            td { (v.pairs) }
                            td { (pct(Some(v.original_pass_rate))) }
                            td { (pct(Some(v.variant_pass_rate))) }
                            td { (points(Some(v.difference))) }
                            td { (points_ci(v.difference_ci)) }
                            td { (v.flipped_to_fail) }
                            td { (v.flipped_to_pass) }
                            td { (p_value(v.p)) " (" (p_value(v.p_holm)) ")" }
                            td { (pct(v.original_score)) }
                            td { (pct(v.variant_score)) }
                        }
                    }
                }
            }
            @for (m, r) in &with {
                p.note {
                    (model_label(m)) ": worst case " (r.robustly_passed) " of " (r.test_cases)
                    " test cases robustly passed (" (pct(Some(r.worst_case_pass_rate))) ")"
                    @if !r.fragile.is_empty() {
                        "; passed as written, failed under a variant: " (r.fragile.join(", "))
                    }
                }
            }
        }
    }
}
