//! `costs` over the scored run of [`crate::support::scored_run`]: what the
//! mock billed, per run, scenario and model, and a second run from the
//! cache that costs only what was sent again.

use std::sync::atomic::Ordering;

use crate::support::scored_run::{JUDGE_COST, MODEL_COST, setup};
use crate::support::{close, json as out_json, ok, read, run, stderr, stdout};

#[tokio::test(flavor = "multi_thread")]
async fn costs_json_matches_what_the_mock_billed() {
    let s = setup().await;
    // 12 + 1 model calls, 2 judge calls (CR1, CR2), nothing retried.
    let (model_calls, judge_calls) = (
        s.model_calls.load(Ordering::SeqCst),
        s.judge_calls.load(Ordering::SeqCst),
    );
    assert_eq!((model_calls, judge_calls), (13, 2));
    let model_usd = model_calls as f64 * MODEL_COST;
    let judge_usd = judge_calls as f64 * JUDGE_COST;

    let c = out_json(&ok(read(&s.bench, &["costs", "--format", "json"])));
    let r = &c["runs"][0];
    assert_eq!(r["run_id"], 1);
    assert_eq!(r["model"], "test/model");
    assert_eq!(r["test_cases"], 13);
    close(&r["cost_usd"], model_usd);
    close(&r["judge_cost_usd"], judge_usd);
    close(&r["total_cost_usd"], model_usd + judge_usd);
    assert_eq!(r["prompt_tokens"], 100 * model_calls as u64);
    assert_eq!(r["completion_tokens"], 20 * model_calls as u64);
    assert_eq!(r["judge_calls"], 2);
    assert_eq!(r["judge_prompt_tokens"], 400);
    assert_eq!(r["judge_completion_tokens"], 80);
    assert_eq!(r["cached_replies"], 0);
    close(
        &r["mean_cost_per_test_case"],
        (model_usd + judge_usd) / 13.0,
    );
    close(&c["total_cost_usd"], model_usd + judge_usd);

    let scenarios = r["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 2);
    assert_eq!(scenarios[0]["scenario"], "P1-B1-S1");
    assert_eq!(scenarios[0]["test_cases"], 12);
    close(&scenarios[0]["cost_usd"], 12.0 * MODEL_COST);
    close(&scenarios[0]["judge_cost_usd"], 0.0);
    assert_eq!(scenarios[1]["scenario"], "P2-B1-S1");
    close(&scenarios[1]["cost_usd"], MODEL_COST);
    close(&scenarios[1]["judge_cost_usd"], judge_usd);
    assert_eq!(c["models"][0]["model"], "test/model");
    assert_eq!(c["models"][0]["runs"], 1);

    // The filters agree; the table says the total.
    let by_run = out_json(&ok(read(
        &s.bench,
        &[
            "costs",
            "--run-id",
            "1",
            "--model",
            "test/model",
            "--format",
            "json",
        ],
    )));
    assert_eq!(by_run, c);
    let table = stdout(&ok(read(&s.bench, &["costs"])));
    assert!(
        table.contains(&format!("total: ${:.6}", model_usd + judge_usd)),
        "{table}"
    );
    assert!(table.contains("P2-B1-S1"), "{table}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_run_from_cache_costs_only_what_was_sent_again() {
    let s = setup().await;
    // The same batch again is already complete (the reply outside the
    // schema is the model's answer, as for --resume): nothing sent.
    let out = run(&s.bench, &s.server, &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("already complete in run 1 (13 results;"),
        "{}",
        stdout(&out)
    );
    assert_eq!(s.model_calls.load(Ordering::SeqCst), 13);
    // Scored another way, it is a new run of the same requests.
    let out = run(
        &s.bench,
        &s.server,
        &["run-batch", "--all-scenarios", "--blocked-as", "fail"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Well-formed replies and verdicts come from the cache; the reply that
    // failed its schema is never reused, so that one request goes out again.
    assert_eq!(s.model_calls.load(Ordering::SeqCst), 14);
    assert_eq!(s.judge_calls.load(Ordering::SeqCst), 2);
    let c = out_json(&ok(read(&s.bench, &["costs", "--format", "json"])));
    assert_eq!(c["runs"].as_array().unwrap().len(), 2);
    let second = &c["runs"][1];
    assert_eq!(second["run_id"], 2);
    assert_eq!(second["cached_replies"], 12);
    assert_eq!(second["cached_judgements"], 2);
    close(&second["cost_usd"], MODEL_COST);
    close(&second["judge_cost_usd"], 0.0);
    close(&c["total_cost_usd"], 14.0 * MODEL_COST + 2.0 * JUDGE_COST);
    assert_eq!(c["models"][0]["runs"], 2);
    close(
        &c["models"][0]["total_cost_usd"],
        14.0 * MODEL_COST + 2.0 * JUDGE_COST,
    );
    // The default report picks the latest run; both score the same.
    let all = out_json(&ok(read(&s.bench, &["report", "--format", "json"])));
    assert_eq!(all["reports"][0]["run_id"], 2);
    let first = out_json(&ok(read(
        &s.bench,
        &["report", "--run-id", "1", "--format", "json"],
    )));
    assert_eq!(all["reports"][0]["score"], first["score"]);
}
