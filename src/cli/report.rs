//! `report`: severity-weighted scores of runs as a table, JSON or HTML.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::output::{emit, emit_table};
use super::settings::{Settings, runtime};
use crate::ExitStatus;
use crate::content;
use crate::content::ContentErrors;
use crate::domain::RunRecord;
use crate::domain::RunStatus;
use crate::store::Store;
use crate::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    Table,
    Json,
    /// One self-contained page with inline SVG charts.
    Html,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Report this run (any status). Without --run-id or --model: the latest
    /// completed batch run of every model, side by side.
    #[arg(long, value_name = "ID", conflicts_with = "model")]
    pub run_id: Option<i64>,
    /// Report the latest completed batch run of this model.
    #[arg(long, value_parser = super::call::model_id)]
    pub model: Option<String>,
    #[arg(long, value_enum, default_value_t = ReportFormat::Table)]
    pub format: ReportFormat,
    /// Write to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// List every failed test case with its error and each criterion's verdict and justification.
    #[arg(long)]
    pub details: bool,
    /// Also score each run with the human consensus in place of the judge
    /// where raters labelled an item (`review import`), side by side with
    /// the judged score. No request is sent.
    #[arg(long)]
    pub human: bool,
}

/// The weights and floors for `report`: the benchmark's `scoring.yaml`, or the
/// defaults (said on stderr) when there is no benchmark folder. A broken
/// `scoring.yaml` is a content error: scoring it with other weights would
/// give numbers nobody asked for. Other content problems do not matter here.
pub(super) fn report_scoring(
    s: &Settings,
) -> Result<(crate::benchmark::ScoringConfig, String, Option<String>)> {
    report_content(s).map(|(scoring, source, hash, _)| (scoring, source, hash))
}

/// What `report` takes from the benchmark folder: [`report_scoring`]'s
/// weights, their source and the content hash, and the behaviours' names
/// (those with a name of their own, from a README: not the bare code).
pub(super) fn report_content(s: &Settings) -> Result<ReportContent> {
    let root = &s.benchmark_dir;
    if !root.is_dir() {
        eprintln!(
            "note: benchmark folder {} not found: scoring with default weights (every behaviour weighs 1, no safety floors)",
            root.display()
        );
        return Ok((
            crate::benchmark::ScoringConfig::default(),
            "default".into(),
            None,
            BTreeMap::new(),
        ));
    }
    let (b, errors) = content::load(root);
    let path = root.join("scoring.yaml");
    let broken: Vec<content::ContentError> =
        errors.into_iter().filter(|e| e.path == path).collect();
    if !broken.is_empty() {
        return Err(Error::Content(ContentErrors(broken)));
    }
    let source = scoring_source(root);
    let names = b
        .behaviours
        .iter()
        .filter(|x| !x.name.trim().is_empty() && x.name.trim() != x.code)
        .map(|x| (x.code.clone(), x.name.trim().to_string()))
        .collect();
    Ok((b.scoring, source, Some(b.content_hash), names))
}

/// Where the weights a report scores with come from, as `report` names
/// them: the benchmark folder's `scoring.yaml`, or the defaults.
pub(super) fn scoring_source(root: &std::path::Path) -> String {
    let path = root.join("scoring.yaml");
    if path.is_file() {
        path.display().to_string()
    } else {
        "default (no scoring.yaml)".to_string()
    }
}

pub(super) type ReportContent = (
    crate::benchmark::ScoringConfig,
    String,
    Option<String>,
    BTreeMap<String, String>,
);

pub fn run(s: &Settings, args: &ReportArgs) -> Result<ExitStatus> {
    let url = s.existing_database()?;
    let (scoring, source, benchmark_hash, names) = report_content(s)?;
    let target = match (&args.run_id, &args.model) {
        (Some(id), _) => crate::report::Target::Run(*id),
        (None, Some(m)) => crate::report::Target::Model(m.clone()),
        (None, None) => crate::report::Target::LatestPerModel,
    };
    let reports = runtime()?.block_on(async {
        let store = Store::open_read_only(url).await?;
        let runs = crate::report::select_runs(&store, &target).await?;
        let mut scored = Vec::with_capacity(runs.len());
        for run in runs {
            note_run(&run, benchmark_hash.as_deref(), &source);
            // Each run is scored with its own recorded --blocked-as.
            let scoring = crate::benchmark::ScoringConfig {
                blocked_as: run.blocked_as(),
                ..scoring.clone()
            };
            scored.push((run, scoring));
        }
        // A completed run's analysis as run-batch kept it, where its key
        // still holds (crate::report::kept); the others computed.
        let mut reports =
            crate::report::kept::reports(&store, &scored, &source, args.details).await?;
        for (report, (_, scoring)) in reports.iter_mut().zip(&scored) {
            report.review = crate::report::calibration::review_sections(
                &store,
                report.run_id,
                &report.analysis,
                scoring,
                args.human,
            )
            .await?;
            report.behaviour_names = names.clone();
        }
        Ok::<_, Error>(reports)
    })?;
    for r in &reports {
        for w in r.routing.warnings(r.run_id, &r.model) {
            eprintln!("{w}");
        }
    }
    let render = |o: &mut dyn Write| -> Result<()> {
        match args.format {
            // One run named: its object; the default: every model's, wrapped.
            ReportFormat::Json => {
                match target {
                    // Serialized straight to the output, never built as a
                    // JSON value in memory first.
                    crate::report::Target::LatestPerModel => {
                        #[derive(serde::Serialize)]
                        struct Reports<'a> {
                            reports: &'a [crate::report::ModelReport],
                        }
                        serde_json::to_writer_pretty(&mut *o, &Reports { reports: &reports })?
                    }
                    _ => serde_json::to_writer_pretty(&mut *o, &reports[0])?,
                }
                writeln!(o)?;
            }
            ReportFormat::Html => o.write_all(crate::report::html::render(&reports).as_bytes())?,
            ReportFormat::Table => crate::report::text::write_report(o, &reports)?,
        }
        Ok(())
    };
    if args.format == ReportFormat::Table {
        emit_table(s.width, args.out.as_deref(), render)?;
    } else {
        emit(args.out.as_deref(), render)?;
    }
    Ok(ExitStatus::Success)
}

/// Says on stderr what a reader of scores should know about a run: that it
/// is not completed (only its stored test cases count), or that it used
/// another version of the benchmark than the weights come from.
pub(super) fn note_run(run: &RunRecord, benchmark_hash: Option<&str>, source: &str) {
    if run.status != RunStatus::Completed {
        eprintln!(
            "note: run {} is {}: only the {} of {} planned test cases stored count",
            run.run_id, run.status, run.test_cases, run.planned_test_cases
        );
    }
    if benchmark_hash.is_some_and(|h| h != run.benchmark_hash) {
        eprintln!(
            "note: run {} used another version of the benchmark; weights and floors come from {source}",
            run.run_id
        );
    }
}
