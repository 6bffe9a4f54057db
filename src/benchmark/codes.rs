//! Codes and their order (SPEC §3): `P1-B1-S1-C1-U1-PT1` segments, draft
//! letters (`S1A`), readability suffixes (`S1--basic-threat`), and the
//! natural order in which every list of codes is shown (`PT2` before `PT10`).

use std::cmp::Ordering;

/// Strips a readability suffix: `S1--basic-threat` -> `S1`.
pub fn strip_suffix(name: &str) -> &str {
    name.split_once("--").map_or(name, |(code, _)| code)
}

/// One segment of a code: letters, a number, an optional draft letter.
/// `PT10` -> ("PT", 10, ""), `S1A` -> ("S", 1, "A").
pub fn parse_segment(seg: &str) -> Option<(&str, u64, &str)> {
    let letters = seg.find(|c: char| c.is_ascii_digit())?;
    let (prefix, rest) = seg.split_at(letters);
    if prefix.is_empty() || !prefix.chars().all(|c| c.is_ascii_uppercase()) {
        return None;
    }
    let digits_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (digits, draft) = rest.split_at(digits_end);
    if digits.len() > 9 || !draft.chars().all(|c| c.is_ascii_uppercase()) || draft.len() > 2 {
        return None;
    }
    Some((prefix, digits.parse().ok()?, draft))
}

/// Whether `seg` is a segment with the given letter prefix (`C3`, `PT10`, `S1A`).
pub fn is_segment(seg: &str, prefix: &str) -> bool {
    parse_segment(seg).is_some_and(|(p, _, _)| p == prefix)
}

/// Natural order of codes: `PT2` before `PT10`, `S1` before `S1A` before `S2`.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let mut xs = a.split('-');
    let mut ys = b.split('-');
    loop {
        match (xs.next(), ys.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let ord = match (parse_segment(x), parse_segment(y)) {
                    (Some((px, nx, dx)), Some((py, ny, dy))) => {
                        px.cmp(py).then(nx.cmp(&ny)).then(dx.cmp(dy))
                    }
                    _ => x.cmp(y),
                };
                if ord != Ordering::Equal {
                    return ord;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut v = vec![
            "P1-B1-S1-C1-PT10",
            "P1-B1-S1-C1-PT2",
            "P1-B1-S1A",
            "P1-B1-S2",
            "P1-B1-S1",
            "P10-B1-S1",
            "P2-B1-S1",
        ];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            v,
            vec![
                "P1-B1-S1",
                "P1-B1-S1-C1-PT2",
                "P1-B1-S1-C1-PT10",
                "P1-B1-S1A",
                "P1-B1-S2",
                "P2-B1-S1",
                "P10-B1-S1"
            ]
        );
    }

    #[test]
    fn segments() {
        assert_eq!(parse_segment("PT10"), Some(("PT", 10, "")));
        assert_eq!(parse_segment("S1A"), Some(("S", 1, "A")));
        assert_eq!(parse_segment("s1"), None);
        assert_eq!(parse_segment("S"), None);
        assert_eq!(parse_segment("S1-"), None);
        assert_eq!(strip_suffix("S1--basic-threat"), "S1");
    }
}
