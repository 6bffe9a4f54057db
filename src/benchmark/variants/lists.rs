//! The word lists variants draw from: plain YAML files in the benchmark
//! folder's `word-lists/`, so authors (and the clinicians who review them)
//! read and change them; a benchmark without one uses the copy bundled
//! with helmbench, the bundled benchmark's own.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// The lists, by file: `texting.yml`, `misspellings.yml`,
/// `speech-to-text.yml`, `spelling.yml`, `names.yml`, `pronouns.yml`,
/// `euphemisms.yml`.
pub const FILES: [&str; 7] = [
    "texting.yml",
    "misspellings.yml",
    "speech-to-text.yml",
    "spelling.yml",
    "names.yml",
    "pronouns.yml",
    "euphemisms.yml",
];

/// The bundled copies, by file name.
const BUNDLED: [(&str, &str); 7] = [
    (
        "texting.yml",
        include_str!("../../../benchmark/word-lists/texting.yml"),
    ),
    (
        "misspellings.yml",
        include_str!("../../../benchmark/word-lists/misspellings.yml"),
    ),
    (
        "speech-to-text.yml",
        include_str!("../../../benchmark/word-lists/speech-to-text.yml"),
    ),
    (
        "spelling.yml",
        include_str!("../../../benchmark/word-lists/spelling.yml"),
    ),
    (
        "names.yml",
        include_str!("../../../benchmark/word-lists/names.yml"),
    ),
    (
        "pronouns.yml",
        include_str!("../../../benchmark/word-lists/pronouns.yml"),
    ),
    (
        "euphemisms.yml",
        include_str!("../../../benchmark/word-lists/euphemisms.yml"),
    ),
];

/// One pronoun set's forms.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PronounSet {
    pub subject: String,
    pub object: String,
    pub determiner: String,
    pub possessive: String,
    pub reflexive: String,
}

/// Every list, read and checked.
#[derive(Debug, Clone, Default)]
pub struct WordLists {
    /// Word or phrase (lower case) → its texting form; phrases first.
    pub texting: Vec<(String, String)>,
    pub misspellings: BTreeMap<String, Vec<String>>,
    pub speech: BTreeMap<String, String>,
    /// American → British.
    pub spelling: BTreeMap<String, String>,
    pub names: BTreeMap<String, Vec<String>>,
    pub pronouns: BTreeMap<String, PronounSet>,
    /// Phrase (lower case) → its indirect forms; longest phrases first.
    pub euphemisms: Vec<(String, Vec<String>)>,
    /// Each file's text as read (hashed with the benchmark's content).
    pub sources: Vec<(String, String)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Words<T> {
    words: BTreeMap<String, T>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Pairs {
    pairs: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Sets<T> {
    sets: BTreeMap<String, T>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Phrases {
    phrases: BTreeMap<String, Vec<String>>,
}

/// A list that was not usable: the file and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ListError {
    pub file: String,
    pub message: String,
}

impl WordLists {
    /// The lists of the benchmark at `root` (`root/word-lists/FILE`), each
    /// file missing there taken from the bundled copy.
    pub fn load(root: &Path) -> Result<WordLists, Vec<ListError>> {
        let mut texts = Vec::with_capacity(FILES.len());
        let mut errors = Vec::new();
        for (file, bundled) in BUNDLED {
            let path = root.join("word-lists").join(file);
            match std::fs::read_to_string(&path) {
                Ok(t) => texts.push((path.display().to_string(), t)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => texts.push((
                    format!("{file} (bundled with helmbench)"),
                    bundled.to_string(),
                )),
                Err(e) => errors.push(ListError {
                    file: path.display().to_string(),
                    message: format!("cannot read: {e}"),
                }),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        WordLists::parse(texts)
    }

    /// The bundled lists alone.
    pub fn bundled() -> WordLists {
        let texts = BUNDLED
            .iter()
            .map(|(f, t)| (f.to_string(), t.to_string()))
            .collect();
        WordLists::parse(texts).expect("the bundled word lists parse (a unit test checks)")
    }

    /// The lists from their texts, in [`FILES`] order, each named by its
    /// file for messages.
    fn parse(texts: Vec<(String, String)>) -> Result<WordLists, Vec<ListError>> {
        let mut errors = Vec::new();
        let mut out = WordLists::default();
        fn read<T: serde::de::DeserializeOwned>(
            (file, text): &(String, String),
            errors: &mut Vec<ListError>,
        ) -> Option<T> {
            serde_yaml::from_str(text)
                .map_err(|e| {
                    errors.push(ListError {
                        file: file.clone(),
                        message: format!("{e}"),
                    })
                })
                .ok()
        }
        let lower = |m: BTreeMap<String, String>| -> BTreeMap<String, String> {
            m.into_iter().map(|(k, v)| (k.to_lowercase(), v)).collect()
        };
        if let Some(w) = read::<Words<String>>(&texts[0], &mut errors) {
            out.texting = longest_first(lower(w.words).into_iter().collect());
        }
        if let Some(w) = read::<Words<Vec<String>>>(&texts[1], &mut errors) {
            out.misspellings = w
                .words
                .into_iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k.to_lowercase(), v))
                .collect();
        }
        if let Some(w) = read::<Words<String>>(&texts[2], &mut errors) {
            out.speech = lower(w.words);
        }
        if let Some(p) = read::<Pairs>(&texts[3], &mut errors) {
            out.spelling = lower(p.pairs);
        }
        if let Some(s) = read::<Sets<Vec<String>>>(&texts[4], &mut errors) {
            for (set, names) in &s.sets {
                if names.is_empty() {
                    errors.push(ListError {
                        file: texts[4].0.clone(),
                        message: format!("set `{set}` has no names"),
                    });
                }
            }
            out.names = s.sets;
        }
        if let Some(s) = read::<Sets<PronounSet>>(&texts[5], &mut errors) {
            out.pronouns = s.sets;
        }
        if let Some(p) = read::<Phrases>(&texts[6], &mut errors) {
            let mut list: Vec<(String, Vec<String>)> = p
                .phrases
                .into_iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k.to_lowercase(), v))
                .collect();
            list.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
            out.euphemisms = list;
        }
        out.sources = texts;
        if errors.is_empty() {
            Ok(out)
        } else {
            Err(errors)
        }
    }
}

/// Phrases of several words before single words, longer first: a phrase
/// is replaced before a word of it could be.
fn longest_first(mut v: Vec<(String, String)>) -> Vec<(String, String)> {
    v.sort_by(|a, b| {
        let words = |s: &str| s.split_whitespace().count();
        words(&b.0)
            .cmp(&words(&a.0))
            .then(b.0.len().cmp(&a.0.len()))
            .then(a.0.cmp(&b.0))
    });
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundled_lists_parse_and_cover_every_file() {
        let l = WordLists::bundled();
        assert!(l.texting.len() > 20 && l.texting[0].0.contains(' '));
        assert!(l.misspellings.contains_key("suicide"));
        assert!(l.names.contains_key("diverse"));
        assert_eq!(l.pronouns["they"].object, "them");
        assert!(l.spelling["color"] == "colour");
        assert!(!l.euphemisms.is_empty() && !l.speech.is_empty());
        assert_eq!(l.sources.len(), FILES.len());
    }
}
