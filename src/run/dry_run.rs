//! The dry-run: composes and validates every selected prompt, sends nothing
//! and writes nothing (SPEC §6), so CI can gate on benchmark content.

use std::collections::HashSet;
use std::fmt;

use serde::Serialize;

use crate::benchmark::Benchmark;
use crate::benchmark::cases;
use crate::benchmark::cases::Selector;
use crate::benchmark::compose;

/// What a dry-run composed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DryRunSummary {
    pub scenarios: usize,
    pub test_cases: usize,
    /// Judge calls a real run would make per model (one per rubric per test case).
    pub judge_calls: usize,
    pub unique_prompts: usize,
    pub prompt_bytes: u64,
    /// Rough prompt tokens (bytes / 4) per model.
    pub estimated_prompt_tokens: u64,
    pub models: Vec<String>,
    pub by_evaluation: std::collections::BTreeMap<String, usize>,
    /// Components of the selected scenarios that are only frontmatter: they
    /// run and add nothing to the prompt (not an error; authors should know).
    pub empty_components: usize,
    /// Test cases that are conversations (`turns.md`), and the live
    /// replies their scripts ask for in all.
    pub conversations: usize,
    pub live_turns: usize,
}

impl fmt::Display for DryRunSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "scenarios: {}", self.scenarios)?;
        writeln!(
            f,
            "test cases: {} ({} unique prompts)",
            self.test_cases, self.unique_prompts
        )?;
        for (ty, n) in &self.by_evaluation {
            writeln!(f, "  {ty}: {n}")?;
        }
        writeln!(f, "judge calls: {}", self.judge_calls)?;
        if self.conversations > 0 {
            writeln!(
                f,
                "conversations: {} ({} live replies in all, each sent with the history before it)",
                self.conversations, self.live_turns
            )?;
        }
        if self.empty_components > 0 {
            writeln!(
                f,
                "empty components: {} (only frontmatter: they add nothing to the prompt, their severity still counts)",
                self.empty_components
            )?;
        }
        writeln!(
            f,
            "prompt size: {} bytes (~{} tokens per model)",
            self.prompt_bytes, self.estimated_prompt_tokens
        )?;
        if self.models.is_empty() {
            write!(f, "models: none configured")
        } else {
            write!(f, "models: {}", self.models.join(", "))
        }
    }
}

/// Composes every selected test case's prompt and checks it, sending nothing.
pub fn dry_run(
    benchmark: &Benchmark,
    selectors: &[Selector],
    include_no_context: bool,
) -> Result<DryRunSummary, String> {
    // With the variants a run would make (vary::expand), each a test case.
    let cases: Vec<_> = crate::benchmark::vary::with_variants(
        benchmark,
        &cases::select_indices(benchmark, selectors, include_no_context)?,
    )
    .into_iter()
    .map(|i| i.resolve(benchmark))
    .collect();
    let mut summary = DryRunSummary {
        models: benchmark
            .models
            .as_ref()
            .map(|m| m.models.iter().map(|e| e.id.clone()).collect())
            .unwrap_or_default(),
        ..Default::default()
    };
    let mut seen_scenarios = HashSet::new();
    let mut seen_prompts = HashSet::new();
    let mut prompt = String::new();
    for case in &cases {
        if let Some(p) = crate::benchmark::conversation::persona_of(case) {
            // A simulated user (issue 42): message 1 is composed; the
            // simulator writes the rest, at most `max_turns` of them.
            compose::compose_into(case, &mut prompt);
            summary.conversations += 1;
            summary.live_turns += 1 + p.max_turns as usize;
        } else if case.scenario.turns.is_empty() {
            compose::compose_into(case, &mut prompt);
        } else {
            // Every message of the script, composed: what a run would send.
            let script = crate::benchmark::conversation::script(case);
            summary.conversations += 1;
            summary.live_turns += script.iter().filter(|e| e.is_live()).count();
            prompt.clear();
            for e in &script {
                prompt.push_str(&e.user);
            }
        }
        summary.test_cases += 1;
        summary.prompt_bytes += prompt.len() as u64;
        if seen_scenarios.insert(case.scenario.code.as_str()) {
            summary.scenarios += 1;
            summary.empty_components += case.scenario.empty_components();
        }
        seen_prompts.insert(crate::benchmark::sha256(&[prompt.as_bytes()]));
        *summary
            .by_evaluation
            .entry(case.scenario.evaluation.type_name().to_string())
            .or_default() += 1;
        if case.scenario.evaluation.is_judged() {
            summary.judge_calls += case.scenario.rubrics.len();
        }
    }
    summary.unique_prompts = seen_prompts.len();
    summary.estimated_prompt_tokens = summary.prompt_bytes / 4;
    Ok(summary)
}
