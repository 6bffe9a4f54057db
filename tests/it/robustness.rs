//! The robustness section of `report` (issue 43): on the mock, a model that
//! fails on lower-case messages shows the drop under `lowercase` and one
//! that answers by meaning shows none; the paired p and interval match a
//! reference computed here, independently of helmbench's code.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;
use wiremock::{Request, ResponseTemplate};

use crate::support::mock::{completion, prompt_of, serve};
use crate::support::{bench_of, json as out_json, ok, read, run, stderr, stdout};

/// The message number `N` of `... message N.` in a prompt.
fn message_number(prompt: &str) -> usize {
    let at = prompt.find("message ").expect("a numbered message") + "message ".len();
    prompt[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

/// `test/model` answers by meaning (HANDOFF to "can't go on" in any case);
/// `a/b` misses odd-numbered messages written in lower case
/// ("i can't go on"), message 7 always, and message 12 only as written.
fn reply(req: &Request) -> ResponseTemplate {
    let body: Value = serde_json::from_slice(&req.body).unwrap();
    let p = prompt_of(req);
    let n = message_number(&p);
    let lower = p.contains("i can't go on");
    let miss = body["model"] == "a/b" && ((lower && n % 2 == 1) || n == 7 || (!lower && n == 12));
    let cat = if miss { "CONTINUE" } else { "HANDOFF" };
    ResponseTemplate::new(200).set_body_json(completion(
        &format!(r#"{{"category":"{cat}","response":"I hear you."}}"#),
        0.001,
    ))
}

/// McNemar's exact two-sided p by hand: 2 * P(X <= min(b, c)) for
/// X ~ Binomial(b + c, 1/2), capped at 1 (McNemar 1947; the conditional
/// binomial form, e.g. Fagerland, Lydersen & Laake 2013, BMC Med Res
/// Methodol 13:91, eq. 2).
fn mcnemar_by_hand(b: u64, c: u64) -> f64 {
    let n = b + c;
    let choose = |n: u64, k: u64| (1..=k).fold(1.0, |acc, i| acc * (n - k + i) as f64 / i as f64);
    let tail: f64 = (0..=b.min(c)).map(|k| choose(n, k)).sum::<f64>() / 2f64.powi(n as i32);
    (2.0 * tail).min(1.0)
}

/// The paired percentile bootstrap as the README describes it: test cases
/// in byte order of their codes, each resample draws as many with
/// replacement from ChaCha8 seeded with 43, 2000 resamples, the difference
/// of pass rates, the 2.5th and 97.5th percentiles linearly interpolated.
fn bootstrap_by_hand(mut diffs: Vec<(String, i64)>) -> [f64; 2] {
    diffs.sort();
    let mut rng = ChaCha8Rng::seed_from_u64(43);
    let n = diffs.len();
    let mut values: Vec<f64> = (0..2000)
        .map(|_| {
            let s: i64 = (0..n).map(|_| diffs[rng.random_range(0..n)].1).sum();
            s as f64 / n as f64
        })
        .collect();
    values.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let x = q * (values.len() - 1) as f64;
        let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
        values[lo] + (values[hi] - values[lo]) * (x - lo as f64)
    };
    [at(0.025), at(0.975)]
}

fn close(a: &Value, b: f64) {
    let a = a.as_f64().unwrap_or_else(|| panic!("{a} is not a number"));
    assert!((a - b).abs() < 1e-9, "{a} != {b}");
}

#[tokio::test(flavor = "multi_thread")]
async fn robustness_shows_the_drop_under_lowercase_for_the_fragile_model_only() {
    let b = bench_of(12);
    b.file(
        "models.yml",
        "marking_model: judge/model\nmodels:\n  - id: test/model\n    temperature: 0\n  - id: a/b\n    temperature: 0\n",
    );
    let server = serve(reply).await;
    let out = ok(run(
        &b,
        &server,
        &[
            "run-batch",
            "--all-scenarios",
            "--variants",
            "lowercase,british",
        ],
    ));
    // british changes nothing in these messages: skipped, and said once.
    let err = stderr(&out);
    assert_eq!(
        err.matches("british changes nothing in 12 of 12 test cases")
            .count(),
        1,
        "{err}"
    );

    let fragile = out_json(&ok(read(
        &b,
        &["report", "--model", "a/b", "--format", "json"],
    )));
    // The headline is the originals' alone: 10 of 12 passed (7 and 12 missed).
    assert_eq!(fragile["scored"], 12, "{fragile}");
    assert_eq!(fragile["passed"], 10, "{fragile}");
    let r = &fragile["robustness"];
    let v = &r["variants"][0];
    assert_eq!(r["variants"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(v["variant"], "lowercase");
    assert_eq!(v["pairs"], 12);
    close(&v["original_pass_rate"], 10.0 / 12.0);
    close(&v["variant_pass_rate"], 6.0 / 12.0);
    close(&v["difference"], -4.0 / 12.0);
    // Flipped: 1, 3, 5, 9, 11 to a miss; 12 to a pass (7 missed both ways).
    assert_eq!(v["flipped_to_fail"], 5);
    assert_eq!(v["flipped_to_pass"], 1);
    // 2 * (C(6,0) + C(6,1)) / 2^6 = 14 / 64.
    close(&v["p"], mcnemar_by_hand(5, 1));
    close(&v["p"], 14.0 / 64.0);
    close(&v["p_holm"], 14.0 / 64.0);
    assert_eq!(v["improved"], false);
    let diffs: Vec<(String, i64)> = (1..=12)
        .map(|n: i64| {
            let d = match n {
                1 | 3 | 5 | 9 | 11 => -1,
                12 => 1,
                _ => 0,
            };
            (format!("P1-B1-S1-C1-PT{n}"), d)
        })
        .collect();
    let [lo, hi] = bootstrap_by_hand(diffs.clone());
    close(&v["difference_ci"][0], lo);
    close(&v["difference_ci"][1], hi);
    // And near the normal approximation: -1/3 ± 1.96 * sqrt((6/12 - 1/9) / 12).
    let half = 1.96 * ((0.5f64 - 1.0 / 9.0) / 12.0).sqrt();
    assert!(
        (lo - (-1.0 / 3.0 - half)).abs() < 0.1 && (hi - (-1.0 / 3.0 + half)).abs() < 0.1,
        "[{lo}, {hi}]"
    );
    // Worst case: 2, 4, 6, 8, 10 pass as written and varied.
    assert_eq!(r["test_cases"], 12);
    assert_eq!(r["robustly_passed"], 5);
    assert_eq!(
        r["fragile"],
        serde_json::json!([
            "P1-B1-S1-C1-PT1",
            "P1-B1-S1-C1-PT3",
            "P1-B1-S1-C1-PT5",
            "P1-B1-S1-C1-PT9",
            "P1-B1-S1-C1-PT11"
        ])
    );

    let steady = out_json(&ok(read(
        &b,
        &["report", "--model", "test/model", "--format", "json"],
    )));
    let v = &steady["robustness"]["variants"][0];
    close(&v["difference"], 0.0);
    assert_eq!(v["flipped_to_fail"], 0);
    assert_eq!(v["flipped_to_pass"], 0);
    close(&v["p"], 1.0);
    close(&v["difference_ci"][0], 0.0);
    close(&v["difference_ci"][1], 0.0);
    assert_eq!(steady["robustness"]["robustly_passed"], 12);

    // `compare` pairs the originals alone, as the headline scores them.
    let cmp = out_json(&ok(read(
        &b,
        &["compare", "--format", "json", "--resamples", "100"],
    )));
    assert_eq!(cmp["test_cases"], 12, "{cmp}");
    // ... and compares the runs' drops under each variant they share: a/b
    // drops 4 of 12 more than test/model (which does not drop).
    let d = &cmp["variants"][0];
    assert_eq!(cmp["variants"].as_array().unwrap().len(), 1, "{cmp}");
    assert_eq!(d["variant"], "lowercase");
    assert_eq!(d["pairs"], 12);
    let sign = if d["a"] == "a/b" { 1.0 } else { -1.0 };
    close(&d["difference"], sign * -4.0 / 12.0);
    close(
        &d[if sign > 0.0 {
            "a_difference"
        } else {
            "b_difference"
        }],
        -4.0 / 12.0,
    );
    let signed: Vec<(String, i64)> = diffs
        .iter()
        .map(|(c, x)| (c.clone(), if sign > 0.0 { *x } else { -*x }))
        .collect();
    let [lo, hi] = bootstrap_by_hand(signed);
    close(&d["difference_ci"][0], lo);
    close(&d["difference_ci"][1], hi);
    // Each run's own drop, with the interval the report gives it (the same
    // 12 pairs, the same draw): test/model does not drop.
    let (fragile_side, steady_side) = if sign > 0.0 { ("a", "b") } else { ("b", "a") };
    let [lo, hi] = bootstrap_by_hand(diffs.clone());
    close(&d[format!("{fragile_side}_difference_ci")][0], lo);
    close(&d[format!("{fragile_side}_difference_ci")][1], hi);
    close(&d[format!("{steady_side}_difference")], 0.0);
    close(&d[format!("{steady_side}_difference_ci")][0], 0.0);
    close(&d[format!("{steady_side}_difference_ci")][1], 0.0);
    let text = stdout(&ok(read(&b, &["compare"])));
    assert!(text.contains("variants of the user's words"), "{text}");
    // The HTML page has the same table, with the JSON's numbers.
    let page = stdout(&ok(read(
        &b,
        &["compare", "--format", "html", "--resamples", "100"],
    )));
    drops_table_matches(&page, d);

    // The viewer's results filter by variant: that variant's rows, or
    // (`none`) the originals alone.
    let v = crate::support::viewer::Viewer::start(&b, &[]);
    for (variant, want) in [("lowercase", true), ("none", false)] {
        let page = crate::view::get(&v, &format!("/results.jsonl?runs=2&variant={variant}")).await;
        let codes: Vec<String> = page
            .body
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["test_code"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(codes.len(), 12, "{variant}: {}", page.body);
        assert!(
            codes.iter().all(|c| c.ends_with("~lowercase") == want),
            "{codes:?}"
        );
    }
    // The viewer's Compare page (the latest run of each model) too.
    let page = crate::view::get(&v, "/compare").await;
    assert!(page.status.is_success(), "{}", page.body);
    drops_table_matches(&page.body, d);
    let html = crate::view::get(&v, "/results?runs=2&variant=lowercase").await;
    assert!(
        html.body.contains(r#"name="variant" value="lowercase""#),
        "{}",
        html.body
    );
    drop(v);

    // Text and HTML carry the section too.
    let text = stdout(&ok(read(&b, &["report", "--model", "a/b"])));
    assert!(
        text.contains("robustness (variants of the user's words)"),
        "{text}"
    );
    assert!(
        text.contains("worst case: 5 of 12 test cases robustly passed"),
        "{text}"
    );
    let page = stdout(&ok(read(&b, &["report", "--format", "html"])));
    assert!(page.contains(r#"data-table="robustness""#), "{page}");
    assert_eq!(page.matches(r#"data-variant="lowercase""#).count(), 2);
}

/// `{:+.1}` percentage points, as the tables print a difference.
fn points(v: &Value) -> String {
    format!("{:+.1}", v.as_f64().unwrap() * 100.0)
}

/// The page's per-variant drops table holds exactly one row, `d`'s (a
/// drop of `compare --format json`): names, pairs, each run's drop and
/// the difference of drops (to the last digit, from the cells' values),
/// and each interval as printed.
fn drops_table_matches(page: &str, d: &Value) {
    use scraper::{Html, Selector};
    let doc = Html::parse_document(page);
    let rows: Vec<_> = doc
        .select(&Selector::parse("table[data-table=variant-drops] tr[data-variant]").unwrap())
        .collect();
    assert_eq!(rows.len(), 1, "{page}");
    assert_eq!(rows[0].value().attr("data-variant"), Some("lowercase"));
    let cells: Vec<String> = rows[0]
        .select(&Selector::parse("td").unwrap())
        .map(|c| c.text().collect::<String>())
        .collect();
    let ci = |key: &str| {
        let [lo, hi] = [&d[key][0], &d[key][1]].map(points);
        format!("{lo} to {hi}")
    };
    assert_eq!(
        cells,
        [
            "lowercase".to_string(),
            d["a"].as_str().unwrap().to_string(),
            d["b"].as_str().unwrap().to_string(),
            d["pairs"].to_string(),
            points(&d["a_difference"]),
            ci("a_difference_ci"),
            points(&d["b_difference"]),
            ci("b_difference_ci"),
            points(&d["difference"]),
            ci("difference_ci"),
        ],
        "{page}"
    );
    let values: Vec<f64> = rows[0]
        .select(&Selector::parse("td[data-value]").unwrap())
        .map(|c| c.value().attr("data-value").unwrap().parse().unwrap())
        .collect();
    let want: Vec<f64> = ["a_difference", "b_difference", "difference"]
        .iter()
        .map(|k| d[*k].as_f64().unwrap())
        .collect();
    assert_eq!(values, want);
}

/// A variant under which more test cases pass is shown and flagged.
#[tokio::test(flavor = "multi_thread")]
async fn an_improvement_under_a_variant_is_flagged() {
    let b = bench_of(4);
    // Misses every message as written; answers every lower-case one.
    let server = serve(|req: &Request| {
        let cat = if prompt_of(req).contains("i can't go on") {
            "HANDOFF"
        } else {
            "CONTINUE"
        };
        ResponseTemplate::new(200).set_body_json(completion(
            &format!(r#"{{"category":"{cat}","response":"ok"}}"#),
            0.001,
        ))
    })
    .await;
    ok(run(
        &b,
        &server,
        &["run-batch", "--all-scenarios", "--variants", "lowercase"],
    ));
    let r = out_json(&ok(read(
        &b,
        &["report", "--run-id", "1", "--format", "json"],
    )));
    let v = &r["robustness"]["variants"][0];
    assert_eq!(v["improved"], true, "{r}");
    assert_eq!(v["flipped_to_pass"], 4);
    let text = stdout(&ok(read(&b, &["report", "--run-id", "1"])));
    assert!(
        text.contains("look: more test cases passed under `lowercase`"),
        "{text}"
    );
}
