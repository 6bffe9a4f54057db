//! The commits of every run of a batch, taken together (issue 45): the
//! runs' writers (writer.rs) hand their results here.

use std::fmt;
use std::sync::Arc;

use crate::domain::{DiscardedCharge, NewResult};
use crate::store::Store;

/// One run's results and charges handed to the batch's commit, and who
/// is told how it went (given the two back, to note or to keep).
pub(super) struct Parcel {
    pub(super) results: Vec<NewResult>,
    pub(super) charges: Vec<DiscardedCharge>,
    /// The run's log mark (run id, last sequence number), kept with them.
    pub(super) mark: Option<(i64, i64)>,
    pub(super) done: tokio::sync::oneshot::Sender<Outcome>,
}

/// A parcel back: its results and charges, and how many were written or
/// why none were.
pub(super) type Outcome = (Vec<NewResult>, Vec<DiscardedCharge>, Result<usize, String>);

/// The commits of every run of a batch, taken together (issue 45). Each
/// commit rewrites index pages all over the request-hash index, so ten
/// models each committing its own share wrote 8.8-10.9 bytes per byte kept
/// where one model writes 3. A run's writer hands its results here and
/// goes on; whoever holds the lock commits everything handed in meanwhile, in
/// one transaction, and tells every run how it went. Each run still acks
/// its workers only after its own results are logged (or committed, without
/// a log), so the kill -9 bound is the same.
#[derive(Default)]
pub(crate) struct Commits {
    queue: std::sync::Mutex<Vec<Parcel>>,
    one_at_a_time: tokio::sync::Mutex<()>,
}

impl fmt::Debug for Commits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Commits").finish_non_exhaustive()
    }
}

impl Commits {
    /// Hands `parcel` in and commits it on a task of its own, not awaited:
    /// its writer goes on logging and acking results while the database
    /// takes the transaction (issue 45: a writer that awaited its commit
    /// held every worker of its run for a few hundred milliseconds a commit,
    /// a quarter of a five-model run's wall). Its `done` says how it went;
    /// a caller that stops listening cannot cut a commit others wait for.
    pub(super) fn start(self: &Arc<Self>, store: &Store, parcel: Parcel) {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(parcel);
        let (this, store) = (self.clone(), store.clone());
        tokio::spawn(async move {
            let _one = this.one_at_a_time.lock().await;
            // A moment for the other runs whose commit fell due together
            // to hand theirs in.
            tokio::task::yield_now().await;
            let parcels =
                std::mem::take(&mut *this.queue.lock().unwrap_or_else(|e| e.into_inner()));
            if parcels.is_empty() {
                return;
            }
            let parts: Vec<_> = parcels
                .iter()
                .map(|p| (p.results.as_slice(), p.charges.as_slice(), p.mark))
                .collect();
            let started = std::time::Instant::now();
            let written = store.write_logged_together(&parts).await;
            tracing::debug!(
                runs = parts.len(),
                results = parts.iter().map(|p| p.0.len()).sum::<usize>(),
                ms = started.elapsed().as_millis() as u64,
                "committed"
            );
            drop(parts);
            for (i, p) in parcels.into_iter().enumerate() {
                let result = match &written {
                    Ok(n) => Ok(n[i]),
                    Err(e) => Err(e.to_string()),
                };
                let _ = p.done.send((p.results, p.charges, result));
            }
        });
    }
}
