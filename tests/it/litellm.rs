//! helmbench against a real third-party OpenAI-compatible server (issue
//! 29): the pinned LiteLLM proxy of scripts/litellm/, on a free loopback
//! port, every model a `mock_response` (no outbound connection). What it
//! really does is in scripts/litellm/FINDINGS.md: a plain `/v1/models`,
//! `error.code` as a string, an unknown model as 400, usage without a cost
//! (a priced model's cost in an `x-litellm-response-cost` header).
//!
//! One proxy serves the whole test binary, started on first use (6–25 s).
//! Its virtualenv is installed by `.ci/run`; without it these tests fail
//! under CI (`CI=true`) and are skipped elsewhere, saying how to install it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::support::child::open_db;
use crate::support::{Bench, json, online, repo_root, stderr};

/// The only key the proxy's custom_auth hook accepts.
const GOOD_KEY: &str = "sk-test-good";

/// Where `.ci/run` installs the proxy (`scripts/litellm/start.sh DIR install`).
fn venv() -> PathBuf {
    repo_root().join("target/litellm/venv")
}

const INSTALL: &str = "scripts/litellm/start.sh target/litellm install";

struct Proxy {
    base: String,
    /// The shell that runs the proxy and ends it when this test process
    /// ends (a static is never dropped).
    _watch: Mutex<Child>,
}

static PROXY: OnceLock<Result<Proxy, String>> = OnceLock::new();

/// The proxy's `/v1` base URL, started on first use; None (skipped, with a
/// message) when it is not installed outside CI. Under CI a missing
/// install or a proxy that does not start fails the test.
fn proxy() -> Option<&'static str> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    if !venv().join("bin/litellm").exists() {
        assert!(
            !ci,
            "the LiteLLM proxy is not installed at {} (CI=true: this suite must run; install it with `{INSTALL}`)",
            venv().display()
        );
        eprintln!(
            "skipped: the LiteLLM proxy is not installed (run `{INSTALL}` from the repository root, about 2 minutes and 760 MB)"
        );
        return None;
    }
    match PROXY.get_or_init(start) {
        Ok(p) => Some(&p.base),
        Err(why) => panic!("the LiteLLM proxy did not start: {why}"),
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The status code of `GET path` on the port, if anything answers.
fn get_status(port: u16, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

fn start() -> Result<Proxy, String> {
    let run_dir = tempfile::Builder::new()
        .prefix("helmbench-litellm-")
        .tempdir()
        .map_err(|e| e.to_string())?
        .keep();
    for f in ["config.yaml", "custom_auth.py"] {
        std::fs::copy(repo_root().join("scripts/litellm").join(f), run_dir.join(f))
            .map_err(|e| format!("{f}: {e}"))?;
    }
    let port = free_port();
    // This LiteLLM refuses to start without a master key other than the
    // well-known sk-1234; custom_auth decides every request regardless.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let master = format!("sk-master-{nanos:x}{:x}", std::process::id());
    let litellm = venv().join("bin/litellm");
    // The proxy runs under a shell that ends it as soon as this test
    // process is gone (or the proxy exits): nothing is left running.
    let script = format!(
        "\"$LITELLM\" --config config.yaml --host 127.0.0.1 --port {port} >litellm.log 2>&1 &
         p=$!
         while kill -0 {me} 2>/dev/null && kill -0 $p 2>/dev/null; do sleep 1; done
         kill $p 2>/dev/null; sleep 3; kill -9 $p 2>/dev/null; rm -rf \"$RUN_DIR\"",
        me = std::process::id()
    );
    let watch = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(&run_dir)
        .env("LITELLM", &litellm)
        .env("RUN_DIR", &run_dir)
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env("LITELLM_TELEMETRY_DISABLED", "true")
        .env("LITELLM_MASTER_KEY", master)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while get_status(port, "/health/liveliness") != Some(200) {
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(run_dir.join("litellm.log")).unwrap_or_default();
            return Err(format!(
                "not live on 127.0.0.1:{port} after 120 s; log:\n{log}"
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(Proxy {
        base: format!("http://127.0.0.1:{port}/v1"),
        _watch: Mutex::new(watch),
    })
}

/// The category_match scenario (two test cases, JSON schema) with `models`.
fn bench(models_yml: &str) -> Bench {
    let b = Bench::new();
    b.file("models.yml", models_yml).scenario("P1-B1-S1", "S1");
    b
}

fn run_batch(b: &Bench, base: &str, key: &str, extra: &[&str]) -> std::process::Output {
    online(b, key, base)
        .args(["run-batch", "--all-scenarios", "--test-retry-base-ms", "1"])
        .args(extra)
        .output()
        .unwrap()
}

fn costs(b: &Bench, base: &str) -> serde_json::Value {
    json(
        &online(b, GOOD_KEY, base)
            .args(["costs", "--format", "json"])
            .output()
            .unwrap(),
    )
}

async fn errors(b: &Bench) -> Vec<String> {
    let pool = open_db(b).await;
    sqlx::query_scalar("SELECT error FROM result WHERE error IS NOT NULL ORDER BY id")
        .fetch_all(&pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_whole_run_costs_the_models_yml_price_else_the_proxys_figure_else_unknown() {
    let Some(base) = proxy() else { return };
    // A models.yml price wins over the proxy's header.
    let b = bench(
        "models:\n  - id: json-ok\n    api: openai-compatible\n    structured_outputs: true\n    price: {prompt_per_mtok: 2, completion_per_mtok: 4}\n",
    );
    let out = run_batch(&b, base, GOOD_KEY, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let c = costs(&b, base);
    // The proxy's mock usage: 10 prompt and 20 completion tokens a reply.
    let per_reply = (10.0 * 2.0 + 20.0 * 4.0) / 1e6;
    let total = c["total_cost_usd"].as_f64().unwrap();
    assert!((total - 2.0 * per_reply).abs() < 1e-12, "{c}");
    assert_eq!(c["unknown_cost_replies"], 0, "{c}");

    // Without a price: the proxy's own figure (x-litellm-response-cost).
    let b = bench("models:\n  - id: json-ok\n    structured_outputs: true\n");
    let out = online(&b, GOOD_KEY, base)
        .env("HELMBENCH_API", "openai-compatible")
        .args(["run-batch", "--all-scenarios"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let c = costs(&b, base);
    let total = c["total_cost_usd"].as_f64().unwrap();
    assert!((total - 2.0 * 5e-5).abs() < 1e-9, "{c}");

    // A model the proxy has no price for: unknown, never $0.
    let b = bench(
        "models:\n  - id: json-free\n    api: openai-compatible\n    structured_outputs: true\n",
    );
    let out = run_batch(&b, base, GOOD_KEY, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let c = costs(&b, base);
    assert_eq!(c["unknown_cost_replies"], 2, "{c}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_probe_runs_against_the_proxy() {
    let Some(base) = proxy() else { return };
    // The proxy's mock answers every request with the same JSON, which is
    // not the probe's schema: the probe says so, and nothing else is sent.
    let b = bench("models:\n  - id: json-ok\n    api: openai-compatible\n");
    let out = run_batch(&b, base, GOOD_KEY, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("outside the schema"),
        "{}",
        stderr(&out)
    );
    assert!(!crate::support::db_path(&b).exists() || errors(&b).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_429_and_a_500_are_retried_then_stored_as_provider_errors() {
    let Some(base) = proxy() else { return };
    for (model, status) in [("rate-limited", "429"), ("server-error", "500")] {
        let b = bench(&format!(
            "models:\n  - id: {model}\n    api: openai-compatible\n    structured_outputs: true\n"
        ));
        let out = run_batch(&b, base, GOOD_KEY, &["--max-attempts", "2"]);
        assert_eq!(out.status.code(), Some(1), "{model}: {}", stderr(&out));
        let errs = errors(&b).await;
        assert_eq!(errs.len(), 2, "{model}: {errs:?}");
        for e in &errs {
            assert!(e.contains("gave up after 2 attempts"), "{e}");
            assert!(e.contains(status), "{model}: {e}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_key_stops_the_run_with_a_401() {
    let Some(base) = proxy() else { return };
    let b = bench(
        "models:\n  - id: json-ok\n    api: openai-compatible\n    structured_outputs: true\n",
    );
    // The model list needs the key too: unpriced, started with --yes.
    let out = run_batch(&b, base, "sk-test-wrong", &["--yes"]);
    assert_ne!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(err.contains("401"), "{err}");
    assert!(
        !err.contains("OpenRouter rejected"),
        "a server that is not OpenRouter is not called OpenRouter: {err}"
    );
    assert!(
        !err.contains("sk-test-wrong"),
        "the key is never shown: {err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_model_is_refused_before_anything_is_sent() {
    let Some(base) = proxy() else { return };
    let b = bench(
        "models:\n  - id: no-such-model\n    api: openai-compatible\n    structured_outputs: true\n",
    );
    let out = run_batch(&b, base, GOOD_KEY, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("`no-such-model` is not in the server's model list"),
        "{}",
        stderr(&out)
    );
}
