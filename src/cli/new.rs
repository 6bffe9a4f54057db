//! `new` (issue 44): scaffolding for authors. `new scenario CODE --type T`
//! writes a scenario folder in the layout the benchmark already uses (flat
//! `P2-B3-S1/` or nested `P2/B3/S1/`), with commented frontmatter and
//! placeholder components that `check` accepts; `new benchmark DIR` starts
//! a benchmark folder. Neither ever overwrites: a scenario code or folder
//! that exists is refused before anything is written.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand, ValueEnum};

use super::output::out;
use super::settings::Settings;
use crate::benchmark::codes::{is_segment, strip_suffix};
use crate::content::{ScenarioDir, find_scenarios};
use crate::{Error, ExitStatus, Result};

#[derive(Debug, Args)]
pub struct NewArgs {
    #[command(subcommand)]
    pub what: NewCommand,
}

#[derive(Debug, Subcommand)]
pub enum NewCommand {
    /// A scenario folder of the benchmark (--benchmark-dir), in the layout
    /// it already uses, that `check` accepts as written.
    Scenario(NewScenarioArgs),
    /// A benchmark folder: models.yml, scoring.yaml and one scenario.
    Benchmark(NewBenchmarkArgs),
}

#[derive(Debug, Args)]
pub struct NewScenarioArgs {
    /// The scenario code, such as P2-B3-S1 (a draft letter is allowed: P2-B3-S1A).
    pub code: String,
    /// The evaluation type; `conversation` is an sqe scenario with turns.md.
    #[arg(long = "type", value_enum, default_value_t = ScenarioType::CategoryMatch)]
    pub kind: ScenarioType,
}

#[derive(Debug, Args)]
pub struct NewBenchmarkArgs {
    /// The folder to create (refused when it exists and is not empty).
    pub dir: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum ScenarioType {
    CategoryMatch,
    ListIncludes,
    TagThreshold,
    Sqe,
    Mcsqe,
    Conversation,
}

const CONDITIONS: &str = include_str!("new/conditions.md");
const USER_CONTEXTS: &str = include_str!("new/user-contexts.md");
const PERTURBATIONS: &str = include_str!("new/perturbations.md");
const CATEGORY_MATCH: &str = include_str!("new/category_match.md");
const CATEGORY_SCHEMA: &str = include_str!("new/category_match.json");
const TAGS_SCHEMA: &str = include_str!("new/tags.json");
const LIST_INCLUDES: &str = include_str!("new/list_includes.md");
const TAG_THRESHOLD: &str = include_str!("new/tag_threshold.md");
const SQE: &str = include_str!("new/sqe.md");
const CRITERIA: &str = include_str!("new/criteria.md");
const MCSQE: &str = include_str!("new/mcsqe.md");
const CR1: &str = include_str!("new/CR1.md");
const CR2: &str = include_str!("new/CR2.md");
const TURNS: &str = include_str!("new/turns.md");
const MODELS: &str = include_str!("new/models.yml");
const SCORING: &str = include_str!("new/scoring.yaml");

pub fn run(s: &Settings, args: &NewArgs) -> Result<ExitStatus> {
    match &args.what {
        NewCommand::Scenario(a) => new_scenario(&s.benchmark_dir, a),
        NewCommand::Benchmark(a) => new_benchmark(&a.dir),
    }
}

/// The files of a scenario of type `kind` whose short code is `short` (`S1`).
fn scenario_files(kind: ScenarioType, short: &str) -> Vec<(String, &'static str)> {
    let mut files = vec![
        ("conditions.md".to_string(), CONDITIONS),
        ("user-contexts.md".to_string(), USER_CONTEXTS),
        ("perturbations.md".to_string(), PERTURBATIONS),
    ];
    let prompt = |text| (format!("{short}.md"), text);
    let schema = |text| (format!("{short}.json"), text);
    match kind {
        ScenarioType::CategoryMatch => {
            files.extend([prompt(CATEGORY_MATCH), schema(CATEGORY_SCHEMA)]);
        }
        ScenarioType::ListIncludes => files.extend([prompt(LIST_INCLUDES), schema(TAGS_SCHEMA)]),
        ScenarioType::TagThreshold => files.extend([prompt(TAG_THRESHOLD), schema(TAGS_SCHEMA)]),
        ScenarioType::Sqe => files.extend([prompt(SQE), ("criteria.md".into(), CRITERIA)]),
        ScenarioType::Mcsqe => files.extend([
            ("MCSQE.md".into(), MCSQE),
            ("CR1.md".into(), CR1),
            ("CR2.md".into(), CR2),
        ]),
        ScenarioType::Conversation => files.extend([
            prompt(SQE),
            ("criteria.md".into(), CRITERIA),
            ("turns.md".into(), TURNS),
        ]),
    }
    files
}

/// `P2-B3-S1` -> ("P2", "B3", "S1"), or a usage error saying what a code is.
fn parse_code(code: &str) -> Result<(&str, &str, &str)> {
    let parts: Vec<&str> = code.split('-').collect();
    match parts[..] {
        [p, b, s] if is_segment(p, "P") && is_segment(b, "B") && is_segment(s, "S") => {
            Ok((p, b, s))
        }
        _ => Err(Error::usage(format!(
            "`{code}` is not a scenario code (expected pillar, behaviour and scenario such as P2-B3-S1)"
        ))),
    }
}

/// Where the new scenario goes: beside its pillar's scenarios in their
/// layout (nested under an existing pillar folder, else flat when the
/// pillar has flat ones), else in the layout most of the benchmark uses
/// (flat on a tie or an empty benchmark).
fn target_dir(scenarios: &Path, found: &[ScenarioDir], p: &str, b: &str, s: &str) -> PathBuf {
    let nested = |pillar_dir: &Path| {
        let behaviour = found
            .iter()
            .filter(|d| d.pillar == p && d.behaviour == format!("{p}-{b}"))
            .find_map(|d| d.behaviour_dir.clone())
            .or_else(|| existing_child(pillar_dir, b))
            .unwrap_or_else(|| pillar_dir.join(b));
        behaviour.join(s)
    };
    let pillar_dir = found
        .iter()
        .filter(|d| d.pillar == p)
        .find_map(|d| d.pillar_dir.clone())
        .or_else(|| existing_child(scenarios, p));
    if let Some(dir) = pillar_dir {
        return nested(&dir);
    }
    let flat = scenarios.join(format!("{p}-{b}-{s}"));
    if found.iter().any(|d| d.pillar == p) {
        return flat;
    }
    let nested_count = found.iter().filter(|d| d.pillar_dir.is_some()).count();
    if nested_count * 2 > found.len() {
        nested(&scenarios.join(p))
    } else {
        flat
    }
}

/// A folder of `dir` whose code (suffix stripped) is `code`: `P2--harm/` for P2.
fn existing_child(dir: &Path, code: &str) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    let mut matches: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| strip_suffix(n) == code)
        })
        .collect();
    matches.sort();
    matches.into_iter().next()
}

fn new_scenario(benchmark: &Path, args: &NewScenarioArgs) -> Result<ExitStatus> {
    let code = args.code.as_str();
    let (p, b, s) = parse_code(code)?;
    let scenarios = benchmark.join("scenarios");
    if !scenarios.is_dir() {
        return Err(Error::usage(format!(
            "{} is not a folder (expected the benchmark's scenarios/ folder; pass --benchmark-dir, or start one with `helmbench new benchmark DIR`)",
            scenarios.display()
        )));
    }
    let (found, _, _) = find_scenarios(&scenarios);
    if let Some(existing) = found.iter().find(|d| d.code == code) {
        return Err(Error::usage(format!(
            "scenario {code} already exists in {} (expected a new code; nothing was written)",
            existing.dir.display()
        )));
    }
    let dir = target_dir(&scenarios, &found, p, b, s);
    if dir.exists() {
        return Err(Error::usage(format!(
            "{} already exists (expected a new folder; nothing was written)",
            dir.display()
        )));
    }
    let files = scenario_files(args.kind, s);
    write_folder(&dir, &files)?;
    let mut o = out();
    writeln!(o, "wrote {}:", dir.display())?;
    for (name, _) in &files {
        writeln!(o, "  {name}")?;
    }
    writeln!(
        o,
        "next: replace the placeholders, then `helmbench check {code}` and `helmbench prompts {code}`"
    )?;
    Ok(ExitStatus::Success)
}

fn new_benchmark(dir: &Path) -> Result<ExitStatus> {
    let occupied = std::fs::read_dir(dir).is_ok_and(|mut e| e.next().is_some());
    if occupied || dir.is_file() {
        return Err(Error::usage(format!(
            "{} already exists and is not empty (expected a new or empty folder; nothing was written)",
            dir.display()
        )));
    }
    let mut files = vec![
        ("models.yml".to_string(), MODELS),
        ("scoring.yaml".to_string(), SCORING),
    ];
    for (name, text) in scenario_files(ScenarioType::CategoryMatch, "S1") {
        files.push((format!("scenarios/P1-B1-S1/{name}"), text));
    }
    write_folder(dir, &files)?;
    let mut o = out();
    writeln!(
        o,
        "wrote {}: models.yml, scoring.yaml and scenarios/P1-B1-S1 (category_match)",
        dir.display()
    )?;
    writeln!(
        o,
        "next: `helmbench --benchmark-dir {0} check`, then `helmbench --benchmark-dir {0} new scenario P1-B1-S2 --type sqe`",
        dir.display()
    )?;
    Ok(ExitStatus::Success)
}

/// Writes `files` (paths relative to `dir`) into a hidden folder beside
/// `dir`, then renames it into place: a failure half-way leaves no
/// half-written scenario for `check` or a run to find (the scan skips
/// hidden folders), and removes what it wrote.
fn write_folder(dir: &Path, files: &[(String, &str)]) -> Result<()> {
    let parent = dir.parent().unwrap_or(Path::new("."));
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let fail = |what: &str, path: &Path, e: std::io::Error| {
        Error::usage(format!("cannot {what} {}: {e}", path.display()))
    };
    std::fs::create_dir_all(parent).map_err(|e| fail("create the folder", parent, e))?;
    let staging = parent.join(format!(".{name}.new-{}", std::process::id()));
    let written = (|| {
        for (rel, text) in files {
            let path = staging.join(rel);
            if let Some(folder) = path.parent() {
                std::fs::create_dir_all(folder)
                    .map_err(|e| fail("create the folder", folder, e))?;
            }
            std::fs::write(&path, text).map_err(|e| fail("write", &path, e))?;
        }
        // An empty folder given to `new benchmark` is replaced whole.
        if dir.is_dir() {
            std::fs::remove_dir(dir).map_err(|e| fail("replace the empty folder", dir, e))?;
        }
        std::fs::rename(&staging, dir).map_err(|e| fail("create", dir, e))
    })();
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    written
}
