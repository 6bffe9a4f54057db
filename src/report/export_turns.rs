//! `export --turns`: the conversations of a run (issue 42), one row per
//! turn as CSV, or one conversation per JSONL line with its messages in
//! order, each reply with its verdict and cost.

use std::io::Write;

use serde_json::{Value, json};

use super::export::ExportError;
use crate::domain::TurnRecord;
use crate::store::Store;

/// The CSV columns of `export --turns --format csv`.
pub const TURN_HEADER: [&str; 17] = [
    "run_id",
    "test_code",
    "repeat_index",
    "turn_index",
    "turn",
    "pressure",
    "prefilled",
    "judged",
    "passed",
    "user_message",
    "response",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "cached",
    "served_model",
    "provider",
];

/// The verdict of a turn in its conversation's details (None: unjudged,
/// prefilled, or a conversation without a result yet).
fn passed(details: Option<&Value>, index: i64) -> Option<bool> {
    details?
        .pointer("/conversation/turns")?
        .as_array()?
        .iter()
        .find(|t| t["index"].as_i64() == Some(index))?["passed"]
        .as_bool()
}

/// Writes the turns of `run_id` (every run when None); returns how many
/// conversations were written.
pub async fn export_turns(
    store: &Store,
    run_id: Option<i64>,
    csv: bool,
    out: &mut dyn Write,
) -> Result<u64, ExportError> {
    let turns = store.all_turns(run_id).await?;
    let conversations: Vec<&[TurnRecord]> = turns
        .chunk_by(|a, b| {
            (a.run_id, &a.test_code, a.repeat_index) == (b.run_id, &b.test_code, b.repeat_index)
        })
        .collect();
    let mut details = Vec::with_capacity(conversations.len());
    for conv in &conversations {
        let first = &conv[0];
        details.push(
            store
                .evaluation_details(first.run_id, &first.test_code, first.repeat_index)
                .await?,
        );
    }
    if csv {
        let mut w = csv::Writer::from_writer(&mut *out);
        w.write_record(TURN_HEADER)?;
        for (conv, d) in conversations.iter().zip(&details) {
            for t in conv.iter() {
                w.write_record(row(t, passed(d.as_ref(), t.turn_index)))?;
            }
        }
        w.flush()?;
    } else {
        for (conv, d) in conversations.iter().zip(&details) {
            serde_json::to_writer(&mut *out, &conversation(conv, d.as_ref()))?;
            out.write_all(b"\n")?;
        }
    }
    out.flush()?;
    Ok(conversations.len() as u64)
}

fn row(t: &TurnRecord, passed: Option<bool>) -> Vec<String> {
    let cell = |v: Option<String>| v.unwrap_or_default();
    vec![
        t.run_id.to_string(),
        t.test_code.clone(),
        t.repeat_index.to_string(),
        t.turn_index.to_string(),
        cell(t.turn_code.clone()),
        cell(t.pressure.clone()),
        t.prefilled.to_string(),
        t.judged.to_string(),
        cell(passed.map(|p| p.to_string())),
        t.user_message.clone(),
        cell(t.response.clone()),
        t.prompt_tokens.to_string(),
        t.completion_tokens.to_string(),
        t.cost_usd.to_string(),
        t.cached.to_string(),
        cell(t.served_model.clone()),
        cell(t.provider.clone()),
    ]
}

/// One conversation as a JSON object: its messages in order.
fn conversation(turns: &[TurnRecord], details: Option<&Value>) -> Value {
    let first = &turns[0];
    let mut messages = Vec::with_capacity(2 * turns.len());
    for t in turns {
        let simulated = t
            .turn_code
            .as_deref()
            .is_some_and(crate::benchmark::conversation::is_simulated);
        messages.push(json!({"role": "user", "turn": t.turn_code, "simulated": simulated, "pressure": t.pressure, "content": t.user_message}));
        messages.push(json!({
            "role": "assistant",
            "content": t.response,
            "prefilled": t.prefilled,
            "judged": t.judged,
            "passed": passed(details, t.turn_index),
            "cost_usd": t.cost_usd,
            "cached": t.cached,
        }));
    }
    json!({
        "run_id": first.run_id,
        "test_code": first.test_code,
        "repeat_index": first.repeat_index,
        "first_failed_turn": details.and_then(|d| d.pointer("/conversation/first_failed_turn")).cloned(),
        "messages": messages,
    })
}
