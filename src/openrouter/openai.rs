//! The OpenAI-compatible wire format, beside OpenRouter's: what a server
//! that speaks OpenAI's Chat Completions and nothing more (vLLM, llama.cpp,
//! Ollama, a LiteLLM proxy, OpenAI or Azure themselves) is sent, what its
//! replies cost, and what to say when a strict server refuses one of
//! OpenRouter's fields. Whether it honours a JSON schema: `probe.rs`.

use reqwest::header::HeaderMap;
use serde::Serialize;
use serde_json::Value;

use super::wire::rest_text;
use super::{Completion, MAX_PLAUSIBLE_COST_USD};
use crate::domain::{Api, ModelEntry};

/// The fields after the messages of a body with OpenAI's Chat Completions
/// fields only (`user` is added by the request's `body`): no `provider`
/// routing, and `reasoning_effort` in place of OpenRouter's `reasoning`
/// object (only its `effort` has an OpenAI counterpart; the preflight
/// refuses the rest). Field order is fixed, as the reply cache is keyed by
/// these bytes. See [`rest_text`].
pub(super) fn rest(m: &ModelEntry, response_format: Option<&Value>) -> Vec<u8> {
    #[derive(Serialize)]
    struct Body<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        response_format: Option<&'a Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        temperature: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        seed: Option<i64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        max_tokens: Option<u32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning_effort: Option<&'a str>,
    }
    rest_text(&Body {
        response_format,
        temperature: m.temperature,
        seed: m.seed,
        max_tokens: m.max_tokens,
        reasoning_effort: m.reasoning.as_ref().and_then(|r| r.effort.as_deref()),
    })
}

/// What in `entry` an OpenAI-compatible server could not be sent: OpenRouter's
/// `provider` routing, and any `reasoning` setting but `effort`. Each is a
/// reason to refuse the run (it would be silently dropped otherwise).
pub fn unsendable(entry: &ModelEntry) -> Vec<&'static str> {
    let mut out = Vec::new();
    if entry.provider.is_some() {
        out.push("provider");
    }
    if let Some(r) = &entry.reasoning {
        if r.max_tokens.is_some() {
            out.push("reasoning.max_tokens");
        }
        if r.exclude.is_some() {
            out.push("reasoning.exclude");
        }
        if r.enabled.is_some() {
            out.push("reasoning.enabled");
        }
    }
    out
}

/// A LiteLLM proxy's `x-litellm-response-cost` header: its own figure for
/// a reply, in USD (absent, or 0, for a model it has no price for).
pub(super) fn header_cost(headers: &HeaderMap) -> Option<f64> {
    headers
        .get("x-litellm-response-cost")?
        .to_str()
        .ok()?
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|c| c.is_finite() && (0.0..=MAX_PLAUSIBLE_COST_USD).contains(c))
}

/// Sets what a reply of `entry` cost when it is an OpenAI-compatible model:
/// its tokens at the models.yml `price`, else the server's own figure
/// (`usage.cost`, LiteLLM's header), else unknown (NaN: stored as unknown,
/// never as $0). OpenRouter's replies carry their cost already.
pub fn price_reply(c: &mut Completion, entry: &ModelEntry, api: Api) {
    if api != Api::OpenaiCompatible {
        return;
    }
    c.cost_usd = match (entry.price, c.reported_cost_usd) {
        (Some(p), _) => p.cost(c.prompt_tokens, c.completion_tokens),
        (None, Some(reported)) => reported,
        (None, None) => f64::NAN,
    };
    c.upstream_cost_usd = None;
    c.byok_cost_usd = 0.0;
}

/// A strict server's refusal of a field it does not know (OpenAI's
/// "Unrecognized request argument supplied: provider"; "Extra inputs are
/// not permitted" with the field in `param`): the field, when it is one
/// only OpenRouter takes.
pub(super) fn refused_field(message: &str, param: Option<&str>) -> Option<String> {
    const OURS: [&str; 3] = ["provider", "reasoning", "usage"];
    let named = message
        .split("Unrecognized request argument supplied:")
        .nth(1)
        .map(|rest| {
            rest.trim()
                .trim_matches(|c: char| !c.is_alphanumeric() && c != '_')
                .to_string()
        })
        .or_else(|| {
            param
                .filter(|_| message.contains("Extra inputs are not permitted"))
                .map(str::to_string)
        })?;
    OURS.contains(&named.as_str()).then_some(named)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Price, Reasoning};
    use serde_json::json;

    #[test]
    fn the_body_has_openai_fields_only() {
        let m = ModelEntry {
            temperature: Some(0.0),
            seed: Some(7),
            max_tokens: Some(100),
            reasoning: Some(Reasoning {
                effort: Some("low".into()),
                ..Default::default()
            }),
            ..ModelEntry::new("llama3")
        };
        let fmt = json!({"type": "json_schema"});
        let got = crate::openrouter::ChatRequest {
            history: &[],
            model: &m,
            prompt: "hi",
            response_format: Some(&fmt),
            api: Api::OpenaiCompatible,
            user: None,
        }
        .to_json();
        assert_eq!(
            got,
            r#"{"model":"llama3","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema"},"temperature":0.0,"seed":7,"max_tokens":100,"reasoning_effort":"low"}"#
        );
    }

    #[test]
    fn cost_is_the_price_else_the_servers_figure_else_unknown() {
        let mut c = Completion {
            generation_id: None,
            content: String::new(),
            finish_reason: None,
            provider: None,
            served_model: None,
            prompt_tokens: 1_000_000,
            completion_tokens: 500_000,
            reasoning_tokens: 0,
            cached_prompt_tokens: 0,
            cost_usd: 0.0,
            reported_cost_usd: None,
            upstream_cost_usd: None,
            attempts: 1,
            latency_ms: 0,
            byok_cost_usd: 0.0,
            empty_because: None,
        };
        let mut m = ModelEntry::new("x");
        price_reply(&mut c, &m, Api::OpenaiCompatible);
        assert!(c.cost_usd.is_nan());
        c.reported_cost_usd = Some(0.25);
        price_reply(&mut c, &m, Api::OpenaiCompatible);
        assert_eq!(c.cost_usd, 0.25);
        m.price = Some(Price {
            prompt_per_mtok: 2.0,
            completion_per_mtok: 4.0,
        });
        price_reply(&mut c, &m, Api::OpenaiCompatible);
        assert!((c.cost_usd - 4.0).abs() < 1e-12);
        // OpenRouter's own figure is left as it is.
        c.cost_usd = 0.5;
        price_reply(&mut c, &m, Api::OpenRouter);
        assert_eq!(c.cost_usd, 0.5);
    }

    #[test]
    fn a_strict_refusal_names_our_field() {
        assert_eq!(
            refused_field("Unrecognized request argument supplied: provider", None).as_deref(),
            Some("provider")
        );
        assert_eq!(
            refused_field("Extra inputs are not permitted", Some("usage")).as_deref(),
            Some("usage")
        );
        assert_eq!(
            refused_field("Unrecognized request argument supplied: foo", None),
            None
        );
        assert_eq!(refused_field("model not found", Some("model")), None);
    }

    #[test]
    fn only_effort_of_reasoning_can_be_sent() {
        let m = ModelEntry {
            reasoning: Some(Reasoning {
                effort: Some("low".into()),
                max_tokens: Some(10),
                ..Default::default()
            }),
            ..ModelEntry::new("x")
        };
        assert_eq!(unsendable(&m), vec!["reasoning.max_tokens"]);
    }
}
