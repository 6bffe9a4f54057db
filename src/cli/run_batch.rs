//! `run-batch`: a batch of test cases per model, or its dry-run.

use std::io::Write;
use std::num::NonZeroUsize;

use clap::Args;
use serde_json::json;

use super::call::{self, CallArgs};
use super::{
    Cli, DataFormat, is_dry_run, load_reporting, load_strict, out, parse_selectors, runtime,
};
use crate::ExitStatus;
use crate::benchmark::cases::Selector;
use crate::{Error, Result, run};

#[derive(Debug, Args)]
pub struct RunBatchArgs {
    /// Scenario codes, test codes or prefixes to run.
    #[arg(long = "scenario", num_args = 1.., required_unless_present_any = ["all_scenarios", "resume"])]
    pub scenarios: Vec<String>,
    /// Run every scenario.
    #[arg(long, conflicts_with = "scenarios")]
    pub all_scenarios: bool,
    #[command(flatten)]
    pub call: CallArgs,
    /// Leave out the test cases without a user context.
    #[arg(long)]
    pub skip_no_context: bool,
    /// Finish the missing test cases of this run, with its recorded settings.
    #[arg(long, value_name = "RUN_ID", conflicts_with_all = ["scenarios", "all_scenarios"])]
    pub resume: Option<i64>,
    /// Requests in flight at once, per model (1 to 1024).
    #[arg(long, default_value = "16", value_parser = super::parse_concurrency)]
    pub concurrency: NonZeroUsize,
    /// Run at most this many test cases.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Run each test case this many times (for consistency and intervals).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub repeats: u32,
    /// Budget in USD for the whole batch (every model together), from the
    /// provider-reported cost: the run stops cleanly once it is reached.
    /// With --resume: the run's new total budget (default: the one it was
    /// started with).
    #[arg(long, value_name = "USD", value_parser = parse_budget)]
    pub max_cost: Option<f64>,
    #[arg(long, value_enum, default_value_t = DataFormat::Table)]
    pub format: DataFormat,
}

/// A batch as validated from the command line: what `run-batch` and
/// `run-all` run. Nothing downstream re-checks these values.
#[derive(Debug, Clone)]
pub(super) struct Batch {
    pub selectors: Vec<Selector>,
    pub all_scenarios: bool,
    pub include_no_context: bool,
    pub resume: Option<i64>,
    pub concurrency: NonZeroUsize,
    pub limit: Option<usize>,
    pub repeats: u32,
    pub max_cost: Option<f64>,
    pub format: DataFormat,
}

impl Batch {
    /// Every scenario, default settings: `run-all`'s batch.
    pub(super) fn every_scenario(concurrency: NonZeroUsize) -> Self {
        Batch {
            selectors: Vec::new(),
            all_scenarios: true,
            include_no_context: true,
            resume: None,
            concurrency,
            limit: None,
            repeats: 1,
            max_cost: None,
            format: DataFormat::Table,
        }
    }
}

impl RunBatchArgs {
    /// Checks what clap cannot (selectors) before anything is created or sent.
    fn resolve(&self) -> Result<Batch> {
        Ok(Batch {
            selectors: parse_selectors(&self.scenarios)?,
            all_scenarios: self.all_scenarios,
            include_no_context: !self.skip_no_context,
            resume: self.resume,
            concurrency: self.concurrency,
            limit: self.limit,
            repeats: self.repeats,
            max_cost: self.max_cost,
            format: self.format,
        })
    }
}

pub fn run(cli: &Cli, args: &RunBatchArgs) -> Result<ExitStatus> {
    let batch = args.resolve()?;
    execute(cli, &args.call, &batch)
}

/// Runs (or dry-runs) a validated batch.
pub(super) fn execute(cli: &Cli, call_args: &CallArgs, args: &Batch) -> Result<ExitStatus> {
    if is_dry_run(call_args.dry_run) {
        if args.resume.is_some() {
            return Err(Error::Usage(
                "--resume sends requests: set OPENROUTER_API_KEY (and drop --dry-run)".into(),
            ));
        }
        return dry_run(cli, &args.selectors, args.include_no_context, args.format);
    }
    let b = load_strict(cli)?;
    let rt = runtime()?;
    rt.block_on(async {
        let ctx = call::context(cli, b, call_args).await?;
        let control = call_args.control();
        let mut summaries = Vec::new();
        let mut not_run = None;
        match args.resume {
            Some(id) => {
                let row = ctx.store.run(id).await?;
                let mut settings: run::RunSettings = serde_json::from_str(&row.settings)
                    .map_err(|e| Error::Tool(format!("run {id} has unreadable settings: {e}")))?;
                // A resume continues the run's budget: what it spent already counts.
                settings.max_cost = args.max_cost.or(row.max_cost_usd).or(settings.max_cost);
                if row.status == crate::store::RunStatus::Completed && row.test_cases >= row.planned_test_cases && row.provider_errors == 0 {
                    eprintln!("run {id} is already complete");
                }
                if settings.benchmark_hash != ctx.benchmark.content_hash {
                    return Err(Error::Usage(format!(
                        "the benchmark content changed since run {id} started; resuming would mix two versions in one run (restore the content, or start a new run)"
                    )));
                }
                summaries.push(run::run_batch(&ctx, &settings, Some(id), "batch", &control).await?);
            }
            None => {
                let selectors = args.selectors.iter().map(|s| s.as_str().to_string()).collect::<Vec<_>>();
                let models = call::models(&ctx.benchmark, call_args)?;
                let sel = super::estimate::Selection { selectors: selectors.clone(), include_no_context: args.include_no_context, limit: args.limit, repeats: args.repeats, max_cost: args.max_cost };
                super::estimate::preflight(cli, &ctx.benchmark, &ctx.store, &models, &sel, call_args.yes).await?;
                // One budget for the whole batch: each run gets what is left.
                let mut left = args.max_cost;
                let (mut skipped, mut stopped) = (Vec::new(), false);
                for model in models {
                    if stopped || left.is_some_and(|l| l <= 0.0) {
                        skipped.push(model.id);
                        continue;
                    }
                    let settings = run::RunSettings {
                        concurrency: args.concurrency,
                        limit: args.limit,
                        repeats: args.repeats,
                        max_cost: left,
                        ..call::settings_for(&ctx.benchmark, model, selectors.clone(), args.include_no_context, call_args)
                    };
                    let summary = run::run_batch(&ctx, &settings, None, "batch", &control).await?;
                    if let Some(l) = &mut left {
                        *l -= summary.cost_usd;
                    }
                    // Models run one after the other: once one stops (402,
                    // breaker, budget, interrupt), the rest are not run.
                    stopped = summary.status != crate::store::RunStatus::Completed;
                    summaries.push(summary);
                }
                if !skipped.is_empty() {
                    not_run = Some(call::NotRun {
                        command: rerun_command(args, call_args, &skipped, left),
                        models: skipped,
                    });
                }
            }
        }
        // Closing folds the WAL into the database file and removes it, so
        // a copy of the file alone holds every result.
        ctx.store.close().await;
        call::report_summaries(&summaries, not_run.as_ref(), args.format)
    })
}

/// A finite amount of USD above zero.
pub(super) fn parse_budget(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of USD"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("{s:?} is not a finite amount of USD above 0"));
    }
    Ok(v)
}

/// The command that runs `models` with this batch's other flags.
fn rerun_command(args: &Batch, call: &CallArgs, models: &[String], left: Option<f64>) -> String {
    let mut cmd = String::from("helmbench run-batch");
    if args.all_scenarios {
        cmd.push_str(" --all-scenarios");
    }
    for s in &args.selectors {
        cmd.push_str(&format!(" --scenario '{}'", s.as_str()));
    }
    cmd.push_str(&format!(" --models '{}'", models.join(",")));
    if args.concurrency.get() != 16 {
        cmd.push_str(&format!(" --concurrency {}", args.concurrency));
    }
    if let Some(l) = args.limit {
        cmd.push_str(&format!(" --limit {l}"));
    }
    if args.repeats != 1 {
        cmd.push_str(&format!(" --repeats {}", args.repeats));
    }
    if !args.include_no_context {
        cmd.push_str(" --skip-no-context");
    }
    if call.no_cache {
        cmd.push_str(" --no-cache");
    }
    match left {
        Some(l) if l > 0.0 => cmd.push_str(&format!(" --max-cost {l:.4}")),
        Some(_) => {
            cmd.push_str(" --max-cost USD   # the batch's budget is spent: choose a new one")
        }
        None => {}
    }
    cmd
}

fn dry_run(
    cli: &Cli,
    selectors: &[Selector],
    include_no_context: bool,
    format: DataFormat,
) -> Result<ExitStatus> {
    let (b, errors) = load_reporting(cli);
    let summary = run::dry_run(&b, selectors, include_no_context).map_err(Error::Usage)?;
    let warnings = crate::content::lint::lint(&b, selectors);
    let mut o = out();
    match format {
        DataFormat::Json => {
            let mut v = serde_json::to_value(&summary)?;
            v["content_errors"] = json!(errors.iter().map(ToString::to_string).collect::<Vec<_>>());
            v["warnings"] = json!(warnings.len());
            serde_json::to_writer_pretty(&mut o, &v)?;
            writeln!(o)?;
        }
        DataFormat::Table => {
            writeln!(o, "dry run: nothing sent, nothing written")?;
            writeln!(o, "{summary}")?;
            if errors.is_empty() {
                writeln!(o, "content: no errors")?;
            } else {
                writeln!(o, "content: {} error(s), listed above", errors.len())?;
            }
            if !warnings.is_empty() {
                writeln!(
                    o,
                    "content: {} warning(s): run `helmbench check` to see them",
                    warnings.len()
                )?;
            }
        }
    }
    Ok(ExitStatus::unless_content_errors(errors.len()))
}
