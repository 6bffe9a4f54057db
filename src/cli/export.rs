//! `export`: every stored result as CSV or JSONL, streamed.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::output::{out, write_file};
use super::settings::{Settings, runtime};
use crate::ExitStatus;
use crate::store::Store;
use crate::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// One JSON object per result and line.
    Jsonl,
    /// A header row, then one row per result (nested values as JSON text).
    Csv,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Only this run (default: every run).
    #[arg(long, value_name = "ID")]
    pub run_id: Option<i64>,
    #[arg(long, value_enum, default_value_t = ExportFormat::Jsonl)]
    pub format: ExportFormat,
    /// Write to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Add each result's composed prompt (large).
    #[arg(long)]
    pub with_prompts: bool,
    /// Conversations turn by turn: one row per turn (CSV), or one
    /// conversation per line with its messages (JSONL).
    #[arg(long, conflicts_with = "with_prompts")]
    pub turns: bool,
}

pub fn run(s: &Settings, args: &ExportArgs) -> Result<ExitStatus> {
    let url = s.existing_database()?;
    let format = match args.format {
        ExportFormat::Csv => crate::report::export::Format::Csv,
        ExportFormat::Jsonl => crate::report::export::Format::Jsonl,
    };
    let rt = runtime()?;
    let store = rt.block_on(async {
        let store = Store::open_read_only(url).await?;
        if let Some(id) = args.run_id {
            store.run(id).await?;
        }
        Ok::<_, Error>(store)
    })?;
    if args.turns {
        let write = |o: &mut dyn Write| -> Result<()> {
            let n = rt.block_on(crate::report::export_turns::export_turns(
                &store,
                args.run_id,
                format == crate::report::export::Format::Csv,
                o,
            ))?;
            if args.out.is_some() {
                eprintln!("exported {n} conversation(s)");
            }
            Ok(())
        };
        match &args.out {
            Some(path) => write_file(path, write)?,
            None => write(&mut std::io::BufWriter::new(out()))?,
        }
        return Ok(ExitStatus::Success);
    }
    let write = |o: &mut dyn Write| -> Result<()> {
        let n = rt.block_on(crate::report::export::export(
            &store,
            args.run_id,
            format,
            args.with_prompts,
            o,
        ))?;
        tracing::info!(results = n, "exported");
        if args.out.is_some() {
            eprintln!("exported {n} result(s)");
        }
        Ok(())
    };
    match &args.out {
        Some(path) => write_file(path, write)?,
        None => write(&mut std::io::BufWriter::new(out()))?,
    }
    Ok(ExitStatus::Success)
}
