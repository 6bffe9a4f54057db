//! The Test case page, reviewer first (issue 44): the user's message and
//! the reply at the top, side by side on a wide screen, with the verdict
//! and why, the behaviour's name once, and the label panel; then each
//! judge's verdict and justification; then, collapsed, everything else
//! stored about the result (the composed prompt, the schema, the check's
//! details, the raw and parsed reply, tokens, cost, latency, what served
//! it, retries); previous and next within the results filter it was opened
//! from, and the same case in the other runs side by side.

use std::sync::Arc;

use axum::extract::{Extension, Path, Query, State};
use maud::{Markup, html};
use serde_json::Value;

use super::label::label_panel;
use super::layout::{Nav, inline, page, reply_shown, status_badge, text_block};
use super::results::FilterQuery;
use super::security::Session;
use super::state::{App, PageError};
use crate::domain::{CaseDetail, RowKey};
use crate::report::usd;

/// A stored JSON text, pretty-printed (as is when it is not JSON).
fn pretty(json: &str) -> String {
    serde_json::from_str::<Value>(json)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| json.to_string())
}

/// Why the verdict is what it is, in a sentence: the check, what it
/// expected and what the reply gave, or the error.
fn why(d: &CaseDetail) -> String {
    let evaluation: Value = serde_json::from_str(&d.evaluation).unwrap_or(Value::Null);
    let kind = evaluation["type"].as_str().unwrap_or("check");
    let details: Value = d
        .evaluation_details
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or(Value::Null);
    if let Some(kind) = &d.error_kind
        && kind != "format"
    {
        return format!(
            "no verdict: {kind} error{}",
            d.error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        );
    }
    let mut out = kind.to_string();
    if let Some(field) = details.get("field").and_then(Value::as_str) {
        out.push_str(&format!(" on field `{field}`"));
    }
    if let Some(expected) = details.get("expected") {
        out.push_str(&format!("; expected {expected}"));
    }
    if let Some(actual) = details.get("actual") {
        out.push_str(&format!("; got {actual}"));
    }
    if let Some(m) = d.matched {
        out.push_str(if m {
            "; the check held"
        } else {
            "; the check did not hold"
        });
    }
    out.push_str(&format!(
        " (base severity {}: {})",
        d.base_severity,
        if d.base_severity < 0.0 {
            "the model should not raise the flag"
        } else {
            "the model should raise the flag"
        }
    ));
    if let Some(e) = &d.error {
        out.push_str(&format!("; {e}"));
    }
    out
}

/// The user's message as it was sent: the perturbation's text from the
/// benchmark folder when the composed prompt ends with it (content changed
/// since, or a variant, and it is not what was sent), else the prompt's
/// last XML section (`<user_input>…</user_input>`, an H2 of the
/// perturbation), else none.
fn user_message(app: &App, d: &CaseDetail) -> Option<String> {
    let prompt = d.prompt.trim_end();
    let from_benchmark = app
        .benchmark
        .as_ref()
        .and_then(|b| b.scenario(&d.scenario))
        .and_then(|s| {
            s.perturbations
                .iter()
                .find(|p| p.code == d.perturbation || p.full_code == d.perturbation)
        })
        .map(|p| p.prompt.trim())
        .filter(|text| !text.is_empty() && prompt.ends_with(text));
    if let Some(text) = from_benchmark {
        return Some(text.to_string());
    }
    let close_start = prompt.rfind("</")?;
    let tag = prompt[close_start + 2..].strip_suffix('>')?;
    if tag.is_empty() || !tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let open = format!("<{tag}>");
    let start = prompt[..close_start].rfind(&open)?;
    Some(prompt[start..].to_string())
}

/// A text of the exchange at the top: open, or closed until clicked when
/// the session keeps texts collapsed (the "Texts" switch: they are about
/// suicide and self-harm).
fn shown(what: &str, text: &str, collapsed: bool) -> Markup {
    html! {
        @if collapsed {
            details.text { summary { "Show " (what) } pre dir="auto" { bdi { (text) } } }
        } @else {
            pre dir="auto" { bdi { (text) } }
        }
    }
}

fn facts(d: &CaseDetail) -> Markup {
    html! {
        table.facts {
            tr { th { "Model" } td { (inline(&d.model)) } th { "Run" } td { a href={ "/runs/" (d.run_id) } { "run " (d.run_id) } } }
            tr { th { "Pillar / behaviour" } td { (inline(&d.pillar)) " / " (inline(&d.behaviour)) }
                 th { "Scenario" } td { (inline(&d.scenario)) } }
            tr { th { "Condition / context / perturbation" }
                 td { (inline(&d.condition)) " / " (inline(d.user_context.as_deref().unwrap_or("none"))) " / " (inline(&d.perturbation)) }
                 th { "Base severity / difficulty" } td { (d.base_severity) " / " (d.difficulty) } }
            tr { th { "Tokens (prompt / completion / reasoning)" }
                 td { (d.prompt_tokens) " / " (d.completion_tokens) " / " (d.reasoning_tokens) }
                 th { "Cost (USD)" } td { @if d.cost_unknown { "unknown" } @else { (usd(d.cost_usd, 6)) } @if d.cached { " (reused reply)" } } }
            tr { th { "Latency" } td { @if let Some(ms) = d.latency_ms { (ms) " ms" } @else { "—" } }
                 th { "Attempts" } td { (d.attempts) @if d.attempts > 1 { " (" (d.attempts - 1) " retried)" } } }
            tr { th { "Served model / provider" }
                 td { (inline(d.served_model.as_deref().unwrap_or("not recorded"))) " / " (inline(d.provider.as_deref().unwrap_or("not recorded"))) }
                 th { "Finish reason" } td { (inline(d.finish_reason.as_deref().unwrap_or("—"))) } }
            tr { th { "Stored" } td { (d.created_at) } th { "Provider error type" } td { (inline(d.error_type.as_deref().unwrap_or("—"))) } }
        }
    }
}

/// `GET /case/{id}`.
pub async fn case_page(
    State(app): State<Arc<App>>,
    Extension(session): Extension<Session>,
    Path(result_id): Path<i64>,
    Query(q): Query<FilterQuery>,
) -> Result<Markup, PageError> {
    let d = app.store.case_detail(result_id).await?;
    let judgements = app.store.case_judgements(result_id).await?;
    let labels = app.store.case_labels(result_id).await?;
    let siblings = app
        .store
        .case_siblings(result_id, &d.test_code, d.repeat_index)
        .await?;
    // Neighbours within the filter the case was opened from, in its run.
    let runs = vec![app.store.run(d.run_id).await?];
    let filter = q.filter(&app, &runs)?;
    let key = RowKey {
        test_code: d.test_code.clone(),
        repeat_index: d.repeat_index,
    };
    let (prev, next) = app.store.view_neighbours(&filter, d.run_id, &key).await?;
    let link = q.link();
    let case_link = |id: i64| format!("/case/{id}?{link}");
    let here = case_link(result_id);
    let collapsed = session.collapse;
    let reply_text = d.response.as_deref().unwrap_or("");
    // What a reviewer reads first: the user's message and the reply (its
    // `response` field when structured); the composed prompt comes after.
    let reply = reply_shown(d.response.as_deref(), d.parsed.as_deref());
    let message = user_message(&app, &d);
    // A conversation (issue 42) shows its transcript in place of the one
    // message and reply.
    let turns = app
        .store
        .turns_of(d.run_id, &d.test_code, d.repeat_index)
        .await?;
    // The original and its variants of the user's words (issue 43).
    let variants = app
        .store
        .case_variants(
            d.run_id,
            crate::benchmark::vary::split_code(&d.test_code).0,
            d.repeat_index,
        )
        .await?;
    let details: Option<Value> = d
        .evaluation_details
        .as_deref()
        .and_then(|t| serde_json::from_str(t).ok());
    let body = html! {
        nav.pager.case-nav {
            a href={ "/results?" (link) } { "↑ Results" }
            @if let Some(p) = prev { " " a rel="prev" href=(case_link(p)) { "← Previous (k)" } }
            @if let Some(n) = next { " " a rel="next" href=(case_link(n)) { "Next (j) →" } }
        }
        h1 { (inline(&d.test_code)) @if d.repeat_index > 0 { " #" (d.repeat_index) } " " (status_badge(d.status)) }
        p.behaviour data-behaviour { (inline(&app.behaviour_label(&d.behaviour))) " · " (inline(&d.model)) }
        p.why data-why { strong { "Why: " } (why(&d)) }
        @if !turns.is_empty() {
            (super::transcript::transcript(&turns, details.as_ref(), collapsed))
        } @else {
        div.exchange {
            section.message data-part="message" {
                h2 { "The user's message" }
                @match &message {
                    Some(m) => (shown("the user's message", m, collapsed)),
                    None => p.empty { "Not found apart from the composed prompt (below): the benchmark folder does not hold this perturbation as it was sent." },
                }
            }
            section.reply data-part="reply" {
                h2 { "The reply" }
                @if d.response.is_some() {
                    (shown("the reply", &reply, collapsed))
                } @else {
                    p.empty { "No reply stored." }
                }
                @if let Some(b) = &d.block {
                    details.text open { summary { "Provider block" } pre dir="auto" { bdi { (pretty(b)) } } }
                }
            }
        }
        }
        (label_panel(&app, &session, &d, &judgements, &labels, next.map(case_link), &here))
        (super::variants::section(&variants, result_id, collapsed))
        h2 { "Judges" }
        @if judgements.is_empty() {
            p.empty { "Not judged: the verdict is the deterministic check above." }
        } @else {
            table data-table="judgements" {
                tr { th { "Criterion" } th { "Judge" } th { "Verdict" } th { "Justification" } th { "Tokens" } th { "Cost (USD)" } }
                @for j in &judgements {
                    tr.vote[j.vote] {
                        td { (inline(&j.criterion)) }
                        td { (inline(&j.judge_model)) @if j.vote { br; small { "panel vote" } } }
                        td { (inline(&crate::review::verdict_class(j.verdict.as_deref().and_then(|v| serde_json::from_str::<Value>(v).ok()).as_ref())))
                             @match j.passed { Some(true) => " (pass)", Some(false) => " (fail)", None => "" } }
                        td { @if let Some(t) = j.justification.as_deref().or(j.error.as_deref()) { div.just dir="auto" { bdi { (t) } } } }
                        td.num { (j.prompt_tokens) " / " (j.completion_tokens) }
                        td.num { (usd(j.cost_usd, 6)) }
                    }
                }
            }
        }
        h2 { "Prompt, schema and check" }
        div data-part="prompt" {
            (text_block("Composed prompt, sent as one user message", &d.prompt, true))
        }
        @if let Some(schema) = &d.response_format {
            details.text { summary { "JSON schema of the reply" } pre dir="auto" { bdi { (pretty(schema)) } } }
        }
        details.text { summary { "Evaluation (check)" } pre dir="auto" { bdi { (pretty(&d.evaluation)) } } }
        @if let Some(det) = &d.evaluation_details {
            details.text { summary { "Check details" } pre dir="auto" { bdi { (pretty(det)) } } }
        }
        @if d.response.is_some() {
            (text_block("Raw reply", reply_text, true))
        }
        @if let Some(p) = &d.parsed {
            (text_block("Parsed fields", &pretty(p), true))
        }
        details.text { summary { "Tokens, cost, latency, what served it" } (facts(&d)) }
        h2 { "Same case in other runs" }
        @if siblings.is_empty() {
            p.empty { "No other run has this test case." }
        } @else {
            div.side-by-side {
                @for s in &siblings {
                    section.sibling {
                        h3 { a href={ "/case/" (s.result_id) } { (inline(&s.model)) " · run " (s.run_id) } " " (status_badge(s.status)) }
                        @let text = reply_shown(s.response.as_deref(), s.parsed.as_deref());
                        (text_block("Reply", &text, collapsed))
                    }
                }
            }
        }
    };
    Ok(page(
        &format!("{} · run {}", d.test_code, d.run_id),
        &session,
        Nav::Results,
        &here,
        body,
    ))
}
