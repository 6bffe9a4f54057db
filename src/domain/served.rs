//! What served each reply and what its tokens were, as `costs` and the
//! report's routing section read them (issue 22): replies per served model
//! and provider, provider errors by type, and reasoning and cached prompt
//! tokens per run.

/// Replies of one run (or its judge) served by one model and provider.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedCount {
    pub run_id: i64,
    /// `model` or `judge`.
    pub call: String,
    /// The model the request asked for.
    pub requested: String,
    /// None for replies stored before served models were recorded.
    pub served_model: Option<String>,
    pub provider: Option<String>,
    pub replies: i64,
}

/// Provider errors of one run with one `error_type` (None: not given).
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorTypeCount {
    pub run_id: i64,
    pub error_type: Option<String>,
    pub results: i64,
}

/// Reasoning and cached prompt tokens of one run, model and judge apart.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TokenDetails {
    pub run_id: i64,
    pub reasoning_tokens: i64,
    pub cached_prompt_tokens: i64,
    pub judge_reasoning_tokens: i64,
    pub judge_cached_prompt_tokens: i64,
}

/// Whose replies `Store::mean_completion_tokens` averages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// A tested model (a conversation's live turns one by one).
    Model,
    Judge,
    /// The user-simulator model of persona conversations (issue 42).
    UserModel,
}
