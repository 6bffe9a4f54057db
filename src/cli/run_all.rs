//! `run-all`: run-single, then run-batch over every scenario, then list.

use clap::Args;

use super::call::CallArgs;
use super::{Cli, DataFormat, list, run_batch, run_single};
use crate::Result;

#[derive(Debug, Args)]
pub struct RunAllArgs {
    #[command(flatten)]
    pub call: CallArgs,
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
}

pub fn run(cli: &Cli, args: &RunAllArgs) -> Result<u8> {
    let single = run_single::RunSingleArgs {
        test_code: None,
        call: args.call.clone(),
        format: DataFormat::Table,
    };
    let code = run_single::run(cli, &single)?;
    if code != 0 {
        return Ok(code);
    }
    let batch = run_batch::RunBatchArgs {
        scenarios: Vec::new(),
        all_scenarios: true,
        call: args.call.clone(),
        skip_no_context: false,
        resume: None,
        concurrency: args.concurrency,
        limit: None,
        repeats: 1,
        max_cost: None,
        format: DataFormat::Table,
    };
    let code = run_batch::run(cli, &batch)?;
    if code != 0 {
        return Ok(code);
    }
    list::run(
        cli,
        &list::ListArgs {
            format: DataFormat::Table,
        },
    )
}
