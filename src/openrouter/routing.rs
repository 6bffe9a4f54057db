//! What a request asks of OpenRouter's routing beyond the model id: the
//! per-model `provider:` and `reasoning:` blocks of `models.yml`, sent as
//! written (issue 22), and how a served model is compared with the one that
//! was asked for. The blocks live here, beside the request they shape, and
//! `benchmark::ModelEntry` holds them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `provider:` of one model in `models.yml`: OpenRouter's provider routing
/// preferences, sent as written. helmbench adds `require_parameters: true`
/// (never written here: an unknown key), so a provider that would ignore a
/// parameter (the JSON schema, the seed) is never chosen.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderPreferences {
    /// Providers to try first, in this order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<Vec<String>>,
    /// Only these providers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only: Option<Vec<String>>,
    /// Never these providers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore: Option<Vec<String>>,
    /// `false` pins the request to the providers above: no fallback to others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_fallbacks: Option<bool>,
    /// `price`, `throughput` or `latency` (or OpenRouter's object form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sort: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantizations: Option<Vec<String>>,
    /// `allow` or `deny`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_collection: Option<String>,
    /// Zero data retention endpoints only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zdr: Option<bool>,
    /// Highest price accepted, USD per million tokens (`prompt`, `completion`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_price: Option<Map<String, Value>>,
}

/// `reasoning:` of one model in `models.yml`, sent as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reasoning {
    /// `minimal`, `low`, `medium` or `high` (OpenRouter maps it per model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    /// A reasoning token budget (instead of `effort`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Reason, but leave the reasoning out of the reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude: Option<bool>,
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

/// Whether a reply's `model` is the model that was asked for: the same id,
/// or a dated version of it (`openai/gpt-4o` served as
/// `openai/gpt-4o-2024-08-06`: a `-` and a digit), or the id with a variant
/// suffix (`:free`, `:nitro`) on either side. `openai/gpt-4o-mini` is
/// another model.
pub fn same_model(requested: &str, served: &str) -> bool {
    let base = |id: &str| id.split(':').next().unwrap_or(id).to_string();
    let (req, got) = (base(requested), base(served));
    got == req
        || got.strip_prefix(req.as_str()).is_some_and(|rest| {
            rest.strip_prefix('-')
                .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_versions_count_as_the_requested_model() {
        assert!(same_model("openai/gpt-4o", "openai/gpt-4o"));
        assert!(same_model("openai/gpt-4o", "openai/gpt-4o-2024-08-06"));
        assert!(same_model("x/y:free", "x/y"));
        assert!(!same_model("openai/gpt-4o", "openai/gpt-4o-mini"));
        assert!(!same_model("openai/gpt-4o", "openai/gpt-4omini"));
        assert!(!same_model("openai/gpt-4o", "anthropic/claude-3.5-sonnet"));
        assert!(!same_model("a/b", "a/bc"));
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
