//! `run-all`: run-single, then run-batch over every scenario, then list.

use std::num::NonZeroUsize;

use clap::Args;

use super::call::CallArgs;
use super::output::DataFormat;
use super::run_batch::Batch;
use super::settings::Settings;
use super::{list, run_batch, run_single};
use crate::{ExitStatus, Result};

#[derive(Debug, Args)]
pub struct RunAllArgs {
    #[command(flatten)]
    pub call: CallArgs,
    /// Requests in flight at once, per model (1 to 1024).
    #[arg(long, default_value = "16", value_parser = super::selection::parse_concurrency)]
    pub concurrency: NonZeroUsize,
}

pub fn run(s: &Settings, args: &RunAllArgs) -> Result<ExitStatus> {
    s.say_dry_run(args.call.dry_run);
    let status = run_single::execute(s, &args.call, None, DataFormat::Table)?;
    if status != ExitStatus::Success {
        return Ok(status);
    }
    let status = run_batch::execute(s, &args.call, &Batch::every_scenario(args.concurrency))?;
    if status != ExitStatus::Success {
        return Ok(status);
    }
    list::show(s, DataFormat::Table)
}
