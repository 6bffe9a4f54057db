//! What a run is started with ([`RunSettings`], stored with the run and
//! replayed by resume) and how it is stopped from outside ([`RunControl`]).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::benchmark::ModelEntry;

/// The settings a run is started with, stored with it and replayed by resume.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSettings {
    pub model: ModelEntry,
    /// One judge, or a panel of several, comma-separated (issue 20).
    pub judge_model: Option<String>,
    /// How a panel's tie is broken (runs before issue 20 have one judge).
    #[serde(default)]
    pub judge_tie: crate::judging::panel::JudgeTie,
    pub selectors: Vec<String>,
    pub include_no_context: bool,
    /// Requests in flight at once: 1 to [`MAX_CONCURRENCY`].
    pub concurrency: std::num::NonZeroUsize,
    pub limit: Option<usize>,
    pub repeats: u32,
    pub no_cache: bool,
    pub max_cost: Option<f64>,
    pub tool_version: String,
    pub benchmark_hash: String,
}

/// A SIGINT/SIGTERM, shared by every run of a command: the first one stops
/// the runs (no new requests; those in flight get [`RunControl::grace`]).
#[derive(Debug, Clone, Default)]
pub struct Interrupt {
    pub(super) token: CancellationToken,
    signal: Arc<std::sync::OnceLock<&'static str>>,
}

impl Interrupt {
    /// Records `signal` (e.g. "SIGTERM") and stops the runs.
    pub fn fire(&self, signal: &'static str) {
        let _ = self.signal.set(signal);
        self.token.cancel();
    }

    /// The signal received, if any.
    pub fn signal(&self) -> Option<&'static str> {
        self.token
            .is_cancelled()
            .then(|| self.signal.get().copied().unwrap_or("an interrupt"))
    }
}

/// How a run is stopped from outside and how long it waits.
#[derive(Debug, Clone)]
pub struct RunControl {
    pub interrupt: Interrupt,
    /// After an interrupt, requests in flight (already paid for) may finish
    /// and be stored for this long; then they are dropped.
    pub grace: Duration,
    /// How long results may wait for a database that cannot be written
    /// (locked by another program, disk full) before the run stops; sending
    /// pauses meanwhile.
    pub write_wait: Duration,
}

/// Defaults of `--grace-secs` and `--write-wait-secs`.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);
pub const DEFAULT_WRITE_WAIT: Duration = Duration::from_secs(60);

impl Default for RunControl {
    fn default() -> Self {
        RunControl {
            interrupt: Interrupt::default(),
            grace: DEFAULT_GRACE,
            write_wait: DEFAULT_WRITE_WAIT,
        }
    }
}

/// The most requests one run keeps in flight: past this a 2-core machine
/// spends its time switching tasks, and providers rate-limit long before.
pub const MAX_CONCURRENCY: usize = 1024;
