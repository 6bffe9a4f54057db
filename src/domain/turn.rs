//! One stored reply of a conversation (issue 42): what the model (or the
//! script) said after one user message, kept as it arrives so a killed
//! conversation resumes from its last stored turn without paying again.

use serde::{Deserialize, Serialize};

/// One exchange of a conversation as stored: the user's message and the
/// reply that followed it, live (with everything a result keeps of a
/// reply) or prefilled by the script.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    pub run_id: i64,
    pub test_code: String,
    pub repeat_index: i64,
    /// 0: message 1 and its reply; then one per user message, in order.
    pub turn_index: i64,
    /// The script's turn (`T3`); None for message 1.
    pub turn_code: Option<String>,
    pub pressure: Option<String>,
    /// The user's message as sent.
    pub user_message: String,
    /// The reply is the script's (a prefilled assistant turn, no request).
    pub prefilled: bool,
    /// The reply is judged (or checked).
    pub judged: bool,
    /// The request's cache key (None for a prefilled reply).
    pub request_hash: Option<String>,
    pub response: Option<String>,
    pub finish_reason: Option<String>,
    pub generation_id: Option<String>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// What this reply cost in this run (0 when it came from the cache).
    pub cost_usd: f64,
    pub byok_cost_usd: f64,
    pub latency_ms: Option<i64>,
    pub attempts: i64,
    pub cached: bool,
    pub served_model: Option<String>,
    pub provider: Option<String>,
    pub reasoning_tokens: i64,
    pub cached_prompt_tokens: i64,
}

/// A conversation's result as the sustained-safety figures read it: its
/// verdict and the per-turn verdicts in its `evaluation_details`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConversationOutcome {
    pub test_code: String,
    pub repeat_index: i64,
    pub passed: bool,
    pub error_kind: Option<super::ErrorKind>,
    pub details: serde_json::Value,
}

/// The paid turns of a run's conversations that have no result yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnfinishedTurns {
    pub run_id: i64,
    pub conversations: i64,
    pub turns: i64,
    pub cost_usd: f64,
}

/// One call of the user-simulator model of a persona conversation (issue
/// 42), stored as it arrives: what it wrote for the user message of
/// exchange `turn_index` (or that it ended the conversation there), and
/// what it cost in this run (0 when it came from the cache).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SimulatedCall {
    pub run_id: i64,
    pub test_code: String,
    pub repeat_index: i64,
    pub turn_index: i64,
    pub user_model: String,
    /// The simulator request's cache key: its whole request and the repeat.
    pub request_hash: String,
    /// The simulator's text as it came (before the stop marker and the word
    /// limit are applied).
    pub reply: String,
    pub stopped: bool,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cost_usd: f64,
    pub cached: bool,
    pub served_model: Option<String>,
    pub generation_id: Option<String>,
}

/// What a run's user simulator cost, by simulator model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimulatorCost {
    pub run_id: i64,
    pub user_model: String,
    pub calls: i64,
    /// Calls answered from the cache (no cost).
    pub cached: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cost_usd: f64,
}
