//! `--max-cost`: refused unless a finite amount above zero, and a run stops
//! at its budget. Replies the provider charged for but that had to be
//! retried count in the spend, in `costs` and in the budget. (One budget
//! over every model of a batch is tested in batch_models.rs; the refusal
//! before sending, from the estimate, in estimate.rs.)

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::json;
use wiremock::{MockServer, Request, Respond, ResponseTemplate};

use crate::support::child::{count, open_db};
use crate::support::mock::{Shared, completion, counting_server, prompt_of, serve, triage_server};
use crate::support::{
    assert_no_panic, bench, costs_total, db_path, grid_bench, run, run_row, runs_json, stderr,
    triage_content,
};

/// Every reply costs this much.
const COST: f64 = 0.001;

#[tokio::test(flavor = "multi_thread")]
async fn max_cost_that_is_not_a_finite_amount_above_zero_is_a_usage_error() {
    let (server, mock) = counting_server(0, &[]).await;
    let b = grid_bench(1, 2);
    for bad in [
        "NaN", "nan", "inf", "-inf", "1e999", "-1", "0", "-0", "", "ten",
    ] {
        let out = run(
            &b,
            &server,
            &["run-batch", "--all-scenarios", &format!("--max-cost={bad}")],
        );
        assert_no_panic(&out);
        assert_eq!(
            out.status.code(),
            Some(2),
            "--max-cost {bad:?}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains("--max-cost"), "{}", stderr(&out));
    }
    assert_eq!(mock.total.load(Ordering::SeqCst), 0, "nothing sent");
    assert!(!db_path(&b).exists(), "nothing written");
}

#[tokio::test(flavor = "multi_thread")]
async fn max_cost_stops_the_run() {
    let m = triage_server().await;
    let b = bench();
    b.file(
        "scenarios/P1-B1-S1/conditions.md",
        "# C1\n## A\nx\n\n# C2\n## A\ny\n\n# C3\n## A\nz\n",
    );
    let out = run(
        &b,
        &m.server,
        &[
            "run-batch",
            "--all-scenarios",
            "--concurrency",
            "1",
            "--max-cost",
            "0.0025",
            // The estimate's upper end is past this budget: the in-run stop is tested.
            "--yes",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["status"], "interrupted");
    assert_eq!(r["test_cases"], 3, "{r}");
    assert!(r["message"].as_str().unwrap().contains("budget"));
}

/// Every first attempt is a charged reply that must be retried (in turn:
/// empty content with finish_reason stop, `choices: []`, an error inside a
/// 200 carrying `usage.cost`); every second attempt is a good reply.
struct ChargedRetries {
    attempts: Mutex<HashMap<String, usize>>,
    calls: AtomicUsize,
}

impl Respond for Shared<ChargedRetries> {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let n = self.0.calls.fetch_add(1, Ordering::SeqCst);
        let p = prompt_of(req);
        let attempt = {
            let mut m = self.0.attempts.lock().unwrap();
            let a = m.entry(p.clone()).or_insert(0);
            *a += 1;
            *a
        };
        let usage = json!({"prompt_tokens": 100, "completion_tokens": 0, "cost": COST});
        if attempt > 1 {
            return ResponseTemplate::new(200).set_body_json(completion(&triage_content(&p), COST));
        }
        ResponseTemplate::new(200).set_body_json(match n % 3 {
            0 => {
                let mut v = completion("", COST);
                v["usage"] = usage;
                v
            }
            1 => json!({"id": "gen-x", "choices": [], "usage": usage}),
            _ => json!({"error": {"code": 502, "message": "upstream overloaded"}, "usage": usage}),
        })
    }
}

async fn charged_retries_server() -> (MockServer, Arc<ChargedRetries>) {
    let c = Arc::new(ChargedRetries {
        attempts: Mutex::new(HashMap::new()),
        calls: AtomicUsize::new(0),
    });
    (serve(Shared(c.clone())).await, c)
}

#[tokio::test(flavor = "multi_thread")]
async fn charged_replies_that_are_retried_count_in_spend_costs_and_budget() {
    let (server, mock) = charged_retries_server().await;
    let b = grid_bench(3, 2);
    let out = run(
        &b,
        &server,
        &["run-batch", "--all-scenarios", "--concurrency", "1"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        mock.calls.load(Ordering::SeqCst),
        12,
        "two paid calls per test case"
    );
    let r = run_row(&b, 1);
    assert_eq!(r["passed"], 6, "{r}");
    assert!(
        (r["cost_usd"].as_f64().unwrap() - 0.012).abs() < 1e-9,
        "{r}"
    );
    assert!(
        (r["discarded_cost_usd"].as_f64().unwrap() - 0.006).abs() < 1e-9,
        "{r}"
    );
    assert!((costs_total(&b) - 0.012).abs() < 1e-9);
    // Stored per request, by test case.
    let pool = open_db(&b).await;
    assert_eq!(
        count(
            &pool,
            "SELECT COUNT(*) FROM discarded_charge WHERE call = 'model' AND attempts = 1"
        )
        .await,
        6
    );

    // And the budget sees them: $0.002 per test case, stop at $0.005.
    let (server, mock) = charged_retries_server().await;
    let b = grid_bench(3, 2);
    let out = run(
        &b,
        &server,
        &[
            "run-batch",
            "--all-scenarios",
            "--concurrency",
            "1",
            "--max-cost",
            "0.005",
            // Past the estimate's upper end: the in-run stop is tested.
            "--yes",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let paid = mock.calls.load(Ordering::SeqCst) as f64 * COST;
    assert!(paid <= 0.005 + 2.0 * COST + 1e-9, "paid {paid}");
    assert!(
        (costs_total(&b) - paid).abs() < 1e-9,
        "costs shows every paid call"
    );
}

/// Charges [`CHARGE`] for every reply it sends; two replies in three are
/// unusable (in turn an empty paid reply and `choices: []`), so most test
/// cases are retried, and each retry is paid.
struct MostlyUnusable {
    calls: AtomicUsize,
}

/// What [`MostlyUnusable`] charges per reply.
const CHARGE: f64 = 0.01;

impl Respond for Shared<MostlyUnusable> {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let n = self.0.calls.fetch_add(1, Ordering::SeqCst);
        let usage = json!({"prompt_tokens": 100, "completion_tokens": 0, "cost": CHARGE});
        let body = match n % 3 {
            0 => {
                let mut v = completion("", CHARGE);
                v["usage"] = usage;
                v
            }
            1 => json!({"id": "gen-x", "choices": [], "usage": usage}),
            _ => completion(&triage_content(&prompt_of(req)), CHARGE),
        };
        ResponseTemplate::new(200)
            .set_body_json(body)
            .set_delay(std::time::Duration::from_millis(5))
    }
}

/// A batch at `concurrency` against [`MostlyUnusable`] with `--max-cost
/// max`: what the mock charged stays within the budget plus one paid
/// reply per request in flight, and every charge is in `costs`.
async fn budget_holds_under_paid_retries(max: f64, concurrency: usize) {
    let mock = Arc::new(MostlyUnusable {
        calls: AtomicUsize::new(0),
    });
    let server = serve(Shared(mock.clone())).await;
    let b = grid_bench(10, 30); // 300 test cases, $9 or so without a budget
    let out = run(
        &b,
        &server,
        &[
            "run-batch",
            "--all-scenarios",
            "--concurrency",
            &concurrency.to_string(),
            "--max-cost",
            &max.to_string(),
            "--yes",
        ],
    );
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let charged = mock.calls.load(Ordering::SeqCst) as f64 * CHARGE;
    assert!(
        charged <= max + concurrency as f64 * CHARGE + 1e-9,
        "the mock charged ${charged:.2} for a --max-cost of ${max} at concurrency {concurrency}"
    );
    assert!(charged >= max - 1e-9, "stopped early: ${charged:.2}");
    assert!(
        (costs_total(&b) - charged).abs() < 1e-9,
        "costs shows ${} of ${charged:.2} charged",
        costs_total(&b)
    );
    let r = run_row(&b, 1);
    assert_eq!(r["status"], "interrupted", "{r}");
    assert!(r["message"].as_str().unwrap().contains("budget"), "{r}");
}

#[tokio::test(flavor = "multi_thread")]
async fn paid_retries_and_late_starts_stay_within_one_dollar_at_concurrency_8() {
    budget_holds_under_paid_retries(1.00, 8).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn paid_retries_stop_at_the_budget_of_five_cents_at_concurrency_4() {
    budget_holds_under_paid_retries(0.05, 4).await;
}
