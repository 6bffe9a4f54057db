//! `personas.md` (issue 42): the simulated users of a scenario's
//! conversations, one `# PR1`, `# PR2`, … section each (or `personas/PR1.md`,
//! …), read exactly like every component; each body is the instructions the
//! user-simulator model is given. A scenario with personas runs each
//! perturbation once per persona (`PT1-PR1`, [`expand`]).

use std::path::Path;

use serde_json::Value;

use super::components::load_components;
use super::error::ContentError;
use super::turns::at;
use crate::benchmark::{Component, ComponentKind, Persona, sha256_hex};

/// The frontmatter keys a persona takes.
const PERSONA_KEYS: [&str; 3] = ["max_turns", "max_words", "risk"];

/// Simulated messages after message 1 when `max_turns` is not given.
pub const DEFAULT_MAX_TURNS: u32 = 4;
/// The most `max_turns` may be: every simulated turn is two paid requests.
pub const MAX_TURNS: u32 = 20;
/// The most `max_words` may be.
const MAX_WORDS: u64 = 2000;

/// The scenario's personas, in order (empty without `personas.md`); None
/// when any has a problem (each one pushed to `errors`).
pub(super) fn load_personas(
    dir: &Path,
    scenario: &str,
    errors: &mut Vec<ContentError>,
) -> Option<Vec<Persona>> {
    let components = load_components(dir, scenario, ComponentKind::Persona, errors)?;
    let before = errors.len();
    let personas: Vec<Persona> = components
        .into_iter()
        .filter_map(|c| persona(c, errors))
        .collect();
    (errors.len() == before).then_some(personas)
}

/// One persona from its component, its keys checked.
fn persona(c: Component, errors: &mut Vec<ContentError>) -> Option<Persona> {
    let before = errors.len();
    let meta = c.metadata.as_object().cloned().unwrap_or_default();
    for key in meta.keys() {
        if !PERSONA_KEYS.contains(&key.as_str()) {
            errors.push(at(
                &c,
                format!(
                    "unknown key `{key}` in a persona's frontmatter (expected {})",
                    PERSONA_KEYS.join(", ")
                ),
            ));
        }
    }
    let mut count = |key: &str, max: u64| -> Option<u32> {
        match meta.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) if n.as_u64().is_some_and(|v| (1..=max).contains(&v)) => {
                n.as_u64().map(|v| v as u32)
            }
            Some(other) => {
                errors.push(at(
                    &c,
                    format!("`{key}` is {other} (expected a whole number from 1 to {max})"),
                ));
                None
            }
        }
    };
    let max_turns = count("max_turns", u64::from(MAX_TURNS)).unwrap_or(DEFAULT_MAX_TURNS);
    let max_words = count("max_words", MAX_WORDS);
    let risk = match meta.get("risk") {
        None | Some(Value::Null) => None,
        Some(Value::String(r)) if !r.trim().is_empty() => Some(r.trim().to_string()),
        Some(other) => {
            errors.push(at(
                &c,
                format!("`risk` is {other} (expected a label such as `minimizing`)"),
            ));
            None
        }
    };
    if c.body.trim().is_empty() {
        errors.push(at(
            &c,
            "the persona is empty (expected the instructions for the user-simulator model)".into(),
        ));
    }
    (errors.len() == before).then_some(Persona {
        max_turns,
        max_words,
        risk,
        component: c,
    })
}

/// A persona scenario's perturbations, one per persona each: `PT1` becomes
/// `PT1-PR1`, `PT1-PR2`, … (same text, severity and overrides; a hash of
/// both), so each (test case, persona) is a test case of its own and a
/// selector `…-PT1` picks all of its personas.
pub(super) fn expand(perturbations: Vec<Component>, personas: &[Persona]) -> Vec<Component> {
    if personas.is_empty() {
        return perturbations;
    }
    let mut out = Vec::with_capacity(perturbations.len() * personas.len());
    for p in &perturbations {
        for r in personas {
            let code = &r.component.code;
            out.push(Component {
                code: format!("{}-{code}", p.code),
                full_code: format!("{}-{code}", p.full_code),
                hash: sha256_hex(&[p.hash.as_bytes(), r.component.hash.as_bytes()]),
                ..p.clone()
            });
        }
    }
    out
}
