//! `runs`: every evaluation run with status, counts and cost.

use std::io::Write;

use clap::Args;
use serde_json::json;

use super::output::{DataFormat, out, table_out};
use super::settings::Settings;
use crate::ExitStatus;
use crate::{Error, Result};

#[derive(Debug, Args)]
pub struct RunsArgs {
    #[arg(long, value_enum, default_value_t = DataFormat::Table)]
    pub format: DataFormat,
}

pub fn run(s: &Settings, args: &RunsArgs) -> Result<ExitStatus> {
    let (rows, routing, reuse, batches, hosts) = s.read_only(|store| async move {
        let rows = store.runs().await?;
        let routing = crate::report::routing::by_run(&store, None).await?;
        let reuse = store.reuse(None).await?;
        let batches = store.all_batches().await?;
        let hosts = store.all_run_hosts().await?;
        Ok::<_, Error>((rows, routing, reuse, batches, hosts))
    })?;
    // The processes that work or worked on a run (the team store).
    let hosts_of = |id: i64| -> &[crate::domain::RunHost] {
        hosts.get(&id).map(Vec::as_slice).unwrap_or_default()
    };
    // A run's Batch API batches (issue 33), oldest first.
    let batches_of = |id: i64| -> Vec<&crate::domain::BatchRow> {
        batches.iter().filter(|b| b.run_id == id).collect()
    };
    let reused = |id: i64| reuse.get(&id).copied().unwrap_or_default();
    let route = |id: i64| routing.get(&id).cloned().unwrap_or_default();
    match args.format {
        DataFormat::Json => {
            let mut o = out();
            let runs: Vec<_> = rows
                .iter()
                .map(|r| {
                    let mut v = json!({"run_id": r.run_id, "model": r.model, "kind": r.kind, "status": r.status,
                           "test_cases": r.test_cases, "planned_test_cases": r.planned_test_cases,
                           "evaluations": r.evaluations, "passed": r.passed, "passed_evaluations": r.passed_evaluations,
                           "format_failures": r.format_failures, "judge_errors": r.judge_errors, "provider_errors": r.provider_errors,
                           "blocked": r.blocked, "refused": r.refused, "blocked_as": r.blocked_as().as_str(),
                           "cached_replies": r.cached_replies, "cached_original_cost_usd": reused(r.run_id).original_cost_usd, "cost_usd": r.cost_usd, "judge_cost_usd": r.judge_cost_usd,
                           "discarded_cost_usd": r.discarded_cost_usd, "unknown_cost_calls": r.unknown_cost_calls,
                           "max_cost_usd": r.max_cost_usd,
                           "started_at": r.started_at, "completed_at": r.completed_at, "message": r.message,
                           "routing": route(r.run_id),
                           "batches": batches_of(r.run_id).iter().map(|b| json!({
                               "batch_id": b.remote_id, "phase": b.phase, "model": b.model,
                               "state": b.state, "status": b.remote_status, "round": b.round,
                               "total": b.total, "completed": b.completed, "failed": b.failed,
                               "cost_usd": b.cost_usd, "message": b.message,
                               "created_at": b.created_at, "updated_at": b.updated_at})).collect::<Vec<_>>()});
                    // Per batch: its submission is uncertain (issue 41).
                    let uncertain = batches_of(r.run_id).into_iter().map(|b| b.is_uncertain());
                    for (v, u) in v["batches"].as_array_mut().into_iter().flatten().zip(uncertain) {
                        v["uncertain"] = json!(u);
                    }
                    v["hosts"] = json!(hosts_of(r.run_id));
                    v
                })
                .collect();
            serde_json::to_writer_pretty(&mut o, &json!({"runs": runs}))?;
            writeln!(o)?;
        }
        DataFormat::Table => {
            let mut o = table_out(s.width);
            let mut t = crate::report::terminal::table([
                "run",
                "model",
                "kind",
                "status",
                "test cases",
                "passed",
                "evaluations",
                "format fail",
                "cost USD",
                "started",
                "completed",
            ]);
            for r in &rows {
                t.add_row([
                    r.run_id.to_string(),
                    r.model.clone(),
                    r.kind.clone(),
                    r.status.to_string(),
                    format!("{}/{}", r.test_cases, r.planned_test_cases),
                    r.passed.to_string(),
                    r.evaluations.to_string(),
                    r.format_failures.to_string(),
                    crate::report::usd_known(
                        r.cost_usd + r.judge_cost_usd,
                        r.unknown_cost_calls,
                        4,
                    ),
                    r.started_at.clone(),
                    r.completed_at.clone().unwrap_or_default(),
                ]);
            }
            writeln!(o, "{}", crate::report::terminal::fitted(t))?;
            for (id, r) in &reuse {
                writeln!(o, "run {id}: {}", super::call::reuse_line(r))?;
            }
            // Who works on a run: shown while any process does, or when
            // several shared it.
            for r in &rows {
                let hs = hosts_of(r.run_id);
                if hs.is_empty() || (hs.len() < 2 && !hs.iter().any(|h| h.live)) {
                    continue;
                }
                let list: Vec<String> = hs
                    .iter()
                    .map(|h| {
                        format!(
                            "{}:{} ({}, heard {:.0} s ago, {} taken, {} stored)",
                            h.host,
                            h.pid,
                            if h.live { "working" } else { "gone" },
                            h.heartbeat_age_s,
                            h.sent,
                            h.stored
                        )
                    })
                    .collect();
                writeln!(o, "run {}: processes: {}", r.run_id, list.join("; "))?;
            }
            for r in &rows {
                let bs = batches_of(r.run_id);
                if bs.is_empty() {
                    continue;
                }
                let live = bs.iter().filter(|b| b.is_live()).count();
                writeln!(
                    o,
                    "run {}: {} batch{} ({live} at OpenRouter)",
                    r.run_id,
                    bs.len(),
                    if bs.len() == 1 { "" } else { "es" }
                )?;
                for b in bs {
                    writeln!(
                        o,
                        "  {} {} {}: {} ({}), {}/{} done, {} failed",
                        b.remote_id.as_deref().unwrap_or(if b.is_uncertain() {
                            "(submission uncertain)"
                        } else {
                            "(not accepted)"
                        }),
                        b.phase,
                        b.model,
                        b.remote_status.as_deref().unwrap_or("-"),
                        b.state,
                        b.completed,
                        b.total,
                        b.failed
                    )?;
                }
                if let Some(line) = crate::domain::uncertain_batches(
                    r.run_id,
                    &batches_of(r.run_id)
                        .into_iter()
                        .cloned()
                        .collect::<Vec<_>>(),
                ) {
                    writeln!(o, "run {}: {line}", r.run_id)?;
                }
            }
        }
    }
    for r in &rows {
        for w in route(r.run_id).warnings(r.run_id, &r.model) {
            eprintln!("{w}");
        }
    }
    Ok(ExitStatus::Success)
}
