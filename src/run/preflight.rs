//! What refuses a batch before anything is paid: a model or judge the
//! provider's catalog does not list, or that cannot answer in a JSON schema
//! (never overridable), and, unless `--yes`, a run that could not be priced
//! or whose estimate's upper end passes the budget or the key's remaining
//! limit. `estimate` prints these; `run-batch` stops on them.

use super::estimate::Estimate;
use crate::domain::{Api, ModelEntry};
use crate::openrouter::catalog::{Catalog, CatalogModel, KeyInfo};

/// An estimate with what it was priced from.
pub struct Priced {
    pub estimate: Estimate,
    /// The catalog, or why it could not be read.
    pub catalog: Result<Catalog, String>,
    /// The key's limit: None without a key (or without an OpenRouter
    /// model: other servers have no `/key`); Err when `/key` failed.
    pub key: Option<Result<KeyInfo, String>>,
    /// The wire format of a model whose entry names none (`--api`).
    pub api: Api,
    /// Why the server is not OpenRouter (a plain model list, no `/key`),
    /// when it is not.
    pub not_openrouter: Option<String>,
}

/// The request settings of `id` (a model of the run, or a judge: its
/// entry, else a judge's defaults) and its wire format.
fn settings_of(p: &Priced, entries: &[ModelEntry], id: &str, judge: bool) -> (ModelEntry, Api) {
    let entry = if judge {
        crate::judging::judge::settings(id, entries)
    } else {
        entries
            .iter()
            .find(|e| e.id == id)
            .cloned()
            .unwrap_or_else(|| ModelEntry::new(id))
    };
    let api = entry.api_or(p.api);
    (entry, api)
}

/// The models and judges of the run that are sent in OpenAI's format
/// and need structured output without their entry saying whether they
/// have it (`structured_outputs:`): each is asked once, by a probe request,
/// before the run starts.
pub fn to_probe(p: &Priced, entries: &[ModelEntry]) -> Vec<ModelEntry> {
    let e = &p.estimate;
    let models = e
        .models
        .iter()
        .filter(|m| m.structured)
        .map(|m| settings_of(p, entries, &m.model, false));
    let judges = e
        .judge_model
        .as_deref()
        .map(crate::judging::panel::judges)
        .unwrap_or_default()
        .into_iter()
        .map(|j| settings_of(p, entries, j, true));
    let mut out: Vec<ModelEntry> = Vec::new();
    for (entry, api) in models.chain(judges) {
        if api == Api::OpenaiCompatible
            && entry.structured_outputs.is_none()
            && !out.iter().any(|o| o.id == entry.id)
        {
            out.push(entry);
        }
    }
    out
}

/// What refuses an OpenAI-compatible model or judge (`what` names it):
/// settings that could not be sent, a model the server's list lacks, no
/// structured output where it is needed, and a budget with no price to
/// keep it by. None of them overridable.
fn compat_refusals(
    p: &Priced,
    what: &str,
    entry: &ModelEntry,
    structured: bool,
    max_cost: Option<f64>,
) -> Vec<String> {
    let mut out = Vec::new();
    for field in crate::openrouter::unsendable(entry) {
        out.push(format!(
            "{what} is sent in OpenAI's format (api: openai-compatible), which has no `{field}` (only `reasoning.effort`, as reasoning_effort): remove `{field}` from its entry in models.yml"
        ));
    }
    if let Ok(c) = &p.catalog
        && !c.is_empty()
        && find(c, &entry.id).is_none()
    {
        out.push(format!(
            "{what} is not in the server's model list (GET /models){}: check its id in models.yml or --models",
            nearest(c, &entry.id).map_or_else(String::new, |n| format!("; did you mean `{n}`?"))
        ));
    }
    if structured && entry.structured_outputs == Some(false) {
        out.push(format!(
            "{what} has `structured_outputs: false` in models.yml, and its requests need a JSON-schema answer (a judge, or the deterministic scenarios of this selection): choose another model or leave those scenarios out"
        ));
    }
    if max_cost.is_some() && entry.price.is_none() {
        out.push(format!(
            "--max-cost cannot be kept: {what} is sent in OpenAI's format and has no price, so what it spends is unknown: add `price: {{prompt_per_mtok: …, completion_per_mtok: …}}` to its entry in models.yml, or drop --max-cost"
        ));
    }
    out
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
    // OpenAI-compatible models and judges first: their refusals do not
    // depend on the catalog's prices or parameters (it has neither).
    let judge_ids = e
        .judge_model
        .as_deref()
        .map(crate::judging::panel::judges)
        .unwrap_or_default();
    let mut compat: Vec<&str> = Vec::new();
    for m in &e.models {
        let (entry, api) = settings_of(p, entries, &m.model, false);
        if api == Api::OpenaiCompatible {
            compat.push(&m.model);
            let what = format!("model `{}`", m.model);
            out.extend(
                compat_refusals(p, &what, &entry, m.structured, max_cost)
                    .into_iter()
                    .map(hard),
            );
        }
    }
    for &j in &judge_ids {
        let (entry, api) = settings_of(p, entries, j, true);
        if api == Api::OpenaiCompatible {
            compat.push(j);
            let what = format!("judge `{j}`");
            out.extend(
                compat_refusals(p, &what, &entry, true, max_cost)
                    .into_iter()
                    .map(hard),
            );
        }
    }
    // The simulated user's model (issue 42) is asked without a schema.
    let user_model = e.user_model.as_deref();
    if let Some(u) = user_model {
        let (entry, api) = settings_of(p, entries, u, false);
        if api == Api::OpenaiCompatible {
            compat.push(u);
            let what = format!("user model `{u}` (--user-model)");
            out.extend(
                compat_refusals(p, &what, &entry, false, max_cost)
                    .into_iter()
                    .map(hard),
            );
        }
    }
    // Sent in OpenRouter's format to a server that is not OpenRouter:
    // every per-model check below would name a symptom (no structured
    // outputs, no price); one line names the setting that fixes them all.
    let openrouter_format: Vec<&str> = e
        .models
        .iter()
        .map(|m| m.model.as_str())
        .chain(judge_ids.iter().copied())
        .chain(user_model)
        .filter(|id| !compat.contains(id))
        .collect();
    if let Some(why) = &p.not_openrouter
        && !openrouter_format.is_empty()
    {
        out.push(hard(format!(
            "the server at OPENROUTER_BASE_URL is not OpenRouter ({why}), but {} would be sent in OpenRouter's format: pass --api openai-compatible (or HELMBENCH_API=openai-compatible), or set `api: openai-compatible` on their entries in models.yml",
            openrouter_format
                .iter()
                .map(|id| format!("`{id}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
        return out;
    }
    match &p.catalog {
        Ok(c) => {
            for m in e.models.iter().filter(|m| !compat.contains(&m.model.as_str())) {
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
            for j in judge_ids.iter().copied().filter(|j| !compat.contains(j)) {
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
            if let Some(u) = user_model.filter(|u| !compat.contains(u)) {
                match find(c, u) {
                    None => out.push(hard(format!(
                        "user model `{u}` (--user-model) is not in OpenRouter's model list (GET /models){}",
                        nearest(c, u).map_or_else(String::new, |n| format!("; did you mean `{n}`?"))
                    ))),
                    Some(cm) => {
                        let (entry, _) = settings_of(p, entries, u, false);
                        for param in unsupported(cm, &entry, false) {
                            out.push(hard(format!(
                                "user model `{u}` (--user-model) does not take `{param}` (not among its supported_parameters in GET /models), and every simulated-user request would carry it: remove `{param}` from its entry in models.yml, or choose another user model"
                            )));
                        }
                    }
                }
            }
            // An OpenAI-compatible model without a price is unknown by
            // design (a local server costs nothing anyone could look up).
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
                .chain(user_model.filter(|_| e.user_price.is_none()))
                .filter(|id| {
                    !crate::judging::panel::judges(id)
                        .iter()
                        .all(|j| compat.contains(j))
                })
                .collect();
            if !unpriced.is_empty() && out.is_empty() {
                out.push(soft(format!(
                    "could not price {} (no usable price in GET /models)",
                    unpriced.join(", ")
                )));
            }
        }
        Err(why) => out.push(soft(format!(
            "could not price the run ({why}): offline, or OPENROUTER_BASE_URL has no model list (a server that is not OpenRouter takes --api openai-compatible); models and the judge were not checked either"
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
