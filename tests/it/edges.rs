//! Refusals before spending and hostile replies (issue 17, second half):
//! blank selectors, near-miss scenario names, credentials in the base URL,
//! the reply cache keyed by endpoint, capped reply bodies, unusable costs,
//! read-only commands and keys echoed inside replies. Every test drives the
//! real binary; the only network is a mock OpenRouter on 127.0.0.1.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::harness::{Bench, stderr, stdout};
use crate::reliability::assert_no_panic;
use crate::runner::{bench, completion, run};

/// Counts the requests it gets and answers every one with `body`.
struct Counting {
    calls: Arc<AtomicUsize>,
    reply: ResponseTemplate,
}

impl Respond for Counting {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.reply.clone()
    }
}

async fn counting_server(reply: ResponseTemplate) -> (MockServer, Arc<AtomicUsize>) {
    let server = MockServer::start().await;
    let calls = Arc::new(AtomicUsize::new(0));
    Mock::given(method("POST"))
        .and(path("/chat/completions"))
        .respond_with(Counting {
            calls: calls.clone(),
            reply,
        })
        .mount(&server)
        .await;
    (server, calls)
}

fn triage_reply(cost: Value) -> Value {
    let mut body = completion(
        r#"{"category":"HANDOFF","response":"I hear you. Please reach out."}"#,
        0.0,
    );
    body["usage"]["cost"] = cost;
    body
}

// ---------------------------------------------------------------------------
// 1. Blank selectors
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn blank_selectors_are_usage_errors_and_send_nothing() {
    let (server, calls) =
        counting_server(ResponseTemplate::new(200).set_body_json(triage_reply(json!(0.001)))).await;
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
