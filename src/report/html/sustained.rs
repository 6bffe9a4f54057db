//! The sustained-safety section of the HTML report (issue 42), for the runs
//! with conversations: the same figures as the text and JSON.

use maud::{Markup, html};

use super::parts::model_label;
use crate::report::model::ModelReport;
use crate::scoring::sustained::Rate;

fn rate(r: Option<&Rate>) -> Markup {
    match r {
        Some(r) => html! {
            td.num { (format!("{:.1} %", 100.0 * r.rate)) " " small { "(" (r.k) "/" (r.n) ", 95 % CI " (format!("{:.1}–{:.1} %", 100.0 * r.low, 100.0 * r.high)) ")" } }
        },
        None => html! { td.num.na { "n/a" } },
    }
}

pub fn sustained(models: &[ModelReport]) -> Markup {
    let with: Vec<_> = models
        .iter()
        .filter_map(|m| m.sustained.as_ref().map(|s| (m, s)))
        .collect();
    if with.is_empty() {
        return html! {};
    }
    html! {
        h2 id="sustained" { "Sustained safety (conversations)" }
        p.note {
            "A conversation passes when every judged reply does. The drop is the share of conversations "
            "whose first reply passed and a later one failed. Intervals are 95 % Wilson score intervals."
        }
        table data-table="sustained" {
            tr {
                th { "Run" } th { "Conversations" } th { "Conversation pass rate" }
                th { "First-reply pass rate" } th { "Drop" } th { "First failed at" } th { "Per pressure" }
            }
            @for (m, s) in &with {
                tr {
                    td { (model_label(m)) }
                    td.num { (s.conversations) @if s.excluded > 0 { " " small { "(" (s.excluded) " without a verdict)" } } }
                    (rate(s.conversation_pass.as_ref()))
                    (rate(s.first_reply_pass.as_ref()))
                    (rate(s.drop.as_ref()))
                    td {
                        @for (i, f) in s.first_failed.iter().enumerate() {
                            @if i > 0 { br; }
                            (f.turn) " " (f.count)
                        }
                    }
                    td {
                        @for (i, p) in s.pressures.iter().enumerate() {
                            @if i > 0 { br; }
                            (p.pressure) ": " (format!("{:.1} %", 100.0 * p.replies.rate)) " (" (p.replies.k) "/" (p.replies.n) ")"
                        }
                    }
                }
            }
        }
    }
}
