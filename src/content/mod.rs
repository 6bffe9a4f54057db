//! Reading benchmark content from disk (SPEC §1): scenario folders in either
//! layout, their prompt, schema, component and rubric files, `models.yml`
//! and `scoring.yaml`. Every problem is collected with its file, line and
//! section, so an author sees all of them in one pass; [`lint`] adds the
//! warnings of `helmbench check`.

mod components;
mod config;
pub mod lint;
pub mod markdown;
mod rubric;
mod scan;
mod scenario;
mod yaml;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

pub use components::parse_consolidated;

use crate::benchmark::codes::{natural_cmp, strip_suffix};
use crate::benchmark::{Behaviour, Benchmark, Pillar, hex};
use crate::content::config::check_scoring;
use crate::content::config::load_models;
use crate::content::config::load_scoring;
use crate::content::scenario::load_scenario;
use markdown::split_frontmatter;
use scan::ScenarioDir;

/// Largest content file read; anything bigger is an authoring accident.
pub const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// One problem in the benchmark content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentError {
    pub path: PathBuf,
    pub line: Option<usize>,
    /// The consolidated-file section, e.g. `# C2`.
    pub section: Option<String>,
    pub message: String,
}

impl ContentError {
    pub fn new(path: impl AsRef<Path>, message: impl Into<String>) -> Self {
        ContentError {
            path: path.as_ref().to_path_buf(),
            line: None,
            section: None,
            message: message.into(),
        }
    }

    pub fn at(mut self, line: usize) -> Self {
        self.line = Some(line);
        self
    }

    pub fn in_section(mut self, section: impl Into<String>) -> Self {
        self.section = Some(section.into());
        self
    }
}

impl fmt::Display for ContentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(section) = &self.section {
            write!(f, " [{section}]")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// All content problems of one load.
#[derive(Debug, Clone, Default, thiserror::Error)]
pub struct ContentErrors(pub Vec<ContentError>);

impl fmt::Display for ContentErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} content error(s) in the benchmark:", self.0.len())?;
        for e in &self.0 {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

/// Loads the benchmark at `root`. Returns what loaded and every problem;
/// scenarios with problems are left out of the benchmark.
pub fn load(root: &Path) -> (Benchmark, Vec<ContentError>) {
    let mut errors = Vec::new();
    let mut hasher = Sha256::new();
    if !root.is_dir() {
        errors.push(ContentError::new(
            root,
            "benchmark folder not found (expected a folder holding models.yml and scenarios/; set --benchmark-dir or HELMBENCH_BENCHMARK_DIR)",
        ));
    }
    let models = load_models(root, &mut errors, &mut hasher);
    let scoring = load_scoring(root, &mut errors, &mut hasher);

    let (dirs, mut walk_errors) = scan::find_scenarios(&root.join("scenarios"));
    if root.is_dir() {
        errors.append(&mut walk_errors);
    }
    let mut scenarios = Vec::with_capacity(dirs.len());
    let mut pillars: BTreeMap<String, Pillar> = BTreeMap::new();
    let mut behaviours: BTreeMap<String, Behaviour> = BTreeMap::new();
    for dir in &dirs {
        note_pillar_and_behaviour(dir, &mut pillars, &mut behaviours);
        let before = errors.len();
        if let Some(s) = load_scenario(dir, &mut errors)
            && errors.len() == before
        {
            scenarios.push(s);
        }
    }
    for s in &scenarios {
        hasher.update(s.hash.as_bytes());
    }
    let judged = scenarios.iter().any(|s| s.evaluation.is_judged());
    if let Some(m) = &models
        && judged
        && m.marking_model.as_deref().is_none_or(str::is_empty)
    {
        errors.push(ContentError::new(
            root.join("models.yml"),
            "`marking_model` is missing but sqe/mcsqe scenarios need a judge (expected `marking_model: provider/model`)",
        ));
    }
    check_scoring(root, &scoring, &behaviours, &mut errors);

    let mut pillars: Vec<Pillar> = pillars.into_values().collect();
    pillars.sort_by(|a, b| natural_cmp(&a.code, &b.code));
    let mut behaviours: Vec<Behaviour> = behaviours.into_values().collect();
    behaviours.sort_by(|a, b| natural_cmp(&a.code, &b.code));
    let benchmark = Benchmark {
        root: root.to_path_buf(),
        models,
        scoring,
        pillars,
        behaviours,
        scenarios,
        content_hash: hex(&hasher.finalize()[..]),
    };
    (benchmark, errors)
}

/// Loads and fails on any problem.
pub fn load_strict(root: &Path) -> Result<Benchmark, ContentErrors> {
    let (b, errors) = load(root);
    if errors.is_empty() {
        Ok(b)
    } else {
        Err(ContentErrors(errors))
    }
}

/// Reads a text file: size-capped, UTF-8 checked, errors naming the line.
pub fn read_text(path: &Path, errors: &mut Vec<ContentError>) -> Option<String> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => {
            errors.push(ContentError::new(path, format!("cannot read file: {e}")));
            return None;
        }
    };
    if meta.len() > MAX_FILE_BYTES {
        errors.push(ContentError::new(
            path,
            format!(
                "file is {:.1} MB (expected at most {} MB of text)",
                meta.len() as f64 / 1e6,
                MAX_FILE_BYTES / 1024 / 1024
            ),
        ));
        return None;
    }
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            errors.push(ContentError::new(path, format!("cannot read file: {e}")));
            return None;
        }
    };
    match String::from_utf8(bytes) {
        Ok(s) => {
            if let Some(line) = markdown::lone_cr_line(&s) {
                errors.push(
                    ContentError::new(
                        path,
                        "line ends with a lone carriage return (classic Mac line endings; expected LF or CRLF)",
                    )
                    .at(line),
                );
                return None;
            }
            Some(s)
        }
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            let bytes = e.as_bytes();
            let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
            errors.push(
                ContentError::new(
                    path,
                    format!("not valid UTF-8 at byte {at} (expected UTF-8 text)"),
                )
                .at(line),
            );
            None
        }
    }
}

pub(super) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "mapping",
    }
}

/// Pillar and behaviour names from the nested layout's README.md files; the
/// code when there is none. These are free-form notes and never fail a load.
fn note_pillar_and_behaviour(
    dir: &ScenarioDir,
    pillars: &mut BTreeMap<String, Pillar>,
    behaviours: &mut BTreeMap<String, Behaviour>,
) {
    pillars.entry(dir.pillar.clone()).or_insert_with(|| {
        let (name, description) = readme(dir.pillar_dir.as_deref(), &dir.pillar);
        Pillar {
            code: dir.pillar.clone(),
            name,
            description,
        }
    });
    behaviours.entry(dir.behaviour.clone()).or_insert_with(|| {
        let (name, description) = readme(dir.behaviour_dir.as_deref(), &dir.behaviour);
        Behaviour {
            code: dir.behaviour.clone(),
            pillar: dir.pillar.clone(),
            name,
            description,
        }
    });
}

fn readme(dir: Option<&Path>, code: &str) -> (String, String) {
    let fallback = (code.to_string(), String::new());
    let Some(text) = dir.and_then(|d| std::fs::read_to_string(d.join("README.md")).ok()) else {
        return fallback;
    };
    let body = match split_frontmatter(&text) {
        Ok(fm) => fm.body,
        Err(_) => text.as_str(),
    };
    for level in 1..=6 {
        if let Some(h) = markdown::headings(body, level).into_iter().next()
            && !h.text.is_empty()
        {
            let rest = format!("{}{}", &body[..h.range.start], &body[h.range.end..]);
            return (h.text, markdown::trim_blank_lines(&rest).to_string());
        }
    }
    (
        code.to_string(),
        markdown::trim_blank_lines(body).to_string(),
    )
}

/// Finds `S1.md` / `S1--suffix.md` (or `MCSQE.md`) and the matching `.json`.
pub(super) fn find_file(dir: &Path, stem: &str, ext: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter(|p| {
            p.extension().and_then(|e| e.to_str()) == Some(ext)
                && p.file_stem()
                    .and_then(|s| s.to_str())
                    .is_some_and(|s| strip_suffix(s) == stem)
        })
        .collect();
    out.sort();
    out
}

/// `S1.json, MCSQE.json`: the files an error about several files names.
pub(super) fn file_names<'a>(paths: impl IntoIterator<Item = &'a PathBuf>) -> String {
    let names: Vec<String> = paths.into_iter().map(|p| file_name(p)).collect();
    names.join(", ")
}

pub(super) fn file_name(p: &Path) -> String {
    p.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}
