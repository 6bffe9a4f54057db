//! `costs`: spend per run, model and scenario.

use std::io::Write;

use clap::Args;

use super::output::{DataFormat, out, table_out};
use super::settings::Settings;
use crate::ExitStatus;
use crate::{Error, Result};

#[derive(Debug, Args)]
pub struct CostsArgs {
    /// Only this run.
    #[arg(long, value_name = "ID")]
    pub run_id: Option<i64>,
    /// Only the runs of this model.
    #[arg(long, value_parser = super::call::model_id)]
    pub model: Option<String>,
    #[arg(long, value_enum, default_value_t = DataFormat::Table)]
    pub format: DataFormat,
}

pub fn run(s: &Settings, args: &CostsArgs) -> Result<ExitStatus> {
    let (report, tokens, reuse, unfinished, simulator) = s.read_only(|store| async move {
        let report = crate::report::costs(&store, args.run_id, args.model.as_deref()).await?;
        let tokens = store.token_details(args.run_id).await?;
        let reuse = store.reuse(args.run_id).await?;
        let unfinished = store.unfinished_turns(args.run_id).await?;
        let simulator = store.simulator_costs(args.run_id).await?;
        Ok::<_, Error>((report, tokens, reuse, unfinished, simulator))
    })?;
    // The user simulator's calls (issue 42): already in their
    // conversations' costs above, shown apart.
    let simulator: Vec<_> = simulator
        .into_iter()
        .filter(|u| report.runs.iter().any(|r| r.run_id == u.run_id))
        .collect();
    // Turns of conversations a stop left unfinished (issue 42): paid, and
    // counted in the totals once a resume finishes their conversation.
    let unfinished: Vec<_> = unfinished
        .into_iter()
        .filter(|u| report.runs.iter().any(|r| r.run_id == u.run_id))
        .collect();
    // Only the runs shown (a --model filter).
    let reuse: Vec<_> = reuse
        .into_iter()
        .filter(|(id, _)| report.runs.iter().any(|r| r.run_id == *id))
        .collect();
    // Reasoning tokens apart (they are part of the completion tokens above).
    let tokens: Vec<_> = tokens
        .into_iter()
        .filter(|t| report.runs.iter().any(|r| r.run_id == t.run_id))
        .collect();
    match args.format {
        DataFormat::Json => {
            let mut o = out();
            let mut v = serde_json::to_value(&report)?;
            v["reasoning"] = serde_json::json!(
                tokens
                    .iter()
                    .map(|t| serde_json::json!({
                        "run_id": t.run_id,
                        "reasoning_tokens": t.reasoning_tokens,
                        "judge_reasoning_tokens": t.judge_reasoning_tokens,
                        "cached_prompt_tokens": t.cached_prompt_tokens,
                        "judge_cached_prompt_tokens": t.judge_cached_prompt_tokens,
                    }))
                    .collect::<Vec<_>>()
            );
            v["cache_reuse"] = serde_json::json!(
                reuse
                    .iter()
                    .map(|(id, r)| serde_json::json!({
                        "run_id": id,
                        "reused_replies": r.replies,
                        "original_cost_usd": r.original_cost_usd,
                    }))
                    .collect::<Vec<_>>()
            );
            v["unfinished_conversations"] = serde_json::to_value(&unfinished)?;
            v["simulator"] = serde_json::to_value(&simulator)?;
            serde_json::to_writer_pretty(&mut o, &v)?;
            writeln!(o)?;
        }
        DataFormat::Table => {
            let mut o = table_out(s.width);
            crate::report::text::write_costs(&mut o, &report)?;
            for (id, r) in &reuse {
                writeln!(o, "run {id}: {}", super::call::reuse_line(r))?;
            }
            for u in &simulator {
                writeln!(
                    o,
                    "run {}: user simulator {}: {} call(s) ({} from the cache) cost ${}, {} prompt + {} completion tokens (included in the costs above)",
                    u.run_id,
                    u.user_model,
                    u.calls,
                    u.cached,
                    crate::report::usd(u.cost_usd, 6),
                    u.prompt_tokens,
                    u.completion_tokens,
                )?;
            }
            for u in &unfinished {
                writeln!(
                    o,
                    "run {}: {} turn(s) of {} conversation(s) not finished cost ${} (not in the totals above; `helmbench run-batch --resume {}` finishes them without paying those turns again)",
                    u.run_id,
                    u.turns,
                    u.conversations,
                    crate::report::usd(u.cost_usd, 6),
                    u.run_id
                )?;
            }
            if tokens.iter().any(|t| {
                t.reasoning_tokens
                    + t.judge_reasoning_tokens
                    + t.cached_prompt_tokens
                    + t.judge_cached_prompt_tokens
                    > 0
            }) {
                let mut t = crate::report::text::table([
                    "run",
                    "reasoning tokens",
                    "judge reasoning tokens",
                    "cached prompt tokens",
                    "judge cached prompt tokens",
                ]);
                for r in &tokens {
                    t.add_row(
                        [
                            r.run_id,
                            r.reasoning_tokens,
                            r.judge_reasoning_tokens,
                            r.cached_prompt_tokens,
                            r.judge_cached_prompt_tokens,
                        ]
                        .map(|n| n.to_string()),
                    );
                }
                writeln!(
                    o,
                    "reasoning tokens (already counted in the completion tokens above) and cached prompt tokens:\n{}",
                    crate::report::terminal::fitted(t)
                )?;
            }
        }
    }
    Ok(ExitStatus::Success)
}
