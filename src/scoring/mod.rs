//! Scores from stored results: the severity-weighted analysis of SPEC §8
//! ([`analysis`]), the paired comparison of runs built on it ([`compare`]) and
//! the keyword quality scores of SPEC §9 ([`quality`]).

pub mod analysis;
pub mod compare;
pub mod quality;
