//! How `run-batch --batch-api` submits (batch_api.rs polls): every pending
//! request, one batch per model and JSON schema, at most `batch_size`
//! requests each; each batch's estimate reserved against `--max-cost`
//! (budget.rs) and its intent recorded before the POST, its id on the 202.
//! A POST whose outcome is unknown leaves the batch of uncertain
//! submission: its requests are held, never posted again on their own.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::batch_collect::{Collect, ItemRef, JudgeReq};
use super::batch_flight::{BatchApi, Live, MAX_BODY_BYTES, next_wait, stop_for};
use super::shared::Shared;
use crate::domain::BatchItem;
use crate::openrouter::{CreateError, batch_body};
use crate::run::{RunContext, RunControl, RunSettings};

/// One batch to post: its key, model, and requests (custom id, body, what).
struct Outgoing {
    phase: &'static str,
    model: String,
    key: String,
    items: Vec<(String, String, ItemRef, Option<String>)>,
}

/// Every pending model request, one batch per schema and size cap.
#[allow(clippy::too_many_arguments)]
pub(super) async fn submit_models(
    ctx: &RunContext,
    settings: &RunSettings,
    control: &RunControl,
    api: &BatchApi,
    run_id: i64,
    round: i64,
    col: &mut Collect,
    live: &mut Vec<Live>,
    shared: &Shared,
) -> crate::Result<()> {
    let pending = std::mem::take(&mut col.pending);
    let mut groups: Vec<Outgoing> = Vec::new();
    let mut schemas: HashMap<String, String> = HashMap::new();
    for key in pending {
        let Some((what, body)) = col.prepare_or_cached(&key).await else {
            continue;
        };
        let scenario = col.cases[&key].resolve(&ctx.benchmark).scenario;
        // One hash per scenario, not per test case: its schema is the same.
        let schema = schemas
            .entry(scenario.code.clone())
            .or_insert_with(|| {
                scenario.response_format.as_ref().map_or_else(
                    || "text".to_string(),
                    |f| {
                        format!(
                            "schema-{}",
                            &crate::benchmark::sha256_hex(&[f.to_string().as_bytes()])[..16]
                        )
                    },
                )
            })
            .clone();
        let custom_id = Collect::custom_id(&what);
        group_for(&mut groups, "model", &settings.model.id, &schema)
            .items
            .push((custom_id, body, what, None));
    }
    let per = api
        .per_case_usd
        .get(&settings.model.id)
        .copied()
        .unwrap_or(0.0);
    for g in groups {
        post_all(ctx, control, api, run_id, round, col, live, shared, g, per).await?;
    }
    Ok(())
}

/// The group of `groups` for `model` and `key`, added when there is none.
fn group_for<'a>(
    groups: &'a mut Vec<Outgoing>,
    phase: &'static str,
    model: &str,
    key: &str,
) -> &'a mut Outgoing {
    match groups.iter().position(|g| g.model == model && g.key == key) {
        Some(i) => &mut groups[i],
        None => {
            groups.push(Outgoing {
                phase,
                model: model.to_string(),
                key: key.to_string(),
                items: Vec::new(),
            });
            groups.last_mut().expect("pushed")
        }
    }
}

/// Every pending judge request, one batch per judge and rubric schema.
#[allow(clippy::too_many_arguments)]
pub(super) async fn submit_judges(
    ctx: &RunContext,
    settings: &RunSettings,
    control: &RunControl,
    api: &BatchApi,
    run_id: i64,
    round: i64,
    col: &mut Collect,
    live: &mut Vec<Live>,
    shared: &Shared,
) -> crate::Result<()> {
    let pending = std::mem::take(&mut col.judge_pending);
    let mut groups: Vec<Outgoing> = Vec::new();
    let mut reqs: Vec<JudgeReq> = Vec::new();
    for req in pending {
        let what = ItemRef::Judge(req.key.clone());
        let custom_id = Collect::custom_id(&what);
        group_for(&mut groups, "judge", &req.key.2, &req.schema_key)
            .items
            .push((
                custom_id,
                req.body.clone(),
                what,
                Some(req.j.criterion.clone()),
            ));
        reqs.push(req);
    }
    for req in reqs {
        col.judge_out.insert(req.key.clone(), req);
    }
    let per = api
        .per_judge_request_usd
        .get(&settings.model.id)
        .copied()
        .unwrap_or(0.0);
    for g in groups {
        post_all(ctx, control, api, run_id, round, col, live, shared, g, per).await?;
    }
    Ok(())
}

/// Posts one group as batches of at most `batch_size` requests (and
/// [`MAX_BODY_BYTES`]): intent recorded first, the id on the 202.
#[allow(clippy::too_many_arguments)]
async fn post_all(
    ctx: &RunContext,
    control: &RunControl,
    api: &BatchApi,
    run_id: i64,
    round: i64,
    col: &mut Collect,
    live: &mut Vec<Live>,
    shared: &Shared,
    g: Outgoing,
    per_item_usd: f64,
) -> crate::Result<()> {
    let mut rest = g.items;
    while !rest.is_empty() {
        let mut n = 0;
        let mut bytes = 0;
        while n < rest.len() && n < api.batch_size.max(1) {
            bytes += rest[n].1.len() + rest[n].0.len() + 32;
            if n > 0 && bytes > MAX_BODY_BYTES {
                break;
            }
            n += 1;
        }
        let chunk: Vec<_> = rest.drain(..n).collect();
        let stopped = shared.stop.is_cancelled() || control.batch.stop.is_cancelled();
        let estimate = per_item_usd * chunk.len() as f64;
        let refused = if stopped {
            Some("the run stopped".to_string())
        } else {
            control.batch.reserve_batch(estimate).await.err()
        };
        if let Some(why) = refused {
            if !stopped {
                shared.set_stop(why.clone(), None);
                control.batch.stop_all(why, false);
            }
            // Not sent: pending for a resume.
            give_back(col, chunk.into_iter().chain(rest.drain(..)));
            return Ok(());
        }
        let items: Vec<BatchItem> = chunk
            .iter()
            .map(|(custom_id, _, what, criterion)| {
                let (case, judge) = match what {
                    ItemRef::Model(k) | ItemRef::Turn(k, _) => (k.clone(), None),
                    ItemRef::Judge((k, _, j)) => (k.clone(), Some(j.clone())),
                };
                BatchItem {
                    custom_id: custom_id.clone(),
                    test_code: case.0,
                    repeat_index: case.1,
                    criterion: criterion.clone(),
                    judge_model: judge,
                    outcome: None,
                }
            })
            .collect();
        let row = ctx
            .store
            .record_batch_intent(run_id, g.phase, &g.model, &g.key, round, estimate, &items)
            .await?;
        let body = batch_body(
            &g.model,
            chunk
                .iter()
                .map(|(id, body, _, _)| (id.as_str(), body.as_str())),
        );
        match ctx.client.create_batch(body).await {
            Ok(status) => {
                ctx.store
                    .record_batch_submitted(row, &status.id, &status.status)
                    .await?;
                col.expect(row, chunk.len());
                tracing::info!(batch = %status.id, model = %g.model, requests = chunk.len(), "batch submitted");
                live.push(Live::new(
                    row,
                    status.id,
                    g.model.clone(),
                    chunk
                        .into_iter()
                        .map(|(id, _, what, _)| (id, what))
                        .collect(),
                    Instant::now(),
                    Duration::ZERO,
                    estimate,
                    [
                        status.counts.total,
                        status.counts.completed,
                        status.counts.failed,
                    ],
                ));
                // The first poll after the first wait.
                if let Some(l) = live.last_mut() {
                    l.wait = next_wait(Duration::ZERO, api);
                    l.next = Instant::now() + l.wait;
                }
            }
            Err(CreateError::Uncertain(why)) => {
                // OpenRouter may have accepted it: its requests are not
                // sent again on their own, and its estimate stays counted.
                ctx.store
                    .record_batch_closed(row, "abandoned", &format!("submission uncertain: {why}"))
                    .await?;
                tracing::warn!(model = %g.model, error = %why, "batch submission uncertain; its requests are not sent again");
                col.uncertain.push((chunk.len() as i64, estimate));
            }
            Err(CreateError::Refused(e)) => {
                control.batch.release_batch(estimate);
                ctx.store
                    .record_batch_closed(row, "refused", &e.to_string())
                    .await?;
                if e.is_fatal_for_run() {
                    stop_for(control, shared, &g.model, &e);
                    give_back(col, chunk.into_iter().chain(rest.drain(..)));
                    return Ok(());
                }
                tracing::warn!(model = %g.model, error = %e, "batch not accepted; its requests go out again");
                col.requeue(
                    chunk.into_iter().map(|(_, _, w, _)| w),
                    &format!("batch not accepted: {e}"),
                )
                .await;
            }
        }
    }
    Ok(())
}

/// Requests that were never posted go back where they came from.
fn give_back(
    col: &mut Collect,
    items: impl Iterator<Item = (String, String, ItemRef, Option<String>)>,
) {
    for (_, _, what, _) in items {
        match what {
            ItemRef::Model(k) | ItemRef::Turn(k, _) => col.pending.push(k),
            ItemRef::Judge(k) => {
                if let Some(req) = col.judge_out.remove(&k) {
                    col.judge_pending.push(req);
                }
            }
        }
    }
}
