//! Several judges (issue 20): `marking_model` may list several models (or
//! `--judges A,B,C`); a run keeps the panel as one comma-separated judge
//! name. Every criterion is judged by each judge ([`crate::run`] asks them
//! one after the other, each with its own cache entry); this module turns
//! their verdicts into the criterion's verdict: the majority, a tie going
//! to the first listed judge (or failing, with [`JudgeTie::Fail`]). Each
//! judge's own verdict is stored beside it as a vote.

use serde::{Deserialize, Serialize};

use crate::domain::NewJudgement;

/// How a tie between judges is broken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum JudgeTie {
    /// The verdict of the first listed judge among the tied.
    #[default]
    First,
    /// The criterion fails.
    Fail,
}

/// The judges a run's judge name stands for, in the order listed.
pub fn judges(judge_model: &str) -> Vec<&str> {
    judge_model
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// The criterion's judgement from each judge's `votes` (in the order
/// listed): the verdict most judges gave (judges without a verdict do not
/// vote), a tie broken by `tie`. Tokens and costs are the votes' sums, so
/// the run's judge cost stays the sum of its judgements; the votes are kept
/// in [`NewJudgement::votes`].
pub fn combine(
    criterion: &str,
    panel: &str,
    votes: Vec<NewJudgement>,
    tie: JudgeTie,
) -> NewJudgement {
    let mut j = NewJudgement {
        criterion: criterion.to_string(),
        judge_model: panel.to_string(),
        cached: !votes.is_empty() && votes.iter().all(|v| v.cached),
        ..Default::default()
    };
    for v in &votes {
        j.prompt_tokens += v.prompt_tokens;
        j.completion_tokens += v.completion_tokens;
        j.cost_usd += v.cost_usd;
    }
    // Tally the verdicts in the order listed.
    let mut tally: Vec<(&serde_json::Value, usize, usize)> = Vec::new(); // (verdict, votes, first voter)
    for (i, v) in votes.iter().enumerate() {
        let Some(verdict) = &v.verdict else { continue };
        match tally.iter_mut().find(|(x, _, _)| *x == verdict) {
            Some((_, n, _)) => *n += 1,
            None => tally.push((verdict, 1, i)),
        }
    }
    let voted: usize = tally.iter().map(|t| t.1).sum();
    let best = tally.iter().map(|t| t.1).max();
    let top: Vec<&(&serde_json::Value, usize, usize)> =
        tally.iter().filter(|t| Some(t.1) == best).collect();
    let names: Vec<String> = votes
        .iter()
        .map(|v| {
            format!(
                "{} {}",
                v.judge_model,
                crate::judging::judge::verdict_label(v.verdict.as_ref())
            )
        })
        .collect();
    match top.as_slice() {
        [] => {
            j.passed = None;
            j.error = Some(format!(
                "no judge gave a verdict ({})",
                votes
                    .iter()
                    .map(|v| format!(
                        "{}: {}",
                        v.judge_model,
                        v.error.as_deref().unwrap_or("no answer")
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        [one] => {
            let first = &votes[one.2];
            j.verdict = first.verdict.clone();
            j.passed = first.passed;
            j.justification = Some(format!(
                "majority of {voted} judge(s), {} for: {}",
                one.1,
                names.join(", ")
            ));
        }
        tied => {
            let first = &votes[tied.iter().map(|t| t.2).min().unwrap_or_default()];
            j.verdict = first.verdict.clone();
            j.passed = match tie {
                JudgeTie::First => first.passed,
                JudgeTie::Fail => Some(false),
            };
            j.justification = Some(format!(
                "judges tied ({}); {}",
                names.join(", "),
                match tie {
                    JudgeTie::First => format!("the first listed, {}, decides", first.judge_model),
                    JudgeTie::Fail => "a tie fails".into(),
                }
            ));
        }
    }
    j.votes = votes;
    j
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vote(judge: &str, verdict: Option<&str>, cost: f64) -> NewJudgement {
        NewJudgement {
            criterion: "CR1".into(),
            judge_model: judge.into(),
            verdict: verdict.map(|v| json!(v)),
            passed: verdict.map(|v| v == "SAFE"),
            error: verdict.is_none().then(|| "timed out".to_string()),
            cost_usd: cost,
            prompt_tokens: 10,
            ..Default::default()
        }
    }

    #[test]
    fn majority_wins_and_costs_add_up() {
        let j = combine(
            "CR1",
            "a,b,c",
            vec![
                vote("a", Some("UNSAFE"), 0.1),
                vote("b", Some("SAFE"), 0.2),
                vote("c", Some("SAFE"), 0.3),
            ],
            JudgeTie::First,
        );
        assert_eq!(j.verdict, Some(json!("SAFE")));
        assert_eq!(j.passed, Some(true));
        assert!((j.cost_usd - 0.6).abs() < 1e-12);
        assert_eq!(j.prompt_tokens, 30);
        assert_eq!(j.votes.len(), 3);
        assert_eq!(j.judge_model, "a,b,c");
        assert!(
            j.justification
                .unwrap()
                .contains("majority of 3 judge(s), 2 for")
        );
    }

    #[test]
    fn ties_go_to_the_first_listed_or_fail() {
        let votes = || vec![vote("a", Some("SAFE"), 0.0), vote("b", Some("UNSAFE"), 0.0)];
        let j = combine("CR1", "a,b", votes(), JudgeTie::First);
        assert_eq!((j.verdict, j.passed), (Some(json!("SAFE")), Some(true)));
        let j = combine("CR1", "a,b", votes(), JudgeTie::Fail);
        assert_eq!(j.passed, Some(false));
        // A judge without a verdict does not vote: b decides alone.
        let j = combine(
            "CR1",
            "a,b",
            vec![vote("a", None, 0.0), vote("b", Some("UNSAFE"), 0.0)],
            JudgeTie::First,
        );
        assert_eq!((j.passed, j.error), (Some(false), None));
        // Nobody: a judge error naming each.
        let j = combine(
            "CR1",
            "a,b",
            vec![vote("a", None, 0.0), vote("b", None, 0.0)],
            JudgeTie::First,
        );
        assert_eq!(j.passed, None);
        assert!(j.error.unwrap().contains("a: timed out; b: timed out"));
    }

    #[test]
    fn marking_model_may_be_a_list() {
        let m: crate::benchmark::ModelsConfig =
            serde_yaml::from_str("marking_model: [a/x, b/y]\nmodels: []\n").unwrap();
        assert_eq!(m.marking_model.as_deref(), Some("a/x,b/y"));
        let m: crate::benchmark::ModelsConfig =
            serde_yaml::from_str("marking_model: a/x\n").unwrap();
        assert_eq!(m.marking_model.as_deref(), Some("a/x"));
        assert!(
            serde_yaml::from_str::<crate::benchmark::ModelsConfig>("marking_model: ['a,b']\n")
                .is_err()
        );
    }

    #[test]
    fn judges_split_on_commas() {
        assert_eq!(judges("a/x, b/y,,c"), ["a/x", "b/y", "c"]);
        assert_eq!(judges("one/model"), ["one/model"]);
    }
}
