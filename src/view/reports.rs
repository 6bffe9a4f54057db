//! The Run page's numbers (`report`'s, 3 s on a 110,000-result run),
//! computed once per state of the run in the background and kept: a page
//! asks with the run's state ([`crate::store::Store::run_state`], a few
//! rows of kept totals), gets the kept report when the state is the same,
//! and otherwise starts (or finds under way) a computation, waits a moment
//! for it, and else says "computing" with the last report it has.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};

use crate::report::ModelReport;

/// How long a request waits for its report before the page says
/// "computing" (a small run's report is ready well within it).
const WAIT: Duration = Duration::from_millis(150);

/// The reports computed, by run.
pub struct Reports {
    runs: Mutex<HashMap<i64, Entry>>,
    /// Woken whenever a computation ends.
    done: Notify,
    /// One computation at a time: each takes a core for seconds.
    one_at_a_time: Semaphore,
}

#[derive(Default)]
struct Entry {
    /// The latest report computed, with the run's state it is for.
    latest: Option<(String, Arc<ModelReport>)>,
    /// The state a computation under way is for.
    computing: Option<String>,
    /// Why the computation for a state failed.
    failed: Option<(String, String)>,
}

/// What the Run page shows.
pub enum Shown {
    /// The report for the run as it is now.
    Current(Arc<ModelReport>),
    /// Being computed; meanwhile the report of an earlier state, if any.
    Computing(Option<Arc<ModelReport>>),
}

impl Default for Reports {
    fn default() -> Self {
        Reports {
            runs: Mutex::new(HashMap::new()),
            done: Notify::new(),
            one_at_a_time: Semaphore::new(1),
        }
    }
}

impl Reports {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Entry>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The report of `run_id` for its current `state`, computed by
    /// `compute` (on a blocking thread: scoring is seconds of CPU that must
    /// not hold up the server's own threads) when it is not kept yet; the
    /// error of that computation, once, as a sentence.
    pub async fn get<F, Fut>(
        self: &Arc<Self>,
        run_id: i64,
        state: String,
        compute: F,
    ) -> Result<Shown, String>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<ModelReport, String>> + 'static,
    {
        let mut compute = Some(compute);
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            // Registered before looking, so an end in between still wakes it.
            let notified = self.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut runs = self.lock();
                let e = runs.entry(run_id).or_default();
                if let Some((s, r)) = &e.latest
                    && *s == state
                {
                    return Ok(Shown::Current(r.clone()));
                }
                if let Some((s, why)) = &e.failed
                    && *s == state
                {
                    let why = why.clone();
                    // The next request tries again.
                    e.failed = None;
                    return Err(why);
                }
                if e.computing.as_deref() != Some(state.as_str())
                    && let Some(f) = compute.take()
                {
                    e.computing = Some(state.clone());
                    self.clone().spawn(run_id, state.clone(), f);
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let runs = self.lock();
                let latest = runs.get(&run_id).and_then(|e| e.latest.clone());
                return Ok(Shown::Computing(latest.map(|(_, r)| r)));
            }
        }
    }

    /// Runs `compute` on a blocking thread, one at a time, and keeps what
    /// it gives for `state`.
    fn spawn<F, Fut>(self: Arc<Self>, run_id: i64, state: String, compute: F)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<ModelReport, String>> + 'static,
    {
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let result = handle.block_on(async {
                let _turn = self.one_at_a_time.acquire().await;
                compute().await
            });
            {
                let mut runs = self.lock();
                let e = runs.entry(run_id).or_default();
                if e.computing.as_deref() == Some(state.as_str()) {
                    e.computing = None;
                }
                match result {
                    Ok(r) => e.latest = Some((state, Arc::new(r))),
                    Err(why) => e.failed = Some((state, why)),
                }
            }
            self.done.notify_waiters();
        });
    }
}
