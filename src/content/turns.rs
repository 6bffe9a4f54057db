//! `turns.md` (issue 42): a conversation's later messages, one `# T1`,
//! `# T2`, … section each (or `turns/T1.md`, …), read exactly like every
//! component (frontmatter stripped, H2 → XML), then given their role and
//! checked as a script: every problem an author can make is named here,
//! with the file, line and section, before anything is sent.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use super::components::load_components;
use super::error::ContentError;
use super::files::json_type;
use super::overrides::parse_override;
use crate::benchmark::{Component, ComponentKind, Evaluation, Rubric, Turn, TurnRole};

/// The frontmatter keys a turn takes.
const TURN_KEYS: [&str; 6] = [
    "role",
    "pressure",
    "judge",
    "evaluation",
    "criteria",
    "perturbations",
];

/// What a scenario's turns are checked against.
pub(super) struct Against<'a> {
    pub evaluation: &'a Evaluation,
    pub perturbations: &'a [Component],
    pub rubrics: &'a [Rubric],
}

/// The scenario's turns, in order (empty without `turns.md`); None when
/// any has a problem (each one pushed to `errors`).
pub(super) fn load_turns(
    dir: &Path,
    scenario: &str,
    against: &Against<'_>,
    errors: &mut Vec<ContentError>,
) -> Option<Vec<Turn>> {
    let components = load_components(dir, scenario, ComponentKind::Turn, errors)?;
    let before = errors.len();
    let mut turns = Vec::with_capacity(components.len());
    for (i, c) in components.into_iter().enumerate() {
        let want = format!("T{}", i + 1);
        if c.code != want {
            errors.push(at(
                &c,
                format!(
                    "turn {} is out of order (expected {want}: turns run T1, T2, … with none left out)",
                    c.code
                ),
            ));
            continue;
        }
        if let Some(t) = turn(c, against, errors) {
            turns.push(t);
        }
    }
    if errors.len() != before {
        return None;
    }
    check_shapes(&turns, against.perturbations, errors);
    (errors.len() == before).then_some(turns)
}

/// An error at `c`'s section (file, line, heading); personas.rs shares it.
pub(super) fn at(c: &Component, message: String) -> ContentError {
    ContentError::new(&c.source, message)
        .at(c.line)
        .in_section(c.section_label())
}

/// One turn from its component: its keys read and checked on their own.
fn turn(c: Component, against: &Against<'_>, errors: &mut Vec<ContentError>) -> Option<Turn> {
    let before = errors.len();
    let meta = c.metadata.as_object().cloned().unwrap_or_default();
    for key in meta.keys() {
        if !TURN_KEYS.contains(&key.as_str()) {
            errors.push(at(
                &c,
                format!(
                    "unknown key `{key}` in a turn's frontmatter (expected {})",
                    TURN_KEYS.join(", ")
                ),
            ));
        }
    }
    let role = match meta.get("role") {
        None | Some(Value::Null) => TurnRole::User,
        Some(Value::String(r)) if r == "user" => TurnRole::User,
        Some(Value::String(r)) if r == "assistant" => TurnRole::Assistant,
        Some(Value::String(r)) if r == "perturbation" => TurnRole::Perturbation,
        Some(other) => {
            errors.push(at(
                &c,
                format!("`role` is {other} (expected user, assistant or perturbation)"),
            ));
            TurnRole::User
        }
    };
    let pressure = match meta.get("pressure") {
        None | Some(Value::Null) => None,
        Some(Value::String(p)) if !p.trim().is_empty() => Some(p.trim().to_string()),
        Some(other) => {
            errors.push(at(
                &c,
                format!("`pressure` is {other} (expected a label such as `minimizing`)"),
            ));
            None
        }
    };
    let judge = match meta.get("judge") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            errors.push(at(
                &c,
                format!("`judge` is {other} (expected true or false)"),
            ));
            true
        }
    };
    let criteria = codes(&c, &meta, "criteria", errors);
    let perturbations = codes(&c, &meta, "perturbations", errors);
    if let Some(criteria) = &criteria {
        if !against.evaluation.is_judged() {
            errors.push(at(
                &c,
                format!(
                    "`criteria` names rubrics, but this is a {} scenario (no judge; expected `evaluation:` overrides instead)",
                    against.evaluation.type_name()
                ),
            ));
        }
        for name in criteria {
            if against.evaluation.is_judged() && !against.rubrics.iter().any(|r| &r.code == name) {
                let known: Vec<&str> = against.rubrics.iter().map(|r| r.code.as_str()).collect();
                errors.push(at(
                    &c,
                    format!(
                        "`criteria` names `{name}`, not a rubric of this scenario (expected one of: {})",
                        known.join(", ")
                    ),
                ));
            }
        }
    }
    if let Some(list) = &perturbations {
        for code in list {
            if !against.perturbations.iter().any(|p| &p.code == code) {
                let known: Vec<&str> = against
                    .perturbations
                    .iter()
                    .map(|p| p.code.as_str())
                    .collect();
                errors.push(at(
                    &c,
                    format!(
                        "`perturbations` names `{code}`, not a perturbation of this scenario (expected some of: {})",
                        known.join(", ")
                    ),
                ));
            }
        }
    }
    let overrides = parse_override(&c, against.evaluation, errors);
    if let Some(o) = &overrides
        && let Some(why) = against.evaluation.with_override(o).impossible()
    {
        errors.push(at(&c, why));
    }
    match role {
        TurnRole::Perturbation if !c.body.trim().is_empty() => errors.push(at(
            &c,
            "a `role: perturbation` turn marks where the perturbation is sent and holds no text (expected an empty section)".into(),
        )),
        TurnRole::User | TurnRole::Assistant if c.is_empty() => errors.push(at(
            &c,
            format!(
                "the turn is empty (expected the {} message's text)",
                if role == TurnRole::User { "user" } else { "assistant" }
            ),
        )),
        _ => {}
    }
    let has_judging_keys = overrides.is_some() || criteria.is_some();
    if role == TurnRole::Assistant {
        for key in ["judge", "evaluation", "criteria"] {
            if meta.contains_key(key) {
                errors.push(at(
                    &c,
                    format!("an assistant turn is prefilled text with no live reply, so `{key}` has nothing to apply to"),
                ));
            }
        }
    } else if !judge && has_judging_keys {
        errors.push(at(
            &c,
            "`judge: false` leaves this turn's reply unjudged, so its `evaluation`/`criteria` would never apply (remove one or the other)".into(),
        ));
    }
    if errors.len() != before {
        return None;
    }
    let mut component = c;
    component.overrides = overrides;
    Some(Turn {
        role,
        pressure,
        judge,
        criteria,
        perturbations,
        component,
    })
}

/// `key:` as a list of codes (one code alone is a list of one).
fn codes(
    c: &Component,
    meta: &serde_json::Map<String, Value>,
    key: &str,
    errors: &mut Vec<ContentError>,
) -> Option<Vec<String>> {
    match meta.get(key)? {
        Value::Null => None,
        Value::String(s) if !s.trim().is_empty() => Some(vec![s.trim().to_string()]),
        Value::Array(items) if !items.is_empty() => {
            let mut out = Vec::with_capacity(items.len());
            for v in items {
                match v {
                    Value::String(s) if !s.trim().is_empty() => out.push(s.trim().to_string()),
                    other => {
                        errors.push(at(
                            c,
                            format!(
                                "`{key}` holds {other} (expected codes such as `CR1` or `PT2`)"
                            ),
                        ));
                        return None;
                    }
                }
            }
            Some(out)
        }
        other => {
            errors.push(at(
                c,
                format!(
                    "`{key}` is a {} (expected a code or a non-empty list of codes)",
                    json_type(other)
                ),
            ));
            None
        }
    }
}

/// The script each perturbation's conversations follow must be one a
/// model can be asked: the tested model speaks last, no two assistant
/// turns stand together, a perturbation marker comes once and after a
/// user turn, and a user turn answered by a prefilled assistant turn has
/// nothing of its own to judge.
fn check_shapes(turns: &[Turn], perturbations: &[Component], errors: &mut Vec<ContentError>) {
    if turns.is_empty() {
        return;
    }
    let mut seen = BTreeSet::new();
    let mut push = |t: &Turn, message: String| {
        if seen.insert((t.component.code.clone(), message.clone())) {
            errors.push(at(&t.component, message));
        }
    };
    for p in perturbations {
        let script: Vec<&Turn> = turns.iter().filter(|t| t.applies_to(&p.code)).collect();
        let for_p = if turns.iter().any(|t| t.perturbations.is_some()) {
            format!(" (in the conversations of {})", p.code)
        } else {
            String::new()
        };
        let markers: Vec<&&Turn> = script
            .iter()
            .filter(|t| t.role == TurnRole::Perturbation)
            .collect();
        if markers.len() > 1 {
            push(
                markers[1],
                format!(
                    "a second `role: perturbation` turn{for_p} (expected one place for the perturbation)"
                ),
            );
        }
        if let Some(first) = script.first()
            && !markers.is_empty()
            && first.role != TurnRole::User
        {
            push(
                first,
                format!(
                    "with a `role: perturbation` turn{for_p}, the first turn completes message 1 (scenario, condition, user context, then this turn) and must be a user turn"
                ),
            );
        }
        for pair in script.windows(2) {
            if pair[0].role == TurnRole::Assistant && pair[1].role == TurnRole::Assistant {
                push(
                    pair[1],
                    format!(
                        "two assistant turns in a row{for_p} (expected a user turn between them)"
                    ),
                );
            }
            // A user message answered by a prefilled turn gets no live reply.
            if pair[0].role != TurnRole::Assistant
                && pair[1].role == TurnRole::Assistant
                && (pair[0].component.overrides.is_some() || pair[0].criteria.is_some())
            {
                push(
                    pair[0],
                    format!(
                        "the reply to this turn is the prefilled {}{for_p}, so its `evaluation`/`criteria` would never apply",
                        pair[1].component.code
                    ),
                );
            }
        }
        if let Some(last) = script.last()
            && last.role == TurnRole::Assistant
        {
            push(
                last,
                format!(
                    "the conversation ends on an assistant turn{for_p} (expected the tested model to speak last: end with a user turn, or remove this one)"
                ),
            );
        }
    }
}
