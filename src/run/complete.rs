//! Runs that have nothing left to do (issue 31). Resuming a completed run
//! used to claim it and rewrite its completion time; now it leaves the
//! database as it is and says so. A fresh run of a batch whose every
//! request an earlier run answered used to copy those replies into a new
//! run (about 860 bytes a result, nothing learnt); now the model is
//! reported as already complete and not run ([`already_complete`]).
//!
//! That second rule must never take an earlier run as the answer to a
//! changed request: the planned request hashes are made by the workers'
//! own code (worker.rs, [`super::worker::request`]), the earlier results
//! must come from the same endpoint, and what a verdict or a score depends
//! on beyond the request (the judges' entries, the tool, the content, how
//! blocks count) must be recorded and equal ([`same_outcome`]).

use serde::Serialize;

use super::converse::conversation_key;
use super::plan;
use super::worker::request;
use crate::benchmark::Benchmark;
use crate::domain::RunRecord;
use crate::domain::RunStatus;
use crate::openrouter::Client;
use crate::run::RunSettings;
use crate::store::{Store, StoreError};

/// The run `run_id` when a resume would find nothing to do: completed,
/// every planned test case stored, no provider or judge error to send or
/// judge again (nor, with `--retry-blocked`, a blocked or refused case),
/// nothing kept in a pending file.
pub(super) async fn resume_has_nothing_to_do(
    store: &Store,
    run_id: i64,
    planned: usize,
    retry_blocked: bool,
) -> Result<Option<RunRecord>, StoreError> {
    let row = store.run(run_id).await?;
    Ok(finished(store, &row, planned, retry_blocked).then_some(row))
}

fn finished(store: &Store, row: &RunRecord, planned: usize, retry_blocked: bool) -> bool {
    row.status == RunStatus::Completed
        && row.test_cases == planned as i64
        && row.provider_errors == 0
        && row.judge_errors == 0
        && !(retry_blocked && row.blocked + row.refused > 0)
        && !unwritten_left(store, row.run_id)
}

/// Whether `run_id` left results beside the database that a `--resume`
/// has not written yet (its pending file, its log).
fn unwritten_left(store: &Store, run_id: i64) -> bool {
    store.pending_path(run_id).is_some_and(|p| p.exists()) || super::log::left(store, run_id)
}

/// A model of a batch that an earlier run already answered in full.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlreadyComplete {
    pub model: String,
    /// The earlier run that answered every planned request.
    pub run_id: i64,
    /// The planned test cases (times repeats) it answered.
    pub results: usize,
}

impl std::fmt::Display for AlreadyComplete {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: already complete in run {} ({} result{}; rerun with --no-cache for fresh replies, or a higher --repeats for more)",
            self.model,
            self.run_id,
            self.results,
            if self.results == 1 { "" } else { "s" }
        )
    }
}

/// The earlier run that already answered every request a new run with
/// `settings` would send, if any: completed, of the same model, every
/// planned request hash stored in it without a provider or judge error at
/// `store`'s endpoint, recorded with settings under which those results
/// score as the new run's would ([`same_outcome`]), nothing of it waiting
/// in a pending file or result log. The newest such run is named. Never
/// with `--no-cache` (a fresh run is asked for) or without an endpoint.
///
/// Reads only: nothing is written, so a rerun that has nothing to do
/// leaves the database as it was. The plan's hashes are computed only when
/// a candidate run exists (about 0.3 s for 110,000 test cases).
pub async fn already_complete(
    benchmark: &Benchmark,
    client: &Client,
    store: &Store,
    settings: &RunSettings,
) -> crate::Result<Option<AlreadyComplete>> {
    if settings.no_cache {
        return Ok(None);
    }
    let work = plan(benchmark, settings)?;
    if work.is_empty() {
        return Ok(None);
    }
    let judged = work
        .iter()
        .any(|(c, _)| c.resolve(benchmark).scenario.evaluation.is_judged());
    let mut planned: Option<Vec<String>> = None;
    for row in store.runs().await? {
        if row.status != RunStatus::Completed
            || row.model != settings.model.id
            // Each planned test case is a result of its own.
            || row.test_cases < work.len() as i64
            || unwritten_left(store, row.run_id)
        {
            continue;
        }
        let Ok(recorded) = serde_json::from_str::<RunSettings>(&row.settings) else {
            continue;
        };
        if !same_outcome(settings, &recorded, judged) {
            continue;
        }
        let Some(answered) = store.answered_requests(row.run_id).await? else {
            return Ok(None);
        };
        let planned = planned.get_or_insert_with(|| {
            work.iter()
                .map(|&(c, r)| {
                    let (model, r) = (&settings.model, i64::from(r));
                    // A conversation's result is stored under its key.
                    conversation_key(benchmark, client, model, c, r)
                        .unwrap_or_else(|| request(benchmark, client, model, c, r).request_hash)
                })
                .collect()
        });
        if planned.iter().all(|h| answered.contains(h)) {
            return Ok(Some(AlreadyComplete {
                model: settings.model.id.clone(),
                run_id: row.run_id,
                results: work.len(),
            }));
        }
    }
    Ok(None)
}

/// Whether results recorded under `before` score the requests they share
/// with a new run under `now` exactly as that run would (`judged`: a
/// planned scenario is judged). [`RunSettings`] field by field:
/// - `model`: the same id. Its parameters (temperature, seed, max_tokens,
///   provider routing, reasoning, the pinned wire format, structured
///   outputs) are in every request body, so in the hashes compared;
///   `price` only prices fresh replies (a reused one costs nothing);
///   `judge_only` only picks which models run.
/// - `judge_model`, `judge_tie`, `judge_entries`: equal when a planned
///   scenario is judged; a run recorded without judge entries (before
///   issue 31) never answers a judged rerun. Unjudged, they change nothing.
/// - `selectors`, `include_no_context`, `limit`, `repeats`: they make the
///   plan, whose every request hash is looked up (an earlier, larger plan
///   that answered each of them is fine).
/// - `tool_version`, `benchmark_hash`: equal (the checks, the judge
///   prompts, the quality score, the content and its rubrics).
/// - `blocked_as`: equal: it changes the score of the same results.
/// - `concurrency`, `no_cache`, `max_cost`, `batch`, `batch_api`: how and within what
///   budget the replies were got, not what they are. Retries, timeouts and
///   the reply size limit are not recorded and need not be: they only
///   decide whether a provider error is stored, and a result with one
///   counts as not answered.
fn same_outcome(now: &RunSettings, before: &RunSettings, judged: bool) -> bool {
    now.model.id == before.model.id
        && now.tool_version == before.tool_version
        && now.benchmark_hash == before.benchmark_hash
        && now.blocked_as == before.blocked_as
        && now.user_model == before.user_model
        && (!judged
            || (now.judge_model == before.judge_model
                && now.judge_tie == before.judge_tie
                && before.judge_entries.is_some()
                && now.judge_entries == before.judge_entries))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ModelEntry;
    use crate::run::Selection;

    fn settings(judge_temperature: Option<Option<f64>>) -> RunSettings {
        let mut s = Selection::everything().settings(
            ModelEntry::new("m"),
            Some("j".into()),
            Default::default(),
            false,
            "hash",
        );
        s.judge_entries = judge_temperature.map(|t| {
            vec![ModelEntry {
                temperature: t,
                ..ModelEntry::new("j")
            }]
        });
        s
    }

    #[test]
    fn judges_count_only_for_judged_plans_and_must_be_recorded_and_equal() {
        let now = settings(Some(Some(0.0)));
        assert!(same_outcome(&now, &settings(Some(Some(0.0))), true));
        // A judge entry changed under the same content hash: not the same.
        assert!(!same_outcome(&now, &settings(Some(Some(0.5))), true));
        // Recorded before judge entries were: never for a judged plan.
        assert!(!same_outcome(&now, &settings(None), true));
        // Without a judged scenario neither matters.
        assert!(same_outcome(&now, &settings(Some(Some(0.5))), false));
        assert!(same_outcome(&now, &settings(None), false));
        let other_judge = RunSettings {
            judge_model: Some("k".into()),
            ..settings(Some(Some(0.0)))
        };
        assert!(!same_outcome(&now, &other_judge, true));
    }

    #[test]
    fn scoring_tool_and_content_must_match_how_replies_were_got_need_not() {
        let now = settings(Some(None));
        let with = |f: fn(&mut RunSettings)| {
            let mut s = settings(Some(None));
            f(&mut s);
            s
        };
        assert!(!same_outcome(
            &now,
            &with(|s| s.blocked_as = crate::domain::BlockedAs::Fail),
            false
        ));
        assert!(!same_outcome(
            &now,
            &with(|s| s.tool_version = "0.0.1".into()),
            false
        ));
        assert!(!same_outcome(
            &now,
            &with(|s| s.benchmark_hash = "other".into()),
            false
        ));
        assert!(!same_outcome(
            &now,
            &with(|s| s.model.id = "n".into()),
            false
        ));
        assert!(same_outcome(
            &now,
            &with(|s| {
                s.no_cache = true;
                s.max_cost = Some(1.0);
                s.concurrency = std::num::NonZeroUsize::new(64).unwrap();
                s.batch = Some("token".into());
                s.model.price = Some(crate::domain::Price {
                    prompt_per_mtok: 1.0,
                    completion_per_mtok: 2.0,
                });
            }),
            false
        ));
    }
}
