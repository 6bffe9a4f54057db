//! Shell integration (issue 44): the completions `helmbench completions
//! bash` prints, sourced in a real bash, complete subcommands and flags;
//! `helmbench man` pages render with `man -l`.

use std::process::Command;

use crate::support::{Bench, stderr, stdout};

/// What bash's completion offers after `words` (the last one being
/// completed), with helmbench's script sourced.
fn complete(script: &std::path::Path, words: &[&str]) -> Vec<String> {
    let line = words.join(" ");
    let cword = words.len() - 1;
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let prev = if cword > 0 { words[cword - 1] } else { "" };
    let program = format!(
        "source '{}'; COMP_WORDS=({}); COMP_CWORD={cword}; COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}; _helmbench helmbench '{}' '{prev}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        quoted.join(" "),
        words[cword],
    );
    let out = Command::new("bash")
        .args(["-c", &program])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout(&out).lines().map(str::to_string).collect()
}

#[test]
fn bash_completes_subcommands_and_their_flags() {
    let b = Bench::new();
    let out = b
        .helmbench()
        .std()
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let script = b.dir.path().join("helmbench.bash");
    std::fs::write(&script, &out.stdout).unwrap();
    assert_eq!(complete(&script, &["helmbench", "run-b"]), ["run-batch"]);
    assert_eq!(
        complete(&script, &["helmbench", "run-batch", "--scen"]),
        ["--scenario"]
    );
    assert!(
        complete(&script, &["helmbench", "prompts", "--var"]).contains(&"--variants".to_string())
    );
    // Every shell clap_complete knows gets a script.
    for shell in ["zsh", "fish", "powershell", "elvish"] {
        let out = b
            .helmbench()
            .std()
            .args(["completions", shell])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", stderr(&out));
        assert!(stdout(&out).contains("run-batch"), "{shell}");
    }
    let bad = b
        .helmbench()
        .std()
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

/// `man` prints helmbench(1); `--out-dir` writes a page per command; each
/// renders with `man -l` (man-db, installed by .ci/run; locally the test
/// says so and checks the roff alone when it is missing).
#[test]
fn man_pages_render_with_man() {
    let b = Bench::new();
    let out = b.helmbench().std().arg("man").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with(".ie") || stdout(&out).contains(".TH helmbench 1"),
        "{}",
        stdout(&out)
    );
    let dir = b.dir.path().join("man");
    let out = b
        .helmbench()
        .std()
        .args(["man", "--out-dir", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let pages = [
        "helmbench.1",
        "helmbench-run-batch.1",
        "helmbench-prompts.1",
        "helmbench-man.1",
    ];
    for p in pages {
        assert!(dir.join(p).is_file(), "{p} written");
    }
    let have_man = Command::new("man")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_man {
        assert!(
            std::env::var("CI").is_err(),
            "man (man-db) is missing under CI: .ci/run installs it"
        );
        eprintln!("man is not installed: the pages' roff was checked, not their rendering");
        return;
    }
    let shown = Command::new("man")
        .arg("-l")
        .arg(dir.join("helmbench-run-batch.1"))
        .env("MANWIDTH", "80")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .output()
        .unwrap();
    let text = stdout(&shown);
    assert!(shown.status.success(), "{}", stderr(&shown));
    assert!(
        text.contains("NAME") && text.contains("helmbench-run-batch"),
        "{text}"
    );
    assert!(text.contains("--scenario"), "{text}");
}
