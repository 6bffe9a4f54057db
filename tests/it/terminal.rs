//! Issue 30 #2 and #3, through a pseudo-terminal of 80 columns (expectrl):
//! every table command fits its lines in the terminal (a long model id cut,
//! never a row wrapped), while piped output keeps every value whole; and a
//! batch of several models redraws one block of progress lines in place
//! (cursor-up, no scroll), each line within 80 columns, ending on every
//! model's totals; off a terminal, plain lines every `--progress-every`.

use std::process::Command;
use std::time::Duration;

use expectrl::{Eof, Expect, Session};

use crate::support::mock::slow_triage_server;
use crate::support::{KEY, bench_of, ok, online, read, run, scored_run, stderr, stdout};

const WIDTH: usize = 80;
const LONG: &str = "anthropic/claude-3.5-sonnet-20241022";
const LONGER: &str = "meta-llama/llama-3.1-405b-instruct:free";

/// Runs `cmd` in a pseudo-terminal of 80 x 24 and returns all it printed
/// (stdout and stderr share the terminal) and its exit code.
fn in_pty(mut cmd: Command) -> (String, i32) {
    cmd.env("TERM", "xterm-256color");
    let mut p = Session::spawn(cmd).expect("a pseudo-terminal");
    p.get_process_mut()
        .set_window_size(WIDTH as u16, 24)
        .unwrap();
    p.set_expect_timeout(Some(Duration::from_secs(120)));
    let out = p.expect(Eof).expect("the command ends");
    let text = String::from_utf8_lossy(out.as_bytes()).into_owned();
    let status = p.get_process().wait().expect("an exit status");
    let code = match status {
        expectrl::process::unix::WaitStatus::Exited(_, code) => code,
        other => panic!("{other:?}\n{text}"),
    };
    (text, code)
}

/// `text` without its escape sequences (CSI `ESC [ ... letter`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The rows the terminal shows, in the order written: the text split at
/// newlines and carriage returns (escapes gone), then into rows of 80
/// columns, each without its trailing blanks. indicatif ends each progress
/// line with blanks up to the last column and lets the terminal wrap, so a
/// frame of the block is one stretch of text, 80 columns a line.
fn rows(text: &str) -> Vec<String> {
    strip_ansi(text)
        .split(['\n', '\r'])
        .flat_map(|seg| {
            let chars: Vec<char> = seg.chars().collect();
            chars
                .chunks(WIDTH)
                .map(|c| c.iter().collect::<String>().trim_end().to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// No line runs past the last column: wherever text goes on without a
/// newline past 80 columns, what filled the 80th column was a blank (the
/// padding of a progress line), never a character of the line itself.
fn assert_fits(what: &str, text: &str) {
    let mut over = Vec::new();
    for seg in strip_ansi(text).split(['\n', '\r']) {
        let chars: Vec<char> = seg.chars().collect();
        for (i, c) in chars.chunks(WIDTH).enumerate() {
            let more = (i + 1) * WIDTH < chars.len();
            if more && c[WIDTH - 1] != ' ' {
                over.push(c.iter().collect::<String>());
            }
        }
    }
    assert!(
        over.is_empty(),
        "{what}: {} lines run past column {WIDTH}:\n{}\n--- all:\n{text}",
        over.len(),
        over.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_table_fits_an_80_column_terminal_and_a_pipe_keeps_values_whole() {
    let s = scored_run::setup().await;
    // Two more models with ids as long as real ones.
    ok(run(
        &s.bench,
        &s.server,
        &[
            "run-batch",
            "--all-scenarios",
            "--models",
            &format!("{LONG},{LONGER}"),
        ],
    ));
    let db = crate::support::db_path(&s.bench);
    for args in [
        vec!["runs"],
        vec!["costs"],
        vec!["report"],
        vec!["report", "--details"],
        vec!["list"],
        vec!["compare", "--resamples", "200"],
    ] {
        let mut cmd = s.bench.helmbench().database(&db).std();
        cmd.args(&args);
        let (text, code) = in_pty(cmd);
        assert_eq!(code, 0, "{args:?}: {text}");
        assert!(rows(&text).len() > 3, "{args:?} printed little: {text}");
        assert_fits(&format!("{args:?}"), &text);
    }

    // Off a terminal the same tables keep every value whole, one row a line.
    let piped = stdout(&ok(read(&s.bench, &["runs"])));
    assert!(piped.contains(LONGER), "{piped}");
    assert!(
        piped.lines().any(|l| l.chars().count() > WIDTH),
        "a pipe gets the tables unfitted: {piped}"
    );
    // --width fits them there too.
    let fitted = stdout(&ok(read(&s.bench, &["--width", "80", "report"])));
    assert_fits("report --width 80", &fitted);
}

#[tokio::test(flavor = "multi_thread")]
async fn progress_of_several_models_redraws_one_block_within_80_columns() {
    let server = slow_triage_server(40).await;
    let b = bench_of(30);
    let models = ["a/one", "b/two", LONG, LONGER];
    let mut cmd = online(&b, KEY, &server.uri());
    cmd.args([
        "run-batch",
        "--all-scenarios",
        "--concurrency",
        "2",
        "--models",
        &models.join(","),
    ]);
    let (text, code) = in_pty(cmd);
    assert_eq!(code, 0, "{text}");
    assert_fits("run-batch progress", &text);

    // Redrawn in place: the cursor goes back up over the block, and on an
    // 80-column terminal the output never reaches further down than the
    // block and the summary (a scrolling display grows with every update).
    let (mut row, mut col, mut lowest, mut ups) = (0i64, 0usize, 0i64, 0usize);
    // Past the last column the cursor waits there; the next character
    // goes to the start of the next row (as xterm and its kin do).
    let mut pending = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => {
                row += 1;
                pending = false;
            }
            '\r' => {
                col = 0;
                pending = false;
            }
            '\u{1b}' if chars.peek() == Some(&'[') => {
                chars.next();
                let mut n = String::new();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        let n = n.parse::<i64>().unwrap_or(1);
                        match d {
                            'A' => {
                                row -= n;
                                ups += 1;
                            }
                            'B' => row += n,
                            _ => {}
                        }
                        pending = false;
                        break;
                    }
                    n.push(d);
                }
            }
            _ => {
                if pending {
                    row += 1;
                    col = 0;
                }
                col += 1;
                pending = col == WIDTH;
            }
        }
        lowest = lowest.max(row);
    }
    assert!(ups >= 5, "{ups} cursor-up sequences:\n{text:?}");
    // The estimate and the summaries take a few dozen rows; had the block
    // scrolled, each of its redraws would have added five.
    let redraws = ups;
    assert!(
        lowest <= 60 && (lowest as usize) < 5 * redraws,
        "the output reached row {lowest} after {redraws} redraws:\n{text:?}"
    );

    // The block stays with every model's totals.
    let shown = rows(&text);
    for (i, m) in models.iter().enumerate() {
        let tag = format!("{} {}", i + 1, m.chars().take(5).collect::<String>());
        let last = shown
            .iter()
            .rev()
            .find(|l| l.starts_with(&tag) && l.contains(" err "))
            .unwrap_or_else(|| panic!("no progress line for {m}:\n{text}"));
        assert!(
            last.contains(" 30/30 err 0 blk 0 $0.0300") && last.ends_with("done"),
            "{last}"
        );
    }
    let total = shown
        .iter()
        .rev()
        .find(|l| l.starts_with("total (4 models)"))
        .unwrap_or_else(|| panic!("no total line:\n{text}"));
    assert!(total.contains(" 120/120 err 0 blk 0 $0.1200"), "{total}");
}

#[tokio::test(flavor = "multi_thread")]
async fn off_a_terminal_progress_is_plain_lines_every_few_seconds() {
    let server = slow_triage_server(100).await;
    let b = bench_of(30);
    let out = online(&b, KEY, &server.uri())
        .args([
            "run-batch",
            "--all-scenarios",
            "--concurrency",
            "1",
            "--models",
            "a/one,b/two",
            "--progress-every",
            "1",
        ])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "no escape sequences in a log: {err:?}"
    );
    for tag in [
        "progress: 1 a/one ",
        "progress: 2 b/two ",
        "progress: total (2 models) ",
    ] {
        assert!(err.contains(tag), "{tag}: {err}");
    }
    // The default (10 s) prints nothing in a run this short.
    let quiet = online(&b, KEY, &server.uri())
        .args(["run-batch", "--all-scenarios", "--models", "a/one"])
        .output()
        .unwrap();
    assert!(!stderr(&quiet).contains("progress:"), "{}", stderr(&quiet));
}
