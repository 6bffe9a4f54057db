//! Reading results back for people and scripts: one run's results with their
//! judgements (`run-single`), the inputs of the severity-weighted analysis with
//! the per-model quality section and the judged criteria (`report`), and the
//! spend per run, model and scenario (`costs`). `export` lives in
//! [`crate::report::export`]; the text tables of `report` and `costs` in
//! [`crate::report::text`]; the HTML pages (report and compare, maud
//! templates whose pieces `helmbench view` shares) in
//! [`crate::report::html`]; the paired comparison of runs in
//! [`crate::report::compare`].

pub mod calibration;
mod calibration_view;
pub mod compare;
pub mod export;
pub mod export_turns;
mod format;
pub mod html;
pub mod kept;
mod model;
mod quality;
pub mod robustness;
pub mod routing;
mod sustained;
mod tally;
pub mod terminal;
pub mod text;

pub use format::{
    coverage, dollars_known, p_value, pct, pct_ci, pct_range, points, points_ci, usd, usd_known,
};
pub use model::{
    CostReport, CriterionSummary, CriterionVerdict, FailedCase, JudgeCost, ModelCost, ModelReport,
    RunCost, ScenarioCost, ScoringUsed, Spend, Target, analysed, costs, criteria, failures,
    model_report, model_reports, select_runs,
};
pub use quality::{FlagSummary, QualityExample, QualitySummary, excerpt};
pub use tally::Tally;
