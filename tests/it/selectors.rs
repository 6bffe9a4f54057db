//! Selectors (`--scenario`, `prompts CODE`, `run-single CODE`): blank ones,
//! ones with dots or slashes and codes of nothing are usage errors (exit 2),
//! refused before anything is sent or written.

use std::sync::atomic::Ordering;

use serde_json::json;
use wiremock::ResponseTemplate;

use crate::support::mock::{fixed_reply_server, triage_reply};
use crate::support::{Bench, assert_no_panic, bench, run, stderr, stdout};

#[test]
fn bad_selectors_are_usage_errors() {
    let b = Bench::new();
    b.scenario("P1-B1-S1", "S1");
    for sel in ["../etc", "P1/B1", "P9"] {
        let out = b.cmd().args(["prompts", sel]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{sel}");
        assert!(stderr(&out).contains(sel), "{}", stderr(&out));
    }
}

#[test]
fn selectors_with_dots_or_slashes_are_usage_errors_everywhere() {
    let b = Bench::new();
    b.file("models.yml", "models:\n  - id: a/b\n")
        .scenario("P1-B1-S1", "S1");
    for sel in [
        "..",
        "../P1",
        "P1/B1",
        "/etc/passwd",
        "P1-B1-S1/..",
        "P1-B1-S1\0",
    ] {
        for args in [
            vec!["run-batch", "--scenario", sel],
            vec!["run-batch", "--dry-run", "--scenario", sel],
            vec!["run-single", sel],
            vec!["prompts", sel],
        ] {
            // A key and an unreachable provider: a bad selector must be
            // refused before anything is sent or written.
            let out = match b
                .cmd()
                .env("OPENROUTER_API_KEY", "sk-test")
                .env("OPENROUTER_BASE_URL", "http://127.0.0.1:9")
                .args(&args)
                .output()
            {
                Ok(o) => o,
                // An interior NUL cannot even be passed as an argument.
                Err(_) if sel.contains('\0') => continue,
                Err(e) => panic!("{e}"),
            };
            assert_no_panic(&out);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.contains("is not a test or scenario code"),
                "{args:?}: {err}"
            );
            assert!(
                !b.dir.path().join("helmbench.db").exists(),
                "{args:?} wrote a database"
            );
        }
    }
}

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
