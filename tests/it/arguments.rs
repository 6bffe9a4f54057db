//! Arguments refused before anything runs (issue 41 #16): zero attempts
//! or a zero timeout would run a batch that can never get an answer; a
//! control character in a model id would reach the terminal as an escape
//! sequence, so it is refused with the id shown escaped.

use crate::support::mock::{completions, triage_server};
use crate::support::{Bench, assert_no_panic, bench, run, stderr};

fn check_no_panic_exit(out: &std::process::Output, code: i32) {
    assert_no_panic(out);
    assert_eq!(out.status.code(), Some(code), "{}", stderr(out));
}

/// `--max-attempts 0` and `--request-timeout 0` are usage errors (exit 2)
/// that send nothing.
#[tokio::test(flavor = "multi_thread")]
async fn zero_attempts_or_a_zero_timeout_is_a_usage_error() {
    let t = triage_server().await;
    let b = bench();
    for (flag, value) in [("--max-attempts", "0"), ("--request-timeout", "0")] {
        for command in [&["run-batch", "--all-scenarios"][..], &["run-single"][..]] {
            let mut args = command.to_vec();
            args.extend([flag, value]);
            let out = run(&b, &t.server, &args);
            check_no_panic_exit(&out, 2);
            let err = stderr(&out);
            assert!(err.contains(flag), "{args:?}: {err}");
        }
    }
    assert_eq!(completions(&t.server).await.len(), 0, "nothing sent");
}

/// A model id with a control character, from `--models`, `--judges` or
/// models.yml, is refused (exit 2) and shown escaped, never raw.
#[tokio::test(flavor = "multi_thread")]
async fn a_control_character_in_a_model_id_is_refused_and_shown_escaped() {
    let t = triage_server().await;
    let b = bench();
    let hostile = "test/model\u{1b}[2J\u{7}";
    for flag in ["--models", "--judges"] {
        let out = run(
            &b,
            &t.server,
            &["run-batch", "--all-scenarios", flag, hostile],
        );
        check_no_panic_exit(&out, 2);
        let err = stderr(&out);
        assert!(!err.contains('\u{1b}') && !err.contains('\u{7}'), "{err:?}");
        assert!(err.contains("control character"), "{err}");
        assert!(err.contains(r"\u{1b}"), "{err}");
    }
    let out = run(&b, &t.server, &["report", "--model", hostile]);
    check_no_panic_exit(&out, 2);
    assert!(!stderr(&out).contains('\u{1b}'));

    let b = Bench::new();
    b.file("models.yml", "models:\n  - id: \"test/model\\e[31m\"\n")
        .scenario("P1-B1-S1", "S1");
    let out = b.helmbench().std().arg("check").output().unwrap();
    check_no_panic_exit(&out, 2);
    let err = String::from_utf8_lossy(&out.stdout).to_string() + &stderr(&out);
    assert!(!err.contains('\u{1b}'), "{err:?}");
    assert!(
        err.contains("models.yml") && err.contains("control character"),
        "{err}"
    );
    assert_eq!(completions(&t.server).await.len(), 0, "nothing sent");
}
