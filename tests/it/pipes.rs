//! A reader that goes away (`helmbench export | head`) ends the command
//! quietly with exit 0: no error text, no panic, even when stderr is the
//! same closed pipe (`2>&1 | head -c 100`).

use crate::support::{Helmbench, gen_bench, gen_compare_db};

/// A database whose export and report are far larger than a pipe's buffer.
async fn big_database() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let shape = gen_bench::Shape {
        scenarios: 20,
        conditions: 3,
        user_contexts: 1,
        perturbations: 5,
    };
    gen_compare_db::run(tmp.path(), 3, shape).await.unwrap();
    tmp
}

/// Runs `helmbench ARGS | TAIL` in bash; returns helmbench's exit code and
/// what reached the terminal (the reader's output, and stderr unless
/// `merged` sends it into the pipe too).
fn piped(dir: &std::path::Path, args: &str, tail: &str, merged: bool) -> (i32, String, String) {
    let bin = env!("CARGO_BIN_EXE_helmbench");
    let redirect = if merged { "2>&1" } else { "" };
    let script = format!(
        "\"{bin}\" --benchmark-dir bench --database-url compare.db {args} {redirect} | {tail}; echo \"rc=${{PIPESTATUS[0]}}\" >&3"
    );
    let mut shell = std::process::Command::new("bash");
    Helmbench::clear_env(&mut shell);
    let out = shell
        .arg("-c")
        .arg(format!("exec 3>rc.txt; {script}"))
        .current_dir(dir)
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    let rc = std::fs::read_to_string(dir.join("rc.txt")).unwrap();
    let code: i32 = rc.trim().trim_start_matches("rc=").parse().unwrap();
    (
        code,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_closed_pipe_is_a_quiet_exit_zero() {
    let tmp = big_database().await;
    let dir = tmp.path();
    // The export really is larger than a pipe holds, or nothing is tested.
    let full = Helmbench::in_dir(dir)
        .benchmark("bench")
        .database("compare.db")
        .std()
        .args(["export", "--format", "csv"])
        .output()
        .unwrap();
    assert!(full.status.success());
    assert!(
        full.stdout.len() > 256 * 1024,
        "{} bytes",
        full.stdout.len()
    );

    for (args, tail) in [
        ("export --format csv", "head -n 1"),
        ("export --format jsonl", "head -n 1"),
        ("report --details", "head -n 2"),
        ("report --format json --details", "head -c 100"),
        ("runs", "head -n 1"),
    ] {
        let (code, shown, errors) = piped(dir, args, tail, false);
        assert_eq!(code, 0, "`{args} | {tail}` exit code; stderr: {errors}");
        assert!(!shown.is_empty(), "`{args} | {tail}` printed nothing");
        assert!(
            !errors.contains("error") && !errors.contains("panicked"),
            "`{args} | {tail}`: {errors}"
        );
    }
    // stderr into the same closed pipe: still no panic (exit 101), still 0.
    let (code, shown, _) = piped(dir, "export --format jsonl", "head -c 100", true);
    assert_eq!(code, 0, "export --format jsonl 2>&1 | head -c 100");
    assert_eq!(shown.len(), 100);
    assert!(!shown.contains("panicked"));
}
