//! HTML only through the template engine (issue 32): no source file under
//! `src/` builds HTML with `format!`/`write!`/`writeln!`/`push_str` or
//! maud's `PreEscaped` of a literal holding a tag; maud's `html!` escapes
//! every value by construction.

use crate::layout::{is_ident, src_dir, walk};

/// A token of Rust source, enough to find macro calls and their string
/// literals: comments dropped, char literals and lifetimes kept apart from
/// strings.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Punct(char),
}

fn tokens(s: &str) -> Vec<Tok> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = s[i..].chars().next().unwrap();
        let rest = &s[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            while i < b.len() {
                if s[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if s[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some(hashes) = ["r", "br"]
            .iter()
            .find_map(|p| rest.strip_prefix(p))
            .map(|r| r.bytes().take_while(|&x| x == b'#').count())
            .filter(|_| i == 0 || !is_ident(b[i - 1] as char))
            .filter(|&h| {
                let p = if rest.starts_with('b') { 2 } else { 1 };
                rest[p + h..].starts_with('"')
            })
        {
            let open = if rest.starts_with('b') { 2 } else { 1 } + hashes + 1;
            let close = format!("\"{}", "#".repeat(hashes));
            let end = rest[open..].find(&close).map_or(rest.len(), |e| open + e);
            out.push(Tok::Str(rest[open..end].to_string()));
            i += (end + close.len()).min(rest.len());
        } else if c == '"' || (rest.starts_with("b\"") && (i == 0 || !is_ident(b[i - 1] as char))) {
            let mut j = i + if c == '"' { 1 } else { 2 };
            let start = j;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            out.push(Tok::Str(s[start..j.min(b.len())].to_string()));
            i = j + 1;
        } else if c == '\'' {
            // A char literal ('<', '\n', '\u{3c}'); a lifetime stays a mark.
            let lit = &rest[1..];
            let end = if lit.starts_with('\\') {
                lit.find('\'').map(|e| e + 1)
            } else {
                lit.char_indices()
                    .nth(1)
                    .filter(|(_, ch)| *ch == '\'')
                    .map(|(e, _)| e + 1)
            };
            out.push(Tok::Punct('\''));
            i += 1 + end.unwrap_or(0);
        } else if is_ident(c) {
            let len = rest.find(|ch: char| !is_ident(ch)).unwrap_or(rest.len());
            out.push(Tok::Ident(rest[..len].to_string()));
            i += len;
        } else {
            if !c.is_whitespace() {
                out.push(Tok::Punct(c));
            }
            i += c.len_utf8();
        }
    }
    out
}

/// The tokens without `#[cfg(test)]` items (test code may build any
/// string it likes to compare with).
fn without_test_items(toks: Vec<Tok>) -> Vec<Tok> {
    let cfg_test: Vec<Tok> = tokens("#[cfg(test)]");
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        if toks[i..].starts_with(&cfg_test) {
            i += cfg_test.len();
            // The item: up to its `;` or through its `{ .. }`.
            let mut depth = 0;
            while i < toks.len() {
                match toks[i] {
                    Tok::Punct(';') if depth == 0 => {
                        i += 1;
                        break;
                    }
                    Tok::Punct('{') => depth += 1,
                    Tok::Punct('}') => {
                        depth -= 1;
                        if depth == 0 {
                            i += 1;
                            break;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        } else {
            out.push(toks[i].clone());
            i += 1;
        }
    }
    out
}

/// HTML elements (and the SVG ones the pages draw): a `<` before one of
/// these names is a tag; `<unknown>`, `<n>`, `a < b` or a prompt's
/// `<user_input>` are not.
const HTML_ELEMENTS: &[&str] = &[
    "a",
    "abbr",
    "article",
    "aside",
    "b",
    "bdi",
    "bdo",
    "blockquote",
    "body",
    "br",
    "button",
    "caption",
    "circle",
    "code",
    "col",
    "colgroup",
    "dd",
    "details",
    "div",
    "dl",
    "dt",
    "em",
    "figcaption",
    "figure",
    "footer",
    "form",
    "g",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "head",
    "header",
    "hr",
    "html",
    "i",
    "iframe",
    "img",
    "input",
    "kbd",
    "label",
    "li",
    "line",
    "link",
    "main",
    "meta",
    "nav",
    "ol",
    "option",
    "p",
    "path",
    "polyline",
    "pre",
    "rect",
    "script",
    "section",
    "select",
    "small",
    "span",
    "strong",
    "style",
    "sub",
    "summary",
    "sup",
    "svg",
    "table",
    "tbody",
    "td",
    "text",
    "textarea",
    "tfoot",
    "th",
    "thead",
    "title",
    "tr",
    "u",
    "ul",
];

/// The first HTML tag in `text`: `<td`, `</table`, `<!DOCTYPE`, `<!--`.
fn html_tag(text: &str) -> Option<&str> {
    let lower = text.to_ascii_lowercase();
    for (at, _) in lower.match_indices('<') {
        let rest = &lower[at + 1..];
        if rest.starts_with("!doctype") || rest.starts_with("!--") {
            return Some(&text[at..(at + 9).min(text.len())]);
        }
        let name_at = usize::from(rest.starts_with('/'));
        let name: String = rest[name_at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        let after = rest[name_at + name.len()..].chars().next();
        let ends = after.is_none_or(|c| c.is_whitespace() || c == '>' || c == '/' || c == '{');
        if ends && HTML_ELEMENTS.contains(&name.as_str()) {
            return Some(&text[at..at + 1 + name_at + name.len()]);
        }
    }
    None
}

/// Calls that write text: the formatting macros, `push_str`, and
/// `PreEscaped` (maud's way around its own escaping).
const WRITERS: &[&str] = &[
    "format",
    "format_args",
    "write",
    "writeln",
    "print",
    "println",
    "eprint",
    "eprintln",
    "concat",
    "push_str",
    "PreEscaped",
];

/// Each string literal with an HTML tag passed to a writer in `source`
/// (test items left out): `(writer, tag)`.
fn html_written(source: &str) -> Vec<(String, String)> {
    let toks = without_test_items(tokens(source));
    let mut found = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        let Tok::Ident(name) = t else { continue };
        if !WRITERS.contains(&name.as_str()) {
            continue;
        }
        // `name!(`, `name![`, `name!{` for macros, `name(` for the rest.
        let mut j = i + 1;
        if toks.get(j) == Some(&Tok::Punct('!')) {
            j += 1;
        } else if !matches!(name.as_str(), "push_str" | "PreEscaped") {
            continue;
        }
        let Some(Tok::Punct(open @ ('(' | '[' | '{'))) = toks.get(j) else {
            continue;
        };
        let close = match open {
            '(' => ')',
            '[' => ']',
            _ => '}',
        };
        let mut depth = 0;
        for t in &toks[j..] {
            match t {
                Tok::Punct(c) if c == open => depth += 1,
                Tok::Punct(c) if *c == close => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                Tok::Str(text) => {
                    if let Some(tag) = html_tag(text) {
                        found.push((name.clone(), tag.to_string()));
                    }
                }
                _ => {}
            }
        }
    }
    found
}

/// Files allowed to write a tag-like string, and why. (None today.)
const HTML_ALLOWED: &[(&str, &str)] = &[];

#[test]
fn html_is_written_only_through_the_template_engine() {
    let root = src_dir();
    let mut paths = Vec::new();
    walk(&root, &mut paths);
    paths.sort();
    let mut offences = Vec::new();
    for p in &paths {
        let rel = p
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        // A `tests.rs` is a `#[cfg(test)] mod tests;` of its folder.
        if p.file_name().is_some_and(|n| n == "tests.rs")
            || HTML_ALLOWED.iter().any(|(f, _)| *f == rel)
        {
            continue;
        }
        let text = std::fs::read_to_string(p).unwrap();
        for (writer, tag) in html_written(&text) {
            offences.push(format!("src/{rel}: {writer} writes {tag:?}"));
        }
    }
    assert!(
        offences.is_empty(),
        "HTML built outside the template engine (use maud's html!, which escapes every value):\n{}",
        offences.join("\n")
    );
}

#[test]
fn the_html_guard_finds_planted_html_and_nothing_else() {
    let planted = r##"
        fn page(out: &mut String, x: &str) {
            let a = format!("<td class=\"num\">{x}</td>");
            writeln!(out, "{}", "</table>").unwrap();
            write!(out, r#"<span title="{x}">"#).unwrap();
            out.push_str("<!DOCTYPE html>");
            let b = maud::PreEscaped("<br>");
        }
    "##;
    let found: Vec<String> = html_written(planted)
        .into_iter()
        .map(|(w, t)| format!("{w} {t}"))
        .collect();
    assert_eq!(
        found,
        [
            "format <td",
            "writeln </table",
            "write <span",
            "push_str <!DOCTYPE",
            "PreEscaped <br",
        ]
    );
    let innocent = r##"
        // format!("<td>{x}</td>") in a comment
        /* writeln!(out, "<tr>") */
        fn f(a: i64, b: i64, tag: &str, t: &str) -> String {
            let lt = '<';
            let x = format!("{a} < {b}, <unknown>, expected P<n>.md");
            let p = format!("<{tag}>
{t}
</{tag}>
<user_input>{t}</user_input>");
            let tag = "<td>"; // not written by a writer
            let m = maud::html! { td { "<b>" (x) } };
            x
        }
        #[cfg(test)]
        mod tests {
            fn t() { assert_eq!(format!("<td>{}</td>", 1), "<td>1</td>"); }
        }
    "##;
    assert_eq!(html_written(innocent), Vec::<(String, String)>::new());
}
