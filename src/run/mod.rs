//! Running test cases (SPEC §6, §7): the dry-run, and real runs that send
//! every planned request, judge the replies and store them. A run is
//! planned ([`plan`]), then [`run_batch`] drives workers that
//! hand results to one writer (`worker.rs`, `writer.rs`).

mod batch;
mod batch_api;
mod batch_collect;
mod batch_flight;
mod batch_submit;
mod budget;
mod cache;
mod commits;
mod complete;
mod converse;
mod dry_run;
pub mod estimate;
mod exchange;
mod lease;
mod log;
mod plan;
pub mod preflight;
mod progress;
mod settings;
mod shared;
mod signal;
mod simulate;
mod team_budget;
mod worker;
mod writer;

pub use batch::{RunContext, RunSummary, run_batch};
pub use batch_api::run_batch_api;
pub use batch_flight::{
    BatchApi, DEFAULT_BATCH_SIZE, MAX_ROUNDS as BATCH_MAX_ROUNDS, NOT_FOUND_WINDOW, POLL_FIRST,
    POLL_MAX,
};
pub use complete::{AlreadyComplete, already_complete};
pub use dry_run::{DryRunSummary, dry_run};
pub use log::write_kept;
pub use plan::plan;
pub use progress::{Progress, ProgressMode};
pub use settings::{
    BatchApiSettings, BatchShared, DEFAULT_GRACE, DEFAULT_WRITE_WAIT, Interrupt, LOG_AGE,
    MAX_CONCURRENCY, PreflightCharge, RunControl, RunSettings, Selection,
};
pub use signal::interrupt_handler;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::benchmark::cases;
    use crate::benchmark::cases::{CaseIndex, Selector};

    #[test]
    fn plan_repeats_each_test_case_in_order_and_holds_no_spare_capacity() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benchmark");
        let b = crate::content::load_strict(&root).unwrap();
        let settings = RunSettings {
            model: crate::domain::ModelEntry::new("m"),
            judge_model: None,
            judge_tie: Default::default(),
            selectors: vec!["P1-B1-S1".into()],
            include_no_context: true,
            concurrency: std::num::NonZeroUsize::MIN,
            limit: Some(5),
            repeats: 3,
            no_cache: false,
            max_cost: None,
            tool_version: String::new(),
            benchmark_hash: String::new(),
            blocked_as: Default::default(),
            judge_entries: None,
            batch: None,
            batch_api: None,
            variants: None,
            variant_seed: None,
            user_model: None,
        };
        let work = plan(&b, &settings).unwrap();
        let cases =
            cases::select_indices(&b, &[Selector::parse("P1-B1-S1").unwrap()], true).unwrap();
        let expected: Vec<(CaseIndex, u32)> = cases[..5]
            .iter()
            .flat_map(|&c| (0..3).map(move |r| (c, r)))
            .collect();
        assert_eq!(work, expected);
        // A run keeps this list for its whole length: no doubling slack.
        assert_eq!(work.capacity(), work.len());
        assert!(std::mem::size_of::<(CaseIndex, u32)>() <= 24);

        // With variants made (issue 43): each original, then its variants,
        // the limit still counting originals, the hash changed.
        let mut varied = b.clone();
        let lower = crate::benchmark::variants::parse_names("lowercase").unwrap();
        let counts = crate::benchmark::vary::expand(&mut varied, Some(&lower), 43, &cases);
        assert_eq!(counts[0].varied + counts[0].unchanged, cases.len());
        assert_ne!(varied.content_hash, b.content_hash);
        let work = plan(&varied, &settings).unwrap();
        let codes: Vec<String> = work
            .iter()
            .filter(|(_, r)| *r == 0)
            .map(|(c, _)| c.resolve(&varied).code())
            .collect();
        let originals: Vec<&String> = codes.iter().filter(|c| !c.contains('~')).collect();
        assert_eq!(originals.len(), 5);
        for pair in codes.windows(2) {
            if let Some((original, "lowercase")) = pair[1].split_once('~') {
                assert_eq!(original, pair[0]);
            }
        }
        assert!(codes.len() > 5, "{codes:?}");
    }
}
