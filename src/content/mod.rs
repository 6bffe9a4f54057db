//! Reading benchmark content from disk (SPEC §1): scenario folders in either
//! layout, their prompt, schema, component and rubric files, `models.yml`
//! and `scoring.yaml`. Every problem is collected with its file, line and
//! section, so an author sees all of them in one pass; [`lint`] adds the
//! warnings of `helmbench check`.

mod components;
mod config;
mod error;
mod files;
pub mod lint;
pub mod markdown;
mod overrides;
pub mod personas;
mod rubric;
mod scan;
mod scenario;
mod turns;
mod variants;
mod yaml;

use std::collections::BTreeMap;
use std::path::Path;

use sha2::{Digest, Sha256};

pub use components::parse_consolidated;
pub use error::{ContentError, ContentErrors};
pub use files::{MAX_FILE_BYTES, read_text};
// `helmbench new` places a scenario beside its pillar's, in their layout.
pub use scan::{ScenarioDir, find_scenarios};

use crate::benchmark::codes::natural_cmp;
use crate::benchmark::{Behaviour, Benchmark, Pillar, hex};
use config::{check_scoring, load_models, load_scoring};
use markdown::split_frontmatter;
use scenario::load_scenario;

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

    let (dirs, mut walk_errors, skipped_folders) = scan::find_scenarios(&root.join("scenarios"));
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
    let word_lists = variants::load_lists(root, &mut errors);
    variants::resolve(root, &mut scenarios, &word_lists, &mut errors);
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
        skipped_folders,
        word_lists,
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

/// A README heading without the code it starts with: `P1-B1: Detect …` and
/// `B1 – Detect …` name behaviour P1-B1 `Detect …`, since every label puts
/// the code before the name (it would read "P1-B1 P1-B1: Detect …").
fn without_code(heading: &str, code: &str) -> String {
    let short = code.rsplit('-').next().unwrap_or(code);
    for prefix in [code, short] {
        if let Some(rest) = heading.strip_prefix(prefix)
            && !rest.starts_with(|c: char| c.is_alphanumeric())
        {
            let name = rest.trim_start_matches(|c: char| c.is_whitespace() || ":-–—.|".contains(c));
            if !name.is_empty() {
                return name.to_string();
            }
        }
    }
    heading.to_string()
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
            return (
                without_code(&h.text, code),
                markdown::trim_blank_lines(&rest).to_string(),
            );
        }
    }
    (
        code.to_string(),
        markdown::trim_blank_lines(body).to_string(),
    )
}
