//! OpenRouter's Batch API (beta, "Batch API Quickstart"; issue 33):
//! `POST {root}/api/beta/batches` with `endpoint` and `model` written
//! before `requests` (the server stream-parses the body and refuses
//! `requests` first), `GET {root}/api/beta/batches/:id` for the status and,
//! once completed, every result inline. `{root}` is the base URL without
//! `/api/v1`.
//!
//! A completed batch can be hundreds of megabytes: its body is streamed to
//! a spool file, never held in memory, and read twice as a stream (a
//! visitor over `results`, one item at a time): first the tokens and costs
//! of every item (to share the batch's `usage.cost` among the items that
//! carry none), then each item in full, handed to the caller as it is read.

use std::collections::HashMap;
use std::fmt;
use std::io::Write as _;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::classify::{Outcome, backoff_delay, classify, parse_json, transport_failure};
use super::{Client, Completion, ErrorMeta, ProviderError};

/// The API shape of every request helmbench batches.
pub const BATCH_ENDPOINT: &str = "/v1/chat/completions";

/// The body of `POST /api/beta/batches`: `endpoint`, `model`, then
/// `requests`, each `{"custom_id", "body"}` with `body` the exact text a
/// synchronous request would post (its `model` equals the batch's).
pub fn batch_body<'a>(model: &str, items: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
    let mut out = String::with_capacity(4096);
    // The order is the API's requirement, not a style: written by hand so
    // no serializer can reorder it.
    out.push_str("{\"endpoint\":");
    out.push_str(&quote(BATCH_ENDPOINT));
    out.push_str(",\"model\":");
    out.push_str(&quote(model));
    out.push_str(",\"requests\":[");
    for (i, (custom_id, body)) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"custom_id\":");
        out.push_str(&quote(custom_id));
        out.push_str(",\"body\":");
        out.push_str(body);
        out.push('}');
    }
    out.push_str("]}");
    out
}

/// `request_counts` of a batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct RequestCounts {
    #[serde(default)]
    pub total: i64,
    #[serde(default)]
    pub completed: i64,
    #[serde(default)]
    pub failed: i64,
}

/// `usage` of a completed batch.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct BatchUsage {
    #[serde(default)]
    pub prompt_tokens: i64,
    #[serde(default)]
    pub completion_tokens: i64,
    #[serde(default)]
    pub cost: Option<Value>,
    #[serde(default)]
    pub is_byok: bool,
}

impl BatchUsage {
    /// `usage.cost` in USD; None when absent, NaN when unusable.
    pub fn cost_usd(&self) -> Option<f64> {
        super::reply_cost(self.cost.as_ref(), "batch usage.cost")
    }
}

/// Why a batch was not created.
#[derive(Debug)]
pub enum CreateError {
    /// Not accepted: refused with a definite answer (a 4xx other than 429),
    /// or the server was never reached.
    Refused(ProviderError),
    /// Maybe accepted (see [`Client::create_batch`]): why.
    Uncertain(String),
}

/// A batch as the API describes it (without its results).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchStatus {
    pub id: String,
    pub status: String,
    pub counts: RequestCounts,
    pub usage: Option<BatchUsage>,
    /// The batch's own `error`, as text, when it has one.
    pub error: Option<String>,
}

impl BatchStatus {
    /// `completed`, `failed`, `expired` or `cancelled`: it will not change.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self.status.as_str(),
            "completed" | "failed" | "expired" | "cancelled"
        )
    }
}

/// What one result item brought.
#[derive(Debug)]
pub enum ItemReply {
    /// A reply (its cost set to the item's share, see [`ResultItem`]).
    Answered(Completion),
    /// An answer that is final for this prompt: a block or refusal, or a
    /// rejection no resubmission can change.
    Final(ProviderError),
    /// An item error, or a reply that a synchronous request would retry:
    /// the request goes out again.
    Again(String),
}

/// One result of a completed batch.
#[derive(Debug)]
pub struct ResultItem {
    pub custom_id: String,
    pub reply: ItemReply,
    /// What the item cost: its own `usage.cost`, else its share of the
    /// batch's (`apportioned`); None when neither is known.
    pub cost_usd: Option<f64>,
    pub apportioned: bool,
}

/// A completed batch's results, spooled to a file (removed on drop).
pub struct BatchResults {
    spool: Spool,
    /// custom_id -> (cost, apportioned), from the first pass.
    costs: HashMap<String, (Option<f64>, bool)>,
    redact: super::redact::Redactor,
}

impl fmt::Debug for BatchResults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchResults")
            .field("items", &self.costs.len())
            .finish_non_exhaustive()
    }
}

/// A poll's answer: the status, and the results once completed.
#[derive(Debug)]
pub struct Polled {
    pub status: BatchStatus,
    pub results: Option<BatchResults>,
}

/// A temp file removed when dropped.
struct Spool(PathBuf);

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// How a batch's answer or results that cannot be parsed are reported.
const UNREADABLE_ANSWER: &str = "the batch's answer could not be read";
const UNREADABLE_RESULTS: &str = "the batch's results could not be read";

/// Whether `e` says a batch's answer or results could not be parsed (not a
/// transient failure to fetch them): reading again is bounded.
pub fn is_unreadable(e: &ProviderError) -> bool {
    matches!(e, ProviderError::Exhausted { last, .. }
        if last.starts_with(UNREADABLE_ANSWER) || last.starts_with(UNREADABLE_RESULTS))
}

/// The largest batch body read, in bytes: far above any real batch (the
/// results of 50,000 long replies), low enough to stop a runaway server.
const MAX_BATCH_BYTES: u64 = 8 << 30;

impl Client {
    /// The base URL batches are submitted to (a batch id means something
    /// only there), without a trailing slash.
    pub fn batch_base_url(&self) -> String {
        self.cfg.base_url.trim().trim_end_matches('/').to_string()
    }

    /// The first 16 hex digits of the SHA-256 of the API key: which key
    /// submitted a run's batches, recorded with the run instead of the key.
    pub fn key_fingerprint(&self) -> String {
        crate::benchmark::sha256_hex(&[self.cfg.api_key.trim().as_bytes()])[..16].to_string()
    }

    /// `{root}/api/beta/batches`, root being the base URL without `/api/v1`.
    fn batches_url(&self) -> String {
        let base = self.cfg.base_url.trim().trim_end_matches('/');
        let root = base.strip_suffix("/api/v1").unwrap_or(base);
        format!("{root}/api/beta/batches")
    }

    /// Posts a batch (a [`batch_body`]). Only a connection that never
    /// reached the server is tried again: the Batch API has no idempotency
    /// key nor a list of batches, so once the body may have arrived (a 429
    /// or 5xx, a timeout, an answer that cannot be read) the batch may exist
    /// and is [`CreateError::Uncertain`], never posted again here.
    pub async fn create_batch(&self, body: String) -> Result<BatchStatus, CreateError> {
        let body = bytes::Bytes::from(body);
        let url = self.batches_url();
        let uncertain = |why: String| CreateError::Uncertain(self.redact.scrub(&why));
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let sent = self
                .http
                .post(&url)
                .timeout(self.cfg.request_timeout)
                .body(body.clone())
                .send()
                .await;
            let failure = match sent {
                Err(e) if e.is_connect() => transport_failure(&e),
                Err(e) => return Err(uncertain(transport_failure(&e).reason)),
                Ok(resp) => {
                    let status = resp.status();
                    let text = super::http::read_capped(resp, self.cfg.max_reply_bytes)
                        .await
                        .map_err(|f| {
                            uncertain(format!("HTTP {status}, answer not read: {}", f.reason))
                        })?;
                    let text = self.redact.scrub(&text);
                    if status.is_success() {
                        return parse_status(&text).ok_or_else(|| {
                            uncertain(format!(
                                "the answer is not a batch object: {}",
                                super::classify::body_snippet(status, &text)
                            ))
                        });
                    }
                    return Err(
                        match classify(status, None, &text, parse_json(&text), false) {
                            Outcome::Fatal(e) => CreateError::Refused(self.redact.scrub_error(e)),
                            Outcome::Retry(r) => uncertain(r.reason),
                            Outcome::Success(_) => unreachable!("not a success status"),
                        },
                    );
                }
            };
            if attempt >= self.cfg.max_attempts {
                return Err(CreateError::Refused(ProviderError::Exhausted {
                    attempts: attempt,
                    last: self.redact.scrub(&failure.reason),
                    meta: failure.meta,
                }));
            }
            let delay = backoff_delay(self.cfg.backoff_base, self.cfg.backoff_max, attempt - 1)
                .max(failure.retry_after.unwrap_or_default());
            tokio::time::sleep(delay).await;
        }
    }

    /// One poll of batch `id`: its status and, once completed, its results
    /// spooled to disk and scanned once for costs (see the module docs).
    /// A transient failure is an `Err` too: the caller polls again later.
    pub async fn poll_batch(&self, id: &str) -> Result<Polled, ProviderError> {
        let url = format!("{}/{}", self.batches_url(), urlencode(id));
        let resp = self
            .http
            .get(&url)
            .timeout(Duration::from_secs(3600))
            .send()
            .await
            .map_err(|e| ProviderError::Exhausted {
                attempts: 1,
                last: self.redact.scrub(&transport_failure(&e).reason),
                meta: ErrorMeta::default(),
            })?;
        let status = resp.status();
        if !status.is_success() {
            let text = super::http::read_capped(resp, self.cfg.max_reply_bytes)
                .await
                .unwrap_or_default();
            let text = self.redact.scrub(&text);
            return Err(
                match classify(status, None, &text, parse_json(&text), false) {
                    Outcome::Fatal(e) => self.redact.scrub_error(e),
                    Outcome::Retry(r) => ProviderError::Exhausted {
                        attempts: 1,
                        last: r.reason,
                        meta: r.meta,
                    },
                    Outcome::Success(_) => unreachable!("not a success status"),
                },
            );
        }
        let spool = spool_body(resp).await?;
        let redact = self.redact.clone();
        tokio::task::spawn_blocking(move || scan(spool, redact))
            .await
            .map_err(|e| ProviderError::ConfigCaused {
                what: "batch reader failed",
                source: Box::new(e),
            })?
    }
}

/// Streams a body to a fresh temp file.
async fn spool_body(mut resp: reqwest::Response) -> Result<Spool, ProviderError> {
    let io = |e: std::io::Error| ProviderError::ConfigCaused {
        what: "cannot spool a batch",
        source: Box::new(e),
    };
    let path = std::env::temp_dir().join(format!(
        "helmbench-batch-{}-{:016x}.json",
        std::process::id(),
        rand::random::<u64>()
    ));
    let spool = Spool(path);
    let mut file = std::io::BufWriter::new(std::fs::File::create(&spool.0).map_err(io)?);
    let mut read = 0u64;
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                read += chunk.len() as u64;
                if read > MAX_BATCH_BYTES {
                    return Err(ProviderError::Exhausted {
                        attempts: 1,
                        last: format!("batch body over {MAX_BATCH_BYTES} bytes; not read"),
                        meta: ErrorMeta::default(),
                    });
                }
                file.write_all(&chunk).map_err(io)?;
            }
            Ok(None) => break,
            Err(e) => {
                return Err(ProviderError::Exhausted {
                    attempts: 1,
                    last: transport_failure(&e).reason,
                    meta: ErrorMeta::default(),
                });
            }
        }
    }
    file.flush().map_err(io)?;
    Ok(spool)
}

/// A batch id as one path segment.
fn urlencode(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A small batch object (a 202, or a status without results).
fn parse_status(text: &str) -> Option<BatchStatus> {
    let mut de = serde_json::Deserializer::from_str(text);
    let head = de
        .deserialize_map(TopVisitor::<Light, _> {
            on_item: &mut |_: Light| {},
            _t: PhantomData,
        })
        .ok()?;
    head.into_status()
}

/// The first pass over a spooled batch: its status and, when it has
/// results, every item's tokens and own cost; the costs are then shared
/// out (see [`share`]).
fn scan(spool: Spool, redact: super::redact::Redactor) -> Result<Polled, ProviderError> {
    let bad = |e: String| ProviderError::Exhausted {
        attempts: 1,
        last: format!("{UNREADABLE_ANSWER}: {e}"),
        meta: ErrorMeta::default(),
    };
    let file = std::fs::File::open(&spool.0).map_err(|e| bad(e.to_string()))?;
    let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::new(file));
    let mut lights: Vec<(String, i64, Option<f64>)> = Vec::new();
    let head = de
        .deserialize_map(TopVisitor::<Light, _> {
            on_item: &mut |l: Light| {
                let (tokens, cost) = l.tokens_and_cost();
                lights.push((l.custom_id, tokens, cost));
            },
            _t: PhantomData,
        })
        .map_err(|e| bad(e.to_string()))?;
    let has_results = head.has_results;
    let batch_cost = head.usage.as_ref().and_then(BatchUsage::cost_usd);
    let status = head
        .into_status()
        .ok_or_else(|| bad("no id or status".into()))?;
    let results = (has_results && status.status == "completed").then(|| BatchResults {
        costs: share(batch_cost, lights),
        spool,
        redact,
    });
    Ok(Polled { status, results })
}

/// Each item's cost: its own `usage.cost` when it has one; otherwise its
/// share of what the batch's `usage.cost` leaves, in proportion to its
/// tokens (equal shares when none has tokens), counted in nano-dollars
/// and rounded so that the shares add up exactly.
pub fn share(
    batch_cost: Option<f64>,
    items: Vec<(String, i64, Option<f64>)>,
) -> HashMap<String, (Option<f64>, bool)> {
    let own: f64 = items
        .iter()
        .filter_map(|(_, _, c)| *c)
        .filter(|c| c.is_finite())
        .sum();
    let left = batch_cost
        .filter(|c| c.is_finite())
        .map(|c| ((c - own).max(0.0) * 1e9).round() as i128);
    let sharing: Vec<usize> = (0..items.len()).filter(|&i| items[i].2.is_none()).collect();
    let weights: Vec<i128> = {
        let tokens: Vec<i128> = sharing
            .iter()
            .map(|&i| i128::from(items[i].1.max(0)))
            .collect();
        if tokens.iter().all(|&t| t == 0) {
            vec![1; sharing.len()]
        } else {
            tokens
        }
    };
    let total_weight: i128 = weights.iter().sum();
    let mut shares = vec![0i128; sharing.len()];
    if let Some(left) = left
        && total_weight > 0
    {
        let mut given = 0;
        let mut remainders: Vec<(i128, usize)> = Vec::with_capacity(sharing.len());
        for (k, w) in weights.iter().enumerate() {
            shares[k] = left * w / total_weight;
            given += shares[k];
            remainders.push((left * w % total_weight, k));
        }
        // The nano-dollars rounding left over go to the largest remainders.
        remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, k) in remainders.into_iter().take((left - given) as usize) {
            shares[k] += 1;
        }
    }
    let mut out = HashMap::with_capacity(items.len());
    let mut k = 0;
    for (id, _, own) in items {
        match own {
            Some(c) => {
                out.insert(id, (Some(c), false));
            }
            None => {
                let c = left.map(|_| shares[k] as f64 / 1e9);
                k += 1;
                out.insert(id, (c, true));
            }
        }
    }
    out
}

impl BatchResults {
    /// How many items the batch has.
    pub fn len(&self) -> usize {
        self.costs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.costs.is_empty()
    }

    /// The second pass: every item, read one at a time (off the async
    /// runtime) and handed to `tx` as it is read; the channel's bound keeps
    /// the reader at most that many items ahead of the consumer.
    pub async fn read(
        self,
        tx: tokio::sync::mpsc::Sender<ResultItem>,
    ) -> Result<(), ProviderError> {
        tokio::task::spawn_blocking(move || self.read_blocking(&tx))
            .await
            .map_err(|e| ProviderError::ConfigCaused {
                what: "batch reader failed",
                source: Box::new(e),
            })?
    }

    fn read_blocking(
        &self,
        tx: &tokio::sync::mpsc::Sender<ResultItem>,
    ) -> Result<(), ProviderError> {
        let bad = |e: String| ProviderError::Exhausted {
            attempts: 1,
            last: format!("{UNREADABLE_RESULTS}: {e}"),
            meta: ErrorMeta::default(),
        };
        let file = std::fs::File::open(&self.spool.0).map_err(|e| bad(e.to_string()))?;
        let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::new(file));
        let mut closed = false;
        de.deserialize_map(TopVisitor::<RawItem, _> {
            on_item: &mut |raw: RawItem| {
                if closed {
                    return;
                }
                let item = self.item(raw);
                closed = tx.blocking_send(item).is_err();
            },
            _t: PhantomData,
        })
        .map_err(|e| bad(e.to_string()))?;
        Ok(())
    }

    /// One item read in full: classified as a synchronous reply would be,
    /// after the key is scrubbed from every string of it.
    fn item(&self, raw: RawItem) -> ResultItem {
        let (cost_usd, apportioned) = self
            .costs
            .get(&raw.custom_id)
            .copied()
            .unwrap_or((None, false));
        let reply = match (raw.response, raw.error) {
            (Some(resp), _) => {
                let mut body = resp.body.unwrap_or(Value::Null);
                self.redact.scrub_value(&mut body);
                let status = reqwest::StatusCode::from_u16(resp.status_code)
                    .unwrap_or(reqwest::StatusCode::BAD_GATEWAY);
                let text = body.to_string();
                // A reasoning-only reply comes back as it is (its
                // `empty_because` says so): a judge's is asked again with
                // room to answer, a model's is sent again.
                match classify(status, None, &text, Some(body), true) {
                    Outcome::Success(mut c) => {
                        c.cost_usd = cost_usd.unwrap_or(f64::NAN);
                        c.reported_cost_usd = cost_usd;
                        c.attempts = 1;
                        ItemReply::Answered(c)
                    }
                    Outcome::Fatal(e @ ProviderError::Blocked { .. }) => ItemReply::Final(e),
                    Outcome::Fatal(e) => ItemReply::Again(e.to_string()),
                    Outcome::Retry(r) => ItemReply::Again(r.reason),
                }
            }
            (None, Some(mut e)) => {
                self.redact.scrub_value(&mut e);
                ItemReply::Again(format!("item error: {}", short(&e)))
            }
            (None, None) => ItemReply::Again("an item with neither response nor error".into()),
        };
        ResultItem {
            custom_id: raw.custom_id,
            reply,
            cost_usd,
            apportioned,
        }
    }
}

fn short(v: &Value) -> String {
    let s = match v.get("message").and_then(Value::as_str) {
        Some(m) => match v.get("code") {
            Some(c) if !c.is_null() => format!("{c}: {m}"),
            _ => m.to_string(),
        },
        None => v.to_string(),
    };
    s.chars().take(300).collect()
}

/// An item as the first pass reads it: everything but its tokens and
/// cost is skipped without being kept.
#[derive(Deserialize)]
struct Light {
    custom_id: String,
    #[serde(default)]
    response: Option<LightResponse>,
}

#[derive(Deserialize)]
struct LightResponse {
    #[serde(default)]
    body: Option<LightBody>,
}

#[derive(Deserialize)]
struct LightBody {
    #[serde(default)]
    usage: Option<LightUsage>,
}

#[derive(Deserialize)]
struct LightUsage {
    #[serde(default)]
    prompt_tokens: Option<Value>,
    #[serde(default)]
    completion_tokens: Option<Value>,
    #[serde(default)]
    cost: Option<Value>,
}

impl Light {
    fn tokens_and_cost(&self) -> (i64, Option<f64>) {
        let Some(u) = self
            .response
            .as_ref()
            .and_then(|r| r.body.as_ref())
            .and_then(|b| b.usage.as_ref())
        else {
            return (0, None);
        };
        let n = |v: &Option<Value>| v.as_ref().and_then(Value::as_f64).unwrap_or(0.0) as i64;
        (
            n(&u.prompt_tokens) + n(&u.completion_tokens),
            super::reply_cost(u.cost.as_ref(), "usage.cost"),
        )
    }
}

/// An item as the second pass reads it: one item's body as a `Value`
/// (a few kilobytes), never the batch.
#[derive(Deserialize)]
struct RawItem {
    custom_id: String,
    #[serde(default)]
    response: Option<RawResponse>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct RawResponse {
    status_code: u16,
    #[serde(default)]
    body: Option<Value>,
}

/// The top-level fields of a batch object, `results` left to the visitor.
#[derive(Default)]
struct Head {
    id: Option<String>,
    status: Option<String>,
    counts: Option<RequestCounts>,
    usage: Option<BatchUsage>,
    error: Option<Value>,
    has_results: bool,
}

impl Head {
    fn into_status(self) -> Option<BatchStatus> {
        Some(BatchStatus {
            id: self.id?,
            status: self.status?,
            counts: self.counts.unwrap_or_default(),
            usage: self.usage,
            error: self.error.filter(|e| !e.is_null()).map(|e| short(&e)),
        })
    }
}

/// Visits a batch object's fields in whatever order they come, handing
/// each item of `results` to `on_item` as it is read.
struct TopVisitor<'f, T, F: FnMut(T)> {
    on_item: &'f mut F,
    _t: PhantomData<T>,
}

impl<'de, T: Deserialize<'de>, F: FnMut(T)> Visitor<'de> for TopVisitor<'_, T, F> {
    type Value = Head;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a batch object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Head, A::Error> {
        let mut head = Head::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "id" => head.id = map.next_value()?,
                "status" => head.status = map.next_value()?,
                "request_counts" => head.counts = map.next_value()?,
                "usage" => head.usage = map.next_value()?,
                "error" => head.error = map.next_value()?,
                "results" => {
                    head.has_results = map.next_value_seed(Results {
                        on_item: &mut *self.on_item,
                        _t: PhantomData,
                    })?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(head)
    }
}

/// `results`: null, or an array whose items go one by one to `on_item`.
struct Results<'f, T, F: FnMut(T)> {
    on_item: &'f mut F,
    _t: PhantomData<T>,
}

impl<'de, T: Deserialize<'de>, F: FnMut(T)> DeserializeSeed<'de> for Results<'_, T, F> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: Deserialize<'de>, F: FnMut(T)> Visitor<'de> for Results<'_, T, F> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("null or an array of results")
    }

    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_none<E>(self) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while let Some(item) = seq.next_element::<T>()? {
            (self.on_item)(item);
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_and_model_come_before_requests_in_the_bytes() {
        let body = batch_body(
            "a/b",
            [("c1", r#"{"model":"a/b","messages":[]}"#), ("c2", "{}")],
        );
        assert!(
            body.starts_with(
                r#"{"endpoint":"/v1/chat/completions","model":"a/b","requests":[{"custom_id":"c1","body":{"model":"a/b""#
            ),
            "{body}"
        );
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["requests"][1]["custom_id"], "c2");
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["endpoint", "model", "requests"]);
    }

    #[test]
    fn shares_add_up_to_the_batch_cost_exactly() {
        let items = vec![
            ("a".to_string(), 100, None),
            ("b".to_string(), 200, None),
            ("c".to_string(), 0, Some(0.0004)),
            ("d".to_string(), 33, None),
        ];
        let m = share(Some(0.001), items);
        let sum: f64 = m.values().map(|(c, _)| c.unwrap()).sum();
        assert!((sum - 0.001).abs() < 1e-12, "{sum}");
        assert_eq!(m["c"], (Some(0.0004), false));
        assert!(m["a"].1 && m["b"].1);
        // b has twice a's tokens: twice its share (to the nano-dollar).
        let (a, b) = (m["a"].0.unwrap(), m["b"].0.unwrap());
        assert!((b - 2.0 * a).abs() <= 1e-9, "{a} {b}");
        // Nothing to share from: unknown, not zero.
        assert_eq!(share(None, vec![("x".into(), 5, None)])["x"], (None, true));
    }

    #[test]
    fn a_status_reads_in_any_key_order_and_results_stream_item_by_item() {
        let text = r#"{"results":[{"id":"r1","custom_id":"c1","response":{"status_code":200,"body":{"id":"g","choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}},"error":null}],
            "id":"batch_1","status":"completed","request_counts":{"total":1,"completed":1,"failed":0},
            "usage":{"prompt_tokens":3,"completion_tokens":1,"cost":0.5,"is_byok":false}}"#;
        let s = parse_status(text).unwrap();
        assert_eq!(s.id, "batch_1");
        assert!(s.is_terminal());
        assert_eq!(s.counts.completed, 1);
        assert_eq!(s.usage.unwrap().cost_usd(), Some(0.5));
        let path = std::env::temp_dir().join(format!("hb-test-{}.json", rand::random::<u64>()));
        std::fs::write(&path, text).unwrap();
        let polled = scan(
            Spool(path),
            super::super::redact::Redactor::new("sk-x-123456"),
        )
        .unwrap();
        let results = polled.results.unwrap();
        assert_eq!(results.len(), 1);
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        results.read_blocking(&tx).unwrap();
        drop(tx);
        let item = rx.blocking_recv().unwrap();
        assert_eq!(item.custom_id, "c1");
        assert!(item.apportioned);
        match item.reply {
            ItemReply::Answered(c) => {
                assert_eq!(c.content, "hi");
                assert_eq!(c.cost_usd, 0.5);
            }
            other => panic!("{other:?}"),
        }
    }
}
