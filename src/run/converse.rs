//! A test case that is a conversation (issue 42), on the worker that runs
//! every test case: each user message is sent with the whole history so
//! far (the model's actual earlier replies, the script's prefilled ones in
//! place), each reply stored as a turn before the next is sent, and the
//! conversation's result made of its turns. A single-turn test case never
//! comes here: it is the conversation of one exchange the worker's `ask`
//! has always sent.

use std::sync::Arc;

use serde_json::{Value, json};

use super::exchange::{Exchanged, LaterTurn, Replies, ToJudge};
use super::simulate::{Next, simulated_code, simulated_exchange};
use super::worker::{
    Asked, Judged, Outcome, Prepared, VERDICTS_CUT, Worker, failed, from_cache, request_with,
};
use crate::benchmark::Benchmark;
use crate::benchmark::cases::{CaseIndex, TestCase};
use crate::benchmark::conversation::{self, Reply};
use crate::domain::{ErrorKind, ModelEntry, NewJudgement, NewResult, TurnRecord};
use crate::judging::judge;
use crate::openrouter::{Client, Completion, FailureClass, Message};

/// The separator of a later turn's criteria (`R1@T3`): message 1's
/// verdicts keep the rubric's code, as a single-turn test case's do.
const AT: char = '@';

/// One judge request of a conversation: the exchange it judges, by which
/// of the scenario's rubrics, under which criterion name (`R1`, `R1@T3`),
/// and what the judge is asked (the conversation so far and the reply).
pub(super) struct TurnAsk {
    pub(super) rubric: usize,
    pub(super) criterion: String,
    pub(super) ask: judge::JudgeAsk,
}

/// Whether `case` is a conversation of more than one exchange.
fn is_conversation(case: &TestCase<'_>) -> bool {
    // Without composing: the loader guarantees a script with a turn holds a
    // user message after message 1 (no trailing assistant turn).
    !case.scenario.personas.is_empty()
        || (!case.scenario.turns.is_empty() && !conversation::turns_of(case).is_empty())
}

/// What every request of a persona conversation is salted with: its
/// persona's code, so the personas of one test case are samples of their
/// own (message 1 is the same text for each, and would otherwise be one
/// cached reply).
fn salt_of<'a>(case: &TestCase<'a>) -> &'a str {
    conversation::persona_of(case).map_or("", |p| p.component.code.as_str())
}

/// The key a conversation's result is stored under (None for a single-turn
/// test case, stored under its request's hash): message 1's request hash
/// (the model's settings, the persona's salt, the repeat) under a prefix
/// of its own, so that no request's hash is ever this key and the result
/// row, which sums its turns, never answers a request from the cache.
/// What follows message 1 is the content, whose hash a run records: an
/// earlier run with the same content hash and key holds the same
/// conversation (complete.rs).
pub(super) fn conversation_key(
    benchmark: &Benchmark,
    client: &Client,
    model: &ModelEntry,
    idx: CaseIndex,
    repeat: i64,
) -> Option<String> {
    let case = idx.resolve(benchmark);
    if !is_conversation(&case) {
        return None;
    }
    let first = conversation::script(&case).swap_remove(0).user.into_owned();
    let rf = case.scenario.response_format.as_ref();
    let req = request_with(client, model, rf, &[], first, repeat, salt_of(&case));
    Some(key_of(&req.request_hash))
}

/// The conversation key of message 1's request hash.
fn key_of(first_request: &str) -> String {
    crate::benchmark::sha256_hex_pieces(&[&[b"conversation", first_request.as_bytes()]])
}

impl Worker {
    /// Whether test case `idx` is a conversation of more than one exchange.
    pub(super) fn is_conversation(&self, idx: CaseIndex) -> bool {
        is_conversation(&idx.resolve(&self.benchmark))
    }

    /// The model's part of a conversation: every exchange in order, each
    /// live reply from this run's stored turns (a resume), the cache, or
    /// the model. `replaces`: the run stored this conversation before (with
    /// a judge error), so its stored turns are already in that result's
    /// cost and are reused at no cost now.
    pub(super) async fn converse(
        &self,
        idx: CaseIndex,
        repeat: i64,
        replaces: bool,
        mut replies: Replies,
    ) -> Asked {
        let case = idx.resolve(&self.benchmark);
        let mut script = conversation::script(&case);
        let code = case.code();
        // A persona conversation (issue 42): its user messages after
        // message 1 come from the simulator (simulate.rs), one at a time.
        let persona = conversation::persona_of(&case);
        let simulated = match persona {
            Some(_) => self.simulated_calls(&code, repeat).await,
            None => Vec::new(),
        };
        let mut sim_cost = 0.0;
        let stored = match self.store.turns_of(self.run_id, &code, repeat).await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, test_code = %code, "stored turns not read; the conversation is asked again");
                Vec::new()
            }
        };
        let m = &self.settings.model;
        let api = self.client.api_of(m);
        let rf = case.scenario.response_format.as_ref();
        let salt = salt_of(&case);
        let mut done: Vec<Exchanged> = Vec::with_capacity(script.len());
        let mut conv: Option<Box<NewResult>> = None;
        for k in 0.. {
            if k == script.len() {
                let Some(p) = persona else { break };
                match self
                    .simulate(&code, repeat, p, &done, &simulated, replaces)
                    .await
                {
                    Ok(sim) => {
                        sim_cost += sim.cost_usd;
                        match sim.next {
                            Next::Say(text) => script.push(simulated_exchange(text)),
                            Next::Stop => break,
                        }
                    }
                    Err(e) => {
                        let Some(c) = conv.take() else {
                            return Asked::Done(Outcome::Aborted);
                        };
                        return Asked::Done(cut_short(c, &done, e, k, sim_cost));
                    }
                }
            }
            let ex = script[k].clone();
            let user = ex.user.to_string();
            let turn_code = ex
                .turn
                .map(|t| t.component.code.clone())
                .or_else(|| persona.filter(|_| k > 0).map(|_| simulated_code(k)));
            let pressure = ex.turn.map_or_else(
                || persona.filter(|_| k > 0).and_then(|p| p.risk.clone()),
                |t| t.pressure.clone(),
            );
            let req = {
                // The history is what was said so far: each exchange's user
                // message and the reply that followed it.
                let msgs: Vec<Message<'_>> = done
                    .iter()
                    .flat_map(|e| {
                        [
                            Message {
                                role: "user",
                                content: &e.user,
                            },
                            Message {
                                role: "assistant",
                                content: &e.reply,
                            },
                        ]
                    })
                    .collect();
                request_with(&self.client, m, rf, &msgs, user.clone(), repeat, salt)
            };
            let hash = req.request_hash.clone();
            let Prepared {
                mut r,
                prompt,
                body,
            } = self.skeleton(idx, repeat, req);
            let mut record = TurnRecord {
                run_id: self.run_id,
                test_code: code.clone(),
                repeat_index: repeat,
                turn_index: k as i64,
                turn_code: turn_code.clone(),
                pressure: pressure.clone(),
                user_message: user.clone(),
                ..Default::default()
            };
            if k == 0 {
                // The conversation's result: message 1's prompt and ids,
                // under the conversation's key (`conversation_key`).
                let mut first = r.clone();
                first.prompt = prompt.clone();
                first.request_hash = key_of(&hash);
                conv = Some(first);
            }
            let judged = match ex.reply {
                Reply::Fixed(t) => {
                    let reply = t.component.prompt.clone();
                    record.prefilled = true;
                    record.judged = false;
                    record.response = Some(reply.clone());
                    // Written once: a resume, and each Batch API round,
                    // walks past it again.
                    let kept = stored.iter().any(|t| {
                        t.turn_index == k as i64
                            && t.prefilled
                            && t.user_message == record.user_message
                            && t.response == record.response
                    });
                    if !kept {
                        self.keep_turn(&record).await;
                    }
                    done.push(Exchanged {
                        index: k,
                        turn_code,
                        pressure,
                        user,
                        reply,
                        prefilled: true,
                        judged: false,
                        result: None,
                        to_judge: None,
                        criteria: None,
                    });
                    continue;
                }
                Reply::Live { judged } => judged,
            };
            let reused = stored.iter().find(|t| {
                t.turn_index == k as i64
                    && !t.prefilled
                    && t.response.is_some()
                    && t.request_hash.as_deref() == Some(hash.as_str())
            });
            let (completion, fresh) = if let Some(t) = reused {
                (reused_turn(t, !replaces), false)
            } else if let Some(c) = self.cached_turn(&hash).await {
                (c, true)
            } else {
                let sent = match &mut replies {
                    Replies::Now => self.client.chat_json(&m.id, body).await.map(|mut c| {
                        crate::openrouter::price_reply(&mut c, m, api);
                        c
                    }),
                    // A batch item's reply comes priced by its batch.
                    Replies::Batched(given) => match given.take_if(|g| g.0 == k) {
                        Some(g) => g.1,
                        None => return Asked::Later(Box::new(LaterTurn { turn: k, body })),
                    },
                };
                match sent {
                    Ok(c) => (c, true),
                    Err(e) => {
                        let c = conv.take().unwrap_or(r);
                        return Asked::Done(cut_short(c, &done, e, k, sim_cost));
                    }
                }
            };
            if fresh {
                record.judged = judged;
                record.request_hash = Some(hash.clone());
                record.response = Some(completion.content.clone());
                record.finish_reason = completion.finish_reason.clone();
                record.generation_id = completion.generation_id.clone();
                record.prompt_tokens = completion.prompt_tokens;
                record.completion_tokens = completion.completion_tokens;
                record.cost_usd = completion.cost_usd;
                record.byok_cost_usd = completion.byok_cost_usd;
                record.latency_ms = Some(completion.latency_ms as i64);
                record.attempts = i64::from(completion.attempts);
                record.cached = completion.attempts == 0;
                record.served_model = completion.served_model.clone();
                record.provider = completion.provider.clone();
                record.reasoning_tokens = completion.reasoning_tokens;
                record.cached_prompt_tokens = completion.cached_prompt_tokens;
                self.keep_turn(&record).await;
            }
            let reply = completion.content.clone();
            r.prompt = prompt;
            let (result, to_judge) = match self.answer_as(idx, r, completion, ex.turn, judged) {
                Asked::Done(Outcome::Stored(tr)) => (tr, None),
                Asked::Judge(tr, text) => (tr, Some(text)),
                // `answer_as` stores or judges; nothing else comes back.
                Asked::Done(_) | Asked::JudgeTurns(..) | Asked::Later(_) => {
                    unreachable!("answer_as only stores or judges")
                }
            };
            let stopped = result.block.is_some();
            done.push(Exchanged {
                index: k,
                turn_code,
                pressure,
                user,
                reply,
                prefilled: false,
                judged,
                result: Some(result),
                to_judge,
                criteria: ex.turn.and_then(|t| t.criteria.clone()),
            });
            // A content filter's stop ends the conversation there.
            if stopped {
                break;
            }
        }
        let Some(mut c) = conv else {
            return Asked::Done(Outcome::Aborted);
        };
        fold(&mut c, &done);
        c.cost_usd += sim_cost;
        if let Some(last) = done.iter().rev().find_map(|e| e.result.as_ref())
            && let Some(block) = &last.block
        {
            c.passed = false;
            c.error_kind = last.error_kind;
            c.error = last.error.clone();
            c.block = Some(block.clone());
            c.evaluation_details = details(&done, &[], Some(last_index(&done)));
            return Asked::Done(Outcome::Stored(c));
        }
        if done.iter().any(|e| e.to_judge.is_some()) {
            return Asked::JudgeTurns(c, Box::new(ToJudge { exchanges: done }));
        }
        conclude_turns(&mut c, &done);
        Asked::Done(Outcome::Stored(c))
    }

    /// The judge's part of a conversation: each judged reply with the
    /// conversation before it, by the rubrics of its turn.
    pub(super) async fn judge_turns(
        &self,
        idx: CaseIndex,
        mut c: Box<NewResult>,
        tj: Box<ToJudge>,
    ) -> Judged {
        let case = idx.resolve(&self.benchmark);
        let rubrics = case.rubrics();
        let judge_model = self.settings.judge_model.clone().unwrap_or_default();
        let repeat = c.repeat_index;
        for a in turn_asks(&rubrics, &tj) {
            let rubric = &rubrics[a.rubric];
            match self
                .judge_rubric(&judge_model, rubric, &a.ask, repeat)
                .await
            {
                Ok(mut j) => {
                    for v in &mut j.votes {
                        v.criterion.clone_from(&a.criterion);
                    }
                    j.criterion = a.criterion;
                    c.judgements.push(j);
                }
                Err(cut) => {
                    let mut paid = std::mem::take(&mut c.judgements);
                    paid.extend(cut.paid);
                    let charges = c.paid_as_charges(false, &paid, VERDICTS_CUT);
                    let fatal = cut.error.is_fatal_for_run().then(|| Arc::new(cut.error));
                    c.evaluation_details = details(&tj.exchanges, &[], None);
                    return Judged::Cut(c, charges, fatal);
                }
            }
        }
        conclude_turns(&mut c, &tj.exchanges);
        Judged::Done(c)
    }

    /// A reply to the same conversation so far, from any run's result or
    /// turn (None with `--no-cache`).
    async fn cached_turn(&self, request_hash: &str) -> Option<Completion> {
        if let Some(c) = self.cached(request_hash).await {
            return Some(c);
        }
        match &self.cache {
            Some(f) if f.may_have_reply(request_hash) => self
                .store
                .cached_turn_reply(request_hash)
                .await
                .ok()
                .flatten()
                .map(from_cache),
            _ => None,
        }
    }

    /// Stores a turn before the next is sent. A turn that cannot be
    /// written is not lost to the bill: its cost is in the conversation's
    /// result; only a resume after a kill would ask it again.
    async fn keep_turn(&self, t: &TurnRecord) {
        match self.store.write_turn(t).await {
            Ok(()) => {
                if let (Some(f), Some(h)) = (&self.cache, &t.request_hash) {
                    f.note_reply(h);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, test_code = %t.test_code, turn = t.turn_index, "turn not stored");
            }
        }
    }
}

/// A conversation that ended at exchange `k` on `e` (its request, or the
/// simulator's call before it): nothing stored when the budget or a stop
/// refused it (a resume goes on from the turns stored so far), else the
/// conversation's result with the error. `sim_cost`: what the simulated
/// user cost so far (in the result's cost).
fn cut_short(
    mut c: Box<NewResult>,
    done: &[Exchanged],
    e: crate::openrouter::ProviderError,
    k: usize,
    sim_cost: f64,
) -> Outcome {
    match e.class() {
        _ if e.is_fatal_for_run() => Outcome::Fatal(Arc::new(e)),
        FailureClass::NotSent => Outcome::Aborted,
        _ => {
            fold(&mut c, done);
            c.cost_usd += sim_cost;
            let prompt = std::mem::take(&mut c.prompt);
            // Under the conversation's key still: a blocked or refused
            // conversation is answered (complete.rs), as a single-turn one is.
            let mut c = failed(c, prompt, &e);
            c.evaluation_details = details(done, &c.judgements, Some(k));
            Outcome::Stored(c)
        }
    }
}

/// A turn this run stored, as the completion it was; with `paid` its cost
/// and tokens count again in the conversation's result (the first result
/// of this conversation), else it comes at no cost, like a cached reply.
fn reused_turn(t: &TurnRecord, paid: bool) -> Completion {
    Completion {
        generation_id: t.generation_id.clone(),
        content: t.response.clone().unwrap_or_default(),
        finish_reason: t.finish_reason.clone(),
        provider: t.provider.clone(),
        served_model: t.served_model.clone(),
        prompt_tokens: if paid { t.prompt_tokens } else { 0 },
        completion_tokens: if paid { t.completion_tokens } else { 0 },
        reasoning_tokens: if paid { t.reasoning_tokens } else { 0 },
        cached_prompt_tokens: if paid { t.cached_prompt_tokens } else { 0 },
        cost_usd: if paid { t.cost_usd } else { 0.0 },
        reported_cost_usd: None,
        upstream_cost_usd: None,
        attempts: if paid { t.attempts.max(1) as u32 } else { 0 },
        latency_ms: if paid {
            t.latency_ms.unwrap_or(0).max(0) as u64
        } else {
            0
        },
        byok_cost_usd: if paid { t.byok_cost_usd } else { 0.0 },
        empty_because: None,
    }
}

/// Every judge request of a conversation whose judged replies wait for
/// the judge, in order: each judged reply with the conversation before it,
/// by the rubrics of its turn. Message 1 is asked exactly as a single-turn
/// test case is (the judge's cache is shared with it).
/// `rubrics` are the test case's ([`TestCase::rubrics`]: a variant's
/// swaps applied).
///
/// [`TestCase::rubrics`]: crate::benchmark::cases::TestCase::rubrics
pub(super) fn turn_asks(rubrics: &[crate::benchmark::Rubric], tj: &ToJudge) -> Vec<TurnAsk> {
    let mut asks = Vec::new();
    for (i, ex) in tj.exchanges.iter().enumerate() {
        let Some(text) = &ex.to_judge else { continue };
        let mut history: Vec<(&str, &str)> = Vec::with_capacity(2 * i + 1);
        for e in &tj.exchanges[..i] {
            history.push(("user", &e.user));
            history.push(("assistant", &e.reply));
        }
        history.push(("user", &ex.user));
        for (ri, rubric) in rubrics.iter().enumerate() {
            if ex
                .criteria
                .as_ref()
                .is_some_and(|c| !c.contains(&rubric.code))
            {
                continue;
            }
            let ask = if ex.index == 0 {
                judge::request(rubric, &ex.user, text)
            } else {
                judge::request_in_conversation(rubric, &history, text)
            };
            let criterion = match &ex.turn_code {
                Some(code) => format!("{}{AT}{code}", rubric.code),
                None => rubric.code.clone(),
            };
            asks.push(TurnAsk {
                rubric: ri,
                criterion,
                ask,
            });
        }
    }
    asks
}

/// A conversation whose every verdict is in `c.judgements`: its verdict.
pub(super) fn conclude_judged(c: &mut NewResult, tj: &ToJudge) {
    conclude_turns(c, &tj.exchanges);
}

/// The index of the last exchange.
fn last_index(done: &[Exchanged]) -> usize {
    done.last().map_or(0, |e| e.index)
}

/// The conversation's result gathers its live replies: tokens, costs,
/// latency and attempts summed; the last reply (what a reader of the
/// result sees) as its reply. Its request hash stays the conversation's
/// key: the sums answer no request.
fn fold(c: &mut NewResult, done: &[Exchanged]) {
    let live: Vec<&NewResult> = done.iter().filter_map(|e| e.result.as_deref()).collect();
    let Some(last) = live.last() else {
        return;
    };
    c.prompt_tokens = live.iter().map(|r| r.prompt_tokens).sum();
    c.completion_tokens = live.iter().map(|r| r.completion_tokens).sum();
    c.cost_usd = live.iter().map(|r| r.cost_usd).sum();
    c.byok_cost_usd = live.iter().map(|r| r.byok_cost_usd).sum();
    c.upstream_cost_usd = live
        .iter()
        .filter_map(|r| r.upstream_cost_usd)
        .reduce(|a, b| a + b);
    c.latency_ms = Some(live.iter().filter_map(|r| r.latency_ms).sum());
    c.attempts = live.iter().map(|r| r.attempts).sum();
    c.cached = live.iter().all(|r| r.cached);
    c.served.reasoning_tokens = live.iter().map(|r| r.served.reasoning_tokens).sum();
    c.served.cached_prompt_tokens = live.iter().map(|r| r.served.cached_prompt_tokens).sum();
    c.served.served_model.clone_from(&last.served.served_model);
    c.served.provider.clone_from(&last.served.provider);
    c.response.clone_from(&last.response);
    c.parsed.clone_from(&last.parsed);
    c.finish_reason.clone_from(&last.finish_reason);
    c.generation_id.clone_from(&last.generation_id);
    c.quality.clone_from(&last.quality);
}

/// Whether judgement `criterion` is of the exchange whose turn is `code`.
fn of_exchange(criterion: &str, code: Option<&str>) -> bool {
    match (criterion.split_once(AT), code) {
        (Some((_, c)), Some(code)) => c == code,
        (None, None) => true,
        _ => false,
    }
}

/// One exchange's verdict: None when nothing judges it (prefilled, or
/// `judge: false`), else whether it passed, with the kind of error that
/// kept it from a clean verdict.
fn verdict(e: &Exchanged, judgements: &[NewJudgement]) -> (Option<bool>, Option<ErrorKind>) {
    let Some(r) = &e.result else {
        return (None, None);
    };
    if !e.judged {
        return (None, None);
    }
    if e.to_judge.is_some() {
        let mine: Vec<&NewJudgement> = judgements
            .iter()
            .filter(|j| of_exchange(&j.criterion, e.turn_code.as_deref()))
            .collect();
        if mine.iter().any(|j| j.error.is_some()) || mine.is_empty() {
            return (Some(false), Some(ErrorKind::Judge));
        }
        return (Some(mine.iter().all(|j| j.passed == Some(true))), None);
    }
    (Some(r.passed), r.error_kind)
}

/// The conversation's `evaluation_details`: each exchange with its verdict
/// (and, for a judged one, its criteria), the first failed exchange, and
/// where it ended early (`ended_at`), if it did.
fn details(done: &[Exchanged], judgements: &[NewJudgement], ended_at: Option<usize>) -> Value {
    let mut first_failed = None;
    let turns: Vec<Value> = done
        .iter()
        .map(|e| {
            let (passed, kind) = verdict(e, judgements);
            if passed == Some(false) && first_failed.is_none() {
                first_failed = Some(e.index);
            }
            let r = e.result.as_deref();
            let criteria: Vec<Value> = judgements
                .iter()
                .filter(|j| e.to_judge.is_some() && of_exchange(&j.criterion, e.turn_code.as_deref()))
                .map(|j| json!({"criterion": j.criterion, "verdict": j.verdict, "passed": j.passed, "justification": j.justification, "error": j.error}))
                .collect();
            json!({
                "index": e.index,
                "turn": e.turn_code,
                "pressure": e.pressure,
                "prefilled": e.prefilled,
                "judged": e.judged,
                "passed": passed,
                "error_kind": kind,
                "error": r.and_then(|r| r.error.clone()),
                "details": r.map(|r| &r.evaluation_details),
                "criteria": criteria,
                "cost_usd": r.map(|r| r.cost_usd),
            })
        })
        .collect();
    json!({
        "conversation": {
            "turns": turns,
            "live_turns": done.iter().filter(|e| !e.prefilled).count(),
            "first_failed_turn": first_failed,
            "ended_at": ended_at,
        },
        "criteria": judgements.iter().map(|j| json!({"criterion": j.criterion, "verdict": j.verdict, "passed": j.passed, "justification": j.justification, "error": j.error})).collect::<Vec<_>>(),
    })
}

/// A conversation's verdict (SPEC §2, issue 42): it passes when every
/// judged reply passes. A judge error anywhere keeps it out of the score
/// (a resume judges it again); a reply that could not be read fails it as
/// a format error, as a single-turn reply would.
fn conclude_turns(c: &mut NewResult, done: &[Exchanged]) {
    let mut all = true;
    let mut kind: Option<ErrorKind> = None;
    let mut error = None;
    for e in done {
        let (passed, k) = verdict(e, &c.judgements);
        if passed == Some(false) {
            all = false;
        }
        let rank = |k: Option<ErrorKind>| match k {
            Some(ErrorKind::Judge) => 2,
            Some(_) => 1,
            None => 0,
        };
        if rank(k) > rank(kind) {
            kind = k;
            error = e
                .result
                .as_ref()
                .and_then(|r| r.error.clone())
                .or_else(|| {
                    c.judgements
                        .iter()
                        .find(|j| {
                            of_exchange(&j.criterion, e.turn_code.as_deref()) && j.error.is_some()
                        })
                        .map(|j| {
                            format!("{}: {}", j.criterion, j.error.clone().unwrap_or_default())
                        })
                })
                .map(|m| match &e.turn_code {
                    Some(code) => format!("{code}: {m}"),
                    None => format!("message 1: {m}"),
                });
        }
    }
    c.error_kind = kind;
    c.error = error;
    c.matched = (kind != Some(ErrorKind::Judge)).then_some(all);
    c.passed = all && kind.is_none();
    c.evaluation_details = details(done, &c.judgements, None);
}
