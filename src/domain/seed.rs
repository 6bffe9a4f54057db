//! The ids a benchmark's content got when it was seeded into the store:
//! every result a run writes points at the exact version of the scenario
//! and components it was built from through them.

use std::collections::HashMap;

/// Ids of the seeded rows of one benchmark, by code.
#[derive(Debug, Clone, Default)]
pub struct SeedIds {
    pub benchmark_id: i64,
    pub scenarios: HashMap<String, i64>,
    /// By full code (`P1-B1-S1-C1`).
    pub conditions: HashMap<String, i64>,
    pub user_contexts: HashMap<String, i64>,
    pub perturbations: HashMap<String, i64>,
}
