//! The batch's budget as each attempt sees it (`--max-cost`): an attempt
//! reserves what it is expected to cost before it is sent and settles with
//! what it was charged as soon as its reply arrives, so the spend the next
//! check reads counts every reply paid so far and every attempt in flight.
//! A first attempt is sent while the budget is not reached; a retry only
//! when its expected cost still fits; after any stop, nothing is sent.

use super::settings::BatchShared;
use super::shared::Shared;
use crate::openrouter::SpendGate;

impl BatchShared {
    /// "budget reached: ..." when the budget is reached.
    pub(super) fn budget_reached(&self) -> Option<String> {
        let max = self.max_cost?;
        let l = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
        (self.spend() + l.reserved >= max).then(|| reached(self.spend(), l.reserved, max))
    }

    /// Reserves one attempt's expected cost, if it may be sent.
    fn reserve(&self, retry: bool, last_charge: f64) -> Result<f64, String> {
        let mut l = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
        let average = if l.paid_attempts > 0 {
            l.paid_usd / l.paid_attempts as f64
        } else {
            0.0
        };
        let expected = if retry {
            average.max(last_charge)
        } else {
            average
        };
        if let Some(max) = self.max_cost {
            let committed = self.spend() + l.reserved;
            let over = if retry {
                committed + expected > max
            } else {
                committed >= max
            };
            if over {
                return Err(reached(self.spend(), l.reserved, max));
            }
        }
        l.reserved += expected;
        Ok(expected)
    }

    /// Counts what an attempt was charged in place of what it reserved; an
    /// unknown charge counts as what was reserved. Returns what was counted.
    fn settle(&self, reserved: f64, charged: f64) -> f64 {
        let mut l = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
        let counted = if charged.is_finite() {
            charged.max(0.0)
        } else {
            reserved
        };
        if charged.is_finite() && charged > 0.0 {
            l.paid_attempts += 1;
            l.paid_usd += charged;
        }
        self.add_spend(counted);
        l.reserved = (l.reserved - reserved).max(0.0);
        counted
    }
}

fn reached(spent: f64, reserved: f64, max: f64) -> String {
    if reserved > 0.0 {
        format!(
            "budget reached: ${spent:.4} spent and ${reserved:.4} reserved by requests in flight, of the batch's --max-cost ${max}"
        )
    } else {
        format!("budget reached: ${spent:.4} spent of the batch's --max-cost ${max}")
    }
}

impl SpendGate for Shared {
    fn reserve(&self, retry: bool, last_charge: f64) -> Result<f64, String> {
        if self.stop.is_cancelled() || self.batch.stop.is_cancelled() {
            return Err("the run stopped sending".into());
        }
        self.batch.reserve(retry, last_charge).inspect_err(|msg| {
            self.set_stop(msg.clone(), None);
            self.batch.stop_all(msg.clone(), false);
        })
    }

    fn settle(&self, reserved: f64, charged: f64) {
        let counted = self.batch.settle(reserved, charged);
        self.spend.add(counted);
        if !charged.is_finite() {
            self.unknown_charges
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}
