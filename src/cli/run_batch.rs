//! `run-batch`: a batch of test cases per model, or its dry-run.

use std::collections::HashSet;
use std::io::{IsTerminal, Write};
use std::num::NonZeroUsize;
use std::sync::Arc;

use clap::Args;
use serde_json::json;

use super::call::{self, CallArgs};
use super::output::{DataFormat, out};
use super::selection::SelectionArgs;
use super::settings::{Settings, runtime};
use crate::ExitStatus;
use crate::domain::BlockedAs;
use crate::run::Selection;
use crate::{Error, Result, run};

#[derive(Debug, Args)]
pub struct RunBatchArgs {
    #[command(flatten)]
    pub selection: SelectionArgs,
    #[command(flatten)]
    pub call: CallArgs,
    /// Finish the missing test cases of these runs (comma-separated ids),
    /// at once, each with its recorded settings.
    #[arg(long, value_name = "RUN_ID", value_delimiter = ',', num_args = 1..,
          conflicts_with_all = ["scenarios", "all_scenarios", "variants", "variant_seed"], help_heading = "Resume")]
    pub resume: Vec<i64>,
    /// Join a run another process is running now, on the team store
    /// (PostgreSQL): its recorded settings, its test cases shared out in
    /// leases, so no test case is asked twice (see README, "Team store").
    #[arg(long, value_name = "RUN_ID",
          conflicts_with_all = ["resume", "scenarios", "all_scenarios", "max_cost", "batch_api", "retry_blocked", "variants", "variant_seed"],
          help_heading = "Resume")]
    pub join: Option<i64>,
    /// Requests in flight at once, per model (1 to 1024); the models of a
    /// batch run at the same time. Lowered on 429s and grown back, never
    /// above this (see --fixed-concurrency).
    #[arg(long, default_value = "16", value_parser = super::selection::parse_concurrency,
          help_heading = "Concurrency")]
    pub concurrency: NonZeroUsize,
    /// Requests in flight at once across every model and the judge (1 to
    /// 1024; default: no cap beyond each model's --concurrency).
    #[arg(long, value_name = "N", value_parser = super::selection::parse_concurrency,
          help_heading = "Concurrency")]
    pub max_in_flight: Option<NonZeroUsize>,
    /// Judge requests in flight at once (1 to 1024; default: --concurrency
    /// for each model of the batch).
    #[arg(long, value_name = "N", value_parser = super::selection::parse_concurrency,
          help_heading = "Concurrency")]
    pub judge_concurrency: Option<NonZeroUsize>,
    /// Keep each model at --concurrency even when the provider answers 429
    /// (retries still honour Retry-After).
    #[arg(long, help_heading = "Concurrency")]
    pub fixed_concurrency: bool,
    /// How a test case the provider blocked (moderation, guardrail,
    /// content policy) or the model refused through an error enters the
    /// score: left out (the score is over the answered cases, coverage says
    /// how many) or counted as a miss at its severity [default: exclude].
    /// Recorded with the run (a resume keeps it).
    #[arg(long, value_name = "exclude|fail", value_parser = parse_blocked_as,
          conflicts_with = "resume", help_heading = "Scoring")]
    pub blocked_as: Option<BlockedAs>,
    /// With --resume: ask the blocked and refused test cases again (kept,
    /// not asked again, by default: a block is the provider's answer).
    #[arg(long, requires = "resume", help_heading = "Resume")]
    pub retry_blocked: bool,
    /// With --resume of a --batch-api run: send again the requests of the
    /// batches whose submission is uncertain (a 429, 5xx or timeout after
    /// the body was sent). OpenRouter may have accepted them: if it did,
    /// they are paid twice. Never done without this flag.
    #[arg(long, requires = "resume", help_heading = "Resume")]
    pub resubmit_uncertain: bool,
    #[arg(long, value_enum, default_value_t = DataFormat::Table, help_heading = "Output")]
    pub format: DataFormat,
    /// When stderr is not a terminal (a log, CI): a progress line per model
    /// and a total every SECS seconds (0: none). On a terminal the lines
    /// redraw in place instead.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_PROGRESS_EVERY_S, help_heading = "Output")]
    pub progress_every: u64,
    /// Send the test cases (and then the judge's requests) through
    /// OpenRouter's Batch API: typically half the price, results within
    /// 24 hours, durable across kills and days (see README, "Batch API").
    #[arg(long, help_heading = "Batch API")]
    pub batch_api: bool,
    /// With --batch-api: requests per batch, at most (a batch is also cut
    /// before its body reaches 64 MB).
    #[arg(long, value_name = "N", default_value_t = run::DEFAULT_BATCH_SIZE,
          value_parser = parse_batch_size,
          help_heading = "Batch API")]
    pub batch_size: usize,
    /// With --batch-api: submit the batches and exit at once, printing the
    /// command that collects the results (`helmbench run-batch --resume N`).
    #[arg(long, help_heading = "Batch API")]
    pub detach: bool,
}

/// What the estimate prices a Batch API run at: OpenRouter bills batches
/// "typically" at 50 % of the per-token price.
const BATCH_DISCOUNT: f64 = 0.5;

/// Default of `--progress-every`: often enough to see a log move, rarely
/// enough that a long run's log stays readable.
const DEFAULT_PROGRESS_EVERY_S: u64 = 10;

/// `--batch-size`: 1 to 50,000 requests.
fn parse_batch_size(s: &str) -> std::result::Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=50_000).contains(&n) => Ok(n),
        _ => Err(format!(
            "expected a number of requests from 1 to 50000, got {s:?}"
        )),
    }
}

fn parse_blocked_as(s: &str) -> std::result::Result<BlockedAs, String> {
    s.trim().parse()
}

/// A batch as validated from the command line: what `run-batch` and
/// `run-all` run. Nothing downstream re-checks these values.
#[derive(Debug, Clone)]
pub(super) struct Batch {
    pub selection: Selection,
    pub resume: Vec<i64>,
    /// `--join`: `resume` holds the one run joined.
    pub join: bool,
    pub concurrency: NonZeroUsize,
    pub max_in_flight: Option<NonZeroUsize>,
    pub judge_concurrency: Option<NonZeroUsize>,
    pub adaptive: bool,
    pub blocked_as: Option<BlockedAs>,
    pub retry_blocked: bool,
    pub resubmit_uncertain: bool,
    pub format: DataFormat,
    /// Plain progress lines this often when stderr is not a terminal.
    pub progress_every: Option<std::time::Duration>,
    /// `--batch-api`: requests per batch; None for synchronous requests.
    pub batch_api: Option<usize>,
    pub detach: bool,
}

impl Batch {
    /// Every scenario, default settings: `run-all`'s batch.
    pub(super) fn every_scenario(concurrency: NonZeroUsize) -> Self {
        Batch {
            selection: Selection::everything(),
            resume: Vec::new(),
            join: false,
            concurrency,
            max_in_flight: None,
            judge_concurrency: None,
            adaptive: true,
            blocked_as: None,
            retry_blocked: false,
            resubmit_uncertain: false,
            format: DataFormat::Table,
            progress_every: Some(std::time::Duration::from_secs(DEFAULT_PROGRESS_EVERY_S)),
            batch_api: None,
            detach: false,
        }
    }
}

impl RunBatchArgs {
    /// Checks what clap cannot (selectors, that something is selected)
    /// before anything is created or sent.
    fn resolve(&self) -> Result<Batch> {
        if self.detach && !self.batch_api && self.resume.is_empty() {
            return Err(Error::usage(
                "--detach submits batches: use it with --batch-api".into(),
            ));
        }
        let mut resume = self.resume.clone();
        resume.dedup();
        resume.extend(self.join);
        let selection = if resume.is_empty() {
            self.selection
                .resolve(", or --resume RUN_ID to finish earlier runs")?
        } else {
            Selection {
                max_cost: self.selection.max_cost,
                ..Selection::everything()
            }
        };
        Ok(Batch {
            selection,
            resume,
            join: self.join.is_some(),
            concurrency: self.concurrency,
            max_in_flight: self.max_in_flight,
            judge_concurrency: self.judge_concurrency,
            adaptive: !self.fixed_concurrency,
            blocked_as: self.blocked_as,
            retry_blocked: self.retry_blocked,
            resubmit_uncertain: self.resubmit_uncertain,
            format: self.format,
            progress_every: (self.progress_every > 0)
                .then(|| std::time::Duration::from_secs(self.progress_every)),
            batch_api: self.batch_api.then_some(self.batch_size),
            detach: self.detach,
        })
    }
}

pub fn run(s: &Settings, args: &RunBatchArgs) -> Result<ExitStatus> {
    let batch = args.resolve()?;
    if batch.resume.is_empty() {
        s.say_dry_run(args.call.dry_run);
    }
    execute(s, &args.call, &batch)
}

/// Runs (or dry-runs) a validated batch.
pub(super) fn execute(s: &Settings, call_args: &CallArgs, args: &Batch) -> Result<ExitStatus> {
    if s.is_dry_run(call_args.dry_run) {
        if !args.resume.is_empty() {
            return Err(Error::usage(
                "--resume sends requests: set OPENROUTER_API_KEY (and drop --dry-run)".into(),
            ));
        }
        return dry_run(s, &args.selection, args.format);
    }
    crate::report::kept::remember_binary();
    let mut b = s.load_strict()?;
    let mut batch = args.clone();
    let args = &mut batch;
    let rt = runtime()?;
    rt.block_on(async {
        // A run another live helmbench owns is refused before anything is
        // written (seeding the content waits for a database lock that the
        // owner may be stalled on too).
        if args.join && !crate::store::Store::is_team_url(&s.database_url) {
            return Err(Error::usage(
                "--join shares a run between processes through the team store (PostgreSQL: --database-url postgres://…); a SQLite file has one writing process at a time: use --resume once the run's process has stopped".into(),
            ));
        }
        if !args.resume.is_empty() && !args.join {
            let store = crate::store::Store::open(&s.database_url.clone()).await?;
            for &id in &args.resume {
                store.refuse_if_owned(id).await?;
            }
        }
        let (client, store) = call::connect(s, call_args).await?;
        if args.resume.is_empty() {
            super::selection::make_variants(&mut b, &mut args.selection, s.quiet)?;
        } else {
            resumed_variants(&mut b, &store, &args.resume, s.quiet).await?;
        }
        let args = &*args;
        // The models an earlier run already answered are left out before
        // anything is seeded, estimated, probed or created: a rerun with
        // nothing to do writes nothing and sends nothing.
        let mut complete = Vec::new();
        let fresh = if args.resume.is_empty() {
            let (fresh, done) = new_runs(&b, &client, &store, call_args, args).await?;
            complete = done;
            if fresh.is_empty() {
                store.close().await;
                return call::report_summaries(&[], &complete, &Default::default(), args.format);
            }
            fresh
        } else {
            Vec::new()
        };
        let ctx = run::RunContext::new(b, store, client, s.quiet).await?;
        let mut control = call_args.control(s);
        control.retry_blocked = args.retry_blocked;
        control.resubmit_uncertain = args.resubmit_uncertain;
        control.join = args.join;
        let per_case;
        let (runs, budget, spent_before, probes) = if args.resume.is_empty() {
            // The estimate (and its refusals) before anything is created or sent.
            let models: Vec<_> = fresh.iter().map(|(m, _)| m.clone()).collect();
            let judge = call::judge_of(&ctx.benchmark, &call_args.judges);
            let checked = super::estimate::preflight(
                s,
                &ctx,
                &models,
                &super::estimate::Covered {
                    selection: &args.selection,
                    judge,
                    user_model: call_args.user_model.clone(),
                },
                call_args.yes,
                args.batch_api.map(|_| BATCH_DISCOUNT),
            )
            .await?;
            per_case = checked.per_case;
            let runs = fresh.into_iter().map(|(_, st)| (None, st)).collect();
            (runs, args.selection.max_cost, 0.0, checked.probes)
        } else {
            let mut planned = resumed_runs(&ctx, args).await?;
            // A run started with --batch-api (or that submitted batches)
            // goes on through the Batch API, with its recorded batch size,
            // from where its batches were submitted.
            for (resume, settings) in &mut planned.0 {
                let Some(id) = *resume else { continue };
                let recorded = !ctx.store.run_batches(id).await?.is_empty();
                if settings.batch_api.is_none() && (recorded || args.batch_api.is_some()) {
                    settings.batch_api = Some(run::BatchApiSettings {
                        batch_size: args.batch_api.unwrap_or(run::DEFAULT_BATCH_SIZE),
                        base_url: None,
                        key_fingerprint: None,
                    });
                }
                if let Some(api) = &settings.batch_api {
                    same_batch_endpoint(&ctx.client, id, api)?;
                }
            }
            let discounts: Vec<Option<f64>> = planned
                .0
                .iter()
                .map(|(_, st)| st.batch_api.is_some().then_some(BATCH_DISCOUNT))
                .collect();
            // What a model or judge takes may have changed since the run
            // began: refused before the resume sends anything.
            per_case =
                super::estimate::resume_preflight(s, &ctx, &planned.0, &discounts).await?;
            (planned.0, planned.1, planned.2, Vec::new())
        };
        if let Some((_, st)) = runs.iter().find(|(_, st)| {
            st.batch_api.is_some()
                && ctx.client.api_of(&st.model) != crate::domain::Api::OpenRouter
        }) {
            return Err(Error::usage(format!(
                "--batch-api is OpenRouter's Batch API: `{}` is an OpenAI-compatible model (run it without --batch-api)",
                st.model.id
            )));
        }
        let api = run::BatchApi {
            batch_size: args.batch_api.unwrap_or(run::DEFAULT_BATCH_SIZE),
            detach: args.detach,
            poll_first: s.batch_poll.unwrap_or(run::POLL_FIRST),
            poll_max: s.batch_poll.unwrap_or(run::POLL_MAX),
            not_found_window: s.batch_404_window.unwrap_or(run::NOT_FOUND_WINDOW),
            max_rounds: run::BATCH_MAX_ROUNDS,
            per_case_usd: per_case
                .iter()
                .filter_map(|p| p.model_usd.map(|c| (p.model.clone(), c)))
                .collect(),
            per_judge_request_usd: per_case
                .iter()
                .filter_map(|p| p.judge_usd.map(|c| (p.model.clone(), c)))
                .collect(),
        };
        let mut batch = run::BatchShared::new(budget, spent_before);
        // What the structured-output probes cost: counted against the
        // budget now, and kept with the first run of the batch.
        batch.add_preflight_charges(probes);
        set_limits(&ctx, args, &runs);
        batch.progress = run::Progress::new(progress_mode(s, args.progress_every));
        control.batch = Arc::new(batch);
        let plain = match control.batch.progress.mode {
            run::ProgressMode::Plain { every } => {
                Some(tokio::spawn(plain_progress(control.batch.clone(), every)))
            }
            _ => None,
        };
        // Every model at once: each run has its own workers, limit and
        // writer; the batch shares the budget, the stops and the cache.
        let results = futures_util::future::join_all(runs.iter().map(
            |(resume, settings)| {
                let (ctx, control, api) = (&ctx, &control, &api);
                async move {
                    if settings.batch_api.is_some() {
                        run::run_batch_api(ctx, settings, *resume, control, api).await
                    } else {
                        run::run_batch(ctx, settings, *resume, "batch", control).await
                    }
                }
            },
        ))
        .await;
        if let Some(p) = plain {
            p.abort();
        }
        control.batch.progress.finish();
        let mut summaries = Vec::new();
        let mut first_error = None;
        for r in results {
            match r {
                Ok(s) => summaries.push(s),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let reuse = call::reused(&ctx.store, &summaries).await;
        let started = std::time::Instant::now();
        // The WAL is folded into the database file while the analyses read
        // (on another connection, and mostly on the other core), not after.
        let ((), ()) = tokio::join!(keep_analyses(s, &ctx, &control.batch, &summaries), async {
            ctx.store.fold_wal().await;
            tracing::debug!(ms = started.elapsed().as_millis() as u64, "WAL folded");
        });
        tracing::debug!(ms = started.elapsed().as_millis() as u64, "analyses kept");
        // Closing folds the WAL into the database file and removes it, so
        // a copy of the file alone holds every result.
        let started = std::time::Instant::now();
        ctx.store.close().await;
        tracing::debug!(ms = started.elapsed().as_millis() as u64, "database closed");
        let status = call::report_summaries(&summaries, &complete, &reuse, args.format);
        // The retries themselves show with -v; their tally always.
        if let Some(line) = control.batch.retried().summary()
            && !s.quiet
        {
            eprintln!("{line}");
        }
        match (first_error, status) {
            (Some(e), _) => Err(e),
            // Detached runs are unfinished by design: their batches run on.
            (None, Ok(ExitStatus::Failure))
                if args.detach
                    && summaries.iter().all(|s| {
                        s.message
                            .as_deref()
                            .is_some_and(|m| m.starts_with("detached"))
                            || s.status == crate::domain::RunStatus::Completed
                    }) =>
            {
                Ok(ExitStatus::Success)
            }
            (None, status) => status,
        }
    })
}

/// Keeps the analysis of each run of the batch that completed, so `report`
/// reads it instead of scoring the run again (issue 45; crate::report::kept).
/// Scored as `report` scores (the benchmark folder's weights and floors,
/// each run's `--blocked-as`), from the benchmark the batch loaded: the
/// folder is not read again; each from the tally its writer took, where it
/// stands for the run (report::Tally), else read back. A failure costs
/// only the keeping: `report` then computes the analysis itself.
async fn keep_analyses(
    s: &Settings,
    ctx: &run::RunContext,
    batch: &run::BatchShared,
    summaries: &[run::RunSummary],
) {
    let completed: Vec<(i64, Option<crate::report::Tally>)> = summaries
        .iter()
        .filter(|r| r.status == crate::domain::RunStatus::Completed)
        .map(|r| (r.run_id, batch.take_tally(r.run_id)))
        .collect();
    if completed.is_empty() {
        return;
    }
    let source = super::report::scoring_source(&s.benchmark_dir);
    let kept =
        crate::report::kept::keep(&ctx.store, completed, &ctx.benchmark.scoring, &source).await;
    if let Err(e) = kept {
        tracing::warn!(error = %e, "the completed runs' analyses were not kept; `report` computes them");
    }
}

/// How the batch shows progress: redrawn on a terminal (fitted to its
/// width, or `--width`), plain lines every `every` in a log, nothing with -q.
fn progress_mode(s: &Settings, every: Option<std::time::Duration>) -> run::ProgressMode {
    if s.quiet {
        run::ProgressMode::Off
    } else if std::io::stderr().is_terminal() {
        run::ProgressMode::Drawn {
            width: s.stderr_width().unwrap_or(80),
        }
    } else {
        every.map_or(run::ProgressMode::Off, |every| run::ProgressMode::Plain {
            every,
        })
    }
}

/// Prints every model's progress line and the total every `every`.
async fn plain_progress(batch: Arc<run::BatchShared>, every: std::time::Duration) {
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tick.tick().await;
        let mut err = std::io::stderr().lock();
        for line in batch.progress.plain_lines() {
            let _ = writeln!(err, "progress: {line}");
        }
    }
}

/// The runs a batch over `--models` (or models.yml) starts, one per model
/// (its models.yml entry as given, for the estimate, and its settings),
/// all with the batch's budget and token; and the models an earlier run
/// already answered in full, which are not run again.
async fn new_runs(
    b: &crate::benchmark::Benchmark,
    client: &crate::openrouter::Client,
    store: &crate::store::Store,
    call_args: &CallArgs,
    args: &Batch,
) -> Result<(
    Vec<(crate::domain::ModelEntry, run::RunSettings)>,
    Vec<run::AlreadyComplete>,
)> {
    call::require_user_model(b, &args.selection, call_args.user_model.as_deref())?;
    let token = batch_token();
    let mut fresh = Vec::new();
    let mut complete = Vec::new();
    for entry in call::models(b, call_args)? {
        let mut model = entry.clone();
        // Pinned with the run: a resume speaks to the server as the run began.
        model.api = Some(client.api_of(&model));
        let settings = run::RunSettings {
            concurrency: args.concurrency,
            batch: Some(token.clone()),
            blocked_as: args.blocked_as.unwrap_or_default(),
            batch_api: args.batch_api.map(|batch_size| run::BatchApiSettings {
                batch_size,
                base_url: Some(client.batch_base_url()),
                key_fingerprint: Some(client.key_fingerprint()),
            }),
            ..call::settings_for(b, client, model, &args.selection, call_args)
        };
        match run::already_complete(b, client, store, &settings).await? {
            Some(done) => complete.push(done),
            None => fresh.push((entry, settings)),
        }
    }
    Ok((fresh, complete))
}

/// The runs `--resume` continues, with their recorded settings; their
/// batch's budget (the new `--max-cost`, else the recorded one) and what
/// every run of their batches spent, which counts against it.
async fn resumed_runs(ctx: &run::RunContext, args: &Batch) -> Result<Planned> {
    let mut runs = Vec::new();
    let mut budget: Option<f64> = None;
    for &id in &args.resume {
        let row = ctx.store.run(id).await?;
        let mut settings: run::RunSettings = serde_json::from_str(&row.settings).map_err(|e| {
            Error::tool_caused_by(format!("run {id} has unreadable settings: {e}"), e)
        })?;
        if row.status == crate::domain::RunStatus::Completed
            && row.test_cases >= row.planned_test_cases
            && row.provider_errors == 0
        {
            eprintln!("run {id} is already complete");
        }
        if settings.benchmark_hash != ctx.benchmark.content_hash {
            return Err(Error::usage(format!(
                "the benchmark content changed since run {id} started; resuming would mix two versions in one run (restore the content, or start a new run)"
            )));
        }
        // A resume continues the budget: what was spent already counts.
        settings.max_cost = args
            .selection
            .max_cost
            .or(row.max_cost_usd)
            .or(settings.max_cost);
        budget = match (budget, settings.max_cost) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        runs.push((Some(id), settings));
    }
    // Every run of the resumed runs' batches counts, resumed or not: the
    // budget was for the batch.
    let tokens: HashSet<&str> = runs
        .iter()
        .filter_map(|(_, s)| s.batch.as_deref())
        .collect();
    let ids: HashSet<i64> = args.resume.iter().copied().collect();
    let mut spent = 0.0;
    for row in ctx.store.runs().await? {
        let in_batch = ids.contains(&row.run_id)
            || serde_json::from_str::<run::RunSettings>(&row.settings)
                .ok()
                .and_then(|s| s.batch)
                .is_some_and(|t| tokens.contains(t.as_str()));
        if in_batch {
            spent += row.cost_usd + row.judge_cost_usd;
        }
    }
    Ok((runs, budget, spent))
}

/// Makes again the variants the runs `ids` were made with (the same seed,
/// content and lists: the same text), before their recorded content hash
/// is compared. Runs resumed together must have been started with the
/// same variants and seed.
async fn resumed_variants(
    b: &mut crate::benchmark::Benchmark,
    store: &crate::store::Store,
    ids: &[i64],
    quiet: bool,
) -> Result<()> {
    let mut union: Option<(i64, Selection, bool)> = None;
    for &id in ids {
        let row = store.run(id).await?;
        // Unreadable settings are reported by resumed_runs.
        let Ok(st) = serde_json::from_str::<run::RunSettings>(&row.settings) else {
            continue;
        };
        let selectors = super::selection::parse_selectors(&st.selectors)?;
        match &mut union {
            None => {
                let every = selectors.is_empty();
                let sel = Selection {
                    selectors,
                    include_no_context: st.include_no_context,
                    variants: st.variants,
                    variant_seed: st.variant_seed,
                    ..Selection::everything()
                };
                union = Some((id, sel, every));
            }
            Some((first, sel, every)) => {
                if (&sel.variants, sel.variant_seed) != (&st.variants, st.variant_seed) {
                    return Err(Error::usage(format!(
                        "runs {first} and {id} were started with different variants or variant seeds: resume them one at a time"
                    )));
                }
                *every |= selectors.is_empty();
                sel.selectors.extend(selectors);
                sel.include_no_context |= st.include_no_context;
            }
        }
    }
    match union {
        // No variant applied when it began: none is made now either.
        Some((_, mut sel, every)) if sel.variant_seed.is_some() => {
            if every {
                sel.selectors.clear();
            }
            super::selection::make_variants(b, &mut sel, quiet)
        }
        _ => Ok(()),
    }
}

/// Refuses a resume of run `id` whose base URL or API key is not the one its
/// batches were submitted with: a batch id means something only there, and
/// a poll elsewhere answers 404 for a batch that runs on (and is paid).
fn same_batch_endpoint(
    client: &crate::openrouter::Client,
    id: i64,
    api: &run::BatchApiSettings,
) -> Result<()> {
    let mut differs = Vec::new();
    if let Some(base) = &api.base_url
        && *base != client.batch_base_url()
    {
        differs.push(format!(
            "its batches were submitted to {base}, this resume would poll {}",
            client.batch_base_url()
        ));
    }
    if let Some(fp) = &api.key_fingerprint
        && *fp != client.key_fingerprint()
    {
        differs.push(format!(
            "they were submitted with another API key (SHA-256 fingerprint {fp}, this one's is {})",
            client.key_fingerprint()
        ));
    }
    if differs.is_empty() {
        return Ok(());
    }
    Err(Error::usage(format!(
        "run {id} goes through OpenRouter's Batch API and {}; a batch is known only where it was submitted, so nothing was sent. Resume with the run's OPENROUTER_BASE_URL and OPENROUTER_API_KEY (or start a new run)",
        differs.join(", and ")
    )))
}

/// The runs of a batch (`Some(id)` for a resume), its budget, and what its
/// runs spent before.
type Planned = (Vec<(Option<i64>, run::RunSettings)>, Option<f64>, f64);

/// A batch's token, stored with each of its runs: unique per start.
fn batch_token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{nanos:x}-{:x}", std::process::id())
}

/// Each model's in-flight limit, the judge's, and the cap across them.
fn set_limits(ctx: &run::RunContext, args: &Batch, runs: &[(Option<i64>, run::RunSettings)]) {
    for (_, s) in runs {
        ctx.client
            .limit_model(&s.model.id, s.concurrency.get(), args.adaptive);
    }
    // A panel's judges each get the limit (each is its own model).
    let judges: HashSet<&str> = runs
        .iter()
        .filter_map(|(_, s)| s.judge_model.as_deref())
        .flat_map(crate::judging::panel::judges)
        .collect();
    for judge in judges {
        let n = args.judge_concurrency.map_or_else(
            || runs.iter().map(|(_, s)| s.concurrency.get()).sum(),
            NonZeroUsize::get,
        );
        ctx.client.limit_model(judge, n, args.adaptive);
    }
    if let Some(n) = args.max_in_flight {
        ctx.client.cap_in_flight(n.get());
    }
}

fn dry_run(s: &Settings, selection: &Selection, format: DataFormat) -> Result<ExitStatus> {
    let (mut b, errors) = s.load_reporting();
    let mut selection = selection.clone();
    super::selection::make_variants(&mut b, &mut selection, s.quiet)?;
    let selectors = &selection.selectors;
    let summary =
        run::dry_run(&b, selectors, selection.include_no_context).map_err(Error::usage)?;
    let warnings = crate::content::lint::lint(&b, selectors);
    let mut o = out();
    match format {
        DataFormat::Json => {
            let mut v = serde_json::to_value(&summary)?;
            v["content_errors"] = json!(errors.iter().map(ToString::to_string).collect::<Vec<_>>());
            v["warnings"] = json!(warnings.len());
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
            if !warnings.is_empty() {
                writeln!(
                    o,
                    "content: {} warning(s): run `helmbench check` to see them",
                    warnings.len()
                )?;
            }
        }
    }
    Ok(ExitStatus::unless_content_errors(errors.len()))
}
