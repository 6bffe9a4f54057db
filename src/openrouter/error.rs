//! What can go wrong with a request, as the rest of the program sees it:
//! a refused key, a spent limit (and which one), a rejected request, retries
//! that ran out, or a bad configuration.

use std::fmt;

use crate::domain::{Block, BlockKind, ErrorKind};

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
    // Not "OpenRouter": an OpenAI-compatible server (vLLM, LiteLLM...)
    // answers 401 too, and gets the same key from the same variable.
    #[error(
        "the server rejected the API key (401): {message}. Check OPENROUTER_API_KEY (the key sent to OPENROUTER_BASE_URL)"
    )]
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
    /// The provider would not pass this prompt to the model (moderation, a
    /// guardrail, a content policy), or the model refused through an
    /// error: this test case's answer, never retried, never a fault.
    #[error("{} ({status}): {}{}", block_words(block), block.message, reasons(block))]
    Blocked { status: u16, block: Box<Block> },
    /// Retryable failures that ran out of attempts or of total time.
    #[error("gave up after {attempts} attempts: {last}")]
    Exhausted {
        attempts: u32,
        last: String,
        meta: ErrorMeta,
    },
    /// A strict OpenAI-compatible server refused a field only OpenRouter's
    /// format sends (`provider`, `usage`, `reasoning`, `user`): every
    /// request of the run would be refused the same way, so the run stops
    /// with the one setting that fixes it.
    #[error(
        "the server at OPENROUTER_BASE_URL is not OpenRouter: it refused `{field}`, which only OpenRouter's format sends ({status}: {message}); pass --api openai-compatible (or HELMBENCH_API=openai-compatible), or set `api: openai-compatible` on the model's entry in models.yml"
    )]
    WrongApi {
        field: String,
        status: u16,
        message: String,
    },
    #[error("invalid client configuration: {0}")]
    Config(String),
    /// A bad configuration found through a local error, kept as the source
    /// (the HTTP client cannot be built, a batch cannot be spooled to a
    /// file or read back).
    #[error("invalid client configuration: {what}: {source}")]
    ConfigCaused {
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// Not sent: the caller's [`SpendGate`](super::SpendGate) refused the
    /// attempt (the budget is reached, or the run stopped sending).
    #[error("not sent: {0}")]
    NotSent(String),
}

/// What a failed request means, decided here once for every caller: the
/// worker (what it stores for the test case, or whether it stops), the
/// judge, the run's and the batch's stops, the spend notes, and the
/// command's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    /// The key was refused (401): every run of the batch stops at once and
    /// drops its requests in flight; the command fails.
    KeyRefused,
    /// A spent limit (402): every run of the batch stops sending; requests
    /// in flight (already paid for) finish.
    OutOfCredits,
    /// Not sent (the budget is reached, or the run stopped sending): no
    /// result; `--resume` asks again.
    NotSent,
    /// The provider's answer for this prompt, never retried and never a
    /// fault: the test case is stored blocked or refused (the kind).
    Answered(ErrorKind),
    /// This request failed (rejected, or out of retries): the test case is
    /// stored as a provider error, out of the score.
    Failed,
    /// A bad client setting: bad usage, refused before anything is sent.
    Config,
    /// The server speaks another format (`--api openai-compatible` fixes
    /// it): every run of the batch stops sending; nothing was paid.
    WrongApi,
}

impl ProviderError {
    /// What this failure means (see [`FailureClass`]).
    pub fn class(&self) -> FailureClass {
        match self {
            ProviderError::Unauthorized { .. } => FailureClass::KeyRefused,
            ProviderError::PaymentRequired { .. } => FailureClass::OutOfCredits,
            ProviderError::NotSent(_) => FailureClass::NotSent,
            ProviderError::Blocked { block, .. } => FailureClass::Answered(block.error_kind()),
            ProviderError::Rejected { .. } | ProviderError::Exhausted { .. } => {
                FailureClass::Failed
            }
            ProviderError::Config(_) | ProviderError::ConfigCaused { .. } => FailureClass::Config,
            ProviderError::WrongApi { .. } => FailureClass::WrongApi,
        }
    }

    /// True when no later request of the run can succeed either (bad key,
    /// no credits): the caller should stop the run, keeping what it has.
    pub fn is_fatal_for_run(&self) -> bool {
        matches!(
            self.class(),
            FailureClass::KeyRefused | FailureClass::OutOfCredits | FailureClass::WrongApi
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
            ProviderError::Blocked { .. } => "blocked",
            ProviderError::Config(_) | ProviderError::ConfigCaused { .. } => "config",
            ProviderError::NotSent(_) => "not_sent",
            ProviderError::WrongApi { .. } => "wrong_api",
        }
    }
}

fn block_words(b: &Block) -> &'static str {
    match b.kind {
        BlockKind::Moderation => "blocked by the provider's moderation",
        BlockKind::Guardrail => "blocked by a guardrail",
        BlockKind::ContentFilter => "blocked by a content policy",
        BlockKind::Refusal => "refused by the model",
    }
}

fn reasons(b: &Block) -> String {
    if b.reasons.is_empty() {
        String::new()
    } else {
        format!(" [reasons: {}]", b.reasons.join(", "))
    }
}
