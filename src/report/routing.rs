//! What answered a run (issue 22): how many replies another model served
//! than the one requested, which providers served them, and provider
//! errors by their `error_type`. `runs` and `report` show the counts and
//! warn: a score is only the requested model's when that model answered.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::domain::same_model;
use crate::store::{Store, StoreError};

/// Routing counts of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Routing {
    /// Replies whose serving model was recorded.
    pub replies_with_served_model: i64,
    /// Of those, replies another model served than the one requested.
    pub served_by_other_model: i64,
    /// Those other models, with their reply counts.
    pub other_models: BTreeMap<String, i64>,
    /// Replies per serving provider.
    pub providers: BTreeMap<String, i64>,
    /// Judge answers another model served than the judge requested.
    pub judge_served_by_other_model: i64,
    /// Provider errors by `error.metadata.error_type` (`unspecified` when
    /// the provider gave none).
    pub provider_errors_by_type: BTreeMap<String, i64>,
}

/// Routing counts per run id (one run, or every run when `None`).
pub async fn by_run(
    store: &Store,
    run_id: Option<i64>,
) -> Result<BTreeMap<i64, Routing>, StoreError> {
    let mut out: BTreeMap<i64, Routing> = BTreeMap::new();
    for c in store.served_counts(run_id).await? {
        let r = out.entry(c.run_id).or_default();
        let Some(served) = c.served_model else {
            continue;
        };
        let other = !same_model(&c.requested, &served);
        if c.call == "judge" {
            if other {
                r.judge_served_by_other_model += c.replies;
            }
            continue;
        }
        r.replies_with_served_model += c.replies;
        if other {
            r.served_by_other_model += c.replies;
            *r.other_models.entry(served).or_default() += c.replies;
        }
        if let Some(p) = c.provider {
            *r.providers.entry(p).or_default() += c.replies;
        }
    }
    for e in store.error_type_counts(run_id).await? {
        *out.entry(e.run_id)
            .or_default()
            .provider_errors_by_type
            .entry(e.error_type.unwrap_or_else(|| "unspecified".into()))
            .or_default() += e.results;
    }
    Ok(out)
}

fn counts(m: &BTreeMap<String, i64>) -> String {
    let mut v: Vec<(&String, &i64)> = m.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    v.iter()
        .map(|(k, n)| format!("{k} ×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Routing {
    /// The warnings of run `run_id` of `model`, one line each.
    pub fn warnings(&self, run_id: i64, model: &str) -> Vec<String> {
        let mut w = Vec::new();
        if self.served_by_other_model > 0 {
            w.push(format!(
                "warning: run {run_id}: {} of {} replies were served by another model than {model} ({}); its scores are not {model}'s alone (pin routing with `provider: {{allow_fallbacks: false}}` in models.yml)",
                self.served_by_other_model,
                self.replies_with_served_model,
                counts(&self.other_models)
            ));
        }
        if self.judge_served_by_other_model > 0 {
            w.push(format!(
                "warning: run {run_id}: {} judge answers were served by another model than the judge requested",
                self.judge_served_by_other_model
            ));
        }
        if !self.provider_errors_by_type.is_empty() {
            w.push(format!(
                "run {run_id}: provider errors by type: {}",
                counts(&self.provider_errors_by_type)
            ));
        }
        w
    }
}
