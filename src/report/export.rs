//! `export`: every stored result as CSV or JSONL, streamed row by row from
//! SQLite (a `fetch` stream, never `fetch_all`), so memory stays flat however
//! large the database is.

use std::io::Write;

use futures_util::TryStreamExt;
use serde_json::Value;

use crate::domain::{Detail, Which};
use crate::domain::{JudgementRecord, QualityScores, ResultRecord};
use crate::store::{Store, StoreError};

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
    #[error("{0}")]
    Store(StoreError),
}

impl From<StoreError> for ExportError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Query(q) => ExportError::Query(q),
            StoreError::Judgements(j) => ExportError::Json(j),
            other => ExportError::Store(other),
        }
    }
}

impl From<ExportError> for crate::Error {
    fn from(e: ExportError) -> Self {
        match e {
            ExportError::Query(q) => crate::Error::Store(Box::new(q)),
            ExportError::Store(s) => s.into(),
            other => crate::Error::caused_by(other),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Csv,
    Jsonl,
}

/// The CSV columns, in order; must match [`csv_record`].
pub const CSV_HEADER: [&str; 44] = [
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
    "served_model",
    "provider",
    "reasoning_tokens",
    "cached_prompt_tokens",
    "error_type",
    "provider_code",
    "block",
];

fn cell<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(ToString::to_string).unwrap_or_default()
}

/// `CR1=SAFE; CR2=UNSAFE`: the verdicts at a glance for spreadsheet users.
fn verdict_summary(judgements: &[JudgementRecord]) -> String {
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
pub fn csv_record(r: &ResultRecord) -> Vec<String> {
    let q = |f: fn(&QualityScores) -> f64| r.quality.as_ref().map(f);
    let c = &r.result;
    let mut fields = vec![
        r.run_id.to_string(),
        r.model.clone(),
        c.test_code.clone(),
        c.repeat_index.to_string(),
        c.behaviour.clone(),
        c.scenario.clone(),
        c.condition.clone(),
        cell(&c.user_context),
        c.perturbation.clone(),
        c.base_severity.to_string(),
        c.difficulty.to_string(),
        c.passed.to_string(),
        cell(&c.matched),
        cell(&c.error_kind),
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
        cell(&r.served.served_model),
        cell(&r.served.provider),
        r.served.reasoning_tokens.to_string(),
        r.served.cached_prompt_tokens.to_string(),
        cell(&r.error_type),
        cell(&r.provider_code),
        r.block
            .as_ref()
            .and_then(|b| serde_json::to_string(b).ok())
            .unwrap_or_default(),
    ];
    if let Some(p) = &r.prompt {
        fields.push(p.clone());
    }
    fields
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
    let which = run_id.map_or(Which::Every, Which::Run);
    let detail = Detail {
        judgements: true,
        prompts: with_prompts,
        replies: true,
    };
    let mut rows = store.results(which, detail);
    let mut count = 0u64;
    match format {
        Format::Jsonl => {
            while let Some(row) = rows.try_next().await? {
                serde_json::to_writer(&mut *out, &row)?;
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
                w.write_record(csv_record(&row))?;
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

    fn judgement(criterion: &str, verdict: Option<Value>) -> JudgementRecord {
        JudgementRecord {
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
            served: Default::default(),
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
        use crate::domain::StoredResult;
        let r = ResultRecord {
            id: 1,
            run_id: 1,
            model: "m".into(),
            result: StoredResult {
                matched: Some(true),
                ..StoredResult::of_code("P1-B1-S1-C1-PT1", 5.0, 0.0, true)
            },
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
            served: crate::domain::ServedBy {
                served_model: Some("m-2025".into()),
                provider: Some("P".into()),
                reasoning_tokens: 7,
                cached_prompt_tokens: 0,
            },
            error_type: None,
            provider_code: None,
            block: None,
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
        assert_eq!(at("served_model"), "m-2025");
        assert_eq!(at("reasoning_tokens"), "7");
        let with_prompt = ResultRecord {
            prompt: Some("p".into()),
            ..r
        };
        assert_eq!(csv_record(&with_prompt).len(), CSV_HEADER.len() + 1);
    }
}
