//! A test case under a variant of its user's words (issue 43): its code
//! and its perturbation with the text varied, composed like any other.

use super::Component;
use super::cases::TestCase;
use super::variants::{Variant, WordLists, apply};

/// The test code of a variant of a test case: `P1-B1-S1-C1-PT1~typos`.
pub fn variant_code(test_code: &str, v: &Variant) -> String {
    format!("{test_code}~{}", v.name())
}

/// `case`'s perturbation with its text (the user's words) under `v`, or
/// None when the variant changes nothing (it is skipped, and said so).
pub fn vary_perturbation(
    case: &TestCase<'_>,
    v: &Variant,
    lists: &WordLists,
    seed: u64,
) -> Option<Component> {
    let p = case.perturbation;
    let text = apply(v, lists, seed, &case.code(), &p.prompt);
    (text != p.prompt).then(|| Component {
        prompt: text,
        ..p.clone()
    })
}
