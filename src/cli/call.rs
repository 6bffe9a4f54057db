//! What every command that calls models shares: the call flags, the
//! OpenRouter client, the models to run, run settings, signal handling and
//! the summary printed at the end.

use std::io::Write;

use clap::Args;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{Cli, DataFormat, database_url, out};
use crate::loader::{self, Benchmark};
use crate::store::Store;
use crate::{Error, Result, openrouter, runner};

/// Options shared by every command that calls models.
#[derive(Debug, Clone, Args)]
pub struct CallArgs {
    /// Models to run (comma-separated), overriding models.yml.
    #[arg(long, value_delimiter = ',')]
    pub models: Vec<String>,
    /// Compose and validate every prompt without sending anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Send every request even when an identical one was answered before.
    #[arg(long)]
    pub no_cache: bool,
    /// Seconds before one request attempt times out.
    #[arg(long, default_value_t = 120, value_name = "SECS")]
    pub request_timeout: u64,
    /// Attempts per request, retries included.
    #[arg(long, default_value_t = 6)]
    pub max_attempts: u32,
    /// Largest reply body read, in bytes; a longer one is abandoned as it
    /// arrives and the attempt retried (default 16 MiB).
    #[arg(long, env = "HELMBENCH_MAX_REPLY_BYTES", value_name = "BYTES",
          default_value_t = openrouter::DEFAULT_MAX_REPLY_BYTES,
          value_parser = clap::value_parser!(u64).range(1024..))]
    pub max_reply_bytes: u64,
}

/// Cancels on Ctrl-C (or SIGTERM, what CI runners and `kill` send): in-flight
/// work is dropped, finished work is saved. A second signal quits at once,
/// which loses nothing stored: every result is written in its own committed
/// transaction and the run stays resumable.
pub(super) fn ctrl_c_token() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        if interrupt_signal().await {
            eprintln!("interrupted: saving what finished… (interrupt again to quit at once)");
            t.cancel();
            if interrupt_signal().await {
                eprintln!(
                    "interrupted again: quitting now; `helmbench runs` lists the run to --resume"
                );
                std::process::exit(130);
            }
        }
    });
    token
}

/// Waits for SIGINT or (on unix) SIGTERM; false if no handler could be set.
pub(super) async fn interrupt_signal() -> bool {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            return tokio::select! {
                r = tokio::signal::ctrl_c() => r.is_ok(),
                r = term.recv() => r.is_some(),
            };
        }
    }
    tokio::signal::ctrl_c().await.is_ok()
}

pub(super) fn client(call: &CallArgs) -> Result<openrouter::Client> {
    let key = std::env::var("OPENROUTER_API_KEY").unwrap_or_default();
    let base = std::env::var("OPENROUTER_BASE_URL")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| openrouter::DEFAULT_BASE_URL.to_string());
    let mut cfg = openrouter::ClientConfig::new(base, key.trim().to_string());
    cfg.referer = std::env::var("OPENROUTER_HTTP_REFERER")
        .ok()
        .filter(|s| !s.is_empty());
    cfg.title = Some(
        std::env::var("OPENROUTER_X_TITLE")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "helmbench".into()),
    );
    cfg.request_timeout = std::time::Duration::from_secs(call.request_timeout.max(1));
    cfg.max_attempts = call.max_attempts.max(1);
    cfg.max_reply_bytes = call.max_reply_bytes;
    // Tests shrink the backoff so retries take milliseconds.
    if let Some(ms) = std::env::var("HELMBENCH_RETRY_BASE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        cfg.backoff_base = std::time::Duration::from_millis(ms);
        cfg.backoff_max = std::time::Duration::from_millis(ms * 20);
    }
    openrouter::Client::new(cfg).map_err(|e| match e {
        // A bad setting (base URL, key characters): refused before anything
        // is sent or written.
        openrouter::ProviderError::Config(_) => Error::Usage(e.to_string()),
        other => Error::Tool(other.to_string()),
    })
}

pub(super) async fn context(
    cli: &Cli,
    b: Benchmark,
    call: &CallArgs,
) -> Result<runner::RunContext> {
    // The client first: a refused setting must not create a database.
    let client = client(call)?;
    let store = Store::open(&database_url(cli))
        .await?
        .with_endpoint(client.endpoint());
    runner::RunContext::new(b, store, client, cli.quiet).await
}

/// The models to run: `--models` or models.yml (with its parameters).
pub(super) fn models(b: &Benchmark, call: &CallArgs) -> Result<Vec<loader::ModelEntry>> {
    let configured = b
        .models
        .as_ref()
        .map(|m| m.models.clone())
        .unwrap_or_default();
    let chosen: Vec<loader::ModelEntry> = if call.models.is_empty() {
        configured
    } else {
        call.models
            .iter()
            .map(|id| id.trim())
            .filter(|id| !id.is_empty())
            .map(|id| {
                configured
                    .iter()
                    .find(|m| m.id == id)
                    .cloned()
                    .unwrap_or_else(|| loader::ModelEntry::new(id))
            })
            .collect()
    };
    if chosen.is_empty() {
        return Err(Error::Usage(
            "no models to run (expected `models:` in models.yml or --models provider/model)".into(),
        ));
    }
    Ok(chosen)
}

/// A run's settings with one request at a time, no limit, one repeat and no
/// spending cap; `run-batch` overrides those from its own flags.
pub(super) fn settings_for(
    b: &Benchmark,
    model: loader::ModelEntry,
    selectors: Vec<String>,
    include_no_context: bool,
    call: &CallArgs,
) -> runner::RunSettings {
    runner::RunSettings {
        model,
        judge_model: b.models.as_ref().and_then(|m| m.marking_model.clone()),
        selectors,
        include_no_context,
        concurrency: 1,
        limit: None,
        repeats: 1,
        no_cache: call.no_cache,
        max_cost: None,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        benchmark_hash: b.content_hash.clone(),
    }
}

/// Prints run summaries; exit 1 when a run stopped early or left test
/// cases without a reply (a run that scored only part of its plan must not
/// look like a success to a script).
pub(super) fn report_summaries(summaries: &[runner::RunSummary], format: DataFormat) -> Result<u8> {
    let mut o = out();
    match format {
        DataFormat::Json => {
            serde_json::to_writer_pretty(&mut o, &json!({"runs": summaries}))?;
            writeln!(o)?;
        }
        DataFormat::Table => {
            for s in summaries {
                writeln!(
                    o,
                    "run {} {}: {} — {}/{} test cases stored, {} passed, ${:.4}",
                    s.run_id, s.model, s.status, s.stored, s.planned, s.passed, s.cost_usd
                )?;
                if let Some(m) = &s.message {
                    writeln!(o, "  {m}")?;
                }
            }
        }
    }
    drop(o);
    let unfinished = |s: &runner::RunSummary| s.status != "completed" || s.provider_errors > 0;
    for s in summaries {
        if s.provider_errors > 0 {
            eprintln!(
                "run {}: {} test case{} got no reply from the provider after every retry; they are kept out of the score",
                s.run_id,
                s.provider_errors,
                if s.provider_errors == 1 { "" } else { "s" }
            );
        }
        if unfinished(s) {
            eprintln!("resume with: helmbench run-batch --resume {}", s.run_id);
        }
    }
    if let Some(f) = summaries.iter().find_map(|s| s.fatal.clone()) {
        return Err(Error::Provider(f));
    }
    if summaries.iter().any(unfinished) {
        return Ok(1);
    }
    Ok(0)
}
