//! HTTP client for OpenRouter's OpenAI-compatible chat completions API
//! (SPEC section 6).
//!
//! One pooled `reqwest::Client` is shared by every request. `Client::chat`
//! sends one user message, parses the reply tolerantly (OpenRouter and the
//! providers behind it disagree on details), and retries transient failures
//! with exponential backoff and jitter, bounded both in attempts and in total
//! time. The API key never leaves the `Authorization` header: it is absent
//! from `Debug` output, error messages and tracing events, and any text that
//! echoes it back is scrubbed before it is stored in an error.

use std::fmt;
use std::time::{Duration, Instant};

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use serde::Serialize;
use serde_json::{Map, Value, json};

pub mod catalog;
mod classify;
mod limit;
pub mod routing;

use crate::openrouter::classify::Outcome;
use crate::openrouter::classify::RetryableFailure;
use crate::openrouter::classify::backoff_delay;
use crate::openrouter::classify::classify;
use crate::openrouter::classify::parse_retry_after;
use crate::openrouter::classify::transport_failure;
pub use classify::reply_cost;
pub use limit::{AdaptiveLimit, Attempt};
pub use routing::{ProviderBlock, ProviderPreferences, Reasoning};

/// Where requests go unless `OPENROUTER_BASE_URL` overrides it.
pub const DEFAULT_BASE_URL: &str = "https://openrouter.ai/api/v1";

/// Longest provider message kept in an error, in characters.
const MAX_MESSAGE_CHARS: usize = 500;

/// Connection and retry settings. `Debug` never shows the API key.
#[derive(Clone)]
pub struct ClientConfig {
    pub base_url: String,
    /// Sent only as `Authorization: Bearer …`; never printed, logged or stored.
    pub api_key: String,
    /// Optional `HTTP-Referer` attribution header.
    pub referer: Option<String>,
    /// Optional `X-Title` attribution header.
    pub title: Option<String>,
    /// Time limit for one attempt (connect, send, read the whole body).
    pub request_timeout: Duration,
    /// Attempts in all, the first one included.
    pub max_attempts: u32,
    /// Time budget across all attempts and the waits between them.
    pub max_total: Duration,
    /// First backoff delay; doubled each retry.
    pub backoff_base: Duration,
    /// Cap on one computed backoff delay (before jitter).
    pub backoff_max: Duration,
    /// Largest reply body read, in bytes: a longer one is abandoned as it
    /// streams in (never held whole) and the attempt is retried.
    pub max_reply_bytes: u64,
}

/// Default [`ClientConfig::max_reply_bytes`]: 16 MiB, a thousand times a
/// long chat reply.
pub const DEFAULT_MAX_REPLY_BYTES: u64 = 16 * 1024 * 1024;

/// The highest `usage.cost` of one call taken at face value, in USD. No
/// single chat completion costs this much; a larger figure is a provider or
/// proxy fault and is recorded as unknown, so it cannot swamp every total.
pub const MAX_PLAUSIBLE_COST_USD: f64 = 1000.0;

impl ClientConfig {
    pub fn new(base_url: impl Into<String>, api_key: impl Into<String>) -> Self {
        ClientConfig {
            base_url: base_url.into(),
            api_key: api_key.into(),
            referer: None,
            title: None,
            request_timeout: Duration::from_secs(120),
            max_attempts: 6,
            max_total: Duration::from_secs(600),
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            max_reply_bytes: DEFAULT_MAX_REPLY_BYTES,
        }
    }
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("base_url", &redact_url(&self.base_url))
            .field("api_key", &format_args!("<redacted>"))
            .field("referer", &self.referer)
            .field("title", &self.title)
            .field("request_timeout", &self.request_timeout)
            .field("max_attempts", &self.max_attempts)
            .field("max_total", &self.max_total)
            .field("backoff_base", &self.backoff_base)
            .field("backoff_max", &self.backoff_max)
            .field("max_reply_bytes", &self.max_reply_bytes)
            .finish()
    }
}

/// One chat completion request: a single user message.
#[derive(Debug, Clone, Serialize)]
pub struct ChatRequest {
    pub model: String,
    /// Sent as the one user message.
    pub prompt: String,
    /// The whole `{"type":"json_schema","json_schema":{…}}` wrapper. When set,
    /// `provider.require_parameters: true` is sent too, so OpenRouter only
    /// routes to providers that honour it.
    pub response_format: Option<Value>,
    pub temperature: Option<f64>,
    pub seed: Option<i64>,
    pub max_tokens: Option<u32>,
    /// `provider:` of models.yml, sent merged with `require_parameters`.
    pub provider: Option<ProviderPreferences>,
    /// `reasoning:` of models.yml, sent as written.
    pub reasoning: Option<Reasoning>,
}

impl ChatRequest {
    /// The exact JSON body posted to `/chat/completions`.
    pub fn body(&self) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), json!(self.model));
        body.insert(
            "messages".into(),
            json!([{ "role": "user", "content": self.prompt }]),
        );
        if let Some(format) = &self.response_format {
            body.insert("response_format".into(), format.clone());
        }
        if let Some(p) =
            ProviderBlock::for_request(self.provider.as_ref(), self.response_format.is_some())
        {
            body.insert("provider".into(), json!(p));
        }
        if let Some(t) = self.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if let Some(seed) = self.seed {
            body.insert("seed".into(), json!(seed));
        }
        if let Some(max) = self.max_tokens {
            body.insert("max_tokens".into(), json!(max));
        }
        if let Some(r) = &self.reasoning {
            body.insert("reasoning".into(), json!(r));
        }
        // OpenRouter now always reports usage on non-streaming replies; the
        // flag is harmless there and still needed by older compatible servers.
        body.insert("usage".into(), json!({ "include": true }));
        Value::Object(body)
    }

    /// [`ChatRequest::body`] serialised: the exact bytes posted.
    pub fn body_json(&self) -> String {
        ChatBody {
            model: &self.model,
            prompt: &self.prompt,
            response_format: self.response_format.as_ref(),
            temperature: self.temperature,
            seed: self.seed,
            max_tokens: self.max_tokens,
            provider: self.provider.as_ref(),
            reasoning: self.reasoning.as_ref(),
        }
        .to_json()
    }
}

/// A chat request made of borrowed parts, serialised straight to the body
/// text: byte for byte `ChatRequest::body().to_string()`, without building
/// (and cloning the schema into) a `Value` first. For callers that send
/// many requests and hash each body.
#[derive(Debug, Clone, Copy)]
pub struct ChatBody<'a> {
    pub model: &'a str,
    pub prompt: &'a str,
    pub response_format: Option<&'a Value>,
    pub temperature: Option<f64>,
    pub seed: Option<i64>,
    pub max_tokens: Option<u32>,
    pub provider: Option<&'a ProviderPreferences>,
    pub reasoning: Option<&'a Reasoning>,
}

impl ChatBody<'_> {
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
        // Field order and skipping mirror `ChatRequest::body`.
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
        let body = Body {
            model: self.model,
            messages: [Message {
                role: "user",
                content: self.prompt,
            }],
            response_format: self.response_format,
            provider: ProviderBlock::for_request(self.provider, self.response_format.is_some()),
            temperature: self.temperature,
            seed: self.seed,
            max_tokens: self.max_tokens,
            reasoning: self.reasoning,
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

/// A successful reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// OpenRouter's generation id (`gen-…`), top-level `id`.
    pub generation_id: Option<String>,
    /// `choices[0].message.content`; may be truncated when `finish_reason`
    /// is `length`, and may be empty only with `length` or `content_filter`.
    pub content: String,
    pub finish_reason: Option<String>,
    /// Upstream provider that served the request (top-level `provider`).
    pub provider: Option<String>,
    /// The model that served the request (top-level `model`): with routing
    /// and fallbacks, not always the one asked for.
    pub served_model: Option<String>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// `usage.completion_tokens_details.reasoning_tokens` (part of
    /// `completion_tokens`); 0 when absent.
    pub reasoning_tokens: i64,
    /// `usage.prompt_tokens_details.cached_tokens`; 0 when absent.
    pub cached_prompt_tokens: i64,
    /// `usage.cost` in USD: 0.0 when absent, NaN when the provider sent
    /// something that is not a usable cost (see [`reply_cost`]): unknown,
    /// stored as such and never added to a total.
    pub cost_usd: f64,
    /// `usage.cost_details.upstream_inference_cost` (bring-your-own-key);
    /// None when absent or unusable.
    pub upstream_cost_usd: Option<f64>,
    /// Attempts made, the successful one included.
    pub attempts: u32,
    /// Latency of the successful attempt.
    pub latency_ms: u64,
}

/// `error.metadata.error_type` and `provider_code` of a provider error:
/// stored with the result and counted by type in `runs` and `report`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ErrorMeta {
    pub error_type: Option<String>,
    pub provider_code: Option<String>,
}

/// Why OpenRouter refused to spend (`error.metadata.limit_source` and
/// `reason` of a 402): each stops the run, and says what to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreditLimit {
    /// `openrouter_key_limit`: the API key's own spending cap is used up.
    KeyLimit,
    /// `openrouter_credits`: the account's balance cannot cover the request.
    Credits,
    /// `weight_exceeds_budget`: one request's estimated cost is larger than
    /// the whole in-flight budget; retrying cannot help.
    RequestTooExpensive,
    /// A 402 that does not say which.
    Unspecified,
}

impl fmt::Display for CreditLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CreditLimit::KeyLimit => {
                "the API key's credit limit is spent (openrouter_key_limit): raise the key's limit at openrouter.ai/settings/keys or wait for it to reset; the account's balance is not the problem"
            }
            CreditLimit::Credits => {
                "the account's balance cannot cover the request (openrouter_credits): add credits; the key's own limit is not the problem"
            }
            CreditLimit::RequestTooExpensive => {
                "one request alone is too expensive for the account's in-flight budget (weight_exceeds_budget): lower `max_tokens` for this model in models.yml (or shorten the prompts), or add credits; retrying will not help"
            }
            CreditLimit::Unspecified => "OpenRouter account is out of credits",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("OpenRouter rejected the API key (401): {message}. Check OPENROUTER_API_KEY")]
    Unauthorized { message: String },
    #[error("{limit} (402): {message}")]
    PaymentRequired { limit: CreditLimit, message: String },
    /// 400, 403, 404 ("no endpoints") and any other non-retryable answer.
    #[error("request rejected ({status}): {message}")]
    Rejected {
        status: u16,
        code: Option<String>,
        message: String,
        meta: ErrorMeta,
    },
    /// Retryable failures that ran out of attempts or of total time.
    #[error("gave up after {attempts} attempts: {last}")]
    Exhausted {
        attempts: u32,
        last: String,
        meta: ErrorMeta,
    },
    #[error("invalid client configuration: {0}")]
    Config(String),
}

impl ProviderError {
    /// True when no later request of the run can succeed either (bad key,
    /// no credits): the caller should stop the run, keeping what it has.
    pub fn is_fatal_for_run(&self) -> bool {
        matches!(
            self,
            ProviderError::Unauthorized { .. } | ProviderError::PaymentRequired { .. }
        )
    }

    /// The provider's `error_type` and `provider_code`, when it sent them.
    pub fn meta(&self) -> ErrorMeta {
        match self {
            ProviderError::Rejected { meta, .. } | ProviderError::Exhausted { meta, .. } => {
                meta.clone()
            }
            _ => ErrorMeta::default(),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            ProviderError::Unauthorized { .. } => "unauthorized",
            ProviderError::PaymentRequired { .. } => "payment_required",
            ProviderError::Rejected { .. } => "rejected",
            ProviderError::Exhausted { .. } => "exhausted",
            ProviderError::Config(_) => "config",
        }
    }
}

/// OpenRouter client holding one connection pool.
pub struct Client {
    http: reqwest::Client,
    /// Parsed once: `post(&String)` would parse (and IDNA-check) it per request.
    url: reqwest::Url,
    cfg: ClientConfig,
    /// The key as a reply may echo it: as is, JSON-escaped, HTML-escaped and
    /// percent-encoded; longest first. Empty for a key under 4 characters.
    secret_forms: Vec<String>,
    /// In-flight limits per model (see [`AdaptiveLimit`]); a model without
    /// one is not limited here.
    limits: std::sync::RwLock<std::collections::HashMap<String, std::sync::Arc<AdaptiveLimit>>>,
    /// `--max-in-flight`: attempts in flight across every model.
    total: std::sync::RwLock<Option<std::sync::Arc<tokio::sync::Semaphore>>>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.url.as_str())
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl Client {
    pub fn new(cfg: ClientConfig) -> Result<Self, ProviderError> {
        let base = cfg.base_url.trim().trim_end_matches('/');
        // Every message below shows the URL without its userinfo: a
        // `user:pass@` (valid or not) is never printed.
        let shown = redact_url(base);
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ProviderError::Config(format!(
                "base URL (OPENROUTER_BASE_URL) must start with http:// or https://, got {shown:?}"
            )));
        }
        let parsed = reqwest::Url::parse(base).map_err(|_| {
            ProviderError::Config(format!(
                "base URL (OPENROUTER_BASE_URL) is not a valid URL: {shown:?}"
            ))
        })?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(ProviderError::Config(format!(
                "base URL (OPENROUTER_BASE_URL) must not carry credentials (user:password@): they would be sent to the server and stored with every cached reply; the key goes in OPENROUTER_API_KEY (got {shown:?})"
            )));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(ProviderError::Config(format!(
                "base URL (OPENROUTER_BASE_URL) must not have a ?query or #fragment (requests go to {{base}}/chat/completions), got {shown:?}"
            )));
        }
        if cfg.api_key.trim().is_empty() {
            return Err(ProviderError::Config(
                "the API key is empty (set OPENROUTER_API_KEY)".into(),
            ));
        }
        if cfg.max_reply_bytes == 0 {
            return Err(ProviderError::Config(
                "the reply size limit must be at least 1 byte".into(),
            ));
        }
        if cfg.max_attempts == 0 {
            return Err(ProviderError::Config(
                "max_attempts must be at least 1".into(),
            ));
        }
        if cfg.request_timeout.is_zero() || cfg.max_total.is_zero() {
            return Err(ProviderError::Config(
                "request_timeout and max_total must be positive".into(),
            ));
        }

        let mut headers = HeaderMap::new();
        let mut auth =
            HeaderValue::from_str(&format!("Bearer {}", cfg.api_key.trim())).map_err(|_| {
                // Never echo the key itself.
                ProviderError::Config(
                    "the API key contains characters not allowed in an HTTP header".into(),
                )
            })?;
        auth.set_sensitive(true);
        headers.insert(AUTHORIZATION, auth);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(referer) = &cfg.referer {
            let v = HeaderValue::from_str(referer).map_err(|_| {
                ProviderError::Config(format!("HTTP-Referer is not a valid header: {referer:?}"))
            })?;
            headers.insert("HTTP-Referer", v);
        }
        if let Some(title) = &cfg.title {
            let v = HeaderValue::from_str(title).map_err(|_| {
                ProviderError::Config(format!("X-Title must be printable ASCII, got {title:?}"))
            })?;
            headers.insert("X-Title", v);
        }

        let http = reqwest::Client::builder()
            .tls_backend_rustls()
            .default_headers(headers)
            .user_agent(concat!("helmbench/", env!("CARGO_PKG_VERSION")))
            // Redirects are not followed at all: the Authorization header must
            // never reach another host, and the API has no reason to redirect.
            // A 3xx therefore comes back as a non-retryable `Rejected`.
            .redirect(reqwest::redirect::Policy::none())
            // No cap on idle connections: the worker pool already bounds them
            // (one per worker), and a cap below --concurrency would close and
            // reopen a connection for most requests.
            .pool_idle_timeout(Duration::from_secs(90))
            .connect_timeout(cfg.request_timeout.min(Duration::from_secs(30)))
            .tcp_keepalive(Duration::from_secs(60))
            .build()
            .map_err(|e| ProviderError::Config(format!("cannot build HTTP client: {e}")))?;

        Ok(Client {
            secret_forms: secret_forms(cfg.api_key.trim()),
            http,
            url: reqwest::Url::parse(&format!("{base}/chat/completions")).map_err(|_| {
                ProviderError::Config(format!("base URL is not a valid URL: {base:?}"))
            })?,
            cfg,
            limits: Default::default(),
            total: Default::default(),
        })
    }

    /// Limits `model` to `max` attempts in flight (adapting to 429s unless
    /// `adaptive` is false) and returns the limit. A model limited already
    /// (a judge that is also a model under test) keeps its limit: both
    /// share one provider's rate limit.
    pub fn limit_model(
        &self,
        model: &str,
        max: usize,
        adaptive: bool,
    ) -> std::sync::Arc<AdaptiveLimit> {
        let mut limits = self.limits.write().unwrap_or_else(|e| e.into_inner());
        limits
            .entry(model.to_string())
            .or_insert_with(|| std::sync::Arc::new(AdaptiveLimit::new(model, max, adaptive)))
            .clone()
    }

    /// Caps the attempts in flight across every model.
    pub fn cap_in_flight(&self, max: usize) {
        *self.total.write().unwrap_or_else(|e| e.into_inner()) =
            Some(std::sync::Arc::new(tokio::sync::Semaphore::new(max.max(1))));
    }

    fn limit_of(&self, model: &str) -> Option<std::sync::Arc<AdaptiveLimit>> {
        self.limits
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(model)
            .cloned()
    }

    /// The URL requests go to (`{base}/chat/completions`), never with
    /// credentials: what the reply cache is keyed by.
    pub fn endpoint(&self) -> &str {
        self.url.as_str()
    }

    /// Send `req`, retrying transient failures; see the module docs.
    pub async fn chat(&self, req: &ChatRequest) -> Result<Completion, ProviderError> {
        self.chat_json(&req.model, req.body_json()).await
    }

    /// [`Client::chat`] with the body already serialised (by
    /// [`ChatBody::to_json`] or [`ChatRequest::body_json`]); `model` names
    /// the request in logs and picks its in-flight limit.
    pub async fn chat_json(&self, model: &str, body: String) -> Result<Completion, ProviderError> {
        // Bytes: every attempt shares the one serialised body.
        let body = bytes::Bytes::from(body);
        let started = Instant::now();
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let remaining = self.cfg.max_total.saturating_sub(started.elapsed());
            let timeout = self.cfg.request_timeout.min(remaining);
            // A slot per attempt: a retry waiting out its delay holds none.
            let limit = self.limit_of(model);
            let slot = match &limit {
                Some(l) => Some(l.acquire().await),
                None => None,
            };
            let total = self.total.read().unwrap_or_else(|e| e.into_inner()).clone();
            let total_slot = match total {
                Some(t) => Some(t.acquire_owned().await.expect("never closed")),
                None => None,
            };
            let attempt_start = Instant::now();
            let result = self.attempt(&body, timeout).await;
            drop(total_slot);
            if let (Some(l), Some(slot)) = (&limit, slot) {
                let seen = match &result {
                    Ok((Outcome::Success(_), _)) => Attempt::Success,
                    Ok((Outcome::Retry(r), _)) if r.status == Some(429) => Attempt::RateLimited,
                    _ => Attempt::Other,
                };
                l.release(slot, seen);
            }
            let (outcome, charged) = match result {
                Ok(v) => v,
                Err(e) => return Err(CallLog::failed(model, self.scrub_error(e))),
            };
            // A reply that is not returned was still paid for when it
            // carries a cost: the caller's log counts it at once.
            CallLog::charge(model, charged);
            let failure = match outcome {
                Outcome::Success(mut c) => {
                    c.attempts = attempt;
                    c.latency_ms = attempt_start.elapsed().as_millis() as u64;
                    return Ok(c);
                }
                Outcome::Fatal(e) => return Err(CallLog::failed(model, self.scrub_error(e))),
                Outcome::Retry(r) => r,
            };
            let reason = self.scrub(&failure.reason);

            if attempt >= self.cfg.max_attempts {
                return Err(CallLog::failed(
                    model,
                    ProviderError::Exhausted {
                        attempts: attempt,
                        last: reason,
                        meta: self.scrub_meta(failure.meta),
                    },
                ));
            }
            let mut delay = backoff_delay(self.cfg.backoff_base, self.cfg.backoff_max, attempt - 1);
            if let Some(ra) = failure.retry_after {
                delay = delay.max(ra);
            }
            let remaining = self.cfg.max_total.saturating_sub(started.elapsed());
            if delay >= remaining {
                return Err(CallLog::failed(
                    model,
                    ProviderError::Exhausted {
                        attempts: attempt,
                        last: format!(
                            "{reason} (next retry in {} ms would exceed the {} s total budget)",
                            delay.as_millis(),
                            self.cfg.max_total.as_secs_f64()
                        ),
                        meta: self.scrub_meta(failure.meta),
                    },
                ));
            }
            tracing::warn!(
                model = %model,
                attempt,
                max_attempts = self.cfg.max_attempts,
                status = failure.status.unwrap_or(0),
                delay_ms = delay.as_millis() as u64,
                reason = %reason,
                "OpenRouter request failed, retrying"
            );
            tokio::time::sleep(delay).await;
        }
    }

    /// One HTTP attempt, with what a reply that is not a success was
    /// charged (`usage.cost`; 0.0 when absent). `Err` is only used for
    /// configuration-like failures that no retry can fix.
    async fn attempt(
        &self,
        body: &bytes::Bytes,
        timeout: Duration,
    ) -> Result<(Outcome, f64), ProviderError> {
        let sent = self
            .http
            .post(self.url.clone())
            .timeout(timeout)
            // Content-Type: application/json is a default header.
            .body(body.clone())
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) => return Ok((Outcome::Retry(transport_failure(&e)), 0.0)),
        };
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let text = match read_capped(resp, self.cfg.max_reply_bytes).await {
            Ok(t) => t,
            Err(mut f) => {
                f.status = Some(status.as_u16());
                return Ok((Outcome::Retry(f), 0.0));
            }
        };
        // A proxy may echo the key anywhere in a reply: every form of it is
        // removed from the raw text, and every string of the parsed JSON
        // (where a `\u` escape may have hidden it) is scrubbed again, before
        // any field is read, truncated or stored.
        let text = self.scrub(&text);
        let mut parsed: Option<Value> = serde_json::from_str(&text).ok();
        if let Some(v) = parsed.as_mut() {
            self.scrub_value(v);
        }
        let cost = parsed
            .as_ref()
            .and_then(|v| v.pointer("/usage/cost"))
            .cloned();
        let outcome = classify(status, retry_after, &text, parsed);
        let charged = match outcome {
            Outcome::Success(_) => 0.0,
            _ => charged_cost(cost.as_ref()),
        };
        Ok((outcome, charged))
    }

    /// Remove the API key, in any of [`secret_forms`], from a string that
    /// may echo it (replies, provider messages, transport errors).
    fn scrub(&self, s: &str) -> String {
        let mut out: Option<String> = None;
        for form in &self.secret_forms {
            let cur = out.as_deref().unwrap_or(s);
            if cur.contains(form.as_str()) {
                out = Some(cur.replace(form.as_str(), "<redacted>"));
            }
        }
        out.unwrap_or_else(|| s.to_string())
    }

    /// [`Client::scrub`] on every string (and key) of a JSON value.
    fn scrub_value(&self, v: &mut Value) {
        match v {
            Value::String(s) if self.secret_forms.iter().any(|f| s.contains(f.as_str())) => {
                *s = self.scrub(s);
            }
            Value::Array(items) => items.iter_mut().for_each(|i| self.scrub_value(i)),
            Value::Object(map) => {
                if map
                    .keys()
                    .any(|k| self.secret_forms.iter().any(|f| k.contains(f.as_str())))
                {
                    *map = std::mem::take(map)
                        .into_iter()
                        .map(|(k, v)| (self.scrub(&k), v))
                        .collect();
                }
                map.values_mut().for_each(|i| self.scrub_value(i));
            }
            _ => {}
        }
    }

    fn scrub_meta(&self, m: ErrorMeta) -> ErrorMeta {
        ErrorMeta {
            error_type: m.error_type.map(|t| self.scrub(&t)),
            provider_code: m.provider_code.map(|c| self.scrub(&c)),
        }
    }

    fn scrub_error(&self, e: ProviderError) -> ProviderError {
        match e {
            ProviderError::Unauthorized { message } => ProviderError::Unauthorized {
                message: self.scrub(&message),
            },
            ProviderError::PaymentRequired { limit, message } => ProviderError::PaymentRequired {
                limit,
                message: self.scrub(&message),
            },
            ProviderError::Rejected {
                status,
                code,
                message,
                meta,
            } => ProviderError::Rejected {
                status,
                code: code.map(|c| self.scrub(&c)),
                message: self.scrub(&message),
                meta: self.scrub_meta(meta),
            },
            ProviderError::Exhausted {
                attempts,
                last,
                meta,
            } => ProviderError::Exhausted {
                attempts,
                last: self.scrub(&last),
                meta: self.scrub_meta(meta),
            },
            ProviderError::Config(m) => ProviderError::Config(self.scrub(&m)),
        }
    }
}

/// `usage.cost` of a reply that is not used (retried or refused): what
/// the provider charged for it. 0.0 when absent or unknown (see
/// [`reply_cost`]): an unknown charge is warned about, never summed.
fn charged_cost(cost: Option<&Value>) -> f64 {
    reply_cost(cost, "usage.cost")
        .filter(|c| c.is_finite())
        .unwrap_or(0.0)
}

tokio::task_local! {
    static CALL_LOG: std::sync::Arc<CallLog>;
}

/// What the requests made inside [`CallLog::scope`] were charged for
/// beyond the replies they returned (attempts retried after a paid reply:
/// empty content, no choices, an error inside a 200 with `usage.cost`; or
/// a paid reply that was refused), and how many of them failed, by model.
/// Each charge is noted as soon as its reply arrives, so a caller that
/// drops a request half-way still knows what it paid.
#[derive(Debug, Default)]
pub struct CallLog {
    by_model: std::sync::Mutex<Vec<(String, CallNote)>>,
}

/// One model's entry in a [`CallLog`].
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CallNote {
    /// Attempts charged but not returned, and their cost in USD.
    pub discarded_attempts: u32,
    pub discarded_cost_usd: f64,
    /// Requests that ended in an error (after their retries).
    pub failures: u32,
}

impl CallLog {
    /// Runs `f` with this log collecting what [`Client::chat_json`] notes.
    pub async fn scope<F: std::future::Future>(self: &std::sync::Arc<Self>, f: F) -> F::Output {
        CALL_LOG.scope(self.clone(), f).await
    }

    /// Takes what was noted so far, by model.
    pub fn take(&self) -> Vec<(String, CallNote)> {
        std::mem::take(&mut *self.by_model.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn note(model: &str, f: impl FnOnce(&mut CallNote)) {
        let _ = CALL_LOG.try_with(|log| {
            let mut v = log.by_model.lock().unwrap_or_else(|e| e.into_inner());
            match v.iter_mut().find(|(m, _)| m == model) {
                Some((_, n)) => f(n),
                None => {
                    let mut n = CallNote::default();
                    f(&mut n);
                    v.push((model.to_string(), n));
                }
            }
        });
    }

    fn charge(model: &str, usd: f64) {
        if usd > 0.0 {
            Self::note(model, |n| {
                n.discarded_attempts += 1;
                n.discarded_cost_usd += usd;
            });
        }
    }

    fn failed(model: &str, e: ProviderError) -> ProviderError {
        Self::note(model, |n| n.failures += 1);
        e
    }
}

/// `url` as it may be shown: anything before the last `@` (after
/// `scheme://`) replaced by `***`, and any `?query` or `#fragment` by `?…`,
/// whether or not the URL parses (a password or a token never reaches a
/// message).
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let (rest, tail) = match rest.find(['?', '#']) {
        Some(i) => (&rest[..i], "?…"),
        None => (rest, ""),
    };
    match rest.rfind('@') {
        Some(at) => format!("{scheme}***@{}{tail}", &rest[at + 1..]),
        None => format!("{scheme}{rest}{tail}"),
    }
}

/// The forms in which a reply may echo `key`: as is; JSON-escaped as
/// serde does it, with `\/`, as Go does it (`\u003c` for `<`, `>`, `&`),
/// with every character `\u`-escaped, and escaped twice (a JSON text inside
/// a JSON string, as a model's structured reply is); HTML-escaped (named,
/// numeric, every character numeric) and percent-encoded. Distinct,
/// longest first, none under 4 characters. (A real OpenRouter key is
/// letters, digits and `-`, where most of these forms are the key itself.)
fn secret_forms(key: &str) -> Vec<String> {
    if key.len() < 4 {
        return Vec::new();
    }
    let json = |s: &str| {
        let q = serde_json::to_string(s).unwrap_or_default();
        q[1..q.len() - 1].to_string()
    };
    let json1 = json(key);
    let go = json1
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026");
    let every = |upper: bool| -> String {
        key.encode_utf16()
            .map(|u| {
                if upper {
                    format!("\\u{u:04X}")
                } else {
                    format!("\\u{u:04x}")
                }
            })
            .collect()
    };
    let html = |apos: &str| {
        key.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
            .replace('\'', apos)
    };
    let html_numeric: String = key.chars().map(|c| format!("&#{};", c as u32)).collect();
    let percent: String = key
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let mut forms = vec![
        key.to_string(),
        json1.replace('/', "\\/"),
        json(&json1),
        json(&go),
        go,
        every(false),
        every(true),
        json1,
        html("&#39;"),
        html("&#x27;"),
        html("&apos;"),
        html_numeric,
        percent,
    ];
    forms.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    forms.dedup();
    forms.retain(|f| f.len() >= 4);
    forms
}

/// Reads a reply body chunk by chunk, giving up as soon as it passes
/// `limit` bytes (or announces more in Content-Length): a huge body is
/// never held in memory. Invalid UTF-8 is replaced, as `text()` would.
async fn read_capped(mut resp: reqwest::Response, limit: u64) -> Result<String, RetryableFailure> {
    let too_large = |what: String| RetryableFailure {
        reason: format!(
            "reply body {what} the {limit}-byte limit (HELMBENCH_MAX_REPLY_BYTES); not read further"
        ),
        ..Default::default()
    };
    if let Some(n) = resp.content_length().filter(|n| *n > limit) {
        return Err(too_large(format!("of {n} bytes is over")));
    }
    let mut buf: Vec<u8> = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if (buf.len() + chunk.len()) as u64 > limit {
                    return Err(too_large("is over".into()));
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(e) => return Err(transport_failure(&e)),
        }
    }
    Ok(match String::from_utf8(buf) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use wiremock::matchers::{body_json, header, method, path};
    use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

    const KEY: &str = "sk-or-v1-SECRET-test-key-0123456789abcdef";

    fn cfg(server: &MockServer) -> ClientConfig {
        let mut c = ClientConfig::new(server.uri(), KEY);
        c.backoff_base = Duration::from_millis(10);
        c.backoff_max = Duration::from_millis(40);
        c.request_timeout = Duration::from_secs(5);
        c.max_total = Duration::from_secs(20);
        c.max_attempts = 4;
        c
    }

    fn client(server: &MockServer) -> Client {
        Client::new(cfg(server)).expect("client")
    }

    fn req() -> ChatRequest {
        ChatRequest {
            model: "openai/gpt-4o-mini".into(),
            prompt: "Hello?".into(),
            response_format: None,
            temperature: None,
            seed: None,
            max_tokens: None,
            provider: None,
            reasoning: None,
        }
    }

    fn ok_body(content: &str) -> Value {
        json!({
            "id": "gen-123",
            "provider": "OpenAI",
            "model": "openai/gpt-4o-mini",
            "object": "chat.completion",
            "choices": [{
                "index": 0,
                "finish_reason": "stop",
                "native_finish_reason": "stop",
                "message": {"role": "assistant", "content": content}
            }],
            "usage": {
                "prompt_tokens": 12,
                "completion_tokens": 7,
                "total_tokens": 19,
                "cost": 0.00042,
                "cost_details": {"upstream_inference_cost": 0.0004},
                "completion_tokens_details": {"reasoning_tokens": 3},
                "prompt_tokens_details": {"cached_tokens": 8}
            }
        })
    }

    fn ok() -> ResponseTemplate {
        ResponseTemplate::new(200).set_body_json(ok_body("{\"answer\": 1}"))
    }

    fn err(status: u16, code: Value, message: &str) -> ResponseTemplate {
        ResponseTemplate::new(status)
            .set_body_json(json!({"error": {"code": code, "message": message}}))
    }

    /// Replies with each template in turn, then repeats the last one.
    struct Sequence {
        replies: Vec<ResponseTemplate>,
        calls: Arc<Mutex<usize>>,
    }

    impl Respond for Sequence {
        fn respond(&self, _: &Request) -> ResponseTemplate {
            let mut n = self.calls.lock().unwrap();
            let r = self.replies[(*n).min(self.replies.len() - 1)].clone();
            *n += 1;
            r
        }
    }

    async fn mount_sequence(
        server: &MockServer,
        replies: Vec<ResponseTemplate>,
    ) -> Arc<Mutex<usize>> {
        let calls = Arc::new(Mutex::new(0));
        Mock::given(method("POST"))
            .and(path("/chat/completions"))
            .respond_with(Sequence {
                replies,
                calls: calls.clone(),
            })
            .mount(server)
            .await;
        calls
    }

    fn assert_no_key(s: &str) {
        assert!(!s.contains(KEY), "key leaked: {s}");
        assert!(!s.contains("SECRET"), "key leaked: {s}");
    }

    #[test]
    fn serialised_body_matches_the_value_body() {
        let mut with_all = req();
        with_all.temperature = Some(0.7);
        with_all.seed = Some(-3);
        with_all.max_tokens = Some(800);
        with_all.response_format = Some(
            json!({"type": "json_schema", "json_schema": {"name": "r", "strict": true,
            "schema": {"type": "object", "properties": {"z": {"type": "string"}, "a": {"enum": [1, 2.5, null]}}}}}),
        );
        with_all.prompt = "quotes \" and \\ and\nnew lines, emoji \u{1F600}, </tag>".into();
        let mut bare = req();
        bare.response_format = None;
        bare.temperature = Some(f64::NAN);
        let mut whole = with_all.clone();
        whole.temperature = Some(1.0);
        whole.seed = None;
        for r in [req(), with_all, bare, whole] {
            assert_eq!(r.body_json(), r.body().to_string());
        }
    }

    #[tokio::test]
    async fn body_and_headers_with_response_format() {
        let server = MockServer::start().await;
        let schema = json!({"type": "json_schema", "json_schema": {"name": "r", "strict": true, "schema": {"type": "object"}}});
        let expected = json!({
            "model": "openai/gpt-4o-mini",
            "messages": [{"role": "user", "content": "Hello?"}],
            "response_format": schema,
            "provider": {"require_parameters": true},
            "temperature": 0.0,
            "seed": 7,
            "max_tokens": 300,
            "usage": {"include": true}
        });
        Mock::given(method("POST"))
            .and(path("/chat/completions"))
            .and(header("authorization", format!("Bearer {KEY}").as_str()))
            .and(header("x-title", "helmbench"))
            .and(header("http-referer", "https://example.org/helmbench"))
            .and(header("content-type", "application/json"))
            .and(body_json(&expected))
            .respond_with(ok())
            .expect(1)
            .mount(&server)
            .await;
        let mut c = cfg(&server);
        c.base_url = format!("{}/", server.uri()); // trailing slash trimmed
        c.title = Some("helmbench".into());
        c.referer = Some("https://example.org/helmbench".into());
        let client = Client::new(c).unwrap();
        let r = ChatRequest {
            response_format: Some(schema),
            temperature: Some(0.0),
            seed: Some(7),
            max_tokens: Some(300),
            ..req()
        };
        let got = client.chat(&r).await.expect("chat");
        assert_eq!(got.content, "{\"answer\": 1}");
        // Key order on the wire is stable too (preserve_order).
        let keys: Vec<String> = r.body().as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys,
            [
                "model",
                "messages",
                "response_format",
                "provider",
                "temperature",
                "seed",
                "max_tokens",
                "usage"
            ]
        );
    }

    #[tokio::test]
    async fn body_without_response_format_has_no_provider_block() {
        let server = MockServer::start().await;
        let expected = json!({
            "model": "openai/gpt-4o-mini",
            "messages": [{"role": "user", "content": "Hello?"}],
            "usage": {"include": true}
        });
        Mock::given(method("POST"))
            .and(path("/chat/completions"))
            .and(body_json(&expected))
            .respond_with(ok())
            .expect(1)
            .mount(&server)
            .await;
        let got = client(&server).chat(&req()).await.expect("chat");
        assert_eq!(got.attempts, 1);
        let body = req().body();
        assert!(body.get("provider").is_none());
        assert!(body.get("response_format").is_none());
        assert!(body.get("temperature").is_none());
        // No attribution headers when unset.
        let received = server.received_requests().await.unwrap();
        assert!(received[0].headers.get("x-title").is_none());
        assert!(received[0].headers.get("http-referer").is_none());
    }

    #[tokio::test]
    async fn success_parses_usage_cost_and_ids() {
        let server = MockServer::start().await;
        mount_sequence(&server, vec![ok()]).await;
        let c = client(&server).chat(&req()).await.unwrap();
        assert_eq!(
            c,
            Completion {
                generation_id: Some("gen-123".into()),
                content: "{\"answer\": 1}".into(),
                finish_reason: Some("stop".into()),
                provider: Some("OpenAI".into()),
                served_model: Some("openai/gpt-4o-mini".into()),
                prompt_tokens: 12,
                completion_tokens: 7,
                reasoning_tokens: 3,
                cached_prompt_tokens: 8,
                cost_usd: 0.00042,
                upstream_cost_usd: Some(0.0004),
                attempts: 1,
                latency_ms: c.latency_ms,
            }
        );
    }

    /// A 402 (or a key-limit 403) says which limit it hit; only the
    /// in-flight budget is retried.
    #[tokio::test]
    async fn spending_limits_are_told_apart() {
        let limit = |status: u16, meta: Value| {
            ResponseTemplate::new(status).set_body_json(
                json!({"error": {"code": status, "message": "no", "metadata": meta}}),
            )
        };
        for (status, meta, want) in [
            (
                402,
                json!({"limit_source": "openrouter_key_limit"}),
                CreditLimit::KeyLimit,
            ),
            (
                403,
                json!({"limit_source": "openrouter_key_limit"}),
                CreditLimit::KeyLimit,
            ),
            (
                402,
                json!({"limit_source": "openrouter_credits"}),
                CreditLimit::Credits,
            ),
            (
                402,
                json!({"limit_source": "openrouter_credits", "reason": "weight_exceeds_budget"}),
                CreditLimit::RequestTooExpensive,
            ),
            (402, json!({}), CreditLimit::Unspecified),
        ] {
            let server = MockServer::start().await;
            mount_sequence(&server, vec![limit(status, meta.clone()), ok()]).await;
            match client(&server).chat(&req()).await {
                Err(ProviderError::PaymentRequired { limit, .. }) => {
                    assert_eq!(limit, want, "{meta}")
                }
                other => panic!("{meta}: {other:?}"),
            }
        }
        let server = MockServer::start().await;
        let in_flight = limit(
            402,
            json!({"limit_source": "openrouter_in_flight_budget", "reason": "in_flight_budget_exhausted"}),
        )
        .insert_header("retry-after", "0");
        mount_sequence(&server, vec![in_flight, ok()]).await;
        assert_eq!(client(&server).chat(&req()).await.unwrap().attempts, 2);
    }

    #[tokio::test]
    async fn provider_error_type_and_code_are_kept() {
        let server = MockServer::start().await;
        let e = ResponseTemplate::new(503).set_body_json(json!({"error": {"code": 503,
            "message": "overloaded", "metadata": {"error_type": "provider_overloaded", "provider_code": 529}}}));
        mount_sequence(&server, vec![e]).await;
        let err = client(&server).chat(&req()).await.unwrap_err();
        assert!(matches!(err, ProviderError::Exhausted { .. }), "{err:?}");
        assert_eq!(
            err.meta(),
            ErrorMeta {
                error_type: Some("provider_overloaded".into()),
                provider_code: Some("529".into()),
            }
        );
    }

    #[tokio::test]
    async fn missing_usage_is_tolerated() {
        let server = MockServer::start().await;
        let body = json!({"choices": [{"message": {"content": "hi"}}]});
        mount_sequence(
            &server,
            vec![ResponseTemplate::new(200).set_body_json(body)],
        )
        .await;
        let c = client(&server).chat(&req()).await.unwrap();
        assert_eq!(c.content, "hi");
        assert_eq!(c.generation_id, None);
        assert_eq!(c.provider, None);
        assert_eq!(c.finish_reason, None);
        assert_eq!((c.prompt_tokens, c.completion_tokens), (0, 0));
        assert_eq!(c.cost_usd, 0.0);
        assert_eq!(c.upstream_cost_usd, None);
    }

    #[tokio::test]
    async fn partial_usage_without_cost_is_tolerated() {
        let server = MockServer::start().await;
        let mut body = ok_body("hi");
        body["usage"] = json!({"prompt_tokens": 3, "cost_details": null});
        mount_sequence(
            &server,
            vec![ResponseTemplate::new(200).set_body_json(body)],
        )
        .await;
        let c = client(&server).chat(&req()).await.unwrap();
        assert_eq!((c.prompt_tokens, c.completion_tokens), (3, 0));
        assert_eq!(c.cost_usd, 0.0);
        assert_eq!(c.upstream_cost_usd, None);
    }

    #[tokio::test]
    async fn rate_limit_honours_retry_after_then_succeeds() {
        let server = MockServer::start().await;
        let calls = mount_sequence(
            &server,
            vec![
                err(429, json!(429), "Rate limit exceeded").insert_header("Retry-After", "1"),
                ok(),
            ],
        )
        .await;
        let started = Instant::now();
        let c = client(&server).chat(&req()).await.unwrap();
        assert_eq!(c.attempts, 2);
        assert_eq!(*calls.lock().unwrap(), 2);
        // Backoff alone would be ~10 ms; Retry-After says one second.
        assert!(
            started.elapsed() >= Duration::from_millis(950),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn retry_after_beyond_total_budget_gives_up_early() {
        let server = MockServer::start().await;
        let calls = mount_sequence(
            &server,
            vec![err(429, json!(429), "slow down").insert_header("Retry-After", "120")],
        )
        .await;
        let mut c = cfg(&server);
        c.max_total = Duration::from_secs(2);
        let started = Instant::now();
        let e = Client::new(c).unwrap().chat(&req()).await.unwrap_err();
        assert!(
            matches!(e, ProviderError::Exhausted { attempts: 1, .. }),
            "{e:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(*calls.lock().unwrap(), 1);
        assert!(e.to_string().contains("slow down"), "{e}");
    }

    #[tokio::test]
    async fn server_error_then_success() {
        let server = MockServer::start().await;
        mount_sequence(&server, vec![err(500, json!(500), "Internal"), ok()]).await;
        let c = client(&server).chat(&req()).await.unwrap();
        assert_eq!(c.attempts, 2);
    }

    #[tokio::test]
    async fn gateway_errors_are_retried() {
        let server = MockServer::start().await;
        let calls = mount_sequence(
            &server,
            vec![
                err(502, json!(502), "model down"),
                err(503, json!(503), "no provider available"),
                ResponseTemplate::new(504).set_body_string("<html>Gateway Timeout</html>"),
                ok(),
            ],
        )
        .await;
        let c = client(&server).chat(&req()).await.unwrap();
        assert_eq!(c.attempts, 4);
        assert_eq!(*calls.lock().unwrap(), 4);
    }

    #[tokio::test]
    async fn request_timeout_408_is_retried() {
        let server = MockServer::start().await;
        mount_sequence(&server, vec![err(408, json!(408), "timed out"), ok()]).await;
        assert_eq!(client(&server).chat(&req()).await.unwrap().attempts, 2);
    }

    #[tokio::test]
    async fn top_level_error_inside_200_is_retried() {
        let server = MockServer::start().await;
        mount_sequence(
            &server,
            vec![
                ResponseTemplate::new(200).set_body_json(json!({
                    "error": {"code": 502, "message": "Provider returned error",
                              "metadata": {"provider_name": "Foo", "raw": "upstream exploded"}}
                })),
                ok(),
            ],
        )
        .await;
        let c = client(&server).chat(&req()).await.unwrap();
        assert_eq!(c.attempts, 2);
        assert_eq!(c.content, "{\"answer\": 1}");
    }

    #[tokio::test]
    async fn choice_level_error_inside_200_is_retried() {
        let server = MockServer::start().await;
        let mut bad = ok_body("partial");
        bad["choices"][0]["finish_reason"] = json!("error");
        bad["choices"][0]["error"] = json!({"code": "server_error", "message": "stream broke"});
        let mut bad_no_detail = ok_body("");
        bad_no_detail["choices"][0]["finish_reason"] = json!("error");
        mount_sequence(
            &server,
            vec![
                ResponseTemplate::new(200).set_body_json(bad),
                ResponseTemplate::new(200).set_body_json(bad_no_detail),
                ok(),
            ],
        )
        .await;
        let c = client(&server).chat(&req()).await.unwrap();
        assert_eq!(c.attempts, 3);
        assert_eq!(c.finish_reason.as_deref(), Some("stop"));
    }

    #[tokio::test]
    async fn error_inside_200_that_never_clears_reports_its_message() {
        let server = MockServer::start().await;
        mount_sequence(
            &server,
            vec![ResponseTemplate::new(200).set_body_json(json!({
                "error": {"code": "provider_overloaded", "message": "try later"}
            }))],
        )
        .await;
        let e = client(&server).chat(&req()).await.unwrap_err();
        match &e {
            ProviderError::Exhausted { attempts, last, .. } => {
                assert_eq!(*attempts, 4);
                assert!(last.contains("provider_overloaded"), "{last}");
                assert!(last.contains("try later"), "{last}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn error_codes_may_be_numbers_or_strings() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(err(400, json!("invalid_request"), "bad schema"))
            .expect(1)
            .mount(&server)
            .await;
        let e = client(&server).chat(&req()).await.unwrap_err();
        match e {
            ProviderError::Rejected {
                status,
                code,
                message,
                ..
            } => {
                assert_eq!(status, 400);
                assert_eq!(code.as_deref(), Some("invalid_request"));
                assert_eq!(message, "bad schema");
            }
            other => panic!("unexpected {other:?}"),
        }

        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(err(
                404,
                json!(404),
                "No endpoints found that support the requested parameters",
            ))
            .expect(1)
            .mount(&server)
            .await;
        let e = client(&server).chat(&req()).await.unwrap_err();
        match &e {
            ProviderError::Rejected { status, code, .. } => {
                assert_eq!(*status, 404);
                assert_eq!(code.as_deref(), Some("404"));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(e.to_string().contains("No endpoints found"), "{e}");
        assert_eq!(e.kind(), "rejected");
        assert!(!e.is_fatal_for_run());
    }

    async fn not_retried(status: u16) -> ProviderError {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/chat/completions"))
            .respond_with(err(status, json!(status), "nope"))
            .expect(1)
            .mount(&server)
            .await;
        let e = client(&server).chat(&req()).await.unwrap_err();
        server.verify().await;
        e
    }

    #[tokio::test]
    async fn client_errors_are_not_retried() {
        for status in [400u16, 403, 404, 422] {
            let e = not_retried(status).await;
            assert!(
                matches!(e, ProviderError::Rejected { status: s, .. } if s == status),
                "{status}: {e:?}"
            );
        }
        let e = not_retried(401).await;
        assert!(matches!(e, ProviderError::Unauthorized { .. }));
        assert!(e.is_fatal_for_run());
        assert_eq!(e.kind(), "unauthorized");
        let e = not_retried(402).await;
        assert!(matches!(e, ProviderError::PaymentRequired { .. }));
        assert!(e.is_fatal_for_run());
        assert_eq!(e.kind(), "payment_required");
    }

    #[tokio::test]
    async fn unauthorized_names_the_variable_not_the_key() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(err(
                401,
                json!(401),
                &format!("No auth credentials found for {KEY}"),
            ))
            .expect(1)
            .mount(&server)
            .await;
        let e = client(&server).chat(&req()).await.unwrap_err();
        let shown = e.to_string();
        assert!(shown.contains("OPENROUTER_API_KEY"), "{shown}");
        assert!(shown.contains("No auth credentials found"), "{shown}");
        assert_no_key(&shown);
        assert_no_key(&format!("{e:?}"));
    }

    #[tokio::test]
    async fn auth_and_credit_errors_inside_200_are_fatal() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(json!({"error": {"code": 401, "message": "User not found."}})),
            )
            .expect(1)
            .mount(&server)
            .await;
        let e = client(&server).chat(&req()).await.unwrap_err();
        assert!(matches!(e, ProviderError::Unauthorized { .. }), "{e:?}");

        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_json(
                json!({"error": {"code": "402", "message": "Insufficient credits"}}),
            ))
            .expect(1)
            .mount(&server)
            .await;
        let e = client(&server).chat(&req()).await.unwrap_err();
        assert!(matches!(e, ProviderError::PaymentRequired { .. }), "{e:?}");
        assert!(e.to_string().contains("Insufficient credits"));
    }

    #[tokio::test]
    async fn in_flight_budget_402_with_retry_after_is_retried() {
        let server = MockServer::start().await;
        let busy = ResponseTemplate::new(402)
            .insert_header("Retry-After", "0")
            .set_body_json(
                json!({"error": {"code": 402, "message": "in-flight budget exhausted",
                "metadata": {"limit_source": "openrouter_in_flight_budget"}}}),
            );
        mount_sequence(&server, vec![busy, ok()]).await;
        let c = client(&server).chat(&req()).await.unwrap();
        assert_eq!(c.attempts, 2);
    }

    #[tokio::test]
    async fn exhaustion_after_max_attempts() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(err(503, json!(503), "No instances available"))
            .expect(4)
            .mount(&server)
            .await;
        let e = client(&server).chat(&req()).await.unwrap_err();
        match &e {
            ProviderError::Exhausted { attempts, last, .. } => {
                assert_eq!(*attempts, 4);
                assert!(last.contains("503"), "{last}");
                assert!(last.contains("No instances available"), "{last}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(e.kind(), "exhausted");
        assert!(!e.is_fatal_for_run());
    }

    #[tokio::test]
    async fn total_budget_is_respected() {
        let server = MockServer::start().await;
        let calls = mount_sequence(&server, vec![err(500, json!(500), "boom")]).await;
        let mut c = cfg(&server);
        c.max_attempts = 1000;
        c.backoff_base = Duration::from_millis(100);
        c.backoff_max = Duration::from_millis(100);
        c.max_total = Duration::from_millis(600);
        let started = Instant::now();
        let e = Client::new(c).unwrap().chat(&req()).await.unwrap_err();
        let elapsed = started.elapsed();
        assert!(matches!(e, ProviderError::Exhausted { .. }), "{e:?}");
        assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}");
        let n = *calls.lock().unwrap();
        assert!((2..=13).contains(&n), "{n} calls");
    }

    #[tokio::test]
    async fn empty_content_is_retried() {
        let server = MockServer::start().await;
        let calls = mount_sequence(
            &server,
            vec![
                ResponseTemplate::new(200).set_body_json(ok_body("  \n ")),
                ResponseTemplate::new(200)
                    .set_body_json(json!({"id": "gen-x", "choices": [{"message": {"content": null}, "finish_reason": "stop"}]})),
                ok(),
            ],
        )
        .await;
        let c = client(&server).chat(&req()).await.unwrap();
        assert_eq!(c.attempts, 3);
        assert_eq!(*calls.lock().unwrap(), 3);
    }

    #[tokio::test]
    async fn charged_replies_that_are_retried_or_refused_are_noted() {
        let server = MockServer::start().await;
        let usage = json!({"cost": 0.25});
        mount_sequence(
            &server,
            vec![
                // Empty content (charged, 0.42 from ok_body), no choices,
                // an error inside a 200, then a 400 inside a 200: all charged.
                ResponseTemplate::new(200).set_body_json(ok_body("")),
                ResponseTemplate::new(200).set_body_json(json!({"choices": [], "usage": usage})),
                ResponseTemplate::new(200).set_body_json(
                    json!({"error": {"code": 502, "message": "x"}, "usage": {"cost": "0.25"}}),
                ),
                ResponseTemplate::new(200).set_body_json(
                    json!({"error": {"code": 400, "message": "bad"}, "usage": {"cost": "NaN"}}),
                ),
            ],
        )
        .await;
        let log = std::sync::Arc::new(CallLog::default());
        let e = log.scope(client(&server).chat(&req())).await.unwrap_err();
        assert_eq!(e.kind(), "rejected");
        let notes = log.take();
        assert_eq!(notes.len(), 1);
        let (model, n) = &notes[0];
        assert_eq!(model, "openai/gpt-4o-mini");
        // The NaN cost is not a charge.
        assert_eq!(n.discarded_attempts, 3);
        assert!((n.discarded_cost_usd - 0.50042).abs() < 1e-12, "{n:?}");
        assert_eq!(n.failures, 1);
        // Outside a scope nothing is noted, and nothing fails.
        assert!(log.take().is_empty());
    }

    #[tokio::test]
    async fn refusal_is_returned_as_content() {
        let server = MockServer::start().await;
        let body = json!({"choices": [{"message": {"content": null, "refusal": "I can't help with that."}, "finish_reason": "stop"}]});
        mount_sequence(
            &server,
            vec![ResponseTemplate::new(200).set_body_json(body)],
        )
        .await;
        let c = client(&server).chat(&req()).await.unwrap();
        assert_eq!(c.content, "I can't help with that.");
        assert_eq!(c.attempts, 1);
    }

    #[tokio::test]
    async fn timeout_is_retried() {
        let server = MockServer::start().await;
        let calls = mount_sequence(
            &server,
            vec![ok().set_delay(Duration::from_millis(1500)), ok()],
        )
        .await;
        let mut c = cfg(&server);
        c.request_timeout = Duration::from_millis(300);
        let got = Client::new(c).unwrap().chat(&req()).await.unwrap();
        assert_eq!(got.attempts, 2);
        assert_eq!(*calls.lock().unwrap(), 2);
        assert!(
            got.latency_ms < 1000,
            "latency is the successful attempt's: {}",
            got.latency_ms
        );
    }

    #[tokio::test]
    async fn timeouts_exhaust_with_a_timeout_reason() {
        let server = MockServer::start().await;
        mount_sequence(&server, vec![ok().set_delay(Duration::from_millis(1500))]).await;
        let mut c = cfg(&server);
        c.request_timeout = Duration::from_millis(200);
        c.max_attempts = 2;
        let e = Client::new(c).unwrap().chat(&req()).await.unwrap_err();
        match e {
            ProviderError::Exhausted { attempts, last, .. } => {
                assert_eq!(attempts, 2);
                assert!(last.contains("timeout"), "{last}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn connection_errors_are_retried_then_exhausted() {
        // Bind a port, then free it, so nothing listens there.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut c = ClientConfig::new(format!("http://127.0.0.1:{port}"), KEY);
        c.backoff_base = Duration::from_millis(5);
        c.backoff_max = Duration::from_millis(10);
        c.max_attempts = 3;
        let e = Client::new(c).unwrap().chat(&req()).await.unwrap_err();
        match &e {
            ProviderError::Exhausted { attempts, last, .. } => {
                assert_eq!(*attempts, 3);
                assert!(last.contains("connection"), "{last}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_no_key(&e.to_string());
        assert_no_key(&format!("{e:?}"));
    }

    #[tokio::test]
    async fn length_finish_is_returned_not_retried() {
        let server = MockServer::start().await;
        let mut body = ok_body("{\"answer\": \"trunc");
        body["choices"][0]["finish_reason"] = json!("length");
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_json(body))
            .expect(1)
            .mount(&server)
            .await;
        let c = client(&server).chat(&req()).await.unwrap();
        assert_eq!(c.finish_reason.as_deref(), Some("length"));
        assert_eq!(c.content, "{\"answer\": \"trunc");
        assert_eq!(c.attempts, 1);
        assert_eq!(crate::judging::reply::extract_json(&c.content), None);
    }

    #[tokio::test]
    async fn length_finish_with_no_content_is_returned_not_retried() {
        // Reasoning models can spend the whole max_tokens before answering.
        let server = MockServer::start().await;
        let body = json!({"choices": [{"message": {"content": null}, "finish_reason": "length"}],
                          "usage": {"prompt_tokens": 5, "completion_tokens": 300}});
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_json(body))
            .expect(1)
            .mount(&server)
            .await;
        let c = client(&server).chat(&req()).await.unwrap();
        assert_eq!(c.content, "");
        assert_eq!(c.completion_tokens, 300);
    }

    #[tokio::test]
    async fn non_json_200_is_retried() {
        let server = MockServer::start().await;
        mount_sequence(
            &server,
            vec![
                ResponseTemplate::new(200).set_body_string("<html>oops</html>"),
                ok(),
            ],
        )
        .await;
        assert_eq!(client(&server).chat(&req()).await.unwrap().attempts, 2);
    }

    #[tokio::test]
    async fn redirects_are_not_followed() {
        let server = MockServer::start().await;
        let other = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ok())
            .expect(0)
            .mount(&other)
            .await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(307).insert_header(
                "Location",
                format!("{}/chat/completions", other.uri()).as_str(),
            ))
            .expect(1)
            .mount(&server)
            .await;
        let e = client(&server).chat(&req()).await.unwrap_err();
        assert!(
            matches!(e, ProviderError::Rejected { status: 307, .. }),
            "{e:?}"
        );
        other.verify().await;
    }

    #[tokio::test]
    async fn long_provider_messages_are_truncated() {
        let server = MockServer::start().await;
        let long = "x".repeat(5000);
        Mock::given(method("POST"))
            .respond_with(err(400, json!(400), &long))
            .mount(&server)
            .await;
        let e = client(&server).chat(&req()).await.unwrap_err();
        let shown = e.to_string();
        assert!(shown.len() < 700, "{}", shown.len());
        assert!(shown.contains("xxxx"));
    }

    /// Collects every tracing event's fields as text.
    struct Capture(Arc<Mutex<Vec<String>>>);

    struct FieldText(String);

    impl tracing::field::Visit for FieldText {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
            self.0.push_str(&format!("{}={:?} ", field.name(), value));
        }
    }

    impl tracing::Subscriber for Capture {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            let mut t = FieldText(String::new());
            span.record(&mut t);
            self.0.lock().unwrap().push(t.0);
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
            let mut t = FieldText(String::new());
            values.record(&mut t);
            self.0.lock().unwrap().push(t.0);
        }
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            let mut t = FieldText(format!("{} ", event.metadata().level()));
            event.record(&mut t);
            self.0.lock().unwrap().push(t.0);
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    #[tokio::test]
    async fn retry_logs_never_contain_the_key() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let _guard = tracing::subscriber::set_default(Capture(lines.clone()));
        let server = MockServer::start().await;
        mount_sequence(
            &server,
            vec![
                err(500, json!(500), &format!("echo {KEY}")),
                err(429, json!(429), "slow"),
                ok(),
            ],
        )
        .await;
        let c = client(&server).chat(&req()).await.unwrap();
        assert_eq!(c.attempts, 3);
        let lines = lines.lock().unwrap();
        let warns: Vec<&String> = lines
            .iter()
            .filter(|l| l.starts_with("WARN") && l.contains("retrying"))
            .collect();
        assert_eq!(warns.len(), 2, "{lines:?}");
        assert!(
            warns[0].contains("attempt=1") && warns[0].contains("status=500"),
            "{}",
            warns[0]
        );
        assert!(warns[0].contains("delay_ms=") && warns[0].contains("openai/gpt-4o-mini"));
        for l in lines.iter() {
            assert_no_key(l);
        }
    }

    #[tokio::test]
    async fn echoed_key_is_scrubbed_from_errors() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(err(403, json!(403), &format!("key {KEY} is blocked")))
            .mount(&server)
            .await;
        let e = client(&server).chat(&req()).await.unwrap_err();
        assert_no_key(&e.to_string());
        assert_no_key(&format!("{e:?}"));
        assert!(e.to_string().contains("<redacted>"));
    }

    #[test]
    fn debug_output_never_contains_the_key() {
        let mut c = ClientConfig::new(DEFAULT_BASE_URL, KEY);
        c.title = Some("helmbench".into());
        let shown = format!("{c:?}");
        assert!(shown.contains("api_key: <redacted>"), "{shown}");
        assert_no_key(&shown);
        let client = Client::new(c).unwrap();
        assert_no_key(&format!("{client:?}"));

        let errors = [
            ProviderError::Unauthorized {
                message: "m".into(),
            },
            ProviderError::PaymentRequired {
                limit: CreditLimit::Unspecified,
                message: "m".into(),
            },
            ProviderError::Rejected {
                status: 400,
                code: Some("400".into()),
                message: "m".into(),
                meta: ErrorMeta::default(),
            },
            ProviderError::Exhausted {
                attempts: 3,
                last: "m".into(),
                meta: ErrorMeta::default(),
            },
            ProviderError::Config("m".into()),
        ];
        let kinds: Vec<&str> = errors.iter().map(ProviderError::kind).collect();
        assert_eq!(
            kinds,
            [
                "unauthorized",
                "payment_required",
                "rejected",
                "exhausted",
                "config"
            ]
        );
        for e in &errors {
            assert_no_key(&format!("{e:?}"));
            assert_no_key(&e.to_string());
        }
    }

    #[test]
    fn config_errors_do_not_echo_the_key() {
        let bad = ClientConfig::new(DEFAULT_BASE_URL, "sk-or-SECRET\nX-Injected: 1");
        let e = Client::new(bad).unwrap_err();
        assert!(matches!(e, ProviderError::Config(_)));
        assert_no_key(&e.to_string());
        assert_no_key(&format!("{e:?}"));

        assert!(matches!(
            Client::new(ClientConfig::new(DEFAULT_BASE_URL, "  ")),
            Err(ProviderError::Config(_))
        ));
        assert!(matches!(
            Client::new(ClientConfig::new("openrouter.ai/api/v1", KEY)),
            Err(ProviderError::Config(_))
        ));
        let mut zero = ClientConfig::new(DEFAULT_BASE_URL, KEY);
        zero.max_attempts = 0;
        assert!(matches!(Client::new(zero), Err(ProviderError::Config(_))));
    }

    #[test]
    fn defaults() {
        let c = ClientConfig::new(DEFAULT_BASE_URL, KEY);
        assert_eq!(c.request_timeout, Duration::from_secs(120));
        assert_eq!(c.max_attempts, 6);
        assert_eq!(c.max_total, Duration::from_secs(600));
        assert_eq!(c.backoff_base, Duration::from_secs(1));
        assert_eq!(c.backoff_max, Duration::from_secs(60));
        assert_eq!(DEFAULT_BASE_URL, "https://openrouter.ai/api/v1");
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let base = Duration::from_millis(100);
        let max = Duration::from_millis(1000);
        for _ in 0..50 {
            let d0 = backoff_delay(base, max, 0);
            assert!(d0 >= Duration::from_millis(50) && d0 <= base, "{d0:?}");
            let d2 = backoff_delay(base, max, 2);
            assert!(
                d2 >= Duration::from_millis(200) && d2 <= Duration::from_millis(400),
                "{d2:?}"
            );
            let d20 = backoff_delay(base, max, 20);
            assert!(d20 >= Duration::from_millis(500) && d20 <= max, "{d20:?}");
            assert!(backoff_delay(base, max, u32::MAX) <= max);
        }
    }

    #[test]
    fn retry_after_parsing() {
        assert_eq!(parse_retry_after("17"), Some(Duration::from_secs(17)));
        assert_eq!(
            parse_retry_after(" 1.5 "),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-3"), None);
    }
}
