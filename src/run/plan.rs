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
    refuse_conversations(benchmark, &cases)?;
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

/// Conversations (`turns.md`, issue 42) are loaded, checked and shown
/// (`check`, `prompts`, the dry run), but this version's runner sends one
/// message per test case: running one would score only its first reply as
/// if it were the whole conversation. Refused, naming the scenarios, until
/// the runner takes turns.
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
        "{} {} a conversation (turns.md): this helmbench checks and shows conversations (`helmbench check`, `helmbench prompts {}`) but does not send them yet, as it would score the first reply alone; leave {} out of the selection",
        names.join(", "),
        if names.len() == 1 { "is" } else { "are" },
        names[0],
        if names.len() == 1 { "it" } else { "them" },
    )))
}
