//! Where a run's workers take their next test case: a list known up front
//! (SQLite, one process per run), or, on the team store, leases: chunks of
//! the run's plan taken from the database one at a time, so several
//! processes (`run-batch --join`) share one run without asking a test case
//! twice (store/leases.rs has the rules).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::benchmark::Benchmark;
use crate::benchmark::cases::CaseIndex;
use crate::domain::RunStatus;
use crate::store::{LEASE_CHUNK, Store};

/// How often a process with nothing to take looks again: for the last
/// chunks to be done (then it ends at once), or for one that a gone
/// process held (its lease expired, or its pid on this host is dead).
const WAIT_FOR_LEASES: Duration = Duration::from_millis(100);

/// How old this process's last lease extension may be before it asks the
/// database which chunks it still holds, ahead of sending another case:
/// two heartbeats. Past it the process was stopped (Ctrl-Z, a laptop's
/// sleep) or cut off, its leases may have expired and been taken, and the
/// cases it queued from them are another's now: sending them would pay
/// twice. Wall-clock time, which a machine's sleep advances too.
const BEAT_GUARD: Duration = Duration::from_secs(10);

/// One test case to ask: which, whether its stored result (a judge error)
/// is replaced, and the chunk it came from (leases only).
#[derive(Debug, Clone, Copy)]
pub(super) struct Item {
    pub case: CaseIndex,
    pub repeat: u32,
    pub replaces: bool,
    chunk: Option<i64>,
}

/// A run's work as its workers take it.
pub(super) enum Work {
    /// Every test case this process asks, known when it starts.
    Listed {
        todo: Vec<(CaseIndex, u32)>,
        redo: HashSet<(String, i64)>,
        next: AtomicUsize,
    },
    /// Chunks of the plan leased from the database as they are needed.
    Leased(Box<Leased>),
}

pub(super) struct Leased {
    store: Store,
    run_id: i64,
    benchmark: Arc<Benchmark>,
    plan: Vec<(CaseIndex, u32)>,
    /// Taken one claim at a time (claims wait for the database).
    queue: tokio::sync::Mutex<Queue>,
    /// Per chunk this process holds: its cases not stored yet.
    pending: Mutex<HashMap<i64, usize>>,
    /// Chunks this process held and another took (its lease expired): their
    /// queued cases are dropped, never sent.
    lost: Mutex<HashSet<i64>>,
    /// When the database last extended this process's leases.
    beat_at: Mutex<std::time::SystemTime>,
    sent: AtomicI64,
    stored: AtomicI64,
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Item>,
    /// No chunk is left to take: every one is done or held by a live process.
    exhausted: bool,
}

impl Work {
    pub(super) fn listed(todo: Vec<(CaseIndex, u32)>, redo: HashSet<(String, i64)>) -> Work {
        Work::Listed {
            todo,
            redo,
            next: AtomicUsize::new(0),
        }
    }

    pub(super) fn leased(
        store: Store,
        run_id: i64,
        benchmark: Arc<Benchmark>,
        plan: Vec<(CaseIndex, u32)>,
    ) -> Work {
        Work::Leased(Box::new(Leased {
            store,
            run_id,
            benchmark,
            plan,
            queue: Default::default(),
            pending: Default::default(),
            lost: Default::default(),
            beat_at: Mutex::new(std::time::SystemTime::now()),
            sent: AtomicI64::new(0),
            stored: AtomicI64::new(0),
        }))
    }

    /// The next test case, None when there is none left for this process;
    /// an error (the database) when leases cannot be taken.
    pub(super) async fn next(
        &self,
        b: &Benchmark,
        stop: &CancellationToken,
    ) -> Result<Option<Item>, crate::Error> {
        match self {
            Work::Listed { todo, redo, next } => {
                let i = next.fetch_add(1, Ordering::Relaxed);
                Ok(todo.get(i).map(|&(case, repeat)| Item {
                    case,
                    repeat,
                    replaces: !redo.is_empty()
                        && redo.contains(&(case.resolve(b).code(), i64::from(repeat))),
                    chunk: None,
                }))
            }
            Work::Leased(l) => l.next(stop).await,
        }
    }

    /// The item's result is stored: a chunk whose every case is stored is done.
    pub(super) async fn stored(&self, item: &Item) {
        let (Work::Leased(l), Some(chunk)) = (self, item.chunk) else {
            return;
        };
        l.stored.fetch_add(1, Ordering::Relaxed);
        let finished = {
            let mut p = l.pending.lock().unwrap_or_else(|e| e.into_inner());
            match p.get_mut(&chunk) {
                Some(n) => {
                    *n = n.saturating_sub(1);
                    let done = *n == 0;
                    if done {
                        p.remove(&chunk);
                    }
                    done
                }
                None => false,
            }
        };
        if finished && let Err(e) = l.store.chunk_done(l.run_id, chunk).await {
            // Not fatal: the chunk's lease expires, and whoever takes it
            // finds every case stored and marks it done.
            tracing::warn!(chunk, error = %e, "a finished chunk not marked done");
        }
    }

    /// Test cases this process took and stored (leases only: its host row).
    pub(super) fn counts(&self) -> Option<(i64, i64)> {
        match self {
            Work::Leased(l) => Some((
                l.sent.load(Ordering::Relaxed),
                l.stored.load(Ordering::Relaxed),
            )),
            Work::Listed { .. } => None,
        }
    }

    pub(super) fn is_leased(&self) -> bool {
        matches!(self, Work::Leased(_))
    }

    /// This process's heartbeat on a lease-managed run (nothing for a
    /// listed one): its counts, its leases extended, and the chunks it no
    /// longer holds noted as lost.
    pub(super) async fn beat(&self) -> Result<(), crate::Error> {
        match self {
            Work::Leased(l) => l.beat().await,
            Work::Listed { .. } => Ok(()),
        }
    }
}

impl Leased {
    /// Writes this process's heartbeat and learns which chunks it still
    /// holds: a chunk it held before the heartbeat and no longer holds was
    /// taken by another process (see [`BEAT_GUARD`]).
    async fn beat(&self) -> Result<(), crate::Error> {
        let before: Vec<i64> = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .copied()
            .collect();
        let held = self
            .store
            .host_heartbeat(
                self.run_id,
                self.sent.load(Ordering::Relaxed),
                self.stored.load(Ordering::Relaxed),
            )
            .await?;
        let gone: Vec<i64> = before.into_iter().filter(|c| !held.contains(c)).collect();
        if !gone.is_empty() {
            tracing::warn!(
                chunks = ?gone,
                "leases lost to another process (this one was stopped or cut off); their cases are left to it"
            );
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
            for c in gone {
                pending.remove(&c);
                lost.insert(c);
            }
        }
        *self.beat_at.lock().unwrap_or_else(|e| e.into_inner()) = std::time::SystemTime::now();
        Ok(())
    }

    /// Whether the last heartbeat is older than [`BEAT_GUARD`] (or the
    /// clock went back).
    fn beat_is_old(&self) -> bool {
        let at = *self.beat_at.lock().unwrap_or_else(|e| e.into_inner());
        at.elapsed().map_or(true, |d| d > BEAT_GUARD)
    }

    async fn next(&self, stop: &CancellationToken) -> Result<Option<Item>, crate::Error> {
        let mut q = self.queue.lock().await;
        loop {
            if !q.items.is_empty() && self.beat_is_old() {
                self.beat().await?;
            }
            if let Some(item) = q.items.pop_front() {
                let lost = item.chunk.is_some_and(|c| {
                    self.lost
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .contains(&c)
                });
                if lost {
                    continue;
                }
                self.sent.fetch_add(1, Ordering::Relaxed);
                return Ok(Some(item));
            }
            if q.exhausted || stop.is_cancelled() {
                return Ok(None);
            }
            let Some(chunk) = self.store.claim_chunk(self.run_id).await? else {
                // Nothing free now. What this process holds, its other
                // workers finish; what others hold, they finish, or, if
                // they are gone (anywhere, unseen), their leases expire and
                // this process takes them: it waits while any chunk is
                // another's, so the last process standing ends the run.
                self.store.release_dead_holders(self.run_id).await?;
                let (left, mine) = self.store.chunks_held(self.run_id).await?;
                if left == mine {
                    q.exhausted = true;
                    return Ok(None);
                }
                tokio::select! {
                    _ = tokio::time::sleep(WAIT_FOR_LEASES) => {}
                    _ = stop.cancelled() => return Ok(None),
                }
                continue;
            };
            // The counts `runs` shows, fresh at each claim (and every
            // heartbeat), so a killed process's row says what it did.
            self.beat().await?;
            let missing = self.missing(chunk).await?;
            if missing.is_empty() {
                self.store.chunk_done(self.run_id, chunk).await?;
                continue;
            }
            self.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(chunk, missing.len());
            q.items.extend(missing);
        }
    }

    /// The cases of `chunk` not stored yet (a stored judge error is asked
    /// again, replacing it), in the plan's order.
    async fn missing(&self, chunk: i64) -> Result<Vec<Item>, crate::Error> {
        let lo = (chunk.max(0) as usize * LEASE_CHUNK).min(self.plan.len());
        let hi = (lo + LEASE_CHUNK).min(self.plan.len());
        let cases: Vec<(CaseIndex, u32, String)> = self.plan[lo..hi]
            .iter()
            .map(|&(c, r)| (c, r, c.resolve(&self.benchmark).code()))
            .collect();
        let mut codes: Vec<String> = cases.iter().map(|(_, _, code)| code.clone()).collect();
        codes.sort();
        codes.dedup();
        let stored = self.store.stored_among(self.run_id, &codes).await?;
        Ok(cases
            .into_iter()
            .filter_map(|(case, repeat, code)| {
                let replaces = match stored.get(&(code, i64::from(repeat))) {
                    Some(true) => true,
                    Some(false) => return None,
                    None => false,
                };
                Some(Item {
                    case,
                    repeat,
                    replaces,
                    chunk: Some(chunk),
                })
            })
            .collect())
    }
}

/// A run `--join` may join: on the team store, running, with a live
/// process on it, and taking its work in leases (not the Batch API).
pub(super) async fn check_joinable(store: &Store, run_id: i64) -> Result<(), crate::Error> {
    let row = store.run(run_id).await?;
    if row.status != RunStatus::Running {
        return Err(crate::Error::usage(format!(
            "run {run_id} is {}: no process is running it, so there is nothing to join; continue it with `helmbench run-batch --resume {run_id}`",
            row.status
        )));
    }
    if !store.run_batches(run_id).await?.is_empty() {
        return Err(crate::Error::usage(format!(
            "run {run_id} goes through OpenRouter's Batch API: its requests are already out, there is nothing to share; collect it with `helmbench run-batch --resume {run_id}` once its process has stopped"
        )));
    }
    if !store.has_leases(run_id).await? {
        return Err(crate::Error::usage(format!(
            "run {run_id} does not hand its work out in leases (it was started by an older helmbench); wait for it to finish, or stop it and resume it"
        )));
    }
    Ok(())
}

/// Ends this process's part of a lease-managed run: the run's end is
/// recorded if it is complete or no other process is on it; otherwise the
/// run goes on elsewhere, and what this process reports says so (status
/// `running`).
pub(super) async fn leave(
    store: &Store,
    run_id: i64,
    status: RunStatus,
    message: Option<String>,
) -> Result<(RunStatus, Option<String>), crate::Error> {
    let others = store.leave_run(run_id, status, message.as_deref()).await?;
    if others.is_empty() {
        return Ok((status, message));
    }
    let here = match message {
        Some(m) => format!("{m}; this process stopped"),
        None => "this process's part is done".into(),
    };
    Ok((
        RunStatus::Running,
        Some(format!(
            "{here}, the run continues in {} (see `helmbench runs`)",
            others.join(", ")
        )),
    ))
}
