//! What refuses a batch before anything is paid: a model or judge the
//! provider's catalog does not list, or that cannot answer in a JSON schema
//! (never overridable), and, unless `--yes`, a run that could not be priced
//! or whose estimate's upper end passes the budget or the key's remaining
//! limit. `estimate` prints these; `run-batch` stops on them.

use super::estimate::Estimate;
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

pub fn refusals(p: &Priced, max_cost: Option<f64>) -> Vec<Refusal> {
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
                        "model `{}` is not in OpenRouter's model list (GET /models): check its id in models.yml or --models",
                        m.model
                    ))),
                    Some(cm) if m.structured && !cm.structured_outputs() => out.push(hard(format!(
                        "model `{}` does not support structured outputs (`structured_outputs` is not among its supported_parameters), which the deterministic scenarios of this selection need: choose another model or leave those scenarios out",
                        m.model
                    ))),
                    _ => {}
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
                        "judge `{j}` (marking_model of models.yml, or --judges) is not in OpenRouter's model list (GET /models)"
                    ))),
                    Some(cm) if !cm.structured_outputs() => out.push(hard(format!(
                        "judge `{j}` (marking_model of models.yml, or --judges) does not support structured outputs, which every judge request needs"
                    ))),
                    _ => {}
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
