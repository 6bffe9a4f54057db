//! Refusals before spending and hostile replies (issue 17, second half):
//! blank selectors, near-miss scenario names, credentials in the base URL,
//! the reply cache keyed by endpoint, capped reply bodies, unusable costs,
//! read-only commands and keys echoed inside replies. Every test drives the
//! real binary; the only network is a mock OpenRouter on 127.0.0.1.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use wiremock::{Request, Respond, ResponseTemplate};

use crate::support::child::connect;
use crate::support::mock::{
    completion, fixed_reply_server, sequence_server, serve, triage_reply, triage_server,
};
use crate::support::{
    Bench, KEY, assert_no_panic, bench, bench_of, db_path, json as out_json, online, read_at, run,
    run_in_order, run_with, runs_json, stderr, stdout,
};

// ---------------------------------------------------------------------------
// 1. Blank selectors
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn blank_selectors_are_usage_errors_and_send_nothing() {
    let (server, calls) =
        fixed_reply_server(ResponseTemplate::new(200).set_body_json(triage_reply(json!(0.001))))
            .await;
    let b = bench();
    for sel in ["", " ", ",", " , ", "P1-B1-S1,", ",P1-B1-S1"] {
        for args in [
            vec!["run-batch", "--scenario", sel],
            vec!["run-batch", "--dry-run", "--scenario", sel],
            vec!["prompts", sel],
            vec!["run-single", sel],
        ] {
            let out = run(&b, &server, &args);
            assert_no_panic(&out);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            // run-single takes one code: a comma is simply not a code.
            let not_a_code =
                args[0] == "run-single" && err.contains("is not a test or scenario code");
            assert!(
                err.contains("empty selector") || not_a_code,
                "{args:?}: {err}"
            );
            assert!(out.stdout.is_empty(), "{args:?}: {}", stdout(&out));
        }
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "a blank selector sent requests"
    );
    assert!(
        !b.dir.path().join("h.db").exists(),
        "a database was written"
    );
}

// ---------------------------------------------------------------------------
// 2. Scenario names that almost parse
// ---------------------------------------------------------------------------

#[test]
fn near_miss_scenario_names_are_content_errors_and_notes_stay_ignored() {
    let b = Bench::new();
    b.file("models.yml", "models:\n  - id: a/b\n")
        .scenario("P1-B1-S1", "S1")
        .scenario("P2/B1/S1", "S1")
        // Clearly not scenarios: ignored as before.
        .file("scenarios/README.md", "# Scenarios\n")
        .file("scenarios/notes/ideas.md", "S1 could be about exams.\n")
        .file("scenarios/.git/HEAD", "ref: refs/heads/main\n")
        .file("scenarios/images/chart.png", "png")
        .file("scenarios/v2/draft.md", "later\n")
        .file("scenarios/P2/README.md", "# Pillar 2\n")
        .file("scenarios/P2/B1/README.md", "# Behaviour 1\n")
        .file("scenarios/P2/B1/assets/x.txt", "x")
        .scenario("_drafts/P1-B9-S1", "S1")
        .scenario(".hidden-P1-B9-S2", "S2");
    let ok = b
        .cmd()
        .args(["run-batch", "--all-scenarios", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));

    // The slips an author makes, each meant as a scenario.
    // (scenario folder, the folder reported, the code it reads as)
    let slips = [
        ("p1-b3-s1", "p1-b3-s1", "P1-B3-S1"),
        ("P1_B4_S1", "P1_B4_S1", "P1-B4-S1"),
        ("P1.B5.S1", "P1.B5.S1", "P1-B5-S1"),
        ("P1B6S1", "P1B6S1", "P1-B6-S1"),
        ("P1-B7-s2--lower-case", "P1-B7-s2--lower-case", "P1-B7-S2"),
        ("P2/b2/S1", "P2/b2", "P2-B2"),
        ("P2/B1/s3", "P2/B1/s3", "P2-B1-S3"),
    ];
    for (rel, _, code) in slips {
        b.scenario(rel, code.rsplit('-').next().unwrap());
    }
    // A scenario's files dropped straight into a behaviour folder.
    b.file(
        "scenarios/P1-B8/S1.md",
        "---\ncategory: HANDOFF\n---\n## A\nx\n",
    )
    .file("scenarios/P1-B8/S1.json", "{}")
    .file("scenarios/P1-B8/README.md", "# fine\n");
    for args in [
        &["run-batch", "--all-scenarios", "--dry-run"][..],
        &["list"][..],
        &["prompts"][..],
    ] {
        let out = b.cmd().args(args).output().unwrap();
        assert_no_panic(&out);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        for (_, shown, code) in slips {
            let folder = shown.rsplit('/').next().unwrap();
            assert!(
                err.lines()
                    .any(|l| l.contains(&format!("scenarios/{shown}: "))
                        && l.contains(&format!("`{folder}` is close to scenario path {code}"))),
                "{args:?}: nothing about {shown} in:\n{err}"
            );
        }
        for f in ["P1-B8/S1.md", "P1-B8/S1.json"] {
            assert!(
                err.lines().any(|l| l.contains(f)
                    && l.contains("scenario file outside a scenario folder")
                    && l.contains("P1-B8-S1/ or P1/B8/S1/")),
                "{args:?}: nothing about {f} in:\n{err}"
            );
        }
        for ignored in [
            "README.md",
            "notes",
            ".git",
            "images",
            "v2",
            "assets",
            "_drafts",
            "hidden",
        ] {
            assert!(
                !err.contains(ignored),
                "{args:?}: {ignored} reported:\n{err}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Shared below: a scenario with `n` test cases, and the binary run with a
// chosen key and base URL against `h.db`.
// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// 3. Credentials in the base URL
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// 4. The reply cache is keyed by endpoint
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn cached_replies_are_reused_only_for_the_same_endpoint() {
    let local = triage_server().await;
    let real = triage_server().await;
    let b = bench();
    let batch = ["run-batch", "--all-scenarios"];
    let out = run_with(&b, KEY, &local.server.uri(), &batch);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(local.calls.load(Ordering::SeqCst), 2);
    // Same requests, another server: nothing comes from the local replies.
    let out = run_with(&b, KEY, &real.server.uri(), &batch);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        real.calls.load(Ordering::SeqCst),
        2,
        "replies of another endpoint were reused"
    );
    assert_eq!(runs_json(&b)["runs"][0]["cached_replies"], 0);
    // The same server again: its own replies are reused.
    let out = run_with(&b, KEY, &format!("{}/", real.server.uri()), &batch);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(real.calls.load(Ordering::SeqCst), 2);
    assert_eq!(runs_json(&b)["runs"][0]["cached_replies"], 2);

    // Rows written before endpoints were recorded are never reused.
    let p = connect(&b).await.unwrap();
    sqlx::query("UPDATE result SET endpoint = NULL")
        .execute(&p)
        .await
        .unwrap();
    p.close().await;
    let out = run_with(&b, KEY, &real.server.uri(), &batch);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(real.calls.load(Ordering::SeqCst), 4);
    let p = connect(&b).await.unwrap();
    let endpoints: Vec<Option<String>> =
        sqlx::query_scalar("SELECT DISTINCT endpoint FROM result ORDER BY endpoint")
            .fetch_all(&p)
            .await
            .unwrap();
    assert_eq!(
        endpoints,
        vec![
            None,
            Some(format!("{}/chat/completions", real.server.uri()))
        ]
    );
}

// ---------------------------------------------------------------------------
// 5. Reply bodies are capped
// ---------------------------------------------------------------------------

/// A server that answers every request with 200 and a chunked body that
/// never ends (until the client hangs up), counting requests.
async fn endless_body_server() -> (String, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let c = c.clone();
            tokio::spawn(async move {
                // Read the request head and body (small) before answering.
                let mut buf = vec![0u8; 64 * 1024];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                // Completions only: the preflight's GETs get the same endless body.
                if got.starts_with(b"POST") {
                    c.fetch_add(1, Ordering::SeqCst);
                }
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                if sock.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = format!("{:x}\r\n{}\r\n", 64 * 1024, "x".repeat(64 * 1024));
                while sock.write_all(chunk.as_bytes()).await.is_ok() {}
            });
        }
    });
    (format!("http://{addr}"), calls)
}

#[tokio::test(flavor = "multi_thread")]
async fn reply_bodies_over_the_limit_are_abandoned_and_retried() {
    // An endless body: read whole, it would fill memory until the timeout.
    let (uri, calls) = endless_body_server().await;
    let b = bench();
    let started = std::time::Instant::now();
    let out = online(&b, KEY, &uri)
        .env("HELMBENCH_MAX_REPLY_BYTES", "1048576")
        .args([
            "run-batch",
            "--all-scenarios",
            "--max-attempts",
            "2",
            "--request-timeout",
            "60",
            // The model list is endless too: not priced, started anyway.
            "--yes",
        ])
        .output()
        .unwrap();
    assert_no_panic(&out);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "the body was read until the timeout ({:?})",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        4,
        "two test cases, two attempts each"
    );
    let p = connect(&b).await.unwrap();
    let errors: Vec<String> =
        sqlx::query_scalar("SELECT error FROM result WHERE error_kind = 'provider'")
            .fetch_all(&p)
            .await
            .unwrap();
    assert_eq!(errors.len(), 2);
    for e in errors {
        assert!(
            e.contains("1048576-byte limit") && e.contains("gave up after 2 attempts"),
            "{e}"
        );
    }

    // With a Content-Length over the limit, the body is not read at all;
    // under the limit, the reply is used.
    let mut big = triage_reply(json!(0.001));
    big["padding"] = json!("y".repeat(2 * 1024 * 1024));
    let (server, calls) = fixed_reply_server(ResponseTemplate::new(200).set_body_json(big)).await;
    let b = bench();
    let out = run_with(
        &b,
        KEY,
        &server.uri(),
        &[
            "run-batch",
            "--all-scenarios",
            "--max-attempts",
            "3",
            "--max-reply-bytes",
            "1048576",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(calls.load(Ordering::SeqCst), 6);
    assert!(stderr(&out).contains("of 2097"), "{}", stderr(&out));
    // The default limit (16 MiB) takes the 2 MB reply.
    let out = run_with(&b, KEY, &server.uri(), &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let runs = runs_json(&b);
    assert_eq!(runs["runs"][0]["test_cases"], 2);
    assert_eq!(runs["runs"][0]["provider_errors"], 0);
}

// ---------------------------------------------------------------------------
// 6. Costs that are not usable numbers
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn unusable_costs_are_recorded_as_unknown_and_never_fail_a_write() {
    let costs = vec![
        json!("NaN"),
        json!(-0.5),
        json!(1e300),
        json!("inf"),
        json!("-Infinity"),
        json!("twelve cents"),
        json!({"usd": 1}),
        json!(5000.0),
        json!(0.001),
        json!("0.002"),
        json!(null),
        json!(0.0),
    ];
    // One reply per cost, in order.
    let server = sequence_server(
        costs
            .iter()
            .map(|c| ResponseTemplate::new(200).set_body_json(triage_reply(c.clone())))
            .collect(),
    )
    .await;
    let b = bench_of(costs.len());
    let out = run_in_order(&b, KEY, &server);
    assert_no_panic(&out);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(
        err.matches("recorded as unknown").count(),
        8,
        "one warning per unusable cost:\n{err}"
    );
    let runs = runs_json(&b);
    assert_eq!(runs["runs"][0]["test_cases"], costs.len());
    assert_eq!(runs["runs"][0]["status"], "completed");
    let c = read_at(&b, &db_path(&b), &["costs", "--format", "json"]);
    assert_eq!(c.status.code(), Some(0), "{}", stderr(&c));
    let c = out_json(&c);
    assert_eq!(c["unknown_cost_replies"], 8, "{c}");
    assert_eq!(c["runs"][0]["unknown_cost_replies"], 8);
    let total = c["total_cost_usd"].as_f64().unwrap();
    assert!((total - 0.003).abs() < 1e-12, "{total}");
    let text = stdout(&read_at(&b, &db_path(&b), &["costs"]));
    assert!(text.contains("unknown cost: 8 replies"), "{text}");
    let p = connect(&b).await.unwrap();
    let stored: Vec<(f64, bool)> =
        sqlx::query_as("SELECT cost_usd, cost_unknown FROM result ORDER BY id")
            .fetch_all(&p)
            .await
            .unwrap();
    assert_eq!(stored.iter().filter(|(_, u)| *u).count(), 8);
    assert!(
        stored
            .iter()
            .all(|(c, _)| c.is_finite() && *c >= 0.0 && *c < 1.0)
    );
}

// ---------------------------------------------------------------------------
// 7. Read-only commands open the database read-only
// ---------------------------------------------------------------------------

fn read_commands() -> Vec<Vec<&'static str>> {
    vec![
        vec!["runs", "--format", "json"],
        vec!["report", "--format", "json"],
        vec!["costs", "--format", "json"],
        vec!["export"],
    ]
}

fn listing(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[cfg(unix)]
fn chmod(p: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn read_only_commands_read_archived_and_read_only_copies_without_writing() {
    let m = triage_server().await;
    let b = bench();
    let out = run_with(&b, KEY, &m.server.uri(), &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A finished run leaves the database in one file: a copy of it alone is whole.
    assert_eq!(
        listing(b.dir.path())
            .iter()
            .filter(|f| f.starts_with("h.db"))
            .count(),
        1
    );
    let expected = stdout(&read_at(&b, &db_path(&b), &["export"]));
    assert_eq!(expected.lines().count(), 2);

    for read_only in [false, true] {
        let arch = b.dir.path().join(format!("archive-{read_only}"));
        std::fs::create_dir(&arch).unwrap();
        let copy = arch.join("h.db");
        std::fs::copy(db_path(&b), &copy).unwrap();
        #[cfg(unix)]
        if read_only {
            chmod(&copy, 0o444);
            chmod(&arch, 0o555);
        }
        let bytes = std::fs::read(&copy).unwrap();
        for args in read_commands() {
            let out = read_at(&b, &copy, &args);
            assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
            if args[0] == "export" {
                assert_eq!(stdout(&out), expected);
            }
            // SQLite in mode=ro may add empty -wal/-shm files where it can;
            // a read-only copy gets nothing.
            if read_only {
                assert_eq!(
                    listing(&arch),
                    vec!["h.db"],
                    "{args:?} left files beside the copy"
                );
            }
        }
        assert_eq!(std::fs::read(&copy).unwrap(), bytes, "the copy was written");
        #[cfg(unix)]
        chmod(&arch, 0o755);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn read_only_commands_never_migrate_an_older_database() {
    let m = triage_server().await;
    let b = bench();
    let out = run_with(&b, KEY, &m.server.uri(), &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Make it a database from before the endpoint/unknown-cost migration.
    let p = connect(&b).await.unwrap();
    let last: i64 = 20261123000003;
    for sql in [
        "ALTER TABLE result DROP COLUMN endpoint",
        "ALTER TABLE judgement DROP COLUMN endpoint",
        "ALTER TABLE result DROP COLUMN cost_unknown",
        "ALTER TABLE judgement DROP COLUMN cost_unknown",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&p)
            .await
            .unwrap();
    }
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version = ?")
        .bind(last)
        .execute(&p)
        .await
        .unwrap();
    p.close().await;
    let bytes = std::fs::read(db_path(&b)).unwrap();
    for args in read_commands() {
        let out = read_at(&b, &db_path(&b), &args);
        assert_no_panic(&out);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("older helmbench") && err.contains("helmbench migrate"),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty());
    }
    assert_eq!(
        std::fs::read(db_path(&b)).unwrap(),
        bytes,
        "a read-only command changed the file"
    );
    let p = connect(&b).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations WHERE version = ?")
        .bind(last)
        .fetch_one(&p)
        .await
        .unwrap();
    assert_eq!(n, 0, "migrated by a read-only command");
    p.close().await;

    // `migrate` upgrades it; the old results then report as before.
    let out = read_at(&b, &db_path(&b), &["migrate"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("1 migration applied"),
        "{}",
        stderr(&out)
    );
    for args in read_commands() {
        let out = read_at(&b, &db_path(&b), &args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(runs_json(&b)["runs"][0]["passed"], 2);
    let out = read_at(&b, &db_path(&b), &["migrate"]);
    assert!(stderr(&out).contains("up to date"), "{}", stderr(&out));
}

// ---------------------------------------------------------------------------
// 8. A key echoed inside a reply
// ---------------------------------------------------------------------------

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
    let export = stdout(&read_at(&b, &db_path(&b), &["export", "--with-prompts"]));
    for (what, bytes) in [
        ("stdout", out.stdout.clone()),
        ("stderr", out.stderr.clone()),
        ("export", export.into_bytes()),
        ("h.db", std::fs::read(db_path(&b)).unwrap()),
    ] {
        assert!(
            !bytes.windows(6).any(|w| w == b"SECRET"),
            "the key leaked into {what}"
        );
    }
}
