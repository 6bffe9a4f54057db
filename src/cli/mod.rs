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
mod new;
mod output;
mod prompts;
mod report;
mod review;
mod run_all;
mod run_batch;
mod run_single;
mod runs;
mod score;
mod selection;
mod settings;
mod shell;
mod view;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

pub use call::CallArgs;
pub use check::CheckArgs;
pub use compare::{CompareArgs, CompareFormat};
pub use costs::CostsArgs;
pub use estimate::EstimateArgs;
pub use export::{ExportArgs, ExportFormat};
pub use list::ListArgs;
pub use migrate::MigrateArgs;
pub use new::{NewArgs, NewCommand, ScenarioType};
pub use output::DataFormat;
pub use prompts::{PromptFormat, PromptsArgs};
pub use report::{ReportArgs, ReportFormat};
pub use review::{ReviewArgs, ReviewCommand};
pub use run_all::RunAllArgs;
pub use run_batch::RunBatchArgs;
pub use run_single::RunSingleArgs;
pub use runs::RunsArgs;
pub use score::ScoreArgs;
pub use settings::{GlobalArgs, Settings};
pub use view::ViewArgs;

use crate::ExitStatus;
use crate::{Error, Result};

#[derive(Debug, Parser)]
#[command(
    name = "helmbench",
    version,
    about = "Runs the HELMBench mental-health safety benchmark against LLMs through OpenRouter"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
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
    /// Explore runs, read every reply and label them in a local web app
    /// (127.0.0.1:8750 by default) until Ctrl-C.
    View(ViewArgs),
    /// Upgrade an existing database to this version's schema (the read-only
    /// commands never change a database); with `--to postgres://…`, copy a
    /// SQLite database into PostgreSQL instead.
    Migrate(MigrateArgs),
    /// Shell completions (bash, zsh, fish, powershell, elvish) from these
    /// very definitions: `source <(helmbench completions bash)`.
    Completions(shell::CompletionsArgs),
    /// The man page (helmbench(1)), or one page per command with --out-dir.
    Man(shell::ManArgs),
    /// Start a scenario folder (any evaluation type, in the benchmark's
    /// layout) or a benchmark folder that `check` accepts; never overwrites.
    New(NewArgs),
}

/// Entry point for the binary: parse, run, print the error once, map it to an exit code.
pub fn main() -> ExitCode {
    let _ = dotenvy::dotenv();
    let cli = Cli::parse();
    init_tracing(cli.global.verbose, cli.global.quiet);
    match run(cli) {
        Ok(status) => ExitCode::from(status.code()),
        Err(e) => {
            // A reader that went away is a quiet stop; a closed stderr must
            // not turn an error into a panic.
            if !matches!(e, Error::BrokenPipe) {
                let msg = e.to_string();
                let _ = writeln!(std::io::stderr(), "error: {}", msg.trim_end());
            }
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
    let s = &Settings::resolve(&cli.global);
    // Tables and long lines on standard output fit its width (if any).
    crate::report::terminal::set_width(s.width);
    match &cli.command {
        Command::List(args) => list::run(s, args),
        Command::Check(args) => check::run(s, args),
        Command::Prompts(args) => prompts::run(s, args),
        Command::RunSingle(args) => run_single::run(s, args),
        Command::RunBatch(args) => run_batch::run(s, args),
        Command::RunAll(args) => run_all::run(s, args),
        Command::Runs(args) => runs::run(s, args),
        Command::Score(args) => score::run(args),
        Command::Costs(args) => costs::run(s, args),
        Command::Estimate(args) => estimate::run(s, args),
        Command::Report(args) => report::run(s, args),
        Command::Compare(args) => compare::run(s, args),
        Command::Export(args) => export::run(s, args),
        Command::Review(args) => review::run(s, args),
        Command::Migrate(args) => migrate::run(s, args),
        Command::View(args) => view::run(s, args),
        Command::Completions(args) => shell::completions(args, Cli::command()),
        Command::Man(args) => shell::man(args, Cli::command()),
        Command::New(args) => new::run(s, args),
    }
}
