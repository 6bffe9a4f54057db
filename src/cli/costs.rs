//! `costs`: spend per run, model and scenario.

use std::io::Write;

use clap::Args;

use super::{Cli, DataFormat, out, read_only};
use crate::ExitStatus;
use crate::{Error, Result};

#[derive(Debug, Args)]
pub struct CostsArgs {
    /// Only this run.
    #[arg(long, value_name = "ID")]
    pub run_id: Option<i64>,
    /// Only the runs of this model.
    #[arg(long)]
    pub model: Option<String>,
    #[arg(long, value_enum, default_value_t = DataFormat::Table)]
    pub format: DataFormat,
}

pub fn run(cli: &Cli, args: &CostsArgs) -> Result<ExitStatus> {
    let report = read_only(cli, |store| async move {
        crate::report::costs(&store, args.run_id, args.model.as_deref())
            .await
            .map_err(Error::from)
    })?;
    let mut o = out();
    match args.format {
        DataFormat::Json => {
            serde_json::to_writer_pretty(&mut o, &report)?;
            writeln!(o)?;
        }
        DataFormat::Table => crate::report::text::write_costs(&mut o, &report)?,
    }
    Ok(ExitStatus::Success)
}
