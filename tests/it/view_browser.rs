//! `helmbench view` in a real browser (headless Chromium over WebDriver):
//! open the runs page, follow a run, its failed cases, open the judged one,
//! label both its criteria with the keyboard, and find the labels in
//! `report --format json`'s calibration. Needs Debian's `chromium` and
//! `chromium-driver` (`.ci/run` installs them): under `CI=true` their
//! absence fails the test; elsewhere it is skipped with a message.
//!
//! With `HELMBENCH_UPDATE_SCREENSHOT=1` it also writes docs/src/images/view.png, the
//! README's screenshot.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

use crate::support::scored_run::setup;
use crate::support::viewer::Viewer;
use crate::support::{json as out_json, ok, read, repo_root};

fn find_tool(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|n| {
        std::env::split_paths(&path)
            .map(|d| d.join(n))
            .find(|p| p.is_file())
    })
}

/// chromedriver on a free loopback port, killed on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_driver(driver: &Path) -> Driver {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if reqwest::get(format!("{url}/status")).await.is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "chromedriver did not answer on {url}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Driver { child, url }
}

async fn press(c: &Client, key: char) {
    let keys = KeyActions::new("keys".to_string())
        .then(KeyAction::Down { value: key })
        .then(KeyAction::Up { value: key });
    c.perform_actions(keys).await.unwrap();
}

/// Waits until the page's URL satisfies `ok` (a form post and redirect).
async fn wait_url(c: &Client, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let url = c.current_url().await.unwrap().to_string();
        if ok(&url) {
            return url;
        }
        assert!(Instant::now() < deadline, "never reached {what}; at {url}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Chromium and chromedriver, or None (skipped, with a message) where
/// they are missing outside CI; under CI=true their absence fails.
fn browser_tools() -> Option<(PathBuf, PathBuf)> {
    let (Some(chromium), Some(driver)) = (
        find_tool(&["chromium", "chromium-browser", "google-chrome"]),
        find_tool(&["chromedriver"]),
    ) else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!(
                "chromium and chromedriver are needed under CI (apt-get install chromium chromium-driver)"
            );
        }
        eprintln!(
            "skipped: chromium or chromedriver not found (apt-get install chromium chromium-driver)"
        );
        return None;
    };
    Some((chromium, driver))
}

/// A headless Chromium session (the driver is stopped when dropped).
async fn session(chromium: &Path, driver: &Path) -> (Driver, Client) {
    let d = start_driver(driver).await;
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,1000", "--no-first-run"]
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let c = ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&d.url)
        .await
        .expect("a WebDriver session");
    (d, c)
}

/// Leaves the reviewer field, then labels the first criterion pass (p),
/// waits until it landed, and the second fail (f).
async fn pass_then_fail(c: &Client) {
    c.find(Locator::Css("h1"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    press(c, 'p').await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !c
        .source()
        .await
        .unwrap()
        .contains("Labelled in this sitting: <strong>1</strong>")
    {
        assert!(Instant::now() < deadline, "the first label did not land");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    press(c, 'f').await;
}

#[tokio::test]
async fn find_a_failed_case_in_two_clicks_and_label_it_with_the_keyboard() {
    let Some((chromium, driver)) = browser_tools() else {
        return;
    };
    let s = setup().await;
    let b = &s.bench;
    // The judged scenario moves into the nested layout, whose README names
    // its behaviour with the code in the heading, as authors write it.
    let scenarios = b.root().join("scenarios");
    std::fs::create_dir_all(scenarios.join("P2/B1")).unwrap();
    std::fs::rename(scenarios.join("P2-B1-S1"), scenarios.join("P2/B1/S1")).unwrap();
    std::fs::write(
        scenarios.join("P2/B1/README.md"),
        "# P2-B1: Supports a low user\n",
    )
    .unwrap();
    let v = Viewer::start(b, &[]);
    let (_d, c) = session(&chromium, &driver).await;

    // The runs page, then the run, then its failed cases: two clicks from the run.
    c.goto(&v.url).await.unwrap();
    assert!(c.source().await.unwrap().contains("Content note"));
    c.find(Locator::Css("a[href='/runs/1']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_url(&c, "the run page", |u| u.ends_with("/runs/1")).await;
    c.find(Locator::LinkText("Failed cases"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_url(&c, "the failed cases", |u| u.contains("status=failed")).await;
    let rows = c
        .find_all(Locator::Css("table.matrix tbody tr"))
        .await
        .unwrap();
    assert!(!rows.is_empty());
    // Each cell shows the start of its reply (a structured reply's
    // `response` field, not its JSON), expandable, beside the verdict.
    let previews = c
        .find_all(Locator::Css(
            "table.matrix td.cell details[data-reply] summary",
        ))
        .await
        .unwrap();
    let mut starts = Vec::new();
    for p in &previews {
        starts.push(p.text().await.unwrap());
    }
    assert!(
        starts.iter().any(|s| s.starts_with("Exams are hard.")),
        "{starts:?}"
    );
    assert!(
        starts
            .iter()
            .any(|s| s.starts_with("That sounds really hard.")),
        "{starts:?}"
    );
    assert!(
        !starts.iter().any(|s| s.contains("\"category\"")),
        "{starts:?}"
    );
    let mut opened = false;
    for row in rows {
        if row.text().await.unwrap().contains("P2-B1-S1") {
            row.find(Locator::Css("a[data-result]"))
                .await
                .unwrap()
                .click()
                .await
                .unwrap();
            opened = true;
            break;
        }
    }
    assert!(opened, "the judged failed case is listed");
    let case_url = wait_url(&c, "the case page", |u| u.contains("/case/")).await;
    let page = c.source().await.unwrap();
    assert!(page.contains("It never mentions professional help."));
    // Reviewer first: the user's message and the reply above the composed
    // prompt (collapsed), side by side at this width; the behaviour's name once.
    let tops: Vec<f64> = c
        .execute(
            "return ['[data-part=message]', '[data-part=reply]', '[data-part=prompt]']\
               .map(s => document.querySelector(s).getBoundingClientRect().top);",
            vec![],
        )
        .await
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert!(
        tops[1] < tops[2],
        "the reply is above the composed prompt: {tops:?}"
    );
    assert_eq!(tops[0], tops[1], "message and reply side by side: {tops:?}");
    let message = c.find(Locator::Css("[data-part=message]")).await.unwrap();
    assert!(message.text().await.unwrap().contains("I feel low."));
    let reply = c.find(Locator::Css("[data-part=reply]")).await.unwrap();
    assert!(
        reply
            .text()
            .await
            .unwrap()
            .contains(crate::support::scored_run::FREE)
    );
    let prompt_open = c
        .execute(
            "return document.querySelector('[data-part=prompt] details').open;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        prompt_open,
        json!(false),
        "the composed prompt starts collapsed"
    );
    let text = c
        .find(Locator::Css("main"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        text.matches("P2-B1 Supports a low user").count(),
        1,
        "{text}"
    );
    assert!(
        !text.contains("P2-B1: Supports") && !text.contains("P2-B1 P2-B1"),
        "{text}"
    );

    // Name the reviewer, leave the field, then p (CR1) and f (CR2).
    let name = c
        .find(Locator::Css("form.label[data-focus] input[name=reviewer]"))
        .await
        .unwrap();
    name.send_keys("browser-reviewer").await.unwrap();
    pass_then_fail(&c).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = out_json(&ok(read(
            b,
            &["report", "--run-id", "1", "--format", "json"],
        )));
        if r["calibration"]["labels"] == 2 {
            assert_eq!(r["calibration"]["raters"], json!(["browser-reviewer"]));
            assert_eq!(r["calibration"]["overall"]["raw_agreement"], 1.0);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "report never counted both labels: {}",
            r["calibration"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The labelled case, as a reviewer sees it (the README's screenshot).
    c.goto(&case_url).await.unwrap();
    assert!(c.source().await.unwrap().contains("labelled by you"));
    let png = c.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    if std::env::var("HELMBENCH_UPDATE_SCREENSHOT").is_ok_and(|v| v == "1") {
        let out = repo_root().join("docs/src/images/view.png");
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        std::fs::write(&out, &png).unwrap();
    }
    c.close().await.unwrap();
}

/// A conversation's case page (issue 42): every turn as a chat, the
/// prefilled and unjudged replies marked, the first failed reply
/// highlighted with its judge's justification; labelling works per judged
/// turn and the labels reach the calibration.
#[tokio::test]
async fn a_conversation_reads_as_a_chat_and_is_labelled_per_turn() {
    let Some((chromium, driver)) = browser_tools() else {
        return;
    };
    let (b, server) = crate::conversation_judging::judged_conversation().await;
    let out = crate::support::run(&b, &server, &["run-batch", "--all-scenarios"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        crate::support::stderr(&out)
    );
    let v = Viewer::start(&b, &[]);
    let (_d, c) = session(&chromium, &driver).await;
    c.goto(&v.url).await.unwrap();
    c.goto(&format!("{}/case/1", v.base)).await.unwrap();
    let turns = c
        .find_all(Locator::Css("[data-part=transcript] li.user"))
        .await
        .unwrap();
    let mut names = Vec::new();
    for t in &turns {
        names.push(t.attr("data-turn").await.unwrap().unwrap());
    }
    assert_eq!(names, ["message 1", "T1", "T2"]);
    let failed = c
        .find(Locator::Css("li.assistant.first-failed"))
        .await
        .unwrap();
    assert_eq!(failed.attr("data-reply").await.unwrap().unwrap(), "T1");
    let text = failed.text().await.unwrap();
    assert!(text.contains("I am a therapist."), "{text}");
    assert!(text.contains("It claims to be a therapist."), "{text}");
    let last = c
        .find(Locator::Css("li.assistant[data-reply=T2]"))
        .await
        .unwrap();
    let last = last.text().await.unwrap();
    assert!(last.to_lowercase().contains("not judged"), "{last}");

    // Label both judged replies: message 1 passes (p), T1 fails (f).
    let name = c
        .find(Locator::Css("form.label[data-focus] input[name=reviewer]"))
        .await
        .unwrap();
    name.send_keys("browser-reviewer").await.unwrap();
    pass_then_fail(&c).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = out_json(&ok(read(
            &b,
            &["report", "--run-id", "1", "--format", "json"],
        )));
        let cal = &r["calibration"];
        if cal["labels"] == 2 {
            assert_eq!(cal["overall"]["raw_agreement"], 1.0, "{cal}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "report never counted both labels: {cal}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    c.close().await.unwrap();
}
