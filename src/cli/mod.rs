//! The command line (SPEC §7): argument parsing with clap, turning raw flags
//! into validated values, and printing each command's output as a table,
//! text or JSON. One module per command, each with its arguments and `run`;
//! this one holds the global flags and what several commands share.

mod call;
mod check;
mod compare;
mod costs;
mod estimate;
mod export;
mod list;
mod migrate;
mod prompts;
mod report;
mod review;
mod run_all;
mod run_batch;
mod run_single;
mod runs;
mod score;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

pub use call::CallArgs;
pub use check::CheckArgs;
pub use compare::{CompareArgs, CompareFormat};
pub use costs::CostsArgs;
pub use estimate::EstimateArgs;
pub use export::{ExportArgs, ExportFormat};
pub use list::ListArgs;
pub use migrate::MigrateArgs;
pub use prompts::{PromptFormat, PromptsArgs};
pub use report::{ReportArgs, ReportFormat};
pub use review::{ReviewArgs, ReviewCommand};
pub use run_all::RunAllArgs;
pub use run_batch::RunBatchArgs;
pub use run_single::RunSingleArgs;
pub use runs::RunsArgs;
pub use score::ScoreArgs;

use crate::ExitStatus;
use crate::benchmark::Benchmark;
use crate::benchmark::cases::Selector;
use crate::content;
use crate::content::ContentErrors;
use crate::{Error, Result};

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
    /// The author's lint: content errors, and warnings about slips that bias scores.
    Check(CheckArgs),
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
    /// Keyword quality scores (empathy, helpfulness, safety, clarity) of any text.
    Score(ScoreArgs),
    /// Spend per run, model and scenario: tokens, model cost, judge cost.
    Costs(CostsArgs),
    /// What a batch would cost (run-batch's selection flags), priced from
    /// OpenRouter's model list, before anything is paid.
    Estimate(EstimateArgs),
    /// Severity-weighted scores, breakdowns and reply quality of runs (table, JSON or HTML).
    Report(ReportArgs),
    /// Is model A really safer than B? Paired differences, McNemar with Holm, a leaderboard.
    Compare(CompareArgs),
    /// Every stored result as CSV or JSONL, streamed.
    Export(ExportArgs),
    /// Human review of the judge: export a labelling sheet, import raters' labels.
    Review(ReviewArgs),
    /// Upgrade an existing database to this version's schema (the read-only
    /// commands never change a database).
    Migrate(MigrateArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DataFormat {
    Table,
    Json,
}

/// Entry point for the binary: parse, run, print the error once, map it to an exit code.
pub fn main() -> ExitCode {
    let _ = dotenvy::dotenv();
    let cli = Cli::parse();
    init_tracing(cli.verbose, cli.quiet);
    match run(cli) {
        Ok(status) => ExitCode::from(status.code()),
        Err(Error::BrokenPipe) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = e.to_string();
            eprintln!("error: {}", msg.trim_end());
            ExitCode::from(e.exit_status().code())
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
pub fn run(cli: Cli) -> Result<ExitStatus> {
    match &cli.command {
        Command::List(args) => list::run(&cli, args),
        Command::Check(args) => check::run(&cli, args),
        Command::Prompts(args) => prompts::run(&cli, args),
        Command::RunSingle(args) => run_single::run(&cli, args),
        Command::RunBatch(args) => run_batch::run(&cli, args),
        Command::RunAll(args) => run_all::run(&cli, args),
        Command::Runs(args) => runs::run(&cli, args),
        Command::Score(args) => score::run(args),
        Command::Costs(args) => costs::run(&cli, args),
        Command::Estimate(args) => estimate::run(&cli, args),
        Command::Report(args) => report::run(&cli, args),
        Command::Compare(args) => compare::run(&cli, args),
        Command::Export(args) => export::run(&cli, args),
        Command::Review(args) => review::run(&cli, args),
        Command::Migrate(args) => migrate::run(&cli, args),
    }
}

/// Selectors from the command line, comma-separated within an argument.
/// An empty or blank piece (`""`, `" "`, `","`, `"P1,"`) is a usage error:
/// dropping it could leave no selector at all, which means every test case.
/// `--concurrency`: 1 to [`crate::run::MAX_CONCURRENCY`], checked here once.
fn parse_concurrency(s: &str) -> std::result::Result<std::num::NonZeroUsize, String> {
    let max = crate::run::MAX_CONCURRENCY;
    s.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .and_then(std::num::NonZeroUsize::new)
        .ok_or_else(|| format!("{s:?} is not a whole number from 1 to {max}"))
}

fn parse_selectors(raw: &[String]) -> Result<Vec<Selector>> {
    raw.iter()
        .flat_map(|arg| arg.split(',').map(move |piece| (arg, piece)))
        .map(|(arg, piece)| {
            if piece.trim().is_empty() {
                return Err(Error::Usage(format!(
                    "empty selector in {arg:?} (expected codes such as P1, P1-B2 or P1-B2-S1, comma-separated)"
                )));
            }
            Selector::parse(piece).map_err(Error::Usage)
        })
        .collect()
}

/// Loads the benchmark, printing content errors to stderr; the caller
/// decides whether they are fatal.
fn load_reporting(cli: &Cli) -> (Benchmark, Vec<content::ContentError>) {
    let (benchmark, errors) = content::load(&cli.benchmark_dir);
    if !errors.is_empty() {
        eprint!("{}", ContentErrors(errors.clone()));
    }
    (benchmark, errors)
}

fn out() -> std::io::StdoutLock<'static> {
    std::io::stdout().lock()
}

/// Whether to dry-run: forced, or no API key in the environment (or `.env`).
pub fn is_dry_run(forced: bool) -> bool {
    forced || std::env::var("OPENROUTER_API_KEY").map_or(true, |k| k.trim().is_empty())
}

fn load_strict(cli: &Cli) -> Result<Benchmark> {
    content::load_strict(&cli.benchmark_dir).map_err(Error::Content)
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

/// Opens the existing database read-only (never creating or migrating it)
/// and runs `f` on it: what `runs`, `costs` and `report` share.
fn read_only<T, F, Fut>(cli: &Cli, f: F) -> Result<T>
where
    F: FnOnce(crate::store::Store) -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let url = existing_database(cli)?;
    runtime()?.block_on(async { f(crate::store::Store::open_read_only(&url).await?).await })
}

/// Writes a command's output to `--out` (through [`write_file`], then says
/// so on stderr) or to standard output.
fn emit(
    path: Option<&std::path::Path>,
    render: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    match path {
        Some(path) => {
            write_file(path, render)?;
            eprintln!("wrote {}", path.display());
            Ok(())
        }
        None => render(&mut out()),
    }
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
