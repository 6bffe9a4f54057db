//! A test case under a variant of its user's words (issue 43): its code
//! and its perturbation with the text varied, composed like any other;
//! and the variants a run asks for, made once before it starts
//! ([`expand`]) so every part of the runner sees them as test cases.

use super::cases::{CaseIndex, TestCase};
use super::variants::{Swaps, TRANSFORMS_VERSION, Variant, WordLists, apply_recording};
use std::collections::HashMap;

use super::{Benchmark, Component, TurnRole};

pub use super::VariedCases;

/// The test code of a variant of a test case: `P1-B1-S1-C1-PT1~typos`.
pub fn variant_code(test_code: &str, v: &Variant) -> String {
    format!("{test_code}~{}", v.name())
}

/// The original test code of a (possibly) varied one, and the variant's
/// name: `P1-B1-S1-C1-PT1~typos` → (`P1-B1-S1-C1-PT1`, Some(`typos`)).
pub fn split_code(test_code: &str) -> (&str, Option<&str>) {
    match test_code.split_once('~') {
        Some((original, name)) => (original, Some(name)),
        None => (test_code, None),
    }
}

/// One test case under one variant: its perturbation with the user's
/// words varied, in a conversation each user turn's text (by turn code),
/// and what a `names` or `pronouns` variant swapped (applied to the
/// rubrics and the evaluation when it is judged or checked).
#[derive(Debug, Clone)]
pub struct VariedCase {
    pub perturbation: Component,
    pub turns: HashMap<String, String>,
    pub swaps: Swaps,
}

/// `case` under `v`, or None when the variant changes nothing in any of
/// its user messages (it is skipped, and said so). A variant that leaves
/// the perturbation as it is but changes a later user turn is kept.
/// Message 1 draws from the stream of the test code, each user turn from
/// its own (`TESTCODE/T2`); a name met earlier becomes the same name.
pub fn vary_case(
    case: &TestCase<'_>,
    v: &Variant,
    lists: &WordLists,
    seed: u64,
) -> Option<VariedCase> {
    let p = case.perturbation;
    let code = case.code();
    let mut swaps = Swaps::default();
    let text = apply_recording(v, lists, seed, &code, &p.prompt, &mut swaps);
    let mut changed = text != p.prompt;
    let mut turns = HashMap::new();
    for t in super::conversation::turns_of(case) {
        if t.role != TurnRole::User {
            continue;
        }
        let key = format!("{code}/{}", t.component.code);
        let new = apply_recording(v, lists, seed, &key, &t.component.prompt, &mut swaps);
        changed |= new != t.component.prompt;
        turns.insert(t.component.code.clone(), new);
    }
    changed.then(|| VariedCase {
        perturbation: Component {
            prompt: text,
            ..p.clone()
        },
        turns,
        swaps,
    })
}

/// Each variant's name, the selected test cases it changed, and those it
/// left as they were (skipped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VariantCount {
    pub name: String,
    pub varied: usize,
    pub unchanged: usize,
}

/// Makes the variants of the test cases `cases` (originals, as selected):
/// each scenario's own `variants:`, or `over` (`--variants`) instead. A
/// variant that changes nothing is left out and counted. When any variant
/// applies, the word lists enter the benchmark's content hash (the varied
/// text depends on them); a benchmark without variants keeps its hash, so
/// runs recorded before stay comparable.
pub fn expand(
    b: &mut Benchmark,
    over: Option<&[Variant]>,
    seed: u64,
    cases: &[CaseIndex],
) -> Vec<VariantCount> {
    let mut counts: Vec<VariantCount> = Vec::new();
    let mut made: Vec<(CaseIndex, Vec<Component>)> = Vec::new();
    let mut varied_turns: Vec<(String, HashMap<String, String>, Swaps)> = Vec::new();
    let mut used = false;
    for &c in cases {
        let case = c.resolve(b);
        let list = over.unwrap_or(&case.scenario.variants);
        if list.is_empty() {
            continue;
        }
        used = true;
        let code = case.code();
        let mut varied = Vec::new();
        for v in list {
            let at = match counts.iter().position(|n| n.name == v.name()) {
                Some(i) => i,
                None => {
                    counts.push(VariantCount {
                        name: v.name().to_string(),
                        varied: 0,
                        unchanged: 0,
                    });
                    counts.len() - 1
                }
            };
            match vary_case(&case, v, &b.word_lists, seed) {
                Some(VariedCase {
                    perturbation: mut p,
                    turns,
                    swaps,
                }) => {
                    counts[at].varied += 1;
                    let spec = serde_json::to_string(v).unwrap_or_default();
                    p.hash = super::sha256_hex(&[
                        p.hash.as_bytes(),
                        spec.as_bytes(),
                        &seed.to_le_bytes(),
                        p.prompt.as_bytes(),
                    ]);
                    p.full_code = variant_code(&code, v);
                    p.code = format!("{}~{}", p.code, v.name());
                    varied_turns.push((p.full_code.clone(), turns, swaps));
                    varied.push(p);
                }
                None => counts[at].unchanged += 1,
            }
        }
        made.push((c, varied));
    }
    for (c, varied) in made {
        let s = &mut b.scenarios[c.scenario as usize];
        for v in &varied {
            if let Some(i) = varied_turns
                .iter()
                .position(|(code, ..)| *code == v.full_code)
            {
                let (code, turns, swaps) = varied_turns.swap_remove(i);
                if !swaps.is_empty() {
                    s.varied.swaps.insert(code.clone(), swaps);
                }
                if !turns.is_empty() {
                    s.varied.turns.insert(code, turns);
                }
            }
        }
        let at = s.varied.components.len() as u32;
        let key = (c.condition, c.user_context, c.perturbation);
        s.varied.by_case.insert(key, at..at + varied.len() as u32);
        s.varied.components.extend(varied);
        s.varied.seed = Some(seed);
    }
    if used {
        // The transformations' version too: text drawn by another version
        // of them is another content.
        let version = TRANSFORMS_VERSION.to_le_bytes();
        let mut parts: Vec<&[u8]> = vec![b.content_hash.as_bytes(), b"word-lists", &version];
        for (file, text) in &b.word_lists.sources {
            parts.push(file.as_bytes());
            parts.push(text.as_bytes());
        }
        b.content_hash = super::sha256_hex(&parts);
    }
    counts
}

/// `cases` (originals) each followed by its variants that [`expand`] made.
pub fn with_variants(b: &Benchmark, cases: &[CaseIndex]) -> Vec<CaseIndex> {
    let mut out = Vec::with_capacity(cases.len());
    for c in cases {
        out.push(*c);
        let s = &b.scenarios[c.scenario as usize];
        let first = s.perturbations.len() as u32;
        if let Some(range) = s
            .varied
            .by_case
            .get(&(c.condition, c.user_context, c.perturbation))
        {
            out.extend(range.clone().map(|i| CaseIndex {
                perturbation: first + i,
                ..*c
            }));
        }
    }
    out
}

/// The line `run-batch` and `estimate` say once on stderr when a variant
/// changed nothing in some test cases (they are skipped), or None.
pub fn skipped_notice(counts: &[VariantCount]) -> Option<String> {
    let skipped: Vec<String> = counts
        .iter()
        .filter(|c| c.unchanged > 0)
        .map(|c| {
            format!(
                "{} changes nothing in {} of {} test cases",
                c.name,
                c.unchanged,
                c.varied + c.unchanged
            )
        })
        .collect();
    (!skipped.is_empty()).then(|| {
        format!(
            "variants: {} (skipped: only the original runs there)",
            skipped.join("; ")
        )
    })
}
