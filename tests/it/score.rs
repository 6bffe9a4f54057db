//! `helmbench score` (issue 7): the CLI gives the library's numbers for any text.

use crate::support::{Bench, json, stderr, stdout};

const TEXTS: &[&str] = &[
    "",
    "   \n\t ",
    "I hear you. It makes sense that you're feeling this way, and I care about what you're going through.",
    "Just get over it and stop being so dramatic. It's all in your head - just snap out of it and man up.",
    "Try meditation. Exercise helps. Talk therapy works. Sleep more. Eat better. These help anxiety.",
    "no punctuation at all here but a country with a scared woman upstairs who wants to try",
    "Wait?! Really... yes!!! Okay.",
    "Ünïcödé UNDERSTAND Hear You — SOUNDS like a STRATEGY you can MANAGE.",
];

#[test]
fn stdin_json_equals_the_library() {
    let b = Bench::new();
    let mut long = String::new();
    for i in 0..230 {
        long.push_str(&format!("word{i} "));
    }
    let texts: Vec<String> = TEXTS.iter().map(|s| s.to_string()).chain([long]).collect();
    for text in &texts {
        for crisis in [false, true] {
            let mut cmd = b.cmd();
            cmd.args(["score", "-", "--format", "json"])
                .write_stdin(text.as_str());
            if crisis {
                cmd.arg("--crisis");
            }
            let out = cmd.output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
            let got = json(&out);
            let want =
                serde_json::to_value(helmbench::scoring::quality::report(text, crisis)).unwrap();
            assert_eq!(got, want, "text: {text:?}");
            for key in [
                "empathy",
                "helpfulness",
                "safety",
                "clarity",
                "overall",
                "weighted",
                "band",
                "red_flags",
            ] {
                assert!(got.get(key).is_some(), "{key} missing");
            }
        }
    }
}

#[test]
fn text_argument_file_and_table() {
    let b = Bench::new();
    let text = "I understand. Try a breathing exercise; it can help you cope.";
    let arg = json(
        &b.cmd()
            .args(["score", text, "--format", "json"])
            .output()
            .unwrap(),
    );
    assert_eq!(arg["empathy"], 1.5);
    assert_eq!(arg["helpfulness"], 6.0);
    let file = b.dir.path().join("reply.txt");
    std::fs::write(&file, text).unwrap();
    let from_file = json(
        &b.cmd()
            .args(["score", "--file"])
            .arg(&file)
            .args(["--format", "json"])
            .output()
            .unwrap(),
    );
    assert_eq!(arg, from_file);
    let table = b
        .cmd()
        .args(["score", "Just get over it. Man up."])
        .output()
        .unwrap();
    let t = stdout(&table);
    assert!(t.contains("safety") && t.contains("4.00"), "{t}");
    assert!(t.contains("not a clinical judgement"), "{t}");
    let none = b.cmd().args(["score"]).output().unwrap();
    assert_eq!(none.status.code(), Some(2));
    let missing = b
        .cmd()
        .args(["score", "--file", "nope.txt"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr(&missing).contains("nope.txt"));
}
