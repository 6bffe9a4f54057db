//! `run-batch --batch-api` resumed (issue 41): a Batch API run stays one on
//! every resume, whether or not a batch went out before, with its recorded
//! `--batch-size`, each batch's estimate reserved against `--max-cost`, and
//! the real spend in its end-of-run line.

use crate::batch_api::{batch_run, bench};
use crate::support::batches::{Opts, batch_server};
use crate::support::{runs_json, stderr};

/// The budget stops the run before its first batch: the resume goes on in
/// batch mode (no synchronous chat request), at the batch price.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_stopped_before_its_first_batch_resumes_in_batch_mode_at_the_batch_price() {
    let (server, mock) = batch_server(Opts::default()).await;
    let b = bench(5, "");
    // A batch of two is estimated at about $0.004: over $0.001.
    batch_run(
        &b,
        &server,
        &["--batch-size", "2", "--max-cost", "0.001"],
        1,
    );
    assert!(mock.state.lock().unwrap().batches.is_empty());
    batch_run(&b, &server, &["--resume", "1", "--max-cost", "1"], 0);
    let st = mock.state.lock().unwrap();
    assert_eq!(st.sync_calls, 0, "no synchronous chat request");
    // Its recorded --batch-size: 5 test cases in batches of 2.
    let sizes: Vec<usize> = st.batches.iter().map(|b| b.requests.len()).collect();
    assert_eq!(sizes, [2, 2, 1], "{sizes:?}");
    let batch_costs = st.batch_costs;
    drop(st);
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["status"], "completed", "{r}");
    let cost = r["cost_usd"].as_f64().unwrap() + r["judge_cost_usd"].as_f64().unwrap();
    // Half the synchronous price of 5 replies.
    assert!((cost - 5.0 * 0.0005).abs() < 1e-9, "{cost}");
    assert!((cost - batch_costs).abs() < 1e-9, "{cost} != {batch_costs}");
}

/// Resumed after two batches: the rest goes out in batches of the recorded
/// size, each reserving its estimate, so the budget refuses the one that
/// could cross it; the end says what was really spent.
#[tokio::test(flavor = "multi_thread")]
async fn a_resumed_batch_run_keeps_its_batch_size_and_reserves_each_batch() {
    let (server, mock) = batch_server(Opts::default()).await;
    let b = bench(9, "");
    let first = ["--batch-size", "2", "--max-cost", "0.01"];
    batch_run(&b, &server, &first, 1);
    assert_eq!(mock.state.lock().unwrap().batches.len(), 2);
    assert_eq!(runs_json(&b)["runs"][0]["test_cases"], 4);

    // $0.002 spent (4 replies at $0.0005); batches of two at about $0.004
    // each: two more fit under $0.011, a third could cross it.
    let out = batch_run(&b, &server, &["--resume", "1", "--max-cost", "0.011"], 1);
    let st = mock.state.lock().unwrap();
    assert_eq!(st.sync_calls, 0);
    let sizes: Vec<usize> = st.batches.iter().map(|b| b.requests.len()).collect();
    assert_eq!(sizes, [2, 2, 2, 2], "{}", stderr(&out));
    drop(st);
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["test_cases"], 8, "{r}");
    let msg = r["message"].as_str().unwrap();
    assert!(msg.contains("budget reached: $0.0020 spent"), "{msg}");
    let text = stderr(&out);
    assert!(
        text.contains("$0.0040 spent"),
        "the real spend at the end: {text}"
    );
}
