//! The author's lint behind `helmbench check` (SPEC §10): slips in content
//! that loads without error but silently biases scores or sends the model
//! something the author did not mean. Runs on a loaded [`Benchmark`]; every
//! warning names its file, line and section like a content error.

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::error::ContentError;
use super::markdown;
use crate::benchmark::cases::{Selector, TestCase};
use crate::benchmark::{Benchmark, Component, Scenario};

/// What a warning is about; the JSON `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WarningKind {
    /// An expected or required value the schema's `enum` cannot return.
    ValueNotInSchema,
    /// An option-like token in the prompt that the schema cannot return,
    /// close to one it can.
    OptionNotInSchema,
    /// Positive and negative base severities judged by one expectation.
    MixedSign,
    /// A perturbation sent as bare text while its siblings use H2 sections.
    BarePerturbation,
    /// An H2 section with nothing under it.
    EmptySection,
    /// An HTML or Obsidian comment that reaches the model.
    CommentSent,
    /// An evaluation key written at the top of a component's frontmatter,
    /// where it has no effect (`category: TASK` instead of
    /// `evaluation: {expected: TASK}`).
    IgnoredKey,
    /// A folder under `scenarios/` skipped because its name holds a
    /// scenario path among other words (`Scenario-P1-B7-S1`).
    SkippedFolder,
}

/// One lint finding.
#[derive(Debug, Clone, PartialEq)]
pub struct Warning {
    pub kind: WarningKind,
    pub at: ContentError,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.at)
    }
}

/// Every warning for the scenarios matching `selectors` (all when none).
pub fn lint(b: &Benchmark, selectors: &[Selector]) -> Vec<Warning> {
    // Whatever the selectors: the folder's scenario is in none of them.
    let mut out: Vec<Warning> = b
        .skipped_folders
        .iter()
        .map(|(dir, why)| Warning {
            kind: WarningKind::SkippedFolder,
            at: ContentError::new(dir, why.clone()),
        })
        .collect();
    for s in &b.scenarios {
        if !selectors.is_empty() && !selectors.iter().any(|x| x.may_match_scenario(&s.code)) {
            continue;
        }
        lint_scenario(s, &mut out);
    }
    out
}

fn lint_scenario(s: &Scenario, out: &mut Vec<Warning>) {
    let components = || {
        s.conditions
            .iter()
            .chain(&s.user_contexts)
            .chain(&s.perturbations)
    };
    let enums = s.schema().map(schema_enums).unwrap_or_default();

    // Values the check wants but the schema can never return.
    if let (Some(field), Some(schema)) = (s.evaluation.field(), s.schema())
        && let Some(allowed) = field_enum(schema, field)
    {
        for v in s.evaluation.wanted_values() {
            if !allowed.contains(v) {
                let line = line_containing(&s.prompt_file, v);
                out.push(warn(
                    WarningKind::ValueNotInSchema,
                    &s.prompt_file,
                    line,
                    Some("frontmatter `evaluation`".into()),
                    not_in_enum(v, field, &allowed),
                ));
            }
        }
        for c in components() {
            let Some(o) = &c.overrides else { continue };
            for v in o.expected.iter().chain(&o.required).flatten() {
                if !allowed.contains(v) {
                    out.push(warn(
                        WarningKind::ValueNotInSchema,
                        &c.source,
                        Some(c.line),
                        Some(c.section_label()),
                        not_in_enum(v, field, &allowed),
                    ));
                }
            }
        }
    }

    // Text sent to the model: option-like tokens, empty sections, comments.
    let scenario_section = None;
    lint_text(
        &s.prompt_file,
        &s.body,
        s.body_line,
        scenario_section,
        &enums,
        out,
    );
    for c in components() {
        lint_text(
            &c.source,
            &c.body,
            c.body_line,
            Some(c.section_label()),
            &enums,
            out,
        );
    }
    for r in &s.rubrics {
        // The judge's options are not the model's schema: no token check.
        lint_text(&r.file, &r.body, r.body_line, None, &BTreeSet::new(), out);
    }

    // Perturbations sent bare while their siblings are tagged.
    let tagged = |c: &Component| !markdown::headings(&c.body, 2).is_empty();
    if let Some(example) = s.perturbations.iter().find(|c| tagged(c)) {
        for c in s
            .perturbations
            .iter()
            .filter(|c| !c.is_empty() && !tagged(c))
        {
            out.push(warn(
                WarningKind::BarePerturbation,
                &c.source,
                Some(c.line),
                Some(c.section_label()),
                format!(
                    "perturbation {} has no H2 heading, so it is sent as bare text while {} is wrapped in tags (expected e.g. `## User input` above its text)",
                    c.code, example.code
                ),
            ));
        }
    }

    // Evaluation keys at the top of a component's frontmatter do nothing; an
    // author who wrote `category: TASK` on a control meant an override.
    for c in components() {
        for key in [
            "category",
            "expected",
            "required",
            "min_correct",
            "max_incorrect",
        ] {
            if let Some(v) = c.metadata.get(key) {
                let key_for = if key == "category" { "expected" } else { key };
                out.push(warn(
                    WarningKind::IgnoredKey,
                    &c.source,
                    Some(c.line),
                    Some(c.section_label()),
                    format!(
                        "`{key}: {v}` in a {}'s frontmatter has no effect (expected `evaluation: {{{key_for}: {v}}}` to override what its test cases expect)",
                        c.kind.as_str()
                    ),
                ));
            }
        }
    }

    mixed_sign(s, out);
}

/// A deterministic scenario whose test cases include signals (`base > 0`)
/// and controls (`base < 0`) under the scenario's own expectation, with no
/// override: one of the two groups is scored against the wrong answer.
fn mixed_sign(s: &Scenario, out: &mut Vec<Warning>) {
    if s.evaluation.is_judged() {
        return;
    }
    // The base does not depend on the condition, so one condition without
    // an override stands for all of them: the lint stays linear in
    // contexts x perturbations on a 110,000-test-case dry-run.
    let Some(condition) = s.conditions.iter().find(|c| c.overrides.is_none()) else {
        return;
    };
    let contexts = std::iter::once(None).chain(s.user_contexts.iter().map(Some));
    let (mut signal, mut control) = (None, None);
    'cases: for user_context in contexts.filter(|u| u.is_none_or(|u| u.overrides.is_none())) {
        for perturbation in s.perturbations.iter().filter(|p| p.overrides.is_none()) {
            let case = TestCase {
                scenario: s,
                condition,
                user_context,
                perturbation,
            };
            let base = case.base_severity();
            if base == 0.0 {
                continue;
            }
            let slot = if base > 0.0 {
                &mut signal
            } else {
                &mut control
            };
            slot.get_or_insert_with(|| format!("{} at {base:+}", case.code()));
            if signal.is_some() && control.is_some() {
                break 'cases;
            }
        }
    }
    if let (Some(pos), Some(neg)) = (signal, control) {
        let wanted = s.evaluation.wanted_values().join(", ");
        out.push(warn(
            WarningKind::MixedSign,
            &s.prompt_file,
            line_containing(&s.prompt_file, "evaluation")
                .or_else(|| line_containing(&s.prompt_file, "category")),
            Some("frontmatter `evaluation`".into()),
            format!(
                "signals ({pos}) and controls ({neg}) are judged by the same expectation `{wanted}`, so one group is scored against the wrong answer (expected an `evaluation:` override in the controls' frontmatter, e.g. `evaluation: {{expected: ...}}`)"
            ),
        ));
    }
}

/// Option-like tokens, empty H2 sections and comments in text sent to a model.
fn lint_text(
    path: &Path,
    body: &str,
    first_line: usize,
    section: Option<String>,
    enums: &BTreeSet<String>,
    out: &mut Vec<Warning>,
) {
    let line_at = |offset: usize| first_line + markdown::line_of(body, offset) - 1;

    let h2s = markdown::headings(body, 2);
    for (i, h) in h2s.iter().enumerate() {
        let end = h2s.get(i + 1).map_or(body.len(), |n| n.range.start);
        if markdown::trim_blank_lines(&body[h.range.end.min(end)..end]).is_empty() {
            out.push(warn(
                WarningKind::EmptySection,
                path,
                Some(line_at(h.range.start)),
                section.clone(),
                format!(
                    "section `## {}` is empty, so the model gets an empty <{}> tag (expected text under it, or remove the heading)",
                    h.text,
                    markdown::tag_name(&h.text)
                ),
            ));
        }
    }

    for (open, close, what) in [
        ("<!--", "-->", "HTML comment"),
        ("%%", "%%", "Obsidian comment"),
    ] {
        let mut from = 0;
        while let Some(start) = body[from..].find(open).map(|i| from + i) {
            let after = start + open.len();
            let end = body[after..]
                .find(close)
                .map_or(body.len(), |i| after + i + close.len());
            out.push(warn(
                WarningKind::CommentSent,
                path,
                Some(line_at(start)),
                section.clone(),
                format!(
                    "{what} `{}` is sent to the model as written (expected it removed, or moved to a README)",
                    crate::domain::excerpt(&body[start..end], 60)
                ),
            ));
            from = end;
        }
    }

    if enums.is_empty() {
        return;
    }
    let mut seen = BTreeSet::new();
    for (offset, token) in option_tokens(body) {
        if enums.contains(token) || !seen.insert(token) {
            continue;
        }
        if let Some(close) = closest(token, enums) {
            out.push(warn(
                WarningKind::OptionNotInSchema,
                path,
                Some(line_at(offset)),
                section.clone(),
                format!(
                    "`{token}` looks like an option but the schema cannot return it; did you mean `{close}`? (the model is told to use a value it cannot give)"
                ),
            ));
        }
    }
}

/// Upper-case tokens that look like option values (`HANDOFF`, `META_INQUIRY`),
/// with their byte offsets.
fn option_tokens(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        match (start, is_word(c)) {
            (None, true) => start = Some(i),
            (Some(s), false) => {
                let t = &text[s..i];
                if t.len() >= 5
                    && t.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                    && t.chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                {
                    out.push((s, t));
                }
                start = None;
            }
            _ => {}
        }
    }
    out.into_iter()
}

/// The enum value a token is most likely a misspelling of: one edit away for
/// short tokens, two for long ones.
fn closest<'a>(token: &str, enums: &'a BTreeSet<String>) -> Option<&'a str> {
    let budget = if token.len() >= 9 { 2 } else { 1 };
    enums
        .iter()
        .map(|e| (strsim::levenshtein(token, e), e))
        .filter(|(d, _)| *d > 0 && *d <= budget)
        .min()
        .map(|(_, e)| e.as_str())
}

/// Every string value of every `enum` in a schema.
fn schema_enums(schema: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![schema];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(m) => {
                if let Some(Value::Array(items)) = m.get("enum") {
                    out.extend(items.iter().filter_map(Value::as_str).map(str::to_string));
                }
                stack.extend(m.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    out
}

/// The `enum` of a top-level field (or of its list items), if it has one.
fn field_enum(schema: &Value, field: &str) -> Option<BTreeSet<String>> {
    let prop = schema.get("properties")?.get(field)?;
    let enum_of = |p: &Value| {
        p.get("enum").and_then(Value::as_array).map(|vals| {
            vals.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect::<BTreeSet<_>>()
        })
    };
    enum_of(prop).or_else(|| prop.get("items").and_then(enum_of))
}

fn not_in_enum(value: &str, field: &str, allowed: &BTreeSet<String>) -> String {
    let list: Vec<&str> = allowed.iter().map(String::as_str).collect();
    format!(
        "`{value}` is not among the values the schema allows for `{field}` ({}), so no reply can match it",
        list.join(", ")
    )
}

/// The first line of a file containing `needle`, for warnings about
/// frontmatter values (the loader keeps values, not their lines).
fn line_containing(path: &Path, needle: &str) -> Option<usize> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().position(|l| l.contains(needle)).map(|i| i + 1)
}

fn warn(
    kind: WarningKind,
    path: &Path,
    line: Option<usize>,
    section: Option<String>,
    message: String,
) -> Warning {
    let mut at = ContentError::new(path, message);
    at.line = line;
    at.section = section;
    Warning { kind, at }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_tokens_are_upper_case_words_of_five_or_more() {
        let found: Vec<&str> =
            option_tokens("Use HANDOFF or META_ENQUIRY, not Task or TASK or X_1.")
                .map(|(_, t)| t)
                .collect();
        assert_eq!(found, ["HANDOFF", "META_ENQUIRY"]);
    }

    #[test]
    fn closest_allows_one_edit_for_short_and_two_for_long_tokens() {
        let enums: BTreeSet<String> = ["META_INQUIRY", "HANDOFF", "CONTINUE"]
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(closest("META_ENQUIRY", &enums), Some("META_INQUIRY"));
        assert_eq!(closest("HANDOF", &enums), Some("HANDOFF"));
        assert_eq!(closest("HANDOFF", &enums), None, "exact values are fine");
        assert_eq!(
            closest("HNDOFX", &enums),
            None,
            "two edits on a short token"
        );
        assert_eq!(closest("IMPORTANT", &enums), None);
    }

    #[test]
    fn schema_enums_walks_nested_schemas() {
        let schema = serde_json::json!({"properties": {"a": {"enum": ["X"]},
            "b": {"type": "array", "items": {"enum": ["Y", "Z"]}}}});
        let all: Vec<String> = schema_enums(&schema).into_iter().collect();
        assert_eq!(all, ["X", "Y", "Z"]);
        assert_eq!(field_enum(&schema, "b").unwrap().len(), 2);
        assert!(field_enum(&schema, "c").is_none());
    }
}
