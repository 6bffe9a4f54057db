//! Writes a database for the `compare` benchmark (`bench/compare.sh`): the
//! synthetic benchmark of `gen_bench` and one completed batch run per model
//! with a stored result for every test case, written through the store's own
//! seeding and result writes (no provider, no mock, no reply text), so the
//! database has the shape `run-batch` leaves.
//!
//! ```sh
//! cargo run --release --example gen_compare_db -- OUT_DIR [MODELS [SCENARIOS CONDITIONS USER_CONTEXTS PERTURBATIONS]]
//! ```
//!
//! Defaults: 20 models, 100 x 10 x 10 x 10 (110,000 test cases each). Model
//! `k` passes a test case with probability 0.55 + 0.02 k, from a fixed-seed
//! generator, so the models differ by small, overlapping margins: the hard
//! case for intervals and ranks. Prints the number of results written.

#[allow(dead_code)]
#[path = "gen_bench.rs"]
pub mod gen_bench;

use std::path::Path;

use helmbench::benchmark::cases;
use helmbench::domain::{NewResult, RunStatus};
use helmbench::store::Store;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

/// Results handed to the store per call (one transaction each).
const BATCH: usize = 2000;

fn number(args: &[String], i: usize, default: usize) -> usize {
    args.get(i).map_or(default, |v| {
        v.parse().unwrap_or_else(|_| {
            eprintln!("not a number: {v}");
            std::process::exit(2)
        })
    })
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(out) = args.first() else {
        eprintln!(
            "usage: gen_compare_db OUT_DIR [MODELS [SCENARIOS CONDITIONS USER_CONTEXTS PERTURBATIONS]]\n\
             (defaults 20 100 10 10 10: 20 runs of 110,000 results)"
        );
        std::process::exit(2);
    };
    let out = Path::new(out);
    let models = number(&args, 1, 20);
    let shape = gen_bench::Shape {
        scenarios: number(&args, 2, 100),
        conditions: number(&args, 3, 10),
        user_contexts: number(&args, 4, 10),
        perturbations: number(&args, 5, 10),
    };
    if let Err(e) = run(out, models, shape).await {
        eprintln!("gen_compare_db: {e}");
        std::process::exit(1);
    }
}

/// Writes the benchmark and the database below `out`.
pub async fn run(
    out: &Path,
    models: usize,
    shape: gen_bench::Shape,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = out.join("bench");
    std::fs::create_dir_all(&root)?;
    gen_bench::generate(&root, shape)?;
    let benchmark = helmbench::content::load_strict(&root)?;
    let db = out.join("compare.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let store = Store::open(&format!("sqlite://{}", db.display())).await?;
    let ids = store.seed(&benchmark).await?;
    let cases = cases::select(&benchmark, &[], true)?;
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let mut written = 0usize;
    for k in 0..models {
        let model = format!("bench/model-{k:02}");
        let skill = 0.55 + 0.02 * k as f64;
        let run_id = store
            .create_run(
                ids.benchmark_id,
                &model,
                "batch",
                &json!({"synthetic": true}),
                cases.len() as i64,
                None,
            )
            .await?;
        let mut batch = Vec::with_capacity(BATCH);
        for case in &cases {
            let code = case.code();
            batch.push(NewResult {
                run_id,
                scenario_id: ids.scenarios[&case.scenario.code],
                condition_id: ids.conditions[&case.condition.full_code],
                user_context_id: case.user_context.map(|u| ids.user_contexts[&u.full_code]),
                perturbation_id: ids.perturbations[&case.perturbation.full_code],
                // One short prompt row per test case, shared by every run.
                prompt_hash: code.clone(),
                prompt: code.clone(),
                request_hash: format!("{model}/{code}"),
                base_severity: case.base_severity(),
                difficulty: case.condition.difficulty,
                passed: rng.random_bool(skill),
                evaluation_details: json!({}),
                attempts: 1,
                test_code: code,
                ..Default::default()
            });
            if batch.len() == BATCH {
                written += store.write_results(&batch, &[]).await?;
                batch.clear();
            }
        }
        written += store.write_results(&batch, &[]).await?;
        store.finish_run(run_id, RunStatus::Completed, None).await?;
        eprintln!("gen_compare_db: run {run_id} ({model}) written");
    }
    store.close().await;
    println!("{written}");
    Ok(())
}
