//! Markdown handling for benchmark content: splitting YAML frontmatter off a
//! document, splitting consolidated component files on their `# C1` headings,
//! and converting H2 sections to XML tags for the composed prompt (SPEC §2).
//!
//! Everything here works on pulldown-cmark events with source offsets, so a
//! `## ` or `---` inside a fenced code block is text, never structure. Bodies
//! are sliced from the source, never re-rendered, so what the author wrote is
//! what the model reads.

use std::ops::Range;

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// A problem in a markdown document, with the 1-based line it concerns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct MarkdownError {
    pub line: usize,
    pub message: String,
}

/// A document split into its optional YAML frontmatter and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frontmatter<'a> {
    /// The YAML between the `---` fences, if the document has a block.
    pub yaml: Option<&'a str>,
    /// 1-based line of the first YAML line (for error positions).
    pub yaml_line: usize,
    /// Everything after the closing fence (or the whole text).
    pub body: &'a str,
    /// Byte offset of `body` within the input.
    pub body_offset: usize,
}

/// Splits a leading `---` YAML block off `text`. Blank lines (and a BOM) may
/// precede the opening fence; the block closes at the next `---` or `...`
/// line. An opening fence that never closes is an error rather than text,
/// because sending half a frontmatter block to a model is the one thing the
/// composer must never do.
pub fn split_frontmatter(text: &str) -> Result<Frontmatter<'_>, MarkdownError> {
    let mut offset = if text.starts_with('\u{feff}') { 3 } else { 0 };
    let mut line_no = 1;
    let no_block = Frontmatter {
        yaml: None,
        yaml_line: 0,
        body: text,
        body_offset: 0,
    };
    // Skip blank lines before the opening fence.
    loop {
        let rest = &text[offset..];
        if rest.is_empty() {
            return Ok(no_block);
        }
        let (line, len) = next_line(rest);
        if line.trim().is_empty() {
            offset += len;
            line_no += 1;
            continue;
        }
        if line.trim_end() != "---" {
            return Ok(no_block);
        }
        offset += len;
        break;
    }
    let open_line = line_no;
    line_no += 1;
    let yaml_start = offset;
    let yaml_line = line_no;
    loop {
        let rest = &text[offset..];
        if rest.is_empty() {
            return Err(MarkdownError {
                line: open_line,
                message:
                    "frontmatter opened with `---` is never closed (expected a closing `---` line)"
                        .into(),
            });
        }
        let (line, len) = next_line(rest);
        let trimmed = line.trim_end();
        if trimmed == "---" || trimmed == "..." {
            let yaml = &text[yaml_start..offset];
            let body_offset = offset + len;
            return Ok(Frontmatter {
                yaml: Some(yaml),
                yaml_line,
                body: &text[body_offset..],
                body_offset,
            });
        }
        offset += len;
    }
}

/// Returns the line without its terminator and the byte length including it.
fn next_line(text: &str) -> (&str, usize) {
    match text.find('\n') {
        Some(i) => (text[..i].trim_end_matches('\r'), i + 1),
        None => (text, text.len()),
    }
}

/// 1-based line number of byte `offset` in `text`.
pub fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// A heading found at the top level of a document (not inside a quote or list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heading {
    pub level: u8,
    /// The heading's text content (inline markup dropped).
    pub text: String,
    /// Source range of the whole heading, including its line end.
    pub range: Range<usize>,
}

/// All top-level headings of `text` at `level`, in order.
pub fn headings(text: &str, level: u8) -> Vec<Heading> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut current: Option<(u8, String, usize)> = None;
    for (event, range) in Parser::new_ext(text, Options::empty()).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { level: l, .. }) => {
                current = Some((heading_level(l), String::new(), range.start));
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some((l, t, start)) = current.take()
                    && depth == 0
                    && l == level
                {
                    out.push(Heading {
                        level: l,
                        text: t.trim().to_string(),
                        range: start..line_end(text, range.end),
                    });
                }
            }
            Event::Start(tag) if is_container(&tag) => depth += 1,
            Event::End(end) if is_container_end(&end) => depth = depth.saturating_sub(1),
            Event::Text(t) | Event::Code(t) => {
                if let Some((_, s, _)) = current.as_mut() {
                    s.push_str(&t);
                }
            }
            _ => {}
        }
    }
    out
}

fn heading_level(l: HeadingLevel) -> u8 {
    match l {
        HeadingLevel::H1 => 1,
        HeadingLevel::H2 => 2,
        HeadingLevel::H3 => 3,
        HeadingLevel::H4 => 4,
        HeadingLevel::H5 => 5,
        HeadingLevel::H6 => 6,
    }
}

fn is_container(tag: &Tag) -> bool {
    matches!(
        tag,
        Tag::BlockQuote(_) | Tag::List(_) | Tag::Item | Tag::FootnoteDefinition(_)
    )
}

fn is_container_end(tag: &TagEnd) -> bool {
    matches!(
        tag,
        TagEnd::BlockQuote(_) | TagEnd::List(_) | TagEnd::Item | TagEnd::FootnoteDefinition
    )
}

/// Extends `end` to just past the end of its line (heading ranges from the
/// parser may stop before the newline).
/// CommonMark ends lines at `\n`, `\r\n` or a lone `\r`: a heading ended by
/// a lone `\r` must not extend over the next line (which may be the next
/// heading: slicing from past its start panicked).
fn line_end(text: &str, end: usize) -> usize {
    let b = text.as_bytes();
    let after_cr = |i: usize| if b.get(i) == Some(&b'\n') { i + 1 } else { i };
    match end.checked_sub(1).and_then(|i| b.get(i)) {
        Some(b'\n') => return end,
        Some(b'\r') => return after_cr(end),
        _ => {}
    }
    match text[end..].find(['\n', '\r']) {
        Some(i) if b[end + i] == b'\r' => after_cr(end + i + 1),
        Some(i) => end + i + 1,
        None => text.len(),
    }
}

/// The 1-based line of the first lone `\r` (a classic-Mac line ending), if
/// any. Markdown reads it as a line break but the frontmatter splitter and
/// every line number here count `\n` only, so such a file is refused.
pub fn lone_cr_line(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    b.iter()
        .enumerate()
        .find(|&(i, &c)| c == b'\r' && b.get(i + 1) != Some(&b'\n'))
        .map(|(i, _)| line_of(text, i))
}

/// The XML tag name for an H2 heading: lower case, apostrophes dropped, every
/// other run of non-ASCII-alphanumerics one `_`, outer `_` trimmed.
pub fn tag_name(heading: &str) -> String {
    let mut out = String::with_capacity(heading.len());
    let mut pending_sep = false;
    for c in heading.chars() {
        if c == '\'' || c == '\u{2019}' {
            continue;
        }
        if c.is_ascii_alphanumeric() {
            if pending_sep && !out.is_empty() {
                out.push('_');
            }
            pending_sep = false;
            out.push(c.to_ascii_lowercase());
        } else {
            pending_sep = true;
        }
    }
    out
}

/// Trims whole blank lines from the start and all whitespace from the end,
/// keeping the first line's indentation (an indented code block stays one).
pub fn trim_blank_lines(s: &str) -> &str {
    let mut start = 0;
    while start < s.len() {
        let (line, len) = next_line(&s[start..]);
        if !line.trim().is_empty() {
            break;
        }
        start += len;
    }
    s[start..].trim_end()
}

/// Converts a markdown body (frontmatter already removed) to prompt text:
/// each top-level H2 section becomes `<tag>\n{body}\n</tag>`, text before the
/// first H2 stays as it is, pieces are separated by one blank line.
pub fn to_xml(body: &str) -> Result<String, MarkdownError> {
    if let Some(e) = unclosed_block(body) {
        return Err(e);
    }
    let h2s = headings(body, 2);
    let mut pieces: Vec<String> = Vec::with_capacity(h2s.len() + 1);
    let preamble_end = h2s.first().map_or(body.len(), |h| h.range.start);
    let preamble = trim_blank_lines(&body[..preamble_end]);
    if !preamble.is_empty() {
        pieces.push(preamble.to_string());
    }
    for (i, h) in h2s.iter().enumerate() {
        let end = h2s.get(i + 1).map_or(body.len(), |n| n.range.start);
        let tag = tag_name(&h.text);
        // Only errors need the line: counting it for every heading would
        // make a file of many sections quadratic.
        let line = || line_of(body, h.range.start);
        if tag.is_empty() {
            return Err(MarkdownError {
                line: line(),
                message: format!(
                    "heading `## {}` gives no XML tag name (expected ASCII letters or digits)",
                    h.text
                ),
            });
        }
        // An empty section is sent as an empty tag; `check` warns about it.
        let section = trim_blank_lines(&body[h.range.end.min(end)..end]);
        pieces.push(format!("<{tag}>\n{section}\n</{tag}>"));
    }
    Ok(pieces.join("\n\n"))
}

/// A top-level code fence or HTML block (comment, `<pre>`, `<script>`, ...)
/// that is never closed runs, by CommonMark's rules, to the end of the
/// document. In a consolidated file that silently swallows every following
/// section, frontmatter included, into this component's prompt; anywhere
/// else it hides the headings after it. Either way the author made a slip.
fn unclosed_block(text: &str) -> Option<MarkdownError> {
    let mut depth = 0usize;
    for (event, range) in Parser::new_ext(text, Options::empty()).into_offset_iter() {
        match event {
            Event::Start(tag) if is_container(&tag) => depth += 1,
            Event::End(end) if is_container_end(&end) => depth = depth.saturating_sub(1),
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(_))) if depth == 0 => {
                let block = &text[range.clone()];
                let open = block.trim_start_matches(' ');
                let ch = open.chars().next().unwrap_or('`');
                let n = open.chars().take_while(|&c| c == ch).count();
                let mut lines = block.lines();
                let first = lines.next();
                let closed = lines.next_back().is_some_and(|last| {
                    let t = last.trim_start_matches(' ').trim_end();
                    t.len() >= n && t.chars().all(|c| c == ch)
                }) && first.is_some();
                if !closed {
                    let fence: String = std::iter::repeat_n(ch, n).collect();
                    return Some(MarkdownError {
                        line: line_of(text, range.start),
                        message: format!(
                            "code fence opened with {fence} is never closed (expected a closing {fence} line; everything after it would be read as code)"
                        ),
                    });
                }
            }
            Event::Start(Tag::HtmlBlock) if depth == 0 => {
                let block = &text[range.clone()];
                let open = block.trim_start_matches(' ');
                let lower = open.to_ascii_lowercase();
                let end = if open.starts_with("<!--") {
                    Some("-->")
                } else if open.starts_with("<?") {
                    Some("?>")
                } else if open.starts_with("<![CDATA[") {
                    Some("]]>")
                } else if open.starts_with("<!") {
                    Some(">")
                } else {
                    ["script", "pre", "style", "textarea"]
                        .into_iter()
                        .find(|t| {
                            lower[1..].starts_with(t)
                                && lower[1 + t.len()..]
                                    .chars()
                                    .next()
                                    .is_none_or(|c| c == '>' || c.is_whitespace())
                        })
                        .map(|t| match t {
                            "script" => "</script>",
                            "pre" => "</pre>",
                            "style" => "</style>",
                            _ => "</textarea>",
                        })
                };
                let Some(end) = end else { continue };
                // The end marker may share characters with the opening one
                // (`<!-->` is a whole comment), but not its `<`.
                if !lower[1..].contains(end) {
                    let start: String = open
                        .chars()
                        .take_while(|c| !c.is_whitespace())
                        .take(12)
                        .collect();
                    return Some(MarkdownError {
                        line: line_of(text, range.start),
                        message: format!(
                            "HTML block opened with `{start}` is never closed (expected `{end}`; everything after it would be read as HTML)"
                        ),
                    });
                }
            }
            _ => {}
        }
    }
    None
}

/// One `# CODE` section of a consolidated component file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section<'a> {
    /// The heading text as written (`C2`, `C2: Study buddy`).
    pub heading: String,
    /// 1-based line of the `# ` heading.
    pub line: usize,
    /// Everything after the heading line up to the next section, frontmatter included.
    pub text: &'a str,
    /// Byte offset of `text` in the file.
    pub offset: usize,
}

/// Splits a consolidated file into its H1 sections. `is_code` tells a section
/// heading (`# C1`) from any other H1. Returns the text before the first
/// section (which is not part of any component) and the sections.
///
/// A section's own frontmatter is skipped before looking for the next
/// heading: a YAML comment such as `# C2 is harder` must not start a section.
pub fn split_sections<'a>(
    text: &'a str,
    is_code: impl Fn(&str) -> bool,
) -> Result<(&'a str, Vec<Section<'a>>), MarkdownError> {
    let mut sections: Vec<Section<'a>> = Vec::new();
    let mut preamble_end = text.len();
    // Candidate H1s of the part of the file parsed last, with absolute offsets.
    let mut candidates: Vec<Heading> = shift(headings(text, 1), 0);
    let mut idx = 0;
    let mut open: Option<(String, usize, usize)> = None; // heading, line, body start
    // Lines are counted incrementally (headings come in order): a line_of
    // per heading would make a file of many sections quadratic.
    let (mut counted_to, mut counted_line) = (0usize, 1usize);
    loop {
        let next = candidates.get(idx).cloned();
        // Close the open section at the next heading (or the end of the file).
        let stop = next.as_ref().map_or(text.len(), |h| h.range.start);
        if let Some((heading, line, start)) = open.take() {
            sections.push(Section {
                heading,
                line,
                text: &text[start..stop],
                offset: start,
            });
        }
        let Some(h) = next else { break };
        idx += 1;
        counted_line += text.as_bytes()[counted_to..h.range.start]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        counted_to = h.range.start;
        let line = counted_line;
        if !is_code(&h.text) {
            if sections.is_empty() {
                // A title before the first section belongs to the preamble.
                continue;
            }
            return Err(MarkdownError {
                line,
                message: format!(
                    "heading `# {}` is not a component code (expected a section heading such as `# C2`, `# U1` or `# PT3`)",
                    h.text
                ),
            });
        }
        if sections.is_empty() {
            preamble_end = h.range.start;
        }
        let body_start = h.range.end;
        let fm = split_frontmatter(&text[body_start..]).map_err(|e| MarkdownError {
            line: line_of(text, body_start) + e.line - 1,
            message: e.message,
        })?;
        if let Some(yaml) = fm.yaml {
            let fm_end = body_start + fm.body_offset;
            // Drop headings that were really inside the YAML; re-parse the rest
            // when the YAML could have changed how markdown reads what follows.
            if may_open_block(yaml) {
                candidates = shift(headings(&text[fm_end..], 1), fm_end);
                idx = 0;
            } else {
                while candidates.get(idx).is_some_and(|c| c.range.start < fm_end) {
                    idx += 1;
                }
            }
        }
        open = Some((h.text.clone(), line, body_start));
    }
    let leading = |h: &str| -> String {
        h.trim()
            .chars()
            .take_while(char::is_ascii_alphanumeric)
            .collect::<String>()
            .to_ascii_uppercase()
    };
    let codes: std::collections::HashSet<String> =
        sections.iter().map(|s| leading(&s.heading)).collect();
    for s in &sections {
        // A section-shaped line inside a section's frontmatter is fine as a
        // YAML comment about a section the file has (`# C2 is harder`). One
        // naming a section the file lacks means this block's closing `---`
        // is missing and it swallowed that section, whose own `---` now
        // closes this block and whose YAML would be sent as prompt text.
        if let Ok(fm) = split_frontmatter(s.text)
            && let Some(yaml) = fm.yaml
            && let Some((at, line)) = heading_lines(yaml, &is_code)
                .find(|(_, l)| !codes.contains(&leading(l.trim_start().trim_start_matches('#'))))
        {
            let yaml_offset = yaml.as_ptr() as usize - s.text.as_ptr() as usize;
            return Err(MarkdownError {
                line: line_of(text, s.offset + yaml_offset + at),
                message: format!(
                    "`{line}` inside the frontmatter of `# {}` looks like a section heading; expected the frontmatter's closing `---` before it (a YAML comment may not start with a section code the file does not have)",
                    s.heading
                ),
            });
        }
        let body_offset = split_frontmatter(s.text).map_or(0, |fm| fm.body_offset);
        // An unclosed fence or HTML block is the cause; the loader reports it
        // with this section's name, which says more than "swallowed".
        if unclosed_block(&s.text[body_offset..]).is_some() {
            continue;
        }
        if let Some((at, line)) = swallowed_heading(&s.text[body_offset..], &is_code) {
            return Err(MarkdownError {
                line: line_of(text, s.offset + body_offset + at),
                message: format!(
                    "`{line}` looks like a section heading but is read as part of the section above it (an HTML block or code fence runs over it); expected a blank line before it, or the block closed"
                ),
            });
        }
    }
    Ok((&text[..preamble_end.min(text.len())], sections))
}

/// A line of `body` shaped like a section heading (`# C3`, up to three
/// spaces of indent) that markdown does not read as one because the block
/// above it (an HTML block without a blank line after it, an unclosed
/// comment) runs over it. Inside a code block such a line is just code.
/// Returns its byte offset and text.
fn swallowed_heading<'a>(
    body: &'a str,
    is_code: &'a impl Fn(&str) -> bool,
) -> Option<(usize, &'a str)> {
    let code_blocks: Vec<Range<usize>> = Parser::new_ext(body, Options::empty())
        .into_offset_iter()
        .filter_map(|(e, r)| matches!(e, Event::Start(Tag::CodeBlock(_))).then_some(r))
        .collect();
    heading_lines(body, is_code).find(|&(at, line)| {
        // In a code block a heading line is code, unless frontmatter follows
        // it: then a fence left open above was closed by a ``` in the next
        // section's YAML, and that YAML would be sent as this section's text.
        !code_blocks.iter().any(|r| r.contains(&at))
            || frontmatter_follows(&body[at + line.len()..])
    })
}

/// Whether `rest` (what follows a line) opens with a `---` line, after
/// blank lines.
fn frontmatter_follows(rest: &str) -> bool {
    rest.split('\n')
        .skip(1) // the remainder of the heading's own line
        .find(|l| !l.trim().is_empty())
        .is_some_and(|l| l.trim_end() == "---")
}

/// Lines of `text` shaped like an ATX section heading (`# C3`, up to three
/// spaces of indent) whose text `is_code` accepts, with their byte offsets.
fn heading_lines<'a>(
    text: &'a str,
    is_code: &'a impl Fn(&str) -> bool,
) -> impl Iterator<Item = (usize, &'a str)> + 'a {
    let mut offset = 0;
    text.split_inclusive('\n').filter_map(move |raw| {
        let at = offset;
        offset += raw.len();
        let line = raw.trim_end_matches(['\n', '\r']);
        let indent = line.len() - line.trim_start_matches(' ').len();
        let heading = line[indent..]
            .strip_prefix('#')
            .filter(|rest| rest.starts_with([' ', '\t']))
            .map(str::trim);
        (indent <= 3 && heading.is_some_and(is_code)).then_some((at, line))
    })
}

/// Whether a line of `yaml`, read as markdown, could open a block that runs
/// on past the YAML (a code fence or an HTML block) and so change where the
/// headings after it are. Only a line's start counts (after indentation and
/// list or quote markers): `age < 18` mid-line cannot, and re-parsing the
/// rest of the file for every such section made loading quadratic.
fn may_open_block(yaml: &str) -> bool {
    yaml.split(['\n', '\r']).any(|line| {
        let rest = line.trim_start_matches(|c: char| {
            c.is_whitespace()
                || c.is_ascii_digit()
                || matches!(c, '>' | '-' | '*' | '+' | '.' | ')')
        });
        rest.starts_with('<') || rest.starts_with("```") || rest.starts_with("~~~")
    })
}

fn shift(mut hs: Vec<Heading>, by: usize) -> Vec<Heading> {
    for h in &mut hs {
        h.range = h.range.start + by..h.range.end + by;
    }
    hs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontmatter_split_basic() {
        let fm = split_frontmatter("---\na: 1\n---\nbody\n").unwrap();
        assert_eq!(fm.yaml, Some("a: 1\n"));
        assert_eq!(fm.body, "body\n");
        assert_eq!(fm.yaml_line, 2);
    }

    #[test]
    fn frontmatter_after_blank_lines_and_crlf() {
        let fm = split_frontmatter("\n\r\n  \n---\r\na: 1\r\n---\r\nbody").unwrap();
        assert_eq!(fm.yaml, Some("a: 1\r\n"));
        assert_eq!(fm.body, "body");
        assert_eq!(fm.yaml_line, 5);
    }

    #[test]
    fn no_frontmatter_when_text_comes_first() {
        let fm = split_frontmatter("hello\n---\na: 1\n---\n").unwrap();
        assert_eq!(fm.yaml, None);
        assert_eq!(fm.body, "hello\n---\na: 1\n---\n");
    }

    #[test]
    fn unclosed_frontmatter_is_an_error() {
        let err = split_frontmatter("\n---\na: 1\nbody\n").unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.message.contains("never closed"));
    }

    #[test]
    fn bom_is_skipped() {
        let fm = split_frontmatter("\u{feff}---\na: 1\n---\nx").unwrap();
        assert_eq!(fm.yaml, Some("a: 1\n"));
        assert_eq!(fm.body, "x");
    }

    #[test]
    fn tag_names() {
        assert_eq!(tag_name("User input"), "user_input");
        assert_eq!(tag_name("User's input"), "users_input");
        assert_eq!(tag_name("User\u{2019}s input"), "users_input");
        assert_eq!(tag_name("  --Your job!! (v2)  "), "your_job_v2");
        assert_eq!(tag_name("Ünïcode & more"), "n_code_more");
        assert_eq!(tag_name("???"), "");
    }

    #[test]
    fn h2_to_xml_with_preamble_h3_and_fence() {
        let body = "Intro text.\n\n## Your job\n\nBe kind.\n\n### Detail\n- a\n- b\n\n## Example\n\n```md\n## not a heading\n---\nx: 1\n---\n```\n";
        let xml = to_xml(body).unwrap();
        assert_eq!(
            xml,
            "Intro text.\n\n<your_job>\nBe kind.\n\n### Detail\n- a\n- b\n</your_job>\n\n<example>\n```md\n## not a heading\n---\nx: 1\n---\n```\n</example>"
        );
    }

    #[test]
    fn no_h2_keeps_text() {
        assert_eq!(to_xml("\n\nJust *text*.\n\n").unwrap(), "Just *text*.");
    }

    #[test]
    fn h2_in_blockquote_is_not_a_section() {
        let xml = to_xml("## A\n> ## quoted\n> text\n").unwrap();
        assert_eq!(xml, "<a>\n> ## quoted\n> text\n</a>");
    }

    #[test]
    fn empty_section_is_an_empty_tag() {
        assert_eq!(
            to_xml("## A\n\n## B\ntext\n").unwrap(),
            "<a>\n\n</a>\n\n<b>\ntext\n</b>"
        );
    }

    #[test]
    fn untaggable_heading_is_an_error() {
        let err = to_xml("text\n\n## ???\nx\n").unwrap_err();
        assert_eq!(err.line, 3);
    }

    #[test]
    fn setext_h2_is_a_section() {
        assert_eq!(
            to_xml("User input\n---\nhello\n").unwrap(),
            "<user_input>\nhello\n</user_input>"
        );
    }

    #[test]
    fn only_a_line_start_in_yaml_can_open_a_block() {
        assert!(!may_open_block("note: ages < 18\nrange: 1 <= x"));
        assert!(!may_open_block("code: a ``` b"));
        for y in [
            "<div>",
            "  <!-- x",
            "a: 1\n```",
            "a: 1\r~~~",
            "- <b>",
            "> <div>",
            "1. <p>",
            "- ```",
        ] {
            assert!(may_open_block(y), "{y:?}");
        }
        // Mid-line `<` never changes the sections after it.
        let text = "# C1\n---\nnote: ages < 18\n---\nbody one\n# C2\n---\na: 1\n---\nbody two\n";
        let (_, secs) = split_sections(text, is_c).unwrap();
        assert_eq!(secs.len(), 2);
        // Read whole, `<div>` opens an HTML block that runs to the next blank
        // line and swallows `# C2`; the re-parse after the YAML finds it.
        let text = "# C1\n---\n<div>\n---\nbody\n# C2\nbody two\n";
        let (_, secs) = split_sections(text, is_c).unwrap();
        assert_eq!(
            secs.iter().map(|s| s.heading.as_str()).collect::<Vec<_>>(),
            ["C1", "C2"]
        );
    }

    #[test]
    fn headings_ended_by_a_lone_cr_do_not_overlap() {
        // Found by fuzzing: the first heading's range ran past the second's start.
        let text = "x\r# C1\r# C2\rbody";
        let hs = headings(text, 1);
        assert_eq!(hs.len(), 2);
        assert!(hs[0].range.end <= hs[1].range.start);
        let (_, secs) = split_sections(text, is_c).unwrap();
        assert_eq!(secs.len(), 2);
        assert_eq!(lone_cr_line(text), Some(1));
        assert_eq!(lone_cr_line("a\r\nb\n"), None);
    }

    #[test]
    fn unclosed_fence_is_an_error() {
        let err = to_xml("## A\nx\n\n```\ncode\n## B\ny\n").unwrap_err();
        assert_eq!(err.line, 4);
        assert!(err.message.contains("never closed"), "{}", err.message);
        let err = to_xml("~~~~\n~~~\n").unwrap_err();
        assert_eq!(err.line, 1);
        assert!(to_xml("```\n").is_err());
        // Closed fences, longer closers and fences in containers are fine.
        assert!(to_xml("```\ncode\n```\n").is_ok());
        assert!(to_xml("  ````md\n```\n`````   \n## B\ny").is_ok());
        assert!(to_xml("> ```\n> code\n\nafter\n").is_ok());
    }

    #[test]
    fn unclosed_html_block_is_an_error() {
        let err = to_xml("## A\nx\n\n<!-- note\n## B\ny\n").unwrap_err();
        assert_eq!(err.line, 4);
        assert!(err.message.contains("`-->`"), "{}", err.message);
        assert!(to_xml("<pre>\nx\n").is_err());
        assert!(to_xml("<!-->\n").is_ok(), "an empty comment closes itself");
        assert!(to_xml("<!-- a -->\n## B\ny").is_ok());
        assert!(to_xml("<!--\na\n-->\n## B\ny").is_ok());
        assert!(
            to_xml("<div>\nx\n").is_ok(),
            "ends at a blank line or the end"
        );
        assert!(to_xml("<pre>x</pre>\n").is_ok());
    }

    fn is_c(s: &str) -> bool {
        s.starts_with('C') && s[1..].chars().next().is_some_and(|c| c.is_ascii_digit())
    }

    #[test]
    fn sections_skip_yaml_comments_and_fences() {
        let text = "# Conditions\n\n# C1\n---\n# C2 is a yaml comment\ndifficulty: 2\n---\n## A\nx\n\n```\n# C9\n```\n\n# C2\n\n---\ndifficulty: 1\n---\n\n## B\ny\n";
        let (pre, secs) = split_sections(text, is_c).unwrap();
        assert_eq!(pre, "# Conditions\n\n");
        assert_eq!(secs.len(), 2);
        assert_eq!(secs[0].heading, "C1");
        assert_eq!(secs[0].line, 3);
        assert!(secs[0].text.contains("# C9"));
        assert_eq!(secs[1].heading, "C2");
        assert!(secs[1].text.starts_with("\n---\ndifficulty: 1"));
    }

    #[test]
    fn sections_reparse_after_yaml_with_fence() {
        let text = "# C1\n---\nnote: |\n  ```\n---\nbody\n# C2\nz\n";
        let (_, secs) = split_sections(text, is_c).unwrap();
        assert_eq!(secs.len(), 2);
        assert_eq!(secs[1].heading, "C2");
        assert_eq!(secs[1].text, "z\n");
    }

    #[test]
    fn heading_swallowed_by_an_html_block_is_an_error() {
        // `<b>` starts an HTML block that runs to the next blank line, so
        // markdown reads `# C2` and its frontmatter as C1's text.
        let text = "# C1\n## A\nx\n\n<b>\n# C2\n---\nseverity: 2\n---\n## A\ny\n";
        let err = split_sections(text, is_c).unwrap_err();
        assert_eq!(err.line, 6);
        assert!(err.message.contains("`# C2`"), "{}", err.message);
        // A commented-out section would be sent as text: also refused.
        assert!(split_sections("# C1\n## A\nx\n\n<!--\n# C2\n## A\ny\n-->\n", is_c).is_err());
        // In a closed code fence it is only code.
        let (_, secs) = split_sections("# C1\n## A\n```\n# C2\n```\n", is_c).unwrap();
        assert_eq!(secs.len(), 1);
        // Unless frontmatter follows it: C1's fence was left open and a ```
        // in C2's YAML closed it (found by fuzzing).
        let text = "# C1\n## A\n```\n# C2\n\n---\nnote: |\n  ```\n---\n## A\ny\n";
        let err = split_sections(text, is_c).unwrap_err();
        assert_eq!(err.line, 4);
    }

    #[test]
    fn unclosed_section_frontmatter_swallowing_sections_is_an_error() {
        // C1's block never closes: C2's heading reads as a YAML comment and
        // C2's opening `---` closes C1's block, so C2's YAML would be sent.
        let text = "# C1\n---\nnote: |\n# C2\n---\nseverity: 9\n---\n## A\ny\n";
        let err = split_sections(text, is_c).unwrap_err();
        assert_eq!(err.line, 4);
        assert!(
            err.message
                .contains("`# C2` inside the frontmatter of `# C1`"),
            "{}",
            err.message
        );
    }

    #[test]
    fn stray_h1_after_first_section_is_an_error() {
        let err = split_sections("# C1\nx\n# C 2\ny\n", is_c).unwrap_err();
        assert_eq!(err.line, 3);
    }
}
