//! What the workers, the writer and the caller of one run share: the
//! batch's budget and stop tokens, the next test case to take, the run's
//! spend, whether results can be written, and why the run stopped. It is
//! the [`SpendGate`](crate::openrouter::SpendGate) of the run's requests
//! (budget.rs).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::settings::{BatchShared, SpendCounter};
use crate::openrouter::ProviderError;

/// Shared state between the workers, the collector and the caller.
pub(super) struct Shared {
    pub(super) batch: Arc<BatchShared>,
    pub(super) provider_errors_in_a_row: AtomicUsize,
    /// Everything this run paid for, earlier processes included.
    pub(super) spend: SpendCounter,
    /// Attempts of this process charged an amount nobody reported (the
    /// spend counts what they reserved): a floor, said so in the summary.
    pub(super) unknown_charges: AtomicI64,
    /// Set while results cannot be written: workers send nothing new.
    pub(super) write_blocked: AtomicBool,
    /// Why the run stopped, and the refused key (401) that stops everything.
    pub(super) stop_reason: Mutex<Option<(String, Option<Arc<ProviderError>>)>>,
    /// The run's stop: once cancelled, no attempt is sent (budget.rs).
    pub(super) stop: CancellationToken,
}

impl Shared {
    pub(super) fn spend(&self) -> f64 {
        self.spend.usd()
    }
    pub(super) fn unknown_charges(&self) -> i64 {
        self.unknown_charges.load(Ordering::Relaxed)
    }
    pub(super) fn set_stop(&self, msg: String, fatal: Option<Arc<ProviderError>>) {
        let mut s = self.stop_reason.lock().unwrap_or_else(|e| e.into_inner());
        if s.is_none() {
            *s = Some((msg, fatal));
        }
    }
}
