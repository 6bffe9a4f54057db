//! Judging a model's reply (SPEC §4): parsing it against the scenario's
//! schema, the deterministic checks, and the LLM judge for `sqe`/`mcsqe`.

pub mod checks;
pub mod judge;
pub mod reply;
