//! Keeping the API key out of everything that can be shown: URLs without
//! credentials, and every form in which a reply or an error may echo the
//! key (escaped, encoded) replaced by `<redacted>` before it is read,
//! logged or stored.

use serde_json::Value;

use super::{ErrorMeta, ProviderError};
use crate::domain::Block;

/// Removes the key, in any of the forms a reply may echo it in.
#[derive(Clone, Default)]
pub struct Redactor {
    /// The key as a reply may echo it: as is, JSON-escaped, HTML-escaped and
    /// percent-encoded; longest first. Empty for a key under 4 characters.
    forms: Vec<String>,
    /// A searcher for each of `forms`, built once: every string of every
    /// reply is searched (issue 45: building a searcher per search was 2 %
    /// of a run's CPU).
    finders: Vec<memchr::memmem::Finder<'static>>,
    /// All of `forms` in one automaton: whether a string holds any of them
    /// in one pass over it, not one a form.
    any_form: Option<aho_corasick::AhoCorasick>,
    /// The key itself, for a match escaped in part ([`mixed_spans`]).
    key: String,
    /// The key holds no character a JSON string escapes other than by
    /// `\u` (`"`, `\`, `/`, control characters): see
    /// [`Redactor::scrub_reply`].
    plain: bool,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Redactor(<redacted>)")
    }
}

impl Redactor {
    pub fn new(key: &str) -> Redactor {
        let forms = secret_forms(key.trim());
        Redactor {
            any_form: (!forms.is_empty())
                .then(|| aho_corasick::AhoCorasick::new(&forms).ok())
                .flatten(),
            finders: forms
                .iter()
                .map(|f| memchr::memmem::Finder::new(f.as_bytes()).into_owned())
                .collect(),
            forms,
            key: key.trim().to_string(),
            plain: key
                .trim()
                .bytes()
                .all(|b| b >= 0x20 && !matches!(b, b'"' | b'\\' | b'/')),
        }
    }

    /// Remove the API key, in any of [`secret_forms`], from a string that
    /// may echo it (replies, provider messages, transport errors).
    pub fn scrub(&self, s: &str) -> String {
        let mut out: Option<String> = None;
        for (form, finder) in self.forms.iter().zip(&self.finders) {
            let cur = out.as_deref().unwrap_or(s);
            if finder.find(cur.as_bytes()).is_some() {
                out = Some(cur.replace(form.as_str(), "<redacted>"));
            }
        }
        // A key escaped in part (some characters as entities or `%XX`,
        // the rest as is) matches none of the forms.
        if !self.forms.is_empty() {
            let cur = out.as_deref().unwrap_or(s);
            let spans = mixed_spans(cur, &self.key);
            if !spans.is_empty() {
                let mut scrubbed = String::with_capacity(cur.len());
                let mut at = 0;
                for (start, end) in spans {
                    scrubbed.push_str(&cur[at..start]);
                    scrubbed.push_str("<redacted>");
                    at = end;
                }
                scrubbed.push_str(&cur[at..]);
                out = Some(scrubbed);
            }
        }
        out.unwrap_or_else(|| s.to_string())
    }

    /// Whether `s` holds the key in any form [`Redactor::scrub`] removes.
    fn holds_key(&self, s: &str) -> bool {
        !self.forms.is_empty()
            && (match &self.any_form {
                Some(a) => a.is_match(s),
                None => self.finders.iter().any(|f| f.find(s.as_bytes()).is_some()),
            } || !mixed_spans(s, &self.key).is_empty())
    }

    /// [`Redactor::scrub`] of a reply's raw JSON text, given back as it is
    /// (not copied) when it holds no form of the key, as nearly every reply
    /// does; and whether the strings of the JSON parsed from it must be
    /// scrubbed again ([`Redactor::scrub_value`]). They need not be when the
    /// text held no form of the key, no `\u` escape, and the key no
    /// character another JSON escape stands for: each string then reads in
    /// the text as is, bar escapes of characters the key has none of, so a
    /// key in one would be a key in the text (issue 45: scrubbing each
    /// string of every reply again was 1 % of a run's CPU).
    pub fn scrub_reply(&self, text: String) -> (String, bool) {
        if self.holds_key(&text) {
            (self.scrub(&text), true)
        } else {
            let again = !self.forms.is_empty()
                && (!self.plain || memchr::memmem::find(text.as_bytes(), b"\\u").is_some());
            (text, again)
        }
    }

    /// [`Redactor::scrub`] on every string (and key) of a JSON value.
    pub fn scrub_value(&self, v: &mut Value) {
        match v {
            Value::String(s) if self.holds_key(s) => {
                *s = self.scrub(s);
            }
            Value::Array(items) => items.iter_mut().for_each(|i| self.scrub_value(i)),
            Value::Object(map) => {
                if map.keys().any(|k| self.holds_key(k)) {
                    *map = std::mem::take(map)
                        .into_iter()
                        .map(|(k, v)| (self.scrub(&k), v))
                        .collect();
                }
                map.values_mut().for_each(|i| self.scrub_value(i));
            }
            _ => {}
        }
    }

    pub fn scrub_meta(&self, m: ErrorMeta) -> ErrorMeta {
        ErrorMeta {
            error_type: m.error_type.map(|t| self.scrub(&t)),
            provider_code: m.provider_code.map(|c| self.scrub(&c)),
        }
    }

    pub fn scrub_error(&self, e: ProviderError) -> ProviderError {
        match e {
            ProviderError::Unauthorized { message } => ProviderError::Unauthorized {
                message: self.scrub(&message),
            },
            ProviderError::PaymentRequired { limit, message } => ProviderError::PaymentRequired {
                limit,
                message: self.scrub(&message),
            },
            ProviderError::Rejected {
                status,
                code,
                message,
                meta,
            } => ProviderError::Rejected {
                status,
                code: code.map(|c| self.scrub(&c)),
                message: self.scrub(&message),
                meta: self.scrub_meta(meta),
            },
            ProviderError::Exhausted {
                attempts,
                last,
                meta,
            } => ProviderError::Exhausted {
                attempts,
                last: self.scrub(&last),
                meta: self.scrub_meta(meta),
            },
            ProviderError::Blocked { status, block } => ProviderError::Blocked {
                status,
                block: Box::new(Block {
                    message: self.scrub(&block.message),
                    reasons: block.reasons.iter().map(|r| self.scrub(r)).collect(),
                    flagged_input: block.flagged_input.map(|t| self.scrub(&t)),
                    provider: block.provider.map(|t| self.scrub(&t)),
                    model_slug: block.model_slug.map(|t| self.scrub(&t)),
                    kind: block.kind,
                }),
            },
            ProviderError::WrongApi {
                field,
                status,
                message,
            } => ProviderError::WrongApi {
                field,
                status,
                message: self.scrub(&message),
            },
            ProviderError::Config(m) => ProviderError::Config(self.scrub(&m)),
            // A local error (the client builder, a temp file, the reader
            // task): no request or reply text reaches it.
            e @ ProviderError::ConfigCaused { .. } => e,
            ProviderError::NotSent(m) => ProviderError::NotSent(m),
        }
    }
}

/// `url` as it may be shown: anything before the last `@` (after
/// `scheme://`) replaced by `***`, and any `?query` or `#fragment` by `?…`,
/// whether or not the URL parses (a password or a token never reaches a
/// message).
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let (rest, tail) = match rest.find(['?', '#']) {
        Some(i) => (&rest[..i], "?…"),
        None => (rest, ""),
    };
    match rest.rfind('@') {
        Some(at) => format!("{scheme}***@{}{tail}", &rest[at + 1..]),
        None => format!("{scheme}{rest}{tail}"),
    }
}

/// The forms in which a reply may echo `key`: as is; JSON-escaped as
/// serde does it, with `\/`, as Go does it (`\u003c` for `<`, `>`, `&`),
/// with every character `\u`-escaped, and escaped twice (a JSON text inside
/// a JSON string, as a model's structured reply is); HTML-escaped (named,
/// numeric, every character numeric) and percent-encoded. Distinct,
/// longest first, none under 4 characters. (A real OpenRouter key is
/// letters, digits and `-`, where most of these forms are the key itself.)
fn secret_forms(key: &str) -> Vec<String> {
    if key.len() < 4 {
        return Vec::new();
    }
    let json = |s: &str| {
        let q = serde_json::to_string(s).unwrap_or_default();
        q[1..q.len() - 1].to_string()
    };
    let json1 = json(key);
    let go = json1
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026");
    let every = |upper: bool| -> String {
        key.encode_utf16()
            .map(|u| {
                if upper {
                    format!("\\u{u:04X}")
                } else {
                    format!("\\u{u:04x}")
                }
            })
            .collect()
    };
    let html = |apos: &str| {
        key.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
            .replace('\'', apos)
    };
    let html_numeric: String = key.chars().map(|c| format!("&#{};", c as u32)).collect();
    let percent: String = key
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let mut forms = vec![
        key.to_string(),
        json1.replace('/', "\\/"),
        json(&json1),
        json(&go),
        go,
        every(false),
        every(true),
        json1,
        html("&#39;"),
        html("&#x27;"),
        html("&apos;"),
        html_numeric,
        percent,
    ];
    forms.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    forms.dedup();
    forms.retain(|f| f.len() >= 4);
    forms
}

/// Where `text` holds `key` with any of its characters escaped and the
/// others as is: an HTML entity (`&#x2F;`, `&#47;`, `&sol;`, `&amp;`), a
/// percent escape (`%2F`) or a JSON escape (`\u002f`, `\/`). Byte ranges,
/// in order, not overlapping. Only looked for where an escape could start.
fn mixed_spans(text: &str, key: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let (t, Some(&first)) = (text.as_bytes(), key.as_bytes().first()) else {
        return spans;
    };
    if key.len() < 4 {
        return spans;
    }
    // A span holds an escape, and the key's characters before its first
    // `&`, `%` or `\\` are as is: under `key.len()` bytes. So a span starts
    // at such a byte or at most that far before it, on the key's first
    // byte; only those places are tried (issue 45: trying every byte of
    // every reply was 1 % of a run's CPU). The key as is, with no escape,
    // is one of the forms [`Redactor::scrub`] replaces before this.
    let mut next = 0;
    for e in memchr::memchr3_iter(b'&', b'%', b'\\', t) {
        if e < next {
            continue;
        }
        let from = e.saturating_sub(key.len() - 1).max(next);
        for (start, &b) in t.iter().enumerate().take(e + 1).skip(from) {
            if (start == e || b == first)
                && text.is_char_boundary(start)
                && let Some(end) = match_escaped(text, start, key)
            {
                spans.push((start, end));
                next = end;
                break;
            }
        }
    }
    spans
}

/// The end of `key` read from `text` at `i`, each character as is or
/// escaped (see [`mixed_spans`]). A `&`, `%` or `\\` of the key may be
/// itself or the start of an escape: both are tried.
fn match_escaped(text: &str, i: usize, key: &str) -> Option<usize> {
    let Some(c) = key.chars().next() else {
        return Some(i);
    };
    let rest = text.get(i..)?;
    let tail = &key[c.len_utf8()..];
    if rest.starts_with(c)
        && let Some(end) = match_escaped(text, i + c.len_utf8(), tail)
    {
        return Some(end);
    }
    match escaped_char(rest) {
        Some((d, n)) if d == c => match_escaped(text, i + n, tail),
        _ => None,
    }
}

/// The character an escape at the start of `s` stands for, and its length.
fn escaped_char(s: &str) -> Option<(char, usize)> {
    let hex = |h: &str| u32::from_str_radix(h, 16).ok().and_then(char::from_u32);
    if let Some(rest) = s.strip_prefix('&') {
        let end = rest.get(..rest.len().min(12))?.find(';')?;
        let name = &rest[..end];
        let c = if let Some(h) = name.strip_prefix("#x").or_else(|| name.strip_prefix("#X")) {
            hex(h)?
        } else if let Some(d) = name.strip_prefix('#') {
            char::from_u32(d.parse().ok()?)?
        } else {
            match name {
                "amp" => '&',
                "lt" => '<',
                "gt" => '>',
                "quot" => '"',
                "apos" => '\'',
                "sol" => '/',
                "bsol" => '\\',
                "equals" => '=',
                "colon" => ':',
                "period" => '.',
                "hyphen" => '-',
                "lowbar" => '_',
                "plus" => '+',
                "num" => '#',
                "percnt" => '%',
                "commat" => '@',
                "excl" => '!',
                _ => return None,
            }
        };
        return Some((c, end + 2));
    }
    if let Some(h) = s.strip_prefix('%') {
        let c = hex(h.get(..2)?)?;
        return c.is_ascii().then_some((c, 3));
    }
    if let Some(rest) = s.strip_prefix('\\') {
        if rest.starts_with('/') {
            return Some(('/', 2));
        }
        let h = rest.strip_prefix('u')?.get(..4)?;
        return Some((hex(h)?, 6));
    }
    None
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// [`mixed_spans`] as it was before it tried only the places near an
    /// escape: every byte of the text.
    fn every_byte(text: &str, key: &str) -> Vec<(usize, usize)> {
        let (t, first) = (text.as_bytes(), key.as_bytes()[0]);
        let (mut spans, mut i) = (Vec::new(), 0);
        while i < t.len() {
            let b = t[i];
            if (b == first || matches!(b, b'&' | b'%' | b'\\'))
                && text.is_char_boundary(i)
                && let Some(end) = match_escaped(text, i, key)
            {
                spans.push((i, end));
                i = end;
            } else {
                i += 1;
            }
        }
        spans
    }

    #[test]
    fn spans_are_those_found_by_trying_every_byte() {
        // Texts made of the key's characters, each as is or escaped, and
        // noise around them (including the escape characters themselves):
        // the spans found near escapes are every span trying each byte
        // finds, less the key as is (a form `scrub` replaces first).
        let key = "sk-or-v1-&a%b\\c/é7f";
        let escapes = |c: char, r: &mut ChaCha8Rng| -> String {
            match r.random_range(0..6) {
                0 => format!("&#{};", c as u32),
                1 => format!("&#x{:X};", c as u32),
                2 if c.is_ascii() => format!("%{:02X}", c as u32),
                3 => format!("\\u{:04x}", c as u32),
                4 if c == '/' => "\\/".to_string(),
                _ => c.to_string(),
            }
        };
        let mut rng = ChaCha8Rng::seed_from_u64(45);
        let mut found = 0;
        for _ in 0..3000 {
            let mut text = String::new();
            for _ in 0..rng.random_range(1..4) {
                let noise = ["x", "&", "%", "\\", "s", "sk-", "é", " ", "\\\\"];
                for _ in 0..rng.random_range(0..6) {
                    text.push_str(noise[rng.random_range(0..noise.len())]);
                }
                // The key whole or cut short, escaped here and there.
                let take = rng.random_range(key.chars().count() - 2..=key.chars().count());
                for c in key.chars().take(take) {
                    text.push_str(&escapes(c, &mut rng));
                }
            }
            let want: Vec<_> = every_byte(&text, key)
                .into_iter()
                .filter(|&(s, e)| text.as_bytes()[s..e].iter().any(|b| b"&%\\".contains(b)))
                .collect();
            found += want.len();
            assert_eq!(mixed_spans(&text, key), want, "{text}");
        }
        assert!(found > 1000, "the texts hold escaped keys: {found}");
    }

    #[test]
    fn strings_not_scrubbed_again_are_what_scrubbing_them_gives() {
        // Replies whose strings (and keys) hold the key or most of it, each
        // character as is, `\u`-escaped, `\/`, an entity or `%XX`: taking
        // `scrub_reply`'s word on whether the parsed strings need scrubbing
        // again gives what scrubbing them always gives.
        let piece = |c: char, r: &mut ChaCha8Rng| -> String {
            let json = serde_json::to_string(&c.to_string()).unwrap();
            match r.random_range(0..8) {
                0 => format!("\\u{:04x}", c as u32),
                1 => format!("&#{};", c as u32),
                2 if c.is_ascii_alphanumeric() => format!("%{:02X}", c as u32),
                3 if c == '/' => "\\/".to_string(),
                _ => json[1..json.len() - 1].to_string(),
            }
        };
        for key in ["sk-or-v1-abc123def", "sk/or&v1%x\"y\\z", "ab-<c>-d\u{e9}"] {
            let r = Redactor::new(key);
            let mut rng = ChaCha8Rng::seed_from_u64(45);
            let (mut skipped, mut scrubbed) = (0, 0);
            for _ in 0..3000 {
                let mut string = || {
                    let mut s = String::new();
                    for _ in 0..rng.random_range(0..3) {
                        s.push_str(
                            ["x", " ", "\\n", "\\\"", "&amp;", "%", "\\\\"][rng.random_range(0..7)],
                        );
                        let n = key.chars().count();
                        for c in key.chars().take(rng.random_range(n - 2..=n)) {
                            s.push_str(&piece(c, &mut rng));
                        }
                    }
                    s
                };
                let text = format!(
                    r#"{{"id":"{}","choices":[{{"message":{{"content":"{}"}}}}],"{}":1}}"#,
                    string(),
                    string(),
                    string()
                );
                let parse = |t: &str| {
                    serde_json::from_str::<Value>(t).unwrap_or_else(|e| panic!("{e}: {t}"))
                };
                let always = r.scrub(&text);
                let mut always_v = parse(&always);
                r.scrub_value(&mut always_v);
                let (once, again) = r.scrub_reply(text.clone());
                let mut once_v = parse(&once);
                if again {
                    r.scrub_value(&mut once_v);
                } else {
                    skipped += 1;
                }
                scrubbed += usize::from(always_v.to_string().contains("<redacted>"));
                assert_eq!((&once, &once_v), (&always, &always_v), "{key}: {text}");
            }
            assert!(
                scrubbed > 1000,
                "{key}: the replies hold the key: {scrubbed}"
            );
            if key.starts_with("sk-or") {
                assert!(
                    skipped > 100,
                    "{key}: some replies are not scrubbed again: {skipped}"
                );
            }
        }
    }

    #[test]
    fn a_clean_string_is_given_back_as_it_is_and_a_key_is_scrubbed() {
        let r = Redactor::new("sk-or-v1-abcdef");
        let clean = "a reply with \\\"quotes\\\" & 100% of it clean".to_string();
        let at = clean.as_ptr();
        let same = r.scrub_reply(clean).0;
        assert_eq!(same.as_ptr(), at, "not copied");
        for text in [
            "key sk-or-v1-abcdef here",
            "key sk-or-v1&#45;abcdef here",
            "key sk\\u002dor-v1-abcdef here",
        ] {
            assert_eq!(r.scrub_reply(text.to_string()).0, "key <redacted> here");
        }
    }
}
