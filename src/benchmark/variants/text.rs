//! Which parts of a message are the user's words: everything but the XML
//! tags the H2 headings became (`<user_input>`), fenced code blocks and
//! inline code, which a variant never changes.

/// `text` with every run of the user's words passed through `f` in order,
/// the rest copied as it is.
pub(super) fn map_words(text: &str, mut f: impl FnMut(&str) -> String) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut words = String::new();
    let mut flush = |words: &mut String, out: &mut String| {
        if !words.is_empty() {
            out.push_str(&f(words));
            words.clear();
        }
    };
    let mut in_fence = false;
    for line in text.split_inclusive('\n') {
        let fence = line.trim_start().starts_with("```") || line.trim_start().starts_with("~~~");
        if in_fence || fence {
            flush(&mut words, &mut out);
            out.push_str(line);
            if fence {
                in_fence = !in_fence;
            }
            continue;
        }
        let mut rest = line;
        while !rest.is_empty() {
            match protected_at(rest) {
                Some((start, end)) => {
                    words.push_str(&rest[..start]);
                    flush(&mut words, &mut out);
                    out.push_str(&rest[start..end]);
                    rest = &rest[end..];
                }
                None => {
                    words.push_str(rest);
                    rest = "";
                }
            }
        }
    }
    flush(&mut words, &mut out);
    out
}

/// The first protected span of `s` (an XML tag, or inline code), as byte
/// offsets.
fn protected_at(s: &str) -> Option<(usize, usize)> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'<' => {
                let close = bytes[i + 1..].iter().position(|&b| b == b'>');
                if let Some(len) = close {
                    let inner = &s[i + 1..i + 1 + len];
                    let name = inner.strip_prefix('/').unwrap_or(inner);
                    if !name.is_empty()
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
                    {
                        return Some((i, i + len + 2));
                    }
                }
            }
            b'`' => {
                if let Some(len) = bytes[i + 1..].iter().position(|&b| b == b'`') {
                    return Some((i, i + len + 2));
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_and_code_are_never_passed_on() {
        let text = "<user_input>\nHello `code` World\n```\nFenced Line\n```\nBye\n</user_input>";
        let seen = std::cell::RefCell::new(Vec::new());
        let out = map_words(text, |w| {
            seen.borrow_mut().push(w.to_string());
            w.to_uppercase()
        });
        assert_eq!(
            out,
            "<user_input>\nHELLO `code` WORLD\n```\nFenced Line\n```\nBYE\n</user_input>"
        );
        assert!(
            seen.borrow()
                .iter()
                .all(|w| !w.contains('<') && !w.contains('`'))
        );
        // A `<` that opens no tag is the user's.
        assert_eq!(map_words("a < b > c", |w| w.to_uppercase()), "A < B > C");
    }
}
