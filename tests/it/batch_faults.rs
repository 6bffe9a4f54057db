//! `run-batch --batch-api` under faults (issue 41): a create whose outcome
//! is unknown is never sent again on its own; a poll's 404 is not taken for
//! a lost batch; judge costs are counted as the synchronous path counts
//! them; a batch read again after a read error counts nothing twice.

use crate::batch_api::{FAST, batch_run, bench};
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
    let out = batch_run(&b, &server, &["--batch-size", "2"], 1);
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
    let out = batch_run(&b, &server, &["--resume", "1"], 1);
    once(&mock);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains(choice), "{text}");

    // The user's choice: sent again, and the run completes.
    batch_run(&b, &server, &["--resume", "1", "--resubmit-uncertain"], 0);
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["test_cases"], 4);
    assert_eq!(mock.accepted().values().filter(|&&n| n == 2).count(), 2);
}

/// A poll that answers 404 for a while (a batch just created, a bad minute
/// at OpenRouter) is polled again: the batch is read when it answers, and
/// nothing is submitted twice.
#[tokio::test(flavor = "multi_thread")]
async fn a_poll_404_is_polled_again_and_never_resubmits() {
    let (server, mock) = batch_server(Opts {
        not_found_polls: 3,
        ..Opts::default()
    })
    .await;
    let b = bench(3, "");
    batch_run(&b, &server, &[], 0);
    assert_eq!(runs_json(&b)["runs"][0]["status"], "completed");
    let st = mock.state.lock().unwrap();
    assert_eq!(st.batches.len(), 1, "submitted once");
    assert_eq!(st.batches[0].not_found, 3);
}

/// A batch that answers 404 past the window is taken as of uncertain
/// submission: held, the choice named, nothing sent again.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_not_found_past_the_window_is_held_not_resubmitted() {
    let (server, mock) = batch_server(Opts {
        not_found_polls: usize::MAX,
        ..Opts::default()
    })
    .await;
    let b = bench(3, "");
    let out = batch_run(&b, &server, &["--test-batch-404-window-ms=300"], 1);
    let st = mock.state.lock().unwrap();
    assert_eq!(st.batches.len(), 1, "submitted once");
    assert!(st.batches[0].not_found >= 2, "{}", st.batches[0].not_found);
    drop(st);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        text.contains("not found at OpenRouter")
            && text.contains("helmbench run-batch --resume 1 --resubmit-uncertain"),
        "{text}"
    );
}

/// A resume with another base URL (or key) than the run's batches were
/// submitted with is refused before anything is sent there: a poll would
/// answer 404 for a batch that runs on, and is paid, where it was sent.
#[tokio::test(flavor = "multi_thread")]
async fn a_resume_at_another_base_url_or_key_is_refused_before_anything_is_sent() {
    let (server, _mock) = batch_server(Opts::default()).await;
    let b = bench(2, "");
    batch_run(&b, &server, &["--detach"], 0);
    let (elsewhere, other) = batch_server(Opts::default()).await;
    let out = run(&b, &elsewhere, &[FAST, "run-batch", "--resume", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("its batches were submitted to {}", server.uri()))
            && err.contains(&elsewhere.uri())
            && err.contains("nothing was sent"),
        "{err}"
    );
    // Nothing of the Batch API nor a chat request reached the other server.
    let sent = elsewhere.received_requests().await.unwrap_or_default();
    assert!(
        sent.iter()
            .all(|r| !r.url.path().contains("batches") && !r.url.path().contains("chat")),
        "{:?}",
        sent.iter()
            .map(|r| r.url.path().to_string())
            .collect::<Vec<_>>()
    );
    assert!(other.state.lock().unwrap().batches.is_empty());
    // Another key at the same base URL: refused the same way, the key
    // itself never printed.
    let out = crate::support::run_with(
        &b,
        "sk-or-another-key-0000",
        &server.uri(),
        &[FAST, "run-batch", "--resume", "1"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("another API key"), "{err}");
    assert!(
        !err.contains("sk-or-") && !err.contains(crate::support::KEY),
        "{err}"
    );
}

/// The spend the batch path counts (its progress line, the budget) is what
/// the run stores: a BYOK judge's upstream cost included, as synchronously.
#[tokio::test(flavor = "multi_thread")]
async fn a_byok_judges_upstream_cost_counts_in_the_batch_spend() {
    let (server, _mock) = batch_server(Opts::default()).await;
    let b = bench(1, "");
    let out = batch_run(
        &b,
        &server,
        &[
            "--scenario",
            "P3-B1-S1",
            "--judges",
            "judge/byok",
            "--progress-every",
            "1",
        ],
        0,
    );
    let r = &runs_json(&b)["runs"][0];
    let stored = r["cost_usd"].as_f64().unwrap() + r["judge_cost_usd"].as_f64().unwrap();
    // The model reply at half price and the judge's upstream at half price.
    let expected = 0.0005 + 0.00025;
    assert!((stored - expected).abs() < 1e-9, "{stored} {r}");
    let err = stderr(&out);
    let last = err
        .lines()
        .rfind(|l| l.starts_with("batch API: run 1"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        last.ends_with(&format!("${expected:.4} spent")),
        "{last}\n{err}"
    );
}

/// A read that breaks part-way is read again: what the first read already
/// sent out again (an item error) is not queued twice, and its charges are
/// not counted twice.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_read_again_after_a_read_error_queues_nothing_twice() {
    let (server, mock) = batch_server(Opts {
        corrupt_reads: 1,
        ..Opts::default()
    })
    .await;
    let b = bench(
        3,
        "# PT9\n---\nseverity: 5\n---\n## User input\nI can't go on (item-error).\n\n",
    );
    batch_run(&b, &server, &[], 0);
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["test_cases"], 4);
    let st = mock.state.lock().unwrap();
    assert!(st.refused.is_empty(), "{:?}", st.refused);
    assert_eq!(st.batches[0].reads, 2, "read again once");
    let batch_costs = st.batch_costs;
    drop(st);
    // The item error went out again once, in one request.
    let accepted = mock.accepted();
    assert_eq!(
        accepted[&("test/model".to_string(), "P1-B1-S1-C1-PT9~0".to_string())],
        2,
        "{accepted:?}"
    );
    let cost = r["cost_usd"].as_f64().unwrap() + r["judge_cost_usd"].as_f64().unwrap();
    assert!((cost - batch_costs).abs() < 1e-9, "{cost} != {batch_costs}");
}

/// Results that cannot be read however often they are read stop the run
/// after a bounded number of tries, naming the batch; nothing is resubmitted.
#[tokio::test(flavor = "multi_thread")]
async fn results_that_never_read_stop_after_bounded_tries_naming_the_batch() {
    let (server, mock) = batch_server(Opts {
        corrupt_reads: usize::MAX,
        ..Opts::default()
    })
    .await;
    let b = bench(2, "");
    batch_run(&b, &server, &[], 1);
    let st = mock.state.lock().unwrap();
    assert_eq!(st.batches.len(), 1, "nothing resubmitted");
    let reads = st.batches[0].reads;
    assert!((2..=10).contains(&reads), "{reads}");
    drop(st);
    let msg = runs_json(&b)["runs"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("batch_0") && msg.contains("could not be read"),
        "{msg}"
    );
}
