//! The one chat request: a model with its `models.yml` settings, the one
//! user message and the response format, serialised straight to the body
//! text OpenRouter is sent (and the cache key is hashed from). Field order
//! is fixed: model, messages, response_format, provider, temperature, seed,
//! max_tokens, reasoning, user, so a request's bytes, and its cache key,
//! do not change between versions (the key as it was before `usage` was
//! dropped and `user` added: see [`Body`]).

use serde::Serialize;
use serde_json::Value;

use super::wire::{Message, Messages, rest_text, write_body};
use crate::domain::{Api, ModelEntry, ProviderPreferences, Reasoning};

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
    /// The messages before `prompt` in a conversation (issue 42), in
    /// order; empty for a single-turn test case (its body is then what it
    /// always was).
    pub history: &'a [Message<'a>],
    /// Sent as the (last) user message.
    pub prompt: &'a str,
    /// The whole `{"type":"json_schema","json_schema":{…}}` wrapper. When
    /// set, `provider.require_parameters: true` is sent too, so OpenRouter
    /// only routes to providers that honour it.
    pub response_format: Option<&'a Value>,
    /// The wire format: OpenRouter's, or OpenAI's Chat Completions fields
    /// only (see [`super::openai`]).
    pub api: Api,
    /// The database's pseudonym, sent last as `user` (never part of the
    /// cache key).
    pub user: Option<&'a str>,
}

/// A request body as posted, and the bytes its reply is cached under: the
/// body without `user`, and, in OpenRouter's format, with the
/// `"usage":{"include":true}` every request carried until it was dropped
/// (OpenRouter always reports usage now), so replies stored before still
/// answer the same request.
#[derive(Debug, Clone)]
pub struct Body {
    /// The exact text posted to `/chat/completions`.
    pub wire: String,
    /// The part of `wire` the key shares (up to its last field).
    key_len: usize,
    key_tail: &'static str,
}

impl Body {
    /// The cache key's bytes, in two parts (hashed one after the other).
    pub fn key_parts(&self) -> [&[u8]; 2] {
        [
            &self.wire.as_bytes()[..self.key_len],
            self.key_tail.as_bytes(),
        ]
    }
}

/// The fields of a body after its messages (response format, routing,
/// sampling), written once: every request of a run for one scenario shares
/// them, and writing the schema again each call was 1 % of a run's CPU
/// (issue 45). A request's body is the same bytes with a tail of its own
/// ([`ChatRequest::tail`]) or one kept from an equal request.
#[derive(Debug, Clone)]
pub struct Tail(Vec<u8>);

impl ChatRequest<'_> {
    /// The exact body text posted to `/chat/completions`.
    pub fn to_json(&self) -> String {
        self.body().wire
    }

    /// The body as posted, with its cache key (see [`Body`]).
    pub fn body(&self) -> Body {
        self.body_after(&self.tail())
    }

    /// This request's [`Tail`]: what follows the messages in its body. It
    /// depends on the model entry, the wire format and the response format
    /// only.
    pub fn tail(&self) -> Tail {
        Tail(match self.api {
            Api::OpenRouter => self.openrouter_rest(),
            Api::OpenaiCompatible => super::openai::rest(self.model, self.response_format),
        })
    }

    /// [`ChatRequest::body`] with `tail`, which must be this request's
    /// [`ChatRequest::tail`] (or that of one with the same model entry,
    /// wire format and response format).
    pub fn body_after(&self, tail: &Tail) -> Body {
        let messages = Messages {
            history: self.history,
            prompt: self.prompt,
        };
        let mut wire = write_body(&self.model.id, messages, &tail.0);
        // Both bodies are one JSON object: its closing brace is the last byte.
        let key_len = wire.len().saturating_sub(1);
        if let Some(user) = self.user {
            wire.truncate(key_len);
            wire.push_str(",\"user\":");
            wire.push_str(&serde_json::to_string(user).unwrap_or_else(|_| "\"\"".into()));
            wire.push('}');
        }
        Body {
            wire,
            key_len,
            key_tail: match self.api {
                Api::OpenRouter => r#","usage":{"include":true}}"#,
                Api::OpenaiCompatible => "}",
            },
        }
    }

    /// OpenRouter's fields after the messages: the OpenAI ones with
    /// `provider` routing and `reasoning`.
    fn openrouter_rest(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Body<'a> {
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
        }
        let m = self.model;
        rest_text(&Body {
            response_format: self.response_format,
            provider: ProviderBlock::for_request(
                m.provider.as_ref(),
                self.response_format.is_some(),
            ),
            temperature: m.temperature,
            seed: m.seed,
            max_tokens: m.max_tokens,
            reasoning: m.reasoning.as_ref(),
        })
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
                history: &[],
                model: &m,
                prompt: "hi",
                response_format: None,
                api: Api::OpenRouter,
                user: None,
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

    /// A tail kept from one request serves any other with the same model
    /// entry, wire format and response format: the body is the bytes the
    /// request writes with its own, whatever its messages and `user`.
    #[test]
    fn a_kept_tail_gives_the_same_body() {
        let m: ModelEntry = serde_yaml::from_str(
            "id: a/b\ntemperature: 0.2\nseed: 7\nmax_tokens: 99\nreasoning:\n  effort: low\n",
        )
        .unwrap();
        let format = serde_json::json!({"type": "json_schema", "json_schema": {"name": "r",
            "schema": {"type": "object", "properties": {"category": {"enum": ["A", "B\"\\"]}}}}});
        let history = [Message {
            role: "assistant",
            content: "earlier \"reply\"",
        }];
        for api in [Api::OpenRouter, Api::OpenaiCompatible] {
            for response_format in [Some(&format), None] {
                let first = ChatRequest {
                    history: &[],
                    model: &m,
                    prompt: "first",
                    response_format,
                    api,
                    user: None,
                };
                let kept = first.tail();
                for (history, prompt, user) in [
                    (&[][..], "second \u{1}\n", Some("hb-1")),
                    (&history[..], "third é", None),
                ] {
                    let other = ChatRequest {
                        history,
                        prompt,
                        user,
                        ..first
                    };
                    let (own, with_kept) = (other.body(), other.body_after(&kept));
                    assert_eq!(own.wire, with_kept.wire);
                    assert_eq!(own.key_parts(), with_kept.key_parts());
                    let v: Value = serde_json::from_str(&own.wire).unwrap();
                    assert_eq!(v["messages"].as_array().unwrap().len(), history.len() + 1);
                    assert_eq!(v.get("response_format"), response_format);
                }
            }
        }
    }
}
