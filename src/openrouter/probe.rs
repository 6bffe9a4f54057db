//! The structured-output probe: one small request asking an
//! OpenAI-compatible model (whose models.yml entry does not say) whether it
//! answers in a JSON schema, before a run that needs it starts.

use serde_json::{Value, json};

use super::{ChatRequest, Client};
use crate::domain::{Api, ModelEntry};

/// The one user message of the structured-output probe.
const PROBE_PROMPT: &str = "Reply with a JSON object whose `greeting` is a one-word greeting.";

/// The probe's JSON schema: an object with one string, nothing else.
fn probe_format() -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "probe", "strict": true, "schema": {
        "type": "object",
        "properties": {"greeting": {"type": "string"}},
        "required": ["greeting"],
        "additionalProperties": false
    }}})
}

impl Client {
    /// Asks `entry` (an OpenAI-compatible model whose models.yml entry does
    /// not say) once whether it answers in a JSON schema: Err says why not.
    /// A paid request of a few tokens, sent before the run starts.
    /// Ok: what the probe cost (NaN: unknown), to be counted with the run.
    /// Err: why the model cannot be used, with what the failed probe cost.
    pub async fn probe_structured(&self, entry: &ModelEntry) -> Result<f64, (String, f64)> {
        let format = probe_format();
        let body = ChatRequest {
            history: &[],
            model: entry,
            prompt: PROBE_PROMPT,
            response_format: Some(&format),
            api: Api::OpenaiCompatible,
            user: self.user(),
        }
        .to_json();
        let mut reply = self
            .chat_json(&entry.id, body)
            .await
            .map_err(|e| (format!("the probe request failed: {e}"), 0.0))?;
        super::price_reply(&mut reply, entry, Api::OpenaiCompatible);
        let cost = reply.cost_usd;
        let v: Value = serde_json::from_str(reply.content.trim()).map_err(|_| {
            (
                format!(
                    "it answered a JSON-schema request with text that is not JSON: {:?}",
                    crate::domain::excerpt(&reply.content, 80)
                ),
                cost,
            )
        })?;
        match v.get("greeting") {
            Some(Value::String(_)) if v.as_object().is_some_and(|o| o.len() == 1) => Ok(cost),
            _ => Err((
                format!(
                    "it answered a JSON-schema request with JSON outside the schema: {}",
                    crate::domain::excerpt(&v.to_string(), 80)
                ),
                cost,
            )),
        }
    }
}
