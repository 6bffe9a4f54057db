//! SQE rubrics: `criteria.md` and `CR1.md`, ...

use std::path::Path;

use serde_json::Value;

use super::error::ContentError;
use super::files::read_text;
use super::markdown::{self, line_of, split_frontmatter};
use super::yaml::parse_yaml_map;
use crate::benchmark::ResponseType;
use crate::benchmark::Rubric;
use crate::benchmark::sha256_hex;

pub(super) fn load_rubric(
    path: &Path,
    code: &str,
    errors: &mut Vec<ContentError>,
) -> Option<Rubric> {
    let text = read_text(path, errors)?;
    let fm = match split_frontmatter(&text) {
        Ok(fm) => fm,
        Err(e) => {
            errors.push(ContentError::new(path, e.message).at(e.line));
            return None;
        }
    };
    let Some(yaml) = fm.yaml else {
        errors.push(ContentError::new(path, "rubric has no frontmatter (expected `options`, `pass_values`, `response_field` and `response_type`)"));
        return None;
    };
    let map = match parse_yaml_map(yaml, path, fm.yaml_line, None) {
        Ok(m) => m,
        Err(e) => {
            errors.push(e);
            return None;
        }
    };
    let mut problems = Vec::new();
    let strings = |key: &str, problems: &mut Vec<String>| -> Vec<String> {
        match map.get(key) {
            Some(Value::Array(a))
                if !a.is_empty()
                    && a.iter()
                        .all(|v| v.is_string() || v.is_number() || v.is_boolean()) =>
            {
                a.iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                    .collect()
            }
            _ => {
                problems.push(format!(
                    "`{key}` is missing or not a list (expected a non-empty list of strings)"
                ));
                Vec::new()
            }
        }
    };
    let options = strings("options", &mut problems);
    let pass_values = strings("pass_values", &mut problems);
    for p in &pass_values {
        if !options.is_empty() && !options.contains(p) {
            problems.push(format!(
                "pass value `{p}` is not among the options ({})",
                options.join(", ")
            ));
        }
    }
    let response_field = match map.get("response_field") {
        None | Some(Value::Null) => "judgment".to_string(),
        Some(Value::String(s)) if !s.trim().is_empty() && s != "justification" => s.clone(),
        Some(other) => {
            problems.push(format!(
                "`response_field` is {other} (expected a field name other than `justification`)"
            ));
            String::new()
        }
    };
    let response_type = match map.get("response_type") {
        None | Some(Value::Null) => ResponseType::Single,
        Some(Value::String(s)) if s == "single" => ResponseType::Single,
        Some(Value::String(s)) if s == "multi" => ResponseType::Multi,
        Some(other) => {
            problems.push(format!(
                "unknown `response_type` {other} (expected single or multi)"
            ));
            ResponseType::Single
        }
    };
    let body_line = line_of(&text, fm.body_offset);
    let prompt = match markdown::to_xml(fm.body) {
        Ok(p) if p.is_empty() => {
            problems.push("rubric has no text (expected the criteria the judge applies)".into());
            String::new()
        }
        Ok(p) => p,
        Err(e) => {
            errors.push(ContentError::new(path, e.message).at(body_line + e.line - 1));
            return None;
        }
    };
    if !problems.is_empty() {
        for p in problems {
            errors.push(ContentError::new(path, p).at(fm.yaml_line));
        }
        return None;
    }
    Some(Rubric {
        code: code.to_string(),
        file: path.to_path_buf(),
        options,
        pass_values,
        response_field,
        response_type,
        prompt,
        body: fm.body.to_string(),
        body_line,
        hash: sha256_hex(&[code.as_bytes(), text.as_bytes()]),
    })
}
