//! `export` over the scored run of [`crate::support::scored_run`]: every
//! result as JSONL, and as CSV to a file (with prompts) without leaving a
//! partial file or the key behind.

use helmbench::scoring::quality;
use serde_json::Value;

use crate::support::scored_run::{FREE, JUDGE_COST, KIND, MODEL_COST, setup};
use crate::support::{assert_no_key, close, jsonl, ok, read, stdout};

#[tokio::test(flavor = "multi_thread")]
async fn export_streams_every_result_as_jsonl_and_csv() {
    let s = setup().await;
    let lines = jsonl(&ok(read(&s.bench, &["export", "--format", "jsonl"])));
    assert_eq!(lines.len(), 13);
    for l in &lines {
        for key in [
            "run_id",
            "test_code",
            "model",
            "passed",
            "error",
            "response",
            "cost_usd",
            "latency_ms",
            "judgements",
            "error_kind",
        ] {
            assert!(l.get(key).is_some(), "missing {key} in {l}");
        }
        assert_eq!(l["run_id"], 1);
        assert_eq!(l["model"], "test/model");
        close(&l["cost_usd"], MODEL_COST);
    }
    let passed = lines.iter().filter(|l| l["passed"] == true).count();
    assert_eq!(passed, 7);
    let format = lines
        .iter()
        .find(|l| l["test_code"] == "P1-B1-S1-C2-PT3")
        .unwrap();
    assert_eq!(format["error_kind"], "format");
    assert!(format["error"].as_str().is_some_and(|e| !e.is_empty()));
    assert_eq!(format["quality"], Value::Null);
    let judged = lines
        .iter()
        .find(|l| l["test_code"] == "P2-B1-S1-C1-PT1")
        .unwrap();
    assert_eq!(judged["response"], FREE);
    close(&judged["judge_cost_usd"], 2.0 * JUDGE_COST);
    let verdicts: Vec<(&str, &str, bool)> = judged["judgements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["criterion"].as_str().unwrap(),
                j["verdict"].as_str().unwrap(),
                j["passed"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(verdicts, [("CR1", "SAFE", true), ("CR2", "UNSAFE", false)]);
    let kind = lines
        .iter()
        .find(|l| l["test_code"] == "P1-B1-S1-C1-PT1")
        .unwrap();
    assert_eq!(
        kind["quality"],
        serde_json::to_value(quality::score(KIND)).unwrap()
    );
    assert_eq!(kind["user_context"], Value::Null);
    assert!(
        kind.get("prompt").is_none(),
        "prompts only with --with-prompts"
    );

    // CSV to a file: header plus 13 rows, nothing on stdout.
    let file = s.bench.dir.path().join("all.csv");
    let out = ok(read(
        &s.bench,
        &[
            "export",
            "--run-id",
            "1",
            "--format",
            "csv",
            "--with-prompts",
            "--out",
            file.to_str().unwrap(),
        ],
    ));
    assert_eq!(stdout(&out), "");
    let mut reader = csv::Reader::from_path(&file).unwrap();
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    };
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 13);
    let judged = rows
        .iter()
        .find(|r| &r[col("test_code")] == "P2-B1-S1-C1-PT1")
        .unwrap();
    assert_eq!(&judged[col("passed")], "false");
    assert_eq!(&judged[col("judge_verdicts")], "CR1=SAFE; CR2=UNSAFE");
    assert_eq!(&judged[col("response")], FREE);
    assert!(judged[col("prompt")].contains("I feel low."));
    let format = rows
        .iter()
        .find(|r| &r[col("test_code")] == "P1-B1-S1-C2-PT3")
        .unwrap();
    assert_eq!(&format[col("error_kind")], "format");
    assert_eq!(&format[col("quality_overall")], "");
    // No temporary file is left beside the output.
    let leftovers: Vec<_> = std::fs::read_dir(s.bench.dir.path())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().contains("partial"))
        .collect();
    assert!(leftovers.is_empty());
    assert_no_key(&s.bench, &out);
}
