//! Each variant's change to a run of the user's words. Draws come from the
//! variant's own ChaCha8 stream as raw 64-bit words mapped here (never
//! through a library's range sampling, whose algorithm may change between
//! versions), so a seed gives the same text in every version.

use std::collections::{BTreeMap, HashMap};

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::lists::{PronounSet, WordLists};
use super::spec::Variant;
use crate::benchmark::hash::sha256;

/// The generator of one variant of one test case.
pub(super) struct Draws {
    rng: ChaCha8Rng,
    /// What `names` swapped so far: each name met and the one it became,
    /// so a name is replaced the same way throughout (handed on to the
    /// rubric and the overrides as `Swaps`, with the next two).
    pub(super) names: BTreeMap<String, String>,
    /// `pronouns`: the sets whose forms were met, and the set they became.
    pub(super) pronouns_from: BTreeMap<String, PronounSet>,
    pub(super) pronouns_to: Option<(String, PronounSet)>,
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
        names: BTreeMap::new(),
        pronouns_from: BTreeMap::new(),
        pronouns_to: None,
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
pub(super) struct Token {
    pub(super) text: String,
    pub(super) word: bool,
}

pub(super) fn tokens(s: &str) -> Vec<Token> {
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

pub(super) fn join(tokens: &[Token]) -> String {
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

/// One slip of the keyboard in `word`, at a letter other than its first:
/// a neighbouring key, two letters swapped, one left out or doubled. Only
/// letters move: an apostrophe or a hyphen is never doubled, swapped or
/// dropped (a thumb misses a letter; it does not type `can''t`), and the
/// word always changes (a slip that would leave it as it was, such as
/// swapping two equal letters, leaves the letter out instead).
fn slip(word: &str, d: &mut Draws) -> String {
    let mut c: Vec<char> = word.chars().collect();
    let letters: Vec<usize> = (1..c.len()).filter(|&i| c[i].is_alphabetic()).collect();
    if letters.is_empty() {
        return word.to_string();
    }
    let op = d.index(4);
    let at = letters[d.index(letters.len())];
    let is_letter = |i: usize, c: &[char]| i >= 1 && i < c.len() && c[i].is_alphabetic();
    match op {
        0 => {
            let lower = c[at].to_ascii_lowercase();
            let near = neighbours(lower);
            if near.is_empty() {
                // A letter off the QWERTY letters (an accent): doubled.
                c.insert(at, c[at]);
            } else {
                let n = near.chars().nth(d.index(near.len())).unwrap_or(lower);
                c[at] = if c[at].is_uppercase() {
                    n.to_ascii_uppercase()
                } else {
                    n
                };
            }
        }
        1 => {
            let other = if is_letter(at + 1, &c) {
                Some(at + 1)
            } else if is_letter(at - 1, &c) {
                Some(at - 1)
            } else {
                None
            };
            match other {
                Some(o) if c[o] != c[at] => c.swap(at, o),
                _ => {
                    c.remove(at);
                }
            }
        }
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

/// Every form of the sets `from` in `t` made `target`'s (a subject's verb
/// agreeing); each set met is added to `met`.
pub(super) fn swap_pronouns<'a>(
    mut t: Vec<Token>,
    from: impl Iterator<Item = (&'a String, &'a PronounSet)> + Clone,
    (to, target): (&str, &PronounSet),
    met: &mut BTreeMap<String, PronounSet>,
) -> Vec<Token> {
    let plural_target = to == "they";
    let mut i = 0;
    while i < t.len() {
        if !t[i].word {
            i += 1;
            continue;
        }
        let w = t[i].text.to_lowercase();
        let mut new: Option<&str> = None;
        let mut subject = false;
        for (key, set) in from.clone().filter(|(k, _)| k.as_str() != to) {
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
                met.entry(key.clone()).or_insert_with(|| set.clone());
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

fn pronouns(t: Vec<Token>, lists: &WordLists, to: &str, d: &mut Draws) -> Vec<Token> {
    let Some(target) = lists.pronouns.get(to) else {
        return t;
    };
    let t = swap_pronouns(t, lists.pronouns.iter(), (to, target), &mut d.pronouns_from);
    if !d.pronouns_from.is_empty() {
        d.pronouns_to = Some((to.to_string(), target.clone()));
    }
    t
}

/// A name with what follows it in its word: `Priya's` → (`Priya`, `'s`).
pub(super) fn name_and_suffix(w: &str) -> (&str, &str) {
    for suffix in ["'s", "\u{2019}s", "'", "\u{2019}"] {
        if let Some(stem) = w.strip_suffix(suffix) {
            return (stem, &w[stem.len()..]);
        }
    }
    (w, "")
}

/// Each word of `t` through `f` (None: kept as it is).
pub(super) fn map_words(t: Vec<Token>, mut f: impl FnMut(&str) -> Option<String>) -> Vec<Token> {
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
                // `Priya's` is Priya's name too.
                let (name, suffix) = name_and_suffix(w);
                if !known.contains(name) {
                    return None;
                }
                if let Some(n) = d.names.get(name) {
                    return Some(format!("{n}{suffix}"));
                }
                let others: Vec<&String> = pool.iter().filter(|n| *n != name).collect();
                let n = others.get(d.index(others.len().max(1)))?.to_string();
                d.names.insert(name.to_string(), n.clone());
                Some(format!("{n}{suffix}"))
            }))
        }
        Variant::Pronouns { to } => join(&pronouns(t, lists, to, d)),
        Variant::Euphemisms => join(&replace_phrases(t, &lists.euphemisms, |forms| {
            forms[d.index(forms.len())].clone()
        })),
    }
}
