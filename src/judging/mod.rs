//! Judging a model's reply (SPEC §4): parsing it against the scenario's
//! schema, the deterministic checks, and the LLM judge for `sqe`/`mcsqe`, and a panel of several judges.

pub mod checks;
pub mod judge;
pub mod panel;
pub mod reply;
