//! How many requests to one model are in flight at once: a limit per model
//! that starts at `--concurrency`, halves on a 429 and grows back one step
//! per window of successes (never above where it started), so a run finds a
//! provider's real rate limit without a retry storm. The client takes a slot
//! for each attempt, not each request: a request waiting out a Retry-After
//! holds nothing, and its retry queues behind the limit like new work.

use std::sync::Mutex;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Successes per step, as a share of the limit, while below the level of
/// the last 429: the way back up is quick.
const RECOVER_WINDOW_DIVISOR: usize = 8;
/// Successes at the level of the last 429 before trying one more, in
/// multiples of the limit; doubled after each probe that fails, so a
/// steady provider limit is probed more and more rarely.
const PROBE_WINDOW_FACTOR: usize = 4;
const PROBE_WINDOW_FACTOR_MAX: usize = 64;

/// An adaptive in-flight limit for one model.
#[derive(Debug)]
pub struct AdaptiveLimit {
    model: String,
    max: usize,
    adaptive: bool,
    slots: std::sync::Arc<Semaphore>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    limit: usize,
    /// Bumped on each decrease: a 429 answering an attempt sent before the
    /// last decrease says nothing new (it was sent under the old limit).
    epoch: u64,
    /// One below the limit at which the last 429 came.
    ceiling: Option<usize>,
    successes: usize,
    probe_factor: usize,
    /// Slots still to take away: in flight when the limit fell, they are
    /// forgotten as they come back instead of returned.
    debt: usize,
    decreases: u64,
    /// Attempts holding a slot now.
    in_flight: usize,
}

/// One attempt's slot; give it back with [`AdaptiveLimit::release`].
#[derive(Debug)]
pub struct Slot {
    permit: OwnedSemaphorePermit,
    epoch: u64,
}

/// How an attempt ended, as the limit sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    Success,
    RateLimited,
    /// Any other failure: says nothing about the rate limit.
    Other,
}

impl AdaptiveLimit {
    /// A limit of `max` in flight; with `adaptive` false it never moves.
    pub fn new(model: &str, max: usize, adaptive: bool) -> Self {
        let max = max.max(1);
        AdaptiveLimit {
            model: model.to_string(),
            max,
            adaptive,
            slots: std::sync::Arc::new(Semaphore::new(max)),
            state: Mutex::new(State {
                limit: max,
                epoch: 0,
                ceiling: None,
                successes: 0,
                probe_factor: PROBE_WINDOW_FACTOR,
                debt: 0,
                decreases: 0,
                in_flight: 0,
            }),
        }
    }

    /// Waits for a free slot.
    pub async fn acquire(&self) -> Slot {
        let permit = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let mut s = self.lock();
        s.in_flight += 1;
        Slot {
            permit,
            epoch: s.epoch,
        }
    }

    /// The current limit.
    pub fn current(&self) -> usize {
        self.lock().limit
    }

    /// How many times the limit fell.
    pub fn decreases(&self) -> u64 {
        self.lock().decreases
    }

    /// Gives a slot back and moves the limit by how its attempt ended.
    pub fn release(&self, slot: Slot, outcome: Attempt) {
        let mut s = self.lock();
        // Only a limit in use is tested by a success: while fewer attempts
        // than the limit are in flight (the rest waiting out a Retry-After),
        // growing it would only let them all come back at once.
        let saturated = s.in_flight >= s.limit;
        s.in_flight -= 1;
        if self.adaptive {
            match outcome {
                Attempt::RateLimited if slot.epoch == s.epoch && s.limit > 1 => {
                    let from = s.limit;
                    let to = (from / 2).max(1);
                    if s.ceiling == Some(from - 1) {
                        // The probe above the last 429 failed: probe more rarely.
                        s.probe_factor = (s.probe_factor * 2).min(PROBE_WINDOW_FACTOR_MAX);
                    }
                    s.ceiling = Some(from - 1);
                    s.limit = to;
                    s.epoch += 1;
                    s.successes = 0;
                    s.decreases += 1;
                    let shrink = from - to;
                    let taken = self.slots.forget_permits(shrink);
                    s.debt += shrink - taken;
                    tracing::info!(model = %self.model, from, to, "rate limited (429): in-flight limit lowered");
                }
                Attempt::Success if s.limit < self.max && saturated => {
                    s.successes += 1;
                    let window = match s.ceiling {
                        Some(c) if s.limit >= c => s.limit * s.probe_factor,
                        _ => (s.limit / RECOVER_WINDOW_DIVISOR).max(1),
                    };
                    if s.successes >= window {
                        s.successes = 0;
                        let from = s.limit;
                        s.limit += 1;
                        if s.ceiling.is_some_and(|c| from > c) {
                            // A probe held: the provider's limit rose.
                            s.ceiling = Some(from);
                            s.probe_factor = PROBE_WINDOW_FACTOR;
                        }
                        if s.debt > 0 {
                            s.debt -= 1;
                        } else {
                            self.slots.add_permits(1);
                        }
                        tracing::info!(model = %self.model, from, to = s.limit, "in-flight limit raised");
                    }
                }
                _ => {}
            }
        }
        if s.debt > 0 {
            s.debt -= 1;
            slot.permit.forget();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn take(l: &AdaptiveLimit, n: usize) -> Vec<Slot> {
        let mut v = Vec::new();
        for _ in 0..n {
            v.push(l.acquire().await);
        }
        v
    }

    /// One success while the limit is in full use.
    async fn saturated_success(l: &AdaptiveLimit) {
        let mut slots = take(l, l.current()).await.into_iter();
        l.release(slots.next().unwrap(), Attempt::Success);
        for s in slots {
            l.release(s, Attempt::Other);
        }
    }

    #[tokio::test]
    async fn successes_below_the_limit_do_not_raise_it() {
        let l = AdaptiveLimit::new("m", 16, true);
        let s = l.acquire().await;
        l.release(s, Attempt::RateLimited);
        for _ in 0..100 {
            let s = l.acquire().await;
            l.release(s, Attempt::Success);
        }
        assert_eq!(l.current(), 8);
    }

    #[tokio::test]
    async fn a_429_halves_once_per_epoch_and_in_flight_slots_are_taken_back() {
        let l = AdaptiveLimit::new("m", 8, true);
        let slots = take(&l, 8).await;
        let mut it = slots.into_iter();
        // Eight attempts sent under the limit 8; all come back 429: one halving.
        for _ in 0..8 {
            l.release(it.next().unwrap(), Attempt::RateLimited);
        }
        assert_eq!(l.current(), 4);
        assert_eq!(l.decreases(), 1);
        // Exactly 4 slots are free now.
        assert_eq!(l.slots.available_permits(), 4);
        // A 429 of an attempt sent under the new limit halves again.
        let s = l.acquire().await;
        l.release(s, Attempt::RateLimited);
        assert_eq!(l.current(), 2);
        assert_eq!(l.slots.available_permits(), 2);
    }

    #[tokio::test]
    async fn successes_grow_the_limit_back_but_never_above_the_start() {
        let l = AdaptiveLimit::new("m", 16, true);
        let s = l.acquire().await;
        l.release(s, Attempt::RateLimited);
        assert_eq!(l.current(), 8);
        for _ in 0..10_000 {
            saturated_success(&l).await;
        }
        assert_eq!(l.current(), 16);
        assert_eq!(l.slots.available_permits(), 16);
    }

    #[tokio::test]
    async fn below_the_last_429_it_recovers_quickly_and_probes_above_it_rarely() {
        let l = AdaptiveLimit::new("m", 64, true);
        // A 429 at 41 in flight: ceiling 40, limit 20.
        {
            let mut s = l.lock();
            s.limit = 41;
        }
        l.slots.forget_permits(23);
        let s = l.acquire().await;
        l.release(s, Attempt::RateLimited);
        assert_eq!(l.current(), 20);
        // Back to 40 within 20 steps of limit/8 successes: under 200.
        let mut n = 0;
        while l.current() < 40 {
            saturated_success(&l).await;
            n += 1;
        }
        assert!(n < 200, "{n} successes to recover");
        // Then 4 x 40 successes at 40 before trying 41.
        for _ in 0..159 {
            saturated_success(&l).await;
        }
        assert_eq!(l.current(), 40);
        saturated_success(&l).await;
        assert_eq!(l.current(), 41);
    }

    #[tokio::test]
    async fn a_fixed_limit_never_moves() {
        let l = AdaptiveLimit::new("m", 4, false);
        let s = l.acquire().await;
        l.release(s, Attempt::RateLimited);
        assert_eq!(l.current(), 4);
        assert_eq!(l.slots.available_permits(), 4);
    }
}
