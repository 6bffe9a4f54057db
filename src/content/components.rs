//! Conditions, user contexts and perturbations: consolidated files with one
//! `# C1` section each, or one file per component.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::error::ContentError;
use super::files::file_names;
use super::files::find_file;
use super::files::read_text;
use super::markdown::{self, line_of, split_frontmatter, split_sections};
use super::yaml::parse_yaml_map;
use crate::benchmark::Component;
use crate::benchmark::ComponentKind;
use crate::benchmark::codes::{natural_cmp, parse_segment, strip_suffix};
use crate::benchmark::sha256_hex;

/// Loads one kind of component: the consolidated file when present, else the
/// individual files. `None` when the files could not be read at all.
pub(super) fn load_components(
    dir: &Path,
    scenario: &str,
    kind: ComponentKind,
    errors: &mut Vec<ContentError>,
) -> Option<Vec<Component>> {
    // `conditions.md` or `conditions--any-suffix.md`, like every other file.
    let consolidated = match find_file(dir, kind.file_stem(), "md").as_slice() {
        [] => None,
        [one] => Some(one.clone()),
        many => {
            let names = file_names(many);
            errors.push(ContentError::new(
                dir,
                format!(
                    "several {} files ({}); expected one",
                    kind.file_stem(),
                    names
                ),
            ));
            return None;
        }
    };
    let folder = dir.join(kind.file_stem());
    let before = errors.len();
    let mut out = Vec::new();
    if let Some(consolidated) = consolidated {
        let text = read_text(&consolidated, errors)?;
        out = parse_consolidated(&consolidated, &text, scenario, kind, errors);
    } else if folder.is_dir() {
        let entries = match std::fs::read_dir(&folder) {
            Ok(e) => e,
            Err(e) => {
                errors.push(ContentError::new(
                    &folder,
                    format!("cannot read folder: {e}"),
                ));
                return None;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for path in files {
            if path.extension().and_then(|e| e.to_str()) != Some("md") {
                continue;
            }
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            let code = strip_suffix(stem).to_string();
            if !crate::benchmark::codes::is_segment(&code, kind.prefix()) {
                errors.push(ContentError::new(
                    &path,
                    format!(
                        "file name is not a {} code (expected {}<n>.md, e.g. {}1.md)",
                        kind.as_str(),
                        kind.prefix(),
                        kind.prefix()
                    ),
                ));
                continue;
            }
            let Some(text) = read_text(&path, errors) else {
                continue;
            };
            if let Some(c) =
                build_component(kind, scenario, &code, None, &path, None, &text, 1, errors)
            {
                out.push(c);
            }
        }
    } else {
        return Some(out);
    }
    out.sort_by(|a, b| natural_cmp(&a.code, &b.code));
    for pair in out.windows(2) {
        if pair[0].code == pair[1].code {
            let (a, b) = (&pair[0], &pair[1]);
            errors.push(
                ContentError::new(
                    &b.source,
                    format!(
                        "duplicate {} code {} (first defined at {}:{})",
                        kind.as_str(),
                        b.code,
                        a.source.display(),
                        a.line
                    ),
                )
                .at(b.line),
            );
        }
    }
    (errors.len() == before).then_some(out)
}

/// Parses the text of a consolidated component file (`conditions.md`, ...):
/// one component per `# C1` section, each with optional frontmatter. Public
/// so the fuzz targets can drive exactly what the loader does with a file.
pub fn parse_consolidated(
    path: &Path,
    text: &str,
    scenario: &str,
    kind: ComponentKind,
    errors: &mut Vec<ContentError>,
) -> Vec<Component> {
    let mut out = Vec::new();
    let is_code =
        |h: &str| leading_code(h).is_some_and(|c| parse_segment(&c.to_ascii_uppercase()).is_some());
    let (preamble, sections) = match split_sections(text, is_code) {
        Ok(x) => x,
        Err(e) => {
            errors.push(ContentError::new(path, e.message).at(e.line));
            return out;
        }
    };
    if sections.is_empty() {
        errors.push(ContentError::new(
            path,
            format!(
                "no `# {}1` sections found (expected one H1 heading per component)",
                kind.prefix()
            ),
        ));
    } else if !preamble_is_ignorable(preamble) {
        tracing::warn!(file = %path.display(), "text before the first section is not part of any component and is not sent");
    }
    for s in sections {
        let code = leading_code(&s.heading).unwrap_or_default();
        let label = format!("# {}", s.heading);
        if !crate::benchmark::codes::is_segment(&code, kind.prefix()) {
            errors.push(
                ContentError::new(
                    path,
                    format!(
                        "section code `{code}` is not a {} code (expected {}<n>, upper case)",
                        kind.as_str(),
                        kind.prefix()
                    ),
                )
                .at(s.line)
                .in_section(label),
            );
            continue;
        }
        let title = title_after_code(&s.heading, &code);
        let first_line = s.line + 1;
        if let Some(c) = build_component(
            kind,
            scenario,
            &code,
            title,
            path,
            Some(&label),
            s.text,
            first_line,
            errors,
        ) {
            out.push(c);
        }
    }
    out
}

pub(super) fn preamble_is_ignorable(preamble: &str) -> bool {
    let body = split_frontmatter(preamble).map_or(preamble, |f| f.body);
    body.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#') || (t.starts_with("<!--") && t.ends_with("-->"))
    })
}

/// The leading ASCII-alphanumeric run of a heading: `C2: friendly` -> `C2`.
pub(super) fn leading_code(heading: &str) -> Option<String> {
    let code: String = heading
        .trim()
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    (!code.is_empty()).then_some(code)
}

pub(super) fn title_after_code(heading: &str, code: &str) -> Option<String> {
    let rest = heading.trim()[code.len()..].trim_start_matches(|c: char| {
        c.is_whitespace() || matches!(c, ':' | '-' | '\u{2013}' | '\u{2014}' | '.')
    });
    (!rest.trim().is_empty()).then(|| rest.trim().to_string())
}

#[allow(clippy::too_many_arguments)]
pub(super) fn build_component(
    kind: ComponentKind,
    scenario: &str,
    code: &str,
    title: Option<String>,
    path: &Path,
    section: Option<&str>,
    text: &str,
    first_line: usize,
    errors: &mut Vec<ContentError>,
) -> Option<Component> {
    let err = |msg: String, line: usize| {
        let e = ContentError::new(path, msg).at(line);
        match section {
            Some(s) => e.in_section(s),
            None => e,
        }
    };
    let fm = match split_frontmatter(text) {
        Ok(fm) => fm,
        Err(e) => {
            errors.push(err(e.message, first_line + e.line - 1));
            return None;
        }
    };
    let metadata = match fm.yaml {
        Some(y) => match parse_yaml_map(y, path, first_line + fm.yaml_line - 1, section) {
            Ok(m) => m,
            Err(e) => {
                errors.push(e);
                return None;
            }
        },
        None => Map::new(),
    };
    let mut body = fm.body;
    let mut body_line = first_line + line_of(text, fm.body_offset) - 1;
    // An individual file may repeat its code as an H1; it is not sent.
    if section.is_none()
        && let Some(h) = markdown::headings(body, 1).first()
        && leading_code(&h.text).as_deref() == Some(code)
        && body[..h.range.start].trim().is_empty()
    {
        body_line += line_of(body, h.range.end) - 1;
        body = &body[h.range.end..];
    }
    let yaml_line = first_line + fm.yaml_line.saturating_sub(1);
    let mut bad = false;
    let mut number = |key: &str, lo: f64, hi: f64| -> f64 {
        match metadata.get(key) {
            None | Some(Value::Null) => 0.0,
            Some(Value::Number(n)) if n.as_f64().is_some_and(|v| (lo..=hi).contains(&v)) => {
                n.as_f64().unwrap_or(0.0)
            }
            Some(other) => {
                errors.push(err(
                    format!("`{key}` is {other} (expected a number from {lo} to {hi})"),
                    yaml_line,
                ));
                bad = true;
                0.0
            }
        }
    };
    let severity = number("severity", -10.0, 10.0);
    let difficulty = if kind == ComponentKind::Condition {
        number("difficulty", 0.0, 10.0)
    } else {
        0.0
    };
    let prompt = match markdown::to_xml(body) {
        Ok(p) => p,
        Err(e) => {
            errors.push(err(e.message, body_line + e.line - 1));
            return None;
        }
    };
    if bad {
        return None;
    }
    let full_code = format!("{scenario}-{code}");
    let hash = sha256_hex(&[
        kind.as_str().as_bytes(),
        full_code.as_bytes(),
        text.as_bytes(),
    ]);
    Some(Component {
        kind,
        code: code.to_string(),
        full_code,
        title,
        source: path.to_path_buf(),
        line: first_line.saturating_sub(usize::from(section.is_some())),
        metadata: Value::Object(metadata),
        severity,
        difficulty,
        prompt,
        body: body.to_string(),
        body_line,
        overrides: None,
        hash,
    })
}
