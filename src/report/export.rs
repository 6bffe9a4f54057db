//! `export`: every stored result as CSV or JSONL, streamed row by row from
//! SQLite (a `fetch` stream, never `fetch_all`), so memory stays flat however
//! large the database is.

use std::io::Write;

use futures_util::TryStreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::Row;

use crate::scoring::quality::QualityScores;
use crate::store::Store;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("database query failed: {0}")]
    Query(#[from] sqlx::Error),
    #[error("cannot write the export: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot write CSV: {0}")]
    Csv(#[from] csv::Error),
    #[error("cannot write JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl From<ExportError> for crate::Error {
    fn from(e: ExportError) -> Self {
        match e {
            ExportError::Query(q) => crate::Error::Store(q.to_string()),
            other => crate::Error::Tool(other.to_string()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Csv,
    Jsonl,
}

/// One judged criterion of an exported result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportJudgement {
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
}

/// One exported result: a JSONL line, or a CSV row (nested values as JSON text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportRow {
    pub run_id: i64,
    pub model: String,
    pub test_code: String,
    pub repeat_index: i64,
    pub behaviour: String,
    pub scenario: String,
    pub condition: String,
    pub user_context: Option<String>,
    pub perturbation: String,
    pub base_severity: f64,
    pub difficulty: f64,
    /// The test-case verdict: the check as written, never inverted.
    pub passed: bool,
    /// Whether the evaluation check held.
    pub matched: Option<bool>,
    /// `format`, `judge`, `provider`, or null.
    pub error_kind: Option<String>,
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
    pub judgements: Vec<ExportJudgement>,
    pub quality: Option<QualityScores>,
    pub prompt_hash: String,
    /// The composed prompt, with `--with-prompts` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
}

/// The CSV columns, in order; must match [`csv_record`].
pub const CSV_HEADER: [&str; 37] = [
    "run_id",
    "model",
    "test_code",
    "repeat_index",
    "behaviour",
    "scenario",
    "condition",
    "user_context",
    "perturbation",
    "base_severity",
    "difficulty",
    "passed",
    "matched",
    "error_kind",
    "error",
    "response",
    "parsed",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "upstream_cost_usd",
    "judge_cost_usd",
    "latency_ms",
    "attempts",
    "cached",
    "finish_reason",
    "generation_id",
    "created_at",
    "judge_verdicts",
    "judgements",
    "quality_empathy",
    "quality_helpfulness",
    "quality_safety",
    "quality_clarity",
    "quality_overall",
    "quality_weighted",
    "prompt_hash",
];

fn cell<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(ToString::to_string).unwrap_or_default()
}

/// `CR1=SAFE; CR2=UNSAFE`: the verdicts at a glance for spreadsheet users.
fn verdict_summary(judgements: &[ExportJudgement]) -> String {
    judgements
        .iter()
        .map(|j| {
            let v = match &j.verdict {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => "error".into(),
            };
            format!("{}={v}", j.criterion)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The CSV fields of a row (plus the prompt when exported).
pub fn csv_record(r: &ExportRow) -> Vec<String> {
    let q = |f: fn(&QualityScores) -> f64| r.quality.as_ref().map(f);
    let mut fields = vec![
        r.run_id.to_string(),
        r.model.clone(),
        r.test_code.clone(),
        r.repeat_index.to_string(),
        r.behaviour.clone(),
        r.scenario.clone(),
        r.condition.clone(),
        cell(&r.user_context),
        r.perturbation.clone(),
        r.base_severity.to_string(),
        r.difficulty.to_string(),
        r.passed.to_string(),
        cell(&r.matched),
        cell(&r.error_kind),
        cell(&r.error),
        cell(&r.response),
        cell(&r.parsed),
        r.prompt_tokens.to_string(),
        r.completion_tokens.to_string(),
        r.cost_usd.to_string(),
        cell(&r.upstream_cost_usd),
        r.judge_cost_usd.to_string(),
        cell(&r.latency_ms),
        r.attempts.to_string(),
        r.cached.to_string(),
        cell(&r.finish_reason),
        cell(&r.generation_id),
        r.created_at.clone(),
        verdict_summary(&r.judgements),
        if r.judgements.is_empty() {
            String::new()
        } else {
            serde_json::to_string(&r.judgements).unwrap_or_default()
        },
        cell(&q(|x| x.empathy)),
        cell(&q(|x| x.helpfulness)),
        cell(&q(|x| x.safety)),
        cell(&q(|x| x.clarity)),
        cell(&q(|x| x.overall)),
        cell(&q(|x| x.weighted)),
        r.prompt_hash.clone(),
    ];
    if let Some(p) = &r.prompt {
        fields.push(p.clone());
    }
    fields
}

/// The judgements as SQLite aggregates them (one JSON array per result, in
/// stored order), so each result stays one row of the stream.
#[derive(Deserialize)]
struct RawJudgement {
    criterion: String,
    judge_model: String,
    verdict: Option<Value>,
    passed: Option<i64>,
    justification: Option<String>,
    error: Option<String>,
    prompt_tokens: i64,
    completion_tokens: i64,
    cost_usd: f64,
    cached: i64,
}

const QUERY: &str = "SELECT r.run_id, l.model_id, r.test_code, r.repeat_index, b.code, s.code, c.code, u.code, p.code,
    r.base_severity, r.difficulty, r.passed, r.matched, r.error_kind, r.error, r.response, r.parsed,
    r.prompt_tokens, r.completion_tokens, r.cost_usd, r.upstream_cost_usd, r.latency_ms, r.attempts, r.cached,
    r.finish_reason, r.generation_id, r.created_at,
    (SELECT json_group_array(json_object('criterion', j.criterion, 'judge_model', j.judge_model,
            'verdict', json(j.verdict), 'passed', j.passed, 'justification', j.justification, 'error', j.error,
            'prompt_tokens', j.prompt_tokens, 'completion_tokens', j.completion_tokens, 'cost_usd', j.cost_usd,
            'cached', j.cached) ORDER BY j.id)
       FROM judgement j WHERE j.result_id = r.id),
    r.quality, r.prompt_hash, CASE WHEN ? THEN (SELECT text FROM prompt_text WHERE hash = r.prompt_hash) END
  FROM result r
  JOIN evaluation_run er ON er.id = r.run_id
  JOIN llm l ON l.id = er.llm_id
  JOIN scenario s ON s.id = r.scenario_id
  JOIN behaviour b ON b.id = s.behaviour_id
  JOIN condition c ON c.id = r.condition_id
  LEFT JOIN user_context u ON u.id = r.user_context_id
  JOIN perturbation p ON p.id = r.perturbation_id
  WHERE (? IS NULL OR r.run_id = ?)
  ORDER BY r.id";

fn row_of(row: &sqlx::sqlite::SqliteRow) -> Result<ExportRow, ExportError> {
    let json_col = |i: usize| -> Option<Value> {
        row.get::<Option<String>, _>(i)
            .and_then(|s| serde_json::from_str(&s).ok())
    };
    let raw: Vec<RawJudgement> = match row.get::<Option<String>, _>(27) {
        Some(s) => serde_json::from_str(&s)?,
        None => Vec::new(),
    };
    let judgements: Vec<ExportJudgement> = raw
        .into_iter()
        .map(|j| ExportJudgement {
            criterion: j.criterion,
            judge_model: j.judge_model,
            verdict: j.verdict,
            passed: j.passed.map(|p| p != 0),
            justification: j.justification,
            error: j.error,
            prompt_tokens: j.prompt_tokens,
            completion_tokens: j.completion_tokens,
            cost_usd: j.cost_usd,
            cached: j.cached != 0,
        })
        .collect();
    Ok(ExportRow {
        run_id: row.get(0),
        model: row.get(1),
        test_code: row.get(2),
        repeat_index: row.get(3),
        behaviour: row.get(4),
        scenario: row.get(5),
        condition: row.get(6),
        user_context: row.get(7),
        perturbation: row.get(8),
        base_severity: row.get(9),
        difficulty: row.get(10),
        passed: row.get(11),
        matched: row.get(12),
        error_kind: row.get(13),
        error: row.get(14),
        response: row.get(15),
        parsed: json_col(16),
        prompt_tokens: row.get(17),
        completion_tokens: row.get(18),
        cost_usd: row.get(19),
        upstream_cost_usd: row.get(20),
        judge_cost_usd: judgements.iter().map(|j| j.cost_usd).sum(),
        latency_ms: row.get(21),
        attempts: row.get(22),
        cached: row.get(23),
        finish_reason: row.get(24),
        generation_id: row.get(25),
        created_at: row.get(26),
        judgements,
        quality: row
            .get::<Option<String>, _>(28)
            .and_then(|s| serde_json::from_str(&s).ok()),
        prompt_hash: row.get(29),
        prompt: row.get(30),
    })
}

/// Writes every result of `run_id` (every run when `None`) to `out`, one row
/// at a time; returns the number of results written. `out` is flushed.
pub async fn export(
    store: &Store,
    run_id: Option<i64>,
    format: Format,
    with_prompts: bool,
    out: &mut dyn Write,
) -> Result<u64, ExportError> {
    let mut rows = sqlx::query(QUERY)
        .bind(with_prompts)
        .bind(run_id)
        .bind(run_id)
        .fetch(store.pool());
    let mut count = 0u64;
    match format {
        Format::Jsonl => {
            while let Some(row) = rows.try_next().await? {
                serde_json::to_writer(&mut *out, &row_of(&row)?)?;
                out.write_all(b"\n")?;
                count += 1;
            }
            out.flush()?;
        }
        Format::Csv => {
            let mut w = csv::Writer::from_writer(&mut *out);
            let mut header: Vec<&str> = CSV_HEADER.to_vec();
            if with_prompts {
                header.push("prompt");
            }
            w.write_record(&header)?;
            while let Some(row) = rows.try_next().await? {
                w.write_record(csv_record(&row_of(&row)?))?;
                count += 1;
            }
            w.flush()?;
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judgement(criterion: &str, verdict: Option<Value>) -> ExportJudgement {
        ExportJudgement {
            criterion: criterion.into(),
            judge_model: "j".into(),
            verdict,
            passed: None,
            justification: None,
            error: None,
            prompt_tokens: 0,
            completion_tokens: 0,
            cost_usd: 0.0,
            cached: false,
        }
    }

    #[test]
    fn verdict_summary_lists_each_criterion() {
        let js = vec![
            judgement("CR1", Some(Value::String("SAFE".into()))),
            judgement("CR2", Some(serde_json::json!(["A", "B"]))),
            judgement("CR3", None),
        ];
        assert_eq!(
            verdict_summary(&js),
            "CR1=SAFE; CR2=[\"A\",\"B\"]; CR3=error"
        );
        assert_eq!(verdict_summary(&[]), "");
    }

    #[test]
    fn header_and_record_have_the_same_width() {
        let r = ExportRow {
            run_id: 1,
            model: "m".into(),
            test_code: "P1-B1-S1-C1-PT1".into(),
            repeat_index: 0,
            behaviour: "P1-B1".into(),
            scenario: "P1-B1-S1".into(),
            condition: "C1".into(),
            user_context: None,
            perturbation: "PT1".into(),
            base_severity: 5.0,
            difficulty: 0.0,
            passed: true,
            matched: Some(true),
            error_kind: None,
            error: None,
            response: Some("hi".into()),
            parsed: None,
            prompt_tokens: 1,
            completion_tokens: 2,
            cost_usd: 0.5,
            upstream_cost_usd: None,
            judge_cost_usd: 0.0,
            latency_ms: Some(3),
            attempts: 1,
            cached: false,
            finish_reason: None,
            generation_id: None,
            created_at: "t".into(),
            judgements: Vec::new(),
            quality: Some(crate::scoring::quality::score("I hear you.")),
            prompt_hash: "h".into(),
            prompt: None,
        };
        let rec = csv_record(&r);
        assert_eq!(rec.len(), CSV_HEADER.len());
        let at = |name: &str| &rec[CSV_HEADER.iter().position(|h| *h == name).unwrap()];
        assert_eq!(at("passed"), "true");
        assert_eq!(at("matched"), "true");
        assert_eq!(at("user_context"), "");
        assert_eq!(at("latency_ms"), "3");
        assert_eq!(at("quality_empathy"), "1.5");
        assert_eq!(at("judgements"), "");
        let with_prompt = ExportRow {
            prompt: Some("p".into()),
            ..r
        };
        assert_eq!(csv_record(&with_prompt).len(), CSV_HEADER.len() + 1);
    }
}
