//! The page shell every page shares (navigation, the content note, the
//! texts setting) and the small pieces pages build with: a text block that
//! keeps hostile text inert and bidi-isolated, status badges, numbers.
//! Everything goes through maud, which escapes every value it prints.

use maud::{Markup, html};

use super::security::Session;
use crate::domain::CellStatus;
/// A string value shown inline (a model id, a code): isolated, as on
/// every helmbench page.
pub use crate::report::html::parts::inline;
use crate::report::html::parts::shell;

/// Which page is open (marked in the navigation).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Runs,
    Results,
    Compare,
}

/// The hidden field every form sends back.
pub fn csrf(session: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(session.csrf); }
}

/// A whole page.
pub fn page(title: &str, session: &Session, nav: Nav, back: &str, body: Markup) -> Markup {
    shell_of(title, session, nav, back, body, None)
}

/// A whole page that reloads itself every `seconds` (a page waiting for
/// numbers computed in the background; no script needed).
pub fn page_refreshing(
    title: &str,
    session: &Session,
    nav: Nav,
    back: &str,
    body: Markup,
    seconds: u32,
) -> Markup {
    shell_of(title, session, nav, back, body, Some(seconds))
}

fn shell_of(
    title: &str,
    session: &Session,
    nav: Nav,
    back: &str,
    body: Markup,
    refresh: Option<u32>,
) -> Markup {
    // Style and script from the binary, never inline: the CSP allows no
    // inline script.
    let head = html! {
        @if let Some(s) = refresh { meta http-equiv="refresh" content=(s); }
        meta name="referrer" content="same-origin";
        link rel="stylesheet" href="/assets/view.css";
        script src="/assets/view.js" defer {}
    };
    let body = html! {
        header.top {
            a.brand href="/" { "helmbench view" }
            nav {
                a href="/" aria-current=[(nav == Nav::Runs).then_some("page")] { "Runs" }
                a href="/results" aria-current=[(nav == Nav::Results).then_some("page")] { "Results" }
                a href="/compare" aria-current=[(nav == Nav::Compare).then_some("page")] { "Compare" }
            }
            form.inline method="post" action="/prefs" {
                (csrf(session))
                input type="hidden" name="back" value=(back);
                @if session.collapse {
                    button name="action" value="expand" title="Show prompt and reply texts open" { "Texts: collapsed" }
                } @else {
                    button name="action" value="collapse" title="Keep prompt and reply texts collapsed until clicked" { "Texts: shown" }
                }
            }
        }
        @if !session.note_seen {
            (content_note(session, back))
        }
        main { (body) }
    };
    shell(&format!("{title} · helmbench view"), head, body)
}

/// The note shown until dismissed: what the texts are about, and that a
/// reviewer can keep them collapsed and should pause.
fn content_note(session: &Session, back: &str) -> Markup {
    html! {
        section.content-note role="note" {
            h2 { "Content note" }
            p {
                "The prompts and replies in this benchmark are about suicide, self-harm and mental-health crises. "
                "Reading them for long stretches can be distressing (vicarious trauma). "
                "You can keep texts collapsed until you click them (the “Texts” switch at the top), "
                "and this page counts the cases you label in a sitting and suggests a pause after a long stretch."
            }
            form method="post" action="/prefs" {
                (csrf(session))
                input type="hidden" name="back" value=(back);
                button name="action" value="dismiss-note" { "I understand, hide this note" }
            }
        }
    }
}

/// A block of stored text (a prompt, a reply, a justification): escaped,
/// shown as preformatted text, isolated from the page's direction (a
/// right-to-left override inside stays inside), collapsed when the
/// reviewer asked for that.
pub fn text_block(label: &str, text: &str, collapsed: bool) -> Markup {
    html! {
        details.text open[!collapsed] {
            summary { (label) " " small { "(" (text.chars().count()) " characters)" } }
            pre dir="auto" { bdi { (text) } }
        }
    }
}

/// The text of a reply as its user would read it: the `response` field of
/// its parsed fields, or of the JSON inside a reply that missed its schema
/// (a format failure still said something to the user), else the raw text.
pub fn reply_shown(response: Option<&str>, parsed: Option<&str>) -> String {
    let raw = response.unwrap_or("");
    let value = parsed
        .and_then(|p| serde_json::from_str(p).ok())
        .or_else(|| crate::judging::reply::extract_json(raw));
    crate::judging::reply::reply_text(raw, value.as_ref()).to_string()
}

/// A cell status as a word and a class (colour is never the only cue).
pub fn status_badge(s: CellStatus) -> Markup {
    html! { span class={ "badge " (s.as_str()) } { (s.as_str()) } }
}
