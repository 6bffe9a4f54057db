//! Labelling on the test case page: the panel (one form per judged
//! criterion, `p` pass, `f` fail, `s` skip on the first criterion this
//! reviewer has not labelled; a reason; the reviewer's name, remembered in
//! a cookie), the `POST /label` that stores a label in the table
//! `review import` fills (so `report`'s calibration counts it at once), the
//! sitting count with its nudge to pause, and `POST /prefs` (the content
//! note, collapsed texts).

use std::sync::Arc;

use axum::extract::{Extension, Form, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::layout::{csrf, inline};
use super::security::{COLLAPSE_COOKIE, NOTE_COOKIE, REVIEWER_COOKIE, Session, hex, set_cookie};
use super::state::{App, PageError};
use crate::benchmark::{ResponseType, Rubric};
use crate::domain::{CaseDetail, CaseJudgement, CaseLabel};

/// After this many labels in a sitting, or this many minutes, the panel
/// suggests a pause.
const NUDGE_LABELS: u32 = 25;
const NUDGE_MINUTES: u64 = 40;
const MAX_REVIEWER: usize = 80;
const MAX_NOTE: usize = 2000;

/// The criteria of a result that count (not a panel's votes), in order.
fn criteria(judgements: &[CaseJudgement]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for j in judgements.iter().filter(|j| !j.vote) {
        if !out.contains(&j.criterion.as_str()) {
            out.push(&j.criterion);
        }
    }
    out
}

fn sitting_note(app: &App, session: &Session) -> Markup {
    let Some(s) = app.sitting(&session.id) else {
        return html! { p.sitting data-sitting="0" { "No labels yet in this sitting." } };
    };
    let minutes = s.since.elapsed().as_secs() / 60;
    html! {
        p.sitting data-sitting=(s.labels) {
            "Labelled in this sitting: " strong { (s.labels) } " (over " (minutes) " min)."
        }
        @if s.labels >= NUDGE_LABELS || minutes >= NUDGE_MINUTES {
            p.nudge role="status" {
                "You have been labelling for a while. These texts are heavy: consider a short break, "
                "away from the screen, before the next stretch."
            }
        }
    }
}

/// The label panel of a case page.
pub fn label_panel(
    app: &App,
    session: &Session,
    d: &CaseDetail,
    judgements: &[CaseJudgement],
    labels: &[CaseLabel],
    next: Option<String>,
    here: &str,
) -> Markup {
    let crits = criteria(judgements);
    let mine = |c: &str| {
        session
            .reviewer
            .as_deref()
            .is_some_and(|r| labels.iter().any(|l| l.criterion == c && l.rater == r))
    };
    let focus = crits.iter().copied().find(|&c| !mine(c));
    html! {
        section.label-panel #label {
            h2 { "Your label" }
            (sitting_note(app, session))
            @if crits.is_empty() {
                p.empty { "Not judged (a deterministic check): there is no judge verdict to label." }
            } @else if app.benchmark.is_none() {
                p.empty { "Labelling needs the benchmark folder's rubrics: start `helmbench view` with --benchmark-dir." }
            } @else {
                p.note { "Keys: " kbd { "p" } " pass, " kbd { "f" } " fail, " kbd { "s" } " skip, "
                         kbd { "j" } "/" kbd { "→" } " next, " kbd { "k" } "/" kbd { "←" } " previous." }
                @for &c in &crits {
                    @let focused = focus == Some(c);
                    @let judge = judgements.iter().find(|j| !j.vote && j.criterion == c);
                    form.label method="post" action="/label" data-focus=[focused.then_some("1")] {
                        (csrf(session))
                        input type="hidden" name="result_id" value=(d.result_id);
                        input type="hidden" name="criterion" value=(c);
                        input type="hidden" name="here" value=(here);
                        @if let Some(n) = &next { input type="hidden" name="next" value=(n); }
                        h3 { (inline(c))
                             @if let Some(j) = judge { small { " judge: "
                                 (match j.passed { Some(true) => "pass", Some(false) => "fail", None => "error" }) } }
                             @if mine(c) { " " span.labelled { "✓ labelled by you" } } }
                        @if let Some(r) = app.rubric(&d.scenario, c) {
                            p.note { "Options: " (r.options.join(", ")) "; passing: " (r.pass_values.join(", ")) }
                        }
                        label { "Reviewer "
                            input type="text" name="reviewer" required maxlength=(MAX_REVIEWER)
                                  value=[session.reviewer.as_deref()] placeholder="your name" autocomplete="name";
                        }
                        label { "Reason " input type="text" name="note" maxlength=(MAX_NOTE) placeholder="optional" size="40"; }
                        button name="choice" value="pass" data-key=[focused.then_some("p")] { "Pass (p)" }
                        button name="choice" value="fail" data-key=[focused.then_some("f")] { "Fail (f)" }
                        @if let Some(r) = app.rubric(&d.scenario, c).filter(|r| r.response_type == ResponseType::Single && r.options.len() > 2) {
                            @for o in &r.options { button name="choice" value={ "opt:" (o) } { (o) } }
                        }
                    }
                }
                @if let Some(n) = &next { p { a href=(n) data-key="s" { "Skip (s)" } } }
            }
            @if !labels.is_empty() {
                table data-table="labels" {
                    tr { th { "Criterion" } th { "Reviewer" } th { "Verdict" } th { "Reason" } th { "When" } }
                    @for l in labels {
                        tr { td { (inline(&l.criterion)) } td { (inline(&l.rater)) }
                             td { (inline(&l.verdict)) (if l.passed { " (pass)" } else { " (fail)" }) }
                             td { @if let Some(n) = &l.note { span dir="auto" { bdi { (n) } } } }
                             td { (l.at) } }
                    }
                }
            }
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct LabelForm {
    pub result_id: i64,
    pub criterion: String,
    pub choice: String,
    #[serde(default)]
    pub reviewer: String,
    #[serde(default)]
    pub note: String,
    #[serde(default)]
    pub here: String,
    #[serde(default)]
    pub next: Option<String>,
}

/// A path on this server to go back to (never another site's URL).
fn local_path(p: &str) -> Option<&str> {
    (p.starts_with('/') && !p.starts_with("//") && !p.contains(['\\', '\r', '\n'])).then_some(p)
}

/// The verdict a choice means under a rubric, and whether it passes.
pub fn verdict_of(rubric: &Rubric, choice: &str) -> Result<(Value, bool), String> {
    let failing: Vec<&String> = rubric
        .options
        .iter()
        .filter(|o| !rubric.pass_values.contains(o))
        .collect();
    match (rubric.response_type, choice) {
        (ResponseType::Single, "pass") => rubric
            .pass_values
            .first()
            .map(|v| (Value::String(v.clone()), true))
            .ok_or_else(|| format!("rubric {} has no passing option", rubric.code)),
        (ResponseType::Single, "fail") => failing
            .first()
            .map(|v| (Value::String((*v).clone()), false))
            .ok_or_else(|| format!("rubric {} has no failing option", rubric.code)),
        (ResponseType::Single, c) if c.starts_with("opt:") => {
            let o = c.trim_start_matches("opt:");
            rubric
                .options
                .iter()
                .find(|x| *x == o)
                .map(|x| (Value::String(x.clone()), rubric.pass_values.contains(x)))
                .ok_or_else(|| format!("{o:?} is not an option of {}", rubric.code))
        }
        // A multi-select passes with every pass value chosen: `pass`
        // chooses exactly those, `fail` the other options.
        (ResponseType::Multi, "pass") => Ok((
            Value::Array(
                rubric
                    .options
                    .iter()
                    .filter(|o| rubric.pass_values.contains(o))
                    .map(|o| Value::String(o.clone()))
                    .collect(),
            ),
            true,
        )),
        (ResponseType::Multi, "fail") => Ok((
            Value::Array(
                failing
                    .iter()
                    .map(|o| Value::String((*o).clone()))
                    .collect(),
            ),
            rubric.pass_values.is_empty(),
        )),
        (_, other) => Err(format!(
            "choice {other:?} is not pass, fail or an option of {}",
            rubric.code
        )),
    }
}

fn see_other(to: &str) -> Response {
    (
        StatusCode::SEE_OTHER,
        [(
            header::LOCATION,
            HeaderValue::from_str(to).unwrap_or_else(|_| HeaderValue::from_static("/")),
        )],
    )
        .into_response()
}

/// `POST /label`.
pub async fn post_label(
    State(app): State<Arc<App>>,
    Extension(session): Extension<Session>,
    Form(form): Form<LabelForm>,
) -> Result<Response, PageError> {
    let reviewer = Some(form.reviewer.trim())
        .filter(|r| !r.is_empty())
        .or(session.reviewer.as_deref().map(str::trim))
        .unwrap_or("")
        .to_string();
    if reviewer.is_empty() {
        return Err(PageError::bad_request(
            "a label needs a reviewer name (the Reviewer field)",
        ));
    }
    if reviewer.chars().count() > MAX_REVIEWER || reviewer.chars().any(char::is_control) {
        return Err(PageError::bad_request(format!(
            "the reviewer name must be at most {MAX_REVIEWER} characters, without control characters"
        )));
    }
    let note = Some(form.note.trim()).filter(|n| !n.is_empty());
    if note.is_some_and(|n| n.chars().count() > MAX_NOTE) {
        return Err(PageError::bad_request(format!(
            "the reason must be at most {MAX_NOTE} characters"
        )));
    }
    let d = app.store.case_detail(form.result_id).await?;
    let Some(rubric) = app.rubric(&d.scenario, &form.criterion) else {
        return Err(PageError::bad_request(format!(
            "scenario {} has no rubric {} in the benchmark folder (labelling needs --benchmark-dir)",
            d.scenario, form.criterion
        )));
    };
    let (verdict, passed) = verdict_of(rubric, &form.choice).map_err(PageError::bad_request)?;
    app.store
        .store_view_label(
            form.result_id,
            &form.criterion,
            &reviewer,
            &verdict,
            passed,
            note,
        )
        .await?;
    app.count_label(&session.id);
    // Every criterion of the case labelled by this reviewer: on to the next case.
    let judgements = app.store.case_judgements(form.result_id).await?;
    let labels = app.store.case_labels(form.result_id).await?;
    let done = criteria(&judgements).iter().all(|c| {
        labels
            .iter()
            .any(|l| l.criterion == *c && l.rater == reviewer)
    });
    let here = local_path(&form.here).unwrap_or("/");
    let to = match form.next.as_deref().and_then(local_path) {
        Some(next) if done => next,
        _ => here,
    };
    let mut res = see_other(&format!("{to}#label"));
    res.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(REVIEWER_COOKIE, &hex(reviewer.as_bytes())),
    );
    Ok(res)
}

#[derive(Debug, Deserialize)]
pub struct PrefsForm {
    pub action: String,
    #[serde(default)]
    pub back: String,
}

/// `POST /prefs`: dismiss the content note, collapse or show texts.
pub async fn post_prefs(Form(form): Form<PrefsForm>) -> Result<Response, PageError> {
    let cookie = match form.action.as_str() {
        "dismiss-note" => set_cookie(NOTE_COOKIE, "1"),
        "collapse" => set_cookie(COLLAPSE_COOKIE, "1"),
        "expand" => set_cookie(COLLAPSE_COOKIE, "0"),
        other => return Err(PageError::bad_request(format!("unknown setting {other:?}"))),
    };
    let mut res = see_other(local_path(&form.back).unwrap_or("/"));
    res.headers_mut().append(header::SET_COOKIE, cookie);
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_followed() {
        assert_eq!(local_path("/case/3?runs=1"), Some("/case/3?runs=1"));
        assert_eq!(local_path("//evil.example/"), None);
        assert_eq!(local_path("https://evil.example/"), None);
        assert_eq!(local_path("/x\r\nSet-Cookie: a=b"), None);
    }
}
