//! What a run is started with ([`RunSettings`], stored with the run and
//! replayed by resume) and how it is stopped from outside ([`RunControl`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::benchmark::cases::Selector;
use crate::domain::ModelEntry;
use crate::report::Tally;

/// Which test cases a batch runs, and how often, within what budget: what
/// `run-batch` and `estimate` select, validated once from the command line.
#[derive(Debug, Clone)]
pub struct Selection {
    /// Scenario codes, test codes or prefixes; empty means every scenario.
    pub selectors: Vec<Selector>,
    pub include_no_context: bool,
    pub limit: Option<usize>,
    pub repeats: u32,
    /// The budget in USD for the whole batch.
    pub max_cost: Option<f64>,
    /// `--variants`: the variants of the user's words every selected test
    /// case runs with instead of its scenario's `variants:` (checked).
    pub variants: Option<String>,
    /// `--variant-seed`, or (once variants apply) the default seed.
    pub variant_seed: Option<u64>,
}

impl Selection {
    /// Every test case once, no budget.
    pub fn everything() -> Selection {
        Selection {
            selectors: Vec::new(),
            include_no_context: true,
            limit: None,
            repeats: 1,
            max_cost: None,
            variants: None,
            variant_seed: None,
        }
    }

    /// A run's settings for `model` over this selection, one request at a
    /// time: the batch sets its concurrency and token.
    pub fn settings(
        &self,
        model: ModelEntry,
        judge_model: Option<String>,
        judge_tie: crate::judging::panel::JudgeTie,
        no_cache: bool,
        benchmark_hash: &str,
    ) -> RunSettings {
        RunSettings {
            model,
            judge_model,
            judge_tie,
            selectors: self
                .selectors
                .iter()
                .map(|s| s.as_str().to_string())
                .collect(),
            include_no_context: self.include_no_context,
            concurrency: std::num::NonZeroUsize::MIN,
            limit: self.limit,
            repeats: self.repeats,
            no_cache,
            max_cost: self.max_cost,
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            benchmark_hash: benchmark_hash.to_string(),
            blocked_as: Default::default(),
            judge_entries: None,
            batch: None,
            batch_api: None,
            variants: self.variants.clone(),
            variant_seed: self.variant_seed,
            user_model: None,
        }
    }
}

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
    /// How blocked and refused test cases enter the run's score (runs
    /// recorded before this choice existed leave them out).
    #[serde(default)]
    pub blocked_as: crate::domain::BlockedAs,
    /// The models.yml entries of the run's judges, resolved when it began
    /// (defaults filled in, wire format pinned): a verdict depends on them
    /// and the model's request hash does not, so a rerun is taken as
    /// already answered by this run only when they are the same (see
    /// complete.rs). A resume judges with these. `None` for runs recorded
    /// before they were: such a run never answers a judged rerun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_entries: Option<Vec<ModelEntry>>,
    /// The batch the run was started in (its runs share one budget);
    /// `None` for runs recorded before batches ran their models at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<String>,
    /// How a run started with `--batch-api` submits its batches: every
    /// resume goes on through the Batch API with these, whether or not a
    /// batch went out before. `None` for synchronous runs (and Batch API
    /// runs recorded before this was: their recorded batches say so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_api: Option<BatchApiSettings>,
    /// `--variants` as given (issue 43): they replace the scenarios' own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variants: Option<String>,
    /// The seed the run's variants were drawn with (None: no variant
    /// applied); a resume draws the same text from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant_seed: Option<u64>,
    /// `--user-model`: the models.yml entry (defaults filled in, wire
    /// format pinned) of the model that simulates the user of scenarios
    /// with personas (issue 42); a resume simulates with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_model: Option<ModelEntry>,
}

/// A Batch API run's recorded settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchApiSettings {
    /// `--batch-size`: requests per batch, at most.
    pub batch_size: usize,
    /// The base URL the batches were submitted to: a batch id means
    /// something only there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The first 16 hex digits of the SHA-256 of the API key the batches
    /// were submitted with (never the key): another key cannot poll them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_fingerprint: Option<String>,
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

/// Longest a result, once in the run's result log, waits for its database
/// transaction (what `runs` and `helmbench view` lag behind a running run).
pub const LOG_AGE: Duration = Duration::from_secs(2);

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
    /// Test hook: hold the run between its last result write and its
    /// bookkeeping, so a crash test can kill it exactly there.
    pub pause_before_finish: Option<Duration>,
    /// The longest a logged result waits for its database transaction
    /// ([`crate::run::LOG_AGE`]; a test hook sets it to 0).
    pub log_age: Duration,
    /// A resume asks blocked and refused test cases again (they are kept,
    /// not asked again, by default: the answer would be the same).
    pub retry_blocked: bool,
    /// A resume sends again the requests of Batch API batches whose
    /// submission is uncertain (`--resubmit-uncertain`; never by default).
    pub resubmit_uncertain: bool,
    /// `--join`: the resumed runs are joined (the team store), not claimed:
    /// their processes go on, and the work is shared in leases.
    pub join: bool,
    /// What the runs started together share.
    pub batch: Arc<BatchShared>,
}

/// USD spent, shared between tasks: nano-USD in an atomic (a cheap
/// model's reply costs well under a micro-dollar).
#[derive(Debug, Default)]
pub(super) struct SpendCounter(AtomicU64);

impl SpendCounter {
    pub(super) fn usd(&self) -> f64 {
        self.0.load(Ordering::Relaxed) as f64 / 1e9
    }

    pub(super) fn add(&self, usd: f64) {
        self.0
            .fetch_add((usd * 1e9).round().max(0.0) as u64, Ordering::Relaxed);
    }
}

/// What the attempts in flight reserved, and what paid attempts cost on
/// average (what an attempt is expected to cost); kept by budget.rs.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    pub(super) reserved: f64,
    pub(super) paid_attempts: u64,
    pub(super) paid_usd: f64,
}

/// What the runs of one batch (its models, run at once) share: one budget,
/// the stops that reach every model, the reply cache and the progress lines.
#[derive(Debug)]
pub struct BatchShared {
    /// `--max-cost`: for every model together, earlier processes included.
    pub max_cost: Option<f64>,
    /// Spent so far by the batch's runs (every process of them).
    pub(super) spend: SpendCounter,
    /// What requests in flight reserved, and the paid attempts' average
    /// (see budget.rs).
    pub(super) ledger: Mutex<Ledger>,
    /// Every run drops its requests in flight (the Batch API's 401; a
    /// synchronous run lets them finish, see `batch::stop_for`).
    pub(super) abort: CancellationToken,
    /// A 402 or the budget: every run stops sending, in-flight work ends.
    pub(super) stop: CancellationToken,
    reason: Mutex<Option<String>>,
    /// Held while a run of the batch is created, so ids follow model order.
    pub(super) opening: tokio::sync::Mutex<()>,
    pub(super) cache: tokio::sync::OnceCell<Option<Arc<super::cache::CacheFilter>>>,
    /// The progress lines (none unless the caller sets them up).
    pub progress: super::progress::Progress,
    /// Requests of every run that needed a retry, and how they ended.
    retried: Mutex<crate::openrouter::Retried>,
    /// Paid before any run existed (the structured-output probes): the
    /// first run of the batch keeps them as its discarded charges.
    preflight: Mutex<Vec<PreflightCharge>>,
    /// Results of every run that are in their run's log and wait in memory
    /// for their database transaction (see writer.rs: a writer commits
    /// when this passes its cap, so ten models hold no more than two).
    pub(super) waiting: std::sync::atomic::AtomicUsize,
    /// The runs' commits, taken together (writer.rs).
    pub(super) commits: Arc<super::commits::Commits>,
    /// The budget in the database, on the team store (budget.rs).
    pub(super) team: tokio::sync::OnceCell<super::team_budget::TeamBudget>,
    /// The store's code book, read once for the runs' tallies.
    pub(super) codes: tokio::sync::OnceCell<Arc<crate::domain::CodeBook>>,
    /// Each ended run's analysis as its writer took it ([`Tally`]), for
    /// the caller that keeps the analyses.
    tallies: Mutex<HashMap<i64, Tally>>,
}

/// A request the preflight paid for: a structured-output probe.
#[derive(Debug, Clone, PartialEq)]
pub struct PreflightCharge {
    /// The model or judge probed.
    pub model: String,
    /// What it cost; NaN when unknown.
    pub cost_usd: f64,
}

impl BatchShared {
    /// A batch with this budget and what its runs spent before.
    pub fn new(max_cost: Option<f64>, spent_before: f64) -> Self {
        let b = BatchShared {
            max_cost,
            spend: SpendCounter::default(),
            ledger: Mutex::default(),
            abort: CancellationToken::new(),
            stop: CancellationToken::new(),
            reason: Mutex::new(None),
            opening: tokio::sync::Mutex::new(()),
            cache: tokio::sync::OnceCell::new(),
            progress: super::progress::Progress::default(),
            retried: Mutex::default(),
            preflight: Mutex::default(),
            waiting: std::sync::atomic::AtomicUsize::new(0),
            commits: Arc::default(),
            team: tokio::sync::OnceCell::new(),
            codes: tokio::sync::OnceCell::new(),
            tallies: Mutex::default(),
        };
        b.add_spend(spent_before);
        b
    }

    /// Counts what the preflight paid against the budget; the first run
    /// to start keeps it (see [`BatchShared::take_preflight_charges`]).
    pub fn add_preflight_charges(&self, charges: Vec<PreflightCharge>) {
        for c in &charges {
            if c.cost_usd.is_finite() {
                self.add_spend(c.cost_usd);
            }
        }
        self.preflight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(charges);
    }

    /// The preflight's charges, for the run that records them (once).
    pub(super) fn take_preflight_charges(&self) -> Vec<PreflightCharge> {
        std::mem::take(&mut *self.preflight.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn spend(&self) -> f64 {
        self.spend.usd()
    }

    /// Run `run_id`'s analysis as its writer took it, if it kept one.
    pub fn take_tally(&self, run_id: i64) -> Option<Tally> {
        self.tallies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&run_id)
    }

    pub(super) fn put_tally(&self, run_id: i64, tally: Tally) {
        self.tallies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(run_id, tally);
    }

    pub(super) fn add_spend(&self, usd: f64) {
        self.spend.add(usd);
    }

    pub(super) fn add_retried(&self, r: crate::openrouter::Retried) {
        self.retried
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .add(r);
    }

    /// The requests of the batch's runs that needed a retry so far.
    pub fn retried(&self) -> crate::openrouter::Retried {
        *self.retried.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops every run of the batch (`abort`: drops requests in flight too)
    /// and says why; the first reason is kept.
    pub(super) fn stop_all(&self, reason: String, abort: bool) {
        let mut r = self.reason.lock().unwrap_or_else(|e| e.into_inner());
        if r.is_none() {
            *r = Some(reason);
        }
        drop(r);
        if abort {
            self.abort.cancel();
        }
        self.stop.cancel();
    }

    /// Why the batch was stopped, if it was.
    pub fn stop_reason(&self) -> Option<String> {
        self.reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
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
            pause_before_finish: None,
            log_age: LOG_AGE,
            retry_blocked: false,
            resubmit_uncertain: false,
            join: false,
            batch: Arc::new(BatchShared::new(None, 0.0)),
        }
    }
}

/// The most requests one run keeps in flight: past this a 2-core machine
/// spends its time switching tasks, and providers rate-limit long before.
pub const MAX_CONCURRENCY: usize = 1024;
