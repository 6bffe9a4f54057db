//! The API key and other credentials never leak: not into the output at any
//! log level, the database or an export, not when a provider echoes the key
//! back (in any encoding), not to another host through a redirect, and not
//! from a base URL that carries credentials (refused without printing
//! them). TLS is rustls only.

use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, Request, Respond, ResponseTemplate};

use crate::support::child::{connect, open_db, run_to_end};
use crate::support::mock::{
    Sequence, completion, fixed_reply_server, mock_server, mount_catalog, ok_reply, serve,
    triage_reply,
};
use crate::support::{
    KEY, assert_key_absent, assert_no_panic, bench, bench_of, database_files, db_path, grid_bench,
    online, read, repo_root, run_in_order, run_with, stderr, stdout, triage_content,
};

#[tokio::test(flavor = "multi_thread")]
async fn key_never_appears_in_output_trace_logs_or_database() {
    let b = grid_bench(1, 4);
    // Every path that reports a provider's words: a retry, an echoed key in
    // an error message, a 400 rejection, and finally a 401 stop.
    let echo = format!("invalid request for key {KEY}");
    let script = || {
        Sequence::new(vec![
            ResponseTemplate::new(429)
                .insert_header("Retry-After", "0")
                .set_body_json(json!({"error": {"code": 429, "message": echo}})),
            ok_reply(&triage_content("can't go on")),
            ResponseTemplate::new(400)
                .set_body_json(json!({"error": {"code": 400, "message": echo}})),
            ok_reply(&triage_content("x")),
            ResponseTemplate::new(401)
                .set_body_json(json!({"error": {"code": 401, "message": echo}})),
        ])
    };
    let server = mock_server().await;
    let mut logs = Vec::new();
    for level in ["trace", "debug", "info"] {
        server.reset().await;
        mount_catalog(&server).await;
        Mock::given(method("POST"))
            .and(path("/chat/completions"))
            .respond_with(script())
            .mount(&server)
            .await;
        let _ = std::fs::remove_file(db_path(&b));
        let mut c = online(&b, KEY, &server.uri());
        let out = c
            .env("RUST_LOG", level)
            .env("RUST_BACKTRACE", "full")
            .args(["-vv", "run-batch", "--all-scenarios", "--concurrency", "1"])
            .output()
            .unwrap();
        assert_no_panic(&out);
        assert_key_absent(&format!("stdout at {level}"), &out.stdout);
        assert_key_absent(&format!("stderr at {level}"), &out.stderr);
        logs.push(stderr(&out));
        for (f, bytes) in database_files(&b) {
            assert_key_absent(f, &bytes);
        }
    }
    let trace = &logs[0];
    // The trace really had the HTTP stack's own events in it, and the
    // provider's words (with the key scrubbed) reached the output.
    assert!(
        trace.contains("TRACE") && trace.lines().count() > 50,
        "RUST_LOG=trace produced no trace output:\n{trace}"
    );
    // hyper-util's connection pool and connector logged at trace level.
    assert!(
        trace.contains("Http::connect") && trace.contains("connecting to 127.0.0.1"),
        "no HTTP-stack tracing in:\n{trace}"
    );
    assert!(trace.contains("<redacted>"), "{trace}");
    assert!(
        trace.contains("OPENROUTER_API_KEY"),
        "the 401 names the variable"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn redirect_to_another_host_never_carries_the_key() {
    let other = mock_server().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(completion(&triage_content("x"), 0.001)),
        )
        .mount(&other)
        .await;
    let first = mock_server().await;
    for status in [301, 302, 303, 307, 308] {
        first.reset().await;
        mount_catalog(&first).await;
        Mock::given(method("POST"))
            .respond_with(
                ResponseTemplate::new(status)
                    .insert_header("Location", format!("{}/chat/completions", other.uri())),
            )
            .mount(&first)
            .await;
        let b = grid_bench(1, 1);
        let out = run_to_end(&b, &first.uri(), &["run-batch", "--all-scenarios"]).await;
        assert_no_panic(&out);
        assert_key_absent("stderr", &out.stderr);
        // The first server saw the key (it is the configured provider)...
        let seen = first.received_requests().await.unwrap();
        assert!(!seen.is_empty());
        assert!(seen[0].headers.get("authorization").is_some());
        // ...the other host never did.
        for r in other.received_requests().await.unwrap() {
            assert!(
                r.headers.get("authorization").is_none(),
                "{status} redirect carried Authorization to another host"
            );
        }
        // The redirect is reported, not silently followed.
        let pool = open_db(&b).await;
        let err: String = sqlx::query_scalar("SELECT error FROM result")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert!(
            err.contains(&status.to_string()) && err.contains("redirect"),
            "{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn base_url_with_credentials_is_refused_without_printing_them() {
    let (server, calls) =
        fixed_reply_server(ResponseTemplate::new(200).set_body_json(triage_reply(json!(0.001))))
            .await;
    let b = bench();
    let host = server.uri().trim_start_matches("http://").to_string();
    let with_userinfo = format!("http://alice:hunter2-pw@{host}");
    for base in [
        with_userinfo.as_str(),
        "http://alice:hunter2-pw@127.0.0.1:9/api/v1",
        "http://:hunter2-pw@127.0.0.1:9",
        // Not valid URLs, still never echoed with the password.
        "http://alice:hunter2-pw@[::1/api",
        "http://alice:hunter2-pw@exa mple.com",
        "ftp://alice:hunter2-pw@127.0.0.1:9",
        "alice:hunter2-pw@127.0.0.1:9",
    ] {
        for args in [&["run-batch", "--all-scenarios"][..], &["run-single"][..]] {
            let out = run_with(&b, KEY, base, args);
            assert_no_panic(&out);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{base} {args:?}: {err}");
            assert!(err.contains("OPENROUTER_BASE_URL"), "{base}: {err}");
            assert!(
                !err.contains("hunter2") && !stdout(&out).contains("hunter2"),
                "{base}: the password was printed: {err}"
            );
            assert!(!db_path(&b).exists(), "{base}: a database was written");
        }
    }
    let out = run_with(&b, KEY, &with_userinfo, &["run-batch", "--all-scenarios"]);
    assert!(
        stderr(&out).contains("must not carry credentials"),
        "{}",
        stderr(&out)
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0, "a request was sent");
}

/// A key with characters that JSON, HTML and URLs each escape.
const ODD_KEY: &str = "sk-or-v1-SECRET/<&\"'>+9z";

fn html_escaped(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

fn unicode_escaped(s: &str) -> String {
    s.chars().map(|c| format!("\\u{:04x}", c as u32)).collect()
}

/// Echoes the key back a different way on each request.
struct Echo {
    n: AtomicUsize,
}

impl Respond for Echo {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let i = self.n.fetch_add(1, Ordering::SeqCst);
        let reply = |said: &str| {
            let content = json!({"category": "HANDOFF", "response": said}).to_string();
            let mut body = completion(&content, 0.001);
            body["id"] = json!(format!("gen-{ODD_KEY}"));
            body["provider"] = json!(ODD_KEY);
            ResponseTemplate::new(200).set_body_json(body)
        };
        match i {
            0 => reply(&format!("your key is {ODD_KEY}")),
            1 => reply(&format!("<p>key: {}</p>", html_escaped(ODD_KEY))),
            2 => reply(&format!("json: {}", serde_json::to_string(ODD_KEY).unwrap())),
            // The key only as \u escapes in the raw body, inside the content.
            3 => ResponseTemplate::new(200).set_body_raw(
                format!(
                    r#"{{"id":"gen-1","choices":[{{"finish_reason":"stop","message":{{"role":"assistant","content":"{{\"category\":\"HANDOFF\",\"response\":\"{}\"}}"}}}}],"usage":{{"cost":0.001}}}}"#,
                    unicode_escaped(ODD_KEY).replace('\\', "\\\\")
                ),
                "application/json",
            ),
            // And in an error that is stored.
            _ => ResponseTemplate::new(400).set_body_raw(
                format!(
                    r#"{{"error":{{"code":400,"message":"bad key {} / {}"}}}}"#,
                    unicode_escaped(ODD_KEY),
                    html_escaped(ODD_KEY)
                ),
                "application/json",
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_echoed_inside_replies_is_scrubbed_before_storing() {
    let server = serve(Echo {
        n: AtomicUsize::new(0),
    })
    .await;
    let b = bench_of(5);
    let out = run_in_order(&b, ODD_KEY, &server);
    assert_no_panic(&out);
    // The 400 is stored as a provider error, so the run asks to be resumed.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let p = connect(&b).await.unwrap();
    let rows: Vec<String> = sqlx::query_scalar(
        "SELECT json_array(response, parsed, error, generation_id) FROM result ORDER BY id",
    )
    .fetch_all(&p)
    .await
    .unwrap();
    assert_eq!(rows.len(), 5);
    let all = format!("{rows:?}");
    assert_eq!(
        all.matches("<redacted>").count(),
        // Replies 1-3: response, parsed and generation id; reply 4: response
        // and parsed; reply 5: twice in its error.
        3 + 3 + 3 + 2 + 2,
        "{all}"
    );
    p.close().await;
    let export = stdout(&read(&b, &["export", "--with-prompts"]));
    assert_secret_nowhere(&b, &out, export);
}

/// TLS goes through rustls: no OpenSSL or native-tls anywhere in the build
/// (`.ci/run` checks the same on reqwest's resolved features).
#[test]
fn tls_is_rustls_only() {
    let lock = std::fs::read_to_string(repo_root().join("Cargo.lock")).unwrap();
    let names: Vec<&str> = lock
        .lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .map(|l| l.trim_end_matches('"'))
        .collect();
    for banned in [
        "openssl",
        "openssl-sys",
        "native-tls",
        "hyper-tls",
        "tokio-native-tls",
    ] {
        assert!(!names.contains(&banned), "{banned} is in Cargo.lock");
    }
    assert!(names.contains(&"rustls"));
    assert!(
        names.contains(&"rustls-platform-verifier") || names.contains(&"webpki-roots"),
        "rustls needs system or webpki roots"
    );
}

#[test]
fn help_names_the_key_variable_but_never_its_value() {
    let b = crate::support::Bench::new();
    for args in [&["--help"][..], &["run-batch", "--help"][..]] {
        let out = b
            .helmbench()
            .std()
            .env("OPENROUTER_API_KEY", "sk-or-v1-help-secret-0123456789")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("[env: OPENROUTER_API_KEY]"), "{text}");
        assert!(
            !text.contains("help-secret"),
            "the key's value leaked into --help: {text}"
        );
    }
}

/// The key's distinctive middle is in none of the command's output, the
/// export or the database.
fn assert_secret_nowhere(b: &crate::support::Bench, out: &std::process::Output, export: String) {
    for (what, bytes) in [
        ("stdout", out.stdout.clone()),
        ("stderr", out.stderr.clone()),
        ("export", export.into_bytes()),
        ("h.db", std::fs::read(db_path(b)).unwrap()),
    ] {
        assert!(
            !bytes.windows(6).any(|w| w == b"SECRET"),
            "the key leaked into {what}"
        );
    }
}

/// An error body that echoes the key with some characters HTML- or
/// percent-escaped and the rest as is: matches no whole form of the key,
/// and is scrubbed all the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_escaped_in_part_inside_an_error_is_scrubbed() {
    let partly = [
        KEY.replacen('-', "&#45;", 1),
        KEY.replace("SECRET-", "SECRET&#x2D;"),
        KEY.replace("-7f", "%2D7f"),
    ];
    let (server, _) = fixed_reply_server(
        ResponseTemplate::new(400).set_body_json(json!({"error": {"code": 400,
            "message": format!("invalid key {} / {} / {}", partly[0], partly[1], partly[2])}})),
    )
    .await;
    let b = bench();
    let out = run_in_order(&b, KEY, &server);
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let export = stdout(&read(&b, &["export", "--with-prompts"]));
    assert!(export.contains("<redacted>"), "{export}");
    assert_secret_nowhere(&b, &out, export);
}
