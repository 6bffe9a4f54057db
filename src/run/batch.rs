//! One evaluation run for one model: plan, claim, spawn the workers, the
//! writer, the heartbeat and the progress bar, and finish the run.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};

use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::cache::CacheFilter;
use super::complete;
use super::lease::Work;
use super::log::{self, ResultLog};
use super::shared::Shared;
use crate::benchmark::Benchmark;
use crate::benchmark::cases::CaseIndex;
use crate::domain::{ErrorKind, NewResult, RunStatus, SeedIds};
use crate::openrouter::{CallLog, Client, FailureClass, ProviderError};
use crate::run::RunControl;
use crate::run::RunSettings;
use crate::run::plan;
use crate::run::worker::Worker;
use crate::run::worker::{Asked, Judged, Outcome};
use crate::run::writer::Collector;
use crate::run::writer::LOG_BATCH;
use crate::run::writer::ToWrite;
use crate::run::writer::WRITE_BATCH;
use crate::run::writer::WRITE_BUSY;
use crate::run::writer::WRITE_RETRY;
use crate::store::Store;

/// Provider errors in a row (after retries) that stop a run: a spent key
/// limit or a model with no endpoints fails every request the same way, and
/// recording thousands of failures helps no one. The run stays resumable.
pub(super) const MAX_CONSECUTIVE_PROVIDER_ERRORS: usize = 25;

/// How long a run that could not write its results still tries to mark
/// itself interrupted before the command exits.
const MARK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

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
                    crate::Error::tool_caused_by(
                        format!("{}: schema does not compile: {e}", s.code),
                        e,
                    )
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

/// How a run ended.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub run_id: i64,
    pub model: String,
    pub status: RunStatus,
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
    /// Calls whose cost nobody knows, left out of `cost_usd` (so it is a
    /// floor): an OpenAI-compatible model without a price, a reply cut at
    /// the size limit, an attempt abandoned on a timeout.
    pub unknown_cost_calls: i64,
    pub max_cost_usd: Option<f64>,
    pub message: Option<String>,
    /// Set when the provider refused in a way that stops everything (401).
    #[serde(skip)]
    pub fatal: Option<Arc<ProviderError>>,
}

/// Runs (or resumes) one evaluation run for one model; the runs of a batch
/// run at once, sharing `control.batch`.
///
/// The run stops cleanly (no new work, in-flight work finishes) on the
/// batch's budget, its provider-error breaker, a database that stays
/// unwritable, an interrupt, or a 401 or 402 (which stop every run of the
/// batch); only the end of an interrupt's grace period drops the requests
/// in flight.
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
    if let Some(id) = resume
        && !control.join
        && let Some(row) =
            complete::resume_has_nothing_to_do(&ctx.store, id, planned, control.retry_blocked)
                .await?
    {
        return Ok(nothing_to_do(settings, planned, row));
    }
    // Runs of a batch are created one at a time, in the order they were
    // started (the lock is fair and taken before the first await), so run
    // ids follow the order of the models.
    let opening = control.batch.opening.lock().await;
    let leased = ctx.store.is_team_store();
    let (run_id, spent_before, redo) = open_run(
        ctx,
        settings,
        resume,
        kind,
        planned,
        control.retry_blocked,
        Lease {
            join: control.join,
            leased,
        },
    )
    .await?;
    drop(opening);
    // On the team store the batch's budget is kept in the database, one
    // for every process of it.
    control
        .batch
        .open_team_budget_for(&ctx.store, settings, run_id, !control.join)
        .await?;
    // On the team store the run's cases are taken in leases as they are
    // needed (lease.rs), so other processes may share the run.
    let (work, already_done) = if leased {
        let done = ctx.store.stored_cases(run_id).await?.len();
        let w = Work::leased(ctx.store.clone(), run_id, ctx.benchmark.clone(), work);
        (w, done)
    } else {
        let (todo, done) = remaining(ctx, run_id, work).await?;
        (Work::listed(todo, redo), done)
    };
    let todo_len = planned.saturating_sub(already_done);
    tracing::info!(run_id, model = %settings.model.id, planned, todo = todo_len, leased, "run starting");

    let progress = control
        .batch
        .progress
        .add(run_id, &settings.model.id, planned, already_done);
    // The CLI sets each model's limit for the batch; a run started
    // otherwise gets `--concurrency`, adapting to 429s.
    ctx.client
        .limit_model(&settings.model.id, settings.concurrency.get(), true);

    // `abort` drops requests in flight (an interruption past its grace);
    // `stop` only ends new work: a 401, a 402 or the budget in any run of
    // the batch stops them all, and what is in flight is paid and kept.
    let abort = control.batch.abort.child_token();
    let stop = abort.child_token();
    let shared = Arc::new(Shared {
        batch: control.batch.clone(),
        provider_errors_in_a_row: AtomicUsize::new(0),
        spend: Default::default(),
        unknown_charges: Default::default(),
        write_blocked: AtomicBool::new(false),
        stop_reason: Mutex::new(None),
        stop: stop.clone(),
    });
    // The run's own spend; the batch's counts every run of it (the caller
    // set it up with what they spent before).
    shared.spend.add(spent_before);
    let grace_timer = {
        let (interrupt, batch_stop, stop, abort, grace) = (
            control.interrupt.token.clone(),
            control.batch.stop.clone(),
            stop.clone(),
            abort.clone(),
            control.grace,
        );
        tokio::spawn(async move {
            tokio::select! {
                _ = interrupt.cancelled() => {
                    stop.cancel();
                    tokio::time::sleep(grace).await;
                    abort.cancel();
                }
                _ = batch_stop.cancelled() => stop.cancel(),
            }
        })
    };
    let work = Arc::new(work);
    // One cache filter for the batch, read once.
    let cache = control
        .batch
        .cache
        .get_or_try_init(|| async {
            if settings.no_cache {
                return Ok::<_, crate::Error>(None);
            }
            let (replies, judgements) = ctx.store.request_keys().await?;
            Ok(Some(Arc::new(CacheFilter {
                replies: RwLock::new(replies),
                judgements: RwLock::new(judgements),
            })))
        })
        .await?
        .clone();
    // The model's limit bounds its requests in flight (in the client), so
    // there can be more workers than slots: a worker waiting on the judge
    // does not keep the model's slot idle.
    let per_slot = if settings.judge_model.is_some() { 2 } else { 1 };
    let workers = (settings.concurrency.get() * per_slot).min(todo_len.max(1));
    // Each worker hands over one result and waits until it is stored, so
    // the queue never holds more than one per worker.
    let (tx, rx) = mpsc::channel::<ToWrite>(workers);
    // The batch's structured-output probes, paid before any run existed,
    // are kept by its first run (their spend is in the batch's already).
    let probes: Vec<crate::domain::DiscardedCharge> = control
        .batch
        .take_preflight_charges()
        .into_iter()
        .map(|p| {
            let unknown = p.cost_usd.is_nan();
            let usd = if unknown { 0.0 } else { p.cost_usd };
            shared.spend.add(usd);
            crate::domain::DiscardedCharge {
                run_id,
                scenario_id: None,
                test_code: String::new(),
                repeat_index: 0,
                call: if p.model == settings.model.id {
                    "model"
                } else {
                    "judge"
                }
                .into(),
                attempts: 1,
                cost_usd: usd,
                unknown_attempts: i64::from(unknown),
                reason: Some(format!(
                    "the structured-output probe of `{}` before the run",
                    p.model
                )),
            }
        })
        .collect();
    if !probes.is_empty() {
        // The channel holds at least one message: this never waits.
        let _ = tx.send(ToWrite::Charges(probes)).await;
    }
    // The model's part of a test case (budget check to reply) holds one of
    // these, so the budget is checked with every earlier reply counted.
    let model_phase = Arc::new(tokio::sync::Semaphore::new(settings.concurrency.get()));
    let tails = Arc::new(super::worker::Tails::new(ctx.benchmark.scenarios.len()));
    let mut handles = Vec::with_capacity(workers);
    for _ in 0..workers {
        let (work, shared, tx, stop, abort, model_phase) = (
            work.clone(),
            shared.clone(),
            tx.clone(),
            stop.clone(),
            abort.clone(),
            model_phase.clone(),
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
            tails: tails.clone(),
        };
        handles.push(tokio::spawn(
            Lane {
                worker,
                work,
                shared,
                tx,
                stop,
                abort,
                model_phase,
            }
            .run(),
        ));
    }
    drop(tx);

    let heartbeat = if work.is_leased() {
        tokio::spawn(lease_heartbeat(work.clone()))
    } else {
        tokio::spawn(heartbeat(
            ctx.store.clone(),
            run_id,
            stop.clone(),
            shared.clone(),
        ))
    };

    // The run's analysis, taken as its results are written (report::Tally):
    // a run that one process writes into a SQLite file from its start. Any
    // other (a team store's run, shared through leases; a resumed one) is
    // read back when its analysis is kept.
    let tally = if leased || already_done > 0 || crate::store::Store::is_team_url(ctx.store.url()) {
        None
    } else {
        let codes = control
            .batch
            .codes
            .get_or_try_init(|| async { ctx.store.code_book().await.map(Arc::new) })
            .await?;
        Some(crate::report::Tally::new(
            codes.clone(),
            settings.blocked_as,
        ))
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
        // As large as the run's first transaction will be (up to a log
        // batch): growing it by doubling copied every result held so far,
        // each time (issue 45). Pages are only taken as results fill it.
        batch: Vec::with_capacity(todo_len.clamp(WRITE_BATCH, LOG_BATCH)),
        acks: Vec::with_capacity(WRITE_BATCH),
        loose: Vec::new(),
        stored: 0,
        blocked_since: None,
        retry_at: None,
        log: open_log(&ctx.store, run_id).await?,
        log_age: control.log_age,
        waiting: 0,
        oldest: None,
        in_flight: None,
        tally,
    };
    let collector = tokio::spawn(writer.run(rx));
    let (unwritten, tally) = match collector.await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    if let Some(t) = tally {
        control.batch.put_tally(run_id, t);
    }
    for h in handles {
        let _ = h.await;
    }
    heartbeat.abort();
    grace_timer.abort();
    control.batch.flush_team_budget().await;
    // This process's final counts, for `runs`.
    if let Some((sent, stored)) = work.counts()
        && let Err(e) = ctx.store.host_heartbeat(run_id, sent, stored).await
    {
        tracing::warn!(error = %e, "last heartbeat not written");
    }
    progress.set_spend(shared.spend());
    progress.finish();
    finish(
        ctx,
        settings,
        control,
        run_id,
        planned,
        already_done,
        &shared,
        unwritten,
        work.is_leased(),
    )
    .await
}

/// Marks the run as it ended (completed, or interrupted and why) and sums
/// it up; `unwritten` is what the writer could not store.
#[allow(clippy::too_many_arguments)]
async fn finish(
    ctx: &RunContext,
    settings: &RunSettings,
    control: &RunControl,
    run_id: i64,
    planned: usize,
    already_done: usize,
    shared: &Shared,
    unwritten: Option<super::writer::Unwritten>,
    leased: bool,
) -> crate::Result<RunSummary> {
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
        // Tried for a few seconds more: a lock that outlasted the wait
        // may end meanwhile, and the stored status should not stay
        // `running` (`runs` shows it interrupted either way).
        let store = ctx.store.with_busy_timeout(WRITE_BUSY).await?;
        let until = tokio::time::Instant::now() + MARK_WAIT;
        let mark = || async {
            if leased {
                store
                    .leave_run(run_id, RunStatus::Interrupted, Some(&msg))
                    .await
                    .map(|_| ())
            } else {
                store
                    .finish_run(run_id, RunStatus::Interrupted, Some(&msg))
                    .await
            }
        };
        while let Err(e) = mark().await {
            if tokio::time::Instant::now() >= until {
                tracing::warn!(error = %e, "run not marked interrupted in the database (`runs` shows it interrupted; --resume marks it)");
                break;
            }
            tokio::time::sleep(WRITE_RETRY).await;
        }
        return Ok(RunSummary {
            run_id,
            model: settings.model.id.clone(),
            status: RunStatus::Interrupted,
            planned,
            stored: already_done + unwritten.written,
            passed: 0,
            provider_errors: 0,
            judge_errors: 0,
            cost_usd: shared.spend(),
            unknown_cost_calls: shared.unknown_charges(),
            max_cost_usd: settings.max_cost,
            message: Some(msg),
            fatal: None,
        });
    }

    if let Some(pause) = control.pause_before_finish {
        tokio::time::sleep(pause).await;
    }
    // One row per run, test code and repeat: as many rows as planned is
    // every planned test case, whichever process stored it.
    let all_done = ctx.store.count_results(run_id).await? >= planned as i64;
    // A run stopped because another run of the batch was.
    let stop_reason = stop_reason.or_else(|| {
        control
            .batch
            .stop_reason()
            .map(|r| (format!("stopped with the batch: {r}"), None))
    });
    let (status, message, fatal) = match (&stop_reason, control.interrupt.signal()) {
        (Some((msg, fatal)), _) => (RunStatus::Interrupted, Some(msg.clone()), fatal.clone()),
        (None, Some(signal)) => (
            RunStatus::Interrupted,
            Some(format!("cancelled by {signal}")),
            None,
        ),
        (None, None) if all_done => (RunStatus::Completed, None, None),
        (None, None) => (
            RunStatus::Interrupted,
            Some("not every test case finished".to_string()),
            None,
        ),
    };
    if leased {
        let (status, message) = super::lease::leave(&ctx.store, run_id, status, message).await?;
        return summary(ctx, settings, run_id, planned, status, message, fatal).await;
    }
    record_end(ctx, settings, run_id, planned, status, message, fatal).await
}

/// Records how the run ended and reads back its summary (the synchronous
/// run and the Batch API's end the same way).
pub(super) async fn record_end(
    ctx: &RunContext,
    settings: &RunSettings,
    run_id: i64,
    planned: usize,
    status: RunStatus,
    message: Option<String>,
    fatal: Option<Arc<ProviderError>>,
) -> crate::Result<RunSummary> {
    ctx.store
        .finish_run(run_id, status, message.as_deref())
        .await?;
    summary(ctx, settings, run_id, planned, status, message, fatal).await
}

/// The summary of a run as it ended here (`status`, `message`), with its
/// counts and spend as stored (every process of it).
async fn summary(
    ctx: &RunContext,
    settings: &RunSettings,
    run_id: i64,
    planned: usize,
    status: RunStatus,
    message: Option<String>,
    fatal: Option<Arc<ProviderError>>,
) -> crate::Result<RunSummary> {
    let row = ctx.store.run(run_id).await?;
    // Paid turns of conversations a stop left unfinished are spent too.
    let unfinished: f64 = ctx
        .store
        .unfinished_turns(Some(run_id))
        .await?
        .iter()
        .map(|u| u.cost_usd)
        .sum();
    Ok(RunSummary {
        run_id,
        model: settings.model.id.clone(),
        status,
        planned,
        stored: row.test_cases as usize,
        passed: row.passed as usize,
        provider_errors: row.provider_errors as usize,
        judge_errors: row.judge_errors as usize,
        cost_usd: row.cost_usd + row.judge_cost_usd + unfinished,
        unknown_cost_calls: row.unknown_cost_calls,
        max_cost_usd: row.max_cost_usd,
        message,
        fatal,
    })
}

/// One worker's loop over the run's test cases: take the model's phase,
/// check the budget, ask, hand the reply to the judge outside the phase, and
/// send the result to the writer; the breaker and the batch's stops are
/// applied here.
struct Lane {
    worker: Worker,
    work: Arc<Work>,
    shared: Arc<Shared>,
    tx: mpsc::Sender<ToWrite>,
    stop: CancellationToken,
    abort: CancellationToken,
    model_phase: Arc<tokio::sync::Semaphore>,
}

impl Lane {
    async fn run(self) {
        let Lane {
            worker,
            work,
            shared,
            tx,
            stop,
            abort,
            model_phase,
        } = self;
        loop {
            if stop.is_cancelled() {
                break;
            }
            // A free slot is taken at once: waiting on the run's stop token
            // registers with it and unregisters after, under its lock, which
            // 64 workers contend for (issue 45).
            let phase = match model_phase.clone().try_acquire_owned() {
                Ok(p) => p,
                Err(_) => tokio::select! {
                    p = model_phase.clone().acquire_owned() => p.expect("never closed"),
                    _ = stop.cancelled() => break,
                },
            };
            // Nothing new is sent while results cannot be written.
            while shared.write_blocked.load(Ordering::Relaxed) && !stop.is_cancelled() {
                tokio::time::sleep(WRITE_RETRY / 4).await;
            }
            if stop.is_cancelled() {
                break;
            }
            // Spent and reserved by the requests in flight (budget.rs).
            if let Some(msg) = shared.batch.budget_reached() {
                shared.set_stop(msg.clone(), None);
                shared.batch.stop_all(msg, false);
                break;
            }
            let item = match work.next(&worker.benchmark, &stop).await {
                Ok(Some(item)) => item,
                Ok(None) => break,
                Err(e) => {
                    shared.set_stop(format!("no test case could be leased: {e}"), None);
                    stop.cancel();
                    break;
                }
            };
            let (case, repeat) = (item.case, item.repeat);
            // Every attempt of this test case asks the budget first.
            let log = Arc::new(CallLog::gated(shared.clone()));
            let asked = tokio::select! {
                // Boxed: the lane's own future stays small (worker.rs, `ask`).
                a = log.scope(Box::pin(worker.ask(case, i64::from(repeat), item.replaces))) => a,
                _ = abort.cancelled() => Asked::Done(Outcome::Aborted),
            };
            // A refused key stops the run before the next worker may send
            // (what the reply cost was counted as it arrived).
            if let Asked::Done(Outcome::Fatal(e)) = &asked {
                stop_for(e, &worker.settings.model.id, &shared, &stop)
            }
            // A reply for the judge leaves the model's phase now (the
            // judge is asked outside it); any other keeps it until stored,
            // so requests in flight plus replies not yet stored stay
            // within --concurrency.
            let mut phase = Some(phase);
            if matches!(asked, Asked::Judge(..) | Asked::JudgeTurns(..)) {
                phase = None;
            }
            // A model reply is paid for: if its judging is cut short (a
            // refused key, the run dropped), it is stored unjudged and a
            // resume judges it without asking the model again.
            let mut stop_after = None;
            let mut verdicts_paid = Vec::new();
            let outcome = match asked {
                Asked::Done(o) => o,
                // Only a Batch API round hands a turn back (`Replies::Batched`).
                Asked::Later(_) => Outcome::Aborted,
                Asked::Judge(..) | Asked::JudgeTurns(..) => {
                    // Only an interruption's abort drops a judge request
                    // in flight (its charge unknown to us).
                    let (unjudged, judging) = match asked {
                        Asked::Judge(r, text) => (
                            r.clone(),
                            Box::pin(worker.judge_all(case, r, text)) as JudgeFuture<'_>,
                        ),
                        Asked::JudgeTurns(r, turns) => (
                            r.clone(),
                            Box::pin(worker.judge_turns(case, r, turns)) as JudgeFuture<'_>,
                        ),
                        Asked::Done(_) | Asked::Later(_) => unreachable!("matched above"),
                    };
                    let judged = tokio::select! {
                        j = log.scope(judging) => j,
                        _ = abort.cancelled() => Judged::Cut(unjudged, Vec::new(), None),
                    };
                    match judged {
                        Judged::Done(r) => Outcome::Stored(r),
                        Judged::Cut(r, charges, fatal) => {
                            verdicts_paid = charges;
                            let why = match fatal {
                                Some(e) => {
                                    stop_for(&e, &worker.settings.model.id, &shared, &stop);
                                    let why = e.to_string();
                                    stop_after = Some(e);
                                    why
                                }
                                None => "the run stopped".to_string(),
                            };
                            Outcome::Stored(not_judged(r, &why))
                        }
                    }
                }
            };
            let (mut charges, failed_calls) = worker.charges(&log, case, i64::from(repeat));
            charges.append(&mut verdicts_paid);
            shared.batch.add_retried(log.take_retried());
            match outcome {
                Outcome::Stored(mut r) => {
                    r.charges = charges;
                    r.replaces = item.replaces;
                    // A judge that fails at the provider counts like the model.
                    if r.error_kind == Some(ErrorKind::Provider) || failed_calls > 0 {
                        let n = shared
                            .provider_errors_in_a_row
                            .fetch_add(1, Ordering::Relaxed)
                            + 1;
                        if n >= MAX_CONSECUTIVE_PROVIDER_ERRORS {
                            shared.set_stop(
                            format!("{n} test cases in a row failed at the provider (last: {}); stopped", r.error.as_deref().unwrap_or("?")),
                            None,
                        );
                            stop.cancel();
                        }
                    } else {
                        shared.provider_errors_in_a_row.store(0, Ordering::Relaxed);
                    }
                    // The next test case waits until this reply is stored:
                    // a kill loses at most one reply per worker (writer.rs).
                    let (stored, committed) = tokio::sync::oneshot::channel();
                    if tx.send(ToWrite::Result(r, stored)).await.is_err() {
                        break;
                    }
                    let committed = tokio::select! {
                        c = committed => c.is_ok(),
                        _ = stop.cancelled() => false,
                    };
                    drop(phase);
                    if committed {
                        work.stored(&item).await;
                    }
                    if !committed || stop_after.is_some() {
                        break;
                    }
                }
                Outcome::Fatal(e) => {
                    let _ = tx.send(ToWrite::Charges(charges)).await;
                    stop_for(&e, &worker.settings.model.id, &shared, &stop);
                    break;
                }
                Outcome::Aborted => {
                    let _ = tx.send(ToWrite::Charges(charges)).await;
                    break;
                }
            }
        }
    }
}

/// The judging of a reply or of a conversation's replies.
type JudgeFuture<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Judged> + Send + 'a>>;

/// A paid model reply whose judging did not finish: kept, out of the
/// score as a judge error, judged by the next `--resume` from the stored
/// reply (the model is not asked again).
fn not_judged(mut r: Box<NewResult>, why: &str) -> Box<NewResult> {
    r.passed = false;
    r.matched = None;
    r.judgements.clear();
    r.error_kind = Some(ErrorKind::Judge);
    r.error = Some(format!(
        "not judged ({why}); the reply is kept and --resume judges it"
    ));
    r
}

/// A 401 or 402 is about the key or the account, a refused OpenRouter
/// field about the server: it stops this run at once and every model of
/// the batch, which then send nothing more (the budget gate refuses once
/// stopped). Requests already in flight are let finish: the provider may
/// have charged them, and a 401 that dropped them lost replies and
/// verdicts it had paid for (issue 41).
fn stop_for(e: &Arc<ProviderError>, model: &str, shared: &Shared, stop: &CancellationToken) {
    // A refused key, or a server of another format, ends the command with
    // its error (the fix in one line on stderr).
    let reported = matches!(e.class(), FailureClass::KeyRefused | FailureClass::WrongApi);
    shared.set_stop(e.to_string(), reported.then(|| Arc::clone(e)));
    shared.batch.stop_all(format!("{model}: {e}"), false);
    stop.cancel();
}

/// The run's heartbeat, in its own task (and on the pool, not the writer's
/// connection), so a writer waiting on a lock never makes the run look
/// abandoned. If another process took the run over, this one stops sending,
/// or both would pay.
pub(super) async fn heartbeat(
    store: Store,
    run_id: i64,
    stop: CancellationToken,
    shared: Arc<Shared>,
) {
    let mut tick = tokio::time::interval(crate::store::HEARTBEAT_INTERVAL);
    tick.tick().await;
    loop {
        tick.tick().await;
        match store.heartbeat(run_id).await {
            Ok(true) => {}
            Ok(false) => {
                shared.set_stop(
                    format!("another helmbench took over run {run_id}; stopped sending"),
                    None,
                );
                stop.cancel();
            }
            Err(e) => tracing::warn!(error = %e, "heartbeat not written"),
        }
    }
}

/// The heartbeat of a process on a lease-managed run: its host row with
/// its counts, its leases and the run's liveness (store/leases.rs). A
/// missed beat is retried at the next tick; leases outlast several.
async fn lease_heartbeat(work: Arc<Work>) {
    let mut tick = tokio::time::interval(crate::store::HEARTBEAT_INTERVAL);
    tick.tick().await;
    loop {
        tick.tick().await;
        if let Err(e) = work.beat().await {
            tracing::warn!(error = %e, "heartbeat not written");
        }
    }
}

/// The summary of a resumed run that had nothing left to do: nothing was
/// sent or written, and the message says where the answers are.
pub(super) fn nothing_to_do(
    settings: &RunSettings,
    planned: usize,
    row: crate::domain::RunRecord,
) -> RunSummary {
    let message = format!(
        "already complete (every test case answered and judged); nothing sent, the run is unchanged; see `helmbench report --run {}`",
        row.run_id
    );
    RunSummary {
        run_id: row.run_id,
        model: settings.model.id.clone(),
        status: row.status,
        planned,
        stored: row.test_cases as usize,
        passed: row.passed as usize,
        provider_errors: 0,
        judge_errors: 0,
        cost_usd: row.cost_usd + row.judge_cost_usd,
        unknown_cost_calls: row.unknown_cost_calls,
        max_cost_usd: row.max_cost_usd,
        message: Some(message),
        fatal: None,
    }
}

/// Creates the run, or claims it for a resume (writing what an earlier
/// process kept, clearing its provider errors). Returns its id, what it
/// already spent (which counts against its budget) and the test cases whose
/// judge failed before (judged again).
/// The run's result log (see `log.rs`), started after anything a killed
/// process left in it was written (`open_run`); `None` for an in-memory
/// database, or when the file cannot be made (results are then committed
/// one worker's reply at a time, as before the log).
async fn open_log(store: &Store, run_id: i64) -> crate::Result<Option<ResultLog>> {
    let Some(path) = store.log_path(run_id) else {
        return Ok(None);
    };
    let after = store.log_mark(run_id).await?;
    match ResultLog::create(path.clone(), after) {
        Ok(log) => Ok(Some(log)),
        Err(e) => {
            tracing::warn!(error = %e, path = %path.display(), "no result log; each result is committed before its worker goes on");
            Ok(None)
        }
    }
}

pub(super) async fn open_run(
    ctx: &RunContext,
    settings: &RunSettings,
    resume: Option<i64>,
    kind: &str,
    planned: usize,
    retry_blocked: bool,
    lease: Lease,
) -> crate::Result<(i64, f64, HashSet<(String, i64)>)> {
    let settings_json = serde_json::to_value(settings)?;
    let run_id = match resume {
        Some(id) if lease.join => {
            // Joined, not claimed: the run stays with the processes on it.
            super::lease::check_joinable(&ctx.store, id).await?;
            id
        }
        Some(id) => {
            // Claimed first: provider errors are cleared only by the owner.
            ctx.store.claim_run(id, settings.max_cost).await?;
            let kept = log::write_kept(&ctx.store, id).await?;
            if kept > 0 {
                tracing::info!(
                    run_id = id,
                    kept,
                    "results kept by an earlier process written"
                );
            }
            ctx.store.clear_provider_errors(id, retry_blocked).await?;
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
    if lease.leased {
        // A resume asks again what the processes before it left: every
        // chunk is checked anew against the stored results.
        let reset = resume.is_some() && !lease.join;
        ctx.store.plan_leases(run_id, planned, reset).await?;
        ctx.store.join_host(run_id).await?;
    }
    // What earlier processes of this run spent counts against its budget.
    let (spent_before, redo) = match resume {
        Some(id) => {
            let row = ctx.store.run(id).await?;
            // The paid turns of its unfinished conversations count too.
            let unfinished: f64 = ctx
                .store
                .unfinished_turns(Some(id))
                .await?
                .iter()
                .map(|u| u.cost_usd)
                .sum();
            (
                row.cost_usd + row.judge_cost_usd + unfinished,
                ctx.store.judge_error_cases(id).await?,
            )
        }
        None => (0.0, HashSet::new()),
    };
    Ok((run_id, spent_before, redo))
}

/// How a run is opened on the team store: joined (`--join`, not claimed),
/// and whether its work is taken in leases.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Lease {
    pub join: bool,
    pub leased: bool,
}

/// The planned work minus what the run already stored, and how many that is.
async fn remaining(
    ctx: &RunContext,
    run_id: i64,
    work: Vec<(CaseIndex, u32)>,
) -> crate::Result<(Vec<(CaseIndex, u32)>, usize)> {
    let done = ctx.store.stored_cases(run_id).await?;
    let todo: Vec<(CaseIndex, u32)> = if done.is_empty() {
        work
    } else {
        work.into_iter()
            .filter(|(c, r)| !done.contains(&(c.resolve(&ctx.benchmark).code(), i64::from(*r))))
            .collect()
    };
    Ok((todo, done.len()))
}
