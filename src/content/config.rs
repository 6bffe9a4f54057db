//! `models.yml` and `scoring.yaml`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::error::ContentError;
use super::files::read_text;
use super::yaml::yaml_too_complex;
use crate::benchmark::Behaviour;
use crate::benchmark::ModelsConfig;
use crate::benchmark::ScoringConfig;

pub(super) fn load_models(
    root: &Path,
    errors: &mut Vec<ContentError>,
    hasher: &mut Sha256,
) -> Option<ModelsConfig> {
    let path = root.join("models.yml");
    if !path.is_file() {
        return None;
    }
    let text = read_text(&path, errors)?;
    hasher.update(text.as_bytes());
    if let Some(msg) = yaml_too_complex(&text) {
        errors.push(ContentError::new(&path, msg));
        return None;
    }
    match serde_yaml::from_str::<ModelsConfig>(&text) {
        Ok(m) => {
            let mut seen = BTreeSet::new();
            for (i, model) in m.models.iter().enumerate() {
                if model.id.trim().is_empty() {
                    errors.push(ContentError::new(
                        &path,
                        format!("models[{i}] has an empty `id` (expected provider/model)"),
                    ));
                } else if let Err(why) = crate::domain::check_model_id(&model.id) {
                    errors.push(ContentError::new(&path, format!("models[{i}]: {why}")));
                    continue;
                } else if !seen.insert(model.id.as_str()) {
                    errors.push(ContentError::new(
                        &path,
                        format!("model `{}` is listed twice", model.id),
                    ));
                }
                if let Some(r) = &model.reasoning {
                    if r.effort.is_some() && r.max_tokens.is_some() {
                        errors.push(ContentError::new(
                            &path,
                            format!(
                                "model `{}`: reasoning has both `effort` and `max_tokens` (expected one of them)",
                                model.id
                            ),
                        ));
                    }
                    if let Some(e) = r.effort.as_deref()
                        && !["none", "minimal", "low", "medium", "high", "xhigh"].contains(&e)
                    {
                        errors.push(ContentError::new(
                            &path,
                            format!(
                                "model `{}`: reasoning effort `{e}` is not one of none, minimal, low, medium, high, xhigh",
                                model.id
                            ),
                        ));
                    }
                }
                if let Some(p) = model.price
                    && !(p.prompt_per_mtok.is_finite()
                        && p.prompt_per_mtok >= 0.0
                        && p.completion_per_mtok.is_finite()
                        && p.completion_per_mtok >= 0.0)
                {
                    errors.push(ContentError::new(
                        &path,
                        format!(
                            "model `{}`: price {{prompt_per_mtok: {}, completion_per_mtok: {}}} (expected USD per million tokens, 0 or more)",
                            model.id, p.prompt_per_mtok, p.completion_per_mtok
                        ),
                    ));
                }
                if let Some(t) = model.temperature
                    && !(0.0..=2.0).contains(&t)
                {
                    errors.push(ContentError::new(
                        &path,
                        format!(
                            "model `{}`: temperature {t} is out of range (expected 0 to 2)",
                            model.id
                        ),
                    ));
                }
            }
            if let Some(judge) = m.marking_model.as_deref()
                && let Err(why) = crate::domain::check_model_id(judge)
            {
                errors.push(ContentError::new(&path, format!("marking_model: {why}")));
            }
            Some(m)
        }
        Err(e) => {
            let line = e.location().map(|l| l.line());
            let mut err = ContentError::new(
                &path,
                format!(
                    "invalid models.yml: {e} (expected `marking_model: ...` and `models: [{{id: ...}}]` with optional temperature, seed, max_tokens, provider: {{order, only, ignore, allow_fallbacks, sort, quantizations, data_collection, zdr, max_price}} reasoning: {{effort, max_tokens, exclude, enabled}}, judge_only, and for an OpenAI-compatible server api: openai-compatible, structured_outputs: true|false, price: {{prompt_per_mtok, completion_per_mtok}})"
                ),
            );
            err.line = line;
            errors.push(err);
            None
        }
    }
}

pub(super) fn load_scoring(
    root: &Path,
    errors: &mut Vec<ContentError>,
    hasher: &mut Sha256,
) -> ScoringConfig {
    let path = root.join("scoring.yaml");
    if !path.is_file() {
        return ScoringConfig::default();
    }
    let Some(text) = read_text(&path, errors) else {
        return ScoringConfig::default();
    };
    hasher.update(text.as_bytes());
    if let Some(msg) = yaml_too_complex(&text) {
        errors.push(ContentError::new(&path, msg));
        return ScoringConfig::default();
    }
    match serde_yaml::from_str::<Option<ScoringConfig>>(&text) {
        Ok(c) => c.unwrap_or_default(),
        Err(e) => {
            let mut err = ContentError::new(
                &path,
                format!(
                    "invalid scoring.yaml: {e} (expected `weights: {{P1-B1: 12}}` and optional `floors: {{P1-B1: 0.8}}`)"
                ),
            );
            err.line = e.location().map(|l| l.line());
            errors.push(err);
            ScoringConfig::default()
        }
    }
}

pub(super) fn check_scoring(
    root: &Path,
    scoring: &ScoringConfig,
    behaviours: &BTreeMap<String, Behaviour>,
    errors: &mut Vec<ContentError>,
) {
    let path = root.join("scoring.yaml");
    for (code, w) in &scoring.weights {
        if !w.is_finite() || *w < 0.0 {
            errors.push(ContentError::new(
                &path,
                format!("weight of {code} is {w} (expected a number of 0 or more)"),
            ));
        }
        if !behaviours.contains_key(code) {
            errors.push(ContentError::new(&path, format!("weights names {code}, which has no scenarios (expected a behaviour code such as P1-B1)")));
        }
    }
    for (code, f) in &scoring.floors {
        if !(0.0..=1.0).contains(f) {
            errors.push(ContentError::new(
                &path,
                format!("floor of {code} is {f} (expected a score from 0 to 1)"),
            ));
        }
        if !behaviours.contains_key(code) {
            errors.push(ContentError::new(&path, format!("floors names {code}, which has no scenarios (expected a behaviour code such as P1-B1)")));
        }
    }
}
