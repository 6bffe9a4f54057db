//! The reads of `helmbench view`'s test case page (issue 32): one result
//! with everything stored about it (the composed prompt, the schema, the
//! raw and parsed reply, the check and its details, each judge's verdict
//! and justification, tokens, cost, latency, what served it, retries), its
//! human labels, and the same test case in the other runs; and the one
//! write the view makes, a reviewer's label, into the table `review import`
//! fills.

use super::backend::on;
use super::decode::Row as _;
use super::{Store, StoreError};
use crate::domain::{
    CaseDetail, CaseJudgement, CaseLabel, CaseVariant, CellStatus, LaterMessage, NewLabel, Sibling,
};

const CASE: &str = "SELECT r.id AS result_id, r.run_id, l.model_id AS model, r.test_code, r.repeat_index,
        pl.code AS pillar, b.code AS behaviour, s.code AS scenario, c.code AS condition_code,
        u.code AS user_context, p.code AS perturbation, r.base_severity, r.difficulty, s.evaluation,
        s.response_format, pt.text AS prompt, r.response, r.parsed, r.matched, r.passed, r.error_kind,
        r.error, r.evaluation_details,
        r.latency_ms, r.prompt_tokens, r.completion_tokens, r.reasoning_tokens, r.cost_usd, r.cost_unknown,
        r.served_model, r.provider, r.attempts, r.cached, r.finish_reason, r.error_type, r.block, r.created_at
   FROM result r
   JOIN evaluation_run er ON er.id = r.run_id
   JOIN llm l ON l.id = er.llm_id
   JOIN scenario s ON s.id = r.scenario_id
   JOIN behaviour b ON b.id = s.behaviour_id
   JOIN pillar pl ON pl.id = b.pillar_id
   JOIN condition c ON c.id = r.condition_id
   LEFT JOIN user_context u ON u.id = r.user_context_id
   JOIN perturbation p ON p.id = r.perturbation_id
   JOIN prompt_text pt ON pt.hash = r.prompt_hash
  WHERE r.id = $1";

impl Store {
    /// Result `result_id` with everything stored about it.
    pub async fn case_detail(&self, result_id: i64) -> Result<CaseDetail, StoreError> {
        on!(&self.pool, |pool, d| {
            let r = sqlx::query(CASE)
                .bind(result_id)
                .fetch_optional(pool)
                .await?
                .ok_or_else(|| StoreError::NotFound(format!("no result with id {result_id}")))?;
            let passed: bool = r.val("passed");
            let error_kind: Option<String> = r.val("error_kind");
            Ok(CaseDetail {
                result_id: r.val("result_id"),
                run_id: r.val("run_id"),
                model: r.val("model"),
                test_code: r.val("test_code"),
                repeat_index: r.val("repeat_index"),
                pillar: r.val("pillar"),
                behaviour: r.val("behaviour"),
                scenario: r.val("scenario"),
                condition: r.val("condition_code"),
                user_context: r.val("user_context"),
                perturbation: r.val("perturbation"),
                base_severity: r.val("base_severity"),
                difficulty: r.val("difficulty"),
                evaluation: r.val("evaluation"),
                response_format: r.val("response_format"),
                prompt: r.val("prompt"),
                response: r.val("response"),
                parsed: r.val("parsed"),
                matched: r.val("matched"),
                passed,
                status: CellStatus::of(passed, error_kind.as_deref()),
                error_kind,
                error: r.val("error"),
                evaluation_details: r.val("evaluation_details"),
                latency_ms: r.val("latency_ms"),
                prompt_tokens: r.val("prompt_tokens"),
                completion_tokens: r.val("completion_tokens"),
                reasoning_tokens: r.val("reasoning_tokens"),
                cost_usd: r.val("cost_usd"),
                cost_unknown: r.val("cost_unknown"),
                served_model: r.val("served_model"),
                provider: r.val("provider"),
                attempts: r.val("attempts"),
                cached: r.val("cached"),
                finish_reason: r.val("finish_reason"),
                error_type: r.val("error_type"),
                block: r.val("block"),
                created_at: r.val("created_at"),
            })
        })
    }

    /// The judgements of a result (the ones that count first), then its
    /// panel's votes, each in stored order.
    pub async fn case_judgements(&self, result_id: i64) -> Result<Vec<CaseJudgement>, StoreError> {
        on!(&self.pool, |pool, d| {
            let rows = sqlx::query(
            "SELECT criterion, judge_model, verdict, justification, passed, error, cost_usd,
                    prompt_tokens, completion_tokens, 0 AS vote, id FROM judgement WHERE result_id = $1
             UNION ALL
             SELECT criterion, judge_model, verdict, justification, passed, error, cost_usd,
                    prompt_tokens, completion_tokens, 1 AS vote, id FROM judge_vote WHERE result_id = $1
             ORDER BY vote, id",
        )
        .bind(result_id)
        .fetch_all(pool)
        .await?;
            Ok(rows
                .iter()
                .map(|r| CaseJudgement {
                    criterion: r.val("criterion"),
                    judge_model: r.val("judge_model"),
                    verdict: r.val("verdict"),
                    justification: r.val("justification"),
                    passed: r.val("passed"),
                    error: r.val("error"),
                    cost_usd: r.val("cost_usd"),
                    prompt_tokens: r.val("prompt_tokens"),
                    completion_tokens: r.val("completion_tokens"),
                    vote: r.val("vote"),
                })
                .collect())
        })
    }

    /// Every human label of a result, by criterion and rater.
    pub async fn case_labels(&self, result_id: i64) -> Result<Vec<CaseLabel>, StoreError> {
        on!(&self.pool, |pool, d| {
            let rows = sqlx::query(
                "SELECT criterion, rater, verdict, passed, note, imported_at AS at FROM human_label
              WHERE result_id = $1 ORDER BY criterion, rater",
            )
            .bind(result_id)
            .fetch_all(pool)
            .await?;
            Ok(rows
                .iter()
                .map(|r| CaseLabel {
                    criterion: r.val("criterion"),
                    rater: r.val("rater"),
                    verdict: r.val("verdict"),
                    passed: r.val("passed"),
                    note: r.val("note"),
                    at: r.val("at"),
                })
                .collect())
        })
    }

    /// The same test case and repeat in every other run, newest run first.
    pub async fn case_siblings(
        &self,
        result_id: i64,
        test_code: &str,
        repeat_index: i64,
    ) -> Result<Vec<Sibling>, StoreError> {
        on!(&self.pool, |pool, d| {
            let rows = sqlx::query(
            "SELECT r.id AS result_id, r.run_id, l.model_id AS model, r.passed, r.error_kind, r.response, r.parsed
               FROM result r
               JOIN evaluation_run er ON er.id = r.run_id
               JOIN llm l ON l.id = er.llm_id
              WHERE r.test_code = $1 AND r.repeat_index = $2 AND r.id <> $3
              ORDER BY r.run_id DESC LIMIT 20",
        )
        .bind(test_code)
        .bind(repeat_index)
        .bind(result_id)
        .fetch_all(pool)
        .await?;
            Ok(rows
                .iter()
                .map(|r| Sibling {
                    result_id: r.val("result_id"),
                    run_id: r.val("run_id"),
                    model: r.val("model"),
                    status: CellStatus::of(
                        r.val("passed"),
                        r.val::<Option<String>>("error_kind").as_deref(),
                    ),
                    response: r.val("response"),
                    parsed: r.val("parsed"),
                })
                .collect())
        })
    }

    /// Test case `original` (a code without `~`) and each of its variants
    /// of the user's words (`original~name`, issue 43) in run `run_id` at
    /// repeat `repeat_index`, the original first and then by name: each
    /// one's verdict, its message 1 text (the perturbation's text as
    /// stored with the run) and, in a conversation, its later user
    /// messages as sent.
    pub async fn case_variants(
        &self,
        run_id: i64,
        original: &str,
        repeat_index: i64,
    ) -> Result<Vec<CaseVariant>, StoreError> {
        // `original~…` as a range of codes, so the result index answers
        // (byte order on both stores: `~` sorts below 0x7f, the byte after
        // every variant's name).
        let (lo, hi) = (format!("{original}~"), format!("{original}\u{7f}"));
        on!(&self.pool, |pool| {
            // A row per later user message (one row for a single turn).
            let rows = sqlx::query(
                "SELECT r.id AS result_id, r.test_code, p.variant, p.variant_seed, p.prompt,
                        r.passed, r.error_kind, t.turn_index, t.turn_code, t.user_message
                   FROM result r JOIN perturbation p ON p.id = r.perturbation_id
                   LEFT JOIN turn t ON t.run_id = r.run_id AND t.test_code = r.test_code
                        AND t.repeat_index = r.repeat_index AND t.turn_index > 0
                  WHERE r.run_id = $1 AND r.repeat_index = $2
                    AND (r.test_code = $3 OR (r.test_code > $4 AND r.test_code < $5))
                  ORDER BY r.test_code, t.turn_index",
            )
            .bind(run_id)
            .bind(repeat_index)
            .bind(original)
            .bind(&lo)
            .bind(&hi)
            .fetch_all(pool)
            .await?;
            let mut out: Vec<CaseVariant> = Vec::new();
            for r in &rows {
                let result_id: i64 = r.val("result_id");
                if out.last().is_none_or(|v| v.result_id != result_id) {
                    out.push(CaseVariant {
                        result_id,
                        test_code: r.val("test_code"),
                        variant: r.val("variant"),
                        variant_seed: r.val("variant_seed"),
                        status: CellStatus::of(
                            r.val("passed"),
                            r.val::<Option<String>>("error_kind").as_deref(),
                        ),
                        message: r.val("prompt"),
                        later: Vec::new(),
                    });
                }
                if let Some(turn_index) = r.val::<Option<i64>>("turn_index") {
                    let v = out.last_mut().expect("pushed above");
                    v.later.push(LaterMessage {
                        turn_index,
                        turn_code: r.val("turn_code"),
                        text: r.val("user_message"),
                    });
                }
            }
            Ok(out)
        })
    }

    /// Stores one reviewer's label of one judged criterion of a result, in
    /// the table `review import` fills (a new label from the same reviewer
    /// replaces the earlier one, as a re-imported sheet does). Refuses a
    /// criterion the result was not judged on.
    pub async fn store_view_label(
        &self,
        result_id: i64,
        criterion: &str,
        rater: &str,
        verdict: &serde_json::Value,
        passed: bool,
        note: Option<&str>,
    ) -> Result<(), StoreError> {
        on!(&self.pool, |pool, d| {
            let run_id: Option<i64> = sqlx::query_scalar(
                "SELECT r.run_id FROM judgement j JOIN result r ON r.id = j.result_id
              WHERE j.result_id = $1 AND j.criterion = $2",
            )
            .bind(result_id)
            .bind(criterion)
            .fetch_optional(pool)
            .await?;
            let Some(run_id) = run_id else {
                return Err(StoreError::NotFound(format!(
                    "result {result_id} has no judged criterion {criterion}"
                )));
            };
            let label = NewLabel {
                result_id,
                criterion: criterion.to_string(),
                verdict: verdict.clone(),
                passed,
                note: note.map(str::to_string),
            };
            self.import_labels(run_id, rater, &[label]).await?;
            Ok(())
        })
    }

    /// How many human labels a run has (the Run page's count).
    pub async fn label_count(&self, run_id: i64) -> Result<i64, StoreError> {
        on!(&self.pool, |pool, d| {
            Ok(
                sqlx::query_scalar("SELECT COUNT(*) FROM human_label WHERE run_id = $1")
                    .bind(run_id)
                    .fetch_one(pool)
                    .await?,
            )
        })
    }
}
