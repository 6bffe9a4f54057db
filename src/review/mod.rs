//! Human review of the judge: the labelling sheet a rater fills in (a
//! sample of judged criteria, stratified, with an integrity column) and
//! reading it back, row by row, refusing a sheet that was edited where it
//! must not be. The labels go to the store; `report::calibration` compares
//! them with the judge.

mod sheet;

pub use sheet::{
    Checked, ReadRow, SheetError, SheetRow, Stratify, check, read, rows, select, sheet_run_id,
    verdict_class, write_csv, write_jsonl,
};
