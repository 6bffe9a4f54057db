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
