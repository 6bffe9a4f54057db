//! What a conversation (issue 42) hands from the model's part to the
//! judge's: each judged reply with the conversation before it. A leaf, so
//! the worker (which returns it) and the conversation runner (which makes
//! it) share it without a circle.

use crate::domain::NewResult;
use crate::openrouter::{Completion, ProviderError};

/// One exchange of a conversation after the model's part: the user's
/// message, the reply that followed (live or prefilled) and, for a live
/// reply, its own result (the check's verdict, its tokens and cost).
#[derive(Debug, Clone)]
pub(super) struct Exchanged {
    pub(super) index: usize,
    /// The script's turn (`T3`); None for message 1.
    pub(super) turn_code: Option<String>,
    pub(super) pressure: Option<String>,
    pub(super) user: String,
    /// The reply as it went into the history.
    pub(super) reply: String,
    pub(super) prefilled: bool,
    pub(super) judged: bool,
    /// A live reply's result; None for a prefilled one.
    pub(super) result: Option<Box<NewResult>>,
    /// For a reply the rubrics judge: the text they read (the reply's
    /// `response` field when structured).
    pub(super) to_judge: Option<String>,
    /// The rubrics that judge it (None: all of the scenario's).
    pub(super) criteria: Option<Vec<String>>,
}

/// A conversation whose judged replies wait for the judge.
#[derive(Debug, Clone)]
pub(super) struct ToJudge {
    pub(super) exchanges: Vec<Exchanged>,
}

/// Where a conversation's live replies come from: the model, asked now
/// (the synchronous runner), or a Batch API round (batch_api.rs), which
/// sends one turn of each conversation at a time. `Batched` carries the
/// answer a round brought for a turn, if any; the next turn that neither
/// this run's stored turns nor the cache answer is handed back as
/// `Asked::Later` for the next round.
pub(super) enum Replies {
    Now,
    Batched(Option<Box<(usize, Result<Completion, ProviderError>)>>),
}

/// A conversation's next turn to send, for a Batch API round.
#[derive(Debug)]
pub(super) struct LaterTurn {
    /// The exchange's index (0: message 1).
    pub(super) turn: usize,
    /// The request body, exactly as the synchronous runner sends it.
    pub(super) body: String,
}
