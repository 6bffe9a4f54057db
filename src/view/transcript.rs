//! A conversation's transcript on its case page (issue 42): the user's
//! messages and the replies as a chat, prefilled replies marked, each live
//! reply with its verdict, its judges' justifications and its cost, and the
//! first failed reply highlighted. Every text goes through maud, escaped by
//! construction (a reply is an attacker's text).

use maud::{Markup, html};
use serde_json::Value;

use super::layout::{inline, reply_shown, text_block};
use crate::domain::TurnRecord;
use crate::report::usd;

/// The verdict of exchange `index` in the conversation's details.
fn verdict_of(details: Option<&Value>, index: i64) -> Option<&Value> {
    details?
        .pointer("/conversation/turns")?
        .as_array()?
        .iter()
        .find(|t| t["index"].as_i64() == Some(index))
}

pub fn transcript(turns: &[TurnRecord], details: Option<&Value>, collapsed: bool) -> Markup {
    let first_failed = details
        .and_then(|d| d.pointer("/conversation/first_failed_turn"))
        .and_then(Value::as_i64);
    html! {
        section.transcript data-part="transcript" {
            h2 { "The conversation" }
            ol.chat {
                @for t in turns {
                    @let name = t.turn_code.clone().unwrap_or_else(|| "message 1".into());
                    li.user data-turn=(name) {
                        p.who {
                            "User · " (inline(&name))
                            @if crate::benchmark::conversation::is_simulated(&name) {
                                " " span.badge.simulated { "simulated user" }
                            }
                            @if let Some(p) = &t.pressure { " · pressure: " (inline(p)) }
                        }
                        (text_block("the user's message", &t.user_message, collapsed && t.turn_index == 0))
                    }
                    @let v = verdict_of(details, t.turn_index);
                    @let failed = first_failed == Some(t.turn_index);
                    li.assistant.prefilled[t.prefilled].first-failed[failed] data-reply=(name) {
                        p.who {
                            "Assistant · "
                            @if t.prefilled {
                                span.badge { "prefilled by the script" }
                            } @else if !t.judged {
                                span.badge { "not judged" }
                            } @else {
                                @match v.and_then(|v| v["passed"].as_bool()) {
                                    Some(true) => span.badge.pass { "pass" },
                                    Some(false) => span.badge.fail { "fail" },
                                    None => span.badge { "no verdict" },
                                }
                            }
                            @if failed { " " strong { "first failed reply" } }
                            @if !t.prefilled {
                                " · $" (usd(t.cost_usd, 6))
                                @if t.cached { " (from the cache)" }
                            }
                        }
                        @let shown = reply_shown(t.response.as_deref(), None);
                        pre dir="auto" { bdi { (shown) } }
                        @for c in v.and_then(|v| v["criteria"].as_array()).into_iter().flatten() {
                            p.criterion {
                                (inline(c["criterion"].as_str().unwrap_or_default())) ": "
                                (inline(&c["verdict"].as_str().map_or_else(|| c["verdict"].to_string(), str::to_string)))
                                @if let Some(j) = c["justification"].as_str().or(c["error"].as_str()) {
                                    " · " span.just dir="auto" { bdi { (j) } }
                                }
                            }
                        }
                        @if let Some(e) = v.and_then(|v| v["error"].as_str()) {
                            p.error { (inline(e)) }
                        }
                    }
                }
            }
        }
    }
}
