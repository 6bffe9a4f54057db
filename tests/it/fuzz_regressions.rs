//! Replays the fuzzing regression corpus (`fuzz/regressions/<target>/*`:
//! seeds and every input a fuzzer ever failed on) through the same invariant
//! checks the fuzz targets run, so CI keeps them fixed without cargo-fuzz.

use std::panic::{AssertUnwindSafe, catch_unwind};

#[path = "../../fuzz/src/checks.rs"]
mod checks;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = crate::support::repo_root()
        .join("fuzz/regressions")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    let mut failed = Vec::new();
    for f in &files {
        let data = std::fs::read(f).unwrap();
        if catch_unwind(AssertUnwindSafe(|| check(&data))).is_err() {
            failed.push(f.display().to_string());
        }
    }
    assert!(failed.is_empty(), "invariants broken by {failed:?}");
}

#[test]
fn frontmatter_regressions() {
    replay("frontmatter", checks::frontmatter);
}

#[test]
fn to_xml_regressions() {
    replay("to_xml", checks::to_xml);
}

#[test]
fn sections_regressions() {
    replay("sections", checks::sections);
}
