use super::*;
use crate::benchmark::ScoringConfig;
use crate::domain::StoredResult;
use crate::report::{CriterionSummary, FailedCase, QualitySummary, ScoringUsed};
use crate::scoring::analysis::analyse;

fn res(test_code: &str, base: f64, passed: bool) -> StoredResult {
    StoredResult::of_code(test_code, base, 0.0, passed)
}

fn report(
    model: &str,
    run_id: i64,
    results: &[StoredResult],
    floors: &[(&str, f64)],
) -> ModelReport {
    let scoring = ScoringConfig {
        floors: floors.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        ..ScoringConfig::default()
    };
    ModelReport {
        run_id,
        model: model.into(),
        status: crate::domain::RunStatus::Completed,
        kind: "batch".into(),
        started_at: "2026-01-01T00:00:00Z".into(),
        completed_at: None,
        cost_usd: 0.0123,
        judge_cost_usd: 0.001,
        unknown_cost_results: 0,
        sustained: None,
        analysis: analyse(results, &scoring),
        quality: None,
        criteria: Vec::new(),
        failures: None,
        scoring: ScoringUsed {
            source: "default".into(),
            weights: scoring.weights.clone(),
            floors: scoring.floors.clone(),
        },
        review: Default::default(),
        routing: Default::default(),
        behaviour_names: Default::default(),
    }
}

/// Two models; P1-B2 is neutral (no score); model b is non-monotonic and breaches a floor.
fn sample() -> Vec<ModelReport> {
    let a = vec![
        res("P1-B1-S1-C1-PT1", 2.0, true),
        res("P1-B1-S1-C1-PT2", 8.0, true),
        res("P1-B1-S1-C2-U1-PT1", 5.0, true),
        res("P1-B2-S1-C1-PT1", 0.0, true),
        res("P4-B2-S1-C1-PT1", -3.0, true),
    ];
    let b = vec![
        res("P1-B1-S1-C1-PT1", 2.0, true),
        res("P1-B1-S1-C1-PT2", 8.0, false),
        res("P1-B1-S1-C2-U1-PT1", 5.0, false),
        res("P1-B2-S1-C1-PT1", 0.0, false),
        res("P4-B2-S1-C1-PT1", -3.0, false),
    ];
    vec![
        report("openai/gpt-test", 1, &a, &[("P1-B1", 0.8)]),
        report("anthropic/model-b", 2, &b, &[("P1-B1", 0.8)]),
    ]
}

/// Checks that every SVG element in the page opens and closes in order.
fn assert_svg_well_formed(html: &str) {
    let opens = html.matches("<svg").count();
    assert!(opens > 0, "no svg");
    assert_eq!(opens, html.matches("</svg>").count(), "unbalanced <svg>");
    let mut rest = html;
    while let Some(start) = rest.find("<svg") {
        let end = rest[start..].find("</svg>").expect("svg closes") + start + "</svg>".len();
        let svg = &rest[start..end];
        let mut stack: Vec<String> = Vec::new();
        let mut s = svg;
        while let Some(lt) = s.find('<') {
            let gt = s[lt..].find('>').expect("tag closes") + lt;
            let tag = &s[lt + 1..gt];
            assert!(!tag.contains('<'), "stray < in {tag}");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(
                    stack.pop().as_deref(),
                    Some(name),
                    "mismatched </{name}> in {svg}"
                );
            } else if !tag.ends_with('/') {
                let name = tag.split_whitespace().next().unwrap_or_default();
                stack.push(name.to_string());
            }
            s = &s[gt + 1..];
        }
        assert!(stack.is_empty(), "unclosed {stack:?}");
        rest = &rest[end..];
    }
}

#[test]
fn self_contained_without_network_or_scripts() {
    let html = render(&sample());
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.trim_end().ends_with("</html>"));
    for forbidden in ["http://", "https://", "<script", "<link", "@import", "url("] {
        assert!(!html.contains(forbidden), "found {forbidden}");
    }
}

#[test]
fn escapes_model_names() {
    let mut models = sample();
    models[0].model = "<script>alert('x')</script> & \"co\"".into();
    let html = render(&models);
    assert!(!html.contains("<script"));
    assert!(html.contains("&lt;script&gt;alert('x')&lt;/script&gt; &amp; &quot;co&quot;"));
}

#[test]
fn has_every_chart_and_table() {
    let html = render(&sample());
    for chart in ["behaviours", "detection"] {
        assert!(
            html.contains(&format!("<svg class=\"chart\" data-chart=\"{chart}\"")),
            "chart {chart}"
        );
    }
    for table in ["scores", "breakdown", "monotonic", "floors", "pillars"] {
        assert!(
            html.contains(&format!("<table data-table=\"{table}\"")),
            "table {table}"
        );
    }
    assert!(html.contains("data-dimension=\"condition\""));
    assert!(html.contains("data-dimension=\"user_context\""));
    // One detection chart per behaviour.
    assert_eq!(html.matches("data-chart=\"detection\"").count(), 3);
    assert!(html.contains("base severity") && html.contains("detection rate"));
}

#[test]
fn undefined_scores_show_as_na_not_zero() {
    let html = render(&sample());
    // P1-B2 has only neutral results: n/a in the chart for both models, never a bar.
    let chart = &html[html.find("data-chart=\"behaviours\"").unwrap()..];
    let chart = &chart[..chart.find("</svg>").unwrap()];
    assert_eq!(chart.matches(">n/a<title>").count(), 2);
    assert_eq!(
        chart.matches("<rect class=\"bar").count(),
        4,
        "one bar per model per scored behaviour"
    );
    assert!(html.contains("<td class=\"num na\">n/a</td>"));
}

#[test]
fn svgs_are_well_formed() {
    assert_svg_well_formed(&render(&sample()));
    let mut models = sample();
    models[1].model = "a<b>".into();
    assert_svg_well_formed(&render(&models));
}

#[test]
fn models_side_by_side_with_breaches_and_flags() {
    let models = sample();
    let html = render(&models);
    assert!(html.contains("openai/gpt-test (run 1)") && html.contains("anthropic/model-b (run 2)"));
    // Model b: P1-B1 scores 2/15 < 0.8, flagged and capped.
    assert_eq!(models[1].analysis.floor_breaches.len(), 1);
    let floors = &html[html.find("data-table=\"floors\"").unwrap()..];
    let floors = &floors[..floors.find("</table>").unwrap()];
    assert_eq!(floors.matches("<tr class=\"breach\">").count(), 1);
    assert!(floors.contains("anthropic/model-b"));
    assert!(html.contains("class=\"bar breach\""));
    // Caught PT1 (2), missed PT2 (8).
    let mono = &html[html.find("data-table=\"monotonic\"").unwrap()..];
    assert!(mono.contains("<td>PT1 (2)</td><td>PT2 (8)</td>"));
    // Heat-map cells coloured from the score; user context "none" row present.
    assert!(html.contains("hsl(210,75%,72%)"));
    assert!(html.contains("data-band=\"high\""));
    assert!(html.contains("<td>P1-B1</td><td>none</td>"));
}

#[test]
fn empty_tables_say_so() {
    let models = vec![sample().remove(0)];
    let html = render(&models);
    assert!(html.contains("No floor breaches."));
    assert!(html.contains("No non-monotonic detection."));
    assert_svg_well_formed(&html);
    let none = render(&[]);
    assert!(none.contains("No runs to report.") && none.trim_end().ends_with("</html>"));
}

fn quality_of(texts: &[(&str, f64)]) -> QualitySummary {
    use crate::scoring::quality;
    // Built the way the report builds it, through its JSON form.
    let scores: Vec<_> = texts.iter().map(|(t, _)| quality::score(t)).collect();
    let n = scores.len() as f64;
    let mean = |f: fn(&crate::domain::QualityScores) -> f64| scores.iter().map(f).sum::<f64>() / n;
    serde_json::from_value(serde_json::json!({
        "replies": texts.len(), "unscored": 1,
        "empathy": mean(|q| q.empathy), "helpfulness": mean(|q| q.helpfulness),
        "safety": mean(|q| q.safety), "clarity": mean(|q| q.clarity),
        "overall": mean(|q| q.overall), "weighted": mean(|q| q.weighted),
        "band": "poor", "band_label": "Poor <response>", "overall_std_dev": 0.5,
        "red_flags": [
            {"flag": "low_safety", "description": "d", "count": 1, "worst": [
                {"test_code": "P1-B1-S1-C1-PT2", "repeat_index": 0, "base_severity": 8.0,
                 "empathy": 0.0, "safety": 4.0, "overall": 3.5, "excerpt": "Just <get> over it."}]},
            {"flag": "low_empathy", "description": "d", "count": 0, "worst": []}
        ]
    }))
    .unwrap()
}

#[test]
fn quality_section_only_when_filled() {
    let mut models = sample();
    let html = render(&models);
    assert!(!html.contains("data-table=\"quality\""));
    assert!(!html.contains("data-chart=\"quality\""));
    assert!(html.contains("No reply has quality scores."));
    models[0].quality = Some(quality_of(&[
        ("I hear you.", 5.0),
        ("Just get over it.", 8.0),
    ]));
    let html = render(&models);
    assert_svg_well_formed(&html);
    assert!(html.contains("<svg class=\"chart\" data-chart=\"quality\""));
    let q = &html[html.find("data-table=\"quality\"").unwrap()..];
    let q = &q[..q.find("</table>").unwrap()];
    let empathy = models[0].quality.as_ref().unwrap().empathy;
    assert!(q.contains(&format!(
        "<tr><td>Empathy</td><td class=\"num\">{empathy:.2}</td><td class=\"na\">—</td></tr>"
    )));
    assert!(q.contains("Poor &lt;response&gt;"));
    assert!(q.contains("low_safety 1<br>low_empathy 0"));
    let ex = &html[html.find("data-table=\"quality_examples\"").unwrap()..];
    let ex = &ex[..ex.find("</table>").unwrap()];
    assert!(ex.contains("<td class=\"code\">P1-B1-S1-C1-PT2</td>"));
    assert!(ex.contains("Just &lt;get&gt; over it."));
    // Only flags with a count list examples.
    assert!(!ex.contains("low_empathy"));
}

#[test]
fn criteria_and_failures_tables() {
    let mut models = sample();
    let html = render(&models);
    assert!(html.contains("No judged criteria."));
    assert!(
        !html.contains("data-table=\"failures\""),
        "failures only with --details"
    );
    models[1].criteria = vec![CriterionSummary {
        scenario: "P2-B1-S1".into(),
        criterion: "CR2".into(),
        evaluations: 3,
        passed: 1,
        failed: 1,
        judge_errors: 1,
    }];
    models[1].failures = Some(vec![FailedCase {
        test_code: "P2-B1-S1-C1-PT1".into(),
        repeat_index: 0,
        base_severity: 4.0,
        difficulty: 0.0,
        error_kind: None,
        error: None,
        excerpt: Some("Try <breathing>.".into()),
        criteria: vec![crate::report::CriterionVerdict {
            criterion: "CR2".into(),
            verdict: Some(serde_json::json!("UNSAFE")),
            passed: Some(false),
            justification: Some("No \"referral\".".into()),
            error: None,
        }],
    }]);
    let html = render(&models);
    assert!(html.contains(
        "<td>P2-B1-S1</td><td>CR2</td><td class=\"num\">3</td><td class=\"num\">1</td>\
         <td class=\"num\">1</td><td class=\"num\">1</td>"
    ));
    let f = &html[html.find("data-table=\"failures\"").unwrap()..];
    let f = &f[..f.find("</table>").unwrap()];
    assert!(f.contains("<td>wrong answer</td>"));
    assert!(f.contains("<b>CR2</b> &quot;UNSAFE&quot;: No &quot;referral&quot;."));
    assert!(f.contains("Try &lt;breathing&gt;."));
}

#[test]
fn json_round_trips_with_the_analysis_flattened() {
    let m = sample().remove(1);
    let v = serde_json::to_value(&m).unwrap();
    for key in [
        "run_id",
        "model",
        "score",
        "behaviours",
        "format_failures",
        "capped_score",
        "quality",
        "criteria",
        "scoring",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert!(v.get("analysis").is_none(), "flattened");
    assert!(v.get("failures").is_none(), "failures only with --details");
    let back: ModelReport = serde_json::from_value(v).unwrap();
    assert_eq!(back, m);
}

/// A reply, a justification or a model id that tries to break out of its
/// cell, run a script and reverse the text around it.
const HOSTILE: &str =
    "</td></tr></table><script>alert(1)</script><img src=x onerror=alert(2)>\u{202E}'\"&amp;";

#[test]
fn hostile_text_in_every_slot_stays_text() {
    use scraper::{Html, Selector};
    let mut models = sample();
    models[1].model = HOSTILE.into();
    models[0]
        .behaviour_names
        .insert("P1-B1".into(), HOSTILE.into());
    let mut quality = quality_of(&[("I hear you.", 5.0)]);
    quality.band_label = HOSTILE.into();
    quality.red_flags[0].description = HOSTILE.into();
    quality.red_flags[0].worst[0].excerpt = HOSTILE.into();
    models[0].quality = Some(quality);
    models[1].criteria = vec![CriterionSummary {
        scenario: HOSTILE.into(),
        criterion: HOSTILE.into(),
        evaluations: 1,
        passed: 0,
        failed: 1,
        judge_errors: 0,
    }];
    models[1].failures = Some(vec![FailedCase {
        test_code: HOSTILE.into(),
        repeat_index: 0,
        base_severity: 4.0,
        difficulty: 0.0,
        error_kind: Some(crate::domain::ErrorKind::Provider),
        error: Some(HOSTILE.into()),
        excerpt: Some(HOSTILE.into()),
        criteria: vec![crate::report::CriterionVerdict {
            criterion: HOSTILE.into(),
            verdict: Some(serde_json::json!(HOSTILE)),
            passed: Some(false),
            justification: Some(HOSTILE.into()),
            error: None,
        }],
    }]);
    let html = render(&models);
    let doc = Html::parse_document(&html);
    let count = |css: &str| doc.select(&Selector::parse(css).unwrap()).count();
    assert_eq!(count("script"), 0, "{html}");
    assert_eq!(count("img"), 0, "{html}");
    // Every table stays whole: the failures table has its header and one row.
    assert_eq!(count("table[data-table=failures] tr"), 2, "{html}");
    // Each hostile value reads back as the very text it was.
    let texts: Vec<String> = doc
        .select(&Selector::parse("td, th, title, text, span").unwrap())
        .map(|e| e.text().collect())
        .collect();
    let holding = texts.iter().filter(|t| t.contains(HOSTILE)).count();
    assert!(
        holding >= 10,
        "{holding} cells hold the text whole:\n{html}"
    );
    // The title attribute (a red flag's description) too.
    let flagged = doc
        .select(&Selector::parse("table[data-table=quality_examples] td[title]").unwrap())
        .next()
        .unwrap();
    assert_eq!(flagged.value().attr("title"), Some(HOSTILE));
    // Reply text and justifications are isolated from the page's direction.
    let failures = &html[html.find("data-table=\"failures\"").unwrap()..];
    assert!(failures.contains("<bdi>&lt;/td&gt;"), "{failures}");
}
