//! A run's analysis taken as its results are committed (issue 45): the
//! run's writer hands each commit's results here in the order the commit
//! gave them their ids, so at the end of the batch the analysis is kept
//! without reading the run back (that read was 3-4 % of a run's CPU, and
//! with five models at once it ran after the last reply, a third of a
//! second of wall time).
//!
//! It must be what [`super::model::analysed`] computes from the stored
//! rows, to the bit: each result is read as [`crate::store::Store::scored_rows`]
//! reads it (the same code book, quality scores as their stored JSON
//! reads back), in id order. Whenever that cannot be vouched for (a result
//! the commit did not write, a judge error replaced, a variant, a resumed
//! or shared run, any result written by someone else: its count then
//! differs from the store's) the tally is spoiled and the run is read back
//! as before.

use std::collections::HashMap;
use std::sync::Arc;

use super::quality::{QualityCollector, QualitySummary};
use crate::benchmark::ScoringConfig;
use crate::benchmark::vary::split_code;
use crate::domain::{BlockedAs, CodeBook, NewResult, QualityScores, StoredResult};
use crate::scoring::analysis::{Analyser, Analysis};

/// One run's running analysis; see the module's text.
pub struct Tally {
    codes: Arc<CodeBook>,
    blocked_as: BlockedAs,
    analyser: Analyser,
    quality: QualityCollector,
    /// The reply text of each result kept as a quality example so far, by
    /// its number in the tally (it has no id here).
    texts: HashMap<i64, String>,
    /// Results added.
    added: i64,
    spoiled: bool,
    /// The result being added, refilled each time: its strings keep their
    /// allocations, as in the scan.
    scratch: StoredResult,
}

impl std::fmt::Debug for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tally")
            .field("added", &self.added)
            .field("spoiled", &self.spoiled)
            .finish_non_exhaustive()
    }
}

impl Tally {
    /// An empty tally of a run scored with `blocked_as` (its `--blocked-as`).
    pub fn new(codes: Arc<CodeBook>, blocked_as: BlockedAs) -> Tally {
        Tally {
            codes,
            blocked_as,
            analyser: Analyser::new(blocked_as),
            quality: QualityCollector::default(),
            texts: HashMap::new(),
            added: 0,
            spoiled: false,
            scratch: StoredResult::default(),
        }
    }

    /// The results of one commit of the run, `written` of which it wrote.
    /// A commit writes the results without judgements first, then the
    /// judged ones, each group in its order: their ids run in that order.
    pub fn committed(&mut self, results: &[NewResult], written: usize) {
        if self.spoiled {
            return;
        }
        if written != results.len() || results.iter().any(|r| r.replaces) {
            self.spoil();
            return;
        }
        let (plain, judged): (Vec<&NewResult>, Vec<&NewResult>) =
            results.iter().partition(|r| r.judgements.is_empty());
        for r in plain.into_iter().chain(judged) {
            if !self.add(r) {
                self.spoil();
                return;
            }
        }
    }

    /// From now on the run is read back at the end.
    pub fn spoil(&mut self) {
        self.spoiled = true;
        self.texts = HashMap::new();
    }

    /// The `--blocked-as` it scores with.
    pub fn blocked_as(&self) -> BlockedAs {
        self.blocked_as
    }

    /// How many results it holds, `None` once spoiled: the tally stands
    /// for the run only if the store holds as many.
    pub fn results(&self) -> Option<i64> {
        (!self.spoiled).then_some(self.added)
    }

    /// Adds `r` as the scan reads it back; false when it cannot.
    fn add(&mut self, r: &NewResult) -> bool {
        // A variant's result is scored apart, from a second read.
        if split_code(&r.test_code).1.is_some() {
            return false;
        }
        let codes = &self.codes;
        let Some((behaviour, scenario)) = codes.scenarios.get(&r.scenario_id) else {
            return false;
        };
        let (Some(condition), Some(perturbation)) = (
            codes.conditions.get(&r.condition_id),
            codes.perturbations.get(&r.perturbation_id),
        ) else {
            return false;
        };
        let user_context = match r.user_context_id {
            Some(id) => match codes.user_contexts.get(&id) {
                Some(c) => Some(c.as_str()),
                None => return false,
            },
            None => None,
        };
        let stored = &mut self.scratch;
        set(&mut stored.test_code, &r.test_code);
        set(&mut stored.behaviour, behaviour);
        set(&mut stored.scenario, scenario);
        set(&mut stored.condition, condition);
        set(&mut stored.perturbation, perturbation);
        match (user_context, &mut stored.user_context) {
            (Some(c), Some(kept)) => set(kept, c),
            (c, kept) => *kept = c.map(str::to_string),
        }
        stored.repeat_index = r.repeat_index;
        stored.base_severity = r.base_severity;
        stored.difficulty = r.difficulty;
        stored.passed = r.passed;
        stored.matched = r.matched;
        stored.error_kind = r.error_kind;
        // Stored as JSON, where a number that is not finite is `null`, which
        // reads back as no scores at all.
        let scores = r.quality.filter(all_finite);
        let n = self.added + 1;
        if self
            .quality
            .add(n, &r.test_code, r.repeat_index, r.base_severity, scores)
        {
            let response = r.response.as_deref().unwrap_or_default();
            let text = crate::judging::reply::reply_text(response, r.parsed.as_ref());
            self.texts.insert(n, text.to_string());
        }
        self.analyser.add(&self.scratch);
        self.added = n;
        true
    }

    /// The run's analysis and quality summary, as [`super::model::analysed`]
    /// gives them for a run without variants.
    pub(super) fn finish(self, scoring: &ScoringConfig) -> (Analysis, Option<QualitySummary>) {
        let kept = self.quality.kept_ids();
        let texts: HashMap<i64, String> = self
            .texts
            .into_iter()
            .filter(|(n, _)| kept.binary_search(n).is_ok())
            .collect();
        (self.analyser.finish(scoring), self.quality.finish(&texts))
    }
}

/// `to = from`, reusing `to`'s allocation.
fn set(to: &mut String, from: &str) {
    to.clear();
    to.push_str(from);
}

fn all_finite(q: &QualityScores) -> bool {
    q.values().iter().all(|v| v.is_finite())
}
