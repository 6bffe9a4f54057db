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

/// The codes of a store's seeded rows by id: what a result row's ids name.
#[derive(Debug, Clone, Default)]
pub struct CodeBook {
    /// Scenario id -> (behaviour code, scenario code).
    pub scenarios: HashMap<i64, (String, String)>,
    pub conditions: HashMap<i64, String>,
    pub user_contexts: HashMap<i64, String>,
    pub perturbations: HashMap<i64, String>,
}
