//! A mock of OpenRouter's Batch API (as its "Batch API Quickstart"
//! documents it) beside a synchronous `/chat/completions`, both answering
//! alike: `POST /api/beta/batches` refuses `requests` before `endpoint` or
//! `model` (400), a request whose `model` is not the batch's (400), an
//! empty or duplicated request list (400), and otherwise answers 202 with
//! `validating`; `GET /api/beta/batches/:id` moves through `validating`,
//! `in_progress`, `finalizing` to `completed` over polls (or `expired`),
//! with the results inline, `usage` summed, item errors and moderation
//! 403s inside items, and every cost half the synchronous one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use wiremock::matchers::{method, path, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use super::mock::{completion, mount_catalog};
use super::triage_content;

/// What a synchronous reply costs; a batch item costs half.
pub const SYNC_COST: f64 = 0.001;
pub const SYNC_JUDGE_COST: f64 = 0.0005;

/// How the mock behaves.
#[derive(Debug, Clone)]
pub struct Opts {
    /// GETs of a batch before it ends (the last one ends it).
    pub polls_to_finish: usize,
    /// Batches (0-based, in the order they were created) that end `expired`.
    pub expire: Vec<usize>,
    /// Items carry their own `usage.cost` (else only the batch's `usage`).
    pub item_cost: bool,
    /// Batches (0-based, in the order they were created) that are accepted
    /// (they run, and are billed once polled) but answered with a 502.
    pub accept_then_502: Vec<usize>,
    /// The first GETs of each batch answer 404 (a batch not found yet);
    /// `usize::MAX`: every GET.
    pub not_found_polls: usize,
    /// The first reads of each completed batch's results break part-way:
    /// an item after the real ones that the item pass cannot read
    /// (`usize::MAX`: every read).
    pub corrupt_reads: usize,
    /// Answers every request (model and judge) with this content instead
    /// (conversations: an answer that depends on the whole history).
    pub reply: Option<fn(&Value) -> String>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            polls_to_finish: 4,
            expire: Vec::new(),
            item_cost: true,
            accept_then_502: Vec::new(),
            not_found_polls: 0,
            corrupt_reads: 0,
            reply: None,
        }
    }
}

/// One batch as the mock keeps it.
#[derive(Debug, Clone)]
pub struct MockBatch {
    pub id: String,
    pub model: String,
    pub requests: Vec<(String, Value)>,
    pub polls: usize,
    /// GETs answered 404.
    pub not_found: usize,
    /// GETs answered with the results (completed).
    pub reads: usize,
    pub expired: bool,
    /// Set once it ended: (status, results, usage).
    ended: Option<(String, Value, Value)>,
}

/// What the mock saw and holds.
#[derive(Debug, Default)]
pub struct State {
    /// The top-level keys of every POST body, in the order sent.
    pub post_keys: Vec<Vec<String>>,
    /// POSTs answered 400, with why.
    pub refused: Vec<String>,
    pub batches: Vec<MockBatch>,
    /// Synchronous chat requests.
    pub sync_calls: usize,
    /// Prompts seen by a batch so far (for item errors on first sight).
    seen: HashMap<String, usize>,
    /// Sum of the `usage.cost` of every batch that completed.
    pub batch_costs: f64,
}

/// The mock's shared handle.
pub struct BatchApiMock {
    pub opts: Opts,
    pub state: Mutex<State>,
    /// While set, every poll answers `in_progress`.
    pub hold: AtomicBool,
}

impl BatchApiMock {
    /// The prompt (first message) of every item `model`'s batches held.
    pub fn prompts_of(&self, model: &str) -> Vec<String> {
        let st = self.state.lock().unwrap();
        st.batches
            .iter()
            .filter(|b| b.model == model)
            .flat_map(|b| b.requests.iter())
            .map(|(_, body)| prompt(body))
            .collect()
    }

    /// How many times each (model, custom id) was accepted in a batch.
    pub fn accepted(&self) -> HashMap<(String, String), usize> {
        let st = self.state.lock().unwrap();
        let mut out = HashMap::new();
        for b in &st.batches {
            for (id, _) in &b.requests {
                *out.entry((b.model.clone(), id.clone())).or_default() += 1;
            }
        }
        out
    }
}

/// The prompt of a chat body.
fn prompt(body: &Value) -> String {
    body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The answer to one chat request, synchronous or in a batch: a judge says
/// SAFE, a "SEVERE" prompt is blocked by moderation (403), the rest get
/// the triage answer. `scale` multiplies the cost (0.5 in a batch).
pub fn answer(body: &Value, scale: f64, reply: Option<fn(&Value) -> String>) -> (u16, Value) {
    if let Some(f) = reply {
        let cost = if body["model"]
            .as_str()
            .is_some_and(|m| m.starts_with("judge/"))
        {
            SYNC_JUDGE_COST
        } else {
            SYNC_COST
        };
        return (200, completion(&f(body), cost * scale));
    }
    let p = prompt(body);
    // `judge/d` only reasons (no verdict) while its max_tokens is under 800.
    if body["model"] == "judge/d" && body["max_tokens"].as_u64().unwrap_or(0) < 800 {
        return (
            200,
            json!({"id": "gen-r", "provider": "Mock",
                   "choices": [{"index": 0, "finish_reason": "length",
                                "message": {"role": "assistant", "content": "", "reasoning": "Let me weigh the reply..."}}],
                   "usage": {"prompt_tokens": 100, "completion_tokens": 400, "cost": SYNC_JUDGE_COST * scale,
                             "completion_tokens_details": {"reasoning_tokens": 400}}}),
        );
    }
    // `judge/byok` bills through the user's own provider key: OpenRouter's
    // `usage.cost` is 0, the upstream cost is in `cost_details`.
    if body["model"] == "judge/byok" {
        let mut c = completion(
            r#"{"judgment":"SAFE","justification":"It says \"please reach out\"."}"#,
            0.0,
        );
        c["usage"]["is_byok"] = json!(true);
        c["usage"]["cost_details"] = json!({"upstream_inference_cost": SYNC_JUDGE_COST * scale});
        return (200, c);
    }
    // Judges say SAFE, but `judge/b`, which says UNSAFE (a panel's minority).
    if let Some(judge) = body["model"].as_str().filter(|m| m.starts_with("judge/")) {
        let verdict = if judge == "judge/b" { "UNSAFE" } else { "SAFE" };
        return (
            200,
            completion(
                &format!(
                    r#"{{"judgment":"{verdict}","justification":"It says \"please reach out\"."}}"#
                ),
                SYNC_JUDGE_COST * scale,
            ),
        );
    }
    if p.contains("SEVERE") {
        return (
            403,
            json!({"error": {"code": 403,
                "message": "test/model requires moderation on OpenAI. Your input was flagged for \"self-harm/intent\". No credits were charged.",
                "metadata": {"reasons": ["self-harm/intent"], "flagged_input": "SEVERE...",
                             "provider_name": "OpenAI", "model_slug": "openai/gpt-4o"}}}),
        );
    }
    (200, completion(&triage_content(&p), SYNC_COST * scale))
}

struct Sync(Arc<BatchApiMock>);

impl Respond for Sync {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        self.0.state.lock().unwrap().sync_calls += 1;
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        let (status, v) = answer(&body, 1.0, self.0.opts.reply);
        ResponseTemplate::new(status).set_body_json(v)
    }
}

struct Create(Arc<BatchApiMock>);

fn refuse(st: &mut State, why: &str) -> ResponseTemplate {
    st.refused.push(why.to_string());
    ResponseTemplate::new(400).set_body_json(json!({"error": {"code": 400, "message": why}}))
}

impl Respond for Create {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let mut st = self.0.state.lock().unwrap();
        // serde_json keeps the keys in the order sent (preserve_order).
        let Ok(body) = serde_json::from_slice::<Value>(&req.body) else {
            return refuse(&mut st, "the body is not JSON");
        };
        let Some(obj) = body.as_object() else {
            return refuse(&mut st, "the body is not an object");
        };
        let keys: Vec<String> = obj.keys().cloned().collect();
        st.post_keys.push(keys.clone());
        let at = |k: &str| keys.iter().position(|x| x == k);
        let (Some(e), Some(m), Some(r)) = (at("endpoint"), at("model"), at("requests")) else {
            return refuse(&mut st, "endpoint, model and requests are required");
        };
        if r < e || r < m {
            return refuse(
                &mut st,
                "`requests` appeared before `endpoint` and `model`: serialize them first",
            );
        }
        if body["endpoint"] != "/v1/chat/completions" {
            return refuse(&mut st, "unsupported endpoint");
        }
        let model = body["model"].as_str().unwrap_or_default().to_string();
        let Some(reqs) = body["requests"].as_array().filter(|r| !r.is_empty()) else {
            return refuse(&mut st, "requests must be a non-empty array");
        };
        let mut requests = Vec::new();
        let mut ids = std::collections::HashSet::new();
        for r in reqs {
            let id = r["custom_id"].as_str().unwrap_or_default().to_string();
            if !ids.insert(id.clone()) {
                return refuse(&mut st, &format!("duplicate custom_id {id}"));
            }
            let b = r["body"].clone();
            if let Some(m) = b.get("model")
                && m != &Value::String(model.clone())
            {
                return refuse(
                    &mut st,
                    &format!("request {id}: model {m} does not match the batch's {model}"),
                );
            }
            requests.push((id, b));
        }
        let n = st.batches.len();
        let id = format!("batch_{n}");
        st.batches.push(MockBatch {
            id: id.clone(),
            model: model.clone(),
            requests,
            polls: 0,
            not_found: 0,
            reads: 0,
            expired: self.0.opts.expire.contains(&n),
            ended: None,
        });
        if self.0.opts.accept_then_502.contains(&n) {
            return ResponseTemplate::new(502)
                .set_body_json(json!({"error": {"code": 502, "message": "bad gateway"}}));
        }
        ResponseTemplate::new(202).set_body_json(object(
            &id,
            &model,
            "validating",
            [reqs.len(), 0, 0],
            Value::Null,
            Value::Null,
        ))
    }
}

fn object(
    id: &str,
    model: &str,
    status: &str,
    counts: [usize; 3],
    usage: Value,
    results: Value,
) -> Value {
    json!({
        "id": id, "object": "batch", "endpoint": "/v1/chat/completions", "model": model,
        "completion_window": "24h", "status": status, "created_at": 1782097200, "finalized_at": null,
        "request_counts": {"total": counts[0], "completed": counts[1], "failed": counts[2]},
        "usage": usage, "results": results, "error": null
    })
}

struct Get(Arc<BatchApiMock>);

impl Respond for Get {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let id = req
            .url
            .path()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let mock = &self.0;
        let mut guard = mock.state.lock().unwrap();
        let st = &mut *guard;
        let Some(i) = st.batches.iter().position(|b| b.id == id) else {
            return ResponseTemplate::new(404)
                .set_body_json(json!({"error": {"code": 404, "message": "no such batch"}}));
        };
        if st.batches[i].not_found < mock.opts.not_found_polls {
            st.batches[i].not_found += 1;
            return ResponseTemplate::new(404)
                .set_body_json(json!({"error": {"code": 404, "message": "Batch not found"}}));
        }
        let total = st.batches[i].requests.len();
        if let Some((status, results, usage)) = st.batches[i].ended.clone() {
            let results = corrupt(mock, &mut st.batches[i], results);
            let b = &st.batches[i];
            return ResponseTemplate::new(200).set_body_json(object(
                &b.id,
                &b.model,
                &status,
                [total, total, 0],
                usage,
                results,
            ));
        }
        st.batches[i].polls += 1;
        let polls = st.batches[i].polls;
        let held = mock.hold.load(Ordering::SeqCst);
        if held || polls < mock.opts.polls_to_finish {
            let status = match polls {
                _ if held => "in_progress",
                1 => "validating",
                p if p + 1 >= mock.opts.polls_to_finish => "finalizing",
                _ => "in_progress",
            };
            let done = if status == "validating" {
                0
            } else {
                total * polls / mock.opts.polls_to_finish.max(1)
            };
            let b = &st.batches[i];
            return ResponseTemplate::new(200).set_body_json(object(
                &b.id,
                &b.model,
                status,
                [total, done, 0],
                Value::Null,
                Value::Null,
            ));
        }
        if st.batches[i].expired {
            st.batches[i].ended = Some(("expired".into(), Value::Null, Value::Null));
            let b = &st.batches[i];
            return ResponseTemplate::new(200).set_body_json(object(
                &b.id,
                &b.model,
                "expired",
                [total, 0, 0],
                Value::Null,
                Value::Null,
            ));
        }
        // Completed: every result inline, usage summed.
        let mut results = Vec::new();
        let (mut pt, mut ct, mut cost, mut failed) = (0i64, 0i64, 0.0f64, 0usize);
        let requests = st.batches[i].requests.clone();
        for (k, (cid, body)) in requests.iter().enumerate() {
            let p = prompt(body);
            let seen = {
                let n = st
                    .seen
                    .entry(format!("{}|{p}", st.batches[i].model))
                    .or_default();
                *n += 1;
                *n
            };
            let mut body = body.clone();
            if body.get("model").is_none() {
                body["model"] = json!(st.batches[i].model);
            }
            if p.contains("(item-error)") && seen == 1 {
                failed += 1;
                results.push(json!({"id": format!("batch_req_{k}"), "custom_id": cid, "response": null,
                    "error": {"code": "server_error", "message": "the upstream provider failed this request"}}));
                continue;
            }
            let (status, mut reply) = answer(&body, 0.5, mock.opts.reply);
            if status == 200 {
                pt += reply["usage"]["prompt_tokens"].as_i64().unwrap_or(0);
                ct += reply["usage"]["completion_tokens"].as_i64().unwrap_or(0);
                cost += reply["usage"]["cost"].as_f64().unwrap_or(0.0);
                reply["id"] = json!(format!("gen-batch-{}-{k}", st.batches[i].id));
                if !mock.opts.item_cost {
                    reply["usage"].as_object_mut().unwrap().remove("cost");
                }
            } else {
                failed += 1;
            }
            results.push(json!({"id": format!("batch_req_{k}"), "custom_id": cid,
                "response": {"status_code": status, "request_id": format!("request_{k}"), "body": reply},
                "error": null}));
        }
        st.batch_costs += cost;
        let usage = json!({"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct,
                           "cost": cost, "is_byok": false});
        let results = Value::Array(results);
        st.batches[i].ended = Some(("completed".into(), results.clone(), usage.clone()));
        let results = corrupt(mock, &mut st.batches[i], results);
        let b = &st.batches[i];
        let _ = failed;
        ResponseTemplate::new(200).set_body_json(object(
            &b.id,
            &b.model,
            "completed",
            [total, total, 0],
            usage,
            results,
        ))
    }
}

/// A completed batch's results as read: while `corrupt_reads` lasts, with
/// an item after the real ones whose `status_code` is not a number (the
/// costs pass skips it, the item pass cannot read it).
fn corrupt(mock: &BatchApiMock, b: &mut MockBatch, results: Value) -> Value {
    if results.is_null() {
        return results;
    }
    b.reads += 1;
    if b.reads > mock.opts.corrupt_reads {
        return results;
    }
    let mut items = results.as_array().cloned().unwrap_or_default();
    items.push(json!({"id": "batch_req_bad", "custom_id": "bad~0",
        "response": {"status_code": "oops", "body": null}, "error": null}));
    Value::Array(items)
}

/// A mock OpenRouter with the model list, synchronous completions and
/// the Batch API, and its handle.
pub async fn batch_server(opts: Opts) -> (MockServer, Arc<BatchApiMock>) {
    let server = MockServer::start().await;
    mount_catalog(&server).await;
    let mock = Arc::new(BatchApiMock {
        opts,
        state: Mutex::default(),
        hold: AtomicBool::new(false),
    });
    Mock::given(method("POST"))
        .and(path("/chat/completions"))
        .respond_with(Sync(mock.clone()))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/beta/batches"))
        .respond_with(Create(mock.clone()))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path_regex(r"^/api/beta/batches/[^/]+$"))
        .respond_with(Get(mock.clone()))
        .mount(&server)
        .await;
    (server, mock)
}
