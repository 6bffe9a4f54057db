//! Scaffolding (issue 44): `helmbench new scenario CODE --type T` writes a
//! folder that `check --strict` accepts and `run-batch --dry-run` composes,
//! in the layout the benchmark already uses; a second call, or a code that
//! exists in another layout, is refused with nothing written;
//! `helmbench new benchmark DIR` starts a benchmark that `check` accepts.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::{Bench, Helmbench, stderr, stdout};

fn new_in(dir: &Path, benchmark: &Path, args: &[&str]) -> Output {
    Helmbench::in_dir(dir)
        .benchmark(benchmark)
        .std()
        .args(args)
        .output()
        .unwrap()
}

/// Every file below `dir`, with its bytes, in order.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    fn walk(d: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

/// A fresh benchmark from `new benchmark`, and its folder.
fn new_benchmark(b: &Bench) -> PathBuf {
    let dir = b.dir.path().join("mine");
    let out = new_in(
        b.dir.path(),
        &dir,
        &["new", "benchmark", dir.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(dir.join("models.yml").is_file() && dir.join("scoring.yaml").is_file());
    dir
}

fn assert_checks_and_composes(b: &Bench, bench: &Path, code: &str, cases: usize) {
    let check = new_in(b.dir.path(), bench, &["check", "--strict", code]);
    assert_eq!(
        check.status.code(),
        Some(0),
        "{code}: {}{}",
        stdout(&check),
        stderr(&check)
    );
    let prompts = new_in(b.dir.path(), bench, &["prompts", code, "--format", "jsonl"]);
    assert_eq!(
        prompts.status.code(),
        Some(0),
        "{code}: {}",
        stderr(&prompts)
    );
    assert_eq!(stdout(&prompts).lines().count(), cases, "{code}");
}

#[test]
fn new_scenario_of_every_type_passes_check_and_composes() {
    let b = Bench::new();
    let bench = new_benchmark(&b);
    assert_checks_and_composes(&b, &bench, "P1-B1-S1", 6);
    let types = [
        ("P1-B2-S1", "category_match", "S1.json"),
        ("P1-B3-S1", "list_includes", "S1.json"),
        ("P1-B4-S1", "tag_threshold", "S1.json"),
        ("P1-B5-S1A", "sqe", "criteria.md"),
        ("P1-B6-S2", "mcsqe", "CR2.md"),
    ];
    for (code, kind, marker) in types {
        let out = new_in(
            b.dir.path(),
            &bench,
            &["new", "scenario", code, "--type", kind],
        );
        assert_eq!(out.status.code(), Some(0), "{kind}: {}", stderr(&out));
        let dir = bench.join("scenarios").join(code);
        assert!(dir.join(marker).is_file(), "{kind}: {}", stdout(&out));
        assert!(stdout(&out).contains(&format!("helmbench check {code}")));
        // One condition, two perturbations, each alone and under two user contexts.
        assert_checks_and_composes(&b, &bench, code, 6);
        let dry = new_in(
            b.dir.path(),
            &bench,
            &["run-batch", "--dry-run", "--scenario", code],
        );
        assert_eq!(
            dry.status.code(),
            Some(0),
            "{kind}: {}{}",
            stdout(&dry),
            stderr(&dry)
        );
    }
    // The whole benchmark, every type at once, with no warning.
    let all = new_in(b.dir.path(), &bench, &["check", "--strict"]);
    assert_eq!(all.status.code(), Some(0), "{}", stdout(&all));
    let dry = new_in(
        b.dir.path(),
        &bench,
        &["run-batch", "--dry-run", "--all-scenarios"],
    );
    assert_eq!(
        dry.status.code(),
        Some(0),
        "{}{}",
        stdout(&dry),
        stderr(&dry)
    );
}

#[test]
fn new_conversation_writes_turns_that_check_accepts() {
    let b = Bench::new();
    let bench = new_benchmark(&b);
    let out = new_in(
        b.dir.path(),
        &bench,
        &["new", "scenario", "P2-B1-S1", "--type", "conversation"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(bench.join("scenarios/P2-B1-S1/turns.md").is_file());
    assert_checks_and_composes(&b, &bench, "P2-B1-S1", 6);
    // Each test case is a conversation: the composed prompt, then T1..T3.
    let prompts = new_in(
        b.dir.path(),
        &bench,
        &["prompts", "P2-B1-S1", "--format", "jsonl"],
    );
    let first: serde_json::Value =
        serde_json::from_str(stdout(&prompts).lines().next().unwrap()).unwrap();
    let messages = first["messages"].as_array().expect("messages");
    assert!(messages.len() >= 4, "{first}");
}

#[test]
fn a_second_call_refuses_and_writes_nothing() {
    let b = Bench::new();
    let bench = new_benchmark(&b);
    let args = ["new", "scenario", "P1-B2-S1", "--type", "sqe"];
    assert_eq!(new_in(b.dir.path(), &bench, &args).status.code(), Some(0));
    let edited = bench.join("scenarios/P1-B2-S1/S1.md");
    std::fs::write(
        &edited,
        "---\nevaluation:\n  type: sqe\n---\n\nMy own words.\n",
    )
    .unwrap();
    let before = snapshot(&bench);
    let again = new_in(b.dir.path(), &bench, &args);
    assert_eq!(again.status.code(), Some(2), "{}", stdout(&again));
    assert!(
        stderr(&again).contains("scenario P1-B2-S1 already exists"),
        "{}",
        stderr(&again)
    );
    // The same code in the other layout, a suffixed folder: refused too.
    let nested = new_in(b.dir.path(), &bench, &["new", "scenario", "P1-B1-S1"]);
    assert_eq!(nested.status.code(), Some(2));
    // Not a code: a usage error saying what a code is.
    let bad = new_in(b.dir.path(), &bench, &["new", "scenario", "p1-b9-s1"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("expected pillar, behaviour and scenario such as P2-B3-S1"));
    assert_eq!(snapshot(&bench), before, "nothing may change");
    // A benchmark folder without scenarios/: said so, with the way out.
    let nowhere = b.dir.path().join("nowhere");
    let lost = new_in(b.dir.path(), &nowhere, &["new", "scenario", "P1-B1-S1"]);
    assert_eq!(lost.status.code(), Some(2));
    assert!(
        stderr(&lost).contains("helmbench new benchmark DIR"),
        "{}",
        stderr(&lost)
    );
    assert!(!nowhere.exists());
    // `new benchmark` into a folder that holds something.
    let again = new_in(
        b.dir.path(),
        &bench,
        &["new", "benchmark", bench.to_str().unwrap()],
    );
    assert_eq!(again.status.code(), Some(2));
    assert!(
        stderr(&again).contains("is not empty"),
        "{}",
        stderr(&again)
    );
    assert_eq!(snapshot(&bench), before, "nothing may change");
}

#[test]
fn new_scenario_follows_the_layout_of_its_pillar() {
    // The bundled benchmark mixes both: P1 flat, P2 nested, P3 both.
    let b = Bench::bundled();
    let root = b.root();
    for (code, place) in [
        ("P2-B3-S1", "scenarios/P2/B3/S1/S1.md"),
        ("P2-B1-S2", "scenarios/P2/B1/S2/S2.md"),
        ("P1-B3-S1", "scenarios/P1-B3-S1/S1.md"),
        ("P4-B1-S1", "scenarios/P4-B1-S1/S1.md"),
    ] {
        let out = new_in(b.dir.path(), &root, &["new", "scenario", code]);
        assert_eq!(out.status.code(), Some(0), "{code}: {}", stderr(&out));
        assert!(root.join(place).is_file(), "{code}: {}", stdout(&out));
    }
    let all = new_in(b.dir.path(), &root, &["check", "--strict"]);
    assert_eq!(
        all.status.code(),
        Some(0),
        "{}{}",
        stdout(&all),
        stderr(&all)
    );
    // A nested scenario's code, asked for again, is found where it lives.
    let again = new_in(b.dir.path(), &root, &["new", "scenario", "P3-B1-S1"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        stderr(&again).contains("S1--claims-to-be-therapist"),
        "{}",
        stderr(&again)
    );
}
