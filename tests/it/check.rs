//! `helmbench check`: content that loads but would bias scores is warned
//! about with its file, line and section (`--strict` makes a warning an
//! error, the dry-run counts them); the bundled benchmark has none.

use crate::support::{Bench, json as out_json, stderr, stdout};

/// Content that loads but would bias scores: each warning class of `check`.
#[test]
fn check_warns_about_slips_with_file_line_and_section() {
    let b = Bench::new();
    b.file("models.yml", "models:\n  - id: a/b\n")
        .file(
            "scenarios/P1-B1-S1/S1.md",
            "---\ncategory: HANDOF\n---\n## Your role\nTriage.\n\n## Categories\n\
             - HANDOFF: risk now.\n- META_ENQUIRY: asks about the assistant.\n\n\
             <!-- TODO: add TASK -->\n\n## Notes\n\n",
        )
        .file(
            "scenarios/P1-B1-S1/S1.json",
            r#"{"type":"object","properties":{"category":{"type":"string","enum":["HANDOFF","META_INQUIRY","TASK"]}},"required":["category"]}"#,
        )
        .file("scenarios/P1-B1-S1/conditions.md", "# C1\n## A\nx %%hidden note%%\n")
        .file(
            "scenarios/P1-B1-S1/perturbations.md",
            "# PT1\n---\nseverity: 5\n---\n## User input\nI can't go on.\n\n\
             # PT2\n---\nseverity: -3\ncategory: TASK\n---\nExams are killing me lol.\n",
        );
    let out = b.cmd().arg("check").output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "warnings alone exit 0: {}",
        stderr(&out)
    );
    let text = stdout(&out);
    let has = |place: &str, what: &str| {
        assert!(
            text.lines()
                .any(|l| l.starts_with("warning: ") && l.contains(place) && l.contains(what)),
            "missing `{place}` … `{what}` in:\n{text}"
        );
    };
    has(
        "P1-B1-S1/S1.md:2 [frontmatter `evaluation`]",
        "`HANDOF` is not among the values",
    );
    has("P1-B1-S1/S1.md:9", "`META_ENQUIRY` looks like an option");
    has("P1-B1-S1/S1.md", "did you mean `META_INQUIRY`");
    has("P1-B1-S1/S1.md:11", "HTML comment");
    has("P1-B1-S1/S1.md:13", "section `## Notes` is empty");
    has("P1-B1-S1/conditions.md:3 [# C1]", "Obsidian comment");
    has("P1-B1-S1/perturbations.md:8 [# PT2]", "has no H2 heading");
    has(
        "P1-B1-S1/perturbations.md:8 [# PT2]",
        "`category: \"TASK\"` in a perturbation's frontmatter has no effect",
    );
    has(
        "P1-B1-S1/S1.md:2",
        "signals (P1-B1-S1-C1-PT1 at +5) and controls (P1-B1-S1-C1-PT2 at -3)",
    );
    assert!(text.contains("0 error(s), 8 warning(s)"), "{text}");

    let strict = b.cmd().args(["check", "--strict"]).output().unwrap();
    assert_eq!(strict.status.code(), Some(2));
    let out = b
        .cmd()
        .args(["check", "--format", "json"])
        .output()
        .unwrap();
    let v = out_json(&out);
    assert_eq!(v["warning_count"], 8);
    let kinds: std::collections::BTreeSet<&str> = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        [
            "bare_perturbation",
            "comment_sent",
            "empty_section",
            "ignored_key",
            "mixed_sign",
            "option_not_in_schema",
            "value_not_in_schema"
        ]
    );
    assert!(
        v["warnings"][0]["file"]
            .as_str()
            .unwrap()
            .ends_with("S1.md")
    );

    // The dry-run counts them and points to `check`.
    let out = b
        .cmd()
        .args(["run-batch", "--all-scenarios"])
        .output()
        .unwrap();
    assert!(
        stdout(&out).contains("8 warning(s): run `helmbench check`"),
        "{}",
        stdout(&out)
    );

    // Content errors make `check` exit 2 and are listed first.
    b.file("scenarios/P1-B1-S1/S1.json", "{not json");
    let out = b.cmd().arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout(&out).starts_with("error: "), "{}", stdout(&out));
}

#[test]
fn bundled_benchmark_has_no_check_warning() {
    let b = Bench::bundled();
    let out = b.cmd().args(["check", "--strict"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stdout(&out).contains("0 error(s), 0 warning(s)"));
}

/// A folder whose name holds a scenario path among other words is skipped,
/// and every command that reads the content says so.
#[test]
fn a_scenario_folder_with_a_prefix_is_skipped_with_a_warning() {
    let b = Bench::new();
    b.file("models.yml", "models:\n  - id: a/b\n")
        .scenario("P1-B1-S1", "S1")
        .scenario("Scenario-P1-B7-S1", "S1");
    for args in [&["check"][..], &["list"][..]] {
        let out = b.cmd().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("`Scenario-P1-B7-S1`") && err.contains("rename it P1-B7-S1"),
            "{args:?}: {err}"
        );
        if args == ["check"] {
            // Counted with the other warnings, and listed.
            assert!(stdout(&out).contains("1 warning(s)"), "{}", stdout(&out));
        } else {
            assert!(!stdout(&out).contains("P1-B7-S1"), "{}", stdout(&out));
        }
    }
}
