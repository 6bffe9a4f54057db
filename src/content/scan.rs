//! Finding scenario folders on disk (SPEC §1): the flat `P1-B1-S1/` and
//! nested `P1/B1/S1/` layouts, mixed freely, with readability suffixes; names
//! that look like a code but do not parse are content errors, so a typo
//! never silently drops a scenario from a run.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::error::ContentError;
use crate::benchmark::codes::{is_segment, natural_cmp, parse_segment, strip_suffix};

/// A scenario folder found on disk, before its files are read.
#[derive(Debug, Clone)]
pub struct ScenarioDir {
    /// `P1-B1-S1`
    pub code: String,
    pub pillar: String,
    pub behaviour: String,
    /// `S1` or `S1A`
    pub short: String,
    pub dir: PathBuf,
    /// The pillar and behaviour folders in the nested layout (for README.md).
    pub pillar_dir: Option<PathBuf>,
    pub behaviour_dir: Option<PathBuf>,
}

/// Scenario folders in natural order, the content errors met, and the
/// folders skipped on purpose-or-not (a scenario path among other words),
/// each with why: `check` counts those as warnings.
pub type Found = (Vec<ScenarioDir>, Vec<ContentError>, Vec<(PathBuf, String)>);

/// Walks `scenarios/` and returns every scenario folder in natural order.
///
/// A folder is a scenario when its path below `scenarios/` (suffixes
/// stripped, joined with `-`) reads `P<n>-B<n>-S<n>`; anything that reads as
/// less (`P1`, `P1/B1`) is descended into. Hidden folders are skipped;
/// symlinks are followed but a loop is reported, not walked forever.
pub fn find_scenarios(root: &Path) -> Found {
    let mut found = Vec::new();
    let mut errors = Vec::new();
    let mut skipped = Vec::new();
    let mut seen = HashSet::new();
    if !root.is_dir() {
        errors.push(ContentError::new(
            root,
            "scenarios folder not found (expected benchmark/scenarios/ holding scenario folders)",
        ));
        return (found, errors, skipped);
    }
    walk(
        root,
        &[],
        &mut seen,
        &mut found,
        &mut errors,
        &mut skipped,
        0,
    );
    found.sort_by(|a, b| natural_cmp(&a.code, &b.code));
    // Two folders for one code (flat and nested, or two suffixes) is ambiguous.
    for pair in found.windows(2) {
        if pair[0].code == pair[1].code {
            errors.push(ContentError::new(
                &pair[1].dir,
                format!(
                    "duplicate scenario {}: also defined by {} (expected one folder per scenario code)",
                    pair[1].code,
                    pair[0].dir.display()
                ),
            ));
        }
    }
    found.dedup_by(|b, a| a.code == b.code);
    (found, errors, skipped)
}

fn walk(
    dir: &Path,
    parts: &[(String, PathBuf)],
    seen: &mut HashSet<PathBuf>,
    found: &mut Vec<ScenarioDir>,
    errors: &mut Vec<ContentError>,
    skipped: &mut Vec<(PathBuf, String)>,
    depth: usize,
) {
    let canonical = match dir.canonicalize() {
        Ok(c) => c,
        Err(e) => {
            errors.push(ContentError::new(dir, format!("cannot open folder: {e}")));
            return;
        }
    };
    if !seen.insert(canonical) || depth > 8 {
        errors.push(ContentError::new(
            dir,
            "folder is reached twice (a symlink loop or a link back into scenarios/); expected a tree",
        ));
        return;
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            errors.push(ContentError::new(dir, format!("cannot read folder: {e}")));
            return;
        }
    };
    let mut children: Vec<PathBuf> = Vec::new();
    for entry in entries.filter_map(|e| e.ok()) {
        let p = entry.path();
        if p.is_dir() {
            children.push(p);
        } else if let Some(name) = entry.file_name().to_str()
            && is_scenario_file(name)
        {
            // `scenarios/P1-B8/S1.md`: a scenario's file in a folder that
            // is not a scenario; nothing would ever read it.
            errors.push(ContentError::new(
                &p,
                format!(
                    "scenario file outside a scenario folder: nothing reads it here (expected it inside a folder such as {})",
                    example_scenario_folder(parts, name)
                ),
            ));
        } else if entry.file_type().is_ok_and(|t| t.is_symlink())
            && let Err(e) = std::fs::metadata(&p)
            && !entry.file_name().to_string_lossy().starts_with('.')
        {
            // A link to itself or to nowhere: following it fails, and
            // skipping it would drop whatever it was meant to hold.
            errors.push(ContentError::new(
                &p,
                format!("cannot open folder: {e} (a symlink loop or a dangling link)"),
            ));
        }
    }
    children.sort();
    for child in children {
        let Some(name) = child.file_name().and_then(|n| n.to_str()) else {
            // Skipping it silently would drop a scenario without a word.
            errors.push(ContentError::new(
                &child,
                "folder name is not valid UTF-8 (expected a scenario path such as P1-B1-S1)",
            ));
            continue;
        };
        if name.starts_with('.') || name.starts_with('_') {
            continue;
        }
        let mut codes: Vec<(String, PathBuf)> = parts.to_vec();
        for seg in strip_suffix(name).split('-') {
            codes.push((seg.to_string(), child.clone()));
        }
        match classify(&codes) {
            Shape::Scenario => {
                let pillar_dir = folder_of(&codes, 0, &child);
                let behaviour_dir = folder_of(&codes, 1, &child);
                found.push(ScenarioDir {
                    code: codes
                        .iter()
                        .map(|c| c.0.as_str())
                        .collect::<Vec<_>>()
                        .join("-"),
                    pillar: codes[0].0.clone(),
                    behaviour: format!("{}-{}", codes[0].0, codes[1].0),
                    short: codes[2].0.clone(),
                    dir: child,
                    pillar_dir,
                    behaviour_dir,
                });
            }
            Shape::Partial => walk(&child, &codes, seen, found, errors, skipped, depth + 1),
            Shape::Other => {
                // Component folders and notes live inside scenarios; anything
                // else named like a code is an authoring slip worth reporting.
                if let Some(code) = near_miss(parts, name) {
                    errors.push(ContentError::new(
                        &child,
                        format!(
                            "folder name `{name}` is close to scenario path {code} but does not parse, so it would be skipped (codes are upper case, separated by `-` or nested folders, with an optional --suffix; prefix the folder with `_` to leave it out on purpose)"
                        ),
                    ));
                } else if let Some(code) = embedded_code(parts, name) {
                    // `Scenario-P1-B7-S1`, `P1-B7-S1-old`: a scenario path
                    // with other words around it, which may be deliberate.
                    let message = format!(
                        "folder name `{name}` holds scenario path {code} with other words around it, so it is skipped: rename it {code} to run it (or prefix it with `_` to leave it out without this warning)"
                    );
                    tracing::warn!(folder = %child.display(), "{message}");
                    skipped.push((child.clone(), message));
                } else if parts.len() < 3 && looks_like_code(name) {
                    errors.push(ContentError::new(
                        &child,
                        "folder name is not a scenario path (expected P<n>-B<n>-S<n>, or nested P<n>/B<n>/S<n>, with an optional --suffix)",
                    ));
                }
            }
        }
    }
}

enum Shape {
    Scenario,
    Partial,
    Other,
}

fn classify(codes: &[(String, PathBuf)]) -> Shape {
    let want = ["P", "B", "S"];
    if codes.len() > 3 {
        return Shape::Other;
    }
    for (i, (seg, _)) in codes.iter().enumerate() {
        match parse_segment(seg) {
            Some((p, _, draft)) if p == want[i] && (draft.is_empty() || p == "S") => {}
            _ => return Shape::Other,
        }
    }
    if codes.len() == 3 {
        Shape::Scenario
    } else {
        Shape::Partial
    }
}

/// The scenario path a folder name holds among other words
/// (`Scenario-P1-B7-S1` at the top, `old-S2` under `P1/B1/`), if any.
fn embedded_code(parts: &[(String, PathBuf)], name: &str) -> Option<String> {
    let segs: Vec<&str> = strip_suffix(name).split('-').collect();
    let need = 3usize.checked_sub(parts.len()).filter(|n| *n > 0)?;
    if segs.len() <= need {
        return None;
    }
    segs.windows(need).find_map(|w| {
        let mut codes: Vec<(String, PathBuf)> = parts.to_vec();
        codes.extend(w.iter().map(|s| (s.to_string(), PathBuf::new())));
        matches!(classify(&codes), Shape::Scenario).then(|| {
            codes
                .iter()
                .map(|c| c.0.as_str())
                .collect::<Vec<_>>()
                .join("-")
        })
    })
}

/// The folder that introduced segment `i`, when it is not the scenario folder itself.
fn folder_of(codes: &[(String, PathBuf)], i: usize, scenario_dir: &Path) -> Option<PathBuf> {
    let p = &codes[i].1;
    (p != scenario_dir).then(|| p.clone())
}

/// What an author probably meant by a folder name that does not parse:
/// `p1-b3-s1`, `P1_B4_S1`, `P1.B1.S1`, `P1B1S1`, or a lower-case `b1` under
/// `P1/`. Some(the code) when the name, upper-cased and with `_`, `.` or
/// spaces read as `-`, continues the path so far as a scenario or as a
/// pillar or behaviour folder. Names that are not codes at all (`notes`,
/// `images`, `v2`) give None.
fn near_miss(parts: &[(String, PathBuf)], name: &str) -> Option<String> {
    let base = strip_suffix(name);
    let mut norm = String::with_capacity(base.len() + 4);
    let chars: Vec<char> = base.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let c = c.to_ascii_uppercase();
        match c {
            '_' | '.' | ' ' => norm.push('-'),
            // `P1B1S1`: a segment letter right after a number starts a new
            // segment (but not a draft letter, which ends the name or a segment).
            'B' | 'S' | 'P'
                if i > 0
                    && chars[i - 1].is_ascii_digit()
                    && chars.get(i + 1).is_some_and(char::is_ascii_digit) =>
            {
                norm.push('-');
                norm.push(c);
            }
            c => norm.push(c),
        }
    }
    if norm == base {
        return None;
    }
    let mut codes: Vec<(String, PathBuf)> = parts.to_vec();
    for seg in norm.split('-').filter(|s| !s.is_empty()) {
        codes.push((seg.to_string(), PathBuf::new()));
    }
    match classify(&codes) {
        Shape::Scenario | Shape::Partial => Some(
            codes
                .iter()
                .map(|c| c.0.as_str())
                .collect::<Vec<_>>()
                .join("-"),
        ),
        Shape::Other => None,
    }
}

/// Files that belong inside a scenario folder: `S1.md`, `S1A.json`,
/// `MCSQE.md`, `CR2.md`, `criteria.md` and the component files, with an
/// optional `--suffix`, in any case. README.md and other notes are not.
fn is_scenario_file(name: &str) -> bool {
    let Some((stem, ext)) = name.rsplit_once('.') else {
        return false;
    };
    let ext = ext.to_ascii_lowercase();
    let stem = strip_suffix(stem).to_ascii_uppercase();
    match ext.as_str() {
        "md" => {
            matches!(
                stem.as_str(),
                "MCSQE" | "CRITERIA" | "CONDITIONS" | "PERTURBATIONS" | "USER-CONTEXTS"
            ) || is_segment(&stem, "S")
                || is_segment(&stem, "CR")
        }
        "json" => is_segment(&stem, "S"),
        _ => false,
    }
}

/// A scenario folder path for the message about a stray scenario file
/// `name`, continuing the path so far (`P1-B8-S1/ or P1/B8/S1/`).
fn example_scenario_folder(parts: &[(String, PathBuf)], name: &str) -> String {
    let stem = name.split('.').next().unwrap_or("");
    let short = if is_segment(strip_suffix(stem), "S") {
        strip_suffix(stem)
    } else {
        "S1"
    };
    let mut codes: Vec<&str> = parts.iter().map(|c| c.0.as_str()).collect();
    for fill in ["P1", "B1", short].iter().skip(codes.len()) {
        codes.push(fill);
    }
    format!("{}/ or {}/", codes.join("-"), codes.join("/"))
}

fn looks_like_code(name: &str) -> bool {
    let first = strip_suffix(name).split('-').next().unwrap_or("");
    matches!(parse_segment(first), Some(("P", _, _)))
}
