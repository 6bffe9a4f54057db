//! The fuzz targets' invariant checks, also replayed by the main crate's tests.
pub mod checks;
