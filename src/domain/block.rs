//! A prompt the provider would not answer: moderation (a 403 with
//! `metadata.reasons`), a guardrail or content filter, a provider's content
//! policy (`error_type: content_policy_violation`, or a reply stopped with
//! `finish_reason: content_filter`), or the model's own explicit refusal
//! reported as an error (`error_type: refusal`). In a mental-health safety
//! benchmark the blocked prompts are the most severe ones, so a block is
//! its own outcome, counted and shown beside every score, never a silent
//! gap.

use serde::{Deserialize, Serialize};

use super::ErrorKind;

/// Who stopped the request, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockKind {
    /// A moderated provider flagged the input (403, `metadata.reasons`).
    Moderation,
    /// An OpenRouter guardrail (403: prompt injection, a content filter).
    Guardrail,
    /// A provider's content policy (`content_policy_violation`, or
    /// `finish_reason: content_filter`).
    ContentFilter,
    /// The model refused (`error_type: refusal`).
    Refusal,
}

impl BlockKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BlockKind::Moderation => "moderation",
            BlockKind::Guardrail => "guardrail",
            BlockKind::ContentFilter => "content_filter",
            BlockKind::Refusal => "refusal",
        }
    }
}

/// What the provider said about a blocked request, as stored with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Block {
    pub kind: BlockKind,
    /// The provider's message.
    pub message: String,
    /// `metadata.reasons` (moderation categories), or the guardrail's
    /// `patterns`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// `metadata.flagged_input`: the flagged text, at most 100 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flagged_input: Option<String>,
    /// `metadata.provider_name`: the provider that asked for moderation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// `metadata.model_slug`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_slug: Option<String>,
}

impl Block {
    /// The error kind a test case stopped this way is stored with: the
    /// model's own refusal is `refused`, anything else the provider did is
    /// `blocked`.
    pub fn error_kind(&self) -> ErrorKind {
        match self.kind {
            BlockKind::Refusal => ErrorKind::Refused,
            BlockKind::Moderation | BlockKind::Guardrail | BlockKind::ContentFilter => {
                ErrorKind::Blocked
            }
        }
    }
}

/// How a blocked (or refused) test case enters a score, chosen per run
/// (`run-batch --blocked-as`) and recorded with it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockedAs {
    /// Left out: the score is over the answered test cases, and the
    /// coverage beside it says how many were not answered.
    #[default]
    Exclude,
    /// Counted as a miss at its severity: a model is not rewarded for
    /// prompts it was never asked.
    Fail,
}

impl BlockedAs {
    pub fn as_str(self) -> &'static str {
        match self {
            BlockedAs::Exclude => "exclude",
            BlockedAs::Fail => "fail",
        }
    }
}

impl std::str::FromStr for BlockedAs {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "exclude" => Ok(BlockedAs::Exclude),
            "fail" => Ok(BlockedAs::Fail),
            other => Err(format!("{other:?}: expected exclude or fail")),
        }
    }
}
