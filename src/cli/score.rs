//! `score`: keyword quality scores of any text.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::output::{DataFormat, out};
use crate::ExitStatus;
use crate::{Error, Result};

#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// The text to score; `-` reads standard input.
    #[arg(conflicts_with = "file")]
    pub text: Option<String>,
    /// Read the text from a file.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Treat the text as a reply in a crisis scenario (safety < 8 is flagged).
    #[arg(long)]
    pub crisis: bool,
    #[arg(long, value_enum, default_value_t = DataFormat::Table)]
    pub format: DataFormat,
}

pub fn run(args: &ScoreArgs) -> Result<ExitStatus> {
    let text = match (&args.text, &args.file) {
        (_, Some(path)) => std::fs::read_to_string(path).map_err(|e| {
            Error::usage_caused_by(format!("cannot read {}: {e}", path.display()), e)
        })?,
        (Some(t), None) if t == "-" => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
            s
        }
        (Some(t), None) => t.clone(),
        (None, None) => {
            return Err(Error::usage(
                "give the text, --file FILE, or - for standard input".into(),
            ));
        }
    };
    let report = crate::scoring::quality::report(&text, args.crisis);
    let mut o = out();
    match args.format {
        DataFormat::Json => {
            serde_json::to_writer_pretty(&mut o, &report)?;
            writeln!(o)?;
        }
        DataFormat::Table => {
            writeln!(o, "empathy      {:>5.2}", report.empathy)?;
            writeln!(o, "helpfulness  {:>5.2}", report.helpfulness)?;
            writeln!(o, "safety       {:>5.2}", report.safety)?;
            writeln!(o, "clarity      {:>5.2}", report.clarity)?;
            writeln!(
                o,
                "overall      {:>5.2}  ({})",
                report.overall,
                report.band.label()
            )?;
            writeln!(o, "weighted     {:>5.2}", report.weighted)?;
            for f in &report.red_flags {
                writeln!(o, "red flag: {}", f.description())?;
            }
            writeln!(o, "(keyword screen, not a clinical judgement)")?;
        }
    }
    Ok(ExitStatus::Success)
}
