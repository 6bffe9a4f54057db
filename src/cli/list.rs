//! `list`: scenarios with their evaluation type and counts.

use std::io::Write;

use clap::Args;
use serde_json::json;

use super::output::{DataFormat, out, table_out};
use super::settings::Settings;
use crate::ExitStatus;
use crate::Result;

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long, value_enum, default_value_t = DataFormat::Table)]
    pub format: DataFormat,
}

pub fn run(s: &Settings, args: &ListArgs) -> Result<ExitStatus> {
    show(s, args.format)
}

/// The scenario list in `format` (also the last step of `run-all`).
pub(super) fn show(s: &Settings, format: DataFormat) -> Result<ExitStatus> {
    let (b, errors) = s.load_reporting();
    let rows: Vec<_> = b
        .scenarios
        .iter()
        .map(|s| {
            json!({
                "code": s.code,
                "evaluation": s.evaluation.type_name(),
                "conditions": s.conditions.len(),
                "user_contexts": s.user_contexts.len(),
                "perturbations": s.perturbations.len(),
                "test_cases": s.test_case_count(true),
                "behaviour": b.behaviour(&s.behaviour).map(|x| x.name.clone()),
                "criteria": s.rubrics.len(),
                "empty_components": s.empty_components(),
                // Later messages of a conversation (0: single-turn).
                "turns": s.turns.len(),
            })
        })
        .collect();
    let total = b.total_test_cases(true);
    let empty: usize = b.scenarios.iter().map(|s| s.empty_components()).sum();
    match format {
        DataFormat::Json => {
            let mut o = out();
            serde_json::to_writer_pretty(
                &mut o,
                &json!({"scenarios": rows, "total_test_cases": total, "empty_components": empty, "content_errors": errors.len()}),
            )?;
            writeln!(o)?;
        }
        DataFormat::Table => {
            let mut o = table_out(s.width);
            let mut t = crate::report::terminal::table([
                "scenario",
                "behaviour",
                "evaluation",
                "conditions",
                "user contexts",
                "perturbations",
                "test cases",
                "empty",
            ]);
            for (s, r) in b.scenarios.iter().zip(&rows) {
                t.add_row([
                    s.code.clone(),
                    r["behaviour"].as_str().unwrap_or_default().to_string(),
                    match s.turns.len() {
                        0 => s.evaluation.type_name().to_string(),
                        n => format!(
                            "{}, conversation of {} turns",
                            s.evaluation.type_name(),
                            n + 1
                        ),
                    },
                    s.conditions.len().to_string(),
                    s.user_contexts.len().to_string(),
                    s.perturbations.len().to_string(),
                    s.test_case_count(true).to_string(),
                    s.empty_components().to_string(),
                ]);
            }
            writeln!(o, "{}", crate::report::terminal::fitted(t))?;
            writeln!(o, "{} scenarios, {total} test cases", b.scenarios.len())?;
            if empty > 0 {
                writeln!(
                    o,
                    "{empty} empty component(s): only frontmatter, they add nothing to the prompt (their severity still counts)"
                )?;
            }
        }
    }
    Ok(ExitStatus::unless_content_errors(errors.len()))
}
