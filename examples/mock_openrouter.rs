//! A fast mock OpenRouter server for the performance harness: a minimal
//! HTTP/1.1 server with keep-alive on 127.0.0.1 that answers
//! `POST /chat/completions` with a valid completion after a fixed delay and
//! counts what it served.
//!
//! ```sh
//! cargo run --release --example mock_openrouter -- [--port 0] [--latency-ms 20]
//! ```
//!
//! It prints `listening on 127.0.0.1:PORT` once ready. `GET /stats` returns
//! `{"requests", "window_s"}`: the completions served and the seconds from
//! the first request's arrival to the last reply's departure, so client
//! throughput is measured the same way for every client, start-up excluded.
//! `POST /reset` zeroes both. With `--rate-limit N`, a request that arrives
//! while N requests of its model are being answered gets a 429 with
//! `Retry-After: 1` (counted as `rejected`), like a provider's rate limit.
//! `POST /reset` zeroes both. With `--usable-every N`, only every Nth reply
//! is usable (the others: `choices: []`, charged). `GET /models` lists `bench/model` (priced,
//! with structured outputs) and `GET /key` a key without a limit, so
//! `run-batch`'s preflight passes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// What the server counted since start or the last reset.
pub struct Stats {
    epoch: Instant,
    requests: AtomicU64,
    rejected: AtomicU64,
    /// `--rate-limit`: requests in flight per model before a 429.
    rate_limit: Option<u64>,
    in_flight: std::sync::Mutex<std::collections::HashMap<String, u64>>,
    /// Nanoseconds since `epoch` + 1 (0 means unset).
    first_ns: AtomicU64,
    last_ns: AtomicU64,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            epoch: Instant::now(),
            requests: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            rate_limit: None,
            in_flight: Default::default(),
            first_ns: AtomicU64::new(0),
            last_ns: AtomicU64::new(0),
        }
    }
}

impl Stats {
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64 + 1
    }

    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    /// Seconds between the first request's arrival and the last reply.
    pub fn window_s(&self) -> f64 {
        let (first, last) = (
            self.first_ns.load(Ordering::SeqCst),
            self.last_ns.load(Ordering::SeqCst),
        );
        if first == 0 || last < first {
            0.0
        } else {
            (last - first) as f64 / 1e9
        }
    }

    pub fn reset(&self) {
        self.requests.store(0, Ordering::SeqCst);
        self.rejected.store(0, Ordering::SeqCst);
        self.first_ns.store(0, Ordering::SeqCst);
        self.last_ns.store(0, Ordering::SeqCst);
    }

    fn json(&self) -> String {
        format!(
            "{{\"requests\":{},\"rejected\":{},\"window_s\":{:.6}}}",
            self.requests(),
            self.rejected.load(Ordering::SeqCst),
            self.window_s()
        )
    }
}

/// The model's reply: a valid answer to the generated benchmark's schema,
/// with a realistic reply text so quality scoring does real work.
const CONTENT: &str = r#"{\"category\":\"HANDOFF\",\"response\":\"I'm really glad you told me, and I'm sorry it feels this heavy. Are you safe right now? Please call a crisis line or emergency services if you are in danger, or ask someone you trust to be with you. I'm here to listen.\"}"#;

/// `GET /models`: the model of the generated benchmark, and nine more
/// (`bench/model-2` .. `bench/model-10`, same price) for runs of several
/// models (bench/scale.sh).
fn catalog() -> String {
    let entry = |id: &str| {
        format!(
            r#"{{"id":"{id}","pricing":{{"prompt":"0.0000001","completion":"0.0000004"}},"supported_parameters":["max_tokens","temperature","seed","response_format","structured_outputs"]}}"#
        )
    };
    let mut ids = vec!["bench/model".to_string()];
    ids.extend((2..=10).map(|i| format!("bench/model-{i}")));
    let entries: Vec<String> = ids.iter().map(|id| entry(id)).collect();
    format!(r#"{{"data":[{}]}}"#, entries.join(","))
}

/// `GET /key`: a key without a limit of its own.
const KEY: &str = r#"{"data":{"label":"mock","limit":null,"limit_remaining":null,"usage":0}}"#;

/// `--usable-every N` (0: every reply is usable): only every Nth reply is
/// usable; the others are charged like it but carry `choices: []`, as a
/// provider's broken reply does (the budget harness, bench/faults.sh).
pub static USABLE_EVERY: AtomicU64 = AtomicU64::new(0);

/// A reply as served by `model`, the one the request asked for.
fn completion(id: u64, prompt_bytes: usize, model: &str) -> String {
    let every = USABLE_EVERY.load(Ordering::Relaxed);
    if every > 1 && !id.is_multiple_of(every) {
        return format!(
            r#"{{"id":"gen-mock-{id}","provider":"Mock","model":"{model}","choices":[],"usage":{{"prompt_tokens":{},"completion_tokens":0,"cost":0.0001}}}}"#,
            prompt_bytes / 4
        );
    }
    let prompt_tokens = prompt_bytes / 4;
    format!(
        r#"{{"id":"gen-mock-{id}","provider":"Mock","model":"{model}","choices":[{{"index":0,"finish_reason":"stop","message":{{"role":"assistant","content":"{CONTENT}"}}}}],"usage":{{"prompt_tokens":{prompt_tokens},"completion_tokens":60,"total_tokens":{},"cost":0.0001}}}}"#,
        prompt_tokens + 60
    )
}

/// The `"model"` of a request body (the first one: helmbench sends it first).
fn model_of(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    text.split_once("\"model\":\"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(m, _)| m.to_string())
        .unwrap_or_default()
}

/// Accepts connections on `listener` forever, one task per connection.
pub async fn serve(listener: TcpListener, latency: Duration, stats: Arc<Stats>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let stats = stats.clone();
        tokio::spawn(async move {
            let _ = connection(stream, latency, stats).await;
        });
    }
}

/// Binds 127.0.0.1:`port` and serves in the background; returns the address.
pub async fn start(
    port: u16,
    latency: Duration,
) -> std::io::Result<(std::net::SocketAddr, Arc<Stats>)> {
    start_limited(port, latency, None).await
}

/// [`start`] with a rate limit per model (see `--rate-limit`).
pub async fn start_limited(
    port: u16,
    latency: Duration,
    rate_limit: Option<u64>,
) -> std::io::Result<(std::net::SocketAddr, Arc<Stats>)> {
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    let stats = Arc::new(Stats {
        rate_limit,
        ..Stats::default()
    });
    tokio::spawn(serve(listener, latency, stats.clone()));
    Ok((addr, stats))
}

async fn connection(
    stream: TcpStream,
    latency: Duration,
    stats: Arc<Stats>,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::with_capacity(16 * 1024, read);
    let mut line = String::new();
    let mut body = Vec::new();
    loop {
        // Request line.
        line.clear();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let path = parts.next().unwrap_or("").to_string();
        let http10 = parts.next() == Some("HTTP/1.0");
        // Headers.
        let mut content_length = 0usize;
        let mut close = http10;
        loop {
            line.clear();
            if reader.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            let h = line.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((name, value)) = h.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("content-length") {
                    content_length = value.parse().unwrap_or(0);
                } else if name.eq_ignore_ascii_case("connection") {
                    close = value.eq_ignore_ascii_case("close");
                }
            }
        }
        body.resize(content_length, 0);
        reader.read_exact(&mut body).await?;

        let (status, payload) = match (method.as_str(), path.as_str()) {
            ("POST", p) if p.ends_with("/chat/completions") => {
                let _ = stats.first_ns.compare_exchange(
                    0,
                    stats.now_ns(),
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
                let model = model_of(&body);
                let admitted = {
                    let mut m = stats.in_flight.lock().unwrap_or_else(|e| e.into_inner());
                    let n = m.entry(model.clone()).or_default();
                    if stats.rate_limit.is_some_and(|l| *n >= l) {
                        false
                    } else {
                        *n += 1;
                        true
                    }
                };
                if admitted {
                    tokio::time::sleep(latency).await;
                    if let Some(n) = stats
                        .in_flight
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get_mut(&model)
                    {
                        *n -= 1;
                    }
                    let id = stats.requests.fetch_add(1, Ordering::SeqCst);
                    ("200 OK", completion(id, content_length, &model))
                } else {
                    stats.rejected.fetch_add(1, Ordering::SeqCst);
                    (
                        "429 Too Many Requests\r\nretry-after: 1",
                        r#"{"error":{"code":429,"message":"Rate limit exceeded"}}"#.to_string(),
                    )
                }
            }
            ("GET", "/stats") => ("200 OK", stats.json()),
            ("GET", p) if p.ends_with("/models") => ("200 OK", catalog()),
            ("GET", p) if p.ends_with("/key") => ("200 OK", KEY.to_string()),
            ("POST", "/reset") => {
                stats.reset();
                ("200 OK", "{}".to_string())
            }
            _ => (
                "404 Not Found",
                r#"{"error":{"code":404,"message":"not found"}}"#.to_string(),
            ),
        };
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{}\r\n",
            payload.len(),
            if close { "connection: close\r\n" } else { "" }
        );
        let mut out = head.into_bytes();
        out.extend_from_slice(payload.as_bytes());
        write.write_all(&out).await?;
        if path.ends_with("/chat/completions") {
            stats.last_ns.fetch_max(stats.now_ns(), Ordering::SeqCst);
        }
        if close {
            return Ok(());
        }
    }
}

#[allow(dead_code)]
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str, default: u64| -> u64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map_or(default, |v| {
                v.parse().unwrap_or_else(|_| {
                    eprintln!("{name} takes a number, got {v}");
                    std::process::exit(2)
                })
            })
    };
    let port = flag("--port", 0) as u16;
    let latency = Duration::from_millis(flag("--latency-ms", 20));
    let threads = flag("--threads", 1) as usize;
    let rate_limit = Some(flag("--rate-limit", 0)).filter(|&n| n > 0);
    USABLE_EVERY.store(flag("--usable-every", 0), Ordering::Relaxed);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let (addr, _stats) = start_limited(port, latency, rate_limit)
            .await
            .unwrap_or_else(|e| {
                eprintln!("cannot listen on 127.0.0.1:{port}: {e}");
                std::process::exit(1)
            });
        println!("listening on {addr}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        std::future::pending::<()>().await;
    });
}
