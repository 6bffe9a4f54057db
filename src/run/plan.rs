//! The planned work of a run: every selected test case times its repeats.

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
        refuse_conversations(benchmark, &cases)?;
    }
    refuse_variants(benchmark, &cases)?;
    let repeats = settings.repeats.max(1);
    // Sized up front: collecting a flat_map would double its way there and
    // hold both copies at the peak.
    let mut work = Vec::with_capacity(cases.len() * repeats as usize);
    for c in cases {
        work.extend((0..repeats).map(|r| (c, r)));
    }
    Ok(work)
}

/// Conversations (`turns.md`, issue 42) are sent turn by turn by the
/// synchronous runner; the Batch API sends one request per test case and
/// would score the first reply alone. Refused there, naming the scenarios,
/// until it sends a round per turn.
fn refuse_conversations(benchmark: &Benchmark, cases: &[CaseIndex]) -> crate::Result<()> {
    let mut names: Vec<&str> = Vec::new();
    for c in cases {
        let s = &benchmark.scenarios[c.scenario as usize];
        if !s.turns.is_empty() && names.last() != Some(&s.code.as_str()) {
            names.push(&s.code);
        }
    }
    names.dedup();
    if names.is_empty() {
        return Ok(());
    }
    Err(crate::Error::usage(format!(
        "{} {} a conversation (turns.md): --batch-api does not send conversations yet (it would score the first reply alone); run {} without --batch-api, or leave {} out of the selection",
        names.join(", "),
        if names.len() == 1 { "is" } else { "are" },
        if names.len() == 1 { "it" } else { "them" },
        if names.len() == 1 { "it" } else { "them" },
    )))
}

/// Variants (issue 43) are checked and shown (`prompts --variants`), not
/// yet run: a run would send the originals alone while the content asks
/// for the variants beside them. Refused, naming the scenarios.
fn refuse_variants(benchmark: &Benchmark, cases: &[CaseIndex]) -> crate::Result<()> {
    let mut names: Vec<&str> = cases
        .iter()
        .map(|c| &benchmark.scenarios[c.scenario as usize])
        .filter(|s| !s.variants.is_empty())
        .map(|s| s.code.as_str())
        .collect();
    names.dedup();
    let Some(first) = names.first() else {
        return Ok(());
    };
    Err(crate::Error::usage(format!(
        "{} {} variants of the user's words (`variants:`): this helmbench checks and shows them (`helmbench prompts {first}`) but does not send them yet; remove `variants:` (or variants.yml) to run the originals, or leave {} out of the selection",
        names.join(", "),
        if names.len() == 1 { "names" } else { "name" },
        if names.len() == 1 { "it" } else { "them" },
    )))
}
