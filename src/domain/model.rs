//! A model as `models.yml` describes it: its id and the request parameters
//! sent with it (temperature, seed, max_tokens, OpenRouter's `provider`
//! routing and `reasoning` blocks), and how a served model id is compared
//! with the requested one. The wire formats (`openrouter`) turn these into
//! request bodies; the content loader reads them from YAML.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One model of `models.yml` with its request parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// OpenRouter provider routing, sent as written (with `require_parameters: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<ProviderPreferences>,
    /// Reasoning settings, sent as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<Reasoning>,
    /// Only judges: kept out of the models a run tests by default (the
    /// judge's settings live in its entry all the same).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub judge_only: bool,
    /// Which wire format the model's server speaks; None: the run's default
    /// (`--api`, else OpenRouter's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<Api>,
    /// Whether the model's server honours a JSON-schema `response_format`:
    /// read for OpenAI-compatible servers, which list no supported
    /// parameters (None: one probe request before the run decides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_outputs: Option<bool>,
    /// The price of an OpenAI-compatible model, whose server reports none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
}

/// The wire format a model's server speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Api {
    /// OpenRouter's chat completions: `provider` routing, `reasoning`,
    /// prices and supported parameters in `GET /models`.
    #[default]
    #[serde(rename = "openrouter")]
    OpenRouter,
    /// OpenAI's Chat Completions fields only (vLLM, llama.cpp, Ollama,
    /// LiteLLM, OpenAI or Azure themselves).
    OpenaiCompatible,
}

impl Api {
    pub fn as_str(self) -> &'static str {
        match self {
            Api::OpenRouter => "openrouter",
            Api::OpenaiCompatible => "openai-compatible",
        }
    }
}

impl std::str::FromStr for Api {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "openrouter" => Ok(Api::OpenRouter),
            "openai-compatible" => Ok(Api::OpenaiCompatible),
            other => Err(format!(
                "expected `openrouter` or `openai-compatible`, got {other:?}"
            )),
        }
    }
}

/// `price:` of a model in `models.yml`, USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub prompt_per_mtok: f64,
    pub completion_per_mtok: f64,
}

impl Price {
    /// What `prompt` and `completion` tokens cost, in USD.
    pub fn cost(&self, prompt: i64, completion: i64) -> f64 {
        (prompt as f64 * self.prompt_per_mtok + completion as f64 * self.completion_per_mtok) / 1e6
    }
}

impl ModelEntry {
    pub fn new(id: impl Into<String>) -> Self {
        ModelEntry {
            id: id.into(),
            temperature: None,
            seed: None,
            max_tokens: None,
            provider: None,
            reasoning: None,
            judge_only: false,
            api: None,
            structured_outputs: None,
            price: None,
        }
    }

    /// The wire format of this model: its own, else `default`.
    pub fn api_or(&self, default: Api) -> Api {
        self.api.unwrap_or(default)
    }
}

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
    /// Only providers whose terms allow distilling their outputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforce_distillable_text: Option<bool>,
    /// Prefer endpoints above this throughput (tokens/s; a number or
    /// OpenRouter's percentile object), sent as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_min_throughput: Option<Value>,
    /// Prefer endpoints below this latency (seconds; a number or OpenRouter's
    /// percentile object), sent as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_max_latency: Option<Value>,
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
    /// Turn reasoning on (with the model's default effort) or off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// Whether a reply's `model` is the model that was asked for: the same id,
/// or a dated version of it (`openai/gpt-4o` served as
/// `openai/gpt-4o-2024-08-06`: a `-` and a digit), or the id with a variant
/// suffix (`:free`, `:nitro`) on either side. `openai/gpt-4o-mini` is
/// another model.
/// A model id holds no control character: ids are printed to terminals
/// and logs, where one would be an escape sequence. Err: why, with the id
/// shown escaped.
pub fn check_model_id(id: &str) -> Result<(), String> {
    match id.chars().position(char::is_control) {
        Some(at) => Err(format!(
            "model id {:?} has a control character at position {} (expected printable text such as provider/model)",
            id.escape_debug().to_string(),
            at + 1
        )),
        None => Ok(()),
    }
}

pub fn same_model(requested: &str, served: &str) -> bool {
    let base = |id: &str| id.split(':').next().unwrap_or(id).to_string();
    let (req, got) = (base(requested), base(served));
    got == req
        || got.strip_prefix(req.as_str()).is_some_and(|rest| {
            rest.strip_prefix('-')
                .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
        })
}

/// `marking_model:` in models.yml: one model, or a list of them (kept as
/// one comma-separated panel name). A model id holding a comma is refused:
/// it could not be told apart from a panel.
pub fn deserialize_judges<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    let list = match Option::<OneOrMany>::deserialize(d)? {
        None => return Ok(None),
        Some(OneOrMany::One(s)) => vec![s],
        Some(OneOrMany::Many(v)) => v,
    };
    if let Some(bad) = list.iter().find(|j| j.contains(',') || j.trim().is_empty()) {
        return Err(serde::de::Error::custom(format!(
            "marking_model {bad:?}: expected a model id (provider/model) or a list of them"
        )));
    }
    Ok(Some(
        list.iter().map(|j| j.trim()).collect::<Vec<_>>().join(","),
    ))
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
}
