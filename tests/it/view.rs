//! `helmbench view` over HTTP (issue 32): the pages show what `report`
//! says, filters and downloads select what they claim, a label posted from
//! the page counts in `report`'s calibration at once, and the security
//! list holds: hostile replies render as inert text, foreign Hosts and
//! cross-origin or token-less POSTs are refused, a GET never writes, a
//! non-loopback bind needs its token, and the API key is on no page.

use reqwest::StatusCode;
use reqwest::header::{HOST, HeaderMap, ORIGIN, SET_COOKIE};
use serde_json::{Value, json};
use wiremock::{Request, Respond, ResponseTemplate};

use crate::support::mock::{completion, serve};
use crate::support::scored_run::setup;
use crate::support::viewer::Viewer;
use crate::support::{Bench, KEY, db_path, json as out_json, ok, read, run};

pub(crate) struct Page {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

pub(crate) async fn get(v: &Viewer, path: &str) -> Page {
    get_with(v, path, &[]).await
}

pub(crate) async fn get_with(v: &Viewer, path: &str, headers: &[(&str, &str)]) -> Page {
    let mut r = Viewer::client().get(format!("{}{path}", v.base));
    for (k, val) in headers {
        r = r.header(*k, *val);
    }
    let res = r.send().await.unwrap();
    Page {
        status: res.status(),
        headers: res.headers().clone(),
        body: res.text().await.unwrap(),
    }
}

/// A Run page once its report is computed (the first view of a run
/// computes it in the background and says so: the page reloads itself).
pub(crate) async fn run_page(v: &Viewer, run_id: i64) -> Page {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let p = get(v, &format!("/runs/{run_id}")).await;
        if p.status != StatusCode::OK || !p.body.contains("data-computing") {
            return p;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run page was still computing after 30 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A session: its cookie and the CSRF token its pages carry.
pub(crate) async fn session(v: &Viewer) -> (String, String) {
    let p = get(v, "/").await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    let cookie = p
        .headers
        .get_all(SET_COOKIE)
        .iter()
        .map(|c| c.to_str().unwrap())
        .find(|c| c.starts_with("hb_session="))
        .expect("a session cookie")
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let doc = scraper::Html::parse_document(&p.body);
    let sel = scraper::Selector::parse("input[name=csrf]").unwrap();
    let csrf = doc
        .select(&sel)
        .next()
        .expect("a form with a CSRF field")
        .value()
        .attr("value")
        .unwrap()
        .to_string();
    (cookie, csrf)
}

pub(crate) async fn post(
    v: &Viewer,
    path: &str,
    cookie: &str,
    origin: Option<&str>,
    form: &[(&str, String)],
) -> Page {
    let mut r = Viewer::client()
        .post(format!("{}{path}", v.base))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string(form).unwrap());
    if let Some(o) = origin {
        r = r.header(ORIGIN, o);
    }
    let res = r.send().await.unwrap();
    Page {
        status: res.status(),
        headers: res.headers().clone(),
        body: res.text().await.unwrap(),
    }
}

async fn label_rows(b: &Bench) -> i64 {
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db_path(b).display()))
        .await
        .unwrap();
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM human_label")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    n
}

/// The result ids a results page links to, in order.
pub(crate) fn result_links(body: &str) -> Vec<i64> {
    let doc = scraper::Html::parse_document(body);
    let sel = scraper::Selector::parse("a[data-result]").unwrap();
    doc.select(&sel)
        .map(|a| a.value().attr("data-result").unwrap().parse().unwrap())
        .collect()
}

fn report_json(b: &Bench) -> Value {
    out_json(&ok(read(
        b,
        &["report", "--run-id", "1", "--format", "json"],
    )))
}

/// The mcsqe test case of the scored run (judged: CR1 passes, CR2 fails).
pub(crate) async fn judged_case(v: &Viewer) -> i64 {
    let p = get(v, "/results?runs=1&scenario=P2-B1-S1").await;
    let ids = result_links(&p.body);
    assert_eq!(ids.len(), 1, "{}", p.body);
    ids[0]
}

#[tokio::test]
async fn pages_show_the_report_numbers_and_filters_select_what_they_say() {
    let s = setup().await;
    let b = &s.bench;
    let v = Viewer::start(b, &[]);
    assert!(v.url.starts_with("http://127.0.0.1:"), "{}", v.url);
    let report = report_json(b);

    let runs = get(&v, "/").await;
    assert_eq!(runs.status, StatusCode::OK);
    assert!(runs.body.contains("test/model") && runs.body.contains("/runs/1"));
    let api: Value = serde_json::from_str(&get(&v, "/api/runs").await.body).unwrap();
    assert_eq!(api[0]["run_id"], 1);
    assert_eq!(api[0]["status"], "completed");

    // The Run page's score is report's.
    let run = run_page(&v, 1).await;
    let doc = scraper::Html::parse_document(&run.body);
    let sel = scraper::Selector::parse("td[data-value=score]").unwrap();
    let shown = doc.select(&sel).next().unwrap().text().collect::<String>();
    let score = report["score"].as_f64().unwrap();
    assert_eq!(shown.trim(), format!("{:.1} %", score * 100.0));

    // Failed: exactly the results report counts as scored and not passed
    // (every scored result here has an answer: no judge or provider error).
    let failed = get(&v, "/results?runs=1&status=failed").await;
    let n_failed = result_links(&failed.body).len();
    let scored = report["scored"].as_u64().unwrap() as usize;
    let passed = report["passed"].as_u64().unwrap() as usize;
    assert_eq!(n_failed, scored - passed, "{}", failed.body);
    let passed_page = get(&v, "/results?runs=1&status=passed").await;
    assert_eq!(result_links(&passed_page.body).len(), passed);
    assert!(!failed.body.contains("class=\"badge pass\""));

    // Search covers replies and judge justifications.
    let by_reply = get(&v, "/results?runs=1&q=crisis+line").await;
    assert!(!result_links(&by_reply.body).is_empty());
    let by_just = get(&v, "/results?runs=1&q=never+mentions+professional").await;
    assert_eq!(result_links(&by_just.body).len(), 1, "{}", by_just.body);
    let none = get(&v, "/results?runs=1&q=zebra-unicorn").await;
    assert!(result_links(&none.body).is_empty());
    let bad = get(&v, "/results?runs=1&status=nonsense").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.body.contains("is not a filter"));

    // The download holds the filtered view: one line per failed result.
    let csv = get(&v, "/results.csv?runs=1&status=failed").await;
    assert_eq!(csv.status, StatusCode::OK);
    let mut reader = csv::Reader::from_reader(csv.body.as_bytes());
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), n_failed);
    assert!(rows.iter().all(|r| &r[7] == "fail"));
    let jsonl = get(&v, "/results.jsonl?runs=1&status=passed").await;
    let lines: Vec<Value> = jsonl
        .body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), passed);
    assert!(lines.iter().all(|l| l["status"] == "pass"));

    // A case page: the judge's justification, the why, and prev/next within the filter.
    let id = judged_case(&v).await;
    let case = get(&v, &format!("/case/{id}?runs=1&status=failed")).await;
    assert_eq!(case.status, StatusCode::OK);
    assert!(case.body.contains("It never mentions professional help."));
    assert!(case.body.contains("Why: "));
    let doc = scraper::Html::parse_document(&case.body);
    let rel = scraper::Selector::parse("a[rel=prev], a[rel=next]").unwrap();
    for a in doc.select(&rel) {
        let href = a.value().attr("href").unwrap();
        let other: i64 = href
            .trim_start_matches("/case/")
            .split('?')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            result_links(&failed.body).contains(&other),
            "{href} is not a failed case"
        );
        assert!(href.contains("status=failed"));
    }

    // Compare needs two runs: it says so with one.
    let cmp = get(&v, "/compare").await;
    assert_eq!(cmp.status, StatusCode::OK);
    assert!(cmp.body.contains("at least two runs"));

    // The API key is on no page.
    for path in [
        "/",
        "/api/runs",
        "/runs/1",
        "/results?runs=1",
        &format!("/case/{id}"),
        "/compare",
        "/results.csv?runs=1",
        "/results.jsonl?runs=1",
    ] {
        let p = get(&v, path).await;
        assert!(!p.body.contains(KEY), "{path} shows the API key");
    }
}

#[tokio::test]
async fn a_label_posted_from_the_page_counts_in_report_calibration_at_once() {
    let s = setup().await;
    let b = &s.bench;
    let v = Viewer::start(b, &[]);
    assert!(report_json(b).get("calibration").is_none());
    let (cookie, csrf) = session(&v).await;
    let id = judged_case(&v).await;
    let here = format!("/case/{id}?runs=1");
    let form = |criterion: &str, choice: &str| {
        vec![
            ("csrf", csrf.clone()),
            ("result_id", id.to_string()),
            ("criterion", criterion.to_string()),
            ("choice", choice.to_string()),
            ("reviewer", "dr-lee".to_string()),
            ("note", "agrees with the rubric".to_string()),
            ("here", here.clone()),
        ]
    };
    let same = Some(v.base.as_str());
    let p = post(&v, "/label", &cookie, same, &form("CR1", "pass")).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let to = p.headers.get("location").unwrap().to_str().unwrap();
    assert!(to.starts_with(&here), "{to}");
    // The reviewer is remembered.
    assert!(
        p.headers
            .get_all(SET_COOKIE)
            .iter()
            .any(|c| c.to_str().unwrap().starts_with("hb_reviewer="))
    );
    let p = post(&v, "/label", &cookie, same, &form("CR2", "fail")).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(label_rows(b).await, 2);

    // report's calibration counts both at once: the judge agreed on both.
    let c = &report_json(b)["calibration"];
    assert_eq!(c["labels"], 2, "{c}");
    assert_eq!(c["raters"], json!(["dr-lee"]));
    assert_eq!(c["overall"]["raw_agreement"], 1.0);
    // And the Run page shows the agreement and the case page the label.
    let run = run_page(&v, 1).await;
    assert!(
        run.body.contains("data-table=\"calibration\""),
        "{}",
        run.body
    );
    let case = get_with(&v, &here, &[("cookie", &cookie)]).await;
    assert!(case.body.contains("agrees with the rubric"));
    assert!(
        case.body
            .contains("Labelled in this sitting: <strong>2</strong>"),
        "{}",
        case.body
    );

    // A choice the rubric does not have is refused, nothing stored.
    let p = post(&v, "/label", &cookie, same, &form("CR1", "opt:MAYBE")).await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    let p = post(&v, "/label", &cookie, same, &form("CR9", "pass")).await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    assert_eq!(label_rows(b).await, 2);
}

#[tokio::test]
async fn writes_need_post_same_origin_and_the_session_csrf_token() {
    let s = setup().await;
    let b = &s.bench;
    let v = Viewer::start(b, &[]);
    let (cookie, csrf) = session(&v).await;
    let id = judged_case(&v).await;
    let form = |token: Option<&str>| {
        let mut f = vec![
            ("result_id", id.to_string()),
            ("criterion", "CR1".to_string()),
            ("choice", "pass".to_string()),
            ("reviewer", "mallory".to_string()),
        ];
        if let Some(t) = token {
            f.push(("csrf", t.to_string()));
        }
        f
    };
    // Cross-origin, with a valid token and cookie: refused.
    let p = post(
        &v,
        "/label",
        &cookie,
        Some("http://evil.example"),
        &form(Some(&csrf)),
    )
    .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    // Neither Origin nor Referer: refused.
    let p = post(&v, "/label", &cookie, None, &form(Some(&csrf))).await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    // Same origin, no CSRF token, or another session's: refused.
    let same = Some(v.base.as_str());
    let p = post(&v, "/label", &cookie, same, &form(None)).await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    assert!(p.body.contains("CSRF"));
    let (other_cookie, _) = session(&v).await;
    let p = post(&v, "/label", &other_cookie, same, &form(Some(&csrf))).await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    // A GET to the label endpoint, every field given: nothing written.
    let mut q = form(Some(&csrf));
    q.push(("x", String::new()));
    let g = get_with(
        &v,
        &format!("/label?{}", serde_urlencoded::to_string(&q).unwrap()),
        &[("cookie", &cookie)],
    )
    .await;
    assert_eq!(g.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(label_rows(b).await, 0);
    // The same POST from the page's origin with its token is stored (the
    // refusals above were not a broken endpoint).
    let p = post(&v, "/label", &cookie, same, &form(Some(&csrf))).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(label_rows(b).await, 1);
}

#[tokio::test]
async fn foreign_hosts_are_refused_and_every_page_carries_the_security_headers() {
    let s = setup().await;
    let v = Viewer::start(&s.bench, &[]);
    let evil = get_with(&v, "/", &[("host", &format!("evil.example:{}", v.port))]).await;
    assert_eq!(evil.status, StatusCode::BAD_REQUEST);
    let no_port = get_with(&v, "/", &[("host", "127.0.0.1")]).await;
    assert_eq!(no_port.status, StatusCode::BAD_REQUEST);
    for host in [
        format!("localhost:{}", v.port),
        format!("127.0.0.1:{}", v.port),
    ] {
        let p = get_with(&v, "/", &[(HOST.as_str(), &host)]).await;
        assert_eq!(p.status, StatusCode::OK, "{host}");
    }
    // The URL printed is one the Host check answers to.
    let printed = v
        .url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        get_with(&v, "/", &[(HOST.as_str(), &printed)]).await.status,
        StatusCode::OK,
        "{printed}"
    );
    // Another loopback address would print a URL the server refuses: --host
    // takes only the loopback names the Host check answers to.
    for other in ["127.0.0.2", "127.1.2.3"] {
        let out = s
            .bench
            .helmbench()
            .database(db_path(&s.bench))
            .std()
            .args(["view", "--port", "0", "--host", other])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{other}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(other) && err.contains("127.0.0.1, ::1 and localhost"),
            "{err}"
        );
    }
    for path in ["/", "/runs/1", "/assets/view.js", "/nope"] {
        let p = get(&v, path).await;
        let csp = p.headers["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"),
            "{csp}"
        );
        let script = csp
            .split(';')
            .find(|d| d.trim().starts_with("script-src"))
            .unwrap();
        assert!(
            !script.contains("unsafe-inline") && !script.contains("unsafe-eval"),
            "{csp}"
        );
        assert_eq!(p.headers["x-frame-options"], "DENY");
        assert_eq!(p.headers["x-content-type-options"], "nosniff");
    }
}

#[tokio::test]
async fn a_non_loopback_bind_needs_its_token_on_every_request() {
    let s = setup().await;
    let v = Viewer::start(&s.bench, &["--host", "0.0.0.0"]);
    let token = v.token.clone().expect("a random token in the printed URL");
    assert!(token.len() >= 32, "{token}");
    let bare = get(&v, "/").await;
    assert_eq!(bare.status, StatusCode::UNAUTHORIZED);
    assert!(!bare.body.contains(&token));
    assert_eq!(get(&v, "/api/runs").await.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        get(&v, "/?token=wrong").await.status,
        StatusCode::UNAUTHORIZED
    );
    let first = get(&v, &format!("/?token={token}")).await;
    assert_eq!(first.status, StatusCode::OK);
    let kept = first
        .headers
        .get_all(SET_COOKIE)
        .iter()
        .map(|c| c.to_str().unwrap().split(';').next().unwrap().to_string())
        .find(|c| c.starts_with("hb_token="))
        .expect("the token kept in a cookie");
    assert_eq!(
        get_with(&v, "/runs/1", &[("cookie", &kept)]).await.status,
        StatusCode::OK
    );
    let bearer = format!("Bearer {token}");
    assert_eq!(
        get_with(&v, "/api/runs", &[("authorization", &bearer)])
            .await
            .status,
        StatusCode::OK
    );
    drop(v);

    // A token given is used as is; a short one is refused at start.
    let given = "a-long-enough-token-0123";
    let v = Viewer::start(&s.bench, &["--host", "0.0.0.0", "--token", given]);
    assert_eq!(v.token.as_deref(), Some(given));
    assert_eq!(get(&v, "/").await.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        get(&v, &format!("/?token={given}")).await.status,
        StatusCode::OK
    );
    let out = s
        .bench
        .helmbench()
        .database(db_path(&s.bench))
        .std()
        .args([
            "view", "--port", "0", "--host", "0.0.0.0", "--token", "short",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--token must be at least 16"));
}

/// What a hostile model and judge say.
const HOSTILE_REPLY: &str = "</textarea><script>alert('reply')</script>\u{202E}gnp.exe <a href=\"javascript:alert(1)\">click</a> <img src=x onerror=alert(2)>";
const HOSTILE_JUST: &str = "<script>alert('judge')</script> </pre></details><iframe src=\"https://evil.example\"></iframe>";

struct Hostile;

impl Respond for Hostile {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        let content = if body["model"] == "judge/model" {
            json!({"judgment": "UNSAFE", "justification": HOSTILE_JUST}).to_string()
        } else {
            HOSTILE_REPLY.to_string()
        };
        ResponseTemplate::new(200).set_body_json(completion(&content, 0.001))
    }
}

#[tokio::test]
async fn hostile_replies_and_justifications_render_as_inert_text() {
    let b = Bench::new();
    b.file(
        "models.yml",
        "marking_model: judge/model\nmodels:\n  - id: test/model\n",
    )
    .judged_scenario();
    let server = serve(Hostile).await;
    let out = run(&b, &server, &["run-batch", "--all-scenarios"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = Viewer::start(&b, &[]);
    let list = get(&v, "/results?runs=1").await;
    let id = result_links(&list.body)[0];
    let page = get(&v, &format!("/case/{id}")).await;
    assert_eq!(page.status, StatusCode::OK);
    let html = &page.body;
    // Escaped, never markup.
    assert!(
        html.contains("&lt;/textarea&gt;&lt;script&gt;alert('reply')&lt;/script&gt;"),
        "{html}"
    );
    assert!(html.contains("&lt;script&gt;alert('judge')&lt;/script&gt;"));
    for raw in [
        "<script>alert",
        "</textarea>",
        "<iframe",
        "<img src=x",
        "href=\"javascript:",
    ] {
        assert!(!html.contains(raw), "{raw} reached the page as markup");
    }
    // No element came from the texts; the page's only script is the embedded one.
    let doc = scraper::Html::parse_document(html);
    for tag in ["img", "iframe", "textarea"] {
        let sel = scraper::Selector::parse(tag).unwrap();
        assert_eq!(doc.select(&sel).count(), 0, "a <{tag}> element on the page");
    }
    let scripts = scraper::Selector::parse("script").unwrap();
    for s in doc.select(&scripts) {
        assert_eq!(s.value().attr("src"), Some("/assets/view.js"));
        assert_eq!(s.text().collect::<String>(), "");
    }
    let links = scraper::Selector::parse("a[href]").unwrap();
    for a in doc.select(&links) {
        let href = a.value().attr("href").unwrap();
        assert!(
            href.starts_with('/') || href.starts_with('#'),
            "a link off the page: {href}"
        );
    }
    // The right-to-left override stays inside a bidi isolate.
    let isolated = scraper::Selector::parse("bdi").unwrap();
    let in_bdi: String = doc.select(&isolated).flat_map(|e| e.text()).collect();
    assert!(in_bdi.contains('\u{202E}'));
    let everywhere: String = doc.root_element().text().collect();
    assert_eq!(
        everywhere.matches('\u{202E}').count(),
        in_bdi.matches('\u{202E}').count(),
        "a bidi override outside <bdi>"
    );
    // The results matrix and the download carry it as text too.
    assert!(!list.body.contains("<script>alert"));
    let jsonl = get(&v, "/results.jsonl?runs=1").await;
    let row: Value = serde_json::from_str(jsonl.body.lines().next().unwrap()).unwrap();
    assert_eq!(row["response"], HOSTILE_REPLY);
}
