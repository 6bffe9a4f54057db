//! Reading one reply of the chat completions API (SPEC §6): success,
//! retryable failure or fatal error, from the status, the headers and the
//! body (errors arrive with an error status or inside a 200), and the
//! provider's own accounting of its cost.

use std::time::Duration;

use crate::domain::{Block, BlockKind};
use crate::openrouter::Completion;
use crate::openrouter::CreditLimit;
use crate::openrouter::ErrorMeta;
use crate::openrouter::MAX_PLAUSIBLE_COST_USD;
use crate::openrouter::ProviderError;
use rand::Rng;
use reqwest::StatusCode;
use serde_json::Value;

/// Longest provider message kept in an error, in characters.
const MAX_MESSAGE_CHARS: usize = 500;

/// What one attempt produced.
pub(super) enum Outcome {
    Success(Completion),
    Retry(RetryableFailure),
    Fatal(ProviderError),
}

#[derive(Default)]
pub(super) struct RetryableFailure {
    pub(super) status: Option<u16>,
    pub(super) retry_after: Option<Duration>,
    pub(super) reason: String,
    /// The provider's error type and code, kept if the retries run out.
    pub(super) meta: ErrorMeta,
    /// Given up on a timeout after the request went out (not while
    /// connecting): the provider may have generated, and billed, a reply.
    pub(super) maybe_billed: bool,
}

pub(super) fn transport_failure(e: &reqwest::Error) -> RetryableFailure {
    let kind = if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connection error"
    } else if e.is_body() || e.is_decode() {
        "error reading the reply"
    } else {
        "transport error"
    };
    RetryableFailure {
        reason: format!("{kind}: {}", error_chain(e)),
        maybe_billed: e.is_timeout() && !e.is_connect(),
        ..Default::default()
    }
}

/// `e` and its sources on one line (reqwest's top-level message alone is
/// often just "error sending request").
pub(super) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let s_text = s.to_string();
        if !out.contains(&s_text) {
            out.push_str(": ");
            out.push_str(&s_text);
        }
        src = s.source();
    }
    truncate(&out, MAX_MESSAGE_CHARS)
}

/// Retry-After in seconds (integer or decimal). HTTP-date forms are ignored
/// (the exponential backoff applies instead).
pub(super) fn parse_retry_after(v: &str) -> Option<Duration> {
    let secs: f64 = v.trim().parse().ok()?;
    if secs.is_finite() && secs >= 0.0 {
        Some(Duration::from_secs_f64(secs.min(86_400.0)))
    } else {
        None
    }
}

/// `base * 2^n`, capped at `max`, with equal jitter: half the capped delay
/// is kept, the other half is drawn uniformly.
pub(super) fn backoff_delay(base: Duration, max: Duration, n: u32) -> Duration {
    let factor = 2u32.saturating_pow(n.min(30));
    let capped = base.saturating_mul(factor).min(max);
    let half = capped / 2;
    let jitter_ms = half.as_millis() as u64;
    let extra = if jitter_ms == 0 {
        Duration::ZERO
    } else {
        Duration::from_millis(rand::rng().random_range(0..=jitter_ms))
    };
    half + extra
}

/// Parsed `{"error": {...}}` object, tolerant of every field's type.
pub(super) struct ApiError {
    pub(super) code: Option<String>,
    pub(super) message: String,
    /// `metadata.limit_source` (402 in-flight budget vs. real lack of credits).
    pub(super) limit_source: Option<String>,
    /// `metadata.reason` (`in_flight_budget_exhausted`, `weight_exceeds_budget`).
    pub(super) reason: Option<String>,
    /// `metadata.error_type` and `metadata.provider_code`.
    pub(super) meta: ErrorMeta,
    /// `metadata.retry_after_seconds`, a fallback for the header.
    pub(super) retry_after: Option<Duration>,
    /// What a moderation flag, a guardrail, a content policy or a refusal
    /// said; None for any other error.
    pub(super) block: Option<Block>,
}

impl ApiError {
    pub(super) fn parse(v: &Value) -> Option<ApiError> {
        let obj = v.as_object()?;
        let code = obj.get("code").and_then(|c| match c {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Null => None,
            other => Some(other.to_string()),
        });
        let mut message = match obj.get("message") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        let block = block_of(obj, code.as_deref(), &message);
        let meta = obj.get("metadata").and_then(Value::as_object);
        if let Some(meta) = meta {
            // The generic "Provider returned error" is useless without the
            // upstream's own words.
            if let Some(p) = meta.get("provider_name").and_then(Value::as_str) {
                message.push_str(&format!(" [provider: {p}]"));
            }
            match meta.get("raw") {
                Some(Value::String(raw)) if !raw.is_empty() => {
                    message.push_str(&format!(" [raw: {raw}]"));
                }
                Some(raw @ (Value::Object(_) | Value::Array(_))) => {
                    message.push_str(&format!(" [raw: {raw}]"));
                }
                _ => {}
            }
            if let Some(reasons) = meta.get("reasons").and_then(Value::as_array) {
                let rs: Vec<String> = reasons
                    .iter()
                    .map(|r| r.as_str().map_or_else(|| r.to_string(), str::to_string))
                    .collect();
                if !rs.is_empty() {
                    message.push_str(&format!(" [reasons: {}]", rs.join(", ")));
                }
            }
        }
        if message.trim().is_empty() {
            message = "(no message)".into();
        }
        // A metadata field as text (codes may be numbers), at most 100 chars.
        let text = |k: &str| -> Option<String> {
            match meta?.get(k)? {
                Value::String(s) if !s.trim().is_empty() => Some(truncate(s.trim(), 100)),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            }
        };
        Some(ApiError {
            block,
            code,
            message: truncate(message.trim(), MAX_MESSAGE_CHARS),
            limit_source: text("limit_source"),
            reason: text("reason"),
            meta: ErrorMeta {
                // Chat completions put it in `metadata`; newer error
                // bodies put it on `error` itself.
                error_type: text("error_type").or_else(|| {
                    obj.get("error_type")
                        .and_then(Value::as_str)
                        .filter(|t| !t.trim().is_empty())
                        .map(|t| truncate(t.trim(), 100))
                }),
                provider_code: text("provider_code"),
            },
            retry_after: meta
                .and_then(|m| m.get("retry_after_seconds"))
                .and_then(Value::as_f64)
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(|s| Duration::from_secs_f64(s.min(86_400.0))),
        })
    }

    /// `openrouter_in_flight_budget`: transient, the balance is positive.
    pub(super) fn in_flight(&self) -> bool {
        self.limit_source.as_deref() == Some("openrouter_in_flight_budget")
            || self.reason.as_deref() == Some("in_flight_budget_exhausted")
    }

    /// Which spending limit a refusal names, if any (checked first: a
    /// request too expensive for the budget also says `openrouter_credits`).
    pub(super) fn credit_limit(&self) -> Option<CreditLimit> {
        let said = |v: &str| {
            [
                self.reason.as_deref(),
                self.limit_source.as_deref(),
                self.meta.error_type.as_deref(),
            ]
            .contains(&Some(v))
        };
        if said("weight_exceeds_budget") {
            Some(CreditLimit::RequestTooExpensive)
        } else if said("openrouter_key_limit") {
            Some(CreditLimit::KeyLimit)
        } else if said("openrouter_credits") {
            Some(CreditLimit::Credits)
        } else {
            None
        }
    }

    pub(super) fn numeric_code(&self) -> Option<u16> {
        self.code.as_deref().and_then(|c| c.trim().parse().ok())
    }

    /// "message" or "code X: message".
    pub(super) fn describe(&self) -> String {
        match &self.code {
            Some(c) => format!("code {c}: {}", self.message),
            None => self.message.clone(),
        }
    }
}

/// The block an error object describes, per OpenRouter's documented
/// shapes: `error_type` `refusal` (the model's) or `content_policy_violation`
/// (a provider's content filter), in `metadata` or on the error itself;
/// with code 403, moderation (`metadata.reasons` / `flagged_input`) or a
/// guardrail (`metadata.patterns`, or a "Request blocked" message). A 403
/// for a spent limit or a missing permission is not a block.
fn block_of(
    obj: &serde_json::Map<String, Value>,
    code: Option<&str>,
    message: &str,
) -> Option<Block> {
    let meta = obj.get("metadata").and_then(Value::as_object);
    let field = |k: &str| meta.and_then(|m| m.get(k));
    let error_type = field("error_type")
        .or_else(|| obj.get("error_type"))
        .and_then(Value::as_str);
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|r| r.as_str().map_or_else(|| r.to_string(), str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let text = |k: &str| {
        field(k)
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .map(|s| truncate(s.trim(), MAX_MESSAGE_CHARS))
    };
    let forbidden = code.map(str::trim) == Some("403");
    let kind = match error_type {
        Some("refusal") => BlockKind::Refusal,
        Some("content_policy_violation") => BlockKind::ContentFilter,
        _ if forbidden && (field("reasons").is_some() || field("flagged_input").is_some()) => {
            BlockKind::Moderation
        }
        _ if forbidden
            && (field("patterns").is_some()
                || message.trim_start().starts_with("Request blocked")) =>
        {
            BlockKind::Guardrail
        }
        _ => return None,
    };
    let mut reasons = strings(field("reasons"));
    reasons.extend(strings(field("patterns")));
    Some(Block {
        kind,
        message: truncate(message.trim(), MAX_MESSAGE_CHARS),
        reasons,
        flagged_input: text("flagged_input"),
        provider: text("provider_name"),
        model_slug: text("model_slug"),
    })
}

/// Map one HTTP answer to success, retry or a final error.
/// `parsed` is `text` as JSON, if it is JSON.
/// `empty_is_answer`: a reply with reasoning or tool calls but no content
/// is returned (with [`Completion::empty_because`]) rather than retried as
/// is: a judge's caller asks again with room to answer.
pub(super) fn classify(
    status: StatusCode,
    retry_after_header: Option<Duration>,
    text: &str,
    parsed: Option<Value>,
    empty_is_answer: bool,
) -> Outcome {
    let api_error = parsed
        .as_ref()
        .and_then(|v| v.get("error"))
        .and_then(ApiError::parse);
    let s = status.as_u16();

    if !status.is_success() {
        let (code, message) = match &api_error {
            Some(e) => (e.code.clone(), e.message.clone()),
            None => (None, body_snippet(status, text)),
        };
        let meta = api_error
            .as_ref()
            .map(|e| e.meta.clone())
            .unwrap_or_default();
        let retry_after = retry_after_header.or(api_error.as_ref().and_then(|e| e.retry_after));
        let retry = |reason: String| {
            Outcome::Retry(RetryableFailure {
                status: Some(s),
                retry_after,
                reason,
                meta: meta.clone(),
                maybe_billed: false,
            })
        };
        let limit = api_error.as_ref().and_then(ApiError::credit_limit);
        return match s {
            401 => Outcome::Fatal(ProviderError::Unauthorized { message }),
            402 => {
                // OpenRouter's in-flight spending budget answers 402 with a
                // Retry-After: transient, the balance is positive. The key's
                // limit, the balance, or one request too expensive for the
                // budget stop the run, saying which.
                let in_flight = api_error.as_ref().is_some_and(ApiError::in_flight);
                if in_flight || (retry_after_header.is_some() && limit.is_none()) {
                    retry(format!("HTTP 402 (in-flight budget): {message}"))
                } else {
                    Outcome::Fatal(ProviderError::PaymentRequired {
                        limit: limit.unwrap_or(CreditLimit::Unspecified),
                        message,
                    })
                }
            }
            // A spent key limit may also come as a 403.
            403 if limit == Some(CreditLimit::KeyLimit) => {
                Outcome::Fatal(ProviderError::PaymentRequired {
                    limit: CreditLimit::KeyLimit,
                    message,
                })
            }
            // Moderation, a guardrail, a content policy, a refusal: the
            // answer for this prompt, not a fault; asking again gives the
            // same answer.
            400 | 403 if api_error.as_ref().is_some_and(|e| e.block.is_some()) => {
                let block = api_error.and_then(|e| e.block).expect("checked");
                Outcome::Fatal(ProviderError::Blocked {
                    status: s,
                    block: Box::new(block),
                })
            }
            408 | 429 => retry(http_reason(s, code.as_deref(), &message)),
            500..=599 => retry(http_reason(s, code.as_deref(), &message)),
            _ => {
                let param = parsed
                    .as_ref()
                    .and_then(|v| v.pointer("/error/param"))
                    .and_then(Value::as_str);
                if !status.is_redirection()
                    && let Some(field) = super::openai::refused_field(&message, param)
                {
                    return Outcome::Fatal(ProviderError::WrongApi {
                        field,
                        status: s,
                        message,
                    });
                }
                let message = if status.is_redirection() {
                    format!("unexpected redirect (not followed): {message}")
                } else {
                    message
                };
                Outcome::Fatal(ProviderError::Rejected {
                    status: s,
                    code,
                    message,
                    meta,
                })
            }
        };
    }

    // HTTP 2xx from here on.
    let Some(v) = parsed else {
        return Outcome::Retry(RetryableFailure {
            status: Some(s),
            reason: format!(
                "HTTP {s} with a body that is not JSON: {}",
                body_snippet(status, text)
            ),
            ..Default::default()
        });
    };
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first());

    // Error inside a 200: a top-level `error` and no choices, or a choice
    // that finished with `error` (maybe with its own `error` object).
    let choice_error = choice.filter(|c| {
        c.get("finish_reason").and_then(Value::as_str) == Some("error")
            || c.get("error").is_some_and(|e| e.is_object())
    });
    if choice.is_none() || choice_error.is_some() {
        let err = choice_error
            .and_then(|c| c.get("error"))
            .and_then(ApiError::parse)
            .or(api_error);
        let Some(err) = err else {
            let what = if choice.is_none() {
                "no choices"
            } else {
                "finish_reason \"error\" without details"
            };
            return Outcome::Retry(RetryableFailure {
                status: Some(s),
                reason: format!("HTTP {s} with {what}: {}", body_snippet(status, text)),
                ..Default::default()
            });
        };
        let limit = err.credit_limit();
        return match err.numeric_code() {
            Some(401) => Outcome::Fatal(ProviderError::Unauthorized {
                message: err.message,
            }),
            Some(402) if !err.in_flight() => Outcome::Fatal(ProviderError::PaymentRequired {
                limit: limit.unwrap_or(CreditLimit::Unspecified),
                message: err.message,
            }),
            Some(403) if limit == Some(CreditLimit::KeyLimit) => {
                Outcome::Fatal(ProviderError::PaymentRequired {
                    limit: CreditLimit::KeyLimit,
                    message: err.message,
                })
            }
            Some(c @ (400 | 403)) if err.block.is_some() => {
                Outcome::Fatal(ProviderError::Blocked {
                    status: c,
                    block: Box::new(err.block.expect("checked")),
                })
            }
            Some(c @ (400 | 403 | 404)) => Outcome::Fatal(ProviderError::Rejected {
                status: c,
                code: err.code,
                message: err.message,
                meta: err.meta,
            }),
            _ => Outcome::Retry(RetryableFailure {
                status: Some(s),
                retry_after: err.retry_after,
                reason: format!("error inside HTTP {s} reply: {}", err.describe()),
                meta: err.meta,
                maybe_billed: false,
            }),
        };
    }
    let choice = choice.expect("checked above");
    answered(s, answer_of(&v, choice), empty_is_answer)
}

/// What a 2xx reply with a first choice that is not an error says: read
/// from its parsed `Value` ([`answer_of`]) or straight into types by
/// `super::envelope` (the common shape, issue 45), and turned into the
/// outcome by one function ([`answered`]) either way.
pub(super) struct Answer<'a> {
    /// `message.content` as text ([`content_text`]).
    pub(super) content: String,
    /// `message.refusal`, when a string.
    pub(super) refusal: Option<&'a str>,
    pub(super) finish_reason: Option<&'a str>,
    /// It reasoned: `message.reasoning` is text that is not blank,
    /// `message.reasoning_details` is not empty, or
    /// `usage.completion_tokens_details.reasoning_tokens` is a number above 0.
    pub(super) reasoned: bool,
    /// `message.tool_calls` is not empty.
    pub(super) called_tools: bool,
    /// Top-level `id`, `provider` and `model`, when strings.
    pub(super) id: Option<&'a str>,
    pub(super) provider: Option<&'a str>,
    pub(super) model: Option<&'a str>,
    /// `usage` counts: a number, or (from a `Value`) a numeric string.
    pub(super) prompt_tokens: Option<f64>,
    pub(super) completion_tokens: Option<f64>,
    pub(super) reasoning_tokens: Option<f64>,
    pub(super) cached_tokens: Option<f64>,
    /// `usage.cost` and `usage.cost_details.upstream_inference_cost`.
    pub(super) cost: CostField<'a>,
    pub(super) upstream_cost: CostField<'a>,
    /// `usage.is_byok` is `true`.
    pub(super) byok: bool,
}

/// A cost field of a reply, read (with [`reply_cost`]'s warning) only when
/// the reply is an answer.
pub(super) enum CostField<'a> {
    /// As parsed: any JSON, or absent.
    Json(Option<&'a Value>),
    /// Already a plausible cost (or absent): `reply_cost` would return it.
    Plausible(Option<f64>),
}

impl CostField<'_> {
    fn read(&self, field: &str) -> Option<f64> {
        match self {
            CostField::Json(v) => reply_cost(*v, field),
            CostField::Plausible(c) => *c,
        }
    }
}

/// [`Answer`] of a parsed reply and its first choice.
fn answer_of<'a>(v: &'a Value, choice: &'a Value) -> Answer<'a> {
    let message = choice.get("message");
    let field = |k: &str| message.and_then(|m| m.get(k));
    let usage = v.get("usage");
    let num = |path: &[&str]| -> Option<f64> {
        let mut cur = usage?;
        for p in path {
            cur = cur.get(p)?;
        }
        match cur {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    };
    // `get` chains, not `pointer`: a pointer path is parsed (and its
    // tokens allocated) on every reply (issue 45).
    let reasoning_tokens = usage
        .and_then(|u| u.get("completion_tokens_details"))
        .and_then(|d| d.get("reasoning_tokens"));
    Answer {
        content: field("content").map(content_text).unwrap_or_default(),
        refusal: field("refusal").and_then(Value::as_str),
        finish_reason: choice.get("finish_reason").and_then(Value::as_str),
        reasoned: field("reasoning")
            .and_then(Value::as_str)
            .is_some_and(|r| !r.trim().is_empty())
            || field("reasoning_details")
                .and_then(Value::as_array)
                .is_some_and(|d| !d.is_empty())
            || reasoning_tokens
                .and_then(Value::as_f64)
                .is_some_and(|n| n > 0.0),
        called_tools: field("tool_calls")
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty()),
        id: v.get("id").and_then(Value::as_str),
        provider: v.get("provider").and_then(Value::as_str),
        model: v.get("model").and_then(Value::as_str),
        prompt_tokens: num(&["prompt_tokens"]),
        completion_tokens: num(&["completion_tokens"]),
        reasoning_tokens: num(&["completion_tokens_details", "reasoning_tokens"]),
        cached_tokens: num(&["prompt_tokens_details", "cached_tokens"]),
        cost: CostField::Json(usage.and_then(|u| u.get("cost"))),
        upstream_cost: CostField::Json(
            usage
                .and_then(|u| u.get("cost_details"))
                .and_then(|d| d.get("upstream_inference_cost")),
        ),
        byok: matches!(
            usage.and_then(|u| u.get("is_byok")),
            Some(Value::Bool(true))
        ),
    }
}

/// The outcome of a 2xx reply whose first choice is not an error.
pub(super) fn answered(s: u16, a: Answer<'_>, empty_is_answer: bool) -> Outcome {
    let mut content = a.content;
    let finish_reason = a.finish_reason.map(str::to_string);
    if content.trim().is_empty() {
        // A structured-output refusal comes back in `message.refusal` with no
        // content; for a safety benchmark that refusal is the answer.
        if let Some(refusal) = a.refusal.filter(|r| !r.trim().is_empty()) {
            content = refusal.to_string();
        }
    }
    let final_empty_ok = matches!(finish_reason.as_deref(), Some("length" | "content_filter"));
    // Why a reply has no content: it only reasoned, or it only called tools.
    let empty_because = content
        .trim()
        .is_empty()
        .then_some(())
        .and(if a.called_tools {
            Some("tool calls only".to_string())
        } else if a.reasoned {
            Some("reasoning only".to_string())
        } else {
            None
        });
    if content.trim().is_empty() && !final_empty_ok && !(empty_is_answer && empty_because.is_some())
    {
        return Outcome::Retry(RetryableFailure {
            status: Some(s),
            reason: format!(
                "empty content (finish_reason {})",
                finish_reason.as_deref().unwrap_or("null")
            ),
            ..Default::default()
        });
    }
    let cost = a.cost.read("usage.cost");
    let upstream_cost = a
        .upstream_cost
        .read("usage.cost_details.upstream_inference_cost");
    // Who served the reply, as text, at most 200 characters.
    let served = |v: Option<&str>| {
        v.map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| truncate(s, 200))
    };
    Outcome::Success(Completion {
        generation_id: a.id.map(str::to_string),
        content,
        finish_reason,
        provider: served(a.provider),
        served_model: served(a.model),
        prompt_tokens: a.prompt_tokens.map_or(0, |n| n as i64),
        completion_tokens: a.completion_tokens.map_or(0, |n| n as i64),
        reasoning_tokens: a.reasoning_tokens.map_or(0, |n| n.max(0.0) as i64),
        cached_prompt_tokens: a.cached_tokens.map_or(0, |n| n.max(0.0) as i64),
        cost_usd: cost.unwrap_or(0.0),
        reported_cost_usd: cost.filter(|c| !c.is_nan()),
        upstream_cost_usd: upstream_cost.filter(|c| !c.is_nan()),
        attempts: 0,
        latency_ms: 0,
        byok_cost_usd: if a.byok {
            upstream_cost.filter(|c| c.is_finite()).unwrap_or(0.0)
        } else {
            0.0
        },
        empty_because,
    })
}

/// A cost field of a reply, in USD: None when absent or null; the number
/// when it is finite, at least 0 and at most [`MAX_PLAUSIBLE_COST_USD`]
/// (a numeric string counts); NaN, with a warning, for anything else
/// (`"NaN"`, `inf`, a negative or absurd figure, text, an object): the
/// cost is unknown, and is stored and counted as such.
pub fn reply_cost(v: Option<&Value>, field: &str) -> Option<f64> {
    let v = v.filter(|v| !v.is_null())?;
    let n = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    if let Some(c) = n.and_then(plausible_cost) {
        return Some(c);
    }
    tracing::warn!(
        field,
        reported = %truncate(&v.to_string(), 80),
        "the provider reported a cost that is not a number from 0 to {MAX_PLAUSIBLE_COST_USD} USD; it is recorded as unknown"
    );
    Some(f64::NAN)
}

/// A cost that is finite, at least 0 and at most [`MAX_PLAUSIBLE_COST_USD`].
pub(super) fn plausible_cost(c: f64) -> Option<f64> {
    (c.is_finite() && (0.0..=MAX_PLAUSIBLE_COST_USD).contains(&c)).then(|| c.max(0.0))
}

/// `message.content` as text: a string, or the text parts of an array.
pub(super) fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.as_str()),
                other => other.get("text").and_then(Value::as_str),
            })
            .collect(),
        _ => String::new(),
    }
}

pub(super) fn http_reason(status: u16, code: Option<&str>, message: &str) -> String {
    match code {
        Some(c) if c != status.to_string() => format!("HTTP {status} (code {c}): {message}"),
        _ => format!("HTTP {status}: {message}"),
    }
}

/// A reply body as JSON. A number too large for an f64 (`"cost": 1e400`)
/// is valid JSON that serde_json refuses: it is read as the text it was
/// written as (a cost then counts as unknown), and the reply is kept.
pub(super) fn parse_json(text: &str) -> Option<Value> {
    let mut owned: Option<String> = None;
    // A bounded number of such numbers per reply.
    for _ in 0..16 {
        let cur = owned.as_deref().unwrap_or(text);
        let e = match serde_json::from_str(cur) {
            Ok(v) => return Some(v),
            Err(e) if e.to_string().starts_with("number out of range") => e,
            Err(_) => return None,
        };
        // The error's line and column (1-based, in bytes) point into the
        // number: widen to the whole of it and quote it.
        let line_start = cur
            .split_inclusive('\n')
            .take(e.line().saturating_sub(1))
            .map(str::len)
            .sum::<usize>();
        let at = (line_start + e.column().saturating_sub(1)).min(cur.len());
        let bytes = cur.as_bytes();
        let is_num = |b: u8| b.is_ascii_digit() || b"+-.eE".contains(&b);
        let start = (0..at).rev().take_while(|&i| is_num(bytes[i])).last()?;
        let end = (start..bytes.len())
            .find(|&i| !is_num(bytes[i]))
            .unwrap_or(bytes.len());
        owned = Some(format!(
            "{}\"{}\"{}",
            &cur[..start],
            &cur[start..end],
            &cur[end..]
        ));
    }
    None
}

pub(super) fn body_snippet(status: StatusCode, text: &str) -> String {
    let t = text.trim();
    // Bytes that are not text (a compressed or binary body) are never
    // printed: they would garble the terminal.
    if t.contains('\u{FFFD}') || t.chars().any(|c| c.is_control() && !c.is_whitespace()) {
        return format!("a body of {} bytes that is not text", text.len());
    }
    if t.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("empty reply body")
            .to_string()
    } else {
        truncate(t, MAX_MESSAGE_CHARS)
    }
}

pub(super) fn truncate(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        Some((idx, _)) => format!("{}…", &s[..idx]),
        None => s.to_string(),
    }
}
