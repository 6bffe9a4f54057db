//! The cost estimate of a batch before anything is paid (issue 22): per
//! model, the requests a run would send (model and judge), their prompt and
//! completion tokens and, with OpenRouter's prices, what they would cost,
//! as a range. `helmbench estimate` prints it; `run-batch` prints it and
//! refuses to start past a budget (`cli/estimate.rs` fetches the prices
//! and decides). This module only computes: no request, no database.
//!
//! How: prompt tokens are counted from the composed prompts (and the JSON
//! schema sent with them) at 3 to 5 characters per token; a judge request
//! is its rubric prompt plus the reply it judges. Completion tokens per
//! request run from the mean of the model's stored replies (else a quarter
//! of the high end) to `max_tokens` (else twice the stored mean, else
//! [`DEFAULT_MAX_COMPLETION_TOKENS`]). A judged test case costs one judge
//! request per rubric, up to [`JUDGE_ATTEMPTS`] when verdicts have to be
//! asked again. Reused replies (the cache) cost nothing and are not taken
//! off: the real cost is at most the upper end, often below the lower one.

use serde::Serialize;

use crate::benchmark::Benchmark;

use crate::domain::ModelEntry;
use crate::judging::judge;
use crate::run::RunSettings;
use crate::run::worker::JUDGE_ATTEMPTS;

/// Characters per token at the low and high ends of the prompt estimate
/// (tokenizers give about 4 for English prose, fewer for JSON and markup).
pub const CHARS_PER_TOKEN: [f64; 2] = [5.0, 3.0];

/// The completion cap assumed for a model without `max_tokens` and
/// without stored replies.
pub const DEFAULT_MAX_COMPLETION_TOKENS: u32 = 2000;

/// USD per token, from OpenRouter's `/models`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Prices {
    pub prompt: f64,
    pub completion: f64,
    /// USD per request (`pricing.request`), 0 where the catalog has none.
    pub request: f64,
    /// USD per internal reasoning token (`pricing.internal_reasoning`), 0
    /// where the catalog has none. Reasoning tokens are counted among the
    /// completion tokens, so the high end prices every completion token at
    /// the higher of the two. (`pricing.web_search` never applies: no
    /// request enables web search.)
    pub internal_reasoning: f64,
}

impl Prices {
    /// USD per completion token at the low (0) or high (1) end.
    pub fn completion_at(&self, end: usize) -> f64 {
        if end == 0 {
            self.completion
        } else {
            self.completion.max(self.internal_reasoning)
        }
    }
}

/// What the completion range of one model (or the judge) rests on.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CompletionInput {
    /// `max_tokens` of models.yml (the judge's fixed cap for the judge).
    pub max_tokens: Option<u32>,
    /// Mean completion tokens of the stored replies, and how many.
    pub stored_mean: Option<(f64, i64)>,
}

impl CompletionInput {
    /// Completion tokens of one request: [low, high], and how they were found.
    pub fn range(&self) -> ([f64; 2], String) {
        let high = match (self.max_tokens, self.stored_mean) {
            (Some(m), _) => f64::from(m),
            (None, Some((mean, _))) => 2.0 * mean,
            (None, None) => f64::from(DEFAULT_MAX_COMPLETION_TOKENS),
        };
        let low = match self.stored_mean {
            Some((mean, _)) => mean.min(high),
            None => high / 4.0,
        };
        let low_src = match self.stored_mean {
            Some((mean, n)) => format!("mean of {n} stored replies ({mean:.0})"),
            None => "a quarter of the high end (no stored replies)".into(),
        };
        ([low, high], format!("{low_src} to {}", self.high_source()))
    }

    /// How the high end was found.
    fn high_source(&self) -> String {
        match (self.max_tokens, self.stored_mean) {
            (Some(m), _) => format!("max_tokens {m}"),
            (None, Some(_)) => "twice the stored mean".into(),
            (None, None) => format!("default {DEFAULT_MAX_COMPLETION_TOKENS} (no max_tokens)"),
        }
    }

    /// How a simulated user message's completion range was found: without
    /// stored messages its low end is the message the estimate assumes.
    fn simulated_basis(&self) -> String {
        match self.stored_mean {
            Some(_) => self.range().1,
            None => format!(
                "the persona's max_words (else {SIMULATED_CHARS} characters; no stored simulated messages) to {}",
                self.high_source()
            ),
        }
    }
}

/// The estimate of one model's run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelEstimate {
    pub model: String,
    /// Test cases times repeats: one model request each.
    pub requests: u64,
    /// Judge requests: one per rubric, up to [`JUDGE_ATTEMPTS`] each.
    pub judge_requests: [u64; 2],
    pub prompt_tokens: [u64; 2],
    pub completion_tokens: [u64; 2],
    pub judge_prompt_tokens: [u64; 2],
    pub judge_completion_tokens: [u64; 2],
    /// The user-simulator model's requests of persona conversations (issue
    /// 42): one per simulated message, each carrying the persona and the
    /// conversation so far; 0 without personas.
    pub simulator_requests: u64,
    pub simulator_prompt_tokens: [u64; 2],
    pub simulator_completion_tokens: [u64; 2],
    /// How completion tokens per request were found.
    pub completion_basis: String,
    /// Some request of the plan sends a JSON schema (deterministic scenarios).
    pub structured: bool,
    pub price: Option<Prices>,
    /// Model, judge and simulated user together, USD; None when a price is
    /// missing.
    pub cost_usd: Option<[f64; 2]>,
}

impl ModelEstimate {
    /// The simulated user's part of the high end at `user_price`; 0
    /// without simulator requests, None when the user model has no price.
    pub fn simulator_cost_high(&self, user_price: Option<Prices>) -> Option<f64> {
        if self.simulator_requests == 0 {
            return Some(0.0);
        }
        let u = user_price?;
        Some(
            self.simulator_prompt_tokens[1] as f64 * u.prompt
                + self.simulator_completion_tokens[1] as f64 * u.completion_at(1)
                + self.simulator_requests as f64 * u.request,
        )
    }

    /// The judge's part of the high end (every judge request, retries
    /// included) at `judge_price`; 0 without judge requests, None when the
    /// judge has no price.
    pub fn judge_cost_high(&self, judge_price: Option<Prices>) -> Option<f64> {
        if self.judge_requests[1] == 0 {
            return Some(0.0);
        }
        let j = judge_price?;
        Some(
            self.judge_prompt_tokens[1] as f64 * j.prompt
                + self.judge_completion_tokens[1] as f64 * j.completion_at(1)
                + self.judge_requests[1] as f64 * j.request,
        )
    }
}

/// The whole batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    pub models: Vec<ModelEstimate>,
    pub judge_model: Option<String>,
    pub judge_completion_basis: Option<String>,
    pub judge_price: Option<Prices>,
    /// The user-simulator model (`--user-model`), when the plan has
    /// persona conversations.
    pub user_model: Option<String>,
    pub user_completion_basis: Option<String>,
    pub user_price: Option<Prices>,
    /// Every model together, USD; None when any price is missing.
    pub cost_usd: Option<[f64; 2]>,
    /// How the numbers were found, in one paragraph.
    pub method: &'static str,
}

/// One line on how the estimate is made, printed with it.
pub const METHOD: &str = "prompt tokens: the composed prompts and their JSON schemas at 5 (low) to 3 (high) characters per token; completion tokens per request: the mean of the model's stored replies (else a quarter of the high end) up to max_tokens (else twice that mean, else 2000); judge: one request per rubric, up to 3 when a verdict is asked again, each carrying the reply it judges; a conversation: one request per live reply, each carrying the history before it (earlier replies at the completion estimate), and its judged replies judged with that history; a persona conversation: as if it ran to its max_turns, each simulated message one request of the user model carrying the persona and the conversation so far, its completion from the user model's stored messages (else the persona's max_words, at most 400 characters) up to its max_tokens (else 2000); replies reused from the cache cost nothing and are not taken off";

/// What one model's estimate needs besides the plan.
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelInputs {
    pub completion: CompletionInput,
    pub price: Option<Prices>,
}

/// Estimates one run of `settings` (its plan, as `run-batch` would run it).
pub fn estimate_model(
    b: &Benchmark,
    settings: &RunSettings,
    inputs: ModelInputs,
    judge: ModelInputs,
    user: ModelInputs,
) -> crate::Result<ModelEstimate> {
    let work = crate::run::plan(b, settings)?;
    let tokens = |chars: usize| CHARS_PER_TOKEN.map(|per| chars as f64 / per);
    let (completion, basis) = inputs.completion.range();
    let (judge_completion, _) = judge.completion.range();
    let mut prompt = [0.0f64; 2];
    let mut judge_prompt = [0.0f64; 2];
    let mut judge_calls: u64 = 0;
    let (mut sim_prompt, mut sim_completion) = ([0.0f64; 2], [0.0f64; 2]);
    let mut sim_calls: u64 = 0;
    let mut requests: u64 = 0;
    let mut structured = false;
    // The plan lists a test case's repeats one after the other: each
    // prompt is composed once.
    let mut last: Option<(crate::benchmark::cases::CaseIndex, Cost)> = None;
    // Each scenario's schema is counted once, not once per test case: its
    // JSON written out per case was most of an estimate's time, and the
    // estimate runs before every run-batch (issue 45).
    let mut schemas: std::collections::HashMap<*const crate::benchmark::Scenario, usize> =
        std::collections::HashMap::new();
    for &(idx, _) in &work {
        let c = match last {
            Some((i, c)) if i == idx => c,
            _ => {
                let case = idx.resolve(b);
                structured |= case.scenario.response_format.is_some();
                let schema = *schemas
                    .entry(std::ptr::from_ref(case.scenario))
                    .or_insert_with(|| {
                        case.scenario
                            .response_format
                            .as_ref()
                            .map_or(0, |f| f.to_string().chars().count())
                    });
                let c = case_cost(&case, schema, &tokens, completion, user.completion);
                last = Some((idx, c));
                c
            }
        };
        prompt[0] += c.prompt[0];
        prompt[1] += c.prompt[1];
        judge_prompt[0] += c.judge_prompt[0];
        judge_prompt[1] += c.judge_prompt[1];
        judge_calls += c.judge_calls;
        requests += c.requests;
        for i in 0..2 {
            sim_prompt[i] += c.sim_prompt[i];
            sim_completion[i] += c.sim_completion[i];
        }
        sim_calls += c.sim_calls;
    }
    let n = requests as f64;
    let judge_requests = [judge_calls, judge_calls * JUDGE_ATTEMPTS as u64];
    let completion_tokens = completion.map(|c| c * n);
    let judge_completion_tokens = [
        judge_completion[0] * judge_requests[0] as f64,
        judge_completion[1] * judge_requests[1] as f64,
    ];
    let cost = |i: usize| -> Option<f64> {
        let m = inputs.price?;
        let mut usd =
            prompt[i] * m.prompt + completion_tokens[i] * m.completion_at(i) + n * m.request;
        if judge_calls > 0 {
            let j = judge.price?;
            usd += judge_prompt[i] * j.prompt
                + judge_completion_tokens[i] * j.completion_at(i)
                + judge_requests[i] as f64 * j.request;
        }
        if sim_calls > 0 {
            let u = user.price?;
            usd += sim_prompt[i] * u.prompt
                + sim_completion[i] * u.completion_at(i)
                + sim_calls as f64 * u.request;
        }
        Some(usd)
    };
    let round = |v: [f64; 2]| [v[0].floor() as u64, v[1].ceil() as u64];
    Ok(ModelEstimate {
        model: settings.model.id.clone(),
        requests,
        judge_requests,
        prompt_tokens: round(prompt),
        completion_tokens: round(completion_tokens),
        judge_prompt_tokens: round(judge_prompt),
        judge_completion_tokens: round(judge_completion_tokens),
        simulator_requests: sim_calls,
        simulator_prompt_tokens: round(sim_prompt),
        simulator_completion_tokens: round(sim_completion),
        completion_basis: basis,
        structured,
        price: inputs.price,
        cost_usd: cost(0).zip(cost(1)).map(|(lo, hi)| [lo, hi]),
    })
}

/// The characters of a simulated user message the estimate assumes when
/// its persona sets no `max_words`.
const SIMULATED_CHARS: usize = 400;

/// What one test case asks: its requests, their prompt tokens (low,
/// high), and its judge calls with theirs.
#[derive(Debug, Clone, Copy, Default)]
struct Cost {
    requests: u64,
    prompt: [f64; 2],
    judge_prompt: [f64; 2],
    judge_calls: u64,
    sim_calls: u64,
    sim_prompt: [f64; 2],
    sim_completion: [f64; 2],
}

/// The cost of test case `case`, whose scenario's response format is
/// `schema` characters: one request for a single-turn test case;
/// for a conversation (issue 42) one per live reply, each carrying the
/// whole history before it (the earlier live replies counted at the
/// completion estimate `completion`), so the prompt grows turn by turn.
/// Each judged reply costs one judge request per rubric that judges it,
/// carrying the conversation before it and the reply. Each simulated user
/// message of a persona conversation costs one request of the user model
/// (`user`'s completion range), carrying its persona and the conversation
/// before it.
fn case_cost(
    case: &crate::benchmark::cases::TestCase<'_>,
    schema: usize,
    tokens: &impl Fn(usize) -> [f64; 2],
    completion: [f64; 2],
    user: CompletionInput,
) -> Cost {
    use crate::benchmark::conversation::{self, Reply};
    let s = case.scenario;
    let mut script = conversation::script(case);
    let scripted = script.len();
    // A persona conversation (issue 42) is priced as if it ran to its
    // `max_turns`, each simulated message at its `max_words` (else
    // SIMULATED_CHARS): the simulator may end it sooner.
    let persona = conversation::persona_of(case);
    // The simulator's prompt besides the conversation, and its completion
    // per message: the stored mean, else the message assumed here, up to
    // the user model's cap.
    let (mut sim_fixed, mut sim_completion) = (0usize, [0.0f64; 2]);
    if let Some(p) = persona {
        let chars = p
            .max_words
            .map_or(SIMULATED_CHARS, |w| (w as usize * 6).min(SIMULATED_CHARS));
        sim_fixed = super::simulate::system_message(p).chars().count()
            + super::simulate::REMINDER.chars().count()
            + 2;
        let (range, _) = user.range();
        let low = match user.stored_mean {
            Some(_) => range[0],
            None => tokens(chars)[0].min(range[1]),
        };
        sim_completion = [low, range[1]];
        for _ in 0..p.max_turns {
            script.push(conversation::Exchange {
                user: std::borrow::Cow::Owned("x".repeat(chars)),
                turn: None,
                reply: Reply::Live { judged: true },
            });
        }
    }
    let mut c = Cost::default();
    // Characters of the history so far, and the live replies in it.
    let (mut history, mut replies) = (0usize, 0u64);
    for (k, ex) in script.iter().enumerate() {
        if k >= scripted {
            // The simulator writes this message first, from the
            // conversation so far (roles swapped).
            let t = tokens(sim_fixed + history);
            for i in 0..2 {
                c.sim_prompt[i] += t[i] + replies as f64 * completion[i];
                c.sim_completion[i] += sim_completion[i];
            }
            c.sim_calls += 1;
        }
        let user = ex.user.chars().count();
        match ex.reply {
            Reply::Fixed(t) => {
                history += user + t.component.prompt.chars().count();
                continue;
            }
            Reply::Live { judged } => {
                c.requests += 1;
                let t = tokens(history + user + schema);
                for i in 0..2 {
                    c.prompt[i] += t[i] + replies as f64 * completion[i];
                }
                if judged && s.evaluation.is_judged() {
                    for rubric in case.rubrics().iter().filter(|r| {
                        ex.turn
                            .and_then(|t| t.criteria.as_ref())
                            .is_none_or(|c| c.contains(&r.code))
                    }) {
                        let chars = judge::prompt(rubric, &ex.user, "").chars().count()
                            + history
                            + judge::response_format(rubric).to_string().chars().count();
                        let t = tokens(chars);
                        // The reply it judges and the earlier ones in its history.
                        let carried = (replies + 1) as f64;
                        c.judge_prompt[0] += t[0] + carried * completion[0];
                        c.judge_prompt[1] +=
                            (t[1] + carried * completion[1]) * JUDGE_ATTEMPTS as f64;
                        c.judge_calls += 1;
                    }
                }
                history += user;
                replies += 1;
            }
        }
    }
    c
}

/// Sums model estimates into the batch's.
pub fn total(
    models: Vec<ModelEstimate>,
    judge_model: Option<&str>,
    judge: ModelInputs,
    user_model: Option<&str>,
    user: ModelInputs,
) -> Estimate {
    let judged = models.iter().any(|m| m.judge_requests[0] > 0);
    let simulated = models.iter().any(|m| m.simulator_requests > 0);
    let cost_usd = models.iter().try_fold([0.0, 0.0], |acc, m| {
        m.cost_usd.map(|c| [acc[0] + c[0], acc[1] + c[1]])
    });
    Estimate {
        models,
        judge_model: judge_model.filter(|_| judged).map(str::to_string),
        judge_completion_basis: judged.then(|| judge.completion.range().1),
        judge_price: judge.price.filter(|_| judged),
        user_model: user_model.filter(|_| simulated).map(str::to_string),
        user_completion_basis: simulated.then(|| user.completion.simulated_basis()),
        user_price: user.price.filter(|_| simulated),
        cost_usd,
        method: METHOD,
    }
}

/// The models.yml entry of `id`, or a bare one (as `run-batch` runs it).
pub fn entry(b: &Benchmark, id: &str) -> ModelEntry {
    b.models
        .as_ref()
        .and_then(|m| m.models.iter().find(|e| e.id == id).cloned())
        .unwrap_or_else(|| ModelEntry::new(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_range_prefers_max_tokens_and_the_stored_mean() {
        let r = |max, mean| CompletionInput {
            max_tokens: max,
            stored_mean: mean,
        };
        assert_eq!(r(Some(800), None).range().0, [200.0, 800.0]);
        assert_eq!(r(Some(800), Some((300.0, 5))).range().0, [300.0, 800.0]);
        // A stored mean above the cap is capped.
        assert_eq!(r(Some(100), Some((300.0, 5))).range().0, [100.0, 100.0]);
        assert_eq!(r(None, Some((300.0, 5))).range().0, [300.0, 600.0]);
        assert_eq!(r(None, None).range().0, [500.0, 2000.0]);
    }
}
