//! Invariant checks shared by the fuzz targets (`fuzz/fuzz_targets/*`) and by
//! the regression test that replays `fuzz/regressions/*` in CI
//! (`tests/it/fuzz_regressions.rs` includes this file by path), so CI checks
//! exactly what the fuzzer checked without needing cargo-fuzz or nightly.
//!
//! Each check panics on a violated invariant, which is what libFuzzer
//! records as a crash. Structured inputs are decoded by hand from the raw
//! bytes (fields separated by 0xFF, a byte that never occurs in UTF-8) so
//! that no `arbitrary` dependency is needed in the main crate.

use std::path::Path;

use helmbench::benchmark::ComponentKind;
use helmbench::content;
use helmbench::content::markdown::{
    self, headings, line_of, split_frontmatter, split_sections, tag_name,
};

/// A marker put into every generated YAML block and removed from every
/// generated body: finding it in a prompt means frontmatter leaked.
const SENTINEL: &str = "zqy";

fn fields(data: &[u8]) -> Vec<String> {
    data.split(|&b| b == 0xFF)
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect()
}

/// Drops every occurrence of the sentinel, in any case, from generated text.
fn scrub_sentinel(s: &str) -> String {
    let mut out = s.to_string();
    loop {
        let lower = out.to_ascii_lowercase();
        let Some(i) = lower.find(SENTINEL) else {
            return out;
        };
        out.replace_range(i..i + SENTINEL.len(), "");
    }
}

/// YAML lines that would close the block early (`---`, `...`) are dropped,
/// as is a stray `\r` that would make a line look like one; every line ends in `\n`.
fn clean_yaml(y: &str) -> String {
    let mut out = String::new();
    // Scrub first: removing the sentinel can itself form a `---` line.
    for line in scrub_sentinel(y).split('\n') {
        let t = line.trim_end();
        if t == "---" || t == "..." {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn with_newline(mut s: String) -> String {
    if !s.is_empty() && !s.ends_with('\n') {
        s.push('\n');
    }
    s
}

/// The frontmatter splitter on any text, and on a generated
/// `blank lines + --- yaml --- body` document it must split exactly.
pub fn frontmatter(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        check_split(text);
    }
    let f = fields(data);
    if f.len() < 3 {
        return;
    }
    let blanks: String = f[0]
        .chars()
        .filter(|c| matches!(c, ' ' | '\t' | '\n'))
        .collect();
    // Blank lines only: a line of spaces after the last `\n` would sit on the
    // fence's own line.
    let blanks = match blanks.rfind('\n') {
        Some(i) => blanks[..=i].to_string(),
        None => String::new(),
    };
    let bom = if f[0].starts_with('!') {
        "\u{feff}"
    } else {
        ""
    };
    let yaml = format!("{SENTINEL}: 1\n{}", clean_yaml(&f[1]));
    let body = scrub_sentinel(&f[2]);
    let text = format!("{bom}{blanks}---\n{yaml}---\n{body}");
    let fm = split_frontmatter(&text).expect("a closed block must split");
    assert_eq!(fm.yaml, Some(yaml.as_str()), "yaml of {text:?}");
    assert_eq!(fm.body, body, "body of {text:?}");
    assert_eq!(
        fm.yaml_line,
        blanks.matches('\n').count() + 2,
        "yaml_line of {text:?}"
    );
    if let Ok(xml) = markdown::to_xml(fm.body) {
        assert!(
            !xml.to_ascii_lowercase().contains(SENTINEL),
            "frontmatter leaked into {xml:?} from {text:?}"
        );
    }
}

/// Structural invariants of `split_frontmatter` on arbitrary text.
fn check_split(text: &str) {
    match split_frontmatter(text) {
        Ok(fm) => {
            assert!(fm.body_offset <= text.len());
            assert_eq!(fm.body, &text[fm.body_offset..]);
            if let Some(yaml) = fm.yaml {
                let start = yaml.as_ptr() as usize - text.as_ptr() as usize;
                assert!(start + yaml.len() <= fm.body_offset);
                assert_eq!(line_of(text, start), fm.yaml_line);
                // Only blank lines (and a BOM) precede the opening fence.
                let before = text[..start].trim_start_matches('\u{feff}');
                let mut lines: Vec<&str> = before.split('\n').collect();
                lines.pop(); // after the fence's newline
                let fence = lines.pop().expect("an opening fence line");
                assert_eq!(fence.trim_end(), "---");
                assert!(lines.iter().all(|l| l.trim().is_empty()));
                // The block holds no closing line of its own.
                assert!(
                    yaml.split('\n')
                        .all(|l| l.trim_end() != "---" && l.trim_end() != "...")
                );
            } else {
                assert_eq!(fm.body_offset, 0);
            }
        }
        Err(e) => {
            assert!(e.line >= 1 && e.line <= line_of(text, text.len()));
            assert!(e.message.contains("never closed"));
        }
    }
}

/// `to_xml` on any text: every H2 section becomes a balanced tag pair around
/// its exact source text, in order, and nothing else is added; a split-off
/// frontmatter block never reaches the output.
pub fn to_xml(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    check_xml(&text);
    // After a split, every output line is a tag line made from an H2 or a
    // line of the body: nothing of the YAML (or anything else) can appear.
    // (A substring test would be fooled by the generated tags themselves.)
    if let Ok(fm) = split_frontmatter(&text)
        && fm.yaml.is_some()
        && let Ok(xml) = markdown::to_xml(fm.body)
    {
        check_xml(fm.body);
        let body_lines: std::collections::HashSet<&str> =
            fm.body.lines().map(str::trim_end).collect();
        let tags: std::collections::HashSet<String> = headings(fm.body, 2)
            .iter()
            .flat_map(|h| {
                let t = tag_name(&h.text);
                [format!("<{t}>"), format!("</{t}>")]
            })
            .collect();
        for line in xml.lines() {
            assert!(
                line.is_empty() || tags.contains(line) || body_lines.contains(line.trim_end()),
                "output line {line:?} is neither a tag nor a body line of {text:?}"
            );
        }
    }
}

fn check_xml(body: &str) {
    let total_lines = line_of(body, body.len());
    let xml = match markdown::to_xml(body) {
        Ok(x) => x,
        Err(e) => {
            assert!(
                e.line >= 1 && e.line <= total_lines,
                "error line {} outside 1..={total_lines}: {}",
                e.line,
                e.message
            );
            return;
        }
    };
    assert_eq!(xml, xml.trim_end(), "trailing whitespace");
    assert!(!xml.starts_with('\n'), "leading blank line");
    let h2s = headings(body, 2);
    let first = h2s.first().map_or(body.len(), |h| h.range.start);
    let preamble = markdown::trim_blank_lines(&body[..first]);
    let mut pos = 0;
    if !preamble.is_empty() {
        assert!(xml.starts_with(preamble), "preamble changed");
        pos = preamble.len();
    }
    for (i, h) in h2s.iter().enumerate() {
        let end = h2s.get(i + 1).map_or(body.len(), |n| n.range.start);
        assert!(h.range.start < h.range.end && h.range.end <= end.max(h.range.end));
        let tag = tag_name(&h.text);
        assert!(!tag.is_empty());
        assert!(
            tag.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        );
        assert!(!tag.starts_with('_') && !tag.ends_with('_'));
        let sep = if pos == 0 { "" } else { "\n\n" };
        let section = markdown::trim_blank_lines(&body[h.range.end.min(end)..end]);
        let piece = format!("{sep}<{tag}>\n{section}\n</{tag}>");
        assert!(
            xml[pos..].starts_with(&piece),
            "section `{}` is not a balanced <{tag}> pair at byte {pos} of {xml:?}",
            h.text
        );
        pos += piece.len();
    }
    assert_eq!(pos, xml.len(), "unexplained output after the last section");
}

fn is_code(h: &str) -> bool {
    let code: String = h
        .trim()
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    helmbench::benchmark::codes::parse_segment(&code.to_ascii_uppercase()).is_some()
}

/// The component-file parser: sections cover the file in order without
/// overlap, and no section's frontmatter ever reaches a component prompt.
pub fn sections(data: &[u8]) {
    let raw = String::from_utf8_lossy(data);
    check_sections(&raw);
    let f = fields(data);
    if f.len() < 2 {
        return;
    }
    // preamble, then (yaml, body) pairs: `# C<n>` sections with frontmatter
    // carrying the sentinel whenever the yaml field is not empty.
    let mut text: String = with_newline(scrub_sentinel(&f[0]).replace('#', ""));
    for (i, pair) in f[1..].chunks(2).enumerate() {
        text.push_str(&format!("# C{}\n", i + 1));
        if !pair[0].is_empty() {
            text.push_str(&format!(
                "---\n{SENTINEL}{i}: 1\n{}---\n",
                clean_yaml(&pair[0])
            ));
        }
        if let Some(body) = pair.get(1) {
            text.push_str(&with_newline(scrub_sentinel(body)));
        }
    }
    check_sections(&text);
    if markdown::lone_cr_line(&text).is_some() {
        // The loader refuses such a file before parsing it (`read_text`).
        return;
    }
    let path = Path::new("conditions.md");
    let mut errors = Vec::new();
    let comps = content::parse_consolidated(
        path,
        &text,
        "P1-B1-S1",
        ComponentKind::Condition,
        &mut errors,
    );
    for c in &comps {
        assert!(
            !c.prompt.to_ascii_lowercase().contains(SENTINEL),
            "frontmatter leaked into {}'s prompt {:?} from {text:?}",
            c.code,
            c.prompt
        );
    }
}

fn check_sections(text: &str) {
    let total_lines = line_of(text, text.len());
    match split_sections(text, is_code) {
        Ok((pre, secs)) => {
            assert!(text.starts_with(pre));
            let mut pos = pre.len();
            for s in &secs {
                // The heading sits between the previous piece and this one.
                assert!(
                    s.offset > pos,
                    "section {} overlaps what precedes it",
                    s.heading
                );
                assert_eq!(
                    line_of(text, pos),
                    s.line,
                    "heading of {} is not where the previous piece ends",
                    s.heading
                );
                let between = &text[pos..s.offset];
                assert!(
                    between.contains('#') || between.contains('='),
                    "{between:?}"
                );
                assert_eq!(s.text, &text[s.offset..s.offset + s.text.len()]);
                pos = s.offset + s.text.len();
            }
            if secs.is_empty() {
                assert_eq!(pre, text);
            } else {
                assert_eq!(pos, text.len(), "sections do not reach the end of the file");
            }
        }
        Err(e) => {
            assert!(
                e.line >= 1 && e.line <= total_lines,
                "error line {}",
                e.line
            );
        }
    }
    let mut errors = Vec::new();
    let path = Path::new("perturbations.md");
    let comps = content::parse_consolidated(
        path,
        text,
        "P1-B1-S1",
        ComponentKind::Perturbation,
        &mut errors,
    );
    for e in &errors {
        assert_eq!(e.path, path);
        if let Some(l) = e.line {
            assert!(l >= 1 && l <= total_lines + 1, "error line {l}: {e}");
        }
    }
    for c in &comps {
        assert!(!c.prompt.is_empty());
        assert!((-10.0..=10.0).contains(&c.severity));
    }
}
