//! What a variant is and how the content and the command line name one:
//! [`Variant`] with its parameters, checked once (a leaf: the benchmark's
//! types hold it).

use serde::Serialize;
use serde_json::Value;

use super::lists::WordLists;

/// Every variant name, for messages.
pub const VARIANT_NAMES: &str =
    "lowercase, texting, typos, speech_to_text, british, american, names, pronouns, euphemisms";

/// One transformation and its parameters.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "variant", rename_all = "snake_case")]
pub enum Variant {
    /// Every letter of the user's words in lower case.
    Lowercase,
    /// Lower case, the texting abbreviations of `texting.yml`, no
    /// sentence-ending full stops.
    Texting,
    /// Each word of three letters or more misspelt with probability `rate`
    /// (0 to 1): a common misspelling from `misspellings.yml`, else a slip
    /// of the keyboard (a neighbouring key, two letters swapped, one left
    /// out or doubled).
    Typos { rate: f64 },
    /// Dictation: commas and semicolons dropped, each homophone of
    /// `speech-to-text.yml` swapped with probability `rate`.
    SpeechToText { rate: f64 },
    /// American spellings made British (`spelling.yml`).
    British,
    /// British spellings made American.
    American,
    /// Every first name of `names.yml` replaced by one drawn from `set`
    /// (the same name by the same one throughout).
    Names { set: String },
    /// Every pronoun form of `pronouns.yml` made the set `to`'s.
    Pronouns { to: String },
    /// The explicit phrases of `euphemisms.yml` said indirectly.
    Euphemisms,
}

impl Variant {
    /// The name in test codes (`P1-B1-S1-C1-PT1~typos`) and reports.
    pub fn name(&self) -> &'static str {
        match self {
            Variant::Lowercase => "lowercase",
            Variant::Texting => "texting",
            Variant::Typos { .. } => "typos",
            Variant::SpeechToText { .. } => "speech_to_text",
            Variant::British => "british",
            Variant::American => "american",
            Variant::Names { .. } => "names",
            Variant::Pronouns { .. } => "pronouns",
            Variant::Euphemisms => "euphemisms",
        }
    }

    /// A variant from its name and parameters (`None`: the defaults), as
    /// written in YAML (`typos: {rate: 0.08}`, `pronouns: they`) or on the
    /// command line; Err says what was expected.
    pub fn parse(name: &str, params: Option<&Value>) -> Result<Variant, String> {
        let param = |key: &str| -> Option<&Value> {
            match params {
                Some(Value::Object(m)) => m.get(key),
                // One value alone is the variant's main parameter.
                Some(v) if !v.is_null() => Some(v),
                _ => None,
            }
        };
        let keys_only = |allowed: &[&str]| -> Result<(), String> {
            match params {
                Some(Value::Object(m)) => match m.keys().find(|k| !allowed.contains(&k.as_str())) {
                    Some(k) => Err(format!(
                        "variant `{name}` takes no `{k}` (expected {})",
                        if allowed.is_empty() {
                            "no parameters".to_string()
                        } else {
                            allowed.join(", ")
                        }
                    )),
                    None => Ok(()),
                },
                Some(v) if !v.is_null() && allowed.is_empty() => {
                    Err(format!("variant `{name}` takes no parameters (got {v})"))
                }
                _ => Ok(()),
            }
        };
        let rate = |default: f64| -> Result<f64, String> {
            match param("rate") {
                None => Ok(default),
                Some(v) => v
                    .as_f64()
                    .filter(|r| *r > 0.0 && *r <= 1.0)
                    .ok_or_else(|| format!("variant `{name}`: rate {v} is out of range (expected a number above 0, at most 1)")),
            }
        };
        let word = |key: &str, default: &str| -> Result<String, String> {
            match param(key) {
                None => Ok(default.to_string()),
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_string()),
                Some(v) => Err(format!(
                    "variant `{name}`: `{key}` is {v} (expected a name such as `{default}`)"
                )),
            }
        };
        let v = match name {
            "lowercase" => Variant::Lowercase,
            "texting" => Variant::Texting,
            "typos" => Variant::Typos { rate: rate(0.08)? },
            "speech_to_text" => Variant::SpeechToText { rate: rate(0.5)? },
            "british" => Variant::British,
            "american" => Variant::American,
            "names" => Variant::Names {
                set: word("set", "diverse")?,
            },
            "pronouns" => Variant::Pronouns {
                to: word("to", "they")?,
            },
            "euphemisms" => Variant::Euphemisms,
            other => {
                return Err(format!(
                    "unknown variant `{other}` (expected one of {VARIANT_NAMES})"
                ));
            }
        };
        keys_only(match &v {
            Variant::Typos { .. } | Variant::SpeechToText { .. } => &["rate"],
            Variant::Names { .. } => &["set"],
            Variant::Pronouns { .. } => &["to"],
            _ => &[],
        })?;
        Ok(v)
    }

    /// Whether `lists` has what this variant needs (a named set exists).
    pub fn check_against(&self, lists: &WordLists) -> Result<(), String> {
        match self {
            Variant::Names { set } if !lists.names.contains_key(set) => Err(format!(
                "variant `names`: no set `{set}` in names.yml (expected one of {})",
                lists.names.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
            Variant::Pronouns { to } if !lists.pronouns.contains_key(to) => Err(format!(
                "variant `pronouns`: no set `{to}` in pronouns.yml (expected one of {})",
                lists
                    .pronouns
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            _ => Ok(()),
        }
    }
}

/// A list of variants as YAML writes it: `[lowercase, typos: {rate: 0.1},
/// pronouns: they]` (each item a name, or a one-key mapping of a name to
/// its parameters). Err: every problem, one per item.
pub fn parse_list(v: &Value) -> Result<Vec<Variant>, Vec<String>> {
    let items: Vec<&Value> = match v {
        Value::Array(a) => a.iter().collect(),
        Value::Null => Vec::new(),
        other => vec![other],
    };
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for item in items {
        let parsed = match item {
            Value::String(name) => Variant::parse(name.trim(), None),
            Value::Object(m) if m.len() == 1 => {
                let (name, params) = m.iter().next().expect("one key");
                Variant::parse(name.trim(), Some(params))
            }
            other => Err(format!(
                "variant {other} (expected a name such as `typos`, or `typos: {{rate: 0.08}}`)"
            )),
        };
        match parsed {
            Ok(v) if out.iter().any(|o: &Variant| o.name() == v.name()) => {
                errors.push(format!("variant `{}` is named twice", v.name()))
            }
            Ok(v) => out.push(v),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// `--variants lowercase,typos`: names with their default parameters.
pub fn parse_names(list: &str) -> Result<Vec<Variant>, String> {
    let names: Vec<Value> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| Value::String(s.to_string()))
        .collect();
    parse_list(&Value::Array(names)).map_err(|e| e.join("; "))
}
