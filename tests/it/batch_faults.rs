//! `run-batch --batch-api` under faults (issue 41): a create whose outcome
//! is unknown is never sent again on its own; a poll's 404 is not taken for
//! a lost batch; judge costs are counted as the synchronous path counts
//! them; a batch read again after a read error counts nothing twice.

use crate::batch_api::{FAST, bench};
use crate::support::batches::{Opts, batch_server};
use crate::support::{read, run, runs_json, stderr, stdout};

/// A batch accepted and then answered 502 may exist: its test cases are
/// held (never paid twice), every place says so and names the choice.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_accepted_then_answered_502_is_never_sent_again_on_its_own() {
    let (server, mock) = batch_server(Opts {
        accept_then_502: vec![0],
        ..Opts::default()
    })
    .await;
    let b = bench(4, "");
    let args = [
        FAST,
        "run-batch",
        "--scenario",
        "P1-B1-S1",
        "--batch-api",
        "--batch-size",
        "2",
        "--yes",
    ];
    let out = run(&b, &server, &args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let once = |mock: &crate::support::batches::BatchApiMock| {
        let accepted = mock.accepted();
        assert_eq!(accepted.len(), 4, "{accepted:?}");
        assert!(accepted.values().all(|&n| n == 1), "{accepted:?}");
    };
    once(&mock);
    let choice = "helmbench run-batch --resume 1 --resubmit-uncertain";
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        text.contains("2 requests in 1 batch of uncertain submission") && text.contains(choice),
        "{text}"
    );
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["test_cases"], 2, "{r}");
    assert!(r["batches"][0]["uncertain"].as_bool().unwrap(), "{r}");
    let table = stdout(&crate::support::ok(read(&b, &["runs"])));
    assert!(
        table.contains("(submission uncertain)") && table.contains(choice),
        "{table}"
    );

    // A plain resume holds them too.
    let out = run(&b, &server, &[FAST, "run-batch", "--resume", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    once(&mock);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains(choice), "{text}");

    // The user's choice: sent again, and the run completes.
    let out = run(
        &b,
        &server,
        &[FAST, "run-batch", "--resume", "1", "--resubmit-uncertain"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["test_cases"], 4);
    assert_eq!(mock.accepted().values().filter(|&&n| n == 2).count(), 2);
}
