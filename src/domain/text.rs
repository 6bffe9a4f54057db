//! Text as errors, warnings and reports show it.

/// The start of `s` on one line: whitespace runs collapsed, at most `max`
/// characters, `…` when cut. The one excerpt of a reply, error or rubric
/// that errors, reports and warnings show.
pub fn excerpt(s: &str, max: usize) -> String {
    let mut out = String::new();
    let mut chars = 0;
    for word in s.split_whitespace() {
        if chars > 0 {
            out.push(' ');
            chars += 1;
        }
        for c in word.chars() {
            if chars == max {
                out.push('…');
                return out;
            }
            out.push(c);
            chars += 1;
        }
    }
    out
}
