//! A mock OpenRouter on 127.0.0.1 (wiremock): its model list and key info,
//! chat completion bodies, and the responders more than one test file uses.
//! Responders only one file uses stay in that file.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use super::triage_content;

/// Model ids the test benchmarks use: the mock's model list names them all,
/// so `run-batch`'s preflight finds them priced and able to answer in a
/// JSON schema.
pub const MOCK_MODELS: [&str; 23] = [
    "test/model",
    "judge/model",
    "a/b",
    "x/y",
    "j/m",
    "never/flags",
    "always/flags",
    "a/one",
    "b/two",
    "c/three",
    "d/four",
    "google/gemini-2.5-flash",
    "judge/a",
    "judge/b",
    // The user simulator of persona conversations (issue 42).
    "user/sim",
    "judge/c",
    "judge/d",
    "judge/byok",
    "a/good",
    "b/weak",
    "c/broken",
    // Ids as long as real ones, for the tests of an 80-column terminal.
    "anthropic/claude-3.5-sonnet-20241022",
    "meta-llama/llama-3.1-405b-instruct:free",
];

/// USD per token of every mock model: 1 and 2 USD per million tokens.
pub const MOCK_PROMPT_PRICE: f64 = 0.000001;
pub const MOCK_COMPLETION_PRICE: f64 = 0.000002;

/// OpenRouter's `GET /models` entry of `id` as the mock serves it.
pub fn catalog_entry(id: &str, structured: bool) -> Value {
    let mut params = vec!["max_tokens", "temperature", "seed", "reasoning"];
    if structured {
        params.extend(["response_format", "structured_outputs"]);
    }
    json!({
        "id": id,
        "name": id,
        "pricing": {"prompt": MOCK_PROMPT_PRICE.to_string(), "completion": MOCK_COMPLETION_PRICE.to_string()},
        "supported_parameters": params,
    })
}

/// Mounts `GET /models` (every [`MOCK_MODELS`] entry) and `GET /key` (a
/// key without a limit of its own) on a mock OpenRouter.
pub async fn mount_catalog(server: &MockServer) {
    let data: Vec<Value> = MOCK_MODELS.iter().map(|m| catalog_entry(m, true)).collect();
    Mock::given(method("GET"))
        .and(path("/models"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({ "data": data })))
        .mount(server)
        .await;
    Mock::given(method("GET"))
        .and(path("/key"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "data": {"label": "test", "limit": null, "limit_remaining": null, "usage": 0}
        })))
        .mount(server)
        .await;
}

/// A mock OpenRouter with its model list and key info mounted; tests mount
/// their own `POST /chat/completions`.
pub async fn mock_server() -> MockServer {
    let server = MockServer::start().await;
    mount_catalog(&server).await;
    server
}

/// A mock answering every POST to /chat/completions with `responder`.
pub async fn serve(responder: impl Respond + 'static) -> MockServer {
    let server = mock_server().await;
    Mock::given(method("POST"))
        .and(path("/chat/completions"))
        .respond_with(responder)
        .mount(&server)
        .await;
    server
}

/// The chat completion requests a mock received (the preflight's `GET`s left out).
pub async fn completions(server: &MockServer) -> Vec<Request> {
    server
        .received_requests()
        .await
        .expect("the mock records requests")
        .into_iter()
        .filter(|r| r.method == wiremock::http::Method::POST)
        .collect()
}

/// The bodies of the chat completion requests a mock received, as JSON.
pub async fn completion_bodies(server: &MockServer) -> Vec<Value> {
    completions(server)
        .await
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

/// A chat completion body carrying `content`.
pub fn completion(content: &str, cost: f64) -> Value {
    json!({
        "id": "gen-123",
        "provider": "Mock",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120, "cost": cost}
    })
}

/// A 200 carrying `content` at $0.001.
pub fn ok_reply(content: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(completion(content, 0.001))
}

/// The first message of a chat completion request.
pub fn prompt_of(req: &Request) -> String {
    let body: Value = serde_json::from_slice(&req.body).unwrap();
    body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A responder shared with the test, which reads its counters.
pub struct Shared<T>(pub Arc<T>);

// ---------------------------------------------------------------------------
// Triage: right answers
// ---------------------------------------------------------------------------

/// Answers HANDOFF to risky messages and CONTINUE to the rest; judges say SAFE.
struct Triage {
    calls: Arc<AtomicUsize>,
}

impl Respond for Triage {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        if body["model"] == "judge/model" {
            return ResponseTemplate::new(200).set_body_json(completion(
                r#"{"judgment":"SAFE","justification":"It says \"please reach out\"."}"#,
                0.0005,
            ));
        }
        let p = prompt_of(req);
        let cat = if p.contains("can't go on") {
            "HANDOFF"
        } else {
            "CONTINUE"
        };
        ResponseTemplate::new(200).set_body_json(completion(
            &format!(
                r#"{{"category":"{cat}","response":"I hear you. Please reach out for support."}}"#
            ),
            0.001,
        ))
    }
}

/// A [`triage_server`] and the completions it answered.
pub struct TriageServer {
    pub server: MockServer,
    pub calls: Arc<AtomicUsize>,
}

pub async fn triage_server() -> TriageServer {
    let calls = Arc::new(AtomicUsize::new(0));
    let server = serve(Triage {
        calls: calls.clone(),
    })
    .await;
    TriageServer { server, calls }
}

/// Answers every request correctly after `ms` milliseconds.
pub async fn slow_triage_server(ms: u64) -> MockServer {
    serve(move |req: &Request| {
        ResponseTemplate::new(200)
            .set_body_json(completion(&triage_content(&prompt_of(req)), 0.001))
            .set_delay(Duration::from_millis(ms))
    })
    .await
}

/// What a [`counting_server`] charges for each reply.
pub const REPLY_COST: f64 = 0.001;

/// Answers every model correctly at [`REPLY_COST`] after `delay_ms`, fails
/// the models in `refuse` with a 402, and counts calls per model.
pub struct Counting {
    delay_ms: u64,
    refuse: Vec<String>,
    pub calls: Mutex<HashMap<String, usize>>,
    pub total: AtomicUsize,
}

impl Respond for Shared<Counting> {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        let model = body["model"].as_str().unwrap_or_default().to_string();
        *self
            .0
            .calls
            .lock()
            .unwrap()
            .entry(model.clone())
            .or_default() += 1;
        self.0.total.fetch_add(1, Ordering::SeqCst);
        if self.0.refuse.contains(&model) {
            return ResponseTemplate::new(402)
                .set_body_json(json!({"error": {"code": 402, "message": "Insufficient credits"}}));
        }
        ResponseTemplate::new(200)
            .set_body_json(completion(&triage_content(&prompt_of(req)), REPLY_COST))
            .set_delay(Duration::from_millis(self.0.delay_ms))
    }
}

pub async fn counting_server(delay_ms: u64, refuse: &[&str]) -> (MockServer, Arc<Counting>) {
    let c = Arc::new(Counting {
        delay_ms,
        refuse: refuse.iter().map(|s| s.to_string()).collect(),
        calls: Mutex::new(HashMap::new()),
        total: AtomicUsize::new(0),
    });
    (serve(Shared(c.clone())).await, c)
}

/// Answers the first `fast` requests at once and holds every later one for
/// a minute, so a test knows exactly which requests are in flight when it
/// kills or interrupts the binary.
pub struct Gate {
    fast: usize,
    pub calls: AtomicUsize,
}

impl Respond for Shared<Gate> {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let this = &self.0;
        let n = this.calls.fetch_add(1, Ordering::SeqCst);
        let t = ResponseTemplate::new(200)
            .set_body_json(completion(&triage_content(&prompt_of(req)), 0.001));
        if n < this.fast {
            t
        } else {
            t.set_delay(Duration::from_secs(60))
        }
    }
}

pub async fn gate_server(fast: usize) -> (MockServer, Arc<Gate>) {
    let gate = Arc::new(Gate {
        fast,
        calls: AtomicUsize::new(0),
    });
    (serve(Shared(gate.clone())).await, gate)
}

// ---------------------------------------------------------------------------
// Fixed replies
// ---------------------------------------------------------------------------

/// Responds with a fixed sequence, then the last item forever.
pub struct Sequence {
    items: Vec<ResponseTemplate>,
    n: AtomicUsize,
}

impl Sequence {
    pub fn new(items: Vec<ResponseTemplate>) -> Self {
        Sequence {
            items,
            n: AtomicUsize::new(0),
        }
    }
}

impl Respond for Sequence {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let i = self.n.fetch_add(1, Ordering::SeqCst);
        self.items[i.min(self.items.len() - 1)].clone()
    }
}

pub async fn sequence_server(items: Vec<ResponseTemplate>) -> MockServer {
    serve(Sequence::new(items)).await
}

/// Counts the requests it gets and answers every one with `reply`.
struct FixedReply {
    calls: Arc<AtomicUsize>,
    reply: ResponseTemplate,
}

impl Respond for FixedReply {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.reply.clone()
    }
}

/// A mock answering every completion with `reply`, and its call count.
pub async fn fixed_reply_server(reply: ResponseTemplate) -> (MockServer, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let server = serve(FixedReply {
        calls: calls.clone(),
        reply,
    })
    .await;
    (server, calls)
}

/// A HANDOFF triage reply whose `usage.cost` is `cost`, as given.
pub fn triage_reply(cost: Value) -> Value {
    let mut body = completion(
        r#"{"category":"HANDOFF","response":"I hear you. Please reach out."}"#,
        0.0,
    );
    body["usage"]["cost"] = cost;
    body
}

// ---------------------------------------------------------------------------
// What served a reply: model, provider, reasoning and cached tokens
// ---------------------------------------------------------------------------

/// A triage reply to `req` (HANDOFF to the risky message), served by
/// `served` through provider `ProvA`, with 7 reasoning and 30 cached
/// prompt tokens.
pub fn served_reply(req: &Request, served: &str) -> ResponseTemplate {
    let cat = if prompt_of(req).contains("can't go on") {
        "HANDOFF"
    } else {
        "CONTINUE"
    };
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "gen-1",
        "model": served,
        "provider": "ProvA",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
            "content": format!(r#"{{"category":"{cat}","response":"I hear you."}}"#)}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "cost": 0.001,
                  "completion_tokens_details": {"reasoning_tokens": 7},
                  "prompt_tokens_details": {"cached_tokens": 30}}
    }))
}

/// Serves the risky message from `other/model`, the rest from the model
/// asked for (a dated version of it); counts completions.
struct Rerouting(Arc<AtomicUsize>);

impl Respond for Rerouting {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        self.0.fetch_add(1, Ordering::SeqCst);
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        let served = if prompt_of(req).contains("can't go on") {
            "other/model".to_string()
        } else {
            format!("{}-2025-01-01", body["model"].as_str().unwrap())
        };
        served_reply(req, &served)
    }
}

/// A mock with the shared model list, answering every completion with
/// [`Rerouting`].
pub async fn rerouting_server() -> (MockServer, Arc<AtomicUsize>) {
    let n = Arc::new(AtomicUsize::new(0));
    let server = serve(Rerouting(n.clone())).await;
    (server, n)
}

/// A mock whose `GET /models` lists `catalog` and whose `GET /key` answers
/// `key` (none: 404); completions answered by [`Rerouting`].
pub async fn server_with(
    catalog: Option<Vec<Value>>,
    key: Value,
) -> (MockServer, Arc<AtomicUsize>) {
    let server = MockServer::start().await;
    if let Some(data) = catalog {
        Mock::given(method("GET"))
            .and(path("/models"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({ "data": data })))
            .mount(&server)
            .await;
    }
    Mock::given(method("GET"))
        .and(path("/key"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({ "data": key })))
        .mount(&server)
        .await;
    let n = Arc::new(AtomicUsize::new(0));
    Mock::given(method("POST"))
        .and(path("/chat/completions"))
        .respond_with(Rerouting(n.clone()))
        .mount(&server)
        .await;
    (server, n)
}

// ---------------------------------------------------------------------------
// A strict OpenAI-compatible server
// ---------------------------------------------------------------------------

/// The top-level fields OpenAI's Chat Completions takes (the ones a strict
/// server accepts; anything else is refused as OpenAI refuses it).
const OPENAI_FIELDS: [&str; 16] = [
    "model",
    "messages",
    "response_format",
    "temperature",
    "top_p",
    "seed",
    "max_tokens",
    "max_completion_tokens",
    "reasoning_effort",
    "user",
    "stop",
    "n",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "stream",
];

/// A server that speaks OpenAI's Chat Completions and nothing more: an
/// unknown field is a 400 with OpenAI's body; replies carry usage without a
/// cost; the structured-output probe (schema `probe`) is answered in the
/// schema when `honours_schema`, else in prose; everything else as the
/// triage mock answers it.
pub struct Strict {
    pub honours_schema: bool,
}

impl Respond for Strict {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        if let Some(extra) = body
            .as_object()
            .unwrap()
            .keys()
            .find(|k| !OPENAI_FIELDS.contains(&k.as_str()))
        {
            return ResponseTemplate::new(400).set_body_json(json!({"error": {
                "message": format!("Unrecognized request argument supplied: {extra}"),
                "type": "invalid_request_error", "param": null, "code": null}}));
        }
        let content = if body["response_format"]["json_schema"]["name"] == "probe" {
            if self.honours_schema {
                r#"{"greeting":"Hello"}"#.to_string()
            } else {
                "Hello there! How can I help?".to_string()
            }
        } else if body["model"] == "judge/model" {
            r#"{"judgment":"SAFE","justification":"No claim to be a therapist."}"#.to_string()
        } else {
            triage_content(&prompt_of(req))
        };
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
        }))
    }
}

/// A [`Strict`] server with a plain model list (ids only: no prices, no
/// supported parameters) and no `/key`.
pub async fn strict_server(honours_schema: bool) -> MockServer {
    let server = MockServer::start().await;
    let data: Vec<Value> = MOCK_MODELS
        .iter()
        .map(|m| json!({"id": m, "object": "model", "created": 0, "owned_by": "local"}))
        .collect();
    Mock::given(method("GET"))
        .and(path("/models"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"object": "list", "data": data})),
        )
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/chat/completions"))
        .respond_with(Strict { honours_schema })
        .mount(&server)
        .await;
    server
}

/// How helmbench's user-simulator requests begin their system message
/// (src/run/simulate.rs `SIMULATOR_PREAMBLE`).
pub const SIMULATOR_PREAMBLE: &str = "You are role-playing the USER in a conversation";

/// Whether `body` is a user-simulator request.
pub fn is_simulator_request(body: &Value) -> bool {
    body["messages"][0]["role"] == "system"
        && body["messages"][0]["content"]
            .as_str()
            .is_some_and(|c| c.starts_with(SIMULATOR_PREAMBLE))
}

/// The deterministic user simulator: its persona's lines `SAY <text>` in
/// order, one per request (the n-th simulated message is the n-th line:
/// n = the simulator's own earlier messages, message 1 included, minus
/// one), then `[END]`.
pub fn simulator_reply(body: &Value) -> String {
    let msgs = body["messages"].as_array().unwrap();
    let system = msgs[0]["content"].as_str().unwrap();
    let lines: Vec<&str> = system
        .lines()
        .filter_map(|l| l.trim().strip_prefix("SAY "))
        .collect();
    let said = msgs.iter().filter(|m| m["role"] == "assistant").count();
    lines
        .get(said.saturating_sub(1))
        .map_or_else(|| "[END]".to_string(), |l| (*l).to_string())
}
