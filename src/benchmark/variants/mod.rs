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
//! any later version (golden tests guard it).

pub mod lists;
pub mod spec;
mod text;
mod transforms;

pub use lists::WordLists;
pub use spec::{VARIANT_NAMES, Variant, parse_list, parse_names};

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
    let mut rng = transforms::generator(seed, test_code, variant.name());
    text::map_words(text, |words| {
        transforms::transform(variant, lists, &mut rng, words)
    })
}
