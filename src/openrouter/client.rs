//! The chat client: one pooled connection set shared by every request;
//! each request is retried on transient failures with exponential backoff
//! and jitter, bounded in attempts and in total time, taking a slot of its
//! model's in-flight limit per attempt (so a retry waiting out Retry-After
//! holds none). Every reply is scrubbed of the key before it is read.

use std::fmt;
use std::time::{Duration, Instant};

use reqwest::header::RETRY_AFTER;
use serde_json::Value;

use super::classify::{
    Outcome, backoff_delay, classify, parse_json, parse_retry_after, transport_failure,
};
use super::http;
use super::limit::{AdaptiveLimit, Attempt};
use super::redact::Redactor;
use super::spend::{CallLog, charged_cost};
use super::{ChatRequest, ClientConfig, Completion, ProviderError};

/// OpenRouter client holding one connection pool.
pub struct Client {
    pub(super) http: reqwest::Client,
    /// Parsed once: `post(&String)` would parse (and IDNA-check) it per request.
    url: reqwest::Url,
    pub(super) cfg: ClientConfig,
    /// Scrubs the key from everything a reply or an error carries.
    pub(super) redact: Redactor,
    /// In-flight limits per model (see [`AdaptiveLimit`]); a model without
    /// one is not limited here.
    limits: std::sync::RwLock<std::collections::HashMap<String, std::sync::Arc<AdaptiveLimit>>>,
    /// `--max-in-flight`: attempts in flight across every model.
    total: std::sync::RwLock<Option<std::sync::Arc<tokio::sync::Semaphore>>>,
    /// The database's pseudonym, sent as `user` (see [`Client::set_user`]).
    user: Option<String>,
    /// `{base}/generation`: what an abandoned attempt was billed.
    generation_url: reqwest::Url,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.url.as_str())
            .field("cfg", &self.cfg)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl Client {
    pub fn new(cfg: ClientConfig) -> Result<Self, ProviderError> {
        let base = http::check_base_url(&cfg.base_url).map_err(ProviderError::Config)?;
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

        let headers = http::headers(
            Some(&cfg.api_key),
            cfg.referer.as_deref(),
            cfg.title.as_deref(),
        )
        .map_err(ProviderError::Config)?;
        let http = http::builder(headers)
            // No cap on idle connections: the worker pool already bounds them
            // (one per worker), and a cap below --concurrency would close and
            // reopen a connection for most requests.
            .pool_idle_timeout(Duration::from_secs(90))
            .connect_timeout(cfg.request_timeout.min(Duration::from_secs(30)))
            .tcp_keepalive(Duration::from_secs(60))
            .build()
            .map_err(|e| ProviderError::ConfigCaused {
                what: "cannot build HTTP client",
                source: Box::new(e),
            })?;

        let parse = |path: &str| {
            reqwest::Url::parse(&format!("{base}/{path}")).map_err(|_| {
                ProviderError::Config(format!("base URL is not a valid URL: {base:?}"))
            })
        };
        Ok(Client {
            redact: Redactor::new(&cfg.api_key),
            http,
            url: parse("chat/completions")?,
            generation_url: parse("generation")?,
            cfg,
            limits: Default::default(),
            total: Default::default(),
            user: None,
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

    /// Sends `user` (a pseudonym of the database, never of the key) with
    /// every request built for this client.
    pub fn set_user(&mut self, user: String) {
        self.user = Some(user);
    }

    /// The pseudonym requests carry as `user`, if any.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The wire format `entry` is sent in: its own, else the client's default.
    pub fn api_of(&self, entry: &crate::domain::ModelEntry) -> crate::domain::Api {
        entry.api_or(self.cfg.api)
    }

    /// The URL requests go to (`{base}/chat/completions`), never with
    /// credentials: what the reply cache is keyed by.
    pub fn endpoint(&self) -> &str {
        self.url.as_str()
    }

    /// Send `req`, retrying transient failures; see the module docs.
    pub async fn chat(&self, req: &ChatRequest<'_>) -> Result<Completion, ProviderError> {
        self.chat_json(&req.model.id, req.to_json()).await
    }

    /// [`Client::chat`] with the body already serialised (by
    /// [`ChatRequest::to_json`], when the caller hashes it first); `model` names
    /// the request in logs and picks its in-flight limit.
    pub async fn chat_json(&self, model: &str, body: String) -> Result<Completion, ProviderError> {
        self.send(model, body, false).await
    }

    /// [`Client::chat_json`] for a judge: a reply with reasoning or tool
    /// calls but no content comes back as it is (see
    /// [`Completion::empty_because`]), paid and counted, for the caller to
    /// ask again with a larger `max_tokens`, instead of being retried as is.
    pub async fn chat_json_judge(
        &self,
        model: &str,
        body: String,
    ) -> Result<Completion, ProviderError> {
        self.send(model, body, true).await
    }

    async fn send(
        &self,
        model: &str,
        body: String,
        empty_is_answer: bool,
    ) -> Result<Completion, ProviderError> {
        // Bytes: every attempt shares the one serialised body.
        let body = bytes::Bytes::from(body);
        let started = Instant::now();
        let mut attempt: u32 = 0;
        // What the previous attempt was charged: a retry of a paid reply
        // is expected to cost as much, and reserves it before it is sent.
        let mut last_charge = 0.0;
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
            // The caller's budget has the last word, on the first attempt
            // and on every retry: after its stop nothing more is sent.
            let reservation = match CallLog::reserve(attempt > 1, last_charge).await {
                Ok(r) => r,
                Err(why) => {
                    drop(total_slot);
                    if let (Some(l), Some(slot)) = (&limit, slot) {
                        l.release(slot, Attempt::Other);
                    }
                    return Err(CallLog::failed(
                        model,
                        attempt - 1,
                        ProviderError::NotSent(why),
                    ));
                }
            };
            let attempt_start = Instant::now();
            let result = self.attempt(&body, timeout, empty_is_answer).await;
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
                Err(e) => {
                    reservation.settle(0.0);
                    return Err(CallLog::failed(model, attempt, self.redact.scrub_error(e)));
                }
            };
            // What this attempt cost, returned or not, reaches the budget
            // as soon as it arrives.
            reservation.settle(match &outcome {
                Outcome::Success(c) if c.cost_usd.is_nan() => f64::NAN,
                Outcome::Success(c) => crate::domain::result::billed(c.cost_usd, c.byok_cost_usd),
                _ => charged,
            });
            if charged.is_finite() {
                last_charge = charged;
            }
            // A reply that is not returned was still paid for when it
            // carries a cost: the caller's log counts it at once.
            CallLog::charge(model, charged);
            let failure = match outcome {
                Outcome::Success(mut c) => {
                    CallLog::ended(attempt, true);
                    c.attempts = attempt;
                    c.latency_ms = attempt_start.elapsed().as_millis() as u64;
                    return Ok(c);
                }
                Outcome::Fatal(e) => {
                    return Err(CallLog::failed(model, attempt, self.redact.scrub_error(e)));
                }
                Outcome::Retry(r) => r,
            };
            let reason = self.redact.scrub(&failure.reason);

            if attempt >= self.cfg.max_attempts {
                return Err(CallLog::failed(
                    model,
                    attempt,
                    ProviderError::Exhausted {
                        attempts: attempt,
                        last: reason,
                        meta: self.redact.scrub_meta(failure.meta),
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
                    attempt,
                    ProviderError::Exhausted {
                        attempts: attempt,
                        last: format!(
                            "{reason} (next retry in {} ms would exceed the {} s total budget)",
                            delay.as_millis(),
                            self.cfg.max_total.as_secs_f64()
                        ),
                        meta: self.redact.scrub_meta(failure.meta),
                    },
                ));
            }
            // Routine (a 429, a 5xx): shown with -v, and run-batch sums
            // them up; any other reason to retry (a bad or oversized reply,
            // a timeout) still warns.
            macro_rules! retrying {
                ($level:ident) => {
                    tracing::$level!(
                        model = %model,
                        attempt,
                        max_attempts = self.cfg.max_attempts,
                        status = failure.status.unwrap_or(0),
                        delay_ms = delay.as_millis() as u64,
                        reason = %reason,
                        "OpenRouter request failed, retrying"
                    )
                };
            }
            if matches!(failure.status, Some(429 | 500..=599)) {
                retrying!(info);
            } else {
                retrying!(warn);
            }
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
        empty_is_answer: bool,
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
            Err(e) => {
                // No header arrived, so no generation id: a timeout after
                // the request went out is a charge of unknown amount.
                let f = transport_failure(&e);
                let charged = if f.maybe_billed { f64::NAN } else { 0.0 };
                return Ok((Outcome::Retry(f), charged));
            }
        };
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let header_cost = super::openai::header_cost(resp.headers());
        let generation = super::generation::generation_id(resp.headers());
        let text = match http::read_capped(resp, self.cfg.max_reply_bytes).await {
            Ok(t) => t,
            Err(mut f) => {
                f.status = Some(status.as_u16());
                // A 2xx reply given up half-read (cut at the limit, timed
                // out, dropped) was generated and billed: counted at what
                // `/generation` says it cost, else as a charge of unknown
                // amount, never $0.
                let charged = match (status.is_success(), generation) {
                    (false, _) => 0.0,
                    (true, Some(id)) => {
                        super::generation::billed(&self.http, &self.generation_url, &id).await
                    }
                    (true, None) => f64::NAN,
                };
                return Ok((Outcome::Retry(f), charged));
            }
        };
        // A proxy may echo the key anywhere in a reply: every form of it is
        // removed from the raw text, and every string of the parsed JSON
        // (where a `\u` escape may have hidden it) is scrubbed again, before
        // any field is read, truncated or stored.
        let (text, again) = self.redact.scrub_reply(text);
        if status.is_success()
            && !again
            && let Some(mut c) = super::envelope::success(status.as_u16(), &text, empty_is_answer)
        {
            c.reported_cost_usd = c.reported_cost_usd.or(header_cost);
            return Ok((Outcome::Success(c), 0.0));
        }
        let mut parsed: Option<Value> = parse_json(&text);
        if let Some(v) = parsed.as_mut().filter(|_| again) {
            self.redact.scrub_value(v);
        }
        let cost = parsed
            .as_ref()
            .and_then(|v| v.get("usage"))
            .and_then(|u| u.get("cost"))
            .cloned();
        let mut outcome = classify(status, retry_after, &text, parsed, empty_is_answer);
        if let Outcome::Success(c) = &mut outcome {
            c.reported_cost_usd = c.reported_cost_usd.or(header_cost);
        }
        let charged = match outcome {
            Outcome::Success(_) => 0.0,
            _ => charged_cost(cost.as_ref()),
        };
        Ok((outcome, charged))
    }
}
