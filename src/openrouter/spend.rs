//! What requests were charged beyond the replies they returned: a reply
//! retried or refused after the provider billed it is noted in the
//! [`CallLog`] of the task that made it, as soon as it arrives.

use serde_json::Value;

use super::classify::reply_cost;
use super::{FailureClass, ProviderError};

/// `usage.cost` of a reply that is not used (retried or refused): what
/// the provider charged for it. 0.0 when absent; NaN when unknown (see
/// [`reply_cost`]): an unknown charge is warned about and counted, never
/// summed.
pub(super) fn charged_cost(cost: Option<&Value>) -> f64 {
    reply_cost(cost, "usage.cost").unwrap_or(0.0)
}

/// What [`SpendGate::reserve`] answers, in time.
pub type GateFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<f64, String>> + Send + 'a>>;

/// What requests made inside a [`CallLog::scope`] may spend: asked before
/// each attempt is sent, and told what the attempt was charged as soon as
/// it comes back. The budget lives with the caller; the client only asks,
/// so a retry after the budget stop is never sent.
pub trait SpendGate: Send + Sync {
    /// Whether one more attempt may be sent (`retry`: not the request's
    /// first; `last_charge`: what its previous attempt was charged). When
    /// it may, the amount returned is counted against the budget until
    /// [`SpendGate::settle`]; when not, why. A future: a budget shared by
    /// several processes is asked in its database.
    fn reserve(&self, retry: bool, last_charge: f64) -> GateFuture<'_>;
    /// The attempt that reserved `reserved` was charged `charged` (NaN: an
    /// amount the provider did not say or that is not usable).
    fn settle(&self, reserved: f64, charged: f64);
}

/// An attempt's reservation: settled with its charge when the reply
/// arrives, or, when the attempt is dropped half-way (its charge never
/// seen), settled as a charge of unknown amount.
pub(super) struct Reservation {
    gate: Option<std::sync::Arc<dyn SpendGate>>,
    usd: f64,
}

impl Reservation {
    pub(super) fn settle(mut self, charged: f64) {
        if let Some(g) = self.gate.take() {
            g.settle(self.usd, charged);
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(g) = self.gate.take() {
            g.settle(self.usd, f64::NAN);
        }
    }
}

#[derive(Default, Clone)]
struct Gate(Option<std::sync::Arc<dyn SpendGate>>);

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Gate" } else { "NoGate" })
    }
}

tokio::task_local! {
    static CALL_LOG: std::sync::Arc<CallLog>;
}

/// What the requests made inside [`CallLog::scope`] were charged for
/// beyond the replies they returned (attempts retried after a paid reply:
/// empty content, no choices, an error inside a 200 with `usage.cost`; or
/// a paid reply that was refused), and how many of them failed, by model.
/// Each charge is noted as soon as its reply arrives, so a caller that
/// drops a request half-way still knows what it paid.
#[derive(Debug, Default)]
pub struct CallLog {
    by_model: std::sync::Mutex<Vec<(String, CallNote)>>,
    /// Requests retried at least once, by how they ended (every model).
    retried: std::sync::Mutex<Retried>,
    /// Asked before every attempt; none: every attempt may be sent.
    gate: Gate,
}

/// Requests that needed at least one retry: answered in the end, or given
/// up (retries exhausted, or a refusal after a retry).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Retried {
    pub answered: u64,
    pub gave_up: u64,
}

impl Retried {
    pub fn add(&mut self, other: Retried) {
        self.answered += other.answered;
        self.gave_up += other.gave_up;
    }

    /// "37 requests retried, all answered" (or "37 requests retried, 34
    /// answered, 3 gave up"); None when nothing was retried.
    pub fn summary(&self) -> Option<String> {
        let n = self.answered + self.gave_up;
        Some(match (n, self.gave_up) {
            (0, _) => return None,
            (1, 0) => "1 request retried, answered".to_string(),
            (1, _) => "1 request retried, gave up".to_string(),
            (_, 0) => format!("{n} requests retried, all answered"),
            (_, g) if g == n => format!("{n} requests retried, all gave up"),
            (_, g) => format!(
                "{n} requests retried, {} answered, {g} gave up",
                self.answered
            ),
        })
    }
}

/// One model's entry in a [`CallLog`].
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CallNote {
    /// Attempts charged but not returned, and their cost in USD.
    pub discarded_attempts: u32,
    pub discarded_cost_usd: f64,
    /// Attempts not returned that were charged an amount nobody knows (a
    /// reply cut at the size limit, a cost that is not a usable number).
    pub unknown_attempts: u32,
    /// Requests that ended in an error (after their retries).
    pub failures: u32,
}

impl CallLog {
    /// A log whose requests ask `gate` before each attempt.
    pub fn gated(gate: std::sync::Arc<dyn SpendGate>) -> CallLog {
        CallLog {
            gate: Gate(Some(gate)),
            ..Default::default()
        }
    }

    /// Asks the scope's gate whether an attempt may be sent; Err: why not.
    pub(super) async fn reserve(retry: bool, last_charge: f64) -> Result<Reservation, String> {
        let gate = CALL_LOG.try_with(|log| log.gate.0.clone()).ok().flatten();
        let usd = match &gate {
            Some(g) => g.reserve(retry, last_charge).await?,
            None => 0.0,
        };
        Ok(Reservation { gate, usd })
    }

    /// Runs `f` with this log collecting what [`Client::chat_json`] notes.
    pub async fn scope<F: std::future::Future>(self: &std::sync::Arc<Self>, f: F) -> F::Output {
        CALL_LOG.scope(self.clone(), f).await
    }

    /// Takes what was noted so far, by model.
    pub fn take(&self) -> Vec<(String, CallNote)> {
        std::mem::take(&mut *self.by_model.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Takes the count of retried requests noted so far.
    pub fn take_retried(&self) -> Retried {
        std::mem::take(&mut *self.retried.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Notes how a request that took `attempts` attempts ended, when it
    /// was retried.
    pub(super) fn ended(attempts: u32, answered: bool) {
        if attempts <= 1 {
            return;
        }
        let _ = CALL_LOG.try_with(|log| {
            let mut r = log.retried.lock().unwrap_or_else(|e| e.into_inner());
            if answered {
                r.answered += 1;
            } else {
                r.gave_up += 1;
            }
        });
    }

    fn note(model: &str, f: impl FnOnce(&mut CallNote)) {
        let _ = CALL_LOG.try_with(|log| {
            let mut v = log.by_model.lock().unwrap_or_else(|e| e.into_inner());
            match v.iter_mut().find(|(m, _)| m == model) {
                Some((_, n)) => f(n),
                None => {
                    let mut n = CallNote::default();
                    f(&mut n);
                    v.push((model.to_string(), n));
                }
            }
        });
    }

    /// Notes an attempt not returned that was charged `usd` (NaN: an
    /// unknown amount).
    pub(super) fn charge(model: &str, usd: f64) {
        if usd > 0.0 {
            Self::note(model, |n| {
                n.discarded_attempts += 1;
                n.discarded_cost_usd += usd;
            });
        } else if usd.is_nan() {
            Self::note(model, |n| n.unknown_attempts += 1);
        }
    }

    /// Notes a request that ended in `e` after `attempts` attempts; a
    /// block is the provider's answer for that prompt, not a failure.
    pub(super) fn failed(model: &str, attempts: u32, e: ProviderError) -> ProviderError {
        if !matches!(e.class(), FailureClass::Answered(_) | FailureClass::NotSent) {
            Self::note(model, |n| n.failures += 1);
        }
        Self::ended(attempts, false);
        e
    }
}
