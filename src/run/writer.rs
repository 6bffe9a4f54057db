//! The writer: one task owns the database writes of a run, batching results
//! into transactions, pausing the workers while the database cannot be
//! written, keeping what it could not write, and the cache filter that
//! spares most requests a cache query.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::cache::CacheFilter;
use super::shared::Shared;
use crate::domain::{DiscardedCharge, NewResult};
use crate::store::Store;

/// How results reach the database: whatever arrived while the previous
/// transaction was being committed is written in the next one (at most
/// this many a transaction), at once. Each worker waits until its result
/// is committed before it takes the next test case, so a SIGKILL or a
/// crash loses at most one paid reply per worker: `--concurrency` (twice
/// that with a judge, whose workers judge while others ask the model).
/// Under load, transactions grow on their own (each commit rewrites the
/// same index pages, so larger ones cost the writer less per result).
pub(super) const WRITE_BATCH: usize = 256;
/// While the database cannot be written, how often the writer looks at
/// the clock to retry.
pub(super) const WRITE_INTERVAL: Duration = Duration::from_millis(25);
/// How long one write waits for another program's lock before the writer
/// pauses sending and retries (every `WRITE_RETRY`) until `--write-wait-secs`.
pub(super) const WRITE_BUSY: Duration = Duration::from_secs(1);
pub(super) const WRITE_RETRY: Duration = Duration::from_millis(250);

/// What a worker hands the writer.
pub(super) enum ToWrite {
    /// A result, and who is told once it is committed (dropped unsent if
    /// it never is: the run stopped first).
    Result(Box<NewResult>, tokio::sync::oneshot::Sender<()>),
    /// Charges of a request that left no result (a 402, an interruption).
    Charges(Vec<DiscardedCharge>),
}

/// What the writer could not write: how many results and where they are.
#[derive(Debug)]
pub(super) struct Unwritten {
    pub(super) written: usize,
    pub(super) results: usize,
    pub(super) kept_in: Result<std::path::PathBuf, String>,
}

impl fmt::Display for Unwritten {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} results written", self.written)?;
        if self.results > 0 {
            match &self.kept_in {
                Ok(p) => write!(
                    f,
                    ", {} more kept in {} (written by the next --resume of this run)",
                    self.results,
                    p.display()
                )?,
                Err(e) => write!(f, ", {} more lost: {e}", self.results)?,
            }
        }
        Ok(())
    }
}

/// The writer: batches results into transactions on its own connection.
/// A write that fails (database locked by another program, disk full) is
/// retried with the batch kept, while the workers send nothing new; once
/// `write_wait` has passed the run stops, and what still cannot be written
/// is kept in a file beside the database for the next run.
pub(super) struct Collector {
    pub(super) store: Store,
    pub(super) run_id: i64,
    pub(super) write_wait: Duration,
    pub(super) stop: CancellationToken,
    pub(super) cache: Option<Arc<CacheFilter>>,
    /// The model's progress line.
    pub(super) progress: Arc<super::progress::ModelProgress>,
    pub(super) shared: Arc<Shared>,
    pub(super) batch: Vec<NewResult>,
    /// The workers waiting for `batch` to be committed.
    pub(super) acks: Vec<tokio::sync::oneshot::Sender<()>>,
    pub(super) loose: Vec<DiscardedCharge>,
    pub(super) stored: usize,
    pub(super) blocked_since: Option<tokio::time::Instant>,
    /// While blocked, the next write is tried at this time, not every tick.
    pub(super) retry_at: Option<tokio::time::Instant>,
}

impl Collector {
    /// Writes until every worker is done; `Some` when results could not
    /// all be written.
    pub(super) async fn run(mut self, mut rx: mpsc::Receiver<ToWrite>) -> Option<Unwritten> {
        let mut inbox = Vec::with_capacity(WRITE_BATCH);
        let mut tick = tokio::time::interval(WRITE_INTERVAL);
        loop {
            tokio::select! {
                // Each worker has at most one result here or queued.
                n = rx.recv_many(&mut inbox, WRITE_BATCH.saturating_sub(self.batch.len()).max(1)) => {
                    if n == 0 {
                        break;
                    }
                    for item in inbox.drain(..) {
                        match item {
                            ToWrite::Result(r, ack) => {
                                self.progress.record(&r, self.shared.spend());
                                self.batch.push(*r);
                                self.acks.push(ack);
                            }
                            ToWrite::Charges(c) => self.loose.extend(c),
                        }
                    }
                    self.progress.redraw(false);
                    self.shared.batch.progress.redraw_total(false);
                    // Written at once: the workers wait for it.
                    if self.blocked_since.is_none() {
                        self.flush().await;
                    }
                },
                _ = tick.tick() => {
                    if self.retry_at.is_none_or(|t| t <= tokio::time::Instant::now()) {
                        self.flush().await;
                    }
                },
            }
        }
        // Every worker is done: a last write, retried until the wait is over.
        loop {
            self.flush().await;
            match self.blocked_since {
                None => break,
                Some(since) if since.elapsed() >= self.write_wait => break,
                Some(_) => tokio::time::sleep(WRITE_RETRY).await,
            }
        }
        if self.blocked_since.is_none() {
            tracing::debug!(stored = self.stored, "results written");
            return None;
        }
        let results = self.batch.len();
        let kept_in = self
            .store
            .keep_pending(self.run_id, &self.batch, &self.loose)
            .map_err(|e| e.to_string());
        Some(Unwritten {
            written: self.stored,
            results,
            kept_in,
        })
    }

    pub(super) async fn flush(&mut self) {
        if self.batch.is_empty() && self.loose.is_empty() {
            return;
        }
        match self.store.write_results(&self.batch, &self.loose).await {
            Ok(n) => {
                self.stored += n;
                if let Some(cache) = &self.cache {
                    cache.note(&self.batch);
                }
                self.batch.clear();
                self.loose.clear();
                for ack in self.acks.drain(..) {
                    let _ = ack.send(());
                }
                self.retry_at = None;
                if self.blocked_since.take().is_some() {
                    tracing::warn!("the database can be written again; sending resumes");
                    self.shared.write_blocked.store(false, Ordering::Relaxed);
                }
            }
            Err(e) => {
                let since = *self
                    .blocked_since
                    .get_or_insert_with(tokio::time::Instant::now);
                if !self.shared.write_blocked.swap(true, Ordering::Relaxed) {
                    tracing::warn!(error = %e, pending = self.batch.len(), "results cannot be written; sending paused, retrying for up to {} s", self.write_wait.as_secs());
                }
                if since.elapsed() >= self.write_wait && !self.stop.is_cancelled() {
                    self.shared.set_stop(
                        format!(
                            "results could not be written for {} s ({e}); stopped sending",
                            self.write_wait.as_secs()
                        ),
                        None,
                    );
                    self.stop.cancel();
                }
                self.retry_at = Some(tokio::time::Instant::now() + WRITE_RETRY);
            }
        }
    }
}
