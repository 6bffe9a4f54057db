//! Reading results back for people and scripts: one run's results with their
//! judgements (for `run-single` and `export`).

use serde::Serialize;
use serde_json::Value;
use sqlx::Row;

use crate::store::{Store, StoreError};

/// One judged criterion as stored.
#[derive(Debug, Clone, Serialize)]
pub struct JudgementRow {
    pub criterion: String,
    pub judge_model: String,
    pub verdict: Option<Value>,
    pub justification: Option<String>,
    pub passed: Option<bool>,
    pub error: Option<String>,
    pub cost_usd: f64,
}

/// One stored result with everything a reader needs.
#[derive(Debug, Clone, Serialize)]
pub struct ResultRow {
    pub run_id: i64,
    pub test_code: String,
    pub model: String,
    pub repeat_index: i64,
    pub passed: bool,
    pub matched: Option<bool>,
    pub error_kind: Option<String>,
    pub error: Option<String>,
    pub prompt: String,
    pub response: Option<String>,
    pub parsed: Option<Value>,
    pub base_severity: f64,
    pub difficulty: f64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cost_usd: f64,
    pub judge_cost_usd: f64,
    pub latency_ms: Option<i64>,
    pub cached: bool,
    pub quality: Option<Value>,
    pub judgements: Vec<JudgementRow>,
}

fn json_col(s: Option<String>) -> Option<Value> {
    s.and_then(|s| serde_json::from_str(&s).ok())
}

/// Every result of a run, in test-code order, with its judgements.
pub async fn results(store: &Store, run_id: i64) -> Result<Vec<ResultRow>, StoreError> {
    let rows = sqlx::query(
        "SELECT r.id, r.run_id, r.test_code, l.model_id, r.repeat_index, r.passed, r.matched, r.error_kind, r.error,
                p.text, r.response, r.parsed, r.base_severity, r.difficulty, r.prompt_tokens, r.completion_tokens,
                r.cost_usd, r.latency_ms, r.cached, r.quality
         FROM result r JOIN evaluation_run er ON er.id = r.run_id JOIN llm l ON l.id = er.llm_id
         JOIN prompt_text p ON p.hash = r.prompt_hash
         WHERE r.run_id = ? ORDER BY r.id",
    )
    .bind(run_id)
    .fetch_all(store.pool())
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let id: i64 = row.get(0);
        let judgements: Vec<JudgementRow> = sqlx::query(
            "SELECT criterion, judge_model, verdict, justification, passed, error, cost_usd FROM judgement WHERE result_id = ? ORDER BY id",
        )
        .bind(id)
        .fetch_all(store.pool())
        .await?
        .into_iter()
        .map(|j| JudgementRow {
            criterion: j.get(0),
            judge_model: j.get(1),
            verdict: json_col(j.get(2)),
            justification: j.get(3),
            passed: j.get(4),
            error: j.get(5),
            cost_usd: j.get(6),
        })
        .collect();
        out.push(ResultRow {
            run_id: row.get(1),
            test_code: row.get(2),
            model: row.get(3),
            repeat_index: row.get(4),
            passed: row.get(5),
            matched: row.get(6),
            error_kind: row.get(7),
            error: row.get(8),
            prompt: row.get(9),
            response: row.get(10),
            parsed: json_col(row.get(11)),
            base_severity: row.get(12),
            difficulty: row.get(13),
            prompt_tokens: row.get(14),
            completion_tokens: row.get(15),
            cost_usd: row.get(16),
            judge_cost_usd: judgements.iter().map(|j| j.cost_usd).sum(),
            latency_ms: row.get(17),
            cached: row.get(18),
            quality: json_col(row.get(19)),
            judgements,
        });
    }
    Ok(out)
}
