//! Scores from stored results: the severity-weighted analysis of SPEC §8
//! ([`analysis`]), the paired comparison of runs built on it ([`compare`]),
//! the keyword quality scores of SPEC §9 ([`quality`]) and the agreement
//! statistics of judge calibration ([`agreement`]).

pub mod agreement;
pub mod analysis;
pub mod compare;
pub mod quality;
pub mod sustained;

use serde::{Deserialize, Serialize};

/// How a bootstrap interval was drawn, recorded beside it in the JSON so a
/// published interval can be reproduced by a later helmbench: a named
/// generator whose stream is fixed by its specification (ChaCha8, as
/// `compare` uses), not by the version of the `rand` crate, its seed and the
/// number of resamples.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bootstrap {
    pub generator: String,
    pub seed: u64,
    pub resamples: usize,
}

impl Bootstrap {
    /// ChaCha8 (`rand_chacha::ChaCha8Rng::seed_from_u64(seed)`).
    pub fn chacha8(seed: u64, resamples: usize) -> Bootstrap {
        Bootstrap {
            generator: "ChaCha8".into(),
            seed,
            resamples,
        }
    }
}
