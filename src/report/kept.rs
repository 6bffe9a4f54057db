//! Kept analyses (issue 45): `report` on its default path scores the
//! latest completed run of every model, and a run's analysis (the
//! bootstrap of 1,000 resamples, the quality summary, the criteria) takes
//! about 0.5 s per 100,000 results: ten such runs took 5 s. A completed
//! run's results no longer change, so `run-batch` keeps each completed
//! run's report data ([`ModelReport`] before the review sections and the
//! behaviours' names, which `report` adds afresh) as JSON, and `report`
//! reads it instead.
//!
//! A kept analysis is used only under the key it was kept with, a hash of
//! everything it depends on: this format and the helmbench binary that
//! computed it, the run's id and state and a fingerprint of its results
//! ([`Store::analysis_state`]: a resume, a re-judge or any result written
//! or deleted changes it), and the weights, floors, their source and
//! `--blocked-as`. Any difference, an unreadable body, a run not
//! completed or `--details`: the analysis is computed afresh, as without
//! one. It is written only where its JSON reads back equal to what was
//! computed, and only if the key did not move while it was computed.

use std::collections::HashMap;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use super::Tally;
use super::model::{ModelReport, model_reports, tallied_reports};
use crate::benchmark::ScoringConfig;
use crate::domain::{RunRecord, RunStatus};
use crate::store::{Store, StoreError};

/// The layout of a kept analysis. Raise it whenever [`ModelReport`] or
/// anything computed into it changes, so no helmbench reads another's.
const FORMAT: u32 = 1;

/// The helmbench binary running: its version, its size and its change
/// time, so a rebuilt or upgraded binary (whose analysis may differ) never
/// reads what another kept. `None` (nothing kept or read) when the
/// executable cannot be looked at. On Linux the running file itself
/// (`/proc/self/exe`), even where a new one was installed over its path
/// since; elsewhere its path, looked at once, the first time it is asked
/// ([`remember_binary`] at the start of a run).
fn binary() -> Option<&'static str> {
    static STAMP: OnceLock<Option<String>> = OnceLock::new();
    STAMP
        .get_or_init(|| {
            let meta = std::fs::metadata("/proc/self/exe")
                .or_else(|_| std::env::current_exe().and_then(|p| p.metadata()))
                .ok()?;
            let modified = meta
                .modified()
                .ok()?
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?;
            Some(format!(
                "{}:{}:{}",
                env!("CARGO_PKG_VERSION"),
                meta.len(),
                modified.as_nanos()
            ))
        })
        .as_deref()
}

/// Looks at the running binary now (see [`binary`]): a run-batch asks at
/// its start, before a new helmbench could be installed over it.
pub fn remember_binary() {
    binary();
}

/// The key of `run`'s analysis with `scoring` (its own `--blocked-as`
/// set) and `source`, as the store holds it now; `None` for a run that is
/// not completed (its analysis is never kept) or when the binary cannot be
/// told apart.
async fn key(
    store: &Store,
    run: &RunRecord,
    scoring: &ScoringConfig,
    source: &str,
) -> Result<Option<String>, StoreError> {
    let Some(binary) = binary() else {
        return Ok(None);
    };
    if run.status != RunStatus::Completed {
        return Ok(None);
    }
    let state = store.analysis_state(run.run_id).await?;
    let parts = [
        format!("kept analysis {FORMAT}"),
        binary.to_string(),
        run.run_id.to_string(),
        json(&scoring.weights),
        json(&scoring.floors),
        json(&scoring.blocked_as),
        source.to_string(),
        state,
    ];
    let mut h = Sha256::new();
    for p in &parts {
        // Each part with its length: no two lists of parts hash alike.
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    Ok(Some(
        h.finalize().iter().map(|b| format!("{b:02x}")).collect(),
    ))
}

/// A part of the key as JSON (maps of numbers and an enum: serializing
/// them does not fail; if it did, the error text would stand in).
fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| format!("unserializable: {e}"))
}

/// [`model_reports`] of `runs`, each completed run's from its kept
/// analysis where one is kept under its current key, the others computed
/// (in one pass over their results). `--details` always computes.
pub async fn reports(
    store: &Store,
    runs: &[(RunRecord, ScoringConfig)],
    scoring_source: &str,
    details: bool,
) -> Result<Vec<ModelReport>, StoreError> {
    if details {
        return model_reports(store, runs, scoring_source, details).await;
    }
    let mut out: Vec<Option<ModelReport>> = Vec::with_capacity(runs.len());
    for (run, scoring) in runs {
        out.push(read(store, run, scoring, scoring_source).await?);
    }
    let missing: Vec<(RunRecord, ScoringConfig)> = runs
        .iter()
        .zip(&out)
        .filter(|(_, kept)| kept.is_none())
        .map(|(r, _)| r.clone())
        .collect();
    let mut computed = model_reports(store, &missing, scoring_source, false)
        .await?
        .into_iter();
    Ok(out
        .into_iter()
        .map(|kept| kept.or_else(|| computed.next()))
        .collect::<Option<Vec<_>>>()
        .expect("one computed report per run without a kept one"))
}

/// `run`'s kept analysis, if one is kept under its current key and reads.
async fn read(
    store: &Store,
    run: &RunRecord,
    scoring: &ScoringConfig,
    source: &str,
) -> Result<Option<ModelReport>, StoreError> {
    let Some(key) = key(store, run, scoring, source).await? else {
        return Ok(None);
    };
    let Some((kept_key, body)) = store.kept_analysis(run.run_id).await? else {
        return Ok(None);
    };
    if kept_key != key {
        return Ok(None);
    }
    match serde_json::from_str::<ModelReport>(&body) {
        Ok(mut r) => {
            overlay(&mut r, run);
            Ok(Some(r))
        }
        Err(e) => {
            tracing::debug!(run_id = run.run_id, error = %e, "kept analysis unreadable; computing it");
            Ok(None)
        }
    }
}

/// The run's own fields, always from its record as it is now (the key
/// covers them; taking them afresh costs nothing).
fn overlay(r: &mut ModelReport, run: &RunRecord) {
    r.run_id = run.run_id;
    r.model = run.model.clone();
    r.status = run.status;
    r.kind = run.kind.clone();
    r.started_at = run.started_at.clone();
    r.completed_at = run.completed_at.clone();
    r.cost_usd = run.cost_usd;
    r.judge_cost_usd = run.judge_cost_usd;
}

/// Computes and keeps the analysis of each of `run_ids` that is completed
/// (others are left alone), with `scoring` and `source` as `report` reads
/// them and each run's own `--blocked-as`. Returns how many were kept.
///
/// A run given with its [`Tally`] is analysed from it, not read back, when
/// the tally holds as many results as the store does for the run and was
/// scored with the run's `--blocked-as` (else it is read back).
pub async fn keep(
    store: &Store,
    run_ids: Vec<(i64, Option<Tally>)>,
    scoring: &ScoringConfig,
    source: &str,
) -> Result<usize, StoreError> {
    let mut runs = Vec::new();
    let mut keys = Vec::new();
    let mut tallies = HashMap::new();
    for (id, tally) in run_ids {
        let run = store.run(id).await?;
        let scoring = ScoringConfig {
            blocked_as: run.blocked_as(),
            ..scoring.clone()
        };
        if let Some(k) = key(store, &run, &scoring, source).await? {
            if let Some(t) = tally
                && t.blocked_as() == scoring.blocked_as
                && t.results() == Some(store.count_results(id).await?)
            {
                tallies.insert(id, t);
            }
            keys.push(k);
            runs.push((run, scoring));
        }
    }
    if runs.is_empty() {
        return Ok(0);
    }
    tracing::debug!(
        tallied = tallies.len(),
        runs = runs.len(),
        "keeping analyses"
    );
    let reports = tallied_reports(store, &runs, source, false, tallies).await?;
    let mut kept = 0;
    for (((run, scoring), before), report) in runs.iter().zip(keys).zip(reports) {
        // Results written meanwhile: this analysis may be of neither state.
        if key(store, run, scoring, source).await?.as_ref() != Some(&before) {
            continue;
        }
        let Ok(body) = serde_json::to_string(&report) else {
            continue;
        };
        // Kept only where it reads back as computed (a number JSON cannot
        // hold exactly would print otherwise).
        if serde_json::from_str::<ModelReport>(&body).ok().as_ref() != Some(&report) {
            tracing::debug!(
                run_id = run.run_id,
                "analysis does not read back equal from JSON; not kept"
            );
            continue;
        }
        store.keep_analysis(run.run_id, &before, &body).await?;
        kept += 1;
    }
    Ok(kept)
}
