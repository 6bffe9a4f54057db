//! Running test cases: the dry-run that composes and validates every prompt
//! without sending anything.

use std::collections::HashSet;
use std::fmt;

use serde::Serialize;

use crate::benchmark::Benchmark;
use crate::benchmark::compose;
use crate::discovery::{self, Selector};

/// What a dry-run composed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DryRunSummary {
    pub scenarios: usize,
    pub test_cases: usize,
    /// Judge calls a real run would make per model (one per rubric per test case).
    pub judge_calls: usize,
    pub unique_prompts: usize,
    pub prompt_bytes: u64,
    /// Rough prompt tokens (bytes / 4) per model.
    pub estimated_prompt_tokens: u64,
    pub models: Vec<String>,
    pub by_evaluation: std::collections::BTreeMap<String, usize>,
    /// Components of the selected scenarios that are only frontmatter: they
    /// run and add nothing to the prompt (not an error; authors should know).
    pub empty_components: usize,
}

impl fmt::Display for DryRunSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "scenarios: {}", self.scenarios)?;
        writeln!(
            f,
            "test cases: {} ({} unique prompts)",
            self.test_cases, self.unique_prompts
        )?;
        for (ty, n) in &self.by_evaluation {
            writeln!(f, "  {ty}: {n}")?;
        }
        writeln!(f, "judge calls: {}", self.judge_calls)?;
        if self.empty_components > 0 {
            writeln!(
                f,
                "empty components: {} (only frontmatter: they add nothing to the prompt, their severity still counts)",
                self.empty_components
            )?;
        }
        writeln!(
            f,
            "prompt size: {} bytes (~{} tokens per model)",
            self.prompt_bytes, self.estimated_prompt_tokens
        )?;
        if self.models.is_empty() {
            write!(f, "models: none configured")
        } else {
            write!(f, "models: {}", self.models.join(", "))
        }
    }
}

/// Composes every selected test case's prompt and checks it, sending nothing.
pub fn dry_run(
    benchmark: &Benchmark,
    selectors: &[Selector],
    include_no_context: bool,
) -> Result<DryRunSummary, String> {
    let cases = discovery::select(benchmark, selectors, include_no_context)?;
    let mut summary = DryRunSummary {
        models: benchmark
            .models
            .as_ref()
            .map(|m| m.models.iter().map(|e| e.id.clone()).collect())
            .unwrap_or_default(),
        ..Default::default()
    };
    let mut seen_scenarios = HashSet::new();
    let mut seen_prompts = HashSet::new();
    let mut prompt = String::new();
    for case in &cases {
        compose::compose_into(case, &mut prompt);
        summary.test_cases += 1;
        summary.prompt_bytes += prompt.len() as u64;
        if seen_scenarios.insert(case.scenario.code.as_str()) {
            summary.scenarios += 1;
            summary.empty_components += case.scenario.empty_components();
        }
        seen_prompts.insert(crate::benchmark::sha256(&[prompt.as_bytes()]));
        *summary
            .by_evaluation
            .entry(case.scenario.evaluation.type_name().to_string())
            .or_default() += 1;
        if case.scenario.evaluation.is_judged() {
            summary.judge_calls += case.scenario.rubrics.len();
        }
    }
    summary.unique_prompts = seen_prompts.len();
    summary.estimated_prompt_tokens = summary.prompt_bytes / 4;
    Ok(summary)
}

// ---------------------------------------------------------------------------
// Real runs
// ---------------------------------------------------------------------------

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::benchmark::{ModelEntry, sha256_hex};
use crate::discovery::CaseIndex;
use crate::judging::checks;
use crate::judging::judge;
use crate::judging::reply;
use crate::openrouter::{ChatBody, Client, Completion, ProviderError};
use crate::store::{NewJudgement, NewResult, SeedIds, Store, request_key};

/// How results reach the database: at most this many per transaction, and
/// at least this often. A SIGKILL or crash loses the replies of the last
/// interval (paid for, and paid again on resume): at real provider rates
/// (tens to hundreds a second) 25 ms is a handful of replies, where 250 ms
/// was dozens. Larger batches cost the writer less per result (each commit
/// rewrites the same index pages), which only matters at mock rates.
const WRITE_BATCH: usize = 1000;
const WRITE_INTERVAL: Duration = Duration::from_millis(25);
/// Provider errors in a row (after retries) that stop a run: a spent key
/// limit or a model with no endpoints fails every request the same way, and
/// recording thousands of failures helps no one. The run stays resumable.
const MAX_CONSECUTIVE_PROVIDER_ERRORS: usize = 25;
/// Judge calls per criterion when the verdict cannot be read.
const JUDGE_ATTEMPTS: usize = 3;

/// Everything a run needs that does not change between runs.
pub struct RunContext {
    pub benchmark: Arc<Benchmark>,
    pub store: Store,
    pub ids: Arc<SeedIds>,
    pub client: Arc<Client>,
    pub validators: Arc<HashMap<String, jsonschema::Validator>>,
    pub quiet: bool,
}

impl RunContext {
    /// Seeds the database and compiles every scenario's schema once.
    pub async fn new(
        benchmark: Benchmark,
        store: Store,
        client: Client,
        quiet: bool,
    ) -> crate::Result<Self> {
        let ids = store.seed(&benchmark).await?;
        let mut validators = HashMap::new();
        for s in &benchmark.scenarios {
            if let Some(schema) = s.schema() {
                let v = jsonschema::validator_for(schema).map_err(|e| {
                    crate::Error::Tool(format!("{}: schema does not compile: {e}", s.code))
                })?;
                validators.insert(s.code.clone(), v);
            }
        }
        Ok(RunContext {
            benchmark: Arc::new(benchmark),
            store,
            ids: Arc::new(ids),
            client: Arc::new(client),
            validators: Arc::new(validators),
            quiet,
        })
    }
}

/// The settings a run is started with, stored with it and replayed by resume.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSettings {
    pub model: ModelEntry,
    pub judge_model: Option<String>,
    pub selectors: Vec<String>,
    pub include_no_context: bool,
    pub concurrency: usize,
    pub limit: Option<usize>,
    pub repeats: u32,
    pub no_cache: bool,
    pub max_cost: Option<f64>,
    pub tool_version: String,
    pub benchmark_hash: String,
}

/// How a run ended.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub run_id: i64,
    pub model: String,
    pub status: String,
    pub planned: usize,
    pub stored: usize,
    pub passed: usize,
    /// Stored results without a reply (retries spent): out of the score,
    /// sent again by `--resume`.
    pub provider_errors: usize,
    pub cost_usd: f64,
    pub message: Option<String>,
    /// Set when the provider refused in a way that stops everything (401).
    #[serde(skip)]
    pub fatal: Option<String>,
}

/// The planned work of a run: every selected test case times its repeats.
pub fn plan(benchmark: &Benchmark, settings: &RunSettings) -> crate::Result<Vec<(CaseIndex, u32)>> {
    let selectors = settings
        .selectors
        .iter()
        .map(|s| Selector::parse(s).map_err(crate::Error::Usage))
        .collect::<crate::Result<Vec<_>>>()?;
    let mut cases = discovery::select_indices(benchmark, &selectors, settings.include_no_context)
        .map_err(crate::Error::Usage)?;
    if let Some(limit) = settings.limit {
        cases.truncate(limit);
    }
    let repeats = settings.repeats.max(1);
    // Sized up front: collecting a flat_map would double its way there and
    // hold both copies at the peak.
    let mut work = Vec::with_capacity(cases.len() * repeats as usize);
    for c in cases {
        work.extend((0..repeats).map(|r| (c, r)));
    }
    Ok(work)
}

/// What one worker produced for one test case.
enum Outcome {
    Stored(Box<NewResult>),
    /// 401/402: the run must stop; nothing is stored for this test case.
    Fatal(ProviderError),
    /// Cancelled before an answer arrived.
    Aborted,
}

/// Shared state between the workers, the collector and the caller.
struct Shared {
    next: AtomicUsize,
    provider_errors_in_a_row: AtomicUsize,
    spend_micro: std::sync::atomic::AtomicU64,
    stop_reason: Mutex<Option<(String, bool)>>, // (message, fatal)
}

impl Shared {
    fn spend(&self) -> f64 {
        self.spend_micro.load(Ordering::Relaxed) as f64 / 1e6
    }
    fn add_spend(&self, usd: f64) {
        self.spend_micro
            .fetch_add((usd * 1e6).round().max(0.0) as u64, Ordering::Relaxed);
    }
    fn set_stop(&self, msg: String, fatal: bool) {
        let mut s = self.stop_reason.lock().unwrap_or_else(|e| e.into_inner());
        if s.is_none() {
            *s = Some((msg, fatal));
        }
    }
}

/// Runs (or resumes) one evaluation run for one model.
///
/// `stop` ends the run cleanly (no new work, in-flight work finishes);
/// `abort` additionally drops in-flight requests (Ctrl-C).
pub async fn run_batch(
    ctx: &RunContext,
    settings: &RunSettings,
    resume: Option<i64>,
    kind: &str,
    abort: CancellationToken,
) -> crate::Result<RunSummary> {
    let b = &ctx.benchmark;
    let work = plan(b, settings)?;
    let planned = work.len();
    let settings_json = serde_json::to_value(settings)?;
    let run_id = match resume {
        Some(id) => {
            // Claimed first: provider errors are cleared only by the owner.
            ctx.store.claim_run(id).await?;
            ctx.store.clear_provider_errors(id).await?;
            id
        }
        None => {
            ctx.store
                .create_run(
                    ctx.ids.benchmark_id,
                    &settings.model.id,
                    kind,
                    &settings_json,
                    planned as i64,
                )
                .await?
        }
    };
    let done = ctx.store.stored_cases(run_id).await?;
    let todo: Vec<(CaseIndex, u32)> = if done.is_empty() {
        work
    } else {
        work.into_iter()
            .filter(|(c, r)| !done.contains(&(c.resolve(b).code(), i64::from(*r))))
            .collect()
    };
    let already_done = done.len();
    drop(done);
    tracing::info!(run_id, model = %settings.model.id, planned, todo = todo.len(), "run starting");

    // The bar draws on stderr; it is for a person watching a terminal.
    let progress =
        if ctx.quiet || !std::io::stdout().is_terminal() || !std::io::stderr().is_terminal() {
            ProgressBar::hidden()
        } else {
            let pb = ProgressBar::new(planned as u64);
            pb.set_style(
                ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {pos}/{len} {msg} {per_sec} eta {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            pb.set_prefix(format!("run {run_id} {}", settings.model.id));
            pb.set_position(already_done as u64);
            pb
        };

    let shared = Arc::new(Shared {
        next: AtomicUsize::new(0),
        provider_errors_in_a_row: AtomicUsize::new(0),
        spend_micro: Default::default(),
        stop_reason: Mutex::new(None),
    });
    let stop = abort.child_token();
    let todo = Arc::new(todo);
    let cache = if settings.no_cache {
        None
    } else {
        let (replies, judgements) = ctx.store.request_keys().await?;
        Some(Arc::new(CacheFilter {
            replies: RwLock::new(replies),
            judgements: RwLock::new(judgements),
        }))
    };
    let (tx, mut rx) = mpsc::channel::<NewResult>(WRITE_BATCH * 4);
    let workers = settings.concurrency.clamp(1, 1024).min(todo.len().max(1));
    let mut handles = Vec::with_capacity(workers);
    for _ in 0..workers {
        let (todo, shared, tx, stop, abort) = (
            todo.clone(),
            shared.clone(),
            tx.clone(),
            stop.clone(),
            abort.clone(),
        );
        let worker = Worker {
            benchmark: ctx.benchmark.clone(),
            ids: ctx.ids.clone(),
            client: ctx.client.clone(),
            validators: ctx.validators.clone(),
            store: ctx.store.clone(),
            settings: settings.clone(),
            run_id,
            cache: cache.clone(),
        };
        handles.push(tokio::spawn(async move {
            loop {
                if stop.is_cancelled() {
                    break;
                }
                if let Some(max) = worker.settings.max_cost
                    && shared.spend() >= max
                {
                    shared.set_stop(
                        format!(
                            "budget reached: ${:.4} spent of --max-cost ${max}",
                            shared.spend()
                        ),
                        false,
                    );
                    stop.cancel();
                    break;
                }
                let i = shared.next.fetch_add(1, Ordering::Relaxed);
                let Some(&(case, repeat)) = todo.get(i) else {
                    break;
                };
                let outcome = tokio::select! {
                    o = worker.process(case, i64::from(repeat)) => o,
                    _ = abort.cancelled() => Outcome::Aborted,
                };
                match outcome {
                    Outcome::Stored(r) => {
                        shared.add_spend(
                            r.cost_usd + r.judgements.iter().map(|j| j.cost_usd).sum::<f64>(),
                        );
                        if r.error_kind.as_deref() == Some("provider") {
                            let n = shared.provider_errors_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
                            if n >= MAX_CONSECUTIVE_PROVIDER_ERRORS {
                                shared.set_stop(
                                    format!("{n} requests in a row failed at the provider (last: {}); stopped", r.error.as_deref().unwrap_or("?")),
                                    false,
                                );
                                stop.cancel();
                            }
                        } else {
                            shared.provider_errors_in_a_row.store(0, Ordering::Relaxed);
                        }
                        if tx.send(*r).await.is_err() {
                            break;
                        }
                    }
                    Outcome::Fatal(e) => {
                        let fatal = matches!(e, ProviderError::Unauthorized { .. });
                        shared.set_stop(e.to_string(), fatal);
                        if fatal {
                            abort.cancel();
                        } else {
                            stop.cancel();
                        }
                        break;
                    }
                    Outcome::Aborted => break,
                }
            }
        }));
    }
    drop(tx);

    // The collector: the only writer of results. A task on the runtime, not
    // the thread blocked in `block_on`, so a finished request does not have
    // to wake a parked thread; `recv_many` takes whatever has queued since.
    let collector = {
        let (store, abort, stop, cache, progress, shared) = (
            ctx.store.clone(),
            abort.clone(),
            stop.clone(),
            cache.clone(),
            progress.clone(),
            shared.clone(),
        );
        tokio::spawn(async move {
            let mut batch: Vec<NewResult> = Vec::with_capacity(WRITE_BATCH);
            let mut stored = 0usize;
            let (mut passed_so_far, mut seen) = (0usize, 0usize);
            let mut write_error: Option<crate::Error> = None;
            let mut tick = tokio::time::interval(WRITE_INTERVAL);
            let mut last_beat = tokio::time::Instant::now();
            loop {
                tokio::select! {
                    n = rx.recv_many(&mut batch, WRITE_BATCH) => {
                        if n == 0 {
                            break;
                        }
                        seen += n;
                        passed_so_far += batch[batch.len() - n..].iter().filter(|r| r.passed).count();
                        progress.inc(n as u64);
                        if !progress.is_hidden() {
                            progress.set_message(format!("pass {:.0}% ${:.4}", 100.0 * passed_so_far as f64 / seen as f64, shared.spend()));
                        }
                        if batch.len() >= WRITE_BATCH {
                            flush(&store, &mut batch, &mut stored, &mut write_error, &abort, cache.as_deref()).await;
                        }
                    },
                    _ = tick.tick() => {
                        flush(&store, &mut batch, &mut stored, &mut write_error, &abort, cache.as_deref()).await;
                        if last_beat.elapsed() >= crate::store::HEARTBEAT_INTERVAL {
                            last_beat = tokio::time::Instant::now();
                            match store.heartbeat(run_id).await {
                                Ok(true) => {}
                                // Another process judged this one gone and took
                                // the run: stop sending, or both would pay.
                                Ok(false) => {
                                    shared.set_stop(format!("another helmbench took over run {run_id}; stopped sending"), false);
                                    stop.cancel();
                                }
                                Err(e) => tracing::warn!(error = %e, "heartbeat not written"),
                            }
                        }
                    },
                }
            }
            flush(
                &store,
                &mut batch,
                &mut stored,
                &mut write_error,
                &abort,
                cache.as_deref(),
            )
            .await;
            tracing::debug!(stored, "results written");
            write_error
        })
    };
    let write_error = match collector.await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    for h in handles {
        let _ = h.await;
    }
    progress.finish_and_clear();
    if let Some(e) = write_error {
        let _ = ctx
            .store
            .finish_run(run_id, "interrupted", Some(&e.to_string()))
            .await;
        return Err(e);
    }

    let stop_reason = shared
        .stop_reason
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    // Fault injection for the crash tests: holds the run between its last
    // result write and its bookkeeping, so a test can SIGKILL it exactly there.
    if let Some(ms) = std::env::var("HELMBENCH_TEST_PAUSE_BEFORE_FINISH_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let all_done = ctx.store.count_results(run_id).await? >= planned as i64;
    let (status, message, fatal) = match (&stop_reason, abort.is_cancelled()) {
        (Some((msg, fatal)), _) => ("interrupted", Some(msg.clone()), fatal.then(|| msg.clone())),
        (None, true) => ("interrupted", Some("cancelled (Ctrl-C)".to_string()), None),
        (None, false) if all_done => ("completed", None, None),
        (None, false) => (
            "interrupted",
            Some("not every test case finished".to_string()),
            None,
        ),
    };
    ctx.store
        .finish_run(run_id, status, message.as_deref())
        .await?;
    let row = ctx.store.run(run_id).await?;
    Ok(RunSummary {
        run_id,
        model: settings.model.id.clone(),
        status: status.to_string(),
        planned,
        stored: row.test_cases as usize,
        passed: row.passed as usize,
        provider_errors: row.provider_errors as usize,
        cost_usd: row.cost_usd + row.judge_cost_usd,
        message,
        fatal,
    })
}

async fn flush(
    store: &Store,
    batch: &mut Vec<NewResult>,
    stored: &mut usize,
    error: &mut Option<crate::Error>,
    abort: &CancellationToken,
    cache: Option<&CacheFilter>,
) {
    if batch.is_empty() || error.is_some() {
        batch.clear();
        return;
    }
    match store.write_results(batch).await {
        Ok(n) => {
            *stored += n;
            if let Some(cache) = cache {
                cache.note(batch);
            }
        }
        Err(e) => {
            // A store that cannot write must stop the run, not drop results silently.
            *error = Some(e.into());
            abort.cancel();
        }
    }
    batch.clear();
}

/// Which requests may have a reusable answer in the database: the keys of
/// every stored request hash, loaded when the run starts and extended as
/// its results are written. A request whose key is absent (nearly every
/// request of a new run) needs no cache query at all.
struct CacheFilter {
    replies: RwLock<HashSet<u64>>,
    judgements: RwLock<HashSet<u64>>,
}

impl CacheFilter {
    fn may_have_reply(&self, request_hash: &str) -> bool {
        let key = request_key(request_hash);
        self.replies
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&key)
    }

    fn may_have_judgement(&self, request_hash: &str) -> bool {
        let key = request_key(request_hash);
        self.judgements
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&key)
    }

    /// Adds the request hashes of results just written.
    fn note(&self, written: &[NewResult]) {
        self.replies
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .extend(written.iter().map(|r| request_key(&r.request_hash)));
        let mut judgements = self.judgements.write().unwrap_or_else(|e| e.into_inner());
        for r in written {
            judgements.extend(
                r.judgements
                    .iter()
                    .filter_map(|j| j.request_hash.as_deref().map(request_key)),
            );
        }
    }
}

/// One worker's view of the run.
struct Worker {
    benchmark: Arc<Benchmark>,
    ids: Arc<SeedIds>,
    client: Arc<Client>,
    validators: Arc<HashMap<String, jsonschema::Validator>>,
    store: Store,
    settings: RunSettings,
    run_id: i64,
    /// None with `--no-cache`.
    cache: Option<Arc<CacheFilter>>,
}

impl Worker {
    async fn process(&self, idx: CaseIndex, repeat: i64) -> Outcome {
        let case = idx.resolve(&self.benchmark);
        let s = case.scenario;
        let prompt = compose::compose(&case);
        let prompt_hash = sha256_hex(&[prompt.as_bytes()]);
        let m = &self.settings.model;
        // The body is serialised once: hashed here, sent as is.
        let body = ChatBody {
            model: &m.id,
            prompt: &prompt,
            response_format: s.response_format.as_ref(),
            temperature: m.temperature,
            seed: m.seed,
            max_tokens: m.max_tokens,
        }
        .to_json();
        // Repeats must not reuse each other's replies.
        let request_hash = sha256_hex(&[body.as_bytes(), &repeat.to_le_bytes()]);
        let base = case.base_severity();
        let mut r = NewResult {
            run_id: self.run_id,
            test_code: case.code(),
            repeat_index: repeat,
            scenario_id: self.ids.scenarios[&s.code],
            condition_id: self.ids.conditions[&case.condition.full_code],
            user_context_id: case
                .user_context
                .map(|u| self.ids.user_contexts[&u.full_code]),
            perturbation_id: self.ids.perturbations[&case.perturbation.full_code],
            prompt_hash,
            request_hash: request_hash.clone(),
            base_severity: base,
            difficulty: case.condition.difficulty,
            attempts: 0,
            evaluation_details: json!({}),
            ..Default::default()
        };

        let cached = match &self.cache {
            Some(f) if f.may_have_reply(&request_hash) => {
                self.store.cached_reply(&request_hash).await.ok().flatten()
            }
            _ => None,
        };
        let completion = match cached {
            Some(c) => Completion {
                generation_id: c.generation_id,
                content: c.response,
                finish_reason: c.finish_reason,
                provider: None,
                prompt_tokens: 0,
                completion_tokens: 0,
                cost_usd: 0.0,
                upstream_cost_usd: None,
                attempts: 0,
                latency_ms: 0,
            },
            None => match self.client.chat_json(&m.id, body).await {
                Ok(c) => c,
                Err(e) if e.is_fatal_for_run() => return Outcome::Fatal(e),
                Err(e) => {
                    r.prompt = prompt;
                    r.passed = false;
                    r.error_kind = Some("provider".into());
                    r.error = Some(e.to_string());
                    return Outcome::Stored(Box::new(r));
                }
            },
        };
        r.cached = completion.attempts == 0;
        r.response = Some(completion.content.clone());
        r.finish_reason = completion.finish_reason.clone();
        r.generation_id = completion.generation_id.clone();
        r.prompt_tokens = completion.prompt_tokens;
        r.completion_tokens = completion.completion_tokens;
        r.cost_usd = completion.cost_usd;
        r.upstream_cost_usd = completion.upstream_cost_usd;
        r.latency_ms = Some(completion.latency_ms as i64);
        r.attempts = i64::from(completion.attempts);

        // Parse and validate a structured reply; a free-text reply is taken as is.
        let parsed = match self.validators.get(&s.code) {
            Some(v) => reply::parse_reply(
                &completion.content,
                completion.finish_reason.as_deref(),
                Some(v),
            )
            .map(Some),
            None => Ok(None),
        };
        let parsed = match parsed {
            Ok(p) => p,
            Err(e) => {
                r.passed = false;
                r.error_kind = Some("format".into());
                r.error = Some(e.0);
                r.prompt = prompt;
                return Outcome::Stored(Box::new(r));
            }
        };
        let text = reply::reply_text(&completion.content, parsed.as_ref()).to_string();
        r.parsed = parsed;
        r.quality = serde_json::to_value(crate::scoring::quality::score(&text)).ok();

        if let Some(check) = r
            .parsed
            .as_ref()
            .and_then(|p| checks::check(&case.evaluation(), p))
        {
            // The verdict is the check as written, never inverted (SPEC §4).
            r.matched = Some(check.matched);
            r.evaluation_details = check.details;
            if let Some(problem) = check.problem {
                r.passed = false;
                r.error_kind = Some("format".into());
                r.error = Some(problem);
            } else {
                r.passed = check.matched;
            }
        } else if s.evaluation.is_judged() {
            let judge_model = self.settings.judge_model.clone().unwrap_or_default();
            let mut all_passed = true;
            let mut judge_error = None;
            for rubric in &s.rubrics {
                let jreq = judge::request(&judge_model, rubric, &prompt, &text);
                let jbody = jreq.body_json();
                let jhash = sha256_hex(&[jbody.as_bytes(), &repeat.to_le_bytes()]);
                let cached = match &self.cache {
                    Some(f) if f.may_have_judgement(&jhash) => {
                        self.store.cached_judgement(&jhash).await.ok().flatten()
                    }
                    _ => None,
                };
                let mut j = NewJudgement {
                    criterion: rubric.code.clone(),
                    judge_model: judge_model.clone(),
                    request_hash: Some(jhash),
                    ..Default::default()
                };
                // An unusable verdict is asked for again, a bounded number of times.
                let mut parsed_verdict = None;
                let mut cached = cached;
                for _ in 0..JUDGE_ATTEMPTS {
                    let content = match cached.take() {
                        Some(c) => {
                            j.cached = true;
                            c
                        }
                        None => match self.client.chat_json(&jreq.model, jbody.clone()).await {
                            Ok(c) => {
                                j.cached = false;
                                j.prompt_tokens += c.prompt_tokens;
                                j.completion_tokens += c.completion_tokens;
                                j.cost_usd += c.cost_usd;
                                j.generation_id = c.generation_id;
                                c.content
                            }
                            Err(e) if e.is_fatal_for_run() => return Outcome::Fatal(e),
                            Err(e) => {
                                parsed_verdict = Some(Err(e.to_string()));
                                break;
                            }
                        },
                    };
                    let v = judge::parse(rubric, &content);
                    j.response = Some(content);
                    let usable = v.is_ok();
                    parsed_verdict = Some(v);
                    if usable {
                        break;
                    }
                }
                match parsed_verdict.unwrap_or_else(|| Err("no judge answer".into())) {
                    Ok(v) => {
                        all_passed &= v.passed;
                        j.passed = Some(v.passed);
                        j.verdict = Some(v.value);
                        j.justification = v.justification;
                    }
                    Err(e) => {
                        j.response = None; // never reuse an unusable answer
                        j.error = Some(e.clone());
                        judge_error.get_or_insert_with(|| format!("{}: {e}", rubric.code));
                        all_passed = false;
                    }
                }
                r.judgements.push(j);
            }
            r.matched = Some(all_passed);
            r.passed = all_passed && judge_error.is_none();
            r.evaluation_details = json!({"criteria": r.judgements.iter().map(|j| json!({"criterion": j.criterion, "verdict": j.verdict, "passed": j.passed, "justification": j.justification, "error": j.error})).collect::<Vec<_>>()});
            if let Some(e) = judge_error {
                r.error_kind = Some("judge".into());
                r.error = Some(e);
            }
        }
        r.prompt = prompt;
        Outcome::Stored(Box::new(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_repeats_each_test_case_in_order_and_holds_no_spare_capacity() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benchmark");
        let b = crate::content::load_strict(&root).unwrap();
        let settings = RunSettings {
            model: crate::benchmark::ModelEntry {
                id: "m".into(),
                temperature: None,
                seed: None,
                max_tokens: None,
            },
            judge_model: None,
            selectors: vec!["P1-B1-S1".into()],
            include_no_context: true,
            concurrency: 1,
            limit: Some(5),
            repeats: 3,
            no_cache: false,
            max_cost: None,
            tool_version: String::new(),
            benchmark_hash: String::new(),
        };
        let work = plan(&b, &settings).unwrap();
        let cases =
            discovery::select_indices(&b, &[Selector::parse("P1-B1-S1").unwrap()], true).unwrap();
        let expected: Vec<(CaseIndex, u32)> = cases[..5]
            .iter()
            .flat_map(|&c| (0..3).map(move |r| (c, r)))
            .collect();
        assert_eq!(work, expected);
        // A run keeps this list for its whole length: no doubling slack.
        assert_eq!(work.capacity(), work.len());
        assert!(std::mem::size_of::<(CaseIndex, u32)>() <= 24);
    }
}
