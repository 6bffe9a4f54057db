//! `run-batch --batch-api` (issue 33): one run per model through
//! OpenRouter's Batch API, durable across kills and days.
//!
//! A round submits every pending request, one batch per model and JSON
//! schema (at most `batch_size` requests each); before each POST the
//! intent (which test cases, which batch key) is recorded, and on the 202
//! the batch id. Batches are then polled, each on its own backoff with
//! jitter, until they end; a completed batch's results are read as a
//! stream (batch_collect.rs). What failed goes out again in the next round,
//! a bounded number of rounds; judge requests go out the same way once the
//! replies are in. A resume polls every recorded batch and submits only
//! what no live batch holds. Ctrl-C (and `--detach`) leave the batches
//! running at OpenRouter; `--resume` collects them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::time::Duration;

use tokio::time::Instant;

use super::batch::{heartbeat, nothing_to_do, open_run};
use super::batch_collect::{CaseKey, Collect, ItemRef, JudgeKey};
use super::batch_flight::{BatchApi, Live, MAX_READ_FAILURES, next_wait, stop_for};
use super::batch_submit::{submit_judges, submit_models};
use super::complete;
use super::shared::Shared;
use super::worker::Worker;
use crate::domain::{BatchItem, BatchRow, RunStatus};
use crate::openrouter::{ProviderError, ResultItem};
use crate::run::RunContext;
use crate::run::RunControl;
use crate::run::RunSettings;
use crate::run::RunSummary;
use crate::run::plan;

/// Results read ahead of the writer, at most.
const READ_AHEAD: usize = 256;

/// Runs (or resumes) one model's run through the Batch API.
pub async fn run_batch_api(
    ctx: &RunContext,
    settings: &RunSettings,
    resume: Option<i64>,
    control: &RunControl,
    api: &BatchApi,
) -> crate::Result<RunSummary> {
    // The run's recorded batch size, on every resume.
    let api = &BatchApi {
        batch_size: settings
            .batch_api
            .as_ref()
            .map_or(api.batch_size, |a| a.batch_size),
        ..api.clone()
    };
    let b = &ctx.benchmark;
    let work = plan(b, settings)?;
    let planned = work.len();
    if let Some(id) = resume
        && ctx
            .store
            .run_batches(id)
            .await?
            .iter()
            .all(|r| !r.is_live())
        && let Some(row) =
            complete::resume_has_nothing_to_do(&ctx.store, id, planned, control.retry_blocked)
                .await?
    {
        return Ok(nothing_to_do(settings, planned, row));
    }
    let opening = control.batch.opening.lock().await;
    let (run_id, spent_before, redo) = open_run(
        ctx,
        settings,
        resume,
        "batch",
        planned,
        control.retry_blocked,
        Default::default(),
    )
    .await?;
    drop(opening);
    // On the team store the batch's budget is kept in the database, as
    // for synchronous runs (budget.rs).
    control
        .batch
        .open_team_budget_for(&ctx.store, settings, run_id, !control.join)
        .await?;
    if control.resubmit_uncertain {
        // Asked for: the requests of batches of uncertain submission go out
        // again (they are no longer held).
        for row in ctx.store.run_batches(run_id).await? {
            if row.is_uncertain() {
                ctx.store
                    .record_batch_closed(
                        row.id,
                        "ended",
                        &format!(
                            "{}; its requests sent again (--resubmit-uncertain)",
                            row.message.as_deref().unwrap_or("submission uncertain")
                        ),
                    )
                    .await?;
            }
        }
    }
    let stored = ctx.store.stored_cases(run_id).await?;
    let held = ctx.store.held_cases(run_id).await?;
    let progress = control
        .batch
        .progress
        .add(run_id, &settings.model.id, planned, stored.len());
    let cache = control
        .batch
        .cache
        .get_or_try_init(|| async {
            if settings.no_cache {
                return Ok::<_, crate::Error>(None);
            }
            let (replies, judgements) = ctx.store.request_keys().await?;
            Ok(Some(Arc::new(super::cache::CacheFilter {
                replies: std::sync::RwLock::new(replies),
                judgements: std::sync::RwLock::new(judgements),
            })))
        })
        .await?
        .clone();
    let worker = Worker {
        benchmark: ctx.benchmark.clone(),
        ids: ctx.ids.clone(),
        client: ctx.client.clone(),
        validators: ctx.validators.clone(),
        store: ctx.store.clone(),
        settings: settings.clone(),
        run_id,
        cache,
        tails: Arc::new(super::worker::Tails::new(ctx.benchmark.scenarios.len())),
    };
    let cases: HashMap<CaseKey, _> = work
        .iter()
        .map(|&(c, r)| ((c.resolve(b).code(), i64::from(r)), c))
        .collect();
    let mut col = Collect::new(
        worker,
        ctx.store.clone(),
        control.batch.clone(),
        progress.clone(),
        cases,
        redo,
        stored,
        api.max_rounds.max(1),
        spent_before,
    );
    col.pending = work
        .iter()
        .map(|&(c, r)| (c.resolve(b).code(), i64::from(r)))
        .filter(|k| !col.stored.contains(k) && !held.contains(k))
        .collect();
    // Cases with a judge error before are among them (not stored): judged
    // again from their stored reply, which the cache answers.

    let stop = control.batch.abort.child_token();
    let shared = Arc::new(Shared {
        batch: control.batch.clone(),
        provider_errors_in_a_row: AtomicUsize::new(0),
        spend: Default::default(),
        unknown_charges: Default::default(),
        write_blocked: AtomicBool::new(false),
        stop_reason: std::sync::Mutex::new(None),
        stop: stop.clone(),
    });
    let beat = tokio::spawn(heartbeat(
        ctx.store.clone(),
        run_id,
        stop.clone(),
        shared.clone(),
    ));
    let mut live = recorded(ctx, control, run_id, &mut col).await?;
    let outcome = drive(
        ctx, settings, control, api, run_id, &mut col, &mut live, &shared,
    )
    .await;
    beat.abort();
    col.flush().await?;
    progress.set_spend(col.spent);
    progress.finish();
    // What the batches in flight were counted at is released.
    control
        .batch
        .release_batch(live.iter().map(|l| l.estimate).sum());
    control.batch.flush_team_budget().await;
    let stop_reason = shared
        .stop_reason
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .or_else(|| {
            control
                .batch
                .stop_reason()
                .map(|r| (format!("stopped with the batch: {r}"), None))
        });
    let resume_cmd = format!("helmbench run-batch --resume {run_id}");
    let all_done = ctx.store.count_results(run_id).await? >= planned as i64;
    let uncertain = crate::domain::uncertain_batches(run_id, &ctx.store.run_batches(run_id).await?);
    let (status, message, fatal) = match (outcome?, stop_reason, control.interrupt.signal()) {
        (_, Some((msg, fatal)), _) => (
            RunStatus::Interrupted,
            Some(with_batches(&msg, live.len(), &resume_cmd)),
            fatal,
        ),
        (_, None, Some(signal)) => (
            RunStatus::Interrupted,
            Some(with_batches(
                &format!("cancelled by {signal}"),
                live.len(),
                &resume_cmd,
            )),
            None,
        ),
        (Ended::Detached, None, None) => (
            RunStatus::Interrupted,
            Some(format!(
                "detached: {} batch{} submitted to OpenRouter; collect the results with `{resume_cmd}` (results are kept 30 days)",
                live.len(),
                if live.len() == 1 { "" } else { "es" }
            )),
            None,
        ),
        (Ended::Done, None, None) if all_done => (RunStatus::Completed, None, None),
        (Ended::Done, None, None) => (
            RunStatus::Interrupted,
            Some(with_batches(
                "not every test case finished",
                live.len(),
                &resume_cmd,
            )),
            None,
        ),
    };
    // Batches that may have been accepted: said at the end, with the choice.
    let message = match (message, uncertain) {
        (Some(m), Some(u)) => Some(format!("{m}; {u}")),
        (m, _) => m,
    };
    super::batch::record_end(ctx, settings, run_id, planned, status, message, fatal).await
}

/// `msg`, and what is still at OpenRouter with the command that collects it.
fn with_batches(msg: &str, live: usize, resume_cmd: &str) -> String {
    if live == 0 {
        return format!("{msg}; `{resume_cmd}` finishes it");
    }
    format!(
        "{msg}; {live} batch{} still running at OpenRouter (left running, not cancelled): collect with `{resume_cmd}`",
        if live == 1 { "" } else { "es" }
    )
}

enum Ended {
    Done,
    Detached,
}

/// The batches an earlier process of this run recorded: an intent whose
/// 202 never came is of uncertain submission, like a create whose answer
/// was a 5xx (its requests are held, and counted at its estimate, unless
/// `--resubmit-uncertain` sent them again); submitted and completed ones
/// are polled (a completed one is read again).
async fn recorded(
    ctx: &RunContext,
    control: &RunControl,
    run_id: i64,
    col: &mut Collect,
) -> crate::Result<Vec<Live>> {
    let rows: Vec<BatchRow> = ctx.store.run_batches(run_id).await?;
    let mut live = Vec::new();
    // Judge requests that a live or uncertain batch holds are not sent again.
    for row in rows
        .iter()
        .filter(|r| (r.is_live() || r.is_uncertain()) && r.phase == "judge")
    {
        for it in ctx.store.batch_items(row.id).await? {
            if let Some(key) = judge_key(col, &it) {
                col.held_judge.insert(key);
            }
        }
    }
    // Model batches first: a judge's results need their case's reply.
    let mut ordered: Vec<&BatchRow> = rows.iter().collect();
    ordered.sort_by_key(|r| (r.phase != "model", r.id));
    for row in ordered {
        match (row.state.as_str(), &row.remote_id) {
            ("intent", _) => {
                ctx.store
                    .record_batch_closed(
                        row.id,
                        "abandoned",
                        "submission uncertain: the process stopped before OpenRouter's answer was recorded",
                    )
                    .await?;
                control.batch.hold_batch(row.estimate_usd).await;
                col.uncertain.push((row.total, row.estimate_usd));
            }
            ("abandoned", _) => {
                control.batch.hold_batch(row.estimate_usd).await;
                col.uncertain.push((row.total, row.estimate_usd));
            }
            ("submitted" | "completed", Some(remote)) => {
                let mut items = HashMap::new();
                // Model items an earlier process read (written, or sent out
                // again: they are pending) are not handled again when the
                // batch is read again. A judge item's verdict waits for its
                // case's reply, so it is read again.
                let mut handled = HashSet::new();
                for it in ctx.store.batch_items(row.id).await? {
                    if it.outcome.is_some() && row.phase == "model" {
                        handled.insert(it.custom_id.clone());
                    }
                    let what = if row.phase == "model" {
                        Some(col.model_ref((it.test_code.clone(), it.repeat_index), &it.custom_id))
                    } else {
                        judge_key(col, &it).map(ItemRef::Judge)
                    };
                    if let Some(w) = what {
                        items.insert(it.custom_id, w);
                    }
                }
                col.expect(row.id, items.len() - handled.len());
                let estimate = if row.state == "submitted" {
                    row.estimate_usd
                } else {
                    0.0
                };
                // Still at OpenRouter: counted against the budget again.
                control.batch.hold_batch(estimate).await;
                let mut l = Live::new(
                    row.id,
                    remote.clone(),
                    row.model.clone(),
                    items,
                    Instant::now(),
                    Duration::ZERO,
                    estimate,
                    [row.total, row.completed, row.failed],
                );
                l.handled = handled;
                live.push(l);
            }
            _ => {}
        }
    }
    Ok(live)
}

/// A recorded judge item's request key.
fn judge_key(col: &Collect, it: &BatchItem) -> Option<JudgeKey> {
    let case = (it.test_code.clone(), it.repeat_index);
    col.cases.get(&case)?;
    Some((case, it.criterion.clone()?, it.judge_model.clone()?))
}

/// Submits, polls and reads until nothing is pending or in flight, or the
/// run stops (the batches stay running at OpenRouter).
#[allow(clippy::too_many_arguments)]
async fn drive(
    ctx: &RunContext,
    settings: &RunSettings,
    control: &RunControl,
    api: &BatchApi,
    run_id: i64,
    col: &mut Collect,
    live: &mut Vec<Live>,
    shared: &Shared,
) -> crate::Result<Ended> {
    let mut round: i64 = 0;
    let interrupt = control.interrupt.token.clone();
    let mut last_report = std::time::Instant::now();
    loop {
        // An interrupt, a refused key or a run taken over: stop polling now
        // (the batches stay at OpenRouter). The budget or a stop elsewhere
        // in the batch: submit nothing new, but collect what is in flight.
        let quit = interrupt.is_cancelled() || shared.stop.is_cancelled();
        let no_new = quit
            || control.batch.stop.is_cancelled()
            || shared
                .stop_reason
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some();
        if !no_new {
            submit_models(
                ctx, settings, control, api, run_id, round, col, live, shared,
            )
            .await?;
            col.judge_from_cache().await;
            submit_judges(
                ctx, settings, control, api, run_id, round, col, live, shared,
            )
            .await?;
            round += 1;
        }
        col.flush().await?;
        if api.detach && !live.is_empty() {
            return Ok(Ended::Detached);
        }
        let nothing_to_send = col.pending.is_empty() && col.judge_pending.is_empty();
        if quit || live.is_empty() && (no_new || nothing_to_send) {
            return Ok(Ended::Done);
        }
        if live.is_empty() {
            // Requests put back by a refused POST go out in the next round.
            continue;
        }
        let next = live
            .iter()
            .map(|l| l.next)
            .min()
            .unwrap_or_else(Instant::now);
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = interrupt.cancelled() => return Ok(Ended::Done),
            _ = control.batch.abort.cancelled() => return Ok(Ended::Done),
        }
        let now = Instant::now();
        let mut i = 0;
        while i < live.len() {
            if live[i].next > now {
                i += 1;
                continue;
            }
            if poll_one(ctx, control, api, col, &mut live[i], shared).await? {
                let l = live.swap_remove(i);
                control.batch.release_batch(l.estimate);
            } else {
                i += 1;
            }
        }
        if !ctx.quiet && last_report.elapsed() >= Duration::from_secs(10) || live.is_empty() {
            last_report = std::time::Instant::now();
            report(ctx, settings, run_id, col, live);
        }
    }
}

/// One progress line: the batches in flight and their request counts.
fn report(ctx: &RunContext, settings: &RunSettings, run_id: i64, col: &Collect, live: &[Live]) {
    let sum = |k: usize| live.iter().map(|l| l.counts[k]).sum::<i64>();
    let line = format!(
        "batch API: run {run_id} {}: {} batch{} in flight, requests {}/{} done, {} failed; {} waiting for the judge; ${:.4} spent",
        settings.model.id,
        live.len(),
        if live.len() == 1 { "" } else { "es" },
        sum(1),
        sum(0),
        sum(2),
        col.awaiting_judge(),
        col.spent
    );
    let line = if col.uncertain.is_empty() {
        line
    } else {
        let requests = col.uncertain.iter().map(|u| u.0).sum();
        let usd = col.uncertain.iter().map(|u| u.1).sum();
        format!(
            "{line}; {}",
            crate::domain::uncertain_line(run_id, col.uncertain.len(), requests, usd)
        )
    };
    tracing::info!("{line}");
    if !ctx.quiet && col.batch.progress.mode != super::ProgressMode::Off {
        eprintln!("{line}");
    }
}

/// Polls one batch; true once it ended and was read.
async fn poll_one(
    ctx: &RunContext,
    control: &RunControl,
    api: &BatchApi,
    col: &mut Collect,
    l: &mut Live,
    shared: &Shared,
) -> crate::Result<bool> {
    l.wait = next_wait(l.wait, api);
    l.next = Instant::now() + l.wait;
    let polled = match ctx.client.poll_batch(&l.remote).await {
        Ok(p) => p,
        Err(e) if e.is_fatal_for_run() => {
            stop_for(control, shared, &l.model, &e);
            return Ok(false);
        }
        // Not found: a batch just created, or a bad minute at OpenRouter,
        // can say so and run on. Polled again (with the backoff) over
        // minutes; past that it is taken as of uncertain submission: its
        // requests are held, never sent again on their own.
        Err(e @ ProviderError::Rejected { status: 404, .. }) => {
            let since = *l.not_found_since.get_or_insert_with(Instant::now);
            if since.elapsed() < api.not_found_window {
                tracing::warn!(batch = %l.remote, error = %e, "batch not found at OpenRouter; polled again");
                return Ok(false);
            }
            let why = format!(
                "submission uncertain: batch {} not found at OpenRouter for {} s ({e}); it may still run and be billed",
                l.remote,
                since.elapsed().as_secs()
            );
            ctx.store
                .record_batch_closed(l.row, "abandoned", &why)
                .await?;
            col.uncertain.push((l.items.len() as i64, l.estimate));
            // Its estimate stays counted: it may be billed.
            l.estimate = 0.0;
            return Ok(true);
        }
        Err(e) if crate::openrouter::is_unreadable(&e) => {
            return read_failed(control, shared, col, l, &e.to_string()).await;
        }
        Err(e) => {
            tracing::warn!(batch = %l.remote, error = %e, "batch poll failed; polled again later");
            return Ok(false);
        }
    };
    l.not_found_since = None;
    let st = &polled.status;
    l.counts = [st.counts.total, st.counts.completed, st.counts.failed];
    let completed = st.status == "completed";
    ctx.store
        .record_batch_status(
            l.row,
            &st.status,
            l.counts,
            completed.then(|| st.usage.as_ref().and_then(|u| u.cost_usd())),
        )
        .await?;
    if !st.is_terminal() {
        return Ok(false);
    }
    match polled.results {
        Some(results) if completed => {
            let (tx, mut rx) = tokio::sync::mpsc::channel::<ResultItem>(READ_AHEAD);
            let reader = tokio::spawn(results.read(tx));
            while let Some(item) = rx.recv().await {
                // An item an earlier read handled (that read broke later on)
                // is not handled again: queued once, its charges counted once.
                if l.handled.contains(&item.custom_id) {
                    continue;
                }
                if let Some(what) = l.items.get(&item.custom_id).cloned() {
                    l.handled.insert(item.custom_id.clone());
                    col.item(l.row, &what, item).await;
                }
                // Deterministic verdicts are written as they are read.
                if col_ready(col) >= super::writer::WRITE_BATCH {
                    col.flush().await?;
                }
            }
            let read = reader
                .await
                .map_err(|e| crate::Error::tool_caused_by(format!("batch reader: {e}"), e))?;
            if let Err(e) = read {
                // Not all of it could be read: what was read is written, the
                // rest read again later (a bounded number of times).
                col.flush().await?;
                return read_failed(control, shared, col, l, &e.to_string()).await;
            }
            // A request the results do not mention goes out again.
            let missing: Vec<ItemRef> = l
                .items
                .iter()
                .filter(|(id, _)| !l.handled.contains(*id))
                .map(|(_, w)| w.clone())
                .collect();
            col.requeue(missing, "not in the completed batch's results")
                .await;
            col.batch_read(l.row);
            col.flush().await?;
        }
        _ => {
            // Failed, expired, cancelled (or completed without results):
            // nothing of it is scored; its requests go out again.
            let why = format!(
                "batch {} ended {}{}",
                l.remote,
                st.status,
                st.error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            );
            ctx.store.record_batch_closed(l.row, "ended", &why).await?;
            col.requeue(l.items.values().cloned(), &why).await;
        }
    }
    Ok(true)
}

/// A completed batch whose answer or results could not be read (`why`):
/// read again later, up to [`MAX_READ_FAILURES`] times in a row; then the
/// run stops naming the batch (its results stay at OpenRouter, where a
/// resume reads them again; nothing of it is submitted again).
async fn read_failed(
    control: &RunControl,
    shared: &Shared,
    col: &mut Collect,
    l: &mut Live,
    why: &str,
) -> crate::Result<bool> {
    l.read_failures += 1;
    if l.read_failures < MAX_READ_FAILURES {
        tracing::warn!(batch = %l.remote, error = %why, tries = l.read_failures, "batch results not read; read again later");
        return Ok(false);
    }
    let msg = format!(
        "batch {}'s results could not be read in {} tries ({why}); they stay at OpenRouter for 30 days, nothing of the batch was submitted again",
        l.remote, l.read_failures
    );
    col.flush().await?;
    shared.set_stop(msg.clone(), None);
    control.batch.stop_all(format!("{}: {msg}", l.model), false);
    Ok(true)
}

fn col_ready(col: &Collect) -> usize {
    col.ready_len()
}
