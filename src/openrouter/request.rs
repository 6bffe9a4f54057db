//! The one chat request: a model with its `models.yml` settings, the one
//! user message and the response format, serialised straight to the body
//! text OpenRouter is sent (and the cache key is hashed from). Field order
//! is fixed: model, messages, response_format, provider, temperature, seed,
//! max_tokens, reasoning, usage, so a request's bytes, and its cache key,
//! do not change between versions.

use serde::Serialize;
use serde_json::Value;

use crate::domain::{ModelEntry, ProviderPreferences, Reasoning};

/// The top-level parameters a request for `model` carries that a model may
/// or may not take (OpenRouter's `supported_parameters` names): what the
/// preflight checks before anything is paid. `provider` and `usage` are
/// OpenRouter's own, not the model's.
pub fn sent_parameters(model: &ModelEntry, structured: bool) -> Vec<&'static str> {
    let mut out = Vec::new();
    if structured {
        out.push("response_format");
    }
    if model.temperature.is_some() {
        out.push("temperature");
    }
    if model.seed.is_some() {
        out.push("seed");
    }
    if model.max_tokens.is_some() {
        out.push("max_tokens");
    }
    if model.reasoning.is_some() {
        out.push("reasoning");
    }
    out
}

/// One chat completion request, borrowed from what it is built of.
#[derive(Debug, Clone, Copy)]
pub struct ChatRequest<'a> {
    /// The model and the parameters sent with it.
    pub model: &'a ModelEntry,
    /// Sent as the one user message.
    pub prompt: &'a str,
    /// The whole `{"type":"json_schema","json_schema":{…}}` wrapper. When
    /// set, `provider.require_parameters: true` is sent too, so OpenRouter
    /// only routes to providers that honour it.
    pub response_format: Option<&'a Value>,
}

impl ChatRequest<'_> {
    /// The exact body text posted to `/chat/completions`.
    pub fn to_json(&self) -> String {
        #[derive(Serialize)]
        struct Message<'a> {
            role: &'static str,
            content: &'a str,
        }
        #[derive(Serialize)]
        struct Usage {
            include: bool,
        }
        #[derive(Serialize)]
        struct Body<'a> {
            model: &'a str,
            messages: [Message<'a>; 1],
            #[serde(skip_serializing_if = "Option::is_none")]
            response_format: Option<&'a Value>,
            #[serde(skip_serializing_if = "Option::is_none")]
            provider: Option<ProviderBlock<'a>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            temperature: Option<f64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            seed: Option<i64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            max_tokens: Option<u32>,
            #[serde(skip_serializing_if = "Option::is_none")]
            reasoning: Option<&'a Reasoning>,
            usage: Usage,
        }
        let m = self.model;
        let body = Body {
            model: &m.id,
            messages: [Message {
                role: "user",
                content: self.prompt,
            }],
            response_format: self.response_format,
            provider: ProviderBlock::for_request(
                m.provider.as_ref(),
                self.response_format.is_some(),
            ),
            temperature: m.temperature,
            seed: m.seed,
            max_tokens: m.max_tokens,
            reasoning: m.reasoning.as_ref(),
            // OpenRouter now always reports usage on non-streaming replies;
            // the flag is harmless there and still needed by older
            // compatible servers.
            usage: Usage { include: true },
        };
        // Sized for the prompt plus some escaping, the schema and the rest,
        // so the buffer is not regrown while the prompt is written.
        let mut out = Vec::with_capacity(self.prompt.len() * 9 / 8 + 2048);
        // Serialising borrowed strings, numbers and a `Value` cannot fail,
        // and serde_json writes UTF-8.
        match serde_json::to_writer(&mut out, &body) {
            Ok(()) => String::from_utf8(out).unwrap_or_default(),
            Err(_) => String::new(),
        }
    }
}

/// The `provider` object of a request body: the model's preferences merged
/// with `require_parameters: true`. None (no object at all) for a request
/// without preferences and without a JSON schema, so such bodies, and the
/// cache keys hashed from them, stay what they were before preferences
/// existed.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ProviderBlock<'a> {
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub preferences: Option<&'a ProviderPreferences>,
    pub require_parameters: bool,
}

impl<'a> ProviderBlock<'a> {
    pub fn for_request(
        preferences: Option<&'a ProviderPreferences>,
        structured: bool,
    ) -> Option<Self> {
        (structured || preferences.is_some()).then_some(ProviderBlock {
            preferences,
            require_parameters: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_routing_and_reasoning_fields_pass_through_as_written() {
        let m: ModelEntry = serde_yaml::from_str(
            "id: a/b\nprovider:\n  enforce_distillable_text: true\n  preferred_min_throughput: 50\n  preferred_max_latency: {p90: 3}\nreasoning:\n  enabled: true\n",
        )
        .unwrap();
        let body: serde_json::Value = serde_json::from_str(
            &ChatRequest {
                model: &m,
                prompt: "hi",
                response_format: None,
            }
            .to_json(),
        )
        .unwrap();
        assert_eq!(
            body["provider"],
            serde_json::json!({"enforce_distillable_text": true, "preferred_min_throughput": 50,
                "preferred_max_latency": {"p90": 3}, "require_parameters": true})
        );
        assert_eq!(body["reasoning"], serde_json::json!({"enabled": true}));
        // An unknown key is still refused (a typo must not pass silently).
        assert!(serde_yaml::from_str::<ModelEntry>("id: a/b\nprovider:\n  orderr: [x]\n").is_err());
    }

    #[test]
    fn provider_block_is_absent_without_preferences_or_schema() {
        assert!(ProviderBlock::for_request(None, false).is_none());
        let p = ProviderPreferences {
            order: Some(vec!["deepinfra".into()]),
            allow_fallbacks: Some(false),
            ..Default::default()
        };
        let b = ProviderBlock::for_request(Some(&p), false).unwrap();
        assert_eq!(
            serde_json::to_string(&b).unwrap(),
            r#"{"order":["deepinfra"],"allow_fallbacks":false,"require_parameters":true}"#
        );
        let b = ProviderBlock::for_request(None, true).unwrap();
        assert_eq!(
            serde_json::to_string(&b).unwrap(),
            r#"{"require_parameters":true}"#
        );
    }
}
