//! Reliability and security (issue 9): bad content, provider faults, crashes,
//! concurrent use, secrets and signals. Everything runs the real binary;
//! the only network is a mock OpenRouter on 127.0.0.1.

use std::collections::HashMap;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, Request, Respond, ResponseTemplate};

use crate::support::child::{
    CONCURRENCY, N, assert_exact_results, assert_resume_refused, batch_args, count, open_db,
    resume_to_completion, run_and_kill, run_to_end, spawn, wait_until,
};
use crate::support::mock::{
    Sequence, Shared, completion, gate_server, ok_reply, prompt_of, slow_triage_server,
};
use crate::support::{
    Bench, FLIP_EVERY, Helmbench, KEY, assert_key_absent, assert_no_panic, db_path,
    expect_content_error, grid_bench, online, runs_json, stderr, stdout, triage_content,
};

// ---------------------------------------------------------------------------
// Bad content: one test per class. Each must exit 2, name the file (and the
// line and section where there is one), and never panic. The classes already
// covered by `content::all_content_errors_in_one_pass` (bad YAML in a
// section, severity 11 / "high", unknown evaluation type, missing schema,
// duplicate section codes, invalid JSON, invalid JSON Schema, non-UTF-8 in a
// component, empty scenario prompt) are not repeated here.
// ---------------------------------------------------------------------------

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
    assert_eq!(crate::support::json(&out)["total_test_cases"], 20_000);
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
fn selectors_with_dots_or_slashes_are_usage_errors_everywhere() {
    let b = Bench::new();
    b.file("models.yml", "models:\n  - id: a/b\n")
        .scenario("P1-B1-S1", "S1");
    for sel in [
        "..",
        "../P1",
        "P1/B1",
        "/etc/passwd",
        "P1-B1-S1/..",
        "P1-B1-S1\0",
    ] {
        for args in [
            vec!["run-batch", "--scenario", sel],
            vec!["run-batch", "--dry-run", "--scenario", sel],
            vec!["run-single", sel],
            vec!["prompts", sel],
        ] {
            // A key and an unreachable provider: a bad selector must be
            // refused before anything is sent or written.
            let out = match b
                .cmd()
                .env("OPENROUTER_API_KEY", "sk-test")
                .env("OPENROUTER_BASE_URL", "http://127.0.0.1:9")
                .args(&args)
                .output()
            {
                Ok(o) => o,
                // An interior NUL cannot even be passed as an argument.
                Err(_) if sel.contains('\0') => continue,
                Err(e) => panic!("{e}"),
            };
            assert_no_panic(&out);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.contains("is not a test or scenario code"),
                "{args:?}: {err}"
            );
            assert!(
                !b.dir.path().join("helmbench.db").exists(),
                "{args:?} wrote a database"
            );
        }
    }
}

#[test]
fn resume_of_an_unknown_run_is_a_usage_error() {
    let b = Bench::new();
    b.file("models.yml", "models:\n  - id: a/b\n")
        .scenario("P1-B1-S1", "S1");
    let out = b
        .cmd()
        .env("OPENROUTER_API_KEY", "sk-test")
        .env("OPENROUTER_BASE_URL", "http://127.0.0.1:9")
        .args(["--database-url"])
        .arg(b.dir.path().join("h.db"))
        .args(["run-batch", "--resume", "42"])
        .output()
        .unwrap();
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no run with id 42"),
        "{}",
        stderr(&out)
    );
}

// ---------------------------------------------------------------------------
// Provider faults
// ---------------------------------------------------------------------------

/// Fails 30 % of first attempts (a third each: 429 with Retry-After: 0,
/// 500, an error inside a 200 body) and wraps 20 % of replies in ```json
/// fences, chosen by the prompt so every fault is deterministic.
struct Faulty {
    attempts: Mutex<HashMap<String, usize>>,
    faults: AtomicUsize,
    fenced: AtomicUsize,
    calls: AtomicUsize,
}

fn bucket(prompt: &str) -> u64 {
    // FNV-1a: stable across runs, spread well enough over the prompts.
    prompt.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    }) % 100
}

impl Respond for Shared<Faulty> {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let this = &self.0;
        this.calls.fetch_add(1, Ordering::SeqCst);
        let p = prompt_of(req);
        let attempt = {
            let mut m = this.attempts.lock().unwrap();
            let n = m.entry(p.clone()).or_insert(0);
            *n += 1;
            *n
        };
        let k = bucket(&p);
        if attempt == 1 && k < 30 {
            this.faults.fetch_add(1, Ordering::SeqCst);
            return match k % 3 {
                0 => ResponseTemplate::new(429)
                    .insert_header("Retry-After", "0")
                    .set_body_json(json!({"error": {"code": 429, "message": "rate limited"}})),
                1 => ResponseTemplate::new(500)
                    .set_body_json(json!({"error": {"code": "internal", "message": "boom"}})),
                _ => ResponseTemplate::new(200).set_body_json(
                    json!({"error": {"code": 502, "message": "upstream overloaded"}}),
                ),
            };
        }
        let mut content = triage_content(&p);
        if (30..50).contains(&k) {
            this.fenced.fetch_add(1, Ordering::SeqCst);
            content = format!("```json\n{content}\n```");
        }
        ResponseTemplate::new(200).set_body_json(completion(&content, 0.001))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn three_hundred_cases_under_provider_faults() {
    let server = crate::support::mock::mock_server().await;
    let faulty = Arc::new(Faulty {
        attempts: Mutex::new(HashMap::new()),
        faults: AtomicUsize::new(0),
        fenced: AtomicUsize::new(0),
        calls: AtomicUsize::new(0),
    });
    Mock::given(method("POST"))
        .and(path("/chat/completions"))
        .respond_with(Shared(faulty.clone()))
        .mount(&server)
        .await;
    let b = grid_bench(3, 100);
    let out = run_to_end(
        &b,
        &server.uri(),
        &["run-batch", "--all-scenarios", "--concurrency", "16"],
    )
    .await;
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let faults = faulty.faults.load(Ordering::SeqCst);
    let fenced = faulty.fenced.load(Ordering::SeqCst);
    // The prompts spread over the buckets: roughly 30 % and 20 %.
    assert!((60..=120).contains(&faults), "faults injected: {faults}");
    assert!((30..=90).contains(&fenced), "fenced replies: {fenced}");
    assert_eq!(faulty.calls.load(Ordering::SeqCst), 300 + faults);

    let pool = open_db(&b).await;
    assert_exact_results(&pool, 1, 300).await;
    // Each faulted request took exactly one retry, and nothing else did.
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM result WHERE attempts = 2").await,
        faults as i64
    );
    assert_eq!(
        count(
            &pool,
            "SELECT COUNT(*) FROM result WHERE attempts NOT IN (1, 2)"
        )
        .await,
        0
    );
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["status"], "completed");
    assert_eq!(r["test_cases"], 300);
    let expected = (1..=100usize)
        .filter(|i| !i.is_multiple_of(FLIP_EVERY))
        .count()
        * 3;
    assert_eq!(r["passed"], expected);
    assert_eq!(r["format_failures"], 0);
    assert_eq!(r["provider_errors"], 0);
    eprintln!(
        "faults injected and survived: {faults} failed first attempts, {fenced} fenced replies"
    );
}

// ---------------------------------------------------------------------------
// Crashes, signals and concurrent use
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_before_the_first_write_then_resume() {
    let b = grid_bench(2, 20);
    let (stored, calls) = run_and_kill(&b, &batch_args(), 0, 0, &[]).await;
    assert_eq!(stored, 0);
    // Paid twice: only the requests in flight at the kill.
    assert_eq!(calls, CONCURRENCY);
    let resumed = resume_to_completion(&b, stored).await;
    assert!(calls + resumed - N <= CONCURRENCY);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_mid_batch_twice_then_resume() {
    let b = grid_bench(2, 20);
    let (stored, calls) = run_and_kill(&b, &batch_args(), 13, 0, &[]).await;
    assert_eq!(stored, 13);
    assert!(
        calls as i64 - stored <= CONCURRENCY as i64,
        "{calls} sent, {stored} stored"
    );
    // The resume itself is killed mid-way.
    let (stored2, calls2) = run_and_kill(&b, &["run-batch", "--resume", "1"], 11, 13, &[]).await;
    assert_eq!(stored2, 24);
    assert!(calls2 as i64 - 11 <= CONCURRENCY as i64);
    let resumed = resume_to_completion(&b, stored2).await;
    let paid_twice = calls + calls2 + resumed - N;
    assert!(
        paid_twice <= 2 * CONCURRENCY,
        "{paid_twice} requests paid twice over two kills"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_final_bookkeeping_then_resume() {
    let b = grid_bench(2, 20);
    // Hold the run between its last result write and its bookkeeping.
    let mut args = batch_args();
    args.push("--test-pause-before-finish-ms=60000");
    let (stored, calls) = run_and_kill(&b, &args, N, 0, &[]).await;
    assert_eq!(stored, N as i64);
    assert_eq!(calls, N);
    let resumed = resume_to_completion(&b, stored).await;
    assert_eq!(resumed, 0, "nothing is paid twice");
}

/// A run has one owner: `--resume` of a run another live process is running
/// is refused before anything is sent; once that process is killed, `runs`
/// calls the run interrupted at once and the resume goes ahead.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_is_resumed_by_one_process_at_a_time() {
    let b = grid_bench(2, 20);
    let (server, _gate) = gate_server(5).await;
    let mut child = spawn(&b, &server.uri(), &batch_args(), &[]);
    let pool = open_db(&b).await;
    wait_until(60, "five results", || {
        let pool = pool.clone();
        async move { count(&pool, "SELECT COUNT(*) FROM result").await >= 5 }
    })
    .await;

    assert_resume_refused(&b, child.id()).await;
    assert_eq!(runs_json(&b)["runs"][0]["status"], "running");

    child.kill().unwrap();
    child.wait().unwrap();
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["status"], "interrupted", "{r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("stopped without finishing"),
        "{r}"
    );
    pool.close().await;
    resume_to_completion(&b, 5).await;
}

/// Across hosts only the heartbeat tells a live owner from a dead one: a
/// fresh one refuses the resume, one older than 30 s lets it through.
#[tokio::test(flavor = "multi_thread")]
async fn an_owner_on_another_host_counts_while_its_heartbeat_is_fresh() {
    let b = grid_bench(2, 20);
    let (stored, _) = run_and_kill(&b, &batch_args(), 7, 0, &[]).await;
    let pool = open_db(&b).await;
    sqlx::query(
        "UPDATE evaluation_run SET owner_host = 'lab-node-7', owner_pid = 4242,
           heartbeat_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
    )
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(runs_json(&b)["runs"][0]["status"], "running");
    let (server, gate) = gate_server(usize::MAX).await;
    let out = run_to_end(&b, &server.uri(), &["run-batch", "--resume", "1"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("pid 4242 on lab-node-7"),
        "{}",
        stderr(&out)
    );
    assert_eq!(gate.calls.load(Ordering::SeqCst), 0);

    sqlx::query(
        "UPDATE evaluation_run SET heartbeat_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-31 seconds')",
    )
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(runs_json(&b)["runs"][0]["status"], "interrupted");
    pool.close().await;
    resume_to_completion(&b, stored).await;
}

/// A running process keeps its heartbeat fresh, and stops sending when
/// another process has taken its run over (here: the row names pid 1).
#[tokio::test(flavor = "multi_thread")]
async fn a_run_taken_over_elsewhere_stops_sending_and_leaves_the_row_alone() {
    let server = slow_triage_server(500).await;
    // 40 test cases one at a time: 20 s, and two heartbeats (5 s apart) come first.
    let b = grid_bench(2, 20);
    let child = spawn(
        &b,
        &server.uri(),
        &["run-batch", "--all-scenarios", "--concurrency", "1"],
        &[],
    );
    let pool = open_db(&b).await;
    let beat = || {
        let pool = pool.clone();
        async move {
            // An error is "not yet": the binary may still be migrating.
            sqlx::query_scalar::<_, String>("SELECT heartbeat_at FROM evaluation_run WHERE id = 1")
                .fetch_optional(&pool)
                .await
                .ok()
                .flatten()
        }
    };
    wait_until(60, "the run row", || {
        let beat = beat();
        async move { beat.await.is_some() }
    })
    .await;
    let first = beat().await.unwrap();
    wait_until(20, "a second heartbeat", || {
        let (beat, first) = (beat(), first.clone());
        async move { beat.await.is_some_and(|b| b > first) }
    })
    .await;

    sqlx::query("UPDATE evaluation_run SET owner_pid = 1 WHERE id = 1")
        .execute(&pool)
        .await
        .unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("another helmbench took over run 1"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stored = count(&pool, "SELECT COUNT(*) FROM result").await;
    assert!(stored < 40, "it stopped early: {stored}");
    // The new owner's row is not marked finished by the old one.
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM evaluation_run WHERE status = 'running' AND completed_at IS NULL AND owner_pid = 1").await,
        1
    );
}

/// Interrupts a run with `signal` once 9 results are stored and every
/// worker is blocked on a held request, then resumes it.
#[cfg(unix)]
async fn interrupt_then_resume(signal: &str) {
    let b = grid_bench(2, 20);
    let (server, gate) = gate_server(9).await;
    let child = spawn(&b, &server.uri(), &batch_args(), &[]);
    let pool = open_db(&b).await;
    wait_until(60, "9 results", || {
        let pool = pool.clone();
        async move { count(&pool, "SELECT COUNT(*) FROM result").await >= 9 }
    })
    .await;
    wait_until(60, "every worker in flight", || {
        let c = gate.calls.load(Ordering::SeqCst);
        async move { c >= 9 + CONCURRENCY }
    })
    .await;
    let sent = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    // The held requests (a minute each) are dropped, not waited for.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_no_panic(&out);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{signal}: {err}");
    assert!(err.contains("interrupted: saving what finished"), "{err}");
    assert!(
        err.contains("resume with: helmbench run-batch --resume 1"),
        "{err}"
    );
    assert_key_absent("stdout", &out.stdout);
    assert_key_absent("stderr", &out.stderr);
    let r = &runs_json(&b)["runs"][0];
    assert_eq!(r["status"], "interrupted", "{r}");
    assert_eq!(r["test_cases"], 9);
    assert!(r["message"].as_str().unwrap().contains("cancelled"), "{r}");
    assert!(r["completed_at"].is_string());
    resume_to_completion(&b, 9).await;
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn sigint_saves_marks_interrupted_and_resume_completes() {
    interrupt_then_resume("-INT").await;
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_is_handled_like_ctrl_c() {
    interrupt_then_resume("-TERM").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_batches_on_one_database_at_once_and_a_consistent_reader() {
    let server = slow_triage_server(20).await;
    let b = grid_bench(3, 100); // 300 test cases per run
    let args = [
        "run-batch",
        "--all-scenarios",
        "--no-cache",
        "--concurrency",
        "8",
    ];
    // Both start on a database that does not exist yet: both migrate it.
    let first = spawn(&b, &server.uri(), &args, &[]);
    let second = spawn(&b, &server.uri(), &args, &[]);
    let runs_reader = {
        let b_root = b.root();
        let db = db_path(&b);
        let dir = b.dir.path().to_path_buf();
        std::thread::spawn(move || {
            let mut snapshots = 0;
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                let out = Helmbench::in_dir(&dir)
                    .benchmark(&b_root)
                    .database(&db)
                    .std()
                    .args(["runs", "--format", "json"])
                    .output()
                    .unwrap();
                if out.status.code() == Some(2) && stderr(&out).contains("no database") {
                    continue; // not created yet
                }
                assert_eq!(out.status.code(), Some(0), "runs: {}", stderr(&out));
                let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                let runs = v["runs"].as_array().unwrap();
                let mut done = runs.len() == 2;
                for r in runs {
                    let n = |k: &str| r[k].as_i64().unwrap_or_else(|| panic!("{k} in {r}"));
                    assert!(n("passed") <= n("test_cases"), "{r}");
                    assert!(n("test_cases") <= n("planned_test_cases"), "{r}");
                    assert!(n("evaluations") >= n("test_cases"), "{r}");
                    assert!(r["cost_usd"].as_f64().unwrap() >= 0.0);
                    done &= r["status"] == "completed";
                }
                snapshots += 1;
                if done {
                    break;
                }
            }
            snapshots
        })
    };
    let (a, c) = tokio::task::spawn_blocking(move || {
        (
            first.wait_with_output().unwrap(),
            second.wait_with_output().unwrap(),
        )
    })
    .await
    .unwrap();
    for out in [&a, &c] {
        assert_no_panic(out);
        // Under load one writer may wait past its lock timeout for the
        // other: it pauses sending and says so, and nothing is lost.
        assert!(
            stderr(out)
                .lines()
                .filter(|l| l.contains("locked"))
                .all(|l| l.contains("sending paused")),
            "{}",
            stderr(out)
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(out));
    }
    let snapshots = runs_reader.join().unwrap();
    assert!(snapshots > 0);
    let pool = open_db(&b).await;
    assert_exact_results(&pool, 1, 300).await;
    assert_exact_results(&pool, 2, 300).await;
    for r in runs_json(&b)["runs"].as_array().unwrap() {
        assert_eq!(r["status"], "completed");
        assert_eq!(r["test_cases"], 300);
    }
}

// ---------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn key_never_appears_in_output_trace_logs_or_database() {
    let b = grid_bench(1, 4);
    // Every path that reports a provider's words: a retry, an echoed key in
    // an error message, a 400 rejection, and finally a 401 stop.
    let echo = format!("invalid request for key {KEY}");
    let script = || {
        Sequence::new(vec![
            ResponseTemplate::new(429)
                .insert_header("Retry-After", "0")
                .set_body_json(json!({"error": {"code": 429, "message": echo}})),
            ok_reply(&triage_content("can't go on")),
            ResponseTemplate::new(400)
                .set_body_json(json!({"error": {"code": 400, "message": echo}})),
            ok_reply(&triage_content("x")),
            ResponseTemplate::new(401)
                .set_body_json(json!({"error": {"code": 401, "message": echo}})),
        ])
    };
    let server = crate::support::mock::mock_server().await;
    let mut logs = Vec::new();
    for level in ["trace", "debug", "info"] {
        server.reset().await;
        crate::support::mock::mount_catalog(&server).await;
        Mock::given(method("POST"))
            .and(path("/chat/completions"))
            .respond_with(script())
            .mount(&server)
            .await;
        let _ = std::fs::remove_file(db_path(&b));
        let mut c = online(&b, KEY, &server.uri());
        let out = c
            .env("RUST_LOG", level)
            .env("RUST_BACKTRACE", "full")
            .args(["-vv", "run-batch", "--all-scenarios", "--concurrency", "1"])
            .output()
            .unwrap();
        assert_no_panic(&out);
        assert_key_absent(&format!("stdout at {level}"), &out.stdout);
        assert_key_absent(&format!("stderr at {level}"), &out.stderr);
        logs.push(stderr(&out));
        for f in ["h.db", "h.db-wal", "h.db-shm"] {
            if let Ok(bytes) = std::fs::read(b.dir.path().join(f)) {
                assert_key_absent(f, &bytes);
            }
        }
    }
    let trace = &logs[0];
    // The trace really had the HTTP stack's own events in it, and the
    // provider's words (with the key scrubbed) reached the output.
    assert!(
        trace.contains("TRACE") && trace.lines().count() > 50,
        "RUST_LOG=trace produced no trace output:\n{trace}"
    );
    // hyper-util's connection pool and connector logged at trace level.
    assert!(
        trace.contains("Http::connect") && trace.contains("connecting to 127.0.0.1"),
        "no HTTP-stack tracing in:\n{trace}"
    );
    assert!(trace.contains("<redacted>"), "{trace}");
    assert!(
        trace.contains("OPENROUTER_API_KEY"),
        "the 401 names the variable"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn redirect_to_another_host_never_carries_the_key() {
    let other = crate::support::mock::mock_server().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(completion(&triage_content("x"), 0.001)),
        )
        .mount(&other)
        .await;
    let first = crate::support::mock::mock_server().await;
    for status in [301, 302, 303, 307, 308] {
        first.reset().await;
        crate::support::mock::mount_catalog(&first).await;
        Mock::given(method("POST"))
            .respond_with(
                ResponseTemplate::new(status)
                    .insert_header("Location", format!("{}/chat/completions", other.uri())),
            )
            .mount(&first)
            .await;
        let b = grid_bench(1, 1);
        let out = run_to_end(&b, &first.uri(), &["run-batch", "--all-scenarios"]).await;
        assert_no_panic(&out);
        assert_key_absent("stderr", &out.stderr);
        // The first server saw the key (it is the configured provider)...
        let seen = first.received_requests().await.unwrap();
        assert!(!seen.is_empty());
        assert!(seen[0].headers.get("authorization").is_some());
        // ...the other host never did.
        for r in other.received_requests().await.unwrap() {
            assert!(
                r.headers.get("authorization").is_none(),
                "{status} redirect carried Authorization to another host"
            );
        }
        // The redirect is reported, not silently followed.
        let pool = open_db(&b).await;
        let err: String = sqlx::query_scalar("SELECT error FROM result")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert!(
            err.contains(&status.to_string()) && err.contains("redirect"),
            "{err}"
        );
    }
}

/// TLS goes through rustls: no OpenSSL or native-tls anywhere in the build
/// (`.ci/run` checks the same on reqwest's resolved features).
#[test]
fn tls_is_rustls_only() {
    let lock = std::fs::read_to_string(crate::support::repo_root().join("Cargo.lock")).unwrap();
    let names: Vec<&str> = lock
        .lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .map(|l| l.trim_end_matches('"'))
        .collect();
    for banned in [
        "openssl",
        "openssl-sys",
        "native-tls",
        "hyper-tls",
        "tokio-native-tls",
    ] {
        assert!(!names.contains(&banned), "{banned} is in Cargo.lock");
    }
    assert!(names.contains(&"rustls"));
    assert!(
        names.contains(&"rustls-platform-verifier") || names.contains(&"webpki-roots"),
        "rustls needs system or webpki roots"
    );
}
