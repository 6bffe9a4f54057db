//! Human review (issue 20): the judged items a labelling sheet is made of,
//! the human labels `review import` stores (one transaction per sheet), and
//! the labels the report's judge calibration and `report --human` read.

use super::backend::on;
use super::decode::Row as _;
use super::decode::from_columns;
use super::reads::json_col;
use super::{Store, StoreError};
use crate::domain::{
    Imported, JudgeSpendRow, LabelRow, LabelledJudgement, NewLabel, ReviewItem, VoteRow,
};

from_columns!(JudgeSpendRow {
    run_id,
    judge_model,
    calls,
    cost_usd,
    prompt_tokens,
    completion_tokens,
    cached,
});

impl Store {
    /// Every judged criterion of a run's replies, in stored order (results
    /// without a reply have nothing to label and are left out).
    pub async fn review_items(&self, run_id: i64) -> Result<Vec<ReviewItem>, StoreError> {
        on!(&self.pool, |pool, d| {
            let rows = sqlx::query(
            "SELECT r.id AS result_id, r.test_code, r.repeat_index, b.code AS behaviour, s.code AS scenario,
                    j.criterion, j.judge_model, j.verdict, j.passed, pt.text AS prompt, r.response, r.parsed
               FROM judgement j
               JOIN result r ON r.id = j.result_id
               JOIN scenario s ON s.id = r.scenario_id
               JOIN behaviour b ON b.id = s.behaviour_id
               JOIN prompt_text pt ON pt.hash = r.prompt_hash
              WHERE r.run_id = $1 AND r.response IS NOT NULL
              ORDER BY r.id, j.id",
        )
        .bind(run_id)
        .fetch_all(pool)
        .await?;
            rows.iter()
                .map(|r| {
                    Ok(ReviewItem {
                        result_id: r.col("result_id")?,
                        test_code: r.col("test_code")?,
                        repeat_index: r.col("repeat_index")?,
                        behaviour: r.col("behaviour")?,
                        scenario: r.col("scenario")?,
                        criterion: r.col("criterion")?,
                        judge_model: r.col("judge_model")?,
                        judge_verdict: json_col(r, "verdict")?,
                        judge_passed: r.col("passed")?,
                        prompt: r.col("prompt")?,
                        response: r.col("response")?,
                        parsed: r.col("parsed")?,
                    })
                })
                .collect()
        })
    }

    /// Stores one rater's labels of a run in one transaction: a label for a
    /// (result, criterion) the rater already labelled replaces it.
    pub async fn import_labels(
        &self,
        run_id: i64,
        rater: &str,
        labels: &[NewLabel],
    ) -> Result<Imported, StoreError> {
        on!(&self.pool, |pool, d| {
            let mut tx = pool.begin_with(d.begin_write()).await?;
            let mut done = Imported::default();
            for l in labels {
                let earlier: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM human_label WHERE result_id = $1 AND criterion = $2 AND rater = $3)",
            )
            .bind(l.result_id)
            .bind(&l.criterion)
            .bind(rater)
            .fetch_one(&mut *tx)
            .await?;
                sqlx::query(
                "INSERT INTO human_label (run_id, result_id, criterion, rater, verdict, passed, note)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (result_id, criterion, rater) DO UPDATE SET
                   verdict = excluded.verdict, passed = excluded.passed, note = excluded.note,
                   imported_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
            )
            .bind(run_id)
            .bind(l.result_id)
            .bind(&l.criterion)
            .bind(rater)
            .bind(l.verdict.to_string())
            .bind(i64::from(l.passed))
            .bind(&l.note)
            .execute(&mut *tx)
            .await?;
                done.stored += 1;
                done.replaced += usize::from(earlier);
            }
            tx.commit().await?;
            Ok(done)
        })
    }

    /// Every human label of a run, by result, criterion and rater.
    pub async fn labels(&self, run_id: i64) -> Result<Vec<LabelRow>, StoreError> {
        on!(&self.pool, |pool, d| {
            let rows = sqlx::query(LABELS).bind(run_id).fetch_all(pool).await?;
            rows.iter()
                .map(|r| {
                    let verdict: String = r.col("verdict")?;
                    Ok(LabelRow {
                        result_id: r.col("result_id")?,
                        criterion: r.col("criterion")?,
                        rater: r.col("rater")?,
                        verdict: serde_json::from_str(&verdict).map_err(|e| {
                            StoreError::Integrity {
                                message: format!("a human label's verdict is not JSON: {e}"),
                                source: Some(Box::new(e)),
                            }
                        })?,
                        passed: r.col("passed")?,
                    })
                })
                .collect()
        })
    }

    /// Every judgement of a run's results that carry at least one human
    /// label (all their criteria, labelled or not), in stored order.
    pub async fn labelled_judgements(
        &self,
        run_id: i64,
    ) -> Result<Vec<LabelledJudgement>, StoreError> {
        on!(&self.pool, |pool, d| {
            let rows = sqlx::query(LABELLED_JUDGEMENTS)
                .bind(run_id)
                .fetch_all(pool)
                .await?;
            rows.iter()
                .map(|r| {
                    Ok(LabelledJudgement {
                        result_id: r.col("result_id")?,
                        scenario: r.col("scenario")?,
                        criterion: r.col("criterion")?,
                        judge_model: r.col("judge_model")?,
                        verdict: json_col(r, "verdict")?,
                        passed: r.col("passed")?,
                    })
                })
                .collect()
        })
    }

    /// Every vote of a run's panels, in stored order (none for a run with one judge).
    pub async fn votes(&self, run_id: i64) -> Result<Vec<VoteRow>, StoreError> {
        on!(&self.pool, |pool, d| {
            let rows = sqlx::query(VOTES).bind(run_id).fetch_all(pool).await?;
            rows.iter()
                .map(|r| {
                    Ok(VoteRow {
                        result_id: r.col("result_id")?,
                        scenario: r.col("scenario")?,
                        criterion: r.col("criterion")?,
                        judge_model: r.col("judge_model")?,
                        verdict: json_col(r, "verdict")?,
                    })
                })
                .collect()
        })
    }

    /// Judge spend per run and judge model: a single judge's judgements,
    /// and each panel judge's votes (a panel's combined judgement, whose
    /// cost is its votes', is not counted twice). One run, or all; from the
    /// kept totals.
    pub async fn judge_spend(&self, run_id: Option<i64>) -> Result<Vec<JudgeSpendRow>, StoreError> {
        self.per_run(judge_spend_sql, run_id).await
    }
}

/// The statement of [`Store::judge_spend`], for one run or every run.
pub(super) fn judge_spend_sql(one_run: bool) -> String {
    format!(
        "SELECT run_id, judge_model, calls, cost_usd, prompt_tokens, completion_tokens, cached
           FROM run_judge_total {} ORDER BY run_id, judge_model",
        if one_run { "WHERE run_id = $1" } else { "" }
    )
}

pub(super) const LABELS: &str =
    "SELECT result_id, criterion, rater, verdict, passed FROM human_label
              WHERE run_id = $1 ORDER BY result_id, criterion, rater";

pub(super) const LABELLED_JUDGEMENTS: &str =
    "SELECT j.result_id, s.code AS scenario, j.criterion, j.judge_model, j.verdict, j.passed
               FROM judgement j
               JOIN result r ON r.id = j.result_id
               JOIN scenario s ON s.id = r.scenario_id
              WHERE r.run_id = $1
                AND EXISTS (SELECT 1 FROM human_label h WHERE h.result_id = j.result_id)
              ORDER BY j.result_id, j.id";

pub(super) const VOTES: &str =
    "SELECT v.result_id, s.code AS scenario, v.criterion, v.judge_model, v.verdict
               FROM judge_vote v
               JOIN result r ON r.id = v.result_id
               JOIN scenario s ON s.id = r.scenario_id
              WHERE r.run_id = $1
              ORDER BY v.result_id, v.id";
