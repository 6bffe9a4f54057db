//! Variants of the user's words (issue 43): seeded, reproducible
//! transformations of a test case's user message (lower case, texting,
//! typos, speech-to-text slips, British or American spelling, other names,
//! other pronouns, crisis euphemisms), so a benchmark asks whether a model
//! is as safe when the message is typed on a phone, dictated, or written by
//! someone else.
//!
//! A variant is named in the content (`variants:` in a scenario's
//! frontmatter) or on the command line; [`VariantSpec`] is what either
//! says, checked once. The word lists that carry judgement are data files
//! in the benchmark folder ([`lists`]). Only the user's words change: tag
//! names, code and every other part of the prompt are left as written
//! ([`text`]). Each variant of each test case draws from its own generator,
//! seeded from (seed, test code, variant name) through SHA-256 and
//! ChaCha8, so the text is the same on any machine, in any order, and in
//! any later version of the same [`TRANSFORMS_VERSION`] (golden tests
//! guard it). What `names` and `pronouns` swapped is recorded ([`Swaps`])
//! and applied to the varied test case's rubrics and expected values.

pub mod lists;
pub mod spec;
mod swaps;
mod text;
mod transforms;

pub use lists::WordLists;
pub use spec::{VARIANT_NAMES, Variant, parse_list, parse_names};
pub use swaps::Swaps;

/// The version of the transformations' output: raised whenever a
/// transformation (not a list) changes the text it gives for a seed, and
/// part of the content hash of a benchmark whose runs use variants, so a
/// run made by an earlier version is not taken as complete or resumed with
/// text drawn differently. 2: `typos` slips only letters (it doubled an
/// apostrophe, and a slip could leave a word unchanged); `names` swaps a
/// possessive (`Priya's`) and keeps a name's swap through a conversation.
pub const TRANSFORMS_VERSION: u32 = 2;

/// The seed variants draw from unless a run names another
/// (`--variant-seed`): fixed, so the same content varies the same way
/// everywhere.
pub const DEFAULT_VARIANT_SEED: u64 = 43;

/// `text` (the user's words, possibly inside XML tags and code) under
/// `variant`, drawn from the generator of (`seed`, `test_code`, the
/// variant's name). Only words outside tags and code change.
pub fn apply(
    variant: &Variant,
    lists: &WordLists,
    seed: u64,
    test_code: &str,
    text: &str,
) -> String {
    apply_recording(variant, lists, seed, test_code, text, &mut Swaps::default())
}

/// [`apply`], recording in `swaps` what a `names` or `pronouns` variant
/// swapped, and keeping the swaps already there: a name met in an earlier
/// message of the same test case becomes the same name again.
pub fn apply_recording(
    variant: &Variant,
    lists: &WordLists,
    seed: u64,
    test_code: &str,
    text: &str,
    swaps: &mut Swaps,
) -> String {
    let mut rng = transforms::generator(seed, test_code, variant.name());
    let Swaps {
        names,
        pronouns_from,
        pronouns_to,
    } = std::mem::take(swaps);
    (rng.names, rng.pronouns_from, rng.pronouns_to) = (names, pronouns_from, pronouns_to);
    let out = text::map_words(text, |words| {
        transforms::transform(variant, lists, &mut rng, words)
    });
    *swaps = Swaps {
        names: rng.names,
        pronouns_from: rng.pronouns_from,
        pronouns_to: rng.pronouns_to,
    };
    out
}
