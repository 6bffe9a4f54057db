//! The batch's budget in the database, on the team store: one row for every
//! process of the batch (store/team_budget.rs). A reservation is one atomic
//! UPDATE there, awaited before the attempt is sent; a settlement is queued
//! and written in order by a task of its own (the client settles without
//! waiting), so a reservation stays counted until its settlement is in.

use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use crate::domain::BudgetState;
use crate::store::{Store, StoreError};

/// The batch's budget in the database, as this process uses it.
#[derive(Debug)]
pub(super) struct TeamBudget {
    store: Store,
    key: String,
    /// The state last read back (spent, reserved, maximum): what the
    /// check before each test case answers from without a query.
    seen: Arc<Mutex<BudgetState>>,
    settles: mpsc::UnboundedSender<Settle>,
}

#[derive(Debug)]
enum Settle {
    /// An attempt that reserved .0 counted .1.
    Attempt(f64, f64),
    /// Answered once every settlement before it is written.
    Flush(oneshot::Sender<()>),
}

impl TeamBudget {
    /// Opens the batch's row (`key`: its token) with budget `max`: `fresh`
    /// (a new batch, a resume) sets its spend to `spent` and drops what
    /// gone processes reserved; a joiner keeps the row as it is.
    pub(super) async fn open(
        store: &Store,
        key: String,
        max: f64,
        spent: f64,
        fresh: bool,
    ) -> Result<TeamBudget, StoreError> {
        store.open_team_budget(&key, max, spent, fresh).await?;
        let seen = Arc::new(Mutex::new((spent, 0.0, max)));
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(settler(store.clone(), key.clone(), seen.clone(), rx));
        Ok(TeamBudget {
            store: store.clone(),
            key,
            seen,
            settles: tx,
        })
    }

    /// The state last read back.
    pub(super) fn seen(&self) -> BudgetState {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserves `usd` for one attempt (see the store's rules): Ok(Ok) when
    /// reserved, Ok(Err(state)) when the budget refuses it.
    pub(super) async fn reserve(
        &self,
        usd: f64,
        retry: bool,
    ) -> Result<Result<(), BudgetState>, StoreError> {
        let answer = self
            .store
            .reserve_team_budget(&self.key, usd, retry)
            .await?;
        let state = match answer {
            Ok(s) | Err(s) => s,
        };
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = state;
        Ok(answer.map(|_| ()))
    }

    /// Queues the settlement of an attempt.
    pub(super) fn settle(&self, reserved: f64, counted: f64) {
        let _ = self.settles.send(Settle::Attempt(reserved, counted));
    }

    /// Waits until every settlement queued so far is written.
    pub(super) async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.settles.send(Settle::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

/// Writes settlements in order. One that fails is tried again a few
/// times; after that its reservation stays counted (conservative).
async fn settler(
    store: Store,
    key: String,
    seen: Arc<Mutex<BudgetState>>,
    mut rx: mpsc::UnboundedReceiver<Settle>,
) {
    while let Some(m) = rx.recv().await {
        match m {
            Settle::Attempt(reserved, counted) => {
                for attempt in 1..=5 {
                    match store.settle_team_budget(&key, reserved, counted).await {
                        Ok(state) => {
                            *seen.lock().unwrap_or_else(|e| e.into_inner()) = state;
                            break;
                        }
                        Err(e) if attempt == 5 => {
                            tracing::warn!(error = %e, "a charge not settled in the team budget (its reservation stays counted)");
                        }
                        Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
                    }
                }
            }
            Settle::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}
