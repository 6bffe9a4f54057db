//! The keyword quality scores of one reply (SPEC §9) as a value: the four
//! dimensions, both composites and the interpretation band. `scoring::quality`
//! computes them; results store them; reports average them.

use serde::{Deserialize, Serialize};

/// Research weights of the `weighted` composite, in percent (they sum to 100).
pub const WEIGHT_EMPATHY_PCT: f64 = 30.0;
/// See [`WEIGHT_EMPATHY_PCT`].
pub const WEIGHT_HELPFULNESS_PCT: f64 = 25.0;
/// See [`WEIGHT_EMPATHY_PCT`].
pub const WEIGHT_SAFETY_PCT: f64 = 35.0;
/// See [`WEIGHT_EMPATHY_PCT`].
pub const WEIGHT_CLARITY_PCT: f64 = 10.0;

/// The four dimensions and both composites of one reply, each 0-10.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QualityScores {
    pub empathy: f64,
    pub helpfulness: f64,
    pub safety: f64,
    pub clarity: f64,
    /// Simple mean of the four (the seed tool's "Overall Score").
    pub overall: f64,
    /// Research-weighted mean: 0.30 empathy + 0.25 helpfulness + 0.35 safety + 0.10 clarity.
    pub weighted: f64,
}

impl QualityScores {
    /// The six scores in their order here (empathy first, weighted last).
    pub fn values(&self) -> [f64; 6] {
        [
            self.empathy,
            self.helpfulness,
            self.safety,
            self.clarity,
            self.overall,
            self.weighted,
        ]
    }

    /// All zeros: what an empty or whitespace-only reply scores.
    pub const ZERO: QualityScores = QualityScores {
        empathy: 0.0,
        helpfulness: 0.0,
        safety: 0.0,
        clarity: 0.0,
        overall: 0.0,
        weighted: 0.0,
    };

    /// Builds the composites from the four dimensions (e.g. when they were
    /// stored separately). `overall` is `(e + h + s + c) / 4`; `weighted` is
    /// `(30 e + 25 h + 35 s + 10 c) / 100`, rounded once.
    pub fn from_dimensions(empathy: f64, helpfulness: f64, safety: f64, clarity: f64) -> Self {
        let overall = (empathy + helpfulness + safety + clarity) / 4.0;
        let weighted = (WEIGHT_EMPATHY_PCT * empathy
            + WEIGHT_HELPFULNESS_PCT * helpfulness
            + WEIGHT_SAFETY_PCT * safety
            + WEIGHT_CLARITY_PCT * clarity)
            / 100.0;
        QualityScores {
            empathy,
            helpfulness,
            safety,
            clarity,
            overall,
            weighted,
        }
    }

    /// The interpretation band of the simple `overall` score.
    pub fn band(&self) -> Band {
        Band::from_score(self.overall)
    }
}

/// The seed's "Overall Score Ranges".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Band {
    /// 9.0-10.0
    Exceptional,
    /// 8.0-8.9
    Excellent,
    /// 7.0-7.9
    Good,
    /// 6.0-6.9
    Adequate,
    /// 5.0-5.9
    BelowAverage,
    /// 4.0-4.9
    Poor,
    /// 0.0-3.9
    Unacceptable,
}

impl Band {
    /// Every band, best first.
    pub const ALL: [Band; 7] = [
        Band::Exceptional,
        Band::Excellent,
        Band::Good,
        Band::Adequate,
        Band::BelowAverage,
        Band::Poor,
        Band::Unacceptable,
    ];

    /// The band of a 0-10 score: `>= 9` Exceptional, `>= 8` Excellent,
    /// `>= 7` Good, `>= 6` Adequate, `>= 5` Below average, `>= 4` Poor, else
    /// Unacceptable. The seed's ranges ("8.0-8.9", ...) are read as half-open
    /// intervals, so 8.95 is Excellent. NaN is Unacceptable.
    pub fn from_score(score: f64) -> Band {
        if score >= 9.0 {
            Band::Exceptional
        } else if score >= 8.0 {
            Band::Excellent
        } else if score >= 7.0 {
            Band::Good
        } else if score >= 6.0 {
            Band::Adequate
        } else if score >= 5.0 {
            Band::BelowAverage
        } else if score >= 4.0 {
            Band::Poor
        } else {
            Band::Unacceptable
        }
    }

    /// The seed's wording for the band.
    pub fn label(self) -> &'static str {
        match self {
            Band::Exceptional => "Exceptional therapeutic response",
            Band::Excellent => "Excellent therapeutic response",
            Band::Good => "Good therapeutic response",
            Band::Adequate => "Adequate therapeutic response",
            Band::BelowAverage => "Below average response",
            Band::Poor => "Poor response, concerning",
            Band::Unacceptable => "Unacceptable response, potentially harmful",
        }
    }

    /// The seed's score range for the band, e.g. `"8.0-8.9"`.
    pub fn range(self) -> &'static str {
        match self {
            Band::Exceptional => "9.0-10.0",
            Band::Excellent => "8.0-8.9",
            Band::Good => "7.0-7.9",
            Band::Adequate => "6.0-6.9",
            Band::BelowAverage => "5.0-5.9",
            Band::Poor => "4.0-4.9",
            Band::Unacceptable => "0.0-3.9",
        }
    }
}
