//! What the two halves of a `--batch-api` run share (issue 33): how it
//! submits and polls ([`BatchApi`]), a batch in flight ([`Live`]), the wait
//! between polls, and the stop a fatal answer makes. Submitting is
//! batch_submit.rs, polling and reading batch_api.rs.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::batch_collect::ItemRef;
use super::shared::Shared;
use crate::openrouter::ProviderError;
use crate::run::RunControl;

/// How a `--batch-api` run submits and polls.
#[derive(Debug, Clone)]
pub struct BatchApi {
    /// Requests per batch, at most.
    pub batch_size: usize,
    /// Submit, record, and return without waiting for results.
    pub detach: bool,
    /// The first wait between two polls of a batch, and the longest.
    pub poll_first: Duration,
    pub poll_max: Duration,
    /// How long a batch's polls may answer 404 before it is taken as not
    /// found ([`NOT_FOUND_WINDOW`]).
    pub not_found_window: Duration,
    /// Times a request goes out before its failure is stored.
    pub max_rounds: u32,
    /// Per model: the estimate of one test case's model request (high end,
    /// at the batch discount) that a model batch in flight counts against
    /// --max-cost.
    pub per_case_usd: HashMap<String, f64>,
    /// Per model: the estimate of one judge request for its replies, what a
    /// judge batch in flight counts.
    pub per_judge_request_usd: HashMap<String, f64>,
}

/// Default `--batch-size`: a body of a few megabytes with typical prompts,
/// far under any request size limit, yet few batches for a full run.
pub const DEFAULT_BATCH_SIZE: usize = 1000;
/// The largest batch body posted: a batch is cut earlier when its
/// requests would pass this.
pub(super) const MAX_BODY_BYTES: usize = 64 << 20;
/// Polls start a few seconds apart and grow to minutes.
pub const POLL_FIRST: Duration = Duration::from_secs(5);
pub const POLL_MAX: Duration = Duration::from_secs(300);
/// A batch just created, or a load balancer's bad minute, can answer 404:
/// polls go on (with their backoff) this long before it is taken as not
/// found, and even then its requests are not sent again on their own.
pub const NOT_FOUND_WINDOW: Duration = Duration::from_secs(15 * 60);
/// Rounds a request may go out in (a batch that expires, an item error).
pub const MAX_ROUNDS: u32 = 4;
/// Reads of a completed batch's results that may fail in a row (an answer
/// that cannot be parsed) before the run stops and names the batch.
pub const MAX_READ_FAILURES: u32 = 5;
/// A batch at OpenRouter this process polls.
pub(super) struct Live {
    pub(super) row: i64,
    pub(super) remote: String,
    pub(super) model: String,
    pub(super) items: HashMap<String, ItemRef>,
    pub(super) next: Instant,
    pub(super) wait: Duration,
    pub(super) estimate: f64,
    pub(super) counts: [i64; 3],
    /// When its polls began to answer 404 (reset by any other answer).
    pub(super) not_found_since: Option<Instant>,
    /// Custom ids an earlier read of its results handled (a read that broke
    /// part-way is read again from the start: these are skipped).
    pub(super) handled: HashSet<String>,
    /// Reads of its results that failed, in a row.
    pub(super) read_failures: u32,
}

impl Live {
    /// A batch at OpenRouter, polled first at `next`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        row: i64,
        remote: String,
        model: String,
        items: HashMap<String, ItemRef>,
        next: Instant,
        wait: Duration,
        estimate: f64,
        counts: [i64; 3],
    ) -> Live {
        Live {
            row,
            remote,
            model,
            items,
            next,
            wait,
            estimate,
            counts,
            not_found_since: None,
            handled: HashSet::new(),
            read_failures: 0,
        }
    }
}

/// The wait before the next poll: a few seconds at first, half as much
/// again each time up to minutes, with ±20 % jitter so that many batches
/// do not poll in step.
pub(super) fn next_wait(last: Duration, api: &BatchApi) -> Duration {
    let base = if last.is_zero() {
        api.poll_first
    } else {
        last.mul_f64(1.5).min(api.poll_max)
    };
    let jitter = rand::rng().random_range(0.8..=1.2);
    base.mul_f64(jitter).min(api.poll_max.mul_f64(1.2))
}

pub(super) fn stop_for(control: &RunControl, shared: &Shared, model: &str, e: &ProviderError) {
    // A refused key stops every run of the batch, and is the command's error.
    let refused_key = match e {
        ProviderError::Unauthorized { message } => Some(Arc::new(ProviderError::Unauthorized {
            message: message.clone(),
        })),
        _ => None,
    };
    let fatal = refused_key.is_some();
    shared.set_stop(e.to_string(), refused_key);
    control.batch.stop_all(format!("{model}: {e}"), fatal);
    shared.stop.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_start_at_the_first_wait_grow_by_half_and_stop_at_the_longest() {
        let api = BatchApi {
            batch_size: 10,
            detach: false,
            poll_first: Duration::from_secs(5),
            poll_max: Duration::from_secs(300),
            not_found_window: NOT_FOUND_WINDOW,
            max_rounds: MAX_ROUNDS,
            per_case_usd: HashMap::new(),
            per_judge_request_usd: HashMap::new(),
        };
        let first = next_wait(Duration::ZERO, &api);
        assert!((4.0..=6.0).contains(&first.as_secs_f64()), "{first:?}");
        let second = next_wait(Duration::from_secs(10), &api);
        assert!((12.0..=18.0).contains(&second.as_secs_f64()), "{second:?}");
        // Never past the longest wait plus its jitter, however long the last.
        for _ in 0..100 {
            let w = next_wait(Duration::from_secs(10_000), &api);
            assert!((240.0..=360.0).contains(&w.as_secs_f64()), "{w:?}");
        }
    }
}
