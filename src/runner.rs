//! Running test cases: the dry-run that composes and validates every prompt
//! without sending anything.

use std::collections::HashSet;
use std::fmt;

use serde::Serialize;

use crate::benchmark::Benchmark;
use crate::benchmark::compose;
use crate::discovery::{self, Selector};

/// What a dry-run composed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DryRunSummary {
    pub scenarios: usize,
    pub test_cases: usize,
    /// Judge calls a real run would make per model (one per rubric per test case).
    pub judge_calls: usize,
    pub unique_prompts: usize,
    pub prompt_bytes: u64,
    /// Rough prompt tokens (bytes / 4) per model.
    pub estimated_prompt_tokens: u64,
    pub models: Vec<String>,
    pub by_evaluation: std::collections::BTreeMap<String, usize>,
    /// Components of the selected scenarios that are only frontmatter: they
    /// run and add nothing to the prompt (not an error; authors should know).
    pub empty_components: usize,
}

impl fmt::Display for DryRunSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "scenarios: {}", self.scenarios)?;
        writeln!(
            f,
            "test cases: {} ({} unique prompts)",
            self.test_cases, self.unique_prompts
        )?;
        for (ty, n) in &self.by_evaluation {
            writeln!(f, "  {ty}: {n}")?;
        }
        writeln!(f, "judge calls: {}", self.judge_calls)?;
        if self.empty_components > 0 {
            writeln!(
                f,
                "empty components: {} (only frontmatter: they add nothing to the prompt, their severity still counts)",
                self.empty_components
            )?;
        }
        writeln!(
            f,
            "prompt size: {} bytes (~{} tokens per model)",
            self.prompt_bytes, self.estimated_prompt_tokens
        )?;
        if self.models.is_empty() {
            write!(f, "models: none configured")
        } else {
            write!(f, "models: {}", self.models.join(", "))
        }
    }
}

/// Composes every selected test case's prompt and checks it, sending nothing.
pub fn dry_run(
    benchmark: &Benchmark,
    selectors: &[Selector],
    include_no_context: bool,
) -> Result<DryRunSummary, String> {
    let cases = discovery::select(benchmark, selectors, include_no_context)?;
    let mut summary = DryRunSummary {
        models: benchmark
            .models
            .as_ref()
            .map(|m| m.models.iter().map(|e| e.id.clone()).collect())
            .unwrap_or_default(),
        ..Default::default()
    };
    let mut seen_scenarios = HashSet::new();
    let mut seen_prompts = HashSet::new();
    let mut prompt = String::new();
    for case in &cases {
        compose::compose_into(case, &mut prompt);
        summary.test_cases += 1;
        summary.prompt_bytes += prompt.len() as u64;
        if seen_scenarios.insert(case.scenario.code.as_str()) {
            summary.scenarios += 1;
            summary.empty_components += case.scenario.empty_components();
        }
        seen_prompts.insert(crate::benchmark::sha256(&[prompt.as_bytes()]));
        *summary
            .by_evaluation
            .entry(case.scenario.evaluation.type_name().to_string())
            .or_default() += 1;
        if case.scenario.evaluation.is_judged() {
            summary.judge_calls += case.scenario.rubrics.len();
        }
    }
    summary.unique_prompts = seen_prompts.len();
    summary.estimated_prompt_tokens = summary.prompt_bytes / 4;
    Ok(summary)
}

// ---------------------------------------------------------------------------
// Real runs
// ---------------------------------------------------------------------------

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::benchmark::{ModelEntry, sha256_hex};
use crate::discovery::CaseIndex;
use crate::judging::checks;
use crate::judging::judge;
use crate::judging::reply;
use crate::openrouter::{CallLog, ChatBody, Client, Completion, ProviderError};
use crate::store::{DiscardedCharge, NewJudgement, NewResult, SeedIds, Store, request_key};

/// How results reach the database: at most this many per transaction, and
/// at least this often. A SIGKILL or crash loses the replies of the last
/// interval (paid for, and paid again on resume): at real provider rates
/// (tens to hundreds a second) 25 ms is a handful of replies, where 250 ms
/// was dozens. Larger batches cost the writer less per result (each commit
/// rewrites the same index pages), which only matters at mock rates.
const WRITE_BATCH: usize = 256;
const WRITE_INTERVAL: Duration = Duration::from_millis(25);
/// Replies queued for the writer, at most: with the batch being written,
/// at most `WRITE_QUEUE + WRITE_BATCH` paid replies wait in memory, plus
/// one per request in flight. When the writer cannot keep up or cannot
/// write, workers wait (and send nothing) rather than pile up replies.
const WRITE_QUEUE: usize = 128;
/// How long one write waits for another program's lock before the writer
/// pauses sending and retries (every `WRITE_RETRY`) until `--write-wait-secs`.
const WRITE_BUSY: Duration = Duration::from_secs(1);
const WRITE_RETRY: Duration = Duration::from_millis(250);
/// Provider errors in a row (after retries) that stop a run: a spent key
/// limit or a model with no endpoints fails every request the same way, and
/// recording thousands of failures helps no one. The run stays resumable.
const MAX_CONSECUTIVE_PROVIDER_ERRORS: usize = 25;
/// Judge calls per criterion when the verdict cannot be read.
const JUDGE_ATTEMPTS: usize = 3;

/// Everything a run needs that does not change between runs.
pub struct RunContext {
    pub benchmark: Arc<Benchmark>,
    pub store: Store,
    pub ids: Arc<SeedIds>,
    pub client: Arc<Client>,
    pub validators: Arc<HashMap<String, jsonschema::Validator>>,
    pub quiet: bool,
}

impl RunContext {
    /// Seeds the database and compiles every scenario's schema once.
    pub async fn new(
        benchmark: Benchmark,
        store: Store,
        client: Client,
        quiet: bool,
    ) -> crate::Result<Self> {
        let ids = store.seed(&benchmark).await?;
        let mut validators = HashMap::new();
        for s in &benchmark.scenarios {
            if let Some(schema) = s.schema() {
                let v = jsonschema::validator_for(schema).map_err(|e| {
                    crate::Error::Tool(format!("{}: schema does not compile: {e}", s.code))
                })?;
                validators.insert(s.code.clone(), v);
            }
        }
        Ok(RunContext {
            benchmark: Arc::new(benchmark),
            store,
            ids: Arc::new(ids),
            client: Arc::new(client),
            validators: Arc::new(validators),
            quiet,
        })
    }
}

/// The settings a run is started with, stored with it and replayed by resume.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSettings {
    pub model: ModelEntry,
    pub judge_model: Option<String>,
    pub selectors: Vec<String>,
    pub include_no_context: bool,
    pub concurrency: usize,
    pub limit: Option<usize>,
    pub repeats: u32,
    pub no_cache: bool,
    pub max_cost: Option<f64>,
    pub tool_version: String,
    pub benchmark_hash: String,
}

/// How a run ended.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub run_id: i64,
    pub model: String,
    pub status: String,
    pub planned: usize,
    pub stored: usize,
    pub passed: usize,
    /// Stored results without a reply (retries spent): out of the score,
    /// sent again by `--resume`.
    pub provider_errors: usize,
    /// Stored results whose judge failed or gave no usable verdict: out of
    /// the score, judged again by `--resume`.
    pub judge_errors: usize,
    /// What the run spent (every process of it, discarded charges included).
    pub cost_usd: f64,
    pub max_cost_usd: Option<f64>,
    pub message: Option<String>,
    /// Set when the provider refused in a way that stops everything (401).
    #[serde(skip)]
    pub fatal: Option<String>,
}

/// The planned work of a run: every selected test case times its repeats.
pub fn plan(benchmark: &Benchmark, settings: &RunSettings) -> crate::Result<Vec<(CaseIndex, u32)>> {
    let selectors = settings
        .selectors
        .iter()
        .map(|s| Selector::parse(s).map_err(crate::Error::Usage))
        .collect::<crate::Result<Vec<_>>>()?;
    let mut cases = discovery::select_indices(benchmark, &selectors, settings.include_no_context)
        .map_err(crate::Error::Usage)?;
    if let Some(limit) = settings.limit {
        cases.truncate(limit);
    }
    let repeats = settings.repeats.max(1);
    // Sized up front: collecting a flat_map would double its way there and
    // hold both copies at the peak.
    let mut work = Vec::with_capacity(cases.len() * repeats as usize);
    for c in cases {
        work.extend((0..repeats).map(|r| (c, r)));
    }
    Ok(work)
}

/// What one worker produced for one test case.
enum Outcome {
    Stored(Box<NewResult>),
    /// 401/402: the run must stop; nothing is stored for this test case.
    Fatal(ProviderError),
    /// Cancelled before an answer arrived.
    Aborted,
}

/// What a worker hands the writer.
enum ToWrite {
    Result(Box<NewResult>),
    /// Charges of a request that left no result (a 402, an interruption).
    Charges(Vec<DiscardedCharge>),
}

/// Shared state between the workers, the collector and the caller.
struct Shared {
    next: AtomicUsize,
    provider_errors_in_a_row: AtomicUsize,
    /// Everything this run paid for, earlier processes included, in nano-USD
    /// (a cheap model's reply costs well under a micro-dollar).
    spend_nano: std::sync::atomic::AtomicU64,
    /// Set while results cannot be written: workers send nothing new.
    write_blocked: AtomicBool,
    stop_reason: Mutex<Option<(String, bool)>>, // (message, fatal)
}

impl Shared {
    fn spend(&self) -> f64 {
        self.spend_nano.load(Ordering::Relaxed) as f64 / 1e9
    }
    fn add_spend(&self, usd: f64) {
        self.spend_nano
            .fetch_add((usd * 1e9).round().max(0.0) as u64, Ordering::Relaxed);
    }
    fn set_stop(&self, msg: String, fatal: bool) {
        let mut s = self.stop_reason.lock().unwrap_or_else(|e| e.into_inner());
        if s.is_none() {
            *s = Some((msg, fatal));
        }
    }
}

/// A SIGINT/SIGTERM, shared by every run of a command: the first one stops
/// the runs (no new requests; those in flight get [`RunControl::grace`]).
#[derive(Debug, Clone, Default)]
pub struct Interrupt {
    token: CancellationToken,
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

/// Runs (or resumes) one evaluation run for one model.
///
/// The run stops cleanly (no new work, in-flight work finishes) on its
/// budget, the provider-error breaker, a 402, a database that stays
/// unwritable, or an interrupt; a 401 or the end of an interrupt's grace
/// period also drops the requests in flight.
pub async fn run_batch(
    ctx: &RunContext,
    settings: &RunSettings,
    resume: Option<i64>,
    kind: &str,
    control: &RunControl,
) -> crate::Result<RunSummary> {
    let b = &ctx.benchmark;
    let work = plan(b, settings)?;
    let planned = work.len();
    let settings_json = serde_json::to_value(settings)?;
    let run_id = match resume {
        Some(id) => {
            // Claimed first: provider errors are cleared only by the owner.
            ctx.store.claim_run(id, settings.max_cost).await?;
            let kept = ctx.store.write_pending(id).await?;
            if kept > 0 {
                tracing::info!(
                    run_id = id,
                    kept,
                    "results kept by an earlier process written"
                );
            }
            ctx.store.clear_provider_errors(id).await?;
            id
        }
        None => {
            ctx.store
                .create_run(
                    ctx.ids.benchmark_id,
                    &settings.model.id,
                    kind,
                    &settings_json,
                    planned as i64,
                    settings.max_cost,
                )
                .await?
        }
    };
    // What earlier processes of this run spent counts against its budget.
    let (spent_before, redo) = match resume {
        Some(id) => {
            let row = ctx.store.run(id).await?;
            (
                row.cost_usd + row.judge_cost_usd,
                ctx.store.judge_error_cases(id).await?,
            )
        }
        None => (0.0, HashSet::new()),
    };
    let done = ctx.store.stored_cases(run_id).await?;
    let todo: Vec<(CaseIndex, u32)> = if done.is_empty() {
        work
    } else {
        work.into_iter()
            .filter(|(c, r)| !done.contains(&(c.resolve(b).code(), i64::from(*r))))
            .collect()
    };
    let already_done = done.len();
    drop(done);
    tracing::info!(run_id, model = %settings.model.id, planned, todo = todo.len(), "run starting");

    // The bar draws on stderr; it is for a person watching a terminal.
    let progress =
        if ctx.quiet || !std::io::stdout().is_terminal() || !std::io::stderr().is_terminal() {
            ProgressBar::hidden()
        } else {
            let pb = ProgressBar::new(planned as u64);
            pb.set_style(
                ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {pos}/{len} {msg} {per_sec} eta {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            pb.set_prefix(format!("run {run_id} {}", settings.model.id));
            pb.set_position(already_done as u64);
            pb
        };

    let shared = Arc::new(Shared {
        next: AtomicUsize::new(0),
        provider_errors_in_a_row: AtomicUsize::new(0),
        spend_nano: Default::default(),
        write_blocked: AtomicBool::new(false),
        stop_reason: Mutex::new(None),
    });
    shared.add_spend(spent_before);
    // `abort` drops requests in flight; `stop` only ends new work.
    let abort = CancellationToken::new();
    let stop = abort.child_token();
    let grace_timer = {
        let (interrupt, stop, abort, grace) = (
            control.interrupt.token.clone(),
            stop.clone(),
            abort.clone(),
            control.grace,
        );
        tokio::spawn(async move {
            interrupt.cancelled().await;
            stop.cancel();
            tokio::time::sleep(grace).await;
            abort.cancel();
        })
    };
    let todo = Arc::new(todo);
    let redo = Arc::new(redo);
    let cache = if settings.no_cache {
        None
    } else {
        let (replies, judgements) = ctx.store.request_keys().await?;
        Some(Arc::new(CacheFilter {
            replies: RwLock::new(replies),
            judgements: RwLock::new(judgements),
        }))
    };
    let (tx, rx) = mpsc::channel::<ToWrite>(WRITE_QUEUE);
    let workers = settings.concurrency.clamp(1, 1024).min(todo.len().max(1));
    let mut handles = Vec::with_capacity(workers);
    for _ in 0..workers {
        let (todo, redo, shared, tx, stop, abort) = (
            todo.clone(),
            redo.clone(),
            shared.clone(),
            tx.clone(),
            stop.clone(),
            abort.clone(),
        );
        let worker = Worker {
            benchmark: ctx.benchmark.clone(),
            ids: ctx.ids.clone(),
            client: ctx.client.clone(),
            validators: ctx.validators.clone(),
            store: ctx.store.clone(),
            settings: settings.clone(),
            run_id,
            cache: cache.clone(),
        };
        handles.push(tokio::spawn(async move {
            loop {
                // Nothing new is sent while results cannot be written.
                while shared.write_blocked.load(Ordering::Relaxed) && !stop.is_cancelled() {
                    tokio::time::sleep(WRITE_RETRY / 4).await;
                }
                if stop.is_cancelled() {
                    break;
                }
                if let Some(max) = worker.settings.max_cost
                    && shared.spend() >= max
                {
                    shared.set_stop(
                        format!(
                            "budget reached: ${:.4} spent of the run's --max-cost ${max}",
                            shared.spend()
                        ),
                        false,
                    );
                    stop.cancel();
                    break;
                }
                let i = shared.next.fetch_add(1, Ordering::Relaxed);
                let Some(&(case, repeat)) = todo.get(i) else {
                    break;
                };
                let log = Arc::new(CallLog::default());
                let outcome = tokio::select! {
                    o = log.scope(worker.process(case, i64::from(repeat))) => o,
                    _ = abort.cancelled() => Outcome::Aborted,
                };
                let (charges, failed_calls) = worker.charges(&log, case, i64::from(repeat));
                shared.add_spend(charges.iter().map(|c| c.cost_usd).sum());
                match outcome {
                    Outcome::Stored(mut r) => {
                        shared.add_spend(
                            r.cost_usd + r.judgements.iter().map(|j| j.cost_usd).sum::<f64>(),
                        );
                        r.charges = charges;
                        r.replaces = redo.contains(&(r.test_code.clone(), r.repeat_index));
                        // A judge that fails at the provider counts like the model.
                        if r.error_kind.as_deref() == Some("provider") || failed_calls > 0 {
                            let n = shared.provider_errors_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
                            if n >= MAX_CONSECUTIVE_PROVIDER_ERRORS {
                                shared.set_stop(
                                    format!("{n} test cases in a row failed at the provider (last: {}); stopped", r.error.as_deref().unwrap_or("?")),
                                    false,
                                );
                                stop.cancel();
                            }
                        } else {
                            shared.provider_errors_in_a_row.store(0, Ordering::Relaxed);
                        }
                        if tx.send(ToWrite::Result(r)).await.is_err() {
                            break;
                        }
                    }
                    Outcome::Fatal(e) => {
                        let _ = tx.send(ToWrite::Charges(charges)).await;
                        let fatal = matches!(e, ProviderError::Unauthorized { .. });
                        shared.set_stop(e.to_string(), fatal);
                        if fatal {
                            abort.cancel();
                        } else {
                            stop.cancel();
                        }
                        break;
                    }
                    Outcome::Aborted => {
                        let _ = tx.send(ToWrite::Charges(charges)).await;
                        break;
                    }
                }
            }
        }));
    }
    drop(tx);

    // The heartbeat has its own task (and connection), so a writer waiting
    // on a lock never makes the run look abandoned.
    let heartbeat = {
        let (store, stop, shared) = (ctx.store.clone(), stop.clone(), shared.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(crate::store::HEARTBEAT_INTERVAL);
            tick.tick().await;
            loop {
                tick.tick().await;
                match store.heartbeat(run_id).await {
                    Ok(true) => {}
                    // Another process judged this one gone and took the
                    // run: stop sending, or both would pay.
                    Ok(false) => {
                        shared.set_stop(
                            format!("another helmbench took over run {run_id}; stopped sending"),
                            false,
                        );
                        stop.cancel();
                    }
                    Err(e) => tracing::warn!(error = %e, "heartbeat not written"),
                }
            }
        })
    };

    // The collector: the only writer of results, on its own connection.
    let writer = Collector {
        store: ctx.store.with_busy_timeout(WRITE_BUSY).await?,
        run_id,
        write_wait: control.write_wait,
        stop: stop.clone(),
        cache: cache.clone(),
        progress: progress.clone(),
        shared: shared.clone(),
        batch: Vec::with_capacity(WRITE_BATCH),
        loose: Vec::new(),
        stored: 0,
        blocked_since: None,
        retry_at: None,
    };
    let collector = tokio::spawn(writer.run(rx));
    let unwritten = match collector.await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    for h in handles {
        let _ = h.await;
    }
    heartbeat.abort();
    grace_timer.abort();
    progress.finish_and_clear();

    let stop_reason = shared
        .stop_reason
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if let Some(unwritten) = unwritten {
        // The database could not be written: say so, and try to mark the run
        // on the writer's short timeout (if that fails too, the run shows
        // as interrupted once this process is gone).
        let mut msg = stop_reason
            .map(|(m, _)| m)
            .unwrap_or_else(|| "results could not be written".into());
        msg.push_str(&format!("; {unwritten}"));
        let store = ctx.store.with_busy_timeout(WRITE_BUSY).await?;
        if let Err(e) = store.finish_run(run_id, "interrupted", Some(&msg)).await {
            tracing::warn!(error = %e, "run not marked interrupted");
        }
        return Ok(RunSummary {
            run_id,
            model: settings.model.id.clone(),
            status: "interrupted".into(),
            planned,
            stored: already_done + unwritten.written,
            passed: 0,
            provider_errors: 0,
            judge_errors: 0,
            cost_usd: shared.spend(),
            max_cost_usd: settings.max_cost,
            message: Some(msg),
            fatal: None,
        });
    }

    // Fault injection for the crash tests: holds the run between its last
    // result write and its bookkeeping, so a test can SIGKILL it exactly there.
    if let Some(ms) = std::env::var("HELMBENCH_TEST_PAUSE_BEFORE_FINISH_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let all_done = ctx.store.count_results(run_id).await? >= planned as i64;
    let (status, message, fatal) = match (&stop_reason, control.interrupt.signal()) {
        (Some((msg, fatal)), _) => ("interrupted", Some(msg.clone()), fatal.then(|| msg.clone())),
        (None, Some(signal)) => ("interrupted", Some(format!("cancelled by {signal}")), None),
        (None, None) if all_done => ("completed", None, None),
        (None, None) => (
            "interrupted",
            Some("not every test case finished".to_string()),
            None,
        ),
    };
    ctx.store
        .finish_run(run_id, status, message.as_deref())
        .await?;
    let row = ctx.store.run(run_id).await?;
    Ok(RunSummary {
        run_id,
        model: settings.model.id.clone(),
        status: status.to_string(),
        planned,
        stored: row.test_cases as usize,
        passed: row.passed as usize,
        provider_errors: row.provider_errors as usize,
        judge_errors: row.judge_errors as usize,
        cost_usd: row.cost_usd + row.judge_cost_usd,
        max_cost_usd: row.max_cost_usd,
        message,
        fatal,
    })
}

/// What the writer could not write: how many results and where they are.
#[derive(Debug)]
struct Unwritten {
    written: usize,
    results: usize,
    kept_in: Result<std::path::PathBuf, String>,
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
struct Collector {
    store: Store,
    run_id: i64,
    write_wait: Duration,
    stop: CancellationToken,
    cache: Option<Arc<CacheFilter>>,
    progress: ProgressBar,
    shared: Arc<Shared>,
    batch: Vec<NewResult>,
    loose: Vec<DiscardedCharge>,
    stored: usize,
    blocked_since: Option<tokio::time::Instant>,
    /// While blocked, the next write is tried at this time, not every tick.
    retry_at: Option<tokio::time::Instant>,
}

impl Collector {
    /// Writes until every worker is done; `Some` when results could not
    /// all be written.
    async fn run(mut self, mut rx: mpsc::Receiver<ToWrite>) -> Option<Unwritten> {
        let mut inbox = Vec::with_capacity(WRITE_QUEUE);
        let (mut passed_so_far, mut seen) = (0usize, 0usize);
        let mut tick = tokio::time::interval(WRITE_INTERVAL);
        loop {
            tokio::select! {
                // Taken only while the batch has room, so at most
                // WRITE_BATCH + WRITE_QUEUE replies wait (more only while
                // blocked, from requests that were already in flight).
                n = rx.recv_many(&mut inbox, WRITE_BATCH.saturating_sub(self.batch.len()).clamp(1, WRITE_QUEUE)) => {
                    if n == 0 {
                        break;
                    }
                    for item in inbox.drain(..) {
                        match item {
                            ToWrite::Result(r) => {
                                seen += 1;
                                passed_so_far += usize::from(r.passed);
                                self.batch.push(*r);
                            }
                            ToWrite::Charges(c) => self.loose.extend(c),
                        }
                    }
                    self.progress.inc(n as u64);
                    if !self.progress.is_hidden() && seen > 0 {
                        self.progress.set_message(format!("pass {:.0}% ${:.4}", 100.0 * passed_so_far as f64 / seen as f64, self.shared.spend()));
                    }
                    if self.batch.len() >= WRITE_BATCH && self.blocked_since.is_none() {
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

    async fn flush(&mut self) {
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
                        false,
                    );
                    self.stop.cancel();
                }
                self.retry_at = Some(tokio::time::Instant::now() + WRITE_RETRY);
            }
        }
    }
}

/// Which requests may have a reusable answer in the database: the keys of
/// every stored request hash, loaded when the run starts and extended as
/// its results are written. A request whose key is absent (nearly every
/// request of a new run) needs no cache query at all.
struct CacheFilter {
    replies: RwLock<HashSet<u64>>,
    judgements: RwLock<HashSet<u64>>,
}

impl CacheFilter {
    fn may_have_reply(&self, request_hash: &str) -> bool {
        let key = request_key(request_hash);
        self.replies
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&key)
    }

    fn may_have_judgement(&self, request_hash: &str) -> bool {
        let key = request_key(request_hash);
        self.judgements
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&key)
    }

    /// Adds the request hashes of results just written.
    fn note(&self, written: &[NewResult]) {
        self.replies
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .extend(written.iter().map(|r| request_key(&r.request_hash)));
        let mut judgements = self.judgements.write().unwrap_or_else(|e| e.into_inner());
        for r in written {
            judgements.extend(
                r.judgements
                    .iter()
                    .filter_map(|j| j.request_hash.as_deref().map(request_key)),
            );
        }
    }
}

impl Worker {
    /// The discarded charges a test case's requests noted in `log`, and how
    /// many of its requests failed at the provider after their retries.
    fn charges(&self, log: &CallLog, case: CaseIndex, repeat: i64) -> (Vec<DiscardedCharge>, u32) {
        let notes = log.take();
        if notes.is_empty() {
            return (Vec::new(), 0);
        }
        let c = case.resolve(&self.benchmark);
        let failures = notes.iter().map(|(_, n)| n.failures).sum();
        let charges = notes
            .into_iter()
            .filter(|(_, n)| n.discarded_cost_usd > 0.0)
            .map(|(model, n)| DiscardedCharge {
                run_id: self.run_id,
                scenario_id: self.ids.scenarios.get(&c.scenario.code).copied(),
                test_code: c.code(),
                repeat_index: repeat,
                call: if model == self.settings.model.id {
                    "model"
                } else {
                    "judge"
                }
                .into(),
                attempts: i64::from(n.discarded_attempts),
                cost_usd: n.discarded_cost_usd,
                reason: Some("charged replies that were retried or refused".into()),
            })
            .collect();
        (charges, failures)
    }
}

/// One worker's view of the run.
struct Worker {
    benchmark: Arc<Benchmark>,
    ids: Arc<SeedIds>,
    client: Arc<Client>,
    validators: Arc<HashMap<String, jsonschema::Validator>>,
    store: Store,
    settings: RunSettings,
    run_id: i64,
    /// None with `--no-cache`.
    cache: Option<Arc<CacheFilter>>,
}

impl Worker {
    async fn process(&self, idx: CaseIndex, repeat: i64) -> Outcome {
        let case = idx.resolve(&self.benchmark);
        let s = case.scenario;
        let prompt = compose::compose(&case);
        let prompt_hash = sha256_hex(&[prompt.as_bytes()]);
        let m = &self.settings.model;
        // The body is serialised once: hashed here, sent as is.
        let body = ChatBody {
            model: &m.id,
            prompt: &prompt,
            response_format: s.response_format.as_ref(),
            temperature: m.temperature,
            seed: m.seed,
            max_tokens: m.max_tokens,
        }
        .to_json();
        // Repeats must not reuse each other's replies.
        let request_hash = sha256_hex(&[body.as_bytes(), &repeat.to_le_bytes()]);
        let base = case.base_severity();
        let mut r = NewResult {
            run_id: self.run_id,
            test_code: case.code(),
            repeat_index: repeat,
            scenario_id: self.ids.scenarios[&s.code],
            condition_id: self.ids.conditions[&case.condition.full_code],
            user_context_id: case
                .user_context
                .map(|u| self.ids.user_contexts[&u.full_code]),
            perturbation_id: self.ids.perturbations[&case.perturbation.full_code],
            prompt_hash,
            request_hash: request_hash.clone(),
            base_severity: base,
            difficulty: case.condition.difficulty,
            attempts: 0,
            evaluation_details: json!({}),
            ..Default::default()
        };

        let cached = match &self.cache {
            Some(f) if f.may_have_reply(&request_hash) => {
                self.store.cached_reply(&request_hash).await.ok().flatten()
            }
            _ => None,
        };
        let completion = match cached {
            Some(c) => Completion {
                generation_id: c.generation_id,
                content: c.response,
                finish_reason: c.finish_reason,
                provider: None,
                prompt_tokens: 0,
                completion_tokens: 0,
                cost_usd: 0.0,
                upstream_cost_usd: None,
                attempts: 0,
                latency_ms: 0,
            },
            None => match self.client.chat_json(&m.id, body).await {
                Ok(c) => c,
                Err(e) if e.is_fatal_for_run() => return Outcome::Fatal(e),
                Err(e) => {
                    r.prompt = prompt;
                    r.passed = false;
                    r.error_kind = Some("provider".into());
                    r.error = Some(e.to_string());
                    return Outcome::Stored(Box::new(r));
                }
            },
        };
        r.cached = completion.attempts == 0;
        r.response = Some(completion.content.clone());
        r.finish_reason = completion.finish_reason.clone();
        r.generation_id = completion.generation_id.clone();
        r.prompt_tokens = completion.prompt_tokens;
        r.completion_tokens = completion.completion_tokens;
        r.cost_usd = completion.cost_usd;
        r.upstream_cost_usd = completion.upstream_cost_usd;
        r.latency_ms = Some(completion.latency_ms as i64);
        r.attempts = i64::from(completion.attempts);

        // Parse and validate a structured reply; a free-text reply is taken as is.
        let parsed = match self.validators.get(&s.code) {
            Some(v) => reply::parse_reply(
                &completion.content,
                completion.finish_reason.as_deref(),
                Some(v),
            )
            .map(Some),
            None => Ok(None),
        };
        let parsed = match parsed {
            Ok(p) => p,
            Err(e) => {
                r.passed = false;
                r.error_kind = Some("format".into());
                r.error = Some(e.0);
                r.prompt = prompt;
                return Outcome::Stored(Box::new(r));
            }
        };
        let text = reply::reply_text(&completion.content, parsed.as_ref()).to_string();
        r.parsed = parsed;
        r.quality = serde_json::to_value(crate::scoring::quality::score(&text)).ok();

        if let Some(check) = r
            .parsed
            .as_ref()
            .and_then(|p| checks::check(&case.evaluation(), p))
        {
            // The verdict is the check as written, never inverted (SPEC §4).
            r.matched = Some(check.matched);
            r.evaluation_details = check.details;
            if let Some(problem) = check.problem {
                r.passed = false;
                r.error_kind = Some("format".into());
                r.error = Some(problem);
            } else {
                r.passed = check.matched;
            }
        } else if s.evaluation.is_judged() {
            let judge_model = self.settings.judge_model.clone().unwrap_or_default();
            let mut all_passed = true;
            let mut judge_error = None;
            for rubric in &s.rubrics {
                let jreq = judge::request(&judge_model, rubric, &prompt, &text);
                let jbody = jreq.body_json();
                let jhash = sha256_hex(&[jbody.as_bytes(), &repeat.to_le_bytes()]);
                let cached = match &self.cache {
                    Some(f) if f.may_have_judgement(&jhash) => {
                        self.store.cached_judgement(&jhash).await.ok().flatten()
                    }
                    _ => None,
                };
                let mut j = NewJudgement {
                    criterion: rubric.code.clone(),
                    judge_model: judge_model.clone(),
                    request_hash: Some(jhash),
                    ..Default::default()
                };
                // An unusable verdict is asked for again, a bounded number of times.
                let mut parsed_verdict = None;
                let mut cached = cached;
                for _ in 0..JUDGE_ATTEMPTS {
                    let content = match cached.take() {
                        Some(c) => {
                            j.cached = true;
                            c
                        }
                        None => match self.client.chat_json(&jreq.model, jbody.clone()).await {
                            Ok(c) => {
                                j.cached = false;
                                j.prompt_tokens += c.prompt_tokens;
                                j.completion_tokens += c.completion_tokens;
                                j.cost_usd += c.cost_usd;
                                j.generation_id = c.generation_id;
                                c.content
                            }
                            Err(e) if e.is_fatal_for_run() => return Outcome::Fatal(e),
                            Err(e) => {
                                parsed_verdict = Some(Err(e.to_string()));
                                break;
                            }
                        },
                    };
                    let v = judge::parse(rubric, &content);
                    j.response = Some(content);
                    let usable = v.is_ok();
                    parsed_verdict = Some(v);
                    if usable {
                        break;
                    }
                }
                match parsed_verdict.unwrap_or_else(|| Err("no judge answer".into())) {
                    Ok(v) => {
                        all_passed &= v.passed;
                        j.passed = Some(v.passed);
                        j.verdict = Some(v.value);
                        j.justification = v.justification;
                    }
                    Err(e) => {
                        j.response = None; // never reuse an unusable answer
                        j.error = Some(e.clone());
                        judge_error.get_or_insert_with(|| format!("{}: {e}", rubric.code));
                        all_passed = false;
                    }
                }
                r.judgements.push(j);
            }
            r.matched = Some(all_passed);
            r.passed = all_passed && judge_error.is_none();
            r.evaluation_details = json!({"criteria": r.judgements.iter().map(|j| json!({"criterion": j.criterion, "verdict": j.verdict, "passed": j.passed, "justification": j.justification, "error": j.error})).collect::<Vec<_>>()});
            if let Some(e) = judge_error {
                r.error_kind = Some("judge".into());
                r.error = Some(e);
            }
        }
        r.prompt = prompt;
        Outcome::Stored(Box::new(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_repeats_each_test_case_in_order_and_holds_no_spare_capacity() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benchmark");
        let b = crate::content::load_strict(&root).unwrap();
        let settings = RunSettings {
            model: crate::benchmark::ModelEntry {
                id: "m".into(),
                temperature: None,
                seed: None,
                max_tokens: None,
            },
            judge_model: None,
            selectors: vec!["P1-B1-S1".into()],
            include_no_context: true,
            concurrency: 1,
            limit: Some(5),
            repeats: 3,
            no_cache: false,
            max_cost: None,
            tool_version: String::new(),
            benchmark_hash: String::new(),
        };
        let work = plan(&b, &settings).unwrap();
        let cases =
            discovery::select_indices(&b, &[Selector::parse("P1-B1-S1").unwrap()], true).unwrap();
        let expected: Vec<(CaseIndex, u32)> = cases[..5]
            .iter()
            .flat_map(|&c| (0..3).map(move |r| (c, r)))
            .collect();
        assert_eq!(work, expected);
        // A run keeps this list for its whole length: no doubling slack.
        assert_eq!(work.capacity(), work.len());
        assert!(std::mem::size_of::<(CaseIndex, u32)>() <= 24);
    }
}
