//! One scenario folder: its prompt file, schema, evaluation, components,
//! component overrides and rubrics.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::components::load_components;
use super::error::ContentError;
use super::files::file_name;
use super::files::file_names;
use super::files::find_file;
use super::files::json_type;
use super::files::read_text;
use super::markdown::{self, line_of, split_frontmatter};
use super::overrides::parse_override;
use super::personas::{expand as expand_personas, load_personas};
use super::rubric::load_rubric;
use super::scan::ScenarioDir;
use super::turns::{Against, load_turns};
use super::yaml::parse_yaml_map;
use crate::benchmark::Component;
use crate::benchmark::ComponentKind;
use crate::benchmark::Evaluation;
use crate::benchmark::Scenario;
use crate::benchmark::codes::{natural_cmp, parse_segment, strip_suffix};
use crate::benchmark::sha256_hex;

pub(super) fn load_scenario(dir: &ScenarioDir, errors: &mut Vec<ContentError>) -> Option<Scenario> {
    let s_files = find_file(&dir.dir, &dir.short, "md");
    let mc_files = find_file(&dir.dir, "MCSQE", "md");
    let prompt_file = match (s_files.as_slice(), mc_files.as_slice()) {
        ([one], []) | ([], [one]) => one.clone(),
        ([], []) => {
            errors.push(ContentError::new(
                &dir.dir,
                format!("scenario {} has no prompt file (expected {}.md, or MCSQE.md for multi-criteria SQE)", dir.code, dir.short),
            ));
            return None;
        }
        _ => {
            let names = file_names(s_files.iter().chain(&mc_files));
            errors.push(ContentError::new(
                &dir.dir,
                format!(
                    "scenario {} has several prompt files ({}); expected exactly one",
                    dir.code, names
                ),
            ));
            return None;
        }
    };
    let is_mcsqe = !mc_files.is_empty();
    let text = read_text(&prompt_file, errors)?;
    let mut hash_parts: Vec<Vec<u8>> = vec![text.as_bytes().to_vec()];
    let fm = match split_frontmatter(&text) {
        Ok(fm) => fm,
        Err(e) => {
            errors.push(ContentError::new(&prompt_file, e.message).at(e.line));
            return None;
        }
    };
    let frontmatter = match fm
        .yaml
        .map(|y| parse_yaml_map(y, &prompt_file, fm.yaml_line, None))
    {
        Some(Ok(m)) => m,
        Some(Err(e)) => {
            errors.push(e);
            Map::new()
        }
        None => Map::new(),
    };
    let body_line = line_of(&text, fm.body_offset);
    let body = fm.body.to_string();
    let prompt = match markdown::to_xml(fm.body) {
        Ok(p) if p.is_empty() => {
            errors.push(ContentError::new(&prompt_file, "scenario prompt is empty (expected the scenario's instructions, e.g. under `## Your job`)"));
            String::new()
        }
        Ok(p) => p,
        Err(e) => {
            errors.push(ContentError::new(&prompt_file, e.message).at(body_line + e.line - 1));
            String::new()
        }
    };
    let evaluation = parse_evaluation(&frontmatter, &prompt_file, is_mcsqe, errors);

    // Response format: required for deterministic checks, optional for
    // judges. It is `<code>.json` whatever the prompt file is called; an
    // older `MCSQE.json` beside MCSQE.md is still read when it is the only one.
    let mut json_files = find_file(&dir.dir, &dir.short, "json");
    if is_mcsqe {
        let mc_json = find_file(&dir.dir, "MCSQE", "json");
        if !json_files.is_empty() && !mc_json.is_empty() {
            let names = file_names(json_files.iter().chain(&mc_json));
            errors.push(ContentError::new(
                &dir.dir,
                format!(
                    "several schema files ({}); expected one ({}.json beside MCSQE.md)",
                    names, dir.short
                ),
            ));
            return None;
        }
        if json_files.is_empty() {
            json_files = mc_json;
        }
    }
    let response_format = match json_files.as_slice() {
        [] => {
            if let Some(ev) = &evaluation
                && !ev.is_judged()
            {
                errors.push(ContentError::new(
                    &dir.dir,
                    format!(
                        "{} evaluation needs a response schema (expected {}.json beside {})",
                        ev.type_name(),
                        dir.short,
                        file_name(&prompt_file)
                    ),
                ));
            }
            None
        }
        [one] => {
            let raw = read_text(one, errors);
            if let Some(raw) = &raw {
                hash_parts.push(raw.as_bytes().to_vec());
            }
            raw.and_then(|raw| parse_response_format(&raw, one, errors))
        }
        many => {
            let names = file_names(many);
            errors.push(ContentError::new(
                &dir.dir,
                format!("several schema files ({}); expected one", names),
            ));
            None
        }
    };
    if let (Some(ev), Some(rf)) = (&evaluation, &response_format) {
        check_field_in_schema(ev, rf, &json_files[0], errors);
    }

    let code = &dir.code;
    let conditions = load_components(&dir.dir, code, ComponentKind::Condition, errors);
    let user_contexts = load_components(&dir.dir, code, ComponentKind::UserContext, errors);
    let perturbations = load_components(&dir.dir, code, ComponentKind::Perturbation, errors);
    for (kind, list) in [
        (ComponentKind::Condition, &conditions),
        (ComponentKind::Perturbation, &perturbations),
    ] {
        if list.as_ref().is_some_and(|l| l.is_empty()) {
            errors.push(ContentError::new(
                &dir.dir,
                format!(
                    "scenario {code} has no {}s (expected {}.md with `# {}1` sections, or {}/{}1.md)",
                    kind.as_str(),
                    kind.file_stem(),
                    kind.prefix(),
                    kind.file_stem(),
                    kind.prefix()
                ),
            ));
        }
    }

    let rubrics = match &evaluation {
        Some(Evaluation::Sqe) => {
            let found = find_file(&dir.dir, "criteria", "md");
            if let [path] = found.as_slice() {
                load_rubric(path, "criteria", errors).into_iter().collect()
            } else if found.len() > 1 {
                let names = file_names(&found);
                errors.push(ContentError::new(
                    &dir.dir,
                    format!("several rubric files ({}); expected one", names),
                ));
                Vec::new()
            } else {
                errors.push(ContentError::new(
                    &dir.dir,
                    "sqe evaluation needs a rubric (expected criteria.md in the scenario folder)",
                ));
                Vec::new()
            }
        }
        Some(Evaluation::Mcsqe) => {
            let mut files = cr_files(&dir.dir);
            files.sort_by(|a, b| natural_cmp(&a.0, &b.0));
            if files.is_empty() {
                errors.push(ContentError::new(
                    &dir.dir,
                    "mcsqe evaluation needs rubrics (expected CR1.md, CR2.md, ... beside MCSQE.md)",
                ));
            }
            for pair in files.windows(2) {
                if pair[0].0 == pair[1].0 {
                    errors.push(ContentError::new(
                        &pair[1].1,
                        format!(
                            "duplicate criterion {} (also {})",
                            pair[1].0,
                            file_name(&pair[0].1)
                        ),
                    ));
                }
            }
            files
                .iter()
                .filter_map(|(c, p)| load_rubric(p, c, errors))
                .collect()
        }
        _ => Vec::new(),
    };
    for r in &rubrics {
        hash_parts.push(r.hash.as_bytes().to_vec());
    }

    let judge_first = match frontmatter.get("judge_first") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            errors.push(
                ContentError::new(
                    &prompt_file,
                    format!("`judge_first` is {other} (expected true or false)"),
                )
                .in_section("frontmatter"),
            );
            true
        }
    };
    let (conditions, user_contexts, perturbations) = (conditions?, user_contexts?, perturbations?);
    let evaluation = evaluation?;
    let turns = load_turns(
        &dir.dir,
        code,
        &Against {
            evaluation: &evaluation,
            perturbations: &perturbations,
            rubrics: &rubrics,
        },
        errors,
    )?;
    if !judge_first && turns.is_empty() {
        errors.push(
            ContentError::new(
                &prompt_file,
                "`judge_first: false` leaves the only reply unjudged (expected it only in a scenario with turns.md)",
            )
            .in_section("frontmatter"),
        );
    }
    for t in &turns {
        hash_parts.push(t.component.hash.as_bytes().to_vec());
    }
    let personas = load_personas(&dir.dir, code, errors)?;
    if !personas.is_empty() && !turns.is_empty() {
        errors.push(ContentError::new(
            &dir.dir,
            "the scenario has both turns.md and personas.md (expected one: a scripted conversation or a simulated user)",
        ));
        return None;
    }
    for p in &personas {
        hash_parts.push(p.component.hash.as_bytes().to_vec());
    }
    // Its own `variants:` (the benchmark's variants.yml fills in the
    // scenarios without one, once every scenario is read).
    let variants = match frontmatter.get("variants") {
        None => Vec::new(),
        Some(v) => crate::benchmark::variants::parse_list(v).unwrap_or_else(|problems| {
            for p in problems {
                errors
                    .push(ContentError::new(&prompt_file, p).in_section("frontmatter `variants`"));
            }
            Vec::new()
        }),
    };
    let (conditions, user_contexts, perturbations, has_overrides) = apply_overrides(
        &evaluation,
        conditions,
        user_contexts,
        perturbations,
        errors,
    )?;
    let perturbations = expand_personas(perturbations, &personas);
    for c in conditions
        .iter()
        .chain(&user_contexts)
        .chain(&perturbations)
    {
        hash_parts.push(c.hash.as_bytes().to_vec());
    }
    let parts: Vec<&[u8]> = hash_parts.iter().map(Vec::as_slice).collect();
    Some(Scenario {
        code: code.clone(),
        pillar: dir.pillar.clone(),
        behaviour: dir.behaviour.clone(),
        dir: dir.dir.clone(),
        prompt_file,
        frontmatter: Value::Object(frontmatter),
        evaluation,
        prompt,
        body,
        body_line,
        has_overrides,
        response_format,
        conditions,
        user_contexts,
        perturbations,
        rubrics,
        turns,
        personas,
        judge_first,
        variants,
        varied: Default::default(),
        hash: sha256_hex(&parts),
    })
}
pub(super) fn cr_files(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().and_then(|e| e.to_str()) == Some("md"))
        .filter_map(|p| {
            let stem = strip_suffix(p.file_stem()?.to_str()?).to_string();
            matches!(parse_segment(&stem), Some(("CR", _, _))).then_some((stem, p))
        })
        .collect()
}

pub(super) const EVALUATION_TYPES: &str =
    "category_match, list_includes, tag_threshold, sqe or mcsqe";

pub(super) fn parse_evaluation(
    fm: &Map<String, Value>,
    path: &Path,
    is_mcsqe: bool,
    errors: &mut Vec<ContentError>,
) -> Option<Evaluation> {
    let mut fail = |msg: String| {
        errors.push(ContentError::new(path, msg).in_section("frontmatter `evaluation`"));
        None
    };
    let empty = Map::new();
    let block = match fm.get("evaluation") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(other) => {
            return fail(format!(
                "`evaluation` is a {} (expected a mapping with `type` and its keys)",
                json_type(other)
            ));
        }
    };
    let default_type = if is_mcsqe { "mcsqe" } else { "category_match" };
    let ty = match block.get("type") {
        None | Some(Value::Null) => default_type,
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return fail(format!(
                "`type` is a {} (expected one of {EVALUATION_TYPES})",
                json_type(other)
            ));
        }
    };
    if is_mcsqe && ty != "mcsqe" {
        return fail(format!(
            "MCSQE.md declares evaluation type `{ty}` (expected mcsqe or no type)"
        ));
    }
    if ty == "mcsqe" && !is_mcsqe {
        return fail("mcsqe evaluation belongs in MCSQE.md (expected the scenario prompt in MCSQE.md beside CR1.md, CR2.md, ...)".into());
    }
    let string = |key: &str| -> Result<Option<String>, String> {
        match block.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(Value::Bool(b)) => Ok(Some(b.to_string())),
            Some(other) => Err(format!(
                "`{key}` is a {} (expected a non-empty string)",
                json_type(other)
            )),
        }
    };
    let list = |key: &str| -> Result<Option<Vec<String>>, String> {
        match block.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) if !items.is_empty() => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    Value::Number(n) => Ok(n.to_string()),
                    other => Err(format!(
                        "`{key}` holds a {} (expected strings)",
                        json_type(other)
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(vec![s.clone()])),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(Some(vec![v.to_string()])),
            Some(other) => Err(format!(
                "`{key}` is a {} (expected a non-empty list of strings)",
                json_type(other)
            )),
        }
    };
    let count = |key: &str, default: usize| -> Result<usize, String> {
        match block.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64().unwrap_or(0) as usize),
            Some(other) => Err(format!(
                "`{key}` is {other} (expected a whole number of 0 or more)"
            )),
        }
    };
    let result = (|| -> Result<Evaluation, String> {
        Ok(match ty {
            "category_match" => {
                let field = string("field")?.unwrap_or_else(|| "category".into());
                let expected = match list("expected")? {
                    Some(e) => e,
                    None => match fm.get("category") {
                        Some(Value::String(s)) if !s.trim().is_empty() => vec![s.clone()],
                        _ => return Err("category_match needs the expected value (expected `evaluation.expected` or a frontmatter `category`)".into()),
                    },
                };
                Evaluation::CategoryMatch { field, expected }
            }
            "list_includes" => Evaluation::ListIncludes {
                field: string("field")?.unwrap_or_else(|| "tags".into()),
                required: list("required")?.ok_or(
                    "list_includes needs `required` (expected a non-empty list of values)",
                )?,
            },
            "tag_threshold" => {
                let expected = list("expected")?
                    .ok_or("tag_threshold needs `expected` (expected a non-empty list of tags)")?;
                let min_correct = count("min_correct", 1)?;
                let ev = Evaluation::TagThreshold {
                    field: string("field")?.unwrap_or_else(|| "tags".into()),
                    expected,
                    min_correct,
                    max_incorrect: count("max_incorrect", 0)?,
                };
                if let Some(why) = ev.impossible() {
                    return Err(why);
                }
                ev
            }
            "sqe" => Evaluation::Sqe,
            "mcsqe" => Evaluation::Mcsqe,
            other => {
                return Err(format!(
                    "unknown evaluation type `{other}` (expected one of {EVALUATION_TYPES})"
                ));
            }
        })
    })();
    match result {
        Ok(ev) => Some(ev),
        Err(msg) => fail(msg),
    }
}

/// Accepts the full OpenRouter wrapper or a bare schema (wrapped as
/// `response`, strict), and checks the schema is itself valid JSON Schema.
pub(super) fn parse_response_format(
    raw: &str,
    path: &Path,
    errors: &mut Vec<ContentError>,
) -> Option<Value> {
    let value: Value = match serde_json::from_str(raw) {
        Ok(v) => v,
        Err(e) => {
            errors.push(ContentError::new(path, format!("invalid JSON: {e}")).at(e.line()));
            return None;
        }
    };
    let wrapper = if value.get("type").and_then(Value::as_str) == Some("json_schema")
        && value.get("json_schema").is_some()
    {
        let inner = &value["json_schema"];
        if !inner.get("name").is_some_and(Value::is_string) {
            errors.push(ContentError::new(
                path,
                "`json_schema.name` is missing (expected a string name for the schema)",
            ));
            return None;
        }
        if !inner.get("schema").is_some_and(Value::is_object) {
            errors.push(ContentError::new(
                path,
                "`json_schema.schema` is missing (expected the JSON Schema object)",
            ));
            return None;
        }
        value
    } else if value.is_object() {
        json!({"type": "json_schema", "json_schema": {"name": "response", "strict": true, "schema": value}})
    } else {
        errors.push(ContentError::new(path, format!("schema is a {} (expected a JSON Schema object or the {{\"type\":\"json_schema\",...}} wrapper)", json_type(&value))));
        return None;
    };
    let schema = &wrapper["json_schema"]["schema"];
    if let Err(e) = jsonschema::meta::validate(schema) {
        errors.push(ContentError::new(
            path,
            format!("not a valid JSON Schema: {e} (at {})", e.instance_path()),
        ));
        return None;
    }
    if let Err(e) = jsonschema::validator_for(schema) {
        errors.push(ContentError::new(
            path,
            format!("JSON Schema cannot be compiled: {e}"),
        ));
        return None;
    }
    Some(wrapper)
}

/// The evaluated field must exist in the schema, or no reply could carry
/// it. (Expected values outside the field's `enum` are a `check` warning.)
pub(super) fn check_field_in_schema(
    ev: &Evaluation,
    rf: &Value,
    path: &Path,
    errors: &mut Vec<ContentError>,
) {
    let Some(field) = ev.field() else { return };
    let Some(props) = rf
        .pointer("/json_schema/schema/properties")
        .and_then(Value::as_object)
    else {
        return;
    };
    if !props.contains_key(field) {
        errors.push(ContentError::new(path, format!("the evaluation reads field `{field}`, which the schema does not define (expected it under `properties`)")));
    }
}

/// Reads each component's `evaluation:` override against the scenario's
/// evaluation type, and checks that every test case's resulting evaluation
/// can be passed. Returns the components with their overrides set.
#[allow(clippy::type_complexity)]
pub(super) fn apply_overrides(
    ev: &Evaluation,
    mut conditions: Vec<Component>,
    mut user_contexts: Vec<Component>,
    mut perturbations: Vec<Component>,
    errors: &mut Vec<ContentError>,
) -> Option<(Vec<Component>, Vec<Component>, Vec<Component>, bool)> {
    let before = errors.len();
    let mut any = false;
    for c in conditions
        .iter_mut()
        .chain(user_contexts.iter_mut())
        .chain(perturbations.iter_mut())
    {
        c.overrides = parse_override(c, ev, errors);
        any |= c.overrides.is_some();
    }
    if any {
        // Overrides from several components combine; check each combination
        // once (only scenarios with overrides pay for this).
        let no_context = [None];
        let contexts: Vec<Option<&Component>> = no_context
            .into_iter()
            .chain(user_contexts.iter().map(Some))
            .collect();
        let mut seen = BTreeSet::new();
        'all: for c in &conditions {
            for u in &contexts {
                for p in &perturbations {
                    let mut combined = ev.clone();
                    let mut last = None;
                    for part in [Some(c), *u, Some(p)].into_iter().flatten() {
                        if let Some(o) = &part.overrides {
                            combined = combined.with_override(o);
                            last = Some(part);
                        }
                    }
                    if let (Some(why), Some(part)) = (combined.impossible(), last)
                        && seen.insert(why.clone())
                    {
                        errors.push(
                            ContentError::new(&part.source, why)
                                .at(part.line)
                                .in_section(part.section_label()),
                        );
                        if seen.len() > 10 {
                            break 'all;
                        }
                    }
                }
            }
        }
    }
    (errors.len() == before).then_some((conditions, user_contexts, perturbations, any))
}
