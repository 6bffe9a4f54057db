//! A test case's variants of the user's words on its case page (issue 43):
//! the original and each variant of the same test case in the same run and
//! repeat, side by side, each with its verdict, a link to its own page and
//! the user's text with the words the variant changed marked against the
//! original's (`<del>` what it took out, `<ins>` what it put in), message 1
//! and, in a conversation, every later user message. The texts are the
//! ones stored with the run, never drawn again; the diff is `similar`'s
//! word diff, and every part of it goes through maud, escaped by
//! construction (a user's text may hold markup, and a variant can turn
//! `<SCRIPT>` into `<script>`).

use maud::{Markup, html};
use similar::ChangeTag;
use similar::utils::diff_words;

use super::layout::{inline, status_badge};
use crate::benchmark::conversation::is_simulated;
use crate::domain::CaseVariant;

/// The section; nothing when the run holds no variant of this test case.
pub fn section(variants: &[CaseVariant], current: i64, collapsed: bool) -> Markup {
    if !variants.iter().any(|v| v.variant.is_some()) {
        return html! {};
    }
    let original = variants.iter().find(|v| v.variant.is_none());
    html! {
        section.variants data-part="variants" {
            h2 { "Variants of the user's words" }
            p.note {
                "The original and each variant of this test case in this run and repeat, as they were sent "
                "(the texts stored with the run). Against the original: " del { "taken out" } ", " ins { "put in" } "."
            }
            div.side-by-side {
                @for v in variants {
                    @let name = v.variant.as_deref().unwrap_or("original");
                    @let against = original.filter(|o| o.result_id != v.result_id);
                    section.variant data-variant=(name) data-current[v.result_id == current] {
                        h3 {
                            @if v.result_id == current {
                                (inline(name)) " (this page)"
                            } @else {
                                a href={ "/case/" (v.result_id) } { (inline(name)) }
                            }
                            " " (status_badge(v.status))
                        }
                        p.note {
                            (inline(&v.test_code))
                            @if let Some(seed) = v.variant_seed { " · seed " (seed) }
                            @if let Some(o) = against {
                                @let (changed, of) = changed_words(&o.message, &v.message);
                                " · message 1: " span data-changed=(changed) { (changed) " of " (of) " words changed" }
                            }
                        }
                        (message("Message 1", against.map(|o| o.message.as_str()), &v.message, collapsed))
                        @for m in &v.later {
                            @let label = m.turn_code.clone().unwrap_or_else(|| format!("message {}", m.turn_index + 1));
                            @let was = against.map(|o| o.later.iter().find(|l| l.turn_index == m.turn_index).map(|l| l.text.as_str()));
                            @let simulated = m.turn_code.as_deref().is_some_and(is_simulated);
                            @match was {
                                // A simulated user wrote it in each conversation: a
                                // difference is the user model's, not the variant's.
                                _ if simulated => (message(&format!("{label} (simulated user: written by the user model, not varied)"), None, &m.text, collapsed)),
                                // The original's conversation ended before this message.
                                Some(None) => (message(&format!("{label} (not in the original)"), None, &m.text, collapsed)),
                                Some(Some(o)) => (message(&label, Some(o), &m.text, collapsed)),
                                None => (message(&label, None, &m.text, collapsed)),
                            }
                        }
                    }
                }
            }
        }
    }
}

/// One user message, diffed against the original's when there is one.
fn message(label: &str, original: Option<&str>, text: &str, collapsed: bool) -> Markup {
    html! {
        details.text open[!collapsed] data-message=(label) {
            summary { (label) }
            pre dir="auto" { bdi { (diffed(original, text)) } }
        }
    }
}

/// `text` with the words that differ from `original` marked.
fn diffed(original: Option<&str>, text: &str) -> Markup {
    let Some(original) = original else {
        return html! { (text) };
    };
    html! {
        @for (tag, part) in diff_words(similar::Algorithm::Myers, original, text) {
            @match tag {
                ChangeTag::Equal => (part),
                ChangeTag::Delete => del { (part) },
                ChangeTag::Insert => ins { (part) },
            }
        }
    }
}

/// How many of the original's words a variant took out or replaced, and
/// how many words the original has (the section tags, `<user_input>`, are
/// not the user's words).
fn changed_words(original: &str, text: &str) -> (usize, usize) {
    let words = |part: &str| part.split_whitespace().filter(|w| !is_tag(w)).count();
    let changed = diff_words(similar::Algorithm::Myers, original, text)
        .into_iter()
        .filter(|(tag, _)| *tag == ChangeTag::Delete)
        .map(|(_, part)| words(part))
        .sum();
    (changed, words(original))
}

/// `<name>` or `</name>` as the H2 headings become (lower case, digits,
/// `_`), which no variant changes.
fn is_tag(word: &str) -> bool {
    word.strip_prefix('<')
        .and_then(|w| w.strip_suffix('>'))
        .map(|w| w.strip_prefix('/').unwrap_or(w))
        .is_some_and(|n| {
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{CellStatus, LaterMessage};

    fn case(id: i64, variant: Option<&str>, message: &str) -> CaseVariant {
        CaseVariant {
            result_id: id,
            test_code: format!(
                "P1-B1-S1-C1-PT1{}",
                variant.map(|v| format!("~{v}")).unwrap_or_default()
            ),
            variant: variant.map(str::to_string),
            variant_seed: variant.map(|_| 43),
            status: CellStatus::Pass,
            message: message.into(),
            later: vec![],
        }
    }

    #[test]
    fn changed_words_are_marked_and_every_text_is_escaped() {
        let mut lower = case(2, Some("lowercase"), "i can't go on <script>x</script>");
        lower.later.push(LaterMessage {
            turn_index: 1,
            turn_code: Some("T1".into()),
            text: "<b>hi</b> there".into(),
        });
        let mut original = case(1, None, "I can't go on <SCRIPT>x</SCRIPT>");
        original.later.push(LaterMessage {
            turn_index: 1,
            turn_code: Some("T1".into()),
            text: "<b>hi</b> There".into(),
        });
        let page = section(&[original, lower], 1, false).into_string();
        assert!(
            !page.contains("<script>") && !page.contains("<b>"),
            "{page}"
        );
        assert!(page.contains("<del>I</del><ins>i</ins>"), "{page}");
        assert!(
            page.contains("<ins>&lt;script&gt;x&lt;/script&gt;</ins>"),
            "{page}"
        );
        assert!(page.contains("&lt;b&gt;hi&lt;/b&gt; <del>There</del><ins>there</ins>"));
        assert!(page.contains(r#"data-changed="2""#), "{page}");
        // The variant links to its page; the page shown does not.
        assert!(page.contains(r#"href="/case/2""#));
        assert!(!page.contains(r#"href="/case/1""#));
        assert_eq!(changed_words("a b c", "a b c"), (0, 3));
        assert_eq!(
            changed_words(
                "<user_input>\nI am <B>\n</user_input>",
                "<user_input>\ni am <b>\n</user_input>"
            ),
            (2, 3)
        );
    }

    #[test]
    fn a_simulated_users_message_is_shown_as_written_not_diffed() {
        let later = |text: &str| LaterMessage {
            turn_index: 1,
            turn_code: Some("S1".into()),
            text: text.into(),
        };
        let mut original = case(1, None, "Hello");
        original.later.push(later("I feel low"));
        let mut lower = case(2, Some("lowercase"), "hello");
        lower.later.push(later("Something else"));
        let page = section(&[original, lower], 1, false).into_string();
        assert!(page.contains("S1 (simulated user: written by the user model, not varied)"));
        assert!(page.contains("<bdi>Something else</bdi>"), "{page}");
        assert!(page.contains("<del>Hello</del><ins>hello</ins>"), "{page}");
    }

    #[test]
    fn a_test_case_without_variants_has_no_section() {
        assert!(
            section(&[case(1, None, "x")], 1, false)
                .into_string()
                .is_empty()
        );
    }
}
