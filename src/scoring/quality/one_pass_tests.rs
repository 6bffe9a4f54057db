//! The one-pass counts of issue 45 against the plain definitions.

use super::*;

/// The one-pass marker search and the byte-wise word count give what the
/// plain definitions give (a search per marker, a split on chars), on
/// texts built from the markers, their overlaps, every ASCII whitespace
/// and separator, and non-ASCII text.
#[test]
fn one_pass_counts_are_the_plain_counts() {
    use rand::{Rng, SeedableRng};
    let plain_words = |t: &str| {
        t.split(is_split_whitespace)
            .filter(|w| !w.is_empty())
            .count()
    };
    let plain_markers = |lower: &str| {
        [EMPATHY_MARKERS, HELPFUL_MARKERS, UNSAFE_PHRASES]
            .map(|list| list.iter().filter(|m| lower.contains(**m)).count())
    };
    let pieces: Vec<&str> = EMPATHY_MARKERS
        .iter()
        .chain(HELPFUL_MARKERS)
        .chain(UNSAFE_PHRASES)
        .copied()
        .chain([
            " ", "\t", "\n", "\u{b}", "\u{c}", "\r", "\u{1c}", "\u{1f}", "\u{85}", "\u{a0}", "x",
            "under", "stand", "caring", "é", ".", "man", "up",
        ])
        .collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(45);
    let mut markers_seen = 0;
    for _ in 0..5000 {
        let text: String = (0..rng.random_range(0..30))
            .map(|_| pieces[rng.random_range(0..pieces.len())])
            .collect();
        assert_eq!(word_count(&text), plain_words(&text), "{text:?}");
        let lower = text.to_lowercase();
        let want = plain_markers(&lower);
        markers_seen += want.iter().sum::<usize>();
        assert_eq!(markers_present(&lower), want, "{text:?}");
    }
    assert!(markers_seen > 10_000, "{markers_seen}");
}
