//! The settings every command runs with, resolved once at the edge from the
//! global flags, the environment and `.env` (clap reads each variable
//! declared here; nothing below reads the environment again): where the
//! benchmark and the database are, the provider's URL and key, attribution
//! headers, verbosity, and the hidden test hooks. Commands take a
//! [`Settings`], never the raw command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::benchmark::Benchmark;
use crate::content::{self, ContentErrors};
use crate::domain::Api;
use crate::openrouter;
use crate::store::Store;
use crate::{Error, Result};

/// The flags every command takes (`global`: before or after the command).
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Folder holding models.yml, scoring.yaml and scenarios/.
    #[arg(
        long,
        global = true,
        env = "HELMBENCH_BENCHMARK_DIR",
        default_value = "benchmark"
    )]
    pub benchmark_dir: PathBuf,
    /// SQLite database URL or path, or a PostgreSQL URL (postgres://…, the
    /// team store) [default: sqlite://helmbench.db].
    #[arg(long, global = true, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// OpenRouter API key; without one, run-batch dry-runs. Prefer the
    /// environment or `.env`: a flag shows in the process list.
    #[arg(
        long,
        global = true,
        env = "OPENROUTER_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    pub api_key: Option<String>,
    /// The API's base URL (any OpenAI-compatible server).
    #[arg(long, global = true, env = "OPENROUTER_BASE_URL", default_value = openrouter::DEFAULT_BASE_URL)]
    pub base_url: String,
    /// The wire format of every model whose models.yml entry names none:
    /// `openrouter`, or `openai-compatible` for a server that speaks
    /// OpenAI's Chat Completions only (vLLM, llama.cpp, Ollama, LiteLLM).
    #[arg(long, global = true, env = "HELMBENCH_API", value_name = "openrouter|openai-compatible",
          value_parser = parse_api)]
    pub api: Option<Api>,
    /// `HTTP-Referer` attribution header sent to OpenRouter.
    #[arg(
        long,
        global = true,
        env = "OPENROUTER_HTTP_REFERER",
        value_name = "URL"
    )]
    pub http_referer: Option<String>,
    /// `X-Title` attribution header sent to OpenRouter.
    #[arg(
        long,
        global = true,
        env = "OPENROUTER_X_TITLE",
        default_value = "helmbench"
    )]
    pub x_title: String,
    /// More log output (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Fit tables and progress lines to N columns (default: the terminal's
    /// width; when standard output is not a terminal, tables are not fitted).
    #[arg(long, global = true, env = "COLUMNS", value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..))]
    pub width: Option<u16>,
    /// Only errors; no progress bar.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Test hook: the first retry backoff in milliseconds (retries in tests
    /// take milliseconds, not seconds).
    #[arg(long, global = true, hide = true, value_name = "MS")]
    pub test_retry_base_ms: Option<u64>,
    /// Test hook: hold a run between its last result write and its
    /// bookkeeping, so a crash test can kill it exactly there.
    #[arg(long, global = true, hide = true, value_name = "MS")]
    pub test_pause_before_finish_ms: Option<u64>,
    /// Test hook: the longest a logged result waits for its database
    /// transaction (0: committed as it arrives), for tests that watch the
    /// database while a run runs.
    #[arg(long, global = true, hide = true, value_name = "MS")]
    pub test_log_age_ms: Option<u64>,
    /// Test hook: poll batches of `--batch-api` every MS milliseconds
    /// (no backoff), so tests take milliseconds, not minutes.
    #[arg(long, global = true, hide = true, value_name = "MS")]
    pub test_batch_poll_ms: Option<u64>,
    /// Test hook: how long a `--batch-api` batch may answer 404 before it
    /// is taken as not found (default: minutes, see run::NOT_FOUND_WINDOW).
    #[arg(long, global = true, hide = true, value_name = "MS")]
    pub test_batch_404_window_ms: Option<u64>,
}

fn parse_api(s: &str) -> std::result::Result<Api, String> {
    s.parse()
}

/// What every command runs with, resolved once from [`GlobalArgs`].
#[derive(Clone)]
pub struct Settings {
    pub benchmark_dir: PathBuf,
    /// The database URL, the default filled in.
    pub database_url: String,
    /// The key, trimmed; None when unset or blank (a dry run).
    api_key: Option<String>,
    pub base_url: String,
    /// `--api`: the wire format of a model whose entry names none.
    pub api: Api,
    pub referer: Option<String>,
    pub title: Option<String>,
    pub quiet: bool,
    pub verbose: u8,
    /// The width tables on standard output are fitted to: `--width` or
    /// `COLUMNS`, else the terminal's; none when it is not a terminal.
    pub width: Option<u16>,
    /// `--width` or `COLUMNS` as given (progress lines on stderr use it
    /// before the terminal's width).
    pub columns: Option<u16>,
    pub retry_base: Option<Duration>,
    pub pause_before_finish: Option<Duration>,
    /// Test hook: see [`GlobalArgs::test_log_age_ms`].
    pub log_age: Option<Duration>,
    /// `--batch-api`'s poll interval, fixed (a test hook).
    pub batch_poll: Option<Duration>,
    /// How long a batch's polls may answer 404 (a test hook).
    pub batch_404_window: Option<Duration>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("benchmark_dir", &self.benchmark_dir)
            .field(
                "database_url",
                &crate::domain::redact_password(&self.database_url),
            )
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("base_url", &openrouter::redact_url(&self.base_url))
            .field("quiet", &self.quiet)
            .finish_non_exhaustive()
    }
}

impl Settings {
    pub fn resolve(g: &GlobalArgs) -> Settings {
        let nonblank = |s: &Option<String>| {
            s.as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        Settings {
            benchmark_dir: g.benchmark_dir.clone(),
            database_url: g
                .database_url
                .clone()
                .unwrap_or_else(|| crate::store::DEFAULT_DATABASE_URL.to_string()),
            api_key: nonblank(&g.api_key),
            base_url: Some(g.base_url.trim())
                .filter(|s| !s.is_empty())
                .unwrap_or(openrouter::DEFAULT_BASE_URL)
                .to_string(),
            api: g.api.unwrap_or_default(),
            referer: nonblank(&g.http_referer),
            title: nonblank(&Some(g.x_title.clone())),
            quiet: g.quiet,
            verbose: g.verbose,
            columns: g.width,
            width: g.width.or_else(|| {
                terminal_size::terminal_size_of(std::io::stdout())
                    .map(|(w, _)| w.0)
                    .filter(|&w| w > 0)
            }),
            retry_base: g.test_retry_base_ms.map(Duration::from_millis),
            pause_before_finish: g.test_pause_before_finish_ms.map(Duration::from_millis),
            log_age: g.test_log_age_ms.map(Duration::from_millis),
            batch_poll: g.test_batch_poll_ms.map(Duration::from_millis),
            batch_404_window: g.test_batch_404_window_ms.map(Duration::from_millis),
        }
    }

    /// The width of what goes to stderr (the estimate, progress lines):
    /// `--width` or `COLUMNS`, else stderr's terminal's; none off a terminal.
    pub fn stderr_width(&self) -> Option<u16> {
        self.columns.or_else(|| {
            terminal_size::terminal_size_of(std::io::stderr())
                .map(|(w, _)| w.0)
                .filter(|&w| w > 0)
        })
    }

    /// The API key, when one is set.
    pub fn api_key(&self) -> Option<&str> {
        self.api_key.as_deref()
    }

    /// Whether to dry-run: forced, or no API key.
    pub fn is_dry_run(&self, forced: bool) -> bool {
        forced || self.api_key.is_none()
    }

    /// What a command that would send requests says once, at the top, when
    /// it dry-runs instead: why, so a missing key is never a silent surprise.
    pub fn dry_run_notice(&self, forced: bool) -> Option<&'static str> {
        if forced {
            Some("dry run (--dry-run): nothing will be sent")
        } else if self.api_key.is_none() {
            Some("dry run: OPENROUTER_API_KEY is not set (see .env.example); nothing will be sent")
        } else {
            None
        }
    }

    /// Prints [`Settings::dry_run_notice`] on stderr (not with `-q`).
    pub fn say_dry_run(&self, forced: bool) {
        if let Some(n) = self.dry_run_notice(forced)
            && !self.quiet
        {
            eprintln!("{n}");
        }
    }

    /// Loads the benchmark, printing content errors to stderr; the caller
    /// decides whether they are fatal.
    pub fn load_reporting(&self) -> (Benchmark, Vec<content::ContentError>) {
        let (benchmark, errors) = content::load(&self.benchmark_dir);
        if !errors.is_empty() {
            eprint!("{}", ContentErrors(errors.clone()));
        }
        (benchmark, errors)
    }

    /// Loads the benchmark; any content error is fatal.
    pub fn load_strict(&self) -> Result<Benchmark> {
        content::load_strict(&self.benchmark_dir).map_err(Error::Content)
    }

    /// The database URL of a command that only reads: a missing database
    /// is a usage error naming the path, never an empty new file.
    pub fn existing_database(&self) -> Result<&str> {
        let url = &self.database_url;
        if !Store::database_exists(url) {
            return Err(Error::usage(format!(
                "no database at {url} yet (run `helmbench run-batch` first, or pass --database-url)"
            )));
        }
        Ok(url)
    }

    /// Opens the existing database read-only (never creating or migrating
    /// it) and runs `f` on it: what the reading commands share.
    pub fn read_only<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: FnOnce(Store) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let url = self.existing_database()?.to_string();
        runtime()?.block_on(async { f(Store::open_read_only(&url).await?).await })
    }
}

/// The async runtime a command runs its work on.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}
