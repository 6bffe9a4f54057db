//! The batch's budget as each attempt sees it (`--max-cost`): an attempt
//! reserves what it is expected to cost before it is sent and settles with
//! what it was charged as soon as its reply arrives, so the spend the next
//! check reads counts every reply paid so far and every attempt in flight.
//! A first attempt is sent while the budget is not reached; a retry only
//! when its expected cost still fits; after any stop, nothing is sent.
//!
//! A Batch API batch (batch_api.rs) goes through the same ledger: it
//! reserves its estimate before it is submitted, by the rule of a retry
//! (it must fit), keeps it while it is at OpenRouter, and its results'
//! charges count as they are written.

//!
//! On the team store the budget lives in the database (team_budget.rs),
//! shared by every process of the batch.

use super::settings::BatchShared;
use super::shared::Shared;
use super::team_budget::TeamBudget;
use crate::openrouter::{GateFuture, SpendGate};
use crate::store::Store;

impl BatchShared {
    /// Moves the batch's budget (if it has one) into the database: `fresh`
    /// for a new batch or a resume (its spend is this batch's, nothing is
    /// in flight), not for a joiner (the row stays as the others keep it).
    /// Once per batch, whichever of its runs comes first.
    async fn open_team_budget(&self, store: &Store, key: String, fresh: bool) -> crate::Result<()> {
        let Some(max) = self.max_cost else {
            return Ok(());
        };
        self.team
            .get_or_try_init(|| TeamBudget::open(store, key, max, self.spend(), fresh))
            .await?;
        Ok(())
    }

    /// On the team store, opens the batch's budget in the database for run
    /// `run_id` (keyed by its batch token, else by the run): what both the
    /// synchronous and the Batch API path reserve from.
    pub(super) async fn open_team_budget_for(
        &self,
        store: &Store,
        settings: &super::RunSettings,
        run_id: i64,
        fresh: bool,
    ) -> crate::Result<()> {
        if !store.is_team_store() {
            return Ok(());
        }
        let key = settings
            .batch
            .clone()
            .unwrap_or_else(|| format!("run:{run_id}"));
        self.open_team_budget(store, key, fresh).await
    }

    /// Waits until every settlement so far is in the database.
    pub(super) async fn flush_team_budget(&self) {
        if let Some(t) = self.team.get() {
            t.flush().await;
        }
    }

    /// "budget reached: ..." when the budget is reached.
    pub(super) fn budget_reached(&self) -> Option<String> {
        let max = self.max_cost?;
        if let Some(t) = self.team.get() {
            let (spent, reserved, max) = t.seen();
            return (spent + reserved >= max).then(|| reached(spent, reserved, max));
        }
        let l = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
        (self.spend() + l.reserved >= max).then(|| reached(self.spend(), l.reserved, max))
    }

    /// Reserves one attempt's expected cost, if it may be sent: in the
    /// database on the team store, else here.
    async fn reserve(&self, retry: bool, last_charge: f64) -> Result<f64, String> {
        let expected = self.expected(retry, last_charge);
        self.reserve_usd(expected, retry).await.map(|()| expected)
    }

    /// Reserves `expected` (`must_fit`: only if it fits under the budget,
    /// else while the budget is not reached), in the database on the team
    /// store, else here.
    async fn reserve_usd(&self, expected: f64, must_fit: bool) -> Result<(), String> {
        let Some(t) = self.team.get() else {
            return self.reserve_here(expected, must_fit);
        };
        match t.reserve(expected, must_fit).await {
            Ok(Ok(())) => {
                self.ledger
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .reserved += expected;
                Ok(())
            }
            Ok(Err((spent, reserved, max))) => Err(reached(spent, reserved, max)),
            Err(e) => Err(format!(
                "the batch's budget could not be reserved in the database ({e}); nothing more is sent"
            )),
        }
    }

    /// What an attempt is expected to cost: the paid attempts' average; a
    /// retry at least what its previous attempt was charged.
    fn expected(&self, retry: bool, last_charge: f64) -> f64 {
        let l = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
        let average = if l.paid_attempts > 0 {
            l.paid_usd / l.paid_attempts as f64
        } else {
            0.0
        };
        if retry {
            average.max(last_charge)
        } else {
            average
        }
    }

    /// [`BatchShared::reserve_usd`] with the budget in this process.
    fn reserve_here(&self, expected: f64, must_fit: bool) -> Result<(), String> {
        let mut l = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(max) = self.max_cost {
            let committed = self.spend() + l.reserved;
            let over = if must_fit {
                committed + expected > max
            } else {
                committed >= max
            };
            if over {
                return Err(reached(self.spend(), l.reserved, max));
            }
        }
        l.reserved += expected;
        Ok(())
    }

    /// Reserves a Batch API batch's estimate before it is submitted: it
    /// must fit under `--max-cost` with what is spent and in flight.
    pub(super) async fn reserve_batch(&self, estimate: f64) -> Result<(), String> {
        self.reserve_usd(estimate, true).await.map_err(|why| {
            format!("{why}; a batch estimated at ${estimate:.4} could cross it (not submitted)")
        })
    }

    /// Counts a batch an earlier process submitted (or whose submission is
    /// uncertain) at its estimate while it is at OpenRouter: it was
    /// reserved when it went out, and is not refused now.
    pub(super) async fn hold_batch(&self, estimate: f64) {
        if self.reserve_usd(estimate, false).await.is_err() {
            // Over the budget already: counted all the same.
            self.ledger
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .reserved += estimate;
            if let Some(t) = self.team.get() {
                t.settle(-estimate, 0.0);
            }
        }
    }

    /// A batch is over (read, ended, refused): its estimate no longer counts;
    /// its results' charges were counted as they were written.
    pub(super) fn release_batch(&self, estimate: f64) {
        self.settle_batch(estimate, 0.0);
    }

    /// Counts what a batch's results were charged (as they are written).
    pub(super) fn count_batch_spend(&self, charged: f64) {
        self.settle_batch(0.0, charged);
    }

    fn settle_batch(&self, reserved: f64, charged: f64) {
        let mut l = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
        l.reserved = (l.reserved - reserved).max(0.0);
        self.add_spend(charged);
        if let Some(t) = self.team.get() {
            t.settle(reserved, charged);
        }
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
        if let Some(t) = self.team.get() {
            t.settle(reserved, counted);
        }
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
    fn reserve(&self, retry: bool, last_charge: f64) -> GateFuture<'_> {
        Box::pin(async move {
            if self.stop.is_cancelled() || self.batch.stop.is_cancelled() {
                return Err("the run stopped sending".into());
            }
            self.batch
                .reserve(retry, last_charge)
                .await
                .inspect_err(|msg| {
                    self.set_stop(msg.clone(), None);
                    self.batch.stop_all(msg.clone(), false);
                })
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
