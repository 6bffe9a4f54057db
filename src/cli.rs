//! The command line (SPEC §7): argument parsing with clap, turning raw flags
//! into validated values, and printing each command's output as a table,
//! text or JSON.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use serde_json::json;

use crate::discovery::{self, Selector};
use crate::loader::{self, Benchmark, ContentErrors};
use tokio_util::sync::CancellationToken;

use crate::store::Store;
use crate::{Error, Result, compose, openrouter, runner};

#[derive(Debug, Parser)]
#[command(
    name = "helmbench",
    version,
    about = "Runs the HELMBench mental-health safety benchmark against LLMs through OpenRouter"
)]
pub struct Cli {
    /// Folder holding models.yml, scoring.yaml and scenarios/.
    #[arg(
        long,
        global = true,
        env = "HELMBENCH_BENCHMARK_DIR",
        default_value = "benchmark"
    )]
    pub benchmark_dir: PathBuf,
    /// SQLite database URL or path [default: sqlite://helmbench.db].
    #[arg(long, global = true, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// More log output (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors; no progress bar.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Scenarios with evaluation type and counts of components and test cases.
    List(ListArgs),
    /// The exact composed prompt and response format of each selected test case.
    Prompts(PromptsArgs),
    /// Run one test case per model, showing prompt, reply, verdict and cost.
    RunSingle(RunSingleArgs),
    /// Run a batch of test cases per model (dry-runs without OPENROUTER_API_KEY).
    RunBatch(RunBatchArgs),
    /// run-single, then run-batch over all scenarios, then list.
    RunAll(RunAllArgs),
    /// Every evaluation run with status, model, counts and cost.
    Runs(RunsArgs),
    /// Therapeutic quality scores (seed 004) of any text.
    Score(ScoreArgs),
    /// Spend per run, model and scenario: tokens, model cost, judge cost.
    Costs(CostsArgs),
    /// Severity-weighted scores, breakdowns and reply quality of runs (table, JSON or HTML).
    Report(ReportArgs),
    /// Every stored result as CSV or JSONL, streamed.
    Export(ExportArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DataFormat {
    Table,
    Json,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long, value_enum, default_value_t = DataFormat::Table)]
    pub format: DataFormat,
}

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
}

#[derive(Debug, Args)]
pub struct RunSingleArgs {
    /// The test case (default: the first one).
    pub test_code: Option<String>,
    #[command(flatten)]
    pub call: CallArgs,
    #[arg(long, value_enum, default_value_t = DataFormat::Table)]
    pub format: DataFormat,
}

#[derive(Debug, Args)]
pub struct RunAllArgs {
    #[command(flatten)]
    pub call: CallArgs,
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
}

#[derive(Debug, Args)]
pub struct RunsArgs {
    #[arg(long, value_enum, default_value_t = DataFormat::Table)]
    pub format: DataFormat,
}

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

#[derive(Debug, Args)]
pub struct CostsArgs {
    /// Only this run.
    #[arg(long, value_name = "ID")]
    pub run_id: Option<i64>,
    /// Only the runs of this model.
    #[arg(long)]
    pub model: Option<String>,
    #[arg(long, value_enum, default_value_t = DataFormat::Table)]
    pub format: DataFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    Table,
    Json,
    /// One self-contained page with inline SVG charts.
    Html,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Report this run (any status). Without --run-id or --model: the latest
    /// completed batch run of every model, side by side.
    #[arg(long, value_name = "ID", conflicts_with = "model")]
    pub run_id: Option<i64>,
    /// Report the latest completed batch run of this model.
    #[arg(long)]
    pub model: Option<String>,
    #[arg(long, value_enum, default_value_t = ReportFormat::Table)]
    pub format: ReportFormat,
    /// Write to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// List every failed test case with its error and each criterion's verdict and justification.
    #[arg(long)]
    pub details: bool,
}

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
}

#[derive(Debug, Args)]
pub struct RunBatchArgs {
    /// Scenario codes, test codes or prefixes to run.
    #[arg(long = "scenario", num_args = 1.., required_unless_present_any = ["all_scenarios", "resume"])]
    pub scenarios: Vec<String>,
    /// Run every scenario.
    #[arg(long, conflicts_with = "scenarios")]
    pub all_scenarios: bool,
    #[command(flatten)]
    pub call: CallArgs,
    /// Leave out the test cases without a user context.
    #[arg(long)]
    pub skip_no_context: bool,
    /// Finish the missing test cases of this run, with its recorded settings.
    #[arg(long, value_name = "RUN_ID", conflicts_with_all = ["scenarios", "all_scenarios"])]
    pub resume: Option<i64>,
    /// Requests in flight at once, per model.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Run at most this many test cases.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Run each test case this many times (for consistency and intervals).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub repeats: u32,
    /// Stop cleanly once the provider-reported spend reaches this many USD.
    #[arg(long, value_name = "USD")]
    pub max_cost: Option<f64>,
    #[arg(long, value_enum, default_value_t = DataFormat::Table)]
    pub format: DataFormat,
}

/// Entry point for the binary: parse, run, print the error once, map it to an exit code.
pub fn main() -> ExitCode {
    let _ = dotenvy::dotenv();
    let cli = Cli::parse();
    init_tracing(cli.verbose, cli.quiet);
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(Error::BrokenPipe) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = e.to_string();
            eprintln!("error: {}", msg.trim_end());
            ExitCode::from(e.exit_code())
        }
    }
}

fn init_tracing(verbose: u8, quiet: bool) {
    // sqlx warns about any statement running over a second; a streamed export
    // or report of a large run is such a statement by design, not a problem.
    let default = match (quiet, verbose) {
        (true, _) => "error",
        (_, 0) => "warn,sqlx::query=error",
        (_, 1) => "helmbench=info,warn,sqlx::query=error",
        _ => "helmbench=debug,info",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// Runs a parsed command line; returns the exit code for success paths that
/// still need a non-zero code (content errors found by a dry-run).
pub fn run(cli: Cli) -> Result<u8> {
    match &cli.command {
        Command::List(args) => list(&cli, args),
        Command::Prompts(args) => prompts(&cli, args),
        Command::RunSingle(args) => run_single(&cli, args),
        Command::RunBatch(args) => run_batch(&cli, args),
        Command::RunAll(args) => run_all(&cli, args),
        Command::Runs(args) => runs(&cli, args),
        Command::Score(args) => score(args),
        Command::Costs(args) => costs(&cli, args),
        Command::Report(args) => report(&cli, args),
        Command::Export(args) => export(&cli, args),
    }
}

fn parse_selectors(raw: &[String]) -> Result<Vec<Selector>> {
    raw.iter()
        .flat_map(|s| s.split(','))
        .filter(|s| !s.trim().is_empty())
        .map(|s| Selector::parse(s).map_err(Error::Usage))
        .collect()
}

/// Loads the benchmark, printing content errors to stderr; the caller
/// decides whether they are fatal.
fn load_reporting(cli: &Cli) -> (Benchmark, Vec<loader::ContentError>) {
    let (benchmark, errors) = loader::load(&cli.benchmark_dir);
    if !errors.is_empty() {
        eprint!("{}", ContentErrors(errors.clone()));
    }
    (benchmark, errors)
}

fn out() -> std::io::StdoutLock<'static> {
    std::io::stdout().lock()
}

fn list(cli: &Cli, args: &ListArgs) -> Result<u8> {
    let (b, errors) = load_reporting(cli);
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
            })
        })
        .collect();
    let total = b.total_test_cases(true);
    let mut o = out();
    match args.format {
        DataFormat::Json => {
            serde_json::to_writer_pretty(
                &mut o,
                &json!({"scenarios": rows, "total_test_cases": total, "content_errors": errors.len()}),
            )?;
            writeln!(o)?;
        }
        DataFormat::Table => {
            let mut t = Table::new();
            t.load_preset(UTF8_FULL_CONDENSED);
            t.set_header([
                "scenario",
                "behaviour",
                "evaluation",
                "conditions",
                "user contexts",
                "perturbations",
                "test cases",
            ]);
            for (s, r) in b.scenarios.iter().zip(&rows) {
                t.add_row([
                    s.code.clone(),
                    r["behaviour"].as_str().unwrap_or_default().to_string(),
                    s.evaluation.type_name().to_string(),
                    s.conditions.len().to_string(),
                    s.user_contexts.len().to_string(),
                    s.perturbations.len().to_string(),
                    s.test_case_count(true).to_string(),
                ]);
            }
            writeln!(o, "{t}")?;
            writeln!(o, "{} scenarios, {total} test cases", b.scenarios.len())?;
        }
    }
    Ok(if errors.is_empty() { 0 } else { 2 })
}

fn prompts(cli: &Cli, args: &PromptsArgs) -> Result<u8> {
    let selectors = parse_selectors(&args.selectors)?;
    let (b, errors) = load_reporting(cli);
    let cases = discovery::select(&b, &selectors, !args.skip_no_context).map_err(Error::Usage)?;
    let mut o = std::io::BufWriter::new(out());
    let mut prompt = String::new();
    for case in &cases {
        compose::compose_into(case, &mut prompt);
        let rf = compose::response_format(case);
        match args.format {
            PromptFormat::Jsonl => {
                serde_json::to_writer(
                    &mut o,
                    &json!({"test_code": case.code(), "prompt": prompt, "response_format": rf}),
                )?;
                writeln!(o)?;
            }
            PromptFormat::Text => {
                writeln!(o, "=== {} ===", case.code())?;
                writeln!(o, "{prompt}")?;
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
    Ok(if errors.is_empty() { 0 } else { 2 })
}

/// Whether to dry-run: forced, or no API key in the environment (or `.env`).
pub fn is_dry_run(forced: bool) -> bool {
    forced || std::env::var("OPENROUTER_API_KEY").map_or(true, |k| k.trim().is_empty())
}

fn run_batch(cli: &Cli, args: &RunBatchArgs) -> Result<u8> {
    if is_dry_run(args.call.dry_run) {
        if args.resume.is_some() {
            return Err(Error::Usage(
                "--resume sends requests: set OPENROUTER_API_KEY (and drop --dry-run)".into(),
            ));
        }
        return dry_run_batch(cli, &args.scenarios, args.skip_no_context, args.format);
    }
    // Refuse a bad selector before the database is created or touched.
    parse_selectors(&args.scenarios)?;
    let b = load_strict(cli)?;
    let rt = runtime()?;
    rt.block_on(async {
        let ctx = context(cli, b, &args.call).await?;
        let cancel = ctrl_c_token();
        let mut summaries = Vec::new();
        match args.resume {
            Some(id) => {
                let row = ctx.store.run(id).await?;
                let settings: runner::RunSettings = serde_json::from_str(&row.settings)
                    .map_err(|e| Error::Tool(format!("run {id} has unreadable settings: {e}")))?;
                if row.status == "completed" && row.test_cases >= row.planned_test_cases && row.provider_errors == 0 {
                    eprintln!("run {id} is already complete");
                }
                if settings.benchmark_hash != ctx.benchmark.content_hash {
                    return Err(Error::Usage(format!(
                        "the benchmark content changed since run {id} started; resuming would mix two versions in one run (restore the content, or start a new run)"
                    )));
                }
                summaries.push(runner::run_batch(&ctx, &settings, Some(id), "batch", cancel.clone()).await?);
            }
            None => {
                let selectors = parse_selectors(&args.scenarios)?.iter().map(|s| s.as_str().to_string()).collect::<Vec<_>>();
                for model in models(&ctx.benchmark, &args.call)? {
                    let settings = settings_for(&ctx.benchmark, model, selectors.clone(), !args.skip_no_context, args, &args.call);
                    let summary = runner::run_batch(&ctx, &settings, None, "batch", cancel.clone()).await?;
                    let stop = summary.status != "completed";
                    summaries.push(summary);
                    if stop {
                        break;
                    }
                }
            }
        }
        report_summaries(&summaries, args.format)
    })
}

fn settings_for(
    b: &Benchmark,
    model: loader::ModelEntry,
    selectors: Vec<String>,
    include_no_context: bool,
    args: &RunBatchArgs,
    call: &CallArgs,
) -> runner::RunSettings {
    runner::RunSettings {
        model,
        judge_model: b.models.as_ref().and_then(|m| m.marking_model.clone()),
        selectors,
        include_no_context,
        concurrency: args.concurrency.max(1),
        limit: args.limit,
        repeats: args.repeats.max(1),
        no_cache: call.no_cache,
        max_cost: args.max_cost,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        benchmark_hash: b.content_hash.clone(),
    }
}

/// Prints run summaries; exit 1 when a run stopped early or left test
/// cases without a reply (a run that scored only part of its plan must not
/// look like a success to a script).
fn report_summaries(summaries: &[runner::RunSummary], format: DataFormat) -> Result<u8> {
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

fn dry_run_batch(
    cli: &Cli,
    raw: &[String],
    skip_no_context: bool,
    format: DataFormat,
) -> Result<u8> {
    let selectors = parse_selectors(raw)?;
    let (b, errors) = load_reporting(cli);
    let summary = runner::dry_run(&b, &selectors, !skip_no_context).map_err(Error::Usage)?;
    let mut o = out();
    match format {
        DataFormat::Json => {
            let mut v = serde_json::to_value(&summary)?;
            v["content_errors"] = json!(errors.iter().map(ToString::to_string).collect::<Vec<_>>());
            serde_json::to_writer_pretty(&mut o, &v)?;
            writeln!(o)?;
        }
        DataFormat::Table => {
            writeln!(o, "dry run: nothing sent, nothing written")?;
            writeln!(o, "{summary}")?;
            if errors.is_empty() {
                writeln!(o, "content: no errors")?;
            } else {
                writeln!(o, "content: {} error(s), listed above", errors.len())?;
            }
        }
    }
    Ok(if errors.is_empty() { 0 } else { 2 })
}

fn load_strict(cli: &Cli) -> Result<Benchmark> {
    loader::load_strict(&cli.benchmark_dir).map_err(Error::Content)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn database_url(cli: &Cli) -> String {
    cli.database_url
        .clone()
        .unwrap_or_else(|| crate::store::DEFAULT_DATABASE_URL.to_string())
}

/// Cancels on Ctrl-C (or SIGTERM, what CI runners and `kill` send): in-flight
/// work is dropped, finished work is saved. A second signal quits at once,
/// which loses nothing stored: every result is written in its own committed
/// transaction and the run stays resumable.
fn ctrl_c_token() -> CancellationToken {
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
async fn interrupt_signal() -> bool {
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

fn client(call: &CallArgs) -> Result<openrouter::Client> {
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
    // Tests shrink the backoff so retries take milliseconds.
    if let Some(ms) = std::env::var("HELMBENCH_RETRY_BASE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        cfg.backoff_base = std::time::Duration::from_millis(ms);
        cfg.backoff_max = std::time::Duration::from_millis(ms * 20);
    }
    openrouter::Client::new(cfg).map_err(|e| Error::Tool(e.to_string()))
}

async fn context(cli: &Cli, b: Benchmark, call: &CallArgs) -> Result<runner::RunContext> {
    let store = Store::open(&database_url(cli)).await?;
    runner::RunContext::new(b, store, client(call)?, cli.quiet).await
}

/// The models to run: `--models` or models.yml (with its parameters).
fn models(b: &Benchmark, call: &CallArgs) -> Result<Vec<loader::ModelEntry>> {
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

fn run_single(cli: &Cli, args: &RunSingleArgs) -> Result<u8> {
    let selectors = match &args.test_code {
        Some(code) => vec![Selector::parse(code).map_err(Error::Usage)?],
        None => Vec::new(),
    };
    let (b, errors) = if is_dry_run(args.call.dry_run) {
        load_reporting(cli)
    } else {
        (load_strict(cli)?, Vec::new())
    };
    let cases = discovery::select(&b, &selectors, true).map_err(Error::Usage)?;
    let Some(first) = cases.first() else {
        return Err(Error::Usage("the benchmark has no test cases".into()));
    };
    let code = first.code();
    if is_dry_run(args.call.dry_run) {
        let mut o = out();
        writeln!(
            o,
            "=== {code} (dry run: nothing sent) ===
{}",
            compose::compose(first)
        )?;
        return Ok(if errors.is_empty() { 0 } else { 2 });
    }
    let rt = runtime()?;
    rt.block_on(async {
        let ctx = context(cli, b, &args.call).await?;
        let cancel = ctrl_c_token();
        let mut summaries = Vec::new();
        for model in models(&ctx.benchmark, &args.call)? {
            let batch = RunBatchArgs {
                scenarios: vec![code.clone()],
                all_scenarios: false,
                call: args.call.clone(),
                skip_no_context: false,
                resume: None,
                concurrency: 1,
                limit: Some(1),
                repeats: 1,
                max_cost: None,
                format: DataFormat::Table,
            };
            let settings = settings_for(
                &ctx.benchmark,
                model,
                vec![code.clone()],
                true,
                &batch,
                &args.call,
            );
            let summary =
                runner::run_batch(&ctx, &settings, None, "single", cancel.clone()).await?;
            show_single(&ctx.store, summary.run_id, args.format).await?;
            let stop = summary.status != "completed";
            summaries.push(summary);
            if stop {
                break;
            }
        }
        report_summaries(&summaries, DataFormat::Table)
    })
}

/// Prints a single run's prompt, reply, verdict, criteria and cost.
async fn show_single(store: &Store, run_id: i64, format: DataFormat) -> Result<()> {
    let rows = crate::report::results(store, run_id).await?;
    let mut o = out();
    for r in rows {
        match format {
            DataFormat::Json => {
                serde_json::to_writer_pretty(&mut o, &r)?;
                writeln!(o)?;
            }
            DataFormat::Table => {
                writeln!(o, "=== {} · {} ===", r.test_code, r.model)?;
                writeln!(o, "--- prompt ---\n{}", r.prompt)?;
                writeln!(
                    o,
                    "--- reply ---\n{}",
                    r.response.as_deref().unwrap_or("(none)")
                )?;
                let verdict = if r.passed { "PASS" } else { "FAIL" };
                match &r.error {
                    Some(e) => writeln!(
                        o,
                        "--- verdict: {verdict} ({}: {e})",
                        r.error_kind.as_deref().unwrap_or("error")
                    )?,
                    None => writeln!(o, "--- verdict: {verdict}")?,
                }
                for j in &r.judgements {
                    writeln!(
                        o,
                        "  {}: {} — {}",
                        j.criterion,
                        j.verdict
                            .as_ref()
                            .map_or_else(|| "error".to_string(), ToString::to_string),
                        j.justification
                            .as_deref()
                            .or(j.error.as_deref())
                            .unwrap_or("")
                    )?;
                }
                writeln!(
                    o,
                    "--- cost: ${:.6} model + ${:.6} judge, {} + {} tokens, {} ms{}",
                    r.cost_usd,
                    r.judge_cost_usd,
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

fn run_all(cli: &Cli, args: &RunAllArgs) -> Result<u8> {
    let single = RunSingleArgs {
        test_code: None,
        call: args.call.clone(),
        format: DataFormat::Table,
    };
    let code = run_single(cli, &single)?;
    if code != 0 {
        return Ok(code);
    }
    let batch = RunBatchArgs {
        scenarios: Vec::new(),
        all_scenarios: true,
        call: args.call.clone(),
        skip_no_context: false,
        resume: None,
        concurrency: args.concurrency,
        limit: None,
        repeats: 1,
        max_cost: None,
        format: DataFormat::Table,
    };
    let code = run_batch(cli, &batch)?;
    if code != 0 {
        return Ok(code);
    }
    list(
        cli,
        &ListArgs {
            format: DataFormat::Table,
        },
    )
}

/// The database URL of a command that only reads: a missing database is a
/// usage error naming the path, never an empty new file.
fn existing_database(cli: &Cli) -> Result<String> {
    let url = database_url(cli);
    if !crate::store::database_exists(&url) {
        return Err(Error::Usage(format!(
            "no database at {url} yet (run `helmbench run-batch` first, or pass --database-url)"
        )));
    }
    Ok(url)
}

fn runs(cli: &Cli, args: &RunsArgs) -> Result<u8> {
    let url = existing_database(cli)?;
    let rt = runtime()?;
    let rows = rt.block_on(async { Store::open(&url).await?.runs().await.map_err(Error::from) })?;
    let mut o = out();
    match args.format {
        DataFormat::Json => {
            let runs: Vec<_> = rows
                .iter()
                .map(|r| {
                    json!({"run_id": r.run_id, "model": r.model, "kind": r.kind, "status": r.status,
                           "test_cases": r.test_cases, "planned_test_cases": r.planned_test_cases,
                           "evaluations": r.evaluations, "passed": r.passed, "passed_evaluations": r.passed_evaluations,
                           "format_failures": r.format_failures, "judge_errors": r.judge_errors, "provider_errors": r.provider_errors,
                           "cached_replies": r.cached_replies, "cost_usd": r.cost_usd, "judge_cost_usd": r.judge_cost_usd,
                           "started_at": r.started_at, "completed_at": r.completed_at, "message": r.message})
                })
                .collect();
            serde_json::to_writer_pretty(&mut o, &json!({"runs": runs}))?;
            writeln!(o)?;
        }
        DataFormat::Table => {
            let mut t = Table::new();
            t.load_preset(UTF8_FULL_CONDENSED);
            t.set_header([
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
                    r.status.clone(),
                    format!("{}/{}", r.test_cases, r.planned_test_cases),
                    r.passed.to_string(),
                    r.evaluations.to_string(),
                    r.format_failures.to_string(),
                    format!("{:.4}", r.cost_usd + r.judge_cost_usd),
                    r.started_at.clone(),
                    r.completed_at.clone().unwrap_or_default(),
                ]);
            }
            writeln!(o, "{t}")?;
        }
    }
    Ok(0)
}

fn score(args: &ScoreArgs) -> Result<u8> {
    let text = match (&args.text, &args.file) {
        (_, Some(path)) => std::fs::read_to_string(path)
            .map_err(|e| Error::Usage(format!("cannot read {}: {e}", path.display())))?,
        (Some(t), None) if t == "-" => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
            s
        }
        (Some(t), None) => t.clone(),
        (None, None) => {
            return Err(Error::Usage(
                "give the text, --file FILE, or - for standard input".into(),
            ));
        }
    };
    let report = crate::quality::report(&text, args.crisis);
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
    Ok(0)
}

fn costs(cli: &Cli, args: &CostsArgs) -> Result<u8> {
    let url = existing_database(cli)?;
    let report = runtime()?.block_on(async {
        let store = Store::open(&url).await?;
        crate::report::costs(&store, args.run_id, args.model.as_deref())
            .await
            .map_err(Error::from)
    })?;
    let mut o = out();
    match args.format {
        DataFormat::Json => {
            serde_json::to_writer_pretty(&mut o, &report)?;
            writeln!(o)?;
        }
        DataFormat::Table => crate::report_text::write_costs(&mut o, &report)?,
    }
    Ok(0)
}

/// The weights and floors for `report`: the benchmark's `scoring.yaml`, or the
/// defaults (said on stderr) when there is no benchmark folder. A broken
/// `scoring.yaml` is a content error: scoring it with other weights would
/// give numbers nobody asked for. Other content problems do not matter here.
fn report_scoring(cli: &Cli) -> Result<(loader::ScoringConfig, String, Option<String>)> {
    let root = &cli.benchmark_dir;
    if !root.is_dir() {
        eprintln!(
            "note: benchmark folder {} not found: scoring with default weights (every behaviour weighs 1, no safety floors)",
            root.display()
        );
        return Ok((loader::ScoringConfig::default(), "default".into(), None));
    }
    let (b, errors) = loader::load(root);
    let path = root.join("scoring.yaml");
    let broken: Vec<loader::ContentError> = errors.into_iter().filter(|e| e.path == path).collect();
    if !broken.is_empty() {
        return Err(Error::Content(ContentErrors(broken)));
    }
    let source = if path.is_file() {
        path.display().to_string()
    } else {
        "default (no scoring.yaml)".to_string()
    };
    Ok((b.scoring, source, Some(b.content_hash)))
}

/// Writes `bytes` to `path` through a temporary sibling and a rename, so a
/// failed write never leaves a truncated file under the requested name.
fn write_file(
    path: &std::path::Path,
    write: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| Error::Usage(format!("--out {} is not a file name", path.display())))?;
    let tmp = path.with_file_name(format!(
        ".{}.partial-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let file = std::fs::File::create(&tmp)
        .map_err(|e| Error::Usage(format!("cannot write {}: {e}", path.display())))?;
    let mut w = std::io::BufWriter::new(file);
    let result = write(&mut w).and_then(|()| w.flush().map_err(Error::from));
    drop(w);
    match result.and_then(|()| std::fs::rename(&tmp, path).map_err(Error::from)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn report(cli: &Cli, args: &ReportArgs) -> Result<u8> {
    let url = existing_database(cli)?;
    let (scoring, source, benchmark_hash) = report_scoring(cli)?;
    let target = match (&args.run_id, &args.model) {
        (Some(id), _) => crate::report::Target::Run(*id),
        (None, Some(m)) => crate::report::Target::Model(m.clone()),
        (None, None) => crate::report::Target::LatestPerModel,
    };
    let reports = runtime()?.block_on(async {
        let store = Store::open(&url).await?;
        let runs = crate::report::select_runs(&store, &target).await?;
        let mut reports = Vec::with_capacity(runs.len());
        for run in &runs {
            if run.status != "completed" {
                eprintln!(
                    "note: run {} is {}: the report covers the {} of {} planned test cases stored",
                    run.run_id, run.status, run.test_cases, run.planned_test_cases
                );
            }
            if benchmark_hash.as_ref().is_some_and(|h| *h != run.benchmark_hash) {
                eprintln!(
                    "note: run {} used another version of the benchmark; weights and floors come from {source}",
                    run.run_id
                );
            }
            reports.push(
                crate::report::model_report(&store, run, &scoring, &source, args.details).await?,
            );
        }
        Ok::<_, Error>(reports)
    })?;
    let render = |o: &mut dyn Write| -> Result<()> {
        match args.format {
            // One run named: its object; the default: every model's, wrapped.
            ReportFormat::Json => {
                match target {
                    crate::report::Target::LatestPerModel => {
                        serde_json::to_writer_pretty(&mut *o, &json!({"reports": reports}))?
                    }
                    _ => serde_json::to_writer_pretty(&mut *o, &reports[0])?,
                }
                writeln!(o)?;
            }
            ReportFormat::Html => o.write_all(crate::report_html::render(&reports).as_bytes())?,
            ReportFormat::Table => crate::report_text::write_report(o, &reports)?,
        }
        Ok(())
    };
    match &args.out {
        Some(path) => {
            write_file(path, render)?;
            eprintln!("wrote {}", path.display());
        }
        None => render(&mut out())?,
    }
    Ok(0)
}

fn export(cli: &Cli, args: &ExportArgs) -> Result<u8> {
    let url = existing_database(cli)?;
    let format = match args.format {
        ExportFormat::Csv => crate::export::Format::Csv,
        ExportFormat::Jsonl => crate::export::Format::Jsonl,
    };
    let rt = runtime()?;
    let store = rt.block_on(async {
        let store = Store::open(&url).await?;
        if let Some(id) = args.run_id {
            store.run(id).await?;
        }
        Ok::<_, Error>(store)
    })?;
    let write = |o: &mut dyn Write| -> Result<()> {
        let n = rt.block_on(crate::export::export(
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
    Ok(0)
}
