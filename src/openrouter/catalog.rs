//! OpenRouter's public model catalog (`GET /models`: each model's price per
//! token and the parameters it supports) and the API key's own limit
//! (`GET /key`), read once before a run: the estimate prices the run with
//! them, and the preflight refuses unknown models, models that cannot
//! answer in a JSON schema, and runs that would pass a budget (issue 22).
//! Nothing here spends anything.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

use super::redact::redact_url;

/// How long one catalog request may take: a run waits for it before it
/// starts, and a machine without network says so quickly.
pub const CATALOG_TIMEOUT: Duration = Duration::from_secs(15);

/// The largest model list read (OpenRouter's is a few MB).
const CATALOG_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// One model of the catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogModel {
    pub id: String,
    /// USD per prompt token; None when the catalog gives no usable price
    /// (absent, text, or OpenRouter's `-1` for a router's variable price).
    pub prompt_price: Option<f64>,
    /// USD per completion token; None as above.
    pub completion_price: Option<f64>,
    /// USD per request (`pricing.request`); None when absent.
    pub request_price: Option<f64>,
    /// USD per internal reasoning token (`pricing.internal_reasoning`);
    /// None when absent.
    pub internal_reasoning_price: Option<f64>,
    pub supported_parameters: Vec<String>,
}

impl CatalogModel {
    /// Whether the model's endpoints take a `json_schema` response format,
    /// which every deterministic scenario and every judge request sends.
    pub fn structured_outputs(&self) -> bool {
        self.supported_parameters
            .iter()
            .any(|p| p == "structured_outputs")
    }
}

/// The models `GET /models` lists, by id.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    models: HashMap<String, CatalogModel>,
    /// Whether any entry carries OpenRouter's `pricing` or
    /// `supported_parameters`: a plain OpenAI-style list (vLLM, Ollama,
    /// LiteLLM) has neither, and says nothing of what a model takes.
    openrouter_fields: bool,
}

impl Catalog {
    pub fn get(&self, id: &str) -> Option<&CatalogModel> {
        self.models.get(id)
    }

    /// Every model id the catalog lists.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.models.keys().map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.models.len()
    }

    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }

    /// A non-empty list with none of OpenRouter's fields: the server is
    /// an OpenAI-compatible one, not OpenRouter.
    pub fn is_plain(&self) -> bool {
        !self.models.is_empty() && !self.openrouter_fields
    }

    /// Reads `{"data": [{"id", "pricing": {"prompt", "completion"},
    /// "supported_parameters"}]}`; entries without an id are skipped.
    pub fn parse(v: &Value) -> Result<Catalog, CatalogError> {
        let data = v
            .get("data")
            .and_then(Value::as_array)
            .ok_or_else(|| CatalogError::Unreadable("the model list has no `data` array".into()))?;
        let price = |m: &Value, k: &str| -> Option<f64> {
            let p = m.get("pricing")?.get(k)?;
            let n = match p {
                Value::String(s) => s.trim().parse::<f64>().ok()?,
                Value::Number(n) => n.as_f64()?,
                _ => return None,
            };
            (n.is_finite() && n >= 0.0).then_some(n)
        };
        let openrouter_fields = data
            .iter()
            .any(|m| m.get("pricing").is_some() || m.get("supported_parameters").is_some());
        let models = data
            .iter()
            .filter_map(|m| {
                let id = m.get("id")?.as_str()?.to_string();
                let supported_parameters = m
                    .get("supported_parameters")
                    .and_then(Value::as_array)
                    .map(|ps| {
                        ps.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                Some((
                    id.clone(),
                    CatalogModel {
                        prompt_price: price(m, "prompt"),
                        completion_price: price(m, "completion"),
                        request_price: price(m, "request"),
                        internal_reasoning_price: price(m, "internal_reasoning"),
                        id,
                        supported_parameters,
                    },
                ))
            })
            .collect();
        Ok(Catalog {
            models,
            openrouter_fields,
        })
    }
}

/// What `GET /key` says of the key's spending cap.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyInfo {
    /// The key's credit limit in USD; None when it has none.
    pub limit: Option<f64>,
    /// What is left of it; None when the key has no limit.
    pub limit_remaining: Option<f64>,
    /// What the key spent, all time.
    pub usage: Option<f64>,
}

impl KeyInfo {
    pub fn parse(v: &Value) -> Result<KeyInfo, CatalogError> {
        let data = v
            .get("data")
            .filter(|d| d.is_object())
            .ok_or_else(|| CatalogError::Unreadable("the key info has no `data` object".into()))?;
        let num = |k: &str| {
            data.get(k)
                .and_then(Value::as_f64)
                .filter(|n| n.is_finite())
        };
        Ok(KeyInfo {
            limit: num("limit"),
            limit_remaining: num("limit_remaining"),
            usage: num("usage"),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The request got no answer; the source names why, its URL (which
    /// may hold credentials) left out.
    #[error("cannot reach {url}: {source}")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("{0}")]
    Unreadable(String),
    /// The answer at `url` is not JSON: the parser's error is the source.
    #[error("{url} did not answer JSON: {source}")]
    NotJson {
        url: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The HTTP client cannot be built: reqwest's error is the source.
    #[error("invalid configuration: cannot build HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

/// Reads the catalog and the key's limit. Holds the key only inside a
/// sensitive `Authorization` header; no error ever shows it (messages name
/// the URL without credentials, and never quote a reply body).
pub struct CatalogClient {
    http: reqwest::Client,
    base: String,
    has_key: bool,
}

impl std::fmt::Debug for CatalogClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatalogClient")
            .field("base", &redact_url(&self.base))
            .field("has_key", &self.has_key)
            .finish()
    }
}

impl CatalogClient {
    /// `api_key` is optional: the catalog is public, `/key` needs it.
    pub fn new(
        base_url: &str,
        api_key: Option<&str>,
        timeout: Duration,
    ) -> Result<Self, CatalogError> {
        let base = super::http::check_base_url(base_url).map_err(CatalogError::Config)?;
        let key = api_key.map(str::trim).filter(|k| !k.is_empty());
        let headers = super::http::headers(key, None, None).map_err(CatalogError::Config)?;
        let http = super::http::builder(headers)
            .timeout(timeout)
            .build()
            .map_err(CatalogError::Client)?;
        Ok(CatalogClient {
            http,
            base,
            has_key: key.is_some(),
        })
    }

    pub fn has_key(&self) -> bool {
        self.has_key
    }

    async fn get(&self, path: &str) -> Result<Value, CatalogError> {
        let url = format!("{}/{path}", self.base);
        let shown = redact_url(&url);
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| CatalogError::Unreachable {
                url: shown.clone(),
                source: e.without_url(),
            })?;
        let status = resp.status();
        if !status.is_success() {
            return Err(CatalogError::Status {
                url: shown,
                status: status.as_u16(),
            });
        }
        // Read in chunks up to a cap: an endless body is abandoned, never held.
        let text = super::http::read_capped(resp, CATALOG_MAX_BYTES)
            .await
            .map_err(|f| CatalogError::Unreadable(format!("{shown}: {}", f.reason)))?;
        serde_json::from_str(&text).map_err(|source| CatalogError::NotJson { url: shown, source })
    }

    /// `GET {base}/models`.
    pub async fn models(&self) -> Result<Catalog, CatalogError> {
        Catalog::parse(&self.get("models").await?)
    }

    /// `GET {base}/key`; None without a key.
    pub async fn key(&self) -> Result<Option<KeyInfo>, CatalogError> {
        if !self.has_key {
            return Ok(None);
        }
        KeyInfo::parse(&self.get("key").await?).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn catalog_reads_prices_as_strings_and_skips_variable_ones() {
        let c = Catalog::parse(&json!({"data": [
            {"id": "a/b", "pricing": {"prompt": "0.000001", "completion": "0.000002"},
             "supported_parameters": ["max_tokens", "structured_outputs"]},
            {"id": "openrouter/auto", "pricing": {"prompt": "-1", "completion": "-1"}},
            {"pricing": {"prompt": "1"}}
        ]}))
        .unwrap();
        assert_eq!(c.len(), 2);
        let m = c.get("a/b").unwrap();
        assert_eq!(m.prompt_price, Some(0.000001));
        assert_eq!(m.completion_price, Some(0.000002));
        assert!(m.structured_outputs());
        let auto = c.get("openrouter/auto").unwrap();
        assert_eq!(auto.prompt_price, None);
        assert!(!auto.structured_outputs());
        assert!(Catalog::parse(&json!({"models": []})).is_err());
    }

    #[test]
    fn key_info_reads_an_unlimited_key_as_none() {
        let k = KeyInfo::parse(
            &json!({"data": {"limit": null, "limit_remaining": null, "usage": 1.5}}),
        )
        .unwrap();
        assert_eq!(k.limit_remaining, None);
        assert_eq!(k.usage, Some(1.5));
        let k = KeyInfo::parse(&json!({"data": {"limit": 10, "limit_remaining": 2.25}})).unwrap();
        assert_eq!(k.limit_remaining, Some(2.25));
    }
}
