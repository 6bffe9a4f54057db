//! The transport floor for the performance harness: a bare HTTP client that
//! sends the same requests helmbench would send (the same composed prompts,
//! model and response format, composed and serialised before the clock
//! starts) to the same server with the same concurrency, through reqwest with
//! the same features, from a fixed pool of tasks. It does nothing with the
//! replies beyond reading them.
//!
//! ```sh
//! cargo run --release --example bare_client -- BASE_URL BENCHMARK_DIR REQUESTS CONCURRENCY
//! ```
//!
//! Prints `{"requests","seconds","rps","errors"}`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use helmbench::benchmark::cases;
use helmbench::benchmark::compose;
use helmbench::content;
use helmbench::openrouter::ChatRequest;

// The same allocator as the helmbench binary, so the floor is not handicapped.
#[cfg(not(test))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What one bare run measured.
#[derive(Debug, Clone, Copy)]
pub struct Floor {
    pub requests: usize,
    pub errors: usize,
    pub seconds: f64,
}

impl Floor {
    pub fn rps(&self) -> f64 {
        self.requests as f64 / self.seconds.max(1e-9)
    }
}

/// The first `n` request bodies of the benchmark at `root`, for its first model.
pub fn bodies(root: &Path, n: usize) -> Result<Vec<String>, String> {
    let b = content::load_strict(root).map_err(|e| e.to_string())?;
    let model = b
        .models
        .as_ref()
        .and_then(|m| m.models.first().cloned())
        .ok_or("models.yml names no model")?;
    let cases = cases::select_indices(&b, &[], true)?;
    Ok(cases
        .iter()
        .take(n)
        .map(|idx| {
            let case = idx.resolve(&b);
            ChatRequest {
                history: &[],
                model: &model,
                prompt: &compose::compose(&case),
                response_format: case.scenario.response_format.as_ref(),
                api: model.api.unwrap_or_default(),
                user: Some("hb-bench"),
            }
            .to_json()
        })
        .collect())
}

/// Sends every body to `{base}/chat/completions` from `concurrency` tasks.
pub async fn run(base: &str, bodies: Vec<String>, concurrency: usize) -> Floor {
    let client = reqwest::Client::builder()
        .tls_backend_rustls()
        .build()
        .expect("reqwest client");
    let url = format!("{}/chat/completions", base.trim_end_matches('/'));
    let bodies = Arc::new(bodies);
    let next = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (client, url, bodies, next, errors) = (
            client.clone(),
            url.clone(),
            bodies.clone(),
            next.clone(),
            errors.clone(),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(body) = bodies.get(i) else { break };
                let ok = match client
                    .post(&url)
                    .bearer_auth("bench")
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await
                {
                    Ok(r) => r.status().is_success() && r.text().await.is_ok(),
                    Err(_) => false,
                };
                if !ok {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Floor {
        requests: bodies.len(),
        errors: errors.load(Ordering::Relaxed),
        seconds: started.elapsed().as_secs_f64(),
    }
}

#[allow(dead_code)]
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() != 4 {
        eprintln!("usage: bare_client BASE_URL BENCHMARK_DIR REQUESTS CONCURRENCY");
        std::process::exit(2);
    }
    let n: usize = args[2].parse().expect("REQUESTS is a number");
    let concurrency: usize = args[3].parse().expect("CONCURRENCY is a number");
    let bodies = bodies(Path::new(&args[1]), n).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let floor = rt.block_on(run(&args[0], bodies, concurrency));
    println!(
        "{{\"requests\":{},\"seconds\":{:.6},\"rps\":{:.1},\"errors\":{}}}",
        floor.requests,
        floor.seconds,
        floor.rps(),
        floor.errors
    );
}
