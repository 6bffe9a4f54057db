//! A successful reply as the client returns it: the content, who served
//! it, its tokens and what it cost.

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
    /// The server's own figure for the reply, when it gave one: `usage.cost`,
    /// else a LiteLLM proxy's `x-litellm-response-cost` header. What an
    /// OpenAI-compatible model without a models.yml price costs.
    pub reported_cost_usd: Option<f64>,
    /// `usage.cost_details.upstream_inference_cost` (bring-your-own-key);
    /// None when absent or unusable.
    pub upstream_cost_usd: Option<f64>,
    /// Attempts made, the successful one included.
    pub attempts: u32,
    /// Latency of the successful attempt.
    pub latency_ms: u64,
    /// With bring-your-own-key (`usage.is_byok`): what the provider billed
    /// the user's own key (`upstream_inference_cost`), on top of
    /// `cost_usd`, OpenRouter's fee. 0.0 otherwise.
    pub byok_cost_usd: f64,
    /// Why `content` is empty when the reply only reasoned or only called
    /// tools ("reasoning only", "tool calls only"); None otherwise.
    pub empty_because: Option<String>,
}
