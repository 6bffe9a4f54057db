//! `run-single`: one test case per model, shown in full.

use std::io::Write;

use clap::Args;
use futures_util::TryStreamExt;
use serde_json::json;

use super::call::{self, CallArgs};
use super::output::{DataFormat, out};
use super::settings::{Settings, runtime};
use crate::ExitStatus;
use crate::benchmark::cases;
use crate::benchmark::cases::Selector;
use crate::benchmark::compose;
use crate::domain::{Detail, Which};
use crate::domain::{ErrorKind, RunStatus};
use crate::domain::{ResultRecord, TurnRecord};
use crate::store::Store;
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

pub fn run(s: &Settings, args: &RunSingleArgs) -> Result<ExitStatus> {
    let test_code = match &args.test_code {
        Some(code) => Some(Selector::parse(code).map_err(Error::usage)?),
        None => None,
    };
    execute(s, &args.call, test_code, args.format)
}

/// Runs one test case (the first one when `test_code` is None) per model.
pub(super) fn execute(
    s: &Settings,
    call_args: &CallArgs,
    test_code: Option<Selector>,
    format: DataFormat,
) -> Result<ExitStatus> {
    let selectors: Vec<Selector> = test_code.into_iter().collect();
    let (b, errors) = if s.is_dry_run(call_args.dry_run) {
        s.load_reporting()
    } else {
        (s.load_strict()?, Vec::new())
    };
    let cases = cases::select(&b, &selectors, true).map_err(Error::usage)?;
    let Some(first) = cases.first() else {
        return Err(Error::usage("the benchmark has no test cases".into()));
    };
    let code = first.code();
    if s.is_dry_run(call_args.dry_run) {
        let mut o = out();
        writeln!(
            o,
            "=== {code} (dry run: nothing sent) ===
{}",
            compose::compose(first)
        )?;
        return Ok(ExitStatus::unless_content_errors(errors.len()));
    }
    let rt = runtime()?;
    rt.block_on(async {
        let ctx = call::context(s, b, call_args).await?;
        let control = call_args.control(s);
        let mut summaries = Vec::new();
        for model in call::models(&ctx.benchmark, call_args)? {
            let selection = run::Selection {
                selectors: vec![Selector::parse(&code).map_err(Error::usage)?],
                limit: Some(1),
                ..run::Selection::everything()
            };
            call::require_user_model(&ctx.benchmark, &selection, call_args.user_model.as_deref())?;
            let settings =
                call::settings_for(&ctx.benchmark, &ctx.client, model, &selection, call_args);
            let summary = run::run_batch(&ctx, &settings, None, "single", &control).await?;
            show_single(&ctx.store, summary.run_id, format).await?;
            let stop = summary.status != RunStatus::Completed;
            summaries.push(summary);
            if stop {
                break;
            }
        }
        let reuse = call::reused(&ctx.store, &summaries).await;
        // Closing folds the WAL into the database file and removes it, so
        // a copy of the file alone holds every result.
        ctx.store.close().await;
        // Stdout holds only the JSON when JSON was asked for.
        match format {
            DataFormat::Json => call::report_summaries_to(
                std::io::stderr(),
                &summaries,
                &[],
                &reuse,
                DataFormat::Table,
            ),
            DataFormat::Table => call::report_summaries(&summaries, &[], &reuse, DataFormat::Table),
        }
    })
}

/// Prints a single run's prompt, reply, verdict, criteria and cost.
async fn show_single(store: &Store, run_id: i64, format: DataFormat) -> Result<()> {
    let detail = Detail {
        judgements: true,
        prompts: true,
        replies: true,
    };
    let rows: Vec<ResultRecord> = store
        .results(Which::Run(run_id), detail)
        .try_collect()
        .await?;
    let mut o = out();
    for r in rows {
        // A conversation (issue 42) shows its whole transcript.
        let c = &r.result;
        let turns = store.turns_of(run_id, &c.test_code, c.repeat_index).await?;
        let details = if turns.is_empty() {
            None
        } else {
            store
                .evaluation_details(run_id, &c.test_code, c.repeat_index)
                .await?
        };
        match format {
            DataFormat::Json => {
                let mut v = single_json(&r);
                if !turns.is_empty() {
                    v["turns"] = turns_json(&turns, details.as_ref());
                }
                serde_json::to_writer_pretty(&mut o, &v)?;
                writeln!(o)?;
            }
            DataFormat::Table => {
                let c = &r.result;
                writeln!(o, "=== {} · {} ===", c.test_code, r.model)?;
                if turns.is_empty() {
                    writeln!(
                        o,
                        "--- prompt ---\n{}",
                        r.prompt.as_deref().unwrap_or_default()
                    )?;
                    writeln!(
                        o,
                        "--- reply ---\n{}",
                        r.response.as_deref().unwrap_or("(none)")
                    )?;
                } else {
                    write_transcript(&mut o, &turns, details.as_ref())?;
                }
                let verdict = if c.passed { "PASS" } else { "FAIL" };
                match &r.error {
                    Some(e) => writeln!(
                        o,
                        "--- verdict: {verdict} ({}: {e})",
                        c.error_kind.map_or("error", ErrorKind::as_str)
                    )?,
                    None => writeln!(o, "--- verdict: {verdict}")?,
                }
                for j in &r.judgements {
                    let line = crate::judging::judge::criterion_line(
                        &j.criterion,
                        j.verdict.as_ref(),
                        j.justification.as_deref(),
                        j.error.as_deref(),
                    );
                    writeln!(o, "  {line}")?;
                }
                writeln!(
                    o,
                    "--- cost: ${} model + ${} judge, {} + {} tokens, {} ms{}",
                    crate::report::usd(r.cost_usd, 6),
                    crate::report::usd(r.judge_cost_usd, 6),
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

/// `run-single --format json`: one result with its prompt, in the keys and
/// order this command has always printed (a view of the stored record, not
/// another record).
fn single_json(r: &ResultRecord) -> serde_json::Value {
    let c = &r.result;
    let judgements: Vec<serde_json::Value> = r
        .judgements
        .iter()
        .map(|j| {
            json!({
                "criterion": j.criterion,
                "judge_model": j.judge_model,
                "verdict": j.verdict,
                "justification": j.justification,
                "passed": j.passed,
                "error": j.error,
                "cost_usd": j.cost_usd,
            })
        })
        .collect();
    json!({
        "run_id": r.run_id,
        "test_code": c.test_code,
        "model": r.model,
        "repeat_index": c.repeat_index,
        "passed": c.passed,
        "matched": c.matched,
        "error_kind": c.error_kind,
        "error": r.error,
        "prompt": r.prompt.as_deref().unwrap_or_default(),
        "response": r.response,
        "parsed": r.parsed,
        "base_severity": c.base_severity,
        "difficulty": c.difficulty,
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "cost_usd": r.cost_usd,
        "judge_cost_usd": r.judge_cost_usd,
        "latency_ms": r.latency_ms,
        "cached": r.cached,
        "quality": r.quality,
        "judgements": judgements,
    })
}

/// Each exchange's verdict in a conversation's `evaluation_details`.
fn turn_verdict(details: Option<&serde_json::Value>, index: i64) -> Option<&serde_json::Value> {
    details?
        .pointer("/conversation/turns")?
        .as_array()?
        .iter()
        .find(|t| t["index"].as_i64() == Some(index))
}

/// A conversation's transcript: each user message, then the reply that
/// followed it (prefilled, unjudged, or live with its verdict and cost).
fn write_transcript(
    o: &mut impl Write,
    turns: &[TurnRecord],
    details: Option<&serde_json::Value>,
) -> std::io::Result<()> {
    for t in turns {
        let pressure = t
            .pressure
            .as_deref()
            .map(|p| format!(", pressure: {p}"))
            .unwrap_or_default();
        match &t.turn_code {
            None => writeln!(o, "--- message 1 (user) ---")?,
            // A persona conversation's user messages after message 1 are
            // the simulator's (issue 42): marked so.
            Some(code) if crate::benchmark::conversation::is_simulated(code) => {
                writeln!(o, "--- {code} (simulated user{pressure}) ---")?
            }
            Some(code) => writeln!(o, "--- {code} (user{pressure}) ---")?,
        }
        writeln!(o, "{}", t.user_message)?;
        let v = turn_verdict(details, t.turn_index);
        let how = if t.prefilled {
            "prefilled by the script".to_string()
        } else {
            let verdict = match v.and_then(|v| v["passed"].as_bool()) {
                _ if !t.judged => "not judged".to_string(),
                Some(true) => "PASS".to_string(),
                Some(false) => match v.and_then(|v| v["error"].as_str()) {
                    Some(e) => format!("FAIL: {e}"),
                    None => "FAIL".to_string(),
                },
                None => "no verdict".to_string(),
            };
            format!(
                "live, {verdict}, ${}{}",
                crate::report::usd(t.cost_usd, 6),
                if t.cached { ", from cache" } else { "" }
            )
        };
        writeln!(o, "--- reply ({how}) ---")?;
        writeln!(o, "{}", t.response.as_deref().unwrap_or("(none)"))?;
        for c in v
            .and_then(|v| v["criteria"].as_array())
            .into_iter()
            .flatten()
        {
            let line = crate::judging::judge::criterion_line(
                c["criterion"].as_str().unwrap_or_default(),
                c.get("verdict").filter(|x| !x.is_null()),
                c["justification"].as_str(),
                c["error"].as_str(),
            );
            writeln!(o, "  {line}")?;
        }
    }
    Ok(())
}

/// `run-single --format json`'s `turns`: the transcript with per-turn verdicts.
fn turns_json(turns: &[TurnRecord], details: Option<&serde_json::Value>) -> serde_json::Value {
    turns
        .iter()
        .map(|t| {
            let v = turn_verdict(details, t.turn_index);
            json!({
                "index": t.turn_index,
                "turn": t.turn_code,
                "simulated": t.turn_code.as_deref().is_some_and(crate::benchmark::conversation::is_simulated),
                "pressure": t.pressure,
                "user_message": t.user_message,
                "response": t.response,
                "prefilled": t.prefilled,
                "judged": t.judged,
                "passed": v.map(|v| &v["passed"]),
                "criteria": v.map(|v| &v["criteria"]),
                "cost_usd": t.cost_usd,
                "cached": t.cached,
            })
        })
        .collect()
}
