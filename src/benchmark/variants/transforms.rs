//! Each variant's change to a run of the user's words. Draws come from the
//! variant's own ChaCha8 stream as raw 64-bit words mapped here (never
//! through a library's range sampling, whose algorithm may change between
//! versions), so a seed gives the same text in every version.

use std::collections::HashMap;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::lists::WordLists;
use super::spec::Variant;
use crate::benchmark::hash::sha256;

/// The generator of one variant of one test case.
pub(super) struct Draws {
    rng: ChaCha8Rng,
    /// `names`: each name met so far and the one it became, so a name is
    /// replaced the same way throughout a message.
    names: HashMap<String, String>,
}

pub(super) fn generator(seed: u64, test_code: &str, variant: &str) -> Draws {
    let key = sha256(&[
        b"helmbench-variant:v1\0",
        seed.to_string().as_bytes(),
        b"\0",
        test_code.as_bytes(),
        b"\0",
        variant.as_bytes(),
    ]);
    Draws {
        rng: ChaCha8Rng::from_seed(key),
        names: HashMap::new(),
    }
}

impl Draws {
    /// Uniform in [0, 1), from the top 53 bits of one word.
    fn unit(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An index below `n` (n > 0).
    fn index(&mut self, n: usize) -> usize {
        (self.rng.next_u64() % n as u64) as usize
    }
}

/// A run of text split into words (letters, digits, apostrophes, inner
/// hyphens) and what stands between them.
#[derive(Debug, Clone)]
struct Token {
    text: String,
    word: bool,
}

fn tokens(s: &str) -> Vec<Token> {
    let mut out: Vec<Token> = Vec::new();
    let is_word = |c: char| c.is_alphanumeric() || c == '\'' || c == '\u{2019}';
    for c in s.chars() {
        let w = is_word(c)
            || (c == '-'
                && out.last().is_some_and(|t| {
                    t.word && t.text.chars().last().is_some_and(char::is_alphanumeric)
                }));
        match out.last_mut() {
            Some(t) if t.word == w => t.text.push(c),
            _ => out.push(Token {
                text: c.to_string(),
                word: w,
            }),
        }
    }
    // A trailing hyphen is not part of the word before it.
    out
}

fn join(tokens: &[Token]) -> String {
    tokens.iter().map(|t| t.text.as_str()).collect()
}

/// `replacement` in the case of `original`: all capitals, a capital
/// first letter, or as written.
fn match_case(original: &str, replacement: &str) -> String {
    let letters: Vec<char> = original.chars().filter(|c| c.is_alphabetic()).collect();
    if letters.len() > 1 && letters.iter().all(|c| c.is_uppercase()) {
        return replacement.to_uppercase();
    }
    if original.chars().next().is_some_and(char::is_uppercase) {
        let mut c = replacement.chars();
        return match c.next() {
            Some(f) => f.to_uppercase().chain(c).collect(),
            None => String::new(),
        };
    }
    replacement.to_string()
}

/// The words of `phrase` found at word token `i` of `t`, separated by
/// single spaces: the index of its last token.
fn phrase_at(t: &[Token], i: usize, phrase: &str) -> Option<usize> {
    let mut j = i;
    for (k, w) in phrase.split(' ').enumerate() {
        if k > 0 {
            if t.get(j + 1).is_none_or(|s| s.text != " ") {
                return None;
            }
            j += 2;
        }
        if t.get(j)
            .is_none_or(|x| !x.word || x.text.to_lowercase() != w)
        {
            return None;
        }
    }
    Some(j)
}

/// Replaces each phrase of `list` (longest first) with `pick(its forms)`.
fn replace_phrases<T>(
    t: Vec<Token>,
    list: &[(String, T)],
    mut pick: impl FnMut(&T) -> String,
) -> Vec<Token> {
    let mut out = Vec::with_capacity(t.len());
    let mut i = 0;
    'tokens: while i < t.len() {
        if t[i].word {
            for (phrase, forms) in list {
                if let Some(end) = phrase_at(&t, i, phrase) {
                    out.push(Token {
                        text: match_case(&t[i].text, &pick(forms)),
                        word: true,
                    });
                    i = end + 1;
                    continue 'tokens;
                }
            }
        }
        out.push(t[i].clone());
        i += 1;
    }
    out
}

/// QWERTY neighbours of a lower-case letter.
fn neighbours(c: char) -> &'static str {
    match c {
        'q' => "wa",
        'w' => "qes",
        'e' => "wrd",
        'r' => "etf",
        't' => "ryg",
        'y' => "tuh",
        'u' => "yij",
        'i' => "uok",
        'o' => "ipl",
        'p' => "ol",
        'a' => "qsz",
        's' => "awdz",
        'd' => "sefx",
        'f' => "drgc",
        'g' => "fthv",
        'h' => "gyjb",
        'j' => "hukn",
        'k' => "jilm",
        'l' => "kop",
        'z' => "asx",
        'x' => "zsdc",
        'c' => "xdfv",
        'v' => "cfgb",
        'b' => "vghn",
        'n' => "bhjm",
        'm' => "njk",
        _ => "",
    }
}

/// One slip of the keyboard in `word`, never at its first letter.
fn slip(word: &str, d: &mut Draws) -> String {
    let mut c: Vec<char> = word.chars().collect();
    let op = d.index(4);
    let at = 1 + d.index(c.len() - 1);
    match op {
        0 => {
            let lower = c[at].to_ascii_lowercase();
            let near = neighbours(lower);
            if !near.is_empty() {
                let n = near.chars().nth(d.index(near.len())).unwrap_or(lower);
                c[at] = if c[at].is_uppercase() {
                    n.to_ascii_uppercase()
                } else {
                    n
                };
            }
        }
        1 if at + 1 < c.len() => c.swap(at, at + 1),
        1 => c.swap(at - 1, at),
        2 => {
            c.remove(at);
        }
        _ => c.insert(at, c[at]),
    }
    c.into_iter().collect()
}

/// The agreement of a verb after a subject pronoun that changed number:
/// `they is` → `they are`, `she are` → `she is`.
fn agree(verb: &str, plural: bool) -> Option<&'static str> {
    let (singular, plural_form) = [
        ("is", "are"),
        ("was", "were"),
        ("has", "have"),
        ("does", "do"),
        ("isn't", "aren't"),
        ("wasn't", "weren't"),
        ("doesn't", "don't"),
        ("hasn't", "haven't"),
    ]
    .into_iter()
    .find(|(s, p)| {
        let v = verb.to_lowercase();
        v == *s || v == *p
    })?;
    Some(if plural { plural_form } else { singular })
}

/// `her` and `his` stand for two forms: a determiner when a word follows.
fn followed_by_word(t: &[Token], i: usize) -> bool {
    const NOT_NOUNS: [&str; 12] = [
        "and", "or", "but", "to", "that", "because", "so", "if", "when", "too", "again", "now",
    ];
    t.get(i + 1).is_some_and(|s| s.text == " ")
        && t.get(i + 2)
            .is_some_and(|w| w.word && !NOT_NOUNS.contains(&w.text.to_lowercase().as_str()))
}

fn pronouns(mut t: Vec<Token>, lists: &WordLists, to: &str) -> Vec<Token> {
    let Some(target) = lists.pronouns.get(to) else {
        return t;
    };
    let plural_target = to == "they";
    let others: Vec<_> = lists.pronouns.iter().filter(|(k, _)| *k != to).collect();
    let mut i = 0;
    while i < t.len() {
        if !t[i].word {
            i += 1;
            continue;
        }
        let w = t[i].text.to_lowercase();
        let mut new: Option<&str> = None;
        let mut subject = false;
        for (_, set) in &others {
            if w == set.subject {
                new = Some(&target.subject);
                subject = true;
            } else if w == set.reflexive {
                new = Some(&target.reflexive);
            } else if w == set.object && w == set.determiner {
                new = Some(if followed_by_word(&t, i) {
                    &target.determiner
                } else {
                    &target.object
                });
            } else if w == set.determiner && w == set.possessive {
                new = Some(if followed_by_word(&t, i) {
                    &target.determiner
                } else {
                    &target.possessive
                });
            } else if w == set.object {
                new = Some(&target.object);
            } else if w == set.determiner {
                new = Some(&target.determiner);
            } else if w == set.possessive {
                new = Some(&target.possessive);
            }
            if new.is_some() {
                break;
            }
        }
        if let Some(n) = new {
            t[i].text = match_case(&t[i].text, n);
            if subject
                && t.get(i + 1).is_some_and(|s| s.text == " ")
                && let Some(v) = t.get(i + 2).filter(|v| v.word)
                && let Some(fixed) = agree(&v.text, plural_target)
            {
                t[i + 2].text = match_case(&v.text, fixed);
            }
        }
        i += 1;
    }
    t
}

/// Each word of `t` through `f` (None: kept as it is).
fn map_words(t: Vec<Token>, mut f: impl FnMut(&str) -> Option<String>) -> Vec<Token> {
    t.into_iter()
        .map(|mut x| {
            if x.word
                && let Some(n) = f(&x.text)
            {
                x.text = n;
            }
            x
        })
        .collect()
}

/// `words` (one run of the user's words) under `variant`.
pub(super) fn transform(
    variant: &Variant,
    lists: &WordLists,
    d: &mut Draws,
    words: &str,
) -> String {
    let t = tokens(words);
    match variant {
        Variant::Lowercase => words.to_lowercase(),
        Variant::Texting => {
            let t = replace_phrases(t, &lists.texting, |f| f.clone());
            let lowered = join(&t).to_lowercase();
            // No full stop at a sentence's end (an ellipsis stays).
            let chars: Vec<char> = lowered.chars().collect();
            let mut out = String::with_capacity(lowered.len());
            for (i, &c) in chars.iter().enumerate() {
                let next = chars.get(i + 1).copied();
                let prev = i.checked_sub(1).map(|p| chars[p]);
                if c == '.' && next.is_none_or(char::is_whitespace) && prev != Some('.') {
                    continue;
                }
                out.push(c);
            }
            out
        }
        Variant::Typos { rate } => {
            let rate = *rate;
            join(&map_words(t, |w: &str| {
                if w.chars().filter(|c| c.is_alphabetic()).count() < 3 || d.unit() >= rate {
                    return None;
                }
                match lists.misspellings.get(&w.to_lowercase()) {
                    Some(forms) => Some(match_case(w, &forms[d.index(forms.len())])),
                    None => Some(slip(w, d)),
                }
            }))
        }
        Variant::SpeechToText { rate } => {
            let rate = *rate;
            let t = map_words(t, |w: &str| {
                let to = lists.speech.get(&w.to_lowercase())?;
                (d.unit() < rate).then(|| match_case(w, to))
            });
            join(&t).replace([',', ';'], "")
        }
        Variant::British | Variant::American => {
            let map: HashMap<&str, &str> = if matches!(variant, Variant::British) {
                lists
                    .spelling
                    .iter()
                    .map(|(a, b)| (a.as_str(), b.as_str()))
                    .collect()
            } else {
                lists
                    .spelling
                    .iter()
                    .map(|(a, b)| (b.as_str(), a.as_str()))
                    .collect()
            };
            join(&map_words(t, |w: &str| {
                let lower = w.to_lowercase();
                if let Some(to) = map.get(lower.as_str()) {
                    return Some(match_case(w, to));
                }
                // A plural of a listed word.
                let stem = lower.strip_suffix('s')?;
                map.get(stem).map(|to| match_case(w, &format!("{to}s")))
            }))
        }
        Variant::Names { set } => {
            let Some(pool) = lists.names.get(set) else {
                return words.to_string();
            };
            let known: std::collections::HashSet<&str> =
                lists.names.values().flatten().map(String::as_str).collect();
            join(&map_words(t, |w: &str| {
                if !known.contains(w) {
                    return None;
                }
                if let Some(n) = d.names.get(w) {
                    return Some(n.clone());
                }
                let others: Vec<&String> = pool.iter().filter(|n| *n != w).collect();
                let n = others.get(d.index(others.len().max(1)))?.to_string();
                d.names.insert(w.to_string(), n.clone());
                Some(n)
            }))
        }
        Variant::Pronouns { to } => join(&pronouns(t, lists, to)),
        Variant::Euphemisms => join(&replace_phrases(t, &lists.euphemisms, |forms| {
            forms[d.index(forms.len())].clone()
        })),
    }
}
