//! `check`: the author's lint. Loads everything as a dry-run does, then
//! prints content errors (exit 2) and warnings (exit 0, or 2 with `--strict`),
//! each with file, line and section.

use std::io::Write;

use clap::Args;
use serde_json::json;

use super::output::{DataFormat, out};
use super::selection::parse_selectors;
use super::settings::Settings;
use crate::ExitStatus;
use crate::Result;
use crate::content;
use crate::content::ContentError;
use crate::content::lint::{self, Warning};

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Scenario codes or prefixes (P1, P1-B2) to check; all when none.
    pub selectors: Vec<String>,
    /// Exit 2 on warnings too, not only on errors.
    #[arg(long)]
    pub strict: bool,
    #[arg(long, value_enum, default_value_t = DataFormat::Table)]
    pub format: DataFormat,
}

pub fn run(s: &Settings, args: &CheckArgs) -> Result<ExitStatus> {
    let selectors = parse_selectors(&args.selectors)?;
    let (b, errors) = content::load(&s.benchmark_dir);
    // A selector that names nothing is a slip of its own, as everywhere else.
    crate::benchmark::cases::select_indices(&b, &selectors, true).map_err(crate::Error::usage)?;
    let warnings = lint::lint(&b, &selectors);
    let mut o = out();
    match args.format {
        DataFormat::Json => {
            let located = |e: &ContentError| {
                json!({"file": e.path.display().to_string(), "line": e.line,
                       "section": e.section, "message": e.message})
            };
            let warning = |w: &Warning| {
                let mut v = located(&w.at);
                v["kind"] = json!(w.kind);
                v
            };
            serde_json::to_writer_pretty(
                &mut o,
                &json!({
                    "errors": errors.iter().map(located).collect::<Vec<_>>(),
                    "warnings": warnings.iter().map(warning).collect::<Vec<_>>(),
                    "error_count": errors.len(),
                    "warning_count": warnings.len(),
                    "scenarios": b.scenarios.len(),
                }),
            )?;
            writeln!(o)?;
        }
        DataFormat::Table => {
            for e in &errors {
                writeln!(o, "error: {e}")?;
            }
            for w in &warnings {
                writeln!(o, "warning: {w}")?;
            }
            writeln!(
                o,
                "{} error(s), {} warning(s) in {} scenario(s)",
                errors.len(),
                warnings.len(),
                b.scenarios.len()
            )?;
        }
    }
    Ok(
        if !errors.is_empty() || (args.strict && !warnings.is_empty()) {
            ExitStatus::BadInput
        } else {
            ExitStatus::Success
        },
    )
}
