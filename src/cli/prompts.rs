//! `prompts`: the exact composed prompt and response format of test cases.

use std::io::Write;

use clap::{Args, ValueEnum};
use serde_json::json;

use super::output::out;
use super::selection::parse_selectors;
use super::settings::Settings;
use crate::ExitStatus;
use crate::benchmark::cases;
use crate::benchmark::compose;
use crate::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PromptFormat {
    Text,
    Jsonl,
}

#[derive(Debug, Args)]
pub struct PromptsArgs {
    /// Scenario codes, test codes or prefixes (P1, P1-B2); all when none.
    pub selectors: Vec<String>,
    #[arg(long, value_enum, default_value_t = PromptFormat::Text)]
    pub format: PromptFormat,
    /// Leave out the test cases without a user context.
    #[arg(long)]
    pub skip_no_context: bool,
}

pub fn run(s: &Settings, args: &PromptsArgs) -> Result<ExitStatus> {
    let selectors = parse_selectors(&args.selectors)?;
    let (b, errors) = s.load_reporting();
    let cases = cases::select(&b, &selectors, !args.skip_no_context).map_err(Error::usage)?;
    let mut o = std::io::BufWriter::new(out());
    let mut prompt = String::new();
    for case in &cases {
        compose::compose_into(case, &mut prompt);
        let rf = compose::response_format(case);
        let evaluation = case.evaluation();
        match args.format {
            PromptFormat::Jsonl => {
                serde_json::to_writer(
                    &mut o,
                    &json!({"test_code": case.code(), "prompt": prompt, "response_format": rf,
                            "evaluation": &*evaluation, "base_severity": case.base_severity()}),
                )?;
                writeln!(o)?;
            }
            PromptFormat::Text => {
                writeln!(o, "=== {} ===", case.code())?;
                writeln!(o, "{prompt}")?;
                writeln!(
                    o,
                    "--- evaluation (base severity {:+}) ---\n{}",
                    case.base_severity(),
                    serde_json::to_string(&*evaluation)?
                )?;
                match rf {
                    Some(rf) => writeln!(
                        o,
                        "--- response_format ---\n{}",
                        serde_json::to_string_pretty(rf)?
                    )?,
                    None => writeln!(o, "--- response_format ---\n(none: free-text reply)")?,
                }
                writeln!(o)?;
            }
        }
    }
    o.flush()?;
    Ok(ExitStatus::unless_content_errors(errors.len()))
}
