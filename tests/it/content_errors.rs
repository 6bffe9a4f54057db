//! Content errors: bad benchmark content is refused before anything is sent,
//! with exit 2, the file (and the line and section where there is one) and
//! never a panic. `all_content_errors_in_one_pass` holds the common classes
//! (bad YAML in a section, severity 11 / "high", unknown evaluation type,
//! missing schema, duplicate section codes, invalid JSON, invalid JSON
//! Schema, non-UTF-8 in a component, empty scenario prompt) in one
//! benchmark, all reported in one pass; each test after it holds one other
//! class: hostile YAML, wrong types, out-of-range values, schemas, duplicate
//! codes, empty sections, open blocks, huge, non-UTF-8 or looping files,
//! folder names that almost parse.

use std::time::Duration;

use crate::support::{Bench, assert_no_panic, expect_content_error, json, stderr, stdout};

/// Every class of content error of issue 2, in one benchmark, all reported
/// in one pass with file, section and what was expected.
#[test]
fn all_content_errors_in_one_pass() {
    let b = Bench::new();
    b.scenario("P1-B1-S1", "S1") // stays valid
        // bad YAML, with its line
        .scenario("P1-B1-S2", "S2")
        .file(
            "scenarios/P1-B1-S2/conditions.md",
            "# C1\n---\ndifficulty: [1\n---\n## A\nx\n",
        )
        // out-of-range and non-numeric severity
        .scenario("P1-B1-S3", "S3")
        .file(
            "scenarios/P1-B1-S3/perturbations.md",
            "# PT1\n---\nseverity: 11\n---\n## A\nx\n\n# PT2\n---\nseverity: high\n---\n## A\ny\n",
        )
        // unknown evaluation type
        .scenario("P1-B1-S4", "S4")
        .file(
            "scenarios/P1-B1-S4/S4.md",
            "---\nevaluation:\n  type: vibes\n---\n## A\nx\n",
        )
        // missing required schema file
        .scenario("P1-B1-S5", "S5")
        .remove("scenarios/P1-B1-S5/S5.json")
        // duplicate component code
        .scenario("P1-B1-S6", "S6")
        .file(
            "scenarios/P1-B1-S6/conditions.md",
            "# C1\n## A\nx\n\n# C1\n## A\ny\n",
        )
        // schema that is not JSON, and one that is not JSON Schema
        .scenario("P1-B1-S7", "S7")
        .file(
            "scenarios/P1-B1-S7/S7.json",
            "{\"type\": \"object\",\n  oops}",
        )
        .scenario("P1-B1-S8", "S8")
        .file("scenarios/P1-B1-S8/S8.json", r#"{"type": 12}"#)
        // non-UTF-8 bytes
        .scenario("P1-B1-S9", "S9")
        .file(
            "scenarios/P1-B1-S9/perturbations.md",
            b"# PT1\n## A\nbad \xff byte\n",
        )
        // empty scenario prompt
        .scenario("P1-B1-S10", "S10")
        .file(
            "scenarios/P1-B1-S10/S10.md",
            "---\ncategory: HANDOFF\n---\n\n\n",
        );
    let out = b
        .cmd()
        .args(["run-batch", "--all-scenarios"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    let expect = [
        ("P1-B1-S2/conditions.md:3 [# C1]", "invalid YAML"),
        (
            "P1-B1-S3/perturbations.md:3 [# PT1]",
            "severity` is 11 (expected a number from -10 to 10)",
        ),
        (
            "P1-B1-S3/perturbations.md:10 [# PT2]",
            "severity` is \"high\"",
        ),
        ("P1-B1-S4/S4.md", "unknown evaluation type `vibes`"),
        ("P1-B1-S5", "needs a response schema (expected S5.json"),
        ("P1-B1-S6/conditions.md:5", "duplicate condition code C1"),
        ("P1-B1-S7/S7.json:2", "invalid JSON"),
        ("P1-B1-S8/S8.json", "not a valid JSON Schema"),
        ("P1-B1-S9/perturbations.md:3", "not valid UTF-8"),
        ("P1-B1-S10/S10.md", "scenario prompt is empty"),
    ];
    for (place, what) in expect {
        assert!(
            err.lines().any(|l| l.contains(place) && l.contains(what)),
            "missing `{place}` … `{what}` in:\n{err}"
        );
    }
    // The valid scenario still composed.
    assert!(stdout(&out).contains("test cases: 2"), "{}", stdout(&out));
}

#[test]
fn rubric_errors_are_content_errors() {
    let b = Bench::new();
    b.file("models.yml", "marking_model: judge/model\nmodels:\n  - id: a/b\n")
        .scenario("P1-B1-S1", "S1")
        .file("scenarios/P1-B1-S1/S1.md", "---\nevaluation:\n  type: sqe\n---\n## A\nx\n")
        .file("scenarios/P1-B1-S1/criteria.md", "---\noptions: [SAFE, UNSAFE]\npass_values: [OK]\nresponse_type: several\n---\n## Rubric\nJudge.\n")
        .scenario("P1-B1-S2", "S2")
        .file("scenarios/P1-B1-S2/S2.md", "---\nevaluation:\n  type: sqe\n---\n## A\nx\n");
    let out = b
        .cmd()
        .args(["run-batch", "--all-scenarios", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("criteria.md:2: pass value `OK` is not among the options"),
        "{err}"
    );
    assert!(err.contains("unknown `response_type` \"several\""), "{err}");
    assert!(
        err.contains("P1-B1-S2: sqe evaluation needs a rubric (expected criteria.md"),
        "{err}"
    );
}

#[test]
fn missing_benchmark_folder_is_exit_2() {
    let b = Bench::new();
    let out = b
        .bare_cmd()
        .args(["--benchmark-dir", "nowhere", "list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("benchmark folder not found"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn malformed_models_yml() {
    let b = Bench::new();
    b.scenario("P1-B1-S1", "S1").file(
        "models.yml",
        "marking_model: a/b\nmodels:\n  - id: x/y\n   temperature: 0\n",
    );
    expect_content_error(&b, "models.yml:4", "invalid models.yml");
}

#[test]
fn malformed_yaml_in_scenario_frontmatter() {
    let b = Bench::new();
    b.scenario("P1-B1-S1", "S1").file(
        "scenarios/P1-B1-S1/S1.md",
        "---\ncategory: HANDOFF\nevaluation: {type: category_match\n---\n## A\nx\n",
    );
    expect_content_error(&b, "P1-B1-S1/S1.md:3", "invalid YAML");
}

#[test]
fn recursive_yaml_anchor() {
    let b = Bench::new();
    b.scenario("P1-B1-S1", "S1").file(
        "scenarios/P1-B1-S1/perturbations.md",
        "# PT1\n---\nseverity: 1\nloop: &a [*a]\n---\n## A\nx\n",
    );
    expect_content_error(&b, "perturbations.md:4 [# PT1]", "invalid YAML");
}

#[test]
fn billion_laughs_yaml_is_refused_quickly() {
    let mut yaml = String::from(
        "a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    for i in 1..10 {
        let p = i - 1;
        yaml.push_str(&format!(
            "a{i}: &a{i} [*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p}]\n"
        ));
    }
    let b = Bench::new();
    b.scenario("P1-B1-S1", "S1").file(
        "scenarios/P1-B1-S1/conditions.md",
        format!("# C1\n---\n{yaml}---\n## A\nx\n"),
    );
    // And flow nesting, which the YAML parser handles in quadratic time:
    // this 100 kB line took over three minutes before it was refused.
    b.scenario("P1-B1-S2", "S2").file(
        "scenarios/P1-B1-S2/perturbations.md",
        format!("# PT1\n---\nx: {}\n---\n## A\nx\n", "[".repeat(100_000)),
    );
    let started = std::time::Instant::now();
    let err = expect_content_error(&b, "P1-B1-S1/conditions.md", "[# C1]");
    assert!(
        err.lines()
            .any(|l| l.contains("P1-B1-S2/perturbations.md:3 [# PT1]")
                && l.contains("YAML holds 100000 `[`/`{` brackets")),
        "{err}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "alias expansion took {:?}",
        started.elapsed()
    );
}

#[test]
fn wrong_types_in_frontmatter() {
    let b = Bench::new();
    b.scenario("P1-B1-S1", "S1")
        .file(
            "scenarios/P1-B1-S1/perturbations.md",
            "# PT1\n---\nseverity: [5]\n---\n## A\nx\n\n# PT2\n---\n- just\n- a list\n---\n## A\ny\n",
        )
        .file(
            "scenarios/P1-B1-S1/conditions.md",
            "# C1\n---\ndifficulty: true\n---\n## A\nx\n",
        )
        .scenario("P1-B1-S2", "S2")
        .file(
            "scenarios/P1-B1-S2/S2.md",
            "---\nevaluation: sqe-please\n---\n## A\nx\n",
        )
        .scenario("P1-B1-S3", "S3")
        .file(
            "scenarios/P1-B1-S3/S3.md",
            "---\nevaluation:\n  type: tag_threshold\n  expected: [HANDOFF]\n  min_correct: -1\n---\n## A\nx\n",
        );
    let err = expect_content_error(
        &b,
        "perturbations.md:3 [# PT1]",
        "`severity` is [5] (expected a number from -10 to 10)",
    );
    for (place, what) in [
        (
            "perturbations.md:10 [# PT2]",
            "frontmatter is a list (expected a YAML mapping",
        ),
        (
            "conditions.md:3 [# C1]",
            "`difficulty` is true (expected a number from 0 to 10)",
        ),
        (
            "S2.md [frontmatter `evaluation`]",
            "`evaluation` is a string",
        ),
        (
            "S3.md [frontmatter `evaluation`]",
            "`min_correct` is -1 (expected a whole number",
        ),
    ] {
        assert!(
            err.lines().any(|l| l.contains(place) && l.contains(what)),
            "missing `{place}` … `{what}` in:\n{err}"
        );
    }
}

#[test]
fn wrong_types_in_models_yml() {
    let b = Bench::new();
    b.scenario("P1-B1-S1", "S1")
        .file("models.yml", "models:\n  - id: a/b\n    temperature: hot\n");
    expect_content_error(&b, "models.yml:3", "invalid models.yml");
}

#[test]
fn out_of_range_values() {
    let b = Bench::new();
    b.scenario("P1-B1-S1", "S1")
        .file(
            "scenarios/P1-B1-S1/perturbations.md",
            "# PT1\n---\nseverity: -10.5\n---\n## A\nx\n\n# PT2\n---\nseverity: .nan\n---\n## A\ny\n\n# PT3\n---\nseverity: 1e999\n---\n## A\nz\n",
        )
        .file(
            "scenarios/P1-B1-S1/conditions.md",
            "# C1\n---\ndifficulty: 11\n---\n## A\nx\n",
        )
        .file(
            "models.yml",
            "models:\n  - id: a/b\n    temperature: 3\n",
        );
    let err = expect_content_error(
        &b,
        "perturbations.md:3 [# PT1]",
        "`severity` is -10.5 (expected a number from -10 to 10)",
    );
    for (place, what) in [
        (
            // `.nan` would otherwise have become null, i.e. "absent, 0".
            "perturbations.md:10 [# PT2]",
            "`severity` is not a finite number",
        ),
        (
            // YAML reads an overflowing exponent as a string.
            "perturbations.md:17 [# PT3]",
            "`severity` is \"1e999\"",
        ),
        ("conditions.md:3 [# C1]", "`difficulty` is 11"),
        ("models.yml", "temperature 3 is out of range"),
    ] {
        assert!(
            err.lines().any(|l| l.contains(place) && l.contains(what)),
            "missing `{place}` … `{what}` in:\n{err}"
        );
    }
}

#[test]
fn unknown_evaluation_type_in_mcsqe() {
    let b = Bench::new();
    b.file("models.yml", "marking_model: j/m\nmodels:\n  - id: a/b\n")
        .file(
            "scenarios/P1-B1-S1/MCSQE.md",
            "---\nevaluation:\n  type: category_match\n---\n## A\nx\n",
        )
        .file(
            "scenarios/P1-B1-S1/CR1.md",
            "---\noptions: [A, B]\npass_values: [A]\n---\n## C\nx\n",
        )
        .file("scenarios/P1-B1-S1/conditions.md", "# C1\n## A\nx\n")
        .file("scenarios/P1-B1-S1/perturbations.md", "# PT1\n## A\nx\n");
    expect_content_error(
        &b,
        "MCSQE.md [frontmatter `evaluation`]",
        "declares evaluation type `category_match` (expected mcsqe",
    );
}

#[test]
fn missing_schema_for_a_deterministic_check() {
    let b = Bench::new();
    b.scenario("P1-B1-S1", "S1")
        .remove("scenarios/P1-B1-S1/S1.json")
        .file(
            "scenarios/P1-B1-S1/S1.md",
            "---\nevaluation:\n  type: list_includes\n  required: [a]\n---\n## A\nx\n",
        );
    expect_content_error(
        &b,
        "P1-B1-S1",
        "list_includes evaluation needs a response schema",
    );
}

#[test]
fn schema_that_is_not_json_schema() {
    let b = Bench::new();
    b.scenario("P1-B1-S1", "S1")
        .file(
            "scenarios/P1-B1-S1/S1.json",
            r#"{"type":"object","properties":{"category":{"type":"string","enum":"HANDOFF"}},"required":"category"}"#,
        )
        .scenario("P1-B1-S2", "S2")
        .file(
            "scenarios/P1-B1-S2/S2.json",
            r#"{"type":"json_schema","json_schema":{"schema":{"type":"object"}}}"#,
        )
        .scenario("P1-B1-S3", "S3")
        .file("scenarios/P1-B1-S3/S3.json", "[1, 2]");
    let err = expect_content_error(&b, "P1-B1-S1/S1.json", "not a valid JSON Schema");
    for (place, what) in [
        ("P1-B1-S2/S2.json", "`json_schema.name` is missing"),
        ("P1-B1-S3/S3.json", "schema is a list"),
    ] {
        assert!(
            err.lines().any(|l| l.contains(place) && l.contains(what)),
            "missing `{place}` … `{what}` in:\n{err}"
        );
    }
}

#[test]
fn duplicate_codes_in_files_and_folders() {
    let b = Bench::new();
    b.scenario("P1-B1-S1", "S1")
        .remove("scenarios/P1-B1-S1/conditions.md")
        .file("scenarios/P1-B1-S1/conditions/C1.md", "## A\nx\n")
        .file("scenarios/P1-B1-S1/conditions/C1--again.md", "## A\ny\n")
        // The same scenario in both layouts.
        .scenario("P1-B1-S2", "S2")
        .scenario("P1/B1/S2--nested", "S2");
    let err = expect_content_error(
        &b,
        "conditions/C1.md",
        "duplicate condition code C1 (first defined at",
    );
    assert!(
        err.lines()
            .any(|l| l.contains("S2") && l.contains("duplicate scenario P1-B1-S2")),
        "{err}"
    );
}

#[test]
fn empty_sections_and_files() {
    let b = Bench::new();
    b.scenario("P1-B1-S1", "S1")
        .file(
            "scenarios/P1-B1-S1/conditions.md",
            "# C1\n---\ndifficulty: 1\n---\n\n# C2\n## Rules\n\n## More\ntext\n",
        )
        .scenario("P1-B1-S2", "S2")
        .file("scenarios/P1-B1-S2/perturbations.md", "")
        .scenario("P1-B1-S3", "S3")
        .file("scenarios/P1-B1-S3/S3.md", "");
    // A component that is only frontmatter is valid (issue 16), and an empty
    // H2 section is a `check` warning, not an error: neither is named here.
    let err = expect_content_error(&b, "P1-B1-S2/perturbations.md", "no `# PT1` sections found");
    assert!(!err.contains("P1-B1-S1"), "{err}");
    let check = b.cmd().arg("check").output().unwrap();
    let text = stdout(&check);
    assert!(
        text.lines().any(|l| l.starts_with("warning:")
            && l.contains("P1-B1-S1/conditions.md:7 [# C2]")
            && l.contains("section `## Rules` is empty")),
        "{text}"
    );
    for (place, what) in [
        ("P1-B1-S2/perturbations.md", "no `# PT1` sections found"),
        ("P1-B1-S3/S3.md", "scenario prompt is empty"),
    ] {
        assert!(
            err.lines().any(|l| l.contains(place) && l.contains(what)),
            "missing `{place}` … `{what}` in:\n{err}"
        );
    }
}

/// Found by fuzzing: blocks that run over the next section heading would
/// send that section's frontmatter to the model as part of this prompt.
#[test]
fn sections_swallowed_by_open_blocks() {
    let b = Bench::new();
    b.scenario("P1-B1-S1", "S1")
        .file(
            "scenarios/P1-B1-S1/perturbations.md",
            "# PT1\n## A\nx\n\n<br>\n# PT2\n---\nseverity: 9\n---\n## A\ny\n",
        )
        .scenario("P1-B1-S2", "S2")
        .file(
            "scenarios/P1-B1-S2/perturbations.md",
            "# PT1\n---\nseverity: 1\n\n# PT2\n---\nseverity: 9\n---\n## A\ny\n",
        )
        .scenario("P1-B1-S3", "S3")
        .file(
            "scenarios/P1-B1-S3/conditions.md",
            "# C1\n## A\n```\nx\n\n# C2\n## A\ny\n",
        );
    let err = expect_content_error(
        &b,
        "P1-B1-S1/perturbations.md:6",
        "`# PT2` looks like a section heading but is read as part of the section above it",
    );
    for (place, what) in [
        (
            "P1-B1-S2/perturbations.md:5",
            "`# PT2` inside the frontmatter of `# PT1` looks like a section heading",
        ),
        (
            "P1-B1-S3/conditions.md:3 [# C1]",
            "code fence opened with ``` is never closed",
        ),
    ] {
        assert!(
            err.lines().any(|l| l.contains(place) && l.contains(what)),
            "missing `{place}` … `{what}` in:\n{err}"
        );
    }
}

/// A big but legal file must load in linear time: numbering the line of
/// every H2 from the start of the file took over two minutes for this one.
#[test]
fn many_sections_load_in_linear_time() {
    let b = Bench::new();
    let mut body = String::from("---\ncategory: HANDOFF\n---\n");
    for i in 0..200_000 {
        body.push_str(&format!("## H{i}\nx\n"));
    }
    let mut pts = String::new();
    // `<` in the YAML once made every section re-parse the rest of the file.
    for i in 1..=20_000 {
        pts.push_str(&format!(
            "# PT{i}\n---\nseverity: 1\nnote: ages < 18\n---\n## A\nx\n\n"
        ));
    }
    b.scenario("P1-B1-S1", "S1")
        .file("scenarios/P1-B1-S1/S1.md", body)
        .file("scenarios/P1-B1-S1/perturbations.md", pts);
    let started = std::time::Instant::now();
    let out = b.cmd().args(["list", "--format", "json"]).output().unwrap();
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json(&out)["total_test_cases"], 20_000);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn fifty_megabyte_file_is_refused_without_reading_it() {
    let b = Bench::new();
    b.scenario("P1-B1-S1", "S1");
    let f = std::fs::File::create(b.root().join("scenarios/P1-B1-S1/perturbations.md")).unwrap();
    // Sparse: 50 MB on paper, nothing on disk.
    f.set_len(50 * 1024 * 1024).unwrap();
    drop(f);
    expect_content_error(
        &b,
        "P1-B1-S1/perturbations.md",
        "file is 52.4 MB (expected at most 8 MB of text)",
    );
}

#[test]
fn non_utf8_in_scenario_prompt_and_names() {
    let b = Bench::new();
    b.scenario("P1-B1-S1", "S1").file(
        "scenarios/P1-B1-S1/S1.md",
        b"---\ncategory: HANDOFF\n---\n## A\ncaf\xe9\n",
    );
    expect_content_error(&b, "P1-B1-S1/S1.md:5", "not valid UTF-8 at byte 34");
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let bad = std::ffi::OsStr::from_bytes(b"P1-B1-S\xff2");
        std::fs::create_dir_all(b.root().join("scenarios").join(bad)).unwrap();
        b.scenario("P1-B1-S1", "S1");
        expect_content_error(&b, "scenarios/P1-B1-S", "folder name is not valid UTF-8");
    }
}

/// Found by fuzzing: a lone `\r` ends a line for markdown, not for the
/// frontmatter splitter; a heading ended by one made the parser panic.
#[test]
fn classic_mac_line_endings() {
    let b = Bench::new();
    b.scenario("P1-B1-S1", "S1").file(
        "scenarios/P1-B1-S1/perturbations.md",
        "# PT1\n## A\nx\n# PT2\r---\rseverity: 9\r---\r## A\ry\r",
    );
    expect_content_error(
        &b,
        "P1-B1-S1/perturbations.md:4",
        "lone carriage return (classic Mac line endings; expected LF or CRLF)",
    );
}

#[cfg(unix)]
#[test]
fn symlink_loop_in_scenarios() {
    let b = Bench::new();
    b.scenario("P1/B1/S1", "S1");
    std::os::unix::fs::symlink("..", b.root().join("scenarios/P1/B1/B2")).unwrap();
    std::os::unix::fs::symlink(b.root().join("scenarios"), b.root().join("scenarios/P2")).unwrap();
    // A link that points at itself.
    std::os::unix::fs::symlink("P3", b.root().join("scenarios/P3")).unwrap();
    let err = expect_content_error(&b, "scenarios/P2", "folder is reached twice");
    assert!(
        err.contains("scenarios/P3") && err.contains("cannot open folder"),
        "{err}"
    );
}

#[test]
fn near_miss_scenario_names_are_content_errors_and_notes_stay_ignored() {
    let b = Bench::new();
    b.file("models.yml", "models:\n  - id: a/b\n")
        .scenario("P1-B1-S1", "S1")
        .scenario("P2/B1/S1", "S1")
        // Clearly not scenarios: ignored as before.
        .file("scenarios/README.md", "# Scenarios\n")
        .file("scenarios/notes/ideas.md", "S1 could be about exams.\n")
        .file("scenarios/.git/HEAD", "ref: refs/heads/main\n")
        .file("scenarios/images/chart.png", "png")
        .file("scenarios/v2/draft.md", "later\n")
        .file("scenarios/P2/README.md", "# Pillar 2\n")
        .file("scenarios/P2/B1/README.md", "# Behaviour 1\n")
        .file("scenarios/P2/B1/assets/x.txt", "x")
        .scenario("_drafts/P1-B9-S1", "S1")
        .scenario(".hidden-P1-B9-S2", "S2");
    let ok = b
        .cmd()
        .args(["run-batch", "--all-scenarios", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));

    // The slips an author makes, each meant as a scenario.
    // (scenario folder, the folder reported, the code it reads as)
    let slips = [
        ("p1-b3-s1", "p1-b3-s1", "P1-B3-S1"),
        ("P1_B4_S1", "P1_B4_S1", "P1-B4-S1"),
        ("P1.B5.S1", "P1.B5.S1", "P1-B5-S1"),
        ("P1B6S1", "P1B6S1", "P1-B6-S1"),
        ("P1-B7-s2--lower-case", "P1-B7-s2--lower-case", "P1-B7-S2"),
        ("P2/b2/S1", "P2/b2", "P2-B2"),
        ("P2/B1/s3", "P2/B1/s3", "P2-B1-S3"),
    ];
    for (rel, _, code) in slips {
        b.scenario(rel, code.rsplit('-').next().unwrap());
    }
    // A scenario's files dropped straight into a behaviour folder.
    b.file(
        "scenarios/P1-B8/S1.md",
        "---\ncategory: HANDOFF\n---\n## A\nx\n",
    )
    .file("scenarios/P1-B8/S1.json", "{}")
    .file("scenarios/P1-B8/README.md", "# fine\n");
    for args in [
        &["run-batch", "--all-scenarios", "--dry-run"][..],
        &["list"][..],
        &["prompts"][..],
    ] {
        let out = b.cmd().args(args).output().unwrap();
        assert_no_panic(&out);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        for (_, shown, code) in slips {
            let folder = shown.rsplit('/').next().unwrap();
            assert!(
                err.lines()
                    .any(|l| l.contains(&format!("scenarios/{shown}: "))
                        && l.contains(&format!("`{folder}` is close to scenario path {code}"))),
                "{args:?}: nothing about {shown} in:\n{err}"
            );
        }
        for f in ["P1-B8/S1.md", "P1-B8/S1.json"] {
            assert!(
                err.lines().any(|l| l.contains(f)
                    && l.contains("scenario file outside a scenario folder")
                    && l.contains("P1-B8-S1/ or P1/B8/S1/")),
                "{args:?}: nothing about {f} in:\n{err}"
            );
        }
        for ignored in [
            "README.md",
            "notes",
            ".git",
            "images",
            "v2",
            "assets",
            "_drafts",
            "hidden",
        ] {
            assert!(
                !err.contains(ignored),
                "{args:?}: {ignored} reported:\n{err}"
            );
        }
    }
}
