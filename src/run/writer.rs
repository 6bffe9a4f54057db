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
use super::commits::{Outcome, Parcel};
use super::log::ResultLog;
use super::shared::Shared;
use crate::domain::{DiscardedCharge, NewResult};
use crate::store::Store;

/// How results reach the database. Each worker waits until its result is
/// safe before it takes the next test case, so a SIGKILL or a crash loses
/// at most one paid reply per worker: `--concurrency` (twice that with a
/// judge, whose workers judge while others ask the model). Safe means
/// appended to the run's result log (`log.rs`); the database then takes
/// results in transactions of up to [`LOG_BATCH`], or every
/// [`LOG_AGE`](super::settings::LOG_AGE),
/// since each commit rewrites index pages all over the request-hash index
/// and fewer, larger commits write far fewer bytes. Without a log (an
/// in-memory database, or a log that cannot be written), safe means
/// committed: whatever arrived while the previous transaction was being
/// committed is written in the next one, at once. Results are taken from
/// the queue this many at a time.
pub(super) const WRITE_BATCH: usize = 256;
/// Most results one transaction holds when they are logged first.
pub(super) const LOG_BATCH: usize = 8192;
/// Most logged results every run of a batch together holds in memory
/// before the writer at hand commits its own: a result waiting for its
/// transaction is about 5 KB (its prompt, reply and parsed fields), and ten
/// models each filling [`LOG_BATCH`] took the write of 1,100,000 results to
/// 781 MB. While a commit is in flight its writer takes new results only
/// while the batch holds fewer than this (and its own fewer than
/// [`LOG_BATCH`]), so at most about twice this is in memory, the commit's
/// and the next. Four batches' worth (issue 45): each commit inserts all over
/// the request-hash index, so at 1,100,000 results twice as many results a
/// commit took bytes written per byte kept from 4.16 to 3.55, for 575 →
/// 640 MB peak (BENCHMARKS.md).
pub(super) const LOG_WAITING: usize = 4 * LOG_BATCH;

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
/// is kept in a file beside the database for the next run. One commit is
/// in flight at a time, and results logged meanwhile wait for the next.
pub(super) struct Collector {
    pub(super) store: Store,
    pub(super) run_id: i64,
    pub(super) write_wait: Duration,
    pub(super) stop: CancellationToken,
    pub(super) cache: Option<Arc<CacheFilter>>,
    /// The model's progress line.
    pub(super) progress: Arc<super::progress::ModelProgress>,
    pub(super) shared: Arc<Shared>,
    /// Results not yet handed to a commit.
    pub(super) batch: Vec<NewResult>,
    /// The workers waiting for `batch` to be committed.
    pub(super) acks: Vec<tokio::sync::oneshot::Sender<()>>,
    pub(super) loose: Vec<DiscardedCharge>,
    pub(super) stored: usize,
    pub(super) blocked_since: Option<tokio::time::Instant>,
    /// While blocked, the next write is tried at this time, not every tick.
    pub(super) retry_at: Option<tokio::time::Instant>,
    /// The run's result log; `None`: each result is committed before its
    /// worker goes on.
    pub(super) log: Option<ResultLog>,
    /// The longest a logged result waits for its transaction.
    pub(super) log_age: Duration,
    /// Results of `batch` counted in the batch's `waiting`.
    pub(super) waiting: usize,
    /// When the oldest result of `batch` arrived.
    pub(super) oldest: Option<tokio::time::Instant>,
    /// The commit handed in and not yet answered.
    pub(super) in_flight: Option<InFlight>,
    /// The run's analysis, fed each commit's results once it is answered.
    pub(super) tally: Option<crate::report::Tally>,
}

/// What goes with a commit until it is answered, given back to the writer
/// if it fails.
pub(super) struct InFlight {
    outcome: tokio::sync::oneshot::Receiver<Outcome>,
    /// The workers whose results it holds unlogged.
    acks: Vec<tokio::sync::oneshot::Sender<()>>,
    /// Its results counted in the batch's `waiting`.
    waiting: usize,
    oldest: Option<tokio::time::Instant>,
}

impl Collector {
    /// Writes until every worker is done; `Some` when results could not
    /// all be written. With the run's tally of what was written.
    pub(super) async fn run(
        mut self,
        rx: mpsc::Receiver<ToWrite>,
    ) -> (Option<Unwritten>, Option<crate::report::Tally>) {
        let unwritten = self.write(rx).await;
        (unwritten, self.tally)
    }

    async fn write(&mut self, mut rx: mpsc::Receiver<ToWrite>) -> Option<Unwritten> {
        let mut inbox = Vec::with_capacity(WRITE_BATCH);
        let mut tick = tokio::time::interval(WRITE_INTERVAL);
        loop {
            // While a commit is in flight the workers are let run ahead by
            // one commit's worth at most: memory stays bounded as before.
            let room = self.in_flight.is_none() || !self.full();
            tokio::select! {
                // Each worker has at most one result here or queued.
                n = rx.recv_many(&mut inbox, WRITE_BATCH), if room => {
                    if n == 0 {
                        break;
                    }
                    let mut logged = Vec::new();
                    for item in inbox.drain(..) {
                        match item {
                            ToWrite::Result(r, ack) => {
                                self.progress.record(&r, self.shared.spend());
                                if self.log_with(|log| log.append_result(&r)) {
                                    logged.push(ack);
                                } else {
                                    self.acks.push(ack);
                                }
                                self.batch.push(*r);
                            }
                            ToWrite::Charges(c) => {
                                self.log_with(|log| log.append_charges(&c));
                                self.loose.extend(c);
                            }
                        }
                    }
                    // One flush for the group: its workers go on once every
                    // record of it is with the kernel. A log given up on the
                    // way (its records may not have reached the file) leaves
                    // them to the next commit, as without a log.
                    if self.log_with(ResultLog::flush) {
                        self.shared.batch.waiting.fetch_add(logged.len(), Ordering::Relaxed);
                        self.waiting += logged.len();
                        for ack in logged {
                            let _ = ack.send(());
                        }
                    } else {
                        self.acks.extend(logged);
                    }
                    self.oldest.get_or_insert_with(tokio::time::Instant::now);
                    self.progress.redraw(false);
                    self.shared.batch.progress.redraw_total(false);
                    if self.due() && self.blocked_since.is_none() {
                        self.start_commit();
                    }
                },
                outcome = async { (&mut self.in_flight.as_mut().expect("guarded").outcome).await },
                    if self.in_flight.is_some() => {
                    self.answered(outcome);
                    // What arrived meanwhile, if it is due already.
                    if self.due() && self.blocked_since.is_none() {
                        self.start_commit();
                    }
                },
                _ = tick.tick() => {
                    let now = tokio::time::Instant::now();
                    let due = self.log.is_none()
                        || self.oldest.is_some_and(|t| now.duration_since(t) >= self.log_age);
                    if due && self.retry_at.is_none_or(|t| t <= now) {
                        self.start_commit();
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
            if let Some(log) = self.log.take() {
                self.remove_log(log);
            }
            return None;
        }
        let results = self.batch.len();
        let waiting = std::mem::take(&mut self.waiting);
        self.shared
            .batch
            .waiting
            .fetch_sub(waiting, Ordering::Relaxed);
        let kept_in = self
            .store
            .keep_pending(self.run_id, &self.batch, &self.loose)
            .map_err(|e| e.to_string());
        // Kept in the pending file: the log's copy goes. Not kept: the log
        // still holds them for the next --resume.
        let kept_in = match (kept_in, self.log.take()) {
            (Ok(p), Some(log)) => {
                self.remove_log(log);
                Ok(p)
            }
            (Err(_), Some(log)) => Ok(log.path().to_path_buf()),
            (k, None) => k,
        };
        Some(Unwritten {
            written: self.stored,
            results,
            kept_in,
        })
    }

    /// Whether what `batch` holds should go to a commit now, on count:
    /// at once without a log, else at a full transaction or when every
    /// run together holds its most (age is the tick's).
    fn due(&self) -> bool {
        self.log.is_none() || self.full() || self.log_age.is_zero()
    }

    /// A full transaction here, or the most every run together holds.
    fn full(&self) -> bool {
        self.batch.len() >= LOG_BATCH
            || self.shared.batch.waiting.load(Ordering::Relaxed) >= LOG_WAITING
    }

    /// Hands `batch` to the batch's commits, unless a commit is in flight
    /// (what it holds then waits for the next). The log moves aside first,
    /// so the records logged during the commit are in a file of their own
    /// and the committed ones can go once it is answered.
    fn start_commit(&mut self) {
        if self.in_flight.is_some() || (self.batch.is_empty() && self.loose.is_empty()) {
            return;
        }
        self.log_with(ResultLog::move_aside);
        let mark = self.log.as_ref().map(|log| (self.run_id, log.seq()));
        let (done, outcome) = tokio::sync::oneshot::channel();
        // The next batch starts as large as this one: grown by doubling, a
        // batch of thousands of results (each several hundred bytes) was
        // copied whole at each step, 1 % of a run's CPU (issue 45).
        let next = Vec::with_capacity(self.batch.len());
        self.shared.batch.commits.start(
            &self.store,
            Parcel {
                results: std::mem::replace(&mut self.batch, next),
                charges: std::mem::take(&mut self.loose),
                mark,
                done,
            },
        );
        self.in_flight = Some(InFlight {
            outcome,
            acks: std::mem::take(&mut self.acks),
            waiting: std::mem::take(&mut self.waiting),
            oldest: self.oldest.take(),
        });
    }

    /// The commit in flight was answered: its workers are told, or, if it
    /// failed, its results go back in front of `batch` and sending pauses.
    fn answered(&mut self, outcome: Result<Outcome, tokio::sync::oneshot::error::RecvError>) {
        let InFlight {
            acks,
            waiting,
            oldest,
            ..
        } = self.in_flight.take().expect("a commit in flight");
        let (results, charges, result) = match outcome {
            Ok(o) => o,
            // Only if the commit's task panicked: its results went with it.
            Err(_) => {
                if let Some(t) = self.tally.as_mut() {
                    t.spoil();
                }
                (
                    Vec::new(),
                    Vec::new(),
                    Err("the commit stopped before it ended".to_string()),
                )
            }
        };
        match result {
            Ok(n) => {
                if let Some(t) = self.tally.as_mut() {
                    t.committed(&results, n);
                }
                self.stored += n;
                self.shared
                    .batch
                    .waiting
                    .fetch_sub(waiting, Ordering::Relaxed);
                // Not given up on if this fails: the current file holds
                // results not committed yet. The file aside then stays (its
                // records are skipped by a replay, as committed) and the log
                // goes on in one file until the run ends.
                if let Some(Err(e)) = self.log.as_mut().map(ResultLog::committed) {
                    tracing::warn!(error = %e, "a committed part of the result log could not be removed");
                }
                if let Some(cache) = &self.cache {
                    cache.note(&results);
                }
                for ack in acks {
                    let _ = ack.send(());
                }
                self.retry_at = None;
                if self.blocked_since.take().is_some() {
                    tracing::warn!("the database can be written again; sending resumes");
                    self.shared.write_blocked.store(false, Ordering::Relaxed);
                }
            }
            Err(e) => {
                in_front(results, &mut self.batch);
                in_front(charges, &mut self.loose);
                in_front(acks, &mut self.acks);
                self.waiting += waiting;
                self.oldest = oldest.or(self.oldest);
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

    /// Commits everything held now: the commit in flight, then the rest;
    /// returns early if a commit fails (`blocked_since` says so).
    async fn flush(&mut self) {
        loop {
            if let Some(f) = self.in_flight.as_mut() {
                let outcome = (&mut f.outcome).await;
                self.answered(outcome);
                if self.blocked_since.is_some() {
                    return;
                }
            }
            if self.batch.is_empty() && self.loose.is_empty() {
                return;
            }
            self.start_commit();
        }
    }

    /// Does `f` to the log; false without one. A log that cannot be written
    /// (disk full) is given up: from then on each result is committed
    /// before its worker goes on, as without a log.
    fn log_with(&mut self, f: impl FnOnce(&mut ResultLog) -> std::io::Result<()>) -> bool {
        let Some(log) = self.log.as_mut() else {
            return false;
        };
        match f(log) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, path = %log.path().display(), "the result log cannot be written; each result is now committed before its worker goes on");
                // Results it held that are not committed yet are still in
                // the batch, written by the next commit.
                if let Some(log) = self.log.take() {
                    self.remove_log(log);
                }
                false
            }
        }
    }

    fn remove_log(&self, log: ResultLog) {
        let path = log.path().display().to_string();
        if let Err(e) = log.remove() {
            tracing::warn!(error = %e, path, "the result log could not be removed");
        }
    }
}

/// Puts `front` before what `v` holds.
fn in_front<T>(mut front: Vec<T>, v: &mut Vec<T>) {
    front.append(v);
    *v = front;
}
