//! What `run-batch --batch-api` does with a batch's results (issue 33):
//! each model reply is checked as it is read, exactly as a synchronous
//! reply is (`Worker::answer`), and written; a reply for the judge waits,
//! with its judge requests queued for the judge's own batches, until every
//! verdict is in. Items that failed (an item error, a batch that expired)
//! go back to pending, a bounded number of times; a block is the answer.
//! Results go through the one write path (`Store::write_results`), so the
//! run's totals stay what a recount says.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::converse::{conclude_judged, turn_asks};
use super::exchange::{Replies, ToJudge};
use super::progress::ModelProgress;
use super::settings::BatchShared;
use super::worker::{Asked, Outcome, Worker, conclude, failed};
use crate::benchmark::cases::CaseIndex;
use crate::benchmark::sha256_hex_pieces;
use crate::domain::{DiscardedCharge, ItemOutcome, NewJudgement, NewResult, ServedBy};
use crate::judging::{judge, panel};
use crate::openrouter::{ChatRequest, Completion, ItemReply, ProviderError, ResultItem};
use crate::store::Store;

/// A test case: its code and repeat.
pub(super) type CaseKey = (String, i64);

/// One judge request: a criterion of a case (a rubric's code; `R1@T3`
/// for a conversation's later turn), for one judge.
pub(super) type JudgeKey = (CaseKey, String, String);

/// What a request of a batch asks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum ItemRef {
    Model(CaseKey),
    /// One turn (its exchange's index) of a conversation (issue 42): a
    /// round sends the next turn of every conversation still going.
    Turn(CaseKey, usize),
    Judge(JudgeKey),
}

/// A judge request waiting to go out, or out: its body, schema and what
/// earlier attempts of it cost.
pub(super) struct JudgeReq {
    pub(super) key: JudgeKey,
    pub(super) body: String,
    pub(super) schema_key: String,
    pub(super) tries: u32,
    /// The scenario's rubric that reads the verdict.
    rubric: usize,
    pub(super) j: NewJudgement,
    /// What the judge is asked, kept to ask again with a larger
    /// `max_tokens` after a reasoning-only answer (as synchronously).
    ask: judge::JudgeAsk,
    /// The `max_tokens` it was asked again with, once it was.
    enlarged: Option<u32>,
}

/// A paid reply waiting for its verdicts.
struct Awaiting {
    r: Box<NewResult>,
    /// A conversation's exchanges (its verdict is made of them).
    turns: Option<Box<ToJudge>>,
    /// Its criteria in order, each with its rubric.
    criteria: Vec<(String, usize)>,
    needed: usize,
    got: HashMap<(String, String), NewJudgement>,
    /// The model batch item this reply came from, recorded with the result.
    model_item: Option<(i64, ItemOutcome)>,
    /// Judge batches that answered for it: collected once it is written.
    batches: Vec<i64>,
}

/// A result ready to write, with what its batch items became.
struct Ready {
    r: NewResult,
    items: Vec<(i64, ItemOutcome)>,
}

/// The results side of a `--batch-api` run.
pub(super) struct Collect {
    pub(super) worker: Worker,
    pub(super) writer: Store,
    pub(super) batch: Arc<BatchShared>,
    pub(super) progress: Arc<ModelProgress>,
    /// Every planned test case.
    pub(super) cases: HashMap<CaseKey, CaseIndex>,
    /// Test cases stored with a judge error before (a resume judges them again).
    pub(super) redo: HashSet<CaseKey>,
    /// Model requests to submit.
    pub(super) pending: Vec<CaseKey>,
    /// Judge requests to submit.
    pub(super) judge_pending: Vec<JudgeReq>,
    /// Judge requests a batch holds.
    pub(super) judge_out: HashMap<JudgeKey, JudgeReq>,
    /// Judge requests a live batch recorded before this process holds.
    pub(super) held_judge: HashSet<JudgeKey>,
    /// Test cases already stored.
    pub(super) stored: HashSet<CaseKey>,
    awaiting: HashMap<CaseKey, Awaiting>,
    /// Judge results read before their case's reply (a resume).
    early: HashMap<JudgeKey, (i64, ResultItem)>,
    tries: HashMap<CaseKey, u32>,
    /// What the stored turns of conversations still going cost: counted
    /// against the budget as each turn is stored, so not again when the
    /// conversation's result (which sums its turns) is written.
    turn_spent: HashMap<CaseKey, f64>,
    pub(super) max_rounds: u32,
    ready: Vec<Ready>,
    loose: Vec<DiscardedCharge>,
    loose_items: Vec<(i64, ItemOutcome)>,
    /// Per batch: its items not yet written, and whether it is read.
    outstanding: HashMap<i64, usize>,
    read_done: HashSet<i64>,
    /// What the run spent, earlier processes included.
    pub(super) spent: f64,
    /// Batches of uncertain submission (requests, estimate): held, not
    /// sent again (batch_api.rs).
    pub(super) uncertain: Vec<(i64, f64)>,
}

impl Collect {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        worker: Worker,
        writer: Store,
        batch: Arc<BatchShared>,
        progress: Arc<ModelProgress>,
        cases: HashMap<CaseKey, CaseIndex>,
        redo: HashSet<CaseKey>,
        stored: HashSet<CaseKey>,
        max_rounds: u32,
        spent: f64,
    ) -> Self {
        Collect {
            worker,
            writer,
            batch,
            progress,
            cases,
            redo,
            pending: Vec::new(),
            judge_pending: Vec::new(),
            judge_out: HashMap::new(),
            held_judge: HashSet::new(),
            stored,
            awaiting: HashMap::new(),
            early: HashMap::new(),
            tries: HashMap::new(),
            turn_spent: HashMap::new(),
            max_rounds,
            ready: Vec::new(),
            loose: Vec::new(),
            loose_items: Vec::new(),
            outstanding: HashMap::new(),
            read_done: HashSet::new(),
            spent,
            uncertain: Vec::new(),
        }
    }

    /// Results ready to be written.
    pub(super) fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// How many results wait for a judge.
    pub(super) fn awaiting_judge(&self) -> usize {
        self.awaiting.len()
    }

    /// The custom id of a request (unique within its batch).
    pub(super) fn custom_id(item: &ItemRef) -> String {
        match item {
            ItemRef::Model((code, rep)) => format!("{code}~{rep}"),
            ItemRef::Turn((code, rep), turn) => format!("{code}~{rep}~t{turn}"),
            ItemRef::Judge(((code, rep), criterion, judge)) => {
                format!("{code}~{rep}~{criterion}~{judge}")
            }
        }
    }

    /// What a recorded model item of test case `key` asked: the case, or
    /// a conversation's turn (named by its custom id's `~tK`).
    pub(super) fn model_ref(&self, key: CaseKey, custom_id: &str) -> ItemRef {
        let turn = custom_id
            .rsplit_once("~t")
            .and_then(|(_, k)| k.parse::<usize>().ok())
            .filter(|_| self.is_conversation(&key));
        match turn {
            Some(k) => ItemRef::Turn(key, k),
            None => ItemRef::Model(key),
        }
    }

    fn is_conversation(&self, key: &CaseKey) -> bool {
        self.cases
            .get(key)
            .is_some_and(|&idx| self.worker.is_conversation(idx))
    }

    /// A test case's request to batch (what it asks, and its body), or its
    /// answer from the cache (handled at once, never batched). For a
    /// conversation: its next turn that neither a stored turn nor the cache
    /// answers, or, when none is left, the conversation itself.
    pub(super) async fn prepare_or_cached(&mut self, key: &CaseKey) -> Option<(ItemRef, String)> {
        let idx = self.cases[key];
        if self.worker.is_conversation(idx) {
            let replaces = self.redo.contains(key);
            let asked = self
                .worker
                .converse(idx, key.1, replaces, Replies::Batched(None))
                .await;
            if let Asked::Later(next) = asked {
                return Some((ItemRef::Turn(key.clone(), next.turn), next.body));
            }
            self.answered(key, asked, None);
            return None;
        }
        let p = self.worker.prepare(idx, key.1);
        match self.worker.cached(&p.r.request_hash).await {
            Some(c) => {
                let mut r = p.r;
                r.prompt = p.prompt;
                let asked = self.worker.answer(idx, r, c);
                self.answered(key, asked, None);
                None
            }
            None => Some((ItemRef::Model(key.clone()), p.body)),
        }
    }

    /// Notes that `batch` holds `n` requests whose results are not written.
    pub(super) fn expect(&mut self, batch: i64, n: usize) {
        *self.outstanding.entry(batch).or_default() += n;
    }

    /// A batch that will answer nothing (ended, refused, abandoned): its
    /// requests go out again.
    pub(super) async fn requeue(&mut self, items: impl IntoIterator<Item = ItemRef>, why: &str) {
        for item in items {
            match item {
                ItemRef::Model(key) => self.again_model(key, None, why, None).await,
                ItemRef::Turn(key, turn) => self.again_model(key, Some(turn), why, None).await,
                ItemRef::Judge(key) => {
                    if let Some(req) = self.judge_out.remove(&key) {
                        self.again_judge(req, why, 0.0);
                    }
                }
            }
        }
    }

    /// One result item of batch `batch`, read as it arrives.
    pub(super) async fn item(&mut self, batch: i64, what: &ItemRef, item: ResultItem) {
        match what {
            ItemRef::Model(key) => self.model_item(batch, key, None, item).await,
            ItemRef::Turn(key, turn) => self.model_item(batch, key, Some(*turn), item).await,
            ItemRef::Judge(key) => match self.judge_out.remove(key) {
                Some(req) => self.judge_item(batch, req, item),
                // Its case is written already (a resume reads the batch again).
                None if self.stored.contains(&key.0) && !self.redo.contains(&key.0) => {
                    self.settle_outstanding(batch);
                }
                // Its case's reply is not read yet (a resume): kept until it is.
                None => {
                    self.early.insert(key.clone(), (batch, item));
                }
            },
        }
    }

    /// Every item of `batch` is read: once its results are all written,
    /// it is marked collected.
    pub(super) fn batch_read(&mut self, batch: i64) {
        self.read_done.insert(batch);
    }

    /// A model reply: a test case's, or a conversation's `turn`.
    async fn model_item(
        &mut self,
        batch: i64,
        key: &CaseKey,
        turn: Option<usize>,
        mut item: ResultItem,
    ) {
        // A reply with reasoning and no content is what a synchronous
        // request retries: it goes out again.
        if let ItemReply::Answered(c) = &item.reply
            && let Some(why) = &c.empty_because
        {
            item.reply = ItemReply::Again(format!("empty content ({why})"));
        }
        let o = ItemOutcome {
            custom_id: item.custom_id.clone(),
            outcome: match item.reply {
                ItemReply::Answered(_) => "answered",
                ItemReply::Final(_) => "blocked",
                ItemReply::Again(_) => "failed",
            },
            cost_usd: item.cost_usd,
            apportioned: item.apportioned,
        };
        // A resume reads a completed batch again: what is stored stays.
        let Some(&idx) = self.cases.get(key) else {
            return;
        };
        if self.stored.contains(key) && !self.redo.contains(key) || self.awaiting.contains_key(key)
        {
            self.loose_items.push((batch, o));
            self.settle_outstanding(batch);
            return;
        }
        if let Some(turn) = turn {
            return self.turn_item(batch, key, turn, item, o).await;
        }
        match item.reply {
            ItemReply::Answered(c) => {
                let p = self.worker.prepare(idx, key.1);
                let mut r = p.r;
                r.prompt = p.prompt;
                let asked = self.worker.answer(idx, r, c);
                self.answered(key, asked, Some((batch, o)));
            }
            ItemReply::Final(e) => {
                let p = self.worker.prepare(idx, key.1);
                let mut r = failed(p.r, p.prompt, &e);
                r.cost_usd = item.cost_usd.unwrap_or(f64::NAN);
                r.attempts = 1;
                self.push(r, vec![(batch, o)]);
            }
            ItemReply::Again(why) => {
                self.loose_items.push((batch, o));
                self.settle_outstanding(batch);
                self.again_model(key.clone(), None, &why, item.cost_usd)
                    .await;
            }
        }
    }

    /// A conversation's turn answered in a batch: the conversation goes on
    /// from it (the turn is stored before anything else is asked), to its
    /// next turn in the next round, or to its verdict.
    async fn turn_item(
        &mut self,
        batch: i64,
        key: &CaseKey,
        turn: usize,
        item: ResultItem,
        o: ItemOutcome,
    ) {
        self.loose_items.push((batch, o));
        self.settle_outstanding(batch);
        let answer: Result<Completion, ProviderError> = match item.reply {
            ItemReply::Answered(c) => Ok(c),
            ItemReply::Final(e) => Err(e),
            ItemReply::Again(why) => {
                return self
                    .again_model(key.clone(), Some(turn), &why, item.cost_usd)
                    .await;
            }
        };
        let paid = match &answer {
            Ok(c) => crate::domain::result::billed(c.cost_usd, c.byok_cost_usd),
            Err(_) => 0.0,
        };
        let ready_before = self.ready.len();
        self.converse_on(key, Some(Box::new((turn, answer)))).await;
        // A stored turn's cost counts now, unless the conversation ended
        // with it and its result (which sums its turns) is ready to write.
        if paid != 0.0 && self.ready.len() == ready_before {
            *self.turn_spent.entry(key.clone()).or_default() += paid;
            self.spent += paid;
            self.batch.count_batch_spend(paid);
        }
    }

    /// Goes on with conversation `key` (with a round's answer for one of
    /// its turns): its next turn waits for the next round, or it is done.
    async fn converse_on(
        &mut self,
        key: &CaseKey,
        answer: Option<Box<(usize, Result<Completion, ProviderError>)>>,
    ) {
        let idx = self.cases[key];
        let replaces = self.redo.contains(key);
        let asked = self
            .worker
            .converse(idx, key.1, replaces, Replies::Batched(answer))
            .await;
        self.answered(key, asked, None);
    }

    /// A model request that did not answer: a charge if it cost anything,
    /// then out again, or stored as a provider error past the rounds (a
    /// conversation's result then holds the turns before it).
    async fn again_model(
        &mut self,
        key: CaseKey,
        turn: Option<usize>,
        why: &str,
        cost: Option<f64>,
    ) {
        let Some(&idx) = self.cases.get(&key) else {
            return;
        };
        if let Some(c) = cost.filter(|c| *c != 0.0) {
            self.loose.push(self.charge(idx, &key, "model", c));
        }
        let n = self.tries.entry(key.clone()).or_default();
        *n += 1;
        if *n < self.max_rounds {
            self.pending.push(key);
            return;
        }
        let e = crate::openrouter::ProviderError::Exhausted {
            attempts: *n,
            last: format!("batch API: {why}"),
            meta: Default::default(),
        };
        if let Some(turn) = turn {
            return self.converse_on(&key, Some(Box::new((turn, Err(e))))).await;
        }
        let p = self.worker.prepare(idx, key.1);
        let r = failed(p.r, p.prompt, &e);
        self.push(r, Vec::new());
    }

    fn charge(&self, idx: CaseIndex, key: &CaseKey, call: &str, usd: f64) -> DiscardedCharge {
        let c = idx.resolve(&self.worker.benchmark);
        DiscardedCharge {
            run_id: self.worker.run_id,
            scenario_id: self.worker.ids.scenarios.get(&c.scenario.code).copied(),
            test_code: key.0.clone(),
            repeat_index: key.1,
            call: call.into(),
            attempts: 1,
            cost_usd: if usd.is_finite() { usd } else { 0.0 },
            unknown_attempts: i64::from(!usd.is_finite()),
            reason: Some(if usd.is_finite() {
                "batch API: a request that failed in its batch and went out again".into()
            } else {
                super::worker::UNKNOWN_CHARGE.into()
            }),
        }
    }

    /// A model reply checked: stored, or waiting for the judge.
    fn answered(&mut self, key: &CaseKey, asked: Asked, item: Option<(i64, ItemOutcome)>) {
        match asked {
            Asked::Done(Outcome::Stored(r)) => self.push(r, item.into_iter().collect()),
            Asked::Done(_) => {}
            Asked::Judge(r, text) => self.queue_judges(key, r, text, item),
            Asked::JudgeTurns(r, tj) => self.queue_turn_judges(key, r, tj),
            // Its next turn goes out in the next round.
            Asked::Later(_) => self.pending.push(key.clone()),
        }
    }

    /// Queues every judge request of a conversation's judged replies.
    fn queue_turn_judges(&mut self, key: &CaseKey, r: Box<NewResult>, tj: Box<ToJudge>) {
        let idx = self.cases[key];
        let rubrics = idx.resolve(&self.worker.benchmark).rubrics();
        let asks: Vec<(String, usize, judge::JudgeAsk)> = turn_asks(&rubrics, &tj)
            .into_iter()
            .map(|a| (a.criterion, a.rubric, a.ask))
            .collect();
        self.queue_asks(key, r, Some(tj), asks, None);
    }

    /// Queues every judge request of a judged reply (a cached verdict is
    /// used at once).
    fn queue_judges(
        &mut self,
        key: &CaseKey,
        r: Box<NewResult>,
        text: String,
        item: Option<(i64, ItemOutcome)>,
    ) {
        let idx = self.cases[key];
        // A `names` or `pronouns` variant's swaps are in its rubrics.
        let rubrics = idx.resolve(&self.worker.benchmark).rubrics();
        let asks: Vec<(String, usize, judge::JudgeAsk)> = rubrics
            .iter()
            .enumerate()
            .map(|(ri, rubric)| {
                (
                    rubric.code.clone(),
                    ri,
                    judge::request(rubric, &r.prompt, &text),
                )
            })
            .collect();
        self.queue_asks(key, r, None, asks, item);
    }

    /// Queues one request per (criterion, judge) of `asks` (criterion name,
    /// rubric, what the judge is asked) for result `r`.
    fn queue_asks(
        &mut self,
        key: &CaseKey,
        r: Box<NewResult>,
        turns: Option<Box<ToJudge>>,
        asks: Vec<(String, usize, judge::JudgeAsk)>,
        item: Option<(i64, ItemOutcome)>,
    ) {
        let judge_model = self.worker.settings.judge_model.clone().unwrap_or_default();
        let judges: Vec<String> = panel::judges(&judge_model)
            .into_iter()
            .map(str::to_string)
            .collect();
        let mut reqs = Vec::new();
        let criteria: Vec<(String, usize)> =
            asks.iter().map(|(c, ri, _)| (c.clone(), *ri)).collect();
        for (criterion, ri, ask) in asks {
            let schema_key = format!(
                "judge-{}",
                &crate::benchmark::sha256_hex(&[ask.response_format.to_string().as_bytes()])[..16]
            );
            for jm in &judges {
                let settings = self.worker.judge_entry(jm);
                let api = self.worker.client.api_of(&settings);
                let body = ChatRequest {
                    history: &[],
                    model: &settings,
                    prompt: &ask.prompt,
                    response_format: Some(&ask.response_format),
                    api,
                    user: self.worker.client.user(),
                }
                .body();
                let jhash = sha256_hex_pieces(&[&body.key_parts(), &[&key.1.to_le_bytes()]]);
                reqs.push(JudgeReq {
                    key: (key.clone(), criterion.clone(), jm.clone()),
                    body: body.wire,
                    schema_key: schema_key.clone(),
                    tries: 0,
                    rubric: ri,
                    ask: ask.clone(),
                    enlarged: None,
                    j: NewJudgement {
                        criterion: criterion.clone(),
                        judge_model: jm.clone(),
                        request_hash: Some(jhash),
                        ..Default::default()
                    },
                });
            }
        }
        let a = Awaiting {
            r,
            turns,
            criteria,
            needed: reqs.len(),
            got: HashMap::new(),
            model_item: item,
            batches: Vec::new(),
        };
        self.awaiting.insert(key.clone(), a);
        for req in reqs {
            // A verdict stored for the identical request is reused.
            let cached = self.worker.cache.as_ref().is_some_and(|f| {
                req.j
                    .request_hash
                    .as_deref()
                    .is_some_and(|h| f.may_have_judgement(h))
            });
            if cached {
                self.judge_pending.push(req);
                continue;
            }
            if let Some((b, early)) = self.early.remove(&req.key) {
                self.judge_item(b, req, early);
            } else if self.held_judge.contains(&req.key) {
                self.judge_out.insert(req.key.clone(), req);
            } else {
                self.judge_pending.push(req);
            }
        }
        self.complete_if_judged(key);
    }

    /// Judge requests whose verdict the cache holds are answered from it;
    /// the rest are returned for a batch.
    pub(super) async fn judge_from_cache(&mut self) {
        let mut keep = Vec::new();
        for mut req in std::mem::take(&mut self.judge_pending) {
            let hit = match (&self.worker.cache, req.j.request_hash.as_deref()) {
                (Some(f), Some(h)) if req.tries == 0 && f.may_have_judgement(h) => {
                    self.worker.store.cached_judgement(h).await.ok().flatten()
                }
                _ => None,
            };
            let Some(content) = hit else {
                keep.push(req);
                continue;
            };
            let rubric = self.rubric(&req);
            match judge::parse(&rubric, &content) {
                Ok(v) => {
                    req.j.cached = true;
                    req.j.response = Some(content);
                    req.j.passed = Some(v.passed);
                    req.j.verdict = Some(v.value);
                    req.j.justification = v.justification;
                    self.judged(req);
                }
                Err(_) => keep.push(req),
            }
        }
        self.judge_pending = keep;
    }

    fn rubric(&self, req: &JudgeReq) -> crate::benchmark::Rubric {
        let idx = self.cases[&req.key.0];
        idx.resolve(&self.worker.benchmark).scenario.rubrics[req.rubric].clone()
    }

    fn judge_item(&mut self, batch: i64, mut req: JudgeReq, item: ResultItem) {
        if let Some(a) = self.awaiting.get_mut(&req.key.0)
            && !a.batches.contains(&batch)
        {
            a.batches.push(batch);
        }
        let o = ItemOutcome {
            custom_id: item.custom_id.clone(),
            outcome: match item.reply {
                ItemReply::Answered(_) => "answered",
                ItemReply::Final(_) => "blocked",
                ItemReply::Again(_) => "failed",
            },
            cost_usd: item.cost_usd,
            apportioned: item.apportioned,
        };
        self.loose_items.push((batch, o));
        match item.reply {
            ItemReply::Answered(c) => {
                let j = &mut req.j;
                j.prompt_tokens += c.prompt_tokens;
                j.completion_tokens += c.completion_tokens;
                j.cost_usd += c.cost_usd;
                j.byok_cost_usd += c.byok_cost_usd;
                j.served = ServedBy {
                    served_model: c.served_model,
                    provider: c.provider,
                    reasoning_tokens: j.served.reasoning_tokens + c.reasoning_tokens,
                    cached_prompt_tokens: j.served.cached_prompt_tokens + c.cached_prompt_tokens,
                };
                j.generation_id = c.generation_id;
                if let Some(why) = c.empty_because {
                    self.enlarge(req, &why);
                    self.settle_outstanding(batch);
                    return;
                }
                let rubric = self.rubric(&req);
                match judge::parse(&rubric, &c.content) {
                    Ok(v) => {
                        let j = &mut req.j;
                        j.response = Some(c.content);
                        j.passed = Some(v.passed);
                        j.verdict = Some(v.value);
                        j.justification = v.justification;
                        j.error = None;
                        self.judged(req);
                    }
                    Err(e) => self.again_judge(req, &e, 0.0),
                }
            }
            ItemReply::Final(e) => {
                // An unknown cost stays unknown (NaN), never $0.
                req.j.cost_usd += item.cost_usd.unwrap_or(f64::NAN);
                req.j.error = Some(e.to_string());
                self.judged(req);
            }
            ItemReply::Again(why) => {
                let cost = item.cost_usd.unwrap_or(f64::NAN);
                self.again_judge(req, &why, cost);
            }
        }
        self.settle_outstanding(batch);
    }

    /// A judge that answered with reasoning (or tool calls) and no
    /// verdict: paid and counted, and asked once more with twice the
    /// `max_tokens`, as a synchronous run does; then a judge error.
    fn enlarge(&mut self, mut req: JudgeReq, why: &str) {
        let settings = self.worker.judge_entry(&req.key.2);
        let had = settings.max_tokens.unwrap_or(judge::MAX_TOKENS);
        if let Some(more) = req.enlarged {
            req.j.response = None;
            req.j.passed = None;
            req.j.error = Some(format!(
                "the judge answered with {why} and no verdict, with max_tokens {had} and again with {more}: raise its max_tokens (or lower its reasoning effort) in models.yml"
            ));
            self.judged(req);
            return;
        }
        let more = had.saturating_mul(2).min(judge::MAX_TOKENS_CAP);
        let larger = crate::domain::ModelEntry {
            max_tokens: Some(more),
            ..settings
        };
        req.body = ChatRequest {
            history: &[],
            model: &larger,
            prompt: &req.ask.prompt,
            response_format: Some(&req.ask.response_format),
            api: self.worker.client.api_of(&larger),
            user: self.worker.client.user(),
        }
        .body()
        .wire;
        req.enlarged = Some(more);
        self.judge_pending.push(req);
    }

    /// A judge request without a usable verdict: asked again in the next
    /// round, up to the rounds (and the judge's attempts) allowed.
    fn again_judge(&mut self, mut req: JudgeReq, why: &str, cost: f64) {
        req.j.cost_usd += cost;
        req.tries += 1;
        if req.tries < self.max_rounds.min(super::worker::JUDGE_ATTEMPTS as u32) {
            self.judge_pending.push(req);
            return;
        }
        req.j.response = None;
        req.j.passed = None;
        req.j.error = Some(why.to_string());
        self.judged(req);
    }

    fn judged(&mut self, req: JudgeReq) {
        let case = req.key.0.clone();
        if let Some(a) = self.awaiting.get_mut(&case) {
            a.got.insert((req.key.1.clone(), req.key.2.clone()), req.j);
        }
        self.complete_if_judged(&case);
    }

    /// A case whose every verdict is in: combined (a panel), concluded and
    /// queued for writing.
    fn complete_if_judged(&mut self, key: &CaseKey) {
        let ready = self
            .awaiting
            .get(key)
            .is_some_and(|a| a.got.len() >= a.needed);
        if !ready {
            return;
        }
        let Some(mut a) = self.awaiting.remove(key) else {
            return;
        };
        let judge_model = self.worker.settings.judge_model.clone().unwrap_or_default();
        let judges: Vec<&str> = panel::judges(&judge_model);
        for (criterion, _) in std::mem::take(&mut a.criteria) {
            let mut votes: Vec<NewJudgement> = judges
                .iter()
                .filter_map(|jm| a.got.remove(&(criterion.clone(), jm.to_string())))
                .collect();
            let j = if judges.len() < 2 {
                votes.pop().unwrap_or_default()
            } else {
                panel::combine(
                    &criterion,
                    &judge_model,
                    votes,
                    self.worker.settings.judge_tie,
                )
            };
            a.r.judgements.push(j);
        }
        match &a.turns {
            Some(tj) => conclude_judged(&mut a.r, tj),
            None => conclude(&mut a.r),
        }
        let mut r = a.r;
        r.replaces = self.redo.contains(key);
        if let Some((b, _)) = &a.model_item {
            self.settle_outstanding(*b);
        }
        self.ready.push(Ready {
            r: *r,
            items: a.model_item.into_iter().collect(),
        });
    }

    fn push(&mut self, mut r: Box<NewResult>, items: Vec<(i64, ItemOutcome)>) {
        r.replaces = self.redo.contains(&(r.test_code.clone(), r.repeat_index));
        for (b, _) in &items {
            self.settle_outstanding(*b);
        }
        // A judged case with no reply to judge (blocked, failed) needs no verdict.
        self.ready.push(Ready { r: *r, items });
    }

    fn settle_outstanding(&mut self, batch: i64) {
        if let Some(n) = self.outstanding.get_mut(&batch) {
            *n = n.saturating_sub(1);
        }
    }

    /// Writes what is ready (results, their charges, what their batch items
    /// became) and marks the batches whose every result is written.
    pub(super) async fn flush(&mut self) -> crate::Result<()> {
        if self.ready.is_empty() && self.loose.is_empty() && self.loose_items.is_empty() {
            return self.mark_collected().await;
        }
        let ready = std::mem::take(&mut self.ready);
        let (results, items): (Vec<NewResult>, Vec<Vec<(i64, ItemOutcome)>>) =
            ready.into_iter().map(|r| (r.r, r.items)).unzip();
        // Counted as the synchronous path counts it (`billed`): the
        // reply's and every judge's cost, BYOK upstream included; an unknown
        // cost is stored unknown and counts nothing here.
        let mut paid = self.loose.iter().map(|c| c.cost_usd).sum::<f64>();
        for r in &results {
            paid += r.billed_usd() + r.judgements.iter().map(|j| j.billed_usd()).sum::<f64>();
            // A conversation's turns counted as they were stored.
            paid -= self
                .turn_spent
                .remove(&(r.test_code.clone(), r.repeat_index))
                .unwrap_or(0.0);
        }
        self.writer.write_results(&results, &self.loose).await?;
        self.loose.clear();
        self.spent += paid;
        self.batch.count_batch_spend(paid);
        if let Some(cache) = &self.worker.cache {
            cache.note(&results);
        }
        for r in &results {
            self.stored.insert((r.test_code.clone(), r.repeat_index));
            self.progress.record(r, self.spent);
        }
        self.progress.redraw(false);
        self.batch.progress.redraw_total(false);
        let mut by_batch: HashMap<i64, Vec<ItemOutcome>> = HashMap::new();
        for (b, o) in items
            .into_iter()
            .flatten()
            .chain(std::mem::take(&mut self.loose_items))
        {
            by_batch.entry(b).or_default().push(o);
        }
        for (b, outcomes) in by_batch {
            self.writer.record_batch_items(b, &outcomes).await?;
        }
        self.mark_collected().await
    }

    async fn mark_collected(&mut self) -> crate::Result<()> {
        let done: Vec<i64> = self
            .read_done
            .iter()
            .copied()
            .filter(|b| self.outstanding.get(b).copied().unwrap_or(0) == 0)
            .filter(|b| !self.awaiting.values().any(|a| a.batches.contains(b)))
            .collect();
        for b in done {
            self.writer.record_batch_collected(b).await?;
            self.read_done.remove(&b);
            self.outstanding.remove(&b);
        }
        Ok(())
    }
}
