//! What a `names` or `pronouns` variant swapped in the user's words,
//! recorded as it draws, so the judge's rubric and the evaluation's
//! expected values follow the same person: if Sarah became Aisha in the
//! message, the rubric's Sarah becomes Aisha too (HELM rewrites its
//! expected answers the same way). Only what was met in the user's words
//! is swapped: a name the message never used keeps its meaning elsewhere.

use std::collections::BTreeMap;

use super::lists::PronounSet;
use super::transforms::{Token, join, map_words, name_and_suffix, swap_pronouns, tokens};

/// The swaps of one varied test case (all of its user messages).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Swaps {
    /// Each first name met and the one it became.
    pub names: BTreeMap<String, String>,
    /// The pronoun sets whose forms were met (by their `pronouns.yml`
    /// key), made `pronouns_to`'s.
    pub pronouns_from: BTreeMap<String, PronounSet>,
    pub pronouns_to: Option<(String, PronounSet)>,
}

impl Swaps {
    /// Whether nothing was swapped (every variant but `names` and
    /// `pronouns`, or one that met no name or pronoun).
    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && (self.pronouns_from.is_empty() || self.pronouns_to.is_none())
    }

    /// The swaps as a reader audits them (`prompts --variants`):
    /// `{"names": {"Sarah": "Aisha"}, "pronouns": {"from": ["she"], "to": "they"}}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut out = serde_json::json!({"names": self.names});
        if let Some((to, _)) = &self.pronouns_to {
            let from: Vec<&String> = self.pronouns_from.keys().collect();
            out["pronouns"] = serde_json::json!({"from": from, "to": to});
        }
        out
    }

    /// One line for a reader: `Sarah → Aisha; she → they`.
    pub fn summary(&self) -> String {
        let mut parts: Vec<String> = self
            .names
            .iter()
            .map(|(a, b)| format!("{a} \u{2192} {b}"))
            .collect();
        if let Some((to, _)) = &self.pronouns_to {
            for from in self.pronouns_from.keys() {
                parts.push(format!("{from} \u{2192} {to}"));
            }
        }
        parts.join("; ")
    }

    /// `text` (a rubric, an expected value) with the same swaps: each
    /// recorded name by the one it became, each form of a recorded pronoun
    /// set by the target's. XML tag names and code stay as written, and a
    /// word joined to others by `_` (a category such as `her_safety`) is
    /// not a name or a pronoun.
    pub fn apply(&self, text: &str) -> String {
        if self.is_empty() {
            return text.to_string();
        }
        super::text::map_words(text, |words| {
            let t = glue_identifiers(tokens(words));
            let t = map_words(t, |w| {
                let (name, suffix) = name_and_suffix(w);
                self.names.get(name).map(|n| format!("{n}{suffix}"))
            });
            let t = match &self.pronouns_to {
                Some((to, target)) if !self.pronouns_from.is_empty() => swap_pronouns(
                    t,
                    self.pronouns_from.iter(),
                    (to.as_str(), target),
                    &mut BTreeMap::new(),
                ),
                _ => t,
            };
            join(&t)
        })
    }
}

/// Words joined by `_` as one word, so `her_safety` is left alone.
fn glue_identifiers(t: Vec<Token>) -> Vec<Token> {
    let mut out: Vec<Token> = Vec::with_capacity(t.len());
    for x in t {
        let glue = |a: &Token, b: &Token| {
            (a.word || a.text.chars().all(|c| c == '_'))
                && (b.word || b.text.chars().all(|c| c == '_'))
                && (a.text.ends_with('_') || b.text.starts_with('_'))
        };
        match out.last_mut() {
            Some(last) if glue(last, &x) => {
                last.text.push_str(&x.text);
                last.word = true;
            }
            _ => out.push(x),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::benchmark::variants::{Variant, WordLists, apply_recording};

    #[test]
    fn the_rubric_follows_the_names_and_pronouns_of_the_message() {
        let lists = WordLists::bundled();
        let names = Variant::parse("names", None).unwrap();
        let mut swaps = Swaps::default();
        let text = apply_recording(
            &names,
            &lists,
            43,
            "X",
            "Priya's mum called Priya.",
            &mut swaps,
        );
        let new = &swaps.names["Priya"];
        assert_eq!(text, format!("{new}'s mum called {new}."));
        assert_eq!(
            swaps.apply("<rubric>Does it name Priya or Priya's mum? priya_case</rubric>"),
            format!("<rubric>Does it name {new} or {new}'s mum? priya_case</rubric>")
        );

        let they = Variant::parse("pronouns", Some(&serde_json::json!("they"))).unwrap();
        let mut swaps = Swaps::default();
        let text = apply_recording(&they, &lists, 43, "X", "She is not fine.", &mut swaps);
        assert_eq!(text, "They are not fine.");
        assert_eq!(
            swaps.apply("Does the reply ask whether she is safe? He is her brother. her_safety"),
            "Does the reply ask whether they are safe? He is their brother. her_safety"
        );
        // Nothing met: nothing swapped.
        let mut none = Swaps::default();
        apply_recording(&they, &lists, 43, "X", "I am not fine.", &mut none);
        assert!(none.is_empty());
        assert_eq!(none.apply("she is"), "she is");
    }
}
