//! A test case as a conversation (SPEC §2, issue 42): the user's messages
//! in order, each followed by the model's live reply or by a fixed
//! assistant turn. A single-turn test case is a conversation of one
//! exchange, so every later stage handles one shape.

use std::borrow::Cow;

use super::cases::TestCase;
use super::compose::compose;
use super::{Turn, TurnRole};

/// What follows a user message.
#[derive(Debug, Clone, Copy)]
pub enum Reply<'a> {
    /// The model answers (a request is made); `judged`: whether that
    /// reply is judged (message 1's unless `judge_first: false`, a turn's
    /// unless `judge: false`).
    Live { judged: bool },
    /// A prefilled assistant turn, put into the history as written.
    Fixed(&'a Turn),
}

/// One user message and what follows it.
#[derive(Debug, Clone)]
pub struct Exchange<'a> {
    /// The text sent as the user's message: message 1's composed prompt,
    /// a user turn's text, or the perturbation's at its marker.
    pub user: Cow<'a, str>,
    /// The turn this message comes from; None for message 1.
    pub turn: Option<&'a Turn>,
    pub reply: Reply<'a>,
}

impl Exchange<'_> {
    /// Whether the model's reply here is a request.
    pub fn is_live(&self) -> bool {
        matches!(self.reply, Reply::Live { .. })
    }
}

/// The turns of `case`'s scenario that are part of its conversation (a
/// turn may name the perturbations it applies to).
pub fn turns_of<'a>(case: &TestCase<'a>) -> Vec<&'a Turn> {
    // A variant's perturbation (`PT1~typos`) is in the conversations of
    // its original.
    let code = case.perturbation.code.split('~').next().unwrap_or_default();
    case.scenario
        .turns
        .iter()
        .filter(|t| t.applies_to(code))
        .collect()
}

/// The conversation of `case`, exchange by exchange. Message 1 is the
/// composed prompt exactly as a single-turn test case's (SPEC §2); with a
/// `role: perturbation` marker, message 1 is the scenario, condition and
/// user context followed by the first turn, and the perturbation is sent
/// where the marker stands. A user message gets a live reply unless an
/// assistant turn follows it. The loader guarantees the shape (no
/// trailing assistant turn, no two in a row, a user turn first after a
/// marker), so the last exchange is always live.
pub fn script<'a>(case: &TestCase<'a>) -> Vec<Exchange<'a>> {
    let turns = turns_of(case);
    let varied = case.scenario.varied.turns.get(&case.perturbation.full_code);
    let marker = turns.iter().any(|t| t.role == TurnRole::Perturbation);
    let (first, first_turn, rest) = match turns.first() {
        Some(&t1) if marker => {
            let opening = TestCase {
                perturbation: &t1.component,
                ..*case
            };
            (compose(&opening), Some(t1), &turns[1..])
        }
        _ => (compose(case), None, &turns[..]),
    };
    let mut out = Vec::with_capacity(turns.len() + 1);
    out.push(Exchange {
        user: Cow::Owned(first),
        turn: first_turn,
        reply: Reply::Live {
            judged: case.scenario.judge_first && first_turn.is_none_or(|t| t.judge),
        },
    });
    for &t in rest {
        let user = match t.role {
            // The reply to the user message before it.
            TurnRole::Assistant => {
                if let Some(last) = out.last_mut() {
                    last.reply = Reply::Fixed(t);
                }
                continue;
            }
            // Under a variant (issue 43), the user's every message is varied.
            TurnRole::User => varied
                .and_then(|v| v.get(&t.component.code))
                .map_or(t.component.prompt.as_str(), String::as_str),
            TurnRole::Perturbation => case.perturbation.prompt.as_str(),
        };
        out.push(Exchange {
            user: Cow::Borrowed(user),
            turn: Some(t),
            reply: Reply::Live { judged: t.judge },
        });
    }
    out
}

/// What a user-simulator model writes, on a line of its own, to end the
/// conversation (issue 42): no further user message is sent. Text before
/// it on the same reply is dropped too: the tested model has already
/// answered the last user message, and always speaks last.
pub const STOP_MARKER: &str = "[END]";

/// The turn codes of simulated user messages begin with it (`S1`, `S2`, …;
/// scripted turns are `T1`, …): the transcript marks them as simulated.
pub const SIMULATED_PREFIX: &str = "S";

/// Whether a stored turn code is a simulated user message's.
pub fn is_simulated(turn_code: &str) -> bool {
    turn_code
        .strip_prefix(SIMULATED_PREFIX)
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The persona simulating the user of `case`, if its scenario has
/// `personas.md`: the perturbation's code names it (`PT1-PR2`, or a
/// variant's `PT1-PR2~typos`).
pub fn persona_of<'a>(case: &TestCase<'a>) -> Option<&'a super::Persona> {
    if case.scenario.personas.is_empty() {
        return None;
    }
    let code = case.perturbation.code.split('~').next()?;
    let (_, persona) = code.rsplit_once('-')?;
    case.scenario
        .personas
        .iter()
        .find(|p| p.component.code == persona)
}
