//! What refuses a batch before anything is paid: a model or judge the
//! provider's catalog does not list, or that cannot answer in a JSON schema
//! (never overridable), and, unless `--yes`, a run that could not be priced
//! or whose estimate's upper end passes the budget or the key's remaining
//! limit. `estimate` prints these; `run-batch` stops on them.

use super::estimate::Estimate;
use crate::domain::ModelEntry;
use crate::openrouter::catalog::{Catalog, CatalogModel, KeyInfo};

/// An estimate with what it was priced from.
pub struct Priced {
    pub estimate: Estimate,
    /// The catalog, or why it could not be read.
    pub catalog: Result<Catalog, String>,
    /// The key's limit: None without a key; Err when `/key` failed.
    pub key: Option<Result<KeyInfo, String>>,
}

/// Why a run would not start; `overridable` ones start with `--yes`.
pub struct Refusal {
    pub message: String,
    pub overridable: bool,
}

/// The parameters a model's request carries that the catalog says the model
/// does not take (with `provider.require_parameters: true`, OpenRouter
/// answers such a request 404 "No endpoints found", at the first paid call
/// or halfway through a batch for the judge). None when the catalog lists
/// no parameters for the model (it says nothing either way).
fn unsupported<'a>(cm: &CatalogModel, entry: &'a ModelEntry, structured: bool) -> Vec<&'a str> {
    if cm.supported_parameters.is_empty() {
        return Vec::new();
    }
    crate::openrouter::sent_parameters(entry, structured)
        .into_iter()
        .filter(|p| !cm.supported_parameters.iter().any(|s| s == p))
        .collect()
}

/// `id`'s nearest ids in the catalog, for a "did you mean".
fn nearest(c: &Catalog, id: &str) -> Option<String> {
    c.ids()
        .map(|k| (strsim::levenshtein(k, id), k))
        .filter(|(d, k)| *d <= (id.len().max(k.len()) / 3).max(2))
        .min()
        .map(|(_, k)| k.to_string())
}

/// Why a batch would not start. `entries` are the request settings of the
/// models and judges by id (models.yml's, a judge's own): every parameter
/// they send is checked against the catalog.
pub fn refusals(p: &Priced, max_cost: Option<f64>, entries: &[ModelEntry]) -> Vec<Refusal> {
    let mut out = Vec::new();
    let e = &p.estimate;
    let hard = |message: String| Refusal {
        message,
        overridable: false,
    };
    let soft = |message: String| Refusal {
        message,
        overridable: true,
    };
    match &p.catalog {
        Ok(c) => {
            for m in &e.models {
                match find(c, &m.model) {
                    None => out.push(hard(format!(
                        "model `{}` is not in OpenRouter's model list (GET /models){}: check its id in models.yml or --models",
                        m.model,
                        nearest(c, &m.model).map_or_else(String::new, |n| format!("; did you mean `{n}`?"))
                    ))),
                    Some(cm) if m.structured && !cm.structured_outputs() => out.push(hard(format!(
                        "model `{}` does not support structured outputs (`structured_outputs` is not among its supported_parameters), which the deterministic scenarios of this selection need: choose another model or leave those scenarios out",
                        m.model
                    ))),
                    Some(cm) => {
                        let entry = entries
                            .iter()
                            .find(|e| e.id == m.model)
                            .cloned()
                            .unwrap_or_else(|| ModelEntry::new(&m.model));
                        for param in unsupported(cm, &entry, m.structured) {
                            out.push(hard(format!(
                                "model `{}` does not take `{param}` (not among its supported_parameters in GET /models), and every request would carry it: remove `{param}` from its entry in models.yml, or choose another model",
                                m.model
                            )));
                        }
                    }
                }
            }
            for j in e
                .judge_model
                .as_deref()
                .map(crate::judging::panel::judges)
                .unwrap_or_default()
            {
                match find(c, j) {
                    None => out.push(hard(format!(
                        "judge `{j}` (marking_model of models.yml, or --judges) is not in OpenRouter's model list (GET /models){}",
                        nearest(c, j).map_or_else(String::new, |n| format!("; did you mean `{n}`?"))
                    ))),
                    Some(cm) if !cm.structured_outputs() => out.push(hard(format!(
                        "judge `{j}` (marking_model of models.yml, or --judges) does not support structured outputs, which every judge request needs"
                    ))),
                    Some(cm) => {
                        let settings = crate::judging::judge::settings(j, entries);
                        let has_entry = entries.iter().any(|e| e.id == j);
                        for param in unsupported(cm, &settings, true) {
                            let fix = if has_entry {
                                format!("remove `{param}` from the judge's entry in models.yml")
                            } else {
                                format!("give the judge its own entry in models.yml without `{param}` (a judge without one is sent temperature 0 and max_tokens 400)")
                            };
                            out.push(hard(format!(
                                "judge `{j}` does not take `{param}` (not among its supported_parameters in GET /models), and every judge request would carry it: {fix}, or choose another judge"
                            )));
                        }
                    }
                }
            }
            let unpriced: Vec<&str> = e
                .models
                .iter()
                .filter(|m| m.price.is_none())
                .map(|m| m.model.as_str())
                .chain(
                    e.judge_model
                        .as_deref()
                        .filter(|_| e.judge_price.is_none()),
                )
                .collect();
            if !unpriced.is_empty() && out.is_empty() {
                out.push(soft(format!(
                    "could not price {} (no usable price in GET /models)",
                    unpriced.join(", ")
                )));
            }
        }
        Err(why) => out.push(soft(format!(
            "could not price the run ({why}): offline, or OPENROUTER_BASE_URL has no model list; models and the judge were not checked either"
        ))),
    }
    if let Some([_, high]) = e.cost_usd {
        if let Some(max) = max_cost
            && high > max
        {
            out.push(soft(format!(
                "the estimate's upper end ${high:.4} exceeds --max-cost ${max:.4} (lower --limit or the selection, or raise --max-cost; the run would stop at --max-cost)"
            )));
        }
        if let Some(Ok(KeyInfo {
            limit_remaining: Some(left),
            ..
        })) = &p.key
            && high > *left
        {
            out.push(soft(format!(
                "the estimate's upper end ${high:.4} exceeds the key's remaining limit ${left:.4} (GET /key): the run would stop with openrouter_key_limit part-way"
            )));
        }
    }
    out
}

/// A model of the catalog by id; a routing suffix OpenRouter does not list
/// separately (`:nitro`, `:floor`, `:online`) is looked up without it.
pub fn find<'c>(c: &'c Catalog, id: &str) -> Option<&'c CatalogModel> {
    c.get(id)
        .or_else(|| id.split_once(':').and_then(|(base, _)| c.get(base)))
}
