//! The content side of variants (issue 43): the word lists of
//! `word-lists/` and the benchmark-wide `variants.yml`, checked with the
//! file each problem is in; every scenario's variants resolved (its own
//! `variants:`, else `variants.yml`'s) and checked against the lists.

use std::path::Path;

use super::error::ContentError;
use super::files::read_text;
use crate::benchmark::Scenario;
use crate::benchmark::variants::{WordLists, parse_list};

/// The word lists, or the bundled ones when a file of the benchmark's has
/// a problem (pushed to `errors`).
pub(super) fn load_lists(root: &Path, errors: &mut Vec<ContentError>) -> WordLists {
    match WordLists::load(root) {
        Ok(l) => l,
        Err(problems) => {
            for p in problems {
                errors.push(ContentError::new(
                    &p.file,
                    format!(
                        "word list: {} (expected the shape of the bundled file)",
                        p.message
                    ),
                ));
            }
            WordLists::bundled()
        }
    }
}

/// Gives each scenario without `variants:` the benchmark's (`variants.yml`
/// at the root: `variants: [...]`), and checks every variant against the
/// word lists (a names or pronoun set must exist).
pub(super) fn resolve(
    root: &Path,
    scenarios: &mut [Scenario],
    lists: &WordLists,
    errors: &mut Vec<ContentError>,
) {
    let path = root.join("variants.yml");
    let mut default = Vec::new();
    if path.is_file()
        && let Some(text) = read_text(&path, errors)
    {
        match serde_yaml::from_str::<serde_json::Value>(&text) {
            Ok(v) => match v.get("variants") {
                Some(list) if v.as_object().is_some_and(|m| m.len() == 1) => {
                    match parse_list(list) {
                        Ok(l) => default = l,
                        Err(problems) => {
                            for p in problems {
                                errors.push(ContentError::new(&path, p));
                            }
                        }
                    }
                }
                _ => errors.push(ContentError::new(
                    &path,
                    "expected one key, `variants: [...]` (for example `variants: [lowercase, typos: {rate: 0.08}]`)",
                )),
            },
            Err(e) => errors.push(ContentError::new(&path, format!("invalid YAML: {e}"))),
        }
    }
    for s in scenarios.iter_mut() {
        if s.frontmatter.get("variants").is_none() {
            s.variants = default.clone();
        }
        for v in &s.variants {
            if let Err(why) = v.check_against(lists) {
                errors.push(
                    ContentError::new(&s.prompt_file, why).in_section("frontmatter `variants`"),
                );
            }
        }
    }
}
