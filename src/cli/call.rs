//! What every command that calls models shares: the call flags, the
//! OpenRouter client, the models to run, run settings, signal handling and
//! the summary printed at the end.

use std::io::Write;

use clap::Args;
use serde_json::json;

use super::output::{DataFormat, out};
use super::settings::Settings;
use crate::ExitStatus;
use crate::benchmark::Benchmark;
use crate::domain::RunStatus;
use crate::store::Store;
use crate::{Error, Result, openrouter, run};

/// `--models` and `--judges`: a model id without control characters
/// (it is printed to terminals and logs).
pub(super) fn model_id(s: &str) -> std::result::Result<String, String> {
    crate::domain::check_model_id(s).map(|()| s.to_string())
}

/// Options shared by every command that calls models.
#[derive(Debug, Clone, Args)]
pub struct CallArgs {
    /// Models to run (comma-separated), overriding models.yml.
    #[arg(long, value_delimiter = ',', value_parser = model_id)]
    pub models: Vec<String>,
    /// Compose and validate every prompt without sending anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Send every request even when an identical one was answered before.
    #[arg(long)]
    pub no_cache: bool,
    /// Seconds before one request attempt times out (at least 1).
    #[arg(long, default_value_t = 120, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub request_timeout: u64,
    /// Attempts per request, retries included (at least 1).
    #[arg(long, default_value_t = 6,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_attempts: u32,
    /// After Ctrl-C or SIGTERM, seconds the requests in flight (already
    /// paid for) get to finish and be stored.
    #[arg(long, value_name = "SECS", default_value_t = run::DEFAULT_GRACE.as_secs(),
          value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub grace_secs: u64,
    /// Seconds results may wait for a database that cannot be written
    /// (locked by another program, disk full) before the run stops; nothing
    /// new is sent meanwhile.
    #[arg(long, value_name = "SECS", default_value_t = run::DEFAULT_WRITE_WAIT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub write_wait_secs: u64,
    /// Largest reply body read, in bytes; a longer one is abandoned as it
    /// arrives and the attempt retried (default 16 MiB).
    #[arg(long, env = "HELMBENCH_MAX_REPLY_BYTES", value_name = "BYTES",
          default_value_t = openrouter::DEFAULT_MAX_REPLY_BYTES,
          value_parser = clap::value_parser!(u64).range(1024..))]
    pub max_reply_bytes: u64,
    /// Judge every criterion by each of these models (comma-separated),
    /// overriding `marking_model`; the verdict is the majority.
    #[arg(long, value_delimiter = ',', value_name = "A,B,C", value_parser = model_id)]
    pub judges: Vec<String>,
    /// How a tie between judges is broken: the first listed judge's verdict, or fail.
    #[arg(long, value_enum, default_value_t = crate::judging::panel::JudgeTie::First)]
    pub judge_tie: crate::judging::panel::JudgeTie,
    /// The model that simulates the user of scenarios with personas
    /// (`personas.md`), with its models.yml entry's settings if it has one.
    #[arg(long, value_name = "ID", value_parser = model_id)]
    pub user_model: Option<String>,
    /// Start a batch even when its cost estimate passes --max-cost or the
    /// key's remaining limit, or could not be priced (offline).
    #[arg(long)]
    pub yes: bool,
}

impl CallArgs {
    /// The run control of these flags, listening for SIGINT/SIGTERM.
    pub(super) fn control(&self, s: &Settings) -> run::RunControl {
        let grace = std::time::Duration::from_secs(self.grace_secs);
        run::RunControl {
            interrupt: run::interrupt_handler(grace),
            grace,
            write_wait: std::time::Duration::from_secs(self.write_wait_secs),
            batch: std::sync::Arc::new(run::BatchShared::new(None, 0.0)),
            pause_before_finish: s.pause_before_finish,
            log_age: s.log_age.unwrap_or(run::LOG_AGE),
            retry_blocked: false,
            resubmit_uncertain: false,
            join: false,
        }
    }
}

pub(super) fn client(s: &Settings, call: &CallArgs) -> Result<openrouter::Client> {
    let mut cfg =
        openrouter::ClientConfig::new(s.base_url.clone(), s.api_key().unwrap_or_default());
    cfg.referer = s.referer.clone();
    cfg.title = s.title.clone();
    cfg.request_timeout = std::time::Duration::from_secs(call.request_timeout);
    cfg.max_attempts = call.max_attempts;
    cfg.max_reply_bytes = call.max_reply_bytes;
    cfg.api = s.api;
    if let Some(base) = s.retry_base {
        cfg.backoff_base = base;
        cfg.backoff_max = base * 20;
    }
    openrouter::Client::new(cfg).map_err(Error::from)
}

pub(super) async fn context(
    s: &Settings,
    b: Benchmark,
    call: &CallArgs,
) -> Result<run::RunContext> {
    let (client, store) = connect(s, call).await?;
    run::RunContext::new(b, store, client, s.quiet).await
}

/// The client and the store that records its endpoint, before the content
/// is seeded (what [`run::already_complete`] needs, writing nothing).
pub(super) async fn connect(s: &Settings, call: &CallArgs) -> Result<(openrouter::Client, Store)> {
    // The client first: a refused setting must not create a database.
    let mut client = client(s, call)?;
    let store = Store::open(&s.database_url.clone())
        .await?
        .with_endpoint(client.endpoint());
    client.set_user(store.pseudonym().await?);
    Ok((client, store))
}

/// The models to run: `--models` or models.yml (with its parameters).
pub(super) fn models(b: &Benchmark, call: &CallArgs) -> Result<Vec<crate::domain::ModelEntry>> {
    models_of(b, &call.models)
}

/// The models of `ids` (with their models.yml parameters), or models.yml's.
pub(super) fn models_of(b: &Benchmark, ids: &[String]) -> Result<Vec<crate::domain::ModelEntry>> {
    let configured = b
        .models
        .as_ref()
        .map(|m| m.models.clone())
        .unwrap_or_default();
    let chosen: Vec<crate::domain::ModelEntry> = if ids.is_empty() {
        // An entry that only judges is not tested unless named.
        configured.into_iter().filter(|m| !m.judge_only).collect()
    } else {
        ids.iter()
            .map(|id| id.trim())
            .filter(|id| !id.is_empty())
            .map(|id| {
                configured
                    .iter()
                    .find(|m| m.id == id)
                    .cloned()
                    .unwrap_or_else(|| crate::domain::ModelEntry::new(id))
            })
            .collect()
    };
    if chosen.is_empty() {
        return Err(Error::usage(
            "no models to run (expected `models:` in models.yml or --models provider/model)".into(),
        ));
    }
    Ok(chosen)
}

/// The judge (or the panel, comma-joined) of a run: `--judges`, else
/// `marking_model` of models.yml.
pub(super) fn judge_of(b: &Benchmark, judges: &[String]) -> Option<String> {
    if judges.iter().any(|j| !j.trim().is_empty()) {
        Some(crate::judging::panel::judges(&judges.join(",")).join(","))
    } else {
        b.models.as_ref().and_then(|m| m.marking_model.clone())
    }
}

/// A selected scenario with personas has its users simulated (issue 42):
/// without `--user-model` that is a usage error naming it.
pub(super) fn require_user_model(
    b: &Benchmark,
    selection: &run::Selection,
    user_model: Option<&str>,
) -> Result<()> {
    if user_model.is_some() {
        return Ok(());
    }
    let cases = crate::benchmark::cases::select_indices(
        b,
        &selection.selectors,
        selection.include_no_context,
    )
    .map_err(Error::usage)?;
    let mut seen = std::collections::BTreeSet::new();
    for c in cases {
        let s = &b.scenarios[c.scenario as usize];
        if !s.personas.is_empty() {
            seen.insert(s.code.as_str());
        }
    }
    if seen.is_empty() {
        return Ok(());
    }
    let list: Vec<&str> = seen.into_iter().collect();
    Err(Error::usage(format!(
        "scenario {} has personas (personas.md), whose users a model simulates: pass --user-model ID (expected a model id, with its models.yml settings if it has an entry), or leave the scenario out",
        list.join(", ")
    )))
}

/// A run's settings over `selection` with one request at a time; `run-batch`
/// sets its concurrency and batch token. Records the judges' entries as
/// they will be asked (models.yml's, defaults filled in, wire format
/// pinned like the model's).
pub(super) fn settings_for(
    b: &Benchmark,
    client: &openrouter::Client,
    model: crate::domain::ModelEntry,
    selection: &run::Selection,
    call: &CallArgs,
) -> run::RunSettings {
    let judge_model = judge_of(b, &call.judges);
    let entries = b.models.as_ref().map_or(&[][..], |m| &m.models[..]);
    let judge_entries = crate::judging::panel::judges(judge_model.as_deref().unwrap_or(""))
        .into_iter()
        .map(|j| {
            let mut e = crate::judging::judge::settings(j, entries);
            e.api = Some(client.api_of(&e));
            e
        })
        .collect();
    let user_model = call.user_model.as_ref().map(|id| {
        let mut e = entries
            .iter()
            .find(|e| &e.id == id)
            .cloned()
            .unwrap_or_else(|| crate::domain::ModelEntry::new(id));
        e.api = Some(client.api_of(&e));
        e
    });
    run::RunSettings {
        judge_entries: Some(judge_entries),
        user_model,
        ..selection.settings(
            model,
            judge_model,
            call.judge_tie,
            call.no_cache,
            &b.content_hash,
        )
    }
}

/// Prints run summaries; exit 1 when a run stopped early, left test cases
/// without a reply or a verdict, or a model was not run (a batch that
/// scored only part of its plan must not look like a success to a script).
pub(super) fn report_summaries(
    summaries: &[run::RunSummary],
    complete: &[run::AlreadyComplete],
    reuse: &Reused,
    format: DataFormat,
) -> Result<ExitStatus> {
    report_summaries_to(&mut out(), summaries, complete, reuse, format)
}

/// Replies each run reused from the cache, by run id.
pub(super) type Reused = std::collections::BTreeMap<i64, crate::domain::Reuse>;

/// What the runs of `summaries` reused from the cache (read before the
/// store is closed; a failed read only loses the line that says so).
pub(super) async fn reused(store: &crate::store::Store, summaries: &[run::RunSummary]) -> Reused {
    let mut out = Reused::new();
    for s in summaries {
        match store.reuse(Some(s.run_id)).await {
            Ok(r) => out.extend(r),
            Err(e) => tracing::warn!(run_id = s.run_id, error = %e, "cache reuse not read"),
        }
    }
    out
}

/// `reused 12 cached replies (first paid $0.0120; not paid again)`.
pub(super) fn reuse_line(r: &crate::domain::Reuse) -> String {
    format!(
        "reused {} cached repl{} (first paid ${}; not paid again)",
        r.replies,
        if r.replies == 1 { "y" } else { "ies" },
        crate::report::usd(r.original_cost_usd, 4)
    )
}

/// [`report_summaries`] with the summaries written to `o` (`run-single
/// --format json` keeps stdout for its JSON and sends them to stderr).
pub(super) fn report_summaries_to(
    mut o: impl Write,
    summaries: &[run::RunSummary],
    complete: &[run::AlreadyComplete],
    reuse: &Reused,
    format: DataFormat,
) -> Result<ExitStatus> {
    match format {
        DataFormat::Json => {
            let runs: Vec<serde_json::Value> = summaries
                .iter()
                .map(|s| {
                    let mut v = serde_json::to_value(s).unwrap_or_default();
                    let r = reuse.get(&s.run_id).copied().unwrap_or_default();
                    v["reused_replies"] = json!(r.replies);
                    v["reused_original_cost_usd"] = json!(r.original_cost_usd);
                    v
                })
                .collect();
            let v = json!({"runs": runs, "already_complete": complete});
            serde_json::to_writer_pretty(&mut o, &v)?;
            writeln!(o)?;
        }
        DataFormat::Table => {
            let mut o = crate::report::terminal::Fit::new(&mut o);
            for c in complete {
                writeln!(o, "{c}")?;
            }
            for s in summaries {
                writeln!(
                    o,
                    "run {} {}: {} — {}/{} test cases stored, {} passed, {}",
                    s.run_id,
                    s.model,
                    s.status,
                    s.stored,
                    s.planned,
                    s.passed,
                    crate::report::dollars_known(s.cost_usd, s.unknown_cost_calls, 4)
                )?;
                if let Some(r) = reuse.get(&s.run_id) {
                    writeln!(o, "  {}", reuse_line(r))?;
                }
                if let Some(m) = &s.message {
                    writeln!(o, "  {m}")?;
                }
            }
        }
    }
    drop(o);
    let unfinished = |s: &run::RunSummary| {
        // `running`: this process's part of a shared run is done, others go on.
        (s.status != RunStatus::Completed && s.status != RunStatus::Running)
            || s.provider_errors > 0
            || s.judge_errors > 0
    };
    let plural = |n: usize| if n == 1 { " test case" } else { " test cases" };
    for s in summaries {
        if s.provider_errors > 0 {
            eprintln!(
                "run {}: {}{} got no reply from the provider after every retry; they are kept out of the score",
                s.run_id,
                s.provider_errors,
                plural(s.provider_errors)
            );
        }
        if s.judge_errors > 0 {
            eprintln!(
                "run {}: {}{} got no usable verdict from the judge; they are kept out of the score",
                s.run_id,
                s.judge_errors,
                plural(s.judge_errors)
            );
        }
        if unfinished(s) {
            eprintln!("resume with: helmbench run-batch --resume {}", s.run_id);
        }
    }
    let unfinished_ids: Vec<String> = summaries
        .iter()
        .filter(|s| unfinished(s))
        .map(|s| s.run_id.to_string())
        .collect();
    if unfinished_ids.len() > 1 {
        eprintln!(
            "resume them all with: helmbench run-batch --resume {}",
            unfinished_ids.join(",")
        );
    }
    if let Some(f) = summaries.iter().find_map(|s| s.fatal.clone()) {
        return Err(Error::Provider(f));
    }
    if !unfinished_ids.is_empty() {
        return Ok(ExitStatus::Failure);
    }
    Ok(ExitStatus::Success)
}
