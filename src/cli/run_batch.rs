//! `run-batch`: a batch of test cases per model, or its dry-run.

use std::io::Write;

use clap::Args;
use serde_json::json;

use super::call::{self, CallArgs};
use super::{
    Cli, DataFormat, is_dry_run, load_reporting, load_strict, out, parse_selectors, runtime,
};
use crate::{Error, Result, runner};

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
    /// Requests in flight at once, per model.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Run at most this many test cases.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Run each test case this many times (for consistency and intervals).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub repeats: u32,
    /// Stop cleanly once the provider-reported spend reaches this many USD.
    #[arg(long, value_name = "USD")]
    pub max_cost: Option<f64>,
    #[arg(long, value_enum, default_value_t = DataFormat::Table)]
    pub format: DataFormat,
}

pub fn run(cli: &Cli, args: &RunBatchArgs) -> Result<u8> {
    if is_dry_run(args.call.dry_run) {
        if args.resume.is_some() {
            return Err(Error::Usage(
                "--resume sends requests: set OPENROUTER_API_KEY (and drop --dry-run)".into(),
            ));
        }
        return dry_run(cli, &args.scenarios, args.skip_no_context, args.format);
    }
    // Refuse a bad selector before the database is created or touched.
    parse_selectors(&args.scenarios)?;
    let b = load_strict(cli)?;
    let rt = runtime()?;
    rt.block_on(async {
        let ctx = call::context(cli, b, &args.call).await?;
        let cancel = call::ctrl_c_token();
        let mut summaries = Vec::new();
        match args.resume {
            Some(id) => {
                let row = ctx.store.run(id).await?;
                let settings: runner::RunSettings = serde_json::from_str(&row.settings)
                    .map_err(|e| Error::Tool(format!("run {id} has unreadable settings: {e}")))?;
                if row.status == "completed" && row.test_cases >= row.planned_test_cases && row.provider_errors == 0 {
                    eprintln!("run {id} is already complete");
                }
                if settings.benchmark_hash != ctx.benchmark.content_hash {
                    return Err(Error::Usage(format!(
                        "the benchmark content changed since run {id} started; resuming would mix two versions in one run (restore the content, or start a new run)"
                    )));
                }
                summaries.push(runner::run_batch(&ctx, &settings, Some(id), "batch", cancel.clone()).await?);
            }
            None => {
                let selectors = parse_selectors(&args.scenarios)?.iter().map(|s| s.as_str().to_string()).collect::<Vec<_>>();
                for model in call::models(&ctx.benchmark, &args.call)? {
                    let settings = runner::RunSettings {
                        concurrency: args.concurrency.max(1),
                        limit: args.limit,
                        repeats: args.repeats.max(1),
                        max_cost: args.max_cost,
                        ..call::settings_for(&ctx.benchmark, model, selectors.clone(), !args.skip_no_context, &args.call)
                    };
                    let summary = runner::run_batch(&ctx, &settings, None, "batch", cancel.clone()).await?;
                    let stop = summary.status != "completed";
                    summaries.push(summary);
                    if stop {
                        break;
                    }
                }
            }
        }
        // Closing folds the WAL into the database file and removes it, so
        // a copy of the file alone holds every result.
        ctx.store.close().await;
        call::report_summaries(&summaries, args.format)
    })
}

fn dry_run(cli: &Cli, raw: &[String], skip_no_context: bool, format: DataFormat) -> Result<u8> {
    let selectors = parse_selectors(raw)?;
    let (b, errors) = load_reporting(cli);
    let summary = runner::dry_run(&b, &selectors, !skip_no_context).map_err(Error::Usage)?;
    let mut o = out();
    match format {
        DataFormat::Json => {
            let mut v = serde_json::to_value(&summary)?;
            v["content_errors"] = json!(errors.iter().map(ToString::to_string).collect::<Vec<_>>());
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
        }
    }
    Ok(if errors.is_empty() { 0 } else { 2 })
}
