//! How the client connects: the base URL, the key (sent only in the
//! `Authorization` header), attribution headers, time limits and retry
//! settings, and the reply size cap. `Debug` never shows the key.

use std::fmt;
use std::time::Duration;

use super::redact::redact_url;

/// Where requests go unless `OPENROUTER_BASE_URL` overrides it.
pub const DEFAULT_BASE_URL: &str = "https://openrouter.ai/api/v1";

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
    /// The wire format of a model whose models.yml entry does not name one
    /// (`--api`).
    pub api: crate::domain::Api,
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
            api: crate::domain::Api::OpenRouter,
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
            .field("api", &self.api)
            .finish()
    }
}
