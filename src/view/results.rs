//! The Results matrix: test cases × models (one column per run), each cell
//! pass, fail, error or blocked, with filters and a text search that live
//! in the URL (a filtered view is a link), a page at a time by keyset, and
//! the filtered view as CSV or JSONL, streamed.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Extension, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{Nav, inline, page, reply_shown, status_badge};
use super::search::SearchState;
use super::security::Session;
use super::state::{App, PageError};
use crate::domain::RunRecord;
use crate::domain::{Cell, Direction, DownloadRow, ResultFilter, RowKey, StatusFilter};
use crate::report::{Target, select_runs};

/// Rows per page.
pub const PAGE_ROWS: i64 = 50;

/// Matching results counted at most when the count has to read every
/// result's text (a search without the index): past it the page says
/// "more than". Every other count reads index entries only, and is exact.
const SCAN_COUNT_CAP: i64 = 1_000;

/// The query string of every results view (the matrix, a case's neighbours,
/// the downloads): filters, search and the page's keyset position.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct FilterQuery {
    pub runs: Option<String>,
    pub model: Option<String>,
    pub status: Option<String>,
    pub pillar: Option<String>,
    pub behaviour: Option<String>,
    pub scenario: Option<String>,
    pub min_sev: Option<String>,
    pub max_sev: Option<String>,
    pub variant: Option<String>,
    pub failed_at: Option<String>,
    pub pressure: Option<String>,
    pub q: Option<String>,
    pub after: Option<String>,
    pub after_rep: Option<i64>,
    pub before: Option<String>,
    pub before_rep: Option<i64>,
}

fn given(v: &Option<String>) -> Option<String> {
    v.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

impl FilterQuery {
    /// The filter's part of the query string (no page position), to carry
    /// into links: `runs=3&status=failed`.
    pub fn link(&self) -> String {
        let mut pairs: Vec<(&str, String)> = Vec::new();
        for (k, v) in [
            ("runs", &self.runs),
            ("model", &self.model),
            ("status", &self.status),
            ("pillar", &self.pillar),
            ("behaviour", &self.behaviour),
            ("scenario", &self.scenario),
            ("min_sev", &self.min_sev),
            ("max_sev", &self.max_sev),
            ("variant", &self.variant),
            ("failed_at", &self.failed_at),
            ("pressure", &self.pressure),
            ("q", &self.q),
        ] {
            if let Some(v) = given(v) {
                pairs.push((k, v));
            }
        }
        serde_urlencoded::to_string(pairs).unwrap_or_default()
    }

    fn severity(v: &Option<String>, name: &str) -> Result<Option<f64>, PageError> {
        given(v)
            .map(|s| {
                s.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| PageError::bad_request(format!("{name}={s:?} is not a number")))
            })
            .transpose()
    }

    /// The store's filter over `runs` (searching through the app's index
    /// when it has one).
    pub fn filter(&self, app: &App, runs: &[RunRecord]) -> Result<ResultFilter, PageError> {
        let status = match given(&self.status) {
            None => StatusFilter::All,
            Some(s) => StatusFilter::parse(&s).ok_or_else(|| {
                PageError::bad_request(format!(
                    "status={s:?} is not a filter (expected one of {})",
                    StatusFilter::ALL.map(|f| f.as_str()).join(", ")
                ))
            })?,
        };
        Ok(ResultFilter {
            runs: runs.iter().map(|r| r.run_id).collect(),
            status,
            pillar: given(&self.pillar),
            behaviour: given(&self.behaviour),
            scenario: given(&self.scenario),
            min_severity: FilterQuery::severity(&self.min_sev, "min_sev")?,
            max_severity: FilterQuery::severity(&self.max_sev, "max_sev")?,
            variant: given(&self.variant),
            failed_at: given(&self.failed_at),
            pressure: given(&self.pressure),
            search: given(&self.q),
            search_index: app.search.is_some(),
        })
    }

    /// The runs the view shows, one column each: those named, else the
    /// newest run of the model named, else the latest completed batch run
    /// of every model (or the newest run when none completed).
    pub async fn runs(&self, app: &App) -> Result<Vec<RunRecord>, PageError> {
        if let Some(list) = given(&self.runs) {
            return app.runs_named(&list).await;
        }
        let all = app.store.runs().await?;
        if let Some(model) = given(&self.model) {
            return Ok(all
                .into_iter()
                .filter(|r| r.model == model)
                .take(1)
                .collect());
        }
        match select_runs(&app.store, &Target::LatestPerModel).await {
            Ok(runs) => Ok(runs),
            Err(_) => Ok(all.into_iter().take(1).collect()),
        }
    }
}

fn text_input(name: &str, label: &str, value: &Option<String>, hint: &str) -> Markup {
    html! {
        label { (label) " "
            input type="text" name=(name) value=[value.as_deref()] placeholder=(hint) size="10";
        }
    }
}

/// A select of `options` (what the data holds), with `blank` for no
/// filter; a value in the URL that the data no longer holds stays offered,
/// so the form shows what is filtered.
fn choice(
    name: &str,
    label: &str,
    value: &Option<String>,
    blank: &str,
    options: &[String],
) -> Markup {
    let value = given(value);
    let mut options = options.to_vec();
    if let Some(v) = value.as_ref().filter(|v| !options.contains(v)) {
        options.push(v.clone());
    }
    html! {
        label { (label) " "
            select name=(name) {
                option value="" selected[value.is_none()] { (blank) }
                @for o in &options {
                    option value=(o) selected[value.as_deref() == Some(o.as_str())] { (o) }
                }
            }
        }
    }
}

/// The conversation filters (issue 42), offered when the runs hold
/// conversations: where a conversation first failed and a turn's pressure
/// label (with a failed turn chosen, the label of that turn).
fn conversation_filters(q: &FilterQuery, turns: &(Vec<String>, Vec<String>)) -> Markup {
    let (codes, pressures) = turns;
    if codes.is_empty() {
        return html! {};
    }
    let mut at = vec!["any".to_string()];
    at.extend(codes.iter().cloned());
    html! {
        (choice("failed_at", "First failed at", &q.failed_at, "—", &at))
        @if !pressures.is_empty() || given(&q.pressure).is_some() {
            (choice("pressure", "Pressure", &q.pressure, "—", pressures))
        }
    }
}

fn filter_form(q: &FilterQuery, runs: &[RunRecord], turns: &(Vec<String>, Vec<String>)) -> Markup {
    let status = given(&q.status).unwrap_or_else(|| "all".into());
    let ids: Vec<String> = runs.iter().map(|r| r.run_id.to_string()).collect();
    html! {
        form.filters method="get" action="/results" {
            label { "Runs " input type="text" name="runs" value=(ids.join(",")) size="8" title="run ids, comma-separated"; }
            label { "Show "
                select name="status" {
                    @for f in StatusFilter::ALL {
                        option value=(f.as_str()) selected[f.as_str() == status] { (f.as_str()) }
                    }
                }
            }
            (text_input("pillar", "Pillar", &q.pillar, "P1"))
            (text_input("behaviour", "Behaviour", &q.behaviour, "P1-B1"))
            (text_input("scenario", "Scenario", &q.scenario, "P1-B1-S1"))
            (text_input("min_sev", "Severity ≥", &q.min_sev, "-10"))
            (text_input("max_sev", "≤", &q.max_sev, "10"))
            (text_input("variant", "Variant", &q.variant, "typos, or none"))
            (conversation_filters(q, turns))
            label.search { "Search "
                input type="search" name="q" value=[q.q.as_deref()] placeholder="prompts, replies, justifications" size="28";
            }
            button type="submit" { "Filter" }
        }
    }
}

/// How a search was answered, for the page: `index` (the search index
/// holds every result but those written in the last moments, which are
/// read), `building` (the index is being built: the results it does not
/// hold yet are read one by one), `scan` (no index, or a text without a
/// word: every result is read); and a sentence saying so.
fn search_note(app: &App, filter: &ResultFilter) -> Option<(&'static str, String)> {
    let q = filter.search.as_deref()?;
    if !q.chars().any(char::is_alphanumeric) {
        return Some((
            "scan",
            "Searched by reading every result: the search index finds words, and this text has none.".into(),
        ));
    }
    const WORDS: &str =
        "its words in this order, in any case, the last one also as the start of a word";
    let building = |p: u8| {
        format!(
            "The search index is being built ({p} % done): results not indexed yet are read one by one \
             (the text anywhere), which is slow on a large database; the rest through the index ({WORDS})."
        )
    };
    Some(match app.search.as_ref().map(|s| s.state()) {
        Some(SearchState::Ready) => (
            "index",
            format!("Searched through the search index: {WORDS}."),
        ),
        Some(SearchState::Starting) => ("building", building(0)),
        Some(SearchState::Building(p)) => ("building", building(p)),
        None => (
            "scan",
            "Searched by reading every result (this database has no search index).".into(),
        ),
    })
}

/// `GET /results`.
pub async fn results_page(
    State(app): State<Arc<App>>,
    Extension(session): Extension<Session>,
    Query(q): Query<FilterQuery>,
) -> Result<Markup, PageError> {
    let runs = q.runs(&app).await?;
    let filter = q.filter(&app, &runs)?;
    let from = match (&q.after, &q.before) {
        (Some(code), _) => Some((
            Direction::After,
            RowKey {
                test_code: code.clone(),
                repeat_index: q.after_rep.unwrap_or(0),
            },
        )),
        (None, Some(code)) => Some((
            Direction::Before,
            RowKey {
                test_code: code.clone(),
                repeat_index: q.before_rep.unwrap_or(0),
            },
        )),
        _ => None,
    };
    // One row more than a page tells whether there is a next page.
    let mut keys = app
        .store
        .view_rows(&filter, from.as_ref().map(|(d, k)| (*d, k)), PAGE_ROWS + 1)
        .await?;
    let more = keys.len() as i64 > PAGE_ROWS;
    if more {
        match from {
            Some((Direction::Before, _)) => {
                keys.remove(0);
            }
            _ => {
                keys.pop();
            }
        }
    }
    let (has_next, has_prev) = match from {
        None => (more, false),
        Some((Direction::After, _)) => (more, true),
        Some((Direction::Before, _)) => (true, more),
    };
    let cells = app.store.view_cells(&filter.runs, &keys).await?;
    let searched = search_note(&app, &filter);
    let cap = searched
        .as_ref()
        .filter(|(how, _)| *how != "index")
        .map(|_| SCAN_COUNT_CAP);
    let counts = app.store.view_counts(&filter, cap).await?;
    let turns = app.store.turn_filter_options(&filter.runs).await?;
    let link = q.link();
    let cell_of = |run: i64, k: &RowKey| -> Option<&Cell> {
        cells.iter().find(|c| {
            c.run_id == run && c.test_code == k.test_code && c.repeat_index == k.repeat_index
        })
    };
    let page_link = |dir: &str, k: &RowKey| {
        let mut pairs = vec![(dir.to_string(), k.test_code.clone())];
        pairs.push((format!("{dir}_rep"), k.repeat_index.to_string()));
        let extra = serde_urlencoded::to_string(pairs).unwrap_or_default();
        if link.is_empty() {
            format!("/results?{extra}")
        } else {
            format!("/results?{link}&{extra}")
        }
    };
    let body = html! {
        h1 { "Results" }
        (filter_form(&q, &runs, &turns))
        p.note data-counts {
            @for (i, r) in runs.iter().enumerate() {
                @let n = counts.iter().find(|(id, _)| *id == r.run_id).map_or(0, |(_, n)| *n);
                @if i > 0 { "; " }
                span data-count=(r.run_id) {
                    @if cap.is_some_and(|c| n > c) { "more than " (cap.unwrap_or_default()) } @else { (n) }
                }
                " test case(s) match in "
                a href={ "/runs/" (r.run_id) } { "run " (r.run_id) } " (" (inline(&r.model)) ")"
            }
            ". Download this view: "
            a href={ "/results.csv?" (link) } download { "CSV" } " · "
            a href={ "/results.jsonl?" (link) } download { "JSONL" }
        }
        @if let Some((how, note)) = &searched {
            p.note.search data-search=(how) { (note) }
        }
        @if keys.is_empty() {
            p.empty { "No test case matches this filter." }
        } @else {
            table.matrix data-table="matrix" {
                thead { tr {
                    th { "Test case" } th { "Base severity" }
                    @for r in &runs { th { (inline(&r.model)) br; small { "run " (r.run_id) } } }
                } }
                tbody {
                    @for k in &keys {
                        @let sev = runs.iter().find_map(|r| cell_of(r.run_id, k)).map(|c| c.base_severity);
                        tr {
                            td.code { (inline(&k.test_code)) @if k.repeat_index > 0 { " #" (k.repeat_index) } }
                            td.num { @if let Some(s) = sev { (s) } }
                            @for r in &runs {
                                @match cell_of(r.run_id, k) {
                                    Some(c) => td class={ "cell " (c.status.as_str()) } {
                                        a href={ "/case/" (c.result_id) "?" (link) } data-result=(c.result_id) {
                                            (status_badge(c.status))
                                            @if c.labels > 0 { " " span.labelled title="has human labels" { "✓ labelled" } }
                                        }
                                        @let (start, whole) = reply_preview(c);
                                        @if !start.is_empty() {
                                            details.reply-cell data-reply {
                                                summary dir="auto" { bdi { (start) } }
                                                div.reply-text dir="auto" { bdi { (whole) } }
                                            }
                                        }
                                    },
                                    None => td.cell.none { "—" },
                                }
                            }
                        }
                    }
                }
            }
            nav.pager {
                a href={ "/results?" (link) } { "First" }
                @if has_prev { " " a rel="prev" href=(page_link("before", &keys[0])) { "← Previous" } }
                @if has_next { " " a rel="next" href=(page_link("after", &keys[keys.len() - 1])) { "Next →" } }
            }
        }
    };
    let back = if link.is_empty() {
        "/results".to_string()
    } else {
        format!("/results?{link}")
    };
    Ok(page("Results", &session, Nav::Results, &back, body))
}

/// Characters of a reply a matrix cell shows, and at most how many it
/// shows expanded (the case page has the whole).
const CELL_START: usize = 90;
const CELL_WHOLE: usize = 1500;

/// The start of a cell's reply (its `response` field when structured) and
/// the text shown when the cell is expanded, each cut with `…`.
fn reply_preview(c: &Cell) -> (String, String) {
    let text = reply_shown(c.response.as_deref(), c.parsed.as_deref());
    let text = text.trim();
    let cut = |n: usize| match text.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    };
    (cut(CELL_START), cut(CELL_WHOLE))
}

/// A text cell a spreadsheet would read as a formula, kept as text.
fn as_text(s: &str) -> String {
    if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_string()
    }
}

fn csv_line(row: &DownloadRow) -> Vec<u8> {
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(Vec::new());
    let fields = [
        row.result_id.to_string(),
        row.run_id.to_string(),
        as_text(&row.model),
        row.test_code.clone(),
        row.repeat_index.to_string(),
        row.scenario.clone(),
        row.behaviour.clone(),
        row.status.as_str().to_string(),
        row.base_severity.to_string(),
        row.difficulty.to_string(),
        row.error_kind.clone().unwrap_or_default(),
        as_text(row.error.as_deref().unwrap_or("")),
        as_text(row.response.as_deref().unwrap_or("")),
        as_text(&row.judgements),
        row.human_labels.to_string(),
    ];
    // Writing to a Vec cannot fail.
    let _ = w.write_record(&fields);
    w.into_inner().unwrap_or_default()
}

const CSV_HEADER: &str = "result_id,run_id,model,test_code,repeat_index,scenario,behaviour,status,base_severity,difficulty,error_kind,error,response,judgements,human_labels\n";

/// `GET /results.csv` and `/results.jsonl`: every result of the filtered
/// view (all pages), streamed as it is read.
pub async fn download(app: Arc<App>, q: FilterQuery, jsonl: bool) -> Result<Response, PageError> {
    let runs = q.runs(&app).await?;
    let filter = q.filter(&app, &runs)?;
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let reader = app.clone();
    tokio::spawn(async move { reader.store.stream_view_rows(&filter, tx).await });
    let header_line = (!jsonl).then(|| bytes::Bytes::from_static(CSV_HEADER.as_bytes()));
    let rows = futures_util::stream::unfold(rx, move |mut rx| async move {
        let row = rx.recv().await?;
        let chunk = row
            .map_err(|e| {
                // The response is already under way: the error can only end it.
                tracing::error!(error = %e, "view: download stopped");
                std::io::Error::other(e)
            })
            .and_then(|row| {
                Ok(bytes::Bytes::from(if jsonl {
                    let mut line = serde_json::to_vec(&row).map_err(std::io::Error::other)?;
                    line.push(b'\n');
                    line
                } else {
                    csv_line(&row)
                }))
            });
        Some((chunk, rx))
    });
    let head = futures_util::stream::iter(header_line.map(Ok::<_, std::io::Error>));
    // Fused: the body (with compression) may poll once more after the end.
    let body = Body::from_stream(futures_util::StreamExt::fuse(
        futures_util::StreamExt::chain(head, rows),
    ));
    let (kind, name) = if jsonl {
        ("application/x-ndjson", "results.jsonl")
    } else {
        ("text/csv; charset=utf-8", "results.csv")
    };
    Ok((
        [
            (header::CONTENT_TYPE, kind.to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        body,
    )
        .into_response())
}

pub async fn download_csv(
    State(app): State<Arc<App>>,
    Query(q): Query<FilterQuery>,
) -> Result<Response, PageError> {
    download(app, q, false).await
}

pub async fn download_jsonl(
    State(app): State<Arc<App>>,
    Query(q): Query<FilterQuery>,
) -> Result<Response, PageError> {
    download(app, q, true).await
}
