//! Scores from stored results: the severity-weighted analysis of SPEC §8
//! ([`analysis`]) and the keyword quality scores of SPEC §9 ([`quality`]).

pub mod analysis;
pub mod quality;
