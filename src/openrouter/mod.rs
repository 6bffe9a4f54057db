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

mod batch;
pub mod catalog;
mod classify;
mod client;
mod config;
mod envelope;
mod error;
mod generation;
mod http;
mod limit;
mod openai;
mod probe;
mod redact;
mod reply;
mod request;
mod spend;
mod wire;

pub use batch::{
    BATCH_ENDPOINT, BatchResults, BatchStatus, BatchUsage, CreateError, ItemReply, Polled,
    RequestCounts, ResultItem, batch_body, is_unreadable, share,
};
pub use classify::reply_cost;
pub use client::Client;
pub use config::{ClientConfig, DEFAULT_BASE_URL, DEFAULT_MAX_REPLY_BYTES, MAX_PLAUSIBLE_COST_USD};
pub use error::{CreditLimit, ErrorMeta, FailureClass, ProviderError};
pub use limit::{AdaptiveLimit, Attempt};
pub use openai::{price_reply, unsendable};
pub use redact::redact_url;
pub use reply::Completion;
pub use request::{Body, ChatRequest, ProviderBlock, Tail, sent_parameters};
pub use spend::{CallLog, CallNote, GateFuture, Retried, SpendGate};
pub use wire::Message;

#[cfg(test)]
mod tests;
