//! helmbench: runs the HELMBench mental-health safety benchmark against LLMs
//! through OpenRouter, judges the replies, stores everything in SQLite and
//! reports costs and severity-weighted scores.
//!
//! The flow, one module per stage (each opens with its place in it):
//!
//! ```text
//! files ──content──▶ benchmark ──cases + compose──▶ prompts
//!                        │                             │
//!                        │            run (plan, workers, writer)
//!                        │                             │ openrouter (HTTP, reply classification)
//!                        │                             ▼
//!                        │            judging (parse reply, checks, LLM judge)
//!                        │                             │
//!                        ▼                             ▼
//!                      store (SQLite: seed, runs, results, reads)
//!                                                      │
//!                          scoring (SPEC §8 analysis, §9 keyword scores)
//!                                                      │
//!                          report (text, HTML, JSON, costs, export) ◀── cli
//! ```
//!
//! - [`content`] reads the benchmark folder (markdown, YAML, schemas) into
//!   the domain of [`benchmark`], collecting every content error, and lints it.
//! - [`benchmark`] is the domain: scenarios, components, evaluations, codes,
//!   test cases, selectors and prompt composition.
//! - [`run`] plans and runs batches (and the dry-run); [`openrouter`] is the
//!   HTTP client; [`judging`] turns a reply into a verdict.
//! - [`store`] owns every SQL statement and maps its rows to the types of
//!   [`domain`] (the leaf every module shares); [`scoring`] and [`report`]
//!   read what it returns.
//! - [`cli`] turns arguments into validated values and calls the rest;
//!   [`error`] maps every failure to an [`ExitStatus`].

pub mod benchmark;
pub mod cli;
pub mod content;
pub mod domain;
pub mod error;
pub mod judging;
pub mod openrouter;
pub mod report;
pub mod review;
pub mod run;
pub mod scoring;
pub mod store;
pub mod view;

pub use error::{Error, ExitStatus, Result};
