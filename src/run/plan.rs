//! The planned work of a run: every selected test case, each followed by
//! its variants (issue 43), times its repeats.

use crate::benchmark::Benchmark;
use crate::benchmark::cases;
use crate::benchmark::cases::{CaseIndex, Selector};
use crate::run::RunSettings;

/// The planned work of a run: every selected test case times its repeats.
pub fn plan(benchmark: &Benchmark, settings: &RunSettings) -> crate::Result<Vec<(CaseIndex, u32)>> {
    let selectors = settings
        .selectors
        .iter()
        .map(|s| Selector::parse(s).map_err(crate::Error::usage))
        .collect::<crate::Result<Vec<_>>>()?;
    let mut cases = cases::select_indices(benchmark, &selectors, settings.include_no_context)
        .map_err(crate::Error::usage)?;
    if let Some(limit) = settings.limit {
        cases.truncate(limit);
    }
    if settings.batch_api.is_some() {
        refuse_simulated_users(benchmark, &cases)?;
    }
    // The limit counts originals: a variant always runs beside its original.
    let cases = crate::benchmark::vary::with_variants(benchmark, &cases);
    let repeats = settings.repeats.max(1);
    // Sized up front: collecting a flat_map would double its way there and
    // hold both copies at the peak.
    let mut work = Vec::with_capacity(cases.len() * repeats as usize);
    for c in cases {
        work.extend((0..repeats).map(|r| (c, r)));
    }
    Ok(work)
}

/// Conversations with a simulated user (`personas.md`, issue 42) are not
/// sent through the Batch API: each user message is the simulator's answer
/// to the reply before it, asked at once and at the synchronous price, so a
/// round of batches would wait on calls its budget does not hold. Refused
/// before anything is sent, naming the scenarios; scripted conversations
/// go a round per turn.
fn refuse_simulated_users(benchmark: &Benchmark, cases: &[CaseIndex]) -> crate::Result<()> {
    let mut names: Vec<&str> = Vec::new();
    for c in cases {
        let s = &benchmark.scenarios[c.scenario as usize];
        if !s.personas.is_empty() && !names.contains(&s.code.as_str()) {
            names.push(&s.code);
        }
    }
    if names.is_empty() {
        return Ok(());
    }
    Err(crate::Error::usage(format!(
        "{} {} a simulated user (personas.md): --batch-api sends scripted conversations (turns.md) only; run {} without --batch-api, or leave {} out of the selection",
        names.join(", "),
        if names.len() == 1 { "has" } else { "have" },
        if names.len() == 1 { "it" } else { "them" },
        if names.len() == 1 { "it" } else { "them" },
    )))
}
