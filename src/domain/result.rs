//! A result as the runner writes it ([`NewResult`] with its
//! [`NewJudgement`]s and [`DiscardedCharge`]s) and as every reader sees it
//! ([`StoredResult`]), with what one result contributes to a score (SPEC
//! §8). The store maps rows to these; scoring, reports and the runner use
//! them without knowing the store.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Block, ErrorKind, QualityScores};

/// Who served a reply and what its tokens were beyond the counts (issue
/// 22): the reply's `model` and `provider`, its reasoning tokens (part of
/// the completion tokens) and cached prompt tokens (part of the prompt
/// tokens). Flattened into every row that carries it, so JSON keys stay flat.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServedBy {
    #[serde(default)]
    pub served_model: Option<String>,
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub reasoning_tokens: i64,
    #[serde(default)]
    pub cached_prompt_tokens: i64,
}

/// A cost read back from JSON, where an unknown cost (NaN) was written as
/// `null` (JSON has no NaN): `null` is NaN again, stored as unknown, never
/// as $0. Without it a result of unknown cost in a run's log or pending
/// file could not be read back, and a resume set it aside as damaged.
fn unknown_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// One judged criterion of a result.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NewJudgement {
    pub criterion: String,
    pub judge_model: String,
    pub verdict: Option<Value>,
    pub justification: Option<String>,
    pub passed: Option<bool>,
    pub error: Option<String>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// NaN when a judge call's cost was unusable: stored as unknown.
    #[serde(deserialize_with = "unknown_if_null")]
    pub cost_usd: f64,
    /// With bring-your-own-key: what the provider billed the user's key.
    #[serde(default, deserialize_with = "unknown_if_null")]
    pub byok_cost_usd: f64,
    pub generation_id: Option<String>,
    pub cached: bool,
    pub request_hash: Option<String>,
    pub response: Option<String>,
    /// With several judges: each judge's own judgement (stored as votes);
    /// this one is their combination.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub votes: Vec<NewJudgement>,
    /// What served the (last) judge call; tokens summed over its calls.
    #[serde(flatten, default)]
    pub served: ServedBy,
}

/// What the provider charged for a request beyond the reply that was kept
/// (see the `discarded_charge` table).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DiscardedCharge {
    pub run_id: i64,
    pub scenario_id: Option<i64>,
    pub test_code: String,
    pub repeat_index: i64,
    /// `model` or `judge`.
    pub call: String,
    pub attempts: i64,
    #[serde(deserialize_with = "unknown_if_null")]
    pub cost_usd: f64,
    /// How many of `attempts` were charged an amount nobody knows (cut at
    /// the size limit, abandoned on a timeout, a cost that is not a usable
    /// number): counted apart, never summed as $0.
    #[serde(default)]
    pub unknown_attempts: i64,
    pub reason: Option<String>,
}

/// One test case's outcome, as the runner hands it to the writer.
/// (De)serialisable so results that cannot be written can be kept in a
/// file and written by the next run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NewResult {
    pub run_id: i64,
    pub test_code: String,
    pub repeat_index: i64,
    pub scenario_id: i64,
    pub condition_id: i64,
    pub user_context_id: Option<i64>,
    pub perturbation_id: i64,
    pub prompt_hash: String,
    pub prompt: String,
    pub request_hash: String,
    pub base_severity: f64,
    pub difficulty: f64,
    pub response: Option<String>,
    pub parsed: Option<Value>,
    pub matched: Option<bool>,
    pub passed: bool,
    /// `format`, `provider` or `judge`; None for a clean verdict.
    pub error_kind: Option<ErrorKind>,
    pub error: Option<String>,
    pub evaluation_details: Value,
    pub latency_ms: Option<i64>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// NaN (or any value that is not finite) when the provider's figure was
    /// unusable: stored as an unknown cost.
    #[serde(deserialize_with = "unknown_if_null")]
    pub cost_usd: f64,
    pub upstream_cost_usd: Option<f64>,
    /// With bring-your-own-key: what the provider billed the user's key on
    /// top of `cost_usd` (OpenRouter's fee); 0 otherwise.
    #[serde(default, deserialize_with = "unknown_if_null")]
    pub byok_cost_usd: f64,
    pub generation_id: Option<String>,
    pub finish_reason: Option<String>,
    pub attempts: i64,
    pub cached: bool,
    pub quality: Option<QualityScores>,
    pub judgements: Vec<NewJudgement>,
    /// Charges of attempts retried or refused while getting this result.
    #[serde(default)]
    pub charges: Vec<DiscardedCharge>,
    /// Replaces a stored result of the same test case that has a judge
    /// error (a resume judging it again); the old row's costs are kept as
    /// a discarded charge.
    #[serde(default)]
    pub replaces: bool,
    /// What served the reply, which routing may make differ from the request.
    #[serde(flatten, default)]
    pub served: ServedBy,
    /// With a provider error: its `error_type` and `provider_code`.
    #[serde(default)]
    pub error_type: Option<String>,
    /// What the provider said when it blocked the request (or the model
    /// refused through an error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<Block>,
    #[serde(default)]
    pub provider_code: Option<String>,
}

/// One stored result as every reader sees it: which test case it answered,
/// with what severity, and its verdict. Scoring keeps only this (`compare`
/// reads nothing else); `export`, `run-single` and the report read it inside
/// a [`ResultRecord`]. What scoring does with it is in `scoring::analysis`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredResult {
    /// `P1-B1-S1-C1-PT3` or `P1-B1-S1-C1-U1-PT3`
    pub test_code: String,
    pub repeat_index: i64,
    /// `P1-B1`
    pub behaviour: String,
    /// `P1-B1-S1`
    pub scenario: String,
    /// `C1`
    pub condition: String,
    /// `U1`
    pub user_context: Option<String>,
    /// `PT3`
    pub perturbation: String,
    /// Perturbation severity + user context severity; its sign only says
    /// what a failure costs.
    pub base_severity: f64,
    /// Condition difficulty, 0..10.
    pub difficulty: f64,
    /// The test-case verdict: the check as written, never inverted.
    pub passed: bool,
    /// Whether the evaluation check held.
    pub matched: Option<bool>,
    /// `format`, `judge`, `provider`, or null.
    pub error_kind: Option<ErrorKind>,
}

impl StoredResult {
    /// Whether the result enters scoring: judge and provider errors do not (no
    /// reply was judged), nor do blocked and refused test cases (left out:
    /// see [`StoredResult::counted_as_miss`] for `--blocked-as fail`);
    /// format failures do, as misses.
    pub fn is_scored(&self) -> bool {
        self.error_kind.is_none_or(ErrorKind::is_scored)
    }

    /// Whether the provider blocked the test case or the model refused it
    /// through an error: it has no answer to judge.
    pub fn is_blocked(&self) -> bool {
        self.error_kind.is_some_and(ErrorKind::is_block)
    }

    /// This result as `--blocked-as fail` scores it: a blocked or refused
    /// test case becomes a miss at its severity (no error kind, not
    /// passed); any other result is unchanged.
    pub fn counted_as_miss(&self) -> StoredResult {
        let mut r = self.clone();
        if r.is_blocked() {
            r.error_kind = None;
            r.passed = false;
            r.matched = None;
        }
        r
    }

    /// `(max cost, actual cost)` this result contributes: `|base|` to the
    /// maximum, and `|base| * (1 - difficulty / 10)` to the actual cost when it
    /// failed (a miss for `base > 0`, a wrongful flag for `base < 0`).
    pub fn cost(&self) -> (f64, f64) {
        if !self.is_scored() || self.base_severity == 0.0 || self.base_severity.is_nan() {
            return (0.0, 0.0);
        }
        let max = self.base_severity.abs();
        let scale = (1.0 - self.difficulty / 10.0).clamp(0.0, 1.0);
        let actual = if self.passed { 0.0 } else { max * scale };
        (max, actual)
    }
}

#[cfg(test)]
impl StoredResult {
    /// A result from its test code (`P1-B1-S1-C1-PT3` or with `-U1-`), for tests.
    pub fn of_code(test_code: &str, base_severity: f64, difficulty: f64, passed: bool) -> Self {
        let parts: Vec<&str> = test_code.split('-').collect();
        StoredResult {
            test_code: test_code.into(),
            behaviour: parts[..2].join("-"),
            scenario: parts[..3].join("-"),
            condition: parts[3].into(),
            user_context: (parts.len() == 6).then(|| parts[4].to_string()),
            perturbation: parts[parts.len() - 1].into(),
            repeat_index: 0,
            base_severity,
            difficulty,
            passed,
            matched: None,
            error_kind: None,
        }
    }
}

/// One judged criterion of a stored result, as read back with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgementRecord {
    pub criterion: String,
    pub judge_model: String,
    pub verdict: Option<Value>,
    pub passed: Option<bool>,
    pub justification: Option<String>,
    pub error: Option<String>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cost_usd: f64,
    pub cached: bool,
    /// What served the judge's answer.
    #[serde(flatten, default)]
    pub served: ServedBy,
}

/// Verdict counts of one judged criterion of one scenario.
#[derive(Debug, Clone)]
pub struct CriterionCount {
    pub scenario: String,
    pub criterion: String,
    pub evaluations: i64,
    pub passed: i64,
    pub failed: i64,
    pub judge_errors: i64,
}

/// A stored result as read back: the one read model of the `result` table
/// that `export` (a JSONL line as serialised here, or a CSV row),
/// `run-single` and the report use; scoring keeps its [`StoredResult`].
/// Read without judgements (the report's stream), `judgements` is empty
/// and `judge_cost_usd` 0; read without prompts, `prompt` is `None`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultRecord {
    /// The row's id: how a result's judgements and labels name it.
    #[serde(skip)]
    pub id: i64,
    pub run_id: i64,
    pub model: String,
    #[serde(flatten)]
    pub result: StoredResult,
    /// The error message.
    pub error: Option<String>,
    /// The raw reply.
    pub response: Option<String>,
    pub parsed: Option<Value>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// Provider-reported cost of the model call.
    pub cost_usd: f64,
    pub upstream_cost_usd: Option<f64>,
    /// Provider-reported cost of the judge calls.
    pub judge_cost_usd: f64,
    pub latency_ms: Option<i64>,
    pub attempts: i64,
    pub cached: bool,
    pub finish_reason: Option<String>,
    pub generation_id: Option<String>,
    pub created_at: String,
    pub judgements: Vec<JudgementRecord>,
    /// The stored keyword quality scores.
    pub quality: Option<QualityScores>,
    pub prompt_hash: String,
    /// The composed prompt, when read with prompts (`--with-prompts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The model (`served_model`) and provider that served the reply, which
    /// routing may make differ from `model` (null before they were stored),
    /// and its reasoning and cached prompt tokens.
    #[serde(flatten, default)]
    pub served: ServedBy,
    /// With a provider error: `error.metadata.error_type` and `provider_code`.
    #[serde(default)]
    pub error_type: Option<String>,
    #[serde(default)]
    pub provider_code: Option<String>,
    /// A blocked or refused test case: what the provider said.
    #[serde(default)]
    pub block: Option<Block>,
}

#[cfg(test)]
impl ResultRecord {
    /// A record of `result` with nothing else stored, for tests.
    pub fn of(result: StoredResult) -> Self {
        ResultRecord {
            id: 0,
            run_id: 1,
            model: "m".into(),
            result,
            error: None,
            response: None,
            parsed: None,
            prompt_tokens: 0,
            completion_tokens: 0,
            cost_usd: 0.0,
            upstream_cost_usd: None,
            judge_cost_usd: 0.0,
            latency_ms: None,
            attempts: 1,
            cached: false,
            finish_reason: None,
            generation_id: None,
            created_at: String::new(),
            judgements: Vec::new(),
            quality: None,
            prompt_hash: String::new(),
            prompt: None,
            served: ServedBy::default(),
            error_type: None,
            provider_code: None,
            block: None,
        }
    }
}

/// What a call cost in all: OpenRouter's figure plus, with
/// bring-your-own-key, what the provider billed the user's own key. What
/// budgets count. An unknown (not finite) figure counts as nothing.
pub fn billed(cost_usd: f64, byok_cost_usd: f64) -> f64 {
    let known = |c: f64| if c.is_finite() { c } else { 0.0 };
    known(cost_usd) + known(byok_cost_usd)
}

impl NewResult {
    /// The model call's cost in all (see [`billed`]).
    pub fn billed_usd(&self) -> f64 {
        billed(self.cost_usd, self.byok_cost_usd)
    }

    /// Paid work of this test case that is not kept, as discarded charges
    /// with `reason`: the reply when `reply` (unless reused from the
    /// cache), and `judgements` (one attempt per judge call a judgement
    /// made, a panel's votes each), at what the provider charged (as the
    /// `discarded_charge` rows of a retired judge error count them).
    pub fn paid_as_charges(
        &self,
        reply: bool,
        judgements: &[NewJudgement],
        reason: &str,
    ) -> Vec<DiscardedCharge> {
        let charge =
            |call: &str, attempts: i64, cost_usd: f64, unknown_attempts: i64| DiscardedCharge {
                run_id: self.run_id,
                scenario_id: Some(self.scenario_id),
                test_code: self.test_code.clone(),
                repeat_index: self.repeat_index,
                call: call.into(),
                attempts,
                cost_usd,
                unknown_attempts,
                reason: Some(reason.into()),
            };
        let mut charges = Vec::new();
        if reply && !self.cached && self.attempts > 0 {
            let known = self.cost_usd.is_finite();
            charges.push(charge(
                "model",
                1,
                if known { self.cost_usd } else { 0.0 },
                i64::from(!known),
            ));
        }
        let (mut attempts, mut cost, mut unknown) = (0, 0.0, 0);
        for j in judgements {
            let calls = if j.votes.is_empty() {
                i64::from(!j.cached)
            } else {
                j.votes.iter().filter(|v| !v.cached).count() as i64
            };
            attempts += calls;
            if j.cost_usd.is_finite() {
                cost += j.cost_usd;
            } else {
                unknown += calls;
            }
        }
        if attempts > 0 {
            charges.push(charge("judge", attempts, cost, unknown));
        }
        charges
    }
}

impl NewJudgement {
    /// The judge calls' cost in all (see [`billed`]).
    pub fn billed_usd(&self) -> f64 {
        billed(self.cost_usd, self.byok_cost_usd)
    }
}
