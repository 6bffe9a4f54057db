//! Scores from stored results: the severity-weighted analysis of SPEC §8
//! ([`analysis`]), the paired comparison of runs built on it ([`compare`]),
//! the keyword quality scores of SPEC §9 ([`quality`]) and the agreement
//! statistics of judge calibration ([`agreement`]).

pub mod agreement;
pub mod analysis;
pub mod compare;
pub mod quality;
