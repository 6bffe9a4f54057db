//! A 2xx chat completion in its common shape, read straight into types: no
//! `Value` tree (an order-keeping map a level, each key a string hashed
//! with SipHash), only the fields `classify` reads. Parsing the envelope
//! into a `Value` and reading it back was 5-6 % of a run's CPU on the calls
//! (issue 45).
//!
//! Anything else (an error, content in parts, a count or cost written as
//! text, an implausible cost, a duplicated field, an empty reply to retry)
//! is left to the `Value` path, [`super::classify::classify`], and both end
//! in the same [`answered`]: the outcome of a reply this module reads is
//! the outcome `classify` gives it (`tests::the_fast_path_answers_as_classify_does`).

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::classify::{Answer, CostField, Outcome, answered, plausible_cost};
use super::reply::Completion;

#[derive(Deserialize)]
struct Envelope<'a> {
    // Borrowed strings: one with an escape fails the parse, and the reply
    // takes the `Value` path (ids, models and providers have none).
    #[serde(borrow, default)]
    id: Option<&'a str>,
    #[serde(borrow, default)]
    provider: Option<&'a str>,
    #[serde(borrow, default)]
    model: Option<&'a str>,
    #[serde(borrow)]
    choices: Vec<Choice<'a>>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    message: Option<Message<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<&'a str>,
    /// Any `error` that is not null sends the reply down the `Value` path.
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(default)]
    content: Option<String>,
    #[serde(borrow, default)]
    refusal: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default)]
    reasoning_details: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    tool_calls: Option<Vec<IgnoredAny>>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: Option<f64>,
    #[serde(default)]
    completion_tokens: Option<f64>,
    #[serde(default)]
    prompt_tokens_details: Option<Details>,
    #[serde(default)]
    completion_tokens_details: Option<Details>,
    #[serde(default)]
    cost: Option<f64>,
    #[serde(default)]
    cost_details: Option<CostDetails>,
    #[serde(default)]
    is_byok: Option<bool>,
}

#[derive(Deserialize)]
struct Details {
    #[serde(default)]
    cached_tokens: Option<f64>,
    #[serde(default)]
    reasoning_tokens: Option<f64>,
}

#[derive(Deserialize)]
struct CostDetails {
    #[serde(default)]
    upstream_inference_cost: Option<f64>,
}

/// Past this many `[` and `{` the reply takes the `Value` path: serde_json
/// skips an ignored field without its depth limit (128), which parsing into
/// a `Value` keeps.
const MAX_OPENINGS: usize = 100;

/// The completion a 2xx reply (`status`) in the common shape answers;
/// `None` for any other reply, which `classify` reads. `text` is the body
/// after redaction, with no `\u` escape (one could hide the key from it:
/// such a reply is scrubbed as a `Value`).
pub(super) fn success(status: u16, text: &str, empty_is_answer: bool) -> Option<Completion> {
    if memchr::memchr2_iter(b'[', b'{', text.as_bytes())
        .nth(MAX_OPENINGS)
        .is_some()
    {
        return None;
    }
    let Envelope {
        id,
        provider,
        model,
        choices,
        usage,
    } = serde_json::from_str(text).ok()?;
    let Choice {
        mut message,
        finish_reason,
        error,
    } = choices.into_iter().next()?;
    if error.is_some() || finish_reason == Some("error") {
        return None;
    }
    let content = message.as_mut().and_then(|m| m.content.take());
    let usage = usage.as_ref();
    let plausible = |c: Option<f64>| match c {
        None => Some(CostField::Plausible(None)),
        // An implausible cost is read (and warned of) by `classify`.
        Some(c) => plausible_cost(c).map(|c| CostField::Plausible(Some(c))),
    };
    let cost = plausible(usage.and_then(|u| u.cost))?;
    let upstream_cost = plausible(
        usage
            .and_then(|u| u.cost_details.as_ref())
            .and_then(|d| d.upstream_inference_cost),
    )?;
    let message = message.as_ref();
    let reasoning_tokens = usage
        .and_then(|u| u.completion_tokens_details.as_ref())
        .and_then(|d| d.reasoning_tokens);
    let answer = Answer {
        content: content.unwrap_or_default(),
        refusal: message.and_then(|m| m.refusal.as_deref()),
        finish_reason,
        reasoned: message
            .and_then(|m| m.reasoning.as_deref())
            .is_some_and(|r| !r.trim().is_empty())
            || message
                .and_then(|m| m.reasoning_details.as_ref())
                .is_some_and(|d| !d.is_empty())
            || reasoning_tokens.is_some_and(|n| n > 0.0),
        called_tools: message
            .and_then(|m| m.tool_calls.as_ref())
            .is_some_and(|t| !t.is_empty()),
        id,
        provider,
        model,
        prompt_tokens: usage.and_then(|u| u.prompt_tokens),
        completion_tokens: usage.and_then(|u| u.completion_tokens),
        reasoning_tokens,
        cached_tokens: usage
            .and_then(|u| u.prompt_tokens_details.as_ref())
            .and_then(|d| d.cached_tokens),
        cost,
        upstream_cost,
        byok: usage.and_then(|u| u.is_byok) == Some(true),
    };
    match answered(status, answer, empty_is_answer) {
        Outcome::Success(c) => Some(c),
        // An empty reply to retry is read again by `classify`, which also
        // gives what the failed attempt was charged.
        _ => None,
    }
}

#[cfg(test)]
mod tests;
