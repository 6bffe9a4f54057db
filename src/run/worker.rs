//! One worker's handling of one test case: compose, ask the cache or the
//! model, parse, check or judge, and hand the result to the writer.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use serde_json::json;

use super::cache::CacheFilter;
use super::exchange::ToJudge;
use crate::benchmark::cases::CaseIndex;
use crate::benchmark::{Benchmark, Rubric, Turn, compose, sha256_hex, sha256_hex_pieces};
use crate::domain::{
    Block, BlockKind, DiscardedCharge, ErrorKind, ModelEntry, NewJudgement, NewResult, SeedIds,
    ServedBy,
};
use crate::judging::{checks, judge, panel, reply};
use crate::openrouter::{
    Body, CallLog, ChatRequest, Client, Completion, FailureClass, Message, ProviderError, Tail,
};
use crate::run::RunSettings;
use crate::store::Store;

/// The reason of a discarded charge whose amount nobody knows.
pub(super) const UNKNOWN_CHARGE: &str = "charged an unknown amount: attempts retried after their reply was cut at the size limit or abandoned on a timeout (generation not found), or whose cost is not a usable number";

/// The reason of the charge for verdicts paid for a reply whose judging
/// was cut short.
pub(super) const VERDICTS_CUT: &str = "verdicts paid for before the judging was cut short (a refused key, a stop); the resume judges the reply again";

/// Judge calls per criterion when the verdict cannot be read.
pub(super) const JUDGE_ATTEMPTS: usize = 3;

/// A test case after the model answered: done, or its reply waits for the
/// judge (asked outside the model's slot).
pub(super) enum Asked {
    Done(Outcome),
    Judge(Box<NewResult>, String),
    /// A conversation (issue 42) whose judged replies wait for the judge.
    JudgeTurns(Box<NewResult>, Box<ToJudge>),
    /// A conversation's next turn, for the Batch API's next round (only
    /// with `Replies::Batched`).
    Later(Box<super::exchange::LaterTurn>),
}

/// What became of a reply sent to the judge.
pub(super) enum Judged {
    Done(Box<NewResult>),
    /// Judging was cut short by a 401/402 (`Some`) or by the run's stop
    /// (nothing more may be sent): the reply without verdicts, and the
    /// charges of the verdicts paid for before the cut (not kept: the
    /// resume judges the reply again).
    Cut(
        Box<NewResult>,
        Vec<DiscardedCharge>,
        Option<Arc<ProviderError>>,
    ),
}

/// A criterion whose judging was cut short: why, and the judgements
/// (verdicts or a panel's votes) already paid for.
pub(super) struct JudgeCut {
    pub(super) error: ProviderError,
    pub(super) paid: Vec<NewJudgement>,
}

/// What one worker produced for one test case.
pub(super) enum Outcome {
    Stored(Box<NewResult>),
    /// 401/402: the run must stop; nothing is stored for this test case.
    Fatal(Arc<ProviderError>),
    /// Cancelled before an answer arrived.
    Aborted,
}

impl Worker {
    /// The discarded charges a test case's requests noted in `log`, and how
    /// many of its requests failed at the provider after their retries.
    pub(super) fn charges(
        &self,
        log: &CallLog,
        case: CaseIndex,
        repeat: i64,
    ) -> (Vec<DiscardedCharge>, u32) {
        let notes = log.take();
        if notes.is_empty() {
            return (Vec::new(), 0);
        }
        let c = case.resolve(&self.benchmark);
        let failures = notes.iter().map(|(_, n)| n.failures).sum();
        let charge = |model: &str, attempts: u32, unknown: u32, cost_usd: f64, reason: &str| {
            DiscardedCharge {
                run_id: self.run_id,
                scenario_id: self.ids.scenarios.get(&c.scenario.code).copied(),
                test_code: c.code(),
                repeat_index: repeat,
                call: if model == self.settings.model.id {
                    "model"
                } else {
                    "judge"
                }
                .into(),
                attempts: i64::from(attempts),
                cost_usd,
                unknown_attempts: i64::from(unknown),
                reason: Some(reason.into()),
            }
        };
        let mut charges = Vec::new();
        for (model, n) in notes {
            if n.discarded_cost_usd > 0.0 {
                charges.push(charge(
                    &model,
                    n.discarded_attempts,
                    0,
                    n.discarded_cost_usd,
                    "charged replies that were retried or refused",
                ));
            }
            // Recorded as charges whose amount is not known (0 in every
            // total), never as nothing.
            if n.unknown_attempts > 0 {
                charges.push(charge(
                    &model,
                    n.unknown_attempts,
                    n.unknown_attempts,
                    0.0,
                    UNKNOWN_CHARGE,
                ));
            }
        }
        (charges, failures)
    }
}

/// What a test case sends: its composed prompt, the request body and the
/// body's cache key.
pub(super) struct Request {
    pub(super) prompt: String,
    pub(super) body: String,
    pub(super) request_hash: String,
}

/// The [`Tail`] of each scenario's single-turn requests in a run (whose
/// model entry and wire format are fixed), by scenario index, written at
/// the scenario's first request. Empty: none kept.
#[derive(Default)]
pub(super) struct Tails(Vec<OnceLock<Tail>>);

impl Tails {
    pub(super) fn new(scenarios: usize) -> Self {
        Tails((0..scenarios).map(|_| OnceLock::new()).collect())
    }
}

/// The request `model` is sent for test case `idx`, repeat `repeat`: the
/// one place a request hash is made (a run's workers, and the check that a
/// batch was answered before, in complete.rs, must agree to the byte).
pub(super) fn request(
    benchmark: &Benchmark,
    client: &Client,
    model: &ModelEntry,
    idx: CaseIndex,
    repeat: i64,
) -> Request {
    request_kept(benchmark, client, model, idx, repeat, &Tails::default())
}

/// [`request`], with the body's tail kept in `tails` (the same bytes).
pub(super) fn request_kept(
    benchmark: &Benchmark,
    client: &Client,
    model: &ModelEntry,
    idx: CaseIndex,
    repeat: i64,
    tails: &Tails,
) -> Request {
    let case = idx.resolve(benchmark);
    let prompt = compose::compose(&case);
    let chat = ChatRequest {
        history: &[],
        model,
        prompt: &prompt,
        response_format: case.scenario.response_format.as_ref(),
        api: client.api_of(model),
        user: client.user(),
    };
    let body = match tails.0.get(idx.scenario as usize) {
        Some(kept) => chat.body_after(kept.get_or_init(|| chat.tail())),
        None => chat.body(),
    };
    hashed(body, prompt, repeat, "")
}

/// The request for `prompt` after `history` (the earlier messages of a
/// conversation, empty for message 1): hashed with the whole history, so a
/// turn's cached reply answers only the same conversation so far, and with
/// `salt` (a persona's code: its conversations are samples of their own).
pub(super) fn request_with(
    client: &Client,
    model: &ModelEntry,
    response_format: Option<&serde_json::Value>,
    history: &[Message<'_>],
    prompt: String,
    repeat: i64,
    salt: &str,
) -> Request {
    let body = ChatRequest {
        history,
        model,
        prompt: &prompt,
        response_format,
        api: client.api_of(model),
        user: client.user(),
    }
    .body();
    hashed(body, prompt, repeat, salt)
}

/// The request of `body`, hashed with `repeat` and `salt`.
fn hashed(body: Body, prompt: String, repeat: i64, salt: &str) -> Request {
    // Repeats must not reuse each other's replies, nor the conversations
    // of different personas (`salt`: empty leaves every other hash as it
    // always was).
    let repeat = repeat.to_le_bytes();
    let salted: [&[u8]; 2] = [&repeat, salt.as_bytes()];
    let tail = if salt.is_empty() {
        &salted[..1]
    } else {
        &salted[..]
    };
    let request_hash = sha256_hex_pieces(&[&body.key_parts(), tail]);
    Request {
        prompt,
        body: body.wire,
        request_hash,
    }
}

/// A test case ready to be asked: its result skeleton, composed prompt
/// and request body.
pub(super) struct Prepared {
    pub(super) r: Box<NewResult>,
    pub(super) prompt: String,
    pub(super) body: String,
}

/// The result of a request that ended in `e` (not a stop): blocked or
/// refused with what the provider said, else a provider error.
pub(super) fn failed(mut r: Box<NewResult>, prompt: String, e: &ProviderError) -> Box<NewResult> {
    r.prompt = prompt;
    r.passed = false;
    // The one place that classes a failure decides the kind (a block, a
    // refusal, or a provider error).
    r.error_kind = Some(match e.class() {
        FailureClass::Answered(kind) => kind,
        _ => ErrorKind::Provider,
    });
    if let ProviderError::Blocked { block, .. } = e {
        r.error = Some(block.message.clone());
        r.block = Some((**block).clone());
    } else {
        r.error = Some(e.to_string());
        (r.error_type, r.provider_code) = (e.meta().error_type, e.meta().provider_code);
    }
    r
}

/// A judged result's verdict from its judgements, one per rubric in the
/// scenario's order: passed when every criterion passed and none failed.
pub(super) fn conclude(r: &mut NewResult) {
    let mut all_passed = true;
    let mut judge_error = None;
    for j in &r.judgements {
        all_passed &= j.passed == Some(true);
        if let Some(e) = &j.error {
            judge_error.get_or_insert_with(|| format!("{}: {e}", j.criterion));
        }
    }
    r.matched = Some(all_passed);
    r.passed = all_passed && judge_error.is_none();
    r.evaluation_details = json!({"criteria": r.judgements.iter().map(|j| json!({"criterion": j.criterion, "verdict": j.verdict, "passed": j.passed, "justification": j.justification, "error": j.error})).collect::<Vec<_>>()});
    if let Some(e) = judge_error {
        r.error_kind = Some(ErrorKind::Judge);
        r.error = Some(e);
    }
}

/// One worker's view of the run.
pub(super) struct Worker {
    pub(super) benchmark: Arc<Benchmark>,
    pub(super) ids: Arc<SeedIds>,
    pub(super) client: Arc<Client>,
    pub(super) validators: Arc<HashMap<String, jsonschema::Validator>>,
    pub(super) store: Store,
    pub(super) settings: RunSettings,
    pub(super) run_id: i64,
    /// None with `--no-cache`.
    pub(super) cache: Option<Arc<CacheFilter>>,
    /// The run's request tails, shared by its lanes.
    pub(super) tails: Arc<Tails>,
}

impl Worker {
    /// The entry `judge` is asked with: the one the run recorded when it
    /// began (a resume judges as the run began, so every verdict of a run
    /// comes from the entries it records), else, for runs recorded before
    /// judge entries were, the current models.yml's.
    pub(super) fn judge_entry(&self, judge: &str) -> ModelEntry {
        if let Some(e) = self
            .settings
            .judge_entries
            .iter()
            .flatten()
            .find(|e| e.id == judge)
        {
            return e.clone();
        }
        let entries = self
            .benchmark
            .models
            .as_ref()
            .map_or(&[][..], |m| &m.models[..]);
        judge::settings(judge, entries)
    }

    /// The model's part of a test case: compose, ask the cache or the
    /// model, parse, and check; a judged reply comes back for
    /// [`Worker::judge_all`].
    ///
    /// A conversation (issue 42) goes through [`Worker::converse`], turn by
    /// turn; `replaces`: the run stored it before with a judge error.
    pub(super) async fn ask(&self, idx: CaseIndex, repeat: i64, replaces: bool) -> Asked {
        if self.is_conversation(idx) {
            // Boxed: a conversation's state is large, and inline it would
            // make every single-turn request's future as large, moved
            // (copied) as the lane sets it up (perf: memmove 4 % of a run).
            return Box::pin(self.converse(idx, repeat, replaces, super::exchange::Replies::Now))
                .await;
        }
        let Prepared {
            mut r,
            prompt,
            body,
        } = self.prepare(idx, repeat);
        let m = &self.settings.model;
        let api = self.client.api_of(m);
        let completion = match self.cached(&r.request_hash).await {
            Some(c) => c,
            None => match self.client.chat_json(&m.id, body).await {
                Ok(mut c) => {
                    crate::openrouter::price_reply(&mut c, m, api);
                    c
                }
                Err(e) => {
                    return Asked::Done(match e.class() {
                        _ if e.is_fatal_for_run() => Outcome::Fatal(Arc::new(e)),
                        // The budget or a stop refused it: no result, resumable.
                        FailureClass::NotSent => Outcome::Aborted,
                        _ => Outcome::Stored(failed(r, prompt, &e)),
                    });
                }
            },
        };
        r.prompt = prompt;
        self.answer(idx, r, completion)
    }

    /// A test case's result skeleton, its composed prompt and the request
    /// body (serialised once: hashed here, sent as is, alone or in a batch).
    pub(super) fn prepare(&self, idx: CaseIndex, repeat: i64) -> Prepared {
        self.skeleton(
            idx,
            repeat,
            request_kept(
                &self.benchmark,
                &self.client,
                &self.settings.model,
                idx,
                repeat,
                &self.tails,
            ),
        )
    }

    /// The result skeleton of test case `idx` for the request `req`.
    pub(super) fn skeleton(&self, idx: CaseIndex, repeat: i64, req: Request) -> Prepared {
        let case = idx.resolve(&self.benchmark);
        let s = case.scenario;
        let Request {
            prompt,
            body,
            request_hash,
        } = req;
        let prompt_hash = sha256_hex(&[prompt.as_bytes()]);
        let base = case.base_severity();
        let r = NewResult {
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
            request_hash,
            base_severity: base,
            difficulty: case.condition.difficulty,
            attempts: 0,
            evaluation_details: json!({}),
            ..Default::default()
        };
        Prepared {
            r: Box::new(r),
            prompt,
            body,
        }
    }

    /// A reply stored for the identical request, as a completion that cost
    /// nothing now; None with `--no-cache` or when there is none.
    pub(super) async fn cached(&self, request_hash: &str) -> Option<Completion> {
        let c = match &self.cache {
            Some(f) if f.may_have_reply(request_hash) => {
                self.store.cached_reply(request_hash).await.ok().flatten()
            }
            _ => None,
        }?;
        Some(from_cache(c))
    }
}

/// A stored reply as a completion that cost nothing now.
pub(super) fn from_cache(c: crate::domain::CachedReply) -> Completion {
    Completion {
        generation_id: c.generation_id,
        content: c.response,
        finish_reason: c.finish_reason,
        provider: c.provider,
        served_model: c.served_model,
        prompt_tokens: 0,
        completion_tokens: 0,
        reasoning_tokens: 0,
        cached_prompt_tokens: 0,
        cost_usd: 0.0,
        reported_cost_usd: None,
        upstream_cost_usd: None,
        attempts: 0,
        latency_ms: 0,
        byok_cost_usd: 0.0,
        empty_because: None,
    }
}

impl Worker {
    /// The rest of a test case once its reply is in (sent alone, in a
    /// batch, or from the cache): a content filter's stop, the parse and
    /// the check; a judged reply comes back for the judge. `r.prompt`
    /// holds the composed prompt.
    pub(super) fn answer(
        &self,
        idx: CaseIndex,
        r: Box<NewResult>,
        completion: Completion,
    ) -> Asked {
        self.answer_as(idx, r, completion, None, true)
    }

    /// [`Worker::answer`] for one reply of a conversation: checked with
    /// `turn`'s evaluation overrides (None: message 1's), and with
    /// `judged` false only kept (parsed when it can be, never failed).
    pub(super) fn answer_as(
        &self,
        idx: CaseIndex,
        mut r: Box<NewResult>,
        completion: Completion,
        turn: Option<&Turn>,
        judged: bool,
    ) -> Asked {
        let case = idx.resolve(&self.benchmark);
        let s = case.scenario;
        let prompt = std::mem::take(&mut r.prompt);
        r.cached = completion.attempts == 0;
        r.response = Some(completion.content.clone());
        r.finish_reason = completion.finish_reason.clone();
        r.generation_id = completion.generation_id.clone();
        r.prompt_tokens = completion.prompt_tokens;
        r.completion_tokens = completion.completion_tokens;
        r.cost_usd = completion.cost_usd;
        r.upstream_cost_usd = completion.upstream_cost_usd;
        r.byok_cost_usd = completion.byok_cost_usd;
        r.served = ServedBy {
            served_model: completion.served_model.clone(),
            provider: completion.provider.clone(),
            reasoning_tokens: completion.reasoning_tokens,
            cached_prompt_tokens: completion.cached_prompt_tokens,
        };
        r.latency_ms = Some(completion.latency_ms as i64);
        r.attempts = i64::from(completion.attempts);
        // The provider's content filter stopped the reply: blocked, with
        // whatever was written before it and what it cost.
        if completion.finish_reason.as_deref() == Some("content_filter") {
            r.passed = false;
            let message =
                "the provider's content filter stopped the reply (finish_reason content_filter)";
            r.error = Some(message.into());
            let block = Block {
                kind: BlockKind::ContentFilter,
                message: message.into(),
                reasons: Vec::new(),
                flagged_input: None,
                provider: completion.provider.clone(),
                model_slug: completion.served_model.clone(),
            };
            r.error_kind = Some(block.error_kind());
            r.block = Some(block);
            r.prompt = prompt;
            return Asked::Done(Outcome::Stored(r));
        }

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
        if !judged {
            // A rapport turn: its reply goes into the history as sent.
            r.parsed = parsed.ok().flatten();
            r.passed = true;
            r.prompt = prompt;
            return Asked::Done(Outcome::Stored(r));
        }
        let parsed = match parsed {
            Ok(p) => p,
            Err(e) => {
                r.passed = false;
                r.error_kind = Some(ErrorKind::Format);
                r.error = Some(e.0);
                r.prompt = prompt;
                return Asked::Done(Outcome::Stored(r));
            }
        };
        let text = reply::reply_text(&completion.content, parsed.as_ref()).to_string();
        r.parsed = parsed;
        r.quality = Some(crate::scoring::quality::score(&text));

        let evaluation = case.evaluation_with(turn.and_then(|t| t.component.overrides.as_ref()));
        if let Some(check) = r
            .parsed
            .as_ref()
            .and_then(|p| checks::check(&evaluation, p))
        {
            // The verdict is the check as written, never inverted (SPEC §4).
            r.matched = Some(check.matched);
            r.evaluation_details = check.details;
            if let Some(problem) = check.problem {
                r.passed = false;
                r.error_kind = Some(ErrorKind::Format);
                r.error = Some(problem);
            } else {
                r.passed = check.matched;
            }
        } else if s.evaluation.is_judged() {
            r.prompt = prompt;
            return Asked::Judge(r, text);
        }
        r.prompt = prompt;
        Asked::Done(Outcome::Stored(r))
    }

    /// The judge's part of a test case: every criterion of its scenario.
    pub(super) async fn judge_all(
        &self,
        idx: CaseIndex,
        mut r: Box<NewResult>,
        text: String,
    ) -> Judged {
        // A `names` or `pronouns` variant's rubrics name the person as
        // the model was told of them.
        let rubrics = idx.resolve(&self.benchmark).rubrics();
        let judge_model = self.settings.judge_model.clone().unwrap_or_default();
        let (prompt, repeat) = (std::mem::take(&mut r.prompt), r.repeat_index);
        for rubric in rubrics.iter() {
            let ask = judge::request(rubric, &prompt, &text);
            match self.judge_rubric(&judge_model, rubric, &ask, repeat).await {
                Ok(j) => r.judgements.push(j),
                Err(cut) => {
                    let mut paid = std::mem::take(&mut r.judgements);
                    paid.extend(cut.paid);
                    let charges = r.paid_as_charges(false, &paid, VERDICTS_CUT);
                    r.prompt = prompt;
                    let fatal = cut.error.is_fatal_for_run().then(|| Arc::new(cut.error));
                    return Judged::Cut(r, charges, fatal);
                }
            }
        }
        conclude(&mut r);
        r.prompt = prompt;
        Judged::Done(r)
    }

    /// One rubric's judgement by the run's judge, or by each judge of a
    /// panel in the order listed, combined (issue 20).
    pub(super) async fn judge_rubric(
        &self,
        judge_model: &str,
        rubric: &Rubric,
        ask: &judge::JudgeAsk,
        repeat: i64,
    ) -> Result<NewJudgement, JudgeCut> {
        let judges = panel::judges(judge_model);
        if judges.len() < 2 {
            return self.judge_criterion(judge_model, rubric, ask, repeat).await;
        }
        let mut votes = Vec::with_capacity(judges.len());
        for judge in judges {
            match self.judge_criterion(judge, rubric, ask, repeat).await {
                Ok(v) => votes.push(v),
                Err(mut cut) => {
                    votes.append(&mut cut.paid);
                    cut.paid = votes;
                    return Err(cut);
                }
            }
        }
        Ok(panel::combine(
            &rubric.code,
            judge_model,
            votes,
            self.settings.judge_tie,
        ))
    }

    /// One rubric's judgement of a reply: from the cache, or asked of the
    /// judge (again, a bounded number of times, while its verdict cannot be
    /// read). `Err` for a provider error that stops the run, or a stop
    /// that sends nothing more, with what was paid for before it.
    async fn judge_criterion(
        &self,
        judge_model: &str,
        rubric: &Rubric,
        ask: &judge::JudgeAsk,
        repeat: i64,
    ) -> Result<NewJudgement, JudgeCut> {
        let settings = self.judge_entry(judge_model);
        let api = self.client.api_of(&settings);
        let body_with = |settings: &crate::domain::ModelEntry| {
            ChatRequest {
                history: &[],
                model: settings,
                prompt: &ask.prompt,
                response_format: Some(&ask.response_format),
                api,
                user: self.client.user(),
            }
            .body()
        };
        let jbody = body_with(&settings);
        let jhash = sha256_hex_pieces(&[&jbody.key_parts(), &[&repeat.to_le_bytes()]]);
        let jbody = jbody.wire;
        let cached = match &self.cache {
            Some(f) if f.may_have_judgement(&jhash) => {
                self.store.cached_judgement(&jhash).await.ok().flatten()
            }
            _ => None,
        };
        let mut j = NewJudgement {
            criterion: rubric.code.clone(),
            judge_model: judge_model.to_string(),
            request_hash: Some(jhash),
            ..Default::default()
        };
        // An unusable verdict is asked for again, a bounded number of times.
        let mut parsed_verdict = None;
        let mut cached = cached;
        let mut body = jbody;
        let mut enlarged: Option<u32> = None;
        for _ in 0..JUDGE_ATTEMPTS {
            let content = match cached.take() {
                Some(c) => {
                    j.cached = true;
                    c
                }
                None => match self
                    .client
                    .chat_json_judge(judge_model, body.clone())
                    .await
                    .map(|mut c| {
                        crate::openrouter::price_reply(&mut c, &settings, api);
                        c
                    }) {
                    Ok(c) if c.empty_because.is_some() => {
                        // Reasoning (or tool calls) with no verdict: paid for,
                        // counted, and asked once more with room to answer.
                        j.prompt_tokens += c.prompt_tokens;
                        j.completion_tokens += c.completion_tokens;
                        j.cost_usd += c.cost_usd;
                        j.byok_cost_usd += c.byok_cost_usd;
                        j.served.reasoning_tokens += c.reasoning_tokens;
                        let why = c.empty_because.unwrap_or_default();
                        let had = settings.max_tokens.unwrap_or(judge::MAX_TOKENS);
                        match enlarged {
                            None => {
                                let more = had.saturating_mul(2).min(judge::MAX_TOKENS_CAP);
                                enlarged = Some(more);
                                let larger = crate::domain::ModelEntry {
                                    max_tokens: Some(more),
                                    ..settings.clone()
                                };
                                body = body_with(&larger).wire;
                                continue;
                            }
                            Some(more) => {
                                parsed_verdict = Some(Err(format!(
                                    "the judge answered with {why} and no verdict, with max_tokens {had} and again with {more}: raise its max_tokens (or lower its reasoning effort) in models.yml"
                                )));
                                break;
                            }
                        }
                    }
                    Ok(c) => {
                        j.cached = false;
                        j.prompt_tokens += c.prompt_tokens;
                        j.completion_tokens += c.completion_tokens;
                        j.cost_usd += c.cost_usd;
                        j.byok_cost_usd += c.byok_cost_usd;
                        j.served.reasoning_tokens += c.reasoning_tokens;
                        j.served.cached_prompt_tokens += c.cached_prompt_tokens;
                        (j.served.served_model, j.served.provider) = (c.served_model, c.provider);
                        j.generation_id = c.generation_id;
                        c.content
                    }
                    Err(e) if e.is_fatal_for_run() || e.class() == FailureClass::NotSent => {
                        // Paid for: a reply cut short of a verdict earlier.
                        let paid = j.cost_usd != 0.0 || j.prompt_tokens > 0;
                        return Err(JudgeCut {
                            error: e,
                            paid: if paid { vec![j] } else { Vec::new() },
                        });
                    }
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
                j.passed = Some(v.passed);
                j.verdict = Some(v.value);
                j.justification = v.justification;
            }
            Err(e) => {
                j.response = None; // never reuse an unusable answer
                j.passed = None;
                j.error = Some(e);
            }
        }
        Ok(j)
    }
}
