//! YAML frontmatter and config parsing, refusing what would hang or lie:
//! nesting bombs, alias bombs, non-finite numbers.

use std::path::Path;

use super::error::ContentError;
use super::files::json_type;
use serde_json::{Map, Value};

/// Parses a YAML mapping into JSON, positioning errors at the file's line.
pub(super) fn parse_yaml_map(
    yaml: &str,
    path: &Path,
    first_line: usize,
    section: Option<&str>,
) -> Result<Map<String, Value>, ContentError> {
    let located = |msg: String, line: usize| {
        let e = ContentError::new(path, msg).at(line);
        match section {
            Some(s) => e.in_section(s),
            None => e,
        }
    };
    if yaml.trim().is_empty() {
        return Ok(Map::new());
    }
    if let Some(msg) = yaml_too_complex(yaml) {
        return Err(located(msg, first_line));
    }
    let value: serde_yaml::Value = serde_yaml::from_str(yaml).map_err(|e| {
        // An error at the end of input is reported past the block: clamp it.
        let last = first_line + yaml.lines().count().max(1) - 1;
        let line = e
            .location()
            .map_or(first_line, |l| (first_line + l.line() - 1).min(last));
        let msg = e.to_string();
        // The library appends its own position; ours is the file's.
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        located(format!("invalid YAML: {msg}"), line)
    })?;
    // JSON has no NaN or infinity: converted, `.nan`, `.inf` and `1e999`
    // would silently become null, i.e. "absent, default 0".
    if let Some(key) = non_finite_number(&value, "") {
        return Err(located(
            format!(
                "`{key}` is not a finite number (expected a number such as 5 or -2.5, not .nan, .inf or an overflowing value)"
            ),
            first_line,
        ));
    }
    let value: Value = serde_yaml::from_value(value)
        .map_err(|e| located(format!("invalid YAML: {e}"), first_line))?;
    match value {
        Value::Object(m) => Ok(m),
        Value::Null => Ok(Map::new()),
        other => Err(located(
            format!(
                "frontmatter is a {} (expected a YAML mapping of keys to values)",
                json_type(&other)
            ),
            first_line,
        )),
    }
}

/// Most `[`/`{` a YAML text may hold. The YAML parser's time grows with the
/// square of flow-collection nesting (20,000 nested `[` take seconds, an
/// 8 MB file hours), so a nesting bomb must be refused before parsing.
/// Counting every bracket, quoted or not, cannot be evaded by hiding
/// closers in strings; real frontmatter and models.yml hold a handful.
pub(super) const MAX_YAML_FLOW_BRACKETS: usize = 2000;

pub(super) fn yaml_too_complex(yaml: &str) -> Option<String> {
    let n = yaml.bytes().filter(|b| matches!(b, b'[' | b'{')).count();
    (n > MAX_YAML_FLOW_BRACKETS).then(|| {
        format!(
            "YAML holds {n} `[`/`{{` brackets (expected at most {MAX_YAML_FLOW_BRACKETS}; write long or nested lists in block style, one `- item` per line)"
        )
    })
}

/// The key path of the first NaN or infinite number in `v`, if any.
pub(super) fn non_finite_number(v: &serde_yaml::Value, at: &str) -> Option<String> {
    match v {
        serde_yaml::Value::Number(n) if !n.is_finite() => Some(at.to_string()),
        serde_yaml::Value::Sequence(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, x)| non_finite_number(x, &format!("{at}[{i}]"))),
        serde_yaml::Value::Mapping(m) => m.iter().find_map(|(k, x)| {
            let k = match k {
                serde_yaml::Value::String(s) => s.clone(),
                other => serde_yaml::to_string(other)
                    .unwrap_or_default()
                    .trim()
                    .to_string(),
            };
            let path = if at.is_empty() {
                k
            } else {
                format!("{at}.{k}")
            };
            non_finite_number(x, &path)
        }),
        serde_yaml::Value::Tagged(t) => non_finite_number(&t.value, at),
        _ => None,
    }
}
