//! `run-single`: one test case per model, shown in full.

use std::io::Write;

use clap::Args;

use super::call::{self, CallArgs};
use super::{Cli, DataFormat, is_dry_run, load_reporting, load_strict, out, runtime};
use crate::benchmark::compose;
use crate::discovery::{self, Selector};
use crate::store::{ErrorKind, RunStatus, Store};
use crate::{Error, Result, run};

#[derive(Debug, Args)]
pub struct RunSingleArgs {
    /// The test case (default: the first one).
    pub test_code: Option<String>,
    #[command(flatten)]
    pub call: CallArgs,
    #[arg(long, value_enum, default_value_t = DataFormat::Table)]
    pub format: DataFormat,
}

pub fn run(cli: &Cli, args: &RunSingleArgs) -> Result<u8> {
    let selectors = match &args.test_code {
        Some(code) => vec![Selector::parse(code).map_err(Error::Usage)?],
        None => Vec::new(),
    };
    let (b, errors) = if is_dry_run(args.call.dry_run) {
        load_reporting(cli)
    } else {
        (load_strict(cli)?, Vec::new())
    };
    let cases = discovery::select(&b, &selectors, true).map_err(Error::Usage)?;
    let Some(first) = cases.first() else {
        return Err(Error::Usage("the benchmark has no test cases".into()));
    };
    let code = first.code();
    if is_dry_run(args.call.dry_run) {
        let mut o = out();
        writeln!(
            o,
            "=== {code} (dry run: nothing sent) ===
{}",
            compose::compose(first)
        )?;
        return Ok(if errors.is_empty() { 0 } else { 2 });
    }
    let rt = runtime()?;
    rt.block_on(async {
        let ctx = call::context(cli, b, &args.call).await?;
        let control = args.call.control();
        let mut summaries = Vec::new();
        for model in call::models(&ctx.benchmark, &args.call)? {
            let settings = run::RunSettings {
                limit: Some(1),
                ..call::settings_for(&ctx.benchmark, model, vec![code.clone()], true, &args.call)
            };
            let summary = run::run_batch(&ctx, &settings, None, "single", &control).await?;
            show_single(&ctx.store, summary.run_id, args.format).await?;
            let stop = summary.status != RunStatus::Completed;
            summaries.push(summary);
            if stop {
                break;
            }
        }
        // Closing folds the WAL into the database file and removes it, so
        // a copy of the file alone holds every result.
        ctx.store.close().await;
        call::report_summaries(&summaries, None, DataFormat::Table)
    })
}

/// Prints a single run's prompt, reply, verdict, criteria and cost.
async fn show_single(store: &Store, run_id: i64, format: DataFormat) -> Result<()> {
    let rows = crate::report::results(store, run_id).await?;
    let mut o = out();
    for r in rows {
        match format {
            DataFormat::Json => {
                serde_json::to_writer_pretty(&mut o, &r)?;
                writeln!(o)?;
            }
            DataFormat::Table => {
                writeln!(o, "=== {} · {} ===", r.test_code, r.model)?;
                writeln!(o, "--- prompt ---\n{}", r.prompt)?;
                writeln!(
                    o,
                    "--- reply ---\n{}",
                    r.response.as_deref().unwrap_or("(none)")
                )?;
                let verdict = if r.passed { "PASS" } else { "FAIL" };
                match &r.error {
                    Some(e) => writeln!(
                        o,
                        "--- verdict: {verdict} ({}: {e})",
                        r.error_kind.map_or("error", ErrorKind::as_str)
                    )?,
                    None => writeln!(o, "--- verdict: {verdict}")?,
                }
                for j in &r.judgements {
                    writeln!(
                        o,
                        "  {}: {} — {}",
                        j.criterion,
                        j.verdict
                            .as_ref()
                            .map_or_else(|| "error".to_string(), ToString::to_string),
                        j.justification
                            .as_deref()
                            .or(j.error.as_deref())
                            .unwrap_or("")
                    )?;
                }
                writeln!(
                    o,
                    "--- cost: ${:.6} model + ${:.6} judge, {} + {} tokens, {} ms{}",
                    r.cost_usd,
                    r.judge_cost_usd,
                    r.prompt_tokens,
                    r.completion_tokens,
                    r.latency_ms.unwrap_or(0),
                    if r.cached { ", from cache" } else { "" }
                )?;
            }
        }
    }
    Ok(())
}
