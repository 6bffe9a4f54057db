//! `compare`: is model A really safer than model B? Picks the runs (named
//! ones, the latest completed batch of named models, or of every model, as
//! `report` does), streams their results through
//! [`crate::report::compare::collect`], and prints the paired statistics of
//! [`crate::scoring::compare`] as a table, JSON or an HTML page.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::output::{emit, emit_table};
use super::report::{note_run, report_scoring};
use super::settings::{Settings, runtime};
use crate::ExitStatus;
use crate::domain::RunRecord;
use crate::report::{Target, select_runs};
use crate::scoring::compare::{DEFAULT_RESAMPLES, DEFAULT_SEED, Options};
use crate::store::Store;
use crate::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompareFormat {
    Table,
    Json,
    /// One self-contained page: leaderboard and forest plots, inline SVG.
    Html,
}

/// Most resamples `--resamples` takes (a million draws of every perturbation
/// is far past what an interval needs, and would take minutes).
const MAX_RESAMPLES: usize = 100_000;

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Compare these runs (any status); repeat for each, at least two.
    /// Without --run-id or --models: the latest completed batch run of every model.
    #[arg(long = "run-id", value_name = "ID", conflicts_with = "models")]
    pub run_ids: Vec<i64>,
    /// Compare the latest completed batch run of each of these models (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "A,B", value_parser = super::call::model_id)]
    pub models: Vec<String>,
    #[arg(long, value_enum, default_value_t = CompareFormat::Table)]
    pub format: CompareFormat,
    /// Write to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Seed of the bootstrap: the same seed gives the same intervals.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,
    /// Bootstrap resamples (1 to 100000).
    #[arg(long, default_value_t = DEFAULT_RESAMPLES, value_parser = parse_resamples)]
    pub resamples: usize,
}

fn parse_resamples(s: &str) -> std::result::Result<usize, String> {
    s.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_RESAMPLES).contains(n))
        .ok_or_else(|| format!("{s:?} is not a whole number from 1 to {MAX_RESAMPLES}"))
}

/// The runs the flags name, checked: no run twice, at least two.
async fn pick_runs(store: &Store, args: &CompareArgs) -> Result<Vec<RunRecord>> {
    let runs = if !args.run_ids.is_empty() {
        let mut runs = Vec::new();
        for id in &args.run_ids {
            runs.extend(select_runs(store, &Target::Run(*id)).await?);
        }
        runs
    } else if !args.models.is_empty() {
        let mut runs = Vec::new();
        for model in &args.models {
            let model = model.trim();
            if model.is_empty() {
                return Err(Error::usage(
                    "empty model in --models (expected ids such as a/x,b/y)".into(),
                ));
            }
            runs.extend(select_runs(store, &Target::Model(model.to_string())).await?);
        }
        runs
    } else {
        select_runs(store, &Target::LatestPerModel).await?
    };
    let mut seen = BTreeSet::new();
    if let Some(dup) = runs.iter().find(|r| !seen.insert(r.run_id)) {
        return Err(Error::usage(format!(
            "run {} ({}) is named twice; compare needs distinct runs",
            dup.run_id, dup.model
        )));
    }
    if runs.len() < 2 {
        return Err(Error::usage(format!(
            "compare needs at least two runs, and {} selected{} (name them with --run-id A --run-id B, or --models a/x,b/y)",
            if runs.len() == 1 {
                "one is"
            } else {
                "none are"
            },
            runs.first()
                .map(|r| format!(" (run {}, {})", r.run_id, r.model))
                .unwrap_or_default()
        )));
    }
    Ok(runs)
}

pub fn run(s: &Settings, args: &CompareArgs) -> Result<ExitStatus> {
    let url = s.existing_database()?;
    let (scoring, source, benchmark_hash) = report_scoring(s)?;
    let (collector, drops) = runtime()?.block_on(async {
        let store = Store::open_read_only(url).await?;
        let runs = pick_runs(&store, args).await?;
        for run in &runs {
            note_run(run, benchmark_hash.as_deref(), &source);
        }
        Ok::<_, Error>(crate::report::compare::collect_with_variants(&store, &runs).await?)
    })?;
    let comparison = collector
        .compare(
            &scoring,
            Options {
                resamples: args.resamples,
                seed: args.seed,
            },
        )
        .map_err(|e| Error::usage_caused_by(e.to_string(), e))?;
    for r in &comparison.excluded_runs {
        eprintln!(
            "note: run {} ({}) {}: left out of the comparison",
            r.run_id, r.model, r.reason
        );
    }
    let render = |o: &mut dyn Write| -> Result<()> {
        match args.format {
            CompareFormat::Table => {
                crate::report::compare::write_text(o, &comparison)?;
                crate::report::robustness::write_drops(o, &drops)?;
            }
            CompareFormat::Json => crate::report::compare::write_json(o, &comparison, &drops)?,
            CompareFormat::Html => {
                o.write_all(crate::report::html::compare::render(&comparison, &drops).as_bytes())?
            }
        }
        Ok(())
    };
    if args.format == CompareFormat::Table {
        emit_table(s.width, args.out.as_deref(), render)?;
    } else {
        emit(args.out.as_deref(), render)?;
    }
    Ok(ExitStatus::Success)
}
