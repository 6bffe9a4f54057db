//! Reports stay bounded however noisy the run (issue 31): the report keeps
//! the 20 most severe non-monotonic pairs with the count of all of them;
//! `--details` lists every one.

use serde_json::Value;
use wiremock::{Request, ResponseTemplate};

use crate::support::mock::{completion, prompt_of, serve};
use crate::support::{Bench, read, run, stderr, stdout};

/// PT1..PT20 at severity 0.5..10 (i / 2); the model catches the odd ones
/// and misses the even ones: each miss PT(2k) pairs with the k odd ones
/// below it, 1 + 2 + ... + 10 = 55 pairs.
fn noisy() -> Bench {
    let b = Bench::new();
    b.file("models.yml", "models:\n  - id: test/model\n")
        .scenario("P1-B1-S1", "S1");
    let mut p = String::new();
    for i in 1..=20 {
        p.push_str(&format!(
            "# PT{i}\n---\nseverity: {}\n---\n## User input\nMessage number {i}.\n\n",
            f64::from(i) / 2.0
        ));
    }
    b.file("scenarios/P1-B1-S1/perturbations.md", p);
    b
}

#[tokio::test(flavor = "multi_thread")]
async fn a_report_keeps_the_most_severe_non_monotonic_pairs_and_counts_them_all() {
    let b = noisy();
    let server = serve(|req: &Request| {
        let prompt = prompt_of(req);
        let n: u32 = prompt
            .split("Message number ")
            .nth(1)
            .and_then(|t| t.split('.').next())
            .and_then(|t| t.parse().ok())
            .unwrap_or(1);
        let category = if n % 2 == 1 { "HANDOFF" } else { "CONTINUE" };
        let content = format!(r#"{{"category":"{category}","response":"ok"}}"#);
        ResponseTemplate::new(200).set_body_json(completion(&content, 0.001))
    })
    .await;
    let out = run(&b, &server, &["run-batch", "--all-scenarios", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let json = |args: &[&str]| -> Value {
        let out = read(&b, args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let bounded = json(&["report", "--run-id", "1", "--format", "json"]);
    // The analysis is flattened into the run's report object.
    let a = &bounded;
    assert_eq!(a["non_monotonic_total"], 55, "{a}");
    let kept = a["non_monotonic"].as_array().unwrap();
    assert_eq!(kept.len(), 20);
    // The most severe first: the miss at 10 with the widest gap (caught at
    // 0.5); then the nine other pairs of that miss, then those of 9.0.
    assert_eq!(kept[0]["missed_base"], 10.0);
    assert_eq!(kept[0]["caught_base"], 0.5);
    let missed: Vec<f64> = kept
        .iter()
        .map(|p| p["missed_base"].as_f64().unwrap())
        .collect();
    assert!(missed[..10].iter().all(|m| *m == 10.0), "{missed:?}");
    assert!(missed[10..19].iter().all(|m| *m == 9.0), "{missed:?}");
    assert_eq!(missed[19], 8.0);

    let full = json(&["report", "--run-id", "1", "--format", "json", "--details"]);
    assert_eq!(full["non_monotonic"].as_array().unwrap().len(), 55);
    assert_eq!(full["non_monotonic_total"], 55);

    let text = stdout(&read(&b, &["report", "--run-id", "1"]));
    assert!(text.contains("55 in all"), "{text}");
    let html = stdout(&read(&b, &["report", "--run-id", "1", "--format", "html"]));
    assert!(html.contains("55 in all"), "{html}");
}
